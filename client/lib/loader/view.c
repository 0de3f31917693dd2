/* Loader cluster view: the member list placement is computed over, kept current while the loader
 * runs (a file: spec re-read when it changes, a dns: spec re-resolved, the view the servers agree
 * on adopted when a HELLO shows another one). Only routing changes, never the plan. */
#include "view.h"
#include "dsc_sys.h"
#include "fetch.h"
#include "route.h"
#include "sources.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define VIEW_TICK_S 1.0   /* file checks and convergence attempts: at most this often */
#define VIEW_PROBE_S 5.0  /* a HELLO to one member compares views this often */
#define VIEW_DNS_S 10.0   /* a dns: spec is resolved again this often */
#define VIEW_SETTLE_S 2.0 /* the servers' view does not override a local change this early */
#define VIEW_ASK_MAX 16   /* servers asked for MEMBERS per convergence attempt */
#define VIEW_TIMEOUT_MS 1000u

/* ---- MEMBERS answer ------------------------------------------------------------------------ */

int dsc__members_json_parse(const char *text, size_t len, dsc_members_t *out, uint64_t *hash,
                            int *clustered, int *self_member) {
    memset(out, 0, sizeof *out);
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (root == NULL)
        return DSC_EPROTO;
    int rc = DSC_EPROTO;
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "members");
    const cJSON *hash_item = cJSON_GetObjectItemCaseSensitive(root, "hash");
    const cJSON *self = cJSON_GetObjectItemCaseSensitive(root, "self");
    if (!cJSON_IsArray(list) || !cJSON_IsString(hash_item) ||
        strlen(hash_item->valuestring) != 16 ||
        strspn(hash_item->valuestring, "0123456789abcdef") != 16)
        goto cleanup;
    const cJSON *item;
    cJSON_ArrayForEach(item, list) {
        if (!cJSON_IsString(item))
            goto cleanup;
        int r = dsc_members_add(out, item->valuestring);
        if (r < 0) {
            rc = r == DSC_ENOMEM ? r : DSC_EPROTO;
            goto cleanup;
        }
    }
    *hash = strtoull(hash_item->valuestring, NULL, 16);
    if (dsc_members_hash(out) != *hash)
        goto cleanup; /* the list and its hash disagree: not a view to adopt */
    *clustered = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "clustered"));
    *self_member = cJSON_IsString(self) && dsc_members_find(out, self->valuestring) >= 0;
    rc = 0;
cleanup:
    cJSON_Delete(root);
    if (rc < 0)
        dsc_members_free(out);
    return rc;
}

/* The "replicas" of a MEMBERS answer: 1 .. DSC_MAX_REPLICAS, or 0 (absent or out of range). */
static uint32_t members_json_replicas(const char *text, size_t len) {
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (root == NULL)
        return 0;
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(root, "replicas");
    uint32_t v = 0;
    if (cJSON_IsNumber(r) && r->valuedouble >= 1 && r->valuedouble <= DSC_MAX_REPLICAS)
        v = (uint32_t)r->valuedouble;
    cJSON_Delete(root);
    return v;
}

int dsc__view_list_datasets(const dsc_loader_t *loader, const char *addr, char *buf, size_t cap) {
    if (cap == 0)
        return 0;
    buf[0] = '\0';
    dsc_conn_t *conn = NULL;
    uint32_t timeout =
        loader->cfg.opt.timeout_ms < VIEW_TIMEOUT_MS ? loader->cfg.opt.timeout_ms : VIEW_TIMEOUT_MS;
    int rc = dsc_conn_open_addr(addr, timeout, 0, &conn);
    uint8_t *body = NULL;
    size_t len = 0;
    if (rc == 0)
        rc = dsc_conn_call(conn, DSC_OP_LIST, NULL, 0, &body, &len);
    dsc_conn_close(conn);
    if (rc < 0) {
        free(body);
        return rc;
    }
    cJSON *root = cJSON_ParseWithLength((const char *)body, len);
    free(body);
    if (!cJSON_IsArray(root)) {
        cJSON_Delete(root);
        return DSC_EPROTO;
    }
    int count = 0;
    size_t used = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, root) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(item, "name");
        if (!cJSON_IsString(name))
            continue;
        int n = snprintf(buf + used, cap - used, "%s%s", count ? ", " : "", name->valuestring);
        count++;
        if (n < 0 || (size_t)n >= cap - used) {
            buf[used] = '\0'; /* cut at a whole name */
            break;
        }
        used += (size_t)n;
    }
    cJSON_Delete(root);
    return count;
}

#define REPLICAS_DEFAULT 2 /* servers that do not say: dscached's default --replicas */

int dsc__view_learn_replicas(dsc_loader_t *loader) {
    uint32_t explicit_r = loader->cfg.opt.replicas;
    uint32_t learned = 0;
    char from[DSC_MEMBER_MAX] = "";
    uint32_t timeout =
        loader->cfg.opt.timeout_ms < VIEW_TIMEOUT_MS ? loader->cfg.opt.timeout_ms : VIEW_TIMEOUT_MS;
    for (uint32_t s = 0; s < loader->net.peer_count && learned == 0 && s < VIEW_ASK_MAX; s++) {
        const char *addr = loader->net.peers[s].addr;
        dsc_conn_t *conn = NULL;
        int rc = dsc_conn_open_addr(addr, timeout, loader->net.view_hash, &conn);
        uint8_t *body = NULL;
        size_t len = 0;
        if (rc == 0)
            rc = dsc_conn_call(conn, DSC_OP_MEMBERS, NULL, 0, &body, &len);
        dsc_conn_close(conn);
        if (rc == 0) {
            learned = members_json_replicas((const char *)body, len);
            snprintf(from, sizeof from, "%s", addr);
        }
        free(body);
    }
    if (explicit_r == 0) {
        loader->cfg.opt.replicas = learned ? learned : REPLICAS_DEFAULT;
        DSC_LOG(&loader->cfg.log, DSC_LOG_DEBUG, "loader: replicas %u (%s%s)",
                loader->cfg.opt.replicas, learned ? "from server " : "default: no server said",
                from);
    } else if (learned != 0 && learned != explicit_r) {
        DSC_LOG(&loader->cfg.log, DSC_LOG_WARN,
                "loader: replicas %u was given but the servers use %u (server %s, MEMBERS): "
                "chunks will be looked for on the wrong servers (misses, read-through); drop "
                "the option to use the servers' value",
                explicit_r, learned, from);
    }
    return (int)learned;
}

/* ---- Adopting a view ----------------------------------------------------------------------- */

static int peer_find(const dsc_loader_t *loader, const char *addr) {
    for (uint32_t s = 0; s < loader->net.peer_count; s++)
        if (strcmp(loader->net.peers[s].addr, addr) == 0)
            return (int)s;
    return -1;
}

int dsc__view_adopt(dsc_loader_t *loader, dsc_members_t *members) {
    uint32_t count = members->count;
    uint32_t *map = malloc((count ? count : 1) * sizeof *map);
    if (map == NULL)
        return DSC_ENOMEM;
    uint32_t added = 0;
    for (uint32_t m = 0; m < count; m++)
        if (peer_find(loader, members->addrs[m]) < 0)
            added++;
    if (loader->net.peer_count + added > DSC_LOADER_MAX_PEERS) {
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                "cluster view of %u members: more than %u server addresses over the loader's "
                "life; keeping the current view",
                count, DSC_LOADER_MAX_PEERS);
        free(map);
        return DSC_ERANGE;
    }
    /* Allocate every new peer's connections and source endpoint before changing anything. */
    uint32_t first_new = loader->net.peer_count;
    for (uint32_t m = 0, i = 0; m < count; m++) {
        if (peer_find(loader, members->addrs[m]) >= 0)
            continue;
        dsc_peer_t *peer = &loader->net.peers[first_new + i++];
        peer->source = dsc__source_for_addr(&loader->cfg.source_env, members->addrs[m]);
        peer->io = calloc(loader->cfg.opt.connections, sizeof(dsc_io_t));
        if (peer->io == NULL ||
            peer->source->endpoint_open(&loader->cfg.source_env, members->addrs[m],
                                        &peer->endpoint) < 0) {
            for (uint32_t k = 0; k < i; k++) {
                dsc_peer_t *undo = &loader->net.peers[first_new + k];
                free(undo->io);
                undo->io = NULL;
                if (undo->endpoint != NULL)
                    undo->source->endpoint_close(undo->endpoint);
                undo->endpoint = NULL;
                undo->source = NULL;
            }
            free(map);
            return DSC_ENOMEM;
        }
    }
    uint32_t next_new = first_new;
    for (uint32_t s = 0; s < loader->net.peer_count; s++)
        loader->net.peers[s].member = 0;
    for (uint32_t m = 0; m < count; m++) {
        int s = peer_find(loader, members->addrs[m]);
        if (s < 0) {
            dsc_peer_t *peer = &loader->net.peers[next_new];
            memcpy(peer->addr, members->addrs[m], DSC_MEMBER_MAX);
            peer->used = 1;
            peer->alive = 1;
            peer->backoff = DSC__BACKOFF_FIRST_S;
            s = (int)next_new++;
            loader->net.peer_count = next_new;
        }
        loader->net.peers[s].member = 1;
        map[m] = (uint32_t)s;
    }
    uint64_t old_hash = loader->net.view_hash;
    uint32_t old_count = loader->net.members.count;
    dsc_members_free(&loader->net.members);
    loader->net.members = *members;
    members->count = 0;
    members->addrs = NULL;
    free(loader->net.member_peer);
    loader->net.member_peer = map;
    loader->net.view_hash = dsc_members_hash(&loader->net.members);
    loader->view.changes++;
    if (loader->net.threads_running) {
        for (uint32_t s = first_new; s < loader->net.peer_count; s++)
            if (dsc__peer_start(loader, s) < 0)
                DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR, "server %s: cannot start its I/O threads",
                        loader->net.peers[s].addr);
        DSC_LOG(&loader->cfg.log, DSC_LOG_INFO,
                "cluster view changed: %u -> %u servers (%u new), hash %016llx -> %016llx",
                old_count, count, added, (unsigned long long)old_hash,
                (unsigned long long)loader->net.view_hash);
    }
    dsc__route_requeue_all(loader);
    pthread_cond_broadcast(&loader->io_cv);
    return 0;
}

/* ---- The view thread ----------------------------------------------------------------------- */

typedef struct view_state {
    dsc_loader_t *loader;
    int kind; /* 'f' file:, 'd' dns:, 'l' list */
    const char *path;
    struct stat file_st;
    int file_known;
    int last_error; /* last resolution error logged (logged once per distinct error) */
    uint32_t probe_next;
} view_state_t;

static void cond_wait_s(pthread_cond_t *cv, pthread_mutex_t *lock, double seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)(seconds * 1e9);
    ts.tv_sec += (time_t)(ns / 1000000000u);
    ts.tv_nsec = (long)(ns % 1000000000u);
    pthread_cond_timedwait(cv, lock, &ts);
}

/* Resolves the spec again and adopts it when it differs. Under lock (released while resolving). */
static void reload_source(view_state_t *vs) {
    dsc_loader_t *loader = vs->loader;
    dsc_members_t fresh = {0};
    pthread_mutex_unlock(&loader->lock);
    int rc = dsc_members_resolve(loader->cfg.servers_spec, &fresh);
    pthread_mutex_lock(&loader->lock);
    if (rc < 0) {
        if (rc != vs->last_error)
            DSC_LOG(&loader->cfg.log, DSC_LOG_WARN, "servers \"%s\": %s; keeping the current view",
                    loader->cfg.servers_spec, dsc_strerror(rc));
        vs->last_error = rc;
        return;
    }
    vs->last_error = 0;
    if (!loader->stop && !dsc_members_equal(&fresh, &loader->net.members)) {
        DSC_LOG(&loader->cfg.log, DSC_LOG_INFO, "servers \"%s\" changed", loader->cfg.servers_spec);
        if (dsc__view_adopt(loader, &fresh) == 0)
            loader->view.source_changed = dsc_now_s();
    }
    dsc_members_free(&fresh);
}

/* Opens a connection for the view thread, visible to destroy (which shuts it down). Under lock
 * (released while connecting). Returns NULL when it failed or the loader stops. */
static dsc_conn_t *view_open(dsc_loader_t *loader, const char *addr, uint64_t view_hash) {
    char copy[DSC_MEMBER_MAX];
    snprintf(copy, sizeof copy, "%s", addr);
    uint32_t timeout =
        loader->cfg.opt.timeout_ms < VIEW_TIMEOUT_MS ? loader->cfg.opt.timeout_ms : VIEW_TIMEOUT_MS;
    pthread_mutex_unlock(&loader->lock);
    dsc_conn_t *conn = NULL;
    int rc = dsc_conn_open_addr_auth(copy, timeout, view_hash, loader->cfg.cred, &conn);
    pthread_mutex_lock(&loader->lock);
    if (rc < 0 || loader->stop) {
        dsc_conn_close(conn);
        return NULL;
    }
    loader->view.conn = conn;
    return conn;
}

static void view_close(dsc_loader_t *loader, dsc_conn_t *conn) {
    loader->view.conn = NULL;
    dsc_conn_close(conn);
}

/* A HELLO to one live member: notes a differing view. Under lock. */
static void probe_one(view_state_t *vs) {
    dsc_loader_t *loader = vs->loader;
    uint32_t n = loader->net.members.count;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t s = loader->net.member_peer[(vs->probe_next + k) % n];
        if (!loader->net.peers[s].alive)
            continue;
        vs->probe_next = (vs->probe_next + k + 1) % n;
        dsc_conn_t *conn = view_open(loader, loader->net.peers[s].addr, loader->net.view_hash);
        if (conn != NULL) {
            uint64_t hash = dsc_conn_info(conn)->members_hash;
            view_close(loader, conn);
            dsc__peer_hello(loader, s, hash);
        }
        return;
    }
}

typedef struct view_addr {
    char addr[DSC_MEMBER_MAX];
} view_addr_t;

static void add_candidate(view_addr_t *list, uint32_t *count, const char *addr) {
    if (*count >= VIEW_ASK_MAX)
        return;
    for (uint32_t i = 0; i < *count; i++)
        if (strcmp(list[i].addr, addr) == 0)
            return;
    snprintf(list[(*count)++].addr, DSC_MEMBER_MAX, "%s", addr);
}

/* Asks MEMBERS of the servers that reported another view and of the live members (and of the
 * members those answers list, up to VIEW_ASK_MAX servers); when every clustered server that
 * answered and is in its own list reports the same view, and it is not ours, adopts it. Under
 * lock. */
static void converge(view_state_t *vs) {
    dsc_loader_t *loader = vs->loader;
    view_addr_t ask[VIEW_ASK_MAX];
    uint32_t ask_count = 0;
    for (uint32_t s = 0; s < loader->net.peer_count; s++)
        if (loader->net.peers[s].hello_hash != 0 &&
            loader->net.peers[s].hello_hash != loader->net.view_hash)
            add_candidate(ask, &ask_count, loader->net.peers[s].addr);
    for (uint32_t m = 0; m < loader->net.members.count; m++)
        if (loader->net.peers[loader->net.member_peer[m]].alive)
            add_candidate(ask, &ask_count, loader->net.members.addrs[m]);
    dsc_members_t agreed = {0};
    uint64_t agreed_hash = 0;
    uint32_t answers = 0;
    int disagree = 0;
    for (uint32_t i = 0; i < ask_count && !loader->stop; i++) {
        dsc_conn_t *conn = view_open(loader, ask[i].addr, loader->net.view_hash);
        if (conn == NULL)
            continue;
        pthread_mutex_unlock(&loader->lock);
        uint8_t *body = NULL;
        size_t len = 0;
        dsc_members_t list = {0};
        uint64_t hash = 0;
        int clustered = 0, self_member = 0;
        int rc = dsc_conn_call(conn, DSC_OP_MEMBERS, NULL, 0, &body, &len);
        if (rc == 0)
            rc = dsc__members_json_parse((const char *)body, len, &list, &hash, &clustered,
                                         &self_member);
        free(body);
        pthread_mutex_lock(&loader->lock);
        view_close(loader, conn);
        if (rc < 0) {
            DSC_LOG(&loader->cfg.log, DSC_LOG_WARN, "server %s: MEMBERS: %s", ask[i].addr,
                    dsc_strerror(rc));
            continue;
        }
        /* A server outside any cluster, or outside its own list, speaks for no view. */
        if (clustered && self_member) {
            answers++;
            if (agreed.count == 0) {
                agreed = list;
                agreed_hash = hash;
                list.count = 0;
                list.addrs = NULL;
            } else if (hash != agreed_hash) {
                disagree = 1;
            }
            for (uint32_t m = 0; m < agreed.count; m++)
                add_candidate(ask, &ask_count, agreed.addrs[m]);
        }
        dsc_members_free(&list);
    }
    if (loader->stop || answers == 0 || disagree) {
        if (disagree)
            DSC_LOG(&loader->cfg.log, DSC_LOG_DEBUG,
                    "servers disagree on the cluster view: retrying");
    } else if (agreed_hash == loader->net.view_hash) {
        loader->view.pending = 0;
    } else if (dsc_now_s() - loader->view.source_changed >= VIEW_SETTLE_S) {
        DSC_LOG(&loader->cfg.log, DSC_LOG_INFO,
                "%u server(s) agree on cluster view %016llx (%u members): adopting it", answers,
                (unsigned long long)agreed_hash, agreed.count);
        if (dsc__view_adopt(loader, &agreed) == 0)
            loader->view.pending = 0;
    }
    dsc_members_free(&agreed);
}

void *dsc__view_main(void *arg) {
    view_state_t vs = {.loader = arg};
    dsc_loader_t *loader = vs.loader;
    dsc__loader_thread_start();
    const char *spec = loader->cfg.servers_spec;
    vs.kind = strncmp(spec, "file:", 5) == 0 ? 'f' : strncmp(spec, "dns:", 4) == 0 ? 'd' : 'l';
    vs.path = spec + 5;
    if (vs.kind == 'f')
        vs.file_known = stat(vs.path, &vs.file_st) == 0;
    pthread_mutex_lock(&loader->lock);
    double now = dsc_now_s();
    double next_probe = now + VIEW_PROBE_S, next_dns = now + VIEW_DNS_S, last_converge = 0;
    while (!loader->stop) {
        now = dsc_now_s();
        if (!(loader->view.pending && now - last_converge >= VIEW_TICK_S))
            cond_wait_s(&loader->view.cv, &loader->lock, VIEW_TICK_S);
        if (loader->stop)
            break;
        now = dsc_now_s();
        if (vs.kind == 'f') {
            /* A cheap check once a tick: re-read only when mtime, size or inode changed. */
            struct stat st;
            pthread_mutex_unlock(&loader->lock);
            int ok = stat(vs.path, &st) == 0;
            pthread_mutex_lock(&loader->lock);
            if (ok && (!vs.file_known || st.st_ino != vs.file_st.st_ino ||
                       st.st_size != vs.file_st.st_size ||
                       st.st_mtim.tv_sec != vs.file_st.st_mtim.tv_sec ||
                       st.st_mtim.tv_nsec != vs.file_st.st_mtim.tv_nsec)) {
                vs.file_st = st;
                vs.file_known = 1;
                reload_source(&vs);
            }
        } else if (vs.kind == 'd' && now >= next_dns) {
            next_dns = now + VIEW_DNS_S;
            reload_source(&vs);
        }
        if (!loader->stop && !loader->view.pending && now >= next_probe) {
            next_probe = now + VIEW_PROBE_S;
            probe_one(&vs);
        }
        if (!loader->stop && loader->view.pending && dsc_now_s() - last_converge >= VIEW_TICK_S) {
            last_converge = dsc_now_s();
            converge(&vs);
        }
    }
    pthread_mutex_unlock(&loader->lock);
    return NULL;
}
