/* libFuzzer target for the RANGE request body and the sub-chunk extraction (proto/range.h): the
 * decoder never crashes, what it accepts satisfies every documented bound and re-encodes to the
 * same bytes, and every accepted item cut out of a fixed test chunk (a fixed and a variable
 * field) is either refused as out of range or a sub-chunk whose layout checks and whose samples
 * are the ones named. */
#include "range.h"
#include "wire.h"

#include <stdint.h>
#include <string.h>

#define FUZZ_ASSERT(cond)                                                                          \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

#define CHUNK_SAMPLES 40
static dsc_range_item_t items[DSC_RANGE_MAX_ENTRIES];
static dsc_sample_span_t spans[DSC_RANGE_MAX_RANGES];
static uint8_t out[DSC_RANGE_MAX_REQ_BODY];
static dsc_schema_t schema;
static uint8_t chunk[CHUNK_SAMPLES * 3 + (CHUNK_SAMPLES + 1) * 8 + CHUNK_SAMPLES * 8 * 4];
static size_t chunk_len;
static dsc_chunk_layout_t layout;
static uint8_t sub[sizeof chunk];

/* Sample k: fixed field "a" u8[3] = (k, k, k); variable field "t" i32[] = k % 8 rows of k. */
static void setup(void) {
    memset(&schema, 0, sizeof schema);
    schema.field_count = 2;
    strcpy(schema.fields[0].name, "a");
    schema.fields[0].dtype = DSC_DTYPE_U8;
    schema.fields[0].ndim = 1;
    schema.fields[0].shape[0] = 3;
    strcpy(schema.fields[1].name, "t");
    schema.fields[1].dtype = DSC_DTYPE_I32;
    schema.fields[1].ndim = 1;
    schema.fields[1].shape[0] = DSC_DIM_VARIABLE;
    FUZZ_ASSERT(dsc_schema_finish(&schema) == 0);
    uint8_t *p = chunk;
    for (uint32_t k = 0; k < CHUNK_SAMPLES; k++, p += 3)
        memset(p, (int)k, 3);
    uint64_t rows = 0;
    for (uint32_t k = 0; k <= CHUNK_SAMPLES; k++, p += 8) {
        dsc_store_u64(p, rows);
        rows += k % 8;
    }
    for (uint32_t k = 0; k < CHUNK_SAMPLES; k++)
        for (uint32_t r = 0; r < k % 8; r++, p += 4)
            dsc_store_u32(p, k);
    chunk_len = (size_t)(p - chunk);
    FUZZ_ASSERT(dsc_chunk_layout(&schema, CHUNK_SAMPLES, chunk, chunk_len, &layout) == 0);
}

static void check_extract(const dsc_range_item_t *item) {
    int64_t size = dsc_range_extract(&schema, &layout, item, NULL, 0);
    dsc_sample_span_t last;
    dsc_range_span_at(item, item->range_count - 1, &last);
    if ((uint64_t)last.first + last.count > CHUNK_SAMPLES) {
        FUZZ_ASSERT(size == DSC_ERANGE);
        return;
    }
    FUZZ_ASSERT(size > 0 && (size_t)size <= sizeof sub);
    if (size > 1)
        FUZZ_ASSERT(dsc_range_extract(&schema, &layout, item, sub, (size_t)size - 1) == DSC_ENOSPC);
    FUZZ_ASSERT(dsc_range_extract(&schema, &layout, item, sub, sizeof sub) == size);
    uint64_t n = dsc_range_item_samples(item);
    dsc_chunk_layout_t got;
    FUZZ_ASSERT(dsc_chunk_layout(&schema, (uint32_t)n, sub, (uint64_t)size, &got) == 0);
    uint32_t j = 0;
    for (uint32_t s = 0; s < item->range_count; s++) {
        dsc_sample_span_t sp;
        dsc_range_span_at(item, s, &sp);
        for (uint32_t k = sp.first; k < sp.first + sp.count; k++, j++) {
            const uint8_t *data;
            uint64_t bytes;
            FUZZ_ASSERT(dsc_chunk_sample(&got, &schema, 0, j, &data, &bytes) == 0);
            FUZZ_ASSERT(bytes == 3 && data[0] == (uint8_t)k && data[2] == (uint8_t)k);
            FUZZ_ASSERT(dsc_chunk_sample(&got, &schema, 1, j, &data, &bytes) == 0);
            FUZZ_ASSERT(bytes == 4 * (k % 8));
            for (uint64_t r = 0; r < bytes / 4; r++)
                FUZZ_ASSERT(dsc_load_u32(data + 4 * r) == k);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (schema.field_count == 0)
        setup();
    dsc_range_req_t req;
    memset(&req, 0xA5, sizeof req);
    dsc_range_req_t before = req;
    int rc = dsc_range_req_decode(data, size, &req);
    if (rc < 0) {
        FUZZ_ASSERT(rc == DSC_EBADFRAME);
        FUZZ_ASSERT(memcmp(&req, &before, sizeof req) == 0); /* untouched on error */
        return 0;
    }
    FUZZ_ASSERT(size <= DSC_RANGE_MAX_REQ_BODY);
    FUZZ_ASSERT(req.dataset.len >= 1 && req.dataset.len < DSC_MAX_NAME);
    FUZZ_ASSERT(memchr(req.dataset.ptr, '\0', req.dataset.len) == NULL);
    FUZZ_ASSERT((req.flags & ~DSC_GET_FLAG_VERSION) == 0);
    FUZZ_ASSERT((req.flags & DSC_GET_FLAG_VERSION) || req.version == 0);
    FUZZ_ASSERT(req.count >= 1 && req.count <= DSC_RANGE_MAX_ENTRIES);
    FUZZ_ASSERT(req.ranges >= req.count && req.ranges <= DSC_RANGE_MAX_RANGES);
    FUZZ_ASSERT(size == DSC_RANGE_REQ_SIZE(req.flags, req.dataset.len, req.count, req.ranges));
    size_t pos = 0;
    uint32_t used = 0;
    for (uint32_t i = 0; i < req.count; i++) {
        dsc_range_item_t it;
        FUZZ_ASSERT(dsc_range_item_next(&req, &pos, &it) == 1);
        FUZZ_ASSERT(it.range_count >= 1 && used + it.range_count <= req.ranges);
        uint64_t end = 0;
        for (uint32_t k = 0; k < it.range_count; k++) {
            dsc_range_span_at(&it, k, &spans[used + k]);
            FUZZ_ASSERT(spans[used + k].count >= 1 && (k == 0 || spans[used + k].first > end));
            end = (uint64_t)spans[used + k].first + spans[used + k].count;
            FUZZ_ASSERT(end <= UINT32_MAX);
        }
        check_extract(&it);
        items[i] = (dsc_range_item_t){.shard_id = it.shard_id,
                                      .chunk = it.chunk,
                                      .range_count = it.range_count,
                                      .spans = &spans[used]};
        used += it.range_count;
    }
    dsc_range_item_t extra;
    FUZZ_ASSERT(dsc_range_item_next(&req, &pos, &extra) == 0 && used == req.ranges);
    dsc_range_req_t again = req;
    again.items = items;
    again.raw = NULL;
    int n = dsc_range_req_encode(&again, out, sizeof out);
    FUZZ_ASSERT(n >= 0 && (size_t)n == size && memcmp(out, data, size) == 0);
    FUZZ_ASSERT(dsc_range_req_encode(&again, out, size - 1) == DSC_ENOSPC);
    return 0;
}
