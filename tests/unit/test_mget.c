/* MGET codec (proto/mget.h): round trips with the layout of PROTOCOL.md, every documented
 * rejection, every truncation, and every single-byte change of valid bodies (decoded into
 * something that re-encodes identically, or refused; never read out of bounds). */
#include "mget.h"
#include "testlib.h"

#include <string.h>

static const dsc_mget_item_t items[3] = {{7, 2}, {0, 0}, {0xFFFFFFFFu, 0xFFFFFFFFu}};

static dsc_mget_req_t sample_req(void) {
    dsc_mget_req_t r = {.dataset = {"c4-en", 5}, .count = 3, .items = items};
    return r;
}

static void test_request(void) {
    dsc_mget_req_t r = sample_req();
    uint8_t buf[256];
    int n = dsc_mget_req_encode(&r, buf, sizeof buf);
    REQUIRE(n == 2 + 5 + 4 + 4 + 3 * DSC_MGET_ITEM_SIZE);
    CHECK_EQ_INT(n, (int)DSC_MGET_REQ_HEAD(0, 5) + 3 * DSC_MGET_ITEM_SIZE);
    /* str dataset, u32 flags, u32 count, then (u32 shard, u32 chunk) items. */
    CHECK_EQ_INT(buf[0], 5);
    CHECK(memcmp(buf + 2, "c4-en", 5) == 0);
    CHECK_EQ_INT(buf[7], 0);  /* flags */
    CHECK_EQ_INT(buf[11], 3); /* count */
    CHECK_EQ_INT(buf[15], 7); /* item 0 shard */
    CHECK_EQ_INT(buf[19], 2); /* item 0 chunk */
    dsc_mget_req_t d;
    CHECK_EQ_INT(dsc_mget_req_decode(buf, (size_t)n, &d), 0);
    CHECK(d.count == 3 && d.flags == 0 && d.version == 0 && d.items == NULL && d.dataset.len == 5 &&
          memcmp(d.dataset.ptr, "c4-en", 5) == 0);
    for (uint32_t i = 0; i < 3; i++) {
        dsc_mget_item_t it;
        dsc_mget_item_at(&d, i, &it);
        CHECK(it.shard_id == items[i].shard_id && it.chunk == items[i].chunk);
    }
    for (int cut = 0; cut < n; cut++)
        CHECK_EQ_INT(dsc_mget_req_decode(buf, (size_t)cut, &d), DSC_EBADFRAME);
    for (int cap = 0; cap < n; cap++)
        CHECK_EQ_INT(dsc_mget_req_encode(&r, buf + 128, (size_t)cap), DSC_ENOSPC);
    uint8_t longer[257];
    memcpy(longer, buf, (size_t)n);
    longer[n] = 0;
    CHECK_EQ_INT(dsc_mget_req_decode(longer, (size_t)n + 1, &d), DSC_EBADFRAME);
    for (int i = 0; i < n; i++)
        for (int v = 1; v < 256; v += 17) {
            uint8_t m[256];
            memcpy(m, buf, (size_t)n);
            m[i] ^= (uint8_t)v;
            if (dsc_mget_req_decode(m, (size_t)n, &d) < 0)
                continue;
            dsc_mget_item_t again[3];
            for (uint32_t k = 0; k < d.count && k < 3; k++)
                dsc_mget_item_at(&d, k, &again[k]);
            d.items = again;
            uint8_t re[256];
            CHECK(dsc_mget_req_encode(&d, re, sizeof re) == n && memcmp(re, m, (size_t)n) == 0);
        }

    /* With a version: 8 more bytes after the flags. */
    r.flags = DSC_GET_FLAG_VERSION;
    r.version = 0x1122334455667788ull;
    n = dsc_mget_req_encode(&r, buf, sizeof buf);
    REQUIRE(n == (int)DSC_MGET_REQ_HEAD(DSC_GET_FLAG_VERSION, 5) + 3 * DSC_MGET_ITEM_SIZE);
    CHECK_EQ_INT(buf[11], 0x88);
    CHECK_EQ_INT(dsc_mget_req_decode(buf, (size_t)n, &d), 0);
    CHECK(d.version == r.version && d.count == 3);

    /* Rejections, both ways. */
    struct {
        const char *what;
        dsc_mget_req_t req;
    } bad[] = {
        {"empty dataset", {.dataset = {"", 0}, .count = 1, .items = items}},
        {"long dataset",
         {.dataset = {"0123456789012345678901234567890123456789012345678901234567890123", 64},
          .count = 1,
          .items = items}},
        {"NUL in name", {.dataset = {"a\0b", 3}, .count = 1, .items = items}},
        {"unknown flag", {.dataset = {"a", 1}, .flags = 2, .count = 1, .items = items}},
        {"version without flag", {.dataset = {"a", 1}, .version = 5, .count = 1, .items = items}},
        {"zero entries", {.dataset = {"a", 1}, .count = 0, .items = items}},
        {"too many entries",
         {.dataset = {"a", 1}, .count = DSC_MGET_MAX_ENTRIES + 1, .items = items}},
        {"no items", {.dataset = {"a", 1}, .count = 1, .items = NULL}},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (dsc_mget_req_encode(&bad[i].req, buf, sizeof buf) != DSC_EINVAL) {
            fprintf(stderr, "encoded: %s\n", bad[i].what);
            CHECK(0);
        }
    }
    /* Hand-made bodies: zero entries, a count over the bound, a count larger than the items. */
    uint8_t hand[64] = {1, 0, 'a', 0, 0, 0, 0, 0, 0, 0, 0};
    CHECK_EQ_INT(dsc_mget_req_decode(hand, 11, &d), DSC_EBADFRAME); /* count 0 */
    hand[7] = (DSC_MGET_MAX_ENTRIES + 1) & 0xFF;
    hand[8] = (DSC_MGET_MAX_ENTRIES + 1) >> 8;
    CHECK_EQ_INT(dsc_mget_req_decode(hand, 11 + 8, &d), DSC_EBADFRAME);
    hand[7] = 0xFF;
    hand[8] = hand[9] = hand[10] = 0xFF; /* 4 billion entries claimed */
    CHECK_EQ_INT(dsc_mget_req_decode(hand, sizeof hand, &d), DSC_EBADFRAME);
    hand[7] = 2;
    hand[8] = hand[9] = hand[10] = 0;
    CHECK_EQ_INT(dsc_mget_req_decode(hand, 11 + 8, &d), DSC_EBADFRAME); /* one item of two */
    CHECK_EQ_INT(dsc_mget_req_decode(hand, 11 + 16, &d), 0);
    CHECK_EQ_INT(dsc_mget_req_decode(NULL, 0, &d), DSC_EBADFRAME);

    /* The largest request fits DSC_MGET_MAX_REQ_BODY and dscached's 64 KiB bodies. */
    static dsc_mget_item_t many[DSC_MGET_MAX_ENTRIES];
    static uint8_t big[DSC_MGET_MAX_REQ_BODY];
    dsc_mget_req_t m = {
        .dataset = {"012345678901234567890123456789012345678901234567890123456789012", 63},
        .flags = DSC_GET_FLAG_VERSION,
        .version = 1,
        .count = DSC_MGET_MAX_ENTRIES,
        .items = many};
    CHECK_EQ_INT(dsc_mget_req_encode(&m, big, sizeof big), (int)DSC_MGET_MAX_REQ_BODY);
    CHECK(DSC_MGET_MAX_REQ_BODY <= 65536);
}

static void test_answer(void) {
    static const uint8_t stored_a[5] = {1, 2, 3, 4, 5}, stored_c[3] = {9, 8, 7};
    uint32_t status[3] = {DSC_STATUS_OK, DSC_STATUS_NOT_FOUND, DSC_STATUS_OK};
    dsc_chunk_entry_t e[3] = {
        {.offset = 4096,
         .first_sample = 0,
         .stored_len = 5,
         .raw_len = 5,
         .sample_count = 1,
         .codec = DSC_CODEC_RAW,
         .stored_checksum = 11,
         .raw_checksum = 11},
        {.offset = 99, .stored_len = 1234}, /* ignored: not OK */
        {.offset = 64,
         .first_sample = 3,
         .stored_len = 3,
         .raw_len = 40,
         .sample_count = 2,
         .codec = DSC_CODEC_LZ4,
         .stored_checksum = 12,
         .raw_checksum = 13},
    };
    uint8_t body[DSC_MGET_RESP_PREFIX(3) + 8];
    int n = dsc_mget_resp_prefix_encode(status, e, 3, body, sizeof body);
    REQUIRE(n == (int)DSC_MGET_RESP_PREFIX(3));
    CHECK_EQ_INT(body[0], 3);
    CHECK_EQ_INT(body[8 + DSC_MGET_RECORD_SIZE], DSC_STATUS_NOT_FOUND);
    for (int i = 0; i < DSC_CHUNK_ENTRY_SIZE; i++)
        CHECK_EQ_INT(body[8 + DSC_MGET_RECORD_SIZE + 8 + i], 0);
    memcpy(body + n, stored_a, 5);
    memcpy(body + n + 5, stored_c, 3);
    size_t len = (size_t)n + 8;
    dsc_mget_resp_t r;
    CHECK_EQ_INT(dsc_mget_resp_decode(body, len, &r), 0);
    CHECK(r.count == 3 && r.ok == 2 && r.data_len == 8 && r.data == body + n);
    dsc_chunk_entry_t got;
    CHECK(dsc_mget_resp_record(&r, 0, &got) == DSC_STATUS_OK && got.offset == 4096);
    CHECK(dsc_mget_resp_record(&r, 1, &got) == DSC_STATUS_NOT_FOUND && got.stored_len == 0);
    CHECK(dsc_mget_resp_record(&r, 2, &got) == DSC_STATUS_OK && got.raw_len == 40);
    CHECK(dsc_mget_resp_record(&r, 3, &got) == DSC_ERANGE);
    /* Streaming: the prefix, then the data. */
    CHECK_EQ_INT(dsc_mget_resp_prefix_size(body, 8), n);
    CHECK_EQ_INT(dsc_mget_resp_prefix_size(body, 7), DSC_EBADFRAME);
    dsc_mget_resp_t p;
    CHECK_EQ_INT(dsc_mget_resp_prefix_decode(body, (size_t)n, len, &p), 0);
    CHECK(p.data == NULL && p.data_len == 8 && p.ok == 2);
    CHECK_EQ_INT(dsc_mget_resp_prefix_decode(body, (size_t)n, len + 1, &p), DSC_EBADFRAME);
    CHECK_EQ_INT(dsc_mget_resp_prefix_decode(body, (size_t)n - 1, len, &p), DSC_EBADFRAME);
    for (size_t cut = 0; cut < len; cut++)
        CHECK_EQ_INT(dsc_mget_resp_decode(body, cut, &r), DSC_EBADFRAME);
    /* Every single-byte change: refused, or decoded into what re-encodes identically. */
    for (size_t i = 0; i < (size_t)n; i++)
        for (int v = 1; v < 256; v += 15) {
            uint8_t m[sizeof body];
            memcpy(m, body, len);
            m[i] ^= (uint8_t)v;
            if (dsc_mget_resp_decode(m, len, &r) < 0)
                continue;
            uint32_t st[3];
            dsc_chunk_entry_t en[3];
            REQUIRE(r.count == 3);
            for (uint32_t k = 0; k < 3; k++)
                st[k] = (uint32_t)dsc_mget_resp_record(&r, k, &en[k]);
            uint8_t re[sizeof body];
            CHECK(dsc_mget_resp_prefix_encode(st, en, 3, re, sizeof re) == n &&
                  memcmp(re, m, (size_t)n) == 0);
        }
    /* Documented rejections. */
    uint8_t m[sizeof body];
    memcpy(m, body, len);
    m[4] = 1; /* reserved head word */
    CHECK_EQ_INT(dsc_mget_resp_decode(m, len, &r), DSC_EBADFRAME);
    memcpy(m, body, len);
    m[8 + 4] = 1; /* reserved record word */
    CHECK_EQ_INT(dsc_mget_resp_decode(m, len, &r), DSC_EBADFRAME);
    memcpy(m, body, len);
    m[8 + DSC_MGET_RECORD_SIZE + 8] = 1; /* a failed record with a non-zero entry */
    CHECK_EQ_INT(dsc_mget_resp_decode(m, len, &r), DSC_EBADFRAME);
    memcpy(m, body, len);
    m[8 + 8 + 29] = 1; /* entry padding */
    CHECK_EQ_INT(dsc_mget_resp_decode(m, len, &r), DSC_EBADFRAME);
    memcpy(m, body, len);
    m[8 + 8 + 28] = 7; /* unknown codec */
    CHECK_EQ_INT(dsc_mget_resp_decode(m, len, &r), DSC_EBADFRAME);
    memcpy(m, body, len);
    m[8 + 8 + 19] = 0xFF; /* stored_len 4 GB: the sum exceeds the data */
    CHECK_EQ_INT(dsc_mget_resp_decode(m, len, &r), DSC_EBADFRAME);
    memcpy(m, body, len);
    m[0] = 0; /* count 0 */
    CHECK_EQ_INT(dsc_mget_resp_decode(m, len, &r), DSC_EBADFRAME);
    /* Encoder refusals. */
    CHECK_EQ_INT(dsc_mget_resp_prefix_encode(status, e, 0, m, sizeof m), DSC_EINVAL);
    CHECK_EQ_INT(dsc_mget_resp_prefix_encode(status, e, DSC_MGET_MAX_ENTRIES + 1, m, sizeof m),
                 DSC_EINVAL);
    CHECK_EQ_INT(dsc_mget_resp_prefix_encode(status, e, 3, m, (size_t)n - 1), DSC_ENOSPC);
    e[0].stored_len = 4; /* raw with stored != raw */
    CHECK_EQ_INT(dsc_mget_resp_prefix_encode(status, e, 3, m, sizeof m), DSC_EINVAL);
    /* Every record failed: no data at all. */
    uint32_t none[2] = {DSC_STATUS_NOT_FOUND, DSC_STATUS_CORRUPT};
    n = dsc_mget_resp_prefix_encode(none, e, 2, m, sizeof m);
    REQUIRE(n == (int)DSC_MGET_RESP_PREFIX(2));
    CHECK_EQ_INT(dsc_mget_resp_decode(m, (size_t)n, &r), 0);
    CHECK(r.ok == 0 && r.data_len == 0);
}

static void test_names(void) {
    CHECK_EQ_INT(strcmp(dsc_opcode_name(DSC_OP_MGET), "MGET"), 0);
    CHECK_EQ_INT(dsc_opcode_known(DSC_OP_MGET), 1);
    CHECK_EQ_INT(DSC_OP_MGET, 11);
    CHECK_EQ_INT(DSC_FEATURE_MGET, 8);
}

int main(void) {
    test_request();
    test_answer();
    test_names();
    return TEST_DONE();
}
