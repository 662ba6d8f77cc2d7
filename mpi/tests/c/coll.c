/* Collectives against values computed here, on MPI_COMM_WORLD and on the halves of a split:
 * barrier, bcast, reduce and allreduce (sum, max, minloc, a user operation), gather(v),
 * scatter(v), allgather(v), alltoall(v), scan, exscan, reduce_scatter_block. Rank 0 prints
 * "coll: ok". */
#include <mpi.h>
#include <stdlib.h>

#include "check.h"

static void user_max_abs(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    int *a = in, *b = inout;
    for (int i = 0; i < *len; i++)
        if (abs(a[i]) > abs(b[i]))
            b[i] = a[i];
}

static void on(MPI_Comm comm) {
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    MPI_Barrier(comm);

    int root = size - 1, value = rank == root ? 77 : -1;
    MPI_Bcast(&value, 1, MPI_INT, root, comm);
    CHECK(value == 77, "bcast %d", value);

    long mine = rank + 1, sum = 0;
    MPI_Reduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, 0, comm);
    if (rank == 0)
        CHECK(sum == (long)size * (size + 1) / 2, "reduce %ld", sum);
    double d = rank * 0.5, dmax = 0;
    MPI_Allreduce(&d, &dmax, 1, MPI_DOUBLE, MPI_MAX, comm);
    CHECK(dmax == (size - 1) * 0.5, "allreduce max %g", dmax);
    struct { double v; int i; } in = {rank == 1 % size ? -5.0 : rank, rank}, out;
    MPI_Allreduce(&in, &out, 1, MPI_DOUBLE_INT, MPI_MINLOC, comm);
    CHECK(out.i == 1 % size, "minloc index %d", out.i);
    MPI_Op op;
    MPI_Op_create(user_max_abs, 1, &op);
    int signed_v = rank % 2 ? -rank : rank, best;
    MPI_Allreduce(&signed_v, &best, 1, MPI_INT, op, comm);
    CHECK(abs(best) == size - 1, "user op %d", best);
    MPI_Op_free(&op);

    int *all = malloc(sizeof(int) * size * 4), *counts = malloc(sizeof(int) * size),
        *displs = malloc(sizeof(int) * size);
    MPI_Gather(&rank, 1, MPI_INT, all, 1, MPI_INT, 0, comm);
    if (rank == 0)
        for (int r = 0; r < size; r++)
            CHECK(all[r] == r, "gather[%d] = %d", r, all[r]);
    MPI_Allgather(&rank, 1, MPI_INT, all, 1, MPI_INT, comm);
    for (int r = 0; r < size; r++)
        CHECK(all[r] == r, "allgather[%d] = %d", r, all[r]);
    /* Rank r contributes r+1 copies of r. */
    int off = 0;
    for (int r = 0; r < size; r++) {
        counts[r] = r + 1;
        displs[r] = off;
        off += r + 1;
    }
    int *mine_v = malloc(sizeof(int) * (rank + 1)), *gv = malloc(sizeof(int) * off);
    for (int k = 0; k <= rank; k++)
        mine_v[k] = rank;
    MPI_Allgatherv(mine_v, rank + 1, MPI_INT, gv, counts, displs, MPI_INT, comm);
    for (int r = 0, at = 0; r < size; r++)
        for (int k = 0; k <= r; k++, at++)
            CHECK(gv[at] == r, "allgatherv[%d] = %d", at, gv[at]);
    int piece = -1;
    for (int r = 0; r < size; r++)
        all[r] = 10 * r;
    MPI_Scatter(all, 1, MPI_INT, &piece, 1, MPI_INT, 0, comm);
    CHECK(piece == 10 * rank, "scatter %d", piece);
    int *got = malloc(sizeof(int) * (rank + 1));
    MPI_Scatterv(gv, counts, displs, MPI_INT, got, rank + 1, MPI_INT, root, comm);
    CHECK(got[0] == rank && got[rank] == rank, "scatterv %d", got[0]);
    int *send = malloc(sizeof(int) * size), *recv = malloc(sizeof(int) * size);
    for (int r = 0; r < size; r++)
        send[r] = rank * 100 + r;
    MPI_Alltoall(send, 1, MPI_INT, recv, 1, MPI_INT, comm);
    for (int r = 0; r < size; r++)
        CHECK(recv[r] == r * 100 + rank, "alltoall[%d] = %d", r, recv[r]);
    int pre = 0;
    MPI_Scan(&rank, &pre, 1, MPI_INT, MPI_SUM, comm);
    CHECK(pre == rank * (rank + 1) / 2, "scan %d", pre);
    pre = -1;
    MPI_Exscan(&rank, &pre, 1, MPI_INT, MPI_SUM, comm);
    if (rank > 0)
        CHECK(pre == rank * (rank - 1) / 2, "exscan %d", pre);
    for (int r = 0; r < size; r++)
        send[r] = r;
    int block = -1;
    MPI_Reduce_scatter_block(send, &block, 1, MPI_INT, MPI_SUM, comm);
    CHECK(block == rank * size, "reduce_scatter_block %d", block);
    free(all), free(counts), free(displs), free(mine_v), free(gv), free(got), free(send), free(recv);
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    on(MPI_COMM_WORLD);
    MPI_Comm half, dup;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half);
    on(half);
    int hr;
    MPI_Comm_rank(half, &hr);
    int hs;
    MPI_Comm_size(half, &hs);
    CHECK(hr == hs - 1 - rank / 2, "split key order: rank %d in the half", hr);
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    on(dup);
    MPI_Comm_free(&dup);
    MPI_Comm_free(&half);
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && all == 0)
        printf("coll: ok\n");
    MPI_Finalize();
    return all != 0;
}
