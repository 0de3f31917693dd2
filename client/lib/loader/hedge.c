/* Loader stragglers: the thread that watches every server's outstanding requests, tells a stopped
 * server (no answer, no PING answer) from a busy one (reading through its misses: PING answered),
 * marks the stopped one slow, moves its queued chunks and re-issues its outstanding requests to
 * other owners within a byte budget, and probes it back. */
#include "hedge.h"
#include "route.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How often the outstanding requests are looked at. */
#define HEDGE_TICK_S 0.005
/* A server is suspected once none of its outstanding requests got an answer for
 * max(floor, HEDGE_K x the 95th percentile of its recent answer times). */
#define HEDGE_FLOOR_S 0.1
#define HEDGE_K 4.0
/* Hedged bytes at most this share of the bytes received (plus one request). */
#define HEDGE_BUDGET 0.05
/* A slow server is probed (PING) this often. */
#define HEDGE_PROBE_S 0.05

void dsc__hedge_init(dsc_loader_t *loader) {
    loader->hedge.on = 1;
    loader->hedge.floor_s = HEDGE_FLOOR_S;
    loader->hedge.budget = HEDGE_BUDGET;
    const char *v = getenv("DSCACHE_HEDGE");
    if (v != NULL && strcmp(v, "0") == 0) {
        loader->hedge.on = 0;
        DSC_LOG(&loader->cfg.log, DSC_LOG_INFO,
                "hedged reads and slow-server marking off (DSCACHE_HEDGE=0): a stalled server "
                "holds its chunks until timeout_ms");
    }
    v = getenv("DSCACHE_HEDGE_MS");
    if (v != NULL) {
        char *end;
        double ms = strtod(v, &end);
        if (end != v && *end == '\0' && ms >= 1 && ms <= 60000)
            loader->hedge.floor_s = ms / 1e3;
        else
            DSC_LOG(&loader->cfg.log, DSC_LOG_WARN,
                    "DSCACHE_HEDGE_MS=%s is not 1..60000 (milliseconds): using %.0f", v,
                    HEDGE_FLOOR_S * 1e3);
    }
    v = getenv("DSCACHE_HEDGE_BUDGET");
    if (v != NULL) {
        char *end;
        double b = strtod(v, &end);
        if (end != v && *end == '\0' && b >= 0 && b <= 1)
            loader->hedge.budget = b;
        else
            DSC_LOG(&loader->cfg.log, DSC_LOG_WARN,
                    "DSCACHE_HEDGE_BUDGET=%s is not 0..1 (a share of the bytes received): "
                    "using %.2f",
                    v, HEDGE_BUDGET);
    }
}

static int by_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* The stall after which peer p is suspected, seconds: max(floor, K x p95 of its answer times),
 * at most half of timeout_ms (which fails the request anyway). */
static double threshold(const dsc_loader_t *loader, const dsc_hedge_peer_t *h) {
    double t = loader->hedge.floor_s;
    if (h->lat_count >= 8) {
        float sorted[DSC__HEDGE_LAT];
        uint32_t n = h->lat_count;
        memcpy(sorted, h->lat_ms, n * sizeof sorted[0]);
        qsort(sorted, n, sizeof sorted[0], by_float);
        double p95 = sorted[(n * 95) / 100 < n ? (n * 95) / 100 : n - 1] / 1e3;
        if (HEDGE_K * p95 > t)
            t = HEDGE_K * p95;
    }
    double cap = loader->cfg.opt.timeout_ms / 2e3;
    return cap > loader->hedge.floor_s && t > cap ? cap : t;
}

/* Requests outstanding on peer p that may still be answered (not abandoned), and the oldest's
 * submit time. */
static uint32_t outstanding(const dsc_loader_t *loader, uint32_t p, double *oldest) {
    const dsc_peer_t *peer = &loader->net.peers[p];
    uint32_t n = 0;
    *oldest = 0;
    for (uint32_t i = 0; peer->io != NULL && i < peer->io_count; i++) {
        const dsc_io_t *io = &peer->io[i];
        for (uint32_t k = 0; k < io->out_count; k++) {
            uint32_t c = __atomic_load_n(&io->out[k].claim, __ATOMIC_ACQUIRE);
            if (c == DSC_REQ_ABANDONED)
                continue;
            if (n == 0 || io->out[k].sent_at < *oldest)
                *oldest = io->out[k].sent_at;
            n++;
        }
    }
    return n;
}

/* PINGs peer p on the watch connection (opened when closed), giving it timeout_s to answer.
 * Under lock (released for the I/O). Returns 1 when it answered in time (*rtt_ms), else 0. */
static int ping(dsc_loader_t *loader, uint32_t p, double timeout_s, double *rtt_ms) {
    dsc_peer_t *peer = &loader->net.peers[p];
    dsc_conn_t *conn = peer->hedge.watch;
    peer->hedge.watch = NULL;
    char addr[DSC_MEMBER_MAX];
    snprintf(addr, sizeof addr, "%s", peer->addr);
    uint64_t view_hash = loader->net.view_hash;
    uint32_t ms = (uint32_t)(timeout_s * 1e3) + 1;
    double t0 = dsc_now_s();
    int ok = 0;
    for (int attempt = 0; attempt < 2 && !ok && !loader->stop; attempt++) {
        double left = timeout_s - (dsc_now_s() - t0);
        if (left <= 0)
            break;
        uint32_t left_ms = (uint32_t)(left * 1e3) + 1;
        pthread_mutex_unlock(&loader->lock);
        int rc = 0;
        if (conn == NULL)
            rc = dsc_conn_open_addr_auth(addr, left_ms, view_hash, loader->cfg.cred, &conn);
        pthread_mutex_lock(&loader->lock);
        if (rc < 0) {
            conn = NULL;
            break;
        }
        loader->hedge.conn = conn;
        dsc_conn_set_timeout(conn, left_ms < ms ? left_ms : ms);
        pthread_mutex_unlock(&loader->lock);
        uint8_t *body = NULL;
        size_t len = 0;
        rc = dsc_conn_call(conn, DSC_OP_PING, "p", 1, &body, &len);
        free(body);
        pthread_mutex_lock(&loader->lock);
        loader->hedge.conn = NULL;
        double took = dsc_now_s() - t0;
        if (rc == 0 && took <= timeout_s) {
            ok = 1;
            *rtt_ms = took * 1e3;
            break;
        }
        /* An answer too late, a time-out, or a connection the server's idle time-out closed
         * (then one fresh try within what is left of the time). */
        dsc_conn_close(conn);
        conn = NULL;
        if (rc == DSC_ETIMEDOUT || rc == 0)
            break;
    }
    peer->hedge.watch = conn;
    return ok;
}

/* Queues ents[0..n) (in plan order) at the heads of the queues route.c picks for them now (peer
 * p, slow, is not picked while another source is live), keeping their order. */
static uint64_t requeue_front(dsc_loader_t *loader, uint32_t p, dsc_chunk_ent_t **ents,
                              uint32_t n) {
    uint64_t moved = 0;
    for (uint32_t k = n; k-- > 0;) {
        dsc_chunk_ent_t *ent = ents[k];
        int q = dsc__route_chunk(loader, ent);
        if (q < 0)
            q = (int)p; /* nowhere else: it waits for p */
        ent->peer = (uint32_t)q;
        ent->state = CH_QUEUED;
        dsc__queue_push_front(&loader->net.peers[q].queue, ent);
        moved += (uint32_t)q != p;
    }
    return moved;
}

/* Re-issues peer p's outstanding requests that no answer has started for to other owners, as
 * far as the budget allows. Under lock. */
static void abandon_outstanding(dsc_loader_t *loader, uint32_t p) {
    dsc_peer_t *peer = &loader->net.peers[p];
    for (uint32_t i = 0; peer->io != NULL && i < peer->io_count; i++) {
        dsc_io_t *io = &peer->io[i];
        /* A connection whose requests cannot be abandoned (RDMA READs) is waited for; only new
         * work avoids its server. */
        if (io->conn == NULL || peer->source->abandon_ok == NULL ||
            !peer->source->abandon_ok(io->conn))
            continue;
        for (uint32_t k = 0; k < io->out_count; k++) {
            dsc_source_req_t *req = &io->out[k];
            if (__atomic_load_n(&req->claim, __ATOMIC_ACQUIRE) != DSC_REQ_SENT)
                continue;
            uint64_t bytes = 0;
            for (uint32_t c = 0; c < req->count; c++)
                bytes += req->chunks[c]->raw_len;
            double allowed = loader->hedge.budget * (double)loader->stats.st.wire_bytes +
                             (double)DSC_SOURCE_MERGE_MAX_BYTES;
            if ((double)(loader->hedge.bytes + bytes) > allowed) {
                loader->stats.st.hedges_denied++;
                continue;
            }
            uint32_t want = DSC_REQ_SENT;
            if (!__atomic_compare_exchange_n(&req->claim, &want, DSC_REQ_ABANDONED, 0,
                                             __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
                continue;                                 /* its answer is arriving: it wins */
            dsc_chunk_ent_t *ents[DSC_SOURCE_MAX_CHUNKS]; /* scattered and ranged: up to 64 */
            uint32_t n = 0;
            for (uint32_t c = 0; c < req->count; c++) {
                dsc_chunk_ent_t *ent = req->chunks[c];
                req->chunks[c] = NULL; /* no longer this request's */
                loader->fetch.inflight_used -= ent->charged;
                peer->inflight_bytes -= ent->charged;
                ent->charged = 0;
                if (ent->cancelled) { /* dropped by a restart: the I/O thread would free it */
                    dsc__chunk_free(&loader->cfg.pool, ent);
                    continue;
                }
                ent->hedge_req = req->id;
                ent->hedge_peer = p;
                ent->hedge_io = i;
                ents[n++] = ent;
            }
            req->hedge_left = (uint32_t)requeue_front(loader, p, ents, n);
            req->hedge_bytes = bytes;
            loader->hedge.bytes += bytes;
            peer->hedge.hedges++;
            peer->hedge.hedge_bytes += bytes;
            loader->stats.st.hedges++;
            loader->stats.st.hedge_bytes += bytes;
        }
    }
}

/* Peer p stalled for `stalled` seconds (threshold t) and did not answer a PING: marked slow, its
 * queued chunks and outstanding requests go to other owners. Under lock. */
static void mark_slow(dsc_loader_t *loader, uint32_t p, double now, double stalled, double t) {
    dsc_peer_t *peer = &loader->net.peers[p];
    peer->hedge.slow = 1;
    peer->hedge.slow_since = now;
    peer->hedge.check_at = now + HEDGE_PROBE_S;
    peer->hedge.slow_marks++;
    loader->stats.st.slow_marks++;
    uint64_t hedges = peer->hedge.hedges, queued = peer->queue.count;
    uint64_t denied = loader->stats.st.hedges_denied;
    /* Queued chunks move first (in plan order, at the other owners' heads), then the requests
     * in flight (re-issued, at the heads before them: they are older). */
    dsc_chunk_ent_t **ents = queued > 0 ? malloc(queued * sizeof *ents) : NULL;
    uint64_t moved = 0;
    if (ents != NULL) {
        uint32_t n = 0;
        dsc_chunk_ent_t *ent;
        while ((ent = dsc__queue_pop(&peer->queue)) != NULL)
            ents[n++] = ent;
        for (uint32_t k = n; k-- > 0;) {
            int q = dsc__route_chunk(loader, ents[k]);
            if (q < 0)
                q = (int)p;
            ents[k]->peer = (uint32_t)q;
            dsc__queue_push_front(&loader->net.peers[q].queue, ents[k]);
            moved += (uint32_t)q != p;
        }
        free(ents);
    }
    abandon_outstanding(loader, p);
    DSC_LOG(&loader->cfg.log, DSC_LOG_WARN,
            "server %s answered none of its requests for %.0f ms (threshold %.0f ms) nor a PING: "
            "marked slow; %llu queued chunks moved and %llu requests re-issued to other owners "
            "(%llu left waiting: hedge budget), no new work until it answers again",
            peer->addr, stalled * 1e3, t * 1e3, (unsigned long long)moved,
            (unsigned long long)(peer->hedge.hedges - hedges),
            (unsigned long long)(loader->stats.st.hedges_denied - denied));
    pthread_cond_broadcast(&loader->io_cv);
}

/* One look at every server. Under lock. */
static void tick(dsc_loader_t *loader) {
    for (uint32_t p = 0; p < loader->net.peer_count && !loader->stop; p++) {
        dsc_peer_t *peer = &loader->net.peers[p];
        dsc_hedge_peer_t *h = &peer->hedge;
        double now = dsc_now_s();
        if (!peer->member || !peer->alive || peer->io_count == 0) {
            if (h->slow) /* failed or left: fetch.c's back-off and view.c take over */
                h->slow = 0;
            continue;
        }
        if (h->slow) {
            double t = threshold(loader, h);
            if (now < h->check_at)
                continue;
            double rtt = 0;
            if (ping(loader, p, t, &rtt)) {
                h->slow = 0;
                h->progress_at = dsc_now_s();
                DSC_LOG(&loader->cfg.log, DSC_LOG_INFO,
                        "server %s answers again (PING %.1f ms) after %.2f s marked slow: back "
                        "in use",
                        peer->addr, rtt, dsc_now_s() - h->slow_since);
                pthread_cond_broadcast(&loader->io_cv);
            } else {
                h->check_at = dsc_now_s() + HEDGE_PROBE_S;
            }
            continue;
        }
        double oldest;
        if (outstanding(loader, p, &oldest) == 0 || now < h->check_at)
            continue;
        double since = h->progress_at > oldest ? h->progress_at : oldest;
        double stalled = now - since;
        if (stalled <= loader->hedge.floor_s)
            continue; /* the threshold is never below the floor: no need to sort */
        double t = threshold(loader, h);
        if (stalled <= t)
            continue;
        /* Stopped, or busy? A server reading through its misses answers PING from its event
         * loop at once; a stopped one (or one behind a stalled link) does not. */
        double rtt = 0;
        if (ping(loader, p, t, &rtt)) {
            h->excused++;
            loader->stats.st.stalls_excused++;
            h->check_at = dsc_now_s() + t;
            DSC_LOG(&loader->cfg.log, DSC_LOG_DEBUG,
                    "server %s: no answer for %.0f ms but PING answered in %.1f ms: busy "
                    "(reading through), not slow",
                    peer->addr, stalled * 1e3, rtt);
            continue;
        }
        if (!peer->member || !peer->alive || loader->stop)
            continue;
        double o2;
        if (outstanding(loader, p, &o2) == 0)
            continue; /* it answered meanwhile */
        double since2 = h->progress_at > o2 ? h->progress_at : o2;
        if (since2 > since)
            continue; /* progress while we pinged */
        mark_slow(loader, p, dsc_now_s(), dsc_now_s() - since, t);
    }
}

void *dsc__hedge_main(void *arg) {
    dsc_loader_t *loader = arg;
    dsc__loader_thread_start();
    pthread_mutex_lock(&loader->lock);
    while (!loader->stop) {
        if (loader->hedge.on && !loader->error)
            tick(loader);
        if (loader->stop)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double wait = loader->hedge.on ? HEDGE_TICK_S : 1.0;
        uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)(wait * 1e9);
        ts.tv_sec += (time_t)(ns / 1000000000u);
        ts.tv_nsec = (long)(ns % 1000000000u);
        pthread_cond_timedwait(&loader->view.cv, &loader->lock, &ts);
    }
    pthread_mutex_unlock(&loader->lock);
    return NULL;
}

void dsc__hedge_answered(dsc_loader_t *loader, uint32_t p, const dsc_source_req_t *req,
                         double now) {
    if (p >= loader->net.peer_count)
        return;
    dsc_hedge_peer_t *h = &loader->net.peers[p].hedge;
    h->progress_at = now;
    if (req->sent_at > 0 && now >= req->sent_at) {
        h->lat_ms[h->lat_next] = (float)((now - req->sent_at) * 1e3);
        h->lat_next = (h->lat_next + 1) % DSC__HEDGE_LAT;
        if (h->lat_count < DSC__HEDGE_LAT)
            h->lat_count++;
    }
}

void dsc__hedge_late(dsc_loader_t *loader, uint32_t p, const dsc_source_req_t *req, uint64_t wire) {
    if (p >= loader->net.peer_count)
        return;
    dsc_hedge_peer_t *h = &loader->net.peers[p].hedge;
    h->progress_at = dsc_now_s();
    h->wasted_bytes += wire;
    loader->stats.st.hedge_wasted_bytes += wire;
    (void)req; /* hedge_left > 0: it came before its re-issue, which is used all the same */
}

void dsc__hedge_delivered(dsc_loader_t *loader, dsc_chunk_ent_t *ent) {
    uint64_t id = ent->hedge_req;
    ent->hedge_req = 0;
    if (ent->hedge_peer >= loader->net.peer_count)
        return;
    dsc_peer_t *peer = &loader->net.peers[ent->hedge_peer];
    if (peer->io == NULL || ent->hedge_io >= peer->io_count)
        return;
    dsc_io_t *io = &peer->io[ent->hedge_io];
    for (uint32_t k = 0; k < io->out_count; k++) {
        dsc_source_req_t *req = &io->out[k];
        if (req->id != id || __atomic_load_n(&req->claim, __ATOMIC_ACQUIRE) != DSC_REQ_ABANDONED)
            continue;
        /* Still outstanding there: the re-issue is ahead of the stalled server. */
        if (req->hedge_left > 0 && --req->hedge_left == 0) {
            peer->hedge.hedges_won++;
            loader->stats.st.hedges_won++;
        }
        return;
    }
}

void dsc__hedge_free(dsc_loader_t *loader) {
    for (uint32_t p = 0; loader->net.peers != NULL && p < loader->net.peer_count; p++) {
        dsc_conn_close(loader->net.peers[p].hedge.watch);
        loader->net.peers[p].hedge.watch = NULL;
    }
}
