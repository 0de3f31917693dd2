/* /metrics, /healthz, /readyz over libmicrohttpd. */
#include "http.h"
#include "protocol.h"
#include "rdma.h"
#include "srvlog.h"
#include "text.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

struct dsc_http {
    struct MHD_Daemon *daemon;
    dsc_http_source_t source;
    uint16_t port;
};

static void counter(dsc_text_t *t, const char *name, const char *help, uint64_t v) {
    dsc_text_add(t, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
                 (unsigned long long)v);
}

static void gauge(dsc_text_t *t, const char *name, const char *help, uint64_t v) {
    dsc_text_add(t, "# HELP %s %s\n# TYPE %s gauge\n%s %llu\n", name, help, name, name,
                 (unsigned long long)v);
}

static int readiness(const dsc_http_source_t *src, char *why, size_t cap) {
    if (src->readiness == NULL) {
        snprintf(why, cap, "ready");
        return 1;
    }
    return src->readiness(src->readiness_arg, why, cap);
}

/* Per-dataset series from the catalog's STAT JSON (dataset names are [A-Za-z0-9_.-]: safe in a
 * label value). */
static void dataset_metrics(dsc_text_t *t, dsc_catalog_t *cat) {
    static const struct {
        const char *key, *name, *type, *help;
    } series[] = {
        {"shards", "dscache_dataset_shards", "gauge", "Shards of the dataset."},
        {"cached_shards", "dscache_dataset_cached_shards", "gauge",
         "Shards of the dataset resident in the store."},
        {"hits", "dscache_dataset_hits_total", "counter", "GETs answered from the store."},
        {"misses", "dscache_dataset_misses_total", "counter", "GETs that waited for a load."},
        {"bytes_served", "dscache_dataset_served_bytes_total", "counter",
         "Shard bytes sent in GET answers."},
        {"cached_bytes", "dscache_dataset_resident_bytes", "gauge",
         "Bytes of the dataset resident in the store."},
        {"share_bytes", "dscache_dataset_share_bytes", "gauge",
         "The most the dataset may hold now: its limit, else the store less other pinned "
         "datasets' bytes."},
        {"pinned", "dscache_dataset_pinned", "gauge", "1 when the dataset is pinned."},
        {"priority", "dscache_dataset_priority", "gauge",
         "The dataset's priority for memory (0..1000): on a full store its loads evict "
         "lower-priority datasets' shards first."},
    };
    int not_found = 0;
    char *json = dsc_catalog_stat_json(cat, "", 0, &not_found);
    cJSON *root = json ? cJSON_Parse(json) : NULL;
    free(json);
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "datasets");
    for (size_t k = 0; k < sizeof series / sizeof series[0]; k++) {
        dsc_text_add(t, "# HELP %s %s\n# TYPE %s %s\n", series[k].name, series[k].help,
                     series[k].name, series[k].type);
        const cJSON *d;
        cJSON_ArrayForEach(d, list) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(d, "name");
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(d, series[k].key);
            if (cJSON_IsString(name) && cJSON_IsNumber(v))
                dsc_text_add(t, "%s{dataset=\"%s\"} %.0f\n", series[k].name, name->valuestring,
                             v->valuedouble);
        }
    }
    cJSON_Delete(root);
}

char *dsc_http_metrics_text(const dsc_http_source_t *src) {
    dsc_text_t t = {.cap = 8192};
    t.p = malloc(t.cap);
    if (t.p == NULL)
        return NULL;
    t.p[0] = '\0';
    dsc_catalog_totals_t tot;
    dsc_catalog_totals(src->cat, &tot);
    dsc_store_info_t si;
    dsc_store_info(dsc_catalog_store(src->cat), &si);
    dsc_server_counters_t *sc = calloc(1, sizeof *sc);
    if (sc == NULL) {
        free(t.p);
        return NULL;
    }
    dsc_server_counters(src->server, sc);

    counter(&t, "dscache_bytes_served_total", "Shard bytes sent in GET answers.", tot.bytes_served);
    counter(&t, "dscache_bytes_out_total", "Frame bytes written, every operation.", sc->bytes_out);
    dsc_text_add(&t, "# HELP dscache_requests_total Requests answered, by operation and status.\n"
                     "# TYPE dscache_requests_total counter\n");
    for (int op = 0; op < DSC_SERVER_OPS; op++)
        for (int st = 0; st < DSC_SERVER_STATUSES; st++)
            if (sc->requests[op][st])
                dsc_text_add(&t, "dscache_requests_total{op=\"%s\",status=\"%s\"} %llu\n",
                             op == 0 ? "UNKNOWN" : dsc_opcode_name((uint32_t)op),
                             dsc_status_name((uint32_t)st),
                             (unsigned long long)sc->requests[op][st]);
    counter(&t, "dscache_hits_total", "GETs answered from the store.", tot.hits);
    counter(&t, "dscache_misses_total", "GETs that waited for a load.", tot.misses);
    counter(&t, "dscache_evictions_total", "Shards evicted from the store.", tot.evictions);
    counter(&t, "dscache_loads_total", "Shard loads that succeeded.", tot.loads);
    counter(&t, "dscache_load_failures_total", "Shard loads that failed.", tot.load_failures);
    counter(&t, "dscache_read_through_total",
            "GETs answered by reading their chunks through a temporary buffer (store full).",
            tot.read_through);
    counter(&t, "dscache_read_through_bytes_total",
            "Disk bytes read by read-throughs (chunk ranges, shard headers and indexes).",
            tot.read_through_bytes);
    counter(&t, "dscache_loaded_bytes_total", "Disk bytes read by whole-shard loads.",
            tot.bytes_loaded);
    counter(&t, "dscache_backing_reads_total",
            "Backing reads by read-throughs (chunk ranges, coalesced; shard indexes).",
            tot.backing.reads);
    counter(&t, "dscache_backing_coalesced_total",
            "Read-throughs served by another one's backing read (adjacent chunk ranges).",
            tot.backing.coalesced);
    dsc_text_add(&t,
                 "# HELP dscache_backing_read_seconds_total Seconds spent in backing reads.\n"
                 "# TYPE dscache_backing_read_seconds_total counter\n"
                 "dscache_backing_read_seconds_total %.6f\n"
                 "# HELP dscache_backing_rate_wait_seconds_total Seconds reads waited for "
                 "--backing-rate.\n"
                 "# TYPE dscache_backing_rate_wait_seconds_total counter\n"
                 "dscache_backing_rate_wait_seconds_total %.6f\n"
                 "# HELP dscache_backing_latency_seconds One backing read's latency now (moving "
                 "average).\n"
                 "# TYPE dscache_backing_latency_seconds gauge\n"
                 "dscache_backing_latency_seconds %.6f\n",
                 tot.backing.read_seconds, tot.backing.wait_seconds, tot.backing.latency);
    gauge(&t, "dscache_backing_queue_depth", "Read-throughs queued for a backing reader now.",
          tot.backing.queued);
    gauge(&t, "dscache_backing_in_flight", "Backing reads running now (of --backing-reads).",
          tot.backing.running);
    counter(&t, "dscache_staging_hints_total", "Chunk ranges received in HINTs (read-ahead).",
            tot.staging.hints);
    counter(&t, "dscache_staging_accepted_total",
            "Hinted ranges accepted for read-ahead (not resident, room in the staging area).",
            tot.staging.accepted);
    counter(&t, "dscache_staging_staged_total", "Hinted ranges read ahead into the staging area.",
            tot.staging.staged);
    counter(&t, "dscache_staging_staged_bytes_total", "Bytes read ahead into the staging area.",
            tot.staging.staged_bytes_total);
    counter(&t, "dscache_staging_hits_total", "GETs answered from a staged range.",
            tot.staging.hits);
    counter(&t, "dscache_staging_joined_total",
            "GETs that waited for a backing read of their chunks already under way.",
            tot.staging.joined);
    counter(&t, "dscache_staging_dropped_unused_total",
            "Staged ranges dropped (TTL) before any GET asked for them.",
            tot.staging.dropped_unused);
    counter(&t, "dscache_staging_dropped_unused_bytes_total",
            "Bytes of staged ranges dropped before any GET asked for them.",
            tot.staging.dropped_unused_bytes);
    counter(&t, "dscache_staging_expired_total",
            "Hinted ranges dropped unread: due too long ago (the staging area was full).",
            tot.staging.expired);
    gauge(&t, "dscache_staging_bytes",
          "Bytes in the staging area now (staged, and reads under way), of --staging-memory.",
          tot.staging.bytes);
    gauge(&t, "dscache_staging_pending", "Hinted ranges waiting to be read ahead now.",
          tot.staging.pending);
    gauge(&t, "dscache_metadata_bytes",
          "Bookkeeping memory: tables, manifests, slots, the read-through index cache.",
          tot.metadata_bytes);
    gauge(&t, "dscache_index_cache_bytes", "Shard indexes cached for read-throughs.",
          tot.index_cache_bytes);
    counter(&t, "dscache_connections_total", "Connections accepted.", sc->connections_total);
    counter(&t, "dscache_protocol_errors_total", "Connections closed for a bad frame.",
            sc->protocol_errors);
    counter(&t, "dscache_auth_failures_total",
            "Requests refused UNAUTHORIZED: failed or missing authentication, or an admin "
            "operation the role lacks.",
            sc->auth_failures);
    counter(&t, "dscache_backpressure_pauses_total",
            "Times a connection stopped being read because its answers queued up.",
            sc->paused_reads);
    gauge(&t, "dscache_open_connections", "Open client connections.", sc->connections);
    counter(&t, "dscache_connection_timeouts_total",
            "Connections closed by the header or idle time-out.", sc->timeouts);
    counter(&t, "dscache_peer_refusals_total",
            "Connections closed at once because their peer was at --max-conns-per-peer.",
            sc->peer_refusals);
    gauge(&t, "dscache_held_bytes",
          "Bytes held for all connections (queued answers, waiting GETs, receive buffers).",
          sc->held_bytes);
    gauge(&t, "dscache_store_bytes", "Bytes allocated in the store.", si.used);
    gauge(&t, "dscache_store_capacity_bytes", "Store capacity.", si.capacity);
    gauge(&t, "dscache_cached_shards", "Shards resident in the store.", tot.cached_shards);
    gauge(&t, "dscache_bad_shards", "Shards that failed validation.", tot.bad_shards);
    gauge(&t, "dscache_damaged_shards",
          "Shards served but for chunks damaged on disk (answered CORRUPT).", tot.damaged_shards);
    gauge(&t, "dscache_damaged_chunks", "Chunks known damaged on disk (answered CORRUPT).",
          tot.damaged_chunks);
    gauge(&t, "dscache_datasets", "Datasets served.", tot.datasets);
    gauge(&t, "dscache_shards", "Shards of the datasets served.", tot.shards);
    char why[256];
    gauge(&t, "dscache_ready", "1 when /readyz answers 200 (owned shards resident).",
          (uint64_t)readiness(src, why, sizeof why));
    dsc_text_add(&t,
                 "# HELP dscache_build_info Build of this server (always 1).\n"
                 "# TYPE dscache_build_info gauge\n"
                 "dscache_build_info{version=\"%s\"} 1\n",
                 DSC_VERSION_STRING);
    dsc_cluster_counts_t cc;
    dsc_cluster_counts(src->cluster, src->cat, &cc);
    gauge(&t, "dscache_cluster_members", "Servers in the member list (1: single node).",
          cc.members);
    gauge(&t, "dscache_cluster_self_member", "1 when this server is in the member list.",
          (uint64_t)cc.self_member);
    gauge(&t, "dscache_owned_shards", "Shards this server owns (primary or replica).", cc.owned);
    gauge(&t, "dscache_owned_resident_shards", "Owned shards resident in the store.",
          cc.owned_resident);
    if (!src->hide_names)
        dataset_metrics(&t, src->cat);

    dsc_text_add(
        &t, "# HELP dscache_get_latency_seconds GET answered OK: from the decoded request to the "
            "answer handed to the transport (a miss includes its load).\n"
            "# TYPE dscache_get_latency_seconds histogram\n");
    for (int i = 0; i < DSC_GET_LATENCY_BUCKETS; i++)
        dsc_text_add(&t, "dscache_get_latency_seconds_bucket{le=\"%g\"} %llu\n",
                     dsc_get_latency_bounds[i], (unsigned long long)sc->get_latency_buckets[i]);
    dsc_text_add(&t, "dscache_get_latency_seconds_bucket{le=\"+Inf\"} %llu\n",
                 (unsigned long long)sc->get_latency_count);
    dsc_text_add(&t, "dscache_get_latency_seconds_sum %.9f\n", sc->get_latency_sum_seconds);
    dsc_text_add(&t, "dscache_get_latency_seconds_count %llu\n",
                 (unsigned long long)sc->get_latency_count);
    char *rdma = dsc_rdma_srv_metrics_text(src->server ? dsc_server_rdma(src->server) : NULL);
    if (rdma != NULL)
        dsc_text_add(&t, "%s", rdma);
    free(rdma);

    dsc_load_histogram_t h;
    dsc_catalog_load_histogram(src->cat, &h);
    dsc_text_add(&t, "# HELP dscache_load_seconds Time to read and validate one shard.\n"
                     "# TYPE dscache_load_seconds histogram\n");
    for (int i = 0; i < DSC_LOAD_BUCKETS; i++)
        dsc_text_add(&t, "dscache_load_seconds_bucket{le=\"%g\"} %llu\n", dsc_load_bucket_bounds[i],
                     (unsigned long long)h.buckets[i]);
    dsc_text_add(&t, "dscache_load_seconds_bucket{le=\"+Inf\"} %llu\n",
                 (unsigned long long)h.count);
    dsc_text_add(&t, "dscache_load_seconds_sum %.9f\n", h.sum_seconds);
    dsc_text_add(&t, "dscache_load_seconds_count %llu\n", (unsigned long long)h.count);
    /* Diagnosis: the jobs fed (docs/diagnosis.md) and each dataset's resident fraction. */
    char *jobs = dsc_jobs_metrics_text(dsc_server_jobs(src->server), dsc_now_s(), !src->hide_names);
    char *fair = dsc_server_fair_metrics_text(src->server, !src->hide_names);
    if (fair != NULL)
        dsc_text_add(&t, "%s", fair);
    else
        t.failed = 1;
    free(fair);
    int nf = 0;
    char *stat = src->hide_names ? NULL : dsc_catalog_stat_json(src->cat, "", 0, &nf);
    char *resident = src->hide_names ? strdup("") : dsc_resident_metrics_text(stat);
    free(stat);
    if (jobs != NULL && resident != NULL)
        dsc_text_add(&t, "%s%s", jobs, resident);
    else
        t.failed = 1;
    free(jobs);
    free(resident);
    free(sc);
    return dsc_text_take(&t);
}

/* libmicrohttpd's messages (a connection refused at the limit, ...) can come once per hostile
 * connection: debug level only. */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char line[256];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n > 0 && line[n - 1] == '\n')
        line[--n] = '\0';
    LOG_DEBUG("http: %s", line);
}

static enum MHD_Result reply(const dsc_http_t *http, struct MHD_Connection *connection,
                             unsigned code, char *body, int owned, const char *type) {
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(body), body, owned ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (r == NULL) {
        if (owned)
            free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    if (http->source.data_port != 0) {
        /* A loader pointed at this port by mistake names the data port from it. */
        char port[8];
        snprintf(port, sizeof port, "%u", (unsigned)http->source.data_port);
        MHD_add_response_header(r, "X-Dscache-Data-Port", port);
    }
    enum MHD_Result ret = MHD_queue_response(connection, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *connection, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
    (void)version;
    (void)upload_data;
    (void)upload_data_size;
    (void)con_cls;
    dsc_http_t *http = cls;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return reply(http, connection, 405, "method not allowed\n", 0, "text/plain");
    if (strcmp(url, "/metrics") == 0) {
        char *text = dsc_http_metrics_text(&http->source);
        if (text == NULL)
            return reply(http, connection, 500, "out of memory\n", 0, "text/plain");
        return reply(http, connection, 200, text, 1, "text/plain; version=0.0.4");
    }
    if (strcmp(url, "/healthz") == 0)
        return reply(http, connection, 200, "ok\n", 0, "text/plain");
    if (strcmp(url, "/readyz") == 0) {
        char why[1024];
        int ready = readiness(&http->source, why, sizeof why);
        size_t n = strlen(why);
        char *body = malloc(n + 2);
        if (body == NULL)
            return reply(http, connection, 500, "out of memory\n", 0, "text/plain");
        memcpy(body, why, n);
        memcpy(body + n, "\n", 2);
        return reply(http, connection, ready ? 200 : 503, body, 1, "text/plain");
    }
    return reply(http, connection, 404, "not found\n", 0, "text/plain");
}

int dsc_http_start(const char *host, uint16_t port, const dsc_http_source_t *source,
                   dsc_http_t **out) {
    *out = NULL;
    char port_text[8];
    snprintf(port_text, sizeof port_text, "%u", (unsigned)port);
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    if (getaddrinfo(host, port_text, &hints, &res) != 0 || res == NULL)
        return DSC_EINVAL;
    dsc_http_t *http = calloc(1, sizeof *http);
    if (http == NULL) {
        freeaddrinfo(res);
        return DSC_ENOMEM;
    }
    http->source = *source;
    /* epoll, not select(): with thousands of data connections open, the HTTP sockets get
     * descriptors above FD_SETSIZE, which a select()-based daemon refuses. */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
    if (res->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    unsigned max_conns = source->max_conns ? source->max_conns : DSC_HTTP_MAX_CONNS_DEFAULT;
    unsigned timeout_s = source->timeout_s ? source->timeout_s : DSC_HTTP_TIMEOUT_DEFAULT_S;
    http->daemon = MHD_start_daemon(flags, port, NULL, NULL, on_request, http, MHD_OPTION_SOCK_ADDR,
                                    res->ai_addr, MHD_OPTION_CONNECTION_LIMIT, max_conns,
                                    MHD_OPTION_CONNECTION_TIMEOUT, timeout_s,
                                    MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_END);
    freeaddrinfo(res);
    if (http->daemon == NULL) {
        free(http);
        return DSC_EADDRINUSE;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(http->daemon, MHD_DAEMON_INFO_BIND_PORT);
    http->port = info ? info->port : port;
    *out = http;
    return 0;
}

uint16_t dsc_http_port(const dsc_http_t *http) {
    return http ? http->port : 0;
}

void dsc_http_stop(dsc_http_t *http) {
    if (http == NULL)
        return;
    MHD_stop_daemon(http->daemon);
    free(http);
}
