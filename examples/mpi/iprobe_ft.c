/* A master that works too: between MPI_Iprobe polls for a worker's request it computes the
 * next task of the pool itself, and when a request has arrived (flag=1) it receives it from
 * the probed source (a named MPI_Recv) and hands that worker the next task. Which tasks the
 * master computed and which each worker got follow when MPI_Iprobe first saw each request:
 * under message logging each MPI_Iprobe's finding is logged, so after the master's loss its
 * re-execution sees the same requests at the same polls. With every task handed out it waits
 * for the last results with a wildcard MPI_Probe, whose finding is logged too. With `issend`
 * it hands tasks out by MPI_Issend and works while MPI_Test says the worker has not taken it
 * yet (the test comes true with the acknowledgement's delivery, logged). A result for a task
 * the master did not give that worker (a re-execution that polled differently) stops the job.
 * Each worker prints a hash of the tasks it was given, the master what it gave each worker and
 * which tasks it did itself (the two must agree), and a checksum of every task's result (the
 * failure-free one). BYTES (default 16) sizes each result message, the one MPI_Iprobe finds:
 * the task and its result, then doubles derived from the result, which the master checks
 * (at the eager limit, above the rendezvous threshold, above REVERB_LOG_MAX_MESSAGE).
 *
 *   mpicc.mpich -I mpi/include iprobe_ft.c -o iprobe_ft
 *   REVERB_LOG=causal REVERB_FAULT=0:30 reverb run --mpi -n 4 --ranks-per-node 2 --respawn 1 -- \
 *       ./iprobe_ft 300 [send|issend] [BYTES]
 */
#include <inttypes.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TASKS_MAX 100000
#define BYTES_MAX (1 << 20)
#define WORKERS_MAX 64
#define TAG_TASK 1
#define TAG_REQUEST 2
#define FNV_START 0xcbf29ce484222325ULL

/* The work: deterministic, a little floating point, longer for some tasks than others. */
static double work(long task) {
    double x = (double)task + 0.5;
    for (long i = 0; i < 20000 + (task % 5) * 15000; i++)
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

/* Each task's result, and who it was given to (0: the master did it); the master's pool
 * (`next` is the first task not taken) and what it gave each worker (0: itself). */
static double result[TASKS_MAX];
static int owner[TASKS_MAX];
static long tasks, next;
static uint64_t given[WORKERS_MAX + 1];
static long count[WORKERS_MAX + 1];
/* "issend": tasks go by MPI_Issend, and the master works while MPI_Test says the worker has
 * not received it yet. */
static int by_issend;
/* Doubles per result message (BYTES / 8): the task, its result, then padding from the result. */
static int reply_len = 2;

static double pad(double result, int i) { return result * (double)i + (double)i; }

static void note(long task, int w) {
    owner[task] = w;
    given[w] = fnv1a(given[w], &task, sizeof task);
    count[w]++;
}

/* The master's own unit: the pool's next task. */
static void own_unit(void) {
    long t = next++;
    result[t] = work(t);
    note(t, 0);
}

static void give(long task, int w) {
    if (by_issend) {
        MPI_Request req;
        int done = 0;
        MPI_Issend(&task, 1, MPI_LONG, w, TAG_TASK, MPI_COMM_WORLD, &req);
        for (MPI_Test(&req, &done, MPI_STATUS_IGNORE); !done; MPI_Test(&req, &done, MPI_STATUS_IGNORE))
            if (next < tasks)
                own_unit();
    } else {
        MPI_Send(&task, 1, MPI_LONG, w, TAG_TASK, MPI_COMM_WORLD);
    }
    if (task >= 0)
        note(task, w);
}

static double reply[BYTES_MAX / sizeof(double)];

static void master(int workers) {
    long outstanding = tasks < workers ? tasks : workers; /* workers holding a task */
    for (int w = 0; w <= workers; w++)
        given[w] = FNV_START;
    for (long t = 0; t < tasks; t++)
        owner[t] = -1;
    for (int w = 1; w <= workers; w++)
        give(next < tasks ? next++ : -1, w);
    while (outstanding > 0) {
        int flag = 1;
        MPI_Status st;
        /* Nothing left to do alone: wait for the next request (a wildcard MPI_Probe, whose
         * source the named MPI_Recv below takes from). */
        if (next < tasks)
            MPI_Iprobe(MPI_ANY_SOURCE, TAG_REQUEST, MPI_COMM_WORLD, &flag, &st);
        else
            MPI_Probe(MPI_ANY_SOURCE, TAG_REQUEST, MPI_COMM_WORLD, &st);
        if (!flag) {
            own_unit();
            continue;
        }
        int w = st.MPI_SOURCE, probed = 0;
        MPI_Get_count(&st, MPI_DOUBLE, &probed);
        if (probed != reply_len) {
            fprintf(stderr, "iprobe_ft: probed a result of %d doubles from %d, not %d\n", probed, w, reply_len);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        MPI_Recv(reply, reply_len, MPI_DOUBLE, w, TAG_REQUEST, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        long t = (long)reply[0];
        if (t < 0 || t >= tasks || owner[t] != w) {
            fprintf(stderr, "iprobe_ft: a result for task %ld from %d, not given it\n", t, w);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        for (int i = 2; i < reply_len; i++)
            if (reply[i] != pad(reply[1], i)) {
                fprintf(stderr, "iprobe_ft: task %ld's result from %d is damaged at double %d\n", t, w, i);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        result[t] = reply[1];
        long task = next < tasks ? next++ : -1;
        give(task, w);
        if (task < 0)
            outstanding--;
    }
    for (int w = 1; w <= workers; w++)
        printf("iprobe_ft: master gave worker %d %ld tasks, hash %016" PRIx64 "\n", w, count[w], given[w]);
    uint64_t sum = fnv1a(FNV_START, result, sizeof(double) * tasks);
    printf("iprobe_ft: %ld tasks, %ld by the master (hash %016" PRIx64 "), %d workers, checksum %016" PRIx64 "\n",
           tasks, count[0], given[0], workers, sum);
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
        reply[0] = (double)task;
        reply[1] = work(task);
        for (int i = 2; i < reply_len; i++)
            reply[i] = pad(reply[1], i);
        MPI_Send(reply, reply_len, MPI_DOUBLE, 0, TAG_REQUEST, MPI_COMM_WORLD);
    }
    printf("iprobe_ft: worker %d got %ld tasks, hash %016" PRIx64 "\n", rank, count, got);
}

int main(int argc, char **argv) {
    tasks = argc > 1 ? atol(argv[1]) : 300;
    by_issend = argc > 2 && strcmp(argv[2], "issend") == 0;
    long bytes = argc > 3 ? atol(argv[3]) : 16;
    reply_len = (int)(bytes / (long)sizeof(double));
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2 || size - 1 > WORKERS_MAX || tasks < 1 || tasks > TASKS_MAX || bytes < 16 || bytes > BYTES_MAX ||
        bytes % 8 != 0) {
        if (rank == 0)
            fprintf(stderr, "iprobe_ft: needs 2 to %d ranks, 1 to %d tasks and 16 to %d bytes (a multiple of 8)\n",
                    WORKERS_MAX + 1, TASKS_MAX, BYTES_MAX);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (rank == 0)
        master(size - 1);
    else
        worker(rank);
    MPI_Finalize();
    return 0;
}
