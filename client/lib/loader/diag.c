/* Loader diagnosis (diag.h): stall blamed on what next() waits for, per-server answer times, the
 * verdict window, and the REPORT body. Everything runs under the loader lock. */
#include "diag.h"
#include "report.h"
#include "route.h" /* dsc__peer_inflight_limit */
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SERVER_SLOTS (DSC_LOADER_MAX_PEERS + 1)

/* The launcher's name for the job, the same on every rank where it has one: torchrun's run id
 * (not its default "none"), Slurm's job id, else the Kubernetes pod name (the host name inside a
 * pod). Empty when none applies. */
static void launcher_job(char *out, size_t cap) {
    const char *v = getenv("TORCHELASTIC_RUN_ID");
    out[0] = '\0';
    if (v != NULL && v[0] != '\0' && strcmp(v, "none") != 0) {
        snprintf(out, cap, "torchrun-%s", v);
        return;
    }
    v = getenv("SLURM_JOB_ID");
    if (v != NULL && v[0] != '\0') {
        snprintf(out, cap, "slurm-%s", v);
        return;
    }
    if (getenv("KUBERNETES_SERVICE_HOST") != NULL) {
        char host[64] = "";
        if (gethostname(host, sizeof host - 1) == 0 && host[0])
            snprintf(out, cap, "%s", host);
    }
}

static void job_name(dsc_loader_t *loader) {
    const char *src = loader->cfg.opt.job_name;
    if (src == NULL || *src == '\0')
        src = getenv("DSCACHE_JOB");
    char fallback[DSC_REPORT_MAX_JOB + 16];
    if (src == NULL || *src == '\0') {
        launcher_job(fallback, sizeof fallback);
        src = fallback;
    }
    if (src == NULL || *src == '\0') {
        char host[48] = "";
        gethostname(host, sizeof host - 1);
        snprintf(fallback, sizeof fallback, "%s-%ld", host[0] ? host : "host", (long)getpid());
        src = fallback;
    }
    /* Label-safe: [A-Za-z0-9_.:@/-], at most DSC_REPORT_MAX_JOB bytes. */
    size_t n = 0;
    for (; src[n] && n < DSC_REPORT_MAX_JOB; n++) {
        char c = src[n];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '.' || c == ':' || c == '@' || c == '/' || c == '-';
        loader->diag.job[n] = ok ? c : '_';
    }
    loader->diag.job[n] = '\0';
}

int dsc__diag_init(dsc_loader_t *loader, double now) {
    dsc_diag_t *d = &loader->diag;
    d->servers = calloc(SERVER_SLOTS, sizeof *d->servers);
    d->base[0].servers = calloc(SERVER_SLOTS, sizeof *d->servers);
    d->base[1].servers = calloc(SERVER_SLOTS, sizeof *d->servers);
    if (d->servers == NULL || d->base[0].servers == NULL || d->base[1].servers == NULL)
        return DSC_ENOMEM;
    d->base[0].at = d->base[1].at = now;
    job_name(loader);
    return 0;
}

void dsc__diag_free(dsc_loader_t *loader) {
    free(loader->diag.servers);
    free(loader->diag.base[0].servers);
    free(loader->diag.base[1].servers);
    loader->diag.servers = loader->diag.base[0].servers = loader->diag.base[1].servers = NULL;
}

int dsc__diag_waiting_on(dsc_loader_t *loader, uint32_t *server) {
    *server = UINT32_MAX;
    if (loader->cons.cons_seq >= loader->sched.slot_seq)
        return DSC_WAIT_PLAN;
    dsc_step_t *st = &loader->sched.steps[loader->cons.cons_seq % loader->sched.step_cap];
    if (st->eof || st->state != ST_PLANNED)
        return DSC_WAIT_COLLATE;
    dsc_chunk_ent_t *least = NULL;
    for (uint32_t k = st->scan; k < st->count; k++) {
        dsc_chunk_ent_t *ent = st->src[k];
        if (ent != NULL && ent->state != CH_READY && (least == NULL || ent->state < least->state)) {
            least = ent;
            if (ent->state == CH_QUEUED)
                break;
        }
    }
    if (least == NULL)
        return DSC_WAIT_COLLATE; /* all decoded: waits for a worker to collate it */
    if (least->state == CH_RECEIVED || least->state == CH_DECODING)
        return DSC_WAIT_DECODE;
    *server = least->peer;
    int full = loader->fetch.inflight_used + least->raw_len > loader->cfg.opt.inflight_bytes;
    if (!full && least->peer < DSC_LOADER_MAX_PEERS)
        full = loader->net.peers[least->peer].inflight_bytes + least->raw_len >
               dsc__peer_inflight_limit(loader);
    if (full)
        return DSC_WAIT_BUDGET;
    return least->state == CH_QUEUED ? DSC_WAIT_QUEUED : DSC_WAIT_NETWORK;
}

void dsc__diag_blame(dsc_loader_t *loader, int cause, uint32_t server, double seconds) {
    if (cause < 0 || cause >= DSC_WAIT_COUNT || !(seconds > 0))
        return;
    loader->diag.c.wait[cause] += seconds;
    if (server < SERVER_SLOTS && loader->diag.servers != NULL)
        loader->diag.servers[server].stall_seconds += seconds;
}

/* The live counters: the loader's own statistics plus the diagnosis ones. */
static void current(dsc_loader_t *loader, dsc_verdict_counters_t *c) {
    *c = loader->diag.c;
    c->stall_seconds = loader->stats.st.stall_seconds;
    c->compute_seconds = loader->stats.st.compute_seconds;
    c->batches = loader->stats.st.batches;
    c->samples = loader->stats.st.samples;
    c->bytes = loader->stats.st.bytes;
    c->wire_bytes = loader->stats.st.wire_bytes;
    c->decode_seconds = loader->stats.st.decode_seconds;
    c->collate_seconds = loader->stats.st.collate_seconds;
    c->image_seconds = loader->stats.st.image_seconds;
    c->h2d_seconds = loader->stats.st.h2d_seconds;
    c->refetches = loader->stats.st.refetches;
}

/* Decoded bytes two shuffle windows need, and the window that fits (as the create-time check in
 * loader.c computes them). */
static void cache_figures(dsc_loader_t *loader, uint64_t *need, uint64_t *fit) {
    dsc_cache_need_t c;
    dsc__cache_need(loader, &c);
    uint64_t edge = c.edge;
    *need = c.need;
    *fit = loader->cfg.cache_bytes > edge
               ? (loader->cfg.cache_bytes - edge) / DSC__WINDOWS_HELD / loader->cfg.sample_bytes
               : 0;
}

void dsc__diag_tick(dsc_loader_t *loader, double now) {
    dsc_diag_t *d = &loader->diag;
    if (!d->started && loader->stats.st.batches > 0) { /* the start-up ends here */
        d->started = 1;
        d->startup_stall = loader->stats.st.stall_seconds;
        memcpy(d->startup_wait, d->c.wait, sizeof d->startup_wait);
    }
    if (d->servers == NULL || now - d->base[1].at < DSC_DIAG_WINDOW_S)
        return;
    dsc_verdict_server_t *keep = d->base[0].servers;
    d->base[0] = d->base[1];
    d->base[1].servers = keep;
    d->base[1].at = now;
    current(loader, &d->base[1].c);
    memcpy(keep, d->servers, SERVER_SLOTS * sizeof *keep);
}

double dsc__diag_recent_fetch_stall(const dsc_loader_t *loader) {
    static const int fetch_side[] = {DSC_WAIT_PLAN, DSC_WAIT_QUEUED, DSC_WAIT_BUDGET,
                                     DSC_WAIT_NETWORK};
    const dsc_diag_t *d = &loader->diag;
    const dsc_diag_snapshot_t *b = &d->base[0];
    int startup = d->started && b->c.batches == 0; /* the window holds the first batch's wait */
    double stall = loader->stats.st.stall_seconds - b->c.stall_seconds;
    double compute = loader->stats.st.compute_seconds - b->c.compute_seconds;
    double fetch = 0;
    for (size_t i = 0; i < sizeof fetch_side / sizeof fetch_side[0]; i++) {
        int w = fetch_side[i];
        fetch += d->c.wait[w] - b->c.wait[w] - (startup ? d->startup_wait[w] - b->c.wait[w] : 0);
    }
    if (startup)
        stall -= d->startup_stall - b->c.stall_seconds;
    if (stall < 0)
        stall = 0;
    if (fetch < 0)
        fetch = 0;
    return stall + compute >= DSC_VERDICT_MIN_BUSY ? fetch / (stall + compute) : 0;
}

int dsc__diag_store_reads(const dsc_loader_t *loader) {
    const dsc_diag_t *d = &loader->diag;
    if (d->servers == NULL)
        return 0;
    uint64_t hits = 0, misses = 0;
    uint32_t latency_us = 0;
    for (uint32_t s = 0; s < loader->net.peer_count && s < SERVER_SLOTS; s++) {
        const dsc_verdict_server_t *a = &d->servers[s];
        if (!a->have_backing)
            continue;
        if (a->backing_latency_us > latency_us)
            latency_us = a->backing_latency_us;
        const dsc_verdict_server_t *z = d->base[0].servers != NULL ? &d->base[0].servers[s] : NULL;
        if (z != NULL && z->have_backing && a->backing_at > z->backing_at &&
            a->srv_hits >= z->srv_hits && a->srv_misses >= z->srv_misses) {
            hits += a->srv_hits - z->srv_hits;
            misses += a->srv_misses - z->srv_misses;
        } else {
            hits += a->srv_hits;
            misses += a->srv_misses;
        }
    }
    return latency_us >= DSC_DIAG_SLOW_STORE_US && hits + misses >= 16 &&
           misses * 20 >= hits + misses;
}

void dsc__diag_verdict(dsc_loader_t *loader, double now, dsc_verdict_t *out) {
    dsc_diag_t *d = &loader->diag;
    if (d->servers == NULL) {
        if (out != NULL)
            memset(out, 0, sizeof *out);
        return;
    }
    dsc_verdict_counters_t cur;
    current(loader, &cur);
    dsc__diag_tick(loader, now);
    const dsc_diag_snapshot_t *b = &d->base[0];
    dsc_verdict_input_t in;
    memset(&in, 0, sizeof in);
    in.window_seconds = now - b->at;
    dsc_verdict_counters_t *dl = &in.delta;
    dl->stall_seconds = cur.stall_seconds - b->c.stall_seconds;
    dl->compute_seconds = cur.compute_seconds - b->c.compute_seconds;
    dl->batches = cur.batches - b->c.batches;
    dl->samples = cur.samples - b->c.samples;
    dl->bytes = cur.bytes - b->c.bytes;
    dl->wire_bytes = cur.wire_bytes - b->c.wire_bytes;
    dl->decode_seconds = cur.decode_seconds - b->c.decode_seconds;
    dl->collate_seconds = cur.collate_seconds - b->c.collate_seconds;
    dl->image_seconds = cur.image_seconds - b->c.image_seconds;
    dl->h2d_seconds = cur.h2d_seconds - b->c.h2d_seconds;
    dl->chunks_fetched = cur.chunks_fetched - b->c.chunks_fetched;
    dl->refetches = cur.refetches - b->c.refetches;
    for (int i = 0; i < DSC_WAIT_COUNT; i++)
        dl->wait[i] = cur.wait[i] - b->c.wait[i];
    if (d->started && b->c.batches == 0) { /* the window holds the wait for the first batch */
        in.startup_stall = d->startup_stall - b->c.stall_seconds;
        for (int i = 0; i < DSC_WAIT_COUNT; i++)
            in.startup_wait[i] = d->startup_wait[i] - b->c.wait[i];
    }
    /* Servers in slot order; the verdict names them by address. */
    static _Thread_local dsc_verdict_server_t servers[SERVER_SLOTS];
    static _Thread_local const char *addrs[SERVER_SLOTS];
    uint32_t n = 0;
    for (uint32_t s = 0; s < loader->net.peer_count && s < DSC_LOADER_MAX_PEERS; s++) {
        const dsc_verdict_server_t *a = &d->servers[s], *z = &b->servers[s];
        servers[n] = (dsc_verdict_server_t){
            .bytes = a->bytes - z->bytes,
            .responses = a->responses - z->responses,
            .recv_seconds = a->recv_seconds - z->recv_seconds,
            .wait_seconds = a->wait_seconds - z->wait_seconds,
            .stall_seconds = a->stall_seconds - z->stall_seconds,
        };
        /* Two answers of the server's with its figures: the one the window starts with, or
         * (none there yet: a young loader) the newer base's. */
        const dsc_verdict_server_t *zb = z;
        if (!z->have_backing && d->base[1].servers != NULL && d->base[1].servers[s].have_backing)
            zb = &d->base[1].servers[s];
        z = zb;
        if (a->have_backing && z->have_backing && a->backing_at > z->backing_at &&
            a->srv_hits >= z->srv_hits && a->srv_misses >= z->srv_misses &&
            a->backing_bytes >= z->backing_bytes) {
            dsc_verdict_server_t *v = &servers[n];
            v->have_backing = 1;
            v->backing_at = a->backing_at - z->backing_at;
            v->srv_hits = a->srv_hits - z->srv_hits;
            v->srv_misses = a->srv_misses - z->srv_misses;
            v->backing_bytes = a->backing_bytes - z->backing_bytes;
            v->backing_busy_s = a->backing_busy_s - z->backing_busy_s;
            v->backing_wait_s = a->backing_wait_s - z->backing_wait_s;
            v->backing_rate = a->backing_rate;
            v->store_capacity = a->store_capacity;
            v->backing_pool = a->backing_pool;
            v->backing_latency_us = a->backing_latency_us;
        }
        addrs[n++] = loader->net.peers[s].addr;
    }
    in.servers = servers;
    in.server_addrs = addrs;
    in.server_count = n;
    in.decode_threads = loader->cfg.opt.decode_threads;
    in.connections = loader->cfg.opt.connections;
    in.assist = loader->work.assist;
    in.device = loader->cfg.opt.device;
    in.inflight_bytes = loader->cfg.opt.inflight_bytes;
    in.server_inflight_bytes = loader->cfg.opt.server_inflight_bytes;
    in.cache_bytes = loader->cfg.cache_bytes;
    in.shuffle_window = loader->cfg.opt.shuffle ? loader->cfg.opt.shuffle_window : 0;
    cache_figures(loader, &in.cache_need, &in.window_fit);
    dsc__verdict_compute(&in, &d->last);
    d->last_at = now;
    if (!d->last.too_few) {
        d->settled = d->last;
        d->settled_at = now;
    } else if (d->settled_at > 0) {
        /* Too few steps in the window (the job stopped stepping, or pauses): the verdict of the
         * last steps measured stands, with its figures and its age, rather than decaying to
         * "unknown" in a run's stats, its final REPORT or a late look at the job. */
        dsc_verdict_t held = d->settled;
        size_t len = strlen(held.evidence);
        snprintf(held.evidence + len, sizeof held.evidence - len,
                 " (the last steps measured, %.0f s ago: too few since)", now - d->settled_at);
        d->last = held;
    }
    if (out != NULL)
        *out = d->last;
}

static int report_body(dsc_loader_t *loader, uint32_t p, double now, uint32_t flags, uint8_t *buf,
                       size_t cap) {
    dsc_diag_t *d = &loader->diag;
    dsc__diag_verdict(loader, now, NULL);
    const dsc_diag_snapshot_t *b = &d->base[0];
    double window = now - b->at;
    double sps = window > 0 ? (double)(loader->stats.st.samples - b->c.samples) / window : 0;
    double bps = window > 0 ? (double)(loader->stats.st.bytes - b->c.bytes) / window : 0;
    double stall = d->last.stall_fraction;
    dsc_report_req_t req = {
        .flags = flags,
        .job = {d->job, (uint16_t)strlen(d->job)},
        .dataset = {loader->cfg.dataset, (uint16_t)strlen(loader->cfg.dataset)},
        .rank = loader->cfg.opt.rank,
        .world_size = loader->cfg.opt.world_size,
        .stall_ppm = (uint32_t)(stall * DSC_REPORT_STALL_ONE + 0.5),
        .samples_per_s = (uint64_t)(sps + 0.5),
        .bytes_per_s = (uint64_t)(bps + 0.5),
        .bottleneck = (uint8_t)d->last.bottleneck,
    };
    if (req.stall_ppm > DSC_REPORT_STALL_ONE)
        req.stall_ppm = DSC_REPORT_STALL_ONE;
    size_t vlen = strlen(d->last.suggestion);
    if (vlen > DSC_REPORT_MAX_VERDICT) {
        vlen = DSC_REPORT_MAX_VERDICT;
        while (vlen > 0 && ((uint8_t)d->last.suggestion[vlen] & 0xC0) == 0x80)
            vlen--;
    }
    req.verdict.ptr = d->last.suggestion;
    req.verdict.len = (uint16_t)vlen;
    /* What this loader saw of the server addressed (hedge.c): always appended; the source strips
     * it for a server that did not grant DSC_FEATURE_REPORT_HEDGE. */
    req.has_hedge = 1;
    if (p < loader->net.peer_count) {
        const dsc_hedge_peer_t *h = &loader->net.peers[p].hedge;
        req.hedge = (dsc_report_hedge_t){
            .flags = h->slow ? DSC_REPORT_HEDGE_SLOW : 0,
            .hedges = h->hedges,
            .hedges_won = h->hedges_won,
            .hedge_bytes = h->hedge_bytes,
            .wasted_bytes = h->wasted_bytes,
            .slow_marks = h->slow_marks,
            .excused = h->excused,
        };
    }
    return dsc_report_req_encode(&req, buf, cap);
}

int dsc__diag_report_body(dsc_loader_t *loader, uint32_t p, double now, uint8_t *buf, size_t cap) {
    return report_body(loader, p, now, 0, buf, cap);
}

void dsc__diag_final_report(dsc_loader_t *loader) {
    if (loader->net.peers == NULL || loader->cfg.opt.report_seconds < 0 ||
        loader->diag.servers == NULL)
        return;
    uint8_t body[DSC_REPORT_MAX_BODY];
    uint32_t timeout = loader->cfg.opt.timeout_ms < 1000 ? loader->cfg.opt.timeout_ms : 1000;
    for (uint32_t p = 0; p < loader->net.peer_count; p++) {
        const dsc_peer_t *peer = &loader->net.peers[p];
        if (peer->report_seq == 0 || !peer->alive)
            continue; /* never reported there, or down: nothing to finish, no wait */
        pthread_mutex_lock(&loader->lock);
        int len = report_body(loader, p, dsc_now_s(), DSC_REPORT_FLAG_FINISHED, body, sizeof body);
        pthread_mutex_unlock(&loader->lock);
        if (len <= 0)
            continue;
        dsc_conn_t *conn = NULL;
        if (dsc_conn_open_addr_auth(peer->addr, timeout, loader->net.view_hash, loader->cfg.cred,
                                    &conn) < 0)
            continue;
        if (!(dsc_conn_info(conn)->features & DSC_FEATURE_REPORT_HEDGE))
            len = (int)dsc_report_req_strip_hedge((size_t)len);
        uint8_t *resp = NULL;
        size_t resp_len = 0;
        int rc = dsc_conn_call(conn, DSC_OP_REPORT, body, (size_t)len, &resp, &resp_len);
        DSC_LOG(&loader->cfg.log, DSC_LOG_DEBUG, "final REPORT to %s: %s", peer->addr,
                rc < 0 ? dsc_strerror(rc) : "ok");
        free(resp);
        dsc_conn_close(conn);
    }
}
