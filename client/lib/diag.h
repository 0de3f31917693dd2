/* Loader diagnosis state (docs/diagnosis.md): the counters the verdict reads (what next() waited
 * on, per-server answer times), the window they are differenced over, and the REPORT a loader
 * sends its servers. The rules themselves are in verdict.c (pure). */
#ifndef DSC_DIAG_H
#define DSC_DIAG_H

#include "dscache.h"
#include "verdict.h"

#include <stdint.h>

struct dsc_loader;

/* The verdict covers the last DSC_DIAG_WINDOW_S .. 2 * DSC_DIAG_WINDOW_S seconds. */
#define DSC_DIAG_WINDOW_S 5.0
/* Seconds between REPORTs to each server (dsc_loader_options_t.report_seconds 0). */
#define DSC_DIAG_REPORT_S 5.0
/* Request ids of REPORTs carry this bit, so that the I/O threads tell their answers apart. */
#define DSC_DIAG_REPORT_ID (1ull << 63)

typedef struct dsc_diag_snapshot {
    double at;
    dsc_verdict_counters_t c;
    dsc_verdict_server_t *servers; /* DSC_LOADER_MAX_SERVERS + 1 */
} dsc_diag_snapshot_t;

typedef struct dsc_diag {
    char job[64];                  /* label-safe job name (option, DSCACHE_JOB, host-pid) */
    dsc_verdict_counters_t c;      /* live counters beside loader->st (under the loader lock) */
    dsc_verdict_server_t *servers; /* live, per server slot */
    dsc_diag_snapshot_t base[2];   /* base[0] older: the window starts there */
    dsc_verdict_t last;            /* the latest verdict */
    double last_at;
} dsc_diag_t;

/* Allocates the per-server arrays and picks the job name. Returns 0 or DSC_ENOMEM. */
int dsc__diag_init(struct dsc_loader *loader, double now);
void dsc__diag_free(struct dsc_loader *loader);

/* What next() waits on now (DSC_WAIT_*) and, for the fetch causes, the server slot (else
 * UINT32_MAX). Under lock. */
int dsc__diag_waiting_on(struct dsc_loader *loader, uint32_t *server);
/* Adds `seconds` of stall to cause (and server). Under lock. */
void dsc__diag_blame(struct dsc_loader *loader, int cause, uint32_t server, double seconds);

/* Starts a new window base when the newer one is DSC_DIAG_WINDOW_S old (next() calls it, so
 * that the window follows the job even when nobody asks for the verdict). Under lock. */
void dsc__diag_tick(struct dsc_loader *loader, double now);
/* Rotates the window when due and computes the verdict over it into loader->diag.last (and
 * *out when not NULL). Under lock. */
void dsc__diag_verdict(struct dsc_loader *loader, double now, dsc_verdict_t *out);

/* A REPORT body (proto/report.h) for now: job, rank, world size, the window's stall and rates,
 * the verdict. Under lock. Returns the length, or < 0 (DSC_ENOSPC, DSC_EINVAL). */
int dsc__diag_report_body(struct dsc_loader *loader, double now, uint8_t *buf, size_t cap);

#endif
