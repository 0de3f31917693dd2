/* Loader API, the top of the loader: options, create/destroy (wiring the stages and starting
 * their threads), and the consumer side (next). See pipeline.h and docs/architecture-client.md
 * for the layers; this file calls down into all of them and nothing calls back up into it. */
#include "loader.h"
#include "batch.h"
#include "decode.h"
#include "diag.h"
#include "dsc_sys.h"
#include "fetch.h"
#include "hedge.h"
#include "loader_options.h"
#include "mixture.h"
#include "pipeline.h"
#include "scheduler.h"
#include "sources.h"
#include "stats.h"
#include "util.h"

#include "view.h"
#include <sched.h>

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* ---- Create / destroy --------------------------------------------------------------------- */

/* The calling thread's last dsc_loader_create failure, in words. */
static _Thread_local char create_error[1024];

/* Why one server did not give the manifest, appended to buf at *used. */
static void explain_peer(const dsc_loader_t *loader, const dsc_peer_t *peer, char *buf, size_t cap,
                         size_t *used) {
    int r = peer->manifest_rc;
    uint16_t data_port = 0;
    char why[640];
    snprintf(why, sizeof why, "%s", dsc_strerror(r));
    if (r == DSC_EUNAVAIL) {
        /* conn.c says EUNAVAIL when the name does not resolve: say which. */
        char host[DSC_MEMBER_MAX];
        snprintf(host, sizeof host, "%s", peer->addr);
        char *colon = strrchr(host, ':');
        if (colon != NULL)
            *colon = '\0';
        if (host[0] == '[') {
            memmove(host, host + 1, strlen(host));
            char *end = strchr(host, ']');
            if (end)
                *end = '\0';
        }
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
        struct addrinfo *res = NULL;
        int g = getaddrinfo(host, NULL, &hints, &res);
        if (g != 0)
            snprintf(why, sizeof why, "host name %s not resolved (%s)", host, gai_strerror(g));
        if (res != NULL)
            freeaddrinfo(res);
    } else if ((r == DSC_ECLOSED || r == DSC_EPROTO || r == DSC_ECONNRESET || r == DSC_EBADMAGIC ||
                r == DSC_ETIMEDOUT) &&
               dsc_conn_http_probe(peer->addr, 1000, &data_port)) {
        /* No HELLO answer but HTTP: the loader was given the HTTP port. */
        char host[DSC_MEMBER_MAX];
        snprintf(host, sizeof host, "%s", peer->addr);
        char *colon = strrchr(host, ':');
        if (colon != NULL)
            *colon = '\0';
        if (data_port != 0)
            snprintf(why, sizeof why,
                     "that is dscached's HTTP port (it answers HTTP, not the data protocol); the "
                     "data port is %s:%u",
                     host, (unsigned)data_port);
        else
            snprintf(why, sizeof why,
                     "that port answers HTTP, not the dscache data protocol (an HTTP port?); give "
                     "the data port, the one dscached --listen gives (default 7070)");
    } else if (r == DSC_EVERSION) {
        snprintf(why, sizeof why, "protocol version not supported (another dscache version?)");
    } else if (r == DSC_ENOTFOUND) {
        char names[512];
        int n = dsc__view_list_datasets(loader, peer->addr, names, sizeof names);
        if (n > 0)
            snprintf(why, sizeof why, "dataset %s not found; it has: %s", loader->cfg.dataset,
                     names);
        else if (n == 0)
            snprintf(why, sizeof why, "dataset %s not found; it has no datasets",
                     loader->cfg.dataset);
        else
            snprintf(why, sizeof why, "dataset %s not found", loader->cfg.dataset);
    }
    int k =
        snprintf(buf + *used, cap - *used, "%sserver %s: %s", *used ? "; " : "", peer->addr, why);
    if (k > 0)
        *used = (size_t)k >= cap - *used ? cap - 1 : *used + (size_t)k;
}

/* create failed with rc: the thread's create_error says why (per server for the manifest). */
static void explain_create_failure(dsc_loader_t *loader, int rc, int manifest_step) {
    char text[sizeof create_error];
    size_t used = 0;
    text[0] = '\0';
    if (loader != NULL && manifest_step) {
        for (uint32_t i = 0; i < loader->net.peer_count && used + 1 < sizeof text; i++)
            if (loader->net.peers[i].manifest_rc < 0)
                explain_peer(loader, &loader->net.peers[i], text, sizeof text, &used);
    }
    if (used == 0 && loader != NULL) {
        pthread_mutex_lock(&loader->err_lock);
        snprintf(text, sizeof text, "%s", loader->err_text);
        pthread_mutex_unlock(&loader->err_lock);
    }
    if (text[0] == '\0')
        snprintf(text, sizeof text, "%s", dsc_strerror(rc));
    else if (loader != NULL && manifest_step && used > 0)
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR, "loader: no manifest of %s: %s",
                loader->cfg.dataset, text);
    snprintf(create_error, sizeof create_error, "%s", text);
}

DSC_EXTERN int dsc_loader_last_error(const dsc_loader_t *loader, char *buf, size_t cap) {
    char text[sizeof create_error];
    if (loader == NULL) {
        snprintf(text, sizeof text, "%s", create_error);
    } else {
        dsc_loader_t *l = (dsc_loader_t *)(uintptr_t)loader;
        pthread_mutex_lock(&l->err_lock);
        snprintf(text, sizeof text, "%s", l->err_text);
        pthread_mutex_unlock(&l->err_lock);
    }
    if (buf != NULL && cap > 0)
        snprintf(buf, cap, "%s", text);
    return (int)strlen(text);
}

static char *dup_str(const char *s) {
    if (s == NULL)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

static int start_threads(dsc_loader_t *loader, int reader) {
    pthread_mutex_lock(&loader->lock);
    int rc = 0;
    for (uint32_t s = 0; s < loader->net.peer_count && rc == 0; s++)
        rc = dsc__peer_start(loader, s);
    if (rc == 0 && loader->cfg.fallback != NULL)
        rc = dsc__peer_start(loader, DSC__PEER_FALLBACK);
    loader->net.threads_running = 1;
    pthread_mutex_unlock(&loader->lock);
    if (rc < 0)
        return rc;
    for (uint32_t i = 0; i < loader->work.worker_count; i++) {
        if (pthread_create(&loader->work.workers[i], NULL, dsc__worker_main, loader) != 0)
            return DSC_ENOMEM;
        loader->work.workers_started++;
    }
    if (!reader) { /* a reader (reader.c) plans nothing: its caller names the samples */
        if (pthread_create(&loader->sched.thread, NULL, dsc__sched_main, loader) != 0)
            return DSC_ENOMEM;
        loader->sched.started = 1;
    }
    if (loader->net.peer_count > 0) {
        if (pthread_create(&loader->view.thread, NULL, dsc__view_main, loader) != 0)
            return DSC_ENOMEM;
        loader->view.started = 1;
        if (pthread_create(&loader->hedge.thread, NULL, dsc__hedge_main, loader) != 0)
            return DSC_ENOMEM;
        loader->hedge.started = 1;
    }
    return 0;
}

/* Shuffle windows whose decoded chunks must be held at once for every chunk to be fetched once
 * per epoch (see dsc__options_cache_budget). */
/* The default shuffle window holds at most 8192 samples and about this many bytes, so that the
 * default cache (two windows) stays near 256 MiB on any sample size. */
#define AUTO_WINDOW_BYTES (64ull << 20)

/* reader 1: the loader of a dsc_reader_t (loader.h). */
static int loader_create(const dsc_loader_options_t *options, int reader, dsc_loader_t **out) {
    create_error[0] = '\0';
    if (options == NULL || out == NULL || options->struct_size < DSC__LOADER_OPTIONS_MIN_SIZE) {
        snprintf(create_error, sizeof create_error, "invalid loader options: %s",
                 options == NULL || out == NULL
                     ? "NULL options or out"
                     : "struct_size smaller than the first dsc_loader_options_t");
        return DSC_EINVAL;
    }
    if (options->struct_size >= offsetof(dsc_loader_options_t, n_sources) + sizeof(uint32_t) &&
        options->n_sources > 0) {
        if (reader) {
            snprintf(create_error, sizeof create_error,
                     "invalid reader options: n_sources %u: a reader reads one dataset",
                     options->n_sources);
            return DSC_EINVAL;
        }
        return dsc__mix_loader_create(options, out, create_error, sizeof create_error);
    }
    int manifest_step = 0;
    dsc_loader_t *loader = calloc(1, sizeof *loader);
    if (loader == NULL) {
        snprintf(create_error, sizeof create_error, "%s", dsc_strerror(DSC_ENOMEM));
        return DSC_ENOMEM;
    }
    pthread_mutex_init(&loader->err_lock, NULL);
    /* Copy what the caller's struct holds; newer fields keep their defaults. */
    dsc__options_defaults(&loader->cfg.opt);
    size_t n = options->struct_size < sizeof loader->cfg.opt ? options->struct_size
                                                             : sizeof loader->cfg.opt;
    memcpy(&loader->cfg.opt, options, n);
    loader->cfg.opt.struct_size = sizeof loader->cfg.opt;
    loader->cfg.reader = reader;
    if (reader) {
        /* One batch at a time, collated by the caller's thread: no plan, no rank split. */
        loader->cfg.opt.prefetch_batches = 2;
        loader->cfg.opt.decode_threads = 1; /* checked below; none is started */
        loader->cfg.opt.rank = 0;
        loader->cfg.opt.world_size = 1;
        loader->cfg.opt.shuffle = 0;
        loader->cfg.opt.drop_last = 0;
    }
    if (loader->cfg.opt.timeout_ms == 0)
        loader->cfg.opt.timeout_ms = 5000;
    if (loader->cfg.opt.max_held_bytes == 0)
        loader->cfg.opt.max_held_bytes = DSC__LOADER_DEFAULT_MAX_HELD_BYTES;
    dsc__logger_init(&loader->cfg.log, options->log_fn, options->log_ctx, options->log_level);
    loader->cfg.log.err_lock = &loader->err_lock;
    loader->cfg.log.err_buf = loader->err_text;
    loader->cfg.log.err_cap = sizeof loader->err_text;
    pthread_mutex_init(&loader->lock, NULL);
    pthread_cond_init(&loader->sched_cv, NULL);
    pthread_cond_init(&loader->io_cv, NULL);
    pthread_cond_init(&loader->work_cv, NULL);
    pthread_cond_init(&loader->cons_cv, NULL);
    pthread_cond_init(&loader->view.cv, NULL);
    loader->stats.created_at = loader->stats.last_log = dsc_now_s();
    loader->stats.st.struct_size = sizeof loader->stats.st;
    dsc__epoch_wire_reset(loader);
    int rc = dsc__options_check(&loader->cfg.opt, &loader->cfg.log);
    /* A reader has no ranks; with the caller's order the sampler splits them. */
    if (rc == 0 && !reader && loader->cfg.opt.order != DSC_ORDER_CALLER)
        rc = dsc__options_check_rank_env(&loader->cfg.opt, &loader->cfg.log);
    if (loader->cfg.opt.order == DSC_ORDER_CALLER)
        loader->cfg.opt.shuffle = 0; /* the order object only locates samples */
    if (rc < 0)
        goto fail;
    dsc__hedge_init(loader);
    rc = dsc__diag_init(loader, loader->stats.created_at); /* takes the job name while valid */
    loader->cfg.opt.job_name = NULL;                       /* the caller's string is not kept */
    if (rc < 0)
        goto fail;
    rc = DSC_ENOMEM;
    loader->cfg.dataset = dup_str(options->dataset);
    loader->cfg.fallback = dup_str(options->fallback_path);
    loader->cfg.opt.dataset = loader->cfg.dataset;
    loader->cfg.opt.fallback_path = loader->cfg.fallback;
    loader->cfg.opt.servers = NULL; /* the caller's string is not kept */
    loader->cfg.opt.auth_file = NULL;
    if (loader->cfg.dataset == NULL || (options->fallback_path && loader->cfg.fallback == NULL))
        goto fail;
    loader->cfg.cred = calloc(1, sizeof *loader->cfg.cred);
    if (loader->cfg.cred == NULL)
        goto fail;
    {
        /* Read once here (docs/security.md); the buffer is wiped, the secret kept for
         * reconnects until destroy. */
        const char *auth_file = options->struct_size > offsetof(dsc_loader_options_t, auth_file)
                                    ? options->auth_file
                                    : NULL;
        char why[512];
        int found = dsc__credential_load(auth_file, loader->cfg.cred, why, sizeof why);
        if (found < 0) {
            DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR, "%s", why);
            rc = found;
            goto fail;
        }
        if (found == 0) {
            free(loader->cfg.cred);
            loader->cfg.cred = NULL;
        } else {
            DSC_LOG(&loader->cfg.log, DSC_LOG_INFO, "authenticating as %s", loader->cfg.cred->name);
        }
    }
    loader->cfg.source_env = (dsc_source_env_t){
        .log = &loader->cfg.log,
        .pool = &loader->cfg.pool,
        .dataset = loader->cfg.dataset,
        .timeout_ms = loader->cfg.opt.timeout_ms,
        .cred = loader->cfg.cred,
        .counters = &loader->cfg.transport_counters,
    };
    /* transport: the option, else $DSCACHE_TRANSPORT, else auto. */
    const char *transport = options->struct_size > offsetof(dsc_loader_options_t, transport)
                                ? options->transport
                                : NULL;
    const char *transport_from = "transport";
    if (transport == NULL || transport[0] == '\0') {
        transport = getenv("DSCACHE_TRANSPORT");
        transport_from = "DSCACHE_TRANSPORT";
    }
    if (transport == NULL || transport[0] == '\0')
        transport = "auto";
    loader->cfg.opt.transport = NULL; /* the caller's string is not kept */
    if (dsc__transport_parse(transport, &loader->cfg.source_env.transport) < 0) {
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                "invalid loader options: %s \"%s\" (tcp, rdma or auto)", transport_from, transport);
        rc = DSC_EINVAL;
        goto fail;
    }
    rc = DSC_ENOMEM;
    loader->net.peers = calloc(DSC_LOADER_MAX_PEERS + 1, sizeof(dsc_peer_t));
    if (loader->net.peers == NULL)
        goto fail;
    dsc_peer_t *files = &loader->net.peers[DSC__PEER_FALLBACK];
    snprintf(files->addr, DSC_MEMBER_MAX, "fallback files");
    files->used = 1;
    files->alive = loader->cfg.fallback != NULL;
    files->io = calloc(loader->cfg.opt.connections, sizeof(dsc_io_t));
    if (files->io == NULL)
        goto fail;
    if (loader->cfg.fallback != NULL) {
        files->source = &dsc__source_files;
        if (files->source->endpoint_open(&loader->cfg.source_env, loader->cfg.fallback,
                                         &files->endpoint) < 0)
            goto fail;
    }
    if (options->servers != NULL && options->servers[0] != '\0') {
        loader->cfg.servers_spec = dup_str(options->servers);
        if (loader->cfg.servers_spec == NULL)
            goto fail;
        dsc_members_t members = {0};
        rc = dsc_members_resolve(options->servers, &members);
        if (rc == 0) {
            pthread_mutex_lock(&loader->lock);
            rc = dsc__view_adopt(loader, &members);
            pthread_mutex_unlock(&loader->lock);
        }
        dsc_members_free(&members);
        if (rc < 0) {
            char why[256];
            dsc__options_explain_servers(options->servers, rc, why, sizeof why);
            DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR, "servers \"%s\": %s", options->servers, why);
            goto fail;
        }
        loader->view.changes = 0; /* the first view is not a change */
    }
    /* Freed chunk buffers are kept for reuse up to the memory the budgets allow anyway: no
     * page faults and munmaps on the hot path. */
    dsc__bufpool_init(&loader->cfg.pool,
                      (size_t)(loader->cfg.opt.inflight_bytes +
                               (loader->cfg.opt.cache_bytes ? loader->cfg.opt.cache_bytes
                                                            : DSC__LOADER_DEFAULT_CACHE_BYTES)));

    rc = dsc__fetch_manifest(loader);
    if (rc < 0) {
        manifest_step = 1;
        goto fail;
    }
    const dsc_manifest_t *m = loader->cfg.manifest;
    loader->cfg.samples = m->samples;
    loader->cfg.field_count = m->schema.field_count;
    rc = dsc__options_setup_var_fields(loader, options);
    if (rc < 0)
        goto fail;
    /* Decoded bytes per sample, for the budgets: variable fields count their mean size. */
    loader->cfg.sample_bytes = dsc__chunk_raw_estimate(m, 1);
    if (loader->cfg.samples == 0 || loader->cfg.sample_bytes == 0) {
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR, "dataset %s is empty", loader->cfg.dataset);
        rc = DSC_EBADMANIFEST;
        goto fail;
    }
    rc = reader || dsc__order_is_caller(loader) ? 0 : dsc__options_check_epoch_size(loader);
    if (rc < 0)
        goto fail;
    if (loader->cfg.opt.shuffle_window == 0) { /* a window of at most AUTO_WINDOW_BYTES */
        uint64_t w = AUTO_WINDOW_BYTES / loader->cfg.sample_bytes;
        loader->cfg.opt.shuffle_window = (uint32_t)(w >= 8192 ? 8192 : w ? w : 1);
    }
    loader->cfg.source_env.manifest = m;
    /* The RDMA slab is sized by the largest request, so after the manifest (fetched over TCP);
     * registered before any I/O thread connects. $DSCACHE_RDMA_SLAB_BYTES overrides the size
     * (a tight memlock limit), never below twice the largest request. */
    uint64_t slab_bytes = dsc__rdma_slab_bytes(m, loader->cfg.opt.inflight_bytes);
    const char *slab_env = getenv("DSCACHE_RDMA_SLAB_BYTES");
    if (loader->cfg.source_env.transport != DSC_TRANSPORT_TCP && slab_env != NULL &&
        slab_env[0] != '\0') {
        if (dsc_parse_size(slab_env, &slab_bytes) < 0) {
            DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                    "invalid DSCACHE_RDMA_SLAB_BYTES \"%s\" (a size: 64M, 1G, ...)", slab_env);
            rc = DSC_EINVAL;
            goto fail;
        }
        uint64_t least = dsc__rdma_slab_bytes(m, 0);
        slab_bytes = slab_bytes < least ? least : slab_bytes;
    }
    rc = dsc__rdma_client_open(loader->cfg.source_env.transport, slab_bytes, &loader->cfg.log,
                               &loader->cfg.source_env.rdma);
    if (rc < 0)
        goto fail;
    if (loader->net.peer_count > 0)
        dsc__view_learn_replicas(loader);
    else if (loader->cfg.opt.replicas == 0)
        loader->cfg.opt.replicas = 1; /* fallback files only: placement is not used */
    if (!reader)
        dsc__options_cache_budget(loader);
    else if (loader->cfg.opt.cache_bytes == 0)
        loader->cfg.opt.cache_bytes = DSC__LOADER_DEFAULT_CACHE_BYTES;
    loader->cfg.cache_bytes = loader->cfg.opt.cache_bytes;
    if (dsc__order_is_caller(loader))
        dsc__options_order_ahead(loader);
    if (loader->cfg.opt.device >= 0) {
        rc = dsc__cuda_open(loader->cfg.opt.device, &loader->cfg.log, &loader->cfg.cuda);
        if (rc < 0)
            goto fail;
        dsc__decode_probe_gpu(loader);
    }
    loader->work.assist = !loader->cfg.opt.no_assist && loader->cfg.cuda == NULL;
    loader->cons.slot_count = loader->cfg.opt.prefetch_batches;
    rc = dsc__slots_alloc(loader);
    if (rc < 0)
        goto fail;
    rc = reader ? 0 : dsc__sched_init(loader); /* a reader makes its own chunk table */
    if (rc < 0)
        goto fail;
    rc = DSC_ENOMEM;
    loader->work.worker_count = reader ? 0 : loader->cfg.opt.decode_threads;
    loader->work.workers = calloc(loader->work.worker_count + 1, sizeof(pthread_t));
    if (loader->work.workers == NULL)
        goto fail;
    rc = start_threads(loader, reader);
    if (rc < 0)
        goto fail;
    DSC_LOG(&loader->cfg.log, DSC_LOG_INFO,
            "loader: dataset %s (%llu samples, %u shards), %u server(s), batch %u, rank %u/%u, "
            "%u slots of %zu bytes%s",
            loader->cfg.dataset, (unsigned long long)loader->cfg.samples, m->shard_count,
            loader->net.peer_count, loader->cfg.opt.batch_size, loader->cfg.opt.rank,
            loader->cfg.opt.world_size, loader->cons.slot_count, loader->cons.slot_bytes,
            loader->cfg.cuda ? " (pinned, CUDA)" : "");
    *out = loader;
    return 0;
fail:
    explain_create_failure(loader, rc, manifest_step);
    dsc_loader_destroy(loader);
    return rc;
}

DSC_EXTERN int dsc_loader_create(const dsc_loader_options_t *options, dsc_loader_t **out) {
    return loader_create(options, 0, out);
}

int dsc__loader_create_reader(const dsc_loader_options_t *options, dsc_loader_t **out) {
    return loader_create(options, 1, out);
}

DSC_EXTERN void dsc_loader_destroy(dsc_loader_t *loader) {
    if (loader == NULL)
        return;
    if (loader->mix != NULL) {
        dsc__mix_loader_destroy(loader);
        return;
    }
    pthread_mutex_lock(&loader->lock);
    /* Batches kept past next() (retained, or DLPack tensors alive) lose their memory now: the
     * caller hears it, rather than reading freed slots later without a word. */
    uint32_t kept = 0;
    for (uint32_t i = 0; loader->cons.slots != NULL && i < loader->cons.slot_count; i++) {
        const dsc_batch_slot_t *slot = loader->cons.slots[i];
        if (slot != NULL && slot->refs > (&slot->batch == loader->cons.current ? 1u : 0u))
            kept++;
    }
    if (kept > 0)
        DSC_LOG(&loader->cfg.log, DSC_LOG_WARN,
                "loader destroyed while %u batch(es) are still held (retained, or DLPack tensors "
                "of them alive): their memory is freed now and any view of it is invalid; "
                "release them (or delete the tensors) before dsc_loader_destroy",
                kept);
    loader->stop = 1;
    pthread_cond_broadcast(&loader->sched_cv);
    pthread_cond_broadcast(&loader->io_cv);
    pthread_cond_broadcast(&loader->work_cv);
    pthread_cond_broadcast(&loader->cons_cv);
    pthread_cond_broadcast(&loader->view.cv);
    /* Wake threads blocked in their data source or on the view thread's connection. */
    if (loader->net.peers != NULL)
        for (uint32_t p = 0; p <= DSC__PEER_FALLBACK; p++) {
            dsc_peer_t *peer = &loader->net.peers[p];
            for (uint32_t i = 0; peer->io != NULL && i < loader->cfg.opt.connections; i++)
                if (peer->io[i].conn != NULL)
                    peer->source->wake(peer->io[i].conn);
        }
    dsc_conn_shutdown(loader->view.conn);
    dsc_conn_shutdown(loader->hedge.conn);
    pthread_mutex_unlock(&loader->lock);
    if (loader->view.started)
        pthread_join(loader->view.thread, NULL);
    if (loader->hedge.started)
        pthread_join(loader->hedge.thread, NULL);
    if (loader->sched.started)
        pthread_join(loader->sched.thread, NULL);
    for (uint32_t i = 0; i < loader->work.workers_started; i++)
        pthread_join(loader->work.workers[i], NULL);
    if (loader->net.peers != NULL)
        for (uint32_t p = 0; p <= DSC__PEER_FALLBACK; p++)
            for (uint32_t i = 0; loader->net.peers[p].io != NULL && i < loader->cfg.opt.connections;
                 i++)
                if (loader->net.peers[p].io[i].started)
                    pthread_join(loader->net.peers[p].io[i].thread, NULL);
    /* Threads are gone: the servers hear that the job finished, then what is left is freed (I/O
     * threads freed the cancelled entries they held). */
    if (loader->net.threads_running)
        dsc__diag_final_report(loader);
    dsc__hedge_free(loader);
    dsc__sched_free(loader);
    dsc__diag_free(loader);
    if (loader->net.peers != NULL)
        for (uint32_t p = 0; p <= DSC__PEER_FALLBACK; p++) {
            dsc_peer_t *peer = &loader->net.peers[p];
            for (uint32_t i = 0; peer->io != NULL && i < loader->cfg.opt.connections; i++)
                if (peer->io[i].conn != NULL)
                    peer->source->close(peer->io[i].conn);
            free(peer->io);
            if (peer->endpoint != NULL)
                peer->source->endpoint_close(peer->endpoint);
        }
    dsc__rdma_client_close(loader->cfg.source_env.rdma); /* after every connection */
    free(loader->work.workers);
    free(loader->work.assist_ctx.scratch);
    dsc__image_ctx_destroy(loader->work.assist_ctx.image);
    dsc__slots_free(loader);
    dsc__cuda_close(loader->cfg.cuda);
    dsc_manifest_free(loader->cfg.manifest);
    dsc_members_free(&loader->net.members);
    free(loader->net.member_peer);
    free(loader->cfg.servers_spec);
    dsc__credential_wipe(loader->cfg.cred);
    free(loader->cfg.cred);
    free(loader->net.peers);
    if (loader->cfg.pool.max_cached)
        dsc__bufpool_close(&loader->cfg.pool);
    free(loader->cfg.dataset);
    free(loader->cfg.fallback);
    pthread_mutex_destroy(&loader->lock);
    pthread_cond_destroy(&loader->sched_cv);
    pthread_cond_destroy(&loader->io_cv);
    pthread_cond_destroy(&loader->work_cv);
    pthread_cond_destroy(&loader->cons_cv);
    pthread_cond_destroy(&loader->view.cv);
    pthread_mutex_destroy(&loader->err_lock);
    free(loader);
}

/* ---- Consumer ------------------------------------------------------------------------------ */

/* Decoded bytes of a collated batch of `count` samples in slot. */
static uint64_t batch_bytes(const dsc_loader_t *loader, const dsc_batch_slot_t *slot,
                            uint32_t count) {
    const dsc_schema_t *schema = &loader->cfg.manifest->schema;
    uint64_t bytes = (uint64_t)count * schema->sample_bytes; /* the fixed fields */
    for (uint32_t f = 0; loader->cfg.var_count > 0 && f < schema->field_count; f++) {
        const dsc_var_field_t *v = &loader->cfg.var[f];
        if (v->image)
            bytes += (uint64_t)count * v->spec.height * v->spec.width * 3;
        else if (v->is_var)
            bytes += slot->var_rows[f] * v->row_bytes * (v->pad ? count : 1u);
    }
    return bytes;
}

/* dsc_loader_next; with retain, the batch handed out gets that reference for the caller too (as
 * dsc_batch_retain), under the same lock. */
static int loader_next(dsc_loader_t *loader, dsc_batch_t **out, int retain) {
    if (loader->mix != NULL)
        return dsc__mix_loader_next(loader, out, retain);
    double t0 = dsc_now_s();
    pthread_mutex_lock(&loader->lock);
    if (loader->stats.last_return > 0)
        loader->stats.st.compute_seconds += t0 - loader->stats.last_return;
    if (loader->cons.want_epoch < loader->cons.cons_epoch) { /* the next epoch is asked for */
        loader->cons.want_epoch = loader->cons.cons_epoch;
        pthread_cond_broadcast(&loader->sched_cv);
    }
    dsc__batch_release_current(loader);
    int rc = 0;
    dsc_step_t *st = NULL;
    /* What the wait is spent on, for the verdict: re-read at each wake-up (diag.c). */
    int cause = -1;
    uint32_t cause_peer = UINT32_MAX;
    double mark = t0;
    for (;;) {
        if (loader->error) {
            rc = loader->error;
            break;
        }
        /* Batches the caller holds keep their slots: the next batch needs another one. */
        rc = dsc__slots_make_room(loader);
        if (rc < 0) {
            if (rc != DSC_EHELD)
                dsc__loader_fail(loader, rc);
            break;
        }
        if (loader->cons.cons_seq < loader->sched.slot_seq) {
            st = &loader->sched.steps[loader->cons.cons_seq % loader->sched.step_cap];
            if (st->state == ST_READY)
                break;
        } else if (dsc__order_is_caller(loader) &&
                   loader->cons.cons_seq >= loader->sched.caller.push_seq) {
            rc = DSC_EAGAIN; /* nothing pushed to wait for: not a failure */
            DSC_LOG(&loader->cfg.log, DSC_LOG_WARN,
                    "next(): nothing pushed ahead (order caller): push the epoch's next batch "
                    "or its end mark first (dsc_loader_push_order)");
            break;
        } else if (loader->cfg.opt.epochs > 0 &&
                   loader->cons.cons_epoch >= loader->cfg.opt.epochs &&
                   loader->cons.cons_seq >= loader->sched.plan_seq) {
            rc = DSC_EOF; /* past the job's last epoch (options.epochs): every pass is empty */
            break;
        }
        /* Each look books the time since the last one to what the last look found; the first
         * look books the time since next() was called (the loader's lock, slot room) to what it
         * finds: the step was not ready then either. */
        double now = dsc_now_s();
        if (cause >= 0)
            dsc__diag_blame(loader, cause, cause_peer, now - mark);
        else
            mark = t0;
        int was = cause;
        cause = dsc__diag_waiting_on(loader, &cause_peer);
        if (was < 0)
            dsc__diag_blame(loader, cause, cause_peer, now - mark);
        mark = now;
        /* Rather than sleep, do the work the batch waits for (or any other there is). */
        if (loader->work.assist && dsc__assist_pass(loader, &loader->work.assist_ctx)) {
            loader->stats.st.assists++;
            continue;
        }
        loader->work.consumer_waiting = loader->work.assist; /* else new work is not its business */
        pthread_cond_wait(&loader->cons_cv, &loader->lock);
        loader->work.consumer_waiting = 0;
    }
    double t1 = dsc_now_s();
    loader->stats.st.stall_seconds += t1 - t0;
    dsc__diag_blame(loader, cause, cause_peer, t1 - mark);
    if (rc == 0 && st->error < 0) {
        /* This batch could not be collated: the loader fails here, the batches before it
         * handed out, with the line that says why as its last error. */
        rc = st->error;
        dsc__step_error_log(loader, st);
        dsc__loader_fail_logged(loader, rc);
    }
    if (rc == 0) {
        dsc_batch_slot_t *slot = loader->cons.slots[st->slot];
        loader->cons.cons_seq++;
        if (st->eof) {
            slot->owner = SLOT_FREE;
            loader->cons.retired_seq = st->seq + 1;
            loader->cons.cons_epoch = st->epoch + 1;
            loader->cons.cons_pos = 0;
            loader->cons.cons_nhist = 0;
            loader->cons.cons_samples = loader->cons.cons_hash = 0;
            loader->stats.st.epoch = loader->cons.cons_epoch;
            const dsc_epoch_wire_t *ew = &loader->stats.epoch_wire[st->epoch % DSC__EPOCH_RING];
            loader->stats.st.epoch_wire_bytes = ew->epoch == st->epoch ? ew->bytes : 0;
            pthread_cond_broadcast(&loader->sched_cv);
            rc = DSC_EOF;
        } else {
            st->state = ST_HANDED;
            dsc_batch_t *b = &slot->batch;
            b->samples = st->count;
            b->step = st->step;
            b->seq = st->seq;
            memcpy(b->indices, st->ids, st->count * sizeof(uint64_t));
            dsc__batch_hand_out(loader, b);
            loader->cons.cons_epoch = st->epoch;
            loader->cons.cons_pos = st->pos_after;
            if (dsc__order_is_caller(loader)) { /* where the caller's order stands (state.c) */
                loader->cons.cons_samples += st->count;
                for (uint32_t k = 0; k < st->count; k++)
                    loader->cons.cons_hash = dsc__caller_hash(loader->cons.cons_hash, st->ids[k]);
            }
            loader->stats.st.epoch = st->epoch;
            loader->stats.st.batches++;
            loader->stats.st.samples += st->count;
            loader->stats.st.bytes += batch_bytes(loader, slot, st->count);
            loader->stats.st.truncated_samples += slot->truncated;
            loader->stats.st.decode_errors += slot->decode_errors;
            if (loader->cfg.cuda != NULL) {
                rc = dsc__cuda_slot_hand_out(loader->cfg.cuda, &slot->ev, loader->cons.user_stream);
                if (rc < 0)
                    dsc__loader_fail(loader, rc);
            }
            if (rc == 0) {
                *out = b;
                if (retain)
                    dsc__batch_retain_locked(b);
            }
        }
    }
    dsc__stats_maybe_log(loader, t1);
    dsc__diag_tick(loader, t1);
    loader->stats.last_return = dsc_now_s();
    pthread_mutex_unlock(&loader->lock);
    return rc;
}

DSC_EXTERN int dsc_loader_next(dsc_loader_t *loader, dsc_batch_t **out) {
    if (loader == NULL || out == NULL)
        return DSC_EINVAL;
    return loader_next(loader, out, 0);
}

DSC_EXTERN int dsc_loader_next_views(dsc_loader_t *loader, dsc_batch_t **out, int retain,
                                     dsc_field_view_t *views, uint32_t view_count) {
    if (loader == NULL || out == NULL || (views == NULL && view_count > 0) ||
        view_count > loader->cfg.field_count)
        return DSC_EINVAL;
    for (uint32_t f = 0; f < view_count; f++)
        if (views[f].struct_size < offsetof(dsc_field_view_t, rows) + sizeof views[f].rows)
            return DSC_EINVAL;
    int rc = loader_next(loader, out, retain);
    if (rc < 0)
        return rc;
    /* The views read the slot's layout only: stable while the batch is handed out. */
    for (uint32_t f = 0; f < view_count; f++) {
        rc = dsc_batch_field_view(*out, f, &views[f]);
        if (rc < 0) {
            if (retain)
                dsc_batch_release(*out);
            return rc;
        }
    }
    return (int)(*out)->samples;
}

DSC_EXTERN int dsc_loader_push_order(dsc_loader_t *loader, const uint64_t *indices, size_t n,
                                     int flags) {
    if (loader == NULL)
        return DSC_EINVAL;
    pthread_mutex_lock(&loader->lock);
    int rc = dsc__sched_push(loader, indices, n, flags);
    pthread_mutex_unlock(&loader->lock);
    return rc;
}

DSC_EXTERN int dsc_loader_order_room(const dsc_loader_t *loader) {
    if (loader == NULL)
        return 0;
    dsc_loader_t *l = (dsc_loader_t *)loader; /* the lock only */
    pthread_mutex_lock(&l->lock);
    int room = (int)dsc__sched_order_room(loader);
    pthread_mutex_unlock(&l->lock);
    return room;
}

DSC_EXTERN uint64_t dsc_loader_len(const dsc_loader_t *loader) {
    return loader && loader->mix == NULL ? dsc__sched_epoch_steps(loader) : 0;
}

DSC_EXTERN uint64_t dsc_loader_dataset_samples(const dsc_loader_t *loader) {
    return loader ? loader->cfg.samples : 0;
}

DSC_EXTERN uint32_t dsc_loader_field_count(const dsc_loader_t *loader) {
    return loader ? loader->cfg.field_count : 0;
}

DSC_EXTERN const char *dsc_loader_meta(const dsc_loader_t *loader) {
    return loader ? loader->cfg.manifest->meta_json : NULL;
}

DSC_EXTERN int dsc_loader_field(const dsc_loader_t *loader, uint32_t field, dsc_field_info_t *out) {
    if (loader == NULL || out == NULL || field >= loader->cfg.field_count)
        return DSC_ERANGE;
    const dsc_field_t *f = &loader->cfg.manifest->schema.fields[field];
    memset(out, 0, sizeof *out);
    memcpy(out->name, f->name, DSC_MAX_NAME);
    out->dtype = f->dtype;
    out->ndim = f->ndim;
    for (uint32_t d = 0; d < f->ndim; d++)
        out->shape[d] = f->shape[d];
    out->sample_bytes = f->sample_bytes;
    const dsc_var_field_t *v = &loader->cfg.var[field];
    if (v->image) { /* handed out decoded: a fixed u8 field */
        int hwc = v->spec.layout == DSC_IMAGE_LAYOUT_HWC;
        out->ndim = 3;
        out->shape[0] = hwc ? v->spec.height : 3;
        out->shape[1] = hwc ? v->spec.width : v->spec.height;
        out->shape[2] = hwc ? 3 : v->spec.width;
        out->sample_bytes = 3ull * v->spec.height * v->spec.width;
    } else if (f->variable) {
        out->shape[0] = -1;
        out->sample_bytes = f->row_bytes;
    }
    return 0;
}

DSC_EXTERN int dsc_loader_set_stream(dsc_loader_t *loader, void *cuda_stream) {
    if (loader == NULL)
        return DSC_EINVAL;
    if (loader->cfg.cuda == NULL)
        return DSC_ENOTSUP;
    pthread_mutex_lock(&loader->lock);
    loader->cons.user_stream = cuda_stream;
    pthread_mutex_unlock(&loader->lock);
    return 0;
}
