/* Blocking TCP connection to one dscached server (client/lib/source/conn.h): getaddrinfo,
 * poll-based time-outs, HELLO, buffered frame reads so that small pipelined responses cost few
 * syscalls. */
#include "conn.h"
#include "dsc_sys.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define CONN_RBUF_SIZE (64u << 10)
/* Bodies at least this large are read straight into the caller's buffer, not through rbuf. */
#define CONN_DIRECT_MIN (16u << 10)

struct dsc_conn {
    int fd;
    int broken; /* an I/O error happened: every later call fails with DSC_ECLOSED */
    uint32_t timeout_ms;
    uint64_t next_id;
    dsc_conn_info_t info;
    uint8_t *rbuf;
    size_t rpos, rlen; /* unread bytes are rbuf[rpos, rlen) */
    char last_error[DSC_ERROR_MAX_MESSAGE + 1];
};

static int errno_to_dsc(int err) {
    switch (err) {
    case ETIMEDOUT:
        return DSC_ETIMEDOUT;
    case EPIPE:
        return DSC_EPIPE;
    case ECONNRESET:
        return DSC_ECONNRESET;
    case ECONNREFUSED:
        return DSC_ECONNREFUSED;
    case ENOMEM:
        return DSC_ENOMEM;
    default:
        return DSC_EIO;
    }
}

/* Waits until fd is ready for `events`. Returns 0, DSC_ETIMEDOUT or an I/O error. */
static int wait_fd(int fd, short events, uint32_t timeout_ms) {
    struct pollfd pfd = {.fd = fd, .events = events};
    for (;;) {
        int n = poll(&pfd, 1, timeout_ms ? (int)timeout_ms : -1);
        if (n > 0)
            return 0; /* errors surface in the following send/recv */
        if (n == 0)
            return DSC_ETIMEDOUT;
        if (errno != EINTR)
            return errno_to_dsc(errno);
    }
}

static int connect_one(const struct addrinfo *ai, uint32_t timeout_ms, int *out_fd) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0)
        return errno_to_dsc(errno);
    int rc = 0;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) {
            rc = errno_to_dsc(errno);
            goto fail;
        }
        rc = wait_fd(fd, POLLOUT, timeout_ms);
        if (rc < 0)
            goto fail;
        int soerr = 0;
        socklen_t slen = sizeof soerr;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &slen) != 0)
            soerr = errno;
        if (soerr != 0) {
            rc = errno_to_dsc(soerr);
            goto fail;
        }
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    *out_fd = fd;
    return 0;
fail:
    close(fd);
    return rc;
}

/* Sends every byte of the iovecs (modified in place). */
static int send_all(dsc_conn_t *conn, struct iovec *iov, int iovcnt) {
    while (iovcnt > 0) {
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)iovcnt};
        ssize_t n = sendmsg(conn->fd, &msg, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                int rc = wait_fd(conn->fd, POLLOUT, conn->timeout_ms);
                if (rc < 0)
                    return rc;
                continue;
            }
            return errno_to_dsc(errno);
        }
        size_t left = (size_t)n;
        while (iovcnt > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            iovcnt--;
        }
        if (iovcnt > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return 0;
}

/* One recv into dst (up to cap bytes), waiting for data. Returns bytes (> 0) or an error;
 * DSC_ECLOSED when the peer closed. */
static int recv_some(dsc_conn_t *conn, uint8_t *dst, size_t cap) {
    for (;;) {
        ssize_t n = recv(conn->fd, dst, cap, 0);
        if (n > 0)
            return n > INT32_MAX ? INT32_MAX : (int)n;
        if (n == 0)
            return DSC_ECLOSED;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int rc = wait_fd(conn->fd, POLLIN, conn->timeout_ms);
            if (rc < 0)
                return rc;
            continue;
        }
        return errno_to_dsc(errno);
    }
}

/* Reads exactly len bytes, first from rbuf, then either refilling rbuf (small reads) or
 * straight into dst (large ones). */
static int recv_exact(dsc_conn_t *conn, void *dst, size_t len) {
    uint8_t *out = dst;
    size_t have = conn->rlen - conn->rpos;
    size_t take = have < len ? have : len;
    if (take) {
        memcpy(out, conn->rbuf + conn->rpos, take);
        conn->rpos += take;
        out += take;
        len -= take;
    }
    while (len > 0) {
        if (len >= CONN_DIRECT_MIN) {
            int n = recv_some(conn, out, len);
            if (n < 0)
                return n;
            out += n;
            len -= (size_t)n;
            continue;
        }
        conn->rpos = conn->rlen = 0;
        int n = recv_some(conn, conn->rbuf, CONN_RBUF_SIZE);
        if (n < 0)
            return n;
        conn->rlen = (size_t)n;
        take = conn->rlen < len ? conn->rlen : len;
        memcpy(out, conn->rbuf, take);
        conn->rpos = take;
        out += take;
        len -= take;
    }
    return 0;
}

static int fail(dsc_conn_t *conn, int rc) {
    if (rc < 0)
        conn->broken = 1;
    return rc;
}

int dsc_conn_send(dsc_conn_t *conn, uint8_t opcode, uint64_t request_id, const void *body,
                  size_t body_len) {
    if (conn == NULL || (body_len && body == NULL))
        return DSC_EINVAL;
    if (conn->broken)
        return DSC_ECLOSED;
    if (body_len > DSC_FRAME_MAX_BODY)
        return DSC_ETOOLARGE;
    dsc_frame_header_t h = {
        .version = (uint8_t)(conn->info.version ? conn->info.version : DSC_PROTO_VERSION),
        .opcode = opcode,
        .request_id = request_id,
        .body_len = (uint32_t)body_len};
    uint8_t hdr[DSC_FRAME_HEADER_SIZE];
    dsc_frame_header_encode(&h, hdr);
    struct iovec iov[2] = {{hdr, sizeof hdr}, {(void *)body, body_len}};
    return fail(conn, send_all(conn, iov, body_len ? 2 : 1));
}

int dsc_conn_recv_header(dsc_conn_t *conn, dsc_frame_header_t *header) {
    if (conn == NULL || header == NULL)
        return DSC_EINVAL;
    if (conn->broken)
        return DSC_ECLOSED;
    uint8_t hdr[DSC_FRAME_HEADER_SIZE];
    int rc = recv_exact(conn, hdr, sizeof hdr);
    if (rc < 0)
        return fail(conn, rc);
    rc = dsc_frame_header_decode(hdr, sizeof hdr, DSC_FRAME_MAX_BODY, header);
    if (rc < 0)
        return fail(conn, rc);
    if (!(header->flags & DSC_FLAG_RESPONSE))
        return fail(conn, DSC_EPROTO);
    return 0;
}

int dsc_conn_idle_check(dsc_conn_t *conn, uint64_t id_bit, uint8_t opcode) {
    return dsc_conn_idle_check_cb(conn, id_bit, opcode, NULL, NULL);
}

int dsc_conn_idle_check_cb(dsc_conn_t *conn, uint64_t id_bit, uint8_t opcode,
                           void (*seen)(void *arg, const dsc_frame_header_t *h,
                                        const uint8_t *body),
                           void *arg) {
    if (conn == NULL || conn->broken || conn->rbuf == NULL)
        return 1;
    for (;;) {
        size_t have = conn->rlen - conn->rpos;
        if (have < CONN_RBUF_SIZE) {
            memmove(conn->rbuf, conn->rbuf + conn->rpos, have);
            conn->rpos = 0;
            conn->rlen = have;
            ssize_t n = recv(conn->fd, conn->rbuf + have, CONN_RBUF_SIZE - have, MSG_DONTWAIT);
            if (n == 0)
                return 1; /* the server closed it */
            if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                return 1;
            if (n > 0) {
                conn->rlen += (size_t)n;
                have += (size_t)n;
            }
        }
        if (have < DSC_FRAME_HEADER_SIZE)
            return 0; /* nothing, or the start of an answer still on its way */
        dsc_frame_header_t h;
        if (dsc_frame_header_decode(conn->rbuf + conn->rpos, have, DSC_FRAME_MAX_BODY, &h) < 0 ||
            !(h.flags & DSC_FLAG_RESPONSE) || !(h.request_id & id_bit) ||
            (h.opcode != opcode && !(opcode == DSC_OP_REPORT && h.opcode == DSC_OP_HINT)) ||
            DSC_FRAME_HEADER_SIZE + (size_t)h.body_len > CONN_RBUF_SIZE)
            return 1; /* something else: the server gave up on the connection */
        if (DSC_FRAME_HEADER_SIZE + (size_t)h.body_len > have)
            return 0;
        if (seen != NULL)
            seen(arg, &h, conn->rbuf + conn->rpos + DSC_FRAME_HEADER_SIZE);
        conn->rpos += DSC_FRAME_HEADER_SIZE + (size_t)h.body_len; /* an answer nobody waits for */
    }
}

int dsc_conn_recv_body(dsc_conn_t *conn, void *dst, size_t len) {
    if (conn == NULL || (len && dst == NULL))
        return DSC_EINVAL;
    if (conn->broken)
        return DSC_ECLOSED;
    return fail(conn, recv_exact(conn, dst, len));
}

static void set_last_error(dsc_conn_t *conn, const uint8_t *msg, size_t len) {
    if (len > DSC_ERROR_MAX_MESSAGE)
        len = DSC_ERROR_MAX_MESSAGE;
    memcpy(conn->last_error, msg, len);
    conn->last_error[len] = '\0';
}

int dsc_conn_call(dsc_conn_t *conn, uint8_t opcode, const void *body, size_t body_len,
                  uint8_t **resp_body, size_t *resp_len) {
    if (conn == NULL || resp_body == NULL || resp_len == NULL)
        return DSC_EINVAL;
    *resp_body = NULL;
    *resp_len = 0;
    uint64_t id = conn->next_id++;
    int rc = dsc_conn_send(conn, opcode, id, body, body_len);
    if (rc < 0)
        return rc;
    dsc_frame_header_t h;
    rc = dsc_conn_recv_header(conn, &h);
    if (rc < 0)
        return rc;
    if (h.request_id != id || h.opcode != opcode)
        return fail(conn, DSC_EPROTO);
    uint8_t *buf = malloc((size_t)h.body_len + 1);
    if (buf == NULL)
        return fail(conn, DSC_ENOMEM); /* the body is still on the wire: unusable */
    rc = dsc_conn_recv_body(conn, buf, h.body_len);
    if (rc < 0) {
        free(buf);
        return rc;
    }
    buf[h.body_len] = '\0';
    if (h.status != DSC_STATUS_OK) {
        set_last_error(conn, buf, h.body_len);
        free(buf);
        return dsc_status_to_err(h.status);
    }
    conn->last_error[0] = '\0';
    *resp_body = buf;
    *resp_len = h.body_len;
    return 0;
}

static void set_last_error_text(dsc_conn_t *conn, const char *text) {
    set_last_error(conn, (const uint8_t *)text, strlen(text));
}

/* The AUTH exchange after a HELLO that granted DSC_FEATURE_AUTH: sends the client's MAC and
 * checks the server's, so each side proves it knows the secret (PROTOCOL.md, Authentication). */
static int authenticate(dsc_conn_t *conn, const dsc_credential_t *cred,
                        const uint8_t client_nonce[DSC_AUTH_NONCE_SIZE],
                        const uint8_t server_nonce[DSC_AUTH_NONCE_SIZE]) {
    uint8_t mine[DSC_AUTH_MAC_SIZE], expect[DSC_AUTH_MAC_SIZE];
    size_t name_len = strlen(cred->name);
    int rc = dsc_auth_mac(DSC_AUTH_CLIENT, cred->secret, cred->secret_len, conn->info.version,
                          cred->name, name_len, client_nonce, server_nonce, mine);
    if (rc == 0)
        rc = dsc_auth_mac(DSC_AUTH_SERVER, cred->secret, cred->secret_len, conn->info.version,
                          cred->name, name_len, client_nonce, server_nonce, expect);
    if (rc < 0)
        goto done;
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    rc = dsc_conn_call(conn, DSC_OP_AUTH, mine, sizeof mine, &resp, &resp_len);
    if (rc == 0) {
        const uint8_t *theirs;
        if (dsc_auth_mac_decode(resp, resp_len, &theirs) < 0) {
            rc = fail(conn, DSC_EPROTO);
        } else if (!dsc_auth_mac_equal(theirs, expect)) {
            set_last_error_text(conn, "the server did not prove the credential's secret");
            rc = fail(conn, DSC_EUNAUTH);
        }
    }
    free(resp);
done:
    dsc_auth_wipe(mine, sizeof mine);
    dsc_auth_wipe(expect, sizeof expect);
    return rc;
}

static int hello(dsc_conn_t *conn, uint64_t members_hash, const dsc_credential_t *cred) {
    dsc_hello_req_t req = {.min_version = DSC_PROTO_MIN_VERSION,
                           .max_version = DSC_PROTO_VERSION,
                           .features = DSC_FEATURE_RDMA | /* tell me whether RDMA is offered */
                                       DSC_FEATURE_DATASET_VERSION | /* versions checked */
                                       DSC_FEATURE_MGET |            /* MGET answered */
                                       DSC_FEATURE_HINT_SHARE |      /* read-ahead trimmed */
                                       DSC_FEATURE_REPORT_HEDGE |    /* REPORT straggler trailer */
                                       DSC_FEATURE_RANGE,            /* sample ranges answered */
                           .members_hash = members_hash,
                           .client_name = {"libdscache", 10}};
    uint8_t client_nonce[DSC_AUTH_NONCE_SIZE];
    uint8_t init_body[DSC_AUTH_INIT_MAX];
    if (cred != NULL) {
        int rc = dsc_auth_random(client_nonce, sizeof client_nonce);
        if (rc < 0)
            return rc;
        dsc_auth_init_t init = {
            DSC_AUTH_METHOD_HMAC_SHA256, {cred->name, (uint16_t)strlen(cred->name)}, client_nonce};
        int n = dsc_auth_init_encode(&init, init_body, sizeof init_body);
        if (n < 0)
            return n;
        req.features |= DSC_FEATURE_AUTH;
        req.auth.ptr = (const char *)init_body;
        req.auth.len = (uint16_t)n;
    }
    uint8_t body[256 + DSC_AUTH_INIT_MAX];
    int n = dsc_hello_req_encode(&req, body, sizeof body);
    if (n < 0)
        return n;
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    int rc = dsc_conn_call(conn, DSC_OP_HELLO, body, (size_t)n, &resp, &resp_len);
    if (rc == DSC_EBADMAGIC || rc == DSC_EBADFRAME || rc == DSC_ETOOLARGE)
        rc = DSC_EPROTO;
    if (rc < 0)
        return rc;
    dsc_hello_resp_t hr;
    if (dsc_hello_resp_decode(resp, resp_len, &hr) < 0 || hr.version < DSC_PROTO_MIN_VERSION ||
        hr.version > DSC_PROTO_VERSION || (hr.features & ~req.features) != 0) {
        free(resp);
        return DSC_EPROTO;
    }
    conn->info.version = hr.version;
    conn->info.max_body = hr.max_body;
    conn->info.members_hash = hr.members_hash;
    conn->info.features = hr.features;
    size_t name_len = hr.server_name.len < sizeof conn->info.server_name - 1
                          ? hr.server_name.len
                          : sizeof conn->info.server_name - 1;
    memcpy(conn->info.server_name, hr.server_name.ptr, name_len);
    conn->info.server_name[name_len] = '\0';
    if (cred != NULL) {
        if (hr.server_nonce == NULL) {
            /* Never fall back to an unauthenticated server: it could be anyone. */
            set_last_error_text(conn, "the server does not authenticate (no --auth-file) but this "
                                      "client has a credential");
            rc = DSC_EUNAUTH;
        } else {
            rc = authenticate(conn, cred, client_nonce, hr.server_nonce);
        }
    }
    free(resp);
    return rc;
}

int dsc_conn_open(const char *host, uint16_t port, uint32_t timeout_ms, uint64_t members_hash,
                  dsc_conn_t **out) {
    return dsc_conn_open_auth(host, port, timeout_ms, members_hash, NULL, out);
}

int dsc_conn_open_auth(const char *host, uint16_t port, uint32_t timeout_ms, uint64_t members_hash,
                       const dsc_credential_t *cred, dsc_conn_t **out) {
    if (host == NULL || out == NULL)
        return DSC_EINVAL;
    *out = NULL;
    char port_text[8];
    snprintf(port_text, sizeof port_text, "%u", (unsigned)port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    if (getaddrinfo(host, port_text, &hints, &res) != 0 || res == NULL)
        return DSC_EUNAVAIL;
    int rc = DSC_ECONNREFUSED;
    int fd = -1;
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        rc = connect_one(ai, timeout_ms, &fd);
        if (rc == 0)
            break;
    }
    freeaddrinfo(res);
    if (rc < 0)
        return rc;
    dsc_conn_t *conn = calloc(1, sizeof *conn);
    uint8_t *rbuf = malloc(CONN_RBUF_SIZE);
    if (conn == NULL || rbuf == NULL) {
        free(conn);
        free(rbuf);
        close(fd);
        return DSC_ENOMEM;
    }
    conn->fd = fd;
    conn->rbuf = rbuf;
    conn->timeout_ms = timeout_ms;
    conn->next_id = 1;
    rc = hello(conn, members_hash, cred);
    if (rc < 0) {
        dsc_conn_close(conn);
        return rc;
    }
    *out = conn;
    return 0;
}

void dsc_conn_set_timeout(dsc_conn_t *conn, uint32_t timeout_ms) {
    conn->timeout_ms = timeout_ms;
}

int dsc_conn_open_addr(const char *hostport, uint32_t timeout_ms, uint64_t members_hash,
                       dsc_conn_t **out) {
    return dsc_conn_open_addr_auth(hostport, timeout_ms, members_hash, NULL, out);
}

int dsc_conn_open_addr_auth(const char *hostport, uint32_t timeout_ms, uint64_t members_hash,
                            const dsc_credential_t *cred, dsc_conn_t **out) {
    char host[256];
    uint16_t port;
    if (out != NULL)
        *out = NULL;
    if (dsc_split_hostport(hostport, host, sizeof host, &port) < 0)
        return DSC_EINVAL;
    return dsc_conn_open_auth(host, port, timeout_ms, members_hash, cred, out);
}

const dsc_conn_info_t *dsc_conn_info(const dsc_conn_t *conn) {
    return conn ? &conn->info : NULL;
}

const char *dsc_conn_last_error(const dsc_conn_t *conn) {
    return conn ? conn->last_error : "";
}

void dsc_conn_set_last_error(dsc_conn_t *conn, const void *msg, size_t len) {
    if (conn != NULL)
        set_last_error(conn, msg, len);
}

int dsc_conn_fd(const dsc_conn_t *conn) {
    return conn ? conn->fd : -1;
}

size_t dsc_conn_buffered(const dsc_conn_t *conn) {
    return conn ? conn->rlen - conn->rpos : 0;
}

void dsc_conn_shutdown(dsc_conn_t *conn) {
    if (conn != NULL && conn->fd >= 0)
        shutdown(conn->fd, SHUT_RDWR);
}

void dsc_conn_close(dsc_conn_t *conn) {
    if (conn == NULL)
        return;
    if (conn->fd >= 0)
        close(conn->fd);
    free(conn->rbuf);
    free(conn);
}

int dsc_conn_http_probe(const char *hostport, uint32_t timeout_ms, uint16_t *data_port) {
    char host[256];
    uint16_t port;
    *data_port = 0;
    if (dsc_split_hostport(hostport, host, sizeof host, &port) < 0)
        return 0;
    char port_text[8];
    snprintf(port_text, sizeof port_text, "%u", (unsigned)port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    if (getaddrinfo(host, port_text, &hints, &res) != 0 || res == NULL)
        return 0;
    int fd = -1;
    int rc = connect_one(res, timeout_ms, &fd);
    freeaddrinfo(res);
    if (rc < 0)
        return 0;
    static const char req[] = "GET /healthz HTTP/1.0\r\n\r\n";
    char buf[1024];
    size_t have = 0;
    int http = 0;
    if (send(fd, req, sizeof req - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof req - 1)) {
        /* Headers only: enough for the status line and X-Dscache-Data-Port. */
        while (have + 1 < sizeof buf && wait_fd(fd, POLLIN, timeout_ms) == 0) {
            ssize_t n = recv(fd, buf + have, sizeof buf - 1 - have, 0);
            if (n <= 0)
                break;
            have += (size_t)n;
            buf[have] = '\0';
            if (strstr(buf, "\r\n\r\n") != NULL)
                break;
        }
        http = dsc_conn_http_answer_parse(buf, have, data_port);
    }
    close(fd);
    return http;
}

int dsc_conn_http_answer_parse(const char *buf, size_t len, uint16_t *data_port) {
    *data_port = 0;
    if (len < 5 || memcmp(buf, "HTTP/", 5) != 0)
        return 0;
    /* The headers end at the first empty line (or where the bytes end). */
    static const char hdr[] = "\nx-dscache-data-port:";
    const size_t hl = sizeof hdr - 1;
    for (size_t i = 0; i + hl <= len; i++) {
        if (buf[i] == '\n' && i + 1 < len && (buf[i + 1] == '\r' || buf[i + 1] == '\n'))
            break;
        if (strncasecmp(buf + i, hdr, hl) != 0)
            continue;
        size_t k = i + hl;
        while (k < len && (buf[k] == ' ' || buf[k] == '\t'))
            k++;
        unsigned long v = 0;
        size_t digits = 0;
        while (k < len && buf[k] >= '0' && buf[k] <= '9' && digits < 6) {
            v = v * 10 + (unsigned long)(buf[k++] - '0');
            digits++;
        }
        if (digits > 0 && v > 0 && v <= 65535)
            *data_port = (uint16_t)v;
        break;
    }
    return 1;
}

size_t dsc__conn_footprint(void) {
    return sizeof(struct dsc_conn) + CONN_RBUF_SIZE;
}
