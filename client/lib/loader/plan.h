/* Epoch plan: the global order (a pure function of seed, epoch and the dataset's chunk layout,
 * independent of the world size) with its split into per-rank batches, and the local order
 * (default: chunk-local rank runs, resizable by segments). No I/O, no threads; each order object
 * is used by one thread at a time. */
#ifndef DSC_PLAN_H
#define DSC_PLAN_H

#include "manifest.h"

#include <stddef.h>
#include <stdint.h>

/* ---- Global order -------------------------------------------------------------------------
 * G (the epoch's sample stream) is built in two stages:
 *  1. the global chunk list (every chunk of every shard, in manifest order) is permuted with a
 *     PRNG seeded by (seed, epoch); concatenating the permuted chunks' samples gives S;
 *  2. S is cut into windows of `window` samples (the last may be shorter) and each window is
 *     permuted with a PRNG seeded by (seed, epoch, window index): G[w*window + i] =
 *     S[w*window + perm_w[i]].
 * With shuffle off, G is the dataset order (G[i] = i). */
typedef struct dsc_order dsc_order_t;

/* Where a dataset-wide sample lives. */
typedef struct dsc_sample_loc {
    uint64_t chunk;         /* global chunk id: chunks numbered across shards in manifest order */
    uint32_t shard;         /* shard id (position in the manifest) */
    uint32_t shard_chunk;   /* chunk index inside the shard */
    uint32_t in_chunk;      /* sample index inside the chunk */
    uint32_t chunk_samples; /* samples held by that chunk */
} dsc_sample_loc_t;

/* Builds an order over the manifest's shards (only shard_count and each shard's samples,
 * chunks and chunk_samples are read; the manifest may be freed afterwards). window 0 means
 * 8192. Returns 0 and *out, DSC_EBADMANIFEST (no samples, chunk count inconsistent with
 * samples/chunk_samples), DSC_EOVERFLOW, DSC_ENOMEM. */
int dsc__order_create(const dsc_manifest_t *manifest, uint64_t seed, int shuffle, uint32_t window,
                      dsc_order_t **out);
/* NULL is a no-op. */
void dsc__order_destroy(dsc_order_t *order);
/* Selects the epoch whose order dsc__order_at returns (O(chunks) when shuffled). */
void dsc__order_set_epoch(dsc_order_t *order, uint64_t epoch);
uint64_t dsc__order_epoch(const dsc_order_t *order);
/* Samples in the dataset (N). */
uint64_t dsc__order_samples(const dsc_order_t *order);
/* Total chunks in the dataset. */
uint64_t dsc__order_chunks(const dsc_order_t *order);
/* G[pos] for 0 <= pos < N (larger positions wrap modulo N). O(1) amortised when positions are
 * visited window by window: the current window is cached (window * 8 bytes). */
uint64_t dsc__order_at(dsc_order_t *order, uint64_t pos);
/* Locates a dataset-wide sample (O(log shards)). Returns 0, or DSC_ERANGE. */
int dsc__order_locate(const dsc_order_t *order, uint64_t sample, dsc_sample_loc_t *out);

/* ---- Rank split ---------------------------------------------------------------------------
 * From the global position P (samples of G already consumed by all ranks together), the rest
 * G[P:N] (R = N - P samples) is made a multiple of the world size W: drop_last truncates it to
 * floor(R/W)*W, otherwise it is padded to ceil(R/W)*W with G[0], G[1], ... (wrapping from the
 * start of G, like torch DistributedSampler). Each rank gets per_rank = total/W samples, handed
 * out in steps: at step s, rank r takes the positions P + s*B*W + r*b .. + b - 1, where b = B
 * except in a final smaller step (b = per_rank - s*B), which drop_last drops. After k full
 * steps every rank has consumed exactly the prefix G[0 : P + k*B*W]. */
typedef struct dsc_split {
    uint64_t samples;    /* N */
    uint64_t start;      /* P */
    uint64_t total;      /* positions handed out by all ranks together (after pad/truncate) */
    uint64_t per_rank;   /* total / world_size */
    uint64_t steps;      /* steps per rank */
    uint32_t batch_size; /* B */
    uint32_t world_size; /* W */
    int drop_last;
} dsc_split_t;

/* Fills *split. Returns 0, or DSC_EINVAL (batch_size or world_size 0, start > samples). */
int dsc__split_init(dsc_split_t *split, uint64_t samples, uint64_t start, uint32_t batch_size,
                    uint32_t world_size, int drop_last);
/* Positions of rank `rank` at step `step` (< steps): the first position (may be >= N when
 * padded: map it with dsc__order_at, which wraps) and the count. Returns 0 or DSC_ERANGE. */
int dsc__split_step(const dsc_split_t *split, uint64_t step, uint32_t rank, uint64_t *first,
                    uint32_t *count);
/* Global position after `steps_done` steps of this split (clamped to N: N means the epoch is
 * complete). */
uint64_t dsc__split_position(const dsc_split_t *split, uint64_t steps_done);

/* ---- Local order (order = "local", the default) ------------------------------------------
 * Chunk-local: each rank reads a contiguous run of the epoch's chunk stream S (stage 1 of the
 * global order above), so the job fetches about the stored dataset once per epoch whatever the
 * world size. docs/order.md gives the algorithm, the exactly-once argument and resizing.
 *
 * A segment is a stretch of an epoch run at one (world size W, batch size B): `steps` steps
 * done. Level 0 is S (length N). The segment at level j works on the stream X_j (length R_j) of
 * the samples not consumed by the segments below it:
 *   - rank r owns X_j[lo(r) : lo(r) + L(r)), lo(r) = r*q + min(r, m), L(r) = q + (r < m),
 *     q = R_j / W, m = R_j % W;
 *   - the rank's stream T_r is cut into windows of `window` samples (the last may be shorter),
 *     each permuted by a keyed Feistel bijection (seed, epoch, level, rank, window):
 *     T_r[t] = X_j[lo(r) + wperm(t)];
 *   - per_rank and steps as in the rank split above (drop_last truncates to floor(R_j/W), else
 *     pads to ceil(R_j/W)); a padded position t >= L(r) takes X_j[(lo(r) + t) mod R_j];
 *   - step s of rank r is T_r[s*B : min((s+1)*B, per_rank)) (drop_last drops a short one);
 *   - after k steps (k < steps) every rank has consumed T_r[0 : k*B], and X_{j+1} is the
 *     concatenation over r of T_r[k*B : L(r)] (R_{j+1} = R_j - W*k*B).
 * Global step s is the union of every rank's step s. Memory: O(segments); sample lookups are
 * O(segments + log chunks). */
#define DSC_PLAN_MAX_SEGS 8

/* A stretch of an epoch done at one world size and batch size. */
typedef struct dsc_plan_seg {
    uint32_t world_size;
    uint32_t batch_size;
    uint64_t steps; /* steps done by every rank */
} dsc_plan_seg_t;

typedef struct dsc_local_level {
    uint64_t len;   /* R_j */
    uint64_t q;     /* R_j / W */
    uint64_t used;  /* k * B consumed per rank (history levels only) */
    uint64_t key;   /* window permutation key of the level */
    uint32_t world; /* W */
    uint32_t m;     /* R_j % W */
} dsc_local_level_t;

typedef struct dsc_local {
    dsc_order_t *order; /* not owned: gives S (its epoch must stay the one given to init) */
    uint32_t window;    /* 0: no window permutation (shuffle off) */
    uint32_t levels;    /* history segments + the current one */
    dsc_local_level_t lv[DSC_PLAN_MAX_SEGS];
    uint64_t per_rank; /* of the current segment */
    uint64_t steps;    /* of the current segment */
    uint32_t batch_size;
    uint32_t world_size;
    int drop_last;
    /* Chunk range of the window last looked up (one level only): [klo, khi) covers S positions
     * [begin, end). */
    int hint_valid;
    uint64_t hint_begin, hint_end, hint_klo, hint_khi;
} dsc_local_t;

/* Plans the current segment of epoch dsc__order_epoch(order) after `nhist` history segments
 * (oldest first, each with steps > 0 and fewer than its segment's steps). window 0 means 8192;
 * the order's shuffle setting decides whether windows are permuted. Returns 0, DSC_EINVAL (a
 * zero batch or world size, a history segment with no steps or more than its share: the state is
 * not one this order produced) or DSC_ERANGE (nhist >= DSC_PLAN_MAX_SEGS). */
int dsc__local_init(dsc_local_t *lp, dsc_order_t *order, uint32_t window, int shuffle,
                    const dsc_plan_seg_t *hist, uint32_t nhist, uint32_t batch_size,
                    uint32_t world_size, int drop_last);
/* Rank `rank`'s positions at step `step` (< steps): first index into its stream and count.
 * Returns 0 or DSC_ERANGE. */
int dsc__local_step(const dsc_local_t *lp, uint64_t step, uint32_t rank, uint64_t *first,
                    uint32_t *count);
/* The dataset sample at position t (< per_rank) of rank `rank`'s stream (updates a lookup
 * hint in *lp: one thread at a time). */
uint64_t dsc__local_at(dsc_local_t *lp, uint32_t rank, uint64_t t);
/* The sample at S-position pos (stage 1 of the order: permuted chunks, concatenated). */
uint64_t dsc__order_stream_at(const dsc_order_t *order, uint64_t pos);
/* Keyed bijection of [0, n) (n >= 1): 4-round Feistel on the next even power of two, cycle
 * walking back into range. Exposed for tests. */
uint64_t dsc__feistel_perm(uint64_t key, uint64_t n, uint64_t x);

/* ---- PRNG (exposed for tests) ---------------------------------------------------------- */
/* splitmix64 step. */
uint64_t dsc__rng_next(uint64_t *state);
/* Uniform integer in [0, bound) (bound >= 1), without modulo bias. */
uint64_t dsc__rng_below(uint64_t *state, uint64_t bound);

#endif
