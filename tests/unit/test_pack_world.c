/* A packed stream resumed onto another world size (dsc_packer_state_load_world,
 * client/lib/pack.c): a variable-length token dataset read from its files (no server), packed
 * on 2 ranks and resumed on 4 at a random packed step, and on 4 resumed on 2: over the old
 * ranks' batches before the change and the new ranks' after it, every document's tokens appear
 * exactly once in the epoch, each at its own place in its document. Bad input names its
 * culprit. */
#include "testlib.h"

#include "dscache.h"

#include <stdlib.h>
#include <unistd.h>

#define DOCS 400
#define LENGTH 64
#define ROWS 4

static uint64_t lens[DOCS];
static uint8_t seen[DOCS][240];
static char dir[256];
static char last_log[1024];

static void on_log(void *ctx, int level, const char *message) {
    (void)ctx;
    if (level == DSC_LOG_ERROR)
        snprintf(last_log, sizeof last_log, "%s", message);
}

static int32_t token(uint64_t doc, uint64_t k) {
    return (int32_t)(doc * 1000u + k);
}

static void write_dataset(void) {
    snprintf(dir, sizeof dir, "/tmp/dsc-pack-world-%d", (int)getpid());
    dsc_writer_options_t wo;
    REQUIRE(dsc_writer_options_init(&wo, sizeof wo) == 0);
    wo.path = dir;
    wo.name = "docs";
    wo.fields = "input_ids:i32[]";
    wo.chunk_bytes = 4096;
    wo.threads = 1;
    dsc_writer_t *w = NULL;
    REQUIRE(dsc_writer_create(&wo, &w) == 0);
    int32_t buf[240];
    uint64_t x = 88172645463325252ull;
    for (uint64_t d = 0; d < DOCS; d++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        lens[d] = 1 + (x % 100 < 80 ? x % 40 : x % 200); /* long-tailed: some over 3 rows */
        for (uint64_t k = 0; k < lens[d]; k++)
            buf[k] = token(d, k);
        dsc_writer_value_t v = {buf, lens[d] * 4};
        REQUIRE(dsc_writer_add(w, &v, 1) == 0);
    }
    dsc_writer_stats_t ws;
    ws.struct_size = sizeof ws;
    REQUIRE(dsc_writer_finish(w, &ws) == 0);
}

typedef struct rank_stream {
    dsc_loader_t *loader;
    dsc_packer_t *packer;
} rank_stream_t;

static void open_rank(rank_stream_t *s, uint32_t rank, uint32_t world) {
    dsc_loader_options_t o;
    REQUIRE(DSC_LOADER_OPTIONS_INIT(&o) == 0);
    o.dataset = "docs";
    o.fallback_path = dir;
    o.batch_size = 16;
    o.seed = 4;
    o.rank = rank, o.world_size = world;
    o.ignore_rank_env = 1;
    o.shuffle_window = 40;
    o.log_fn = on_log;
    o.log_level = DSC_LOG_WARN;
    REQUIRE(dsc_loader_create(&o, &s->loader) == 0);
    dsc_pack_options_t po;
    REQUIRE(dsc_pack_options_init(&po, sizeof po) == 0);
    po.field = "input_ids";
    po.length = LENGTH;
    po.rows = ROWS;
    po.ahead = rank % 2; /* the packer's thread on odd ranks, the caller's on even ones */
    po.on_caller_thread = rank % 2 == 0;
    REQUIRE(dsc_packer_create(s->loader, &po, &s->packer) == 0);
}

static void close_rank(rank_stream_t *s) {
    dsc_packer_destroy(s->packer);
    dsc_loader_destroy(s->loader);
}

/* One packed batch into seen[][]: each token at its place in its document. Returns the
 * packer's rc; *bad counts tokens out of place. */
static int take(rank_stream_t *s, uint64_t *bad) {
    dsc_packed_batch_t pb;
    memset(&pb, 0, sizeof pb);
    pb.struct_size = sizeof pb;
    int rc = dsc_packer_next(s->packer, &pb);
    if (rc < 0)
        return rc;
    const int32_t *tok = pb.tokens;
    for (uint32_t g = 0; g < pb.segments; g++) {
        int64_t doc = pb.segment_index[g];
        if (doc < 0)
            continue;
        for (int64_t t = pb.cu_seqlens[g]; t < pb.cu_seqlens[g + 1]; t++) {
            uint64_t k = (uint64_t)(pb.segment_start[g] + (t - pb.cu_seqlens[g]));
            if (doc >= DOCS || k >= lens[doc] || tok[t] != token((uint64_t)doc, k))
                (*bad)++;
            else if (seen[doc][k] < 255)
                seen[doc][k]++;
        }
    }
    return 0;
}

/* old_world ranks take `steps` packed batches each; their states resume new_world ranks, which
 * run to the epoch's end. Every token once. */
static void change(uint32_t old_world, uint32_t new_world, int steps) {
    memset(seen, 0, sizeof seen);
    uint64_t bad = 0;
    rank_stream_t old[4], now[4];
    uint8_t states[4][DSC_PACK_STATE_MAX_BYTES];
    const void *ptr[4];
    size_t len[4];
    for (uint32_t r = 0; r < old_world; r++) {
        open_rank(&old[r], r, old_world);
        for (int st = 0; st < steps; st++)
            REQUIRE(take(&old[r], &bad) == 0);
        int n = dsc_packer_state_save(old[r].packer, states[r], sizeof states[r]);
        REQUIRE(n > 0);
        ptr[r] = states[r], len[r] = (size_t)n;
    }
    for (uint32_t r = 0; r < old_world; r++)
        close_rank(&old[r]);
    /* The single-state load still refuses another world size, naming both. */
    open_rank(&now[0], 0, new_world);
    CHECK_EQ_INT(dsc_packer_state_load(now[0].packer, ptr[0], len[0]), DSC_EBADSTATE);
    CHECK(strstr(last_log, "world size") != NULL);
    close_rank(&now[0]);
    for (uint32_t r = 0; r < new_world; r++) {
        open_rank(&now[r], r, new_world);
        int rc = dsc_packer_state_load_world(now[r].packer, ptr, len, old_world);
        CHECK_EQ_INT(rc, 0);
        if (rc < 0)
            fprintf(stderr, "load_world: %s\n", last_log);
        int guard = 0;
        while (rc == 0 && (rc = take(&now[r], &bad)) == 0 && guard++ < 10000) {
        }
        CHECK_EQ_INT(rc, DSC_EOF);
        /* A state saved right after the change (old ranks' batches still packed) is refused
         * until they are done; the first batch of the next epoch saves a good one. */
        close_rank(&now[r]);
    }
    uint64_t missing = 0, twice = 0;
    for (uint64_t d = 0; d < DOCS; d++)
        for (uint64_t k = 0; k < lens[d]; k++)
            missing += seen[d][k] == 0, twice += seen[d][k] > 1;
    CHECK(bad == 0 && missing == 0 && twice == 0);
    printf("%u -> %u ranks after %d packed batches: %llu tokens out of place, %llu missing, %llu "
           "twice\n",
           old_world, new_world, steps, (unsigned long long)bad, (unsigned long long)missing,
           (unsigned long long)twice);
}

int main(void) {
    write_dataset();
    srand((unsigned)getpid());
    /* An epoch is ~8200 tokens: ~32 packed batches of 4 x 64 over all ranks. */
    change(2, 4, 1 + rand() % 10);
    change(4, 2, 1 + rand() % 5);
    change(2, 4, 0);
    /* Steps at which the old ranks' loaders stand at different batches (with this dataset and
     * seed): the laggards' batches up to the leader's are packed by the new ranks. */
    change(2, 4, 6);
    change(4, 2, 4);
    /* Bad input: a state of another world size than old_world; NULL states. */
    {
        rank_stream_t a, b;
        open_rank(&a, 0, 2);
        uint64_t bad = 0;
        REQUIRE(take(&a, &bad) == 0);
        uint8_t st[DSC_PACK_STATE_MAX_BYTES];
        int n = dsc_packer_state_save(a.packer, st, sizeof st);
        REQUIRE(n > 0);
        const void *ptr[3] = {st, st, st};
        size_t len[3] = {(size_t)n, (size_t)n, (size_t)n};
        open_rank(&b, 0, 4);
        CHECK_EQ_INT(dsc_packer_state_load_world(b.packer, ptr, len, 3), DSC_EBADSTATE);
        CHECK(strstr(last_log, "old rank 0") != NULL && strstr(last_log, "world size"));
        CHECK_EQ_INT(dsc_packer_state_load_world(b.packer, NULL, len, 2), DSC_EINVAL);
        close_rank(&a);
        close_rank(&b);
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return TEST_DONE();
}
