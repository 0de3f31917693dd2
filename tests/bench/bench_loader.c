/* Loader benchmark: libdscache against plain pipelined GETs of the same chunks from the same
 * dscached (its raw GET throughput), raw and lz4 datasets, 1 and 2 decode threads; lz4 decoding
 * per loader thread against in-process LZ4; the data stall of a simulated trainer that needs a
 * given GB/s. Makes its own datasets and server; every figure is the median of interleaved runs.
 * usage: bench_loader --help   (dscached and dscache are found beside it) */
#include "bench_common.h"
#include "conn.h"
#include "dscache.h"
#include "manifest.h"
#include "manifest_io.h"
#include "shard.h"
#include "simulate.h"
#include "testdata.h"
#include "util.h"

#include <lz4.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_REPS 9
_Static_assert(MAX_REPS <= BENCH_MAX_REPS, "median() takes at most BENCH_MAX_REPS runs");
#define GET_DEPTH 16

static double seconds = 2;
static int reps = 3;
static uint32_t batch = 256, connections = 2;
static int no_assist = 0; /* --no-assist: next() only waits */
static uint64_t samples = 80000;
static uint64_t cache_bytes = 128ull << 20;
static int server_threads = 0;
static char bindir[4096];
static char work[64];
static char addr[64];
static pid_t server_pid = -1;

/* ---- process and machine helpers ------------------------------------------------------- */

static int run_wait(char *const argv[], const char *log) {
    pid_t pid = spawn(argv, log, 1);
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* ---- plain pipelined GETs: every chunk of the dataset, round robin ------------------------ */

typedef struct get_job {
    const char *dataset;
    const dsc_manifest_t *m;
    uint32_t thread, threads;
    double deadline;
    uint64_t bytes;
    int rc;
} get_job_t;

/* GET_DEPTH one-chunk requests in flight on one connection; each answer lands in one reused
 * buffer: the server's delivery rate with the least client work there is. */
static void *get_thread(void *arg) {
    get_job_t *job = arg;
    dsc_conn_t *conn = NULL;
    job->rc = dsc_conn_open_addr(addr, 5000, 0, &conn);
    if (job->rc < 0)
        return NULL;
    uint8_t *buf = malloc(DSC_FRAME_MAX_BODY);
    uint64_t next_id = 1, outstanding = 0;
    uint32_t shard = 0, chunk = job->thread;
    while (buf != NULL) {
        int done = dsc_now_s() >= job->deadline;
        while (!done && outstanding < GET_DEPTH) {
            while (chunk >= job->m->shards[shard].chunks) {
                chunk -= job->m->shards[shard].chunks;
                shard = (shard + 1) % job->m->shard_count;
            }
            dsc_get_req_t req = {.dataset = {job->dataset, (uint16_t)strlen(job->dataset)},
                                 .shard_id = shard,
                                 .first_chunk = chunk,
                                 .chunk_count = 1};
            uint8_t body[128];
            int len = dsc_get_req_encode(&req, body, sizeof body);
            if (len < 0 ||
                (job->rc = dsc_conn_send(conn, DSC_OP_GET, next_id++, body, (size_t)len)) < 0)
                goto out;
            outstanding++;
            chunk += job->threads;
        }
        if (outstanding == 0)
            break;
        dsc_frame_header_t h;
        if ((job->rc = dsc_conn_recv_header(conn, &h)) < 0 ||
            (job->rc = dsc_conn_recv_body(conn, buf, h.body_len)) < 0)
            goto out;
        if (h.status != DSC_STATUS_OK) {
            job->rc = dsc_status_to_err(h.status);
            goto out;
        }
        job->bytes += h.body_len;
        outstanding--;
    }
out:
    free(buf);
    dsc_conn_close(conn);
    return NULL;
}

typedef struct result {
    double gbps;      /* GET: bytes received; loader: decoded batch bytes handed out */
    double wire_gbps; /* loader: bytes received */
    double samples_s;
    double stall;         /* loader: stall / (stall + compute) */
    double decode_s;      /* loader: summed decode seconds */
    double wire_bytes;    /* loader */
    double client_cpu_gb; /* CPU seconds of this process per GB handed out (GET: received) */
    double server_cpu_gb; /* CPU seconds of dscached per GB it sent */
    double placed_s;      /* loader: chunks placed straight into slots, per second */
    double step_ms;       /* loader: measured time between next() calls, per batch */
    int failed;
} result_t;

static dsc_manifest_t *fetch_manifest(const char *dataset) {
    dsc_conn_t *conn = NULL;
    uint8_t req[128];
    int len = dsc_name_req_encode(dataset, req, sizeof req);
    uint8_t *body = NULL;
    size_t body_len = 0;
    dsc_manifest_t *m = NULL;
    if (len < 0 || dsc_conn_open_addr(addr, 5000, 0, &conn) < 0 ||
        dsc_conn_call(conn, DSC_OP_MANIFEST, req, (size_t)len, &body, &body_len) < 0 ||
        dsc_manifest_parse((const char *)body, body_len, &m) < 0) {
        fprintf(stderr, "bench_loader: cannot read the manifest of %s from %s\n", dataset, addr);
        m = NULL;
    }
    free(body);
    dsc_conn_close(conn);
    return m;
}

static result_t run_get(const char *dataset, double secs) {
    result_t r = {0};
    dsc_manifest_t *m = fetch_manifest(dataset);
    if (m == NULL) {
        r.failed = 1;
        return r;
    }
    get_job_t jobs[64];
    pthread_t th[64];
    double c0 = self_cpu_seconds(), s0 = proc_cpu_seconds(server_pid), t0 = dsc_now_s();
    for (uint32_t i = 0; i < connections; i++) {
        jobs[i] = (get_job_t){dataset, m, i, connections, t0 + secs, 0, 0};
        pthread_create(&th[i], NULL, get_thread, &jobs[i]);
    }
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < connections; i++) {
        pthread_join(th[i], NULL);
        bytes += jobs[i].bytes;
        if (jobs[i].rc < 0) {
            fprintf(stderr, "bench_loader: GET %s: %s\n", dataset, dsc_strerror(jobs[i].rc));
            r.failed = 1;
        }
    }
    double wall = dsc_now_s() - t0;
    double gb = bytes / 1e9;
    r.gbps = gb / wall;
    r.wire_gbps = r.gbps;
    r.client_cpu_gb = gb > 0 ? (self_cpu_seconds() - c0) / gb : 0;
    r.server_cpu_gb = gb > 0 ? (proc_cpu_seconds(server_pid) - s0) / gb : 0;
    dsc_manifest_free(m);
    return r;
}

/* ---- the loader ---------------------------------------------------------------------------- */

/* Streams batches for `secs` seconds (epoch after epoch), timed from the first batch; with
 * need_gbps > 0 each batch is followed by batch bytes / need_gbps of sleep (a GPU step). */
static result_t run_loader(const char *dataset, uint32_t threads, int shuffle, uint32_t bsize,
                           double need_gbps, double secs) {
    result_t r = {0};
    dsc_loader_options_t o;
    dsc_loader_options_init(&o);
    o.servers = addr;
    o.dataset = dataset;
    o.batch_size = bsize;
    o.decode_threads = threads;
    o.connections = connections;
    o.shuffle = shuffle;
    o.cache_bytes = cache_bytes;
    o.no_assist = no_assist;
    dsc_loader_t *l = NULL;
    int rc = dsc_loader_create(&o, &l);
    if (rc < 0) {
        fprintf(stderr, "bench_loader: loader on %s: %s\n", dataset, dsc_strerror(rc));
        r.failed = 1;
        return r;
    }
    dsc_batch_t *b;
    rc = dsc_loader_next(l, &b);
    uint64_t sample_bytes = 0;
    for (uint32_t f = 0; f < dsc_loader_field_count(l); f++) {
        dsc_field_info_t fi;
        dsc_loader_field(l, f, &fi);
        sample_bytes += fi.sample_bytes;
    }
    double compute = need_gbps > 0 ? (double)bsize * sample_bytes / (need_gbps * 1e9) : 0;
    dsc_stats_t a = {.struct_size = sizeof a}, z = {.struct_size = sizeof z};
    dsc_loader_stats(l, &a);
    double c0 = self_cpu_seconds(), s0 = proc_cpu_seconds(server_pid), t0 = dsc_now_s();
    while ((rc == 0 || rc == DSC_EOF) && dsc_now_s() - t0 < secs) {
        if (rc == 0)
            dsc_simulate_step(compute);
        rc = dsc_loader_next(l, &b);
    }
    double wall = dsc_now_s() - t0;
    dsc_loader_stats(l, &z);
    double client_cpu = self_cpu_seconds() - c0, server_cpu = proc_cpu_seconds(server_pid) - s0;
    dsc_loader_destroy(l);
    if (rc < 0 && rc != DSC_EOF) {
        fprintf(stderr, "bench_loader: loader on %s failed: %s\n", dataset, dsc_strerror(rc));
        r.failed = 1;
    }
    double gb = (double)(z.bytes - a.bytes) / 1e9;
    r.gbps = gb / wall;
    r.samples_s = (double)(z.samples - a.samples) / wall;
    r.wire_bytes = (double)(z.wire_bytes - a.wire_bytes);
    r.wire_gbps = r.wire_bytes / 1e9 / wall;
    double st = z.stall_seconds - a.stall_seconds, co = z.compute_seconds - a.compute_seconds;
    r.stall = st + co > 0 ? st / (st + co) : 0;
    r.step_ms = z.batches > a.batches ? 1e3 * co / (double)(z.batches - a.batches) : 0;
    r.decode_s = z.decode_seconds - a.decode_seconds;
    r.placed_s = (double)(z.placed_chunks - a.placed_chunks) / wall;
    r.client_cpu_gb = gb > 0 ? client_cpu / gb : 0;
    r.server_cpu_gb = r.wire_bytes > 0 ? server_cpu / (r.wire_bytes / 1e9) : 0;
    return r;
}

/* Median over the rounds of one double field of a row's results. */
static double med_field(const result_t *v, size_t off) {
    double x[MAX_REPS];
    for (int r = 0; r < reps; r++)
        memcpy(&x[r], (const char *)&v[r] + off, sizeof x[r]);
    return median(x, reps);
}
#define MEDF(row, field) med_field(row, offsetof(result_t, field))

/* ---- in-process LZ4 on the same chunks ------------------------------------------------------ */

typedef struct lz4_result {
    double lz4_gbps;    /* LZ4_decompress_safe alone, decoded bytes per second */
    double decode_gbps; /* dsc_chunk_decode: stored checksum + LZ4 + decoded checksum */
    double raw_per_stored;
} lz4_result_t;

/* One thread decodes every lz4 chunk of the dataset's files (read into memory first) into one
 * reused buffer. */
static lz4_result_t lz4_inprocess(const char *dir) {
    lz4_result_t r = {0};
    dsc_manifest_t *m = NULL;
    if (dsc_manifest_load(dir, &m) < 0) {
        fprintf(stderr, "bench_loader: cannot load %s/manifest.json\n", dir);
        return r;
    }
    uint64_t out_bytes = 0, raw_total = 0, stored_total = 0;
    double busy_lz4 = 0, busy_decode = 0;
    char *dst = malloc(DSC_CHUNK_MAX_RAW);
    for (uint32_t s = 0; dst != NULL && s < m->shard_count; s++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, m->shards[s].file);
        uint64_t size = 0;
        uint8_t *buf = testdata_read_file(path, &size);
        dsc_shard_view_t v;
        if (buf != NULL && dsc_shard_parse(buf, size, &v) == 0) {
            for (uint32_t c = 0; c < v.footer.chunk_count; c++) {
                dsc_chunk_entry_t e;
                if (dsc_shard_chunk(&v, c, &e) < 0)
                    continue;
                raw_total += e.raw_len;
                stored_total += e.stored_len;
                if (e.codec != DSC_CODEC_LZ4)
                    continue;
                const char *src = (const char *)dsc_shard_chunk_data(&v, &e);
                double t0 = dsc_now_s();
                int n = LZ4_decompress_safe(src, dst, (int)e.stored_len, (int)e.raw_len);
                double t1 = dsc_now_s();
                int k = dsc_chunk_decode(&e, src, dst, DSC_CHUNK_MAX_RAW);
                double t2 = dsc_now_s();
                if (n == (int)e.raw_len && k == (int)e.raw_len) {
                    busy_lz4 += t1 - t0;
                    busy_decode += t2 - t1;
                    out_bytes += e.raw_len;
                }
            }
        }
        free(buf);
    }
    free(dst);
    dsc_manifest_free(m);
    r.lz4_gbps = busy_lz4 > 0 ? out_bytes / busy_lz4 / 1e9 : 0;
    r.decode_gbps = busy_decode > 0 ? out_bytes / busy_decode / 1e9 : 0;
    r.raw_per_stored = stored_total > 0 ? (double)raw_total / (double)stored_total : 1;
    return r;
}

/* ---- set-up ---------------------------------------------------------------------------------- */

static int make_dataset(const char *name, const char *codec) {
    char cli[4200], out[200], n[32], log[200];
    snprintf(cli, sizeof cli, "%s/dscache", bindir);
    snprintf(out, sizeof out, "%s/%s", work, name);
    snprintf(n, sizeof n, "%llu", (unsigned long long)samples);
    snprintf(log, sizeof log, "%s/ingest-%s.log", work, name);
    char *args[] = {cli,
                    "ingest",
                    "synthetic",
                    "-o",
                    out,
                    "--name",
                    (char *)name,
                    "--samples",
                    n,
                    "--field",
                    "image:u8:3x32x32",
                    "--field",
                    "label:i64",
                    "--seed",
                    "1",
                    "--compress",
                    (char *)codec,
                    "--shard-size",
                    "16M",
                    "--chunk-size",
                    "1M",
                    NULL};
    if (run_wait(args, log) < 0) {
        fprintf(stderr, "bench_loader: ingest of %s failed (see %s)\n", name, log);
        return -1;
    }
    return 0;
}

static void usage(void) {
    fprintf(stderr,
            "usage: bench_loader [options]\n"
            "  --seconds S          length of each run (default 2)\n"
            "  --reps N             interleaved runs per figure, median reported (default 3, "
            "max %d)\n"
            "  --samples N          samples per dataset (default 80000: 246 MB raw)\n"
            "  --batch B            batch size (default 256)\n"
            "  --connections N      loader connections and GET threads (default 2)\n"
            "  --cache BYTES        the loader's decoded-chunk budget (default 128M, under the\n"
            "                       dataset size, so that an epoch is fetched, not re-served)\n"
            "  --server-threads N   dscached --threads (default: cores)\n"
            "  --no-assist          the consumer's next() only waits (default: it decodes and\n"
            "                       collates while it waits, beside the decode threads)\n",
            MAX_REPS);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--seconds") == 0 && v && (seconds = atof(v)) > 0)
            i++;
        else if (strcmp(a, "--reps") == 0 && v && (reps = atoi(v)) >= 1 && reps <= MAX_REPS)
            i++;
        else if (strcmp(a, "--samples") == 0 && v && (samples = strtoull(v, NULL, 10)) >= 1000)
            i++;
        else if (strcmp(a, "--batch") == 0 && v && (batch = (uint32_t)atoi(v)) >= 1)
            i++;
        else if (strcmp(a, "--connections") == 0 && v && (connections = (uint32_t)atoi(v)) >= 1 &&
                 connections <= 64)
            i++;
        else if (strcmp(a, "--cache") == 0 && v && dsc_parse_size(v, &cache_bytes) == 0 &&
                 cache_bytes > 0)
            i++;
        else if (strcmp(a, "--server-threads") == 0 && v && (server_threads = atoi(v)) >= 1)
            i++;
        else if (strcmp(a, "--no-assist") == 0)
            no_assist = 1;
        else {
            usage();
            return 2;
        }
    }
    if (bench_prepare("bench_loader", bindir, sizeof bindir, work, sizeof work) < 0)
        return 1;
    int rc = 1;
    char log[200];
    snprintf(log, sizeof log, "%s/dscached.log", work);
    double load_start = load_average();
    if (make_dataset("lraw", "none") < 0 || make_dataset("llz4", "lz4") < 0)
        goto done;
    int sthreads = server_threads ? server_threads : ncores();
    char threads_text[16], dscached[4200], d1[200], d2[200];
    snprintf(threads_text, sizeof threads_text, "%d", sthreads);
    snprintf(dscached, sizeof dscached, "%s/dscached", bindir);
    snprintf(d1, sizeof d1, "%s/lraw", work);
    snprintf(d2, sizeof d2, "%s/llz4", work);
    bench_dscached_t server = {.prog = "bench_loader",
                               .path = dscached,
                               .data = {d1, d2},
                               .memory = "1G",
                               .threads = threads_text,
                               .work = work,
                               .log = log,
                               .log_stdout = 1};
    if (bench_start_dscached(&server, &server_pid, addr, sizeof addr) < 0)
        goto done;
    /* Untimed passes: the server has every shard in RAM, both sides touched their memory. */
    int failed = run_get("lraw", 1.0).failed | run_get("llz4", 1.0).failed;
    failed |= run_loader("llz4", 2, 1, batch, 0, 0.5).failed;

    enum { GET_RAW, L_RAW1, L_RAW2, L_RAW_SEQ, GET_LZ4, L_LZ41, L_LZ42, L_LZ4_SEQ, ROWS };
    static const double needs[] = {0.25, 0.5, 1.0, 2.0};
    enum { NEEDS = sizeof needs / sizeof needs[0] };
    result_t res[ROWS][MAX_REPS], stall_res[NEEDS][MAX_REPS];
    lz4_result_t inproc[MAX_REPS];
    double ratio[ROWS][MAX_REPS], wire_ratio[ROWS][MAX_REPS];
    uint32_t seq_batch = 4 * batch; /* several chunks per batch: the direct placement path */
    for (int r = 0; r < reps; r++) {
        res[GET_RAW][r] = run_get("lraw", seconds);
        res[L_RAW1][r] = run_loader("lraw", 1, 1, batch, 0, seconds);
        res[L_RAW2][r] = run_loader("lraw", 2, 1, batch, 0, seconds);
        res[L_RAW_SEQ][r] = run_loader("lraw", 2, 0, seq_batch, 0, seconds);
        res[GET_LZ4][r] = run_get("llz4", seconds);
        res[L_LZ41][r] = run_loader("llz4", 1, 1, batch, 0, seconds);
        res[L_LZ42][r] = run_loader("llz4", 2, 1, batch, 0, seconds);
        res[L_LZ4_SEQ][r] = run_loader("llz4", 2, 0, seq_batch, 0, seconds);
        inproc[r] = lz4_inprocess(d2);
        for (int k = 0; k < NEEDS; k++)
            stall_res[k][r] = run_loader("llz4", 2, 1, batch, needs[k], seconds);
        for (int row = 0; row < ROWS; row++) {
            failed |= res[row][r].failed;
            /* Paired with the GET run of the same dataset in the same round. */
            double get = row < GET_LZ4 ? res[GET_RAW][r].gbps : res[GET_LZ4][r].gbps;
            ratio[row][r] = get > 0 ? res[row][r].gbps / get : 0;
            wire_ratio[row][r] = get > 0 ? res[row][r].wire_gbps / get : 0;
        }
        for (int k = 0; k < NEEDS; k++)
            failed |= stall_res[k][r].failed;
    }

    char machine[512];
    describe_machine(machine, sizeof machine);
    printf("#### Loader throughput against plain GETs (loopback TCP)\n\n");
    printf("- machine: %s; load average %.2f at the start, %.2f at the end (other work shares "
           "these cores)\n",
           machine, load_start, load_average());
    printf("- dscached with %d event loops on the same machine, every shard in RAM; datasets: "
           "%llu samples of image u8 3x32x32 + label i64 (3080 bytes), 1 MiB chunks, 16 MiB "
           "shards, raw and lz4 (%.2fx)\n",
           sthreads, (unsigned long long)samples, inproc[0].raw_per_stored);
    printf("- plain GET: %u connections, %d one-chunk GETs in flight on each, every answer "
           "received into one reused buffer; loader: %u connections, batch %u, shuffle window "
           "8192, cache_bytes %llu MiB, default in-flight budget; shuffle=0 rows use batch %u "
           "(several chunks per batch: chunks go straight into the slot); %s\n",
           connections, GET_DEPTH, connections, batch, (unsigned long long)(cache_bytes >> 20),
           seq_batch,
           no_assist ? "--no-assist: the consumer only waits in next(), the decode threads do "
                       "all the work"
                     : "the consumer's next() does decoding and collation while it waits "
                       "(assist, the default), beside the decode threads");
    printf("- each figure: median of %d interleaved rounds of %.1f s runs; \"vs GET\" columns "
           "are medians of per-round ratios against the GET run of the same dataset in the same "
           "round, by the batch bytes handed out (decoded; a chunk still held from the previous "
           "epoch's look-ahead is not fetched again) and by the bytes received; spread = (max - "
           "min) / median of GB/s; CPU = user + system seconds per GB handed out (client: this "
           "process, all its threads; server: dscached per GB it sent)\n\n",
           reps, seconds);
    printf("| run | samples/s | GB/s handed out | GB/s received | vs GET, handed out | vs GET, "
           "received | spread | client CPU s/GB | server CPU s/GB | chunks into slots/s |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    static const char *labels[ROWS] = {
        "plain GET, raw dataset",       "loader raw, 1 decode thread",
        "loader raw, 2 decode threads", "loader raw, shuffle=0, 2 threads",
        "plain GET, lz4 dataset",       "loader lz4, 1 decode thread",
        "loader lz4, 2 decode threads", "loader lz4, shuffle=0, 2 threads",
    };
    for (int row = 0; row < ROWS; row++) {
        int get = row == GET_RAW || row == GET_LZ4;
        double g[MAX_REPS];
        for (int r = 0; r < reps; r++)
            g[r] = res[row][r].gbps;
        if (get)
            printf("| %s | - | - | %.3f | - | 1.00x | %.0f%% | %.3f | %.3f | - |\n", labels[row],
                   median(g, reps), spread(g, reps), MEDF(res[row], client_cpu_gb),
                   MEDF(res[row], server_cpu_gb));
        else
            printf("| %s | %.0f | %.3f | %.3f | %.2fx | %.2fx | %.0f%% | %.3f | %.3f | %.0f |\n",
                   labels[row], MEDF(res[row], samples_s), median(g, reps),
                   MEDF(res[row], wire_gbps), median(ratio[row], reps),
                   median(wire_ratio[row], reps), spread(g, reps), MEDF(res[row], client_cpu_gb),
                   MEDF(res[row], server_cpu_gb), MEDF(res[row], placed_s));
    }
    printf("\n| lz4 decoding, per thread | GB/s decoded | vs LZ4_decompress_safe | vs "
           "dsc_chunk_decode |\n|---|---:|---:|---:|\n");
    double alone[MAX_REPS], full[MAX_REPS];
    for (int r = 0; r < reps; r++) {
        alone[r] = inproc[r].lz4_gbps;
        full[r] = inproc[r].decode_gbps;
    }
    double lz4_alone = median(alone, reps), lz4_full = median(full, reps);
    printf("| in-process LZ4_decompress_safe alone, one thread | %.3f | 1.00x | - |\n", lz4_alone);
    printf("| in-process dsc_chunk_decode (XXH3 of stored + LZ4 + XXH3 of decoded) | %.3f | "
           "%.2fx | 1.00x |\n",
           lz4_full, lz4_alone > 0 ? lz4_full / lz4_alone : 0);
    for (int t = 1; t <= 2; t++) {
        int row = t == 1 ? L_LZ41 : L_LZ42;
        /* Decoded bytes per second of decode-thread time: bytes received x the dataset's
         * raw/stored ratio, over the summed decode time of the workers. */
        double pv[MAX_REPS];
        for (int r = 0; r < reps; r++)
            pv[r] = res[row][r].decode_s > 0 ? res[row][r].wire_bytes * inproc[r].raw_per_stored /
                                                   res[row][r].decode_s / 1e9
                                             : 0;
        double per = median(pv, reps);
        printf("| loader worker, %d decode thread%s (wall time per chunk, preemption included) "
               "| %.3f | %.2fx | %.2fx |\n",
               t, t == 1 ? "" : "s", per, lz4_alone > 0 ? per / lz4_alone : 0,
               lz4_full > 0 ? per / lz4_full : 0);
    }
    printf("\n| simulated trainer (lz4, 2 decode threads) needs | compute per batch, asked | "
           "measured | GB/s handed out | data stall |\n|---|---:|---:|---:|---:|\n");
    for (int k = 0; k < NEEDS; k++)
        printf("| %.2f GB/s | %.3f ms | %.3f ms | %.3f | %.1f%% |\n", needs[k],
               (double)batch * 3080 / (needs[k] * 1e9) * 1e3, MEDF(stall_res[k], step_ms),
               MEDF(stall_res[k], gbps), 100 * MEDF(stall_res[k], stall));
    printf("\ntarget: loader raw >= 0.90x plain GET with %u connections (handed out / "
           "received): 1 thread %.2fx / %.2fx, 2 threads %.2fx / %.2fx\n",
           connections, median(ratio[L_RAW1], reps), median(wire_ratio[L_RAW1], reps),
           median(ratio[L_RAW2], reps), median(wire_ratio[L_RAW2], reps));
    if (failed)
        fprintf(stderr, "bench_loader: some runs had errors (see above)\n");
    rc = failed ? 1 : 0;
done:
    if (server_pid > 0) {
        int status = 0;
        kill(server_pid, SIGTERM);
        if (waitpid(server_pid, &status, 0) == server_pid &&
            !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
            fprintf(stderr, "bench_loader: dscached ended with status 0x%x; its log:\n", status);
            char cat[300];
            snprintf(cat, sizeof cat, "tail -n 40 '%s' >&2", log);
            if (system(cat) != 0)
                fprintf(stderr, "bench_loader: cannot show %s\n", log);
            rc = 1;
        }
    }
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_loader: could not remove %s\n", work);
    return rc;
}
