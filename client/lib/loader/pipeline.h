/* The loader's shared state: struct dsc_loader, grouped by the module that owns each part, and
 * the types its stages share (peers, I/O connections, steps, batch slots). Included by every
 * loader stage; it calls nothing above it. One mutex (lock) guards everything marked "under
 * lock"; bulk work (I/O, decoding, copying) runs outside it.
 *
 * Pipeline, per step of this rank (a batch, or an end-of-epoch marker), in stream order (seq):
 *   scheduler.c   plan the step (sample ids -> chunk entries, new chunks routed and queued) while
 *             the decoded-chunk budget allows; give it slot seq % slot_count once free
 *   route.c   pick the peer for each chunk (placement over the view, load, fail-over)
 *   fetch.c   I/O threads: take queued chunks (merging consecutive ones of a shard) within the
 *             in-flight budgets, hand them to the peer's data source (source.h), queue what
 *             arrives for decoding
 *   decode.c  verify + decompress received chunks; collate a slotted step once all its chunks
 *             are decoded (then H2D with CUDA); drop chunks no planned step needs
 *   loader.c  next() waits for step cons_seq to be READY (and helps while it waits), hands it
 *             out, releases the previous one (batch.c)
 *   view.c    keeps the member list current; only routing changes, never the plan.
 * See docs/architecture-client.md. */
#ifndef DSC_PIPELINE_H
#define DSC_PIPELINE_H

#include "chunks.h"
#include "conn.h"
#include "cuda.h"
#include "dscache.h"
#include "image.h"
#include "log.h"
#include "manifest.h"
#include "nvjpeg.h"
#include "placement.h"
#include "plan.h"
#include "slots.h"
#include "source.h"
#include "verdict.h"

#include <pthread.h>
#include <stdint.h>

/* Order local: cons_pos / pos_after once the epoch's last step is handed out. */
#define DSC__POS_DONE UINT64_MAX

/* Epochs whose attributed wire bytes are kept (stats.epoch_wire). */
#define DSC__EPOCH_RING 4

typedef struct dsc_epoch_wire {
    uint64_t epoch; /* UINT64_MAX: unused */
    uint64_t bytes;
} dsc_epoch_wire_t;

/* Step states. */
enum { ST_PLANNED, ST_COLLATING, ST_READY, ST_HANDED };

typedef struct dsc_step {
    uint64_t seq;
    uint64_t epoch;
    uint64_t step;      /* batch number in the epoch */
    uint64_t pos_after; /* global position once this step is consumed (order local: steps done
                           in the segment, DSC__POS_DONE after its last) */
    int eof;            /* end-of-epoch marker */
    int state;
    uint32_t count;
    uint32_t slot; /* index in cons.slots once slotted (seq < sched.slot_seq) */
    uint32_t scan; /* samples before this index are known decoded */
    int error;     /* a collation that failed for this step alone (DSC_ETOOLARGE: a variable
                      field over its slot room): next() logs it and fails the loader with it
                      when it reaches the step, after handing out the steps before */
    uint32_t err_field, err_k;   /* ... the field and the batch position of the sample */
    uint64_t err_rows, err_used; /* ... its rows, and the field's bytes before it */
    uint64_t *ids;
    dsc_chunk_ent_t **src;
    uint32_t *in_chunk;
} dsc_step_t;

struct dsc_batch {
    dsc_loader_t *loader;
    uint32_t slot;
    uint32_t samples;
    uint64_t step;
    uint64_t seq;
    uint64_t *indices;
    int handed; /* next()'s reference is held: released by the next next() or
                   dsc_batch_release() */
};

/* A variable-length field's settings and slot layout (loader.c fills the settings at create,
 * batch.c the offsets; immutable once the threads run). Its slot regions: offsets (values mode:
 * B + 1 int64) or lengths (padded: B int64) at aux_off, the values (values mode: budget bytes;
 * padded: B x lcap rows) at field_off. */
typedef struct dsc_var_field {
    int is_var;
    int pad;                 /* padded output */
    uint64_t row_bytes;      /* bytes of one row (one step of the leading dimension) */
    uint64_t budget;         /* values mode: value bytes a batch may hold */
    uint64_t max_len;        /* padded: rows kept per sample (0: none) */
    uint64_t lcap;           /* padded: rows per sample the slot has room for */
    uint8_t pad_bytes[8];    /* padded: pad_value in the field's dtype */
    uint64_t aux_off;        /* offsets / lengths region in a slot */
    const char *budget_from; /* how budget was set, for the error text */
    int image;               /* decoded as an image: a fixed [B, 3, H, W] / [B, H, W, 3] region
                                at field_off, no offsets (image.c, decode.c collate_image) */
    int image_fill;          /* on_decode_error = fill */
    dsc_image_spec_t spec;
} dsc_var_field_t;

/* The most slot bytes one variable field may take (its budget, or B x lcap rows padded). */
#define DSC__SLOT_FIELD_MAX (16ull << 30)

/* The default values budget per batch of a variable field (docs/loader.md#variable-length-fields):
 * batch x bytes_max (*exact = 1: every batch fits) while that is at most 64 MiB, else the largest
 * of 64 MiB, bytes_max and 4 x batch x bytes_mean (at most DSC__SLOT_FIELD_MAX; *exact = 0).
 * batch >= 1. Pure (pipeline.c). */
uint64_t dsc__var_default_budget(uint64_t batch, uint64_t bytes_max, double bytes_mean, int *exact);

/* One batch slot: the host (and device) memory a step is collated into. */
typedef struct dsc_batch_slot {
    uint8_t *host;
    size_t host_bytes;
    int host_cuda; /* host came from cudaHostAlloc */
    int locked;
    uint8_t *dev;
    dsc_cuda_slot_t ev;
    uint64_t owner; /* seq using it, or SLOT_FREE */
    uint32_t refs;  /* references to its handed-out batch (next()'s, dsc_batch_retain()'s,
                       DLPack tensors'): the slot is not reused before they are all gone */
    dsc_batch_t batch;
    uint64_t var_rows[DSC_MAX_FIELDS]; /* variable fields of the collated batch: values mode, its
                                          total rows; padded, L (rows per sample) */
    uint64_t truncated;                /* samples of it cut to a max_len */
    uint64_t decode_errors;            /* images of it filled with zeros */
} dsc_batch_slot_t;
#define SLOT_FREE UINT64_MAX

/* The hint horizon (hints.c) names at most this many chunks ahead of the plan. */
#define DSC__HZ_MAX_CHUNKS 4096
/* A chunk the horizon named, waiting for its peer's next HINT (hints.c). */
typedef struct dsc__hz_pending {
    uint32_t peer, shard, shard_chunk;
    double due_at;
} dsc__hz_pending_t;

/* Order caller (DSC_ORDER_CALLER): one pushed batch, or an end mark; it becomes the step of the
 * seq it was pushed as (scheduler.c). */
typedef struct dsc_caller_ent {
    uint64_t epoch;
    uint32_t count;
    int eof;
    uint64_t *ids; /* batch_size entries */
} dsc_caller_ent_t;

/* Order caller: the running hash of the indices handed out in an epoch (the state checks a
 * resumed order against it): splitmix64 of the hash so far and the index, order-sensitive. */
static inline uint64_t dsc__caller_hash(uint64_t h, uint64_t index) {
    uint64_t z = h ^ (index + 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* One outstanding request on a connection. */
#define IO_MAX_OUTSTANDING 64

/* One I/O thread of a peer and its connection to the peer's data source. */
typedef struct dsc_io {
    dsc_loader_t *loader;
    uint32_t peer; /* index in net.peers */
    pthread_t thread;
    int started;
    void *conn; /* the source's connection, NULL while closed */
    uint64_t next_id;
    dsc_source_req_t out[IO_MAX_OUTSTANDING]; /* outstanding requests, unordered */
    uint32_t out_count;
    int hint_named; /* hints.c: a HINT went out on this connection (its GETs are this loader's;
                       fetch.c clears it on a new connection) */
    int named;      /* this connection has sent the job's REPORT (a server with --send-rate queues
                       its answers under the job: every connection names it once, when it opens) */
} dsc_io_t;

/* The first re-probe of a failed peer, doubled after each failed probe up to 10 s (fetch.c): short,
 * so that a server restarted in a rolling restart is used again within about its own downtime. */
#define DSC__BACKOFF_FIRST_S 0.25

/* Answer times kept per peer for its stall threshold (hedge.c). */
#define DSC__HEDGE_LAT 128

/* A peer's straggler state (hedge.c; fetch.c records answers). Under lock. */
typedef struct dsc_hedge_peer {
    float lat_ms[DSC__HEDGE_LAT]; /* ring of recent answer times (submit to answer), ms */
    uint32_t lat_count, lat_next;
    double progress_at; /* monotonic seconds: its last answer to any request */
    int slow;           /* marked slow: routed no new work until a probe answers */
    double slow_since;
    double check_at;       /* not suspected again before this (a PING just answered) */
    dsc_conn_t *watch;     /* hedge.c's own connection for PING (NULL: closed) */
    double ping_ms;        /* its last PING's round trip */
    uint64_t hedges;       /* its requests re-issued to another owner */
    uint64_t hedges_won;   /* ... whose re-issue arrived before its own answer */
    uint64_t hedge_bytes;  /* decoded bytes of those */
    uint64_t wasted_bytes; /* its late answers to them, received and dropped */
    uint64_t slow_marks;   /* times marked slow */
    uint64_t excused;      /* stalls excused: it answered PING (reading through, a miss) */
} dsc_hedge_peer_t;

/* One peer the loader reads from: a server, or the fallback files (index DSC__PEER_FALLBACK).
 * Under lock. */
typedef struct dsc_peer {
    char addr[DSC_MEMBER_MAX];      /* view.c (set once) */
    int used;                       /* view.c: the index holds a peer */
    int member;                     /* view.c: in the current view: chunks are routed here */
    const dsc_source_ops_t *source; /* view.c / loader.c (set once): how its bytes arrive */
    void *endpoint;                 /* the source's per-peer state */
    int alive;                      /* fetch.c: 0 after a failure, until a probe connects */
    int probing;                    /* fetch.c: one I/O thread is connecting after a failure */
    double retry_at;                /* fetch.c: monotonic seconds: reconnect not before */
    double backoff; /* fetch.c: seconds until the next probe (DSC__BACKOFF_FIRST_S .. 10) */
    uint64_t inflight_bytes; /* fetch.c: raw bytes requested here, not yet received */
    uint64_t hello_hash;     /* route.c (dsc__peer_hello): view of its last HELLO */
    dsc_chunk_queue_t queue; /* route.c pushes, fetch.c pops */
    dsc_io_t *io;            /* fetch.c: opt.connections of them */
    uint32_t io_count; /* fetch.c: I/O threads started: no chunk is routed to a peer without */
    int manifest_rc;   /* fetch.c: what its MANIFEST call gave at create (explained there) */
    double report_due; /* fetch.c: monotonic seconds: the next REPORT (any connected I/O thread) */
    uint64_t report_seq;    /* fetch.c: low bits of the REPORT ids */
    double hint_due;        /* hints.c: monotonic seconds: the next HINT may go out */
    uint32_t hz_pending;    /* hints.c: entries of hints.pending for this peer */
    int hints_off;          /* hints.c: the server answered a HINT UNSUPPORTED: no more */
    int announced;          /* route.c: the fallback files' first use was logged (once) */
    dsc_hedge_peer_t hedge; /* hedge.c: stalls, slow marking, hedged requests */
} dsc_peer_t;

/* A decode thread's own state, and that of next() when it assists. */
typedef struct dsc_worker_ctx {
    int cuda_bound;
    dsc_image_ctx_t *image; /* the thread's image decoder, made on first use */
    dsc_nvjpeg_t *nvjpeg;   /* the thread's nvJPEG handle and state (cfg.nvjpeg), on first use */
    int nvjpeg_failed;      /* it could not be made: this thread decodes on the host */
    uint8_t *scratch;       /* decoded multi-field chunks on their way into a slot */
    size_t scratch_cap;
} dsc_worker_ctx_t;

struct dsc_loader {
    /* Owner loader.c (create): configuration, immutable once the threads run. */
    struct {
        dsc_loader_options_t opt;
        char *dataset;
        char *fallback;
        dsc_logger_t log;
        dsc_manifest_t *manifest;
        uint64_t samples;
        uint64_t sample_bytes;
        uint32_t field_count;
        uint64_t field_off[DSC_MAX_FIELDS];  /* batch.c: offset of field f's array in a slot
                                                (a variable field: its values or padded array) */
        dsc_var_field_t var[DSC_MAX_FIELDS]; /* loader.c (create): variable-length fields */
        uint32_t var_count;                  /* fields with var[f].is_var */
        uint64_t cache_bytes;
        char *servers_spec;     /* the options' servers string, re-resolved by view.c */
        dsc_credential_t *cred; /* server connections authenticate with it (NULL: anonymous) */
        dsc_bufpool_t pool;     /* thread-safe itself */
        dsc_cuda_t *cuda;
        int nvjpeg; /* decode.c (dsc__decode_probe_gpu): image fields decode with nvJPEG */
        int reader; /* the loader of a dsc_reader_t (reader.c): no plan of its own */
        dsc_source_env_t source_env;                 /* what the data sources see */
        dsc_transport_counters_t transport_counters; /* the sources' (source_env.counters) */
    } cfg;

    /* Owner mixture.c: a loader over a mixture (dsc_loader_create with sources): its batches
     * are composed by this mixture into the slots; no threads, peers or plan of its own. */
    dsc_mixture_t *mix;
    /* Set with mix: the options of another loader over the same mixture (mixture.c's
     * dsc__mix_loader_options), for the packer's temporary loaders of old ranks, which cannot
     * include mixture.h (mixture.c includes pack.h). */
    int (*mix_options)(const struct dsc_loader *loader, dsc_loader_options_t *lo,
                       dsc_source_options_t *so, uint32_t cap);

    /* Owner pipeline.c (error, via dsc__loader_fail) and loader.c (stop, the condition
     * variables): the lock and the wake-ups every stage shares. */
    pthread_mutex_t lock;
    pthread_cond_t sched_cv, io_cv, work_cv, cons_cv;
    int stop;
    int error;
    /* Owner loader.c: the last failure in words (dsc_loader_last_error): the last ERROR line
     * (log.c keeps it), or create's explanation per server. Under err_lock. */
    pthread_mutex_t err_lock;
    char err_text[1024];

    /* Owner view.c (dsc__view_adopt), read by route.c and fetch.c; under lock. */
    struct {
        dsc_members_t members; /* the current view: placement is computed over it */
        uint32_t *member_peer; /* members.count entries: member index -> peer index */
        uint64_t view_hash;    /* dsc_members_hash(&members) */
        uint32_t peer_count;   /* server peers in use (0 .. DSC_LOADER_MAX_PEERS) */
        dsc_peer_t *peers;     /* DSC_LOADER_MAX_PEERS + 1; the last: the fallback files */
        int threads_running;   /* peers added from now on start their I/O threads at once */
    } net;

    /* Owner view.c: the view thread. pending is set by route.c (dsc__peer_hello). Under lock. */
    struct {
        pthread_t thread;
        int started;
        pthread_cond_t cv;
        int pending;           /* a server answered HELLO with another view: converge */
        double source_changed; /* when the file / DNS answer last changed the view */
        uint64_t changes;      /* views adopted since creation */
        dsc_conn_t *conn;      /* the view thread's connection, shut down by destroy */
    } view;

    /* Owner hedge.c: the straggler thread (docs/cluster.md, "Stragglers"). Under lock. */
    struct {
        pthread_t thread;
        int started;
        int on;           /* 1: hedging and slow marking on (DSCACHE_HEDGE=0: off) */
        double floor_s;   /* least stall before a server is suspected (DSCACHE_HEDGE_MS) */
        double budget;    /* hedged bytes at most this share of bytes received */
        uint64_t bytes;   /* decoded bytes re-issued so far */
        dsc_conn_t *conn; /* the watch connection in use without the lock (destroy shuts it) */
    } hedge;

    /* Owner chunks.c (the table), filled by scheduler.c, emptied by decode.c and state.c. Under
     * lock. */
    dsc_chunk_table_t chunks;

    /* Owner fetch.c: the loader-wide in-flight budget (raw bytes sent for but not yet decoded;
     * decode.c gives bytes back once decoded). Under lock. */
    struct {
        uint64_t inflight_used;
    } fetch;

    /* Owner hints.c: read-ahead hints (HINT) and the hint horizon. Under lock. */
    struct {
        /* 0 not decided yet, 1 on, -1 off (DSCACHE_HINTS=0); the loader's hinter id; when the
         * first hint went out (for the rate estimate). */
        int on;
        uint64_t hinter;
        double t0;
        /* Chunks the horizon named, not yet sent: per entry its peer, chunk and when it should
         * be asked for (monotonic seconds); when the horizon is walked next. */
        dsc__hz_pending_t *pending;
        uint32_t pending_count;
        double walk_due;
        /* The horizon: the plan walked ahead of sched.plan_seq, on an order of its own, to name
         * the chunks of the next seconds of demand to their servers before they are queued.
         * seq: the seq the step `step` of `epoch` will have; bits[e & 1]: a bit per chunk named
         * for epoch bits_epoch[e & 1]; ring: the seqs of the named chunks not yet planned (at
         * most DSC__HZ_MAX_CHUNKS, from head). */
        dsc_order_t *order;
        dsc_split_t split;
        dsc_local_t local;
        int valid;
        uint64_t epoch, step, seq;
        uint64_t *bits[2];
        uint64_t bits_epoch[2];
        uint64_t *ring;
        uint32_t head, count;
        /* The walk looks up a step's samples without the lock (order and local are the
         * walker's alone): one walker at a time; gen changes when a restart resets it. */
        int walking;
        uint64_t gen;
        dsc_sample_loc_t *locs; /* batch_size entries */
    } hints;

    /* Owner decode.c: decode threads, the decode queue (fetch.c pushes), assist. Under lock. */
    struct {
        dsc_chunk_queue_t decode_queue;
        uint32_t collating;   /* collations and placements running (state.c waits for 0) */
        int assist;           /* next() works while it waits (opt.no_assist == 0, no CUDA) */
        int consumer_waiting; /* next() sleeps on cons_cv and would assist: new work wakes it */
        dsc_worker_ctx_t assist_ctx; /* next()'s, used under its call */
        uint32_t worker_count;
        pthread_t *workers;
        uint32_t workers_started;
    } work;

    /* Owner scheduler.c: the scheduler thread, the step ring and the plan (order, split). Under
     * lock. */
    struct {
        pthread_t thread;
        int started;
        dsc_step_t *steps; /* ring of step_cap */
        uint32_t step_cap;
        uint64_t plan_seq; /* next seq to plan */
        uint64_t slot_seq; /* next seq to get a slot */
        dsc_order_t *order;
        uint64_t plan_epoch;
        dsc_split_t plan_split;                 /* order global: the split being planned */
        dsc_local_t plan_local;                 /* order local: the segment being planned */
        dsc_plan_seg_t hist[DSC_PLAN_MAX_SEGS]; /* order local: this epoch's earlier segments
                                                   (set by dsc__sched_restart; state.c reads
                                                   the first cons.cons_nhist) */
        uint32_t plan_nhist;                    /* ... of them in force for the planner */
        uint64_t plan_step;
        uint64_t plan_step_base;
        uint64_t *fetched; /* bit per global chunk: fetched in the epoch being planned */
        uint64_t fetched_words;
        uint64_t order_next; /* next dsc_chunk_ent_t.order */
        /* Look-ahead into an epoch the consumer has not asked for yet (plan_epoch >
         * cons.want_epoch): only the chunks of its first ahead_limit steps are fetched (at most
         * inflight_bytes of them past its first step); the others wait here, in plan order, not
         * routed (state CH_QUEUED, peer UINT32_MAX), until next() asks for that epoch. */
        dsc_chunk_queue_t deferred;
        uint64_t ahead_steps; /* steps of plan_epoch planned while it was not asked for */
        uint64_t ahead_bytes; /* raw bytes of the chunks those steps queued for fetching */
        /* Order caller: the batches pushed (dsc__sched_push) and not planned yet, seqs plan_seq
         * .. push_seq - 1 at ring[seq % ring_cap] (ring_cap: opt.order_ahead; a push is refused
         * while push_seq - cons.cons_seq is at it). push_epoch: the epoch of the next push;
         * push_pos: indices pushed in it (skipped ones too), the positions errors name. After a
         * state_load, skip samples of the epoch are still to be skipped (not planned), and their
         * hash must come to skip_hash (from skip_seen, the hash of those skipped so far). */
        struct {
            dsc_caller_ent_t *ring;
            uint32_t ring_cap;
            uint64_t push_seq, push_epoch, push_pos;
            uint64_t skip, skip_hash, skip_seen, skip_total;
        } caller;
    } sched;

    /* Owner batch.c (slots) and loader.c (the consumer's position). Under lock. */
    struct {
        uint64_t cons_seq;    /* next seq to hand out */
        uint64_t retired_seq; /* steps below were released */
        uint32_t slot_count;
        uint32_t slot_cap;        /* entries of slots */
        dsc_batch_slot_t **slots; /* slot_count slots (each allocated once: batches point in) */
        uint32_t held;            /* slots whose batch has references (refs > 0) */
        size_t slot_bytes;
        dsc_batch_t *current; /* handed out, not yet released */
        uint64_t cons_epoch, cons_pos;
        uint64_t want_epoch;   /* the epoch next() was last called for (cons_epoch at its call; a
                                  restart's epoch): the scheduler fetches only what hides latency
                                  of any later epoch (sched.deferred) */
        uint32_t cons_nhist;   /* order local: sched.hist entries before cons_pos's segment */
        uint64_t cons_samples; /* order caller: samples handed out this epoch (cons_pos: batches) */
        uint64_t cons_hash;    /* ... and the dsc__caller_hash of their indices */
        void *user_stream;
    } cons;

    /* Owner stats.c (reading, the periodic line); each stage adds to its own counters in st.
     * Under lock. */
    struct {
        dsc_stats_t st;
        double created_at;
        double last_return; /* when next() last returned (compute time starts) */
        double last_log;
        uint64_t last_log_samples;
        double last_log_stall, last_log_compute;
        /* Wire bytes received per epoch of the step that first needed each chunk: entry
         * epoch % DSC__EPOCH_RING (the scheduler plans at most one epoch ahead of the consumer,
         * so the current and next epochs never share an entry). */
        dsc_epoch_wire_t epoch_wire[DSC__EPOCH_RING];
    } stats;

    /* Owner diag.c: the verdict's counters and window, the job name. loader.c books the stall
     * by what next() waits on, fetch.c the per-peer answer times. Under lock. */
    dsc_diag_t diag;
};

/* The epoch order in use is order local (the default) rather than order global. */
static inline int dsc__order_is_local(const dsc_loader_t *loader) {
    return loader->cfg.opt.order == DSC_ORDER_LOCAL;
}

/* The epoch order is the caller's (DSC_ORDER_CALLER): steps come from dsc__sched_push. */
static inline int dsc__order_is_caller(const dsc_loader_t *loader) {
    return loader->cfg.opt.order == DSC_ORDER_CALLER;
}

/* Requests may name chunks of any shards (scattered, source.h) where the source allows it: the
 * map-style reader and the caller's order, whose chunks come in the caller's random order and
 * rarely form runs. The loader's own orders keep runs (a plan reads chunk runs and staged,
 * hinted ranges). */
static inline int dsc__fetch_scatters(const dsc_loader_t *loader) {
    return loader->cfg.reader || dsc__order_is_caller(loader);
}

/* Decoded bytes the planner holds at a window boundary: WINDOWS_HELD (2) windows plus the steps
 * that finish one and two of the largest chunks each (*need); *edge is that figure without the
 * windows, so (cache_bytes - edge) / 2 / sample_bytes is the window a cache fits. Used by the
 * create-time check (loader.c) and the cache verdict (diag.c), so both read the same rule. */
#define DSC__WINDOWS_HELD 2
typedef struct dsc_cache_need {
    uint64_t need, edge;       /* bytes, as above */
    uint64_t window, per_step; /* samples: the shuffle window, one step's span past it */
    uint64_t chunk_max;        /* bytes of the largest decoded chunk */
} dsc_cache_need_t;
void dsc__cache_need(const dsc_loader_t *loader, dsc_cache_need_t *out);

/* dsc__loader_fail with the failure's account in words: `text` is the one ERROR line
 * ("loader failed: TEXT", what dsc_loader_last_error gives) instead of the generic one. For a
 * stage that knows what went wrong and what would fix it (route.c: a chunk with no intact
 * source left). Under lock; a later dsc__loader_fail with the same err is a no-op. */
void dsc__loader_fail_with(dsc_loader_t *loader, int err, const char *text);

/* Adds a received chunk's wire bytes to the epoch whose step first needed it. Under lock. */
static inline void dsc__epoch_wire_add(dsc_loader_t *loader, uint64_t epoch, uint64_t bytes) {
    dsc_epoch_wire_t *e = &loader->stats.epoch_wire[epoch % DSC__EPOCH_RING];
    if (e->epoch != epoch) {
        e->epoch = epoch;
        e->bytes = 0;
    }
    e->bytes += bytes;
}

/* Forgets every epoch's attributed wire bytes (a restart). Under lock. */
static inline void dsc__epoch_wire_reset(dsc_loader_t *loader) {
    for (int i = 0; i < DSC__EPOCH_RING; i++) {
        loader->stats.epoch_wire[i].epoch = UINT64_MAX;
        loader->stats.epoch_wire[i].bytes = 0;
    }
}

/* Called first by each of the loader's own threads (decode, scheduler, I/O, view): makes it
 * SCHED_BATCH where the system has it, the same CPU share as before, but its wake-ups (a slot
 * given back, a chunk arrived) no longer preempt the thread that runs next() and the training
 * step; DSCACHE_LOADER_SCHED=other keeps the default policy (docs/loader.md). */
void dsc__loader_thread_start(void);
/* Fails the loader with err (the first error wins; logged unless stopping) and wakes every
 * thread. Under lock. */
void dsc__loader_fail(dsc_loader_t *loader, int err);
/* The same for a failure whose cause was just logged at ERROR: that line stays the loader's
 * last error (dsc_loader_last_error), naming what to change. Under lock. */
void dsc__loader_fail_logged(dsc_loader_t *loader, int err);

#endif
