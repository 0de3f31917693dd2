/* Loader stream state: restarting the stream at (epoch, position) for set_epoch and state_load,
 * and the saved-state encoding. Calls down only: scheduler.c, batch.c, chunks.c. */
#include "state.h"
#include "batch.h"
#include "mixture.h"
#include "scheduler.h"
#include "util.h"

#include <string.h>

int dsc__stream_restart(dsc_loader_t *loader, uint64_t epoch, const dsc_plan_seg_t *hist,
                        uint32_t nhist, uint64_t pos) {
    while (loader->work.collating > 0)
        pthread_cond_wait(&loader->cons_cv, &loader->lock);
    dsc__batch_release_current(loader);
    loader->cons.cons_samples = loader->cons.cons_hash = 0; /* order caller: state_load sets */
    /* Chunk entries: free those nobody holds; those a thread holds are freed by that thread. */
    dsc__chunk_table_reset(&loader->chunks, &loader->cfg.pool, &loader->fetch.inflight_used);
    for (uint32_t p = 0; p <= DSC__PEER_FALLBACK; p++)
        if (p < loader->net.peer_count || p == DSC__PEER_FALLBACK)
            memset(&loader->net.peers[p].queue, 0, sizeof(dsc_chunk_queue_t));
    memset(&loader->work.decode_queue, 0, sizeof loader->work.decode_queue);
    for (uint32_t i = 0; i < loader->cons.slot_count; i++)
        if (loader->cons.slots[i]->refs == 0) /* batches the caller holds keep theirs */
            loader->cons.slots[i]->owner = SLOT_FREE;
    loader->cons.cons_seq = loader->cons.retired_seq = loader->sched.plan_seq;
    int rc = dsc__sched_restart(loader, epoch, hist, nhist, pos);
    loader->cons.cons_epoch = epoch;
    loader->cons.cons_pos = pos;
    loader->cons.cons_nhist = nhist;
    loader->stats.st.epoch = epoch;
    loader->stats.st.epoch_wire_bytes = 0;
    dsc__epoch_wire_reset(loader);
    pthread_cond_broadcast(&loader->io_cv);
    return rc;
}

DSC_EXTERN int dsc_loader_set_epoch(dsc_loader_t *loader, uint64_t epoch) {
    if (loader == NULL)
        return DSC_EINVAL;
    if (loader->mix != NULL)
        return dsc__mix_loader_set_epoch(loader, epoch);
    pthread_mutex_lock(&loader->lock);
    int rc = loader->error;
    /* Already at the start of that epoch (e.g. just after its predecessor's DSC_EOF): keep what
     * was prefetched. */
    /* Order caller: what was pushed is dropped, so that the caller pushes the epoch again. */
    int pushed =
        dsc__order_is_caller(loader) && loader->sched.caller.push_seq > loader->cons.cons_seq;
    if (rc == 0 && !(loader->cons.cons_epoch == epoch && loader->cons.cons_pos == 0 &&
                     loader->cons.cons_nhist == 0 && loader->cons.current == NULL && !pushed))
        rc = dsc__stream_restart(loader, epoch, NULL, 0, 0);
    pthread_mutex_unlock(&loader->lock);
    return rc;
}

/* State encoding, little-endian.
 * Version 2 (order global), 56 bytes: "DSCS" magic, u32 version 2, u64 epoch, u64 position,
 * u64 seed, u64 samples, u32 shuffle window (0 with shuffle off), u8 shuffle (0 or 1), 3 zero
 * bytes, u64 checksum of the preceding 48 bytes.
 * Version 3 (order local), 40 + 16 * n + 8 bytes: "DSCS", u32 version 3, u64 epoch, u64 seed,
 * u64 samples, u32 shuffle window (0 with shuffle off), u8 shuffle, u8 complete (the epoch's last
 * step was handed out), u8 n (1 .. DSC_PLAN_MAX_SEGS), u8 0, then n segments (u32 world size,
 * u32 batch size, u64 steps done; the last one is the segment in progress), then a u64 checksum
 * of the preceding bytes.
 * Version 4 (order caller), 64 bytes: "DSCS", u32 version 4, u64 epoch, u64 batches handed out
 * in it, u64 samples handed out in it, u64 dsc__caller_hash of their indices, u64 seed, u64
 * dataset samples, u64 checksum of the preceding 56 bytes.
 * Everything the order depends on besides the dataset layout is in it, so a state never resumes
 * into another order. Version 1 (48 bytes, without the shuffle settings) is refused. */
#define STATE_VERSION 2
#define STATE_BYTES 56
#define STATE_LOCAL_VERSION 3
#define STATE_LOCAL_HEAD 40
#define STATE_CALLER_VERSION 4
#define STATE_CALLER_BYTES 64

static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
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

/* The order a loader uses, in the words of the log lines. */
static const char *order_name(const dsc_loader_t *loader) {
    return dsc__order_is_caller(loader)  ? "the caller's order"
           : dsc__order_is_local(loader) ? "order local"
                                         : "order global";
}

static int state_save_caller(dsc_loader_t *l, uint8_t *p, size_t cap) {
    if (cap < STATE_CALLER_BYTES)
        return STATE_CALLER_BYTES;
    pthread_mutex_lock(&l->lock);
    uint64_t epoch = l->cons.cons_epoch, batches = l->cons.cons_pos;
    uint64_t samples = l->cons.cons_samples, hash = l->cons.cons_hash;
    pthread_mutex_unlock(&l->lock);
    memcpy(p, "DSCS", 4);
    put_u32(p + 4, STATE_CALLER_VERSION);
    put_u64(p + 8, epoch);
    put_u64(p + 16, batches);
    put_u64(p + 24, samples);
    put_u64(p + 32, hash);
    put_u64(p + 40, l->cfg.opt.seed);
    put_u64(p + 48, l->cfg.samples);
    put_u64(p + 56, dsc_checksum(p, 56));
    return STATE_CALLER_BYTES;
}

static int state_save_local(dsc_loader_t *l, uint8_t *p, size_t cap) {
    pthread_mutex_lock(&l->lock);
    uint64_t epoch = l->cons.cons_epoch, pos = l->cons.cons_pos;
    uint32_t n = l->cons.cons_nhist + 1;
    dsc_plan_seg_t segs[DSC_PLAN_MAX_SEGS];
    memcpy(segs, l->sched.hist, l->cons.cons_nhist * sizeof segs[0]);
    pthread_mutex_unlock(&l->lock);
    size_t bytes = STATE_LOCAL_HEAD + 16 * (size_t)n + 8;
    if (cap < bytes)
        return (int)bytes;
    const dsc_loader_options_t *o = &l->cfg.opt;
    segs[n - 1] = (dsc_plan_seg_t){o->world_size, o->batch_size, pos == DSC__POS_DONE ? 0 : pos};
    memcpy(p, "DSCS", 4);
    put_u32(p + 4, STATE_LOCAL_VERSION);
    put_u64(p + 8, epoch);
    put_u64(p + 16, o->seed);
    put_u64(p + 24, l->cfg.samples);
    put_u32(p + 32, order_window(l));
    p[36] = o->shuffle ? 1 : 0;
    p[37] = pos == DSC__POS_DONE;
    p[38] = (uint8_t)n;
    p[39] = 0;
    for (uint32_t i = 0; i < n; i++) {
        put_u32(p + STATE_LOCAL_HEAD + 16 * i, segs[i].world_size);
        put_u32(p + STATE_LOCAL_HEAD + 16 * i + 4, segs[i].batch_size);
        put_u64(p + STATE_LOCAL_HEAD + 16 * i + 8, segs[i].steps);
    }
    put_u64(p + bytes - 8, dsc_checksum(p, bytes - 8));
    return (int)bytes;
}

DSC_EXTERN int dsc_loader_state_save(const dsc_loader_t *loader, void *buf, size_t cap) {
    if (loader == NULL || (buf == NULL && cap > 0))
        return DSC_EINVAL;
    dsc_loader_t *l = (dsc_loader_t *)loader;
    if (l->mix != NULL)
        return dsc_mixture_state_save(l->mix, buf, cap);
    if (dsc__order_is_caller(l))
        return state_save_caller(l, buf, cap);
    if (dsc__order_is_local(l))
        return state_save_local(l, buf, cap);
    if (cap < STATE_BYTES)
        return STATE_BYTES;
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
    put_u32(p + 40, order_window(loader));
    p[44] = loader->cfg.opt.shuffle ? 1 : 0;
    p[45] = p[46] = p[47] = 0;
    put_u64(p + 48, dsc_checksum(p, 48));
    return STATE_BYTES;
}

/* Refuses a state whose order settings differ from the loader's (the log names the field). */
static int state_settings(dsc_loader_t *loader, uint64_t seed, uint64_t samples, uint32_t window,
                          int shuffle) {
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
    if (field == NULL)
        return 0;
    DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
            "loader state: saved with %s %llu, this loader has %llu (the sample order would "
            "differ)",
            field, (unsigned long long)saved, (unsigned long long)here);
    return DSC_EBADSTATE;
}

/* Version 3 (order local): the same (world size, batch size) as the last segment continues it;
 * another one starts a new segment over the samples not yet consumed. */
static int state_load_local(dsc_loader_t *loader, const uint8_t *p, size_t len) {
    uint32_t n = len >= STATE_LOCAL_HEAD ? p[38] : 0;
    if (n == 0 || n > DSC_PLAN_MAX_SEGS || len != STATE_LOCAL_HEAD + 16 * (size_t)n + 8 ||
        get_u64(p + len - 8) != dsc_checksum(p, len - 8) || p[36] > 1 || p[37] > 1 || p[39]) {
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                "loader state: not a valid saved state (%zu bytes, version 3, checksummed)", len);
        return DSC_EBADSTATE;
    }
    if (!dsc__order_is_local(loader)) {
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                "loader state: saved with order local, this loader has %s (the sample order "
                "would differ)",
                order_name(loader));
        return DSC_EBADSTATE;
    }
    uint64_t epoch = get_u64(p + 8);
    int rc = state_settings(loader, get_u64(p + 16), get_u64(p + 24), get_u32(p + 32), p[36]);
    if (rc < 0)
        return rc;
    dsc_plan_seg_t segs[DSC_PLAN_MAX_SEGS];
    for (uint32_t i = 0; i < n; i++) {
        segs[i].world_size = get_u32(p + STATE_LOCAL_HEAD + 16 * i);
        segs[i].batch_size = get_u32(p + STATE_LOCAL_HEAD + 16 * i + 4);
        segs[i].steps = get_u64(p + STATE_LOCAL_HEAD + 16 * i + 8);
    }
    uint32_t nhist = 0;
    uint64_t pos = 0;
    const dsc_plan_seg_t *last = &segs[n - 1];
    if (p[37]) {
        pos = DSC__POS_DONE; /* the epoch was complete: the next step is its end */
    } else if (last->world_size == loader->cfg.opt.world_size &&
               last->batch_size == loader->cfg.opt.batch_size) {
        nhist = n - 1;
        pos = last->steps;
    } else {
        nhist = last->steps > 0 ? n : n - 1;
        if (nhist >= DSC_PLAN_MAX_SEGS) {
            DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                    "loader state: the epoch already ran at %u world or batch sizes; resume it "
                    "at the last one (%u ranks, batch %u) or restart it with set_epoch",
                    nhist, last->world_size, last->batch_size);
            return DSC_EBADSTATE;
        }
    }
    pthread_mutex_lock(&loader->lock);
    rc = loader->error;
    if (rc == 0) {
        /* Check the segments against the dataset before dropping anything. */
        if (dsc__sched_check_segments(loader, segs, nhist, pos) < 0) {
            DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                    "loader state: its steps do not fit this dataset, world size and batch size");
            rc = DSC_EBADSTATE;
        } else {
            rc = dsc__stream_restart(loader, epoch, segs, nhist, pos);
        }
    }
    pthread_mutex_unlock(&loader->lock);
    return rc;
}

/* Version 4 (order caller): restarts the epoch with nothing pushed; the caller pushes its order
 * from the epoch's start, and the samples handed out before are skipped and checked against the
 * saved hash (dsc__sched_push). */
static int state_load_caller(dsc_loader_t *loader, const uint8_t *p, size_t len) {
    if (len != STATE_CALLER_BYTES || get_u64(p + 56) != dsc_checksum(p, 56)) {
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                "loader state: not a valid saved state (%zu bytes; %u expected, checksummed)", len,
                STATE_CALLER_BYTES);
        return DSC_EBADSTATE;
    }
    if (!dsc__order_is_caller(loader)) {
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                "loader state: saved with the caller's order, this loader has %s (the sample "
                "order would differ)",
                order_name(loader));
        return DSC_EBADSTATE;
    }
    uint64_t epoch = get_u64(p + 8), batches = get_u64(p + 16), samples = get_u64(p + 24);
    uint64_t hash = get_u64(p + 32);
    int rc = state_settings(loader, get_u64(p + 40), get_u64(p + 48), 0, 0);
    if (rc < 0)
        return rc;
    if (batches > samples) {
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                "loader state: %llu batches of %llu samples in all (not a state this loader "
                "saves)",
                (unsigned long long)batches, (unsigned long long)samples);
        return DSC_EBADSTATE;
    }
    pthread_mutex_lock(&loader->lock);
    rc = loader->error;
    if (rc == 0)
        rc = dsc__stream_restart(loader, epoch, NULL, 0, batches);
    if (rc == 0) {
        loader->cons.cons_samples = samples;
        loader->cons.cons_hash = hash;
        loader->sched.caller.skip = loader->sched.caller.skip_total = samples;
        loader->sched.caller.skip_hash = hash;
        loader->sched.caller.skip_seen = 0;
    }
    pthread_mutex_unlock(&loader->lock);
    return rc;
}

DSC_EXTERN int dsc_loader_state_load(dsc_loader_t *loader, const void *buf, size_t len) {
    if (loader == NULL || buf == NULL)
        return DSC_EINVAL;
    if (loader->mix != NULL)
        return dsc__mix_loader_state_load(loader, buf, len);
    const uint8_t *p = buf;
    if (len >= 8 && memcmp(p, "DSCS", 4) == 0 && get_u32(p + 4) == STATE_CALLER_VERSION)
        return state_load_caller(loader, p, len);
    if (len >= 8 && memcmp(p, "DSCS", 4) == 0 && get_u32(p + 4) == STATE_LOCAL_VERSION)
        return state_load_local(loader, p, len);
    if (len >= 8 && memcmp(p, "DSCS", 4) == 0 && get_u32(p + 4) != STATE_VERSION) {
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                "loader state: version %u, this library reads versions %u to %u (older states "
                "do not record the shuffle settings: restart the epoch with set_epoch)",
                get_u32(p + 4), STATE_VERSION, STATE_CALLER_VERSION);
        return DSC_EBADSTATE;
    }
    if (len != STATE_BYTES || memcmp(p, "DSCS", 4) != 0 || get_u64(p + 48) != dsc_checksum(p, 48) ||
        p[44] > 1 || p[45] || p[46] || p[47]) {
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                "loader state: not a valid saved state (%zu bytes; %u expected, checksummed)", len,
                STATE_BYTES);
        return DSC_EBADSTATE;
    }
    if (dsc__order_is_local(loader) || dsc__order_is_caller(loader)) {
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                "loader state: saved with order global, this loader has %s (the sample order "
                "would differ)",
                order_name(loader));
        return DSC_EBADSTATE;
    }
    uint64_t epoch = get_u64(p + 8), pos = get_u64(p + 16);
    int rc = state_settings(loader, get_u64(p + 24), get_u64(p + 32), get_u32(p + 40), p[44]);
    if (rc < 0)
        return rc;
    if (pos > loader->cfg.samples) {
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                "loader state: saved with position (beyond the dataset) %llu, this loader has "
                "%llu",
                (unsigned long long)pos, (unsigned long long)loader->cfg.samples);
        return DSC_EBADSTATE;
    }
    pthread_mutex_lock(&loader->lock);
    rc = loader->error;
    if (rc == 0)
        rc = dsc__stream_restart(loader, epoch, NULL, 0, pos);
    pthread_mutex_unlock(&loader->lock);
    return rc;
}
