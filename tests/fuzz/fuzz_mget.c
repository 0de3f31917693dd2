/* libFuzzer target for the MGET request and answer bodies (proto/mget.h): the decoders never
 * crash, what they accept satisfies every documented bound, the streaming and whole-body answer
 * decoders agree, and accepted values re-encode to the same bytes. */
#include "mget.h"

#include <stdint.h>
#include <string.h>

#define FUZZ_ASSERT(cond)                                                                          \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

static dsc_mget_item_t items[DSC_MGET_MAX_ENTRIES];
static uint32_t statuses[DSC_MGET_MAX_ENTRIES];
static dsc_chunk_entry_t entries[DSC_MGET_MAX_ENTRIES];
static uint8_t out[DSC_MGET_RESP_PREFIX(DSC_MGET_MAX_ENTRIES) + DSC_MGET_MAX_REQ_BODY];

static void check_request(const uint8_t *data, size_t size) {
    dsc_mget_req_t req;
    memset(&req, 0xA5, sizeof req);
    dsc_mget_req_t before = req;
    int rc = dsc_mget_req_decode(data, size, &req);
    if (rc < 0) {
        FUZZ_ASSERT(rc == DSC_EBADFRAME);
        FUZZ_ASSERT(memcmp(&req, &before, sizeof req) == 0); /* untouched on error */
        return;
    }
    FUZZ_ASSERT(rc == 0 && size <= DSC_MGET_MAX_REQ_BODY);
    FUZZ_ASSERT(req.dataset.len >= 1 && req.dataset.len < DSC_MAX_NAME);
    FUZZ_ASSERT(memchr(req.dataset.ptr, '\0', req.dataset.len) == NULL);
    FUZZ_ASSERT((const uint8_t *)req.dataset.ptr >= data &&
                (const uint8_t *)req.dataset.ptr + req.dataset.len <= data + size);
    FUZZ_ASSERT((req.flags & ~DSC_GET_FLAG_VERSION) == 0);
    FUZZ_ASSERT((req.flags & DSC_GET_FLAG_VERSION) || req.version == 0);
    FUZZ_ASSERT(req.count >= 1 && req.count <= DSC_MGET_MAX_ENTRIES);
    FUZZ_ASSERT(size == DSC_MGET_REQ_HEAD(req.flags, req.dataset.len) +
                            (size_t)req.count * DSC_MGET_ITEM_SIZE);
    FUZZ_ASSERT(req.raw >= data && req.raw + (size_t)req.count * DSC_MGET_ITEM_SIZE == data + size);
    for (uint32_t i = 0; i < req.count; i++)
        dsc_mget_item_at(&req, i, &items[i]);
    dsc_mget_req_t again = req;
    again.items = items;
    again.raw = NULL;
    int n = dsc_mget_req_encode(&again, out, sizeof out);
    FUZZ_ASSERT(n >= 0 && (size_t)n == size && memcmp(out, data, size) == 0);
    FUZZ_ASSERT(dsc_mget_req_encode(&again, out, size - 1) == DSC_ENOSPC);
}

static void check_answer(const uint8_t *data, size_t size) {
    dsc_mget_resp_t resp;
    memset(&resp, 0xA5, sizeof resp);
    dsc_mget_resp_t before = resp;
    int rc = dsc_mget_resp_decode(data, size, &resp);
    /* The streaming path must agree with the whole-body decoder. */
    int psize = dsc_mget_resp_prefix_size(data, size);
    if (psize > 0 && (size_t)psize <= size) {
        dsc_mget_resp_t pre;
        int prc = dsc_mget_resp_prefix_decode(data, (size_t)psize, size, &pre);
        FUZZ_ASSERT(prc == rc);
        if (prc == 0)
            FUZZ_ASSERT(pre.count == resp.count && pre.data_len == resp.data_len &&
                        pre.ok == resp.ok && pre.data == NULL);
    } else {
        FUZZ_ASSERT(rc < 0);
    }
    if (rc < 0) {
        FUZZ_ASSERT(rc == DSC_EBADFRAME);
        FUZZ_ASSERT(memcmp(&resp, &before, sizeof resp) == 0);
        return;
    }
    FUZZ_ASSERT(resp.count >= 1 && resp.count <= DSC_MGET_MAX_ENTRIES && resp.ok <= resp.count);
    FUZZ_ASSERT(resp.data == data + DSC_MGET_RESP_PREFIX(resp.count));
    FUZZ_ASSERT(resp.data + resp.data_len == data + size);
    uint64_t total = 0;
    uint32_t ok = 0;
    for (uint32_t i = 0; i < resp.count; i++) {
        int64_t st = dsc_mget_resp_record(&resp, i, &entries[i]);
        FUZZ_ASSERT(st >= 0 && st <= UINT32_MAX);
        statuses[i] = (uint32_t)st;
        if (st != DSC_STATUS_OK)
            continue;
        ok++;
        FUZZ_ASSERT(entries[i].raw_len <= DSC_CHUNK_MAX_RAW);
        FUZZ_ASSERT(entries[i].codec == DSC_CODEC_RAW || entries[i].codec == DSC_CODEC_LZ4);
        FUZZ_ASSERT(total + entries[i].stored_len <= resp.data_len);
        /* Touch the first and last stored byte so ASan sees any bad pointer. */
        if (entries[i].stored_len > 0) {
            volatile uint8_t first = resp.data[total];
            volatile uint8_t last = resp.data[total + entries[i].stored_len - 1];
            (void)first;
            (void)last;
        }
        total += entries[i].stored_len;
    }
    FUZZ_ASSERT(total == resp.data_len && ok == resp.ok);
    FUZZ_ASSERT(dsc_mget_resp_record(&resp, resp.count, NULL) == DSC_ERANGE);
    int n = dsc_mget_resp_prefix_encode(statuses, entries, resp.count, out, sizeof out);
    FUZZ_ASSERT(n == psize && memcmp(out, data, (size_t)n) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    check_request(data, size);
    check_answer(data, size);
    return 0;
}
