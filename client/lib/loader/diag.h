/* Loader diagnosis state (docs/diagnosis.md): the counters the verdict reads (what next() waited
 * on, per-server answer times), the window they are differenced over, and the REPORT a loader
 * sends its servers. The rules themselves are in verdict.c (pure). */
#ifndef DSC_DIAG_H
#define DSC_DIAG_H

#include "pipeline.h" /* dsc_loader_t; its diag member is a dsc_diag_t (verdict.h) */
#include "verdict.h"

#include <stdint.h>

/* The verdict covers the last DSC_DIAG_WINDOW_S .. 2 * DSC_DIAG_WINDOW_S seconds. */
#define DSC_DIAG_WINDOW_S 5.0
/* Seconds between REPORTs to each server (dsc_loader_options_t.report_seconds 0). */
#define DSC_DIAG_REPORT_S 5.0

/* Allocates the per-server arrays and picks the job name. Returns 0 or DSC_ENOMEM. */
int dsc__diag_init(dsc_loader_t *loader, double now);
void dsc__diag_free(dsc_loader_t *loader);

/* What next() waits on now (DSC_WAIT_*) and, for the fetch causes, the server slot (else
 * UINT32_MAX). Under lock. */
int dsc__diag_waiting_on(dsc_loader_t *loader, uint32_t *server);
/* Adds `seconds` of stall to cause (and server). Under lock. */
void dsc__diag_blame(dsc_loader_t *loader, int cause, uint32_t server, double seconds);

/* Starts a new window base when the newer one is DSC_DIAG_WINDOW_S old (next() calls it, so
 * that the window follows the job even when nobody asks for the verdict). Under lock. */
void dsc__diag_tick(dsc_loader_t *loader, double now);
/* The share of the steps' time over the verdict's window that next() waited on fetching (the
 * wait causes plan, queued, budget and network; the wait for the first batch left out), or 0
 * with under DSC_VERDICT_MIN_BUSY seconds of steps measured. For the scheduler: a loader that
 * waits on its fetches is short of fetch time, and looks ahead into the next epoch as far as
 * cache_bytes allows. Under lock. */
double dsc__diag_recent_fetch_stall(const dsc_loader_t *loader);
/* A backing read's latency (the server's moving average) from which its store counts as slow:
 * local disks and the page cache answer in well under it, network file systems and object
 * stores above it. */
#define DSC_DIAG_SLOW_STORE_US 2000
/* 1 when the servers' REPORT answers say they read from a slow backing store: misses are at
 * least 5% of the GETs they answered (over the verdict's window where two answers bound it, else
 * since the server started), with at least 16 GETs counted, and a server's backing reads take
 * DSC_DIAG_SLOW_STORE_US or more. For the scheduler: a store read
 * through is a bandwidth that an idle moment at the epoch boundary wastes for good, so the next
 * epoch is then fetched ahead as far as the in-flight budget allows. Under lock. */
int dsc__diag_store_reads(const dsc_loader_t *loader);
/* Rotates the window when due and computes the verdict over it into loader->diag.last (and
 * *out when not NULL). Under lock. */
void dsc__diag_verdict(dsc_loader_t *loader, double now, dsc_verdict_t *out);

/* A REPORT body (proto/report.h) for now to peer p: job, rank, world size, the window's stall and
 * rates, the verdict, and the straggler trailer with what this loader saw of p (hedge.c; the
 * source leaves it out for a server that did not grant DSC_FEATURE_REPORT_HEDGE). Under lock.
 * Returns the length, or < 0 (DSC_ENOSPC, DSC_EINVAL). */
int dsc__diag_report_body(dsc_loader_t *loader, uint32_t p, double now, uint8_t *buf, size_t cap);
/* At destroy, every other thread joined: one last REPORT with DSC_REPORT_FLAG_FINISHED to each
 * server that was reported to and is up, each on a fresh connection bounded by
 * min(timeout_ms, 1 s), so that its job table shows the job finished. Blocks; errors are
 * ignored (debug log). */
void dsc__diag_final_report(dsc_loader_t *loader);

#endif
