/* dscache.h: the one public header of libdscache, the dscache client library.
 * A loader streams training batches (fixed-shape and variable-length fields) from dscached
 * servers (or shard files), prefetched into pinned memory and, with CUDA, onto the GPU ahead of
 * need; a writer turns samples into a dataset directory. */
#ifndef DSCACHE_H
#define DSCACHE_H

#include "dscache_base.h" /* errors, dtypes, limits, log levels, version, DSC_EXTERN */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Logging ------------------------------------------------------------------------------
 * The library never writes to stderr by itself: it calls the log callback. Without one it is
 * quiet, unless DSCACHE_LOG=error|warn|info|debug is set, then it logs to stderr. Levels are
 * DSC_LOG_ERROR .. DSC_LOG_DEBUG (dscache_base.h). */
typedef void (*dsc_log_fn)(void *ctx, int level, const char *message);

/* ---- Loader -------------------------------------------------------------------------------- */
typedef struct dsc_loader dsc_loader_t;
typedef struct dsc_batch dsc_batch_t;

typedef struct dsc_loader_options {
    size_t struct_size;        /* sizeof(dsc_loader_options_t): lets the struct grow */
    const char *servers;       /* "HOST:PORT,HOST:PORT", "dns:NAME:PORT" or "file:PATH" */
    const char *dataset;       /* dataset name as served */
    uint32_t batch_size;       /* samples per batch per rank (default 32) */
    uint64_t seed;             /* shuffle seed (default 0) */
    uint32_t rank;             /* this trainer's rank (default 0) */
    uint32_t world_size;       /* number of ranks (default 1) */
    int shuffle;               /* 0: dataset order; 1: shuffled (default 1) */
    uint32_t shuffle_window;   /* samples shuffled together after chunk shuffle (default 0: from
                                  the dataset, min(8192, 64 MiB / sample bytes)) */
    int drop_last;             /* 1: drop the last partial batch and the tail (default 0; an
                                  epoch left with no batch at all is refused by create) */
    uint32_t prefetch_batches; /* batch slots prepared ahead (default 4) */
    uint64_t inflight_bytes;   /* bound on bytes requested but not yet decoded (default 64 MiB) */
    uint32_t decode_threads;   /* checksum + lz4 workers (default 2) */
    uint32_t connections;      /* connections per server (default 2) */
    int device;                /* -1: host batches (default); >= 0: CUDA device index */
    uint32_t timeout_ms;       /* per-request time-out before fail-over (default 5000; at most
                                  3600000; 0 = default) */
    uint32_t replicas;         /* replication factor used for placement; 0 (default): the
                                  servers' (MEMBERS carries it; a server too old to send it:
                                  2). An explicit value the servers disagree with is logged
                                  at WARN and used (it decides where chunks are looked for) */
    const char *fallback_path; /* dataset directory readable by the trainer, or NULL */
    dsc_log_fn log_fn;         /* NULL: quiet (or DSCACHE_LOG) */
    void *log_ctx;
    int log_level;                  /* messages above this level are not formatted (default WARN) */
    double stats_log_seconds;       /* > 0: an INFO log line with rates and stall % this often */
    uint64_t cache_bytes;           /* bound on decoded chunk bytes kept for the batches ahead: a
                                       shuffle window's chunks are fetched once while they fit
                                       (default 0: from the dataset, the larger of 256 MiB and
                                       what the shuffle window needs, so that nothing is fetched
                                       twice per epoch; see docs/order.md) */
    uint64_t server_inflight_bytes; /* bound on bytes in flight to any one server, so that a slow
                                       or stalled server cannot hold the whole inflight_bytes
                                       budget (default 0: 2 * inflight_bytes / servers) */
    int no_assist;         /* 0 (default): a next() that has to wait does the waiting batch's work
                              itself (decode chunks, collate), beside the decode threads, instead of
                              sleeping; without CUDA only (a CUDA device keeps the caller's thread free of
                              CUDA calls). 1: next() only waits. */
    const char *auth_file; /* token file (NAME SECRET) to authenticate with; NULL: the file named
                              by $DSCACHE_TOKEN_FILE, else /var/run/secrets/dscache/token when it
                              exists, else anonymous (docs/security.md). Read once by create; an
                              unreadable or invalid named file fails create with -errno,
                              DSC_EINVAL or DSC_ETOOLARGE. A loader with a credential refuses
                              servers that do not authenticate. */
    int order; /* epoch order across ranks (docs/order.md): DSC_ORDER_LOCAL (default): each
                  rank reads a contiguous run of the shuffled chunks, so the job receives about
                  the stored dataset once per epoch at any world size; DSC_ORDER_GLOBAL: one
                  world-size-independent order cut into rank blocks per step (every rank reads
                  about the whole dataset per epoch); DSC_ORDER_CALLER: the batches the caller
                  pushes (dsc_loader_push_order) */
    uint64_t max_held_bytes; /* bound on the batch slot bytes the caller may hold at once:
                                batches kept past the next next() (dsc_batch_retain, DLPack
                                tensors not yet deleted) each hold a slot; when every slot is
                                held the loader adds one (stats slots_added), and next()
                                returns DSC_EHELD when the batches held plus the new one would
                                pass this bound. One held batch is always allowed. Default 0:
                                1 GiB (host and, with CUDA, device memory alike) */
    const char *job_name;    /* job name reported to the servers (REPORT, docs/diagnosis.md);
                                NULL: DSCACHE_JOB, else the launcher's ("torchrun-ID" from
                                TORCHELASTIC_RUN_ID, "slurm-ID" from SLURM_JOB_ID, the pod
                                name under Kubernetes), else "HOST-PID". Characters outside
                                [A-Za-z0-9_.:@/-] become '_', cut to 63 bytes; copied at create */
    double report_seconds;   /* seconds between REPORTs of stall and rate to each server
                                (default 0: 5 s; < 0: never). dsc_loader_destroy sends a last
                                one flagged FINISHED to each server reported to (a fresh
                                connection, at most 1 s each) */
    const char *transport;   /* "tcp", "rdma" or "auto" (NULL: $DSCACHE_TRANSPORT, else "auto").
                                auto: RDMA READ where this host and the server both can, else TCP,
                                per connection (one INFO line says which and why); rdma: RDMA or an
                                error (DSC_EUNAVAIL at create without a usable device). See
                                docs/rdma.md */
    /* Variable-length fields (docs/loader.md#variable-length-fields): per-field output and
     * memory settings, field_option_count entries read with the stride of the first entry's
     * struct_size (so that an older, smaller dsc_field_options_t still works). Copied at
     * create. An entry naming no field, or a fixed field, fails create with DSC_EINVAL. NULL /
     * 0: every variable field as values + offsets, with the default budget. */
    const struct dsc_field_options *field_options;
    uint32_t field_option_count;
    int ignore_rank_env;  /* 0 (default): create fails with DSC_EINVAL, naming both, when
                             RANK or WORLD_SIZE is set in the environment (torchrun, Slurm
                             and MPI launchers) and disagrees with rank / world_size, since
                             such a process would read another rank's samples (or all of
                             them); 1: no check, for a process meant to read on its own */
    uint64_t epochs;      /* epochs the job runs, counted from epoch 0 (0, the default: no limit).
                             Nothing of epoch `epochs` or later is planned or fetched, so the last
                             epoch's look-ahead fetches nothing for an epoch that never comes (a
                             one-epoch job receives its share once); next() ends each pass there at
                             once with DSC_EOF. Without it the loader fetches the next epoch's first
                             steps ahead (docs/order.md, "Network bytes") */
    uint32_t order_ahead; /* order DSC_ORDER_CALLER: batches the caller may push ahead of next()
                             (dsc_loader_push_order): how far the loader sees the caller's
                             order, so that it plans fetches and hints servers along it. 0 (the
                             default): the batches whose decoded bytes fill cache_bytes, at least
                             those filling inflight_bytes plus prefetch_batches, at most the
                             smaller of 1024 and 2^18 / batch_size. At most 2^20 / batch_size;
                             ignored by the other orders (docs/order.md#the-callers-order) */
    /* Mixtures (docs/mixtures.md). sources / n_sources: the sources of a mixture (an array of
     * dsc_source_options_t, read with the stride of the first's struct_size). n_sources > 0:
     * dsc_loader_create makes a loader over the mixture (dataset, fallback_path and
     * field_options ignored; order local and device -1 only): dsc_loader_next hands out
     * ordinary batches (retain/release, field views, DLPack as for one dataset) of the fields
     * every source has (dtype and shape must agree, else DSC_EINVAL naming the source, the field
     * and both definitions) and two more: "source" (int32 per sample: the index of its source
     * in `sources`) and "source_epoch" (int64 per sample: its source-epoch); a source field of
     * either name is refused; dsc_batch_indices gives each
     * sample's index in its own dataset. A thread of the loader composes up to
     * prefetch_batches - 1 batches ahead into free slots. Variable fields are values + offsets,
     * their slot budget batch_size x the largest sample any source's manifest knows (at most 64
     * MiB; a batch over it fails the loader with DSC_ETOOLARGE). state_save/state_load are the
     * mixture's (dsc_mixture_state_save), dsc_loader_stats sums the sources' wire and stage figures
     * (the verdict: the starving source's); dsc_loader_mixture gives per-source figures.
     * dsc_loader_set_epoch accepts only the current epoch; dsc_loader_len is 0. Also taken by
     * dsc_mixture_create(options, NULL, 0, ...) when it is given no sources of its own.
     * exhausted: what a mixture does when a source's
     * source-epoch ends: DSC_EXHAUSTED_WRAP (0, default) starts its next one;
     * DSC_EXHAUSTED_STOP ends the mixture's epoch (the batch in progress is handed out short,
     * the next dsc_mixture_next returns DSC_EOF, the one after starts the next epoch). Another
     * value fails dsc_mixture_create with DSC_EINVAL. Ignored by a single-dataset loader. */
    const struct dsc_source_options *sources;
    uint32_t n_sources;
    int exhausted;
} dsc_loader_options_t;

#define DSC_EXHAUSTED_WRAP 0
#define DSC_EXHAUSTED_STOP 1

/* How one variable-length field is handed out (dsc_loader_options_t.field_options). */
typedef struct dsc_field_options {
    size_t struct_size; /* sizeof(dsc_field_options_t): lets the struct grow */
    const char *name;   /* the field (a variable-length one) */
    uint64_t max_bytes; /* values mode: the field's value bytes one batch may hold, i.e. the
                           slot's values region (0: the default, B x the manifest's bytes_max
                           when that is at most 64 MiB, else the largest of 64 MiB, bytes_max
                           and 4 x B x bytes_mean). A batch needing more fails next() with
                           DSC_ETOOLARGE and an ERROR line naming the dataset, the sample and
                           this option; nothing is truncated */
    int pad;            /* 1: padded output [B, L, ...] (L: the batch's longest sample, at most
                           max_len) plus lengths; 0 (default): values + offsets */
    double pad_value;   /* padded: the value of the rows past a sample's end (converted to the
                           field's dtype; default 0) */
    uint64_t max_len;   /* padded: rows kept per sample, longer ones truncated (counted in
                           dsc_stats_t.truncated_samples); 0: no limit. The slot has room for
                           the smaller of max_len and the manifest's rows_max rows per sample;
                           a sample longer than that room (a manifest that understates rows_max)
                           fails next() with DSC_ETOOLARGE */
    /* Image decode (docs/loader.md#image-decode): with image = 1 a u8[] field holding JPEG,
     * PNG or WebP bytes is decoded in the decode threads and handed out as a fixed u8 field,
     * [B, 3, H, W] (DSC_IMAGE_LAYOUT_CHW) or [B, H, W, 3] (HWC); pad, max_len and max_bytes do
     * not apply. The crop and flip of a sample are a pure function of (seed, epoch, sample
     * index) (docs/order.md#image-augmentation). */
    int image;             /* 1: decode; 0 (default): the bytes as they are */
    uint32_t image_height; /* output size, 1..8192 (default 224) */
    uint32_t image_width;  /* (default 224) */
    int image_crop;        /* DSC_IMAGE_CROP_CENTER (default), _RANDOM_RESIZED or _NONE */
    double image_scale[2]; /* random_resized: area fraction range (default 0.08, 1) */
    double image_ratio[2]; /* random_resized: aspect (w/h) range (default 3/4, 4/3) */
    int image_flip;        /* 1: horizontal flip with probability 1/2 (default 0) */
    int image_layout;      /* DSC_IMAGE_LAYOUT_CHW (default) or DSC_IMAGE_LAYOUT_HWC */
    int on_decode_error;   /* DSC_DECODE_ERROR_FAIL (default): an image that does not decode
                              fails next() with DSC_EDECODE and an ERROR line naming the
                              dataset, shard and sample; DSC_DECODE_ERROR_FILL: a zero image,
                              counted in dsc_stats_t.decode_errors */
    int image_background;  /* 0 (default): a PNG's or WebP's alpha (and a PNG's tRNS) is
                              dropped, the colour channels kept as stored, as torchvision's
                              loader (PIL's convert("RGB")) does; 1: composited over
                              image_background_rgb, (c * a + bg * (255 - a)) / 255 rounded */
    uint8_t image_background_rgb[3]; /* R, G, B of that background */
} dsc_field_options_t;

/* dsc_field_options_t.image_crop: "center" (torchvision's Resize(S) + CenterCrop(S) for an S x S
 * output: the shorter side resized to S, the longer to int(S * long / short), the crop at
 * int(round((resized - S) / 2.0)); for H x W, the smallest Resize that covers it: evaluation),
 * "random_resized" (torchvision's RandomResizedCrop: its box, cropped then resized), "none" (the
 * whole image resized to the output). Resizes are PIL's BILINEAR (antialiased), as torchvision's
 * on PIL images (docs/loader.md#image-decode gives the measured difference). */
typedef enum dsc_image_crop {
    DSC_IMAGE_CROP_CENTER = 0,
    DSC_IMAGE_CROP_RANDOM_RESIZED = 1,
    DSC_IMAGE_CROP_NONE = 2,
} dsc_image_crop_t;
typedef enum dsc_image_layout {
    DSC_IMAGE_LAYOUT_CHW = 0, /* [3, H, W] per sample */
    DSC_IMAGE_LAYOUT_HWC = 1, /* [H, W, 3] per sample */
} dsc_image_layout_t;
#define DSC_DECODE_ERROR_FAIL 0
#define DSC_DECODE_ERROR_FILL 1
/* Fills *options with the defaults above (name NULL) and struct_size = size. Returns 0 or
 * DSC_EINVAL (NULL, or size smaller than the first version of the struct). */
DSC_EXTERN int dsc_field_options_init(dsc_field_options_t *options, size_t size);

#define DSC_ORDER_LOCAL 0
#define DSC_ORDER_GLOBAL 1
/* The caller's order: the loader hands out exactly the batches the caller pushes with
 * dsc_loader_push_order (a sampler's indices), in that order. The caller's order is this rank's
 * already (its sampler splits the ranks): create refuses world_size other than 1, rank other than
 * 0, drop_last, shuffle_window and epochs with it, and skips the RANK / WORLD_SIZE check; shuffle
 * plays no part (seed still keys image augmentation). docs/order.md#the-callers-order. */
#define DSC_ORDER_CALLER 2

/* Fills the first `size` bytes of *options with the defaults above (servers and dataset NULL)
 * and sets struct_size = size: pass sizeof *options, as DSC_LOADER_OPTIONS_INIT does, so that a
 * program built against an older, smaller struct gets only the fields it has (a larger, newer
 * one gets its extra bytes zeroed). Returns 0, or DSC_EINVAL (NULL, or size smaller than the
 * first version of the struct). Bindings call it with their struct's size. */
DSC_EXTERN int dsc_loader_options_fill(dsc_loader_options_t *options, size_t size);
/* The init C code writes: the struct's size comes from its type. Returns as
 * dsc_loader_options_fill. */
#define DSC_LOADER_OPTIONS_INIT(options) dsc_loader_options_fill((options), sizeof *(options))
/* Earlier names, kept for programs built against them. dsc_loader_options_init2 is
 * dsc_loader_options_fill. dsc_loader_options_init fills sizeof(dsc_loader_options_t) of the
 * library's version, which may be larger than a program's older struct: new code uses
 * DSC_LOADER_OPTIONS_INIT. */
DSC_EXTERN int dsc_loader_options_init2(dsc_loader_options_t *options, size_t size);
DSC_EXTERN void dsc_loader_options_init(dsc_loader_options_t *options);

/* Connects, fetches the manifest, plans epoch 0 and starts prefetching. Blocks until the
 * manifest is known (bounded by timeout_ms per server). options->struct_size may be that of an
 * older, smaller struct: the fields it lacks take their defaults. Returns 0 and *out, or
 * DSC_EINVAL (bad options, named in the log: also rank / world_size disagreeing with RANK /
 * WORLD_SIZE unless ignore_rank_env, a servers entry that is not HOST:PORT, and an epoch that
 * gives a rank no batch: drop_last with batch_size over the rank's share; a dropped last batch
 * is a WARN line instead, once, with the samples each epoch never hands out), DSC_ENOTFOUND
 * (unknown dataset), DSC_EUNAVAIL (no server answered; one that answers HTTP is named as an
 * HTTP port, with the data port when it is dscached's), DSC_ENODEVICE (device >= 0 and no such
 * CUDA device), DSC_ENOMEM. The loader owns every buffer it hands out. On failure
 * dsc_loader_last_error(NULL, ...) says why, per server tried. */
DSC_EXTERN int dsc_loader_create(const dsc_loader_options_t *options, dsc_loader_t **out);
/* Stops the threads and frees everything, including batches still held (their memory, and
 * any DLPack tensor of them: delete those first; a WARN line says how many were still held).
 * Before freeing, tells each server it reported to that the job finished (a final REPORT on a
 * fresh connection: blocks at most min(timeout_ms, 1 s) per server that is up). NULL is a
 * no-op. */
DSC_EXTERN void dsc_loader_destroy(dsc_loader_t *loader);

/* Returns the next batch of the epoch in *out, waiting while it is being prefetched (that wait
 * is counted as stall). Returns 0, DSC_EOF at the end of the epoch, DSC_EHELD (the batches the
 * caller still holds plus this one would pass max_held_bytes: logged; nothing is handed out,
 * the loader is not failed, release some and call again), or another DSC_E* code (then *out is
 * untouched and the loader is failed: later calls return the same code). Not thread-safe per
 * loader.
 *
 * Batch lifetime. A batch's memory (its slot) is never reused while the batch has a reference.
 * next() hands it out with one reference, which the following next() (or set_epoch,
 * state_load) drops unless dsc_batch_release() dropped it first: with no more, the batch is
 * valid until the next call, as before. To keep a batch longer, take a reference with
 * dsc_batch_retain() and drop it with dsc_batch_release(); every DLPack tensor from
 * dsc_batch_dlpack() holds one too, dropped by its deleter. While batches are held the loader
 * prefetches into other slots, adding slots when it runs out (see max_held_bytes): a held batch
 * is never overwritten, and a caller that drops batches promptly uses only prefetch_batches
 * slots, with no copy. */
DSC_EXTERN int dsc_loader_next(dsc_loader_t *loader, dsc_batch_t **out);
/* Drops one reference to the batch: one taken by dsc_batch_retain() (or a DLPack tensor) while
 * there is one, else next()'s (giving the slot back early, as before). The slot goes back to the
 * prefetcher once no reference is left. NULL (or a batch without references) is a no-op.
 * Thread-safe. */
DSC_EXTERN void dsc_batch_release(dsc_batch_t *batch);
/* Takes one more reference to a batch that has one (between next() and its release): the batch
 * stays valid, past later next() calls, until a dsc_batch_release() per reference. Returns 0,
 * or DSC_EINVAL (NULL, or the batch was already given back). Thread-safe. */
DSC_EXTERN int dsc_batch_retain(dsc_batch_t *batch);

/* What the last failure was, in words, naming each server tried and why it failed (connection
 * refused, timed out, name not resolved, protocol version, dataset not found: with the
 * datasets the servers have). loader NULL: the calling thread's last dsc_loader_create
 * failure. Writes at most cap bytes (NUL-terminated; "" when none) and returns the length of
 * the whole text. */
DSC_EXTERN int dsc_loader_last_error(const dsc_loader_t *loader, char *buf, size_t cap);

/* Starts epoch `epoch` from its first batch (drops what was prefetched). Returns 0 or DSC_E*. */
DSC_EXTERN int dsc_loader_set_epoch(dsc_loader_t *loader, uint64_t epoch);
/* Batches this rank gets per epoch (order DSC_ORDER_CALLER: 0, the caller's order decides). */
DSC_EXTERN uint64_t dsc_loader_len(const dsc_loader_t *loader);

/* ---- The caller's order (DSC_ORDER_CALLER) -------------------------------------------------
 * The caller pushes its order one batch at a time, ahead of next(): next() hands out the pushed
 * batches in push order, each with exactly the pushed indices in that order (a batch of n
 * samples), then DSC_EOF at the end mark. Pushed batches are planned, fetched and hinted to the
 * servers like the loader's own steps (as far as cache_bytes allows; the rest is hinted, up to
 * the hint horizon), within the same in-flight budgets. The loader holds at most order_ahead
 * batches (and end marks) pushed but not yet handed out: push while the room is > 0.
 *
 * Epochs: the batches pushed after an end mark belong to the next epoch (set_epoch(e) drops
 * everything pushed and starts epoch e with nothing pushed). The state (dsc_loader_state_save)
 * holds the epoch, the batches and samples handed out in it and a hash of their indices; after
 * dsc_loader_state_load the caller pushes the epoch's order from its beginning again (the same
 * sampler in the same state, e.g. torch's DistributedSampler after set_epoch(e)): the loader
 * skips the samples already handed out, checks that they are the ones the state saw, and hands
 * out the rest (a pushed batch that straddles the point is handed out from it: its remainder
 * alone). */

/* dsc_loader_push_order flags. */
#define DSC_PUSH_END 1 /* the epoch ends after this push's batch (n may be 0: the mark alone) */

/* Appends one batch of the caller's order: n (1 .. batch_size) dataset sample indices, copied
 * (0 with DSC_PUSH_END: only the end mark). Never blocks. Returns the room left (batches the
 * loader takes now, >= 0), or DSC_EINVAL (the loader's order is not DSC_ORDER_CALLER, n over
 * batch_size, n 0 without DSC_PUSH_END, indices NULL with n > 0, unknown flags), DSC_ERANGE (an
 * index >= the dataset's samples: the log names it, its position in the epoch's order and the
 * dataset's length), DSC_EAGAIN (no room: call next() first), DSC_EBADSTATE (after state_load:
 * the indices pushed differ from those the state saw; the log says where), or the loader's
 * failure. On any error nothing of this push is taken and, but for a failed loader, the loader
 * stays usable. next() with nothing pushed ahead and no end mark returns DSC_EAGAIN (no
 * failure). Not thread-safe per loader (call it from next()'s thread). */
DSC_EXTERN int dsc_loader_push_order(dsc_loader_t *loader, const uint64_t *indices, size_t n,
                                     int flags);
/* The room dsc_loader_push_order would return now (0 when the loader's order is not
 * DSC_ORDER_CALLER). */
DSC_EXTERN int dsc_loader_order_room(const dsc_loader_t *loader);
/* Samples in the dataset. */
DSC_EXTERN uint64_t dsc_loader_dataset_samples(const dsc_loader_t *loader);

/* Loader state for resume, a small versioned byte string: the epoch and where it stands (global
 * order: the global position; local order: the steps done at each world size this epoch; the
 * caller's order: the batches and samples handed out this epoch and a hash of their indices), with
 * what the order depends on (seed, dataset size, shuffle, shuffle_window, order). A state taken
 * on any rank resumes every rank, on any world size (docs/order.md). save returns the bytes
 * written, or the bytes needed when cap is too small (then nothing is written) ; load returns 0,
 * DSC_EINVAL, or DSC_EBADSTATE (damaged, another version, or saved with other order settings: the
 * log names the field) and restarts prefetching from that point. */
#define DSC_STATE_MAX_BYTES 192
DSC_EXTERN int dsc_loader_state_save(const dsc_loader_t *loader, void *buf, size_t cap);
DSC_EXTERN int dsc_loader_state_load(dsc_loader_t *loader, const void *buf, size_t len);

/* Schema of the loader's dataset. */
typedef struct dsc_field_info {
    char name[DSC_MAX_NAME];
    int dtype;
    uint32_t ndim;
    int64_t shape[DSC_MAX_DIMS]; /* per-sample shape; a variable-length field's leading
                                    dimension is -1 (e.g. i32[] -> [-1], f32[?,80] -> [-1, 80]) */
    uint64_t sample_bytes;       /* bytes per sample; a variable-length field: bytes per row
                                    (one step of the leading dimension) */
} dsc_field_info_t;
DSC_EXTERN uint32_t dsc_loader_field_count(const dsc_loader_t *loader);
/* The dataset manifest's "meta" object (free JSON the writer stored, e.g. {"classes": ["cat",
 * "dog"]} from an image folder) as compact JSON text, owned by the loader and valid until
 * dsc_loader_destroy; NULL when the manifest has none (or loader is NULL). Thread-safe. */
DSC_EXTERN const char *dsc_loader_meta(const dsc_loader_t *loader);
/* Returns 0, or DSC_ERANGE for a field index out of range. */
DSC_EXTERN int dsc_loader_field(const dsc_loader_t *loader, uint32_t field, dsc_field_info_t *out);

/* With CUDA: batches handed out are ordered before work the consumer then queues on `stream`
 * (a cudaStream_t; NULL = legacy default stream), with cudaStreamWaitEvent, never a device-wide
 * sync. Returns 0, or DSC_ENOTSUP on a host loader. */
DSC_EXTERN int dsc_loader_set_stream(dsc_loader_t *loader, void *cuda_stream);

/* ---- Batches ------------------------------------------------------------------------------- */
typedef struct dsc_tensor_view {
    const char *name;                /* field name, owned by the loader */
    void *data;                      /* host or device pointer (see device) */
    int dtype;                       /* DSC_DTYPE_* */
    uint32_t ndim;                   /* 1 + the field's ndim */
    int64_t shape[DSC_MAX_DIMS + 1]; /* [samples_in_batch, ...field shape]; a variable-length
                                        field: [total_rows, ...row shape], or padded
                                        [samples_in_batch, L, ...row shape] */
    uint64_t bytes;
    int device; /* -1 host memory, >= 0 CUDA device index */
} dsc_tensor_view_t;

/* One field of a batch, fixed or variable-length. */
enum {
    DSC_FIELD_FIXED = 0,  /* values: [B, ...shape] */
    DSC_FIELD_VALUES = 1, /* variable, values + offsets: values [total_rows, ...row shape] (1-D
                             for scalar rows), offsets B + 1 int64 row offsets (the Arrow
                             layout: sample k is rows offsets[k] .. offsets[k + 1] - 1) */
    DSC_FIELD_PADDED = 2  /* variable, padded: values [B, L, ...row shape], L the batch's longest
                             sample (after max_len), rows past lengths[k] hold pad_value;
                             lengths B int64 rows per sample */
};
typedef struct dsc_field_view {
    size_t struct_size;       /* set by the caller to sizeof(dsc_field_view_t) */
    int kind;                 /* DSC_FIELD_* */
    dsc_tensor_view_t values; /* as dsc_batch_field() gives it */
    const int64_t *offsets;   /* DSC_FIELD_VALUES: B + 1 entries, else NULL */
    const int64_t *lengths;   /* DSC_FIELD_PADDED: B entries, else NULL */
    int64_t rows;             /* variable fields: rows in values (total_rows, or B x L) */
} dsc_field_view_t;
/* Fills *out (out->struct_size must be set; a smaller, older struct gets only its fields) with
 * a view of one field of the batch: zero-copy pointers into the batch's slot, valid as long as
 * the batch (host or device memory alike, as values.device says). Returns 0, DSC_ERANGE (no
 * such field) or DSC_EINVAL (NULL, or struct_size too small). Thread-safe. */
DSC_EXTERN int dsc_batch_field_view(const dsc_batch_t *batch, uint32_t field,
                                    dsc_field_view_t *out);
/* dsc_loader_next and, in the same call, what a binding asks of each batch: with retain, one
 * reference for the caller (as dsc_batch_retain: drop it with dsc_batch_release), taken under
 * next()'s lock; views[f] for f < view_count as dsc_batch_field_view fills them (the caller sets
 * each struct_size). One lock and one call per batch instead of 3 + fields. Returns the batch's
 * samples (> 0), DSC_EOF or next()'s errors, or DSC_EINVAL (NULL, view_count past the fields, a
 * struct_size too small: nothing is consumed). Not thread-safe, as next(). */
DSC_EXTERN int dsc_loader_next_views(dsc_loader_t *loader, dsc_batch_t **out, int retain,
                                     dsc_field_view_t *views, uint32_t view_count);

/* Samples in this batch (== batch_size except possibly the last batch of an epoch). */
DSC_EXTERN uint32_t dsc_batch_samples(const dsc_batch_t *batch);
/* 0-based batch number in the epoch for this rank. */
DSC_EXTERN uint64_t dsc_batch_step(const dsc_batch_t *batch);
/* The dataset-wide sample indices of this batch, in batch order (owned by the batch). */
DSC_EXTERN const uint64_t *dsc_batch_indices(const dsc_batch_t *batch);
/* Returns 0 with a view of one field, or DSC_ERANGE. Valid as long as the batch. A
 * variable-length field gives its values (see dsc_batch_field_view for the offsets or lengths
 * beside them). */
DSC_EXTERN int dsc_batch_field(const dsc_batch_t *batch, uint32_t field, dsc_tensor_view_t *out);
/* A DLPack tensor over the same memory (kDLCPU or kDLCUDA). The caller owns the returned
 * DLManagedTensor and calls its deleter; the tensor holds a reference to the batch (as
 * dsc_batch_retain), so its data stays valid until the deleter runs, past later next() calls.
 * Call the deleter before dsc_loader_destroy. Returns 0, DSC_ERANGE, DSC_EINVAL (the batch was
 * given back) or DSC_ENOMEM. */
struct DLManagedTensor;
DSC_EXTERN int dsc_batch_dlpack(dsc_batch_t *batch, uint32_t field, struct DLManagedTensor **out);
/* The same for one part of a field: DSC_PART_VALUES (what dsc_batch_dlpack gives),
 * DSC_PART_OFFSETS (a variable field in values mode: int64 [B + 1]) or DSC_PART_LENGTHS (a
 * padded field: int64 [B]). Returns as dsc_batch_dlpack, and DSC_ERANGE for a part the field
 * does not have. */
enum { DSC_PART_VALUES = 0, DSC_PART_OFFSETS = 1, DSC_PART_LENGTHS = 2 };
DSC_EXTERN int dsc_batch_dlpack_part(dsc_batch_t *batch, uint32_t field, int part,
                                     struct DLManagedTensor **out);

/* ---- Packing: variable-length documents laid end to end into fixed-length rows ------------
 * A packer reads a loader's batches and lays the documents of one 1-D variable-length field
 * (e.g. input_ids i32[]) end to end, in the loader's epoch order (greedy, no reordering), into
 * batches of `rows` rows of `length` tokens each (docs/packing.md). Split (the default): a
 * document longer than the room left in a row continues at the start of the next row (of the
 * same or the next batch), so every row but the epoch's last is full. Cut: a document that does
 * not fit the room left starts a new row (the rest of the row is padding), and the tokens of a
 * document past `length` are dropped, counted in dsc_pack_stats_t.cut_tokens. The packer's
 * thread is the loader's only caller of dsc_loader_next while the packer lives.
 *
 * Beside the tokens ([rows, length], the field's dtype) a packed batch has, per token,
 * position_ids (int32, counting from 0 at each segment: a document, or the part of a split
 * document in one row) and document_ids (int32: the segment the token belongs to, -1 for
 * padding); per batch, cu_seqlens (int32, segments + 1 entries, the layout of variable-length
 * attention kernels over the batch flattened to rows * length tokens: every document segment
 * and every padding run at a row's end is one segment, so that each row end is a boundary) and
 * per segment the dataset index of its document (-1 for padding) and the token offset in the
 * document at which the segment starts: enough to unpack every row into its documents. The
 * loader's other fields are not carried. The packing is a copy of the tokens out of the loader's
 * prefetched batches (decoded in its decode threads), on the packer's own thread, `ahead`
 * batches ahead of next() (which hands out a batch made ahead), unless on_caller_thread.
 *
 * Every document's tokens are handed out exactly once per epoch (split), or its first `length`
 * tokens (cut). The epoch's last batch may have fewer rows; its last row is padded (token 0).
 * Use the loader only through its packer once one is made (next, set_epoch and state go through
 * the packer). Not thread-safe per packer. */
typedef struct dsc_packer dsc_packer_t;

typedef struct dsc_pack_options {
    size_t struct_size;   /* sizeof(dsc_pack_options_t): lets the struct grow */
    const char *field;    /* the variable-length field to pack: 1-D (e.g. "input_ids", i32[]),
                             handed out as values + offsets (not padded); copied at create */
    uint32_t length;      /* tokens per row (>= 1; at most 2^24) */
    uint32_t rows;        /* rows per packed batch (default 0: the loader's batch_size) */
    int cut;              /* 0 (default): split long documents across rows; 1: cut them */
    uint32_t ahead;       /* packed batches made ahead on the packer's own thread, while the
                             caller works (default 0: 2; at most 64). Memory: ahead + 1 batches of
                             rows * length * (dtype size + 8) bytes and the segment arrays (up to
                             rows * (length + 1) * 24 bytes) */
    int on_caller_thread; /* 1: no thread; next() packs on the caller's thread */
} dsc_pack_options_t;
/* Fills the defaults and sets struct_size = size. Returns 0, or DSC_EINVAL (NULL, or size
 * smaller than the first version of the struct). */
DSC_EXTERN int dsc_pack_options_init(dsc_pack_options_t *options, size_t size);

/* Makes a packer over loader (which it does not own: destroy the packer first). Returns 0 and
 * *out, or DSC_EINVAL (the log says which: NULL, no field, a field the dataset does not have, a
 * fixed-shape field, a field with more than one dimension, a padded or image-decoded field, a
 * device loader, the loader's caller order, length 0 or over 2^24), DSC_ENOMEM. Over a loader
 * over a mixture (dsc_loader_create with options.sources) the rows mix the sources' documents in
 * the blend's order and each packed batch gives segment_source. */
DSC_EXTERN int dsc_packer_create(dsc_loader_t *loader, const dsc_pack_options_t *options,
                                 dsc_packer_t **out);
/* Frees the packer and its buffers (not the loader). NULL is a no-op. */
DSC_EXTERN void dsc_packer_destroy(dsc_packer_t *packer);

/* One packed batch: pointers into the packer's buffers, valid until the next call on the
 * packer. */
typedef struct dsc_packed_batch {
    size_t struct_size;           /* set by the caller to sizeof(dsc_packed_batch_t) */
    uint64_t epoch;               /* the loader epoch the documents come from */
    uint64_t step;                /* 0-based packed batch number in the epoch */
    uint32_t rows;                /* rows in this batch (rows option; fewer at the epoch's end) */
    uint32_t length;              /* tokens per row */
    int dtype;                    /* the field's DSC_DTYPE_* */
    const void *tokens;           /* [rows, length] */
    const int32_t *position_ids;  /* [rows, length] */
    const int32_t *document_ids;  /* [rows, length]: segment number, -1 for padding */
    const int32_t *cu_seqlens;    /* [segments + 1]: 0, ..., rows * length */
    uint32_t segments;            /* document segments and padding runs */
    const int64_t *segment_index; /* [segments]: dataset sample index, -1 for padding */
    const int64_t *segment_start; /* [segments]: offset in the document of the first token */
    uint64_t tokens_used;         /* document tokens in the batch (rows * length - padding) */
    /* [segments]: the index in options.sources of each segment's document, -1 for padding,
     * when the packer's loader is a loader over a mixture (rows mixing sources); else NULL.
     * Written only when struct_size covers it (callers built before it pass a smaller size). */
    const int32_t *segment_source;
} dsc_packed_batch_t;

/* Fills *out with the next packed batch of the epoch (out->struct_size must be set), fetching
 * the loader's batches as needed (its stall counts as the loader's). Returns 0, DSC_EOF at the
 * end of the epoch (the following call starts the next one), DSC_EINVAL, or the loader's
 * errors. Not thread-safe per packer. */
DSC_EXTERN int dsc_packer_next(dsc_packer_t *packer, dsc_packed_batch_t *out);
/* As dsc_packer_next, but lays the batch straight into the caller's buffers (no copy out of the
 * packer's): tokens (rows * length values of the field's dtype), position_ids and document_ids
 * (rows * length int32 each), cu_seqlens (rows * length + rows + 1 int32), segment_index and
 * segment_start (rows * length + rows int64 each), with rows and length the packer's (the most a
 * batch can need); out's pointers are then these buffers, which the caller owns. Any NULL
 * buffer: DSC_EINVAL, nothing consumed. Returns as dsc_packer_next. */
DSC_EXTERN int dsc_packer_next_into(dsc_packer_t *packer, dsc_packed_batch_t *out, void *tokens,
                                    int32_t *position_ids, int32_t *document_ids,
                                    int32_t *cu_seqlens, int64_t *segment_index,
                                    int64_t *segment_start);
/* A packed batch the caller holds: dsc_packer_next_held hands out the next batch as
 * dsc_packer_next (pointers into the buffers the packer's thread laid it in: no copy), but its
 * arrays stay valid, never overwritten, until dsc_packer_release(hold), also after later calls
 * and after dsc_packer_destroy (release may come after destroy, not during it). A held batch's
 * ring entry gets new buffers (reused from released holds) when the thread comes round to it. */
typedef struct dsc_pack_hold dsc_pack_hold_t;
DSC_EXTERN int dsc_packer_next_held(dsc_packer_t *packer, dsc_packed_batch_t *out,
                                    dsc_pack_hold_t **hold);
/* Gives a held batch's buffers back (to the packer for reuse, or freed). NULL is a no-op. */
DSC_EXTERN void dsc_packer_release(dsc_pack_hold_t *hold);
/* Starts epoch `epoch` from its first document (the loader's set_epoch; drops what is
 * half-packed). Returns 0 or DSC_E*. */
DSC_EXTERN int dsc_packer_set_epoch(dsc_packer_t *packer, uint64_t epoch);

/* Packed stream state for resume: the loader's state at the start of the loader batch the next
 * document comes from, the document's place in that batch and the tokens of it already handed
 * out, with the pack settings (field, length, rows, cut). Loaded into a packer with the same
 * settings over a loader with the same order settings and world size, the stream continues
 * token for token (a partly handed-out document continues where it stopped). save returns the
 * bytes written, or the bytes needed when cap is too small (nothing written); load returns 0,
 * DSC_EINVAL, or DSC_EBADSTATE (damaged, not a packer state, saved with other pack settings
 * or on another world size (kept in the state; ranks stand at different loader batches, so one
 * rank's state cannot be re-split): the log names the setting; or the loader's own refusal).
 * DSC_PACK_STATE_MAX_BYTES bounds the state of a packer over a single-dataset loader; over a
 * loader over a mixture the state holds the mixture's (up to 32 KiB more: ask save for the
 * size with cap 0). */
#define DSC_PACK_STATE_MAX_BYTES 320
DSC_EXTERN int dsc_packer_state_save(const dsc_packer_t *packer, void *buf, size_t cap);
DSC_EXTERN int dsc_packer_state_load(dsc_packer_t *packer, const void *buf, size_t len);
/* Resumes a packed stream saved on old_world ranks onto this packer's world size (another one):
 * states[r] / lens[r] is old rank r's dsc_packer_state_save (each rank's state differs: its
 * documents' lengths set how far its loader got). This rank first packs the rest of the loader
 * batches of the old ranks r with r % world_size == rank (the documents, and the part of a
 * split document, not yet packed), up to the furthest loader step any old rank reached
 * (temporary loaders of those old ranks read them again: servers, dataset and fallback_path are
 * this loader's; an auth_file is not used again; over a mixture, loaders over its sources), then
 * its own loader re-splits the rest of the
 * epoch over the new ranks (docs/order.md): every document of the epoch is packed once over all
 * the new ranks. On old_world == world_size it is dsc_packer_state_load(states[rank]). Returns
 * 0, DSC_EINVAL, DSC_EBADSTATE (a state damaged, of other pack settings or world size, saved at
 * an epoch's end or while an earlier change was still packed, or old ranks in different epochs:
 * the log says which), or a temporary loader's error. A state saved while the old ranks'
 * batches are still being packed is refused by every load (save again a few batches later). */
DSC_EXTERN int dsc_packer_state_load_world(dsc_packer_t *packer, const void *const *states,
                                           const size_t *lens, uint32_t old_world);

/* Packing counters since create. */
typedef struct dsc_pack_stats {
    size_t struct_size;       /* set by the caller to sizeof(dsc_pack_stats_t) */
    uint64_t batches;         /* packed batches handed out */
    uint64_t rows;            /* rows handed out */
    uint64_t slots;           /* rows * length */
    uint64_t tokens;          /* document tokens handed out */
    uint64_t documents;       /* documents whose last token (or cut) was handed out */
    uint64_t split_documents; /* documents that span more than one row */
    uint64_t cut_documents;   /* cut: documents longer than a row, cut to length */
    uint64_t cut_tokens;      /* cut: tokens dropped */
    double efficiency;        /* tokens / slots (0 before any batch) */
    double pack_seconds;      /* time copying and laying out (not waiting for the loader), on the
                                 packer's thread (or next()'s with on_caller_thread) */
    double wait_seconds;      /* next()'s time waiting for the packer's thread */
} dsc_pack_stats_t;
/* Fills *out. Returns 0 or DSC_EINVAL. */
DSC_EXTERN int dsc_packer_stats(const dsc_packer_t *packer, dsc_pack_stats_t *out);

/* ---- Statistics ---------------------------------------------------------------------------- */
typedef struct dsc_stats {
    size_t struct_size; /* set by the caller to sizeof(dsc_stats_t) */
    uint64_t epoch;
    uint64_t batches; /* handed out by next() since creation */
    uint64_t samples;
    uint64_t bytes;      /* decoded batch bytes handed out */
    uint64_t wire_bytes; /* bytes received from servers (or read from fallback files) */
    uint64_t requests;   /* GET requests sent */
    uint64_t retries;    /* requests re-sent after a failure */
    uint64_t failovers;  /* requests moved to another replica */
    uint64_t checksum_failures;
    double wall_seconds;       /* since creation */
    double stall_seconds;      /* consumer time blocked inside next() */
    double compute_seconds;    /* consumer time between next() calls */
    double stall_fraction;     /* stall / (stall + compute) */
    double network_seconds;    /* summed time waiting on responses */
    double decode_seconds;     /* summed checksum + decompression time */
    double collate_seconds;    /* summed time copying samples into batch slots */
    double h2d_seconds;        /* summed host-to-device copy time (CUDA; device time, event to
                                  event), of the copies counted in h2d_bytes */
    uint64_t placed_chunks;    /* chunks verified + decoded straight into a batch slot */
    uint64_t refetches;        /* chunks fetched again within one epoch: their shuffle window's
                                  chunks did not fit in cache_bytes (see the WARN at create) */
    uint64_t h2d_bytes;        /* bytes of the host-to-device copies timed in h2d_seconds: a copy
                                  is timed when its slot is filled again, so the last few batches'
                                  copies are not yet in; h2d_bytes / h2d_seconds is the bandwidth */
    uint64_t assists;          /* units of work (a chunk decoded, a step collated) done by next()
                                  while it waited, beside the decode threads (0 with no_assist) */
    uint64_t epoch_wire_bytes; /* wire bytes fetched for the last completed epoch (the one whose
                                  end next() last returned): each chunk counts for the epoch of
                                  the step that first needed it, whenever it arrived (0 before
                                  the first epoch ends; reset by set_epoch and state_load) */
    uint64_t slots_added;      /* batch slots added because every slot was held by batches the
                                  caller kept (see max_held_bytes) */
    /* The verdict (docs/diagnosis.md): what limits the job over the last 5-10 s. */
    int32_t bottleneck;            /* DSC_BOTTLENECK_* (dscache_base.h; dsc_bottleneck_name) */
    double verdict_seconds;        /* the window the verdict covers */
    double verdict_stall_fraction; /* stall / (stall + compute) over that window (the wait
                                      for the first batch left out) */
    double stall_waits[6];         /* stall since creation by what next() waited on: the step not
                                      planned yet, a chunk queued, the in-flight budget full, a
                                      chunk in flight, decode, collation (DSC_STALL_WAIT_*) */
    char bottleneck_server[128];   /* DSC_BOTTLENECK_SERVER: the slow server's HOST:PORT */
    char evidence[256];            /* the figures the verdict used, in words */
    char suggestion[256];          /* the change that would help, in words */
    uint64_t rdma_connections;     /* server connections open now that use RDMA READ */
    uint64_t tcp_connections;      /* ... that use TCP under transport auto/rdma (fell back) */
    uint64_t rdma_bytes;           /* stored bytes received by RDMA READ */
    uint64_t rdma_fallbacks;       /* connections that tried RDMA and fell back to TCP */
    uint64_t rdma_errors;          /* RDMA connections lost to a failed READ (chunks moved) */
    uint64_t truncated_samples;    /* samples of padded variable fields cut to their max_len
                                      (counted per field, in the batches handed out) */
    uint64_t decode_errors;        /* images that did not decode, handed out as zero images
                                      (on_decode_error = DSC_DECODE_ERROR_FILL; in the batches
                                      handed out) */
    double image_seconds;          /* decode-thread seconds spent decoding images (part of
                                      collate_seconds) */
    /* Stragglers (docs/cluster.md, "Stragglers"): requests outstanding on a server that stopped
     * answering (and did not answer a PING) are re-issued to another owner of their chunks; the
     * late answer is dropped when it comes. Summed over servers (per server: the metrics). */
    uint64_t hedges;             /* requests re-issued to another owner */
    uint64_t hedges_won;         /* ... whose chunks arrived before the stalled server answered */
    uint64_t hedge_bytes;        /* decoded bytes re-issued: at most the budget, 5% of
                                    wire_bytes plus one request */
    uint64_t hedge_wasted_bytes; /* bytes the stalled servers sent late for them, dropped */
    uint64_t hedges_denied;      /* stalled requests left waiting: the budget was spent */
    uint64_t slow_marks;         /* times a server was marked slow (no new work until it
                                    answers a probe again) */
    uint64_t slow_servers;       /* servers marked slow now */
    uint64_t stalls_excused;     /* stalls not counted against a server: it answered PING at
                                    once (busy reading through misses, not stopped) */
} dsc_stats_t;
/* Indexes of dsc_stats_t.stall_waits. */
enum {
    DSC_STALL_WAIT_PLAN = 0,
    DSC_STALL_WAIT_QUEUED = 1,
    DSC_STALL_WAIT_BUDGET = 2,
    DSC_STALL_WAIT_NETWORK = 3,
    DSC_STALL_WAIT_DECODE = 4,
    DSC_STALL_WAIT_COLLATE = 5
};

/* Fills *out (out->struct_size must be set). Returns 0 or DSC_EINVAL. Thread-safe. */
DSC_EXTERN int dsc_loader_stats(const dsc_loader_t *loader, dsc_stats_t *out);
/* The same figures in Prometheus text exposition format (names dscache_loader_*; the verdict
 * as dscache_loader_bottleneck{stage} 1 and a "# verdict:" comment line). Returns the
 * length written (without NUL), or the length needed when cap is too small. Thread-safe. */
DSC_EXTERN int dsc_loader_metrics_text(const dsc_loader_t *loader, char *buf, size_t cap);

/* ---- Mixtures: a weighted blend of datasets (docs/mixtures.md) ------------------------------
 * A mixture reads several datasets ("sources"), each through its own loader (its own servers,
 * credentials, replicas, order, shuffle window, rank split and epochs: each source's samples
 * are delivered exactly once per source-epoch across all ranks), and composes batches of
 * batch_size samples by the quota method: the mixture's samples are numbered 1, 2, ... across
 * steps, and sample n goes to the source whose quota n * w / W (W the sum of the weights) most
 * exceeds the samples it already has (the lower index on a tie). Every source stays within one
 * sample of its quota after every sample; the composition is a pure function of (weights,
 * batch_size, step), the same on every rank. A source that ends its epoch starts its next one
 * (dsc_loader_options_t.exhausted: "wrap", or "stop" to end the mixture's epoch); repeat
 * (dsc_source_options_t.repeat) sets how long a source-epoch lasts. The Python binding
 * (dscache.Loader(sources=...)) is this engine; only a packed mixture (pack=) is blended in
 * Python. */
typedef struct dsc_mixture dsc_mixture_t;

typedef struct dsc_source_options {
    size_t struct_size;        /* sizeof(dsc_source_options_t): lets the struct grow */
    const char *dataset;       /* the source's dataset name as served */
    double weight;             /* > 0 and finite: its share of every batch is weight / W */
    const char *servers;       /* NULL: the mixture's (dsc_loader_options_t.servers) */
    const char *auth_file;     /* NULL: the mixture's */
    uint32_t replicas;         /* 0: the mixture's */
    const char *fallback_path; /* NULL: none (the mixture's fallback_path is not used: it names
                                  one dataset's directory) */
    uint32_t shuffle_window;   /* 0: the mixture's */
    double repeat;             /* passes over the source per source-epoch (> 0 and finite; 0 is
                                  read as the default 1): 2.0 delivers each sample twice (two of
                                  its loader's epochs); 0.5 the first half of each rank's share
                                  of one loader epoch (the rest is skipped, the next
                                  source-epoch starts the loader's next epoch, in another order);
                                  1.5 one pass, then half of the next. The fraction is
                                  round(fraction * ceil(samples / world_size)) samples (half to
                                  even), at least 1, on every rank. Absent from a struct_size
                                  that ends before it: 1 */
} dsc_source_options_t;
/* Fills the defaults (weight 1) and sets struct_size = size. Returns 0, or DSC_EINVAL. */
DSC_EXTERN int dsc_source_options_init(dsc_source_options_t *options, size_t size);

/* Creates one loader per source from `common` (its dataset ignored; batch_size is the mixture's
 * batch; each source's loader gets seed + k for the k-th source, a batch of its share S,
 * rounded up, or of min(4 S, 64) when S < 64: fewer, larger loader batches, and its share of
 * common's decode_threads and connections, round(n * weight / W), at least 1) and the `count`
 * sources (read with the stride of the first's struct_size). The
 * batch holds the `field_count` fields named in `fields` (NULL: every field of the first
 * source), which every source must have with the same dtype and shape; sources may have more.
 * Returns 0 and *out, or DSC_EINVAL (no sources, more than 64, a weight not > 0 and finite, a
 * dataset named twice, a source lacking a needed field or defining it otherwise: the log names
 * the source, the field and both definitions; common->order other than local, a device, a
 * padded or image-decoded needed field), a source loader's own create error (the log names the
 * source first: DSC_EUNAVAIL, DSC_ENOTFOUND, ...), DSC_ENOMEM. */
DSC_EXTERN int dsc_mixture_create(const dsc_loader_options_t *common,
                                  const dsc_source_options_t *sources, uint32_t count,
                                  const char *const *fields, uint32_t field_count,
                                  dsc_mixture_t **out);
/* Frees the mixture and its sources' loaders. NULL is a no-op. */
DSC_EXTERN void dsc_mixture_destroy(dsc_mixture_t *mixture);

/* One composed batch: pointers into the mixture's buffers, valid until the next call. */
typedef struct dsc_mixture_batch {
    size_t struct_size;           /* set by the caller to sizeof(dsc_mixture_batch_t) */
    uint64_t step;                /* 0-based step since create (or since the state loaded) */
    uint32_t samples;             /* batch_size; fewer only in the last batch of an epoch that
                                     exhausted "stop" ends, or when a source has no epoch left */
    const int32_t *source;        /* [samples]: each sample's source index */
    const uint64_t *indices;      /* [samples]: each sample's index in its own dataset */
    const uint64_t *source_epoch; /* [samples]: the source-epoch each sample belongs to */
    uint64_t epoch;               /* the mixture's epoch (exhausted "stop": one per run-out) */
} dsc_mixture_batch_t;
/* Composes the next batch (fetching the sources' batches as needed; their stall counts as
 * theirs): the batch_size picks first (the quota rule), then each pick's next sample of its
 * source (the old ranks' leftovers first after a resume onto another world size). Returns 0,
 * DSC_EOF (exhausted "stop": the epoch ended with the last batch, and the next call starts the
 * next one; or a source has no epoch left, common.epochs reached: every later call), DSC_EINVAL,
 * or a source loader's error (dsc_mixture_last_error and the log name the source). Not
 * thread-safe per mixture. */
DSC_EXTERN int dsc_mixture_next(dsc_mixture_t *mixture, dsc_mixture_batch_t *out);
/* Needed field f (0 .. field_count - 1) of the last batch, as dsc_batch_field_view gives one
 * (DSC_FIELD_FIXED: values [B, ...]; DSC_FIELD_VALUES: values and B + 1 offsets), in the
 * mixture's buffers (valid until the next call). Returns 0, DSC_ERANGE or DSC_EINVAL (no batch
 * yet, NULL, struct_size too small). */
DSC_EXTERN int dsc_mixture_field_view(const dsc_mixture_t *mixture, uint32_t field,
                                      dsc_field_view_t *out);
/* Per source k: samples handed out, and its loader's statistics (out->struct_size set). Returns
 * 0, DSC_ERANGE or DSC_EINVAL. */
DSC_EXTERN int dsc_mixture_source_stats(const dsc_mixture_t *mixture, uint32_t source,
                                        uint64_t *samples, dsc_stats_t *out);

/* A packed mixture (docs/mixtures.md, docs/packing.md): each source's loader feeds its own packer
 * (pack->field, length, cut, ahead as dsc_packer_create takes them; rows: the source's share of
 * batch_size as dsc_mixture_create sizes a source batch; the source loaders read at least 256
 * documents a batch) and the
 * mixture blends packed rows by the quota rule, a row per pick: a batch is batch_size rows
 * (rows stay per source). dsc_mixture_next gives source[i], source_epoch[i] and indices[i] (the
 * row's place in its source's packed batch) per row; dsc_mixture_packed the rows. Every field of
 * the sources but pack->field is dropped. Returns as dsc_mixture_create, and DSC_EINVAL for a
 * fractional repeat (a pass's rows are not known ahead) or what dsc_packer_create refuses
 * (the log names the source). Its state resumes on the world size it was saved on
 * (dsc_mixture_state_load), or on another from every old rank's state
 * (dsc_mixture_state_load_world). */
DSC_EXTERN int dsc_mixture_create_packed(const dsc_loader_options_t *common,
                                         const dsc_source_options_t *sources, uint32_t count,
                                         const dsc_pack_options_t *pack, dsc_mixture_t **out);
/* The last batch of a packed mixture as a dsc_packed_batch_t (out->struct_size set): tokens,
 * position_ids, document_ids ([rows, length]) and cu_seqlens, segment_index, segment_start over
 * the batch's segments (every segment of every row, padding runs too, numbered in batch order;
 * document_ids -1 on padding; segment_index is the document's index in its own source, whose
 * index is source[row]), in the mixture's buffers until the next call. Returns 0, or DSC_EINVAL
 * (not packed, no batch yet). dsc_mixture_field_view refuses a packed mixture (DSC_EINVAL). */
DSC_EXTERN int dsc_mixture_packed(const dsc_mixture_t *mixture, dsc_packed_batch_t *out);

/* The needed fields (0 .. count - 1) as the batch has them (dsc_field_info_t). field returns 0,
 * DSC_ERANGE or DSC_EINVAL. */
DSC_EXTERN uint32_t dsc_mixture_field_count(const dsc_mixture_t *mixture);
DSC_EXTERN int dsc_mixture_field(const dsc_mixture_t *mixture, uint32_t field,
                                 dsc_field_info_t *out);
/* The mixture of a loader made with options.sources (NULL for a single-dataset loader or NULL):
 * owned by the loader, for dsc_mixture_info, dsc_mixture_source_stats, dsc_mixture_field and
 * dsc_mixture_source_batch only (next, state and field views go through the loader). */
DSC_EXTERN dsc_mixture_t *dsc_loader_mixture(const dsc_loader_t *loader);
/* Source k's loader batch size (as dsc_mixture_create sizes it); 0 for a bad k. */
DSC_EXTERN uint32_t dsc_mixture_source_batch(const dsc_mixture_t *mixture, uint32_t source);
/* Why the last failing call on mixture failed (NULL: this thread's last dsc_mixture_create
 * failure), the text also logged at ERROR: it names the source, the field, the option. Writes
 * at most cap bytes (NUL-terminated) and returns the whole text's length. */
DSC_EXTERN int dsc_mixture_last_error(const dsc_mixture_t *mixture, char *buf, size_t cap);

/* The mixture as a whole. */
typedef struct dsc_mixture_info {
    size_t struct_size; /* set by the caller to sizeof(dsc_mixture_info_t) */
    uint32_t sources;   /* count */
    uint32_t rank, world_size;
    uint64_t epoch;          /* the mixture's epoch (exhausted "stop" counts them) */
    uint64_t step;           /* batches handed out in the epoch */
    double stall_seconds;    /* the sources' next() waits, summed */
    int32_t starving_source; /* the verdict: the source with the most stall (-1: none stalled) */
} dsc_mixture_info_t;
DSC_EXTERN int dsc_mixture_info(const dsc_mixture_t *mixture, dsc_mixture_info_t *out);

/* Mixture state for resume: per source, its loader's state at the start of its batch being read
 * and the samples of it used, its quota counter, source-epoch, repeat position; the epoch and
 * step, the world size, with a checksum of what the composition depends on (datasets, weights,
 * repeat, exhausted, seed, batch_size, fields). The same on every rank (but while a rank still
 * delivers an old world size's leftovers). Loads onto any world size: there each source's loader
 * re-splits the samples not yet delivered over the new ranks, and the part-used batches of the
 * old ranks r with r % world_size == rank are read again by temporary loaders of those old ranks
 * and their unused samples delivered first (each source's samples stay exactly once per
 * source-epoch, but for the loader's padding of a new segment: at most world_size - 1 repeats).
 * Inside the part pass of a fractional repeat, the new ranks deliver the rest of the old ranks'
 * part pass instead (old rank r's by new rank r % world_size), and the source-epoch ends there.
 * Refused onto another world size: a state saved while leftovers were being delivered, but on
 * that rank and world size. save returns the bytes written, or the bytes
 * needed when cap is too small; load returns 0, DSC_EINVAL, or DSC_EBADSTATE (damaged, not a
 * mixture state, another mixture: the log says which, or a source loader's refusal). */
DSC_EXTERN int dsc_mixture_state_save(const dsc_mixture_t *mixture, void *buf, size_t cap);
DSC_EXTERN int dsc_mixture_state_load(dsc_mixture_t *mixture, const void *buf, size_t len);
/* Resumes from the states of every rank of a run on old_world ranks (states[r] / lens[r]: old
 * rank r's dsc_mixture_state_save, all saved after the same step). On old_world == world_size
 * it is dsc_mixture_state_load(states[rank]); for a mixture that is not packed, of states[0]
 * (the same on every rank). A packed mixture's ranks stand at documents of their own in each
 * source, so it needs them all: per source, each old rank's packed stream is carried past the
 * rows of its part-used packed batch (a temporary loader and packer of that rank pack those rows
 * again), and the source's packer resumes from those states as dsc_packer_state_load_world does:
 * this rank first packs the rest of the loader batches of the old ranks r with
 * r % world_size == rank, then its loader re-splits the rest of the source-epoch over the new
 * ranks (every document packed once over all the new ranks). Returns 0, DSC_EINVAL (NULL, no
 * states, a loader over a mixture), DSC_EBADSTATE (as dsc_mixture_state_load; a state not rank
 * r of old_world, states of different steps, or old ranks in different passes of a source:
 * dsc_mixture_last_error says which), or a temporary loader's or packer's error. */
DSC_EXTERN int dsc_mixture_state_load_world(dsc_mixture_t *mixture, const void *const *states,
                                            const size_t *lens, uint32_t old_world);

/* ---- Reader: random access by sample index -------------------------------------------------
 * Map-style access for trainers that own the order (a torch sampler, Megatron's sample index,
 * evaluation of chosen samples): the caller names the dataset-wide sample indices of a batch and
 * gets them back collated, as the loader collates them, in the same dsc_batch_t: dsc_batch_field,
 * dsc_batch_field_view, dsc_batch_dlpack(_part), dsc_batch_indices, dsc_batch_retain and
 * dsc_batch_release work on it. Chunks are verified (checksums; a corrupt copy is read from
 * another replica, else the fallback files, else the call fails naming the chunk) and decoded
 * (lz4, variable-length fields, image decode) by the loader's own code. The decoded chunks a
 * request fetched stay in a bounded client cache (cache_bytes, least recently used first out),
 * so that neighbouring indices (the other samples of a chunk) are not fetched again. See
 * docs/loader.md#random-access-dsc_reader.
 *
 * Threads and processes. Calls on one reader are serialised (a mutex): any thread may call,
 * one request runs at a time; use one reader per thread (or per worker process) for parallel
 * requests. A reader owns threads and sockets: never use one across fork() (the child has
 * neither): a process that forks workers (the torch DataLoader with num_workers > 0) creates a
 * reader in each worker, after the fork (dscache.MapDataset does so lazily). */
typedef struct dsc_reader dsc_reader_t;

/* Opens the dataset for random access: connects, fetches the manifest and starts the I/O
 * threads, as dsc_loader_create (options is a dsc_loader_options_t, initialised with
 * DSC_LOADER_OPTIONS_INIT). Used: servers, dataset, auth_file, replicas, connections,
 * timeout_ms, transport, fallback_path, inflight_bytes, server_inflight_bytes, field_options
 * (variable fields as values + offsets or padded, image decode with the same settings as the
 * loader), seed (image crops and flips are keyed by (seed, epoch, index) as in the loader),
 * batch_size (the most indices one dsc_reader_get may name, default 32: a batch slot holds that
 * many samples), cache_bytes (decoded chunk bytes kept for later requests; 0: 256 MiB),
 * max_held_bytes, log_*, job_name, report_seconds. Ignored: shuffle (the caller's order is the
 * order; dsc_loader_options_init sets it to 1), prefetch_batches, decode_threads (the calling
 * thread verifies, decodes and collates), no_assist, stats_log_seconds. Refused with DSC_EINVAL
 * (a line saying why): device != -1 (batches are host memory), rank != 0 or world_size != 1
 * (split the indices with your sampler), shuffle_window != 0, drop_last, order global, epochs.
 * RANK / WORLD_SIZE in the environment are not checked (a reader reads only what it is asked).
 * Blocks until the manifest is known. Returns 0 and *out (free with dsc_reader_destroy), or the
 * errors of dsc_loader_create; then dsc_reader_last_error(NULL, ...) says why. */
DSC_EXTERN int dsc_reader_create(const dsc_loader_options_t *options, dsc_reader_t **out);
/* Stops the threads and frees everything, including batches still held (as
 * dsc_loader_destroy: release them, and delete their DLPack tensors, first). NULL is a no-op. */
DSC_EXTERN void dsc_reader_destroy(dsc_reader_t *reader);
/* Samples in the dataset: valid indices are 0 .. len - 1. 0 for NULL. Thread-safe. */
DSC_EXTERN uint64_t dsc_reader_len(const dsc_reader_t *reader);
/* Reads samples indices[0 .. n - 1] (dataset-wide indices, any order, repeats allowed) into one
 * batch: sample k of the batch is indices[k] (dsc_batch_indices gives them back). Fetches the
 * chunks not in the cache (one GET per run of consecutive chunks of a shard, up to
 * inflight_bytes at once, over connections per server), verifies and decodes them on the calling
 * thread, collates. Blocks until done (each request bounded by timeout_ms, with fail-over to
 * other replicas). Returns 0 and *out, a batch the caller owns with one reference: valid until
 * dsc_batch_release() (every batch a reader hands out must be released; DLPack tensors hold
 * their own reference). Errors (then *out is untouched and nothing is held): DSC_EINVAL (NULL,
 * n 0 or over batch_size), DSC_ERANGE (an index >= dsc_reader_len: the text names the index, its
 * position and the length), DSC_EHELD (the batches still held plus this one would pass
 * max_held_bytes), DSC_ETOOLARGE (a variable field over its max_bytes / max_len room: the text
 * names the sample and the option; the reader stays usable), DSC_EDECODE (an image that does
 * not decode, with on_decode_error fail; usable), or a fetch error: DSC_ECHUNKSUM,
 * DSC_EDATASUM, DSC_EDECOMPRESS, DSC_ECORRUPT (no intact copy of a chunk anywhere),
 * DSC_EUNAVAIL / DSC_EALLDOWN (no server for a chunk), DSC_ENOMEM: after these the reader is
 * failed and every later call returns the same code. dsc_reader_last_error says why. */
DSC_EXTERN int dsc_reader_get(dsc_reader_t *reader, const uint64_t *indices, size_t n,
                              dsc_batch_t **out);
/* dsc_reader_get and, in the same call, views[f] for f < view_count as dsc_batch_field_view
 * fills them (the caller sets each struct_size): what a binding asks of each batch, in one call.
 * Returns the batch's samples (n, > 0) or dsc_reader_get's errors, or DSC_EINVAL (view_count
 * past the fields, a struct_size too small: nothing is read). Thread-safe as dsc_reader_get. */
DSC_EXTERN int dsc_reader_get_views(dsc_reader_t *reader, const uint64_t *indices, size_t n,
                                    dsc_batch_t **out, dsc_field_view_t *views,
                                    uint32_t view_count);
/* Sets the epoch the image crops and flips of later requests are keyed by ((seed, epoch,
 * index), as the loader's: the same sample decodes to the same pixels in both for the same
 * seed and epoch) and starts counting refetches anew (dsc_stats_t.refetches: chunks fetched
 * again after the cache dropped them, within the epoch). Epoch 0 at create. Returns 0 or
 * DSC_EINVAL (NULL). */
DSC_EXTERN int dsc_reader_set_epoch(dsc_reader_t *reader, uint64_t epoch);
/* The schema, as dsc_loader_field_count / dsc_loader_field / dsc_loader_meta (an image field
 * is described decoded). Thread-safe. */
DSC_EXTERN uint32_t dsc_reader_field_count(const dsc_reader_t *reader);
DSC_EXTERN int dsc_reader_field(const dsc_reader_t *reader, uint32_t field, dsc_field_info_t *out);
DSC_EXTERN const char *dsc_reader_meta(const dsc_reader_t *reader);
/* The loader's statistics for this reader (out->struct_size set by the caller): batches,
 * samples, requests (GETs sent), wire_bytes, checksum_failures, failovers, retries, refetches,
 * decode_seconds, collate_seconds, image_seconds, truncated_samples, decode_errors; stall_seconds
 * sums the time spent inside dsc_reader_get. Returns 0 or DSC_EINVAL. Thread-safe. */
DSC_EXTERN int dsc_reader_stats(const dsc_reader_t *reader, dsc_stats_t *out);
/* Why the last failing call on reader failed, in words ("reader: dataset d: index 10 (position
 * 3 of the request) is out of range: the dataset has 10 samples (0 .. 9)"); reader NULL: the
 * calling thread's last dsc_reader_create failure. Writes at most cap bytes (NUL-terminated; ""
 * when none) and returns the length of the whole text. */
DSC_EXTERN int dsc_reader_last_error(const dsc_reader_t *reader, char *buf, size_t cap);

/* ---- Writer ---------------------------------------------------------------------------------
 * Turns samples into a dataset directory (shard files + manifest.json, proto/FORMAT.md;
 * docs/ingest.md). Fields are given as specs "name:dtype[dims]": "label:i64" (scalar),
 * "image:u8[3,32,32]" (fixed), "input_ids:i32[]" (a variable number of elements; same as
 * "[?]"), "mel:f32[?,80]" (a variable number of rows of 80). Only the leading dimension may be
 * variable; a dataset with a variable field is written as format version 2, one without as
 * version 1, byte for byte as before version 2 existed.
 *
 * Chunks are compressed on `threads` threads while the caller adds samples; chunks are written
 * in order; memory is bounded by the chunks in flight (2 * threads + 2 chunks of about
 * chunk_bytes, whatever the dataset's size). Everything is written under a hidden temporary
 * directory beside path (".NAME.tmp-PID-N"), every file fsync'd, the manifest last, and the
 * directory renamed to path by finish: path appears complete or not at all. abort, a failed
 * finish and any error remove the temporary directory; a process killed mid-way leaves only
 * that hidden directory, without a manifest, which no server loads.
 *
 * One writer is used by one thread at a time (the library's threads are its own). */
typedef struct dsc_writer dsc_writer_t;

/* Parses one field spec, the grammar every writer takes (proto/fieldspec.h): "NAME:DTYPE[DIMS]"
 * or the type alone ("u8[3,32,32]", name then ""), dims "[D,D,...]" with "?" (or "[]") for a
 * variable leading dimension, or the older "NAME:DTYPE:DxDxD"; DTYPE u8..f64 or its numpy
 * spelling; spaces around tokens allowed. On success fills *out like dsc_loader_field (shape[0]
 * -1 for a variable dimension; sample_bytes per sample, or per row of a variable field) and
 * returns 0. Otherwise returns DSC_EINVAL and writes why into err (at most err_cap bytes,
 * NUL-terminated; err may be NULL), naming the spec, the offending text and its 1-based
 * position: "field spec 'x:u8[3,?]', position 8: only the leading dimension may be variable:
 * '?'". Pure: no allocation, thread-safe. */
DSC_EXTERN int dsc_field_spec_parse(const char *spec, dsc_field_info_t *out, char *err,
                                    size_t err_cap);
/* Called on the caller's thread from add/finish after each chunk is written: samples added so
 * far, their decoded bytes, and the stored bytes written. */
typedef void (*dsc_writer_progress_fn)(void *ctx, uint64_t samples, uint64_t raw_bytes,
                                       uint64_t stored_bytes);

typedef struct dsc_writer_options {
    size_t struct_size;    /* sizeof(dsc_writer_options_t): lets the struct grow */
    const char *path;      /* dataset directory to create (must not exist yet, unless replace);
                              missing parent directories are created */
    const char *name;      /* dataset name ([A-Za-z0-9_.-], 1..63); NULL: path's last component */
    const char *fields;    /* "input_ids:i32[],label:i64,image:u8[3,32,32]" (1..16 fields) */
    const char *compress;  /* "lz4" (default, NULL), "lz4hc" or "none"; a chunk that does not
                              shrink is stored raw */
    int level;             /* lz4hc level 1..12 (0: the default 9); only with "lz4hc" */
    uint64_t shard_bytes;  /* target decoded bytes per shard file (0: 64 MiB) */
    uint32_t chunk_bytes;  /* target decoded bytes per chunk, the unit of transfer (0: 1 MiB;
                              at most 256 MiB). Every chunk of a shard holds the same number of
                              samples except its last (fixed fields: chunk_bytes / sample bytes;
                              variable: from the shard's first chunk); with variable fields a
                              chunk stays under 4 * chunk_bytes unless one sample is larger */
    uint32_t threads;      /* compression threads (0: the cores online, at most 64) */
    const char *meta_json; /* a JSON object stored as the manifest's "meta", or NULL */
    dsc_writer_progress_fn progress_fn; /* NULL: none */
    void *progress_ctx;
    dsc_log_fn log_fn; /* NULL: quiet (or DSCACHE_LOG) */
    void *log_ctx;
    int log_level; /* default DSC_LOG_WARN */
    int replace;   /* 0 (default): path must not exist (-EEXIST, the message says to pass
                      replace). 1: path may be an existing directory holding a dataset
                      (manifest.json and shard-*.dsc files only; anything else: -ENOTEMPTY) or
                      nothing: finish swaps the new directory with it in one rename (renameat2
                      RENAME_EXCHANGE), so path holds the whole old or the whole new dataset at
                      every instant, then removes the old one. Where the filesystem cannot
                      exchange, the old directory is renamed to ".NAME.old-PID-N" first and the
                      new one to path (path is missing for that moment; a crash there leaves the
                      old dataset whole under that name, which the next writer of path reports).
                      create removes the ".NAME.tmp-*" (and, once path holds a dataset,
                      ".NAME.old-*") directories left beside path by writers that died, logging
                      each at WARN. */
} dsc_writer_options_t;

/* One field's value in dsc_writer_add: `bytes` bytes at data, in the field's dtype, C order,
 * little-endian. data may be NULL when bytes is 0. */
typedef struct dsc_writer_value {
    const void *data;
    uint64_t bytes;
} dsc_writer_value_t;

/* One field of many samples in dsc_writer_add_columns. Fixed field: samples * sample_bytes bytes
 * at data, sample after sample (one C-contiguous [samples, ...shape] array); offsets NULL.
 * Variable field: the rows of every sample back to back at data (bytes in all) and offsets,
 * samples + 1 row offsets into them (offsets[0] == 0, non-decreasing, offsets[samples] * row
 * bytes == bytes: the Arrow list layout, counted in rows). */
typedef struct dsc_writer_column {
    const void *data;
    uint64_t bytes;
    const int64_t *offsets;
} dsc_writer_column_t;

typedef struct dsc_writer_stats {
    size_t struct_size; /* set by the caller to sizeof(dsc_writer_stats_t) */
    uint64_t samples;
    uint32_t shards;
    uint64_t chunks;
    uint64_t raw_bytes;    /* decoded chunk bytes (offset tables included) */
    uint64_t stored_bytes; /* chunk bytes as stored */
    uint64_t file_bytes;   /* shard files: headers, indexes and footers included */
    double seconds;        /* from create to the end of finish */
} dsc_writer_stats_t;

/* Fills *options with the defaults above (path, fields NULL) and sets struct_size =
 * struct_size: pass sizeof *options. Returns 0, or DSC_EINVAL (NULL, or struct_size smaller
 * than this first version of the struct). */
DSC_EXTERN int dsc_writer_options_init(dsc_writer_options_t *options, size_t struct_size);
/* Parses the field specs, checks the options, creates the hidden temporary directory beside
 * path and starts the compression threads. Nothing appears at path before finish. Returns 0 and
 * *out (the caller ends it with dsc_writer_finish or dsc_writer_abort), or DSC_EINVAL (a bad
 * option or field spec: dsc_writer_last_error(NULL, ...) says which), -EEXIST (path exists and
 * replace is 0), -ENOTDIR (replace and path is not a directory), -ENOTEMPTY (replace and path
 * holds files that are not a dataset's), DSC_ENOMEM, or -errno from
 * creating the directories. Blocks for the mkdir only. */
DSC_EXTERN int dsc_writer_create(const dsc_writer_options_t *options, dsc_writer_t **out);
/* Appends one sample: values[i] for schema field i, count == the field count. A fixed field's
 * bytes must equal its sample bytes; a variable field's must be a multiple of its row bytes (0
 * allowed: an empty sample). The bytes are copied before the call returns. Blocks while the
 * chunks in flight are at their bound (compression behind) and while finished chunks are
 * written. Returns 0, or DSC_EINVAL (count or a value does not match the schema: the sample is
 * not added and the writer stays usable), DSC_ETOOLARGE (the sample alone would make a chunk
 * over 256 MiB; not added, still usable), DSC_EOVERFLOW (more than 2^64 - 1 rows), DSC_ENOMEM or
 * -errno from a write (then only dsc_writer_abort is left). dsc_writer_last_error names the
 * field and the sample's position ("field 'image' of sample 12: 3000 bytes, expected 3072"). */
DSC_EXTERN int dsc_writer_add(dsc_writer_t *w, const dsc_writer_value_t *values, uint32_t count);
/* Appends `samples` samples given per field (columns[i] for schema field i, count == the field
 * count): the same as samples calls of dsc_writer_add, with the same errors, checked for all the
 * samples before any is added (on DSC_EINVAL and DSC_ETOOLARGE none is). */
DSC_EXTERN int dsc_writer_add_columns(dsc_writer_t *w, const dsc_writer_column_t *columns,
                                      uint32_t count, uint64_t samples);
/* Why the last failing call on w failed, e.g. "field 'image' of sample 12: 3000 bytes, expected
 * 3072"; w NULL: the calling thread's last failed dsc_writer_create or dsc_writer_finish (w is
 * gone then). Writes at most len bytes
 * (NUL-terminated; "" when none) and returns the length of the whole text. */
DSC_EXTERN int dsc_writer_last_error(const dsc_writer_t *w, char *buf, size_t len);
/* Replaces the manifest's "meta" object the writer will write (options.meta_json) with
 * meta_json, a JSON object text (copied; NULL: none), e.g. with what is known only once every
 * sample was added. Returns 0, DSC_EINVAL (w NULL, not a JSON object, or over the 1 MiB a
 * manifest's "meta" may hold: dsc_writer_last_error says which) or DSC_ENOMEM. */
DSC_EXTERN int dsc_writer_set_meta(dsc_writer_t *w, const char *meta_json);
/* Flushes the last chunk, waits for the compression threads, writes the last shard, the
 * manifest last, fsyncs, and renames the temporary directory to path (atomic: path appears
 * complete). Fills *stats when non-NULL (stats->struct_size set by the caller). Frees w
 * whatever it returns; on failure nothing new is left at path (with replace, path still holds
 * the whole old dataset) nor in the temporary directory. Returns 0, DSC_EINVAL (no sample was
 * added, or an earlier write failed), -EEXIST (path appeared meanwhile), -ENOTEMPTY (replace: files
 * that are not a dataset's appeared in path; nothing replaced), DSC_ENOMEM or -errno; then
 * dsc_writer_last_error(NULL, ...) says why. */
DSC_EXTERN int dsc_writer_finish(dsc_writer_t *w, dsc_writer_stats_t *stats);
/* Stops the threads, removes everything written (the temporary directory) and frees w; nothing
 * appears at path. NULL is a no-op. */
DSC_EXTERN void dsc_writer_abort(dsc_writer_t *w);

#ifdef __cplusplus
}
#endif
#endif /* DSCACHE_H */
