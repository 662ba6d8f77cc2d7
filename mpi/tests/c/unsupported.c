/* A call outside reverb's subset stops the job with a clear message naming it. */
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    char port[MPI_MAX_PORT_NAME];
    MPI_Open_port(MPI_INFO_NULL, port);
    printf("unsupported: MPI_Open_port returned\n");
    MPI_Finalize();
    return 0;
}
