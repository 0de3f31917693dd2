/* The dscached data server: one libuv event loop per thread, each with its own SO_REUSEPORT
 * listening socket, graceful drain. Inside: server.c (this object, loops, stop), tcp.c
 * (connections, framing, back-pressure, zero-copy GET answers), dispatch.c (requests). */
#ifndef DSC_SERVER_SERVER_H
#define DSC_SERVER_SERVER_H

#include "catalog.h"
#include "cluster.h"
#include "credstore.h"
#include "jobs.h"

#include <stdint.h>

typedef struct dsc_server dsc_server_t;

typedef struct dsc_server_options {
    const char *host;             /* listen address (numeric or name) */
    uint16_t port;                /* 0: pick a free port */
    uint32_t threads;             /* event loops (>= 1) */
    uint64_t max_out;             /* per-connection queued response bytes before reads pause */
    uint32_t drain_seconds;       /* stop: longest wait for in-flight responses (0: 30) */
    uint64_t max_out_total;       /* bytes held for all connections before reads pause (0: 1 GiB) */
    uint32_t header_timeout_s;    /* a frame must arrive whole this long after its first byte
                                     (0: 10; UINT32_MAX: never) */
    uint32_t idle_timeout_s;      /* close a connection silent this long (0: never) */
    uint32_t max_conns_per_peer;  /* open connections per peer address (0: no limit) */
    const char *name;             /* server name sent in HELLO */
    dsc_credstore_t *credentials; /* --auth-file (not owned, outlives the server); NULL: serve
                                     anonymously (docs/security.md) */
    int allow_anonymous_admin;    /* without credentials: serve WARM/EVICT anonymously */
    struct dsc_rdma_srv *rdma;    /* RDMA transport (rdma.h; not owned), or NULL: TCP only */
} dsc_server_options_t;

/* Binds the sockets and starts the loop threads. Returns 0 and *out, DSC_EADDRINUSE,
 * DSC_EINVAL (address does not resolve), DSC_ENOMEM, or -errno from socket calls. */
int dsc_server_start(dsc_catalog_t *cat, const dsc_server_options_t *options, dsc_server_t **out);
/* The bound data port. */
uint16_t dsc_server_port(const dsc_server_t *srv);
/* Asks every loop to stop accepting and to close each connection once its in-flight responses
 * are sent (bounded by drain_seconds). Async-signal-unsafe, any thread, idempotent. */
void dsc_server_stop(dsc_server_t *srv);
/* Gives the server its membership (not owned: it must outlive the server) for the HELLO
 * members_hash, MEMBERS answers and the ownership fields of STAT. Until then (or with NULL)
 * HELLO carries 0, MEMBERS is answered UNSUPPORTED and STAT has no cluster fields. Any thread;
 * set it before announcing the port. */
void dsc_server_set_cluster(dsc_server_t *srv, dsc_cluster_t *cluster);
/* The RDMA transport given in the options (NULL: TCP only). */
struct dsc_rdma_srv *dsc_server_rdma(const dsc_server_t *srv);
/* Waits for the loop threads to end (after dsc_server_stop), then frees. NULL is a no-op. */
void dsc_server_destroy(dsc_server_t *srv);

/* Counters for /metrics. requests[op][status]: op is the opcode (unknown ones counted at 0),
 * status a dsc_status_t. */
#define DSC_SERVER_OPS 34
#define DSC_SERVER_STATUSES 11
#define DSC_GET_LATENCY_BUCKETS 12
/* Upper bounds (seconds) of the GET latency histogram's buckets. */
extern const double dsc_get_latency_bounds[DSC_GET_LATENCY_BUCKETS];
typedef struct dsc_server_counters {
    uint64_t connections;       /* open now */
    uint64_t connections_total; /* accepted since start */
    uint64_t requests[DSC_SERVER_OPS][DSC_SERVER_STATUSES];
    uint64_t bytes_out;       /* frame bytes written, all opcodes */
    uint64_t protocol_errors; /* connections closed for a bad frame */
    uint64_t paused_reads;    /* times a connection was paused by back-pressure */
    uint64_t timeouts;        /* connections closed by the header or idle time-out */
    uint64_t peer_refusals;   /* connections closed at once: their peer was at its limit */
    uint64_t held_bytes;      /* bytes held for all connections now (--max-out-total) */
    uint64_t auth_failures;   /* UNAUTHORIZED answers: failed or missing authentication, role */
    /* GET latency: from the decoded request to the answer handed to the transport (a miss
     * includes its load). Cumulative counts (<= dsc_get_latency_bounds[i]), count, sum. */
    uint64_t get_latency_buckets[DSC_GET_LATENCY_BUCKETS];
    uint64_t get_latency_count;
    double get_latency_sum_seconds;
} dsc_server_counters_t;
void dsc_server_counters(const dsc_server_t *srv, dsc_server_counters_t *out);
/* The jobs the server feeds (REPORTs), for /metrics; NULL for srv NULL. Lives as long as srv. */
dsc_jobs_t *dsc_server_jobs(dsc_server_t *srv);

#endif
