/* One-sided communication against values computed here, on 2-4 ranks. Fence epochs: every
 * rank puts its rank into slot `rank` of its right neighbour's window, gets its left
 * neighbour's slot 0, accumulates (sum, max) into rank 0's counters, and a strided put
 * (vector target type). Then passive target: exclusive locks around fetch-and-add on rank 0
 * (each rank's result distinct), compare-and-swap, lock_all with flush, a put whose
 * target is inside a large blocking send, and post-start-complete-wait in a ring. Window
 * attributes, name and group along the way. Then a target that calls no MPI while the
 * others accumulate into its MPI_Win_allocate memory (same host: they reach it directly).
 * Rank 0 prints "rma: ok". */
#define _POSIX_C_SOURCE 199309L
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"

#define SLOTS 16

static void fences(int rank, int size) {
    long *base;
    MPI_Win win;
    MPI_Win_allocate(SLOTS * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    for (int i = 0; i < SLOTS; i++)
        base[i] = 1000 * rank + i;
    int right = (rank + 1) % size, left = (rank + size - 1) % size;

    MPI_Win_fence(0, win);
    long me = rank, got = -1;
    MPI_Put(&me, 1, MPI_LONG, right, 8 + rank, 1, MPI_LONG, win);
    MPI_Get(&got, 1, MPI_LONG, left, 0, 1, MPI_LONG, win);
    MPI_Win_fence(0, win);
    CHECK(got == 1000 * left, "get from %d: %ld", left, got);
    CHECK(base[8 + left] == left, "put from %d: %ld", left, base[8 + left]);

    long add[2] = {rank + 1, 10 * rank};
    MPI_Accumulate(&add[0], 1, MPI_LONG, 0, 1, 1, MPI_LONG, MPI_SUM, win);
    MPI_Accumulate(&add[1], 1, MPI_LONG, 0, 2, 1, MPI_LONG, MPI_MAX, win);
    MPI_Win_fence(0, win);
    if (rank == 0) {
        CHECK(base[1] == 1 + (long)size * (size + 1) / 2, "sum %ld", base[1]);
        CHECK(base[2] == 10L * (size - 1), "max %ld", base[2]);
    }

    /* Rank 0's four values into every other slot 0, 2, 4, 6 of rank 1 (or of itself). */
    MPI_Datatype every_other;
    MPI_Type_vector(4, 1, 2, MPI_LONG, &every_other);
    MPI_Type_commit(&every_other);
    long four[4] = {-1, -2, -3, -4};
    int target = size > 1 ? 1 : 0;
    if (rank == 0)
        MPI_Put(four, 4, MPI_LONG, target, 0, 1, every_other, win);
    MPI_Win_fence(0, win);
    if (rank == target)
        for (int i = 0; i < 4; i++) {
            CHECK(base[2 * i] == -1 - i, "strided slot %d: %ld", 2 * i, base[2 * i]);
            CHECK(base[2 * i + 1] == 1000 * rank + 2 * i + 1 || (rank == 0 && 2 * i + 1 <= 2),
                  "slot %d was overwritten: %ld", 2 * i + 1, base[2 * i + 1]);
        }
    MPI_Type_free(&every_other);

    void *attr;
    int flag = 0;
    MPI_Win_get_attr(win, MPI_WIN_BASE, &attr, &flag);
    CHECK(flag && attr == base, "MPI_WIN_BASE %p, base %p", attr, (void *)base);
    MPI_Win_get_attr(win, MPI_WIN_SIZE, &attr, &flag);
    CHECK(flag && *(MPI_Aint *)attr == SLOTS * sizeof(long), "MPI_WIN_SIZE");
    MPI_Win_get_attr(win, MPI_WIN_DISP_UNIT, &attr, &flag);
    CHECK(flag && *(int *)attr == sizeof(long), "MPI_WIN_DISP_UNIT");
    MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &attr, &flag);
    CHECK(flag && *(int *)attr == MPI_WIN_FLAVOR_ALLOCATE, "MPI_WIN_CREATE_FLAVOR");
    char name[MPI_MAX_OBJECT_NAME];
    int len;
    MPI_Win_set_name(win, "fences");
    MPI_Win_get_name(win, name, &len);
    CHECK(strcmp(name, "fences") == 0 && len == 6, "name '%s'", name);
    MPI_Group group;
    int gsize;
    MPI_Win_get_group(win, &group);
    MPI_Group_size(group, &gsize);
    CHECK(gsize == size, "group of %d", gsize);
    MPI_Group_free(&group);
    MPI_Win_free(&win);
    CHECK(win == MPI_WIN_NULL, "freed window not null");
}

static void passive(int rank, int size) {
    int counters[2] = {0, -1};
    MPI_Win win;
    MPI_Win_create(counters, sizeof counters, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Barrier(MPI_COMM_WORLD);

    /* Fetch-and-add: each rank adds rank + 1 once; the old values are distinct partial sums. */
    int one = rank + 1, old = -1;
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
    MPI_Fetch_and_op(&one, &old, MPI_INT, 0, 0, MPI_SUM, win);
    MPI_Win_unlock(0, win);
    CHECK(old >= 0 && old <= size * (size + 1) / 2 - one, "fetched %d", old);
    int *olds = malloc(size * sizeof(int));
    MPI_Allgather(&old, 1, MPI_INT, olds, 1, MPI_INT, MPI_COMM_WORLD);
    for (int i = 0; i < size; i++)
        for (int j = i + 1; j < size; j++)
            CHECK(olds[i] != olds[j], "ranks %d and %d fetched the same %d", i, j, olds[i]);
    free(olds);

    /* Compare-and-swap: exactly one rank replaces the -1. */
    int mine = rank, seen = -2, compare = -1;
    MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
    MPI_Compare_and_swap(&mine, &compare, &seen, MPI_INT, 0, 1, win);
    MPI_Win_unlock(0, win);
    int won = seen == -1, winners = 0;
    MPI_Allreduce(&won, &winners, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(winners == 1, "%d ranks swapped", winners);

    /* lock_all, a get flushed, on every rank's window. */
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock_all(0, win);
    for (int t = 0; t < size; t++) {
        int total = -1;
        MPI_Get(&total, 1, MPI_INT, t, 0, 1, MPI_INT, win);
        MPI_Win_flush(t, win);
        CHECK(total == (t == 0 ? size * (size + 1) / 2 : 0), "counter of %d: %d", t, total);
    }
    MPI_Win_unlock_all(win);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        CHECK(counters[0] == size * (size + 1) / 2, "counter %d", counters[0]);

    /* A target inside a large blocking send (its bytes lent until received) still serves
     * the origin that receives them only after its unlock. */
    enum { BIG = 1 << 20 };
    char *big = calloc(BIG, 1);
    if (rank == 0 && size > 1) {
        big[BIG - 1] = 42;
        MPI_Send(big, BIG, MPI_CHAR, 1, 7, MPI_COMM_WORLD);
    } else if (rank == 1) {
        int seven = 7;
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
        MPI_Put(&seven, 1, MPI_INT, 0, 1, 1, MPI_INT, win);
        MPI_Win_unlock(0, win);
        MPI_Recv(big, BIG, MPI_CHAR, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        CHECK(big[BIG - 1] == 42, "large message %d", big[BIG - 1]);
    }
    free(big);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0 && size > 1)
        CHECK(counters[1] == 7, "put during a large send: %d", counters[1]);
    MPI_Win_free(&win);
}

static void pscw(int rank, int size) {
    int slot = -1;
    MPI_Win win;
    MPI_Win_create(&slot, sizeof slot, sizeof slot, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Group world, from, to;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int left = (rank + size - 1) % size, right = (rank + 1) % size;
    MPI_Group_incl(world, 1, &left, &from);
    MPI_Group_incl(world, 1, &right, &to);
    for (int round = 0; round < 3; round++) {
        MPI_Win_post(from, 0, win);
        MPI_Win_start(to, 0, win);
        int value = 100 * round + rank;
        MPI_Put(&value, 1, MPI_INT, right, 0, 1, MPI_INT, win);
        MPI_Win_complete(win);
        MPI_Win_wait(win);
        CHECK(slot == 100 * round + left, "round %d: %d", round, slot);
    }
    MPI_Group_free(&from);
    MPI_Group_free(&to);
    MPI_Group_free(&world);
    MPI_Win_free(&win);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* Rank 0 waits for the others' operations by reading its own window memory, calling no MPI
 * meanwhile (for at most 60 s): exclusive locks around fetch-and-adds, then a lock_all under
 * MPI_MODE_NOCHECK around accumulates. Only locks and operations that reach its memory
 * without its help end the wait. */
static void outside_mpi(int rank, int size) {
    enum { ROUNDS = 200 };
    long *counter;
    MPI_Win win;
    MPI_Win_allocate(2 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &counter, &win);
    counter[0] = counter[1] = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    long want = ROUNDS * (long)size * (size - 1) / 2;
    if (rank == 0) {
        volatile long *seen = counter;
        double until = now() + 60;
        while ((seen[0] != want || seen[1] != ROUNDS * (long)(size - 1)) && now() < until)
            ;
        CHECK(seen[0] == want, "sum %ld while outside MPI, %ld expected", seen[0], want);
    } else {
        long add = rank, old = -1, one = 1, ticket = -1;
        for (int i = 0; i < ROUNDS; i++) {
            MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
            MPI_Fetch_and_op(&one, &ticket, MPI_LONG, 0, 1, MPI_SUM, win);
            MPI_Win_unlock(0, win);
            CHECK(ticket >= i && ticket < (long)ROUNDS * (size - 1), "ticket %ld", ticket);
        }
        MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
        for (int i = 0; i < ROUNDS; i++) {
            MPI_Accumulate(&add, 1, MPI_LONG, 0, 0, 1, MPI_LONG, MPI_SUM, win);
            MPI_Win_flush(0, win);
        }
        MPI_Fetch_and_op(NULL, &old, MPI_LONG, 0, 0, MPI_NO_OP, win);
        MPI_Win_unlock_all(win);
        CHECK(old >= ROUNDS * (long)rank && old <= want, "read back %ld", old);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        CHECK(counter[1] == ROUNDS * (long)(size - 1), "tickets %ld", counter[1]);
    MPI_Win_free(&win);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    fences(rank, size);
    passive(rank, size);
    pscw(rank, size);
    outside_mpi(rank, size);
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && all == 0)
        printf("rma: ok\n");
    MPI_Finalize();
    return all != 0;
}
