/* libFuzzer target for the PEER_READ request body (proto/peer.h): the decoder never crashes, what
 * it accepts satisfies every documented bound, points into the input and re-encodes to the same
 * bytes; on error the output is untouched. */
#include "peer.h"

#include <stdint.h>
#include <string.h>

#define FUZZ_ASSERT(cond)                                                                          \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dsc_peer_req_t req;
    memset(&req, 0xA5, sizeof req);
    dsc_peer_req_t before = req;
    int rc = dsc_peer_req_decode(data, size, &req);
    if (rc < 0) {
        FUZZ_ASSERT(rc == DSC_EBADFRAME);
        FUZZ_ASSERT(memcmp(&req, &before, sizeof req) == 0);
        return 0;
    }
    FUZZ_ASSERT(rc == 0 && size <= DSC_PEER_REQ_MAX_BODY);
    FUZZ_ASSERT(req.dataset.len >= 1 && req.dataset.len < DSC_MAX_NAME);
    FUZZ_ASSERT(memchr(req.dataset.ptr, '\0', req.dataset.len) == NULL);
    FUZZ_ASSERT((const uint8_t *)req.dataset.ptr >= data &&
                (const uint8_t *)req.dataset.ptr + req.dataset.len <= data + size);
    FUZZ_ASSERT((req.flags & ~DSC_PEER_FLAG_VERSION) == 0);
    FUZZ_ASSERT((req.flags & DSC_PEER_FLAG_VERSION) || req.version == 0);
    FUZZ_ASSERT(req.length >= 1 && req.length <= DSC_PEER_READ_MAX);
    FUZZ_ASSERT(req.offset + req.length <= (1ull << 63) && req.offset + req.length > req.offset);
    uint8_t again[DSC_PEER_REQ_MAX_BODY];
    int n = dsc_peer_req_encode(&req, again, sizeof again);
    FUZZ_ASSERT(n >= 0 && (size_t)n == size && memcmp(again, data, size) == 0);
    FUZZ_ASSERT(dsc_peer_req_encode(&req, again, (size_t)n - 1) == DSC_ENOSPC);
    return 0;
}
