/* One-sided epochs under message logging with a node killed: the job must recover with the
 * failure-free answer (windows made by MPI_Win_create or MPI_Win_allocate, created before
 * MPIX_Reverb_restore), or stop with an error naming the window (a shared window, or one
 * created after the restore), never finish with a wrong checksum.
 *
 *   rma_ft [MODE [FLAVOR [ITERATIONS [BYTES]]]]   (defaults: fence create 40 0)
 *   MODE: fence (puts, accumulates, gets between fences), lock (exclusive fetch-and-op,
 *         lock_all accumulates, shared get-accumulate, then barriers), pscw (post, start,
 *         puts, accumulates, gets, complete, wait);
 *   FLAVOR: create (MPI_Win_create over the program's memory), allocate (MPI_Win_allocate),
 *         shared (MPI_Win_allocate_shared), late (MPI_Win_create after the restore);
 *   BYTES: each epoch also puts (and, fence and pscw, gets) a region of BYTES to or from the
 *         right neighbour, so transfers on both sides of the eager, rendezvous and fragment
 *         sizes are logged and replayed too (0: none).
 *
 * Every answer is fixed by the program (no two origins race for a slot), so the checksum is
 * the same on every run. A checkpoint every 10 iterations; rank 0 prints
 * "rma_ft MODE FLAVOR: checksum H" (every rank's hash mixed), a restored rank "rank R
 * restored at iteration I". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpix_reverb.h"

#define SLOTS 4

static int rank, size, left, right;
/* The bulk regions (longs each; 0: none): `src` put into the right rank's region A (at SLOTS),
 * `dst` got from its region A (fence) or B (pscw, at SLOTS + bulk, written by its owner). */
static long bulk;
static long *src, *dst;

static unsigned long mix(unsigned long h, long x) {
    return (h ^ (unsigned long)x) * 1099511628211UL;
}

static unsigned long mix_all(unsigned long h, const long *p, long n) {
    for (long i = 0; i < n; i++)
        h = mix(h, p[i]);
    return h;
}

static void fill(long *p, long it, long salt) {
    for (long i = 0; i < bulk; i++)
        p[i] = (it * size + rank) * 7919 + salt + i * 31;
}

/* Slot 0: the left rank's put; 1: the right rank's accumulate; 2 read by the left rank. */
static unsigned long fence_epoch(long it, long *mem, MPI_Win win, unsigned long h) {
    long v = it * size + rank, got = 0;
    MPI_Win_fence(0, win);
    MPI_Put(&v, 1, MPI_LONG, right, 0, 1, MPI_LONG, win);
    MPI_Accumulate(&v, 1, MPI_LONG, left, 1, 1, MPI_LONG, MPI_SUM, win);
    if (bulk) {
        fill(src, it, 1);
        MPI_Put(src, (int)bulk, MPI_LONG, right, SLOTS, (int)bulk, MPI_LONG, win);
    }
    MPI_Win_fence(0, win);
    MPI_Get(&got, 1, MPI_LONG, right, 2, 1, MPI_LONG, win);
    if (bulk)
        MPI_Get(dst, (int)bulk, MPI_LONG, right, SLOTS, (int)bulk, MPI_LONG, win);
    MPI_Win_fence(0, win);
    mem[2] = mem[0] * 3 + mem[1];
    h = mix_all(mix_all(h, mem + SLOTS, bulk), dst, bulk);
    return mix(mix(mix(h, mem[0]), mem[1]), got);
}

/* Slot 2: the left rank's fetch-and-add (exclusive); 3: every rank's accumulate (lock_all);
 * 1: the right rank's get-accumulate (replace, shared). The target reads them between the
 * epochs' barrier and the next iteration's, when no origin touches them (same-host origins
 * write MPI_Win_allocate's memory without the target, outside logging). */
static unsigned long lock_epoch(long it, long *mem, MPI_Win win, unsigned long h) {
    long v = it * size + rank + 1, old = 0, prev = 0;
    MPI_Barrier(MPI_COMM_WORLD); /* the previous reads (or the first memset) are done */
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, right, 0, win);
    MPI_Fetch_and_op(&v, &old, MPI_LONG, right, 2, MPI_SUM, win);
    if (bulk) {
        fill(src, it, 2);
        MPI_Put(src, (int)bulk, MPI_LONG, right, SLOTS, (int)bulk, MPI_LONG, win);
    }
    MPI_Win_unlock(right, win);
    MPI_Win_lock_all(0, win);
    for (int t = 0; t < size; t++)
        MPI_Accumulate(&v, 1, MPI_LONG, t, 3, 1, MPI_LONG, MPI_SUM, win);
    MPI_Win_unlock_all(win);
    MPI_Win_lock(MPI_LOCK_SHARED, left, 0, win);
    MPI_Get_accumulate(&v, 1, MPI_LONG, &prev, 1, MPI_LONG, left, 1, 1, MPI_LONG, MPI_REPLACE, win);
    MPI_Win_unlock(left, win);
    MPI_Barrier(MPI_COMM_WORLD);
    h = mix_all(h, mem + SLOTS, bulk);
    return mix(mix(mix(mix(h, old), prev), mem[2]), mem[3] + mem[1]);
}

/* Post to and start on both neighbours: slot 0 the left rank's put, 1 the right rank's
 * accumulate, 2 stored by the target before its post and read by the left rank. */
static unsigned long pscw_epoch(long it, long *mem, MPI_Win win, MPI_Group nb, unsigned long h) {
    long v = it * size + rank, got = 0;
    mem[2] = (long)(h % 1000) + it;
    fill(mem + SLOTS + bulk, it, (long)(h % 1000));
    MPI_Win_post(nb, 0, win);
    MPI_Win_start(nb, 0, win);
    MPI_Put(&v, 1, MPI_LONG, right, 0, 1, MPI_LONG, win);
    MPI_Accumulate(&v, 1, MPI_LONG, left, 1, 1, MPI_LONG, MPI_SUM, win);
    MPI_Get(&got, 1, MPI_LONG, right, 2, 1, MPI_LONG, win);
    if (bulk) {
        fill(src, it, 3);
        MPI_Put(src, (int)bulk, MPI_LONG, right, SLOTS, (int)bulk, MPI_LONG, win);
        MPI_Get(dst, (int)bulk, MPI_LONG, right, SLOTS + bulk, (int)bulk, MPI_LONG, win);
    }
    MPI_Win_complete(win);
    MPI_Win_wait(win);
    h = mix_all(mix_all(h, mem + SLOTS, bulk), dst, bulk);
    return mix(mix(mix(h, mem[0]), mem[1]), got);
}

static MPI_Win make(const char *flavor, long *own, long **mem) {
    MPI_Win win;
    MPI_Aint bytes = (MPI_Aint)(SLOTS + 2 * bulk) * (MPI_Aint)sizeof(long);
    if (!strcmp(flavor, "allocate")) {
        MPI_Win_allocate(bytes, sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, mem, &win);
    } else if (!strcmp(flavor, "shared")) {
        MPI_Win_allocate_shared(bytes, sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, mem, &win);
    } else {
        *mem = own;
        MPI_Win_create(own, bytes, sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    }
    MPI_Win_set_name(win, "rma_ft");
    memset(*mem, 0, bytes);
    return win;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const char *mode = argc > 1 ? argv[1] : "fence";
    const char *flavor = argc > 2 ? argv[2] : "create";
    long iterations = argc > 3 ? atol(argv[3]) : 40;
    long bytes = argc > 4 ? atol(argv[4]) : 0;
    bulk = (bytes + (long)sizeof(long) - 1) / (long)sizeof(long);
    if (strcmp(mode, "fence") && strcmp(mode, "lock") && strcmp(mode, "pscw")) {
        fprintf(stderr, "rma_ft: unknown mode %s\n", mode);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (bulk < 0 || bulk > (1L << 24)) {
        fprintf(stderr, "rma_ft: BYTES %ld out of 0..%ld\n", bytes, (1L << 24) * (long)sizeof(long));
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int restored = 0, late = !strcmp(flavor, "late");
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    left = (rank + size - 1) % size;
    right = (rank + 1) % size;
    long *own = calloc((size_t)(SLOTS + 2 * bulk), sizeof(long));
    src = calloc((size_t)bulk + 1, sizeof(long));
    dst = calloc((size_t)bulk + 1, sizeof(long));
    if (!own || !src || !dst) {
        fprintf(stderr, "rma_ft: out of memory for %ld bytes\n", bytes);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long *mem = NULL;
    MPI_Win win = MPI_WIN_NULL;
    /* Windows made before the restore are re-made by a restarted rank and get their memory back. */
    if (!late)
        win = make(flavor, own, &mem);
    unsigned long state[2] = {0, 14695981039346656037UL}; /* iteration, hash */
    if (MPIX_Reverb_protect) {
        MPIX_Reverb_protect(state, sizeof state);
        MPIX_Reverb_restore(&restored);
    }
    if (restored)
        printf("rma_ft: rank %d restored at iteration %lu\n", rank, state[0]);
    if (late)
        win = make("create", own, &mem);
    MPI_Group world, nb;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int neighbours[2] = {left, right};
    MPI_Group_incl(world, left == right ? 1 : 2, neighbours, &nb);
    while (state[0] < (unsigned long)iterations) {
        long it = (long)state[0];
        if (!strcmp(mode, "fence"))
            state[1] = fence_epoch(it, mem, win, state[1]);
        else if (!strcmp(mode, "lock"))
            state[1] = lock_epoch(it, mem, win, state[1]);
        else
            state[1] = pscw_epoch(it, mem, win, nb, state[1]);
        /* Counted before the checkpoint: a restored rank goes on with the next iteration. */
        state[0]++;
        if (state[0] % 10 == 0 && MPIX_Reverb_checkpoint)
            MPIX_Reverb_checkpoint();
    }
    unsigned long *all = calloc((size_t)size, sizeof *all);
    MPI_Gather(&state[1], 1, MPI_UNSIGNED_LONG, all, 1, MPI_UNSIGNED_LONG, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        unsigned long h = 14695981039346656037UL;
        for (int r = 0; r < size; r++)
            h = mix(h, (long)all[r]);
        printf("rma_ft %s %s: checksum %016lx\n", mode, flavor, h);
    }
    free(all);
    MPI_Group_free(&nb);
    MPI_Group_free(&world);
    MPI_Win_free(&win);
    free(own);
    free(src);
    free(dst);
    MPI_Finalize();
    return 0;
}
