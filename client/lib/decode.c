/* Loader workers: verify + decompress received chunks (dsc_chunk_decode), and collate planned
 * steps into their batch slots once every chunk they need is decoded (then H2D with CUDA). */
#include "loader_int.h"
#include "util.h"

#include <string.h>

/* Verifies and decodes one chunk. Raw chunks are used where they were received. Unlocked. */
static int decode_chunk(dsc_loader_t *loader, dsc_chunk_ent_t *ent) {
    if (ent->entry.codec == DSC_CODEC_RAW) {
        int rc = dsc_chunk_verify(&ent->entry, ent->stored);
        if (rc == 0 && ent->entry.raw_checksum != ent->entry.stored_checksum)
            rc = DSC_EDATASUM;
        ent->raw = ent->stored;
        ent->raw_cap = 0;
        return rc;
    }
    size_t cap = 0;
    uint8_t *raw = dsc__bufpool_get(&loader->pool, ent->raw_len, &cap);
    if (raw == NULL)
        return DSC_ENOMEM;
    int rc = dsc_chunk_decode(&ent->entry, ent->stored, raw, cap);
    dsc__bufpool_put(&loader->pool, ent->stored, ent->stored_cap);
    ent->stored = NULL;
    ent->stored_cap = 0;
    ent->raw = raw;
    ent->raw_cap = cap;
    if (rc >= 0 && (uint64_t)rc != ent->raw_len)
        rc = DSC_EDECOMPRESS;
    return rc < 0 ? rc : 0;
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
 * the first lines of a sample the hardware prefetcher follows the stream. */
#define PREFETCH_SAMPLES 3
#define PREFETCH_BYTES 2048u

static inline void prefetch_bytes(const uint8_t *p, uint64_t len) {
    if (len > PREFETCH_BYTES)
        len = PREFETCH_BYTES;
    for (uint64_t off = 0; off < len; off += 64)
        __builtin_prefetch(p + off, 0, 0);
}

/* Copies a step's samples into its slot: for each field, sample k of the batch comes from
 * sample in_chunk[k] of its (field-major) chunk. Runs of consecutive samples of one chunk
 * (dataset order) go in one copy; otherwise one copy per sample, with the next samples' sources
 * prefetched, and fixed-size copies for the common small fields (labels, ids). Unlocked: the
 * step's chunks are READY and referenced, the slot is owned by the step. */
static void collate(dsc_loader_t *loader, const dsc_step_t *st, dsc_slot_t *slot) {
    const dsc_schema_t *schema = &loader->manifest->schema;
    for (uint32_t f = 0; f < loader->field_count; f++) {
        uint64_t fsb = schema->fields[f].sample_bytes;
        uint8_t *dst = slot->host + loader->field_off[f];
        if (fsb == 8 || fsb == 4) {
            /* Labels and the like: inline loads and stores, no call per sample. */
            for (uint32_t k = 0; k < st->count; k++) {
                const uint8_t *src = sample_src(schema, st, f, fsb, k);
                if (fsb == 8)
                    memcpy(dst + (uint64_t)k * 8, src, 8);
                else
                    memcpy(dst + (uint64_t)k * 4, src, 4);
            }
            continue;
        }
        for (uint32_t k = 0; k < st->count && k < PREFETCH_SAMPLES; k++)
            prefetch_bytes(sample_src(schema, st, f, fsb, k), fsb);
        uint32_t k = 0;
        while (k < st->count) {
            const dsc_chunk_ent_t *ent = st->src[k];
            uint32_t run = 1;
            while (k + run < st->count && st->src[k + run] == ent &&
                   st->in_chunk[k + run] == st->in_chunk[k] + run)
                run++;
            if (k + run + PREFETCH_SAMPLES - 1 < st->count)
                prefetch_bytes(sample_src(schema, st, f, fsb, k + run + PREFETCH_SAMPLES - 1), fsb);
            memcpy(dst + (uint64_t)k * fsb, sample_src(schema, st, f, fsb, k), run * fsb);
            k += run;
        }
    }
}

/* A slotted step whose chunks are all decoded, or NULL. Under lock. */
static dsc_step_t *find_collatable(dsc_loader_t *loader) {
    for (uint64_t seq = loader->cons_seq; seq < loader->slot_seq; seq++) {
        dsc_step_t *st = &loader->steps[seq % loader->step_cap];
        if (st->state != ST_PLANNED || st->eof)
            continue;
        while (st->scan < st->count && st->src[st->scan]->state == CH_READY)
            st->scan++;
        if (st->scan == st->count)
            return st;
    }
    return NULL;
}

/* Drops the step's references; chunks nobody needs any more are freed. Under lock. Returns the
 * number of chunks freed. */
static uint32_t unref_step(dsc_loader_t *loader, dsc_step_t *st) {
    uint32_t freed = 0;
    for (uint32_t k = 0; k < st->count; k++) {
        dsc_chunk_ent_t *ent = st->src[k];
        if (--ent->refs == 0) {
            dsc__chunk_unlink(loader, ent);
            dsc__chunk_free(loader, ent);
            freed++;
        }
        st->src[k] = NULL;
    }
    return freed;
}

void *dsc__worker_main(void *arg) {
    dsc_loader_t *loader = arg;
    int cuda_bound = 0;
    pthread_mutex_lock(&loader->lock);
    while (!loader->stop) {
        if (loader->error) {
            pthread_cond_wait(&loader->work_cv, &loader->lock);
            continue;
        }
        dsc_chunk_ent_t *ent = dsc__queue_pop(&loader->decode_queue);
        if (ent != NULL) {
            ent->state = CH_DECODING;
            pthread_mutex_unlock(&loader->lock);
            double t0 = dsc_now_s();
            int rc = decode_chunk(loader, ent);
            double t1 = dsc_now_s();
            pthread_mutex_lock(&loader->lock);
            loader->st.decode_seconds += t1 - t0;
            loader->inflight_used -= ent->raw_len;
            pthread_cond_broadcast(&loader->io_cv);
            if (ent->cancelled) {
                dsc__chunk_free(loader, ent);
                continue;
            }
            if (rc < 0) {
                if (rc == DSC_ECHUNKSUM || rc == DSC_EDATASUM)
                    loader->st.checksum_failures++;
                DSC_LOG(&loader->log, DSC_LOG_ERROR, "%s shard %u chunk %u from %s: %s",
                        loader->dataset, ent->shard, ent->shard_chunk,
                        loader->servers[ent->server].addr, dsc_strerror(rc));
                ent->state = CH_READY; /* owned by the table; never collated: loader failed */
                dsc__loader_fail(loader, rc);
                continue;
            }
            ent->state = CH_READY;
            continue; /* collation is checked on the next pass */
        }
        dsc_step_t *st = find_collatable(loader);
        if (st == NULL) {
            pthread_cond_wait(&loader->work_cv, &loader->lock);
            continue;
        }
        st->state = ST_COLLATING;
        loader->collating++;
        dsc_slot_t *slot = &loader->slots[st->seq % loader->slot_count];
        pthread_mutex_unlock(&loader->lock);
        int rc = 0;
        double t0 = dsc_now_s();
        if (loader->cuda != NULL) {
            if (!cuda_bound)
                rc = dsc__cuda_bind_thread(loader->cuda);
            cuda_bound = rc == 0;
            if (rc == 0)
                rc = dsc__cuda_slot_wait_copy(loader->cuda, &slot->ev);
        }
        if (rc == 0)
            collate(loader, st, slot);
        double t1 = dsc_now_s();
        if (rc == 0 && loader->cuda != NULL)
            rc = dsc__cuda_slot_copy(loader->cuda, &slot->ev, slot->dev, slot->host,
                                     loader->slot_bytes);
        pthread_mutex_lock(&loader->lock);
        loader->st.collate_seconds += t1 - t0;
        loader->collating--;
        uint32_t freed = unref_step(loader, st);
        if (rc < 0)
            dsc__loader_fail(loader, rc);
        st->state = ST_READY;
        /* Wake only whom it concerns (each wake-up is a futex call and a context switch on a
         * trainer's cores): the consumer when this is the step it waits for (or when restart()
         * waits for collations to end), the scheduler when freed chunks made budget room. */
        if (st->seq == loader->cons_seq || loader->collating == 0)
            pthread_cond_broadcast(&loader->cons_cv);
        if (freed > 0)
            pthread_cond_broadcast(&loader->sched_cv);
    }
    pthread_mutex_unlock(&loader->lock);
    return NULL;
}
