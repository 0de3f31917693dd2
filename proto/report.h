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
} dsc_report_req_t;

/* 1 when name[0..len) is a valid job name: 1..DSC_REPORT_MAX_JOB bytes of [A-Za-z0-9_.:@/-]
 * (safe as a Prometheus label value and in JSON without escaping). */
int dsc_report_job_valid(const char *name, size_t len);

/* Returns the bytes written, DSC_ENOSPC (cap too small), or DSC_EINVAL (a value the decoder
 * would reject). The body is at most DSC_REPORT_MAX_BODY bytes. */
#define DSC_REPORT_MAX_BODY (4 + 2 + DSC_REPORT_MAX_JOB + 2 + DSC_MAX_NAME + 12 + 16 + 1 + 2 + 255)
int dsc_report_req_encode(const dsc_report_req_t *req, uint8_t *out, size_t cap);
/* Returns 0 and *out (strings point into body), or DSC_EBADFRAME: truncation, trailing bytes,
 * flags other than DSC_REPORT_FLAG_FINISHED, a bad job name, dataset name or verdict (NUL byte, too
 * long), world_size 0, rank >= world_size, stall_ppm over DSC_REPORT_STALL_ONE, or an unknown
 * bottleneck. On error *out is untouched. The OK response has an empty body. */
int dsc_report_req_decode(const uint8_t *body, size_t len, dsc_report_req_t *out);

#endif
