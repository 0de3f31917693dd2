/* Catalog: datasets, shard slots, hits, eviction, warm-ups, rescans, statistics (the loads and
 * read-throughs themselves run on the I/O threads of readthrough.c).
 * Over 1,000 lines: every slot transition below is made under the one bookkeeping mutex, and
 * they stay in one file so that the lock's rules read in one place; the I/O (readthrough.c), the
 * slot state (catalog_state.c), staging (staging.c) and the root watcher are cut out already.
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
 * Pins and limits per dataset (dsc_catalog_set_policy) steer the same eviction: a pinned
 * dataset's shards are never victims for another's load, a limited dataset's loads evict its own.
 * About 1100 lines: the lock-free hit path, eviction, pins and limits and rescans (--data and
 * --data-root directories) share the slot state and its memory-ordering rules, which stay
 * private to this file.
 */
#include "catalog.h"
#include "catalog_state.h"
#include "protocol.h"
#include "readthrough.h"
#include "srvlog.h"
#include "staging.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void update_table_meta(dsc_catalog_t *cat);
static void notes_free(dir_note_t *notes, uint32_t n);
static name_owner_t *owner_find(dsc_catalog_t *cat, const char *name);
static int owner_add(dsc_catalog_t *cat, const char *name, const char *dir);
static void policy_apply_locked(dsc_catalog_t *cat, dsc_dataset_t *ds);
static int enforce_limit_locked(dsc_catalog_t *cat, dsc_dataset_t *ds);

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
    if (cat->opt.backing_reads == 0)
        cat->opt.backing_reads = 32;
    if (dsc__staging_create(cat) < 0) {
        free(cat);
        free(empty);
        return DSC_ENOMEM;
    }
    atomic_init(&cat->table, empty);
    atomic_init(&cat->rescan_wanted, 0);
    atomic_init(&cat->rescan_cancel, 0);
    atomic_init(&cat->manifest_parses, 0);
    dsc_fq_init(&cat->range_fq, 0, 0, NULL);
    update_table_meta(cat);
    pthread_mutex_init(&cat->lock, NULL);
    pthread_mutex_init(&cat->rescan_lock, NULL);
    pthread_cond_init(&cat->work_cond, NULL);
    pthread_cond_init(&cat->idle_cond, NULL);
    pthread_cond_init(&cat->range_cond, NULL);
    /* io_threads whole-shard loaders, then backing_reads read-through readers (readthrough.c). */
    uint32_t nthreads = cat->opt.io_threads + cat->opt.backing_reads;
    cat->threads = calloc(nthreads, sizeof *cat->threads);
    if (cat->threads == NULL)
        goto fail;
    for (uint32_t i = 0; i < nthreads; i++) {
        if (pthread_create(&cat->threads[i], NULL, dsc__io_thread, cat) != 0)
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
    for (uint32_t i = 0; ds->slots != NULL && i < ds->manifest->shard_count; i++)
        free(ds->slots[i].damage);
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
    pthread_cond_broadcast(&cat->range_cond);
    pthread_mutex_unlock(&cat->lock);
    for (uint32_t i = 0; i < cat->thread_count; i++)
        pthread_join(cat->threads[i], NULL);
    free(cat->threads);
    /* Arena bytes go with the store; queued read-throughs are dropped (nothing waits now). */
    dsc__readthrough_free_all(cat);
    dsc__staging_destroy(cat);
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
    for (uint32_t i = 0; i < cat->root_count; i++)
        free(cat->roots[i]);
    free(cat->roots);
    free(cat->policies);
    for (uint32_t i = 0; i < cat->owner_count; i++)
        free(cat->owners[i].dir);
    free(cat->owners);
    notes_free(cat->notes, cat->note_count);
    pthread_mutex_destroy(&cat->lock);
    pthread_mutex_destroy(&cat->rescan_lock);
    pthread_cond_destroy(&cat->work_cond);
    pthread_cond_destroy(&cat->idle_cond);
    pthread_cond_destroy(&cat->range_cond);
    free(cat);
}

/* ---- datasets ---------------------------------------------------------------------------- */

/* Reads dir's manifest into a new dataset (not published). confined: found under a
 * --data-root (links in it are not followed). *why (may be NULL): a few words on a failure. */
static int dataset_create(dsc_catalog_t *cat, const char *dir, int confined, const char **why,
                          dsc_dataset_t **out) {
    const char *unused;
    if (why == NULL)
        why = &unused;
    *why = "out of memory";
    dsc_dataset_t *ds = calloc(1, sizeof *ds);
    if (ds == NULL)
        return DSC_ENOMEM;
    ds->dir = strdup(dir);
    if (ds->dir == NULL) {
        free(ds);
        return DSC_ENOMEM;
    }
    ds->confined = (uint8_t)confined;
    /* The identity is taken when the file is opened, before it is read: a manifest written
     * meanwhile reads as changed at the next look (dsc__dataset_changed_on_disk). */
    dsc_manifest_file_id_t id;
    dsc_manifest_t *m = NULL;
    int rc = dsc__manifest_read(cat, dir, confined, &id, why, &m);
    if (rc < 0) {
        free(ds->dir);
        free(ds);
        return rc;
    }
    ds->mf_dev = id.dev;
    ds->mf_ino = id.ino;
    ds->mf_size = id.size;
    ds->mf_mtime_ns = id.mtime_ns;
    ds->manifest = m;
    snprintf(ds->name, sizeof ds->name, "%s", m->name);
    ds->json = dsc_manifest_to_json(m);
    ds->slots = calloc(m->shard_count ? m->shard_count : 1, sizeof *ds->slots);
    if (ds->json == NULL || ds->slots == NULL) {
        dataset_free(ds);
        return DSC_ENOMEM;
    }
    ds->json_len = strlen(ds->json);
    ds->version = dsc_dataset_version(ds->json, ds->json_len);
    for (uint32_t i = 0; i < m->shard_count; i++) {
        dsc_shard_slot_t *s = &ds->slots[i];
        atomic_init(&s->refs, -1);
        atomic_init(&s->last_use, 0);
        s->ds = ds;
        s->meta = &m->shards[i];
        s->state = SLOT_ABSENT;
        /* A FIFO (or device, or directory) in place of a shard would block the I/O thread that
         * opens it: refused here, once, and answered UNAVAILABLE. A missing file is left to
         * the load (it may appear before a GET). */
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, s->meta->file);
        if ((confined ? lstat(path, &st) : stat(path, &st)) == 0 && !S_ISREG(st.st_mode)) {
            s->refused = 1;
            LOG_WARN("dataset %s: shard %u file %s is not a regular file%s: refused (a rescan "
                     "looks again)",
                     m->name, i, path,
                     confined && S_ISLNK(st.st_mode) ? " (a symbolic link under --data-root)" : "");
        }
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

uint64_t dsc_dataset_version_of(const dsc_dataset_t *ds) {
    return ds->version;
}

void dsc_dataset_count_served(dsc_dataset_t *ds, uint64_t bytes) {
    atomic_fetch_add_explicit(&ds->bytes_served, bytes, memory_order_relaxed);
}

/* ---- eviction (cat->lock held) ----------------------------------------------------------- */

/* Evicts the least recently used unreferenced resident shard of any unpinned dataset served
 * whose priority is below `below` (lowest priority first; UINT32_MAX: any), or (only) of that
 * dataset alone, pinned or not. O(shards); evictions are rare next to hits. Returns 1 when one
 * was evicted. */
static int evict_lru_locked(dsc_catalog_t *cat, dsc_dataset_t *only, uint32_t below) {
    table_t *t = atomic_load(&cat->table);
    dsc_shard_slot_t *victim = NULL;
    uint64_t oldest = UINT64_MAX;
    uint32_t lowest = UINT32_MAX;
    for (uint32_t d = 0; d < t->count; d++) {
        dsc_dataset_t *ds = t->items[d];
        if (only ? ds != only : ds->pinned || ds->priority >= below)
            continue;
        if (!only && ds->priority > lowest)
            continue; /* a lower priority has a candidate already */
        if (!only && ds->priority < lowest && victim != NULL) {
            /* Found a lower priority: its shards go first, whatever their age. */
            int any = 0;
            for (uint32_t i = 0; i < ds->manifest->shard_count && !any; i++)
                any = ds->slots[i].state == SLOT_RESIDENT && atomic_load(&ds->slots[i].refs) == 0;
            if (!any)
                continue;
            victim = NULL;
            oldest = UINT64_MAX;
        }
        for (uint32_t i = 0; i < ds->manifest->shard_count; i++) {
            dsc_shard_slot_t *s = &ds->slots[i];
            if (s->state != SLOT_RESIDENT || atomic_load(&s->refs) != 0)
                continue;
            uint64_t used = atomic_load_explicit(&s->last_use, memory_order_relaxed);
            if (used < oldest) {
                oldest = used;
                victim = s;
                lowest = ds->priority;
            }
        }
    }
    return victim ? dsc__slot_evict_locked(cat, victim) : 0;
}

/* ---- loading (the I/O threads in readthrough.c run them) -------------------------------- */

/* A dataset's resident and loading bytes (cat->lock held). O(shards): only datasets with a
 * limit ask. */
static uint64_t committed_bytes_locked(const dsc_dataset_t *ds) {
    uint64_t loading = 0;
    for (uint32_t i = 0; i < ds->manifest->shard_count; i++)
        if (ds->slots[i].state == SLOT_LOADING)
            loading += ds->slots[i].meta->bytes;
    return ds->cached_bytes + loading;
}

/* Allocates the shard's extent in the store and queues a whole-shard load (how: LOAD_*).
 * Returns 1 queued, 0 not (no room), or <0. */
static int start_load_locked(dsc_catalog_t *cat, dsc_shard_slot_t *s, int how) {
    uint64_t size = s->meta->bytes;
    uint8_t *dst = NULL;
    dsc_dataset_t *ds = s->ds;
    int may_evict = cat->opt.policy == DSC_POLICY_LRU && how != LOAD_WARM_KEEP;
    if (ds->limit > 0) {
        /* Within the dataset's limit (lru: by evicting its own least recently used shards). */
        while (committed_bytes_locked(ds) + size > ds->limit)
            if (!may_evict || !evict_lru_locked(cat, ds, 0))
                return 0;
    }
    int rc = dsc_store_alloc(cat->store, size, &dst);
    /* A pinned dataset's loads make room whatever the policy; nobody evicts a pinned one. Other
     * loads evict lower priorities (lru: and their own), never a warm-up that must not evict. */
    uint32_t below = ds->pinned              ? UINT32_MAX
                     : how == LOAD_WARM_KEEP ? 0
                     : may_evict             ? ds->priority + 1
                                             : ds->priority;
    while (rc == DSC_ENOSPC && below > 0 && evict_lru_locked(cat, NULL, below))
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

/* ---- hits and holds ---------------------------------------------------------------------- */

int dsc_catalog_acquire(dsc_catalog_t *cat, dsc_shard_slot_t *s, dsc_waiter_t *waiter,
                        dsc_hold_t *hold) {
    int r = atomic_load_explicit(&s->refs, memory_order_acquire);
    while (r >= 0) {
        if (atomic_compare_exchange_weak_explicit(&s->refs, &r, r + 1, memory_order_acquire,
                                                  memory_order_acquire)) {
            *hold = (dsc_hold_t){.slot = s,
                                 .data = s->data,
                                 .size = s->meta->bytes,
                                 .index = s->index,
                                 .chunk_count = s->chunk_count,
                                 .damage = s->damage};
            atomic_store_explicit(&s->last_use, dsc_now_ns(), memory_order_relaxed);
            atomic_fetch_add_explicit(&s->ds->hits, 1, memory_order_relaxed);
            return 1;
        }
    }
    if (s->refused)
        return DSC_EUNAVAIL;
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
        /* Read ahead for a hint, or being read for another GET (staging.c). */
        rc = dsc__staging_acquire_locked(cat, s, waiter, hold);
        if (rc == 1) {
            atomic_fetch_add_explicit(&s->ds->hits, 1, memory_order_relaxed);
            pthread_mutex_unlock(&cat->lock);
            return 1;
        }
        if (rc == DSC__STAGE_NONE) {
            rc = start_load_locked(cat, s, LOAD_REQUEST);
            if (rc == 1) {
                waiter->next = NULL;
                s->waiters = waiter;
                rc = 0;
            } else if (rc == 0) {
                rc = dsc__staging_read_locked(cat, s, waiter); /* no room: read them through */
            }
        }
        if (rc == 0)
            atomic_fetch_add_explicit(&s->ds->misses, 1, memory_order_relaxed);
        break;
    }
    pthread_mutex_unlock(&cat->lock);
    return rc;
}

int dsc_catalog_peek(dsc_catalog_t *cat, dsc_shard_slot_t *s, dsc_hold_t *hold) {
    (void)cat;
    int r = atomic_load_explicit(&s->refs, memory_order_acquire);
    while (r >= 0) {
        if (atomic_compare_exchange_weak_explicit(&s->refs, &r, r + 1, memory_order_acquire,
                                                  memory_order_acquire)) {
            *hold = (dsc_hold_t){.slot = s,
                                 .data = s->data,
                                 .size = s->meta->bytes,
                                 .index = s->index,
                                 .chunk_count = s->chunk_count,
                                 .damage = s->damage};
            if (hold->damage == NULL)
                return 1;
            dsc_hold_release(cat, hold);
            return 0;
        }
    }
    return 0;
}

void dsc_catalog_set_peer_source(dsc_catalog_t *cat, const dsc_peer_source_t *source) {
    atomic_store(&cat->peer, source);
}

int dsc_catalog_staging_on(const dsc_catalog_t *cat) {
    return cat->staging != NULL;
}

uint32_t dsc_catalog_hint(dsc_catalog_t *cat, dsc_dataset_t *ds, uint64_t hinter,
                          const dsc_hint_req_t *req) {
    if (cat->staging == NULL)
        return 0;
    uint32_t accepted = 0;
    double now = dsc_now_s();
    pthread_mutex_lock(&cat->lock);
    for (uint32_t i = 0; i < req->range_count; i++) {
        dsc_hint_range_t r;
        dsc_hint_range_at(req, i, &r);
        if (r.shard_id >= ds->manifest->shard_count)
            continue;
        accepted += (uint32_t)dsc__staging_hint_locked(cat, &ds->slots[r.shard_id], hinter,
                                                       r.first_chunk, r.chunk_count, r.due_ms, now);
    }
    dsc__staging_pump_locked(cat, now);
    pthread_mutex_unlock(&cat->lock);
    return accepted;
}

void dsc_hold_release(dsc_catalog_t *cat, dsc_hold_t *hold) {
    if (hold == NULL)
        return;
    if (hold->slot) {
        dsc_shard_slot_t *s = hold->slot;
        int prev = atomic_fetch_sub_explicit(&s->refs, 1, memory_order_release);
        if (prev == 1 && atomic_load(&s->ds->retired)) {
            pthread_mutex_lock(&cat->lock);
            dsc__slot_evict_locked(cat, s);
            pthread_mutex_unlock(&cat->lock);
        }
    }
    if (hold->temp) {
        dsc_tempbuf_t *tb = hold->temp;
        if (atomic_fetch_sub(&tb->refs, 1) == 1) {
            pthread_mutex_lock(&cat->lock);
            cat->temp_bytes -= tb->size;
            pthread_mutex_unlock(&cat->lock);
            dsc__tempbuf_free(tb);
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
    uint64_t bytes0 = atomic_load(&cat->bytes_loaded) + atomic_load(&cat->peer_bytes);
    uint64_t peer0 = atomic_load(&cat->peer_bytes);
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
            double mb =
                (double)(atomic_load(&cat->bytes_loaded) + atomic_load(&cat->peer_bytes) - bytes0) /
                1e6;
            LOG_INFO("warm-up: %llu/%llu shards, %.1f MB/s, %.1f MB from peers",
                     (unsigned long long)done, (unsigned long long)started, mb / (dsc_now_s() - t0),
                     (double)(atomic_load(&cat->peer_bytes) - peer0) / 1e6);
        }
    }
    int cancelled = cat->loads_in_flight > 0;
    pthread_mutex_unlock(&cat->lock);
    double secs = dsc_now_s() - t0;
    double peer_mb = (double)(atomic_load(&cat->peer_bytes) - peer0) / 1e6;
    double mb =
        (double)(atomic_load(&cat->bytes_loaded) + atomic_load(&cat->peer_bytes) - bytes0) / 1e6;
    if (cancelled)
        LOG_INFO("warm-up stopped (shutting down): %llu of %llu shards loaded in %.2f s",
                 (unsigned long long)(atomic_load(&cat->loads) - loads0_ok),
                 (unsigned long long)started, secs);
    else
        LOG_INFO("warm-up done: %llu/%llu shards in %.2f s, %.1f MB at %.1f MB/s (%.1f MB from "
                 "peers, %.1f MB from the backing storage)",
                 (unsigned long long)started, (unsigned long long)total, secs, mb,
                 secs > 0 ? mb / secs : 0.0, peer_mb, mb - peer_mb);
    return (int)started;
}

int dsc_catalog_warm_all(dsc_catalog_t *cat) {
    return dsc_catalog_warm_some(cat, NULL, NULL, 0, NULL, NULL);
}

void dsc_catalog_stop_loads(dsc_catalog_t *cat) {
    pthread_mutex_lock(&cat->lock);
    cat->draining = 1;
    pthread_cond_broadcast(&cat->work_cond);
    pthread_cond_broadcast(&cat->range_cond);
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
    for (uint32_t i = first; i < end && !ds->pinned; i++)
        evicted += dsc__slot_evict_locked(cat, &ds->slots[i]);
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
    const char *why = NULL;
    int rc = dataset_create(cat, dir, 0, &why, &ds);
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
    if (rc < 0) {
        if (why != NULL && rc != DSC_ENOENT)
            LOG_DEBUG("%s: manifest %s", dir, why);
        goto done;
    }
    const name_owner_t *owner = owner_find(cat, ds->name);
    if (owner != NULL) {
        LOG_ERROR("%s: dataset %s belongs to %s, which served it first: refused", dir, ds->name,
                  owner->dir);
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
    if (owner_add(cat, ds->name, dir) < 0) {
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
    pthread_mutex_lock(&cat->lock);
    policy_apply_locked(cat, ds);
    pthread_mutex_unlock(&cat->lock);
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
        n->damage = o->damage; /* the same file: its damaged chunks stay damaged */
        n->damaged = o->damaged;
        n->chunk_logged = o->chunk_logged;
        o->damage = NULL;
        o->damaged = 0;
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

/* ---- name ownership and remembered directories (rescan_lock) ----------------------------- */

static name_owner_t *owner_find(dsc_catalog_t *cat, const char *name) {
    for (uint32_t i = 0; i < cat->owner_count; i++)
        if (strcmp(cat->owners[i].name, name) == 0)
            return &cat->owners[i];
    return NULL;
}

/* Records dir as the owner of name. Returns 0 or DSC_ENOMEM (then the name is served without
 * a record: a later claimant would be judged by directory order). */
static int owner_add(dsc_catalog_t *cat, const char *name, const char *dir) {
    name_owner_t *grown = realloc(cat->owners, (cat->owner_count + 1) * sizeof *grown);
    if (grown == NULL)
        return DSC_ENOMEM;
    cat->owners = grown;
    name_owner_t *o = &cat->owners[cat->owner_count];
    if ((o->dir = strdup(dir)) == NULL)
        return DSC_ENOMEM;
    snprintf(o->name, sizeof o->name, "%s", name);
    cat->owner_count++;
    return 0;
}

static void notes_free(dir_note_t *notes, uint32_t n) {
    for (uint32_t i = 0; notes != NULL && i < n; i++) {
        free(notes[i].dir);
        free(notes[i].owner);
    }
    free(notes);
}

static const dir_note_t *note_find(const dsc_catalog_t *cat, const char *dir) {
    for (uint32_t i = 0; i < cat->note_count; i++)
        if (strcmp(cat->notes[i].dir, dir) == 0)
            return &cat->notes[i];
    return NULL;
}

static int same_file(const dsc_manifest_file_id_t *a, const dsc_manifest_file_id_t *b) {
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime_ns == b->mtime_ns;
}

/* 1 when id is the manifest ds was read from (its fields are under cat->lock). */
static int dataset_same_file(dsc_catalog_t *cat, dsc_dataset_t *ds,
                             const dsc_manifest_file_id_t *id) {
    pthread_mutex_lock(&cat->lock);
    dsc_manifest_file_id_t was = {ds->mf_dev, ds->mf_ino, ds->mf_size, ds->mf_mtime_ns};
    pthread_mutex_unlock(&cat->lock);
    return same_file(&was, id);
}

/* ---- rescans ----------------------------------------------------------------------------- */

/* A directory a rescan looks at, and what it found there. */
typedef struct cand {
    char *dir;
    uint8_t confined;    /* under a --data-root */
    const char *refused; /* a symbolic link out of its root: never read (static text) */
    dsc_manifest_file_id_t id;
    int rc;                  /* 0: a valid manifest naming `name`; else its error */
    const char *why;         /* rc < 0: a few words (static) */
    char name[DSC_MAX_NAME]; /* rc 0 */
    dsc_dataset_t *ds;       /* rc 0: read now, or the one served from dir (unchanged) */
    const char *owner;       /* rc 0: the name belongs to this other directory */
    uint8_t served;
} cand_t;

static void cands_free(cand_t *cand, uint32_t n) {
    for (uint32_t i = 0; cand != NULL && i < n; i++)
        free(cand[i].dir);
    free(cand);
}

static int push_cand(cand_t **cand, uint32_t *n, uint32_t *cap, const char *path, int confined,
                     const char *refused) {
    if (*n == *cap) {
        uint32_t ncap = *cap ? *cap * 2 : 16;
        cand_t *grown = realloc(*cand, ncap * sizeof *grown);
        if (grown == NULL)
            return DSC_ENOMEM;
        *cand = grown;
        *cap = ncap;
    }
    cand_t *c = &(*cand)[*n];
    memset(c, 0, sizeof *c);
    if ((c->dir = strdup(path)) == NULL)
        return DSC_ENOMEM;
    c->confined = (uint8_t)confined;
    c->refused = refused;
    (*n)++;
    return 0;
}

/* 1 when path (resolved) is root_real or inside it. */
static int inside(const char *real, const char *root_real) {
    size_t len = strlen(root_real);
    if (len == 1 && root_real[0] == '/')
        return 1;
    return strncmp(real, root_real, len) == 0 && (real[len] == '/' || real[len] == '\0');
}

/* The directories a rescan reads (under rescan_lock): the --data ones first, then every
 * subdirectory of each --data-root whose name does not start with '.' (a writer's hidden
 * temporary directory is not a dataset until renamed), in name order. An entry that is a
 * symbolic link is followed only to a directory inside the same root (realpath); one leading out
 * of it is listed as refused. Only lstat, stat and realpath: nothing here opens a file. */
static int collect_dirs(dsc_catalog_t *cat, cand_t **out, uint32_t *count) {
    cand_t *cand = NULL;
    uint32_t n = 0, cap = 0;
    int rc = 0;
    for (uint32_t i = 0; rc == 0 && i < cat->dir_count; i++)
        rc = push_cand(&cand, &n, &cap, cat->dirs[i], 0, NULL);
    for (uint32_t r = 0; rc == 0 && r < cat->root_count; r++) {
        struct dirent **names = NULL;
        int k = scandir(cat->roots[r], &names, NULL, alphasort);
        if (k < 0) {
            LOG_WARN("rescan: --data-root %s: %s: its datasets are not served", cat->roots[r],
                     strerror(errno));
            continue;
        }
        char *root_real = realpath(cat->roots[r], NULL);
        for (int j = 0; j < k; j++) {
            char path[4096];
            struct stat st;
            if (rc == 0 && names[j]->d_name[0] != '.' &&
                snprintf(path, sizeof path, "%s/%s", cat->roots[r], names[j]->d_name) <
                    (int)sizeof path &&
                lstat(path, &st) == 0) {
                if (S_ISDIR(st.st_mode)) {
                    rc = push_cand(&cand, &n, &cap, path, 1, NULL);
                } else if (S_ISLNK(st.st_mode) && stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
                    char *real = realpath(path, NULL);
                    int ok = real != NULL && root_real != NULL && inside(real, root_real);
                    free(real);
                    rc = push_cand(&cand, &n, &cap, path, 1,
                                   ok ? NULL : "a symbolic link out of its --data-root");
                }
            }
            free(names[j]);
        }
        free(root_real);
        free(names);
    }
    if (rc < 0) {
        cands_free(cand, n);
        return rc;
    }
    *out = cand;
    *count = n;
    return 0;
}

/* What dir holds now (rescan_lock held): the served dataset `old` when its manifest is the file
 * it was read from, what the notes remember when the manifest is the one judged before, else
 * the manifest read now (never a FIFO, a device or, under a root, a link: those are refused by
 * lstat before any open). */
static void judge(dsc_catalog_t *cat, cand_t *c, dsc_dataset_t *old) {
    c->rc = DSC_EIO;
    if (c->refused != NULL) {
        c->why = c->refused;
        return;
    }
    int regular;
    int rc = dsc__manifest_identity(c->dir, c->confined, &c->id, &regular);
    if (rc < 0) {
        c->rc = rc;
        c->why = rc == DSC_ENOENT ? "no manifest" : "cannot stat its manifest";
        return;
    }
    if (old != NULL && regular && dataset_same_file(cat, old, &c->id)) {
        c->rc = 0;
        c->ds = old;
        snprintf(c->name, sizeof c->name, "%s", old->name);
        return;
    }
    const dir_note_t *note = note_find(cat, c->dir);
    if (note != NULL && note->rc != DSC_ENOENT && same_file(&note->id, &c->id)) {
        c->rc = note->rc;
        c->why = note->why;
        snprintf(c->name, sizeof c->name, "%s", note->name);
        return;
    }
    if (!regular) {
        c->why = "not a regular file (a FIFO, a device, a directory or a symbolic link)";
        return;
    }
    c->rc = dataset_create(cat, c->dir, c->confined, &c->why, &c->ds);
    if (c->rc < 0)
        return;
    snprintf(c->name, sizeof c->name, "%s", c->ds->name);
    if (old != NULL && strcmp(old->json, c->ds->json) == 0) {
        /* Rewritten with the same content: keep serving old, remember the new file. */
        pthread_mutex_lock(&cat->lock);
        old->mf_dev = c->ds->mf_dev;
        old->mf_ino = c->ds->mf_ino;
        old->mf_size = c->ds->mf_size;
        old->mf_mtime_ns = c->ds->mf_mtime_ns;
        pthread_mutex_unlock(&cat->lock);
        dataset_free(c->ds);
        c->ds = old;
    }
}

/* Drops the owners whose directory is gone, lost its manifest, or now names another dataset
 * (rescan_lock held). A directory whose manifest cannot be read keeps its name. */
static void release_owners(dsc_catalog_t *cat, const cand_t *cand, uint32_t n) {
    for (uint32_t i = 0; i < cat->owner_count;) {
        name_owner_t *o = &cat->owners[i];
        const cand_t *c = NULL;
        for (uint32_t d = 0; d < n && c == NULL; d++)
            if (strcmp(cand[d].dir, o->dir) == 0)
                c = &cand[d];
        int keep = c != NULL && c->refused == NULL && c->rc != DSC_ENOENT &&
                   (c->rc < 0 || strcmp(c->name, o->name) == 0);
        if (keep) {
            i++;
            continue;
        }
        LOG_DEBUG("rescan: dataset name %s no longer belongs to %s", o->name, o->dir);
        free(o->dir);
        cat->owners[i] = cat->owners[--cat->owner_count];
    }
}

/* Logs what changed about a directory not served, and returns its note (0 with *note filled, or
 * 1: nothing to remember). */
static int note_unserved(dsc_catalog_t *cat, const cand_t *c, dsc_dataset_t *old, int explicit_dir,
                         dir_note_t *note) {
    if (c->rc == DSC_ENOENT && !explicit_dir && old == NULL)
        return 1; /* under a root, a directory whose manifest is not written yet: quietly */
    const dir_note_t *was = note_find(cat, c->dir);
    int same = was != NULL && was->rc == c->rc &&
               strcmp(was->why ? was->why : "", c->why ? c->why : "") == 0 &&
               strcmp(was->name, c->name) == 0 && ((was->owner == NULL) == (c->owner == NULL)) &&
               (c->owner == NULL || strcmp(was->owner, c->owner) == 0);
    if (c->rc == 0 && (!same || old != NULL))
        LOG_ERROR("rescan: %s: dataset %s belongs to %s, which served it first: refused (the "
                  "name stays with that directory until it is removed)",
                  c->dir, c->name, c->owner);
    else if (c->rc < 0 && (!same || old != NULL))
        LOG_WARN("rescan: %s: %s: %s: dataset %s", c->dir, c->why ? c->why : "",
                 dsc_strerror(c->rc), old ? "dropped" : "not served");
    memset(note, 0, sizeof *note);
    note->dir = strdup(c->dir);
    note->owner = c->owner ? strdup(c->owner) : NULL;
    if (note->dir == NULL || (c->owner != NULL && note->owner == NULL)) {
        free(note->dir);
        free(note->owner);
        return 1;
    }
    note->id = c->id;
    note->rc = c->rc;
    note->why = c->why;
    snprintf(note->name, sizeof note->name, "%s", c->name);
    return 0;
}

int dsc_catalog_add_root(dsc_catalog_t *cat, const char *root) {
    struct stat st;
    if (stat(root, &st) != 0 || !S_ISDIR(st.st_mode))
        return DSC_ENOENT;
    pthread_mutex_lock(&cat->rescan_lock);
    char **roots = realloc(cat->roots, (cat->root_count + 1) * sizeof *roots);
    char *copy = strdup(root);
    if (roots)
        cat->roots = roots;
    if (roots == NULL || copy == NULL) {
        free(copy);
        pthread_mutex_unlock(&cat->rescan_lock);
        return DSC_ENOMEM;
    }
    cat->roots[cat->root_count++] = copy;
    pthread_mutex_unlock(&cat->rescan_lock);
    LOG_INFO("--data-root %s: every subdirectory with a complete %s is a dataset", root,
             DSC_MANIFEST_FILE);
    int rc = dsc_catalog_rescan_quiet(cat, 1);
    return rc < 0 ? rc : 0;
}

uint32_t dsc_catalog_roots(dsc_catalog_t *cat, const char ***roots) {
    *roots = (const char **)cat->roots;
    return cat->root_count;
}

void dsc_catalog_cancel_rescans(dsc_catalog_t *cat) {
    atomic_store(&cat->rescan_cancel, 1);
}

int dsc_catalog_take_rescan_request(dsc_catalog_t *cat) {
    return atomic_exchange(&cat->rescan_wanted, 0);
}

int dsc_catalog_rescan(dsc_catalog_t *cat) {
    return dsc_catalog_rescan_quiet(cat, 0);
}

int dsc_catalog_rescan_quiet(dsc_catalog_t *cat, int quiet) {
    pthread_mutex_lock(&cat->rescan_lock);
    table_t *cur = atomic_load(&cat->table);
    cand_t *cand = NULL;
    uint32_t cand_count = 0, explicit_count = cat->dir_count;
    int crc = collect_dirs(cat, &cand, &cand_count);
    table_t *next = crc < 0 ? NULL : calloc(1, sizeof *next + cand_count * sizeof(dsc_dataset_t *));
    dir_note_t *notes = next ? calloc(cand_count ? cand_count : 1, sizeof *notes) : NULL;
    if (next == NULL || notes == NULL) {
        free(next);
        cands_free(cand, cand_count);
        pthread_mutex_unlock(&cat->rescan_lock);
        LOG_ERROR("rescan: out of memory");
        return DSC_ENOMEM;
    }
    uint32_t note_count = 0;
    dsc_dataset_t **olds = calloc(cand_count ? cand_count : 1, sizeof *olds);
    if (olds == NULL) {
        free(next);
        free(notes);
        cands_free(cand, cand_count);
        pthread_mutex_unlock(&cat->rescan_lock);
        LOG_ERROR("rescan: out of memory");
        return DSC_ENOMEM;
    }
    /* 1. What each directory holds (file I/O: lstat, and a read only when a manifest changed). */
    for (uint32_t d = 0; d < cand_count; d++) {
        for (uint32_t i = 0; i < cur->count; i++)
            if (strcmp(cur->items[i]->dir, cand[d].dir) == 0)
                olds[d] = cur->items[i];
        if (atomic_load(&cat->rescan_cancel)) {
            for (uint32_t k = 0; k < d; k++)
                if (cand[k].ds != NULL && cand[k].ds != olds[k])
                    dataset_free(cand[k].ds);
            free(next);
            free(notes);
            free(olds);
            cands_free(cand, cand_count);
            pthread_mutex_unlock(&cat->rescan_lock);
            return DSC_ECANCELED;
        }
        judge(cat, &cand[d], olds[d]);
    }
    /* 2. A name belongs to the directory that served it first, whatever the names' order: its
     * owner keeps it while it holds it; a free name goes to the first directory that claims it. */
    release_owners(cat, cand, cand_count);
    dsc_dataset_t *fresh = NULL; /* created by this rescan, linked through all_next */
    uint32_t fresh_count = 0;
    for (uint32_t d = 0; d < cand_count; d++) {
        cand_t *c = &cand[d];
        dsc_dataset_t *old = olds[d];
        if (c->rc == 0) {
            const name_owner_t *owner = owner_find(cat, c->name);
            if (owner != NULL && strcmp(owner->dir, c->dir) != 0) {
                c->owner = owner->dir;
            } else {
                if (c->ds == NULL) /* remembered as refused; its name is free now */
                    c->rc = dataset_create(cat, c->dir, c->confined, &c->why, &c->ds);
                if (c->rc == 0 && strcmp(c->ds->name, c->name) != 0) {
                    c->rc = DSC_EAGAIN; /* rewritten since it was judged: the next rescan */
                    c->why = "changed while read";
                }
                c->served = c->rc == 0;
                /* Owned once served: a directory that never served a name never holds it. */
                if (c->served && owner == NULL && owner_add(cat, c->name, c->dir) < 0)
                    LOG_ERROR("rescan: out of memory recording %s as the owner of dataset %s",
                              c->dir, c->name);
            }
        }
        if (!c->served) {
            if (note_unserved(cat, c, old, d < explicit_count, &notes[note_count]) == 0)
                note_count++;
            if (c->ds != NULL && c->ds != old)
                dataset_free(c->ds);
            c->ds = NULL;
            continue;
        }
        dsc_dataset_t *ds = c->ds;
        if (ds != old) {
            LOG_INFO("rescan: dataset %s %s: %u shards (%s)", ds->name, old ? "changed" : "added",
                     ds->manifest->shard_count, c->dir);
            if (old) {
                atomic_store(&ds->hits, atomic_load(&old->hits));
                atomic_store(&ds->misses, atomic_load(&old->misses));
                atomic_store(&ds->bytes_served, atomic_load(&old->bytes_served));
                pthread_mutex_lock(&cat->lock);
                adopt_locked(old, ds);
                pthread_mutex_unlock(&cat->lock);
            }
            pthread_mutex_lock(&cat->lock);
            policy_apply_locked(cat, ds);
            enforce_limit_locked(cat, ds); /* what adopt_locked moved over */
            int pinned = ds->pinned;
            pthread_mutex_unlock(&cat->lock);
            if (pinned) /* a pinned dataset stays resident, in its new version too */
                dsc_catalog_warm(cat, ds, DSC_SHARD_ALL);
            ds->all_next = fresh;
            fresh = ds;
            fresh_count++;
        }
        next->items[next->count++] = ds;
    }
    free(olds);
    /* The notes STAT lists: replaced under the bookkeeping lock. */
    pthread_mutex_lock(&cat->lock);
    dir_note_t *old_notes = cat->notes;
    uint32_t old_note_count = cat->note_count;
    cat->notes = notes;
    cat->note_count = note_count;
    pthread_mutex_unlock(&cat->lock);
    notes_free(old_notes, old_note_count);
    /* Link the new datasets into the list freed at destroy. */
    while (fresh) {
        dsc_dataset_t *n = fresh->all_next;
        fresh->all_next = cat->all;
        cat->all = fresh;
        fresh = n;
    }
    int same = fresh_count == 0 && next->count == cur->count;
    for (uint32_t i = 0; same && i < next->count; i++)
        same = next->items[i] == cur->items[i];
    if (same) {
        /* Nothing changed (the periodic and watcher rescans, mostly): no new table, so none is
         * retired; a SIGHUP still empties the index cache (a file may have been rewritten). */
        free(next);
        next = cur;
        if (!quiet) {
            pthread_mutex_lock(&cat->lock);
            while (cat->index_head)
                dsc__index_drop_locked(cat, cat->index_head);
            pthread_mutex_unlock(&cat->lock);
        }
    } else {
        publish(cat, next);
    }
    /* Datasets no longer in the table are retired: free what nobody holds now, the rest when
     * its last reference goes. Cached indexes go too: a file may have been rewritten. */
    pthread_mutex_lock(&cat->lock);
    while (!same && cat->index_head)
        dsc__index_drop_locked(cat, cat->index_head);
    for (uint32_t i = 0; i < cur->count; i++) {
        dsc_dataset_t *old = cur->items[i];
        int kept = 0;
        for (uint32_t j = 0; j < next->count; j++)
            kept |= next->items[j] == old;
        if (kept)
            continue;
        int replaced = 0;
        for (uint32_t j = 0; j < next->count; j++)
            replaced |= strcmp(next->items[j]->name, old->name) == 0;
        if (!replaced)
            LOG_INFO("rescan: dataset %s removed (%s): no longer listed; answers in flight finish",
                     old->name, old->dir);
        atomic_store(&old->retired, 1);
        for (uint32_t k = 0; k < old->manifest->shard_count; k++)
            dsc__slot_evict_locked(cat, &old->slots[k]);
    }
    pthread_mutex_unlock(&cat->lock);
    int count = (int)next->count;
    int changed = !same;
    cands_free(cand, cand_count);
    pthread_mutex_unlock(&cat->rescan_lock);
    if (changed || !quiet)
        LOG_INFO("rescan: %d datasets served", count);
    return count;
}

/* ---- memory per dataset ------------------------------------------------------------------ */

static struct dsc_policy_entry *policy_find_locked(dsc_catalog_t *cat, const char *name,
                                                   size_t len) {
    for (uint32_t i = 0; i < cat->policy_count; i++)
        if (strlen(cat->policies[i].name) == len && memcmp(cat->policies[i].name, name, len) == 0)
            return &cat->policies[i];
    return NULL;
}

/* Gives a dataset just created the pin and limit set for its name (cat->lock held). */
static void policy_apply_locked(dsc_catalog_t *cat, dsc_dataset_t *ds) {
    const struct dsc_policy_entry *p = policy_find_locked(cat, ds->name, strlen(ds->name));
    ds->pinned = p ? p->pinned : 0;
    ds->limit = p ? p->limit : 0;
    ds->priority = p ? p->priority : 0;
}

/* Evicts ds's least recently used unreferenced shards until its bytes are within its limit
 * (cat->lock held). Returns the number evicted. */
static int enforce_limit_locked(dsc_catalog_t *cat, dsc_dataset_t *ds) {
    int n = 0;
    while (ds->limit > 0 && ds->cached_bytes > ds->limit && evict_lru_locked(cat, ds, 0))
        n++;
    return n;
}

int dsc_catalog_set_policy(dsc_catalog_t *cat, const char *name, size_t name_len, int op,
                           uint64_t bytes) {
    if (name_len == 0 || name_len >= DSC_MAX_NAME || op < DSC_POLICY_PIN ||
        op > DSC_POLICY_PRIORITY || (op == DSC_POLICY_PRIORITY && bytes > DSC_MAX_PRIORITY))
        return DSC_EINVAL;
    pthread_mutex_lock(&cat->lock);
    struct dsc_policy_entry *p = policy_find_locked(cat, name, name_len);
    if (p == NULL && cat->policy_count >= DSC_MAX_POLICIES) {
        pthread_mutex_unlock(&cat->lock);
        return DSC_ENOSPC;
    }
    if (p == NULL) {
        struct dsc_policy_entry *grown =
            realloc(cat->policies, (cat->policy_count + 1) * sizeof *grown);
        if (grown == NULL) {
            pthread_mutex_unlock(&cat->lock);
            return DSC_ENOMEM;
        }
        cat->policies = grown;
        p = &cat->policies[cat->policy_count++];
        memset(p, 0, sizeof *p);
        memcpy(p->name, name, name_len);
    }
    if (op == DSC_POLICY_LIMIT)
        p->limit = bytes;
    else if (op == DSC_POLICY_PRIORITY)
        p->priority = (uint32_t)bytes;
    else
        p->pinned = op == DSC_POLICY_PIN;
    dsc_dataset_t *ds = dsc_catalog_find(cat, name, name_len);
    int affected = 0;
    if (ds != NULL) {
        policy_apply_locked(cat, ds);
        affected = enforce_limit_locked(cat, ds);
    }
    pthread_mutex_unlock(&cat->lock);
    if (ds != NULL && op == DSC_POLICY_PIN)
        affected = dsc_catalog_warm(cat, ds, DSC_SHARD_ALL);
    return affected;
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

/* "version": the dataset version as 16 lower-case hex digits (PROTOCOL.md). */
static void add_version(cJSON *o, const dsc_dataset_t *ds) {
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)ds->version);
    cJSON_AddStringToObject(o, "version", hex);
}

/* share: the most this dataset may hold now (its limit, else the store less what pinned
 * datasets hold). */
static cJSON *dataset_json_locked(dsc_dataset_t *ds, uint64_t share) {
    cJSON *o = cJSON_CreateObject();
    if (o == NULL)
        return NULL;
    cJSON_AddStringToObject(o, "name", ds->name);
    cJSON_AddNumberToObject(o, "shards", ds->manifest->shard_count);
    cJSON_AddNumberToObject(o, "samples", (double)ds->manifest->samples);
    cJSON_AddNumberToObject(o, "bytes", (double)ds->manifest->bytes);
    add_version(o, ds);
    cJSON_AddNumberToObject(o, "cached_shards", (double)ds->cached_shards);
    cJSON_AddNumberToObject(o, "cached_bytes", (double)ds->cached_bytes);
    cJSON_AddNumberToObject(o, "hits", (double)atomic_load(&ds->hits));
    cJSON_AddNumberToObject(o, "misses", (double)atomic_load(&ds->misses));
    cJSON_AddNumberToObject(o, "bytes_served", (double)atomic_load(&ds->bytes_served));
    cJSON_AddNumberToObject(o, "bad_shards", (double)ds->bad_shards);
    cJSON_AddNumberToObject(o, "pinned", ds->pinned);
    cJSON_AddNumberToObject(o, "priority", ds->priority);
    cJSON_AddNumberToObject(o, "limit_bytes", (double)ds->limit);
    cJSON_AddNumberToObject(o, "share_bytes", (double)share);
    /* Loads in flight (misses, read-ahead, warm-ups: what dscache warm waits for), and damaged
     * shards by name: refused whole ("bad") or served but for some chunks. */
    uint64_t loading = 0, damaged_shards = 0, damaged_chunks = 0;
    cJSON *list = cJSON_CreateArray();
    for (uint32_t i = 0; i < ds->manifest->shard_count; i++) {
        const dsc_shard_slot_t *s = &ds->slots[i];
        loading += s->state == SLOT_LOADING;
        if (s->state != SLOT_BAD && s->damaged == 0)
            continue;
        if (s->damaged > 0) {
            damaged_shards++;
            damaged_chunks += s->damaged;
        }
        if (list == NULL || cJSON_GetArraySize(list) >= DSC_STAT_MAX_DAMAGED)
            continue;
        cJSON *d = cJSON_CreateObject();
        if (d == NULL || !cJSON_AddItemToArray(list, d)) {
            cJSON_Delete(d);
            continue;
        }
        cJSON_AddNumberToObject(d, "shard", s->meta->id);
        cJSON_AddStringToObject(d, "file", s->meta->file);
        if (s->state == SLOT_BAD) {
            cJSON_AddStringToObject(d, "state", "bad");
        } else {
            cJSON_AddStringToObject(d, "state", "chunks");
            cJSON_AddNumberToObject(d, "damaged_chunks", s->damaged);
            cJSON_AddNumberToObject(d, "chunks", s->meta->chunks);
            cJSON_AddNumberToObject(d, "first_chunk",
                                    (double)dsc__damage_first(s->damage, 0, s->meta->chunks));
        }
    }
    cJSON_AddNumberToObject(o, "loading_shards", (double)loading);
    cJSON_AddNumberToObject(o, "damaged_shards", (double)damaged_shards);
    cJSON_AddNumberToObject(o, "damaged_chunks", (double)damaged_chunks);
    if (list != NULL && !cJSON_AddItemToObject(o, "damaged", list))
        cJSON_Delete(list);
    return o;
}

/* STAT's "catalog" (cat->lock held): manifests read so far, names refused to a claimant, and
 * directories whose manifest is refused (PROTOCOL.md). */
static void catalog_json_locked(dsc_catalog_t *cat, cJSON *root) {
    cJSON *o = cJSON_AddObjectToObject(root, "catalog");
    if (o == NULL)
        return;
    cJSON_AddNumberToObject(o, "manifest_parses", (double)atomic_load(&cat->manifest_parses));
    cJSON *conflicts = cJSON_AddArrayToObject(o, "conflicts");
    cJSON *refused = cJSON_AddArrayToObject(o, "refused");
    uint32_t n_conflicts = 0, n_refused = 0;
    for (uint32_t i = 0; i < cat->note_count; i++) {
        const dir_note_t *n = &cat->notes[i];
        if (n->rc == DSC_ENOENT)
            continue; /* a --data directory whose manifest is not written yet */
        int conflict = n->rc == 0;
        uint32_t *count = conflict ? &n_conflicts : &n_refused;
        if ((*count)++ >= DSC_STAT_MAX_NOTES)
            continue;
        cJSON *e = cJSON_CreateObject();
        if (e == NULL || !cJSON_AddItemToArray(conflict ? conflicts : refused, e)) {
            cJSON_Delete(e);
            continue;
        }
        if (conflict) {
            cJSON_AddStringToObject(e, "name", n->name);
            cJSON_AddStringToObject(e, "dir", n->dir);
            cJSON_AddStringToObject(e, "served_from", n->owner ? n->owner : "");
        } else {
            cJSON_AddStringToObject(e, "dir", n->dir);
            cJSON_AddStringToObject(e, "reason", n->why ? n->why : "");
            cJSON_AddStringToObject(e, "error", dsc_err_name(n->rc));
        }
    }
    cJSON_AddNumberToObject(o, "conflict_count", n_conflicts);
    cJSON_AddNumberToObject(o, "refused_count", n_refused);
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
    cJSON *peer = cJSON_AddObjectToObject(store, "peer_warm");
    if (peer != NULL) {
        cJSON_AddBoolToObject(peer, "enabled", atomic_load(&cat->peer) != NULL);
        cJSON_AddNumberToObject(peer, "shards", (double)atomic_load(&cat->peer_shards));
        cJSON_AddNumberToObject(peer, "bytes", (double)atomic_load(&cat->peer_bytes));
        cJSON_AddNumberToObject(peer, "fallbacks", (double)atomic_load(&cat->peer_fallbacks));
        cJSON_AddNumberToObject(peer, "refused", (double)atomic_load(&cat->peer_refused));
        cJSON_AddNumberToObject(
            peer, "backing_bytes",
            (double)(atomic_load(&cat->bytes_loaded) + atomic_load(&cat->read_through_bytes)));
    }
    table_t *t = atomic_load(&cat->table);
    pthread_mutex_lock(&cat->lock);
    cJSON_AddNumberToObject(store, "index_cache_bytes", (double)cat->index_bytes);
    cJSON_AddNumberToObject(store, "index_cache_entries", (double)cat->index_count);
    cJSON_AddNumberToObject(store, "metadata_bytes", (double)metadata_bytes_locked(cat));
    dsc__backing_json_locked(cat, store);
    dsc__staging_json_locked(cat, store);
    catalog_json_locked(cat, root);
    uint64_t pinned_bytes = 0;
    for (uint32_t i = 0; i < t->count; i++)
        pinned_bytes += t->items[i]->pinned ? t->items[i]->cached_bytes : 0;
    for (uint32_t i = 0; i < t->count; i++) {
        dsc_dataset_t *ds = t->items[i];
        if (only != NULL && ds != only)
            continue;
        uint64_t others = pinned_bytes - (ds->pinned ? ds->cached_bytes : 0);
        uint64_t share = si.capacity > others ? si.capacity - others : 0;
        if (ds->limit > 0 && ds->limit < share)
            share = ds->limit;
        cJSON_AddItemToArray(list, dataset_json_locked(ds, share));
    }
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
        add_version(o, ds);
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
        for (uint32_t k = 0; k < ds->manifest->shard_count; k++) {
            out->damaged_shards += ds->slots[k].damaged > 0;
            out->damaged_chunks += ds->slots[k].damaged;
        }
        out->hits += atomic_load(&ds->hits);
        out->misses += atomic_load(&ds->misses);
        out->bytes_served += atomic_load(&ds->bytes_served);
    }
    out->index_cache_bytes = cat->index_bytes;
    out->index_cache_entries = cat->index_count;
    out->metadata_bytes = metadata_bytes_locked(cat);
    dsc__backing_totals_locked(cat, &out->backing);
    dsc__staging_totals_locked(cat, &out->staging);
    pthread_mutex_unlock(&cat->lock);
    out->evictions = atomic_load(&cat->evictions);
    out->loads = atomic_load(&cat->loads);
    out->load_failures = atomic_load(&cat->load_failures);
    out->read_through = atomic_load(&cat->read_through);
    out->bytes_loaded = atomic_load(&cat->bytes_loaded);
    out->read_through_bytes = atomic_load(&cat->read_through_bytes);
    out->peer = (dsc_peer_totals_t){.shards = atomic_load(&cat->peer_shards),
                                    .bytes = atomic_load(&cat->peer_bytes),
                                    .fallbacks = atomic_load(&cat->peer_fallbacks),
                                    .refused = atomic_load(&cat->peer_refused)};
}

int64_t dsc_hold_damaged_chunk(const dsc_hold_t *hold, uint32_t first, uint32_t count) {
    if (hold->damage == NULL || (uint64_t)first + count > hold->chunk_count)
        return -1;
    return dsc__damage_first(hold->damage, first, count);
}

uint32_t dsc_catalog_damage_text(dsc_catalog_t *cat, char *buf, size_t cap, uint32_t *bad) {
    uint32_t n = 0, whole = 0;
    size_t used = 0;
    if (cap > 0)
        buf[0] = '\0';
    table_t *t = atomic_load(&cat->table);
    pthread_mutex_lock(&cat->lock);
    for (uint32_t d = 0; d < t->count; d++) {
        const dsc_dataset_t *ds = t->items[d];
        for (uint32_t i = 0; i < ds->manifest->shard_count; i++) {
            const dsc_shard_slot_t *s = &ds->slots[i];
            if (s->state != SLOT_BAD && s->damaged == 0)
                continue;
            whole += s->state == SLOT_BAD;
            char one[DSC_MAX_NAME + 320];
            if (s->state == SLOT_BAD)
                snprintf(one, sizeof one, "%s%s shard %u (%s: whole shard refused)", n ? ", " : "",
                         ds->name, s->meta->id, s->meta->file);
            else
                snprintf(one, sizeof one, "%s%s shard %u (%s: %u of %u chunks, first chunk %lld)",
                         n ? ", " : "", ds->name, s->meta->id, s->meta->file, s->damaged,
                         s->meta->chunks,
                         (long long)dsc__damage_first(s->damage, 0, s->meta->chunks));
            n++;
            size_t len = strlen(one);
            if (used + len + 4 < cap) {
                memcpy(buf + used, one, len + 1);
                used += len;
            } else if (used + 4 < cap && (used < 3 || strcmp(buf + used - 3, "...") != 0)) {
                memcpy(buf + used, "...", 4);
                used += 3;
            }
        }
    }
    pthread_mutex_unlock(&cat->lock);
    if (bad)
        *bad = whole;
    return n;
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
