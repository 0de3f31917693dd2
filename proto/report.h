/* REPORT (proto/PROTOCOL.md): a loader tells a server who it is (job, rank, world size) and how
 * it fares (stall, rate, bottleneck). Pure encode/decode over memory: no I/O, no allocation,
 * safe on hostile input (tests/fuzz/fuzz_report.c). */
#ifndef DSC_REPORT_H
#define DSC_REPORT_H

#include "protocol.h"

#include <stddef.h>
#include <stdint.h>

#define DSC_REPORT_MAX_JOB 63         /* bytes of a job name (1..63 of [A-Za-z0-9_.:@/-]) */
#define DSC_REPORT_MAX_VERDICT 255    /* bytes of the verdict text (UTF-8, no NUL) */
#define DSC_REPORT_STALL_ONE 1000000u /* stall_ppm of a loader that only waits */
/* flags: the loader is closing; this is its last report (the job table shows it finished). */
#define DSC_REPORT_FLAG_FINISHED 1u

/* The trailer's flags: the loader has the addressed server marked slow now. */
#define DSC_REPORT_HEDGE_SLOW 1u

/* What one loader saw of the server it reports to (client/lib/loader/hedge.c), counters cumulative
 * since the loader started: its requests to that server re-issued to another owner, won by the
 * re-issue, their bytes, the server's late answers dropped, times marked slow, stalls excused
 * (it answered PING: reading through). */
typedef struct dsc_report_hedge {
    uint32_t flags; /* DSC_REPORT_HEDGE_SLOW; other bits ignored (later versions) */
    uint64_t hedges, hedges_won, hedge_bytes, wasted_bytes, slow_marks, excused;
} dsc_report_hedge_t;
#define DSC_REPORT_HEDGE_SIZE 52 /* bytes of the trailer */

typedef struct dsc_report_req {
    uint32_t flags;         /* 0 or DSC_REPORT_FLAG_FINISHED */
    dsc_str_t job;          /* job name, DSC_REPORT_MAX_JOB bytes at most, label-safe */
    dsc_str_t dataset;      /* dataset the job reads (1..63 bytes of [A-Za-z0-9_.-]) */
    uint32_t rank;          /* < world_size */
    uint32_t world_size;    /* >= 1 */
    uint32_t stall_ppm;     /* recent stall fraction in millionths (0..DSC_REPORT_STALL_ONE) */
    uint64_t samples_per_s; /* recent rate, samples per second */
    uint64_t bytes_per_s;   /* recent rate, decoded batch bytes per second */
    uint8_t bottleneck;     /* dsc_bottleneck_t, < DSC_BOTTLENECK_COUNT */
    dsc_str_t verdict;      /* the suggestion, 0..DSC_REPORT_MAX_VERDICT bytes, no NUL */
    /* The straggler trailer (PROTOCOL.md "REPORT straggler figures"): sent only to a server that
     * granted DSC_FEATURE_REPORT_HEDGE; has_hedge 0: absent (an older loader, or not granted). */
    int has_hedge;
    dsc_report_hedge_t hedge;
} dsc_report_req_t;

/* 1 when name[0..len) is a valid job name: 1..DSC_REPORT_MAX_JOB bytes of [A-Za-z0-9_.:@/-]
 * (safe as a Prometheus label value and in JSON without escaping). */
int dsc_report_job_valid(const char *name, size_t len);

/* Returns the bytes written, DSC_ENOSPC (cap too small), or DSC_EINVAL (a value the decoder
 * would reject). The body is at most DSC_REPORT_MAX_BODY bytes. */
#define DSC_REPORT_MAX_BODY                                                                        \
    (4 + 2 + DSC_REPORT_MAX_JOB + 2 + DSC_MAX_NAME + 12 + 16 + 1 + 2 + 255 + DSC_REPORT_HEDGE_SIZE)
int dsc_report_req_encode(const dsc_report_req_t *req, uint8_t *out, size_t cap);
/* The length of an encoded body (len bytes, has_hedge set) without its straggler trailer: what
 * goes to a server that did not grant DSC_FEATURE_REPORT_HEDGE. */
size_t dsc_report_req_strip_hedge(size_t len);
/* Returns 0 and *out (strings point into body), or DSC_EBADFRAME: truncation, 1..51 bytes after
 * the verdict (a cut trailer; bytes after a whole trailer are later versions' fields, ignored),
 * flags other than DSC_REPORT_FLAG_FINISHED, a bad job name, dataset name or verdict (NUL byte, too
 * long), world_size 0, rank >= world_size, stall_ppm over DSC_REPORT_STALL_ONE, or an unknown
 * bottleneck. On error *out is untouched. The OK response's body is empty or a
 * dsc_report_resp_t (below). */
int dsc_report_req_decode(const uint8_t *body, size_t len, dsc_report_req_t *out);

/* The OK answer to a REPORT: what the server knows that the loader's verdict needs (the backing
 * store behind its misses; proto/PROTOCOL.md "REPORT response"). Counters are cumulative since
 * the server started (the loader takes differences); the rest is the state now. A server
 * without these figures answers an empty body. */
typedef struct dsc_report_resp {
    uint32_t flags;              /* 0 */
    uint32_t backing_pool;       /* --backing-reads: read-throughs it keeps in flight at most */
    uint64_t hits, misses;       /* GETs answered from RAM / that waited for a backing read */
    uint64_t backing_bytes;      /* bytes read from the backing store (loads, read-throughs) */
    uint64_t backing_busy_us;    /* sum of the backing reads' durations, microseconds */
    uint64_t backing_wait_us;    /* time reads waited for --backing-rate, microseconds */
    uint64_t backing_rate;       /* --backing-rate, bytes/s (0: none) */
    uint64_t store_capacity;     /* --memory, bytes */
    uint32_t backing_latency_us; /* one backing read's latency now (moving average) */
    uint32_t backing_running;    /* backing reads running now */
} dsc_report_resp_t;
#define DSC_REPORT_RESP_SIZE 72
/* Writes DSC_REPORT_RESP_SIZE bytes. Returns DSC_REPORT_RESP_SIZE or DSC_ENOSPC. */
int dsc_report_resp_encode(const dsc_report_resp_t *resp, uint8_t *out, size_t cap);
/* Returns 1 and *out, 0 for an empty body (an older server: nothing known), or DSC_EBADFRAME
 * (1..DSC_REPORT_RESP_SIZE - 1 bytes, or flags != 0). Bytes after the first
 * DSC_REPORT_RESP_SIZE are fields of later versions, ignored. On error *out is untouched. */
int dsc_report_resp_decode(const uint8_t *body, size_t len, dsc_report_resp_t *out);

#endif
