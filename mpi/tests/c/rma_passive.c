/* Passive target while the target calls no MPI, on 2 ranks (meant to run on two hosts, where
 * the origin cannot map the target's memory: ci/rma-hosts.sh). Rank 1 exposes a window
 * (MPI_Win_allocate, then MPI_Win_create over its own buffer) and computes for COMPUTE_MS
 * without calling MPI; rank 0, holding a shared lock taken before, puts (contiguous and
 * strided), gets and flushes meanwhile, and each flush must come back well before the target
 * computed to its end: the provider's one-sided path (RDMA on verbs, the tcp provider's
 * serving thread) moves the bytes, not the target. Then the target checks what landed, and an
 * out-of-range put is refused with MPI_ERR_RMA_RANGE. Rank 0 prints "rma_passive: ok". */
#define _POSIX_C_SOURCE 199309L
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"

#define SLOTS 4096
#define COMPUTE_MS 1500

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Busy for `ms` without calling MPI. */
static void compute(double ms) {
    double end = now_ms() + ms;
    volatile long x = 0;
    while (now_ms() < end)
        for (int i = 0; i < 1000; i++)
            x += i;
}

/* Rank 0's operations on rank 1's window of SLOTS longs, all inside the target's compute. */
static void origin(MPI_Win win) {
    long src[SLOTS], got[SLOTS];
    for (int i = 0; i < SLOTS; i++)
        src[i] = 7 * i + 1;
    MPI_Datatype every_other;
    MPI_Type_vector(8, 1, 2, MPI_LONG, &every_other);
    MPI_Type_commit(&every_other);
    MPI_Barrier(MPI_COMM_WORLD); /* the target starts computing */
    double start = now_ms();
    long one = 42;
    MPI_Put(&one, 1, MPI_LONG, 1, 0, 1, MPI_LONG, win);
    MPI_Win_flush(1, win);
    double first = now_ms() - start;
    MPI_Put(src, SLOTS / 2, MPI_LONG, 1, SLOTS / 2, SLOTS / 2, MPI_LONG, win);
    MPI_Put(src, 8, MPI_LONG, 1, 16, 1, every_other, win);
    MPI_Win_flush(1, win);
    MPI_Get(got, SLOTS / 2, MPI_LONG, 1, SLOTS / 2, SLOTS / 2, MPI_LONG, win);
    MPI_Win_flush(1, win);
    double all = now_ms() - start;
    CHECK(all < COMPUTE_MS / 3, "the operations took %.1f ms of the target's %d ms compute", all,
          COMPUTE_MS);
    CHECK(memcmp(got, src, sizeof(long) * SLOTS / 2) == 0, "get after put: got[1] %ld", got[1]);
    printf("rma_passive: put+flush %.3f ms, all %.3f ms while the target computed\n", first, all);
    MPI_Type_free(&every_other);
    MPI_Barrier(MPI_COMM_WORLD); /* the target is back */
    MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
    int rc = MPI_Put(src, 2, MPI_LONG, 1, SLOTS - 1, 2, MPI_LONG, win);
    if (rc == MPI_SUCCESS)
        rc = MPI_Win_flush(1, win);
    int class = MPI_SUCCESS;
    MPI_Error_class(rc, &class);
    CHECK(class == MPI_ERR_RMA_RANGE, "a put past the window's end: class %d", class);
}

static void target(long *base) {
    MPI_Barrier(MPI_COMM_WORLD);
    compute(COMPUTE_MS);
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(base[0] == 42, "slot 0: %ld", base[0]);
    for (int i = 0; i < 8; i++)
        CHECK(base[16 + 2 * i] == 7 * i + 1 && base[17 + 2 * i] == 0, "strided slot %d: %ld", i,
              base[16 + 2 * i]);
    for (int i = 0; i < SLOTS / 2; i++)
        if (base[SLOTS / 2 + i] != 7 * i + 1) {
            CHECK(0, "slot %d: %ld", SLOTS / 2 + i, base[SLOTS / 2 + i]);
            break;
        }
}

/* One round on `win` (over `base` at rank 1). */
static void round_on(MPI_Win win, long *base, int rank) {
    if (rank == 0)
        MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
    if (rank == 0)
        origin(win);
    else if (rank == 1)
        target(base);
    else {
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    if (rank == 0)
        MPI_Win_unlock(1, win);
    MPI_Win_free(&win);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size >= 2, "needs 2 ranks, has %d", size);
    long *base;
    MPI_Win win;
    MPI_Win_allocate(SLOTS * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    memset(base, 0, SLOTS * sizeof(long));
    MPI_Barrier(MPI_COMM_WORLD);
    round_on(win, base, rank);

    long *own = calloc(SLOTS, sizeof(long));
    MPI_Win_create(own, SLOTS * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    round_on(win, own, rank);
    free(own);

    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && all == 0)
        printf("rma_passive: ok\n");
    MPI_Finalize();
    return all != 0;
}
