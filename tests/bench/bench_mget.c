/* Small-chunk random access over TCP on 127.0.0.1, one connection: batches of 64 chunks drawn at
 * random from every shard of a dataset, fetched by one MGET (dsc__conn_mget), by 64 GETs one at
 * a time (a round trip per chunk, as per-sample random access costs), and by 64 pipelined GETs
 * (the call's fallback on a server without MGET); chunks per second and the ratios in the same
 * round (each batch fetched by every mode in turn), for 4 KiB and 48 KiB chunks out of RAM.
 * usage: bench_mget [--rounds N] [--batches N]   (dscached and dscache are found beside it) */
#include "bench_common.h"
#include "conn.h"
#include "manifest.h"
#include "multiget.h"
#include "protocol.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define BATCH 64
#define SHARDS 64
#define MODES 3

static char bindir[4096], work[128];

/* SHARDS shards of 64 chunks of chunk_kib KiB (1 KiB samples, stored raw). */
static int make_dataset(const char *name, unsigned chunk_kib) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "'%s/dscache' ingest synthetic -o '%s/%s' --name %s --samples %u "
             "--field x:u8:1024 --compress none --chunk-size %uK --shard-size %uK >/dev/null",
             bindir, work, name, name, SHARDS * 64 * chunk_kib, chunk_kib, 64 * chunk_kib + 8);
    if (system(cmd) != 0) {
        fprintf(stderr, "bench_mget: %s failed\n", cmd);
        return -1;
    }
    return 0;
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* One reused buffer per batch position: the bench measures the transfer, not malloc. */
static uint8_t *bufs[BATCH];
static void *alloc_buf(void *arg, uint32_t index, size_t len) {
    (void)arg;
    return len <= (64u << 10) ? bufs[index % BATCH] : NULL;
}

/* One batch by mode 0 (one MGET), 1 (GETs one at a time) or 2 (pipelined GETs: dsc__conn_mget
 * on a connection without the feature). Returns 0 or -1. */
static int fetch(dsc_conn_t *conn, int mode, const char *ds, dsc_mget_chunk_t *c) {
    if (mode != 1)
        return dsc__conn_mget(conn, ds, 0, c, BATCH, alloc_buf, NULL, NULL) == BATCH ? 0 : -1;
    for (int i = 0; i < BATCH; i++) {
        uint8_t get[128];
        dsc_get_req_t g = {{ds, (uint16_t)strlen(ds)}, c[i].shard, c[i].chunk, 1, 0, 0};
        int n = dsc_get_req_encode(&g, get, sizeof get);
        uint8_t *resp = NULL;
        size_t len = 0;
        int rc = dsc_conn_call(conn, DSC_OP_GET, get, (size_t)n, &resp, &len);
        free(resp);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* `batches` batches of BATCH random chunks of m, each fetched by every mode in turn (the order
 * rotating), so that a change of load on the machine hits the modes alike: chunks per second
 * of each mode in rate[]. Returns 0 or -1. */
static int run(dsc_conn_t **conn, const dsc_manifest_t *m, int batches, uint64_t seed,
               double rate[MODES]) {
    dsc_mget_chunk_t c[BATCH];
    double spent[MODES] = {0};
    for (int b = 0; b < batches; b++) {
        for (int i = 0; i < BATCH; i++) {
            c[i].shard = (uint32_t)(rng_next(&seed) % m->shard_count);
            c[i].chunk = (uint32_t)(rng_next(&seed) % m->shards[c[i].shard].chunks);
        }
        for (int k = 0; k < MODES; k++) {
            int mode = (b + k) % MODES;
            double t0 = dsc_now_s();
            if (fetch(conn[mode], mode, m->name, c) < 0)
                return -1;
            spent[mode] += dsc_now_s() - t0;
        }
    }
    for (int k = 0; k < MODES; k++)
        rate[k] = (double)batches * BATCH / spent[k];
    return 0;
}

int main(int argc, char **argv) {
    int rounds = 3, batches = 300;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--batches") == 0 && i + 1 < argc)
            batches = atoi(argv[++i]);
        else {
            printf("usage: bench_mget [--rounds N (1..%d)] [--batches N (1..100000)]\n",
                   BENCH_MAX_REPS);
            return strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
    if (rounds < 1 || rounds > BENCH_MAX_REPS || batches < 1 || batches > 100000)
        return 2;
    if (bench_prepare("bench_mget", bindir, sizeof bindir, work, sizeof work) < 0)
        return 1;
    int rc = 1;
    pid_t pid = -1;
    dsc_conn_t *conn[MODES] = {NULL, NULL, NULL};
    dsc_manifest_t *man[2] = {NULL, NULL};
    char log[300], dscached[4200], d[2][300], addr[64];
    const char *names[2] = {"mget4k", "mget48k"};
    const unsigned kib[2] = {4, 48};
    snprintf(log, sizeof log, "%s/dscached.log", work);
    snprintf(dscached, sizeof dscached, "%s/dscached", bindir);
    for (int k = 0; k < 2; k++) {
        snprintf(d[k], sizeof d[k], "%s/%s", work, names[k]);
        if (make_dataset(names[k], kib[k]) < 0)
            goto done;
    }
    for (int i = 0; i < BATCH; i++)
        if ((bufs[i] = malloc(64u << 10)) == NULL)
            goto done;
    bench_dscached_t server = {"bench_mget", dscached, {d[0], d[1]}, "512M", "2", work, log, 0};
    if (bench_start_dscached(&server, &pid, addr, sizeof addr) < 0)
        goto done;
    usleep(300000);
    for (int m = 0; m < MODES; m++)
        if (dsc_conn_open_addr(addr, 10000, 0, &conn[m]) < 0) {
            fprintf(stderr, "bench_mget: cannot connect to %s\n", addr);
            goto done;
        }
    if (!(dsc_conn_info(conn[0])->features & DSC_FEATURE_MGET)) {
        fprintf(stderr, "bench_mget: the server does not answer MGET\n");
        goto done;
    }
    for (int k = 0; k < 2; k++) {
        uint8_t req[DSC_MAX_NAME + 8], *body = NULL;
        size_t len = 0;
        int n = dsc_name_req_encode(names[k], req, sizeof req);
        int mrc = dsc_conn_call(conn[0], DSC_OP_MANIFEST, req, (size_t)n, &body, &len);
        if (mrc == 0)
            mrc = dsc_manifest_parse((const char *)body, len, &man[k]);
        free(body);
        if (mrc < 0) {
            fprintf(stderr, "bench_mget: manifest of %s: %s\n", names[k], dsc_strerror(mrc));
            goto done;
        }
    }
    /* Every shard resident before the clock starts (--warm loads in the background): each
     * chunk once. */
    for (int k = 0; k < 2; k++) {
        for (uint32_t sh = 0; sh < man[k]->shard_count; sh++) {
            dsc_mget_chunk_t c[BATCH];
            uint32_t n = man[k]->shards[sh].chunks < BATCH ? man[k]->shards[sh].chunks : BATCH;
            for (uint32_t i = 0; i < n; i++)
                c[i] = (dsc_mget_chunk_t){.shard = sh, .chunk = i};
            if (dsc__conn_mget(conn[0], names[k], 0, c, n, alloc_buf, NULL, NULL) != (int)n) {
                fprintf(stderr, "bench_mget: warm-up of %s failed\n", names[k]);
                goto done;
            }
        }
    }
    /* What a server without MGET grants: dsc__conn_mget sends pipelined GETs. */
    ((dsc_conn_info_t *)dsc_conn_info(conn[2]))->features &= ~DSC_FEATURE_MGET;
    double rate[2][MODES][BENCH_MAX_REPS], vs_seq[2][BENCH_MAX_REPS], vs_pipe[2][BENCH_MAX_REPS];
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < 2; k++) {
            double got[MODES];
            if (run(conn, man[k], batches, 0x9E37u + (uint64_t)r, got) < 0) {
                fprintf(stderr, "bench_mget: %s failed\n", names[k]);
                goto done;
            }
            for (int m = 0; m < MODES; m++)
                rate[k][m][r] = got[m];
            vs_seq[k][r] = rate[k][0][r] / rate[k][1][r];
            vs_pipe[k][r] = rate[k][0][r] / rate[k][2][r];
        }
    char machine[512];
    describe_machine(machine, sizeof machine);
    printf("small-chunk random access, batches of %d random chunks of %d shards, one connection, "
           "127.0.0.1 (%s)\n",
           BATCH, SHARDS, machine);
    printf("%-8s %16s %16s %16s %14s %14s %8s\n", "chunks", "MGET chunks/s", "GET 1-by-1 /s",
           "GET pipelined/s", "MGET vs 1-by-1", "MGET vs pipel.", "spread");
    for (int k = 0; k < 2; k++)
        printf("%3u KiB  %16.0f %16.0f %16.0f %13.2fx %13.2fx %7.0f%%\n", kib[k],
               median(rate[k][0], rounds), median(rate[k][1], rounds), median(rate[k][2], rounds),
               median(vs_seq[k], rounds), median(vs_pipe[k], rounds),
               100 * spread(rate[k][0], rounds));
    printf("- %d rounds of %d batches, each batch fetched by every mode in turn (rotating order); "
           "medians over rounds, ratios per round; spread of MGET chunks/s; load average %.1f\n",
           rounds, batches, load_average());
    rc = 0;
done:
    for (int m = 0; m < MODES; m++)
        dsc_conn_close(conn[m]);
    dsc_manifest_free(man[0]);
    dsc_manifest_free(man[1]);
    for (int i = 0; i < BATCH; i++)
        free(bufs[i]);
    if (pid > 0) {
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_mget: could not remove %s\n", work);
    return rc;
}
