/* Loader chunk entries, the chunk table (global chunk id -> entry) and the FIFO queues chunks wait
 * in (per peer for fetching, one for decoding). The bottom of the loader: it calls nothing above
 * it. Every function here runs under the loader's lock. */
#ifndef DSC_CHUNKS_H
#define DSC_CHUNKS_H

#include "dscache.h"
#include "manifest.h"
#include "shard.h"
#include "slots.h"

#include <stdint.h>

/* Peers the loader can address (members of every view it has held; a peer index is never reused
 * for another address), plus one for the fallback files (DSC__PEER_FALLBACK). */
#define DSC_LOADER_MAX_PEERS 256
#define DSC__PEER_FALLBACK DSC_LOADER_MAX_PEERS

/* Chunk entry states. */
enum { CH_QUEUED, CH_INFLIGHT, CH_RECEIVED, CH_DECODING, CH_READY };

typedef struct dsc_chunk_ent {
    uint64_t gid; /* global chunk id (dsc_sample_loc_t.chunk) */
    uint32_t shard, shard_chunk, samples;
    uint64_t raw_len; /* decoded bytes; a dataset with variable-length fields: an estimate
                         (from the manifest's mean sizes) until the chunk's entry arrives
                         (fetch.c deliver sets the exact figure, dsc__chunk_resize) */
    uint64_t raw_min; /* variable-length fields: the least raw_len its layout allows; 0:
                         raw_len is exact (fixed-size fields only) */
    uint64_t charged; /* raw bytes charged to the in-flight budgets while it is in flight */
    dsc_chunk_layout_t *layout; /* variable-length fields, once decoded: each field's place in
                                   raw, checked (decode.c; malloc'd, freed with the entry) */
    int state;
    int cancelled; /* dropped by a restart while a thread held it: that thread frees it */
    uint64_t refs; /* sample needs of planned steps not yet collated */
    uint32_t peer; /* peer where it is queued or in flight */
    /* bit i: peer i failed for it or sent it corrupt */
    uint64_t tried[DSC_LOADER_MAX_PEERS / 64 + 1];
    uint64_t order; /* creation order (re-routing keeps it) */
    int hinted;     /* hints.c: named in a HINT to its peer (read-ahead) */
    int hz;         /* hints.c: named alone by the hint horizon: asked for alone
                       (a GET must lie inside one hinted range to be served staged) */
    uint64_t epoch; /* epoch of the step that first needed it (per-epoch wire bytes) */
    /* hedge.c: re-issued from request hedge_req (0: none) of I/O thread hedge_io of peer
     * hedge_peer, which stalled: fetch.c's deliver tells hedge.c it arrived (hedges won). */
    uint64_t hedge_req;
    uint32_t hedge_peer, hedge_io;
    dsc_chunk_entry_t entry; /* as received (written by the data source) */
    uint8_t *stored;         /* stored bytes (from the buffer pool, filled by the data source) */
    size_t stored_cap;
    uint8_t *raw;   /* decoded bytes (== stored for raw chunks) */
    size_t raw_cap; /* 0 when raw aliases stored */
    /* Direct placement (decode.c): run_ok while every planned need of this chunk is one
     * in-order run of its samples in step run_seq from batch position run_k; placed once its
     * samples went straight into that step's slot (raw is then NULL, and the planner no longer
     * finds the entry: a later need fetches the chunk again). */
    int run_ok;
    int placed;
    uint64_t run_seq;
    uint32_t run_k;
    struct dsc_chunk_ent *hnext; /* hash chain */
    struct dsc_chunk_ent *qnext; /* fetch or decode queue */
    /* On the table's idle list (order caller): decoded, needed by no planned step, kept for a
     * later need. */
    int idle;
    struct dsc_chunk_ent *idle_prev, *idle_next;
    /* Sample ranges (reader.c; RANGE, proto/range.h): the increasing in-chunk indices of the
     * samples this entry holds (samples of them, in sel_spans runs), or NULL: the whole chunk.
     * whole_samples: the chunk's own sample count either way. fetch.c turns a ranged entry back
     * into a whole one (dsc__chunk_make_whole) for a server without RANGE. */
    uint32_t *sel;
    uint32_t sel_spans;
    uint32_t whole_samples;
    uint64_t first_index; /* reader.c: dataset index of the chunk's first sample */
} dsc_chunk_ent_t;

typedef struct dsc_chunk_queue {
    dsc_chunk_ent_t *head, *tail;
    uint64_t count;
    uint64_t bytes; /* raw bytes of the queued entries */
} dsc_chunk_queue_t;

/* The table of chunk entries planned steps need. */
typedef struct dsc_chunk_table {
    dsc_chunk_ent_t **buckets;
    uint64_t bucket_mask;
    uint64_t held_bytes; /* raw bytes of the entries in the table */
    /* Idle entries (order caller: decode.c keeps a decoded chunk no planned step needs, since the
     * caller's later order is not known yet), oldest first; their raw bytes, part of held_bytes.
     * The planner takes one back (dsc__chunk_idle_remove) when a step needs it again. */
    dsc_chunk_ent_t *idle_head, *idle_tail;
    uint64_t idle_bytes;
} dsc_chunk_table_t;

/* Errors that say the bytes of a chunk are damaged at their source (a server answered CORRUPT,
 * or the checksum or the lz4 block failed here): another replica or the fallback files may hold
 * an intact copy. */
static inline int dsc__is_corruption(int err) {
    return err == DSC_ECORRUPT || err == DSC_ECHUNKSUM || err == DSC_EDATASUM ||
           err == DSC_EDECOMPRESS;
}

/* Whether a chunk entry received for ent has a decoded size its dataset allows: exactly
 * raw_len for fixed-size fields, else at least the layout's minimum (the layout itself is
 * validated once decoded). */
static inline int dsc__chunk_raw_len_ok(const dsc_chunk_ent_t *ent, uint64_t raw_len) {
    return ent->raw_min ? raw_len >= ent->raw_min && raw_len <= DSC_CHUNK_MAX_RAW
                        : raw_len == ent->raw_len;
}

/* Decoded bytes of a chunk of `samples` samples: exact without variable-length fields; with
 * them the planner's estimate, each variable field at the manifest's bytes_mean per sample
 * (its offsets included), never below the layout's minimum. */
uint64_t dsc__chunk_raw_estimate(const dsc_manifest_t *m, uint64_t samples);
/* The most decoded bytes a chunk of shard `shard` can hold: exact without variable-length
 * fields; with them each variable field at the manifest's bytes_max per sample (at most
 * DSC_CHUNK_MAX_RAW). For sizing buffers that must hold any chunk (the RDMA slab). */
uint64_t dsc__chunk_raw_bound(const dsc_manifest_t *m, uint32_t shard);

void dsc__queue_push(dsc_chunk_queue_t *q, dsc_chunk_ent_t *ent);
/* Puts ent at the queue's head (a chunk that is late already goes first). */
void dsc__queue_push_front(dsc_chunk_queue_t *q, dsc_chunk_ent_t *ent);
dsc_chunk_ent_t *dsc__queue_pop(dsc_chunk_queue_t *q);

/* Sizes the table for `chunks` chunk ids. Returns 0 or DSC_ENOMEM. */
int dsc__chunk_table_init(dsc_chunk_table_t *t, uint64_t chunks);
/* The entry for gid that still holds bytes for later steps, or NULL (placed entries, decoded
 * straight into a slot, are skipped). */
dsc_chunk_ent_t *dsc__chunk_find(const dsc_chunk_table_t *t, uint64_t gid);
void dsc__chunk_insert(dsc_chunk_table_t *t, dsc_chunk_ent_t *ent);
void dsc__chunk_unlink(dsc_chunk_table_t *t, dsc_chunk_ent_t *ent);
/* Puts an entry of the table (refs 0, decoded) at the idle list's tail. */
void dsc__chunk_idle_push(dsc_chunk_table_t *t, dsc_chunk_ent_t *ent);
/* Takes an idle entry off the list (it stays in the table). */
void dsc__chunk_idle_remove(dsc_chunk_table_t *t, dsc_chunk_ent_t *ent);
/* Unlinks and frees idle entries, oldest first, while held_bytes > limit. */
void dsc__chunk_idle_trim(dsc_chunk_table_t *t, dsc_bufpool_t *pool, uint64_t limit);
/* Sets the entry's raw_len (its exact size, once known), keeping held_bytes true. */
void dsc__chunk_resize(dsc_chunk_table_t *t, dsc_chunk_ent_t *ent, uint64_t raw_len);
/* A ranged entry (sel) not yet sent becomes the whole chunk: sel freed, samples, raw_len and
 * raw_min those of whole_samples (held_bytes kept true). */
void dsc__chunk_make_whole(dsc_chunk_table_t *t, const dsc_manifest_t *m, dsc_chunk_ent_t *ent);
/* Gives the entry's buffers back to the pool and frees it. NULL is a no-op. */
void dsc__chunk_free(dsc_bufpool_t *pool, dsc_chunk_ent_t *ent);
/* Empties the table for a restart: entries a thread holds (in flight or decoding) are marked
 * cancelled for that thread to free, the others are freed; *inflight_used loses the bytes of
 * received entries freed here. */
void dsc__chunk_table_reset(dsc_chunk_table_t *t, dsc_bufpool_t *pool, uint64_t *inflight_used);
/* Frees every entry and the table (no thread runs any more). */
void dsc__chunk_table_free(dsc_chunk_table_t *t, dsc_bufpool_t *pool);

#endif
