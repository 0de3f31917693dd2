/* What both builds of the server's RDMA transport share (rdma.h): the --rdma mode's parser and
 * the Prometheus text of the counters, written from dsc_rdma_srv_counters() of rdma.c (verbs) or
 * rdma_stub.c (without rdma-core's headers). */
#include "rdma.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dsc_rdma_mode_parse(const char *text, dsc_rdma_mode_t *out) {
    if (text == NULL)
        return DSC_EINVAL;
    if (strcmp(text, "off") == 0)
        *out = DSC_RDMA_MODE_OFF;
    else if (strcmp(text, "auto") == 0)
        *out = DSC_RDMA_MODE_AUTO;
    else if (strcmp(text, "required") == 0)
        *out = DSC_RDMA_MODE_REQUIRED;
    else
        return DSC_EINVAL;
    return 0;
}

char *dsc_rdma_srv_metrics_text(const dsc_rdma_srv_t *rs) {
    dsc_rdma_counters_t c;
    dsc_rdma_srv_counters(rs, &c);
    size_t cap = 8192;
    char *t = malloc(cap);
    if (t == NULL)
        return NULL;
    snprintf(
        t, cap,
        "# HELP dscache_rdma_enabled 1 when this server offers RDMA (a device and a registered "
        "arena).\n# TYPE dscache_rdma_enabled gauge\ndscache_rdma_enabled %d\n"
        "# HELP dscache_rdma_connections Connections with an RDMA queue pair now.\n"
        "# TYPE dscache_rdma_connections gauge\ndscache_rdma_connections %llu\n"
        "# HELP dscache_rdma_connects_total RDMA_CONNECTs that succeeded.\n"
        "# TYPE dscache_rdma_connects_total counter\ndscache_rdma_connects_total %llu\n"
        "# HELP dscache_rdma_connect_failures_total RDMA_CONNECTs refused or failed.\n"
        "# TYPE dscache_rdma_connect_failures_total counter\n"
        "dscache_rdma_connect_failures_total %llu\n"
        "# HELP dscache_rdma_leases RDMA leases outstanding (shard holds awaiting release).\n"
        "# TYPE dscache_rdma_leases gauge\ndscache_rdma_leases %llu\n"
        "# HELP dscache_rdma_lease_bytes Chunk bytes under outstanding leases.\n"
        "# TYPE dscache_rdma_lease_bytes gauge\ndscache_rdma_lease_bytes %llu\n"
        "# HELP dscache_rdma_leases_granted_total Leases granted.\n"
        "# TYPE dscache_rdma_leases_granted_total counter\ndscache_rdma_leases_granted_total %llu\n"
        "# HELP dscache_rdma_leases_expired_total Leases not released within the TTL (each "
        "fenced its connection).\n# TYPE dscache_rdma_leases_expired_total counter\n"
        "dscache_rdma_leases_expired_total %llu\n"
        "# HELP dscache_rdma_releases_unknown_total Released lease ids the connection did not "
        "hold.\n# TYPE dscache_rdma_releases_unknown_total counter\n"
        "dscache_rdma_releases_unknown_total %llu\n"
        "# HELP dscache_rdma_busy_total RDMA_GETs refused BUSY (max_lease_bytes).\n"
        "# TYPE dscache_rdma_busy_total counter\ndscache_rdma_busy_total %llu\n"
        "# HELP dscache_transport_bytes_total Chunk bytes served, by transport (rdma: granted "
        "for READ; rdma_inline: RDMA_GET answered inline).\n"
        "# TYPE dscache_transport_bytes_total counter\n"
        "dscache_transport_bytes_total{transport=\"rdma\"} %llu\n"
        "dscache_transport_bytes_total{transport=\"rdma_inline\"} %llu\n"
        "# HELP dscache_rdma_registered_bytes Arena bytes registered for remote READ.\n"
        "# TYPE dscache_rdma_registered_bytes gauge\ndscache_rdma_registered_bytes %llu\n"
        "# HELP dscache_rdma_regions Memory regions the arena is registered in (overlapping "
        "pieces when the device's max_mr_size splits it).\n"
        "# TYPE dscache_rdma_regions gauge\ndscache_rdma_regions %llu\n"
        "# HELP dscache_rdma_offered 1 while new connections are offered RDMA (0: RDMA off, or a "
        "port error or device failure since the last PORT_ACTIVE).\n"
        "# TYPE dscache_rdma_offered gauge\ndscache_rdma_offered %d\n"
        "# HELP dscache_rdma_qp_errors_total Connections fenced because the device reported an "
        "error on their queue pair (QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR).\n"
        "# TYPE dscache_rdma_qp_errors_total counter\ndscache_rdma_qp_errors_total %llu\n"
        "# HELP dscache_rdma_async_events_total Asynchronous events read from the RDMA device.\n"
        "# TYPE dscache_rdma_async_events_total counter\ndscache_rdma_async_events_total %llu\n",
        rs != NULL, (unsigned long long)c.connections, (unsigned long long)c.connections_total,
        (unsigned long long)c.connect_failures, (unsigned long long)c.leases,
        (unsigned long long)c.lease_bytes, (unsigned long long)c.leases_total,
        (unsigned long long)c.leases_expired, (unsigned long long)c.releases_unknown,
        (unsigned long long)c.busy, (unsigned long long)c.rdma_bytes,
        (unsigned long long)c.inline_bytes, (unsigned long long)c.registered_bytes,
        (unsigned long long)c.regions, rs != NULL && c.offered, (unsigned long long)c.qp_errors,
        (unsigned long long)c.async_events);
    size_t used = strlen(t);
    snprintf(
        t + used, cap - used,
        "# HELP dscache_rdma_windows 1 when RDMA READs are confined to leased chunks by type-2 "
        "memory windows; 0 when the device has none (credentials limited to some datasets are "
        "then refused RDMA).\n# TYPE dscache_rdma_windows gauge\ndscache_rdma_windows %d\n"
        "# HELP dscache_rdma_windows_bound Memory windows bound to leased chunks now.\n"
        "# TYPE dscache_rdma_windows_bound gauge\ndscache_rdma_windows_bound %llu\n"
        "# HELP dscache_rdma_window_ops_total Memory-window binds and invalidations completed.\n"
        "# TYPE dscache_rdma_window_ops_total counter\n"
        "dscache_rdma_window_ops_total{op=\"bind\"} %llu\n"
        "dscache_rdma_window_ops_total{op=\"invalidate\"} %llu\n"
        "# HELP dscache_rdma_window_seconds_total Event-loop time spent posting memory-window "
        "binds and invalidations and waiting for their completions.\n"
        "# TYPE dscache_rdma_window_seconds_total counter\n"
        "dscache_rdma_window_seconds_total{op=\"bind\"} %.6f\n"
        "dscache_rdma_window_seconds_total{op=\"invalidate\"} %.6f\n"
        "# HELP dscache_rdma_connect_refused_limited_total RDMA_CONNECTs refused because the "
        "credential is limited to some datasets and the device has no memory windows.\n"
        "# TYPE dscache_rdma_connect_refused_limited_total counter\n"
        "dscache_rdma_connect_refused_limited_total %llu\n"
        "# HELP dscache_rdma_leases_revoked_total Leases ended early because a credential reload "
        "removed the credential or its access to the lease's dataset.\n"
        "# TYPE dscache_rdma_leases_revoked_total counter\ndscache_rdma_leases_revoked_total "
        "%llu\n",
        rs != NULL && c.windows, (unsigned long long)c.windows_live,
        (unsigned long long)c.windows_bound, (unsigned long long)c.windows_invalidated,
        c.bind_seconds, c.invalidate_seconds, (unsigned long long)c.refused_limited,
        (unsigned long long)c.leases_revoked);
    return t;
}
