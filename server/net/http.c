/* /metrics, /healthz, /readyz: a small HTTP/1.1 server of its own (one thread, epoll), so that
 * its slots are its own to bound: a deadline for a request's head whatever it trickles, a limit
 * per client address, and a newcomer always admitted (a probe is answered when every slot is
 * held) by closing the oldest connection of the address that holds the most. */
#include "http.h"
#include "protocol.h"
#include "rdma.h"
#include "srvlog.h"
#include "text.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

/* A request head is read into a buffer that grows to this at most (then 431). */
#define HEAD_START 512
#define HEAD_MAX 8192

/* One connection, in accept order on the server's list (oldest first). */
typedef struct hconn {
    int fd;
    uint8_t addr[16]; /* the peer's address (IPv4 as v4-mapped IPv6) */
    int writing;      /* 0: reading its head; 1: sending its answer */
    double accepted, progress;
    char *buf; /* the head (reading), then the answer (writing) */
    size_t len, cap, off;
    struct hconn *prev, *next; /* closed: next on the list freed after the event batch */
} hconn_t;

/* Connections per address: open addressing, linear probing, backward-shift deletion. */
typedef struct peer {
    uint8_t addr[16];
    uint32_t count; /* 0: empty */
} peer_t;

struct dsc_http {
    dsc_http_source_t source;
    uint16_t port;
    int listen_fd, epoll_fd, wake_fd;
    pthread_t thread;
    int stop;
    uint32_t max_conns, per_peer;
    double header_timeout, idle_timeout;
    hconn_t *head, *tail; /* every connection, oldest first */
    hconn_t *dead;        /* closed in this event batch (events may still name them) */
    uint32_t nconns;
    peer_t *peers;
    uint32_t peer_mask;
    double paused_until; /* accepting paused (out of descriptors) until then; 0: accepting */
    dsc_http_counters_t c;
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
    counter(&t, "dscache_peer_warm_shards_total",
            "Whole-shard loads served by a peer's resident copy (peer warm-up).", tot.peer.shards);
    counter(&t, "dscache_peer_warm_bytes_total",
            "Shard bytes read from peers instead of the backing storage (peer warm-up).",
            tot.peer.bytes);
    counter(&t, "dscache_peer_warm_fallbacks_total",
            "Whole-shard loads no live owner could serve: read from the backing storage.",
            tot.peer.fallbacks);
    counter(&t, "dscache_peer_warm_refused_total",
            "Peer copies refused by validation (checksum or header): read from the backing "
            "storage.",
            tot.peer.refused);
    counter(&t, "dscache_peer_read_bytes_total",
            "Shard bytes this server answered to warming peers (PEER_READ).", sc->peer_read_bytes);
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
    counter(&t, "dscache_staging_trimmed_total",
            "Hinted ranges trimmed: beyond their credential's and job's part of the staging area.",
            tot.staging.trimmed);
    counter(&t, "dscache_staging_reclaimed_total",
            "Ranges dropped unread to give a credential or job under its part the room another "
            "held beyond its own.",
            tot.staging.reclaimed);
    gauge(&t, "dscache_staging_tenants",
          "Credentials' jobs holding staged or queued ranges now (each gets an equal part per "
          "credential, of it an equal part per job).",
          tot.staging.tenants);
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
    gauge(&t, "dscache_warm_shards_left", "Owned shards not resident yet (warm-up left to do).",
          cc.owned - cc.owned_resident);
    gauge(&t, "dscache_warm_bytes_left", "Bytes of the owned shards not resident yet.",
          cc.missing_bytes);
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

/* ---- the request head --------------------------------------------------------------------- */

int dsc_http_parse_head(const char *buf, size_t len, dsc_http_head_t *out) {
    memset(out, 0, sizeof *out);
    /* The head ends at its first empty line ("\r\n\r\n", or "\n\n" from a lenient client). */
    size_t end = 0;
    for (size_t i = 0; i < len; i++) {
        if (buf[i] != '\n')
            continue;
        if (i + 1 < len && buf[i + 1] == '\n') {
            end = i + 2;
            break;
        }
        if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n') {
            end = i + 3;
            break;
        }
    }
    if (end == 0)
        return 0;
    /* The request line: METHOD SP TARGET SP HTTP/1.x, then CR? LF. */
    size_t eol = 0;
    while (buf[eol] != '\n')
        eol++;
    size_t line = eol > 0 && buf[eol - 1] == '\r' ? eol - 1 : eol;
    size_t i = 0;
    while (i < line && buf[i] >= 'A' && buf[i] <= 'Z')
        i++;
    if (i == 0 || i > 16 || i >= line || buf[i] != ' ')
        return DSC_EINVAL;
    out->method = buf;
    out->method_len = i;
    size_t t = ++i;
    while (i < line && buf[i] != ' ' && (unsigned char)buf[i] > ' ' && buf[i] != 0x7f)
        i++;
    if (i == t || i >= line || buf[i] != ' ' || buf[t] != '/')
        return DSC_EINVAL;
    out->path = buf + t;
    out->path_len = i - t;
    for (size_t q = 0; q < out->path_len; q++)
        if (out->path[q] == '?') {
            out->path_len = q; /* the query is ignored */
            break;
        }
    i++;
    if (line - i != 8 || memcmp(buf + i, "HTTP/1.", 7) != 0 || buf[i + 7] < '0' || buf[i + 7] > '9')
        return DSC_EINVAL;
    return (int)end;
}

/* ---- answers ------------------------------------------------------------------------------- */

static const char *reason(unsigned code) {
    switch (code) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 503:
        return "Service Unavailable";
    default:
        return "Unknown";
    }
}

/* Makes c's answer: the head and (unless HEAD) the body, c->buf replaced. Returns 0 or
 * DSC_ENOMEM (the connection is then closed). */
static int answer(dsc_http_t *http, hconn_t *c, unsigned code, const char *body, const char *type,
                  int head_only) {
    char port[64] = "";
    if (http->source.data_port != 0) /* a loader pointed at this port by mistake names it */
        snprintf(port, sizeof port, "X-Dscache-Data-Port: %u\r\n",
                 (unsigned)http->source.data_port);
    size_t blen = strlen(body);
    char head[512];
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 %u %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
                      "Connection: close\r\n\r\n",
                      code, reason(code), type, blen, port);
    size_t total = (size_t)hl + (head_only ? 0 : blen);
    char *out = malloc(total);
    if (out == NULL)
        return DSC_ENOMEM;
    memcpy(out, head, (size_t)hl);
    if (!head_only)
        memcpy(out + hl, body, blen);
    free(c->buf);
    c->buf = out;
    c->len = total;
    c->cap = total;
    c->off = 0;
    c->writing = 1;
    if (code >= 200 && code < 600)
        http->c.answers[code / 100 - 2 < 4 ? code / 100 - 2 : 3]++;
    return 0;
}

/* The HTTP port's own series, appended to /metrics. */
static void http_metrics(dsc_text_t *t, const dsc_http_t *http) {
    const dsc_http_counters_t *c = &http->c;
    counter(t, "dscache_http_connections_total", "HTTP connections accepted.", c->accepted);
    gauge(t, "dscache_http_open_connections", "Open HTTP connections (of --http-max-conns).",
          http->nconns);
    counter(t, "dscache_http_header_timeouts_total",
            "HTTP connections closed for not sending a whole request head within "
            "--http-header-timeout.",
            c->header_timeouts);
    counter(t, "dscache_http_idle_timeouts_total",
            "HTTP connections closed for sending or reading nothing for --http-timeout.",
            c->idle_timeouts);
    counter(t, "dscache_http_peer_evictions_total",
            "HTTP connections closed for a newer one from the same address at "
            "--http-max-conns-per-peer.",
            c->peer_evictions);
    counter(t, "dscache_http_full_evictions_total",
            "HTTP connections closed for a newcomer while --http-max-conns were open (the oldest "
            "of the address holding the most).",
            c->full_evictions);
    counter(t, "dscache_http_accept_pauses_total",
            "Times accepting paused for 100 ms: the process was out of descriptors.",
            c->accept_pauses);
    counter(t, "dscache_http_bad_requests_total",
            "HTTP requests answered 400 or 431 (malformed, or a head over 8 KiB).",
            c->bad_requests);
    static const char *const classes[] = {"2xx", "3xx", "4xx", "5xx"};
    dsc_text_add(t, "# HELP dscache_http_answers_total HTTP answers, by status class.\n"
                    "# TYPE dscache_http_answers_total counter\n");
    for (int i = 0; i < 4; i++)
        if (i != 1)
            dsc_text_add(t, "dscache_http_answers_total{class=\"%s\"} %llu\n", classes[i],
                         (unsigned long long)c->answers[i]);
}

/* A whole head arrived (or did not fit): the answer, into c. */
static int on_request(dsc_http_t *http, hconn_t *c, int head_rc) {
    if (head_rc == 0) { /* over HEAD_MAX */
        http->c.bad_requests++;
        return answer(http, c, 431, "request head too large\n", "text/plain", 0);
    }
    dsc_http_head_t h;
    if (head_rc < 0 || dsc_http_parse_head(c->buf, c->len, &h) <= 0) {
        http->c.bad_requests++;
        return answer(http, c, 400, "bad request\n", "text/plain", 0);
    }
    int is_head = h.method_len == 4 && memcmp(h.method, "HEAD", 4) == 0;
    if (!is_head && !(h.method_len == 3 && memcmp(h.method, "GET", 3) == 0))
        return answer(http, c, 405, "method not allowed\n", "text/plain", 0);
#define PATH_IS(lit) (h.path_len == sizeof lit - 1 && memcmp(h.path, lit, sizeof lit - 1) == 0)
    if (PATH_IS("/healthz"))
        return answer(http, c, 200, "ok\n", "text/plain", is_head);
    if (PATH_IS("/readyz")) {
        char why[1024];
        int ready = readiness(&http->source, why, sizeof why - 1);
        strcat(why, "\n");
        return answer(http, c, ready ? 200 : 503, why, "text/plain", is_head);
    }
    if (PATH_IS("/metrics")) {
        char *text = dsc_http_metrics_text(&http->source);
        if (text == NULL)
            return answer(http, c, 500, "out of memory\n", "text/plain", 0);
        dsc_text_t t = {.p = text, .len = strlen(text), .cap = strlen(text) + 1};
        http_metrics(&t, http);
        text = dsc_text_take(&t);
        if (text == NULL)
            return answer(http, c, 500, "out of memory\n", "text/plain", 0);
        int rc = answer(http, c, 200, text, "text/plain; version=0.0.4", is_head);
        free(text);
        return rc;
    }
#undef PATH_IS
    return answer(http, c, 404, "not found\n", "text/plain", is_head);
}

/* ---- connections per address --------------------------------------------------------------- */

static uint32_t addr_hash(const uint8_t a[16]) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (int i = 0; i < 16; i++)
        h = (h ^ a[i]) * 16777619u;
    return h;
}

/* The address's entry, or the empty one where it would go. */
static peer_t *peer_slot(dsc_http_t *http, const uint8_t a[16]) {
    for (uint32_t i = addr_hash(a) & http->peer_mask;; i = (i + 1) & http->peer_mask) {
        peer_t *p = &http->peers[i];
        if (p->count == 0 || memcmp(p->addr, a, 16) == 0)
            return p;
    }
}

static uint32_t peer_count(dsc_http_t *http, const uint8_t a[16]) {
    return peer_slot(http, a)->count;
}

static void peer_add(dsc_http_t *http, const uint8_t a[16]) {
    peer_t *p = peer_slot(http, a);
    memcpy(p->addr, a, 16);
    p->count++;
}

static void peer_remove(dsc_http_t *http, const uint8_t a[16]) {
    peer_t *p = peer_slot(http, a);
    if (p->count == 0 || --p->count > 0)
        return;
    /* Backward-shift deletion keeps every probe sequence unbroken. */
    uint32_t i = (uint32_t)(p - http->peers);
    for (uint32_t j = (i + 1) & http->peer_mask; http->peers[j].count != 0;
         j = (j + 1) & http->peer_mask) {
        uint32_t home = addr_hash(http->peers[j].addr) & http->peer_mask;
        /* Entry j may move to the hole at i unless its home lies cyclically in (i, j]. */
        int between = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (between)
            continue;
        http->peers[i] = http->peers[j];
        http->peers[j].count = 0;
        i = j;
    }
}

/* ---- the loop -------------------------------------------------------------------------------- */

static void conn_close(dsc_http_t *http, hconn_t *c) {
    epoll_ctl(http->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    peer_remove(http, c->addr);
    if (c->prev)
        c->prev->next = c->next;
    else
        http->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        http->tail = c->prev;
    http->nconns--;
    c->fd = -1;
    c->next = http->dead;
    http->dead = c;
}

static void free_dead(dsc_http_t *http) {
    while (http->dead) {
        hconn_t *c = http->dead;
        http->dead = c->next;
        free(c->buf);
        free(c);
    }
}

static void conn_write(dsc_http_t *http, hconn_t *c, double now) {
    while (c->off < c->len) {
        ssize_t n = send(c->fd, c->buf + c->off, c->len - c->off, MSG_NOSIGNAL);
        if (n > 0) {
            c->off += (size_t)n;
            c->progress = now;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};
            epoll_ctl(http->epoll_fd, EPOLL_CTL_MOD, c->fd, &ev);
            return;
        }
        break;
    }
    conn_close(http, c); /* sent (Connection: close), or the peer went away */
}

static void conn_read(dsc_http_t *http, hconn_t *c, double now) {
    for (;;) {
        if (c->len == c->cap) {
            if (c->cap >= HEAD_MAX)
                break;
            size_t cap = c->cap ? c->cap * 2 : HEAD_START;
            char *b = realloc(c->buf, cap);
            if (b == NULL) {
                conn_close(http, c);
                return;
            }
            c->buf = b;
            c->cap = cap;
        }
        ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) {
            conn_close(http, c);
            return;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return; /* more later */
        }
        size_t from = c->len > 3 ? c->len - 3 : 0;
        c->len += (size_t)n;
        c->progress = now;
        dsc_http_head_t h;
        int rc = dsc_http_parse_head(c->buf + from, c->len - from, &h);
        if (rc == 0 && from > 0)
            continue; /* no empty line in what came: the head goes on */
        if (rc == 0 || (rc = dsc_http_parse_head(c->buf, c->len, &h)) == 0)
            continue;
        if (on_request(http, c, rc) < 0) {
            conn_close(http, c);
            return;
        }
        conn_write(http, c, now);
        return;
    }
    /* HEAD_MAX bytes and no end of the head. */
    if (on_request(http, c, 0) < 0) {
        conn_close(http, c);
        return;
    }
    conn_write(http, c, now);
}

/* The connection to close for a newcomer when every slot is held: the oldest of the address
 * holding the most connections (a probe from an address holding one is never the one). */
static hconn_t *victim_full(dsc_http_t *http) {
    hconn_t *best = NULL;
    uint32_t most = 0;
    for (hconn_t *c = http->head; c; c = c->next) {
        uint32_t n = peer_count(http, c->addr);
        if (n > most) {
            most = n;
            best = c;
        }
    }
    return best;
}

static hconn_t *oldest_of(dsc_http_t *http, const uint8_t a[16]) {
    for (hconn_t *c = http->head; c; c = c->next)
        if (memcmp(c->addr, a, 16) == 0)
            return c;
    return NULL;
}

static void admit(dsc_http_t *http, int fd, const struct sockaddr_storage *ss, double now) {
    uint8_t a[16] = {0};
    if (ss->ss_family == AF_INET6) {
        memcpy(a, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
    } else if (ss->ss_family == AF_INET) {
        a[10] = a[11] = 0xff;
        memcpy(a + 12, &((const struct sockaddr_in *)ss)->sin_addr, 4);
    }
    http->c.accepted++;
    if (http->per_peer != 0 && peer_count(http, a) >= http->per_peer) {
        hconn_t *old = oldest_of(http, a);
        if (old != NULL) {
            http->c.peer_evictions++;
            conn_close(http, old);
        }
    }
    if (http->nconns >= http->max_conns) {
        hconn_t *old = victim_full(http);
        if (old != NULL) {
            http->c.full_evictions++;
            conn_close(http, old);
        }
    }
    hconn_t *c = calloc(1, sizeof *c);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (c == NULL || epoll_ctl(http->epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        free(c);
        close(fd);
        return;
    }
    c->fd = fd;
    memcpy(c->addr, a, 16);
    c->accepted = c->progress = now;
    c->prev = http->tail;
    if (http->tail)
        http->tail->next = c;
    else
        http->head = c;
    http->tail = c;
    http->nconns++;
    peer_add(http, a);
}

static void accept_all(dsc_http_t *http, double now) {
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd =
            accept4(http->listen_fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            admit(http, fd, &ss, now);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            /* Out of descriptors: stop polling the listener for 100 ms, not spin on it. */
            epoll_ctl(http->epoll_fd, EPOLL_CTL_DEL, http->listen_fd, NULL);
            http->paused_until = now + 0.1;
            http->c.accept_pauses++;
        }
        return;
    }
}

/* Deadlines: a head not whole within header_timeout, no progress for idle_timeout. */
static void sweep(dsc_http_t *http, double now) {
    for (hconn_t *c = http->head, *next; c; c = next) {
        next = c->next;
        if (!c->writing && now - c->accepted >= http->header_timeout) {
            http->c.header_timeouts++;
            conn_close(http, c);
        } else if (now - c->progress >= http->idle_timeout) {
            http->c.idle_timeouts++;
            conn_close(http, c);
        }
    }
    if (http->paused_until > 0 && now >= http->paused_until) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
        if (epoll_ctl(http->epoll_fd, EPOLL_CTL_ADD, http->listen_fd, &ev) == 0)
            http->paused_until = 0;
        else
            http->paused_until = now + 0.1;
    }
}

static void *http_thread(void *arg) {
    dsc_http_t *http = arg;
    struct epoll_event evs[64];
    double last_sweep = 0;
    while (!http->stop) {
        int n = epoll_wait(http->epoll_fd, evs, 64, 100);
        double now = dsc_now_s();
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (p == NULL) {
                accept_all(http, now);
            } else if (p == &http->wake_fd) {
                http->stop = 1;
            } else {
                hconn_t *c = p;
                if (c->fd < 0)
                    continue; /* closed earlier in this batch (an eviction) */
                if (c->writing)
                    conn_write(http, c, now);
                else
                    conn_read(http, c, now);
            }
        }
        if (now - last_sweep >= 0.1) {
            sweep(http, now);
            last_sweep = now;
        }
        free_dead(http);
    }
    return NULL;
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
    int rc = DSC_ENOMEM;
    dsc_http_t *http = calloc(1, sizeof *http);
    if (http == NULL)
        goto fail_res;
    http->listen_fd = http->epoll_fd = http->wake_fd = -1;
    http->source = *source;
    http->max_conns = source->max_conns ? source->max_conns : DSC_HTTP_MAX_CONNS_DEFAULT;
    http->per_peer = source->max_conns_per_peer;
    http->idle_timeout = source->timeout_s ? source->timeout_s : DSC_HTTP_TIMEOUT_DEFAULT_S;
    http->header_timeout =
        source->header_timeout_s ? source->header_timeout_s : DSC_HTTP_HEADER_TIMEOUT_DEFAULT_S;
    /* At most max_conns addresses: a table at most half full. */
    uint32_t slots = 16;
    while (slots < 2 * (uint64_t)http->max_conns + 2)
        slots *= 2;
    http->peers = calloc(slots, sizeof *http->peers);
    if (http->peers == NULL)
        goto fail_http;
    http->peer_mask = slots - 1;
    rc = DSC_EADDRINUSE;
    http->listen_fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (http->listen_fd < 0 ||
        setsockopt(http->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(http->listen_fd, res->ai_addr, res->ai_addrlen) != 0 ||
        listen(http->listen_fd, 1024) != 0)
        goto fail_http;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(http->listen_fd, (struct sockaddr *)&ss, &sl) != 0)
        goto fail_http;
    http->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                : ((struct sockaddr_in *)&ss)->sin_port);
    rc = DSC_ENOMEM;
    http->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    http->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
    struct epoll_event wev = {.events = EPOLLIN, .data.ptr = &http->wake_fd};
    if (http->epoll_fd < 0 || http->wake_fd < 0 ||
        epoll_ctl(http->epoll_fd, EPOLL_CTL_ADD, http->listen_fd, &lev) != 0 ||
        epoll_ctl(http->epoll_fd, EPOLL_CTL_ADD, http->wake_fd, &wev) != 0 ||
        pthread_create(&http->thread, NULL, http_thread, http) != 0)
        goto fail_http;
    freeaddrinfo(res);
    *out = http;
    return 0;
fail_http:
    if (http->wake_fd >= 0)
        close(http->wake_fd);
    if (http->epoll_fd >= 0)
        close(http->epoll_fd);
    if (http->listen_fd >= 0)
        close(http->listen_fd);
    free(http->peers);
    free(http);
fail_res:
    freeaddrinfo(res);
    return rc;
}

uint16_t dsc_http_port(const dsc_http_t *http) {
    return http ? http->port : 0;
}

void dsc_http_stop(dsc_http_t *http) {
    if (http == NULL)
        return;
    uint64_t one = 1;
    if (write(http->wake_fd, &one, sizeof one) < 0)
        LOG_WARN("http: cannot wake the HTTP thread: %s", strerror(errno));
    pthread_join(http->thread, NULL);
    while (http->head)
        conn_close(http, http->head);
    free_dead(http);
    close(http->wake_fd);
    close(http->epoll_fd);
    close(http->listen_fd);
    free(http->peers);
    free(http);
}
