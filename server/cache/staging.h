/* Read-ahead staging (staging.c), called by catalog.c under cat->lock: chunk ranges that loaders
 * said they will ask for next (HINT) are read from backing storage ahead of their GETs, in
 * deadline order, through the read-through pool (readthrough.h), into a bounded staging area
 * apart from the store (the MinIO resident set is untouched). A staged range is kept until each
 * of its chunks was served to every hinter that named it, or its TTL passes. The same records
 * make read-throughs single-flight: a GET whose chunks are being read (for a hint or for another
 * GET) waits for that read. Uses the catalog's state (catalog_state.h), never calls catalog.c. */
#ifndef DSC_SERVER_STAGING_H
#define DSC_SERVER_STAGING_H

#include "catalog_types.h"
#include "hint.h"

#include <stdint.h>

/* Creates the staging state of cat (cat->opt.staging_memory 0: off; every call below is then a
 * no-op answering "not staged"). Returns 0 or DSC_ENOMEM. */
int dsc__staging_create(dsc_catalog_t *cat);
/* At destroy, after the I/O threads ended and the read-through queue was freed: drops every
 * staged range (their buffers are freed). */
void dsc__staging_destroy(dsc_catalog_t *cat);

/* One hinted range of a shard of ds (cat->lock held), for the anonymous tenant: chunks [first,
 * first + count) will be asked for by `hinter` in about due_ms. Returns 1 when accepted (queued to
 * be read ahead, being read, or staged), 0 when skipped (staging off or full, shard resident,
 * loading, bad, or one a GET would load whole, range beyond the shard, overlapping another staged
 * range). */
int dsc__staging_hint_locked(dsc_catalog_t *cat, dsc_shard_slot_t *s, uint64_t hinter,
                             uint32_t first, uint32_t count, uint32_t due_ms, double now);
/* A HINT's ranges of ds (proto/hint.h) from `hinter`, a loader of job `job` under credential
 * `cred` ("" anonymous, or no job REPORTed): as dsc__staging_hint_locked for each range, within
 * the part of the staging memory, of the ranges tracked and of the backing readers that is the
 * tenant's (cred, job): an equal part per credential holding ranges, of it an equal part per
 * job. A range beyond that part is trimmed. Takes cat->lock. *out: the ranges accepted and
 * trimmed, the tenant's share of the memory and the bytes it holds. */
void dsc__staging_hint_request(dsc_catalog_t *cat, dsc_dataset_t *ds, const char *cred,
                               const char *job, uint64_t hinter, const dsc_hint_req_t *req,
                               dsc_hint_resp_t *out);
/* Starts what the hints queued, in deadline order, within the staging memory and the share of
 * the backing readers hints may use (cat->lock held). */
void dsc__staging_pump_locked(dsc_catalog_t *cat, double now);

/* A GET of a non-resident shard (cat->lock held): when a staged range covers the waiter's chunks,
 * fills *hold (a reference on the staged buffer) and returns 1; when they are being read (or
 * queued to be, by a hint), queues the waiter on that read and returns 0 (it is delivered once,
 * like any miss); otherwise returns DSC__STAGE_NONE and the caller goes on as without staging. */
#define DSC__STAGE_NONE (-1)
int dsc__staging_acquire_locked(dsc_catalog_t *cat, dsc_shard_slot_t *s, dsc_waiter_t *w,
                                dsc_hold_t *hold);
/* A read-through for a GET (cat->lock held) that later GETs of the same chunks join instead of
 * reading them a second time. Returns what dsc__range_start_locked returns (0: queued). */
int dsc__staging_read_locked(dsc_catalog_t *cat, dsc_shard_slot_t *s, dsc_waiter_t *w);

/* The staging totals now (cat->lock held). */
void dsc__staging_totals_locked(dsc_catalog_t *cat, dsc_staging_totals_t *out);
/* Adds STAT's "staging" object to the store object (a cJSON *; cat->lock held). */
void dsc__staging_json_locked(dsc_catalog_t *cat, void *store_json);

#endif
