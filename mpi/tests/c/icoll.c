/* Nonblocking collectives that progress in the background of other MPI calls:
 *   - two broadcasts on two communicators started in opposite orders on even and odd ranks
 *     (each rank's first one cannot finish before the other's is started elsewhere), then
 *     MPI_Waitall; the same with the waits in opposite orders;
 *   - an Iallreduce whose root-side partner first waits for a point-to-point message that the
 *     peer sends only after starting the Iallreduce (overlap with traffic it depends on);
 *   - many outstanding collectives on one communicator (Ibarrier, Ibcast, Iallreduce,
 *     Iallgather, Ialltoall, Ireduce, Iscan), of sizes on both sides of the algorithms'
 *     thresholds, completed by MPI_Test polling in reverse order;
 *   - MPI_Comm_idup started twice, overlapped with an Iallreduce on the parent, the duplicates
 *     then used; a persistent Allreduce started twice with point-to-point traffic between.
 * Rank 0 prints "icoll: ok". */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static void opposite_orders(int rank, int size) {
    MPI_Comm a, b;
    MPI_Comm_dup(MPI_COMM_WORLD, &a);
    MPI_Comm_dup(MPI_COMM_WORLD, &b);
    for (int round = 0; round < 2; round++) {
        /* a's root is rank 1, b's rank 0: rank 0 starts a first, rank 1 b first, and each
         * first waits for what the other sends only in its second. */
        int ra = 1 % size, rb = 0;
        int va = rank == ra ? 11 + round : -1, vb = rank == rb ? 22 + round : -1;
        MPI_Request r[2];
        if (rank % 2 == 0) {
            MPI_Ibcast(&va, 1, MPI_INT, ra, a, &r[0]);
            MPI_Ibcast(&vb, 1, MPI_INT, rb, b, &r[1]);
        } else {
            MPI_Ibcast(&vb, 1, MPI_INT, rb, b, &r[1]);
            MPI_Ibcast(&va, 1, MPI_INT, ra, a, &r[0]);
        }
        if (round == 0) {
            MPI_Status st[2];
            MPI_Waitall(2, r, st);
        } else {
            /* Waits in opposite orders: each progresses the other one too. */
            int first = rank % 2;
            MPI_Wait(&r[first], MPI_STATUS_IGNORE);
            MPI_Wait(&r[1 - first], MPI_STATUS_IGNORE);
        }
        CHECK(va == 11 + round && vb == 22 + round, "round %d: bcasts %d %d", round, va, vb);
    }
    MPI_Comm_free(&a);
    MPI_Comm_free(&b);
}

static void overlap_with_p2p(int rank, int size) {
    double mine = rank + 1.0, sum = 0;
    int token = -1;
    MPI_Request r;
    if (rank == 0) {
        /* Rank 0 receives before it starts; rank 1 sends only after it started, so the
         * Iallreduce cannot have completed at rank 1's call. */
        MPI_Recv(&token, 1, MPI_INT, 1, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Iallreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r);
    } else {
        MPI_Iallreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r);
        if (rank == 1) {
            token = 42;
            MPI_Send(&token, 1, MPI_INT, 0, 5, MPI_COMM_WORLD);
        }
    }
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    CHECK(sum == size * (size + 1) / 2.0, "iallreduce %g", sum);
    if (rank == 0)
        CHECK(token == 42, "token %d", token);
}

enum { SMALL = 4, LARGE = 40000 };

static void many_outstanding(int rank, int size) {
    enum { N = 9 };
    MPI_Request r[N];
    int n = 0;
    int small[SMALL], *large = malloc(LARGE * sizeof(int));
    long lsum[SMALL], red = 0, scan = 0, one = rank + 1;
    int *gathered = malloc((size_t)size * sizeof(int)), *sendv = malloc((size_t)size * sizeof(int)),
        *recvv = malloc((size_t)size * sizeof(int));
    double *big = malloc(LARGE * sizeof(double)), *bigsum = malloc(LARGE * sizeof(double));
    for (int i = 0; i < SMALL; i++)
        small[i] = rank == 1 % size ? 100 + i : -1;
    for (int i = 0; i < LARGE; i++) {
        large[i] = rank == 0 ? i : -1;
        big[i] = rank + i;
    }
    for (int i = 0; i < size; i++)
        sendv[i] = rank * 100 + i;
    MPI_Ibarrier(MPI_COMM_WORLD, &r[n++]);
    MPI_Ibcast(small, SMALL, MPI_INT, 1 % size, MPI_COMM_WORLD, &r[n++]);
    MPI_Ibcast(large, LARGE, MPI_INT, 0, MPI_COMM_WORLD, &r[n++]);
    long ones[SMALL] = {1, 2, 3, 4};
    MPI_Iallreduce(ones, lsum, SMALL, MPI_LONG, MPI_SUM, MPI_COMM_WORLD, &r[n++]);
    MPI_Iallreduce(big, bigsum, LARGE, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r[n++]);
    MPI_Iallgather(&rank, 1, MPI_INT, gathered, 1, MPI_INT, MPI_COMM_WORLD, &r[n++]);
    MPI_Ialltoall(sendv, 1, MPI_INT, recvv, 1, MPI_INT, MPI_COMM_WORLD, &r[n++]);
    MPI_Ireduce(&one, &red, 1, MPI_LONG, MPI_SUM, size - 1, MPI_COMM_WORLD, &r[n++]);
    MPI_Iscan(&one, &scan, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD, &r[n++]);
    /* Polled in reverse order: the last started may finish first. */
    int left = N;
    while (left > 0) {
        left = 0;
        for (int i = N - 1; i >= 0; i--) {
            int flag = 0;
            if (r[i] != MPI_REQUEST_NULL)
                MPI_Test(&r[i], &flag, MPI_STATUS_IGNORE);
            left += r[i] != MPI_REQUEST_NULL;
        }
    }
    for (int i = 0; i < SMALL; i++) {
        CHECK(small[i] == 100 + i, "ibcast small[%d] %d", i, small[i]);
        CHECK(lsum[i] == (long)(i + 1) * size, "iallreduce small[%d] %ld", i, lsum[i]);
    }
    int bad = 0;
    for (int i = 0; i < LARGE; i++) {
        bad += large[i] != i;
        bad += bigsum[i] != (double)size * (size - 1) / 2 + (double)i * size;
    }
    CHECK(bad == 0, "large ibcast / iallreduce: %d wrong elements", bad);
    for (int i = 0; i < size; i++) {
        CHECK(gathered[i] == i, "iallgather[%d] %d", i, gathered[i]);
        CHECK(recvv[i] == i * 100 + rank, "ialltoall[%d] %d", i, recvv[i]);
    }
    if (rank == size - 1)
        CHECK(red == (long)size * (size + 1) / 2, "ireduce %ld", red);
    CHECK(scan == (long)(rank + 1) * (rank + 2) / 2, "iscan %ld", scan);
    free(large);
    free(gathered);
    free(sendv);
    free(recvv);
    free(big);
    free(bigsum);
}

static void idup_and_persistent(int rank, int size) {
    MPI_Comm d1, d2;
    MPI_Request r[3];
    int mine = rank, sum = 0;
    MPI_Comm_idup(MPI_COMM_WORLD, &d1, &r[0]);
    MPI_Iallreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r[1]);
    MPI_Comm_idup(MPI_COMM_WORLD, &d2, &r[2]);
    MPI_Status st[3];
    MPI_Waitall(3, r, st);
    CHECK(sum == size * (size - 1) / 2, "iallreduce beside idup %d", sum);
    int result;
    MPI_Comm_compare(d1, d2, &result);
    CHECK(result == MPI_CONGRUENT, "two duplicates compare %d", result);
    int v1 = rank == 0 ? 5 : 0, v2 = rank == 0 ? 6 : 0;
    MPI_Bcast(&v2, 1, MPI_INT, 0, d2);
    MPI_Bcast(&v1, 1, MPI_INT, 0, d1);
    CHECK(v1 == 5 && v2 == 6, "bcasts on the duplicates %d %d", v1, v2);

    MPI_Request p;
    int in = 0, out = 0;
    MPI_Allreduce_init(&in, &out, 1, MPI_INT, MPI_SUM, d1, MPI_INFO_NULL, &p);
    for (int round = 1; round <= 2; round++) {
        in = rank * round;
        MPI_Start(&p);
        /* Point-to-point around a ring while it runs. */
        int to = (rank + 1) % size, from = (rank + size - 1) % size, got = -1;
        MPI_Sendrecv(&rank, 1, MPI_INT, to, 9, &got, 1, MPI_INT, from, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        CHECK(got == from, "ring %d", got);
        MPI_Wait(&p, MPI_STATUS_IGNORE);
        CHECK(out == round * size * (size - 1) / 2, "persistent allreduce round %d: %d", round, out);
    }
    MPI_Request_free(&p);
    MPI_Comm_free(&d1);
    MPI_Comm_free(&d2);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    opposite_orders(rank, size);
    if (size > 1)
        overlap_with_p2p(rank, size);
    many_outstanding(rank, size);
    idup_and_persistent(rank, size);
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && total == 0)
        printf("icoll: ok\n");
    MPI_Finalize();
    return total != 0;
}
