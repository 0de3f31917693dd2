/* Reader: random access to a dataset by sample index (map-style), one batch per request. A
 * loader made without a plan (loader.h) fetches, verifies and decodes the chunks the caller's
 * indices need, on its I/O threads and the caller's thread, and the loader's own collation fills
 * a batch slot; decoded chunks stay in a bounded LRU cache for later requests. Calls down into
 * loader.c, batch.c, decode.c, route.c, chunks.c and plan.c; nothing calls back up. */
#include "batch.h"
#include "decode.h"
#include "loader.h"
#include "pipeline.h"
#include "plan.h"
#include "route.h"
#include "util.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Owner value of a slot a request is collating into (anything but SLOT_FREE). */
#define READER_SLOT_OWNER (UINT64_MAX - 1)

/* Whole chunk or sample ranges (RANGE, proto/range.h), chosen per chunk as it is fetched:
 *   - a request that needs at least RANGE_REQUEST_SHARE of a chunk's samples takes it whole (a
 *     sequential sampler's batches, the loader's own kind of access);
 *   - otherwise ranges once the chunks this reader fetched were found to be used below
 *     RANGE_USE_SHARE before leaving its cache: a whole chunk then brings more than 1 / 0.8 =
 *     1.25x the bytes its samples need, the bytes of samples never asked for before eviction.
 *     "Used" is the share of a chunk's samples asked for between its first fetch and the
 *     eviction of the last entry holding any of it (whole or ranged: the same measure, so a
 *     reader fetching ranges still sees whether whole chunks would now pay), averaged over the
 *     last ~RANGE_USE_WINDOW evictions.
 * Until a first eviction the share is predicted as cache_bytes / the dataset's decoded bytes:
 * under a random sampler a chunk stays cached while about that share of the dataset is asked
 * for, so about that share of its samples is used (independently of how many ranks split the
 * epoch; a request needing most of a chunk, as in sequential access, takes it whole anyway). A
 * cache that holds the dataset fetches whole chunks, each once, and never evicts (a 1-rank
 * random permutation stays at 1x the dataset per epoch, 4 ranks at 4x in the first epoch and 0
 * after: each rank keeps its chunks); a cache of a quarter of the dataset or less fetches ranges
 * from the first request (4 ranks: ~1x in all, every epoch). */
#define RANGE_REQUEST_SHARE 0.5
#define RANGE_USE_SHARE 0.8
#define RANGE_USE_WINDOW 16

/* The calling thread's last dsc_reader_create failure, in words. */
static _Thread_local char create_error[1024];

struct dsc_reader {
    dsc_loader_t *loader;
    dsc_order_t *order; /* dataset order (no shuffle): locates a sample's chunk */
    uint64_t samples;
    uint64_t epoch;     /* image crops and flips are keyed by (seed, epoch, index) */
    uint32_t max_batch; /* options.batch_size: samples one request may name */
    /* One request at a time (call_lock); the step and worker context are its scratch. */
    pthread_mutex_t call_lock;
    dsc_step_t step;
    dsc_worker_ctx_t ctx;
    uint64_t requests; /* batches made (batch step numbers) */
    /* Cached chunks: entries no request references any more (refs 0), still in the loader's
     * chunk table so that a later request finds them, evicted least recently used first while
     * the table holds more than cache_bytes. Under the loader's lock. */
    dsc_chunk_ent_t **lru;
    uint64_t *lru_used; /* when each was last needed (tick) */
    uint32_t lru_count, lru_cap;
    uint64_t tick;
    uint64_t *fetched; /* bit per chunk: fetched since the epoch was set (refetch count) */
    /* Sample ranges (RANGE_* above). Under the loader's lock. */
    uint64_t *asked;   /* bit per sample: asked for since its chunk was last fetched */
    double use_share;  /* average share of a chunk's samples used before eviction */
    uint64_t use_seen; /* evictions measured */
    int ranged_mode;   /* 1: fetch sample ranges (logged when it changes) */
    uint64_t ranged_fetches, whole_fetches;
    dsc_sample_loc_t *locs; /* max_batch: the request's samples, located */
    uint32_t *perm;         /* max_batch: request positions sorted by (chunk, sample) */
    uint32_t *need;         /* max_batch: one chunk's distinct samples a request needs */
    /* Why the last failing call failed (dsc_reader_last_error). Under call_lock. */
    char err_text[1024];
};

static void set_error(dsc_reader_t *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err_text, sizeof r->err_text, fmt, ap);
    va_end(ap);
    DSC_LOG(&r->loader->cfg.log, DSC_LOG_ERROR, "%s", r->err_text);
}

/* The loader's own account of a failure (its last ERROR line), else the code's words. */
static void set_error_from_loader(dsc_reader_t *r, int rc) {
    char text[sizeof r->err_text];
    if (dsc_loader_last_error(r->loader, text, sizeof text) <= 0)
        snprintf(text, sizeof text, "%s", dsc_strerror(rc));
    snprintf(r->err_text, sizeof r->err_text, "%s", text);
}

/* Options a reader does not use but a caller may have set meaning something: refused rather
 * than ignored, so that nobody believes the reader shuffles or splits ranks. */
static const char *refused_option(const dsc_loader_options_t *o) {
    size_t n = o->struct_size;
#define HAS(field) (n >= offsetof(dsc_loader_options_t, field) + sizeof o->field)
    if (o->device != -1)
        return "device: a reader hands out host batches (copy them to the device yourself)";
    if (o->rank != 0 || o->world_size != 1)
        return "rank / world_size: a reader reads the indices it is given; split them across "
               "ranks with your sampler (e.g. torch DistributedSampler)";
    if (o->shuffle_window != 0)
        return "shuffle_window: a reader reads the indices it is given in that order; shuffle "
               "with your sampler";
    if (o->drop_last != 0)
        return "drop_last: a reader makes one batch of the indices it is given";
    if (HAS(order) && o->order != DSC_ORDER_LOCAL)
        return "order: a reader has no epoch order of its own";
    if (HAS(epochs) && o->epochs != 0)
        return "epochs: a reader has no epoch plan (dsc_reader_set_epoch sets the epoch the image "
               "crops are keyed by)";
#undef HAS
    return NULL;
}

DSC_EXTERN int dsc_reader_create(const dsc_loader_options_t *options, dsc_reader_t **out) {
    create_error[0] = '\0';
    if (options == NULL || out == NULL ||
        options->struct_size < offsetof(dsc_loader_options_t, cache_bytes)) {
        snprintf(create_error, sizeof create_error, "invalid reader options: %s",
                 options == NULL || out == NULL
                     ? "NULL options or out"
                     : "struct_size smaller than the first dsc_loader_options_t");
        return DSC_EINVAL;
    }
    dsc_loader_options_t o;
    dsc_loader_options_init2(&o, sizeof o);
    memcpy(&o, options, options->struct_size < sizeof o ? options->struct_size : sizeof o);
    o.struct_size = options->struct_size < sizeof o ? options->struct_size : sizeof o;
    const char *bad = refused_option(&o);
    if (bad != NULL) {
        /* Said through the loader's create error (dsc_loader_last_error(NULL, ...)) and the
         * log callback. */
        dsc_logger_t log;
        dsc__logger_init(&log, o.log_fn, o.log_ctx, o.log_level);
        DSC_LOG(&log, DSC_LOG_ERROR, "invalid reader options: %s", bad);
        snprintf(create_error, sizeof create_error, "invalid reader options: %s", bad);
        return DSC_EINVAL;
    }
    dsc_reader_t *r = calloc(1, sizeof *r);
    if (r == NULL)
        return DSC_ENOMEM;
    pthread_mutex_init(&r->call_lock, NULL);
    int rc = dsc__loader_create_reader(&o, &r->loader);
    if (rc < 0) {
        dsc_loader_last_error(NULL, create_error, sizeof create_error);
        pthread_mutex_destroy(&r->call_lock);
        free(r);
        return rc;
    }
    dsc_loader_t *l = r->loader;
    r->samples = l->cfg.samples;
    r->max_batch = l->cfg.opt.batch_size;
    rc = dsc__order_create(l->cfg.manifest, 0, 0, 0, &r->order);
    uint64_t chunks = rc == 0 ? dsc__order_chunks(r->order) : 0;
    if (rc == 0) {
        pthread_mutex_lock(&l->lock);
        rc = dsc__chunk_table_init(&l->chunks, chunks);
        pthread_mutex_unlock(&l->lock);
    }
    if (rc == 0) {
        rc = DSC_ENOMEM;
        r->fetched = calloc(chunks / 64 + 1, sizeof(uint64_t));
        r->step.ids = calloc(r->max_batch, sizeof(uint64_t));
        r->step.src = calloc(r->max_batch, sizeof(dsc_chunk_ent_t *));
        r->step.in_chunk = calloc(r->max_batch, sizeof(uint32_t));
        r->asked = calloc(r->samples / 64 + 1, sizeof(uint64_t));
        r->locs = calloc(r->max_batch, sizeof *r->locs);
        r->perm = calloc(r->max_batch, sizeof *r->perm);
        r->need = calloc(r->max_batch, sizeof *r->need);
        if (r->fetched != NULL && r->step.ids != NULL && r->step.src != NULL &&
            r->step.in_chunk != NULL && r->asked != NULL && r->locs != NULL && r->perm != NULL &&
            r->need != NULL)
            rc = 0;
    }
    if (rc < 0) {
        snprintf(create_error, sizeof create_error, "reader: dataset %s: %s", l->cfg.dataset,
                 dsc_strerror(rc));
        dsc_reader_destroy(r);
        return rc;
    }
    uint64_t dataset_raw = dsc__chunk_raw_estimate(l->cfg.manifest, r->samples);
    r->use_share = dataset_raw > 0 ? (double)l->cfg.cache_bytes / (double)dataset_raw : 1.0;
    r->use_share = r->use_share < 1.0 ? r->use_share : 1.0;
    r->ranged_mode = r->use_share < RANGE_USE_SHARE;
    DSC_LOG(&l->cfg.log, DSC_LOG_INFO,
            "reader: dataset %s (%llu samples), batches of up to %u, cache %llu bytes (%.0f%% of "
            "the dataset: fetching %s)",
            l->cfg.dataset, (unsigned long long)r->samples, r->max_batch,
            (unsigned long long)l->cfg.opt.cache_bytes, 100.0 * r->use_share,
            r->ranged_mode ? "sample ranges where a request needs less than half a chunk"
                           : "whole chunks");
    *out = r;
    return 0;
}

DSC_EXTERN void dsc_reader_destroy(dsc_reader_t *reader) {
    if (reader == NULL)
        return;
    dsc_loader_destroy(reader->loader); /* frees the chunk table, cached entries included */
    dsc__order_destroy(reader->order);
    free(reader->lru);
    free(reader->lru_used);
    free(reader->fetched);
    free(reader->asked);
    free(reader->locs);
    free(reader->perm);
    free(reader->need);
    free(reader->step.ids);
    free(reader->step.src);
    free(reader->step.in_chunk);
    free(reader->ctx.scratch);
    dsc__image_ctx_destroy(reader->ctx.image);
    pthread_mutex_destroy(&reader->call_lock);
    free(reader);
}

DSC_EXTERN uint64_t dsc_reader_len(const dsc_reader_t *reader) {
    return reader ? reader->samples : 0;
}

DSC_EXTERN int dsc_reader_set_epoch(dsc_reader_t *reader, uint64_t epoch) {
    if (reader == NULL)
        return DSC_EINVAL;
    pthread_mutex_lock(&reader->call_lock);
    reader->epoch = epoch;
    pthread_mutex_lock(&reader->loader->lock);
    memset(reader->fetched, 0, (dsc__order_chunks(reader->order) / 64 + 1) * sizeof(uint64_t));
    pthread_mutex_unlock(&reader->loader->lock);
    pthread_mutex_unlock(&reader->call_lock);
    return 0;
}

DSC_EXTERN uint32_t dsc_reader_field_count(const dsc_reader_t *reader) {
    return reader ? dsc_loader_field_count(reader->loader) : 0;
}

DSC_EXTERN int dsc_reader_field(const dsc_reader_t *reader, uint32_t field, dsc_field_info_t *out) {
    return reader ? dsc_loader_field(reader->loader, field, out) : DSC_ERANGE;
}

DSC_EXTERN const char *dsc_reader_meta(const dsc_reader_t *reader) {
    return reader ? dsc_loader_meta(reader->loader) : NULL;
}

DSC_EXTERN int dsc_reader_stats(const dsc_reader_t *reader, dsc_stats_t *out) {
    return reader ? dsc_loader_stats(reader->loader, out) : DSC_EINVAL;
}

DSC_EXTERN int dsc_reader_last_error(const dsc_reader_t *reader, char *buf, size_t cap) {
    if (reader == NULL) {
        if (buf != NULL && cap > 0)
            snprintf(buf, cap, "%s", create_error);
        return (int)strlen(create_error);
    }
    dsc_reader_t *r = (dsc_reader_t *)(uintptr_t)reader;
    char text[sizeof r->err_text];
    pthread_mutex_lock(&r->call_lock);
    snprintf(text, sizeof text, "%s", r->err_text);
    pthread_mutex_unlock(&r->call_lock);
    if (buf != NULL && cap > 0)
        snprintf(buf, cap, "%s", text);
    return (int)strlen(text);
}

/* ---- Cache -------------------------------------------------------------------------------- */

static void lru_remove_at(dsc_reader_t *r, uint32_t i) {
    r->lru[i] = r->lru[r->lru_count - 1];
    r->lru_used[i] = r->lru_used[r->lru_count - 1];
    r->lru_count--;
}

/* A request needs ent again: it leaves the list of unreferenced entries. Under lock. */
static void lru_take(dsc_reader_t *r, dsc_chunk_ent_t *ent) {
    for (uint32_t i = 0; i < r->lru_count; i++)
        if (r->lru[i] == ent) {
            lru_remove_at(r, i);
            return;
        }
}

/* No request references ent any more: it stays cached, evictable. Returns 0 or DSC_ENOMEM
 * (then it stays in the table, not evictable, until destroy). Under lock. */
static int lru_put(dsc_reader_t *r, dsc_chunk_ent_t *ent) {
    if (r->lru_count == r->lru_cap) {
        uint32_t cap = r->lru_cap ? r->lru_cap * 2 : 64;
        dsc_chunk_ent_t **n = realloc(r->lru, cap * sizeof *n);
        if (n != NULL)
            r->lru = n;
        uint64_t *u = n != NULL ? realloc(r->lru_used, cap * sizeof *u) : NULL;
        if (u == NULL)
            return DSC_ENOMEM; /* not evictable: it stays in the table until destroy */
        r->lru_used = u;
        r->lru_cap = cap;
    }
    r->lru[r->lru_count] = ent;
    r->lru_used[r->lru_count] = r->tick;
    r->lru_count++;
    return 0;
}

/* The last entry holding any of ent's chunk leaves the cache: the share of the chunk's samples
 * asked for since its first fetch joins the average, which may switch the fetch mode. Under
 * lock. */
static void use_observe(dsc_reader_t *r, const dsc_chunk_ent_t *ent) {
    uint64_t used = 0;
    for (uint64_t i = ent->first_index; i < ent->first_index + ent->whole_samples; i++) {
        uint64_t *word = &r->asked[i / 64];
        used += (*word >> (i % 64)) & 1;
        *word &= ~(1ull << (i % 64));
    }
    double share = ent->whole_samples ? (double)used / ent->whole_samples : 1.0;
    r->use_seen++;
    r->use_share += (share - r->use_share) /
                    (double)(r->use_seen < RANGE_USE_WINDOW ? r->use_seen : RANGE_USE_WINDOW);
    int ranged = r->use_share < RANGE_USE_SHARE;
    if (ranged != r->ranged_mode) {
        r->ranged_mode = ranged;
        DSC_LOG(&r->loader->cfg.log, DSC_LOG_INFO,
                "reader: dataset %s: chunks used %.0f%% of their samples before eviction: "
                "fetching %s",
                r->loader->cfg.dataset, 100.0 * r->use_share,
                ranged ? "sample ranges (RANGE) where a request needs less than half a chunk"
                       : "whole chunks");
    }
}

/* Drops the least recently used decoded entries while the table holds more than cache_bytes.
 * Entries still on their way (a request that failed left them) wait until decoded. Under
 * lock. */
static void lru_evict(dsc_reader_t *r) {
    dsc_loader_t *l = r->loader;
    while (l->chunks.held_bytes > l->cfg.cache_bytes) {
        uint32_t best = UINT32_MAX;
        for (uint32_t i = 0; i < r->lru_count; i++)
            if (r->lru[i]->state == CH_READY &&
                (best == UINT32_MAX || r->lru_used[i] < r->lru_used[best]))
                best = i;
        if (best == UINT32_MAX)
            return;
        dsc_chunk_ent_t *ent = r->lru[best];
        lru_remove_at(r, best);
        use_observe(r, ent);
        dsc__chunk_unlink(&l->chunks, ent);
        dsc__chunk_free(&l->cfg.pool, ent);
    }
}

/* ---- Requests ----------------------------------------------------------------------------- */

/* Queues a new entry for chunk loc on the peer placement picks: the whole chunk, or (sel, n > 0)
 * only its samples sel[0..n), increasing. Under lock. Returns the entry, or NULL with *rc
 * (DSC_ENOMEM, DSC_EUNAVAIL / DSC_EALLDOWN: no server for it). */
static dsc_chunk_ent_t *chunk_fetch(dsc_reader_t *r, const dsc_sample_loc_t *loc,
                                    uint64_t first_index, const uint32_t *sel, uint32_t n,
                                    int *rc) {
    dsc_loader_t *l = r->loader;
    dsc_chunk_ent_t *ent = calloc(1, sizeof *ent);
    if (ent == NULL || (n > 0 && (ent->sel = malloc(n * sizeof *sel)) == NULL)) {
        free(ent);
        *rc = DSC_ENOMEM;
        return NULL;
    }
    ent->gid = loc->chunk;
    ent->shard = loc->shard;
    ent->shard_chunk = loc->shard_chunk;
    ent->whole_samples = loc->chunk_samples;
    ent->first_index = first_index;
    ent->samples = n > 0 ? n : loc->chunk_samples;
    if (n > 0) {
        memcpy(ent->sel, sel, n * sizeof *sel);
        for (uint32_t k = 0; k < n; k++)
            ent->sel_spans += k == 0 || sel[k] != sel[k - 1] + 1;
        r->ranged_fetches++;
    } else {
        r->whole_fetches++;
    }
    ent->raw_len = dsc__chunk_raw_estimate(l->cfg.manifest, ent->samples);
    if (l->cfg.var_count > 0) /* an estimate until it arrives */
        ent->raw_min = dsc_schema_chunk_min(&l->cfg.manifest->schema, ent->samples);
    ent->state = CH_QUEUED;
    ent->order = r->tick;
    ent->epoch = r->epoch;
    int peer = dsc__route_chunk(l, ent);
    if (peer < 0) {
        free(ent->sel);
        free(ent);
        *rc = l->net.members.count > 1 ? DSC_EALLDOWN : DSC_EUNAVAIL;
        return NULL;
    }
    uint64_t *word = &r->fetched[loc->chunk / 64];
    /* Dropped from the cache since this epoch first needed it. Sample ranges are not counted:
     * they bring only samples asked for now. */
    if ((*word & (1ull << (loc->chunk % 64))) && n == 0)
        l->stats.st.refetches++;
    *word |= 1ull << (loc->chunk % 64);
    dsc__peer_push(l, (uint32_t)peer, ent);
    dsc__chunk_insert(&l->chunks, ent);
    pthread_cond_broadcast(&l->io_cv);
    return ent;
}

/* qsort's comparison of request positions by (chunk, sample in chunk): the locations sorted. */
static _Thread_local const dsc_sample_loc_t *sort_locs;

static int loc_cmp(const void *a, const void *b) {
    const dsc_sample_loc_t *x = &sort_locs[*(const uint32_t *)a];
    const dsc_sample_loc_t *y = &sort_locs[*(const uint32_t *)b];
    if (x->chunk != y->chunk)
        return x->chunk < y->chunk ? -1 : 1;
    return x->in_chunk < y->in_chunk ? -1 : x->in_chunk > y->in_chunk;
}

/* Whether the sorted list need[0..n) is held by ent (whole, or all in its sel). */
static int ent_holds(const dsc_chunk_ent_t *ent, const uint32_t *need, uint32_t n) {
    if (ent->sel == NULL)
        return 1;
    uint32_t j = 0;
    for (uint32_t k = 0; k < n; k++) {
        while (j < ent->samples && ent->sel[j] < need[k])
            j++;
        if (j == ent->samples || ent->sel[j] != need[k])
            return 0;
    }
    return 1;
}

/* Finds or fetches, for every position of the request, the entry holding its sample: per chunk,
 * a cached entry holding every sample the request needs of it, else a new one (whole, or the
 * needed samples only: RANGE_* above; a cached ranged entry that lacks some is dropped). Sets
 * step.src / in_chunk (the sample's index in the chunk: mapped into a ranged entry once it is
 * decoded). Under lock. Returns 0 or an error (the entries taken are in step.src). */
static int step_build(dsc_reader_t *r, const uint64_t *indices, uint32_t count) {
    dsc_loader_t *l = r->loader;
    for (uint32_t k = 0; k < count; k++) {
        int rc = dsc__order_locate(r->order, indices[k], &r->locs[k]);
        if (rc < 0)
            return rc;
        r->perm[k] = k;
        r->asked[indices[k] / 64] |= 1ull << (indices[k] % 64);
    }
    sort_locs = r->locs;
    qsort(r->perm, count, sizeof r->perm[0], loc_cmp);
    for (uint32_t a = 0; a < count;) {
        const dsc_sample_loc_t *loc = &r->locs[r->perm[a]];
        uint32_t b = a, n = 0;
        for (; b < count && r->locs[r->perm[b]].chunk == loc->chunk; b++)
            if (n == 0 || r->need[n - 1] != r->locs[r->perm[b]].in_chunk)
                r->need[n++] = r->locs[r->perm[b]].in_chunk;
        dsc_chunk_ent_t *ent = dsc__chunk_find(&l->chunks, loc->chunk);
        if (ent != NULL && !ent_holds(ent, r->need, n)) {
            if (ent->refs != 0 || ent->state != CH_READY)
                return l->error ? l->error : DSC_EPROTO; /* only after a failure */
            lru_take(r, ent); /* the samples it held were used: its chunk's count goes on */
            dsc__chunk_unlink(&l->chunks, ent);
            dsc__chunk_free(&l->cfg.pool, ent);
            ent = NULL;
        }
        int rc = 0;
        if (ent == NULL) {
            int ranged = r->ranged_mode && (double)n < RANGE_REQUEST_SHARE * loc->chunk_samples;
            uint64_t first_index = indices[r->perm[a]] - loc->in_chunk;
            ent = chunk_fetch(r, loc, first_index, r->need, ranged ? n : 0, &rc);
            if (ent == NULL)
                return rc;
        } else if (ent->refs == 0) {
            lru_take(r, ent);
        }
        for (uint32_t k = a; k < b; k++) {
            uint32_t pos = r->perm[k];
            ent->refs++;
            r->step.ids[pos] = indices[pos];
            r->step.src[pos] = ent;
            r->step.in_chunk[pos] = r->locs[pos].in_chunk;
        }
        a = b;
    }
    return 0;
}

/* Once every entry is decoded: a position served by a ranged entry takes its sample's place in
 * it (binary search of sel). Under lock. */
static void step_map_ranges(dsc_reader_t *r, uint32_t count) {
    for (uint32_t k = 0; k < count; k++) {
        const dsc_chunk_ent_t *ent = r->step.src[k];
        if (ent->sel == NULL)
            continue;
        uint32_t lo = 0, hi = ent->samples, want = r->step.in_chunk[k];
        while (lo + 1 < hi) {
            uint32_t mid = lo + (hi - lo) / 2;
            if (ent->sel[mid] <= want)
                lo = mid;
            else
                hi = mid;
        }
        r->step.in_chunk[k] = lo; /* ent_holds made sure sel[lo] == want */
    }
}

/* Drops the request's references to its first `count` entries (they stay cached). Under
 * lock. */
static void step_unref(dsc_reader_t *r, uint32_t count) {
    for (uint32_t k = 0; k < count; k++) {
        dsc_chunk_ent_t *ent = r->step.src[k];
        r->step.src[k] = NULL;
        if (ent != NULL && --ent->refs == 0)
            (void)lru_put(r, ent);
    }
    lru_evict(r);
}

/* Waits until every entry of the step is decoded, decoding received chunks on this thread
 * (the reader has no decode threads). Under lock. Returns 0 or the loader's error. */
static int step_wait(dsc_reader_t *r, uint32_t count) {
    dsc_loader_t *l = r->loader;
    uint32_t scan = 0;
    for (;;) {
        while (scan < count && r->step.src[scan]->state == CH_READY)
            scan++;
        if (scan == count)
            break;
        if (l->error)
            return l->error;
        if (dsc__worker_pass(l, &r->ctx))
            continue;
        l->work.consumer_waiting = 1;
        pthread_cond_wait(&l->cons_cv, &l->lock);
        l->work.consumer_waiting = 0;
    }
    return l->error;
}

DSC_EXTERN int dsc_reader_get(dsc_reader_t *reader, const uint64_t *indices, size_t n,
                              dsc_batch_t **out) {
    if (reader == NULL || out == NULL || (indices == NULL && n > 0))
        return DSC_EINVAL;
    dsc_reader_t *r = reader;
    dsc_loader_t *l = r->loader;
    pthread_mutex_lock(&r->call_lock);
    r->err_text[0] = '\0';
    int rc = 0;
    if (n == 0 || n > r->max_batch) {
        set_error(r,
                  "reader: dataset %s: %zu indices in one request; a request names 1 to %u "
                  "(batch_size: the most samples a reader batch holds)",
                  l->cfg.dataset, n, r->max_batch);
        pthread_mutex_unlock(&r->call_lock);
        return DSC_EINVAL;
    }
    for (size_t k = 0; k < n; k++)
        if (indices[k] >= r->samples) {
            set_error(r,
                      "reader: dataset %s: index %llu (position %zu of the request) is out of "
                      "range: the dataset has %llu samples (0 .. %llu)",
                      l->cfg.dataset, (unsigned long long)indices[k], k,
                      (unsigned long long)r->samples, (unsigned long long)(r->samples - 1));
            pthread_mutex_unlock(&r->call_lock);
            return DSC_ERANGE;
        }
    double t_start = dsc_now_s();
    uint32_t count = (uint32_t)n;
    dsc_batch_slot_t *slot = NULL;
    pthread_mutex_lock(&l->lock);
    rc = l->error;
    if (rc == 0)
        rc = dsc__slots_make_room(l); /* DSC_EHELD past max_held_bytes (logged) */
    if (rc == 0) {
        slot = dsc__slot_take_free(l, READER_SLOT_OWNER);
        rc = slot != NULL ? 0 : DSC_ENOMEM;
    }
    r->tick++;
    if (rc == 0)
        rc = step_build(r, indices, count);
    if (rc == 0)
        rc = step_wait(r, count);
    if (rc == 0)
        step_map_ranges(r, count);
    if (rc < 0) {
        step_unref(r, count);
        if (slot != NULL)
            dsc__slot_give_back(l, slot);
        pthread_mutex_unlock(&l->lock);
        set_error_from_loader(r, rc);
        pthread_mutex_unlock(&r->call_lock);
        return rc;
    }
    pthread_mutex_unlock(&l->lock);
    /* Collated unlocked, as the decode threads do: the entries are referenced (never evicted)
     * and decoded (the I/O threads no longer touch them), the slot is this request's. */
    r->step.count = count;
    r->step.epoch = r->epoch;
    r->step.step = r->requests;
    r->step.error = 0;
    uint64_t truncated = 0, decode_errors = 0;
    double image_seconds = 0, t0 = dsc_now_s();
    rc = dsc__step_collate(l, &r->ctx, &r->step, slot, &truncated, &decode_errors, &image_seconds);
    double t1 = dsc_now_s();
    pthread_mutex_lock(&l->lock);
    if (rc == DSC_ETOOLARGE)
        dsc__step_error_log(l, &r->step); /* names the sample, the field and the option */
    step_unref(r, count);
    l->stats.st.collate_seconds += t1 - t0;
    l->stats.st.image_seconds += image_seconds;
    if (rc < 0) {
        dsc__slot_give_back(l, slot);
        pthread_mutex_unlock(&l->lock);
        set_error_from_loader(r, rc);
        pthread_mutex_unlock(&r->call_lock);
        return rc;
    }
    dsc_batch_t *b = &slot->batch;
    b->samples = count;
    b->step = r->requests++;
    b->seq = b->step;
    memcpy(b->indices, indices, count * sizeof indices[0]);
    dsc__batch_hand_over(l, b);
    dsc_stats_t *st = &l->stats.st;
    st->batches++;
    st->samples += count;
    st->truncated_samples += truncated;
    st->decode_errors += decode_errors;
    st->stall_seconds += dsc_now_s() - t_start;
    pthread_mutex_unlock(&l->lock);
    pthread_mutex_unlock(&r->call_lock);
    *out = b;
    return 0;
}

DSC_EXTERN int dsc_reader_get_views(dsc_reader_t *reader, const uint64_t *indices, size_t n,
                                    dsc_batch_t **out, dsc_field_view_t *views,
                                    uint32_t view_count) {
    if (reader == NULL || out == NULL || (views == NULL && view_count > 0) ||
        view_count > dsc_reader_field_count(reader))
        return DSC_EINVAL;
    for (uint32_t f = 0; f < view_count; f++)
        if (views[f].struct_size < offsetof(dsc_field_view_t, rows) + sizeof views[f].rows)
            return DSC_EINVAL;
    dsc_batch_t *b = NULL;
    int rc = dsc_reader_get(reader, indices, n, &b);
    if (rc < 0)
        return rc;
    for (uint32_t f = 0; f < view_count; f++)
        (void)dsc_batch_field_view(b, f, &views[f]); /* checked above: cannot fail */
    *out = b;
    return (int)b->samples;
}
