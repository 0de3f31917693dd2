/* Loader fetch policy: the I/O threads. Each owns one connection to its peer's data source and
 * pipelines requests on it within the loader-wide and per-peer in-flight budgets; failures move
 * chunks to other peers (route.c) and failed peers are probed with back-off. How the bytes arrive
 * is the source's business (source.h). Also the manifest fetch. */
#include "fetch.h"
#include "decode.h"
#include "diag.h"
#include "hedge.h"
#include "hint.h"
#include "hints.h"
#include "range.h"
#include "report.h"
#include "route.h"
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

/* Keeps io connected for this tick: closes the connection once the peer left the view with nothing
 * left for it, and opens one (or probes the failed peer) when there is none. Under lock
 * (released while connecting). Returns 1 when connected, 0 to start the tick again (the hello
 * may have taken a while: re-check the queue), -1 when the loader stops. */
static int connection_ready(dsc_io_t *io) {
    dsc_peer_t *peer = &io->loader->net.peers[io->peer];
    if (io->conn != NULL && !peer->member && io->out_count == 0 && peer->queue.head == NULL &&
        io->peer != DSC__PEER_FALLBACK) {
        /* Left the view: nothing is routed here any more. */
        peer->source->close(io->conn);
        io->conn = NULL;
    }
    if (io->conn != NULL)
        return 1;
    return connect_peer(io) < 0 ? -1 : 0;
}

/* A connection left idle (a trainer evaluating, say) may have been closed by the server's idle
 * time-out: before work goes out on it, it is closed here to be reopened at once, the peer not
 * counted as failed. Under lock. Returns 1 when closed. */
static int closed_while_idle(dsc_io_t *io, int report_due) {
    dsc_loader_t *loader = io->loader;
    dsc_peer_t *peer = &loader->net.peers[io->peer];
    const dsc_source_ops_t *src = peer->source;
    if (io->out_count != 0 || (peer->queue.head == NULL && !report_due) ||
        src->idle_closed == NULL || !src->idle_closed(io->conn))
        return 0;
    DSC_LOG(&loader->cfg.log, DSC_LOG_DEBUG, "server %s closed the idle connection: reconnecting",
            peer->addr);
    src->close(io->conn);
    io->conn = NULL;
    return 1;
}

/* Sends a REPORT or HINT body of len bytes (0: nothing, the id is used all the same) on io's
 * connection with send (the source's report or hint op), under the peer's next aside id, without
 * the lock. Under lock (released while sending: the caller re-checks stop, the view and the
 * queue); a failed send fails the connection. */
static void send_aside(dsc_io_t *io, int (*send)(void *, uint64_t, const uint8_t *, size_t),
                       const uint8_t *body, int len) {
    dsc_loader_t *loader = io->loader;
    uint64_t id = DSC_SOURCE_REPORT_ID | loader->net.peers[io->peer].report_seq++;
    void *conn = io->conn;
    int rc = 0;
    pthread_mutex_unlock(&loader->lock);
    if (len > 0)
        rc = send(conn, id, body, (size_t)len);
    pthread_mutex_lock(&loader->lock);
    if (rc < 0)
        conn_failed(io, rc);
}

/* The job's stall and rate to the server, now and then (REPORT). Under lock (released while
 * sending). */
static void send_report(dsc_io_t *io, double now) {
    dsc_loader_t *loader = io->loader;
    dsc_peer_t *peer = &loader->net.peers[io->peer];
    uint8_t body[DSC_REPORT_MAX_BODY];
    int len = dsc__diag_report_body(loader, io->peer, now, body, sizeof body);
    peer->report_due = now + (loader->cfg.opt.report_seconds > 0 ? loader->cfg.opt.report_seconds
                                                                 : DSC_DIAG_REPORT_S);
    io->named = 1;
    send_aside(io, peer->source->report, body, len);
}

/* Submits what the budgets allow, up to max_out outstanding. Under lock (released while
 * submitting). Returns 0 or the source's error (the connection failed). */
static int submit_requests(dsc_io_t *io, uint32_t max_out) {
    dsc_loader_t *loader = io->loader;
    const dsc_source_ops_t *src = loader->net.peers[io->peer].source;
    int rc = 0;
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
    return rc;
}

/* An answer took t0 .. t1 and wire bytes: the loader's statistics, and per peer, for the verdict
 * (diag.c), time per byte and the share spent before answers start (latency) rather than
 * streaming (bandwidth), and what the server's REPORT answer says of its backing store. Under
 * lock. */
static void count_answer(dsc_io_t *io, double answer_at, uint64_t wire, double t0, double t1) {
    dsc_loader_t *loader = io->loader;
    const dsc_source_ops_t *src = loader->net.peers[io->peer].source;
    loader->stats.st.network_seconds += t1 - t0;
    loader->stats.st.wire_bytes += wire;
    dsc_verdict_server_t *vs = &loader->diag.servers[io->peer];
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
}

/* The request came back with rc: delivered, its chunks tried elsewhere, or the loader failed.
 * Under lock. */
static void settle(dsc_io_t *io, dsc_source_req_t *done, int rc) {
    dsc_loader_t *loader = io->loader;
    if (rc == DSC_EUNAVAIL || rc == DSC_ECORRUPT || rc == DSC_ECHANGED) {
        /* Busy or not loaded there, or its copy is damaged, or it serves another version of
         * the dataset (a member not yet, or no longer, on the manifest this loader read):
         * try another replica (a corrupt chunk then the fallback files), never the same peer
         * again for these chunks. */
        for (uint32_t i = 0; i < done->count; i++) {
            int r = dsc__chunk_requeue(loader, done->chunks[i], io->peer, rc, 1);
            if (r == DSC_ECHANGED) {
                /* No replica serves the version this loader read: say which dataset and
                 * which server, so that a job that dies of it names both. */
                char text[DSC_MAX_NAME + DSC_MEMBER_MAX + 256];
                snprintf(text, sizeof text,
                         "dataset '%s' changed on server %s since this loader opened it (a "
                         "new version replaced it there: %s); open a new loader to read it",
                         loader->cfg.dataset, loader->net.peers[io->peer].addr, dsc_err_name(r));
                dsc__loader_fail_with(loader, r, text);
            } else if (r < 0) {
                dsc__loader_fail(loader, r);
            }
        }
        pthread_cond_broadcast(&loader->io_cv);
    } else if (rc < 0) {
        request_failed(io, done, rc);
    } else {
        deliver(io, done);
    }
}

/* Waits for the next answer on io's connection (without the lock) and settles it. Under lock
 * (released while waiting). */
static void receive(dsc_io_t *io) {
    dsc_loader_t *loader = io->loader;
    const dsc_source_ops_t *src = loader->net.peers[io->peer].source;
    pthread_mutex_unlock(&loader->lock);
    int conn_bad = 0;
    uint32_t index = 0;
    uint64_t wire = 0;
    double t0 = dsc_now_s();
    int rc = src->complete(io->conn, io->out, io->out_count, &index, &conn_bad, &wire);
    double t1 = dsc_now_s();
    pthread_mutex_lock(&loader->lock);
    count_answer(io, rc < 0 && conn_bad ? 0 : io->out[index].answer_at, wire, t0, t1);
    dsc__hints_answered(io);
    if (rc < 0 && conn_bad) {
        conn_failed(io, rc);
        return;
    }
    loader->diag.servers[io->peer].responses++;
    dsc_source_req_t done = io->out[index]; /* swap-remove: the array is unordered */
    io->out[index] = io->out[--io->out_count];
    if (__atomic_load_n(&done.claim, __ATOMIC_ACQUIRE) == DSC_REQ_ABANDONED) {
        /* The late answer to a request re-issued elsewhere (hedge.c): dropped. */
        dsc__hedge_late(loader, io->peer, &done, wire);
        return;
    }
    dsc__hedge_answered(loader, io->peer, &done, t1);
    settle(io, &done, rc);
}

/* The thread's outstanding entries cancelled by a restart are its to free. Under lock. */
static void drop_outstanding(dsc_io_t *io) {
    for (uint32_t k = 0; k < io->out_count; k++)
        for (uint32_t i = 0;
             __atomic_load_n(&io->out[k].claim, __ATOMIC_ACQUIRE) != DSC_REQ_ABANDONED &&
             i < io->out[k].count;
             i++)
            if (io->out[k].chunks[i]->cancelled)
                dsc__chunk_free(&io->loader->cfg.pool, io->out[k].chunks[i]);
    io->out_count = 0;
}

/* One I/O thread, per tick: keep connected, send what is due aside (the job's REPORT, then a
 * HINT: hints.c), submit within the budgets, then wait for one answer (or, idle, for work).
 * Under lock, released for all I/O. */
static void io_loop(dsc_io_t *io) {
    dsc_loader_t *loader = io->loader;
    dsc_peer_t *peer = &loader->net.peers[io->peer];
    const dsc_source_ops_t *src = peer->source;
    uint32_t max_out =
        src->max_outstanding < IO_MAX_OUTSTANDING ? src->max_outstanding : IO_MAX_OUTSTANDING;
    static _Thread_local uint8_t hint_body[DSC_HINT_MAX_BODY];
    while (!loader->stop) {
        if (loader->error) {
            pthread_cond_wait(&loader->io_cv, &loader->lock);
            continue;
        }
        int ready = connection_ready(io);
        if (ready < 0)
            break;
        if (ready == 0)
            continue;
        double now = dsc_now_s();
        /* The job's REPORT goes out from whichever of the peer's I/O threads is connected when
         * it is due, so that it never waits on one thread that the work happened to skip. */
        int reports = src->report != NULL && loader->cfg.opt.report_seconds >= 0;
        int report_due = reports && (now >= peer->report_due || !io->named);
        if (closed_while_idle(io, report_due))
            continue;
        if (report_due) {
            send_report(io, now);
            continue; /* the lock was released: re-check stop, the view and the queue */
        }
        int hint_len = dsc__hints_tick(io, now, hint_body, sizeof hint_body);
        if (hint_len > 0) {
            send_aside(io, src->hint, hint_body, hint_len);
            continue;
        }
        int rc = submit_requests(io, max_out);
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
        receive(io);
    }
    drop_outstanding(io);
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
