/* Reductions on C's long double (x87 80-bit extended on x86-64), which Rust has no type for:
 * the MPI library's only C. inout[i] = in[i] op inout[i] over n elements; 0 if the operation
 * is defined on long double, -1 if not. */
#include <stddef.h>

enum { OP_MAX = 1, OP_MIN, OP_SUM, OP_PROD, OP_MAXLOC, OP_MINLOC };

int reverb_mpi_long_double_op(int op, const void *in, void *inout, size_t n) {
    const long double *a = in;
    long double *b = inout;
    for (size_t i = 0; i < n; i++) {
        switch (op) {
        case OP_MAX: b[i] = a[i] > b[i] ? a[i] : b[i]; break;
        case OP_MIN: b[i] = a[i] < b[i] ? a[i] : b[i]; break;
        case OP_SUM: b[i] = a[i] + b[i]; break;
        case OP_PROD: b[i] = a[i] * b[i]; break;
        default: return -1;
        }
    }
    return 0;
}

/* MAXLOC / MINLOC on (long double, int) pairs laid out as MPI_LONG_DOUBLE_INT: the value, then
 * the index at byte 16, `stride` bytes apart. Ties go to the lower index. */
int reverb_mpi_long_double_loc(int op, const void *in, void *inout, size_t n, size_t stride) {
    const char *a = in;
    char *b = inout;
    for (size_t i = 0; i < n; i++) {
        const long double *va = (const long double *)(a + i * stride);
        long double *vb = (long double *)(b + i * stride);
        const int *ia = (const int *)(a + i * stride + 16);
        int *ib = (int *)(b + i * stride + 16);
        int better = op == OP_MAXLOC ? *va > *vb : *va < *vb;
        if (better || (*va == *vb && *ia < *ib)) {
            *vb = *va;
            *ib = *ia;
        }
    }
    return 0;
}
