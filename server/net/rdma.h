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

typedef struct dsc_server dsc_server_t;
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

/* ---- hooks of the server's event loops ----------------------------------------------------- */

/* Watches the device's async-event fd (set O_NONBLOCK) with a uv_poll_t on `loop` (a uv_loop_t,
 * before its thread runs). QP errors fence their connection on its own loop; PORT_ERR and
 * DEVICE_FATAL stop RDMA for new connections until PORT_ACTIVE. Takes NULL rs. */
void dsc__rdma_watch(dsc_rdma_srv_t *rs, void *loop);
/* Closes that watch (on the loop's thread, when the loop finishes). Takes NULL rs. */
void dsc__rdma_unwatch(dsc_rdma_srv_t *rs);
/* 1 when this server offers RDMA (the HELLO feature bit): started with a usable device. */
int dsc__rdma_offered(const dsc_rdma_srv_t *rs);

/* ---- hooks of the TCP connection (on its loop thread) -------------------------------------- */

/* RDMA_CONNECT on reply's connection: checks the request here, creates the QP and brings it to
 * RTR on the libuv thread pool (the connection waits as for a load, reply.h wait_begin), and
 * answers from the loop; a connection closed meanwhile only gets its QP destroyed. */
void dsc__rdma_on_connect(dsc_server_t *srv, dsc_reply_t *reply, uint64_t id, const uint8_t *body,
                          size_t len);
/* The lease ids of an RDMA_GET request: released now. Returns 0, or -1 when the connection has
 * no RDMA state (the caller answers BAD_REQUEST). */
int dsc__rdma_release(dsc_server_t *srv, dsc_reply_t *reply, const dsc_rdma_get_req_t *req);
/* 1 when one more lease of `bytes` would exceed the connection's bound (answer BUSY). */
int dsc__rdma_over_bound(dsc_reply_t *reply, uint64_t bytes);
/* Answers an RDMA_GET out of a hold (reply.h's get() contract): descriptors under a new lease,
 * or inline when the bytes are not in registered memory. */
int dsc__rdma_reply_get(dsc_server_t *srv, dsc_reply_t *reply, const dsc_get_answer_t *answer,
                        dsc_hold_t *hold);
/* The connection is closing: QP to ERR and destroyed, then every lease's hold dropped. */
void dsc__rdma_on_close(dsc_server_t *srv, dsc_reply_t *reply);
/* The connection's credential was removed or changed by a reload (removed != 0: the caller closes
 * the connection next): its QP is destroyed and its leases dropped now. Else it was narrowed:
 * every lease on a dataset it may no longer read is invalidated and dropped now (without memory
 * windows, a credential now limited to some datasets loses RDMA: the connection is fenced and
 * closed). */
void dsc__rdma_revoke(dsc_server_t *srv, dsc_reply_t *reply, int removed);

#endif
