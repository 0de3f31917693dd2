/* HTTP endpoints of dscached on their own port (a small HTTP/1.1 server of its own, one thread
 * polling with epoll, so descriptors above 1024 are fine): /metrics in the Prometheus text
 * exposition format, /healthz (alive), /readyz (ready to serve: see main.c). One request per
 * connection (answered with Connection: close). */
#ifndef DSC_SERVER_HTTP_H
#define DSC_SERVER_HTTP_H

#include "catalog.h"
#include "cluster.h"
#include "server.h"

#include <stdatomic.h>
#include <stdint.h>

typedef struct dsc_http dsc_http_t;

/* The HTTP server's own bounds, apart from the data port's, so that /healthz stays reachable:
 * a connection whose request head is not whole within header_timeout_s is closed whatever it
 * trickles, one silent for timeout_s is closed, an address holds at most max_conns_per_peer
 * (its oldest goes for a newer one), and with max_conns open a newcomer is still admitted: the
 * oldest connection of the address holding the most is closed for it. */
#define DSC_HTTP_MAX_CONNS_DEFAULT 1024
#define DSC_HTTP_TIMEOUT_DEFAULT_S 5
#define DSC_HTTP_HEADER_TIMEOUT_DEFAULT_S 10
#define DSC_HTTP_MAX_CONNS_PER_PEER_DEFAULT 64

typedef struct dsc_http_source {
    dsc_catalog_t *cat;
    dsc_server_t *server;   /* may be NULL */
    dsc_cluster_t *cluster; /* may be NULL: single-node figures for the cluster gauges */
    uint16_t data_port;     /* the data (TCP protocol) port, sent as X-Dscache-Data-Port in
                               every answer (0: not sent) */
    /* /readyz and dscache_ready: returns 1 when ready, else 0, writing a one-line reason (no
     * newline) into why[cap] either way. Called on the HTTP thread. NULL: always ready. */
    int (*readiness)(void *arg, char *why, size_t cap);
    void *readiness_arg;
    uint32_t max_conns; /* open HTTP connections at most (0: DSC_HTTP_MAX_CONNS_DEFAULT) */
    uint32_t timeout_s; /* idle HTTP connection time-out (0: DSC_HTTP_TIMEOUT_DEFAULT_S) */
    /* seconds from accept to a whole request head (0: DSC_HTTP_HEADER_TIMEOUT_DEFAULT_S) */
    uint32_t header_timeout_s;
    uint32_t max_conns_per_peer; /* per client address (0: no limit) */
    /* --metrics-names hide: /metrics (unauthenticated) leaves out every series labelled with a
     * dataset or job name (dscache_dataset_*, dscache_job_* per entry). */
    int hide_names;
} dsc_http_source_t;

/* Starts serving on host:port (0: a free port). Returns 0 and *out, DSC_EINVAL (host does not
 * resolve), or DSC_EADDRINUSE (cannot bind). */
int dsc_http_start(const char *host, uint16_t port, const dsc_http_source_t *source,
                   dsc_http_t **out);
uint16_t dsc_http_port(const dsc_http_t *http);
/* Stops the thread and frees. NULL is a no-op. */
void dsc_http_stop(dsc_http_t *http);

/* The HTTP port's counters (the HTTP thread's own; shown in /metrics as dscache_http_*). */
typedef struct dsc_http_counters {
    uint64_t accepted, header_timeouts, idle_timeouts, peer_evictions, full_evictions,
        accept_pauses, bad_requests;
    uint64_t answers[4]; /* 2xx 3xx 4xx 5xx */
} dsc_http_counters_t;

/* A request head parsed from buf[len] (never allocates; the slices point into buf). */
typedef struct dsc_http_head {
    const char *method, *path; /* path: the target up to any '?' */
    size_t method_len, path_len;
} dsc_http_head_t;
/* Returns 0 while buf holds no whole head (no empty line yet), the head's length in bytes
 * (> 0) with *out filled when it does, or DSC_EINVAL for a head whose request line is not
 * "METHOD /target HTTP/1.x". Header fields are not looked at. */
int dsc_http_parse_head(const char *buf, size_t len, dsc_http_head_t *out);

/* Renders the metrics text (malloc'd, NUL-terminated) or NULL. Exposed for tests. */
char *dsc_http_metrics_text(const dsc_http_source_t *source);

#endif
