/* libFuzzer target for the REPORT request body (with or without its straggler trailer) and its
 * answer's (proto/report.h): the decoders never crash, what they accept satisfies every
 * documented bound and re-encodes to the same bytes. */
#include "report.h"

#include <stdint.h>
#include <string.h>

#define FUZZ_ASSERT(cond)                                                                          \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

/* The answer: empty (nothing known), exactly its size or longer (later fields ignored). */
static void fuzz_resp(const uint8_t *data, size_t size) {
    dsc_report_resp_t resp;
    memset(&resp, 0xA5, sizeof resp);
    dsc_report_resp_t before = resp;
    int rc = dsc_report_resp_decode(data, size, &resp);
    if (rc <= 0) {
        FUZZ_ASSERT(rc == (size == 0 ? 0 : DSC_EBADFRAME));
        FUZZ_ASSERT(memcmp(&resp, &before, sizeof resp) == 0);
        return;
    }
    FUZZ_ASSERT(rc == 1 && size >= DSC_REPORT_RESP_SIZE && resp.flags == 0);
    uint8_t out[DSC_REPORT_RESP_SIZE];
    int n = dsc_report_resp_encode(&resp, out, sizeof out);
    FUZZ_ASSERT(n == DSC_REPORT_RESP_SIZE && memcmp(out, data, DSC_REPORT_RESP_SIZE) == 0);
    FUZZ_ASSERT(dsc_report_resp_encode(&resp, out, sizeof out - 1) == DSC_ENOSPC);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_resp(data, size);
    dsc_report_req_t req;
    memset(&req, 0xA5, sizeof req);
    dsc_report_req_t before = req;
    int rc = dsc_report_req_decode(data, size, &req);
    if (rc < 0) {
        FUZZ_ASSERT(rc == DSC_EBADFRAME);
        FUZZ_ASSERT(memcmp(&req, &before, sizeof req) == 0); /* untouched on error */
        return 0;
    }
    FUZZ_ASSERT(rc == 0 && (req.has_hedge == 0 || req.has_hedge == 1));
    FUZZ_ASSERT(dsc_report_job_valid(req.job.ptr, req.job.len));
    FUZZ_ASSERT(req.dataset.len >= 1 && req.dataset.len < DSC_MAX_NAME);
    FUZZ_ASSERT(req.world_size >= 1 && req.rank < req.world_size);
    FUZZ_ASSERT(req.stall_ppm <= DSC_REPORT_STALL_ONE);
    FUZZ_ASSERT(dsc_bottleneck_name(req.bottleneck) != NULL);
    FUZZ_ASSERT(req.verdict.len <= DSC_REPORT_MAX_VERDICT);
    /* Strings point inside the input. */
    FUZZ_ASSERT((const uint8_t *)req.job.ptr >= data &&
                (const uint8_t *)req.job.ptr + req.job.len <= data + size);
    FUZZ_ASSERT((const uint8_t *)req.dataset.ptr >= data &&
                (const uint8_t *)req.dataset.ptr + req.dataset.len <= data + size);
    uint8_t out[DSC_REPORT_MAX_BODY];
    int n = dsc_report_req_encode(&req, out, sizeof out);
    /* Re-encoded: the same bytes, up to the straggler trailer's end (what follows a whole one is
     * a later version's, ignored); without a trailer, exactly the input. */
    FUZZ_ASSERT(n > 0 && n <= DSC_REPORT_MAX_BODY && (size_t)n <= size &&
                memcmp(out, data, (size_t)n) == 0);
    FUZZ_ASSERT(req.has_hedge ? size >= (size_t)n : size == (size_t)n);
    if (req.has_hedge) {
        /* Stripped, it is a body an older server takes: decoded without a trailer. */
        dsc_report_req_t plain;
        size_t base = dsc_report_req_strip_hedge((size_t)n);
        FUZZ_ASSERT(dsc_report_req_decode(out, base, &plain) == 0 && plain.has_hedge == 0);
    }
    /* Every shorter buffer is refused, never overrun. */
    FUZZ_ASSERT(dsc_report_req_encode(&req, out, (size_t)n - 1) == DSC_ENOSPC);
    return 0;
}
