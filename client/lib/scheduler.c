/* Loader scheduler: the thread that plans steps ahead (sample ids -> chunk entries, new chunks
 * routed and queued for fetching) within the decoded-chunk budget and gives planned steps their
 * batch slots in stream order. The only user of the epoch order and split (plan.h). Calls down
 * only: route.c, decode.c (work signal), chunks.c, diag.c (how much next() waits on fetches). */
#include "scheduler.h"
#include "decode.h"
#include "diag.h"
#include "route.h"

#include <stdlib.h>
#include <string.h>

/* Plans the segment of plan_epoch that follows its plan_nhist earlier segments (order local),
 * or the split from position pos (order global). Under lock. */
static int plan_init(dsc_loader_t *loader, uint64_t pos) {
    const dsc_loader_options_t *o = &loader->cfg.opt;
    if (!dsc__order_is_local(loader))
        return dsc__split_init(&loader->sched.plan_split, loader->cfg.samples, pos, o->batch_size,
                               o->world_size, o->drop_last);
    return dsc__local_init(&loader->sched.plan_local, loader->sched.order, o->shuffle_window,
                           o->shuffle, loader->sched.hist, loader->sched.plan_nhist, o->batch_size,
                           o->world_size, o->drop_last);
}

static uint64_t plan_steps(const dsc_loader_t *loader) {
    return dsc__order_is_local(loader) ? loader->sched.plan_local.steps
                                       : loader->sched.plan_split.steps;
}

/* Points the plan at position pos of epoch `epoch` (order global: a global position; order
 * local: steps done in the segment after the plan_nhist segments of hist, or DSC__POS_DONE),
 * with no chunk fetched yet this epoch. Under lock. Returns 0 or DSC_E*. */
static int plan_from(dsc_loader_t *loader, uint64_t epoch, uint64_t pos) {
    loader->sched.plan_epoch = epoch;
    dsc__order_set_epoch(loader->sched.order, epoch);
    int rc = plan_init(loader, dsc__order_is_local(loader) ? 0 : pos);
    if (dsc__order_is_local(loader)) {
        loader->sched.plan_step = pos == DSC__POS_DONE ? loader->sched.plan_local.steps : pos;
        loader->sched.plan_step_base = 0;
        for (uint32_t i = 0; i < loader->sched.plan_nhist; i++)
            loader->sched.plan_step_base += loader->sched.hist[i].steps;
    } else {
        loader->sched.plan_step = 0;
        uint64_t per_step = (uint64_t)loader->cfg.opt.batch_size * loader->cfg.opt.world_size;
        loader->sched.plan_step_base = pos / per_step;
    }
    memset(loader->sched.fetched, 0, loader->sched.fetched_words * sizeof(uint64_t));
    loader->sched.ahead_steps = 0;
    loader->sched.ahead_bytes = 0;
    return rc;
}

/* Steps of an epoch the consumer has not asked for yet whose chunks are fetched ahead: what
 * hides the fetch latency at the epoch boundary, i.e. the steps the consumer takes during one
 * mean answer time (network_seconds / requests, over its mean step, stall included), plus the
 * step it asks for first: at least 2, at most the step ring (before anything was measured:
 * prefetch_batches). Not cache_bytes: a rank's next epoch fetched whole is a whole extra share
 * of the dataset for a job that stops after this epoch (docs/order.md, "Network bytes"). Under
 * lock. */
static uint64_t ahead_limit(const dsc_loader_t *loader) {
    const dsc_stats_t *s = &loader->stats.st;
    if (s->requests == 0 || s->batches == 0)
        return loader->cons.slot_count > 2 ? loader->cons.slot_count : 2;
    double answer = s->network_seconds / (double)s->requests;
    double step = (s->compute_seconds + s->stall_seconds) / (double)s->batches;
    double steps = step > 0 ? 1.0 + answer / step : (double)loader->sched.step_cap;
    if (steps >= (double)loader->sched.step_cap)
        return loader->sched.step_cap;
    uint64_t limit = (uint64_t)steps + 1; /* rounded up */
    return limit > 2 ? limit : 2;
}

/* The share of the consumer's time waiting on fetches (verdict window) from which the next
 * epoch is fetched ahead as far as cache_bytes allows. */
#define LOOKAHEAD_STALL 0.05

/* Queues a new chunk entry for fetching, or, past the look-ahead of an epoch not asked for yet,
 * keeps it in sched.deferred. Under lock. Returns 0, or DSC_EALLDOWN / DSC_EUNAVAIL (no server
 * for it; ent is not freed). */
static int queue_chunk(dsc_loader_t *loader, dsc_chunk_ent_t *ent, int ahead) {
    /* A loader that waits on its fetches now (LOOKAHEAD_STALL of its time or more) is short of
     * fetch time (a store at its bandwidth): holding the next epoch back would idle the fetch path
     * at the end of this one and stall at the boundary, so it looks ahead as far as cache_bytes
     * allows (what is already deferred stays in order behind). */
    if (ahead && loader->sched.deferred.count == 0 &&
        dsc__diag_recent_fetch_stall(loader) >= LOOKAHEAD_STALL)
        ahead = 0;
    if (ahead) {
        int defer = loader->sched.deferred.count > 0 ||
                    loader->sched.ahead_steps >= ahead_limit(loader) ||
                    (loader->sched.ahead_steps > 0 &&
                     loader->sched.ahead_bytes + ent->raw_len > loader->cfg.opt.inflight_bytes);
        if (defer) {
            ent->peer = UINT32_MAX;
            ent->state = CH_QUEUED;
            dsc__queue_push(&loader->sched.deferred, ent);
            return 0;
        }
        loader->sched.ahead_bytes += ent->raw_len;
    }
    int peer = dsc__route_chunk(loader, ent);
    if (peer < 0) {
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR, "no server available for shard %u", ent->shard);
        return loader->net.members.count > 1 ? DSC_EALLDOWN : DSC_EUNAVAIL;
    }
    dsc__peer_push(loader, (uint32_t)peer, ent);
    pthread_cond_broadcast(&loader->io_cv);
    return 0;
}

/* The consumer asked for the epoch the deferred chunks are for: they are routed and queued, in
 * plan order. Under lock. Returns 0 or DSC_E*. */
static int release_deferred(dsc_loader_t *loader) {
    dsc_chunk_ent_t *ent;
    while ((ent = dsc__queue_pop(&loader->sched.deferred)) != NULL) {
        int rc = queue_chunk(loader, ent, 0);
        if (rc < 0)
            return rc; /* ent stays in the table, freed with it */
    }
    return 0;
}

/* Plans step plan_seq: the next batch of this rank (its sample ids, each mapped to its chunk; a
 * chunk not in the table yet is created, routed and queued for fetching), or the end-of-epoch
 * marker. Every call into the epoch order (plan.h) while streaming is made here and in
 * plan_from. Under lock. Returns 0 or DSC_E*. */
static int plan_one(dsc_loader_t *loader) {
    uint64_t seq = loader->sched.plan_seq;
    dsc_step_t *st = &loader->sched.steps[seq % loader->sched.step_cap];
    st->seq = seq;
    st->state = ST_PLANNED;
    st->error = 0;
    st->scan = 0;
    st->epoch = loader->sched.plan_epoch;
    if (loader->sched.plan_step >= plan_steps(loader)) {
        st->eof = 1;
        st->count = 0;
        st->step = loader->sched.plan_step_base + loader->sched.plan_step;
        st->pos_after = 0;
        loader->sched.plan_nhist = 0;
        plan_from(loader, loader->sched.plan_epoch + 1, 0); /* cannot fail: checked at init */
        loader->sched.plan_seq++;
        return 0;
    }
    uint64_t first;
    uint32_t count;
    int local = dsc__order_is_local(loader);
    int rc = local ? dsc__local_step(&loader->sched.plan_local, loader->sched.plan_step,
                                     loader->cfg.opt.rank, &first, &count)
                   : dsc__split_step(&loader->sched.plan_split, loader->sched.plan_step,
                                     loader->cfg.opt.rank, &first, &count);
    if (rc < 0)
        return rc;
    st->eof = 0;
    st->count = count;
    st->step = loader->sched.plan_step_base + loader->sched.plan_step;
    for (uint32_t k = 0; k < count; k++) {
        uint64_t id =
            local ? dsc__local_at(&loader->sched.plan_local, loader->cfg.opt.rank, first + k)
                  : dsc__order_at(loader->sched.order, first + k);
        dsc_sample_loc_t loc;
        rc = dsc__order_locate(loader->sched.order, id, &loc);
        if (rc < 0)
            return rc;
        dsc_chunk_ent_t *ent = dsc__chunk_find(&loader->chunks, loc.chunk);
        if (ent == NULL) {
            ent = calloc(1, sizeof *ent);
            if (ent == NULL)
                return DSC_ENOMEM;
            ent->gid = loc.chunk;
            ent->shard = loc.shard;
            ent->shard_chunk = loc.shard_chunk;
            ent->samples = loc.chunk_samples;
            ent->raw_len = dsc__chunk_raw_estimate(loader->cfg.manifest, loc.chunk_samples);
            if (loader->cfg.var_count > 0) /* an estimate until it arrives */
                ent->raw_min =
                    dsc_schema_chunk_min(&loader->cfg.manifest->schema, loc.chunk_samples);
            ent->state = CH_QUEUED;
            ent->order = loader->sched.order_next++;
            ent->epoch = st->epoch; /* its wire bytes count for this epoch (stats) */
            /* A chunk fetched a second time this epoch: its first copy was dropped before a
             * later need was planned (the window's chunks did not fit in cache_bytes). */
            uint64_t *word = &loader->sched.fetched[loc.chunk / 64];
            if (*word & (1ull << (loc.chunk % 64)))
                loader->stats.st.refetches++;
            *word |= 1ull << (loc.chunk % 64);
            rc = queue_chunk(loader, ent, st->epoch > loader->cons.want_epoch);
            if (rc < 0) {
                free(ent);
                return rc;
            }
            dsc__chunk_insert(&loader->chunks, ent);
        }
        /* Direct placement stays possible while all of the chunk's needs form one run, in
         * chunk order from its first sample, inside this step. */
        if (ent->refs == 0) {
            ent->run_ok = loc.in_chunk == 0;
            ent->run_seq = seq;
            ent->run_k = k;
        } else if (ent->run_ok) {
            ent->run_ok =
                ent->run_seq == seq && k == ent->run_k + ent->refs && loc.in_chunk == ent->refs;
        }
        ent->refs++;
        st->ids[k] = id;
        st->src[k] = ent;
        st->in_chunk[k] = loc.in_chunk;
    }
    loader->sched.plan_step++;
    if (st->epoch > loader->cons.want_epoch)
        loader->sched.ahead_steps++;
    if (local)
        st->pos_after =
            loader->sched.plan_step < plan_steps(loader) ? loader->sched.plan_step : DSC__POS_DONE;
    else
        st->pos_after = dsc__split_position(&loader->sched.plan_split, loader->sched.plan_step);
    loader->sched.plan_seq++;
    return 0;
}

void *dsc__sched_main(void *arg) {
    dsc_loader_t *loader = arg;
    dsc__loader_thread_start();
    pthread_mutex_lock(&loader->lock);
    while (!loader->stop) {
        if (loader->error) {
            pthread_cond_wait(&loader->sched_cv, &loader->lock);
            continue;
        }
        int progress = 0;
        /* next() asked for the epoch whose chunks past the look-ahead were held back. */
        if (loader->sched.deferred.count > 0 &&
            loader->sched.deferred.head->epoch <= loader->cons.want_epoch) {
            int rc = release_deferred(loader);
            if (rc < 0)
                dsc__loader_fail(loader, rc);
            progress = 1;
        }
        /* Slots, in stream order: any free one (slots held by the caller's batches stay). */
        while (loader->sched.slot_seq < loader->sched.plan_seq) {
            uint32_t free_slot = UINT32_MAX;
            for (uint32_t i = 0; i < loader->cons.slot_count && free_slot == UINT32_MAX; i++)
                if (loader->cons.slots[i]->owner == SLOT_FREE)
                    free_slot = i;
            if (free_slot == UINT32_MAX)
                break;
            loader->cons.slots[free_slot]->owner = loader->sched.slot_seq;
            dsc_step_t *st = &loader->sched.steps[loader->sched.slot_seq % loader->sched.step_cap];
            st->slot = free_slot;
            if (st->eof) {
                st->state = ST_READY;
                pthread_cond_broadcast(&loader->cons_cv);
            }
            loader->sched.slot_seq++;
            progress = 1;
            dsc__work_signal(loader); /* one step: one worker collates it */
        }
        /* Plan ahead while the ring has room and the decoded-chunk budget allows (always at
         * least one step beyond what the consumer holds, so the pipeline never stalls). */
        /* Never more than one epoch ahead of the epoch next() was called for: planning epoch
         * e + 2 while e is consumed would fetch its chunks long before they are needed (a rank's
         * share of an epoch can be far smaller than cache_bytes), on top of e + 1's. Of e + 1,
         * only the chunks of its first steps are fetched before next() asks for it
         * (queue_chunk); the rest of the plan is made (each chunk's needs counted, so nothing is
         * fetched twice) and waits. */
        uint64_t ahead = loader->sched.plan_seq - loader->cons.retired_seq;
        uint64_t last = loader->cfg.opt.epochs; /* 0: no last epoch */
        if (ahead < loader->sched.step_cap &&
            loader->sched.plan_epoch <= loader->cons.want_epoch + 1 &&
            (last == 0 || loader->sched.plan_epoch < last) &&
            (loader->chunks.held_bytes < loader->cfg.cache_bytes ||
             loader->sched.plan_seq <= loader->cons.cons_seq)) {
            int rc = plan_one(loader);
            if (rc < 0)
                dsc__loader_fail(loader, rc);
            progress = 1;
        }
        if (!progress)
            pthread_cond_wait(&loader->sched_cv, &loader->lock);
    }
    pthread_mutex_unlock(&loader->lock);
    return NULL;
}

int dsc__sched_init(dsc_loader_t *loader) {
    const dsc_manifest_t *m = loader->cfg.manifest;
    const dsc_loader_options_t *o = &loader->cfg.opt;
    int rc = dsc__order_create(m, o->seed, o->shuffle, o->shuffle_window, &loader->sched.order);
    if (rc < 0)
        return rc;
    uint64_t chunks = dsc__order_chunks(loader->sched.order);
    rc = dsc__chunk_table_init(&loader->chunks, chunks);
    if (rc < 0)
        return rc;
    loader->sched.fetched_words = (chunks + 63) / 64;
    loader->sched.fetched = calloc(loader->sched.fetched_words, sizeof(uint64_t));
    if (loader->sched.fetched == NULL)
        return DSC_ENOMEM;
    /* Look-ahead of three shuffle windows: the current window's chunks stay decoded (each is
     * fetched once) while the next window's are fetched; bounded to about a million sample
     * records (and by cache_bytes at run time). */
    uint64_t per_step = (uint64_t)o->batch_size * o->world_size;
    if (dsc__order_is_local(loader)) /* a step moves through this rank's own run by one batch */
        per_step = o->batch_size;
    uint64_t window = o->shuffle ? o->shuffle_window : 1;
    uint32_t slots = loader->cons.slot_count;
    uint64_t cap = 3 * ((window + per_step - 1) / per_step) + 2ull * slots + 1;
    uint64_t limit = (1ull << 20) / o->batch_size;
    if (cap > limit)
        cap = limit;
    if (cap < slots + 1ull)
        cap = slots + 1ull;
    loader->sched.step_cap = (uint32_t)cap;
    loader->sched.steps = calloc(cap, sizeof(dsc_step_t));
    if (loader->sched.steps == NULL)
        return DSC_ENOMEM;
    for (uint64_t i = 0; i < cap; i++) {
        dsc_step_t *st = &loader->sched.steps[i];
        st->ids = malloc(o->batch_size * sizeof(uint64_t));
        st->src = malloc(o->batch_size * sizeof(dsc_chunk_ent_t *));
        st->in_chunk = malloc(o->batch_size * sizeof(uint32_t));
        if (!st->ids || !st->src || !st->in_chunk)
            return DSC_ENOMEM;
    }
    return plan_from(loader, 0, 0);
}

void dsc__sched_free(dsc_loader_t *loader) {
    dsc__chunk_table_free(&loader->chunks, &loader->cfg.pool);
    free(loader->sched.fetched);
    if (loader->sched.steps != NULL) {
        for (uint32_t i = 0; i < loader->sched.step_cap; i++) {
            free(loader->sched.steps[i].ids);
            free(loader->sched.steps[i].src);
            free(loader->sched.steps[i].in_chunk);
        }
        free(loader->sched.steps);
    }
    dsc__order_destroy(loader->sched.order);
}

int dsc__sched_restart(dsc_loader_t *loader, uint64_t epoch, const dsc_plan_seg_t *hist,
                       uint32_t nhist, uint64_t pos) {
    loader->sched.slot_seq = loader->sched.plan_seq;
    if (nhist > 0)
        memcpy(loader->sched.hist, hist, nhist * sizeof hist[0]);
    loader->sched.plan_nhist = nhist;
    memset(&loader->sched.deferred, 0, sizeof loader->sched.deferred); /* freed with the table */
    loader->cons.want_epoch = epoch;
    int rc = plan_from(loader, epoch, pos);
    pthread_cond_broadcast(&loader->sched_cv);
    return rc;
}

int dsc__sched_check_segments(dsc_loader_t *loader, const dsc_plan_seg_t *hist, uint32_t nhist,
                              uint64_t pos) {
    const dsc_loader_options_t *o = &loader->cfg.opt;
    dsc_local_t check;
    int rc = dsc__local_init(&check, loader->sched.order, o->shuffle_window, o->shuffle, hist,
                             nhist, o->batch_size, o->world_size, o->drop_last);
    if (rc == 0 && pos != DSC__POS_DONE && pos > check.steps)
        rc = DSC_EINVAL;
    return rc;
}

uint64_t dsc__sched_epoch_steps(const dsc_loader_t *loader) {
    dsc_split_t sp;
    if (dsc__split_init(&sp, loader->cfg.samples, 0, loader->cfg.opt.batch_size,
                        loader->cfg.opt.world_size, loader->cfg.opt.drop_last) < 0)
        return 0;
    return sp.steps;
}
