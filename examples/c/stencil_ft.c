/* A fault-tolerant 1-D heat stencil from C: the runtime logs the halo messages and keeps
 * in-memory checkpoints of the protected cells, so when a node is killed only its ranks
 * restart, restore and replay, and rank 0 prints the same checksum as a failure-free run.
 * Three calls make it fault tolerant (FTI's shape): protect, checkpoint, restore.
 *
 *   cc stencil_ft.c $(pkg-config --cflags --libs reverb) -o stencil_ft
 *   REVERB_LOG=causal reverb run -n 4 --ranks-per-node 2 --respawn 1 -- ./stencil_ft 100 10
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <reverb.h>

#define CELLS 64
#define TAG_TO_LEFT 0x11
#define TAG_TO_RIGHT 0x12
#define TAG_CHECKSUM 0x13

#define CHECK(call)                                                                          \
    do {                                                                                     \
        int rc_ = (call);                                                                    \
        if (rc_ != REVERB_OK) {                                                              \
            fprintf(stderr, "stencil_ft: %s: %s (%s)\n", #call, reverb_last_error(),         \
                    reverb_status_name(rc_));                                                \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

/* The protected state: where the run is, and the cells. */
struct state {
    uint64_t iter;
    uint64_t halos;
    double cells[CELLS];
};

static uint64_t fnv1a(uint64_t h, const void *data, size_t len) {
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static double halo(reverb_runtime *rt, uint32_t from, uint64_t tag) {
    double v;
    size_t len;
    CHECK(reverb_runtime_recv(rt, from, tag, &v, sizeof v, &len, NULL));
    if (len != sizeof v) {
        fprintf(stderr, "stencil_ft: a halo of %zu bytes from rank %" PRIu32 "\n", len, from);
        exit(1);
    }
    return v;
}

static void step(reverb_runtime *rt, struct state *s) {
    uint32_t me = reverb_runtime_rank(rt), size = reverb_runtime_size(rt);
    if (me > 0)
        CHECK(reverb_runtime_send(rt, me - 1, TAG_TO_LEFT, &s->cells[0], sizeof(double)));
    if (me + 1 < size)
        CHECK(reverb_runtime_send(rt, me + 1, TAG_TO_RIGHT, &s->cells[CELLS - 1], sizeof(double)));
    double left = me > 0 ? halo(rt, me - 1, TAG_TO_RIGHT) : 100.0;
    double right = me + 1 < size ? halo(rt, me + 1, TAG_TO_LEFT) : 0.0;
    s->halos += (me > 0) + (me + 1 < size);
    double old[CELLS];
    memcpy(old, s->cells, sizeof old);
    for (int i = 0; i < CELLS; i++) {
        double l = i == 0 ? left : old[i - 1];
        double r = i == CELLS - 1 ? right : old[i + 1];
        s->cells[i] = (l + old[i] + r) / 3.0;
    }
}

int main(int argc, char **argv) {
    uint64_t iters = argc > 1 ? strtoull(argv[1], NULL, 10) : 100;
    uint64_t every = argc > 2 ? strtoull(argv[2], NULL, 10) : 10;
    reverb_runtime *rt;
    CHECK(reverb_runtime_init(&rt));
    struct state s = {0};
    CHECK(reverb_runtime_protect(rt, 0, &s, sizeof s));
    int restored;
    CHECK(reverb_runtime_restore(rt, &restored));
    if (restored)
        fprintf(stderr, "stencil_ft: rank %" PRIu32 " restarted at iteration %" PRIu64 "\n",
                reverb_runtime_rank(rt), s.iter);
    while (s.iter < iters) {
        step(rt, &s);
        s.iter++;
        /* At the end of an iteration: everything sent to this rank so far has arrived. */
        if (every > 0 && s.iter % every == 0 && s.iter < iters)
            CHECK(reverb_runtime_checkpoint(rt, NULL));
    }
    uint32_t me = reverb_runtime_rank(rt), size = reverb_runtime_size(rt);
    uint64_t neighbours = (me > 0) + (me + 1 < size);
    if (s.halos != iters * neighbours) {
        fprintf(stderr, "stencil_ft: %" PRIu64 " halos, expected %" PRIu64 "\n", s.halos, iters * neighbours);
        return 1;
    }
    uint64_t mine = fnv1a(0xcbf29ce484222325ULL, &s, sizeof s);
    if (me != 0) {
        CHECK(reverb_runtime_send(rt, 0, TAG_CHECKSUM, &mine, sizeof mine));
    } else {
        uint64_t all = fnv1a(0xcbf29ce484222325ULL, &mine, sizeof mine);
        for (uint32_t r = 1; r < size; r++) {
            uint64_t theirs;
            CHECK(reverb_runtime_recv(rt, r, TAG_CHECKSUM, &theirs, sizeof theirs, NULL, NULL));
            all = fnv1a(all, &theirs, sizeof theirs);
        }
        printf("checksum: %016" PRIx64 "\n", all);
    }
    CHECK(reverb_runtime_finalize(rt));
    return 0;
}
