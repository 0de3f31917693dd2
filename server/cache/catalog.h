/* Datasets served by this process and their shards in the RAM store: lookup without locks on
 * the read path (per-shard atomic reference counts, a table swapped on rescan), loads on a pool
 * of I/O threads (one load per shard however many requests wait), eviction, statistics. */
#ifndef DSC_SERVER_CATALOG_H
#define DSC_SERVER_CATALOG_H

#include "catalog_types.h"
#include "hint.h"
#include "manifest.h"
#include "store.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Creates an empty catalog over a store (not owned). Returns 0 and *out, or DSC_ENOMEM. */
int dsc_catalog_create(dsc_store_t *store, const dsc_catalog_options_t *options,
                       dsc_catalog_t **out);
/* Stops the loader threads and frees every dataset. Loads still queued are dropped: call it once
 * nothing waits any more. NULL is a no-op. */
void dsc_catalog_destroy(dsc_catalog_t *cat);

/* Adds a dataset directory (manifest.json + shards) at start-up. A directory without a manifest
 * yet is remembered (logged) and served once a rescan finds one. Returns 0, DSC_ENOENT (no such
 * directory), a manifest error (DSC_EBADMANIFEST, DSC_EIO, ...), DSC_EINVAL (its dataset name
 * belongs to another directory: logged, naming both), or DSC_ENOMEM. */
int dsc_catalog_add_dir(dsc_catalog_t *cat, const char *dir);
/* Rereads every directory's manifest that changed: new datasets and shards appear, removed ones
 * go (their memory is freed once no response holds it), a dataset whose manifest did not change
 * keeps its cached shards. A manifest whose file is the one read before (same device, inode, size
 * and mtime) is not read again, nor a refused one logged again. Nothing blocks: manifests are
 * opened O_NONBLOCK, only regular files are read (lstat first), under a --data-root no symbolic
 * link is followed out of the root (a dataset directory) or at all (a manifest, a shard file),
 * and the size is checked before reading. A dataset name belongs to the directory that served it
 * first until that directory is removed, loses its manifest or names another dataset there: a
 * claimant is refused (ERROR naming both directories, listed by STAT), whatever the directories'
 * order. The bookkeeping lock is never held across file I/O. The read-through index cache is
 * emptied when the table changes or !quiet (files may have been rewritten). Returns the number of
 * datasets served afterwards, DSC_ECANCELED (dsc_catalog_cancel_rescans: nothing changed) or
 * DSC_ENOMEM. Not on an event loop. */
int dsc_catalog_rescan(dsc_catalog_t *cat);
/* dsc_catalog_rescan; quiet: the "N datasets served" line only when the table changed (the
 * root watcher's rescans). */
int dsc_catalog_rescan_quiet(dsc_catalog_t *cat, int quiet);
/* Adds a --data-root directory (at start-up, before any rescan thread runs): every subdirectory
 * whose name does not start with '.' and that holds a complete manifest is a dataset, found by
 * each rescan; one without a manifest yet is ignored until it has one. Scans it at once.
 * Returns 0, DSC_ENOENT (not a directory) or DSC_ENOMEM. */
int dsc_catalog_add_root(dsc_catalog_t *cat, const char *root);
/* The --data-root directories (owned by the catalog, fixed after start-up). Returns the count. */
uint32_t dsc_catalog_roots(dsc_catalog_t *cat, const char ***roots);
/* For shutdown: a rescan under way gives up at its next directory (the table stays as it is), and
 * later ones return at once. Any thread. */
void dsc_catalog_cancel_rescans(dsc_catalog_t *cat);
/* 1 (once) when a load found a dataset replaced on disk before a rescan saw it (its shard
 * files are the new version's, its manifest still the old one's): the root watcher then
 * rescans at once. 0 otherwise. */
int dsc_catalog_take_rescan_request(dsc_catalog_t *cat);

/* Looks a dataset up by name (not NUL-terminated). The pointer stays valid until destroy (a
 * dataset dropped by a rescan is only retired). Lock-free. NULL when not served. */
dsc_dataset_t *dsc_catalog_find(dsc_catalog_t *cat, const char *name, size_t len);
const dsc_manifest_t *dsc_dataset_manifest(const dsc_dataset_t *ds);
/* The manifest as JSON (owned by the dataset) and its length. */
const char *dsc_dataset_manifest_json(const dsc_dataset_t *ds, size_t *len);
/* Shard `id`, or NULL. */
dsc_shard_slot_t *dsc_dataset_shard_slot(dsc_dataset_t *ds, uint32_t id);
/* The dataset's version: dsc_dataset_version of its manifest JSON (PROTOCOL.md). */
uint64_t dsc_dataset_version_of(const dsc_dataset_t *ds);
/* Counts bytes sent for this dataset (STAT, metrics). */
void dsc_dataset_count_served(dsc_dataset_t *ds, uint64_t bytes);

/* Takes a reference on a shard's bytes. Returns 1 with *hold filled (a hit: lock-free), 0 when
 * the shard is being loaded and `waiter` will be delivered exactly once (a miss), or
 * DSC_ECORRUPT (marked bad), DSC_EUNAVAIL (read-through memory exhausted), DSC_EINVAL (the
 * waiter's chunk range is beyond the shard), DSC_ENOMEM. A miss on a shard that gets room in
 * the store loads the whole shard (later GETs hit); one that does not (minio with a full store,
 * or a shard larger than the store) reads the waiter's chunks through: the shard's header and
 * index once (kept in a bounded index cache), then the chunks' byte range, each chunk's stored
 * checksum verified before delivery. */
int dsc_catalog_acquire(dsc_catalog_t *cat, dsc_shard_slot_t *slot, dsc_waiter_t *waiter,
                        dsc_hold_t *hold);
/* Takes a reference on a shard's bytes only when it is resident and has no chunk known damaged
 * (a PEER_READ: never loads, never reads through, never counted as a hit or a miss). Returns 1
 * with *hold filled, else 0. Lock-free. */
int dsc_catalog_peek(dsc_catalog_t *cat, dsc_shard_slot_t *slot, dsc_hold_t *hold);
/* Whole-shard loads try `source` before the backing storage from now on (NULL: none again). The
 * source must outlive the catalog's I/O threads (dsc_catalog_destroy). Any thread. */
void dsc_catalog_set_peer_source(dsc_catalog_t *cat, const dsc_peer_source_t *source);
/* 1 when read-ahead is on (options.staging_memory > 0). */
int dsc_catalog_staging_on(const dsc_catalog_t *cat);
/* A HINT's ranges of ds (proto/hint.h) from `hinter`: each non-resident range that fits is read
 * ahead in deadline order into the staging area (staging.h). Skips what it cannot stage (unknown
 * shards, ranges beyond a shard, resident shards, a full area). Takes the bookkeeping lock once;
 * never blocks on I/O. Returns the ranges accepted (0 when read-ahead is off). */
uint32_t dsc_catalog_hint(dsc_catalog_t *cat, dsc_dataset_t *ds, uint64_t hinter,
                          const dsc_hint_req_t *req);
/* Drops the reference of a hold (any thread). A zeroed hold is a no-op. */
void dsc_hold_release(dsc_catalog_t *cat, dsc_hold_t *hold);
/* The first chunk of [first, first + count) known damaged in the hold's shard (its stored
 * checksum differs: that chunk is answered CORRUPT while the shard's other chunks are served),
 * or -1. Lock-free. */
int64_t dsc_hold_damaged_chunk(const dsc_hold_t *hold, uint32_t first, uint32_t count);
/* Names the damaged shards of every dataset served into buf (NUL-terminated, cut with "..."):
 * "DATASET shard N (FILE: D of C chunks, first chunk F)" or "(FILE: whole shard refused)",
 * comma-separated. *bad (may be NULL): how many of them are refused whole. Returns how many
 * shards are damaged. For /readyz. */
uint32_t dsc_catalog_damage_text(dsc_catalog_t *cat, char *buf, size_t cap, uint32_t *bad);

/* Starts loading shard `shard_id` (DSC_SHARD_ALL: every shard) of ds into the store, without
 * evicting under the minio policy. Returns the number of loads started. */
int dsc_catalog_warm(dsc_catalog_t *cat, dsc_dataset_t *ds, uint32_t shard_id);
/* Warms every dataset and blocks until the loads are done, logging progress (n/N shards, MB/s).
 * Returns the number of shards loaded. */
int dsc_catalog_warm_all(dsc_catalog_t *cat);
/* Selects shards for dsc_catalog_warm_some: 1 to load shard_id of ds, 0 to skip. Called
 * without catalog locks, on the calling thread. */
typedef int (*dsc_shard_filter_fn)(void *arg, const dsc_dataset_t *ds, uint32_t shard_id);
/* dsc_catalog_warm_all restricted to the shards keep() selects (NULL: every shard). no_evict:
 * never evict to make room, whatever the policy. what: names the selection in the log line
 * "warming N of M shards (what)" (NULL: the warm-up wording). Blocks until the loads are done
 * or *cancel (NULL: never) becomes non-zero (checked every second). Returns the number of loads
 * started. Not on an event loop. */
int dsc_catalog_warm_some(dsc_catalog_t *cat, dsc_shard_filter_fn keep, void *arg, int no_evict,
                          const char *what, const atomic_int *cancel);
/* For shutdown: loads and read-throughs still queued are dropped (their waiters get DSC_EUNAVAIL
 * at once, the shards stay absent, nothing is logged), and new read-throughs are refused
 * (DSC_EUNAVAIL); loads already reading finish and are delivered. Environment, for tests:
 * DSC_TEST_LOAD_DELAY_MS=N pauses N ms before each load and each read-through. */
void dsc_catalog_stop_loads(dsc_catalog_t *cat);
/* Writes map[i] = 1 when shard i of ds is resident in the store, else 0, for i < min(count,
 * shards of ds). Returns the number of entries written. Takes the bookkeeping lock once. */
uint32_t dsc_catalog_resident_map(dsc_catalog_t *cat, dsc_dataset_t *ds, uint8_t *map,
                                  uint32_t count);
/* Drops resident shards that no response holds (a pinned dataset's are kept: unpin it first).
 * Returns the number evicted. */
int dsc_catalog_evict(dsc_catalog_t *cat, dsc_dataset_t *ds, uint32_t shard_id);

/* Memory per dataset, by name (the dataset need not be served yet: the setting waits for it,
 * and survives rescans and replacements):
 *   DSC_POLICY_PIN    the dataset stays resident: its shards are never evicted to make room
 *                     (LRU, another dataset's warm-up, EVICT), its loads evict unpinned shards
 *                     whatever the policy, and it is warmed now;
 *   DSC_POLICY_UNPIN  back to the common rules;
 *   DSC_POLICY_LIMIT  its resident and loading bytes stay <= bytes (0: no limit); shards over a
 *                     new limit are evicted now (least recently used first), a miss beyond it is
 *                     read through (lru: evicts the dataset's own shards first);
 *   DSC_POLICY_PRIORITY  bytes is its priority (0..DSC_MAX_PRIORITY, default 0): on a full
 *                     store its loads (misses, warm-ups) evict unreferenced shards of unpinned
 *                     datasets of lower priority, lowest priority first, then least recently
 *                     used (with --policy lru: of the same priority too, never of a higher one);
 *                     configuration only (--priority), not a wire operation.
 * Returns the shards affected (loads started, or evicted), DSC_EINVAL, DSC_ENOMEM, DSC_ENOSPC
 * (DSC_MAX_POLICIES names have settings already). */
enum { DSC_POLICY_PIN = 1, DSC_POLICY_UNPIN = 2, DSC_POLICY_LIMIT = 3, DSC_POLICY_PRIORITY = 4 };
#define DSC_MAX_PRIORITY 1000
#define DSC_MAX_POLICIES 4096
int dsc_catalog_set_policy(dsc_catalog_t *cat, const char *name, size_t name_len, int op,
                           uint64_t bytes);

/* STAT body: JSON {"store":{...},"catalog":{...},"datasets":[{...}]} for one dataset (name_len >
 * 0) or all. "catalog": "manifest_parses" (manifest files read so far), "conflicts" [{"name",
 * "dir", "served_from"}] (directories refused a name that belongs to another), "refused"
 * [{"dir", "reason", "error"}] (directories whose manifest is refused), at most
 * DSC_STAT_MAX_NOTES of each, and their full counts "conflict_count", "refused_count".
 * Each dataset has "damaged_shards" and "damaged_chunks" (shards served but for their damaged
 * chunks) and "damaged": [{"shard", "file", "state": "bad" (refused whole) or "chunks"
 * ("damaged_chunks", "chunks", "first_chunk")}], at most DSC_STAT_MAX_DAMAGED entries.
 * Returns a malloc'd NUL-terminated string, or NULL (out of memory, *not_found set when the
 * named dataset is not served). */
#define DSC_STAT_MAX_DAMAGED 64
#define DSC_STAT_MAX_NOTES 64
char *dsc_catalog_stat_json(dsc_catalog_t *cat, const char *name, size_t name_len, int *not_found);
/* LIST body: JSON [{"name":..,"shards":..,"samples":..,"bytes":..}, ...]. malloc'd or NULL. */
char *dsc_catalog_list_json(dsc_catalog_t *cat);

typedef struct dsc_catalog_totals {
    uint64_t datasets, shards, cached_shards, cached_bytes, bad_shards;
    uint64_t damaged_shards, damaged_chunks; /* served but for chunks damaged on disk */
    uint64_t hits, misses, bytes_served, evictions, loads, load_failures, read_through;
    uint64_t bytes_loaded;       /* disk bytes read by whole-shard loads */
    uint64_t read_through_bytes; /* disk bytes read by read-throughs (chunks, headers, indexes) */
    uint64_t index_cache_bytes, index_cache_entries; /* the read-through index cache now */
    uint64_t metadata_bytes;      /* bookkeeping memory: catalog, tables, datasets (manifest, JSON,
                                     slots), index cache; not the shard bytes themselves */
    dsc_backing_totals_t backing; /* read-throughs from backing storage (catalog_types.h) */
    dsc_staging_totals_t staging; /* read-ahead (catalog_types.h) */
    dsc_peer_totals_t peer;       /* whole-shard loads from peers (catalog_types.h) */
} dsc_catalog_totals_t;
void dsc_catalog_totals(dsc_catalog_t *cat, dsc_catalog_totals_t *out);
dsc_store_t *dsc_catalog_store(dsc_catalog_t *cat);

/* Load time histogram (seconds), for /metrics; the bounds are defined in catalog_state.c. */
extern const double dsc_load_bucket_bounds[DSC_LOAD_BUCKETS];
typedef struct dsc_load_histogram {
    uint64_t buckets[DSC_LOAD_BUCKETS]; /* cumulative counts: <= bound */
    uint64_t count;
    double sum_seconds;
} dsc_load_histogram_t;
void dsc_catalog_load_histogram(dsc_catalog_t *cat, dsc_load_histogram_t *out);

#endif
