/* MGET request and answer codec (proto/PROTOCOL.md "MGET"). No I/O, no allocation; the decoders
 * are bounds-checked and safe on hostile input. */
#include "mget.h"
#include "wire.h"

#include <string.h>

int dsc_mget_head_valid(dsc_str_t dataset, uint32_t flags, uint64_t version, uint32_t count,
                        uint32_t max_count) {
    return dataset.ptr != NULL && dataset.len >= 1 && dataset.len < DSC_MAX_NAME &&
           memchr(dataset.ptr, '\0', dataset.len) == NULL && (flags & ~DSC_GET_FLAG_VERSION) == 0 &&
           ((flags & DSC_GET_FLAG_VERSION) || version == 0) && count >= 1 && count <= max_count;
}

static int head_valid(dsc_str_t dataset, uint32_t flags, uint64_t version, uint32_t count) {
    return dsc_mget_head_valid(dataset, flags, version, count, DSC_MGET_MAX_ENTRIES);
}

int dsc_mget_req_encode(const dsc_mget_req_t *req, uint8_t *out, size_t cap) {
    if (req == NULL || req->items == NULL ||
        !head_valid(req->dataset, req->flags, req->version, req->count))
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
        dsc_wr_u32(&w, req->items[i].shard_id);
        dsc_wr_u32(&w, req->items[i].chunk);
    }
    return w.bad ? DSC_ENOSPC : (int)w.pos;
}

int dsc_mget_req_decode(const uint8_t *body, size_t len, dsc_mget_req_t *out) {
    if (body == NULL && len > 0)
        return DSC_EBADFRAME;
    dsc_rd_t r;
    dsc_rd_init(&r, body, len);
    dsc_mget_req_t req = {0};
    uint16_t name_len = dsc_rd_u16(&r);
    const uint8_t *name = dsc_rd_bytes(&r, name_len);
    req.dataset = (dsc_str_t){name != NULL ? (const char *)name : NULL, name_len};
    req.flags = dsc_rd_u32(&r);
    req.version = (req.flags & DSC_GET_FLAG_VERSION) ? dsc_rd_u64(&r) : 0;
    req.count = dsc_rd_u32(&r);
    if (r.bad || !head_valid(req.dataset, req.flags, req.version, req.count))
        return DSC_EBADFRAME;
    /* count is at most DSC_MGET_MAX_ENTRIES: no overflow. */
    req.raw = dsc_rd_bytes(&r, (size_t)req.count * DSC_MGET_ITEM_SIZE);
    if (r.bad || req.raw == NULL || r.pos != r.len)
        return DSC_EBADFRAME;
    *out = req;
    return 0;
}

void dsc_mget_item_at(const dsc_mget_req_t *req, uint32_t i, dsc_mget_item_t *out) {
    if (req->raw != NULL) {
        const uint8_t *p = req->raw + (size_t)i * DSC_MGET_ITEM_SIZE;
        out->shard_id = dsc_load_u32(p);
        out->chunk = dsc_load_u32(p + 4);
    } else {
        *out = req->items[i];
    }
}

/* An OK record's entry as GET's decoder accepts it. */
static int entry_valid(const dsc_chunk_entry_t *e) {
    return (e->codec == DSC_CODEC_RAW || e->codec == DSC_CODEC_LZ4) &&
           e->raw_len <= DSC_CHUNK_MAX_RAW &&
           (e->codec != DSC_CODEC_RAW || e->stored_len == e->raw_len);
}

int dsc_mget_resp_prefix_encode(const uint32_t *status, const dsc_chunk_entry_t *entries,
                                uint32_t count, uint8_t *out, size_t cap) {
    if (status == NULL || entries == NULL || count == 0 || count > DSC_MGET_MAX_ENTRIES)
        return DSC_EINVAL;
    for (uint32_t i = 0; i < count; i++)
        if (status[i] == DSC_STATUS_OK && !entry_valid(&entries[i]))
            return DSC_EINVAL;
    if (out == NULL || cap < DSC_MGET_RESP_PREFIX(count))
        return DSC_ENOSPC;
    dsc_store_u32(out, count);
    dsc_store_u32(out + 4, 0);
    for (uint32_t i = 0; i < count; i++) {
        uint8_t *rec = out + 8 + (size_t)i * DSC_MGET_RECORD_SIZE;
        dsc_store_u32(rec, status[i]);
        dsc_store_u32(rec + 4, 0);
        if (status[i] == DSC_STATUS_OK)
            dsc_chunk_entry_encode(&entries[i], rec + 8);
        else
            memset(rec + 8, 0, DSC_CHUNK_ENTRY_SIZE);
    }
    return (int)DSC_MGET_RESP_PREFIX(count);
}

int dsc_mget_resp_prefix_size(const uint8_t *head, size_t len) {
    if (head == NULL || len < 8)
        return DSC_EBADFRAME;
    uint32_t count = dsc_load_u32(head);
    if (count == 0 || count > DSC_MGET_MAX_ENTRIES || dsc_load_u32(head + 4) != 0)
        return DSC_EBADFRAME;
    return (int)DSC_MGET_RESP_PREFIX(count);
}

static const uint8_t zero_entry[DSC_CHUNK_ENTRY_SIZE];

int dsc_mget_resp_prefix_decode(const uint8_t *prefix, size_t len, uint64_t body_len,
                                dsc_mget_resp_t *out) {
    int size = dsc_mget_resp_prefix_size(prefix, len);
    if (size < 0)
        return size;
    if (len != (size_t)size || body_len < (uint64_t)size)
        return DSC_EBADFRAME;
    uint32_t count = dsc_load_u32(prefix);
    uint64_t data_len = body_len - (uint64_t)size;
    uint64_t sum = 0;
    uint32_t ok = 0;
    for (uint32_t i = 0; i < count; i++) {
        const uint8_t *rec = prefix + 8 + (size_t)i * DSC_MGET_RECORD_SIZE;
        if (dsc_load_u32(rec + 4) != 0)
            return DSC_EBADFRAME;
        if (dsc_load_u32(rec) != DSC_STATUS_OK) {
            if (memcmp(rec + 8, zero_entry, DSC_CHUNK_ENTRY_SIZE) != 0)
                return DSC_EBADFRAME;
            continue;
        }
        dsc_chunk_entry_t e;
        dsc_chunk_entry_decode(rec + 8, &e);
        uint8_t again[DSC_CHUNK_ENTRY_SIZE];
        dsc_chunk_entry_encode(&e, again);
        if (!entry_valid(&e) || memcmp(again, rec + 8, DSC_CHUNK_ENTRY_SIZE) != 0)
            return DSC_EBADFRAME; /* padding bytes not zero: not the canonical encoding */
        /* Checked per step so the sum can never wrap, whatever the entries claim. */
        sum += e.stored_len;
        if (sum > data_len)
            return DSC_EBADFRAME;
        ok++;
    }
    if (sum != data_len)
        return DSC_EBADFRAME;
    out->count = count;
    out->records = prefix + 8;
    out->data = NULL;
    out->data_len = data_len;
    out->ok = ok;
    return 0;
}

int dsc_mget_resp_decode(const uint8_t *body, size_t len, dsc_mget_resp_t *out) {
    int size = dsc_mget_resp_prefix_size(body, len);
    if (size < 0)
        return size;
    if (len < (size_t)size)
        return DSC_EBADFRAME;
    dsc_mget_resp_t resp;
    int rc = dsc_mget_resp_prefix_decode(body, (size_t)size, len, &resp);
    if (rc < 0)
        return rc;
    resp.data = body + size;
    *out = resp;
    return 0;
}

int64_t dsc_mget_resp_record(const dsc_mget_resp_t *resp, uint32_t i, dsc_chunk_entry_t *entry) {
    if (resp == NULL || i >= resp->count)
        return DSC_ERANGE;
    const uint8_t *rec = resp->records + (size_t)i * DSC_MGET_RECORD_SIZE;
    uint32_t status = dsc_load_u32(rec);
    if (entry != NULL) {
        if (status == DSC_STATUS_OK)
            dsc_chunk_entry_decode(rec + 8, entry);
        else
            memset(entry, 0, sizeof *entry);
    }
    return status;
}
