/* RANGE (proto/PROTOCOL.md "RANGE"): sample ranges of chunks of several shards of one dataset in
 * one request; the answer carries, per chunk, only those samples' bytes of every field as a
 * decoded chunk of its own (the MGET answer layout, proto/mget.h). Pure encode/decode and the
 * extraction of a sub-chunk: no I/O, no allocation, safe on hostile input
 * (tests/fuzz/fuzz_range.c). */
#ifndef DSC_RANGE_H
#define DSC_RANGE_H

#include "mget.h"
#include "shard.h"

#include <stddef.h>
#include <stdint.h>

#define DSC_RANGE_MAX_ENTRIES 1024 /* chunks named by one RANGE request */
#define DSC_RANGE_MAX_RANGES 4096  /* sample ranges in one RANGE request, all chunks together */
#define DSC_RANGE_ITEM_SIZE 12     /* u32 shard_id, u32 chunk, u32 range_count */
#define DSC_RANGE_SPAN_SIZE 8      /* u32 first, u32 count */
/* Bytes of a request before its items: dataset string, flags, [version], count. */
#define DSC_RANGE_REQ_HEAD(flags, name_len) DSC_MGET_REQ_HEAD(flags, name_len)
/* Size of a request body with `entries` chunks and `ranges` ranges in all. */
#define DSC_RANGE_REQ_SIZE(flags, name_len, entries, ranges)                                       \
    (DSC_RANGE_REQ_HEAD(flags, name_len) + (uint32_t)(entries)*DSC_RANGE_ITEM_SIZE +               \
     (uint32_t)(ranges)*DSC_RANGE_SPAN_SIZE)
/* Largest request body (53 KiB: within dscached's 64 KiB max_body). */
#define DSC_RANGE_MAX_REQ_BODY                                                                     \
    DSC_RANGE_REQ_SIZE(DSC_GET_FLAG_VERSION, DSC_MAX_NAME - 1, DSC_RANGE_MAX_ENTRIES,              \
                       DSC_RANGE_MAX_RANGES)

/* Samples [first, first + count) of a chunk, counted from the chunk's first sample. */
typedef struct dsc_sample_span {
    uint32_t first;
    uint32_t count; /* >= 1 */
} dsc_sample_span_t;

/* One chunk named by a request and the samples wanted of it: range_count spans, each non-empty,
 * in increasing order, neither overlapping nor touching (first[k + 1] > first[k] + count[k]:
 * adjacent spans are one span, so the encoding is canonical). Any
 * shard and chunk values: a shard or chunk the dataset does not have is that entry's NOT_FOUND /
 * BAD_REQUEST, as in MGET; spans past the chunk's samples refuse the whole request. */
typedef struct dsc_range_item {
    uint32_t shard_id;
    uint32_t chunk;
    uint32_t range_count; /* 1..DSC_RANGE_MAX_RANGES */
    /* Encode: the spans. Decode: NULL; read them with dsc_range_span_at from raw. */
    const dsc_sample_span_t *spans;
    const uint8_t *raw;
} dsc_range_item_t;

typedef struct dsc_range_req {
    dsc_str_t dataset; /* 1..63 bytes, no NUL */
    uint32_t flags;    /* 0 or DSC_GET_FLAG_VERSION */
    uint64_t version;  /* with DSC_GET_FLAG_VERSION: the dataset version, else 0 */
    uint32_t count;    /* chunks, 1..DSC_RANGE_MAX_ENTRIES */
    uint32_t ranges;   /* decode: spans in all (1..DSC_RANGE_MAX_RANGES); encode: ignored */
    /* Encode: the items (count of them). Decode: NULL; walk them with dsc_range_item_next. */
    const dsc_range_item_t *items;
    const uint8_t *raw; /* decode: the items' bytes inside the body */
    size_t raw_len;
} dsc_range_req_t;

/* Returns the bytes written, DSC_ENOSPC (cap too small) or DSC_EINVAL (a value the decoder would
 * reject: a bad dataset name or flags, count 0 or over the maximum, more than
 * DSC_RANGE_MAX_RANGES spans in all, an item with no span, an empty span, spans that overlap,
 * touch or decrease, a span whose end passes 2^32 - 1, NULL pointers). */
int dsc_range_req_encode(const dsc_range_req_t *req, uint8_t *out, size_t cap);
/* Returns 0 and *out (pointers into body), or DSC_EBADFRAME for any value the encoder refuses,
 * truncation or trailing bytes. On error *out is untouched. O(body). */
int dsc_range_req_decode(const uint8_t *body, size_t len, dsc_range_req_t *out);
/* The next item of a decoded request: *pos starts at 0 and advances past it. Returns 1 and *out
 * (its spans read with dsc_range_span_at), or 0 past the last item. */
int dsc_range_item_next(const dsc_range_req_t *req, size_t *pos, dsc_range_item_t *out);
/* Span k (< item->range_count) of an item, decoded or being encoded. */
void dsc_range_span_at(const dsc_range_item_t *item, uint32_t k, dsc_sample_span_t *out);
/* Samples an item names in all (the answer's sample_count for it). */
uint64_t dsc_range_item_samples(const dsc_range_item_t *item);

/* The sub-chunk of a decoded chunk: the samples of the item's spans, in span order, laid out as
 * a decoded chunk of that many samples (proto/FORMAT.md: fixed fields field-major, then each
 * variable field's offsets, rebased to start at 0, and its rows). layout is the checked layout
 * of the whole chunk (dsc_chunk_layout, with `samples` samples). Pass out NULL to learn the
 * size. Returns the sub-chunk's bytes (> 0), DSC_ERANGE (a span past the chunk's samples),
 * DSC_ENOSPC (cap too small) or DSC_EOVERFLOW (over DSC_CHUNK_MAX_RAW). Pure; O(spans * fields
 * + bytes copied). */
int64_t dsc_range_extract(const dsc_schema_t *schema, const dsc_chunk_layout_t *layout,
                          const dsc_range_item_t *item, uint8_t *out, size_t cap);

#endif
