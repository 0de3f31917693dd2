/* Planner-only simulation of the epoch orders (plan.h), no I/O: for a synthetic dataset layout
 * and world sizes, the chunks each rank fetches in one epoch (each distinct chunk a rank needs
 * fetched once: the loader's behaviour when the look-ahead fits cache_bytes) over the dataset's
 * chunks, and two shuffle-quality figures per global batch (the union of every rank's batch of a
 * step): distinct chunks and distinct shards feeding it, each over the expectation for a uniform
 * random batch of the same size; then the local planner's time and memory per rank per epoch.
 * usage: bench_order_sim [--samples N] [--chunk-samples C] [--shard-samples S] [--batch B]
 *                        [--window W] [--worlds 1,8,64,1024] [--rank-sample R] [--steps K]
 *                        [--scale-samples N] [--scale-world W] */
#include "plan.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static long maxrss_kb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static dsc_manifest_t make_manifest(uint64_t samples, uint32_t chunk_samples,
                                    uint64_t shard_samples) {
    dsc_manifest_t m = {.name = "sim"};
    m.shard_count = (uint32_t)((samples + shard_samples - 1) / shard_samples);
    m.shards = calloc(m.shard_count, sizeof *m.shards);
    for (uint32_t i = 0; i < m.shard_count; i++) {
        uint64_t n = samples - i * shard_samples;
        if (n > shard_samples)
            n = shard_samples;
        m.shards[i].id = i;
        m.shards[i].samples = n;
        m.shards[i].chunk_samples = chunk_samples;
        m.shards[i].chunks = (uint32_t)((n + chunk_samples - 1) / chunk_samples);
    }
    m.samples = samples;
    return m;
}

typedef struct sim {
    dsc_order_t *order;
    int local;
    dsc_local_t lp;
    dsc_split_t split;
} sim_t;

static int sim_init(sim_t *s, dsc_order_t *order, int local, uint32_t window, uint32_t batch,
                    uint32_t world) {
    s->order = order;
    s->local = local;
    if (local)
        return dsc__local_init(&s->lp, order, window, 1, NULL, 0, batch, world, 0);
    return dsc__split_init(&s->split, dsc__order_samples(order), 0, batch, world, 0);
}

static uint64_t sim_steps(const sim_t *s) {
    return s->local ? s->lp.steps : s->split.steps;
}

static uint32_t sim_step(sim_t *s, uint64_t step, uint32_t rank, uint64_t *ids) {
    uint64_t first;
    uint32_t n;
    if (s->local) {
        dsc__local_step(&s->lp, step, rank, &first, &n);
        for (uint32_t k = 0; k < n; k++)
            ids[k] = dsc__local_at(&s->lp, rank, first + k);
    } else {
        dsc__split_step(&s->split, step, rank, &first, &n);
        for (uint32_t k = 0; k < n; k++)
            ids[k] = dsc__order_at(s->order, first + k);
    }
    return n;
}

int main(int argc, char **argv) {
    uint64_t samples = 40000, shard_samples = 87381, scale_samples = 100000000;
    uint32_t chunk_samples = 341, batch = 64, window = 8192, rank_sample = 32, steps_q = 64;
    uint32_t scale_world = 1024;
    const char *worlds_arg = "1,2,4,8,16,64,1024";
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        uint64_t n = strtoull(v, NULL, 10);
        if (!strcmp(a, "--samples"))
            samples = n;
        else if (!strcmp(a, "--chunk-samples"))
            chunk_samples = (uint32_t)n;
        else if (!strcmp(a, "--shard-samples"))
            shard_samples = n;
        else if (!strcmp(a, "--batch"))
            batch = (uint32_t)n;
        else if (!strcmp(a, "--window"))
            window = (uint32_t)n;
        else if (!strcmp(a, "--worlds"))
            worlds_arg = v;
        else if (!strcmp(a, "--rank-sample"))
            rank_sample = (uint32_t)n;
        else if (!strcmp(a, "--steps"))
            steps_q = (uint32_t)n;
        else if (!strcmp(a, "--scale-samples"))
            scale_samples = n;
        else if (!strcmp(a, "--scale-world"))
            scale_world = (uint32_t)n;
        else {
            fprintf(stderr, "bench_order_sim: unknown option %s\n", a);
            return 2;
        }
    }
    dsc_manifest_t m = make_manifest(samples, chunk_samples, shard_samples);
    printf("dataset: %llu samples, %u per chunk, %llu per shard (%u shards); batch %u, window "
           "%u\n\n",
           (unsigned long long)samples, chunk_samples, (unsigned long long)shard_samples,
           m.shard_count, batch, window);
    printf("| ranks | order | chunk fetches / chunks | chunks per global batch (x uniform) | "
           "shards per global batch (x uniform) |\n|---|---|---|---|---|\n");
    uint64_t *ids = malloc(sizeof(uint64_t) * batch);
    const char *p = worlds_arg;
    while (*p) {
        uint32_t world = (uint32_t)strtoul(p, (char **)&p, 10);
        if (*p == ',')
            p++;
        if (world == 0)
            break;
        for (int local = 0; local <= 1; local++) {
            dsc_order_t *order = NULL;
            if (dsc__order_create(&m, 1, 1, window, &order) < 0)
                return 1;
            uint64_t chunks = dsc__order_chunks(order);
            unsigned char *touched = calloc(chunks, 1);
            uint32_t *shard_hit = calloc(m.shard_count, sizeof(uint32_t));
            sim_t s;
            if (sim_init(&s, order, local, window, batch, world) < 0)
                return 1;
            /* Traffic: ranks sampled evenly when there are many (the sum scaled up). */
            uint32_t nr = world < rank_sample ? world : rank_sample;
            double fetched = 0;
            for (uint32_t i = 0; i < nr; i++) {
                uint32_t r = (uint32_t)((uint64_t)i * world / nr);
                memset(touched, 0, chunks);
                uint64_t mine = 0;
                for (uint64_t st = 0; st < sim_steps(&s); st++) {
                    uint32_t n = sim_step(&s, st, r, ids);
                    for (uint32_t k = 0; k < n; k++) {
                        dsc_sample_loc_t loc;
                        dsc__order_locate(order, ids[k], &loc);
                        mine += !touched[loc.chunk];
                        touched[loc.chunk] = 1;
                    }
                }
                fetched += (double)mine;
            }
            fetched *= (double)world / nr;
            /* Shuffle quality: the first steps_q global batches. */
            uint64_t gsteps = sim_steps(&s) < steps_q ? sim_steps(&s) : steps_q;
            double dchunks = 0, dshards = 0, gsize = 0;
            /* The last step may be short: left out unless it is the only one. */
            uint64_t qsteps = sim_steps(&s) > 1 && gsteps == sim_steps(&s) ? gsteps - 1 : gsteps;
            for (uint64_t st = 0; st < qsteps; st++) {
                memset(touched, 0, chunks);
                memset(shard_hit, 0, m.shard_count * sizeof(uint32_t));
                uint64_t dc = 0, ds = 0, g = 0;
                for (uint32_t r = 0; r < world; r++) {
                    uint32_t n = sim_step(&s, st, r, ids);
                    g += n;
                    for (uint32_t k = 0; k < n; k++) {
                        dsc_sample_loc_t loc;
                        dsc__order_locate(order, ids[k], &loc);
                        dc += !touched[loc.chunk];
                        touched[loc.chunk] = 1;
                        ds += !shard_hit[loc.shard];
                        shard_hit[loc.shard] = 1;
                    }
                }
                dchunks += (double)dc;
                dshards += (double)ds;
                gsize = (double)g; /* the same for every full step */
            }
            /* Uniform batch of g samples: E[distinct] = sum over units of 1 - (1 - size/N)^g. */
            double uc = 0, us = 0;
            for (uint32_t i = 0; i < m.shard_count; i++) {
                const dsc_manifest_shard_t *sh = &m.shards[i];
                us += 1 - pow(1 - (double)sh->samples / samples, gsize);
                for (uint32_t c = 0; c < sh->chunks; c++) {
                    uint64_t cs = sh->samples - (uint64_t)c * chunk_samples;
                    if (cs > chunk_samples)
                        cs = chunk_samples;
                    uc += 1 - pow(1 - (double)cs / samples, gsize);
                }
            }
            double q = qsteps > 0 ? (double)qsteps : 1;
            printf("| %u | %s | %.3fx | %.1f (%.2fx) | %.1f (%.2fx) |\n", world,
                   local ? "local" : "global", fetched / (double)chunks, dchunks / q,
                   dchunks / q / uc, dshards / q, dshards / q / us);
            fflush(stdout);
            free(touched);
            free(shard_hit);
            dsc__order_destroy(order);
        }
    }
    free(m.shards);

    /* Planner scale: the local order for scale_world ranks over scale_samples samples. */
    long rss0 = maxrss_kb();
    dsc_manifest_t big = make_manifest(scale_samples, chunk_samples, shard_samples);
    dsc_order_t *order = NULL;
    double t0 = now_s();
    if (dsc__order_create(&big, 1, 1, window, &order) < 0)
        return 1;
    double t_create = now_s() - t0;
    long rss1 = maxrss_kb();
    printf("\nplanner scale: %llu samples (%llu chunks, %u shards), %u ranks, batch %u, window "
           "%u\n",
           (unsigned long long)scale_samples, (unsigned long long)dsc__order_chunks(order),
           big.shard_count, scale_world, batch, window);
    printf("order create (epoch 0 included): %.3f s; memory %.1f MiB (max RSS growth)\n", t_create,
           (rss1 - rss0) / 1024.0);
    const uint32_t ranks[] = {0, scale_world / 2, scale_world - 1};
    double worst = 0;
    for (int i = 0; i < 3; i++) {
        t0 = now_s();
        dsc__order_set_epoch(order, 1 + i);
        double t_epoch = now_s() - t0;
        dsc_local_t lp;
        if (dsc__local_init(&lp, order, window, 1, NULL, 0, batch, scale_world, 0) < 0)
            return 1;
        uint64_t sum = 0, n_ids = 0;
        for (uint64_t st = 0; st < lp.steps; st++) {
            uint64_t first;
            uint32_t n;
            dsc__local_step(&lp, st, ranks[i], &first, &n);
            for (uint32_t k = 0; k < n; k++) {
                dsc_sample_loc_t loc;
                uint64_t id = dsc__local_at(&lp, ranks[i], first + k);
                dsc__order_locate(order, id, &loc);
                sum += loc.chunk;
                n_ids++;
            }
        }
        double t_all = now_s() - t0;
        if (t_all > worst)
            worst = t_all;
        printf("rank %u: set_epoch %.3f s, whole epoch's plan (%llu samples, %llu steps) %.3f s "
               "(checksum %llu)\n",
               ranks[i], t_epoch, (unsigned long long)n_ids, (unsigned long long)lp.steps, t_all,
               (unsigned long long)(sum & 0xffff));
    }
    /* The same through 3 resize segments (8 -> 4 -> 2 -> scale_world). */
    dsc_plan_seg_t hist[3] = {{scale_world / 2, batch, 100},
                              {scale_world / 4, batch, 100},
                              {scale_world / 8 ? scale_world / 8 : 1, batch, 100}};
    dsc_local_t lp;
    t0 = now_s();
    if (dsc__local_init(&lp, order, window, 1, hist, 3, batch, scale_world, 0) == 0) {
        uint64_t sum = 0;
        for (uint64_t t = 0; t < lp.per_rank; t++)
            sum += dsc__local_at(&lp, 7, t);
        printf("rank 7 after 3 resizes: %llu samples planned in %.3f s (checksum %llu)\n",
               (unsigned long long)lp.per_rank, now_s() - t0, (unsigned long long)(sum & 0xffff));
    }
    printf("worst rank: %.3f s per epoch; per-rank memory: the order's chunk arrays (%.1f MiB) "
           "and O(segments)\n",
           worst, (double)dsc__order_chunks(order) * 16 / 1048576.0);
    dsc__order_destroy(order);
    free(big.shards);
    free(ids);
    return 0;
}
