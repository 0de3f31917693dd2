/* Read-ahead staging: hinted chunk ranges read ahead of their GETs in deadline order through the
 * read-through pool into a bounded area apart from the store, kept until every hinter that named
 * them was served (or a TTL passed); and single-flight read-throughs (a GET joins a read of its
 * chunks already under way). Everything here runs under cat->lock except the read's completion
 * (staged_done, on a backing reader thread), which takes it. */
#include "staging.h"
#include "catalog_state.h"
#include "hint.h"
#include "readthrough.h"
#include "srvlog.h"
#include "util.h"

#include <cjson/cJSON.h>

#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Distinct hinters counted per range; a further one is served, not waited for. */
#define STAGE_HINTERS 8
/* Ranges tracked at once (hinted, reading, staged): bounds the bookkeeping and each lookup. */
#define STAGE_MAX_ENTRIES 8192

/* Hinted ranges whose due time passed this long ago are dropped unread (the GET came first or
 * the loader went away). */
#define STAGE_PENDING_GRACE_S 2.0

/* ST_DETACHED: off the deadline list, about to be freed. */
enum { ST_PENDING = 0, ST_READING, ST_READY, ST_DETACHED };

typedef struct stage_ent {
    dsc_catalog_t *cat;
    dsc_shard_slot_t *slot;
    uint32_t first, count;
    int state;
    double deadline; /* ST_PENDING: when the first hinter expects to ask */
    double expires;  /* ST_READY: dropped then, served or not */
    uint64_t bytes;  /* charged to the staging area (estimate while reading, then exact) */
    int hinted;      /* named by a hint (not just a GET's single-flight read) */
    int served;      /* GETs served from it */
    double done_at;  /* ST_READY: when every hinter was served (0: not yet); it then lingers,
                        first to go when read-ahead needs room, for a job a little behind */
    /* Who announced it: per hinter, the chunks it named (want) and those a GET of its own
     * connection was served (got), a bit per chunk from `first`. A range is served once per
     * hinter: its second pass over it (the next epoch) reads through as without staging. */
    uint8_t nhinters;
    uint64_t hinters[STAGE_HINTERS];
    uint64_t want[STAGE_HINTERS], got[STAGE_HINTERS];
    dsc_waiter_t own;              /* the read's waiter (its result) */
    dsc_waiter_t *waiting;         /* GETs waiting for the read */
    dsc_hold_t hold;               /* ST_READY: the range's reference on the read-through buffer */
    struct stage_ent *slot_next;   /* the shard's entries */
    struct stage_ent *prev, *next; /* every entry */
    struct stage_ent *pnext;       /* ST_PENDING: by deadline */
} stage_ent_t;

struct dsc_staging {
    stage_ent_t *all;
    stage_ent_t *pending; /* sorted by deadline, earliest first */
    uint64_t entries, npending, reading;
    uint64_t bytes; /* charged now */
    double last_sweep;
    dsc_staging_totals_t tot; /* counters */
};

_Static_assert(DSC_HINT_MAX_RANGE_CHUNKS <= 64, "a range's chunks fit a 64-bit mask");
#define STAGE_MAX_CHUNKS 64

/* The bits of chunks [first, first + count) of e. */
static uint64_t chunk_mask(const stage_ent_t *e, uint32_t first, uint32_t count) {
    uint32_t lo = first - e->first;
    uint64_t bits = count >= 64 ? ~UINT64_C(0) : (UINT64_C(1) << count) - 1;
    return bits << lo;
}

static int hinter_index(const stage_ent_t *e, uint64_t hinter) {
    for (int i = 0; i < e->nhinters; i++)
        if (e->hinters[i] == hinter)
            return i;
    return -1;
}

int dsc__staging_create(dsc_catalog_t *cat) {
    if (cat->opt.staging_memory == 0)
        return 0;
    if (cat->opt.staging_ttl_ms == 0)
        cat->opt.staging_ttl_ms = 30000;
    cat->staging = calloc(1, sizeof *cat->staging);
    return cat->staging ? 0 : DSC_ENOMEM;
}

/* Drops the range's reference on its buffer (cat->lock held). */
static void hold_drop_locked(dsc_catalog_t *cat, dsc_hold_t *hold) {
    dsc_tempbuf_t *tb = hold->temp;
    if (tb != NULL && atomic_fetch_sub(&tb->refs, 1) == 1) {
        cat->temp_bytes -= tb->size;
        dsc__tempbuf_free(tb);
    }
    memset(hold, 0, sizeof *hold);
}

static stage_ent_t *ent_of(dsc_waiter_t *w) {
    return (stage_ent_t *)((char *)w - offsetof(stage_ent_t, own));
}

static void pending_unlink(struct dsc_staging *st, stage_ent_t *e) {
    for (stage_ent_t **p = &st->pending; *p; p = &(*p)->pnext)
        if (*p == e) {
            *p = e->pnext;
            e->pnext = NULL;
            st->npending--;
            return;
        }
}

/* Unlinks and frees an entry that no read references any more (cat->lock held). */
static void ent_free_locked(dsc_catalog_t *cat, stage_ent_t *e) {
    struct dsc_staging *st = cat->staging;
    if (e->state == ST_PENDING)
        pending_unlink(st, e);
    for (stage_ent_t **p = &e->slot->staged; *p; p = &(*p)->slot_next)
        if (*p == e) {
            *p = e->slot_next;
            break;
        }
    if (e->prev)
        e->prev->next = e->next;
    else
        st->all = e->next;
    if (e->next)
        e->next->prev = e->prev;
    if (e->state == ST_READY && e->hinted && e->served == 0) {
        st->tot.dropped_unused++;
        st->tot.dropped_unused_bytes += e->bytes;
    }
    st->bytes -= e->bytes;
    st->entries--;
    hold_drop_locked(cat, &e->hold);
    free(e);
}

static int all_served(const stage_ent_t *e) {
    for (int i = 0; i < e->nhinters; i++)
        if (e->want[i] & ~e->got[i])
            return 0;
    return 1;
}

/* Counts one GET of [first, first + count) by `hinter` served by e. */
static void count_served(stage_ent_t *e, uint64_t hinter, uint32_t first, uint32_t count) {
    e->served++;
    int i = hinter_index(e, hinter);
    if (i >= 0)
        e->got[i] |= chunk_mask(e, first, count);
}

/* e (ST_READY) was served to every hinter that named it (cat->lock held): a range only GETs
 * read (single-flight) goes at once; a hinted one lingers, first to go when read-ahead needs its
 * room, at most its TTL, so that another job reading the same order a little later (whose HINT
 * came after the first job's GETs) is served from it too. */
static void finished_locked(dsc_catalog_t *cat, stage_ent_t *e, double now) {
    if (!e->hinted) {
        ent_free_locked(cat, e);
        return;
    }
    if (e->done_at == 0)
        e->done_at = now;
}

/* Frees the range that finished longest ago, to make room (cat->lock held). Returns 1 when one
 * was freed. */
static int evict_done_locked(dsc_catalog_t *cat) {
    stage_ent_t *oldest = NULL;
    for (stage_ent_t *e = cat->staging->all; e; e = e->next)
        if (e->state == ST_READY && e->done_at > 0 && (!oldest || e->done_at < oldest->done_at))
            oldest = e;
    if (oldest == NULL)
        return 0;
    ent_free_locked(cat, oldest);
    return 1;
}

static uint64_t estimate(const dsc_shard_slot_t *s, uint32_t count) {
    uint32_t chunks = s->meta->chunks ? s->meta->chunks : 1;
    return s->meta->bytes / chunks * count + (uint64_t)chunks * 48;
}

static void staged_done(dsc_waiter_t *w);

/* Queues e's backing read (cat->lock held). Returns 0 or what dsc__range_start_locked returns. */
static int start_read_locked(dsc_catalog_t *cat, stage_ent_t *e) {
    struct dsc_staging *st = cat->staging;
    e->own = (dsc_waiter_t){.fn = staged_done, .first_chunk = e->first, .chunk_count = e->count};
    int rc = dsc__range_start_locked(cat, e->slot, &e->own);
    if (rc < 0)
        return rc;
    if (e->state == ST_PENDING)
        pending_unlink(st, e);
    e->state = ST_READING;
    e->bytes = estimate(e->slot, e->count);
    st->bytes += e->bytes;
    st->reading++;
    return 0;
}

static stage_ent_t *ent_new_locked(dsc_catalog_t *cat, dsc_shard_slot_t *s, uint32_t first,
                                   uint32_t count) {
    struct dsc_staging *st = cat->staging;
    if (st->entries >= STAGE_MAX_ENTRIES || count > STAGE_MAX_CHUNKS)
        return NULL;
    stage_ent_t *e = calloc(1, sizeof *e);
    if (e == NULL)
        return NULL;
    e->cat = cat;
    e->slot = s;
    e->first = first;
    e->count = count;
    e->slot_next = s->staged;
    s->staged = e;
    e->next = st->all;
    if (st->all)
        st->all->prev = e;
    st->all = e;
    st->entries++;
    return e;
}

/* Drops staged ranges past their TTL and hinted ranges long past due (cat->lock held; at most
 * every 100 ms). */
static void sweep_locked(dsc_catalog_t *cat, double now) {
    struct dsc_staging *st = cat->staging;
    if (now - st->last_sweep < 0.1)
        return;
    st->last_sweep = now;
    /* Expired hints leave the deadline list in one pass (not one search each). */
    for (stage_ent_t **p = &st->pending; *p;) {
        stage_ent_t *e = *p;
        if (now < e->deadline + STAGE_PENDING_GRACE_S) {
            p = &e->pnext;
            continue;
        }
        *p = e->pnext;
        st->npending--;
        st->tot.expired++;
        e->state = ST_DETACHED;
        ent_free_locked(cat, e);
    }
    for (stage_ent_t *e = st->all, *next; e; e = next) {
        next = e->next;
        if (e->state == ST_READY && now >= e->expires)
            ent_free_locked(cat, e);
    }
}

void dsc__staging_pump_locked(dsc_catalog_t *cat, double now) {
    struct dsc_staging *st = cat->staging;
    if (st == NULL)
        return;
    sweep_locked(cat, now);
    /* Hints use at most half of the backing readers: the GETs' own misses keep the rest. */
    uint64_t share = cat->opt.backing_reads > 1 ? cat->opt.backing_reads / 2 : 1;
    while (st->pending != NULL && st->reading < share && !cat->draining) {
        stage_ent_t *e = st->pending;
        if (e->slot->state != SLOT_ABSENT || e->slot->refused) {
            ent_free_locked(cat, e); /* loaded or refused meanwhile: GETs go the usual way */
            continue;
        }
        while (st->bytes + estimate(e->slot, e->count) > cat->opt.staging_memory &&
               evict_done_locked(cat)) {
        }
        if (st->bytes + estimate(e->slot, e->count) > cat->opt.staging_memory)
            break; /* full: staged ranges leave as they are served or expire */
        if (start_read_locked(cat, e) < 0)
            break; /* read-through memory exhausted: later */
    }
}

int dsc__staging_hint_locked(dsc_catalog_t *cat, dsc_shard_slot_t *s, uint64_t hinter,
                             uint32_t first, uint32_t count, uint32_t due_ms, double now) {
    struct dsc_staging *st = cat->staging;
    if (st == NULL)
        return 0;
    st->tot.hints++;
    if (count == 0 || count > DSC_HINT_MAX_RANGE_CHUNKS ||
        (uint64_t)first + count > s->meta->chunks || s->state != SLOT_ABSENT || s->refused ||
        cat->opt.policy != DSC_POLICY_MINIO)
        return 0;
    for (stage_ent_t *e = s->staged; e; e = e->slot_next) {
        if (first + count <= e->first || first >= e->first + e->count)
            continue;
        int own = hinter_index(e, hinter);
        if (own >= 0 && e->state == ST_READY &&
            (e->got[own] & chunk_mask(e, e->first, e->count)) != 0) {
            /* Its second pass (the next epoch) over a range it was served: staging is no cache
             * between passes, so the old copy goes and the range is read again (shared anew). */
            ent_free_locked(cat, e);
            break;
        }
        if (first < e->first || first + count > e->first + e->count)
            return 0; /* overlaps a range staged differently: its GETs go the usual way */
        uint64_t mask = chunk_mask(e, first, count);
        int i = own;
        if (i >= 0 && (e->want[i] & mask) == mask)
            return 1; /* said again */
        if (i < 0 && e->nhinters < STAGE_HINTERS) {
            i = e->nhinters++;
            e->hinters[i] = hinter;
        }
        if (i >= 0)
            e->want[i] |= mask;
        e->hinted = 1;
        e->done_at = 0; /* a new hinter, or more of its chunks: waited for too */
        if (e->state == ST_READY && e->expires < now + cat->opt.staging_ttl_ms / 1e3)
            e->expires = now + cat->opt.staging_ttl_ms / 1e3;
        st->tot.accepted++;
        return 1;
    }
    /* A shard the store has room for is loaded whole by its first GET: nothing to stage. */
    dsc_store_info_t si;
    dsc_store_info(cat->store, &si);
    if (si.largest_free >= s->meta->bytes)
        return 0;
    stage_ent_t *e = ent_new_locked(cat, s, first, count);
    if (e == NULL)
        return 0;
    e->state = ST_PENDING;
    e->hinted = 1;
    e->hinters[0] = hinter;
    e->nhinters = 1;
    e->want[0] = chunk_mask(e, first, count);
    e->deadline = now + due_ms / 1e3;
    stage_ent_t **p = &st->pending;
    while (*p && (*p)->deadline <= e->deadline)
        p = &(*p)->pnext;
    e->pnext = *p;
    *p = e;
    st->npending++;
    st->tot.accepted++;
    return 1;
}

/* The entry covering the waiter's chunks, or NULL. */
static stage_ent_t *covering(dsc_shard_slot_t *s, uint32_t first, uint32_t count) {
    for (stage_ent_t *e = s->staged; e; e = e->slot_next)
        if (first >= e->first && first + count <= e->first + e->count)
            return e;
    return NULL;
}

int dsc__staging_acquire_locked(dsc_catalog_t *cat, dsc_shard_slot_t *s, dsc_waiter_t *w,
                                dsc_hold_t *hold) {
    struct dsc_staging *st = cat->staging;
    if (st == NULL || w->chunk_count == 0 || s->staged == NULL)
        return DSC__STAGE_NONE;
    stage_ent_t *e = covering(s, w->first_chunk, w->chunk_count);
    if (e == NULL)
        return DSC__STAGE_NONE;
    if (e->state == ST_READY) {
        int i = hinter_index(e, w->hinter);
        if (i >= 0 && (e->got[i] & chunk_mask(e, w->first_chunk, w->chunk_count)) != 0) {
            /* Its second pass: staging is no cache between epochs; read again, as without. */
            ent_free_locked(cat, e);
            return DSC__STAGE_NONE;
        }
        *hold = e->hold;
        atomic_fetch_add(&e->hold.temp->refs, 1);
        count_served(e, w->hinter, w->first_chunk, w->chunk_count);
        st->tot.hits++;
        if (all_served(e)) {
            finished_locked(cat, e, dsc_now_s());
            dsc__staging_pump_locked(cat, dsc_now_s());
        }
        return 1;
    }
    if (e->state == ST_PENDING && start_read_locked(cat, e) < 0)
        return DSC__STAGE_NONE; /* cannot read it now: the usual path decides */
    w->next = e->waiting;
    e->waiting = w;
    st->tot.joined++;
    return 0;
}

int dsc__staging_read_locked(dsc_catalog_t *cat, dsc_shard_slot_t *s, dsc_waiter_t *w) {
    if (cat->staging == NULL || w->chunk_count == 0 || w->chunk_count > STAGE_MAX_CHUNKS ||
        (uint64_t)w->first_chunk + w->chunk_count > s->meta->chunks)
        return dsc__range_start_locked(cat, s, w);
    for (stage_ent_t *o = s->staged; o; o = o->slot_next)
        if (w->first_chunk < o->first + o->count && w->first_chunk + w->chunk_count > o->first)
            return dsc__range_start_locked(cat, s, w); /* overlaps another range */
    stage_ent_t *e = ent_new_locked(cat, s, w->first_chunk, w->chunk_count);
    if (e == NULL)
        return dsc__range_start_locked(cat, s, w);
    int rc = start_read_locked(cat, e);
    if (rc < 0) {
        ent_free_locked(cat, e);
        return rc;
    }
    if (w->hinter != 0) {
        /* A hinting loader's GET is its hint too: the range lingers for other jobs once served. */
        e->hinted = 1;
        e->nhinters = 1;
        e->hinters[0] = w->hinter;
        e->want[0] = chunk_mask(e, e->first, e->count);
    }
    w->next = NULL;
    e->waiting = w;
    return 0;
}

/* The staged read finished (a backing reader thread, without the lock): the waiting GETs get
 * the buffer (or its error), and the range stays staged while a hinter still expects it. */
static void staged_done(dsc_waiter_t *own) {
    stage_ent_t *e = ent_of(own);
    dsc_catalog_t *cat = e->cat;
    dsc_waiter_t *list = NULL;
    pthread_mutex_lock(&cat->lock);
    struct dsc_staging *st = cat->staging;
    st->reading--;
    dsc_waiter_t *waiting = e->waiting;
    e->waiting = NULL;
    if (own->status == 0) {
        e->hold = own->hold;
        e->state = ST_READY;
        uint64_t exact = e->hold.temp ? e->hold.temp->size : e->bytes;
        st->bytes = st->bytes - e->bytes + exact;
        e->bytes = exact;
        e->expires = dsc_now_s() + cat->opt.staging_ttl_ms / 1e3;
        if (e->hinted) {
            st->tot.staged++;
            st->tot.staged_bytes_total += exact;
        }
    }
    while (waiting != NULL) {
        dsc_waiter_t *w = waiting;
        waiting = w->next;
        w->next = NULL;
        if (own->status == 0) {
            w->status = 0;
            w->hold = e->hold;
            atomic_fetch_add(&e->hold.temp->refs, 1);
            count_served(e, w->hinter, w->first_chunk, w->chunk_count);
        } else if (w->first_chunk == e->first && w->chunk_count == e->count) {
            w->status = own->status;
            w->chunk_damaged = own->chunk_damaged;
            w->damaged_chunk = own->damaged_chunk;
        } else {
            /* Part of a range that failed (a damaged chunk, say): its own read decides. */
            int rc = dsc__range_start_locked(cat, e->slot, w);
            if (rc == 0)
                continue;
            w->status = rc;
        }
        w->next = list;
        list = w;
    }
    if (own->status != 0)
        ent_free_locked(cat, e);
    else if (all_served(e))
        finished_locked(cat, e, dsc_now_s());
    dsc__staging_pump_locked(cat, dsc_now_s());
    pthread_mutex_unlock(&cat->lock);
    dsc__waiters_deliver(list);
}

void dsc__staging_destroy(dsc_catalog_t *cat) {
    struct dsc_staging *st = cat->staging;
    if (st == NULL)
        return;
    while (st->all) {
        stage_ent_t *e = st->all;
        st->all = e->next;
        hold_drop_locked(cat, &e->hold);
        free(e);
    }
    free(st);
    cat->staging = NULL;
}

void dsc__staging_totals_locked(dsc_catalog_t *cat, dsc_staging_totals_t *out) {
    struct dsc_staging *st = cat->staging;
    memset(out, 0, sizeof *out);
    if (st == NULL)
        return;
    *out = st->tot;
    out->bytes = st->bytes;
    out->entries = st->entries;
    out->pending = st->npending;
    out->reading = st->reading;
    out->memory = cat->opt.staging_memory;
    out->ttl_ms = cat->opt.staging_ttl_ms;
}

void dsc__staging_json_locked(dsc_catalog_t *cat, void *store_json) {
    dsc_staging_totals_t t;
    dsc__staging_totals_locked(cat, &t);
    cJSON *o = cJSON_AddObjectToObject((cJSON *)store_json, "staging");
    if (o == NULL)
        return;
    cJSON_AddNumberToObject(o, "memory", (double)t.memory);
    cJSON_AddNumberToObject(o, "ttl_ms", (double)t.ttl_ms);
    cJSON_AddNumberToObject(o, "bytes", (double)t.bytes);
    cJSON_AddNumberToObject(o, "ranges", (double)t.entries);
    cJSON_AddNumberToObject(o, "pending", (double)t.pending);
    cJSON_AddNumberToObject(o, "reading", (double)t.reading);
    cJSON_AddNumberToObject(o, "hints", (double)t.hints);
    cJSON_AddNumberToObject(o, "accepted", (double)t.accepted);
    cJSON_AddNumberToObject(o, "staged", (double)t.staged);
    cJSON_AddNumberToObject(o, "staged_bytes", (double)t.staged_bytes_total);
    cJSON_AddNumberToObject(o, "hits", (double)t.hits);
    cJSON_AddNumberToObject(o, "joined", (double)t.joined);
    cJSON_AddNumberToObject(o, "dropped_unused", (double)t.dropped_unused);
    cJSON_AddNumberToObject(o, "dropped_unused_bytes", (double)t.dropped_unused_bytes);
    cJSON_AddNumberToObject(o, "expired", (double)t.expired);
}
