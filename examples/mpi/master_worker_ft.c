/* A fault-tolerant master-worker MPI program: rank 0 deals tasks, workers return results, and
 * the master takes them in whatever order they come (MPI_ANY_SOURCE: under message logging,
 * each such receive is a determinant, replayed after a failure). Rounds end with a
 * checkpoint. Rank 0 prints a checksum of every task's result; after a node is killed and
 * respawned it is bit-identical.
 *
 *   mpicc.mpich -I mpi/include master_worker_ft.c -o master_worker_ft
 *   REVERB_LOG=causal reverb run --mpi -n 4 --ranks-per-node 2 --respawn 1 -- ./master_worker_ft 40
 */
#include <inttypes.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpix_reverb.h"

#define TASKS_MAX 4096
#define TAG_TASK 1
#define TAG_RESULT 2
#define TAG_STOP 3

struct master {
    long round;
    double result[TASKS_MAX];
};

struct worker {
    long round;
    long done;
};

/* The work: deterministic, a little floating point. */
static double work(long task) {
    double x = (double)task + 0.5;
    for (int i = 0; i < 2000; i++)
        x = x * 0.999 + 1.0 / (x + 1.0);
    return x;
}

static uint64_t fnv1a(uint64_t h, const void *data, size_t len) {
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static int restore(void *state, long bytes) {
    int restored = 0;
    if (MPIX_Reverb_protect) {
        MPIX_Reverb_protect(state, bytes);
        MPIX_Reverb_restore(&restored);
    }
    return restored;
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 40;
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int workers = size - 1;
    if (workers < 1 || rounds * workers > TASKS_MAX) {
        fprintf(stderr, "master_worker_ft: needs 2+ ranks and rounds * workers <= %d\n", TASKS_MAX);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (rank == 0) {
        static struct master m;
        if (restore(&m, sizeof m))
            fprintf(stderr, "master_worker_ft: master restored at round %ld\n", m.round);
        for (; m.round < rounds; ) {
            for (int w = 1; w <= workers; w++) {
                long task = m.round * workers + (w - 1);
                MPI_Send(&task, 1, MPI_LONG, w, TAG_TASK, MPI_COMM_WORLD);
            }
            for (int k = 0; k < workers; k++) {
                double reply[2];
                MPI_Status st;
                MPI_Recv(reply, 2, MPI_DOUBLE, MPI_ANY_SOURCE, TAG_RESULT, MPI_COMM_WORLD, &st);
                m.result[(long)reply[0]] = reply[1];
            }
            m.round++;
            if (MPIX_Reverb_checkpoint && m.round < rounds)
                MPIX_Reverb_checkpoint();
        }
        uint64_t h = fnv1a(0xcbf29ce484222325ULL, m.result, sizeof(double) * rounds * workers);
        printf("master_worker_ft: %d workers, %ld tasks, checksum %016" PRIx64 "\n", workers,
               rounds * workers, h);
    } else {
        static struct worker w;
        if (restore(&w, sizeof w))
            fprintf(stderr, "master_worker_ft: worker %d restored at round %ld\n", rank, w.round);
        for (; w.round < rounds; ) {
            long task;
            MPI_Recv(&task, 1, MPI_LONG, 0, TAG_TASK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            double reply[2] = {(double)task, work(task)};
            MPI_Send(reply, 2, MPI_DOUBLE, 0, TAG_RESULT, MPI_COMM_WORLD);
            w.done++;
            w.round++;
            if (MPIX_Reverb_checkpoint && w.round < rounds)
                MPIX_Reverb_checkpoint();
        }
    }
    MPI_Finalize();
    return 0;
}
