/* Loader internals shared by loader.c (API, scheduler, consumer), fetch.c (I/O threads),
 * decode.c (checksum + lz4 + collate workers) and stats.c. One mutex guards the shared state;
 * bulk work (network I/O, decoding, copying) runs outside it.
 *
 * Pipeline, per step of this rank (a batch, or an end-of-epoch marker), in stream order (seq):
 *   scheduler: plan the step (sample ids -> chunk entries, new chunks queued for fetch) while
 *              the decoded-chunk budget allows; give it slot seq % slot_count once free
 *   I/O:       pop queued chunks (merging consecutive ones of a shard into one GET), send
 *              within the in-flight budget, receive each chunk into a pooled buffer
 *   workers:   verify + decompress received chunks; collate a slotted step once all its
 *              chunks are decoded (then H2D with CUDA); drop chunks no planned step needs
 *   consumer:  next() waits for step cons_seq to be READY (stall), hands it out, releases
 *              the previous one.
 *   view:      (view.c) keeps the member list current: re-reads a file: spec when it changes,
 *              re-resolves a dns: spec, and adopts the view the servers agree on when a HELLO
 *              shows a different one; only routing changes, never the plan. */
#ifndef DSC_LOADER_INT_H
#define DSC_LOADER_INT_H

#include "conn.h"
#include "cuda.h"
#include "diag.h"
#include "dsc_sys.h" /* dsc_pread_full (fallback reads), dsc_members_resolve */
#include "dscache.h"
#include "log.h"
#include "manifest.h"
#include "placement.h"
#include "plan.h"
#include "slots.h"

#include <pthread.h>
#include <stdint.h>

/* Server slots the loader can address (members of every view it has held; slots are never
 * reused for another address). The fallback files use slot DSC__FALLBACK. */
#define DSC_LOADER_MAX_SERVERS 256
#define DSC__FALLBACK DSC_LOADER_MAX_SERVERS

/* Chunk entry states. */
enum { CH_QUEUED, CH_INFLIGHT, CH_RECEIVED, CH_DECODING, CH_READY };

typedef struct dsc_chunk_ent {
    uint64_t gid; /* global chunk id (dsc_sample_loc_t.chunk) */
    uint32_t shard, shard_chunk, samples;
    uint64_t raw_len;
    int state;
    int cancelled;   /* dropped by a restart while a thread held it: that thread frees it */
    uint64_t refs;   /* sample needs of planned steps not yet collated */
    uint32_t server; /* slot where it is queued or in flight (DSC__FALLBACK: the files) */
    /* bit i: server slot i failed for it or sent it corrupt (bit DSC__FALLBACK: the files) */
    uint64_t tried[DSC_LOADER_MAX_SERVERS / 64 + 1];
    uint64_t order;          /* creation order (re-routing keeps it) */
    dsc_chunk_entry_t entry; /* as received */
    uint8_t *stored;
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
} dsc_chunk_ent_t;

typedef struct dsc_chunk_queue {
    dsc_chunk_ent_t *head, *tail;
    uint64_t count;
    uint64_t bytes; /* raw bytes of the queued entries */
} dsc_chunk_queue_t;

/* Step states. */
enum { ST_PLANNED, ST_COLLATING, ST_READY, ST_HANDED };

typedef struct dsc_step {
    uint64_t seq;
    uint64_t epoch;
    uint64_t step;      /* batch number in the epoch */
    uint64_t pos_after; /* global position once this step is consumed */
    int eof;            /* end-of-epoch marker */
    int state;
    uint32_t count;
    uint32_t scan; /* samples before this index are known decoded */
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
    int handed; /* between next() and its release */
};

typedef struct dsc_slot {
    uint8_t *host;
    size_t host_bytes;
    int host_cuda; /* host came from cudaHostAlloc */
    int locked;
    uint8_t *dev;
    dsc_cuda_slot_t ev;
    uint64_t owner; /* seq using it, or SLOT_FREE */
    dsc_batch_t batch;
} dsc_slot_t;
#define SLOT_FREE UINT64_MAX

struct dsc_io;

/* One server slot: its address, health, queue and connections (I/O threads). */
typedef struct dsc_server {
    char addr[DSC_MEMBER_MAX];
    int used;                /* the slot holds a server (or the fallback files) */
    int member;              /* in the current view: chunks are routed here */
    int alive;               /* 0 after a failure, until a probe connects again */
    int probing;             /* one I/O thread is trying to connect after a failure */
    double retry_at;         /* monotonic seconds: reconnect not before */
    double backoff;          /* seconds until the next probe after a failed one (1 .. 10) */
    uint64_t inflight_bytes; /* raw bytes requested here, not yet received */
    uint64_t hello_hash;     /* members_hash of the last HELLO answer (0: none or single node) */
    dsc_chunk_queue_t queue;
    struct dsc_io *io; /* opt.connections of them */
    uint32_t io_count; /* I/O threads started: no chunk is routed to a slot without them */
} dsc_server_t;

/* One outstanding GET on a connection. */
#define IO_MAX_MERGE 16
typedef struct dsc_io_req {
    uint64_t id;
    uint32_t count;
    dsc_chunk_ent_t *chunks[IO_MAX_MERGE];
} dsc_io_req_t;

#define IO_MAX_OUTSTANDING 64
typedef struct dsc_io {
    dsc_loader_t *loader;
    uint32_t server; /* server slot, or DSC__FALLBACK for the fallback files */
    pthread_t thread;
    int started;
    dsc_conn_t *conn;
    uint64_t next_id;
    dsc_io_req_t out[IO_MAX_OUTSTANDING]; /* outstanding requests, unordered */
    uint32_t out_count;
    double report_due; /* monotonic seconds: the next REPORT (first I/O thread of a server) */
    uint64_t report_seq;
} dsc_io_t;

/* Shard files for the fallback path: opened on first use. */
typedef struct dsc_file_shard {
    int fd; /* -1 until opened */
    int failed;
    uint64_t chunk_count;
    uint8_t *index; /* chunk_count entries */
} dsc_file_shard_t;

/* A decode thread's own state, and that of next() when it assists. */
typedef struct dsc_worker_ctx {
    int cuda_bound;
    uint8_t *scratch; /* decoded multi-field chunks on their way into a slot */
    size_t scratch_cap;
} dsc_worker_ctx_t;

struct dsc_loader {
    /* Configuration (immutable after create). */
    dsc_loader_options_t opt;
    char *dataset;
    char *fallback;
    dsc_logger_t log;
    dsc_manifest_t *manifest;
    uint64_t samples;
    uint64_t sample_bytes;
    uint32_t field_count;
    uint64_t field_off[DSC_MAX_FIELDS]; /* offset of field f's array inside a slot */
    uint64_t cache_bytes;
    uint32_t step_cap;
    char *servers_spec; /* the options' servers string, re-resolved by the view thread */

    /* Cluster view (under lock; replaced by dsc__view_adopt). */
    dsc_members_t members; /* the current view: placement is computed over it */
    uint32_t *member_slot; /* members.count entries: member index -> server slot */
    uint64_t view_hash;    /* dsc_members_hash(&members) */
    uint32_t server_count; /* server slots in use (0 .. DSC_LOADER_MAX_SERVERS) */
    dsc_server_t *servers; /* DSC_LOADER_MAX_SERVERS + 1 slots; the last: fallback files */
    int threads_running;   /* slots added from now on start their I/O threads at once */
    uint64_t order_next;   /* next dsc_chunk_ent_t.order */
    /* View thread (view.c). */
    pthread_t view_thread;
    int view_started;
    pthread_cond_t view_cv;
    int view_pending;           /* a server answered HELLO with another view: converge */
    double view_source_changed; /* when the file / DNS answer last changed the view */
    uint64_t view_changes;      /* views adopted since creation */
    dsc_conn_t *view_conn;      /* the view thread's connection, shut down by destroy */
    dsc_file_shard_t *files;
    pthread_mutex_t files_lock;
    dsc_bufpool_t pool;
    dsc_cuda_t *cuda;
    void *user_stream;

    /* Threads (the I/O threads live in their server slots). */
    uint32_t worker_count;
    pthread_t *workers;
    uint32_t workers_started;
    pthread_t sched;
    int sched_started;

    /* Shared state, under lock. */
    pthread_mutex_t lock;
    pthread_cond_t sched_cv, io_cv, work_cv, cons_cv;
    int stop;
    int assist;           /* next() works while it waits (opt.no_assist == 0, no CUDA) */
    int consumer_waiting; /* next() sleeps on cons_cv and would assist: new work wakes it */
    dsc_worker_ctx_t assist_ctx;
    int error;
    dsc_chunk_ent_t **buckets;
    uint64_t bucket_mask;
    uint64_t held_bytes;    /* raw bytes of chunk entries in the table */
    uint64_t inflight_used; /* raw bytes sent for but not yet decoded */
    dsc_chunk_queue_t decode_queue;
    dsc_step_t *steps;    /* ring of step_cap */
    uint64_t plan_seq;    /* next seq to plan */
    uint64_t slot_seq;    /* next seq to get a slot */
    uint64_t cons_seq;    /* next seq to hand out */
    uint64_t retired_seq; /* steps below were released */
    uint32_t collating;
    dsc_order_t *order;
    uint64_t plan_epoch;
    dsc_split_t plan_split;
    uint64_t plan_step;
    uint64_t plan_step_base;
    uint64_t *fetched; /* bit per global chunk: fetched for the epoch being planned (refetches) */
    uint64_t fetched_words;
    uint32_t slot_count;
    dsc_slot_t *slots;
    size_t slot_bytes;
    dsc_batch_t *current; /* handed out, not yet released */
    uint64_t cons_epoch, cons_pos;

    /* Statistics (under lock). */
    dsc_stats_t st;
    double created_at;
    double last_return; /* when next() last returned (compute time starts) */
    double last_log;
    uint64_t last_log_samples;
    double last_log_stall, last_log_compute;
    dsc_diag_t diag; /* verdict counters and window, the job name (diag.h; under lock) */
};

/* loader.c */
void dsc__loader_fail(dsc_loader_t *loader, int err);             /* under lock: first error wins */
void dsc__chunk_free(dsc_loader_t *loader, dsc_chunk_ent_t *ent); /* buffers + struct */
void dsc__chunk_unlink(dsc_loader_t *loader, dsc_chunk_ent_t *ent); /* from the table */
/* Picks the server slot for a chunk: among its live owners not yet tried, the one its chunk
 * group (8 consecutive chunks of a shard) hashes to, unless it has more work (queued + in
 * flight bytes) than the least loaded owner by over four chunks; else the least loaded live
 * member; else the fallback files (DSC__FALLBACK) unless they were tried for it; else -1.
 * Under lock. */
int dsc__route_chunk(dsc_loader_t *loader, dsc_chunk_ent_t *ent);
/* Starts slot s's I/O threads that are not running yet. Under lock. Returns 0 or DSC_ENOMEM. */
int dsc__server_start(dsc_loader_t *loader, uint32_t s);
/* Queues ent on server slot s (sets ent->server). Under lock. */
void dsc__server_push(dsc_loader_t *loader, uint32_t s, dsc_chunk_ent_t *ent);
/* Per-server bound on bytes in flight: opt.server_inflight_bytes, or 2 * inflight_bytes / the
 * number of members. Under lock. */
uint64_t dsc__server_inflight_limit(const dsc_loader_t *loader);
/* Installs `members` (taken over; *members is left empty) as the current view: slots for new
 * addresses (their I/O threads started when the loader runs), removed ones stop getting work,
 * queued chunks are re-routed in their planned order. Under lock. Returns 0, or DSC_ERANGE
 * (more than DSC_LOADER_MAX_SERVERS addresses over the loader's life; the view is kept) or
 * DSC_ENOMEM. */
int dsc__view_adopt(dsc_loader_t *loader, dsc_members_t *members);
void dsc__queue_push(dsc_chunk_queue_t *q, dsc_chunk_ent_t *ent);
dsc_chunk_ent_t *dsc__queue_pop(dsc_chunk_queue_t *q);

/* Errors that say the bytes of a chunk are damaged at their source (a server answered CORRUPT,
 * or the checksum or the lz4 block failed here): another replica or the fallback files may hold
 * an intact copy. */
static inline int dsc__is_corruption(int err) {
    return err == DSC_ECORRUPT || err == DSC_ECHUNKSUM || err == DSC_EDATASUM ||
           err == DSC_EDECOMPRESS;
}

/* fetch.c */
void *dsc__io_main(void *arg);
/* The chunk's bytes from slot ent->server were corrupt (err, see dsc__is_corruption) and were
 * never handed out: marks that source tried for the chunk, counts a checksum failure and a
 * fail-over, and queues the chunk on another replica, else on the fallback files. ent holds no
 * buffers, is in no queue and is not in flight (its budgets were given back). Under lock.
 * Returns the slot it was queued on, or err when no source is left (the error is logged once;
 * the caller fails the loader with it). */
int dsc__chunk_refetch(dsc_loader_t *loader, dsc_chunk_ent_t *ent, int err);
/* Fetches and parses the manifest: from the first server that answers, else the fallback
 * directory. Returns 0 or DSC_E*. */
int dsc__fetch_manifest(dsc_loader_t *loader);

/* view.c */
void *dsc__view_main(void *arg);
/* An I/O thread connected to slot s and HELLO said `hash`: note a different view. Under lock. */
void dsc__view_hello(dsc_loader_t *loader, uint32_t s, uint64_t hash);
/* Parses a MEMBERS answer (proto/PROTOCOL.md) into *out (canonical list, free with
 * dsc_members_free) and *hash; *clustered from the answer, *self_member = the answering server's
 * "self" is in the list. Never reads past len. Returns 0, or DSC_EPROTO (not the documented
 * JSON, a bad member, or a hash that does not match the list), DSC_ENOMEM. */
int dsc__members_json_parse(const char *text, size_t len, dsc_members_t *out, uint64_t *hash,
                            int *clustered, int *self_member);

/* decode.c */
void *dsc__worker_main(void *arg);
/* One unit of work, if there is one: collate a step whose chunks are all decoded, else verify +
 * decode one received chunk. Under lock (released while working). Returns 1 when it did
 * something, 0 when there was nothing to do. */
int dsc__worker_pass(dsc_loader_t *loader, dsc_worker_ctx_t *ctx);
/* Wakes an idle decode thread for one new unit of work, and next() when it would assist. Under
 * lock. */
void dsc__work_signal(dsc_loader_t *loader);

/* stats.c */
void dsc__stats_maybe_log(dsc_loader_t *loader, double now); /* under lock */

#endif
