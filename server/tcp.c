/* TCP transport: connections over libuv. Accepting (sockets dealt to the loops in turn), reading
 * into a per-connection buffer and cutting it into frames, the write queue (the answers to one
 * read gathered into one writev), back-pressure (reads pause while too many answer bytes or
 * loads are outstanding), closing and draining; and the TCP reply (reply.h): a GET answer is a
 * header + prefix buffer and buffers pointing at the shard bytes in the store, whose hold is
 * released when the write completes. Requests themselves are handled by dispatch.c. */
#include "rdma.h"
#include "server_int.h"
#include "srvlog.h"
#include "util.h"
#include "wire.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Requests are small (a name and a few integers); anything larger is refused with TOO_LARGE. */
#define MAX_REQUEST_BODY (64u << 10)
#define IN_BUF_SIZE (MAX_REQUEST_BODY + DSC_FRAME_HEADER_SIZE + 4096)
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

typedef struct out_msg out_msg_t;

/* A connection. Its reply is first, so that a dsc_reply_t * is the connection. */
struct dsc_tcp_conn {
    dsc_reply_t reply;
    uv_tcp_t tcp;
    dsc_srv_loop_t *lc;
    dsc_tcp_conn_t *prev, *next;
    uint8_t *in;
    size_t in_len;
    uint64_t out_bytes;     /* response bytes queued in uv_write and not yet completed */
    uint32_t writes;        /* uv_write requests in flight */
    uint32_t pending_loads; /* GETs waiting for a load */
    out_msg_t *batch_head, *batch_tail; /* responses not yet handed to uv_write */
    uint64_t batch_bytes;
    unsigned batch_bufs;
    int refs; /* 1 for the open handle + writes + pending loads */
    unsigned closing : 1, reading : 1, close_when_idle : 1, paused : 1;
    unsigned batching : 1; /* inside conn_process: submit() collects instead of writing */
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
    uv_buf_t inline_bufs[INLINE_BUFS];
    uint8_t head[]; /* frame header + small body or GET prefix */
};

static void conn_close(conn_t *c);
static void conn_process(conn_t *c);

static void conn_unref(conn_t *c) {
    if (--c->refs == 0) {
        dsc__authz_conn_close(&c->reply.auth);
        free(c->in);
        free(c);
    }
}

/* ---- back-pressure and closing --------------------------------------------------------- */

static int conn_over_limit(const conn_t *c) {
    return c->out_bytes > c->lc->srv->opt.max_out || c->pending_loads >= MAX_PENDING_LOADS;
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf) {
    (void)suggested;
    conn_t *c = handle->data;
    buf->base = (char *)c->in + c->in_len;
    buf->len = IN_BUF_SIZE - c->in_len;
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);

static void conn_update_reading(conn_t *c) {
    if (c->closing || c->close_when_idle)
        return;
    int want = !conn_over_limit(c) && c->in_len < IN_BUF_SIZE;
    if (want && !c->reading) {
        if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0)
            c->reading = 1;
    } else if (!want && c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = 0;
        atomic_fetch_add_explicit(&c->lc->srv->paused_reads, 1, memory_order_relaxed);
    }
}

static void conn_maybe_idle_close(conn_t *c) {
    if (c->close_when_idle && !c->closing && c->writes == 0 && c->pending_loads == 0)
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

static void conn_close(conn_t *c) {
    if (c->closing)
        return;
    c->closing = 1;
    dsc_srv_loop_t *lc = c->lc;
    dsc__rdma_on_close(lc->srv, &c->reply); /* its QP is destroyed before its leases drop */
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
}

static void on_write(uv_write_t *req, int status) {
    out_msg_t *m = req->data;
    conn_t *c = m->c;
    msgs_release(c, m);
    c->writes--;
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

/* Queues m (bufs filled, hold set): collected while conn_process runs, else written at once.
 * On failure releases everything and closes. */
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
    if (c->batch_tail)
        c->batch_tail->next = m;
    else
        c->batch_head = m;
    c->batch_tail = m;
    c->batch_bufs += m->nbufs;
    c->batch_bytes += m->bytes;
    c->out_bytes += m->bytes;
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
    if (answer->opcode == DSC_OP_RDMA_GET)
        return dsc__rdma_reply_get(c->lc->srv, reply, answer, hold);
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

static void reply_wait_begin(dsc_reply_t *reply) {
    conn_t *c = (conn_t *)reply;
    c->pending_loads++;
    c->refs++;
}

static void reply_wait_end(dsc_reply_t *reply) {
    conn_t *c = (conn_t *)reply;
    c->pending_loads--;
    conn_resume(c);
    conn_unref(c);
}

static int reply_closing(const dsc_reply_t *reply) {
    return ((const conn_t *)reply)->closing;
}

static const dsc_reply_ops_t tcp_reply_ops = {
    .frame = reply_frame,
    .fatal = reply_fatal,
    .get = reply_get,
    .wait_begin = reply_wait_begin,
    .wait_end = reply_wait_end,
    .closing = reply_closing,
};

/* ---- reading and framing ----------------------------------------------------------------- */

/* Handles every complete frame in the input buffer, stopping while back-pressure applies. */
static void conn_process(conn_t *c) {
    size_t pos = 0;
    c->batching = 1;
    while (!c->closing && !c->close_when_idle && !conn_over_limit(c)) {
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
        if (c->in_len - pos < DSC_FRAME_HEADER_SIZE + (size_t)h.body_len)
            break;
        dsc__dispatch_frame(c->lc->srv, &c->reply, &h, c->in + pos + DSC_FRAME_HEADER_SIZE);
        pos += DSC_FRAME_HEADER_SIZE + h.body_len;
    }
    c->batching = 0;
    conn_flush(c);
    if (c->closing || c->close_when_idle)
        return;
    if (pos > 0) {
        memmove(c->in, c->in + pos, c->in_len - pos);
        c->in_len -= pos;
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
    c->in_len += (size_t)nread;
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
    lc->conn_count++;
    atomic_fetch_add_explicit(&lc->srv->connections, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&lc->srv->connections_total, 1, memory_order_relaxed);
    conn_update_reading(c);
}

static conn_t *conn_new(dsc_srv_loop_t *lc) {
    conn_t *c = calloc(1, sizeof *c);
    uint8_t *in = malloc(IN_BUF_SIZE);
    if (c == NULL || in == NULL) {
        free(c);
        free(in);
        LOG_ERROR("out of memory accepting a connection: dropping it");
        return NULL;
    }
    c->reply.ops = &tcp_reply_ops;
    c->reply.mailbox = &lc->mailbox;
    c->reply.loop = &lc->loop;
    c->lc = lc;
    c->in = in;
    c->refs = 1;
    uv_tcp_init(&lc->loop, &c->tcp);
    c->tcp.data = c;
    return c;
}

void dsc__tcp_adopt(dsc_srv_loop_t *lc, int fd) {
    conn_t *c = lc->stopping ? NULL : conn_new(lc);
    if (c == NULL) {
        close(fd);
        return;
    }
    if (uv_tcp_open(&c->tcp, fd) != 0) {
        close(fd);
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

/* SO_REUSEPORT spreads connections by a hash of their addresses, which with a few connections
 * often puts two busy ones on one loop while another idles. Whichever listener accepts, the
 * connection goes to the loops in turn. */
void dsc__tcp_on_connection(uv_stream_t *listener, int status) {
    dsc_srv_loop_t *lc = listener->data;
    dsc_server_t *srv = lc->srv;
    if (status < 0 || lc->stopping)
        return;
    conn_t *c = conn_new(lc);
    if (c == NULL) {
        uv_os_fd_t lfd;
        if (uv_fileno((uv_handle_t *)listener, &lfd) == 0) {
            int fd = accept(lfd, NULL, NULL); /* so that the listener does not spin */
            if (fd >= 0)
                close(fd);
        }
        return;
    }
    if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0) {
        uv_close((uv_handle_t *)&c->tcp, on_close);
        return;
    }
    uint32_t target =
        srv->loop_count > 1
            ? atomic_fetch_add_explicit(&srv->next_loop, 1, memory_order_relaxed) % srv->loop_count
            : 0;
    dsc_srv_loop_t *to = &srv->loops[target];
    uv_os_fd_t fd;
    if (to != lc && uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0) {
        /* The handle belongs to this loop: give the other loop its own descriptor. */
        int moved = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (moved >= 0) {
            uv_close((uv_handle_t *)&c->tcp, on_close);
            handoff_push(to, moved);
            return;
        }
        /* No descriptor to spare: serve it here. */
    }
    conn_start(c);
}

void dsc__tcp_drain(dsc_srv_loop_t *lc) {
    for (conn_t *c = lc->conns, *next; c; c = next) {
        next = c->next;
        if (c->reading) {
            uv_read_stop((uv_stream_t *)&c->tcp);
            c->reading = 0;
        }
        c->close_when_idle = 1;
        conn_maybe_idle_close(c);
    }
}

void dsc__tcp_close_all(dsc_srv_loop_t *lc) {
    while (lc->conns)
        conn_close(lc->conns);
}
