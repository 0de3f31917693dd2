/* The server's option and size types, shared by its public header (server.h) and its state
 * (server_core.h). Types only: no functions, so that it sits below every server layer. */
#ifndef DSC_SERVER_SERVER_TYPES_H
#define DSC_SERVER_SERVER_TYPES_H

#include "credstore.h"

#include <stdint.h>

typedef struct dsc_server dsc_server_t;

/* A job's share of the send budget relative to the others' (--job-weight [CRED:]NAME=W). */
typedef struct dsc_job_weight {
    char owner[64]; /* the job's credential ("": anonymous service) */
    char name[64];  /* a job name as REPORTed (DSC_REPORT_MAX_JOB + 1) */
    uint32_t weight;
} dsc_job_weight_t;

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
    uint64_t send_rate;           /* TCP response bytes/s sent at most, all connections together
                                     (0: no cap); what waits is queued per job (fairq.h) */
    int fair_off;                 /* with send_rate: queued responses go in arrival order, not
                                     by deficit round-robin between jobs (--fair off) */
    const dsc_job_weight_t *job_weights; /* not owned; outlives the server */
    uint32_t job_weight_count;
} dsc_server_options_t;

/* Sizes of the request counters (requests[op][status]: op is the opcode, unknown ones counted at
 * 0, status a dsc_status_t) and of the GET latency histogram. */
#define DSC_SERVER_OPS 34
#define DSC_SERVER_STATUSES 11
#define DSC_GET_LATENCY_BUCKETS 12

#endif
