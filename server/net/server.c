/* The server object: one libuv event loop per thread, each with its own SO_REUSEPORT listening
 * socket; start, stop (graceful drain), destroy and counters. Each loop owns its connections
 * (tcp.c, called through tcp.h; a loop ends in tcp.c once its connections are gone); the only
 * cross-thread traffic is a mailbox per loop that loader threads fill with finished loads, accepted
 * sockets dealt to the loops in turn, and the stop request. */
#include "server.h"
#include "rdma.h"
#include "server_core.h"
#include "srvlog.h"
#include "tcp.h"
#include "text.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- loops, mailbox, stop -------------------------------------------------------------- */

/* Stops accepting: the poll and back-off timer are closed, the listening socket too. */
static void stop_accepting(dsc_srv_loop_t *lc) {
    if (!uv_is_closing((uv_handle_t *)&lc->accept_poll))
        uv_close((uv_handle_t *)&lc->accept_poll, NULL);
    if (!uv_is_closing((uv_handle_t *)&lc->accept_timer))
        uv_close((uv_handle_t *)&lc->accept_timer, NULL);
    if (lc->listen_fd >= 0)
        close(lc->listen_fd);
    lc->listen_fd = -1;
}

static void mailbox_push(dsc_mailbox_t *box, dsc_waiter_t *w) {
    dsc_srv_loop_t *lc = (dsc_srv_loop_t *)((char *)box - offsetof(dsc_srv_loop_t, mailbox));
    w->next = NULL;
    pthread_mutex_lock(&lc->mb_lock);
    if (lc->mb_tail)
        lc->mb_tail->next = w;
    else
        lc->mb_head = w;
    lc->mb_tail = w;
    /* Under the lock: once the waiter is taken the loop may finish and be freed, and it takes
     * this lock before it does. */
    uv_async_send(&lc->wake);
    pthread_mutex_unlock(&lc->mb_lock);
}

static void on_drain_timeout(uv_timer_t *timer) {
    dsc_srv_loop_t *lc = timer->data;
    if (lc->conn_count)
        LOG_WARN("shutdown: %u connection(s) still busy after the drain time: closing them",
                 lc->conn_count);
    dsc__tcp_close_all(lc);
}

static void on_wake(uv_async_t *async) {
    dsc_srv_loop_t *lc = async->data;
    int fds[64];
    uint32_t nfds;
    do {
        pthread_mutex_lock(&lc->mb_lock);
        nfds = lc->handoff_len < 64 ? lc->handoff_len : 64;
        lc->handoff_len -= nfds;
        if (nfds)
            memcpy(fds, lc->handoff + lc->handoff_len, nfds * sizeof *fds);
        pthread_mutex_unlock(&lc->mb_lock);
        for (uint32_t i = 0; i < nfds; i++)
            dsc__tcp_adopt(lc, fds[i]);
    } while (nfds == 64);
    pthread_mutex_lock(&lc->mb_lock);
    dsc_waiter_t *list = lc->mb_head;
    lc->mb_head = lc->mb_tail = NULL;
    pthread_mutex_unlock(&lc->mb_lock);
    while (list) {
        dsc_waiter_t *w = list;
        list = w->next;
        w->fn(w);
    }
    dsc__tcp_fair_inbox(lc);
    if (atomic_load(&lc->srv->stop_requested) && !lc->stopping) {
        lc->stopping = 1;
        stop_accepting(lc);
        dsc__tcp_drain(lc);
        uint32_t secs = lc->srv->opt.drain_seconds ? lc->srv->opt.drain_seconds : 30;
        uv_timer_start(&lc->drain_timer, on_drain_timeout, (uint64_t)secs * 1000, 0);
        uv_unref((uv_handle_t *)&lc->drain_timer);
        dsc__loop_maybe_finish(lc);
    }
}

static void *loop_thread(void *arg) {
    dsc_srv_loop_t *lc = arg;
    uv_run(&lc->loop, UV_RUN_DEFAULT);
    return NULL;
}

/* A listening socket bound to addr with SO_REUSEPORT. Returns the fd or -errno. */
static int listen_socket(const struct sockaddr *addr, socklen_t len) {
    int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0 ||
        bind(fd, addr, len) != 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    return fd;
}

/* SO_REUSEPORT is for this process's own loops only: a port another process already listens on
 * (another dscached, which would then answer every other connection) is refused. A socket
 * without SO_REUSEPORT cannot bind a port someone listens on; it is closed before the loops'
 * sockets bind. Returns 0 or -errno (-EADDRINUSE: taken). */
static int port_is_free(const struct sockaddr *addr, socklen_t len) {
    int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1, rc = 0;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 || bind(fd, addr, len) != 0)
        rc = -errno;
    close(fd);
    return rc;
}

int dsc_server_start(dsc_catalog_t *cat, const dsc_server_options_t *options, dsc_server_t **out) {
    if (cat == NULL || options == NULL || out == NULL || options->threads == 0)
        return DSC_EINVAL;
    *out = NULL;
    char port_text[8];
    snprintf(port_text, sizeof port_text, "%u", (unsigned)options->port);
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    if (getaddrinfo(options->host, port_text, &hints, &res) != 0 || res == NULL)
        return DSC_EINVAL;
    struct sockaddr_storage addr;
    socklen_t addr_len = (socklen_t)res->ai_addrlen;
    memcpy(&addr, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    if (options->port != 0) {
        int free_rc = port_is_free((struct sockaddr *)&addr, addr_len);
        if (free_rc < 0)
            return free_rc == -EADDRINUSE ? DSC_EADDRINUSE : free_rc;
    }

    dsc_server_t *srv = calloc(1, sizeof *srv);
    if (srv == NULL)
        return DSC_ENOMEM;
    srv->cat = cat;
    srv->opt = *options;
    srv->layer = &dsc__rdma_layer; /* rdma.c, or rdma_stub.c without rdma-core's headers */
    srv->authz.store = options->credentials;
    srv->authz.allow_anonymous_admin = options->allow_anonymous_admin;
    srv->authz.failures = dsc_authfail_create();
    if (srv->authz.failures == NULL) {
        free(srv);
        return DSC_ENOMEM;
    }
    snprintf(srv->name, sizeof srv->name, "%s", options->name ? options->name : "dscached");
    srv->loops = calloc(options->threads, sizeof *srv->loops);
    if (srv->loops == NULL || dsc_jobs_create(0, 0, &srv->jobs) < 0) {
        dsc_authfail_destroy(srv->authz.failures);
        free(srv->loops);
        free(srv);
        return DSC_ENOMEM;
    }
    pthread_mutex_init(&srv->peer_lock, NULL);
    dsc_fq_budget_init(&srv->send_budget, options->send_rate, 0);
    dsc_fq_totals_init(&srv->fair_totals);
    dsc_fq_init(&srv->fq, 0, options->fair_off, &srv->fair_totals);
    int rc = 0;
    for (uint32_t i = 0; i < options->threads; i++) {
        dsc_srv_loop_t *lc = &srv->loops[i];
        lc->srv = srv;
        int fd = listen_socket((struct sockaddr *)&addr, addr_len);
        if (fd < 0) {
            rc = fd;
            break;
        }
        if (i == 0) {
            /* Port 0: the first socket picks the port and the others bind the same one. */
            struct sockaddr_storage bound;
            socklen_t blen = sizeof bound;
            getsockname(fd, (struct sockaddr *)&bound, &blen);
            srv->port =
                ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                  : ((struct sockaddr_in *)&bound)->sin_port);
            if (addr.ss_family == AF_INET6)
                ((struct sockaddr_in6 *)&addr)->sin6_port = htons(srv->port);
            else
                ((struct sockaddr_in *)&addr)->sin_port = htons(srv->port);
        }
        uv_loop_init(&lc->loop);
        lc->listen_fd = fd;
        lc->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        uv_poll_init_socket(&lc->loop, &lc->accept_poll, fd);
        lc->accept_poll.data = lc;
        uv_timer_init(&lc->loop, &lc->accept_timer);
        lc->accept_timer.data = lc;
        uv_timer_init(&lc->loop, &lc->tick);
        lc->tick.data = lc;
        uv_async_init(&lc->loop, &lc->wake, on_wake);
        lc->wake.data = lc;
        if (i == 0)
            srv->layer->watch(srv, &lc->loop);
        uv_timer_init(&lc->loop, &lc->drain_timer);
        lc->drain_timer.data = lc;
        uv_timer_init(&lc->loop, &lc->fair_timer);
        lc->fair_timer.data = lc;
        pthread_mutex_init(&lc->mb_lock, NULL);
        lc->mailbox.push = mailbox_push;
        srv->loop_count++;
        if (listen(fd, 1024) != 0) {
            rc = -errno;
            break;
        }
        if ((rc = uv_poll_start(&lc->accept_poll, UV_READABLE, dsc__tcp_on_acceptable)) < 0)
            break;
        uv_timer_start(&lc->tick, dsc__tcp_on_tick, DSC_TCP_TICK_MS, DSC_TCP_TICK_MS);
    }
    if (rc == 0) {
        for (uint32_t i = 0; i < srv->loop_count; i++) {
            if (pthread_create(&srv->loops[i].thread, NULL, loop_thread, &srv->loops[i]) != 0) {
                rc = DSC_ENOMEM;
                break;
            }
            srv->loops[i].thread_started = 1;
        }
    }
    if (rc < 0) {
        dsc_server_stop(srv);
        dsc_server_destroy(srv);
        return rc == -EADDRINUSE ? DSC_EADDRINUSE : rc;
    }
    *out = srv;
    return 0;
}

uint16_t dsc_server_port(const dsc_server_t *srv) {
    return srv->port;
}

void dsc_server_stop(dsc_server_t *srv) {
    if (srv == NULL)
        return;
    atomic_store(&srv->stop_requested, 1);
    for (uint32_t i = 0; i < srv->loop_count; i++)
        uv_async_send(&srv->loops[i].wake);
}

void dsc_server_set_cluster(dsc_server_t *srv, dsc_cluster_t *cluster) {
    atomic_store_explicit(&srv->cluster, cluster, memory_order_release);
}

void dsc_server_destroy(dsc_server_t *srv) {
    if (srv == NULL)
        return;
    /* Every loop thread is joined before any loop's mailbox goes: a loop still accepting hands
     * sockets to the others (handoff_push takes their mailbox lock) until it sees the stop. */
    for (uint32_t i = 0; i < srv->loop_count; i++)
        if (srv->loops[i].thread_started)
            pthread_join(srv->loops[i].thread, NULL);
    for (uint32_t i = 0; i < srv->loop_count; i++) {
        dsc_srv_loop_t *lc = &srv->loops[i];
        if (!lc->thread_started) {
            /* Never ran (start failed): close the handles and let the loop finish them. */
            lc->stopping = 1;
            stop_accepting(lc);
            dsc__loop_maybe_finish(lc);
            uv_run(&lc->loop, UV_RUN_DEFAULT);
        }
        uv_loop_close(&lc->loop);
        pthread_mutex_destroy(&lc->mb_lock);
    }
    pthread_mutex_destroy(&srv->peer_lock);
    dsc_fq_destroy(&srv->fq);
    dsc_fq_budget_destroy(&srv->send_budget);
    dsc_fq_totals_destroy(&srv->fair_totals);
    free(srv->peers);
    free(srv->loops);
    dsc_authfail_destroy(srv->authz.failures);
    dsc_jobs_destroy(srv->jobs);
    free(srv);
}

dsc_jobs_t *dsc_server_jobs(dsc_server_t *srv) {
    return srv ? srv->jobs : NULL;
}

void dsc_server_counters(const dsc_server_t *srv, dsc_server_counters_t *out) {
    memset(out, 0, sizeof *out);
    if (srv == NULL)
        return;
    dsc_server_t *s = (dsc_server_t *)srv;
    out->connections = atomic_load(&s->connections);
    out->connections_total = atomic_load(&s->connections_total);
    out->bytes_out = atomic_load(&s->bytes_out);
    out->protocol_errors = atomic_load(&s->protocol_errors);
    out->paused_reads = atomic_load(&s->paused_reads);
    out->timeouts = atomic_load(&s->timeouts);
    out->peer_refusals = atomic_load(&s->peer_refusals);
    out->held_bytes = atomic_load(&s->held_total);
    out->auth_failures = dsc_authfail_total(s->authz.failures);
    out->peer_read_bytes = atomic_load(&s->peer_read_bytes);
    for (int o = 0; o < DSC_SERVER_OPS; o++)
        for (int st = 0; st < DSC_SERVER_STATUSES; st++)
            out->requests[o][st] = atomic_load_explicit(&s->requests[o][st], memory_order_relaxed);
    uint64_t cumulative = 0;
    for (int b = 0; b <= DSC_GET_LATENCY_BUCKETS; b++) {
        cumulative += atomic_load_explicit(&s->get_latency[b], memory_order_relaxed);
        if (b < DSC_GET_LATENCY_BUCKETS)
            out->get_latency_buckets[b] = cumulative;
    }
    out->get_latency_count = cumulative;
    out->get_latency_sum_seconds =
        (double)atomic_load_explicit(&s->get_latency_sum_ns, memory_order_relaxed) / 1e9;
}

struct dsc_rdma_srv *dsc_server_rdma(const dsc_server_t *srv) {
    return srv ? srv->opt.rdma : NULL;
}

char *dsc_server_fair_metrics_text(dsc_server_t *srv, int names) {
    dsc_text_t t = {0};
    uint64_t waits = 0;
    if (srv != NULL) {
        pthread_mutex_lock(&srv->send_budget.lock);
        waits = srv->send_budget.waits;
        pthread_mutex_unlock(&srv->send_budget.lock);
    }
    dsc_text_add(&t,
                 "# HELP dscache_send_rate_bytes The --send-rate cap on TCP sending, bytes/s "
                 "(0: none).\n# TYPE dscache_send_rate_bytes gauge\ndscache_send_rate_bytes "
                 "%llu\n# HELP dscache_send_budget_waits_total Times answers waited for "
                 "--send-rate.\n# TYPE dscache_send_budget_waits_total counter\n"
                 "dscache_send_budget_waits_total %llu\n",
                 (unsigned long long)(srv ? srv->opt.send_rate : 0), (unsigned long long)waits);
    if (!names || srv == NULL)
        return dsc_text_take(&t);
    dsc_fq_total_t *list = malloc((DSC_FQ_STATS_MAX + 1) * sizeof *list);
    if (list == NULL) {
        free(dsc_text_take(&t));
        return NULL;
    }
    uint32_t n = dsc_fq_totals_snapshot(&srv->fair_totals, list, DSC_FQ_STATS_MAX + 1);
    static const struct {
        const char *name, *type, *help;
    } series[] = {
        {"dscache_job_sent_bytes_total", "counter", "Answer bytes sent under --send-rate."},
        {"dscache_job_sent_responses_total", "counter", "Answers sent under --send-rate."},
        {"dscache_job_queue_seconds_total", "counter",
         "Seconds the job's answers waited in its queue for --send-rate (sum)."},
        {"dscache_job_weight", "gauge", "The job's share weight (--job-weight; 1 by default)."},
    };
    for (size_t k = 0; k < sizeof series / sizeof series[0]; k++) {
        dsc_text_add(&t, "# HELP %s %s\n# TYPE %s %s\n", series[k].name, series[k].help,
                     series[k].name, series[k].type);
        for (uint32_t i = 0; i < n; i++) {
            const dsc_fq_total_t *e = &list[i];
            double v = k == 0   ? (double)e->sent_bytes
                       : k == 1 ? (double)e->sent_items
                       : k == 2 ? (double)e->queue_ns / 1e9
                                : (double)e->weight;
            if (e->owner[0] != '\0')
                dsc_text_add(&t, "%s{credential=\"%s\",job=\"%s\"} %.15g\n", series[k].name,
                             e->owner, e->name, v);
            else
                dsc_text_add(&t, "%s{job=\"%s\"} %.15g\n", series[k].name, e->name, v);
        }
    }
    free(list);
    return dsc_text_take(&t);
}
