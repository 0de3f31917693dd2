/* REPORT codec (proto/report.h): round trip, every documented rejection, every truncation and
 * every single-byte change of a valid body (decoded or refused, never read out of bounds). */
#include "report.h"
#include "testlib.h"

#include <string.h>

static dsc_str_t str(const char *s) {
    dsc_str_t out = {s, (uint16_t)strlen(s)};
    return out;
}

static dsc_report_req_t sample(void) {
    dsc_report_req_t r = {
        .flags = 0,
        .job = str("llama-7b"),
        .dataset = str("c4-en"),
        .rank = 3,
        .world_size = 8,
        .stall_ppm = 412000,
        .samples_per_s = 51234,
        .bytes_per_s = 420000000,
        .bottleneck = DSC_BOTTLENECK_DECODE,
        .verdict = str("raise decode_threads from 2 to 4"),
    };
    return r;
}

static void test_round_trip(void) {
    dsc_report_req_t r = sample();
    uint8_t buf[DSC_REPORT_MAX_BODY];
    int n = dsc_report_req_encode(&r, buf, sizeof buf);
    REQUIRE(n > 0 && n <= DSC_REPORT_MAX_BODY);
    /* Layout of PROTOCOL.md: u32 flags, str job, str dataset, u32 rank ... */
    CHECK_EQ_INT(buf[4], 8);
    CHECK(memcmp(buf + 6, "llama-7b", 8) == 0);
    dsc_report_req_t d;
    CHECK_EQ_INT(dsc_report_req_decode(buf, (size_t)n, &d), 0);
    CHECK_EQ_INT(d.rank, 3);
    CHECK_EQ_INT(d.world_size, 8);
    CHECK_EQ_INT(d.stall_ppm, 412000);
    CHECK_EQ_INT(d.samples_per_s, 51234);
    CHECK_EQ_INT(d.bytes_per_s, 420000000);
    CHECK_EQ_INT(d.bottleneck, DSC_BOTTLENECK_DECODE);
    CHECK(d.job.len == 8 && memcmp(d.job.ptr, "llama-7b", 8) == 0);
    CHECK(d.verdict.len == r.verdict.len &&
          memcmp(d.verdict.ptr, r.verdict.ptr, d.verdict.len) == 0);
    /* Every prefix is refused; every shorter output buffer too. */
    for (int cut = 0; cut < n; cut++) {
        CHECK_EQ_INT(dsc_report_req_decode(buf, (size_t)cut, &d), DSC_EBADFRAME);
        CHECK_EQ_INT(dsc_report_req_encode(&r, buf + 0, 0) < 0, 1);
    }
    uint8_t small[DSC_REPORT_MAX_BODY];
    for (int cap = 0; cap < n; cap++)
        CHECK_EQ_INT(dsc_report_req_encode(&r, small, (size_t)cap), DSC_ENOSPC);
    /* A trailing byte is refused. */
    uint8_t longer[DSC_REPORT_MAX_BODY + 1];
    memcpy(longer, buf, (size_t)n);
    longer[n] = 0;
    CHECK_EQ_INT(dsc_report_req_decode(longer, (size_t)n + 1, &d), DSC_EBADFRAME);
    /* Every byte changed to every value: decoded consistently or refused, *out untouched then. */
    for (int i = 0; i < n; i++) {
        uint8_t orig = buf[i];
        for (int v = 0; v < 256; v++) {
            buf[i] = (uint8_t)v;
            dsc_report_req_t out;
            memset(&out, 0x5A, sizeof out);
            int rc = dsc_report_req_decode(buf, (size_t)n, &out);
            if (rc == 0) {
                CHECK(out.rank < out.world_size && out.stall_ppm <= DSC_REPORT_STALL_ONE);
                CHECK(out.bottleneck < DSC_BOTTLENECK_COUNT);
            } else {
                CHECK_EQ_INT(rc, DSC_EBADFRAME);
                CHECK_EQ_INT(out.rank, 0x5A5A5A5A);
            }
        }
        buf[i] = orig;
    }
}

static void test_rejections(void) {
    uint8_t buf[DSC_REPORT_MAX_BODY + 64];
    dsc_report_req_t r;
    dsc_report_req_t d;
#define REFUSED(mutation)                                                                          \
    do {                                                                                           \
        r = sample();                                                                              \
        mutation;                                                                                  \
        CHECK_EQ_INT(dsc_report_req_encode(&r, buf, sizeof buf), DSC_EINVAL);                      \
    } while (0)
    REFUSED(r.flags = 2); /* only DSC_REPORT_FLAG_FINISHED is defined */
    REFUSED(r.job = str(""));
    REFUSED(r.job = str("has space"));
    REFUSED(r.job = str("quote\"label"));
    REFUSED(r.job = str("0123456789012345678901234567890123456789012345678901234567890123"));
    REFUSED(r.dataset = str(""));
    REFUSED(r.world_size = 0);
    REFUSED(r.rank = 8);
    REFUSED(r.stall_ppm = DSC_REPORT_STALL_ONE + 1);
    REFUSED(r.bottleneck = DSC_BOTTLENECK_COUNT);
    REFUSED(r.verdict.len = 300);
    /* The same values arriving on the wire are refused by the decoder: build them by hand. */
    r = sample();
    int n = dsc_report_req_encode(&r, buf, sizeof buf);
    REQUIRE(n > 0);
    size_t off_flags = 0, off_rank = 4 + 2 + 8 + 2 + 5, off_stage = off_rank + 12 + 16;
    buf[off_flags] = 2;
    CHECK_EQ_INT(dsc_report_req_decode(buf, (size_t)n, &d), DSC_EBADFRAME);
    buf[off_flags] = DSC_REPORT_FLAG_FINISHED; /* the last report of a closing loader */
    CHECK_EQ_INT(dsc_report_req_decode(buf, (size_t)n, &d), 0);
    CHECK(d.flags == DSC_REPORT_FLAG_FINISHED);
    buf[off_flags] = 0;
    buf[off_rank] = 8; /* rank == world_size */
    CHECK_EQ_INT(dsc_report_req_decode(buf, (size_t)n, &d), DSC_EBADFRAME);
    buf[off_rank] = 3;
    buf[off_stage] = DSC_BOTTLENECK_COUNT;
    CHECK_EQ_INT(dsc_report_req_decode(buf, (size_t)n, &d), DSC_EBADFRAME);
    buf[off_stage] = DSC_BOTTLENECK_DECODE;
    CHECK_EQ_INT(dsc_report_req_decode(buf, (size_t)n, &d), 0);
    buf[6] = ' '; /* a space in the job name */
    CHECK_EQ_INT(dsc_report_req_decode(buf, (size_t)n, &d), DSC_EBADFRAME);
    CHECK_EQ_INT(dsc_report_req_decode(NULL, 4, &d), DSC_EBADFRAME);
    /* An empty verdict is fine. */
    r = sample();
    r.verdict.ptr = NULL;
    r.verdict.len = 0;
    n = dsc_report_req_encode(&r, buf, sizeof buf);
    CHECK(n > 0);
    CHECK_EQ_INT(dsc_report_req_decode(buf, (size_t)n, &d), 0);
    CHECK_EQ_INT(d.verdict.len, 0);
}

static void test_names(void) {
    CHECK(strcmp(dsc_bottleneck_name(DSC_BOTTLENECK_NONE), "none") == 0);
    CHECK(strcmp(dsc_bottleneck_name(DSC_BOTTLENECK_SERVER), "server") == 0);
    CHECK(strcmp(dsc_bottleneck_name(DSC_BOTTLENECK_INFLIGHT), "inflight") == 0);
    CHECK(strcmp(dsc_bottleneck_name(DSC_BOTTLENECK_STORAGE), "storage") == 0);
    CHECK_EQ_INT(DSC_BOTTLENECK_STORAGE, 9); /* on the wire: append only */
    CHECK(dsc_bottleneck_name(-1) == NULL);
    CHECK(dsc_bottleneck_name(DSC_BOTTLENECK_COUNT) == NULL);
    for (int b = 0; b < DSC_BOTTLENECK_COUNT; b++)
        for (int c = b + 1; c < DSC_BOTTLENECK_COUNT; c++)
            CHECK(strcmp(dsc_bottleneck_name(b), dsc_bottleneck_name(c)) != 0);
    CHECK(strcmp(dsc_opcode_name(DSC_OP_REPORT), "REPORT") == 0);
    CHECK(dsc_opcode_known(DSC_OP_REPORT));
    CHECK(dsc_report_job_valid("a", 1));
    CHECK(!dsc_report_job_valid("a\nb", 3));
}

/* The answer's figures: round trip, an empty body (older server), short bodies refused, later
 * fields after the first DSC_REPORT_RESP_SIZE bytes ignored, flags must be 0. */
static void test_answer(void) {
    dsc_report_resp_t r = {.backing_pool = 32,
                           .hits = 1,
                           .misses = 2,
                           .backing_bytes = 3,
                           .backing_busy_us = 4,
                           .backing_wait_us = 5,
                           .backing_rate = 6,
                           .store_capacity = UINT64_C(1) << 40,
                           .backing_latency_us = 7,
                           .backing_running = 8};
    uint8_t buf[DSC_REPORT_RESP_SIZE + 8];
    memset(buf, 0xEE, sizeof buf);
    CHECK_EQ_INT(dsc_report_resp_encode(&r, buf, sizeof buf), DSC_REPORT_RESP_SIZE);
    CHECK_EQ_INT(dsc_report_resp_encode(&r, buf, DSC_REPORT_RESP_SIZE - 1), DSC_ENOSPC);
    dsc_report_resp_t d;
    memset(&d, 0, sizeof d);
    CHECK_EQ_INT(dsc_report_resp_decode(buf, DSC_REPORT_RESP_SIZE, &d), 1);
    CHECK(memcmp(&d, &r, sizeof d) == 0);
    memset(&d, 0, sizeof d);
    CHECK_EQ_INT(dsc_report_resp_decode(buf, sizeof buf, &d), 1); /* trailing: a later version */
    CHECK(d.store_capacity == r.store_capacity && d.backing_running == 8);
    CHECK_EQ_INT(dsc_report_resp_decode(buf, 0, &d), 0);
    CHECK_EQ_INT(dsc_report_resp_decode(NULL, 0, &d), 0);
    for (size_t n = 1; n < DSC_REPORT_RESP_SIZE; n++)
        CHECK_EQ_INT(dsc_report_resp_decode(buf, n, &d), DSC_EBADFRAME);
    buf[0] = 1; /* flags */
    CHECK_EQ_INT(dsc_report_resp_decode(buf, DSC_REPORT_RESP_SIZE, &d), DSC_EBADFRAME);
}

/* The straggler trailer (PROTOCOL.md): round trip, a cut trailer refused, bytes after a whole one
 * ignored (a later version's), a body without it still decoded (an older loader), and stripped
 * it is exactly the body without it (what goes to an older server). */
static void test_hedge_trailer(void) {
    dsc_report_req_t r = sample();
    uint8_t plain[DSC_REPORT_MAX_BODY];
    int base = dsc_report_req_encode(&r, plain, sizeof plain);
    REQUIRE(base > 0);
    r.has_hedge = 1;
    r.hedge = (dsc_report_hedge_t){.flags = DSC_REPORT_HEDGE_SLOW,
                                   .hedges = 12,
                                   .hedges_won = 9,
                                   .hedge_bytes = 1u << 20,
                                   .wasted_bytes = 4096,
                                   .slow_marks = 2,
                                   .excused = 5};
    uint8_t buf[DSC_REPORT_MAX_BODY + 8];
    int n = dsc_report_req_encode(&r, buf, DSC_REPORT_MAX_BODY);
    REQUIRE(n == base + DSC_REPORT_HEDGE_SIZE);
    CHECK(n <= DSC_REPORT_MAX_BODY);
    CHECK(memcmp(buf, plain, (size_t)base) == 0); /* appended: the rest is unchanged */
    CHECK_EQ_INT(dsc_report_req_strip_hedge((size_t)n), base);
    dsc_report_req_t d;
    CHECK_EQ_INT(dsc_report_req_decode(buf, (size_t)n, &d), 0);
    CHECK_EQ_INT(d.has_hedge, 1);
    CHECK_EQ_INT(d.hedge.flags, DSC_REPORT_HEDGE_SLOW);
    CHECK_EQ_INT(d.hedge.hedges, 12);
    CHECK_EQ_INT(d.hedge.hedges_won, 9);
    CHECK_EQ_INT(d.hedge.hedge_bytes, 1u << 20);
    CHECK_EQ_INT(d.hedge.wasted_bytes, 4096);
    CHECK_EQ_INT(d.hedge.slow_marks, 2);
    CHECK_EQ_INT(d.hedge.excused, 5);
    CHECK_EQ_INT(d.rank, 3);
    CHECK(d.verdict.len == r.verdict.len);
    /* Layout: u32 flags then six u64, little-endian, after the verdict. */
    CHECK_EQ_INT(buf[base], DSC_REPORT_HEDGE_SLOW);
    CHECK_EQ_INT(buf[base + 4], 12);
    CHECK_EQ_INT(buf[base + 4 + 8 * 5], 5);
    /* A cut trailer is refused; without it the body decodes, has_hedge 0. */
    for (int cut = base + 1; cut < n; cut++)
        CHECK_EQ_INT(dsc_report_req_decode(buf, (size_t)cut, &d), DSC_EBADFRAME);
    CHECK_EQ_INT(dsc_report_req_decode(buf, (size_t)base, &d), 0);
    CHECK_EQ_INT(d.has_hedge, 0);
    CHECK_EQ_INT(d.hedge.hedges, 0);
    /* Bytes after a whole trailer: a later version's fields, ignored. */
    memset(buf + n, 0xEE, 8);
    CHECK_EQ_INT(dsc_report_req_decode(buf, (size_t)n + 8, &d), 0);
    CHECK_EQ_INT(d.hedge.slow_marks, 2);
    /* The trailer's unknown flag bits are a later version's too. */
    buf[base + 3] = 0x80;
    CHECK_EQ_INT(dsc_report_req_decode(buf, (size_t)n, &d), 0);
}

int main(void) {
    test_hedge_trailer();
    test_answer();
    test_round_trip();
    test_rejections();
    test_names();
    return TEST_DONE();
}
