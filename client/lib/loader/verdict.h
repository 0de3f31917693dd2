/* The verdict: from what a loader measured over a recent window (counter differences), its
 * options and per-server figures, which stage limits the job now, the figures that show it and
 * the change that would help (docs/diagnosis.md). Pure: no I/O, no locks, no allocation, no
 * clock; the loader keeps the counters and the window (stats.c). */
#ifndef DSC_VERDICT_H
#define DSC_VERDICT_H

#include "dscache.h" /* DSC_BOTTLENECK_*, DSC_STALL_WAIT_* */

#include <stddef.h>
#include <stdint.h>

/* What next() was waiting on while it stalled (the step it waits for, its least advanced
 * chunk): the indexes of dsc_stats_t.stall_waits (dscache.h).
 *   PLAN     the step is not planned / slotted yet
 *   QUEUED   a chunk is queued for a server, the byte budgets have room
 *   BUDGET   a chunk is queued or in flight while the in-flight budget (global or the
 *            server's) is full
 *   NETWORK  a chunk is in flight, the budgets have room
 *   DECODE   a chunk is received, not yet verified + decoded
 *   COLLATE  every chunk is decoded; the step is being (or waits to be) collated */
#define DSC_WAIT_PLAN DSC_STALL_WAIT_PLAN
#define DSC_WAIT_QUEUED DSC_STALL_WAIT_QUEUED
#define DSC_WAIT_BUDGET DSC_STALL_WAIT_BUDGET
#define DSC_WAIT_NETWORK DSC_STALL_WAIT_NETWORK
#define DSC_WAIT_DECODE DSC_STALL_WAIT_DECODE
#define DSC_WAIT_COLLATE DSC_STALL_WAIT_COLLATE
#define DSC_WAIT_COUNT 6

#define DSC_VERDICT_TEXT 256
#define DSC_VERDICT_ADDR 128

/* Per server slot, cumulative (the verdict works on differences). */
typedef struct dsc_verdict_server {
    uint64_t bytes;       /* wire bytes received from it */
    uint64_t responses;   /* GET answers received */
    double recv_seconds;  /* I/O threads' time waiting for and reading its answers */
    double wait_seconds;  /* of which: waiting for an answer's first bytes (header) */
    double stall_seconds; /* consumer stall blamed on chunks queued or in flight there */
    /* From the server's REPORT answers (proto/report.h dsc_report_resp_t; have_backing 0: none
     * received yet, or, in a window difference, not two of them): cumulative as sent, when
     * received (backing_at, monotonic s), and the state then. In a difference the counters and
     * backing_at are differences, the state is the newer answer's. */
    int have_backing;
    double backing_at;
    uint64_t srv_hits, srv_misses, backing_bytes;
    double backing_busy_s, backing_wait_s;
    uint64_t backing_rate, store_capacity;
    uint32_t backing_pool, backing_latency_us;
} dsc_verdict_server_t;

/* Cumulative counters the loader keeps (under its lock). */
typedef struct dsc_verdict_counters {
    double stall_seconds, compute_seconds;
    uint64_t batches, samples, bytes, wire_bytes;
    double decode_seconds, collate_seconds, h2d_seconds;
    double image_seconds;    /* image decoding, part of collate_seconds (decode stage, image.c) */
    uint64_t chunks_fetched; /* chunks received (first fetches and refetches) */
    uint64_t refetches;
    double wait[DSC_WAIT_COUNT]; /* stall split by what next() waited on */
} dsc_verdict_counters_t;

typedef struct dsc_verdict_input {
    double window_seconds;        /* wall time the differences cover */
    dsc_verdict_counters_t delta; /* counter differences over the window */
    /* The loader's start-up, when the window holds it: next()'s wait for the first batch
     * (connections, the first chunks, every one a miss on a cold cache), in seconds and split
     * by cause as delta.wait is. Part of delta; the rules leave it out (it says nothing about
     * what limits the job once it runs), and the evidence says so. */
    double startup_stall;
    double startup_wait[DSC_WAIT_COUNT];
    /* Options and facts of the loader. */
    uint32_t decode_threads;
    uint32_t connections; /* per server */
    int assist;           /* next() decodes while it waits */
    int device;           /* -1 host */
    uint64_t inflight_bytes;
    uint64_t server_inflight_bytes; /* the per-server bound in force */
    uint64_t cache_bytes;
    uint32_t shuffle_window; /* 0: not shuffled */
    uint64_t cache_need;     /* decoded bytes two shuffle windows need (0: unknown) */
    uint64_t window_fit;     /* the shuffle_window that fits cache_bytes (0: none) */
    /* Servers: differences over the window, and their addresses. */
    uint32_t server_count;
    const dsc_verdict_server_t *servers;
    const char *const *server_addrs;
} dsc_verdict_input_t;

typedef struct dsc_verdict {
    int bottleneck;                    /* dsc_bottleneck_t */
    double stall_fraction;             /* over the window */
    char server[DSC_VERDICT_ADDR];     /* DSC_BOTTLENECK_SERVER: the slow one */
    char evidence[DSC_VERDICT_TEXT];   /* the figures the verdict used */
    char suggestion[DSC_VERDICT_TEXT]; /* the change that would help */
    int too_few; /* DSC_BOTTLENECK_UNKNOWN for too few steps measured (the loader then keeps the
                    last verdict made over enough of them, diag.c), not for a stall no rule
                    names */
} dsc_verdict_t;

/* Below this stall fraction the trainer is the limit. */
#define DSC_VERDICT_STALL_MIN 0.01
/* Less measured than this (seconds of stall + compute) gives DSC_BOTTLENECK_UNKNOWN. */
#define DSC_VERDICT_MIN_BUSY 0.2
/* Refetches above this share of the chunks received make the verdict DSC_BOTTLENECK_CACHE. */
#define DSC_VERDICT_REFETCH_SHARE 0.05
/* Storage is the limit when at least this share of the servers' GETs missed their RAM ... */
#define DSC_VERDICT_MISS_SHARE 0.1
/* ... and their backing readers had on average this many reads in flight per server (or reads
 * waited for --backing-rate half the time). */
#define DSC_VERDICT_STORE_BUSY 1.0
/* A server is "slow" when its seconds per byte are this many times the others' median. */
#define DSC_VERDICT_SLOW_RATIO 3.0

/* The loader's diagnosis state (pipeline.h holds one; diag.c owns it, under the loader lock):
 * the live counters beside stats.st, the two window bases and the latest verdict. */
typedef struct dsc_diag_snapshot {
    double at;
    dsc_verdict_counters_t c;
    dsc_verdict_server_t *servers; /* the loader's peers + 1 */
} dsc_diag_snapshot_t;

typedef struct dsc_diag {
    char job[64];                        /* label-safe job name (option, DSCACHE_JOB, host-pid) */
    int started;                         /* the first batch was handed out */
    double startup_stall;                /* stall_seconds then: the wait for the first batch */
    double startup_wait[DSC_WAIT_COUNT]; /* ... split by cause */
    dsc_verdict_counters_t c;      /* live counters beside loader->st (under the loader lock) */
    dsc_verdict_server_t *servers; /* live, per server slot */
    dsc_diag_snapshot_t base[2];   /* base[0] older: the window starts there */
    dsc_verdict_t last;            /* the latest verdict */
    double last_at;
    dsc_verdict_t settled; /* the latest verdict made over enough steps (not UNKNOWN) ... */
    double settled_at;     /* ... and when (0: none yet): it stands while no step is measured */
} dsc_diag_t;

/* Fills *out from *in (the rules are in docs/diagnosis.md). Never fails. */
void dsc__verdict_compute(const dsc_verdict_input_t *in, dsc_verdict_t *out);

/* Formats a byte count as "256 MiB" / "1.5 GiB" / "640 KiB" into buf. Returns buf. */
const char *dsc__verdict_bytes(uint64_t bytes, char *buf, size_t cap);

#endif
