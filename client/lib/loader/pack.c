/* Packing (docs/packing.md): the row builder that lays variable-length documents end to end into
 * fixed-length rows, and the public dsc_packer_* that feeds it from a loader's batches and
 * resumes it exactly.
 * Over 1,000 lines: the packer's thread, its ring and the batches callers hold from it
 * (dsc_packer_next_held) share one lock and one entry layout with the resume onto another world
 * size, which reads and rebuilds that same state; split, each half would reach into the other's. */
#include "pack.h"
#include "pipeline.h"
#include "shard.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- The row builder (pure) ---------------------------------------------------------------- */

int dsc__pack_rows_init(dsc_pack_rows_t *p, uint32_t rows, uint32_t length, uint32_t elem,
                        int cut) {
    memset(p, 0, sizeof *p);
    p->rows = rows, p->length = length, p->elem = elem, p->cut = cut ? 1 : 0;
    size_t slots = (size_t)rows * length;
    /* Segments: at most one per token, plus one padding run per row. */
    size_t segs = slots + rows + 1;
    p->tokens = calloc(slots ? slots : 1, elem);
    p->position_ids = calloc(slots ? slots : 1, sizeof(int32_t));
    p->document_ids = calloc(slots ? slots : 1, sizeof(int32_t));
    p->cu_seqlens = calloc(segs + 1, sizeof(int32_t));
    p->segment_index = calloc(segs, sizeof(int64_t));
    p->segment_start = calloc(segs, sizeof(int64_t));
    p->segment_source = calloc(segs, sizeof(int32_t));
    if (!p->tokens || !p->position_ids || !p->document_ids || !p->cu_seqlens || !p->segment_index ||
        !p->segment_start || !p->segment_source) {
        dsc__pack_rows_free(p);
        return DSC_ENOMEM;
    }
    return 0;
}

void dsc__pack_rows_free(dsc_pack_rows_t *p) {
    if (p == NULL)
        return;
    free(p->tokens);
    free(p->position_ids);
    free(p->document_ids);
    free(p->cu_seqlens);
    free(p->segment_index);
    free(p->segment_start);
    free(p->segment_source);
    memset(p, 0, sizeof *p);
}

void dsc__pack_rows_reset(dsc_pack_rows_t *p) {
    p->row = p->col = p->segments = 0;
    p->tokens_used = 0;
    p->documents = p->split_documents = p->cut_documents = p->cut_tokens = 0;
    p->cu_seqlens[0] = 0;
}

int dsc__pack_rows_full(const dsc_pack_rows_t *p) {
    return p->row >= p->rows;
}

/* The per-token fills of a segment, eight int32 a round as two four-lane vectors (generic
 * vectors: SSE2 registers on x86-64, no intrinsics; a wider type spills to the stack there): the
 * packer's thread writes two int32 beside every token, and as scalar loops these fills were
 * most of its time (perf: add_segment above the token copy). */
typedef int32_t pack_v4i __attribute__((vector_size(16)));

static void fill_iota(int32_t *dst, uint32_t n) {
    pack_v4i lo = {0, 1, 2, 3}, hi = {4, 5, 6, 7};
    const pack_v4i step = {8, 8, 8, 8};
    uint32_t k = 0;
    for (; k + 8 <= n; k += 8) {
        memcpy(dst + k, &lo, sizeof lo);
        memcpy(dst + k + 4, &hi, sizeof hi);
        lo += step, hi += step;
    }
    for (; k < n; k++)
        dst[k] = (int32_t)k;
}

static void fill_i32(int32_t *dst, int32_t value, uint32_t n) {
    const pack_v4i v = {value, value, value, value};
    uint32_t k = 0;
    for (; k + 8 <= n; k += 8) {
        memcpy(dst + k, &v, sizeof v);
        memcpy(dst + k + 4, &v, sizeof v);
    }
    for (; k < n; k++)
        dst[k] = value;
}

/* Appends a segment of n tokens at the current place (index -1: padding) and advances. */
static void add_segment(dsc_pack_rows_t *p, int64_t index, const uint8_t *data, uint64_t start,
                        uint32_t n) {
    size_t at = (size_t)p->row * p->length + p->col;
    uint32_t seg = p->segments++;
    p->segment_index[seg] = index;
    p->segment_start[seg] = index < 0 ? 0 : (int64_t)start;
    if (p->sources)
        p->segment_source[seg] = index < 0 ? -1 : p->source;
    if (index >= 0) {
        memcpy(p->tokens + at * p->elem, data + start * p->elem, (size_t)n * p->elem);
        fill_iota(p->position_ids + at, n);
        fill_i32(p->document_ids + at, (int32_t)seg, n);
        p->tokens_used += n;
    } else {
        memset(p->tokens + at * p->elem, 0, (size_t)n * p->elem);
        memset(p->position_ids + at, 0, (size_t)n * sizeof(int32_t));
        fill_i32(p->document_ids + at, -1, n);
    }
    p->cu_seqlens[seg + 1] = (int32_t)(at + n);
    p->col += n;
    if (p->col == p->length)
        p->row++, p->col = 0;
}

/* Pads the rest of the row being filled (none when it is empty) and moves to the next. */
static void close_row(dsc_pack_rows_t *p) {
    if (p->col > 0)
        add_segment(p, -1, NULL, 0, p->length - p->col);
}

int dsc__pack_rows_place(dsc_pack_rows_t *p, int64_t index, const uint8_t *data, uint64_t n,
                         uint64_t *offset) {
    if (*offset >= n) {
        p->documents++;
        return 1;
    }
    if (p->cut) {
        uint64_t want = n < p->length ? n : p->length;
        if (p->col > 0 && want > p->length - p->col)
            close_row(p);
        if (dsc__pack_rows_full(p))
            return 0;
        add_segment(p, index, data, 0, (uint32_t)want);
        if (want < n)
            p->cut_documents++, p->cut_tokens += n - want;
        *offset = n;
        p->documents++;
        return 1;
    }
    int split_counted = *offset > 0; /* a continuation was counted when it split */
    while (*offset < n) {
        if (dsc__pack_rows_full(p))
            return 0;
        uint64_t room = p->length - p->col, left = n - *offset;
        uint32_t take = (uint32_t)(left < room ? left : room);
        add_segment(p, index, data, *offset, take);
        *offset += take;
        if (*offset < n && !split_counted)
            p->split_documents++, split_counted = 1;
    }
    p->documents++;
    return 1;
}

uint32_t dsc__pack_rows_finish(dsc_pack_rows_t *p) {
    if (p->row < p->rows && p->col > 0)
        close_row(p);
    return p->row;
}

/* ---- The packer over a loader --------------------------------------------------------------- */

#define PACK_STATE_MAGIC "DSCP"
#define PACK_STATE_VERSION 1
#define PACK_STATE_HEAD 48 /* magic, version, settings, doc, offset, inner length */
#define PACK_MAX_LENGTH (1u << 24)

/* A packer's state holds its loader's: at most DSC_STATE_MAX_BYTES for a loader of one dataset,
 * more for a loader over a mixture (dsc_mixture_state_save: a record and a loader state per
 * source). */
#define PACK_INNER_MAX 32768
#define PACK_STATE_CAP (PACK_STATE_HEAD + PACK_INNER_MAX + 8)
#define PACK_AHEAD_DEFAULT 2
#define PACK_AHEAD_MAX 64
#define PACK_CARRY_MAX 64   /* old ranks per new rank a world-size change may leave */
#define PACK_MAX_SOURCES 64 /* a mixture's (its loaders over a mixture) */

/* One packed batch made ahead by the packer's thread, with the stream state after it. */
typedef struct pack_entry {
    dsc_pack_rows_t rows;
    dsc_pack_hold_t *hold;   /* the caller holds these buffers (dsc_packer_next_held): the
                                producer hands them to the hold before it writes the entry again */
    dsc_packed_batch_t meta; /* rc 0: the batch (pointers into rows) */
    int rc;                  /* 0, DSC_EOF or the loader's error */
    double busy;             /* seconds spent laying it out */
    uint8_t state[PACK_STATE_CAP];
    int state_len;
} pack_entry_t;

struct dsc_packer {
    dsc_loader_t *loader;
    const dsc_logger_t *log;
    char field_name[DSC_MAX_NAME];
    uint32_t field;
    int dtype;
    dsc_pack_rows_t rows; /* packing on next()'s thread: the batch being built */
    /* The producer's side (next()'s thread, or the packer's thread while it produces). Where
     * the stream stands: the loader batch being read (batch NULL: none held; the next loader
     * next() gives the batch at inner_state), its documents, the next document in it and the
     * tokens of that document already handed out. */
    dsc_batch_t *batch;
    const uint8_t *values;
    const int64_t *offsets;
    const uint64_t *indices;
    uint32_t batch_docs;
    /* Over a loader over a mixture: its "source" field (int32 per document), carried into
     * segment_source; source_field UINT32_MAX otherwise. */
    uint32_t source_field;
    const int32_t *sources;
    uint8_t inner_state[PACK_INNER_MAX];
    uint32_t inner_len;
    uint32_t doc;
    uint64_t offset;
    /* After state_load: documents and tokens of the first loader batch to skip. */
    uint32_t skip_doc;
    uint64_t skip_offset;
    int at_eof; /* the loader's epoch ended: the next batch is DSC_EOF */
    /* After dsc_packer_state_load_world: the old ranks' batches this rank packs first, before
     * its loader (which resumes after them): per old rank, a temporary loader of that rank,
     * its first batch (documents skip_doc / tokens skip_offset in already packed) and how many
     * more batches of it to read. While any is left the state cannot be saved for a resume. */
    struct pack_carry {
        dsc_loader_t *loader;
        dsc_batch_t *first;
        uint32_t skip_doc;
        uint64_t skip_offset;
        uint64_t more;
    } carry[PACK_CARRY_MAX];
    uint32_t carry_n, carry_at;
    uint64_t epoch, step;
    /* The packer's thread (ahead > 0): a ring of ahead + 1 entries, `count` ready from `head`,
     * and the one before head held by the caller until its next call. Under lock. */
    uint32_t ahead;
    pack_entry_t *ring;
    uint32_t head, count;
    int thread_started, stop, paused, producing;
    int error; /* a loader error handed out: every later call returns it */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cv;
    uint8_t state[PACK_STATE_CAP]; /* the state after the last batch handed out */
    int state_len;
    dsc_pack_stats_t st; /* under lock with a thread */
    /* Buffers given back by released holds, reused before new ones are allocated. Under lock. */
    dsc_pack_rows_t spare[PACK_AHEAD_MAX + 1];
    uint32_t n_spare;
    struct dsc_pack_hold *holds; /* every hold not yet released (destroy lets go of them) */
};

/* A packed batch the caller holds (dsc_packer_next_held): while `entry` is set its buffers are
 * that ring entry's (or, entry NULL and rows set, its own: handed over by the producer before it
 * reused the entry, or by destroy). packer NULL: the packer is gone. */
struct dsc_pack_hold {
    dsc_packer_t *packer;
    pack_entry_t *entry;
    dsc_pack_rows_t rows;
    struct dsc_pack_hold *prev, *next; /* in packer->holds, under its lock */
};

static int state_live(const dsc_packer_t *packer, void *buf, size_t cap);
static void *producer(void *arg);

DSC_EXTERN int dsc_pack_options_init(dsc_pack_options_t *options, size_t size) {
    if (options == NULL || size < sizeof(dsc_pack_options_t))
        return DSC_EINVAL;
    memset(options, 0, size);
    options->struct_size = size;
    return 0;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The loader's state now, as the point the next loader batch starts at. */
static int save_inner(dsc_packer_t *pk) {
    int n = dsc_loader_state_save(pk->loader, pk->inner_state, sizeof pk->inner_state);
    if (n < 0)
        return n;
    if ((size_t)n > sizeof pk->inner_state)
        return DSC_ETOOLARGE;
    pk->inner_len = (uint32_t)n;
    return 0;
}

DSC_EXTERN int dsc_packer_create(dsc_loader_t *loader, const dsc_pack_options_t *options,
                                 dsc_packer_t **out) {
    if (loader == NULL || options == NULL || out == NULL || options->struct_size < sizeof *options)
        return DSC_EINVAL;
    const dsc_logger_t *log = &loader->cfg.log;
    if (options->field == NULL || options->field[0] == '\0') {
        DSC_LOG(log, DSC_LOG_ERROR, "pack: no field named to pack");
        return DSC_EINVAL;
    }
    uint32_t nf = dsc_loader_field_count(loader), f;
    dsc_field_info_t info;
    for (f = 0; f < nf; f++)
        if (dsc_loader_field(loader, f, &info) == 0 && strcmp(info.name, options->field) == 0)
            break;
    if (f == nf) {
        DSC_LOG(log, DSC_LOG_ERROR, "pack: dataset %s has no field '%s'", loader->cfg.dataset,
                options->field);
        return DSC_EINVAL;
    }
    const dsc_var_field_t *var = &loader->cfg.var[f];
    if (!var->is_var) {
        DSC_LOG(log, DSC_LOG_ERROR,
                "pack: field '%s' of dataset %s is fixed-shape (%s, %llu bytes per sample): only "
                "a 1-D variable-length field (e.g. i32[]) can be packed",
                options->field, loader->cfg.dataset, dsc_dtype_name(info.dtype),
                (unsigned long long)info.sample_bytes);
        return DSC_EINVAL;
    }
    if (info.ndim != 1) {
        DSC_LOG(log, DSC_LOG_ERROR,
                "pack: field '%s' of dataset %s has rows of more than one value (%u dimensions): "
                "only a 1-D variable-length field (e.g. i32[]) can be packed",
                options->field, loader->cfg.dataset, info.ndim);
        return DSC_EINVAL;
    }
    if (var->pad || var->image) {
        DSC_LOG(log, DSC_LOG_ERROR,
                "pack: field '%s' is %s: a packed field is read as values + offsets (drop its "
                "%s option)",
                options->field, var->pad ? "padded" : "decoded as an image",
                var->pad ? "pad" : "decode");
        return DSC_EINVAL;
    }
    if (loader->cfg.opt.device >= 0 || loader->cfg.opt.order == DSC_ORDER_CALLER) {
        DSC_LOG(log, DSC_LOG_ERROR, "pack: %s",
                loader->cfg.opt.device >= 0 ? "packing needs host batches (device -1)"
                                            : "packing does not take the caller's order");
        return DSC_EINVAL;
    }
    if (options->ahead > PACK_AHEAD_MAX) {
        DSC_LOG(log, DSC_LOG_ERROR, "pack: ahead %u is over %u", options->ahead, PACK_AHEAD_MAX);
        return DSC_EINVAL;
    }
    if (options->length < 1 || options->length > PACK_MAX_LENGTH) {
        DSC_LOG(log, DSC_LOG_ERROR, "pack: length %u for field '%s' is out of range (1 .. %u)",
                options->length, options->field, PACK_MAX_LENGTH);
        return DSC_EINVAL;
    }
    uint32_t rows = options->rows ? options->rows : loader->cfg.opt.batch_size;
    if ((uint64_t)rows * options->length > (1ull << 30)) {
        DSC_LOG(log, DSC_LOG_ERROR, "pack: %u rows of %u tokens is over 2^30 tokens a batch", rows,
                options->length);
        return DSC_EINVAL;
    }
    dsc_packer_t *pk = calloc(1, sizeof *pk);
    if (pk == NULL)
        return DSC_ENOMEM;
    pk->loader = loader;
    pk->log = log;
    snprintf(pk->field_name, sizeof pk->field_name, "%s", options->field);
    pk->field = f;
    pk->dtype = info.dtype;
    pk->source_field = UINT32_MAX;
    if (dsc_loader_mixture(loader) != NULL) /* documents of several sources: say whose */
        for (uint32_t g = 0; g < nf; g++)
            if (dsc_loader_field(loader, g, &info) == 0 && strcmp(info.name, "source") == 0 &&
                info.dtype == DSC_DTYPE_I32 && !loader->cfg.var[g].is_var)
                pk->source_field = g;
    int rc = dsc__pack_rows_init(&pk->rows, rows, options->length,
                                 (uint32_t)dsc_dtype_size(pk->dtype), options->cut);
    if (rc == 0)
        rc = save_inner(pk);
    if (rc < 0) {
        dsc__pack_rows_free(&pk->rows);
        free(pk);
        return rc;
    }
    pk->epoch = loader->stats.st.epoch;
    pk->st.struct_size = sizeof pk->st;
    pk->state_len = state_live(pk, pk->state, sizeof pk->state);
    pthread_mutex_init(&pk->lock, NULL);
    pthread_cond_init(&pk->cv, NULL);
    if (!options->on_caller_thread) {
        pk->ahead = options->ahead ? options->ahead : PACK_AHEAD_DEFAULT;
        pk->ring = calloc(pk->ahead + 1, sizeof *pk->ring);
        rc = pk->ring ? 0 : DSC_ENOMEM;
        for (uint32_t i = 0; rc == 0 && i <= pk->ahead; i++)
            rc = dsc__pack_rows_init(&pk->ring[i].rows, rows, options->length,
                                     (uint32_t)dsc_dtype_size(pk->dtype), options->cut);
        if (rc == 0 && pthread_create(&pk->thread, NULL, producer, pk) != 0)
            rc = DSC_ENOMEM;
        if (rc < 0) {
            dsc_packer_destroy(pk);
            return rc;
        }
        pk->thread_started = 1;
    }
    *out = pk;
    return 0;
}

/* Frees what is left of the old ranks' batches. */
static void carry_clear(dsc_packer_t *pk) {
    for (uint32_t i = pk->carry_at; i < pk->carry_n; i++) {
        if (pk->carry[i].first != NULL)
            dsc_batch_release(pk->carry[i].first);
        dsc_loader_destroy(pk->carry[i].loader);
    }
    pk->carry_n = pk->carry_at = 0;
}

DSC_EXTERN void dsc_packer_destroy(dsc_packer_t *packer) {
    if (packer == NULL)
        return;
    if (packer->thread_started) {
        pthread_mutex_lock(&packer->lock);
        packer->stop = 1;
        pthread_cond_broadcast(&packer->cv);
        pthread_mutex_unlock(&packer->lock);
        pthread_join(packer->thread, NULL);
    }
    if (packer->batch != NULL && packer->carry_at < packer->carry_n)
        dsc_batch_release(packer->batch); /* a temporary loader's */
    carry_clear(packer);
    if (packer->ring != NULL)
        for (uint32_t i = 0; i <= packer->ahead; i++) {
            pack_entry_t *e = &packer->ring[i];
            if (e->hold != NULL) { /* the caller's from now on */
                e->hold->rows = e->rows, e->hold->entry = NULL, e->hold->packer = NULL;
                memset(&e->rows, 0, sizeof e->rows);
            }
            dsc__pack_rows_free(&e->rows);
        }
    for (uint32_t i = 0; i < packer->n_spare; i++)
        dsc__pack_rows_free(&packer->spare[i]);
    for (dsc_pack_hold_t *h = packer->holds; h != NULL; h = h->next)
        h->packer = NULL; /* released later on their own */
    free(packer->ring);
    pthread_mutex_destroy(&packer->lock);
    pthread_cond_destroy(&packer->cv);
    dsc__pack_rows_free(&packer->rows);
    free(packer);
}

/* Takes the loader's next batch (its state saved first, as where that batch starts). Returns
 * 0, DSC_EOF or the loader's error. */
static int next_loader_batch(dsc_packer_t *pk) {
    dsc_batch_t *b = NULL;
    int rc;
    while (pk->carry_at < pk->carry_n) { /* an old world size's batches first */
        struct pack_carry *c = &pk->carry[pk->carry_at];
        if (c->first != NULL) {
            b = c->first, c->first = NULL;
            pk->skip_doc = c->skip_doc, pk->skip_offset = c->skip_offset;
        } else if (c->more > 0) {
            c->more--;
            rc = dsc_loader_next(c->loader, &b);
            if (rc < 0 && rc != DSC_EOF)
                return rc;
            if (rc == 0)
                dsc_batch_retain(b); /* kept past the temporary loader's next next() */
            else
                b = NULL;
        }
        if (b != NULL)
            break;
        /* This old rank's part is done (its last batch was released: pk->batch is NULL). */
        dsc_loader_destroy(c->loader);
        c->loader = NULL;
        pk->carry_at++;
    }
    if (b == NULL) {
        rc = save_inner(pk);
        if (rc < 0)
            return rc;
        rc = dsc_loader_next(pk->loader, &b);
        if (rc < 0)
            return rc;
    }
    dsc_field_view_t fv, sv; /* the packed field; the documents' sources (over a mixture) */
    memset(&fv, 0, sizeof fv);
    fv.struct_size = sizeof fv;
    sv = fv;
    rc = dsc_batch_field_view(b, pk->field, &fv);
    if (rc == 0 && pk->source_field != UINT32_MAX)
        rc = dsc_batch_field_view(b, pk->source_field, &sv);
    if (rc < 0)
        return rc;
    pk->sources = pk->source_field != UINT32_MAX ? sv.values.data : NULL;
    pk->batch = b;
    pk->values = fv.values.data;
    pk->offsets = fv.offsets;
    pk->indices = dsc_batch_indices(b);
    pk->batch_docs = dsc_batch_samples(b);
    pk->doc = pk->skip_doc;
    pk->offset = pk->skip_offset;
    pk->skip_doc = 0, pk->skip_offset = 0;
    return 0;
}

/* The loader batch is used up: give it back, and note where the next one starts. */
static int drop_loader_batch(dsc_packer_t *pk) {
    dsc_batch_release(pk->batch);
    pk->batch = NULL;

    pk->doc = 0, pk->offset = 0;
    return save_inner(pk);
}

/* Makes the next packed batch into p (the producer's side of the stream): fills out (pointers
 * into p) and *busy (seconds laying it out). Returns 0, DSC_EOF (the epoch ended; the next call
 * starts the next one) or the loader's error. */
static int produce(dsc_packer_t *pk, dsc_pack_rows_t *p, dsc_packed_batch_t *out, double *busy) {
    *busy = 0;
    dsc__pack_rows_reset(p);
    if (pk->at_eof) { /* the epoch ended with the last batch: say so, then go on to the next */
        pk->at_eof = 0;
        pk->epoch++, pk->step = 0;
        return DSC_EOF;
    }
    while (!dsc__pack_rows_full(p)) {
        if (pk->batch == NULL) {
            int rc = next_loader_batch(pk);
            if (rc == DSC_EOF) {
                if (p->row == 0 && p->col == 0) { /* nothing left of the epoch */
                    pk->epoch++, pk->step = 0;
                    save_inner(pk);
                    return DSC_EOF;
                }
                pk->at_eof = 1;
                save_inner(pk);
                break;
            }
            if (rc < 0)
                return rc;
        }
        double t0 = now_seconds();
        p->sources = pk->sources != NULL;
        while (pk->doc < pk->batch_docs) {
            int64_t a = pk->offsets[pk->doc], b = pk->offsets[pk->doc + 1];
            if (pk->sources != NULL)
                p->source = pk->sources[pk->doc];
            const uint8_t *data = pk->values + (size_t)a * p->elem;
            if (!dsc__pack_rows_place(p, (int64_t)pk->indices[pk->doc], data, (uint64_t)(b - a),
                                      &pk->offset))
                break;
            pk->doc++, pk->offset = 0;
        }
        *busy += now_seconds() - t0;
        if (pk->doc >= pk->batch_docs) {
            int rc = drop_loader_batch(pk);
            if (rc < 0)
                return rc;
        }
    }
    uint32_t rows = dsc__pack_rows_finish(p);
    if (p->cut_documents > 0)
        DSC_LOG(pk->log, DSC_LOG_INFO, "pack: %llu document(s) of field '%s' cut to %u tokens",
                (unsigned long long)p->cut_documents, pk->field_name, p->length);
    out->epoch = pk->epoch;
    out->step = pk->step++;
    out->rows = rows;
    out->length = p->length;
    out->dtype = pk->dtype;
    out->tokens = p->tokens;
    out->position_ids = p->position_ids;
    out->document_ids = p->document_ids;
    out->cu_seqlens = p->cu_seqlens;
    out->segments = p->segments;
    out->segment_index = p->segment_index;
    out->segment_start = p->segment_start;
    out->tokens_used = p->tokens_used;
    if (out->struct_size >= offsetof(dsc_packed_batch_t, segment_source) + sizeof(void *))
        out->segment_source = pk->source_field != UINT32_MAX ? p->segment_source : NULL;
    return 0;
}

/* Counts a batch handed out (under lock with a thread). */
static void count_batch(dsc_packer_t *pk, const dsc_pack_rows_t *p, uint32_t rows, double busy) {
    pk->st.batches++;
    pk->st.rows += rows;
    pk->st.slots += (uint64_t)rows * p->length;
    pk->st.tokens += p->tokens_used;
    pk->st.documents += p->documents;
    pk->st.split_documents += p->split_documents;
    pk->st.cut_documents += p->cut_documents;
    pk->st.cut_tokens += p->cut_tokens;
    pk->st.pack_seconds += busy;
}

/* The packer's thread: keeps `ahead` packed batches ready, each with the state after it. */
static void *producer(void *arg) {
    dsc_packer_t *pk = arg;
    pthread_mutex_lock(&pk->lock);
    for (;;) {
        while (!pk->stop && (pk->paused || pk->error || pk->count >= pk->ahead))
            pthread_cond_wait(&pk->cv, &pk->lock);
        if (pk->stop)
            break;
        pack_entry_t *e = &pk->ring[(pk->head + pk->count) % (pk->ahead + 1)];
        int fresh = 0;
        if (e->hold != NULL) { /* the caller still holds this entry's batch: it keeps them */
            e->hold->rows = e->rows, e->hold->entry = NULL;
            e->hold = NULL;
            if (pk->n_spare > 0)
                e->rows = pk->spare[--pk->n_spare];
            else
                fresh = 1;
        }
        pk->producing = 1;
        pthread_mutex_unlock(&pk->lock);
        memset(&e->meta, 0, sizeof e->meta);
        e->meta.struct_size = sizeof e->meta;
        if (fresh)
            e->rc = dsc__pack_rows_init(&e->rows, pk->rows.rows, pk->rows.length, pk->rows.elem,
                                        pk->rows.cut);
        else
            e->rc = 0;
        if (e->rc == 0)
            e->rc = produce(pk, &e->rows, &e->meta, &e->busy);
        e->state_len = state_live(pk, e->state, sizeof e->state);
        pthread_mutex_lock(&pk->lock);
        pk->producing = 0;
        pk->count++;
        if (e->rc < 0 && e->rc != DSC_EOF)
            pk->error = e->rc; /* stop producing: the loader failed */
        pthread_cond_broadcast(&pk->cv);
    }
    pthread_mutex_unlock(&pk->lock);
    return NULL;
}

/* With a thread: the next ready entry (waiting for it; the wait is counted), now held by the
 * caller; its state becomes the packer's. Returns the entry's rc. */
static int take(dsc_packer_t *pk, pack_entry_t **out) {
    pthread_mutex_lock(&pk->lock);
    double t0 = now_seconds();
    while (pk->count == 0)
        pthread_cond_wait(&pk->cv, &pk->lock);
    pk->st.wait_seconds += now_seconds() - t0;
    pack_entry_t *e = &pk->ring[pk->head];
    pk->head = (pk->head + 1) % (pk->ahead + 1);
    pk->count--;
    if (e->rc == 0 || e->rc == DSC_EOF) {
        memcpy(pk->state, e->state, (size_t)e->state_len);
        pk->state_len = e->state_len;
    }
    if (e->rc == 0)
        count_batch(pk, &e->rows, e->meta.rows, e->busy);
    pthread_cond_broadcast(&pk->cv);
    pthread_mutex_unlock(&pk->lock);
    *out = e;
    return e->rc;
}

/* Stops the packer's thread between batches (it finishes the one under way). */
static void pause_producer(dsc_packer_t *pk) {
    if (!pk->thread_started)
        return;
    pthread_mutex_lock(&pk->lock);
    pk->paused = 1;
    while (pk->producing)
        pthread_cond_wait(&pk->cv, &pk->lock);
    pthread_mutex_unlock(&pk->lock);
}

/* Drops what was made ahead and lets the thread go on from the producer's state now. */
static void resume_producer(dsc_packer_t *pk) {
    int len = state_live(pk, pk->state, sizeof pk->state);
    pthread_mutex_lock(&pk->lock);
    pk->state_len = len;
    if (pk->thread_started) {
        pk->head = pk->count = 0;
        pk->error = 0;
        pk->paused = 0;
        pthread_cond_broadcast(&pk->cv);
    }
    pthread_mutex_unlock(&pk->lock);
}

/* A dsc_packed_batch_t of a caller built before segment_source (fields up to tokens_used). */
#define PACKED_BATCH_V1 offsetof(dsc_packed_batch_t, segment_source)

/* *out = *meta, as far as the caller's struct_size reaches. */
static void give_meta(dsc_packed_batch_t *out, const dsc_packed_batch_t *meta) {
    size_t size = out->struct_size;
    memcpy(out, meta, size < sizeof *meta ? size : sizeof *meta);
    out->struct_size = size;
}

DSC_EXTERN int dsc_packer_next(dsc_packer_t *packer, dsc_packed_batch_t *out) {
    if (packer == NULL || out == NULL || out->struct_size < PACKED_BATCH_V1)
        return DSC_EINVAL;
    dsc_packer_t *pk = packer;
    if (pk->error)
        return pk->error;
    if (pk->thread_started) {
        pack_entry_t *e;
        int rc = take(pk, &e);
        if (rc < 0)
            return rc;
        give_meta(out, &e->meta);
        return 0;
    }
    double busy;
    size_t size = out->struct_size;
    int rc = produce(pk, &pk->rows, out, &busy);
    out->struct_size = size;
    if (rc == 0)
        count_batch(pk, &pk->rows, out->rows, busy);
    if (rc == 0 || rc == DSC_EOF)
        pk->state_len = state_live(pk, pk->state, sizeof pk->state);
    else
        pk->error = rc;
    return rc;
}

DSC_EXTERN int dsc_packer_next_into(dsc_packer_t *packer, dsc_packed_batch_t *out, void *tokens,
                                    int32_t *position_ids, int32_t *document_ids,
                                    int32_t *cu_seqlens, int64_t *segment_index,
                                    int64_t *segment_start) {
    if (packer == NULL || out == NULL || out->struct_size < PACKED_BATCH_V1 || tokens == NULL ||
        position_ids == NULL || document_ids == NULL || cu_seqlens == NULL ||
        segment_index == NULL || segment_start == NULL)
        return DSC_EINVAL;
    if (packer->thread_started) { /* copy the batch made ahead */
        int rc = dsc_packer_next(packer, out);
        if (rc < 0)
            return rc;
        size_t n = (size_t)out->rows * out->length, segs = out->segments;
        memcpy(tokens, out->tokens, n * packer->rows.elem);
        memcpy(position_ids, out->position_ids, n * sizeof(int32_t));
        memcpy(document_ids, out->document_ids, n * sizeof(int32_t));
        memcpy(cu_seqlens, out->cu_seqlens, (segs + 1) * sizeof(int32_t));
        memcpy(segment_index, out->segment_index, segs * sizeof(int64_t));
        memcpy(segment_start, out->segment_start, segs * sizeof(int64_t));
        out->tokens = tokens, out->position_ids = position_ids;
        out->document_ids = document_ids, out->cu_seqlens = cu_seqlens;
        out->segment_index = segment_index, out->segment_start = segment_start;
        return 0;
    }
    /* On next()'s thread: laid straight into the caller's buffers. */
    dsc_pack_rows_t *p = &packer->rows, own = *p;
    p->tokens = tokens, p->position_ids = position_ids, p->document_ids = document_ids;
    p->cu_seqlens = cu_seqlens, p->segment_index = segment_index;
    p->segment_start = segment_start;
    int rc = dsc_packer_next(packer, out);
    p->tokens = own.tokens, p->position_ids = own.position_ids;
    p->document_ids = own.document_ids, p->cu_seqlens = own.cu_seqlens;
    p->segment_index = own.segment_index, p->segment_start = own.segment_start;
    return rc;
}

DSC_EXTERN int dsc_packer_next_held(dsc_packer_t *packer, dsc_packed_batch_t *out,
                                    dsc_pack_hold_t **hold) {
    if (packer == NULL || out == NULL || out->struct_size < PACKED_BATCH_V1 || hold == NULL)
        return DSC_EINVAL;
    *hold = NULL;
    dsc_pack_hold_t *h = calloc(1, sizeof *h);
    if (h == NULL)
        return DSC_ENOMEM;
    if (!packer->thread_started) { /* packed on this thread into buffers the hold then owns */
        dsc_pack_rows_t *p = &packer->rows, own = *p;
        int rc = dsc__pack_rows_init(&h->rows, own.rows, own.length, own.elem, own.cut);
        if (rc == 0) {
            p->tokens = h->rows.tokens, p->position_ids = h->rows.position_ids;
            p->document_ids = h->rows.document_ids, p->cu_seqlens = h->rows.cu_seqlens;
            p->segment_index = h->rows.segment_index, p->segment_start = h->rows.segment_start;
            p->segment_source = h->rows.segment_source;
            rc = dsc_packer_next(packer, out);
            p->tokens = own.tokens, p->position_ids = own.position_ids;
            p->document_ids = own.document_ids, p->cu_seqlens = own.cu_seqlens;
            p->segment_index = own.segment_index, p->segment_start = own.segment_start;
            p->segment_source = own.segment_source;
        }
        if (rc < 0) {
            dsc__pack_rows_free(&h->rows);
            free(h);
            return rc;
        }
        h->packer = packer;
        h->next = packer->holds;
        if (h->next != NULL)
            h->next->prev = h;
        packer->holds = h;
        *hold = h;
        return 0;
    }
    if (packer->error) {
        free(h);
        return packer->error;
    }
    pack_entry_t *e;
    int rc = take(packer, &e);
    if (rc < 0) {
        free(h);
        return rc;
    }
    give_meta(out, &e->meta);
    /* The producer writes e again only after the next take (count < ahead): set it now. */
    pthread_mutex_lock(&packer->lock);
    e->hold = h, h->entry = e;
    h->packer = packer;
    h->next = packer->holds;
    if (h->next != NULL)
        h->next->prev = h;
    packer->holds = h;
    pthread_mutex_unlock(&packer->lock);
    *hold = h;
    return 0;
}

DSC_EXTERN void dsc_packer_release(dsc_pack_hold_t *hold) {
    if (hold == NULL)
        return;
    dsc_packer_t *pk = hold->packer;
    if (pk != NULL) {
        pthread_mutex_lock(&pk->lock);
        if (hold->prev != NULL)
            hold->prev->next = hold->next;
        else
            pk->holds = hold->next;
        if (hold->next != NULL)
            hold->next->prev = hold->prev;
        if (hold->entry != NULL) { /* still the entry's buffers: the entry keeps them */
            hold->entry->hold = NULL;
        } else if (pk->n_spare < PACK_AHEAD_MAX + 1 && hold->rows.tokens != NULL) {
            pk->spare[pk->n_spare++] = hold->rows; /* reused by the producer */
            memset(&hold->rows, 0, sizeof hold->rows);
        }
        pthread_mutex_unlock(&pk->lock);
    }
    dsc__pack_rows_free(&hold->rows);
    free(hold);
}

DSC_EXTERN int dsc_packer_set_epoch(dsc_packer_t *packer, uint64_t epoch) {
    if (packer == NULL)
        return DSC_EINVAL;
    pause_producer(packer);
    if (packer->batch != NULL)
        dsc_batch_release(packer->batch);
    packer->batch = NULL;
    packer->doc = 0, packer->offset = 0, packer->skip_doc = 0, packer->skip_offset = 0;
    packer->at_eof = 0;
    int rc = dsc_loader_set_epoch(packer->loader, epoch);
    if (rc == 0) {
        packer->epoch = epoch, packer->step = 0;
        rc = save_inner(packer);
    }
    if (rc == 0)
        packer->error = 0;
    resume_producer(packer);
    return rc;
}

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Layout: "DSCP", version, cut, u16 world size saved on (0: not kept); length u32; rows u32;
 * field-name checksum u64; doc u32; inner length u32; offset u64; step u64; inner state; checksum
 * u64 of all before. */
DSC_EXTERN int dsc_packer_state_save(const dsc_packer_t *packer, void *buf, size_t cap) {
    if (packer == NULL || (buf == NULL && cap > 0))
        return DSC_EINVAL;
    dsc_packer_t *pk = (dsc_packer_t *)packer;
    pthread_mutex_lock(&pk->lock);
    int need = pk->state_len;
    if (need > 0 && cap >= (size_t)need)
        memcpy(buf, pk->state, (size_t)need);
    pthread_mutex_unlock(&pk->lock);
    return need;
}

/* The producer's side of the stream as a state (the point after the last batch made). Returns
 * the bytes written, or the bytes needed when cap is too small. */
static int state_live(const dsc_packer_t *packer, void *buf, size_t cap) {
    size_t need = PACK_STATE_HEAD + packer->inner_len + 8;
    if (cap < need)
        return (int)need;
    uint8_t *p = buf;
    memcpy(p, PACK_STATE_MAGIC, 4);
    /* Bytes 6-7: the world size it was saved on (0 in states saved before it was kept). */
    uint32_t world = packer->loader->cfg.opt.world_size;
    world = world > 0xffff ? 0xffff : world;
    /* Byte 5 bit 7: saved while an old world size's batches were still being packed. */
    p[4] = PACK_STATE_VERSION;
    p[5] = (uint8_t)(packer->rows.cut | (packer->carry_at < packer->carry_n ? 0x80 : 0));
    p[6] = (uint8_t)(world & 0xff), p[7] = (uint8_t)(world >> 8);
    put_u32(p + 8, packer->rows.length);
    put_u32(p + 12, packer->rows.rows);
    put_u64(p + 16, dsc_checksum(packer->field_name, strlen(packer->field_name)));
    /* With a loader batch held: that batch's start, and the document in it; without: the next
     * loader batch's start. */
    put_u32(p + 24, packer->batch ? packer->doc : packer->skip_doc);
    put_u32(p + 28, packer->inner_len);
    put_u64(p + 32, packer->batch ? packer->offset : packer->skip_offset);
    put_u64(p + 40, packer->at_eof ? UINT64_MAX : packer->step);
    memcpy(p + PACK_STATE_HEAD, packer->inner_state, packer->inner_len);
    put_u64(p + PACK_STATE_HEAD + packer->inner_len,
            dsc_checksum(p, PACK_STATE_HEAD + packer->inner_len));
    return (int)need;
}

DSC_EXTERN int dsc_packer_state_load(dsc_packer_t *packer, const void *buf, size_t len) {
    if (packer == NULL || buf == NULL)
        return DSC_EINVAL;
    const uint8_t *p = buf;
    const dsc_logger_t *log = packer->log;
    if (len < PACK_STATE_HEAD + 8 || memcmp(p, PACK_STATE_MAGIC, 4) != 0) {
        DSC_LOG(log, DSC_LOG_ERROR, "pack: state_load: not a packer state (%zu bytes)", len);
        return DSC_EBADSTATE;
    }
    uint32_t inner_len = get_u32(p + 28);
    if (p[4] != PACK_STATE_VERSION || inner_len > PACK_INNER_MAX ||
        len != PACK_STATE_HEAD + inner_len + 8 ||
        get_u64(p + PACK_STATE_HEAD + inner_len) != dsc_checksum(p, PACK_STATE_HEAD + inner_len)) {
        DSC_LOG(log, DSC_LOG_ERROR, "pack: state_load: damaged or another version (%zu bytes)",
                len);
        return DSC_EBADSTATE;
    }
    if (p[5] & 0x80) {
        DSC_LOG(log, DSC_LOG_ERROR,
                "pack: state_load: the state was saved while the batches left by a change of "
                "world size were still being packed: save again a few batches later");
        return DSC_EBADSTATE;
    }
    const char *what = NULL;
    uint64_t saved = 0, here = 0;
    if (get_u64(p + 16) != dsc_checksum(packer->field_name, strlen(packer->field_name)))
        what = "field";
    else if (get_u32(p + 8) != packer->rows.length)
        what = "length", saved = get_u32(p + 8), here = packer->rows.length;
    else if (get_u32(p + 12) != packer->rows.rows)
        what = "rows", saved = get_u32(p + 12), here = packer->rows.rows;
    else if (p[5] != packer->rows.cut)
        what = "cut", saved = p[5], here = (uint64_t)packer->rows.cut;
    uint32_t saved_world = (uint32_t)p[6] | (uint32_t)p[7] << 8;
    uint32_t world = packer->loader->cfg.opt.world_size;
    if (what == NULL && saved_world != 0 && saved_world != (world > 0xffff ? 0xffff : world)) {
        /* The ranks stand at different loader batches (their documents' lengths differ): one
         * rank's state does not say where the others are, so it cannot be re-split. */
        DSC_LOG(log, DSC_LOG_ERROR,
                "pack: state_load: a packed stream resumes on the world size it was saved on "
                "(%u ranks), not %u (docs/packing.md)",
                saved_world, world);
        return DSC_EBADSTATE;
    }
    if (what != NULL) {
        if (strcmp(what, "field") == 0)
            DSC_LOG(log, DSC_LOG_ERROR, "pack: state_load: the state packs another field than '%s'",
                    packer->field_name);
        else
            DSC_LOG(log, DSC_LOG_ERROR,
                    "pack: state_load: the state was saved with pack %s %llu, this packer has %llu",
                    what, (unsigned long long)saved, (unsigned long long)here);
        return DSC_EBADSTATE;
    }
    pause_producer(packer);
    int rc = dsc_loader_state_load(packer->loader, p + PACK_STATE_HEAD, inner_len);
    if (rc < 0) {
        resume_producer(packer);
        return rc;
    }
    if (packer->batch != NULL && packer->carry_at < packer->carry_n)
        dsc_batch_release(packer->batch); /* a temporary loader's */
    carry_clear(packer);
    if (packer->batch != NULL) /* the loader's state_load dropped its reference already */
        packer->batch = NULL;
    memcpy(packer->inner_state, p + PACK_STATE_HEAD, inner_len);
    packer->inner_len = inner_len;
    packer->skip_doc = get_u32(p + 24);
    packer->skip_offset = get_u64(p + 32);
    packer->doc = 0, packer->offset = 0;
    uint64_t step = get_u64(p + 40);
    packer->at_eof = step == UINT64_MAX;
    packer->step = packer->at_eof ? 0 : step;
    packer->epoch = packer->loader->stats.st.epoch;
    packer->error = 0;
    resume_producer(packer);
    return 0;
}

/* One old rank's state, checked against the packer's settings: its inner (loader) state, the
 * document and tokens of its batch already packed, 0; or DSC_EBADSTATE (logged). */
static int parse_old(const dsc_packer_t *pk, const uint8_t *p, size_t len, uint32_t old_world,
                     uint32_t r, uint32_t *inner_len, uint32_t *doc, uint64_t *offset) {
    const dsc_logger_t *log = pk->log;
    if (len < PACK_STATE_HEAD + 8 || memcmp(p, PACK_STATE_MAGIC, 4) != 0 ||
        p[4] != PACK_STATE_VERSION || (*inner_len = get_u32(p + 28)) > PACK_INNER_MAX ||
        len != PACK_STATE_HEAD + *inner_len + 8 ||
        get_u64(p + PACK_STATE_HEAD + *inner_len) !=
            dsc_checksum(p, PACK_STATE_HEAD + *inner_len)) {
        DSC_LOG(log, DSC_LOG_ERROR,
                "pack: state_load_world: state of old rank %u: not a packer "
                "state, damaged or another version (%zu bytes)",
                r, len);
        return DSC_EBADSTATE;
    }
    uint32_t world = (uint32_t)p[6] | (uint32_t)p[7] << 8;
    if (p[5] & 0x80 || world != old_world || (p[5] & 1) != pk->rows.cut ||
        get_u32(p + 8) != pk->rows.length || get_u32(p + 12) != pk->rows.rows ||
        get_u64(p + 16) != dsc_checksum(pk->field_name, strlen(pk->field_name)) ||
        get_u64(p + 40) == UINT64_MAX) {
        DSC_LOG(log, DSC_LOG_ERROR, "pack: state_load_world: state of old rank %u: %s", r,
                p[5] & 0x80 ? "saved while an earlier change of world size was still packed"
                : world != old_world            ? "saved on another world size than old_world"
                : get_u64(p + 40) == UINT64_MAX ? "saved at the end of an epoch (resume it "
                                                  "after the next batch)"
                                                : "saved with other pack settings (field, "
                                                  "length, rows or cut)");
        return DSC_EBADSTATE;
    }
    *doc = get_u32(p + 24);
    *offset = get_u64(p + 32);
    return 0;
}

/* The options of a temporary loader of an old rank of old_world ranks (rank set by the caller):
 * this loader's dataset, servers and fallback files; no auth_file, reports or field options. */
static void old_rank_options(const dsc_loader_t *l, uint32_t old_world, dsc_loader_options_t *lo) {
    *lo = l->cfg.opt;
    lo->dataset = l->cfg.dataset;
    lo->servers = l->cfg.servers_spec;
    lo->fallback_path = l->cfg.fallback;
    lo->auth_file = NULL, lo->job_name = NULL, lo->transport = NULL;
    lo->field_options = NULL, lo->field_option_count = 0;
    lo->sources = NULL, lo->n_sources = 0;
    lo->world_size = old_world;
    lo->ignore_rank_env = 1;
    lo->report_seconds = -1;
    lo->stats_log_seconds = 0;
    lo->prefetch_batches = 2;
}

int dsc__packer_state_after_rows(const dsc_packer_t *like, const void *state, size_t len,
                                 uint32_t old_world, uint32_t old_rank, uint32_t rows, void *out,
                                 size_t cap) {
    if (like == NULL || state == NULL || out == NULL || old_world == 0 || old_rank >= old_world)
        return DSC_EINVAL;
    if (rows == 0) { /* nothing of the batch used: the state as it is */
        if (len > cap)
            return DSC_ETOOLARGE;
        memcpy(out, state, len);
        return (int)len;
    }
    dsc_loader_options_t lo;
    old_rank_options(like->loader, old_world, &lo);
    lo.rank = old_rank;
    dsc_pack_options_t po;
    dsc_pack_options_init(&po, sizeof po);
    po.field = like->field_name;
    po.length = like->rows.length;
    po.rows = like->rows.rows;
    po.cut = like->rows.cut;
    po.on_caller_thread = 1;
    dsc_loader_t *tmp = NULL;
    dsc_packer_t *tpk = NULL;
    dsc_pack_rows_t p;
    memset(&p, 0, sizeof p);
    int rc = dsc_loader_create(&lo, &tmp);
    if (rc == 0)
        rc = dsc_packer_create(tmp, &po, &tpk);
    if (rc == 0)
        rc = dsc_packer_state_load(tpk, state, len);
    if (rc == 0) /* the used rows alone: rows are filled in order, so these are the first rows
                    of the batch the state starts, and the stream stands after them */
        rc = dsc__pack_rows_init(&p, rows, like->rows.length, like->rows.elem, like->rows.cut);
    if (rc == 0) {
        dsc_packed_batch_t pb;
        memset(&pb, 0, sizeof pb);
        pb.struct_size = sizeof pb;
        double busy;
        rc = produce(tpk, &p, &pb, &busy);
        if (rc == 0 && pb.rows < rows)
            rc = DSC_EBADSTATE; /* the state's batch had fewer rows than were used */
    }
    if (rc == 0) { /* where the stream stands now (state_save gives the last next()'s) */
        rc = state_live(tpk, out, cap);
        if (rc > 0 && (size_t)rc > cap)
            rc = DSC_ETOOLARGE;
    }
    if (rc < 0)
        DSC_LOG(like->log, DSC_LOG_ERROR,
                "pack: the state of old rank %u of %u after %u row(s) of its batch: %s", old_rank,
                old_world, rows, dsc_strerror(rc));
    dsc__pack_rows_free(&p);
    dsc_packer_destroy(tpk);
    dsc_loader_destroy(tmp);
    return rc;
}

DSC_EXTERN int dsc_packer_state_load_world(dsc_packer_t *packer, const void *const *states,
                                           const size_t *lens, uint32_t old_world) {
    if (packer == NULL || states == NULL || lens == NULL || old_world == 0 || old_world > 0xffff)
        return DSC_EINVAL;
    dsc_packer_t *pk = packer;
    dsc_loader_t *l = pk->loader;
    const dsc_logger_t *log = pk->log;
    uint32_t world = l->cfg.opt.world_size ? l->cfg.opt.world_size : 1;
    uint32_t rank = l->cfg.opt.rank;
    if (world == old_world) /* every rank's own state */
        return dsc_packer_state_load(packer, states[rank], lens[rank]);
    if ((old_world + world - 1) / world > PACK_CARRY_MAX) {
        DSC_LOG(log, DSC_LOG_ERROR, "pack: state_load_world: more than %u old ranks per new rank",
                PACK_CARRY_MAX);
        return DSC_EINVAL;
    }
    for (uint32_t r = 0; r < old_world; r++) {
        uint32_t inner_len, doc;
        uint64_t offset;
        if (states[r] == NULL ||
            parse_old(pk, states[r], lens[r], old_world, r, &inner_len, &doc, &offset) < 0)
            return states[r] == NULL ? DSC_EINVAL : DSC_EBADSTATE;
    }
    /* The old ranks' loaders, each at its own batch (their documents' lengths differ, so they
     * stand at different steps of the same epoch): this rank packs the rest of the batches of
     * old ranks r with r % world == rank up to the furthest step any old rank reached, then its
     * loader re-splits what comes after that step over the new ranks (docs/order.md). */
    dsc_loader_options_t lo;
    dsc_source_options_t *so = NULL; /* over a mixture: the temporary loaders' sources */
    if (l->mix_options != NULL) {    /* old ranks' loaders over the same mixture */
        so = calloc(PACK_MAX_SOURCES, sizeof *so);
        int bad = so == NULL ? DSC_ENOMEM : l->mix_options(l, &lo, so, PACK_MAX_SOURCES);
        if (bad < 0) {
            free(so);
            return bad;
        }
        lo.world_size = old_world;
        lo.prefetch_batches = 2;
    } else {
        old_rank_options(l, old_world, &lo);
    }
    struct pack_carry got[PACK_CARRY_MAX];
    uint32_t n = 0;
    uint64_t step_max = 0, epoch = 0;
    uint8_t *after = malloc(PACK_INNER_MAX); /* a loader state: a mixture's is large */
    int after_len = -1, rc = 0;
    uint64_t *step_of = calloc(old_world, sizeof *step_of);
    if (step_of == NULL || after == NULL) {
        free(step_of);
        free(after);
        free(so);
        return DSC_ENOMEM;
    }
    for (uint32_t r = 0; r < old_world && rc == 0; r++) {
        const uint8_t *p = states[r];
        uint32_t inner_len = get_u32(p + 28);
        lo.rank = r;
        dsc_loader_t *tmp = NULL;
        dsc_batch_t *b = NULL;
        rc = dsc_loader_create(&lo, &tmp);
        if (rc == 0)
            rc = dsc_loader_state_load(tmp, p + PACK_STATE_HEAD, inner_len);
        if (rc == 0)
            rc = dsc_loader_next(tmp, &b);
        if (rc == 0) {
            dsc_stats_t st;
            memset(&st, 0, sizeof st);
            st.struct_size = sizeof st;
            dsc_loader_stats(tmp, &st);
            if (r > 0 && st.epoch != epoch) {
                DSC_LOG(log, DSC_LOG_ERROR,
                        "pack: state_load_world: old ranks 0 and %u stand in different epochs "
                        "(%llu, %llu): resume from states saved a few batches later",
                        r, (unsigned long long)epoch, (unsigned long long)st.epoch);
                rc = DSC_EBADSTATE;
            }
            epoch = st.epoch;
            step_of[r] = dsc_batch_step(b);
            if (rc == 0 && (after_len < 0 || step_of[r] > step_max)) {
                step_max = step_of[r];
                after_len = dsc_loader_state_save(tmp, after, PACK_INNER_MAX);
                if (after_len > PACK_INNER_MAX)
                    after_len = DSC_ETOOLARGE;
                if (after_len < 0)
                    rc = after_len;
            }
        } else if (rc == DSC_EOF) {
            DSC_LOG(log, DSC_LOG_ERROR,
                    "pack: state_load_world: old rank %u's state is at the end of its epoch: "
                    "resume from states saved a few batches later",
                    r);
            rc = DSC_EBADSTATE;
        } else {
            DSC_LOG(log, DSC_LOG_ERROR, "pack: state_load_world: old rank %u of %u: %s", r,
                    old_world, dsc_strerror(rc));
        }
        if (rc == 0 && r % world == rank) {
            dsc_batch_retain(b);
            got[n].loader = tmp, got[n].first = b;
            got[n].skip_doc = get_u32(p + 24), got[n].skip_offset = get_u64(p + 32);
            got[n].more = 0;
            n++;
        } else {
            dsc_loader_destroy(tmp);
        }
    }
    for (uint32_t i = 0; i < n; i++) /* up to the furthest step: each old rank's next batches */
        got[i].more = step_max - step_of[got[i].loader->cfg.opt.rank];
    free(step_of);
    if (rc == 0) {
        pause_producer(pk);
        rc = dsc_loader_state_load(l, after, (size_t)after_len);
        if (rc == 0) {
            if (pk->batch != NULL && pk->carry_at < pk->carry_n)
                dsc_batch_release(pk->batch);
            carry_clear(pk);
            pk->batch = NULL;
            memcpy(pk->carry, got, n * sizeof got[0]);
            pk->carry_n = n, pk->carry_at = 0;
            n = 0;
            pk->skip_doc = 0, pk->skip_offset = 0;
            pk->doc = 0, pk->offset = 0;
            pk->at_eof = 0;
            pk->step = 0;
            pk->epoch = epoch;
            pk->error = 0;
            rc = save_inner(pk);
        }
        resume_producer(pk);
    }
    for (uint32_t i = 0; i < n; i++) { /* not taken: a failure */
        dsc_batch_release(got[i].first);
        dsc_loader_destroy(got[i].loader);
    }
    free(after);
    free(so);
    return rc;
}

DSC_EXTERN int dsc_packer_stats(const dsc_packer_t *packer, dsc_pack_stats_t *out) {
    if (packer == NULL || out == NULL || out->struct_size < sizeof *out)
        return DSC_EINVAL;
    dsc_packer_t *pk = (dsc_packer_t *)packer;
    pthread_mutex_lock(&pk->lock);
    dsc_pack_stats_t st = packer->st;
    pthread_mutex_unlock(&pk->lock);
    st.struct_size = out->struct_size;
    st.efficiency = st.slots ? (double)st.tokens / (double)st.slots : 0.0;
    *out = st;
    return 0;
}
