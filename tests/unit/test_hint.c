/* HINT codec (proto/hint.h): round trip with the layout of PROTOCOL.md, every documented
 * rejection, every truncation, and every single-byte change of a valid body (decoded or refused,
 * never read out of bounds). */
#include "hint.h"
#include "testlib.h"

#include <string.h>

static const dsc_hint_range_t ranges[3] = {
    {.shard_id = 7, .first_chunk = 2, .chunk_count = 3, .due_ms = 0},
    {.shard_id = 0, .first_chunk = 0, .chunk_count = 1, .due_ms = 250},
    {.shard_id = 0xFFFFFFFEu, .first_chunk = 0xFFFFFFC0u, .chunk_count = 64, .due_ms = 600000},
};

static dsc_hint_req_t sample(void) {
    dsc_hint_req_t r = {.flags = 0,
                        .hinter = 0x1122334455667788ull,
                        .dataset = {"c4-en", 5},
                        .range_count = 3,
                        .ranges = ranges};
    return r;
}

static void test_round_trip(void) {
    dsc_hint_req_t r = sample();
    uint8_t buf[256];
    int n = dsc_hint_req_encode(&r, buf, sizeof buf);
    REQUIRE(n == 4 + 8 + 2 + 5 + 4 + 3 * DSC_HINT_RANGE_SIZE);
    /* u32 flags, u64 hinter, str dataset, u32 count, then 16-byte ranges. */
    CHECK_EQ_INT(buf[4], 0x88);
    CHECK_EQ_INT(buf[12], 5);
    CHECK(memcmp(buf + 14, "c4-en", 5) == 0);
    CHECK_EQ_INT(buf[19], 3);
    CHECK_EQ_INT(buf[23], 7); /* range 0 shard */
    CHECK_EQ_INT(buf[27], 2); /* first chunk */
    CHECK_EQ_INT(buf[31], 3); /* chunk count */
    dsc_hint_req_t d;
    CHECK_EQ_INT(dsc_hint_req_decode(buf, (size_t)n, &d), 0);
    CHECK(d.hinter == r.hinter && d.range_count == 3 && d.dataset.len == 5 &&
          memcmp(d.dataset.ptr, "c4-en", 5) == 0 && d.ranges == NULL);
    for (uint32_t i = 0; i < 3; i++) {
        dsc_hint_range_t hr;
        dsc_hint_range_at(&d, i, &hr);
        CHECK(memcmp(&hr, &ranges[i], sizeof hr) == 0);
    }
    for (int cut = 0; cut < n; cut++)
        CHECK_EQ_INT(dsc_hint_req_decode(buf, (size_t)cut, &d), DSC_EBADFRAME);
    uint8_t small[256];
    for (int cap = 0; cap < n; cap++)
        CHECK_EQ_INT(dsc_hint_req_encode(&r, small, (size_t)cap), DSC_ENOSPC);
    uint8_t longer[257];
    memcpy(longer, buf, (size_t)n);
    longer[n] = 0;
    CHECK_EQ_INT(dsc_hint_req_decode(longer, (size_t)n + 1, &d), DSC_EBADFRAME);
    /* Every single-byte change: refused, or decoded into a body that re-encodes identically. */
    for (int i = 0; i < n; i++)
        for (int v = 0; v < 256; v += 17) {
            uint8_t m[256];
            memcpy(m, buf, (size_t)n);
            m[i] ^= (uint8_t)(v | 1);
            dsc_hint_req_t x;
            int rc = dsc_hint_req_decode(m, (size_t)n, &x);
            if (rc == 0) {
                dsc_hint_range_t rs[3];
                for (uint32_t k = 0; k < x.range_count && k < 3; k++)
                    dsc_hint_range_at(&x, k, &rs[k]);
                x.ranges = rs;
                uint8_t again[256];
                CHECK(x.range_count == 3 && dsc_hint_req_encode(&x, again, sizeof again) == n &&
                      memcmp(again, m, (size_t)n) == 0);
            } else {
                CHECK_EQ_INT(rc, DSC_EBADFRAME);
            }
        }
}

/* Each out-of-range value is refused by the encoder (DSC_EINVAL) and, written by hand, by the
 * decoder (DSC_EBADFRAME). */
static void test_rejections(void) {
    uint8_t buf[256];
    dsc_hint_req_t d;
    dsc_hint_range_t bad[1];
    dsc_hint_req_t r = sample();
    r.flags = 1;
    CHECK_EQ_INT(dsc_hint_req_encode(&r, buf, sizeof buf), DSC_EINVAL);
    r = sample();
    r.dataset = (dsc_str_t){"", 0};
    CHECK_EQ_INT(dsc_hint_req_encode(&r, buf, sizeof buf), DSC_EINVAL);
    r.dataset = (dsc_str_t){"a\0b", 3};
    CHECK_EQ_INT(dsc_hint_req_encode(&r, buf, sizeof buf), DSC_EINVAL);
    /* No ranges: it only names the connection's loader. */
    r = sample();
    r.range_count = 0;
    r.ranges = NULL;
    int n0 = dsc_hint_req_encode(&r, buf, sizeof buf);
    CHECK_EQ_INT(n0, 4 + 8 + 2 + 5 + 4);
    CHECK_EQ_INT(dsc_hint_req_decode(buf, (size_t)n0, &d), 0);
    CHECK(d.range_count == 0 && d.hinter == r.hinter);
    r = sample();
    r.range_count = DSC_HINT_MAX_RANGES + 1;
    CHECK_EQ_INT(dsc_hint_req_encode(&r, buf, sizeof buf), DSC_EINVAL);
    const dsc_hint_range_t cases[] = {
        {.chunk_count = 0},
        {.chunk_count = DSC_HINT_MAX_RANGE_CHUNKS + 1},
        {.first_chunk = 0xFFFFFFFFu, .chunk_count = 2},
        {.chunk_count = 1, .due_ms = DSC_HINT_MAX_DUE_MS + 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        r = sample();
        bad[0] = cases[i];
        r.ranges = bad;
        r.range_count = 1;
        CHECK_EQ_INT(dsc_hint_req_encode(&r, buf, sizeof buf), DSC_EINVAL);
        /* The same body written with a valid range, then the range patched in. */
        dsc_hint_range_t ok = {.chunk_count = 1};
        r.ranges = &ok;
        int n = dsc_hint_req_encode(&r, buf, sizeof buf);
        REQUIRE(n > 0);
        uint8_t *p = buf + n - DSC_HINT_RANGE_SIZE;
        const uint32_t v[4] = {cases[i].shard_id, cases[i].first_chunk, cases[i].chunk_count,
                               cases[i].due_ms};
        for (int k = 0; k < 4; k++)
            for (int b = 0; b < 4; b++)
                p[k * 4 + b] = (uint8_t)(v[k] >> (8 * b));
        memset(&d, 0x5A, sizeof d);
        dsc_hint_req_t before = d;
        CHECK_EQ_INT(dsc_hint_req_decode(buf, (size_t)n, &d), DSC_EBADFRAME);
        CHECK(memcmp(&d, &before, sizeof d) == 0);
    }
    /* A count that claims more ranges than the body holds. */
    r = sample();
    int n = dsc_hint_req_encode(&r, buf, sizeof buf);
    buf[16 + 5] = 0xFF;
    CHECK_EQ_INT(dsc_hint_req_decode(buf, (size_t)n, &d), DSC_EBADFRAME);
    CHECK_EQ_INT(dsc_hint_req_decode(NULL, 0, &d), DSC_EBADFRAME);
}

static void test_answer(void) {
    uint8_t buf[8];
    uint32_t a = 0;
    CHECK_EQ_INT(dsc_hint_resp_encode(12345, buf, sizeof buf), DSC_HINT_RESP_SIZE);
    CHECK_EQ_INT(dsc_hint_resp_decode(buf, DSC_HINT_RESP_SIZE, &a), 0);
    CHECK_EQ_INT(a, 12345);
    CHECK_EQ_INT(dsc_hint_resp_encode(1, buf, 3), DSC_ENOSPC);
    CHECK_EQ_INT(dsc_hint_resp_decode(buf, 3, &a), DSC_EBADFRAME);
    CHECK_EQ_INT(dsc_hint_resp_decode(buf, 5, &a), DSC_EBADFRAME);
    /* The long answer (DSC_FEATURE_HINT_SHARE): accepted, trimmed, share, held. */
    uint8_t lb[DSC_HINT_RESP_SHARE_SIZE];
    dsc_hint_resp_t r = {
        .accepted = 3, .trimmed = 1000, .share_bytes = 1ull << 33, .held_bytes = 12345};
    CHECK_EQ_INT(dsc_hint_resp_encode_share(&r, lb, sizeof lb), DSC_HINT_RESP_SHARE_SIZE);
    CHECK_EQ_INT(dsc_hint_resp_encode_share(&r, lb, sizeof lb - 1), DSC_ENOSPC);
    dsc_hint_resp_t d = {0};
    CHECK_EQ_INT(dsc_hint_resp_decode_share(lb, sizeof lb, &d), 0);
    CHECK_EQ_INT(d.has_share, 1);
    CHECK_EQ_INT(d.accepted, 3);
    CHECK_EQ_INT(d.trimmed, 1000);
    CHECK(d.share_bytes == 1ull << 33 && d.held_bytes == 12345);
    CHECK_EQ_INT(dsc_hint_resp_decode(lb, sizeof lb, &a), 0); /* an old caller: accepted */
    CHECK_EQ_INT(a, 3);
    CHECK_EQ_INT(dsc_hint_resp_decode_share(buf, DSC_HINT_RESP_SIZE, &d), 0);
    CHECK_EQ_INT(d.has_share, 0);
    CHECK_EQ_INT(d.accepted, 12345);
    r.trimmed = DSC_HINT_MAX_RANGES; /* more ranges than a HINT holds */
    dsc_hint_resp_encode_share(&r, lb, sizeof lb);
    CHECK_EQ_INT(dsc_hint_resp_decode_share(lb, sizeof lb, &d), DSC_EBADFRAME);
    CHECK_EQ_INT(strcmp(dsc_opcode_name(DSC_OP_HINT), "HINT"), 0);
    CHECK_EQ_INT(dsc_opcode_known(DSC_OP_HINT), 1);
}

int main(void) {
    test_round_trip();
    test_rejections();
    test_answer();
    return TEST_DONE();
}
