/* A blocking TCP connection to one dscached server: connect + HELLO, send request frames,
 * receive response frames (pipelined: many sends may precede the receives). Used by the
 * loader's I/O threads and by the dscache CLI. One thread at a time per connection. */
#ifndef DSC_CONN_H
#define DSC_CONN_H

#include "credential.h"
#include "protocol.h"

#include <stddef.h>
#include <stdint.h>

typedef struct dsc_conn dsc_conn_t;

typedef struct dsc_conn_info {
    uint16_t version;      /* negotiated protocol version */
    uint32_t max_body;     /* server's frame body limit */
    uint64_t members_hash; /* server's view of the cluster (0: none) */
    uint32_t features;     /* HELLO feature bits granted (DSC_FEATURE_AUTH, DSC_FEATURE_RDMA,
                              DSC_FEATURE_DATASET_VERSION) */
    char server_name[64];
} dsc_conn_info_t;

/* Connects to host:port (numeric or name), sets TCP_NODELAY and time-outs of timeout_ms for
 * every later send/recv (0 = none), and runs HELLO (members_hash sent as the client's view).
 * Returns 0 and *out, or DSC_ECONNREFUSED, DSC_ETIMEDOUT, DSC_EVERSION, DSC_EUNAVAIL (name did
 * not resolve), DSC_EPROTO (bad HELLO answer), DSC_ENOMEM. */
int dsc_conn_open(const char *host, uint16_t port, uint32_t timeout_ms, uint64_t members_hash,
                  dsc_conn_t **out);
/* As dsc_conn_open, authenticating with cred (NULL: anonymous) after HELLO: the server proves
 * the secret too (PROTOCOL.md, Authentication). Also returns DSC_EUNAUTH (wrong credential, or
 * a server that does not authenticate or fails to prove the secret; dsc_conn_last_error is not
 * readable then, the reason is the error). cred is only read during the call. */
int dsc_conn_open_auth(const char *host, uint16_t port, uint32_t timeout_ms, uint64_t members_hash,
                       const dsc_credential_t *cred, dsc_conn_t **out);
/* As dsc_conn_open_auth with "HOST:PORT". */
int dsc_conn_open_addr_auth(const char *hostport, uint32_t timeout_ms, uint64_t members_hash,
                            const dsc_credential_t *cred, dsc_conn_t **out);
/* As dsc_conn_open with "HOST:PORT". */
int dsc_conn_open_addr(const char *hostport, uint32_t timeout_ms, uint64_t members_hash,
                       dsc_conn_t **out);
/* After a HELLO that got no answer: asks "HOST:PORT" for GET /healthz over HTTP (bounded by
 * timeout_ms). Returns 1 when it answers HTTP (a dscached HTTP port, or another web server),
 * with *data_port the dscached data port its X-Dscache-Data-Port header names (0: none); else
 * 0. */
int dsc_conn_http_probe(const char *hostport, uint32_t timeout_ms, uint16_t *data_port);
/* The probe's parser, over the first len bytes of an answer (need not be NUL-terminated, may
 * be cut anywhere): 1 when they start with "HTTP/", with *data_port from an
 * X-Dscache-Data-Port header (case-insensitive, before the empty line; 1..65535, else 0); 0
 * otherwise (*data_port 0). Reads only buf[0..len). */
int dsc_conn_http_answer_parse(const char *buf, size_t len, uint16_t *data_port);
/* Sets the time-out of every later send/recv on conn, milliseconds (0 = none). */
void dsc_conn_set_timeout(dsc_conn_t *conn, uint32_t timeout_ms);
/* What HELLO returned. */
const dsc_conn_info_t *dsc_conn_info(const dsc_conn_t *conn);

/* For a connection with nothing outstanding, without blocking: consumes the answers already
 * received whose request id has id_bit and whose opcode is `opcode` (answers nobody waits for,
 * such as REPORT's; with DSC_OP_REPORT, HINT's too: both are advisory). Returns 1 when the server
 * closed the connection, it failed, or it holds anything else (the server gave up on it); 0 when it
 * is usable. */
int dsc_conn_idle_check(dsc_conn_t *conn, uint64_t id_bit, uint8_t opcode);
/* The same, handing each consumed answer (header, body) to seen(arg, ...) first (NULL: none). */
int dsc_conn_idle_check_cb(dsc_conn_t *conn, uint64_t id_bit, uint8_t opcode,
                           void (*seen)(void *arg, const dsc_frame_header_t *h,
                                        const uint8_t *body),
                           void *arg);

/* Sends one request frame (header + body). Returns 0 or DSC_ETIMEDOUT, DSC_EPIPE,
 * DSC_ECONNRESET, DSC_ECLOSED. After an error the connection is unusable: close it. */
int dsc_conn_send(dsc_conn_t *conn, uint8_t opcode, uint64_t request_id, const void *body,
                  size_t body_len);
/* Receives the next frame header (whichever request it answers). Returns 0, or DSC_ECLOSED (peer
 * closed), DSC_ETIMEDOUT, DSC_ECONNRESET, or a header decode error (DSC_EBADMAGIC ...). */
int dsc_conn_recv_header(dsc_conn_t *conn, dsc_frame_header_t *header);
/* Reads exactly len body bytes into dst (the caller's buffer: pinned memory, a slot, ...).
 * Returns 0 or an error as above. */
int dsc_conn_recv_body(dsc_conn_t *conn, void *dst, size_t len);
/* Synchronous call: sends a request with a fresh id, waits for its response, and returns the
 * response body in *body (malloc'd, NUL-terminated for convenience, caller frees) and its length.
 * A non-OK status becomes its error code (dsc_status_to_err) and the server's message is kept
 * in dsc_conn_last_error(). Must not be mixed with outstanding pipelined requests. */
int dsc_conn_call(dsc_conn_t *conn, uint8_t opcode, const void *body, size_t body_len,
                  uint8_t **resp_body, size_t *resp_len);
/* The message of the last error response ("" if none). Owned by the connection. */
const char *dsc_conn_last_error(const dsc_conn_t *conn);
/* Keeps an error answer's message (len bytes, cut at DSC_ERROR_MAX_MESSAGE) as the last error,
 * for a caller that receives frames itself (multiget.c). */
void dsc_conn_set_last_error(dsc_conn_t *conn, const void *msg, size_t len);
int dsc_conn_fd(const dsc_conn_t *conn);
/* Bytes received and buffered but not yet read by dsc_conn_recv_*: when > 0, the next answer
 * (or its start) is here although the socket may not poll readable. NULL: 0. */
size_t dsc_conn_buffered(const dsc_conn_t *conn);
/* Shuts the socket down both ways: a thread blocked in a send or receive on it returns with an
 * error. Safe from another thread; the connection must still be closed. NULL is a no-op. */
void dsc_conn_shutdown(dsc_conn_t *conn);
/* Closes and frees. NULL is a no-op. */
void dsc_conn_close(dsc_conn_t *conn);
/* Bytes of client memory one open connection holds: its structure and its receive buffer (for
 * sizing a rank's fan-out: tests/sim/scale_sim.c, docs/scale.md). */
size_t dsc__conn_footprint(void);

#endif
