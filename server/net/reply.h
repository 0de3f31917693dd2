/* The reply interface: how request dispatch (dispatch.c) answers on whatever transport carried
 * the request. dispatch.c never sees a socket, a queue pair or a lease: a transport fills a
 * dsc_reply_ops_t once and embeds a dsc_reply_t in each of its connections.
 *
 * tcp.c implements it over libuv: a GET answer is one writev of the frame header + prefix and
 * of the chunk bytes straight out of the store (no copy), and the shard hold is released when
 * that write completes. rdma.c is a layer over it (dsc_reply_layer_t below): RDMA_CONNECT puts
 * its own table on the connection, wrapping the TCP table it found there (reply->lower). Its
 * get() answers an RDMA_GET with (address, rkey, length) descriptors of the chunk runs inside
 * the registered arena, keeping the hold as the lease until the client releases it or the lease
 * expires, and hands every other operation (frames, plain GETs, waits) to the table below.
 * Without rdma-core's headers rdma_stub.c provides the layer, which offers no RDMA. */
#ifndef DSC_SERVER_REPLY_H
#define DSC_SERVER_REPLY_H

#include "authz.h"
#include "catalog.h"
#include "protocol.h"

#include <stddef.h>
#include <stdint.h>

typedef struct dsc_reply dsc_reply_t;
typedef struct dsc_server dsc_server_t;

/* A GET answer ready to go out: the request's chunk entries, decoded from the hold's index in
 * request order, and data_len, the sum of their stored lengths. Dispatch has checked the range
 * against the hold and the body against the frame limit. Valid during the get() call only. */
typedef struct dsc_get_answer {
    uint64_t request_id;
    const dsc_chunk_entry_t *entries;
    uint32_t count;
    uint64_t data_len;
    uint8_t opcode;      /* DSC_OP_GET, or DSC_OP_RDMA_GET (only on a table that has leases) */
    const char *dataset; /* the dataset's name (rdma.c: a lease ends when a reload takes it) */
} dsc_get_answer_t;

/* The operations of one transport. All run on the connection's own thread (its event loop). */
typedef struct dsc_reply_ops {
    /* Sends one response frame whose body (len bytes, at most DSC_FRAME_MAX_BODY) is copied.
     * status != DSC_STATUS_OK makes it an error frame. Dropped when the connection is closing;
     * out of memory closes the connection (logged). */
    void (*frame)(dsc_reply_t *reply, uint8_t opcode, uint64_t request_id, uint32_t status,
                  const void *body, size_t len);
    /* Sends an error frame (message cut at DSC_ERROR_MAX_MESSAGE), then closes the connection
     * once its answers have gone out: the request stream is no longer trusted. Counts a
     * protocol error. */
    void (*fatal)(dsc_reply_t *reply, uint8_t opcode, uint64_t request_id, uint32_t status,
                  const char *message);
    /* Sends a GET answer whose chunk bytes lie at hold->data + entry.offset. Returns 0: the hold
     * now belongs to the reply, which releases it once the bytes are no longer needed (TCP: the
     * write completed or failed); DSC_ENOMEM or DSC_EINVAL (the prefix cannot be encoded):
     * nothing was sent and the hold is still the caller's. */
    int (*get)(dsc_reply_t *reply, const dsc_get_answer_t *answer, dsc_hold_t *hold);
    /* Sends an OK frame whose body of len bytes (at most DSC_FRAME_MAX_BODY) fill(arg, body)
     * writes straight into the transport's buffer, so that a body gathered from several holds
     * (MGET) is copied once. fill runs before the call returns. Returns 0 (sent, or dropped when
     * the connection is closing) or DSC_ENOMEM (nothing sent, fill not called). */
    int (*frame_fill)(dsc_reply_t *reply, uint8_t opcode, uint64_t request_id, size_t len,
                      void (*fill)(void *arg, uint8_t *body), void *arg);
    /* A request of this connection starts waiting for a load: keeps the connection alive and
     * counts the wait, and `reserve` bytes (the most its answer can pin), against the
     * connection's and the server's memory bounds until wait_end. */
    void (*wait_begin)(dsc_reply_t *reply, uint64_t reserve);
    /* The waiting request has been answered or dropped (reserve: as given to wait_begin):
     * reading may resume and the connection may be freed, so reply must not be used
     * afterwards. */
    void (*wait_end)(dsc_reply_t *reply, uint64_t reserve);
    /* Non-zero once the connection is closing (answers would be dropped). */
    int (*closing)(const dsc_reply_t *reply);

    /* Leases (RDMA). NULL on a transport that grants none (TCP): an RDMA_GET is then answered
     * BAD_REQUEST, as before a successful RDMA_CONNECT. With leases, get() also answers
     * DSC_OP_RDMA_GET (descriptors, or the bytes inline when they are not in registered memory),
     * returning DSC_EBUSY (nothing sent) when the connection's lease bound is reached. */
    /* Releases the lease ids of an RDMA_GET request now. Returns 0, or -1 when the connection
     * has no RDMA queue pair (yet). */
    int (*leases_release)(dsc_reply_t *reply, const dsc_rdma_get_req_t *req);

    /* Calls from the connection's owner (the transport at the bottom, tcp.c), made on whatever
     * table reply->ops holds; NULL: nothing to do. */
    /* The connection is closing: a layer's state goes first (RDMA: QP destroyed, then every
     * lease's hold dropped). */
    void (*close)(dsc_reply_t *reply);
    /* The connection's credential was removed or changed by a reload (removed != 0: the owner
     * closes the connection next) or narrowed: a layer ends what it may no longer serve (RDMA:
     * leases on datasets the credential lost; the QP when removed). */
    void (*revoke)(dsc_reply_t *reply, int removed);
} dsc_reply_ops_t;

/* A transport layered over a connection's own after HELLO (rdma.c, or rdma_stub.c without
 * rdma-core's headers). server.c picks it once (dsc_server.layer); dispatch.c and tcp.c reach it
 * only through this table. */
typedef struct dsc_reply_layer {
    /* 1 when HELLO may grant its feature bit (DSC_FEATURE_RDMA) now. Any thread. */
    int (*offered)(const dsc_server_t *srv);
    /* Its set-up request (RDMA_CONNECT), on the connection's thread: answers it (counted), now or
     * after work on the thread pool (the connection waits as for a load). From the first
     * accepted request on, reply->ops is the layer's table and reply->lower the one it wraps. */
    void (*connect)(dsc_server_t *srv, dsc_reply_t *reply, uint64_t id, const uint8_t *body,
                    size_t len);
    /* Loop 0's hooks: watch(srv, loop) (a uv_loop_t) before the loop's thread runs, unwatch(srv)
     * on that thread when the loop finishes (the device's async events). */
    void (*watch)(dsc_server_t *srv, void *loop);
    void (*unwatch)(dsc_server_t *srv);
} dsc_reply_layer_t;

/* One connection's answering side, embedded in the transport's connection object. The
 * transport sets ops and mailbox; the session flags belong to dispatch.c. */
struct dsc_reply {
    const dsc_reply_ops_t *ops;   /* what dispatch.c calls: the transport's, or a layer's */
    const dsc_reply_ops_t *lower; /* under a layer's table: the one it wraps (set by the layer);
                                     else NULL */
    dsc_mailbox_t *mailbox;       /* loads finished for this connection's requests, drained on its
                                     thread */
    unsigned hello : 1;           /* a HELLO was answered: other requests are accepted */
    unsigned view_logged : 1;     /* a HELLO with a different members_hash was logged */
    unsigned hint_share : 1; /* its HELLO set DSC_FEATURE_HINT_SHARE: HINTs get the long answer */
    dsc_conn_auth_t auth;    /* authentication state (authz.h), owned by dispatch.c; the
                                transport zeroes it and calls dsc__authz_conn_close at free */
    char peer[64];           /* the client's address, set by the transport (failure logs) */
    void *loop;              /* the connection's uv_loop_t (a layer's timers and work) */
    void *tcp;               /* its uv_tcp_t (rdma.c: the local address picks the RoCE GID),
                                NULL on a transport without one */
    void *rdma;              /* the RDMA layer's state of the connection (rdma.c), NULL until
                                RDMA_CONNECT and from close on */
    uint64_t hinter;         /* dispatch.c: the hinter id of this connection's last HINT (its
                                GETs are counted for that loader's read-ahead), 0: none */
    char job[64];            /* the job its REPORTs name ("": none yet), set by dispatch.c;
                                tcp.c queues its answers under it (fairq.h) */
};

#endif
