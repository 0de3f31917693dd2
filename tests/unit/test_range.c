/* RANGE codec and sub-chunk extraction (proto/range.h): the layout of PROTOCOL.md, every
 * documented rejection, every truncation and every single-byte change of a valid body (refused,
 * or decoded into something that re-encodes identically), and sub-chunks of a chunk with a
 * fixed and a variable field that are the samples asked, with offsets rebased. */
#include "range.h"
#include "testlib.h"
#include "wire.h"

#include <string.h>

static const dsc_sample_span_t spans0[2] = {{1, 2}, {5, 1}};
static const dsc_sample_span_t spans1[1] = {{0, 40}};

static dsc_range_req_t sample_req(dsc_range_item_t *items) {
    items[0] = (dsc_range_item_t){.shard_id = 7, .chunk = 2, .range_count = 2, .spans = spans0};
    items[1] = (dsc_range_item_t){.shard_id = 0, .chunk = 0, .range_count = 1, .spans = spans1};
    dsc_range_req_t r = {.dataset = {"c4-en", 5}, .count = 2, .items = items};
    return r;
}

static int encode_one(const dsc_sample_span_t *spans, uint32_t n, uint8_t *buf, size_t cap) {
    dsc_range_item_t it = {.shard_id = 1, .chunk = 1, .range_count = n, .spans = spans};
    dsc_range_req_t r = {.dataset = {"x", 1}, .count = 1, .items = &it};
    return dsc_range_req_encode(&r, buf, cap);
}

static void test_request(void) {
    dsc_range_item_t items[2];
    dsc_range_req_t r = sample_req(items);
    uint8_t buf[256];
    int n = dsc_range_req_encode(&r, buf, sizeof buf);
    REQUIRE(n == (int)DSC_RANGE_REQ_SIZE(0, 5, 2, 3));
    CHECK_EQ_INT(n, 2 + 5 + 4 + 4 + 2 * 12 + 3 * 8);
    CHECK_EQ_INT(buf[11], 2); /* count */
    CHECK_EQ_INT(buf[15], 7); /* item 0 shard */
    CHECK_EQ_INT(buf[19], 2); /* item 0 chunk */
    CHECK_EQ_INT(buf[23], 2); /* item 0 range_count */
    CHECK_EQ_INT(buf[27], 1); /* first */
    CHECK_EQ_INT(buf[31], 2); /* count */
    dsc_range_req_t d;
    CHECK_EQ_INT(dsc_range_req_decode(buf, (size_t)n, &d), 0);
    CHECK(d.count == 2 && d.ranges == 3 && d.items == NULL && d.dataset.len == 5);
    size_t pos = 0;
    dsc_range_item_t it;
    CHECK_EQ_INT(dsc_range_item_next(&d, &pos, &it), 1);
    CHECK(it.shard_id == 7 && it.chunk == 2 && it.range_count == 2);
    CHECK_EQ_INT((int)dsc_range_item_samples(&it), 3);
    dsc_sample_span_t s;
    dsc_range_span_at(&it, 1, &s);
    CHECK(s.first == 5 && s.count == 1);
    CHECK_EQ_INT(dsc_range_item_next(&d, &pos, &it), 1);
    CHECK(it.shard_id == 0 && it.range_count == 1 && dsc_range_item_samples(&it) == 40);
    CHECK_EQ_INT(dsc_range_item_next(&d, &pos, &it), 0);
    for (int cut = 0; cut < n; cut++)
        CHECK_EQ_INT(dsc_range_req_decode(buf, (size_t)cut, &d), DSC_EBADFRAME);
    for (int cap = 0; cap < n; cap++)
        CHECK_EQ_INT(dsc_range_req_encode(&r, buf + 128, (size_t)cap), DSC_ENOSPC);
    uint8_t longer[257];
    memcpy(longer, buf, (size_t)n);
    longer[n] = 0;
    CHECK_EQ_INT(dsc_range_req_decode(longer, (size_t)n + 1, &d), DSC_EBADFRAME);
    for (int i = 0; i < n; i++)
        for (int v = 1; v < 256; v += 17) {
            uint8_t m[256];
            memcpy(m, buf, (size_t)n);
            m[i] ^= (uint8_t)v;
            if (dsc_range_req_decode(m, (size_t)n, &d) < 0)
                continue;
            /* Accepted: re-encodes to the same bytes (its items read back through raw). */
            dsc_range_item_t again[DSC_RANGE_MAX_ENTRIES];
            size_t p = 0;
            for (uint32_t k = 0; k < d.count && k < DSC_RANGE_MAX_ENTRIES; k++)
                CHECK_EQ_INT(dsc_range_item_next(&d, &p, &again[k]), 1);
            d.items = again;
            uint8_t re[256];
            CHECK(dsc_range_req_encode(&d, re, sizeof re) == n && memcmp(re, m, (size_t)n) == 0);
        }
}

static void test_rejections(void) {
    uint8_t buf[DSC_RANGE_MAX_REQ_BODY + 64];
    dsc_sample_span_t bad[3];
    bad[0] = (dsc_sample_span_t){3, 0}; /* empty */
    CHECK_EQ_INT(encode_one(bad, 1, buf, sizeof buf), DSC_EINVAL);
    bad[0] = (dsc_sample_span_t){3, 4}; /* overlapping */
    bad[1] = (dsc_sample_span_t){5, 1};
    CHECK_EQ_INT(encode_one(bad, 2, buf, sizeof buf), DSC_EINVAL);
    bad[1] = (dsc_sample_span_t){7, 1}; /* touching: one span */
    CHECK_EQ_INT(encode_one(bad, 2, buf, sizeof buf), DSC_EINVAL);
    bad[1] = (dsc_sample_span_t){1, 1}; /* decreasing */
    CHECK_EQ_INT(encode_one(bad, 2, buf, sizeof buf), DSC_EINVAL);
    bad[0] = (dsc_sample_span_t){0xFFFFFFF0u, 0x20}; /* past 2^32 - 1 */
    CHECK_EQ_INT(encode_one(bad, 1, buf, sizeof buf), DSC_EINVAL);
    CHECK_EQ_INT(encode_one(bad, 0, buf, sizeof buf), DSC_EINVAL); /* no span */
    bad[0] = (dsc_sample_span_t){0xFFFFFFFEu, 1};                  /* the last sample: fine */
    CHECK(encode_one(bad, 1, buf, sizeof buf) > 0);
    /* 4096 spans in all are allowed, 4097 are not. */
    static dsc_sample_span_t many[DSC_RANGE_MAX_RANGES + 1];
    for (uint32_t k = 0; k <= DSC_RANGE_MAX_RANGES; k++)
        many[k] = (dsc_sample_span_t){2 * k, 1};
    int n = encode_one(many, DSC_RANGE_MAX_RANGES, buf, sizeof buf);
    CHECK(n > 0 && (size_t)n <= DSC_RANGE_MAX_REQ_BODY);
    dsc_range_req_t d;
    CHECK_EQ_INT(dsc_range_req_decode(buf, (size_t)n, &d), 0);
    CHECK_EQ_INT(encode_one(many, DSC_RANGE_MAX_RANGES + 1, buf, sizeof buf), DSC_EINVAL);
    /* The same 4097 spans written by hand: refused by the decoder. */
    n = encode_one(many, DSC_RANGE_MAX_RANGES, buf, sizeof buf);
    dsc_store_u32(buf + 2 + 1 + 4 + 4 + 8, DSC_RANGE_MAX_RANGES + 1);
    dsc_store_u32(buf + n, 2 * DSC_RANGE_MAX_RANGES);
    dsc_store_u32(buf + n + 4, 1);
    CHECK_EQ_INT(dsc_range_req_decode(buf, (size_t)n + 8, &d), DSC_EBADFRAME);
}

/* A chunk of 6 samples: "a" u8[2] = (k, k + 100), "t" i32[] = k rows of value k. */
static void test_extract(void) {
    dsc_schema_t schema;
    memset(&schema, 0, sizeof schema);
    schema.field_count = 2;
    strcpy(schema.fields[0].name, "a");
    schema.fields[0].dtype = DSC_DTYPE_U8;
    schema.fields[0].ndim = 1;
    schema.fields[0].shape[0] = 2;
    strcpy(schema.fields[1].name, "t");
    schema.fields[1].dtype = DSC_DTYPE_I32;
    schema.fields[1].ndim = 1;
    schema.fields[1].shape[0] = DSC_DIM_VARIABLE;
    REQUIRE(dsc_schema_finish(&schema) == 0);
    uint8_t chunk[512], *p = chunk;
    for (uint32_t k = 0; k < 6; k++) {
        *p++ = (uint8_t)k;
        *p++ = (uint8_t)(k + 100);
    }
    uint64_t rows = 0;
    for (uint32_t k = 0; k <= 6; k++, p += 8) {
        dsc_store_u64(p, rows);
        rows += k;
    }
    for (uint32_t k = 0; k < 6; k++)
        for (uint32_t r = 0; r < k; r++, p += 4)
            dsc_store_u32(p, k);
    dsc_chunk_layout_t layout;
    REQUIRE(dsc_chunk_layout(&schema, 6, chunk, (uint64_t)(p - chunk), &layout) == 0);
    dsc_sample_span_t spans[2] = {{1, 2}, {5, 1}}; /* samples 1, 2, 5 */
    dsc_range_item_t it = {.range_count = 2, .spans = spans};
    int64_t size = dsc_range_extract(&schema, &layout, &it, NULL, 0);
    /* 3 x 2 fixed bytes, 4 offsets, 1 + 2 + 5 rows of 4 bytes. */
    CHECK_EQ_INT((int)size, 6 + 4 * 8 + 8 * 4);
    uint8_t sub[512];
    CHECK_EQ_INT((int)dsc_range_extract(&schema, &layout, &it, sub, (size_t)size - 1), DSC_ENOSPC);
    CHECK_EQ_INT((int)dsc_range_extract(&schema, &layout, &it, sub, sizeof sub), (int)size);
    static const uint8_t fixed[6] = {1, 101, 2, 102, 5, 105};
    CHECK(memcmp(sub, fixed, 6) == 0);
    CHECK(dsc_load_u64(sub + 6) == 0 && dsc_load_u64(sub + 14) == 1 &&
          dsc_load_u64(sub + 22) == 3 && dsc_load_u64(sub + 30) == 8);
    static const uint32_t vals[8] = {1, 2, 2, 5, 5, 5, 5, 5};
    for (int k = 0; k < 8; k++)
        CHECK_EQ_INT((int)dsc_load_u32(sub + 38 + 4 * k), (int)vals[k]);
    dsc_chunk_layout_t got;
    CHECK_EQ_INT(dsc_chunk_layout(&schema, 3, sub, (uint64_t)size, &got), 0);
    dsc_sample_span_t past = {5, 2};
    dsc_range_item_t out_of_range = {.range_count = 1, .spans = &past};
    CHECK_EQ_INT((int)dsc_range_extract(&schema, &layout, &out_of_range, NULL, 0), DSC_ERANGE);
}

static void test_names(void) {
    CHECK_EQ_INT(strcmp(dsc_opcode_name(DSC_OP_RANGE), "RANGE"), 0);
    CHECK_EQ_INT(dsc_opcode_known(DSC_OP_RANGE), 1);
    CHECK_EQ_INT(DSC_OP_RANGE, 12);
    CHECK_EQ_INT(DSC_FEATURE_RANGE, 0x20);
}

int main(void) {
    test_request();
    test_rejections();
    test_extract();
    test_names();
    return TEST_DONE();
}
