/* The catalog's types shared by its layers (catalog.c, readthrough.c, catalog_state.c) and its
 * users (dispatch, transports): a hold on a shard's bytes, a waiter for a load and the mailbox
 * it is delivered to, the options. Types only: no functions, so that it sits below every layer. */
#ifndef DSC_SERVER_CATALOG_TYPES_H
#define DSC_SERVER_CATALOG_TYPES_H

#include <stdint.h>

typedef struct dsc_catalog dsc_catalog_t;
typedef struct dsc_dataset dsc_dataset_t;
typedef struct dsc_shard_slot dsc_shard_slot_t;
typedef struct dsc_tempbuf dsc_tempbuf_t;

typedef enum { DSC_POLICY_MINIO = 0, DSC_POLICY_LRU = 1 } dsc_policy_t;

/* Bytes of one shard held for as long as a response needs them (until the reply releases it; TCP:
 * when the write completes).
 * data + entry.offset is a chunk's stored bytes for every entry of index. A resident shard holds
 * the whole file; a read-through buffer is a mapping as large as the file in which only the
 * chunks the request asked for, and the index, were read (the rest reads as zeros). */
typedef struct dsc_hold {
    dsc_shard_slot_t *slot; /* a reference on a resident shard, or NULL */
    dsc_tempbuf_t *temp;    /* a reference on a read-through buffer, or NULL */
    const uint8_t *data;    /* the shard file (see above) */
    uint64_t size;
    const uint8_t *index; /* chunk_count encoded entries inside data */
    uint32_t chunk_count;
    /* A resident shard with chunks damaged on disk: a bit per chunk (set: its stored checksum
     * differs, the chunk is answered CORRUPT; dsc_hold_damaged_chunk). NULL: none known. */
    const uint8_t *damage;
} dsc_hold_t;

/* Where a finished load is delivered: a mailbox drained by one event loop. push() is called from
 * loader threads; it must queue the waiter and wake the loop. */
typedef struct dsc_waiter dsc_waiter_t;
typedef struct dsc_mailbox {
    void (*push)(struct dsc_mailbox *box, dsc_waiter_t *waiter);
} dsc_mailbox_t;

/* A request waiting for a shard load. On completion status is 0 and hold holds a reference (the
 * waiter's owner releases it; a requested chunk may still be damaged: see hold.damage), or
 * status is DSC_ECORRUPT (shard failed validation, or one of the requested chunks did on a
 * read-through: chunk_damaged), DSC_EUNAVAIL (file unreadable, or read-through
 * memory exhausted) or DSC_ENOMEM. first_chunk/chunk_count name the chunks the request needs:
 * a shard that will not be made resident is read through for those chunks only (chunk_count 0:
 * every chunk). */
struct dsc_waiter {
    dsc_waiter_t *next;
    dsc_mailbox_t *mailbox; /* NULL: fn runs on the loader thread */
    void (*fn)(dsc_waiter_t *waiter);
    int status;
    dsc_hold_t hold;
    uint32_t first_chunk, chunk_count;
    /* With status DSC_ECORRUPT from a read-through: chunk_damaged is 1 and damaged_chunk the
     * first requested chunk whose stored checksum differs (the shard's others are served);
     * chunk_damaged 0: the shard itself failed validation. */
    uint8_t chunk_damaged;
    uint32_t damaged_chunk;
    /* The loader asking (its HINT id on this connection, 0: unknown): read-ahead serves a
     * staged range once per loader that announced it (staging.h). */
    uint64_t hinter;
    /* Whose read-through it is, for the backing readers' deficit round-robin between jobs
     * (readthrough.c): the job its connection REPORTed, else ("") the connection `conn` (an
     * identity, never dereferenced), else (0) read-ahead and warm-ups, one flow for them all. */
    char job[64];
    uintptr_t conn;
    /* The credential of the connection ("": anonymous): a job is (credential, job), for the
     * backing readers' turns and the read-ahead shares (staging.h). */
    char owner[64];
};

typedef struct dsc_catalog_options {
    dsc_policy_t policy;
    uint32_t io_threads;        /* loader threads (0: 4) */
    uint64_t temp_limit;        /* bound on read-through bytes in flight (0: 1 GiB) */
    uint64_t index_cache_limit; /* bound on cached shard indexes for read-through (0: 64 MiB) */
    uint32_t backing_reads;     /* read-throughs in flight to backing storage (0: 32) */
    uint64_t backing_rate;      /* cap on backing read bytes/s, loads included (0: none) */
    uint64_t staging_memory;    /* read-ahead staging area, bytes (0: no read-ahead, staging.h) */
    uint32_t staging_ttl_ms;    /* how long a staged range waits for its GETs (0: 30 s) */
} dsc_catalog_options_t;

/* Backing reads (read-throughs): done, coalesced into another, seconds spent reading and
 * waiting for --backing-rate, the latency now (EWMA of one read, s), queued and running now,
 * the most running at once, the pool size and the rate cap (bytes/s, 0: none). */
typedef struct dsc_backing_totals {
    uint64_t reads, coalesced;
    double read_seconds, wait_seconds, latency;
    uint64_t queued, running, running_max, pool, rate;
} dsc_backing_totals_t;

/* Read-ahead staging (staging.h): hinted ranges received, accepted, staged (read ahead) and
 * their bytes, GETs served from a staged range (hits) or that waited for a read already under
 * way (joined), staged ranges dropped before any GET used them (and their bytes), hinted ranges
 * that expired before they could be read; now: staged bytes (reading included), ranges staged,
 * ranges waiting to be read, reads running; the limits. */
typedef struct dsc_staging_totals {
    uint64_t hints, accepted, staged, staged_bytes_total, hits, joined;
    uint64_t dropped_unused, dropped_unused_bytes, expired;
    /* trimmed: hinted ranges refused because their credential's (and job's) share was full;
     * reclaimed: staged ranges dropped unread to give a tenant under its share the room another
     * held beyond its own. */
    uint64_t trimmed, reclaimed;
    uint64_t bytes, entries, pending, reading;
    uint64_t tenants; /* (credential, job) pairs holding staged or queued ranges now */
    uint64_t memory, ttl_ms;
} dsc_staging_totals_t;

/* A source a whole-shard load tries before the backing storage (server/peerwarm.c: a live
 * replica's RAM): fills dst with the file of shard shard_id of dataset (`bytes` bytes, of dataset
 * version `version`); urgent: a request waits for this load (a miss, not a warm-up), so the source
 * gives up sooner. Returns 0 when dst holds the file's bytes (the load still validates them as
 * it validates a read from disk: whole-file checksum, header against the manifest) or a negative
 * error (nothing usable; the load reads the backing storage). Called on an I/O thread, no lock
 * held; may block (network I/O, its own rate limit). */
typedef struct dsc_peer_source {
    int (*fetch)(void *arg, const char *dataset, uint64_t version, uint32_t shard_id,
                 uint64_t bytes, uint8_t *dst, int urgent);
    void *arg;
} dsc_peer_source_t;

/* Whole-shard loads from peers (dsc_peer_source_t): shards and bytes taken from a peer, loads a
 * peer could not serve (they read the backing storage), peer copies refused by validation. */
typedef struct dsc_peer_totals {
    uint64_t shards, bytes, fallbacks, refused;
} dsc_peer_totals_t;

/* Load time histogram (seconds), for /metrics. */
#define DSC_LOAD_BUCKETS 10

#endif
