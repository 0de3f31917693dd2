/* The server's RDMA transport where rdma-core's headers were missing at build time (CMake builds
 * this file instead of rdma.c): --rdma auto serves over TCP only, --rdma required is a start-up
 * error, HELLO never grants DSC_FEATURE_RDMA and RDMA_CONNECT is answered UNSUPPORTED. */
#include "rdma.h"
#include "server_core.h"
#include "srvlog.h"

#include <stdlib.h>
#include <string.h>

int dsc_rdma_srv_create(const dsc_rdma_srv_options_t *options, dsc_store_t *store,
                        dsc_rdma_srv_t **out) {
    (void)store;
    *out = NULL;
    if (options->mode == DSC_RDMA_MODE_OFF)
        return 0;
    if (options->mode == DSC_RDMA_MODE_REQUIRED) {
        LOG_ERROR("--rdma required: built without rdma-core headers (infiniband/verbs.h)");
        return DSC_EUNAVAIL;
    }
    LOG_INFO("rdma: off (built without rdma-core headers); serving over TCP only");
    return 0;
}

void dsc_rdma_srv_destroy(dsc_rdma_srv_t *rs) {
    free(rs);
}

void dsc_rdma_srv_counters(const dsc_rdma_srv_t *rs, dsc_rdma_counters_t *out) {
    (void)rs; /* always NULL here */
    memset(out, 0, sizeof *out);
}

static int stub_offered(const dsc_server_t *srv) {
    (void)srv;
    return 0;
}

static void stub_connect(dsc_server_t *srv, dsc_reply_t *reply, uint64_t id, const uint8_t *body,
                         size_t len) {
    (void)body;
    (void)len;
    dsc__server_count_request(srv, DSC_OP_RDMA_CONNECT, DSC_STATUS_UNSUPPORTED);
    reply->ops->frame(reply, DSC_OP_RDMA_CONNECT, id, DSC_STATUS_UNSUPPORTED, "no RDMA", 7);
}

static void stub_watch(dsc_server_t *srv, void *loop) {
    (void)srv;
    (void)loop;
}

static void stub_unwatch(dsc_server_t *srv) {
    (void)srv;
}

const dsc_reply_layer_t dsc__rdma_layer = {
    .offered = stub_offered,
    .connect = stub_connect,
    .watch = stub_watch,
    .unwatch = stub_unwatch,
};
