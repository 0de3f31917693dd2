/* Wire protocol (proto/PROTOCOL.md): frame header, opcodes, status codes, request and response
 * bodies. Pure encode/decode over memory: no I/O, no allocation, safe on hostile input.
 * Decoders of variable data return pointers into the caller's buffer. */
#ifndef DSC_PROTOCOL_H
#define DSC_PROTOCOL_H

#include "dscache_base.h"
#include "shard.h"

#include <stddef.h>
#include <stdint.h>

#define DSC_FRAME_MAGIC 0x50435344u /* "DSCP" as little-endian bytes */
#define DSC_PROTO_VERSION 1
#define DSC_PROTO_MIN_VERSION 1
#define DSC_FRAME_HEADER_SIZE 24
#define DSC_FRAME_MAX_BODY (64u << 20) /* default and absolute bound on body_len */
#define DSC_FRAME_MIN_MAX_BODY 4096u   /* smallest max_body a server may announce in HELLO */
#define DSC_GET_MAX_CHUNKS 4096
#define DSC_ERROR_MAX_MESSAGE 1024
#define DSC_SHARD_ALL 0xFFFFFFFFu /* WARM/EVICT: every shard of the dataset */

/* Frame flags. */
#define DSC_FLAG_RESPONSE 0x0001u

typedef enum {
    DSC_OP_HELLO = 1,
    DSC_OP_PING = 2,
    DSC_OP_LIST = 3,
    DSC_OP_MANIFEST = 4,
    DSC_OP_GET = 5,
    DSC_OP_STAT = 6,
    DSC_OP_MEMBERS = 7,       /* cluster membership (JSON), see PROTOCOL.md */
    DSC_OP_AUTH = 8,          /* challenge-response proof after HELLO (proto/auth.h) */
    DSC_OP_REPORT = 9,        /* a loader's job, stall and rate (proto/report.h) */
    DSC_OP_HINT = 10,         /* chunk ranges a loader will ask for next (proto/hint.h) */
    DSC_OP_MGET = 11,         /* chunks of several shards in one answer (proto/mget.h) */
    DSC_OP_RANGE = 12,        /* sample ranges of chunks in one answer (proto/range.h) */
    DSC_OP_PEER_READ = 14,    /* a resident shard's file bytes, for a warming peer (peer.h) */
    DSC_OP_WARM = 16,         /* admin */
    DSC_OP_EVICT = 17,        /* admin */
    DSC_OP_POLICY = 18,       /* admin: pin, unpin or limit a dataset's memory */
    DSC_OP_RDMA_CONNECT = 32, /* reserved: queue-pair exchange */
    DSC_OP_RDMA_GET = 33,     /* reserved: (address, rkey, length) descriptors */
} dsc_opcode_t;

typedef enum {
    DSC_STATUS_OK = 0,
    DSC_STATUS_NOT_FOUND = 1,
    DSC_STATUS_BAD_REQUEST = 2,
    DSC_STATUS_TOO_LARGE = 3,
    DSC_STATUS_UNAVAILABLE = 4,
    DSC_STATUS_CORRUPT = 5,
    DSC_STATUS_VERSION_MISMATCH = 6,
    DSC_STATUS_UNAUTHORIZED = 7,
    DSC_STATUS_BUSY = 8,
    DSC_STATUS_INTERNAL = 9,
    DSC_STATUS_UNSUPPORTED = 10,
    DSC_STATUS_CHANGED = 11, /* the GET named a dataset version the server no longer serves */
} dsc_status_t;

/* "OK", "NOT_FOUND", ... or "UNKNOWN". */
const char *dsc_status_name(uint32_t status);
/* Status -> client error code (OK -> 0, NOT_FOUND -> DSC_ENOTFOUND, BAD_REQUEST ->
 * DSC_EBADREQ, TOO_LARGE -> DSC_ETOOLARGE, UNAVAILABLE/BUSY -> DSC_EUNAVAIL, CORRUPT ->
 * DSC_ECORRUPT, VERSION_MISMATCH -> DSC_EVERSION, UNAUTHORIZED -> DSC_EUNAUTH, UNSUPPORTED ->
 * DSC_ENOTSUP, INTERNAL and unknown statuses -> DSC_ESERVER). */
int dsc_status_to_err(uint32_t status);
/* Error code -> the status a server answers with (>= 0 -> OK; the table is in PROTOCOL.md;
 * codes without a better match -> INTERNAL). */
uint32_t dsc_err_to_status(int err);
/* 1 when the opcode is one this version defines (reserved ones included), else 0. */
int dsc_opcode_known(uint32_t opcode);
const char *dsc_opcode_name(uint32_t opcode);

typedef struct dsc_frame_header {
    uint8_t version;
    uint8_t opcode;
    uint16_t flags;
    uint32_t status;     /* 0 in requests */
    uint64_t request_id; /* echoed in the response */
    uint32_t body_len;
} dsc_frame_header_t;

void dsc_frame_header_encode(const dsc_frame_header_t *header, uint8_t out[DSC_FRAME_HEADER_SIZE]);
/* Decodes a header from the first len bytes of a stream. One of three outcomes: returns
 * DSC_FRAME_HEADER_SIZE (consumed), 0 (partial: fewer than 24 bytes yet), or an error:
 * DSC_EBADMAGIC, DSC_EVERSION (version 0 or above DSC_PROTO_VERSION), DSC_ETOOLARGE
 * (body_len > max_body), DSC_EBADFRAME (unknown flags). max_body 0 or above DSC_FRAME_MAX_BODY
 * means DSC_FRAME_MAX_BODY. Opcode and status are not checked here (unknown opcodes get an
 * UNSUPPORTED answer, unknown statuses map to DSC_ESERVER). */
int dsc_frame_header_decode(const uint8_t *buf, size_t len, uint32_t max_body,
                            dsc_frame_header_t *out);

/* Strings in bodies are u16 length + bytes (no NUL). */
typedef struct dsc_str {
    const char *ptr;
    uint16_t len;
} dsc_str_t;

/* HELLO */
/* HELLO feature bit 0: challenge-response authentication (proto/auth.h); the answer that grants
 * it carries the server's nonce of DSC_AUTH_NONCE_SIZE bytes. */
#define DSC_FEATURE_AUTH 0x00000001u
#define DSC_AUTH_NONCE_SIZE 32
/* HELLO feature bit 1: in a request, the client understands it; in the answer (only to a client
 * that set it), the server offers RDMA_CONNECT (PROTOCOL.md, RDMA). Neither bit changes the
 * HELLO bodies' layout except AUTH's nonce. */
#define DSC_FEATURE_RDMA 0x00000002u
/* HELLO feature bit 2: the server checks the dataset version a GET names (DSC_GET_FLAG_VERSION)
 * and answers CHANGED when the dataset was replaced (PROTOCOL.md, Dataset versions). */
#define DSC_FEATURE_DATASET_VERSION 0x00000004u
/* HELLO feature bit 3: the server answers MGET (proto/mget.h); a client not granted it sends
 * GETs instead (PROTOCOL.md, MGET). */
#define DSC_FEATURE_MGET 0x00000008u
/* HELLO feature bit 4: HINT answers carry the credential's and job's read-ahead share (the long
 * answer, proto/hint.h: ranges trimmed beyond the share, the share, the bytes held). A client
 * that does not set it gets the 4-byte answer, as from an older server. */
#define DSC_FEATURE_HINT_SHARE 0x00000010u
/* HELLO feature bit 6: the server accepts REPORT's straggler trailer (proto/report.h); a loader
 * appends it only on a connection granted this bit (an older server refuses trailing bytes). */
#define DSC_FEATURE_REPORT_HEDGE 0x00000040u
/* HELLO feature bit 5: the server answers RANGE (proto/range.h): only the named samples of each
 * chunk, as a sub-chunk it checksums itself (PROTOCOL.md, RANGE). */
#define DSC_FEATURE_RANGE 0x00000020u
typedef struct dsc_hello_req {
    uint16_t min_version, max_version;
    uint32_t features;
    uint64_t members_hash; /* 0: client has no view */
    dsc_str_t auth;        /* opaque token, empty when unused */
    dsc_str_t client_name;
} dsc_hello_req_t;
typedef struct dsc_hello_resp {
    uint16_t version; /* chosen version */
    uint32_t features;
    uint64_t members_hash;
    uint32_t max_body;
    dsc_str_t server_name;
    /* With feature bit 0 (DSC_FEATURE_AUTH) set: the server's 32-byte nonce,
     * appended after server_name; NULL otherwise. */
    const uint8_t *server_nonce;
} dsc_hello_resp_t;

/* Encoders return bytes written, DSC_ENOSPC (cap too small), or DSC_EINVAL (a value the decoder
 * would reject: a string with len > 0 and ptr NULL, a dataset name empty or over
 * DSC_MAX_NAME-1 bytes, a chunk range out of bounds, non-zero GET flags). Decoders return 0 or
 * DSC_EBADFRAME (any truncation, trailing bytes or out-of-range value: HELLO min_version 0 or
 * above max_version, a response version 0 or max_body outside [DSC_FRAME_MIN_MAX_BODY,
 * DSC_FRAME_MAX_BODY], a NUL byte inside a name; the auth token is opaque bytes). On error *out
 * is untouched. A HELLO response with feature bit 0 (authentication) carries a 32-byte server
 * nonce after server_name (encoding it with server_nonce NULL is DSC_EINVAL). */
int dsc_hello_req_encode(const dsc_hello_req_t *req, uint8_t *out, size_t cap);
int dsc_hello_req_decode(const uint8_t *body, size_t len, dsc_hello_req_t *out);
int dsc_hello_resp_encode(const dsc_hello_resp_t *resp, uint8_t *out, size_t cap);
int dsc_hello_resp_decode(const uint8_t *body, size_t len, dsc_hello_resp_t *out);
/* Picks the highest version in both ranges: the version, or DSC_EVERSION. */
int dsc_hello_negotiate(uint16_t client_min, uint16_t client_max);

/* MANIFEST, STAT (empty name = all datasets): body is just a name (0..DSC_MAX_NAME-1 bytes;
 * name NULL encodes as empty). */
int dsc_name_req_encode(const char *name, uint8_t *out, size_t cap);
int dsc_name_req_decode(const uint8_t *body, size_t len, dsc_str_t *name);

/* WARM, EVICT: name + shard id (DSC_SHARD_ALL). Response: u32 shards affected. */
typedef struct dsc_shard_req {
    dsc_str_t dataset;
    uint32_t shard_id;
} dsc_shard_req_t;
int dsc_shard_req_encode(const dsc_shard_req_t *req, uint8_t *out, size_t cap);
int dsc_shard_req_decode(const uint8_t *body, size_t len, dsc_shard_req_t *out);

/* POLICY: name + u8 action (DSC_POLICY_OP_*) + u64 bytes (LIMIT: the cap, 0 removes it;
 * PRIORITY: the priority, 0..DSC_POLICY_MAX_PRIORITY; else 0).
 * Response: u32 shards affected (loads started by PIN, evictions by LIMIT; 0 otherwise). */
enum {
    DSC_POLICY_OP_PIN = 1,
    DSC_POLICY_OP_UNPIN = 2,
    DSC_POLICY_OP_LIMIT = 3,
    DSC_POLICY_OP_PRIORITY = 4
};
#define DSC_POLICY_MAX_PRIORITY 1000
typedef struct dsc_policy_req {
    dsc_str_t dataset;
    uint8_t action;
    uint64_t bytes;
} dsc_policy_req_t;
int dsc_policy_req_encode(const dsc_policy_req_t *req, uint8_t *out, size_t cap);
int dsc_policy_req_decode(const uint8_t *body, size_t len, dsc_policy_req_t *out);

/* GET: chunks [first_chunk, first_chunk + chunk_count) of one shard. */
typedef struct dsc_get_req {
    dsc_str_t dataset;
    uint32_t shard_id;
    uint32_t first_chunk;
    uint32_t chunk_count; /* 1..DSC_GET_MAX_CHUNKS */
    uint32_t flags;       /* 0 or DSC_GET_FLAG_VERSION */
    uint64_t version;     /* with DSC_GET_FLAG_VERSION: the dataset version (on the wire after
                             flags), else 0 */
} dsc_get_req_t;
/* GET flag bit 0: a u64 dataset version follows the flags; the server answers CHANGED unless it
 * serves that version of the dataset. */
#define DSC_GET_FLAG_VERSION 0x00000001u
/* A dataset's version: FNV-1a 64 of its MANIFEST response body (the manifest as
 * dsc_manifest_to_json writes it), never 0. */
uint64_t dsc_dataset_version(const void *manifest_json, size_t len);
int dsc_get_req_encode(const dsc_get_req_t *req, uint8_t *out, size_t cap);
int dsc_get_req_decode(const uint8_t *body, size_t len, dsc_get_req_t *out);

/* GET response body: u32 chunk_count, u32 reserved, chunk_count chunk entries (the shard
 * index encoding, DSC_CHUNK_ENTRY_SIZE bytes each), then the stored bytes of each chunk in the
 * same order. The prefix is built by the server; the data goes out of its store unchanged. */
#define DSC_GET_RESP_PREFIX(n) (8u + (uint32_t)(n)*DSC_CHUNK_ENTRY_SIZE)
/* Writes the prefix for `count` entries; returns bytes written or DSC_ENOSPC. */
int dsc_get_resp_prefix_encode(const dsc_chunk_entry_t *entries, uint32_t count, uint8_t *out,
                               size_t cap);
typedef struct dsc_get_resp {
    uint32_t chunk_count;
    const uint8_t *entries; /* chunk_count encoded entries */
    const uint8_t *data;    /* concatenated stored bytes */
    uint64_t data_len;
} dsc_get_resp_t;
/* Validates a whole GET response body: counts, every stored_len summing exactly to the data
 * length, raw_len <= DSC_CHUNK_MAX_RAW, known codec, stored_len == raw_len for raw chunks.
 * Returns 0 or DSC_EBADFRAME. */
int dsc_get_resp_decode(const uint8_t *body, size_t len, dsc_get_resp_t *out);
/* Entry i and a pointer to its stored bytes (NULL after dsc_get_resp_prefix_decode). Linear in
 * i. Returns 0 or DSC_ERANGE. */
int dsc_get_resp_chunk(const dsc_get_resp_t *resp, uint32_t i, dsc_chunk_entry_t *entry,
                       const uint8_t **data);

/* Streaming receive of a GET response, for a client that reads the data straight into its own
 * buffers: read the first 8 body bytes, ask dsc_get_resp_prefix_size how long the prefix is
 * (DSC_EBADFRAME for a count of 0 or above DSC_GET_MAX_CHUNKS, non-zero reserved, or len < 8),
 * read the rest of the prefix, then dsc_get_resp_prefix_decode validates it against the frame's
 * body_len exactly as dsc_get_resp_decode does (len must equal the prefix size) and fills *out
 * with data = NULL and data_len = body_len - prefix. Returns the size / 0, or DSC_EBADFRAME. */
int dsc_get_resp_prefix_size(const uint8_t *head, size_t len);
int dsc_get_resp_prefix_decode(const uint8_t *prefix, size_t len, uint64_t body_len,
                               dsc_get_resp_t *out);

/* Walks the chunks of a decoded response in order, in O(1) per chunk. */
typedef struct dsc_get_resp_iter {
    const dsc_get_resp_t *resp;
    uint32_t index;  /* next entry */
    uint64_t offset; /* its stored bytes' offset inside data */
} dsc_get_resp_iter_t;
void dsc_get_resp_iter_init(dsc_get_resp_iter_t *it, const dsc_get_resp_t *resp);
/* Next entry and its stored bytes (*data NULL when resp->data is; data may be NULL). Returns 1,
 * 0 after the last chunk, or DSC_ERANGE (a resp not produced by the decoders above). */
int dsc_get_resp_iter_next(dsc_get_resp_iter_t *it, dsc_chunk_entry_t *entry, const uint8_t **data);

/* Error responses (status != OK) carry a UTF-8 message of at most DSC_ERROR_MAX_MESSAGE bytes
 * as their whole body. */

/* Writes a complete frame (header + body) into out; header->body_len is ignored and set from
 * body_len. body may overlap out + DSC_FRAME_HEADER_SIZE (the body can be built in place).
 * Returns the bytes written, DSC_ENOSPC, DSC_ETOOLARGE (body_len > DSC_FRAME_MAX_BODY) or
 * DSC_EINVAL (body NULL with body_len > 0). */
int dsc_frame_encode(const dsc_frame_header_t *header, const void *body, size_t body_len,
                     uint8_t *out, size_t cap);
/* Writes a complete error response: flags RESPONSE, the given status (not OK), and message
 * (NULL: empty) cut to DSC_ERROR_MAX_MESSAGE bytes as the body. At most
 * DSC_FRAME_HEADER_SIZE + DSC_ERROR_MAX_MESSAGE bytes. Returns the bytes written, DSC_ENOSPC,
 * or DSC_EINVAL (status OK). */
int dsc_error_frame_encode(uint8_t opcode, uint64_t request_id, uint32_t status,
                           const char *message, uint8_t *out, size_t cap);

/* ---- RDMA transport (PROTOCOL.md "RDMA"): RDMA_CONNECT and RDMA_GET bodies ---------------- */

#define DSC_RDMA_VERSION 1
#define DSC_RDMA_GID_SIZE 16
#define DSC_RDMA_LINK_IB 1
#define DSC_RDMA_LINK_ETHERNET 2
#define DSC_RDMA_MAX_QPN 0xFFFFFFu  /* QPNs and PSNs are 24-bit */
#define DSC_RDMA_MAX_RELEASE 256    /* lease ids released by one RDMA_GET */
#define DSC_RDMA_PROBE_MAX 65536u   /* largest probe region */
#define DSC_RDMA_DESC_SIZE 24       /* u64 addr, u32 rkey, u32 len, u64 checksum */
#define DSC_RDMA_GET_RESP_HEAD 24   /* u32 count, u32 flags, u64 lease, u32 ttl, u32 0 */
#define DSC_RDMA_GET_INLINE 0x0001u /* RDMA_GET response flag: stored bytes follow inline */
#define DSC_RDMA_CONNECT_FIXED 32   /* fixed part of a queue-pair description */
/* Sizes of an RDMA_GET response with n chunks: with descriptors, and the prefix of the inline
 * form (the stored bytes follow it). */
#define DSC_RDMA_GET_RESP_SIZE(n)                                                                  \
    (DSC_RDMA_GET_RESP_HEAD + (uint32_t)(n) * (DSC_CHUNK_ENTRY_SIZE + DSC_RDMA_DESC_SIZE))
#define DSC_RDMA_GET_RESP_INLINE_PREFIX(n)                                                         \
    (DSC_RDMA_GET_RESP_HEAD + (uint32_t)(n)*DSC_CHUNK_ENTRY_SIZE)

/* One side's RC queue pair, as exchanged by RDMA_CONNECT. In the request: the client's QP, its
 * port's active MTU and the READs it wants outstanding. In the response: the server's QP (already
 * in RTR), the path MTU chosen (min of both) and the max_dest_rd_atomic granted. */
typedef struct dsc_rdma_qp_info {
    uint16_t version;               /* >= 1; the response carries min(client's, server's) */
    uint8_t link_layer;             /* DSC_RDMA_LINK_IB or DSC_RDMA_LINK_ETHERNET (RoCE) */
    uint8_t port;                   /* port number, >= 1 */
    uint8_t mtu;                    /* enum ibv_mtu, 1 (256 B) .. 5 (4096 B) */
    uint8_t rd_atomic;              /* >= 1: READs outstanding (asked / granted) */
    uint16_t lid;                   /* InfiniBand LID; 0 on Ethernet */
    uint32_t qpn;                   /* 1..DSC_RDMA_MAX_QPN */
    uint32_t psn;                   /* initial packet sequence number, 0..DSC_RDMA_MAX_QPN */
    uint8_t gid[DSC_RDMA_GID_SIZE]; /* non-zero on Ethernet (RoCE needs a GRH) */
    dsc_str_t device;               /* device name for logs, 0..63 bytes, no NUL */
} dsc_rdma_qp_info_t;

/* A registered remote region: the client READs len bytes at addr with rkey. checksum is the
 * XXH3-64 of those bytes (for a chunk: its stored_checksum; for the probe: of the probe page). */
typedef struct dsc_rdma_desc {
    uint64_t addr;
    uint32_t rkey;
    uint32_t len; /* >= 1: no zero-length READs */
    uint64_t checksum;
} dsc_rdma_desc_t;

typedef struct dsc_rdma_connect_resp {
    dsc_rdma_qp_info_t qp;
    uint32_t lease_ttl_ms;    /* >= 1: a lease not released by then fences the connection */
    uint64_t max_lease_bytes; /* >= 1: bytes this connection may hold leased at once */
    dsc_rdma_desc_t probe;    /* 1..DSC_RDMA_PROBE_MAX bytes to READ before trusting RDMA */
} dsc_rdma_connect_resp_t;

/* RDMA_CONNECT: request = a qp_info; response = qp_info fixed part, u32 lease_ttl_ms, u64
 * max_lease_bytes, probe descriptor, then the device string. Encoders return bytes written,
 * DSC_ENOSPC or DSC_EINVAL (a value the decoder would reject); decoders return 0 or
 * DSC_EBADFRAME (truncation, trailing bytes, a value out of range), *out untouched on error. */
int dsc_rdma_connect_req_encode(const dsc_rdma_qp_info_t *req, uint8_t *out, size_t cap);
int dsc_rdma_connect_req_decode(const uint8_t *body, size_t len, dsc_rdma_qp_info_t *out);
int dsc_rdma_connect_resp_encode(const dsc_rdma_connect_resp_t *resp, uint8_t *out, size_t cap);
int dsc_rdma_connect_resp_decode(const uint8_t *body, size_t len, dsc_rdma_connect_resp_t *out);
/* The server's choice for a client QP: path MTU = min(client mtu, server_mtu), READs granted =
 * min(client rd_atomic, server_max_rd_atomic), version = min. Returns 0, DSC_EINVAL (a value
 * out of range) or DSC_ENOTSUP (different link layers: the two cannot reach each other). */
int dsc_rdma_connect_negotiate(const dsc_rdma_qp_info_t *client, uint8_t server_link_layer,
                               uint8_t server_mtu, uint8_t server_max_rd_atomic, uint16_t *version,
                               uint8_t *path_mtu, uint8_t *rd_atomic);

/* RDMA_GET request: a GET request's fields, then u16 release_count and that many u64 lease ids
 * (each non-zero) that the client has finished reading. The release-only form has chunk_count 0
 * with an empty dataset, shard 0, first chunk 0, flags 0 and release_count >= 1. */
typedef struct dsc_rdma_get_req {
    dsc_get_req_t get;
    uint16_t release_count;      /* 0..DSC_RDMA_MAX_RELEASE */
    const uint64_t *release;     /* encode: the ids; decode: NULL (use release_wire) */
    const uint8_t *release_wire; /* decode: release_count little-endian u64s in the body */
} dsc_rdma_get_req_t;
int dsc_rdma_get_req_encode(const dsc_rdma_get_req_t *req, uint8_t *out, size_t cap);
int dsc_rdma_get_req_decode(const uint8_t *body, size_t len, dsc_rdma_get_req_t *out);
/* Lease id i of a decoded (or encodable) request; 0 when i is out of range. */
uint64_t dsc_rdma_get_req_release(const dsc_rdma_get_req_t *req, uint16_t i);

/* RDMA_GET response. Leased form: head (lease_id != 0, ttl >= 1), chunk_count chunk entries,
 * chunk_count descriptors (desc.len == stored_len >= 1, desc.checksum == stored_checksum, no
 * address wrap). Inline form (flag DSC_RDMA_GET_INLINE, lease 0, ttl 0): head, entries, then
 * the stored bytes exactly as in a GET response. The empty body answers a release-only request. */
typedef struct dsc_rdma_get_resp {
    uint32_t chunk_count;
    uint32_t flags;
    uint64_t lease_id;
    uint32_t lease_ttl_ms;
    const uint8_t *entries;     /* chunk_count encoded entries */
    const uint8_t *descs;       /* chunk_count encoded descriptors; NULL in the inline form */
    uint64_t total_bytes;       /* sum of stored_len */
    dsc_get_resp_t inline_resp; /* inline form: as dsc_get_resp_decode gives (else zeros) */
} dsc_rdma_get_resp_t;
/* Leased form (entries, descs: count each); returns bytes written, DSC_ENOSPC or DSC_EINVAL. */
int dsc_rdma_get_resp_encode(uint64_t lease_id, uint32_t lease_ttl_ms,
                             const dsc_chunk_entry_t *entries, const dsc_rdma_desc_t *descs,
                             uint32_t count, uint8_t *out, size_t cap);
/* Prefix of the inline form (the caller appends the stored bytes). */
int dsc_rdma_get_resp_inline_prefix_encode(const dsc_chunk_entry_t *entries, uint32_t count,
                                           uint8_t *out, size_t cap);
/* Validates a whole non-empty RDMA_GET response body (either form, every entry checked as GET
 * does plus zero padding and stored_len >= 1). Returns 0 or DSC_EBADFRAME. */
int dsc_rdma_get_resp_decode(const uint8_t *body, size_t len, dsc_rdma_get_resp_t *out);
/* Entry i and its descriptor (leased form), O(1). Returns 0, DSC_ERANGE, or DSC_EINVAL for the
 * inline form (walk inline_resp with dsc_get_resp_iter_next instead). */
int dsc_rdma_get_resp_chunk(const dsc_rdma_get_resp_t *resp, uint32_t i, dsc_chunk_entry_t *entry,
                            dsc_rdma_desc_t *desc);

#endif
