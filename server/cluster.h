/* Cluster membership of dscached: the member list (literal, file or DNS), this server's own
 * address in it, which shards it owns (rendezvous placement, R replicas), refreshes of the list
 * on a libuv timer, and the MEMBERS / STAT answers. See proto/PROTOCOL.md, Membership. */
#ifndef DSC_SERVER_CLUSTER_H
#define DSC_SERVER_CLUSTER_H

#include "catalog.h"
#include "placement.h"

#include <stdatomic.h>
#include <stdint.h>
#include <uv.h>

#define DSC_CLUSTER_DEFAULT_REPLICAS 2
#define DSC_CLUSTER_DEFAULT_REFRESH 10 /* seconds between DNS resolutions */

typedef struct dsc_cluster dsc_cluster_t;

/* One immutable view of the membership, shared by reference count: whoever holds it (a STAT
 * answer, a warm-up) reads it without locks while a refresh installs the next one. */
typedef struct dsc_cluster_view {
    atomic_int refs;
    dsc_members_t members; /* canonical; empty while a file/DNS list is not known yet */
    uint64_t hash;         /* dsc_members_hash(members); 0 for an empty list */
    int self_index;        /* index of the advertise address in members, or -1 */
    uint32_t replicas;
    int clustered;       /* 0: single-node mode, owns every shard */
    uint64_t generation; /* 1 for the first view, +1 per change */
} dsc_cluster_view_t;

typedef struct dsc_cluster_options {
    /* NULL or "": single-node mode. Else "HOST:PORT,...", "file:PATH" or "dns:NAME:PORT". */
    const char *members;
    /* This server's own "HOST:PORT" in the member list (required; an IPv6 host without brackets
     * is bracketed: "fd00::1:7070" -> "[fd00::1]:7070"). */
    const char *advertise;
    uint32_t replicas;        /* 1..DSC_MAX_REPLICAS (0: DSC_CLUSTER_DEFAULT_REPLICAS) */
    uint32_t refresh_seconds; /* DNS re-resolution period (0: DSC_CLUSTER_DEFAULT_REFRESH) */
} dsc_cluster_options_t;

/* Creates the cluster state and resolves the member list once (blocking: file read or
 * getaddrinfo). A literal list that does not parse is an error; a file that is missing or
 * unreadable, or a DNS name that does not resolve yet, is logged and leaves an empty list (owns
 * nothing) until a refresh succeeds. An advertise address not in a known list is logged as a
 * warning. Returns 0 and *out, DSC_EINVAL (bad spec, advertise or replicas; the reason is
 * logged), DSC_ENOMEM. */
int dsc_cluster_create(const dsc_cluster_options_t *options, dsc_cluster_t **out);
/* Frees; call after dsc_cluster_stop's handles are closed and no view is held any more
 * (views still held are freed by their last release). NULL is a no-op. */
void dsc_cluster_destroy(dsc_cluster_t *cl);

/* The current view, with a reference the caller drops with dsc_cluster_view_release. Never
 * NULL. Thread-safe; takes a mutex held for a pointer load and an atomic increment. */
dsc_cluster_view_t *dsc_cluster_acquire(dsc_cluster_t *cl);
/* Drops a reference (any thread); the last one frees the view. NULL is a no-op. */
void dsc_cluster_view_release(dsc_cluster_view_t *view);
/* The hash a server announces in HELLO: the current view's hash when clustered, 0 in single-node
 * mode. Lock-free. cl NULL: 0. */
uint64_t dsc_cluster_hello_hash(const dsc_cluster_t *cl);
/* This server's own "HOST:PORT" (canonical form), valid until destroy. */
const char *dsc_cluster_self(const dsc_cluster_t *cl);

/* 1 when this server holds (dataset, shard) in `view`: single-node mode owns everything; else
 * the advertise address is one of the R owners by rendezvous placement. 0 when it is not a
 * member or not an owner. O(members * R). */
int dsc_cluster_owns(const dsc_cluster_view_t *view, const char *dataset, uint32_t shard_id);

/* Installs a new member list (taking its entries: *members is left empty) as the current view
 * when it differs from the current one. Logs old and new counts and hashes, warns when the
 * advertise address is not in it. Returns 1 (changed), 0 (same list: nothing done),
 * DSC_EINVAL (single-node mode has no list to change). Thread-safe. */
int dsc_cluster_set_members(dsc_cluster_t *cl, dsc_members_t *members);
/* Resolves the member spec again (blocking I/O) and installs the result as above. Returns 1
 * (changed), 0 (unchanged), or the resolution error (the current view is kept). Single-node
 * mode: 0. */
int dsc_cluster_refresh(dsc_cluster_t *cl);

/* Warms the shards this server owns in the current view, as dsc_catalog_warm_all does,
 * blocking until the loads are done (or dsc_cluster_stop); logs "warming N of M shards (owned:
 * primary or replica)" and never evicts to make room. Single-node mode: dsc_catalog_warm_all
 * (also ended by dsc_cluster_stop).
 * Returns the number of loads started. Not on an event loop. */
int dsc_cluster_warm(dsc_cluster_t *cl, dsc_catalog_t *cat);

/* Starts the refresh machinery on `loop` (the control loop): a one-second timer that re-reads a
 * members file when its mtime, size or inode changes and re-resolves DNS every refresh_seconds;
 * resolution and warm-ups run on the libuv thread pool, one at a time. After a change the shards
 * newly owned are warmed in the background (nothing is evicted). Does nothing in single-node
 * mode or for a literal list. Returns 0 or a libuv error converted to DSC_E*. Loop thread only. */
int dsc_cluster_start(dsc_cluster_t *cl, uv_loop_t *loop, dsc_catalog_t *cat);
/* Re-reads the member spec now (SIGHUP). Loop thread only. */
void dsc_cluster_reload(dsc_cluster_t *cl);
/* Closes the timer and asks a running warm-up to stop waiting; work already queued finishes,
 * after which the loop has nothing left of the cluster. Loop thread only, idempotent. */
void dsc_cluster_stop(dsc_cluster_t *cl);

/* What readiness and the cluster gauges need, in one view. */
typedef struct dsc_cluster_counts {
    uint32_t members; /* length of the member list (1 in single-node mode) */
    int self_member;  /* 1 when this server is in it (always in single-node mode) */
    int clustered;    /* 0: single-node mode */
    int known;        /* 0 while a file/DNS list has not been read yet */
    uint64_t owned;   /* shards owned (primary or replica) over every dataset */
    uint64_t owned_resident;
    uint64_t smallest_missing; /* bytes of the smallest owned shard not resident (0: none) */
    uint64_t missing_bytes;    /* bytes of the owned shards not resident (warm-up left to do) */
} dsc_cluster_counts_t;

/* Fills *out from the current view and the catalog's residency. Thread-safe; O(shards * R *
 * members). cl NULL: single-node figures over cat. */
void dsc_cluster_counts(dsc_cluster_t *cl, dsc_catalog_t *cat, dsc_cluster_counts_t *out);

/* MEMBERS body: {"members":["h:p",...],"replicas":R,"hash":"<16 hex>","self":"h:p",
 * "clustered":true|false} (single-node mode: members = [self]). malloc'd, NULL when out of
 * memory. Thread-safe. */
char *dsc_cluster_members_json(dsc_cluster_t *cl);
/* STAT body: the catalog's STAT JSON (catalog_json, not consumed) with, at the top level,
 * "cluster":{"members_hash","members","replicas","self","self_member","clustered"} and
 * "members_hash", and in each dataset "members_hash", "owned_shards" (owned in that view),
 * "owned_cached_shards" (owned and resident) and "shard_map": one character per shard, 'O'
 * owned and resident, 'o' owned and not resident, 'c' resident but not owned, '.' neither.
 * malloc'd, NULL when out of memory or catalog_json is not a JSON object. Thread-safe. */
char *dsc_cluster_stat_json(dsc_cluster_t *cl, dsc_catalog_t *cat, const char *catalog_json);

#endif
