/* The neighbourhood collectives' large-count and persistent forms, on a periodic ring of 3 or
 * more ranks (a 1-D Cartesian grid: each rank's neighbours are left, then right):
 *   - MPI_Neighbor_allgather(v)_c, _alltoall(v,w)_c and their MPI_Ineighbor_<x>_c forms give
 *     what the int forms give;
 *   - MPI_Neighbor_<x>_init and MPI_Neighbor_<x>_init_c: each request started twice, the send
 *     buffer changed between the starts, with point-to-point traffic between;
 *   - on reverb, a count or a displacement beyond int fails with MPI_ERR_COUNT
 *     (MPI_ERRORS_RETURN), in these and in MPI_Alltoallv_c / MPI_Allgatherv_c.
 * Rank 0 prints "neighbor: ok". */
#include <limits.h>
#include <mpi.h>

#include "check.h"
#include "mpix_reverb.h"

static int rank, left, right;

/* got[0] from the left, got[1] from the right: the value v(peer, the block it sent me). */
static void ring(const char *what, const int got[2], int base, int sent_blocks) {
    int from_left = base + 100 * left + (sent_blocks ? 1 : 0);
    int from_right = base + 100 * right;
    CHECK(got[0] == from_left && got[1] == from_right, "%s: got %d %d, want %d %d", what, got[0],
          got[1], from_left, from_right);
}

static void blocking_and_nonblocking(MPI_Comm g) {
    int one = 100 * rank, two[2] = {100 * rank, 100 * rank + 1}, got[2] = {-1, -1};
    MPI_Count c1[2] = {1, 1};
    MPI_Aint d[2] = {0, 1}, bytes[2] = {0, sizeof(int)};
    MPI_Datatype types[2] = {MPI_INT, MPI_INT};
    MPI_Request r;
    MPI_Neighbor_allgather_c(&one, 1, MPI_INT, got, 1, MPI_INT, g);
    ring("allgather_c", got, 0, 0);
    MPI_Neighbor_allgatherv_c(&one, 1, MPI_INT, got, c1, d, MPI_INT, g);
    ring("allgatherv_c", got, 0, 0);
    MPI_Neighbor_alltoall_c(two, 1, MPI_INT, got, 1, MPI_INT, g);
    ring("alltoall_c", got, 0, 1);
    MPI_Neighbor_alltoallv_c(two, c1, d, MPI_INT, got, c1, d, MPI_INT, g);
    ring("alltoallv_c", got, 0, 1);
    MPI_Neighbor_alltoallw_c(two, c1, bytes, types, got, c1, bytes, types, g);
    ring("alltoallw_c", got, 0, 1);
    MPI_Ineighbor_allgather_c(&one, 1, MPI_INT, got, 1, MPI_INT, g, &r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    ring("ineighbor_allgather_c", got, 0, 0);
    MPI_Ineighbor_alltoallv_c(two, c1, d, MPI_INT, got, c1, d, MPI_INT, g, &r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    ring("ineighbor_alltoallv_c", got, 0, 1);
    MPI_Ineighbor_alltoallw_c(two, c1, bytes, types, got, c1, bytes, types, g, &r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    ring("ineighbor_alltoallw_c", got, 0, 1);
}

/* Starts each of the ten persistent requests twice; the send buffers change in between. */
static void persistent(MPI_Comm g) {
    int one = 0, two[2] = {0, 0}, got[10][2];
    int ic[2] = {1, 1}, id[2] = {0, 1};
    MPI_Count cc[2] = {1, 1};
    MPI_Aint cd[2] = {0, 1}, bytes[2] = {0, sizeof(int)};
    MPI_Datatype types[2] = {MPI_INT, MPI_INT};
    MPI_Request r[10];
    MPI_Status st[10];
    MPI_Neighbor_allgather_init(&one, 1, MPI_INT, got[0], 1, MPI_INT, g, MPI_INFO_NULL, &r[0]);
    MPI_Neighbor_allgatherv_init(&one, 1, MPI_INT, got[1], ic, id, MPI_INT, g, MPI_INFO_NULL, &r[1]);
    MPI_Neighbor_alltoall_init(two, 1, MPI_INT, got[2], 1, MPI_INT, g, MPI_INFO_NULL, &r[2]);
    MPI_Neighbor_alltoallv_init(two, ic, id, MPI_INT, got[3], ic, id, MPI_INT, g, MPI_INFO_NULL, &r[3]);
    MPI_Neighbor_alltoallw_init(two, ic, bytes, types, got[4], ic, bytes, types, g, MPI_INFO_NULL, &r[4]);
    MPI_Neighbor_allgather_init_c(&one, 1, MPI_INT, got[5], 1, MPI_INT, g, MPI_INFO_NULL, &r[5]);
    MPI_Neighbor_allgatherv_init_c(&one, 1, MPI_INT, got[6], cc, cd, MPI_INT, g, MPI_INFO_NULL, &r[6]);
    MPI_Neighbor_alltoall_init_c(two, 1, MPI_INT, got[7], 1, MPI_INT, g, MPI_INFO_NULL, &r[7]);
    MPI_Neighbor_alltoallv_init_c(two, cc, cd, MPI_INT, got[8], cc, cd, MPI_INT, g, MPI_INFO_NULL, &r[8]);
    MPI_Neighbor_alltoallw_init_c(two, cc, bytes, types, got[9], cc, bytes, types, g, MPI_INFO_NULL,
                                  &r[9]);
    for (int round = 0; round < 2; round++) {
        int base = 10000 * round, token = rank;
        one = base + 100 * rank, two[0] = base + 100 * rank, two[1] = base + 100 * rank + 1;
        MPI_Startall(10, r);
        /* Point-to-point traffic while they run. */
        MPI_Sendrecv_replace(&token, 1, MPI_INT, right, 7, left, 7, g, MPI_STATUS_IGNORE);
        CHECK(token == left, "round %d: token %d from %d", round, token, left);
        MPI_Waitall(10, r, st);
        for (int k = 0; k < 10; k++) {
            char what[32];
            snprintf(what, sizeof what, "persistent %d round %d", k, round);
            int gathers = k % 5 < 2;
            ring(what, got[k], base, !gathers);
        }
    }
    for (int k = 0; k < 10; k++) MPI_Request_free(&r[k]);
}

static void too_large(MPI_Comm g) {
    int one = rank, got[2], class = MPI_SUCCESS;
    MPI_Count big[2] = {(MPI_Count)INT_MAX + 1, 1};
    MPI_Aint far[2] = {0, (MPI_Aint)INT_MAX + 1};
    MPI_Count c1[2] = {1, 1};
    MPI_Comm_set_errhandler(g, MPI_ERRORS_RETURN);
    int rc = MPI_Neighbor_allgather_c(&one, big[0], MPI_INT, got, 1, MPI_INT, g);
    MPI_Error_class(rc, &class);
    CHECK(class == MPI_ERR_COUNT, "a count beyond int: class %d", class);
    rc = MPI_Neighbor_allgatherv_c(&one, 1, MPI_INT, got, big, far, MPI_INT, g);
    MPI_Error_class(rc, &class);
    CHECK(class == MPI_ERR_COUNT, "counts beyond int: class %d", class);
    rc = MPI_Neighbor_alltoallv_c(got, c1, far, MPI_INT, got, c1, far, MPI_INT, g);
    MPI_Error_class(rc, &class);
    CHECK(class == MPI_ERR_COUNT, "a displacement beyond int: class %d", class);
    /* The other _c collectives too: a displacement beyond int is no int's -1 (a valid one). */
    MPI_Count ones[16];
    MPI_Aint farther[16];
    int buf[16];
    for (int i = 0; i < 16; i++) ones[i] = 1, farther[i] = i;
    farther[1] = (MPI_Aint)INT_MAX + 1;
    rc = MPI_Alltoallv_c(buf, ones, farther, MPI_INT, buf, ones, farther, MPI_INT, g);
    MPI_Error_class(rc, &class);
    CHECK(class == MPI_ERR_COUNT, "alltoallv_c, a displacement beyond int: class %d", class);
    rc = MPI_Allgatherv_c(&one, 1, MPI_INT, buf, ones, farther, MPI_INT, g);
    MPI_Error_class(rc, &class);
    CHECK(class == MPI_ERR_COUNT, "allgatherv_c, a displacement beyond int: class %d", class);
}

int main(int argc, char **argv) {
    int size, dims[1] = {0}, periods[1] = {1};
    MPI_Comm g;
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Dims_create(size, 1, dims);
    MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &g);
    MPI_Comm_rank(g, &rank);
    MPI_Cart_shift(g, 0, 1, &left, &right);
    blocking_and_nonblocking(g);
    persistent(g);
    /* reverb's limit (MPICH takes such counts): only where reverb's library is loaded. */
    if (MPIX_Reverb_protect) too_large(g);
    MPI_Comm_free(&g);
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && total == 0) printf("neighbor: ok\n");
    MPI_Finalize();
    return failures;
}
