/* Wire protocol codecs (proto/PROTOCOL.md): frame header, status/error mapping, body encoders
 * and decoders. No I/O, no allocation; every decoder is bounds-checked and safe on hostile input.
 */
#include "protocol.h"
#include "wire.h"

#include <string.h>

/* ---- Status codes and opcodes ------------------------------------------------------------- */

const char *dsc_status_name(uint32_t status) {
    switch (status) {
    case DSC_STATUS_OK:
        return "OK";
    case DSC_STATUS_NOT_FOUND:
        return "NOT_FOUND";
    case DSC_STATUS_BAD_REQUEST:
        return "BAD_REQUEST";
    case DSC_STATUS_TOO_LARGE:
        return "TOO_LARGE";
    case DSC_STATUS_UNAVAILABLE:
        return "UNAVAILABLE";
    case DSC_STATUS_CORRUPT:
        return "CORRUPT";
    case DSC_STATUS_VERSION_MISMATCH:
        return "VERSION_MISMATCH";
    case DSC_STATUS_UNAUTHORIZED:
        return "UNAUTHORIZED";
    case DSC_STATUS_BUSY:
        return "BUSY";
    case DSC_STATUS_INTERNAL:
        return "INTERNAL";
    case DSC_STATUS_UNSUPPORTED:
        return "UNSUPPORTED";
    default:
        return "UNKNOWN";
    }
}

int dsc_status_to_err(uint32_t status) {
    switch (status) {
    case DSC_STATUS_OK:
        return 0;
    case DSC_STATUS_NOT_FOUND:
        return DSC_ENOTFOUND;
    case DSC_STATUS_BAD_REQUEST:
        return DSC_EBADREQ;
    case DSC_STATUS_TOO_LARGE:
        return DSC_ETOOLARGE;
    case DSC_STATUS_UNAVAILABLE:
        return DSC_EUNAVAIL;
    case DSC_STATUS_BUSY:
        return DSC_EUNAVAIL;
    case DSC_STATUS_CORRUPT:
        return DSC_ECORRUPT;
    case DSC_STATUS_VERSION_MISMATCH:
        return DSC_EVERSION;
    case DSC_STATUS_UNAUTHORIZED:
        return DSC_EUNAUTH;
    case DSC_STATUS_UNSUPPORTED:
        return DSC_ENOTSUP;
    default:
        return DSC_ESERVER; /* INTERNAL and statuses from a newer peer */
    }
}

uint32_t dsc_err_to_status(int err) {
    if (err >= 0)
        return DSC_STATUS_OK;
    switch (err) {
    case DSC_ENOTFOUND:
    case DSC_ENOENT:
        return DSC_STATUS_NOT_FOUND;
    case DSC_EBADREQ:
    case DSC_EBADFRAME:
    case DSC_EPROTO:
    case DSC_EINVAL:
    case DSC_ERANGE:
        return DSC_STATUS_BAD_REQUEST;
    case DSC_ETOOLARGE:
        return DSC_STATUS_TOO_LARGE;
    case DSC_EUNAVAIL:
    case DSC_EALLDOWN:
    case DSC_ECONNREFUSED:
    case DSC_ETIMEDOUT:
        return DSC_STATUS_UNAVAILABLE;
    /* Transient shortage on the server: the client may retry here later or ask a replica. */
    case DSC_EBUSY:
    case DSC_EAGAIN:
    case DSC_ENOMEM:
    case DSC_ENOSPC:
        return DSC_STATUS_BUSY;
    /* Bad bytes in the server's own store or backing files. */
    case DSC_ECORRUPT:
    case DSC_ECHUNKSUM:
    case DSC_EDATASUM:
    case DSC_EDECOMPRESS:
    case DSC_EFILESUM:
    case DSC_EBADHEADER:
    case DSC_EBADINDEX:
    case DSC_EBADFOOTER:
    case DSC_EBADMAGIC:
    case DSC_ETRUNCATED:
    case DSC_EBADMANIFEST:
    case DSC_EBADSCHEMA:
        return DSC_STATUS_CORRUPT;
    case DSC_EVERSION:
        return DSC_STATUS_VERSION_MISMATCH;
    case DSC_EUNAUTH:
    case DSC_EACCES:
        return DSC_STATUS_UNAUTHORIZED;
    case DSC_ENOTSUP:
        return DSC_STATUS_UNSUPPORTED;
    default:
        return DSC_STATUS_INTERNAL;
    }
}

int dsc_opcode_known(uint32_t opcode) {
    switch (opcode) {
    case DSC_OP_HELLO:
    case DSC_OP_PING:
    case DSC_OP_LIST:
    case DSC_OP_MANIFEST:
    case DSC_OP_GET:
    case DSC_OP_STAT:
    case DSC_OP_MEMBERS:
    case DSC_OP_REPORT:
    case DSC_OP_WARM:
    case DSC_OP_EVICT:
    case DSC_OP_RDMA_CONNECT:
    case DSC_OP_RDMA_GET:
        return 1;
    default:
        return 0;
    }
}

const char *dsc_opcode_name(uint32_t opcode) {
    switch (opcode) {
    case DSC_OP_HELLO:
        return "HELLO";
    case DSC_OP_PING:
        return "PING";
    case DSC_OP_LIST:
        return "LIST";
    case DSC_OP_MANIFEST:
        return "MANIFEST";
    case DSC_OP_GET:
        return "GET";
    case DSC_OP_STAT:
        return "STAT";
    case DSC_OP_MEMBERS:
        return "MEMBERS";
    case DSC_OP_REPORT:
        return "REPORT";
    case DSC_OP_WARM:
        return "WARM";
    case DSC_OP_EVICT:
        return "EVICT";
    case DSC_OP_RDMA_CONNECT:
        return "RDMA_CONNECT";
    case DSC_OP_RDMA_GET:
        return "RDMA_GET";
    default:
        return "UNKNOWN";
    }
}

/* ---- Frame header ------------------------------------------------------------------------- */

void dsc_frame_header_encode(const dsc_frame_header_t *header, uint8_t out[DSC_FRAME_HEADER_SIZE]) {
    dsc_wr_t w;
    dsc_wr_init(&w, out, DSC_FRAME_HEADER_SIZE);
    dsc_wr_u32(&w, DSC_FRAME_MAGIC);
    dsc_wr_u8(&w, header->version);
    dsc_wr_u8(&w, header->opcode);
    dsc_wr_u16(&w, header->flags);
    dsc_wr_u32(&w, header->status);
    dsc_wr_u64(&w, header->request_id);
    dsc_wr_u32(&w, header->body_len);
}

int dsc_frame_header_decode(const uint8_t *buf, size_t len, uint32_t max_body,
                            dsc_frame_header_t *out) {
    if (len < DSC_FRAME_HEADER_SIZE)
        return 0;
    dsc_rd_t r;
    dsc_rd_init(&r, buf, DSC_FRAME_HEADER_SIZE);
    uint32_t magic = dsc_rd_u32(&r);
    dsc_frame_header_t h;
    h.version = dsc_rd_u8(&r);
    h.opcode = dsc_rd_u8(&r);
    h.flags = dsc_rd_u16(&r);
    h.status = dsc_rd_u32(&r);
    h.request_id = dsc_rd_u64(&r);
    h.body_len = dsc_rd_u32(&r);
    if (magic != DSC_FRAME_MAGIC)
        return DSC_EBADMAGIC;
    if (h.version == 0 || h.version > DSC_PROTO_VERSION)
        return DSC_EVERSION;
    if (h.flags & ~(uint16_t)DSC_FLAG_RESPONSE)
        return DSC_EBADFRAME;
    /* 0 means the default; no caller may raise the bound above the absolute one. */
    if (max_body == 0 || max_body > DSC_FRAME_MAX_BODY)
        max_body = DSC_FRAME_MAX_BODY;
    if (h.body_len > max_body)
        return DSC_ETOOLARGE;
    *out = h;
    return DSC_FRAME_HEADER_SIZE;
}

int dsc_frame_encode(const dsc_frame_header_t *header, const void *body, size_t body_len,
                     uint8_t *out, size_t cap) {
    if (body_len > DSC_FRAME_MAX_BODY)
        return DSC_ETOOLARGE;
    if (body_len > 0 && body == NULL)
        return DSC_EINVAL;
    if (cap < DSC_FRAME_HEADER_SIZE || body_len > cap - DSC_FRAME_HEADER_SIZE)
        return DSC_ENOSPC;
    dsc_frame_header_t h = *header;
    h.body_len = (uint32_t)body_len;
    dsc_frame_header_encode(&h, out);
    if (body_len > 0)
        memmove(out + DSC_FRAME_HEADER_SIZE, body, body_len);
    return (int)(DSC_FRAME_HEADER_SIZE + body_len);
}

int dsc_error_frame_encode(uint8_t opcode, uint64_t request_id, uint32_t status,
                           const char *message, uint8_t *out, size_t cap) {
    if (status == DSC_STATUS_OK)
        return DSC_EINVAL;
    size_t msg_len = message ? strlen(message) : 0;
    if (msg_len > DSC_ERROR_MAX_MESSAGE) {
        msg_len = DSC_ERROR_MAX_MESSAGE;
        /* Never cut inside a UTF-8 sequence: drop its continuation bytes and its lead. */
        while (msg_len > 0 && ((uint8_t)message[msg_len] & 0xC0) == 0x80)
            msg_len--;
    }
    dsc_frame_header_t h = {.version = DSC_PROTO_VERSION,
                            .opcode = opcode,
                            .flags = DSC_FLAG_RESPONSE,
                            .status = status,
                            .request_id = request_id,
                            .body_len = 0};
    return dsc_frame_encode(&h, message, msg_len, out, cap);
}

/* ---- Strings ------------------------------------------------------------------------------ */

/* Name strings (datasets, peers) never hold NUL: servers copy them into C strings. */
#define STR_ANY 0
#define STR_NAME 1

static void wr_str(dsc_wr_t *w, dsc_str_t s) {
    dsc_wr_u16(w, s.len);
    dsc_wr_bytes(w, s.ptr, s.len);
}

static int str_valid(dsc_str_t s) {
    return s.len == 0 || s.ptr != NULL;
}

static dsc_str_t rd_str(dsc_rd_t *r, int kind) {
    dsc_str_t s = {"", 0};
    uint16_t len = dsc_rd_u16(r);
    const uint8_t *p = dsc_rd_bytes(r, len);
    if (p == NULL)
        return s;
    if (kind == STR_NAME && len > 0 && memchr(p, '\0', len) != NULL) {
        r->bad = 1;
        return s;
    }
    s.ptr = (const char *)p;
    s.len = len;
    return s;
}

/* Dataset names: 1..DSC_MAX_NAME-1 bytes (the bound of every name field in the format). */
static int dataset_ok(dsc_str_t s) {
    return s.len >= 1 && s.len < DSC_MAX_NAME;
}

/* Common end of every encoder and decoder. */
static int wr_done(const dsc_wr_t *w) {
    return w->bad ? DSC_ENOSPC : (int)w->pos;
}
static int rd_done(const dsc_rd_t *r) {
    return r->bad || r->pos != r->len ? DSC_EBADFRAME : 0;
}

/* ---- HELLO -------------------------------------------------------------------------------- */

int dsc_hello_req_encode(const dsc_hello_req_t *req, uint8_t *out, size_t cap) {
    if (!str_valid(req->auth) || !str_valid(req->client_name))
        return DSC_EINVAL;
    dsc_wr_t w;
    dsc_wr_init(&w, out, cap);
    dsc_wr_u16(&w, req->min_version);
    dsc_wr_u16(&w, req->max_version);
    dsc_wr_u32(&w, req->features);
    dsc_wr_u64(&w, req->members_hash);
    wr_str(&w, req->auth);
    wr_str(&w, req->client_name);
    return wr_done(&w);
}

int dsc_hello_req_decode(const uint8_t *body, size_t len, dsc_hello_req_t *out) {
    dsc_rd_t r;
    dsc_rd_init(&r, body, len);
    dsc_hello_req_t req;
    req.min_version = dsc_rd_u16(&r);
    req.max_version = dsc_rd_u16(&r);
    req.features = dsc_rd_u32(&r);
    req.members_hash = dsc_rd_u64(&r);
    req.auth = rd_str(&r, STR_ANY);
    req.client_name = rd_str(&r, STR_NAME);
    int rc = rd_done(&r);
    if (rc < 0)
        return rc;
    if (req.min_version == 0 || req.min_version > req.max_version)
        return DSC_EBADFRAME;
    *out = req;
    return 0;
}

int dsc_hello_resp_encode(const dsc_hello_resp_t *resp, uint8_t *out, size_t cap) {
    if (!str_valid(resp->server_name))
        return DSC_EINVAL;
    dsc_wr_t w;
    dsc_wr_init(&w, out, cap);
    dsc_wr_u16(&w, resp->version);
    dsc_wr_u32(&w, resp->features);
    dsc_wr_u64(&w, resp->members_hash);
    dsc_wr_u32(&w, resp->max_body);
    wr_str(&w, resp->server_name);
    return wr_done(&w);
}

int dsc_hello_resp_decode(const uint8_t *body, size_t len, dsc_hello_resp_t *out) {
    dsc_rd_t r;
    dsc_rd_init(&r, body, len);
    dsc_hello_resp_t resp;
    resp.version = dsc_rd_u16(&r);
    resp.features = dsc_rd_u32(&r);
    resp.members_hash = dsc_rd_u64(&r);
    resp.max_body = dsc_rd_u32(&r);
    resp.server_name = rd_str(&r, STR_NAME);
    int rc = rd_done(&r);
    if (rc < 0)
        return rc;
    /* A server that cannot take a header-sized body could not answer a GET either. */
    if (resp.version == 0 || resp.max_body < DSC_FRAME_MIN_MAX_BODY ||
        resp.max_body > DSC_FRAME_MAX_BODY)
        return DSC_EBADFRAME;
    *out = resp;
    return 0;
}

int dsc_hello_negotiate(uint16_t client_min, uint16_t client_max) {
    uint16_t low = client_min > DSC_PROTO_MIN_VERSION ? client_min : DSC_PROTO_MIN_VERSION;
    uint16_t high = client_max < DSC_PROTO_VERSION ? client_max : DSC_PROTO_VERSION;
    if (client_min == 0 || client_min > client_max || low > high)
        return DSC_EVERSION;
    return high;
}

/* ---- Name and shard requests -------------------------------------------------------------- */

int dsc_name_req_encode(const char *name, uint8_t *out, size_t cap) {
    size_t len = name ? strlen(name) : 0;
    if (len >= DSC_MAX_NAME)
        return DSC_EINVAL;
    dsc_str_t s = {name, (uint16_t)len};
    dsc_wr_t w;
    dsc_wr_init(&w, out, cap);
    wr_str(&w, s);
    return wr_done(&w);
}

int dsc_name_req_decode(const uint8_t *body, size_t len, dsc_str_t *name) {
    dsc_rd_t r;
    dsc_rd_init(&r, body, len);
    dsc_str_t s = rd_str(&r, STR_NAME);
    int rc = rd_done(&r);
    if (rc < 0)
        return rc;
    if (s.len >= DSC_MAX_NAME)
        return DSC_EBADFRAME;
    *name = s;
    return 0;
}

int dsc_shard_req_encode(const dsc_shard_req_t *req, uint8_t *out, size_t cap) {
    if (!str_valid(req->dataset) || !dataset_ok(req->dataset))
        return DSC_EINVAL;
    dsc_wr_t w;
    dsc_wr_init(&w, out, cap);
    wr_str(&w, req->dataset);
    dsc_wr_u32(&w, req->shard_id);
    return wr_done(&w);
}

int dsc_shard_req_decode(const uint8_t *body, size_t len, dsc_shard_req_t *out) {
    dsc_rd_t r;
    dsc_rd_init(&r, body, len);
    dsc_shard_req_t req;
    req.dataset = rd_str(&r, STR_NAME);
    req.shard_id = dsc_rd_u32(&r);
    int rc = rd_done(&r);
    if (rc < 0)
        return rc;
    if (!dataset_ok(req.dataset))
        return DSC_EBADFRAME;
    *out = req;
    return 0;
}

/* ---- GET ---------------------------------------------------------------------------------- */

static int get_range_ok(uint32_t first_chunk, uint32_t chunk_count) {
    return chunk_count >= 1 && chunk_count <= DSC_GET_MAX_CHUNKS &&
           (uint64_t)first_chunk + chunk_count <= (uint64_t)UINT32_MAX + 1;
}

int dsc_get_req_encode(const dsc_get_req_t *req, uint8_t *out, size_t cap) {
    if (!str_valid(req->dataset) || !dataset_ok(req->dataset) ||
        !get_range_ok(req->first_chunk, req->chunk_count) || req->flags != 0)
        return DSC_EINVAL;
    dsc_wr_t w;
    dsc_wr_init(&w, out, cap);
    wr_str(&w, req->dataset);
    dsc_wr_u32(&w, req->shard_id);
    dsc_wr_u32(&w, req->first_chunk);
    dsc_wr_u32(&w, req->chunk_count);
    dsc_wr_u32(&w, req->flags);
    return wr_done(&w);
}

int dsc_get_req_decode(const uint8_t *body, size_t len, dsc_get_req_t *out) {
    dsc_rd_t r;
    dsc_rd_init(&r, body, len);
    dsc_get_req_t req;
    req.dataset = rd_str(&r, STR_NAME);
    req.shard_id = dsc_rd_u32(&r);
    req.first_chunk = dsc_rd_u32(&r);
    req.chunk_count = dsc_rd_u32(&r);
    req.flags = dsc_rd_u32(&r);
    int rc = rd_done(&r);
    if (rc < 0)
        return rc;
    if (!dataset_ok(req.dataset) || !get_range_ok(req.first_chunk, req.chunk_count) ||
        req.flags != 0)
        return DSC_EBADFRAME;
    *out = req;
    return 0;
}

int dsc_get_resp_prefix_encode(const dsc_chunk_entry_t *entries, uint32_t count, uint8_t *out,
                               size_t cap) {
    if (count == 0 || count > DSC_GET_MAX_CHUNKS || entries == NULL)
        return DSC_EINVAL;
    if (cap < DSC_GET_RESP_PREFIX(count))
        return DSC_ENOSPC;
    dsc_store_u32(out, count);
    dsc_store_u32(out + 4, 0);
    for (uint32_t i = 0; i < count; i++)
        dsc_chunk_entry_encode(&entries[i], out + 8 + (size_t)i * DSC_CHUNK_ENTRY_SIZE);
    return (int)DSC_GET_RESP_PREFIX(count);
}

int dsc_get_resp_prefix_size(const uint8_t *head, size_t len) {
    if (len < 8)
        return DSC_EBADFRAME;
    uint32_t count = dsc_load_u32(head);
    uint32_t reserved = dsc_load_u32(head + 4);
    if (count == 0 || count > DSC_GET_MAX_CHUNKS || reserved != 0)
        return DSC_EBADFRAME;
    return (int)DSC_GET_RESP_PREFIX(count);
}

int dsc_get_resp_prefix_decode(const uint8_t *prefix, size_t len, uint64_t body_len,
                               dsc_get_resp_t *out) {
    int size = dsc_get_resp_prefix_size(prefix, len);
    if (size < 0)
        return size;
    if (len != (size_t)size || body_len < (uint64_t)size)
        return DSC_EBADFRAME;
    uint32_t count = dsc_load_u32(prefix);
    uint64_t data_len = body_len - (uint64_t)size;
    uint64_t sum = 0;
    for (uint32_t i = 0; i < count; i++) {
        dsc_chunk_entry_t e;
        dsc_chunk_entry_decode(prefix + 8 + (size_t)i * DSC_CHUNK_ENTRY_SIZE, &e);
        if (e.codec != DSC_CODEC_RAW && e.codec != DSC_CODEC_LZ4)
            return DSC_EBADFRAME;
        if (e.raw_len > DSC_CHUNK_MAX_RAW)
            return DSC_EBADFRAME;
        if (e.codec == DSC_CODEC_RAW && e.stored_len != e.raw_len)
            return DSC_EBADFRAME;
        /* Checked per step so the sum can never wrap, whatever the entries claim. */
        sum += e.stored_len;
        if (sum > data_len)
            return DSC_EBADFRAME;
    }
    if (sum != data_len)
        return DSC_EBADFRAME;
    out->chunk_count = count;
    out->entries = prefix + 8;
    out->data = NULL;
    out->data_len = data_len;
    return 0;
}

int dsc_get_resp_decode(const uint8_t *body, size_t len, dsc_get_resp_t *out) {
    int size = dsc_get_resp_prefix_size(body, len);
    if (size < 0)
        return size;
    if (len < (size_t)size)
        return DSC_EBADFRAME;
    dsc_get_resp_t resp;
    int rc = dsc_get_resp_prefix_decode(body, (size_t)size, len, &resp);
    if (rc < 0)
        return rc;
    resp.data = body + size;
    *out = resp;
    return 0;
}

int dsc_get_resp_chunk(const dsc_get_resp_t *resp, uint32_t i, dsc_chunk_entry_t *entry,
                       const uint8_t **data) {
    if (i >= resp->chunk_count)
        return DSC_ERANGE;
    /* Linear in i; a caller walking every chunk uses dsc_get_resp_iter_next instead. */
    dsc_get_resp_iter_t it;
    dsc_get_resp_iter_init(&it, resp);
    int rc;
    do {
        rc = dsc_get_resp_iter_next(&it, entry, data);
        if (rc <= 0)
            return DSC_ERANGE;
    } while (it.index <= i);
    return 0;
}

void dsc_get_resp_iter_init(dsc_get_resp_iter_t *it, const dsc_get_resp_t *resp) {
    it->resp = resp;
    it->index = 0;
    it->offset = 0;
}

int dsc_get_resp_iter_next(dsc_get_resp_iter_t *it, dsc_chunk_entry_t *entry,
                           const uint8_t **data) {
    const dsc_get_resp_t *resp = it->resp;
    if (it->index >= resp->chunk_count)
        return 0;
    dsc_chunk_entry_decode(resp->entries + (size_t)it->index * DSC_CHUNK_ENTRY_SIZE, entry);
    /* Only a response not produced by the decoders above can fail this. */
    if (it->offset > resp->data_len || entry->stored_len > resp->data_len - it->offset)
        return DSC_ERANGE;
    if (data != NULL)
        *data = resp->data != NULL ? resp->data + it->offset : NULL;
    it->offset += entry->stored_len;
    it->index++;
    return 1;
}
