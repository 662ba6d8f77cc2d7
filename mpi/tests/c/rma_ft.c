/* A window under message logging with a node killed: reverb does not recover windows, so the
 * job must stop with an error saying so, never finish with a wrong sum. Each iteration puts
 * a value into the right neighbour's window between two fences and adds what arrived; a
 * checkpoint every 10 iterations. Prints "rma_ft: sum N" per rank when it finishes. */
#include <mpi.h>
#include <stdio.h>

#include "mpix_reverb.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size, restored = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long state[2] = {0, 0}; /* iteration, sum */
    if (MPIX_Reverb_protect) {
        MPIX_Reverb_protect(state, sizeof state);
        MPIX_Reverb_restore(&restored);
    }
    long slot = 0;
    MPI_Win win;
    MPI_Win_create(&slot, sizeof slot, sizeof slot, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    for (; state[0] < 40; state[0]++) {
        MPI_Win_fence(0, win);
        long v = state[0] * size + rank;
        MPI_Put(&v, 1, MPI_LONG, (rank + 1) % size, 0, 1, MPI_LONG, win);
        MPI_Win_fence(0, win);
        state[1] += slot;
        if (state[0] % 10 == 9 && MPIX_Reverb_checkpoint)
            MPIX_Reverb_checkpoint();
    }
    printf("rma_ft: rank %d sum %ld\n", rank, state[1]);
    MPI_Win_free(&win);
    MPI_Finalize();
    return 0;
}
