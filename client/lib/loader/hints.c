/* Read-ahead hints: the one owner of the hint horizon. Once per tick, an I/O thread (fetch.c) asks
 * what HINT to send its server: the chunks queued for that peer and not named yet, and those the
 * horizon named beyond the queue (the plan walked ahead on an order of its own: the chunks of the
 * next seconds of demand, routed to their peers), each with when it will be asked for. Advisory:
 * a server without read-ahead says UNSUPPORTED once and is not told again. Below fetch.c and
 * scheduler.c (which restarts the horizon with the plan); above route.c, chunks.c and plan.c. */
#include "hints.h"
#include "hint.h"
#include "route.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A HINT at most this often per peer, naming what is queued for it up to this far ahead. */
#define HINT_INTERVAL_S 0.1
#define HINT_WINDOW_S 4.0
/* Queued chunks looked at per HINT (the queue's head is mostly hinted already). */
#define HINT_SCAN_MAX 8192
/* Until the peer's rate is known, the bytes per second due times are reckoned at. */
#define HINT_RATE_GUESS (100.0 * 1e6)

/* Whether this loader sends hints: on unless DSCACHE_HINTS=0 (decided once). Under lock. */
static int hints_on(dsc_loader_t *loader) {
    if (loader->hints.on == 0) {
        const char *v = getenv("DSCACHE_HINTS");
        loader->hints.on = v != NULL && strcmp(v, "0") == 0 ? -1 : 1;
        /* A per-loader id the server counts hinters by: not a secret, just distinct. */
        uint64_t x = dsc_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)loader;
        x ^= x >> 33;
        x *= 0xff51afd7ed558ccdull;
        x ^= x >> 33;
        loader->hints.hinter = x ? x : 1;
        if (loader->hints.on < 0)
            DSC_LOG(&loader->cfg.log, DSC_LOG_DEBUG, "read-ahead hints off (DSCACHE_HINTS=0)");
    }
    return loader->hints.on > 0;
}

/* A HINT body of n ranges (0: it only names this connection's loader). Returns its length, or 0. */
static int hint_encode(dsc_loader_t *loader, const dsc_hint_range_t *ranges, uint32_t n,
                       uint8_t *out, size_t cap) {
    const char *dataset = loader->cfg.dataset;
    dsc_hint_req_t req = {.hinter = loader->hints.hinter,
                          .dataset = {dataset, (uint16_t)strlen(dataset)},
                          .range_count = n,
                          .ranges = n > 0 ? ranges : NULL};
    int len = dsc_hint_req_encode(&req, out, cap);
    return len > 0 ? len : 0;
}

/* Builds a HINT body naming the chunks queued for io's peer that were not named yet, grouped as
 * take_request will merge them, each with when it should be asked for (the bytes queued before
 * it at the peer's rate so far), up to HINT_WINDOW_S ahead. Marks them hinted. Under lock.
 * Returns the body's length, or 0 when there is nothing new to say. */
static int hint_body(dsc_io_t *io, double now, uint8_t *out, size_t cap) {
    dsc_loader_t *loader = io->loader;
    dsc_peer_t *peer = &loader->net.peers[io->peer];
    static _Thread_local dsc_hint_range_t ranges[DSC_HINT_MAX_RANGES];
    if (loader->hints.t0 == 0)
        loader->hints.t0 = now;
    double elapsed = now - loader->hints.t0;
    const dsc_verdict_server_t *vs = &loader->diag.servers[io->peer];
    double rate = elapsed > 1.0 && vs->bytes > 0 ? (double)vs->bytes / elapsed : HINT_RATE_GUESS;
    uint64_t ahead = peer->inflight_bytes;
    uint32_t n = 0, scanned = 0;
    dsc_chunk_ent_t *ent = peer->queue.head;
    while (ent != NULL && n < DSC_HINT_MAX_RANGES && scanned < HINT_SCAN_MAX) {
        double due = (double)ahead / rate;
        if (due > HINT_WINDOW_S)
            break;
        /* A run of consecutive chunks of one shard, as take_request merges them. */
        dsc_chunk_ent_t *run = ent;
        uint32_t count = 0, fresh = 0;
        do {
            fresh += !ent->hinted;
            ahead += ent->raw_len;
            count++;
            scanned++;
            dsc_chunk_ent_t *next = ent->qnext;
            int more = next != NULL && next->shard == ent->shard &&
                       next->shard_chunk == ent->shard_chunk + 1 && count < DSC_SOURCE_MAX_MERGE &&
                       count < DSC_HINT_MAX_RANGE_CHUNKS && next->hinted == run->hinted;
            ent = next;
            if (!more)
                break;
        } while (1);
        if (fresh == 0)
            continue;
        for (dsc_chunk_ent_t *e = run; e != ent; e = e->qnext)
            e->hinted = 1;
        uint32_t due_ms =
            due * 1e3 < DSC_HINT_MAX_DUE_MS ? (uint32_t)(due * 1e3) : DSC_HINT_MAX_DUE_MS;
        ranges[n++] = (dsc_hint_range_t){.shard_id = run->shard,
                                         .first_chunk = run->shard_chunk,
                                         .chunk_count = count,
                                         .due_ms = due_ms};
    }
    /* Then what the horizon named beyond the queue (horizon_walk) for this peer, in plan
     * order, a range per chunk (take_request asks for each alone, so that every GET lies inside
     * one staged range however the queue merges later); the rest of hints.pending stays. */
    if (peer->hz_pending > 0) {
        uint32_t keep = 0;
        for (uint32_t i = 0; i < loader->hints.pending_count; i++) {
            dsc__hz_pending_t *h = &loader->hints.pending[i];
            if (h->peer != io->peer) {
                loader->hints.pending[keep++] = *h;
                continue;
            }
            if (n < DSC_HINT_MAX_RANGES) {
                double due = h->due_at > now ? h->due_at - now : 0;
                uint32_t due_ms =
                    due * 1e3 < DSC_HINT_MAX_DUE_MS ? (uint32_t)(due * 1e3) : DSC_HINT_MAX_DUE_MS;
                ranges[n++] = (dsc_hint_range_t){.shard_id = h->shard,
                                                 .first_chunk = h->shard_chunk,
                                                 .chunk_count = 1,
                                                 .due_ms = due_ms};
            } else {
                loader->hints.pending[keep++] = *h; /* the next HINT */
                continue;
            }
            peer->hz_pending--;
        }
        loader->hints.pending_count = keep;
    }
    if (n == 0)
        return 0;
    return hint_encode(loader, ranges, n, out, cap);
}

/* ---- The horizon --------------------------------------------------------------------------- */

/* How far ahead of the consumer the horizon names chunks, in seconds of its measured steps
 * (DSCACHE_HINT_SECONDS overrides; 0: only what is queued is hinted), and the samples looked at
 * per walk (the first walks reach the horizon in a few rounds). */
#define HZ_SECONDS 4.0
#define HZ_SCAN_SAMPLES 65536

/* Points the horizon's plan at epoch `epoch` from its start, or, for the epoch being planned,
 * at the plan's own segment and step. Under lock. Returns 0, or < 0 (horizon off for now). */
static int hz_enter(dsc_loader_t *loader, uint64_t epoch) {
    const dsc_loader_options_t *o = &loader->cfg.opt;
    if (dsc__order_epoch(loader->hints.order) != epoch || !loader->hints.valid)
        dsc__order_set_epoch(loader->hints.order, epoch);
    int rc = 0;
    if (epoch == loader->sched.plan_epoch) {
        loader->hints.split = loader->sched.plan_split;
        loader->hints.local = loader->sched.plan_local;
        loader->hints.local.order = loader->hints.order;
        loader->hints.local.hint_valid = 0;
        loader->hints.step = loader->sched.plan_step;
    } else {
        rc = dsc__order_is_local(loader)
                 ? dsc__local_init(&loader->hints.local, loader->hints.order, o->shuffle_window,
                                   o->shuffle, NULL, 0, o->batch_size, o->world_size, o->drop_last)
                 : dsc__split_init(&loader->hints.split, loader->cfg.samples, 0, o->batch_size,
                                   o->world_size, o->drop_last);
        loader->hints.step = 0;
    }
    loader->hints.epoch = epoch;
    uint32_t b = epoch & 1;
    if (loader->hints.bits_epoch[b] != epoch) {
        memset(loader->hints.bits[b], 0, loader->sched.fetched_words * sizeof(uint64_t));
        loader->hints.bits_epoch[b] = epoch;
    }
    return rc;
}

/* Names one chunk a step of the horizon needs (once per epoch: bits; not one named for the
 * epoch before: prev, may be NULL) to its peer's next HINT, due at due_at, as the need of seq
 * hints.seq. Under lock, with room in hints.pending and hints.ring. Returns 1 when named, else 0.
 */
static uint32_t hz_name(dsc_loader_t *loader, const dsc_sample_loc_t *loc, uint64_t *bits,
                        const uint64_t *prev, double due_at) {
    uint64_t bit = 1ull << (loc->chunk % 64);
    if (bits[loc->chunk / 64] & bit)
        return 0;
    /* Named for the epoch before: a server stages a range once per loader and pass, so this
     * need is left to the queue's hints (when it is queued, after the first). */
    if (prev != NULL && (prev[loc->chunk / 64] & bit))
        return 0;
    bits[loc->chunk / 64] |= bit;
    /* In the table: queued (hinted with the queue), fetched or held. Deferred (next epoch, not
     * routed): named here, and the queue's hints skip it later. */
    dsc_chunk_ent_t *ent = dsc__chunk_find(&loader->chunks, loc->chunk);
    if (ent != NULL && (ent->hinted || ent->peer != UINT32_MAX || ent->state != CH_QUEUED))
        return 0;
    dsc_chunk_ent_t probe = {.gid = loc->chunk,
                             .shard = loc->shard,
                             .shard_chunk = loc->shard_chunk,
                             .samples = loc->chunk_samples};
    probe.raw_len = dsc__chunk_raw_estimate(loader->cfg.manifest, loc->chunk_samples);
    int peer = dsc__route_chunk(loader, ent != NULL ? ent : &probe);
    if (peer < 0 || (uint32_t)peer == DSC__PEER_FALLBACK ||
        loader->net.peers[peer].source->hint == NULL || loader->net.peers[peer].hints_off)
        return 0;
    if (ent != NULL)
        ent->hinted = ent->hz = 1;
    loader->hints.pending[loader->hints.pending_count++] =
        (dsc__hz_pending_t){.peer = (uint32_t)peer,
                            .shard = loc->shard,
                            .shard_chunk = loc->shard_chunk,
                            .due_at = due_at};
    loader->net.peers[peer].hz_pending++;
    loader->hints.ring[(loader->hints.head + loader->hints.count) % DSC__HZ_MAX_CHUNKS] =
        loader->hints.seq;
    loader->hints.count++;
    return 1;
}

/* The horizon along the caller's order: the batches pushed but not planned yet (seqs plan_seq ..
 * push_seq - 1) up to limit_seq, each chunk named once per epoch. The lookups are cheap (no
 * permutation: the indices are there), so all under lock. Returns the chunks named. */
static uint32_t hz_caller(dsc_loader_t *loader, double now, double step, uint64_t limit_seq) {
    const uint64_t cons = loader->cons.cons_seq;
    if (!loader->hints.valid || loader->hints.seq < loader->sched.plan_seq) {
        loader->hints.seq = loader->sched.plan_seq;
        loader->hints.valid = 1;
    }
    uint64_t end =
        loader->sched.caller.push_seq < limit_seq ? loader->sched.caller.push_seq : limit_seq;
    uint32_t named = 0;
    while (loader->hints.seq < end && loader->hints.count < DSC__HZ_MAX_CHUNKS &&
           loader->hints.pending_count < DSC__HZ_MAX_CHUNKS) {
        const dsc_caller_ent_t *ce =
            &loader->sched.caller.ring[loader->hints.seq % loader->sched.caller.ring_cap];
        if (!ce->eof) {
            uint64_t epoch = ce->epoch;
            uint32_t b = epoch & 1;
            if (loader->hints.bits_epoch[b] != epoch) {
                memset(loader->hints.bits[b], 0, loader->sched.fetched_words * sizeof(uint64_t));
                loader->hints.bits_epoch[b] = epoch;
            }
            const uint64_t *prev =
                epoch > 0 && loader->hints.bits_epoch[(epoch - 1) & 1] == epoch - 1
                    ? loader->hints.bits[(epoch - 1) & 1]
                    : NULL;
            double due_at = now + (double)(loader->hints.seq - cons) * step;
            for (uint32_t k = 0;
                 k < ce->count && loader->hints.pending_count < DSC__HZ_MAX_CHUNKS &&
                 loader->hints.count < DSC__HZ_MAX_CHUNKS;
                 k++) {
                dsc_sample_loc_t loc;
                if (dsc__order_locate(loader->sched.order, ce->ids[k], &loc) == 0)
                    named += hz_name(loader, &loc, loader->hints.bits[b], prev, due_at);
            }
        }
        loader->hints.seq++;
    }
    return named;
}

/* The horizon's reach in seconds: HZ_SECONDS, or DSCACHE_HINT_SECONDS (0 .. 600; 0: hints name
 * only what is queued). Read once. */
static double horizon_seconds(void) {
    static double seconds = -1;
    if (seconds < 0) {
        const char *v = getenv("DSCACHE_HINT_SECONDS");
        char *end = NULL;
        double x = v != NULL ? strtod(v, &end) : HZ_SECONDS;
        seconds = v != NULL && (end == v || !(x >= 0) || x > 600) ? HZ_SECONDS : x;
    }
    return seconds;
}

/* Walks the plan past what is planned, up to the steps of the next horizon_seconds() of demand
 * (the consumer's mean step so far; nothing before two steps were measured) and at most
 * DSC__HZ_MAX_CHUNKS chunks named ahead of the plan, and appends the chunks not in the chunk
 * table yet (or deferred there), each once per epoch, to hints.pending with their owning peer and
 * expected request time (hint_body sends them). now: monotonic seconds. Under lock (released
 * while a step's samples are looked up). Returns the chunks named. */
static uint32_t horizon_walk(dsc_loader_t *loader, double now) {
    if (loader->hints.order == NULL || loader->hints.pending == NULL || loader->hints.walking)
        return 0;
    const dsc_stats_t *s = &loader->stats.st;
    double window = horizon_seconds();
    if (s->batches < 2 || window <= 0)
        return 0; /* no step time measured yet */
    double step = (s->compute_seconds + s->stall_seconds) / (double)s->batches;
    if (!(step > 0))
        return 0;
    /* Named chunks the plan has reached since leave the bound. */
    while (loader->hints.count > 0 &&
           loader->hints.ring[loader->hints.head] < loader->sched.plan_seq) {
        loader->hints.head = (loader->hints.head + 1) % DSC__HZ_MAX_CHUNKS;
        loader->hints.count--;
    }
    uint64_t cons = loader->cons.cons_seq;
    double reach = window / step;
    uint64_t limit_seq = cons + (reach < 1e9 ? (uint64_t)reach : 1000000000ull);
    if (dsc__order_is_caller(loader))
        return hz_caller(loader, now, step, limit_seq);
    if (!loader->hints.valid || loader->hints.seq < loader->sched.plan_seq) {
        if (hz_enter(loader, loader->sched.plan_epoch) < 0)
            return 0;
        loader->hints.seq = loader->sched.plan_seq;
        loader->hints.valid = 1;
    }
    const dsc_loader_options_t *o = &loader->cfg.opt;
    int local = dsc__order_is_local(loader);
    uint32_t named = 0;
    uint64_t scanned = 0;
    while (loader->hints.seq < limit_seq && loader->hints.count < DSC__HZ_MAX_CHUNKS &&
           loader->hints.pending_count < DSC__HZ_MAX_CHUNKS && scanned < HZ_SCAN_SAMPLES) {
        uint64_t epoch = loader->hints.epoch;
        if (o->epochs != 0 && epoch >= o->epochs)
            break; /* the job's last epoch is done */
        uint64_t steps = local ? loader->hints.local.steps : loader->hints.split.steps;
        if (loader->hints.step >= steps) { /* the end-of-epoch marker's seq */
            if (epoch > loader->sched.plan_epoch || hz_enter(loader, epoch + 1) < 0)
                break;
            loader->hints.seq++;
            continue;
        }
        uint64_t first;
        uint32_t count;
        int rc = local ? dsc__local_step(&loader->hints.local, loader->hints.step, o->rank, &first,
                                         &count)
                       : dsc__split_step(&loader->hints.split, loader->hints.step, o->rank, &first,
                                         &count);
        if (rc < 0)
            break;
        uint64_t *bits = loader->hints.bits[epoch & 1];
        const uint64_t *prev = epoch > 0 && loader->hints.bits_epoch[(epoch - 1) & 1] == epoch - 1
                                   ? loader->hints.bits[(epoch - 1) & 1]
                                   : NULL;
        double due_at = now + (double)(loader->hints.seq - cons) * step;
        /* The step's samples are looked up without the lock (the costly part: the order's
         * permutations); what they name is then checked against the table under it. */
        uint64_t gen = loader->hints.gen;
        dsc_sample_loc_t *locs = loader->hints.locs;
        loader->hints.walking = 1;
        pthread_mutex_unlock(&loader->lock);
        for (uint32_t k = 0; k < count; k++) {
            uint64_t id = local ? dsc__local_at(&loader->hints.local, o->rank, first + k)
                                : dsc__order_at(loader->hints.order, first + k);
            if (dsc__order_locate(loader->hints.order, id, &locs[k]) < 0)
                locs[k].chunk = UINT64_MAX;
        }
        pthread_mutex_lock(&loader->lock);
        loader->hints.walking = 0;
        if (loader->stop || gen != loader->hints.gen)
            break; /* restarted meanwhile: the next walk starts from the new position */
        for (uint32_t k = 0; k < count && loader->hints.pending_count < DSC__HZ_MAX_CHUNKS &&
                             loader->hints.count < DSC__HZ_MAX_CHUNKS;
             k++)
            if (locs[k].chunk != UINT64_MAX)
                named += hz_name(loader, &locs[k], bits, prev, due_at);
        scanned += count;
        loader->hints.step++;
        loader->hints.seq++;
    }
    return named;
}

/* ---- Owner's interface ----------------------------------------------------------------------- */

int dsc__hints_init(dsc_loader_t *loader) {
    const dsc_loader_options_t *o = &loader->cfg.opt;
    /* The horizon walks the plan's order on an object of its own (plan.h: one thread at a time
     * each; both are used under lock). */
    int rc = dsc__order_create(loader->cfg.manifest, o->seed, o->shuffle, o->shuffle_window,
                               &loader->hints.order);
    if (rc < 0)
        return rc;
    loader->hints.bits[0] = calloc(loader->sched.fetched_words, sizeof(uint64_t));
    loader->hints.bits[1] = calloc(loader->sched.fetched_words, sizeof(uint64_t));
    loader->hints.ring = calloc(DSC__HZ_MAX_CHUNKS, sizeof(uint64_t));
    loader->hints.pending = calloc(DSC__HZ_MAX_CHUNKS, sizeof(dsc__hz_pending_t));
    loader->hints.locs = calloc(o->batch_size, sizeof(dsc_sample_loc_t));
    if (!loader->hints.bits[0] || !loader->hints.bits[1] || !loader->hints.ring ||
        !loader->hints.pending || !loader->hints.locs)
        return DSC_ENOMEM;
    loader->hints.bits_epoch[0] = loader->hints.bits_epoch[1] = UINT64_MAX;
    return 0;
}

void dsc__hints_free(dsc_loader_t *loader) {
    free(loader->hints.bits[0]);
    free(loader->hints.bits[1]);
    free(loader->hints.ring);
    free(loader->hints.pending);
    free(loader->hints.locs);
    dsc__order_destroy(loader->hints.order);
}

void dsc__hints_restart(dsc_loader_t *loader) {
    /* Named bits stay: advisory. */
    loader->hints.valid = 0;
    loader->hints.count = 0;
    loader->hints.gen++;
    loader->hints.bits_epoch[0] = loader->hints.bits_epoch[1] = UINT64_MAX;
}

int dsc__hints_named(const dsc_loader_t *loader, uint64_t epoch, uint64_t chunk) {
    const uint64_t *bits = loader->hints.bits[epoch & 1];
    return bits != NULL && loader->hints.bits_epoch[epoch & 1] == epoch &&
           (bits[chunk / 64] & (1ull << (chunk % 64))) != 0;
}

int dsc__hints_tick(dsc_io_t *io, double now, uint8_t *out, size_t cap) {
    dsc_loader_t *loader = io->loader;
    dsc_peer_t *peer = &loader->net.peers[io->peer];
    /* Now and then, what is queued for this server and not yet announced: it reads the chunks it
     * does not hold ahead of the GETs. */
    int hint_now = now >= peer->hint_due && (peer->queue.head != NULL || peer->hz_pending > 0);
    if (peer->source->hint == NULL || peer->hints_off || !(hint_now || !io->hint_named) ||
        !hints_on(loader))
        return 0;
    /* The horizon is walked at most every HINT_INTERVAL_S for all peers, by whichever I/O thread
     * is about to hint. */
    if (hint_now && now >= loader->hints.walk_due) {
        loader->hints.walk_due = now + HINT_INTERVAL_S;
        horizon_walk(loader, now);
        if (peer->hints_off)
            return 0; /* refused meanwhile (the walk releases the lock) */
    }
    int len = 0;
    if (hint_now) {
        peer->hint_due = now + HINT_INTERVAL_S;
        len = hint_body(io, now, out, cap);
    }
    /* Each connection says once whose GETs it carries, so that the server serves a staged range
     * once per loader that announced it. */
    if (len == 0 && !io->hint_named)
        len = hint_encode(loader, NULL, 0, out, cap);
    if (len > 0)
        io->hint_named = 1;
    return len;
}

void dsc__hints_answered(dsc_io_t *io) {
    dsc_loader_t *loader = io->loader;
    dsc_peer_t *peer = &loader->net.peers[io->peer];
    const dsc_source_ops_t *src = peer->source;
    if (src->hint_refused != NULL && io->conn != NULL && src->hint_refused(io->conn) &&
        !peer->hints_off) {
        peer->hints_off = 1;
        DSC_LOG(&loader->cfg.log, DSC_LOG_INFO,
                "server %s has no read-ahead (HINT answered UNSUPPORTED): not sending it hints",
                peer->addr);
    }
}
