/* The server's RDMA transport (rdma.h), a reply table over TCP's (reply.h): arena registration
 * (overlapping pieces), RDMA_CONNECT (QP to RTR on the thread pool before the answer), RDMA_GET
 * descriptors under leases, the device's async events, and the fence (QP destroyed, then holds
 * dropped) on lease expiry, QP error or close. Over 800 lines on purpose: the lease, the fence and
 * the events that trigger it must be read together to see that no READ can reach freed memory. */
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

#if !DSC_HAVE_VERBS_H
#error "rdma.c needs rdma-core's headers: CMake builds rdma_stub.c in its place without them"
#endif

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
/* The server's send queue carries only memory-window binds and invalidations, posted in chains
 * of at most CHAIN_WR whose last WR is signalled and waited for before the next chain. */
#define SERVER_SEND_WR 256
#define CHAIN_WR 64
#define SERVER_CQE 256
#define MAX_WINDOWS 4096 /* windows per connection (leases x runs): beyond it, BUSY */
#define WAIT_S 2.0       /* a bind or invalidation not completed by then: the QP is fenced */
#define GID_CACHE 16     /* local addresses whose GID choice is kept (and was logged) */

typedef struct rconn rconn_t;

struct dsc_rdma_srv {
    dsc_rdma_srv_options_t opt;
    atomic_uint_fast64_t connections, connections_total, connect_failures, leases, lease_bytes,
        leases_total, leases_expired, releases_unknown, rdma_bytes, inline_bytes, busy, qp_errors,
        async_events, windows_bound, windows_invalidated, bind_ns, invalidate_ns, refused_limited,
        leases_revoked, windows_live;
    /* 1: READs are confined to leases by type-2 memory windows (the arena's regions grant no
     * remote access themselves); 0: the device has none (why in no_windows), the regions grant
     * REMOTE_READ and credentials limited to some datasets are refused RDMA. */
    int windows;
    char no_windows[256];
    /* 0: RDMA offered to new connections; else the event that stopped it (PORT_ERR or
     * DEVICE_FATAL) until PORT_ACTIVE. Written by the async-event loop, read by every loop. */
    atomic_int down_event;
    uint64_t registered_bytes;
    double register_seconds;
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
    uv_poll_t async_poll; /* the async-event fd, on loop 0 (rdma_watch) */
    int watching;
    /* Connections with a QP, for QP events (by qp_num): a connection is listed from its answer
     * until its fence, which unlists it before it destroys the QP. */
    pthread_mutex_t qp_lock;
    rconn_t *qp_list;
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
    out->windows = (uint64_t)r->windows;
    out->windows_bound = atomic_load(&r->windows_bound);
    out->windows_invalidated = atomic_load(&r->windows_invalidated);
    out->windows_live = atomic_load(&r->windows_live);
    out->bind_seconds = (double)atomic_load(&r->bind_ns) / 1e9;
    out->invalidate_seconds = (double)atomic_load(&r->invalidate_ns) / 1e9;
    out->refused_limited = atomic_load(&r->refused_limited);
    out->leases_revoked = atomic_load(&r->leases_revoked);
    out->registered_bytes = r->registered_bytes;
    out->register_seconds = r->register_seconds;
    out->regions = r->mr_count;
    out->region_overlap = r->mr_count > 1 ? r->overlap : 0;
}

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
        /* With windows the regions grant no remote access of their own: a READ reaches the
         * arena only through a window bound to a lease. */
        int access =
            IBV_ACCESS_LOCAL_WRITE | (rs->windows ? IBV_ACCESS_MW_BIND : IBV_ACCESS_REMOTE_READ);
        rs->mrs[i] = rs->dev.v.reg_mr(rs->dev.pd, rs->base + off, len, access);
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
    /* Type-2 memory windows, proven by allocating one: the capability the confinement needs. */
    if (rs->dev.mw_type2) {
        struct ibv_mw *mw = ibv_alloc_mw(rs->dev.pd, IBV_MW_TYPE_2);
        if (mw != NULL) {
            ibv_dealloc_mw(mw);
            rs->windows = 1;
        } else {
            snprintf(rs->no_windows, sizeof rs->no_windows,
                     "ibv_alloc_mw(IBV_MW_TYPE_2) failed on %s: %s", rs->dev.name, strerror(errno));
        }
    } else {
        snprintf(rs->no_windows, sizeof rs->no_windows, "%s", rs->dev.mw_why);
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
    if (rs->windows)
        LOG_INFO("rdma: READs confined to leased chunks: each lease binds type-2 memory windows "
                 "to its chunks on its connection's queue pair (IBV_WR_BIND_MW) and invalidates "
                 "them at release (IBV_WR_LOCAL_INV); the arena's regions grant no remote access");
    else
        LOG_WARN("rdma: no memory windows: %s. RDMA READs cannot be confined to leased chunks, so "
                 "RDMA_CONNECT is refused for credentials limited to some datasets (they stay on "
                 "TCP); unrestricted credentials read the arena under its region keys",
                 rs->no_windows);
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

static int rdma_offered(const dsc_server_t *srv) {
    return srv->opt.rdma != NULL;
}

/* ---- connections ------------------------------------------------------------------------- */

/* A memory window of a connection: free (on rc->free_wins) or bound to one run of a lease. */
typedef struct win {
    struct win *next;
    struct ibv_mw *mw;
    uint32_t rkey; /* of its current (or last) binding: ibv_inc_rkey of the one before */
} win_t;

typedef struct lease {
    struct lease *next;
    uint64_t id;
    uint64_t deadline_ms; /* uv_now of the loop */
    uint64_t bytes;
    dsc_hold_t hold;
    char dataset[DSC_MAX_NAME]; /* a reload that takes it from the credential ends the lease */
    uint32_t nwin;              /* windows bound for it (0 without windows) */
    win_t **wins;
} lease_t;

/* A connection's RDMA state, on the connection's loop. Created by RDMA_CONNECT with `connecting`
 * set (the QP is being made on the thread pool); from the answer on it has its QP and CQ, its
 * two handles (freed when both have closed) and is on rs->qp_list. */
struct rconn {
    uv_timer_t timer;       /* the leases' deadlines */
    uv_async_t event_async; /* a QP event for this connection (from the async-event loop) */
    int handles_open;
    int connecting;
    dsc_rdma_srv_t *rs;
    dsc_server_t *srv;
    dsc_reply_t *reply;
    struct ibv_qp *qp;
    struct ibv_cq *cq; /* the completions of its window binds and invalidations */
    /* On rs->qp_list (under rs->qp_lock); qp_ptr and qp_num do not change while listed. */
    rconn_t *list_prev, *list_next;
    int listed;
    const struct ibv_qp *qp_ptr;
    uint32_t qp_num;
    atomic_int qp_event;  /* the event to fence for (0: none), set by the async-event loop */
    lease_t *head, *tail; /* in grant order, so deadlines ascend */
    uint64_t next_id;
    uint64_t bytes;
    win_t *free_wins; /* allocated, not bound */
    uint32_t wins;    /* allocated in all (free + bound) */
    uint32_t bound;   /* of which bound to leases */
    uint64_t next_wr; /* wr_id of the next window WR */
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

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Posts `n` window WRs (binds or invalidations) as chains of at most CHAIN_WR, each chain's last
 * WR signalled, and waits for each chain's completion on the connection's CQ (RC completes a
 * QP's WRs in order, so the last one's success means every one before it succeeded). Returns 0,
 * or -1: a failed post, an error completion or none within WAIT_S. The QP is then not to be
 * trusted: the caller fences the connection. On the loop: microseconds on a NIC (no network
 * round trip: binds and invalidations are local to the server's HCA). */
static int post_wait(rconn_t *rc, struct ibv_send_wr *wrs, uint32_t n) {
    if (rc->qp == NULL || rc->cq == NULL)
        return -1;
    for (uint32_t at = 0; at < n; at += CHAIN_WR) {
        uint32_t k = n - at < CHAIN_WR ? n - at : CHAIN_WR;
        for (uint32_t i = 0; i < k; i++) {
            wrs[at + i].next = i + 1 < k ? &wrs[at + i + 1] : NULL;
            wrs[at + i].wr_id = ++rc->next_wr;
            wrs[at + i].send_flags = i + 1 < k ? 0 : IBV_SEND_SIGNALED;
        }
        uint64_t last = wrs[at + k - 1].wr_id;
        struct ibv_send_wr *bad = NULL;
        if (ibv_post_send(rc->qp, &wrs[at], &bad) != 0)
            return -1;
        double end = now_s() + WAIT_S;
        for (uint64_t spins = 0;; spins++) {
            struct ibv_wc wc[16];
            int got = ibv_poll_cq(rc->cq, 16, wc);
            if (got < 0)
                return -1;
            int done = 0;
            for (int i = 0; i < got; i++) {
                if (wc[i].status != IBV_WC_SUCCESS) {
                    LOG_WARN("rdma: memory-window %s on the queue pair of %s failed: %s",
                             wc[i].opcode == IBV_WC_BIND_MW ? "bind" : "invalidation",
                             rc->reply->peer, rc->rs->dev.v.wc_status_str(wc[i].status));
                    return -1;
                }
                done |= wc[i].wr_id == last;
            }
            if (done)
                break;
            if ((spins & 255) == 255) {
                if (now_s() > end) {
                    LOG_WARN("rdma: no completion of a memory-window operation on the queue pair "
                             "of %s within %.0f s",
                             rc->reply->peer, WAIT_S);
                    return -1;
                }
                sched_yield();
            }
        }
    }
    return 0;
}

/* Invalidates the windows of `count` leases (IBV_WR_LOCAL_INV, waited for) and puts them back on
 * the free list. Returns 0, or -1 (fence the connection: the windows stay with their leases and
 * are deallocated by the fence, after the QP is gone). */
static int leases_invalidate(rconn_t *rc, lease_t **leases, uint32_t count) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < count; i++)
        n += leases[i]->nwin;
    if (n == 0)
        return 0;
    struct ibv_send_wr small[8];
    struct ibv_send_wr *wrs = n <= 8 ? small : calloc(n, sizeof *wrs);
    if (wrs == NULL)
        return -1;
    memset(wrs, 0, n * sizeof *wrs);
    uint32_t k = 0;
    for (uint32_t i = 0; i < count; i++)
        for (uint32_t w = 0; w < leases[i]->nwin; w++) {
            wrs[k].opcode = IBV_WR_LOCAL_INV;
            wrs[k].invalidate_rkey = leases[i]->wins[w]->rkey;
            k++;
        }
    uint64_t t0 = now_ns();
    int rc_out = post_wait(rc, wrs, n);
    atomic_fetch_add(&rc->rs->invalidate_ns, now_ns() - t0);
    if (wrs != small)
        free(wrs);
    if (rc_out < 0)
        return -1;
    atomic_fetch_add(&rc->rs->windows_invalidated, n);
    atomic_fetch_sub(&rc->rs->windows_live, n);
    rc->bound -= n;
    for (uint32_t i = 0; i < count; i++) {
        for (uint32_t w = 0; w < leases[i]->nwin; w++) {
            leases[i]->wins[w]->next = rc->free_wins;
            rc->free_wins = leases[i]->wins[w];
        }
        leases[i]->nwin = 0;
    }
    return 0;
}

static void win_free(rconn_t *rc, win_t *w) {
    ibv_dealloc_mw(w->mw); /* a window still bound is invalidated with it */
    free(w);
    rc->wins--;
}

/* Drops a lease whose windows were invalidated (or whose QP is gone): its hold last. */
static void lease_drop(rconn_t *rc, lease_t *l) {
    for (uint32_t w = 0; w < l->nwin; w++) {
        win_free(rc, l->wins[w]);
        atomic_fetch_sub(&rc->rs->windows_live, 1);
        rc->bound--;
    }
    free(l->wins);
    dsc_hold_release(rc->srv->cat, &l->hold);
    rc->bytes -= l->bytes;
    atomic_fetch_sub(&rc->rs->leases, 1);
    atomic_fetch_sub(&rc->rs->lease_bytes, l->bytes);
    free(l);
}

/* The QP first (after destroy returns the device reads nothing more for it), then the windows,
 * then the holds. Unlisted before the destroy: ibv_destroy_qp waits for the acks of events of
 * this QP already read, and the async-event loop acks only after it let go of the list. */
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
    while (rc->free_wins) {
        win_t *w = rc->free_wins;
        rc->free_wins = w->next;
        win_free(rc, w);
    }
    if (rc->cq != NULL) {
        rc->rs->dev.v.destroy_cq(rc->cq);
        rc->cq = NULL;
    }
}

/* Fences, then closes the connection with one UNAVAILABLE frame (request id 0) once its answers
 * have gone out: QP destroyed, holds dropped, TCP closed, in that order. */
static void fence_and_close(rconn_t *rc, const char *message) {
    fence(rc);
    uv_timer_stop(&rc->timer);
    dsc__server_count_request(rc->srv, DSC_OP_RDMA_GET, DSC_STATUS_UNAVAILABLE);
    rc->reply->ops->fatal(rc->reply, DSC_OP_RDMA_GET, 0, DSC_STATUS_UNAVAILABLE, message);
}

/* Unlinks l from rc's lease list. */
static void lease_unlink(rconn_t *rc, lease_t *prev, lease_t *l) {
    if (prev)
        prev->next = l->next;
    else
        rc->head = l->next;
    if (rc->tail == l)
        rc->tail = prev;
    l->next = NULL;
}

/* Ends the given leases (already unlinked): windows invalidated, then holds dropped; a failed
 * invalidation fences the connection first (QP destroyed, then every hold dropped). */
static void leases_end(rconn_t *rc, lease_t **ended, uint32_t n, const char *why) {
    if (n == 0)
        return;
    if (leases_invalidate(rc, ended, n) < 0) {
        for (uint32_t i = 0; i < n; i++) { /* back on the list: the fence drops them */
            ended[i]->next = rc->head;
            rc->head = ended[i];
            if (rc->tail == NULL)
                rc->tail = ended[i];
        }
        char msg[160];
        snprintf(msg, sizeof msg, "RDMA memory-window invalidation failed (%s): connection fenced",
                 why);
        fence_and_close(rc, msg);
        return;
    }
    for (uint32_t i = 0; i < n; i++)
        lease_drop(rc, ended[i]);
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

static void rdma_watch(dsc_server_t *srv, void *loop) {
    dsc_rdma_srv_t *rs = srv->opt.rdma;
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

static void rdma_unwatch(dsc_server_t *srv) {
    dsc_rdma_srv_t *rs = srv->opt.rdma;
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
    uint32_t psn;      /* this side's send PSN (the QP goes to RTS for its window WRs) */
    struct ibv_cq *cq; /* the connection's CQ, made by connect_work */
    struct ibv_qp *qp; /* made by connect_work, NULL when it failed */
    int err;
} connect_job_t;

/* Thread pool: QP creation and INIT -> RTR (milliseconds on some NICs). Touches only the job
 * and the device, whose fields are read-only once the server runs. */
static void connect_work(uv_work_t *work) {
    connect_job_t *j = work->data;
    dsc_rdma_srv_t *rs = j->srv->opt.rdma;
    j->cq = rs->dev.v.create_cq(rs->dev.ctx, SERVER_CQE, NULL, NULL, 0);
    if (j->cq == NULL) {
        j->err = errno;
        return;
    }
    j->qp = dsc_rdma_qp_create(&rs->dev, j->cq, SERVER_SEND_WR, IBV_ACCESS_REMOTE_READ);
    if (j->qp == NULL) {
        j->err = errno;
        goto fail;
    }
    int rc = dsc_rdma_qp_rtr(&rs->dev, &j->gid, j->qp, &j->remote, j->mtu, j->rd);
    /* RTS: windows are bound and invalidated by WRs on this QP's send queue. */
    if (rc == 0 && rs->windows)
        rc = dsc_rdma_qp_rts(&rs->dev, j->qp, j->psn, j->rd);
    if (rc < 0) {
        rs->dev.v.destroy_qp(j->qp);
        j->qp = NULL;
        j->err = -rc;
        goto fail;
    }
    return;
fail:
    rs->dev.v.destroy_cq(j->cq);
    j->cq = NULL;
}

/* The QP and CQ of a job whose answer is not sent. */
static void job_discard(dsc_rdma_srv_t *rs, connect_job_t *j) {
    if (j->qp)
        dsc_rdma_qp_fence(&rs->dev, j->qp);
    if (j->cq)
        rs->dev.v.destroy_cq(j->cq);
    j->qp = NULL;
    j->cq = NULL;
}

/* 1 when the connection may not use RDMA on this server: READs cannot be confined (no windows)
 * and its credential is limited to some datasets. */
static int limited_without_windows(const dsc_rdma_srv_t *rs, const dsc_reply_t *reply) {
    return !rs->windows && reply->auth.state == DSC_AUTH_STATE_OK && reply->auth.cred != NULL &&
           dsc_cred_dataset_count(reply->auth.cred) > 0;
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
        /* rdma_close let go of rc: nothing of the connection is touched but its count. */
        job_discard(rs, j);
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
    if (limited_without_windows(rs, reply)) { /* narrowed by a reload meanwhile */
        job_discard(rs, j);
        free(rc);
        atomic_fetch_add(&rs->refused_limited, 1);
        connect_refuse(srv, reply, j->id, DSC_STATUS_UNAVAILABLE,
                       "RDMA_CONNECT refused: this server's device has no memory windows, so "
                       "READs cannot be confined to leased chunks, and this credential is limited "
                       "to some datasets; this connection stays on TCP");
        goto done;
    }
    dsc_rdma_connect_resp_t resp;
    memset(&resp, 0, sizeof resp);
    dsc_rdma_qp_describe(&rs->dev, &j->gid, j->qp, j->psn, j->rd, &resp.qp);
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
        job_discard(rs, j);
        free(rc);
        connect_refuse(srv, reply, j->id, DSC_STATUS_INTERNAL, "cannot encode RDMA_CONNECT");
        goto done;
    }
    rc->connecting = 0;
    rc->qp = j->qp;
    rc->cq = j->cq;
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

static const dsc_reply_ops_t rdma_reply_ops;

static void rdma_connect(dsc_server_t *srv, dsc_reply_t *reply, uint64_t id, const uint8_t *body,
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
    if (limited_without_windows(rs, reply)) {
        atomic_fetch_add(&rs->refused_limited, 1);
        char msg[512];
        snprintf(msg, sizeof msg,
                 "RDMA_CONNECT refused: %s, so RDMA READs cannot be confined to leased chunks, "
                 "and credential \"%s\" is limited to some datasets; this connection stays on TCP",
                 rs->no_windows, dsc_cred_name(reply->auth.cred));
        connect_refuse(srv, reply, id, DSC_STATUS_UNAVAILABLE, msg);
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
    j->psn = dsc_rdma_random_psn();
    reply->rdma = rc;
    if (reply->ops != &rdma_reply_ops) { /* from now on, till the connection is freed */
        reply->lower = reply->ops;
        reply->ops = &rdma_reply_ops;
    }
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

static int rdma_leases_release(dsc_reply_t *reply, const dsc_rdma_get_req_t *req) {
    rconn_t *rc = reply->rdma;
    if (rc == NULL || rc->connecting)
        return -1;
    lease_t *small[16];
    lease_t **ended = req->release_count <= 16 ? small : calloc(req->release_count, sizeof *ended);
    uint32_t n = 0;
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
        lease_unlink(rc, prev, l);
        if (ended != NULL) {
            ended[n++] = l;
        } else if (leases_invalidate(rc, &l, 1) == 0) { /* out of memory: one at a time */
            lease_drop(rc, l);
        } else {
            l->next = rc->head;
            rc->head = l;
            if (rc->tail == NULL)
                rc->tail = l;
            fence_and_close(rc, "RDMA memory-window invalidation failed: connection fenced");
            return 0;
        }
    }
    /* One chain of invalidations for every lease released, then their holds. */
    leases_end(rc, ended, n, "release");
    if (ended != small)
        free(ended);
    return 0;
}

/* 1 when one more lease of `bytes` would exceed the connection's bound (answer BUSY). */
static int over_bound(dsc_reply_t *reply, uint64_t bytes) {
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

/* get() of the RDMA table: a plain GET goes to the table below; an RDMA_GET gets descriptors under
 * a new lease, or the bytes inline when they are not in registered memory. */
static int rdma_reply_get(dsc_reply_t *reply, const dsc_get_answer_t *answer, dsc_hold_t *hold) {
    if (answer->opcode != DSC_OP_RDMA_GET)
        return reply->lower->get(reply, answer, hold);
    rconn_t *rc = reply->rdma;
    if (rc == NULL || rc->connecting)
        return DSC_EINVAL;
    if (over_bound(reply, answer->data_len))
        return DSC_EBUSY;
    dsc_rdma_srv_t *rs = rc->rs;
    uint32_t count = answer->count;
    int leased = hold->temp == NULL && rc->qp != NULL;
    dsc_rdma_desc_t small[16];
    dsc_rdma_desc_t *descs = count <= 16 ? small : malloc(count * sizeof *descs);
    if (descs == NULL)
        return DSC_ENOMEM;
    int piece = -1;
    /* Runs of consecutive chunks in one region: each gets one window (with windows). */
    uint32_t runs = 0;
    int run_piece[64];
    uint64_t run_lo[64], run_hi[64];
    uint32_t run_of_small[16];
    uint32_t *run_of = count <= 16 ? run_of_small : malloc(count * sizeof *run_of);
    if (run_of == NULL) {
        if (descs != small)
            free(descs);
        return DSC_ENOMEM;
    }
    for (uint32_t i = 0; i < count && leased; i++) {
        const dsc_chunk_entry_t *e = &answer->entries[i];
        const uint8_t *p = hold->data + e->offset;
        int prev = piece;
        piece = mr_index(rs, p, e->stored_len, piece);
        if (piece < 0) {
            leased = 0;
            break;
        }
        uint64_t lo = (uint64_t)(uintptr_t)p, hi = lo + e->stored_len;
        if (runs == 0 || piece != prev) {
            if (runs == sizeof run_lo / sizeof run_lo[0]) {
                leased = 0; /* a lease across more than 64 regions: answered inline */
                break;
            }
            run_piece[runs] = piece;
            run_lo[runs] = lo;
            run_hi[runs] = hi;
            runs++;
        } else {
            run_lo[runs - 1] = lo < run_lo[runs - 1] ? lo : run_lo[runs - 1];
            run_hi[runs - 1] = hi > run_hi[runs - 1] ? hi : run_hi[runs - 1];
        }
        run_of[i] = runs - 1;
        struct ibv_mr *mr = rs->mrs[piece];
        TSAN_RELEASE(mr);
        descs[i] = (dsc_rdma_desc_t){
            .addr = lo, .rkey = mr->rkey, .len = e->stored_len, .checksum = e->stored_checksum};
    }
    int rc_out = 0;
    win_t **wins = NULL;
    if (leased && rs->windows) {
        /* One window per run, bound on this connection's QP to exactly the run's bytes (the
         * leased chunks of one shard file), waited for before the answer names its rkey. */
        if (rc->bound + runs > MAX_WINDOWS) {
            atomic_fetch_add(&rs->busy, 1);
            rc_out = DSC_EBUSY;
            goto out;
        }
        wins = calloc(runs, sizeof *wins);
        struct ibv_send_wr wrs[64];
        memset(wrs, 0, sizeof wrs);
        for (uint32_t r = 0; wins != NULL && r < runs; r++) {
            win_t *w = rc->free_wins;
            if (w != NULL) {
                rc->free_wins = w->next;
            } else if ((w = calloc(1, sizeof *w)) != NULL) {
                w->mw = ibv_alloc_mw(rs->dev.pd, IBV_MW_TYPE_2);
                if (w->mw == NULL) {
                    free(w);
                    w = NULL;
                } else {
                    w->rkey = w->mw->rkey;
                    rc->wins++;
                }
            }
            if (w == NULL) {
                for (uint32_t k = 0; k < r; k++) {
                    wins[k]->next = rc->free_wins;
                    rc->free_wins = wins[k];
                }
                free(wins);
                wins = NULL;
                break;
            }
            wins[r] = w;
            wrs[r].opcode = IBV_WR_BIND_MW;
            wrs[r].bind_mw.mw = w->mw;
            wrs[r].bind_mw.rkey = ibv_inc_rkey(w->rkey);
            wrs[r].bind_mw.bind_info.mr = rs->mrs[run_piece[r]];
            wrs[r].bind_mw.bind_info.addr = run_lo[r];
            wrs[r].bind_mw.bind_info.length = run_hi[r] - run_lo[r];
            wrs[r].bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
        }
        if (wins == NULL) {
            rc_out = DSC_ENOMEM;
            goto out;
        }
        uint64_t t0 = now_ns();
        int bound = post_wait(rc, wrs, runs);
        atomic_fetch_add(&rs->bind_ns, now_ns() - t0);
        if (bound < 0) {
            /* The QP is broken: the windows go with the fence (QP first, then the windows). */
            for (uint32_t k = 0; k < runs; k++) {
                wins[k]->next = rc->free_wins;
                rc->free_wins = wins[k];
            }
            free(wins);
            if (descs != small)
                free(descs);
            if (run_of != run_of_small)
                free(run_of);
            fence_and_close(rc, "RDMA memory-window bind failed: connection fenced");
            return DSC_EINVAL;
        }
        for (uint32_t r = 0; r < runs; r++) {
            wins[r]->rkey = wrs[r].bind_mw.rkey;
            TSAN_RELEASE(wins[r]->mw);
        }
        for (uint32_t i = 0; i < count; i++)
            descs[i].rkey = wins[run_of[i]]->rkey;
        atomic_fetch_add(&rs->windows_bound, runs);
        atomic_fetch_add(&rs->windows_live, runs);
        rc->bound += runs;
    }
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
            if (wins != NULL) { /* never named: the windows are invalidated on the way back */
                lease_t tmp = {.nwin = runs, .wins = wins};
                lease_t *one = &tmp;
                if (leases_invalidate(rc, &one, 1) < 0) {
                    fence_and_close(rc, "RDMA memory-window invalidation failed: connection "
                                        "fenced");
                    for (uint32_t k = 0; k < runs; k++) { /* after the QP: safe to free */
                        win_free(rc, wins[k]);
                        atomic_fetch_sub(&rs->windows_live, 1);
                        rc->bound--;
                    }
                }
                free(wins);
            }
        } else {
            l->id = rc->next_id++;
            l->nwin = wins != NULL ? runs : 0;
            l->wins = wins;
            snprintf(l->dataset, sizeof l->dataset, "%s", answer->dataset ? answer->dataset : "");
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
            dsc_hold_release(rc->srv->cat, hold);
            atomic_fetch_add(&rs->inline_bytes, answer->data_len);
            reply->ops->frame(reply, DSC_OP_RDMA_GET, answer->request_id, DSC_STATUS_OK, body, pos);
            free(body);
        }
    }
out:
    if (descs != small)
        free(descs);
    if (run_of != run_of_small)
        free(run_of);
    return rc_out;
}

static void rdma_close(dsc_reply_t *reply) {
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

static void rdma_revoke(dsc_reply_t *reply, int removed) {
    rconn_t *rc = reply->rdma;
    if (rc == NULL || rc->connecting)
        return; /* connect_done checks the credential again before it answers */
    dsc_rdma_srv_t *rs = rc->rs;
    if (removed) {
        uint64_t n = 0;
        for (lease_t *l = rc->head; l; l = l->next)
            n++;
        atomic_fetch_add(&rs->leases_revoked, n);
        fence(rc); /* QP destroyed, windows deallocated, holds dropped; the caller closes */
        return;
    }
    if (limited_without_windows(rs, reply)) {
        uint64_t n = 0;
        for (lease_t *l = rc->head; l; l = l->next)
            n++;
        atomic_fetch_add(&rs->leases_revoked, n);
        LOG_WARN("rdma: the credential of %s is now limited to some datasets and this device has "
                 "no memory windows: fencing its RDMA connection",
                 reply->peer);
        fence_and_close(rc, "RDMA ended: the credential is now limited to some datasets and READs "
                            "cannot be confined on this server: reconnect (TCP)");
        return;
    }
    lease_t *small[16], **ended = small;
    uint32_t n = 0, cap = 16;
    for (lease_t *prev = NULL, *l = rc->head, *next; l; l = next) {
        next = l->next;
        if (dsc__authz_may_read(&reply->auth, l->dataset, strlen(l->dataset))) {
            prev = l;
            continue;
        }
        if (n == cap) {
            lease_t **grown = malloc(2 * cap * sizeof *grown);
            if (grown == NULL) {
                fence_and_close(rc, "RDMA ended: the credential lost a dataset (out of memory "
                                    "while revoking its leases)");
                if (ended != small)
                    free(ended);
                return;
            }
            memcpy(grown, ended, n * sizeof *grown);
            if (ended != small)
                free(ended);
            ended = grown;
            cap *= 2;
        }
        lease_unlink(rc, prev, l);
        ended[n++] = l;
    }
    if (n > 0) {
        atomic_fetch_add(&rs->leases_revoked, n);
        LOG_INFO("rdma: %u lease(s) of %s on datasets its credential no longer lists: windows "
                 "invalidated, holds dropped",
                 n, reply->peer);
        leases_end(rc, ended, n, "revocation");
    }
    if (ended != small)
        free(ended);
}

/* ---- the RDMA reply table, over the connection's own ------------------------------------- */

static void rdma_frame(dsc_reply_t *reply, uint8_t opcode, uint64_t request_id, uint32_t status,
                       const void *body, size_t len) {
    reply->lower->frame(reply, opcode, request_id, status, body, len);
}

static void rdma_fatal(dsc_reply_t *reply, uint8_t opcode, uint64_t request_id, uint32_t status,
                       const char *message) {
    reply->lower->fatal(reply, opcode, request_id, status, message);
}

static int rdma_frame_fill(dsc_reply_t *reply, uint8_t opcode, uint64_t request_id, size_t len,
                           void (*fill)(void *arg, uint8_t *body), void *arg) {
    return reply->lower->frame_fill(reply, opcode, request_id, len, fill, arg);
}

static void rdma_wait_begin(dsc_reply_t *reply, uint64_t reserve) {
    reply->lower->wait_begin(reply, reserve);
}

static void rdma_wait_end(dsc_reply_t *reply, uint64_t reserve) {
    reply->lower->wait_end(reply, reserve);
}

static int rdma_closing(const dsc_reply_t *reply) {
    return reply->lower->closing(reply);
}

static const dsc_reply_ops_t rdma_reply_ops = {
    .frame = rdma_frame,
    .fatal = rdma_fatal,
    .get = rdma_reply_get,
    .frame_fill = rdma_frame_fill,
    .wait_begin = rdma_wait_begin,
    .wait_end = rdma_wait_end,
    .closing = rdma_closing,
    .leases_release = rdma_leases_release,
    .close = rdma_close,
    .revoke = rdma_revoke,
};

const dsc_reply_layer_t dsc__rdma_layer = {
    .offered = rdma_offered,
    .connect = rdma_connect,
    .watch = rdma_watch,
    .unwatch = rdma_unwatch,
};
