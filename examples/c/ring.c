/* The transport from C: every rank registers a region, tells its left neighbour where it is,
 * and receives its left neighbour's rank by a one-sided put with an immediate; then a token
 * goes round the ring by tagged messages.
 *
 *   cc ring.c $(pkg-config --cflags --libs reverb) -o ring
 *   reverb run -n 4 -- ./ring            (REVERB_PROVIDER=tcp, auto, verbs: the same program)
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <reverb.h>

#define WAIT_MS 30000
#define TAG_WHERE 1
#define TAG_TOKEN 2

/* Exits with the library's message when a call fails. */
#define CHECK(call)                                                                          \
    do {                                                                                     \
        int rc_ = (call);                                                                    \
        if (rc_ != REVERB_OK) {                                                              \
            fprintf(stderr, "ring: %s: %s (%s)\n", #call, reverb_last_error(),               \
                    reverb_status_name(rc_));                                                \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

int main(void) {
    reverb_transport *t;
    CHECK(reverb_transport_open(&t));
    uint32_t me = reverb_transport_rank(t), size = reverb_transport_size(t);
    uint32_t next = (me + 1) % size, prev = (me + size - 1) % size;

    /* A region the left neighbour writes into. */
    reverb_region *inbox, *outbox;
    CHECK(reverb_region_alloc(t, 64, REVERB_ACCESS_REMOTE_WRITE, &inbox));
    CHECK(reverb_region_alloc(t, 64, REVERB_ACCESS_LOCAL, &outbox));
    reverb_remote mine, theirs;
    CHECK(reverb_region_remote(inbox, &mine));
    uint64_t op;
    CHECK(reverb_recv(t, next, TAG_WHERE, UINT64_MAX, &theirs, sizeof theirs, &op));
    uint64_t sent;
    CHECK(reverb_send(t, prev, TAG_WHERE, &mine, sizeof mine, &sent));
    CHECK(reverb_wait_op(t, op, WAIT_MS, NULL));
    CHECK(reverb_wait_op(t, sent, WAIT_MS, NULL));

    /* One-sided: my rank into the right neighbour's inbox; it sees the immediate. */
    uint64_t value = 1000 + me;
    memcpy(reverb_region_ptr(outbox), &value, sizeof value);
    CHECK(reverb_put_imm(t, outbox, 0, &theirs, 0, sizeof value, me, 1, &op));
    int got_imm = 0, put_done = 0;
    while (!got_imm || !put_done) {
        reverb_completion c[4];
        size_t n;
        CHECK(reverb_wait(t, c, 4, WAIT_MS, &n));
        for (size_t i = 0; i < n; i++) {
            CHECK(c[i].status);
            if (c[i].kind == REVERB_COMPLETION_IMM) {
                uint64_t in;
                memcpy(&in, reverb_region_ptr(inbox), sizeof in);
                if (c[i].peer != prev || c[i].imm != prev || in != 1000 + prev) {
                    fprintf(stderr, "ring: rank %" PRIu32 ": got %" PRIu64 " (imm %" PRIu32 ") from %" PRIu32 "\n",
                            me, in, c[i].imm, c[i].peer);
                    return 1;
                }
                got_imm = 1;
            } else if (c[i].op == op) {
                put_done = 1;
            }
        }
    }

    /* A token round the ring: each rank adds its rank + 1. */
    uint64_t token = 0;
    if (me == 0) {
        token = 1;
        CHECK(reverb_send(t, next, TAG_TOKEN, &token, sizeof token, &sent));
        CHECK(reverb_wait_op(t, sent, WAIT_MS, NULL));
    }
    CHECK(reverb_recv(t, prev, TAG_TOKEN, UINT64_MAX, &token, sizeof token, &op));
    CHECK(reverb_wait_op(t, op, WAIT_MS, NULL));
    if (me != 0) {
        token += me + 1;
        CHECK(reverb_send(t, next, TAG_TOKEN, &token, sizeof token, &sent));
        CHECK(reverb_wait_op(t, sent, WAIT_MS, NULL));
    }
    if (me == 0) {
        uint64_t expected = (uint64_t)size * (size + 1) / 2;
        if (token != expected) {
            fprintf(stderr, "ring: token %" PRIu64 ", expected %" PRIu64 "\n", token, expected);
            return 1;
        }
        printf("ring: %" PRIu32 " ranks on %s, puts checked, token %" PRIu64 "\n", size,
               reverb_transport_provider(t), token);
    }
    CHECK(reverb_transport_barrier(t));
    reverb_region_free(inbox);
    reverb_region_free(outbox);
    reverb_transport_close(t);
    return 0;
}
