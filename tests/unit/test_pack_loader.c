/* The packer over a real loader (client/lib/loader/pack.c): a variable-length token dataset written
 * by dsc_writer_* and read from its files (no server). Packed batches unpack to every document once
 * per epoch, on 1 and 2 ranks, with the packer's thread and on the caller's; a state saved
 * mid-epoch (also inside a document) resumes token for token in a new loader and packer; every
 * bad input gets its error code and a log line naming it. Runs under ASan and TSan. */
#include "testlib.h"

#include "dscache.h"

#include <stdarg.h>
#include <stdint.h>
#include <unistd.h>

#define DOCS 300
#define LENGTH 64
#define ROWS 4

static uint64_t lens[DOCS];
static char dir[256];
static char last_log[1024];

static void on_log(void *ctx, int level, const char *message) {
    (void)ctx;
    if (level == DSC_LOG_ERROR)
        snprintf(last_log, sizeof last_log, "%s", message);
}

static int32_t token(uint64_t doc, uint64_t k) {
    return (int32_t)(doc * 10007u + k);
}

static void write_dataset(void) {
    snprintf(dir, sizeof dir, "/tmp/dsc-pack-loader-%d", (int)getpid());
    dsc_writer_options_t wo;
    REQUIRE(dsc_writer_options_init(&wo, sizeof wo) == 0);
    wo.path = dir;
    wo.name = "docs";
    wo.fields = "input_ids:i32[],label:i64";
    wo.chunk_bytes = 4096;
    wo.threads = 1;
    dsc_writer_t *w = NULL;
    REQUIRE(dsc_writer_create(&wo, &w) == 0);
    int32_t buf[600];
    uint64_t x = 88172645463325252ull;
    for (uint64_t d = 0; d < DOCS; d++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        /* Long-tailed: mostly short, some over two rows. */
        lens[d] = 1 + (x % 100 < 80 ? x % 40 : x % 200);
        for (uint64_t k = 0; k < lens[d]; k++)
            buf[k] = token(d, k);
        int64_t label = (int64_t)d;
        dsc_writer_value_t v[2] = {{buf, lens[d] * 4}, {&label, 8}};
        REQUIRE(dsc_writer_add(w, v, 2) == 0);
    }
    dsc_writer_stats_t ws;
    ws.struct_size = sizeof ws;
    REQUIRE(dsc_writer_finish(w, &ws) == 0);
}

static dsc_loader_t *make_loader(uint32_t rank, uint32_t world, int pad) {
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
    dsc_field_options_t fo;
    if (pad) {
        REQUIRE(dsc_field_options_init(&fo, sizeof fo) == 0);
        fo.name = "input_ids";
        fo.pad = 1;
        o.field_options = &fo;
        o.field_option_count = 1;
    }
    dsc_loader_t *l = NULL;
    REQUIRE(dsc_loader_create(&o, &l) == 0);
    return l;
}

static int make_packer(dsc_loader_t *l, const char *field, uint32_t length, int on_caller,
                       dsc_packer_t **out) {
    dsc_pack_options_t po;
    REQUIRE(dsc_pack_options_init(&po, sizeof po) == 0);
    po.field = field;
    po.length = length;
    po.rows = ROWS;
    po.on_caller_thread = on_caller;
    last_log[0] = '\0';
    return dsc_packer_create(l, &po, out);
}

/* Tokens of each document seen (in order), to check every token once. */
static uint64_t seen[DOCS];

static int check_batch(const dsc_packed_batch_t *b) {
    const int32_t *tok = b->tokens;
    int ok = b->cu_seqlens[0] == 0 && b->cu_seqlens[b->segments] == (int32_t)(b->rows * LENGTH);
    for (uint32_t s = 0; s < b->segments; s++) {
        int64_t d = b->segment_index[s];
        int32_t a = b->cu_seqlens[s], e = b->cu_seqlens[s + 1];
        if (d < 0)
            continue;
        ok = ok && d < DOCS && b->segment_start[s] == (int64_t)seen[d];
        for (int32_t t = a; ok && t < e; t++)
            ok = tok[t] == token((uint64_t)d, seen[d] + (uint64_t)(t - a)) &&
                 b->position_ids[t] == t - a && b->document_ids[t] == (int32_t)s;
        if (ok)
            seen[d] += (uint64_t)(e - a);
    }
    return ok;
}

/* One epoch of a packer; returns the batches, checking each. */
static int run_epoch(dsc_packer_t *p) {
    dsc_packed_batch_t b;
    b.struct_size = sizeof b;
    int n = 0, rc;
    while ((rc = dsc_packer_next(p, &b)) == 0) {
        CHECK(check_batch(&b));
        n++;
    }
    CHECK_EQ_INT(rc, DSC_EOF);
    return n;
}

static void check_all_once(const char *what) {
    int ok = 1;
    for (int d = 0; d < DOCS; d++)
        ok = ok && seen[d] == lens[d];
    if (!ok)
        fprintf(stderr, "%s: not every token once\n", what);
    CHECK(ok);
}

int main(void) {
    write_dataset();
    /* One rank, with the packer's thread and on the caller's: every token once, twice over. */
    for (int on_caller = 0; on_caller <= 1; on_caller++) {
        dsc_loader_t *l = make_loader(0, 1, 0);
        dsc_packer_t *p = NULL;
        REQUIRE(make_packer(l, "input_ids", LENGTH, on_caller, &p) == 0);
        for (int epoch = 0; epoch < 2; epoch++) {
            memset(seen, 0, sizeof seen);
            CHECK(run_epoch(p) > 0);
            check_all_once("1 rank");
        }
        dsc_pack_stats_t st;
        st.struct_size = sizeof st;
        CHECK_EQ_INT(dsc_packer_stats(p, &st), 0);
        CHECK_EQ_INT(st.documents, 2 * DOCS);
        CHECK(st.efficiency > 0.98);
        dsc_packer_destroy(p);
        dsc_loader_destroy(l);
    }
    /* Held batches (dsc_packer_next_held): a whole epoch held, then checked after it; none
     * overwritten by the batches made after it (the thread's ring entries get other buffers),
     * released ones reused, held ones still valid after the packer is destroyed. */
    for (int on_caller = 0; on_caller <= 1; on_caller++) {
        enum { HOLD_MAX = 4096 };
        static dsc_packed_batch_t hb[HOLD_MAX];
        static dsc_pack_hold_t *hh[HOLD_MAX];
        dsc_loader_t *l = make_loader(0, 1, 0);
        dsc_packer_t *p = NULL;
        REQUIRE(make_packer(l, "input_ids", LENGTH, on_caller, &p) == 0);
        for (int epoch = 0; epoch < 2; epoch++) {
            int n = 0, rc;
            hb[0].struct_size = sizeof hb[0];
            while (n < HOLD_MAX && (rc = dsc_packer_next_held(p, &hb[n], &hh[n])) == 0)
                hb[++n].struct_size = sizeof hb[0];
            CHECK_EQ_INT(rc, DSC_EOF);
            CHECK(n > 4);
            memset(seen, 0, sizeof seen);
            int ok = 1;
            for (int i = 0; i < n; i++)
                ok = ok && check_batch(&hb[i]);
            if (!ok)
                fprintf(stderr, "held batches (on_caller %d, epoch %d): one was overwritten\n",
                        on_caller, epoch);
            CHECK(ok);
            check_all_once("held batches");
            if (epoch == 0) {
                for (int i = 0; i < n; i++)
                    dsc_packer_release(hh[i]);
            } else { /* the last ones held across destroy */
                for (int i = 0; i < n - 3; i++)
                    dsc_packer_release(hh[i]);
                dsc_packer_destroy(p);
                p = NULL;
                int still = 1;
                for (int i = n - 3; i < n; i++)
                    still =
                        still && hb[i].cu_seqlens[hb[i].segments] == (int32_t)(hb[i].rows * LENGTH);
                CHECK(still);
                for (int i = n - 3; i < n; i++)
                    dsc_packer_release(hh[i]);
            }
        }
        dsc_packer_destroy(p);
        dsc_loader_destroy(l);
    }
    dsc_packer_release(NULL);
    /* Two ranks: each document once across them. */
    memset(seen, 0, sizeof seen);
    for (uint32_t r = 0; r < 2; r++) {
        dsc_loader_t *l = make_loader(r, 2, 0);
        dsc_packer_t *p = NULL;
        REQUIRE(make_packer(l, "input_ids", LENGTH, 0, &p) == 0);
        run_epoch(p);
        dsc_packer_destroy(p);
        dsc_loader_destroy(l);
    }
    check_all_once("2 ranks");

    /* Resume at each of the first steps: the rest equals the uninterrupted stream. */
    dsc_loader_t *l = make_loader(0, 1, 0);
    dsc_packer_t *p = NULL;
    REQUIRE(make_packer(l, "input_ids", LENGTH, 0, &p) == 0);
    static int32_t ref[64][ROWS * LENGTH];
    int nref = 0;
    dsc_packed_batch_t b;
    b.struct_size = sizeof b;
    while (nref < 64 && dsc_packer_next(p, &b) == 0) {
        memset(ref[nref], 0, sizeof ref[nref]);
        memcpy(ref[nref++], b.tokens, (size_t)b.rows * LENGTH * 4);
    }
    dsc_packer_destroy(p);
    dsc_loader_destroy(l);
    for (int stop = 1; stop < nref && stop < 12; stop += 3) {
        l = make_loader(0, 1, 0);
        REQUIRE(make_packer(l, "input_ids", LENGTH, stop % 2, &p) == 0);
        for (int k = 0; k < stop; k++)
            REQUIRE(dsc_packer_next(p, &b) == 0);
        uint8_t state[DSC_PACK_STATE_MAX_BYTES];
        int n = dsc_packer_state_save(p, state, sizeof state);
        REQUIRE(n > 0 && n <= (int)sizeof state);
        dsc_packer_destroy(p);
        dsc_loader_destroy(l);
        l = make_loader(0, 1, 0);
        REQUIRE(make_packer(l, "input_ids", LENGTH, !(stop % 2), &p) == 0);
        CHECK_EQ_INT(dsc_packer_state_load(p, state, (size_t)n), 0);
        int same = 1;
        for (int k = stop; k < nref && dsc_packer_next(p, &b) == 0; k++)
            same = same && memcmp(ref[k], b.tokens, (size_t)b.rows * LENGTH * 4) == 0;
        if (!same)
            fprintf(stderr, "resume at %d differs\n", stop);
        CHECK(same);
        /* A state of another length is refused, naming it (on a loader of its own: two
         * packers never share a loader, whose batches each would take). */
        dsc_packer_t *q = NULL;
        dsc_loader_t *l3 = make_loader(0, 1, 0);
        REQUIRE(make_packer(l3, "input_ids", LENGTH * 2, 1, &q) == 0);
        CHECK_EQ_INT(dsc_packer_state_load(q, state, (size_t)n), DSC_EBADSTATE);
        CHECK(strstr(last_log, "length") != NULL);
        state[20] ^= 1;
        CHECK_EQ_INT(dsc_packer_state_load(q, state, (size_t)n), DSC_EBADSTATE);
        dsc_packer_destroy(q);
        dsc_loader_destroy(l3);
        state[20] ^= 1;
        /* Another world size is refused, naming both (one rank's position says nothing of the
         * others': re-split, it would skip or repeat tokens). */
        dsc_loader_t *l2 = make_loader(1, 2, 0);
        REQUIRE(make_packer(l2, "input_ids", LENGTH, 1, &q) == 0);
        CHECK_EQ_INT(dsc_packer_state_load(q, state, (size_t)n), DSC_EBADSTATE);
        CHECK(strstr(last_log, "world size it was saved on (1 ranks), not 2") != NULL);
        dsc_packer_destroy(q);
        dsc_loader_destroy(l2);
        dsc_packer_destroy(p);
        dsc_loader_destroy(l);
    }

    /* Bad input. */
    l = make_loader(0, 1, 0);
    p = NULL;
    CHECK_EQ_INT(make_packer(l, "label", LENGTH, 0, &p), DSC_EINVAL);
    CHECK(strstr(last_log, "fixed-shape") != NULL && strstr(last_log, "label") != NULL);
    CHECK_EQ_INT(make_packer(l, "nope", LENGTH, 0, &p), DSC_EINVAL);
    CHECK(strstr(last_log, "no field 'nope'") != NULL);
    CHECK_EQ_INT(make_packer(l, "input_ids", 0, 0, &p), DSC_EINVAL);
    CHECK(strstr(last_log, "length 0") != NULL);
    CHECK_EQ_INT(make_packer(l, NULL, LENGTH, 0, &p), DSC_EINVAL);
    CHECK(p == NULL);
    dsc_pack_options_t po;
    CHECK_EQ_INT(dsc_pack_options_init(&po, 4), DSC_EINVAL);
    REQUIRE(dsc_pack_options_init(&po, sizeof po) == 0);
    po.field = "input_ids", po.length = 8, po.ahead = 65;
    CHECK_EQ_INT(dsc_packer_create(l, &po, &p), DSC_EINVAL);
    CHECK_EQ_INT(dsc_packer_next(NULL, &b), DSC_EINVAL);
    dsc_packer_destroy(NULL);
    dsc_loader_destroy(l);
    l = make_loader(0, 1, 1); /* input_ids padded */
    CHECK_EQ_INT(make_packer(l, "input_ids", LENGTH, 0, &p), DSC_EINVAL);
    CHECK(strstr(last_log, "padded") != NULL);
    dsc_loader_destroy(l);

    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return TEST_DONE();
}
