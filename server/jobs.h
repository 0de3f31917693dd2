/* The training jobs a server feeds, as their loaders REPORT them (proto/PROTOCOL.md): a bounded
 * table keyed by (job, rank) whose entries expire DSC_JOB_EXPIRY_S after their last report. Read
 * by STAT ("jobs") and /metrics (dscache_job_*). Thread-safe: one mutex, never held for I/O. */
#ifndef DSC_SERVER_JOBS_H
#define DSC_SERVER_JOBS_H

#include "report.h"

#include <stdint.h>

#define DSC_JOBS_MAX 64        /* entries, so /metrics labels stay bounded */
#define DSC_JOB_EXPIRY_S 120.0 /* seconds a job stays listed after its last report (>= 60) */
#define DSC_JOB_PEER_MAX 64
#define DSC_JOB_OWNER_MAX 64  /* a credential name (DSC_AUTH_NAME_MAX + 1) */
#define DSC_JOBS_PER_OWNER 16 /* default share of the table one credential may hold */

typedef struct dsc_jobs dsc_jobs_t;

typedef struct dsc_job_info {
    char job[DSC_REPORT_MAX_JOB + 1];
    char dataset[DSC_MAX_NAME];
    char peer[DSC_JOB_PEER_MAX];   /* the reporting connection's address ("" when unknown) */
    char owner[DSC_JOB_OWNER_MAX]; /* the reporting credential ("": anonymous service) */
    uint32_t rank, world_size;
    double stall_fraction; /* 0..1 */
    uint64_t samples_per_s, bytes_per_s;
    int bottleneck; /* dsc_bottleneck_t */
    char verdict[DSC_REPORT_MAX_VERDICT + 1];
    double first_seen, last_report; /* the clock the caller passes (monotonic seconds) */
    uint64_t reports;
    int finished;  /* the last report had DSC_REPORT_FLAG_FINISHED: the loader closed */
    int has_hedge; /* its reports carry the straggler trailer: hedge below is this server's */
    dsc_report_hedge_t hedge;
} dsc_job_info_t;

/* This server as its loaders see it: the straggler trailers of the live entries summed. */
typedef struct dsc_jobs_hedge {
    uint32_t loaders;       /* live entries whose reports carry the trailer */
    uint32_t slow_now;      /* of which: the loader has this server marked slow now */
    dsc_report_hedge_t sum; /* counters summed (flags unused) */
} dsc_jobs_hedge_t;

/* Creates a table of `capacity` entries (1..DSC_JOBS_MAX; 0: DSC_JOBS_MAX) expiring after
 * expiry_s seconds (<= 0: DSC_JOB_EXPIRY_S). Returns 0 and *out, DSC_EINVAL or DSC_ENOMEM. */
int dsc_jobs_create(uint32_t capacity, double expiry_s, dsc_jobs_t **out);
/* NULL is a no-op. */
void dsc_jobs_destroy(dsc_jobs_t *jobs);

/* Each credential's share of the table: at most `per_owner` entries (0: DSC_JOBS_PER_OWNER;
 * capped at the capacity). Reports without an owner (anonymous service) are not limited. */
void dsc_jobs_set_share(dsc_jobs_t *jobs, uint32_t per_owner);
uint32_t dsc_jobs_share(const dsc_jobs_t *jobs);

/* Records a decoded report (strings copied) from peer (NULL: unknown) under credential owner
 * (NULL or "": anonymous) at time now. An entry for the same (owner, job, rank) is updated; else
 * a free or expired entry is used, except that an owner already holding its share replaces its
 * own least recent entry; when the table is full of live jobs, the least recent entry of the
 * owner holding the most entries is dropped, so that no credential pushes out the jobs of one
 * holding fewer than itself (counted in dsc_jobs_dropped). Returns 0, or 1 when another entry
 * was dropped for it. O(capacity). */
int dsc_jobs_report(dsc_jobs_t *jobs, const dsc_report_req_t *req, const char *peer,
                    const char *owner, double now);
/* Counts a REPORT refused (its dataset is not one the credential may read). */
void dsc_jobs_count_refused(dsc_jobs_t *jobs);
uint64_t dsc_jobs_refused(dsc_jobs_t *jobs);

/* Drops expired entries and copies the live ones into out (at most cap), sorted by job name
 * then rank. Returns the number of live entries (may exceed cap: then only cap were copied). */
uint32_t dsc_jobs_snapshot(dsc_jobs_t *jobs, double now, dsc_job_info_t *out, uint32_t cap);
/* The straggler figures of the live entries, summed (dsc_jobs_hedge_t). */
void dsc_jobs_hedge(dsc_jobs_t *jobs, double now, dsc_jobs_hedge_t *out);
/* Jobs dropped to make room since creation. */
uint64_t dsc_jobs_dropped(dsc_jobs_t *jobs);
/* Seconds an entry stays after its last report. */
double dsc_jobs_expiry(const dsc_jobs_t *jobs);

/* The live jobs as a JSON array (malloc'd, NUL-terminated): one object per (job, rank) with
 * job, rank, world_size, dataset, peer, stall (fraction), samples_per_s, bytes_per_s,
 * bottleneck (name), verdict, age_s (since the last report), reports, finished, and with the
 * straggler trailer "hedge": {hedges, hedges_won, hedge_bytes, wasted_bytes, slow_marks,
 * excused, slow}. NULL on ENOMEM. */
char *dsc_jobs_json(dsc_jobs_t *jobs, double now);
/* The dscache_job_* series in Prometheus text (malloc'd): dscache_jobs, dscache_jobs_dropped_total,
 * dscache_job_reports_refused_total, the dscache_straggler_* sums (dsc_jobs_hedge), and (names !=
 * 0) per live entry, labelled {job, rank,
 * dataset}: dscache_job_stall_fraction, dscache_job_samples_per_second,
 * dscache_job_bytes_per_second, dscache_job_report_age_seconds and
 * dscache_job_bottleneck{...,stage} 1. With names 0 (--metrics-names hide) the per-entry series
 * are left out: no job or dataset name appears. NULL on ENOMEM. */
char *dsc_jobs_metrics_text(dsc_jobs_t *jobs, double now, int names);

/* STAT answer with the jobs: takes over `json` (a STAT object, freed here) and returns it with
 * "jobs" (dsc_jobs_json) and "server": {"connections", "connections_total", "job_expiry_s",
 * "stragglers": {loaders, slow_now, hedges, hedges_won, hedge_bytes, wasted_bytes, slow_marks,
 * excused}} added (malloc'd), or
 * NULL on ENOMEM or when json is NULL or not an object. jobs may be NULL (an empty list). */
char *dsc_jobs_stat_add(dsc_jobs_t *jobs, char *json, double now, uint64_t connections,
                        uint64_t connections_total);

/* Per-dataset resident fraction for /metrics from a STAT JSON answer (not taken over):
 * dscache_dataset_resident_fraction{dataset} = cached_bytes / bytes. malloc'd, NULL on ENOMEM. */
char *dsc_resident_metrics_text(const char *stat_json);

#endif
