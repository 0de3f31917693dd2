/* Loader benchmark against a running dscached: loader throughput vs plain pipelined GETs of the
 * same chunks (same run, same connections), raw and lz4 datasets, 1 and 2 decode threads; lz4
 * decoding per loader thread vs LZ4_decompress_safe in-process on the same chunks; data stall of
 * a simulated trainer consuming a given GB/s.
 * usage: bench_loader --server HOST:PORT --raw NAME --lz4 NAME --lz4-dir DIR [--seconds S]
 *                     [--batch B] [--connections N] */
#include "conn.h"
#include "dscache.h"
#include "manifest.h"
#include "shard.h"
#include "util.h"

#include <lz4.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *server;
static double seconds = 5;
static uint32_t batch = 256, connections = 2;

/* ---- Raw GET throughput: every chunk of the dataset, round robin, pipelined ----------------- */

typedef struct get_job {
    const char *dataset;
    const dsc_manifest_t *m;
    uint32_t thread, threads;
    double deadline;
    uint64_t bytes;
    int rc;
} get_job_t;

static void *get_thread(void *arg) {
    get_job_t *job = arg;
    dsc_conn_t *conn = NULL;
    job->rc = dsc_conn_open_addr(server, 5000, 0, &conn);
    if (job->rc < 0)
        return NULL;
    enum { DEPTH = 16 };
    uint8_t *buf = malloc(DSC_FRAME_MAX_BODY);
    uint64_t next_id = 1, outstanding = 0;
    uint32_t shard = 0, chunk = job->thread;
    while (buf != NULL) {
        int done = dsc_now_s() >= job->deadline;
        while (!done && outstanding < DEPTH) {
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

static double raw_get_gbps(const char *dataset) {
    dsc_conn_t *conn = NULL;
    uint8_t req[128];
    int len = dsc_name_req_encode(dataset, req, sizeof req);
    uint8_t *body = NULL;
    size_t body_len = 0;
    dsc_manifest_t *m = NULL;
    if (len < 0 || dsc_conn_open_addr(server, 5000, 0, &conn) < 0 ||
        dsc_conn_call(conn, DSC_OP_MANIFEST, req, (size_t)len, &body, &body_len) < 0 ||
        dsc_manifest_parse((const char *)body, body_len, &m) < 0) {
        fprintf(stderr, "bench: cannot read the manifest of %s from %s\n", dataset, server);
        exit(1);
    }
    free(body);
    dsc_conn_close(conn);
    get_job_t jobs[64];
    pthread_t th[64];
    double t0 = dsc_now_s();
    for (uint32_t i = 0; i < connections; i++) {
        jobs[i] = (get_job_t){dataset, m, i, connections, t0 + seconds, 0, 0};
        pthread_create(&th[i], NULL, get_thread, &jobs[i]);
    }
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < connections; i++) {
        pthread_join(th[i], NULL);
        bytes += jobs[i].bytes;
        if (jobs[i].rc < 0)
            fprintf(stderr, "bench: GET: %s\n", dsc_strerror(jobs[i].rc));
    }
    double wall = dsc_now_s() - t0;
    dsc_manifest_free(m);
    return bytes / wall / 1e9;
}

/* ---- Loader ---------------------------------------------------------------------------------- */

typedef struct loader_result {
    double decoded_gbps, wire_gbps, stall, decode_gbps_per_thread;
} loader_result_t;

static void sleep_seconds(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    if (s > 0)
        while (nanosleep(&ts, &ts) != 0)
            ;
}

static loader_result_t run_loader(const char *dataset, uint32_t threads, double need_gbps) {
    dsc_loader_options_t o;
    dsc_loader_options_init(&o);
    o.servers = server;
    o.dataset = dataset;
    o.batch_size = batch;
    o.decode_threads = threads;
    o.connections = connections;
    dsc_loader_t *l = NULL;
    int rc = dsc_loader_create(&o, &l);
    if (rc < 0) {
        fprintf(stderr, "bench: loader on %s: %s\n", dataset, dsc_strerror(rc));
        exit(1);
    }
    dsc_batch_t *b;
    rc = dsc_loader_next(l, &b);
    uint64_t sample_bytes = 0;
    for (uint32_t f = 0; f < dsc_loader_field_count(l); f++) {
        dsc_field_info_t fi;
        dsc_loader_field(l, f, &fi);
        sample_bytes += fi.sample_bytes;
    }
    double compute = need_gbps > 0 ? (double)batch * sample_bytes / (need_gbps * 1e9) : 0;
    dsc_stats_t s0 = {.struct_size = sizeof s0}, s1 = {.struct_size = sizeof s1};
    dsc_loader_stats(l, &s0);
    double t0 = dsc_now_s();
    while ((rc == 0 || rc == DSC_EOF) && dsc_now_s() - t0 < seconds) {
        if (rc == 0)
            sleep_seconds(compute);
        rc = dsc_loader_next(l, &b);
    }
    double wall = dsc_now_s() - t0;
    dsc_loader_stats(l, &s1);
    dsc_loader_destroy(l);
    if (rc < 0 && rc != DSC_EOF) {
        fprintf(stderr, "bench: loader failed: %s\n", dsc_strerror(rc));
        exit(1);
    }
    loader_result_t r;
    r.decoded_gbps = (double)(s1.bytes - s0.bytes) / wall / 1e9;
    r.wire_gbps = (double)(s1.wire_bytes - s0.wire_bytes) / wall / 1e9;
    double st = s1.stall_seconds - s0.stall_seconds, co = s1.compute_seconds - s0.compute_seconds;
    r.stall = st + co > 0 ? st / (st + co) : 0;
    double dec = s1.decode_seconds - s0.decode_seconds;
    /* Decoded bytes per second of decode-thread time (bytes handed out ~ bytes decoded). */
    r.decode_gbps_per_thread = dec > 0 ? (double)(s1.bytes - s0.bytes) / dec / 1e9 : 0;
    return r;
}

/* ---- In-process LZ4 on the same chunks --------------------------------------------------- */

static double lz4_inprocess_gbps(const char *dir) {
    dsc_manifest_t *m = NULL;
    if (dsc_manifest_load(dir, &m) < 0) {
        fprintf(stderr, "bench: cannot load %s/manifest.json\n", dir);
        exit(1);
    }
    uint64_t out_bytes = 0;
    double busy = 0;
    for (uint32_t s = 0; s < m->shard_count && s < 4; s++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, m->shards[s].file);
        FILE *fp = fopen(path, "rb");
        if (!fp)
            continue;
        fseek(fp, 0, SEEK_END);
        long size = ftell(fp);
        fseek(fp, 0, SEEK_SET);
        uint8_t *buf = malloc((size_t)size);
        if (fread(buf, 1, (size_t)size, fp) != (size_t)size)
            size = 0;
        fclose(fp);
        dsc_shard_view_t v;
        if (size > 0 && dsc_shard_parse(buf, (uint64_t)size, &v) == 0) {
            for (uint32_t c = 0; c < v.footer.chunk_count; c++) {
                dsc_chunk_entry_t e;
                dsc_shard_chunk(&v, c, &e);
                if (e.codec != DSC_CODEC_LZ4)
                    continue;
                char *dst = malloc(e.raw_len);
                const char *src = (const char *)dsc_shard_chunk_data(&v, &e);
                for (int rep = 0; rep < 5; rep++) {
                    double t0 = dsc_now_s();
                    int n = LZ4_decompress_safe(src, dst, (int)e.stored_len, (int)e.raw_len);
                    busy += dsc_now_s() - t0;
                    if (n > 0)
                        out_bytes += (uint64_t)n;
                }
                free(dst);
            }
        }
        free(buf);
    }
    dsc_manifest_free(m);
    return busy > 0 ? out_bytes / busy / 1e9 : 0;
}

int main(int argc, char **argv) {
    const char *raw = NULL, *lz4 = NULL, *lz4_dir = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--server"))
            server = argv[i + 1];
        else if (!strcmp(argv[i], "--raw"))
            raw = argv[i + 1];
        else if (!strcmp(argv[i], "--lz4"))
            lz4 = argv[i + 1];
        else if (!strcmp(argv[i], "--lz4-dir"))
            lz4_dir = argv[i + 1];
        else if (!strcmp(argv[i], "--seconds"))
            seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch"))
            batch = (uint32_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--connections"))
            connections = (uint32_t)atoi(argv[i + 1]);
    }
    if (!server || !raw || !lz4 || !lz4_dir || connections == 0 || connections > 64) {
        fprintf(stderr, "usage: bench_loader --server HOST:PORT --raw NAME --lz4 NAME "
                        "--lz4-dir DIR [--seconds S] [--batch B] [--connections N]\n");
        return 2;
    }
    printf("%-34s %12s %12s %8s\n", "measurement", "GB/s", "vs baseline", "stall");
    double get_raw = raw_get_gbps(raw);
    printf("%-34s %12.3f %12s %8s\n", "raw GET (plain pipelined), raw ds", get_raw, "1.00x", "-");
    for (uint32_t t = 1; t <= 2; t++) {
        loader_result_t r = run_loader(raw, t, 0);
        char label[64];
        snprintf(label, sizeof label, "loader raw, %u decode thread(s)", t);
        printf("%-34s %12.3f %11.2fx %7.1f%%\n", label, r.decoded_gbps, r.decoded_gbps / get_raw,
               100 * r.stall);
    }
    double get_lz4 = raw_get_gbps(lz4);
    printf("%-34s %12.3f %12s %8s\n", "raw GET (plain pipelined), lz4 ds", get_lz4, "1.00x", "-");
    double inproc = lz4_inprocess_gbps(lz4_dir);
    for (uint32_t t = 1; t <= 2; t++) {
        loader_result_t r = run_loader(lz4, t, 0);
        char label[64];
        snprintf(label, sizeof label, "loader lz4, %u decode thread(s)", t);
        printf("%-34s %12.3f %11.2fx %7.1f%%  (wire %.3f GB/s vs GET %.3f)\n", label,
               r.decoded_gbps, r.wire_gbps / get_lz4, 100 * r.stall, r.wire_gbps, get_lz4);
        snprintf(label, sizeof label, "  lz4 decode per thread (%u thr)", t);
        printf("%-34s %12.3f %11.2fx %8s  (vs LZ4_decompress_safe in-process %.3f)\n", label,
               r.decode_gbps_per_thread, r.decode_gbps_per_thread / inproc, "-", inproc);
    }
    /* A trainer that needs a given rate: stall should stay near 0 while below capacity. */
    double rates[] = {0.1, 0.3, 0.6};
    for (int i = 0; i < 3; i++) {
        loader_result_t r = run_loader(lz4, 2, rates[i]);
        char label[64];
        snprintf(label, sizeof label, "trainer needing %.1f GB/s (lz4)", rates[i]);
        printf("%-34s %12.3f %12s %7.1f%%\n", label, r.decoded_gbps, "-", 100 * r.stall);
    }
    return 0;
}
