/* MPI microbenchmarks for the side-by-side comparison (scripts/compare-mpi.sh), one source for
 * every MPI: built by mpicc.mpich it runs on Debian's MPICH and, unchanged, on reverb; built by
 * Open MPI's mpicc it runs on Open MPI.
 *
 *   mpi_bench lat BYTES ITERS     ping-pong between ranks 0 and 1: half round trip, µs
 *   mpi_bench bw BYTES ITERS      rank 0 streams to rank 1 (windows of 64 Isends): MB/s
 *   mpi_bench allreduce ITERS     8-byte MPI_Allreduce over all ranks: µs per call
 *   mpi_bench put_lat|get_lat BYTES ITERS
 *                                 rank 0 puts (gets) into rank 1's MPI_Win_allocate window
 *                                 under a shared lock, MPI_Win_flush after each: µs per op
 *   mpi_bench put_bw|get_bw BYTES ITERS
 *                                 the same, windows of 64 ops per flush: MB/s
 * (osu_put_latency / osu_put_bw's passive-target mode: rank 1 waits in a barrier.)
 * Rank 0 prints one line: "<kind> <bytes> <value>". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64

static double lat(int rank, long bytes, long iters) {
    char *buf = calloc(1, bytes > 0 ? bytes : 1);
    /* Untimed first rounds, at least 1000 (osu_latency skips 100-1000): a library's first
       messages to a peer set up paths (a cross-memory probe, pinned pages) that a few hundred
       timed ones would average in. */
    long warm = iters / 10 > 1000 ? iters / 10 : 1000;
    double t0 = 0;
    for (long i = 0; i < iters + warm; i++) {
        if (i == warm)
            t0 = MPI_Wtime();
        if (rank == 0) {
            MPI_Send(buf, bytes, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(buf, bytes, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(buf, bytes, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, bytes, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
    }
    free(buf);
    return (MPI_Wtime() - t0) / iters / 2 * 1e6;
}

static double bw(int rank, long bytes, long iters) {
    char *buf = calloc(WINDOW, bytes);
    MPI_Request req[WINDOW];
    MPI_Status sts[WINDOW];
    char ack = 0;
    long warm = iters / 10 + 1;
    double t0 = 0;
    for (long i = 0; i < iters + warm; i++) {
        if (i == warm)
            t0 = MPI_Wtime();
        for (int w = 0; w < WINDOW; w++) {
            if (rank == 0)
                MPI_Isend(buf + w * bytes, bytes, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &req[w]);
            else if (rank == 1)
                MPI_Irecv(buf + w * bytes, bytes, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &req[w]);
        }
        if (rank <= 1)
            MPI_Waitall(WINDOW, req, sts);
        if (rank == 0)
            MPI_Recv(&ack, 1, MPI_BYTE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        else if (rank == 1)
            MPI_Send(&ack, 1, MPI_BYTE, 0, 3, MPI_COMM_WORLD);
    }
    double secs = MPI_Wtime() - t0;
    free(buf);
    return (double)bytes * WINDOW * iters / secs / 1e6;
}

/* Passive-target one-sided: rank 0 runs ITERS rounds of `per_flush` puts or gets into (from)
 * rank 1's window, each round closed by MPI_Win_flush; returns the seconds of the timed rounds. */
static double rma(int rank, int is_put, long bytes, long iters, int per_flush) {
    char *base, *local = calloc(per_flush, bytes > 0 ? bytes : 1);
    MPI_Win win;
    MPI_Win_allocate((MPI_Aint)bytes * per_flush, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    long warm = iters / 10 + 1;
    double t0 = 0, secs = 0;
    if (rank == 0) {
        MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
        for (long i = 0; i < iters + warm; i++) {
            if (i == warm)
                t0 = MPI_Wtime();
            for (int w = 0; w < per_flush; w++) {
                MPI_Aint disp = (MPI_Aint)w * bytes;
                if (is_put)
                    MPI_Put(local + disp, bytes, MPI_BYTE, 1, disp, bytes, MPI_BYTE, win);
                else
                    MPI_Get(local + disp, bytes, MPI_BYTE, 1, disp, bytes, MPI_BYTE, win);
            }
            MPI_Win_flush(1, win);
        }
        secs = MPI_Wtime() - t0;
        MPI_Win_unlock(1, win);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_free(&win);
    free(local);
    return secs;
}

static double allreduce(long iters) {
    double in = 1.0, out = 0;
    long warm = iters / 10 + 1;
    double t0 = 0;
    for (long i = 0; i < iters + warm; i++) {
        if (i == warm)
            t0 = MPI_Wtime();
        MPI_Allreduce(&in, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    return (MPI_Wtime() - t0) / iters * 1e6;
}

int main(int argc, char **argv) {
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc < 3) {
        if (rank == 0)
            fprintf(stderr, "usage: mpi_bench lat|bw|put_lat|get_lat|put_bw|get_bw BYTES ITERS | allreduce ITERS\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *kind = argv[1];
    int put = strncmp(kind, "put_", 4) == 0, get = strncmp(kind, "get_", 4) == 0;
    long bytes = strcmp(kind, "allreduce") == 0 ? 8 : atol(argv[2]);
    long iters = atol(argv[strcmp(kind, "allreduce") == 0 ? 2 : 3]);
    double v;
    if (put || get) {
        int stream = strcmp(kind + 4, "bw") == 0;
        double secs = rma(rank, put, bytes, iters, stream ? WINDOW : 1);
        v = stream ? (double)bytes * WINDOW * iters / secs / 1e6 : secs / iters * 1e6;
    } else {
        v = strcmp(kind, "lat") == 0  ? lat(rank, bytes, iters)
            : strcmp(kind, "bw") == 0 ? bw(rank, bytes, iters)
                                      : allreduce(iters);
    }
    if (rank == 0)
        printf("%s %ld %.3f\n", kind, bytes, v);
    MPI_Finalize();
    return 0;
}
