/* A profiling library, as tools built on MPI's profiling interface are: it defines MPI_Init,
 * MPI_Send, MPI_Recv, MPI_Allreduce and MPI_Finalize, counts the program's calls, forwards each
 * to PMPI_*, and prints the counts at MPI_Finalize. Loaded before the MPI library (LD_PRELOAD),
 * its MPI_* win; the library's own calls between MPI functions never come here. */
#include <mpi.h>
#include <stdio.h>

static int inits, sends, recvs, allreduces;

int MPI_Init(int *argc, char ***argv) {
    inits++;
    return PMPI_Init(argc, argv);
}

int MPI_Send(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
    sends++;
    return PMPI_Send(buf, count, type, dest, tag, comm);
}

int MPI_Recv(void *buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
             MPI_Status *status) {
    recvs++;
    return PMPI_Recv(buf, count, type, source, tag, comm, status);
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
                  MPI_Comm comm) {
    allreduces++;
    return PMPI_Allreduce(sendbuf, recvbuf, count, type, op, comm);
}

int MPI_Finalize(void) {
    int rank = -1;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    printf("pmpi_counter: rank %d: MPI_Init %d MPI_Send %d MPI_Recv %d MPI_Allreduce %d MPI_Finalize 1\n",
           rank, inits, sends, recvs, allreduces);
    fflush(stdout);
    return PMPI_Finalize();
}
