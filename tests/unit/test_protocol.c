/* Wire protocol codecs: round trips, every truncation, byte-by-byte reassembly of pipelined
 * frames, rejection of hostile headers and bodies, status/error mapping. */
#include "auth.h"
#include "hint.h"
#include "mget.h"
#include "peer.h"
#include "protocol.h"
#include "range.h"
#include "report.h"
#include "testlib.h"
#include "wire.h"

#include <dirent.h>
#include <stdint.h>
#include <string.h>

static dsc_str_t str(const char *s) {
    dsc_str_t v = {s, (uint16_t)strlen(s)};
    return v;
}

static int str_eq(dsc_str_t a, const char *b) {
    return a.len == strlen(b) && (a.len == 0 || memcmp(a.ptr, b, a.len) == 0);
}

/* Every strict prefix of a valid body and the body plus one trailing byte must be rejected. */
typedef int (*decode_fn)(const uint8_t *body, size_t len, void *out);

static void check_truncations(const char *what, const uint8_t *body, size_t len, decode_fn decode,
                              size_t out_size) {
    uint8_t out[512];
    REQUIRE(out_size <= sizeof out);
    uint8_t copy[4096];
    REQUIRE(len + 1 <= sizeof copy);
    memcpy(copy, body, len);
    CHECK_EQ_INT(decode(copy, len, out), 0);
    for (size_t n = 0; n < len; n++) {
        /* A heap-like exact-size copy so ASan sees any read past n. */
        uint8_t *exact = malloc(n ? n : 1);
        REQUIRE(exact != NULL);
        memcpy(exact, body, n);
        int rc = decode(exact, n, out);
        if (rc != DSC_EBADFRAME)
            fprintf(stderr, "%s: prefix %zu of %zu gave %d\n", what, n, len, rc);
        CHECK_EQ_INT(rc, DSC_EBADFRAME);
        free(exact);
    }
    copy[len] = 0;
    CHECK_EQ_INT(decode(copy, len + 1, out), DSC_EBADFRAME);
}

static int hello_req_dec(const uint8_t *b, size_t n, void *o) {
    return dsc_hello_req_decode(b, n, o);
}
static int hello_resp_dec(const uint8_t *b, size_t n, void *o) {
    return dsc_hello_resp_decode(b, n, o);
}
static int name_dec(const uint8_t *b, size_t n, void *o) {
    return dsc_name_req_decode(b, n, o);
}
static int shard_dec(const uint8_t *b, size_t n, void *o) {
    return dsc_shard_req_decode(b, n, o);
}
static int get_req_dec(const uint8_t *b, size_t n, void *o) {
    return dsc_get_req_decode(b, n, o);
}
static int get_resp_dec(const uint8_t *b, size_t n, void *o) {
    return dsc_get_resp_decode(b, n, o);
}

/* Encoders: every cap below the needed size gives DSC_ENOSPC. */
typedef int (*encode_fn)(const void *value, uint8_t *out, size_t cap);
static void check_enospc(const void *value, encode_fn encode, int needed) {
    uint8_t out[4096];
    for (int cap = 0; cap < needed; cap++)
        CHECK_EQ_INT(encode(value, out, (size_t)cap), DSC_ENOSPC);
    CHECK_EQ_INT(encode(value, out, (size_t)needed), needed);
}
static int hello_req_enc(const void *v, uint8_t *o, size_t c) {
    return dsc_hello_req_encode(v, o, c);
}
static int hello_resp_enc(const void *v, uint8_t *o, size_t c) {
    return dsc_hello_resp_encode(v, o, c);
}
static int shard_enc(const void *v, uint8_t *o, size_t c) {
    return dsc_shard_req_encode(v, o, c);
}
static int get_req_enc(const void *v, uint8_t *o, size_t c) {
    return dsc_get_req_encode(v, o, c);
}
static int name_enc(const void *v, uint8_t *o, size_t c) {
    return dsc_name_req_encode(v, o, c);
}

/* ---- Header ------------------------------------------------------------------------------- */

static void test_header(void) {
    uint8_t buf[DSC_FRAME_HEADER_SIZE];
    dsc_frame_header_t cases[] = {
        {1, 0, 0, 0, 0, 0},
        {DSC_PROTO_VERSION, 255, DSC_FLAG_RESPONSE, UINT32_MAX, UINT64_MAX, DSC_FRAME_MAX_BODY},
        {1, DSC_OP_GET, 0, 0, 0x0102030405060708ull, 1},
        {1, DSC_OP_RDMA_GET, DSC_FLAG_RESPONSE, DSC_STATUS_UNSUPPORTED, 1ull << 63, 12345},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dsc_frame_header_encode(&cases[i], buf);
        dsc_frame_header_t h;
        memset(&h, 0xAB, sizeof h);
        CHECK_EQ_INT(dsc_frame_header_decode(buf, sizeof buf, 0, &h), DSC_FRAME_HEADER_SIZE);
        CHECK_EQ_INT(h.version, cases[i].version);
        CHECK_EQ_INT(h.opcode, cases[i].opcode);
        CHECK_EQ_INT(h.flags, cases[i].flags);
        CHECK(h.status == cases[i].status);
        CHECK(h.request_id == cases[i].request_id);
        CHECK(h.body_len == cases[i].body_len);
        /* Every prefix is "partial" and leaves *out alone. */
        for (size_t n = 0; n < DSC_FRAME_HEADER_SIZE; n++) {
            dsc_frame_header_t untouched = {9, 9, 9, 9, 9, 9};
            CHECK_EQ_INT(dsc_frame_header_decode(buf, n, 0, &untouched), 0);
            CHECK_EQ_INT(untouched.opcode, 9);
        }
    }

    /* Exact layout: "DSCP", version, opcode, flags, status, request id, body_len. */
    dsc_frame_header_t h = {
        1, DSC_OP_GET, DSC_FLAG_RESPONSE, 0x11223344u, 0x8877665544332211ull, 0x00B0C0D0u};
    dsc_frame_header_encode(&h, buf);
    static const uint8_t want[DSC_FRAME_HEADER_SIZE] = {
        'D',  'S',  'C',  'P',  1,    DSC_OP_GET, 1,    0,    0x44, 0x33, 0x22, 0x11,
        0x11, 0x22, 0x33, 0x44, 0x55, 0x66,       0x77, 0x88, 0xD0, 0xC0, 0xB0, 0x00};
    CHECK(memcmp(buf, want, sizeof want) == 0);

    /* Rejections. */
    dsc_frame_header_t ok = {1, DSC_OP_PING, 0, 0, 7, 100};
    dsc_frame_header_t out;
    dsc_frame_header_encode(&ok, buf);
    buf[0] ^= 1;
    CHECK_EQ_INT(dsc_frame_header_decode(buf, sizeof buf, 0, &out), DSC_EBADMAGIC);
    uint8_t http[DSC_FRAME_HEADER_SIZE] = "GET / HTTP/1.1\r\nHost: x\r";
    CHECK_EQ_INT(dsc_frame_header_decode(http, sizeof http, 0, &out), DSC_EBADMAGIC);
    dsc_frame_header_encode(&ok, buf);
    buf[4] = 0;
    CHECK_EQ_INT(dsc_frame_header_decode(buf, sizeof buf, 0, &out), DSC_EVERSION);
    buf[4] = DSC_PROTO_VERSION + 1;
    CHECK_EQ_INT(dsc_frame_header_decode(buf, sizeof buf, 0, &out), DSC_EVERSION);
    buf[4] = 255;
    CHECK_EQ_INT(dsc_frame_header_decode(buf, sizeof buf, 0, &out), DSC_EVERSION);
    for (unsigned bit = 1; bit < 16; bit++) {
        dsc_frame_header_t f = ok;
        f.flags = (uint16_t)(1u << bit);
        dsc_frame_header_encode(&f, buf);
        CHECK_EQ_INT(dsc_frame_header_decode(buf, sizeof buf, 0, &out), DSC_EBADFRAME);
    }
    /* body_len bounds: the caller's max, the default for 0, never above the absolute bound. */
    dsc_frame_header_t big = ok;
    big.body_len = 100;
    dsc_frame_header_encode(&big, buf);
    CHECK_EQ_INT(dsc_frame_header_decode(buf, sizeof buf, 100, &out), DSC_FRAME_HEADER_SIZE);
    CHECK_EQ_INT(dsc_frame_header_decode(buf, sizeof buf, 99, &out), DSC_ETOOLARGE);
    big.body_len = DSC_FRAME_MAX_BODY;
    dsc_frame_header_encode(&big, buf);
    CHECK_EQ_INT(dsc_frame_header_decode(buf, sizeof buf, 0, &out), DSC_FRAME_HEADER_SIZE);
    big.body_len = DSC_FRAME_MAX_BODY + 1;
    dsc_frame_header_encode(&big, buf);
    CHECK_EQ_INT(dsc_frame_header_decode(buf, sizeof buf, 0, &out), DSC_ETOOLARGE);
    CHECK_EQ_INT(dsc_frame_header_decode(buf, sizeof buf, UINT32_MAX, &out), DSC_ETOOLARGE);
    big.body_len = UINT32_MAX;
    dsc_frame_header_encode(&big, buf);
    CHECK_EQ_INT(dsc_frame_header_decode(buf, sizeof buf, UINT32_MAX, &out), DSC_ETOOLARGE);
    /* Unknown opcodes and statuses pass the header (the server answers UNSUPPORTED). */
    dsc_frame_header_t odd = {1, 200, DSC_FLAG_RESPONSE, 999, 1, 0};
    dsc_frame_header_encode(&odd, buf);
    CHECK_EQ_INT(dsc_frame_header_decode(buf, sizeof buf, 0, &out), DSC_FRAME_HEADER_SIZE);
}

/* ---- Bodies ------------------------------------------------------------------------------- */

static void test_hello(void) {
    uint8_t buf[512];
    dsc_hello_req_t req = {
        1, 7, 0xDEADBEEFu, 0xFFFFFFFFFFFFFFFFull, str("tok\0en"), str("trainer-0")};
    req.auth.len = 6; /* the auth token is opaque: a NUL inside is fine */
    int n = dsc_hello_req_encode(&req, buf, sizeof buf);
    CHECK_EQ_INT(n, 2 + 2 + 4 + 8 + 2 + 6 + 2 + 9);
    dsc_hello_req_t got;
    REQUIRE(dsc_hello_req_decode(buf, (size_t)n, &got) == 0);
    CHECK_EQ_INT(got.min_version, 1);
    CHECK_EQ_INT(got.max_version, 7);
    CHECK(got.features == 0xDEADBEEFu);
    CHECK(got.members_hash == UINT64_MAX);
    CHECK(got.auth.len == 6 && memcmp(got.auth.ptr, "tok\0en", 6) == 0);
    CHECK(str_eq(got.client_name, "trainer-0"));
    /* Strings point into the caller's buffer. */
    CHECK(got.client_name.ptr >= (const char *)buf && got.client_name.ptr < (const char *)buf + n);
    check_truncations("hello_req", buf, (size_t)n, hello_req_dec, sizeof(dsc_hello_req_t));
    check_enospc(&req, hello_req_enc, n);

    /* Empty strings, NULL pointers. */
    dsc_hello_req_t empty = {1, 1, 0, 0, {NULL, 0}, {NULL, 0}};
    n = dsc_hello_req_encode(&empty, buf, sizeof buf);
    CHECK_EQ_INT(n, 20);
    REQUIRE(dsc_hello_req_decode(buf, (size_t)n, &got) == 0);
    CHECK(got.auth.len == 0 && got.client_name.len == 0);
    dsc_hello_req_t bad_ptr = {1, 1, 0, 0, {NULL, 3}, {NULL, 0}};
    CHECK_EQ_INT(dsc_hello_req_encode(&bad_ptr, buf, sizeof buf), DSC_EINVAL);

    /* Version ranges: min 0 or min > max is malformed. */
    dsc_hello_req_t inverted = {3, 2, 0, 0, {NULL, 0}, {NULL, 0}};
    n = dsc_hello_req_encode(&inverted, buf, sizeof buf);
    CHECK_EQ_INT(dsc_hello_req_decode(buf, (size_t)n, &got), DSC_EBADFRAME);
    dsc_hello_req_t zero = {0, 2, 0, 0, {NULL, 0}, {NULL, 0}};
    n = dsc_hello_req_encode(&zero, buf, sizeof buf);
    CHECK_EQ_INT(dsc_hello_req_decode(buf, (size_t)n, &got), DSC_EBADFRAME);
    /* A NUL inside the client name. */
    dsc_hello_req_t nul = {1, 1, 0, 0, {NULL, 0}, {"a\0b", 3}};
    n = dsc_hello_req_encode(&nul, buf, sizeof buf);
    CHECK_EQ_INT(dsc_hello_req_decode(buf, (size_t)n, &got), DSC_EBADFRAME);
    /* A string length running past the body. */
    n = dsc_hello_req_encode(&req, buf, sizeof buf);
    dsc_store_u32(buf + 16, 0xFFFF); /* auth len (u16) := 65535; next bytes stay */
    CHECK_EQ_INT(dsc_hello_req_decode(buf, (size_t)n, &got), DSC_EBADFRAME);

    /* Feature bit 0 (authentication) adds a nonce: tests/unit/test_auth.c. */
    dsc_hello_resp_t resp = {DSC_PROTO_VERSION,  0x4u, 0x1234567890ABCDEFull, DSC_FRAME_MAX_BODY,
                             str("node-a:7070"), NULL};
    n = dsc_hello_resp_encode(&resp, buf, sizeof buf);
    CHECK_EQ_INT(n, 2 + 4 + 8 + 4 + 2 + 11);
    dsc_hello_resp_t rgot;
    REQUIRE(dsc_hello_resp_decode(buf, (size_t)n, &rgot) == 0);
    CHECK_EQ_INT(rgot.version, DSC_PROTO_VERSION);
    CHECK(rgot.features == 4);
    CHECK(rgot.members_hash == 0x1234567890ABCDEFull);
    CHECK(rgot.max_body == DSC_FRAME_MAX_BODY);
    CHECK(str_eq(rgot.server_name, "node-a:7070"));
    check_truncations("hello_resp", buf, (size_t)n, hello_resp_dec, sizeof(dsc_hello_resp_t));
    check_enospc(&resp, hello_resp_enc, n);
    /* Feature bit 1 (RDMA offered) changes nothing in the layout: no nonce without bit 0, the
     * nonce with both. */
    dsc_hello_resp_t rdma = resp;
    rdma.features = DSC_FEATURE_RDMA;
    CHECK_EQ_INT(dsc_hello_resp_encode(&rdma, buf, sizeof buf), 2 + 4 + 8 + 4 + 2 + 11);
    REQUIRE(dsc_hello_resp_decode(buf, 2 + 4 + 8 + 4 + 2 + 11, &rgot) == 0);
    CHECK(rgot.features == DSC_FEATURE_RDMA && rgot.server_nonce == NULL);
    static const uint8_t nonce[DSC_AUTH_NONCE_SIZE] = {7};
    rdma.features = DSC_FEATURE_RDMA | DSC_FEATURE_AUTH;
    rdma.server_nonce = nonce;
    n = dsc_hello_resp_encode(&rdma, buf, sizeof buf);
    CHECK_EQ_INT(n, 2 + 4 + 8 + 4 + 2 + 11 + DSC_AUTH_NONCE_SIZE);
    REQUIRE(dsc_hello_resp_decode(buf, (size_t)n, &rgot) == 0);
    CHECK(rgot.features == (DSC_FEATURE_RDMA | DSC_FEATURE_AUTH) && rgot.server_nonce != NULL &&
          memcmp(rgot.server_nonce, nonce, sizeof nonce) == 0);
    dsc_hello_resp_t r2 = resp;
    r2.version = 0;
    n = dsc_hello_resp_encode(&r2, buf, sizeof buf);
    CHECK_EQ_INT(dsc_hello_resp_decode(buf, (size_t)n, &rgot), DSC_EBADFRAME);
    r2 = resp;
    r2.max_body = DSC_FRAME_MIN_MAX_BODY - 1;
    n = dsc_hello_resp_encode(&r2, buf, sizeof buf);
    CHECK_EQ_INT(dsc_hello_resp_decode(buf, (size_t)n, &rgot), DSC_EBADFRAME);
    r2.max_body = DSC_FRAME_MAX_BODY + 1;
    n = dsc_hello_resp_encode(&r2, buf, sizeof buf);
    CHECK_EQ_INT(dsc_hello_resp_decode(buf, (size_t)n, &rgot), DSC_EBADFRAME);
    r2.max_body = DSC_FRAME_MIN_MAX_BODY;
    n = dsc_hello_resp_encode(&r2, buf, sizeof buf);
    CHECK_EQ_INT(dsc_hello_resp_decode(buf, (size_t)n, &rgot), 0);

    /* Negotiation picks the highest common version. */
    CHECK_EQ_INT(dsc_hello_negotiate(1, 1), 1);
    CHECK_EQ_INT(dsc_hello_negotiate(DSC_PROTO_MIN_VERSION, 60000), DSC_PROTO_VERSION);
    CHECK_EQ_INT(dsc_hello_negotiate(DSC_PROTO_VERSION + 1, 60000), DSC_EVERSION);
    CHECK_EQ_INT(dsc_hello_negotiate(0, 0), DSC_EVERSION);
    CHECK_EQ_INT(dsc_hello_negotiate(0, 1), DSC_EVERSION);
    CHECK_EQ_INT(dsc_hello_negotiate(2, 1), DSC_EVERSION);
}

static void test_names(void) {
    uint8_t buf[256];
    /* The last one is 63 bytes, the longest name. */
    const char *names[] = {"", "imagenet-224", "a",
                           "x12345678901234567890123456789012345678901234567890123456789012"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        size_t len = strlen(names[i]);
        int n = dsc_name_req_encode(names[i], buf, sizeof buf);
        CHECK_EQ_INT(n, 2 + (int)len);
        dsc_str_t got;
        REQUIRE(dsc_name_req_decode(buf, (size_t)n, &got) == 0);
        CHECK(str_eq(got, names[i]));
        check_truncations("name_req", buf, (size_t)n, name_dec, sizeof(dsc_str_t));
        check_enospc(names[i], name_enc, n);
    }
    CHECK_EQ_INT(dsc_name_req_encode(NULL, buf, sizeof buf), 2);
    char long_name[DSC_MAX_NAME + 1];
    memset(long_name, 'n', sizeof long_name - 1);
    long_name[DSC_MAX_NAME] = '\0';
    CHECK_EQ_INT(dsc_name_req_encode(long_name, buf, sizeof buf), DSC_EINVAL);
    long_name[DSC_MAX_NAME - 1] = '\0'; /* 63 bytes: the longest */
    CHECK_EQ_INT(dsc_name_req_encode(long_name, buf, sizeof buf), DSC_MAX_NAME - 1 + 2);
    /* Hand-built over-long name and one holding a NUL. */
    dsc_str_t got;
    buf[0] = DSC_MAX_NAME;
    buf[1] = 0;
    memset(buf + 2, 'x', DSC_MAX_NAME);
    CHECK_EQ_INT(dsc_name_req_decode(buf, 2 + DSC_MAX_NAME, &got), DSC_EBADFRAME);
    memcpy(buf,
           "\x03\x00"
           "a\0b",
           5);
    CHECK_EQ_INT(dsc_name_req_decode(buf, 5, &got), DSC_EBADFRAME);

    dsc_shard_req_t req = {str("tokens-2k"), DSC_SHARD_ALL};
    int n = dsc_shard_req_encode(&req, buf, sizeof buf);
    CHECK_EQ_INT(n, 2 + 9 + 4);
    dsc_shard_req_t sgot;
    REQUIRE(dsc_shard_req_decode(buf, (size_t)n, &sgot) == 0);
    CHECK(str_eq(sgot.dataset, "tokens-2k"));
    CHECK(sgot.shard_id == DSC_SHARD_ALL);
    check_truncations("shard_req", buf, (size_t)n, shard_dec, sizeof(dsc_shard_req_t));
    check_enospc(&req, shard_enc, n);
    req.shard_id = 0;
    n = dsc_shard_req_encode(&req, buf, sizeof buf);
    REQUIRE(dsc_shard_req_decode(buf, (size_t)n, &sgot) == 0);
    CHECK_EQ_INT(sgot.shard_id, 0);
    dsc_shard_req_t empty = {{"", 0}, 1};
    CHECK_EQ_INT(dsc_shard_req_encode(&empty, buf, sizeof buf), DSC_EINVAL);
    memcpy(buf, "\x00\x00\x01\x00\x00\x00", 6); /* empty dataset on the wire */
    CHECK_EQ_INT(dsc_shard_req_decode(buf, 6, &sgot), DSC_EBADFRAME);
}

static void test_get_req(void) {
    uint8_t buf[256];
    dsc_get_req_t req = {str("ds"), 0xFFFFFFFEu, 17, DSC_GET_MAX_CHUNKS, 0, 0};
    int n = dsc_get_req_encode(&req, buf, sizeof buf);
    CHECK_EQ_INT(n, 2 + 2 + 16);
    dsc_get_req_t got;
    REQUIRE(dsc_get_req_decode(buf, (size_t)n, &got) == 0);
    CHECK(str_eq(got.dataset, "ds"));
    CHECK(got.shard_id == 0xFFFFFFFEu);
    CHECK_EQ_INT(got.first_chunk, 17);
    CHECK_EQ_INT(got.chunk_count, DSC_GET_MAX_CHUNKS);
    CHECK_EQ_INT(got.flags, 0);
    check_truncations("get_req", buf, (size_t)n, get_req_dec, sizeof(dsc_get_req_t));
    check_enospc(&req, get_req_enc, n);

    /* DSC_GET_FLAG_VERSION: a u64 version after the flags, round-tripped; cut short it is
     * refused; without the flag the decoder reports version 0. */
    dsc_get_req_t ver = {str("ds"), 3, 0, 1, DSC_GET_FLAG_VERSION, 0x0123456789ABCDEFull};
    n = dsc_get_req_encode(&ver, buf, sizeof buf);
    CHECK_EQ_INT(n, 2 + 2 + 16 + 8);
    REQUIRE(dsc_get_req_decode(buf, (size_t)n, &got) == 0);
    CHECK(got.version == 0x0123456789ABCDEFull);
    CHECK_EQ_INT(got.flags, DSC_GET_FLAG_VERSION);
    CHECK(dsc_get_req_decode(buf, (size_t)n - 1, &got) < 0);
    check_truncations("get_req version", buf, (size_t)n, get_req_dec, sizeof(dsc_get_req_t));
    REQUIRE(dsc_get_req_decode(buf, (size_t)(2 + 2 + 16), &got) < 0);
    CHECK(dsc_dataset_version("{}", 2) != dsc_dataset_version("{ }", 3));
    CHECK(dsc_dataset_version("", 0) != 0);

    /* POLICY: round trip; bad actions, a PIN with bytes, a priority over 1000, truncations
     * refused. */
    dsc_policy_req_t pol = {str("ds"), DSC_POLICY_OP_LIMIT, 12345678901ull}, pgot;
    n = dsc_policy_req_encode(&pol, buf, sizeof buf);
    CHECK_EQ_INT(n, 2 + 2 + 1 + 8);
    REQUIRE(dsc_policy_req_decode(buf, (size_t)n, &pgot) == 0);
    CHECK(str_eq(pgot.dataset, "ds") && pgot.action == DSC_POLICY_OP_LIMIT &&
          pgot.bytes == 12345678901ull);
    for (int cut = 0; cut < n; cut++)
        CHECK(dsc_policy_req_decode(buf, (size_t)cut, &pgot) < 0);
    buf[4] = 5; /* action 5 */
    CHECK_EQ_INT(dsc_policy_req_decode(buf, (size_t)n, &pgot), DSC_EBADFRAME);
    buf[4] = DSC_POLICY_OP_PRIORITY; /* PRIORITY over DSC_POLICY_MAX_PRIORITY */
    CHECK_EQ_INT(dsc_policy_req_decode(buf, (size_t)n, &pgot), DSC_EBADFRAME);
    dsc_policy_req_t prio = {str("ds"), DSC_POLICY_OP_PRIORITY, DSC_POLICY_MAX_PRIORITY};
    n = dsc_policy_req_encode(&prio, buf, sizeof buf);
    REQUIRE(n > 0 && dsc_policy_req_decode(buf, (size_t)n, &pgot) == 0);
    CHECK(pgot.action == DSC_POLICY_OP_PRIORITY && pgot.bytes == DSC_POLICY_MAX_PRIORITY);
    prio.bytes = DSC_POLICY_MAX_PRIORITY + 1;
    CHECK_EQ_INT(dsc_policy_req_encode(&prio, buf, sizeof buf), DSC_EINVAL);
    buf[4] = DSC_POLICY_OP_PIN; /* PIN with bytes != 0 */
    CHECK_EQ_INT(dsc_policy_req_decode(buf, (size_t)n, &pgot), DSC_EBADFRAME);
    dsc_policy_req_t badpin = {str("ds"), DSC_POLICY_OP_PIN, 1};
    CHECK_EQ_INT(dsc_policy_req_encode(&badpin, buf, sizeof buf), DSC_EINVAL);

    /* The last chunk index a u32 can name is reachable, one past it is not. */
    dsc_get_req_t edge = {str("ds"), 0, UINT32_MAX, 1, 0, 0};
    n = dsc_get_req_encode(&edge, buf, sizeof buf);
    CHECK(n > 0);
    CHECK_EQ_INT(dsc_get_req_decode(buf, (size_t)n, &got), 0);

    dsc_get_req_t bad[] = {
        {str("ds"), 0, 0, 0, 0, 0},
        {str("ds"), 0, 0, DSC_GET_MAX_CHUNKS + 1, 0, 0},
        {str("ds"), 0, UINT32_MAX, 2, 0, 0},
        {str("ds"), 0, 0, 1, 2, 0},
        {{"", 0}, 0, 0, 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(dsc_get_req_encode(&bad[i], buf, sizeof buf), DSC_EINVAL);
        /* Hand-encoded, the decoder rejects the same values. */
        dsc_wr_t w;
        dsc_wr_init(&w, buf, sizeof buf);
        dsc_wr_u16(&w, bad[i].dataset.len);
        dsc_wr_bytes(&w, bad[i].dataset.ptr, bad[i].dataset.len);
        dsc_wr_u32(&w, bad[i].shard_id);
        dsc_wr_u32(&w, bad[i].first_chunk);
        dsc_wr_u32(&w, bad[i].chunk_count);
        dsc_wr_u32(&w, bad[i].flags);
        REQUIRE(!w.bad);
        memset(&got, 0x5A, sizeof got);
        CHECK_EQ_INT(dsc_get_req_decode(buf, w.pos, &got), DSC_EBADFRAME);
        CHECK(got.chunk_count == 0x5A5A5A5Au); /* untouched on error */
    }
}

/* Builds a GET response body: prefix + stored bytes of `count` chunks of the given sizes. */
static size_t build_get_resp(uint8_t *out, size_t cap, const uint32_t *sizes, uint32_t count,
                             dsc_chunk_entry_t *entries) {
    size_t data_len = 0;
    for (uint32_t i = 0; i < count; i++) {
        memset(&entries[i], 0, sizeof entries[i]);
        entries[i].offset = 4096 + data_len;
        entries[i].first_sample = i * 10ull;
        entries[i].stored_len = sizes[i];
        entries[i].raw_len = i % 2 ? sizes[i] * 3 : sizes[i];
        entries[i].sample_count = 10;
        entries[i].codec = i % 2 ? DSC_CODEC_LZ4 : DSC_CODEC_RAW;
        entries[i].stored_checksum = 0x1111111111111111ull * (i + 1);
        entries[i].raw_checksum = ~entries[i].stored_checksum;
        data_len += sizes[i];
    }
    int n = dsc_get_resp_prefix_encode(entries, count, out, cap);
    REQUIRE(n == (int)DSC_GET_RESP_PREFIX(count));
    REQUIRE((size_t)n + data_len <= cap);
    size_t pos = (size_t)n;
    for (uint32_t i = 0; i < count; i++)
        for (uint32_t k = 0; k < sizes[i]; k++)
            out[pos++] = (uint8_t)(i * 31 + k);
    return pos;
}

static void test_get_resp(void) {
    static uint8_t buf[1 << 16];
    dsc_chunk_entry_t entries[8];
    const uint32_t sizes[] = {5, 0, 17, 1};
    size_t len = build_get_resp(buf, sizeof buf, sizes, 4, entries);
    dsc_get_resp_t resp;
    REQUIRE(dsc_get_resp_decode(buf, len, &resp) == 0);
    CHECK_EQ_INT(resp.chunk_count, 4);
    CHECK(resp.data == buf + DSC_GET_RESP_PREFIX(4));
    CHECK_EQ_INT(resp.data_len, 23);
    size_t offset = 0;
    for (uint32_t i = 0; i < 4; i++) {
        dsc_chunk_entry_t e;
        const uint8_t *data = NULL;
        REQUIRE(dsc_get_resp_chunk(&resp, i, &e, &data) == 0);
        CHECK(memcmp(&e, &entries[i], sizeof e) == 0 ||
              (e.offset == entries[i].offset && e.stored_len == entries[i].stored_len &&
               e.raw_len == entries[i].raw_len && e.codec == entries[i].codec &&
               e.raw_checksum == entries[i].raw_checksum));
        CHECK(data == resp.data + offset);
        if (sizes[i])
            CHECK_EQ_INT(data[0], (uint8_t)(i * 31));
        offset += sizes[i];
    }
    dsc_chunk_entry_t e;
    const uint8_t *data;
    CHECK_EQ_INT(dsc_get_resp_chunk(&resp, 4, &e, &data), DSC_ERANGE);
    /* The iterator walks the same chunks. */
    dsc_get_resp_iter_t it;
    dsc_get_resp_iter_init(&it, &resp);
    offset = 0;
    for (uint32_t i = 0; i < 4; i++) {
        CHECK_EQ_INT(dsc_get_resp_iter_next(&it, &e, &data), 1);
        CHECK(data == resp.data + offset);
        CHECK_EQ_INT(e.stored_len, sizes[i]);
        offset += sizes[i];
    }
    CHECK_EQ_INT(dsc_get_resp_iter_next(&it, &e, &data), 0);
    /* Streaming: size from the first 8 bytes, prefix decode against body_len. */
    CHECK_EQ_INT(dsc_get_resp_prefix_size(buf, 7), DSC_EBADFRAME);
    int psize = dsc_get_resp_prefix_size(buf, 8);
    CHECK_EQ_INT(psize, DSC_GET_RESP_PREFIX(4));
    dsc_get_resp_t pre;
    REQUIRE(dsc_get_resp_prefix_decode(buf, (size_t)psize, len, &pre) == 0);
    CHECK(pre.data == NULL && pre.data_len == 23 && pre.chunk_count == 4);
    CHECK_EQ_INT(dsc_get_resp_prefix_decode(buf, (size_t)psize, len + 1, &pre), DSC_EBADFRAME);
    CHECK_EQ_INT(dsc_get_resp_prefix_decode(buf, (size_t)psize - 1, len, &pre), DSC_EBADFRAME);
    CHECK_EQ_INT(dsc_get_resp_prefix_decode(buf, (size_t)psize, (uint64_t)psize - 1, &pre),
                 DSC_EBADFRAME);
    dsc_get_resp_iter_init(&it, &pre);
    CHECK_EQ_INT(dsc_get_resp_iter_next(&it, &e, &data), 1);
    CHECK(data == NULL);

    check_truncations("get_resp", buf, len, get_resp_dec, sizeof(dsc_get_resp_t));

    /* Prefix encoder bounds. */
    CHECK_EQ_INT(dsc_get_resp_prefix_encode(entries, 0, buf, sizeof buf), DSC_EINVAL);
    CHECK_EQ_INT(dsc_get_resp_prefix_encode(entries, DSC_GET_MAX_CHUNKS + 1, buf, sizeof buf),
                 DSC_EINVAL);
    CHECK_EQ_INT(dsc_get_resp_prefix_encode(entries, 2, buf, DSC_GET_RESP_PREFIX(2) - 1),
                 DSC_ENOSPC);

    /* Malformed: count, reserved, codec, raw_len, raw size mismatch. */
    uint8_t bad[1024];
    len = build_get_resp(bad, sizeof bad, sizes, 4, entries);
    dsc_store_u32(bad, 0);
    CHECK_EQ_INT(dsc_get_resp_decode(bad, len, &resp), DSC_EBADFRAME);
    dsc_store_u32(bad, 5); /* more entries than the body holds in total */
    CHECK_EQ_INT(dsc_get_resp_decode(bad, len, &resp), DSC_EBADFRAME);
    dsc_store_u32(bad, DSC_GET_MAX_CHUNKS + 1);
    CHECK_EQ_INT(dsc_get_resp_decode(bad, len, &resp), DSC_EBADFRAME);
    dsc_store_u32(bad, 3); /* fewer entries: the sum no longer matches */
    CHECK_EQ_INT(dsc_get_resp_decode(bad, len, &resp), DSC_EBADFRAME);
    dsc_store_u32(bad, 4);
    dsc_store_u32(bad + 4, 1);
    CHECK_EQ_INT(dsc_get_resp_decode(bad, len, &resp), DSC_EBADFRAME);
    dsc_store_u32(bad + 4, 0);
    REQUIRE(dsc_get_resp_decode(bad, len, &resp) == 0);

    dsc_chunk_entry_t mod[4];
    memcpy(mod, entries, sizeof mod);
    mod[1].codec = 2;
    REQUIRE(dsc_get_resp_prefix_encode(mod, 4, bad, sizeof bad) > 0);
    CHECK_EQ_INT(dsc_get_resp_decode(bad, len, &resp), DSC_EBADFRAME);
    memcpy(mod, entries, sizeof mod);
    mod[1].raw_len = DSC_CHUNK_MAX_RAW + 1;
    REQUIRE(dsc_get_resp_prefix_encode(mod, 4, bad, sizeof bad) > 0);
    CHECK_EQ_INT(dsc_get_resp_decode(bad, len, &resp), DSC_EBADFRAME);
    memcpy(mod, entries, sizeof mod);
    mod[0].raw_len = mod[0].stored_len + 1; /* raw codec: stored must equal raw */
    REQUIRE(dsc_get_resp_prefix_encode(mod, 4, bad, sizeof bad) > 0);
    CHECK_EQ_INT(dsc_get_resp_decode(bad, len, &resp), DSC_EBADFRAME);
    memcpy(mod, entries, sizeof mod);
    mod[2].stored_len += 1; /* sum one above the data */
    mod[2].raw_len = mod[2].stored_len;
    REQUIRE(dsc_get_resp_prefix_encode(mod, 4, bad, sizeof bad) > 0);
    CHECK_EQ_INT(dsc_get_resp_decode(bad, len, &resp), DSC_EBADFRAME);

    /* Lengths that would wrap a 32-bit sum: 0xFFFFFFFF + 1 + ... must not match a tiny body. */
    dsc_chunk_entry_t wrap[3];
    memset(wrap, 0, sizeof wrap);
    for (int i = 0; i < 3; i++)
        wrap[i].codec = DSC_CODEC_LZ4;
    wrap[0].stored_len = 0xFFFFFFFFu;
    wrap[1].stored_len = 2;
    wrap[2].stored_len = 0;
    int pn = dsc_get_resp_prefix_encode(wrap, 3, bad, sizeof bad);
    REQUIRE(pn > 0);
    bad[pn] = 0xEE;
    CHECK_EQ_INT(dsc_get_resp_decode(bad, (size_t)pn + 1, &resp), DSC_EBADFRAME);
    /* Many maximal entries: a 64-bit sum of 4096 * 0xFFFFFFFF cannot wrap either. */
    static dsc_chunk_entry_t many[DSC_GET_MAX_CHUNKS];
    for (int i = 0; i < DSC_GET_MAX_CHUNKS; i++) {
        memset(&many[i], 0, sizeof many[i]);
        many[i].codec = DSC_CODEC_LZ4;
        many[i].stored_len = 0xFFFFFFFFu;
    }
    static uint8_t prefix_buf[DSC_GET_RESP_PREFIX(DSC_GET_MAX_CHUNKS) + 16];
    pn = dsc_get_resp_prefix_encode(many, DSC_GET_MAX_CHUNKS, prefix_buf, sizeof prefix_buf);
    CHECK_EQ_INT(pn, DSC_GET_RESP_PREFIX(DSC_GET_MAX_CHUNKS));
    CHECK_EQ_INT(dsc_get_resp_decode(prefix_buf, (size_t)pn + 16, &resp), DSC_EBADFRAME);
    CHECK_EQ_INT(dsc_get_resp_prefix_decode(prefix_buf, (size_t)pn, UINT64_MAX, &pre),
                 DSC_EBADFRAME);
}

/* ---- Frames, error frames, pipelined reassembly ------------------------------------------- */

static void test_frames(void) {
    uint8_t out[64];
    dsc_frame_header_t h = {1, DSC_OP_PING, 0, 0, 42, 999};
    CHECK_EQ_INT(dsc_frame_encode(&h, "abc", 3, out, sizeof out), DSC_FRAME_HEADER_SIZE + 3);
    dsc_frame_header_t got;
    REQUIRE(dsc_frame_header_decode(out, sizeof out, 0, &got) == DSC_FRAME_HEADER_SIZE);
    CHECK_EQ_INT(got.body_len, 3); /* set from body_len, not from the header given */
    CHECK(memcmp(out + DSC_FRAME_HEADER_SIZE, "abc", 3) == 0);
    CHECK_EQ_INT(dsc_frame_encode(&h, NULL, 0, out, DSC_FRAME_HEADER_SIZE), DSC_FRAME_HEADER_SIZE);
    CHECK_EQ_INT(dsc_frame_encode(&h, NULL, 0, out, DSC_FRAME_HEADER_SIZE - 1), DSC_ENOSPC);
    CHECK_EQ_INT(dsc_frame_encode(&h, "abc", 3, out, DSC_FRAME_HEADER_SIZE + 2), DSC_ENOSPC);
    CHECK_EQ_INT(dsc_frame_encode(&h, NULL, 3, out, sizeof out), DSC_EINVAL);
    CHECK_EQ_INT(dsc_frame_encode(&h, out, (size_t)DSC_FRAME_MAX_BODY + 1, out, sizeof out),
                 DSC_ETOOLARGE);
    /* A body built in place after the header. */
    memcpy(out + DSC_FRAME_HEADER_SIZE, "inplace", 7);
    CHECK_EQ_INT(dsc_frame_encode(&h, out + DSC_FRAME_HEADER_SIZE, 7, out, sizeof out), 31);
    CHECK(memcmp(out + DSC_FRAME_HEADER_SIZE, "inplace", 7) == 0);

    /* Error frames: response flag, status, message cut at the limit on a UTF-8 boundary. */
    static uint8_t ebuf[DSC_FRAME_HEADER_SIZE + DSC_ERROR_MAX_MESSAGE];
    int n = dsc_error_frame_encode(DSC_OP_GET, 7, DSC_STATUS_NOT_FOUND, "no shard 3", ebuf,
                                   sizeof ebuf);
    CHECK_EQ_INT(n, DSC_FRAME_HEADER_SIZE + 10);
    REQUIRE(dsc_frame_header_decode(ebuf, (size_t)n, 0, &got) == DSC_FRAME_HEADER_SIZE);
    CHECK_EQ_INT(got.flags, DSC_FLAG_RESPONSE);
    CHECK_EQ_INT(got.status, DSC_STATUS_NOT_FOUND);
    CHECK_EQ_INT(got.opcode, DSC_OP_GET);
    CHECK(got.request_id == 7);
    CHECK(memcmp(ebuf + DSC_FRAME_HEADER_SIZE, "no shard 3", 10) == 0);
    CHECK_EQ_INT(dsc_error_frame_encode(DSC_OP_GET, 7, DSC_STATUS_OK, "x", ebuf, sizeof ebuf),
                 DSC_EINVAL);
    CHECK_EQ_INT(
        dsc_error_frame_encode(DSC_OP_GET, 7, DSC_STATUS_INTERNAL, NULL, ebuf, sizeof ebuf),
        DSC_FRAME_HEADER_SIZE);
    char longmsg[DSC_ERROR_MAX_MESSAGE + 8];
    memset(longmsg, 'a', sizeof longmsg);
    longmsg[sizeof longmsg - 1] = '\0';
    n = dsc_error_frame_encode(1, 1, DSC_STATUS_INTERNAL, longmsg, ebuf, sizeof ebuf);
    CHECK_EQ_INT(n, DSC_FRAME_HEADER_SIZE + DSC_ERROR_MAX_MESSAGE);
    /* "é" (C3 A9) straddling the limit is dropped whole. */
    longmsg[DSC_ERROR_MAX_MESSAGE - 1] = (char)0xC3;
    longmsg[DSC_ERROR_MAX_MESSAGE] = (char)0xA9;
    n = dsc_error_frame_encode(1, 1, DSC_STATUS_INTERNAL, longmsg, ebuf, sizeof ebuf);
    CHECK_EQ_INT(n, DSC_FRAME_HEADER_SIZE + DSC_ERROR_MAX_MESSAGE - 1);
    CHECK_EQ_INT(dsc_error_frame_encode(1, 1, DSC_STATUS_BUSY, "abc", ebuf, 26), DSC_ENOSPC);
}

typedef struct frame_rec {
    dsc_frame_header_t header;
    const uint8_t *body;
} frame_rec_t;

/* Feeds a stream one byte at a time into a small receive buffer and extracts whole frames as
 * soon as they are complete, as a connection's read loop does. Returns frames found. */
static int reassemble(const uint8_t *stream, size_t len, frame_rec_t *got, int max, uint8_t *bodies,
                      size_t bodies_cap) {
    static uint8_t rx[4096];
    size_t have = 0, body_pos = 0;
    int frames = 0;
    for (size_t i = 0; i < len; i++) {
        REQUIRE(have < sizeof rx);
        rx[have++] = stream[i];
        dsc_frame_header_t h;
        int rc = dsc_frame_header_decode(rx, have, sizeof rx - DSC_FRAME_HEADER_SIZE, &h);
        REQUIRE(rc >= 0);
        if (rc == 0)
            continue;
        CHECK_EQ_INT(rc, DSC_FRAME_HEADER_SIZE);
        if (have < DSC_FRAME_HEADER_SIZE + (size_t)h.body_len)
            continue; /* header complete, body partial */
        REQUIRE(frames < max && body_pos + h.body_len <= bodies_cap);
        memcpy(bodies + body_pos, rx + DSC_FRAME_HEADER_SIZE, h.body_len);
        got[frames].header = h;
        got[frames].body = bodies + body_pos;
        body_pos += h.body_len;
        frames++;
        have = 0; /* byte-at-a-time: nothing follows the frame yet */
    }
    CHECK_EQ_INT(have, 0); /* no dangling partial frame */
    return frames;
}

static void test_pipeline(void) {
    static uint8_t stream[8192];
    size_t pos = 0;
    frame_rec_t sent[8];
    uint8_t body[2048];
    int count = 0;

    /* HELLO, GET x2 (ids out of order), PING (empty), GET response, error response. */
    dsc_hello_req_t hello = {1, 1, 0, 0, {NULL, 0}, str("t")};
    int n = dsc_hello_req_encode(&hello, body, sizeof body);
    dsc_frame_header_t h = {1, DSC_OP_HELLO, 0, 0, 1, 0};
    struct {
        dsc_frame_header_t h;
        size_t len;
        uint8_t body[1024];
    } frames[6];
    frames[count].h = h;
    frames[count].len = (size_t)n;
    memcpy(frames[count++].body, body, (size_t)n);
    for (uint64_t id = 9; id >= 8; id--) {
        dsc_get_req_t get = {str("dataset"), (uint32_t)id, 0, 4, 0, 0};
        n = dsc_get_req_encode(&get, body, sizeof body);
        frames[count].h = (dsc_frame_header_t){1, DSC_OP_GET, 0, 0, id, 0};
        frames[count].len = (size_t)n;
        memcpy(frames[count++].body, body, (size_t)n);
    }
    frames[count].h = (dsc_frame_header_t){1, DSC_OP_PING, 0, 0, 10, 0};
    frames[count++].len = 0;
    dsc_chunk_entry_t entries[3];
    const uint32_t sizes[] = {100, 3, 50};
    size_t rlen = build_get_resp(body, sizeof body, sizes, 3, entries);
    frames[count].h = (dsc_frame_header_t){1, DSC_OP_GET, DSC_FLAG_RESPONSE, 0, 8, 0};
    frames[count].len = rlen;
    memcpy(frames[count++].body, body, rlen);
    frames[count].h =
        (dsc_frame_header_t){1, DSC_OP_GET, DSC_FLAG_RESPONSE, DSC_STATUS_NOT_FOUND, 9, 0};
    frames[count].len = 4;
    memcpy(frames[count++].body, "gone", 4);

    for (int i = 0; i < count; i++) {
        n = dsc_frame_encode(&frames[i].h, frames[i].body, frames[i].len, stream + pos,
                             sizeof stream - pos);
        REQUIRE(n == (int)(DSC_FRAME_HEADER_SIZE + frames[i].len));
        sent[i].header = frames[i].h;
        sent[i].header.body_len = (uint32_t)frames[i].len;
        pos += (size_t)n;
    }

    frame_rec_t got[8];
    static uint8_t bodies[8192];
    int found = reassemble(stream, pos, got, 8, bodies, sizeof bodies);
    CHECK_EQ_INT(found, count);
    for (int i = 0; i < found && i < count; i++) {
        CHECK(memcmp(&got[i].header, &sent[i].header, sizeof got[i].header) == 0 ||
              (got[i].header.opcode == sent[i].header.opcode &&
               got[i].header.request_id == sent[i].header.request_id &&
               got[i].header.body_len == sent[i].header.body_len &&
               got[i].header.status == sent[i].header.status &&
               got[i].header.flags == sent[i].header.flags));
        CHECK(got[i].header.body_len == 0 ||
              memcmp(got[i].body, frames[i].body, got[i].header.body_len) == 0);
    }
    /* The bodies decode by opcode. */
    dsc_hello_req_t hr;
    CHECK_EQ_INT(dsc_hello_req_decode(got[0].body, got[0].header.body_len, &hr), 0);
    dsc_get_req_t gr;
    CHECK_EQ_INT(dsc_get_req_decode(got[1].body, got[1].header.body_len, &gr), 0);
    CHECK_EQ_INT(gr.shard_id, 9);
    dsc_get_resp_t resp;
    CHECK_EQ_INT(dsc_get_resp_decode(got[4].body, got[4].header.body_len, &resp), 0);
    CHECK_EQ_INT(resp.data_len, 153);
    CHECK_EQ_INT(dsc_status_to_err(got[5].header.status), DSC_ENOTFOUND);

    /* Whole stream at once: frames back to back, the decoder consumes one header at a time. */
    size_t at = 0;
    int whole = 0;
    while (at < pos) {
        dsc_frame_header_t fh;
        REQUIRE(dsc_frame_header_decode(stream + at, pos - at, 0, &fh) == DSC_FRAME_HEADER_SIZE);
        CHECK(fh.request_id == sent[whole].header.request_id);
        at += DSC_FRAME_HEADER_SIZE + fh.body_len;
        whole++;
    }
    CHECK_EQ_INT(at, pos);
    CHECK_EQ_INT(whole, count);
}

/* ---- Mapping and names -------------------------------------------------------------------- */

static void test_mapping(void) {
    /* Every status maps to an error and back to itself, except BUSY (a kind of UNAVAILABLE to
     * the client). */
    for (uint32_t s = 0; s <= DSC_STATUS_CHANGED; s++) {
        int err = dsc_status_to_err(s);
        CHECK(s == DSC_STATUS_OK ? err == 0 : err < 0);
        CHECK(strcmp(dsc_status_name(s), "UNKNOWN") != 0);
        uint32_t back = dsc_err_to_status(err);
        if (s == DSC_STATUS_BUSY)
            CHECK_EQ_INT(back, DSC_STATUS_UNAVAILABLE);
        else
            CHECK_EQ_INT(back, s);
    }
    CHECK_EQ_INT(dsc_status_to_err(DSC_STATUS_NOT_FOUND), DSC_ENOTFOUND);
    CHECK_EQ_INT(dsc_status_to_err(DSC_STATUS_BAD_REQUEST), DSC_EBADREQ);
    CHECK_EQ_INT(dsc_status_to_err(DSC_STATUS_TOO_LARGE), DSC_ETOOLARGE);
    CHECK_EQ_INT(dsc_status_to_err(DSC_STATUS_UNAVAILABLE), DSC_EUNAVAIL);
    CHECK_EQ_INT(dsc_status_to_err(DSC_STATUS_BUSY), DSC_EUNAVAIL);
    CHECK_EQ_INT(dsc_status_to_err(DSC_STATUS_CORRUPT), DSC_ECORRUPT);
    CHECK_EQ_INT(dsc_status_to_err(DSC_STATUS_VERSION_MISMATCH), DSC_EVERSION);
    CHECK_EQ_INT(dsc_status_to_err(DSC_STATUS_UNAUTHORIZED), DSC_EUNAUTH);
    CHECK_EQ_INT(dsc_status_to_err(DSC_STATUS_INTERNAL), DSC_ESERVER);
    CHECK_EQ_INT(dsc_status_to_err(DSC_STATUS_UNSUPPORTED), DSC_ENOTSUP);
    CHECK_EQ_INT(dsc_status_to_err(DSC_STATUS_CHANGED), DSC_ECHANGED);
    CHECK_EQ_INT(dsc_status_to_err(12), DSC_ESERVER);
    CHECK_EQ_INT(dsc_status_to_err(UINT32_MAX), DSC_ESERVER);
    CHECK(strcmp(dsc_status_name(12), "UNKNOWN") == 0);
    CHECK(strcmp(dsc_status_name(DSC_STATUS_VERSION_MISMATCH), "VERSION_MISMATCH") == 0);

    /* Every error code maps to a defined non-OK status, and that status to an error. */
    static const int errs[] = {
#define ERR_(name, value, msg) DSC_##name,
        DSC_ERRNO_MAP(ERR_)
#undef ERR_
    };
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
        uint32_t s = dsc_err_to_status(errs[i]);
        CHECK(s != DSC_STATUS_OK && s <= DSC_STATUS_CHANGED);
        CHECK(dsc_status_to_err(s) < 0);
    }
    CHECK_EQ_INT(dsc_err_to_status(0), DSC_STATUS_OK);
    CHECK_EQ_INT(dsc_err_to_status(12), DSC_STATUS_OK);
    CHECK_EQ_INT(dsc_err_to_status(-99999), DSC_STATUS_INTERNAL);
    CHECK_EQ_INT(dsc_err_to_status(DSC_ENOENT), DSC_STATUS_NOT_FOUND);
    CHECK_EQ_INT(dsc_err_to_status(DSC_EBADFRAME), DSC_STATUS_BAD_REQUEST);
    CHECK_EQ_INT(dsc_err_to_status(DSC_ECHUNKSUM), DSC_STATUS_CORRUPT);
    CHECK_EQ_INT(dsc_err_to_status(DSC_ENOMEM), DSC_STATUS_BUSY);
    CHECK_EQ_INT(dsc_err_to_status(DSC_EIO), DSC_STATUS_INTERNAL);

    /* Opcodes. */
    static const uint32_t ops[] = {
        DSC_OP_HELLO,        DSC_OP_PING,      DSC_OP_LIST,   DSC_OP_MANIFEST, DSC_OP_GET,
        DSC_OP_STAT,         DSC_OP_MEMBERS,   DSC_OP_AUTH,   DSC_OP_WARM,     DSC_OP_EVICT,
        DSC_OP_RDMA_CONNECT, DSC_OP_RDMA_GET,  DSC_OP_REPORT, DSC_OP_POLICY,   DSC_OP_HINT,
        DSC_OP_MGET,         DSC_OP_PEER_READ, DSC_OP_RANGE};
    int known = 0;
    for (uint32_t op = 0; op < 300; op++) {
        int k = dsc_opcode_known(op);
        known += k;
        CHECK((strcmp(dsc_opcode_name(op), "UNKNOWN") != 0) == k);
    }
    CHECK_EQ_INT(known, (int)(sizeof ops / sizeof ops[0]));
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        CHECK(dsc_opcode_known(ops[i]));
    CHECK(strcmp(dsc_opcode_name(DSC_OP_RDMA_GET), "RDMA_GET") == 0);
    CHECK(strcmp(dsc_opcode_name(DSC_OP_MEMBERS), "MEMBERS") == 0);
    CHECK(strcmp(dsc_opcode_name(DSC_OP_PEER_READ), "PEER_READ") == 0);
}

/* PEER_READ (proto/peer.h): round trip and every bound of the decoder. */
static void test_peer_req(void) {
    dsc_peer_req_t req = {.dataset = {"imgs", 4},
                          .shard_id = 7,
                          .flags = DSC_PEER_FLAG_VERSION,
                          .version = 0x1122334455667788ull,
                          .offset = 1u << 20,
                          .length = DSC_PEER_READ_MAX};
    uint8_t buf[DSC_PEER_REQ_MAX_BODY + 8];
    int n = dsc_peer_req_encode(&req, buf, sizeof buf);
    CHECK_EQ_INT(n, 2 + 4 + 4 + 4 + 8 + 8 + 4);
    dsc_peer_req_t out;
    CHECK_EQ_INT(dsc_peer_req_decode(buf, (size_t)n, &out), 0);
    CHECK(out.dataset.len == 4 && memcmp(out.dataset.ptr, "imgs", 4) == 0);
    CHECK(out.shard_id == 7 && out.flags == 1 && out.version == req.version);
    CHECK(out.offset == req.offset && out.length == req.length);
    CHECK_EQ_INT(dsc_peer_req_encode(&req, buf, (size_t)n - 1), DSC_ENOSPC);
    CHECK_EQ_INT(dsc_peer_req_decode(buf, (size_t)n - 1, &out), DSC_EBADFRAME);
    dsc_peer_req_t bad = req;
    bad.length = 0;
    CHECK_EQ_INT(dsc_peer_req_encode(&bad, buf, sizeof buf), DSC_EINVAL);
    bad.length = DSC_PEER_READ_MAX + 1;
    CHECK_EQ_INT(dsc_peer_req_encode(&bad, buf, sizeof buf), DSC_EINVAL);
    bad = req;
    bad.flags = 2;
    CHECK_EQ_INT(dsc_peer_req_encode(&bad, buf, sizeof buf), DSC_EINVAL);
    bad = req;
    bad.flags = 0; /* a version without the flag */
    CHECK_EQ_INT(dsc_peer_req_encode(&bad, buf, sizeof buf), DSC_EINVAL);
    bad = req;
    bad.offset = (1ull << 63) - 10;
    bad.length = 11;
    CHECK_EQ_INT(dsc_peer_req_encode(&bad, buf, sizeof buf), DSC_EINVAL);
    bad.length = 10;
    CHECK(dsc_peer_req_encode(&bad, buf, sizeof buf) > 0);
    bad = req;
    bad.dataset = (dsc_str_t){"", 0};
    CHECK_EQ_INT(dsc_peer_req_encode(&bad, buf, sizeof buf), DSC_EINVAL);
    /* A length field of 0 on the wire is refused by the decoder too. */
    n = dsc_peer_req_encode(&req, buf, sizeof buf);
    memset(buf + n - 4, 0, 4);
    CHECK_EQ_INT(dsc_peer_req_decode(buf, (size_t)n, &out), DSC_EBADFRAME);
}

/* ---- Seed corpus: written from PROTOCOL.md by gen_seeds.py, decoded here ----------------- */

static int seed_body_ok(const dsc_frame_header_t *h, const uint8_t *body, size_t len) {
    int response = (h->flags & DSC_FLAG_RESPONSE) != 0;
    if (response && h->status != DSC_STATUS_OK)
        return len <= DSC_ERROR_MAX_MESSAGE;
    switch (h->opcode) {
    case DSC_OP_HELLO: {
        dsc_hello_req_t req;
        dsc_hello_resp_t resp;
        return response ? dsc_hello_resp_decode(body, len, &resp) == 0
                        : dsc_hello_req_decode(body, len, &req) == 0;
    }
    case DSC_OP_GET: {
        dsc_get_req_t req;
        dsc_get_resp_t resp;
        return response ? dsc_get_resp_decode(body, len, &resp) == 0
                        : dsc_get_req_decode(body, len, &req) == 0;
    }
    case DSC_OP_RDMA_GET: {
        dsc_rdma_get_req_t req;
        dsc_rdma_get_resp_t resp;
        /* An empty OK body answers a release-only request. */
        return response ? len == 0 || dsc_rdma_get_resp_decode(body, len, &resp) == 0
                        : dsc_rdma_get_req_decode(body, len, &req) == 0;
    }
    case DSC_OP_RDMA_CONNECT: {
        dsc_rdma_qp_info_t req;
        dsc_rdma_connect_resp_t resp;
        return response ? dsc_rdma_connect_resp_decode(body, len, &resp) == 0
                        : dsc_rdma_connect_req_decode(body, len, &req) == 0;
    }
    case DSC_OP_MANIFEST:
    case DSC_OP_STAT: {
        dsc_str_t name;
        return response ? len > 0 && body[0] == '{' : dsc_name_req_decode(body, len, &name) == 0;
    }
    case DSC_OP_WARM:
    case DSC_OP_EVICT: {
        dsc_shard_req_t req;
        return response ? len == 4 : dsc_shard_req_decode(body, len, &req) == 0;
    }
    case DSC_OP_POLICY: {
        dsc_policy_req_t req;
        return response ? len == 4 : dsc_policy_req_decode(body, len, &req) == 0;
    }
    case DSC_OP_LIST:
        return response ? len > 0 && body[0] == '[' : len == 0;
    case DSC_OP_MEMBERS:
        return response ? len > 0 && body[0] == '{' : len == 0;
    case DSC_OP_AUTH:
        return len == 32; /* a MAC either way (proto/auth.h) */
    case DSC_OP_REPORT: {
        dsc_report_req_t req;
        return response ? len == 0 : dsc_report_req_decode(body, len, &req) == 0;
    }
    case DSC_OP_HINT: {
        dsc_hint_req_t req;
        uint32_t accepted;
        return response ? dsc_hint_resp_decode(body, len, &accepted) == 0
                        : dsc_hint_req_decode(body, len, &req) == 0;
    }
    case DSC_OP_MGET: {
        dsc_mget_req_t req;
        dsc_mget_resp_t resp;
        return response ? dsc_mget_resp_decode(body, len, &resp) == 0
                        : dsc_mget_req_decode(body, len, &req) == 0;
    }
    case DSC_OP_RANGE: { /* the answer has MGET's layout */
        dsc_range_req_t req;
        dsc_mget_resp_t resp;
        return response ? dsc_mget_resp_decode(body, len, &resp) == 0
                        : dsc_range_req_decode(body, len, &req) == 0;
    }
    case DSC_OP_PEER_READ: {
        dsc_peer_req_t req;
        return response ? len >= 1 && len <= DSC_PEER_READ_MAX
                        : dsc_peer_req_decode(body, len, &req) == 0;
    }
    case DSC_OP_PING:
        return 1;
    default:
        return 0;
    }
}

static void test_seed_corpus(void) {
    char dir[4096];
    const char *src = getenv("DSC_SRC");
    if (src != NULL) {
        snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/fuzz_frame", src);
    } else {
        /* Run by hand: find the tree from this file's path. */
        const char *tail = strstr(__FILE__, "tests/unit/test_protocol.c");
        REQUIRE(tail != NULL);
        snprintf(dir, sizeof dir, "%.*stests/fuzz/corpus/fuzz_frame", (int)(tail - __FILE__),
                 __FILE__);
    }
    DIR *d = opendir(dir);
    REQUIRE(d != NULL);
    int seeds = 0, opcodes_seen[256] = {0};
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        size_t name_len = strlen(ent->d_name);
        if (name_len < 5 || strcmp(ent->d_name + name_len - 4, ".bin") != 0)
            continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, ent->d_name);
        static uint8_t data[1 << 16];
        FILE *f = fopen(path, "rb");
        REQUIRE(f != NULL);
        size_t len = fread(data, 1, sizeof data, f);
        fclose(f);
        size_t pos = 0;
        int frames = 0;
        while (pos < len) {
            dsc_frame_header_t h;
            int rc = dsc_frame_header_decode(data + pos, len - pos, 0, &h);
            if (rc != DSC_FRAME_HEADER_SIZE || h.body_len > len - pos - DSC_FRAME_HEADER_SIZE) {
                fprintf(stderr, "seed %s: bad frame at %zu (%d)\n", ent->d_name, pos, rc);
                CHECK(0);
                break;
            }
            pos += DSC_FRAME_HEADER_SIZE;
            if (!seed_body_ok(&h, data + pos, h.body_len)) {
                fprintf(stderr, "seed %s: %s body rejected\n", ent->d_name,
                        dsc_opcode_name(h.opcode));
                CHECK(0);
            }
            opcodes_seen[h.opcode] = 1;
            pos += h.body_len;
            frames++;
        }
        CHECK(frames >= 1);
        seeds++;
    }
    closedir(d);
    CHECK(seeds >= 11);
    for (uint32_t op = 0; op < 256; op++)
        if (dsc_opcode_known(op) && !opcodes_seen[op]) {
            fprintf(stderr, "no seed for opcode %s\n", dsc_opcode_name(op));
            CHECK(0);
        }
}

int main(void) {
    test_header();
    test_hello();
    test_names();
    test_get_req();
    test_peer_req();
    test_get_resp();
    test_frames();
    test_pipeline();
    test_mapping();
    test_seed_corpus();
    return TEST_DONE();
}
