/* Loader scheduler: the thread that plans steps ahead (sample ids -> chunk entries, new chunks
 * routed and queued for fetching) within the decoded-chunk budget and gives planned steps their
 * batch slots in stream order. The only user of the epoch order and split (plan.h) besides the
 * hint horizon (hints.c, on objects of its own). Calls down only: route.c, decode.c (work
 * signal), chunks.c, diag.c (how much next() waits on fetches), hints.c (the horizon follows the
 * plan). */
#include "scheduler.h"
#include "decode.h"
#include "diag.h"
#include "hints.h"
#include "route.h"

#include <stdlib.h>
#include <string.h>

/* Plans the segment of plan_epoch that follows its plan_nhist earlier segments (order local),
 * or the split from position pos (order global). Under lock. */
static int plan_init(dsc_loader_t *loader, uint64_t pos) {
    const dsc_loader_options_t *o = &loader->cfg.opt;
    if (dsc__order_is_caller(loader))
        return 0; /* the steps are the caller's pushes */
    if (!dsc__order_is_local(loader))
        return dsc__split_init(&loader->sched.plan_split, loader->cfg.samples, pos, o->batch_size,
                               o->world_size, o->drop_last);
    return dsc__local_init(&loader->sched.plan_local, loader->sched.order, o->shuffle_window,
                           o->shuffle, loader->sched.hist, loader->sched.plan_nhist, o->batch_size,
                           o->world_size, o->drop_last);
}

static uint64_t plan_steps(const dsc_loader_t *loader) {
    if (dsc__order_is_caller(loader))
        return UINT64_MAX; /* the epoch ends at the caller's end mark */
    return dsc__order_is_local(loader) ? loader->sched.plan_local.steps
                                       : loader->sched.plan_split.steps;
}

/* Points the plan at position pos of epoch `epoch` (order global: a global position; order
 * local: steps done in the segment after the plan_nhist segments of hist, or DSC__POS_DONE;
 * order caller: batches handed out), with no chunk fetched yet this epoch. Under lock. Returns 0
 * or DSC_E*. */
static int plan_from(dsc_loader_t *loader, uint64_t epoch, uint64_t pos) {
    loader->sched.plan_epoch = epoch;
    dsc__order_set_epoch(loader->sched.order, epoch);
    int rc = plan_init(loader, dsc__order_is_local(loader) ? 0 : pos);
    if (dsc__order_is_caller(loader)) {
        loader->sched.plan_step = 0;
        loader->sched.plan_step_base = pos; /* step numbers go on from the batches handed out */
    } else if (dsc__order_is_local(loader)) {
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
 * hides the fetch latency at the epoch boundary. When next() asks for the epoch, its step k is
 * needed k mean steps later (network_seconds / requests is the mean answer time, the mean step
 * counts compute and stall), so the steps k below answer / step must be fetched ahead: ceil of
 * that, at least 1 (the step next() asks for first), at most the step ring (before anything was
 * measured: prefetch_batches, at least 2). Not cache_bytes: a rank's next epoch fetched whole is
 * a whole extra share of the dataset for a job that stops after this epoch (docs/order.md,
 * "Network bytes"); and one step where a step spans a whole shuffle window. Under lock. */
static uint64_t ahead_limit(const dsc_loader_t *loader) {
    const dsc_stats_t *s = &loader->stats.st;
    if (s->requests == 0 || s->batches == 0)
        return loader->cons.slot_count > 2 ? loader->cons.slot_count : 2;
    double answer = s->network_seconds / (double)s->requests;
    double step = (s->compute_seconds + s->stall_seconds) / (double)s->batches;
    double steps = step > 0 ? answer / step : (double)loader->sched.step_cap;
    if (steps >= (double)loader->sched.step_cap)
        return loader->sched.step_cap;
    uint64_t limit = (uint64_t)steps;
    if ((double)limit < steps)
        limit++; /* rounded up */
    return limit > 1 ? limit : 1;
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
    /* Servers that read through from their backing storage: a store near its bandwidth loses
     * for good whatever time it idles while the fetch path drains at the end of an epoch (1.2x
     * the bound, 20 ms: 0.4% stall with the next epoch ahead, 5.5% with a few steps of it), so
     * the next epoch goes ahead as far as the in-flight budget allows, not cache_bytes. */
    int store = ahead && dsc__diag_store_reads(loader);
    if (ahead) {
        int defer = loader->sched.deferred.count > 0 ||
                    (!store && loader->sched.ahead_steps >= ahead_limit(loader)) ||
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
    int caller = dsc__order_is_caller(loader);
    const dsc_caller_ent_t *ce =
        caller ? &loader->sched.caller.ring[seq % loader->sched.caller.ring_cap] : NULL;
    if (caller ? ce->eof : loader->sched.plan_step >= plan_steps(loader)) {
        st->eof = 1;
        st->count = 0;
        st->step = loader->sched.plan_step_base + loader->sched.plan_step;
        st->pos_after = 0;
        loader->sched.plan_nhist = 0;
        plan_from(loader, loader->sched.plan_epoch + 1, 0); /* cannot fail: checked at init */
        loader->sched.plan_seq++;
        return 0;
    }
    uint64_t first = 0;
    uint32_t count;
    int local = dsc__order_is_local(loader);
    int rc = 0;
    if (caller)
        count = ce->count;
    else
        rc = local ? dsc__local_step(&loader->sched.plan_local, loader->sched.plan_step,
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
            caller  ? ce->ids[k]
            : local ? dsc__local_at(&loader->sched.plan_local, loader->cfg.opt.rank, first + k)
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
            /* Named by the hint horizon already: the queue's hints skip it. */
            if (dsc__hints_named(loader, st->epoch, loc.chunk))
                ent->hinted = ent->hz = 1;
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
        if (ent->idle)
            dsc__chunk_idle_remove(&loader->chunks, ent); /* decoded already: needed again */
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
    if (caller)
        st->pos_after = loader->sched.plan_step_base + loader->sched.plan_step;
    else if (local)
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
            (!dsc__order_is_caller(loader) ||
             loader->sched.plan_seq < loader->sched.caller.push_seq) &&
            (loader->chunks.held_bytes - loader->chunks.idle_bytes < loader->cfg.cache_bytes ||
             loader->sched.plan_seq <= loader->cons.cons_seq)) {
            int rc = plan_one(loader);
            if (rc < 0)
                dsc__loader_fail(loader, rc);
            /* Idle chunks (order caller) make room for the planned ones. */
            dsc__chunk_idle_trim(&loader->chunks, &loader->cfg.pool, loader->cfg.cache_bytes);
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
    rc = dsc__hints_init(loader); /* the hint horizon walks the same order */
    if (rc < 0)
        return rc;
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
    if (dsc__order_is_caller(loader)) {
        /* Every batch pushed ahead can be planned (cache_bytes permitting), beside the one
         * handed out and those the caller holds. */
        cap = (uint64_t)o->order_ahead + slots + 2;
        loader->sched.caller.ring_cap = o->order_ahead;
        loader->sched.caller.ring = calloc(o->order_ahead, sizeof(dsc_caller_ent_t));
        if (loader->sched.caller.ring == NULL)
            return DSC_ENOMEM;
        for (uint32_t i = 0; i < o->order_ahead; i++) {
            loader->sched.caller.ring[i].ids = malloc(o->batch_size * sizeof(uint64_t));
            if (loader->sched.caller.ring[i].ids == NULL)
                return DSC_ENOMEM;
        }
    }
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
    dsc__hints_free(loader);
    for (uint32_t i = 0; loader->sched.caller.ring != NULL && i < loader->sched.caller.ring_cap;
         i++)
        free(loader->sched.caller.ring[i].ids);
    free(loader->sched.caller.ring);
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
    dsc__hints_restart(loader); /* the horizon starts again from the new position */
    /* Order caller: nothing pushed any more; the caller pushes epoch `epoch` again. */
    loader->sched.caller.push_seq = loader->sched.plan_seq;
    loader->sched.caller.push_epoch = epoch;
    loader->sched.caller.push_pos = 0;
    loader->sched.caller.skip = loader->sched.caller.skip_total = 0;
    loader->sched.caller.skip_hash = loader->sched.caller.skip_seen = 0;
    int rc = plan_from(loader, epoch, pos);
    pthread_cond_broadcast(&loader->sched_cv);
    return rc;
}

uint32_t dsc__sched_order_room(const dsc_loader_t *loader) {
    if (!dsc__order_is_caller(loader))
        return 0;
    uint64_t out = loader->sched.caller.push_seq - loader->cons.cons_seq;
    return out < loader->sched.caller.ring_cap ? (uint32_t)(loader->sched.caller.ring_cap - out)
                                               : 0;
}

int dsc__sched_push(dsc_loader_t *loader, const uint64_t *ids, size_t n, int flags) {
    const dsc_loader_options_t *o = &loader->cfg.opt;
    const dsc_logger_t *log = &loader->cfg.log;
    if (!dsc__order_is_caller(loader)) {
        DSC_LOG(log, DSC_LOG_ERROR,
                "push_order: this loader plans its own order (options.order is not "
                "DSC_ORDER_CALLER)");
        return DSC_EINVAL;
    }
    int end = (flags & DSC_PUSH_END) != 0;
    if ((flags & ~DSC_PUSH_END) != 0 || n > o->batch_size || (n == 0 && !end) ||
        (n > 0 && ids == NULL)) {
        DSC_LOG(log, DSC_LOG_ERROR,
                "push_order: %zu indices with flags %d: a batch holds 1 .. batch_size (%u) "
                "indices, or none with DSC_PUSH_END",
                n, flags, o->batch_size);
        return DSC_EINVAL;
    }
    if (loader->error)
        return loader->error;
    uint64_t epoch = loader->sched.caller.push_epoch, pos = loader->sched.caller.push_pos;
    for (size_t k = 0; k < n; k++)
        if (ids[k] >= loader->cfg.samples) {
            DSC_LOG(log, DSC_LOG_ERROR,
                    "push_order: index %llu (position %llu of epoch %llu's order) is out of "
                    "range: dataset %s has %llu samples (indices 0 .. %llu)",
                    (unsigned long long)ids[k], (unsigned long long)(pos + k),
                    (unsigned long long)epoch, loader->cfg.dataset,
                    (unsigned long long)loader->cfg.samples,
                    (unsigned long long)loader->cfg.samples - 1);
            return DSC_ERANGE;
        }
    /* After a state_load: the samples handed out before are skipped, and checked. */
    uint64_t skip = loader->sched.caller.skip < n ? loader->sched.caller.skip : n;
    uint64_t seen = loader->sched.caller.skip_seen;
    for (uint64_t k = 0; k < skip; k++)
        seen = dsc__caller_hash(seen, ids[k]);
    uint64_t left = loader->sched.caller.skip - skip;
    if ((left == 0 && skip > 0 && seen != loader->sched.caller.skip_hash) || (end && left > 0)) {
        DSC_LOG(log, DSC_LOG_ERROR,
                "push_order: the order pushed after load_state is not the one the state was "
                "saved with: %s its first %llu indices of epoch %llu (give the sampler the "
                "state it had then, e.g. DistributedSampler.set_epoch(%llu) with the same seed, "
                "and push the epoch from its start)",
                end && left > 0 ? "the epoch ended within" : "other indices in",
                (unsigned long long)loader->sched.caller.skip_total, (unsigned long long)epoch,
                (unsigned long long)epoch);
        return DSC_EBADSTATE;
    }
    uint32_t entries = (n > skip ? 1u : 0u) + (end ? 1u : 0u);
    if (entries > dsc__sched_order_room(loader))
        return DSC_EAGAIN;
    loader->sched.caller.skip = left;
    loader->sched.caller.skip_seen = seen;
    loader->sched.caller.push_pos += n;
    uint32_t cap = loader->sched.caller.ring_cap;
    if (n > skip) {
        dsc_caller_ent_t *ce = &loader->sched.caller.ring[loader->sched.caller.push_seq % cap];
        ce->epoch = epoch;
        ce->eof = 0;
        ce->count = (uint32_t)(n - skip);
        memcpy(ce->ids, ids + skip, ce->count * sizeof(uint64_t));
        loader->sched.caller.push_seq++;
    }
    if (end) {
        dsc_caller_ent_t *ce = &loader->sched.caller.ring[loader->sched.caller.push_seq % cap];
        ce->epoch = epoch;
        ce->eof = 1;
        ce->count = 0;
        loader->sched.caller.push_seq++;
        loader->sched.caller.push_epoch++;
        loader->sched.caller.push_pos = 0;
    }
    if (entries > 0)
        pthread_cond_broadcast(&loader->sched_cv);
    return (int)dsc__sched_order_room(loader);
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
    if (dsc__order_is_caller(loader))
        return 0; /* the caller's order decides */
    dsc_split_t sp;
    if (dsc__split_init(&sp, loader->cfg.samples, 0, loader->cfg.opt.batch_size,
                        loader->cfg.opt.world_size, loader->cfg.opt.drop_last) < 0)
        return 0;
    return sp.steps;
}
