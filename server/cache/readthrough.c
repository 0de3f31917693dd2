/* Catalog loading: the I/O threads, whole-shard loads (read, validate, make resident), the
 * read-through of chunk ranges for shards that get no room (index cache, temporary buffers,
 * per-chunk checks), and delivery of finished loads to waiters (directly or via their mailbox).
 * catalog.c queues the work under cat->lock and calls this file (readthrough.h); this file uses
 * the catalog's state (catalog_state.h) and never calls catalog.c. */
#include "readthrough.h"
#include "catalog_state.h"
#include "dsc_sys.h"
#include "protocol.h"
#include "srvlog.h"
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
#include <time.h>
#include <unistd.h>

/* ---- whole-shard loads ------------------------------------------------------------------- */

/* The chunks of a parsed shard whose stored checksum differs: *damage (malloc'd, a bit per
 * chunk; NULL when none), *damaged (their number), *first (the first of them). Returns 0 or
 * -ENOMEM. */
static int chunk_damage(const dsc_shard_view_t *view, uint8_t **damage, uint32_t *damaged,
                        uint32_t *first) {
    uint32_t n = view->footer.chunk_count;
    uint8_t *map = calloc(((size_t)n + 7) / 8, 1);
    if (map == NULL)
        return -ENOMEM;
    uint32_t bad = 0;
    for (uint32_t c = 0; c < n; c++) {
        dsc_chunk_entry_t e;
        dsc_shard_chunk(view, c, &e);
        const uint8_t *stored = dsc_shard_chunk_data(view, &e);
        if (stored != NULL && dsc_chunk_verify(&e, stored) == 0)
            continue;
        if (bad++ == 0)
            *first = c;
        map[c / 8] |= (uint8_t)(1u << (c % 8));
    }
    if (bad == 0) {
        free(map);
        map = NULL;
    }
    *damage = map;
    *damaged = bad;
    return 0;
}

/* Checks a shard file's bytes in dst against the manifest: parses it and matches its header.
 * Returns 0 or DSC_ECORRUPT (*why says what). */
static int check_shard(const dsc_shard_slot_t *s, const uint8_t *dst, dsc_shard_view_t *view,
                       const char **why) {
    const dsc_manifest_shard_t *meta = s->meta;
    int prc = dsc_shard_parse(dst, meta->bytes, view);
    if (prc < 0) {
        *why = dsc_strerror(prc);
        return DSC_ECORRUPT;
    }
    if (view->header.shard_id != meta->id || view->footer.chunk_count != meta->chunks ||
        view->header.sample_count != meta->samples ||
        strcmp(view->header.dataset, s->ds->name) != 0 ||
        !dsc_schema_equal(&view->header.schema, &s->ds->manifest->schema)) {
        *why = "shard header does not match the manifest";
        return DSC_ECORRUPT;
    }
    return 0;
}

/* Reads and validates one shard file into dst. Returns 0, DSC_ECORRUPT (validation; *why says
 * what) or an I/O error (-errno). A file whose whole-file checksum differs but whose header,
 * index and footer are valid has its chunks verified one by one: when some fail, it is still
 * served (returns 0) with *damage (malloc'd, a bit per chunk), *damaged and *first_bad naming
 * them; only when none fails is the shard refused (the damage lies outside the chunks). */
static int read_shard(const dsc_shard_slot_t *s, uint8_t *dst, dsc_shard_view_t *view,
                      const char **why, uint8_t **damage, uint32_t *damaged, uint32_t *first_bad) {
    *damage = NULL;
    *damaged = 0;
    const dsc_manifest_shard_t *meta = s->meta;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", s->ds->dir, meta->file);
    int fd = dsc__shard_open(path, s->ds->confined, why);
    if (fd < 0)
        return fd;
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
    int file_sum_bad = dsc_checksum(dst, meta->bytes) != meta->checksum;
    if ((rc = check_shard(s, dst, view, why)) < 0)
        goto done;
    if (file_sum_bad) {
        rc = chunk_damage(view, damage, damaged, first_bad);
        if (rc < 0) {
            *why = "verifying its chunks";
            goto done;
        }
        if (*damaged == 0) {
            rc = DSC_ECORRUPT;
            *why = "whole-file checksum differs from the manifest, every chunk's checksum matches";
        }
    }
done:
    close(fd);
    return rc;
}

/* Fills dst with the shard's file from a peer (cat->peer), accepted only whole and exact: its
 * checksum equals the manifest's and its header matches. Returns 1 (dst holds it, *view parsed),
 * 0 (no peer source, or none could serve it, or its copy was refused: read the backing
 * storage). */
static int peer_shard(dsc_catalog_t *cat, const dsc_shard_slot_t *s, uint8_t *dst,
                      dsc_shard_view_t *view, int urgent) {
    const dsc_peer_source_t *src = atomic_load(&cat->peer);
    if (src == NULL)
        return 0;
    const dsc_manifest_shard_t *meta = s->meta;
    int rc = src->fetch(src->arg, s->ds->name, s->ds->version, meta->id, meta->bytes, dst, urgent);
    if (rc < 0) {
        atomic_fetch_add_explicit(&cat->peer_fallbacks, 1, memory_order_relaxed);
        return 0;
    }
    const char *why = "whole-file checksum differs from the manifest";
    if (dsc_checksum(dst, meta->bytes) != meta->checksum || check_shard(s, dst, view, &why) < 0) {
        atomic_fetch_add_explicit(&cat->peer_refused, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&cat->peer_fallbacks, 1, memory_order_relaxed);
        LOG_WARN("dataset %s shard %u: the copy read from a peer was refused (%s): reading "
                 "it from the backing storage",
                 s->ds->name, meta->id, why);
        return 0;
    }
    atomic_fetch_add_explicit(&cat->peer_shards, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&cat->peer_bytes, meta->bytes, memory_order_relaxed);
    return 1;
}

/* A load of s failed validation (or found damaged chunks): when the dataset on disk is no longer
 * the version served (replaced in place, its shard files now the new version's), the failure is
 * the replacement, not damage. Returns 1 then, having asked the root watcher to rescan; 0 when
 * the manifest on disk is the one served. */
static int replaced_on_disk(dsc_catalog_t *cat, dsc_shard_slot_t *s, int full) {
    if (!dsc__dataset_changed_on_disk(cat, s->ds, full))
        return 0;
    atomic_store(&cat->rescan_wanted, 1);
    return 1;
}

static void observe_load_locked(dsc_catalog_t *cat, double seconds) {
    for (int i = 0; i < DSC_LOAD_BUCKETS; i++)
        if (seconds <= dsc_load_bucket_bounds[i])
            cat->hist[i]++;
    cat->hist_count++;
    cat->hist_sum += seconds;
}

void dsc__waiters_deliver(dsc_waiter_t *list) {
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

/* Delivers a whole-shard load. damage (taken), damaged, first_bad: the chunks found damaged in
 * a shard loaded anyway (read_shard). */
static void finish_load(dsc_catalog_t *cat, dsc_shard_slot_t *s, int rc, const char *why,
                        const dsc_shard_view_t *view, double seconds, uint8_t *damage,
                        uint32_t damaged, uint32_t first_bad, int from_peer) {
    pthread_mutex_lock(&cat->lock);
    dsc_waiter_t *waiters = s->waiters;
    s->waiters = NULL;
    int nwait = 0;
    for (dsc_waiter_t *w = waiters; w; w = w->next)
        nwait++;
    if (rc == 0) {
        atomic_fetch_add_explicit(&cat->loads, 1, memory_order_relaxed);
        if (!from_peer) /* a peer's copy is counted by peer_shard */
            atomic_fetch_add_explicit(&cat->bytes_loaded, s->meta->bytes, memory_order_relaxed);
        observe_load_locked(cat, seconds);
        const uint8_t *base = s->data;
        dsc_hold_t hold = {.data = base,
                           .size = s->meta->bytes,
                           .index = base + (view->index - view->base),
                           .chunk_count = view->footer.chunk_count};
        s->index = hold.index;
        s->chunk_count = hold.chunk_count;
        dsc__slot_set_damage_locked(s, damage, damaged);
        damage = NULL;
        hold.damage = s->damage;
        if (s->damaged > 0 && !s->chunk_logged) {
            LOG_WARN("dataset %s shard %u (%s/%s): %u of %u chunks damaged (first: chunk %u): "
                     "stored checksum differs; those chunks are answered CORRUPT, the others "
                     "served (logged once per shard)",
                     s->ds->name, s->meta->id, s->ds->dir, s->meta->file, s->damaged,
                     hold.chunk_count, first_bad);
            s->chunk_logged = 1;
        }
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
        if (why != NULL && rc != DSC_ECHANGED) /* NULL: dropped by dsc_catalog_stop_loads */
            atomic_fetch_add_explicit(&cat->load_failures, 1, memory_order_relaxed);
        dsc_store_free(cat->store, s->data, s->meta->bytes);
        s->data = NULL;
        if (rc == DSC_ECHANGED) {
            /* Replaced on disk (replaced_on_disk): not damage; the rescan serves the new
             * version, and the waiters are answered CHANGED. */
            s->state = SLOT_ABSENT;
            if (!s->logged)
                LOG_INFO("dataset %s shard %u (%s/%s): the dataset was replaced on disk: "
                         "answered CHANGED until the rescan serves the new version",
                         s->ds->name, s->meta->id, s->ds->dir, s->meta->file);
            s->logged = 1;
        } else if (rc == DSC_ECORRUPT) {
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
        dsc__slot_evict_locked(cat, s);
    cat->loads_in_flight--;
    if (cat->loads_in_flight == 0)
        pthread_cond_broadcast(&cat->idle_cond);
    pthread_mutex_unlock(&cat->lock);
    free(damage);
    dsc__waiters_deliver(waiters);
}

/* ---- read-through of chunk ranges -------------------------------------------------------- */

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
        dsc__index_drop_locked(cat, cat->index_tail);
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

/* ---- backing reads: pacing, coalescing, the reader pool ---------------------------------- */

static void sleep_s(double s) {
    if (s <= 0)
        return;
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* The --backing-rate pacer: waits until a read of n bytes may start (reads start no faster
 * than the cap allows on average; one shared schedule for every reader and loader). */
static void pace(dsc_catalog_t *cat, uint64_t n) {
    if (cat->opt.backing_rate == 0)
        return;
    double now = dsc_now_s();
    pthread_mutex_lock(&cat->lock);
    double start = cat->pace_next > now ? cat->pace_next : now;
    cat->pace_next = start + (double)n / (double)cat->opt.backing_rate;
    cat->backing_wait_seconds += start - now;
    pthread_mutex_unlock(&cat->lock);
    sleep_s(start - now);
}

/* Counts one backing read of `seconds` (cat->lock held). */
static void observe_backing_locked(dsc_catalog_t *cat, double seconds) {
    cat->backing_reads++;
    cat->backing_read_seconds += seconds;
    cat->backing_latency_ewma =
        cat->backing_reads == 1 ? seconds : 0.9 * cat->backing_latency_ewma + 0.1 * seconds;
}

/* Most read-throughs merged into one backing read, and most chunks it spans: a union read
 * answers none of its requests before its last byte arrives, so a large one would delay the
 * request the loader needs first (8 x 1 MiB chunks: 28 ms at 285 MB/s). */
#define COALESCE_MAX 8
#define COALESCE_SPAN 8

/* Coalescing state: the job being widened, its chunk span, how many it holds now. */
typedef struct coalesce {
    dsc_catalog_t *cat;
    range_load_t *job;
    uint32_t lo, hi;
    int n, changed;
} coalesce_t;

/* dsc_fq_remove's predicate: takes j onto c->job->merged when it is of the same shard and its
 * chunks overlap or touch [lo, hi) within COALESCE_SPAN (cat->lock held). */
static int coalesce_one(dsc_fq_item_t *it, void *arg) {
    coalesce_t *c = arg;
    range_load_t *j = (range_load_t *)it;
    if (c->n >= COALESCE_MAX || j->slot != c->job->slot || j->first > c->hi ||
        j->first + j->count < c->lo)
        return 0;
    uint32_t nlo = j->first < c->lo ? j->first : c->lo;
    uint32_t nhi = j->first + j->count > c->hi ? j->first + j->count : c->hi;
    if (nhi - nlo > COALESCE_SPAN)
        return 0;
    j->merged = c->job->merged;
    c->job->merged = j;
    c->lo = nlo;
    c->hi = nhi;
    c->cat->range_queued--;
    c->cat->backing_coalesced++;
    c->n++;
    c->changed = 1;
    return 1;
}

/* Moves the queued jobs of job's shard whose chunk ranges overlap or touch [*lo, *hi), from
 * every job's queue, onto job->merged, widening [*lo, *hi) to their union, until none is left
 * (cat->lock held). A job whose read is merged into another's is served with it, ahead of its
 * turn: the read costs nothing more. */
static void coalesce_locked(dsc_catalog_t *cat, range_load_t *job, uint32_t *lo, uint32_t *hi) {
    coalesce_t c = {.cat = cat,
                    .job = job,
                    .lo = job->first,
                    .hi = job->first + job->count,
                    .n = 1,
                    .changed = 1};
    while (c.changed && c.n < COALESCE_MAX) {
        c.changed = 0;
        for (dsc_fq_flow_t *f = cat->range_fq.active_head; f != NULL && c.n < COALESCE_MAX;) {
            dsc_fq_flow_t *next = f->next_active; /* f may leave the list, or be freed */
            (void)dsc_fq_remove(&cat->range_fq, f, coalesce_one, &c);
            f = next;
        }
    }
    *lo = c.lo;
    *hi = c.hi;
}

/* The outcome of one job of a read-through group (cat->lock held): logs and marks as the
 * single read-through always did, and sets the waiter's status. */
static void range_outcome_locked(dsc_catalog_t *cat, range_load_t *job, int rc, const char *why,
                                 int bad_shard, int bad_chunk) {
    dsc_shard_slot_t *s = job->slot;
    const dsc_manifest_shard_t *meta = s->meta;
    dsc_waiter_t *w = job->waiter;
    if (rc == DSC_ECHANGED) {
        if (!s->logged)
            LOG_INFO("dataset %s shard %u (%s/%s): read-through: the dataset was replaced on "
                     "disk: answered CHANGED until the rescan serves the new version",
                     s->ds->name, meta->id, s->ds->dir, meta->file);
        s->logged = 1;
    } else if (rc < 0) {
        if (rc == DSC_ECORRUPT && bad_shard && s->state == SLOT_ABSENT) {
            s->state = SLOT_BAD;
            s->ds->bad_shards++;
            LOG_ERROR("dataset %s shard %u (%s/%s): %s: marked bad, answered CORRUPT", s->ds->name,
                      meta->id, s->ds->dir, meta->file, why);
        } else if (rc == DSC_ECORRUPT) {
            if (bad_chunk >= 0) {
                w->chunk_damaged = 1;
                w->damaged_chunk = (uint32_t)bad_chunk;
                /* A resident copy was verified whole when it loaded: its map is complete. */
                if (s->state != SLOT_RESIDENT)
                    (void)dsc__slot_mark_damaged_locked(s, (uint32_t)bad_chunk);
            }
            if (!s->chunk_logged)
                LOG_WARN("dataset %s shard %u (%s/%s): chunk %u damaged (read through for chunks "
                         "%u..%u): %s; damaged chunks are answered CORRUPT, the others served "
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
    w->status = rc < 0 ? rc : 0;
}

/* Runs a group of queued read-throughs of one shard (job and job->merged, chunks [lo, hi) in
 * all) as one backing read on a reader thread, and delivers every waiter. A damaged chunk fails
 * only the waiters that asked for it. */
static void run_range(dsc_catalog_t *cat, range_load_t *job, uint32_t lo, uint32_t hi) {
    dsc_shard_slot_t *s = job->slot;
    const dsc_manifest_shard_t *meta = s->meta;
    shard_index_t *si = NULL;
    dsc_tempbuf_t *tb = NULL;
    uint8_t *bad = NULL;
    uint64_t reserved = 0;
    const char *why = "";
    int bad_shard = 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", s->ds->dir, meta->file);
    int rc = 0;
    if (cat->test_delay_us)
        usleep(cat->test_delay_us);
    int fd = dsc__shard_open(path, s->ds->confined, &why);
    if (fd < 0) {
        rc = fd;
        goto done;
    }
    si = index_get(cat, s);
    if (si == NULL) {
        double t0 = dsc_now_s();
        rc = index_read(cat, s, fd, &si, &why);
        if (rc == DSC_ECORRUPT && replaced_on_disk(cat, s, 1))
            rc = DSC_ECHANGED;
        if (rc < 0) {
            bad_shard = rc == DSC_ECORRUPT;
            goto done;
        }
        /* An index read from the file that a replacement put in place would pass for this
         * version's (it is valid, only for the other manifest): the manifest file is checked
         * too, a stat unless it changed. */
        if (replaced_on_disk(cat, s, 0)) {
            free(si);
            si = NULL;
            rc = DSC_ECHANGED;
            goto done;
        }
        pthread_mutex_lock(&cat->lock);
        observe_backing_locked(cat, dsc_now_s() - t0);
        pthread_mutex_unlock(&cat->lock);
        si = index_install(cat, s, si);
    }
    /* The manifest's chunk count was checked against the footer when the index was read. */
    if (hi > si->chunk_count) {
        rc = DSC_EINVAL;
        why = "chunk range beyond the shard";
        goto done;
    }
    dsc_chunk_entry_t first, last;
    dsc_chunk_entry_decode(si->entries + (size_t)lo * DSC_CHUNK_ENTRY_SIZE, &first);
    dsc_chunk_entry_decode(si->entries + (size_t)(hi - 1) * DSC_CHUNK_ENTRY_SIZE, &last);
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
    bad = calloc(hi - lo, 1);
    if (tb == NULL || bad == NULL) {
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
    pace(cat, end - start);
    double t0 = dsc_now_s();
    rc = pread_full(fd, tb->data + start, end - start, start);
    if (rc < 0) {
        /* A file that shrank under a cached index: drop the index, the next miss revalidates. */
        why = rc == DSC_ECORRUPT ? "file shrank while reading" : "read failed";
        pthread_mutex_lock(&cat->lock);
        if (s->sindex == si)
            dsc__index_drop_locked(cat, si);
        pthread_mutex_unlock(&cat->lock);
        goto done;
    }
    pthread_mutex_lock(&cat->lock);
    observe_backing_locked(cat, dsc_now_s() - t0);
    pthread_mutex_unlock(&cat->lock);
    atomic_fetch_add_explicit(&cat->read_through_bytes, end - start, memory_order_relaxed);
    int any_bad = 0;
    for (uint32_t i = lo; i < hi; i++) {
        dsc_chunk_entry_t e;
        dsc_chunk_entry_decode(si->entries + (size_t)i * DSC_CHUNK_ENTRY_SIZE, &e);
        bad[i - lo] = dsc_chunk_verify(&e, tb->data + e.offset) < 0;
        any_bad |= bad[i - lo];
    }
    /* A cached index of the old version read against the replacement's file: every chunk
     * fails. Not damage when the dataset on disk changed. */
    if (any_bad && replaced_on_disk(cat, s, 1)) {
        pthread_mutex_lock(&cat->lock);
        if (s->sindex == si)
            dsc__index_drop_locked(cat, si);
        pthread_mutex_unlock(&cat->lock);
        rc = DSC_ECHANGED;
        why = "the dataset was replaced on disk";
        goto done;
    }
    memcpy(tb->data + si->index_offset, si->entries, index_len);
done:
    if (fd >= 0)
        close(fd);
    uint32_t chunk_count = si ? si->chunk_count : 0;
    uint64_t index_offset = si ? si->index_offset : 0;
    index_release(cat, si);
    dsc_waiter_t *list = NULL;
    int served = 0;
    pthread_mutex_lock(&cat->lock);
    for (range_load_t *j = job; j != NULL; j = j->merged) {
        int jrc = rc, bad_chunk = -1;
        const char *jwhy = why;
        if (rc == 0) {
            for (uint32_t i = j->first; i < j->first + j->count; i++)
                if (bad[i - lo]) {
                    jrc = DSC_ECORRUPT;
                    bad_chunk = (int)i;
                    jwhy = "stored checksum differs";
                    break;
                }
        }
        range_outcome_locked(cat, j, jrc, jwhy, bad_shard, bad_chunk);
        if (jrc == 0) {
            j->waiter->hold = (dsc_hold_t){.temp = tb,
                                           .data = tb->data,
                                           .size = meta->bytes,
                                           .index = tb->data + index_offset,
                                           .chunk_count = chunk_count};
            served++;
        }
        j->waiter->next = list;
        list = j->waiter;
    }
    if (served == 0)
        cat->temp_bytes -= reserved;
    cat->range_running--;
    pthread_mutex_unlock(&cat->lock);
    if (served > 0)
        atomic_init(&tb->refs, served);
    else
        dsc__tempbuf_free(tb);
    free(bad);
    while (job != NULL) {
        range_load_t *next = job->merged;
        free(job);
        job = next;
    }
    dsc__waiters_deliver(list);
}

int dsc__range_start_locked(dsc_catalog_t *cat, dsc_shard_slot_t *s, dsc_waiter_t *w) {
    uint32_t first = w->first_chunk, count = w->chunk_count;
    if (count == 0) {
        first = 0;
        count = s->meta->chunks;
    }
    if (count == 0 || (uint64_t)first + count > s->meta->chunks)
        return DSC_EINVAL;
    if (cat->temp_bytes >= cat->opt.temp_limit || cat->draining)
        return DSC_EUNAVAIL;
    char conn[32];
    const char *flow_name = w->job;
    if (flow_name[0] == '\0') {
        snprintf(conn, sizeof conn, "#c%llx", (unsigned long long)w->conn); /* #c0: background */
        flow_name = conn;
    }
    range_load_t *job = malloc(sizeof *job);
    dsc_fq_flow_t *flow = dsc_fq_flow_get(&cat->range_fq, w->owner, flow_name, 1);
    if (job == NULL || flow == NULL) {
        free(job);
        dsc_fq_flow_put(&cat->range_fq, flow);
        return DSC_ENOMEM;
    }
    *job = (range_load_t){.slot = s, .waiter = w, .first = first, .count = count};
    /* Its turn is charged by its share of the file (the index is not known yet). */
    job->fq.bytes = s->meta->bytes / s->meta->chunks * count;
    dsc_fq_push(&cat->range_fq, flow, &job->fq, dsc_now_ns());
    dsc_fq_flow_put(&cat->range_fq, flow); /* the flow stays while it holds items */
    cat->range_queued++;
    atomic_fetch_add_explicit(&cat->read_through, 1, memory_order_relaxed);
    pthread_cond_signal(&cat->range_cond);
    return 0;
}

void dsc__backing_totals_locked(dsc_catalog_t *cat, dsc_backing_totals_t *out) {
    *out = (dsc_backing_totals_t){.reads = cat->backing_reads,
                                  .coalesced = cat->backing_coalesced,
                                  .read_seconds = cat->backing_read_seconds,
                                  .wait_seconds = cat->backing_wait_seconds,
                                  .latency = cat->backing_latency_ewma,
                                  .queued = cat->range_queued,
                                  .running = cat->range_running,
                                  .running_max = cat->range_running_max,
                                  .pool = cat->opt.backing_reads,
                                  .rate = cat->opt.backing_rate};
}

void dsc__backing_json_locked(dsc_catalog_t *cat, void *store_json) {
    dsc_backing_totals_t b;
    dsc__backing_totals_locked(cat, &b);
    cJSON *o = cJSON_AddObjectToObject((cJSON *)store_json, "backing");
    if (o == NULL)
        return;
    cJSON_AddNumberToObject(o, "reads", (double)b.reads);
    cJSON_AddNumberToObject(o, "coalesced", (double)b.coalesced);
    cJSON_AddNumberToObject(o, "read_seconds", b.read_seconds);
    cJSON_AddNumberToObject(o, "rate_wait_seconds", b.wait_seconds);
    cJSON_AddNumberToObject(o, "latency_ms", b.latency * 1e3);
    cJSON_AddNumberToObject(o, "queued", (double)b.queued);
    cJSON_AddNumberToObject(o, "running", (double)b.running);
    cJSON_AddNumberToObject(o, "running_max", (double)b.running_max);
    cJSON_AddNumberToObject(o, "pool", (double)b.pool);
    cJSON_AddNumberToObject(o, "rate_limit", (double)b.rate);
}

/* ---- I/O threads ------------------------------------------------------------------------- */

/* A backing reader: runs queued read-throughs (deficit round-robin between the jobs' queues),
 * each with the queued ones it coalesces. */
static void backing_reader(dsc_catalog_t *cat) {
    pthread_mutex_lock(&cat->lock);
    for (;;) {
        while (!cat->stopping && cat->range_fq.queued == 0)
            pthread_cond_wait(&cat->range_cond, &cat->lock);
        if (cat->stopping)
            break;
        /* The next job's next read-through, by deficit round-robin between the jobs. */
        range_load_t *job = (range_load_t *)dsc_fq_pop(&cat->range_fq, dsc_now_ns());
        cat->range_queued--;
        if (cat->draining) {
            pthread_mutex_unlock(&cat->lock);
            /* Stopping: the waiter is answered UNAVAILABLE now instead of after a read. */
            dsc_waiter_t *w = job->waiter;
            free(job);
            w->status = DSC_EUNAVAIL;
            w->next = NULL;
            dsc__waiters_deliver(w);
            pthread_mutex_lock(&cat->lock);
            continue;
        }
        uint32_t lo, hi;
        coalesce_locked(cat, job, &lo, &hi);
        cat->range_running++;
        if (cat->range_running > cat->range_running_max)
            cat->range_running_max = cat->range_running;
        pthread_mutex_unlock(&cat->lock);
        run_range(cat, job, lo, hi);
        pthread_mutex_lock(&cat->lock);
    }
    pthread_mutex_unlock(&cat->lock);
}

void *dsc__io_thread(void *arg) {
    dsc_catalog_t *cat = arg;
    pthread_mutex_lock(&cat->lock);
    int reader = cat->roles_started++ >= cat->opt.io_threads;
    pthread_mutex_unlock(&cat->lock);
    if (reader) {
        backing_reader(cat);
        return NULL;
    }
    pthread_mutex_lock(&cat->lock);
    for (;;) {
        while (!cat->stopping && cat->queue_head == NULL)
            pthread_cond_wait(&cat->work_cond, &cat->lock);
        if (cat->stopping)
            break;
        dsc_shard_slot_t *s = cat->queue_head;
        cat->queue_head = s->queue_next;
        if (cat->queue_head == NULL)
            cat->queue_tail = NULL;
        uint8_t *dst = s->data;
        int drop = cat->draining;
        int urgent = s->waiters != NULL; /* a GET waits for it (else a warm-up) */
        pthread_mutex_unlock(&cat->lock);
        if (drop) {
            finish_load(cat, s, DSC_EUNAVAIL, NULL, NULL, 0, NULL, 0, 0, 0);
            pthread_mutex_lock(&cat->lock);
            continue;
        }
        if (cat->test_delay_us)
            usleep(cat->test_delay_us);

        double t0 = dsc_now_s();
        dsc_shard_view_t view;
        const char *why = "";
        uint8_t *damage = NULL;
        uint32_t damaged = 0, first_bad = 0;
        if (peer_shard(cat, s, dst, &view, urgent)) {
            finish_load(cat, s, 0, why, &view, dsc_now_s() - t0, NULL, 0, 0, 1);
            pthread_mutex_lock(&cat->lock);
            continue;
        }
        pace(cat, s->meta->bytes);
        t0 = dsc_now_s();
        int rc = read_shard(s, dst, &view, &why, &damage, &damaged, &first_bad);
        if ((rc == DSC_ECORRUPT || (rc == 0 && damaged > 0)) && replaced_on_disk(cat, s, 1)) {
            free(damage);
            damage = NULL;
            damaged = 0;
            rc = DSC_ECHANGED;
            why = "the dataset was replaced on disk";
        }
        finish_load(cat, s, rc, why, &view, dsc_now_s() - t0, damage, damaged, first_bad, 0);
        pthread_mutex_lock(&cat->lock);
    }
    pthread_mutex_unlock(&cat->lock);
    return NULL;
}

void dsc__readthrough_free_all(dsc_catalog_t *cat) {
    dsc_fq_item_t *it;
    while ((it = dsc_fq_pop(&cat->range_fq, 0)) != NULL)
        free(it);
    dsc_fq_destroy(&cat->range_fq);
    while (cat->index_head) {
        shard_index_t *next = cat->index_head->lru_next;
        free(cat->index_head);
        cat->index_head = next;
    }
}
