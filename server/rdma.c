/* The server's RDMA transport (rdma.h): arena registration (overlapping pieces), RDMA_CONNECT (QP
 * to RTR on the thread pool before the answer), RDMA_GET descriptors under leases, the device's
 * async events, and the fence (QP destroyed, then holds dropped) on lease expiry, QP error or
 * close. Over 800 lines on purpose: the lease, the fence and the events that trigger it must be
 * read together to see that no READ can reach freed memory. */
#include "rdma.h"
#include "rdma_link.h"
#include "server_core.h"
#include "shard.h"
#include "srvlog.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* ThreadSanitizer cannot see that a READ is ordered after the lease was granted (the order goes
 * through the client process and a socket): granting a lease releases the memory region, and the
 * fake verbs library's responder acquires it before it copies (tests/fakeverbs). */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DSC_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define DSC_TSAN 1
#endif
#ifdef DSC_TSAN
void __tsan_release(void *addr);
#define TSAN_RELEASE(p) __tsan_release((void *)(p))
#else
#define TSAN_RELEASE(p) ((void)(p))
#endif

#define DEFAULT_TTL_MS 10000u
#define DEFAULT_MAX_LEASE_BYTES (UINT64_C(256) << 20)
#define PROBE_BYTES 4096u
#define SERVER_SEND_WR 4 /* the server only responds to READs: its send queue stays empty */
#define GID_CACHE 16     /* local addresses whose GID choice is kept (and was logged) */

int dsc_rdma_mode_parse(const char *text, dsc_rdma_mode_t *out) {
    if (text == NULL)
        return DSC_EINVAL;
    if (strcmp(text, "off") == 0)
        *out = DSC_RDMA_MODE_OFF;
    else if (strcmp(text, "auto") == 0)
        *out = DSC_RDMA_MODE_AUTO;
    else if (strcmp(text, "required") == 0)
        *out = DSC_RDMA_MODE_REQUIRED;
    else
        return DSC_EINVAL;
    return 0;
}

typedef struct rconn rconn_t;

struct dsc_rdma_srv {
    dsc_rdma_srv_options_t opt;
    atomic_uint_fast64_t connections, connections_total, connect_failures, leases, lease_bytes,
        leases_total, leases_expired, releases_unknown, rdma_bytes, inline_bytes, busy, qp_errors,
        async_events;
    /* 0: RDMA offered to new connections; else the event that stopped it (PORT_ERR or
     * DEVICE_FATAL) until PORT_ACTIVE. Written by the async-event loop, read by every loop. */
    atomic_int down_event;
    uint64_t registered_bytes;
    double register_seconds;
#if DSC_HAVE_VERBS_H
    dsc_rdma_dev_t dev;
    struct ibv_cq *cq;
    struct ibv_mr **mrs;
    uint32_t mr_count;
    /* Piece i covers [i * stride, i * stride + mrs[i]->length): pieces of `piece` bytes that
     * overlap by `overlap` = piece - stride, so a chunk of up to `overlap` bytes lies whole in
     * piece floor(offset / stride) (register_arena). One piece: stride = capacity. */
    uint64_t piece, stride, overlap;
    uint8_t *base;
    uint64_t capacity;
    dsc_store_t *store;
    uint8_t *probe;
    struct ibv_mr *probe_mr;
    uint64_t probe_sum;
    /* GID choice per local address of the TCP connections ("RDMA follows TCP"): chosen and
     * logged once per address, shared by the loops; forgotten on IBV_EVENT_GID_CHANGE. */
    pthread_mutex_t gid_lock;
    int gid_count;
    struct {
        char local[64];
        dsc_rdma_gid_choice_t choice;
    } gids[GID_CACHE];
    uv_poll_t async_poll; /* the async-event fd, on loop 0 (dsc__rdma_watch) */
    int watching;
    /* Connections with a QP, for QP events (by qp_num): a connection is listed from its answer
     * until its fence, which unlists it before it destroys the QP. */
    pthread_mutex_t qp_lock;
    rconn_t *qp_list;
#endif
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void dsc_rdma_srv_counters(const dsc_rdma_srv_t *rs, dsc_rdma_counters_t *out) {
    memset(out, 0, sizeof *out);
    if (rs == NULL)
        return;
    dsc_rdma_srv_t *r = (dsc_rdma_srv_t *)rs;
    out->connections = atomic_load(&r->connections);
    out->connections_total = atomic_load(&r->connections_total);
    out->connect_failures = atomic_load(&r->connect_failures);
    out->leases = atomic_load(&r->leases);
    out->lease_bytes = atomic_load(&r->lease_bytes);
    out->leases_total = atomic_load(&r->leases_total);
    out->leases_expired = atomic_load(&r->leases_expired);
    out->releases_unknown = atomic_load(&r->releases_unknown);
    out->rdma_bytes = atomic_load(&r->rdma_bytes);
    out->inline_bytes = atomic_load(&r->inline_bytes);
    out->busy = atomic_load(&r->busy);
    out->qp_errors = atomic_load(&r->qp_errors);
    out->async_events = atomic_load(&r->async_events);
    out->offered = atomic_load(&r->down_event) == 0;
    out->registered_bytes = r->registered_bytes;
    out->register_seconds = r->register_seconds;
#if DSC_HAVE_VERBS_H
    out->regions = r->mr_count;
    out->region_overlap = r->mr_count > 1 ? r->overlap : 0;
#endif
}

char *dsc_rdma_srv_metrics_text(const dsc_rdma_srv_t *rs) {
    dsc_rdma_counters_t c;
    dsc_rdma_srv_counters(rs, &c);
    size_t cap = 8192;
    char *t = malloc(cap);
    if (t == NULL)
        return NULL;
    snprintf(
        t, cap,
        "# HELP dscache_rdma_enabled 1 when this server offers RDMA (a device and a registered "
        "arena).\n# TYPE dscache_rdma_enabled gauge\ndscache_rdma_enabled %d\n"
        "# HELP dscache_rdma_connections Connections with an RDMA queue pair now.\n"
        "# TYPE dscache_rdma_connections gauge\ndscache_rdma_connections %llu\n"
        "# HELP dscache_rdma_connects_total RDMA_CONNECTs that succeeded.\n"
        "# TYPE dscache_rdma_connects_total counter\ndscache_rdma_connects_total %llu\n"
        "# HELP dscache_rdma_connect_failures_total RDMA_CONNECTs refused or failed.\n"
        "# TYPE dscache_rdma_connect_failures_total counter\n"
        "dscache_rdma_connect_failures_total %llu\n"
        "# HELP dscache_rdma_leases RDMA leases outstanding (shard holds awaiting release).\n"
        "# TYPE dscache_rdma_leases gauge\ndscache_rdma_leases %llu\n"
        "# HELP dscache_rdma_lease_bytes Chunk bytes under outstanding leases.\n"
        "# TYPE dscache_rdma_lease_bytes gauge\ndscache_rdma_lease_bytes %llu\n"
        "# HELP dscache_rdma_leases_granted_total Leases granted.\n"
        "# TYPE dscache_rdma_leases_granted_total counter\ndscache_rdma_leases_granted_total %llu\n"
        "# HELP dscache_rdma_leases_expired_total Leases not released within the TTL (each "
        "fenced its connection).\n# TYPE dscache_rdma_leases_expired_total counter\n"
        "dscache_rdma_leases_expired_total %llu\n"
        "# HELP dscache_rdma_releases_unknown_total Released lease ids the connection did not "
        "hold.\n# TYPE dscache_rdma_releases_unknown_total counter\n"
        "dscache_rdma_releases_unknown_total %llu\n"
        "# HELP dscache_rdma_busy_total RDMA_GETs refused BUSY (max_lease_bytes).\n"
        "# TYPE dscache_rdma_busy_total counter\ndscache_rdma_busy_total %llu\n"
        "# HELP dscache_transport_bytes_total Chunk bytes served, by transport (rdma: granted "
        "for READ; rdma_inline: RDMA_GET answered inline).\n"
        "# TYPE dscache_transport_bytes_total counter\n"
        "dscache_transport_bytes_total{transport=\"rdma\"} %llu\n"
        "dscache_transport_bytes_total{transport=\"rdma_inline\"} %llu\n"
        "# HELP dscache_rdma_registered_bytes Arena bytes registered for remote READ.\n"
        "# TYPE dscache_rdma_registered_bytes gauge\ndscache_rdma_registered_bytes %llu\n"
        "# HELP dscache_rdma_regions Memory regions the arena is registered in (overlapping "
        "pieces when the device's max_mr_size splits it).\n"
        "# TYPE dscache_rdma_regions gauge\ndscache_rdma_regions %llu\n"
        "# HELP dscache_rdma_offered 1 while new connections are offered RDMA (0: RDMA off, or a "
        "port error or device failure since the last PORT_ACTIVE).\n"
        "# TYPE dscache_rdma_offered gauge\ndscache_rdma_offered %d\n"
        "# HELP dscache_rdma_qp_errors_total Connections fenced because the device reported an "
        "error on their queue pair (QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR).\n"
        "# TYPE dscache_rdma_qp_errors_total counter\ndscache_rdma_qp_errors_total %llu\n"
        "# HELP dscache_rdma_async_events_total Asynchronous events read from the RDMA device.\n"
        "# TYPE dscache_rdma_async_events_total counter\ndscache_rdma_async_events_total %llu\n",
        rs != NULL, (unsigned long long)c.connections, (unsigned long long)c.connections_total,
        (unsigned long long)c.connect_failures, (unsigned long long)c.leases,
        (unsigned long long)c.lease_bytes, (unsigned long long)c.leases_total,
        (unsigned long long)c.leases_expired, (unsigned long long)c.releases_unknown,
        (unsigned long long)c.busy, (unsigned long long)c.rdma_bytes,
        (unsigned long long)c.inline_bytes, (unsigned long long)c.registered_bytes,
        (unsigned long long)c.regions, rs != NULL && c.offered, (unsigned long long)c.qp_errors,
        (unsigned long long)c.async_events);
    return t;
}

#if !DSC_HAVE_VERBS_H

int dsc_rdma_srv_create(const dsc_rdma_srv_options_t *options, dsc_store_t *store,
                        dsc_rdma_srv_t **out) {
    (void)store;
    *out = NULL;
    if (options->mode == DSC_RDMA_MODE_OFF)
        return 0;
    if (options->mode == DSC_RDMA_MODE_REQUIRED) {
        LOG_ERROR("--rdma required: built without rdma-core headers (infiniband/verbs.h)");
        return DSC_EUNAVAIL;
    }
    LOG_INFO("rdma: off (built without rdma-core headers); serving over TCP only");
    return 0;
}
void dsc_rdma_srv_destroy(dsc_rdma_srv_t *rs) {
    free(rs);
}
void dsc__rdma_on_connect(dsc_server_t *srv, dsc_reply_t *reply, uint64_t id, const uint8_t *body,
                          size_t len) {
    (void)body;
    (void)len;
    dsc__server_count_request(srv, DSC_OP_RDMA_CONNECT, DSC_STATUS_UNSUPPORTED);
    reply->ops->frame(reply, DSC_OP_RDMA_CONNECT, id, DSC_STATUS_UNSUPPORTED, "no RDMA", 7);
}
int dsc__rdma_release(dsc_server_t *srv, dsc_reply_t *reply, const dsc_rdma_get_req_t *req) {
    (void)srv;
    (void)reply;
    (void)req;
    return -1;
}
int dsc__rdma_over_bound(dsc_reply_t *reply, uint64_t bytes) {
    (void)reply;
    (void)bytes;
    return 0;
}
int dsc__rdma_reply_get(dsc_server_t *srv, dsc_reply_t *reply, const dsc_get_answer_t *answer,
                        dsc_hold_t *hold) {
    (void)srv;
    (void)reply;
    (void)answer;
    (void)hold;
    return DSC_EINVAL;
}
void dsc__rdma_on_close(dsc_server_t *srv, dsc_reply_t *reply) {
    (void)srv;
    (void)reply;
}
void dsc__rdma_watch(dsc_rdma_srv_t *rs, void *loop) {
    (void)rs;
    (void)loop;
}
void dsc__rdma_unwatch(dsc_rdma_srv_t *rs) {
    (void)rs;
}
int dsc__rdma_offered(const dsc_rdma_srv_t *rs) {
    (void)rs;
    return 0;
}

#else

static void srv_free(dsc_rdma_srv_t *rs) {
    if (rs->probe_mr)
        rs->dev.v.dereg_mr(rs->probe_mr);
    free(rs->probe);
    for (uint32_t i = 0; i < rs->mr_count; i++)
        if (rs->mrs[i])
            rs->dev.v.dereg_mr(rs->mrs[i]);
    free(rs->mrs);
    if (rs->store)
        dsc_store_set_pinned(rs->store, 0);
    if (rs->cq)
        rs->dev.v.destroy_cq(rs->cq);
    dsc_rdma_dev_close(&rs->dev);
    pthread_mutex_destroy(&rs->qp_lock);
    free(rs);
}

/* Registers the arena in pieces of at most max_mr_size (2 MiB multiples). Several pieces overlap
 * by the largest chunk a shard can hold (DSC_CHUNK_MAX_RAW: a stored chunk is never larger than
 * its raw size), or by half a piece when pieces are smaller than twice that, so that every chunk
 * up to the overlap lies whole inside one piece and is served by READ wherever it sits. */
static int register_arena(dsc_rdma_srv_t *rs, char *why, size_t why_cap) {
    uint64_t piece = rs->dev.max_mr_size ? rs->dev.max_mr_size : rs->capacity;
    piece -= piece % DSC_STORE_ALIGN;
    uint32_t n = 1;
    if (piece == 0 || piece >= rs->capacity) {
        piece = rs->stride = rs->capacity;
        rs->overlap = 0;
    } else {
        uint64_t overlap = piece / 2 < DSC_CHUNK_MAX_RAW ? piece / 2 : DSC_CHUNK_MAX_RAW;
        overlap -= overlap % DSC_STORE_PAGE;
        rs->overlap = overlap;
        rs->stride = piece - overlap;
        n = (uint32_t)(1 + (rs->capacity - piece + rs->stride - 1) / rs->stride);
    }
    rs->piece = piece;
    rs->mrs = calloc(n, sizeof *rs->mrs);
    if (rs->mrs == NULL) {
        snprintf(why, why_cap, "out of memory");
        return DSC_ENOMEM;
    }
    dsc_store_set_pinned(rs->store, 1); /* before any page is pinned */
    double t0 = now_s();
    for (uint32_t i = 0; i < n; i++) {
        uint64_t off = (uint64_t)i * rs->stride;
        uint64_t len = rs->capacity - off < piece ? rs->capacity - off : piece;
        rs->mrs[i] = rs->dev.v.reg_mr(rs->dev.pd, rs->base + off, len,
                                      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
        if (rs->mrs[i] == NULL) {
            snprintf(why, why_cap,
                     "cannot register %llu bytes of the arena for RDMA: %s (raise "
                     "RLIMIT_MEMLOCK to the store size or grant CAP_IPC_LOCK; 'dscache doctor "
                     "--pin-bytes SIZE' checks it)",
                     (unsigned long long)len, strerror(errno));
            return DSC_EUNAVAIL;
        }
        rs->mr_count = i + 1;
    }
    rs->register_seconds = now_s() - t0;
    rs->registered_bytes = rs->capacity;
    return 0;
}

int dsc_rdma_srv_create(const dsc_rdma_srv_options_t *options, dsc_store_t *store,
                        dsc_rdma_srv_t **out) {
    *out = NULL;
    if (options->mode == DSC_RDMA_MODE_OFF)
        return 0;
    dsc_rdma_srv_t *rs = calloc(1, sizeof *rs);
    if (rs == NULL)
        return DSC_ENOMEM;
    pthread_mutex_init(&rs->qp_lock, NULL);
    rs->gid_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    rs->opt = *options;
    if (rs->opt.lease_ttl_ms == 0)
        rs->opt.lease_ttl_ms = DEFAULT_TTL_MS;
    if (rs->opt.max_lease_bytes == 0)
        rs->opt.max_lease_bytes = DEFAULT_MAX_LEASE_BYTES;
    char why[DSC_VERBS_REASON_MAX + 128] = "";
    int rc = dsc_rdma_dev_open(&rs->dev, why, sizeof why);
    if (rc < 0) {
        pthread_mutex_destroy(&rs->qp_lock);
        free(rs);
        goto unavailable;
    }
    rs->cq = rs->dev.v.create_cq(rs->dev.ctx, 16, NULL, NULL, 0);
    if (rs->cq == NULL) {
        snprintf(why, sizeof why, "cannot create a completion queue on %s", rs->dev.name);
        srv_free(rs);
        goto unavailable;
    }
    rs->store = store;
    rs->base = dsc_store_base(store);
    rs->capacity = dsc_store_capacity(store);
    if ((rc = register_arena(rs, why, sizeof why)) < 0) {
        srv_free(rs);
        goto unavailable;
    }
    rs->probe = aligned_alloc(PROBE_BYTES, PROBE_BYTES);
    if (rs->probe != NULL) {
        if (getrandom(rs->probe, PROBE_BYTES, 0) != (ssize_t)PROBE_BYTES)
            for (uint32_t i = 0; i < PROBE_BYTES; i++)
                rs->probe[i] = (uint8_t)(i * 131u + 7u);
        rs->probe_sum = dsc_checksum(rs->probe, PROBE_BYTES);
        rs->probe_mr = rs->dev.v.reg_mr(rs->dev.pd, rs->probe, PROBE_BYTES,
                                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    }
    if (rs->probe_mr == NULL) {
        snprintf(why, sizeof why, "cannot register the probe page");
        srv_free(rs);
        goto unavailable;
    }
    char gid[128] = "LID";
    if (rs->dev.gid_index >= 0 && getenv(DSC_RDMA_ENV_GID_INDEX) != NULL) {
        char text[64];
        snprintf(gid, sizeof gid, "GID index %d %s from %s", rs->dev.gid_index,
                 dsc_verbs_gid_format(rs->dev.gid, text, sizeof text), DSC_RDMA_ENV_GID_INDEX);
    } else if (rs->dev.gid_index >= 0) {
        snprintf(gid, sizeof gid, "GID per connection: the one on its TCP subnet");
    }
    char pieces[128] = "";
    if (rs->mr_count > 1)
        snprintf(pieces, sizeof pieces,
                 "; regions of %llu bytes (max_mr_size) overlapping by %llu bytes, so chunks of up "
                 "to that size never straddle two",
                 (unsigned long long)rs->piece, (unsigned long long)rs->overlap);
    double gib = (double)rs->capacity / (double)(UINT64_C(1) << 30);
    LOG_INFO("rdma: on: device %s port %u (%s, MTU %u, %s), arena %llu bytes registered "
             "for remote READ in %u region(s) in %.3f ms (%.3f ms per GiB; the registered arena is "
             "pinned resident), lease TTL %u ms%s",
             rs->dev.name, rs->dev.port,
             rs->dev.link_layer == DSC_RDMA_LINK_ETHERNET ? "RoCE" : "InfiniBand",
             dsc_verbs_mtu_bytes(rs->dev.mtu), gid, (unsigned long long)rs->capacity, rs->mr_count,
             rs->register_seconds * 1e3, gib > 0 ? rs->register_seconds * 1e3 / gib : 0.0,
             rs->opt.lease_ttl_ms, pieces);
    *out = rs;
    return 0;
unavailable:
    if (options->mode == DSC_RDMA_MODE_REQUIRED) {
        LOG_ERROR("--rdma required but RDMA is unavailable: %s", why);
        return DSC_EUNAVAIL;
    }
    LOG_INFO("rdma: off (%s); serving over TCP only", why);
    return 0;
}

void dsc_rdma_srv_destroy(dsc_rdma_srv_t *rs) {
    if (rs != NULL)
        srv_free(rs);
}

int dsc__rdma_offered(const dsc_rdma_srv_t *rs) {
    return rs != NULL;
}

/* ---- connections ------------------------------------------------------------------------- */

typedef struct lease {
    struct lease *next;
    uint64_t id;
    uint64_t deadline_ms; /* uv_now of the loop */
    uint64_t bytes;
    dsc_hold_t hold;
} lease_t;

/* A connection's RDMA state, on the connection's loop. Created by RDMA_CONNECT with `connecting`
 * set (the QP is being made on the thread pool); from the answer on it has its QP, its two
 * handles (freed when both have closed) and is on rs->qp_list. */
struct rconn {
    uv_timer_t timer;       /* the leases' deadlines */
    uv_async_t event_async; /* a QP event for this connection (from the async-event loop) */
    int handles_open;
    int connecting;
    dsc_rdma_srv_t *rs;
    dsc_server_t *srv;
    dsc_reply_t *reply;
    struct ibv_qp *qp;
    /* On rs->qp_list (under rs->qp_lock); qp_ptr and qp_num do not change while listed. */
    rconn_t *list_prev, *list_next;
    int listed;
    const struct ibv_qp *qp_ptr;
    uint32_t qp_num;
    atomic_int qp_event;  /* the event to fence for (0: none), set by the async-event loop */
    lease_t *head, *tail; /* in grant order, so deadlines ascend */
    uint64_t next_id;
    uint64_t bytes;
};

static void list_add(rconn_t *rc) {
    dsc_rdma_srv_t *rs = rc->rs;
    pthread_mutex_lock(&rs->qp_lock);
    rc->qp_ptr = rc->qp;
    rc->qp_num = rc->qp->qp_num;
    rc->list_prev = NULL;
    rc->list_next = rs->qp_list;
    if (rs->qp_list)
        rs->qp_list->list_prev = rc;
    rs->qp_list = rc;
    rc->listed = 1;
    pthread_mutex_unlock(&rs->qp_lock);
}

static void list_remove(rconn_t *rc) {
    dsc_rdma_srv_t *rs = rc->rs;
    pthread_mutex_lock(&rs->qp_lock);
    if (rc->listed) {
        if (rc->list_prev)
            rc->list_prev->list_next = rc->list_next;
        else
            rs->qp_list = rc->list_next;
        if (rc->list_next)
            rc->list_next->list_prev = rc->list_prev;
        rc->listed = 0;
    }
    pthread_mutex_unlock(&rs->qp_lock);
}

static void lease_drop(rconn_t *rc, lease_t *l) {
    dsc_hold_release(rc->srv->cat, &l->hold);
    rc->bytes -= l->bytes;
    atomic_fetch_sub(&rc->rs->leases, 1);
    atomic_fetch_sub(&rc->rs->lease_bytes, l->bytes);
    free(l);
}

/* The QP first (after destroy returns the device reads nothing more for it), then the holds.
 * Unlisted before the destroy: ibv_destroy_qp waits for the acks of events of this QP already
 * read, and the async-event loop acks only after it let go of the list. */
static void fence(rconn_t *rc) {
    if (rc->qp != NULL) {
        list_remove(rc);
        dsc_rdma_qp_fence(&rc->rs->dev, rc->qp);
        rc->qp = NULL;
        atomic_fetch_sub(&rc->rs->connections, 1);
    }
    while (rc->head) {
        lease_t *l = rc->head;
        rc->head = l->next;
        lease_drop(rc, l);
    }
    rc->tail = NULL;
}

/* Fences, then closes the connection with one UNAVAILABLE frame (request id 0) once its answers
 * have gone out: QP destroyed, holds dropped, TCP closed, in that order. */
static void fence_and_close(rconn_t *rc, const char *message) {
    fence(rc);
    uv_timer_stop(&rc->timer);
    dsc__server_count_request(rc->srv, DSC_OP_RDMA_GET, DSC_STATUS_UNAVAILABLE);
    rc->reply->ops->fatal(rc->reply, DSC_OP_RDMA_GET, 0, DSC_STATUS_UNAVAILABLE, message);
}

static void on_handle_closed(uv_handle_t *h) {
    rconn_t *rc = h->data;
    if (--rc->handles_open == 0)
        free(rc);
}

static void on_lease_timer(uv_timer_t *t) {
    rconn_t *rc = t->data;
    if (rc->head == NULL || rc->head->deadline_ms > uv_now(t->loop))
        return;
    uint64_t expired = 0;
    for (lease_t *l = rc->head; l; l = l->next)
        if (l->deadline_ms <= uv_now(t->loop))
            expired++;
    atomic_fetch_add(&rc->rs->leases_expired, expired);
    LOG_WARN("rdma: %llu lease(s) not released within %u ms: fencing the connection (queue "
             "pair destroyed, then its holds dropped)",
             (unsigned long long)expired, rc->rs->opt.lease_ttl_ms);
    fence_and_close(rc, "RDMA lease expired: connection fenced");
}

static const char *event_name(int type) {
    switch (type) {
    case IBV_EVENT_QP_FATAL:
        return "IBV_EVENT_QP_FATAL";
    case IBV_EVENT_QP_REQ_ERR:
        return "IBV_EVENT_QP_REQ_ERR";
    case IBV_EVENT_QP_ACCESS_ERR:
        return "IBV_EVENT_QP_ACCESS_ERR";
    case IBV_EVENT_PORT_ERR:
        return "IBV_EVENT_PORT_ERR";
    case IBV_EVENT_PORT_ACTIVE:
        return "IBV_EVENT_PORT_ACTIVE";
    case IBV_EVENT_DEVICE_FATAL:
        return "IBV_EVENT_DEVICE_FATAL";
    case IBV_EVENT_GID_CHANGE:
        return "IBV_EVENT_GID_CHANGE";
    case IBV_EVENT_LID_CHANGE:
        return "IBV_EVENT_LID_CHANGE";
    case IBV_EVENT_PKEY_CHANGE:
        return "IBV_EVENT_PKEY_CHANGE";
    case IBV_EVENT_SM_CHANGE:
        return "IBV_EVENT_SM_CHANGE";
    case IBV_EVENT_CLIENT_REREGISTER:
        return "IBV_EVENT_CLIENT_REREGISTER";
    default:
        return "an RDMA async event";
    }
}

/* On the connection's loop: the device reported an error on its QP (the event is acked). */
static void on_qp_event(uv_async_t *a) {
    rconn_t *rc = a->data;
    int type = atomic_exchange(&rc->qp_event, 0);
    if (type == 0 || rc->qp == NULL)
        return;
    atomic_fetch_add(&rc->rs->qp_errors, 1);
    LOG_WARN("rdma: %s on the queue pair of %s (QP %u): fencing the connection (queue pair "
             "destroyed, then its holds dropped, then closed)",
             event_name(type), rc->reply->peer, rc->qp_num);
    char message[128];
    snprintf(message, sizeof message, "RDMA queue pair error (%s): connection fenced",
             event_name(type));
    fence_and_close(rc, message);
}

/* ---- async events (loop 0) ----------------------------------------------------------------- */

/* A QP event: hands it to the QP's connection, found by qp_num on the list. The event is not
 * acked yet, so its QP still exists (ibv_destroy_qp waits for the ack) and qp_num can be read;
 * a QP already fenced is no longer listed and the event is dropped. */
static void qp_event(dsc_rdma_srv_t *rs, const struct ibv_async_event *ev) {
    const struct ibv_qp *qp = ev->element.qp;
    uint32_t qp_num = qp ? qp->qp_num : 0;
    int found = 0;
    pthread_mutex_lock(&rs->qp_lock);
    for (rconn_t *rc = rs->qp_list; rc; rc = rc->list_next)
        if (rc->qp_num == qp_num && rc->qp_ptr == qp) {
            int expected = 0;
            atomic_compare_exchange_strong(&rc->qp_event, &expected, (int)ev->event_type);
            uv_async_send(&rc->event_async); /* listed: its handle is open */
            found = 1;
            break;
        }
    pthread_mutex_unlock(&rs->qp_lock);
    if (!found)
        LOG_DEBUG("rdma: %s on queue pair %u, which is already fenced", event_name(ev->event_type),
                  qp_num);
}

static void handle_event(dsc_rdma_srv_t *rs, const struct ibv_async_event *ev) {
    int type = (int)ev->event_type;
    switch (ev->event_type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
        qp_event(rs, ev);
        break;
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_DEVICE_FATAL: {
        if (ev->event_type == IBV_EVENT_PORT_ERR && ev->element.port_num != rs->dev.port)
            break;
        int was = 0;
        if (atomic_compare_exchange_strong(&rs->down_event, &was, type))
            LOG_WARN("rdma: %s on %s port %u: RDMA_CONNECT answered UNAVAILABLE (new connections "
                     "stay on TCP) until the port is active again; connections with a queue pair "
                     "keep it",
                     event_name(type), rs->dev.name, rs->dev.port);
        break;
    }
    case IBV_EVENT_PORT_ACTIVE:
        if (ev->element.port_num == rs->dev.port && atomic_exchange(&rs->down_event, 0) != 0)
            LOG_INFO("rdma: IBV_EVENT_PORT_ACTIVE on %s port %u: offering RDMA to new connections "
                     "again",
                     rs->dev.name, rs->dev.port);
        break;
    case IBV_EVENT_GID_CHANGE:
        if (ev->element.port_num == rs->dev.port) {
            /* New connections choose their GID again (and log it); QPs keep theirs. */
            pthread_mutex_lock(&rs->gid_lock);
            int known = rs->gid_count;
            rs->gid_count = 0;
            pthread_mutex_unlock(&rs->gid_lock);
            LOG_INFO("rdma: %s on %s port %u: the GID choice of %d local address(es) is "
                     "forgotten, new connections choose again; queue pairs keep theirs",
                     event_name(type), rs->dev.name, rs->dev.port, known);
        }
        break;
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_SM_CHANGE:
    case IBV_EVENT_CLIENT_REREGISTER:
        if (ev->element.port_num == rs->dev.port)
            LOG_INFO("rdma: %s on %s port %u", event_name(type), rs->dev.name, rs->dev.port);
        break;
    default:
        LOG_DEBUG("rdma: async event %d on %s", type, rs->dev.name);
        break;
    }
}

static void on_async_fd(uv_poll_t *poll, int status, int events) {
    (void)events;
    dsc_rdma_srv_t *rs = poll->data;
    if (status < 0) {
        LOG_ERROR("rdma: the device's async-event fd failed (%s): QP errors are now noticed only "
                  "when a connection closes or its leases expire",
                  uv_strerror(status));
        uv_poll_stop(poll);
        return;
    }
    struct ibv_async_event ev;
    while (rs->dev.v.get_async_event(rs->dev.ctx, &ev) == 0) {
        atomic_fetch_add(&rs->async_events, 1);
        handle_event(rs, &ev);
        rs->dev.v.ack_async_event(&ev); /* after the QP lookup, before any fence can wait on it */
    }
}

void dsc__rdma_watch(dsc_rdma_srv_t *rs, void *loop) {
    if (rs == NULL || rs->watching)
        return;
    int fd = rs->dev.ctx->async_fd;
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 ||
        uv_poll_init((uv_loop_t *)loop, &rs->async_poll, fd) != 0) {
        LOG_WARN("rdma: cannot watch the async-event fd of %s: QP errors are noticed only when a "
                 "connection closes or its leases expire",
                 rs->dev.name);
        return;
    }
    rs->async_poll.data = rs;
    rs->watching = 1;
    uv_poll_start(&rs->async_poll, UV_READABLE, on_async_fd);
}

void dsc__rdma_unwatch(dsc_rdma_srv_t *rs) {
    if (rs == NULL || !rs->watching)
        return;
    rs->watching = 0;
    uv_close((uv_handle_t *)&rs->async_poll, NULL); /* rs outlives the loop (rdma.h) */
}

/* ---- RDMA_CONNECT ------------------------------------------------------------------------ */

static void connect_refuse(dsc_server_t *srv, dsc_reply_t *reply, uint64_t id, uint32_t status,
                           const char *msg) {
    dsc_rdma_srv_t *rs = srv->opt.rdma;
    if (rs)
        atomic_fetch_add(&rs->connect_failures, 1);
    dsc__server_count_request(srv, DSC_OP_RDMA_CONNECT, status);
    reply->ops->frame(reply, DSC_OP_RDMA_CONNECT, id, status, msg, strlen(msg));
}

/* The GID for a connection: the one on its TCP connection's subnet, chosen (and logged) once per
 * local address; a server has few. Returns 0, or an error with why. */
static int conn_gid(dsc_rdma_srv_t *rs, dsc_reply_t *reply, dsc_rdma_gid_choice_t *out, char *why,
                    size_t why_cap) {
    struct sockaddr_storage local;
    int len = (int)sizeof local;
    memset(&local, 0, sizeof local);
    if (reply->tcp == NULL ||
        uv_tcp_getsockname(reply->tcp, (struct sockaddr *)&local, &len) != 0) {
        snprintf(why, why_cap, "RDMA_CONNECT: this connection's local address is unknown");
        return DSC_EUNAVAIL;
    }
    char key[64];
    dsc_rdma_addr_format((struct sockaddr *)&local, key, sizeof key);
    pthread_mutex_lock(&rs->gid_lock);
    for (int i = 0; i < rs->gid_count; i++)
        if (strcmp(rs->gids[i].local, key) == 0) {
            *out = rs->gids[i].choice;
            pthread_mutex_unlock(&rs->gid_lock);
            return 0;
        }
    pthread_mutex_unlock(&rs->gid_lock);
    int rc = dsc_rdma_gid_choose(&rs->dev, &local, out, why, why_cap);
    if (rc < 0)
        return rc;
    int fresh = 1;
    pthread_mutex_lock(&rs->gid_lock);
    for (int i = 0; i < rs->gid_count && fresh; i++)
        fresh = strcmp(rs->gids[i].local, key) != 0; /* another loop was first */
    if (fresh && rs->gid_count < GID_CACHE) {
        snprintf(rs->gids[rs->gid_count].local, sizeof rs->gids[0].local, "%s", key);
        rs->gids[rs->gid_count++].choice = *out;
    }
    pthread_mutex_unlock(&rs->gid_lock);
    if (fresh && out->off_subnet)
        LOG_WARN("rdma: connections to %s use %s: READs may fail", key, out->text);
    else if (fresh)
        LOG_INFO("rdma: connections to %s use %s", key, out->text);
    return 0;
}

/* An RDMA_CONNECT between the loop and the thread pool. */
typedef struct connect_job {
    uv_work_t work;
    dsc_server_t *srv;
    dsc_reply_t *reply; /* kept alive by wait_begin until connect_done's wait_end */
    rconn_t *rc;
    uint64_t id;
    dsc_rdma_qp_info_t remote; /* the client's QP (its device name is not kept) */
    dsc_rdma_gid_choice_t gid; /* this side's, chosen on the loop (conn_gid) */
    uint16_t version;
    uint8_t mtu, rd;
    struct ibv_qp *qp; /* made by connect_work, NULL when it failed */
    int err;
} connect_job_t;

/* Thread pool: QP creation and INIT -> RTR (milliseconds on some NICs). Touches only the job
 * and the device, whose fields are read-only once the server runs. */
static void connect_work(uv_work_t *work) {
    connect_job_t *j = work->data;
    dsc_rdma_srv_t *rs = j->srv->opt.rdma;
    j->qp = dsc_rdma_qp_create(&rs->dev, rs->cq, SERVER_SEND_WR, IBV_ACCESS_REMOTE_READ);
    if (j->qp == NULL) {
        j->err = errno;
        return;
    }
    int rc = dsc_rdma_qp_rtr(&rs->dev, &j->gid, j->qp, &j->remote, j->mtu, j->rd);
    if (rc < 0) {
        rs->dev.v.destroy_qp(j->qp);
        j->qp = NULL;
        j->err = -rc;
    }
}

/* Loop: answers, or (the connection closed meanwhile) only destroys the QP. */
static void connect_done(uv_work_t *work, int status) {
    (void)status;
    connect_job_t *j = work->data;
    dsc_server_t *srv = j->srv;
    dsc_reply_t *reply = j->reply;
    dsc_rdma_srv_t *rs = srv->opt.rdma;
    rconn_t *rc = j->rc;
    if (reply->ops->closing(reply)) {
        /* dsc__rdma_on_close let go of rc: nothing of the connection is touched but its count. */
        if (j->qp)
            dsc_rdma_qp_fence(&rs->dev, j->qp);
        atomic_fetch_add(&rs->connect_failures, 1);
        free(rc);
        goto done;
    }
    reply->rdma = NULL;
    if (j->qp == NULL) {
        free(rc);
        LOG_DEBUG("rdma: RDMA_CONNECT from %s: cannot bring a queue pair to RTR: %s", reply->peer,
                  strerror(j->err ? j->err : EINVAL));
        connect_refuse(srv, reply, j->id, DSC_STATUS_UNAVAILABLE,
                       "RDMA_CONNECT: cannot bring a queue pair to RTR towards this client");
        goto done;
    }
    dsc_rdma_connect_resp_t resp;
    memset(&resp, 0, sizeof resp);
    dsc_rdma_qp_describe(&rs->dev, &j->gid, j->qp, dsc_rdma_random_psn(), j->rd, &resp.qp);
    resp.qp.version = j->version;
    resp.qp.mtu = j->mtu;
    resp.lease_ttl_ms = rs->opt.lease_ttl_ms;
    resp.max_lease_bytes = rs->opt.max_lease_bytes;
    resp.probe = (dsc_rdma_desc_t){.addr = (uint64_t)(uintptr_t)rs->probe,
                                   .rkey = rs->probe_mr->rkey,
                                   .len = PROBE_BYTES,
                                   .checksum = rs->probe_sum};
    uint8_t out[256];
    int n = dsc_rdma_connect_resp_encode(&resp, out, sizeof out);
    if (n < 0) {
        dsc_rdma_qp_fence(&rs->dev, j->qp);
        free(rc);
        connect_refuse(srv, reply, j->id, DSC_STATUS_INTERNAL, "cannot encode RDMA_CONNECT");
        goto done;
    }
    rc->connecting = 0;
    rc->qp = j->qp;
    uv_timer_init(reply->loop, &rc->timer);
    rc->timer.data = rc;
    uv_async_init(reply->loop, &rc->event_async, on_qp_event);
    rc->event_async.data = rc;
    rc->handles_open = 2;
    uint64_t every = rs->opt.lease_ttl_ms / 4 ? rs->opt.lease_ttl_ms / 4 : 1;
    uv_timer_start(&rc->timer, on_lease_timer, every, every);
    list_add(rc);
    reply->rdma = rc;
    TSAN_RELEASE(rs->probe_mr);
    atomic_fetch_add(&rs->connections, 1);
    atomic_fetch_add(&rs->connections_total, 1);
    dsc__server_count_request(srv, DSC_OP_RDMA_CONNECT, DSC_STATUS_OK);
    reply->ops->frame(reply, DSC_OP_RDMA_CONNECT, j->id, DSC_STATUS_OK, out, (size_t)n);
done:
    free(j);
    reply->ops->wait_end(reply, 0); /* last: the connection may be freed by it */
}

void dsc__rdma_on_connect(dsc_server_t *srv, dsc_reply_t *reply, uint64_t id, const uint8_t *body,
                          size_t len) {
    dsc_rdma_srv_t *rs = srv->opt.rdma;
    if (rs == NULL) {
        connect_refuse(srv, reply, id, DSC_STATUS_UNSUPPORTED, "RDMA is off on this server");
        return;
    }
    if (reply->rdma != NULL) {
        connect_refuse(srv, reply, id, DSC_STATUS_BAD_REQUEST,
                       "a second RDMA_CONNECT on one connection");
        return;
    }
    dsc_rdma_qp_info_t req;
    if (dsc_rdma_connect_req_decode(body, len, &req) < 0) {
        connect_refuse(srv, reply, id, DSC_STATUS_BAD_REQUEST, "malformed RDMA_CONNECT body");
        return;
    }
    int down = atomic_load(&rs->down_event);
    if (down != 0) {
        char msg[256];
        snprintf(msg, sizeof msg,
                 "RDMA is unavailable on this server for now: %s on %s port %u (until the port "
                 "is active again); this connection stays on TCP",
                 event_name(down), rs->dev.name, rs->dev.port);
        connect_refuse(srv, reply, id, DSC_STATUS_UNAVAILABLE, msg);
        return;
    }
    uint16_t version;
    uint8_t mtu, rd;
    if (dsc_rdma_connect_negotiate(&req, rs->dev.link_layer, rs->dev.mtu, rs->dev.max_rd_atomic,
                                   &version, &mtu, &rd) < 0) {
        connect_refuse(srv, reply, id, DSC_STATUS_UNAVAILABLE,
                       "RDMA_CONNECT: link layer or values this server cannot use");
        return;
    }
    dsc_rdma_gid_choice_t gid;
    char why[DSC_VERBS_REASON_MAX];
    if (conn_gid(rs, reply, &gid, why, sizeof why) < 0) {
        LOG_WARN("rdma: RDMA_CONNECT from %s refused: %s", reply->peer, why);
        connect_refuse(srv, reply, id, DSC_STATUS_UNAVAILABLE, why);
        return;
    }
    rconn_t *rc = calloc(1, sizeof *rc);
    connect_job_t *j = calloc(1, sizeof *j);
    if (rc == NULL || j == NULL) {
        free(rc);
        free(j);
        connect_refuse(srv, reply, id, DSC_STATUS_INTERNAL, "out of memory");
        return;
    }
    rc->rs = rs;
    rc->srv = srv;
    rc->reply = reply;
    rc->next_id = 1;
    rc->connecting = 1; /* a second RDMA_CONNECT meanwhile is refused, RDMA_GETs too */
    atomic_init(&rc->qp_event, 0);
    j->work.data = j;
    j->srv = srv;
    j->reply = reply;
    j->rc = rc;
    j->id = id;
    j->remote = req;
    j->remote.device = (dsc_str_t){NULL, 0}; /* points into the request buffer */
    j->gid = gid;
    j->version = version;
    j->mtu = mtu;
    j->rd = rd;
    reply->rdma = rc;
    reply->ops->wait_begin(reply, 0);
    if (uv_queue_work(reply->loop, &j->work, connect_work, connect_done) != 0) {
        reply->rdma = NULL;
        free(rc);
        free(j);
        connect_refuse(srv, reply, id, DSC_STATUS_INTERNAL, "cannot queue the queue pair set-up");
        reply->ops->wait_end(reply, 0);
    }
}

/* ---- RDMA_GET ---------------------------------------------------------------------------- */

int dsc__rdma_release(dsc_server_t *srv, dsc_reply_t *reply, const dsc_rdma_get_req_t *req) {
    (void)srv;
    rconn_t *rc = reply->rdma;
    if (rc == NULL || rc->connecting)
        return -1;
    for (uint16_t i = 0; i < req->release_count; i++) {
        uint64_t id = dsc_rdma_get_req_release(req, i);
        lease_t *prev = NULL, *l = rc->head;
        while (l && l->id != id) {
            prev = l;
            l = l->next;
        }
        if (l == NULL) {
            atomic_fetch_add(&rc->rs->releases_unknown, 1);
            continue;
        }
        if (prev)
            prev->next = l->next;
        else
            rc->head = l->next;
        if (rc->tail == l)
            rc->tail = prev;
        lease_drop(rc, l);
    }
    return 0;
}

int dsc__rdma_over_bound(dsc_reply_t *reply, uint64_t bytes) {
    rconn_t *rc = reply->rdma;
    if (rc == NULL || rc->connecting || rc->head == NULL)
        return 0; /* one lease always fits */
    if (rc->bytes + bytes > rc->rs->opt.max_lease_bytes) {
        atomic_fetch_add(&rc->rs->busy, 1);
        return 1;
    }
    return 0;
}

/* The index of a memory region holding [p, p + len) whole, or -1 (outside the arena, or longer
 * than the pieces' overlap and across a boundary). `hint` (the previous chunk's region, or -1)
 * is taken when it fits, so that adjacent chunks share an rkey and the client can merge them. */
static int mr_index(const dsc_rdma_srv_t *rs, const uint8_t *p, uint64_t len, int hint) {
    if (p < rs->base || len == 0 || (uint64_t)(p - rs->base) > rs->capacity - len)
        return -1;
    uint64_t off = (uint64_t)(p - rs->base);
    if (hint >= 0 && (uint32_t)hint < rs->mr_count) {
        uint64_t start = (uint64_t)hint * rs->stride;
        if (off >= start && off + len <= start + rs->mrs[hint]->length)
            return hint;
    }
    /* The piece that starts last at or before off also ends last among those: if it does not
     * hold the chunk, none does. */
    uint64_t i = off / rs->stride;
    if (i >= rs->mr_count)
        i = rs->mr_count - 1;
    uint64_t start = i * rs->stride;
    return off + len <= start + rs->mrs[i]->length ? (int)i : -1;
}

int dsc__rdma_reply_get(dsc_server_t *srv, dsc_reply_t *reply, const dsc_get_answer_t *answer,
                        dsc_hold_t *hold) {
    rconn_t *rc = reply->rdma;
    if (rc == NULL || rc->connecting)
        return DSC_EINVAL;
    dsc_rdma_srv_t *rs = rc->rs;
    uint32_t count = answer->count;
    int leased = hold->temp == NULL && rc->qp != NULL;
    dsc_rdma_desc_t small[16];
    dsc_rdma_desc_t *descs = count <= 16 ? small : malloc(count * sizeof *descs);
    if (descs == NULL)
        return DSC_ENOMEM;
    int piece = -1;
    for (uint32_t i = 0; i < count && leased; i++) {
        const dsc_chunk_entry_t *e = &answer->entries[i];
        const uint8_t *p = hold->data + e->offset;
        piece = mr_index(rs, p, e->stored_len, piece);
        if (piece < 0) {
            leased = 0;
            break;
        }
        struct ibv_mr *mr = rs->mrs[piece];
        TSAN_RELEASE(mr);
        descs[i] = (dsc_rdma_desc_t){.addr = (uint64_t)(uintptr_t)p,
                                     .rkey = mr->rkey,
                                     .len = e->stored_len,
                                     .checksum = e->stored_checksum};
    }
    int rc_out = 0;
    if (leased) {
        lease_t *l = calloc(1, sizeof *l);
        size_t cap = DSC_RDMA_GET_RESP_SIZE(count);
        uint8_t *body = malloc(cap);
        int n = (l && body) ? dsc_rdma_get_resp_encode(rc->next_id, rs->opt.lease_ttl_ms,
                                                       answer->entries, descs, count, body, cap)
                            : DSC_ENOMEM;
        if (n < 0) {
            free(l);
            free(body);
            rc_out = n;
        } else {
            l->id = rc->next_id++;
            l->deadline_ms = uv_now(rc->timer.loop) + rs->opt.lease_ttl_ms;
            l->bytes = answer->data_len;
            l->hold = *hold;
            memset(hold, 0, sizeof *hold);
            if (rc->tail)
                rc->tail->next = l;
            else
                rc->head = l;
            rc->tail = l;
            rc->bytes += l->bytes;
            atomic_fetch_add(&rs->leases, 1);
            atomic_fetch_add(&rs->leases_total, 1);
            atomic_fetch_add(&rs->lease_bytes, l->bytes);
            atomic_fetch_add(&rs->rdma_bytes, l->bytes);
            reply->ops->frame(reply, DSC_OP_RDMA_GET, answer->request_id, DSC_STATUS_OK, body,
                              (size_t)n);
            free(body);
        }
    } else {
        /* Not in registered memory (a read-through buffer): the bytes go inline. */
        size_t prefix = DSC_RDMA_GET_RESP_INLINE_PREFIX(count);
        if (prefix + answer->data_len > DSC_FRAME_MAX_BODY) {
            if (descs != small)
                free(descs);
            return DSC_ETOOLARGE;
        }
        uint8_t *body = malloc(prefix + answer->data_len);
        int n = body ? dsc_rdma_get_resp_inline_prefix_encode(answer->entries, count, body, prefix)
                     : DSC_ENOMEM;
        if (n < 0) {
            free(body);
            rc_out = n;
        } else {
            size_t pos = (size_t)n;
            for (uint32_t i = 0; i < count; i++) {
                memcpy(body + pos, hold->data + answer->entries[i].offset,
                       answer->entries[i].stored_len);
                pos += answer->entries[i].stored_len;
            }
            dsc_hold_release(srv->cat, hold);
            atomic_fetch_add(&rs->inline_bytes, answer->data_len);
            reply->ops->frame(reply, DSC_OP_RDMA_GET, answer->request_id, DSC_STATUS_OK, body, pos);
            free(body);
        }
    }
    if (descs != small)
        free(descs);
    return rc_out;
}

void dsc__rdma_on_close(dsc_server_t *srv, dsc_reply_t *reply) {
    (void)srv;
    rconn_t *rc = reply->rdma;
    if (rc == NULL)
        return;
    reply->rdma = NULL;
    if (rc->connecting)
        return; /* connect_done sees the connection closing: it destroys the QP and frees rc */
    fence(rc);
    uv_timer_stop(&rc->timer);
    uv_close((uv_handle_t *)&rc->timer, on_handle_closed);
    uv_close((uv_handle_t *)&rc->event_async, on_handle_closed);
}

#endif
