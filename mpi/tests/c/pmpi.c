/* The program under pmpi_counter.c (ci/mpi.sh): a token passed round the ring ROUNDS times
 * (one MPI_Send and one MPI_Recv per rank per round), two MPI_Allreduce calls, and calls the
 * counter must not see: MPI_Iallreduce (reverb's runs its MPI_Allreduce inside) and
 * MPI_Sendrecv. Prints "pmpi: ok" when every answer is right. */
#include <mpi.h>

#include "check.h"

enum { ROUNDS = 5 };

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;

    int token = 0;
    for (int round = 0; round < ROUNDS; round++) {
        if (rank == 0) {
            MPI_Send(&token, 1, MPI_INT, right, 7, MPI_COMM_WORLD);
            MPI_Recv(&token, 1, MPI_INT, left, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(&token, 1, MPI_INT, left, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            token++;
            MPI_Send(&token, 1, MPI_INT, right, 7, MPI_COMM_WORLD);
        }
    }
    if (rank == 0) CHECK(token == ROUNDS * (size - 1), "token %d", token);

    int sum = 0, max = 0;
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&rank, &max, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    CHECK(sum == size * (size - 1) / 2, "sum %d", sum);
    CHECK(max == size - 1, "max %d", max);

    int isum = 0;
    MPI_Request request;
    MPI_Iallreduce(&rank, &isum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &request);
    MPI_Wait(&request, MPI_STATUS_IGNORE);
    CHECK(isum == sum, "iallreduce sum %d", isum);

    int from_left = -1;
    MPI_Sendrecv(&rank, 1, MPI_INT, right, 8, &from_left, 1, MPI_INT, left, 8, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    CHECK(from_left == left, "sendrecv got %d", from_left);

    int all = 0;
    MPI_Reduce(&failures, &all, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0 && all == 0) printf("pmpi: ok\n");
    MPI_Finalize();
    return failures;
}
