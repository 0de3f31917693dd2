/* HINT request and answer codec (proto/PROTOCOL.md "HINT request"). No I/O, no allocation; the
 * decoder is bounds-checked and safe on hostile input. */
#include "hint.h"
#include "wire.h"

#include <string.h>

static int range_valid(const dsc_hint_range_t *r) {
    return r->chunk_count >= 1 && r->chunk_count <= DSC_HINT_MAX_RANGE_CHUNKS &&
           (uint64_t)r->first_chunk + r->chunk_count <= (1ull << 32) &&
           r->due_ms <= DSC_HINT_MAX_DUE_MS;
}

static int head_valid(uint32_t flags, dsc_str_t dataset, uint32_t range_count) {
    return flags == 0 && dataset.ptr != NULL && dataset.len >= 1 && dataset.len < DSC_MAX_NAME &&
           memchr(dataset.ptr, '\0', dataset.len) == NULL && range_count <= DSC_HINT_MAX_RANGES;
}

static void range_read(const uint8_t *p, dsc_hint_range_t *out) {
    out->shard_id = dsc_load_u32(p);
    out->first_chunk = dsc_load_u32(p + 4);
    out->chunk_count = dsc_load_u32(p + 8);
    out->due_ms = dsc_load_u32(p + 12);
}

int dsc_hint_req_encode(const dsc_hint_req_t *req, uint8_t *out, size_t cap) {
    if (req == NULL || (req->ranges == NULL && req->range_count > 0) ||
        !head_valid(req->flags, req->dataset, req->range_count))
        return DSC_EINVAL;
    for (uint32_t i = 0; i < req->range_count; i++)
        if (!range_valid(&req->ranges[i]))
            return DSC_EINVAL;
    dsc_wr_t w;
    dsc_wr_init(&w, out, cap);
    dsc_wr_u32(&w, req->flags);
    dsc_wr_u64(&w, req->hinter);
    dsc_wr_u16(&w, req->dataset.len);
    dsc_wr_bytes(&w, req->dataset.ptr, req->dataset.len);
    dsc_wr_u32(&w, req->range_count);
    for (uint32_t i = 0; i < req->range_count; i++) {
        const dsc_hint_range_t *r = &req->ranges[i];
        dsc_wr_u32(&w, r->shard_id);
        dsc_wr_u32(&w, r->first_chunk);
        dsc_wr_u32(&w, r->chunk_count);
        dsc_wr_u32(&w, r->due_ms);
    }
    return w.bad ? DSC_ENOSPC : (int)w.pos;
}

int dsc_hint_req_decode(const uint8_t *body, size_t len, dsc_hint_req_t *out) {
    if (body == NULL && len > 0)
        return DSC_EBADFRAME;
    dsc_rd_t r;
    dsc_rd_init(&r, body, len);
    dsc_hint_req_t req = {0};
    req.flags = dsc_rd_u32(&r);
    req.hinter = dsc_rd_u64(&r);
    uint16_t name_len = dsc_rd_u16(&r);
    const uint8_t *name = dsc_rd_bytes(&r, name_len);
    req.dataset = (dsc_str_t){name != NULL ? (const char *)name : NULL, name_len};
    req.range_count = dsc_rd_u32(&r);
    if (r.bad || !head_valid(req.flags, req.dataset, req.range_count))
        return DSC_EBADFRAME;
    size_t raw_len = (size_t)req.range_count * DSC_HINT_RANGE_SIZE;
    req.raw = dsc_rd_bytes(&r, raw_len);
    if (r.bad || req.raw == NULL || r.pos != r.len)
        return DSC_EBADFRAME;
    for (uint32_t i = 0; i < req.range_count; i++) {
        dsc_hint_range_t hr;
        range_read(req.raw + (size_t)i * DSC_HINT_RANGE_SIZE, &hr);
        if (!range_valid(&hr))
            return DSC_EBADFRAME;
    }
    *out = req;
    return 0;
}

void dsc_hint_range_at(const dsc_hint_req_t *req, uint32_t i, dsc_hint_range_t *out) {
    if (req->raw != NULL)
        range_read(req->raw + (size_t)i * DSC_HINT_RANGE_SIZE, out);
    else
        *out = req->ranges[i];
}

int dsc_hint_resp_encode(uint32_t accepted, uint8_t *out, size_t cap) {
    if (out == NULL || cap < DSC_HINT_RESP_SIZE)
        return DSC_ENOSPC;
    dsc_store_u32(out, accepted);
    return DSC_HINT_RESP_SIZE;
}

int dsc_hint_resp_encode_share(const dsc_hint_resp_t *r, uint8_t *out, size_t cap) {
    if (out == NULL || cap < DSC_HINT_RESP_SHARE_SIZE)
        return DSC_ENOSPC;
    dsc_store_u32(out, r->accepted);
    dsc_store_u32(out + 4, r->trimmed);
    dsc_store_u64(out + 8, r->share_bytes);
    dsc_store_u64(out + 16, r->held_bytes);
    return DSC_HINT_RESP_SHARE_SIZE;
}

int dsc_hint_resp_decode_share(const uint8_t *body, size_t len, dsc_hint_resp_t *out) {
    if (body == NULL || (len != DSC_HINT_RESP_SIZE && len != DSC_HINT_RESP_SHARE_SIZE))
        return DSC_EBADFRAME;
    dsc_hint_resp_t r = {.accepted = dsc_load_u32(body)};
    if (len == DSC_HINT_RESP_SHARE_SIZE) {
        r.trimmed = dsc_load_u32(body + 4);
        r.share_bytes = dsc_load_u64(body + 8);
        r.held_bytes = dsc_load_u64(body + 16);
        r.has_share = 1;
        if ((uint64_t)r.accepted + r.trimmed > DSC_HINT_MAX_RANGES)
            return DSC_EBADFRAME;
    }
    *out = r;
    return 0;
}

int dsc_hint_resp_decode(const uint8_t *body, size_t len, uint32_t *accepted) {
    dsc_hint_resp_t r;
    int rc = dsc_hint_resp_decode_share(body, len, &r);
    if (rc == 0)
        *accepted = r.accepted;
    return rc;
}
