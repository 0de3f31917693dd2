/* Scale simulator: one epoch of a job of R ranks over a cluster of S servers, planned by the
 * library's own code (plan.c's local order, placement.c's rendezvous owners, route.c's choice of
 * owner), without servers or sockets; prints the per-server load and its balance, the fan-out and
 * what it costs, a member leaving or joining mid-epoch, and one rank's planning cost.
 * docs/scale.md gives the model and its figures. With --check it verifies invariants and exits 1
 * when one fails (tests/CMakeLists.txt: sim_scale_check); --fault breaks one on purpose.
 * usage: scale_sim [--points 10x100,100x1000 | none] [--samples N] [--batch B] [--sample-bytes N]
 *                  [--chunk-bytes N] [--shard-bytes N] [--replicas R] [--window W]
 *                  [--connections C] [--rank-sample K] [--plan-cost] [--plan-ranks R] [--check]
 *                  [--max-balance X] [--fault plan|balance|move] */
#include "conn.h"
#include "diag.h"
#include "pipeline.h"
#include "placement.h"
#include "plan.h"
#include "route.h"
#ifdef DSC_SIM_HAVE_SERVER
#include "tcp.h"
#endif

#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DATASET "sim"

typedef struct sim_opt {
    uint64_t samples, sample_bytes, chunk_bytes, shard_bytes;
    uint32_t batch, replicas, window, connections, rank_sample, plan_ranks;
    int plan_cost, check;
    double max_balance;
    const char *fault; /* NULL, "plan", "balance", "move" */
} sim_opt_t;

/* Figures of one point (servers x ranks). */
typedef struct point {
    uint32_t servers, ranks, ranks_walked;
    uint64_t shards, chunks, steps, windows, per_rank;
    double dataset_bytes;
    /* Traffic of the epoch (scaled up when ranks were sampled). */
    double req_total, bytes_total;
    double epoch_ratio;    /* max / mean bytes per server over the epoch */
    double step_ratio_w;   /* sum over steps of max / sum of mean: the load-weighted step ratio */
    double step_ratio_max; /* worst step among those carrying >= 1% of the epoch's bytes */
    double window_ratio_w; /* the same per shuffle window of steps (what look-ahead smooths to) */
    double req_step_ratio_w;
    uint32_t burst_steps; /* steps carrying >= 1% of the epoch's bytes */
    double req_peak_step; /* requests per server in the busiest step (mean over servers) */
    /* Coverage (all ranks walked). */
    int coverage_checked;
    uint64_t missing, extra, padding;
    /* Membership change at change_step: [0] one member leaves, [1] one joins. */
    uint64_t change_step;
    double after_bytes[2], moved_bytes[2], cold_bytes[2], lost_bytes;
    double after_ratio[2];
    double route_us; /* one dsc__route_chunk call */
    /* Servers one rank reads from in the epoch (the connections it needs): mean, max. */
    double rank_servers_mean;
    uint32_t rank_servers_max;
} point_t;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* CPU seconds of the calling thread: the costs measured here do not count the time other
 * processes of a shared machine take. */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Bytes the heap holds for the program now (glibc; 0 elsewhere or under a sanitizer's allocator,
 * which glibc does not see). */
static double heap_bytes(void) {
#ifdef __GLIBC__
    struct mallinfo2 mi = mallinfo2();
    return (double)mi.uordblks + (double)mi.hblkhd;
#else
    return 0;
#endif
}

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (p == NULL) {
        fprintf(stderr, "scale_sim: out of memory (%zu x %zu bytes)\n", n, size);
        exit(2);
    }
    return p;
}

/* The synthetic dataset: fixed-size samples, chunk_bytes per chunk, shard_bytes per shard (the
 * ingest defaults are 1 MiB and 64 MiB). */
static dsc_manifest_t make_manifest(const sim_opt_t *o) {
    uint64_t chunk_samples = o->chunk_bytes / o->sample_bytes;
    if (chunk_samples == 0)
        chunk_samples = 1;
    uint64_t shard_samples = o->shard_bytes / o->sample_bytes / chunk_samples * chunk_samples;
    if (shard_samples < chunk_samples)
        shard_samples = chunk_samples;
    dsc_manifest_t m = {.name = DATASET};
    m.shard_count = (uint32_t)((o->samples + shard_samples - 1) / shard_samples);
    m.shards = xcalloc(m.shard_count, sizeof *m.shards);
    for (uint32_t i = 0; i < m.shard_count; i++) {
        uint64_t n = o->samples - (uint64_t)i * shard_samples;
        if (n > shard_samples)
            n = shard_samples;
        m.shards[i].id = i;
        m.shards[i].samples = n;
        m.shards[i].chunk_samples = (uint32_t)chunk_samples;
        m.shards[i].chunks = (uint32_t)((n + chunk_samples - 1) / chunk_samples);
    }
    m.samples = o->samples;
    return m;
}

static void member_addr(uint32_t i, char *buf, size_t cap) {
    snprintf(buf, cap, "10.%u.%u.%u:7070", (i >> 16) & 255, (i >> 8) & 255, i & 255);
}

static void members_make(dsc_members_t *m, uint32_t count) {
    memset(m, 0, sizeof *m);
    for (uint32_t i = 0; i < count; i++) {
        char addr[DSC_MEMBER_MAX];
        member_addr(i, addr, sizeof addr);
        if (dsc_members_add(m, addr) < 0) {
            fprintf(stderr, "scale_sim: cannot build a member list of %u\n", count);
            exit(2);
        }
    }
}

/* ---- Routing through route.c ----------------------------------------------------------------
 * dsc__route_chunk reads the loader's view (members, member -> peer map), its peers' liveness and
 * load and the chunk entry. A loader here holds nothing but that: peers 0 .. replicas-1 stand for
 * the owners of the chunk being routed (each member maps to the peer of its rank among the owners,
 * the others to a peer that is no member), so a view of any size (up to DSC_MAX_MEMBERS) routes
 * although a real loader addresses DSC_LOADER_MAX_PEERS peers at most. Every peer is live with
 * nothing queued: the choice is route.c's hashed spread over the live owners (its load term
 * needs queues, which this simulation does not keep). */
typedef struct router {
    dsc_loader_t *loader;
    const dsc_members_t *view;
    uint32_t replicas;
    uint32_t *owners; /* per shard: the view's owners, replicas entries each (member indices) */
} router_t;

static void router_init(router_t *rt, const dsc_members_t *view, uint32_t replicas,
                        uint32_t shards) {
    rt->view = view;
    rt->replicas = replicas < view->count ? replicas : view->count;
    rt->loader = xcalloc(1, sizeof *rt->loader);
    dsc_loader_t *l = rt->loader;
    l->cfg.opt.replicas = replicas;
    l->cfg.dataset = (char *)DATASET;
    l->net.members = *view; /* borrowed: never freed through the loader */
    l->net.peers = xcalloc(DSC_LOADER_MAX_PEERS + 1, sizeof(dsc_peer_t));
    for (uint32_t p = 0; p <= rt->replicas; p++) {
        l->net.peers[p].used = 1;
        l->net.peers[p].member = p < rt->replicas; /* peer `replicas`: nobody's */
        l->net.peers[p].alive = 1;
        l->net.peers[p].io_count = 1;
    }
    l->net.peer_count = rt->replicas + 1;
    l->net.member_peer = xcalloc(view->count, sizeof(uint32_t));
    for (uint32_t m = 0; m < view->count; m++)
        l->net.member_peer[m] = rt->replicas;
    rt->owners = xcalloc((size_t)shards * rt->replicas, sizeof(uint32_t));
    for (uint32_t s = 0; s < shards; s++)
        if (dsc_placement_owners(view, DATASET, s, replicas,
                                 &rt->owners[(size_t)s * rt->replicas]) != (int)rt->replicas) {
            fprintf(stderr, "scale_sim: placement failed for shard %u\n", s);
            exit(2);
        }
}

static void router_free(router_t *rt) {
    if (rt->loader != NULL) {
        free(rt->loader->net.peers);
        free(rt->loader->net.member_peer);
        free(rt->loader);
    }
    free(rt->owners);
    memset(rt, 0, sizeof *rt);
}

/* The member of rt's view that the loader reads chunk (shard, shard_chunk) from. */
static uint32_t route(router_t *rt, uint32_t shard, uint32_t shard_chunk, uint64_t raw_len) {
    const uint32_t *own = &rt->owners[(size_t)shard * rt->replicas];
    dsc_loader_t *l = rt->loader;
    for (uint32_t i = 0; i < rt->replicas; i++)
        l->net.member_peer[own[i]] = i;
    dsc_chunk_ent_t ent;
    memset(&ent, 0, sizeof ent);
    ent.shard = shard;
    ent.shard_chunk = shard_chunk;
    ent.raw_len = raw_len;
    int p = dsc__route_chunk(l, &ent);
    for (uint32_t i = 0; i < rt->replicas; i++)
        l->net.member_peer[own[i]] = rt->replicas;
    if (p < 0 || (uint32_t)p >= rt->replicas) {
        fprintf(stderr, "scale_sim: route.c found no owner for shard %u chunk %u (%d)\n", shard,
                shard_chunk, p);
        exit(2);
    }
    return own[p];
}

/* Whether member `member` of rt's view owns shard. */
static int router_owns(const router_t *rt, uint32_t shard, uint32_t member) {
    const uint32_t *own = &rt->owners[(size_t)shard * rt->replicas];
    for (uint32_t i = 0; i < rt->replicas; i++)
        if (own[i] == member)
            return 1;
    return 0;
}

/* ---- One point ------------------------------------------------------------------------------ */

static double ratio_of(const double *v, uint32_t n) {
    double sum = 0, max = 0;
    for (uint32_t i = 0; i < n; i++) {
        sum += v[i];
        if (v[i] > max)
            max = v[i];
    }
    return sum > 0 ? max / (sum / n) : 0;
}

static void run_point(const sim_opt_t *o, const dsc_manifest_t *m, uint32_t servers, uint32_t ranks,
                      point_t *pt) {
    memset(pt, 0, sizeof *pt);
    pt->servers = servers;
    pt->ranks = ranks;
    pt->shards = m->shard_count;
    pt->dataset_bytes = (double)o->samples * (double)o->sample_bytes;
    dsc_order_t *order = NULL;
    if (dsc__order_create(m, 1, 1, o->window, &order) < 0) {
        fprintf(stderr, "scale_sim: dsc__order_create failed\n");
        exit(2);
    }
    pt->chunks = dsc__order_chunks(order);
    dsc_local_t lp;
    if (dsc__local_init(&lp, order, o->window, 1, NULL, 0, o->batch, ranks, 0) < 0) {
        fprintf(stderr, "scale_sim: dsc__local_init failed\n");
        exit(2);
    }
    pt->steps = lp.steps;
    pt->per_rank = lp.per_rank;
    uint64_t steps_per_window = (o->window + o->batch - 1) / o->batch;
    pt->windows = (lp.steps + steps_per_window - 1) / steps_per_window;
    pt->change_step = lp.steps / 2;

    /* Views: the cluster, one member less (the one in the middle of the list), one member more
     * (--fault move: every member renamed, the view a placement that is no rendezvous would
     * make of one change). */
    dsc_members_t view, leave, join;
    members_make(&view, servers);
    members_make(&leave, 0);
    uint32_t gone = servers / 2;
    for (uint32_t i = 0; i < servers; i++)
        if (i != gone || servers == 1)
            dsc_members_add(&leave, view.addrs[i]);
    members_make(&join, 0);
    for (uint32_t i = 0; i < servers; i++)
        dsc_members_add(&join, view.addrs[i]);
    dsc_members_add(&join, "10.255.255.254:7070");
    if (o->fault && !strcmp(o->fault, "move")) {
        dsc_members_free(&join);
        members_make(&join, 0);
        for (uint32_t i = 0; i <= servers; i++) {
            char addr[DSC_MEMBER_MAX];
            member_addr(i, addr, sizeof addr);
            addr[strlen(addr) - 1] = '1'; /* port 7071: other names */
            dsc_members_add(&join, addr);
        }
    }
    router_t rt, rt_after[2];
    router_init(&rt, &view, o->replicas, m->shard_count);
    router_init(&rt_after[0], &leave, o->replicas, m->shard_count);
    router_init(&rt_after[1], &join, o->replicas, m->shard_count);
    /* Member index in `view` of each member of the after-views (join's newcomer: UINT32_MAX). */
    uint32_t *to_old[2];
    const dsc_members_t *after_views[2] = {&leave, &join};
    for (int c = 0; c < 2; c++) {
        to_old[c] = xcalloc(after_views[c]->count, sizeof(uint32_t));
        for (uint32_t i = 0; i < after_views[c]->count; i++) {
            int k = dsc_members_find(&view, after_views[c]->addrs[i]);
            to_old[c][i] = k < 0 ? UINT32_MAX : (uint32_t)k;
        }
    }

    /* Ranks walked: all of them, or --rank-sample spread evenly (sums scaled up). */
    uint32_t walk = o->rank_sample && o->rank_sample < ranks ? o->rank_sample : ranks;
    pt->ranks_walked = walk;
    double scale = (double)ranks / walk;
    uint64_t n_steps = lp.steps;
    double *step_bytes = xcalloc((size_t)n_steps * servers, sizeof(double));
    double *step_reqs = xcalloc((size_t)n_steps * servers, sizeof(double));
    double *after_load[2];
    after_load[0] = xcalloc(leave.count, sizeof(double));
    after_load[1] = xcalloc(join.count, sizeof(double));
    uint32_t *stamp = xcalloc(pt->chunks, sizeof(uint32_t)); /* rank + 1 that last fetched it */
    uint8_t *seen = NULL;
    if (walk == ranks)
        seen = xcalloc((o->samples + 7) / 8, 1);
    int fault_plan = o->fault && !strcmp(o->fault, "plan");
    int fault_balance = o->fault && !strcmp(o->fault, "balance");
    uint64_t dups = 0;
    /* In flight on the leaver when it goes: what the rank routed to it in the shuffle window of
     * the change (the look-ahead asks for a window's chunks ahead), at most the loader's
     * per-server in-flight bound (route.c dsc__peer_inflight_limit, default options), which
     * fetch.c always lets one chunk pass. */
    dsc_loader_options_t lopt;
    DSC_LOADER_OPTIONS_INIT(&lopt);
    rt.loader->cfg.opt.inflight_bytes = lopt.inflight_bytes;
    double inflight_limit = (double)dsc__peer_inflight_limit(rt.loader);
    if (inflight_limit < (double)o->chunk_bytes)
        inflight_limit = (double)o->chunk_bytes;
    uint64_t change_window = pt->change_step / steps_per_window;
    uint32_t *srv_stamp = xcalloc(servers, sizeof(uint32_t)); /* walked rank + 1 that read it */
    double srv_sum = 0;
    for (uint32_t i = 0; i < walk; i++) {
        uint32_t r = (uint32_t)((uint64_t)i * ranks / walk);
        double to_leaver = 0;
        uint32_t rank_servers = 0;
        for (uint64_t st = 0; st < n_steps; st++) {
            uint64_t first;
            uint32_t n;
            dsc__local_step(&lp, st, r, &first, &n);
            for (uint32_t k = 0; k < n; k++) {
                uint64_t id = dsc__local_at(&lp, r, first + k);
                if (seen != NULL && !(fault_plan && r == 0 && st == 0 && k == 0)) {
                    if (seen[id / 8] & (1u << (id % 8)))
                        dups++;
                    seen[id / 8] |= (uint8_t)(1u << (id % 8));
                }
                dsc_sample_loc_t loc;
                dsc__order_locate(order, id, &loc);
                if (stamp[loc.chunk] == r + 1)
                    continue; /* this rank holds the chunk already (the look-ahead fits) */
                stamp[loc.chunk] = r + 1;
                double bytes = (double)loc.chunk_samples * (double)o->sample_bytes;
                uint32_t srv = route(&rt, loc.shard, loc.shard_chunk, (uint64_t)bytes);
                if (fault_balance && st == 0)
                    srv = 0;
                step_bytes[st * servers + srv] += bytes;
                step_reqs[st * servers + srv] += 1;
                if (srv_stamp[srv] != i + 1) {
                    srv_stamp[srv] = i + 1;
                    rank_servers++;
                }
                if (srv == gone && st / steps_per_window == change_window && st <= pt->change_step)
                    to_leaver += bytes;
                if (st < pt->change_step)
                    continue;
                for (int c = 0; c < 2; c++) {
                    uint32_t to = route(&rt_after[c], loc.shard, loc.shard_chunk, (uint64_t)bytes);
                    uint32_t old = to_old[c][to];
                    pt->after_bytes[c] += bytes;
                    after_load[c][to] += bytes;
                    if (old != srv)
                        pt->moved_bytes[c] += bytes;
                    if (old == UINT32_MAX || !router_owns(&rt, loc.shard, old))
                        pt->cold_bytes[c] += bytes; /* a new owner: read through from storage */
                }
            }
        }
        pt->lost_bytes += to_leaver < inflight_limit ? to_leaver : inflight_limit;
        srv_sum += rank_servers;
        if (rank_servers > pt->rank_servers_max)
            pt->rank_servers_max = rank_servers;
    }
    pt->rank_servers_mean = srv_sum / walk;
    free(srv_stamp);
    /* Sums. */
    double *epoch = xcalloc(servers, sizeof(double));
    double *win = xcalloc(servers, sizeof(double));
    double sum_max = 0, sum_mean = 0, rsum_max = 0, rsum_mean = 0, wsum_max = 0, wsum_mean = 0;
    double peak_step_reqs = 0;
    for (uint64_t st = 0; st < n_steps; st++) {
        double tot = 0, mx = 0, rtot = 0, rmx = 0;
        for (uint32_t s = 0; s < servers; s++) {
            double b = step_bytes[st * servers + s], q = step_reqs[st * servers + s];
            tot += b;
            rtot += q;
            mx = b > mx ? b : mx;
            rmx = q > rmx ? q : rmx;
            epoch[s] += b;
            win[s] += b;
            pt->req_total += q * scale;
        }
        pt->bytes_total += tot * scale;
        sum_max += mx;
        sum_mean += tot / servers;
        rsum_max += rmx;
        rsum_mean += rtot / servers;
        if (rtot * scale / servers > peak_step_reqs)
            peak_step_reqs = rtot * scale / servers;
        if ((st + 1) % steps_per_window == 0 || st + 1 == n_steps) {
            double wt = 0, wm = 0;
            for (uint32_t s = 0; s < servers; s++) {
                wt += win[s];
                wm = win[s] > wm ? win[s] : wm;
                win[s] = 0;
            }
            wsum_max += wm;
            wsum_mean += wt / servers;
        }
    }
    double epoch_sum = 0;
    for (uint32_t s = 0; s < servers; s++)
        epoch_sum += epoch[s];
    for (uint64_t st = 0; st < n_steps; st++) {
        double tot = 0, mx = 0;
        for (uint32_t s = 0; s < servers; s++) {
            tot += step_bytes[st * servers + s];
            mx = step_bytes[st * servers + s] > mx ? step_bytes[st * servers + s] : mx;
        }
        if (tot >= 0.01 * epoch_sum) {
            pt->burst_steps++;
            double r = mx / (tot / servers);
            if (r > pt->step_ratio_max)
                pt->step_ratio_max = r;
        }
    }
    pt->epoch_ratio = ratio_of(epoch, servers);
    pt->step_ratio_w = sum_mean > 0 ? sum_max / sum_mean : 0;
    pt->req_step_ratio_w = rsum_mean > 0 ? rsum_max / rsum_mean : 0;
    pt->window_ratio_w = wsum_mean > 0 ? wsum_max / wsum_mean : 0;
    pt->req_peak_step = peak_step_reqs;
    pt->after_ratio[0] = ratio_of(after_load[0], leave.count);
    pt->after_ratio[1] = ratio_of(after_load[1], join.count);
    for (int c = 0; c < 2; c++) {
        pt->after_bytes[c] *= scale;
        pt->moved_bytes[c] *= scale;
        pt->cold_bytes[c] *= scale;
    }
    pt->lost_bytes *= scale;
    if (seen != NULL) {
        pt->coverage_checked = 1;
        uint64_t have = 0;
        for (uint64_t id = 0; id < o->samples; id++)
            have += (seen[id / 8] >> (id % 8)) & 1u;
        pt->missing = o->samples - have;
        pt->extra = dups;
        pt->padding = lp.per_rank * ranks - o->samples;
    }
    /* One route call, timed (placement over every member, as the loader does per chunk). */
    uint32_t calls = 20000;
    double t0 = cpu_s();
    volatile uint32_t sink = 0;
    for (uint32_t i = 0; i < calls; i++)
        sink += route(&rt, i % m->shard_count, i, o->chunk_bytes);
    pt->route_us = (cpu_s() - t0) / calls * 1e6;
    (void)sink;

    free(epoch);
    free(win);
    free(seen);
    free(stamp);
    free(step_bytes);
    free(step_reqs);
    for (int c = 0; c < 2; c++) {
        free(after_load[c]);
        free(to_old[c]);
        router_free(&rt_after[c]);
    }
    router_free(&rt);
    dsc_members_free(&view);
    dsc_members_free(&leave);
    dsc_members_free(&join);
    dsc__order_destroy(order);
}

/* ---- Planning cost ---------------------------------------------------------------------------
 * What a loader's scheduler builds at create (scheduler.c dsc__sched_init): two order objects
 * (the plan's and the hint horizon's), the chunk table and three bits per chunk; then one rank's
 * whole epoch planned sample by sample (dsc__local_at + dsc__order_locate, what plan_one does
 * per sample). Measured on the real code: CPU time, and the heap bytes those objects hold (their
 * pages are touched, as the scheduler's are). */
static void plan_cost(const sim_opt_t *o, const dsc_manifest_t *m, uint32_t ranks) {
    double heap0 = heap_bytes();
    double t0 = cpu_s();
    dsc_order_t *order = NULL, *hz = NULL;
    if (dsc__order_create(m, 1, 1, o->window, &order) < 0 ||
        dsc__order_create(m, 1, 1, o->window, &hz) < 0) {
        fprintf(stderr, "scale_sim: dsc__order_create failed\n");
        exit(2);
    }
    double t_create = cpu_s() - t0;
    uint64_t chunks = dsc__order_chunks(order);
    dsc_chunk_table_t table;
    memset(&table, 0, sizeof table);
    if (dsc__chunk_table_init(&table, chunks) < 0) {
        fprintf(stderr, "scale_sim: dsc__chunk_table_init failed\n");
        exit(2);
    }
    uint64_t words = (chunks + 63) / 64;
    uint64_t *bits = xcalloc(3 * words, sizeof(uint64_t));
    memset(bits, 1, 3 * words * sizeof(uint64_t)); /* touched, as the scheduler's are */
    memset(table.buckets, 0, (table.bucket_mask + 1) * sizeof(dsc_chunk_ent_t *));
    double heap1 = heap_bytes();
    printf("\n## Planning cost per rank\n\n%llu samples, %llu chunks, %u shards; %u ranks, batch "
           "%u, window %u.\n\n",
           (unsigned long long)o->samples, (unsigned long long)chunks, m->shard_count, ranks,
           o->batch, o->window);
    printf("| what | CPU time | memory |\n|---|---|---|\n");
    printf("| loader create: 2 orders (epoch 0 permuted), chunk table, 3 bitmaps | %.3f s (the "
           "orders) | %.1f MiB (heap) |\n",
           t_create, (heap1 - heap0) / 1048576.0);
    const uint32_t pick[3] = {0, ranks / 2, ranks - 1};
    double worst_epoch = 0, worst_plan = 0;
    uint64_t per_rank = 0, steps = 0, sum = 0;
    for (int i = 0; i < 3; i++) {
        t0 = cpu_s();
        dsc__order_set_epoch(order, 1 + (uint64_t)i);
        double t_epoch = cpu_s() - t0;
        dsc_local_t lp;
        if (dsc__local_init(&lp, order, o->window, 1, NULL, 0, o->batch, ranks, 0) < 0) {
            fprintf(stderr, "scale_sim: dsc__local_init failed\n");
            exit(2);
        }
        per_rank = lp.per_rank;
        steps = lp.steps;
        t0 = cpu_s();
        for (uint64_t st = 0; st < lp.steps; st++) {
            uint64_t first;
            uint32_t n;
            dsc__local_step(&lp, st, pick[i], &first, &n);
            for (uint32_t k = 0; k < n; k++) {
                dsc_sample_loc_t loc;
                dsc__order_locate(order, dsc__local_at(&lp, pick[i], first + k), &loc);
                sum += loc.chunk;
            }
        }
        double t_plan = cpu_s() - t0;
        worst_epoch = t_epoch > worst_epoch ? t_epoch : worst_epoch;
        worst_plan = t_plan > worst_plan ? t_plan : worst_plan;
    }
    printf("| a new epoch's chunk permutation (dsc__order_set_epoch, per order) | %.3f s | - |\n",
           worst_epoch);
    printf("| one rank's epoch: %llu samples, %llu steps (worst of 3 ranks) | %.3f s (%.0f ns per "
           "sample) | O(segments) |\n",
           (unsigned long long)per_rank, (unsigned long long)steps, worst_plan,
           per_rank ? worst_plan / per_rank * 1e9 : 0.0);
    printf("\n(checksum %llu)\n", (unsigned long long)(sum & 0xffff));
    free(bits);
    dsc__chunk_table_free(&table, NULL);
    dsc__order_destroy(hz);
    dsc__order_destroy(order);
}

/* ---- Output -----------------------------------------------------------------------------------
 */

static double mib(double b) {
    return b / 1048576.0;
}

static void print_points(const sim_opt_t *o, const point_t *pts, int n) {
    printf("## Traffic and balance (one epoch, order local, replicas %u, batch %u, window %u)\n\n",
           o->replicas, o->batch, o->window);
    printf("| servers | ranks | ranks walked | shards per server | steps | requests per server "
           "| MiB per server | fetched / dataset | epoch max/mean | step max/mean (weighted) | "
           "step requests max/mean (weighted) | worst burst step (of) | window max/mean | "
           "requests per server, busiest step |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < n; i++) {
        const point_t *p = &pts[i];
        char burst[64] = "- (none >= 1%)";
        if (p->burst_steps > 0)
            snprintf(burst, sizeof burst, "%.3f (%u)", p->step_ratio_max, p->burst_steps);
        printf("| %u | %u | %u | %.1f | %llu | %.0f | %.0f | %.3f | %.3f | %.3f | %.3f | %s | "
               "%.3f | %.1f |\n",
               p->servers, p->ranks, p->ranks_walked, (double)p->shards / p->servers,
               (unsigned long long)p->steps, p->req_total / p->servers,
               mib(p->bytes_total / p->servers), p->bytes_total / p->dataset_bytes, p->epoch_ratio,
               p->step_ratio_w, p->req_step_ratio_w, burst, p->window_ratio_w, p->req_peak_step);
    }
    printf("\n## Fan-out and what it costs (connections %u per server per rank)\n\n",
           o->connections);
    size_t client_conn = dsc__conn_footprint() + sizeof(dsc_io_t);
    size_t server_conn = 0;
#ifdef DSC_SIM_HAVE_SERVER
    server_conn = dsc__tcp_conn_footprint();
#endif
    printf("Client, per connection: %zu bytes (struct dsc_conn and its receive buffer, "
           "dsc__conn_footprint, + dsc_io_t) and one I/O thread; per peer %zu bytes (dsc_peer_t). "
           "Server, per idle TCP connection: %zu bytes (dsc__tcp_conn_footprint); kernel socket "
           "buffers not counted. A loader addresses at most %u servers (DSC_LOADER_MAX_PEERS); a "
           "view holds at most %u members (DSC_MAX_MEMBERS).\n\n",
           client_conn, sizeof(dsc_peer_t), server_conn, DSC_LOADER_MAX_PEERS, DSC_MAX_MEMBERS);
    printf("| servers | ranks | connections (= I/O threads) per rank | client memory per rank | "
           "connections per server | server memory per server | RDMA RC QPs per server | "
           "REPORTs per server per s | loader fits (peers <= %u) | servers a rank reads from "
           "in an epoch (mean / max) |\n"
           "|---|---|---|---|---|---|---|---|---|---|\n",
           DSC_LOADER_MAX_PEERS);
    for (int i = 0; i < n; i++) {
        const point_t *p = &pts[i];
        double per_rank = (double)p->servers * o->connections;
        double per_server = (double)p->ranks * o->connections;
        printf("| %u | %u | %.0f | %.1f MiB | %.0f | %.1f MiB | %.0f | %.0f | %s | %.1f / %u |\n",
               p->servers, p->ranks, per_rank,
               mib(per_rank * (double)client_conn + p->servers * (double)sizeof(dsc_peer_t)),
               per_server, mib(per_server * (double)server_conn), per_server,
               p->ranks / DSC_DIAG_REPORT_S, p->servers <= DSC_LOADER_MAX_PEERS ? "yes" : "NO",
               p->rank_servers_mean, p->rank_servers_max);
    }
    printf("\n## One member leaves or joins mid-epoch (at step steps/2; work after it)\n\n");
    printf("| servers | ranks | change | MiB after it | moved to another server | moved x N "
           "| read by a new owner (cold) | MiB in flight on the leaver | max/mean after |\n"
           "|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < n; i++) {
        const point_t *p = &pts[i];
        for (int c = 0; c < 2; c++) {
            double moved = p->after_bytes[c] > 0 ? p->moved_bytes[c] / p->after_bytes[c] : 0;
            double cold = p->after_bytes[c] > 0 ? p->cold_bytes[c] / p->after_bytes[c] : 0;
            printf("| %u | %u | %s | %.0f | %.2f%% | %.2f | %.2f%% | %.1f | %.3f |\n", p->servers,
                   p->ranks, c == 0 ? "leave" : "join", mib(p->after_bytes[c]), 100 * moved,
                   moved * p->servers, 100 * cold, c == 0 ? mib(p->lost_bytes) : 0,
                   p->after_ratio[c]);
        }
    }
    printf("\n## Route cost\n\n| servers | one dsc__route_chunk (us of CPU) |\n|---|---|\n");
    for (int i = 0; i < n; i++)
        printf("| %u | %.2f |\n", pts[i].servers, pts[i].route_us);
}

/* ---- Checks --------------------------------------------------------------------------------- */

static int check_point(const sim_opt_t *o, const point_t *p) {
    int bad = 0;
    if (!p->coverage_checked) {
        fprintf(stderr, "check: %ux%u: coverage needs every rank walked (no --rank-sample)\n",
                p->servers, p->ranks);
        bad = 1;
    } else if (p->missing != 0 || p->extra != p->padding) {
        fprintf(stderr,
                "check FAILED: %ux%u: %llu samples never planned, %llu planned twice (the "
                "padding allows %llu)\n",
                p->servers, p->ranks, (unsigned long long)p->missing, (unsigned long long)p->extra,
                (unsigned long long)p->padding);
        bad = 1;
    }
    if (p->step_ratio_w > o->max_balance || p->epoch_ratio > o->max_balance) {
        fprintf(stderr,
                "check FAILED: %ux%u: bytes per server max/mean %.3f per step (weighted), %.3f "
                "over the epoch: over the bound %.3f\n",
                p->servers, p->ranks, p->step_ratio_w, p->epoch_ratio, o->max_balance);
        bad = 1;
    }
    for (int c = 0; c < 2; c++) {
        double moved = p->after_bytes[c] > 0 ? p->moved_bytes[c] / p->after_bytes[c] : 1;
        double share = 1.0 / (c == 0 ? p->servers : p->servers + 1);
        if (moved < 0.5 * share || moved > 2.0 * share) {
            fprintf(stderr,
                    "check FAILED: %ux%u: one member %s moved %.2f%% of the work after it, not "
                    "about 1/N (%.2f%%: between half and twice that)\n",
                    p->servers, p->ranks, c == 0 ? "leaving" : "joining", 100 * moved, 100 * share);
            bad = 1;
        }
    }
    if (!bad)
        fprintf(stderr,
                "check ok: %ux%u: every sample planned once (+%llu padding), balance %.3f/%.3f "
                "<= %.3f, leave moved %.2f%%, join %.2f%% (1/N = %.2f%%)\n",
                p->servers, p->ranks, (unsigned long long)p->padding, p->step_ratio_w,
                p->epoch_ratio, o->max_balance, 100 * p->moved_bytes[0] / p->after_bytes[0],
                100 * p->moved_bytes[1] / p->after_bytes[1], 100.0 / p->servers);
    return bad;
}

static uint64_t parse_size(const char *v) {
    char *end;
    double x = strtod(v, &end);
    switch (*end) {
    case 'K':
    case 'k':
        x *= 1024;
        break;
    case 'M':
    case 'm':
        x *= 1048576;
        break;
    case 'G':
    case 'g':
        x *= 1073741824.0;
        break;
    default:
        break;
    }
    return (uint64_t)x;
}

int main(int argc, char **argv) {
    sim_opt_t o = {.samples = 100000000,
                   .sample_bytes = 4096,
                   .chunk_bytes = 1 << 20,
                   .shard_bytes = 64 << 20,
                   .batch = 256,
                   .replicas = 2,
                   .window = 8192,
                   .connections = 2,
                   .max_balance = 1.2};
    const char *points = "10x100,100x1000,1000x10000";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--plan-cost")) {
            o.plan_cost = 1;
            continue;
        }
        if (!strcmp(a, "--check")) {
            o.check = 1;
            continue;
        }
        if (v == NULL) {
            fprintf(stderr, "scale_sim: %s needs a value (see the usage at the top of %s)\n", a,
                    __FILE__);
            return 2;
        }
        i++;
        if (!strcmp(a, "--points"))
            points = v;
        else if (!strcmp(a, "--samples"))
            o.samples = parse_size(v);
        else if (!strcmp(a, "--batch"))
            o.batch = (uint32_t)parse_size(v);
        else if (!strcmp(a, "--sample-bytes"))
            o.sample_bytes = parse_size(v);
        else if (!strcmp(a, "--chunk-bytes"))
            o.chunk_bytes = parse_size(v);
        else if (!strcmp(a, "--shard-bytes"))
            o.shard_bytes = parse_size(v);
        else if (!strcmp(a, "--replicas"))
            o.replicas = (uint32_t)parse_size(v);
        else if (!strcmp(a, "--window"))
            o.window = (uint32_t)parse_size(v);
        else if (!strcmp(a, "--connections"))
            o.connections = (uint32_t)parse_size(v);
        else if (!strcmp(a, "--plan-ranks"))
            o.plan_ranks = (uint32_t)parse_size(v);
        else if (!strcmp(a, "--rank-sample"))
            o.rank_sample = (uint32_t)parse_size(v);
        else if (!strcmp(a, "--max-balance"))
            o.max_balance = strtod(v, NULL);
        else if (!strcmp(a, "--fault")) {
            if (strcmp(v, "plan") && strcmp(v, "balance") && strcmp(v, "move")) {
                fprintf(stderr, "scale_sim: --fault %s: plan, balance or move\n", v);
                return 2;
            }
            o.fault = v;
        } else {
            fprintf(stderr, "scale_sim: unknown option %s\n", a);
            return 2;
        }
    }
    if (o.samples == 0 || o.sample_bytes == 0 || o.batch == 0 || o.replicas == 0 ||
        o.replicas > DSC_MAX_REPLICAS || o.window == 0) {
        fprintf(stderr,
                "scale_sim: samples, sample-bytes, batch, window must be > 0 and "
                "replicas 1..%d\n",
                DSC_MAX_REPLICAS);
        return 2;
    }
    dsc_manifest_t m = make_manifest(&o);
    printf("# scale_sim: %llu samples of %llu bytes (%.1f GiB), chunks of %u samples, %u shards "
           "of up to %llu samples\n\n",
           (unsigned long long)o.samples, (unsigned long long)o.sample_bytes,
           (double)o.samples * o.sample_bytes / 1073741824.0, m.shards[0].chunk_samples,
           m.shard_count, (unsigned long long)m.shards[0].samples);
    point_t pts[16];
    int n = 0, bad = 0;
    uint32_t last_ranks = 1;
    if (!strcmp(points, "none"))
        points = "";
    for (const char *p = points; *p && n < 16;) {
        char *end;
        unsigned long s = strtoul(p, &end, 10);
        unsigned long r = *end == 'x' ? strtoul(end + 1, &end, 10) : 0;
        if (s == 0 || r == 0 || s > DSC_MAX_MEMBERS - 1 || r > UINT32_MAX - 1 ||
            (*end != ',' && *end != '\0')) {
            fprintf(stderr, "scale_sim: --points: SERVERSxRANKS,... with 1..%d servers (at %s)\n",
                    DSC_MAX_MEMBERS - 1, p);
            return 2;
        }
        p = *end == ',' ? end + 1 : end;
        double t0 = now_s();
        run_point(&o, &m, (uint32_t)s, (uint32_t)r, &pts[n]);
        fprintf(stderr, "scale_sim: %lux%lu done in %.1f s\n", s, r, now_s() - t0);
        if (o.check)
            bad |= check_point(&o, &pts[n]);
        last_ranks = (uint32_t)r;
        n++;
    }
    if (n > 0)
        print_points(&o, pts, n);
    if (o.plan_cost)
        plan_cost(&o, &m, o.plan_ranks ? o.plan_ranks : n > 0 ? last_ranks : 10000);
    free(m.shards);
    return bad ? 1 : 0;
}
