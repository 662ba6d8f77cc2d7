/* Each collective algorithm on both sides of its size threshold (mpi/src/coll/tuning.rs:
 * broadcast binomial / scatter + all-gather at 12 KiB; all-reduce flat up to 512 B on 3-8
 * ranks / recursive doubling / Rabenseifner at 2 KiB / ring at 64 KiB off powers of two; all-to-all Bruck up to 256 B
 * blocks / pairwise; all-gather recursive doubling / ring at 512 KiB, each rank's receive
 * datatype contiguous or strided), on communicators of 2, 3, 4, 5 and 8 ranks (run on 8; the
 * 5 in reverse rank order), against values computed here. Floating-point sums must be bit-identical at every rank; a non-commutative user
 * operation must combine in rank order; MPI_IN_PLACE and derived types too.
 * Rank 0 prints "coll_sizes: ok". */
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define P 1000003LL

/* Affine maps x -> a x + b (mod P), composed in rank order: not commutative. */
static void compose(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    long long *f = in, *g = inout;
    for (int i = 0; i < *len; i++) {
        long long a = f[2 * i] * g[2 * i] % P, b = (g[2 * i] * f[2 * i + 1] + g[2 * i + 1]) % P;
        g[2 * i] = a;
        g[2 * i + 1] = b;
    }
}

static void pair_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    int *a = in, *b = inout;
    for (int i = 0; i < 2 * *len; i++)
        b[i] += a[i];
}

static void allreduce_ints(MPI_Comm comm, int rank, int size, int count, int in_place) {
    int *v = malloc(sizeof(int) * count), *out = malloc(sizeof(int) * count);
    for (int i = 0; i < count; i++)
        v[i] = (i % 97) * (rank + 1);
    MPI_Allreduce(in_place ? MPI_IN_PLACE : v, in_place ? v : out, count, MPI_INT, MPI_SUM, comm);
    int *got = in_place ? v : out, bad = 0;
    for (int i = 0; i < count; i++)
        bad += got[i] != (i % 97) * size * (size + 1) / 2;
    CHECK(bad == 0, "allreduce of %d ints (in place %d) on %d ranks: %d wrong", count, in_place, size, bad);
    free(v);
    free(out);
}

static void allreduce_doubles(MPI_Comm comm, int rank, int size, int count) {
    double *v = malloc(sizeof(double) * count), *out = malloc(sizeof(double) * count),
           *first = malloc(sizeof(double) * count);
    for (int i = 0; i < count; i++)
        v[i] = 1.0 / (1.0 + rank + i) + rank * 1e-3;
    MPI_Allreduce(v, out, count, MPI_DOUBLE, MPI_SUM, comm);
    memcpy(first, out, sizeof(double) * count);
    MPI_Bcast(first, count, MPI_DOUBLE, 0, comm);
    CHECK(memcmp(first, out, sizeof(double) * count) == 0, "allreduce of %d doubles on %d ranks: not bit-identical",
          count, size);
    double *again = malloc(sizeof(double) * count);
    MPI_Allreduce(v, again, count, MPI_DOUBLE, MPI_SUM, comm);
    CHECK(memcmp(again, out, sizeof(double) * count) == 0, "allreduce of %d doubles: another answer the 2nd time",
          count);
    int bad = 0;
    for (int i = 0; i < count; i++) {
        double expect = 0;
        for (int r = 0; r < size; r++)
            expect += 1.0 / (1.0 + r + i) + r * 1e-3;
        bad += out[i] - expect > 1e-12 || expect - out[i] > 1e-12;
    }
    CHECK(bad == 0, "allreduce of %d doubles on %d ranks: %d off", count, size, bad);
    free(v);
    free(out);
    free(first);
    free(again);
}

static void allreduce_user(MPI_Comm comm, int rank, int size, int count) {
    MPI_Datatype pair;
    MPI_Type_contiguous(2, MPI_LONG_LONG, &pair);
    MPI_Type_commit(&pair);
    MPI_Op op;
    MPI_Op_create(compose, 0, &op);
    long long *f = malloc(sizeof(long long) * 2 * count), *out = malloc(sizeof(long long) * 2 * count);
    for (int i = 0; i < count; i++) {
        f[2 * i] = 2 + (rank * 31 + i) % 1000;
        f[2 * i + 1] = (rank * 7 + i * 3) % 1000;
    }
    MPI_Allreduce(f, out, count, pair, op, comm);
    int bad = 0;
    for (int i = 0; i < count; i++) {
        long long a = 1, b = 0;
        for (int r = 0; r < size; r++) {
            long long ra = 2 + (r * 31 + i) % 1000, rb = (r * 7 + i * 3) % 1000;
            b = (ra * b + rb) % P;
            a = a * ra % P;
        }
        bad += out[2 * i] != a || out[2 * i + 1] != b;
    }
    CHECK(bad == 0, "non-commutative allreduce of %d on %d ranks: %d wrong", count, size, bad);
    MPI_Op_free(&op);

    /* A commutative user operation on a derived type. */
    MPI_Datatype two;
    MPI_Type_contiguous(2, MPI_INT, &two);
    MPI_Type_commit(&two);
    MPI_Op_create(pair_sum, 1, &op);
    int *v = malloc(sizeof(int) * 2 * count), *w = malloc(sizeof(int) * 2 * count);
    for (int i = 0; i < 2 * count; i++)
        v[i] = rank + i % 5;
    MPI_Allreduce(v, w, count, two, op, comm);
    bad = 0;
    for (int i = 0; i < 2 * count; i++)
        bad += w[i] != size * (size - 1) / 2 + size * (i % 5);
    CHECK(bad == 0, "user sum of %d pairs on %d ranks: %d wrong", count, size, bad);
    MPI_Op_free(&op);
    MPI_Type_free(&two);
    MPI_Type_free(&pair);
    free(f);
    free(out);
    free(v);
    free(w);
}

static void bcast_bytes(MPI_Comm comm, int rank, int size, int len, int root) {
    unsigned char *b = malloc(len);
    for (int i = 0; i < len; i++)
        b[i] = rank == root ? (unsigned char)(i * 7 + root) : 0;
    MPI_Bcast(b, len, MPI_BYTE, root, comm);
    int bad = 0;
    for (int i = 0; i < len; i++)
        bad += b[i] != (unsigned char)(i * 7 + root);
    CHECK(bad == 0, "bcast of %d bytes from %d on %d ranks: %d wrong", len, root, size, bad);
    free(b);
}

/* Every other int of a strided buffer: a derived type on the wire's other side. */
static void bcast_strided(MPI_Comm comm, int rank, int size, int count) {
    MPI_Datatype every_other;
    MPI_Type_vector(count, 1, 2, MPI_INT, &every_other);
    MPI_Type_commit(&every_other);
    int *b = malloc(sizeof(int) * 2 * count), root = size / 2;
    for (int i = 0; i < 2 * count; i++)
        b[i] = rank == root ? i : -1;
    MPI_Bcast(b, 1, every_other, root, comm);
    int bad = 0;
    for (int i = 0; i < 2 * count; i++)
        bad += b[i] != (i % 2 == 0 || rank == root ? i : -1);
    CHECK(bad == 0, "strided bcast of %d ints on %d ranks: %d wrong", count, size, bad);
    MPI_Type_free(&every_other);
    free(b);
}

static void alltoall_ints(MPI_Comm comm, int rank, int size, int block, int in_place) {
    int *s = malloc(sizeof(int) * block * size), *r = malloc(sizeof(int) * block * size);
    for (int j = 0; j < size; j++)
        for (int e = 0; e < block; e++)
            s[j * block + e] = rank * 1000000 + j * 1000 + e;
    if (in_place) {
        MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, s, block, MPI_INT, comm);
    } else {
        /* The send side as pairs of ints, the receive side as ints: one type signature. */
        MPI_Datatype two;
        MPI_Type_contiguous(2, MPI_INT, &two);
        MPI_Type_commit(&two);
        if (block % 2 == 0)
            MPI_Alltoall(s, block / 2, two, r, block, MPI_INT, comm);
        else
            MPI_Alltoall(s, block, MPI_INT, r, block, MPI_INT, comm);
        MPI_Type_free(&two);
    }
    int *got = in_place ? s : r, bad = 0;
    for (int i = 0; i < size; i++)
        for (int e = 0; e < block; e++)
            bad += got[i * block + e] != i * 1000000 + rank * 1000 + e;
    CHECK(bad == 0, "alltoall of %d-int blocks (in place %d) on %d ranks: %d wrong", block, in_place, size, bad);
    free(s);
    free(r);
}

/* MPI_Allgather with the odd ranks receiving through a strided datatype (the packed path)
 * and the even ones into plain ints (the blocks exchanged in their buffer, MPI_IN_PLACE with
 * `in_place`): both must run one algorithm with the same messages. */
static void allgather_ints(MPI_Comm comm, int rank, int size, int count, int in_place) {
    int stride = rank % 2 ? 2 : 1, span = (count - 1) * stride + 1;
    int *mine = malloc(sizeof(int) * count), *all = calloc((size_t)span * size, sizeof(int));
    for (int e = 0; e < count; e++)
        mine[e] = rank * 7 + e;
    MPI_Datatype rt = MPI_INT;
    int rc = count;
    void *send = mine;
    if (stride == 2) {
        MPI_Type_vector(count, 1, 2, MPI_INT, &rt);
        MPI_Type_commit(&rt);
        rc = 1;
    } else if (in_place) {
        memcpy(all + (size_t)rank * span, mine, sizeof(int) * count);
        send = MPI_IN_PLACE;
    }
    MPI_Allgather(send, count, MPI_INT, all, rc, rt, comm);
    int bad = 0;
    for (int r = 0; r < size; r++)
        for (int e = 0; e < count; e++)
            bad += all[(size_t)r * span + (size_t)e * stride] != r * 7 + e;
    CHECK(bad == 0, "allgather of %d ints (in place %d, stride %d) on %d ranks: %d wrong", count, in_place, stride,
          size, bad);
    if (rt != MPI_INT)
        MPI_Type_free(&rt);
    free(mine);
    free(all);
}

/* MPI_Allgatherv with rank r's count + r ints placed in reverse rank order. */
static void allgatherv_ints(MPI_Comm comm, int rank, int size, int count) {
    int *counts = malloc(sizeof(int) * size), *displs = malloc(sizeof(int) * size), total = 0;
    for (int r = size - 1; r >= 0; r--) {
        counts[r] = count + r;
        displs[r] = total;
        total += counts[r];
    }
    int *mine = malloc(sizeof(int) * counts[rank]), *all = malloc(sizeof(int) * total);
    for (int e = 0; e < counts[rank]; e++)
        mine[e] = rank * 11 + e;
    MPI_Allgatherv(mine, counts[rank], MPI_INT, all, counts, displs, MPI_INT, comm);
    int bad = 0;
    for (int r = 0; r < size; r++)
        for (int e = 0; e < counts[r]; e++)
            bad += all[displs[r] + e] != r * 11 + e;
    CHECK(bad == 0, "allgatherv of %d+ ints on %d ranks: %d wrong", count, size, bad);
    free(counts);
    free(displs);
    free(mine);
    free(all);
}

static void on(MPI_Comm comm) {
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    for (int i = 0; i < 3; i++)
        MPI_Barrier(comm);
    /* 512 B = 128 ints, 2 KiB = 512 ints, 64 KiB = 16384 ints (and 8192 doubles). */
    int ints[] = {1, 7, 128, 129, 511, 512, 601, 16383, 16384, 70001, 262144};
    for (unsigned i = 0; i < sizeof ints / sizeof *ints; i++)
        allreduce_ints(comm, rank, size, ints[i], i % 2);
    int doubles[] = {1, 64, 65, 255, 256, 1000, 8191, 8192, 20001};
    for (unsigned i = 0; i < sizeof doubles / sizeof *doubles; i++)
        allreduce_doubles(comm, rank, size, doubles[i]);
    int users[] = {1, 100, 5000, 20000};
    for (unsigned i = 0; i < sizeof users / sizeof *users; i++)
        allreduce_user(comm, rank, size, users[i]);
    int bytes[] = {1, 100, 12287, 12288, 12289, 100003, 1 << 20};
    for (unsigned i = 0; i < sizeof bytes / sizeof *bytes; i++) {
        bcast_bytes(comm, rank, size, bytes[i], 0);
        bcast_bytes(comm, rank, size, bytes[i], size - 1);
    }
    bcast_strided(comm, rank, size, 10);
    bcast_strided(comm, rank, size, 20000);
    /* 256 B = 64 ints a block (Bruck below, pairwise above); from 256 KiB (65536 ints) a
       block is lent on shm, sent from and received into the program's buffers. */
    int blocks[] = {1, 2, 63, 64, 65, 66, 1024, 65536, 70001};
    for (unsigned i = 0; i < sizeof blocks / sizeof *blocks; i++) {
        alltoall_ints(comm, rank, size, blocks[i], 0);
        alltoall_ints(comm, rank, size, blocks[i], 1);
    }
    /* 512 KiB in all: 131072 ints. */
    int gathers[] = {1, 100, 131072 / size - 1, 131072 / size + 1};
    for (unsigned i = 0; i < sizeof gathers / sizeof *gathers; i++) {
        allgather_ints(comm, rank, size, gathers[i], i % 2);
        allgatherv_ints(comm, rank, size, gathers[i]);
    }
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int sizes[] = {2, 3, 4, 5, 8};
    for (unsigned i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        if (sizes[i] > size)
            continue;
        MPI_Comm sub;
        int key = sizes[i] == 5 ? -rank : rank;
        MPI_Comm_split(MPI_COMM_WORLD, rank < sizes[i] ? 0 : MPI_UNDEFINED, key, &sub);
        if (sub != MPI_COMM_NULL) {
            on(sub);
            MPI_Comm_free(&sub);
        }
    }
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && all == 0)
        printf("coll_sizes: ok\n");
    MPI_Finalize();
    return all != 0;
}
