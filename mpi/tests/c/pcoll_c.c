/* MPI 4's large-count persistent collectives and MPI_Op_create_c, against computed values:
 *   - every MPI_<x>_init_c (Bcast, Reduce, Allreduce, Gather(v), Scatter(v), Allgather(v),
 *     Alltoall(v,w), Scan, Exscan, Reduce_scatter(_block)) started together twice, the send
 *     buffers changed between the starts;
 *   - a program's operation from MPI_Op_create_c (its length an MPI_Count) in
 *     MPI_Allreduce_c, MPI_Reduce_local_c and a persistent MPI_Allreduce_init_c; a
 *     non-commutative one is reported so by MPI_Op_commutative.
 * Rank 0 prints "pcoll_c: ok". */
#include <mpi.h>

#include "check.h"

#define MAXN 16
enum { BCAST, REDUCE, ALLREDUCE, GATHER, GATHERV, SCATTER, SCATTERV, ALLGATHER, ALLGATHERV, ALLTOALL,
       ALLTOALLV, ALLTOALLW, SCAN, EXSCAN, RSB, RS, NREQ };

static MPI_Count seen_len = -1;

/* inout[k] += in[k] over ints; remembers the length it was given. */
static void sum_c(void *in, void *inout, MPI_Count *len, MPI_Datatype *type) {
    (void)type;
    seen_len = *len;
    for (MPI_Count k = 0; k < *len; k++) ((int *)inout)[k] += ((int *)in)[k];
}

static void user_op_c(int rank, int size, MPI_Op op) {
    int mine[5], sum[5], commute = -1;
    for (int k = 0; k < 5; k++) mine[k] = rank + k;
    MPI_Allreduce_c(mine, sum, 5, MPI_INT, op, MPI_COMM_WORLD);
    for (int k = 0; k < 5; k++)
        CHECK(sum[k] == size * (size - 1) / 2 + size * k, "Allreduce_c [%d] = %d", k, sum[k]);
    MPI_Reduce_local_c(mine, sum, 5, MPI_INT, op);
    CHECK(seen_len == 5, "the user function's length %lld", (long long)seen_len);
    CHECK(sum[0] == size * (size - 1) / 2 + rank, "Reduce_local_c: %d", sum[0]);
    MPI_Op noncommutative;
    MPI_Op_create_c(sum_c, 0, &noncommutative);
    MPI_Op_commutative(noncommutative, &commute);
    CHECK(commute == 0, "MPI_Op_commutative of a non-commutative op: %d", commute);
    MPI_Op_free(&noncommutative);
    CHECK(noncommutative == MPI_OP_NULL, "a freed op is MPI_OP_NULL");
}

static int s_one, s_many[MAXN], r_one[NREQ], r_many[NREQ][MAXN];

/* The arrays outlive the requests, as MPI requires. */
static void start_all(MPI_Request *r, int size, MPI_Op op) {
    static MPI_Count ones[MAXN];
    static MPI_Aint aup[MAXN], adown[MAXN], bytes[MAXN];
    static MPI_Datatype ints[MAXN];
    for (int i = 0; i < size; i++) {
        ones[i] = 1, aup[i] = i, adown[i] = size - 1 - i;
        bytes[i] = i * (MPI_Aint)sizeof(int), ints[i] = MPI_INT;
    }
    MPI_Comm w = MPI_COMM_WORLD;
    MPI_Info n = MPI_INFO_NULL;
    MPI_Bcast_init_c(&r_one[BCAST], 1, MPI_INT, 0, w, n, &r[BCAST]);
    MPI_Reduce_init_c(&s_one, &r_one[REDUCE], 1, MPI_INT, MPI_SUM, 0, w, n, &r[REDUCE]);
    MPI_Allreduce_init_c(&s_one, &r_one[ALLREDUCE], 1, MPI_INT, op, w, n, &r[ALLREDUCE]);
    MPI_Gather_init_c(&s_one, 1, MPI_INT, r_many[GATHER], 1, MPI_INT, 0, w, n, &r[GATHER]);
    MPI_Gatherv_init_c(&s_one, 1, MPI_INT, r_many[GATHERV], ones, adown, MPI_INT, 0, w, n, &r[GATHERV]);
    MPI_Scatter_init_c(s_many, 1, MPI_INT, &r_one[SCATTER], 1, MPI_INT, 0, w, n, &r[SCATTER]);
    MPI_Scatterv_init_c(s_many, ones, adown, MPI_INT, &r_one[SCATTERV], 1, MPI_INT, 0, w, n, &r[SCATTERV]);
    MPI_Allgather_init_c(&s_one, 1, MPI_INT, r_many[ALLGATHER], 1, MPI_INT, w, n, &r[ALLGATHER]);
    MPI_Allgatherv_init_c(&s_one, 1, MPI_INT, r_many[ALLGATHERV], ones, adown, MPI_INT, w, n,
                          &r[ALLGATHERV]);
    MPI_Alltoall_init_c(s_many, 1, MPI_INT, r_many[ALLTOALL], 1, MPI_INT, w, n, &r[ALLTOALL]);
    MPI_Alltoallv_init_c(s_many, ones, aup, MPI_INT, r_many[ALLTOALLV], ones, aup, MPI_INT, w, n,
                         &r[ALLTOALLV]);
    MPI_Alltoallw_init_c(s_many, ones, bytes, ints, r_many[ALLTOALLW], ones, bytes, ints, w, n,
                         &r[ALLTOALLW]);
    MPI_Scan_init_c(&s_one, &r_one[SCAN], 1, MPI_INT, MPI_SUM, w, n, &r[SCAN]);
    MPI_Exscan_init_c(&s_one, &r_one[EXSCAN], 1, MPI_INT, MPI_SUM, w, n, &r[EXSCAN]);
    MPI_Reduce_scatter_block_init_c(s_many, &r_one[RSB], 1, MPI_INT, MPI_SUM, w, n, &r[RSB]);
    MPI_Reduce_scatter_init_c(s_many, &r_one[RS], ones, MPI_INT, MPI_SUM, w, n, &r[RS]);
}

/* Rank i sends v(i) = base + i (alone) or base + 10 i + j (block j). */
static void check_round(int rank, int size, int base) {
    int sum = size * base + size * (size - 1) / 2, below = 0;
    for (int i = 0; i < rank; i++) below += base + i;
    CHECK(r_one[BCAST] == base + 7, "Bcast %d", r_one[BCAST]);
    if (rank == 0) CHECK(r_one[REDUCE] == sum, "Reduce %d, want %d", r_one[REDUCE], sum);
    CHECK(r_one[ALLREDUCE] == sum, "Allreduce (user op) %d, want %d", r_one[ALLREDUCE], sum);
    for (int i = 0; i < size; i++) {
        if (rank == 0) {
            CHECK(r_many[GATHER][i] == base + i, "Gather [%d] %d", i, r_many[GATHER][i]);
            CHECK(r_many[GATHERV][size - 1 - i] == base + i, "Gatherv [%d]", size - 1 - i);
        }
        CHECK(r_many[ALLGATHER][i] == base + i, "Allgather [%d] %d", i, r_many[ALLGATHER][i]);
        CHECK(r_many[ALLGATHERV][size - 1 - i] == base + i, "Allgatherv [%d]", size - 1 - i);
        for (int k = ALLTOALL; k <= ALLTOALLW; k++)
            CHECK(r_many[k][i] == base + 10 * i + rank, "Alltoall form %d [%d] %d", k, i, r_many[k][i]);
    }
    /* The root's blocks: base + j. */
    CHECK(r_one[SCATTER] == base + rank, "Scatter %d", r_one[SCATTER]);
    CHECK(r_one[SCATTERV] == base + size - 1 - rank, "Scatterv %d", r_one[SCATTERV]);
    CHECK(r_one[SCAN] == below + base + rank, "Scan %d", r_one[SCAN]);
    if (rank > 0) CHECK(r_one[EXSCAN] == below, "Exscan %d, want %d", r_one[EXSCAN], below);
    /* Rank i's block j is base + 10 i + j: block `rank` summed over the ranks. */
    int blocks = size * base + 10 * size * (size - 1) / 2 + size * rank;
    CHECK(r_one[RSB] == blocks && r_one[RS] == blocks, "Reduce_scatter(_block) %d %d, want %d", r_one[RSB],
          r_one[RS], blocks);
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > MAXN) MPI_Abort(MPI_COMM_WORLD, 2);
    MPI_Op op;
    MPI_Op_create_c(sum_c, 1, &op);
    user_op_c(rank, size, op);
    MPI_Request r[NREQ];
    MPI_Status st[NREQ];
    start_all(r, size, op);
    for (int round = 0; round < 2; round++) {
        int base = 1000 * (round + 1);
        s_one = base + rank;
        for (int j = 0; j < size; j++) s_many[j] = base + 10 * rank + j;
        r_one[BCAST] = rank == 0 ? base + 7 : -1;
        MPI_Startall(NREQ, r);
        MPI_Waitall(NREQ, r, st);
        check_round(rank, size, base);
    }
    for (int k = 0; k < NREQ; k++) MPI_Request_free(&r[k]);
    MPI_Op_free(&op);
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && total == 0) printf("pcoll_c: ok\n");
    MPI_Finalize();
    return failures;
}
