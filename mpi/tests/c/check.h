/* A failed check prints where and counts; main returns the count. */
#include <stdio.h>
static int failures = 0;
#define CHECK(cond, ...)                                                                     \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            int r_;                                                                          \
            MPI_Comm_rank(MPI_COMM_WORLD, &r_);                                              \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", r_, __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fprintf(stderr, "\n");                                                           \
            failures++;                                                                      \
        }                                                                                    \
    } while (0)
