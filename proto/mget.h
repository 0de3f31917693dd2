/* MGET (proto/PROTOCOL.md "MGET"): chunks of several shards of one dataset in one request and one
 * answer, each with its own status. Pure encode/decode over memory: no I/O, no allocation, safe
 * on hostile input (tests/fuzz/fuzz_mget.c). */
#ifndef DSC_MGET_H
#define DSC_MGET_H

#include "protocol.h"

#include <stddef.h>
#include <stdint.h>

#define DSC_MGET_MAX_ENTRIES 4096 /* chunks named by one MGET (DSC_GET_MAX_CHUNKS, as GET) */
#define DSC_MGET_ITEM_SIZE 8      /* request: u32 shard_id, u32 chunk */
#define DSC_MGET_RECORD_SIZE (8 + DSC_CHUNK_ENTRY_SIZE) /* answer: u32 status, u32 0, entry */
/* Bytes of a request before its items: dataset string, flags, [version], count. */
#define DSC_MGET_REQ_HEAD(flags, name_len)                                                         \
    (2u + (uint32_t)(name_len) + 4u + (((flags)&DSC_GET_FLAG_VERSION) ? 8u : 0u) + 4u)
/* Largest request body (32 KiB of items: within the smallest max_body a server may announce
 * only with fewer entries; dscached's 64 KiB holds any). */
#define DSC_MGET_MAX_REQ_BODY                                                                      \
    (DSC_MGET_REQ_HEAD(DSC_GET_FLAG_VERSION, DSC_MAX_NAME - 1) +                                   \
     DSC_MGET_MAX_ENTRIES * DSC_MGET_ITEM_SIZE)
/* Size of an answer's prefix (head + records) for n entries; the stored bytes follow it. */
#define DSC_MGET_RESP_PREFIX(n) (8u + (uint32_t)(n)*DSC_MGET_RECORD_SIZE)

/* One chunk named by a request: chunk `chunk` of shard `shard_id` (any values: a shard or chunk
 * the dataset does not have is that entry's NOT_FOUND / BAD_REQUEST, not a malformed body). */
typedef struct dsc_mget_item {
    uint32_t shard_id;
    uint32_t chunk;
} dsc_mget_item_t;

typedef struct dsc_mget_req {
    dsc_str_t dataset; /* 1..63 bytes, no NUL */
    uint32_t flags;    /* 0 or DSC_GET_FLAG_VERSION */
    uint64_t version;  /* with DSC_GET_FLAG_VERSION: the dataset version (dsc_dataset_version),
                          else 0 */
    uint32_t count;    /* 1..DSC_MGET_MAX_ENTRIES */
    /* Encode: the items (count of them), in the order the answer repeats. Decode: NULL; read
     * them from raw with dsc_mget_item_at. */
    const dsc_mget_item_t *items;
    const uint8_t *raw; /* decode: count * DSC_MGET_ITEM_SIZE bytes inside the body */
} dsc_mget_req_t;

/* The head MGET and RANGE requests share (dataset, flags, version, count): 1 when it is valid with
 * at most max_count entries (a name of 1 .. DSC_MAX_NAME - 1 bytes without NUL, no flag but
 * DSC_GET_FLAG_VERSION, version 0 without it, 1 <= count <= max_count), else 0. */
int dsc_mget_head_valid(dsc_str_t dataset, uint32_t flags, uint64_t version, uint32_t count,
                        uint32_t max_count);

/* Returns the bytes written (DSC_MGET_REQ_HEAD + count * 8), DSC_ENOSPC (cap too small) or
 * DSC_EINVAL (a value the decoder would reject: dataset empty, over 63 bytes or with a NUL, flags
 * other than 0 / DSC_GET_FLAG_VERSION, a non-zero version without the flag, count 0 or over
 * DSC_MGET_MAX_ENTRIES, items NULL). */
int dsc_mget_req_encode(const dsc_mget_req_t *req, uint8_t *out, size_t cap);
/* Returns 0 and *out (dataset and raw point into body), or DSC_EBADFRAME for any value the
 * encoder refuses, truncation or trailing bytes. On error *out is untouched. */
int dsc_mget_req_decode(const uint8_t *body, size_t len, dsc_mget_req_t *out);
/* Item i (< req->count) of a decoded or an encoding request. */
void dsc_mget_item_at(const dsc_mget_req_t *req, uint32_t i, dsc_mget_item_t *out);

/* The OK answer: u32 count (the request's), u32 reserved 0, count records (u32 status, u32
 * reserved 0, a 48-byte chunk entry: the chunk's index entry when status is DSC_STATUS_OK, all
 * zero bytes otherwise), then the stored bytes of the OK entries in request order. Writes the
 * prefix: returns DSC_MGET_RESP_PREFIX(count), DSC_ENOSPC, or DSC_EINVAL (count 0 or over the
 * maximum, an OK entry the decoder would reject). status[i] != OK ignores entries[i]. */
int dsc_mget_resp_prefix_encode(const uint32_t *status, const dsc_chunk_entry_t *entries,
                                uint32_t count, uint8_t *out, size_t cap);

typedef struct dsc_mget_resp {
    uint32_t count;
    const uint8_t *records; /* count records of DSC_MGET_RECORD_SIZE bytes */
    const uint8_t *data;    /* the stored bytes (NULL after dsc_mget_resp_prefix_decode) */
    uint64_t data_len;      /* sum of the OK entries' stored_len */
    uint32_t ok;            /* entries with status OK */
} dsc_mget_resp_t;

/* Streaming receive, as for GET: read the first 8 body bytes, ask dsc_mget_resp_prefix_size for
 * the prefix's length (DSC_EBADFRAME for len < 8, a count of 0 or over DSC_MGET_MAX_ENTRIES, a
 * non-zero reserved word), read the rest of it, and dsc_mget_resp_prefix_decode validates it
 * against the frame's body_len (len must equal the prefix size): every record's reserved word
 * 0; an OK record's entry with a known codec, raw_len <= DSC_CHUNK_MAX_RAW, stored_len ==
 * raw_len for raw chunks, zero padding; any other record's entry all zero; the OK entries'
 * stored_len summing exactly to body_len - prefix. Returns the size / 0, or DSC_EBADFRAME (*out
 * untouched). */
int dsc_mget_resp_prefix_size(const uint8_t *head, size_t len);
int dsc_mget_resp_prefix_decode(const uint8_t *prefix, size_t len, uint64_t body_len,
                                dsc_mget_resp_t *out);
/* A whole answer body in memory: as above, with data pointing at the stored bytes. */
int dsc_mget_resp_decode(const uint8_t *body, size_t len, dsc_mget_resp_t *out);
/* Record i (< resp->count) of a decoded answer: its status (DSC_STATUS_*, any value a newer
 * server sends) and, when OK, its entry (zeros otherwise). O(1). Returns the status, or
 * DSC_ERANGE for i out of range. */
int64_t dsc_mget_resp_record(const dsc_mget_resp_t *resp, uint32_t i, dsc_chunk_entry_t *entry);

#endif
