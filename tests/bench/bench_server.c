/* GET throughput of dscached out of RAM (64 KiB and 1 MiB chunks, 1/2/4/16 pipelined
 * connections) beside the raw loopback limit (send/recv pairs) and memcached serving the same
 * objects; server CPU seconds per GB. Each figure is the median of several interleaved runs.
 * usage: bench_server --help   (dscached and dscache are found beside it) */
#include "bench_common.h"
#include "conn.h"
#include "protocol.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_DEPTH 1024
#define MAX_REPS 15
_Static_assert(MAX_REPS <= BENCH_MAX_REPS, "median() takes at most BENCH_MAX_REPS runs");

static double seconds = 2.0;
static int reps = 3;
static int depth_override = 0;              /* requests in flight per connection; 0: by size */
static uint64_t inflight_bytes = 16u << 20; /* per connection when depth_override is 0 */
static int client_threads = 0;              /* 0: the number of cores */
static int server_threads = 0;              /* dscached --threads and memcached -t; 0: cores */
static const char *only_size = NULL;
static int only_conns = 0;
static int skip_mc = 0;
static const char *memcached_path = "/usr/bin/memcached"; /* --memcached */
/* Each client thread receives into one buffer this large, parses the frames in place and drops
 * the bytes: the same receive loop for dscached and memcached, and as cheap as the raw pairs. */
static size_t recv_buf = 4u << 20;
static int rcvbuf = 0; /* SO_RCVBUF of every receiving socket; 0: the kernel's autotuning */
static int verbose = 0;
static const char *dscached_path = NULL; /* default: beside this program */
static char bindir[4096];
static char work[64];

typedef struct size_case {
    const char *label;
    const char *dataset;
    uint32_t chunk_bytes;
    uint32_t shards, chunks_per_shard;
} size_case_t;

static size_case_t cases[] = {
    {"64 KiB", "b64k", 64u << 10, 4, 32},
    {"1 MiB", "b1m", 1u << 20, 4, 16},
};
static const int conn_counts[] = {1, 2, 4, 16};

/* ---- process helpers ------------------------------------------------------------------- */

static uint16_t free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    bind(fd, (struct sockaddr *)&a, sizeof a);
    getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    return ntohs(a.sin_port);
}

static int tcp_connect(uint16_t port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    for (int i = 0; i < 200; i++) {
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            return fd;
        }
        usleep(20000);
        close(fd);
        fd = socket(AF_INET, SOCK_STREAM, 0);
    }
    close(fd);
    return -1;
}

static int send_all(int fd, const void *p, size_t n) {
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p = (const char *)p + w;
        n -= (size_t)w;
    }
    return 0;
}

static void set_rcvbuf(int fd) {
    if (rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
}

static int set_blocking(int fd, int blocking) {
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return -1;
    return fcntl(fd, F_SETFL, blocking ? fl & ~O_NONBLOCK : fl | O_NONBLOCK);
}

/* ---- client connections: request encoders and streaming response parsers ------------------ */

typedef enum { KIND_DSCACHE, KIND_MEMCACHED } kind_t;

typedef struct bconn {
    kind_t kind;
    int fd;
    dsc_conn_t *dc; /* dscache: the connection that ran HELLO; fd is its socket */
    const size_case_t *sc;
    uint32_t next_key, total_keys, depth, inflight;
    uint64_t next_id, expect_id;
    /* parser: either collecting a header / line into head, or skipping body_left bytes */
    uint8_t head[256];
    size_t head_len;
    uint64_t body_left, value_len;
    int in_body, have_value;
    uint8_t out[64u << 10]; /* requests not yet sent */
    size_t out_pos, out_len;
    uint64_t bytes, recvs; /* answer bytes completed; recv calls that returned data */
    int failed, want_out;
} bconn_t;

/* Whether the connection should send more requests now: in batches of a quarter of the depth,
 * so that the server never runs dry while a batch is on its way. */
static int wants_requests(const bconn_t *c) {
    uint32_t batch = c->depth / 4 ? c->depth / 4 : 1;
    return c->inflight + batch <= c->depth;
}

/* Appends requests until `depth` are in flight. Returns 0 or -1 (encoding error). */
static int fill_requests(bconn_t *c) {
    if (c->out_pos == c->out_len)
        c->out_pos = c->out_len = 0;
    while (c->inflight < c->depth && sizeof c->out - c->out_len >= 256) {
        uint32_t k = c->next_key++ % c->total_keys;
        uint8_t *dst = c->out + c->out_len;
        if (c->kind == KIND_DSCACHE) {
            dsc_get_req_t req = {.dataset = {c->sc->dataset, (uint16_t)strlen(c->sc->dataset)},
                                 .shard_id = k / c->sc->chunks_per_shard,
                                 .first_chunk = k % c->sc->chunks_per_shard,
                                 .chunk_count = 1};
            int n =
                dsc_get_req_encode(&req, dst + DSC_FRAME_HEADER_SIZE, 256 - DSC_FRAME_HEADER_SIZE);
            if (n < 0)
                return -1;
            dsc_frame_header_t h = {.version = DSC_PROTO_VERSION,
                                    .opcode = DSC_OP_GET,
                                    .request_id = c->next_id++,
                                    .body_len = (uint32_t)n};
            dsc_frame_header_encode(&h, dst);
            c->out_len += DSC_FRAME_HEADER_SIZE + (size_t)n;
        } else {
            c->out_len += (size_t)snprintf((char *)dst, 256, "get %s_%u\r\n", c->sc->dataset, k);
        }
        c->inflight++;
    }
    return 0;
}

/* Sends what is queued without blocking (blocking sockets simply block). Returns 0 or -1. */
static int flush_requests(bconn_t *c) {
    while (c->out_pos < c->out_len) {
        ssize_t w = send(c->fd, c->out + c->out_pos, c->out_len - c->out_pos, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (w <= 0)
            return -1;
        c->out_pos += (size_t)w;
    }
    return 0;
}

/* A whole response arrived. */
static void response_done(bconn_t *c, uint64_t len) {
    c->bytes += len;
    c->inflight--;
}

/* dscache: a 24-byte header, then body_len bytes. Checks status, flags and the request id
 * (responses on one connection come back in request order for this workload). */
static int parse_dscache(bconn_t *c, const uint8_t *p, size_t len) {
    while (len) {
        if (c->in_body) {
            size_t take = len < c->body_left ? len : (size_t)c->body_left;
            c->body_left -= take;
            p += take;
            len -= take;
            if (c->body_left == 0) {
                c->in_body = 0;
                response_done(c, c->value_len);
            }
            continue;
        }
        size_t take = DSC_FRAME_HEADER_SIZE - c->head_len;
        if (take > len)
            take = len;
        memcpy(c->head + c->head_len, p, take);
        c->head_len += take;
        p += take;
        len -= take;
        if (c->head_len < DSC_FRAME_HEADER_SIZE)
            break;
        c->head_len = 0;
        dsc_frame_header_t h;
        if (dsc_frame_header_decode(c->head, DSC_FRAME_HEADER_SIZE, 0, &h) < 0 ||
            !(h.flags & DSC_FLAG_RESPONSE) || h.status != DSC_STATUS_OK ||
            h.request_id != c->expect_id++ || h.body_len == 0) {
            fprintf(stderr, "bench_server: bad dscache response (status %u)\n", h.status);
            return -1;
        }
        c->value_len = c->body_left = h.body_len;
        c->in_body = 1;
    }
    return 0;
}

/* memcached text protocol: "VALUE key flags n\r\n", n bytes, "\r\n", then "END\r\n". */
static int parse_memcached(bconn_t *c, const uint8_t *p, size_t len) {
    while (len) {
        if (c->in_body) {
            size_t take = len < c->body_left ? len : (size_t)c->body_left;
            c->body_left -= take;
            p += take;
            len -= take;
            if (c->body_left == 0)
                c->in_body = 0;
            continue;
        }
        const uint8_t *nl = memchr(p, '\n', len);
        size_t take = nl ? (size_t)(nl - p) + 1 : len;
        if (c->head_len + take >= sizeof c->head) {
            fprintf(stderr, "bench_server: memcached line too long\n");
            return -1;
        }
        memcpy(c->head + c->head_len, p, take);
        c->head_len += take;
        p += take;
        len -= take;
        if (nl == NULL)
            break;
        c->head[c->head_len] = '\0';
        c->head_len = 0;
        char *line = (char *)c->head;
        if (strncmp(line, "VALUE ", 6) == 0 && !c->have_value) {
            char *sp = strrchr(line, ' ');
            char *end = NULL;
            unsigned long long n = strtoull(sp + 1, &end, 10);
            if (end == sp + 1 || n == 0) {
                fprintf(stderr, "bench_server: bad memcached line: %s", line);
                return -1;
            }
            c->value_len = n;
            c->body_left = n + 2;
            c->in_body = 1;
            c->have_value = 1;
        } else if (strcmp(line, "END\r\n") == 0 && c->have_value) {
            c->have_value = 0;
            response_done(c, c->value_len);
        } else {
            fprintf(stderr, "bench_server: unexpected memcached answer: %s", line);
            return -1;
        }
    }
    return 0;
}

static int conn_feed(bconn_t *c, const uint8_t *p, size_t len) {
    c->recvs++;
    return c->kind == KIND_DSCACHE ? parse_dscache(c, p, len) : parse_memcached(c, p, len);
}

static int conn_open(bconn_t *c, kind_t kind, const size_case_t *sc, int index, const char *addr,
                     uint16_t port) {
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->sc = sc;
    c->fd = -1;
    c->total_keys = sc->shards * sc->chunks_per_shard;
    c->next_key = (uint32_t)index * 7;
    c->next_id = c->expect_id = 1;
    uint64_t d = depth_override ? (uint64_t)depth_override
                                : (inflight_bytes + sc->chunk_bytes - 1) / sc->chunk_bytes;
    c->depth = (uint32_t)(d < 1 ? 1 : d > MAX_DEPTH ? MAX_DEPTH : d);
    if (kind == KIND_DSCACHE) {
        if (dsc_conn_open_addr(addr, 10000, 0, &c->dc) < 0)
            return -1;
        c->fd = dsc_conn_fd(c->dc);
    } else {
        c->fd = tcp_connect(port);
    }
    if (c->fd < 0)
        return -1;
    set_rcvbuf(c->fd);
    return 0;
}

static void conn_close(bconn_t *c) {
    if (c->dc)
        dsc_conn_close(c->dc);
    else if (c->fd >= 0)
        close(c->fd);
    c->dc = NULL;
    c->fd = -1;
}

/* ---- client threads -------------------------------------------------------------------- */

typedef struct worker {
    pthread_t thread;
    bconn_t *conns;
    int nconns;
    atomic_int *stop;
    uint8_t *buf;
    int failed;
} worker_t;

/* One connection: a blocking socket and plain send/recv, no readiness polling. */
static void run_single(worker_t *w) {
    bconn_t *c = &w->conns[0];
    struct timeval tv = {.tv_sec = 10}; /* a stuck server fails the run instead of hanging it */
    if (set_blocking(c->fd, 1) < 0 ||
        setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0)
        goto fail;
    for (;;) {
        if (!atomic_load_explicit(w->stop, memory_order_relaxed) && wants_requests(c)) {
            if (fill_requests(c) < 0 || flush_requests(c) < 0)
                goto fail;
        }
        if (c->inflight == 0)
            return;
        ssize_t n = recv(c->fd, w->buf, recv_buf, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || conn_feed(c, w->buf, (size_t)n) < 0)
            goto fail;
    }
fail:
    w->failed = 1;
}

/* Several connections: non-blocking sockets under one level-triggered epoll. */
static void run_multi(worker_t *w) {
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        goto fail;
    for (int i = 0; i < w->nconns; i++) {
        bconn_t *c = &w->conns[i];
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (set_blocking(c->fd, 0) < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) < 0)
            goto fail;
        if (fill_requests(c) < 0 || flush_requests(c) < 0)
            goto fail;
    }
    int busy = w->nconns;
    struct epoll_event evs[64];
    while (busy > 0) {
        int n = epoll_wait(ep, evs, 64, 10000);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            goto fail; /* ten seconds without any answer: the server is stuck */
        int stopping = atomic_load_explicit(w->stop, memory_order_relaxed);
        for (int i = 0; i < n; i++) {
            bconn_t *c = evs[i].data.ptr;
            if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
                ssize_t r = recv(c->fd, w->buf, recv_buf, 0);
                if (r < 0 && (errno == EAGAIN || errno == EINTR))
                    continue;
                if (r <= 0 || conn_feed(c, w->buf, (size_t)r) < 0)
                    goto fail;
            }
            if (!stopping && wants_requests(c) && fill_requests(c) < 0)
                goto fail;
            if (flush_requests(c) < 0)
                goto fail;
            int want_out = c->out_pos < c->out_len;
            if (want_out != c->want_out) {
                struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0u),
                                         .data.ptr = c};
                epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
                c->want_out = want_out;
            }
            if (c->inflight == 0 && stopping) {
                epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                busy--;
            }
        }
    }
    close(ep);
    return;
fail:
    if (ep >= 0)
        close(ep);
    w->failed = 1;
}

static void *client_thread(void *arg) {
    worker_t *w = arg;
    w->buf = malloc(recv_buf);
    if (w->buf == NULL)
        w->failed = 1;
    else if (w->nconns == 1)
        run_single(w);
    else
        run_multi(w);
    free(w->buf);
    return NULL;
}

typedef struct result {
    double mbps;
    double cpu_per_gb;
    double client_cpu_per_gb; /* this process: the client threads */
    double bytes_per_recv;
    int failed;
} result_t;

/* Opens `conns` connections, spreads them over the client threads, runs for `secs`. */
static result_t run(kind_t kind, const size_case_t *sc, int conns, const char *addr, uint16_t port,
                    pid_t server, double secs) {
    result_t res = {0};
    int threads = client_threads ? client_threads : ncores();
    if (threads > conns)
        threads = conns;
    bconn_t *c = calloc((size_t)conns, sizeof *c);
    worker_t *w = calloc((size_t)threads, sizeof *w);
    int opened = 0, started = 0;
    if (c == NULL || w == NULL) {
        res.failed = 1;
        goto done;
    }
    for (; opened < conns; opened++)
        if (conn_open(&c[opened], kind, sc, opened, addr, port) < 0) {
            res.failed = 1;
            goto done;
        }
    atomic_int stop = 0;
    double cpu0 = proc_cpu_seconds(server), self0 = self_cpu_seconds(), t0 = dsc_now_s();
    for (; started < threads; started++) {
        /* Thread t drives a contiguous share of the connections. */
        int first = started * conns / threads, end = (started + 1) * conns / threads;
        w[started] = (worker_t){.conns = &c[first], .nconns = end - first, .stop = &stop};
        if (pthread_create(&w[started].thread, NULL, client_thread, &w[started]) != 0)
            break;
    }
    usleep((useconds_t)(secs * 1e6));
    atomic_store(&stop, 1);
    uint64_t bytes = 0;
    for (int t = 0; t < started; t++) {
        pthread_join(w[t].thread, NULL);
        res.failed |= w[t].failed;
    }
    uint64_t recvs = 0;
    for (int i = 0; i < conns; i++) {
        bytes += c[i].bytes;
        recvs += c[i].recvs;
    }
    res.bytes_per_recv = recvs ? (double)bytes / (double)recvs : 0;
    res.failed |= started < threads;
    double elapsed = dsc_now_s() - t0, cpu = proc_cpu_seconds(server) - cpu0;
    res.mbps = (double)bytes / elapsed / 1e6;
    res.cpu_per_gb = bytes ? cpu / ((double)bytes / 1e9) : 0;
    res.client_cpu_per_gb = bytes ? (self_cpu_seconds() - self0) / ((double)bytes / 1e9) : 0;
done:
    for (int i = 0; i < opened; i++)
        conn_close(&c[i]);
    free(w);
    free(c);
    return res;
}

/* ---- raw loopback limit ---------------------------------------------------------------- */

typedef struct pair {
    pthread_t tx, rx;
    int fds[2];
    atomic_int *stop;
    uint64_t bytes;
} pair_t;

static void *raw_tx(void *arg) {
    pair_t *p = arg;
    uint8_t *buf = calloc(1, 1u << 20);
    while (buf && !atomic_load(p->stop))
        if (send_all(p->fds[0], buf, 1u << 20) < 0)
            break;
    shutdown(p->fds[0], SHUT_WR);
    free(buf);
    return NULL;
}

static void *raw_rx(void *arg) {
    pair_t *p = arg;
    uint8_t *buf = malloc(recv_buf);
    ssize_t n;
    while (buf && (n = recv(p->fds[1], buf, recv_buf, 0)) > 0)
        p->bytes += (uint64_t)n;
    free(buf);
    return NULL;
}

/* MB/s of `pairs` sender/receiver thread pairs, each a blocking 1 MiB send loop into a
 * receiver that drops the bytes: what loopback TCP carries with nothing else to do. */
static double raw_limit(int pairs) {
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(lfd, 16) != 0 ||
        getsockname(lfd, (struct sockaddr *)&a, &alen) != 0) {
        if (lfd >= 0)
            close(lfd);
        return 0;
    }
    atomic_int stop = 0;
    pair_t p[4];
    for (int i = 0; i < pairs; i++) {
        p[i] = (pair_t){.stop = &stop};
        p[i].fds[0] = tcp_connect(ntohs(a.sin_port));
        p[i].fds[1] = accept(lfd, NULL, NULL);
        set_rcvbuf(p[i].fds[1]);
    }
    double t0 = dsc_now_s(), cpu0 = self_cpu_seconds();
    for (int i = 0; i < pairs; i++) {
        pthread_create(&p[i].tx, NULL, raw_tx, &p[i]);
        pthread_create(&p[i].rx, NULL, raw_rx, &p[i]);
    }
    usleep((useconds_t)(seconds * 1e6));
    atomic_store(&stop, 1);
    uint64_t bytes = 0;
    for (int i = 0; i < pairs; i++) {
        pthread_join(p[i].tx, NULL);
        pthread_join(p[i].rx, NULL);
        bytes += p[i].bytes;
        close(p[i].fds[0]);
        close(p[i].fds[1]);
    }
    close(lfd);
    if (verbose && bytes)
        fprintf(stderr, "  raw %d pair(s): %.3f CPU s/GB (sender and receiver)\n", pairs,
                (self_cpu_seconds() - cpu0) / ((double)bytes / 1e9));
    return (double)bytes / (dsc_now_s() - t0) / 1e6;
}

/* ---- set-up ---------------------------------------------------------------------------- */

static int make_datasets(void) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const size_case_t *sc = &cases[i];
        char cmd[8192];
        uint64_t samples = (uint64_t)sc->shards * sc->chunks_per_shard * sc->chunk_bytes / 1024;
        snprintf(cmd, sizeof cmd,
                 "'%s/dscache' ingest synthetic -o '%s/%s' --name %s --samples %llu "
                 "--field x:u8:1024 --compress none --chunk-size %u --shard-size %u >/dev/null",
                 bindir, work, sc->dataset, sc->dataset, (unsigned long long)samples,
                 sc->chunk_bytes, sc->chunk_bytes * sc->chunks_per_shard);
        if (system(cmd) != 0) {
            fprintf(stderr, "bench_server: %s failed\n", cmd);
            return -1;
        }
    }
    return 0;
}

/* Reads one line (up to "\r\n") from a blocking socket into line. Returns 0 or -1. */
static int read_line(int fd, char *line, size_t cap) {
    size_t n = 0;
    while (n + 1 < cap) {
        ssize_t r = recv(fd, line + n, 1, 0);
        if (r <= 0)
            return -1;
        if (line[n++] == '\n') {
            line[n] = '\0';
            return 0;
        }
    }
    return -1;
}

/* Loads every chunk (the GET answer body from dscached) into memcached as DATASET_K, so that
 * both servers hand out exactly the same bytes. */
static int fill_memcached(const char *dsaddr, uint16_t mport) {
    dsc_conn_t *c = NULL;
    int fd = -1, rc = -1;
    uint8_t *resp = NULL;
    if (dsc_conn_open_addr(dsaddr, 10000, 0, &c) < 0)
        goto done;
    if ((fd = tcp_connect(mport)) < 0)
        goto done;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const size_case_t *sc = &cases[i];
        for (uint32_t k = 0; k < sc->shards * sc->chunks_per_shard; k++) {
            dsc_get_req_t req = {.dataset = {sc->dataset, (uint16_t)strlen(sc->dataset)},
                                 .shard_id = k / sc->chunks_per_shard,
                                 .first_chunk = k % sc->chunks_per_shard,
                                 .chunk_count = 1};
            uint8_t body[128];
            int n = dsc_get_req_encode(&req, body, sizeof body);
            size_t len = 0;
            if (n < 0 || dsc_conn_call(c, DSC_OP_GET, body, (size_t)n, &resp, &len) < 0)
                goto done;
            char line[256];
            int hl = snprintf(line, sizeof line, "set %s_%u 0 0 %zu\r\n", sc->dataset, k, len);
            if (send_all(fd, line, (size_t)hl) < 0 || send_all(fd, resp, len) < 0 ||
                send_all(fd, "\r\n", 2) < 0 || read_line(fd, line, sizeof line) < 0)
                goto done;
            free(resp);
            resp = NULL;
            if (strcmp(line, "STORED\r\n") != 0) {
                fprintf(stderr, "bench_server: memcached answered %s", line);
                goto done;
            }
        }
    }
    rc = 0;
done:
    free(resp);
    if (fd >= 0)
        close(fd);
    dsc_conn_close(c);
    return rc;
}

/* ---- statistics and the report --------------------------------------------------------- */

static void memcached_version(char *out, size_t cap) {
    snprintf(out, cap, "memcached");
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "'%s' -V 2>/dev/null", memcached_path);
    FILE *p = strchr(memcached_path, '\'') ? NULL : popen(cmd, "r");
    if (p == NULL)
        return;
    if (fgets(out, (int)cap, p) == NULL)
        snprintf(out, cap, "memcached");
    out[strcspn(out, "\n")] = '\0';
    pclose(p);
}

static void usage(void) {
    fprintf(stderr,
            "usage: bench_server [options]\n"
            "  --seconds S          length of each run (default 2)\n"
            "  --reps N             runs per figure, median reported (default 3, max %d)\n"
            "  --depth D            requests in flight per connection (default: 16 MiB worth)\n"
            "  --inflight BYTES     bytes in flight per connection when --depth is not given\n"
            "  --client-threads N   client threads (default: cores)\n"
            "  --recv-buf BYTES     receive buffer of each client thread (default 4M)\n"
            "  --rcvbuf BYTES       SO_RCVBUF of the client and raw receiving sockets (default:\n"
            "                       the kernel's autotuning)\n"
            "  --server-threads N   dscached --threads and memcached -t (default: cores)\n"
            "  --size 64k|1m        only this object size\n"
            "  --conns N            only this connection count\n"
            "  --no-memcached       skip the memcached comparison\n"
            "  --memcached PATH     the memcached binary (default /usr/bin/memcached)\n"
            "  --dscached PATH      the server binary (default: beside bench_server)\n"
            "  --verbose            also print the client's CPU seconds per GB\n",
            MAX_REPS);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t bytes = 0;
        if (strcmp(a, "--seconds") == 0 && v && (seconds = atof(v)) > 0)
            i++;
        else if (strcmp(a, "--reps") == 0 && v && (reps = atoi(v)) >= 1 && reps <= MAX_REPS)
            i++;
        else if (strcmp(a, "--depth") == 0 && v && (depth_override = atoi(v)) >= 1 &&
                 depth_override <= MAX_DEPTH)
            i++;
        else if (strcmp(a, "--inflight") == 0 && v && dsc_parse_size(v, &bytes) == 0 && bytes > 0) {
            inflight_bytes = bytes;
            i++;
        } else if (strcmp(a, "--client-threads") == 0 && v && (client_threads = atoi(v)) >= 1)
            i++;
        else if (strcmp(a, "--server-threads") == 0 && v && (server_threads = atoi(v)) >= 1)
            i++;
        else if (strcmp(a, "--size") == 0 && v && (strcmp(v, "64k") == 0 || strcmp(v, "1m") == 0)) {
            only_size = v;
            i++;
        } else if (strcmp(a, "--recv-buf") == 0 && v && dsc_parse_size(v, &bytes) == 0 &&
                   bytes >= 4096 && bytes <= (256u << 20)) {
            recv_buf = (size_t)bytes;
            i++;
        } else if (strcmp(a, "--rcvbuf") == 0 && v && dsc_parse_size(v, &bytes) == 0 &&
                   bytes <= (64u << 20)) {
            rcvbuf = (int)bytes;
            i++;
        } else if (strcmp(a, "--conns") == 0 && v && (only_conns = atoi(v)) >= 1)
            i++;
        else if (strcmp(a, "--no-memcached") == 0)
            skip_mc = 1;
        else if (strcmp(a, "--verbose") == 0)
            verbose = 1;
        else if (strcmp(a, "--memcached") == 0 && v) {
            memcached_path = v;
            i++;
        } else if (strcmp(a, "--dscached") == 0 && v) {
            dscached_path = v;
            i++;
        } else {
            usage();
            return 2;
        }
    }
    if (bench_prepare("bench_server", bindir, sizeof bindir, work, sizeof work) < 0)
        return 1;
    int rc = 1;
    pid_t dpid = -1, mpid = -1;
    char log[200];
    snprintf(log, sizeof log, "%s/dscached.log", work);
    if (make_datasets() < 0)
        goto done;
    int sthreads = server_threads ? server_threads : ncores();
    char threads_text[16];
    snprintf(threads_text, sizeof threads_text, "%d", sthreads);

    char dscached[4200], d1[200], d2[200];
    if (dscached_path)
        snprintf(dscached, sizeof dscached, "%s", dscached_path);
    else
        snprintf(dscached, sizeof dscached, "%s/dscached", bindir);
    snprintf(d1, sizeof d1, "%s/%s", work, cases[0].dataset);
    snprintf(d2, sizeof d2, "%s/%s", work, cases[1].dataset);
    char addr[64] = "";
    bench_dscached_t server = {.prog = "bench_server",
                               .path = dscached,
                               .data = {d1, d2},
                               .memory = "512M",
                               .threads = threads_text,
                               .work = work,
                               .log = log,
                               .log_stdout = 0};
    if (bench_start_dscached(&server, &dpid, addr, sizeof addr) < 0)
        goto done;
    usleep(300000); /* warm-up of a few MiB */

    uint16_t mport = free_port();
    char mport_text[16], mcver[128] = "";
    snprintf(mport_text, sizeof mport_text, "%u", mport);
    char *margs[] = {(char *)memcached_path,
                     "-l",
                     "127.0.0.1",
                     "-p",
                     mport_text,
                     "-U",
                     "0",
                     "-m",
                     "1024",
                     "-I",
                     "2m",
                     "-t",
                     threads_text,
                     "-u",
                     "nobody",
                     NULL};
    int have_mc = !skip_mc && access(margs[0], X_OK) == 0;
    if (have_mc) {
        memcached_version(mcver, sizeof mcver);
        char mlog[200];
        snprintf(mlog, sizeof mlog, "%s/memcached.log", work);
        mpid = spawn(margs, mlog, 0);
        if (fill_memcached(addr, mport) < 0) {
            fprintf(stderr, "bench_server: memcached did not take the objects: skipped\n");
            have_mc = 0;
        }
    } else if (!skip_mc) {
        fprintf(stderr, "bench_server: %s not found: memcached comparison skipped\n",
                memcached_path);
    }

    double raw1v[MAX_REPS], raw2v[MAX_REPS];
    for (int r = 0; r < reps; r++) {
        raw1v[r] = raw_limit(1);
        raw2v[r] = raw_limit(2);
    }
    double raw1 = median(raw1v, reps), raw2 = median(raw2v, reps);

    char machine[512];
    describe_machine(machine, sizeof machine);
    int cthreads = client_threads ? client_threads : ncores();
    printf("#### dscached GET throughput over loopback TCP\n\n");
    printf("- machine: %s\n", machine);
    printf("- servers: dscached with %d event loops; %s with -t %d; both on 127.0.0.1, "
           "serving the same bytes (one GET answer body per object)\n",
           sthreads, have_mc ? mcver : "memcached (not run)", sthreads);
    if (depth_override)
        printf("- client: up to %d threads, %d requests in flight per connection", cthreads,
               depth_override);
    else
        printf("- client: up to %d threads, %.0f MiB of requests in flight per connection",
               cthreads, (double)inflight_bytes / (1 << 20));
    printf(", every answer received into one reusable %zu KiB buffer per thread and parsed in "
           "place; the same loop for both servers and the raw receivers\n",
           recv_buf >> 10);
    printf("- raw loopback limit (blocking 1 MiB send/recv thread pairs) at the start: 1 pair "
           "%.0f MB/s (spread %.0f%%), 2 pairs %.0f MB/s (spread %.0f%%); the 2-pair run is "
           "repeated beside every row\n",
           raw1, spread(raw1v, reps), raw2, spread(raw2v, reps));
    printf("- each figure: median of %d interleaved runs of %.1f s; spread = (max - min) / "
           "median; server CPU = user + system seconds of the server process per GB sent\n\n",
           reps, seconds);
    printf("| object | conns | dscache MB/s | spread | dscache CPU s/GB | memcached MB/s | spread "
           "| memcached CPU s/GB | raw 2 pairs MB/s | vs memcached | vs raw 2 pairs |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    fflush(stdout);
    int failed = 0, cells = 0, mc_met = 0, raw_cells = 0, raw_met = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (only_size && strcmp(only_size, i == 0 ? "64k" : "1m") != 0)
            continue;
        for (size_t k = 0; k < sizeof conn_counts / sizeof conn_counts[0]; k++) {
            int conns = conn_counts[k];
            if (only_conns && conns != only_conns)
                continue;
            double dm[MAX_REPS], dc[MAX_REPS], mm[MAX_REPS], mc[MAX_REPS], ratio[MAX_REPS];
            double raw_ratio[MAX_REPS], dcl[MAX_REPS], mcl[MAX_REPS], dpr[MAX_REPS], mpr[MAX_REPS];
            /* A short untimed run first, so that neither server pays for first touches. */
            result_t d = run(KIND_DSCACHE, &cases[i], conns, addr, 0, dpid, 0.3), m = {0};
            failed |= d.failed;
            if (have_mc) {
                m = run(KIND_MEMCACHED, &cases[i], conns, "", mport, mpid, 0.3);
                failed |= m.failed;
            }
            for (int r = 0; r < reps; r++) {
                /* Alternate which server goes first, so drifting load hits both alike. */
                if (have_mc && r % 2) {
                    m = run(KIND_MEMCACHED, &cases[i], conns, "", mport, mpid, seconds);
                    d = run(KIND_DSCACHE, &cases[i], conns, addr, 0, dpid, seconds);
                } else {
                    d = run(KIND_DSCACHE, &cases[i], conns, addr, 0, dpid, seconds);
                    if (have_mc)
                        m = run(KIND_MEMCACHED, &cases[i], conns, "", mport, mpid, seconds);
                }
                failed |= d.failed | m.failed;
                /* The raw limit right beside, so that both see the same load. */
                double raw = raw_limit(2);
                raw_ratio[r] = raw > 0 ? d.mbps / raw : 0;
                raw2v[r] = raw;
                dm[r] = d.mbps;
                dc[r] = d.cpu_per_gb;
                dcl[r] = d.client_cpu_per_gb;
                mcl[r] = m.client_cpu_per_gb;
                dpr[r] = d.bytes_per_recv;
                mpr[r] = m.bytes_per_recv;
                mm[r] = m.mbps;
                mc[r] = m.cpu_per_gb;
                ratio[r] = m.mbps > 0 ? d.mbps / m.mbps : 0;
            }
            double d_mbps = median(dm, reps), vs_mc = median(ratio, reps);
            double vs_raw = median(raw_ratio, reps);
            cells++;
            mc_met += vs_mc >= 1.1;
            if (conns >= 2) {
                raw_cells++;
                raw_met += vs_raw >= 0.85;
            }
            if (have_mc)
                printf("| %s | %d | %.0f | %.0f%% | %.3f | %.0f | %.0f%% | %.3f | %.0f | %.2fx | "
                       "%.2fx |\n",
                       cases[i].label, conns, d_mbps, spread(dm, reps), median(dc, reps),
                       median(mm, reps), spread(mm, reps), median(mc, reps), median(raw2v, reps),
                       vs_mc, vs_raw);
            else
                printf("| %s | %d | %.0f | %.0f%% | %.3f | - | - | - | %.0f | - | %.2fx |\n",
                       cases[i].label, conns, d_mbps, spread(dm, reps), median(dc, reps),
                       median(raw2v, reps), vs_raw);
            if (verbose)
                fprintf(stderr,
                        "  client CPU s/GB: dscache %.3f, memcached %.3f; KiB per recv: "
                        "dscache %.0f, memcached %.0f\n",
                        median(dcl, reps), median(mcl, reps), median(dpr, reps) / 1024,
                        median(mpr, reps) / 1024);
            fflush(stdout);
        }
    }
    printf("\nvs memcached and vs raw are medians of per-run ratios: each dscache run against "
           "the memcached run and the 2-pair raw run made right beside it.\n");
    if (have_mc)
        printf("targets: >= 1.10x memcached in %d of %d rows; ", mc_met, cells);
    printf(">= 0.85x the 2-pair raw limit in %d of %d rows with 2 or more connections\n", raw_met,
           raw_cells);
    if (failed)
        fprintf(stderr, "bench_server: some runs had errors (see above)\n");
    rc = failed ? 1 : 0;
done:
    if (dpid > 0) {
        int status = 0;
        kill(dpid, SIGTERM);
        if (waitpid(dpid, &status, 0) == dpid && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
            /* A sanitizer report or a crash: show the server's log before it is removed. */
            fprintf(stderr, "bench_server: dscached ended with status 0x%x; its log:\n", status);
            char cat[300];
            snprintf(cat, sizeof cat, "tail -n 40 '%s' >&2", log);
            if (system(cat) != 0)
                fprintf(stderr, "bench_server: cannot show %s\n", log);
            rc = 1;
        }
    }
    if (mpid > 0) {
        kill(mpid, SIGTERM);
        waitpid(mpid, NULL, 0);
    }
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_server: could not remove %s\n", work);
    return rc;
}
