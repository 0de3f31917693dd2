/* Loader routing: which peer reads a chunk (placement over the current view, load, fail-over to
 * other replicas and the fallback files), re-routing after failures and view changes. Below the
 * stages that call it (scheduler.c, fetch.c, decode.c, view.c); calls only chunks.c and pipeline.c.
 * Every function runs under the loader's lock. */
#ifndef DSC_ROUTE_H
#define DSC_ROUTE_H

#include "pipeline.h"

/* Picks the peer for a chunk: among its live owners not yet tried, the one its chunk group (8
 * consecutive chunks of a shard) hashes to, unless it has more work (queued + in flight bytes)
 * than the least loaded owner by over four chunks; else the least loaded live member; else the
 * fallback files (DSC__PEER_FALLBACK) unless they were tried for it; else -1. */
int dsc__route_chunk(dsc_loader_t *loader, dsc_chunk_ent_t *ent);
/* Queues ent on peer p (sets ent->peer). */
void dsc__peer_push(dsc_loader_t *loader, uint32_t p, dsc_chunk_ent_t *ent);
/* Per-peer bound on bytes in flight: opt.server_inflight_bytes, or 2 * inflight_bytes / the
 * number of members. */
uint64_t dsc__peer_inflight_limit(const dsc_loader_t *loader);
/* An I/O thread connected to peer p and its HELLO said `hash`: note a different view for the
 * view thread. */
void dsc__peer_hello(dsc_loader_t *loader, uint32_t p, uint64_t hash);
/* The chunk's bytes from peer ent->peer were corrupt (err, see dsc__is_corruption) and were never
 * handed out: marks that peer tried for the chunk, counts a checksum failure and a fail-over, and
 * queues the chunk on another replica, else on the fallback files. ent holds no buffers, is in no
 * queue and is not in flight (its budgets were given back). Returns the peer it was queued on, or
 * err when no source is left (the error is logged once; the caller fails the loader with it). */
int dsc__chunk_refetch(dsc_loader_t *loader, dsc_chunk_ent_t *ent, int err);
/* Frees a cancelled entry or puts a live one back in a peer's queue after a failure on peer
 * `failed` (sent: it was in flight there, not just queued: its budgets are given back). A
 * corrupt answer goes through dsc__chunk_refetch. Returns 0 or the error that ends the loader. */
int dsc__chunk_requeue(dsc_loader_t *loader, dsc_chunk_ent_t *ent, uint32_t failed, int err,
                       int sent);
/* Moves every queued chunk to where the current view routes it, in creation order (the order
 * the plan needs them). */
void dsc__route_requeue_all(dsc_loader_t *loader);

#endif
