/* The server state's own operation (server_core.h): the GET latency histogram, counted by the
 * request layer (dispatch.c) and read by server.c. */
#include "server_core.h"
#include "util.h"

const double dsc_get_latency_bounds[DSC_GET_LATENCY_BUCKETS] = {
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1.0, 5.0};

void dsc__server_count_get_latency(dsc_server_t *srv, uint64_t start_ns) {
    uint64_t ns = dsc_now_ns() - start_ns;
    double seconds = (double)ns / 1e9;
    int b = 0;
    while (b < DSC_GET_LATENCY_BUCKETS && seconds > dsc_get_latency_bounds[b])
        b++;
    atomic_fetch_add_explicit(&srv->get_latency[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&srv->get_latency_sum_ns, ns, memory_order_relaxed);
}
