/* A call outside reverb's subset stops the job with a clear message naming it. */
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Win win;
    int x = 0;
    MPI_Win_create(&x, sizeof x, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    printf("unsupported: MPI_Win_create returned\n");
    MPI_Finalize();
    return 0;
}
