/* Datatype calls MPICH's own tests cover only in part: every constructor's arguments come
 * back from MPI_Type_get_envelope / MPI_Type_get_contents (after the types it was made of
 * are freed), subarray and darray lay out as MPICH does, external32 is big-endian, type
 * attributes are copied by MPI_Type_dup and deleted by MPI_Type_free, MPI_Get_elements counts
 * basic elements of partial and huge types, the large-count (_c) calls. One rank. */
#include <mpi.h>
#include <stdint.h>
#include <string.h>
#include "check.h"

/* The envelope and contents of `t` are (combiner, ints, aints, ntypes); each returned
 * derived type is freed. */
static void expect_contents(MPI_Datatype t, int combiner, int ni, const int *ints, int na,
                            const MPI_Aint *aints, int nt) {
    int gi, ga, gt, gc;
    MPI_Type_get_envelope(t, &gi, &ga, &gt, &gc);
    CHECK(gc == combiner && gi == ni && ga == na && gt == nt, "envelope %d %d %d %d, want %d %d %d %d",
          gc, gi, ga, gt, combiner, ni, na, nt);
    if (gi != ni || ga != na || gt != nt || gc == MPI_COMBINER_NAMED) return;
    int ri[64];
    MPI_Aint ra[64];
    MPI_Datatype rt[64];
    MPI_Type_get_contents(t, 64, 64, 64, ri, ra, rt);
    for (int i = 0; i < ni; i++) CHECK(ri[i] == ints[i], "combiner %d int %d: %d, want %d", combiner, i, ri[i], ints[i]);
    for (int i = 0; i < na; i++) CHECK(ra[i] == aints[i], "combiner %d aint %d: %ld, want %ld", combiner, i, (long) ra[i], (long) aints[i]);
    for (int i = 0; i < nt; i++) {
        int ci, ca, ct, cc;
        MPI_Type_get_envelope(rt[i], &ci, &ca, &ct, &cc);
        if (cc != MPI_COMBINER_NAMED) MPI_Type_free(&rt[i]);
    }
}

static void round_trips(void) {
    MPI_Datatype t, inner;
    int lens[3] = {1, 2, 3}, displs[3] = {0, 5, 11};
    MPI_Aint adispls[3] = {0, 40, 88};
    MPI_Type_contiguous(3, MPI_INT, &t);
    expect_contents(t, MPI_COMBINER_CONTIGUOUS, 1, (int[]){3}, 0, NULL, 1);
    MPI_Type_free(&t);
    MPI_Type_vector(4, 2, 5, MPI_DOUBLE, &t);
    expect_contents(t, MPI_COMBINER_VECTOR, 3, (int[]){4, 2, 5}, 0, NULL, 1);
    MPI_Type_free(&t);
    MPI_Type_create_hvector(4, 2, 48, MPI_DOUBLE, &t);
    expect_contents(t, MPI_COMBINER_HVECTOR, 2, (int[]){4, 2}, 1, (MPI_Aint[]){48}, 1);
    MPI_Type_free(&t);
    MPI_Type_indexed(3, lens, displs, MPI_INT, &t);
    expect_contents(t, MPI_COMBINER_INDEXED, 7, (int[]){3, 1, 2, 3, 0, 5, 11}, 0, NULL, 1);
    MPI_Type_free(&t);
    MPI_Type_create_hindexed(3, lens, adispls, MPI_INT, &t);
    expect_contents(t, MPI_COMBINER_HINDEXED, 4, (int[]){3, 1, 2, 3}, 3, adispls, 1);
    MPI_Type_free(&t);
    MPI_Type_create_indexed_block(3, 2, displs, MPI_INT, &t);
    expect_contents(t, MPI_COMBINER_INDEXED_BLOCK, 5, (int[]){3, 2, 0, 5, 11}, 0, NULL, 1);
    MPI_Type_free(&t);
    MPI_Type_create_hindexed_block(3, 2, adispls, MPI_INT, &t);
    expect_contents(t, MPI_COMBINER_HINDEXED_BLOCK, 2, (int[]){3, 2}, 3, adispls, 1);
    MPI_Type_free(&t);
    /* A struct of a derived type freed before its contents are asked. */
    MPI_Type_contiguous(2, MPI_SHORT, &inner);
    MPI_Datatype types[3] = {MPI_INT, inner, MPI_DOUBLE};
    MPI_Type_create_struct(3, lens, adispls, types, &t);
    MPI_Type_free(&inner);
    expect_contents(t, MPI_COMBINER_STRUCT, 4, (int[]){3, 1, 2, 3}, 3, adispls, 3);
    MPI_Type_free(&t);
    MPI_Type_create_resized(MPI_INT, -4, 16, &t);
    expect_contents(t, MPI_COMBINER_RESIZED, 0, NULL, 2, (MPI_Aint[]){-4, 16}, 1);
    MPI_Type_free(&t);
    MPI_Type_dup(MPI_FLOAT, &t);
    expect_contents(t, MPI_COMBINER_DUP, 0, NULL, 0, NULL, 1);
    MPI_Type_free(&t);
    int sizes[2] = {4, 5}, subsizes[2] = {2, 2}, starts[2] = {1, 2};
    MPI_Type_create_subarray(2, sizes, subsizes, starts, MPI_ORDER_C, MPI_INT, &t);
    expect_contents(t, MPI_COMBINER_SUBARRAY, 8, (int[]){2, 4, 5, 2, 2, 1, 2, MPI_ORDER_C}, 0, NULL, 1);
    MPI_Type_free(&t);
    int gs[2] = {6, 4}, dist[2] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC},
        dargs[2] = {MPI_DISTRIBUTE_DFLT_DARG, 1}, ps[2] = {2, 2};
    MPI_Type_create_darray(4, 3, 2, gs, dist, dargs, ps, MPI_ORDER_C, MPI_INT, &t);
    expect_contents(t, MPI_COMBINER_DARRAY, 12,
                    (int[]){4, 3, 2, 6, 4, MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC,
                            MPI_DISTRIBUTE_DFLT_DARG, 1, 2, 2, MPI_ORDER_C}, 0, NULL, 1);
    MPI_Type_free(&t);
    expect_contents(MPI_INT, MPI_COMBINER_NAMED, 0, NULL, 0, NULL, 0);
}

/* Pack `t` (one element over `src`) and compare with `want`, as MPICH lays it out. */
static void expect_packed(MPI_Datatype t, const int *src, const int *want, int n, const char *what) {
    int out[64], pos = 0;
    MPI_Aint lb, extent;
    MPI_Pack(src, 1, t, out, sizeof out, &pos, MPI_COMM_WORLD);
    CHECK(pos == n * (int) sizeof(int), "%s: %d bytes packed, want %d", what, pos, n * (int) sizeof(int));
    for (int i = 0; i < n && i * (int) sizeof(int) < pos; i++) CHECK(out[i] == want[i], "%s: [%d] %d, want %d", what, i, out[i], want[i]);
    MPI_Type_get_extent(t, &lb, &extent);
    (void) lb;
}

static void layouts(void) {
    int a[24];
    for (int i = 0; i < 24; i++) a[i] = i;
    MPI_Datatype t;
    MPI_Aint lb, extent;
    /* Rows 1..2, columns 2..3 of a 4 x 5 array, C order: lb 0, the whole array's extent. */
    int sizes[2] = {4, 5}, subsizes[2] = {2, 2}, starts[2] = {1, 2};
    MPI_Type_create_subarray(2, sizes, subsizes, starts, MPI_ORDER_C, MPI_INT, &t);
    MPI_Type_commit(&t);
    MPI_Type_get_extent(t, &lb, &extent);
    CHECK(lb == 0 && extent == 20 * (MPI_Aint) sizeof(int), "subarray C: lb %ld extent %ld", (long) lb, (long) extent);
    expect_packed(t, a, (int[]){7, 8, 12, 13}, 4, "subarray C");
    MPI_Type_free(&t);
    /* The same box in Fortran order: the first index fastest. */
    MPI_Type_create_subarray(2, sizes, subsizes, starts, MPI_ORDER_FORTRAN, MPI_INT, &t);
    MPI_Type_commit(&t);
    expect_packed(t, a, (int[]){9, 10, 13, 14}, 4, "subarray Fortran");
    MPI_Type_free(&t);
    /* A 6 x 4 array, rows by block, columns cyclic over a 2 x 2 grid: rank 3 has rows 3..5,
     * columns 1 and 3. */
    int gs[2] = {6, 4}, dist[2] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC},
        dargs[2] = {MPI_DISTRIBUTE_DFLT_DARG, 1}, ps[2] = {2, 2};
    MPI_Type_create_darray(4, 3, 2, gs, dist, dargs, ps, MPI_ORDER_C, MPI_INT, &t);
    MPI_Type_commit(&t);
    MPI_Type_get_extent(t, &lb, &extent);
    CHECK(lb == 0 && extent == 24 * (MPI_Aint) sizeof(int), "darray: lb %ld extent %ld", (long) lb, (long) extent);
    expect_packed(t, a, (int[]){13, 15, 17, 19, 21, 23}, 6, "darray");
    MPI_Type_free(&t);
    /* A struct's extent is padded to its most aligned member, as C pads the struct. */
    struct { int i; char c; } s;
    MPI_Datatype ic[2] = {MPI_INT, MPI_CHAR};
    MPI_Aint d[2] = {0, (char *) &s.c - (char *) &s};
    MPI_Type_create_struct(2, (int[]){1, 1}, d, ic, &t);
    MPI_Type_get_extent(t, &lb, &extent);
    CHECK(extent == (MPI_Aint) sizeof s, "struct {int, char}: extent %ld, want %zu", (long) extent, sizeof s);
    MPI_Type_free(&t);
}

static void external32(void) {
    int32_t v[2] = {0x01020304, -2};
    unsigned char out[8];
    MPI_Aint pos = 0, size;
    MPI_Pack_external_size("external32", 2, MPI_INT, &size);
    CHECK(size == 8, "external32 size of 2 ints: %ld", (long) size);
    MPI_Pack_external("external32", v, 2, MPI_INT, out, sizeof out, &pos);
    CHECK(pos == 8 && out[0] == 1 && out[3] == 4 && out[4] == 0xff && out[7] == 0xfe,
          "external32 is big-endian: %02x %02x %02x %02x", out[0], out[1], out[2], out[3]);
    int32_t back[2] = {0, 0};
    pos = 0;
    MPI_Unpack_external("external32", out, sizeof out, &pos, back, 2, MPI_INT);
    CHECK(back[0] == v[0] && back[1] == v[1], "external32 round trip: %d %d", back[0], back[1]);
}

static int deleted = 0;
static int count_delete(MPI_Datatype t, int key, void *value, void *extra) {
    (void) t; (void) key; (void) value; (void) extra;
    deleted++;
    return MPI_SUCCESS;
}

static void attributes(void) {
    int key, flag = 0;
    void *got = NULL;
    static int payload = 42;
    MPI_Datatype t, copy;
    MPI_Type_create_keyval(MPI_TYPE_DUP_FN, count_delete, &key, NULL);
    MPI_Type_contiguous(2, MPI_INT, &t);
    MPI_Type_set_attr(t, key, &payload);
    MPI_Type_dup(t, &copy);
    MPI_Type_get_attr(copy, key, &got, &flag);
    CHECK(flag && got == &payload, "MPI_Type_dup copies the attribute (flag %d)", flag);
    MPI_Type_free(&t);
    MPI_Type_free(&copy);
    CHECK(deleted == 2, "MPI_Type_free deletes each attribute: %d deleted", deleted);
    MPI_Type_free_keyval(&key);
    char name[MPI_MAX_OBJECT_NAME];
    int len;
    MPI_Type_get_name(MPI_DOUBLE, name, &len);
    CHECK(strcmp(name, "MPI_DOUBLE") == 0, "MPI_DOUBLE's name: %s", name);
    MPI_Datatype m;
    int msize = 0;
    MPI_Type_match_size(MPI_TYPECLASS_REAL, 8, &m);
    MPI_Type_size(m, &msize);
    CHECK(msize == 8, "MPI_Type_match_size for an 8-byte real: %d bytes", msize);
}

static void elements_and_large_counts(void) {
    struct { char a; short b; int c; } s;
    int lens[3] = {1, 1, 1}, n = 0;
    MPI_Aint displs[3] = {0, (char *) &s.b - (char *) &s, (char *) &s.c - (char *) &s};
    MPI_Datatype types[3] = {MPI_CHAR, MPI_SHORT, MPI_INT}, st, big, again;
    MPI_Status status;
    MPI_Type_create_struct(3, lens, displs, types, &st);
    /* One whole struct (7 bytes) and a char and a short of the next: 5 basic elements. */
    MPI_Status_set_elements(&status, MPI_BYTE, 10);
    MPI_Get_elements(&status, st, &n);
    CHECK(n == 5, "MPI_Get_elements of 1 struct and part of another: %d", n);
    MPI_Get_count(&status, st, &n);
    CHECK(n == MPI_UNDEFINED, "MPI_Get_count of a partial struct: %d", n);
    /* MPI_Status_set_elements counts basic elements too: 4 are a struct and a char. */
    MPI_Status_set_elements(&status, st, 4);
    MPI_Get_elements(&status, MPI_BYTE, &n);
    CHECK(n == 8, "MPI_Status_set_elements of 4 elements of the struct: %d bytes", n);
    MPI_Status_set_elements(&status, MPI_BYTE, 6);
    MPI_Get_elements(&status, st, &n);
    CHECK(n == MPI_UNDEFINED, "MPI_Get_elements ending inside an int: %d", n);
    MPI_Count size = 0, lb = -1, extent = 0, elems = 0;
    MPI_Type_contiguous_c((MPI_Count) 3 << 31, MPI_CHAR, &big);
    MPI_Type_size_c(big, &size);
    MPI_Type_get_true_extent_c(big, &lb, &extent);
    CHECK(size == (MPI_Count) 3 << 31 && lb == 0 && extent == size,
          "a 6 GiB contiguous type: size %lld, true extent %lld", (long long) size, (long long) extent);
    MPI_Status_set_elements_x(&status, MPI_BYTE, ((MPI_Count) 3 << 31) + 5);
    MPI_Get_elements_x(&status, big, &elems);
    CHECK(elems == ((MPI_Count) 3 << 31) + 5, "MPI_Get_elements_x past 4 GiB: %lld", (long long) elems);
    /* A freed handle is given out again, last freed first, as MPICH does. */
    MPI_Datatype freed = big;
    MPI_Type_free(&big);
    MPI_Type_contiguous(2, MPI_INT, &again);
    CHECK(again == freed, "the freed handle %#x is reused (got %#x)", (unsigned) freed, (unsigned) again);
    MPI_Type_free(&again);
    MPI_Type_free(&st);
    /* A _c collective's count beyond int: MPI_ERR_COUNT through the error handler. */
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    int err = MPI_Bcast_c(NULL, (MPI_Count) 1 << 32, MPI_INT, 0, MPI_COMM_SELF), class = 0;
    MPI_Error_class(err, &class);
    CHECK(class == MPI_ERR_COUNT, "MPI_Bcast_c of 2^32 ints: error class %d", class);
    int v = 7, sum = 0;
    MPI_Allreduce_c(&v, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_SELF);
    CHECK(sum == 7, "MPI_Allreduce_c on one rank: %d", sum);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    round_trips();
    layouts();
    external32();
    attributes();
    elements_and_large_counts();
    if (failures == 0) printf("datatypes: ok\n");
    MPI_Finalize();
    return failures != 0;
}
