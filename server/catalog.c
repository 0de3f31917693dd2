/* Catalog: datasets, shard slots, loading, eviction, statistics.
 *
 * Read path (any event loop): the dataset table is an atomic pointer to an immutable array; a
 * slot's `refs` is >= 0 exactly while its bytes are resident and may be taken, so a hit is one
 * compare-and-swap. Everything else (starting loads, finishing them, evicting, rescans) happens
 * under one bookkeeping mutex, never held during I/O. Slot states:
 *   ABSENT --miss/warm--> LOADING --ok--> RESIDENT --evict (refs 0 -> -1)--> ABSENT
 *                                 --invalid--> BAD (never served again; a rescan may replace it)
 *                                 --I/O error--> ABSENT
 * A miss that finds no room in the store (minio with a full store, a shard larger than the
 * store) leaves the slot ABSENT and queues a read-through of the requested chunks: the shard's
 * header, footer and index are read and validated once and kept in a bounded LRU index cache
 * (an invalid one marks the slot BAD), then the chunks' contiguous byte range is read into a
 * mapping as large as the file (only the touched pages cost memory, and data + entry.offset
 * stays valid for the sender) and every chunk's stored checksum is verified.
 */
#include "catalog.h"
#include "srvlog.h"
#include "protocol.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

enum { SLOT_ABSENT = 0, SLOT_LOADING, SLOT_RESIDENT, SLOT_BAD };

/* A read-through answer: a private anonymous mapping of the file's size. */
struct dsc_tempbuf {
    atomic_int refs;
    uint64_t size; /* bytes counted against temp_limit */
    uint8_t *data; /* mapping base */
    size_t map_len;
};

/* A shard's validated header fields and index, cached for read-throughs. Under cat->lock. */
typedef struct shard_index {
    int refs;         /* 1 for the cache (while slot is set) + 1 per read-through using it */
    dsc_shard_slot_t *slot; /* the slot caching it, NULL once dropped */
    struct shard_index *lru_prev, *lru_next;
    uint32_t header_len;
    uint32_t chunk_count;
    uint64_t index_offset;
    uint64_t bytes;    /* counted in the metadata figure */
    uint8_t entries[]; /* chunk_count encoded entries, validated */
} shard_index_t;

/* A queued read-through of chunks [first, first + count) of a shard for one waiter. */
typedef struct range_load {
    dsc_shard_slot_t *slot;
    dsc_waiter_t *waiter;
    uint32_t first, count;
    struct range_load *next;
} range_load_t;

struct dsc_shard_slot {
    atomic_int refs;               /* >= 0: resident and takeable; -1: not */
    atomic_uint_fast64_t last_use; /* ns, for LRU */
    dsc_dataset_t *ds;
    const dsc_manifest_shard_t *meta;
    /* Under cat->lock: */
    uint8_t state;
    uint8_t logged;       /* a load failure was logged once */
    uint8_t chunk_logged; /* a read-through chunk failure was logged once */
    uint8_t *data;        /* arena extent while RESIDENT (or the load's target while LOADING) */
    const uint8_t *index;
    uint32_t chunk_count;
    shard_index_t *sindex; /* cached header + index for read-throughs, or NULL */
    dsc_waiter_t *waiters;
    dsc_shard_slot_t *queue_next;
};

struct dsc_dataset {
    char name[DSC_MAX_NAME];
    char *dir;
    dsc_manifest_t *manifest;
    char *json;
    size_t json_len;
    dsc_shard_slot_t *slots;
    atomic_int retired;
    atomic_uint_fast64_t hits, misses, bytes_served;
    /* Under cat->lock: */
    uint64_t cached_shards, cached_bytes, bad_shards;
    dsc_dataset_t *all_next; /* every dataset ever created, freed at destroy */
};

typedef struct table {
    uint32_t count;
    struct table *retired_next;
    dsc_dataset_t *items[];
} table_t;

struct dsc_catalog {
    dsc_store_t *store;
    dsc_catalog_options_t opt;
    _Atomic(table_t *) table;
    table_t *retired_tables; /* retired_tables, all, dirs, dir_count: owned by rescan_lock */
    dsc_dataset_t *all;
    char **dirs;
    uint32_t dir_count;
    atomic_uint_fast64_t table_meta_bytes; /* their metadata bytes, see update_table_meta */
    pthread_mutex_t rescan_lock; /* serialises add_dir/rescan (file I/O outside cat->lock) */

    pthread_mutex_t lock; /* bookkeeping: loads, evictions, queue */
    pthread_cond_t work_cond, idle_cond;
    dsc_shard_slot_t *queue_head, *queue_tail;
    uint32_t loads_in_flight;
    int stopping;
    int draining;           /* dsc_catalog_stop_loads: queued whole-shard loads are dropped */
    unsigned test_delay_us; /* DSC_TEST_LOAD_DELAY_MS: a pause before each whole-shard load */
    pthread_t *threads;
    uint32_t thread_count;
    uint64_t temp_bytes;
    range_load_t *range_head, *range_tail;  /* queued read-throughs, served before whole loads */
    shard_index_t *index_head, *index_tail; /* index cache, most recently used first */
    uint64_t index_bytes, index_count;

    atomic_uint_fast64_t evictions, loads, load_failures, read_through, bytes_loaded;
    atomic_uint_fast64_t read_through_bytes;
    /* Load histogram, under lock. */
    uint64_t hist[DSC_LOAD_BUCKETS];
    uint64_t hist_count;
    double hist_sum;
};

const double dsc_load_bucket_bounds[DSC_LOAD_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025,
                                                         0.05,  0.1,    0.25,  1.0,  5.0};

static void *io_thread(void *arg);
static void update_table_meta(dsc_catalog_t *cat);

int dsc_catalog_create(dsc_store_t *store, const dsc_catalog_options_t *options,
                       dsc_catalog_t **out) {
    if (store == NULL || out == NULL)
        return DSC_EINVAL;
    *out = NULL;
    dsc_catalog_t *cat = calloc(1, sizeof *cat);
    table_t *empty = calloc(1, sizeof *empty);
    if (cat == NULL || empty == NULL) {
        free(cat);
        free(empty);
        return DSC_ENOMEM;
    }
    cat->store = store;
    const char *delay = getenv("DSC_TEST_LOAD_DELAY_MS");
    if (delay != NULL && atoi(delay) > 0 && atoi(delay) <= 10000)
        cat->test_delay_us = (unsigned)atoi(delay) * 1000u;
    if (options)
        cat->opt = *options;
    if (cat->opt.io_threads == 0)
        cat->opt.io_threads = 4;
    if (cat->opt.temp_limit == 0)
        cat->opt.temp_limit = UINT64_C(1) << 30;
    if (cat->opt.index_cache_limit == 0)
        cat->opt.index_cache_limit = UINT64_C(64) << 20;
    atomic_init(&cat->table, empty);
    update_table_meta(cat);
    pthread_mutex_init(&cat->lock, NULL);
    pthread_mutex_init(&cat->rescan_lock, NULL);
    pthread_cond_init(&cat->work_cond, NULL);
    pthread_cond_init(&cat->idle_cond, NULL);
    cat->threads = calloc(cat->opt.io_threads, sizeof *cat->threads);
    if (cat->threads == NULL)
        goto fail;
    for (uint32_t i = 0; i < cat->opt.io_threads; i++) {
        if (pthread_create(&cat->threads[i], NULL, io_thread, cat) != 0)
            goto fail;
        cat->thread_count++;
    }
    *out = cat;
    return 0;
fail:
    dsc_catalog_destroy(cat);
    return DSC_ENOMEM;
}

static void dataset_free(dsc_dataset_t *ds) {
    if (ds == NULL)
        return;
    free(ds->dir);
    free(ds->json);
    free(ds->slots);
    dsc_manifest_free(ds->manifest);
    free(ds);
}

void dsc_catalog_destroy(dsc_catalog_t *cat) {
    if (cat == NULL)
        return;
    pthread_mutex_lock(&cat->lock);
    cat->stopping = 1;
    pthread_cond_broadcast(&cat->work_cond);
    pthread_mutex_unlock(&cat->lock);
    for (uint32_t i = 0; i < cat->thread_count; i++)
        pthread_join(cat->threads[i], NULL);
    free(cat->threads);
    /* Arena bytes go with the store; queued read-throughs are dropped (nothing waits now). */
    while (cat->range_head) {
        range_load_t *next = cat->range_head->next;
        free(cat->range_head);
        cat->range_head = next;
    }
    while (cat->index_head) {
        shard_index_t *next = cat->index_head->lru_next;
        free(cat->index_head);
        cat->index_head = next;
    }
    while (cat->all) {
        dsc_dataset_t *next = cat->all->all_next;
        dataset_free(cat->all);
        cat->all = next;
    }
    free(atomic_load(&cat->table));
    while (cat->retired_tables) {
        table_t *next = cat->retired_tables->retired_next;
        free(cat->retired_tables);
        cat->retired_tables = next;
    }
    for (uint32_t i = 0; i < cat->dir_count; i++)
        free(cat->dirs[i]);
    free(cat->dirs);
    pthread_mutex_destroy(&cat->lock);
    pthread_mutex_destroy(&cat->rescan_lock);
    pthread_cond_destroy(&cat->work_cond);
    pthread_cond_destroy(&cat->idle_cond);
    free(cat);
}

/* ---- datasets ---------------------------------------------------------------------------- */

static int dataset_create(const char *dir, dsc_dataset_t **out) {
    dsc_manifest_t *m = NULL;
    int rc = dsc_manifest_load(dir, &m);
    if (rc < 0)
        return rc;
    dsc_dataset_t *ds = calloc(1, sizeof *ds);
    if (ds == NULL) {
        dsc_manifest_free(m);
        return DSC_ENOMEM;
    }
    ds->manifest = m;
    snprintf(ds->name, sizeof ds->name, "%s", m->name);
    ds->dir = strdup(dir);
    ds->json = dsc_manifest_to_json(m);
    ds->slots = calloc(m->shard_count ? m->shard_count : 1, sizeof *ds->slots);
    if (ds->dir == NULL || ds->json == NULL || ds->slots == NULL) {
        dataset_free(ds);
        return DSC_ENOMEM;
    }
    ds->json_len = strlen(ds->json);
    for (uint32_t i = 0; i < m->shard_count; i++) {
        dsc_shard_slot_t *s = &ds->slots[i];
        atomic_init(&s->refs, -1);
        atomic_init(&s->last_use, 0);
        s->ds = ds;
        s->meta = &m->shards[i];
        s->state = SLOT_ABSENT;
    }
    *out = ds;
    return 0;
}

dsc_dataset_t *dsc_catalog_find(dsc_catalog_t *cat, const char *name, size_t len) {
    table_t *t = atomic_load_explicit(&cat->table, memory_order_acquire);
    for (uint32_t i = 0; i < t->count; i++) {
        dsc_dataset_t *ds = t->items[i];
        if (strlen(ds->name) == len && memcmp(ds->name, name, len) == 0)
            return ds;
    }
    return NULL;
}

const dsc_manifest_t *dsc_dataset_manifest(const dsc_dataset_t *ds) {
    return ds->manifest;
}

const char *dsc_dataset_manifest_json(const dsc_dataset_t *ds, size_t *len) {
    *len = ds->json_len;
    return ds->json;
}

dsc_shard_slot_t *dsc_dataset_shard_slot(dsc_dataset_t *ds, uint32_t id) {
    return id < ds->manifest->shard_count ? &ds->slots[id] : NULL;
}

void dsc_dataset_count_served(dsc_dataset_t *ds, uint64_t bytes) {
    atomic_fetch_add_explicit(&ds->bytes_served, bytes, memory_order_relaxed);
}

/* ---- eviction (cat->lock held) ----------------------------------------------------------- */

/* Frees a resident slot's bytes if nobody holds them. Returns 1 when evicted. */
static int evict_slot_locked(dsc_catalog_t *cat, dsc_shard_slot_t *s) {
    if (s->state != SLOT_RESIDENT)
        return 0;
    int zero = 0;
    if (!atomic_compare_exchange_strong(&s->refs, &zero, -1))
        return 0;
    dsc_store_free(cat->store, s->data, s->meta->bytes);
    s->data = NULL;
    s->index = NULL;
    s->state = SLOT_ABSENT;
    s->ds->cached_shards--;
    s->ds->cached_bytes -= s->meta->bytes;
    atomic_fetch_add_explicit(&cat->evictions, 1, memory_order_relaxed);
    return 1;
}

/* Evicts the least recently used unreferenced resident shard of any dataset served. O(shards);
 * evictions are rare next to hits. Returns 1 when one was evicted. */
static int evict_lru_locked(dsc_catalog_t *cat) {
    table_t *t = atomic_load(&cat->table);
    dsc_shard_slot_t *victim = NULL;
    uint64_t oldest = UINT64_MAX;
    for (uint32_t d = 0; d < t->count; d++) {
        dsc_dataset_t *ds = t->items[d];
        for (uint32_t i = 0; i < ds->manifest->shard_count; i++) {
            dsc_shard_slot_t *s = &ds->slots[i];
            if (s->state != SLOT_RESIDENT || atomic_load(&s->refs) != 0)
                continue;
            uint64_t used = atomic_load_explicit(&s->last_use, memory_order_relaxed);
            if (used < oldest) {
                oldest = used;
                victim = s;
            }
        }
    }
    return victim ? evict_slot_locked(cat, victim) : 0;
}

/* ---- loading ----------------------------------------------------------------------------- */

/* How start_load_locked makes room when the store is full. */
enum {
    LOAD_WARM = 0,      /* lru: evict; otherwise give up */
    LOAD_REQUEST = 1,   /* lru: evict; otherwise give up (the caller reads through) */
    LOAD_WARM_KEEP = 2, /* give up: never evict for it (cluster warm-ups) */
};

/* Allocates the shard's extent in the store and queues a whole-shard load (how: LOAD_*).
 * Returns 1 queued, 0 not (no room), or <0. */
static int start_load_locked(dsc_catalog_t *cat, dsc_shard_slot_t *s, int how) {
    uint64_t size = s->meta->bytes;
    uint8_t *dst = NULL;
    int rc = dsc_store_alloc(cat->store, size, &dst);
    while (rc == DSC_ENOSPC && cat->opt.policy == DSC_POLICY_LRU && how != LOAD_WARM_KEEP &&
           evict_lru_locked(cat))
        rc = dsc_store_alloc(cat->store, size, &dst);
    if (rc == DSC_ENOSPC)
        return 0;
    if (rc < 0)
        return rc == DSC_EINVAL ? DSC_ECORRUPT : rc; /* size 0: the manifest cannot be right */
    s->data = dst;
    s->state = SLOT_LOADING;
    s->queue_next = NULL;
    if (cat->queue_tail)
        cat->queue_tail->queue_next = s;
    else
        cat->queue_head = s;
    cat->queue_tail = s;
    cat->loads_in_flight++;
    pthread_cond_signal(&cat->work_cond);
    return 1;
}

/* Reads and validates one shard file into dst. Returns 0, DSC_ECORRUPT (validation; *why says
 * what) or an I/O error (-errno). */
static int read_shard(const dsc_shard_slot_t *s, uint8_t *dst, dsc_shard_view_t *view, const char **why) {
    const dsc_manifest_shard_t *meta = s->meta;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", s->ds->dir, meta->file);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *why = "cannot open";
        return -errno;
    }
    int rc = 0;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        *why = "cannot stat";
        goto done;
    }
    if ((uint64_t)st.st_size != meta->bytes) {
        rc = DSC_ECORRUPT;
        *why = "file size differs from the manifest";
        goto done;
    }
    rc = dsc_pread_full(fd, dst, meta->bytes, 0);
    if (rc < 0) {
        *why = rc == DSC_ETRUNCATED ? "file shrank while reading" : "read failed";
        rc = rc == DSC_ETRUNCATED ? DSC_ECORRUPT : rc;
        goto done;
    }
    if (dsc_checksum(dst, meta->bytes) != meta->checksum) {
        rc = DSC_ECORRUPT;
        *why = "whole-file checksum differs from the manifest";
        goto done;
    }
    int prc = dsc_shard_parse(dst, meta->bytes, view);
    if (prc < 0) {
        rc = DSC_ECORRUPT;
        *why = dsc_strerror(prc);
        goto done;
    }
    if (view->header.shard_id != meta->id || view->footer.chunk_count != meta->chunks ||
        view->header.sample_count != meta->samples ||
        strcmp(view->header.dataset, s->ds->name) != 0 ||
        !dsc_schema_equal(&view->header.schema, &s->ds->manifest->schema)) {
        rc = DSC_ECORRUPT;
        *why = "shard header does not match the manifest";
        goto done;
    }
done:
    close(fd);
    return rc;
}

static void observe_load_locked(dsc_catalog_t *cat, double seconds) {
    for (int i = 0; i < DSC_LOAD_BUCKETS; i++)
        if (seconds <= dsc_load_bucket_bounds[i])
            cat->hist[i]++;
    cat->hist_count++;
    cat->hist_sum += seconds;
}

static void deliver(dsc_waiter_t *list) {
    while (list) {
        dsc_waiter_t *w = list;
        list = w->next;
        w->next = NULL;
        if (w->mailbox)
            w->mailbox->push(w->mailbox, w);
        else
            w->fn(w);
    }
}

static void finish_load(dsc_catalog_t *cat, dsc_shard_slot_t *s, int rc, const char *why,
                        const dsc_shard_view_t *view, double seconds) {
    pthread_mutex_lock(&cat->lock);
    dsc_waiter_t *waiters = s->waiters;
    s->waiters = NULL;
    int nwait = 0;
    for (dsc_waiter_t *w = waiters; w; w = w->next)
        nwait++;
    if (rc == 0) {
        atomic_fetch_add_explicit(&cat->loads, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&cat->bytes_loaded, s->meta->bytes, memory_order_relaxed);
        observe_load_locked(cat, seconds);
        const uint8_t *base = s->data;
        dsc_hold_t hold = {.data = base,
                           .size = s->meta->bytes,
                           .index = base + (view->index - view->base),
                           .chunk_count = view->footer.chunk_count};
        s->index = hold.index;
        s->chunk_count = hold.chunk_count;
        s->state = SLOT_RESIDENT;
        s->ds->cached_shards++;
        s->ds->cached_bytes += s->meta->bytes;
        atomic_store(&s->last_use, dsc_now_ns());
        hold.slot = s;
        atomic_store_explicit(&s->refs, nwait, memory_order_release);
        for (dsc_waiter_t *w = waiters; w; w = w->next) {
            w->status = 0;
            w->hold = hold;
        }
    } else {
        if (why != NULL) /* NULL: dropped by dsc_catalog_stop_loads, not a failure */
            atomic_fetch_add_explicit(&cat->load_failures, 1, memory_order_relaxed);
        dsc_store_free(cat->store, s->data, s->meta->bytes);
        s->data = NULL;
        if (rc == DSC_ECORRUPT) {
            s->state = SLOT_BAD;
            s->ds->bad_shards++;
            LOG_ERROR("dataset %s shard %u (%s/%s): %s: marked bad, answered CORRUPT", s->ds->name,
                      s->meta->id, s->ds->dir, s->meta->file, why);
        } else {
            s->state = SLOT_ABSENT;
            if (why != NULL && !s->logged) {
                LOG_WARN("dataset %s shard %u (%s/%s): %s: %s", s->ds->name, s->meta->id,
                         s->ds->dir, s->meta->file, why, strerror(-rc));
                s->logged = 1;
            }
            rc = DSC_EUNAVAIL;
        }
        for (dsc_waiter_t *w = waiters; w; w = w->next)
            w->status = rc;
    }
    /* A dataset retired while its shard loaded: nothing will ask for it again. */
    if (rc == 0 && nwait == 0 && atomic_load(&s->ds->retired))
        evict_slot_locked(cat, s);
    cat->loads_in_flight--;
    if (cat->loads_in_flight == 0)
        pthread_cond_broadcast(&cat->idle_cond);
    pthread_mutex_unlock(&cat->lock);
    deliver(waiters);
}

/* ---- read-through of chunk ranges -------------------------------------------------------- */

/* Unlinks an index from the cache and drops the cache's reference (cat->lock held). */
static void index_drop_locked(dsc_catalog_t *cat, shard_index_t *si) {
    if (si->slot == NULL)
        return;
    if (si->lru_prev)
        si->lru_prev->lru_next = si->lru_next;
    else
        cat->index_head = si->lru_next;
    if (si->lru_next)
        si->lru_next->lru_prev = si->lru_prev;
    else
        cat->index_tail = si->lru_prev;
    si->lru_prev = si->lru_next = NULL;
    si->slot->sindex = NULL;
    si->slot = NULL;
    cat->index_bytes -= si->bytes;
    cat->index_count--;
    if (--si->refs == 0)
        free(si);
}

static void index_release(dsc_catalog_t *cat, shard_index_t *si) {
    if (si == NULL)
        return;
    pthread_mutex_lock(&cat->lock);
    if (--si->refs == 0)
        free(si);
    pthread_mutex_unlock(&cat->lock);
}

static void index_push_front_locked(dsc_catalog_t *cat, shard_index_t *si) {
    si->lru_prev = NULL;
    si->lru_next = cat->index_head;
    if (cat->index_head)
        cat->index_head->lru_prev = si;
    else
        cat->index_tail = si;
    cat->index_head = si;
}

/* Takes a reference on the slot's cached index (moving it to the front), or NULL. */
static shard_index_t *index_get(dsc_catalog_t *cat, dsc_shard_slot_t *s) {
    pthread_mutex_lock(&cat->lock);
    shard_index_t *si = s->sindex;
    if (si) {
        si->refs++;
        if (si != cat->index_head) {
            si->lru_prev->lru_next = si->lru_next;
            if (si->lru_next)
                si->lru_next->lru_prev = si->lru_prev;
            else
                cat->index_tail = si->lru_prev;
            index_push_front_locked(cat, si);
        }
    }
    pthread_mutex_unlock(&cat->lock);
    return si;
}

/* Caches a freshly read index for s (the caller keeps its own reference) and trims the cache to
 * its limit, least recently used first. Returns the index to use: si, or one another thread
 * cached meanwhile (then si is freed). */
static shard_index_t *index_install(dsc_catalog_t *cat, dsc_shard_slot_t *s, shard_index_t *si) {
    pthread_mutex_lock(&cat->lock);
    if (s->sindex) {
        free(si);
        si = s->sindex;
        si->refs++;
        pthread_mutex_unlock(&cat->lock);
        return si;
    }
    si->refs = 2;
    si->slot = s;
    s->sindex = si;
    index_push_front_locked(cat, si);
    cat->index_bytes += si->bytes;
    cat->index_count++;
    while (cat->index_bytes > cat->opt.index_cache_limit && cat->index_tail)
        index_drop_locked(cat, cat->index_tail);
    pthread_mutex_unlock(&cat->lock);
    return si;
}

/* Reads exactly len bytes at offset. Returns 0, DSC_ECORRUPT (end of file first: the file
 * shrank under its manifest) or -errno. */
static int pread_full(int fd, uint8_t *dst, uint64_t len, uint64_t offset) {
    int rc = dsc_pread_full(fd, dst, len, offset);
    return rc == DSC_ETRUNCATED ? DSC_ECORRUPT : rc;
}

/* Reads and validates a shard's header, footer and index from fd against the manifest. Returns
 * 0 and *out (refs 0, not cached), DSC_ECORRUPT (*why says what: the shard is bad), -errno or
 * DSC_ENOMEM. Counts the bytes read. */
static int index_read(dsc_catalog_t *cat, const dsc_shard_slot_t *s, int fd, shard_index_t **out,
                      const char **why) {
    const dsc_manifest_shard_t *meta = s->meta;
    uint64_t size = meta->bytes;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        *why = "cannot stat";
        return -errno;
    }
    if ((uint64_t)st.st_size != size) {
        *why = "file size differs from the manifest";
        return DSC_ECORRUPT;
    }
    if (size < DSC_SHARD_FOOTER_SIZE) {
        *why = "shorter than a footer";
        return DSC_ECORRUPT;
    }
    size_t head_len = size > DSC_SHARD_MAX_HEADER ? DSC_SHARD_MAX_HEADER : (size_t)size;
    uint8_t head[DSC_SHARD_MAX_HEADER];
    uint8_t foot[DSC_SHARD_FOOTER_SIZE];
    int rc = pread_full(fd, head, head_len, 0);
    if (rc == 0)
        rc = pread_full(fd, foot, DSC_SHARD_FOOTER_SIZE, size - DSC_SHARD_FOOTER_SIZE);
    if (rc < 0) {
        *why = rc == DSC_ECORRUPT ? "file shrank while reading" : "read failed";
        return rc;
    }
    atomic_fetch_add_explicit(&cat->read_through_bytes, head_len + DSC_SHARD_FOOTER_SIZE,
                              memory_order_relaxed);
    dsc_shard_header_t header;
    dsc_shard_footer_t footer;
    if ((rc = dsc_shard_header_decode(head, head_len, &header)) < 0 ||
        (rc = dsc_shard_footer_decode(foot, &footer)) < 0) {
        *why = dsc_strerror(rc);
        return DSC_ECORRUPT;
    }
    if (header.shard_id != meta->id || footer.chunk_count != meta->chunks ||
        header.sample_count != meta->samples || strcmp(header.dataset, s->ds->name) != 0 ||
        !dsc_schema_equal(&header.schema, &s->ds->manifest->schema)) {
        *why = "shard header does not match the manifest";
        return DSC_ECORRUPT;
    }
    /* The index must lie between the header and the footer before a byte of it is read;
     * dsc_shard_check_index then checks its contents (checksum, entries inside the file). */
    uint64_t index_len = (uint64_t)footer.chunk_count * DSC_CHUNK_ENTRY_SIZE;
    uint64_t body_end = size - DSC_SHARD_FOOTER_SIZE;
    if (footer.index_offset < header.header_len || footer.index_offset > body_end ||
        index_len > body_end - footer.index_offset || footer.chunk_count == 0) {
        *why = "index outside the file";
        return DSC_ECORRUPT;
    }
    shard_index_t *si = calloc(1, sizeof *si + index_len);
    if (si == NULL)
        return DSC_ENOMEM;
    rc = pread_full(fd, si->entries, index_len, footer.index_offset);
    if (rc < 0) {
        free(si);
        *why = rc == DSC_ECORRUPT ? "file shrank while reading" : "read failed";
        return rc;
    }
    atomic_fetch_add_explicit(&cat->read_through_bytes, index_len, memory_order_relaxed);
    if ((rc = dsc_shard_check_index(&header, &footer, si->entries, size)) < 0) {
        free(si);
        *why = dsc_strerror(rc);
        return DSC_ECORRUPT;
    }
    si->header_len = header.header_len;
    si->chunk_count = footer.chunk_count;
    si->index_offset = footer.index_offset;
    si->bytes = sizeof *si + index_len;
    *out = si;
    return 0;
}

static void tempbuf_free(dsc_tempbuf_t *tb) {
    if (tb == NULL)
        return;
    if (tb->data)
        munmap(tb->data, tb->map_len);
    free(tb);
}

/* Runs one queued read-through on a loader thread and delivers its waiter. */
static void run_range(dsc_catalog_t *cat, range_load_t *job) {
    dsc_shard_slot_t *s = job->slot;
    dsc_waiter_t *w = job->waiter;
    const dsc_manifest_shard_t *meta = s->meta;
    shard_index_t *si = NULL;
    dsc_tempbuf_t *tb = NULL;
    uint64_t reserved = 0;
    const char *why = "";
    int bad_shard = 0, bad_chunk = -1, delivered = 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", s->ds->dir, meta->file);
    int rc = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        why = "cannot open";
        goto done;
    }
    si = index_get(cat, s);
    if (si == NULL) {
        rc = index_read(cat, s, fd, &si, &why);
        if (rc < 0) {
            bad_shard = rc == DSC_ECORRUPT;
            goto done;
        }
        si = index_install(cat, s, si);
    }
    /* The manifest's chunk count was checked against the footer when the index was read. */
    if ((uint64_t)job->first + job->count > si->chunk_count) {
        rc = DSC_EINVAL;
        why = "chunk range beyond the shard";
        goto done;
    }
    dsc_chunk_entry_t first, last;
    dsc_chunk_entry_decode(si->entries + (size_t)job->first * DSC_CHUNK_ENTRY_SIZE, &first);
    dsc_chunk_entry_decode(
        si->entries + (size_t)(job->first + job->count - 1) * DSC_CHUNK_ENTRY_SIZE, &last);
    /* Validated entries lie in file order inside [header_len, index_offset). */
    uint64_t start = first.offset, end = last.offset + last.stored_len;
    uint64_t index_len = (uint64_t)si->chunk_count * DSC_CHUNK_ENTRY_SIZE;
    reserved = end - start + index_len;
    pthread_mutex_lock(&cat->lock);
    if (cat->temp_bytes + reserved > cat->opt.temp_limit) {
        pthread_mutex_unlock(&cat->lock);
        reserved = 0;
        rc = DSC_EUNAVAIL; /* a miss under load, not a fault: not logged */
        goto done;
    }
    cat->temp_bytes += reserved;
    pthread_mutex_unlock(&cat->lock);
    tb = calloc(1, sizeof *tb);
    if (tb == NULL) {
        rc = DSC_ENOMEM;
        goto done;
    }
    tb->map_len = (size_t)((meta->bytes + DSC_STORE_PAGE - 1) & ~(uint64_t)(DSC_STORE_PAGE - 1));
    void *map = mmap(NULL, tb->map_len, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED) {
        rc = DSC_ENOMEM;
        goto done;
    }
    tb->data = map;
    tb->size = reserved;
    rc = pread_full(fd, tb->data + start, end - start, start);
    if (rc < 0) {
        /* A file that shrank under a cached index: drop the index, the next miss revalidates. */
        why = rc == DSC_ECORRUPT ? "file shrank while reading" : "read failed";
        pthread_mutex_lock(&cat->lock);
        if (s->sindex == si)
            index_drop_locked(cat, si);
        pthread_mutex_unlock(&cat->lock);
        goto done;
    }
    atomic_fetch_add_explicit(&cat->read_through_bytes, end - start, memory_order_relaxed);
    for (uint32_t i = job->first; i < job->first + job->count; i++) {
        dsc_chunk_entry_t e;
        dsc_chunk_entry_decode(si->entries + (size_t)i * DSC_CHUNK_ENTRY_SIZE, &e);
        if (dsc_chunk_verify(&e, tb->data + e.offset) < 0) {
            rc = DSC_ECORRUPT;
            bad_chunk = (int)i;
            why = "stored checksum differs";
            goto done;
        }
    }
    memcpy(tb->data + si->index_offset, si->entries, index_len);
    atomic_init(&tb->refs, 1);
    w->hold = (dsc_hold_t){.temp = tb,
                           .data = tb->data,
                           .size = meta->bytes,
                           .index = tb->data + si->index_offset,
                           .chunk_count = si->chunk_count};
    tb = NULL;
    delivered = 1;
done:
    if (fd >= 0)
        close(fd);
    index_release(cat, si);
    tempbuf_free(tb);
    pthread_mutex_lock(&cat->lock);
    if (!delivered)
        cat->temp_bytes -= reserved;
    if (rc < 0) {
        if (rc == DSC_ECORRUPT && bad_shard && s->state == SLOT_ABSENT) {
            s->state = SLOT_BAD;
            s->ds->bad_shards++;
            LOG_ERROR("dataset %s shard %u (%s/%s): %s: marked bad, answered CORRUPT", s->ds->name,
                      meta->id, s->ds->dir, meta->file, why);
        } else if (rc == DSC_ECORRUPT) {
            if (!s->chunk_logged)
                LOG_WARN("dataset %s shard %u (%s/%s) chunk %u of %u..%u: %s: answered CORRUPT "
                         "(logged once per shard)",
                         s->ds->name, meta->id, s->ds->dir, meta->file,
                         bad_chunk >= 0 ? (unsigned)bad_chunk : job->first, job->first,
                         job->first + job->count - 1, why);
            s->chunk_logged = 1;
        } else if (rc != DSC_ECORRUPT && rc != DSC_EINVAL && rc != DSC_EUNAVAIL &&
                   rc != DSC_ENOMEM) {
            if (!s->logged)
                LOG_WARN("dataset %s shard %u (%s/%s): read-through: %s: %s", s->ds->name, meta->id,
                         s->ds->dir, meta->file, why, dsc_strerror(rc));
            s->logged = 1;
            rc = DSC_EUNAVAIL;
        }
        atomic_fetch_add_explicit(&cat->load_failures, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&cat->lock);
    w->status = rc < 0 ? rc : 0;
    w->next = NULL;
    free(job);
    deliver(w);
}

/* Queues a read-through of the waiter's chunks (cat->lock held). Returns 0 or <0. */
static int start_range_locked(dsc_catalog_t *cat, dsc_shard_slot_t *s, dsc_waiter_t *w) {
    uint32_t first = w->first_chunk, count = w->chunk_count;
    if (count == 0) {
        first = 0;
        count = s->meta->chunks;
    }
    if (count == 0 || (uint64_t)first + count > s->meta->chunks)
        return DSC_EINVAL;
    if (cat->temp_bytes >= cat->opt.temp_limit)
        return DSC_EUNAVAIL;
    range_load_t *job = malloc(sizeof *job);
    if (job == NULL)
        return DSC_ENOMEM;
    *job = (range_load_t){.slot = s, .waiter = w, .first = first, .count = count};
    if (cat->range_tail)
        cat->range_tail->next = job;
    else
        cat->range_head = job;
    cat->range_tail = job;
    atomic_fetch_add_explicit(&cat->read_through, 1, memory_order_relaxed);
    pthread_cond_signal(&cat->work_cond);
    return 0;
}

static void *io_thread(void *arg) {
    dsc_catalog_t *cat = arg;
    pthread_mutex_lock(&cat->lock);
    for (;;) {
        while (!cat->stopping && cat->queue_head == NULL && cat->range_head == NULL)
            pthread_cond_wait(&cat->work_cond, &cat->lock);
        if (cat->stopping)
            break;
        /* Read-throughs first: a request waits on each, and each is short (a few chunks). */
        if (cat->range_head) {
            range_load_t *job = cat->range_head;
            cat->range_head = job->next;
            if (cat->range_head == NULL)
                cat->range_tail = NULL;
            pthread_mutex_unlock(&cat->lock);
            run_range(cat, job);
            pthread_mutex_lock(&cat->lock);
            continue;
        }
        dsc_shard_slot_t *s = cat->queue_head;
        cat->queue_head = s->queue_next;
        if (cat->queue_head == NULL)
            cat->queue_tail = NULL;
        uint8_t *dst = s->data;
        int drop = cat->draining;
        pthread_mutex_unlock(&cat->lock);
        if (drop) {
            finish_load(cat, s, DSC_EUNAVAIL, NULL, NULL, 0);
            pthread_mutex_lock(&cat->lock);
            continue;
        }
        if (cat->test_delay_us)
            usleep(cat->test_delay_us);

        double t0 = dsc_now_s();
        dsc_shard_view_t view;
        const char *why = "";
        int rc = read_shard(s, dst, &view, &why);
        finish_load(cat, s, rc, why, &view, dsc_now_s() - t0);
        pthread_mutex_lock(&cat->lock);
    }
    pthread_mutex_unlock(&cat->lock);
    return NULL;
}

int dsc_catalog_acquire(dsc_catalog_t *cat, dsc_shard_slot_t *s, dsc_waiter_t *waiter, dsc_hold_t *hold) {
    int r = atomic_load_explicit(&s->refs, memory_order_acquire);
    while (r >= 0) {
        if (atomic_compare_exchange_weak_explicit(&s->refs, &r, r + 1, memory_order_acquire,
                                                  memory_order_acquire)) {
            *hold = (dsc_hold_t){.slot = s,
                                 .data = s->data,
                                 .size = s->meta->bytes,
                                 .index = s->index,
                                 .chunk_count = s->chunk_count};
            atomic_store_explicit(&s->last_use, dsc_now_ns(), memory_order_relaxed);
            atomic_fetch_add_explicit(&s->ds->hits, 1, memory_order_relaxed);
            return 1;
        }
    }
    pthread_mutex_lock(&cat->lock);
    int rc;
    switch (s->state) {
    case SLOT_RESIDENT: /* evicted and reloaded between our load and the lock, or refs moved */
        pthread_mutex_unlock(&cat->lock);
        return dsc_catalog_acquire(cat, s, waiter, hold);
    case SLOT_BAD:
        rc = DSC_ECORRUPT;
        break;
    case SLOT_LOADING:
        waiter->next = s->waiters;
        s->waiters = waiter;
        atomic_fetch_add_explicit(&s->ds->misses, 1, memory_order_relaxed);
        rc = 0;
        break;
    default:
        rc = start_load_locked(cat, s, LOAD_REQUEST);
        if (rc == 1) {
            waiter->next = NULL;
            s->waiters = waiter;
            rc = 0;
        } else if (rc == 0) {
            rc = start_range_locked(cat, s, waiter); /* no room: read the chunks through */
        }
        if (rc == 0)
            atomic_fetch_add_explicit(&s->ds->misses, 1, memory_order_relaxed);
        break;
    }
    pthread_mutex_unlock(&cat->lock);
    return rc;
}

void dsc_hold_release(dsc_catalog_t *cat, dsc_hold_t *hold) {
    if (hold == NULL)
        return;
    if (hold->slot) {
        dsc_shard_slot_t *s = hold->slot;
        int prev = atomic_fetch_sub_explicit(&s->refs, 1, memory_order_release);
        if (prev == 1 && atomic_load(&s->ds->retired)) {
            pthread_mutex_lock(&cat->lock);
            evict_slot_locked(cat, s);
            pthread_mutex_unlock(&cat->lock);
        }
    }
    if (hold->temp) {
        dsc_tempbuf_t *tb = hold->temp;
        if (atomic_fetch_sub(&tb->refs, 1) == 1) {
            pthread_mutex_lock(&cat->lock);
            cat->temp_bytes -= tb->size;
            pthread_mutex_unlock(&cat->lock);
            tempbuf_free(tb);
        }
    }
    memset(hold, 0, sizeof *hold);
}

/* Starts loads of the shards in [first, end) of ds that keep() selects (NULL: all); counts the
 * selected ones in *selected. Returns the number of loads started. */
static int warm_range(dsc_catalog_t *cat, dsc_dataset_t *ds, uint32_t first, uint32_t end, int how,
                      dsc_shard_filter_fn keep, void *arg, uint64_t *selected) {
    /* The filter runs before the lock: placement costs O(members) per shard, and misses on the
     * event loops must not wait behind it. */
    uint8_t *chosen = NULL;
    if (keep && end > first) {
        chosen = malloc(end - first);
        if (chosen == NULL)
            return DSC_ENOMEM;
        for (uint32_t i = first; i < end; i++)
            chosen[i - first] = (uint8_t)(keep(arg, ds, i) != 0);
    }
    int started = 0;
    pthread_mutex_lock(&cat->lock);
    for (uint32_t i = first; i < end; i++) {
        if (chosen && !chosen[i - first])
            continue;
        if (selected)
            (*selected)++;
        dsc_shard_slot_t *s = &ds->slots[i];
        if (s->state != SLOT_ABSENT)
            continue;
        if (start_load_locked(cat, s, how) == 1) /* else: no room (minio), a smaller one may fit */
            started++;
    }
    pthread_mutex_unlock(&cat->lock);
    free(chosen);
    return started;
}

int dsc_catalog_warm(dsc_catalog_t *cat, dsc_dataset_t *ds, uint32_t shard_id) {
    uint32_t first = shard_id == DSC_SHARD_ALL ? 0 : shard_id;
    uint32_t end = shard_id == DSC_SHARD_ALL ? ds->manifest->shard_count : shard_id + 1;
    if (end > ds->manifest->shard_count)
        return 0;
    return warm_range(cat, ds, first, end, LOAD_WARM, NULL, NULL, NULL);
}

int dsc_catalog_warm_some(dsc_catalog_t *cat, dsc_shard_filter_fn keep, void *arg, int no_evict,
                          const char *what, const atomic_int *cancel) {
    table_t *t = atomic_load(&cat->table);
    uint64_t total = 0, selected = 0;
    for (uint32_t d = 0; d < t->count; d++)
        total += t->items[d]->manifest->shard_count;
    uint64_t loads0_ok = atomic_load(&cat->loads);
    uint64_t loads0 = loads0_ok + atomic_load(&cat->load_failures);
    uint64_t bytes0 = atomic_load(&cat->bytes_loaded);
    double t0 = dsc_now_s();
    uint64_t started = 0;
    for (uint32_t d = 0; d < t->count; d++) {
        int n = warm_range(cat, t->items[d], 0, t->items[d]->manifest->shard_count,
                           no_evict ? LOAD_WARM_KEEP : LOAD_WARM, keep, arg, &selected);
        if (n < 0)
            LOG_ERROR("warm-up: dataset %s: %s", t->items[d]->name, dsc_strerror(n));
        else
            started += (uint64_t)n;
    }
    if (what)
        LOG_INFO("warming %llu of %llu shards (%s): loading %llu not resident yet",
                 (unsigned long long)selected, (unsigned long long)total, what,
                 (unsigned long long)started);
    else
        LOG_INFO("warm-up: loading %llu of %llu shards", (unsigned long long)started,
                 (unsigned long long)total);
    pthread_mutex_lock(&cat->lock);
    while (cat->loads_in_flight > 0 && !(cancel && atomic_load(cancel))) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&cat->idle_cond, &cat->lock, &ts);
        if (cat->loads_in_flight > 0) {
            uint64_t done = atomic_load(&cat->loads) + atomic_load(&cat->load_failures) - loads0;
            double mb = (double)(atomic_load(&cat->bytes_loaded) - bytes0) / 1e6;
            LOG_INFO("warm-up: %llu/%llu shards, %.1f MB/s", (unsigned long long)done,
                     (unsigned long long)started, mb / (dsc_now_s() - t0));
        }
    }
    int cancelled = cat->loads_in_flight > 0;
    pthread_mutex_unlock(&cat->lock);
    double secs = dsc_now_s() - t0;
    double mb = (double)(atomic_load(&cat->bytes_loaded) - bytes0) / 1e6;
    if (cancelled)
        LOG_INFO("warm-up stopped (shutting down): %llu of %llu shards loaded in %.2f s",
                 (unsigned long long)(atomic_load(&cat->loads) - loads0_ok),
                 (unsigned long long)started, secs);
    else
        LOG_INFO("warm-up done: %llu/%llu shards in %.2f s, %.1f MB at %.1f MB/s",
                 (unsigned long long)started, (unsigned long long)total, secs, mb,
                 secs > 0 ? mb / secs : 0.0);
    return (int)started;
}

int dsc_catalog_warm_all(dsc_catalog_t *cat) {
    return dsc_catalog_warm_some(cat, NULL, NULL, 0, NULL, NULL);
}

void dsc_catalog_stop_loads(dsc_catalog_t *cat) {
    pthread_mutex_lock(&cat->lock);
    cat->draining = 1;
    pthread_cond_broadcast(&cat->work_cond);
    pthread_cond_broadcast(&cat->idle_cond); /* a warm-up's wait re-checks its cancel flag */
    pthread_mutex_unlock(&cat->lock);
}

uint32_t dsc_catalog_resident_map(dsc_catalog_t *cat, dsc_dataset_t *ds, uint8_t *map,
                                  uint32_t count) {
    uint32_t n = count < ds->manifest->shard_count ? count : ds->manifest->shard_count;
    pthread_mutex_lock(&cat->lock);
    for (uint32_t i = 0; i < n; i++)
        map[i] = ds->slots[i].state == SLOT_RESIDENT;
    pthread_mutex_unlock(&cat->lock);
    return n;
}

int dsc_catalog_evict(dsc_catalog_t *cat, dsc_dataset_t *ds, uint32_t shard_id) {
    uint32_t first = shard_id == DSC_SHARD_ALL ? 0 : shard_id;
    uint32_t end = shard_id == DSC_SHARD_ALL ? ds->manifest->shard_count : shard_id + 1;
    if (end > ds->manifest->shard_count)
        return 0;
    int evicted = 0;
    pthread_mutex_lock(&cat->lock);
    for (uint32_t i = first; i < end; i++)
        evicted += evict_slot_locked(cat, &ds->slots[i]);
    pthread_mutex_unlock(&cat->lock);
    return evicted;
}

/* ---- directories and rescans ------------------------------------------------------------- */

/* Under rescan_lock. */
static int publish(dsc_catalog_t *cat, table_t *next) {
    table_t *prev = atomic_exchange_explicit(&cat->table, next, memory_order_acq_rel);
    /* Loops may still be walking prev: keep it until destroy (rescans are rare). */
    prev->retired_next = cat->retired_tables;
    cat->retired_tables = prev;
    update_table_meta(cat);
    return 0;
}

int dsc_catalog_add_dir(dsc_catalog_t *cat, const char *dir) {
    pthread_mutex_lock(&cat->rescan_lock);
    dsc_dataset_t *ds = NULL;
    table_t *t = NULL;
    char *dir_copy = NULL;
    char **dirs = NULL;
    int rc = dataset_create(dir, &ds);
    struct stat st;
    if (rc == DSC_ENOENT && (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))) {
        /* A directory that is not there at all is a mistake in the command line, not a dataset
         * still being written. */
        rc = DSC_ENOENT;
        goto done;
    }
    if (rc == DSC_ENOENT) {
        /* No manifest yet: remember the directory, a rescan (SIGHUP) picks it up. */
        dirs = realloc(cat->dirs, (cat->dir_count + 1) * sizeof *dirs);
        dir_copy = strdup(dir);
        if (dirs)
            cat->dirs = dirs;
        if (dirs == NULL || dir_copy == NULL) {
            rc = DSC_ENOMEM;
            goto done;
        }
        cat->dirs[cat->dir_count++] = dir_copy;
        dir_copy = NULL;
        update_table_meta(cat);
        LOG_WARN("%s: no %s yet: served after a rescan (SIGHUP) finds one", dir, DSC_MANIFEST_FILE);
        rc = 0;
        goto done;
    }
    if (rc < 0)
        goto done;
    if (dsc_catalog_find(cat, ds->name, strlen(ds->name)) != NULL) {
        LOG_ERROR("%s: dataset %s is already served from another directory", dir, ds->name);
        rc = DSC_EINVAL;
        goto done;
    }
    table_t *cur = atomic_load(&cat->table);
    t = malloc(sizeof *t + (cur->count + 1) * sizeof(dsc_dataset_t *));
    dir_copy = strdup(dir);
    dirs = realloc(cat->dirs, (cat->dir_count + 1) * sizeof *dirs);
    if (dirs)
        cat->dirs = dirs;
    if (t == NULL || dir_copy == NULL || dirs == NULL) {
        rc = DSC_ENOMEM;
        goto done;
    }
    cat->dirs[cat->dir_count++] = dir_copy;
    dir_copy = NULL;
    t->count = cur->count + 1;
    memcpy(t->items, cur->items, cur->count * sizeof(dsc_dataset_t *));
    t->items[cur->count] = ds;
    ds->all_next = cat->all;
    cat->all = ds;
    LOG_INFO("dataset %s: %u shards, %llu samples, %llu bytes (%s)", ds->name,
             ds->manifest->shard_count, (unsigned long long)ds->manifest->samples,
             (unsigned long long)ds->manifest->bytes, dir);
    ds = NULL;
    publish(cat, t);
    t = NULL;
done:
    free(t);
    free(dir_copy);
    dataset_free(ds);
    pthread_mutex_unlock(&cat->rescan_lock);
    return rc;
}

static int same_shard(const dsc_manifest_shard_t *a, const dsc_manifest_shard_t *b) {
    return a->bytes == b->bytes && a->checksum == b->checksum && a->chunks == b->chunks &&
           strcmp(a->file, b->file) == 0;
}

/* Moves resident, unreferenced shards that did not change from old to ds. */
static void adopt_locked(dsc_dataset_t *old, dsc_dataset_t *ds) {
    for (uint32_t i = 0; i < ds->manifest->shard_count && i < old->manifest->shard_count; i++) {
        dsc_shard_slot_t *o = &old->slots[i], *n = &ds->slots[i];
        if (o->state != SLOT_RESIDENT || !same_shard(o->meta, n->meta))
            continue;
        int zero = 0;
        if (!atomic_compare_exchange_strong(&o->refs, &zero, -1))
            continue;
        n->data = o->data;
        n->index = o->index;
        n->chunk_count = o->chunk_count;
        n->state = SLOT_RESIDENT;
        atomic_store(&n->last_use, atomic_load(&o->last_use));
        o->data = NULL;
        o->state = SLOT_ABSENT;
        old->cached_shards--;
        old->cached_bytes -= o->meta->bytes;
        ds->cached_shards++;
        ds->cached_bytes += n->meta->bytes;
        atomic_store_explicit(&n->refs, 0, memory_order_release);
    }
}

int dsc_catalog_rescan(dsc_catalog_t *cat) {
    pthread_mutex_lock(&cat->rescan_lock);
    table_t *cur = atomic_load(&cat->table);
    table_t *next = calloc(1, sizeof *next + cat->dir_count * sizeof(dsc_dataset_t *));
    if (next == NULL) {
        pthread_mutex_unlock(&cat->rescan_lock);
        LOG_ERROR("rescan: out of memory");
        return DSC_ENOMEM;
    }
    dsc_dataset_t *fresh = NULL; /* created by this rescan, linked through all_next */
    for (uint32_t d = 0; d < cat->dir_count; d++) {
        const char *dir = cat->dirs[d];
        dsc_dataset_t *old = NULL;
        for (uint32_t i = 0; i < cur->count; i++)
            if (strcmp(cur->items[i]->dir, dir) == 0)
                old = cur->items[i];
        dsc_dataset_t *ds = NULL;
        int rc = dataset_create(dir, &ds);
        if (rc < 0) {
            LOG_WARN("rescan: %s: %s: dataset %s", dir, dsc_strerror(rc),
                     old ? "dropped" : "not served");
            continue;
        }
        if (old && strcmp(old->json, ds->json) == 0) {
            dataset_free(ds);
            ds = old;
        }
        int dup = 0;
        for (uint32_t i = 0; i < next->count; i++)
            dup |= strcmp(next->items[i]->name, ds->name) == 0;
        if (dup) {
            LOG_ERROR("rescan: %s: dataset %s is already served from another directory", dir,
                      ds->name);
            if (ds != old)
                dataset_free(ds);
            continue;
        }
        if (ds != old) {
            LOG_INFO("rescan: dataset %s %s: %u shards (%s)", ds->name, old ? "changed" : "added",
                     ds->manifest->shard_count, dir);
            if (old) {
                atomic_store(&ds->hits, atomic_load(&old->hits));
                atomic_store(&ds->misses, atomic_load(&old->misses));
                atomic_store(&ds->bytes_served, atomic_load(&old->bytes_served));
                pthread_mutex_lock(&cat->lock);
                adopt_locked(old, ds);
                pthread_mutex_unlock(&cat->lock);
            }
            ds->all_next = fresh;
            fresh = ds;
        }
        next->items[next->count++] = ds;
    }
    /* Link the new datasets into the list freed at destroy. */
    while (fresh) {
        dsc_dataset_t *n = fresh->all_next;
        fresh->all_next = cat->all;
        cat->all = fresh;
        fresh = n;
    }
    publish(cat, next);
    /* Datasets no longer in the table are retired: free what nobody holds now, the rest when
     * its last reference goes. Cached indexes go too: a file may have been rewritten. */
    pthread_mutex_lock(&cat->lock);
    while (cat->index_head)
        index_drop_locked(cat, cat->index_head);
    for (uint32_t i = 0; i < cur->count; i++) {
        dsc_dataset_t *old = cur->items[i];
        int kept = 0;
        for (uint32_t j = 0; j < next->count; j++)
            kept |= next->items[j] == old;
        if (kept)
            continue;
        atomic_store(&old->retired, 1);
        for (uint32_t k = 0; k < old->manifest->shard_count; k++)
            evict_slot_locked(cat, &old->slots[k]);
    }
    pthread_mutex_unlock(&cat->lock);
    int count = (int)next->count;
    pthread_mutex_unlock(&cat->rescan_lock);
    LOG_INFO("rescan: %d datasets served", count);
    return count;
}

/* ---- statistics -------------------------------------------------------------------------- */

/* Bookkeeping bytes (cat->lock held): the catalog, its tables, every dataset created (manifest,
 * its JSON, one slot per shard) and the index cache. Per shard that is a slot, a manifest
 * entry, its JSON and, while read through, its cached index (48 bytes per chunk). */
static uint64_t metadata_bytes_locked(dsc_catalog_t *cat) {
    return sizeof *cat + cat->thread_count * sizeof(pthread_t) +
           atomic_load_explicit(&cat->table_meta_bytes, memory_order_relaxed) + cat->index_bytes;
}

/* The part of metadata_bytes owned by add_dir/rescan (directories, tables, datasets): computed
 * under rescan_lock whenever they change, read by STAT without it. */
static void update_table_meta(dsc_catalog_t *cat) {
    uint64_t total = cat->dir_count * sizeof(char *);
    for (uint32_t i = 0; i < cat->dir_count; i++)
        total += strlen(cat->dirs[i]) + 1;
    table_t *t = atomic_load(&cat->table);
    total += sizeof *t + t->count * sizeof(dsc_dataset_t *);
    for (table_t *r = cat->retired_tables; r; r = r->retired_next)
        total += sizeof *r + r->count * sizeof(dsc_dataset_t *);
    for (dsc_dataset_t *ds = cat->all; ds; ds = ds->all_next) {
        uint64_t shards = ds->manifest->shard_count;
        total += sizeof *ds + strlen(ds->dir) + 1 + ds->json_len + 1;
        total += sizeof *ds->manifest + shards * sizeof(dsc_manifest_shard_t);
        total += (shards ? shards : 1) * sizeof(dsc_shard_slot_t);
    }
    atomic_store_explicit(&cat->table_meta_bytes, total, memory_order_relaxed);
}

static cJSON *dataset_json_locked(dsc_dataset_t *ds) {
    cJSON *o = cJSON_CreateObject();
    if (o == NULL)
        return NULL;
    cJSON_AddStringToObject(o, "name", ds->name);
    cJSON_AddNumberToObject(o, "shards", ds->manifest->shard_count);
    cJSON_AddNumberToObject(o, "samples", (double)ds->manifest->samples);
    cJSON_AddNumberToObject(o, "bytes", (double)ds->manifest->bytes);
    cJSON_AddNumberToObject(o, "cached_shards", (double)ds->cached_shards);
    cJSON_AddNumberToObject(o, "cached_bytes", (double)ds->cached_bytes);
    cJSON_AddNumberToObject(o, "hits", (double)atomic_load(&ds->hits));
    cJSON_AddNumberToObject(o, "misses", (double)atomic_load(&ds->misses));
    cJSON_AddNumberToObject(o, "bytes_served", (double)atomic_load(&ds->bytes_served));
    cJSON_AddNumberToObject(o, "bad_shards", (double)ds->bad_shards);
    return o;
}

char *dsc_catalog_stat_json(dsc_catalog_t *cat, const char *name, size_t name_len, int *not_found) {
    *not_found = 0;
    dsc_dataset_t *only = NULL;
    if (name_len > 0) {
        only = dsc_catalog_find(cat, name, name_len);
        if (only == NULL) {
            *not_found = 1;
            return NULL;
        }
    }
    dsc_store_info_t si;
    dsc_store_info(cat->store, &si);
    cJSON *root = cJSON_CreateObject();
    cJSON *store = cJSON_AddObjectToObject(root, "store");
    cJSON *list = cJSON_AddArrayToObject(root, "datasets");
    if (root == NULL || store == NULL || list == NULL) {
        cJSON_Delete(root);
        return NULL;
    }
    cJSON_AddNumberToObject(store, "capacity", (double)si.capacity);
    cJSON_AddNumberToObject(store, "used", (double)si.used);
    cJSON_AddNumberToObject(store, "largest_free", (double)si.largest_free);
    cJSON_AddStringToObject(store, "policy", cat->opt.policy == DSC_POLICY_LRU ? "lru" : "minio");
    cJSON_AddNumberToObject(store, "evictions", (double)atomic_load(&cat->evictions));
    cJSON_AddNumberToObject(store, "read_through", (double)atomic_load(&cat->read_through));
    cJSON_AddNumberToObject(store, "read_through_bytes",
                            (double)atomic_load(&cat->read_through_bytes));
    cJSON_AddNumberToObject(store, "bytes_loaded", (double)atomic_load(&cat->bytes_loaded));
    table_t *t = atomic_load(&cat->table);
    pthread_mutex_lock(&cat->lock);
    cJSON_AddNumberToObject(store, "index_cache_bytes", (double)cat->index_bytes);
    cJSON_AddNumberToObject(store, "index_cache_entries", (double)cat->index_count);
    cJSON_AddNumberToObject(store, "metadata_bytes", (double)metadata_bytes_locked(cat));
    for (uint32_t i = 0; i < t->count; i++)
        if (only == NULL || t->items[i] == only)
            cJSON_AddItemToArray(list, dataset_json_locked(t->items[i]));
    pthread_mutex_unlock(&cat->lock);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}

char *dsc_catalog_list_json(dsc_catalog_t *cat) {
    cJSON *list = cJSON_CreateArray();
    if (list == NULL)
        return NULL;
    table_t *t = atomic_load(&cat->table);
    for (uint32_t i = 0; i < t->count; i++) {
        dsc_dataset_t *ds = t->items[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", ds->name);
        cJSON_AddNumberToObject(o, "shards", ds->manifest->shard_count);
        cJSON_AddNumberToObject(o, "samples", (double)ds->manifest->samples);
        cJSON_AddNumberToObject(o, "bytes", (double)ds->manifest->bytes);
        cJSON_AddItemToArray(list, o);
    }
    char *text = cJSON_PrintUnformatted(list);
    cJSON_Delete(list);
    return text;
}

void dsc_catalog_totals(dsc_catalog_t *cat, dsc_catalog_totals_t *out) {
    memset(out, 0, sizeof *out);
    table_t *t = atomic_load(&cat->table);
    pthread_mutex_lock(&cat->lock);
    for (uint32_t i = 0; i < t->count; i++) {
        dsc_dataset_t *ds = t->items[i];
        out->datasets++;
        out->shards += ds->manifest->shard_count;
        out->cached_shards += ds->cached_shards;
        out->cached_bytes += ds->cached_bytes;
        out->bad_shards += ds->bad_shards;
        out->hits += atomic_load(&ds->hits);
        out->misses += atomic_load(&ds->misses);
        out->bytes_served += atomic_load(&ds->bytes_served);
    }
    out->index_cache_bytes = cat->index_bytes;
    out->index_cache_entries = cat->index_count;
    out->metadata_bytes = metadata_bytes_locked(cat);
    pthread_mutex_unlock(&cat->lock);
    out->evictions = atomic_load(&cat->evictions);
    out->loads = atomic_load(&cat->loads);
    out->load_failures = atomic_load(&cat->load_failures);
    out->read_through = atomic_load(&cat->read_through);
    out->bytes_loaded = atomic_load(&cat->bytes_loaded);
    out->read_through_bytes = atomic_load(&cat->read_through_bytes);
}

dsc_store_t *dsc_catalog_store(dsc_catalog_t *cat) {
    return cat->store;
}

void dsc_catalog_load_histogram(dsc_catalog_t *cat, dsc_load_histogram_t *out) {
    pthread_mutex_lock(&cat->lock);
    memcpy(out->buckets, cat->hist, sizeof out->buckets);
    out->count = cat->hist_count;
    out->sum_seconds = cat->hist_sum;
    pthread_mutex_unlock(&cat->lock);
}
