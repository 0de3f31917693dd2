/* Hostile clients for the integration tests (in the spirit of memcached's t/malicious-commands.t):
 * connection floods, slow and idle connections, pipelined GETs never read, protocol conformance
 * probes, a shutdown drain probe, and a tampering proxy that damages a real server's answers. */
#include "protocol.h"
#include "test_frames.h"
#include "util.h"
#include "wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int die(const char *what) {
    fprintf(stderr, "hostile_client: %s\n", what);
    return 2;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static size_t frame(uint8_t *out, uint8_t opcode, uint32_t status, uint64_t id, const void *body,
                    uint32_t len) {
    dsc_frame_header_t h = {
        .version = 1, .opcode = opcode, .status = status, .request_id = id, .body_len = len};
    dsc_frame_header_encode(&h, out);
    if (len)
        memcpy(out + DSC_FRAME_HEADER_SIZE, body, len);
    return DSC_FRAME_HEADER_SIZE + len;
}

static size_t hello_frame(uint8_t *out) {
    dsc_hello_req_t req = {.min_version = 1, .max_version = DSC_PROTO_VERSION};
    uint8_t body[64];
    int n = dsc_hello_req_encode(&req, body, sizeof body);
    return frame(out, DSC_OP_HELLO, 0, 1, body, (uint32_t)n);
}

static size_t get_frame(uint8_t *out, uint64_t id, const char *ds, uint32_t shard, uint32_t first,
                        uint32_t count) {
    dsc_get_req_t req = {.dataset = {ds, (uint16_t)strlen(ds)},
                         .shard_id = shard,
                         .first_chunk = first,
                         .chunk_count = count};
    uint8_t body[128];
    int n = dsc_get_req_encode(&req, body, sizeof body);
    return frame(out, DSC_OP_GET, 0, id, body, (uint32_t)n);
}

/* Reads exactly n bytes within timeout_ms. Returns 0, or -1 on close, error or time-out. */
static int recv_all(int fd, void *p, size_t n, int timeout_ms) {
    double deadline = now_s() + timeout_ms / 1000.0;
    while (n > 0) {
        int left = (int)((deadline - now_s()) * 1000);
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&pfd, 1, left) <= 0)
            return -1;
        ssize_t r = recv(fd, p, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p = (uint8_t *)p + r;
        n -= (size_t)r;
    }
    return 0;
}

/* One response frame: header in *h, body (malloc'd) in *body. Returns 0 or -1. */
static int recv_frame(int fd, dsc_frame_header_t *h, uint8_t **body, int timeout_ms) {
    uint8_t hdr[DSC_FRAME_HEADER_SIZE];
    if (recv_all(fd, hdr, sizeof hdr, timeout_ms) < 0)
        return -1;
    if (dsc_frame_header_decode(hdr, sizeof hdr, DSC_FRAME_MAX_BODY, h) != DSC_FRAME_HEADER_SIZE)
        return -1;
    *body = malloc(h->body_len + 1);
    if (*body == NULL || recv_all(fd, *body, h->body_len, timeout_ms) < 0) {
        free(*body);
        *body = NULL;
        return -1;
    }
    return 0;
}

/* 1 when the server closed (or reset) the connection, else 0. Never blocks. */
static int peer_closed(int fd) {
    char b[4096];
    for (;;) {
        ssize_t r = recv(fd, b, sizeof b, MSG_DONTWAIT);
        if (r == 0)
            return 1;
        if (r < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : 1;
    }
}

/* Connects to addr from 127.0.0.(2 + i % sources) when sources > 0 (several peers on one host),
 * else from any address, giving up after 3 s (a server whose backlog is full drops SYNs).
 * Returns a blocking fd or -1. */
static int connect_from(const char *addr, int i, int sources) {
    char host[256];
    uint16_t port;
    if (dsc_split_hostport(addr, host, sizeof host, &port) < 0)
        return -1;
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
    struct sockaddr_in from = {.sin_family = AF_INET};
    if (inet_pton(AF_INET, host, &to.sin_addr) != 1)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    if (sources > 0) {
        from.sin_addr.s_addr = htonl(0x7f000002u + (uint32_t)(i % sources));
        if (bind(fd, (struct sockaddr *)&from, sizeof from) != 0) {
            close(fd);
            return -1;
        }
    }
    if (connect(fd, (struct sockaddr *)&to, sizeof to) != 0) {
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        int err = 0;
        socklen_t el = sizeof err;
        if (errno != EINPROGRESS || poll(&pfd, 1, 3000) != 1 ||
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) {
            close(fd);
            return -1;
        }
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

static void raise_nofile(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* hold ADDR N SECONDS MODE: opens up to N connections (MODE idle: nothing sent, hello: a HELLO,
 * partial: 10 bytes of a frame header, dribble: one more header byte each second, trickle: an
 * HTTP request head one byte a second on each connection, never ending it), prints
 * "opened K", holds them SECONDS, then prints "closed-by-server M" (connections the server
 * closed meanwhile) and closes them all. HOSTILE_SOURCES=N in the environment: connect from N
 * loopback addresses in turn (127.0.0.2, ...), as N peers. */
static const char trickle_head[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Trickle: ";

static int cmd_hold(int argc, char **argv) {
    if (argc < 6)
        return die("usage: hold ADDR N SECONDS idle|hello|partial|dribble|trickle");
    raise_nofile();
    int n = atoi(argv[3]);
    double secs = atof(argv[4]);
    const char *mode = argv[5];
    int *fds = calloc((size_t)n, sizeof *fds);
    if (fds == NULL)
        return die("out of memory");
    uint8_t buf[256];
    size_t hl = hello_frame(buf);
    int opened = 0;
    const char *spread = getenv("HOSTILE_SOURCES");
    int sources = spread ? atoi(spread) : 0;
    for (int i = 0; i < n; i++) {
        int fd = connect_from(argv[2], i, sources);
        if (fd < 0)
            break;
        if (strcmp(mode, "hello") == 0)
            send_all(fd, buf, hl);
        else if (strcmp(mode, "partial") == 0 || strcmp(mode, "dribble") == 0)
            send_all(fd, buf, 10);
        else if (strcmp(mode, "trickle") == 0)
            send_all(fd, trickle_head, 1);
        fds[opened++] = fd;
    }
    printf("opened %d\n", opened);
    fflush(stdout);
    double end = now_s() + secs;
    size_t sent = 10;
    while (now_s() < end) {
        double left = end - now_s();
        usleep((useconds_t)((left < 1.0 ? left : 1.0) * 1e6));
        if (strcmp(mode, "dribble") == 0 && sent < DSC_FRAME_HEADER_SIZE) {
            for (int i = 0; i < opened; i++)
                send(fds[i], buf + sent, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            sent++;
        }
        if (strcmp(mode, "trickle") == 0) {
            /* The head's next byte; past its start, one more byte of a header value forever. */
            size_t k = sent - 10 + 1;
            char b = k < sizeof trickle_head - 1 ? trickle_head[k] : 'a';
            for (int i = 0; i < opened; i++)
                send(fds[i], &b, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            sent++;
        }
    }
    int closed = 0;
    for (int i = 0; i < opened; i++) {
        closed += peer_closed(fds[i]);
        close(fds[i]);
    }
    printf("closed-by-server %d\n", closed);
    free(fds);
    return 0;
}

/* flood ADDR DATASET SHARDS CHUNKS SECONDS: HELLO, then GETs of whole shards (CHUNKS chunks,
 * shards in turn) written as fast as the socket takes them, never reading an answer, for
 * SECONDS. Prints the requests written. */
static int cmd_flood(int argc, char **argv) {
    if (argc < 7)
        return die("usage: flood ADDR DATASET SHARDS CHUNKS SECONDS");
    const char *ds = argv[3];
    uint32_t shards = (uint32_t)atoi(argv[4]), chunks = (uint32_t)atoi(argv[5]);
    double end = now_s() + atof(argv[6]);
    int fd = raw_connect(argv[2]);
    if (fd < 0)
        return die("cannot connect");
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small); /* hold little in our kernel */
    uint8_t buf[256];
    send_all(fd, buf, hello_frame(buf));
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    uint64_t written = 0;
    uint8_t req[256];
    size_t len = 0, off = 0;
    while (now_s() < end) {
        if (off == len) {
            len = get_frame(req, written + 2, ds, (uint32_t)(written % shards), 0, chunks);
            off = 0;
        }
        ssize_t w = send(fd, req + off, len - off, MSG_NOSIGNAL);
        if (w > 0) {
            off += (size_t)w;
            if (off == len)
                written++;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            break;
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        poll(&pfd, 1, 100);
    }
    printf("written %llu\n", (unsigned long long)written);
    close(fd);
    return 0;
}

/* churn ADDR DATASET SHARDS CHUNKS ROUNDS: ROUNDS times: connect, HELLO, 16 whole-shard GETs,
 * close at once without reading. */
static int cmd_churn(int argc, char **argv) {
    if (argc < 7)
        return die("usage: churn ADDR DATASET SHARDS CHUNKS ROUNDS");
    uint32_t shards = (uint32_t)atoi(argv[4]), chunks = (uint32_t)atoi(argv[5]);
    int rounds = atoi(argv[6]);
    uint8_t buf[256];
    for (int r = 0; r < rounds; r++) {
        int fd = raw_connect(argv[2]);
        if (fd < 0)
            continue;
        send_all(fd, buf, hello_frame(buf));
        for (uint32_t i = 0; i < 16; i++)
            send_all(fd, buf, get_frame(buf, i + 2, argv[3], (r * 16 + i) % shards, 0, chunks));
        close(fd);
    }
    return 0;
}

/* drain ADDR DATASET SHARDS CHUNKS N: HELLO, N whole-shard GETs pipelined, prints "sent N", then
 * reads answers until the server closes: prints "answered K of N" (any status counts as an
 * answer) and exits 0 when K == N. */
static int cmd_drain(int argc, char **argv) {
    if (argc < 7)
        return die("usage: drain ADDR DATASET SHARDS CHUNKS N");
    uint32_t shards = (uint32_t)atoi(argv[4]), chunks = (uint32_t)atoi(argv[5]);
    int n = atoi(argv[6]);
    int fd = raw_connect(argv[2]);
    if (fd < 0)
        return die("cannot connect");
    uint8_t buf[256];
    send_all(fd, buf, hello_frame(buf));
    dsc_frame_header_t h;
    uint8_t *body = NULL;
    if (recv_frame(fd, &h, &body, 10000) < 0 || h.status != DSC_STATUS_OK)
        return die("HELLO failed");
    free(body);
    for (int i = 0; i < n; i++)
        send_all(fd, buf,
                 get_frame(buf, (uint64_t)i + 2, argv[3], (uint32_t)i % shards, 0, chunks));
    printf("sent %d\n", n);
    fflush(stdout);
    int answered = 0, failed = 0;
    while (recv_frame(fd, &h, &body, 60000) == 0) {
        answered++;
        failed += h.status != DSC_STATUS_OK;
        free(body);
    }
    printf("answered %d of %d (%d with an error status)\n", answered, n, failed);
    close(fd);
    return answered == n ? 0 : 1;
}

/* Sends one frame on fd and reads the answer: returns its status, or -1 when the connection
 * closed or timed out; *closed_after is set when the server closed after answering. */
static int exchange(int fd, const uint8_t *req, size_t len, dsc_frame_header_t *h, uint8_t **body) {
    if (send_all(fd, req, len) < 0)
        return -1;
    if (recv_frame(fd, h, body, 10000) < 0)
        return -1;
    return (int)h->status;
}

static int conn_hello(const char *addr, uint32_t *max_body) {
    int fd = raw_connect(addr);
    if (fd < 0)
        return -1;
    uint8_t buf[256];
    dsc_frame_header_t h;
    uint8_t *body = NULL;
    if (exchange(fd, buf, hello_frame(buf), &h, &body) != DSC_STATUS_OK) {
        free(body);
        close(fd);
        return -1;
    }
    dsc_hello_resp_t resp;
    if (max_body && dsc_hello_resp_decode(body, h.body_len, &resp) == 0)
        *max_body = resp.max_body;
    free(body);
    return fd;
}

static int fails;
static void check(int ok, const char *what) {
    printf("%s: %s\n", ok ? "ok" : "FAIL", what);
    fails += !ok;
}

/* Sends one frame on a fresh connection (after HELLO) and reads the answer: its status, or -1
 * when the connection failed, closed or timed out. *h and *body (freed here) are kept for
 * the caller through h only. */
static int probe(const char *addr, const uint8_t *req, size_t len, dsc_frame_header_t *h) {
    int fd = conn_hello(addr, NULL);
    if (fd < 0)
        return -1;
    uint8_t *body = NULL;
    int st = exchange(fd, req, len, h, &body);
    free(body);
    close(fd);
    return st;
}

static void check_trailing(const char *addr, uint8_t *req, uint8_t opcode, const uint8_t *body,
                           int n) {
    uint8_t b[160];
    if (n > 0)
        memcpy(b, body, (size_t)n);
    b[n] = 0;
    dsc_frame_header_t h;
    int st = probe(addr, req, frame(req, opcode, 0, 9, b, (uint32_t)n + 1), &h);
    char what[96];
    snprintf(what, sizeof what, "%s with a trailing byte: BAD_REQUEST (got %d)",
             dsc_opcode_name(opcode), st);
    check(st == DSC_STATUS_BAD_REQUEST, what);
}

/* conform ADDR: the server enforces the max_body it advertises, rejects trailing bytes on every
 * operation with an empty or fixed body, refuses a request with a non-zero status (BAD_REQUEST,
 * connection still usable) and answers a second HELLO as PROTOCOL.md says (it starts over).
 * Each probe on its own connection. Exit 0 when every check holds. */
static int cmd_conform(int argc, char **argv) {
    if (argc < 3)
        return die("usage: conform ADDR");
    const char *addr = argv[2];
    uint32_t max_body = 0;
    int fd = conn_hello(addr, &max_body);
    if (fd < 0)
        return die("cannot connect / HELLO");
    close(fd);
    check(max_body >= 4096 && max_body <= DSC_FRAME_MAX_BODY, "HELLO max_body in [4 KiB, 64 MiB]");
    uint8_t *req = calloc(1, (size_t)max_body + 64);
    if (req == NULL)
        return die("out of memory");
    dsc_frame_header_t h;
    /* A PING of exactly max_body bytes is answered (echoed). */
    dsc_frame_header_t ph = {
        .version = 1, .opcode = DSC_OP_PING, .request_id = 7, .body_len = max_body};
    dsc_frame_header_encode(&ph, req);
    int st = probe(addr, req, DSC_FRAME_HEADER_SIZE + max_body, &h);
    check(st == DSC_STATUS_OK && h.body_len == max_body, "PING of exactly max_body bytes echoed");
    /* One byte over max_body: TOO_LARGE. */
    ph.body_len = max_body + 1;
    ph.request_id = 13;
    dsc_frame_header_encode(&ph, req);
    st = probe(addr, req, DSC_FRAME_HEADER_SIZE, &h);
    check(st == DSC_STATUS_TOO_LARGE, "a body of max_body + 1 bytes: TOO_LARGE");
    /* Trailing bytes after every body: empty (LIST, MEMBERS), name (STAT, MANIFEST), GET,
     * shard request (WARM, EVICT). */
    check_trailing(addr, req, DSC_OP_LIST, NULL, 0);
    check_trailing(addr, req, DSC_OP_MEMBERS, NULL, 0);
    uint8_t b[128];
    int n = dsc_name_req_encode("x", b, sizeof b);
    check_trailing(addr, req, DSC_OP_STAT, b, n);
    check_trailing(addr, req, DSC_OP_MANIFEST, b, n);
    dsc_get_req_t g = {.dataset = {"x", 1}, .chunk_count = 1};
    n = dsc_get_req_encode(&g, b, sizeof b);
    check_trailing(addr, req, DSC_OP_GET, b, n);
    dsc_shard_req_t sr = {.dataset = {"x", 1}, .shard_id = 0};
    n = dsc_shard_req_encode(&sr, b, sizeof b);
    check_trailing(addr, req, DSC_OP_EVICT, b, n);
    /* A non-zero status, then a second HELLO, then a PING: on one connection. */
    fd = conn_hello(addr, NULL);
    uint8_t *body = NULL;
    st = exchange(fd, req, frame(req, DSC_OP_PING, 5, 11, "p", 1), &h, &body);
    check(st == DSC_STATUS_BAD_REQUEST && h.request_id == 11,
          "a request with a non-zero status: BAD_REQUEST");
    free(body);
    body = NULL;
    st = exchange(fd, req, hello_frame(req), &h, &body);
    check(st == DSC_STATUS_OK, "a second HELLO starts over: answered OK");
    free(body);
    body = NULL;
    st = exchange(fd, req, frame(req, DSC_OP_PING, 0, 12, "alive", 5), &h, &body);
    check(st == DSC_STATUS_OK && h.request_id == 12, "the connection is still usable after them");
    free(body);
    close(fd);
    free(req);
    return fails ? 1 : 0;
}

/* proxy MODE LISTEN_PORT_FILE UPSTREAM: one client at a time, relayed frame by frame to UPSTREAM
 * with damage: opcode (GET answers carry opcode STAT), reqid (GET answers carry another id),
 * chunk (GET requests ask for the next chunk), shard (GET requests ask for shard LAST), silent
 * (HELLO relayed, nothing after it answered). Runs until killed. */
static int cmd_proxy(int argc, char **argv) {
    if (argc < 5)
        return die("usage: proxy opcode|reqid|chunk|shard:N|silent PORT_FILE UPSTREAM");
    const char *mode = argv[2];
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(lfd, 16) != 0)
        return die("cannot listen");
    socklen_t sl = sizeof sa;
    getsockname(lfd, (struct sockaddr *)&sa, &sl);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[3]);
    FILE *pf = fopen(tmp, "w");
    if (pf == NULL)
        return die("cannot write the port file");
    fprintf(pf, "%u\n", ntohs(sa.sin_port));
    fclose(pf);
    rename(tmp, argv[3]);
    for (;;) {
        int cfd = accept(lfd, NULL, NULL);
        if (cfd < 0)
            continue;
        int ufd = raw_connect(argv[4]);
        if (ufd < 0) {
            close(cfd);
            continue;
        }
        int hello_done = 0;
        for (;;) {
            struct pollfd p[2] = {{.fd = cfd, .events = POLLIN}, {.fd = ufd, .events = POLLIN}};
            if (poll(p, 2, -1) < 0)
                break;
            dsc_frame_header_t h;
            uint8_t *body = NULL;
            uint8_t hdr[DSC_FRAME_HEADER_SIZE];
            if (p[0].revents) {
                if (recv_frame(cfd, &h, &body, 10000) < 0)
                    break;
                if (h.opcode == DSC_OP_GET && strcmp(mode, "chunk") == 0 && h.body_len >= 12)
                    dsc_store_u32(body + h.body_len - 12, dsc_load_u32(body + h.body_len - 12) + 1);
                if (h.opcode == DSC_OP_GET && strncmp(mode, "shard:", 6) == 0 && h.body_len >= 16)
                    dsc_store_u32(body + h.body_len - 16, (uint32_t)atoi(mode + 6));
                if (!(hello_done && strcmp(mode, "silent") == 0)) {
                    dsc_frame_header_encode(&h, hdr);
                    if (send_all(ufd, hdr, sizeof hdr) < 0 || send_all(ufd, body, h.body_len) < 0) {
                        free(body);
                        break;
                    }
                }
                free(body);
                body = NULL;
            }
            if (p[1].revents) {
                if (recv_frame(ufd, &h, &body, 10000) < 0)
                    break;
                if (h.opcode == DSC_OP_HELLO)
                    hello_done = 1;
                if (h.opcode == DSC_OP_GET && strcmp(mode, "opcode") == 0)
                    h.opcode = DSC_OP_STAT;
                if (h.opcode == DSC_OP_GET && strcmp(mode, "reqid") == 0)
                    h.request_id += 1000;
                dsc_frame_header_encode(&h, hdr);
                int bad = send_all(cfd, hdr, sizeof hdr) < 0 || send_all(cfd, body, h.body_len) < 0;
                free(body);
                if (bad)
                    break;
            }
        }
        close(cfd);
        close(ufd);
    }
}

int main(int argc, char **argv) {
    if (argc < 2)
        return die("usage: hostile_client hold|flood|churn|drain|conform|proxy ...");
    if (strcmp(argv[1], "hold") == 0)
        return cmd_hold(argc, argv);
    if (strcmp(argv[1], "flood") == 0)
        return cmd_flood(argc, argv);
    if (strcmp(argv[1], "churn") == 0)
        return cmd_churn(argc, argv);
    if (strcmp(argv[1], "drain") == 0)
        return cmd_drain(argc, argv);
    if (strcmp(argv[1], "conform") == 0)
        return cmd_conform(argc, argv);
    if (strcmp(argv[1], "proxy") == 0)
        return cmd_proxy(argc, argv);
    return die("unknown command");
}
