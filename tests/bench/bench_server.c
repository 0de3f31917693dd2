/* GET throughput of dscached out of RAM (64 KiB and 1 MiB chunks, 1/2/4/16 pipelined
 * connections) beside the raw loopback limit (send/recv pairs of 1 MiB writes) and memcached
 * serving the same objects to a pipelined text-protocol client; server CPU seconds per GB.
 * usage: bench_server [--seconds S] [--depth D]   (dscached and dscache are found beside it) */
#include "conn.h"
#include "protocol.h"
#include "util.h"

#include <errno.h>
#include <libgen.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static double seconds = 2.0;
static int depth = 4;
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

static double proc_cpu_seconds(pid_t pid) {
    char path[64], buf[2048];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (p == NULL)
        return 0;
    unsigned long long utime = 0, stime = 0;
    /* Fields after ')': state(3) ... utime(14) stime(15). */
    int field = 2;
    for (char *tok = strtok(p + 1, " "); tok; tok = strtok(NULL, " ")) {
        field++;
        if (field == 14)
            utime = strtoull(tok, NULL, 10);
        if (field == 15) {
            stime = strtoull(tok, NULL, 10);
            break;
        }
    }
    return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

static pid_t spawn(char *const argv[], const char *log) {
    pid_t pid = fork();
    if (pid == 0) {
        FILE *f = freopen(log, "w", stderr);
        (void)f;
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

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
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
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
        if (w <= 0)
            return -1;
        p = (const char *)p + w;
        n -= (size_t)w;
    }
    return 0;
}

/* ---- runs ------------------------------------------------------------------------------ */

typedef struct worker {
    pthread_t thread;
    int index;
    const size_case_t *sc;
    uint16_t port;
    char addr[64];
    atomic_int *stop;
    uint64_t bytes;
    int failed;
} worker_t;

static void *dscache_worker(void *arg) {
    worker_t *w = arg;
    dsc_conn_t *c = NULL;
    if (dsc_conn_open_addr(w->addr, 10000, 0, &c) < 0) {
        w->failed = 1;
        return NULL;
    }
    uint8_t *buf = malloc(w->sc->chunk_bytes + 4096);
    uint32_t total = w->sc->shards * w->sc->chunks_per_shard;
    uint32_t next = (uint32_t)w->index * 7, inflight = 0;
    uint8_t body[128];
    for (;;) {
        while (inflight < (uint32_t)depth && !atomic_load(w->stop)) {
            uint32_t k = next++ % total;
            dsc_get_req_t req = {.dataset = {w->sc->dataset, (uint16_t)strlen(w->sc->dataset)},
                                 .shard_id = k / w->sc->chunks_per_shard,
                                 .first_chunk = k % w->sc->chunks_per_shard,
                                 .chunk_count = 1};
            int n = dsc_get_req_encode(&req, body, sizeof body);
            if (dsc_conn_send(c, DSC_OP_GET, k, body, (size_t)n) < 0) {
                w->failed = 1;
                goto done;
            }
            inflight++;
        }
        if (inflight == 0)
            break;
        dsc_frame_header_t h;
        if (dsc_conn_recv_header(c, &h) < 0 || h.status != DSC_STATUS_OK ||
            h.body_len > w->sc->chunk_bytes + 4096 || dsc_conn_recv_body(c, buf, h.body_len) < 0) {
            w->failed = 1;
            goto done;
        }
        w->bytes += h.body_len;
        inflight--;
    }
done:
    free(buf);
    dsc_conn_close(c);
    return NULL;
}

/* memcached text protocol, pipelined "get k" requests. */
typedef struct rbuf {
    int fd;
    uint8_t *p;
    size_t pos, len, cap;
} rbuf_t;

static int rb_fill(rbuf_t *r) {
    if (r->pos > 0) {
        memmove(r->p, r->p + r->pos, r->len - r->pos);
        r->len -= r->pos;
        r->pos = 0;
    }
    ssize_t n = recv(r->fd, r->p + r->len, r->cap - r->len, 0);
    if (n <= 0)
        return -1;
    r->len += (size_t)n;
    return 0;
}

/* Reads one "VALUE k f n\r\n<n bytes>\r\nEND\r\n" answer; returns n or -1. */
static long mc_read_value(rbuf_t *r) {
    for (;;) {
        uint8_t *eol = memmem(r->p + r->pos, r->len - r->pos, "\r\n", 2);
        if (eol) {
            unsigned long n = 0;
            if (sscanf((char *)r->p + r->pos, "VALUE %*s %*u %lu", &n) != 1)
                return -1;
            r->pos = (size_t)(eol - r->p) + 2;
            size_t need = n + 2 + 5; /* data, \r\n, END\r\n */
            while (r->len - r->pos < need)
                if (rb_fill(r) < 0)
                    return -1;
            r->pos += need;
            return (long)n;
        }
        if (rb_fill(r) < 0)
            return -1;
    }
}

static void *memcached_worker(void *arg) {
    worker_t *w = arg;
    int fd = tcp_connect(w->port);
    if (fd < 0) {
        w->failed = 1;
        return NULL;
    }
    rbuf_t r = {.fd = fd, .cap = 4u << 20};
    r.p = malloc(r.cap);
    uint32_t total = w->sc->shards * w->sc->chunks_per_shard;
    uint32_t next = (uint32_t)w->index * 7, inflight = 0;
    for (;;) {
        char req[64 * 16];
        size_t len = 0;
        while (inflight < (uint32_t)depth && !atomic_load(w->stop)) {
            len += (size_t)snprintf(req + len, sizeof req - len, "get %s_%u\r\n",
                                    w->sc->dataset, next++ % total);
            inflight++;
        }
        if (len && send_all(fd, req, len) < 0) {
            w->failed = 1;
            break;
        }
        if (inflight == 0)
            break;
        long n = mc_read_value(&r);
        if (n < 0) {
            w->failed = 1;
            break;
        }
        w->bytes += (uint64_t)n;
        inflight--;
    }
    free(r.p);
    close(fd);
    return NULL;
}

typedef struct result {
    double mbps;
    double cpu_per_gb;
    int failed;
} result_t;

static result_t run(void *(*fn)(void *), const size_case_t *sc, int conns, const char *addr,
                    uint16_t port, pid_t server) {
    atomic_int stop = 0;
    worker_t *w = calloc((size_t)conns, sizeof *w);
    double cpu0 = proc_cpu_seconds(server), t0 = dsc_now_s();
    for (int i = 0; i < conns; i++) {
        w[i] = (worker_t){.index = i, .sc = sc, .port = port, .stop = &stop};
        snprintf(w[i].addr, sizeof w[i].addr, "%s", addr);
        pthread_create(&w[i].thread, NULL, fn, &w[i]);
    }
    usleep((useconds_t)(seconds * 1e6));
    atomic_store(&stop, 1);
    uint64_t bytes = 0;
    result_t res = {0};
    for (int i = 0; i < conns; i++) {
        pthread_join(w[i].thread, NULL);
        bytes += w[i].bytes;
        res.failed |= w[i].failed;
    }
    double secs = dsc_now_s() - t0, cpu = proc_cpu_seconds(server) - cpu0;
    res.mbps = (double)bytes / secs / 1e6;
    res.cpu_per_gb = bytes ? cpu / ((double)bytes / 1e9) : 0;
    free(w);
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
    while (!atomic_load(p->stop))
        if (send_all(p->fds[0], buf, 1u << 20) < 0)
            break;
    shutdown(p->fds[0], SHUT_WR);
    free(buf);
    return NULL;
}

static void *raw_rx(void *arg) {
    pair_t *p = arg;
    uint8_t *buf = malloc(1u << 20);
    ssize_t n;
    while ((n = recv(p->fds[1], buf, 1u << 20, 0)) > 0)
        p->bytes += (uint64_t)n;
    free(buf);
    return NULL;
}

static double raw_limit(int pairs) {
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    bind(lfd, (struct sockaddr *)&a, sizeof a);
    listen(lfd, 16);
    getsockname(lfd, (struct sockaddr *)&a, &alen);
    atomic_int stop = 0;
    pair_t p[4];
    for (int i = 0; i < pairs; i++) {
        p[i] = (pair_t){.stop = &stop};
        p[i].fds[0] = tcp_connect(ntohs(a.sin_port));
        p[i].fds[1] = accept(lfd, NULL, NULL);
    }
    double t0 = dsc_now_s();
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

/* Loads every chunk (the stored bytes from dscached) into memcached as DATASET_K. */
static int fill_memcached(const char *dsaddr, uint16_t mport) {
    dsc_conn_t *c = NULL;
    if (dsc_conn_open_addr(dsaddr, 10000, 0, &c) < 0)
        return -1;
    int fd = tcp_connect(mport);
    if (fd < 0)
        return -1;
    rbuf_t r = {.fd = fd, .cap = 4096};
    r.p = malloc(r.cap);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const size_case_t *sc = &cases[i];
        for (uint32_t k = 0; k < sc->shards * sc->chunks_per_shard; k++) {
            dsc_get_req_t req = {.dataset = {sc->dataset, (uint16_t)strlen(sc->dataset)},
                                 .shard_id = k / sc->chunks_per_shard,
                                 .first_chunk = k % sc->chunks_per_shard,
                                 .chunk_count = 1};
            uint8_t body[128];
            int n = dsc_get_req_encode(&req, body, sizeof body);
            uint8_t *resp = NULL;
            size_t len = 0;
            if (dsc_conn_call(c, DSC_OP_GET, body, (size_t)n, &resp, &len) < 0)
                return -1;
            /* Same size as the dscache answer body (prefix + data), so the bytes compare. */
            char hdr[128];
            int hl = snprintf(hdr, sizeof hdr, "set %s_%u 0 0 %zu\r\n", sc->dataset, k, len);
            if (send_all(fd, hdr, (size_t)hl) < 0 || send_all(fd, resp, len) < 0 ||
                send_all(fd, "\r\n", 2) < 0)
                return -1;
            free(resp);
            r.pos = r.len = 0;
            while (!memmem(r.p, r.len, "\r\n", 2))
                if (rb_fill(&r) < 0)
                    return -1;
            if (strncmp((char *)r.p, "STORED", 6) != 0) {
                fprintf(stderr, "memcached: %.*s\n", (int)r.len, (char *)r.p);
                return -1;
            }
        }
    }
    free(r.p);
    close(fd);
    dsc_conn_close(c);
    return 0;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--depth") == 0 && i + 1 < argc)
            depth = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_server [--seconds S] [--depth D]\n");
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return 1;
    self[n] = '\0';
    snprintf(bindir, sizeof bindir, "%s", dirname(self));
    snprintf(work, sizeof work, "/tmp/bench_server.XXXXXX");
    if (mkdtemp(work) == NULL)
        return 1;
    int rc = 1;
    pid_t dpid = -1, mpid = -1;
    if (make_datasets() < 0)
        goto done;

    char dscached[4200], d1[200], d2[200], pfile[200], log[200];
    snprintf(dscached, sizeof dscached, "%s/dscached", bindir);
    snprintf(d1, sizeof d1, "%s/%s", work, cases[0].dataset);
    snprintf(d2, sizeof d2, "%s/%s", work, cases[1].dataset);
    snprintf(pfile, sizeof pfile, "%s/port", work);
    snprintf(log, sizeof log, "%s/dscached.log", work);
    char *dargs[] = {dscached, "--data", d1, "--data", d2, "--listen", "127.0.0.1:0", "--http",
                     "off", "--warm", "--memory", "512M", "--port-file", pfile,
                     "--log-level", "warn", NULL};
    dpid = spawn(dargs, log);
    char addr[64] = "";
    for (int i = 0; i < 200 && !addr[0]; i++) {
        FILE *f = fopen(pfile, "r");
        unsigned port;
        if (f && fscanf(f, "%u", &port) == 1)
            snprintf(addr, sizeof addr, "127.0.0.1:%u", port);
        if (f)
            fclose(f);
        usleep(20000);
    }
    if (!addr[0]) {
        fprintf(stderr, "bench_server: dscached did not start (see %s)\n", log);
        goto done;
    }
    usleep(300000); /* warm-up of a few MiB */

    uint16_t mport = free_port();
    char mport_text[16];
    snprintf(mport_text, sizeof mport_text, "%u", mport);
    char *margs[] = {"/usr/bin/memcached", "-l", "127.0.0.1", "-p", mport_text, "-U", "0",
                     "-m", "1024", "-I", "2m", "-t", "2", "-u", "nobody", NULL};
    int have_mc = access(margs[0], X_OK) == 0;
    if (have_mc) {
        char mlog[200];
        snprintf(mlog, sizeof mlog, "%s/memcached.log", work);
        mpid = spawn(margs, mlog);
        if (fill_memcached(addr, mport) < 0) {
            fprintf(stderr, "bench_server: memcached did not take the objects: skipped\n");
            have_mc = 0;
        }
    } else {
        fprintf(stderr, "bench_server: /usr/bin/memcached not found: comparison skipped\n");
    }

    double raw1 = raw_limit(1), raw2 = raw_limit(2);
    printf("raw loopback limit (1 MiB send/recv): 1 pair %.0f MB/s, 2 pairs %.0f MB/s\n", raw1,
           raw2);
    printf("depth %d requests in flight per connection, %.1f s per run, %ld cores\n\n", depth,
           seconds, sysconf(_SC_NPROCESSORS_ONLN));
    printf("%-7s %5s | %9s %8s | %9s %8s | %7s %8s\n", "object", "conns", "dscache", "cpu s/GB",
           "memcached", "cpu s/GB", "vs mc", "vs raw2");
    printf("%-7s %5s | %9s %8s | %9s %8s | %7s %8s\n", "", "", "MB/s", "", "MB/s", "", "x", "x");
    int failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (size_t k = 0; k < sizeof conn_counts / sizeof conn_counts[0]; k++) {
            result_t d = run(dscache_worker, &cases[i], conn_counts[k], addr, 0, dpid);
            result_t m = {0};
            if (have_mc)
                m = run(memcached_worker, &cases[i], conn_counts[k], "", mport, mpid);
            failed |= d.failed | m.failed;
            printf("%-7s %5d | %9.0f %8.3f | %9.0f %8.3f | %7.2f %8.2f%s\n", cases[i].label,
                   conn_counts[k], d.mbps, d.cpu_per_gb, m.mbps, m.cpu_per_gb,
                   m.mbps > 0 ? d.mbps / m.mbps : 0, raw2 > 0 ? d.mbps / raw2 : 0,
                   d.failed || m.failed ? "  (errors)" : "");
            fflush(stdout);
        }
    }
    rc = failed ? 1 : 0;
done:
    if (dpid > 0) {
        kill(dpid, SIGTERM);
        waitpid(dpid, NULL, 0);
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
