/* TCP front end: event loops, connections, frame parsing, request dispatch, GET answers written
 * straight out of the store (a header+prefix buffer and buffers pointing at the shard bytes),
 * the answers to one read gathered into one writev. Each loop owns its connections; the only
 * cross-thread traffic is a mailbox per loop that loader threads fill with finished loads,
 * accepted sockets dealt to the loops in turn, and the stop request. */
#include "server.h"
#include "log.h"
#include "protocol.h"
#include "report.h"
#include "util.h"
#include "wire.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

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

typedef struct loop_ctx loop_ctx_t;
typedef struct out_msg out_msg_t;

typedef struct conn {
    uv_tcp_t tcp;
    loop_ctx_t *lc;
    struct conn *prev, *next;
    uint8_t *in;
    size_t in_len;
    uint64_t out_bytes;     /* response bytes queued in uv_write and not yet completed */
    uint32_t writes;        /* uv_write requests in flight */
    uint32_t pending_loads; /* GETs waiting for a load */
    out_msg_t *batch_head, *batch_tail; /* responses not yet handed to uv_write */
    uint64_t batch_bytes;
    unsigned batch_bufs;
    int refs; /* 1 for the open handle + writes + pending loads */
    unsigned hello : 1, closing : 1, reading : 1, close_when_idle : 1, paused : 1;
    unsigned batching : 1;    /* inside conn_process: submit() collects instead of writing */
    unsigned view_logged : 1; /* a HELLO with a different members_hash was logged */
} conn_t;

struct loop_ctx {
    dsc_server_t *srv;
    uv_loop_t loop;
    uv_tcp_t listener;
    uv_async_t wake;
    uv_timer_t drain_timer;
    pthread_t thread;
    int thread_started;
    dsc_mailbox_t mailbox; /* finished loads for this loop's connections */
    pthread_mutex_t mb_lock;
    dsc_waiter_t *mb_head, *mb_tail;
    int *handoff; /* accepted sockets handed to this loop by another one (under mb_lock) */
    uint32_t handoff_len, handoff_cap;
    int handoff_closed; /* the loop is finishing: sockets handed now are closed at once */
    conn_t *conns;
    uint32_t conn_count;
    int stopping;
};

struct dsc_server {
    dsc_catalog_t *cat;
    dsc_server_options_t opt;
    char name[64];
    uint16_t port;
    uint32_t loop_count;
    loop_ctx_t *loops;
    atomic_int stop_requested;
    atomic_uint next_loop; /* round-robin target of the next accepted connection */
    atomic_uint_fast64_t connections, connections_total, bytes_out, protocol_errors, paused_reads;
    atomic_uint_fast64_t requests[DSC_SERVER_OPS][DSC_SERVER_STATUSES];
    _Atomic(dsc_cluster_t *) cluster;
    dsc_jobs_t *jobs; /* the jobs fed, from their REPORTs */
};

static dsc_cluster_t *cluster_of(dsc_server_t *srv) {
    return atomic_load_explicit(&srv->cluster, memory_order_acquire);
}

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

typedef struct pending_get {
    dsc_waiter_t waiter; /* first */
    conn_t *c;
    dsc_dataset_t *ds;
    uint64_t request_id;
    uint32_t first_chunk, chunk_count;
} pending_get_t;

static void conn_close(conn_t *c);
static void conn_process(conn_t *c);

static void count_request(dsc_server_t *srv, uint32_t opcode, uint32_t status) {
    if (opcode >= DSC_SERVER_OPS || !dsc_opcode_known(opcode))
        opcode = 0;
    if (status >= DSC_SERVER_STATUSES)
        status = DSC_STATUS_INTERNAL;
    atomic_fetch_add_explicit(&srv->requests[opcode][status], 1, memory_order_relaxed);
}

static void conn_unref(conn_t *c) {
    if (--c->refs == 0) {
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

static void loop_maybe_finish(loop_ctx_t *lc) {
    if (lc->stopping && lc->conn_count == 0 && !uv_is_closing((uv_handle_t *)&lc->wake)) {
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
    }
}

static void conn_close(conn_t *c) {
    if (c->closing)
        return;
    c->closing = 1;
    loop_ctx_t *lc = c->lc;
    if (c->prev)
        c->prev->next = c->next;
    else
        lc->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    lc->conn_count--;
    atomic_fetch_sub_explicit(&lc->srv->connections, 1, memory_order_relaxed);
    uv_close((uv_handle_t *)&c->tcp, on_close);
    loop_maybe_finish(lc);
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

/* A frame with a copied body (small answers). status != OK makes it an error frame. */
static void send_frame(conn_t *c, uint8_t opcode, uint64_t id, uint32_t status, const void *body,
                       size_t len) {
    count_request(c->lc->srv, opcode, status);
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

static void send_error(conn_t *c, uint8_t opcode, uint64_t id, uint32_t status,
                       const char *message) {
    size_t len = strlen(message);
    if (len > DSC_ERROR_MAX_MESSAGE)
        len = DSC_ERROR_MAX_MESSAGE;
    send_frame(c, opcode, id, status, message, len);
}

/* Sends an error and closes the connection once it is written (the stream cannot be trusted
 * to be at a frame boundary any more). */
static void send_fatal(conn_t *c, uint8_t opcode, uint64_t id, uint32_t status,
                       const char *message) {
    atomic_fetch_add_explicit(&c->lc->srv->protocol_errors, 1, memory_order_relaxed);
    LOG_DEBUG("closing a connection: %s", message);
    send_error(c, opcode, id, status, message);
    conn_flush(c);
    c->close_when_idle = 1;
    if (c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = 0;
    }
    c->in_len = 0;
    conn_maybe_idle_close(c);
}

static void send_get(conn_t *c, uint64_t id, dsc_dataset_t *ds, dsc_hold_t *hold, uint32_t first,
                     uint32_t count) {
    dsc_server_t *srv = c->lc->srv;
    if ((uint64_t)first + count > hold->chunk_count) {
        dsc_hold_release(srv->cat, hold);
        send_error(c, DSC_OP_GET, id, DSC_STATUS_BAD_REQUEST, "chunk range out of bounds");
        return;
    }
    dsc_chunk_entry_t small[16];
    dsc_chunk_entry_t *entries = count <= 16 ? small : malloc(count * sizeof *entries);
    out_msg_t *m = NULL;
    if (entries == NULL)
        goto nomem;
    uint64_t data_len = 0;
    unsigned runs = 0;
    uint64_t run_end = UINT64_MAX;
    for (uint32_t i = 0; i < count; i++) {
        dsc_chunk_entry_decode(hold->index + (size_t)(first + i) * DSC_CHUNK_ENTRY_SIZE,
                               &entries[i]);
        data_len += entries[i].stored_len;
        if (entries[i].offset != run_end)
            runs++;
        run_end = entries[i].offset + entries[i].stored_len;
    }
    uint64_t body_len = DSC_GET_RESP_PREFIX(count) + data_len;
    if (body_len > DSC_FRAME_MAX_BODY) {
        if (entries != small)
            free(entries);
        dsc_hold_release(srv->cat, hold);
        send_error(c, DSC_OP_GET, id, DSC_STATUS_TOO_LARGE,
                   "response over the frame limit: ask for fewer chunks");
        return;
    }
    size_t head_len = (DSC_FRAME_HEADER_SIZE + DSC_GET_RESP_PREFIX(count) + 15) & ~(size_t)15;
    m = msg_alloc(head_len, 1 + runs);
    if (m == NULL)
        goto nomem;
    dsc_frame_header_t h = {.version = DSC_PROTO_VERSION,
                            .opcode = DSC_OP_GET,
                            .flags = DSC_FLAG_RESPONSE,
                            .status = DSC_STATUS_OK,
                            .request_id = id,
                            .body_len = (uint32_t)body_len};
    dsc_frame_header_encode(&h, m->head);
    int n = dsc_get_resp_prefix_encode(entries, count, m->head + DSC_FRAME_HEADER_SIZE,
                                       head_len - DSC_FRAME_HEADER_SIZE);
    if (n < 0) {
        if (entries != small)
            free(entries);
        free(m);
        dsc_hold_release(srv->cat, hold);
        send_error(c, DSC_OP_GET, id, DSC_STATUS_INTERNAL, "cannot encode the response");
        return;
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
    if (entries != small)
        free(entries);
    m->hold = *hold;
    memset(hold, 0, sizeof *hold);
    count_request(srv, DSC_OP_GET, DSC_STATUS_OK);
    dsc_dataset_count_served(ds, data_len);
    submit(c, m);
    return;
nomem:
    if (entries != small)
        free(entries);
    dsc_hold_release(srv->cat, hold);
    send_error(c, DSC_OP_GET, id, DSC_STATUS_INTERNAL, "out of memory");
}

static uint32_t load_error_status(int rc) {
    switch (rc) {
    case DSC_ECORRUPT:
        return DSC_STATUS_CORRUPT;
    case DSC_EUNAVAIL:
        return DSC_STATUS_UNAVAILABLE;
    default:
        return DSC_STATUS_INTERNAL;
    }
}

static const char *load_error_message(int rc) {
    switch (rc) {
    case DSC_ECORRUPT:
        return "shard failed validation on the server";
    case DSC_EUNAVAIL:
        return "shard cannot be loaded now";
    default:
        return dsc_strerror(rc);
    }
}

/* Runs on the connection's loop when a load it waited for has finished. */
static void on_get_loaded(dsc_waiter_t *w) {
    pending_get_t *pg = (pending_get_t *)w;
    conn_t *c = pg->c;
    c->pending_loads--;
    if (c->closing) {
        if (w->status == 0)
            dsc_hold_release(c->lc->srv->cat, &w->hold);
    } else if (w->status == 0) {
        send_get(c, pg->request_id, pg->ds, &w->hold, pg->first_chunk, pg->chunk_count);
    } else {
        send_error(c, DSC_OP_GET, pg->request_id, load_error_status(w->status),
                   load_error_message(w->status));
    }
    free(pg);
    conn_resume(c);
    conn_unref(c);
}

/* ---- request dispatch ------------------------------------------------------------------ */

static void handle_get(conn_t *c, uint64_t id, const uint8_t *body, size_t len) {
    dsc_server_t *srv = c->lc->srv;
    dsc_get_req_t req;
    if (dsc_get_req_decode(body, len, &req) < 0) {
        send_error(c, DSC_OP_GET, id, DSC_STATUS_BAD_REQUEST, "malformed GET body");
        return;
    }
    dsc_dataset_t *ds = dsc_catalog_find(srv->cat, req.dataset.ptr, req.dataset.len);
    if (ds == NULL) {
        send_error(c, DSC_OP_GET, id, DSC_STATUS_NOT_FOUND, "no such dataset");
        return;
    }
    dsc_slot_t *slot = dsc_dataset_slot(ds, req.shard_id);
    if (slot == NULL) {
        send_error(c, DSC_OP_GET, id, DSC_STATUS_NOT_FOUND, "no such shard");
        return;
    }
    const dsc_manifest_shard_t *meta = &dsc_dataset_manifest(ds)->shards[req.shard_id];
    if (req.chunk_count == 0 || (uint64_t)req.first_chunk + req.chunk_count > meta->chunks) {
        send_error(c, DSC_OP_GET, id, DSC_STATUS_BAD_REQUEST, "chunk range out of bounds");
        return;
    }
    pending_get_t *pg = malloc(sizeof *pg);
    if (pg == NULL) {
        send_error(c, DSC_OP_GET, id, DSC_STATUS_INTERNAL, "out of memory");
        return;
    }
    memset(pg, 0, sizeof *pg);
    pg->waiter.mailbox = &c->lc->mailbox;
    pg->waiter.fn = on_get_loaded;
    pg->c = c;
    pg->ds = ds;
    pg->request_id = id;
    pg->first_chunk = req.first_chunk;
    pg->chunk_count = req.chunk_count;
    pg->waiter.first_chunk = req.first_chunk; /* a read-through reads only these chunks */
    pg->waiter.chunk_count = req.chunk_count;
    dsc_hold_t hold;
    int rc = dsc_catalog_acquire(srv->cat, slot, &pg->waiter, &hold);
    if (rc == 1) {
        free(pg);
        send_get(c, id, ds, &hold, req.first_chunk, req.chunk_count);
    } else if (rc == 0) {
        c->pending_loads++;
        c->refs++;
    } else {
        free(pg);
        send_error(c, DSC_OP_GET, id, load_error_status(rc), load_error_message(rc));
    }
}

static void handle_hello(conn_t *c, uint64_t id, const uint8_t *body, size_t len) {
    dsc_hello_req_t req;
    if (dsc_hello_req_decode(body, len, &req) < 0) {
        send_fatal(c, DSC_OP_HELLO, id, DSC_STATUS_BAD_REQUEST, "malformed HELLO body");
        return;
    }
    int version = dsc_hello_negotiate(req.min_version, req.max_version);
    if (version < 0) {
        char msg[128];
        snprintf(msg, sizeof msg, "no common protocol version: server speaks %d..%d",
                 DSC_PROTO_MIN_VERSION, DSC_PROTO_VERSION);
        send_fatal(c, DSC_OP_HELLO, id, DSC_STATUS_VERSION_MISMATCH, msg);
        return;
    }
    dsc_server_t *srv = c->lc->srv;
    dsc_hello_resp_t resp = {.version = (uint16_t)version,
                             .members_hash = dsc_cluster_hello_hash(cluster_of(srv)),
                             .max_body = DSC_FRAME_MAX_BODY,
                             .server_name = {srv->name, (uint16_t)strlen(srv->name)}};
    /* Only a clustered server (hash != 0) has a view a client should follow. */
    if (req.members_hash != 0 && resp.members_hash != 0 && req.members_hash != resp.members_hash &&
        !c->view_logged) {
        c->view_logged = 1;
        LOG_INFO("client %.*s has member view %016llx, this server %016llx: it should ask "
                 "MEMBERS",
                 (int)req.client_name.len, req.client_name.ptr,
                 (unsigned long long)req.members_hash, (unsigned long long)resp.members_hash);
    }
    uint8_t out[256];
    int n = dsc_hello_resp_encode(&resp, out, sizeof out);
    if (n < 0) {
        send_fatal(c, DSC_OP_HELLO, id, DSC_STATUS_INTERNAL, "cannot encode HELLO");
        return;
    }
    c->hello = 1;
    send_frame(c, DSC_OP_HELLO, id, DSC_STATUS_OK, out, (size_t)n);
}

static void send_json(conn_t *c, uint8_t opcode, uint64_t id, char *json) {
    if (json == NULL)
        send_error(c, opcode, id, DSC_STATUS_INTERNAL, "out of memory");
    else
        send_frame(c, opcode, id, DSC_STATUS_OK, json, strlen(json));
    free(json);
}

static void handle_admin(conn_t *c, uint8_t opcode, uint64_t id, const uint8_t *body, size_t len) {
    dsc_server_t *srv = c->lc->srv;
    dsc_shard_req_t req;
    if (dsc_shard_req_decode(body, len, &req) < 0) {
        send_error(c, opcode, id, DSC_STATUS_BAD_REQUEST, "malformed WARM/EVICT body");
        return;
    }
    dsc_dataset_t *ds = dsc_catalog_find(srv->cat, req.dataset.ptr, req.dataset.len);
    if (ds == NULL) {
        send_error(c, opcode, id, DSC_STATUS_NOT_FOUND, "no such dataset");
        return;
    }
    if (req.shard_id != DSC_SHARD_ALL && dsc_dataset_slot(ds, req.shard_id) == NULL) {
        send_error(c, opcode, id, DSC_STATUS_NOT_FOUND, "no such shard");
        return;
    }
    int n = opcode == DSC_OP_WARM ? dsc_catalog_warm(srv->cat, ds, req.shard_id)
                                  : dsc_catalog_evict(srv->cat, ds, req.shard_id);
    uint8_t out[4];
    dsc_store_u32(out, (uint32_t)(n < 0 ? 0 : n));
    send_frame(c, opcode, id, DSC_STATUS_OK, out, sizeof out);
}

/* REPORT: a loader's job, stall and rate go into the job table (STAT, /metrics). */
static void handle_report(conn_t *c, uint64_t id, const uint8_t *body, size_t len) {
    dsc_report_req_t req;
    if (dsc_report_req_decode(body, len, &req) < 0) {
        send_error(c, DSC_OP_REPORT, id, DSC_STATUS_BAD_REQUEST, "malformed REPORT body");
        return;
    }
    char peer[DSC_JOB_PEER_MAX] = "";
    struct sockaddr_storage sa;
    int sa_len = sizeof sa;
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&sa, &sa_len) == 0) {
        char host[INET6_ADDRSTRLEN] = "";
        if (sa.ss_family == AF_INET6) {
            const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)&sa;
            uv_ip6_name(a6, host, sizeof host);
            snprintf(peer, sizeof peer, "[%s]:%u", host, (unsigned)ntohs(a6->sin6_port));
        } else if (sa.ss_family == AF_INET) {
            const struct sockaddr_in *a4 = (const struct sockaddr_in *)&sa;
            uv_ip4_name(a4, host, sizeof host);
            snprintf(peer, sizeof peer, "%s:%u", host, (unsigned)ntohs(a4->sin_port));
        }
    }
    dsc_jobs_report(c->lc->srv->jobs, &req, peer, dsc_now_s());
    send_frame(c, DSC_OP_REPORT, id, DSC_STATUS_OK, NULL, 0);
}

static void handle_frame(conn_t *c, const dsc_frame_header_t *h, const uint8_t *body) {
    dsc_server_t *srv = c->lc->srv;
    if (h->flags & DSC_FLAG_RESPONSE) {
        send_fatal(c, h->opcode, h->request_id, DSC_STATUS_BAD_REQUEST,
                   "a response frame sent to the server");
        return;
    }
    if (!c->hello && h->opcode != DSC_OP_HELLO) {
        send_fatal(c, h->opcode, h->request_id, DSC_STATUS_BAD_REQUEST,
                   "HELLO must be the first request");
        return;
    }
    dsc_str_t name;
    switch (h->opcode) {
    case DSC_OP_HELLO:
        handle_hello(c, h->request_id, body, h->body_len);
        break;
    case DSC_OP_PING:
        send_frame(c, DSC_OP_PING, h->request_id, DSC_STATUS_OK, body, h->body_len);
        break;
    case DSC_OP_LIST:
        send_json(c, DSC_OP_LIST, h->request_id, dsc_catalog_list_json(srv->cat));
        break;
    case DSC_OP_MANIFEST: {
        if (dsc_name_req_decode(body, h->body_len, &name) < 0 || name.len == 0) {
            send_error(c, DSC_OP_MANIFEST, h->request_id, DSC_STATUS_BAD_REQUEST,
                       "MANIFEST needs a dataset name");
            break;
        }
        dsc_dataset_t *ds = dsc_catalog_find(srv->cat, name.ptr, name.len);
        if (ds == NULL) {
            send_error(c, DSC_OP_MANIFEST, h->request_id, DSC_STATUS_NOT_FOUND, "no such dataset");
            break;
        }
        size_t len;
        const char *json = dsc_dataset_manifest_json(ds, &len);
        if (len > DSC_FRAME_MAX_BODY)
            send_error(c, DSC_OP_MANIFEST, h->request_id, DSC_STATUS_TOO_LARGE,
                       "manifest over the frame limit");
        else
            send_frame(c, DSC_OP_MANIFEST, h->request_id, DSC_STATUS_OK, json, len);
        break;
    }
    case DSC_OP_GET:
        handle_get(c, h->request_id, body, h->body_len);
        break;
    case DSC_OP_STAT: {
        if (dsc_name_req_decode(body, h->body_len, &name) < 0) {
            send_error(c, DSC_OP_STAT, h->request_id, DSC_STATUS_BAD_REQUEST,
                       "malformed STAT body");
            break;
        }
        int not_found = 0;
        char *json = dsc_catalog_stat_json(srv->cat, name.ptr, name.len, &not_found);
        dsc_cluster_t *cluster = cluster_of(srv);
        if (json && cluster) {
            char *full = dsc_cluster_stat_json(cluster, srv->cat, json);
            free(json);
            json = full;
        }
        if (not_found) {
            free(json);
            send_error(c, DSC_OP_STAT, h->request_id, DSC_STATUS_NOT_FOUND, "no such dataset");
            break;
        }
        json = dsc_jobs_stat_add(srv->jobs, json, dsc_now_s(), atomic_load(&srv->connections),
                                 atomic_load(&srv->connections_total));
        send_json(c, DSC_OP_STAT, h->request_id, json);
        break;
    }
    case DSC_OP_REPORT:
        handle_report(c, h->request_id, body, h->body_len);
        break;
    case DSC_OP_WARM:
    case DSC_OP_EVICT:
        handle_admin(c, h->opcode, h->request_id, body, h->body_len);
        break;
    case DSC_OP_MEMBERS: {
        dsc_cluster_t *cluster = cluster_of(srv);
        if (cluster == NULL)
            send_error(c, DSC_OP_MEMBERS, h->request_id, DSC_STATUS_UNSUPPORTED,
                       "this server has no membership");
        else
            send_json(c, DSC_OP_MEMBERS, h->request_id, dsc_cluster_members_json(cluster));
        break;
    }
    default:
        send_error(c, h->opcode, h->request_id, DSC_STATUS_UNSUPPORTED,
                   dsc_opcode_known(h->opcode) ? "operation not supported by this server"
                                               : "unknown operation");
        break;
    }
}

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
            send_fatal(c, opcode, id, status, dsc_strerror(rc));
            return;
        }
        if (c->in_len - pos < DSC_FRAME_HEADER_SIZE + (size_t)h.body_len)
            break;
        handle_frame(c, &h, c->in + pos + DSC_FRAME_HEADER_SIZE);
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
    loop_ctx_t *lc = c->lc;
    uv_tcp_nodelay(&c->tcp, 1);
    uv_os_fd_t fd;
    int lowat = NOTSENT_LOWAT;
    if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0)
        setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, sizeof lowat); /* best effort */
    c->next = lc->conns;
    if (lc->conns)
        lc->conns->prev = c;
    lc->conns = c;
    lc->conn_count++;
    atomic_fetch_add_explicit(&lc->srv->connections, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&lc->srv->connections_total, 1, memory_order_relaxed);
    conn_update_reading(c);
}

static conn_t *conn_new(loop_ctx_t *lc) {
    conn_t *c = calloc(1, sizeof *c);
    uint8_t *in = malloc(IN_BUF_SIZE);
    if (c == NULL || in == NULL) {
        free(c);
        free(in);
        LOG_ERROR("out of memory accepting a connection: dropping it");
        return NULL;
    }
    c->lc = lc;
    c->in = in;
    c->refs = 1;
    uv_tcp_init(&lc->loop, &c->tcp);
    c->tcp.data = c;
    return c;
}

/* Runs on lc's loop: serves a socket that another loop accepted. Takes the fd. */
static void conn_adopt(loop_ctx_t *lc, int fd) {
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
static void handoff_push(loop_ctx_t *to, int fd) {
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
static void on_connection(uv_stream_t *listener, int status) {
    loop_ctx_t *lc = listener->data;
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
    loop_ctx_t *to = &srv->loops[target];
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

/* ---- loops, mailbox, stop -------------------------------------------------------------- */

static void mailbox_push(dsc_mailbox_t *box, dsc_waiter_t *w) {
    loop_ctx_t *lc = (loop_ctx_t *)((char *)box - offsetof(loop_ctx_t, mailbox));
    w->next = NULL;
    pthread_mutex_lock(&lc->mb_lock);
    if (lc->mb_tail)
        lc->mb_tail->next = w;
    else
        lc->mb_head = w;
    lc->mb_tail = w;
    pthread_mutex_unlock(&lc->mb_lock);
    uv_async_send(&lc->wake);
}

static void on_drain_timeout(uv_timer_t *timer) {
    loop_ctx_t *lc = timer->data;
    if (lc->conn_count)
        LOG_WARN("shutdown: %u connection(s) still busy after the drain time: closing them",
                 lc->conn_count);
    while (lc->conns)
        conn_close(lc->conns);
}

static void on_wake(uv_async_t *async) {
    loop_ctx_t *lc = async->data;
    int fds[64];
    uint32_t nfds;
    do {
        pthread_mutex_lock(&lc->mb_lock);
        nfds = lc->handoff_len < 64 ? lc->handoff_len : 64;
        lc->handoff_len -= nfds;
        if (nfds)
            memcpy(fds, lc->handoff + lc->handoff_len, nfds * sizeof *fds);
        pthread_mutex_unlock(&lc->mb_lock);
        for (uint32_t i = 0; i < nfds; i++)
            conn_adopt(lc, fds[i]);
    } while (nfds == 64);
    pthread_mutex_lock(&lc->mb_lock);
    dsc_waiter_t *list = lc->mb_head;
    lc->mb_head = lc->mb_tail = NULL;
    pthread_mutex_unlock(&lc->mb_lock);
    while (list) {
        dsc_waiter_t *w = list;
        list = w->next;
        w->fn(w);
    }
    if (atomic_load(&lc->srv->stop_requested) && !lc->stopping) {
        lc->stopping = 1;
        uv_close((uv_handle_t *)&lc->listener, NULL);
        for (conn_t *c = lc->conns, *next; c; c = next) {
            next = c->next;
            if (c->reading) {
                uv_read_stop((uv_stream_t *)&c->tcp);
                c->reading = 0;
            }
            c->close_when_idle = 1;
            conn_maybe_idle_close(c);
        }
        uint32_t secs = lc->srv->opt.drain_seconds ? lc->srv->opt.drain_seconds : 30;
        uv_timer_start(&lc->drain_timer, on_drain_timeout, (uint64_t)secs * 1000, 0);
        uv_unref((uv_handle_t *)&lc->drain_timer);
        loop_maybe_finish(lc);
    }
}

static void *loop_thread(void *arg) {
    loop_ctx_t *lc = arg;
    uv_run(&lc->loop, UV_RUN_DEFAULT);
    return NULL;
}

/* A listening socket bound to addr with SO_REUSEPORT. Returns the fd or -errno. */
static int listen_socket(const struct sockaddr *addr, socklen_t len) {
    int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0 ||
        bind(fd, addr, len) != 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    return fd;
}

int dsc_server_start(dsc_catalog_t *cat, const dsc_server_options_t *options, dsc_server_t **out) {
    if (cat == NULL || options == NULL || out == NULL || options->threads == 0)
        return DSC_EINVAL;
    *out = NULL;
    char port_text[8];
    snprintf(port_text, sizeof port_text, "%u", (unsigned)options->port);
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    if (getaddrinfo(options->host, port_text, &hints, &res) != 0 || res == NULL)
        return DSC_EINVAL;
    struct sockaddr_storage addr;
    socklen_t addr_len = (socklen_t)res->ai_addrlen;
    memcpy(&addr, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);

    dsc_server_t *srv = calloc(1, sizeof *srv);
    if (srv == NULL)
        return DSC_ENOMEM;
    srv->cat = cat;
    srv->opt = *options;
    snprintf(srv->name, sizeof srv->name, "%s", options->name ? options->name : "dscached");
    srv->loops = calloc(options->threads, sizeof *srv->loops);
    if (srv->loops == NULL || dsc_jobs_create(0, 0, &srv->jobs) < 0) {
        free(srv->loops);
        free(srv);
        return DSC_ENOMEM;
    }
    int rc = 0;
    for (uint32_t i = 0; i < options->threads; i++) {
        loop_ctx_t *lc = &srv->loops[i];
        lc->srv = srv;
        int fd = listen_socket((struct sockaddr *)&addr, addr_len);
        if (fd < 0) {
            rc = fd;
            break;
        }
        if (i == 0) {
            /* Port 0: the first socket picks the port and the others bind the same one. */
            struct sockaddr_storage bound;
            socklen_t blen = sizeof bound;
            getsockname(fd, (struct sockaddr *)&bound, &blen);
            srv->port =
                ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                  : ((struct sockaddr_in *)&bound)->sin_port);
            if (addr.ss_family == AF_INET6)
                ((struct sockaddr_in6 *)&addr)->sin6_port = htons(srv->port);
            else
                ((struct sockaddr_in *)&addr)->sin_port = htons(srv->port);
        }
        uv_loop_init(&lc->loop);
        uv_tcp_init(&lc->loop, &lc->listener);
        lc->listener.data = lc;
        uv_async_init(&lc->loop, &lc->wake, on_wake);
        lc->wake.data = lc;
        uv_timer_init(&lc->loop, &lc->drain_timer);
        lc->drain_timer.data = lc;
        pthread_mutex_init(&lc->mb_lock, NULL);
        lc->mailbox.push = mailbox_push;
        srv->loop_count++;
        if ((rc = uv_tcp_open(&lc->listener, fd)) < 0) {
            close(fd);
            break;
        }
        if ((rc = uv_listen((uv_stream_t *)&lc->listener, 1024, on_connection)) < 0)
            break;
    }
    if (rc == 0) {
        for (uint32_t i = 0; i < srv->loop_count; i++) {
            if (pthread_create(&srv->loops[i].thread, NULL, loop_thread, &srv->loops[i]) != 0) {
                rc = DSC_ENOMEM;
                break;
            }
            srv->loops[i].thread_started = 1;
        }
    }
    if (rc < 0) {
        dsc_server_stop(srv);
        dsc_server_destroy(srv);
        return rc == -EADDRINUSE ? DSC_EADDRINUSE : rc;
    }
    *out = srv;
    return 0;
}

uint16_t dsc_server_port(const dsc_server_t *srv) {
    return srv->port;
}

void dsc_server_stop(dsc_server_t *srv) {
    if (srv == NULL)
        return;
    atomic_store(&srv->stop_requested, 1);
    for (uint32_t i = 0; i < srv->loop_count; i++)
        uv_async_send(&srv->loops[i].wake);
}

void dsc_server_set_cluster(dsc_server_t *srv, dsc_cluster_t *cluster) {
    atomic_store_explicit(&srv->cluster, cluster, memory_order_release);
}

void dsc_server_destroy(dsc_server_t *srv) {
    if (srv == NULL)
        return;
    for (uint32_t i = 0; i < srv->loop_count; i++) {
        loop_ctx_t *lc = &srv->loops[i];
        if (lc->thread_started) {
            pthread_join(lc->thread, NULL);
        } else {
            /* Never ran (start failed): close the handles and let the loop finish them. */
            lc->stopping = 1;
            if (!uv_is_closing((uv_handle_t *)&lc->listener))
                uv_close((uv_handle_t *)&lc->listener, NULL);
            loop_maybe_finish(lc);
            uv_run(&lc->loop, UV_RUN_DEFAULT);
        }
        uv_loop_close(&lc->loop);
        pthread_mutex_destroy(&lc->mb_lock);
    }
    free(srv->loops);
    dsc_jobs_destroy(srv->jobs);
    free(srv);
}

dsc_jobs_t *dsc_server_jobs(dsc_server_t *srv) {
    return srv ? srv->jobs : NULL;
}

void dsc_server_counters(const dsc_server_t *srv, dsc_server_counters_t *out) {
    memset(out, 0, sizeof *out);
    if (srv == NULL)
        return;
    dsc_server_t *s = (dsc_server_t *)srv;
    out->connections = atomic_load(&s->connections);
    out->connections_total = atomic_load(&s->connections_total);
    out->bytes_out = atomic_load(&s->bytes_out);
    out->protocol_errors = atomic_load(&s->protocol_errors);
    out->paused_reads = atomic_load(&s->paused_reads);
    for (int o = 0; o < DSC_SERVER_OPS; o++)
        for (int st = 0; st < DSC_SERVER_STATUSES; st++)
            out->requests[o][st] = atomic_load_explicit(&s->requests[o][st], memory_order_relaxed);
}
