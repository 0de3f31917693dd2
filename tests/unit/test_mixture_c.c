/* The C mixture (client/lib/loader/mixture.c) over three token datasets written by dsc_writer_* and
 * read from their files (no server): shares within one sample of the weights after every
 * sample and the same composition on every rank; each source's samples exactly once per
 * source-epoch over 2 ranks, values equal to the written ones; a state saved at several steps
 * resumes byte for byte, also onto another world size (each source's first source-epoch exactly
 * once over the old and the new ranks); repeat (2.0, 0.5) and exhausted "stop"; every bad input
 * gets its code and a log line naming the culprit. */
#include "testlib.h"

#include "dscache.h"

#include <math.h>
#include <unistd.h>

#define B 10
static const char *names[3] = {"web", "code", "books"};
static const uint64_t sizes[3] = {240, 120, 40};
static const double weights[3] = {0.55, 0.3, 0.15};
static char root[256], dirs[4][300];
static char last_log[1024];
static uint64_t g_epochs;              /* dsc_loader_options_t.epochs of the next make() */
static double g_repeat[3] = {1, 1, 1}; /* dsc_source_options_t.repeat of the next make() */
static int g_exhausted;                /* dsc_loader_options_t.exhausted of the next make() */

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

static void write_ds(int k, const char *fields, int extra) {
    dsc_writer_options_t wo;
    REQUIRE(dsc_writer_options_init(&wo, sizeof wo) == 0);
    wo.path = dirs[k];
    wo.name = k < 3 ? names[k] : "odd";
    wo.fields = fields;
    wo.chunk_bytes = 1024;
    wo.threads = 1;
    dsc_writer_t *w = NULL;
    REQUIRE(dsc_writer_create(&wo, &w) == 0);
    uint64_t n = k < 3 ? sizes[k] : 10;
    for (uint64_t i = 0; i < n; i++) {
        int32_t buf[32];
        int64_t big[32];
        for (uint64_t t = 0; t < doc_len(i); t++)
            buf[t] = token(k, i, t), big[t] = (int64_t)t;
        int64_t id = (int64_t)(k * 100000 + (int)i), lang = (int64_t)(i % 3);
        dsc_writer_value_t v[3] = {
            {k < 3 ? (void *)buf : (void *)big, doc_len(i) * (k < 3 ? 4 : 8)},
            {&id, 8},
            {&lang, 8}};
        REQUIRE(dsc_writer_add(w, v, extra ? 3 : 2) == 0);
    }
    dsc_writer_stats_t ws;
    ws.struct_size = sizeof ws;
    REQUIRE(dsc_writer_finish(w, &ws) == 0);
}

static int make(uint32_t rank, uint32_t world, const double *w, const char *const *fields,
                uint32_t nfields, int odd, dsc_mixture_t **out) {
    dsc_loader_options_t o;
    REQUIRE(DSC_LOADER_OPTIONS_INIT(&o) == 0);
    o.batch_size = B;
    o.seed = 9;
    o.rank = rank, o.world_size = world;
    o.ignore_rank_env = 1;
    o.shuffle_window = 16;
    o.epochs = g_epochs;
    o.exhausted = g_exhausted;
    o.log_fn = on_log;
    o.log_level = DSC_LOG_WARN;
    dsc_source_options_t so[3];
    for (int k = 0; k < 3; k++) {
        REQUIRE(dsc_source_options_init(&so[k], sizeof so[k]) == 0);
        so[k].dataset = names[k];
        so[k].fallback_path = dirs[k];
        so[k].weight = w[k];
        so[k].repeat = g_repeat[k];
    }
    if (odd) {
        so[1].dataset = "odd";
        so[1].fallback_path = dirs[3];
    }
    last_log[0] = '\0';
    return dsc_mixture_create(&o, so, 3, fields, nfields, out);
}

static const char *const need[2] = {"tokens", "id"};

/* One step's (source, index) pairs, checking the values. */
static int step(dsc_mixture_t *m, int32_t *src, uint64_t *idx, uint64_t *ep) {
    dsc_mixture_batch_t b;
    b.struct_size = sizeof b;
    int rc = dsc_mixture_next(m, &b);
    if (rc < 0)
        return rc;
    dsc_field_view_t tv, iv;
    tv.struct_size = iv.struct_size = sizeof tv;
    REQUIRE(dsc_mixture_field_view(m, 0, &tv) == 0 && dsc_mixture_field_view(m, 1, &iv) == 0);
    CHECK_EQ_INT(tv.kind, DSC_FIELD_VALUES);
    CHECK_EQ_INT(iv.kind, DSC_FIELD_FIXED);
    const int32_t *tok = tv.values.data;
    const int64_t *id = iv.values.data;
    int ok = 1;
    for (uint32_t i = 0; i < b.samples; i++) {
        int k = b.source[i];
        uint64_t n = b.indices[i];
        ok = ok && id[i] == (int64_t)(k * 100000 + (int)n);
        ok = ok && tv.offsets[i + 1] - tv.offsets[i] == (int64_t)doc_len(n);
        for (int64_t t = tv.offsets[i]; ok && t < tv.offsets[i + 1]; t++)
            ok = tok[t] == token(k, n, (uint64_t)(t - tv.offsets[i]));
        src[i] = k, idx[i] = n, ep[i] = b.source_epoch[i];
    }
    CHECK(ok);
    return 0;
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/dsc-mixture-c-%d", (int)getpid());
    for (int k = 0; k < 4; k++)
        snprintf(dirs[k], sizeof dirs[k], "%s/%s", root, k < 3 ? names[k] : "odd");
    write_ds(0, "tokens:i32[],id:i64", 0);
    write_ds(1, "tokens:i32[],id:i64,lang:i64", 1); /* a field the others lack */
    write_ds(2, "tokens:i32[],id:i64", 0);
    write_ds(3, "tokens:i64[],id:i64", 0);

    /* Two ranks, 60 steps: shares, same composition, exactly once per source-epoch. */
    enum { STEPS = 60 };
    static int32_t src[2][STEPS][B];
    static uint64_t idx[2][STEPS][B], ep[2][STEPS][B];
    for (uint32_t r = 0; r < 2; r++) {
        dsc_mixture_t *m = NULL;
        REQUIRE(make(r, 2, weights, need, 2, 0, &m) == 0);
        for (int s = 0; s < STEPS; s++)
            REQUIRE(step(m, src[r][s], idx[r][s], ep[r][s]) == 0);
        uint64_t samples = 0;
        dsc_stats_t st;
        st.struct_size = sizeof st;
        CHECK_EQ_INT(dsc_mixture_source_stats(m, 2, &samples, &st), 0);
        CHECK(samples > 0 && st.samples > 0);
        CHECK_EQ_INT(dsc_mixture_source_stats(m, 3, &samples, &st), DSC_ERANGE);
        dsc_mixture_destroy(m);
    }
    CHECK(memcmp(src[0], src[1], sizeof src[0]) == 0);
    uint64_t count[3] = {0, 0, 0};
    int within = 1;
    for (int s = 0; s < STEPS; s++)
        for (int i = 0; i < B; i++) {
            count[src[0][s][i]]++;
            double n = (double)(s * B + i + 1);
            for (int k = 0; k < 3; k++)
                within = within && fabs((double)count[k] - n * weights[k]) < 1.0;
        }
    CHECK(within);
    for (int k = 0; k < 3; k++) {
        static uint32_t seen[240];
        memset(seen, 0, sizeof seen);
        for (int r = 0; r < 2; r++)
            for (int s = 0; s < STEPS; s++)
                for (int i = 0; i < B; i++)
                    if (src[r][s][i] == k && ep[r][s][i] == 0)
                        seen[idx[r][s][i]]++;
        int once = 1;
        for (uint64_t i = 0; i < sizes[k]; i++)
            once = once && seen[i] == 1;
        if (!once)
            fprintf(stderr, "source %s: not exactly once in its first epoch\n", names[k]);
        CHECK(once);
    }

    /* Resume at several steps (rank 1 of 2): byte for byte. */
    for (int stop = 1; stop < 40; stop += 7) {
        dsc_mixture_t *a = NULL, *b = NULL;
        REQUIRE(make(1, 2, weights, need, 2, 0, &a) == 0);
        int32_t s1[B];
        uint64_t i1[B], e1[B];
        for (int s = 0; s < stop; s++)
            REQUIRE(step(a, s1, i1, e1) == 0);
        uint8_t state[4096];
        int n = dsc_mixture_state_save(a, state, sizeof state);
        REQUIRE(n > 0 && n <= (int)sizeof state);
        dsc_mixture_destroy(a);
        REQUIRE(make(1, 2, weights, need, 2, 0, &b) == 0);
        CHECK_EQ_INT(dsc_mixture_state_load(b, state, (size_t)n), 0);
        int same = 1;
        for (int s = stop; s < stop + 15; s++) {
            REQUIRE(step(b, s1, i1, e1) == 0);
            same = same && memcmp(s1, src[1][s], sizeof s1) == 0 &&
                   memcmp(i1, idx[1][s], sizeof i1) == 0;
        }
        if (!same)
            fprintf(stderr, "resume at step %d differs\n", stop);
        CHECK(same);
        dsc_mixture_destroy(b);
        /* Another mixture's state (other weights) is refused. */
        double other[3] = {0.5, 0.3, 0.2};
        REQUIRE(make(1, 2, other, need, 2, 0, &b) == 0);
        CHECK_EQ_INT(dsc_mixture_state_load(b, state, (size_t)n), DSC_EBADSTATE);
        CHECK(strstr(last_log, "another mixture") != NULL);
        state[n - 1] ^= 1;
        CHECK_EQ_INT(dsc_mixture_state_load(b, state, (size_t)n), DSC_EBADSTATE);
        dsc_mixture_destroy(b);
    }

    /* epochs 1: the mixture ends (DSC_EOF) when a source has no epoch left; books (40 samples,
     * 1.5 a step) runs out first. */
    {
        g_epochs = 1;
        dsc_mixture_t *e = NULL;
        REQUIRE(make(0, 1, weights, need, 2, 0, &e) == 0);
        int32_t s1[B];
        uint64_t i1[B], e1[B];
        int steps = 0, rc;
        while ((rc = step(e, s1, i1, e1)) == 0 && steps < 1000)
            steps++;
        CHECK_EQ_INT(rc, DSC_EOF);
        CHECK(steps >= 26 && steps <= 28);
        dsc_mixture_destroy(e);
        g_epochs = 0;
    }

    /* Stop on 2 ranks, resume on 3 and on 1: each source's first source-epoch exactly once
     * over the old ranks' batches and the new ranks' (but for the loader's padding of a new
     * segment to a multiple of the world size: at most new_world - 1 repeats). */
    for (uint32_t nw = 1; nw <= 3; nw += 2) {
        int stop = nw == 1 ? 7 : 13;
        static uint32_t seen[3][240];
        memset(seen, 0, sizeof seen);
        int32_t s1[B];
        uint64_t i1[B], e1[B];
        uint8_t state[4096];
        int n = 0;
        for (int s = 0; s < stop; s++)
            for (int r = 0; r < 2; r++)
                for (int i = 0; i < B; i++)
                    if (ep[r][s][i] == 0)
                        seen[src[r][s][i]][idx[r][s][i]]++;
        {
            dsc_mixture_t *a = NULL;
            REQUIRE(make(0, 2, weights, need, 2, 0, &a) == 0);
            for (int s = 0; s < stop; s++)
                REQUIRE(step(a, s1, i1, e1) == 0);
            n = dsc_mixture_state_save(a, state, sizeof state);
            REQUIRE(n > 0 && n <= (int)sizeof state);
            dsc_mixture_destroy(a);
        }
        for (uint32_t r = 0; r < nw; r++) {
            dsc_mixture_t *b = NULL;
            REQUIRE(make(r, nw, weights, need, 2, 0, &b) == 0);
            int rc = dsc_mixture_state_load(b, state, (size_t)n);
            CHECK_EQ_INT(rc, 0);
            if (rc != 0)
                fprintf(stderr, "state_load onto %u ranks: %s\n", nw, last_log);
            for (int s = 0; rc == 0 && s < 60 / (int)nw + 4; s++) {
                REQUIRE(step(b, s1, i1, e1) == 0);
                for (int i = 0; i < B; i++)
                    if (e1[i] == 0)
                        seen[s1[i]][i1[i]]++;
            }
            dsc_mixture_destroy(b);
        }
        for (int k = 0; k < 3; k++) {
            uint64_t missing = 0, dup = 0;
            for (uint64_t i = 0; i < sizes[k]; i++)
                missing += seen[k][i] == 0, dup += seen[k][i] > 1 ? seen[k][i] - 1 : 0;
            if (missing || dup > nw - 1)
                fprintf(stderr, "2 -> %u ranks at step %d, %s: %llu missing, %llu repeats\n", nw,
                        stop, names[k], (unsigned long long)missing, (unsigned long long)dup);
            CHECK(missing == 0 && dup <= nw - 1);
        }
    }

    /* repeat: books 2.0 (each sample twice per source-epoch over 2 ranks), code 0.5 (each
     * rank's first round(0.5 * 60) = 30 of its pass: 60 samples once); a resume inside the part
     * pass continues byte for byte. */
    {
        g_repeat[1] = 0.5, g_repeat[2] = 2.0;
        static uint32_t books[40], code[120];
        memset(books, 0, sizeof books);
        memset(code, 0, sizeof code);
        for (uint32_t r = 0; r < 2; r++) {
            dsc_mixture_t *a = NULL, *b = NULL;
            REQUIRE(make(r, 2, weights, need, 2, 0, &a) == 0);
            int32_t s1[B], s2[B];
            uint64_t i1[B], e1[B], i2[B], e2[B];
            uint8_t state[4096];
            int n = 0, same = 1;
            for (int s = 0; s < 90; s++) {
                if (s == 37) {
                    n = dsc_mixture_state_save(a, state, sizeof state);
                    REQUIRE(make(r, 2, weights, need, 2, 0, &b) == 0);
                    REQUIRE(dsc_mixture_state_load(b, state, (size_t)n) == 0);
                }
                REQUIRE(step(a, s1, i1, e1) == 0);
                if (b != NULL) {
                    REQUIRE(step(b, s2, i2, e2) == 0);
                    same = same && memcmp(s1, s2, sizeof s1) == 0 &&
                           memcmp(i1, i2, sizeof i1) == 0 && memcmp(e1, e2, sizeof e1) == 0;
                }
                for (int i = 0; i < B; i++) {
                    if (s1[i] == 2 && e1[i] == 0)
                        books[i1[i]]++;
                    if (s1[i] == 1 && e1[i] == 0)
                        code[i1[i]]++;
                }
            }
            CHECK(same);
            dsc_mixture_destroy(a);
            dsc_mixture_destroy(b);
        }
        int twice = 1;
        for (int i = 0; i < 40; i++)
            twice = twice && books[i] == 2;
        uint64_t half = 0, more = 0;
        for (int i = 0; i < 120; i++)
            half += code[i] == 1, more += code[i] > 1;
        if (!twice || half != 60 || more)
            fprintf(stderr, "repeat: books twice %d, code %llu once, %llu more\n", twice,
                    (unsigned long long)half, (unsigned long long)more);
        CHECK(twice && half == 60 && more == 0);
        g_repeat[1] = g_repeat[2] = 1;
    }

    /* exhausted stop: the epoch ends with books (40 samples, 1.5 a step): a short last batch or
     * none, then DSC_EOF, then the next epoch. */
    {
        g_exhausted = DSC_EXHAUSTED_STOP;
        dsc_mixture_t *e = NULL;
        REQUIRE(make(0, 1, weights, need, 2, 0, &e) == 0);
        int32_t s1[B];
        uint64_t i1[B], e1[B], nbooks = 0;
        int steps = 0, rc;
        while ((rc = step(e, s1, i1, e1)) == 0 && steps < 1000) {
            steps++;
            for (int i = 0; i < B; i++)
                nbooks += s1[i] == 2;
        }
        CHECK_EQ_INT(rc, DSC_EOF);
        CHECK(nbooks == 40 && steps >= 26 && steps <= 28);
        dsc_mixture_info_t info;
        info.struct_size = sizeof info;
        REQUIRE(dsc_mixture_info(e, &info) == 0);
        CHECK(info.epoch == 1 && info.step == 0 && info.sources == 3);
        CHECK(info.starving_source >= -1 && info.starving_source < 3);
        CHECK_EQ_INT(step(e, s1, i1, e1), 0);
        dsc_mixture_destroy(e);
        g_exhausted = DSC_EXHAUSTED_WRAP;
    }

    /* Packed (rows of 16 tokens, 10 rows a batch): unpacking by (source, segment_index,
     * segment_start) rebuilds every document of each source's first source-epoch once, in
     * order; a resume continues byte for byte; another world size is refused. */
    {
        dsc_loader_options_t o;
        REQUIRE(DSC_LOADER_OPTIONS_INIT(&o) == 0);
        o.batch_size = B, o.seed = 9, o.ignore_rank_env = 1, o.shuffle_window = 16;
        o.log_fn = on_log, o.log_level = DSC_LOG_WARN;
        dsc_source_options_t so[3];
        for (int k = 0; k < 3; k++) {
            REQUIRE(dsc_source_options_init(&so[k], sizeof so[k]) == 0);
            so[k].dataset = names[k], so[k].fallback_path = dirs[k], so[k].weight = weights[k];
        }
        dsc_pack_options_t po;
        REQUIRE(dsc_pack_options_init(&po, sizeof po) == 0);
        po.field = "tokens", po.length = 16;
        static uint64_t have[3][240]; /* tokens of each document rebuilt so far */
        memset(have, 0, sizeof have);
        dsc_mixture_t *a = NULL, *b = NULL;
        REQUIRE(dsc_mixture_create_packed(&o, so, 3, &po, &a) == 0);
        int ok = 1, same = 1;
        uint8_t state[4096];
        for (int s = 0; s < 70; s++) {
            if (s == 23) {
                int n = dsc_mixture_state_save(a, state, sizeof state);
                REQUIRE(n > 0 && n <= (int)sizeof state);
                REQUIRE(dsc_mixture_create_packed(&o, so, 3, &po, &b) == 0);
                CHECK_EQ_INT(dsc_mixture_state_load(b, state, (size_t)n), 0);
                dsc_mixture_t *w = NULL;
                o.world_size = 2;
                REQUIRE(dsc_mixture_create_packed(&o, so, 3, &po, &w) == 0);
                CHECK_EQ_INT(dsc_mixture_state_load(w, state, (size_t)n), DSC_EBADSTATE);
                CHECK(strstr(last_log, "packed") != NULL);
                CHECK(strstr(last_log, "saved on 1 ranks resumes on 2") != NULL);
                CHECK(strstr(last_log, "dsc_mixture_state_load_world") != NULL);
                /* From every old rank's state (here the one): resumes, and composes on. */
                const void *states[2] = {state, state};
                size_t lens[2] = {(size_t)n, (size_t)n};
                CHECK_EQ_INT(dsc_mixture_state_load_world(w, NULL, lens, 1), DSC_EINVAL);
                CHECK_EQ_INT(dsc_mixture_state_load_world(w, states, lens, 0), DSC_EINVAL);
                /* Two "old ranks" that are both the one rank of 1: on 2 ranks each takes its
                 * own, which was saved on 1: refused. */
                CHECK_EQ_INT(dsc_mixture_state_load_world(w, states, lens, 2), DSC_EBADSTATE);
                CHECK(strstr(last_log, "saved on 1 ranks") != NULL);
                CHECK_EQ_INT(dsc_mixture_state_load_world(w, states, lens, 1), 0);
                dsc_mixture_batch_t wb;
                wb.struct_size = sizeof wb;
                CHECK_EQ_INT(dsc_mixture_next(w, &wb), 0);
                dsc_mixture_destroy(w);
                o.world_size = 1;
            }
            dsc_mixture_batch_t mb, mb2;
            mb.struct_size = mb2.struct_size = sizeof mb;
            REQUIRE(dsc_mixture_next(a, &mb) == 0);
            dsc_packed_batch_t pb, pb2;
            pb.struct_size = pb2.struct_size = sizeof pb;
            REQUIRE(dsc_mixture_packed(a, &pb) == 0);
            CHECK(pb.rows == B && pb.length == 16 && pb.cu_seqlens[pb.segments] == B * 16);
            if (b != NULL) {
                REQUIRE(dsc_mixture_next(b, &mb2) == 0);
                REQUIRE(dsc_mixture_packed(b, &pb2) == 0);
                same = same && pb.segments == pb2.segments &&
                       memcmp(pb.tokens, pb2.tokens, (size_t)B * 16 * 4) == 0 &&
                       memcmp(pb.segment_index, pb2.segment_index, pb.segments * 8) == 0 &&
                       memcmp(mb.source, mb2.source, B * 4) == 0;
            }
            const int32_t *tok = pb.tokens;
            for (uint32_t g = 0; g < pb.segments; g++) {
                int64_t d = pb.segment_index[g];
                uint32_t row = (uint32_t)pb.cu_seqlens[g] / 16;
                int k = mb.source[row];
                if (d < 0 || mb.source_epoch[row] != 0)
                    continue;
                ok = ok && (uint64_t)pb.segment_start[g] == have[k][d];
                for (int32_t t = pb.cu_seqlens[g]; t < pb.cu_seqlens[g + 1]; t++) {
                    ok = ok && tok[t] == token(k, (uint64_t)d, have[k][d]) &&
                         pb.document_ids[t] == (int32_t)g;
                    have[k][d]++;
                }
            }
        }
        for (int k = 0; k < 3; k++)
            for (uint64_t i = 0; i < sizes[k]; i++)
                ok = ok && have[k][i] == doc_len(i);
        CHECK(ok);
        CHECK(same);
        dsc_field_view_t fv;
        fv.struct_size = sizeof fv;
        CHECK_EQ_INT(dsc_mixture_field_view(a, 0, &fv), DSC_EINVAL);
        dsc_mixture_destroy(a);
        dsc_mixture_destroy(b);
        g_repeat[2] = 1.5; /* a fractional repeat with packing: refused */
        so[2].repeat = 1.5;
        CHECK_EQ_INT(dsc_mixture_create_packed(&o, so, 3, &po, &a), DSC_EINVAL);
        CHECK(strstr(last_log, "'books'") != NULL && strstr(last_log, "fractional") != NULL);
        g_repeat[2] = 1;
        so[2].repeat = 1;
        po.length = 0; /* pack length under 1: the packer's refusal, naming the source */
        CHECK_EQ_INT(dsc_mixture_create_packed(&o, so, 3, &po, &a), DSC_EINVAL);
        CHECK(strstr(last_log, "'web'") != NULL);
    }

    /* Bad input. */
    dsc_mixture_t *m = NULL;
    double zero[3] = {0.6, 0.0, 0.4}, neg[3] = {0.6, 0.3, -1}, nan3[3] = {NAN, 1, 1};
    CHECK_EQ_INT(make(0, 1, zero, need, 2, 0, &m), DSC_EINVAL);
    CHECK(strstr(last_log, "'code'") != NULL && strstr(last_log, "weight") != NULL);
    CHECK_EQ_INT(make(0, 1, neg, need, 2, 0, &m), DSC_EINVAL);
    CHECK(strstr(last_log, "'books'") != NULL);
    CHECK_EQ_INT(make(0, 1, nan3, need, 2, 0, &m), DSC_EINVAL);
    const char *const lang[1] = {"lang"};
    CHECK_EQ_INT(make(0, 1, weights, lang, 1, 0, &m), DSC_EINVAL);
    CHECK(strstr(last_log, "source 'web' has no field 'lang'") != NULL);
    CHECK_EQ_INT(make(0, 1, weights, need, 2, 1, &m), DSC_EINVAL);
    CHECK(strstr(last_log, "'tokens'") && strstr(last_log, "'odd'") && strstr(last_log, "i64") &&
          strstr(last_log, "i32"));
    CHECK(m == NULL);
    dsc_loader_options_t o;
    REQUIRE(DSC_LOADER_OPTIONS_INIT(&o) == 0);
    o.log_fn = on_log;
    CHECK_EQ_INT(dsc_mixture_create(&o, NULL, 0, NULL, 0, &m), DSC_EINVAL);
    dsc_source_options_t so;
    REQUIRE(dsc_source_options_init(&so, sizeof so) == 0);
    so.dataset = "nosuch";
    so.fallback_path = "/nonexistent/dscache-nosuch";
    CHECK(dsc_mixture_create(&o, &so, 1, NULL, 0, &m) < 0);
    CHECK(strstr(last_log, "source 'nosuch'") != NULL);
    char why[512];
    CHECK(dsc_mixture_last_error(NULL, why, sizeof why) > 0 && strstr(why, "'nosuch'") != NULL);
    g_repeat[0] = -1;
    CHECK_EQ_INT(make(0, 1, weights, need, 2, 0, &m), DSC_EINVAL);
    CHECK(strstr(last_log, "'web'") != NULL && strstr(last_log, "repeat") != NULL);
    g_repeat[0] = 1;
    g_exhausted = 7;
    CHECK_EQ_INT(make(0, 1, weights, need, 2, 0, &m), DSC_EINVAL);
    CHECK(strstr(last_log, "exhausted") != NULL);
    g_exhausted = 0;
    /* The sources in the options themselves (dsc_loader_options_t.sources / n_sources). */
    {
        dsc_source_options_t two[2];
        for (int k = 0; k < 2; k++) {
            REQUIRE(dsc_source_options_init(&two[k], sizeof two[k]) == 0);
            two[k].dataset = names[k], two[k].fallback_path = dirs[k], two[k].weight = 1;
        }
        dsc_loader_options_t lo;
        REQUIRE(DSC_LOADER_OPTIONS_INIT(&lo) == 0);
        lo.batch_size = 4, lo.ignore_rank_env = 1, lo.log_fn = on_log;
        lo.sources = two, lo.n_sources = 2;
        REQUIRE(dsc_mixture_create(&lo, NULL, 0, need, 2, &m) == 0);
        dsc_mixture_batch_t mb;
        mb.struct_size = sizeof mb;
        CHECK_EQ_INT(dsc_mixture_next(m, &mb), 0);
        CHECK(mb.samples == 4 && mb.source[0] == 0 && mb.source[1] == 1);
        dsc_mixture_destroy(m);
        m = NULL;
    }
    /* A loader over sources that do not exist: its create error names the source. */
    {
        dsc_loader_options_t lo;
        REQUIRE(DSC_LOADER_OPTIONS_INIT(&lo) == 0);
        lo.dataset = "web";
        lo.fallback_path = dirs[0];
        lo.sources = &so, lo.n_sources = 1;
        dsc_loader_t *l = NULL;
        CHECK(dsc_loader_create(&lo, &l) < 0);
        CHECK(dsc_loader_last_error(NULL, why, sizeof why) > 0 && strstr(why, "'nosuch'") != NULL);
        /* A single loader's state into a mixture: refused. */
        lo.sources = NULL, lo.n_sources = 0;
        REQUIRE(dsc_loader_create(&lo, &l) == 0);
        uint8_t st[DSC_STATE_MAX_BYTES];
        int n = dsc_loader_state_save(l, st, sizeof st);
        REQUIRE(n > 0);
        REQUIRE(make(0, 1, weights, need, 2, 0, &m) == 0);
        CHECK_EQ_INT(dsc_mixture_state_load(m, st, (size_t)n), DSC_EBADSTATE);
        CHECK(strstr(last_log, "not a mixture state") != NULL);
        dsc_mixture_destroy(m);
        m = NULL;
        dsc_loader_destroy(l);
    }
    dsc_mixture_destroy(NULL);
    char cmd[320];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", root);
    return TEST_DONE();
}
