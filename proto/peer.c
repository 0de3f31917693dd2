/* PEER_READ request codec (proto/PROTOCOL.md "PEER_READ request"). No I/O, no allocation; the
 * decoder is bounds-checked and safe on hostile input. */
#include "peer.h"
#include "wire.h"

#include <string.h>

static int req_valid(const dsc_peer_req_t *r) {
    return r->dataset.ptr != NULL && r->dataset.len >= 1 && r->dataset.len < DSC_MAX_NAME &&
           memchr(r->dataset.ptr, '\0', r->dataset.len) == NULL &&
           (r->flags & ~DSC_PEER_FLAG_VERSION) == 0 &&
           ((r->flags & DSC_PEER_FLAG_VERSION) || r->version == 0) && r->length >= 1 &&
           r->length <= DSC_PEER_READ_MAX && r->offset <= (1ull << 63) - r->length;
}

int dsc_peer_req_encode(const dsc_peer_req_t *req, uint8_t *out, size_t cap) {
    if (req == NULL || !req_valid(req))
        return DSC_EINVAL;
    dsc_wr_t w;
    dsc_wr_init(&w, out, cap);
    dsc_wr_u16(&w, req->dataset.len);
    dsc_wr_bytes(&w, req->dataset.ptr, req->dataset.len);
    dsc_wr_u32(&w, req->shard_id);
    dsc_wr_u32(&w, req->flags);
    dsc_wr_u64(&w, req->version);
    dsc_wr_u64(&w, req->offset);
    dsc_wr_u32(&w, req->length);
    return w.bad ? DSC_ENOSPC : (int)w.pos;
}

int dsc_peer_req_decode(const uint8_t *body, size_t len, dsc_peer_req_t *out) {
    if (body == NULL && len > 0)
        return DSC_EBADFRAME;
    dsc_rd_t r;
    dsc_rd_init(&r, body, len);
    dsc_peer_req_t req = {0};
    uint16_t name_len = dsc_rd_u16(&r);
    const uint8_t *name = dsc_rd_bytes(&r, name_len);
    req.dataset = (dsc_str_t){name != NULL ? (const char *)name : NULL, name_len};
    req.shard_id = dsc_rd_u32(&r);
    req.flags = dsc_rd_u32(&r);
    req.version = dsc_rd_u64(&r);
    req.offset = dsc_rd_u64(&r);
    req.length = dsc_rd_u32(&r);
    if (r.bad || r.pos != r.len || !req_valid(&req))
        return DSC_EBADFRAME;
    *out = req;
    return 0;
}
