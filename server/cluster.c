/* Cluster membership of dscached (see cluster.h): views swapped under a short mutex and shared by
 * reference count, ownership by rendezvous placement, refreshes on the control loop's timer with
 * the blocking work (file read, getaddrinfo, warm-ups) on the libuv thread pool. */
#include "cluster.h"
#include "dsc_sys.h"
#include "srvlog.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { SPEC_SINGLE = 0, SPEC_LIST, SPEC_FILE, SPEC_DNS };

/* What a members file looked like when last read: a change of any field triggers a re-read. */
typedef struct file_stamp {
    int exists;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
} file_stamp_t;

struct dsc_cluster {
    char *spec; /* NULL in single-node mode */
    int kind;
    char self[DSC_MEMBER_MAX];
    uint32_t replicas, refresh_seconds;

    pthread_mutex_t lock; /* guards `current` against a swap between load and reference */
    dsc_cluster_view_t *current;
    atomic_uint_fast64_t hello_hash;

    /* Refresh machinery: loop thread only. */
    uv_loop_t *loop;
    dsc_catalog_t *cat;
    uv_timer_t timer;
    int timer_started, stopping;
    uint64_t ticks;
    file_stamp_t stamp;
    uv_work_t refresh_req;
    int refresh_busy, refresh_again, refresh_rc, last_error;
    uv_work_t warm_req;
    int warm_busy, warm_again;
    atomic_int cancel;
};

/* ---- views ------------------------------------------------------------------------------ */

/* A new view taking the entries of *members (left empty). NULL when out of memory. */
static dsc_cluster_view_t *view_new(const dsc_cluster_t *cl, dsc_members_t *members, int clustered,
                                    uint64_t generation) {
    dsc_cluster_view_t *v = calloc(1, sizeof *v);
    if (v == NULL)
        return NULL;
    atomic_init(&v->refs, 1);
    v->members = *members;
    members->count = 0;
    members->addrs = NULL;
    v->hash = dsc_members_hash(&v->members);
    v->self_index = dsc_members_find(&v->members, cl->self);
    v->replicas = cl->replicas;
    v->clustered = clustered;
    v->generation = generation;
    return v;
}

void dsc_cluster_view_release(dsc_cluster_view_t *view) {
    if (view == NULL)
        return;
    if (atomic_fetch_sub_explicit(&view->refs, 1, memory_order_acq_rel) == 1) {
        dsc_members_free(&view->members);
        free(view);
    }
}

dsc_cluster_view_t *dsc_cluster_acquire(dsc_cluster_t *cl) {
    pthread_mutex_lock(&cl->lock);
    dsc_cluster_view_t *v = cl->current;
    atomic_fetch_add_explicit(&v->refs, 1, memory_order_relaxed);
    pthread_mutex_unlock(&cl->lock);
    return v;
}

uint64_t dsc_cluster_hello_hash(const dsc_cluster_t *cl) {
    if (cl == NULL)
        return 0;
    return atomic_load_explicit(&((dsc_cluster_t *)cl)->hello_hash, memory_order_relaxed);
}

const char *dsc_cluster_self(const dsc_cluster_t *cl) {
    return cl->self;
}

int dsc_cluster_owns(const dsc_cluster_view_t *view, const char *dataset, uint32_t shard_id) {
    if (!view->clustered)
        return 1;
    if (view->self_index < 0)
        return 0;
    return dsc_placement_owns(&view->members, (uint32_t)view->self_index, dataset, shard_id,
                              view->replicas);
}

static void warn_not_member(const dsc_cluster_t *cl, const dsc_cluster_view_t *v) {
    if (v->clustered && v->members.count > 0 && v->self_index < 0)
        LOG_WARN("cluster: this server (%s, see --advertise) is not in the member list of %u: "
                 "it owns no shard and warms nothing, but still answers every request",
                 cl->self, v->members.count);
}

int dsc_cluster_set_members(dsc_cluster_t *cl, dsc_members_t *members) {
    if (cl->kind == SPEC_SINGLE) {
        dsc_members_free(members);
        return DSC_EINVAL;
    }
    /* Built before the lock; generation fixed up under it. */
    dsc_cluster_view_t *next = view_new(cl, members, 1, 0);
    if (next == NULL) {
        dsc_members_free(members);
        return DSC_ENOMEM;
    }
    pthread_mutex_lock(&cl->lock);
    dsc_cluster_view_t *prev = cl->current;
    if (dsc_members_equal(&prev->members, &next->members)) {
        pthread_mutex_unlock(&cl->lock);
        dsc_cluster_view_release(next);
        return 0;
    }
    next->generation = prev->generation + 1;
    cl->current = next;
    atomic_store_explicit(&cl->hello_hash, next->hash, memory_order_relaxed);
    pthread_mutex_unlock(&cl->lock);
    LOG_INFO("cluster: members changed: %u -> %u members, hash %016" PRIx64 " -> %016" PRIx64
             ", this server %s (%s), replicas %u",
             prev->members.count, next->members.count, prev->hash, next->hash,
             next->self_index >= 0 ? "is a member" : "is NOT a member", cl->self, cl->replicas);
    warn_not_member(cl, next);
    dsc_cluster_view_release(prev);
    return 1;
}

/* ---- creation and refresh --------------------------------------------------------------- */

/* Writes the canonical form of a "HOST:PORT" into out: an IPv6 host gets brackets. Returns 0 or
 * DSC_EINVAL. */
static int canonical_hostport(const char *text, char out[DSC_MEMBER_MAX]) {
    char host[DSC_MEMBER_MAX];
    uint16_t port;
    if (text == NULL || dsc_split_hostport(text, host, sizeof host, &port) != 0 || port == 0)
        return DSC_EINVAL;
    int n = text[0] != '[' && strchr(host, ':') != NULL
                ? snprintf(out, DSC_MEMBER_MAX, "[%s]:%u", host, (unsigned)port)
                : snprintf(out, DSC_MEMBER_MAX, "%s", text);
    return n > 0 && n < DSC_MEMBER_MAX ? 0 : DSC_EINVAL;
}

static void take_stamp(const char *path, file_stamp_t *out) {
    struct stat st;
    memset(out, 0, sizeof *out);
    if (stat(path, &st) != 0)
        return;
    out->exists = 1;
    out->dev = st.st_dev;
    out->ino = st.st_ino;
    out->size = st.st_size;
    out->mtime = st.st_mtim;
}

static int same_stamp(const file_stamp_t *a, const file_stamp_t *b) {
    if (a->exists != b->exists)
        return 0;
    return !a->exists ||
           (a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
            a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec);
}

static const char *kind_name(int kind) {
    return kind == SPEC_FILE ? "members file" : kind == SPEC_DNS ? "DNS name" : "member list";
}

int dsc_cluster_create(const dsc_cluster_options_t *options, dsc_cluster_t **out) {
    if (options == NULL || out == NULL)
        return DSC_EINVAL;
    *out = NULL;
    uint32_t replicas = options->replicas ? options->replicas : DSC_CLUSTER_DEFAULT_REPLICAS;
    if (replicas > DSC_MAX_REPLICAS) {
        LOG_ERROR("cluster: --replicas %u: at most %u", replicas, DSC_MAX_REPLICAS);
        return DSC_EINVAL;
    }
    char self[DSC_MEMBER_MAX];
    if (canonical_hostport(options->advertise, self) < 0) {
        LOG_ERROR("cluster: --advertise %s: not HOST:PORT with a port in 1..65535",
                  options->advertise ? options->advertise : "(none)");
        return DSC_EINVAL;
    }
    const char *spec = options->members && options->members[0] ? options->members : NULL;
    int kind = SPEC_SINGLE;
    if (spec && strncmp(spec, "file:", 5) == 0) {
        kind = SPEC_FILE;
        if (spec[5] == '\0') {
            LOG_ERROR("cluster: --members %s: no file name", spec);
            return DSC_EINVAL;
        }
    } else if (spec && strncmp(spec, "dns:", 4) == 0) {
        kind = SPEC_DNS;
        char host[DSC_MEMBER_MAX];
        uint16_t port;
        if (dsc_split_hostport(spec + 4, host, sizeof host, &port) != 0 || port == 0) {
            LOG_ERROR("cluster: --members %s: expected dns:NAME:PORT", spec);
            return DSC_EINVAL;
        }
    } else if (spec) {
        kind = SPEC_LIST;
    }

    dsc_members_t members = {0, NULL};
    int rc = 0;
    if (kind == SPEC_SINGLE) {
        rc = dsc_members_add(&members, self) < 0 ? DSC_ENOMEM : 0;
    } else {
        rc = dsc_members_resolve(spec, &members);
        if (rc < 0 && kind == SPEC_LIST) {
            LOG_ERROR("cluster: --members %s: %s (expected HOST:PORT,HOST:PORT,...)", spec,
                      dsc_strerror(rc));
            return rc;
        }
        if (rc < 0) {
            LOG_WARN("cluster: %s %s: %s: no members known yet (owning nothing), retrying",
                     kind_name(kind), spec + (kind == SPEC_FILE ? 5 : 4), dsc_strerror(rc));
            rc = 0;
        }
    }
    dsc_cluster_t *cl = calloc(1, sizeof *cl);
    if (cl == NULL || rc < 0) {
        free(cl);
        dsc_members_free(&members);
        return DSC_ENOMEM;
    }
    cl->kind = kind;
    memcpy(cl->self, self, sizeof self);
    cl->replicas = replicas;
    cl->refresh_seconds =
        options->refresh_seconds ? options->refresh_seconds : DSC_CLUSTER_DEFAULT_REFRESH;
    cl->spec = spec ? strdup(spec) : NULL;
    pthread_mutex_init(&cl->lock, NULL);
    atomic_init(&cl->cancel, 0);
    if (kind == SPEC_FILE)
        take_stamp(spec + 5, &cl->stamp);
    cl->current = view_new(cl, &members, kind != SPEC_SINGLE, 1);
    if ((spec && cl->spec == NULL) || cl->current == NULL) {
        dsc_members_free(&members);
        dsc_cluster_destroy(cl);
        return DSC_ENOMEM;
    }
    atomic_init(&cl->hello_hash, kind == SPEC_SINGLE ? 0 : cl->current->hash);
    if (kind == SPEC_SINGLE)
        LOG_INFO("cluster: single node (%s): owns every shard", cl->self);
    else
        LOG_INFO("cluster: %u members from %s, hash %016" PRIx64 ", this server %s (%s), "
                 "replicas %u",
                 cl->current->members.count, spec, cl->current->hash,
                 cl->current->self_index >= 0 ? "is a member" : "is NOT a member", cl->self,
                 replicas);
    warn_not_member(cl, cl->current);
    *out = cl;
    return 0;
}

void dsc_cluster_destroy(dsc_cluster_t *cl) {
    if (cl == NULL)
        return;
    dsc_cluster_view_release(cl->current);
    pthread_mutex_destroy(&cl->lock);
    free(cl->spec);
    free(cl);
}

int dsc_cluster_refresh(dsc_cluster_t *cl) {
    if (cl->kind == SPEC_SINGLE)
        return 0;
    dsc_members_t members;
    int rc = dsc_members_resolve(cl->spec, &members);
    if (rc < 0)
        return rc;
    return dsc_cluster_set_members(cl, &members);
}

/* ---- warm-up ---------------------------------------------------------------------------- */

static int owned_filter(void *arg, const dsc_dataset_t *ds, uint32_t shard_id) {
    return dsc_cluster_owns(arg, dsc_dataset_manifest(ds)->name, shard_id);
}

int dsc_cluster_warm(dsc_cluster_t *cl, dsc_catalog_t *cat) {
    if (cl->kind == SPEC_SINGLE)
        return dsc_catalog_warm_some(cat, NULL, NULL, 0, NULL, &cl->cancel); /* policy as set */
    dsc_cluster_view_t *v = dsc_cluster_acquire(cl);
    int n =
        dsc_catalog_warm_some(cat, owned_filter, v, 1, "owned: primary or replica", &cl->cancel);
    dsc_cluster_view_release(v);
    return n;
}

/* ---- refresh machinery on the control loop ---------------------------------------------- */

static void start_warm(dsc_cluster_t *cl);
static void start_refresh(dsc_cluster_t *cl);

static void warm_work(uv_work_t *req) {
    dsc_cluster_t *cl = req->data;
    LOG_INFO("cluster: warming the shards owned in the new view in the background");
    dsc_cluster_warm(cl, cl->cat);
}

static void warm_after(uv_work_t *req, int status) {
    dsc_cluster_t *cl = req->data;
    (void)status;
    cl->warm_busy = 0;
    if (cl->warm_again && !cl->stopping) {
        cl->warm_again = 0;
        start_warm(cl);
    }
}

static void start_warm(dsc_cluster_t *cl) {
    if (cl->stopping || cl->cat == NULL)
        return;
    if (cl->warm_busy) {
        cl->warm_again = 1; /* the view changed again: warm what the newest one owns after */
        return;
    }
    cl->warm_req.data = cl;
    if (uv_queue_work(cl->loop, &cl->warm_req, warm_work, warm_after) == 0)
        cl->warm_busy = 1;
}

static void refresh_work(uv_work_t *req) {
    dsc_cluster_t *cl = req->data;
    cl->refresh_rc = dsc_cluster_refresh(cl);
}

static void refresh_after(uv_work_t *req, int status) {
    dsc_cluster_t *cl = req->data;
    (void)status;
    cl->refresh_busy = 0;
    int rc = cl->refresh_rc;
    if (rc < 0) {
        if (rc != cl->last_error) { /* once per distinct failure, not every second */
            dsc_cluster_view_t *v = dsc_cluster_acquire(cl);
            LOG_WARN("cluster: re-reading %s %s: %s: keeping the current %u members",
                     kind_name(cl->kind), cl->spec, dsc_strerror(rc), v->members.count);
            dsc_cluster_view_release(v);
        }
        cl->last_error = rc;
    } else {
        if (cl->last_error)
            LOG_INFO("cluster: %s %s readable again", kind_name(cl->kind), cl->spec);
        cl->last_error = 0;
        if (rc == 1)
            start_warm(cl);
    }
    if (cl->refresh_again && !cl->stopping) {
        cl->refresh_again = 0;
        start_refresh(cl);
    }
}

static void start_refresh(dsc_cluster_t *cl) {
    if (cl->stopping || cl->kind == SPEC_SINGLE || cl->kind == SPEC_LIST || cl->loop == NULL)
        return;
    if (cl->refresh_busy) {
        cl->refresh_again = 1;
        return;
    }
    if (cl->kind == SPEC_FILE)
        take_stamp(cl->spec + 5, &cl->stamp); /* before reading: a later write is seen */
    cl->refresh_req.data = cl;
    if (uv_queue_work(cl->loop, &cl->refresh_req, refresh_work, refresh_after) == 0)
        cl->refresh_busy = 1;
}

static void on_tick(uv_timer_t *timer) {
    dsc_cluster_t *cl = timer->data;
    cl->ticks++;
    if (cl->kind == SPEC_FILE) {
        file_stamp_t now;
        take_stamp(cl->spec + 5, &now);
        if (!same_stamp(&now, &cl->stamp))
            start_refresh(cl);
    } else if (cl->kind == SPEC_DNS && cl->ticks % cl->refresh_seconds == 0) {
        start_refresh(cl);
    }
}

int dsc_cluster_start(dsc_cluster_t *cl, uv_loop_t *loop, dsc_catalog_t *cat) {
    cl->loop = loop;
    cl->cat = cat;
    if (cl->kind != SPEC_FILE && cl->kind != SPEC_DNS)
        return 0;
    int rc = uv_timer_init(loop, &cl->timer);
    if (rc < 0)
        return rc;
    cl->timer.data = cl;
    cl->timer_started = 1;
    if ((rc = uv_timer_start(&cl->timer, on_tick, 1000, 1000)) < 0)
        return rc;
    /* The file may have changed between create and now (an empty view waits for it). */
    if (cl->kind == SPEC_FILE)
        on_tick(&cl->timer);
    return 0;
}

void dsc_cluster_reload(dsc_cluster_t *cl) {
    if (cl->kind == SPEC_FILE || cl->kind == SPEC_DNS) {
        LOG_INFO("cluster: re-reading %s %s", kind_name(cl->kind), cl->spec);
        start_refresh(cl);
    }
}

void dsc_cluster_stop(dsc_cluster_t *cl) {
    if (cl == NULL || cl->stopping)
        return;
    cl->stopping = 1;
    atomic_store(&cl->cancel, 1);
    if (cl->timer_started)
        uv_close((uv_handle_t *)&cl->timer, NULL);
}

/* ---- MEMBERS and STAT answers ----------------------------------------------------------- */

static void add_hash(cJSON *obj, const char *key, uint64_t hash) {
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, hash);
    cJSON_AddStringToObject(obj, key, hex);
}

char *dsc_cluster_members_json(dsc_cluster_t *cl) {
    dsc_cluster_view_t *v = dsc_cluster_acquire(cl);
    char *text = NULL;
    cJSON *root = cJSON_CreateObject();
    cJSON *list = cJSON_AddArrayToObject(root, "members");
    if (list == NULL)
        goto done;
    for (uint32_t i = 0; i < v->members.count; i++) {
        cJSON *item = cJSON_CreateString(v->members.addrs[i]);
        if (item == NULL || !cJSON_AddItemToArray(list, item)) {
            cJSON_Delete(item);
            goto done;
        }
    }
    cJSON_AddNumberToObject(root, "replicas", v->replicas);
    add_hash(root, "hash", v->hash);
    cJSON_AddStringToObject(root, "self", cl->self);
    cJSON_AddBoolToObject(root, "clustered", v->clustered);
    text = cJSON_PrintUnformatted(root);
done:
    cJSON_Delete(root);
    dsc_cluster_view_release(v);
    return text;
}

void dsc_cluster_counts(dsc_cluster_t *cl, dsc_catalog_t *cat, dsc_cluster_counts_t *out) {
    memset(out, 0, sizeof *out);
    dsc_cluster_view_t *v = cl ? dsc_cluster_acquire(cl) : NULL;
    out->clustered = v ? v->clustered : 0;
    out->members = v && v->clustered ? v->members.count : 1;
    out->self_member = v && v->clustered ? v->self_index >= 0 : 1;
    out->known = v && v->clustered ? v->members.count > 0 : 1;
    char *list = dsc_catalog_list_json(cat);
    cJSON *root = list ? cJSON_Parse(list) : NULL;
    free(list);
    const cJSON *item;
    cJSON_ArrayForEach(item, root) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(item, "name");
        if (!cJSON_IsString(name))
            continue;
        dsc_dataset_t *ds = dsc_catalog_find(cat, name->valuestring, strlen(name->valuestring));
        if (ds == NULL)
            continue;
        const dsc_manifest_t *m = dsc_dataset_manifest(ds);
        uint8_t *resident = calloc(m->shard_count + 1, 1);
        if (resident == NULL)
            continue;
        dsc_catalog_resident_map(cat, ds, resident, m->shard_count);
        for (uint32_t i = 0; i < m->shard_count; i++) {
            int own = v ? dsc_cluster_owns(v, m->name, i) : 1;
            out->owned += (uint64_t)own;
            out->owned_resident += (uint64_t)(own && resident[i]);
            uint64_t bytes = m->shards[i].bytes;
            out->missing_bytes += own && !resident[i] ? bytes : 0;
            if (own && !resident[i] &&
                (out->smallest_missing == 0 || bytes < out->smallest_missing))
                out->smallest_missing = bytes;
        }
        free(resident);
    }
    cJSON_Delete(root);
    dsc_cluster_view_release(v);
}

/* Adds the cluster fields to one dataset object of the STAT answer. Returns 0 or DSC_ENOMEM. */
static int stat_dataset(const dsc_cluster_view_t *v, dsc_catalog_t *cat, cJSON *obj,
                        uint64_t hello_hash, uint64_t *owned_sum, uint64_t *left_sum,
                        uint64_t *left_bytes) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(obj, "name");
    if (!cJSON_IsString(name))
        return 0;
    dsc_dataset_t *ds = dsc_catalog_find(cat, name->valuestring, strlen(name->valuestring));
    if (ds == NULL)
        return 0; /* dropped by a rescan since the catalog answered */
    const dsc_manifest_t *m = dsc_dataset_manifest(ds);
    uint8_t *resident = calloc(m->shard_count + 1, 1);
    char *map = malloc((size_t)m->shard_count + 1);
    if (resident == NULL || map == NULL) {
        free(resident);
        free(map);
        return DSC_ENOMEM;
    }
    dsc_catalog_resident_map(cat, ds, resident, m->shard_count);
    uint64_t owned = 0, owned_cached = 0;
    for (uint32_t i = 0; i < m->shard_count; i++) {
        int own = dsc_cluster_owns(v, m->name, i);
        owned += (uint64_t)own;
        owned_cached += (uint64_t)(own && resident[i]);
        *left_bytes += own && !resident[i] ? m->shards[i].bytes : 0;
        map[i] = own ? (resident[i] ? 'O' : 'o') : (resident[i] ? 'c' : '.');
    }
    map[m->shard_count] = '\0';
    *owned_sum += owned;
    *left_sum += owned - owned_cached;
    add_hash(obj, "members_hash", hello_hash);
    cJSON_AddNumberToObject(obj, "owned_shards", (double)owned);
    cJSON_AddNumberToObject(obj, "owned_cached_shards", (double)owned_cached);
    cJSON *added = cJSON_AddStringToObject(obj, "shard_map", map);
    free(resident);
    free(map);
    return added ? 0 : DSC_ENOMEM;
}

char *dsc_cluster_stat_json(dsc_cluster_t *cl, dsc_catalog_t *cat, const char *catalog_json) {
    if (catalog_json == NULL)
        return NULL;
    cJSON *root = cJSON_Parse(catalog_json);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return NULL;
    }
    /* One view for the whole answer: the counts and the hash beside them agree. */
    dsc_cluster_view_t *v = dsc_cluster_acquire(cl);
    uint64_t hello_hash = v->clustered ? v->hash : 0;
    char *text = NULL;
    cJSON *info = cJSON_AddObjectToObject(root, "cluster");
    if (info == NULL)
        goto done;
    add_hash(info, "members_hash", hello_hash);
    cJSON_AddNumberToObject(info, "members", v->members.count);
    cJSON_AddNumberToObject(info, "replicas", v->replicas);
    cJSON_AddStringToObject(info, "self", cl->self);
    cJSON_AddBoolToObject(info, "self_member", v->self_index >= 0);
    cJSON_AddBoolToObject(info, "clustered", v->clustered);
    add_hash(root, "members_hash", hello_hash);
    cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "datasets");
    cJSON *ds;
    uint64_t owned = 0, left = 0, left_bytes = 0;
    cJSON_ArrayForEach(ds, list) {
        if (cJSON_IsObject(ds) &&
            stat_dataset(v, cat, ds, hello_hash, &owned, &left, &left_bytes) < 0)
            goto done;
    }
    /* Over the datasets this answer lists (a credential's, or the one named). */
    cJSON_AddNumberToObject(info, "owned_shards", (double)owned);
    cJSON_AddNumberToObject(info, "warm_shards_left", (double)left);
    cJSON_AddNumberToObject(info, "warm_bytes_left", (double)left_bytes);
    text = cJSON_PrintUnformatted(root);
done:
    dsc_cluster_view_release(v);
    cJSON_Delete(root);
    return text;
}
