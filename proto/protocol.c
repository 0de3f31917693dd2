/* Wire protocol codecs (proto/PROTOCOL.md): frame header, status/error mapping, body encoders
 * and decoders. No I/O, no allocation; every decoder is bounds-checked and safe on hostile input.
 * Over 800 lines on purpose: every body codec shares the bounded reader/writer helpers and the
 * canonical-encoding rule that the fuzz target checks; one file keeps them private (static).
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
    case DSC_STATUS_CHANGED:
        return "CHANGED";
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
    case DSC_STATUS_CHANGED:
        return DSC_ECHANGED;
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
    case DSC_ECHANGED:
        return DSC_STATUS_CHANGED;
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
    case DSC_OP_AUTH:
    case DSC_OP_REPORT:
    case DSC_OP_HINT:
    case DSC_OP_MGET:
    case DSC_OP_RANGE:
    case DSC_OP_PEER_READ:
    case DSC_OP_WARM:
    case DSC_OP_EVICT:
    case DSC_OP_POLICY:
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
    case DSC_OP_AUTH:
        return "AUTH";
    case DSC_OP_REPORT:
        return "REPORT";
    case DSC_OP_HINT:
        return "HINT";
    case DSC_OP_MGET:
        return "MGET";
    case DSC_OP_RANGE:
        return "RANGE";
    case DSC_OP_PEER_READ:
        return "PEER_READ";
    case DSC_OP_WARM:
        return "WARM";
    case DSC_OP_EVICT:
        return "EVICT";
    case DSC_OP_POLICY:
        return "POLICY";
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
    if (resp->features & DSC_FEATURE_AUTH) {
        if (resp->server_nonce == NULL)
            return DSC_EINVAL;
        dsc_wr_bytes(&w, resp->server_nonce, DSC_AUTH_NONCE_SIZE);
    }
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
    resp.server_nonce =
        (resp.features & DSC_FEATURE_AUTH) ? dsc_rd_bytes(&r, DSC_AUTH_NONCE_SIZE) : NULL;
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

static int policy_ok(const dsc_policy_req_t *req) {
    if (!dataset_ok(req->dataset) || req->action < DSC_POLICY_OP_PIN ||
        req->action > DSC_POLICY_OP_PRIORITY)
        return 0;
    if (req->action == DSC_POLICY_OP_PRIORITY)
        return req->bytes <= DSC_POLICY_MAX_PRIORITY;
    return req->action == DSC_POLICY_OP_LIMIT || req->bytes == 0;
}

int dsc_policy_req_encode(const dsc_policy_req_t *req, uint8_t *out, size_t cap) {
    if (!str_valid(req->dataset) || !policy_ok(req))
        return DSC_EINVAL;
    dsc_wr_t w;
    dsc_wr_init(&w, out, cap);
    wr_str(&w, req->dataset);
    dsc_wr_u8(&w, req->action);
    dsc_wr_u64(&w, req->bytes);
    return wr_done(&w);
}

int dsc_policy_req_decode(const uint8_t *body, size_t len, dsc_policy_req_t *out) {
    dsc_rd_t r;
    dsc_rd_init(&r, body, len);
    dsc_policy_req_t req;
    req.dataset = rd_str(&r, STR_NAME);
    req.action = dsc_rd_u8(&r);
    req.bytes = dsc_rd_u64(&r);
    int rc = rd_done(&r);
    if (rc < 0)
        return rc;
    if (!policy_ok(&req))
        return DSC_EBADFRAME;
    *out = req;
    return 0;
}

/* ---- GET ---------------------------------------------------------------------------------- */

static int get_range_ok(uint32_t first_chunk, uint32_t chunk_count) {
    return chunk_count >= 1 && chunk_count <= DSC_GET_MAX_CHUNKS &&
           (uint64_t)first_chunk + chunk_count <= (uint64_t)UINT32_MAX + 1;
}

uint64_t dsc_dataset_version(const void *manifest_json, size_t len) {
    const uint8_t *p = manifest_json;
    uint64_t h = UINT64_C(14695981039346656037);
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= UINT64_C(1099511628211);
    }
    return h ? h : 1;
}

int dsc_get_req_encode(const dsc_get_req_t *req, uint8_t *out, size_t cap) {
    if (!str_valid(req->dataset) || !dataset_ok(req->dataset) ||
        !get_range_ok(req->first_chunk, req->chunk_count) ||
        (req->flags & ~DSC_GET_FLAG_VERSION) != 0)
        return DSC_EINVAL;
    dsc_wr_t w;
    dsc_wr_init(&w, out, cap);
    wr_str(&w, req->dataset);
    dsc_wr_u32(&w, req->shard_id);
    dsc_wr_u32(&w, req->first_chunk);
    dsc_wr_u32(&w, req->chunk_count);
    dsc_wr_u32(&w, req->flags);
    if (req->flags & DSC_GET_FLAG_VERSION)
        dsc_wr_u64(&w, req->version);
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
    req.version = (req.flags & DSC_GET_FLAG_VERSION) ? dsc_rd_u64(&r) : 0;
    int rc = rd_done(&r);
    if (rc < 0)
        return rc;
    if (!dataset_ok(req.dataset) || !get_range_ok(req.first_chunk, req.chunk_count) ||
        (req.flags & ~DSC_GET_FLAG_VERSION) != 0)
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

/* ---- RDMA_CONNECT ------------------------------------------------------------------------- */

static int qp_info_ok(const dsc_rdma_qp_info_t *q) {
    static const uint8_t zero[DSC_RDMA_GID_SIZE];
    if (q->version < 1 || q->port < 1 || q->mtu < 1 || q->mtu > 5 || q->rd_atomic < 1)
        return 0;
    if (q->link_layer != DSC_RDMA_LINK_IB && q->link_layer != DSC_RDMA_LINK_ETHERNET)
        return 0;
    if (q->qpn < 1 || q->qpn > DSC_RDMA_MAX_QPN || q->psn > DSC_RDMA_MAX_QPN)
        return 0;
    /* RoCE addresses every packet by GID (a GRH is mandatory); InfiniBand may use the LID. */
    if (q->link_layer == DSC_RDMA_LINK_ETHERNET && memcmp(q->gid, zero, sizeof zero) == 0)
        return 0;
    return q->device.len < DSC_MAX_NAME;
}

static void wr_qp_fixed(dsc_wr_t *w, const dsc_rdma_qp_info_t *q) {
    dsc_wr_u16(w, q->version);
    dsc_wr_u8(w, q->link_layer);
    dsc_wr_u8(w, q->port);
    dsc_wr_u8(w, q->mtu);
    dsc_wr_u8(w, q->rd_atomic);
    dsc_wr_u16(w, q->lid);
    dsc_wr_u32(w, q->qpn);
    dsc_wr_u32(w, q->psn);
    dsc_wr_bytes(w, q->gid, DSC_RDMA_GID_SIZE);
}

static void rd_qp_fixed(dsc_rd_t *r, dsc_rdma_qp_info_t *q) {
    q->version = dsc_rd_u16(r);
    q->link_layer = dsc_rd_u8(r);
    q->port = dsc_rd_u8(r);
    q->mtu = dsc_rd_u8(r);
    q->rd_atomic = dsc_rd_u8(r);
    q->lid = dsc_rd_u16(r);
    q->qpn = dsc_rd_u32(r);
    q->psn = dsc_rd_u32(r);
    const uint8_t *gid = dsc_rd_bytes(r, DSC_RDMA_GID_SIZE);
    if (gid != NULL)
        memcpy(q->gid, gid, DSC_RDMA_GID_SIZE);
    else
        memset(q->gid, 0, DSC_RDMA_GID_SIZE);
}

static void wr_desc(dsc_wr_t *w, const dsc_rdma_desc_t *d) {
    dsc_wr_u64(w, d->addr);
    dsc_wr_u32(w, d->rkey);
    dsc_wr_u32(w, d->len);
    dsc_wr_u64(w, d->checksum);
}

static void rd_desc(dsc_rd_t *r, dsc_rdma_desc_t *d) {
    d->addr = dsc_rd_u64(r);
    d->rkey = dsc_rd_u32(r);
    d->len = dsc_rd_u32(r);
    d->checksum = dsc_rd_u64(r);
}

/* A READ of len bytes at addr must not wrap the address space. */
static int desc_ok(const dsc_rdma_desc_t *d) {
    return d->len >= 1 && d->addr <= UINT64_MAX - d->len;
}

int dsc_rdma_connect_req_encode(const dsc_rdma_qp_info_t *req, uint8_t *out, size_t cap) {
    if (!str_valid(req->device) || !qp_info_ok(req) ||
        (req->device.len > 0 && memchr(req->device.ptr, '\0', req->device.len) != NULL))
        return DSC_EINVAL;
    dsc_wr_t w;
    dsc_wr_init(&w, out, cap);
    wr_qp_fixed(&w, req);
    wr_str(&w, req->device);
    return wr_done(&w);
}

int dsc_rdma_connect_req_decode(const uint8_t *body, size_t len, dsc_rdma_qp_info_t *out) {
    dsc_rd_t r;
    dsc_rd_init(&r, body, len);
    dsc_rdma_qp_info_t q;
    rd_qp_fixed(&r, &q);
    q.device = rd_str(&r, STR_NAME);
    int rc = rd_done(&r);
    if (rc < 0)
        return rc;
    if (!qp_info_ok(&q))
        return DSC_EBADFRAME;
    *out = q;
    return 0;
}

int dsc_rdma_connect_resp_encode(const dsc_rdma_connect_resp_t *resp, uint8_t *out, size_t cap) {
    const dsc_rdma_qp_info_t *q = &resp->qp;
    if (!str_valid(q->device) || !qp_info_ok(q) ||
        (q->device.len > 0 && memchr(q->device.ptr, '\0', q->device.len) != NULL) ||
        resp->lease_ttl_ms < 1 || resp->max_lease_bytes < 1 || !desc_ok(&resp->probe) ||
        resp->probe.len > DSC_RDMA_PROBE_MAX)
        return DSC_EINVAL;
    dsc_wr_t w;
    dsc_wr_init(&w, out, cap);
    wr_qp_fixed(&w, q);
    dsc_wr_u32(&w, resp->lease_ttl_ms);
    dsc_wr_u64(&w, resp->max_lease_bytes);
    wr_desc(&w, &resp->probe);
    wr_str(&w, q->device);
    return wr_done(&w);
}

int dsc_rdma_connect_resp_decode(const uint8_t *body, size_t len, dsc_rdma_connect_resp_t *out) {
    dsc_rd_t r;
    dsc_rd_init(&r, body, len);
    dsc_rdma_connect_resp_t resp;
    rd_qp_fixed(&r, &resp.qp);
    resp.lease_ttl_ms = dsc_rd_u32(&r);
    resp.max_lease_bytes = dsc_rd_u64(&r);
    rd_desc(&r, &resp.probe);
    resp.qp.device = rd_str(&r, STR_NAME);
    int rc = rd_done(&r);
    if (rc < 0)
        return rc;
    if (!qp_info_ok(&resp.qp) || resp.lease_ttl_ms < 1 || resp.max_lease_bytes < 1 ||
        !desc_ok(&resp.probe) || resp.probe.len > DSC_RDMA_PROBE_MAX)
        return DSC_EBADFRAME;
    *out = resp;
    return 0;
}

int dsc_rdma_connect_negotiate(const dsc_rdma_qp_info_t *client, uint8_t server_link_layer,
                               uint8_t server_mtu, uint8_t server_max_rd_atomic, uint16_t *version,
                               uint8_t *path_mtu, uint8_t *rd_atomic) {
    if (!qp_info_ok(client) || server_mtu < 1 || server_mtu > 5 || server_max_rd_atomic < 1)
        return DSC_EINVAL;
    if (client->link_layer != server_link_layer)
        return DSC_ENOTSUP;
    /* Both ends must use the same path MTU: a responder drops packets larger than its own
     * (the READ then fails with a remote invalid-request error), so take the smaller. */
    *version = client->version < DSC_RDMA_VERSION ? client->version : DSC_RDMA_VERSION;
    *path_mtu = client->mtu < server_mtu ? client->mtu : server_mtu;
    *rd_atomic =
        client->rd_atomic < server_max_rd_atomic ? client->rd_atomic : server_max_rd_atomic;
    return 0;
}

/* ---- RDMA_GET ----------------------------------------------------------------------------- */

int dsc_rdma_get_req_encode(const dsc_rdma_get_req_t *req, uint8_t *out, size_t cap) {
    const dsc_get_req_t *g = &req->get;
    if (req->release_count > DSC_RDMA_MAX_RELEASE ||
        (req->release_count > 0 && req->release == NULL) || !str_valid(g->dataset))
        return DSC_EINVAL;
    for (uint16_t i = 0; i < req->release_count; i++)
        if (req->release[i] == 0)
            return DSC_EINVAL;
    if (g->chunk_count == 0) {
        if (g->dataset.len != 0 || g->shard_id != 0 || g->first_chunk != 0 || g->flags != 0 ||
            req->release_count == 0)
            return DSC_EINVAL;
    } else if (!dataset_ok(g->dataset) || !get_range_ok(g->first_chunk, g->chunk_count) ||
               (g->flags & ~DSC_GET_FLAG_VERSION) != 0) {
        return DSC_EINVAL;
    }
    dsc_wr_t w;
    dsc_wr_init(&w, out, cap);
    wr_str(&w, g->dataset);
    dsc_wr_u32(&w, g->shard_id);
    dsc_wr_u32(&w, g->first_chunk);
    dsc_wr_u32(&w, g->chunk_count);
    dsc_wr_u32(&w, g->flags);
    if (g->flags & DSC_GET_FLAG_VERSION)
        dsc_wr_u64(&w, g->version);
    dsc_wr_u16(&w, req->release_count);
    for (uint16_t i = 0; i < req->release_count; i++)
        dsc_wr_u64(&w, req->release[i]);
    return wr_done(&w);
}

int dsc_rdma_get_req_decode(const uint8_t *body, size_t len, dsc_rdma_get_req_t *out) {
    dsc_rd_t r;
    dsc_rd_init(&r, body, len);
    dsc_rdma_get_req_t req;
    dsc_get_req_t *g = &req.get;
    g->dataset = rd_str(&r, STR_NAME);
    g->shard_id = dsc_rd_u32(&r);
    g->first_chunk = dsc_rd_u32(&r);
    g->chunk_count = dsc_rd_u32(&r);
    g->flags = dsc_rd_u32(&r);
    g->version = (g->flags & DSC_GET_FLAG_VERSION) ? dsc_rd_u64(&r) : 0;
    req.release_count = dsc_rd_u16(&r);
    req.release = NULL;
    req.release_wire = NULL;
    if (req.release_count <= DSC_RDMA_MAX_RELEASE)
        req.release_wire = dsc_rd_bytes(&r, (size_t)req.release_count * 8);
    int rc = rd_done(&r);
    if (rc < 0)
        return rc;
    if (req.release_count > DSC_RDMA_MAX_RELEASE)
        return DSC_EBADFRAME;
    for (uint16_t i = 0; i < req.release_count; i++)
        if (dsc_load_u64(req.release_wire + (size_t)i * 8) == 0)
            return DSC_EBADFRAME;
    if (g->chunk_count == 0) {
        if (g->dataset.len != 0 || g->shard_id != 0 || g->first_chunk != 0 || g->flags != 0 ||
            req.release_count == 0)
            return DSC_EBADFRAME;
    } else if (!dataset_ok(g->dataset) || !get_range_ok(g->first_chunk, g->chunk_count) ||
               (g->flags & ~DSC_GET_FLAG_VERSION) != 0) {
        return DSC_EBADFRAME;
    }
    if (req.release_count == 0)
        req.release_wire = NULL;
    *out = req;
    return 0;
}

uint64_t dsc_rdma_get_req_release(const dsc_rdma_get_req_t *req, uint16_t i) {
    if (i >= req->release_count)
        return 0;
    if (req->release != NULL)
        return req->release[i];
    return req->release_wire != NULL ? dsc_load_u64(req->release_wire + (size_t)i * 8) : 0;
}

/* An entry fit for an RDMA_GET answer: what GET checks, zero padding, and no empty chunk. */
static int rdma_entry_ok(const uint8_t *raw, dsc_chunk_entry_t *e) {
    dsc_chunk_entry_decode(raw, e);
    if (raw[29] != 0 || raw[30] != 0 || raw[31] != 0)
        return 0;
    if (e->codec != DSC_CODEC_RAW && e->codec != DSC_CODEC_LZ4)
        return 0;
    if (e->raw_len > DSC_CHUNK_MAX_RAW || e->stored_len < 1)
        return 0;
    return e->codec != DSC_CODEC_RAW || e->stored_len == e->raw_len;
}

static int rdma_entries_encode_ok(const dsc_chunk_entry_t *entries, uint32_t count) {
    if (entries == NULL || count < 1 || count > DSC_GET_MAX_CHUNKS)
        return 0;
    for (uint32_t i = 0; i < count; i++) {
        uint8_t raw[DSC_CHUNK_ENTRY_SIZE];
        dsc_chunk_entry_t e;
        dsc_chunk_entry_encode(&entries[i], raw);
        if (!rdma_entry_ok(raw, &e))
            return 0;
    }
    return 1;
}

static void wr_rdma_head(dsc_wr_t *w, uint32_t count, uint32_t flags, uint64_t lease_id,
                         uint32_t ttl_ms, const dsc_chunk_entry_t *entries) {
    dsc_wr_u32(w, count);
    dsc_wr_u32(w, flags);
    dsc_wr_u64(w, lease_id);
    dsc_wr_u32(w, ttl_ms);
    dsc_wr_u32(w, 0);
    for (uint32_t i = 0; i < count && !w->bad; i++) {
        if (w->cap - w->pos < DSC_CHUNK_ENTRY_SIZE) {
            w->bad = 1;
            break;
        }
        dsc_chunk_entry_encode(&entries[i], w->p + w->pos);
        w->pos += DSC_CHUNK_ENTRY_SIZE;
    }
}

int dsc_rdma_get_resp_encode(uint64_t lease_id, uint32_t lease_ttl_ms,
                             const dsc_chunk_entry_t *entries, const dsc_rdma_desc_t *descs,
                             uint32_t count, uint8_t *out, size_t cap) {
    if (lease_id == 0 || lease_ttl_ms < 1 || descs == NULL ||
        !rdma_entries_encode_ok(entries, count))
        return DSC_EINVAL;
    for (uint32_t i = 0; i < count; i++)
        if (!desc_ok(&descs[i]) || descs[i].len != entries[i].stored_len ||
            descs[i].checksum != entries[i].stored_checksum)
            return DSC_EINVAL;
    dsc_wr_t w;
    dsc_wr_init(&w, out, cap);
    wr_rdma_head(&w, count, 0, lease_id, lease_ttl_ms, entries);
    for (uint32_t i = 0; i < count; i++)
        wr_desc(&w, &descs[i]);
    return wr_done(&w);
}

int dsc_rdma_get_resp_inline_prefix_encode(const dsc_chunk_entry_t *entries, uint32_t count,
                                           uint8_t *out, size_t cap) {
    if (!rdma_entries_encode_ok(entries, count))
        return DSC_EINVAL;
    dsc_wr_t w;
    dsc_wr_init(&w, out, cap);
    wr_rdma_head(&w, count, DSC_RDMA_GET_INLINE, 0, 0, entries);
    return wr_done(&w);
}

int dsc_rdma_get_resp_decode(const uint8_t *body, size_t len, dsc_rdma_get_resp_t *out) {
    if (len < DSC_RDMA_GET_RESP_HEAD)
        return DSC_EBADFRAME;
    dsc_rdma_get_resp_t resp;
    memset(&resp, 0, sizeof resp);
    resp.chunk_count = dsc_load_u32(body);
    resp.flags = dsc_load_u32(body + 4);
    resp.lease_id = dsc_load_u64(body + 8);
    resp.lease_ttl_ms = dsc_load_u32(body + 16);
    uint32_t reserved = dsc_load_u32(body + 20);
    uint32_t count = resp.chunk_count;
    if (count < 1 || count > DSC_GET_MAX_CHUNKS || reserved != 0)
        return DSC_EBADFRAME;
    int inline_form = resp.flags == DSC_RDMA_GET_INLINE;
    if (resp.flags != 0 && !inline_form)
        return DSC_EBADFRAME;
    if (inline_form ? resp.lease_id != 0 || resp.lease_ttl_ms != 0
                    : resp.lease_id == 0 || resp.lease_ttl_ms < 1)
        return DSC_EBADFRAME;
    size_t prefix = DSC_RDMA_GET_RESP_INLINE_PREFIX(count);
    if (len < prefix || (!inline_form && len != DSC_RDMA_GET_RESP_SIZE(count)))
        return DSC_EBADFRAME;
    resp.entries = body + DSC_RDMA_GET_RESP_HEAD;
    uint64_t data_len = inline_form ? (uint64_t)(len - prefix) : UINT64_MAX;
    uint64_t sum = 0;
    for (uint32_t i = 0; i < count; i++) {
        dsc_chunk_entry_t e;
        if (!rdma_entry_ok(resp.entries + (size_t)i * DSC_CHUNK_ENTRY_SIZE, &e))
            return DSC_EBADFRAME;
        /* Checked per step: no set of lengths can wrap the sum (at most 4096 x 2^32 anyway). */
        sum += e.stored_len;
        if (sum > data_len)
            return DSC_EBADFRAME;
        if (!inline_form) {
            dsc_rd_t r;
            dsc_rd_init(&r, body + prefix + (size_t)i * DSC_RDMA_DESC_SIZE, DSC_RDMA_DESC_SIZE);
            dsc_rdma_desc_t d;
            rd_desc(&r, &d);
            if (!desc_ok(&d) || d.len != e.stored_len || d.checksum != e.stored_checksum)
                return DSC_EBADFRAME;
        }
    }
    if (inline_form) {
        if (sum != data_len)
            return DSC_EBADFRAME;
        resp.inline_resp.chunk_count = count;
        resp.inline_resp.entries = resp.entries;
        resp.inline_resp.data = body + prefix;
        resp.inline_resp.data_len = data_len;
    } else {
        resp.descs = body + prefix;
    }
    resp.total_bytes = sum;
    *out = resp;
    return 0;
}

int dsc_rdma_get_resp_chunk(const dsc_rdma_get_resp_t *resp, uint32_t i, dsc_chunk_entry_t *entry,
                            dsc_rdma_desc_t *desc) {
    if (resp->descs == NULL)
        return DSC_EINVAL;
    if (i >= resp->chunk_count)
        return DSC_ERANGE;
    dsc_chunk_entry_decode(resp->entries + (size_t)i * DSC_CHUNK_ENTRY_SIZE, entry);
    dsc_rd_t r;
    dsc_rd_init(&r, resp->descs + (size_t)i * DSC_RDMA_DESC_SIZE, DSC_RDMA_DESC_SIZE);
    rd_desc(&r, desc);
    return 0;
}
