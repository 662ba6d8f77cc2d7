/* Bad input through the C ABI gets a code and a message, and moves nothing: run on 2 ranks
 * (`reverb run -n 2`). Prints "errors: ok" at rank 0. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <reverb.h>

#define WAIT_MS 30000

static int failures = 0;

#define CHECK(call)                                                                          \
    do {                                                                                     \
        int rc_ = (call);                                                                    \
        if (rc_ != REVERB_OK) {                                                              \
            fprintf(stderr, "errors: %s: %s (%s)\n", #call, reverb_last_error(),             \
                    reverb_status_name(rc_));                                                \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

/* `call` fails with `code` and a message naming `word`. */
#define EXPECT(call, code, word)                                                             \
    do {                                                                                     \
        int rc_ = (call);                                                                    \
        if (rc_ != (code) || strstr(reverb_last_error(), (word)) == NULL) {                   \
            fprintf(stderr, "errors: %s gave %s (\"%s\"), expected %s naming '%s'\n", #call, \
                    reverb_status_name(rc_), reverb_last_error(), #code, (word));            \
            failures++;                                                                      \
        }                                                                                    \
    } while (0)

/* An RMA that is refused when posted, or fails in its completion. */
static int rma_status(reverb_transport *t, int rc, uint64_t op) {
    if (rc != REVERB_OK)
        return rc;
    return reverb_wait_op(t, op, WAIT_MS, NULL);
}

int main(void) {
    EXPECT(reverb_transport_open(NULL), REVERB_ERR_INVALID_ARGUMENT, "NULL");
    reverb_transport *t;
    CHECK(reverb_transport_open(&t));
    uint32_t me = reverb_transport_rank(t), peer = 1 - me;
    reverb_region *inbox, *local, *bad;
    EXPECT(reverb_region_alloc(t, 64, 7, &bad), REVERB_ERR_INVALID_ARGUMENT, "access 7");
    CHECK(reverb_region_alloc(t, 64, REVERB_ACCESS_REMOTE_WRITE, &inbox));
    CHECK(reverb_region_alloc(t, 64, REVERB_ACCESS_LOCAL, &local));
    memset(reverb_region_ptr(local), 0xab, 64);

    reverb_remote mine, theirs;
    CHECK(reverb_region_remote(inbox, &mine));
    uint64_t op, sent;
    CHECK(reverb_recv(t, peer, 1, UINT64_MAX, &theirs, sizeof theirs, &op));
    CHECK(reverb_send(t, peer, 1, &mine, sizeof mine, &sent));
    CHECK(reverb_wait_op(t, op, WAIT_MS, NULL));
    CHECK(reverb_wait_op(t, sent, WAIT_MS, NULL));

    /* Wrong key, outside the region, reading a write-only region: refused, nothing moved. */
    reverb_remote forged = theirs;
    forged.key ^= 0x5a5a;
    int rc = reverb_put(t, local, 0, &forged, 0, 8, 1, &op);
    EXPECT(rma_status(t, rc, op), REVERB_ERR_ACCESS, "key");
    rc = reverb_put(t, local, 0, &theirs, 60, 8, 1, &op);
    EXPECT(rma_status(t, rc, op), REVERB_ERR_ACCESS, "outside");
    rc = reverb_get(t, local, 0, &theirs, 0, 8, 1, &op);
    EXPECT(rma_status(t, rc, op), REVERB_ERR_ACCESS, "read");
    EXPECT(reverb_put(t, local, 60, &theirs, 0, 8, 1, &op), REVERB_ERR_ACCESS, "outside");

    /* Bad ranks and sources, NULL buffers. */
    uint64_t word = 7;
    EXPECT(reverb_send(t, 99, 2, &word, sizeof word, &op), REVERB_ERR_INVALID_ARGUMENT, "rank 99");
    EXPECT(reverb_recv(t, -5, 2, UINT64_MAX, &word, sizeof word, &op), REVERB_ERR_INVALID_ARGUMENT, "source -5");
    EXPECT(reverb_send(t, peer, 2, NULL, 8, &op), REVERB_ERR_INVALID_ARGUMENT, "NULL");
    EXPECT(reverb_recv(t, peer, 2, UINT64_MAX, NULL, 8, &op), REVERB_ERR_INVALID_ARGUMENT, "NULL");

    /* A message longer than the buffer fails that receive with TRUNCATED. */
    uint64_t pair[2] = {1, 2};
    uint32_t small = 0xdeadbeef;
    CHECK(reverb_recv(t, peer, 3, UINT64_MAX, &small, sizeof small, &op));
    CHECK(reverb_send(t, peer, 3, pair, sizeof pair, &sent));
    EXPECT(reverb_wait_op(t, op, WAIT_MS, NULL), REVERB_ERR_TRUNCATED, "does not fit");
    CHECK(reverb_wait_op(t, sent, WAIT_MS, NULL));

    /* A wait with nothing to wait for ends at its bound. */
    reverb_completion c;
    size_t n;
    EXPECT(reverb_wait(t, &c, 1, 20, &n), REVERB_ERR_TIMEOUT, "timed out");

    /* The peer's failed puts left this rank's region as it was (zeroed). */
    CHECK(reverb_transport_barrier(t));
    const unsigned char *in = reverb_region_ptr(inbox);
    for (int i = 0; i < 64; i++)
        if (in[i] != 0) {
            fprintf(stderr, "errors: byte %d of the inbox is %#x after refused puts\n", i, in[i]);
            failures++;
            break;
        }
    if (strcmp(reverb_status_name(REVERB_ERR_PEER_DEAD), "REVERB_ERR_PEER_DEAD") != 0)
        failures++;
    reverb_region_free(inbox);
    reverb_region_free(local);
    reverb_transport_close(t);
    if (failures)
        return 1;
    if (me == 0)
        printf("errors: ok\n");
    return 0;
}
