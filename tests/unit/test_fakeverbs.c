/* The test-only fake verbs library (tests/fakeverbs) through the dlopen'ed verbs table: RC state
 * machine, READs with byte compare, remote access and bounds errors, a dead peer, flushes after
 * an error, async events (dropped with their QP, acks before destroy, port events on demand), MTU
 * mismatch, the completion channel fd, fault injection, and (under ASan) a READ of
 * freed memory caught in the serving process. Two nodes: two contexts in this process, or this
 * program re-executed as a peer process ("--peer"). */
#include "testlib.h"
#include "verbs.h"

#if !DSC_HAVE_VERBS_H
int main(void) {
    (void)dsc_test_failures;
    SKIP("built without rdma-core's infiniband/verbs.h: no verbs table, no fake library");
}
#else

#include "fakeverbs.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(UNDER_ASAN)
#define UNDER_ASAN 1
#endif

extern char **environ;
static dsc_verbs_t V;
static int (*set_faults)(const char *spec);

#define BUF_LEN (1u << 20)
#define GID_DECOY 1    /* ::ffff:10.254.Y.Z: routable, on no local network, names nobody */
#define GID_LOOPBACK 2 /* ::ffff:127.X.Y.Z: the one that reaches this process */

typedef struct node {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *channel;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    struct ibv_mr *mr;
    uint8_t *buf;
    union ibv_gid gid; /* index GID_LOOPBACK: the RoCE v2 GID that reaches this node */
    enum ibv_mtu active_mtu;
} node_t;

static void node_open(node_t *n, int with_channel) {
    memset(n, 0, sizeof *n);
    int num = 0;
    struct ibv_device **list = V.get_device_list(&num);
    REQUIRE(list != NULL && num == 1);
    n->ctx = V.open_device(list[0]);
    V.free_device_list(list);
    REQUIRE(n->ctx != NULL);
    struct ibv_port_attr port;
    memset(&port, 0, sizeof port);
    REQUIRE(V.query_port(n->ctx, 1, &port) == 0);
    n->active_mtu = port.active_mtu;
    REQUIRE(V.query_gid(n->ctx, 1, GID_LOOPBACK, &n->gid) == 0);
    n->pd = V.alloc_pd(n->ctx);
    REQUIRE(n->pd != NULL);
    if (with_channel) {
        n->channel = V.create_comp_channel(n->ctx);
        REQUIRE(n->channel != NULL);
    }
    n->cq = V.create_cq(n->ctx, 256, n, n->channel, 0);
    REQUIRE(n->cq != NULL);
    n->buf = malloc(BUF_LEN);
    REQUIRE(n->buf != NULL);
    for (uint32_t i = 0; i < BUF_LEN; i++)
        n->buf[i] = (uint8_t)(i * 7 + 3);
    n->mr = V.reg_mr(n->pd, n->buf, BUF_LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    REQUIRE(n->mr != NULL);
}

static void qp_create(node_t *n) {
    struct ibv_qp_init_attr init;
    memset(&init, 0, sizeof init);
    init.send_cq = n->cq;
    init.recv_cq = n->cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = 64;
    init.cap.max_recv_wr = 1;
    init.cap.max_send_sge = 4;
    init.cap.max_recv_sge = 1;
    n->qp = V.create_qp(n->pd, &init);
    REQUIRE(n->qp != NULL);
}

static void qp_drop(node_t *n) {
    if (n->qp != NULL)
        CHECK(V.destroy_qp(n->qp) == 0);
    n->qp = NULL;
}

static void node_close(node_t *n) {
    qp_drop(n);
    CHECK(V.dereg_mr(n->mr) == 0);
    CHECK(V.destroy_cq(n->cq) == 0);
    if (n->channel)
        CHECK(V.destroy_comp_channel(n->channel) == 0);
    CHECK(V.dealloc_pd(n->pd) == 0);
    CHECK(V.close_device(n->ctx) == 0);
    free(n->buf);
}

static int to_init(struct ibv_qp *qp) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_READ;
    return V.modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int to_rtr(struct ibv_qp *qp, uint32_t dest_qpn, const union ibv_gid *dgid,
                  enum ibv_mtu mtu) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = mtu;
    a.dest_qp_num = dest_qpn;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 16;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = *dgid;
    a.ah_attr.grh.sgid_index = GID_LOOPBACK;
    a.ah_attr.grh.hop_limit = 1;
    a.ah_attr.port_num = 1;
    return V.modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                           IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static int to_rts(struct ibv_qp *qp) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = 0;
    a.max_rd_atomic = 16;
    return V.modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* Fresh QPs on both nodes, a (requester) connected to b (responder), with the given MTUs. */
static void connect_pair(node_t *a, node_t *b, enum ibv_mtu mtu_a, enum ibv_mtu mtu_b) {
    qp_drop(a);
    qp_drop(b);
    qp_create(a);
    qp_create(b);
    REQUIRE(to_init(a->qp) == 0 && to_init(b->qp) == 0);
    REQUIRE(to_rtr(b->qp, a->qp->qp_num, &a->gid, mtu_b) == 0);
    REQUIRE(to_rtr(a->qp, b->qp->qp_num, &b->gid, mtu_a) == 0);
    REQUIRE(to_rts(a->qp) == 0);
}

static int post_read(node_t *n, uint64_t wr_id, void *dst, uint32_t len, uint32_t lkey,
                     uint64_t raddr, uint32_t rkey, int signaled) {
    struct ibv_sge sge = {(uint64_t)(uintptr_t)dst, len, lkey};
    struct ibv_send_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    return ibv_post_send(n->qp, &wr, &bad);
}

/* Polls until one completion arrives or timeout_ms pass; returns 1 with *wc, or 0. */
static int wait_wc(node_t *n, struct ibv_wc *wc, int timeout_ms) {
    for (int waited = 0; waited <= timeout_ms; waited++) {
        if (ibv_poll_cq(n->cq, 1, wc) == 1)
            return 1;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static uint64_t addr_of(const void *p) {
    return (uint64_t)(uintptr_t)p;
}

/* ---- In-process tests ----------------------------------------------------------------------- */

static void test_device(node_t *a) {
    struct ibv_device_attr dev;
    CHECK(V.query_device(a->ctx, &dev) == 0);
    CHECK(dev.max_mr_size == 1ull << 40 && dev.max_qp_rd_atom == 16 && dev.phys_port_cnt == 1);
    struct ibv_port_attr port;
    memset(&port, 0, sizeof port);
    CHECK(V.query_port(a->ctx, 1, &port) == 0);
    CHECK(port.state == IBV_PORT_ACTIVE && port.active_mtu == IBV_MTU_4096 &&
          port.link_layer == IBV_LINK_LAYER_ETHERNET && port.gid_tbl_len >= 2);
    /* GID 2 is the RoCE v2 GID ::ffff:127.X.Y.Z naming this process; GID 1 a decoy RoCE v2 GID
     * ::ffff:10.254.Y.Z; GID 0 is link-local. */
    uint32_t pid = (uint32_t)getpid();
    CHECK(a->gid.raw[10] == 0xff && a->gid.raw[11] == 0xff && a->gid.raw[12] == 127);
    CHECK(((uint32_t)a->gid.raw[13] << 16 | (uint32_t)a->gid.raw[14] << 8 | a->gid.raw[15]) == pid);
    CHECK(!dsc_verbs_gid_unusable(a->gid.raw));
    union ibv_gid g0;
    CHECK(V.query_gid(a->ctx, 1, 0, &g0) == 0 && dsc_verbs_gid_unusable(g0.raw));
    REQUIRE(V.query_gid_ex != NULL);
    struct ibv_gid_entry entry;
    CHECK(V.query_gid_ex(a->ctx, 1, GID_LOOPBACK, &entry, 0, sizeof entry) == 0);
    CHECK(entry.gid_type == IBV_GID_TYPE_ROCE_V2 && memcmp(entry.gid.raw, a->gid.raw, 16) == 0);
    /* The decoy: routable and RoCE v2, so "the first routable GID" is this one. */
    union ibv_gid decoy;
    CHECK(V.query_gid(a->ctx, 1, GID_DECOY, &decoy) == 0 && !dsc_verbs_gid_unusable(decoy.raw));
    CHECK(decoy.raw[10] == 0xff && decoy.raw[11] == 0xff && decoy.raw[12] == 10 &&
          decoy.raw[13] == 254 && decoy.raw[14] == (uint8_t)(pid >> 8) &&
          decoy.raw[15] == (uint8_t)pid);
    CHECK(V.query_gid_ex(a->ctx, 1, GID_DECOY, &entry, 0, sizeof entry) == 0);
    CHECK(entry.gid_type == IBV_GID_TYPE_ROCE_V2 && memcmp(entry.gid.raw, decoy.raw, 16) == 0);
    CHECK(V.query_gid_ex(a->ctx, 1, 0, &entry, 0, sizeof entry) == 0 &&
          entry.gid_type == IBV_GID_TYPE_ROCE_V2 && dsc_verbs_gid_unusable(entry.gid.raw));
    CHECK(V.query_gid_ex(a->ctx, 1, 3, &entry, 0, sizeof entry) == ENODATA);
    /* Address handles: from a GID the port holds to a routable destination only. */
    REQUIRE(V.create_ah != NULL && V.destroy_ah != NULL);
    struct ibv_ah_attr ah;
    memset(&ah, 0, sizeof ah);
    ah.is_global = 1;
    ah.port_num = 1;
    ah.grh.hop_limit = 64;
    for (int sgid = 0; sgid <= 3; sgid++) {
        ah.grh.sgid_index = (uint8_t)sgid;
        ah.grh.dgid = a->gid;
        errno = 0;
        struct ibv_ah *h = V.create_ah(a->pd, &ah);
        CHECK(sgid < 3 ? h != NULL : h == NULL && errno == EINVAL);
        if (h != NULL)
            CHECK(V.destroy_ah(h) == 0);
    }
    ah.grh.sgid_index = GID_LOOPBACK;
    ah.grh.dgid = g0; /* link-local: no route */
    errno = 0;
    CHECK(V.create_ah(a->pd, &ah) == NULL && errno == EINVAL);
    memset(&ah.grh.dgid, 0, sizeof ah.grh.dgid);
    CHECK(V.create_ah(a->pd, &ah) == NULL && errno == EINVAL);
    ah.grh.dgid = decoy; /* routable: the handle is fine, the traffic is what fails */
    struct ibv_ah *h = V.create_ah(a->pd, &ah);
    CHECK(h != NULL && V.destroy_ah(h) == 0);
    ah.grh.dgid = a->gid;
    ah.is_global = 0; /* RoCE needs the GRH */
    CHECK(V.create_ah(a->pd, &ah) == NULL && errno == EINVAL);
    CHECK(V.is_fork_initialized != NULL && V.is_fork_initialized() == IBV_FORK_UNNEEDED);
    errno = 0;
    CHECK(V.reg_dmabuf_mr(a->pd, 0, 4096, 0, -1, IBV_ACCESS_LOCAL_WRITE) == NULL &&
          errno == EOPNOTSUPP);
}

static void test_state_machine(node_t *a, node_t *b) {
    qp_drop(a);
    qp_create(a);
    qp_create(b);
    CHECK(a->qp->state == IBV_QPS_RESET);
    uint8_t dst[64];
    CHECK(post_read(a, 1, dst, 64, a->mr->lkey, addr_of(b->buf), b->mr->rkey, 1) == EINVAL);
    /* RESET -> RTR skips INIT. */
    CHECK(to_rtr(a->qp, b->qp->qp_num, &b->gid, IBV_MTU_4096) == EINVAL);
    /* RESET -> INIT without the port. */
    struct ibv_qp_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = 1;
    CHECK(V.modify_qp(a->qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS) ==
          EINVAL);
    /* ... or with an attribute INIT does not take. */
    CHECK(V.modify_qp(a->qp, &attr,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS |
                          IBV_QP_PATH_MTU) == EINVAL);
    attr.port_num = 2;
    CHECK(V.modify_qp(a->qp, &attr,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) ==
          EINVAL);
    CHECK(a->qp->state == IBV_QPS_RESET);
    CHECK(to_init(a->qp) == 0 && a->qp->state == IBV_QPS_INIT);
    CHECK(to_rts(a->qp) == EINVAL); /* INIT -> RTS skips RTR */
    /* INIT -> RTR without MIN_RNR_TIMER, and with SQ_PSN (an RTS attribute). */
    memset(&attr, 0, sizeof attr);
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = IBV_MTU_1024;
    attr.dest_qp_num = b->qp->qp_num;
    attr.max_dest_rd_atomic = 1;
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.dgid = b->gid;
    attr.ah_attr.grh.sgid_index = GID_LOOPBACK;
    attr.ah_attr.port_num = 1;
    int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
              IBV_QP_MAX_DEST_RD_ATOMIC;
    CHECK(V.modify_qp(a->qp, &attr, rtr) == EINVAL);
    CHECK(V.modify_qp(a->qp, &attr, rtr | IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN) == EINVAL);
    /* RoCE needs a global address (GRH) with a valid source GID index. */
    attr.ah_attr.is_global = 0;
    CHECK(V.modify_qp(a->qp, &attr, rtr | IBV_QP_MIN_RNR_TIMER) == EINVAL);
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.sgid_index = 3;
    CHECK(V.modify_qp(a->qp, &attr, rtr | IBV_QP_MIN_RNR_TIMER) == EINVAL);
    attr.ah_attr.grh.sgid_index = GID_LOOPBACK;
    attr.max_dest_rd_atomic = 17; /* above the device's max_qp_rd_atom */
    CHECK(V.modify_qp(a->qp, &attr, rtr | IBV_QP_MIN_RNR_TIMER) == EINVAL);
    attr.max_dest_rd_atomic = 1;
    CHECK(a->qp->state == IBV_QPS_INIT);
    CHECK(V.modify_qp(a->qp, &attr, rtr | IBV_QP_MIN_RNR_TIMER) == 0);
    CHECK(a->qp->state == IBV_QPS_RTR);
    CHECK(post_read(a, 1, dst, 64, a->mr->lkey, addr_of(b->buf), b->mr->rkey, 1) == EINVAL);
    /* RTR -> RTS without the retry count. */
    memset(&attr, 0, sizeof attr);
    attr.qp_state = IBV_QPS_RTS;
    attr.timeout = 14;
    attr.rnr_retry = 7;
    attr.max_rd_atomic = 1;
    CHECK(V.modify_qp(a->qp, &attr,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                          IBV_QP_MAX_QP_RD_ATOMIC) == EINVAL);
    attr.retry_cnt = 8; /* out of range */
    CHECK(V.modify_qp(a->qp, &attr,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == EINVAL);
    CHECK(to_rts(a->qp) == 0 && a->qp->state == IBV_QPS_RTS);
    struct ibv_qp_attr q;
    struct ibv_qp_init_attr qi;
    CHECK(V.query_qp(a->qp, &q, IBV_QP_STATE | IBV_QP_PATH_MTU, &qi) == 0);
    CHECK(q.qp_state == IBV_QPS_RTS && q.path_mtu == IBV_MTU_1024 &&
          q.dest_qp_num == b->qp->qp_num);
    /* Any state -> ERR -> RESET -> INIT again. */
    memset(&attr, 0, sizeof attr);
    attr.qp_state = IBV_QPS_ERR;
    CHECK(V.modify_qp(a->qp, &attr, IBV_QP_STATE) == 0 && a->qp->state == IBV_QPS_ERR);
    attr.qp_state = IBV_QPS_RESET;
    attr.timeout = 3;
    CHECK(V.modify_qp(a->qp, &attr, IBV_QP_STATE | IBV_QP_TIMEOUT) == EINVAL);
    CHECK(V.modify_qp(a->qp, &attr, IBV_QP_STATE) == 0 && a->qp->state == IBV_QPS_RESET);
    CHECK(to_init(a->qp) == 0);
    /* Objects in use cannot be destroyed. */
    CHECK(V.destroy_cq(a->cq) == EBUSY);
    CHECK(V.dealloc_pd(a->pd) == EBUSY);
    qp_drop(a);
    qp_drop(b);
}

static void test_read(node_t *a, node_t *b) {
    connect_pair(a, b, IBV_MTU_4096, IBV_MTU_4096);
    memset(a->buf, 0, BUF_LEN);
    /* One signalled READ of 64 KiB at offset 4096 of b, scattered over two SGEs of a. */
    struct ibv_sge sge[2] = {{addr_of(a->buf), 40000, a->mr->lkey},
                             {addr_of(a->buf + 100000), 65536 - 40000, a->mr->lkey}};
    struct ibv_send_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = 42;
    wr.sg_list = sge;
    wr.num_sge = 2;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = addr_of(b->buf + 4096);
    wr.wr.rdma.rkey = b->mr->rkey;
    REQUIRE(ibv_post_send(a->qp, &wr, &bad) == 0);
    struct ibv_wc wc;
    REQUIRE(wait_wc(a, &wc, 5000));
    CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 42 && wc.opcode == IBV_WC_RDMA_READ &&
          wc.byte_len == 65536 && wc.qp_num == a->qp->qp_num);
    CHECK(memcmp(a->buf, b->buf + 4096, 40000) == 0);
    CHECK(memcmp(a->buf + 100000, b->buf + 4096 + 40000, 65536 - 40000) == 0);

    /* Four READs, only the last signalled: one completion, all four ranges arrived in order. */
    memset(a->buf, 0, BUF_LEN);
    for (int i = 0; i < 4; i++)
        REQUIRE(post_read(a, 100 + (uint64_t)i, a->buf + i * 8192, 8192, a->mr->lkey,
                          addr_of(b->buf + 300000 + i * 8192), b->mr->rkey, i == 3) == 0);
    REQUIRE(wait_wc(a, &wc, 5000));
    CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 103);
    CHECK(memcmp(a->buf, b->buf + 300000, 4 * 8192) == 0);
    CHECK(!wait_wc(a, &wc, 50));
    /* The whole region, to its last byte. */
    REQUIRE(post_read(a, 7, a->buf, BUF_LEN, a->mr->lkey, addr_of(b->buf), b->mr->rkey, 1) == 0);
    REQUIRE(wait_wc(a, &wc, 5000));
    CHECK(wc.status == IBV_WC_SUCCESS && memcmp(a->buf, b->buf, BUF_LEN) == 0);
}

/* One READ that fails with `want`; then a's QP is in ERR and later WRs flush. */
static void expect_error(node_t *a, uint64_t raddr, uint32_t rkey, uint32_t len,
                         enum ibv_wc_status want, const char *what) {
    struct ibv_wc wc;
    REQUIRE(post_read(a, 1, a->buf, len, a->mr->lkey, raddr, rkey, 1) == 0);
    REQUIRE(wait_wc(a, &wc, 5000));
    if (wc.status != want) {
        fprintf(stderr, "%s: status %s, want %s\n", what, V.wc_status_str(wc.status),
                V.wc_status_str(want));
        CHECK(0);
    }
    CHECK(wc.wr_id == 1 && a->qp->state == IBV_QPS_ERR);
}

static void test_errors(node_t *a, node_t *b) {
    /* Bad rkey: remote access error, and the responder's QP breaks with an async event. */
    connect_pair(a, b, IBV_MTU_4096, IBV_MTU_4096);
    expect_error(a, addr_of(b->buf), b->mr->rkey ^ 0x100, 64, IBV_WC_REM_ACCESS_ERR, "bad rkey");
    struct ibv_async_event ev;
    CHECK(V.get_async_event(b->ctx, &ev) == 0 && ev.event_type == IBV_EVENT_QP_ACCESS_ERR &&
          ev.element.qp == b->qp);
    V.ack_async_event(&ev);
    CHECK(b->qp->state == IBV_QPS_ERR);

    /* Flush after the error: every later WR, signalled or not, completes WR_FLUSH_ERR. */
    for (int i = 0; i < 3; i++)
        REQUIRE(post_read(a, 10 + (uint64_t)i, a->buf, 64, a->mr->lkey, addr_of(b->buf),
                          b->mr->rkey, i == 1) == 0);
    struct ibv_wc wc;
    for (int i = 0; i < 3; i++) {
        REQUIRE(wait_wc(a, &wc, 5000));
        CHECK(wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 10 + (uint64_t)i);
    }

    /* Out of bounds by one byte, below the start, and an address range that would wrap. */
    connect_pair(a, b, IBV_MTU_4096, IBV_MTU_4096);
    expect_error(a, addr_of(b->buf) + BUF_LEN - 63, b->mr->rkey, 64, IBV_WC_REM_ACCESS_ERR,
                 "past the end");
    connect_pair(a, b, IBV_MTU_4096, IBV_MTU_4096);
    expect_error(a, addr_of(b->buf) - 1, b->mr->rkey, 64, IBV_WC_REM_ACCESS_ERR, "before start");
    connect_pair(a, b, IBV_MTU_4096, IBV_MTU_4096);
    expect_error(a, UINT64_MAX - 10, b->mr->rkey, 64, IBV_WC_REM_ACCESS_ERR, "wrap");
    /* The last byte exactly is fine. */
    connect_pair(a, b, IBV_MTU_4096, IBV_MTU_4096);
    REQUIRE(post_read(a, 2, a->buf, 64, a->mr->lkey, addr_of(b->buf) + BUF_LEN - 64, b->mr->rkey,
                      1) == 0);
    REQUIRE(wait_wc(a, &wc, 5000));
    CHECK(wc.status == IBV_WC_SUCCESS && memcmp(a->buf, b->buf + BUF_LEN - 64, 64) == 0);

    /* A region registered without REMOTE_READ refuses remote reads. */
    struct ibv_mr *local = V.reg_mr(b->pd, b->buf, 4096, IBV_ACCESS_LOCAL_WRITE);
    REQUIRE(local != NULL);
    expect_error(a, addr_of(b->buf), local->rkey, 64, IBV_WC_REM_ACCESS_ERR, "no REMOTE_READ");
    CHECK(V.dereg_mr(local) == 0);

    /* Local protection: a wrong lkey on the requester. */
    connect_pair(a, b, IBV_MTU_4096, IBV_MTU_4096);
    REQUIRE(post_read(a, 3, a->buf, 64, a->mr->lkey + 999, addr_of(b->buf), b->mr->rkey, 1) == 0);
    REQUIRE(wait_wc(a, &wc, 5000));
    CHECK(wc.status == IBV_WC_LOC_PROT_ERR);

    /* A destroyed responder QP: nobody answers, the retries run out. */
    connect_pair(a, b, IBV_MTU_4096, IBV_MTU_4096);
    qp_drop(b);
    expect_error(a, addr_of(b->buf), b->mr->rkey, 64, IBV_WC_RETRY_EXC_ERR, "destroyed QP");

    /* The link-local GID names nobody reachable: RETRY_EXC, the "wrong GID" failure. */
    qp_drop(a);
    qp_create(a);
    qp_create(b);
    union ibv_gid link_local;
    REQUIRE(V.query_gid(b->ctx, 1, 0, &link_local) == 0);
    REQUIRE(to_init(a->qp) == 0 && to_init(b->qp) == 0);
    REQUIRE(to_rtr(b->qp, a->qp->qp_num, &a->gid, IBV_MTU_4096) == 0);
    REQUIRE(to_rtr(a->qp, b->qp->qp_num, &link_local, IBV_MTU_4096) == 0);
    REQUIRE(to_rts(a->qp) == 0);
    expect_error(a, addr_of(b->buf), b->mr->rkey, 64, IBV_WC_RETRY_EXC_ERR, "link-local GID");

    /* The decoy GID is routable but names nobody: READs to it run out of retries too. */
    qp_drop(a);
    qp_drop(b);
    qp_create(a);
    qp_create(b);
    union ibv_gid decoy;
    REQUIRE(V.query_gid(b->ctx, 1, GID_DECOY, &decoy) == 0);
    REQUIRE(to_init(a->qp) == 0 && to_init(b->qp) == 0);
    REQUIRE(to_rtr(b->qp, a->qp->qp_num, &a->gid, IBV_MTU_4096) == 0);
    REQUIRE(to_rtr(a->qp, b->qp->qp_num, &decoy, IBV_MTU_4096) == 0);
    REQUIRE(to_rts(a->qp) == 0);
    expect_error(a, addr_of(b->buf), b->mr->rkey, 64, IBV_WC_RETRY_EXC_ERR, "decoy GID");
    /* ... and a responder whose peer described itself by the decoy never answers. */
    qp_drop(a);
    qp_drop(b);
    qp_create(a);
    qp_create(b);
    REQUIRE(to_init(a->qp) == 0 && to_init(b->qp) == 0);
    REQUIRE(to_rtr(b->qp, a->qp->qp_num, &decoy, IBV_MTU_4096) == 0);
    REQUIRE(to_rtr(a->qp, b->qp->qp_num, &b->gid, IBV_MTU_4096) == 0);
    REQUIRE(to_rts(a->qp) == 0);
    expect_error(a, addr_of(b->buf), b->mr->rkey, 64, IBV_WC_RETRY_EXC_ERR,
                 "peer described by the decoy GID");

    /* Deregistered memory is not served any more. */
    connect_pair(a, b, IBV_MTU_4096, IBV_MTU_4096);
    struct ibv_mr *tmp = V.reg_mr(b->pd, b->buf, 8192, IBV_ACCESS_REMOTE_READ);
    REQUIRE(tmp != NULL);
    uint32_t rkey = tmp->rkey;
    CHECK(V.dereg_mr(tmp) == 0);
    expect_error(a, addr_of(b->buf), rkey, 64, IBV_WC_REM_ACCESS_ERR, "deregistered");
}

/* Waits up to timeout_ms for the node's async fd to turn readable; 1 when it did. */
static int async_ready(node_t *n, int timeout_ms) {
    struct pollfd p = {.fd = n->ctx->async_fd, .events = POLLIN};
    return poll(&p, 1, timeout_ms) == 1;
}

static void *ack_later(void *arg) {
    struct timespec ts = {0, 200 * 1000000L};
    nanosleep(&ts, NULL);
    V.ack_async_event(arg);
    return NULL;
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Async events as libibverbs delivers them: an event nobody read is dropped with its QP; one read
 * and not acknowledged keeps ibv_destroy_qp waiting until the ack; DSC_FAKEVERBS_PORT_CTL raises
 * port events on demand. */
static void test_async_events(node_t *a, node_t *b) {
    int fd = b->ctx->async_fd;
    int flags = fcntl(fd, F_GETFL);
    REQUIRE(flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0);
    struct ibv_async_event ev;
    while (V.get_async_event(b->ctx, &ev) == 0) /* earlier tests' events */
        V.ack_async_event(&ev);

    /* Unread when its QP goes: dropped, the fd has nothing more to give. */
    connect_pair(a, b, IBV_MTU_4096, IBV_MTU_4096);
    expect_error(a, addr_of(b->buf), b->mr->rkey ^ 0x100, 64, IBV_WC_REM_ACCESS_ERR, "bad rkey");
    CHECK(async_ready(b, 0));
    qp_drop(b);
    errno = 0;
    CHECK(V.get_async_event(b->ctx, &ev) == -1 && errno == EAGAIN);

    /* Read and not acked: destroy waits for the ack (here 200 ms later, from another thread);
     * meanwhile the event's QP can be read (its qp_num). */
    connect_pair(a, b, IBV_MTU_4096, IBV_MTU_4096);
    expect_error(a, addr_of(b->buf) + BUF_LEN, b->mr->rkey, 64, IBV_WC_REM_ACCESS_ERR, "bounds");
    REQUIRE(async_ready(b, 5000));
    REQUIRE(V.get_async_event(b->ctx, &ev) == 0);
    CHECK(ev.event_type == IBV_EVENT_QP_ACCESS_ERR && ev.element.qp == b->qp &&
          ev.element.qp->qp_num == b->qp->qp_num);
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, ack_later, &ev) == 0);
    double t0 = mono_s();
    qp_drop(b);
    double waited = mono_s() - t0;
    pthread_join(t, NULL);
    printf("destroy_qp waited %.3f s for the event's ack\n", waited);
    CHECK(waited >= 0.15);
    CHECK(fcntl(fd, F_SETFL, flags) == 0);

    /* Port events on demand, on a node of their own. */
    char path[] = "/tmp/fv-port-ctl-XXXXXX";
    int ctl = mkstemp(path);
    REQUIRE(ctl >= 0);
    close(ctl);
    setenv("DSC_FAKEVERBS_PORT_CTL", path, 1);
    node_t c;
    node_open(&c, 0);
    unsetenv("DSC_FAKEVERBS_PORT_CTL");
    static const struct {
        const char *word;
        enum ibv_event_type type;
    } steps[] = {{"down", IBV_EVENT_PORT_ERR},
                 {"gid 1", IBV_EVENT_GID_CHANGE},
                 {"active", IBV_EVENT_PORT_ACTIVE}};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        FILE *f = fopen(path, "w");
        REQUIRE(f != NULL);
        fprintf(f, "%s\n", steps[i].word);
        fclose(f);
        REQUIRE(async_ready(&c, 5000));
        REQUIRE(V.get_async_event(c.ctx, &ev) == 0);
        CHECK(ev.event_type == steps[i].type && ev.element.port_num == 1);
        V.ack_async_event(&ev);
    }
    node_close(&c); /* stops the watcher */
    unlink(path);
}

static void test_mtu(node_t *a) {
    /* A second node whose port runs at 1024 bytes. */
    setenv("DSC_FAKEVERBS_MTU", "1024", 1);
    node_t c;
    node_open(&c, 0);
    unsetenv("DSC_FAKEVERBS_MTU");
    CHECK(c.active_mtu == IBV_MTU_1024);
    qp_drop(a);
    qp_create(a);
    qp_create(&c);
    REQUIRE(to_init(a->qp) == 0 && to_init(c.qp) == 0);
    /* Above the port's active MTU: refused at RTR. */
    CHECK(to_rtr(c.qp, a->qp->qp_num, &a->gid, IBV_MTU_4096) == EINVAL);
    REQUIRE(to_rtr(c.qp, a->qp->qp_num, &a->gid, IBV_MTU_1024) == 0);
    /* The requester kept its own 4096: the READ fails (Mooncake #3868). */
    REQUIRE(to_rtr(a->qp, c.qp->qp_num, &c.gid, IBV_MTU_4096) == 0);
    REQUIRE(to_rts(a->qp) == 0);
    expect_error(a, addr_of(c.buf), c.mr->rkey, 4096, IBV_WC_REM_INV_REQ_ERR, "MTU mismatch");
    /* Both at min(4096, 1024): it works. */
    connect_pair(a, &c, IBV_MTU_1024, IBV_MTU_1024);
    struct ibv_wc wc;
    REQUIRE(post_read(a, 5, a->buf, 10000, a->mr->lkey, addr_of(c.buf), c.mr->rkey, 1) == 0);
    REQUIRE(wait_wc(a, &wc, 5000));
    CHECK(wc.status == IBV_WC_SUCCESS && memcmp(a->buf, c.buf, 10000) == 0);
    qp_drop(a);
    node_close(&c);
}

static void test_channel(node_t *a, node_t *b) {
    node_t e;
    node_open(&e, 1);
    connect_pair(&e, b, IBV_MTU_4096, IBV_MTU_4096);
    int fl = fcntl(e.channel->fd, F_GETFL);
    REQUIRE(fcntl(e.channel->fd, F_SETFL, fl | O_NONBLOCK) == 0);
    struct pollfd pfd = {e.channel->fd, POLLIN, 0};
    CHECK(poll(&pfd, 1, 0) == 0);
    struct ibv_cq *cq = NULL;
    void *cq_ctx = NULL;
    CHECK(V.get_cq_event(e.channel, &cq, &cq_ctx) == -1 && errno == EAGAIN);
    REQUIRE(ibv_req_notify_cq(e.cq, 0) == 0);
    REQUIRE(post_read(&e, 9, e.buf, 4096, e.mr->lkey, addr_of(b->buf), b->mr->rkey, 1) == 0);
    /* The fd turns readable once the completion is queued. */
    CHECK(poll(&pfd, 1, 5000) == 1 && (pfd.revents & POLLIN));
    CHECK(V.get_cq_event(e.channel, &cq, &cq_ctx) == 0 && cq == e.cq && cq_ctx == &e);
    V.ack_cq_events(cq, 1);
    struct ibv_wc wc;
    CHECK(ibv_poll_cq(e.cq, 1, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 9);
    CHECK(memcmp(e.buf, b->buf, 4096) == 0);
    /* Not re-armed: the next completion raises no event. */
    REQUIRE(post_read(&e, 10, e.buf, 4096, e.mr->lkey, addr_of(b->buf), b->mr->rkey, 1) == 0);
    REQUIRE(wait_wc(&e, &wc, 5000));
    CHECK(poll(&pfd, 1, 0) == 0);
    /* An unacknowledged event keeps the CQ alive (a real destroy would wait). */
    REQUIRE(ibv_req_notify_cq(e.cq, 0) == 0);
    REQUIRE(post_read(&e, 11, e.buf, 64, e.mr->lkey, addr_of(b->buf), b->mr->rkey, 1) == 0);
    CHECK(poll(&pfd, 1, 5000) == 1);
    CHECK(V.get_cq_event(e.channel, &cq, &cq_ctx) == 0);
    REQUIRE(wait_wc(&e, &wc, 5000));
    qp_drop(&e);
    CHECK(V.destroy_cq(e.cq) == EBUSY);
    V.ack_cq_events(cq, 1);
    node_close(&e);
    (void)a;
}

static void test_faults(node_t *a, node_t *b) {
    struct ibv_wc wc;
    connect_pair(a, b, IBV_MTU_4096, IBV_MTU_4096);
    REQUIRE(set_faults("fail_post=2") == 0);
    CHECK(post_read(a, 1, a->buf, 64, a->mr->lkey, addr_of(b->buf), b->mr->rkey, 1) == 0);
    CHECK(post_read(a, 2, a->buf, 64, a->mr->lkey, addr_of(b->buf), b->mr->rkey, 1) == ENOMEM);
    REQUIRE(wait_wc(a, &wc, 5000));
    CHECK(wc.wr_id == 1 && wc.status == IBV_WC_SUCCESS);
    CHECK(!wait_wc(a, &wc, 50));
    /* The second completion is lost: the data arrives, the CQE never does. */
    REQUIRE(set_faults("drop_cqe=2") == 0);
    memset(a->buf, 0, 192);
    CHECK(post_read(a, 3, a->buf, 64, a->mr->lkey, addr_of(b->buf), b->mr->rkey, 1) == 0);
    CHECK(post_read(a, 4, a->buf + 64, 64, a->mr->lkey, addr_of(b->buf + 64), b->mr->rkey, 1) == 0);
    REQUIRE(wait_wc(a, &wc, 5000));
    CHECK(wc.wr_id == 3);
    CHECK(!wait_wc(a, &wc, 200));
    /* Completions are in order: a later one proves (and orders, for TSan) the lost one's data. */
    REQUIRE(post_read(a, 5, a->buf + 128, 64, a->mr->lkey, addr_of(b->buf + 128), b->mr->rkey, 1) ==
            0);
    REQUIRE(wait_wc(a, &wc, 5000));
    CHECK(wc.wr_id == 5 && wc.status == IBV_WC_SUCCESS);
    CHECK(memcmp(a->buf, b->buf, 192) == 0);
    CHECK(set_faults("bogus=1") == -1);
    REQUIRE(set_faults(NULL) == 0);
    /* Registration beyond the emulated memlock limit fails as pinning would. */
    setenv("DSC_FAKEVERBS_MEMLOCK", "3000000", 1);
    struct ibv_mr *big = V.reg_mr(a->pd, a->buf, BUF_LEN, IBV_ACCESS_LOCAL_WRITE);
    CHECK(big == NULL && errno == ENOMEM);
    unsetenv("DSC_FAKEVERBS_MEMLOCK");
    if (big)
        V.dereg_mr(big);
}

/* ---- A peer process ------------------------------------------------------------------------ */

typedef struct peer {
    pid_t pid;
    FILE *to, *from;
    uint32_t qpn, rkey, len;
    uint64_t addr;
    int active_mtu;
    union ibv_gid gid;
    uint8_t first[16]; /* the peer's buffer starts with bytes i * 13 + 1 */
} peer_t;

static void gid_hex(const union ibv_gid *g, char *out) {
    for (int i = 0; i < 16; i++)
        sprintf(out + 2 * i, "%02x", g->raw[i]);
}
static int gid_parse(const char *hex, union ibv_gid *g) {
    for (int i = 0; i < 16; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return -1;
        g->raw[i] = (uint8_t)v;
    }
    return 0;
}

/* Starts this program as a peer with extra environment (NULL-terminated "K=V" list); the peer's
 * stderr goes to errfile when given. */
static int peer_start(peer_t *p, const char *mode, const char **extra_env, const char *errfile) {
    memset(p, 0, sizeof *p);
    int in[2], out[2];
    REQUIRE(pipe(in) == 0 && pipe(out) == 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    if (errfile)
        posix_spawn_file_actions_addopen(&fa, 2, errfile, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addclose(&fa, in[1]);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    size_t n = 0;
    while (environ[n])
        n++;
    const char **envp = calloc(n + 8, sizeof *envp);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        envp[k++] = environ[i];
    for (size_t i = 0; extra_env && extra_env[i]; i++)
        envp[k++] = extra_env[i];
    envp[k] = NULL;
    char *argv[] = {"test_fakeverbs", "--peer", (char *)mode, NULL};
    int rc = posix_spawn(&p->pid, "/proc/self/exe", &fa, NULL, argv, (char **)envp);
    posix_spawn_file_actions_destroy(&fa);
    free(envp);
    close(in[0]);
    close(out[1]);
    REQUIRE(rc == 0);
    p->to = fdopen(in[1], "w");
    p->from = fdopen(out[0], "r");
    char hex[40];
    if (fscanf(p->from, "%u %39s %u %lu %u %d", &p->qpn, hex, &p->rkey, &p->addr, &p->len,
               &p->active_mtu) != 6 ||
        gid_parse(hex, &p->gid) < 0)
        return -1;
    return 0;
}

/* Tells the peer our QP and the path MTU it must use; waits until its QP is in RTR. */
static int peer_connect(peer_t *p, node_t *a, enum ibv_mtu peer_mtu) {
    char hex[40];
    gid_hex(&a->gid, hex);
    fprintf(p->to, "%u %s %d\n", a->qp->qp_num, hex, (int)peer_mtu);
    fflush(p->to);
    char word[16];
    return fscanf(p->from, "%15s", word) == 1 && strcmp(word, "ready") == 0 ? 0 : -1;
}

/* Ends the peer (closing its stdin lets it exit) and returns its wait status. */
static int peer_end(peer_t *p, int kill_it) {
    if (kill_it)
        kill(p->pid, SIGKILL);
    fclose(p->to);
    fclose(p->from);
    int status = 0;
    waitpid(p->pid, &status, 0);
    return status;
}

static void connect_to_peer(node_t *a, peer_t *p, enum ibv_mtu mtu_a, enum ibv_mtu mtu_peer) {
    qp_drop(a);
    qp_create(a);
    REQUIRE(to_init(a->qp) == 0);
    REQUIRE(peer_connect(p, a, mtu_peer) == 0);
    REQUIRE(to_rtr(a->qp, p->qpn, &p->gid, mtu_a) == 0);
    REQUIRE(to_rts(a->qp) == 0);
}

static int peer_main(const char *mode) {
    node_t n;
    node_open(&n, 0);
    for (uint32_t i = 0; i < BUF_LEN; i++)
        n.buf[i] = (uint8_t)(i * 13 + 1);
    qp_create(&n);
    REQUIRE(to_init(n.qp) == 0);
    char hex[40];
    gid_hex(&n.gid, hex);
    printf("%u %s %u %lu %u %d\n", n.qp->qp_num, hex, n.mr->rkey, (unsigned long)addr_of(n.buf),
           BUF_LEN, (int)n.active_mtu);
    fflush(stdout);
    uint32_t qpn;
    int mtu;
    union ibv_gid gid;
    if (scanf("%u %39s %d", &qpn, hex, &mtu) != 3 || gid_parse(hex, &gid) < 0)
        return 1;
    REQUIRE(to_rtr(n.qp, qpn, &gid, (enum ibv_mtu)mtu) == 0);
    if (strcmp(mode, "uaf") == 0)
        free(n.buf); /* a lease bug: the memory goes while the region is still registered */
    printf("ready\n");
    fflush(stdout);
    char line[16];
    while (fgets(line, sizeof line, stdin) != NULL) {
    }
    if (strcmp(mode, "uaf") == 0)
        n.buf = NULL;
    node_close(&n);
    return 0;
}

static void test_peer_process(node_t *a) {
    /* A READ from another process's memory, byte for byte. */
    peer_t p;
    REQUIRE(peer_start(&p, "plain", NULL, NULL) == 0);
    CHECK(p.active_mtu == IBV_MTU_4096 && p.gid.raw[12] == 127);
    connect_to_peer(a, &p, IBV_MTU_4096, IBV_MTU_4096);
    struct ibv_wc wc;
    memset(a->buf, 0, BUF_LEN);
    REQUIRE(post_read(a, 1, a->buf, 200000, a->mr->lkey, p.addr + 1000, p.rkey, 1) == 0);
    REQUIRE(wait_wc(a, &wc, 5000));
    CHECK(wc.status == IBV_WC_SUCCESS);
    int same = 1;
    for (uint32_t i = 0; i < 200000; i++)
        same &= a->buf[i] == (uint8_t)((i + 1000) * 13 + 1);
    CHECK(same);
    /* The peer dies: the next READ runs out of retries. */
    int status = peer_end(&p, 1);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    expect_error(a, p.addr, p.rkey, 64, IBV_WC_RETRY_EXC_ERR, "dead peer");
    /* ... and everything after flushes. */
    REQUIRE(post_read(a, 2, a->buf, 64, a->mr->lkey, p.addr, p.rkey, 0) == 0);
    REQUIRE(wait_wc(a, &wc, 5000));
    CHECK(wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 2);

    /* Fault injection in the peer: it dies while serving its second READ. */
    const char *env[] = {"DSC_FAKEVERBS_FAULTS=kill_on_read=2", NULL};
    REQUIRE(peer_start(&p, "plain", env, NULL) == 0);
    connect_to_peer(a, &p, IBV_MTU_4096, IBV_MTU_4096);
    REQUIRE(post_read(a, 3, a->buf, 64, a->mr->lkey, p.addr, p.rkey, 1) == 0);
    REQUIRE(wait_wc(a, &wc, 5000));
    CHECK(wc.status == IBV_WC_SUCCESS && a->buf[1] == 14);
    expect_error(a, p.addr, p.rkey, 64, IBV_WC_RETRY_EXC_ERR, "peer killed mid-READ");
    status = peer_end(&p, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

    /* A peer at MTU 1024 told to use 1024 while we keep 4096: mismatch; then min() works. */
    const char *env_mtu[] = {"DSC_FAKEVERBS_MTU=1024", NULL};
    REQUIRE(peer_start(&p, "plain", env_mtu, NULL) == 0);
    CHECK(p.active_mtu == IBV_MTU_1024);
    connect_to_peer(a, &p, IBV_MTU_4096, IBV_MTU_1024);
    expect_error(a, p.addr, p.rkey, 64, IBV_WC_REM_INV_REQ_ERR, "MTU mismatch across processes");
    CHECK(WIFEXITED(status = peer_end(&p, 0)) && WEXITSTATUS(status) == 0);
    REQUIRE(peer_start(&p, "plain", env_mtu, NULL) == 0);
    enum ibv_mtu path =
        p.active_mtu < (int)a->active_mtu ? (enum ibv_mtu)p.active_mtu : a->active_mtu;
    connect_to_peer(a, &p, path, path);
    REQUIRE(post_read(a, 4, a->buf, 5000, a->mr->lkey, p.addr, p.rkey, 1) == 0);
    REQUIRE(wait_wc(a, &wc, 5000));
    CHECK(wc.status == IBV_WC_SUCCESS && a->buf[4999] == (uint8_t)(4999 * 13 + 1));
    CHECK(WIFEXITED(status = peer_end(&p, 0)) && WEXITSTATUS(status) == 0);
    qp_drop(a);
}

/* Under ASan: a READ of memory the serving process freed is reported there. */
static void test_use_after_free(node_t *a) {
#ifdef UNDER_ASAN
    char errfile[] = "/tmp/dsc_fakeverbs_uaf_XXXXXX";
    int fd = mkstemp(errfile);
    REQUIRE(fd >= 0);
    close(fd);
    peer_t p;
    REQUIRE(peer_start(&p, "uaf", NULL, errfile) == 0);
    connect_to_peer(a, &p, IBV_MTU_4096, IBV_MTU_4096);
    expect_error(a, p.addr, p.rkey, 4096, IBV_WC_RETRY_EXC_ERR, "READ of freed memory");
    int status = peer_end(&p, 0);
    CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == 0));
    char text[8192] = "";
    FILE *f = fopen(errfile, "r");
    REQUIRE(f != NULL);
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    unlink(errfile);
    CHECK(strstr(text, "heap-use-after-free") != NULL);
    printf("use-after-free READ reported by AddressSanitizer in the serving process\n");
    qp_drop(a);
#else
    (void)a;
    printf("note: the use-after-free check runs only under AddressSanitizer (DSC_SANITIZE)\n");
#endif
}

int main(int argc, char **argv) {
    const char *lib = getenv("DSC_FAKEVERBS_LIB");
    if (lib == NULL || lib[0] == '\0')
        SKIP("libfakeverbs was not built (rdma-core's infiniband/verbs.h missing at build time)");
    setenv(DSC_VERBS_ENV_LIB, lib, 1);
    char reason[DSC_VERBS_REASON_MAX];
    if (dsc_verbs_open(&V, reason, sizeof reason) != 0) {
        fprintf(stderr, "dsc_verbs_open: %s\n", reason);
        return 1;
    }
    *(void **)&set_faults = dlsym(V.lib, "fakeverbs_set_faults");
    REQUIRE(set_faults != NULL);
    if (argc == 3 && strcmp(argv[1], "--peer") == 0)
        return peer_main(argv[2]);
    unsetenv("DSC_FAKEVERBS_FAULTS");
    unsetenv("DSC_FAKEVERBS_MTU");
    CHECK(strstr(V.path, "libfakeverbs") != NULL);

    node_t a, b;
    node_open(&a, 0);
    node_open(&b, 0);
    test_device(&a);
    test_state_machine(&a, &b);
    test_read(&a, &b);
    test_errors(&a, &b);
    test_async_events(&a, &b);
    test_mtu(&a);
    test_channel(&a, &b);
    test_faults(&a, &b);
    test_peer_process(&a);
    test_use_after_free(&a);
    node_close(&a);
    node_close(&b);
    dsc_verbs_close(&V);
    return TEST_DONE();
}

#endif
