/* HTTP endpoints of dscached on their own port (libmicrohttpd, its own thread polling with epoll,
 * so descriptors above 1024 are fine): /metrics in the Prometheus text exposition format,
 * /healthz (alive), /readyz (ready to serve: see main.c). */
#ifndef DSC_SERVER_HTTP_H
#define DSC_SERVER_HTTP_H

#include "catalog.h"
#include "cluster.h"
#include "server.h"

#include <stdatomic.h>
#include <stdint.h>

typedef struct dsc_http dsc_http_t;

/* The HTTP server's own bounds, apart from the data port's: a flood of HTTP clients is refused
 * beyond max_conns, and a connection silent for timeout_s is closed, so /healthz stays
 * reachable. */
#define DSC_HTTP_MAX_CONNS_DEFAULT 1024
#define DSC_HTTP_TIMEOUT_DEFAULT_S 5

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

/* Renders the metrics text (malloc'd, NUL-terminated) or NULL. Exposed for tests. */
char *dsc_http_metrics_text(const dsc_http_source_t *source);

#endif
