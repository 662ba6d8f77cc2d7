/* A collective-heavy fault-tolerant program, for collective-aware logging (REVERB_LOG_CAML):
 *   solver:    an iterative solver with an MPI_Allreduce of a vector per iteration;
 *   multicast: a LeanMD-like step: each rank of a neighbourhood (MPI_Comm_split, HOOD ranks)
 *              multicasts its cell's coordinates to the others with MPI_Bcast, then a global
 *              MPI_Allreduce of the energy;
 *   nonblocking: the multicast step's broadcasts all started at once (MPI_Ibcast), an
 *              MPI_Iallreduce on MPI_COMM_WORLD started before them on odd ranks and after
 *              them on even ones, beside a ring exchange of point-to-point messages, all
 *              completed by one MPI_Waitall.
 * Rank 0 prints a checksum of the final state; with a node killed and respawned it is
 * bit-identical. Checkpoints through mpix_reverb.h, as jacobi_ft.c.
 *
 *   mpicc.mpich -I mpi/include collectives_ft.c -o collectives_ft
 *   REVERB_LOG=causal REVERB_LOG_CAML=1 reverb run --mpi -n 8 --ranks-per-node 2 -- \
 *       ./collectives_ft multicast 100 20 4096 4
 * Arguments: PATTERN ITERS CKPT_EVERY BYTES HOOD (defaults: multicast 100 20 4096 4; HOOD at
 * most 8 for nonblocking).
 */
#include <inttypes.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpix_reverb.h"

#define MAX_DOUBLES 16384
#define MAX_HOOD 8

struct state {
    long iter;
    double energy;
    double x[MAX_DOUBLES];
};

static uint64_t fnv1a(uint64_t h, const void *data, size_t len) {
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* One solver iteration: a local update, then the vector summed over every rank. */
static void solver_step(struct state *s, int n, int rank, int size) {
    static double local[MAX_DOUBLES];
    for (int i = 0; i < n; i++)
        local[i] = 0.5 * s->x[i] + 1.0 / (1.0 + rank + i + s->iter);
    MPI_Allreduce(local, s->x, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < n; i++)
        s->x[i] /= size;
    s->energy = s->x[0];
}

/* One multicast step: every member of the neighbourhood broadcasts its cell in turn. */
static void multicast_step(struct state *s, int n, int rank, MPI_Comm hood) {
    int members;
    MPI_Comm_size(hood, &members);
    static double cell[MAX_DOUBLES];
    double local = 0.0;
    for (int root = 0; root < members; root++) {
        int me;
        MPI_Comm_rank(hood, &me);
        if (me == root)
            memcpy(cell, s->x, n * sizeof(double));
        MPI_Bcast(cell, n, MPI_DOUBLE, root, hood);
        for (int i = 0; i < n; i++)
            local += cell[i] * s->x[i] * 1e-6;
    }
    for (int i = 0; i < n; i++)
        s->x[i] = s->x[i] * 0.999 + 1e-3 * (rank + 1);
    MPI_Allreduce(&local, &s->energy, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}

/* One nonblocking step: the multicast step's collectives started together, in an order that
 * differs between ranks across communicators (MPI fixes it only within one). */
static void nonblocking_step(struct state *s, int n, int rank, int size, MPI_Comm hood) {
    static double cells[MAX_HOOD][MAX_DOUBLES];
    int members, me, k = 0;
    MPI_Comm_size(hood, &members);
    MPI_Comm_rank(hood, &me);
    MPI_Request r[MAX_HOOD + 3];
    MPI_Status st[MAX_HOOD + 3];
    double mine = s->x[0] + rank, sum = 0, edge = s->x[n - 1], left = 0;
    if (rank % 2)
        MPI_Iallreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r[k++]);
    memcpy(cells[me], s->x, n * sizeof(double));
    for (int root = 0; root < members; root++)
        MPI_Ibcast(cells[root], n, MPI_DOUBLE, root, hood, &r[k++]);
    if (rank % 2 == 0)
        MPI_Iallreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r[k++]);
    MPI_Irecv(&left, 1, MPI_DOUBLE, (rank + size - 1) % size, 7, MPI_COMM_WORLD, &r[k++]);
    MPI_Isend(&edge, 1, MPI_DOUBLE, (rank + 1) % size, 7, MPI_COMM_WORLD, &r[k++]);
    MPI_Waitall(k, r, st);
    double local = 0.0;
    for (int m = 0; m < members; m++)
        for (int i = 0; i < n; i++)
            local += cells[m][i] * s->x[i] * 1e-6;
    for (int i = 0; i < n; i++)
        s->x[i] = s->x[i] * 0.999 + 1e-3 * (rank + 1) + 1e-9 * left;
    s->energy = local + 1e-9 * sum;
}

int main(int argc, char **argv) {
    const char *pattern = argc > 1 ? argv[1] : "multicast";
    long iters = argc > 2 ? atol(argv[2]) : 100;
    long every = argc > 3 ? atol(argv[3]) : 20;
    int bytes = argc > 4 ? atoi(argv[4]) : 4096;
    int hood_size = argc > 5 ? atoi(argv[5]) : 4;
    int solver = strcmp(pattern, "solver") == 0, nonblocking = strcmp(pattern, "nonblocking") == 0;
    if (!solver && !nonblocking && strcmp(pattern, "multicast") != 0) {
        fprintf(stderr, "usage: collectives_ft solver|multicast|nonblocking [ITERS [CKPT_EVERY [BYTES [HOOD]]]]\n");
        return 2;
    }
    int n = bytes / (int)sizeof(double);
    if (n < 1 || n > MAX_DOUBLES || hood_size < 1 || (nonblocking && hood_size > MAX_HOOD)) {
        fprintf(stderr, "collectives_ft: BYTES from 8 to %d, HOOD from 1 (to %d for nonblocking)\n", MAX_DOUBLES * 8, MAX_HOOD);
        return 2;
    }
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm hood;
    MPI_Comm_split(MPI_COMM_WORLD, rank / hood_size, rank, &hood);

    static struct state s;
    for (int i = 0; i < n; i++)
        s.x[i] = rank + i * 1e-3;
    int restored = 0;
    if (MPIX_Reverb_protect) {
        MPIX_Reverb_protect(&s, sizeof s);
        MPIX_Reverb_restore(&restored);
    }
    if (restored)
        fprintf(stderr, "collectives_ft: rank %d restored at iteration %ld\n", rank, s.iter);

    while (s.iter < iters) {
        if (solver)
            solver_step(&s, n, rank, size);
        else if (nonblocking)
            nonblocking_step(&s, n, rank, size, hood);
        else
            multicast_step(&s, n, rank, hood);
        s.iter++;
        if (MPIX_Reverb_checkpoint && every > 0 && s.iter % every == 0 && s.iter < iters)
            MPIX_Reverb_checkpoint();
    }

    double *all = rank == 0 ? malloc(sizeof(double) * n * size) : NULL;
    MPI_Gather(s.x, n, MPI_DOUBLE, all, n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        uint64_t h = fnv1a(0xcbf29ce484222325ULL, all, sizeof(double) * n * size);
        h = fnv1a(h, &s.energy, sizeof s.energy);
        printf("collectives_ft: %s, %d ranks, %ld iterations, %d bytes, checksum %016" PRIx64 "\n",
               pattern, size, s.iter, bytes, h);
        free(all);
    }
    MPI_Comm_free(&hood);
    MPI_Finalize();
    return 0;
}
