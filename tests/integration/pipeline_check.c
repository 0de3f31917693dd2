/* Pipelined bursts against dscached, for the batched write path: hundreds of mixed requests in
 * one send come back complete, in order and intact; a bad frame after a burst still gets every
 * earlier answer before the close; many connections at once each see their own answers.
 * usage: pipeline_check ADDR DATASET   (the dataset must be warm: every GET a hit) */
#include "conn.h"
#include "manifest.h"
#include "protocol.h"
#include "shard.h"
#include "test_frames.h"
#include "util.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *addr, *dataset;
static dsc_manifest_t *manifest;
static int fails;

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "FAIL: " __VA_ARGS__);                                                     \
        fputc('\n', stderr);                                                                       \
        fails++;                                                                                   \
    } while (0)

/* ---- raw socket helpers ---------------------------------------------------------------- */

/* Reads exactly n bytes, waiting at most 10 s for each piece. Returns 0, 1 on a clean close
 * before the first byte, or -1. */
static int recv_exact(int fd, uint8_t *p, size_t n) {
    size_t have = 0;
    while (have < n) {
        struct pollfd pfd = {fd, POLLIN, 0};
        if (poll(&pfd, 1, 10000) <= 0)
            return -1;
        ssize_t r = recv(fd, p + have, n - have, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            return have == 0 ? 1 : -1;
        if (r < 0)
            return -1;
        have += (size_t)r;
    }
    return 0;
}

/* Appends one request frame to out (cap bytes); returns its length or 0 when it does not fit. */
static size_t put_frame(uint8_t *out, size_t cap, uint8_t opcode, uint64_t id, const uint8_t *body,
                        size_t len) {
    if (cap < DSC_FRAME_HEADER_SIZE + len)
        return 0;
    dsc_frame_header_t h = {.version = DSC_PROTO_VERSION,
                            .opcode = opcode,
                            .request_id = id,
                            .body_len = (uint32_t)len};
    dsc_frame_header_encode(&h, out);
    if (len)
        memcpy(out + DSC_FRAME_HEADER_SIZE, body, len);
    return DSC_FRAME_HEADER_SIZE + len;
}

static size_t put_get(uint8_t *out, size_t cap, uint64_t id, const char *name, uint32_t shard,
                      uint32_t first, uint32_t count) {
    dsc_get_req_t req = {.dataset = {name, (uint16_t)strlen(name)},
                         .shard_id = shard,
                         .first_chunk = first,
                         .chunk_count = count};
    uint8_t body[512];
    int n = dsc_get_req_encode(&req, body, sizeof body);
    return n < 0 ? 0 : put_frame(out, cap, DSC_OP_GET, id, body, (size_t)n);
}

static size_t put_hello(uint8_t *out, size_t cap) {
    dsc_hello_req_t req = {
        .min_version = 1, .max_version = DSC_PROTO_VERSION, .client_name = {"pipeline_check", 14}};
    uint8_t body[128];
    int n = dsc_hello_req_encode(&req, body, sizeof body);
    return n < 0 ? 0 : put_frame(out, cap, DSC_OP_HELLO, 0, body, (size_t)n);
}

/* What request i of a burst is, so that sender and checker agree. */
typedef enum {
    REQ_GET,
    REQ_GET_RANGE,
    REQ_BAD_RANGE,
    REQ_NO_DATASET,
    REQ_PING,
    REQ_UNKNOWN
} kind_t;

static kind_t kind_of(uint32_t i) {
    static const kind_t pattern[] = {REQ_GET,       REQ_GET, REQ_PING,       REQ_GET, REQ_GET_RANGE,
                                     REQ_BAD_RANGE, REQ_GET, REQ_NO_DATASET, REQ_GET, REQ_UNKNOWN};
    return pattern[i % (sizeof pattern / sizeof pattern[0])];
}

static void chunk_of(uint32_t i, uint32_t *shard, uint32_t *chunk) {
    *shard = 0;
    *chunk = 0;
    uint32_t total = 0;
    for (uint32_t s = 0; s < manifest->shard_count; s++)
        total += manifest->shards[s].chunks;
    if (total == 0)
        return;
    uint32_t k = (i * 7u) % total;
    for (uint32_t s = 0; s < manifest->shard_count; s++) {
        if (k < manifest->shards[s].chunks) {
            *shard = s;
            *chunk = k;
            return;
        }
        k -= manifest->shards[s].chunks;
    }
}

/* Appends request i (id i + 1). */
static size_t put_request(uint8_t *out, size_t cap, uint32_t i) {
    uint32_t shard, chunk;
    chunk_of(i, &shard, &chunk);
    uint64_t id = (uint64_t)i + 1;
    uint8_t ping[40];
    memset(ping, (int)(i & 0xff), sizeof ping);
    switch (kind_of(i)) {
    case REQ_GET:
        return put_get(out, cap, id, dataset, shard, chunk, 1);
    case REQ_GET_RANGE: /* the whole shard: several chunks in one answer */
        return put_get(out, cap, id, dataset, shard, 0, manifest->shards[shard].chunks);
    case REQ_BAD_RANGE:
        return put_get(out, cap, id, dataset, shard, manifest->shards[shard].chunks, 1);
    case REQ_NO_DATASET:
        return put_get(out, cap, id, "no-such-dataset", 0, 0, 1);
    case REQ_PING:
        return put_frame(out, cap, DSC_OP_PING, id, ping, sizeof ping);
    case REQ_UNKNOWN:
        return put_frame(out, cap, 99, id, NULL, 0);
    }
    return 0;
}

/* Reads one response and checks it against request i. Returns 0, or -1 (already reported). */
static int check_response(int fd, uint32_t i, uint8_t *body, size_t body_cap) {
    uint8_t head[DSC_FRAME_HEADER_SIZE];
    dsc_frame_header_t h;
    if (recv_exact(fd, head, sizeof head) != 0 ||
        dsc_frame_header_decode(head, sizeof head, 0, &h) < 0 || h.body_len > body_cap ||
        recv_exact(fd, body, h.body_len) != 0) {
        FAIL("response %u: missing or malformed", i);
        return -1;
    }
    if (h.request_id != (uint64_t)i + 1) {
        FAIL("response %u: id %llu, expected %u (out of order)", i,
             (unsigned long long)h.request_id, i + 1);
        return -1;
    }
    uint32_t want = DSC_STATUS_OK;
    switch (kind_of(i)) {
    case REQ_BAD_RANGE:
        want = DSC_STATUS_BAD_REQUEST;
        break;
    case REQ_NO_DATASET:
        want = DSC_STATUS_NOT_FOUND;
        break;
    case REQ_UNKNOWN:
        want = DSC_STATUS_UNSUPPORTED;
        break;
    default:
        break;
    }
    if (h.status != want) {
        FAIL("response %u: status %s, expected %s", i, dsc_status_name(h.status),
             dsc_status_name(want));
        return -1;
    }
    kind_t k = kind_of(i);
    if (k == REQ_PING) {
        for (uint32_t b = 0; b < h.body_len; b++)
            if (body[b] != (uint8_t)(i & 0xff) || h.body_len != 40) {
                FAIL("response %u: PING body not echoed", i);
                return -1;
            }
    }
    if (k == REQ_GET || k == REQ_GET_RANGE) {
        dsc_get_resp_t resp;
        if (dsc_get_resp_decode(body, h.body_len, &resp) < 0) {
            FAIL("response %u: GET body does not decode", i);
            return -1;
        }
        uint32_t shard, chunk;
        chunk_of(i, &shard, &chunk);
        uint32_t expect = k == REQ_GET ? 1 : manifest->shards[shard].chunks;
        if (resp.chunk_count != expect) {
            FAIL("response %u: %u chunks, expected %u", i, resp.chunk_count, expect);
            return -1;
        }
        for (uint32_t c = 0; c < resp.chunk_count; c++) {
            dsc_chunk_entry_t e;
            const uint8_t *data;
            if (dsc_get_resp_chunk(&resp, c, &e, &data) < 0 ||
                dsc_checksum(data, e.stored_len) != e.stored_checksum) {
                FAIL("response %u: chunk %u does not match its checksum", i, c);
                return -1;
            }
        }
    }
    return 0;
}

static uint64_t largest_answer(void) {
    uint64_t most = 0;
    for (uint32_t s = 0; s < manifest->shard_count; s++)
        if (manifest->shards[s].bytes > most)
            most = manifest->shards[s].bytes;
    return most + 64 * 1024;
}

/* Sends HELLO and `count` mixed requests in one send, then checks every answer in order. */
static void burst(uint32_t count) {
    size_t cap = (size_t)count * 600 + 1024;
    size_t body_cap = (size_t)largest_answer();
    uint8_t *out = malloc(cap), *body = malloc(body_cap);
    int fd = raw_connect(addr);
    if (out == NULL || body == NULL || fd < 0) {
        FAIL("burst %u: set-up", count);
        goto done;
    }
    size_t len = put_hello(out, cap);
    for (uint32_t i = 0; i < count; i++)
        len += put_request(out + len, cap - len, i);
    if (send_all(fd, out, len) < 0) {
        FAIL("burst %u: send", count);
        goto done;
    }
    uint8_t head[DSC_FRAME_HEADER_SIZE];
    dsc_frame_header_t h;
    if (recv_exact(fd, head, sizeof head) != 0 ||
        dsc_frame_header_decode(head, sizeof head, 0, &h) < 0 || h.status != DSC_STATUS_OK ||
        h.body_len > body_cap || recv_exact(fd, body, h.body_len) != 0) {
        FAIL("burst %u: HELLO", count);
        goto done;
    }
    uint32_t ok = 0;
    for (uint32_t i = 0; i < count && check_response(fd, i, body, body_cap) == 0; i++)
        ok++;
    if (ok == count)
        printf("ok: %u pipelined requests in one send answered in order and intact\n", count);
done:
    if (fd >= 0)
        close(fd);
    free(out);
    free(body);
}

/* A burst of good GETs followed in the same send by a frame the server must refuse and close
 * on (one that does not even parse, or a well-formed frame flagged as a response): every GET is
 * answered before the error, then the server closes. */
static void burst_then_garbage(uint32_t count, int well_formed) {
    size_t cap = (size_t)count * 600 + 1024;
    size_t body_cap = (size_t)largest_answer();
    uint8_t *out = malloc(cap), *body = malloc(body_cap);
    int fd = raw_connect(addr);
    if (out == NULL || body == NULL || fd < 0) {
        FAIL("garbage burst: set-up");
        goto done;
    }
    size_t len = put_hello(out, cap);
    for (uint32_t i = 0; i < count; i++) {
        uint32_t shard, chunk;
        chunk_of(i, &shard, &chunk);
        len += put_get(out + len, cap - len, (uint64_t)i + 1, dataset, shard, chunk, 1);
    }
    if (well_formed) {
        dsc_frame_header_t bad = {.version = DSC_PROTO_VERSION,
                                  .opcode = DSC_OP_PING,
                                  .flags = DSC_FLAG_RESPONSE,
                                  .request_id = count + 1};
        dsc_frame_header_encode(&bad, out + len);
    } else {
        memset(out + len, 0x5a, DSC_FRAME_HEADER_SIZE); /* not a frame */
    }
    len += DSC_FRAME_HEADER_SIZE;
    if (send_all(fd, out, len) < 0) {
        FAIL("garbage burst: send");
        goto done;
    }
    uint8_t head[DSC_FRAME_HEADER_SIZE];
    dsc_frame_header_t h;
    uint32_t ok = 0;
    for (uint32_t i = 0; i <= count; i++) {
        if (recv_exact(fd, head, sizeof head) != 0 ||
            dsc_frame_header_decode(head, sizeof head, 0, &h) < 0 || h.body_len > body_cap ||
            recv_exact(fd, body, h.body_len) != 0) {
            FAIL("garbage burst: answer %u of %u missing", i, count + 1);
            goto done;
        }
        if (i == 0) { /* HELLO */
            if (h.status != DSC_STATUS_OK)
                FAIL("garbage burst: HELLO refused");
            continue;
        }
        dsc_get_resp_t resp;
        if (h.request_id != i || h.status != DSC_STATUS_OK ||
            dsc_get_resp_decode(body, h.body_len, &resp) < 0) {
            FAIL("garbage burst: GET %u answered wrongly", i);
            goto done;
        }
        ok++;
    }
    if (recv_exact(fd, head, sizeof head) != 0 ||
        dsc_frame_header_decode(head, sizeof head, 0, &h) < 0 || h.status == DSC_STATUS_OK ||
        h.body_len > body_cap || recv_exact(fd, body, h.body_len) != 0) {
        FAIL("garbage burst: no error answer after the GETs");
        goto done;
    }
    if (recv_exact(fd, head, 1) != 1) {
        FAIL("garbage burst: the server did not close after the bad frame");
        goto done;
    }
    printf("ok: %u GETs answered before the error for a %s, then closed\n", ok,
           well_formed ? "response frame sent as a request" : "frame that does not parse");
done:
    if (fd >= 0)
        close(fd);
    free(out);
    free(body);
}

/* n connections, each with its own burst in flight at once: answers never cross connections
 * (accepted sockets are handed between loops). */
static void many_connections(uint32_t n, uint32_t per_conn) {
    int *fds = calloc(n, sizeof *fds);
    size_t cap = (size_t)per_conn * 600 + 1024;
    size_t body_cap = (size_t)largest_answer();
    uint8_t *out = malloc(cap), *body = malloc(body_cap);
    uint32_t opened = 0, good = 0;
    if (fds == NULL || out == NULL || body == NULL) {
        FAIL("connections: set-up");
        goto done;
    }
    for (; opened < n; opened++) {
        fds[opened] = raw_connect(addr);
        if (fds[opened] < 0) {
            FAIL("connection %u refused", opened);
            goto done;
        }
        /* Each connection's ids start at a different point, so a crossed answer shows. */
        size_t len = put_hello(out, cap);
        for (uint32_t i = 0; i < per_conn; i++) {
            uint32_t shard, chunk;
            chunk_of(i, &shard, &chunk);
            len += put_get(out + len, cap - len, (uint64_t)opened * 100000 + i + 1, dataset, shard,
                           chunk, 1);
        }
        if (send_all(fds[opened], out, len) < 0) {
            FAIL("connection %u: send", opened);
            goto done;
        }
    }
    for (uint32_t c = 0; c < n; c++) {
        uint8_t head[DSC_FRAME_HEADER_SIZE];
        dsc_frame_header_t h;
        uint32_t i = 0;
        for (; i <= per_conn; i++) {
            if (recv_exact(fds[c], head, sizeof head) != 0 ||
                dsc_frame_header_decode(head, sizeof head, 0, &h) < 0 || h.body_len > body_cap ||
                recv_exact(fds[c], body, h.body_len) != 0 || h.status != DSC_STATUS_OK ||
                (i > 0 && h.request_id != (uint64_t)c * 100000 + i))
                break;
        }
        if (i == per_conn + 1)
            good++;
        else
            FAIL("connection %u: answer %u wrong or missing", c, i);
    }
    if (good == n)
        printf("ok: %u connections with %u pipelined GETs each, every answer on its own "
               "connection\n",
               n, per_conn);
done:
    for (uint32_t c = 0; c < opened; c++)
        close(fds[c]);
    free(fds);
    free(out);
    free(body);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: pipeline_check ADDR DATASET\n");
        return 2;
    }
    addr = argv[1];
    dataset = argv[2];
    dsc_conn_t *c = NULL;
    uint8_t *json = NULL;
    size_t json_len = 0;
    uint8_t name[300];
    int n, rc = dsc_conn_open_addr(addr, 10000, 0, &c);
    if (rc == 0 && (n = dsc_name_req_encode(dataset, name, sizeof name)) >= 0)
        rc = dsc_conn_call(c, DSC_OP_MANIFEST, name, (size_t)n, &json, &json_len);
    if (rc == 0)
        rc = dsc_manifest_parse((const char *)json, json_len, &manifest);
    free(json);
    dsc_conn_close(c);
    if (rc < 0) {
        fprintf(stderr, "pipeline_check: cannot get the manifest of %s from %s: %s\n", dataset,
                addr, dsc_strerror(rc));
        return 1;
    }
    burst(7);
    burst(700); /* more answers than one write holds */
    for (int well_formed = 0; well_formed < 2; well_formed++) {
        burst_then_garbage(20, well_formed); /* all answers in one write */
        burst_then_garbage(300, well_formed);
    }
    many_connections(32, 64);
    dsc_manifest_free(manifest);
    return fails ? 1 : 0;
}
