/* libFuzzer target for the HINT request body and its answer (proto/hint.h): the decoders never
 * crash, what they accept satisfies every documented bound and re-encodes to the same bytes. */
#include "hint.h"

#include <stdint.h>
#include <string.h>

#define FUZZ_ASSERT(cond)                                                                          \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

static dsc_hint_range_t ranges[DSC_HINT_MAX_RANGES];
static uint8_t out[DSC_HINT_MAX_BODY];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint32_t accepted = 0xA5A5A5A5u;
    int arc = dsc_hint_resp_decode(data, size, &accepted);
    FUZZ_ASSERT(arc == 0 || arc == DSC_EBADFRAME);
    FUZZ_ASSERT(arc == DSC_EBADFRAME || size == DSC_HINT_RESP_SIZE ||
                size == DSC_HINT_RESP_SHARE_SIZE);
    if (arc < 0)
        FUZZ_ASSERT(accepted == 0xA5A5A5A5u);
    if (size == DSC_HINT_RESP_SIZE)
        FUZZ_ASSERT(arc == 0);
    dsc_hint_resp_t share, untouched;
    memset(&share, 0x5A, sizeof share);
    untouched = share;
    int src = dsc_hint_resp_decode_share(data, size, &share);
    FUZZ_ASSERT(src == arc);
    if (src < 0) {
        FUZZ_ASSERT(memcmp(&share, &untouched, sizeof share) == 0);
    } else {
        FUZZ_ASSERT(share.accepted == accepted);
        FUZZ_ASSERT(share.has_share == (size == DSC_HINT_RESP_SHARE_SIZE));
        FUZZ_ASSERT((uint64_t)share.accepted + share.trimmed <= DSC_HINT_MAX_RANGES ||
                    !share.has_share);
        uint8_t again[DSC_HINT_RESP_SHARE_SIZE];
        int n = share.has_share ? dsc_hint_resp_encode_share(&share, again, sizeof again)
                                : dsc_hint_resp_encode(share.accepted, again, sizeof again);
        FUZZ_ASSERT(n >= 0 && (size_t)n == size && memcmp(again, data, size) == 0);
    }

    dsc_hint_req_t req;
    memset(&req, 0xA5, sizeof req);
    dsc_hint_req_t before = req;
    int rc = dsc_hint_req_decode(data, size, &req);
    if (rc < 0) {
        FUZZ_ASSERT(rc == DSC_EBADFRAME);
        FUZZ_ASSERT(memcmp(&req, &before, sizeof req) == 0); /* untouched on error */
        return 0;
    }
    FUZZ_ASSERT(rc == 0 && size <= DSC_HINT_MAX_BODY);
    FUZZ_ASSERT(req.flags == 0 && req.dataset.len >= 1 && req.dataset.len < DSC_MAX_NAME);
    FUZZ_ASSERT(memchr(req.dataset.ptr, '\0', req.dataset.len) == NULL);
    FUZZ_ASSERT(req.range_count <= DSC_HINT_MAX_RANGES);
    FUZZ_ASSERT((const uint8_t *)req.dataset.ptr >= data &&
                (const uint8_t *)req.dataset.ptr + req.dataset.len <= data + size);
    FUZZ_ASSERT(req.raw >= data &&
                req.raw + (size_t)req.range_count * DSC_HINT_RANGE_SIZE == data + size);
    for (uint32_t i = 0; i < req.range_count; i++) {
        dsc_hint_range_at(&req, i, &ranges[i]);
        const dsc_hint_range_t *r = &ranges[i];
        FUZZ_ASSERT(r->chunk_count >= 1 && r->chunk_count <= DSC_HINT_MAX_RANGE_CHUNKS);
        FUZZ_ASSERT((uint64_t)r->first_chunk + r->chunk_count <= (1ull << 32));
        FUZZ_ASSERT(r->due_ms <= DSC_HINT_MAX_DUE_MS);
    }
    dsc_hint_req_t again = req;
    again.ranges = ranges;
    again.raw = NULL;
    int n = dsc_hint_req_encode(&again, out, sizeof out);
    FUZZ_ASSERT(n >= 0 && (size_t)n == size && memcmp(out, data, size) == 0);
    FUZZ_ASSERT(size == 0 || dsc_hint_req_encode(&again, out, size - 1) == DSC_ENOSPC);
    return 0;
}
