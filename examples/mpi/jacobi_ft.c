/* A fault-tolerant 1-D Jacobi heat solver, a plain MPI program (MPI_Sendrecv halos,
 * MPI_Allreduce of the residual, MPI_Gather of the result) made fault tolerant with three
 * calls of mpix_reverb.h: protect, restore, checkpoint. Rank 0 prints a checksum of the final
 * field; after a node is killed and respawned it is bit-identical.
 *
 *   mpicc.mpich -I mpi/include jacobi_ft.c -o jacobi_ft
 *   REVERB_LOG=causal reverb run --mpi -n 4 --ranks-per-node 2 --respawn 1 -- ./jacobi_ft 200 20
 */
#include <inttypes.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpix_reverb.h"

#define CELLS 256

struct state {
    long iter;
    double residual;
    double u[CELLS + 2]; /* with the two halo cells */
};

static uint64_t fnv1a(uint64_t h, const void *data, size_t len) {
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 200;
    long every = argc > 2 ? atol(argv[2]) : 20;
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int left = rank > 0 ? rank - 1 : MPI_PROC_NULL;
    int right = rank + 1 < size ? rank + 1 : MPI_PROC_NULL;

    struct state s;
    memset(&s, 0, sizeof s);
    int restored = 0;
    if (MPIX_Reverb_protect) {
        MPIX_Reverb_protect(&s, sizeof s);
        MPIX_Reverb_restore(&restored);
    }
    if (restored)
        fprintf(stderr, "jacobi_ft: rank %d restored at iteration %ld\n", rank, s.iter);

    double next[CELLS + 2];
    while (s.iter < iters) {
        /* Fixed ends: 100 at the left of the rod, 0 at the right. */
        if (rank == 0)
            s.u[0] = 100.0;
        if (rank == size - 1)
            s.u[CELLS + 1] = 0.0;
        MPI_Sendrecv(&s.u[1], 1, MPI_DOUBLE, left, 1, &s.u[CELLS + 1], 1, MPI_DOUBLE, right, 1,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Sendrecv(&s.u[CELLS], 1, MPI_DOUBLE, right, 2, &s.u[0], 1, MPI_DOUBLE, left, 2,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (rank == 0)
            s.u[0] = 100.0;
        if (rank == size - 1)
            s.u[CELLS + 1] = 0.0;
        double local = 0.0;
        for (int i = 1; i <= CELLS; i++) {
            next[i] = (s.u[i - 1] + s.u[i] + s.u[i + 1]) / 3.0;
            local += (next[i] - s.u[i]) * (next[i] - s.u[i]);
        }
        memcpy(&s.u[1], &next[1], CELLS * sizeof(double));
        MPI_Allreduce(&local, &s.residual, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        s.iter++;
        /* The end of an iteration: everything sent to this rank has been received. */
        if (MPIX_Reverb_checkpoint && every > 0 && s.iter % every == 0 && s.iter < iters)
            MPIX_Reverb_checkpoint();
    }

    double *all = rank == 0 ? malloc(sizeof(double) * CELLS * size) : NULL;
    MPI_Gather(&s.u[1], CELLS, MPI_DOUBLE, all, CELLS, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        uint64_t h = fnv1a(0xcbf29ce484222325ULL, all, sizeof(double) * CELLS * size);
        h = fnv1a(h, &s.residual, sizeof s.residual);
        printf("jacobi_ft: %d ranks, %ld iterations, residual %.6e, checksum %016" PRIx64 "\n", size,
               s.iter, s.residual, h);
        free(all);
    }
    MPI_Finalize();
    return 0;
}
