/* Loader decode and collate: verify + decompress received chunks (dsc_chunk_decode), and collate
 * planned steps into their batch slots once every chunk they need is decoded (then H2D with
 * CUDA). Calls down only: route.c (refetch of a corrupt chunk), chunks.c, pipeline.c. */
#include "decode.h"
#include "route.h"
#include "util.h"
#include "wire.h"

#include <stdlib.h>
#include <string.h>

/* A dataset with variable-length fields: locates each field in the decoded chunk and checks
 * its layout (proto's validator: offsets in order, rows ending exactly at raw_len), keeping the
 * result in ent->layout for collate. Unlocked (the entry is being decoded by this thread).
 * Returns 0, DSC_ENOMEM, or the validator's DSC_EBADINDEX / DSC_ECORRUPT (then another replica
 * is asked: its copy may be intact). */
static int check_layout(dsc_loader_t *loader, dsc_chunk_ent_t *ent) {
    if (loader->cfg.var_count == 0)
        return 0;
    if (ent->layout == NULL) {
        ent->layout = malloc(sizeof *ent->layout);
        if (ent->layout == NULL)
            return DSC_ENOMEM;
    }
    int rc = dsc_chunk_layout(&loader->cfg.manifest->schema, ent->samples, ent->raw, ent->raw_len,
                              ent->layout);
    return rc == DSC_EBADINDEX ? DSC_ECORRUPT : rc;
}

/* Verifies and decodes one chunk. Raw chunks are used where they were received. Unlocked. */
static int decode_chunk(dsc_loader_t *loader, dsc_chunk_ent_t *ent) {
    if (ent->entry.codec == DSC_CODEC_RAW) {
        /* Defensive: the protocol and index decoders refuse such entries already. */
        if (ent->entry.stored_len != ent->entry.raw_len)
            return DSC_EBADINDEX;
        int rc = dsc_chunk_verify(&ent->entry, ent->stored);
        if (rc == 0 && ent->entry.raw_checksum != ent->entry.stored_checksum)
            rc = DSC_EDATASUM;
        ent->raw = ent->stored;
        ent->raw_cap = 0;
        return rc < 0 ? rc : check_layout(loader, ent);
    }
    size_t cap = 0;
    uint8_t *raw = dsc__bufpool_get(&loader->cfg.pool, ent->raw_len, &cap);
    if (raw == NULL)
        return DSC_ENOMEM;
    int rc = dsc_chunk_decode(&ent->entry, ent->stored, raw, cap);
    dsc__bufpool_put(&loader->cfg.pool, ent->stored, ent->stored_cap);
    ent->stored = NULL;
    ent->stored_cap = 0;
    ent->raw = raw;
    ent->raw_cap = cap;
    if (rc >= 0 && (uint64_t)rc != ent->raw_len)
        rc = DSC_EDECOMPRESS;
    return rc < 0 ? rc : check_layout(loader, ent);
}

/* The slot a received chunk can go straight into, or NULL: every planned need of the chunk is
 * one in-order run of all its samples inside one step, and that step holds its slot and waits
 * for chunks. With shuffle=0 and batches larger than chunks (token streams, large batches) that
 * is most chunks; with shuffled data it never holds, and collate() copies per sample. Under
 * lock. */
static dsc_batch_slot_t *direct_slot(dsc_loader_t *loader, const dsc_chunk_ent_t *ent) {
    /* Variable-length fields are packed per batch (their offsets depend on the other samples
     * of the batch): collate() places them. */
    if (!ent->run_ok || ent->refs != ent->samples || loader->cfg.var_count > 0)
        return NULL;
    if (ent->run_seq < loader->cons.cons_seq || ent->run_seq >= loader->sched.slot_seq)
        return NULL;
    const dsc_step_t *st = &loader->sched.steps[ent->run_seq % loader->sched.step_cap];
    if (st->seq != ent->run_seq || st->eof || st->state != ST_PLANNED ||
        ent->run_k + (uint64_t)ent->samples > st->count)
        return NULL;
    return loader->cons.slots[loader->sched.steps[ent->run_seq % loader->sched.step_cap].slot];
}

/* Verifies the chunk and puts its samples straight into `slot` at batch position run_k: raw
 * chunks are copied field by field right after the checksum pass (the bytes are still in this
 * core's cache); lz4 chunks of a one-field dataset decompress into the slot itself, others into
 * this worker's scratch buffer (reused, so it stays cached) and are copied from there. Frees the
 * stored bytes. Unlocked: the entry is placed (no other step can need it) and the slot belongs to
 * its step. Returns 0 or DSC_E*. */
static int place_chunk(dsc_loader_t *loader, dsc_chunk_ent_t *ent, dsc_batch_slot_t *slot,
                       uint8_t **scratch, size_t *scratch_cap) {
    const dsc_schema_t *schema = &loader->cfg.manifest->schema;
    const dsc_chunk_entry_t *e = &ent->entry;
    int rc = 0;
    const uint8_t *raw = NULL;
    if (e->raw_len != ent->raw_len || e->sample_count != ent->samples)
        return DSC_EPROTO;
    if (e->codec == DSC_CODEC_RAW) {
        rc = e->stored_len != e->raw_len ? DSC_EBADINDEX : dsc_chunk_verify(e, ent->stored);
        if (rc == 0 && e->raw_checksum != e->stored_checksum)
            rc = DSC_EDATASUM;
        raw = ent->stored;
    } else if (loader->cfg.field_count == 1) {
        uint8_t *dst = slot->host + loader->cfg.field_off[0] +
                       (uint64_t)ent->run_k * schema->fields[0].sample_bytes;
        rc = dsc_chunk_decode(e, ent->stored, dst, ent->raw_len);
        rc = rc < 0 ? rc : (uint64_t)rc == ent->raw_len ? 0 : DSC_EDECOMPRESS;
        raw = NULL; /* already in place */
    } else {
        if (*scratch_cap < ent->raw_len) {
            free(*scratch);
            *scratch_cap = 0;
            *scratch = malloc(ent->raw_len);
            if (*scratch == NULL)
                return DSC_ENOMEM;
            *scratch_cap = ent->raw_len;
        }
        rc = dsc_chunk_decode(e, ent->stored, *scratch, *scratch_cap);
        rc = rc < 0 ? rc : (uint64_t)rc == ent->raw_len ? 0 : DSC_EDECOMPRESS;
        raw = *scratch;
    }
    if (rc == 0 && raw != NULL) {
        for (uint32_t f = 0; f < loader->cfg.field_count; f++) {
            uint64_t fsb = schema->fields[f].sample_bytes;
            memcpy(slot->host + loader->cfg.field_off[f] + (uint64_t)ent->run_k * fsb,
                   raw + dsc_schema_field_offset(schema, f, ent->samples),
                   (uint64_t)ent->samples * fsb);
        }
    }
    dsc__bufpool_put(&loader->cfg.pool, ent->stored, ent->stored_cap);
    ent->stored = NULL;
    ent->stored_cap = 0;
    ent->raw = NULL;
    ent->raw_cap = 0;
    return rc;
}

/* Source address of sample k of the step, field f. */
static inline const uint8_t *sample_src(const dsc_schema_t *schema, const dsc_step_t *st,
                                        uint32_t f, uint64_t fsb, uint32_t k) {
    const dsc_chunk_ent_t *ent = st->src[k];
    return ent->raw + dsc_schema_field_offset(schema, f, ent->samples) +
           (uint64_t)st->in_chunk[k] * fsb;
}

/* Samples ahead whose first bytes are prefetched, and how many bytes of each: with shuffled data
 * every sample is a random read of a chunk that left the caches long ago (the look-ahead holds a
 * few shuffle windows, more than the L3), and a plain copy would wait for each miss in turn; past
 * the first lines of a sample the hardware prefetcher follows the stream. Measured on a random
 * gather of 3 KiB samples out of 100 MiB: 4 ahead x 4 lines copies 7.4-8.1 -> 9.2-10.3 GB/s;
 * prefetching whole samples (32 lines) filled the miss buffers and stalled on the prefetches. */
#define PREFETCH_SAMPLES 4
#define PREFETCH_BYTES 256u

static inline void prefetch_bytes(const uint8_t *p, uint64_t len) {
    if (len > PREFETCH_BYTES)
        len = PREFETCH_BYTES;
    for (uint64_t off = 0; off < len; off += 64)
        __builtin_prefetch(p + off, 0, 3);
}

/* Row offset i of variable field f of a decoded chunk. */
static inline uint64_t var_offset(const dsc_chunk_ent_t *ent, uint32_t f, uint32_t i) {
    return dsc_load_u64(ent->layout->fields[f].offsets + (uint64_t)i * 8);
}

/* Prefetches the first bytes of sample k's rows of variable field f. */
static inline void prefetch_var(const dsc_step_t *st, uint32_t f, uint64_t rb, uint32_t k) {
    const dsc_chunk_ent_t *ent = st->src[k];
    uint64_t o0 = var_offset(ent, f, st->in_chunk[k]);
    prefetch_bytes(ent->layout->fields[f].values + o0 * rb,
                   (var_offset(ent, f, st->in_chunk[k] + 1) - o0) * rb);
}

/* A batch holds more of variable field f than its slot has room for: records which sample
 * and how much in the step (dsc__step_error_log tells it when next() reaches the step). Unlocked
 * (the step belongs to its collation). Returns DSC_ETOOLARGE. */
static int var_too_large(dsc_step_t *st, uint32_t f, uint32_t k, uint64_t rows, uint64_t used) {
    st->err_field = f;
    st->err_k = k;
    st->err_rows = rows;
    st->err_used = used;
    return DSC_ETOOLARGE;
}

void dsc__step_error_log(dsc_loader_t *loader, const dsc_step_t *st) {
    uint32_t f = st->err_field;
    const dsc_var_field_t *v = &loader->cfg.var[f];
    const char *name = loader->cfg.manifest->schema.fields[f].name;
    unsigned long long id = (unsigned long long)st->ids[st->err_k];
    unsigned long long rows = (unsigned long long)st->err_rows;
    if (v->pad)
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                "dataset %s: sample %llu has %llu rows of field '%s', more than the %llu the "
                "batch slot holds per sample (the manifest's rows_max): set max_len for '%s' "
                "(Python max_len={\"%s\": N}) to truncate, or check the dataset's manifest",
                loader->cfg.dataset, id, rows, name, (unsigned long long)v->lcap, name, name);
    else
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                "dataset %s: sample %llu: field '%s' needs %llu bytes (%llu rows), and batch %llu "
                "holds %llu bytes of it before this sample; the field's budget is %llu bytes "
                "per batch (%s): raise max_bytes for '%s' (Python max_bytes={\"%s\": N}, C "
                "dsc_field_options_t.max_bytes) to at least %llu",
                loader->cfg.dataset, id, name, rows * v->row_bytes, rows,
                (unsigned long long)st->step, (unsigned long long)st->err_used,
                (unsigned long long)v->budget, v->budget_from, name, name,
                (unsigned long long)(st->err_used + rows * v->row_bytes));
}

/* Collates variable field f of a step: values mode, each sample's rows one after the other into
 * the values region and their int64 row offsets (B + 1, Arrow) beside them; padded, the lengths
 * and a [B, L, ...] array, L the batch's longest sample (after max_len), rows past a sample's
 * end filled with pad_value. The one per-field step of collate a later transform (a decoder of
 * encoded bytes, say) would replace. Unlocked, as collate. Returns 0 or DSC_ETOOLARGE; adds the
 * samples cut to max_len to *truncated. */
static int collate_var(dsc_loader_t *loader, dsc_step_t *st, dsc_batch_slot_t *slot, uint32_t f,
                       uint64_t *truncated) {
    const dsc_var_field_t *v = &loader->cfg.var[f];
    uint64_t rb = v->row_bytes;
    uint8_t *values = slot->host + loader->cfg.field_off[f];
    int64_t *aux = (int64_t *)(void *)(slot->host + v->aux_off);
    if (!v->pad) {
        /* As for fixed fields: runs of consecutive samples of one chunk in one copy, the
         * samples PREFETCH_SAMPLES ahead prefetched (shuffled data misses the caches). */
        uint64_t rows = 0;
        aux[0] = 0;
        for (uint32_t k = PREFETCH_SAMPLES; k < st->count && k < 2 * PREFETCH_SAMPLES; k++)
            __builtin_prefetch(
                st->src[k]->layout->fields[f].offsets + (uint64_t)st->in_chunk[k] * 8, 0, 3);
        for (uint32_t k = 0; k < st->count && k < PREFETCH_SAMPLES; k++)
            prefetch_var(st, f, rb, k);
        uint32_t k = 0;
        while (k < st->count) {
            const dsc_chunk_ent_t *ent = st->src[k];
            uint32_t i = st->in_chunk[k];
            uint64_t o0 = var_offset(ent, f, i);
            uint32_t run = 0;
            uint64_t end = o0;
            while (k + run < st->count && st->src[k + run] == ent &&
                   st->in_chunk[k + run] == i + run) {
                uint64_t next = var_offset(ent, f, i + run + 1);
                /* Rows cannot wrap: the layout check bounded them by the chunk's bytes. */
                if ((rows + next - o0) * rb > v->budget) {
                    if (run > 0)
                        break; /* copy the run so far; the sample fails on its own */
                    return var_too_large(st, f, k, next - end, rows * rb);
                }
                aux[k + run + 1] = (int64_t)(rows + next - o0);
                end = next;
                run++;
            }
            if (k + run + PREFETCH_SAMPLES - 1 < st->count)
                prefetch_var(st, f, rb, k + run + PREFETCH_SAMPLES - 1);
            /* The offsets of the samples after those: without them the prefetch above would
             * wait for their miss first. */
            uint32_t far = k + run + 2 * PREFETCH_SAMPLES - 1;
            if (far < st->count)
                __builtin_prefetch(st->src[far]->layout->fields[f].offsets +
                                       (uint64_t)st->in_chunk[far] * 8,
                                   0, 3);
            memcpy(values + rows * rb, ent->layout->fields[f].values + o0 * rb, (end - o0) * rb);
            rows += end - o0;
            k += run;
        }
        slot->var_rows[f] = rows;
        return 0;
    }
    uint64_t longest = 0;
    for (uint32_t k = 0; k < st->count; k++) {
        const dsc_chunk_ent_t *ent = st->src[k];
        uint32_t i = st->in_chunk[k];
        uint64_t n = var_offset(ent, f, i + 1) - var_offset(ent, f, i);
        if (v->max_len && n > v->max_len) {
            n = v->max_len;
            (*truncated)++;
        }
        if (n > v->lcap)
            return var_too_large(st, f, k, n, 0);
        aux[k] = (int64_t)n;
        longest = n > longest ? n : longest;
    }
    uint64_t stride = longest * rb;
    size_t elem = (size_t)dsc_dtype_size(loader->cfg.manifest->schema.fields[f].dtype);
    for (uint32_t k = 0; k < st->count; k++) {
        const dsc_chunk_ent_t *ent = st->src[k];
        uint64_t o0 = var_offset(ent, f, st->in_chunk[k]);
        uint8_t *dst = values + (uint64_t)k * stride;
        uint64_t have = (uint64_t)aux[k] * rb;
        memcpy(dst, ent->layout->fields[f].values + o0 * rb, have);
        if (have < stride) {
            int zero = 1;
            for (size_t b = 0; b < elem; b++)
                zero &= v->pad_bytes[b] == 0;
            if (zero) {
                memset(dst + have, 0, stride - have);
            } else {
                for (uint64_t b = have; b < stride; b += elem)
                    memcpy(dst + b, v->pad_bytes, elem);
            }
        }
    }
    slot->var_rows[f] = longest;
    return 0;
}

/* Decodes image field f of a step into its slot: each sample's encoded bytes (a u8[] field) into
 * a 3 x H x W image, cropped and flipped by (seed, epoch, sample index) (image.c). An image that
 * does not decode is a zero image counted in *errors with on_decode_error = fill, else an ERROR
 * line naming dataset, shard, chunk and sample and DSC_EDECODE. Unlocked, as collate. Returns 0,
 * DSC_EDECODE or DSC_ENOMEM. */
static int collate_image(dsc_loader_t *loader, dsc_worker_ctx_t *ctx, const dsc_step_t *st,
                         dsc_batch_slot_t *slot, uint32_t f, uint64_t *errors) {
    const dsc_var_field_t *v = &loader->cfg.var[f];
    if (ctx->image == NULL) {
        int rc = dsc__image_ctx_create(NULL, &ctx->image);
        if (rc < 0)
            return rc;
    }
    if (loader->cfg.nvjpeg && ctx->nvjpeg == NULL && !ctx->nvjpeg_failed) {
        char why[256];
        if (dsc__nvjpeg_open(&ctx->nvjpeg, why, sizeof why) < 0) {
            ctx->nvjpeg_failed = 1;
            DSC_LOG(&loader->cfg.log, DSC_LOG_WARN,
                    "loader: device=cuda: nvJPEG: a decode thread could not make its handle "
                    "(%s): it decodes images on the host",
                    why);
        }
    }
    size_t bytes = (size_t)v->spec.height * v->spec.width * 3;
    uint8_t *dst = slot->host + loader->cfg.field_off[f];
    for (uint32_t k = 0; k < st->count; k++) {
        const dsc_chunk_ent_t *ent = st->src[k];
        uint32_t i = st->in_chunk[k];
        uint64_t o0 = var_offset(ent, f, i), n = var_offset(ent, f, i + 1) - o0;
        uint8_t *out = dst + (size_t)k * bytes;
        /* nvJPEG (device="cuda"): the JPEG decodes on the GPU, the crop comes back for the
         * resize, and the batch goes to the device with the slot as every other field. */
        int rc =
            dsc__image_decode_with(ctx->image, ent->layout->fields[f].values + o0, n, &v->spec,
                                   loader->cfg.opt.seed, st->epoch, st->ids[k], out, bytes, NULL,
                                   ctx->nvjpeg ? dsc__nvjpeg_decode_region : NULL, ctx->nvjpeg);
        if (rc == 0)
            continue;
        if (rc == DSC_ENOMEM)
            return rc;
        if (v->image_fill) {
            memset(out, 0, bytes);
            (*errors)++;
            DSC_LOG(&loader->cfg.log, DSC_LOG_DEBUG,
                    "dataset %s: shard %u chunk %u sample %llu: field '%s': %s (%s): a zero image",
                    loader->cfg.dataset, ent->shard, ent->shard_chunk,
                    (unsigned long long)st->ids[k], loader->cfg.manifest->schema.fields[f].name,
                    dsc_strerror(rc), dsc__image_error(ctx->image));
            continue;
        }
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                "dataset %s: shard %u chunk %u sample %llu: field '%s' (%llu bytes): %s (%s); "
                "on_decode_error=\"fill\" hands out a zero image instead",
                loader->cfg.dataset, ent->shard, ent->shard_chunk, (unsigned long long)st->ids[k],
                loader->cfg.manifest->schema.fields[f].name, (unsigned long long)n,
                dsc_strerror(rc), dsc__image_error(ctx->image));
        return DSC_EDECODE;
    }
    return 0;
}

/* Copies a step's samples into its slot: for each field, sample k of the batch comes from
 * sample in_chunk[k] of its (field-major) chunk. Runs of consecutive samples of one chunk
 * (dataset order) go in one copy; otherwise one copy per sample, with the next samples' sources
 * prefetched, and fixed-size copies for the common small fields (labels, ids). Unlocked: the
 * step's chunks are READY and referenced, the slot is owned by the step. */
static int collate(dsc_loader_t *loader, dsc_worker_ctx_t *ctx, dsc_step_t *st,
                   dsc_batch_slot_t *slot, uint64_t *truncated, uint64_t *decode_errors,
                   double *image_seconds) {
    const dsc_schema_t *schema = &loader->cfg.manifest->schema;
    for (uint32_t f = 0; f < loader->cfg.field_count; f++) {
        if (loader->cfg.var[f].image) {
            double t0 = dsc_now_s();
            int rc = collate_image(loader, ctx, st, slot, f, decode_errors);
            *image_seconds += dsc_now_s() - t0;
            if (rc < 0)
                return rc;
            continue;
        }
        if (loader->cfg.var[f].is_var) {
            int rc = collate_var(loader, st, slot, f, truncated);
            if (rc < 0)
                return rc;
            continue;
        }
        uint64_t fsb = schema->fields[f].sample_bytes;
        uint8_t *dst = slot->host + loader->cfg.field_off[f];
        if (fsb == 8 || fsb == 4) {
            /* Labels and the like: inline loads and stores, no call per sample. */
            for (uint32_t k = 0; k < st->count; k++) {
                if (st->src[k]->placed)
                    continue;
                const uint8_t *src = sample_src(schema, st, f, fsb, k);
                if (fsb == 8)
                    memcpy(dst + (uint64_t)k * 8, src, 8);
                else
                    memcpy(dst + (uint64_t)k * 4, src, 4);
            }
            continue;
        }
        for (uint32_t k = 0; k < st->count && k < PREFETCH_SAMPLES; k++)
            if (!st->src[k]->placed)
                prefetch_bytes(sample_src(schema, st, f, fsb, k), fsb);
        uint32_t k = 0;
        while (k < st->count) {
            const dsc_chunk_ent_t *ent = st->src[k];
            uint32_t run = 1;
            while (k + run < st->count && st->src[k + run] == ent &&
                   st->in_chunk[k + run] == st->in_chunk[k] + run)
                run++;
            uint32_t ahead = k + run + PREFETCH_SAMPLES - 1;
            if (ahead < st->count && !st->src[ahead]->placed)
                prefetch_bytes(sample_src(schema, st, f, fsb, ahead), fsb);
            if (!ent->placed) /* else already in the slot */
                memcpy(dst + (uint64_t)k * fsb, sample_src(schema, st, f, fsb, k), run * fsb);
            k += run;
        }
    }
    return 0;
}

int dsc__step_collate(dsc_loader_t *loader, dsc_worker_ctx_t *ctx, dsc_step_t *st,
                      dsc_batch_slot_t *slot, uint64_t *truncated, uint64_t *decode_errors,
                      double *image_seconds) {
    return collate(loader, ctx, st, slot, truncated, decode_errors, image_seconds);
}

/* A slotted step whose chunks are all decoded, up to step `last` (UINT64_MAX: any), or NULL.
 * Under lock. */
static dsc_step_t *find_collatable_upto(dsc_loader_t *loader, uint64_t last) {
    uint64_t end = loader->sched.slot_seq;
    if (last != UINT64_MAX && last + 1 < end)
        end = last + 1;
    for (uint64_t seq = loader->cons.cons_seq; seq < end; seq++) {
        dsc_step_t *st = &loader->sched.steps[seq % loader->sched.step_cap];
        if (st->state != ST_PLANNED || st->eof)
            continue;
        while (st->scan < st->count && st->src[st->scan]->state == CH_READY)
            st->scan++;
        if (st->scan == st->count)
            return st;
    }
    return NULL;
}

static dsc_step_t *find_collatable(dsc_loader_t *loader) {
    return find_collatable_upto(loader, UINT64_MAX);
}

/* Drops the step's references; chunks nobody needs any more are freed. Under lock. Returns the
 * number of chunks freed. */
static uint32_t unref_step(dsc_loader_t *loader, dsc_step_t *st) {
    uint32_t freed = 0;
    for (uint32_t k = 0; k < st->count; k++) {
        dsc_chunk_ent_t *ent = st->src[k];
        if (--ent->refs == 0 && dsc__order_is_caller(loader) && ent->state == CH_READY &&
            !ent->placed && ent->raw != NULL) {
            /* The caller's later order is not known yet: kept decoded while cache_bytes allows
             * (the planner drops the oldest idle ones to make room), so that a later need,
             * e.g. of the sampler's next epoch, does not fetch it again. */
            dsc__chunk_idle_push(&loader->chunks, ent);
            freed++; /* room for the planner all the same */
        } else if (ent->refs == 0) {
            dsc__chunk_unlink(&loader->chunks, ent);
            dsc__chunk_free(&loader->cfg.pool, ent);
            freed++;
        }
        st->src[k] = NULL;
    }
    return freed;
}

static int worker_pass(dsc_loader_t *loader, dsc_worker_ctx_t *ctx, uint64_t last);

int dsc__worker_pass(dsc_loader_t *loader, dsc_worker_ctx_t *ctx) {
    return worker_pass(loader, ctx, UINT64_MAX);
}

int dsc__assist_pass(dsc_loader_t *loader, dsc_worker_ctx_t *ctx) {
    /* With an image field a batch's collation takes milliseconds: the consumer that collated
     * a later batch while a decode thread finished the one it waits for would wait for its own
     * work (at a 5 ms step, 19% stall with batch 2). It collates only the batch it waits for
     * (and decodes any chunk); other fields collate in microseconds, and any batch is fine. */
    int images = 0;
    for (uint32_t f = 0; f < loader->cfg.field_count; f++)
        images |= loader->cfg.var[f].image;
    return worker_pass(loader, ctx, images ? loader->cons.cons_seq : UINT64_MAX);
}

/* One unit of work: a collatable step up to `last` first, else a received chunk to decode.
 * Under lock (released while working). Returns 1 when it did something. */
static int worker_pass(dsc_loader_t *loader, dsc_worker_ctx_t *ctx, uint64_t last) {
    if (loader->error)
        return 0;
    /* A step that can be collated goes first: the chunk just decoded (often the last one
     * such a step waited for) is still in this core's cache, so its samples are copied out
     * of L2 instead of memory; and a finished batch is worth more to the trainer than one
     * more decoded chunk. */
    dsc_step_t *st = find_collatable_upto(loader, last);
    dsc_chunk_ent_t *ent = st == NULL ? dsc__queue_pop(&loader->work.decode_queue) : NULL;
    if (ent != NULL) {
        ent->state = CH_DECODING;
        dsc_batch_slot_t *direct = direct_slot(loader, ent);
        if (direct != NULL) {
            /* Counted as a collation: restart() waits for it before reusing the slots. */
            ent->placed = 1;
            loader->work.collating++;
        }
        pthread_mutex_unlock(&loader->lock);
        double t0 = dsc_now_s();
        int rc = 0;
        if (direct != NULL) {
            if (loader->cfg.cuda != NULL) {
                /* The slot's previous batch may still be on its way to the device. */
                if (!ctx->cuda_bound)
                    rc = dsc__cuda_bind_thread(loader->cfg.cuda);
                ctx->cuda_bound = rc == 0;
                if (rc == 0)
                    rc = dsc__cuda_slot_wait_copy(loader->cfg.cuda, &direct->ev);
            }
            if (rc == 0)
                rc = place_chunk(loader, ent, direct, &ctx->scratch, &ctx->scratch_cap);
        } else {
            rc = decode_chunk(loader, ent);
        }
        double t1 = dsc_now_s();
        pthread_mutex_lock(&loader->lock);
        if (direct != NULL) {
            if (rc == 0)
                loader->stats.st.placed_chunks++;
            if (--loader->work.collating == 0)
                pthread_cond_broadcast(&loader->cons_cv);
        }
        loader->stats.st.decode_seconds += t1 - t0;
        loader->fetch.inflight_used -= ent->charged;
        pthread_cond_broadcast(&loader->io_cv);
        if (ent->cancelled) {
            dsc__chunk_free(&loader->cfg.pool, ent);
            return 1;
        }
        if (rc < 0 && dsc__is_corruption(rc)) {
            /* Damaged at its source: nothing of it was handed out (a slot it was placed into
             * is rewritten before its step is ready); fetch it again from another replica,
             * else the fallback files. */
            uint32_t from = ent->peer;
            dsc__bufpool_put(&loader->cfg.pool, ent->stored, ent->stored_cap);
            if (ent->raw_cap)
                dsc__bufpool_put(&loader->cfg.pool, ent->raw, ent->raw_cap);
            ent->stored = ent->raw = NULL;
            ent->stored_cap = ent->raw_cap = 0;
            ent->placed = 0; /* collate copies it unless it is placed again */
            int s = dsc__chunk_refetch(loader, ent, rc);
            if (s >= 0) {
                DSC_LOG(&loader->cfg.log, DSC_LOG_WARN,
                        "%s shard %u chunk %u from %s: %s (%s); reading it from %s",
                        loader->cfg.dataset, ent->shard, ent->shard_chunk,
                        loader->net.peers[from].addr, dsc_strerror(rc), dsc_err_name(rc),
                        loader->net.peers[s].addr);
                return 1;
            }
            ent->state = CH_READY; /* owned by the table; never collated: loader failed */
            dsc__loader_fail(loader, rc);
            return 1;
        }
        if (rc < 0) {
            DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR, "%s shard %u chunk %u from %s: %s",
                    loader->cfg.dataset, ent->shard, ent->shard_chunk,
                    loader->net.peers[ent->peer].addr, dsc_strerror(rc));
            ent->state = CH_READY; /* owned by the table; never collated: loader failed */
            dsc__loader_fail(loader, rc);
            return 1;
        }
        ent->state = CH_READY;
        return 1; /* collation is checked on the next pass */
    }
    if (st == NULL)
        return 0;
    st->state = ST_COLLATING;
    loader->work.collating++;
    /* One chunk often completes several steps at once (small batches of large samples:
     * images): while another can be collated, wake one more worker for it, else those steps
     * wait for this thread and the decode threads work one at a time. */
    if (find_collatable(loader) != NULL)
        pthread_cond_signal(&loader->work_cv);
    dsc_batch_slot_t *slot = loader->cons.slots[st->slot];
    pthread_mutex_unlock(&loader->lock);
    int rc = 0;
    double t0 = dsc_now_s();
    if (loader->cfg.cuda != NULL) {
        if (!ctx->cuda_bound)
            rc = dsc__cuda_bind_thread(loader->cfg.cuda);
        ctx->cuda_bound = rc == 0;
        if (rc == 0)
            rc = dsc__cuda_slot_wait_copy(loader->cfg.cuda, &slot->ev);
    }
    uint64_t truncated = 0, decode_errors = 0;
    double image_seconds = 0;
    if (rc == 0)
        rc = collate(loader, ctx, st, slot, &truncated, &decode_errors, &image_seconds);
    double t1 = dsc_now_s();
    double h2d_seconds = 0;
    uint64_t h2d_bytes = 0;
    if (rc == 0 && loader->cfg.cuda != NULL)
        rc = dsc__cuda_slot_copy(loader->cfg.cuda, &slot->ev, slot->dev, slot->host,
                                 loader->cons.slot_bytes, &h2d_seconds, &h2d_bytes);
    pthread_mutex_lock(&loader->lock);
    loader->stats.st.collate_seconds += t1 - t0;
    slot->truncated = truncated; /* counted when handed out */
    slot->decode_errors = decode_errors;
    loader->stats.st.image_seconds += image_seconds;
    loader->stats.st.h2d_seconds += h2d_seconds;
    loader->stats.st.h2d_bytes += h2d_bytes;
    loader->work.collating--;
    uint32_t freed = unref_step(loader, st);
    if (rc == DSC_ETOOLARGE)
        st->error = rc; /* next() fails there, saying which sample and option */
    else if (rc == DSC_EDECODE)
        dsc__loader_fail_logged(loader, rc); /* collate_image said which image */
    else if (rc < 0)
        dsc__loader_fail(loader, rc);
    st->state = ST_READY;
    /* Wake only whom it concerns (each wake-up is a futex call and a context switch on a
     * trainer's cores): the consumer when this is the step it waits for (or when restart()
     * waits for collations to end), the scheduler when freed chunks made budget room. */
    if (st->seq == loader->cons.cons_seq || loader->work.collating == 0)
        pthread_cond_broadcast(&loader->cons_cv);
    if (freed > 0)
        pthread_cond_broadcast(&loader->sched_cv);
    return 1;
}

void dsc__decode_push(dsc_loader_t *loader, dsc_chunk_ent_t *ent) {
    ent->state = CH_RECEIVED;
    dsc__queue_push(&loader->work.decode_queue, ent);
    dsc__work_signal(loader);
}

void dsc__work_signal(dsc_loader_t *loader) {
    pthread_cond_signal(&loader->work_cv); /* one worker per unit of work, not all of them */
    if (loader->work.consumer_waiting)
        pthread_cond_broadcast(&loader->cons_cv);
}

void *dsc__worker_main(void *arg) {
    dsc_loader_t *loader = arg;
    dsc__loader_thread_start();
    dsc_worker_ctx_t ctx = {0};
    pthread_mutex_lock(&loader->lock);
    while (!loader->stop)
        if (!dsc__worker_pass(loader, &ctx))
            pthread_cond_wait(&loader->work_cv, &loader->lock);
    pthread_mutex_unlock(&loader->lock);
    free(ctx.scratch);
    dsc__image_ctx_destroy(ctx.image);
    dsc__nvjpeg_close(ctx.nvjpeg);
    return NULL;
}

void dsc__decode_probe_gpu(dsc_loader_t *loader) {
    int images = 0;
    for (uint32_t f = 0; f < loader->cfg.field_count; f++)
        images |= loader->cfg.var[f].image;
    if (!images)
        return;
    char why[256];
    dsc_nvjpeg_t *nv = NULL;
    if (dsc__nvjpeg_open(&nv, why, sizeof why) < 0) {
        DSC_LOG(&loader->cfg.log, DSC_LOG_WARN,
                "loader: device=cuda: nvJPEG is not usable (%s): images are decoded on the host "
                "and copied to the device with the batch",
                why);
        return;
    }
    dsc__nvjpeg_close(nv);
    loader->cfg.nvjpeg = 1;
    DSC_LOG(&loader->cfg.log, DSC_LOG_INFO, "loader: device=cuda: JPEG images decode with nvJPEG");
}
