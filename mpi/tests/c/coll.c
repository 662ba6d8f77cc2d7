/* Collectives against values computed here, on MPI_COMM_WORLD and on the halves of a split:
 * barrier, bcast, reduce and allreduce (sum, max, minloc, a user operation), gather(v),
 * scatter(v), allgather(v), alltoall(v), scan, exscan, reduce_scatter_block. Then on world:
 * a user operation on a strided (vector) type that asks for the type's extent inside the
 * function, persistent collectives started twice, MPI_Comm_split_type (one host here), and a
 * periodic Cartesian grid: Dims_create, Cart_create/_coords/_rank/_shift/_sub and a
 * neighbourhood allgather that must bring each neighbour's rank; an intercommunicator made from
 * two groups with no parent (MPI_Intercomm_create_from_groups) and an allreduce across it.
 * Rank 0 prints "coll: ok". */
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

/* Sums the first int of each element, the others left alone: needs the type's layout. */
static void strided_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
    MPI_Aint lb, extent;
    MPI_Type_get_extent(*type, &lb, &extent);
    int step = (int)(extent / sizeof(int));
    int *a = in, *b = inout;
    for (int i = 0; i < *len; i++)
        b[i * step] += a[i * step];
}

static void more(void) {
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    /* 3 elements of one int each, 2 ints apart: the gaps must come back untouched. */
    MPI_Datatype every_other, strided;
    MPI_Type_vector(1, 1, 2, MPI_INT, &every_other);
    MPI_Type_create_resized(every_other, 0, 2 * sizeof(int), &strided);
    MPI_Type_commit(&strided);
    MPI_Op sum_op;
    MPI_Op_create(strided_sum, 1, &sum_op);
    int in[6], out[6];
    for (int i = 0; i < 6; i++)
        in[i] = i % 2 ? -1 : rank + i, out[i] = -7;
    MPI_Allreduce(in, out, 3, strided, sum_op, MPI_COMM_WORLD);
    for (int i = 0; i < 6; i += 2)
        CHECK(out[i] == size * (size - 1) / 2 + size * i, "strided user op [%d] = %d", i, out[i]);
    CHECK(out[1] == -7 && out[3] == -7 && out[5] == -7, "strided user op wrote a gap: %d %d %d", out[1], out[3], out[5]);
    MPI_Op_free(&sum_op);
    MPI_Type_free(&strided);
    MPI_Type_free(&every_other);

    int value = 0, total = 0;
    MPI_Request req[2];
    MPI_Bcast_init(&value, 1, MPI_INT, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &req[0]);
    MPI_Allreduce_init(&value, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &req[1]);
    for (int round = 1; round <= 2; round++) {
        if (rank == 0)
            value = 10 * round;
        MPI_Start(&req[0]);
        MPI_Wait(&req[0], MPI_STATUS_IGNORE);
        CHECK(value == 10 * round, "persistent bcast, round %d: %d", round, value);
        MPI_Startall(1, &req[1]);
        MPI_Status st[1];
        MPI_Waitall(1, &req[1], st);
        CHECK(total == 10 * round * size, "persistent allreduce, round %d: %d", round, total);
    }
    CHECK(req[0] != MPI_REQUEST_NULL, "a persistent request stays allocated after its wait");
    MPI_Request_free(&req[0]);
    MPI_Request_free(&req[1]);

    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    int node_size = 0;
    MPI_Comm_size(node, &node_size);
    CHECK(node_size == size, "split_type shared on one host: %d of %d", node_size, size);
    MPI_Comm_free(&node);

    int dims[2] = {0, 0}, periods[2] = {1, 1}, coords[2], back;
    MPI_Dims_create(size, 2, dims);
    CHECK(dims[0] * dims[1] == size && dims[0] >= dims[1], "dims_create %d x %d", dims[0], dims[1]);
    MPI_Comm grid;
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &grid);
    int grank;
    MPI_Comm_rank(grid, &grank);
    MPI_Cart_coords(grid, grank, 2, coords);
    MPI_Cart_rank(grid, coords, &back);
    CHECK(back == grank && grank == coords[0] * dims[1] + coords[1], "cart rank %d coords %d,%d", grank, coords[0], coords[1]);
    int expect[4], got[4];
    for (int d = 0; d < 2; d++) {
        MPI_Cart_shift(grid, d, 1, &expect[2 * d], &expect[2 * d + 1]);
        int c[2] = {coords[0], coords[1]};
        c[d] = (c[d] + 1) % dims[d];
        MPI_Cart_rank(grid, c, &back);
        CHECK(expect[2 * d + 1] == back, "cart shift dim %d: %d, not %d", d, expect[2 * d + 1], back);
    }
    MPI_Neighbor_allgather(&grank, 1, MPI_INT, got, 1, MPI_INT, grid);
    for (int i = 0; i < 4; i++)
        CHECK(got[i] == expect[i], "neighbour %d: got %d, expected %d", i, got[i], expect[i]);
    MPI_Comm row;
    int keep[2] = {0, 1}, row_size;
    MPI_Cart_sub(grid, keep, &row);
    MPI_Comm_size(row, &row_size);
    CHECK(row_size == dims[1], "cart_sub row of %d, expected %d", row_size, dims[1]);
    MPI_Comm_free(&row);
    MPI_Comm_free(&grid);

    /* An intercommunicator from two groups (MPI 4): the lower and upper halves of world. */
    int half = size / 2, low[64], high[64];
    for (int r = 0; r < size; r++)
        (r < half ? low : high)[r < half ? r : r - half] = r;
    MPI_Group world_group, mine_g, other_g;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    int in_low = rank < half;
    MPI_Group_incl(world_group, in_low ? half : size - half, in_low ? low : high, &mine_g);
    MPI_Group_incl(world_group, in_low ? size - half : half, in_low ? high : low, &other_g);
    MPI_Comm inter;
    MPI_Intercomm_create_from_groups(mine_g, 0, other_g, 0, "coll.c", MPI_INFO_NULL, MPI_ERRORS_ARE_FATAL, &inter);
    int remote = 0, sum = 0;
    MPI_Comm_remote_size(inter, &remote);
    CHECK(remote == (in_low ? size - half : half), "intercomm from groups: remote size %d", remote);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, inter);
    int expect_sum = in_low ? (size - 1) * size / 2 - (half - 1) * half / 2 : (half - 1) * half / 2;
    CHECK(sum == expect_sum, "intercomm from groups: allreduce %d, expected %d", sum, expect_sum);
    MPI_Comm_free(&inter);
    MPI_Group_free(&mine_g);
    MPI_Group_free(&other_g);
    MPI_Group_free(&world_group);
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
    more();
    /* Send and receive buffers that overlap without MPI_IN_PLACE: an error, at every size. */
    double *alias = calloc(4096, sizeof(double));
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int counts[] = {1, 4096};
    for (int i = 0; i < 2; i++) {
        int rc = MPI_Allreduce(alias, alias, counts[i], MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), cls = -1;
        MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_BUFFER, "aliased allreduce of %d doubles: class %d", counts[i], cls);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    free(alias);
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && all == 0)
        printf("coll: ok\n");
    MPI_Finalize();
    return all != 0;
}
