/* Catalog loading (readthrough.c), called by catalog.c: the I/O threads, whole-shard loads and
 * read-throughs of chunk ranges. It uses the catalog's state (catalog_state.h) and never calls
 * back into catalog.c. */
#ifndef DSC_SERVER_READTHROUGH_H
#define DSC_SERVER_READTHROUGH_H

#include "catalog_types.h"

/* An I/O thread (arg: the catalog), until cat->stopping: the first opt.io_threads started run
 * whole-shard loads, the next opt.backing_reads run read-throughs (coalescing queued adjacent
 * ranges of one shard, paced to opt.backing_rate). */
void *dsc__io_thread(void *arg);
/* Queues a read-through of the waiter's chunks (cat->lock held). Returns 0, DSC_EINVAL (range
 * beyond the shard), DSC_EUNAVAIL (read-through memory exhausted) or DSC_ENOMEM. */
int dsc__range_start_locked(dsc_catalog_t *cat, dsc_shard_slot_t *s, dsc_waiter_t *w);
/* The backing-read totals now (cat->lock held). */
void dsc__backing_totals_locked(dsc_catalog_t *cat, dsc_backing_totals_t *out);
/* Adds STAT's "backing" object to the store object (a cJSON *; cat->lock held). */
void dsc__backing_json_locked(dsc_catalog_t *cat, void *store_json);
/* At destroy, after the I/O threads ended: frees queued read-throughs and the index cache. */
void dsc__readthrough_free_all(dsc_catalog_t *cat);
/* Hands each waiter of a list (linked by next) its answer: through its mailbox (its event
 * loop), else by calling fn here. Not under cat->lock. */
void dsc__waiters_deliver(dsc_waiter_t *list);

#endif
