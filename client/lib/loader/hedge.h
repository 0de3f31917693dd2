/* Loader stragglers: a server that stops answering while requests are outstanding on it is
 * checked with a PING on a connection of its own; one that does not answer that either is marked
 * slow (no new work, its queued chunks go to other owners, its outstanding requests re-issued to
 * another owner within a byte budget) and probed back. Above route.c; fetch.c records answers.
 * docs/cluster.md, "Stragglers". */
#ifndef DSC_HEDGE_H
#define DSC_HEDGE_H

#include "pipeline.h"

/* Reads DSCACHE_HEDGE, DSCACHE_HEDGE_MS and DSCACHE_HEDGE_BUDGET into loader->hedge (create,
 * before the threads start). Logs a WARN for a value it cannot use (the default stays). */
void dsc__hedge_init(dsc_loader_t *loader);
/* The straggler thread (arg: the loader): ticks every few ms under lock while the loader runs
 * and hedging is on. */
void *dsc__hedge_main(void *arg);
/* Peer p answered request req (submitted at req->sent_at) at `now`: progress, and its answer
 * time for the threshold. Under lock. */
void dsc__hedge_answered(dsc_loader_t *loader, uint32_t p, const dsc_source_req_t *req, double now);
/* The late answer to an abandoned request of peer p arrived (wire bytes, dropped): counts the
 * waste and whether its re-issue had arrived first. Under lock. */
void dsc__hedge_late(dsc_loader_t *loader, uint32_t p, const dsc_source_req_t *req, uint64_t wire);
/* A re-issued chunk (ent->hedge_req != 0) arrived from another server: counts the request won
 * when its last chunk came before the stalled server's answer. Under lock. */
void dsc__hedge_delivered(dsc_loader_t *loader, dsc_chunk_ent_t *ent);
/* Closes the watch connections (destroy, no thread runs any more). */
void dsc__hedge_free(dsc_loader_t *loader);

#endif
