/* RDMA transport checks against a real dscached (driven by tests/integration/test_rdma_*.sh and
 * tests/bench/bench_rdma.sh), through whichever verbs library DSC_IBVERBS_LIB names.
 * usage: rdma_check MODE --servers S --dataset NAME --dir DATASET_DIR [options]
 *   epoch   --transport T --epochs N: every batch's bytes equal the shard files, each sample
 *           exactly once per epoch; prints the transport stats and the loader's log lines
 *           ("log LEVEL: ..."); --expect-rdma 1 (RDMA bytes, no fallback) | 0 (no RDMA byte)
 *   create  --transport T: dsc_loader_create (or, with a device here, the first next()) must
 *           fail; prints the error and the log
 *   stale   a client that takes a lease and never releases it: the server fences it after the
 *           TTL (connection closed, READ with the old descriptor fails), --ttl-ms the TTL */
#include "conn.h"
#include "dscache.h"
#include "rdma_link.h"
#include "shard.h"
#include "testdata.h"
#include "testlib.h"
#include "util.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *servers, *dataset, *dir, *transport = NULL;
static uint32_t batch = 16, epochs = 1, conns = 2, ttl_ms = 1000, timeout_ms = 3000;
static int expect_rdma = -1;
static testdata_t source;

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static void on_log(void *ctx, int level, const char *message) {
    (void)ctx;
    static const char *names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
    pthread_mutex_lock(&log_lock);
    printf("log %s: %s\n", level >= 0 && level <= 3 ? names[level] : "?", message);
    fflush(stdout);
    pthread_mutex_unlock(&log_lock);
}

static int create_loader(dsc_loader_t **l) {
    dsc_loader_options_t o;
    dsc_loader_options_init(&o);
    o.servers = servers;
    o.dataset = dataset;
    o.batch_size = batch;
    o.seed = 3;
    o.connections = conns;
    o.timeout_ms = timeout_ms;
    o.log_fn = on_log;
    o.log_level = DSC_LOG_INFO;
    o.transport = transport;
    return dsc_loader_create(&o, l);
}

static double now_s(void) {
    return dsc_now_s();
}

static int mode_epoch(void) {
    dsc_loader_t *l = NULL;
    int rc = create_loader(&l);
    if (rc < 0) {
        fprintf(stderr, "dsc_loader_create: %s\n", dsc_strerror(rc));
        return 1;
    }
    uint32_t *count = calloc(source.samples, sizeof(uint32_t));
    REQUIRE(count != NULL);
    double t0 = now_s();
    uint64_t bytes = 0;
    for (uint32_t e = 0; e < epochs; e++) {
        memset(count, 0, source.samples * sizeof(uint32_t));
        REQUIRE(dsc_loader_set_epoch(l, e) == 0);
        for (;;) {
            dsc_batch_t *b;
            rc = dsc_loader_next(l, &b);
            if (rc == DSC_EOF)
                break;
            if (rc < 0) {
                fprintf(stderr, "dsc_loader_next: %s\n", dsc_strerror(rc));
                CHECK(rc == 0);
                break;
            }
            int bad = testdata_batch_mismatches(&source, b, dsc_loader_field_count(l));
            if (bad != 0)
                fprintf(stderr, "epoch %u batch %llu: %d sample field(s) differ from the files\n",
                        e, (unsigned long long)dsc_batch_step(b), bad);
            CHECK(bad == 0);
            uint32_t n = dsc_batch_samples(b);
            const uint64_t *idx = dsc_batch_indices(b);
            for (uint32_t k = 0; k < n; k++)
                if (idx[k] < source.samples)
                    count[idx[k]]++;
            bytes += (uint64_t)n * source.schema.sample_bytes;
        }
        uint64_t once = 0;
        for (uint64_t i = 0; i < source.samples; i++)
            once += count[i] == 1;
        CHECK_EQ_INT(once, source.samples);
    }
    double secs = now_s() - t0;
    dsc_stats_t st = {.struct_size = sizeof st};
    REQUIRE(dsc_loader_stats(l, &st) == 0);
    printf("stats: rdma_connections %llu tcp_connections %llu rdma_bytes %llu wire_bytes %llu "
           "rdma_fallbacks %llu rdma_errors %llu failovers %llu retries %llu\n",
           (unsigned long long)st.rdma_connections, (unsigned long long)st.tcp_connections,
           (unsigned long long)st.rdma_bytes, (unsigned long long)st.wire_bytes,
           (unsigned long long)st.rdma_fallbacks, (unsigned long long)st.rdma_errors,
           (unsigned long long)st.failovers, (unsigned long long)st.retries);
    printf("throughput: %.1f MB/s of batch bytes (%llu bytes in %.3f s, %u epoch(s))\n",
           secs > 0 ? (double)bytes / secs / 1e6 : 0.0, (unsigned long long)bytes, secs, epochs);
    char text[16384];
    int tl = dsc_loader_metrics_text(l, text, sizeof text);
    CHECK(tl > 0 && strstr(text, "dscache_loader_rdma_bytes_total") != NULL);
    if (expect_rdma == 1) {
        CHECK(st.rdma_bytes > 0);
        CHECK(st.rdma_fallbacks == 0);
    } else if (expect_rdma == 0) {
        CHECK(st.rdma_bytes == 0);
        CHECK(st.rdma_connections == 0);
    }
    dsc_loader_destroy(l);
    free(count);
    return TEST_DONE();
}

static int mode_create(void) {
    dsc_loader_t *l = NULL;
    int rc = create_loader(&l);
    printf("create: %s\n", rc < 0 ? dsc_strerror(rc) : "ok");
    if (rc == 0) {
        /* The device is there but the server cannot do RDMA: the first batch fails. */
        dsc_batch_t *b;
        rc = dsc_loader_next(l, &b);
        printf("next: %s\n", rc < 0 ? dsc_strerror(rc) : "ok");
    }
    CHECK(rc < 0);
    dsc_loader_destroy(l);
    return TEST_DONE();
}

#if DSC_HAVE_VERBS_H
/* Waits for one completion on cq (up to ms); returns its status, or -1 on time-out. */
static int wait_wc(dsc_rdma_dev_t *dev, struct ibv_cq *cq, int ms) {
    (void)dev;
    double end = now_s() + ms / 1000.0;
    struct ibv_wc wc;
    while (now_s() < end) {
        int n = ibv_poll_cq(cq, 1, &wc);
        if (n > 0)
            return (int)wc.status;
        usleep(200);
    }
    return -1;
}

static int mode_stale(void) {
    dsc_rdma_dev_t dev;
    char why[600];
    if (dsc_rdma_dev_open(&dev, why, sizeof why) < 0) {
        printf("SKIP: no RDMA device: %s\n", why);
        return 77;
    }
    dsc_conn_t *conn = NULL;
    REQUIRE(dsc_conn_open_addr(servers, 5000, 0, &conn) == 0);
    struct ibv_cq *cq = dev.v.create_cq(dev.ctx, 16, NULL, NULL, 0);
    REQUIRE(cq != NULL);
    struct ibv_qp *qp = dsc_rdma_qp_create(&dev, cq, 16, 0);
    REQUIRE(qp != NULL);
    /* The GID on the control connection's subnet, as the loader picks it. */
    struct sockaddr_storage local;
    socklen_t local_len = sizeof local;
    REQUIRE(getsockname(dsc_conn_fd(conn), (struct sockaddr *)&local, &local_len) == 0);
    dsc_rdma_gid_choice_t gid;
    REQUIRE(dsc_rdma_gid_choose(&dev, &local, &gid, why, sizeof why) == 0);
    printf("stale client: %s\n", gid.text);
    uint32_t psn = dsc_rdma_random_psn();
    dsc_rdma_qp_info_t me;
    dsc_rdma_qp_describe(&dev, &gid, qp, psn, 1, &me);
    uint8_t req[128];
    int n = dsc_rdma_connect_req_encode(&me, req, sizeof req);
    REQUIRE(n > 0);
    uint8_t *body = NULL;
    size_t len = 0;
    REQUIRE(dsc_conn_call(conn, DSC_OP_RDMA_CONNECT, req, (size_t)n, &body, &len) == 0);
    dsc_rdma_connect_resp_t resp;
    REQUIRE(dsc_rdma_connect_resp_decode(body, len, &resp) == 0);
    free(body);
    printf("lease TTL %u ms\n", resp.lease_ttl_ms);
    CHECK_EQ_INT(resp.lease_ttl_ms, ttl_ms);
    REQUIRE(dsc_rdma_qp_rtr(&dev, &gid, qp, &resp.qp, resp.qp.mtu, 1) == 0);
    REQUIRE(dsc_rdma_qp_rts(&dev, qp, psn, resp.qp.rd_atomic) == 0);
    /* One chunk under a lease, then never released. */
    dsc_rdma_get_req_t get = {.get = {.dataset = {dataset, (uint16_t)strlen(dataset)},
                                      .shard_id = 0,
                                      .first_chunk = 0,
                                      .chunk_count = 1}};
    uint8_t gb[512];
    n = dsc_rdma_get_req_encode(&get, gb, sizeof gb);
    REQUIRE(n > 0);
    REQUIRE(dsc_conn_call(conn, DSC_OP_RDMA_GET, gb, (size_t)n, &body, &len) == 0);
    dsc_rdma_get_resp_t gr;
    REQUIRE(dsc_rdma_get_resp_decode(body, len, &gr) == 0);
    REQUIRE(!(gr.flags & DSC_RDMA_GET_INLINE));
    dsc_chunk_entry_t e;
    dsc_rdma_desc_t d;
    REQUIRE(dsc_rdma_get_resp_chunk(&gr, 0, &e, &d) == 0);
    free(body);
    uint8_t *buf = aligned_alloc(4096, (d.len + 4095) / 4096 * 4096);
    REQUIRE(buf != NULL);
    struct ibv_mr *mr = dev.v.reg_mr(dev.pd, buf, d.len, IBV_ACCESS_LOCAL_WRITE);
    REQUIRE(mr != NULL);
    struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)buf, .length = d.len, .lkey = mr->lkey};
    struct ibv_send_wr wr = {
        .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED};
    wr.wr.rdma.remote_addr = d.addr;
    wr.wr.rdma.rkey = d.rkey;
    struct ibv_send_wr *bad = NULL;
    REQUIRE(ibv_post_send(qp, &wr, &bad) == 0);
    CHECK_EQ_INT(wait_wc(&dev, cq, 5000), IBV_WC_SUCCESS);
    CHECK(dsc_checksum(buf, d.len) == d.checksum);
    printf("READ under the lease: %u bytes, checksum ok\n", d.len);
    /* Never release: after the TTL the server fences the connection. */
    double t0 = now_s();
    dsc_frame_header_t h;
    int rc = dsc_conn_recv_header(conn, &h);
    double waited = now_s() - t0;
    if (rc == 0) {
        printf("server sent opcode %u status %s after %.2f s\n", h.opcode,
               dsc_status_name(h.status), waited);
        CHECK(h.status == DSC_STATUS_UNAVAILABLE);
        rc = dsc_conn_recv_header(conn, &h); /* then the connection closes */
    }
    printf("connection closed by the server after %.2f s: %s\n", waited, dsc_strerror(rc));
    CHECK(rc < 0);
    CHECK(waited >= ttl_ms / 1000.0 * 0.9);
    /* The server's QP is gone: the same READ now fails. */
    memset(buf, 0, d.len);
    bad = NULL;
    int post = ibv_post_send(qp, &wr, &bad);
    int status = post == 0 ? wait_wc(&dev, cq, 10000) : -2;
    printf("READ after the fence: %s\n",
           status >= 0 ? dev.v.wc_status_str((enum ibv_wc_status)status) : "post failed");
    CHECK(status != IBV_WC_SUCCESS);
    dev.v.dereg_mr(mr);
    free(buf);
    dsc_rdma_qp_fence(&dev, qp);
    dev.v.destroy_cq(cq);
    dsc_rdma_dev_close(&dev);
    dsc_conn_close(conn);
    return TEST_DONE();
}
#else
static int mode_stale(void) {
    printf("SKIP: built without rdma-core headers\n");
    return 77;
}
#endif

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: rdma_check MODE --servers S --dataset N --dir D [...]\n");
        return 2;
    }
    const char *mode = argv[1];
    const testopt_t opts[] = {
        TESTOPT("--servers", &servers),
        TESTOPT("--dataset", &dataset),
        TESTOPT("--dir", &dir),
        TESTOPT("--batch", &batch),
        TESTOPT("--transport", &transport),
        TESTOPT("--epochs", &epochs),
        TESTOPT("--connections", &conns),
        TESTOPT("--expect-rdma", &expect_rdma),
        TESTOPT("--ttl-ms", &ttl_ms),
        TESTOPT("--timeout-ms", &timeout_ms),
    };
    if (testopt_parse("rdma_check", argc, argv, 2, opts, sizeof opts / sizeof opts[0]) != 0)
        return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    REQUIRE(servers && dataset);
    if (!strcmp(mode, "stale"))
        return mode_stale();
    if (!strcmp(mode, "create"))
        return mode_create();
    REQUIRE(dir != NULL);
    REQUIRE(testdata_load(dir, 1, &source) == 0);
    if (!strcmp(mode, "epoch"))
        return mode_epoch();
    fprintf(stderr, "rdma_check: unknown mode %s\n", mode);
    return 2;
}
