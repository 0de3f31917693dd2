/* The C mixture against one loader on the same documents, in one run: three token datasets
 * (60 / 30 / 10% of N log-normal documents) and a fourth holding all of them, written by
 * dsc_writer_* and read from their files (no server, so the loaders' own cost shows). Per round:
 * samples/s of dsc_loader_next (views only, as a zero-copy trainer) and of dsc_mixture_next
 * (every sample gathered into the mixture's buffers) and of dsc_loader_next of a loader made
 * with options.sources (composed into its batch slots), batch 64, the single loader with 6
 * decode threads, as many as the mixture's three loaders of 2; prints each round and the
 * median ratio. The first epoch of each (files read, decoded) is what is timed. usage:
 * bench_mixture_c [DOCS] [ROUNDS] */
#include "dscache.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    uint64_t docs = argc > 1 ? strtoull(argv[1], NULL, 10) : 20000;
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    char root[128], dirs[4][160];
    snprintf(root, sizeof root, "/tmp/dsc-bench-mix-%d", (int)getpid());
    const char *names[4] = {"web", "code", "books", "all"};
    dsc_writer_t *w[4];
    for (int k = 0; k < 4; k++) {
        snprintf(dirs[k], sizeof dirs[k], "%s/%s", root, names[k]);
        dsc_writer_options_t wo;
        dsc_writer_options_init(&wo, sizeof wo);
        wo.path = dirs[k], wo.name = names[k], wo.fields = "input_ids:i32[]";
        if (dsc_writer_create(&wo, &w[k]) != 0)
            return 1;
    }
    static int32_t buf[8192];
    uint64_t x = 1;
    for (uint64_t d = 0; d < docs; d++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        double u1 = ((double)(x >> 11) + 1) / 9007199254740993.0;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        double u2 = (double)(x >> 11) / 9007199254740992.0;
        double len = exp(6.0 + 1.3 * sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
        uint64_t n = len < 1 ? 1 : len > 8192 ? 8192 : (uint64_t)len;
        for (uint64_t t = 0; t < n; t++)
            buf[t] = (int32_t)(d + t);
        dsc_writer_value_t v = {buf, n * 4};
        int k = d % 10 < 6 ? 0 : d % 10 < 9 ? 1 : 2;
        if (dsc_writer_add(w[k], &v, 1) != 0 || dsc_writer_add(w[3], &v, 1) != 0)
            return 1;
    }
    for (int k = 0; k < 4; k++) {
        dsc_writer_stats_t ws;
        ws.struct_size = sizeof ws;
        if (dsc_writer_finish(w[k], &ws) != 0)
            return 1;
    }
    dsc_loader_options_t o;
    DSC_LOADER_OPTIONS_INIT(&o);
    o.batch_size = 64;
    double ratios[64], lratios[64];
    uint64_t want = docs; /* samples per measure: one epoch's worth */
    for (int r = 0; r < rounds && r < 64; r++) {
        dsc_loader_t *l;
        o.dataset = "all", o.fallback_path = dirs[3];
        o.decode_threads = 6; /* as many as the mixture's three loaders have together */
        if (dsc_loader_create(&o, &l) != 0)
            return 1;
        dsc_batch_t *b;
        dsc_field_view_t fv;
        fv.struct_size = sizeof fv;
        dsc_loader_next(l, &b); /* warm-up */
        uint64_t got = 0;
        double t0 = now();
        while (got < want) {
            int rc = dsc_loader_next(l, &b);
            if (rc == DSC_EOF)
                continue;
            if (rc < 0)
                return 1;
            dsc_batch_field_view(b, 0, &fv);
            got += dsc_batch_samples(b);
        }
        double single = (double)got / (now() - t0);
        dsc_loader_destroy(l);
        dsc_source_options_t so[3];
        double wts[3] = {0.6, 0.3, 0.1};
        for (int k = 0; k < 3; k++) {
            dsc_source_options_init(&so[k], sizeof so[k]);
            so[k].dataset = names[k], so[k].fallback_path = dirs[k], so[k].weight = wts[k];
        }
        o.dataset = NULL, o.fallback_path = NULL;
        o.decode_threads = 2;
        dsc_mixture_t *m;
        if (dsc_mixture_create(&o, so, 3, NULL, 0, &m) != 0)
            return 1;
        dsc_mixture_batch_t mb;
        mb.struct_size = sizeof mb;
        dsc_mixture_next(m, &mb);
        got = 0;
        t0 = now();
        while (got < want) {
            if (dsc_mixture_next(m, &mb) != 0)
                return 1;
            dsc_mixture_field_view(m, 0, &fv);
            got += mb.samples;
        }
        double mix = (double)got / (now() - t0);
        dsc_mixture_destroy(m);
        /* The loader over the mixture (dsc_loader_create with sources): batches composed into
         * its slots, handed out by dsc_loader_next as the single loader's are. */
        o.sources = so, o.n_sources = 3;
        if (dsc_loader_create(&o, &l) != 0)
            return 1;
        o.sources = NULL, o.n_sources = 0;
        dsc_loader_next(l, &b);
        got = 0;
        t0 = now();
        while (got < want) {
            if (dsc_loader_next(l, &b) != 0)
                return 1;
            dsc_batch_field_view(b, 0, &fv);
            got += dsc_batch_samples(b);
        }
        double mixl = (double)got / (now() - t0);
        dsc_loader_destroy(l);
        ratios[r] = mix / single;
        lratios[r] = mixl / single;
        printf("round %d: single loader %.0f samples/s, C mixture %.0f samples/s (%.2fx), loader "
               "over the mixture %.0f samples/s (%.2fx)\n",
               r, single, mix, ratios[r], mixl, lratios[r]);
    }
    qsort(ratios, (size_t)rounds, sizeof ratios[0], cmp);
    qsort(lratios, (size_t)rounds, sizeof lratios[0], cmp);
    printf("median ratio C mixture / single loader: %.2fx\n", ratios[rounds / 2]);
    printf("median ratio loader over the mixture / single loader: %.2fx\n", lratios[rounds / 2]);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    return system(cmd) == 0 ? 0 : 1;
}
