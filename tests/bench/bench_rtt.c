/* Request round trip over TCP on 127.0.0.1: one connection, one request at a time (no
 * pipelining), PING beside GETs of one 64 KiB and one 1 MiB chunk out of RAM; median and tail in
 * microseconds and as a ratio to PING in the same round. The control round trip of the RDMA
 * design (docs/rdma.md) is this GET round trip without the bytes.
 * usage: bench_rtt [--rounds N] [--requests N]   (dscached and dscache are found beside it) */
#include "bench_common.h"
#include "conn.h"
#include "protocol.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define MAX_REQUESTS 20000

static char bindir[4096], work[128];

static int make_dataset(const char *name, unsigned chunk_bytes) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "'%s/dscache' ingest synthetic -o '%s/%s' --name %s --samples %u "
             "--field x:u8:1024 --compress none --chunk-size %u --shard-size %u >/dev/null",
             bindir, work, name, name, 8 * chunk_bytes / 1024, chunk_bytes, 8 * chunk_bytes);
    if (system(cmd) != 0) {
        fprintf(stderr, "bench_rtt: %s failed\n", cmd);
        return -1;
    }
    return 0;
}

/* n sequential calls of one request; fills us[] with each round trip in microseconds. */
static int run(dsc_conn_t *conn, uint8_t opcode, const uint8_t *body, size_t len, int n,
               double *us) {
    for (int i = 0; i < n; i++) {
        uint8_t *resp = NULL;
        size_t resp_len = 0;
        double t0 = dsc_now_s();
        int rc = dsc_conn_call(conn, opcode, body, len, &resp, &resp_len);
        us[i] = (dsc_now_s() - t0) * 1e6;
        free(resp);
        if (rc < 0) {
            fprintf(stderr, "bench_rtt: %s failed: %s\n", dsc_opcode_name(opcode),
                    dsc_strerror(rc));
            return -1;
        }
    }
    return 0;
}

static double pct(double *v, int n, double p) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int i = (int)(p * (n - 1) + 0.5);
    return v[i];
}

int main(int argc, char **argv) {
    int rounds = 3, requests = 2000;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--requests") == 0 && i + 1 < argc)
            requests = atoi(argv[++i]);
        else {
            printf("usage: bench_rtt [--rounds N (1..%d)] [--requests N (1..%d)]\n", BENCH_MAX_REPS,
                   MAX_REQUESTS);
            return strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
    if (rounds < 1 || rounds > BENCH_MAX_REPS || requests < 1 || requests > MAX_REQUESTS)
        return 2;
    if (bench_prepare("bench_rtt", bindir, sizeof bindir, work, sizeof work) < 0)
        return 1;
    int rc = 1;
    pid_t pid = -1;
    dsc_conn_t *conn = NULL;
    char log[300], dscached[4200], d1[300], d2[300], addr[64];
    snprintf(log, sizeof log, "%s/dscached.log", work);
    snprintf(dscached, sizeof dscached, "%s/dscached", bindir);
    snprintf(d1, sizeof d1, "%s/rtt64k", work);
    snprintf(d2, sizeof d2, "%s/rtt1m", work);
    if (make_dataset("rtt64k", 64 << 10) < 0 || make_dataset("rtt1m", 1 << 20) < 0)
        goto done;
    bench_dscached_t server = {"bench_rtt", dscached, {d1, d2}, "256M", "2", work, log, 0};
    if (bench_start_dscached(&server, &pid, addr, sizeof addr) < 0)
        goto done;
    usleep(300000);
    if (dsc_conn_open_addr(addr, 10000, 0, &conn) < 0) {
        fprintf(stderr, "bench_rtt: cannot connect to %s\n", addr);
        goto done;
    }
    uint8_t get64[128], get1m[128];
    dsc_get_req_t g = {{"rtt64k", 6}, 0, 0, 1, 0, 0};
    int n64 = dsc_get_req_encode(&g, get64, sizeof get64);
    g.dataset = (dsc_str_t){"rtt1m", 5};
    int n1m = dsc_get_req_encode(&g, get1m, sizeof get1m);
    static double v[3][MAX_REQUESTS];
    double med[3][BENCH_MAX_REPS], p99[3][BENCH_MAX_REPS], ratio[3][BENCH_MAX_REPS];
    for (int r = 0; r < rounds; r++) {
        if (run(conn, DSC_OP_PING, NULL, 0, requests, v[0]) < 0 ||
            run(conn, DSC_OP_GET, get64, (size_t)n64, requests, v[1]) < 0 ||
            run(conn, DSC_OP_GET, get1m, (size_t)n1m, requests, v[2]) < 0)
            goto done;
        for (int k = 0; k < 3; k++) {
            med[k][r] = pct(v[k], requests, 0.5);
            p99[k][r] = pct(v[k], requests, 0.99);
        }
        for (int k = 0; k < 3; k++)
            ratio[k][r] = med[k][r] / med[0][r];
    }
    char machine[512];
    describe_machine(machine, sizeof machine);
    printf("request round trip, one connection, one request at a time, 127.0.0.1 (%s)\n", machine);
    const char *names[3] = {"PING (empty)", "GET 1 x 64 KiB chunk", "GET 1 x 1 MiB chunk"};
    printf("%-22s %12s %12s %12s %10s\n", "request", "median us", "p99 us", "spread", "vs PING");
    for (int k = 0; k < 3; k++)
        printf("%-22s %12.1f %12.1f %11.0f%% %9.2fx\n", names[k], median(med[k], rounds),
               median(p99[k], rounds), 100 * spread(med[k], rounds), median(ratio[k], rounds));
    printf("- %d rounds of %d sequential requests each; medians over rounds of per-round "
           "medians\n",
           rounds, requests);
    rc = 0;
done:
    dsc_conn_close(conn);
    if (pid > 0) {
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_rtt: could not remove %s\n", work);
    return rc;
}
