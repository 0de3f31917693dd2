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
    for (int round = 0; round < 4; round++) {
        CHECK(dsc__cuda_slot_wait_copy(cuda, &slot) == 0);
        CHECK(dsc__cuda_slot_copy(cuda, &slot, dev, host, bytes) == 0);
        CHECK(dsc__cuda_slot_hand_out(cuda, &slot, NULL) == 0);
        double s = dsc__cuda_slot_release(cuda, &slot, NULL);
        CHECK(s >= 0);
    }
    CHECK(dsc__cuda_slot_wait_copy(cuda, &slot) == 0);
    dsc__cuda_slot_close(cuda, &slot);
    dsc__cuda_dev_free(cuda, dev);
    dsc__cuda_host_free(cuda, host);
    dsc__cuda_close(cuda);
    return TEST_DONE();
}
