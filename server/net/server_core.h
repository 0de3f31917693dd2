/* The server's state, below its layers: server.c (the server object, its event loops, mailboxes
 * and stop) calls tcp.c (connections: accept, read, framing, write queue, back-pressure, the TCP
 * reply; tcp.h), which calls dispatch.c (request decoding and per-operation handlers;
 * dispatch.h); each of them, and rdma.c, uses the structures and counters here. Nothing here
 * calls up into a layer. Not for other modules: they use server.h. */
#ifndef DSC_SERVER_SERVER_CORE_H
#define DSC_SERVER_SERVER_CORE_H

#include "authz.h"
#include "catalog.h"
#include "cluster.h"
#include "fairq.h"
#include "jobs.h"
#include "protocol.h"
#include "reply.h"
#include "server_types.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <uv.h>

typedef struct dsc_tcp_conn dsc_tcp_conn_t;

/* The largest request body accepted, advertised as max_body in HELLO and enforced exactly:
 * requests are a name and a few integers (PING echoes up to this much). */
#define DSC_SERVER_MAX_BODY (64u << 10)

/* Open connections of one peer address (tcp.c, under dsc_server.peer_lock). */
typedef struct dsc_peer_slot {
    uint8_t addr[16]; /* IPv6, or IPv4-mapped */
    uint32_t count;   /* 0: free (or a former peer, dropped at the next growth) */
    uint32_t used;    /* the slot has held an address */
} dsc_peer_slot_t;

/* One event loop and what it owns. */
typedef struct dsc_srv_loop {
    dsc_server_t *srv;
    uv_loop_t loop;
    int listen_fd;           /* this loop's SO_REUSEPORT socket, accepted from by accept_poll */
    uv_poll_t accept_poll;   /* readable listen_fd: accept (tcp.c) */
    uv_timer_t accept_timer; /* out of descriptors: accepting resumes when it fires */
    uint32_t accept_backoff_ms;
    int reserve_fd;   /* a descriptor kept spare, given up to shed connections on EMFILE */
    uv_timer_t tick;  /* time-outs and the server-wide bound's resumption (tcp.c) */
    uint32_t waiting; /* this loop's GETs waiting for loads: the loop ends only at 0 */
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
    uv_timer_t fair_timer; /* with --send-rate: fires when the budget allows more (tcp.c) */
    /* Pieces of answers for this loop's connections taken off srv->fq by another loop's
     * service, written on the next wake (under srv->send_budget.lock). */
    struct out_msg *fair_inbox_head, *fair_inbox_tail;
} dsc_srv_loop_t;

struct dsc_server {
    dsc_catalog_t *cat;
    dsc_server_options_t opt;
    const dsc_reply_layer_t *layer; /* the transport layered over TCP connections (reply.h) */
    char name[64];
    uint16_t port;
    uint32_t loop_count;
    dsc_srv_loop_t *loops;
    atomic_int stop_requested;
    atomic_uint next_loop; /* round-robin target of the next accepted connection */
    atomic_uint_fast64_t connections, connections_total, bytes_out, protocol_errors, paused_reads;
    atomic_uint_fast64_t held_total; /* bytes held for all connections (see tcp.c held_update) */
    atomic_uint_fast64_t timeouts, peer_refusals;
    atomic_uint_fast64_t peer_read_bytes; /* PEER_READ bytes answered to warming peers */
    pthread_mutex_t peer_lock;
    dsc_peer_slot_t *peers; /* open-addressing table, peer_cap slots (power of two) */
    uint32_t peer_cap, peer_used;
    uint64_t peer_log_ms; /* last time a per-peer refusal was logged (under peer_lock) */
    atomic_uint_fast64_t requests[DSC_SERVER_OPS][DSC_SERVER_STATUSES];
    /* GET latency histogram: per-bucket counts (the last one: above every bound), sum in ns */
    atomic_uint_fast64_t get_latency[DSC_GET_LATENCY_BUCKETS + 1];
    atomic_uint_fast64_t get_latency_sum_ns;
    _Atomic(dsc_cluster_t *) cluster;
    dsc_authz_t authz;           /* credentials and anonymous policy (authz.h) */
    dsc_jobs_t *jobs;            /* the jobs fed, from their REPORTs (jobs.h) */
    dsc_fq_budget_t send_budget; /* --send-rate, shared by the loops; its lock guards fq */
    dsc_fq_t fq;                 /* answers waiting for the budget, every loop's (tcp.c) */
    dsc_fq_totals_t fair_totals; /* bytes sent and time queued per job (with --send-rate) */
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

/* Counts bytes a PEER_READ answered (a warming peer's copy from this server's RAM). */
static inline void dsc__server_count_peer_served(dsc_server_t *srv, uint64_t bytes) {
    atomic_fetch_add_explicit(&srv->peer_read_bytes, bytes, memory_order_relaxed);
}

/* Counts one GET answered OK that was decoded at start_ns (dsc_now_ns). */
void dsc__server_count_get_latency(dsc_server_t *srv, uint64_t start_ns);

/* Upper bounds (seconds) of the GET latency histogram's buckets (also in server.h). */
extern const double dsc_get_latency_bounds[DSC_GET_LATENCY_BUCKETS];

#endif
