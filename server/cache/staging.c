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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Distinct hinters counted per range; a further one is served, not waited for. */
#define STAGE_HINTERS 8
/* Ranges tracked at once (hinted, reading, staged): bounds the bookkeeping and each lookup. */
#define STAGE_MAX_ENTRIES 8192

/* hint_one_locked: a range beyond its tenant's share. */
#define STAGE_TRIMMED 2

/* Hinted ranges whose due time passed this long ago are dropped unread (the GET came first or
 * the loader went away). */
#define STAGE_PENDING_GRACE_S 2.0

/* Tenants: (credential, job) pairs holding ranges, and their credentials. The staging memory,
 * the ranges tracked and the backing readers hints may use are divided like fair service: an
 * equal part per credential holding ranges, and of it an equal part per job of that credential. */
#define STAGE_TENANTS 256
#define STAGE_NAME 64

typedef struct stage_cred {
    char name[STAGE_NAME];
    uint32_t jobs; /* its tenants (0: free) */
} stage_cred_t;

typedef struct stage_tenant {
    char job[STAGE_NAME];
    int cred;         /* index into creds; -1: free */
    uint32_t entries; /* its ranges, any state */
    uint32_t reading; /* its backing reads under way */
    uint64_t bytes;   /* charged: its ranges being read or staged */
    uint64_t pending; /* its queued ranges at their estimate */
    int busy;         /* a HINT of its is being judged: kept even with no ranges */
} stage_tenant_t;

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
    int tenant;       /* who it is charged to (the tenant that hinted it first); -1: nobody */
    int charged;      /* 1: its bytes count in its tenant's bytes; 0: its estimate in pending */
    uint64_t est;     /* its estimate while pending */
    dsc_waiter_t own; /* the read's waiter (its result) */
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
    stage_cred_t creds[STAGE_TENANTS];
    stage_tenant_t tenants[STAGE_TENANTS];
    uint32_t ncreds, ntenants; /* in use */
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
    if (cat->staging == NULL)
        return DSC_ENOMEM;
    for (int i = 0; i < STAGE_TENANTS; i++)
        cat->staging->tenants[i].cred = -1;
    return 0;
}

/* ---- tenants ----------------------------------------------------------------------------- */

/* The tenant (credential, job), made when absent and make is set. Returns its index, or -1
 * (absent, or the table is full). */
static int tenant_find(struct dsc_staging *st, const char *cred, const char *job, int make) {
    int c = -1, free_c = -1;
    for (int i = 0; i < STAGE_TENANTS && c < 0; i++) {
        if (st->creds[i].jobs == 0) {
            if (free_c < 0)
                free_c = i;
        } else if (strcmp(st->creds[i].name, cred) == 0) {
            c = i;
        }
    }
    int free_t = -1;
    if (c >= 0)
        for (int i = 0; i < STAGE_TENANTS; i++) {
            stage_tenant_t *t = &st->tenants[i];
            if (t->cred == c && strcmp(t->job, job) == 0)
                return i;
        }
    if (!make)
        return -1;
    for (int i = 0; i < STAGE_TENANTS && free_t < 0; i++)
        if (st->tenants[i].cred < 0)
            free_t = i;
    if (free_t < 0 || (c < 0 && free_c < 0))
        return -1;
    if (c < 0) {
        c = free_c;
        snprintf(st->creds[c].name, STAGE_NAME, "%s", cred);
        st->ncreds++;
    }
    st->creds[c].jobs++;
    stage_tenant_t *t = &st->tenants[free_t];
    memset(t, 0, sizeof *t);
    t->cred = c;
    snprintf(t->job, STAGE_NAME, "%s", job);
    st->ntenants++;
    return free_t;
}

/* A tenant with no ranges left is forgotten (its share goes back to the others). */
static void tenant_release(struct dsc_staging *st, int i) {
    stage_tenant_t *t = &st->tenants[i];
    if (t->cred < 0 || t->entries > 0 || t->busy)
        return;
    if (--st->creds[t->cred].jobs == 0)
        st->ncreds--;
    t->cred = -1;
    st->ntenants--;
}

/* The part of `total` that is tenant i's: an equal part per credential holding ranges (or being
 * judged for a hint: tenant_find counts it at once), and of it an equal part per job of that
 * credential. */
static uint64_t tenant_part(const struct dsc_staging *st, int i, uint64_t total) {
    const stage_tenant_t *t = &st->tenants[i];
    uint64_t creds = st->ncreds ? st->ncreds : 1;
    uint64_t jobs = st->creds[t->cred].jobs ? st->creds[t->cred].jobs : 1;
    return total / creds / jobs;
}

static uint64_t tenant_share(const dsc_catalog_t *cat, int i) {
    return tenant_part(cat->staging, i, cat->opt.staging_memory);
}

/* Backing reads hints may use at once: half of the readers (the GETs' own misses keep the
 * rest), divided like the memory, one at least per tenant. */
static uint64_t read_share_total(const dsc_catalog_t *cat) {
    return cat->opt.backing_reads > 1 ? cat->opt.backing_reads / 2 : 1;
}

static uint64_t tenant_reads(const dsc_catalog_t *cat, int i) {
    uint64_t n = tenant_part(cat->staging, i, read_share_total(cat));
    return n ? n : 1;
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
    if (e->tenant >= 0) {
        stage_tenant_t *t = &st->tenants[e->tenant];
        if (e->charged)
            t->bytes -= e->bytes;
        else
            t->pending -= e->est;
        t->entries--;
        tenant_release(st, e->tenant);
    }
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
    if (e->tenant >= 0) {
        /* The backing readers take it in its tenant's turn (readthrough.c), not in one turn
         * shared by every tenant's read-ahead. */
        const stage_tenant_t *t = &st->tenants[e->tenant];
        snprintf(e->own.owner, sizeof e->own.owner, "%s", st->creds[t->cred].name);
        snprintf(e->own.job, sizeof e->own.job, "%s", t->job[0] ? t->job : "#read-ahead");
    }
    int rc = dsc__range_start_locked(cat, e->slot, &e->own);
    if (rc < 0)
        return rc;
    if (e->state == ST_PENDING)
        pending_unlink(st, e);
    e->state = ST_READING;
    e->bytes = estimate(e->slot, e->count);
    st->bytes += e->bytes;
    st->reading++;
    if (e->tenant >= 0) {
        stage_tenant_t *t = &st->tenants[e->tenant];
        if (!e->charged)
            t->pending -= e->est;
        e->charged = 1;
        t->bytes += e->bytes;
        t->reading++;
    }
    return 0;
}

/* A new entry charged to `tenant` (-1: nobody; its estimate counted as queued, charged once its
 * read starts). */
static stage_ent_t *ent_new_locked(dsc_catalog_t *cat, dsc_shard_slot_t *s, uint32_t first,
                                   uint32_t count, int tenant) {
    struct dsc_staging *st = cat->staging;
    if (st->entries >= STAGE_MAX_ENTRIES || count > STAGE_MAX_CHUNKS)
        return NULL;
    stage_ent_t *e = calloc(1, sizeof *e);
    if (e == NULL)
        return NULL;
    e->tenant = tenant;
    if (tenant >= 0) {
        e->est = estimate(s, count);
        st->tenants[tenant].pending += e->est;
        st->tenants[tenant].entries++;
    }
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

/* The tenant holding the most beyond its share (other than `except`), or -1. */
static int most_over(const dsc_catalog_t *cat, int except) {
    const struct dsc_staging *st = cat->staging;
    int best = -1;
    uint64_t most = 0;
    for (int i = 0; i < STAGE_TENANTS; i++) {
        const stage_tenant_t *t = &st->tenants[i];
        if (t->cred < 0 || i == except)
            continue;
        uint64_t share = tenant_part(st, i, cat->opt.staging_memory);
        if (t->bytes > share && t->bytes - share > most) {
            most = t->bytes - share;
            best = i;
        }
    }
    return best;
}

/* Room for a tenant under its share (cat->lock held): drops a staged range, unread by its
 * hinter, of the tenant holding the most beyond its own share (its soonest to expire). Returns
 * 1 when one was dropped. */
static int reclaim_locked(dsc_catalog_t *cat, int for_tenant) {
    struct dsc_staging *st = cat->staging;
    int over = most_over(cat, for_tenant);
    if (over < 0)
        return 0;
    stage_ent_t *victim = NULL;
    for (stage_ent_t *e = st->all; e; e = e->next)
        if (e->tenant == over && e->state == ST_READY && (!victim || e->expires < victim->expires))
            victim = e;
    if (victim == NULL)
        return 0; /* all of it being read: its reads end soon */
    st->tot.reclaimed++;
    ent_free_locked(cat, victim);
    return 1;
}

void dsc__staging_pump_locked(dsc_catalog_t *cat, double now) {
    struct dsc_staging *st = cat->staging;
    if (st == NULL)
        return;
    sweep_locked(cat, now);
    /* In deadline order, each tenant within its part of the readers and of the memory: a tenant
     * at its part waits for its own ranges to be served or to expire, the others go past it. */
    uint64_t share = read_share_total(cat);
    for (stage_ent_t *e = st->pending, *next; e && st->reading < share && !cat->draining;
         e = next) {
        next = e->pnext;
        if (e->slot->state != SLOT_ABSENT || e->slot->refused) {
            ent_free_locked(cat, e); /* loaded or refused meanwhile: GETs go the usual way */
            continue;
        }
        uint64_t need = estimate(e->slot, e->count);
        if (e->tenant >= 0) {
            const stage_tenant_t *t = &st->tenants[e->tenant];
            if (t->reading >= tenant_reads(cat, e->tenant) ||
                t->bytes + need > tenant_share(cat, e->tenant))
                continue;
        }
        while (st->bytes + need > cat->opt.staging_memory && evict_done_locked(cat)) {
        }
        while (st->bytes + need > cat->opt.staging_memory && e->tenant >= 0 &&
               reclaim_locked(cat, e->tenant)) {
        }
        if (st->bytes + need > cat->opt.staging_memory)
            continue; /* full: staged ranges leave as they are served or expire */
        if (start_read_locked(cat, e) < 0)
            break; /* read-through memory exhausted: later */
    }
}

/* Room in the table of ranges for a tenant under its part of it (cat->lock held): drops the
 * latest-due queued range of the tenant holding the most ranges beyond its part. Returns 1 when
 * one was dropped. */
static int drop_pending_over_locked(dsc_catalog_t *cat, int for_tenant) {
    struct dsc_staging *st = cat->staging;
    int over = -1;
    uint64_t most = 0;
    for (int i = 0; i < STAGE_TENANTS; i++) {
        const stage_tenant_t *t = &st->tenants[i];
        uint64_t part = t->cred >= 0 ? tenant_part(st, i, STAGE_MAX_ENTRIES) : 0;
        if (t->cred >= 0 && i != for_tenant && t->entries > part && t->entries - part > most) {
            most = t->entries - part;
            over = i;
        }
    }
    stage_ent_t *victim = NULL;
    for (stage_ent_t *e = st->pending; over >= 0 && e; e = e->pnext)
        if (e->tenant == over)
            victim = e; /* the list is by deadline: the last one found is due latest */
    if (victim == NULL)
        return 0;
    st->tot.reclaimed++;
    ent_free_locked(cat, victim);
    return 1;
}

static int hint_one_locked(dsc_catalog_t *cat, dsc_shard_slot_t *s, int tenant, uint64_t hinter,
                           uint32_t first, uint32_t count, uint32_t due_ms, double now);

int dsc__staging_hint_locked(dsc_catalog_t *cat, dsc_shard_slot_t *s, uint64_t hinter,
                             uint32_t first, uint32_t count, uint32_t due_ms, double now) {
    struct dsc_staging *st = cat->staging;
    if (st == NULL)
        return 0;
    int tenant = tenant_find(st, "", "", 1);
    if (tenant >= 0)
        st->tenants[tenant].busy = 1;
    int r = hint_one_locked(cat, s, tenant, hinter, first, count, due_ms, now);
    if (tenant >= 0) {
        st->tenants[tenant].busy = 0;
        tenant_release(st, tenant);
    }
    return r == 1;
}

void dsc__staging_hint_request(dsc_catalog_t *cat, dsc_dataset_t *ds, const char *cred,
                               const char *job, uint64_t hinter, const dsc_hint_req_t *req,
                               dsc_hint_resp_t *out) {
    memset(out, 0, sizeof *out);
    struct dsc_staging *st = cat->staging;
    if (st == NULL)
        return;
    double now = dsc_now_s();
    pthread_mutex_lock(&cat->lock);
    int tenant = tenant_find(st, cred, job, 1);
    if (tenant >= 0)
        st->tenants[tenant].busy = 1;
    for (uint32_t i = 0; i < req->range_count; i++) {
        dsc_hint_range_t r;
        dsc_hint_range_at(req, i, &r);
        if (r.shard_id >= ds->manifest->shard_count)
            continue;
        int rc = hint_one_locked(cat, &ds->slots[r.shard_id], tenant, hinter, r.first_chunk,
                                 r.chunk_count, r.due_ms, now);
        out->accepted += rc == 1;
        out->trimmed += rc == STAGE_TRIMMED;
    }
    if (tenant >= 0) {
        out->share_bytes = tenant_share(cat, tenant);
        out->held_bytes = st->tenants[tenant].bytes + st->tenants[tenant].pending;
        st->tenants[tenant].busy = 0;
        tenant_release(st, tenant);
    }
    dsc__staging_pump_locked(cat, now);
    pthread_mutex_unlock(&cat->lock);
}

/* One hinted range for `tenant` (-1: none could be tracked: trimmed). Returns 1 (accepted), 0
 * (skipped) or STAGE_TRIMMED (beyond the tenant's share). */
static int hint_one_locked(dsc_catalog_t *cat, dsc_shard_slot_t *s, int tenant, uint64_t hinter,
                           uint32_t first, uint32_t count, uint32_t due_ms, double now) {
    struct dsc_staging *st = cat->staging;
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
    /* Within the tenant's share of the memory (its staged, read and queued ranges) and of the
     * ranges tracked; beyond it the range is trimmed, and the answer says so. */
    if (tenant < 0) {
        st->tot.trimmed++;
        return STAGE_TRIMMED;
    }
    const stage_tenant_t *t = &st->tenants[tenant];
    uint64_t entry_share = tenant_part(st, tenant, STAGE_MAX_ENTRIES);
    if (t->bytes + t->pending + estimate(s, count) > tenant_share(cat, tenant) ||
        t->entries + 1 > entry_share) {
        st->tot.trimmed++;
        return STAGE_TRIMMED;
    }
    if (st->entries >= STAGE_MAX_ENTRIES && !drop_pending_over_locked(cat, tenant)) {
        st->tot.trimmed++;
        return STAGE_TRIMMED;
    }
    stage_ent_t *e = ent_new_locked(cat, s, first, count, tenant);
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
    /* A hinting loader's read is charged to its tenant (it lingers for other jobs once served);
     * a GET's plain single-flight read to nobody (it goes once served). */
    int tenant = w->hinter != 0 ? tenant_find(cat->staging, w->owner, w->job, 1) : -1;
    stage_ent_t *e = ent_new_locked(cat, s, w->first_chunk, w->chunk_count, tenant);
    if (e == NULL) {
        if (tenant >= 0)
            tenant_release(cat->staging, tenant);
        return dsc__range_start_locked(cat, s, w);
    }
    int rc = start_read_locked(cat, e);
    if (rc < 0) {
        e->state = ST_DETACHED;
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
    if (e->tenant >= 0)
        st->tenants[e->tenant].reading--;
    dsc_waiter_t *waiting = e->waiting;
    e->waiting = NULL;
    if (own->status == 0) {
        e->hold = own->hold;
        e->state = ST_READY;
        uint64_t exact = e->hold.temp ? e->hold.temp->size : e->bytes;
        st->bytes = st->bytes - e->bytes + exact;
        if (e->tenant >= 0)
            st->tenants[e->tenant].bytes = st->tenants[e->tenant].bytes - e->bytes + exact;
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
    out->tenants = st->ntenants;
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
    cJSON_AddNumberToObject(o, "trimmed", (double)t.trimmed);
    cJSON_AddNumberToObject(o, "reclaimed", (double)t.reclaimed);
    cJSON_AddNumberToObject(o, "tenants", (double)t.tenants);
}
