/* Variable-length fields through the loader (driven by tests/integration/test_loader_var.sh and
 * tests/python/test_loader_var.py): writes a format-version-2 dataset whose every value is a
 * function of its sample index (tok i32[], mel f32[?,80], img u8[3,4,4], label i64), then checks
 * that batches from a real server (or the fallback files) hold exactly those bytes, as values +
 * offsets and padded, each sample once per epoch at 2 ranks, across a resume, and that a batch
 * over its budget fails with an error naming the dataset, the sample and the option.
 * usage: loader_var_check gen DIR NAME SAMPLES CODEC(raw|lz4) [bad]
 *        loader_var_check write DIR NAME SAMPLES lz4|none   (the same through dsc_writer_*)
 *        loader_var_check check --dataset NAME [--servers S] [--fallback DIR] [--samples N]
 *                               [--expect-rdma 1] */
#include "dscache.h"
#include "manifest.h"
#include "manifest_io.h"
#include "shard.h"
#include "wire.h"

#include "testlib.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_SAMPLES 7
#define SHARD_SAMPLES 63 /* 9 chunks per shard */
#define MEL_COLS 80

/* ---- The dataset: every value a function of the sample index ------------------------------ */

static uint64_t tok_rows(uint64_t i) {
    return (i * 7) % 13; /* 0 .. 12, empty samples included */
}
static int32_t tok_at(uint64_t i, uint64_t j) {
    return (int32_t)(i * 1000 + j);
}
static uint64_t mel_rows(uint64_t i) {
    return i % 5;
}
static float mel_at(uint64_t i, uint64_t r, uint64_t c) {
    return (float)i + (float)r * 0.5f + (float)c * 0.001f;
}
static uint8_t img_at(uint64_t i, uint64_t b) {
    return (uint8_t)(i * 3 + b);
}
static int64_t label_at(uint64_t i) {
    return (int64_t)i * 11 - 5;
}

enum { F_TOK, F_MEL, F_IMG, F_LABEL, F_COUNT };

static void schema_init(dsc_schema_t *s) {
    memset(s, 0, sizeof *s);
    s->field_count = F_COUNT;
    snprintf(s->fields[F_TOK].name, DSC_MAX_NAME, "tok");
    s->fields[F_TOK].dtype = DSC_DTYPE_I32;
    s->fields[F_TOK].ndim = 1;
    s->fields[F_TOK].shape[0] = DSC_DIM_VARIABLE;
    snprintf(s->fields[F_MEL].name, DSC_MAX_NAME, "mel");
    s->fields[F_MEL].dtype = DSC_DTYPE_F32;
    s->fields[F_MEL].ndim = 2;
    s->fields[F_MEL].shape[0] = DSC_DIM_VARIABLE;
    s->fields[F_MEL].shape[1] = MEL_COLS;
    snprintf(s->fields[F_IMG].name, DSC_MAX_NAME, "img");
    s->fields[F_IMG].dtype = DSC_DTYPE_U8;
    s->fields[F_IMG].ndim = 3;
    s->fields[F_IMG].shape[0] = 3;
    s->fields[F_IMG].shape[1] = 4;
    s->fields[F_IMG].shape[2] = 4;
    snprintf(s->fields[F_LABEL].name, DSC_MAX_NAME, "label");
    s->fields[F_LABEL].dtype = DSC_DTYPE_I64;
    s->fields[F_LABEL].ndim = 0;
    REQUIRE(dsc_schema_finish(s) == 0);
}

/* The decoded chunk of samples [first, first + n): fixed fields field-major, then per variable
 * field (n + 1) u64 row offsets and the rows (proto/FORMAT.md, version 2). */
static size_t chunk_build(uint64_t first, uint32_t n, uint8_t *out) {
    size_t at = 0;
    for (uint32_t k = 0; k < n; k++)
        for (uint32_t b = 0; b < 48; b++)
            out[at++] = img_at(first + k, b);
    for (uint32_t k = 0; k < n; k++) {
        int64_t v = label_at(first + k);
        memcpy(out + at, &v, 8);
        at += 8;
    }
    uint64_t rows = 0;
    for (uint32_t k = 0; k <= n; k++) {
        dsc_store_u64(out + at, rows);
        at += 8;
        if (k < n)
            rows += tok_rows(first + k);
    }
    for (uint32_t k = 0; k < n; k++)
        for (uint64_t j = 0; j < tok_rows(first + k); j++) {
            int32_t v = tok_at(first + k, j);
            memcpy(out + at, &v, 4);
            at += 4;
        }
    rows = 0;
    for (uint32_t k = 0; k <= n; k++) {
        dsc_store_u64(out + at, rows);
        at += 8;
        if (k < n)
            rows += mel_rows(first + k);
    }
    for (uint32_t k = 0; k < n; k++)
        for (uint64_t r = 0; r < mel_rows(first + k); r++)
            for (uint32_t c = 0; c < MEL_COLS; c++) {
                float v = mel_at(first + k, r, c);
                memcpy(out + at, &v, 4);
                at += 4;
            }
    return at;
}

/* gen ... bad: chunk 1 of shard 0 is written with its tok offsets out of order (checksums
 * computed over the bad bytes, so only the layout check can tell). */
static int bad_layout;

static int gen(const char *dir, const char *name, uint64_t samples, int codec) {
    char path[4096];
    snprintf(path, sizeof path, "mkdir -p '%s'", dir);
    REQUIRE(system(path) == 0);
    uint32_t shards = (uint32_t)((samples + SHARD_SAMPLES - 1) / SHARD_SAMPLES);
    dsc_manifest_t *m = dsc_manifest_alloc(shards);
    REQUIRE(m != NULL);
    snprintf(m->name, DSC_MAX_NAME, "%s", name);
    schema_init(&m->schema);
    size_t cap = 1 << 20;
    uint8_t *raw = malloc(cap), *enc = malloc(dsc_chunk_encode_bound(cap)), *file = malloc(4 << 20);
    REQUIRE(raw && enc && file);
    uint64_t tok_max = 0, mel_max = 0, tok_total = 0, mel_total = 0;
    for (uint64_t i = 0; i < samples; i++) {
        tok_total += tok_rows(i);
        mel_total += mel_rows(i);
        tok_max = tok_rows(i) > tok_max ? tok_rows(i) : tok_max;
        mel_max = mel_rows(i) > mel_max ? mel_rows(i) : mel_max;
    }
    m->field_stats[F_TOK] = (dsc_manifest_field_stats_t){tok_total, tok_max, tok_max * 4,
                                                         (double)tok_total * 4 / (double)samples};
    m->field_stats[F_MEL] = (dsc_manifest_field_stats_t){mel_total, mel_max, mel_max * 4 * MEL_COLS,
                                                         (double)mel_total * 320 / (double)samples};
    for (uint32_t s = 0; s < shards; s++) {
        uint64_t first = (uint64_t)s * SHARD_SAMPLES;
        uint64_t count = samples - first < SHARD_SAMPLES ? samples - first : SHARD_SAMPLES;
        dsc_shard_header_t h;
        memset(&h, 0, sizeof h);
        h.shard_id = s;
        h.sample_count = count;
        h.chunk_samples = CHUNK_SAMPLES;
        snprintf(h.dataset, DSC_MAX_NAME, "%s", name);
        h.schema = m->schema;
        int hl = dsc_shard_header_encode(&h, file, 4 << 20);
        REQUIRE(hl > 0);
        size_t at = (size_t)hl;
        uint8_t index[DSC_CHUNK_ENTRY_SIZE * 16];
        uint32_t chunks = 0;
        for (uint64_t c = 0; c < count; c += CHUNK_SAMPLES, chunks++) {
            uint32_t n = (uint32_t)(count - c < CHUNK_SAMPLES ? count - c : CHUNK_SAMPLES);
            size_t raw_len = chunk_build(first + c, n, raw);
            if (bad_layout && s == 0 && chunks == 1) {
                /* tok's offsets follow the fixed part (48 + 8 bytes a sample): offsets[1] =
                 * offsets[n] > offsets[2]. */
                uint8_t *tok_off = raw + (size_t)n * 56;
                REQUIRE(dsc_load_u64(tok_off + 16) < dsc_load_u64(tok_off + (size_t)n * 8));
                memcpy(tok_off + 8, tok_off + (size_t)n * 8, 8);
            }
            dsc_chunk_entry_t e;
            memset(&e, 0, sizeof e);
            const void *stored = NULL;
            REQUIRE(dsc_chunk_encode(codec, 0, raw, raw_len, enc, dsc_chunk_encode_bound(cap), &e,
                                     &stored) == 0);
            e.offset = at;
            e.first_sample = c;
            e.sample_count = n;
            memcpy(file + at, stored, e.stored_len);
            at += e.stored_len;
            dsc_chunk_entry_encode(&e, index + chunks * DSC_CHUNK_ENTRY_SIZE);
        }
        dsc_shard_footer_t footer = {.index_offset = at, .chunk_count = chunks};
        footer.index_checksum = dsc_checksum(index, (size_t)chunks * DSC_CHUNK_ENTRY_SIZE);
        memcpy(file + at, index, (size_t)chunks * DSC_CHUNK_ENTRY_SIZE);
        at += (size_t)chunks * DSC_CHUNK_ENTRY_SIZE;
        dsc_shard_footer_encode(&footer, file + at);
        at += DSC_SHARD_FOOTER_SIZE;
        dsc_manifest_shard_t *ms = &m->shards[s];
        ms->id = s;
        snprintf(ms->file, sizeof ms->file, "shard-%05u.dsc", s);
        ms->samples = count;
        ms->bytes = at;
        ms->chunks = chunks;
        ms->chunk_samples = CHUNK_SAMPLES;
        ms->checksum = dsc_checksum(file, at);
        snprintf(path, sizeof path, "%s/%s", dir, ms->file);
        FILE *fp = fopen(path, "wb");
        REQUIRE(fp != NULL && fwrite(file, 1, at, fp) == at && fclose(fp) == 0);
    }
    dsc_manifest_finish(m);
    int rc = dsc_manifest_save(dir, m);
    if (rc < 0)
        fprintf(stderr, "manifest: %s\n", dsc_strerror(rc));
    REQUIRE(rc == 0);
    dsc_manifest_free(m);
    free(raw);
    free(enc);
    free(file);
    return 0;
}

/* The same dataset through the public writer (dsc_writer_*, field order tok, mel, img, label as
 * the schema above), small chunks and shards so that batches span several of each. */
static int gen_writer(const char *dir, const char *name, uint64_t samples, const char *compress) {
    dsc_writer_options_t o;
    REQUIRE(dsc_writer_options_init(&o, sizeof o) == 0);
    o.path = dir;
    o.name = name;
    o.fields = "tok:i32[],mel:f32[?,80],img:u8[3,4,4],label:i64";
    o.compress = compress;
    o.chunk_bytes = 4096;
    o.shard_bytes = 32768;
    o.threads = 2;
    dsc_writer_t *w = NULL;
    int rc = dsc_writer_create(&o, &w);
    if (rc < 0) {
        char why[512];
        dsc_writer_last_error(NULL, why, sizeof why);
        fprintf(stderr, "writer: %s (%s)\n", dsc_strerror(rc), why);
    }
    REQUIRE(rc == 0);
    int32_t tok[16];
    float mel[8 * MEL_COLS];
    uint8_t img[48];
    for (uint64_t i = 0; i < samples; i++) {
        for (uint64_t j = 0; j < tok_rows(i); j++)
            tok[j] = tok_at(i, j);
        for (uint64_t r = 0; r < mel_rows(i); r++)
            for (uint32_t c = 0; c < MEL_COLS; c++)
                mel[r * MEL_COLS + c] = mel_at(i, r, c);
        for (uint32_t b = 0; b < 48; b++)
            img[b] = img_at(i, b);
        int64_t label = label_at(i);
        dsc_writer_value_t v[F_COUNT] = {
            {tok, tok_rows(i) * 4},
            {mel, mel_rows(i) * 4 * MEL_COLS},
            {img, 48},
            {&label, 8},
        };
        REQUIRE(dsc_writer_add(w, v, F_COUNT) == 0);
    }
    REQUIRE(dsc_writer_finish(w, NULL) == 0);
    return 0;
}

/* ---- Checks --------------------------------------------------------------------------------- */

static const char *servers, *fallback, *dataset;
static uint64_t samples = 200;
static int expect_rdma; /* --expect-rdma 1: chunks arrive by RDMA READ */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char last_error[1024];
static int named_chunk;     /* an ERROR line named the damaged chunk and that no copy is left */
static uint64_t slot_bytes; /* from the create INFO line "... N slots of B bytes" */
static void on_log(void *ctx, int level, const char *message) {
    (void)ctx;
    pthread_mutex_lock(&log_lock);
    if (level == DSC_LOG_ERROR)
        snprintf(last_error, sizeof last_error, "%s", message);
    if (level == DSC_LOG_ERROR && strstr(message, "shard 0 (") != NULL &&
        strstr(message, " chunk 1: ") != NULL && strstr(message, "no other replica") != NULL)
        named_chunk = 1;
    const char *slots = strstr(message, " slots of ");
    if (level == DSC_LOG_INFO && slots != NULL)
        slot_bytes = strtoull(slots + 10, NULL, 10);
    pthread_mutex_unlock(&log_lock);
}

typedef struct mode {
    int pad;
    uint64_t max_len;
    uint64_t tok_budget; /* 0: default */
    double pad_value;
    int in_order; /* shuffle 0: runs of consecutive samples of a chunk */
} mode_t_;

static dsc_loader_t *open_loader(uint32_t rank, uint32_t world, uint32_t batch, const mode_t_ *md,
                                 int expect_rc) {
    dsc_loader_options_t o;
    REQUIRE(DSC_LOADER_OPTIONS_INIT(&o) == 0);
    o.servers = servers;
    o.fallback_path = fallback;
    o.dataset = dataset;
    o.batch_size = batch;
    o.seed = 3;
    o.rank = rank;
    o.world_size = world;
    o.shuffle_window = 40;
    o.shuffle = !md->in_order;
    o.log_fn = on_log;
    o.log_level = DSC_LOG_INFO;
    o.timeout_ms = 2000;
    dsc_field_options_t fo[2];
    REQUIRE(dsc_field_options_init(&fo[0], sizeof fo[0]) == 0);
    REQUIRE(dsc_field_options_init(&fo[1], sizeof fo[1]) == 0);
    fo[0].name = "tok";
    fo[0].pad = md->pad;
    fo[0].pad_value = md->pad_value;
    fo[0].max_len = md->max_len;
    fo[0].max_bytes = md->tok_budget;
    fo[1].name = "mel";
    fo[1].pad = md->pad;
    o.field_options = fo;
    o.field_option_count = 2;
    dsc_loader_t *l = NULL;
    int rc = dsc_loader_create(&o, &l);
    if (rc != expect_rc) {
        char why[1024];
        dsc_loader_last_error(NULL, why, sizeof why);
        fprintf(stderr, "create: %s (%s)\n", dsc_strerror(rc), why);
    }
    REQUIRE(rc == expect_rc);
    return l;
}

/* Checks every field of one batch against the formulas; marks its samples in seen. */
static void check_batch(dsc_batch_t *b, const mode_t_ *md, uint32_t *seen, uint64_t *truncated) {
    uint32_t n = dsc_batch_samples(b);
    const uint64_t *idx = dsc_batch_indices(b);
    dsc_field_view_t v[F_COUNT];
    for (uint32_t f = 0; f < F_COUNT; f++) {
        v[f].struct_size = sizeof v[f];
        REQUIRE(dsc_batch_field_view(b, f, &v[f]) == 0);
    }
    REQUIRE(v[F_IMG].kind == DSC_FIELD_FIXED && v[F_LABEL].kind == DSC_FIELD_FIXED);
    REQUIRE(v[F_IMG].values.shape[0] == n && v[F_IMG].values.ndim == 4);
    for (uint32_t k = 0; k < n; k++) {
        uint64_t i = idx[k];
        REQUIRE(i < samples);
        seen[i]++;
        const uint8_t *img = (const uint8_t *)v[F_IMG].values.data + (size_t)k * 48;
        for (uint32_t c = 0; c < 48; c++)
            REQUIRE(img[c] == img_at(i, c));
        REQUIRE(((const int64_t *)v[F_LABEL].values.data)[k] == label_at(i));
    }
    if (!md->pad) {
        REQUIRE(v[F_TOK].kind == DSC_FIELD_VALUES && v[F_MEL].kind == DSC_FIELD_VALUES);
        const int64_t *to = v[F_TOK].offsets, *mo = v[F_MEL].offsets;
        REQUIRE(to != NULL && mo != NULL && to[0] == 0 && mo[0] == 0);
        REQUIRE(v[F_TOK].values.ndim == 1 && v[F_TOK].values.shape[0] == to[n]);
        REQUIRE(v[F_MEL].values.ndim == 2 && v[F_MEL].values.shape[0] == mo[n] &&
                v[F_MEL].values.shape[1] == MEL_COLS);
        const int32_t *tok = v[F_TOK].values.data;
        const float *mel = v[F_MEL].values.data;
        for (uint32_t k = 0; k < n; k++) {
            uint64_t i = idx[k];
            REQUIRE((uint64_t)(to[k + 1] - to[k]) == tok_rows(i));
            for (uint64_t j = 0; j < tok_rows(i); j++)
                REQUIRE(tok[to[k] + (int64_t)j] == tok_at(i, j));
            REQUIRE((uint64_t)(mo[k + 1] - mo[k]) == mel_rows(i));
            for (uint64_t r = 0; r < mel_rows(i); r++)
                for (uint32_t c = 0; c < MEL_COLS; c++) {
                    float want = mel_at(i, r, c);
                    REQUIRE(memcmp(&mel[(mo[k] + (int64_t)r) * MEL_COLS + c], &want, 4) == 0);
                }
        }
        return;
    }
    REQUIRE(v[F_TOK].kind == DSC_FIELD_PADDED && v[F_MEL].kind == DSC_FIELD_PADDED);
    const int64_t *tl = v[F_TOK].lengths, *ml = v[F_MEL].lengths;
    REQUIRE(tl != NULL && ml != NULL && v[F_TOK].offsets == NULL);
    int64_t tL = v[F_TOK].values.shape[1], mL = v[F_MEL].values.shape[1];
    REQUIRE(v[F_TOK].values.ndim == 2 && v[F_TOK].values.shape[0] == n);
    REQUIRE(v[F_MEL].values.ndim == 3 && v[F_MEL].values.shape[2] == MEL_COLS);
    int64_t tmax = 0, mmax = 0;
    const int32_t *tok = v[F_TOK].values.data;
    const float *mel = v[F_MEL].values.data;
    for (uint32_t k = 0; k < n; k++) {
        uint64_t i = idx[k];
        uint64_t want = tok_rows(i);
        if (md->max_len && want > md->max_len) {
            want = md->max_len;
            (*truncated)++;
        }
        REQUIRE((uint64_t)tl[k] == want);
        tmax = tl[k] > tmax ? tl[k] : tmax;
        for (int64_t j = 0; j < tL; j++)
            REQUIRE(tok[k * tL + j] ==
                    (j < tl[k] ? tok_at(i, (uint64_t)j) : (int32_t)md->pad_value));
        REQUIRE((uint64_t)ml[k] == mel_rows(i));
        mmax = ml[k] > mmax ? ml[k] : mmax;
        for (int64_t r = 0; r < mL; r++)
            for (uint32_t c = 0; c < MEL_COLS; c++) {
                float want_v = r < ml[k] ? mel_at(i, (uint64_t)r, c) : 0.0f;
                REQUIRE(memcmp(&mel[(k * mL + r) * MEL_COLS + c], &want_v, 4) == 0);
            }
    }
    REQUIRE(tL == tmax && mL == mmax); /* padded to the batch's longest sample */
}

/* One epoch at 2 ranks: each sample exactly once (the tail padding of the split aside). */
/* Reads an epoch through dsc_loader_next_views: it returns the samples and the views
 * dsc_batch_field_view gives, and the reference it takes keeps the batch intact past the next
 * call (checked again then, into scratch counters). Returns the last rc (DSC_EOF). */
static int next_views_epoch(dsc_loader_t *l, const mode_t_ *md, uint32_t *seen,
                            uint64_t *truncated) {
    dsc_batch_t *b = NULL, *kept = NULL;
    dsc_field_view_t v[F_COUNT];
    for (uint32_t f = 0; f < F_COUNT; f++)
        v[f].struct_size = sizeof v[f];
    dsc_field_view_t small = {.struct_size = 8};
    REQUIRE(dsc_loader_next_views(l, &b, 1, &small, 1) == DSC_EINVAL); /* nothing consumed */
    REQUIRE(dsc_loader_next_views(l, &b, 1, v, F_COUNT + 1) == DSC_EINVAL);
    uint32_t *scratch = calloc(samples, sizeof *scratch);
    uint64_t scratch_truncated = 0;
    int rc;
    while ((rc = dsc_loader_next_views(l, &b, 1, v, F_COUNT)) > 0) {
        REQUIRE((uint32_t)rc == dsc_batch_samples(b));
        for (uint32_t f = 0; f < F_COUNT; f++) {
            dsc_field_view_t w = {.struct_size = sizeof w};
            REQUIRE(dsc_batch_field_view(b, f, &w) == 0);
            REQUIRE(memcmp(&v[f], &w, sizeof w) == 0);
        }
        check_batch(b, md, seen, truncated);
        if (kept != NULL) { /* one next() later, still the same samples */
            check_batch(kept, md, scratch, &scratch_truncated);
            dsc_batch_release(kept);
        }
        kept = b;
    }
    dsc_batch_release(kept);
    free(scratch);
    return rc;
}

static void check_epoch(const mode_t_ *md, uint32_t batch) {
    uint32_t *seen = calloc(samples, sizeof *seen);
    uint64_t truncated = 0, counted = 0;
    for (uint32_t r = 0; r < 2; r++) {
        dsc_loader_t *l = open_loader(r, 2, batch, md, 0);
        dsc_batch_t *b;
        int rc;
        if (r == 0) {
            while ((rc = dsc_loader_next(l, &b)) == 0)
                check_batch(b, md, seen, &truncated);
        } else {
            rc = next_views_epoch(l, md, seen, &truncated);
        }
        REQUIRE(rc == DSC_EOF);
        dsc_stats_t st = {.struct_size = sizeof st};
        REQUIRE(dsc_loader_stats(l, &st) == 0);
        counted += st.truncated_samples;
        /* transport rdma: READ or an error, never TCP (READs for prefetched steps of the next
         * epoch may still be under way: rdma_bytes is not compared with wire_bytes). */
        if (expect_rdma)
            REQUIRE(st.rdma_bytes > 0 && st.rdma_connections > 0 && st.tcp_connections == 0);
        dsc_loader_destroy(l);
    }
    uint64_t extra = 0;
    for (uint64_t i = 0; i < samples; i++) {
        REQUIRE(seen[i] >= 1);
        extra += seen[i] - 1;
    }
    REQUIRE(extra < 2); /* the split pads R to a multiple of the world size */
    REQUIRE(counted == truncated);
    REQUIRE(md->max_len == 0 || truncated > 0);
    free(seen);
}

/* Saves the state mid-epoch on rank 0, resumes both ranks from it: the batches before plus
 * those after hold every sample once. */
static void check_resume(void) {
    mode_t_ md = {0};
    uint32_t *seen = calloc(samples, sizeof *seen);
    uint64_t unused = 0;
    uint8_t state[DSC_STATE_MAX_BYTES];
    int len = 0;
    for (uint32_t r = 0; r < 2; r++) {
        dsc_loader_t *l = open_loader(r, 2, 8, &md, 0);
        dsc_batch_t *b;
        for (int s = 0; s < 3; s++) {
            REQUIRE(dsc_loader_next(l, &b) == 0);
            check_batch(b, &md, seen, &unused);
        }
        if (r == 0)
            len = dsc_loader_state_save(l, state, sizeof state);
        dsc_loader_destroy(l);
    }
    REQUIRE(len > 0);
    for (uint32_t r = 0; r < 2; r++) {
        dsc_loader_t *l = open_loader(r, 2, 8, &md, 0);
        REQUIRE(dsc_loader_state_load(l, state, (size_t)len) == 0);
        dsc_batch_t *b;
        int rc;
        while ((rc = dsc_loader_next(l, &b)) == 0)
            check_batch(b, &md, seen, &unused);
        REQUIRE(rc == DSC_EOF);
        dsc_loader_destroy(l);
    }
    uint64_t extra = 0;
    for (uint64_t i = 0; i < samples; i++) {
        REQUIRE(seen[i] >= 1);
        extra += seen[i] - 1;
    }
    REQUIRE(extra < 2);
    free(seen);
}

/* A tok budget too small for some batch: the batches before it are handed out whole, then
 * next() fails with DSC_ETOOLARGE and an error that names the dataset, a sample the consumer
 * never got, and max_bytes. */
static void check_too_large(int in_order) {
    /* Shuffled: 5 rows, which the first batch already passes. In order: 59 rows, which batches
     * 0..11 hold (at most 56 rows each) and batch 12 (samples 96..103, 60 rows) does not. */
    uint64_t budget = in_order ? 59 * 4 : 20;
    mode_t_ md = {.tok_budget = budget, .in_order = in_order};
    dsc_loader_t *l = open_loader(0, 1, 8, &md, 0);
    dsc_batch_t *b;
    int rc;
    uint32_t *seen = calloc(samples, sizeof *seen);
    uint64_t handed = 0;
    while ((rc = dsc_loader_next(l, &b)) == 0) {
        /* The batches before the failing one come whole, each within the budget. */
        dsc_field_view_t v = {.struct_size = sizeof v};
        REQUIRE(dsc_batch_field_view(b, F_TOK, &v) == 0);
        REQUIRE((uint64_t)v.offsets[dsc_batch_samples(b)] * 4 <= budget);
        for (uint32_t k = 0; k < dsc_batch_samples(b); k++)
            seen[dsc_batch_indices(b)[k]] = 1;
        handed++;
    }
    REQUIRE(rc == DSC_ETOOLARGE);
    REQUIRE(!in_order || handed == 12);
    char why[1024];
    dsc_loader_last_error(l, why, sizeof why);
    fprintf(stderr, "expected error (after %llu batches): %s\n", (unsigned long long)handed, why);
    /* The sample named is one the consumer never got. */
    const char *at = strstr(why, ": sample ");
    REQUIRE(at != NULL);
    uint64_t named = strtoull(at + 9, NULL, 10);
    REQUIRE(named < samples && !seen[named] && tok_rows(named) * 4 > 0);
    char batch_no[64]; /* the batch next() failed at, the first not handed out */
    snprintf(batch_no, sizeof batch_no, "and batch %llu holds", (unsigned long long)handed);
    REQUIRE(strstr(why, batch_no) != NULL);
    free(seen);
    REQUIRE(strstr(why, dataset) != NULL && strstr(why, "sample ") != NULL &&
            strstr(why, "max_bytes") != NULL && strstr(why, "'tok'") != NULL);
    REQUIRE(dsc_loader_next(l, &b) == DSC_ETOOLARGE); /* the loader stays failed */
    dsc_loader_destroy(l);
    /* Options naming no variable field are refused at create. */
    dsc_loader_options_t o;
    REQUIRE(DSC_LOADER_OPTIONS_INIT(&o) == 0);
    o.servers = servers;
    o.fallback_path = fallback;
    o.dataset = dataset;
    dsc_field_options_t fo;
    REQUIRE(dsc_field_options_init(&fo, sizeof fo) == 0);
    fo.name = "label";
    fo.pad = 1;
    o.field_options = &fo;
    o.field_option_count = 1;
    o.log_fn = on_log;
    REQUIRE(dsc_loader_create(&o, &l) == DSC_EINVAL);
}

/* A chunk whose offsets are out of order (its checksums intact): with a good copy left (the
 * fallback files), read from there and every batch is right; with none, next() fails with
 * DSC_ECORRUPT and an error naming the chunk. Never a wrong batch. */
static void check_corrupt(void) {
    mode_t_ md = {0};
    uint32_t *seen = calloc(samples, sizeof *seen);
    uint64_t unused = 0;
    dsc_loader_t *l = open_loader(0, 1, 8, &md, 0);
    dsc_batch_t *b;
    int rc;
    while ((rc = dsc_loader_next(l, &b)) == 0)
        check_batch(b, &md, seen, &unused);
    dsc_stats_t st = {.struct_size = sizeof st};
    REQUIRE(dsc_loader_stats(l, &st) == 0);
    char why[1024];
    dsc_loader_last_error(l, why, sizeof why);
    dsc_loader_destroy(l);
    if (servers != NULL && fallback != NULL) {
        /* The server's copy is bad, the files' good: moved there, every sample once. */
        REQUIRE(rc == DSC_EOF);
        REQUIRE(st.failovers >= 1 && st.checksum_failures >= 1);
        for (uint64_t i = 0; i < samples; i++)
            REQUIRE(seen[i] == 1);
    } else {
        fprintf(stderr, "expected error: %s\n", why);
        REQUIRE(rc == DSC_ECORRUPT && named_chunk);
    }
    free(seen);
}

int main(int argc, char **argv) {
    if (argc >= 6 && strcmp(argv[1], "gen") == 0) {
        bad_layout = argc >= 7 && strcmp(argv[6], "bad") == 0;
        return gen(argv[2], argv[3], strtoull(argv[4], NULL, 10),
                   strcmp(argv[5], "raw") == 0 ? DSC_CODEC_RAW : DSC_CODEC_LZ4);
    }
    if (argc >= 6 && strcmp(argv[1], "write") == 0)
        return gen_writer(argv[2], argv[3], strtoull(argv[4], NULL, 10), argv[5]);
    int corrupt = argc >= 2 && strcmp(argv[1], "corrupt") == 0;
    if (argc < 2 || (strcmp(argv[1], "check") != 0 && !corrupt)) {
        fprintf(stderr, "usage: loader_var_check gen DIR NAME SAMPLES raw|lz4 | check ...\n");
        return 2;
    }
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--servers") == 0)
            servers = argv[i + 1];
        else if (strcmp(argv[i], "--fallback") == 0)
            fallback = argv[i + 1];
        else if (strcmp(argv[i], "--dataset") == 0)
            dataset = argv[i + 1];
        else if (strcmp(argv[i], "--expect-rdma") == 0)
            expect_rdma = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--samples") == 0)
            samples = strtoull(argv[i + 1], NULL, 10);
    }
    REQUIRE(dataset != NULL && (servers != NULL || fallback != NULL));
    if (corrupt) {
        check_corrupt();
        printf("ok\n");
        return 0;
    }
    mode_t_ values = {0};
    check_epoch(&values, 8);
    /* The slot's room (docs/loader.md#variable-length-fields), regions rounded to 256 bytes:
     * img 8 x 48 -> 512, label 8 x 8 -> 256, tok offsets 9 x 8 -> 256 + its default budget 8 x
     * bytes_max (12 rows of 4) -> 512, mel offsets 256 + 8 x 4 rows of 320 = 10240. */
    fprintf(stderr, "slot bytes %llu\n", (unsigned long long)slot_bytes);
    REQUIRE(slot_bytes == 512 + 256 + 256 + 512 + 256 + 10240);
    mode_t_ cut4 = {.pad = 1, .max_len = 4};
    dsc_loader_destroy(open_loader(0, 1, 8, &cut4, 0));
    /* padded: tok 8 x 8 lengths -> 256 + 8 x max_len 4 x 4 -> 256; mel 256 + 8 x rows_max 4 x
     * 320. */
    REQUIRE(slot_bytes == 512 + 256 + 256 + 256 + 256 + 10240);
    check_epoch(&values, 1);
    mode_t_ padded = {.pad = 1, .pad_value = -7};
    check_epoch(&padded, 8);
    mode_t_ cut = {.pad = 1, .max_len = 4};
    check_epoch(&cut, 8);
    mode_t_ runs = {.in_order = 1};
    check_epoch(&runs, 8);
    check_resume();
    check_too_large(0);
    check_too_large(1);
    printf("ok\n");
    return dsc_test_failures ? 1 : 0;
}
