/* The server's RDMA transport (PROTOCOL.md "RDMA"): the arena registered once for remote READ
 * (in overlapping pieces where the device's max_mr_size splits it), one RC queue pair per TCP
 * connection that asked for it (RDMA_CONNECT, set up on the libuv thread pool), and RDMA_GET
 * answered with (address, rkey, length, checksum) descriptors under leases = the shard hold + a
 * TTL. A lease that expires, a QP error reported on the device's async-event fd, or the
 * connection closing, fences the connection: its QP is moved to ERR and destroyed first, then its
 * holds are dropped. Per-connection state lives on the connection's event loop; the async events
 * are read on loop 0 and handed to the owning loop. */
#ifndef DSC_SERVER_RDMA_H
#define DSC_SERVER_RDMA_H

#include "reply.h"
#include "store.h"

#include <stdint.h>

typedef struct dsc_rdma_srv dsc_rdma_srv_t;

typedef enum dsc_rdma_mode {
    DSC_RDMA_MODE_OFF = 0,
    DSC_RDMA_MODE_AUTO = 1,     /* RDMA when a device is usable, else TCP only (one INFO line) */
    DSC_RDMA_MODE_REQUIRED = 2, /* no usable device is a start-up error */
} dsc_rdma_mode_t;

/* Parses "off" | "auto" | "required"; returns 0 or DSC_EINVAL. */
int dsc_rdma_mode_parse(const char *text, dsc_rdma_mode_t *out);

typedef struct dsc_rdma_srv_options {
    dsc_rdma_mode_t mode;
    uint32_t lease_ttl_ms;    /* 0: 10000 */
    uint64_t max_lease_bytes; /* per connection; 0: 256 MiB */
} dsc_rdma_srv_options_t;

/* Opens the device and registers the whole arena of `store` (REMOTE_READ, split at the device's
 * max_mr_size; the store is marked pinned first), logging the registration time. mode off, or
 * auto without a usable device: returns 0 with *out NULL (auto logs one INFO line with the
 * reason). required without one: logs an ERROR and returns DSC_EUNAVAIL. */
int dsc_rdma_srv_create(const dsc_rdma_srv_options_t *options, dsc_store_t *store,
                        dsc_rdma_srv_t **out);
/* Deregisters and closes (after the server: no connection may be left). Takes NULL. */
void dsc_rdma_srv_destroy(dsc_rdma_srv_t *rs);

typedef struct dsc_rdma_counters {
    uint64_t connections;         /* connections with a QP now */
    uint64_t connections_total;   /* RDMA_CONNECTs that succeeded */
    uint64_t connect_failures;    /* RDMA_CONNECTs refused or failed */
    uint64_t leases;              /* leases outstanding now */
    uint64_t lease_bytes;         /* bytes under them */
    uint64_t leases_total;        /* granted */
    uint64_t leases_expired;      /* not released within the TTL (each fenced its connection) */
    uint64_t releases_unknown;    /* released ids the connection did not hold */
    uint64_t rdma_bytes;          /* chunk bytes granted for READ */
    uint64_t inline_bytes;        /* chunk bytes of RDMA_GETs answered inline (read-through) */
    uint64_t busy;                /* RDMA_GETs refused for max_lease_bytes */
    uint64_t qp_errors;           /* connections fenced for a QP error event (QP_FATAL, ...) */
    uint64_t async_events;        /* async events read from the device */
    uint64_t offered;             /* 1 while new connections are offered RDMA (no port error) */
    uint64_t windows;             /* 1: READs confined by memory windows */
    uint64_t windows_bound;       /* binds completed */
    uint64_t windows_invalidated; /* invalidations completed */
    uint64_t windows_live;        /* windows bound now */
    double bind_seconds, invalidate_seconds; /* loop time spent posting and waiting for them */
    uint64_t refused_limited;  /* RDMA_CONNECTs refused: limited credential, no windows */
    uint64_t leases_revoked;   /* leases ended because a reload took their dataset away */
    uint64_t registered_bytes; /* arena bytes registered */
    uint64_t regions;          /* memory regions the arena is registered in */
    uint64_t region_overlap;   /* bytes adjacent regions share (0: one region) */
    double register_seconds;
} dsc_rdma_counters_t;
void dsc_rdma_srv_counters(const dsc_rdma_srv_t *rs, dsc_rdma_counters_t *out);
/* Prometheus text of the counters (malloc'd, caller frees; NULL when out of memory). */
char *dsc_rdma_srv_metrics_text(const dsc_rdma_srv_t *rs);

/* The RDMA layer over TCP connections (reply.h). offered() is the HELLO feature bit (started with
 * a usable device; after a port error RDMA_CONNECT is refused instead). connect() answers
 * RDMA_CONNECT (the QP is brought to RTR on the libuv thread pool; a connection closed meanwhile
 * only gets its QP destroyed) and puts the RDMA reply table on the connection. watch() reads the
 * device's async events on loop 0 (QP errors fence their connection on its own loop; PORT_ERR and
 * DEVICE_FATAL stop RDMA for new connections until PORT_ACTIVE). The table's get() answers an
 * RDMA_GET with descriptors under a new lease, or inline when the bytes are not in registered
 * memory; its close() moves the QP to ERR and destroys it, then drops every lease's hold; its
 * revoke() (a reload removed or changed the credential) destroys the QP and drops the leases, or,
 * when the credential was narrowed, ends the leases on datasets it may no longer read (without
 * memory windows a credential now limited to some datasets loses RDMA: fenced and closed).
 * Defined by rdma.c, or by rdma_stub.c (built instead without rdma-core's headers: no RDMA is
 * offered and RDMA_CONNECT is answered UNSUPPORTED). */
extern const dsc_reply_layer_t dsc__rdma_layer;

#endif
