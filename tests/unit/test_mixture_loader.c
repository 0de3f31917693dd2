/* A loader over a mixture (dsc_loader_create with options.sources, client/lib/mixture.c) on
 * three token datasets read from their files (no server): ordinary batches with "source" per
 * sample and values equal to the written ones; the same composition as dsc_mixture_create; each
 * source's samples exactly once per source-epoch over 2 ranks; a batch the caller retains is
 * never overwritten; state save/load resumes byte for byte; stats with per-source figures; bad
 * input (a source lacking every field, a field named "source", set_epoch) names the culprit. */
#include "testlib.h"

#include "dscache.h"

#include <stdlib.h>
#include <unistd.h>

#define B 10
static const char *names[3] = {"web", "code", "books"};
static const uint64_t sizes[3] = {240, 120, 40};
static const double weights[3] = {0.55, 0.3, 0.15};
static char root[256], dirs[5][300];
static char last_log[1024];

static void on_log(void *ctx, int level, const char *message) {
    (void)ctx;
    if (level == DSC_LOG_ERROR)
        snprintf(last_log, sizeof last_log, "%s", message);
}

static int32_t token(int source, uint64_t i, uint64_t k) {
    return (int32_t)(source * 1000000 + (int)i * 100 + (int)k);
}
static uint64_t doc_len(uint64_t i) {
    return 1 + (i * 7) % 23;
}

/* Dataset k: tokens i32[] and id i64 (k 3: "lang" only; k 4: tokens, id and "source"). */
static void write_ds(int k, const char *name, const char *fields, uint64_t n) {
    dsc_writer_options_t wo;
    REQUIRE(dsc_writer_options_init(&wo, sizeof wo) == 0);
    wo.path = dirs[k];
    wo.name = name;
    wo.fields = fields;
    wo.chunk_bytes = 1024;
    wo.threads = 1;
    dsc_writer_t *w = NULL;
    REQUIRE(dsc_writer_create(&wo, &w) == 0);
    for (uint64_t i = 0; i < n; i++) {
        int32_t buf[32];
        for (uint64_t t = 0; t < doc_len(i); t++)
            buf[t] = token(k, i, t);
        int64_t id = (int64_t)(k * 100000 + (int)i);
        dsc_writer_value_t v[3] = {{buf, doc_len(i) * 4}, {&id, 8}, {&id, 8}};
        if (k == 3)
            v[0] = v[1];
        REQUIRE(dsc_writer_add(w, v, k == 3 ? 1 : k == 4 ? 3 : 2) == 0);
    }
    dsc_writer_stats_t ws;
    ws.struct_size = sizeof ws;
    REQUIRE(dsc_writer_finish(w, &ws) == 0);
}

static dsc_source_options_t so[3];

static void options(dsc_loader_options_t *o, uint32_t rank, uint32_t world) {
    REQUIRE(DSC_LOADER_OPTIONS_INIT(o) == 0);
    o->batch_size = B;
    o->seed = 9;
    o->rank = rank, o->world_size = world;
    o->ignore_rank_env = 1;
    o->shuffle_window = 16;
    o->log_fn = on_log;
    o->log_level = DSC_LOG_WARN;
    for (int k = 0; k < 3; k++) {
        REQUIRE(dsc_source_options_init(&so[k], sizeof so[k]) == 0);
        so[k].dataset = names[k];
        so[k].fallback_path = dirs[k];
        so[k].weight = weights[k];
    }
    o->sources = so, o->n_sources = 3;
}

static int make(uint32_t rank, uint32_t world, dsc_loader_t **out) {
    dsc_loader_options_t o;
    options(&o, rank, world);
    last_log[0] = '\0';
    return dsc_loader_create(&o, out);
}

/* One batch: checks its values against the written ones, fills src/idx, returns its samples. */
static int take(dsc_loader_t *l, int32_t *src, uint64_t *idx, dsc_batch_t **kept) {
    dsc_batch_t *b = NULL;
    int rc = dsc_loader_next(l, &b);
    if (rc < 0)
        return rc;
    dsc_field_view_t tv, iv, sv;
    tv.struct_size = iv.struct_size = sv.struct_size = sizeof tv;
    REQUIRE(dsc_batch_field_view(b, 0, &tv) == 0 && dsc_batch_field_view(b, 1, &iv) == 0 &&
            dsc_batch_field_view(b, 2, &sv) == 0);
    CHECK_EQ_INT(tv.kind, DSC_FIELD_VALUES);
    CHECK_EQ_INT(sv.kind, DSC_FIELD_FIXED);
    CHECK(strcmp(sv.values.name, "source") == 0 && sv.values.dtype == DSC_DTYPE_I32);
    dsc_field_view_t ev;
    ev.struct_size = sizeof ev;
    REQUIRE(dsc_batch_field_view(b, 3, &ev) == 0);
    CHECK(strcmp(ev.values.name, "source_epoch") == 0 && ev.values.dtype == DSC_DTYPE_I64);
    const int64_t *sep = ev.values.data;
    for (uint32_t i = 0; i < dsc_batch_samples(b); i++)
        CHECK(sep[i] >= 0 && sep[i] < 10);
    uint32_t n = dsc_batch_samples(b);
    const int32_t *tok = tv.values.data, *s = sv.values.data;
    const int64_t *id = iv.values.data;
    const uint64_t *ix = dsc_batch_indices(b);
    int ok = 1;
    for (uint32_t i = 0; i < n; i++) {
        int k = s[i];
        ok = ok && k >= 0 && k < 3 && id[i] == (int64_t)(k * 100000 + (int)ix[i]);
        ok = ok && tv.offsets[i + 1] - tv.offsets[i] == (int64_t)doc_len(ix[i]);
        for (int64_t t = tv.offsets[i]; ok && t < tv.offsets[i + 1]; t++)
            ok = tok[t] == token(k, ix[i], (uint64_t)(t - tv.offsets[i]));
        src[i] = k, idx[i] = ix[i];
    }
    CHECK(ok);
    if (kept != NULL) {
        REQUIRE(dsc_batch_retain(b) == 0);
        *kept = b;
    }
    return (int)n;
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/dsc-mixture-loader-%d", (int)getpid());
    const char *dn[5] = {"web", "code", "books", "langonly", "withsource"};
    for (int k = 0; k < 5; k++)
        snprintf(dirs[k], sizeof dirs[k], "%s/%s", root, dn[k]);
    write_ds(0, names[0], "tokens:i32[],id:i64", sizes[0]);
    write_ds(1, names[1], "tokens:i32[],id:i64", sizes[1]);
    write_ds(2, names[2], "tokens:i32[],id:i64", sizes[2]);
    write_ds(3, dn[3], "lang:i64", 10);
    write_ds(4, dn[4], "tokens:i32[],id:i64,source:i64", 10);

    /* The loader's batches are dsc_mixture_create's composition, with values and "source". */
    dsc_loader_t *l = NULL;
    REQUIRE(make(0, 1, &l) == 0);
    CHECK_EQ_INT(dsc_loader_field_count(l), 4);
    dsc_field_info_t fi;
    CHECK(dsc_loader_field(l, 2, &fi) == 0 && strcmp(fi.name, "source") == 0);
    CHECK(dsc_loader_dataset_samples(l) == 400);
    CHECK(dsc_loader_mixture(l) != NULL && dsc_mixture_field_count(dsc_loader_mixture(l)) == 2);
    {
        dsc_loader_options_t o;
        options(&o, 0, 1);
        static const char *const need[2] = {"tokens", "id"};
        dsc_mixture_t *m = NULL;
        REQUIRE(dsc_mixture_create(&o, so, 3, need, 2, &m) == 0);
        int same = 1;
        for (int st = 0; st < 30; st++) {
            int32_t src[B];
            uint64_t idx[B];
            dsc_mixture_batch_t mb;
            mb.struct_size = sizeof mb;
            REQUIRE(dsc_mixture_next(m, &mb) == 0);
            REQUIRE(take(l, src, idx, NULL) == B);
            for (int i = 0; i < B; i++)
                same = same && src[i] == mb.source[i] && idx[i] == mb.indices[i];
        }
        CHECK(same);
        dsc_mixture_destroy(m);
    }
    dsc_loader_destroy(l);

    /* Two ranks: each source's samples once per source-epoch; shares within one sample a step;
     * a retained batch stays as it was while later ones are made. */
    {
        uint64_t seen[3][240] = {{0}};
        dsc_loader_t *r[2] = {NULL, NULL};
        REQUIRE(make(0, 2, &r[0]) == 0 && make(1, 2, &r[1]) == 0);
        uint64_t per_src[3] = {0, 0, 0}, total = 0;
        int shares_ok = 1, retained_ok = 1;
        dsc_batch_t *kept = NULL;
        int32_t kept_src[B];
        uint64_t kept_idx[B];
        dsc_field_view_t kv;
        kv.struct_size = sizeof kv;
        uint8_t copy[B * 32 * 4];
        size_t copy_len = 0;
        /* Rank 0 delivers 120 of web's 240 in ceil(120 / (0.55 B)) steps: take 20 steps. */
        for (int st = 0; st < 20; st++) {
            for (int k = 0; k < 2; k++) {
                int32_t src[B];
                uint64_t idx[B];
                int keep = k == 0 && st == 3;
                REQUIRE(take(r[k], src, idx, keep ? &kept : NULL) == B);
                if (keep) {
                    memcpy(kept_src, src, sizeof src), memcpy(kept_idx, idx, sizeof idx);
                    REQUIRE(dsc_batch_field_view(kept, 0, &kv) == 0);
                    copy_len = (size_t)kv.values.bytes;
                    REQUIRE(copy_len <= sizeof copy);
                    memcpy(copy, kv.values.data, copy_len);
                }
                for (int i = 0; i < B; i++) {
                    if (k == 0)
                        per_src[src[i]]++;
                    if (idx[i] < sizes[src[i]])
                        seen[src[i]][idx[i]]++;
                }
            }
            total += B;
            for (int s = 0; s < 3; s++) {
                double quota = (double)total * weights[s];
                shares_ok = shares_ok && (double)per_src[s] <= quota + 1.0001 &&
                            (double)per_src[s] >= quota - 1.0001;
            }
        }
        CHECK(shares_ok);
        /* web: 2 x 20 x ~5.5 = 220 of its 240 so far, each at most once. books (40) and code
         * (120) wrapped: each sample seen a whole number of times, all the same count. */
        int once = 1;
        for (uint64_t i = 0; i < sizes[0]; i++)
            once = once && seen[0][i] <= 1;
        CHECK(once);
        int32_t chk_src[B];
        const int32_t *ks = NULL;
        dsc_field_view_t sv;
        sv.struct_size = sizeof sv;
        REQUIRE(dsc_batch_field_view(kept, 2, &sv) == 0);
        ks = sv.values.data;
        for (int i = 0; i < B; i++)
            chk_src[i] = ks[i];
        retained_ok = memcmp(chk_src, kept_src, sizeof chk_src) == 0 &&
                      memcmp(dsc_batch_indices(kept), kept_idx, sizeof kept_idx) == 0 &&
                      memcmp(kv.values.data, copy, copy_len) == 0;
        CHECK(retained_ok);
        dsc_batch_release(kept);
        /* Per-source figures: the samples each source handed out add up to the loader's. */
        dsc_stats_t st;
        memset(&st, 0, sizeof st);
        st.struct_size = sizeof st;
        REQUIRE(dsc_loader_stats(r[0], &st) == 0);
        CHECK(st.samples == 20 * B && st.batches == 20);
        uint64_t sum = 0;
        for (uint32_t k = 0; k < 3; k++) {
            uint64_t n = 0;
            dsc_stats_t ss;
            memset(&ss, 0, sizeof ss);
            ss.struct_size = sizeof ss;
            REQUIRE(dsc_mixture_source_stats(dsc_loader_mixture(r[0]), k, &n, &ss) == 0);
            CHECK(n == per_src[k]);
            sum += n;
        }
        CHECK(sum == st.samples);
        /* set_epoch other than the current one is refused with a reason. */
        CHECK_EQ_INT(dsc_loader_set_epoch(r[0], 5), DSC_EINVAL);
        char why[512];
        CHECK(dsc_loader_last_error(r[0], why, sizeof why) > 0 && strstr(why, "set_epoch"));
        dsc_loader_destroy(r[0]);
        dsc_loader_destroy(r[1]);
    }

    /* State at a random step: a new loader continues byte for byte. */
    {
        srand((unsigned)getpid());
        int at = 1 + rand() % 25;
        dsc_loader_t *a = NULL, *b = NULL;
        REQUIRE(make(1, 2, &a) == 0);
        uint8_t state[1 << 16];
        int len = 0;
        int32_t sa[40][B];
        uint64_t ia[40][B];
        for (int st = 0; st < 40; st++) {
            if (st == at)
                REQUIRE((len = dsc_loader_state_save(a, state, sizeof state)) > 0);
            REQUIRE(take(a, sa[st], ia[st], NULL) == B);
        }
        REQUIRE(make(1, 2, &b) == 0);
        REQUIRE(dsc_loader_state_load(b, state, (size_t)len) == 0);
        int same = 1;
        for (int st = at; st < 40; st++) {
            int32_t s[B];
            uint64_t i[B];
            REQUIRE(take(b, s, i, NULL) == B);
            same = same && memcmp(s, sa[st], sizeof s) == 0 && memcmp(i, ia[st], sizeof i) == 0;
        }
        CHECK(same);
        if (!same)
            fprintf(stderr, "resume at step %d differs\n", at);
        /* A single-dataset loader's state is refused, naming why. */
        dsc_loader_options_t o;
        REQUIRE(DSC_LOADER_OPTIONS_INIT(&o) == 0);
        o.dataset = "web", o.fallback_path = dirs[0], o.ignore_rank_env = 1;
        dsc_loader_t *single = NULL;
        REQUIRE(dsc_loader_create(&o, &single) == 0);
        len = dsc_loader_state_save(single, state, sizeof state);
        REQUIRE(len > 0);
        CHECK_EQ_INT(dsc_loader_state_load(b, state, (size_t)len), DSC_EBADSTATE);
        char why[512];
        CHECK(dsc_loader_last_error(b, why, sizeof why) > 0 && strstr(why, "not a mixture"));
        dsc_loader_destroy(single);
        dsc_loader_destroy(a);
        dsc_loader_destroy(b);
    }

    /* Rows that mix sources: a packer over the loader over the mixture. Each segment names its
     * source (segment_source), and its tokens are that source's document's from segment_start
     * on; some row holds documents of two sources. */
    {
        dsc_loader_t *x = NULL;
        REQUIRE(make(0, 1, &x) == 0);
        dsc_pack_options_t po;
        REQUIRE(dsc_pack_options_init(&po, sizeof po) == 0);
        po.field = "tokens", po.length = 16, po.rows = 4;
        dsc_packer_t *pk = NULL;
        REQUIRE(dsc_packer_create(x, &po, &pk) == 0);
        int ok = 1, mixed_row = 0;
        for (int s = 0; s < 20 && ok; s++) {
            dsc_packed_batch_t pb;
            memset(&pb, 0, sizeof pb);
            pb.struct_size = sizeof pb;
            REQUIRE(dsc_packer_next(pk, &pb) == 0);
            ok = pb.segment_source != NULL;
            const int32_t *tok = pb.tokens;
            int32_t row_src = -2;
            int64_t row = -1;
            for (uint32_t g = 0; ok && g < pb.segments; g++) {
                int32_t src = pb.segment_source[g];
                int64_t at = pb.cu_seqlens[g], n = pb.cu_seqlens[g + 1] - at;
                if (pb.segment_index[g] < 0) {
                    ok = src == -1;
                    continue;
                }
                ok = src >= 0 && src < 3;
                for (int64_t k = 0; k < n && ok; k++)
                    ok = tok[at + k] == token(src, (uint64_t)pb.segment_index[g],
                                              (uint64_t)(pb.segment_start[g] + k));
                if (at / 16 != row)
                    row = at / 16, row_src = src;
                else if (src != row_src)
                    mixed_row = 1;
            }
        }
        CHECK(ok);
        CHECK(mixed_row);
        /* A caller built before segment_source passes the smaller size: nothing is written
         * past it. */
        unsigned char raw[sizeof(dsc_packed_batch_t)];
        memset(raw, 0xab, sizeof raw);
        dsc_packed_batch_t *old = (dsc_packed_batch_t *)(void *)raw;
        old->struct_size = offsetof(dsc_packed_batch_t, segment_source);
        CHECK_EQ_INT(dsc_packer_next(pk, old), 0);
        int untouched = 1;
        for (size_t i = offsetof(dsc_packed_batch_t, segment_source); i < sizeof raw; i++)
            untouched = untouched && raw[i] == 0xab;
        CHECK(untouched);
        /* Onto another world size from every old rank's state (tests/python/test_mixture.py
         * checks the documents): two states that are both of one rank of 1 are refused. */
        static uint8_t st[40000];
        int n = dsc_packer_state_save(pk, st, sizeof st);
        REQUIRE(n > DSC_STATE_MAX_BYTES && n <= (int)sizeof st); /* holds the mixture's state */
        const void *states[2] = {st, st};
        size_t lens[2] = {(size_t)n, (size_t)n};
        CHECK_EQ_INT(dsc_packer_state_load_world(pk, states, lens, 2), DSC_EBADSTATE);
        CHECK(strstr(last_log, "another world size than old_world") != NULL);
        CHECK_EQ_INT(dsc_packer_state_load(pk, st, (size_t)n), 0);
        dsc_packer_destroy(pk);
        dsc_loader_destroy(x);
    }

    /* Bad input: a source without any of the others' fields; a field named "source"; a
     * source that does not exist; weights <= 0. */
    {
        dsc_loader_options_t o;
        char why[512];
        options(&o, 0, 1);
        so[2].dataset = dn[3], so[2].fallback_path = dirs[3];
        CHECK_EQ_INT(dsc_loader_create(&o, &l), DSC_EINVAL);
        CHECK(dsc_loader_last_error(NULL, why, sizeof why) > 0 && strstr(why, "'langonly'") &&
              strstr(why, "no field in common") && strstr(why, "'tokens'"));
        options(&o, 0, 1);
        so[2].dataset = dn[4], so[2].fallback_path = dirs[4];
        o.sources = so;
        so[0].dataset = dn[4], so[0].fallback_path = dirs[4];
        so[2].dataset = names[2], so[2].fallback_path = dirs[2];
        /* The others lack "source": the fields all share are taken, with the loader's own. */
        REQUIRE(dsc_loader_create(&o, &l) == 0);
        CHECK_EQ_INT(dsc_loader_field_count(l), 4);
        dsc_loader_destroy(l);
        options(&o, 0, 1);
        o.n_sources = 1;
        so[0].dataset = dn[4], so[0].fallback_path = dirs[4];
        CHECK_EQ_INT(dsc_loader_create(&o, &l), DSC_EINVAL);
        CHECK(dsc_loader_last_error(NULL, why, sizeof why) > 0 && strstr(why, "'source'"));
        options(&o, 0, 1);
        so[1].dataset = "nosuch", so[1].fallback_path = "/nonexistent/dscache-nosuch";
        CHECK(dsc_loader_create(&o, &l) < 0);
        CHECK(dsc_loader_last_error(NULL, why, sizeof why) > 0 && strstr(why, "'nosuch'"));
        options(&o, 0, 1);
        so[1].weight = -0.5;
        CHECK_EQ_INT(dsc_loader_create(&o, &l), DSC_EINVAL);
        CHECK(dsc_loader_last_error(NULL, why, sizeof why) > 0 && strstr(why, "'code'") &&
              strstr(why, "weight"));
        /* pack on a fixed-shape field of a packed mixture: names the field. */
        options(&o, 0, 1);
        dsc_pack_options_t po;
        REQUIRE(dsc_pack_options_init(&po, sizeof po) == 0);
        po.field = "id", po.length = 16;
        dsc_mixture_t *pm = NULL;
        CHECK_EQ_INT(dsc_mixture_create_packed(&o, so, 3, &po, &pm), DSC_EINVAL);
        CHECK(dsc_mixture_last_error(NULL, why, sizeof why) > 0 && strstr(why, "'id'"));
        /* A state of another mixture (other weights): refused, saying so. */
        dsc_loader_t *x = NULL, *y = NULL;
        REQUIRE(make(0, 1, &x) == 0);
        options(&o, 0, 1);
        so[2].weight = 0.5;
        REQUIRE(dsc_loader_create(&o, &y) == 0);
        uint8_t state[1 << 16];
        int len = dsc_loader_state_save(x, state, sizeof state);
        REQUIRE(len > 0);
        CHECK_EQ_INT(dsc_loader_state_load(y, state, (size_t)len), DSC_EBADSTATE);
        CHECK(dsc_loader_last_error(y, why, sizeof why) > 0 && strstr(why, "another mixture"));
        dsc_loader_destroy(x);
        dsc_loader_destroy(y);
        options(&o, 0, 1);
        so[1].weight = 0;
        CHECK_EQ_INT(dsc_loader_create(&o, &l), DSC_EINVAL);
        CHECK(dsc_loader_last_error(NULL, why, sizeof why) > 0 && strstr(why, "'code'") &&
              strstr(why, "weight"));
    }
    char cmd[320];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", root);
    return TEST_DONE();
}
