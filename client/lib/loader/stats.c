/* Loader statistics: the stats struct, Prometheus text, and the periodic INFO line. */
#include "stats.h"
#include "diag.h"
#include "mixture.h"
#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Copies the counters and fills the derived fields. Under lock. */
static void snapshot(dsc_loader_t *loader, dsc_stats_t *s) {
    *s = loader->stats.st;
    s->struct_size = sizeof *s;
    double now = dsc_now_s();
    s->wall_seconds = now - loader->stats.created_at;
    double busy = s->stall_seconds + s->compute_seconds;
    s->stall_fraction = busy > 0 ? s->stall_seconds / busy : 0;
    dsc_verdict_t v;
    dsc__diag_verdict(loader, now, &v);
    s->bottleneck = v.bottleneck;
    s->verdict_seconds = now - loader->diag.base[0].at;
    s->verdict_stall_fraction = v.stall_fraction;
    for (int i = 0; i < DSC_WAIT_COUNT; i++)
        s->stall_waits[i] = loader->diag.c.wait[i];
    memcpy(s->bottleneck_server, v.server, sizeof s->bottleneck_server);
    memcpy(s->evidence, v.evidence, sizeof s->evidence);
    memcpy(s->suggestion, v.suggestion, sizeof s->suggestion);
    dsc_transport_counters_t *tc = &((dsc_loader_t *)loader)->cfg.transport_counters;
    s->rdma_connections = atomic_load(&tc->rdma_connections);
    s->tcp_connections = atomic_load(&tc->tcp_connections);
    s->rdma_bytes = atomic_load(&tc->rdma_bytes);
    s->rdma_fallbacks = atomic_load(&tc->rdma_fallbacks);
    s->rdma_errors = atomic_load(&tc->rdma_errors);
    s->slow_servers = 0;
    for (uint32_t p = 0; p < loader->net.peer_count; p++)
        s->slow_servers += loader->net.peers[p].hedge.slow != 0;
}

_Static_assert(sizeof(((dsc_stats_t *)0)->evidence) == DSC_VERDICT_TEXT &&
                   sizeof(((dsc_stats_t *)0)->bottleneck_server) == DSC_VERDICT_ADDR,
               "verdict texts fit the stats struct");

/* The figures of a loader (a loader over a mixture: mixture.c's account). */
static void take(dsc_loader_t *l, dsc_stats_t *s) {
    if (l->mix != NULL) {
        dsc__mix_loader_stats(l, s);
        return;
    }
    pthread_mutex_lock(&l->lock);
    snapshot(l, s);
    pthread_mutex_unlock(&l->lock);
}

DSC_EXTERN int dsc_loader_stats(const dsc_loader_t *loader, dsc_stats_t *out) {
    if (loader == NULL || out == NULL ||
        out->struct_size < offsetof(dsc_stats_t, h2d_seconds) + sizeof(double))
        return DSC_EINVAL;
    dsc_loader_t *l = (dsc_loader_t *)loader;
    dsc_stats_t s;
    take(l, &s);
    size_t n = out->struct_size < sizeof s ? out->struct_size : sizeof s;
    size_t caller = out->struct_size;
    memcpy(out, &s, n);
    out->struct_size = caller;
    return 0;
}

typedef struct text_buf {
    char *buf;
    size_t cap;
    size_t len; /* needed so far (may exceed cap) */
} text_buf_t;

__attribute__((format(printf, 2, 3))) static void put(text_buf_t *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *dst = t->len < t->cap ? t->buf + t->len : NULL;
    int n = vsnprintf(dst, dst ? t->cap - t->len : 0, fmt, ap);
    va_end(ap);
    if (n > 0)
        t->len += (size_t)n;
}

static void metric(text_buf_t *t, const char *name, const char *type, const char *help,
                   const char *dataset, double value) {
    put(t, "# HELP dscache_loader_%s %s\n# TYPE dscache_loader_%s %s\n", name, help, name, type);
    put(t, "dscache_loader_%s{dataset=\"%s\"} %.17g\n", name, dataset, value);
}

DSC_EXTERN int dsc_loader_metrics_text(const dsc_loader_t *loader, char *buf, size_t cap) {
    if (loader == NULL || (buf == NULL && cap > 0))
        return DSC_EINVAL;
    dsc_stats_t s;
    dsc_loader_t *l = (dsc_loader_t *)loader;
    take(l, &s);
    text_buf_t t = {buf, cap, 0};
    const char *ds = loader->cfg.dataset;
    metric(&t, "epoch", "gauge", "Current epoch.", ds, (double)s.epoch);
    metric(&t, "batches_total", "counter", "Batches handed out.", ds, (double)s.batches);
    metric(&t, "samples_total", "counter", "Samples handed out.", ds, (double)s.samples);
    metric(&t, "bytes_total", "counter", "Decoded batch bytes handed out.", ds, (double)s.bytes);
    metric(&t, "wire_bytes_total", "counter", "Bytes received from servers or files.", ds,
           (double)s.wire_bytes);
    metric(&t, "requests_total", "counter", "GET requests sent.", ds, (double)s.requests);
    metric(&t, "retries_total", "counter", "Requests re-sent after a failure.", ds,
           (double)s.retries);
    metric(&t, "failovers_total", "counter", "Requests moved to another replica.", ds,
           (double)s.failovers);
    metric(&t, "checksum_failures_total", "counter", "Chunks failing verification.", ds,
           (double)s.checksum_failures);
    metric(&t, "stall_seconds_total", "counter", "Time the trainer waited inside next().", ds,
           s.stall_seconds);
    metric(&t, "compute_seconds_total", "counter", "Time the trainer spent between next() calls.",
           ds, s.compute_seconds);
    metric(&t, "stall_fraction", "gauge", "stall / (stall + compute).", ds, s.stall_fraction);
    metric(&t, "network_seconds_total", "counter", "Summed time waiting on responses.", ds,
           s.network_seconds);
    metric(&t, "decode_seconds_total", "counter", "Summed checksum + decompression time.", ds,
           s.decode_seconds);
    metric(&t, "collate_seconds_total", "counter", "Summed time copying into batch slots.", ds,
           s.collate_seconds);
    metric(&t, "h2d_seconds_total", "counter", "Summed host-to-device copy time.", ds,
           s.h2d_seconds);
    metric(&t, "placed_chunks_total", "counter", "Chunks decoded straight into a batch slot.", ds,
           (double)s.placed_chunks);
    metric(&t, "refetches_total", "counter",
           "Chunks fetched again within an epoch (shuffle window larger than cache_bytes).", ds,
           (double)s.refetches);
    metric(&t, "h2d_bytes_total", "counter", "Bytes of the timed host-to-device copies.", ds,
           (double)s.h2d_bytes);
    metric(&t, "assists_total", "counter",
           "Chunk decodes and step collations done by next() while it waited.", ds,
           (double)s.assists);
    metric(&t, "epoch_wire_bytes", "gauge",
           "Bytes fetched for the steps of the last completed epoch.", ds,
           (double)s.epoch_wire_bytes);
    metric(&t, "verdict_stall_fraction", "gauge",
           "Stall fraction over the verdict's window (the last 5-10 s).", ds,
           s.verdict_stall_fraction);
    static const char *const waits[DSC_WAIT_COUNT] = {"plan",    "queued", "budget",
                                                      "network", "decode", "collate"};
    put(&t, "# HELP dscache_loader_stall_wait_seconds_total Stall by what next() waited on.\n"
            "# TYPE dscache_loader_stall_wait_seconds_total counter\n");
    for (int i = 0; i < DSC_WAIT_COUNT; i++)
        put(&t, "dscache_loader_stall_wait_seconds_total{dataset=\"%s\",wait=\"%s\"} %.17g\n", ds,
            waits[i], s.stall_waits[i]);
    put(&t, "# HELP dscache_loader_bottleneck What limits the job now (1 for that stage; "
            "docs/diagnosis.md).\n# TYPE dscache_loader_bottleneck gauge\n");
    for (int b = 0; b < DSC_BOTTLENECK_COUNT; b++)
        put(&t, "dscache_loader_bottleneck{dataset=\"%s\",stage=\"%s\"} %d\n", ds,
            dsc_bottleneck_name(b), b == s.bottleneck);
    /* Per server (slots in use; bounded by DSC_LOADER_MAX_SERVERS): what the verdict compares. */
    static const struct {
        const char *name, *type, *help;
    } per_server[] = {
        {"server_bytes_total", "counter", "Bytes received from the server."},
        {"server_recv_seconds_total", "counter",
         "I/O threads' time waiting for and reading the server's answers."},
        {"server_wait_seconds_total", "counter",
         "Of which: waiting for answers to start (latency rather than bandwidth)."},
        {"server_stall_seconds_total", "counter",
         "Stall while next() waited on chunks queued or in flight at the server."},
    };
    for (size_t k = 0; k < sizeof per_server / sizeof per_server[0]; k++) {
        put(&t, "# HELP dscache_loader_%s %s\n# TYPE dscache_loader_%s %s\n", per_server[k].name,
            per_server[k].help, per_server[k].name, per_server[k].type);
        pthread_mutex_lock(&l->lock);
        for (uint32_t i = 0; i < l->net.peer_count && l->diag.servers != NULL; i++) {
            const dsc_verdict_server_t *v = &l->diag.servers[i];
            double value = k == 0   ? (double)v->bytes
                           : k == 1 ? v->recv_seconds
                           : k == 2 ? v->wait_seconds
                                    : v->stall_seconds;
            put(&t, "dscache_loader_%s{dataset=\"%s\",server=\"%s\"} %.17g\n", per_server[k].name,
                ds, l->net.peers[i].addr, value);
        }
        pthread_mutex_unlock(&l->lock);
    }
    put(&t, "# verdict: %s: %s; %s\n", dsc_bottleneck_name(s.bottleneck), s.evidence, s.suggestion);
    metric(&t, "rdma_connections", "gauge", "Server connections using RDMA READ now.", ds,
           (double)s.rdma_connections);
    metric(&t, "tcp_connections", "gauge",
           "Server connections that fell back to TCP (transport auto) now.", ds,
           (double)s.tcp_connections);
    metric(&t, "rdma_bytes_total", "counter", "Stored bytes received by RDMA READ.", ds,
           (double)s.rdma_bytes);
    metric(&t, "rdma_fallbacks_total", "counter", "Connections that fell back from RDMA to TCP.",
           ds, (double)s.rdma_fallbacks);
    metric(&t, "rdma_errors_total", "counter", "RDMA connections lost to a failed READ.", ds,
           (double)s.rdma_errors);
    metric(&t, "truncated_samples_total", "counter",
           "Samples of padded variable-length fields cut to their max_len.", ds,
           (double)s.truncated_samples);
    metric(&t, "decode_errors_total", "counter",
           "Images that did not decode, handed out as zero images (on_decode_error fill).", ds,
           (double)s.decode_errors);
    metric(&t, "image_seconds_total", "counter",
           "Summed image decode time in the decode threads (part of collate).", ds,
           s.image_seconds);
    metric(&t, "hedges_total", "counter",
           "Requests re-issued to another owner because their server stalled.", ds,
           (double)s.hedges);
    metric(&t, "hedges_won_total", "counter",
           "Re-issued requests whose chunks arrived before the stalled server answered.", ds,
           (double)s.hedges_won);
    metric(&t, "hedge_bytes_total", "counter",
           "Decoded bytes re-issued (budget: 5% of the bytes received, plus one request).", ds,
           (double)s.hedge_bytes);
    metric(&t, "hedge_wasted_bytes_total", "counter",
           "Bytes stalled servers sent late for re-issued requests (dropped).", ds,
           (double)s.hedge_wasted_bytes);
    metric(&t, "hedges_denied_total", "counter",
           "Stalled requests left waiting because the hedge budget was spent.", ds,
           (double)s.hedges_denied);
    metric(&t, "slow_marks_total", "counter", "Times a server was marked slow.", ds,
           (double)s.slow_marks);
    metric(&t, "slow_servers", "gauge", "Servers marked slow now (no new work).", ds,
           (double)s.slow_servers);
    metric(&t, "stalls_excused_total", "counter",
           "Stalls not held against a server: it answered PING (reading through misses).", ds,
           (double)s.stalls_excused);
    /* Per server: who stalled, what it cost. */
    static const struct {
        const char *name, *type, *help;
    } per_hedge[] = {
        {"server_hedges_total", "counter", "The server's requests re-issued to another owner."},
        {"server_hedges_won_total", "counter",
         "Of which: the re-issue arrived before the server answered."},
        {"server_hedge_wasted_bytes_total", "counter",
         "Bytes the server sent late for re-issued requests (dropped)."},
        {"server_slow_marks_total", "counter", "Times the server was marked slow."},
        {"server_slow", "gauge", "1 while the server is marked slow (no new work)."},
    };
    for (size_t k = 0; k < sizeof per_hedge / sizeof per_hedge[0]; k++) {
        put(&t, "# HELP dscache_loader_%s %s\n# TYPE dscache_loader_%s %s\n", per_hedge[k].name,
            per_hedge[k].help, per_hedge[k].name, per_hedge[k].type);
        pthread_mutex_lock(&l->lock);
        for (uint32_t i = 0; i < l->net.peer_count; i++) {
            const dsc_hedge_peer_t *h = &l->net.peers[i].hedge;
            double value = k == 0   ? (double)h->hedges
                           : k == 1 ? (double)h->hedges_won
                           : k == 2 ? (double)h->wasted_bytes
                           : k == 3 ? (double)h->slow_marks
                                    : (double)(h->slow != 0);
            put(&t, "dscache_loader_%s{dataset=\"%s\",server=\"%s\"} %.17g\n", per_hedge[k].name,
                ds, l->net.peers[i].addr, value);
        }
        pthread_mutex_unlock(&l->lock);
    }
    if (t.len > (size_t)INT32_MAX)
        return DSC_EOVERFLOW;
    return (int)t.len;
}

void dsc__stats_maybe_log(dsc_loader_t *loader, double now) {
    double period = loader->cfg.opt.stats_log_seconds;
    if (period <= 0 || now - loader->stats.last_log < period ||
        DSC_LOG_INFO > loader->cfg.log.level)
        return;
    double dt = now - loader->stats.last_log;
    uint64_t samples = loader->stats.st.samples - loader->stats.last_log_samples;
    double stall = loader->stats.st.stall_seconds - loader->stats.last_log_stall;
    double compute = loader->stats.st.compute_seconds - loader->stats.last_log_compute;
    double busy = stall + compute;
    dsc_verdict_t v;
    dsc__diag_verdict(loader, now, &v);
    DSC_LOG(&loader->cfg.log, DSC_LOG_INFO,
            "loader %s: epoch %llu, %.0f samples/s, %.1f MB/s, stall %.1f%%, limit: %s (%s)",
            loader->cfg.dataset, (unsigned long long)loader->stats.st.epoch, samples / dt,
            samples * (double)loader->cfg.sample_bytes / dt / 1e6,
            busy > 0 ? 100 * stall / busy : 0, dsc_bottleneck_name(v.bottleneck), v.suggestion);
    loader->stats.last_log = now;
    loader->stats.last_log_samples = loader->stats.st.samples;
    loader->stats.last_log_stall = loader->stats.st.stall_seconds;
    loader->stats.last_log_compute = loader->stats.st.compute_seconds;
}
