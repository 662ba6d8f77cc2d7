/* A self-scheduling master-worker MPI program: the master polls MPI_Improbe for any worker's
 * result, receives it with MPI_Mrecv and hands that worker the next task at once, so which
 * worker computes which task follows the order results arrive in. Under message logging each
 * matched probe's take is a determinant: after a failure the master's re-execution gives the
 * same tasks to the same workers. Each worker prints a hash of the tasks it was given, the
 * master what it gave each worker (the two must agree), and a checksum of every task's
 * result (the failure-free one).
 *
 *   mpicc.mpich -I mpi/include dynamic_ft.c -o dynamic_ft
 *   REVERB_LOG=causal REVERB_FAULT=0:60 reverb run --mpi -n 4 --ranks-per-node 2 --respawn 1 -- ./dynamic_ft 200
 */
#include <inttypes.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define TASKS_MAX 100000
#define WORKERS_MAX 64
#define TAG_TASK 1
#define TAG_RESULT 2
#define FNV_START 0xcbf29ce484222325ULL

/* The work: deterministic, a little floating point, longer for some tasks than others. */
static double work(long task) {
    double x = (double)task + 0.5;
    for (long i = 0; i < 500 + (task % 7) * 300; i++)
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

static void master(long tasks, int workers) {
    static double result[TASKS_MAX];
    uint64_t given[WORKERS_MAX + 1];
    long count[WORKERS_MAX + 1] = {0}, next = 0, empty_probes = 0;
    long outstanding = tasks < workers ? tasks : workers; /* workers holding a task */
    for (int w = 1; w <= workers; w++) {
        long task = next < tasks ? next++ : -1; /* -1: stop */
        MPI_Send(&task, 1, MPI_LONG, w, TAG_TASK, MPI_COMM_WORLD);
        given[w] = task >= 0 ? fnv1a(FNV_START, &task, sizeof task) : FNV_START;
        count[w] = task >= 0;
    }
    while (outstanding > 0) {
        int flag;
        MPI_Message msg;
        MPI_Status st;
        MPI_Improbe(MPI_ANY_SOURCE, TAG_RESULT, MPI_COMM_WORLD, &flag, &msg, &st);
        if (!flag) {
            empty_probes++;
            continue;
        }
        double reply[2];
        MPI_Mrecv(reply, 2, MPI_DOUBLE, &msg, MPI_STATUS_IGNORE);
        long t = (long)reply[0];
        if (t < 0 || t >= tasks) {
            fprintf(stderr, "dynamic_ft: a result for task %ld from %d\n", t, st.MPI_SOURCE);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        result[t] = reply[1];
        int w = st.MPI_SOURCE;
        long task = next < tasks ? next++ : -1;
        MPI_Send(&task, 1, MPI_LONG, w, TAG_TASK, MPI_COMM_WORLD);
        if (task >= 0) {
            given[w] = fnv1a(given[w], &task, sizeof task);
            count[w]++;
        } else {
            outstanding--;
        }
    }
    for (int w = 1; w <= workers; w++)
        printf("dynamic_ft: master gave worker %d %ld tasks, hash %016" PRIx64 "\n", w, count[w], given[w]);
    printf("dynamic_ft: %ld tasks on %d workers (%ld empty probes), checksum %016" PRIx64 "\n", tasks,
           workers, empty_probes, fnv1a(FNV_START, result, sizeof(double) * tasks));
}

static void worker(int rank) {
    uint64_t got = FNV_START;
    long count = 0;
    for (;;) {
        long task;
        MPI_Recv(&task, 1, MPI_LONG, 0, TAG_TASK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (task < 0)
            break;
        got = fnv1a(got, &task, sizeof task);
        count++;
        double reply[2] = {(double)task, work(task)};
        MPI_Send(reply, 2, MPI_DOUBLE, 0, TAG_RESULT, MPI_COMM_WORLD);
    }
    printf("dynamic_ft: worker %d got %ld tasks, hash %016" PRIx64 "\n", rank, count, got);
}

int main(int argc, char **argv) {
    long tasks = argc > 1 ? atol(argv[1]) : 200;
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2 || size - 1 > WORKERS_MAX || tasks < 1 || tasks > TASKS_MAX) {
        if (rank == 0)
            fprintf(stderr, "dynamic_ft: needs 2 to %d ranks and 1 to %d tasks\n", WORKERS_MAX + 1, TASKS_MAX);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (rank == 0)
        master(tasks, size - 1);
    else
        worker(rank);
    MPI_Finalize();
    return 0;
}
