/* The dscached data server: one libuv event loop per thread, each with its own SO_REUSEPORT
 * listening socket, graceful drain. Inside, calls going one way: server.c (this object, loops,
 * stop) -> tcp.c (connections, framing, back-pressure, zero-copy GET answers; tcp.h) ->
 * dispatch.c (requests; dispatch.h) -> rdma.c, all over the state in server_core.h. */
#ifndef DSC_SERVER_SERVER_H
#define DSC_SERVER_SERVER_H

#include "catalog.h"
#include "cluster.h"
#include "jobs.h"
#include "server_types.h"

#include <stdint.h>

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
/* Upper bounds (seconds) of the GET latency histogram's buckets (defined in server_core.c). */
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
    uint64_t peer_read_bytes; /* shard bytes answered to warming peers (PEER_READ) */
    /* GET latency: from the decoded request to the answer handed to the transport (a miss
     * includes its load). Cumulative counts (<= dsc_get_latency_bounds[i]), count, sum. */
    uint64_t get_latency_buckets[DSC_GET_LATENCY_BUCKETS];
    uint64_t get_latency_count;
    double get_latency_sum_seconds;
} dsc_server_counters_t;
void dsc_server_counters(const dsc_server_t *srv, dsc_server_counters_t *out);
/* The jobs the server feeds (REPORTs), for /metrics; NULL for srv NULL. Lives as long as srv. */
dsc_jobs_t *dsc_server_jobs(dsc_server_t *srv);
/* The send budget's series for /metrics (malloc'd; NULL on ENOMEM): dscache_send_rate_bytes
 * (--send-rate, 0: none), dscache_send_budget_waits_total and, with names != 0, per job queued
 * under it (job="" for connections that named none, "*" beyond 64 jobs):
 * dscache_job_sent_bytes_total, dscache_job_sent_responses_total,
 * dscache_job_queue_seconds_total (time its answers waited for the budget) and
 * dscache_job_weight. Any thread. */
char *dsc_server_fair_metrics_text(dsc_server_t *srv, int names);

#endif
