/* Test client for the dscached integration scripts: fetch-and-compare every chunk of a dataset,
 * single GETs, STAT/WARM/EVICT, hostile input, many concurrent connections, a slow reader. */
#include "conn.h"
#include "manifest.h"
#include "manifest_io.h"
#include "protocol.h"
#include "report.h"
#include "shard.h"
#include "test_frames.h"
#include "util.h"
#include "wire.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TIMEOUT_MS 20000

static int die(const char *what, int rc) {
    fprintf(stderr, "srv_client: %s: %s\n", what, rc < 0 ? dsc_strerror(rc) : "failed");
    return 1;
}

static uint8_t *read_file(const char *path, uint64_t *len) {
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (uint64_t)n;
    return buf;
}

static int send_get(dsc_conn_t *c, uint64_t id, const char *ds, uint32_t shard, uint32_t first,
                    uint32_t count) {
    dsc_get_req_t req = {.dataset = {ds, (uint16_t)strlen(ds)},
                         .shard_id = shard,
                         .first_chunk = first,
                         .chunk_count = count};
    /* SRV_CLIENT_VERSION=HEX: the GET names that dataset version (DSC_GET_FLAG_VERSION). */
    const char *version = getenv("SRV_CLIENT_VERSION");
    if (version != NULL && version[0] != '\0') {
        req.flags = DSC_GET_FLAG_VERSION;
        req.version = strtoull(version, NULL, 16);
    }
    uint8_t body[128];
    int n = dsc_get_req_encode(&req, body, sizeof body);
    if (n < 0)
        return n;
    return dsc_conn_send(c, DSC_OP_GET, id, body, (size_t)n);
}

/* Receives one response: header and malloc'd body. */
static int recv_frame(dsc_conn_t *c, dsc_frame_header_t *h, uint8_t **body) {
    int rc = dsc_conn_recv_header(c, h);
    if (rc < 0)
        return rc;
    *body = malloc(h->body_len + 1);
    if (*body == NULL)
        return DSC_ENOMEM;
    rc = dsc_conn_recv_body(c, *body, h->body_len);
    if (rc < 0) {
        free(*body);
        *body = NULL;
    }
    return rc;
}

/* fetch ADDR DATASET DIR [DEPTH]: every chunk of every shard, one chunk per GET with DEPTH
 * requests in flight (answers may come in any order), compared byte for byte with the shard
 * files in DIR and decoded with dsc_chunk_decode. */
static int cmd_fetch(int argc, char **argv) {
    if (argc < 5)
        return die("usage: fetch ADDR DATASET DIR [DEPTH]", 0);
    const char *dsname = argv[3], *dir = argv[4];
    uint32_t depth = argc > 5 ? (uint32_t)atoi(argv[5]) : 8;
    dsc_manifest_t *m = NULL;
    int rc = dsc_manifest_load(dir, &m);
    if (rc < 0)
        return die("manifest", rc);
    dsc_conn_t *c = NULL;
    if ((rc = dsc_conn_open_addr(argv[2], TIMEOUT_MS, 0, &c)) < 0)
        return die("connect", rc);
    uint64_t chunks = 0, bytes = 0, bad = 0;
    uint8_t *raw = malloc(DSC_CHUNK_MAX_RAW / 16);
    for (uint32_t s = 0; s < m->shard_count; s++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, m->shards[s].file);
        uint64_t flen;
        uint8_t *file = read_file(path, &flen);
        dsc_shard_view_t view;
        if (file == NULL || dsc_shard_parse(file, flen, &view) < 0) {
            free(file);
            return die("local shard file", DSC_EIO);
        }
        uint32_t n = view.footer.chunk_count, sent = 0, got = 0;
        while (got < n) {
            while (sent < n && sent - got < depth) {
                if ((rc = send_get(c, ((uint64_t)s << 32) | sent, dsname, s, sent, 1)) < 0)
                    return die("send", rc);
                sent++;
            }
            dsc_frame_header_t h;
            uint8_t *body = NULL;
            if ((rc = recv_frame(c, &h, &body)) < 0)
                return die("recv", rc);
            uint32_t idx = (uint32_t)h.request_id;
            dsc_get_resp_t resp;
            dsc_chunk_entry_t want, e;
            const uint8_t *data;
            if (h.status != DSC_STATUS_OK || (h.request_id >> 32) != s || idx >= n ||
                dsc_get_resp_decode(body, h.body_len, &resp) < 0 || resp.chunk_count != 1 ||
                dsc_get_resp_chunk(&resp, 0, &e, &data) < 0) {
                fprintf(stderr, "shard %u chunk %u: status %s\n", s, idx,
                        dsc_status_name(h.status));
                bad++;
            } else {
                dsc_shard_chunk(&view, idx, &want);
                if (e.stored_len != want.stored_len || e.stored_checksum != want.stored_checksum ||
                    memcmp(data, dsc_shard_chunk_data(&view, &want), want.stored_len) != 0 ||
                    dsc_chunk_decode(&e, data, raw, DSC_CHUNK_MAX_RAW / 16) != (int)e.raw_len) {
                    fprintf(stderr, "shard %u chunk %u: bytes differ\n", s, idx);
                    bad++;
                }
                bytes += e.stored_len;
            }
            free(body);
            got++;
            chunks++;
        }
        free(file);
    }
    printf("fetched %llu chunks, %llu bytes, %llu bad\n", (unsigned long long)chunks,
           (unsigned long long)bytes, (unsigned long long)bad);
    free(raw);
    dsc_conn_close(c);
    dsc_manifest_free(m);
    return bad ? 1 : 0;
}

/* get ADDR DATASET SHARD FIRST COUNT: prints the status name (and the data length); geterr, the
 * same, then an error answer's message on the same line. */
static int cmd_get(int argc, char **argv) {
    if (argc < 7)
        return die("usage: get ADDR DATASET SHARD FIRST COUNT", 0);
    dsc_conn_t *c = NULL;
    int rc = dsc_conn_open_addr(argv[2], TIMEOUT_MS, 0, &c);
    if (rc < 0)
        return die("connect", rc);
    if ((rc = send_get(c, 7, argv[3], (uint32_t)atoi(argv[4]), (uint32_t)atoi(argv[5]),
                       (uint32_t)atoi(argv[6]))) < 0)
        return die("send", rc);
    dsc_frame_header_t h;
    uint8_t *body = NULL;
    if ((rc = recv_frame(c, &h, &body)) < 0)
        return die("recv", rc);
    if (strcmp(argv[1], "geterr") == 0 && h.status != DSC_STATUS_OK)
        printf("%s %u %.*s\n", dsc_status_name(h.status), h.body_len, (int)h.body_len,
               body ? (const char *)body : "");
    else
        printf("%s %u\n", dsc_status_name(h.status), h.body_len);
    free(body);
    dsc_conn_close(c);
    return 0;
}

/* call ADDR OP [NAME [SHARD]]: STAT / LIST / MANIFEST / WARM / EVICT / REPORT; prints the body
 * (u32 for WARM/EVICT, the answer's counters as JSON for REPORT) or the error status. VERSION NAME:
 * the dataset version of its MANIFEST answer. */
static int cmd_call(int argc, char **argv) {
    if (argc < 4)
        return die("usage: call ADDR OP [NAME [SHARD]]", 0);
    dsc_conn_t *c = NULL;
    int rc = dsc_conn_open_addr(argv[2], TIMEOUT_MS, 0, &c);
    if (rc < 0)
        return die("connect", rc);
    const char *op = argv[3], *name = argc > 4 ? argv[4] : "";
    uint8_t body[256];
    int n = 0;
    uint8_t opcode;
    if (strcmp(op, "STAT") == 0 || strcmp(op, "MANIFEST") == 0 || strcmp(op, "VERSION") == 0) {
        opcode = op[0] == 'S' ? DSC_OP_STAT : DSC_OP_MANIFEST;
        n = dsc_name_req_encode(name, body, sizeof body);
    } else if (strcmp(op, "LIST") == 0) {
        opcode = DSC_OP_LIST;
    } else if (strcmp(op, "MEMBERS") == 0) {
        opcode = DSC_OP_MEMBERS;
    } else if (strcmp(op, "REPORT") == 0) { /* job srv_client, rank 0 of 1, on NAME */
        opcode = DSC_OP_REPORT;
        dsc_report_req_t req = {
            .job = {"srv_client", 10}, .dataset = {name, (uint16_t)strlen(name)}, .world_size = 1};
        n = dsc_report_req_encode(&req, body, sizeof body);
    } else {
        opcode = strcmp(op, "WARM") == 0 ? DSC_OP_WARM : DSC_OP_EVICT;
        dsc_shard_req_t req = {.dataset = {name, (uint16_t)strlen(name)},
                               .shard_id =
                                   argc > 5 ? (uint32_t)strtoul(argv[5], NULL, 10) : DSC_SHARD_ALL};
        n = dsc_shard_req_encode(&req, body, sizeof body);
    }
    if (n < 0)
        return die("encode", n);
    uint8_t *resp = NULL;
    size_t len = 0;
    rc = dsc_conn_call(c, opcode, body, (size_t)n, &resp, &len);
    if (rc < 0) {
        printf("error %s: %s\n", dsc_err_name(rc), dsc_conn_last_error(c));
    } else if (opcode == DSC_OP_WARM || opcode == DSC_OP_EVICT) {
        printf("%u\n", len == 4 ? dsc_load_u32(resp) : 0xFFFFFFFFu);
    } else if (opcode == DSC_OP_REPORT) { /* the answer's figures as JSON */
        dsc_report_resp_t r;
        if (dsc_report_resp_decode(resp, len, &r) != 1)
            printf("error: REPORT answer of %zu bytes undecodable\n", len);
        else
            printf("{\"hits\": %llu, \"misses\": %llu, \"backing_bytes\": %llu, "
                   "\"backing_busy_us\": %llu}\n",
                   (unsigned long long)r.hits, (unsigned long long)r.misses,
                   (unsigned long long)r.backing_bytes, (unsigned long long)r.backing_busy_us);
    } else if (strcmp(op, "VERSION") == 0) { /* the dataset version of the MANIFEST answer */
        printf("%016llx\n", (unsigned long long)dsc_dataset_version(resp, len));
    } else {
        printf("%s\n", resp);
    }
    free(resp);
    dsc_conn_close(c);
    return 0;
}

/* ---- raw sockets for hostile input ------------------------------------------------------ */

/* Reads until the server closes or 5 s pass; returns the first response header's status, or
 * -1 when none came; *closed tells whether the server closed. */
static int raw_expect(int fd, int *closed) {
    uint8_t buf[4096];
    size_t have = 0;
    *closed = 0;
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 5000) <= 0)
            break;
        ssize_t n = recv(fd, buf + have, sizeof buf - have, 0);
        if (n <= 0) {
            *closed = 1;
            break;
        }
        have += (size_t)n;
        if (have == sizeof buf)
            have = 64; /* keep the first header */
    }
    dsc_frame_header_t h;
    if (have >= DSC_FRAME_HEADER_SIZE && dsc_frame_header_decode(buf, have, 0, &h) > 0)
        return (int)h.status;
    return -1;
}

static size_t frame(uint8_t *out, uint8_t opcode, uint16_t flags, uint64_t id, const void *body,
                    uint32_t len, uint32_t claimed_len) {
    dsc_frame_header_t h = {
        .version = 1, .opcode = opcode, .flags = flags, .request_id = id, .body_len = claimed_len};
    dsc_frame_header_encode(&h, out);
    if (len)
        memcpy(out + DSC_FRAME_HEADER_SIZE, body, len);
    (void)len;
    return DSC_FRAME_HEADER_SIZE + len;
}

static size_t hello_frame(uint8_t *out) {
    dsc_hello_req_t req = {.min_version = 1, .max_version = 1, .client_name = {"t", 1}};
    uint8_t body[64];
    int n = dsc_hello_req_encode(&req, body, sizeof body);
    return frame(out, DSC_OP_HELLO, 0, 1, body, (uint32_t)n, (uint32_t)n);
}

/* hostile ADDR DATASET: each case on its own connection, then a normal client must still get
 * every chunk of shard 0. Prints one line per case; exits 1 on an unexpected outcome. */
static int cmd_hostile(int argc, char **argv) {
    if (argc < 4)
        return die("usage: hostile ADDR DATASET", 0);
    const char *addr = argv[2], *ds = argv[3];
    int fails = 0, closed, st, fd;
    uint8_t buf[1 << 16];
    size_t n;
#define EXPECT(name, cond)                                                                         \
    do {                                                                                           \
        int ok_ = (cond);                                                                          \
        printf("%-40s %s (status %d, closed %d)\n", name, ok_ ? "ok" : "UNEXPECTED", st, closed);  \
        fails += !ok_;                                                                             \
    } while (0)

    /* 1. Garbage bytes: BAD_REQUEST and close. */
    fd = raw_connect(addr);
    memset(buf, 'G', 100);
    send_all(fd, buf, 100);
    st = raw_expect(fd, &closed);
    close(fd);
    EXPECT("garbage", st == DSC_STATUS_BAD_REQUEST && closed);

    /* 2. A request before HELLO: BAD_REQUEST and close. */
    fd = raw_connect(addr);
    n = frame(buf, DSC_OP_PING, 0, 5, NULL, 0, 0);
    send_all(fd, buf, n);
    st = raw_expect(fd, &closed);
    close(fd);
    EXPECT("PING before HELLO", st == DSC_STATUS_BAD_REQUEST && closed);

    /* 3. An absurd body length: TOO_LARGE and close. */
    fd = raw_connect(addr);
    n = hello_frame(buf);
    n += frame(buf + n, DSC_OP_GET, 0, 9, NULL, 0, 0xFFFFFFF0u);
    send_all(fd, buf, n);
    st = raw_expect(fd, &closed);
    close(fd);
    EXPECT("absurd length", st == DSC_STATUS_OK && closed); /* first answer: the HELLO */

    /* 4. Half a frame, then the client goes away. */
    fd = raw_connect(addr);
    n = hello_frame(buf);
    send_all(fd, buf, n - 3);
    close(fd);
    st = 0;
    closed = 1;
    EXPECT("half a frame then close", 1);

    /* 5. A response flag from the client: BAD_REQUEST and close. */
    fd = raw_connect(addr);
    n = hello_frame(buf);
    send_all(fd, buf, n);
    n = frame(buf, DSC_OP_PING, DSC_FLAG_RESPONSE, 3, NULL, 0, 0);
    send_all(fd, buf, n);
    {
        /* Skip the HELLO answer, then look at the next. */
        uint8_t r[4096];
        ssize_t got = 0, total = 0;
        struct pollfd p = {fd, POLLIN, 0};
        closed = 0;
        while (poll(&p, 1, 5000) > 0 &&
               (got = recv(fd, r + total, sizeof r - (size_t)total, 0)) > 0)
            total += got;
        closed = got == 0;
        dsc_frame_header_t h1, h2;
        st = -1;
        if (total >= 24 && dsc_frame_header_decode(r, (size_t)total, 0, &h1) > 0 &&
            (size_t)total >= 48 + h1.body_len &&
            dsc_frame_header_decode(r + 24 + h1.body_len, (size_t)total - 24 - h1.body_len, 0,
                                    &h2) > 0)
            st = (int)h2.status;
    }
    close(fd);
    EXPECT("response flag from client", st == DSC_STATUS_BAD_REQUEST && closed);

    /* 6. Bad magic after a good HELLO. */
    fd = raw_connect(addr);
    n = hello_frame(buf);
    memset(buf + n, 0xEE, 24);
    send_all(fd, buf, n + 24);
    st = raw_expect(fd, &closed);
    close(fd);
    EXPECT("bad magic after HELLO", st == DSC_STATUS_OK && closed);

    /* 7. Malformed GET body (truncated): BAD_REQUEST, connection stays usable. */
    {
        dsc_conn_t *c = NULL;
        int rc = dsc_conn_open_addr(addr, TIMEOUT_MS, 0, &c);
        uint8_t junk[3] = {1, 2, 3};
        uint8_t *resp = NULL;
        size_t len = 0;
        int r1 = rc == 0 ? dsc_conn_call(c, DSC_OP_GET, junk, 3, &resp, &len) : rc;
        free(resp);
        resp = NULL;
        int r2 = rc == 0 ? dsc_conn_call(c, DSC_OP_PING, "x", 1, &resp, &len) : rc;
        free(resp);
        resp = NULL;
        /* Unknown opcode: UNSUPPORTED, still usable. */
        int r3 = rc == 0 ? dsc_conn_call(c, 99, NULL, 0, &resp, &len) : rc;
        free(resp);
        resp = NULL;
        int r4 = rc == 0 ? dsc_conn_call(c, DSC_OP_PING, "y", 1, &resp, &len) : rc;
        free(resp);
        dsc_conn_close(c);
        st = r1;
        closed = 0;
        EXPECT("malformed GET body, then PING", r1 == DSC_EBADREQ && r2 == 0);
        st = r3;
        EXPECT("unknown opcode, then PING", r3 == DSC_ENOTSUP && r4 == 0);
    }

    /* 8. Disconnect mid-response: ask for many chunks, read a little, close. */
    for (int round = 0; round < 5; round++) {
        fd = raw_connect(addr);
        n = hello_frame(buf);
        dsc_get_req_t req = {.dataset = {ds, (uint16_t)strlen(ds)},
                             .shard_id = 0,
                             .first_chunk = 0,
                             .chunk_count = 1};
        uint8_t body[128];
        int bl = dsc_get_req_encode(&req, body, sizeof body);
        for (int k = 0; k < 50; k++)
            n += frame(buf + n, DSC_OP_GET, 0, 100 + (uint64_t)k, body, (uint32_t)bl, (uint32_t)bl);
        send_all(fd, buf, n);
        recv(fd, buf, 100, 0);
        close(fd);
    }
    st = 0;
    closed = 1;
    EXPECT("disconnect mid-response (5 rounds)", 1);

    /* 9. Byte-by-byte HELLO and GET: must be reassembled. */
    {
        fd = raw_connect(addr);
        n = hello_frame(buf);
        dsc_get_req_t req = {.dataset = {ds, (uint16_t)strlen(ds)}, .chunk_count = 1};
        uint8_t body[128];
        int bl = dsc_get_req_encode(&req, body, sizeof body);
        n += frame(buf + n, DSC_OP_GET, 0, 77, body, (uint32_t)bl, (uint32_t)bl);
        for (size_t i = 0; i < n; i++) {
            send_all(fd, buf + i, 1);
            if (i % 7 == 0)
                usleep(200);
        }
        shutdown(fd, SHUT_WR);
        uint8_t r[1 << 16];
        size_t total = 0;
        ssize_t got;
        while (total < sizeof r && (got = recv(fd, r + total, sizeof r - total, 0)) > 0)
            total += (size_t)got;
        dsc_frame_header_t h1, h2;
        st = -1;
        closed = 1;
        if (total >= 24 && dsc_frame_header_decode(r, total, 0, &h1) > 0 &&
            total >= 48 + h1.body_len &&
            dsc_frame_header_decode(r + 24 + h1.body_len, total - 24 - h1.body_len, 0, &h2) > 0 &&
            h2.request_id == 77 && total == 48 + h1.body_len + h2.body_len)
            st = (int)h2.status;
        close(fd);
        EXPECT("byte-by-byte frames, half-close", st == DSC_STATUS_OK);
    }

    /* Finally: a normal client gets every chunk. */
    dsc_conn_t *c = NULL;
    int rc = dsc_conn_open_addr(addr, TIMEOUT_MS, 0, &c);
    uint8_t *resp = NULL;
    size_t len = 0;
    uint8_t body[128];
    dsc_get_req_t req = {.dataset = {ds, (uint16_t)strlen(ds)}, .chunk_count = 1};
    int bl = dsc_get_req_encode(&req, body, sizeof body);
    if (rc == 0)
        rc = dsc_conn_call(c, DSC_OP_GET, body, (size_t)bl, &resp, &len);
    free(resp);
    dsc_conn_close(c);
    st = rc;
    closed = 0;
    EXPECT("normal client afterwards", rc == 0);
    return fails ? 1 : 0;
}

/* conc ADDR DATASET N: N connections open at once, then each sends a GET, then every answer is
 * read and checked. */
static int cmd_conc(int argc, char **argv) {
    if (argc < 5)
        return die("usage: conc ADDR DATASET N", 0);
    int n = atoi(argv[4]);
    const dsc_manifest_t *unused = NULL;
    (void)unused;
    dsc_conn_t **conns = calloc((size_t)n, sizeof *conns);
    for (int i = 0; i < n; i++) {
        int rc = dsc_conn_open_addr(argv[2], TIMEOUT_MS, 0, &conns[i]);
        if (rc < 0) {
            fprintf(stderr, "connection %d: %s\n", i, dsc_strerror(rc));
            return 1;
        }
    }
    for (int i = 0; i < n; i++) {
        int rc = send_get(conns[i], (uint64_t)i, argv[3], 0, 0, 1);
        if (rc < 0)
            return die("send", rc);
    }
    int ok = 0;
    for (int i = 0; i < n; i++) {
        dsc_frame_header_t h;
        uint8_t *body = NULL;
        int rc = recv_frame(conns[i], &h, &body);
        dsc_get_resp_t resp;
        if (rc == 0 && h.status == DSC_STATUS_OK && h.request_id == (uint64_t)i &&
            dsc_get_resp_decode(body, h.body_len, &resp) == 0)
            ok++;
        free(body);
        dsc_conn_close(conns[i]);
    }
    free(conns);
    printf("%d/%d connections answered\n", ok, n);
    return ok == n ? 0 : 1;
}

/* slow ADDR DATASET SHARD MARKER: asks for every chunk of SHARD in one GET, creates MARKER once
 * sent, waits 1 s before reading, then reads slowly and checks the answer is whole. */
static int cmd_slow(int argc, char **argv) {
    if (argc < 6)
        return die("usage: slow ADDR DATASET SHARD MARKER", 0);
    dsc_conn_t *c = NULL;
    int rc = dsc_conn_open_addr(argv[2], TIMEOUT_MS, 0, &c);
    if (rc < 0)
        return die("connect", rc);
    uint8_t body[128];
    int n = dsc_name_req_encode(argv[3], body, sizeof body);
    uint8_t *resp = NULL;
    size_t len = 0;
    if ((rc = dsc_conn_call(c, DSC_OP_MANIFEST, body, (size_t)n, &resp, &len)) < 0)
        return die("manifest", rc);
    dsc_manifest_t *m = NULL;
    if ((rc = dsc_manifest_parse((const char *)resp, len, &m)) < 0)
        return die("manifest parse", rc);
    free(resp);
    uint32_t shard = (uint32_t)atoi(argv[4]);
    uint32_t chunks = m->shards[shard].chunks;
    if ((rc = send_get(c, 42, argv[3], shard, 0, chunks)) < 0)
        return die("send", rc);
    FILE *f = fopen(argv[5], "w");
    if (f)
        fclose(f);
    sleep(1);
    dsc_frame_header_t h;
    if ((rc = dsc_conn_recv_header(c, &h)) < 0)
        return die("recv header", rc);
    uint8_t *data = malloc(h.body_len);
    uint32_t got = 0;
    while (got < h.body_len) {
        uint32_t step = h.body_len - got < (1u << 20) ? h.body_len - got : (1u << 20);
        if ((rc = dsc_conn_recv_body(c, data + got, step)) < 0)
            return die("recv body", rc);
        got += step;
        usleep(20000);
    }
    dsc_get_resp_t gr;
    rc = h.status == DSC_STATUS_OK ? dsc_get_resp_decode(data, h.body_len, &gr) : DSC_EPROTO;
    int verified = 0;
    for (uint32_t i = 0; rc == 0 && i < gr.chunk_count; i++) {
        dsc_chunk_entry_t e;
        const uint8_t *d;
        if (dsc_get_resp_chunk(&gr, i, &e, &d) == 0 && dsc_chunk_verify(&e, d) == 0)
            verified++;
    }
    printf("slow reader: status %s, %u body bytes, %d/%u chunks verified\n",
           dsc_status_name(h.status), h.body_len, verified, chunks);
    free(data);
    dsc_manifest_free(m);
    dsc_conn_close(c);
    return rc == 0 && verified == (int)chunks ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: srv_client fetch|get|geterr|call|hostile|conc|slow ADDR ...\n");
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "fetch") == 0)
        return cmd_fetch(argc, argv);
    if (strcmp(cmd, "get") == 0 || strcmp(cmd, "geterr") == 0)
        return cmd_get(argc, argv);
    if (strcmp(cmd, "call") == 0)
        return cmd_call(argc, argv);
    if (strcmp(cmd, "hostile") == 0)
        return cmd_hostile(argc, argv);
    if (strcmp(cmd, "conc") == 0)
        return cmd_conc(argc, argv);
    if (strcmp(cmd, "slow") == 0)
        return cmd_slow(argc, argv);
    fprintf(stderr, "srv_client: unknown command %s\n", cmd);
    return 2;
}
