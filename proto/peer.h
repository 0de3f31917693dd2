/* PEER_READ (proto/PROTOCOL.md "PEER_READ request"): a server warming a shard it owns reads the
 * shard file's bytes from a live replica that holds it in RAM, instead of the backing storage.
 * Pure encode/decode over memory: no I/O, no allocation, safe on hostile input
 * (tests/fuzz/fuzz_peer.c). */
#ifndef DSC_PEER_H
#define DSC_PEER_H

#include "protocol.h"

#include <stddef.h>
#include <stdint.h>

#define DSC_PEER_READ_MAX (8u << 20) /* bytes in one PEER_READ answer */
#define DSC_PEER_FLAG_VERSION 0x1u   /* the version field names the dataset version */
/* Largest body: dataset string, shard, flags, version, offset, length. */
#define DSC_PEER_REQ_MAX_BODY (2 + (DSC_MAX_NAME - 1) + 4 + 4 + 8 + 8 + 4)

/* Bytes [offset, offset + length) of the file of shard shard_id of dataset, as the server holds
 * it resident. The answer's body is exactly those bytes; a server never loads or reads through
 * for it (a shard not resident is answered UNAVAILABLE). */
typedef struct dsc_peer_req {
    dsc_str_t dataset; /* 1..63 bytes, no NUL */
    uint32_t shard_id;
    uint32_t flags;   /* 0 or DSC_PEER_FLAG_VERSION */
    uint64_t version; /* with DSC_PEER_FLAG_VERSION: the dataset version asked for; else 0 */
    uint64_t offset;  /* in the shard file */
    uint32_t length;  /* 1..DSC_PEER_READ_MAX; offset + length <= 2^63 */
} dsc_peer_req_t;

/* Returns the bytes written, DSC_ENOSPC (cap too small) or DSC_EINVAL (a value the decoder would
 * reject). */
int dsc_peer_req_encode(const dsc_peer_req_t *req, uint8_t *out, size_t cap);
/* Returns 0 and *out (dataset points into body), or DSC_EBADFRAME: truncation, trailing bytes,
 * a dataset name that is empty, too long or holds a NUL, flags other than 0 or
 * DSC_PEER_FLAG_VERSION, a version without the flag, length 0 or above DSC_PEER_READ_MAX,
 * offset + length above 2^63. On error *out is untouched. */
int dsc_peer_req_decode(const uint8_t *body, size_t len, dsc_peer_req_t *out);

#endif
