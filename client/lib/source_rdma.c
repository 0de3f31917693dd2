/* Data source "rdma": chunks READ by RDMA straight out of a dscached arena. The TCP connection
 * stays the control channel (HELLO, RDMA_CONNECT, RDMA_GET with piggybacked lease releases);
 * each I/O thread owns one RC QP, one CQ with its completion channel and one registered slab.
 * Any failure under transport auto keeps that connection on TCP (source_tcp.c), with a back-off
 * per server before RDMA is tried again.
 * Over 800 lines on purpose: the verbs path and the build without verbs headers share one ops
 * table and the TCP fallback, which is clearer beside each other.
 */
#include "source_rdma.h"
#include "conn.h"
#include "placement.h"
#include "rdma_link.h"
#include "util.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>

#define INTERNAL_ID (UINT64_C(1) << 63) /* request ids of release-only RDMA_GETs */
#define CQ_DEPTH 256
#define SEND_WR 128
#define BUSY_POLLS 2000 /* ibv_poll_cq tries before sleeping on the completion channel */
#define SLAB_MIN (UINT64_C(4) << 20)
#define SLAB_ALIGN (UINT64_C(2) << 20)
#define BACKOFF_FIRST_S 1.0
#define BACKOFF_MAX_S 60.0

int dsc__transport_parse(const char *text, dsc_transport_t *out) {
    if (text == NULL || strcmp(text, "tcp") == 0)
        *out = DSC_TRANSPORT_TCP;
    else if (strcmp(text, "auto") == 0)
        *out = DSC_TRANSPORT_AUTO;
    else if (strcmp(text, "rdma") == 0)
        *out = DSC_TRANSPORT_RDMA;
    else
        return DSC_EINVAL;
    return 0;
}

static void count_add(atomic_uint_fast64_t *c, int64_t d) {
    if (d >= 0)
        atomic_fetch_add_explicit(c, (uint64_t)d, memory_order_relaxed);
    else
        atomic_fetch_sub_explicit(c, (uint64_t)-d, memory_order_relaxed);
}

/* ---- the endpoint (one per server) and the TCP fallback ----------------------------------- */

typedef struct rdma_endpoint {
    const dsc_source_env_t *env;
    char addr[DSC_MEMBER_MAX];
    void *tcp; /* the TCP source's endpoint: manifest calls and fallback connections */
    pthread_mutex_t lock;
    double retry_at; /* RDMA is not tried before this (dsc_now_s) */
    double backoff;
    int logged_rdma, logged_fallback, warned_gid;
} rdma_endpoint_t;

static int ep_open(const dsc_source_env_t *env, const char *addr, void **out) {
    rdma_endpoint_t *ep = calloc(1, sizeof *ep);
    if (ep == NULL)
        return DSC_ENOMEM;
    ep->env = env;
    snprintf(ep->addr, sizeof ep->addr, "%s", addr);
    pthread_mutex_init(&ep->lock, NULL);
    ep->backoff = BACKOFF_FIRST_S;
    int rc = dsc__source_tcp.endpoint_open(env, addr, &ep->tcp);
    if (rc < 0) {
        pthread_mutex_destroy(&ep->lock);
        free(ep);
        return rc;
    }
    *out = ep;
    return 0;
}

static void ep_close(void *endpoint) {
    rdma_endpoint_t *ep = endpoint;
    if (ep == NULL)
        return;
    dsc__source_tcp.endpoint_close(ep->tcp);
    pthread_mutex_destroy(&ep->lock);
    free(ep);
}

static int ep_manifest(void *endpoint, uint64_t view_hash, dsc_manifest_t **out,
                       uint64_t *hello_hash) {
    rdma_endpoint_t *ep = endpoint;
    return dsc__source_tcp.manifest(ep->tcp, view_hash, out, hello_hash);
}

/* ---- the loader's device ------------------------------------------------------------------ */

struct dsc_rdma_client {
    dsc_rdma_dev_t dev;
    dsc_transport_t transport;
};

#if !DSC_HAVE_VERBS_H

int dsc__rdma_client_open(dsc_transport_t transport, const dsc_logger_t *log,
                          dsc_rdma_client_t **out) {
    *out = NULL;
    if (transport == DSC_TRANSPORT_TCP)
        return 0;
    if (transport == DSC_TRANSPORT_RDMA) {
        DSC_LOG(log, DSC_LOG_ERROR,
                "transport rdma: built without rdma-core headers (infiniband/verbs.h)");
        return DSC_EUNAVAIL;
    }
    DSC_LOG(log, DSC_LOG_INFO,
            "transport auto: RDMA unavailable (built without rdma-core "
            "headers); using TCP");
    return 0;
}
void dsc__rdma_client_close(dsc_rdma_client_t *rdma) {
    free(rdma);
}

typedef struct rdma_conn {
    void *tcp;
} rdma_conn_t;

static int rc_open(void *endpoint, uint64_t view_hash, void **out, uint64_t *hello_hash) {
    return dsc__source_tcp.open(((rdma_endpoint_t *)endpoint)->tcp, view_hash, out, hello_hash);
}
static int rc_submit(void *conn, dsc_source_req_t *req) {
    return dsc__source_tcp.submit(conn, req);
}
static int rc_complete(void *conn, dsc_source_req_t *out, uint32_t count, uint32_t *index,
                       int *conn_bad, uint64_t *wire) {
    return dsc__source_tcp.complete(conn, out, count, index, conn_bad, wire);
}
static void rc_wake(void *conn) {
    dsc__source_tcp.wake(conn);
}
static void rc_close(void *conn) {
    dsc__source_tcp.close(conn);
}
static int rc_report(void *conn, uint64_t id, const uint8_t *body, size_t len) {
    return dsc__source_tcp.report(conn, id, body, len);
}
static int rc_idle_closed(void *conn) {
    return dsc__source_tcp.idle_closed(conn);
}

int dsc__rdma_probe(const char *addr, uint32_t timeout_ms, const dsc_credential_t *cred, char *why,
                    size_t why_cap, char *device, size_t device_cap) {
    (void)addr;
    (void)timeout_ms;
    (void)cred;
    (void)device;
    (void)device_cap;
    snprintf(why, why_cap, "built without rdma-core headers (infiniband/verbs.h)");
    return DSC_ENOTSUP;
}

#else

int dsc__rdma_client_open(dsc_transport_t transport, const dsc_logger_t *log,
                          dsc_rdma_client_t **out) {
    *out = NULL;
    if (transport == DSC_TRANSPORT_TCP)
        return 0;
    char why[DSC_VERBS_REASON_MAX + 128] = "";
    /* Trainers fork DataLoader workers: registered pages must not be shared copy-on-write,
     * unless the kernel copies DMA-pinned pages on fork itself (IBV_FORK_UNNEEDED). Before any
     * registration. */
    dsc_verbs_t v;
    if (dsc_verbs_open(&v, NULL, 0) == 0) {
        if (v.is_fork_initialized == NULL || v.is_fork_initialized() != IBV_FORK_UNNEEDED)
            v.fork_init();
        dsc_verbs_close(&v);
    }
    dsc_rdma_client_t *r = calloc(1, sizeof *r);
    if (r == NULL)
        return DSC_ENOMEM;
    r->transport = transport;
    int rc = dsc_rdma_dev_open(&r->dev, why, sizeof why);
    if (rc < 0) {
        free(r);
        if (transport == DSC_TRANSPORT_RDMA) {
            DSC_LOG(log, DSC_LOG_ERROR, "transport rdma: RDMA is unavailable here: %s", why);
            return DSC_EUNAVAIL;
        }
        DSC_LOG(log, DSC_LOG_INFO, "transport auto: RDMA unavailable (%s); using TCP", why);
        return 0;
    }
    *out = r;
    return 0;
}

void dsc__rdma_client_close(dsc_rdma_client_t *rdma) {
    if (rdma == NULL)
        return;
    dsc_rdma_dev_close(&rdma->dev);
    free(rdma);
}

/* ---- one connection ----------------------------------------------------------------------- */

typedef struct rdma_conn {
    rdma_endpoint_t *ep;
    void *tcp;        /* a TCP source connection: every operation goes there (fallback) */
    dsc_conn_t *conn; /* RDMA: the control connection */
    dsc_rdma_dev_t *dev;
    dsc_rdma_gid_choice_t gid; /* on the control connection's subnet ("RDMA follows TCP") */
    struct ibv_comp_channel *ch;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    uint8_t *slab;
    size_t slab_cap;
    struct ibv_mr *mr;
    uint8_t *body;
    size_t body_cap;
    uint32_t lease_ttl_ms;
    uint16_t release_count;
    uint64_t release[DSC_RDMA_MAX_RELEASE];
    uint64_t next_internal;
    atomic_int woken;
    int counted;
    int connect_rc; /* what RDMA_CONNECT returned (the probe tells auth failures apart) */
    uint64_t view_hash;
} rdma_conn_t;

static void slab_free(rdma_conn_t *c) {
    if (c->mr)
        c->dev->v.dereg_mr(c->mr);
    if (c->slab)
        munmap(c->slab, c->slab_cap);
    c->mr = NULL;
    c->slab = NULL;
    c->slab_cap = 0;
}

/* A registered slab of at least `bytes` (hugepage-backed where THP allows), registered once
 * and only replaced when a request needs more. The QP must have no READ outstanding. */
static int slab_reserve(rdma_conn_t *c, uint64_t bytes) {
    if (bytes <= c->slab_cap)
        return 0;
    slab_free(c);
    size_t cap = (size_t)((bytes + SLAB_ALIGN - 1) / SLAB_ALIGN * SLAB_ALIGN);
    void *p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return DSC_ENOMEM;
#ifdef MADV_HUGEPAGE
    madvise(p, cap, MADV_HUGEPAGE);
#endif
    c->mr = c->dev->v.reg_mr(c->dev->pd, p, cap, IBV_ACCESS_LOCAL_WRITE);
    if (c->mr == NULL) {
        munmap(p, cap);
        return DSC_EUNAVAIL;
    }
    c->slab = p;
    c->slab_cap = cap;
    return 0;
}

/* QP first (no more DMA into the slab after destroy), then the slab and the rest. */
static void rdma_teardown(rdma_conn_t *c) {
    if (c->qp)
        dsc_rdma_qp_fence(c->dev, c->qp);
    c->qp = NULL;
    slab_free(c);
    /* Events of an arming whose completion was polled before it fired: acknowledged, or the CQ
     * could not be destroyed. */
    while (c->ch && c->cq) {
        struct pollfd p = {.fd = c->ch->fd, .events = POLLIN};
        struct ibv_cq *ev_cq;
        void *ev_ctx;
        if (poll(&p, 1, 0) <= 0 || c->dev->v.get_cq_event(c->ch, &ev_cq, &ev_ctx) != 0)
            break;
        c->dev->v.ack_cq_events(ev_cq, 1);
    }
    if (c->cq)
        c->dev->v.destroy_cq(c->cq);
    c->cq = NULL;
    if (c->ch)
        c->dev->v.destroy_comp_channel(c->ch);
    c->ch = NULL;
    dsc_conn_close(c->conn);
    c->conn = NULL;
    free(c->body);
    c->body = NULL;
    c->body_cap = 0;
}

/* Waits for one completion. Busy-polls first, then arms the CQ and sleeps on the completion
 * channel's fd (and the TCP fd for a peer that goes away). Returns 0 (wc filled), or
 * DSC_ETIMEDOUT / DSC_ECLOSED (woken, or the server closed the connection). */
static int wait_cqe(rdma_conn_t *c, struct ibv_wc *wc) {
    uint32_t timeout_ms = c->ep->env->timeout_ms;
    double deadline = dsc_now_s() + (timeout_ms ? timeout_ms : 5000) / 1000.0;
    for (int i = 0; i < BUSY_POLLS; i++) {
        int n = ibv_poll_cq(c->cq, 1, wc);
        if (n != 0)
            return n < 0 ? DSC_EIO : 0;
    }
    for (;;) {
        if (ibv_req_notify_cq(c->cq, 0) != 0)
            return DSC_EIO;
        int n = ibv_poll_cq(c->cq, 1, wc); /* one that arrived before the arming */
        if (n != 0)
            return n < 0 ? DSC_EIO : 0;
        if (atomic_load(&c->woken))
            return DSC_ECLOSED;
        double left = deadline - dsc_now_s();
        if (left <= 0)
            return DSC_ETIMEDOUT;
        struct pollfd fds[2] = {{.fd = c->ch->fd, .events = POLLIN},
                                {.fd = dsc_conn_fd(c->conn), .events = POLLRDHUP}};
        int wait = left * 1000 > 100 ? 100 : (int)(left * 1000) + 1;
        int r = poll(fds, 2, wait);
        if (r < 0 && errno != EINTR)
            return DSC_EIO;
        if (r > 0 && (fds[1].revents & (POLLRDHUP | POLLHUP | POLLERR)))
            return DSC_ECLOSED;
        if (r > 0 && (fds[0].revents & POLLIN)) {
            struct ibv_cq *ev_cq;
            void *ev_ctx;
            if (c->dev->v.get_cq_event(c->ch, &ev_cq, &ev_ctx) == 0)
                c->dev->v.ack_cq_events(ev_cq, 1);
        }
    }
}

/* Posts READs of n (remote addr, rkey, len) runs into the slab at offsets[i] as one chain,
 * only the last signalled, and waits for it. Returns 0, or an error after which the QP is in
 * ERR (the connection is closed by the caller). */
static int read_runs(rdma_conn_t *c, const dsc_rdma_desc_t *runs, const uint64_t *offsets,
                     uint32_t n, const char **what) {
    struct ibv_sge sge[DSC_SOURCE_MAX_MERGE];
    struct ibv_send_wr wr[DSC_SOURCE_MAX_MERGE];
    memset(wr, 0, n * sizeof *wr);
    for (uint32_t i = 0; i < n; i++) {
        sge[i] = (struct ibv_sge){.addr = (uint64_t)(uintptr_t)(c->slab + offsets[i]),
                                  .length = runs[i].len,
                                  .lkey = c->mr->lkey};
        wr[i].wr_id = i;
        wr[i].sg_list = &sge[i];
        wr[i].num_sge = 1;
        wr[i].opcode = IBV_WR_RDMA_READ;
        wr[i].send_flags = i + 1 == n ? IBV_SEND_SIGNALED : 0;
        wr[i].wr.rdma.remote_addr = runs[i].addr;
        wr[i].wr.rdma.rkey = runs[i].rkey;
        wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
    }
    struct ibv_send_wr *bad = NULL;
    if (ibv_post_send(c->qp, wr, &bad) != 0) {
        *what = "ibv_post_send failed";
        return DSC_EIO;
    }
    struct ibv_wc wc;
    int rc = wait_cqe(c, &wc);
    if (rc < 0) {
        *what = rc == DSC_ETIMEDOUT ? "no completion in time" : "connection closed mid-READ";
        return rc;
    }
    if (wc.status != IBV_WC_SUCCESS) {
        *what = c->dev->v.wc_status_str(wc.status);
        return DSC_EIO;
    }
    return 0;
}

/* One-line reason for the log. */
static int try_rdma(rdma_conn_t *c, uint64_t view_hash, uint64_t *hello_hash, char *why,
                    size_t why_cap, int *server_refused) {
    rdma_endpoint_t *ep = c->ep;
    const dsc_source_env_t *env = ep->env;
    c->dev = &env->rdma->dev;
    int rc = dsc_conn_open_addr_auth(ep->addr, env->timeout_ms, view_hash, env->cred, &c->conn);
    if (rc < 0) {
        snprintf(why, why_cap, "%s", dsc_strerror(rc));
        return rc; /* a connection error, not an RDMA one */
    }
    *hello_hash = dsc_conn_info(c->conn)->members_hash;
    if (!(dsc_conn_info(c->conn)->features & DSC_FEATURE_RDMA)) {
        snprintf(why, why_cap,
                 "the server does not offer RDMA (started with --rdma off, or no "
                 "device)");
        *server_refused = 1; /* the long back-off: no RDMA_CONNECT is sent */
        return DSC_EUNAVAIL;
    }
    struct sockaddr_storage local;
    socklen_t local_len = sizeof local;
    if (getsockname(dsc_conn_fd(c->conn), (struct sockaddr *)&local, &local_len) != 0) {
        snprintf(why, why_cap, "getsockname on the control connection: %s", strerror(errno));
        return DSC_EUNAVAIL;
    }
    if (dsc_rdma_gid_choose(c->dev, &local, &c->gid, why, why_cap) < 0)
        return DSC_EUNAVAIL;
    if (c->gid.off_subnet) {
        pthread_mutex_lock(&ep->lock);
        int warn = !ep->warned_gid;
        ep->warned_gid = 1;
        pthread_mutex_unlock(&ep->lock);
        if (warn)
            DSC_LOG(env->log, DSC_LOG_WARN, "server %s: RDMA from %s: READs may fail", ep->addr,
                    c->gid.text);
    }
    c->ch = c->dev->v.create_comp_channel(c->dev->ctx);
    c->cq = c->ch ? c->dev->v.create_cq(c->dev->ctx, CQ_DEPTH, c, c->ch, 0) : NULL;
    c->qp = c->cq ? dsc_rdma_qp_create(c->dev, c->cq, SEND_WR, 0) : NULL;
    if (c->qp == NULL) {
        snprintf(why, why_cap, "cannot create a queue pair on %s: %s", c->dev->name,
                 strerror(errno));
        return DSC_EUNAVAIL;
    }
    uint32_t psn = dsc_rdma_random_psn();
    dsc_rdma_qp_info_t me;
    dsc_rdma_qp_describe(c->dev, &c->gid, c->qp, psn, c->dev->max_rd_atomic, &me);
    uint8_t req[128];
    int n = dsc_rdma_connect_req_encode(&me, req, sizeof req);
    if (n < 0) {
        snprintf(why, why_cap, "cannot encode RDMA_CONNECT");
        return DSC_EUNAVAIL;
    }
    uint8_t *body = NULL;
    size_t len = 0;
    rc = dsc_conn_call(c->conn, DSC_OP_RDMA_CONNECT, req, (size_t)n, &body, &len);
    c->connect_rc = rc;
    if (rc < 0) {
        snprintf(why, why_cap, "the server refused RDMA_CONNECT: %s%s%s", dsc_strerror(rc),
                 dsc_conn_last_error(c->conn)[0] ? ": " : "", dsc_conn_last_error(c->conn));
        *server_refused = rc == DSC_ENOTSUP || rc == DSC_EUNAVAIL;
        free(body);
        return DSC_EUNAVAIL;
    }
    dsc_rdma_connect_resp_t resp;
    rc = dsc_rdma_connect_resp_decode(body, len, &resp);
    free(body);
    if (rc < 0 || resp.qp.link_layer != c->dev->link_layer) {
        snprintf(why, why_cap, "bad RDMA_CONNECT answer (or another link layer)");
        return DSC_EUNAVAIL;
    }
    c->lease_ttl_ms = resp.lease_ttl_ms;
    /* The server is in RTR already; path MTU and READs as it chose. */
    if ((rc = dsc_rdma_qp_rtr(c->dev, &c->gid, c->qp, &resp.qp, resp.qp.mtu, 1)) < 0 ||
        (rc = dsc_rdma_qp_rts(c->dev, c->qp, psn, resp.qp.rd_atomic)) < 0) {
        snprintf(why, why_cap, "cannot bring the queue pair to RTS: %s", strerror(-rc));
        return DSC_EUNAVAIL;
    }
    uint64_t want = SLAB_MIN;
    if (env->manifest != NULL) {
        /* The largest request: DSC_SOURCE_MAX_MERGE chunks of the largest raw size (lz4
         * stores at most a little more than raw). */
        uint64_t chunk = 0;
        for (uint32_t i = 0; i < env->manifest->shard_count; i++) {
            uint64_t b = (uint64_t)env->manifest->shards[i].chunk_samples *
                         env->manifest->schema.sample_bytes;
            if (b > chunk)
                chunk = b;
        }
        uint64_t need = DSC_SOURCE_MAX_MERGE * (chunk + chunk / 255 + 64);
        if (need > want)
            want = need;
    }
    if ((rc = slab_reserve(c, want)) < 0) {
        snprintf(why, why_cap,
                 "cannot register a %llu-byte slab: %s (raise RLIMIT_MEMLOCK or grant "
                 "CAP_IPC_LOCK; 'dscache doctor' checks it)",
                 (unsigned long long)want, strerror(errno));
        return DSC_EUNAVAIL;
    }
    /* The probe READ: only bytes that arrive intact prove the path. */
    uint64_t zero = 0;
    const char *what = "";
    rc = read_runs(c, &resp.probe, &zero, 1, &what);
    if (rc < 0) {
        snprintf(why, why_cap,
                 "the probe READ failed (%s) from %s: check routing, GID and PFC "
                 "between this host and the server",
                 what, c->gid.text);
        return DSC_EUNAVAIL;
    }
    if (dsc_checksum(c->slab, resp.probe.len) != resp.probe.checksum) {
        snprintf(why, why_cap, "the probe READ returned other bytes than the server's");
        return DSC_EUNAVAIL;
    }
    return 0;
}

static void backoff_failed(rdma_endpoint_t *ep, int long_wait) {
    pthread_mutex_lock(&ep->lock);
    ep->retry_at = dsc_now_s() + (long_wait ? BACKOFF_MAX_S : ep->backoff);
    ep->backoff = ep->backoff * 2 < BACKOFF_MAX_S ? ep->backoff * 2 : BACKOFF_MAX_S;
    pthread_mutex_unlock(&ep->lock);
}

static int rc_open(void *endpoint, uint64_t view_hash, void **out, uint64_t *hello_hash) {
    rdma_endpoint_t *ep = endpoint;
    const dsc_source_env_t *env = ep->env;
    rdma_conn_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        return DSC_ENOMEM;
    c->ep = ep;
    c->next_internal = INTERNAL_ID;
    atomic_init(&c->woken, 0);
    int required = env->transport == DSC_TRANSPORT_RDMA;
    pthread_mutex_lock(&ep->lock);
    int wait = !required && dsc_now_s() < ep->retry_at;
    pthread_mutex_unlock(&ep->lock);
    char why[DSC_VERBS_REASON_MAX + 256] = "RDMA unavailable on this host";
    if (env->rdma != NULL && !wait) {
        int refused = 0;
        int rc = try_rdma(c, view_hash, hello_hash, why, sizeof why, &refused);
        if (rc == 0) {
            pthread_mutex_lock(&ep->lock);
            ep->backoff = BACKOFF_FIRST_S;
            int log = !ep->logged_rdma;
            ep->logged_rdma = 1;
            pthread_mutex_unlock(&ep->lock);
            if (log)
                DSC_LOG(env->log, DSC_LOG_INFO,
                        "server %s: transport rdma (device %s, path MTU %u, lease TTL %u ms, %s)",
                        ep->addr, c->dev->name, dsc_verbs_mtu_bytes(c->qp ? c->dev->mtu : 0),
                        c->lease_ttl_ms, c->gid.text);
            count_add(&env->counters->rdma_connections, 1);
            c->counted = 1;
            c->view_hash = view_hash;
            *out = c;
            return 0;
        }
        if (c->dev)
            rdma_teardown(c);
        if (rc != DSC_EUNAVAIL) { /* the server is not reachable at all */
            free(c);
            return rc;
        }
        backoff_failed(ep, refused);
        count_add(&env->counters->rdma_fallbacks, 1);
    }
    if (required) {
        DSC_LOG(env->log, DSC_LOG_ERROR, "server %s: transport rdma required: %s", ep->addr, why);
        free(c);
        return DSC_EUNAVAIL;
    }
    pthread_mutex_lock(&ep->lock);
    int log = !ep->logged_fallback && !wait;
    ep->logged_fallback |= log;
    pthread_mutex_unlock(&ep->lock);
    if (log && env->rdma != NULL)
        DSC_LOG(env->log, DSC_LOG_INFO, "server %s: transport tcp (RDMA: %s)", ep->addr, why);
    int rc = dsc__source_tcp.open(ep->tcp, view_hash, &c->tcp, hello_hash);
    if (rc < 0) {
        free(c);
        return rc;
    }
    count_add(&env->counters->tcp_connections, 1);
    *out = c;
    return 0;
}

static int send_get(rdma_conn_t *c, uint64_t id, const dsc_get_req_t *get) {
    dsc_rdma_get_req_t r = {.get = *get, .release_count = c->release_count, .release = c->release};
    uint8_t body[DSC_MAX_NAME + 48 + 8 * DSC_RDMA_MAX_RELEASE];
    int len = dsc_rdma_get_req_encode(&r, body, sizeof body);
    if (len < 0)
        return len;
    int rc = dsc_conn_send(c->conn, DSC_OP_RDMA_GET, id, body, (size_t)len);
    if (rc == 0)
        c->release_count = 0;
    return rc;
}

/* A release-only RDMA_GET (its answer is skipped by rc_complete). */
static int flush_releases(rdma_conn_t *c) {
    if (c->release_count == 0)
        return 0;
    dsc_get_req_t none = {0};
    return send_get(c, c->next_internal++, &none);
}

static int rc_submit(void *conn, dsc_source_req_t *req) {
    rdma_conn_t *c = conn;
    if (c->tcp)
        return dsc__source_tcp.submit(c->tcp, req);
    const char *dataset = c->ep->env->dataset;
    dsc_get_req_t get = {
        .dataset = {dataset, (uint16_t)strlen(dataset)},
        .shard_id = req->chunks[0]->shard,
        .first_chunk = req->chunks[0]->shard_chunk,
        .chunk_count = req->count,
    };
    return send_get(c, req->id, &get);
}

static int recv_body(rdma_conn_t *c, uint32_t len) {
    if (len > c->body_cap) {
        uint8_t *b = realloc(c->body, len);
        if (b == NULL)
            return DSC_ENOMEM;
        c->body = b;
        c->body_cap = len;
    }
    return len ? dsc_conn_recv_body(c->conn, c->body, len) : 0;
}

/* Checks a chunk's entry against the manifest and gives it a pool buffer. */
static int take_chunk(rdma_conn_t *c, dsc_chunk_ent_t *ent, const dsc_chunk_entry_t *e,
                      uint32_t i) {
    const dsc_source_env_t *env = c->ep->env;
    if (e->sample_count != ent->samples || e->raw_len != ent->raw_len) {
        DSC_LOG(env->log, DSC_LOG_ERROR,
                "server %s: shard %u chunk %u holds %u samples (%u bytes), the manifest says %u",
                c->ep->addr, ent->shard, ent->shard_chunk + i, e->sample_count, e->raw_len,
                ent->samples);
        return DSC_EPROTO;
    }
    ent->stored = dsc__bufpool_get(env->pool, e->stored_len, &ent->stored_cap);
    if (ent->stored == NULL)
        return DSC_ENOMEM;
    ent->entry = *e;
    return 0;
}

/* A READ failed (error completion, lost completion, peer gone): the QP is destroyed (no DMA into
 * the slab afterwards) and the control connection closed, which drops this connection's leases
 * on the server. Under transport auto the connection continues over TCP: every outstanding
 * request is sent again as a GET on a new TCP connection and answered there, so each chunk
 * still arrives exactly once; when that fails too (the server is gone), or under transport
 * rdma, it is a connection error and the loader moves the chunks to another replica. */
static int read_failed(rdma_conn_t *c, dsc_source_req_t *out, uint32_t count, dsc_source_req_t *req,
                       uint32_t *index, int *conn_bad, uint64_t *wire, const char *what, int rc) {
    const dsc_source_env_t *env = c->ep->env;
    int required = env->transport == DSC_TRANSPORT_RDMA;
    count_add(&env->counters->rdma_errors, 1);
    DSC_LOG(env->log, DSC_LOG_WARN,
            "server %s: RDMA READ of shard %u chunk %u (of %u) failed: %s; this connection "
            "continues over %s",
            c->ep->addr, req->chunks[0]->shard, req->chunks[0]->shard_chunk, req->count, what,
            required ? "nothing (transport rdma): the chunks move to another connection" : "TCP");
    backoff_failed(c->ep, 0);
    for (uint32_t i = 0; i < req->count; i++) {
        dsc_chunk_ent_t *ent = req->chunks[i];
        dsc__bufpool_put(env->pool, ent->stored, ent->stored_cap);
        ent->stored = NULL;
        ent->stored_cap = 0;
    }
    rdma_teardown(c);
    count_add(&env->counters->rdma_connections, -1);
    c->counted = 0;
    *conn_bad = 1;
    if (required)
        return rc == DSC_ECLOSED || rc == DSC_ETIMEDOUT ? rc : DSC_ECONNRESET;
    uint64_t hello = 0;
    int r = dsc__source_tcp.open(c->ep->tcp, c->view_hash, &c->tcp, &hello);
    if (r < 0) {
        c->tcp = NULL;
        return r;
    }
    count_add(&env->counters->tcp_connections, 1);
    count_add(&env->counters->rdma_fallbacks, 1);
    for (uint32_t k = 0; k < count; k++)
        if ((r = dsc__source_tcp.submit(c->tcp, &out[k])) < 0)
            return r;
    return dsc__source_tcp.complete(c->tcp, out, count, index, conn_bad, wire);
}

static int rc_complete(void *conn, dsc_source_req_t *out, uint32_t count, uint32_t *index,
                       int *conn_bad, uint64_t *wire) {
    rdma_conn_t *c = conn;
    if (c->tcp)
        return dsc__source_tcp.complete(c->tcp, out, count, index, conn_bad, wire);
    const dsc_source_env_t *env = c->ep->env;
    const char *addr = c->ep->addr;
    *conn_bad = 1;
    dsc_frame_header_t h;
    int rc;
    for (;;) {
        rc = dsc_conn_recv_header(c->conn, &h);
        if (rc < 0)
            return rc;
        if (!(h.request_id & INTERNAL_ID))
            break;
        if ((rc = recv_body(c, h.body_len)) < 0)
            return rc;
        if (h.opcode == DSC_OP_REPORT)
            continue; /* a REPORT's answer (rc_report; same id bit): dropped, as over TCP */
        if (h.status != DSC_STATUS_OK) {
            DSC_LOG(env->log, DSC_LOG_WARN, "server %s: lease release refused: %s", addr,
                    dsc_status_name(h.status));
            return DSC_EPROTO;
        }
    }
    dsc_source_req_t *req = NULL;
    for (uint32_t i = 0; i < count; i++)
        if (out[i].id == h.request_id) {
            req = &out[i];
            *index = i;
        }
    if (req == NULL || (h.opcode != DSC_OP_RDMA_GET && h.opcode != DSC_OP_GET) ||
        !(h.flags & DSC_FLAG_RESPONSE)) {
        DSC_LOG(env->log, DSC_LOG_ERROR,
                "server %s: response to no outstanding request (id %llu, opcode %u)", addr,
                (unsigned long long)h.request_id, h.opcode);
        return DSC_EPROTO;
    }
    if ((rc = recv_body(c, h.body_len)) < 0)
        return rc;
    if (h.status != DSC_STATUS_OK) {
        *conn_bad = 0;
        rc = dsc_status_to_err(h.status);
        DSC_LOG(env->log, rc == DSC_EUNAVAIL || rc == DSC_ECORRUPT ? DSC_LOG_WARN : DSC_LOG_ERROR,
                "server %s: RDMA_GET %s shard %u chunk %u (of %u): %s: %.*s", addr, env->dataset,
                req->chunks[0]->shard, req->chunks[0]->shard_chunk, req->count,
                dsc_status_name(h.status), (int)(h.body_len < 200 ? h.body_len : 200),
                (const char *)c->body);
        return rc;
    }
    dsc_rdma_get_resp_t resp;
    if (h.body_len == 0 || dsc_rdma_get_resp_decode(c->body, h.body_len, &resp) < 0 ||
        resp.chunk_count != req->count)
        return DSC_EPROTO;
    if (resp.flags & DSC_RDMA_GET_INLINE) {
        /* Bytes outside the server's registered memory (a read-through): as a GET. */
        dsc_get_resp_iter_t it;
        dsc_get_resp_iter_init(&it, &resp.inline_resp);
        for (uint32_t i = 0; i < req->count; i++) {
            dsc_chunk_entry_t e;
            const uint8_t *bytes;
            if (dsc_get_resp_iter_next(&it, &e, &bytes) != 1)
                return DSC_EPROTO;
            if ((rc = take_chunk(c, req->chunks[i], &e, i)) < 0)
                return rc;
            memcpy(req->chunks[i]->stored, bytes, e.stored_len);
            *wire += e.stored_len;
        }
        *conn_bad = 0;
        return 0;
    }
    /* Leased: one READ per contiguous run of descriptors. */
    dsc_rdma_desc_t runs[DSC_SOURCE_MAX_MERGE];
    uint64_t run_off[DSC_SOURCE_MAX_MERGE], chunk_off[DSC_SOURCE_MAX_MERGE];
    uint32_t nruns = 0;
    uint64_t total = 0;
    for (uint32_t i = 0; i < req->count; i++) {
        dsc_chunk_entry_t e;
        dsc_rdma_desc_t d;
        if (dsc_rdma_get_resp_chunk(&resp, i, &e, &d) < 0)
            return DSC_EPROTO;
        if ((rc = take_chunk(c, req->chunks[i], &e, i)) < 0)
            return rc;
        chunk_off[i] = total;
        dsc_rdma_desc_t *last = nruns ? &runs[nruns - 1] : NULL;
        if (last && last->rkey == d.rkey && last->addr + last->len == d.addr &&
            (uint64_t)last->len + d.len <= UINT32_MAX) {
            last->len += d.len;
        } else {
            runs[nruns] = d;
            run_off[nruns++] = total;
        }
        total += d.len;
    }
    if ((rc = slab_reserve(c, total)) < 0)
        return rc;
    const char *what = "";
    rc = read_runs(c, runs, run_off, nruns, &what);
    if (rc < 0)
        return read_failed(c, out, count, req, index, conn_bad, wire, what, rc);
    for (uint32_t i = 0; i < req->count; i++) {
        dsc_chunk_ent_t *ent = req->chunks[i];
        memcpy(ent->stored, c->slab + chunk_off[i], ent->entry.stored_len);
    }
    *wire += total;
    count_add(&env->counters->rdma_bytes, (int64_t)total);
    /* The bytes are here: the lease goes back with the next request, or now when nothing else
     * is outstanding (an idle connection must not let it expire). */
    c->release[c->release_count++] = resp.lease_id;
    if (count == 1 || c->release_count == DSC_RDMA_MAX_RELEASE) {
        if ((rc = flush_releases(c)) < 0)
            return rc;
    }
    *conn_bad = 0;
    return 0;
}

/* REPORTs go over the control connection (or the TCP fallback); rc_complete drops their
 * answers. */
static int rc_report(void *conn, uint64_t id, const uint8_t *body, size_t len) {
    rdma_conn_t *c = conn;
    if (c->tcp)
        return dsc__source_tcp.report(c->tcp, id, body, len);
    return dsc_conn_send(c->conn, DSC_OP_REPORT, id, body, len);
}

/* The server closed the idle control connection: only a hang-up counts here, since answers to
 * release-only RDMA_GETs may still be waiting to be read. */
static int rc_idle_closed(void *conn) {
    rdma_conn_t *c = conn;
    if (c->tcp)
        return dsc__source_tcp.idle_closed(c->tcp);
    struct pollfd pfd = {.fd = dsc_conn_fd(c->conn), .events = POLLRDHUP};
    return pfd.fd >= 0 && poll(&pfd, 1, 0) == 1 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static void rc_wake(void *conn) {
    rdma_conn_t *c = conn;
    if (c->tcp) {
        dsc__source_tcp.wake(c->tcp);
        return;
    }
    atomic_store(&c->woken, 1);
    dsc_conn_shutdown(c->conn);
}

static void rc_close(void *conn) {
    rdma_conn_t *c = conn;
    if (c == NULL)
        return;
    const dsc_source_env_t *env = c->ep->env;
    if (c->tcp) {
        dsc__source_tcp.close(c->tcp);
        count_add(&env->counters->tcp_connections, -1);
    } else {
        rdma_teardown(c);
        if (c->counted)
            count_add(&env->counters->rdma_connections, -1);
    }
    free(c);
}

/* Keeps the last message (the reason a probe failed). */
static void probe_log(void *ctx, int level, const char *message) {
    (void)level;
    snprintf((char *)ctx, 512, "%s", message);
}

int dsc__rdma_probe(const char *addr, uint32_t timeout_ms, const dsc_credential_t *cred, char *why,
                    size_t why_cap, char *device, size_t device_cap) {
    char last[512] = "";
    dsc_logger_t log;
    dsc__logger_init(&log, probe_log, last, DSC_LOG_ERROR);
    static dsc_transport_counters_t counters; /* unused by a probe */
    dsc_source_env_t env = {.log = &log,
                            .dataset = "",
                            .timeout_ms = timeout_ms,
                            .transport = DSC_TRANSPORT_RDMA,
                            .counters = &counters,
                            .cred = cred};
    int rc = dsc__rdma_client_open(DSC_TRANSPORT_RDMA, &log, &env.rdma);
    if (rc < 0) {
        snprintf(why, why_cap, "%s", last);
        return rc;
    }
    void *endpoint = NULL;
    rc = ep_open(&env, addr, &endpoint);
    rdma_conn_t *c = calloc(1, sizeof *c);
    if (rc < 0 || c == NULL) {
        free(c);
        ep_close(endpoint);
        dsc__rdma_client_close(env.rdma);
        snprintf(why, why_cap, "out of memory");
        return DSC_ENOMEM;
    }
    c->ep = endpoint;
    uint64_t hello = 0;
    int refused = 0;
    rc = try_rdma(c, 0, &hello, why, why_cap, &refused);
    if (rc == 0)
        snprintf(device, device_cap, "%s (%s)", c->dev->name, c->gid.text);
    else if (rc == DSC_EUNAUTH || c->connect_rc == DSC_EUNAUTH)
        rc = DSC_EUNAUTH; /* why says it: refused credential, or none given */
    else if (rc != DSC_EUNAVAIL)
        snprintf(why, why_cap, "cannot reach %s over TCP: %s", addr, dsc_strerror(rc));
    rdma_teardown(c);
    free(c);
    ep_close(endpoint);
    dsc__rdma_client_close(env.rdma);
    return rc;
}
#endif

const dsc_source_ops_t dsc__source_rdma = {
    .name = "rdma",
    .max_outstanding = 64,
    .peer_bounded = 1,
    .endpoint_open = ep_open,
    .endpoint_close = ep_close,
    .manifest = ep_manifest,
    .open = rc_open,
    .submit = rc_submit,
    .complete = rc_complete,
    .report = rc_report,
    .idle_closed = rc_idle_closed,
    .wake = rc_wake,
    .close = rc_close,
};
