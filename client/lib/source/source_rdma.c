/* Data source "rdma": chunks READ by RDMA straight out of a dscached arena. The TCP connection
 * stays the control channel (HELLO, RDMA_CONNECT, RDMA_GET with piggybacked lease releases);
 * each I/O thread owns one RC QP and one CQ with its completion channel, and keeps several
 * requests in READ on it, in regions of the loader's one registered slab (rdma_slab.c).
 * Any failure under transport auto keeps that connection on TCP (source_tcp.c), with a back-off
 * per server before RDMA is tried again.
 * Over 800 lines on purpose: the verbs path and the build without verbs headers share one ops
 * table and the TCP fallback, which is clearer beside each other.
 */
#include "source_rdma.h"
#include "conn.h"
#include "hint.h"
#include "placement.h"
#include "rdma_link.h"
#include "rdma_slab.h"
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
#define BUSY_POLLS 2000      /* ibv_poll_cq tries before sleeping on the completion channel */
#define ANSWER_POLL_EVERY 16 /* busy polls between looks at the control connection */
#define MAX_PENDING 64       /* = dsc__source_rdma.max_outstanding */
/* Once asleep (spins == BUSY_POLLS) the control connection and the slab are looked at on every
 * wake-up. */
_Static_assert(BUSY_POLLS % ANSWER_POLL_EVERY == 0, "BUSY_POLLS a multiple of ANSWER_POLL_EVERY");
#define SLAB_MIN (UINT64_C(4) << 20)
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
    dsc_rdma_slab_t slab; /* every connection READs into regions of it */
    struct ibv_mr *mr;    /* the slab, registered once (LOCAL_WRITE) before any connection */
    const dsc_logger_t *log;
};

uint64_t dsc__rdma_slab_bytes(const dsc_manifest_t *manifest, uint64_t inflight_bytes) {
    /* The largest request: DSC_SOURCE_MAX_MERGE chunks of the largest raw size (lz4 stores at
     * most a little more than raw). Variable-length fields: merges stop at
     * DSC_SOURCE_MERGE_MAX_BYTES counted at each chunk's bound (fetch.c), so a request holds at
     * most the larger of that and one chunk's bound (its samples at the manifest's bytes_max). */
    uint64_t chunk = 0;
    for (uint32_t i = 0; manifest != NULL && i < manifest->shard_count; i++) {
        uint64_t b = dsc__chunk_raw_bound(manifest, i);
        if (b > chunk)
            chunk = b;
    }
    uint64_t request = DSC_SOURCE_MAX_MERGE * (chunk + chunk / 255 + 64);
    if (manifest != NULL && manifest->schema.var_count > 0) {
        uint64_t most = chunk > DSC_SOURCE_MERGE_MAX_BYTES ? chunk : DSC_SOURCE_MERGE_MAX_BYTES;
        uint64_t merged = most + most / 255 + 64 * DSC_SOURCE_MAX_MERGE;
        request = merged < request ? merged : request;
    }
    uint64_t want = inflight_bytes <= UINT64_MAX / 2 ? 2 * inflight_bytes : UINT64_MAX;
    if (want < 2 * request)
        want = 2 * request;
    return want < SLAB_MIN ? SLAB_MIN : want;
}

#if !DSC_HAVE_VERBS_H

int dsc__rdma_client_open(dsc_transport_t transport, uint64_t slab_bytes, const dsc_logger_t *log,
                          dsc_rdma_client_t **out) {
    (void)slab_bytes;
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
static int rc_report_answer(void *conn, dsc_report_resp_t *out) {
    return dsc__source_tcp.report_answer(conn, out);
}
static int rc_hint(void *conn, uint64_t id, const uint8_t *body, size_t len) {
    return dsc__source_tcp.hint(conn, id, body, len);
}
static int rc_hint_refused(void *conn) {
    return dsc__source_tcp.hint_refused(conn);
}
static int rc_abandon_ok(void *conn) {
    return dsc__source_tcp.abandon_ok(conn);
}

static uint32_t rc_scatter_max(void *conn) {
    return dsc__source_tcp.scatter_max(conn);
}
static int rc_range_ok(void *conn) {
    return dsc__source_tcp.range_ok(conn);
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

static void count_add(atomic_uint_fast64_t *c, int64_t d) {
    if (d >= 0)
        atomic_fetch_add_explicit(c, (uint64_t)d, memory_order_relaxed);
    else
        atomic_fetch_sub_explicit(c, (uint64_t)-d, memory_order_relaxed);
}

/* Maps and registers the slab once. Returns 0, or DSC_EUNAVAIL with the reason in why. */
static int client_slab(dsc_rdma_client_t *r, uint64_t bytes, const dsc_logger_t *log, char *why,
                       size_t why_cap) {
    int rc = dsc__rdma_slab_init(&r->slab, bytes);
    if (rc < 0) {
        snprintf(why, why_cap, "cannot map a %.1f MiB RDMA slab: %s", (double)bytes / 1048576.0,
                 dsc_strerror(rc));
        return DSC_EUNAVAIL;
    }
    double t0 = dsc_now_s();
    r->mr = r->dev.v.reg_mr(r->dev.pd, r->slab.base, r->slab.bytes, IBV_ACCESS_LOCAL_WRITE);
    double ms = (dsc_now_s() - t0) * 1e3;
    if (r->mr == NULL) {
        int err = errno;
        snprintf(why, why_cap,
                 "cannot register the loader's %.1f MiB RDMA slab: %s; raise RLIMIT_MEMLOCK "
                 "(ulimit -l; in a container --ulimit memlock=-1) or grant CAP_IPC_LOCK; "
                 "'dscache doctor --pin-bytes %lluM' checks it",
                 (double)r->slab.bytes / 1048576.0, strerror(err),
                 (unsigned long long)((r->slab.bytes + 1048575) >> 20));
        dsc__rdma_slab_close(&r->slab);
        return DSC_EUNAVAIL;
    }
    DSC_LOG(log, DSC_LOG_INFO,
            "rdma: loader slab of %.1f MiB (%s) registered once in %.3f ms on %s, shared by every "
            "connection",
            (double)r->slab.bytes / 1048576.0,
            r->slab.hugetlb ? "2 MiB hugetlb pages"
                            : "normal pages, transparent huge pages requested",
            ms, r->dev.name);
    return 0;
}

int dsc__rdma_client_open(dsc_transport_t transport, uint64_t slab_bytes, const dsc_logger_t *log,
                          dsc_rdma_client_t **out) {
    *out = NULL;
    if (transport == DSC_TRANSPORT_TCP)
        return 0;
    char why[DSC_VERBS_REASON_MAX + 256] = "";
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
    r->log = log;
    int rc = dsc_rdma_dev_open(&r->dev, why, sizeof why);
    int have_device = 0;
    if (rc == 0) {
        have_device = 1;
        rc = client_slab(r, slab_bytes, log, why, sizeof why);
        if (rc < 0)
            dsc_rdma_dev_close(&r->dev);
    }
    if (rc < 0) {
        free(r);
        if (transport == DSC_TRANSPORT_RDMA) {
            DSC_LOG(log, DSC_LOG_ERROR, "transport rdma: RDMA is unavailable here: %s", why);
            return DSC_EUNAVAIL;
        }
        /* A device that cannot pin the slab is a setup to fix, not an absent device. */
        DSC_LOG(log, have_device ? DSC_LOG_WARN : DSC_LOG_INFO,
                "transport auto: RDMA unavailable (%s); using TCP", why);
        return 0;
    }
    *out = r;
    return 0;
}

void dsc__rdma_client_close(dsc_rdma_client_t *rdma) {
    if (rdma == NULL)
        return;
    /* Every QP is gone (the caller's contract): nothing can write into the slab any more. */
    dsc_rdma_slab_stats_t st;
    dsc__rdma_slab_stats(&rdma->slab, &st);
    DSC_LOG(rdma->log, DSC_LOG_INFO,
            "rdma: loader slab: peak %.1f of %.1f MiB in use; %llu wait(s) for room, %llu "
            "refused tr%s (READs outstanding first)",
            (double)st.peak_bytes / 1048576.0, (double)rdma->slab.bytes / 1048576.0,
            (unsigned long long)st.waits, (unsigned long long)st.refusals,
            st.refusals == 1 ? "y" : "ies");
    if (rdma->mr)
        rdma->dev.v.dereg_mr(rdma->mr);
    dsc__rdma_slab_close(&rdma->slab);
    dsc_rdma_dev_close(&rdma->dev);
    free(rdma);
}

/* ---- one connection ----------------------------------------------------------------------- */

/* A request answered with a lease: its READ chain waits for slab space (parked) or is posted. */
typedef struct pending {
    uint64_t id;
    uint64_t lease_id;
    dsc_rdma_slab_region_t region; /* blocks 0: none yet */
    uint64_t total;                /* bytes READ */
    uint32_t count;                /* chunks */
    uint32_t nruns;                /* READ WRs: one per contiguous run */
    dsc_rdma_desc_t runs[DSC_SOURCE_MAX_MERGE];
    uint64_t run_off[DSC_SOURCE_MAX_MERGE];   /* in the region */
    uint64_t chunk_off[DSC_SOURCE_MAX_MERGE]; /* in the region */
    /* The answer's chunk entries: checked against the chunks and given buffers only when the
     * READ completes and the request is claimed (dsc__req_claim): until then hedge.c may abandon
     * it and re-issue its chunks elsewhere, so nothing of theirs is touched before. */
    dsc_chunk_entry_t entry[DSC_SOURCE_MAX_MERGE];
    double answer_at;
} pending_t;

/* A request finished but not yet returned by rc_complete (which returns one per call). */
typedef struct finished {
    uint64_t id;
    int rc; /* 0, or the request's own error (the server's status) */
    uint64_t wire;
    double answer_at;
} finished_t;

typedef struct rdma_conn {
    rdma_endpoint_t *ep;
    void *tcp;          /* a TCP source connection: every operation goes there (fallback) */
    dsc_conn_t *conn;   /* RDMA: the control connection */
    int hint_trim_said; /* a HINT answer said ranges were trimmed (logged once) */
    dsc_rdma_dev_t *dev;
    dsc_rdma_gid_choice_t gid; /* on the control connection's subnet ("RDMA follows TCP") */
    dsc_rdma_slab_t *slab;     /* the loader's (env->rdma) */
    struct ibv_mr *mr;         /* its registration */
    struct ibv_comp_channel *ch;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    uint8_t *body;
    size_t body_cap;
    uint32_t lease_ttl_ms;
    uint16_t release_count;
    uint64_t release[DSC_RDMA_MAX_RELEASE];
    uint64_t next_internal;
    /* Requests in READ, oldest first (RC completes a QP's WRs in order), as a ring. */
    pending_t reading[MAX_PENDING];
    uint32_t reading_head, reading_count;
    uint32_t wr_posted; /* READ WRs posted and not completed (the send queue holds SEND_WR) */
    pending_t parked;   /* the next answer, waiting for slab space or send-queue room */
    int has_parked;
    finished_t done[MAX_PENDING]; /* ring, in completion order */
    uint32_t done_head, done_count;
    double progress_at; /* the last completion (or the first post after none was reading) */
    dsc_rdma_slab_region_t probe;
    atomic_int woken;
    atomic_int tcp_only; /* 1 once every operation goes to tcp */
    int counted;
    int connect_rc; /* what RDMA_CONNECT returned (the probe tells auth failures apart) */
    uint64_t view_hash;
} rdma_conn_t;

static double timeout_s(const rdma_conn_t *c) {
    uint32_t ms = c->ep->env->timeout_ms;
    return (ms ? ms : 5000) / 1000.0;
}

/* QP first (once ibv_destroy_qp returns nothing lands in the slab any more), then the slab
 * regions this connection held, then the rest. Leases die with the control connection. */
static void rdma_teardown(rdma_conn_t *c) {
    if (c->qp)
        dsc_rdma_qp_fence(c->dev, c->qp);
    c->qp = NULL;
    if (c->slab != NULL) {
        for (uint32_t i = 0; i < c->reading_count; i++)
            dsc__rdma_slab_free(c->slab, &c->reading[(c->reading_head + i) % MAX_PENDING].region);
        dsc__rdma_slab_free(c->slab, &c->parked.region);
        dsc__rdma_slab_free(c->slab, &c->probe);
    }
    c->reading_count = c->reading_head = 0;
    c->has_parked = 0;
    c->done_count = c->done_head = 0;
    c->wr_posted = 0;
    c->release_count = 0;
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

/* Posts READs of n (remote addr, rkey, len) runs into the slab at offsets[i] as one chain, every
 * WR carrying wr_id, only the last signalled. Returns 0 or DSC_EIO (after which the QP cannot be
 * trusted: unsignalled WRs of a partly posted chain are untracked; the caller tears it down). */
static int post_chain(rdma_conn_t *c, const dsc_rdma_desc_t *runs, const uint64_t *offsets,
                      uint32_t n, uint64_t wr_id) {
    struct ibv_sge sge[DSC_SOURCE_MAX_MERGE];
    struct ibv_send_wr wr[DSC_SOURCE_MAX_MERGE];
    memset(wr, 0, n * sizeof *wr);
    for (uint32_t i = 0; i < n; i++) {
        sge[i] = (struct ibv_sge){.addr = (uint64_t)(uintptr_t)(c->slab->base + offsets[i]),
                                  .length = runs[i].len,
                                  .lkey = c->mr->lkey};
        wr[i].wr_id = wr_id;
        wr[i].sg_list = &sge[i];
        wr[i].num_sge = 1;
        wr[i].opcode = IBV_WR_RDMA_READ;
        wr[i].send_flags = i + 1 == n ? IBV_SEND_SIGNALED : 0;
        wr[i].wr.rdma.remote_addr = runs[i].addr;
        wr[i].wr.rdma.rkey = runs[i].rkey;
        wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
    }
    struct ibv_send_wr *bad = NULL;
    return ibv_post_send(c->qp, wr, &bad) != 0 ? DSC_EIO : 0;
}

/* The probe READ: one chain, waited for alone (nothing else is in READ yet). Busy-polls first,
 * then arms the CQ and sleeps on the completion channel's fd (and the TCP fd for a peer that goes
 * away). Returns 0, or an error with *what. */
static int probe_read(rdma_conn_t *c, const dsc_rdma_desc_t *run, uint64_t offset,
                      const char **what) {
    if (post_chain(c, run, &offset, 1, 0) < 0) {
        *what = "ibv_post_send failed";
        return DSC_EIO;
    }
    double deadline = dsc_now_s() + timeout_s(c);
    struct ibv_wc wc;
    int n = 0;
    for (int i = 0; i < BUSY_POLLS && n == 0; i++)
        n = ibv_poll_cq(c->cq, 1, &wc);
    while (n == 0) {
        if (ibv_req_notify_cq(c->cq, 0) != 0) {
            n = -1;
            break;
        }
        n = ibv_poll_cq(c->cq, 1, &wc); /* one that arrived before the arming */
        if (n != 0)
            break;
        double left = deadline - dsc_now_s();
        if (atomic_load(&c->woken) || left <= 0) {
            *what = left <= 0 ? "no completion in time" : "closed";
            return left <= 0 ? DSC_ETIMEDOUT : DSC_ECLOSED;
        }
        struct pollfd fds[2] = {{.fd = c->ch->fd, .events = POLLIN},
                                {.fd = dsc_conn_fd(c->conn), .events = POLLRDHUP}};
        int r = poll(fds, 2, left * 1000 > 100 ? 100 : (int)(left * 1000) + 1);
        if (r > 0 && (fds[1].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
            *what = "connection closed mid-READ";
            return DSC_ECLOSED;
        }
        if (r > 0 && (fds[0].revents & POLLIN)) {
            struct ibv_cq *ev_cq;
            void *ev_ctx;
            if (c->dev->v.get_cq_event(c->ch, &ev_cq, &ev_ctx) == 0)
                c->dev->v.ack_cq_events(ev_cq, 1);
        }
    }
    if (n < 0) {
        *what = "ibv_poll_cq failed";
        return DSC_EIO;
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
    c->slab = &env->rdma->slab;
    c->mr = env->rdma->mr;
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
    /* The probe READ, into a region of the loader's slab (this connection holds none yet):
     * only bytes that arrive intact prove the path. */
    rc = dsc__rdma_slab_alloc_wait(c->slab, resp.probe.len, dsc_now_s() + timeout_s(c), &c->woken,
                                   &c->probe);
    if (rc < 0) {
        snprintf(why, why_cap, "no room in the RDMA slab for the probe READ: %s", dsc_strerror(rc));
        return DSC_EUNAVAIL;
    }
    const char *what = "";
    rc = probe_read(c, &resp.probe, c->probe.offset, &what);
    if (rc < 0) {
        snprintf(why, why_cap,
                 "the probe READ failed (%s) from %s: check routing, GID and PFC "
                 "between this host and the server",
                 what, c->gid.text);
        return DSC_EUNAVAIL;
    }
    if (dsc_checksum(c->slab->base + c->probe.offset, resp.probe.len) != resp.probe.checksum) {
        snprintf(why, why_cap, "the probe READ returned other bytes than the server's");
        return DSC_EUNAVAIL;
    }
    dsc__rdma_slab_free(c->slab, &c->probe); /* its READ has completed */
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
    atomic_store(&c->tcp_only, 1);
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
    const dsc_manifest_t *m = c->ep->env->manifest; /* as tcp_submit: the version read */
    if (m != NULL && m->version != 0 &&
        (dsc_conn_info(c->conn)->features & DSC_FEATURE_DATASET_VERSION)) {
        get.flags = DSC_GET_FLAG_VERSION;
        get.version = m->version;
    }
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
    if (e->sample_count != ent->samples || !dsc__chunk_raw_len_ok(ent, e->raw_len)) {
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

/* The outstanding request with this id, or -1. */
static int64_t find_req(const dsc_source_req_t *out, uint32_t count, uint64_t id) {
    for (uint32_t i = 0; i < count; i++)
        if (out[i].id == id)
            return i;
    return -1;
}

/* 1 when the request already has its answer (parked, in READ or finished). */
static int answered(const rdma_conn_t *c, uint64_t id) {
    if (c->has_parked && c->parked.id == id)
        return 1;
    for (uint32_t i = 0; i < c->reading_count; i++)
        if (c->reading[(c->reading_head + i) % MAX_PENDING].id == id)
            return 1;
    for (uint32_t i = 0; i < c->done_count; i++)
        if (c->done[(c->done_head + i) % MAX_PENDING].id == id)
            return 1;
    return 0;
}

/* Each request is in one place at a time (unanswered, parked, in READ, finished) and at most
 * MAX_PENDING are outstanding, so the ring has room. */
static void finish(rdma_conn_t *c, uint64_t id, int rc, uint64_t wire, double answer_at) {
    c->done[(c->done_head + c->done_count++) % MAX_PENDING] =
        (finished_t){.id = id, .rc = rc, .wire = wire, .answer_at = answer_at};
}

/* Queues a lease for release (only once its READ has completed); a full list goes out now.
 * Returns 0 or a connection error. */
static int release_lease(rdma_conn_t *c, uint64_t lease_id) {
    c->release[c->release_count++] = lease_id;
    return c->release_count == DSC_RDMA_MAX_RELEASE ? flush_releases(c) : 0;
}

/* A READ failed (an error completion, a lost completion, none in time, the server gone mid-READ,
 * a failed post, no slab space in time): the QP is destroyed first (nothing lands in the slab
 * afterwards), then this connection's slab regions are freed and the control connection closed,
 * which drops its leases on the server. Every outstanding request, whatever its state
 * (unanswered, in READ, finished but not yet returned), gives its chunks' buffers back and is
 * asked again: under transport auto as a GET on a new TCP connection, so each chunk still
 * arrives exactly once; when that fails too (the server is gone), or under transport rdma, it
 * is a connection error and the loader moves the chunks to another replica. */
static int read_failed(rdma_conn_t *c, dsc_source_req_t *out, uint32_t count, uint32_t *index,
                       int *conn_bad, uint64_t *wire, const char *what, int rc) {
    const dsc_source_env_t *env = c->ep->env;
    int required = env->transport == DSC_TRANSPORT_RDMA;
    count_add(&env->counters->rdma_errors, 1);
    const pending_t *first = c->reading_count ? &c->reading[c->reading_head]
                             : c->has_parked  ? &c->parked
                                              : NULL;
    int64_t k = first ? find_req(out, count, first->id) : -1;
    uint32_t reading = c->reading_count;
    /* Every request is claimed here, so that hedge.c abandons none while they are asked again;
     * one it abandoned already has no chunks left to ask for: then the connection fails (the
     * loader moves the others' chunks to another owner), as under transport rdma. */
    int abandoned = 0;
    for (uint32_t r = 0; r < count; r++)
        abandoned |= !dsc__req_claim(&out[r]);
    const char *next = required || abandoned
                           ? "nothing: the chunks move to another connection (transport rdma, or "
                             "requests re-issued elsewhere)"
                           : "TCP";
    if (k >= 0 && __atomic_load_n(&out[k].claim, __ATOMIC_ACQUIRE) == DSC_REQ_RECEIVING)
        DSC_LOG(env->log, DSC_LOG_WARN,
                "server %s: RDMA READ of shard %u chunk %u (of %u) failed: %s (%u request(s) in "
                "READ on this connection); this connection continues over %s",
                c->ep->addr, out[k].chunks[0]->shard, out[k].chunks[0]->shard_chunk, out[k].count,
                what, reading, next);
    else
        DSC_LOG(env->log, DSC_LOG_WARN,
                "server %s: RDMA READ failed: %s; this connection continues over %s", c->ep->addr,
                what, next);
    backoff_failed(c->ep, 0);
    rdma_teardown(c);
    for (uint32_t r = 0; r < count; r++) {
        if (__atomic_load_n(&out[r].claim, __ATOMIC_ACQUIRE) != DSC_REQ_RECEIVING)
            continue; /* abandoned: its chunks are elsewhere */
        for (uint32_t i = 0; i < out[r].count; i++) {
            dsc_chunk_ent_t *ent = out[r].chunks[i];
            dsc__bufpool_put(env->pool, ent->stored, ent->stored_cap);
            ent->stored = NULL;
            ent->stored_cap = 0;
        }
    }
    count_add(&env->counters->rdma_connections, -1);
    c->counted = 0;
    *conn_bad = 1;
    if (required || abandoned)
        return rc == DSC_ECLOSED || rc == DSC_ETIMEDOUT ? rc : DSC_ECONNRESET;
    uint64_t hello = 0;
    int r = dsc__source_tcp.open(c->ep->tcp, c->view_hash, &c->tcp, &hello);
    if (r < 0) {
        c->tcp = NULL;
        return r;
    }
    count_add(&env->counters->tcp_connections, 1);
    count_add(&env->counters->rdma_fallbacks, 1);
    atomic_store(&c->tcp_only, 1); /* from here on its answers are claimed (source_tcp.c) */
    for (uint32_t q = 0; q < count; q++)
        if ((r = dsc__source_tcp.submit(c->tcp, &out[q])) < 0)
            return r;
    return dsc__source_tcp.complete(c->tcp, out, count, index, conn_bad, wire);
}

/* Takes what the CQ holds. A completion finishes the oldest request in READ (RC completes a QP's
 * WRs in order): its chunks' bytes are copied out of the slab into their buffers, its region
 * freed and its lease queued for release. Returns the number of requests finished; a READ
 * failure (*what set); or a connection error (*what NULL). */
static int reap(rdma_conn_t *c, dsc_source_req_t *out, uint32_t count, const char **what) {
    const dsc_source_env_t *env = c->ep->env;
    struct ibv_wc wc[16];
    int n = ibv_poll_cq(c->cq, 16, wc);
    if (n < 0) {
        *what = "ibv_poll_cq failed";
        return DSC_EIO;
    }
    int finished = 0;
    for (int i = 0; i < n; i++) {
        if (wc[i].status != IBV_WC_SUCCESS) {
            *what = c->dev->v.wc_status_str(wc[i].status);
            return DSC_EIO;
        }
        pending_t *p = &c->reading[c->reading_head];
        int64_t k = c->reading_count ? find_req(out, count, p->id) : -1;
        if (k < 0 || wc[i].wr_id != p->id) {
            /* Only the oldest request's chain can complete next: another completion means
             * one was lost. */
            *what = "a completion was lost (a later request's arrived first)";
            return DSC_EIO;
        }
        /* Claimed now (the READ is done): its chunks get the bytes. Abandoned while it was
         * parked or in READ (hedge.c re-issued them elsewhere): the bytes are dropped, the
         * region and the lease released all the same, the caller counts them as wasted. */
        if (dsc__req_claim(&out[k])) {
            for (uint32_t j = 0; j < out[k].count; j++) {
                dsc_chunk_ent_t *ent = out[k].chunks[j];
                int rc = take_chunk(c, ent, &p->entry[j], j);
                if (rc < 0) {
                    *what = NULL;
                    return rc;
                }
                memcpy(ent->stored, c->slab->base + p->region.offset + p->chunk_off[j],
                       ent->entry.stored_len);
            }
        }
        dsc__rdma_slab_free(c->slab, &p->region);
        c->wr_posted -= p->nruns;
        count_add(&env->counters->rdma_bytes, (int64_t)p->total);
        finish(c, p->id, 0, p->total, p->answer_at);
        uint64_t lease = p->lease_id;
        c->reading_head = (c->reading_head + 1) % MAX_PENDING;
        c->reading_count--;
        c->progress_at = dsc_now_s();
        finished++;
        int rc = release_lease(c, lease);
        if (rc < 0) {
            *what = NULL;
            return rc;
        }
    }
    return finished;
}

/* Reads one answer from the control connection, waiting for it: an internal one is dropped; a
 * refusal or an inline answer finishes its request; a leased one is parked for its READ (its
 * chunks get their buffers now). Returns 0 or a connection error. */
static int read_answer(rdma_conn_t *c, dsc_source_req_t *out, uint32_t count) {
    const dsc_source_env_t *env = c->ep->env;
    const char *addr = c->ep->addr;
    dsc_frame_header_t h;
    int rc = dsc_conn_recv_header(c->conn, &h);
    if (rc < 0)
        return rc;
    double at = dsc_now_s();
    if (h.request_id & INTERNAL_ID) {
        if ((rc = recv_body(c, h.body_len)) < 0)
            return rc;
        dsc_hint_resp_t hr;
        if (h.opcode == DSC_OP_HINT && h.status == DSC_STATUS_OK && !c->hint_trim_said &&
            dsc_hint_resp_decode_share(c->body, h.body_len, &hr) == 0 && hr.trimmed > 0) {
            /* As over TCP (source_tcp.c): trimmed ranges are read when asked for; said once. */
            c->hint_trim_said = 1;
            DSC_LOG(env->log, DSC_LOG_WARN,
                    "server %s: read-ahead trimmed %u of %u hinted ranges: this job's part of "
                    "the server's staging area is %llu bytes (%llu held), shared with other "
                    "credentials' and jobs' hints; the rest is read when asked for (said once "
                    "per connection)",
                    addr, hr.trimmed, hr.trimmed + hr.accepted, (unsigned long long)hr.share_bytes,
                    (unsigned long long)hr.held_bytes);
        }
        if (h.opcode == DSC_OP_REPORT || h.opcode == DSC_OP_HINT)
            return 0; /* a REPORT's or HINT's answer (same id bit): dropped but for that */
        if (h.status != DSC_STATUS_OK) {
            DSC_LOG(env->log, DSC_LOG_WARN, "server %s: lease release refused: %s", addr,
                    dsc_status_name(h.status));
            return DSC_EPROTO;
        }
        return 0;
    }
    int64_t k = find_req(out, count, h.request_id);
    if (k < 0 || answered(c, h.request_id) ||
        (h.opcode != DSC_OP_RDMA_GET && h.opcode != DSC_OP_GET) || !(h.flags & DSC_FLAG_RESPONSE)) {
        DSC_LOG(env->log, DSC_LOG_ERROR,
                "server %s: response to no outstanding request (id %llu, opcode %u)", addr,
                (unsigned long long)h.request_id, h.opcode);
        return DSC_EPROTO;
    }
    dsc_source_req_t *req = &out[k];
    if ((rc = recv_body(c, h.body_len)) < 0)
        return rc;
    if (h.status != DSC_STATUS_OK) {
        if (!dsc__req_claim(req)) { /* abandoned (hedge.c): a late refusal, dropped */
            finish(c, req->id, 0, h.body_len, at);
            return 0;
        }
        rc = dsc_status_to_err(h.status);
        DSC_LOG(env->log, rc == DSC_EUNAVAIL || rc == DSC_ECORRUPT ? DSC_LOG_WARN : DSC_LOG_ERROR,
                "server %s: RDMA_GET %s shard %u chunk %u (of %u): %s: %.*s", addr, env->dataset,
                req->chunks[0]->shard, req->chunks[0]->shard_chunk, req->count,
                dsc_status_name(h.status), (int)(h.body_len < 200 ? h.body_len : 200),
                (const char *)c->body);
        finish(c, req->id, rc, 0, at);
        return 0;
    }
    dsc_rdma_get_resp_t resp;
    if (h.body_len == 0 || dsc_rdma_get_resp_decode(c->body, h.body_len, &resp) < 0 ||
        resp.chunk_count != req->count)
        return DSC_EPROTO;
    if (resp.flags & DSC_RDMA_GET_INLINE) {
        /* Bytes outside the server's registered memory (a read-through): as a GET; dropped when
         * the request was abandoned (hedge.c), its bytes counted as wasted. */
        if (!dsc__req_claim(req)) {
            finish(c, req->id, 0, h.body_len, at);
            return 0;
        }
        dsc_get_resp_iter_t it;
        dsc_get_resp_iter_init(&it, &resp.inline_resp);
        uint64_t wire = 0;
        for (uint32_t i = 0; i < req->count; i++) {
            dsc_chunk_entry_t e;
            const uint8_t *bytes;
            if (dsc_get_resp_iter_next(&it, &e, &bytes) != 1)
                return DSC_EPROTO;
            if ((rc = take_chunk(c, req->chunks[i], &e, i)) < 0)
                return rc;
            memcpy(req->chunks[i]->stored, bytes, e.stored_len);
            wire += e.stored_len;
        }
        finish(c, req->id, 0, wire, at);
        return 0;
    }
    /* Leased: one READ per contiguous run of descriptors. The request stays unclaimed until
     * its READ completes (reap), so that a stalled server's requests parked or in READ can be
     * abandoned too; their chunks are not touched before. */
    pending_t *p = &c->parked;
    p->id = req->id;
    p->lease_id = resp.lease_id;
    p->region = (dsc_rdma_slab_region_t){0};
    p->count = req->count;
    p->nruns = 0;
    p->total = 0;
    p->answer_at = at;
    for (uint32_t i = 0; i < req->count; i++) {
        dsc_chunk_entry_t e;
        dsc_rdma_desc_t d;
        if (dsc_rdma_get_resp_chunk(&resp, i, &e, &d) < 0)
            return DSC_EPROTO;
        p->entry[i] = e;
        p->chunk_off[i] = p->total;
        dsc_rdma_desc_t *last = p->nruns ? &p->runs[p->nruns - 1] : NULL;
        if (last && last->rkey == d.rkey && last->addr + last->len == d.addr &&
            (uint64_t)last->len + d.len <= UINT32_MAX) {
            last->len += d.len;
        } else {
            p->runs[p->nruns] = d;
            p->run_off[p->nruns++] = p->total;
        }
        p->total += d.len;
    }
    if (p->total == 0) { /* nothing to READ */
        if (dsc__req_claim(req))
            for (uint32_t i = 0; i < req->count; i++)
                if ((rc = take_chunk(c, req->chunks[i], &p->entry[i], i)) < 0)
                    return rc;
        finish(c, p->id, 0, 0, at);
        return release_lease(c, p->lease_id);
    }
    c->has_parked = 1;
    return 0;
}

/* Gives the parked answer a slab region and posts its READ chain. A connection with READs
 * outstanding only tries (what it holds frees as they complete, and callers holding nothing go
 * first); one holding nothing waits for room, first come first served, up to the time-out.
 * Returns 1 (posted), 0 (not now: completions first), or an error with *what. */
static int place_parked(rdma_conn_t *c, const char **what) {
    pending_t *p = &c->parked;
    if (c->reading_count > 0 &&
        (c->wr_posted + p->nruns > SEND_WR || c->reading_count == MAX_PENDING))
        return 0;
    if (p->region.blocks == 0) {
        int rc = c->reading_count > 0
                     ? dsc__rdma_slab_try_alloc(c->slab, p->total, &p->region)
                     : dsc__rdma_slab_alloc_wait(c->slab, p->total, dsc_now_s() + timeout_s(c),
                                                 &c->woken, &p->region);
        if (rc == DSC_EAGAIN)
            return 0;
        if (rc < 0) {
            *what = rc == DSC_ETIMEDOUT   ? "no room in the RDMA slab in time"
                    : rc == DSC_ETOOLARGE ? "a request larger than the RDMA slab"
                                          : "closed";
            return rc;
        }
    }
    uint64_t off[DSC_SOURCE_MAX_MERGE];
    for (uint32_t i = 0; i < p->nruns; i++)
        off[i] = p->region.offset + p->run_off[i];
    if (post_chain(c, p->runs, off, p->nruns, p->id) < 0) {
        *what = "ibv_post_send failed"; /* the region stays parked: freed after the QP is gone */
        return DSC_EIO;
    }
    if (c->reading_count == 0)
        c->progress_at = dsc_now_s();
    c->reading[(c->reading_head + c->reading_count++) % MAX_PENDING] = *p;
    c->wr_posted += p->nruns;
    p->region.blocks = 0; /* moved with it */
    c->has_parked = 0;
    return 1;
}

/* 1 when an answer (or its start) can be read without waiting: buffered, or, when look_at_fd,
 * the socket polls readable (or hung up: reading it then reports why). */
static int answer_waiting(rdma_conn_t *c, int look_at_fd) {
    if (dsc_conn_buffered(c->conn) > 0)
        return 1;
    if (!look_at_fd)
        return 0;
    struct pollfd p = {.fd = dsc_conn_fd(c->conn), .events = POLLIN};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLIN | POLLHUP | POLLERR));
}

/* READs are outstanding and nothing else can be done: busy-polls (the caller reaps and looks at
 * the control connection between tries), then arms the CQ and sleeps on its completion channel's
 * fd together with the TCP fd (an answer to post, or the server gone), 100 ms at most. Returns 0
 * (look again), or an error: with *what a READ failure, without it a connection error. */
static int wait_step(rdma_conn_t *c, dsc_source_req_t *out, uint32_t count, uint32_t *spins,
                     const char **what) {
    if (atomic_load(&c->woken)) {
        *what = NULL;
        return DSC_ECLOSED;
    }
    double deadline = c->progress_at + timeout_s(c);
    if (*spins < BUSY_POLLS) {
        if (++*spins % 64 == 0 && dsc_now_s() > deadline) {
            *what = "no completion in time";
            return DSC_ETIMEDOUT;
        }
        return 0;
    }
    if (ibv_req_notify_cq(c->cq, 0) != 0) {
        *what = "ibv_req_notify_cq failed";
        return DSC_EIO;
    }
    int r = reap(c, out, count, what); /* one that arrived before the arming */
    if (r != 0) {
        *spins = 0;
        return r < 0 ? r : 0;
    }
    double left = deadline - dsc_now_s();
    if (left <= 0) {
        *what = "no completion in time";
        return DSC_ETIMEDOUT;
    }
    struct pollfd fds[2] = {
        {.fd = c->ch->fd, .events = POLLIN},
        {.fd = dsc_conn_fd(c->conn), .events = POLLRDHUP | (c->has_parked ? 0 : POLLIN)}};
    int n = poll(fds, 2, left * 1000 > 100 ? 100 : (int)(left * 1000) + 1);
    if (n < 0 && errno != EINTR) {
        *what = "poll failed";
        return DSC_EIO;
    }
    if (n > 0 && (fds[1].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
        *what = "connection closed mid-READ";
        return DSC_ECLOSED;
    }
    if (n > 0 && (fds[0].revents & POLLIN)) {
        struct ibv_cq *ev_cq;
        void *ev_ctx;
        if (c->dev->v.get_cq_event(c->ch, &ev_cq, &ev_ctx) == 0)
            c->dev->v.ack_cq_events(ev_cq, 1);
    }
    if (n > 0)
        *spins = 0; /* something arrived: busy-poll again */
    return 0;
}

/* Returns the oldest finished request. */
static int return_finished(rdma_conn_t *c, dsc_source_req_t *out, uint32_t count, uint32_t *index,
                           int *conn_bad, uint64_t *wire) {
    finished_t f = c->done[c->done_head];
    c->done_head = (c->done_head + 1) % MAX_PENDING;
    c->done_count--;
    int64_t k = find_req(out, count, f.id);
    if (k < 0) {
        DSC_LOG(c->ep->env->log, DSC_LOG_ERROR,
                "server %s: finished request %llu is not outstanding", c->ep->addr,
                (unsigned long long)f.id);
        *conn_bad = 1;
        return DSC_EPROTO;
    }
    *index = (uint32_t)k;
    out[k].answer_at = f.answer_at;
    *wire += f.wire;
    /* The leases of completed READs go back with the next request, or now when nothing else is
     * outstanding (an idle connection must not let them expire). */
    if (count == 1 && c->release_count > 0) {
        int rc = flush_releases(c);
        if (rc < 0) {
            *conn_bad = 1;
            return rc;
        }
    }
    *conn_bad = 0;
    return f.rc;
}

/* Keeps several requests in READ on the QP: reads the answers that are there, posts each one's
 * READ chain into a slab region, and returns requests one per call in the order they finish. */
static int rc_complete(void *conn, dsc_source_req_t *out, uint32_t count, uint32_t *index,
                       int *conn_bad, uint64_t *wire) {
    rdma_conn_t *c = conn;
    if (c->tcp)
        return dsc__source_tcp.complete(c->tcp, out, count, index, conn_bad, wire);
    *conn_bad = 1;
    uint32_t spins = 0;
    for (;;) {
        if (c->done_count > 0)
            return return_finished(c, out, count, index, conn_bad, wire);
        const char *what = NULL;
        int rc = 0;
        if (c->reading_count > 0 && (rc = reap(c, out, count, &what)) > 0) {
            spins = 0;
            continue;
        }
        if (rc == 0 && !c->has_parked &&
            (c->reading_count == 0 || answer_waiting(c, spins % ANSWER_POLL_EVERY == 0))) {
            /* An answer is there; or nothing is in READ, and this blocks on the control
             * connection as a GET would. */
            rc = read_answer(c, out, count);
            if (rc == 0)
                continue;
            if (c->reading_count > 0 && rc != DSC_EPROTO && rc != DSC_ENOMEM)
                what = "the control connection failed mid-READ";
        } else if (rc == 0 && c->has_parked &&
                   (c->reading_count == 0 || spins % ANSWER_POLL_EVERY == 0)) {
            /* Holding nothing: wait for room. Else right after a completion (spins 0: this
             * connection freed room), then now and then (room freed by other connections). */
            if ((rc = place_parked(c, &what)) > 0)
                continue;
        }
        if (rc == 0 && (rc = wait_step(c, out, count, &spins, &what)) == 0)
            continue;
        if (what == NULL || atomic_load(&c->woken))
            return rc; /* a connection error, or the loader stops */
        return read_failed(c, out, count, index, conn_bad, wire, what, rc);
    }
}

/* REPORTs go over the control connection (or the TCP fallback); rc_complete drops their
 * answers. */
static int rc_report(void *conn, uint64_t id, const uint8_t *body, size_t len) {
    rdma_conn_t *c = conn;
    if (c->tcp)
        return dsc__source_tcp.report(c->tcp, id, body, len);
    if (!(dsc_conn_info(c->conn)->features & DSC_FEATURE_REPORT_HEDGE))
        len = dsc_report_req_strip_hedge(len); /* an older server: no straggler trailer */
    return dsc_conn_send(c->conn, DSC_OP_REPORT, id, body, len);
}

/* The figures of a REPORT answer: kept by the TCP fallback; over RDMA's control connection
 * rc_complete drops the answers (the verdict then lacks the servers' backing figures). */
static int rc_report_answer(void *conn, dsc_report_resp_t *out) {
    rdma_conn_t *c = conn;
    return c->tcp ? dsc__source_tcp.report_answer(c->tcp, out) : 0;
}

/* Scattered requests (MGET) go over the TCP fallback only: RDMA READs name consecutive runs. */
static uint32_t rc_scatter_max(void *conn) {
    rdma_conn_t *c = conn;
    return c->tcp ? dsc__source_tcp.scatter_max(c->tcp) : 0;
}

/* RANGE answers come over TCP only: a connection that fell back to it (RDMA moves whole
 * chunks). */
static int rc_range_ok(void *conn) {
    rdma_conn_t *c = conn;
    return c->tcp ? dsc__source_tcp.range_ok(c->tcp) : 0;
}

/* HINTs (read-ahead) go where REPORTs go; over RDMA's control connection rc_complete drops their
 * answers, so an UNSUPPORTED one is only seen over the TCP fallback. */
static int rc_hint(void *conn, uint64_t id, const uint8_t *body, size_t len) {
    rdma_conn_t *c = conn;
    if (c->tcp)
        return dsc__source_tcp.hint(c->tcp, id, body, len);
    return dsc_conn_send(c->conn, DSC_OP_HINT, id, body, len);
}
static int rc_hint_refused(void *conn) {
    rdma_conn_t *c = conn;
    return c->tcp ? dsc__source_tcp.hint_refused(c->tcp) : 0;
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
    int rc = dsc__rdma_client_open(DSC_TRANSPORT_RDMA, DSC_RDMA_SLAB_ALIGN, &log, &env.rdma);
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

#if DSC_HAVE_VERBS_H
/* Every request may be abandoned: over TCP (a fallback) source_tcp.c claims the answers; over
 * RDMA a request is claimed when its answer starts to be taken (a refusal, an inline answer) or
 * its READ completes (reap), and one abandoned before is dropped there, its slab region and
 * lease released as usual. */
static int rc_abandon_ok(void *conn) {
    (void)conn;
    return 1;
}
#endif

const dsc_source_ops_t dsc__source_rdma = {
    .name = "rdma",
    .max_outstanding = MAX_PENDING,
    .peer_bounded = 1,
    .endpoint_open = ep_open,
    .endpoint_close = ep_close,
    .manifest = ep_manifest,
    .open = rc_open,
    .submit = rc_submit,
    .complete = rc_complete,
    .report = rc_report,
    .report_answer = rc_report_answer,
    .hint = rc_hint,
    .hint_refused = rc_hint_refused,
    .abandon_ok = rc_abandon_ok,
    .scatter_max = rc_scatter_max,
    .range_ok = rc_range_ok,
    .idle_closed = rc_idle_closed,
    .wake = rc_wake,
    .close = rc_close,
};
