/* A hostile RDMA client written from proto/PROTOCOL.md ("RDMA", "Authentication"), against a real
 * dscached through whichever verbs library DSC_IBVERBS_LIB names (tests/fakeverbs in CI). Driven
 * by tests/integration/test_rdma_confine.sh and test_rdma_revoke.sh.
 * usage: rdma_hostile MODE --servers S --dataset A --other B --token T [--admin-token T2] ...
 *   confine  with a credential limited to dataset A (--token) and one that may read B
 *            (--admin-token, used only to learn where B's bytes lie): a READ of B's bytes, of
 *            bytes of A not leased, of a lease after its release, and under another
 *            connection's rkey each complete with IBV_WC_REM_ACCESS_ERR and fence that
 *            connection (UNAVAILABLE frame, request id 0, then close); the leased bytes read
 *            fine. Prints one line per case.
 *   revoke   --token T (a credential the script removes) and --other-token T2 (one the script
 *            narrows from A and B to A): leases A (T) and B (T2), prints "ready", waits for
 *            --go-file to appear (the script has sent SIGHUP), then measures how long the
 *            removed credential's TCP connection and READs and the narrowed credential's READ of
 *            B keep working (each must end within 1 s).
 *   latency  --count N: N rounds of one RDMA_GET (one chunk of A, the previous lease released in
 *            it) and the READ of its chunk: prints the median and p99 round trip (GET + READ),
 *            for docs/rdma.md's cost of confinement (run against windows and DSC_FAKEVERBS_MW=off).
 * Exit 0 when every check passed, 1 on a failure, 77 without a device. */
#include "conn.h"
#include "credential.h"
#include "rdma_link.h"
#include "testdata.h"
#include "testlib.h"
#include "util.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *servers, *dataset, *other, *token, *admin_token, *other_token, *go_file;
static uint32_t count = 1000;

#if DSC_HAVE_VERBS_H

typedef struct session {
    dsc_rdma_dev_t *dev;
    dsc_conn_t *conn;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    dsc_rdma_connect_resp_t resp;
    uint8_t *buf;
    struct ibv_mr *mr;
    uint32_t buf_len;
} session_t;

static dsc_rdma_dev_t g_dev;

static double now_s(void) {
    return dsc_now_s();
}

static int open_conn(const char *tok, dsc_conn_t **out) {
    dsc_credential_t cred;
    char why[512];
    REQUIRE(dsc__credential_load(tok, &cred, why, sizeof why) > 0);
    int rc = dsc_conn_open_addr_auth(servers, 10000, 0, &cred, out);
    dsc__credential_wipe(&cred);
    return rc;
}

/* TCP connection under tok, QP at RTS towards the server's, a 1 MiB registered buffer. */
static void session_open(session_t *s, const char *tok) {
    memset(s, 0, sizeof *s);
    s->dev = &g_dev;
    REQUIRE(open_conn(tok, &s->conn) == 0);
    s->cq = g_dev.v.create_cq(g_dev.ctx, 64, NULL, NULL, 0);
    REQUIRE(s->cq != NULL);
    struct sockaddr_storage local;
    socklen_t local_len = sizeof local;
    char why[600];
    dsc_rdma_gid_choice_t gid;
    REQUIRE(getsockname(dsc_conn_fd(s->conn), (struct sockaddr *)&local, &local_len) == 0);
    REQUIRE(dsc_rdma_gid_choose(&g_dev, &local, &gid, why, sizeof why) == 0);
    s->qp = dsc_rdma_qp_create(&g_dev, s->cq, 16, 0);
    REQUIRE(s->qp != NULL);
    uint32_t psn = dsc_rdma_random_psn();
    dsc_rdma_qp_info_t me;
    dsc_rdma_qp_describe(&g_dev, &gid, s->qp, psn, 1, &me);
    uint8_t req[128];
    int n = dsc_rdma_connect_req_encode(&me, req, sizeof req);
    REQUIRE(n > 0);
    uint8_t *body = NULL;
    size_t len = 0;
    int rc = dsc_conn_call(s->conn, DSC_OP_RDMA_CONNECT, req, (size_t)n, &body, &len);
    if (rc != 0)
        fprintf(stderr, "RDMA_CONNECT: %s: %s\n", dsc_strerror(rc), dsc_conn_last_error(s->conn));
    REQUIRE(rc == 0);
    REQUIRE(dsc_rdma_connect_resp_decode(body, len, &s->resp) == 0);
    free(body);
    REQUIRE(dsc_rdma_qp_rtr(&g_dev, &gid, s->qp, &s->resp.qp, s->resp.qp.mtu, 1) == 0);
    REQUIRE(dsc_rdma_qp_rts(&g_dev, s->qp, psn, s->resp.qp.rd_atomic) == 0);
    s->buf_len = 1u << 20;
    s->buf = aligned_alloc(4096, s->buf_len);
    REQUIRE(s->buf != NULL);
    s->mr = g_dev.v.reg_mr(g_dev.pd, s->buf, s->buf_len, IBV_ACCESS_LOCAL_WRITE);
    REQUIRE(s->mr != NULL);
}

/* An RDMA_GET of one chunk under a lease: its descriptor and lease id. */
static void session_lease(session_t *s, const char *ds, uint32_t chunk, dsc_rdma_desc_t *d,
                          uint64_t *lease) {
    dsc_rdma_get_req_t get = {.get = {.dataset = {ds, (uint16_t)strlen(ds)},
                                      .shard_id = 0,
                                      .first_chunk = chunk,
                                      .chunk_count = 1}};
    uint8_t gb[512];
    int n = dsc_rdma_get_req_encode(&get, gb, sizeof gb);
    REQUIRE(n > 0);
    uint8_t *body = NULL;
    size_t len = 0;
    int rc = dsc_conn_call(s->conn, DSC_OP_RDMA_GET, gb, (size_t)n, &body, &len);
    if (rc != 0)
        fprintf(stderr, "RDMA_GET %s: %s: %s\n", ds, dsc_strerror(rc),
                dsc_conn_last_error(s->conn));
    REQUIRE(rc == 0);
    dsc_rdma_get_resp_t gr;
    REQUIRE(dsc_rdma_get_resp_decode(body, len, &gr) == 0);
    REQUIRE(!(gr.flags & DSC_RDMA_GET_INLINE));
    dsc_chunk_entry_t e;
    REQUIRE(dsc_rdma_get_resp_chunk(&gr, 0, &e, d) == 0);
    *lease = gr.lease_id;
    free(body);
    REQUIRE(d->len <= s->buf_len);
}

/* The release-only RDMA_GET of one lease. */
static void session_release(session_t *s, uint64_t lease) {
    uint64_t rel[1] = {lease};
    dsc_rdma_get_req_t get = {.release_count = 1, .release = rel};
    uint8_t gb[128];
    int n = dsc_rdma_get_req_encode(&get, gb, sizeof gb);
    REQUIRE(n > 0);
    uint8_t *body = NULL;
    size_t len = 0;
    REQUIRE(dsc_conn_call(s->conn, DSC_OP_RDMA_GET, gb, (size_t)n, &body, &len) == 0);
    free(body);
}

/* One signalled READ of len bytes from (addr, rkey): its completion status, -1 (none within 5 s)
 * or -2 (post failed). */
static int session_read(session_t *s, uint64_t addr, uint32_t rkey, uint32_t len) {
    struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)s->buf, .length = len, .lkey = s->mr->lkey};
    struct ibv_send_wr wr = {
        .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED};
    wr.wr.rdma.remote_addr = addr;
    wr.wr.rdma.rkey = rkey;
    struct ibv_send_wr *bad = NULL;
    if (ibv_post_send(s->qp, &wr, &bad) != 0)
        return -2;
    double end = now_s() + 5;
    struct ibv_wc wc;
    while (now_s() < end) {
        if (ibv_poll_cq(s->cq, 1, &wc) > 0)
            return (int)wc.status;
        usleep(100);
    }
    return -1;
}

static const char *wc_name(int status) {
    return status >= 0    ? g_dev.v.wc_status_str((enum ibv_wc_status)status)
           : status == -2 ? "post failed"
                          : "no completion";
}

static void session_close(session_t *s) {
    if (s->mr)
        g_dev.v.dereg_mr(s->mr);
    free(s->buf);
    dsc_rdma_qp_fence(&g_dev, s->qp);
    g_dev.v.destroy_cq(s->cq);
    dsc_conn_close(s->conn);
    memset(s, 0, sizeof *s);
}

/* After a refused READ: the server fences the connection at once (UNAVAILABLE, id 0, close). */
static void expect_fenced(session_t *s, const char *what) {
    dsc_frame_header_t h;
    char msg[DSC_ERROR_MAX_MESSAGE + 1] = "";
    double t0 = now_s();
    int rc = dsc_conn_recv_header(s->conn, &h);
    if (rc == 0 && h.body_len < sizeof msg && dsc_conn_recv_body(s->conn, msg, h.body_len) == 0)
        msg[h.body_len] = '\0';
    int fenced = rc == 0 && h.status == DSC_STATUS_UNAVAILABLE && h.request_id == 0;
    if (fenced)
        rc = dsc_conn_recv_header(s->conn, &h);
    printf("%s: connection fenced %s after %.2f s (%s), then %s\n", what, fenced ? "yes" : "NO",
           now_s() - t0, msg, rc < 0 ? "closed" : "still open");
    CHECK(fenced && rc < 0);
}

/* One READ expected to be refused; returns 1 when it was (and the connection was fenced). */
static void refused_read(session_t *s, const char *what, uint64_t addr, uint32_t rkey, uint32_t len,
                         uint64_t forbidden_sum) {
    memset(s->buf, 0, len);
    int st = session_read(s, addr, rkey, len);
    int leaked = st == IBV_WC_SUCCESS && dsc_checksum(s->buf, len) == forbidden_sum;
    printf("%s: %s%s\n", what, wc_name(st), leaked ? " (the bytes were read)" : "");
    CHECK_EQ_INT(st, IBV_WC_REM_ACCESS_ERR);
    if (st == IBV_WC_REM_ACCESS_ERR)
        expect_fenced(s, what);
}

static int mode_confine(void) {
    REQUIRE(other != NULL && admin_token != NULL);
    /* Where dataset B's chunk 0 lies (a credential that may read B learns it). */
    session_t spy;
    session_open(&spy, admin_token);
    dsc_rdma_desc_t db, db_own;
    uint64_t lb;
    session_lease(&spy, other, 0, &db, &lb);
    CHECK_EQ_INT(session_read(&spy, db.addr, db.rkey, db.len), IBV_WC_SUCCESS);
    printf("B's chunk 0: %u bytes at 0x%llx\n", db.len, (unsigned long long)db.addr);

    /* 1. Dataset B through a connection of the credential limited to A. */
    session_t s;
    session_open(&s, token);
    dsc_rdma_desc_t da, da1;
    uint64_t la;
    session_lease(&s, dataset, 0, &da, &la);
    CHECK_EQ_INT(session_read(&s, da.addr, da.rkey, da.len), IBV_WC_SUCCESS);
    CHECK(dsc_checksum(s.buf, da.len) == da.checksum);
    printf("leased chunk of A: read, checksum ok (rkey 0x%x)\n", da.rkey);
    /* RDMA_GET of B on this connection is NOT_FOUND, as over TCP. */
    dsc_rdma_get_req_t get = {
        .get = {.dataset = {other, (uint16_t)strlen(other)}, .chunk_count = 1}};
    uint8_t gb[256];
    int n = dsc_rdma_get_req_encode(&get, gb, sizeof gb);
    uint8_t *body = NULL;
    size_t len = 0;
    int rc = dsc_conn_call(s.conn, DSC_OP_RDMA_GET, gb, (size_t)n, &body, &len);
    free(body);
    printf("RDMA_GET of B: %s\n", rc ? dsc_strerror(rc) : "OK");
    CHECK_EQ_INT(rc, DSC_ENOTFOUND);
    refused_read(&s, "READ of B's bytes under A's lease key", db.addr, da.rkey, db.len,
                 db.checksum);
    session_close(&s);

    /* 2. Bytes of A next to the lease (chunk 1, not leased). */
    session_open(&s, token);
    session_lease(&s, dataset, 0, &da, &la);
    {
        session_t peek;
        uint64_t l1;
        session_open(&peek, admin_token);
        session_lease(&peek, dataset, 1, &da1, &l1);
        session_close(&peek);
    }
    refused_read(&s, "READ of A's chunk 1 (not leased) under chunk 0's key", da1.addr, da.rkey,
                 da1.len, da1.checksum);
    session_close(&s);

    /* 3. After the release. */
    session_open(&s, token);
    session_lease(&s, dataset, 0, &da, &la);
    CHECK_EQ_INT(session_read(&s, da.addr, da.rkey, da.len), IBV_WC_SUCCESS);
    session_release(&s, la);
    refused_read(&s, "READ of a lease after its release", da.addr, da.rkey, da.len, da.checksum);
    session_close(&s);

    /* 4. Another connection's key (same credential, same chunk). */
    session_t t;
    session_open(&s, token);
    session_open(&t, token);
    dsc_rdma_desc_t dt;
    uint64_t lt;
    session_lease(&s, dataset, 0, &da, &la);
    session_lease(&t, dataset, 0, &dt, &lt);
    CHECK_EQ_INT(session_read(&t, dt.addr, dt.rkey, dt.len), IBV_WC_SUCCESS);
    refused_read(&t, "READ under another connection's lease key", da.addr, da.rkey, da.len,
                 da.checksum);
    /* The owner of that key is not disturbed. */
    CHECK_EQ_INT(session_read(&s, da.addr, da.rkey, da.len), IBV_WC_SUCCESS);
    printf("the key's own connection still reads: ok\n");
    session_close(&t);
    session_close(&s);
    (void)db_own;
    session_release(&spy, lb);
    session_close(&spy);
    return TEST_DONE();
}

/* Whether the connection got a frame or its end within ms: 1 closed / refused, 0 still open. */
static int conn_ended(dsc_conn_t *c, int ms, char *msg, size_t cap) {
    struct pollfd p = {.fd = dsc_conn_fd(c), .events = POLLIN};
    if (poll(&p, 1, ms) <= 0)
        return 0;
    dsc_frame_header_t h;
    msg[0] = '\0';
    int rc = dsc_conn_recv_header(c, &h);
    if (rc == 0 && h.body_len < cap && dsc_conn_recv_body(c, msg, h.body_len) == 0)
        msg[h.body_len] = '\0';
    return 1;
}

static int mode_revoke(void) {
    REQUIRE(other != NULL && other_token != NULL && go_file != NULL);
    session_t r, w;
    dsc_rdma_desc_t dr, dw;
    uint64_t lr, lw;
    session_open(&r, token); /* to be removed */
    session_lease(&r, dataset, 0, &dr, &lr);
    dsc_conn_t *tcp_only = NULL;
    REQUIRE(open_conn(token, &tcp_only) == 0);
    session_open(&w, other_token); /* to be narrowed to A */
    session_lease(&w, other, 0, &dw, &lw);
    CHECK_EQ_INT(session_read(&r, dr.addr, dr.rkey, dr.len), IBV_WC_SUCCESS);
    CHECK_EQ_INT(session_read(&w, dw.addr, dw.rkey, dw.len), IBV_WC_SUCCESS);
    printf("ready\n");
    fflush(stdout);
    while (access(go_file, F_OK) != 0)
        usleep(5000);
    double t0 = now_s();
    /* Keep reading until each stops working (at most 3 s). */
    double r_read = -1, w_read = -1, r_tcp = -1, t_tcp = -1;
    char msg[DSC_ERROR_MAX_MESSAGE + 1];
    int st_r = 0, st_w = 0;
    while (now_s() - t0 < 3 && (r_read < 0 || w_read < 0 || r_tcp < 0 || t_tcp < 0)) {
        if (r_read < 0 && (st_r = session_read(&r, dr.addr, dr.rkey, dr.len)) != IBV_WC_SUCCESS)
            r_read = now_s() - t0;
        if (w_read < 0 && (st_w = session_read(&w, dw.addr, dw.rkey, dw.len)) != IBV_WC_SUCCESS)
            w_read = now_s() - t0;
        if (r_tcp < 0 && conn_ended(r.conn, 0, msg, sizeof msg)) {
            r_tcp = now_s() - t0;
            printf("removed credential, RDMA connection: server said \"%s\"\n", msg);
        }
        if (t_tcp < 0 && conn_ended(tcp_only, 0, msg, sizeof msg)) {
            t_tcp = now_s() - t0;
            printf("removed credential, TCP connection: server said \"%s\"\n", msg);
        }
        usleep(20000);
    }
    printf("removed credential: READ stopped after %.2f s (%s), its RDMA connection closed after "
           "%.2f s, its TCP connection after %.2f s\n",
           r_read, wc_name(st_r), r_tcp, t_tcp);
    printf("narrowed credential: READ of the dataset it lost stopped after %.2f s (%s)\n", w_read,
           wc_name(st_w));
    CHECK(r_read >= 0 && r_read < 1.0);
    CHECK(r_tcp >= 0 && r_tcp < 1.0);
    CHECK(t_tcp >= 0 && t_tcp < 1.0);
    CHECK(w_read >= 0 && w_read < 1.0);
    CHECK(st_w == IBV_WC_REM_ACCESS_ERR);
    dsc_conn_close(tcp_only);
    session_close(&r);
    session_close(&w);
    return TEST_DONE();
}

static int dbl_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int mode_latency(void) {
    session_t s;
    session_open(&s, token);
    double *t = calloc(count, sizeof *t);
    REQUIRE(t != NULL);
    uint64_t prev = 0;
    for (uint32_t i = 0; i < count; i++) {
        uint64_t rel[1] = {prev};
        dsc_rdma_get_req_t get = {.get = {.dataset = {dataset, (uint16_t)strlen(dataset)},
                                          .first_chunk = i % 4,
                                          .chunk_count = 1},
                                  .release_count = prev ? 1 : 0,
                                  .release = rel};
        uint8_t gb[512];
        int n = dsc_rdma_get_req_encode(&get, gb, sizeof gb);
        REQUIRE(n > 0);
        double t0 = now_s();
        uint8_t *body = NULL;
        size_t len = 0;
        REQUIRE(dsc_conn_call(s.conn, DSC_OP_RDMA_GET, gb, (size_t)n, &body, &len) == 0);
        dsc_rdma_get_resp_t gr;
        dsc_rdma_desc_t d;
        dsc_chunk_entry_t e;
        REQUIRE(dsc_rdma_get_resp_decode(body, len, &gr) == 0 &&
                dsc_rdma_get_resp_chunk(&gr, 0, &e, &d) == 0);
        prev = gr.lease_id;
        free(body);
        REQUIRE(session_read(&s, d.addr, d.rkey, d.len) == IBV_WC_SUCCESS);
        t[i] = now_s() - t0;
    }
    qsort(t, count, sizeof *t, dbl_cmp);
    printf("latency: %u rounds of RDMA_GET + READ: median %.1f us, p99 %.1f us\n", count,
           t[count / 2] * 1e6, t[(size_t)(count * 0.99)] * 1e6);
    free(t);
    session_close(&s);
    return 0;
}

static int run(const char *mode) {
    char why[600];
    if (dsc_rdma_dev_open(&g_dev, why, sizeof why) < 0) {
        printf("SKIP: no RDMA device: %s\n", why);
        return 77;
    }
    int rc = 2;
    if (!strcmp(mode, "confine"))
        rc = mode_confine();
    else if (!strcmp(mode, "revoke"))
        rc = mode_revoke();
    else if (!strcmp(mode, "latency"))
        rc = mode_latency();
    else
        fprintf(stderr, "rdma_hostile: unknown mode %s\n", mode);
    dsc_rdma_dev_close(&g_dev);
    return rc;
}
#else
static int run(const char *mode) {
    (void)mode;
    printf("SKIP: built without rdma-core headers\n");
    return 77;
}
#endif

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: rdma_hostile confine|revoke --servers S --dataset A ...\n");
        return 2;
    }
    const testopt_t opts[] = {
        TESTOPT("--servers", &servers),
        TESTOPT("--dataset", &dataset),
        TESTOPT("--other", &other),
        TESTOPT("--token", &token),
        TESTOPT("--admin-token", &admin_token),
        TESTOPT("--other-token", &other_token),
        TESTOPT("--go-file", &go_file),
        TESTOPT("--count", &count),
    };
    if (testopt_parse("rdma_hostile", argc, argv, 2, opts, sizeof opts / sizeof opts[0]) != 0)
        return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    REQUIRE(servers && dataset && token);
    return run(argv[1]);
}
