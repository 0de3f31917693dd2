/* Loader stream state: restarting the stream at (epoch, position) for set_epoch and state_load,
 * and the saved-state encoding. Calls down only: scheduler.c, batch.c, chunks.c. */
#include "state.h"
#include "batch.h"
#include "scheduler.h"
#include "util.h"

#include <string.h>

int dsc__stream_restart(dsc_loader_t *loader, uint64_t epoch, uint64_t pos) {
    while (loader->work.collating > 0)
        pthread_cond_wait(&loader->cons_cv, &loader->lock);
    dsc__batch_release_current(loader);
    /* Chunk entries: free those nobody holds; those a thread holds are freed by that thread. */
    dsc__chunk_table_reset(&loader->chunks, &loader->cfg.pool, &loader->fetch.inflight_used);
    for (uint32_t p = 0; p <= DSC__PEER_FALLBACK; p++)
        if (p < loader->net.peer_count || p == DSC__PEER_FALLBACK)
            memset(&loader->net.peers[p].queue, 0, sizeof(dsc_chunk_queue_t));
    memset(&loader->work.decode_queue, 0, sizeof loader->work.decode_queue);
    for (uint32_t i = 0; i < loader->cons.slot_count; i++)
        loader->cons.slots[i].owner = SLOT_FREE;
    loader->cons.cons_seq = loader->cons.retired_seq = loader->sched.plan_seq;
    int rc = dsc__sched_restart(loader, epoch, pos);
    loader->cons.cons_epoch = epoch;
    loader->cons.cons_pos = pos;
    loader->stats.st.epoch = epoch;
    pthread_cond_broadcast(&loader->io_cv);
    return rc;
}

DSC_EXTERN int dsc_loader_set_epoch(dsc_loader_t *loader, uint64_t epoch) {
    if (loader == NULL)
        return DSC_EINVAL;
    pthread_mutex_lock(&loader->lock);
    int rc = loader->error;
    /* Already at the start of that epoch (e.g. just after its predecessor's DSC_EOF): keep what
     * was prefetched. */
    if (rc == 0 && !(loader->cons.cons_epoch == epoch && loader->cons.cons_pos == 0 &&
                     loader->cons.current == NULL))
        rc = dsc__stream_restart(loader, epoch, 0);
    pthread_mutex_unlock(&loader->lock);
    return rc;
}

/* State encoding, little-endian, 56 bytes: "DSCS" magic, u32 version 2, u64 epoch, u64 position,
 * u64 seed, u64 samples, u32 shuffle window (0 with shuffle off), u8 shuffle (0 or 1), 3 zero
 * bytes, u64 checksum of the preceding 48 bytes. Everything the order depends on besides the
 * dataset layout is in it, so a state never resumes into another order. Version 1 (48 bytes,
 * without the shuffle settings) is refused. */
#define STATE_VERSION 2
#define STATE_BYTES 56

static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The window the order uses: 0 when unshuffled (the window then plays no part). */
static uint32_t order_window(const dsc_loader_t *loader) {
    return loader->cfg.opt.shuffle ? loader->cfg.opt.shuffle_window : 0;
}

DSC_EXTERN int dsc_loader_state_save(const dsc_loader_t *loader, void *buf, size_t cap) {
    if (loader == NULL || (buf == NULL && cap > 0))
        return DSC_EINVAL;
    if (cap < STATE_BYTES)
        return STATE_BYTES;
    dsc_loader_t *l = (dsc_loader_t *)loader;
    pthread_mutex_lock(&l->lock);
    uint64_t epoch = l->cons.cons_epoch, pos = l->cons.cons_pos;
    pthread_mutex_unlock(&l->lock);
    uint8_t *p = buf;
    memcpy(p, "DSCS", 4);
    p[4] = STATE_VERSION, p[5] = p[6] = p[7] = 0;
    put_u64(p + 8, epoch);
    put_u64(p + 16, pos);
    put_u64(p + 24, loader->cfg.opt.seed);
    put_u64(p + 32, loader->cfg.samples);
    uint32_t window = order_window(loader);
    for (int i = 0; i < 4; i++)
        p[40 + i] = (uint8_t)(window >> (8 * i));
    p[44] = loader->cfg.opt.shuffle ? 1 : 0;
    p[45] = p[46] = p[47] = 0;
    put_u64(p + 48, dsc_checksum(p, 48));
    return STATE_BYTES;
}

DSC_EXTERN int dsc_loader_state_load(dsc_loader_t *loader, const void *buf, size_t len) {
    if (loader == NULL || buf == NULL)
        return DSC_EINVAL;
    const uint8_t *p = buf;
    if (len >= 8 && memcmp(p, "DSCS", 4) == 0 && get_u32(p + 4) != STATE_VERSION) {
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                "loader state: version %u, this library reads version %u (older states do not "
                "record the shuffle settings: restart the epoch with set_epoch)",
                get_u32(p + 4), STATE_VERSION);
        return DSC_EBADSTATE;
    }
    if (len != STATE_BYTES || memcmp(p, "DSCS", 4) != 0 || get_u64(p + 48) != dsc_checksum(p, 48) ||
        p[44] > 1 || p[45] || p[46] || p[47]) {
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                "loader state: not a valid saved state (%zu bytes; %u expected, checksummed)", len,
                STATE_BYTES);
        return DSC_EBADSTATE;
    }
    uint64_t epoch = get_u64(p + 8), pos = get_u64(p + 16);
    uint64_t seed = get_u64(p + 24), samples = get_u64(p + 32);
    uint32_t window = get_u32(p + 40);
    int shuffle = p[44];
    const char *field = NULL;
    uint64_t saved = 0, here = 0;
    if (seed != loader->cfg.opt.seed)
        field = "seed", saved = seed, here = loader->cfg.opt.seed;
    else if (samples != loader->cfg.samples)
        field = "dataset samples", saved = samples, here = loader->cfg.samples;
    else if (shuffle != (loader->cfg.opt.shuffle ? 1 : 0))
        field = "shuffle", saved = (uint64_t)shuffle, here = loader->cfg.opt.shuffle ? 1 : 0;
    else if (window != order_window(loader))
        field = "shuffle_window", saved = window, here = order_window(loader);
    else if (pos > loader->cfg.samples)
        field = "position (beyond the dataset)", saved = pos, here = loader->cfg.samples;
    if (field != NULL) {
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                "loader state: saved with %s %llu, this loader has %llu (the sample order would "
                "differ)",
                field, (unsigned long long)saved, (unsigned long long)here);
        return DSC_EBADSTATE;
    }
    pthread_mutex_lock(&loader->lock);
    int rc = loader->error;
    if (rc == 0)
        rc = dsc__stream_restart(loader, epoch, pos);
    pthread_mutex_unlock(&loader->lock);
    return rc;
}
