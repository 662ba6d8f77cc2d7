/* MPI_Allreduce of doubles under MPI_SUM, whose bits depend on the order the ranks' values
 * are added: one line per size with an FNV-1a hash of the result's bytes, from rank 0. Run
 * on reverb and on MPICH, the lines must match (ci/mpi.sh): on a power of two every
 * algorithm reverb picks adds in the balanced tree MPICH's recursive doubling builds. The
 * sizes straddle the algorithms' thresholds (flat up to 512 B on 3-8 ranks, recursive
 * doubling below 2 KiB, Rabenseifner above, run in the program's buffer, lent from
 * 256 KiB), and MPI_IN_PLACE gives the same bits. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t fnv1a(const void *p, size_t len) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, bad = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int counts[] = {1, 64, 65, 255, 256, 8192, 20001, 65536, 131072, 262147};
    for (unsigned c = 0; c < sizeof counts / sizeof *counts; c++) {
        int n = counts[c];
        double *v = malloc(sizeof(double) * n), *out = malloc(sizeof(double) * n);
        for (int i = 0; i < n; i++)
            v[i] = 1.0 / (1.0 + rank * 7 + i) + rank * 1e-3 + i * 1e-9;
        MPI_Allreduce(v, out, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        bad += memcmp(v, out, sizeof(double) * n) != 0;
        if (rank == 0)
            printf("allreduce_bits: %d doubles: %016llx\n", n, (unsigned long long)fnv1a(out, sizeof(double) * n));
        free(v);
        free(out);
    }
    if (bad)
        printf("allreduce_bits: rank %d: MPI_IN_PLACE gave other bits %d times\n", rank, bad);
    MPI_Finalize();
    return bad != 0;
}
