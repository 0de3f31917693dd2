/* Test-only fake libibverbs: one Ethernet (RoCE v2) device whose RC queue pairs move RDMA READs
 * between processes through a helper "NIC" thread per process that serves them over a UNIX
 * socket from the process's real registered memory (so ASan sees a READ of freed memory).
 * Over 800 lines on purpose: one test-only stand-in for the whole verbs surface dscache uses. */
#include "fakeverbs.h"

#include <infiniband/verbs.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* ThreadSanitizer: a READ is ordered after the owner handed out the rkey only through another
 * process; an owner that calls __tsan_release on its struct ibv_mr when it grants access (as
 * dscached does per lease) makes the copy below acquire it. */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FV_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define FV_TSAN 1
#endif
#ifdef FV_TSAN
void __tsan_acquire(void *addr);
#define FV_TSAN_ACQUIRE(p) __tsan_acquire((void *)(p))
#else
#define FV_TSAN_ACQUIRE(p) ((void)(p))
#endif

/* verbs.h turns these two names into inline wrappers; the library exports the functions. */
#undef ibv_query_port
#undef ibv_reg_mr

#define FV_EXPORT __attribute__((visibility("default")))
#define FV_GID_TABLE 4
#define FV_MAX_MSG (1u << 30)
#define FV_MAX_CONNS 256 /* requester threads of every process that READs from this one */
#define FV_MAX_PEERS 64
#define FV_MAGIC 0x52564b46u /* "FKVR" */
#define FV_UNREACHABLE_MS 20 /* scaled-down transport retry timeout */

/* ---- Objects ------------------------------------------------------------------------------ */

typedef struct fv_async fv_async_t;

typedef struct fv_context {
    struct ibv_context ctx; /* first: handed out as struct ibv_context * */
    int async_w;            /* write end of the async event pipe: one byte per queued event */
    fv_async_t *ev_head, *ev_tail; /* async events not read yet (g_async_lock) */
    pthread_t port_ctl;            /* DSC_FAKEVERBS_PORT_CTL watcher (port_ctl_running) */
    int port_ctl_running;
    int port_ctl_stop; /* __atomic */
    char port_ctl_path[256];
    char port_ctl_first[64]; /* the file's first word when the context opened */
    enum ibv_mtu active_mtu;
    enum ibv_port_state port_state;
    uint64_t max_mr_size;
    int no_loopback_gid; /* DSC_FAKEVERBS_GID_LOOPBACK=off: GID 2 is an empty entry */
    int no_mw;           /* DSC_FAKEVERBS_MW=off: no memory windows (a device without them) */
} fv_context_t;

typedef struct fv_channel {
    struct ibv_comp_channel ch;
    int write_fd;
} fv_channel_t;

typedef struct fv_cq {
    struct ibv_cq cq;
    pthread_mutex_t lock;
    struct ibv_wc *ring;
    int cap, head, count;
    int armed, overrun;
    unsigned events_sent, events_acked;
    int pushing; /* completions being pushed outside g_lock (g_lock): destroy waits for 0 */
} fv_cq_t;

typedef struct fv_mr {
    struct ibv_mr mr;
    int access;
    struct fv_mr *next;
} fv_mr_t;

/* A type-2 memory window (ibv_alloc_mw): free until an IBV_WR_BIND_MW posted on a QP binds it to
 * a range of a region with MW_BIND access; then only that QP serves READs under its rkey, within
 * that range, until an IBV_WR_LOCAL_INV of the rkey (or the QP's destruction, or dealloc) frees
 * it again. The rkey's low 8 bits are the consumer's key (ibv_inc_rkey), so an old rkey of a
 * window bound again does not match. */
typedef struct fv_mw {
    struct ibv_mw mw;
    int bound;
    uint32_t bound_rkey; /* the rkey of the current binding */
    uint32_t qpn;        /* the QP it is bound through (type 2A/2B: the only one it serves) */
    uint64_t addr, length;
    int access;
    struct fv_mw *next;
} fv_mw_t;

typedef struct fv_qp {
    struct ibv_qp qp;
    struct ibv_qp_cap cap;
    int sq_sig_all;
    uint8_t port;
    int access;
    enum ibv_mtu path_mtu;
    uint32_t dest_qpn;
    uint32_t peer_pid; /* 0: the destination GID names no fake NIC (unreachable) */
    uint32_t outstanding;
    uint32_t signaled_outstanding; /* READ requests: signalled WRs posted, not completed */
    uint32_t events_reported; /* async events of this QP read by the application (g_async_lock) */
    struct fv_qp *next;
} fv_qp_t;

/* A posted WR, queued for the requester thread: a READ, or a local bind / invalidation of a
 * memory window (executed in order with the QP's other WRs, as a NIC does). */
typedef struct fv_work {
    enum ibv_wr_opcode opcode;
    fv_mw_t *mw;       /* BIND_MW: the window, then the binding below */
    uint32_t new_rkey; /* BIND_MW: its new rkey; LOCAL_INV: the rkey to invalidate */
    struct ibv_mr *bind_mr;
    uint64_t bind_addr, bind_length;
    int bind_access;
    uint32_t qpn;
    uint64_t wr_id;
    int signaled;
    int num_sge;
    struct ibv_sge sge[16];
    uint64_t raddr;
    uint32_t rkey;
    uint64_t len;
    struct fv_work *next;
} fv_work_t;

/* NIC-to-NIC messages. */
typedef struct fv_req {
    uint32_t magic, dst_qpn, src_qpn, src_pid, path_mtu, rkey;
    uint64_t raddr, len;
} fv_req_t;
typedef struct fv_resp {
    uint32_t magic, status; /* enum ibv_wc_status */
    uint64_t len;
} fv_resp_t;

/* ---- Process state ------------------------------------------------------------------------ */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER; /* objects below */
static pthread_cond_t g_work_cond = PTHREAD_COND_INITIALIZER;
/* Signalled when a CQ's pushing count drops (ibv_destroy_cq waits for it). */
static pthread_cond_t g_push_cond = PTHREAD_COND_INITIALIZER;
static fv_mr_t *g_mrs;
static fv_qp_t *g_qps;
static fv_mw_t *g_mws;
static fv_work_t *g_work_head, *g_work_tail;
/* Requester threads, as a NIC's independent QPs: each takes the oldest WR of a QP none of the
 * others is running one of (a QP's WRs run in order; a READ from a stopped process holds only
 * its own QP, not every READ of this process). g_running[i]: the QP thread i runs (0: idle). */
#define FV_REQUESTERS 8
static uint32_t g_running[FV_REQUESTERS];
static uint32_t g_next_qpn = 0x100, g_next_key = 0x1000, g_next_handle = 1;
static uint64_t g_registered;
static int g_started;
static pid_t g_pid;
static int g_listen_fd = -1;
static char g_sock_dir[200]; /* DSC_FAKEVERBS_DIR, read once when the NIC starts */

/* Fault counters (g_lock). */
static long g_drop_cqe, g_fail_post, g_kill_on_read, g_qp_delay_ms;
static long g_cqe_seen, g_post_seen, g_reads_served;

/* Statistics (g_lock), appended to $DSC_FAKEVERBS_STATS at exit (see fakeverbs.h). */
static long g_reg_mr_calls, g_binds, g_invalidates;
static uint32_t g_max_signaled_outstanding;

static struct ibv_device g_device;
static pthread_once_t g_device_once = PTHREAD_ONCE_INIT;

static int fv_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
static int fv_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
static struct ibv_mw *fv_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
static int fv_dealloc_mw(struct ibv_mw *mw);

static uint64_t env_u64(const char *name, uint64_t dflt) {
    const char *v = getenv(name);
    if (v == NULL || *v == '\0')
        return dflt;
    char *end = NULL;
    unsigned long long x = strtoull(v, &end, 0);
    return end != NULL && *end == '\0' ? (uint64_t)x : dflt;
}

static int parse_faults(const char *spec) {
    long drop = 0, fail = 0, kill_n = 0, qp_delay = 0;
    if (spec != NULL && *spec != '\0') {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", spec);
        char *save = NULL;
        for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            char *eq = strchr(tok, '=');
            if (eq == NULL)
                return -1;
            *eq = '\0';
            long n = strtol(eq + 1, NULL, 10);
            if (n < 1)
                return -1;
            if (strcmp(tok, "drop_cqe") == 0)
                drop = n;
            else if (strcmp(tok, "fail_post") == 0)
                fail = n;
            else if (strcmp(tok, "kill_on_read") == 0)
                kill_n = n;
            else if (strcmp(tok, "qp_delay_ms") == 0)
                qp_delay = n;
            else
                return -1;
        }
    }
    pthread_mutex_lock(&g_lock);
    g_drop_cqe = drop, g_fail_post = fail, g_kill_on_read = kill_n, g_qp_delay_ms = qp_delay;
    g_cqe_seen = g_post_seen = g_reads_served = 0;
    pthread_mutex_unlock(&g_lock);
    return 0;
}

FV_EXPORT int fakeverbs_set_faults(const char *spec) {
    return parse_faults(spec);
}

static int socket_address(uint32_t pid, struct sockaddr_un *addr, socklen_t *len) {
    memset(addr, 0, sizeof *addr);
    addr->sun_family = AF_UNIX;
    const char *dir = g_sock_dir;
    int n;
    if (*dir != '\0') {
        n = snprintf(addr->sun_path, sizeof addr->sun_path, "%s/fv-%u.sock", dir, pid);
        if (n < 0 || (size_t)n >= sizeof addr->sun_path)
            return -1;
        *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)n + 1);
    } else {
        /* Abstract namespace: vanishes with the process, nothing to clean up. */
        n = snprintf(addr->sun_path + 1, sizeof addr->sun_path - 1, "dsc-fakeverbs-%u", pid);
        *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    }
    return 0;
}

static int read_full(int fd, void *buf, size_t len) {
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t len) {
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* ---- Completions ---------------------------------------------------------------------------*/

static void cq_push(fv_cq_t *cq, const struct ibv_wc *wc) {
    pthread_mutex_lock(&g_lock);
    long seen = ++g_cqe_seen;
    int drop = g_drop_cqe != 0 && seen == g_drop_cqe;
    pthread_mutex_unlock(&g_lock);
    if (drop)
        return;
    pthread_mutex_lock(&cq->lock);
    if (cq->count == cq->cap) {
        cq->overrun = 1; /* a real CQ overrun: the entry is lost */
        pthread_mutex_unlock(&cq->lock);
        return;
    }
    cq->ring[(cq->head + cq->count) % cq->cap] = *wc;
    cq->count++;
    int notify = cq->armed && cq->cq.channel != NULL;
    if (notify) {
        cq->armed = 0;
        cq->events_sent++;
    }
    pthread_mutex_unlock(&cq->lock);
    if (notify) {
        fv_channel_t *ch = (fv_channel_t *)cq->cq.channel;
        struct ibv_cq *ptr = &cq->cq;
        if (write(ch->write_fd, &ptr, sizeof ptr) != (ssize_t)sizeof ptr) {
            /* The pipe holds thousands of events; a full one means nobody reads them. */
        }
    }
}

static int fv_poll_cq(struct ibv_cq *ibcq, int num, struct ibv_wc *wc) {
    fv_cq_t *cq = (fv_cq_t *)ibcq;
    pthread_mutex_lock(&cq->lock);
    int n = 0;
    while (n < num && cq->count > 0) {
        wc[n++] = cq->ring[cq->head];
        cq->head = (cq->head + 1) % cq->cap;
        cq->count--;
    }
    pthread_mutex_unlock(&cq->lock);
    return n;
}

static int fv_req_notify_cq(struct ibv_cq *ibcq, int solicited_only) {
    (void)solicited_only;
    fv_cq_t *cq = (fv_cq_t *)ibcq;
    pthread_mutex_lock(&cq->lock);
    cq->armed = 1;
    pthread_mutex_unlock(&cq->lock);
    return 0;
}

/* Async events as libibverbs delivers them: queued per context, the pipe only signals (one byte
 * per event). An event read by ibv_get_async_event and not yet acknowledged keeps its QP alive:
 * ibv_destroy_qp waits for the ack, exactly as rdma-core's does (so an application that destroys
 * a QP before acking its event hangs here as it would on a NIC); events not read yet are dropped
 * when their QP is destroyed, as the kernel drops them. */
struct fv_async {
    struct ibv_async_event ev;
    fv_async_t *next;
};
static pthread_mutex_t g_async_lock = PTHREAD_MUTEX_INITIALIZER;

static int is_qp_event(enum ibv_event_type type) {
    switch (type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
        return 1;
    default:
        return 0;
    }
}

static void async_push(fv_context_t *ctx, const struct ibv_async_event *ev) {
    fv_async_t *a = calloc(1, sizeof *a);
    if (a == NULL)
        return; /* lost, as an overflowing event queue loses them */
    a->ev = *ev;
    pthread_mutex_lock(&g_async_lock);
    if (ctx->ev_tail)
        ctx->ev_tail->next = a;
    else
        ctx->ev_head = a;
    ctx->ev_tail = a;
    pthread_mutex_unlock(&g_async_lock);
    char one = 1;
    if (write(ctx->async_w, &one, 1) != 1) {
        /* A full pipe: nobody drains the async fd; the event stays queued. */
    }
}

static void async_event(fv_context_t *ctx, enum ibv_event_type type, struct ibv_qp *qp) {
    struct ibv_async_event ev;
    memset(&ev, 0, sizeof ev);
    ev.event_type = type;
    ev.element.qp = qp;
    async_push(ctx, &ev);
}

static void async_port_event(fv_context_t *ctx, enum ibv_event_type type) {
    struct ibv_async_event ev;
    memset(&ev, 0, sizeof ev);
    ev.event_type = type;
    ev.element.port_num = 1;
    async_push(ctx, &ev);
}

/* The next queued event, or NULL (dropped with its QP). A QP event counts as reported. */
static fv_async_t *async_pop(fv_context_t *ctx) {
    pthread_mutex_lock(&g_async_lock);
    fv_async_t *a = ctx->ev_head;
    if (a != NULL) {
        ctx->ev_head = a->next;
        if (ctx->ev_head == NULL)
            ctx->ev_tail = NULL;
        if (is_qp_event(a->ev.event_type) && a->ev.element.qp != NULL)
            ((fv_qp_t *)a->ev.element.qp)->events_reported++;
    }
    pthread_mutex_unlock(&g_async_lock);
    return a;
}

/* Called by ibv_destroy_qp once the QP serves nothing: drops its unread events, then waits until
 * every event of it that was read has been acknowledged. */
static void async_forget_qp(fv_qp_t *q) {
    fv_context_t *ctx = (fv_context_t *)q->qp.context;
    pthread_mutex_lock(&g_async_lock);
    fv_async_t **pp = &ctx->ev_head, *last = NULL;
    while (*pp) {
        fv_async_t *a = *pp;
        if (is_qp_event(a->ev.event_type) && a->ev.element.qp == &q->qp) {
            *pp = a->next;
            free(a);
        } else {
            last = a;
            pp = &a->next;
        }
    }
    ctx->ev_tail = last;
    uint32_t reported = q->events_reported;
    pthread_mutex_unlock(&g_async_lock);
    pthread_mutex_lock(&q->qp.mutex);
    while (q->qp.events_completed != reported)
        pthread_cond_wait(&q->qp.cond, &q->qp.mutex);
    pthread_mutex_unlock(&q->qp.mutex);
}

/* DSC_FAKEVERBS_PORT_CTL=FILE: a thread per context reads FILE every 10 ms and raises an event
 * each time its first word changes: "down" IBV_EVENT_PORT_ERR, "active" IBV_EVENT_PORT_ACTIVE,
 * "gid" IBV_EVENT_GID_CHANGE, "fatal" IBV_EVENT_DEVICE_FATAL (write "gid 2", "gid 3", ... for
 * more than one GID change). Only the event is raised: ibv_query_port keeps its answer. */
static void port_ctl_read(const char *path, char *word, size_t cap) {
    word[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    if (fgets(word, (int)cap, f) == NULL)
        word[0] = '\0';
    fclose(f);
    word[strcspn(word, "\r\n")] = '\0';
}

static void *port_ctl_main(void *arg) {
    fv_context_t *c = arg;
    char last[64], now[64];
    snprintf(last, sizeof last, "%s", c->port_ctl_first); /* read before the thread started */
    while (!__atomic_load_n(&c->port_ctl_stop, __ATOMIC_ACQUIRE)) {
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
        port_ctl_read(c->port_ctl_path, now, sizeof now);
        if (strcmp(now, last) == 0)
            continue;
        snprintf(last, sizeof last, "%s", now);
        if (strncmp(now, "down", 4) == 0)
            async_port_event(c, IBV_EVENT_PORT_ERR);
        else if (strncmp(now, "active", 6) == 0)
            async_port_event(c, IBV_EVENT_PORT_ACTIVE);
        else if (strncmp(now, "gid", 3) == 0)
            async_port_event(c, IBV_EVENT_GID_CHANGE);
        else if (strncmp(now, "fatal", 5) == 0)
            async_event(c, IBV_EVENT_DEVICE_FATAL, NULL);
    }
    return NULL;
}

static void port_ctl_start(fv_context_t *c) {
    const char *path = getenv("DSC_FAKEVERBS_PORT_CTL");
    if (path == NULL || *path == '\0')
        return;
    snprintf(c->port_ctl_path, sizeof c->port_ctl_path, "%s", path);
    /* Read here, not in the thread: a change written right after open, before the thread first
     * ran, must still raise its event. */
    port_ctl_read(c->port_ctl_path, c->port_ctl_first, sizeof c->port_ctl_first);
    c->port_ctl_running = pthread_create(&c->port_ctl, NULL, port_ctl_main, c) == 0;
}

static void port_ctl_stop(fv_context_t *c) {
    if (!c->port_ctl_running)
        return;
    __atomic_store_n(&c->port_ctl_stop, 1, __ATOMIC_RELEASE);
    pthread_join(c->port_ctl, NULL);
    c->port_ctl_running = 0;
}

/* Frees the events nobody read (ibv_close_device). */
static void async_drop_all(fv_context_t *c) {
    pthread_mutex_lock(&g_async_lock);
    while (c->ev_head) {
        fv_async_t *a = c->ev_head;
        c->ev_head = a->next;
        free(a);
    }
    c->ev_tail = NULL;
    pthread_mutex_unlock(&g_async_lock);
}

/* ---- The requester: executes posted READs in order ------------------------------------------ */

static fv_qp_t *qp_find(uint32_t qpn) {
    for (fv_qp_t *q = g_qps; q; q = q->next)
        if (q->qp.qp_num == qpn)
            return q;
    return NULL;
}

static fv_mr_t *mr_by_lkey(uint32_t lkey) {
    for (fv_mr_t *m = g_mrs; m; m = m->next)
        if (m->mr.lkey == lkey)
            return m;
    return NULL;
}

static fv_mr_t *mr_by_rkey(uint32_t rkey) {
    for (fv_mr_t *m = g_mrs; m; m = m->next)
        if (m->mr.rkey == rkey)
            return m;
    return NULL;
}

/* A window bound under exactly this rkey (g_lock). */
static fv_mw_t *mw_by_rkey(uint32_t rkey) {
    for (fv_mw_t *w = g_mws; w; w = w->next)
        if (w->bound && w->bound_rkey == rkey)
            return w;
    return NULL;
}

/* [addr, addr + len) inside the region, with no wrap-around. */
static int mr_covers(const fv_mr_t *m, uint64_t addr, uint64_t len) {
    uint64_t base = (uint64_t)(uintptr_t)m->mr.addr;
    return addr >= base && len <= m->mr.length && addr - base <= m->mr.length - len;
}

typedef struct fv_peer {
    uint32_t pid;
    int fd;
} fv_peer_t;
static _Thread_local fv_peer_t g_peers[FV_MAX_PEERS]; /* each requester thread its own */

static int peer_fd(uint32_t pid) {
    for (int i = 0; i < FV_MAX_PEERS; i++)
        if (g_peers[i].fd > 0 && g_peers[i].pid == pid)
            return g_peers[i].fd;
    struct sockaddr_un addr;
    socklen_t len;
    if (socket_address(pid, &addr, &len) < 0)
        return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&addr, len) < 0) {
        close(fd);
        return -1;
    }
    for (int i = 0; i < FV_MAX_PEERS; i++)
        if (g_peers[i].fd <= 0) {
            g_peers[i].pid = pid;
            g_peers[i].fd = fd;
            return fd;
        }
    close(fd);
    return -1;
}

static void peer_drop(uint32_t pid) {
    for (int i = 0; i < FV_MAX_PEERS; i++)
        if (g_peers[i].fd > 0 && g_peers[i].pid == pid) {
            close(g_peers[i].fd);
            g_peers[i].fd = 0;
        }
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

/* One READ over the wire; returns the completion status and fills *data (malloc'd). */
static enum ibv_wc_status do_read(uint32_t src_qpn, uint32_t peer_pid, uint32_t dest_qpn,
                                  enum ibv_mtu mtu, const fv_work_t *w, uint8_t **data) {
    if (peer_pid == 0) {
        sleep_ms(FV_UNREACHABLE_MS); /* retries to a GID nobody answers, then give up */
        return IBV_WC_RETRY_EXC_ERR;
    }
    int fd = peer_fd(peer_pid);
    if (fd < 0) {
        sleep_ms(FV_UNREACHABLE_MS);
        return IBV_WC_RETRY_EXC_ERR; /* the peer's NIC is gone: transport retries run out */
    }
    fv_req_t req = {FV_MAGIC,      dest_qpn, src_qpn,  (uint32_t)g_pid,
                    (uint32_t)mtu, w->rkey,  w->raddr, w->len};
    fv_resp_t resp;
    if (write_full(fd, &req, sizeof req) < 0 || read_full(fd, &resp, sizeof resp) < 0 ||
        resp.magic != FV_MAGIC) {
        peer_drop(peer_pid);
        return IBV_WC_RETRY_EXC_ERR;
    }
    if (resp.status != IBV_WC_SUCCESS)
        return (enum ibv_wc_status)resp.status;
    if (resp.len != w->len) {
        peer_drop(peer_pid);
        return IBV_WC_RETRY_EXC_ERR;
    }
    *data = malloc(w->len ? w->len : 1);
    if (*data == NULL || read_full(fd, *data, w->len) < 0) {
        free(*data);
        *data = NULL;
        peer_drop(peer_pid);
        return IBV_WC_RETRY_EXC_ERR;
    }
    return IBV_WC_SUCCESS;
}

/* A window still in the list (it may have been deallocated since the WR was posted). */
static int mw_alive(const fv_mw_t *mw) {
    for (fv_mw_t *w = g_mws; w; w = w->next)
        if (w == mw)
            return 1;
    return 0;
}

/* BIND_MW or LOCAL_INV on q (g_lock held), as the IB spec's checks: a bind needs a free type-2
 * window of q's PD, the same window index in the new rkey (only its key byte changes), a region
 * of that PD with MW_BIND access holding the range, and remote write only over local write; an
 * invalidation needs a window of q's PD bound under that rkey. Failures are IBV_WC_MW_BIND_ERR. */
static enum ibv_wc_status local_mw_op(fv_qp_t *q, const fv_work_t *w) {
    if (w->opcode == IBV_WR_LOCAL_INV) {
        for (fv_mw_t *m = g_mws; m; m = m->next)
            if (m->bound && m->bound_rkey == w->new_rkey && m->mw.pd == q->qp.pd) {
                m->bound = 0;
                g_invalidates++;
                return IBV_WC_SUCCESS;
            }
        return IBV_WC_MW_BIND_ERR;
    }
    fv_mw_t *mw = w->mw;
    if (!mw_alive(mw) || mw->bound || mw->mw.type != IBV_MW_TYPE_2 || mw->mw.pd != q->qp.pd ||
        (w->new_rkey & ~0xffu) != (mw->mw.rkey & ~0xffu))
        return IBV_WC_MW_BIND_ERR;
    fv_mr_t *r = NULL;
    for (fv_mr_t *x = g_mrs; x; x = x->next)
        if (&x->mr == w->bind_mr)
            r = x;
    if (r == NULL || r->mr.pd != q->qp.pd || !(r->access & IBV_ACCESS_MW_BIND) ||
        w->bind_length == 0 || !mr_covers(r, w->bind_addr, w->bind_length) ||
        ((w->bind_access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
         !(r->access & IBV_ACCESS_LOCAL_WRITE)))
        return IBV_WC_MW_BIND_ERR;
    mw->bound = 1;
    mw->bound_rkey = w->new_rkey;
    mw->mw.rkey = w->new_rkey;
    mw->qpn = q->qp.qp_num;
    mw->addr = w->bind_addr;
    mw->length = w->bind_length;
    mw->access = w->bind_access;
    g_binds++;
    return IBV_WC_SUCCESS;
}

static void complete(uint32_t qpn, const fv_work_t *w, enum ibv_wc_status status) {
    pthread_mutex_lock(&g_lock);
    fv_qp_t *q = qp_find(qpn);
    if (q == NULL) {
        pthread_mutex_unlock(&g_lock);
        return;
    }
    q->outstanding--;
    if (w->signaled)
        q->signaled_outstanding--;
    if (status != IBV_WC_SUCCESS && status != IBV_WC_WR_FLUSH_ERR)
        q->qp.state = IBV_QPS_ERR; /* the first error moves the QP to ERR; the rest flush */
    fv_cq_t *cq = (fv_cq_t *)q->qp.send_cq;
    if (!w->signaled && status == IBV_WC_SUCCESS) {
        pthread_mutex_unlock(&g_lock);
        return;
    }
    /* The push runs outside g_lock: the QP may be destroyed meanwhile, and then the CQ; the
     * count keeps the CQ alive until the push is done. */
    cq->pushing++;
    pthread_mutex_unlock(&g_lock);
    struct ibv_wc wc;
    memset(&wc, 0, sizeof wc);
    wc.wr_id = w->wr_id;
    wc.status = status;
    wc.opcode = w->opcode == IBV_WR_BIND_MW     ? IBV_WC_BIND_MW
                : w->opcode == IBV_WR_LOCAL_INV ? IBV_WC_LOCAL_INV
                                                : IBV_WC_RDMA_READ;
    wc.byte_len = status == IBV_WC_SUCCESS && w->opcode == IBV_WR_RDMA_READ ? (uint32_t)w->len : 0;
    wc.qp_num = qpn;
    cq_push(cq, &wc);
    pthread_mutex_lock(&g_lock);
    cq->pushing--;
    pthread_cond_broadcast(&g_push_cond);
    pthread_mutex_unlock(&g_lock);
}

static void run_work(fv_work_t *w) {
    pthread_mutex_lock(&g_lock);
    fv_qp_t *q = qp_find(w->qpn);
    if (q == NULL || q->qp.state == IBV_QPS_RESET) {
        pthread_mutex_unlock(&g_lock); /* destroyed or reset: the WR vanishes, no completion */
        return;
    }
    if (q->qp.state == IBV_QPS_ERR) {
        pthread_mutex_unlock(&g_lock);
        complete(w->qpn, w, IBV_WC_WR_FLUSH_ERR);
        return;
    }
    if (w->opcode != IBV_WR_RDMA_READ) {
        enum ibv_wc_status st = local_mw_op(q, w);
        pthread_mutex_unlock(&g_lock);
        complete(w->qpn, w, st);
        return;
    }
    /* Local protection: every SGE inside a region of this PD with LOCAL_WRITE. */
    for (int i = 0; i < w->num_sge; i++) {
        fv_mr_t *m = mr_by_lkey(w->sge[i].lkey);
        if (m == NULL || m->mr.pd != q->qp.pd || !(m->access & IBV_ACCESS_LOCAL_WRITE) ||
            !mr_covers(m, w->sge[i].addr, w->sge[i].length)) {
            pthread_mutex_unlock(&g_lock);
            complete(w->qpn, w, IBV_WC_LOC_PROT_ERR);
            return;
        }
    }
    uint32_t peer = q->peer_pid, dest = q->dest_qpn;
    enum ibv_mtu mtu = q->path_mtu;
    pthread_mutex_unlock(&g_lock);

    uint8_t *data = NULL;
    enum ibv_wc_status status = do_read(w->qpn, peer, dest, mtu, w, &data);
    if (status == IBV_WC_SUCCESS) {
        /* Scatter, re-checking the QP and the regions. Once ibv_destroy_qp has returned no more
         * bytes land (the guarantee a client relies on before reusing the memory), and a QP
         * moved to ERR meanwhile flushes; a region deregistered meanwhile is a protection
         * error. */
        pthread_mutex_lock(&g_lock);
        fv_qp_t *now = qp_find(w->qpn);
        if (now == NULL || now->qp.state == IBV_QPS_RESET) {
            pthread_mutex_unlock(&g_lock);
            free(data);
            return; /* destroyed or reset: the WR vanishes, no completion */
        }
        if (now->qp.state == IBV_QPS_ERR)
            status = IBV_WC_WR_FLUSH_ERR;
        uint64_t off = 0;
        for (int i = 0; i < w->num_sge && status == IBV_WC_SUCCESS; i++) {
            fv_mr_t *m = mr_by_lkey(w->sge[i].lkey);
            if (m == NULL || !mr_covers(m, w->sge[i].addr, w->sge[i].length)) {
                status = IBV_WC_LOC_PROT_ERR;
                break;
            }
            memcpy((void *)(uintptr_t)w->sge[i].addr, data + off, w->sge[i].length);
            off += w->sge[i].length;
        }
        pthread_mutex_unlock(&g_lock);
    }
    free(data);
    complete(w->qpn, w, status);
}

/* The oldest queued WR of a QP no requester runs, unlinked (g_lock); NULL: none. */
static fv_work_t *take_work(void) {
    fv_work_t *prev = NULL;
    for (fv_work_t *w = g_work_head; w != NULL; prev = w, w = w->next) {
        int busy = 0;
        for (int i = 0; i < FV_REQUESTERS && !busy; i++)
            busy = g_running[i] == w->qpn;
        if (busy)
            continue;
        if (prev)
            prev->next = w->next;
        else
            g_work_head = w->next;
        if (g_work_tail == w)
            g_work_tail = prev;
        w->next = NULL;
        return w;
    }
    return NULL;
}

static void *requester_main(void *arg) {
    int self = (int)(intptr_t)arg;
    for (;;) {
        pthread_mutex_lock(&g_lock);
        fv_work_t *w;
        while ((w = take_work()) == NULL)
            pthread_cond_wait(&g_work_cond, &g_lock);
        g_running[self] = w->qpn;
        pthread_mutex_unlock(&g_lock);
        run_work(w);
        free(w);
        pthread_mutex_lock(&g_lock);
        g_running[self] = 0;
        pthread_cond_broadcast(&g_work_cond); /* a WR of this QP may wait for it */
        pthread_mutex_unlock(&g_lock);
    }
    return NULL;
}

/* ---- The responder: serves READs from this process's registered memory -------------------- */

/* Marks a responder QP broken by a bad request, as the hardware does (and raises the event). */
static void responder_error(fv_qp_t *q, enum ibv_event_type type) {
    q->qp.state = IBV_QPS_ERR;
    async_event((fv_context_t *)q->qp.context, type, &q->qp);
}

static int serve_one(int fd) {
    fv_req_t req;
    if (read_full(fd, &req, sizeof req) < 0 || req.magic != FV_MAGIC)
        return -1;
    fv_resp_t resp = {FV_MAGIC, IBV_WC_SUCCESS, 0};
    uint8_t *copy = NULL;
    pthread_mutex_lock(&g_lock);
    long served = ++g_reads_served;
    if (g_kill_on_read != 0 && served == g_kill_on_read) {
        /* Fault injection: this node dies while a READ is in flight. */
        raise(SIGKILL);
    }
    fv_qp_t *q = qp_find(req.dst_qpn);
    if (q == NULL || (q->qp.state != IBV_QPS_RTR && q->qp.state != IBV_QPS_RTS) ||
        q->dest_qpn != req.src_qpn || q->peer_pid != req.src_pid) {
        /* A real responder drops such packets silently; the requester's retries run out. */
        resp.status = IBV_WC_RETRY_EXC_ERR;
    } else if (req.path_mtu != (uint32_t)q->path_mtu || req.len > FV_MAX_MSG) {
        resp.status = IBV_WC_REM_INV_REQ_ERR; /* packets sized for another MTU */
        responder_error(q, IBV_EVENT_QP_REQ_ERR);
    } else {
        /* The rkey names a bound window (served only through the QP it was bound on, inside its
         * range) or a region with REMOTE_READ; anything else is a remote access error. */
        fv_mw_t *w = mw_by_rkey(req.rkey);
        fv_mr_t *m = w == NULL ? mr_by_rkey(req.rkey) : NULL;
        int ok = (q->access & IBV_ACCESS_REMOTE_READ) != 0;
        if (w != NULL)
            ok = ok && w->qpn == q->qp.qp_num && w->mw.pd == q->qp.pd &&
                 (w->access & IBV_ACCESS_REMOTE_READ) && req.len <= w->length &&
                 req.raddr >= w->addr && req.raddr - w->addr <= w->length - req.len;
        else
            ok = ok && m != NULL && m->mr.pd == q->qp.pd && (m->access & IBV_ACCESS_REMOTE_READ) &&
                 mr_covers(m, req.raddr, req.len);
        if (!ok) {
            resp.status = IBV_WC_REM_ACCESS_ERR;
            responder_error(q, IBV_EVENT_QP_ACCESS_ERR);
        } else {
            /* The "DMA": a plain copy out of the process's memory, so ASan and TSan see it. */
            copy = malloc(req.len ? req.len : 1);
            if (copy == NULL) {
                resp.status = IBV_WC_REM_OP_ERR;
            } else {
                /* the owner released it when it handed out the rkey */
                if (w != NULL)
                    FV_TSAN_ACQUIRE(&w->mw);
                else
                    FV_TSAN_ACQUIRE(&m->mr);
                memcpy(copy, (const void *)(uintptr_t)req.raddr, req.len);
                resp.len = req.len;
            }
        }
    }
    pthread_mutex_unlock(&g_lock);
    int rc = write_full(fd, &resp, sizeof resp);
    if (rc == 0 && resp.len > 0)
        rc = write_full(fd, copy, resp.len);
    free(copy);
    return rc;
}

static void *responder_main(void *arg) {
    (void)arg;
    struct pollfd fds[1 + FV_MAX_CONNS];
    int nconn = 0;
    fds[0].fd = g_listen_fd;
    fds[0].events = POLLIN;
    for (;;) {
        if (poll(fds, (nfds_t)(1 + nconn), -1) < 0)
            continue;
        for (int i = nconn; i >= 1; i--) {
            if (fds[i].revents == 0)
                continue;
            if (!(fds[i].revents & POLLIN) || serve_one(fds[i].fd) < 0) {
                close(fds[i].fd);
                fds[i] = fds[nconn];
                nconn--;
            }
        }
        if (fds[0].revents & POLLIN) {
            int fd = accept4(g_listen_fd, NULL, NULL, SOCK_CLOEXEC);
            if (fd >= 0 && nconn < FV_MAX_CONNS) {
                nconn++;
                fds[nconn].fd = fd;
                fds[nconn].events = POLLIN;
                fds[nconn].revents = 0;
            } else if (fd >= 0) {
                close(fd);
            }
        }
    }
    return NULL;
}

static void atfork_child(void) {
    /* The helper threads do not survive fork: a child that uses verbs starts its own NIC. */
    pthread_mutex_init(&g_lock, NULL);
    pthread_mutex_init(&g_async_lock, NULL);
    pthread_cond_init(&g_work_cond, NULL);
    pthread_cond_init(&g_push_cond, NULL);
    g_started = 0;
    if (g_listen_fd >= 0)
        close(g_listen_fd);
    g_listen_fd = -1;
    memset(g_peers, 0, sizeof g_peers);
}
static void atfork_prepare(void) {
    pthread_mutex_lock(&g_lock);
    pthread_mutex_lock(&g_async_lock);
}
static void atfork_parent(void) {
    pthread_mutex_unlock(&g_async_lock);
    pthread_mutex_unlock(&g_lock);
}

/* Starts this process's NIC on first use. Returns 0 or an errno value. */
static int nic_start(void) {
    pthread_mutex_lock(&g_lock);
    if (g_started) {
        pthread_mutex_unlock(&g_lock);
        return 0;
    }
    static int atfork_done;
    if (!atfork_done) {
        pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
        atfork_done = 1;
    }
    g_pid = getpid();
    const char *dir = getenv("DSC_FAKEVERBS_DIR");
    snprintf(g_sock_dir, sizeof g_sock_dir, "%s", dir != NULL ? dir : "");
    if ((uint32_t)g_pid > 0xFFFFFFu) {
        pthread_mutex_unlock(&g_lock);
        return ERANGE; /* the pid must fit the 24 bits of the GID */
    }
    struct sockaddr_un addr;
    socklen_t len;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || socket_address((uint32_t)g_pid, &addr, &len) < 0) {
        if (fd >= 0)
            close(fd);
        pthread_mutex_unlock(&g_lock);
        return EINVAL;
    }
    if (addr.sun_path[0] != '\0')
        unlink(addr.sun_path); /* a stale socket of an earlier process with this pid */
    if (bind(fd, (struct sockaddr *)&addr, len) < 0 || listen(fd, 64) < 0) {
        int err = errno;
        close(fd);
        pthread_mutex_unlock(&g_lock);
        return err;
    }
    g_listen_fd = fd;
    pthread_t t1, t2;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t1, &attr, responder_main, NULL);
    for (int i = 0; i < FV_REQUESTERS && rc == 0; i++)
        rc = pthread_create(&t2, &attr, requester_main, (void *)(intptr_t)i);
    pthread_attr_destroy(&attr);
    if (rc == 0)
        g_started = 1;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* ---- Devices and contexts ----------------------------------------------------------------- */

/* The port's GID table (FV_GID_TABLE entries, the last empty), every entry RoCE v2. */
#define FV_GID_LINK_LOCAL 0 /* fe80::<pid>: link-local, never routable */
#define FV_GID_DECOY 1      /* ::ffff:10.254.Y.Z: routable, but on no local network */
#define FV_GID_LOOPBACK 2   /* ::ffff:127.X.Y.Z: the one on the TCP connections' subnet */
#define FV_GID_USED 3       /* entries that hold a GID */

static void gid_of(uint32_t pid, int index, union ibv_gid *gid) {
    memset(gid, 0, sizeof *gid);
    if (index == FV_GID_LINK_LOCAL) {
        gid->raw[0] = 0xfe;
        gid->raw[1] = 0x80;
        gid->raw[13] = (uint8_t)(pid >> 16);
        gid->raw[14] = (uint8_t)(pid >> 8);
        gid->raw[15] = (uint8_t)pid;
    } else if (index == FV_GID_DECOY) {
        /* Listed first, as a second RoCE netdev's GID often is on real hosts: whoever picks
         * "the first routable GID" picks this one, and every READ from or to it fails. */
        gid->raw[10] = gid->raw[11] = 0xff;
        gid->raw[12] = 10;
        gid->raw[13] = 254;
        gid->raw[14] = (uint8_t)(pid >> 8);
        gid->raw[15] = (uint8_t)pid;
    } else if (index == FV_GID_LOOPBACK) {
        gid->raw[10] = gid->raw[11] = 0xff;
        gid->raw[12] = 127;
        gid->raw[13] = (uint8_t)(pid >> 16);
        gid->raw[14] = (uint8_t)(pid >> 8);
        gid->raw[15] = (uint8_t)pid;
    }
}

/* The process a destination GID names, or 0 when it names no fake NIC (unreachable). */
static uint32_t gid_pid(const union ibv_gid *gid) {
    static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(gid->raw, v4, 12) != 0 || gid->raw[12] != 127)
        return 0;
    return (uint32_t)gid->raw[13] << 16 | (uint32_t)gid->raw[14] << 8 | gid->raw[15];
}

static void device_init(void) {
    g_device.node_type = IBV_NODE_CA;
    g_device.transport_type = IBV_TRANSPORT_IB;
    snprintf(g_device.name, sizeof g_device.name, "fakeverbs0");
    snprintf(g_device.dev_name, sizeof g_device.dev_name, "uverbs0");
    snprintf(g_device.dev_path, sizeof g_device.dev_path, "/sys/class/infiniband_verbs/uverbs0");
    snprintf(g_device.ibdev_path, sizeof g_device.ibdev_path, "/sys/class/infiniband/fakeverbs0");
}

FV_EXPORT struct ibv_device **ibv_get_device_list(int *num) {
    struct ibv_device **list = calloc(2, sizeof *list);
    if (list == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    int n = env_u64("DSC_FAKEVERBS_DEVICES", 1) > 0 ? 1 : 0;
    if (n) {
        pthread_once(&g_device_once, device_init);
        list[0] = &g_device;
    }
    if (num != NULL)
        *num = n;
    return list;
}

FV_EXPORT void ibv_free_device_list(struct ibv_device **list) {
    free(list);
}

FV_EXPORT const char *ibv_get_device_name(struct ibv_device *device) {
    return device != NULL ? device->name : NULL;
}

FV_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device) {
    if (device != &g_device) {
        errno = ENODEV;
        return NULL;
    }
    int rc = nic_start();
    if (rc != 0) {
        errno = rc;
        return NULL;
    }
    fv_context_t *c = calloc(1, sizeof *c);
    int p[2];
    if (c == NULL || pipe2(p, O_CLOEXEC) < 0) {
        free(c);
        errno = ENOMEM;
        return NULL;
    }
    c->ctx.device = device;
    c->ctx.cmd_fd = -1;
    c->ctx.async_fd = p[0];
    c->async_w = p[1];
    c->ctx.num_comp_vectors = 1;
    pthread_mutex_init(&c->ctx.mutex, NULL);
    /* abi_compat stays NULL: not a verbs_context, so every extended verb is absent. */
    c->ctx.ops.poll_cq = fv_poll_cq;
    c->ctx.ops.req_notify_cq = fv_req_notify_cq;
    c->ctx.ops.post_send = fv_post_send;
    c->ctx.ops.post_recv = fv_post_recv;
    const char *mw_env = getenv("DSC_FAKEVERBS_MW");
    c->no_mw = mw_env != NULL && strcmp(mw_env, "off") == 0;
    if (!c->no_mw) {
        c->ctx.ops.alloc_mw = fv_alloc_mw; /* ibv_alloc_mw / ibv_dealloc_mw are inline: ops */
        c->ctx.ops.dealloc_mw = fv_dealloc_mw;
    }
    int mtu = 0;
    uint64_t bytes = env_u64("DSC_FAKEVERBS_MTU", 4096);
    for (int e = IBV_MTU_256; e <= IBV_MTU_4096; e++)
        if ((128u << e) == bytes)
            mtu = e;
    c->active_mtu = mtu ? (enum ibv_mtu)mtu : IBV_MTU_4096;
    const char *port = getenv("DSC_FAKEVERBS_PORT");
    c->port_state = port != NULL && strcmp(port, "down") == 0 ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
    c->max_mr_size = env_u64("DSC_FAKEVERBS_MAX_MR_SIZE", 1ull << 40);
    const char *lb = getenv("DSC_FAKEVERBS_GID_LOOPBACK");
    c->no_loopback_gid = lb != NULL && strcmp(lb, "off") == 0;
    parse_faults(getenv("DSC_FAKEVERBS_FAULTS"));
    port_ctl_start(c);
    return &c->ctx;
}

FV_EXPORT int ibv_close_device(struct ibv_context *ibctx) {
    fv_context_t *c = (fv_context_t *)ibctx;
    port_ctl_stop(c);
    async_drop_all(c);
    close(c->ctx.async_fd);
    close(c->async_w);
    pthread_mutex_destroy(&c->ctx.mutex);
    free(c);
    return 0;
}

FV_EXPORT int ibv_query_device(struct ibv_context *ibctx, struct ibv_device_attr *attr) {
    fv_context_t *c = (fv_context_t *)ibctx;
    memset(attr, 0, sizeof *attr);
    snprintf(attr->fw_ver, sizeof attr->fw_ver, "fakeverbs 1.0");
    attr->node_guid = 0x0123456789abcdefull;
    attr->sys_image_guid = attr->node_guid;
    attr->max_mr_size = c->max_mr_size;
    attr->page_size_cap = 0xfffff000u;
    attr->vendor_id = 0xfa4e;
    attr->max_qp = 65536;
    attr->max_qp_wr = 4096;
    attr->max_sge = 16;
    attr->max_cq = 65536;
    attr->max_cqe = 65536;
    attr->max_mr = 65536;
    attr->max_pd = 65536;
    attr->max_qp_rd_atom = 16;
    attr->max_qp_init_rd_atom = 16;
    attr->phys_port_cnt = 1;
    if (!c->no_mw) {
        attr->device_cap_flags |= IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
        attr->max_mw = 65536;
    }
    return 0;
}

/* The classic (compat) entry: fills the struct ibv_port_attr the caller passes. */
FV_EXPORT int ibv_query_port(struct ibv_context *ibctx, uint8_t port,
                             struct _compat_ibv_port_attr *compat) {
    fv_context_t *c = (fv_context_t *)ibctx;
    struct ibv_port_attr *attr = (struct ibv_port_attr *)(void *)compat;
    if (port != 1)
        return EINVAL;
    memset(attr, 0, sizeof *attr);
    attr->state = c->port_state;
    attr->max_mtu = IBV_MTU_4096;
    attr->active_mtu = c->active_mtu;
    attr->gid_tbl_len = FV_GID_TABLE;
    attr->max_msg_sz = FV_MAX_MSG;
    attr->pkey_tbl_len = 1;
    attr->active_width = 2;                                      /* 4x */
    attr->active_speed = 32;                                     /* EDR */
    attr->phys_state = c->port_state == IBV_PORT_ACTIVE ? 5 : 3; /* LinkUp / Disabled */
    attr->link_layer = IBV_LINK_LAYER_ETHERNET;
    return 0;
}

/* Whether the port holds GID `index`. */
static int gid_present(struct ibv_context *ibctx, uint32_t index) {
    const fv_context_t *c = (const fv_context_t *)ibctx;
    return index < FV_GID_USED && !(index == FV_GID_LOOPBACK && c->no_loopback_gid);
}

FV_EXPORT int ibv_query_gid(struct ibv_context *ibctx, uint8_t port, int index,
                            union ibv_gid *gid) {
    if (port != 1 || index < 0 || index >= FV_GID_TABLE)
        return -1;
    gid_of((uint32_t)g_pid, gid_present(ibctx, (uint32_t)index) ? index : FV_GID_USED, gid);
    return 0;
}

FV_EXPORT int _ibv_query_gid_ex(struct ibv_context *ibctx, uint32_t port, uint32_t index,
                                struct ibv_gid_entry *entry, uint32_t flags, size_t size) {
    if (flags != 0 || size < sizeof *entry || port != 1 || index >= FV_GID_TABLE)
        return EINVAL;
    if (!gid_present(ibctx, index))
        return ENODATA; /* an empty table entry */
    memset(entry, 0, sizeof *entry);
    gid_of((uint32_t)g_pid, (int)index, &entry->gid);
    entry->gid_index = index;
    entry->port_num = port;
    entry->gid_type = IBV_GID_TYPE_ROCE_V2;
    entry->ndev_ifindex = 1; /* lo */
    return 0;
}

FV_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *ibctx) {
    struct ibv_pd *pd = calloc(1, sizeof *pd);
    if (pd == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    pd->context = ibctx;
    pthread_mutex_lock(&g_lock);
    pd->handle = g_next_handle++;
    pthread_mutex_unlock(&g_lock);
    return pd;
}

FV_EXPORT int ibv_dealloc_pd(struct ibv_pd *pd) {
    pthread_mutex_lock(&g_lock);
    for (fv_mr_t *m = g_mrs; m; m = m->next)
        if (m->mr.pd == pd) {
            pthread_mutex_unlock(&g_lock);
            return EBUSY;
        }
    for (fv_qp_t *q = g_qps; q; q = q->next)
        if (q->qp.pd == pd) {
            pthread_mutex_unlock(&g_lock);
            return EBUSY;
        }
    for (fv_mw_t *w = g_mws; w; w = w->next)
        if (w->mw.pd == pd) {
            pthread_mutex_unlock(&g_lock);
            return EBUSY;
        }
    pthread_mutex_unlock(&g_lock);
    free(pd);
    return 0;
}

/* ---- Memory regions ----------------------------------------------------------------------- */

FV_EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access) {
    fv_context_t *c = (fv_context_t *)pd->context;
    pthread_mutex_lock(&g_lock);
    g_reg_mr_calls++;
    pthread_mutex_unlock(&g_lock);
    /* Remote write/atomic need local write, as the kernel insists. */
    if (((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
         !(access & IBV_ACCESS_LOCAL_WRITE)) ||
        length == 0 || (uintptr_t)addr > UINTPTR_MAX - length) {
        errno = EINVAL;
        return NULL;
    }
    if (length > c->max_mr_size) {
        errno = EINVAL;
        return NULL;
    }
    uint64_t memlock = env_u64("DSC_FAKEVERBS_MEMLOCK", 0);
    fv_mr_t *m = calloc(1, sizeof *m);
    if (m == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    pthread_mutex_lock(&g_lock);
    if (memlock != 0 && g_registered + length > memlock) {
        pthread_mutex_unlock(&g_lock);
        free(m);
        errno = ENOMEM; /* what pinning past RLIMIT_MEMLOCK gives */
        return NULL;
    }
    g_registered += length;
    m->mr.context = pd->context;
    m->mr.pd = pd;
    m->mr.addr = addr;
    m->mr.length = length;
    m->mr.handle = g_next_handle++;
    m->mr.lkey = g_next_key++;
    /* rkeys mix in the pid so a key from another process is not valid here by chance. */
    m->mr.rkey = (g_next_key++ << 8) ^ ((uint32_t)g_pid & 0xff) ^ 0x5a5a0000u;
    m->access = access;
    m->next = g_mrs;
    g_mrs = m;
    pthread_mutex_unlock(&g_lock);
    return &m->mr;
}

FV_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
                                          uint64_t iova, unsigned int access) {
    if (iova != (uint64_t)(uintptr_t)addr) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    return ibv_reg_mr(pd, addr, length, (int)access);
}

FV_EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
                                           uint64_t iova, int fd, int access) {
    (void)pd, (void)offset, (void)length, (void)iova, (void)fd, (void)access;
    errno = EOPNOTSUPP; /* no GPUDirect here */
    return NULL;
}

FV_EXPORT int ibv_dereg_mr(struct ibv_mr *mr) {
    pthread_mutex_lock(&g_lock);
    for (fv_mr_t **p = &g_mrs; *p; p = &(*p)->next)
        if (&(*p)->mr == mr) {
            fv_mr_t *m = *p;
            *p = m->next;
            g_registered -= m->mr.length;
            pthread_mutex_unlock(&g_lock);
            free(m);
            return 0;
        }
    pthread_mutex_unlock(&g_lock);
    return EINVAL;
}

/* ---- Completion channels and CQs ---------------------------------------------------------- */

FV_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ibctx) {
    fv_channel_t *ch = calloc(1, sizeof *ch);
    int p[2];
    if (ch == NULL || pipe2(p, O_CLOEXEC) < 0) {
        free(ch);
        errno = ENOMEM;
        return NULL;
    }
    ch->ch.context = ibctx;
    ch->ch.fd = p[0];
    ch->write_fd = p[1];
    return &ch->ch;
}

FV_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel) {
    fv_channel_t *ch = (fv_channel_t *)channel;
    if (ch->ch.refcnt != 0)
        return EBUSY;
    close(ch->ch.fd);
    close(ch->write_fd);
    free(ch);
    return 0;
}

FV_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *ibctx, int cqe, void *cq_context,
                                       struct ibv_comp_channel *channel, int comp_vector) {
    if (cqe < 1 || cqe > 65536 || comp_vector != 0) {
        errno = EINVAL;
        return NULL;
    }
    fv_cq_t *cq = calloc(1, sizeof *cq);
    if (cq == NULL || (cq->ring = calloc((size_t)cqe, sizeof *cq->ring)) == NULL) {
        free(cq);
        errno = ENOMEM;
        return NULL;
    }
    cq->cap = cqe;
    cq->cq.context = ibctx;
    cq->cq.channel = channel;
    cq->cq.cq_context = cq_context;
    cq->cq.cqe = cqe;
    pthread_mutex_init(&cq->lock, NULL);
    if (channel != NULL) {
        pthread_mutex_lock(&g_lock);
        channel->refcnt++;
        pthread_mutex_unlock(&g_lock);
    }
    return &cq->cq;
}

FV_EXPORT int ibv_destroy_cq(struct ibv_cq *ibcq) {
    fv_cq_t *cq = (fv_cq_t *)ibcq;
    pthread_mutex_lock(&g_lock);
    for (fv_qp_t *q = g_qps; q; q = q->next)
        if (q->qp.send_cq == ibcq || q->qp.recv_cq == ibcq) {
            pthread_mutex_unlock(&g_lock);
            return EBUSY;
        }
    while (cq->pushing > 0) /* a completion of a QP destroyed a moment ago, still on its way */
        pthread_cond_wait(&g_push_cond, &g_lock);
    pthread_mutex_lock(&cq->lock);
    /* A real destroy waits for every event to be acknowledged; refusing is kinder to tests. */
    int unacked = cq->events_sent != cq->events_acked;
    pthread_mutex_unlock(&cq->lock);
    if (unacked) {
        pthread_mutex_unlock(&g_lock);
        return EBUSY;
    }
    if (cq->cq.channel != NULL)
        cq->cq.channel->refcnt--;
    pthread_mutex_unlock(&g_lock);
    pthread_mutex_destroy(&cq->lock);
    free(cq->ring);
    free(cq);
    return 0;
}

FV_EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq,
                               void **cq_context) {
    struct ibv_cq *ptr = NULL;
    ssize_t n = read(channel->fd, &ptr, sizeof ptr);
    if (n != (ssize_t)sizeof ptr)
        return -1; /* errno from read: EAGAIN on a non-blocking channel with no event */
    *cq = ptr;
    *cq_context = ptr->cq_context;
    return 0;
}

FV_EXPORT void ibv_ack_cq_events(struct ibv_cq *ibcq, unsigned int nevents) {
    fv_cq_t *cq = (fv_cq_t *)ibcq;
    pthread_mutex_lock(&cq->lock);
    cq->events_acked += nevents;
    pthread_mutex_unlock(&cq->lock);
}

/* ---- Queue pairs -------------------------------------------------------------------------- */

/* qp_delay_ms=N: QP creation takes N ms, as it can on a real NIC (firmware commands). */
static void fault_qp_delay(void) {
    pthread_mutex_lock(&g_lock);
    long ms = g_qp_delay_ms;
    pthread_mutex_unlock(&g_lock);
    if (ms > 0)
        sleep_ms((int)ms);
}

FV_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *init) {
    fault_qp_delay();
    if (init->qp_type != IBV_QPT_RC || init->send_cq == NULL || init->recv_cq == NULL ||
        init->srq != NULL || init->cap.max_send_wr < 1 || init->cap.max_send_wr > 4096 ||
        init->cap.max_send_sge > 16 || init->cap.max_recv_sge > 16 ||
        init->cap.max_recv_wr > 4096 || init->cap.max_inline_data > 256) {
        errno = EINVAL; /* only RC, within the device limits */
        return NULL;
    }
    fv_qp_t *q = calloc(1, sizeof *q);
    if (q == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    q->qp.context = pd->context;
    q->qp.qp_context = init->qp_context;
    q->qp.pd = pd;
    q->qp.send_cq = init->send_cq;
    q->qp.recv_cq = init->recv_cq;
    q->qp.state = IBV_QPS_RESET;
    q->qp.qp_type = IBV_QPT_RC;
    pthread_mutex_init(&q->qp.mutex, NULL);
    pthread_cond_init(&q->qp.cond, NULL);
    q->cap = init->cap;
    if (q->cap.max_send_sge == 0)
        q->cap.max_send_sge = 1;
    q->sq_sig_all = init->sq_sig_all;
    pthread_mutex_lock(&g_lock);
    q->qp.handle = g_next_handle++;
    q->qp.qp_num = g_next_qpn++ & 0xFFFFFFu;
    q->next = g_qps;
    g_qps = q;
    pthread_mutex_unlock(&g_lock);
    return &q->qp;
}

/* What each RC transition requires and allows, as the kernel's ib_modify_qp_is_ok() table. */
typedef struct fv_transition {
    enum ibv_qp_state from, to;
    int required, optional;
} fv_transition_t;

static const fv_transition_t transitions[] = {
    {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0},
    {IBV_QPS_INIT, IBV_QPS_INIT, 0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS},
    {IBV_QPS_INIT, IBV_QPS_RTR,
     IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
         IBV_QP_MIN_RNR_TIMER,
     IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX},
    {IBV_QPS_RTR, IBV_QPS_RTS,
     IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
     IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER |
         IBV_QP_PATH_MIG_STATE},
    {IBV_QPS_RTS, IBV_QPS_RTS, 0,
     IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE |
         IBV_QP_MIN_RNR_TIMER},
};

FV_EXPORT int ibv_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask) {
    fv_qp_t *q = (fv_qp_t *)ibqp;
    fv_context_t *c = (fv_context_t *)ibqp->context;
    pthread_mutex_lock(&g_lock);
    enum ibv_qp_state cur = q->qp.state;
    if ((mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != cur)
        goto invalid;
    enum ibv_qp_state to = (mask & IBV_QP_STATE) ? attr->qp_state : cur;
    int rest = mask & ~(IBV_QP_STATE | IBV_QP_CUR_STATE);
    if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) {
        if (!(mask & IBV_QP_STATE) || rest != 0)
            goto invalid;
        q->qp.state = to;
        if (to == IBV_QPS_RESET) {
            q->peer_pid = 0;
            q->dest_qpn = 0;
        }
        pthread_mutex_unlock(&g_lock);
        return 0;
    }
    const fv_transition_t *t = NULL;
    for (size_t i = 0; i < sizeof transitions / sizeof transitions[0]; i++)
        if (transitions[i].from == cur && transitions[i].to == to)
            t = &transitions[i];
    if (t == NULL || (rest & t->required) != t->required ||
        (rest & ~(t->required | t->optional | IBV_QP_CUR_STATE)) != 0)
        goto invalid;
    /* Values, as a device checks them. */
    if ((mask & IBV_QP_PORT) && attr->port_num != 1)
        goto invalid;
    if ((mask & IBV_QP_PKEY_INDEX) && attr->pkey_index != 0)
        goto invalid;
    if ((mask & IBV_QP_PATH_MTU) &&
        (attr->path_mtu < IBV_MTU_256 || attr->path_mtu > c->active_mtu))
        goto invalid;
    if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && attr->max_dest_rd_atomic > 16)
        goto invalid;
    if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && attr->max_rd_atomic > 16)
        goto invalid;
    if ((mask & IBV_QP_TIMEOUT) && attr->timeout > 31)
        goto invalid;
    if ((mask & IBV_QP_RETRY_CNT) && attr->retry_cnt > 7)
        goto invalid;
    if ((mask & IBV_QP_RNR_RETRY) && attr->rnr_retry > 7)
        goto invalid;
    if ((mask & IBV_QP_DEST_QPN) && attr->dest_qp_num > 0xFFFFFFu)
        goto invalid;
    if ((mask & (IBV_QP_RQ_PSN)) && attr->rq_psn > 0xFFFFFFu)
        goto invalid;
    if ((mask & (IBV_QP_SQ_PSN)) && attr->sq_psn > 0xFFFFFFu)
        goto invalid;
    if (mask & IBV_QP_AV) {
        /* RoCE: every packet carries a GRH, so the address must be global with a valid sgid. */
        if (!attr->ah_attr.is_global || attr->ah_attr.port_num != 1 ||
            !gid_present(ibqp->context, attr->ah_attr.grh.sgid_index))
            goto invalid;
    }
    if (mask & IBV_QP_ACCESS_FLAGS)
        q->access = (int)attr->qp_access_flags;
    if (mask & IBV_QP_PORT)
        q->port = attr->port_num;
    if (mask & IBV_QP_PATH_MTU)
        q->path_mtu = attr->path_mtu;
    if (mask & IBV_QP_DEST_QPN)
        q->dest_qpn = attr->dest_qp_num;
    if (mask & IBV_QP_AV)
        q->peer_pid = gid_pid(&attr->ah_attr.grh.dgid);
    q->qp.state = to;
    pthread_mutex_unlock(&g_lock);
    return 0;
invalid:
    pthread_mutex_unlock(&g_lock);
    return EINVAL;
}

FV_EXPORT int ibv_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask,
                           struct ibv_qp_init_attr *init) {
    (void)mask;
    fv_qp_t *q = (fv_qp_t *)ibqp;
    memset(attr, 0, sizeof *attr);
    memset(init, 0, sizeof *init);
    pthread_mutex_lock(&g_lock);
    attr->qp_state = q->qp.state;
    attr->cur_qp_state = q->qp.state;
    attr->path_mtu = q->path_mtu;
    attr->dest_qp_num = q->dest_qpn;
    attr->qp_access_flags = (unsigned)q->access;
    attr->port_num = q->port;
    attr->cap = q->cap;
    pthread_mutex_unlock(&g_lock);
    init->qp_type = IBV_QPT_RC;
    init->send_cq = ibqp->send_cq;
    init->recv_cq = ibqp->recv_cq;
    init->cap = q->cap;
    init->sq_sig_all = q->sq_sig_all;
    return 0;
}

FV_EXPORT int ibv_destroy_qp(struct ibv_qp *ibqp) {
    fv_qp_t *q = (fv_qp_t *)ibqp;
    pthread_mutex_lock(&g_lock);
    /* Once this returns the QP serves nothing: the responder looks QPs up under g_lock. */
    for (fv_qp_t **p = &g_qps; *p; p = &(*p)->next)
        if (*p == q) {
            *p = q->next;
            break;
        }
    for (fv_mw_t *w = g_mws; w; w = w->next)
        if (w->bound && w->qpn == q->qp.qp_num)
            w->bound = 0; /* its only QP is gone: nothing can READ through the window */
    pthread_mutex_unlock(&g_lock);
    async_forget_qp(q); /* waits for the acks of its events that were read */
    pthread_mutex_destroy(&q->qp.mutex);
    pthread_cond_destroy(&q->qp.cond);
    free(q);
    return 0;
}

static int fv_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr) {
    fv_qp_t *q = (fv_qp_t *)ibqp;
    pthread_mutex_lock(&g_lock);
    long n = ++g_post_seen;
    if (g_fail_post != 0 && n == g_fail_post) {
        pthread_mutex_unlock(&g_lock);
        *bad_wr = wr;
        return ENOMEM;
    }
    /* Posting needs RTS; in ERR the WRs are accepted and complete flushed. */
    if (q->qp.state != IBV_QPS_RTS && q->qp.state != IBV_QPS_ERR) {
        pthread_mutex_unlock(&g_lock);
        *bad_wr = wr;
        return EINVAL;
    }
    for (; wr != NULL; wr = wr->next) {
        int local = wr->opcode == IBV_WR_BIND_MW || wr->opcode == IBV_WR_LOCAL_INV;
        if ((!local && wr->opcode != IBV_WR_RDMA_READ) || wr->num_sge < 0 ||
            (uint32_t)wr->num_sge > q->cap.max_send_sge ||
            (wr->opcode == IBV_WR_BIND_MW && wr->bind_mw.mw == NULL)) {
            pthread_mutex_unlock(&g_lock);
            *bad_wr = wr;
            return EINVAL; /* only READ and the window operations are modelled */
        }
        if (q->outstanding >= q->cap.max_send_wr) {
            pthread_mutex_unlock(&g_lock);
            *bad_wr = wr;
            return ENOMEM; /* send queue full */
        }
        fv_work_t *w = calloc(1, sizeof *w);
        if (w == NULL) {
            pthread_mutex_unlock(&g_lock);
            *bad_wr = wr;
            return ENOMEM;
        }
        w->opcode = wr->opcode;
        if (wr->opcode == IBV_WR_BIND_MW) {
            w->mw = (fv_mw_t *)wr->bind_mw.mw;
            w->new_rkey = wr->bind_mw.rkey;
            w->bind_mr = wr->bind_mw.bind_info.mr;
            w->bind_addr = wr->bind_mw.bind_info.addr;
            w->bind_length = wr->bind_mw.bind_info.length;
            w->bind_access = (int)wr->bind_mw.bind_info.mw_access_flags;
        } else if (wr->opcode == IBV_WR_LOCAL_INV) {
            w->new_rkey = wr->invalidate_rkey;
        }
        w->qpn = q->qp.qp_num;
        w->wr_id = wr->wr_id;
        w->signaled = q->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
        w->num_sge = local ? 0 : wr->num_sge;
        for (int i = 0; i < w->num_sge; i++) {
            w->sge[i] = wr->sg_list[i];
            w->len += wr->sg_list[i].length;
        }
        if (!local) {
            w->raddr = wr->wr.rdma.remote_addr;
            w->rkey = wr->wr.rdma.rkey;
        }
        q->outstanding++;
        if (w->signaled && ++q->signaled_outstanding > g_max_signaled_outstanding && !local)
            g_max_signaled_outstanding = q->signaled_outstanding;
        if (g_work_tail)
            g_work_tail->next = w;
        else
            g_work_head = w;
        g_work_tail = w;
    }
    pthread_cond_broadcast(&g_work_cond);
    pthread_mutex_unlock(&g_lock);
    return 0;
}

/* ibv_alloc_mw (through ops, as verbs.h inlines it): type 2 only, as the device reports. */
static struct ibv_mw *fv_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type) {
    if (type != IBV_MW_TYPE_2) {
        errno = EOPNOTSUPP; /* type 1 (ibv_bind_mw) is not modelled */
        return NULL;
    }
    fv_mw_t *w = calloc(1, sizeof *w);
    if (w == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    w->mw.context = pd->context;
    w->mw.pd = pd;
    w->mw.type = type;
    pthread_mutex_lock(&g_lock);
    w->mw.handle = g_next_handle++;
    /* Window index in the upper 24 bits (mixed with the pid, as region rkeys), key byte 0. */
    w->mw.rkey = ((g_next_key++ << 8) ^ (((uint32_t)g_pid & 0xff) << 8) ^ 0x3c000000u) & ~0xffu;
    w->next = g_mws;
    g_mws = w;
    pthread_mutex_unlock(&g_lock);
    return &w->mw;
}

/* ibv_dealloc_mw: a bound window is invalidated with it. */
static int fv_dealloc_mw(struct ibv_mw *mw) {
    pthread_mutex_lock(&g_lock);
    for (fv_mw_t **p = &g_mws; *p; p = &(*p)->next)
        if (&(*p)->mw == mw) {
            fv_mw_t *w = *p;
            *p = w->next;
            pthread_mutex_unlock(&g_lock);
            free(w);
            return 0;
        }
    pthread_mutex_unlock(&g_lock);
    return EINVAL;
}

static int fv_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr) {
    (void)ibqp;
    *bad_wr = wr;
    return EINVAL; /* SEND/RECV is not modelled */
}

/* ---- Address handles, async events, fork, strings ------------------------------------------ */

FV_EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr) {
    /* As the kernel resolves a RoCE address: a GRH from a GID the port holds, towards a
     * destination that is routable (a link-local destination has no route here). */
    const uint8_t *d = attr->grh.dgid.raw;
    static const uint8_t zero[16];
    if (pd == NULL || !attr->is_global || attr->port_num != 1 ||
        !gid_present(pd->context, attr->grh.sgid_index) || memcmp(d, zero, 16) == 0 ||
        (d[0] == 0xfe && (d[1] & 0xc0) == 0x80)) {
        errno = EINVAL;
        return NULL;
    }
    struct ibv_ah *ah = calloc(1, sizeof *ah);
    if (ah == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    ah->context = pd->context;
    ah->pd = pd;
    return ah;
}

FV_EXPORT int ibv_destroy_ah(struct ibv_ah *ah) {
    free(ah);
    return 0;
}

FV_EXPORT int ibv_get_async_event(struct ibv_context *ibctx, struct ibv_async_event *event) {
    for (;;) {
        char one;
        ssize_t n = read(ibctx->async_fd, &one, 1);
        if (n != 1)
            return -1; /* errno EAGAIN on an O_NONBLOCK fd with nothing queued */
        fv_async_t *a = async_pop((fv_context_t *)ibctx);
        if (a != NULL) {
            *event = a->ev;
            free(a);
            return 0;
        }
        /* That event's QP was destroyed before it was read: dropped; wait for the next. */
    }
}

FV_EXPORT void ibv_ack_async_event(struct ibv_async_event *event) {
    if (!is_qp_event(event->event_type) || event->element.qp == NULL)
        return;
    struct ibv_qp *qp = event->element.qp;
    pthread_mutex_lock(&qp->mutex);
    qp->events_completed++;
    pthread_cond_broadcast(&qp->cond);
    pthread_mutex_unlock(&qp->mutex);
}

FV_EXPORT int ibv_fork_init(void) {
    return 0;
}

FV_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void) {
    return IBV_FORK_UNNEEDED; /* nothing is really pinned */
}

FV_EXPORT const char *ibv_wc_status_str(enum ibv_wc_status status) {
    switch (status) {
    case IBV_WC_SUCCESS:
        return "success";
    case IBV_WC_LOC_PROT_ERR:
        return "local protection error";
    case IBV_WC_WR_FLUSH_ERR:
        return "Work Request Flushed Error";
    case IBV_WC_REM_INV_REQ_ERR:
        return "remote invalid request error";
    case IBV_WC_REM_ACCESS_ERR:
        return "remote access error";
    case IBV_WC_REM_OP_ERR:
        return "remote operation error";
    case IBV_WC_RETRY_EXC_ERR:
        return "transport retry counter exceeded";
    case IBV_WC_MW_BIND_ERR:
        return "memory window bind error";
    default:
        return "unknown";
    }
}

/* ---- Statistics at exit -------------------------------------------------------------------- */

/* One line per process that loaded the library, when DSC_FAKEVERBS_STATS names a file: appended
 * with one write (O_APPEND), so processes sharing the file do not interleave. */
__attribute__((destructor)) static void write_stats(void) {
    const char *path = getenv("DSC_FAKEVERBS_STATS");
    if (path == NULL || *path == '\0')
        return;
    pthread_mutex_lock(&g_lock);
    long reg = g_reg_mr_calls, binds = g_binds, invs = g_invalidates;
    uint32_t max_reads = g_max_signaled_outstanding;
    pthread_mutex_unlock(&g_lock);
    char line[200];
    int n = snprintf(line, sizeof line,
                     "fakeverbs pid %ld reg_mr %ld max_qp_read_requests %u bind_mw %ld "
                     "local_inv %ld\n",
                     (long)getpid(), reg, max_reads, binds, invs);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0 || n <= 0)
        return;
    if (write(fd, line, (size_t)n) != n) {
        /* Nothing to do at exit: the test reading the file reports the missing line. */
    }
    close(fd);
}
