/* RDMA transport checks against a real dscached (driven by tests/integration/test_rdma_*.sh and
 * tests/bench/bench_rdma.sh), through whichever verbs library DSC_IBVERBS_LIB names.
 * usage: rdma_check MODE --servers S --dataset NAME --dir DATASET_DIR [options]
 *   epoch   --transport T --epochs N: every batch's bytes equal the shard files, each sample
 *           exactly once per epoch; prints the transport stats and the loader's log lines
 *           ("log LEVEL: ..."); --expect-rdma 1 (RDMA bytes, no fallback) | 0 (no RDMA byte)
 *   create  --transport T: dsc_loader_create (or, with a device here, the first next()) must
 *           fail; prints the error and the log
 *   stale   a client that takes a lease and never releases it: the server fences it after the
 *           TTL (connection closed, READ with the old descriptor fails), --ttl-ms the TTL
 *   badread a READ with a bad rkey or out of bounds (--bad rkey|bounds): the server's QP error
 *           event fences the connection at once (--close-now 1: the client closes first)
 *   slowconnect  RDMA_CONNECT on the server's thread pool (--delay-ms, --closed N)
 *   connect one RDMA_CONNECT as is; prints its status
 *   hello   prints the HELLO feature bits (RDMA offered or not) */
#include "conn.h"
#include "dscache.h"
#include "rdma_link.h"
#include "shard.h"
#include "test_frames.h"
#include "testdata.h"
#include "testlib.h"
#include "util.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *servers, *dataset, *dir, *transport = NULL;
static uint32_t batch = 16, epochs = 1, conns = 2, ttl_ms = 1000, timeout_ms = 3000;
static uint32_t close_now = 0, delay_ms = 1000, closed = 0;
static const char *bad = "rkey";
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
    static char text[1 << 16]; /* the metrics text grows with servers, fields, verdict */
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

/* A raw RDMA client: a device, a TCP connection, a QP at RTS towards the server's, and a lease
 * on chunk 0 of shard 0 (descriptor d) with a registered buffer to READ it into. */
typedef struct session {
    dsc_rdma_dev_t dev;
    dsc_conn_t *conn;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    dsc_rdma_gid_choice_t gid;
    dsc_rdma_connect_resp_t resp;
    dsc_rdma_desc_t d;
    uint8_t *buf;
    struct ibv_mr *mr;
} session_t;

/* The GID on conn's subnet, as the loader picks it. */
static void conn_gid(dsc_rdma_dev_t *dev, dsc_conn_t *conn, dsc_rdma_gid_choice_t *gid) {
    struct sockaddr_storage local;
    socklen_t local_len = sizeof local;
    char why[600];
    REQUIRE(getsockname(dsc_conn_fd(conn), (struct sockaddr *)&local, &local_len) == 0);
    REQUIRE(dsc_rdma_gid_choose(dev, &local, gid, why, sizeof why) == 0);
}

/* The RDMA_CONNECT body of a fresh QP on dev sending from gid (*qp, *psn returned). */
static int connect_body(dsc_rdma_dev_t *dev, const dsc_rdma_gid_choice_t *gid, struct ibv_cq *cq,
                        struct ibv_qp **qp, uint32_t *psn, uint8_t *out, size_t cap) {
    *qp = dsc_rdma_qp_create(dev, cq, 16, 0);
    REQUIRE(*qp != NULL);
    *psn = dsc_rdma_random_psn();
    dsc_rdma_qp_info_t me;
    dsc_rdma_qp_describe(dev, gid, *qp, *psn, 1, &me);
    int n = dsc_rdma_connect_req_encode(&me, out, cap);
    REQUIRE(n > 0);
    return n;
}

static int session_open(session_t *s) {
    memset(s, 0, sizeof *s);
    char why[600];
    if (dsc_rdma_dev_open(&s->dev, why, sizeof why) < 0) {
        printf("SKIP: no RDMA device: %s\n", why);
        return 77;
    }
    REQUIRE(dsc_conn_open_addr(servers, 5000, 0, &s->conn) == 0);
    s->cq = s->dev.v.create_cq(s->dev.ctx, 16, NULL, NULL, 0);
    REQUIRE(s->cq != NULL);
    uint32_t psn;
    uint8_t req[128];
    conn_gid(&s->dev, s->conn, &s->gid);
    printf("raw client: %s\n", s->gid.text);
    int n = connect_body(&s->dev, &s->gid, s->cq, &s->qp, &psn, req, sizeof req);
    uint8_t *body = NULL;
    size_t len = 0;
    REQUIRE(dsc_conn_call(s->conn, DSC_OP_RDMA_CONNECT, req, (size_t)n, &body, &len) == 0);
    REQUIRE(dsc_rdma_connect_resp_decode(body, len, &s->resp) == 0);
    free(body);
    printf("lease TTL %u ms\n", s->resp.lease_ttl_ms);
    REQUIRE(dsc_rdma_qp_rtr(&s->dev, &s->gid, s->qp, &s->resp.qp, s->resp.qp.mtu, 1) == 0);
    REQUIRE(dsc_rdma_qp_rts(&s->dev, s->qp, psn, s->resp.qp.rd_atomic) == 0);
    dsc_rdma_get_req_t get = {.get = {.dataset = {dataset, (uint16_t)strlen(dataset)},
                                      .shard_id = 0,
                                      .first_chunk = 0,
                                      .chunk_count = 1}};
    uint8_t gb[512];
    n = dsc_rdma_get_req_encode(&get, gb, sizeof gb);
    REQUIRE(n > 0);
    REQUIRE(dsc_conn_call(s->conn, DSC_OP_RDMA_GET, gb, (size_t)n, &body, &len) == 0);
    dsc_rdma_get_resp_t gr;
    REQUIRE(dsc_rdma_get_resp_decode(body, len, &gr) == 0);
    REQUIRE(!(gr.flags & DSC_RDMA_GET_INLINE));
    dsc_chunk_entry_t e;
    REQUIRE(dsc_rdma_get_resp_chunk(&gr, 0, &e, &s->d) == 0);
    free(body);
    s->buf = aligned_alloc(4096, (s->d.len + 4095) / 4096 * 4096);
    REQUIRE(s->buf != NULL);
    s->mr = s->dev.v.reg_mr(s->dev.pd, s->buf, s->d.len, IBV_ACCESS_LOCAL_WRITE);
    REQUIRE(s->mr != NULL);
    return 0;
}

/* One signalled READ of d.len bytes from (addr, rkey); its completion status or -1/-2. */
static int session_read(session_t *s, uint64_t addr, uint32_t rkey) {
    struct ibv_sge sge = {
        .addr = (uint64_t)(uintptr_t)s->buf, .length = s->d.len, .lkey = s->mr->lkey};
    struct ibv_send_wr wr = {
        .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED};
    wr.wr.rdma.remote_addr = addr;
    wr.wr.rdma.rkey = rkey;
    struct ibv_send_wr *bad = NULL;
    if (ibv_post_send(s->qp, &wr, &bad) != 0)
        return -2;
    return wait_wc(&s->dev, s->cq, 10000);
}

static const char *wc_name(session_t *s, int status) {
    return status >= 0    ? s->dev.v.wc_status_str((enum ibv_wc_status)status)
           : status == -2 ? "post failed"
                          : "no completion";
}

static void session_close(session_t *s) {
    if (s->mr)
        s->dev.v.dereg_mr(s->mr);
    free(s->buf);
    dsc_rdma_qp_fence(&s->dev, s->qp);
    s->dev.v.destroy_cq(s->cq);
    dsc_rdma_dev_close(&s->dev);
    dsc_conn_close(s->conn);
}

/* The server's next frame on conn: its header and message; 0 or the receive error. */
static int recv_message(dsc_conn_t *conn, dsc_frame_header_t *h, char *msg, size_t cap) {
    msg[0] = '\0';
    int rc = dsc_conn_recv_header(conn, h);
    if (rc == 0 && h->body_len < cap) {
        rc = dsc_conn_recv_body(conn, msg, h->body_len);
        msg[rc == 0 ? h->body_len : 0] = '\0';
    }
    return rc;
}

static int mode_stale(void) {
    session_t s;
    int skip = session_open(&s);
    if (skip)
        return skip;
    CHECK_EQ_INT(s.resp.lease_ttl_ms, ttl_ms);
    CHECK_EQ_INT(session_read(&s, s.d.addr, s.d.rkey), IBV_WC_SUCCESS);
    CHECK(dsc_checksum(s.buf, s.d.len) == s.d.checksum);
    printf("READ under the lease: %u bytes, checksum ok\n", s.d.len);
    /* Never release: after the TTL the server fences the connection. */
    double t0 = now_s();
    dsc_frame_header_t h;
    int rc = dsc_conn_recv_header(s.conn, &h);
    double waited = now_s() - t0;
    if (rc == 0) {
        printf("server sent opcode %u status %s after %.2f s\n", h.opcode,
               dsc_status_name(h.status), waited);
        CHECK(h.status == DSC_STATUS_UNAVAILABLE);
        rc = dsc_conn_recv_header(s.conn, &h); /* then the connection closes */
    }
    printf("connection closed by the server after %.2f s: %s\n", waited, dsc_strerror(rc));
    CHECK(rc < 0);
    CHECK(waited >= ttl_ms / 1000.0 * 0.9);
    /* The server's QP is gone: the same READ now fails. */
    memset(s.buf, 0, s.d.len);
    int status = session_read(&s, s.d.addr, s.d.rkey);
    printf("READ after the fence: %s\n", wc_name(&s, status));
    CHECK(status != IBV_WC_SUCCESS);
    session_close(&s);
    return TEST_DONE();
}

/* A READ that breaks the server's rkey or bounds checks: the server's QP reports
 * IBV_EVENT_QP_ACCESS_ERR and the server fences this connection at once (not after the TTL).
 * --bad rkey|bounds; --close-now 1: close the connection right after the bad READ (the server may
 * see the close before the event, or the event after the QP is gone). */
static int mode_badread(void) {
    session_t s;
    int skip = session_open(&s);
    if (skip)
        return skip;
    CHECK_EQ_INT(session_read(&s, s.d.addr, s.d.rkey), IBV_WC_SUCCESS);
    CHECK(dsc_checksum(s.buf, s.d.len) == s.d.checksum);
    uint64_t addr = s.d.addr;
    uint32_t rkey = s.d.rkey;
    if (strcmp(bad, "rkey") == 0)
        rkey ^= 0x100;
    else
        addr += UINT64_C(1) << 40; /* far past the end of every region */
    double t0 = now_s();
    int status = session_read(&s, addr, rkey);
    printf("bad READ (%s): %s\n", bad, wc_name(&s, status));
    CHECK_EQ_INT(status, IBV_WC_REM_ACCESS_ERR);
    if (close_now) {
        session_close(&s);
        printf("closed at once\n");
        return TEST_DONE();
    }
    dsc_frame_header_t h;
    char msg[DSC_ERROR_MAX_MESSAGE + 1];
    int rc = recv_message(s.conn, &h, msg, sizeof msg);
    double waited = now_s() - t0;
    if (rc == 0) {
        printf("server sent opcode %u status %s id %llu after %.2f s: %s\n", h.opcode,
               dsc_status_name(h.status), (unsigned long long)h.request_id, waited, msg);
        CHECK(h.status == DSC_STATUS_UNAVAILABLE && h.request_id == 0);
        CHECK(strstr(msg, "IBV_EVENT_QP_ACCESS_ERR") != NULL);
        rc = dsc_conn_recv_header(s.conn, &h);
    }
    printf("connection closed by the server after %.2f s: %s\n", waited, dsc_strerror(rc));
    CHECK(rc < 0);
    CHECK(waited < ttl_ms / 1000.0 / 2); /* the event fenced it, not the lease's TTL */
    session_close(&s);
    return TEST_DONE();
}

/* Against a server whose QP creation is slow (fakeverbs qp_delay_ms=D, one loop): while one
 * connection's RDMA_CONNECT is on the thread pool the loop serves another; a second RDMA_CONNECT
 * meanwhile is refused at once; connections closed while theirs is in flight (--closed N) are
 * left alone. --delay-ms D. */
static int mode_slowconnect(void) {
    dsc_rdma_dev_t dev;
    char why[600];
    if (dsc_rdma_dev_open(&dev, why, sizeof why) < 0) {
        printf("SKIP: no RDMA device: %s\n", why);
        return 77;
    }
    struct ibv_cq *cq = dev.v.create_cq(dev.ctx, 64, NULL, NULL, 0);
    REQUIRE(cq != NULL);
    dsc_conn_t *a = NULL, *b = NULL;
    REQUIRE(dsc_conn_open_addr(servers, 20000, 0, &a) == 0);
    REQUIRE(dsc_conn_open_addr(servers, 20000, 0, &b) == 0);
    struct ibv_qp *qp_a, *qp_dup;
    uint32_t psn;
    uint8_t req[128];
    dsc_rdma_gid_choice_t gid;
    conn_gid(&dev, a, &gid);
    int n = connect_body(&dev, &gid, cq, &qp_a, &psn, req, sizeof req);
    double t0 = now_s();
    REQUIRE(dsc_conn_send(a, DSC_OP_RDMA_CONNECT, 1, req, (size_t)n) == 0);
    n = connect_body(&dev, &gid, cq, &qp_dup, &psn, req, sizeof req);
    REQUIRE(dsc_conn_send(a, DSC_OP_RDMA_CONNECT, 2, req, (size_t)n) == 0);
    uint8_t *body = NULL;
    size_t len = 0;
    REQUIRE(dsc_conn_call(b, DSC_OP_PING, "ping", 4, &body, &len) == 0);
    free(body);
    double ping = now_s() - t0;
    dsc_frame_header_t h1, h2;
    char msg[DSC_ERROR_MAX_MESSAGE + 1];
    REQUIRE(recv_message(a, &h1, msg, sizeof msg) == 0);
    double first = now_s() - t0;
    printf("first answer: id %llu %s after %.3f s: %s\n", (unsigned long long)h1.request_id,
           dsc_status_name(h1.status), first, h1.status ? msg : "");
    REQUIRE(recv_message(a, &h2, msg, sizeof msg) == 0);
    double second = now_s() - t0;
    printf("second answer: id %llu %s after %.3f s; PING on another connection: %.3f s\n",
           (unsigned long long)h2.request_id, dsc_status_name(h2.status), second, ping);
    /* The duplicate is refused while the first is still on the pool, so it answers first. */
    CHECK(h1.request_id == 2 && h1.status == DSC_STATUS_BAD_REQUEST);
    CHECK(h2.request_id == 1 && h2.status == DSC_STATUS_OK);
    CHECK(second >= delay_ms / 1000.0 * 0.9);
    CHECK(ping < delay_ms / 1000.0 / 2); /* the loop was not blocked by the QP creation */
    /* Connections reset (SO_LINGER 0: the server closes them at once) while their RDMA_CONNECT
     * is in flight: HELLO and RDMA_CONNECT in one write, the HELLO answer read back (so both
     * were dispatched), then the reset. */
    for (uint32_t i = 0; i < closed; i++) {
        struct ibv_qp *qp;
        n = connect_body(&dev, &gid, cq, &qp, &psn, req, sizeof req);
        uint8_t out[512];
        dsc_hello_req_t hello = {.min_version = 1, .max_version = DSC_PROTO_VERSION};
        int hn = dsc_hello_req_encode(&hello, out + DSC_FRAME_HEADER_SIZE, 200);
        REQUIRE(hn > 0);
        dsc_frame_header_t fh = {
            .version = 1, .opcode = DSC_OP_HELLO, .request_id = 1, .body_len = (uint32_t)hn};
        dsc_frame_header_encode(&fh, out);
        size_t pos = DSC_FRAME_HEADER_SIZE + (size_t)hn;
        fh = (dsc_frame_header_t){
            .version = 1, .opcode = DSC_OP_RDMA_CONNECT, .request_id = 2, .body_len = (uint32_t)n};
        dsc_frame_header_encode(&fh, out + pos);
        memcpy(out + pos + DSC_FRAME_HEADER_SIZE, req, (size_t)n);
        pos += DSC_FRAME_HEADER_SIZE + (size_t)n;
        int fd = raw_connect(servers);
        REQUIRE(fd >= 0 && send_all(fd, out, pos) == 0);
        uint8_t head[DSC_FRAME_HEADER_SIZE];
        REQUIRE(recv(fd, head, sizeof head, MSG_WAITALL) == (ssize_t)sizeof head);
        REQUIRE(dsc_frame_header_decode(head, sizeof head, 0, &fh) == DSC_FRAME_HEADER_SIZE &&
                fh.opcode == DSC_OP_HELLO && fh.status == DSC_STATUS_OK);
        usleep(50 * 1000);
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        close(fd);
        dev.v.destroy_qp(qp);
    }
    printf("%u connection(s) reset with their RDMA_CONNECT in flight\n", closed);
    CHECK(now_s() - t0 < delay_ms / 1000.0 * 2); /* the resets came before their QPs were made */
    dev.v.destroy_qp(qp_a);
    dev.v.destroy_qp(qp_dup);
    dsc_conn_close(a);
    dsc_conn_close(b);
    dev.v.destroy_cq(cq);
    dsc_rdma_dev_close(&dev);
    return TEST_DONE();
}

/* One RDMA_CONNECT sent as is (whatever HELLO said); prints the answer's status. */
static int mode_connect(void) {
    dsc_rdma_dev_t dev;
    char why[600];
    if (dsc_rdma_dev_open(&dev, why, sizeof why) < 0) {
        printf("SKIP: no RDMA device: %s\n", why);
        return 77;
    }
    struct ibv_cq *cq = dev.v.create_cq(dev.ctx, 16, NULL, NULL, 0);
    REQUIRE(cq != NULL);
    dsc_conn_t *conn = NULL;
    REQUIRE(dsc_conn_open_addr(servers, 5000, 0, &conn) == 0);
    struct ibv_qp *qp;
    uint32_t psn;
    uint8_t req[128];
    dsc_rdma_gid_choice_t gid;
    conn_gid(&dev, conn, &gid);
    int n = connect_body(&dev, &gid, cq, &qp, &psn, req, sizeof req);
    uint8_t *body = NULL;
    size_t len = 0;
    int rc = dsc_conn_call(conn, DSC_OP_RDMA_CONNECT, req, (size_t)n, &body, &len);
    printf("connect: %s%s%s\n", rc == 0 ? "OK" : dsc_strerror(rc), rc ? ": " : "",
           rc ? dsc_conn_last_error(conn) : "");
    free(body);
    dsc_conn_close(conn);
    dev.v.destroy_qp(qp);
    dev.v.destroy_cq(cq);
    dsc_rdma_dev_close(&dev);
    return 0;
}
#else
static int no_verbs(void) {
    printf("SKIP: built without rdma-core headers\n");
    return 77;
}
#define mode_stale no_verbs
#define mode_badread no_verbs
#define mode_slowconnect no_verbs
#define mode_connect no_verbs
#endif

/* What HELLO granted: the RDMA feature bit. */
static int mode_hello(void) {
    dsc_conn_t *conn = NULL;
    REQUIRE(dsc_conn_open_addr(servers, 5000, 0, &conn) == 0);
    uint32_t f = dsc_conn_info(conn)->features;
    printf("hello: features 0x%x rdma %d\n", f, (f & DSC_FEATURE_RDMA) != 0);
    dsc_conn_close(conn);
    return 0;
}

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
        TESTOPT("--bad", &bad),
        TESTOPT("--close-now", &close_now),
        TESTOPT("--delay-ms", &delay_ms),
        TESTOPT("--closed", &closed),
    };
    if (testopt_parse("rdma_check", argc, argv, 2, opts, sizeof opts / sizeof opts[0]) != 0)
        return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    REQUIRE(servers && dataset);
    if (!strcmp(mode, "stale"))
        return mode_stale();
    if (!strcmp(mode, "badread"))
        return mode_badread();
    if (!strcmp(mode, "slowconnect"))
        return mode_slowconnect();
    if (!strcmp(mode, "connect"))
        return mode_connect();
    if (!strcmp(mode, "hello"))
        return mode_hello();
    if (!strcmp(mode, "create"))
        return mode_create();
    REQUIRE(dir != NULL);
    REQUIRE(testdata_load(dir, 1, &source) == 0);
    if (!strcmp(mode, "epoch"))
        return mode_epoch();
    fprintf(stderr, "rdma_check: unknown mode %s\n", mode);
    return 2;
}
