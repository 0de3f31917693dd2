/* The catalog's state, below both of its layers: catalog.c (datasets, hits, eviction, warm-ups,
 * rescans, statistics) calls readthrough.c (loads on the I/O threads, read-throughs, delivery of
 * waiters), and both use the structures here and the few operations on them that each needs
 * (catalog_state.c: a slot's eviction, the index cache's unlinking, temporary buffers, opening
 * a shard file). Nothing here calls up into either layer. Not for other modules: they use
 * catalog.h. */
#ifndef DSC_SERVER_CATALOG_STATE_H
#define DSC_SERVER_CATALOG_STATE_H

#include "catalog_types.h"
#include "fairq.h"
#include "manifest.h"
#include "manifest_io.h"
#include "store.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

enum { SLOT_ABSENT = 0, SLOT_LOADING, SLOT_RESIDENT, SLOT_BAD };

/* A read-through answer: a private anonymous mapping of the file's size. */
struct dsc_tempbuf {
    atomic_int refs;
    uint64_t size; /* bytes counted against temp_limit */
    uint8_t *data; /* mapping base */
    size_t map_len;
};

/* A shard's validated header fields and index, cached for read-throughs. Under cat->lock. */
typedef struct shard_index {
    int refs;               /* 1 for the cache (while slot is set) + 1 per read-through using it */
    dsc_shard_slot_t *slot; /* the slot caching it, NULL once dropped */
    struct shard_index *lru_prev, *lru_next;
    uint32_t header_len;
    uint32_t chunk_count;
    uint64_t index_offset;
    uint64_t bytes;    /* counted in the metadata figure */
    uint8_t entries[]; /* chunk_count encoded entries, validated */
} shard_index_t;

/* A queued read-through of chunks [first, first + count) of a shard for one waiter, queued in
 * its job's flow of cat->range_fq (fq.bytes: its estimated backing bytes). */
typedef struct range_load {
    dsc_fq_item_t fq; /* first */
    dsc_shard_slot_t *slot;
    dsc_waiter_t *waiter;
    uint32_t first, count;
    struct range_load *merged; /* jobs of the same shard read with this one (coalesced) */
} range_load_t;

struct dsc_shard_slot {
    atomic_int refs;               /* >= 0: resident and takeable; -1: not */
    atomic_uint_fast64_t last_use; /* ns, for LRU */
    dsc_dataset_t *ds;
    const dsc_manifest_shard_t *meta;
    /* Under cat->lock: */
    uint8_t state;
    uint8_t logged;       /* a load failure was logged once */
    uint8_t chunk_logged; /* a read-through chunk failure was logged once */
    uint8_t refused;      /* the file was not a regular file at scan time: never read */
    uint8_t *data;        /* arena extent while RESIDENT (or the load's target while LOADING) */
    const uint8_t *index;
    uint32_t chunk_count;
    shard_index_t *sindex; /* cached header + index for read-throughs, or NULL */
    /* Chunks known damaged on disk (stored checksum differs), a bit per chunk, or NULL: none
     * known. Found by a whole-shard load (which then serves the other chunks) or a read-through;
     * written only while the slot is not RESIDENT (resident holds read it without the lock:
     * dsc_hold_t.damage), freed with the dataset. damaged: the bits set. */
    uint8_t *damage;
    uint32_t damaged;
    dsc_waiter_t *waiters;
    dsc_shard_slot_t *queue_next;
    struct stage_ent *staged; /* staging.c: the shard's staged or hinted ranges */
};

struct dsc_dataset {
    char name[DSC_MAX_NAME];
    char *dir;
    dsc_manifest_t *manifest;
    char *json;
    size_t json_len;
    dsc_shard_slot_t *slots;
    uint64_t version; /* dsc_dataset_version of json */
    atomic_int retired;
    atomic_uint_fast64_t hits, misses, bytes_served;
    /* Under cat->lock: */
    uint64_t cached_shards, cached_bytes, bad_shards;
    uint8_t pinned;    /* stays resident: never evicted to make room, loads evict for it */
    uint64_t limit;    /* cap on resident + loading bytes (0: none) */
    uint32_t priority; /* on a full store its loads evict lower-priority shards (0..1000) */
    /* The manifest file as it was when this version was read (dev, inode, size, mtime ns), for
     * dsc__dataset_changed_on_disk; under cat->lock. */
    uint64_t mf_dev, mf_ino, mf_size, mf_mtime_ns;
    /* Found under a --data-root: a symbolic link in the directory (manifest, shard file) is not
     * followed (refused as not a regular file). */
    uint8_t confined;
    dsc_dataset_t *all_next; /* every dataset ever created, freed at destroy */
};

/* What the last rescan found in a directory it did not serve (catalog.c), remembered with the
 * manifest's identity so that an unchanged one is neither read nor logged again; listed by STAT
 * ("catalog"). */
typedef struct dir_note {
    char *dir;
    dsc_manifest_file_id_t id; /* of DIR/manifest.json when it was judged (zero: none) */
    int rc;                    /* the manifest's error, or 0: valid but its name is taken */
    const char *why;           /* static: a few words on rc */
    char name[DSC_MAX_NAME];   /* rc 0: the dataset name it claims */
    char *owner;               /* rc 0: the directory the name belongs to */
} dir_note_t;

/* A dataset name and the directory that served it first: the name stays with it until that
 * directory is removed (or its manifest is, or names another dataset). */
typedef struct name_owner {
    char name[DSC_MAX_NAME];
    char *dir;
} name_owner_t;

typedef struct table {
    uint32_t count;
    struct table *retired_next;
    dsc_dataset_t *items[];
} table_t;

struct dsc_catalog {
    dsc_store_t *store;
    dsc_catalog_options_t opt;
    _Atomic(table_t *) table;
    table_t *retired_tables; /* retired_tables, all, dirs, dir_count: owned by rescan_lock */
    dsc_dataset_t *all;
    char **dirs;
    uint32_t dir_count;
    char **roots; /* --data-root: every subdirectory with a manifest is a dataset */
    uint32_t root_count;
    /* Pins and limits by dataset name (dsc_catalog_set_policy), applied to every dataset of
     * that name a rescan creates; under lock. */
    struct dsc_policy_entry {
        char name[DSC_MAX_NAME];
        uint8_t pinned;
        uint64_t limit;
        uint32_t priority;
    } * policies;
    uint32_t policy_count;
    atomic_uint_fast64_t table_meta_bytes; /* their metadata bytes, see update_table_meta */
    /* Serialises add_dir/add_root/rescan: held across their file I/O, so taken only by the
     * rescanning thread (the root watcher; SIGHUP asks it) and at start-up, never by a request,
     * STAT or shutdown (which only sets rescan_cancel). */
    pthread_mutex_t rescan_lock;
    name_owner_t *owners; /* rescan_lock */
    uint32_t owner_count;
    /* Directories not served and why (rescan_lock to read, rescan_lock + lock to replace; STAT
     * reads them under lock). */
    dir_note_t *notes;
    uint32_t note_count;
    atomic_uint_fast64_t manifest_parses; /* manifests read and parsed (STAT) */
    atomic_int rescan_cancel;             /* shutdown: a rescan under way gives up */
    /* A load found a dataset replaced on disk: the root watcher rescans at once
     * (dsc_catalog_take_rescan_request). */
    atomic_int rescan_wanted;

    pthread_mutex_t lock; /* bookkeeping: loads, evictions, queue */
    pthread_cond_t work_cond, idle_cond;
    dsc_shard_slot_t *queue_head, *queue_tail;
    uint32_t loads_in_flight;
    int stopping;
    int draining;           /* dsc_catalog_stop_loads: queued whole-shard loads are dropped */
    unsigned test_delay_us; /* DSC_TEST_LOAD_DELAY_MS: a pause before each load (whole-shard
                               or read-through) */
    pthread_t *threads;
    uint32_t thread_count;
    uint64_t temp_bytes;
    /* Queued read-throughs (the backing readers): one FIFO per job (dsc_waiter_t.job), served
     * by deficit round-robin over their estimated bytes, so one job's burst of misses does not
     * hold another's behind it. */
    dsc_fq_t range_fq;
    /* Backing reads (readthrough.c): threads started so far (the first opt.io_threads load
     * whole shards, the next opt.backing_reads read through), read-throughs queued and running,
     * the --backing-rate pacer, and totals (under lock). */
    pthread_cond_t range_cond;
    uint32_t roles_started;
    uint32_t range_queued, range_running, range_running_max;
    double pace_next;
    uint64_t backing_reads, backing_coalesced;
    double backing_read_seconds, backing_wait_seconds, backing_latency_ewma;
    shard_index_t *index_head, *index_tail; /* index cache, most recently used first */
    uint64_t index_bytes, index_count;

    struct dsc_staging *staging; /* staging.c (read-ahead), under lock */

    atomic_uint_fast64_t evictions, loads, load_failures, read_through, bytes_loaded;
    atomic_uint_fast64_t read_through_bytes;
    /* Whole-shard loads try this first (dsc_catalog_set_peer_source; NULL: none). */
    _Atomic(const dsc_peer_source_t *) peer;
    atomic_uint_fast64_t peer_shards, peer_bytes, peer_fallbacks, peer_refused;
    /* Load histogram, under lock. */
    uint64_t hist[DSC_LOAD_BUCKETS];
    uint64_t hist_count;
    double hist_sum;
};

/* How start_load_locked makes room when the store is full. */
enum {
    LOAD_WARM = 0,      /* lru: evict; otherwise give up */
    LOAD_REQUEST = 1,   /* lru: evict; otherwise give up (the caller reads through) */
    LOAD_WARM_KEEP = 2, /* give up: never evict for it (cluster warm-ups) */
};
/* ---- catalog_state.c (cat->lock held where the name ends in _locked) ---- */

/* Frees a resident slot's bytes if nobody holds them (cat->lock held). Returns 1 when evicted. */
int dsc__slot_evict_locked(dsc_catalog_t *cat, dsc_shard_slot_t *s);
/* Unlinks an index from the cache and drops the cache's reference (cat->lock held). */
void dsc__index_drop_locked(dsc_catalog_t *cat, shard_index_t *si);
/* Frees a read-through buffer (its bytes are uncounted by the caller). NULL is a no-op. */
void dsc__tempbuf_free(dsc_tempbuf_t *tb);
/* Opens a shard file for reading without blocking on a FIFO or a device (O_NONBLOCK) and
 * refuses anything but a regular file (nofollow: a symbolic link too). Returns the fd, or
 * DSC_EUNAVAIL (not a regular file; *why says so) or -errno (*why: "cannot open" / "cannot
 * stat"). */
int dsc__shard_open(const char *path, int nofollow, const char **why);
/* Records chunk c of s (< s->meta->chunks) as damaged (cat->lock held, s not RESIDENT). Returns
 * 1 when newly recorded, 0 when already known, DSC_ENOMEM. */
int dsc__slot_mark_damaged_locked(dsc_shard_slot_t *s, uint32_t c);
/* Replaces s's damage map by map (malloc'd, chunk bits; NULL: none) with `damaged` bits set
 * (cat->lock held, s not RESIDENT). Takes map. */
void dsc__slot_set_damage_locked(dsc_shard_slot_t *s, uint8_t *map, uint32_t damaged);
/* The first chunk of [first, first + count) set in map, or -1 (map NULL: -1). */
int64_t dsc__damage_first(const uint8_t *map, uint32_t first, uint32_t count);
/* The identity of dir/manifest.json (stat, or lstat when nofollow) in *id, and in *regular
 * whether it is a regular file. Returns 0, or -errno (DSC_ENOENT: no manifest). Never opens it. */
int dsc__manifest_identity(const char *dir, int nofollow, dsc_manifest_file_id_t *id, int *regular);
/* Reads dir's manifest for the catalog: never blocks (dsc_manifest_load_file), nofollow under a
 * --data-root, counted in cat->manifest_parses. As dsc_manifest_load_file. */
int dsc__manifest_read(dsc_catalog_t *cat, const char *dir, int nofollow,
                       dsc_manifest_file_id_t *id, const char **why, dsc_manifest_t **out);
/* 1 when the dataset on disk is no longer the version ds serves: its manifest is gone,
 * unreadable, or describes another dataset (its JSON differs from ds->json); 0 when it is the
 * same. The manifest is read and compared only when its identity (dev, inode, size, mtime)
 * differs from the one recorded, unless `full`; a manifest found the same is recorded anew.
 * Takes cat->lock briefly (not held by the caller); file I/O outside it. */
int dsc__dataset_changed_on_disk(dsc_catalog_t *cat, dsc_dataset_t *ds, int full);
/* Upper bounds (seconds) of the load time histogram (also declared in catalog.h for /metrics). */
extern const double dsc_load_bucket_bounds[DSC_LOAD_BUCKETS];

#endif
