/* Loader chunk table and queues: hashed lookup by global chunk id, FIFO queues, freeing. Under the
 * loader's lock; calls only the buffer pool. */
#include "chunks.h"

#include <stdlib.h>
#include <string.h>

void dsc__queue_push(dsc_chunk_queue_t *q, dsc_chunk_ent_t *ent) {
    ent->qnext = NULL;
    if (q->tail)
        q->tail->qnext = ent;
    else
        q->head = ent;
    q->tail = ent;
    q->count++;
    q->bytes += ent->raw_len;
}

void dsc__queue_push_front(dsc_chunk_queue_t *q, dsc_chunk_ent_t *ent) {
    ent->qnext = q->head;
    q->head = ent;
    if (q->tail == NULL)
        q->tail = ent;
    q->count++;
    q->bytes += ent->raw_len;
}

dsc_chunk_ent_t *dsc__queue_pop(dsc_chunk_queue_t *q) {
    dsc_chunk_ent_t *ent = q->head;
    if (ent == NULL)
        return NULL;
    q->head = ent->qnext;
    if (q->head == NULL)
        q->tail = NULL;
    ent->qnext = NULL;
    q->count--;
    q->bytes -= ent->raw_len;
    return ent;
}

static uint64_t hash_gid(uint64_t gid) {
    gid ^= gid >> 33;
    gid *= 0xFF51AFD7ED558CCDULL;
    gid ^= gid >> 33;
    return gid;
}

int dsc__chunk_table_init(dsc_chunk_table_t *t, uint64_t chunks) {
    uint64_t buckets = 1024;
    while (buckets < chunks && buckets < (1u << 20))
        buckets <<= 1;
    t->buckets = calloc(buckets, sizeof(dsc_chunk_ent_t *));
    if (t->buckets == NULL)
        return DSC_ENOMEM;
    t->bucket_mask = buckets - 1;
    t->held_bytes = 0;
    return 0;
}

dsc_chunk_ent_t *dsc__chunk_find(const dsc_chunk_table_t *t, uint64_t gid) {
    dsc_chunk_ent_t *e = t->buckets[hash_gid(gid) & t->bucket_mask];
    while (e != NULL && (e->gid != gid || e->placed))
        e = e->hnext;
    return e;
}

void dsc__chunk_insert(dsc_chunk_table_t *t, dsc_chunk_ent_t *ent) {
    uint64_t b = hash_gid(ent->gid) & t->bucket_mask;
    ent->hnext = t->buckets[b];
    t->buckets[b] = ent;
    t->held_bytes += ent->raw_len;
}

void dsc__chunk_idle_push(dsc_chunk_table_t *t, dsc_chunk_ent_t *ent) {
    ent->idle = 1;
    ent->idle_next = NULL;
    ent->idle_prev = t->idle_tail;
    if (ent->idle_prev != NULL)
        ent->idle_prev->idle_next = ent;
    else
        t->idle_head = ent;
    t->idle_tail = ent;
    t->idle_bytes += ent->raw_len;
}

void dsc__chunk_idle_remove(dsc_chunk_table_t *t, dsc_chunk_ent_t *ent) {
    if (!ent->idle)
        return;
    if (ent->idle_prev != NULL)
        ent->idle_prev->idle_next = ent->idle_next;
    else
        t->idle_head = ent->idle_next;
    if (ent->idle_next != NULL)
        ent->idle_next->idle_prev = ent->idle_prev;
    else
        t->idle_tail = ent->idle_prev;
    ent->idle_prev = ent->idle_next = NULL;
    ent->idle = 0;
    t->idle_bytes -= ent->raw_len;
}

void dsc__chunk_idle_trim(dsc_chunk_table_t *t, dsc_bufpool_t *pool, uint64_t limit) {
    while (t->idle_head != NULL && t->held_bytes > limit) {
        dsc_chunk_ent_t *ent = t->idle_head;
        dsc__chunk_unlink(t, ent);
        dsc__chunk_free(pool, ent);
    }
}

void dsc__chunk_unlink(dsc_chunk_table_t *t, dsc_chunk_ent_t *ent) {
    dsc__chunk_idle_remove(t, ent);
    dsc_chunk_ent_t **pp = &t->buckets[hash_gid(ent->gid) & t->bucket_mask];
    while (*pp != NULL && *pp != ent)
        pp = &(*pp)->hnext;
    if (*pp == ent) {
        *pp = ent->hnext;
        t->held_bytes -= ent->raw_len;
    }
    ent->hnext = NULL;
}

uint64_t dsc__chunk_raw_estimate(const dsc_manifest_t *m, uint64_t samples) {
    const dsc_schema_t *schema = &m->schema;
    uint64_t least = dsc_schema_chunk_min(schema, samples);
    if (schema->var_count == 0)
        return least;
    double mean = 0;
    for (uint32_t f = 0; f < schema->field_count; f++)
        if (schema->fields[f].variable)
            mean += m->field_stats[f].bytes_mean;
    double est = (double)least + mean * (double)samples;
    return est < (double)DSC_CHUNK_MAX_RAW ? (uint64_t)est : DSC_CHUNK_MAX_RAW;
}

uint64_t dsc__chunk_raw_bound(const dsc_manifest_t *m, uint32_t shard) {
    const dsc_schema_t *schema = &m->schema;
    uint64_t samples = m->shards[shard].chunk_samples;
    uint64_t bound = dsc_schema_chunk_min(schema, samples);
    for (uint32_t f = 0; f < schema->field_count && bound < DSC_CHUNK_MAX_RAW; f++) {
        uint64_t bytes_max = m->field_stats[f].bytes_max;
        if (!schema->fields[f].variable)
            continue;
        if (bytes_max > DSC_CHUNK_MAX_RAW)
            return DSC_CHUNK_MAX_RAW;
        bound += samples * bytes_max; /* < 2^32 * 2^28: no wrap */
    }
    return bound < DSC_CHUNK_MAX_RAW ? bound : DSC_CHUNK_MAX_RAW;
}

void dsc__chunk_resize(dsc_chunk_table_t *t, dsc_chunk_ent_t *ent, uint64_t raw_len) {
    /* Every entry that is not cancelled is in the table (the caller's), so held_bytes holds
     * its raw_len. */
    t->held_bytes = t->held_bytes - ent->raw_len + raw_len;
    ent->raw_len = raw_len;
}

void dsc__chunk_free(dsc_bufpool_t *pool, dsc_chunk_ent_t *ent) {
    if (ent == NULL)
        return;
    dsc__bufpool_put(pool, ent->stored, ent->stored_cap);
    if (ent->raw_cap)
        dsc__bufpool_put(pool, ent->raw, ent->raw_cap);
    free(ent->layout);
    free(ent->sel);
    free(ent);
}

void dsc__chunk_make_whole(dsc_chunk_table_t *t, const dsc_manifest_t *m, dsc_chunk_ent_t *ent) {
    if (ent->sel == NULL)
        return;
    free(ent->sel);
    ent->sel = NULL;
    ent->sel_spans = 0;
    ent->samples = ent->whole_samples;
    if (ent->raw_min)
        ent->raw_min = dsc_schema_chunk_min(&m->schema, ent->samples);
    dsc__chunk_resize(t, ent, dsc__chunk_raw_estimate(m, ent->samples));
}

void dsc__chunk_table_reset(dsc_chunk_table_t *t, dsc_bufpool_t *pool, uint64_t *inflight_used) {
    for (uint64_t b = 0; b <= t->bucket_mask; b++) {
        dsc_chunk_ent_t *e = t->buckets[b];
        while (e != NULL) {
            dsc_chunk_ent_t *next = e->hnext;
            e->hnext = NULL;
            if (e->state == CH_INFLIGHT || e->state == CH_DECODING) {
                e->cancelled = 1;
            } else {
                if (e->state == CH_RECEIVED)
                    *inflight_used -= e->charged;
                dsc__chunk_free(pool, e);
            }
            e = next;
        }
        t->buckets[b] = NULL;
    }
    t->held_bytes = 0;
    t->idle_head = t->idle_tail = NULL;
    t->idle_bytes = 0;
}

void dsc__chunk_table_free(dsc_chunk_table_t *t, dsc_bufpool_t *pool) {
    if (t->buckets == NULL)
        return;
    for (uint64_t b = 0; b <= t->bucket_mask; b++) {
        dsc_chunk_ent_t *e = t->buckets[b];
        while (e != NULL) {
            dsc_chunk_ent_t *next = e->hnext;
            dsc__chunk_free(pool, e);
            e = next;
        }
    }
    free(t->buckets);
    t->buckets = NULL;
}
