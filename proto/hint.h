/* HINT (proto/PROTOCOL.md): a loader tells a server which chunk ranges it will ask for next and
 * when, so that the server reads the non-resident ones ahead into its staging area. Pure
 * encode/decode over memory: no I/O, no allocation, safe on hostile input
 * (tests/fuzz/fuzz_hint.c). */
#ifndef DSC_HINT_H
#define DSC_HINT_H

#include "protocol.h"

#include <stddef.h>
#include <stdint.h>

#define DSC_HINT_MAX_RANGES 1024     /* ranges in one HINT */
#define DSC_HINT_MAX_RANGE_CHUNKS 64 /* chunks in one range */
#define DSC_HINT_MAX_DUE_MS 600000u  /* a range due later than 10 minutes is not a hint */
#define DSC_HINT_RANGE_SIZE 16       /* bytes of one encoded range */
/* Largest body: flags, hinter, dataset string, count, ranges. */
#define DSC_HINT_MAX_BODY                                                                          \
    (4 + 8 + 2 + (DSC_MAX_NAME - 1) + 4 + DSC_HINT_MAX_RANGES * DSC_HINT_RANGE_SIZE)

/* Chunks [first_chunk, first_chunk + chunk_count) of shard shard_id, asked for in about due_ms
 * milliseconds from when the HINT is sent. */
typedef struct dsc_hint_range {
    uint32_t shard_id;
    uint32_t first_chunk;
    uint32_t chunk_count; /* 1..DSC_HINT_MAX_RANGE_CHUNKS, first_chunk + chunk_count <= 2^32 */
    uint32_t due_ms;      /* 0..DSC_HINT_MAX_DUE_MS */
} dsc_hint_range_t;

typedef struct dsc_hint_req {
    uint32_t flags;       /* 0 (reserved) */
    uint64_t hinter;      /* the loader's id, the same in every HINT it sends (0: anonymous) */
    dsc_str_t dataset;    /* 1..63 bytes, no NUL */
    uint32_t range_count; /* 0..DSC_HINT_MAX_RANGES (0: names the connection's loader only) */
    /* Encode: the ranges (range_count of them), in the order the loader will ask for them.
     * Decode: NULL; the ranges are read from raw with dsc_hint_range_at. */
    const dsc_hint_range_t *ranges;
    const uint8_t *raw; /* decode: range_count * DSC_HINT_RANGE_SIZE bytes inside the body */
} dsc_hint_req_t;

/* Returns the bytes written, DSC_ENOSPC (cap too small) or DSC_EINVAL (a value the decoder would
 * reject). */
int dsc_hint_req_encode(const dsc_hint_req_t *req, uint8_t *out, size_t cap);
/* Returns 0 and *out (dataset and raw point into body), or DSC_EBADFRAME: truncation, trailing
 * bytes, flags other than 0, a dataset name that is empty, too long or holds a NUL, a
 * range_count above DSC_HINT_MAX_RANGES, or a range out of bounds (chunk_count 0 or
 * above DSC_HINT_MAX_RANGE_CHUNKS, first_chunk + chunk_count above 2^32, due_ms above
 * DSC_HINT_MAX_DUE_MS). On error *out is untouched. */
int dsc_hint_req_decode(const uint8_t *body, size_t len, dsc_hint_req_t *out);
/* Range i (< req->range_count) of a decoded or an encoding request. */
void dsc_hint_range_at(const dsc_hint_req_t *req, uint32_t i, dsc_hint_range_t *out);

/* The OK answer: u32 ranges accepted for staging (being read ahead, already staged, or queued
 * to be, within the share of the hinter's credential and job). To a client whose HELLO set
 * DSC_FEATURE_HINT_SHARE the long answer follows it: u32 ranges trimmed (refused because that
 * share was full), u64 the share's bytes now, u64 the bytes it holds now (staged, being read, and
 * queued ranges at their estimate). */
#define DSC_HINT_RESP_SIZE 4
#define DSC_HINT_RESP_SHARE_SIZE 24
typedef struct dsc_hint_resp {
    uint32_t accepted;
    uint32_t trimmed;     /* long answer only (else 0) */
    uint64_t share_bytes; /* long answer only (else 0) */
    uint64_t held_bytes;  /* long answer only (else 0) */
    int has_share;        /* decode: 1 for the long answer, 0 for the 4-byte one */
} dsc_hint_resp_t;
/* The 4-byte answer. Returns DSC_HINT_RESP_SIZE or DSC_ENOSPC. */
int dsc_hint_resp_encode(uint32_t accepted, uint8_t *out, size_t cap);
/* The long answer (r->has_share ignored). Returns DSC_HINT_RESP_SHARE_SIZE or DSC_ENOSPC. */
int dsc_hint_resp_encode_share(const dsc_hint_resp_t *r, uint8_t *out, size_t cap);
/* Either answer: returns 0 and *accepted, or DSC_EBADFRAME (neither 4 nor 24 bytes). */
int dsc_hint_resp_decode(const uint8_t *body, size_t len, uint32_t *accepted);
/* Either answer: returns 0 and *out (has_share says which), or DSC_EBADFRAME (neither 4 nor 24
 * bytes, or a long answer whose accepted + trimmed exceeds DSC_HINT_MAX_RANGES; *out
 * untouched). */
int dsc_hint_resp_decode_share(const uint8_t *body, size_t len, dsc_hint_resp_t *out);

#endif
