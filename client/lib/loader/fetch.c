/* Loader fetch policy: the I/O threads. Each owns one connection to its peer's data source and
 * pipelines requests on it within the loader-wide and per-peer in-flight budgets; failures move
 * chunks to other peers (route.c) and failed peers are probed with back-off. How the bytes arrive
 * is the source's business (source.h). Also the manifest fetch. */
#include "fetch.h"
#include "decode.h"
#include "diag.h"
#include "hedge.h"
#include "hint.h"
#include "range.h"
#include "report.h"
#include "route.h"
#include "scheduler.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Back-off between probes of a failed peer: DSC__BACKOFF_FIRST_S, doubling up to this. */
#define BACKOFF_MAX_S 10.0

_Static_assert(IO_MAX_OUTSTANDING >= 1, "at least one outstanding request");

/* Decoded bytes of whole chunks one RANGE request may make the server decode (take_request). */
#define RANGE_SERVER_BYTES (16u << 20)

/* ---- Manifest ------------------------------------------------------------------------------ */

int dsc__fetch_manifest(dsc_loader_t *loader) {
    int rc = DSC_EUNAVAIL;
    uint64_t members_hash = loader->net.view_hash;
    for (uint32_t i = 0; i < loader->net.peer_count; i++) {
        dsc_peer_t *peer = &loader->net.peers[i];
        uint64_t hello = 0;
        int r = peer->source->manifest(peer->endpoint, members_hash, &loader->cfg.manifest, &hello);
        peer->manifest_rc = r;
        pthread_mutex_lock(&loader->lock);
        dsc__peer_hello(loader, i, hello);
        pthread_mutex_unlock(&loader->lock);
        if (r == 0)
            return 0;
        /* A definite answer (unknown dataset, corrupt manifest) is not retried elsewhere. */
        if (r == DSC_ENOTFOUND || r == DSC_EBADMANIFEST || r == DSC_EBADSCHEMA)
            return r;
        rc = r == DSC_ECONNREFUSED || r == DSC_ETIMEDOUT || r == DSC_ECLOSED || r == DSC_ECONNRESET
                 ? DSC_EUNAVAIL
                 : r;
    }
    if (loader->cfg.fallback != NULL) {
        dsc_peer_t *files = &loader->net.peers[DSC__PEER_FALLBACK];
        uint64_t hello = 0;
        return files->source->manifest(files->endpoint, members_hash, &loader->cfg.manifest,
                                       &hello);
    }
    if (rc == DSC_EUNAVAIL)
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR, "no server answered for dataset %s",
                loader->cfg.dataset);
    return rc;
}

/* ---- Read-ahead hints ------------------------------------------------------------------------ */

/* A HINT at most this often per peer, naming what is queued for it up to this far ahead. */
#define HINT_INTERVAL_S 0.1
#define HINT_WINDOW_S 4.0
/* Queued chunks looked at per HINT (the queue's head is mostly hinted already). */
#define HINT_SCAN_MAX 8192
/* Until the peer's rate is known, the bytes per second due times are reckoned at. */
#define HINT_RATE_GUESS (100.0 * 1e6)

/* Whether this loader sends hints: on unless DSCACHE_HINTS=0 (decided once). Under lock. */
static int hints_on(dsc_loader_t *loader) {
    if (loader->fetch.hints == 0) {
        const char *v = getenv("DSCACHE_HINTS");
        loader->fetch.hints = v != NULL && strcmp(v, "0") == 0 ? -1 : 1;
        /* A per-loader id the server counts hinters by: not a secret, just distinct. */
        uint64_t x = dsc_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)loader;
        x ^= x >> 33;
        x *= 0xff51afd7ed558ccdull;
        x ^= x >> 33;
        loader->fetch.hinter = x ? x : 1;
        if (loader->fetch.hints < 0)
            DSC_LOG(&loader->cfg.log, DSC_LOG_DEBUG, "read-ahead hints off (DSCACHE_HINTS=0)");
    }
    return loader->fetch.hints > 0;
}

/* A HINT body of n ranges (0: it only names this connection's loader). Returns its length, or 0. */
static int hint_encode(dsc_loader_t *loader, const dsc_hint_range_t *ranges, uint32_t n,
                       uint8_t *out, size_t cap) {
    const char *dataset = loader->cfg.dataset;
    dsc_hint_req_t req = {.hinter = loader->fetch.hinter,
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
    if (loader->fetch.hint_t0 == 0)
        loader->fetch.hint_t0 = now;
    double elapsed = now - loader->fetch.hint_t0;
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
    /* Then what the horizon named beyond the queue (dsc__sched_horizon) for this peer, in plan
     * order, a range per chunk (take_request asks for each alone, so that every GET lies inside
     * one staged range however the queue merges later); the rest of fetch.hz stays. */
    if (peer->hz_pending > 0) {
        uint32_t keep = 0;
        for (uint32_t i = 0; i < loader->fetch.hz_count; i++) {
            dsc__hz_pending_t *h = &loader->fetch.hz[i];
            if (h->peer != io->peer) {
                loader->fetch.hz[keep++] = *h;
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
                loader->fetch.hz[keep++] = *h; /* the next HINT */
                continue;
            }
            peer->hz_pending--;
        }
        loader->fetch.hz_count = keep;
    }
    if (n == 0)
        return 0;
    return hint_encode(loader, ranges, n, out, cap);
}

/* ---- I/O threads --------------------------------------------------------------------------- */

/* The connection failed with err: close it, mark the peer down, move its work elsewhere. Under
 * lock. */
static void conn_failed(dsc_io_t *io, int err) {
    dsc_loader_t *loader = io->loader;
    dsc_peer_t *peer = &loader->net.peers[io->peer];
    /* Logged once when the peer goes down, not on every failed probe. */
    if (!loader->stop)
        DSC_LOG(&loader->cfg.log, peer->alive ? DSC_LOG_WARN : DSC_LOG_DEBUG,
                "server %s failed: %s (%s)", peer->addr, dsc_strerror(err), dsc_err_name(err));
    peer->source->close(io->conn);
    io->conn = NULL;
    if (peer->alive)
        peer->retry_at = dsc_now_s() + peer->backoff;
    peer->alive = 0;
    int rc = 0;
    for (uint32_t k = 0; k < io->out_count; k++) {
        dsc_source_req_t *req = &io->out[k];
        if (__atomic_load_n(&req->claim, __ATOMIC_ACQUIRE) == DSC_REQ_ABANDONED)
            continue; /* its chunks were re-issued elsewhere (hedge.c) */
        for (uint32_t i = 0; i < req->count; i++) {
            int r = dsc__chunk_requeue(loader, req->chunks[i], io->peer, err, 1);
            if (r < 0 && rc == 0)
                rc = r;
        }
    }
    io->out_count = 0;
    dsc_chunk_ent_t *ent;
    while ((ent = dsc__queue_pop(&peer->queue)) != NULL) {
        int r = dsc__chunk_requeue(loader, ent, io->peer, err, 0);
        if (r < 0 && rc == 0)
            rc = r;
    }
    if (rc < 0 && !loader->stop)
        dsc__loader_fail(loader, rc);
    pthread_cond_broadcast(&loader->io_cv);
}

/* Received chunks go to the decode queue; cancelled ones are freed. Under lock. */
static void deliver(dsc_io_t *io, dsc_source_req_t *req) {
    dsc_loader_t *loader = io->loader;
    loader->diag.c.chunks_fetched += req->count;
    for (uint32_t i = 0; i < req->count; i++) {
        dsc_chunk_ent_t *ent = req->chunks[i];
        loader->net.peers[io->peer].inflight_bytes -= ent->charged;
        if (ent->cancelled) {
            loader->fetch.inflight_used -= ent->charged;
            dsc__chunk_free(&loader->cfg.pool, ent);
            continue;
        }
        /* Variable-length fields: the planner's estimate gives way to the exact size (the
         * in-flight charge stays until decoded). */
        if (ent->raw_min && ent->entry.raw_len != ent->raw_len)
            dsc__chunk_resize(&loader->chunks, ent, ent->entry.raw_len);
        if (ent->hedge_req != 0)
            dsc__hedge_delivered(loader, ent);
        dsc__epoch_wire_add(loader, ent->epoch, ent->entry.stored_len);
        dsc__decode_push(loader, ent);
    }
    pthread_cond_broadcast(&loader->io_cv); /* the per-peer budget has room again */
}

/* A request failed at its source with an error no other peer can help with: its chunks go back
 * to the table and the loader fails. Under lock. */
static void request_failed(dsc_io_t *io, dsc_source_req_t *req, int err) {
    dsc_loader_t *loader = io->loader;
    for (uint32_t i = 0; i < req->count; i++) {
        dsc_chunk_ent_t *ent = req->chunks[i];
        loader->fetch.inflight_used -= ent->charged;
        loader->net.peers[io->peer].inflight_bytes -= ent->charged;
        dsc__bufpool_put(&loader->cfg.pool, ent->stored, ent->stored_cap);
        ent->stored = NULL;
        ent->stored_cap = 0;
        ent->state = CH_QUEUED; /* owned by the table again; freed with it */
        if (ent->cancelled)
            dsc__chunk_free(&loader->cfg.pool, ent);
    }
    dsc__loader_fail(loader, err);
}

/* Takes the next request off the peer's queue: one chunk, plus the following queued chunks of
 * the same shard when they are consecutive, or (dsc__fetch_scatters, on a connection with
 * scatter_max) the following queued chunks of any shards. Under lock. Returns 0 when nothing may
 * be sent. */
static int take_request(dsc_io_t *io, dsc_source_req_t *req) {
    dsc_loader_t *loader = io->loader;
    dsc_peer_t *peer = &loader->net.peers[io->peer];
    dsc_chunk_queue_t *q = &peer->queue;
    uint64_t budget = loader->cfg.opt.inflight_bytes;
    uint64_t peer_budget =
        peer->source->peer_bounded ? dsc__peer_inflight_limit(loader) : UINT64_MAX;
    if (q->head == NULL)
        return 0;
    /* A ranged entry (the reader's choice) goes as the whole chunk where RANGE is not offered. */
    int ranges =
        q->head->sel != NULL && peer->source->range_ok != NULL && peer->source->range_ok(io->conn);
    if (q->head->sel != NULL && !ranges)
        dsc__chunk_make_whole(&loader->chunks, loader->cfg.manifest, q->head);
    if (loader->fetch.inflight_used > 0 && loader->fetch.inflight_used + q->head->raw_len > budget)
        return 0;
    if (peer->inflight_bytes > 0 && peer->inflight_bytes + q->head->raw_len > peer_budget)
        return 0;
    req->count = 0;
    req->scattered = 0;
    req->ranged = ranges;
    uint32_t spans = 0; /* ranged: sample ranges in the request (DSC_RANGE_MAX_RANGES at most) */
    /* ranged: the whole chunks' decoded bytes, which the server decodes to answer (at most
     * RANGE_SERVER_BYTES a request, so that one RANGE does not hold its event loop long and
     * several go pipelined) */
    uint64_t decoded = 0;
    uint32_t scatter = dsc__fetch_scatters(loader) && peer->source->scatter_max != NULL
                           ? peer->source->scatter_max(io->conn)
                           : 0;
    if (scatter > DSC_SOURCE_MAX_CHUNKS)
        scatter = DSC_SOURCE_MAX_CHUNKS;
    uint64_t bytes = 0; /* merge cost: raw_len, or for variable fields the chunk's bound */
    const dsc_manifest_t *m = loader->cfg.manifest;
    do {
        dsc_chunk_ent_t *ent = dsc__queue_pop(q);
        ent->state = CH_INFLIGHT;
        ent->charged = ent->raw_len;
        loader->fetch.inflight_used += ent->charged;
        peer->inflight_bytes += ent->charged;
        bytes += ent->raw_min && !ranges ? dsc__chunk_raw_bound(m, ent->shard) : ent->raw_len;
        req->chunks[req->count++] = ent;
        spans += ent->sel_spans;
        if (ranges)
            decoded += dsc__chunk_raw_estimate(m, ent->whole_samples);
        dsc_chunk_ent_t *next = q->head;
        if (next != NULL && (next->sel != NULL) != ranges)
            break; /* ranged entries go together, apart from whole chunks */
        if (ranges) {
            if (next == NULL || req->count >= DSC_SOURCE_MAX_CHUNKS ||
                spans + next->sel_spans > DSC_RANGE_MAX_RANGES ||
                bytes + next->raw_len > DSC_SOURCE_MERGE_MAX_BYTES ||
                decoded + dsc__chunk_raw_estimate(m, next->whole_samples) > RANGE_SERVER_BYTES ||
                loader->fetch.inflight_used + next->raw_len > budget ||
                peer->inflight_bytes + next->raw_len > peer_budget)
                break;
            continue;
        }
        if (next == NULL || ent->hz || next->hz ||
            bytes + (next->raw_min ? dsc__chunk_raw_bound(m, next->shard) : next->raw_len) >
                DSC_SOURCE_MERGE_MAX_BYTES ||
            loader->fetch.inflight_used + next->raw_len > budget ||
            peer->inflight_bytes + next->raw_len > peer_budget)
            break;
        int run = !req->scattered && next->shard == ent->shard &&
                  next->shard_chunk == ent->shard_chunk + 1 && req->count < DSC_SOURCE_MAX_MERGE;
        if (!run) {
            uint64_t cost = next->raw_min ? dsc__chunk_raw_bound(m, next->shard) : next->raw_len;
            if (req->count >= scatter || cost > DSC_SOURCE_SCATTER_CHUNK_BYTES ||
                bytes + cost > DSC_SOURCE_SCATTER_MAX_BYTES)
                break;
            req->scattered = 1;
        }
    } while (1);
    req->id = io->next_id++;
    req->answer_at = 0;
    req->sent_at = dsc_now_s();
    req->claim = DSC_REQ_SENT; /* no other thread sees it before it is counted in out_count */
    req->hedge_left = 0;
    req->hedge_bytes = 0;
    loader->stats.st.requests++;
    return 1;
}

static void timed_wait(dsc_loader_t *loader, double seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (!(seconds > 0))
        seconds = 0;
    uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)(seconds * 1e9);
    ts.tv_sec += (time_t)(ns / 1000000000u);
    ts.tv_nsec = (long)(ns % 1000000000u);
    pthread_cond_timedwait(&loader->io_cv, &loader->lock, &ts);
}

/* Opens the connection when work is queued, or probes a failed member once its back-off has
 * passed (one thread at a time; its queue is empty: work went elsewhere). Under lock (released
 * while connecting). Returns 0 to go on, -1 when the loader stops. */
static int connect_peer(dsc_io_t *io) {
    dsc_loader_t *loader = io->loader;
    dsc_peer_t *peer = &loader->net.peers[io->peer];
    double now = dsc_now_s();
    int connect_now = peer->alive ? peer->queue.head != NULL
                                  : peer->member && !peer->probing && now >= peer->retry_at;
    if (!connect_now) {
        if (!peer->alive && peer->member && !peer->probing)
            timed_wait(loader, peer->retry_at - now);
        else
            pthread_cond_wait(&loader->io_cv, &loader->lock);
        return 0;
    }
    int probe = !peer->alive;
    if (probe)
        peer->probing = 1;
    uint64_t members_hash = loader->net.view_hash;
    pthread_mutex_unlock(&loader->lock);
    void *conn = NULL;
    uint64_t hello = 0;
    int rc = peer->source->open(peer->endpoint, members_hash, &conn, &hello);
    pthread_mutex_lock(&loader->lock);
    if (probe)
        peer->probing = 0;
    if (rc < 0) {
        io->conn = NULL;
        conn_failed(io, rc);
        /* Spread by +-25% (the clock's microseconds), so that the ranks of a large job do not
         * probe a restarting server all at the same instants. */
        double t = dsc_now_s();
        double jitter = 0.75 + 0.5 * (double)((uint64_t)(t * 1e6) % 1000) / 1000.0;
        peer->retry_at = t + peer->backoff * jitter;
        peer->backoff = peer->backoff * 2 < BACKOFF_MAX_S ? peer->backoff * 2 : BACKOFF_MAX_S;
        return 0;
    }
    if (loader->stop) {
        peer->source->close(conn);
        return -1;
    }
    io->conn = conn;
    io->hint_named = 0;
    io->named = 0;
    if (!peer->alive) {
        DSC_LOG(&loader->cfg.log, DSC_LOG_INFO, "server %s is back", peer->addr);
        pthread_cond_broadcast(&loader->io_cv);
    }
    peer->alive = 1;
    peer->backoff = DSC__BACKOFF_FIRST_S;
    dsc__peer_hello(loader, io->peer, hello);
    return 0;
}

static void io_loop(dsc_io_t *io) {
    dsc_loader_t *loader = io->loader;
    dsc_peer_t *peer = &loader->net.peers[io->peer];
    const dsc_source_ops_t *src = peer->source;
    uint32_t max_out =
        src->max_outstanding < IO_MAX_OUTSTANDING ? src->max_outstanding : IO_MAX_OUTSTANDING;
    while (!loader->stop) {
        if (loader->error) {
            pthread_cond_wait(&loader->io_cv, &loader->lock);
            continue;
        }
        if (io->conn != NULL && !peer->member && io->out_count == 0 && peer->queue.head == NULL &&
            io->peer != DSC__PEER_FALLBACK) {
            /* Left the view: nothing is routed here any more. */
            src->close(io->conn);
            io->conn = NULL;
        }
        if (io->conn == NULL) {
            if (connect_peer(io) < 0)
                break;
            continue; /* re-check the queue: the hello may have taken a while */
        }
        /* A connection left idle (a trainer evaluating, say) may have been closed by the
         * server's idle time-out: reopened at once, the peer not counted as failed. */
        double now = dsc_now_s();
        /* The job's REPORT goes out from whichever of the peer's I/O threads is connected when
         * it is due, so that it never waits on one thread that the work happened to skip. */
        int reports = src->report != NULL && loader->cfg.opt.report_seconds >= 0;
        int report_due = reports && (now >= peer->report_due || !io->named);
        if (io->out_count == 0 && (peer->queue.head != NULL || report_due) && src->idle_closed &&
            src->idle_closed(io->conn)) {
            DSC_LOG(&loader->cfg.log, DSC_LOG_DEBUG,
                    "server %s closed the idle connection: reconnecting", peer->addr);
            src->close(io->conn);
            io->conn = NULL;
            continue;
        }
        /* Now and then, the job's stall and rate to the server (the peer's first I/O thread). */
        int rc = 0;
        if (report_due) {
            uint8_t body[DSC_REPORT_MAX_BODY];
            int len = dsc__diag_report_body(loader, io->peer, now, body, sizeof body);
            peer->report_due =
                now + (loader->cfg.opt.report_seconds > 0 ? loader->cfg.opt.report_seconds
                                                          : DSC_DIAG_REPORT_S);
            uint64_t id = DSC_SOURCE_REPORT_ID | peer->report_seq++;
            io->named = 1;
            void *conn = io->conn;
            pthread_mutex_unlock(&loader->lock);
            if (len > 0)
                rc = src->report(conn, id, body, (size_t)len);
            pthread_mutex_lock(&loader->lock);
            if (rc < 0)
                conn_failed(io, rc);
            continue; /* the lock was released: re-check stop, the view and the queue */
        }
        /* Now and then, what is queued for this server and not yet announced (HINT): it reads
         * the chunks it does not hold ahead of the GETs. Advisory: a server without read-ahead
         * answers UNSUPPORTED and is not told again. */
        int hint_now = now >= peer->hint_due && (peer->queue.head != NULL || peer->hz_pending > 0);
        /* The horizon (the chunks of the next seconds of demand, beyond the queue) is walked at
         * most every HINT_INTERVAL_S for all peers, by whichever I/O thread is about to hint. */
        if (hint_now && src->hint != NULL && !peer->hints_off && now >= loader->fetch.hz_due &&
            hints_on(loader)) {
            loader->fetch.hz_due = now + HINT_INTERVAL_S;
            dsc__sched_horizon(loader, now);
        }
        if (src->hint != NULL && !peer->hints_off && (hint_now || !io->hint_named) &&
            hints_on(loader)) {
            static _Thread_local uint8_t hbody[DSC_HINT_MAX_BODY];
            int len = 0;
            if (hint_now) {
                peer->hint_due = now + HINT_INTERVAL_S;
                len = hint_body(io, now, hbody, sizeof hbody);
            }
            /* Each connection says once whose GETs it carries, so that the server serves a
             * staged range once per loader that announced it. */
            if (len == 0 && !io->hint_named)
                len = hint_encode(loader, NULL, 0, hbody, sizeof hbody);
            if (len > 0) {
                io->hint_named = 1;
                uint64_t id = DSC_SOURCE_REPORT_ID | peer->report_seq++;
                void *conn = io->conn;
                pthread_mutex_unlock(&loader->lock);
                rc = src->hint(conn, id, hbody, (size_t)len);
                pthread_mutex_lock(&loader->lock);
                if (rc < 0)
                    conn_failed(io, rc);
                continue;
            }
        }
        /* Submit what the budgets allow. */
        while (rc == 0 && io->out_count < max_out && !loader->stop) {
            dsc_source_req_t *req = &io->out[io->out_count];
            if (!take_request(io, req))
                break;
            io->out_count++;
            void *conn = io->conn;
            pthread_mutex_unlock(&loader->lock);
            rc = src->submit(conn, req);
            pthread_mutex_lock(&loader->lock);
        }
        if (rc < 0) {
            conn_failed(io, rc);
            continue;
        }
        if (io->out_count == 0) {
            /* Idle but connected: the job keeps reporting while the trainer computes. */
            if (reports)
                timed_wait(loader, peer->report_due - now);
            else
                pthread_cond_wait(&loader->io_cv, &loader->lock);
            continue;
        }
        pthread_mutex_unlock(&loader->lock);
        int conn_bad = 0;
        uint32_t index = 0;
        uint64_t wire = 0;
        double t0 = dsc_now_s();
        rc = src->complete(io->conn, io->out, io->out_count, &index, &conn_bad, &wire);
        double t1 = dsc_now_s();
        pthread_mutex_lock(&loader->lock);
        loader->stats.st.network_seconds += t1 - t0;
        loader->stats.st.wire_bytes += wire;
        /* Per peer, for the verdict (diag.c): time per byte, and the share spent before answers
         * start (latency) rather than streaming (bandwidth). */
        dsc_verdict_server_t *vs = &loader->diag.servers[io->peer];
        double answer_at = rc < 0 && conn_bad ? 0 : io->out[index].answer_at;
        vs->recv_seconds += t1 - t0;
        vs->wait_seconds += answer_at > t0 ? answer_at - t0 : 0;
        vs->bytes += wire;
        dsc_report_resp_t ra;
        if (src->report_answer != NULL && io->conn != NULL && src->report_answer(io->conn, &ra)) {
            vs->have_backing = 1;
            vs->backing_at = t1;
            vs->srv_hits = ra.hits;
            vs->srv_misses = ra.misses;
            vs->backing_bytes = ra.backing_bytes;
            vs->backing_busy_s = (double)ra.backing_busy_us / 1e6;
            vs->backing_wait_s = (double)ra.backing_wait_us / 1e6;
            vs->backing_rate = ra.backing_rate;
            vs->store_capacity = ra.store_capacity;
            vs->backing_pool = ra.backing_pool;
            vs->backing_latency_us = ra.backing_latency_us;
        }
        if (src->hint_refused != NULL && io->conn != NULL && src->hint_refused(io->conn) &&
            !peer->hints_off) {
            peer->hints_off = 1;
            DSC_LOG(&loader->cfg.log, DSC_LOG_INFO,
                    "server %s has no read-ahead (HINT answered UNSUPPORTED): not sending it hints",
                    peer->addr);
        }
        if (rc < 0 && conn_bad) {
            conn_failed(io, rc);
            continue;
        }
        vs->responses++;
        dsc_source_req_t done = io->out[index]; /* swap-remove: the array is unordered */
        io->out[index] = io->out[--io->out_count];
        if (__atomic_load_n(&done.claim, __ATOMIC_ACQUIRE) == DSC_REQ_ABANDONED) {
            /* The late answer to a request re-issued elsewhere (hedge.c): dropped. */
            dsc__hedge_late(loader, io->peer, &done, wire);
            continue;
        }
        dsc__hedge_answered(loader, io->peer, &done, t1);
        if (rc == DSC_EUNAVAIL || rc == DSC_ECORRUPT || rc == DSC_ECHANGED) {
            /* Busy or not loaded there, or its copy is damaged, or it serves another version of
             * the dataset (a member not yet, or no longer, on the manifest this loader read):
             * try another replica (a corrupt chunk then the fallback files), never the same peer
             * again for these chunks. */
            for (uint32_t i = 0; i < done.count; i++) {
                int r = dsc__chunk_requeue(loader, done.chunks[i], io->peer, rc, 1);
                if (r == DSC_ECHANGED) {
                    /* No replica serves the version this loader read: say which dataset and
                     * which server, so that a job that dies of it names both. */
                    char text[DSC_MAX_NAME + DSC_MEMBER_MAX + 256];
                    snprintf(text, sizeof text,
                             "dataset '%s' changed on server %s since this loader opened it (a "
                             "new version replaced it there: %s); open a new loader to read it",
                             loader->cfg.dataset, loader->net.peers[io->peer].addr,
                             dsc_err_name(r));
                    dsc__loader_fail_with(loader, r, text);
                } else if (r < 0) {
                    dsc__loader_fail(loader, r);
                }
            }
            pthread_cond_broadcast(&loader->io_cv);
        } else if (rc < 0) {
            request_failed(io, &done, rc);
        } else {
            deliver(io, &done);
        }
    }
    /* Outstanding entries cancelled by a restart belong to this thread. */
    for (uint32_t k = 0; k < io->out_count; k++)
        for (uint32_t i = 0;
             __atomic_load_n(&io->out[k].claim, __ATOMIC_ACQUIRE) != DSC_REQ_ABANDONED &&
             i < io->out[k].count;
             i++)
            if (io->out[k].chunks[i]->cancelled)
                dsc__chunk_free(&loader->cfg.pool, io->out[k].chunks[i]);
    io->out_count = 0;
}

static void *io_main(void *arg) {
    dsc_io_t *io = arg;
    dsc__loader_thread_start();
    dsc_loader_t *loader = io->loader;
    pthread_mutex_lock(&loader->lock);
    io_loop(io);
    pthread_mutex_unlock(&loader->lock);
    return NULL;
}

int dsc__peer_start(dsc_loader_t *loader, uint32_t p) {
    dsc_peer_t *peer = &loader->net.peers[p];
    for (uint32_t i = 0; i < loader->cfg.opt.connections; i++) {
        dsc_io_t *io = &peer->io[i];
        if (io->started)
            continue;
        io->loader = loader;
        io->peer = p;
        io->next_id = 1;
        if (pthread_create(&io->thread, NULL, io_main, io) != 0)
            return DSC_ENOMEM;
        io->started = 1;
        peer->io_count++;
    }
    return 0;
}
