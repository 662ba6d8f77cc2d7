/* Collective microbenchmark for `scripts/reverb-scripts compare mpi-coll`, one source for every
 * MPI (built by mpicc.mpich it runs on MPICH and, unchanged, on reverb):
 *   coll_bench OP BYTES ITERS: µs per call of OP (allreduce|bcast|alltoall|barrier) over all
 * ranks, osu-style (a warm-up, then the mean of up to ITERS calls, about a second at most; the
 * slowest rank's). BYTES: the allreduce's vector (doubles), the bcast's message, the
 * alltoall's block per peer. Rank 0 prints "OP BYTES US ITERS". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *op = argv[1];
    long bytes = atol(argv[2]), iters = atol(argv[3]), warm = iters / 10 + 1 < 20 ? iters / 10 + 1 : 20;
    char *a = calloc(size, bytes + 8), *b = calloc(size, bytes + 8);
    double t0 = 0;
    for (long i = 0; i < iters + warm; i++) {
        if (i == warm) {
            /* At most about a second of calls: the warm-up's pace (rank 0's) sets the count. */
            double pace = (MPI_Wtime() - t0) / warm;
            long fit = pace > 0 ? (long)(1.0 / pace) + 1 : iters;
            if (fit < iters)
                iters = fit;
            MPI_Bcast(&iters, 1, MPI_LONG, 0, MPI_COMM_WORLD);
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
        }
        if (i == 0)
            t0 = MPI_Wtime();
        if (!strcmp(op, "allreduce"))
            MPI_Allreduce(a, b, bytes / 8, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        else if (!strcmp(op, "bcast"))
            MPI_Bcast(a, bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
        else if (!strcmp(op, "alltoall"))
            MPI_Alltoall(a, bytes, MPI_BYTE, b, bytes, MPI_BYTE, MPI_COMM_WORLD);
        else
            MPI_Barrier(MPI_COMM_WORLD);
    }
    double us = (MPI_Wtime() - t0) / iters * 1e6, worst;
    MPI_Reduce(&us, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%s %ld %.2f %ld\n", op, bytes, worst, iters);
    MPI_Finalize();
    return 0;
}
