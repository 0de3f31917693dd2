/* Loader routing: chunk -> peer (placement, load, fail-over), re-routing after a failure or a
 * view change, and the per-peer in-flight bound. Under the loader's lock. */
#include "route.h"

#include <stdio.h>
#include <stdlib.h>

/* Consecutive chunks of a shard hash alike in groups of this many, so that they tend to go to
 * one server and merge into one GET. */
#define ROUTE_GROUP_CHUNKS 8
/* A hashed choice is kept unless it has this many more chunks' bytes of work than the least
 * loaded owner: enough to keep runs of a shard together, small enough to keep servers even. */
#define ROUTE_SLACK_CHUNKS 4

static uint64_t hash_group(uint64_t x) {
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDULL;
    x ^= x >> 33;
    return x;
}

/* A live member with I/O threads, not failed for the chunk, and (slow_ok 0) not marked slow. */
static int usable(const dsc_loader_t *loader, uint32_t p, const dsc_chunk_ent_t *ent, int slow_ok) {
    const dsc_peer_t *peer = &loader->net.peers[p];
    return peer->member && peer->alive && peer->io_count > 0 && (slow_ok || !peer->hedge.slow) &&
           !(ent->tried[p / 64] & (1ull << (p % 64)));
}

static int routable(const dsc_loader_t *loader, uint32_t p, const dsc_chunk_ent_t *ent) {
    return usable(loader, p, ent, 0);
}

static uint64_t peer_load(const dsc_loader_t *loader, uint32_t p) {
    return loader->net.peers[p].queue.bytes + loader->net.peers[p].inflight_bytes;
}

int dsc__route_chunk(dsc_loader_t *loader, dsc_chunk_ent_t *ent) {
    if (loader->net.members.count > 0) {
        uint32_t owners[DSC_MAX_REPLICAS], live[DSC_MAX_REPLICAS];
        uint32_t replicas = loader->cfg.opt.replicas;
        if (replicas == 0)
            replicas = 1;
        if (replicas > DSC_MAX_REPLICAS)
            replicas = DSC_MAX_REPLICAS;
        int n = dsc_placement_owners(&loader->net.members, loader->cfg.dataset, ent->shard,
                                     replicas, owners);
        uint32_t live_count = 0;
        for (int i = 0; i < n; i++) {
            uint32_t p = loader->net.member_peer[owners[i]];
            if (routable(loader, p, ent))
                live[live_count++] = p;
        }
        if (live_count > 0) {
            /* Spread a shard's reads over its live owners: by chunk group, unless that owner
             * already has much more work than the least loaded one. */
            uint64_t group = ((uint64_t)ent->shard << 32) | (ent->shard_chunk / ROUTE_GROUP_CHUNKS);
            uint32_t pick = live[hash_group(group ^ 0x9E3779B97F4A7C15ULL) % live_count];
            uint32_t least = pick;
            for (uint32_t i = 0; i < live_count; i++)
                if (peer_load(loader, live[i]) < peer_load(loader, least))
                    least = live[i];
            if (peer_load(loader, pick) >
                peer_load(loader, least) + ROUTE_SLACK_CHUNKS * ent->raw_len)
                pick = least;
            return (int)pick;
        }
        /* Every owner is down or failed for this chunk: any other member can read through. */
        int best = -1;
        for (uint32_t m = 0; m < loader->net.members.count; m++) {
            uint32_t p = loader->net.member_peer[m];
            if (routable(loader, p, ent) &&
                (best < 0 || peer_load(loader, p) < peer_load(loader, (uint32_t)best)))
                best = (int)p;
        }
        if (best >= 0)
            return best;
        /* Only servers marked slow are left (hedge.c): an owner of them waits its turn rather
         * than the job failing; it may answer again any moment. */
        for (int i = 0; i < n; i++) {
            uint32_t p = loader->net.member_peer[owners[i]];
            if (usable(loader, p, ent, 1))
                return (int)p;
        }
        for (uint32_t m = 0; m < loader->net.members.count; m++) {
            uint32_t p = loader->net.member_peer[m];
            if (usable(loader, p, ent, 1))
                return (int)p;
        }
    }
    if (loader->cfg.fallback != NULL &&
        !(ent->tried[DSC__PEER_FALLBACK / 64] & (1ull << (DSC__PEER_FALLBACK % 64))))
        return DSC__PEER_FALLBACK;
    return -1;
}

void dsc__peer_push(dsc_loader_t *loader, uint32_t p, dsc_chunk_ent_t *ent) {
    dsc_peer_t *files = &loader->net.peers[DSC__PEER_FALLBACK];
    if (p == DSC__PEER_FALLBACK && !files->announced) {
        /* Said once per loader: the job goes on, from files, at the files' speed. */
        files->announced = 1;
        DSC_LOG(&loader->cfg.log, DSC_LOG_WARN,
                "loader: fallback_path: no server can give dataset %s shard %u (%u server%s "
                "known): reading it, and every chunk no server can give from now on, from the "
                "files in %s",
                loader->cfg.dataset, ent->shard, loader->net.peer_count,
                loader->net.peer_count == 1 ? "" : "s", loader->cfg.fallback);
    }
    ent->peer = p;
    ent->state = CH_QUEUED;
    dsc__queue_push(&loader->net.peers[p].queue, ent);
}

uint64_t dsc__peer_inflight_limit(const dsc_loader_t *loader) {
    if (loader->cfg.opt.server_inflight_bytes > 0)
        return loader->cfg.opt.server_inflight_bytes;
    uint32_t n = loader->net.members.count > 0 ? loader->net.members.count : 1;
    return loader->cfg.opt.inflight_bytes * 2 / n;
}

void dsc__peer_hello(dsc_loader_t *loader, uint32_t p, uint64_t hash) {
    loader->net.peers[p].hello_hash = hash;
    /* 0: a single server outside any cluster; the client's own list stands. */
    if (hash == 0 || hash == loader->net.view_hash)
        return;
    if (!loader->view.pending)
        DSC_LOG(&loader->cfg.log, DSC_LOG_INFO,
                "server %s has cluster view %016llx, ours is %016llx (%u members): asking MEMBERS",
                loader->net.peers[p].addr, (unsigned long long)hash,
                (unsigned long long)loader->net.view_hash, loader->net.members.count);
    loader->view.pending = 1;
    pthread_cond_broadcast(&loader->view.cv);
}

/* Marks peer `failed` tried for the chunk and queues it where dsc__route_chunk says. Returns the
 * peer, or -1 when no source is left. */
static int reroute(dsc_loader_t *loader, dsc_chunk_ent_t *ent, uint32_t failed) {
    if (failed <= DSC__PEER_FALLBACK)
        ent->tried[failed / 64] |= 1ull << (failed % 64);
    int p = dsc__route_chunk(loader, ent);
    if (p < 0 || (uint32_t)p == failed)
        return -1;
    dsc__peer_push(loader, (uint32_t)p, ent);
    return p;
}

/* A chunk that no live server (nor fallback file) can give after `failed` failed with err: the
 * server, what happened and the ways out, as the loader's failure. Under lock. */
static void explain_unreachable(dsc_loader_t *loader, const dsc_chunk_ent_t *ent, uint32_t failed,
                                int err, int result) {
    const char *addr = failed < loader->net.peer_count || failed == DSC__PEER_FALLBACK
                           ? loader->net.peers[failed].addr
                           : "?";
    char text[1024];
    snprintf(text, sizeof text,
             "dataset %s shard %u chunk %u: server %s failed (%s, %s) and no other %s holds it "
             "(%u server%s known%s). Fixes: restart that server (or check it with `dscache stat "
             "--server %s`); run the servers with --replicas 2 or more, so that another one "
             "holds its shards; set fallback_path to a copy of the dataset on shared storage, "
             "read when no server can give a chunk",
             loader->cfg.dataset, ent->shard, ent->shard_chunk, addr, dsc_strerror(err),
             dsc_err_name(err), result == DSC_EALLDOWN ? "live server" : "server",
             loader->net.peer_count, loader->net.peer_count == 1 ? "" : "s",
             loader->cfg.fallback != NULL ? ", fallback_path tried" : ", no fallback_path", addr);
    dsc__loader_fail_with(loader, result, text);
}

/* A chunk with no intact source left: where it was read (every source tried), what was wrong
 * and the ways out, as the loader's failure (dsc__loader_fail_with; the caller's
 * dsc__loader_fail then finds it failed). Under lock. */
static void explain_damage(dsc_loader_t *loader, const dsc_chunk_ent_t *ent, int err) {
    char from[512] = "";
    size_t used = 0;
    for (uint32_t p = 0; p <= DSC__PEER_FALLBACK && used + 1 < sizeof from; p++) {
        if (p >= loader->net.peer_count && p != DSC__PEER_FALLBACK)
            continue;
        if (!(ent->tried[p / 64] & (1ull << (p % 64))))
            continue;
        int k = snprintf(from + used, sizeof from - used, "%s%s%s", used ? ", " : "",
                         p == DSC__PEER_FALLBACK ? "" : "server ", loader->net.peers[p].addr);
        if (k > 0)
            used = (size_t)k >= sizeof from - used ? sizeof from - 1 : used + (size_t)k;
    }
    const dsc_manifest_t *m = loader->cfg.manifest;
    const char *file = m != NULL && ent->shard < m->shard_count ? m->shards[ent->shard].file : "?";
    const char *what = err == DSC_ECORRUPT ? "the stored copy is damaged"
                                           : "its bytes failed the loader's checksum";
    char text[1024];
    snprintf(text, sizeof text,
             "dataset %s shard %u (%s) chunk %u: %s (%s); read from %s, and no other replica "
             "%sis left to read it from. Fixes: set fallback_path to an intact copy of the "
             "dataset; serve it from more servers with --replicas 2 or more; re-ingest the "
             "shard (or copy an intact %s over it), then restart the server or SIGHUP it; `dscache "
             "inspect DIR` on the server's copy names every damaged chunk",
             loader->cfg.dataset, ent->shard, file, ent->shard_chunk, what, dsc_err_name(err),
             from[0] ? from : loader->net.peers[ent->peer].addr,
             loader->cfg.fallback != NULL ? "or fallback file " : "(no fallback_path) ", file);
    dsc__loader_fail_with(loader, err, text);
}

int dsc__chunk_refetch(dsc_loader_t *loader, dsc_chunk_ent_t *ent, int err) {
    uint32_t failed = ent->peer;
    loader->stats.st.checksum_failures++;
    int p = reroute(loader, ent, failed);
    if (p < 0) {
        if (loader->error == 0 && !loader->stop)
            explain_damage(loader, ent, err);
        return err;
    }
    loader->stats.st.failovers++;
    pthread_cond_broadcast(&loader->io_cv);
    return p;
}

int dsc__chunk_requeue(dsc_loader_t *loader, dsc_chunk_ent_t *ent, uint32_t failed, int err,
                       int sent) {
    if (sent) {
        loader->fetch.inflight_used -= ent->charged;
        loader->net.peers[failed].inflight_bytes -= ent->charged;
    }
    dsc__bufpool_put(&loader->cfg.pool, ent->stored, ent->stored_cap);
    ent->stored = NULL;
    ent->stored_cap = 0;
    if (ent->cancelled) {
        dsc__chunk_free(&loader->cfg.pool, ent);
        return 0;
    }
    if (dsc__is_corruption(err)) {
        ent->peer = failed;
        int p = dsc__chunk_refetch(loader, ent, err);
        if (p >= 0 && sent)
            loader->stats.st.retries++;
        return p < 0 ? p : 0;
    }
    if (reroute(loader, ent, failed) < 0) {
        int result = loader->net.members.count > 1 ? DSC_EALLDOWN : err;
        /* A dataset changed on its server is explained where CHANGED is seen (fetch.c). */
        if (loader->error == 0 && !loader->stop && err != DSC_ECHANGED)
            explain_unreachable(loader, ent, failed, err, result);
        return result;
    }
    if (sent)
        loader->stats.st.retries++;
    loader->stats.st.failovers++;
    return 0;
}

static int by_order(const void *a, const void *b) {
    const dsc_chunk_ent_t *x = *(dsc_chunk_ent_t *const *)a, *y = *(dsc_chunk_ent_t *const *)b;
    return x->order < y->order ? -1 : x->order > y->order;
}

void dsc__route_requeue_all(dsc_loader_t *loader) {
    uint64_t total = loader->net.peers[DSC__PEER_FALLBACK].queue.count;
    for (uint32_t p = 0; p < loader->net.peer_count; p++)
        total += loader->net.peers[p].queue.count;
    if (total == 0)
        return;
    dsc_chunk_ent_t **all = malloc(total * sizeof *all);
    if (all == NULL)
        return; /* they stay where they are: those servers still serve them */
    uint64_t n = 0;
    for (uint32_t p = 0; p <= DSC__PEER_FALLBACK; p++) {
        if (p >= loader->net.peer_count && p != DSC__PEER_FALLBACK)
            continue;
        dsc_chunk_ent_t *ent;
        while ((ent = dsc__queue_pop(&loader->net.peers[p].queue)) != NULL)
            all[n++] = ent;
    }
    qsort(all, n, sizeof *all, by_order);
    for (uint64_t i = 0; i < n; i++) {
        int p = dsc__route_chunk(loader, all[i]);
        dsc__peer_push(loader, p >= 0 ? (uint32_t)p : all[i]->peer, all[i]);
    }
    free(all);
}
