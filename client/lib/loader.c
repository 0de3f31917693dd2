/* Loader API: create/destroy, the scheduler thread (plan steps, assign slots), the consumer side
 * (next, release, set_epoch, state), batch views and DLPack. See loader_int.h for the pipeline. */
#include "loader_int.h"
#include "util.h"

#include <dlpack/dlpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define DEFAULT_CACHE_BYTES (256ull << 20)
#define SLOT_ALIGN 256

DSC_EXTERN void dsc_loader_options_init(dsc_loader_options_t *options) {
    if (options == NULL)
        return;
    memset(options, 0, sizeof *options);
    options->struct_size = sizeof *options;
    options->batch_size = 32;
    options->world_size = 1;
    options->shuffle = 1;
    options->shuffle_window = 8192;
    options->prefetch_batches = 4;
    options->inflight_bytes = 64ull << 20;
    options->decode_threads = 2;
    options->connections = 2;
    options->device = -1;
    options->timeout_ms = 5000;
    options->replicas = 2;
    options->log_level = DSC_LOG_WARN;
    options->cache_bytes = DEFAULT_CACHE_BYTES;
}

/* ---- Chunk table and queues (under lock) ------------------------------------------------- */

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

/* Placed entries (decoded straight into a slot) hold no bytes for another step: skipped. */
static dsc_chunk_ent_t *chunk_find(dsc_loader_t *loader, uint64_t gid) {
    dsc_chunk_ent_t *e = loader->buckets[hash_gid(gid) & loader->bucket_mask];
    while (e != NULL && (e->gid != gid || e->placed))
        e = e->hnext;
    return e;
}

void dsc__chunk_unlink(dsc_loader_t *loader, dsc_chunk_ent_t *ent) {
    dsc_chunk_ent_t **pp = &loader->buckets[hash_gid(ent->gid) & loader->bucket_mask];
    while (*pp != NULL && *pp != ent)
        pp = &(*pp)->hnext;
    if (*pp == ent) {
        *pp = ent->hnext;
        loader->held_bytes -= ent->raw_len;
    }
    ent->hnext = NULL;
}

void dsc__chunk_free(dsc_loader_t *loader, dsc_chunk_ent_t *ent) {
    if (ent == NULL)
        return;
    dsc__bufpool_put(&loader->pool, ent->stored, ent->stored_cap);
    if (ent->raw_cap)
        dsc__bufpool_put(&loader->pool, ent->raw, ent->raw_cap);
    free(ent);
}

void dsc__loader_fail(dsc_loader_t *loader, int err) {
    if (loader->error == 0 && err < 0) {
        loader->error = err;
        /* Not while stopping: destroy() closes connections under outstanding requests, and
         * what that leaves undone is no failure of the loader's. */
        if (!loader->stop)
            DSC_LOG(&loader->log, DSC_LOG_ERROR, "loader failed: %s (%s)", dsc_strerror(err),
                    dsc_err_name(err));
    }
    pthread_cond_broadcast(&loader->cons_cv);
    pthread_cond_broadcast(&loader->sched_cv);
    pthread_cond_broadcast(&loader->io_cv);
    pthread_cond_broadcast(&loader->work_cv);
}

/* Consecutive chunks of a shard hash alike in groups of this many, so that they tend to go to
 * one server and merge into one GET. */
#define ROUTE_GROUP_CHUNKS 8
/* A hashed choice is kept unless it has this many more chunks' bytes of work than the least
 * loaded owner: enough to keep runs of a shard together, small enough to keep servers even. */
#define ROUTE_SLACK_CHUNKS 4

static int routable(const dsc_loader_t *loader, uint32_t s, const dsc_chunk_ent_t *ent) {
    const dsc_server_t *srv = &loader->servers[s];
    return srv->member && srv->alive && srv->io_count > 0 &&
           !(ent->tried[s / 64] & (1ull << (s % 64)));
}

static uint64_t server_load(const dsc_loader_t *loader, uint32_t s) {
    return loader->servers[s].queue.bytes + loader->servers[s].inflight_bytes;
}

int dsc__route_chunk(dsc_loader_t *loader, dsc_chunk_ent_t *ent) {
    if (loader->members.count > 0) {
        uint32_t owners[DSC_MAX_REPLICAS], live[DSC_MAX_REPLICAS];
        uint32_t replicas = loader->opt.replicas;
        if (replicas == 0)
            replicas = 1;
        if (replicas > DSC_MAX_REPLICAS)
            replicas = DSC_MAX_REPLICAS;
        int n =
            dsc_placement_owners(&loader->members, loader->dataset, ent->shard, replicas, owners);
        uint32_t live_count = 0;
        for (int i = 0; i < n; i++) {
            uint32_t s = loader->member_slot[owners[i]];
            if (routable(loader, s, ent))
                live[live_count++] = s;
        }
        if (live_count > 0) {
            /* Spread a shard's reads over its live owners: by chunk group, unless that owner
             * already has much more work than the least loaded one. */
            uint64_t group = ((uint64_t)ent->shard << 32) | (ent->shard_chunk / ROUTE_GROUP_CHUNKS);
            uint32_t pick = live[hash_gid(group ^ 0x9E3779B97F4A7C15ULL) % live_count];
            uint32_t least = pick;
            for (uint32_t i = 0; i < live_count; i++)
                if (server_load(loader, live[i]) < server_load(loader, least))
                    least = live[i];
            if (server_load(loader, pick) >
                server_load(loader, least) + ROUTE_SLACK_CHUNKS * ent->raw_len)
                pick = least;
            return (int)pick;
        }
        /* Every owner is down or failed for this chunk: any other member can read through. */
        int best = -1;
        for (uint32_t m = 0; m < loader->members.count; m++) {
            uint32_t s = loader->member_slot[m];
            if (routable(loader, s, ent) &&
                (best < 0 || server_load(loader, s) < server_load(loader, (uint32_t)best)))
                best = (int)s;
        }
        if (best >= 0)
            return best;
    }
    if (loader->fallback != NULL &&
        !(ent->tried[DSC__FALLBACK / 64] & (1ull << (DSC__FALLBACK % 64))))
        return DSC__FALLBACK;
    return -1;
}

void dsc__server_push(dsc_loader_t *loader, uint32_t s, dsc_chunk_ent_t *ent) {
    ent->server = s;
    ent->state = CH_QUEUED;
    dsc__queue_push(&loader->servers[s].queue, ent);
}

uint64_t dsc__server_inflight_limit(const dsc_loader_t *loader) {
    if (loader->opt.server_inflight_bytes > 0)
        return loader->opt.server_inflight_bytes;
    uint32_t n = loader->members.count > 0 ? loader->members.count : 1;
    return loader->opt.inflight_bytes * 2 / n;
}

/* ---- Scheduler ---------------------------------------------------------------------------- */

static int plan_one(dsc_loader_t *loader) {
    uint64_t seq = loader->plan_seq;
    dsc_step_t *st = &loader->steps[seq % loader->step_cap];
    st->seq = seq;
    st->state = ST_PLANNED;
    st->scan = 0;
    st->epoch = loader->plan_epoch;
    if (loader->plan_step >= loader->plan_split.steps) {
        st->eof = 1;
        st->count = 0;
        st->step = loader->plan_step_base + loader->plan_step;
        st->pos_after = 0;
        loader->plan_epoch++;
        dsc__order_set_epoch(loader->order, loader->plan_epoch);
        dsc__split_init(&loader->plan_split, loader->samples, 0, loader->opt.batch_size,
                        loader->opt.world_size, loader->opt.drop_last);
        loader->plan_step = 0;
        loader->plan_step_base = 0;
        memset(loader->fetched, 0, loader->fetched_words * sizeof(uint64_t));
        loader->plan_seq++;
        return 0;
    }
    uint64_t first;
    uint32_t count;
    int rc =
        dsc__split_step(&loader->plan_split, loader->plan_step, loader->opt.rank, &first, &count);
    if (rc < 0)
        return rc;
    st->eof = 0;
    st->count = count;
    st->step = loader->plan_step_base + loader->plan_step;
    for (uint32_t k = 0; k < count; k++) {
        uint64_t id = dsc__order_at(loader->order, first + k);
        dsc_sample_loc_t loc;
        rc = dsc__order_locate(loader->order, id, &loc);
        if (rc < 0)
            return rc;
        dsc_chunk_ent_t *ent = chunk_find(loader, loc.chunk);
        if (ent == NULL) {
            ent = calloc(1, sizeof *ent);
            if (ent == NULL)
                return DSC_ENOMEM;
            ent->gid = loc.chunk;
            ent->shard = loc.shard;
            ent->shard_chunk = loc.shard_chunk;
            ent->samples = loc.chunk_samples;
            ent->raw_len = (uint64_t)loc.chunk_samples * loader->sample_bytes;
            ent->state = CH_QUEUED;
            ent->order = loader->order_next++;
            /* A chunk fetched a second time this epoch: its first copy was dropped before a
             * later need was planned (the window's chunks did not fit in cache_bytes). */
            uint64_t *word = &loader->fetched[loc.chunk / 64];
            if (*word & (1ull << (loc.chunk % 64)))
                loader->st.refetches++;
            *word |= 1ull << (loc.chunk % 64);
            int server = dsc__route_chunk(loader, ent);
            if (server < 0) {
                free(ent);
                DSC_LOG(&loader->log, DSC_LOG_ERROR, "no server available for shard %u", loc.shard);
                return loader->members.count > 1 ? DSC_EALLDOWN : DSC_EUNAVAIL;
            }
            uint64_t b = hash_gid(ent->gid) & loader->bucket_mask;
            ent->hnext = loader->buckets[b];
            loader->buckets[b] = ent;
            loader->held_bytes += ent->raw_len;
            dsc__server_push(loader, (uint32_t)server, ent);
            pthread_cond_broadcast(&loader->io_cv);
        }
        /* Direct placement stays possible while all of the chunk's needs form one run, in
         * chunk order from its first sample, inside this step. */
        if (ent->refs == 0) {
            ent->run_ok = loc.in_chunk == 0;
            ent->run_seq = seq;
            ent->run_k = k;
        } else if (ent->run_ok) {
            ent->run_ok =
                ent->run_seq == seq && k == ent->run_k + ent->refs && loc.in_chunk == ent->refs;
        }
        ent->refs++;
        st->ids[k] = id;
        st->src[k] = ent;
        st->in_chunk[k] = loc.in_chunk;
    }
    loader->plan_step++;
    st->pos_after = dsc__split_position(&loader->plan_split, loader->plan_step);
    loader->plan_seq++;
    return 0;
}

static void *sched_main(void *arg) {
    dsc_loader_t *loader = arg;
    pthread_mutex_lock(&loader->lock);
    while (!loader->stop) {
        if (loader->error) {
            pthread_cond_wait(&loader->sched_cv, &loader->lock);
            continue;
        }
        int progress = 0;
        /* Slots, in stream order. */
        while (loader->slot_seq < loader->plan_seq) {
            dsc_slot_t *slot = &loader->slots[loader->slot_seq % loader->slot_count];
            if (slot->owner != SLOT_FREE)
                break;
            slot->owner = loader->slot_seq;
            dsc_step_t *st = &loader->steps[loader->slot_seq % loader->step_cap];
            if (st->eof) {
                st->state = ST_READY;
                pthread_cond_broadcast(&loader->cons_cv);
            }
            loader->slot_seq++;
            progress = 1;
            dsc__work_signal(loader); /* one step: one worker collates it */
        }
        /* Plan ahead while the ring has room and the decoded-chunk budget allows (always at
         * least one step beyond what the consumer holds, so the pipeline never stalls). */
        uint64_t ahead = loader->plan_seq - loader->retired_seq;
        if (ahead < loader->step_cap &&
            (loader->held_bytes < loader->cache_bytes || loader->plan_seq <= loader->cons_seq)) {
            int rc = plan_one(loader);
            if (rc < 0)
                dsc__loader_fail(loader, rc);
            progress = 1;
        }
        if (!progress)
            pthread_cond_wait(&loader->sched_cv, &loader->lock);
    }
    pthread_mutex_unlock(&loader->lock);
    return NULL;
}

/* ---- Restart (set_epoch, state_load) ------------------------------------------------------ */

static void release_current(dsc_loader_t *loader);

/* Drops everything planned or prefetched and restarts the stream at (epoch, pos). Under lock. */
static int restart(dsc_loader_t *loader, uint64_t epoch, uint64_t pos) {
    while (loader->collating > 0)
        pthread_cond_wait(&loader->cons_cv, &loader->lock);
    release_current(loader);
    /* Chunk entries: free those nobody holds; those a thread holds are freed by that thread. */
    for (uint64_t b = 0; b <= loader->bucket_mask; b++) {
        dsc_chunk_ent_t *e = loader->buckets[b];
        while (e != NULL) {
            dsc_chunk_ent_t *next = e->hnext;
            e->hnext = NULL;
            if (e->state == CH_INFLIGHT || e->state == CH_DECODING) {
                e->cancelled = 1;
            } else {
                if (e->state == CH_RECEIVED)
                    loader->inflight_used -= e->raw_len;
                dsc__chunk_free(loader, e);
            }
            e = next;
        }
        loader->buckets[b] = NULL;
    }
    loader->held_bytes = 0;
    memset(loader->fetched, 0, loader->fetched_words * sizeof(uint64_t));
    for (uint32_t s = 0; s <= DSC__FALLBACK; s++)
        if (s < loader->server_count || s == DSC__FALLBACK)
            memset(&loader->servers[s].queue, 0, sizeof(dsc_chunk_queue_t));
    memset(&loader->decode_queue, 0, sizeof loader->decode_queue);
    for (uint32_t i = 0; i < loader->slot_count; i++)
        loader->slots[i].owner = SLOT_FREE;
    uint64_t seq = loader->plan_seq;
    loader->slot_seq = loader->cons_seq = loader->retired_seq = seq;
    loader->plan_epoch = epoch;
    dsc__order_set_epoch(loader->order, epoch);
    int rc = dsc__split_init(&loader->plan_split, loader->samples, pos, loader->opt.batch_size,
                             loader->opt.world_size, loader->opt.drop_last);
    loader->plan_step = 0;
    uint64_t per_step = (uint64_t)loader->opt.batch_size * loader->opt.world_size;
    loader->plan_step_base = pos / per_step;
    loader->cons_epoch = epoch;
    loader->cons_pos = pos;
    loader->st.epoch = epoch;
    pthread_cond_broadcast(&loader->sched_cv);
    pthread_cond_broadcast(&loader->io_cv);
    return rc;
}

/* ---- Create / destroy --------------------------------------------------------------------- */

static char *dup_str(const char *s) {
    if (s == NULL)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

static int check_options(const dsc_loader_options_t *o, const dsc_logger_t *log) {
    const char *bad = NULL;
    if (o->dataset == NULL || o->dataset[0] == '\0' || strlen(o->dataset) >= DSC_MAX_NAME)
        bad = "dataset (1..63 bytes) is required";
    else if ((o->servers == NULL || o->servers[0] == '\0') && o->fallback_path == NULL)
        bad = "servers or fallback_path is required";
    else if (o->batch_size == 0)
        bad = "batch_size must be >= 1";
    else if (o->world_size == 0)
        bad = "world_size must be >= 1";
    else if (o->rank >= o->world_size)
        bad = "rank must be < world_size";
    else if (o->prefetch_batches == 0 || o->prefetch_batches > 1024)
        bad = "prefetch_batches must be in 1..1024";
    else if (o->decode_threads == 0 || o->decode_threads > 256)
        bad = "decode_threads must be in 1..256";
    else if (o->connections == 0 || o->connections > 64)
        bad = "connections must be in 1..64";
    else if (o->replicas > DSC_MAX_REPLICAS)
        bad = "replicas must be <= 8";
    else if (o->timeout_ms > 3600u * 1000u)
        bad = "timeout_ms must be at most an hour (0: the default, 5000)";
    else if (o->device < -1)
        bad = "device must be -1 (host) or a CUDA device index";
    if (bad != NULL) {
        DSC_LOG(log, DSC_LOG_ERROR, "invalid loader options: %s", bad);
        return DSC_EINVAL;
    }
    return 0;
}

static int alloc_slots(dsc_loader_t *loader) {
    uint64_t off = 0;
    for (uint32_t f = 0; f < loader->field_count; f++) {
        loader->field_off[f] = off;
        uint64_t bytes = loader->manifest->schema.fields[f].sample_bytes * loader->opt.batch_size;
        off += (bytes + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
    }
    loader->slot_bytes = off;
    loader->slots = calloc(loader->slot_count, sizeof(dsc_slot_t));
    if (loader->slots == NULL)
        return DSC_ENOMEM;
    for (uint32_t i = 0; i < loader->slot_count; i++) {
        dsc_slot_t *s = &loader->slots[i];
        s->owner = SLOT_FREE;
        s->host_bytes = loader->slot_bytes;
        s->batch.loader = loader;
        s->batch.slot = i;
        s->batch.indices = calloc(loader->opt.batch_size, sizeof(uint64_t));
        if (s->batch.indices == NULL)
            return DSC_ENOMEM;
        if (loader->cuda != NULL) {
            s->host = dsc__cuda_host_alloc(loader->cuda, loader->slot_bytes);
            s->host_cuda = 1;
            s->dev = dsc__cuda_dev_alloc(loader->cuda, loader->slot_bytes);
            if (s->host == NULL || s->dev == NULL)
                return DSC_ECUDA;
            int rc = dsc__cuda_slot_init(loader->cuda, &s->ev);
            if (rc < 0)
                return rc;
        } else {
            s->host = dsc__host_alloc(loader->slot_bytes, &loader->log, &s->locked);
            if (s->host == NULL)
                return DSC_ENOMEM;
        }
    }
    return 0;
}

static void free_slots(dsc_loader_t *loader) {
    if (loader->slots == NULL)
        return;
    for (uint32_t i = 0; i < loader->slot_count; i++) {
        dsc_slot_t *s = &loader->slots[i];
        if (s->host_cuda) {
            dsc__cuda_host_free(loader->cuda, s->host);
            dsc__cuda_dev_free(loader->cuda, s->dev);
            dsc__cuda_slot_close(loader->cuda, &s->ev);
        } else {
            dsc__host_free(s->host, s->host_bytes);
        }
        free(s->batch.indices);
    }
    free(loader->slots);
    loader->slots = NULL;
}

static int alloc_steps(dsc_loader_t *loader) {
    uint64_t per_step = (uint64_t)loader->opt.batch_size * loader->opt.world_size;
    uint64_t window = loader->opt.shuffle ? loader->opt.shuffle_window : 1;
    /* Look-ahead of three shuffle windows: the current window's chunks stay decoded (each is
     * fetched once) while the next window's are fetched; bounded to about a million sample
     * records (and by cache_bytes at run time). */
    uint64_t cap = 3 * ((window + per_step - 1) / per_step) + 2ull * loader->slot_count + 1;
    uint64_t limit = (1ull << 20) / loader->opt.batch_size;
    if (cap > limit)
        cap = limit;
    if (cap < loader->slot_count + 1ull)
        cap = loader->slot_count + 1ull;
    loader->step_cap = (uint32_t)cap;
    loader->steps = calloc(cap, sizeof(dsc_step_t));
    if (loader->steps == NULL)
        return DSC_ENOMEM;
    for (uint64_t i = 0; i < cap; i++) {
        dsc_step_t *st = &loader->steps[i];
        st->ids = malloc(loader->opt.batch_size * sizeof(uint64_t));
        st->src = malloc(loader->opt.batch_size * sizeof(dsc_chunk_ent_t *));
        st->in_chunk = malloc(loader->opt.batch_size * sizeof(uint32_t));
        if (!st->ids || !st->src || !st->in_chunk)
            return DSC_ENOMEM;
    }
    return 0;
}

/* Starts the I/O threads of slot s that are not running yet. Returns 0 or DSC_ENOMEM. */
int dsc__server_start(dsc_loader_t *loader, uint32_t s) {
    dsc_server_t *srv = &loader->servers[s];
    for (uint32_t i = 0; i < loader->opt.connections; i++) {
        dsc_io_t *io = &srv->io[i];
        if (io->started)
            continue;
        io->loader = loader;
        io->server = s;
        io->next_id = 1;
        if (pthread_create(&io->thread, NULL, dsc__io_main, io) != 0)
            return DSC_ENOMEM;
        io->started = 1;
        srv->io_count++;
    }
    return 0;
}

static int start_threads(dsc_loader_t *loader) {
    pthread_mutex_lock(&loader->lock);
    int rc = 0;
    for (uint32_t s = 0; s < loader->server_count && rc == 0; s++)
        rc = dsc__server_start(loader, s);
    if (rc == 0 && loader->fallback != NULL)
        rc = dsc__server_start(loader, DSC__FALLBACK);
    loader->threads_running = 1;
    pthread_mutex_unlock(&loader->lock);
    if (rc < 0)
        return rc;
    for (uint32_t i = 0; i < loader->worker_count; i++) {
        if (pthread_create(&loader->workers[i], NULL, dsc__worker_main, loader) != 0)
            return DSC_ENOMEM;
        loader->workers_started++;
    }
    if (pthread_create(&loader->sched, NULL, sched_main, loader) != 0)
        return DSC_ENOMEM;
    loader->sched_started = 1;
    if (loader->server_count > 0) {
        if (pthread_create(&loader->view_thread, NULL, dsc__view_main, loader) != 0)
            return DSC_ENOMEM;
        loader->view_started = 1;
    }
    return 0;
}

/* Shuffle windows whose decoded chunks must be held at once for every chunk to be fetched once
 * per epoch (see check_cache_budget). */
#define WINDOWS_HELD 2

/* Warns when the decoded chunks of the shuffle windows the planner must hold do not fit in
 * cache_bytes. The planner plans steps while held_bytes < cache_bytes, and a chunk is dropped
 * once the planned steps that need it are collated; a window of W samples holds W * sample_bytes
 * of whole chunks plus the two chunks it shares with its neighbours. A chunk's last sample in
 * its window comes near the window's end, so at a window boundary nearly all of window w is
 * still held while the first steps of w + 1 are planned (and, with prefetch_batches slots, may
 * be collated before w's last step): unless all of w + 1 can be planned then, chunks whose other
 * samples lie in its unplanned rest are dropped and fetched again (stats.refetches). Measured:
 * no refetch from about 1.8 window footprints up, hundreds at 1.5 with a fast consumer. The
 * order is never changed to fit: it stays a pure function of the options. */
static void check_cache_budget(dsc_loader_t *loader) {
    const dsc_manifest_t *m = loader->manifest;
    uint64_t chunk_max = 0;
    for (uint32_t i = 0; i < m->shard_count; i++) {
        uint64_t c = (uint64_t)m->shards[i].chunk_samples * loader->sample_bytes;
        if (c > chunk_max)
            chunk_max = c;
    }
    uint64_t window = loader->opt.shuffle ? loader->opt.shuffle_window : 0;
    if (window > loader->samples)
        window = loader->samples;
    /* The steps that finish a window reach up to one step's span (batch_size * world_size
     * positions) past it. */
    uint64_t per_step = (uint64_t)loader->opt.batch_size * loader->opt.world_size;
    uint64_t need = WINDOWS_HELD * ((window + per_step) * loader->sample_bytes + 2 * chunk_max);
    if (need <= loader->cache_bytes)
        return;
    uint64_t edge = WINDOWS_HELD * (per_step * loader->sample_bytes + 2 * chunk_max);
    uint64_t fit = loader->cache_bytes > edge
                       ? (loader->cache_bytes - edge) / WINDOWS_HELD / loader->sample_bytes
                       : 0;
    char lower[160] = "";
    if (loader->opt.shuffle && fit >= 1)
        snprintf(lower, sizeof lower, " or lower shuffle_window to %llu", (unsigned long long)fit);
    DSC_LOG(&loader->log, DSC_LOG_WARN,
            "loader: cache_bytes %llu is too small for the shuffle window: %u windows of %llu "
            "samples (+ %llu of a step) of %llu bytes, each with 2 edge chunks of up to %llu "
            "bytes, need %llu bytes of decoded chunks at once, so chunks will be fetched several "
            "times per epoch (see the refetches statistic); raise cache_bytes to %llu%s",
            (unsigned long long)loader->cache_bytes, WINDOWS_HELD, (unsigned long long)window,
            (unsigned long long)per_step, (unsigned long long)loader->sample_bytes,
            (unsigned long long)chunk_max, (unsigned long long)need, (unsigned long long)need,
            lower);
}

DSC_EXTERN int dsc_loader_create(const dsc_loader_options_t *options, dsc_loader_t **out) {
    if (options == NULL || out == NULL ||
        options->struct_size < offsetof(dsc_loader_options_t, cache_bytes))
        return DSC_EINVAL;
    dsc_loader_t *loader = calloc(1, sizeof *loader);
    if (loader == NULL)
        return DSC_ENOMEM;
    /* Copy what the caller's struct holds; newer fields keep their defaults. */
    dsc_loader_options_init(&loader->opt);
    size_t n =
        options->struct_size < sizeof loader->opt ? options->struct_size : sizeof loader->opt;
    memcpy(&loader->opt, options, n);
    loader->opt.struct_size = sizeof loader->opt;
    if (loader->opt.cache_bytes == 0)
        loader->opt.cache_bytes = DEFAULT_CACHE_BYTES;
    if (loader->opt.timeout_ms == 0)
        loader->opt.timeout_ms = 5000;
    if (loader->opt.shuffle_window == 0)
        loader->opt.shuffle_window = 8192;
    dsc__logger_init(&loader->log, options->log_fn, options->log_ctx, options->log_level);
    pthread_mutex_init(&loader->lock, NULL);
    pthread_mutex_init(&loader->files_lock, NULL);
    pthread_cond_init(&loader->sched_cv, NULL);
    pthread_cond_init(&loader->io_cv, NULL);
    pthread_cond_init(&loader->work_cv, NULL);
    pthread_cond_init(&loader->cons_cv, NULL);
    pthread_cond_init(&loader->view_cv, NULL);
    loader->created_at = loader->last_log = dsc_now_s();
    loader->st.struct_size = sizeof loader->st;
    int rc = check_options(&loader->opt, &loader->log);
    if (rc < 0)
        goto fail;
    rc = dsc__diag_init(loader, loader->created_at); /* picks the job name while it is valid */
    loader->opt.job_name = NULL;                     /* the caller's string is not kept */
    if (rc < 0)
        goto fail;
    rc = DSC_ENOMEM;
    loader->dataset = dup_str(options->dataset);
    loader->fallback = dup_str(options->fallback_path);
    loader->opt.dataset = loader->dataset;
    loader->opt.fallback_path = loader->fallback;
    loader->opt.servers = NULL; /* the caller's string is not kept */
    if (loader->dataset == NULL || (options->fallback_path && loader->fallback == NULL))
        goto fail;
    loader->servers = calloc(DSC_LOADER_MAX_SERVERS + 1, sizeof(dsc_server_t));
    if (loader->servers == NULL)
        goto fail;
    dsc_server_t *files = &loader->servers[DSC__FALLBACK];
    snprintf(files->addr, DSC_MEMBER_MAX, "fallback files");
    files->used = 1;
    files->alive = loader->fallback != NULL;
    files->io = calloc(loader->opt.connections, sizeof(dsc_io_t));
    if (files->io == NULL)
        goto fail;
    if (options->servers != NULL && options->servers[0] != '\0') {
        loader->servers_spec = dup_str(options->servers);
        if (loader->servers_spec == NULL)
            goto fail;
        dsc_members_t members = {0};
        rc = dsc_members_resolve(options->servers, &members);
        if (rc == 0) {
            pthread_mutex_lock(&loader->lock);
            rc = dsc__view_adopt(loader, &members);
            pthread_mutex_unlock(&loader->lock);
        }
        dsc_members_free(&members);
        if (rc < 0) {
            DSC_LOG(&loader->log, DSC_LOG_ERROR, "servers \"%s\": %s", options->servers,
                    dsc_strerror(rc));
            goto fail;
        }
        loader->view_changes = 0; /* the first view is not a change */
    }
    /* Freed chunk buffers are kept for reuse up to the memory the budgets allow anyway: no
     * page faults and munmaps on the hot path. */
    dsc__bufpool_init(&loader->pool,
                      (size_t)(loader->opt.inflight_bytes + loader->opt.cache_bytes));

    rc = dsc__fetch_manifest(loader);
    if (rc < 0)
        goto fail;
    const dsc_manifest_t *m = loader->manifest;
    loader->samples = m->samples;
    loader->sample_bytes = m->schema.sample_bytes;
    loader->field_count = m->schema.field_count;
    loader->cache_bytes = loader->opt.cache_bytes;
    if (loader->samples == 0 || loader->sample_bytes == 0) {
        DSC_LOG(&loader->log, DSC_LOG_ERROR, "dataset %s is empty", loader->dataset);
        rc = DSC_EBADMANIFEST;
        goto fail;
    }
    if (loader->fallback != NULL) {
        loader->files = calloc(m->shard_count, sizeof(dsc_file_shard_t));
        if (loader->files == NULL)
            goto fail;
        for (uint32_t i = 0; i < m->shard_count; i++)
            loader->files[i].fd = -1;
    }
    rc = dsc__order_create(m, loader->opt.seed, loader->opt.shuffle, loader->opt.shuffle_window,
                           &loader->order);
    if (rc < 0)
        goto fail;
    rc = DSC_ENOMEM;
    uint64_t buckets = 1024;
    while (buckets < dsc__order_chunks(loader->order) && buckets < (1u << 20))
        buckets <<= 1;
    loader->buckets = calloc(buckets, sizeof(dsc_chunk_ent_t *));
    if (loader->buckets == NULL)
        goto fail;
    loader->bucket_mask = buckets - 1;
    loader->fetched_words = (dsc__order_chunks(loader->order) + 63) / 64;
    loader->fetched = calloc(loader->fetched_words, sizeof(uint64_t));
    if (loader->fetched == NULL)
        goto fail;
    check_cache_budget(loader);
    if (loader->opt.device >= 0) {
        rc = dsc__cuda_open(loader->opt.device, &loader->log, &loader->cuda);
        if (rc < 0)
            goto fail;
    }
    loader->assist = !loader->opt.no_assist && loader->cuda == NULL;
    loader->slot_count = loader->opt.prefetch_batches;
    rc = alloc_slots(loader);
    if (rc < 0)
        goto fail;
    rc = alloc_steps(loader);
    if (rc < 0)
        goto fail;
    rc = dsc__split_init(&loader->plan_split, loader->samples, 0, loader->opt.batch_size,
                         loader->opt.world_size, loader->opt.drop_last);
    if (rc < 0)
        goto fail;
    rc = DSC_ENOMEM;
    loader->worker_count = loader->opt.decode_threads;
    loader->workers = calloc(loader->worker_count, sizeof(pthread_t));
    if (loader->workers == NULL)
        goto fail;
    rc = start_threads(loader);
    if (rc < 0)
        goto fail;
    DSC_LOG(&loader->log, DSC_LOG_INFO,
            "loader: dataset %s (%llu samples, %u shards), %u server(s), batch %u, rank %u/%u, "
            "%u slots of %zu bytes%s",
            loader->dataset, (unsigned long long)loader->samples, m->shard_count,
            loader->server_count, loader->opt.batch_size, loader->opt.rank, loader->opt.world_size,
            loader->slot_count, loader->slot_bytes, loader->cuda ? " (pinned, CUDA)" : "");
    *out = loader;
    return 0;
fail:
    dsc_loader_destroy(loader);
    return rc;
}

DSC_EXTERN void dsc_loader_destroy(dsc_loader_t *loader) {
    if (loader == NULL)
        return;
    pthread_mutex_lock(&loader->lock);
    loader->stop = 1;
    pthread_cond_broadcast(&loader->sched_cv);
    pthread_cond_broadcast(&loader->io_cv);
    pthread_cond_broadcast(&loader->work_cv);
    pthread_cond_broadcast(&loader->cons_cv);
    pthread_cond_broadcast(&loader->view_cv);
    /* Wake threads blocked in recv. */
    if (loader->servers != NULL)
        for (uint32_t s = 0; s <= DSC__FALLBACK; s++)
            for (uint32_t i = 0; loader->servers[s].io != NULL && i < loader->opt.connections; i++)
                if (loader->servers[s].io[i].conn != NULL)
                    shutdown(dsc_conn_fd(loader->servers[s].io[i].conn), SHUT_RDWR);
    if (loader->view_conn != NULL)
        shutdown(dsc_conn_fd(loader->view_conn), SHUT_RDWR);
    pthread_mutex_unlock(&loader->lock);
    if (loader->view_started)
        pthread_join(loader->view_thread, NULL);
    if (loader->sched_started)
        pthread_join(loader->sched, NULL);
    for (uint32_t i = 0; i < loader->workers_started; i++)
        pthread_join(loader->workers[i], NULL);
    if (loader->servers != NULL)
        for (uint32_t s = 0; s <= DSC__FALLBACK; s++)
            for (uint32_t i = 0; loader->servers[s].io != NULL && i < loader->opt.connections; i++)
                if (loader->servers[s].io[i].started)
                    pthread_join(loader->servers[s].io[i].thread, NULL);
    /* Threads are gone: free what is left (I/O threads freed the cancelled entries they held). */
    if (loader->buckets != NULL) {
        for (uint64_t b = 0; b <= loader->bucket_mask; b++) {
            dsc_chunk_ent_t *e = loader->buckets[b];
            while (e != NULL) {
                dsc_chunk_ent_t *next = e->hnext;
                dsc__chunk_free(loader, e);
                e = next;
            }
        }
        free(loader->buckets);
    }
    free(loader->fetched);
    dsc__diag_free(loader);
    if (loader->servers != NULL)
        for (uint32_t s = 0; s <= DSC__FALLBACK; s++) {
            for (uint32_t i = 0; loader->servers[s].io != NULL && i < loader->opt.connections; i++)
                dsc_conn_close(loader->servers[s].io[i].conn);
            free(loader->servers[s].io);
        }
    free(loader->workers);
    free(loader->assist_ctx.scratch);
    if (loader->steps != NULL) {
        for (uint32_t i = 0; i < loader->step_cap; i++) {
            free(loader->steps[i].ids);
            free(loader->steps[i].src);
            free(loader->steps[i].in_chunk);
        }
        free(loader->steps);
    }
    free_slots(loader);
    if (loader->files != NULL && loader->manifest != NULL) {
        for (uint32_t i = 0; i < loader->manifest->shard_count; i++) {
            if (loader->files[i].fd >= 0)
                close(loader->files[i].fd);
            free(loader->files[i].index);
        }
    }
    free(loader->files);
    dsc__cuda_close(loader->cuda);
    dsc__order_destroy(loader->order);
    dsc_manifest_free(loader->manifest);
    dsc_members_free(&loader->members);
    free(loader->member_slot);
    free(loader->servers_spec);
    free(loader->servers);
    if (loader->pool.max_cached)
        dsc__bufpool_close(&loader->pool);
    free(loader->dataset);
    free(loader->fallback);
    pthread_mutex_destroy(&loader->lock);
    pthread_mutex_destroy(&loader->files_lock);
    pthread_cond_destroy(&loader->sched_cv);
    pthread_cond_destroy(&loader->io_cv);
    pthread_cond_destroy(&loader->work_cv);
    pthread_cond_destroy(&loader->cons_cv);
    pthread_cond_destroy(&loader->view_cv);
    free(loader);
}

/* ---- Consumer ------------------------------------------------------------------------------ */

/* Gives the handed-out batch's slot back. Under lock. */
static void release_current(dsc_loader_t *loader) {
    dsc_batch_t *b = loader->current;
    if (b == NULL)
        return;
    dsc_slot_t *slot = &loader->slots[b->slot];
    if (loader->cuda != NULL &&
        dsc__cuda_slot_release(loader->cuda, &slot->ev, loader->user_stream) < 0)
        dsc__loader_fail(loader, DSC_ECUDA);
    b->handed = 0;
    slot->owner = SLOT_FREE;
    loader->retired_seq = b->seq + 1;
    loader->current = NULL;
    pthread_cond_broadcast(&loader->sched_cv);
}

DSC_EXTERN int dsc_loader_next(dsc_loader_t *loader, dsc_batch_t **out) {
    if (loader == NULL || out == NULL)
        return DSC_EINVAL;
    double t0 = dsc_now_s();
    pthread_mutex_lock(&loader->lock);
    if (loader->last_return > 0)
        loader->st.compute_seconds += t0 - loader->last_return;
    release_current(loader);
    int rc = 0;
    dsc_step_t *st = NULL;
    /* What the wait is spent on, for the verdict: re-read at each wake-up (diag.c). */
    int cause = -1;
    uint32_t cause_server = UINT32_MAX;
    double mark = t0;
    for (;;) {
        if (loader->error) {
            rc = loader->error;
            break;
        }
        if (loader->cons_seq < loader->slot_seq) {
            st = &loader->steps[loader->cons_seq % loader->step_cap];
            if (st->state == ST_READY)
                break;
        }
        double now = dsc_now_s();
        dsc__diag_blame(loader, cause, cause_server, now - mark);
        mark = now;
        cause = dsc__diag_waiting_on(loader, &cause_server);
        /* Rather than sleep, do the work the batch waits for (or any other there is). */
        if (loader->assist && dsc__worker_pass(loader, &loader->assist_ctx)) {
            loader->st.assists++;
            continue;
        }
        loader->consumer_waiting = loader->assist; /* else new work is not its business */
        pthread_cond_wait(&loader->cons_cv, &loader->lock);
        loader->consumer_waiting = 0;
    }
    double t1 = dsc_now_s();
    loader->st.stall_seconds += t1 - t0;
    dsc__diag_blame(loader, cause, cause_server, t1 - mark);
    if (rc == 0) {
        dsc_slot_t *slot = &loader->slots[st->seq % loader->slot_count];
        loader->cons_seq++;
        if (st->eof) {
            slot->owner = SLOT_FREE;
            loader->retired_seq = st->seq + 1;
            loader->cons_epoch = st->epoch + 1;
            loader->cons_pos = 0;
            loader->st.epoch = loader->cons_epoch;
            pthread_cond_broadcast(&loader->sched_cv);
            rc = DSC_EOF;
        } else {
            st->state = ST_HANDED;
            dsc_batch_t *b = &slot->batch;
            b->samples = st->count;
            b->step = st->step;
            b->seq = st->seq;
            b->handed = 1;
            memcpy(b->indices, st->ids, st->count * sizeof(uint64_t));
            loader->current = b;
            loader->cons_epoch = st->epoch;
            loader->cons_pos = st->pos_after;
            loader->st.epoch = st->epoch;
            loader->st.batches++;
            loader->st.samples += st->count;
            loader->st.bytes += (uint64_t)st->count * loader->sample_bytes;
            if (loader->cuda != NULL) {
                rc = dsc__cuda_slot_hand_out(loader->cuda, &slot->ev, loader->user_stream);
                if (rc < 0)
                    dsc__loader_fail(loader, rc);
            }
            if (rc == 0)
                *out = b;
        }
    }
    dsc__stats_maybe_log(loader, t1);
    dsc__diag_tick(loader, t1);
    loader->last_return = dsc_now_s();
    pthread_mutex_unlock(&loader->lock);
    return rc;
}

DSC_EXTERN void dsc_batch_release(dsc_batch_t *batch) {
    if (batch == NULL)
        return;
    dsc_loader_t *loader = batch->loader;
    pthread_mutex_lock(&loader->lock);
    if (batch->handed && loader->current == batch)
        release_current(loader);
    pthread_mutex_unlock(&loader->lock);
}

DSC_EXTERN int dsc_loader_set_epoch(dsc_loader_t *loader, uint64_t epoch) {
    if (loader == NULL)
        return DSC_EINVAL;
    pthread_mutex_lock(&loader->lock);
    int rc = loader->error;
    /* Already at the start of that epoch (e.g. just after its predecessor's DSC_EOF): keep what
     * was prefetched. */
    if (rc == 0 &&
        !(loader->cons_epoch == epoch && loader->cons_pos == 0 && loader->current == NULL))
        rc = restart(loader, epoch, 0);
    pthread_mutex_unlock(&loader->lock);
    return rc;
}

DSC_EXTERN uint64_t dsc_loader_len(const dsc_loader_t *loader) {
    if (loader == NULL)
        return 0;
    dsc_split_t sp;
    if (dsc__split_init(&sp, loader->samples, 0, loader->opt.batch_size, loader->opt.world_size,
                        loader->opt.drop_last) < 0)
        return 0;
    return sp.steps;
}

DSC_EXTERN uint64_t dsc_loader_dataset_samples(const dsc_loader_t *loader) {
    return loader ? loader->samples : 0;
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
    return loader->opt.shuffle ? loader->opt.shuffle_window : 0;
}

DSC_EXTERN int dsc_loader_state_save(const dsc_loader_t *loader, void *buf, size_t cap) {
    if (loader == NULL || (buf == NULL && cap > 0))
        return DSC_EINVAL;
    if (cap < STATE_BYTES)
        return STATE_BYTES;
    dsc_loader_t *l = (dsc_loader_t *)loader;
    pthread_mutex_lock(&l->lock);
    uint64_t epoch = l->cons_epoch, pos = l->cons_pos;
    pthread_mutex_unlock(&l->lock);
    uint8_t *p = buf;
    memcpy(p, "DSCS", 4);
    p[4] = STATE_VERSION, p[5] = p[6] = p[7] = 0;
    put_u64(p + 8, epoch);
    put_u64(p + 16, pos);
    put_u64(p + 24, loader->opt.seed);
    put_u64(p + 32, loader->samples);
    uint32_t window = order_window(loader);
    for (int i = 0; i < 4; i++)
        p[40 + i] = (uint8_t)(window >> (8 * i));
    p[44] = loader->opt.shuffle ? 1 : 0;
    p[45] = p[46] = p[47] = 0;
    put_u64(p + 48, dsc_checksum(p, 48));
    return STATE_BYTES;
}

DSC_EXTERN int dsc_loader_state_load(dsc_loader_t *loader, const void *buf, size_t len) {
    if (loader == NULL || buf == NULL)
        return DSC_EINVAL;
    const uint8_t *p = buf;
    if (len >= 8 && memcmp(p, "DSCS", 4) == 0 && get_u32(p + 4) != STATE_VERSION) {
        DSC_LOG(&loader->log, DSC_LOG_ERROR,
                "loader state: version %u, this library reads version %u (older states do not "
                "record the shuffle settings: restart the epoch with set_epoch)",
                get_u32(p + 4), STATE_VERSION);
        return DSC_EBADSTATE;
    }
    if (len != STATE_BYTES || memcmp(p, "DSCS", 4) != 0 || get_u64(p + 48) != dsc_checksum(p, 48) ||
        p[44] > 1 || p[45] || p[46] || p[47]) {
        DSC_LOG(&loader->log, DSC_LOG_ERROR,
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
    if (seed != loader->opt.seed)
        field = "seed", saved = seed, here = loader->opt.seed;
    else if (samples != loader->samples)
        field = "dataset samples", saved = samples, here = loader->samples;
    else if (shuffle != (loader->opt.shuffle ? 1 : 0))
        field = "shuffle", saved = (uint64_t)shuffle, here = loader->opt.shuffle ? 1 : 0;
    else if (window != order_window(loader))
        field = "shuffle_window", saved = window, here = order_window(loader);
    else if (pos > loader->samples)
        field = "position (beyond the dataset)", saved = pos, here = loader->samples;
    if (field != NULL) {
        DSC_LOG(&loader->log, DSC_LOG_ERROR,
                "loader state: saved with %s %llu, this loader has %llu (the sample order would "
                "differ)",
                field, (unsigned long long)saved, (unsigned long long)here);
        return DSC_EBADSTATE;
    }
    pthread_mutex_lock(&loader->lock);
    int rc = loader->error;
    if (rc == 0)
        rc = restart(loader, epoch, pos);
    pthread_mutex_unlock(&loader->lock);
    return rc;
}

DSC_EXTERN uint32_t dsc_loader_field_count(const dsc_loader_t *loader) {
    return loader ? loader->field_count : 0;
}

DSC_EXTERN int dsc_loader_field(const dsc_loader_t *loader, uint32_t field, dsc_field_info_t *out) {
    if (loader == NULL || out == NULL || field >= loader->field_count)
        return DSC_ERANGE;
    const dsc_field_t *f = &loader->manifest->schema.fields[field];
    memset(out, 0, sizeof *out);
    memcpy(out->name, f->name, DSC_MAX_NAME);
    out->dtype = f->dtype;
    out->ndim = f->ndim;
    for (uint32_t d = 0; d < f->ndim; d++)
        out->shape[d] = f->shape[d];
    out->sample_bytes = f->sample_bytes;
    return 0;
}

DSC_EXTERN int dsc_loader_set_stream(dsc_loader_t *loader, void *cuda_stream) {
    if (loader == NULL)
        return DSC_EINVAL;
    if (loader->cuda == NULL)
        return DSC_ENOTSUP;
    pthread_mutex_lock(&loader->lock);
    loader->user_stream = cuda_stream;
    pthread_mutex_unlock(&loader->lock);
    return 0;
}

/* ---- Batches ------------------------------------------------------------------------------- */

DSC_EXTERN uint32_t dsc_batch_samples(const dsc_batch_t *batch) {
    return batch ? batch->samples : 0;
}

DSC_EXTERN uint64_t dsc_batch_step(const dsc_batch_t *batch) {
    return batch ? batch->step : 0;
}

DSC_EXTERN const uint64_t *dsc_batch_indices(const dsc_batch_t *batch) {
    return batch ? batch->indices : NULL;
}

DSC_EXTERN int dsc_batch_field(const dsc_batch_t *batch, uint32_t field, dsc_tensor_view_t *out) {
    if (batch == NULL || out == NULL || field >= batch->loader->field_count)
        return DSC_ERANGE;
    const dsc_loader_t *loader = batch->loader;
    const dsc_field_t *f = &loader->manifest->schema.fields[field];
    const dsc_slot_t *slot = &loader->slots[batch->slot];
    memset(out, 0, sizeof *out);
    out->name = f->name;
    out->dtype = f->dtype;
    out->ndim = 1u + f->ndim;
    out->shape[0] = batch->samples;
    for (uint32_t d = 0; d < f->ndim; d++)
        out->shape[d + 1] = f->shape[d];
    out->bytes = f->sample_bytes * batch->samples;
    if (loader->cuda != NULL) {
        out->data = slot->dev + loader->field_off[field];
        out->device = loader->opt.device;
    } else {
        out->data = slot->host + loader->field_off[field];
        out->device = -1;
    }
    return 0;
}

typedef struct dlpack_holder {
    DLManagedTensor managed;
    int64_t shape[DSC_MAX_DIMS + 1];
} dlpack_holder_t;

static void dlpack_deleter(DLManagedTensor *self) {
    free(self->manager_ctx);
}

static int dlpack_dtype(int dtype, DLDataType *out) {
    int size = dsc_dtype_size(dtype);
    if (size == 0)
        return DSC_EINVAL;
    out->bits = (uint8_t)(size * 8);
    out->lanes = 1;
    switch (dtype) {
    case DSC_DTYPE_U8:
    case DSC_DTYPE_U16:
    case DSC_DTYPE_U32:
        out->code = kDLUInt;
        break;
    case DSC_DTYPE_I8:
    case DSC_DTYPE_I16:
    case DSC_DTYPE_I32:
    case DSC_DTYPE_I64:
        out->code = kDLInt;
        break;
    case DSC_DTYPE_BF16:
        out->code = kDLBfloat;
        break;
    default:
        out->code = kDLFloat;
        break;
    }
    return 0;
}

DSC_EXTERN int dsc_batch_dlpack(dsc_batch_t *batch, uint32_t field, struct DLManagedTensor **out) {
    dsc_tensor_view_t view;
    if (out == NULL)
        return DSC_EINVAL;
    int rc = dsc_batch_field(batch, field, &view);
    if (rc < 0)
        return rc;
    dlpack_holder_t *h = calloc(1, sizeof *h);
    if (h == NULL)
        return DSC_ENOMEM;
    memcpy(h->shape, view.shape, sizeof h->shape);
    DLTensor *t = &h->managed.dl_tensor;
    t->data = view.data;
    t->device.device_type = view.device >= 0 ? kDLCUDA : kDLCPU;
    t->device.device_id = view.device >= 0 ? view.device : 0;
    t->ndim = (int)view.ndim;
    rc = dlpack_dtype(view.dtype, &t->dtype);
    if (rc < 0) {
        free(h);
        return rc;
    }
    t->shape = h->shape;
    t->strides = NULL; /* compact, row-major */
    t->byte_offset = 0;
    h->managed.manager_ctx = h;
    h->managed.deleter = dlpack_deleter;
    *out = &h->managed;
    return 0;
}
