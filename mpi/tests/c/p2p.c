/* Point-to-point semantics, on any number of ranks >= 2: non-overtaking order, wildcards,
 * probe, nonblocking completion, synchronous sends, MPI_PROC_NULL, inactive persistent requests,
 * messages above the runtime's largest, and errors returned under MPI_ERRORS_RETURN (truncation,
 * a bad rank, a bad tag). Rank 0 prints "p2p: ok". */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define N 50

static void order_and_wildcards(int rank, int size) {
    /* Every rank sends N messages of growing length to rank 0; rank 0 posts them all as
     * any-source any-tag receives first, then checks each sender's order. */
    if (rank != 0) {
        for (int i = 0; i < N; i++) {
            int msg[N + 1];
            for (int j = 0; j <= i; j++)
                msg[j] = rank * 1000 + i;
            MPI_Send(msg, i + 1, MPI_INT, 0, i % 7, MPI_COMM_WORLD);
        }
        return;
    }
    int total = (size - 1) * N;
    int (*buf)[N + 1] = calloc(total, sizeof *buf);
    MPI_Request *req = malloc(total * sizeof *req);
    for (int k = 0; k < total; k++)
        MPI_Irecv(buf[k], N + 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &req[k]);
    /* Waitany may report them in any order; the receive posted first must hold the earlier
     * message of each sender. */
    int *last = malloc(size * sizeof *last);
    for (int r = 0; r < size; r++)
        last[r] = -1;
    for (int done = 0; done < total; done++) {
        int idx;
        MPI_Status st;
        MPI_Waitany(total, req, &idx, &st);
        int count;
        MPI_Get_count(&st, MPI_INT, &count);
        int src = st.MPI_SOURCE, i = buf[idx][0] % 1000;
        CHECK(src >= 1 && src < size, "source %d", src);
        CHECK(buf[idx][0] / 1000 == src, "message from %d says %d", src, buf[idx][0]);
        CHECK(count == i + 1 && st.MPI_TAG == i % 7, "count %d tag %d for message %d", count, st.MPI_TAG, i);
    }
    for (int k = 0; k < total; k++) {
        int src = buf[k][0] / 1000, i = buf[k][0] % 1000;
        if (src < 1 || src >= size)
            continue;
        CHECK(i > last[src], "from %d: message %d in receive %d after message %d (overtaken)", src, i, k, last[src]);
        last[src] = i;
    }
    free(buf);
    free(req);
    free(last);
}

static void probe_and_sync(int rank, int size) {
    int peer = rank == 0 ? size - 1 : 0;
    if (rank != 0 && rank != size - 1)
        return;
    if (rank == 0) {
        int value = 42;
        MPI_Ssend(&value, 1, MPI_INT, peer, 11, MPI_COMM_WORLD);
        double d[3] = {1.5, 2.5, 3.5};
        MPI_Send(d, 3, MPI_DOUBLE, peer, 12, MPI_COMM_WORLD);
    } else {
        MPI_Status st;
        MPI_Probe(MPI_ANY_SOURCE, 11, MPI_COMM_WORLD, &st);
        CHECK(st.MPI_SOURCE == 0 && st.MPI_TAG == 11, "probe: source %d tag %d", st.MPI_SOURCE, st.MPI_TAG);
        int value = 0;
        MPI_Recv(&value, 1, MPI_INT, 0, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        CHECK(value == 42, "ssend carried %d", value);
        int flag = 0;
        while (!flag)
            MPI_Iprobe(0, 12, MPI_COMM_WORLD, &flag, &st);
        int count;
        MPI_Get_count(&st, MPI_DOUBLE, &count);
        CHECK(count == 3, "iprobe count %d", count);
        double d[3];
        MPI_Recv(d, 3, MPI_DOUBLE, 0, 12, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        CHECK(d[0] == 1.5 && d[2] == 3.5, "doubles %g %g", d[0], d[2]);
    }
}

static void nonblocking(int rank, int size) {
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    int out[4] = {rank, rank, rank, rank}, in[4] = {-1, -1, -1, -1};
    MPI_Request r[2];
    MPI_Irecv(in, 4, MPI_INT, left, 5, MPI_COMM_WORLD, &r[0]);
    MPI_Isend(out, 4, MPI_INT, right, 5, MPI_COMM_WORLD, &r[1]);
    int flag = 0;
    MPI_Status sts[2];
    while (!flag)
        MPI_Testall(2, r, &flag, sts);
    CHECK(r[0] == MPI_REQUEST_NULL && r[1] == MPI_REQUEST_NULL, "requests not freed");
    CHECK(in[0] == left && in[3] == left, "ring got %d", in[0]);
    /* MPI_PROC_NULL completes at once with an empty status. */
    MPI_Status st;
    MPI_Recv(in, 4, MPI_INT, MPI_PROC_NULL, 5, MPI_COMM_WORLD, &st);
    int count;
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(st.MPI_SOURCE == MPI_PROC_NULL && count == 0, "proc_null source %d count %d", st.MPI_SOURCE, count);
}

/* A persistent request that completed is inactive: Testsome, Testany, Waitany and Waitsome
 * pass over it as over MPI_REQUEST_NULL (never reporting it again), Testall takes it as
 * complete. Each rank's persistent synchronous send completes first, then the Testsome loop
 * goes on until its persistent receive completes: each must be reported exactly once (MPICH's
 * f77 pssendf counts completions so, and hung when one was reported twice). */
static void inactive_persistent(int rank, int size) {
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    int out = rank, in = -1, go = -1, token = rank;
    MPI_Request r[2];
    MPI_Recv_init(&in, 1, MPI_INT, left, 8, MPI_COMM_WORLD, &r[0]);
    MPI_Ssend_init(&out, 1, MPI_INT, right, 7, MPI_COMM_WORLD, &r[1]);
    MPI_Request pre;
    MPI_Irecv(&go, 1, MPI_INT, left, 7, MPI_COMM_WORLD, &pre);
    MPI_Startall(2, r);
    MPI_Wait(&pre, MPI_STATUS_IGNORE);
    int completions[2] = {0, 0}, idx[2], outcount;
    MPI_Status sts[2];
    while (completions[1] == 0) {
        MPI_Testsome(2, r, &outcount, idx, sts);
        for (int i = 0; i < outcount && outcount != MPI_UNDEFINED; i++)
            completions[idx[i]]++;
    }
    /* Only now this rank's message to its right neighbour's receive. */
    MPI_Send(&token, 1, MPI_INT, right, 8, MPI_COMM_WORLD);
    while (completions[0] == 0) {
        MPI_Testsome(2, r, &outcount, idx, sts);
        CHECK(outcount != MPI_UNDEFINED, "Testsome: all inactive with the receive active");
        for (int i = 0; i < outcount && outcount != MPI_UNDEFINED; i++)
            completions[idx[i]]++;
    }
    CHECK(completions[0] == 1 && completions[1] == 1 && in == left && go == left,
          "completions %d %d, got %d and %d", completions[0], completions[1], in, go);
    MPI_Testsome(2, r, &outcount, idx, sts);
    CHECK(outcount == MPI_UNDEFINED, "Testsome over inactive requests: outcount %d", outcount);
    int index = 0, flag = 0;
    MPI_Testany(2, r, &index, &flag, MPI_STATUS_IGNORE);
    CHECK(flag && index == MPI_UNDEFINED, "Testany over inactive requests: flag %d index %d", flag, index);
    MPI_Waitany(2, r, &index, MPI_STATUS_IGNORE);
    CHECK(index == MPI_UNDEFINED, "Waitany over inactive requests: index %d", index);
    MPI_Testall(2, r, &flag, sts);
    CHECK(flag, "Testall over inactive requests");
    CHECK(r[0] != MPI_REQUEST_NULL && r[1] != MPI_REQUEST_NULL, "persistent handles freed");
    MPI_Request_free(&r[0]);
    MPI_Request_free(&r[1]);
}

/* Large messages (read by the receiver where the sender keeps them, on shm): every rank
 * sends rank 0 a blocking 1 MiB message, a nonblocking 512 KiB one whose request it frees
 * (its bytes must still arrive, and MPI_Finalize waits for them) and a 1 MiB one that rank 0
 * receives into a buffer too small (MPI_ERR_TRUNCATE there, success here). Rank 0 takes the
 * first into a receive posted before it was sent, the second with a blocking receive. */
#define BIG (1 << 20)
static unsigned char pattern_at(int rank, int which, long i) { return (unsigned char)(rank * 31 + which * 7 + i * 13); }

static void large_messages(int rank, int size) {
    unsigned char *buf = malloc((size_t)(size + 2) * BIG);
    if (rank != 0) {
        for (long i = 0; i < 3L * BIG; i++)
            buf[i] = pattern_at(rank, (int)(i / BIG), i % BIG);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Send(buf, BIG, MPI_BYTE, 0, 40, MPI_COMM_WORLD);
        MPI_Request r;
        MPI_Isend(buf + BIG, BIG / 2, MPI_BYTE, 0, 41, MPI_COMM_WORLD, &r);
        MPI_Request_free(&r);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        int err = MPI_Send(buf + 2 * BIG, BIG, MPI_BYTE, 0, 42, MPI_COMM_WORLD);
        CHECK(err == MPI_SUCCESS, "a send the receiver truncated failed: %d", err);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
        /* Not freed: the freed request's bytes may be read until MPI_Finalize returns. */
        return;
    }
    MPI_Request *first = malloc(size * sizeof *first);
    for (int r = 1; r < size; r++)
        MPI_Irecv(buf + (long)(r + 2) * BIG, BIG, MPI_BYTE, r, 40, MPI_COMM_WORLD, &first[r]);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int r = 1; r < size; r++) {
        MPI_Status st;
        MPI_Wait(&first[r], &st);
        int count, bad = 0;
        MPI_Get_count(&st, MPI_BYTE, &count);
        for (long i = 0; i < BIG; i++)
            bad += buf[(long)(r + 2) * BIG + i] != pattern_at(r, 0, i);
        CHECK(count == BIG && bad == 0, "1 MiB from %d: count %d, %d bytes wrong", r, count, bad);
        MPI_Recv(buf, BIG, MPI_BYTE, r, 41, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_BYTE, &count);
        bad = 0;
        for (long i = 0; i < BIG / 2; i++)
            bad += buf[i] != pattern_at(r, 1, i);
        CHECK(count == BIG / 2 && bad == 0, "512 KiB from %d: count %d, %d bytes wrong", r, count, bad);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        int err = MPI_Recv(buf + BIG, BIG / 4, MPI_BYTE, r, 42, MPI_COMM_WORLD, &st), cls;
        MPI_Error_class(err, &cls);
        CHECK(cls == MPI_ERR_TRUNCATE, "a 1 MiB message into 256 KiB gave %d", cls);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    }
    free(first);
    free(buf);
}

/* Messages above the runtime's largest (REVERB_LOG_MAX_MESSAGE, 4 MiB): the last rank sends
 * rank 0 one lent (a standard send: whole where the runtime lends it, else in pieces), one
 * synchronous (in pieces, landing in the receive's buffer), one that rank 0 takes into a
 * strided type (unpacked) and one into a buffer too small (MPI_ERR_TRUNCATE). */
#define HUGE ((9 << 20) + 5)
static void beyond_largest_message(int rank, int size) {
    if (rank != 0 && rank != size - 1)
        return;
    unsigned char *buf = malloc(2L * HUGE);
    const int from = size - 1;
    if (rank == from) {
        for (long i = 0; i < HUGE; i++)
            buf[i] = pattern_at(from, 5, i);
        MPI_Send(buf, HUGE, MPI_BYTE, 0, 50, MPI_COMM_WORLD);
        MPI_Ssend(buf, HUGE, MPI_BYTE, 0, 51, MPI_COMM_WORLD);
        MPI_Send(buf, HUGE - 1, MPI_BYTE, 0, 52, MPI_COMM_WORLD);
        MPI_Send(buf, HUGE, MPI_BYTE, 0, 53, MPI_COMM_WORLD);
        free(buf);
        return;
    }
    MPI_Status st;
    int count, bad = 0;
    for (int tag = 50; tag <= 51; tag++) {
        memset(buf, 0, HUGE);
        MPI_Recv(buf, HUGE, MPI_BYTE, from, tag, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_BYTE, &count);
        for (long i = 0; i < HUGE; i++)
            bad += buf[i] != pattern_at(from, 5, i);
        CHECK(count == HUGE && bad == 0, "tag %d: count %d, %d bytes wrong", tag, count, bad);
    }
    /* Every other byte: HUGE - 1 blocks of one byte, two apart (a type of millions of runs). */
    MPI_Datatype every_other;
    MPI_Type_vector(HUGE - 1, 1, 2, MPI_BYTE, &every_other);
    MPI_Type_commit(&every_other);
    memset(buf, 0, 2L * HUGE);
    MPI_Recv(buf, 1, every_other, from, 52, MPI_COMM_WORLD, &st);
    MPI_Get_count(&st, MPI_BYTE, &count);
    bad = 0;
    for (long i = 0; i < HUGE - 1; i++)
        bad += buf[2 * i] != pattern_at(from, 5, i) || buf[2 * i + 1] != 0;
    CHECK(count == HUGE - 1 && bad == 0, "strided: count %d, %d bytes wrong", count, bad);
    MPI_Type_free(&every_other);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int err = MPI_Recv(buf, 5 << 20, MPI_BYTE, from, 53, MPI_COMM_WORLD, &st), cls;
    MPI_Error_class(err, &cls);
    CHECK(cls == MPI_ERR_TRUNCATE, "9 MiB into 5 MiB gave %d", cls);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    free(buf);
}

static void errors(int rank, int size) {
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int v[4] = {1, 2, 3, 4}, small[2];
    int err = MPI_Send(v, 1, MPI_INT, size + 3, 0, MPI_COMM_WORLD);
    int cls;
    MPI_Error_class(err, &cls);
    CHECK(cls == MPI_ERR_RANK, "bad rank gave %d", cls);
    err = MPI_Send(v, 1, MPI_INT, 0, -5, MPI_COMM_WORLD);
    MPI_Error_class(err, &cls);
    CHECK(cls == MPI_ERR_TAG, "bad tag gave %d", cls);
    char text[MPI_MAX_ERROR_STRING];
    int len;
    MPI_Error_string(err, text, &len);
    CHECK(len > 0 && strstr(text, "tag") != NULL, "error string '%s'", text);
    if (rank == 0)
        MPI_Send(v, 4, MPI_INT, size - 1, 9, MPI_COMM_WORLD);
    if (rank == size - 1) {
        MPI_Status st;
        err = MPI_Recv(small, 2, MPI_INT, 0, 9, MPI_COMM_WORLD, &st);
        MPI_Error_class(err, &cls);
        CHECK(cls == MPI_ERR_TRUNCATE, "truncation gave %d", cls);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    order_and_wildcards(rank, size);
    MPI_Barrier(MPI_COMM_WORLD);
    probe_and_sync(rank, size);
    nonblocking(rank, size);
    inactive_persistent(rank, size);
    errors(rank, size);
    large_messages(rank, size);
    beyond_largest_message(rank, size);
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && all == 0)
        printf("p2p: ok\n");
    MPI_Finalize();
    return all != 0;
}
