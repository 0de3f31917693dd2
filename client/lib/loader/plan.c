/* Epoch plan: seeded chunk permutation + windowed sample shuffle, and the per-rank split. */
#include "plan.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

#define DEFAULT_WINDOW 8192u

struct dsc_order {
    uint64_t seed;
    uint64_t epoch;
    int shuffle;
    uint32_t window;
    uint64_t samples; /* N */
    uint32_t shard_count;
    uint64_t chunk_count;
    /* Per shard: first sample, first global chunk, samples, chunk_samples. */
    uint64_t *shard_first_sample; /* shard_count + 1 entries */
    uint64_t *shard_first_chunk;  /* shard_count + 1 entries */
    uint32_t *shard_chunk_samples;
    /* Epoch state: permuted chunk list and the S-position where each permuted chunk starts. */
    uint64_t *perm_chunk; /* chunk_count */
    uint64_t *perm_start; /* chunk_count + 1 */
    /* Cached window: G values for positions [win_index * window, + win_len). */
    uint64_t *win_values;
    uint64_t win_index;
    uint32_t win_len;
    int win_valid;
};

uint64_t dsc__rng_next(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

uint64_t dsc__rng_below(uint64_t *state, uint64_t bound) {
    /* Lemire's multiply-shift with rejection: exact uniformity for any bound. */
    __extension__ typedef unsigned __int128 u128;
    uint64_t x = dsc__rng_next(state);
    u128 m = (u128)x * bound;
    uint64_t low = (uint64_t)m;
    if (low < bound) {
        uint64_t threshold = -bound % bound;
        while (low < threshold) {
            x = dsc__rng_next(state);
            m = (u128)x * bound;
            low = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

/* Seeds a stream from (seed, epoch, tag, index) so that streams never collide in practice. */
static uint64_t rng_seed(uint64_t seed, uint64_t epoch, uint64_t tag, uint64_t index) {
    uint64_t s = seed ^ 0x6473636163686531ULL; /* "dscache1" */
    uint64_t h = dsc__rng_next(&s);
    s = h ^ (epoch * 0xD1B54A32D192ED03ULL);
    h = dsc__rng_next(&s);
    s = h ^ (tag * 0x8CB92BA72F3D8DD7ULL);
    h = dsc__rng_next(&s);
    s = h ^ (index * 0xABC98388FB8FAC03ULL);
    return dsc__rng_next(&s);
}

int dsc__order_create(const dsc_manifest_t *manifest, uint64_t seed, int shuffle, uint32_t window,
                      dsc_order_t **out) {
    int rc = DSC_ENOMEM;
    if (manifest == NULL || out == NULL || manifest->shard_count == 0 || manifest->shards == NULL)
        return manifest == NULL || out == NULL ? DSC_EINVAL : DSC_EBADMANIFEST;
    dsc_order_t *order = calloc(1, sizeof *order);
    if (order == NULL)
        return DSC_ENOMEM;
    order->seed = seed;
    order->shuffle = shuffle ? 1 : 0;
    order->window = window ? window : DEFAULT_WINDOW;
    order->shard_count = manifest->shard_count;
    size_t n = manifest->shard_count;
    order->shard_first_sample = calloc(n + 1, sizeof(uint64_t));
    order->shard_first_chunk = calloc(n + 1, sizeof(uint64_t));
    order->shard_chunk_samples = calloc(n, sizeof(uint32_t));
    if (!order->shard_first_sample || !order->shard_first_chunk || !order->shard_chunk_samples)
        goto fail;
    uint64_t samples = 0, chunks = 0;
    for (size_t i = 0; i < n; i++) {
        const dsc_manifest_shard_t *s = &manifest->shards[i];
        rc = DSC_EBADMANIFEST;
        if (s->samples == 0 || s->chunk_samples == 0 || s->chunks == 0)
            goto fail;
        uint64_t need = (s->samples + s->chunk_samples - 1) / s->chunk_samples;
        if (need != s->chunks)
            goto fail;
        order->shard_first_sample[i] = samples;
        order->shard_first_chunk[i] = chunks;
        order->shard_chunk_samples[i] = s->chunk_samples;
        rc = DSC_EOVERFLOW;
        if (dsc_add_u64(samples, s->samples, &samples) || dsc_add_u64(chunks, s->chunks, &chunks))
            goto fail;
    }
    order->shard_first_sample[n] = samples;
    order->shard_first_chunk[n] = chunks;
    order->samples = samples;
    order->chunk_count = chunks;
    rc = DSC_ENOMEM;
    if (chunks > SIZE_MAX / sizeof(uint64_t) - 1)
        goto fail;
    order->perm_chunk = malloc(chunks * sizeof(uint64_t));
    order->perm_start = malloc((chunks + 1) * sizeof(uint64_t));
    uint64_t win = order->window < samples ? order->window : samples;
    order->win_values = malloc(win * sizeof(uint64_t));
    if (!order->perm_chunk || !order->perm_start || !order->win_values)
        goto fail;
    dsc__order_set_epoch(order, 0);
    *out = order;
    return 0;
fail:
    dsc__order_destroy(order);
    return rc;
}

void dsc__order_destroy(dsc_order_t *order) {
    if (order == NULL)
        return;
    free(order->shard_first_sample);
    free(order->shard_first_chunk);
    free(order->shard_chunk_samples);
    free(order->perm_chunk);
    free(order->perm_start);
    free(order->win_values);
    free(order);
}

/* Shard of global chunk c (binary search over shard_first_chunk). */
static uint32_t shard_of_chunk(const dsc_order_t *order, uint64_t chunk) {
    uint32_t lo = 0, hi = order->shard_count; /* invariant: first_chunk[lo] <= chunk */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (order->shard_first_chunk[mid] <= chunk)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static uint32_t shard_of_sample(const dsc_order_t *order, uint64_t sample) {
    uint32_t lo = 0, hi = order->shard_count;
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (order->shard_first_sample[mid] <= sample)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* First sample and sample count of global chunk c. */
static void chunk_span(const dsc_order_t *order, uint64_t chunk, uint64_t *first, uint64_t *count) {
    uint32_t shard = shard_of_chunk(order, chunk);
    uint64_t k = chunk - order->shard_first_chunk[shard];
    uint64_t cs = order->shard_chunk_samples[shard];
    uint64_t begin = order->shard_first_sample[shard] + k * cs;
    uint64_t end = order->shard_first_sample[shard + 1];
    *first = begin;
    *count = end - begin < cs ? end - begin : cs;
}

void dsc__order_set_epoch(dsc_order_t *order, uint64_t epoch) {
    order->epoch = epoch;
    order->win_valid = 0;
    uint64_t n = order->chunk_count;
    for (uint64_t i = 0; i < n; i++)
        order->perm_chunk[i] = i;
    if (order->shuffle) {
        uint64_t rng = rng_seed(order->seed, epoch, 1, 0);
        for (uint64_t i = n; i > 1; i--) {
            uint64_t j = dsc__rng_below(&rng, i);
            uint64_t t = order->perm_chunk[i - 1];
            order->perm_chunk[i - 1] = order->perm_chunk[j];
            order->perm_chunk[j] = t;
        }
    }
    uint64_t pos = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t first, count;
        chunk_span(order, order->perm_chunk[i], &first, &count);
        order->perm_start[i] = pos;
        pos += count;
    }
    order->perm_start[n] = pos;
}

uint64_t dsc__order_epoch(const dsc_order_t *order) {
    return order->epoch;
}

uint64_t dsc__order_samples(const dsc_order_t *order) {
    return order->samples;
}

uint64_t dsc__order_chunks(const dsc_order_t *order) {
    return order->chunk_count;
}

/* Index of the permuted chunk holding S-position pos, searched in [lo, hi) (the caller knows
 * perm_start[lo] <= pos < perm_start[hi]). */
static uint64_t perm_index_in(const dsc_order_t *order, uint64_t pos, uint64_t lo, uint64_t hi) {
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (order->perm_start[mid] <= pos)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Index of the permuted chunk holding S-position pos. */
static uint64_t perm_index_of(const dsc_order_t *order, uint64_t pos) {
    uint64_t lo = 0, hi = order->chunk_count; /* perm_start[lo] <= pos < perm_start[hi] */
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (order->perm_start[mid] <= pos)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static void fill_window(dsc_order_t *order, uint64_t w) {
    uint64_t begin = w * order->window;
    uint64_t end = begin + order->window;
    if (end > order->samples)
        end = order->samples;
    uint32_t len = (uint32_t)(end - begin);
    /* S values of the window, walking the permuted chunks from the one holding `begin`. */
    uint64_t k = perm_index_of(order, begin);
    uint64_t first, count;
    chunk_span(order, order->perm_chunk[k], &first, &count);
    uint64_t off = begin - order->perm_start[k];
    for (uint32_t i = 0; i < len; i++) {
        if (off == count) {
            k++;
            chunk_span(order, order->perm_chunk[k], &first, &count);
            off = 0;
        }
        order->win_values[i] = first + off++;
    }
    uint64_t rng = rng_seed(order->seed, order->epoch, 2, w);
    for (uint32_t i = len; i > 1; i--) {
        uint32_t j = (uint32_t)dsc__rng_below(&rng, i);
        uint64_t t = order->win_values[i - 1];
        order->win_values[i - 1] = order->win_values[j];
        order->win_values[j] = t;
    }
    order->win_index = w;
    order->win_len = len;
    order->win_valid = 1;
}

uint64_t dsc__order_at(dsc_order_t *order, uint64_t pos) {
    pos %= order->samples;
    if (!order->shuffle)
        return pos;
    uint64_t w = pos / order->window;
    if (!order->win_valid || order->win_index != w)
        fill_window(order, w);
    return order->win_values[pos - w * order->window];
}

int dsc__order_locate(const dsc_order_t *order, uint64_t sample, dsc_sample_loc_t *out) {
    if (sample >= order->samples)
        return DSC_ERANGE;
    uint32_t shard = shard_of_sample(order, sample);
    uint64_t in_shard = sample - order->shard_first_sample[shard];
    uint64_t cs = order->shard_chunk_samples[shard];
    uint64_t k = in_shard / cs;
    uint64_t shard_samples =
        order->shard_first_sample[shard + 1] - order->shard_first_sample[shard];
    uint64_t left = shard_samples - k * cs;
    out->shard = shard;
    out->shard_chunk = (uint32_t)k;
    out->chunk = order->shard_first_chunk[shard] + k;
    out->in_chunk = (uint32_t)(in_shard - k * cs);
    out->chunk_samples = (uint32_t)(left < cs ? left : cs);
    return 0;
}

int dsc__split_init(dsc_split_t *split, uint64_t samples, uint64_t start, uint32_t batch_size,
                    uint32_t world_size, int drop_last) {
    if (batch_size == 0 || world_size == 0 || start > samples)
        return DSC_EINVAL;
    memset(split, 0, sizeof *split);
    uint64_t rest = samples - start;
    split->samples = samples;
    split->start = start;
    split->batch_size = batch_size;
    split->world_size = world_size;
    split->drop_last = drop_last ? 1 : 0;
    split->per_rank = drop_last ? rest / world_size : (rest + world_size - 1) / world_size;
    split->total = split->per_rank * world_size;
    split->steps =
        drop_last ? split->per_rank / batch_size : (split->per_rank + batch_size - 1) / batch_size;
    return 0;
}

int dsc__split_step(const dsc_split_t *split, uint64_t step, uint32_t rank, uint64_t *first,
                    uint32_t *count) {
    if (step >= split->steps || rank >= split->world_size)
        return DSC_ERANGE;
    uint64_t done = step * split->batch_size; /* per rank, before this step */
    uint64_t b = split->per_rank - done;
    if (b > split->batch_size)
        b = split->batch_size;
    *first = split->start + done * split->world_size + (uint64_t)rank * b;
    *count = (uint32_t)b;
    return 0;
}

uint64_t dsc__split_position(const dsc_split_t *split, uint64_t steps_done) {
    if (steps_done >= split->steps)
        return split->samples; /* the tail (dropped or padded) ends the epoch */
    uint64_t pos = split->start + steps_done * split->batch_size * split->world_size;
    return pos < split->samples ? pos : split->samples;
}

/* ---- Local order ---------------------------------------------------------------------------- */

/* S[pos] with the chunk searched in [klo, khi). */
static uint64_t stream_at_in(const dsc_order_t *order, uint64_t pos, uint64_t klo, uint64_t khi) {
    uint64_t k = perm_index_in(order, pos, klo, khi);
    uint64_t first, count;
    chunk_span(order, order->perm_chunk[k], &first, &count);
    return first + (pos - order->perm_start[k]);
}

uint64_t dsc__order_stream_at(const dsc_order_t *order, uint64_t pos) {
    uint64_t k = perm_index_of(order, pos);
    uint64_t first, count;
    chunk_span(order, order->perm_chunk[k], &first, &count);
    return first + (pos - order->perm_start[k]);
}

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

uint64_t dsc__feistel_perm(uint64_t key, uint64_t n, uint64_t x) {
    if (n <= 1)
        return 0;
    unsigned bits = 2;
    while (bits < 64 && (1ull << bits) < n)
        bits++;
    bits += bits & 1u; /* even: two halves of equal width */
    unsigned half = bits / 2;
    uint64_t mask = (1ull << half) - 1;
    do { /* cycle walking: a bijection of [0, 2^bits) restricted to [0, n) stays one */
        uint64_t l = x >> half, r = x & mask;
        for (uint64_t round = 0; round < 4; round++) {
            uint64_t f = mix64(key ^ (round * 0x9E3779B97F4A7C15ULL) ^ (r * 0xD6E8FEB86659FD93ULL));
            uint64_t nl = r;
            r = l ^ (f & mask);
            l = nl;
        }
        x = (l << half) | r;
    } while (x >= n);
    return x;
}

/* Index into X_j of position t of rank r's stream at level lv. */
static uint64_t level_pos(const dsc_local_t *lp, const dsc_local_level_t *lv, uint32_t r,
                          uint64_t t) {
    uint64_t lo = (uint64_t)r * lv->q + (r < lv->m ? r : lv->m);
    uint64_t len = lv->q + (r < lv->m ? 1 : 0);
    if (t >= len) /* padding: wraps past the rank's run, like DistributedSampler */
        return (lo + t) % lv->len;
    if (lp->window == 0)
        return lo + t;
    uint64_t w = t / lp->window;
    uint64_t base = w * lp->window;
    uint64_t n = len - base < lp->window ? len - base : lp->window;
    uint64_t s = lv->key ^ ((uint64_t)r * 0xA0761D6478BD642FULL);
    uint64_t h = dsc__rng_next(&s);
    s = h ^ (w * 0xE7037ED1A0B428DBULL);
    uint64_t key = dsc__rng_next(&s);
    return lo + base + dsc__feistel_perm(key, n, t - base);
}

int dsc__local_init(dsc_local_t *lp, dsc_order_t *order, uint32_t window, int shuffle,
                    const dsc_plan_seg_t *hist, uint32_t nhist, uint32_t batch_size,
                    uint32_t world_size, int drop_last) {
    if (batch_size == 0 || world_size == 0 || order == NULL || (nhist > 0 && hist == NULL))
        return DSC_EINVAL;
    if (nhist >= DSC_PLAN_MAX_SEGS)
        return DSC_ERANGE;
    memset(lp, 0, sizeof *lp);
    lp->order = order;
    lp->window = shuffle ? (window ? window : DEFAULT_WINDOW) : 0;
    uint64_t rest = order->samples;
    for (uint32_t j = 0; j <= nhist; j++) {
        dsc_local_level_t *lv = &lp->lv[j];
        uint32_t w = j < nhist ? hist[j].world_size : world_size;
        if (w == 0)
            return DSC_EINVAL;
        lv->len = rest;
        lv->world = w;
        lv->q = rest / w;
        lv->m = (uint32_t)(rest % w);
        lv->key = rng_seed(order->seed, order->epoch, 3, j);
        if (j < nhist) {
            uint64_t b = hist[j].batch_size, k = hist[j].steps;
            if (b == 0 || k == 0 || k > lv->q / b)
                return DSC_EINVAL; /* more than every rank's share: not a state of this order */
            lv->used = k * b;
            rest -= lv->used * w;
        }
    }
    lp->levels = nhist + 1;
    lp->batch_size = batch_size;
    lp->world_size = world_size;
    lp->drop_last = drop_last ? 1 : 0;
    lp->per_rank = drop_last ? rest / world_size : (rest + world_size - 1) / world_size;
    lp->steps =
        drop_last ? lp->per_rank / batch_size : (lp->per_rank + batch_size - 1) / batch_size;
    return 0;
}

int dsc__local_step(const dsc_local_t *lp, uint64_t step, uint32_t rank, uint64_t *first,
                    uint32_t *count) {
    if (step >= lp->steps || rank >= lp->world_size)
        return DSC_ERANGE;
    uint64_t done = step * lp->batch_size;
    uint64_t b = lp->per_rank - done;
    *first = done;
    *count = (uint32_t)(b < lp->batch_size ? b : lp->batch_size);
    return 0;
}

uint64_t dsc__local_at(dsc_local_t *lp, uint32_t rank, uint64_t t) {
    uint32_t j = lp->levels - 1;
    uint64_t x = level_pos(lp, &lp->lv[j], rank, t);
    if (j == 0 && lp->window > 0) {
        /* One level: the window's samples lie in one S range; its chunks are found once. */
        const dsc_local_level_t *lv = &lp->lv[0];
        uint64_t lo = (uint64_t)rank * lv->q + (rank < lv->m ? rank : lv->m);
        uint64_t len = lv->q + (rank < lv->m ? 1 : 0);
        if (t < len) {
            uint64_t base = t / lp->window * lp->window;
            uint64_t begin = lo + base,
                     end = lo + (len - base < lp->window ? len : base + lp->window);
            if (!lp->hint_valid || lp->hint_begin != begin || lp->hint_end != end) {
                lp->hint_begin = begin;
                lp->hint_end = end;
                lp->hint_klo = perm_index_of(lp->order, begin);
                lp->hint_khi = perm_index_of(lp->order, end - 1) + 1;
                lp->hint_valid = 1;
            }
            return stream_at_in(lp->order, x, lp->hint_klo, lp->hint_khi);
        }
    }
    while (j > 0) {
        /* x indexes X_j, the concatenation of the unconsumed tails of level j-1's ranks. */
        const dsc_local_level_t *pv = &lp->lv[--j];
        uint64_t big = pv->q + 1 - pv->used, small = pv->q - pv->used;
        uint64_t r, off;
        if (x < (uint64_t)pv->m * big) {
            r = x / big;
            off = x - r * big;
        } else {
            uint64_t y = x - (uint64_t)pv->m * big;
            r = pv->m + y / small; /* small > 0: x < R_j leaves a rank with a tail */
            off = y - (r - pv->m) * small;
        }
        x = level_pos(lp, pv, (uint32_t)r, pv->used + off);
    }
    return dsc__order_stream_at(lp->order, x);
}
