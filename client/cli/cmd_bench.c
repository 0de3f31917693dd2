/* dscache bench: loader throughput (samples/s, GB/s) and data stall against a running server,
 * optionally with a simulated training step of a given duration between batches. */
#include "cli.h"

#include "bench_plot.h"
#include "dscache.h"
#include "simulate.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *usage_text =
    "usage: dscache bench --server HOST:PORT[,HOST:PORT...] --dataset NAME --batch-size B\n"
    "                     [--seconds S] [--decode-threads N] [--compute-ms MS] [OPTIONS]\n\n"
    "Streams batches through libdscache for S seconds (epoch after epoch) and reports the\n"
    "loader's throughput and the data stall: the share of time spent waiting in next().\n"
    "With --compute-ms, each batch is followed by that much simulated training time (a sleep,\n"
    "as a GPU step leaves the CPU free).\n\n"
    "Options:\n"
    "  --server, --servers LIST  servers (HOST:PORT,..., dns:NAME:PORT or file:PATH)\n"
    "  --dataset NAME            dataset name as served\n"
    "  --batch-size B            samples per batch (default 32)\n"
    "  --seconds S               run time (default 10)\n"
    "  --decode-threads N        checksum + lz4 workers (default 2)\n"
    "  --compute-ms MS           simulated step time per batch (default 0)\n"
    "  --prefetch N              batch slots prepared ahead (default 4)\n"
    "  --connections N           connections per server (default 2)\n"
    "  --inflight BYTES          in-flight budget (default 64M)\n"
    "  --cache BYTES             decoded-chunk budget (default: from the dataset, at least 256M)\n"
    "  --shuffle-window N        samples shuffled together (default: from the dataset,\n"
    "                            min(8192, 64 MiB / sample bytes))\n"
    "  --order local|global      epoch order across ranks (default local; docs/order.md)\n"
    "  --epochs N                stop after N epochs (counted from the start, the first batch\n"
    "                            included) instead of after --seconds; prints the bytes received\n"
    "                            at each epoch's end and those fetched for each epoch's steps\n"
    "                            (N <= 64 listed); the loader is told the job's epochs\n"
    "                            (its epochs option), so nothing of epoch N is fetched or\n"
    "                            hinted to the servers ahead\n"
    "  --no-shuffle              dataset order\n"
    "  --no-assist               next() only waits (default: a waiting next() decodes and\n"
    "                            collates beside the decode threads)\n"
    "  --decode FIELD[=KEY=VALUE,...]\n"
    "                            decode the images of FIELD (JPEG, PNG, WebP) in the loader, as\n"
    "                            Python's decode={FIELD: dscache.Image(...)}, with its keys:\n"
    "                            size=S or HxW (default 224), crop=center|random_resized|none,\n"
    "                            scale=MIN:MAX, ratio=MIN:MAX, flip=0|1, layout=chw|hwc,\n"
    "                            background=R:G:B; e.g. --decode image=size=224,flip=1\n"
    "                            (repeatable, one field each)\n"
    "  --on-decode-error raise|fill\n"
    "                            an image that does not decode fails the run (raise, the\n"
    "                            default) or is a zero image counted in decode_errors (fill)\n"
    "  --seed S                  shuffle seed (default 0)\n"
    "  --rank R --world-size W   this rank of W (default 0 of 1)\n"
    "  --job NAME                job name reported to the servers (default: DSCACHE_JOB, else\n"
    "                            HOST-PID; see dscache top)\n"
    "  --report-seconds S        seconds between reports to the servers (default 5)\n"
    "  --plot FILE.png           draw throughput and stall over time with the stage breakdown\n"
    "                            (needs python3-matplotlib; the series is also kept as\n"
    "                            FILE.csv)\n"
    "  --plot-interval S         seconds per point of the plot (default 0.5)\n"
    "  -h, --help                this text\n";

/* Two numbers "A:B" (scale=, ratio=). Returns 0 or -1. */
static int parse_pair(const char *v, double out[2]) {
    char *end;
    out[0] = strtod(v, &end);
    if (end == v || *end != ':')
        return -1;
    const char *b = end + 1;
    out[1] = strtod(b, &end);
    return end == b || *end != '\0' ? -1 : 0;
}

/* One --decode FIELD[=KEY=VALUE,...] into *fo (initialised here). The keys are dscache.Image's
 * arguments; the library checks the ranges at create and names the field. Returns 0 or
 * DSC_CLI_USAGE (the message printed). */
static int parse_decode(const char *cmd, const char *arg, dsc_field_options_t *fo) {
    dsc_field_options_init(fo, sizeof *fo);
    fo->image = 1;
    static char names[16][64];
    static int used;
    const char *eq = strchr(arg, '=');
    size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
    if (n == 0 || n >= sizeof names[0] || used >= 16)
        return dsc_cli_usage(cmd, "--decode wants FIELD[=KEY=VALUE,...] (at most 16), not '%s'",
                             arg);
    memcpy(names[used], arg, n);
    names[used][n] = '\0';
    fo->name = names[used++];
    char keys[256];
    snprintf(keys, sizeof keys, "%s", eq ? eq + 1 : "");
    for (char *save = NULL, *kv = strtok_r(keys, ",", &save); kv != NULL;
         kv = strtok_r(NULL, ",", &save)) {
        char *v = strchr(kv, '=');
        if (v == NULL)
            return dsc_cli_usage(cmd, "--decode %s: '%s' is not KEY=VALUE", fo->name, kv);
        *v++ = '\0';
        char *end = NULL;
        int ok = 1;
        if (strcmp(kv, "size") == 0) {
            unsigned long h = strtoul(v, &end, 10), w = h;
            if (*end == 'x')
                w = strtoul(end + 1, &end, 10);
            ok = end != v && *end == '\0' && h > 0 && w > 0 && h <= 8192 && w <= 8192;
            fo->image_height = (uint32_t)h;
            fo->image_width = (uint32_t)w;
        } else if (strcmp(kv, "crop") == 0) {
            ok = strcmp(v, "center") == 0 || strcmp(v, "random_resized") == 0 ||
                 strcmp(v, "none") == 0;
            fo->image_crop = v[0] == 'c'   ? DSC_IMAGE_CROP_CENTER
                             : v[0] == 'r' ? DSC_IMAGE_CROP_RANDOM_RESIZED
                                           : DSC_IMAGE_CROP_NONE;
        } else if (strcmp(kv, "scale") == 0) {
            ok = parse_pair(v, fo->image_scale) == 0;
        } else if (strcmp(kv, "ratio") == 0) {
            ok = parse_pair(v, fo->image_ratio) == 0;
        } else if (strcmp(kv, "flip") == 0) {
            ok = strcmp(v, "0") == 0 || strcmp(v, "1") == 0;
            fo->image_flip = v[0] == '1';
        } else if (strcmp(kv, "layout") == 0) {
            ok = strcmp(v, "chw") == 0 || strcmp(v, "hwc") == 0;
            fo->image_layout = v[0] == 'c' ? DSC_IMAGE_LAYOUT_CHW : DSC_IMAGE_LAYOUT_HWC;
        } else if (strcmp(kv, "background") == 0) {
            unsigned long rgb[3];
            const char *p = v;
            for (int c = 0; c < 3 && ok; c++) {
                rgb[c] = strtoul(p, &end, 10);
                ok = end != p && rgb[c] <= 255 && *end == (c < 2 ? ':' : '\0');
                p = end + 1;
                fo->image_background_rgb[c] = (uint8_t)rgb[c];
            }
            fo->image_background = 1;
        } else {
            return dsc_cli_usage(cmd,
                                 "--decode %s: unknown key '%s' (size, crop, scale, ratio, flip, "
                                 "layout, background)",
                                 fo->name, kv);
        }
        if (!ok)
            return dsc_cli_usage(cmd, "--decode %s: bad %s '%s' (see --help)", fo->name, kv, v);
    }
    return 0;
}

int dsc_cmd_bench(int argc, char **argv) {
    const char *cmd = "bench";
    dsc_loader_options_t o;
    dsc_loader_options_init(&o);
    double seconds = 10, compute_ms = 0;
    dsc_bench_plot_t plot = {.png = NULL, .interval = 0.5};
    uint64_t max_epochs = 0, epoch_wire[64] = {0}, epoch_attr[64] = {0};
    dsc_field_options_t decode[16];
    uint32_t decode_count = 0;
    int on_decode_error = DSC_DECODE_ERROR_FAIL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(usage_text, stdout);
            return DSC_CLI_OK;
        }
        if (strcmp(a, "--no-shuffle") == 0) {
            o.shuffle = 0;
            continue;
        }
        if (strcmp(a, "--no-assist") == 0) {
            o.no_assist = 1;
            continue;
        }
        if (i + 1 >= argc)
            return dsc_cli_usage(cmd, "option %s needs a value", a);
        const char *v = argv[++i];
        uint64_t n = 0;
        if (strcmp(a, "--server") == 0 || strcmp(a, "--servers") == 0) {
            o.servers = v;
        } else if (strcmp(a, "--decode") == 0) {
            if (decode_count == 16 || parse_decode(cmd, v, &decode[decode_count]) != 0)
                return decode_count == 16 ? dsc_cli_usage(cmd, "--decode: at most 16 fields")
                                          : DSC_CLI_USAGE;
            decode_count++;
        } else if (strcmp(a, "--on-decode-error") == 0) {
            if (strcmp(v, "raise") != 0 && strcmp(v, "fill") != 0)
                return dsc_cli_usage(cmd, "--on-decode-error wants raise or fill, not '%s'", v);
            on_decode_error = v[0] == 'f' ? DSC_DECODE_ERROR_FILL : DSC_DECODE_ERROR_FAIL;
        } else if (strcmp(a, "--job") == 0) {
            o.job_name = v;
        } else if (strcmp(a, "--plot") == 0) {
            plot.png = v;
        } else if (strcmp(a, "--report-seconds") == 0 || strcmp(a, "--plot-interval") == 0) {
            char *end;
            double d = strtod(v, &end);
            if (*v == '\0' || *end != '\0' || !(d >= 0.05) || d > 3600)
                return dsc_cli_usage(cmd, "%s wants seconds in [0.05, 3600], not '%s'", a, v);
            if (a[2] == 'r')
                o.report_seconds = d;
            else
                plot.interval = d;
        } else if (strcmp(a, "--dataset") == 0) {
            o.dataset = v;
        } else if (strcmp(a, "--seconds") == 0 || strcmp(a, "--compute-ms") == 0) {
            char *end;
            double d = strtod(v, &end);
            if (*v == '\0' || *end != '\0' || !(d >= 0) || d > 1e6)
                return dsc_cli_usage(cmd, "%s wants a number of %s, not '%s'", a,
                                     a[2] == 's' ? "seconds" : "milliseconds", v);
            if (a[2] == 's')
                seconds = d;
            else
                compute_ms = d;
        } else if (strcmp(a, "--inflight") == 0 || strcmp(a, "--cache") == 0) {
            if (dsc_cli_parse_size(cmd, a, v, &n) < 0)
                return DSC_CLI_USAGE;
            if (a[2] == 'i')
                o.inflight_bytes = n;
            else
                o.cache_bytes = n;
        } else if (strcmp(a, "--order") == 0) {
            if (strcmp(v, "local") == 0)
                o.order = DSC_ORDER_LOCAL;
            else if (strcmp(v, "global") == 0)
                o.order = DSC_ORDER_GLOBAL;
            else
                return dsc_cli_usage(cmd, "--order wants local or global, not '%s'", v);
        } else if (strcmp(a, "--epochs") == 0) {
            if (dsc_cli_parse_u64(cmd, a, v, 1, 1u << 20, &max_epochs) < 0)
                return DSC_CLI_USAGE;
        } else if (strcmp(a, "--seed") == 0) {
            if (dsc_cli_parse_u64(cmd, a, v, 0, UINT64_MAX, &n) < 0)
                return DSC_CLI_USAGE;
            o.seed = n;
        } else {
            static const struct {
                const char *name;
                uint64_t min, max;
            } ints[] = {{"--batch-size", 1, 1u << 20},     {"--decode-threads", 1, 256},
                        {"--prefetch", 1, 1024},           {"--connections", 1, 64},
                        {"--shuffle-window", 1, 1u << 30}, {"--rank", 0, 1u << 20},
                        {"--world-size", 1, 1u << 20}};
            size_t k = 0;
            while (k < sizeof ints / sizeof ints[0] && strcmp(a, ints[k].name) != 0)
                k++;
            if (k == sizeof ints / sizeof ints[0])
                return dsc_cli_usage(cmd, "unknown option %s", a);
            if (dsc_cli_parse_u64(cmd, a, v, ints[k].min, ints[k].max, &n) < 0)
                return DSC_CLI_USAGE;
            uint32_t *dst[] = {&o.batch_size,  &o.decode_threads, &o.prefetch_batches,
                               &o.connections, &o.shuffle_window, &o.rank,
                               &o.world_size};
            *dst[k] = (uint32_t)n;
        }
    }
    if (o.servers == NULL)
        return dsc_cli_usage(cmd, "--server is required");
    if (o.dataset == NULL)
        return dsc_cli_usage(cmd, "--dataset is required");
    if (o.rank >= o.world_size)
        return dsc_cli_usage(cmd, "--rank must be below --world-size");
    if (getenv("DSCACHE_LOG") == NULL)
        o.log_level = DSC_LOG_ERROR;
    /* A job of N epochs says so: its last epoch fetches (and hints) nothing of the next. */
    o.epochs = max_epochs;
    for (uint32_t k = 0; k < decode_count; k++)
        decode[k].on_decode_error = on_decode_error;
    o.field_options = decode_count > 0 ? decode : NULL;
    o.field_option_count = decode_count;

    dsc_loader_t *loader = NULL;
    o.auth_file = dsc_cli_auth_file();
    int rc = dsc_loader_create(&o, &loader);
    if (rc < 0)
        return dsc_cli_fail(cmd, "cannot open %s on %s: %s (%s)", o.dataset, o.servers,
                            dsc_strerror(rc), dsc_err_name(rc));
    uint64_t sample_bytes = 0;
    for (uint32_t f = 0; f < dsc_loader_field_count(loader); f++) {
        dsc_field_info_t fi;
        if (dsc_loader_field(loader, f, &fi) == 0)
            sample_bytes += fi.sample_bytes;
    }
    /* The first batch (connection set-up, first fetches) is not part of the measurement. */
    dsc_batch_t *batch = NULL;
    rc = dsc_loader_next(loader, &batch);
    dsc_stats_t s0 = {.struct_size = sizeof s0};
    dsc_loader_stats(loader, &s0);
    double t0 = dsc_now_s();
    uint64_t epochs = 0;
    if (max_epochs > 0) { /* the whole epochs count, the first batch included: every counter
                             from creation, as stats() gives them (the requests of a small
                             dataset all go out before the first batch is handed out) */
        memset(&s0, 0, sizeof s0);
        s0.struct_size = sizeof s0;
        t0 = dsc_now_s();
    }
    if (plot.png != NULL && dsc_bench_plot_open(&plot, cmd, loader, t0) < 0) {
        dsc_loader_destroy(loader);
        return DSC_CLI_FAIL;
    }
    while ((rc == 0 || rc == DSC_EOF) &&
           (max_epochs > 0 ? epochs < max_epochs : dsc_now_s() - t0 < seconds)) {
        if (rc == 0) {
            dsc_simulate_step(compute_ms / 1000.0);
        } else {
            epochs++;
            dsc_stats_t se = {.struct_size = sizeof se};
            dsc_loader_stats(loader, &se);
            if (max_epochs > 0 && epochs <= 64)
                epoch_wire[epochs - 1] = se.wire_bytes,
                                    epoch_attr[epochs - 1] = se.epoch_wire_bytes;
            if (epochs == max_epochs)
                break;
        }
        rc = dsc_loader_next(loader, &batch);
        if (plot.png != NULL)
            dsc_bench_plot_sample(&plot, loader, dsc_now_s());
    }
    double wall = dsc_now_s() - t0;
    dsc_stats_t s1 = {.struct_size = sizeof s1};
    dsc_loader_stats(loader, &s1);
    if (plot.png != NULL)
        dsc_bench_plot_sample(&plot, loader, dsc_now_s());
    dsc_loader_destroy(loader);
    if (rc < 0 && rc != DSC_EOF)
        return dsc_cli_fail(cmd, "loader failed: %s (%s)", dsc_strerror(rc), dsc_err_name(rc));
    uint64_t samples = s1.samples - s0.samples;
    double bytes = (double)(s1.bytes - s0.bytes);
    double stall = s1.stall_seconds - s0.stall_seconds;
    double compute = s1.compute_seconds - s0.compute_seconds;
    printf("dataset %s: %llu-byte samples, batch %u, %u decode thread(s), %u connection(s), "
           "compute %.1f ms/batch\n",
           o.dataset, (unsigned long long)sample_bytes, o.batch_size, o.decode_threads,
           o.connections, compute_ms);
    printf("%.1f s: %llu batches, %llu samples, %llu epoch boundaries\n", wall,
           (unsigned long long)(s1.batches - s0.batches), (unsigned long long)samples,
           (unsigned long long)epochs);
    printf("throughput: %.0f samples/s, %.3f GB/s decoded, %.3f GB/s received\n", samples / wall,
           bytes / wall / 1e9, (double)(s1.wire_bytes - s0.wire_bytes) / wall / 1e9);
    /* The loader's own counters as its stats() gives them: since its creation, start-up
     * included (from the first batch, a small dataset's requests, all sent before it, read 0
     * beside the bytes that came after). */
    printf("counted: %llu samples, %llu bytes decoded (the batches handed out), %llu bytes "
           "received, %llu requests, %.2f s decoding images, %llu decode errors (since the "
           "loader's creation, as its stats())\n",
           (unsigned long long)s1.samples, (unsigned long long)s1.bytes,
           (unsigned long long)s1.wire_bytes, (unsigned long long)s1.requests, s1.image_seconds,
           (unsigned long long)s1.decode_errors);
    if (max_epochs > 0) {
        printf("received: %llu bytes in %llu epoch(s), %llu refetches; at each epoch's end:",
               (unsigned long long)(s1.wire_bytes - s0.wire_bytes), (unsigned long long)epochs,
               (unsigned long long)s1.refetches);
        for (uint64_t e = 0; e < epochs && e < 64; e++)
            printf(" %llu", (unsigned long long)epoch_wire[e]);
        printf("\nfetched for each epoch's steps:");
        for (uint64_t e = 0; e < epochs && e < 64; e++)
            printf(" %llu", (unsigned long long)epoch_attr[e]);
        printf("\n");
    }
    printf("stall: %.1f%% (%.2f s waiting in next(), %.2f s computing)\n",
           stall + compute > 0 ? 100 * stall / (stall + compute) : 0.0, stall, compute);
    /* Requests are in counted: (a request sent before the first batch is answered after it:
     * differenced from there, a small dataset read "requests 0" beside the bytes received). */
    printf("busy: network %.2f s, decode %.2f s, collate %.2f s; failovers %llu, chunks placed "
           "straight into slots %llu, work done by a waiting next() %llu%s\n",
           s1.network_seconds - s0.network_seconds, s1.decode_seconds - s0.decode_seconds,
           s1.collate_seconds - s0.collate_seconds,
           (unsigned long long)(s1.failovers - s0.failovers),
           (unsigned long long)(s1.placed_chunks - s0.placed_chunks),
           (unsigned long long)(s1.assists - s0.assists), o.no_assist ? " (--no-assist)" : "");
    /* What next() waited on (stats() "stall_waits"), the verdict's first evidence. */
    printf("stall by cause: plan %.2f s, queued %.2f s, budget %.2f s, network %.2f s, decode %.2f "
           "s, collate %.2f s\n",
           s1.stall_waits[DSC_STALL_WAIT_PLAN] - s0.stall_waits[DSC_STALL_WAIT_PLAN],
           s1.stall_waits[DSC_STALL_WAIT_QUEUED] - s0.stall_waits[DSC_STALL_WAIT_QUEUED],
           s1.stall_waits[DSC_STALL_WAIT_BUDGET] - s0.stall_waits[DSC_STALL_WAIT_BUDGET],
           s1.stall_waits[DSC_STALL_WAIT_NETWORK] - s0.stall_waits[DSC_STALL_WAIT_NETWORK],
           s1.stall_waits[DSC_STALL_WAIT_DECODE] - s0.stall_waits[DSC_STALL_WAIT_DECODE],
           s1.stall_waits[DSC_STALL_WAIT_COLLATE] - s0.stall_waits[DSC_STALL_WAIT_COLLATE]);
    if (s1.slow_marks + s1.hedges + s1.stalls_excused >
        s0.slow_marks + s0.hedges + s0.stalls_excused)
        printf("stragglers: %llu slow marks, %llu requests hedged (%llu won, %llu denied by the "
               "budget), %llu bytes hedged, %llu late bytes dropped (%.2f%% of received), %llu "
               "stalls excused (PING answered)\n",
               (unsigned long long)(s1.slow_marks - s0.slow_marks),
               (unsigned long long)(s1.hedges - s0.hedges),
               (unsigned long long)(s1.hedges_won - s0.hedges_won),
               (unsigned long long)(s1.hedges_denied - s0.hedges_denied),
               (unsigned long long)(s1.hedge_bytes - s0.hedge_bytes),
               (unsigned long long)(s1.hedge_wasted_bytes - s0.hedge_wasted_bytes),
               s1.wire_bytes > s0.wire_bytes
                   ? 100.0 * (double)(s1.hedge_wasted_bytes - s0.hedge_wasted_bytes) /
                         (double)(s1.wire_bytes - s0.wire_bytes)
                   : 0.0,
               (unsigned long long)(s1.stalls_excused - s0.stalls_excused));
    char verdict[sizeof s1.evidence + sizeof s1.suggestion + sizeof s1.bottleneck_server + 64];
    snprintf(verdict, sizeof verdict, "limit: %s%s%s: %s", dsc_bottleneck_name(s1.bottleneck),
             s1.bottleneck_server[0] ? " " : "", s1.bottleneck_server, s1.evidence);
    printf("%s\nsuggestion: %s\n", verdict, s1.suggestion);
    if (plot.png != NULL) {
        /* The picture's footer says what the run printed, not the last interval's verdict. */
        size_t n = strlen(verdict);
        snprintf(verdict + n, sizeof verdict - n, " - %s", s1.suggestion);
        return dsc_bench_plot_finish(&plot, cmd, verdict);
    }
    return DSC_CLI_OK;
}
