/* RANGE request codec and sub-chunk extraction (proto/PROTOCOL.md "RANGE"). No I/O, no
 * allocation; the decoder is bounds-checked and safe on hostile input. */
#include "range.h"
#include "wire.h"

#include <string.h>

static int head_valid(dsc_str_t dataset, uint32_t flags, uint64_t version, uint32_t count) {
    return dsc_mget_head_valid(dataset, flags, version, count, DSC_RANGE_MAX_ENTRIES);
}

void dsc_range_span_at(const dsc_range_item_t *item, uint32_t k, dsc_sample_span_t *out) {
    if (item->raw != NULL) {
        const uint8_t *p = item->raw + (size_t)k * DSC_RANGE_SPAN_SIZE;
        out->first = dsc_load_u32(p);
        out->count = dsc_load_u32(p + 4);
    } else {
        *out = item->spans[k];
    }
}

/* An item's spans: non-empty, increasing, neither overlapping nor touching, within 2^32. */
static int spans_valid(const dsc_range_item_t *item) {
    uint64_t end = 0;
    for (uint32_t k = 0; k < item->range_count; k++) {
        dsc_sample_span_t s;
        dsc_range_span_at(item, k, &s);
        if (s.count == 0 || (k > 0 && (uint64_t)s.first <= end) ||
            (uint64_t)s.first + s.count > UINT32_MAX)
            return 0;
        end = (uint64_t)s.first + s.count;
    }
    return 1;
}

uint64_t dsc_range_item_samples(const dsc_range_item_t *item) {
    uint64_t n = 0;
    for (uint32_t k = 0; k < item->range_count; k++) {
        dsc_sample_span_t s;
        dsc_range_span_at(item, k, &s);
        n += s.count;
    }
    return n;
}

int dsc_range_req_encode(const dsc_range_req_t *req, uint8_t *out, size_t cap) {
    if (req == NULL || req->items == NULL ||
        !head_valid(req->dataset, req->flags, req->version, req->count))
        return DSC_EINVAL;
    uint64_t total = 0;
    for (uint32_t i = 0; i < req->count; i++) {
        const dsc_range_item_t *it = &req->items[i];
        if (it->range_count == 0 || (it->spans == NULL && it->raw == NULL) || !spans_valid(it))
            return DSC_EINVAL;
        total += it->range_count;
    }
    if (total > DSC_RANGE_MAX_RANGES)
        return DSC_EINVAL;
    dsc_wr_t w;
    dsc_wr_init(&w, out, cap);
    dsc_wr_u16(&w, req->dataset.len);
    dsc_wr_bytes(&w, req->dataset.ptr, req->dataset.len);
    dsc_wr_u32(&w, req->flags);
    if (req->flags & DSC_GET_FLAG_VERSION)
        dsc_wr_u64(&w, req->version);
    dsc_wr_u32(&w, req->count);
    for (uint32_t i = 0; i < req->count; i++) {
        const dsc_range_item_t *it = &req->items[i];
        dsc_wr_u32(&w, it->shard_id);
        dsc_wr_u32(&w, it->chunk);
        dsc_wr_u32(&w, it->range_count);
        for (uint32_t k = 0; k < it->range_count; k++) {
            dsc_sample_span_t s;
            dsc_range_span_at(it, k, &s);
            dsc_wr_u32(&w, s.first);
            dsc_wr_u32(&w, s.count);
        }
    }
    return w.bad ? DSC_ENOSPC : (int)w.pos;
}

/* Reads the item at *pos of raw (len bytes) without judging its spans. */
static int item_read(const uint8_t *raw, size_t len, size_t *pos, dsc_range_item_t *out) {
    if (len - *pos < DSC_RANGE_ITEM_SIZE)
        return 0;
    const uint8_t *p = raw + *pos;
    dsc_range_item_t it = {.shard_id = dsc_load_u32(p),
                           .chunk = dsc_load_u32(p + 4),
                           .range_count = dsc_load_u32(p + 8)};
    if (it.range_count > DSC_RANGE_MAX_RANGES ||
        (len - *pos - DSC_RANGE_ITEM_SIZE) / DSC_RANGE_SPAN_SIZE < it.range_count)
        return 0;
    it.raw = p + DSC_RANGE_ITEM_SIZE;
    *pos += DSC_RANGE_ITEM_SIZE + (size_t)it.range_count * DSC_RANGE_SPAN_SIZE;
    *out = it;
    return 1;
}

int dsc_range_req_decode(const uint8_t *body, size_t len, dsc_range_req_t *out) {
    if (body == NULL && len > 0)
        return DSC_EBADFRAME;
    dsc_rd_t r;
    dsc_rd_init(&r, body, len);
    dsc_range_req_t req = {0};
    uint16_t name_len = dsc_rd_u16(&r);
    const uint8_t *name = dsc_rd_bytes(&r, name_len);
    req.dataset = (dsc_str_t){name != NULL ? (const char *)name : NULL, name_len};
    req.flags = dsc_rd_u32(&r);
    req.version = (req.flags & DSC_GET_FLAG_VERSION) ? dsc_rd_u64(&r) : 0;
    req.count = dsc_rd_u32(&r);
    if (r.bad || !head_valid(req.dataset, req.flags, req.version, req.count))
        return DSC_EBADFRAME;
    req.raw = body + r.pos;
    req.raw_len = len - r.pos;
    size_t pos = 0;
    uint64_t total = 0;
    for (uint32_t i = 0; i < req.count; i++) {
        dsc_range_item_t it;
        if (!item_read(req.raw, req.raw_len, &pos, &it) || it.range_count == 0 || !spans_valid(&it))
            return DSC_EBADFRAME;
        total += it.range_count;
        if (total > DSC_RANGE_MAX_RANGES)
            return DSC_EBADFRAME;
    }
    if (pos != req.raw_len)
        return DSC_EBADFRAME;
    req.ranges = (uint32_t)total;
    *out = req;
    return 0;
}

int dsc_range_item_next(const dsc_range_req_t *req, size_t *pos, dsc_range_item_t *out) {
    if (req->raw == NULL || *pos >= req->raw_len)
        return 0;
    return item_read(req->raw, req->raw_len, pos, out);
}

int64_t dsc_range_extract(const dsc_schema_t *schema, const dsc_chunk_layout_t *layout,
                          const dsc_range_item_t *item, uint8_t *out, size_t cap) {
    uint64_t n = 0;
    for (uint32_t k = 0; k < item->range_count; k++) {
        dsc_sample_span_t s;
        dsc_range_span_at(item, k, &s);
        if ((uint64_t)s.first + s.count > layout->samples)
            return DSC_ERANGE;
        n += s.count;
    }
    /* The size first: every product below is bounded by the whole chunk's (<= 256 MiB). */
    uint64_t size = n * schema->sample_bytes;
    for (uint32_t f = 0; f < schema->field_count; f++) {
        const dsc_field_t *fd = &schema->fields[f];
        if (!fd->variable)
            continue;
        size += (n + 1) * 8;
        for (uint32_t k = 0; k < item->range_count; k++) {
            dsc_sample_span_t s;
            dsc_range_span_at(item, k, &s);
            uint64_t rows = dsc_chunk_offset(layout, f, s.first + s.count) -
                            dsc_chunk_offset(layout, f, s.first);
            size += rows * fd->row_bytes;
        }
    }
    if (size > DSC_CHUNK_MAX_RAW)
        return DSC_EOVERFLOW;
    if (out == NULL)
        return (int64_t)size;
    if (cap < size)
        return DSC_ENOSPC;
    uint8_t *p = out;
    for (uint32_t f = 0; f < schema->field_count; f++) {
        const dsc_field_t *fd = &schema->fields[f];
        if (fd->variable)
            continue;
        for (uint32_t k = 0; k < item->range_count; k++) {
            dsc_sample_span_t s;
            dsc_range_span_at(item, k, &s);
            size_t bytes = (size_t)s.count * fd->sample_bytes;
            if (bytes > 0)
                memcpy(p, layout->fields[f].values + (size_t)s.first * fd->sample_bytes, bytes);
            p += bytes;
        }
    }
    for (uint32_t f = 0; f < schema->field_count; f++) {
        const dsc_field_t *fd = &schema->fields[f];
        if (!fd->variable)
            continue;
        uint64_t rows = 0;
        dsc_store_u64(p, 0);
        p += 8;
        for (uint32_t k = 0; k < item->range_count; k++) {
            dsc_sample_span_t s;
            dsc_range_span_at(item, k, &s);
            uint64_t base = dsc_chunk_offset(layout, f, s.first);
            for (uint32_t j = 1; j <= s.count; j++) {
                dsc_store_u64(p, rows + dsc_chunk_offset(layout, f, s.first + j) - base);
                p += 8;
            }
            rows += dsc_chunk_offset(layout, f, s.first + s.count) - base;
        }
        for (uint32_t k = 0; k < item->range_count; k++) {
            dsc_sample_span_t s;
            dsc_range_span_at(item, k, &s);
            uint64_t from = dsc_chunk_offset(layout, f, s.first);
            size_t bytes =
                (size_t)((dsc_chunk_offset(layout, f, s.first + s.count) - from) * fd->row_bytes);
            if (bytes > 0)
                memcpy(p, layout->fields[f].values + from * fd->row_bytes, bytes);
            p += bytes;
        }
    }
    return (int64_t)(p - out);
}
