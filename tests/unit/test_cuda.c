/* CUDA hand-off through the dlopen'ed runtime: on a machine without a device the loader's CUDA
 * layer answers DSC_ENODEVICE with a log line (checked, then the test SKIPs); with a device,
 * pinned and device buffers, the slot copy / hand-out / release event chain run clean. */
#include "cuda.h"
#include "testlib.h"

#include <string.h>

static char last_line[1024];

static void capture(void *ctx, int level, const char *message) {
    (void)ctx;
    (void)level;
    snprintf(last_line, sizeof last_line, "%s", message);
}

int main(void) {
    dsc_logger_t log;
    dsc__logger_init(&log, capture, NULL, DSC_LOG_DEBUG);
    dsc_cuda_t *cuda = NULL;
    int rc = dsc__cuda_open(0, &log, &cuda);
    if (rc == DSC_ENODEVICE) {
        CHECK(cuda == NULL);
        CHECK(last_line[0] != '\0'); /* the reason was logged */
        char reason[sizeof last_line];
        snprintf(reason, sizeof reason, "%s", last_line);
        CHECK(dsc__cuda_open(-5, &log, &cuda) == DSC_ENODEVICE || cuda != NULL);
        if (dsc_test_failures)
            return TEST_DONE();
        SKIP("no CUDA device here (%s)", reason);
    }
    REQUIRE(rc == 0 && cuda != NULL);
    CHECK(dsc__cuda_open(4096, &log, &(dsc_cuda_t *){NULL}) == DSC_ENODEVICE);
    const size_t bytes = 8u << 20;
    uint8_t *host = dsc__cuda_host_alloc(cuda, bytes);
    void *dev = dsc__cuda_dev_alloc(cuda, bytes);
    REQUIRE(host != NULL && dev != NULL);
    memset(host, 0x5A, bytes);
    dsc_cuda_slot_t slot;
    memset(&slot, 0, sizeof slot);
    REQUIRE(dsc__cuda_slot_init(cuda, &slot) == 0);
    double total_s = 0;
    uint64_t total_bytes = 0;
    for (int round = 0; round < 4; round++) {
        CHECK(dsc__cuda_slot_wait_copy(cuda, &slot) == 0);
        double s = -1;
        uint64_t b = 1;
        CHECK(dsc__cuda_slot_copy(cuda, &slot, dev, host, bytes, &s, &b) == 0);
        /* The previous round's copy is measured now: none before the first. */
        if (round == 0)
            CHECK(s == 0 && b == 0);
        else
            CHECK(s > 0 && b == bytes);
        total_s += s;
        total_bytes += b;
        CHECK(dsc__cuda_slot_hand_out(cuda, &slot, NULL) == 0);
        CHECK(dsc__cuda_slot_release(cuda, &slot, NULL) == 0);
    }
    /* 8 MiB over PCIe or NVLink: slower than 1 TB/s, faster than 100 MB/s. */
    CHECK(total_bytes == 3 * bytes);
    CHECK(total_s > total_bytes / 1e12 && total_s < total_bytes / 1e8);
    printf("3 slot copies of %zu MiB: %.1f GB/s (device time)\n", bytes >> 20,
           total_s > 0 ? total_bytes / total_s / 1e9 : 0.0);
    CHECK(dsc__cuda_slot_wait_copy(cuda, &slot) == 0);
    dsc__cuda_slot_close(cuda, &slot);
    dsc__cuda_dev_free(cuda, dev);
    dsc__cuda_host_free(cuda, host);
    dsc__cuda_close(cuda);
    return TEST_DONE();
}
