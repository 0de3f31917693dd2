/* Server internals shared by server.c (the server object, its event loops, mailboxes and stop),
 * tcp.c (connections: accept, read, framing, write queue, back-pressure, the TCP reply) and
 * dispatch.c (request decoding and per-operation handlers). */
#ifndef DSC_SERVER_SERVER_INT_H
#define DSC_SERVER_SERVER_INT_H

#include "authz.h"
#include "protocol.h"
#include "reply.h"
#include "server.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <uv.h>

typedef struct dsc_tcp_conn dsc_tcp_conn_t;

/* One event loop and what it owns. */
typedef struct dsc_srv_loop {
    dsc_server_t *srv;
    uv_loop_t loop;
    uv_tcp_t listener;
    uv_async_t wake;
    uv_timer_t drain_timer;
    pthread_t thread;
    int thread_started;
    dsc_mailbox_t mailbox; /* finished loads for this loop's connections */
    pthread_mutex_t mb_lock;
    dsc_waiter_t *mb_head, *mb_tail;
    int *handoff; /* accepted sockets handed to this loop by another one (under mb_lock) */
    uint32_t handoff_len, handoff_cap;
    int handoff_closed; /* the loop is finishing: sockets handed now are closed at once */
    dsc_tcp_conn_t *conns;
    uint32_t conn_count;
    int stopping;
} dsc_srv_loop_t;

struct dsc_server {
    dsc_catalog_t *cat;
    dsc_server_options_t opt;
    char name[64];
    uint16_t port;
    uint32_t loop_count;
    dsc_srv_loop_t *loops;
    atomic_int stop_requested;
    atomic_uint next_loop; /* round-robin target of the next accepted connection */
    atomic_uint_fast64_t connections, connections_total, bytes_out, protocol_errors, paused_reads;
    atomic_uint_fast64_t requests[DSC_SERVER_OPS][DSC_SERVER_STATUSES];
    /* GET latency histogram: per-bucket counts (the last one: above every bound), sum in ns */
    atomic_uint_fast64_t get_latency[DSC_GET_LATENCY_BUCKETS + 1];
    atomic_uint_fast64_t get_latency_sum_ns;
    _Atomic(dsc_cluster_t *) cluster;
    dsc_authz_t authz; /* credentials and anonymous policy (authz.h) */
};

static inline dsc_cluster_t *dsc__server_cluster(dsc_server_t *srv) {
    return atomic_load_explicit(&srv->cluster, memory_order_acquire);
}

/* Counts one answer in requests[opcode][status] (unknown opcodes at 0). */
static inline void dsc__server_count_request(dsc_server_t *srv, uint32_t opcode, uint32_t status) {
    if (opcode >= DSC_SERVER_OPS || !dsc_opcode_known(opcode))
        opcode = 0;
    if (status >= DSC_SERVER_STATUSES)
        status = DSC_STATUS_INTERNAL;
    atomic_fetch_add_explicit(&srv->requests[opcode][status], 1, memory_order_relaxed);
}

/* Counts one GET answered OK that was decoded at start_ns (dsc_now_ns). */
void dsc__server_count_get_latency(dsc_server_t *srv, uint64_t start_ns);

/* ---- server.c ---- */

/* Once a stopping loop has no connections left: closes its wake and timer handles (and the
 * sockets still handed to it), so that uv_run returns. */
void dsc__loop_maybe_finish(dsc_srv_loop_t *lc);

/* ---- tcp.c (all on the loop's thread) ---- */

/* The listener's connection callback: accepts and deals the socket to the loops in turn. */
void dsc__tcp_on_connection(uv_stream_t *listener, int status);
/* Serves a socket that another loop accepted. Takes the fd. */
void dsc__tcp_adopt(dsc_srv_loop_t *lc, int fd);
/* Stop: every connection stops reading and closes once its in-flight answers are sent. */
void dsc__tcp_drain(dsc_srv_loop_t *lc);
/* Drain timeout: closes every connection now. */
void dsc__tcp_close_all(dsc_srv_loop_t *lc);

/* ---- dispatch.c ---- */

/* Handles one request frame (header decoded, body of h->body_len bytes complete) received on
 * reply's connection: answers it through reply->ops now, or for a GET that waits on a load, on
 * the connection's thread once the load is delivered to reply->mailbox. */
void dsc__dispatch_frame(dsc_server_t *srv, dsc_reply_t *reply, const dsc_frame_header_t *h,
                         const uint8_t *body);

#endif
