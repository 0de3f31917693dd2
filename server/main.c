/* dscached: the cache server. Options (options.c: command line over an optional JSON config file),
 * start-up (store, datasets, listeners, HTTP, cluster membership, warm-up), signals (SIGTERM/SIGINT
 * drain and exit 0, SIGHUP rescans the dataset directories and re-reads the member list and the
 * credential file). */
#include "catalog.h"
#include "cluster.h"
#include "credstore.h"
#include "fairq.h"
#include "http.h"
#include "jobs.h"
#include "options.h"
#include "peerwarm.h"
#include "rdma.h"
#include "rootwatch.h"
#include "server.h"
#include "srvlog.h"
#include "store.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

/* Every connection, HTTP socket and shard read takes a descriptor: run with as many as allowed
 * (the soft limit raised to the hard one), and say how many, since running out is what an
 * operator sees first under a connection flood. */
static void raise_nofile_limit(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rlim_t was = rl.rlim_cur;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            rl.rlim_cur = was;
    }
    if (rl.rlim_cur == RLIM_INFINITY)
        LOG_INFO("descriptor limit (RLIMIT_NOFILE): unlimited");
    else
        LOG_INFO("descriptor limit (RLIMIT_NOFILE): %llu (was %llu, hard limit %llu)",
                 (unsigned long long)rl.rlim_cur, (unsigned long long)was,
                 (unsigned long long)rl.rlim_max);
}

static int write_port_file(const char *path, uint16_t port) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (f == NULL)
        return -errno;
    fprintf(f, "%u\n", (unsigned)port);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        int err = -errno;
        unlink(tmp);
        return err;
    }
    return 0;
}

/* ---- control loop: signals and warm-up ------------------------------------------------- */

typedef struct control {
    uv_loop_t loop;
    uv_signal_t sigterm, sigint, sighup;
    uv_work_t warm_work;
    dsc_catalog_t *cat;
    dsc_server_t *server;
    dsc_cluster_t *cluster;
    dsc_credstore_t *credentials;
    dsc_rootwatch_t *rootwatch; /* NULL: no --data-root */
    atomic_int warm_done;       /* the start-up warm-up finished (or there was none) */
    atomic_int stopping_flag;
    int stopping;
    /* Readiness (HTTP thread): latched once ready, with the reason it became so. */
    int want_warm;
    uint32_t ready_timeout;
    double started;
    pthread_mutex_t ready_lock;
    int ready_latched;
    char ready_why[256];
} control_t;

/* The warm-up is done and the smallest owned shard still missing does not fit in the store's
 * largest free extent: as warm as this store gets (the rest is read through or evicts). */
static int store_full(const control_t *ctl, const dsc_cluster_counts_t *cc) {
    dsc_store_info_t si;
    dsc_store_info(dsc_catalog_store(ctl->cat), &si);
    return cc->smallest_missing > 0 && si.largest_free < cc->smallest_missing;
}

/* Appends the damaged shards, by name, to a readiness reason (not latched: a read-through may
 * find damage later). */
static void append_damage(const control_t *ctl, char *why, size_t cap) {
    char list[768];
    uint32_t n = dsc_catalog_damage_text(ctl->cat, list, sizeof list, NULL);
    size_t used = strlen(why);
    if (n > 0 && used + 1 < cap)
        snprintf(why + used, cap - used,
                 "; %u damaged shard%s, answered CORRUPT for the damaged part (re-ingest; dscache "
                 "inspect names the damage): %s",
                 n, n == 1 ? "" : "s", list);
}

/* /readyz (see --help, Readiness): 1 once the start-up warm-up is done and, in a cluster, the
 * member list is known, this server is in it and every shard it owns is resident (single node:
 * the warm-up loaded what the store and the policy allow); or once --ready-timeout has passed
 * (the reason says what was missing). Latched: once ready, ready until stopped. */
static int readiness(void *arg, char *why, size_t cap) {
    control_t *ctl = arg;
    if (atomic_load(&ctl->stopping_flag)) {
        snprintf(why, cap, "stopping");
        return 0;
    }
    pthread_mutex_lock(&ctl->ready_lock);
    int ready = ctl->ready_latched;
    if (ready) {
        snprintf(why, cap, "%s", ctl->ready_why);
        pthread_mutex_unlock(&ctl->ready_lock);
        append_damage(ctl, why, cap);
        return 1;
    }
    dsc_cluster_counts_t cc;
    dsc_cluster_counts(ctl->cluster, ctl->cat, &cc);
    char missing[200] = "";
    if (!ctl->want_warm)
        ;
    else if (!atomic_load(&ctl->warm_done))
        snprintf(missing, sizeof missing, "warming up: %llu of %llu owned shards resident",
                 (unsigned long long)cc.owned_resident, (unsigned long long)cc.owned);
    else if (!cc.known)
        snprintf(missing, sizeof missing, "member list not known yet");
    else if (!cc.self_member)
        snprintf(missing, sizeof missing, "%s is not in the member list (%u members)",
                 dsc_cluster_self(ctl->cluster), cc.members);
    else if (cc.clustered && cc.owned_resident < cc.owned && !store_full(ctl, &cc))
        snprintf(missing, sizeof missing, "warming: %llu of %llu owned shards resident",
                 (unsigned long long)cc.owned_resident, (unsigned long long)cc.owned);
    /* Shards refused whole (failed validation) never become resident: not a store-full case. */
    uint32_t bad = 0;
    (void)dsc_catalog_damage_text(ctl->cat, NULL, 0, &bad);
    if (missing[0] == '\0') {
        ready = 1;
        snprintf(ctl->ready_why, sizeof ctl->ready_why,
                 "ready: %llu of %llu owned shards resident, %u members%s",
                 (unsigned long long)cc.owned_resident, (unsigned long long)cc.owned, cc.members,
                 cc.owned_resident + bad < cc.owned ? " (store full: the rest are read through)"
                                                    : "");
    } else if (ctl->ready_timeout > 0 && dsc_now_s() - ctl->started >= ctl->ready_timeout) {
        ready = 1;
        snprintf(ctl->ready_why, sizeof ctl->ready_why, "ready: --ready-timeout %us expired; %s",
                 ctl->ready_timeout, missing);
    }
    if (ready) {
        ctl->ready_latched = 1;
        LOG_INFO("%s", ctl->ready_why);
        snprintf(why, cap, "%s", ctl->ready_why);
    } else {
        snprintf(why, cap, "not ready: %s", missing);
    }
    pthread_mutex_unlock(&ctl->ready_lock);
    append_damage(ctl, why, cap);
    return ready;
}

static void on_stop_signal(uv_signal_t *handle, int signum) {
    control_t *ctl = handle->data;
    if (ctl->stopping)
        return;
    ctl->stopping = 1;
    atomic_store(&ctl->stopping_flag, 1);
    LOG_INFO("signal %d: stopping: no new connections, finishing in-flight answers", signum);
    dsc_server_stop(ctl->server);
    dsc_cluster_stop(ctl->cluster);   /* ends a warm-up's wait */
    dsc_catalog_stop_loads(ctl->cat); /* and drops the loads it queued */
    dsc_catalog_cancel_rescans(ctl->cat);
    uv_close((uv_handle_t *)&ctl->sigterm, NULL);
    uv_close((uv_handle_t *)&ctl->sigint, NULL);
    uv_close((uv_handle_t *)&ctl->sighup, NULL);
}

static void on_hup(uv_signal_t *handle, int signum) {
    (void)signum;
    control_t *ctl = handle->data;
    LOG_INFO("SIGHUP: rescanning the dataset directories");
    /* With a --data-root the watcher's thread rescans, so that this loop (and SIGTERM) never
     * waits for a rescan's file I/O; --data directories alone are read here (nothing blocks). */
    if (ctl->rootwatch != NULL)
        dsc_rootwatch_request(ctl->rootwatch);
    else
        dsc_catalog_rescan(ctl->cat);
    dsc_cluster_reload(ctl->cluster);
    if (ctl->credentials != NULL) {
        char err[768], warn[640];
        int n = dsc_credstore_reload_checked(ctl->credentials, err, sizeof err, warn, sizeof warn);
        if (warn[0] != '\0' && n >= 0)
            LOG_WARN("SIGHUP: --auth-file: %s (--insecure-auth-file refuse makes this an error)",
                     warn);
        if (n < 0)
            LOG_ERROR("SIGHUP: credentials not reloaded, keeping the current set: %s", err);
        else
            LOG_INFO("SIGHUP: %d credentials loaded", n);
    }
}

static void warm_work(uv_work_t *req) {
    control_t *ctl = req->data;
    dsc_cluster_warm(ctl->cluster, ctl->cat);
}

static void warm_done(uv_work_t *req, int status) {
    control_t *ctl = req->data;
    (void)status;
    if (ctl->stopping)
        return; /* the warm-up was cut short by SIGTERM: never ready */
    atomic_store(&ctl->warm_done, 1);
    LOG_INFO("warm-up done");
}

/* Peer warm-up (peerwarm.h) in a cluster with --peer-rate > 0: with --auth-file only when
 * --peer-credential names the credential to present. Returns 0 (*out NULL when off) or
 * DSC_EINVAL (logged). */
static int start_peer_warm(const dsc_srv_options_t *o, dsc_cluster_t *cluster,
                           dsc_credstore_t *credentials, dsc_catalog_t *cat, dsc_peerwarm_t **out) {
    *out = NULL;
    if (o->members == NULL && o->members_file == NULL)
        return 0; /* single node: no peers */
    if (o->peer_rate == 0) {
        LOG_INFO("peer warm-up off (--peer-rate 0): owned shards are read from the backing "
                 "storage");
        return 0;
    }
    if (credentials != NULL && o->peer_credential == NULL) {
        LOG_WARN("peer warm-up off: --auth-file is set but no --peer-credential names the "
                 "credential to present to peers; owned shards are read from the backing "
                 "storage (docs/security.md)");
        return 0;
    }
    dsc_peerwarm_options_t popt = {.cluster = cluster,
                                   .credentials = credentials,
                                   .credential = o->peer_credential,
                                   .rate = o->peer_rate};
    int rc = dsc_peerwarm_create(&popt, out);
    if (rc < 0)
        return rc;
    dsc_catalog_set_peer_source(cat, dsc_peerwarm_source(*out));
    LOG_INFO("peer warm-up: shards are read from live owners first, at most %.1f MB/s%s%s",
             (double)o->peer_rate / 1e6, o->peer_credential ? ", as credential " : "",
             o->peer_credential ? o->peer_credential : "");
    return 0;
}

/* The membership: --members / --members-file, this server's address (--advertise, else the
 * listen host with the bound port). Returns 0 and *out, or DSC_EINVAL / DSC_ENOMEM (logged). */
/* A --data directory without a manifest is served once one appears (SIGHUP rescans), which is
 * right while a dataset is being written and a mistake otherwise: says what the directory holds
 * and how a dataset directory is made. */
static void explain_data_dir(const char *dir) {
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, DSC_MANIFEST_FILE);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || stat(path, &st) == 0)
        return;
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    unsigned shards = 0, files = 0, datasets = 0;
    char first[256] = "";
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        size_t n = strlen(e->d_name);
        snprintf(path, sizeof path, "%s/%s/%s", dir, e->d_name, DSC_MANIFEST_FILE);
        if (stat(path, &st) == 0) {
            if (datasets++ == 0)
                snprintf(first, sizeof first, "%s", e->d_name);
        } else if (n > 4 && strcmp(e->d_name + n - 4, ".dsc") == 0) {
            shards++;
        } else {
            files++;
        }
    }
    closedir(d);
    if (datasets > 0)
        LOG_WARN("--data %s is not a dataset directory (no %s) but holds %u dataset "
                 "director%s: serve them all with --data-root %s (datasets added there later "
                 "are served too), or give each one, e.g. --data %s/%s",
                 dir, DSC_MANIFEST_FILE, datasets, datasets == 1 ? "y" : "ies", dir, dir, first);
    else
        LOG_WARN("--data %s has no %s (%u shard files, %u other entries): it is not a dataset "
                 "directory yet. Write one with `dscache ingest` (npy arrays, token files ...: "
                 "dscache ingest --help), e.g. dscache ingest npy -o %s "
                 "image=images.npy; dscached serves it after a rescan (SIGHUP) finds the manifest",
                 dir, DSC_MANIFEST_FILE, shards, files, dir);
}

static int make_cluster(const dsc_srv_options_t *o, const char *listen_host, uint16_t port,
                        dsc_cluster_t **out) {
    char spec[4096], self[DSC_MEMBER_MAX];
    const char *members = o->members;
    if (o->members && o->members_file) {
        LOG_ERROR("--members and --members-file are exclusive: give one");
        return DSC_EINVAL;
    }
    if (o->members_file) {
        if (snprintf(spec, sizeof spec, "file:%s", o->members_file) >= (int)sizeof spec) {
            LOG_ERROR("--members-file: path too long");
            return DSC_EINVAL;
        }
        members = spec;
    }
    const char *advertise = o->advertise;
    if (advertise == NULL) {
        int v6 = strchr(listen_host, ':') != NULL;
        snprintf(self, sizeof self, v6 ? "[%s]:%u" : "%s:%u", listen_host, (unsigned)port);
        advertise = self;
        int wildcard = strcmp(listen_host, "0.0.0.0") == 0 || strcmp(listen_host, "::") == 0;
        if (members && wildcard)
            LOG_WARN("cluster: --listen %s is a wildcard address: give --advertise HOST:PORT "
                     "as this server appears in the member list",
                     listen_host);
    }
    dsc_cluster_options_t copt = {.members = members,
                                  .advertise = advertise,
                                  .replicas = o->replicas,
                                  .refresh_seconds = o->members_refresh};
    return dsc_cluster_create(&copt, out);
}

static int listen_addr(const char *text, char *host, size_t cap, uint16_t *port, int *off) {
    *off = 0;
    if (strcmp(text, "off") == 0 || strcmp(text, "0") == 0) {
        *off = 1;
        return 0;
    }
    return dsc_split_hostport(text, host, cap, port);
}

int main(int argc, char **argv) {
    dsc_srv_options_t o;
    dsc__srv_options_defaults(&o);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);

    int exit_code = 1;
    dsc_store_t *store = NULL;
    dsc_catalog_t *cat = NULL;
    dsc_server_t *server = NULL;
    dsc_rdma_srv_t *rdma = NULL;
    dsc_http_t *http = NULL;
    dsc_cluster_t *cluster = NULL;
    dsc_peerwarm_t *peerwarm = NULL;
    dsc_credstore_t *credentials = NULL;
    dsc_rootwatch_t *rootwatch = NULL;
    control_t ctl;
    memset(&ctl, 0, sizeof ctl);
    int loop_ready = 0;

    signal(SIGPIPE, SIG_IGN); /* a peer gone mid-write is an error return, not a signal */
    if (dsc__srv_options_parse(argc, argv, &o) < 0)
        goto done;
    dsc__srvlog_level = o.log_level;
    if (o.threads == 0)
        o.threads = cores > 0 ? (uint32_t)cores : 1;
    raise_nofile_limit();
    if (o.dir_count == 0 && o.root_count == 0) {
        fprintf(stderr, "dscached: no --data directory given (see --help)\n");
        goto done;
    }
    char listen_host[256], http_host[256];
    uint16_t listen_port = 0, http_port = 0;
    int listen_off, http_off;
    if (listen_addr(o.listen, listen_host, sizeof listen_host, &listen_port, &listen_off) < 0 ||
        listen_off) {
        fprintf(stderr,
                "dscached: invalid --listen '%s': expected HOST:PORT (e.g. 0.0.0.0:7070, "
                "127.0.0.1:0, [::]:7070)\n",
                o.listen);
        goto done;
    }
    if (listen_addr(o.http, http_host, sizeof http_host, &http_port, &http_off) < 0) {
        fprintf(stderr,
                "dscached: invalid --http '%s': expected HOST:PORT (e.g. 0.0.0.0:7071) or "
                "\"off\"\n",
                o.http);
        goto done;
    }

    int rc = dsc_store_create(o.memory, &store);
    if (rc < 0) {
        LOG_ERROR("cannot reserve a store of %llu bytes: %s", (unsigned long long)o.memory,
                  dsc_strerror(rc));
        goto done;
    }
    dsc_catalog_options_t copt = {
        .policy = o.policy,
        .io_threads = o.io_threads,
        .backing_reads = o.backing_reads,
        .backing_rate = o.backing_rate,
        .staging_memory = o.staging_memory == UINT64_MAX ? UINT64_C(256) << 20 : o.staging_memory,
        .staging_ttl_ms = o.staging_ttl * 1000u};
    if ((rc = dsc_catalog_create(store, &copt, &cat)) < 0) {
        LOG_ERROR("cannot create the catalog: %s", dsc_strerror(rc));
        goto done;
    }
    for (int i = 0; i < o.dir_count; i++) {
        explain_data_dir(o.dirs[i]);
        rc = dsc_catalog_add_dir(cat, o.dirs[i]);
        if (rc < 0) {
            LOG_ERROR("--data %s: %s", o.dirs[i], dsc_strerror(rc));
            goto done;
        }
    }
    for (int i = 0; i < o.limit_count; i++) {
        const char *eq = strchr(o.limits[i], '=');
        uint64_t bytes = 0;
        (void)dsc_parse_size(eq + 1, &bytes); /* checked by apply() */
        dsc_catalog_set_policy(cat, o.limits[i], (size_t)(eq - o.limits[i]), DSC_POLICY_LIMIT,
                               bytes);
        LOG_INFO("dataset %.*s: limited to %llu bytes (--limit)", (int)(eq - o.limits[i]),
                 o.limits[i], (unsigned long long)bytes);
    }
    for (int i = 0; i < o.priority_count; i++) {
        const char *eq = strchr(o.priorities[i], '=');
        uint32_t prio = 0;
        (void)dsc__srv_parse_u32(eq + 1, 0, DSC_MAX_PRIORITY, &prio); /* checked by apply() */
        dsc_catalog_set_policy(cat, o.priorities[i], (size_t)(eq - o.priorities[i]),
                               DSC_POLICY_PRIORITY, prio);
        LOG_INFO("dataset %.*s: priority %u (--priority)", (int)(eq - o.priorities[i]),
                 o.priorities[i], prio);
    }
    for (int i = 0; i < o.pin_count; i++) {
        dsc_catalog_set_policy(cat, o.pins[i], strlen(o.pins[i]), DSC_POLICY_PIN, 0);
        LOG_INFO("dataset %s: pinned (--pin)", o.pins[i]);
    }
    for (int i = 0; i < o.root_count; i++) {
        if ((rc = dsc_catalog_add_root(cat, o.roots[i])) < 0) {
            LOG_ERROR("--data-root %s: %s", o.roots[i],
                      rc == DSC_ENOENT ? "not a directory" : dsc_strerror(rc));
            goto done;
        }
    }
    /* A job is (credential, name): with credentials every weight names its credential, so no
     * credential can take another's; without, the whole spec is the job's name. */
    for (uint32_t i = 0; i < o.weight_count; i++) {
        dsc_job_weight_t *w = &o.weights[i];
        if (o.auth_file == NULL && w->owner[0] != '\0') {
            char whole[sizeof w->name];
            snprintf(whole, sizeof whole, "%s:%s", w->owner, w->name);
            memcpy(w->name, whole, sizeof whole);
            w->owner[0] = '\0';
        } else if (o.auth_file != NULL && w->owner[0] == '\0') {
            LOG_ERROR("--job-weight %s=%u: with --auth-file a job is its credential and its "
                      "name: write CRED:%s=%u (the credential whose job it is)",
                      w->name, w->weight, w->name, w->weight);
            goto done;
        }
    }
    if (o.auth_file != NULL) {
        char err[768], warn[640];
        if ((rc = dsc_credstore_open(o.auth_file, o.refuse_insecure_auth_file, &credentials, err,
                                     sizeof err, warn, sizeof warn)) < 0) {
            LOG_ERROR("--auth-file: %s", err);
            goto done;
        }
        if (warn[0] != '\0')
            LOG_WARN("--auth-file: %s (--insecure-auth-file refuse makes this an error)", warn);
        if (o.allow_anonymous_admin)
            LOG_WARN("--allow-anonymous-admin has no effect with --auth-file");
        dsc_credset_t *set = dsc_credstore_acquire(credentials);
        LOG_INFO("authentication required: %u credentials from %s", dsc_credset_count(set),
                 o.auth_file);
        dsc_credset_release(set);
    } else if (o.allow_anonymous_admin) {
        LOG_WARN("no --auth-file: serving every client anonymously, WARM/EVICT included "
                 "(--allow-anonymous-admin)");
    } else {
        LOG_WARN("no --auth-file: serving every client anonymously; WARM/EVICT refused "
                 "(docs/security.md)");
    }
    dsc_rdma_srv_options_t ropt = {
        .mode = o.rdma, .lease_ttl_ms = o.rdma_lease_ttl_ms, .max_lease_bytes = o.max_out};
    if ((rc = dsc_rdma_srv_create(&ropt, store, &rdma)) < 0)
        goto done;
    dsc_server_options_t sopt = {.host = listen_host,
                                 .rdma = rdma,
                                 .port = listen_port,
                                 .threads = o.threads,
                                 .max_out = o.max_out,
                                 .max_out_total = o.max_out_total,
                                 .header_timeout_s = o.header_timeout,
                                 .idle_timeout_s = o.idle_timeout,
                                 .max_conns_per_peer = o.max_conns_per_peer,
                                 .drain_seconds = o.drain_seconds,
                                 .name = "dscached",
                                 .credentials = credentials,
                                 .allow_anonymous_admin = o.allow_anonymous_admin,
                                 .send_rate = o.send_rate,
                                 .fair_off = o.fair_off,
                                 .job_weights = o.weights,
                                 .job_weight_count = o.weight_count};
    if ((rc = dsc_server_start(cat, &sopt, &server)) < 0) {
        if (rc == DSC_EADDRINUSE)
            LOG_ERROR("cannot listen on %s: the port is already in use (another dscached or "
                      "another program listens there); stop it or choose another --listen",
                      o.listen);
        else
            LOG_ERROR("cannot listen on %s: %s", o.listen, dsc_strerror(rc));
        goto done;
    }
    if ((rc = make_cluster(&o, listen_host, dsc_server_port(server), &cluster)) < 0) {
        dsc_server_stop(server);
        goto done;
    }
    dsc_server_set_cluster(server, cluster);
    if ((rc = start_peer_warm(&o, cluster, credentials, cat, &peerwarm)) < 0) {
        dsc_server_stop(server);
        goto done;
    }
    dsc_jobs_set_share(dsc_server_jobs(server), o.jobs_per_credential);
    ctl.cat = cat;
    ctl.server = server;
    ctl.cluster = cluster;
    ctl.credentials = credentials;
    atomic_init(&ctl.warm_done, 0);
    atomic_init(&ctl.stopping_flag, 0);
    ctl.want_warm = o.warm;
    ctl.ready_timeout = o.ready_timeout;
    ctl.started = dsc_now_s();
    pthread_mutex_init(&ctl.ready_lock, NULL);
    if (!http_off) {
        dsc_http_source_t src = {.cat = cat,
                                 .server = server,
                                 .cluster = cluster,
                                 .data_port = dsc_server_port(server),
                                 .readiness = readiness,
                                 .readiness_arg = &ctl,
                                 .max_conns = o.http_max_conns,
                                 .timeout_s = o.http_timeout,
                                 .header_timeout_s = o.http_header_timeout,
                                 .max_conns_per_peer = o.http_max_conns_per_peer,
                                 .hide_names = o.metrics_hide_names};
        if ((rc = dsc_http_start(http_host, http_port, &src, &http)) < 0) {
            LOG_ERROR("cannot serve HTTP on %s: %s", o.http, dsc_strerror(rc));
            dsc_server_stop(server);
            goto done;
        }
    }
    LOG_INFO("dscached %s: listening on %s port %u (%u loops), HTTP %s port %u, store %llu "
             "bytes, policy %s",
             DSC_VERSION_STRING, listen_host, (unsigned)dsc_server_port(server), o.threads,
             http_off ? "off" : http_host, (unsigned)dsc_http_port(http),
             (unsigned long long)o.memory, o.policy == DSC_POLICY_LRU ? "lru" : "minio");

    if (o.port_file && (rc = write_port_file(o.port_file, dsc_server_port(server))) < 0) {
        LOG_ERROR("--port-file %s: %s", o.port_file, strerror(-rc));
        dsc_server_stop(server);
        goto done;
    }
    if (o.http_port_file && http &&
        (rc = write_port_file(o.http_port_file, dsc_http_port(http))) < 0) {
        LOG_ERROR("--http-port-file %s: %s", o.http_port_file, strerror(-rc));
        dsc_server_stop(server);
        goto done;
    }
    uv_loop_init(&ctl.loop);
    loop_ready = 1;
    uv_signal_init(&ctl.loop, &ctl.sigterm);
    uv_signal_init(&ctl.loop, &ctl.sigint);
    uv_signal_init(&ctl.loop, &ctl.sighup);
    ctl.sigterm.data = ctl.sigint.data = ctl.sighup.data = &ctl;
    uv_signal_start(&ctl.sigterm, on_stop_signal, SIGTERM);
    uv_signal_start(&ctl.sigint, on_stop_signal, SIGINT);
    uv_signal_start(&ctl.sighup, on_hup, SIGHUP);
    if ((rc = dsc_rootwatch_start(cat, o.root_interval, &rootwatch)) < 0)
        LOG_ERROR("--data-root: cannot watch: %s (SIGHUP rescans)", dsc_strerror(rc));
    ctl.rootwatch = rootwatch;
    if ((rc = dsc_cluster_start(cluster, &ctl.loop, cat)) < 0)
        LOG_ERROR("cluster: cannot start the membership refresh: %s (the list stays as read)",
                  dsc_strerror(rc));

    if (o.warm) {
        ctl.warm_work.data = &ctl;
        uv_queue_work(&ctl.loop, &ctl.warm_work, warm_work, warm_done);
    } else {
        atomic_store(&ctl.warm_done, 1);
    }
    uv_run(&ctl.loop, UV_RUN_DEFAULT);
    exit_code = 0;
done:
    /* HTTP first: its thread reads the server's counters, which destroy frees. */
    dsc_http_stop(http);
    dsc_rootwatch_stop(rootwatch); /* its rescans touch the catalog */
    dsc_server_destroy(server);    /* joins the loops once they have drained */
    dsc_rdma_srv_destroy(rdma);    /* after the loops: every QP is gone */
    if (loop_ready)
        uv_loop_close(&ctl.loop);
    dsc_catalog_destroy(cat); /* joins the I/O threads, which use peerwarm */
    dsc_peerwarm_destroy(peerwarm);
    dsc_cluster_destroy(cluster); /* after the loops and the I/O threads: they read it */
    dsc_store_destroy(store);
    dsc_credstore_destroy(credentials); /* after the server: connections hold its sets */
    dsc__srv_options_close(&o);
    if (exit_code == 0)
        LOG_INFO("stopped");
    return exit_code;
}
