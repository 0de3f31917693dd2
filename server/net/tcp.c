/* TCP transport: connections over libuv. Accepting (sockets dealt to the loops in turn), reading
 * into a per-connection buffer and cutting it into frames, the write queue (the answers to one
 * read gathered into one writev), back-pressure (reads pause while too many answer bytes or
 * loads are outstanding), closing and draining; and the TCP reply (reply.h): a GET answer is a
 * header + prefix buffer and buffers pointing at the shard bytes in the store, whose hold is
 * released when the write completes. Requests themselves are handled by dispatch.c. With
 * --send-rate, answers wait in the server's fair queue (fairq.h: deficit round-robin between
 * jobs, in pieces) and are written as the send budget allows, by their own loop.
 * Over 800 lines on purpose: reading, framing, the write queue, back-pressure, time-outs and the
 * accept back-off share conn_t and its invariants; splitting would expose conn_t to other files.
 */
#include "tcp.h"
#include "dispatch.h"
#include "server_core.h"
#include "srvlog.h"
#include "util.h"
#include "wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Requests are small (a name and a few integers); anything larger is refused with TOO_LARGE. The
 * receive buffer is allocated when bytes arrive (IN_BUF_INITIAL), grown to the frame being
 * received (at most IN_BUF_MAX) and freed when empty, so an idle connection holds none. */
#define MAX_REQUEST_BODY DSC_SERVER_MAX_BODY
#define IN_BUF_INITIAL 4096u
#define IN_BUF_MAX (MAX_REQUEST_BODY + DSC_FRAME_HEADER_SIZE)
/* Defaults of the time-outs (dsc_server_options_t) and of the server-wide bound. */
#define HEADER_TIMEOUT_DEFAULT_S 10
#define MAX_OUT_TOTAL_DEFAULT (UINT64_C(1) << 30)
/* Connections accepted per readiness callback, so that one busy listener does not starve the
 * loop's other work. */
#define ACCEPT_BATCH 64
#define ACCEPT_BACKOFF_MIN_MS 100
#define ACCEPT_BACKOFF_MAX_MS 1000
/* Misses a connection may have waiting on loads before its reads pause. */
#define MAX_PENDING_LOADS 1024
#define INLINE_BUFS 4
/* Responses built from one read are written with one writev of at most this many buffers (or
 * BATCH_MAX_BYTES): fewer syscalls, and full TCP segments instead of a short one at the end of
 * every response. */
#define BATCH_MAX_BUFS 256
#define BATCH_MAX_BYTES (16u << 20)
/* Unsent bytes a socket may hold (TCP_NOTSENT_LOWAT). The rest of a response waits in the store,
 * not copied into the kernel: the bytes a socket copies are sent while still in cache, less
 * kernel memory is tied up per connection, and fewer queued segments go out from the peer's
 * ACK processing (on loopback that is the client's CPU). Data in flight is not limited. */
#define NOTSENT_LOWAT (256u << 10)
/* With --send-rate, answers are queued in pieces of at most this many bytes (the DRR quantum):
 * a job's 1 MiB answer then delays another job's answer by at most one piece, not the whole
 * answer (pieces of one connection go out in order, on its own socket). */
#define FAIR_PIECE DSC_FQ_QUANTUM

typedef struct out_msg out_msg_t;

/* A connection. Its reply is first, so that a dsc_reply_t * is the connection. */
struct dsc_tcp_conn {
    dsc_reply_t reply;
    uv_tcp_t tcp;
    dsc_srv_loop_t *lc;
    dsc_tcp_conn_t *prev, *next;
    uint8_t *in;
    size_t in_len, in_cap;
    uint64_t out_bytes;     /* response bytes queued in uv_write and not yet completed */
    uint64_t reserved;      /* upper bound of the answers of GETs waiting for loads */
    uint64_t held_counted;  /* this connection's share of srv->held_total */
    uint64_t last_activity; /* uv_now() of the last byte received or write completed */
    uint64_t frame_start;   /* uv_now() when the frame being received began (0: none) */
    uint8_t peer[16];       /* peer address (IPv4-mapped), counted against the per-peer limit */
    uint32_t writes;        /* uv_write requests in flight */
    uint32_t pending_loads; /* GETs waiting for a load */
    out_msg_t *batch_head, *batch_tail; /* responses not yet handed to uv_write */
    uint64_t batch_bytes;
    unsigned batch_bufs;
    int refs; /* 1 for the open handle + writes + pending loads */
    unsigned closing : 1, reading : 1, close_when_idle : 1, paused : 1, peer_counted : 1;
    unsigned batching : 1; /* inside conn_process: submit() collects instead of writing */
    unsigned dirty : 1;    /* on the list of connections fair_service() writes to */
    dsc_fq_flow_t *flow;   /* with --send-rate: its job's queue in srv->fq (a reference) */
    uint32_t fq_queued;    /* its pieces in srv->fq or in its loop's fair inbox (each holds a
                              reference to c) */
    dsc_tcp_conn_t *dirty_next;
};
typedef dsc_tcp_conn_t conn_t;

/* A response on its way: the uv_write request, what it holds, and its buffers. Responses written
 * together form a list: the first one's req carries the write, each keeps its own hold. */
struct out_msg {
    uv_write_t req;
    conn_t *c;
    out_msg_t *next;
    dsc_hold_t hold;
    size_t bytes;
    uv_buf_t *bufs;
    unsigned nbufs;
    dsc_fq_item_t fq; /* with --send-rate: its place in the loop's fair queue */
    uv_buf_t inline_bufs[INLINE_BUFS];
    uint8_t head[]; /* frame header + small body or GET prefix */
};

static void conn_close(conn_t *c);
static void conn_process(conn_t *c);
static void fair_service(dsc_srv_loop_t *lc);

/* ---- memory held per connection and in all ---------------------------------------------- */

/* Everything held for a connection: answers queued (their shard bytes stay pinned until the
 * write completes), the upper bound of answers still waiting for loads (read-through buffers),
 * and the receive buffer. Kept in srv->held_total as well, for the server-wide bound. */
static uint64_t conn_held(const conn_t *c) {
    /* A closed connection's waiting GETs will pin nothing: their answers are dropped as soon as
     * they are delivered, so they stop counting against the server-wide bound at once. */
    return c->out_bytes + (c->closing ? 0 : c->reserved) + c->in_cap;
}

static void held_update(conn_t *c) {
    uint64_t now = conn_held(c), was = c->held_counted;
    if (now > was)
        atomic_fetch_add_explicit(&c->lc->srv->held_total, now - was, memory_order_relaxed);
    else if (now < was)
        atomic_fetch_sub_explicit(&c->lc->srv->held_total, was - now, memory_order_relaxed);
    c->held_counted = now;
}

static void conn_unref(conn_t *c) {
    if (--c->refs == 0) {
        if (c->flow != NULL) {
            dsc_server_t *srv = c->lc->srv;
            pthread_mutex_lock(&srv->send_budget.lock);
            dsc_fq_flow_put(&srv->fq, c->flow);
            pthread_mutex_unlock(&srv->send_budget.lock);
        }
        dsc__authz_conn_close(&c->reply.auth);
        free(c->in);
        c->in = NULL;
        c->in_cap = 0;
        c->out_bytes = c->reserved = 0;
        held_update(c);
        free(c);
    }
}

static uint64_t max_out_total(const dsc_server_t *srv) {
    return srv->opt.max_out_total ? srv->opt.max_out_total : MAX_OUT_TOTAL_DEFAULT;
}

/* ---- connections per peer address ------------------------------------------------------- */

/* The peer's address as 16 bytes (IPv4 mapped into IPv6); zeros when it cannot be read (then
 * the connection is not limited). */
static void peer_key(int fd, uint8_t key[16]) {
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    memset(key, 0, 16);
    if (getpeername(fd, (struct sockaddr *)&sa, &len) != 0)
        return;
    if (sa.ss_family == AF_INET) {
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &((struct sockaddr_in *)&sa)->sin_addr, 4);
    } else if (sa.ss_family == AF_INET6) {
        memcpy(key, &((struct sockaddr_in6 *)&sa)->sin6_addr, 16);
    }
}

static int key_unset(const uint8_t key[16]) {
    static const uint8_t zero[16];
    return memcmp(key, zero, 16) == 0;
}

/* The slot of key in a table of cap slots (a power of two): its own, or the free one where it
 * would go. */
static dsc_peer_slot_t *peer_find(dsc_peer_slot_t *slots, uint32_t cap, const uint8_t key[16]) {
    uint32_t h = (uint32_t)dsc_load_u64(key + 8) * 2654435761u ^ (uint32_t)dsc_load_u64(key);
    for (uint32_t i = 0;; i++) {
        dsc_peer_slot_t *s = &slots[(h + i) & (cap - 1)];
        if (!s->used || memcmp(s->addr, key, 16) == 0)
            return s;
    }
}

/* Doubles the table (or rebuilds it at its size), keeping only peers with connections open. */
static int peer_grow(dsc_server_t *srv) {
    uint32_t live = 0;
    for (uint32_t i = 0; i < srv->peer_cap; i++)
        live += srv->peers[i].count > 0;
    uint32_t cap = srv->peer_cap ? srv->peer_cap : 64;
    while (live * 2 >= cap)
        cap *= 2;
    dsc_peer_slot_t *slots = calloc(cap, sizeof *slots);
    if (slots == NULL)
        return -1;
    for (uint32_t i = 0; i < srv->peer_cap; i++)
        if (srv->peers[i].count > 0)
            *peer_find(slots, cap, srv->peers[i].addr) = srv->peers[i];
    free(srv->peers);
    srv->peers = slots;
    srv->peer_cap = cap;
    srv->peer_used = live;
    return 0;
}

/* Counts a new connection of peer: 1, or 0 when the peer is at max_conns_per_peer (logged at
 * most once a second). Any thread. */
static int peer_acquire(dsc_server_t *srv, const uint8_t key[16]) {
    uint32_t limit = srv->opt.max_conns_per_peer;
    if (limit == 0 || key_unset(key))
        return 1;
    int ok = 1;
    pthread_mutex_lock(&srv->peer_lock);
    if ((srv->peer_used + 1) * 2 > srv->peer_cap && peer_grow(srv) < 0) {
        pthread_mutex_unlock(&srv->peer_lock);
        return 1; /* out of memory: not limited rather than refused */
    }
    dsc_peer_slot_t *s = peer_find(srv->peers, srv->peer_cap, key);
    if (!s->used) {
        memcpy(s->addr, key, 16);
        s->used = 1;
        srv->peer_used++;
    }
    if (s->count >= limit) {
        ok = 0;
        atomic_fetch_add_explicit(&srv->peer_refusals, 1, memory_order_relaxed);
        uint64_t now = uv_hrtime() / 1000000;
        if (now - srv->peer_log_ms >= 1000 || srv->peer_log_ms == 0) {
            srv->peer_log_ms = now;
            char text[INET6_ADDRSTRLEN] = "?";
            int v4 = key[10] == 0xff && key[11] == 0xff && dsc_load_u64(key) == 0;
            inet_ntop(v4 ? AF_INET : AF_INET6, v4 ? key + 12 : key, text, sizeof text);
            LOG_WARN("connections from %s over the per-peer limit (%u): closing new ones", text,
                     limit);
        }
    } else {
        s->count++;
    }
    pthread_mutex_unlock(&srv->peer_lock);
    return ok;
}

static void peer_release(dsc_server_t *srv, const uint8_t key[16]) {
    if (srv->opt.max_conns_per_peer == 0 || key_unset(key))
        return;
    pthread_mutex_lock(&srv->peer_lock);
    if (srv->peer_cap) {
        dsc_peer_slot_t *s = peer_find(srv->peers, srv->peer_cap, key);
        if (s->used && s->count > 0)
            s->count--;
    }
    pthread_mutex_unlock(&srv->peer_lock);
}

/* ---- back-pressure and closing --------------------------------------------------------- */

/* Reads pause while the connection holds more than max_out, or the server more than
 * max_out_total. A connection that holds nothing (no answer queued, none waiting) may always
 * send one more request, so a client that reads its answers is never shut out by others. */
static int conn_over_limit(const conn_t *c) {
    const dsc_server_t *srv = c->lc->srv;
    if (c->pending_loads >= MAX_PENDING_LOADS)
        return 1;
    if (c->out_bytes + c->reserved == 0)
        return 0;
    return conn_held(c) > srv->opt.max_out ||
           atomic_load_explicit(&((dsc_server_t *)srv)->held_total, memory_order_relaxed) >
               max_out_total(srv);
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf) {
    (void)suggested;
    conn_t *c = handle->data;
    if (c->in == NULL) {
        c->in = malloc(IN_BUF_INITIAL);
        c->in_cap = c->in ? IN_BUF_INITIAL : 0;
        held_update(c);
    }
    if (c->in == NULL) { /* out of memory: libuv reports UV_ENOBUFS, the connection closes */
        buf->base = NULL;
        buf->len = 0;
        return;
    }
    buf->base = (char *)c->in + c->in_len;
    buf->len = c->in_cap - c->in_len;
}

/* Room for a frame of `need` bytes (header + body, at most IN_BUF_MAX). Returns 0 or -1. */
static int in_reserve(conn_t *c, size_t need) {
    if (need <= c->in_cap)
        return 0;
    uint8_t *grown = realloc(c->in, need);
    if (grown == NULL)
        return -1;
    c->in = grown;
    c->in_cap = need;
    held_update(c);
    return 0;
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);

static void conn_update_reading(conn_t *c) {
    if (c->closing || c->close_when_idle)
        return;
    int want = !conn_over_limit(c) && (c->in == NULL || c->in_len < c->in_cap);
    if (want && !c->reading) {
        if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0) {
            c->reading = 1;
            /* The header time-out runs while the client could send: not during a pause. */
            if (c->in_len > 0)
                c->frame_start = uv_now(&c->lc->loop);
        }
    } else if (!want && c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = 0;
        atomic_fetch_add_explicit(&c->lc->srv->paused_reads, 1, memory_order_relaxed);
    }
}

static void conn_maybe_idle_close(conn_t *c) {
    /* Answers still queued (fq_queued) go out first; a closing connection's are dropped. */
    if (c->close_when_idle && !c->closing && c->writes == 0 && c->pending_loads == 0 &&
        c->fq_queued == 0)
        conn_close(c);
}

/* After a write or a load finished: handle frames buffered during a pause, read again. */
static void conn_resume(conn_t *c) {
    if (c->closing)
        return;
    if (!c->close_when_idle && !conn_over_limit(c))
        conn_process(c);
    conn_maybe_idle_close(c);
}

static void on_close(uv_handle_t *handle) {
    conn_unref(handle->data);
}

static void msgs_release(conn_t *c, out_msg_t *m);

#define MSG_OF(it) ((out_msg_t *)(void *)((char *)(it)-offsetof(out_msg_t, fq)))

/* dsc_fq_remove's test (under the budget lock): the message is c's; it goes on a list released
 * once the lock is given back. */
typedef struct dropped {
    conn_t *c;
    out_msg_t *list;
} dropped_t;

static int drop_if_of(dsc_fq_item_t *it, void *arg) {
    dropped_t *d = arg;
    out_msg_t *m = MSG_OF(it);
    if (m->c != d->c)
        return 0;
    m->next = d->list;
    d->list = m;
    return 1;
}

static void conn_close(conn_t *c) {
    if (c->closing)
        return;
    c->closing = 1;
    if (c->fq_queued > 0) { /* its queued answers will not be sent: their holds go now */
        dsc_server_t *srv = c->lc->srv;
        dropped_t d = {c, NULL};
        pthread_mutex_lock(&srv->send_budget.lock);
        uint32_t n = dsc_fq_remove(&srv->fq, c->flow, drop_if_of, &d);
        pthread_mutex_unlock(&srv->send_budget.lock);
        c->fq_queued -= n; /* those in the loop's inbox are dropped when it is read */
        c->refs -= (int)n; /* c's own handle reference remains: not freed here */
        msgs_release(c, d.list);
    }
    held_update(c);
    dsc_srv_loop_t *lc = c->lc;
    if (c->peer_counted)
        peer_release(lc->srv, c->peer);
    c->peer_counted = 0;
    if (c->reply.ops->close) /* a layer's state first (RDMA: its QP, then its leases) */
        c->reply.ops->close(&c->reply);
    if (c->prev)
        c->prev->next = c->next;
    else
        lc->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    lc->conn_count--;
    atomic_fetch_sub_explicit(&lc->srv->connections, 1, memory_order_relaxed);
    uv_close((uv_handle_t *)&c->tcp, on_close);
    dsc__loop_maybe_finish(lc);
}

/* ---- writing responses ----------------------------------------------------------------- */

/* Releases a list of responses (written or not) and their share of out_bytes. */
static void msgs_release(conn_t *c, out_msg_t *m) {
    while (m) {
        out_msg_t *next = m->next;
        dsc_hold_release(c->lc->srv->cat, &m->hold);
        c->out_bytes -= m->bytes;
        free(m);
        m = next;
    }
    held_update(c);
}

static void on_write(uv_write_t *req, int status) {
    out_msg_t *m = req->data;
    conn_t *c = m->c;
    msgs_release(c, m);
    c->writes--;
    if (status >= 0)
        c->last_activity = uv_now(&c->lc->loop);
    if (status < 0)
        conn_close(c); /* peer gone mid-response: the holds are released, nothing else to do */
    else
        conn_resume(c);
    conn_unref(c);
}

/* Writes the collected responses with one uv_write (which tries writev at once). */
static void conn_flush(conn_t *c) {
    out_msg_t *first = c->batch_head;
    if (first == NULL)
        return;
    unsigned nbufs = c->batch_bufs;
    c->batch_head = c->batch_tail = NULL;
    c->batch_bytes = 0;
    c->batch_bufs = 0;
    if (c->closing) {
        msgs_release(c, first);
        return;
    }
    uv_buf_t many[BATCH_MAX_BUFS];
    uv_buf_t *bufs = first->bufs;
    if (first->next) {
        /* submit() keeps a list within BATCH_MAX_BUFS; uv_write copies the array. */
        unsigned n = 0;
        for (out_msg_t *m = first; m; m = m->next) {
            memcpy(many + n, m->bufs, m->nbufs * sizeof *bufs);
            n += m->nbufs;
        }
        bufs = many;
    }
    first->req.data = first;
    int rc = uv_write(&first->req, (uv_stream_t *)&c->tcp, bufs, nbufs, on_write);
    if (rc < 0) {
        msgs_release(c, first);
        conn_close(c);
        return;
    }
    c->writes++;
    c->refs++;
}

static void batch_add(conn_t *c, out_msg_t *m) {
    if (c->batch_tail)
        c->batch_tail->next = m;
    else
        c->batch_head = m;
    c->batch_tail = m;
    c->batch_bufs += m->nbufs;
    c->batch_bytes += m->bytes;
}

/* The weight of a job, its credential's and name's (--job-weight; 1 when not configured): a
 * credential naming another's job gets a job of its own, of weight 1. */
static uint32_t job_weight(const dsc_server_t *srv, const char *owner, const char *job) {
    for (uint32_t i = 0; i < srv->opt.job_weight_count; i++)
        if (strcmp(srv->opt.job_weights[i].name, job) == 0 &&
            strcmp(srv->opt.job_weights[i].owner, owner) == 0)
            return srv->opt.job_weights[i].weight;
    return 1;
}

/* c's flow in the loop's fair queue: its job's (reply.job, from its REPORTs), else its own. A
 * connection changes flows only while none of its answers is queued, so that its answers keep
 * their order. Returns 0 or -1 (out of memory). */
static int conn_flow(conn_t *c) {
    const char *job = c->reply.job;
    const char *owner = c->reply.auth.state == DSC_AUTH_STATE_OK ? c->reply.auth.name : "";
    if (c->flow != NULL &&
        (c->fq_queued > 0 || (strcmp(c->flow->name, job) == 0 &&
                              (job[0] == '\0' || strcmp(c->flow->owner, owner) == 0))))
        return 0;
    dsc_server_t *srv = c->lc->srv;
    pthread_mutex_lock(&srv->send_budget.lock);
    dsc_fq_flow_t *f = dsc_fq_flow_get(&srv->fq, owner, job, job_weight(srv, owner, job));
    if (f != NULL) {
        dsc_fq_flow_put(&srv->fq, c->flow);
        c->flow = f;
    }
    pthread_mutex_unlock(&srv->send_budget.lock);
    return f != NULL || c->flow != NULL ? 0 : -1;
}

static out_msg_t *msg_alloc(size_t head_len, unsigned nbufs);

/* Under the budget lock. */
static void fair_push_piece(conn_t *c, out_msg_t *m, uint64_t now) {
    m->c = c;
    m->next = NULL;
    m->fq.bytes = m->bytes;
    c->fq_queued++;
    c->refs++;
    dsc_fq_push(&c->lc->srv->fq, c->flow, &m->fq, now);
}

/* Queues m (its bytes already counted in out_bytes) under c's flow, in pieces of at most
 * FAIR_PIECE bytes: m itself carries the first, with the whole of its first buffer (the frame
 * header and the prefix or copied body, which live in m and go when m's write completes), new
 * messages the rest, which point only into the hold; the last piece carries the hold. Returns 0,
 * or -1 out of memory: the pieces queued stay (the connection must close, which drops them) and
 * the rest, the hold included, is released. */
static int fair_push_locked(conn_t *c, out_msg_t *m, uint64_t now) {
    if (m->bytes <= FAIR_PIECE || m->nbufs == 1) {
        fair_push_piece(c, m, now);
        return 0;
    }
    unsigned n = m->nbufs;
    uv_buf_t *all = malloc(n * sizeof *all);
    if (all == NULL) {
        c->out_bytes -= m->bytes;
        dsc_hold_release(c->lc->srv->cat, &m->hold);
        free(m);
        return -1;
    }
    memcpy(all, m->bufs, n * sizeof *all);
    dsc_hold_t hold = m->hold;
    memset(&m->hold, 0, sizeof m->hold);
    uint64_t left = m->bytes;
    unsigned i = 0;
    size_t off = 0;
    out_msg_t *cur = m, *last = NULL;
    while (i < n) {
        /* The bufs of the next piece: from (i, off) up to FAIR_PIECE bytes. */
        unsigned k = 0, j = i;
        size_t o = off, bytes = 0;
        size_t cap = cur == m && all[0].len > FAIR_PIECE ? all[0].len : FAIR_PIECE;
        while (j < n && (bytes < cap || all[j].len == o)) {
            size_t take = all[j].len - o;
            if (take > cap - bytes)
                take = cap - bytes;
            bytes += take;
            k++;
            if (o + take == all[j].len) {
                j++;
                o = 0;
            } else {
                o += take;
            }
        }
        if (cur == NULL && (cur = msg_alloc(0, k)) == NULL) {
            c->out_bytes -= left;
            dsc_hold_release(c->lc->srv->cat, &hold);
            free(all);
            held_update(c);
            return -1;
        }
        size_t jo = off;
        for (unsigned b = 0, jj = i; b < k; b++) {
            size_t take = all[jj].len - jo;
            if (take > bytes)
                take = bytes;
            cur->bufs[b] = uv_buf_init(all[jj].base + jo, (unsigned)take);
            jo = 0;
            jj++;
        }
        /* The last buf of the piece may end inside all[j - 1]: trimmed to the piece's size. */
        size_t sum = 0;
        for (unsigned b = 0; b < k; b++) {
            if (sum + cur->bufs[b].len > bytes)
                cur->bufs[b].len = (unsigned)(bytes - sum);
            sum += cur->bufs[b].len;
        }
        cur->nbufs = k;
        cur->bytes = bytes;
        left -= bytes;
        fair_push_piece(c, cur, now);
        last = cur;
        cur = NULL;
        i = j;
        off = o;
    }
    last->hold = hold;
    free(all);
    return 0;
}

static int fair_push(conn_t *c, out_msg_t *m, uint64_t now) {
    dsc_server_t *srv = c->lc->srv;
    pthread_mutex_lock(&srv->send_budget.lock);
    int rc = fair_push_locked(c, m, now);
    pthread_mutex_unlock(&srv->send_budget.lock);
    return rc;
}

/* Batches a list of pieces taken off the queue for connections of this loop (next-linked) and
 * writes them, one writev per connection; each piece's connection reference is dropped. */
static void fair_write(out_msg_t *list) {
    conn_t *dirty = NULL;
    while (list) {
        out_msg_t *m = list;
        list = m->next;
        m->next = NULL;
        conn_t *c = m->c;
        c->fq_queued--;
        if (c->batch_head &&
            (c->batch_bufs + m->nbufs > BATCH_MAX_BUFS || c->batch_bytes >= BATCH_MAX_BYTES))
            conn_flush(c);
        if (c->closing) {
            msgs_release(c, m);
            conn_unref(c);
            continue;
        }
        batch_add(c, m);
        if (!c->dirty) {
            c->dirty = 1;
            c->refs++; /* a failed write closes c: it stays allocated until the list is done */
            c->dirty_next = dirty;
            dirty = c;
        }
        conn_unref(c); /* the piece's reference (the dirty list's keeps c) */
    }
    while (dirty) {
        conn_t *c = dirty;
        dirty = c->dirty_next;
        c->dirty = 0;
        conn_flush(c);
        conn_unref(c);
    }
}

/* With --send-rate: takes the queued answers of every loop's connections off the server's
 * queue, in deficit round-robin order between jobs (arrival order with --fair off), while the
 * budget allows; this loop's are written here, the others' go to their loop's inbox (woken).
 * Then waits for the budget (fair_timer) while answers remain. */
static void fair_service(dsc_srv_loop_t *lc) {
    dsc_server_t *srv = lc->srv;
    if (srv->opt.send_rate == 0)
        return;
    uint64_t now = uv_hrtime(), wait_ns = 0, spent = 0;
    double tokens = dsc_fq_budget_take(&srv->send_budget, now, &wait_ns);
    if (srv->fq.queued == 0) {
        dsc_fq_budget_spend(&srv->send_budget, 0, 0);
        return;
    }
    uint64_t wake[(DSC_TCP_MAX_LOOPS + 63) / 64] = {0}; /* other loops given pieces */
    while (tokens - (double)spent > 0) {
        dsc_fq_item_t *it = dsc_fq_pop(&srv->fq, now);
        if (it == NULL)
            break;
        out_msg_t *m = MSG_OF(it);
        m->next = NULL;
        spent += m->bytes;
        /* Every piece goes through its loop's inbox, this loop's too: a connection's pieces
         * are written in the order they left the queue, whichever loop took them off. */
        dsc_srv_loop_t *to = m->c->lc;
        if (to->fair_inbox_tail)
            to->fair_inbox_tail->next = m;
        else
            to->fair_inbox_head = m;
        to->fair_inbox_tail = m;
        uint32_t k = (uint32_t)(to - srv->loops);
        if (to == lc)
            continue;
        if (k < DSC_TCP_MAX_LOOPS)
            wake[k / 64] |= UINT64_C(1) << (k % 64);
        else
            uv_async_send(&to->wake);
    }
    int waiting = srv->fq.queued > 0;
    double left = tokens - (double)spent;
    dsc_fq_budget_spend(&srv->send_budget, spent, waiting);
    atomic_fetch_add_explicit(&srv->bytes_out, spent, memory_order_relaxed);
    /* Each of those loops has connections with pieces in its inbox: it has not finished. */
    for (uint32_t k = 0; k < srv->loop_count && k < DSC_TCP_MAX_LOOPS; k++)
        if (wake[k / 64] & (UINT64_C(1) << (k % 64)))
            uv_async_send(&srv->loops[k].wake);
    pthread_mutex_lock(&srv->send_budget.lock);
    out_msg_t *mine = lc->fair_inbox_head;
    lc->fair_inbox_head = lc->fair_inbox_tail = NULL;
    pthread_mutex_unlock(&srv->send_budget.lock);
    fair_write(mine);
    if (waiting && !uv_is_active((uv_handle_t *)&lc->fair_timer) && srv->opt.send_rate) {
        if (left > 0)
            wait_ns = 0;
        else if (wait_ns == 0)
            wait_ns = (uint64_t)((1.0 - left) * 1e9 / (double)srv->opt.send_rate);
        uint64_t ms = (wait_ns + 999999) / 1000000;
        uv_timer_start(&lc->fair_timer, dsc__tcp_on_fair_timer, ms ? ms : 1, 0);
    }
}

void dsc__tcp_fair_inbox(dsc_srv_loop_t *lc) {
    dsc_server_t *srv = lc->srv;
    if (srv->opt.send_rate == 0)
        return;
    pthread_mutex_lock(&srv->send_budget.lock);
    out_msg_t *list = lc->fair_inbox_head;
    lc->fair_inbox_head = lc->fair_inbox_tail = NULL;
    int waiting = srv->fq.queued > 0;
    pthread_mutex_unlock(&srv->send_budget.lock);
    fair_write(list);
    /* Another loop's service armed its own timer; this one serves too, so that a loop that
     * went idle does not leave the queue to the others' timers alone. */
    if (waiting && srv->opt.send_rate && !uv_is_active((uv_handle_t *)&lc->fair_timer) &&
        !lc->stopping)
        uv_timer_start(&lc->fair_timer, dsc__tcp_on_fair_timer, 1, 0);
    dsc__loop_maybe_finish(lc);
}

void dsc__tcp_on_fair_timer(uv_timer_t *timer) {
    fair_service(timer->data);
}

/* Queues m (bufs filled, hold set): collected while conn_process runs, else written at once
 * (with --send-rate: into the loop's fair queue). On failure releases everything and closes. */
static void submit(conn_t *c, out_msg_t *m) {
    m->c = c;
    m->next = NULL;
    m->bytes = 0;
    for (unsigned i = 0; i < m->nbufs; i++)
        m->bytes += m->bufs[i].len;
    if (c->closing) {
        dsc_hold_release(c->lc->srv->cat, &m->hold);
        free(m);
        return;
    }
    if (c->batch_head &&
        (c->batch_bufs + m->nbufs > BATCH_MAX_BUFS || c->batch_bytes >= BATCH_MAX_BYTES))
        conn_flush(c);
    if (c->closing) {
        dsc_hold_release(c->lc->srv->cat, &m->hold);
        free(m);
        return;
    }
    if (c->lc->srv->opt.send_rate != 0) {
        /* Under the send budget: queued under the connection's job, sent by fair_service. */
        if (conn_flow(c) < 0) {
            LOG_ERROR("out of memory queueing an answer: closing the connection");
            dsc_hold_release(c->lc->srv->cat, &m->hold);
            free(m);
            conn_close(c);
            return;
        }
        c->out_bytes += m->bytes;
        held_update(c);
        if (fair_push(c, m, uv_hrtime()) < 0) {
            LOG_ERROR("out of memory queueing an answer: closing the connection");
            conn_close(c);
            return;
        }
        if (!c->batching)
            fair_service(c->lc);
        return;
    }
    batch_add(c, m);
    c->out_bytes += m->bytes;
    held_update(c);
    atomic_fetch_add_explicit(&c->lc->srv->bytes_out, m->bytes, memory_order_relaxed);
    if (!c->batching)
        conn_flush(c);
}

static out_msg_t *msg_alloc(size_t head_len, unsigned nbufs) {
    size_t extra = nbufs > INLINE_BUFS ? nbufs * sizeof(uv_buf_t) : 0;
    out_msg_t *m = malloc(sizeof *m + head_len + extra);
    if (m == NULL)
        return NULL;
    memset(m, 0, sizeof *m);
    m->bufs = nbufs > INLINE_BUFS ? (uv_buf_t *)(void *)(m->head + head_len) : m->inline_bufs;
    m->nbufs = nbufs;
    return m;
}

/* ---- the TCP reply ----------------------------------------------------------------------- */

/* A frame with a copied body (small answers). status != OK makes it an error frame. */
static void reply_frame(dsc_reply_t *reply, uint8_t opcode, uint64_t id, uint32_t status,
                        const void *body, size_t len) {
    conn_t *c = (conn_t *)reply;
    /* Leave room so that the buffer array behind head stays aligned. */
    size_t head_len = (DSC_FRAME_HEADER_SIZE + len + 15) & ~(size_t)15;
    out_msg_t *m = msg_alloc(head_len, 1);
    if (m == NULL) {
        LOG_ERROR("out of memory answering a request: closing the connection");
        conn_close(c);
        return;
    }
    dsc_frame_header_t h = {.version = DSC_PROTO_VERSION,
                            .opcode = opcode,
                            .flags = DSC_FLAG_RESPONSE,
                            .status = status,
                            .request_id = id,
                            .body_len = (uint32_t)len};
    dsc_frame_header_encode(&h, m->head);
    if (len)
        memcpy(m->head + DSC_FRAME_HEADER_SIZE, body, len);
    m->bufs[0] = uv_buf_init((char *)m->head, (unsigned)(DSC_FRAME_HEADER_SIZE + len));
    submit(c, m);
}

/* A frame whose body the caller writes in place (MGET: gathered from several holds). */
static int reply_frame_fill(dsc_reply_t *reply, uint8_t opcode, uint64_t id, size_t len,
                            void (*fill)(void *arg, uint8_t *body), void *arg) {
    conn_t *c = (conn_t *)reply;
    if (len > DSC_FRAME_MAX_BODY)
        return DSC_EINVAL;
    size_t head_len = (DSC_FRAME_HEADER_SIZE + len + 15) & ~(size_t)15;
    out_msg_t *m = msg_alloc(head_len, 1);
    if (m == NULL)
        return DSC_ENOMEM;
    dsc_frame_header_t h = {.version = DSC_PROTO_VERSION,
                            .opcode = opcode,
                            .flags = DSC_FLAG_RESPONSE,
                            .status = DSC_STATUS_OK,
                            .request_id = id,
                            .body_len = (uint32_t)len};
    dsc_frame_header_encode(&h, m->head);
    fill(arg, m->head + DSC_FRAME_HEADER_SIZE);
    m->bufs[0] = uv_buf_init((char *)m->head, (unsigned)(DSC_FRAME_HEADER_SIZE + len));
    submit(c, m);
    return 0;
}

/* Sends an error and closes the connection once it is written (the stream cannot be trusted
 * to be at a frame boundary any more). */
static void reply_fatal(dsc_reply_t *reply, uint8_t opcode, uint64_t id, uint32_t status,
                        const char *message) {
    conn_t *c = (conn_t *)reply;
    atomic_fetch_add_explicit(&c->lc->srv->protocol_errors, 1, memory_order_relaxed);
    LOG_DEBUG("closing a connection: %s", message);
    size_t len = strlen(message);
    if (len > DSC_ERROR_MAX_MESSAGE)
        len = DSC_ERROR_MAX_MESSAGE;
    reply_frame(reply, opcode, id, status, message, len);
    conn_flush(c);
    fair_service(c->lc);
    c->close_when_idle = 1;
    if (c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = 0;
    }
    c->in_len = 0;
    conn_maybe_idle_close(c);
}

/* One buffer for the header + prefix, then one per run of chunks adjacent in the shard, pointing
 * into the hold: no copy. The hold is released by msgs_release once the write completes. */
static int reply_get(dsc_reply_t *reply, const dsc_get_answer_t *answer, dsc_hold_t *hold) {
    conn_t *c = (conn_t *)reply;
    const dsc_chunk_entry_t *entries = answer->entries;
    uint32_t count = answer->count;
    unsigned runs = 0;
    uint64_t run_end = UINT64_MAX;
    for (uint32_t i = 0; i < count; i++) {
        if (entries[i].offset != run_end)
            runs++;
        run_end = entries[i].offset + entries[i].stored_len;
    }
    size_t head_len = (DSC_FRAME_HEADER_SIZE + DSC_GET_RESP_PREFIX(count) + 15) & ~(size_t)15;
    out_msg_t *m = msg_alloc(head_len, 1 + runs);
    if (m == NULL)
        return DSC_ENOMEM;
    dsc_frame_header_t h = {.version = DSC_PROTO_VERSION,
                            .opcode = DSC_OP_GET,
                            .flags = DSC_FLAG_RESPONSE,
                            .status = DSC_STATUS_OK,
                            .request_id = answer->request_id,
                            .body_len = (uint32_t)(DSC_GET_RESP_PREFIX(count) + answer->data_len)};
    dsc_frame_header_encode(&h, m->head);
    int n = dsc_get_resp_prefix_encode(entries, count, m->head + DSC_FRAME_HEADER_SIZE,
                                       head_len - DSC_FRAME_HEADER_SIZE);
    if (n < 0) {
        free(m);
        return DSC_EINVAL;
    }
    m->bufs[0] = uv_buf_init((char *)m->head, (unsigned)(DSC_FRAME_HEADER_SIZE + n));
    unsigned b = 0;
    run_end = UINT64_MAX;
    for (uint32_t i = 0; i < count; i++) {
        if (entries[i].offset != run_end) {
            b++;
            m->bufs[b] = uv_buf_init((char *)hold->data + entries[i].offset, 0);
        }
        m->bufs[b].len += entries[i].stored_len;
        run_end = entries[i].offset + entries[i].stored_len;
    }
    m->hold = *hold;
    memset(hold, 0, sizeof *hold);
    submit(c, m);
    return 0;
}

static void reply_wait_begin(dsc_reply_t *reply, uint64_t reserve) {
    conn_t *c = (conn_t *)reply;
    c->pending_loads++;
    c->reserved += reserve;
    c->lc->waiting++;
    c->refs++;
    held_update(c);
}

static void reply_wait_end(dsc_reply_t *reply, uint64_t reserve) {
    conn_t *c = (conn_t *)reply;
    dsc_srv_loop_t *lc = c->lc;
    c->pending_loads--;
    c->reserved -= reserve;
    lc->waiting--;
    held_update(c);
    conn_resume(c);
    conn_unref(c);
    dsc__loop_maybe_finish(lc); /* a stopping loop waits for its last load */
}

static int reply_closing(const dsc_reply_t *reply) {
    return ((const conn_t *)reply)->closing;
}

static const dsc_reply_ops_t tcp_reply_ops = {
    .frame = reply_frame,
    .fatal = reply_fatal,
    .get = reply_get,
    .frame_fill = reply_frame_fill,
    .wait_begin = reply_wait_begin,
    .wait_end = reply_wait_end,
    .closing = reply_closing,
};

/* ---- reading and framing ----------------------------------------------------------------- */

/* Handles every complete frame in the input buffer, stopping while back-pressure applies. */
static void conn_process(conn_t *c) {
    size_t pos = 0;
    c->batching = 1;
    while (c->in != NULL && !c->closing && !c->close_when_idle && !conn_over_limit(c)) {
        dsc_frame_header_t h;
        int rc = dsc_frame_header_decode(c->in + pos, c->in_len - pos, MAX_REQUEST_BODY, &h);
        if (rc == 0)
            break;
        if (rc < 0) {
            uint32_t status = rc == DSC_ETOOLARGE  ? DSC_STATUS_TOO_LARGE
                              : rc == DSC_EVERSION ? DSC_STATUS_VERSION_MISMATCH
                                                   : DSC_STATUS_BAD_REQUEST;
            /* The header may be garbage: answer with what can be read of it. */
            uint64_t id = c->in_len - pos >= 20 ? dsc_load_u64(c->in + pos + 12) : 0;
            uint8_t opcode = c->in_len - pos >= 6 ? c->in[pos + 5] : 0;
            c->batching = 0;
            dsc__server_count_request(c->lc->srv, opcode, status);
            reply_fatal(&c->reply, opcode, id, status, dsc_strerror(rc));
            return;
        }
        if (c->in_len - pos < DSC_FRAME_HEADER_SIZE + (size_t)h.body_len) {
            if (pos == 0 && in_reserve(c, DSC_FRAME_HEADER_SIZE + (size_t)h.body_len) < 0) {
                LOG_ERROR("out of memory receiving a request: closing the connection");
                c->batching = 0;
                conn_flush(c);
                conn_close(c);
                return;
            }
            break;
        }
        dsc__dispatch_frame(c->lc->srv, &c->reply, &h, c->in + pos + DSC_FRAME_HEADER_SIZE);
        pos += DSC_FRAME_HEADER_SIZE + h.body_len;
    }
    c->batching = 0;
    conn_flush(c);
    fair_service(c->lc);
    if (c->closing || c->close_when_idle)
        return;
    if (pos > 0) {
        memmove(c->in, c->in + pos, c->in_len - pos);
        c->in_len -= pos;
        c->frame_start = c->in_len > 0 ? uv_now(&c->lc->loop) : 0;
    }
    if (c->in_len == 0 && c->in) {
        free(c->in);
        c->in = NULL;
        c->in_cap = 0;
        held_update(c);
    } else if (c->in_len > 0 && c->in_len == c->in_cap && c->in_cap < IN_BUF_MAX &&
               in_reserve(c, c->in_cap * 2 < IN_BUF_MAX ? c->in_cap * 2 : IN_BUF_MAX) < 0) {
        conn_close(c);
        return;
    }
    conn_update_reading(c);
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
    (void)buf;
    conn_t *c = stream->data;
    if (nread == 0)
        return;
    if (nread < 0) {
        uv_read_stop(stream);
        c->reading = 0;
        if (nread == UV_EOF) {
            /* The peer stopped sending: finish what it asked for, then close. */
            c->close_when_idle = 1;
            conn_maybe_idle_close(c);
        } else {
            conn_close(c);
        }
        return;
    }
    if (c->in_len == 0 && c->reply.hello)
        c->frame_start = uv_now(&c->lc->loop); /* before HELLO: due since the connection opened */
    c->in_len += (size_t)nread;
    c->last_activity = uv_now(&c->lc->loop);
    c->refs++; /* conn_process may close c */
    conn_process(c);
    conn_unref(c);
}

/* Links a connection whose handle is open into its loop and starts reading. */
static void conn_start(conn_t *c) {
    dsc_srv_loop_t *lc = c->lc;
    uv_tcp_nodelay(&c->tcp, 1);
    uv_os_fd_t fd;
    int lowat = NOTSENT_LOWAT;
    if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0)
        setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, sizeof lowat); /* best effort */
    struct sockaddr_storage peer;
    int peer_len = (int)sizeof peer;
    snprintf(c->reply.peer, sizeof c->reply.peer, "?");
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&peer, &peer_len) == 0)
        uv_ip_name((struct sockaddr *)&peer, c->reply.peer, sizeof c->reply.peer);
    c->next = lc->conns;
    if (lc->conns)
        lc->conns->prev = c;
    lc->conns = c;
    c->last_activity = c->frame_start = uv_now(&lc->loop); /* HELLO is due from now */
    lc->conn_count++;
    atomic_fetch_add_explicit(&lc->srv->connections, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&lc->srv->connections_total, 1, memory_order_relaxed);
    conn_update_reading(c);
}

static conn_t *conn_new(dsc_srv_loop_t *lc) {
    conn_t *c = calloc(1, sizeof *c);
    if (c == NULL) {
        LOG_ERROR("out of memory accepting a connection: dropping it");
        return NULL;
    }
    c->reply.ops = &tcp_reply_ops;
    c->reply.mailbox = &lc->mailbox;
    c->reply.loop = &lc->loop;
    c->reply.tcp = &c->tcp;
    c->lc = lc;
    c->refs = 1;
    uv_tcp_init(&lc->loop, &c->tcp);
    c->tcp.data = c;
    return c;
}

void dsc__tcp_adopt(dsc_srv_loop_t *lc, int fd) {
    uint8_t peer[16];
    peer_key(fd, peer);
    if (lc->stopping || !peer_acquire(lc->srv, peer)) {
        close(fd);
        return;
    }
    conn_t *c = conn_new(lc);
    if (c == NULL) {
        peer_release(lc->srv, peer);
        close(fd);
        return;
    }
    memcpy(c->peer, peer, sizeof peer);
    c->peer_counted = 1;
    if (uv_tcp_open(&c->tcp, fd) != 0) {
        close(fd);
        peer_release(lc->srv, peer);
        c->peer_counted = 0;
        uv_close((uv_handle_t *)&c->tcp, on_close);
        return;
    }
    conn_start(c);
}

/* Any thread: queues an accepted socket for loop `to`. Takes the fd (closed when the loop is
 * finishing or memory is short). */
static void handoff_push(dsc_srv_loop_t *to, int fd) {
    pthread_mutex_lock(&to->mb_lock);
    if (!to->handoff_closed && to->handoff_len == to->handoff_cap) {
        uint32_t cap = to->handoff_cap ? to->handoff_cap * 2 : 16;
        int *grown = realloc(to->handoff, cap * sizeof *grown);
        if (grown) {
            to->handoff = grown;
            to->handoff_cap = cap;
        }
    }
    int queued = !to->handoff_closed && to->handoff_len < to->handoff_cap;
    if (queued) {
        to->handoff[to->handoff_len++] = fd;
        /* Under the lock: the loop closes its wake handle only after setting handoff_closed. */
        uv_async_send(&to->wake);
    }
    pthread_mutex_unlock(&to->mb_lock);
    if (!queued)
        close(fd);
}

/* Out of descriptors (EMFILE/ENFILE) or kernel memory: libuv's listener would retry accept at
 * once, forever, on every loop. Instead the spare descriptor is given up to accept and close the
 * connections waiting (their clients see a close at once, not a hang), and accepting pauses,
 * 100 ms doubling to 1 s, while the connections already open go on being served. */
static void accept_back_off(dsc_srv_loop_t *lc, int err) {
    if (lc->reserve_fd >= 0) {
        close(lc->reserve_fd);
        lc->reserve_fd = -1;
        for (int i = 0; i < ACCEPT_BATCH; i++) {
            int fd = accept4(lc->listen_fd, NULL, NULL, SOCK_CLOEXEC);
            if (fd < 0)
                break;
            close(fd);
        }
    }
    lc->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC); /* -1: retried next time */
    uint32_t delay = lc->accept_backoff_ms ? lc->accept_backoff_ms * 2 : ACCEPT_BACKOFF_MIN_MS;
    if (delay > ACCEPT_BACKOFF_MAX_MS)
        delay = ACCEPT_BACKOFF_MAX_MS;
    if (lc->accept_backoff_ms == 0)
        LOG_WARN("accept: %s: shedding waiting connections, accepting again in %u ms and "
                 "backing off up to %u ms while it lasts",
                 dsc_strerror(-err), delay, (unsigned)ACCEPT_BACKOFF_MAX_MS);
    lc->accept_backoff_ms = delay;
    uv_poll_stop(&lc->accept_poll);
    uv_timer_start(&lc->accept_timer, dsc__tcp_on_accept_timer, delay, 0);
}

void dsc__tcp_on_accept_timer(uv_timer_t *timer) {
    dsc_srv_loop_t *lc = timer->data;
    if (!lc->stopping)
        uv_poll_start(&lc->accept_poll, UV_READABLE, dsc__tcp_on_acceptable);
}

/* SO_REUSEPORT spreads connections by a hash of their addresses, which with a few connections
 * often puts two busy ones on one loop while another idles. Whichever listener accepts, the
 * connection goes to the loops in turn. */
void dsc__tcp_on_acceptable(uv_poll_t *poll, int status, int events) {
    (void)events;
    dsc_srv_loop_t *lc = poll->data;
    dsc_server_t *srv = lc->srv;
    if (lc->stopping)
        return;
    if (status < 0) {
        accept_back_off(lc, status);
        return;
    }
    for (int i = 0; i < ACCEPT_BATCH; i++) {
        int fd = accept4(lc->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            int err = errno;
            if (err == EINTR || err == ECONNABORTED || err == EPROTO)
                continue;
            if (err != EAGAIN && err != EWOULDBLOCK)
                accept_back_off(lc, -err);
            return;
        }
        if (lc->accept_backoff_ms) {
            LOG_INFO("accept: descriptors available again");
            lc->accept_backoff_ms = 0;
        }
        uint32_t target = srv->loop_count > 1 ? atomic_fetch_add_explicit(&srv->next_loop, 1,
                                                                          memory_order_relaxed) %
                                                    srv->loop_count
                                              : 0;
        dsc_srv_loop_t *to = &srv->loops[target];
        if (to == lc)
            dsc__tcp_adopt(lc, fd);
        else
            handoff_push(to, fd);
    }
}

/* Header and idle time-outs; connections paused only by the server-wide bound read again when
 * it allows (nothing else would wake them: the bytes were freed on other connections). */
void dsc__tcp_on_tick(uv_timer_t *timer) {
    dsc_srv_loop_t *lc = timer->data;
    dsc_server_t *srv = lc->srv;
    uint64_t now = uv_now(&lc->loop);
    uint32_t header_s =
        srv->opt.header_timeout_s ? srv->opt.header_timeout_s : HEADER_TIMEOUT_DEFAULT_S;
    uint64_t header_ms = header_s == UINT32_MAX ? 0 : (uint64_t)header_s * 1000;
    uint64_t idle_ms = (uint64_t)srv->opt.idle_timeout_s * 1000;
    for (conn_t *c = lc->conns, *next; c; c = next) {
        next = c->next;
        if (c->closing)
            continue;
        const char *why = NULL;
        if (header_ms && c->reading && c->frame_start && now - c->frame_start > header_ms)
            why = c->reply.hello ? "a request not received whole within the header time-out"
                                 : "no HELLO within the header time-out";
        else if (idle_ms && c->pending_loads == 0 && now - c->last_activity > idle_ms)
            why = "idle longer than the idle time-out";
        if (why) {
            atomic_fetch_add_explicit(&srv->timeouts, 1, memory_order_relaxed);
            LOG_DEBUG("closing a connection: %s", why);
            conn_close(c);
            continue;
        }
        /* Revocation at once: a reload that removed or narrowed this connection's credential. */
        int access = dsc__authz_recheck(&srv->authz, &c->reply.auth, c->reply.peer);
        if (access != 0 && c->reply.ops->revoke) /* a layer's QP / leases ended first */
            c->reply.ops->revoke(&c->reply, access < 0);
        if (access < 0) {
            static const char msg[] =
                "credential removed or changed by a reload: connection closed";
            dsc__server_count_request(srv, DSC_OP_AUTH, DSC_STATUS_UNAUTHORIZED);
            reply_frame(&c->reply, DSC_OP_AUTH, 0, DSC_STATUS_UNAUTHORIZED, msg, sizeof msg - 1);
            conn_close(c);
            continue;
        }
        if (!c->reading && !c->close_when_idle) {
            c->refs++;
            conn_resume(c);
            conn_unref(c);
        }
    }
}

/* Stop: requests already received whole (kept in the buffer by back-pressure) are answered
 * UNAVAILABLE rather than dropped; GETs waiting for loads are answered when the loads are
 * delivered (the catalog drops queued loads with DSC_EUNAVAIL); then each connection closes. */
void dsc__tcp_drain(dsc_srv_loop_t *lc) {
    for (conn_t *c = lc->conns, *next; c; c = next) {
        next = c->next;
        if (c->reading) {
            uv_read_stop((uv_stream_t *)&c->tcp);
            c->reading = 0;
        }
        if (!c->close_when_idle && c->reply.hello && c->in != NULL) {
            size_t pos = 0;
            dsc_frame_header_t h;
            c->batching = 1;
            while (dsc_frame_header_decode(c->in + pos, c->in_len - pos, MAX_REQUEST_BODY, &h) ==
                       DSC_FRAME_HEADER_SIZE &&
                   c->in_len - pos >= DSC_FRAME_HEADER_SIZE + (size_t)h.body_len) {
                static const char msg[] = "server stopping";
                dsc__server_count_request(lc->srv, h.opcode, DSC_STATUS_UNAVAILABLE);
                reply_frame(&c->reply, h.opcode, h.request_id, DSC_STATUS_UNAVAILABLE, msg,
                            sizeof msg - 1);
                pos += DSC_FRAME_HEADER_SIZE + h.body_len;
            }
            c->batching = 0;
            conn_flush(c);
            fair_service(lc);
        }
        c->in_len = 0;
        c->close_when_idle = 1;
        conn_maybe_idle_close(c);
    }
}

void dsc__tcp_close_all(dsc_srv_loop_t *lc) {
    while (lc->conns)
        conn_close(lc->conns);
}

/* ---- a loop's end -------------------------------------------------------------------------- */

/* Pieces handed to this loop by another one's service still hold closed connections: read
 * (dsc__tcp_fair_inbox, on the wake that follows) before the loop ends. */
static int fair_inbox_empty(dsc_srv_loop_t *lc) {
    dsc_server_t *srv = lc->srv;
    if (srv->opt.send_rate == 0)
        return 1;
    pthread_mutex_lock(&srv->send_budget.lock);
    int empty = lc->fair_inbox_head == NULL;
    pthread_mutex_unlock(&srv->send_budget.lock);
    return empty;
}

void dsc__loop_maybe_finish(dsc_srv_loop_t *lc) {
    if (lc->stopping && lc->conn_count == 0 && lc->waiting == 0 && fair_inbox_empty(lc) &&
        !uv_is_closing((uv_handle_t *)&lc->wake)) {
        pthread_mutex_lock(&lc->mb_lock);
        lc->handoff_closed = 1;
        for (uint32_t i = 0; i < lc->handoff_len; i++)
            close(lc->handoff[i]);
        free(lc->handoff);
        lc->handoff = NULL;
        lc->handoff_len = lc->handoff_cap = 0;
        pthread_mutex_unlock(&lc->mb_lock);
        uv_close((uv_handle_t *)&lc->wake, NULL);
        uv_close((uv_handle_t *)&lc->drain_timer, NULL);
        uv_close((uv_handle_t *)&lc->tick, NULL);
        uv_close((uv_handle_t *)&lc->fair_timer, NULL);
        if (lc == &lc->srv->loops[0] && lc->srv->layer != NULL)
            lc->srv->layer->unwatch(lc->srv); /* loop 0 watches the RDMA async events */
        if (lc->reserve_fd >= 0)
            close(lc->reserve_fd);
        lc->reserve_fd = -1;
    }
}

size_t dsc__tcp_conn_footprint(void) {
    return sizeof(conn_t) + IN_BUF_INITIAL;
}
