/* Job table of a server (jobs.h): the REPORTs of the loaders it feeds, bounded and expiring,
 * rendered for STAT and /metrics. */
#include "jobs.h"
#include "text.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct job_ent {
    int used;
    dsc_job_info_t info;
} job_ent_t;

struct dsc_jobs {
    pthread_mutex_t lock;
    uint32_t capacity;
    double expiry_s;
    uint32_t per_owner;
    uint64_t dropped, refused;
    job_ent_t *ents;
};

int dsc_jobs_create(uint32_t capacity, double expiry_s, dsc_jobs_t **out) {
    if (out == NULL || capacity > DSC_JOBS_MAX)
        return DSC_EINVAL;
    dsc_jobs_t *jobs = calloc(1, sizeof *jobs);
    if (jobs == NULL)
        return DSC_ENOMEM;
    jobs->capacity = capacity ? capacity : DSC_JOBS_MAX;
    jobs->expiry_s = expiry_s > 0 ? expiry_s : DSC_JOB_EXPIRY_S;
    jobs->per_owner = DSC_JOBS_PER_OWNER < jobs->capacity ? DSC_JOBS_PER_OWNER : jobs->capacity;
    jobs->ents = calloc(jobs->capacity, sizeof *jobs->ents);
    if (jobs->ents == NULL) {
        free(jobs);
        return DSC_ENOMEM;
    }
    pthread_mutex_init(&jobs->lock, NULL);
    *out = jobs;
    return 0;
}

void dsc_jobs_destroy(dsc_jobs_t *jobs) {
    if (jobs == NULL)
        return;
    pthread_mutex_destroy(&jobs->lock);
    free(jobs->ents);
    free(jobs);
}

static void copy_str(char *dst, size_t cap, dsc_str_t s) {
    size_t n = s.len < cap - 1 ? s.len : cap - 1;
    if (n > 0)
        memcpy(dst, s.ptr, n);
    dst[n] = '\0';
}

/* Under lock. */
static void expire(dsc_jobs_t *jobs, double now) {
    for (uint32_t i = 0; i < jobs->capacity; i++)
        if (jobs->ents[i].used && now - jobs->ents[i].info.last_report > jobs->expiry_s)
            jobs->ents[i].used = 0;
}

void dsc_jobs_set_share(dsc_jobs_t *jobs, uint32_t per_owner) {
    pthread_mutex_lock(&jobs->lock);
    uint32_t n = per_owner ? per_owner : DSC_JOBS_PER_OWNER;
    jobs->per_owner = n < jobs->capacity ? n : jobs->capacity;
    pthread_mutex_unlock(&jobs->lock);
}

uint32_t dsc_jobs_share(const dsc_jobs_t *jobs) {
    return jobs->per_owner;
}

void dsc_jobs_count_refused(dsc_jobs_t *jobs) {
    pthread_mutex_lock(&jobs->lock);
    jobs->refused++;
    pthread_mutex_unlock(&jobs->lock);
}

uint64_t dsc_jobs_refused(dsc_jobs_t *jobs) {
    pthread_mutex_lock(&jobs->lock);
    uint64_t n = jobs->refused;
    pthread_mutex_unlock(&jobs->lock);
    return n;
}

/* Entries of `owner` (under lock). */
static uint32_t owned(const dsc_jobs_t *jobs, const char *owner) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < jobs->capacity; i++)
        n += jobs->ents[i].used && strcmp(jobs->ents[i].info.owner, owner) == 0;
    return n;
}

/* The least recent entry of `owner` (under lock; NULL: none). */
static job_ent_t *oldest_of(dsc_jobs_t *jobs, const char *owner) {
    job_ent_t *o = NULL;
    for (uint32_t i = 0; i < jobs->capacity; i++) {
        job_ent_t *e = &jobs->ents[i];
        if (e->used && strcmp(e->info.owner, owner) == 0 &&
            (o == NULL || e->info.last_report < o->info.last_report))
            o = e;
    }
    return o;
}

int dsc_jobs_report(dsc_jobs_t *jobs, const dsc_report_req_t *req, const char *peer,
                    const char *owner, double now) {
    char name[DSC_REPORT_MAX_JOB + 1];
    copy_str(name, sizeof name, req->job);
    char who[DSC_JOB_OWNER_MAX];
    snprintf(who, sizeof who, "%s", owner ? owner : "");
    pthread_mutex_lock(&jobs->lock);
    expire(jobs, now);
    job_ent_t *slot = NULL, *free_slot = NULL;
    for (uint32_t i = 0; i < jobs->capacity; i++) {
        job_ent_t *e = &jobs->ents[i];
        if (!e->used) {
            if (free_slot == NULL)
                free_slot = e;
            continue;
        }
        if (e->info.rank == req->rank && strcmp(e->info.job, name) == 0 &&
            strcmp(e->info.owner, who) == 0) {
            slot = e;
            break;
        }
    }
    int dropped = 0;
    if (slot == NULL) {
        if (who[0] != '\0' && owned(jobs, who) >= jobs->per_owner) {
            slot = oldest_of(jobs, who); /* its own share is full: its own least recent goes */
        } else if (free_slot != NULL) {
            slot = free_slot;
        } else {
            /* Full: the owner holding the most entries gives up its least recent one. */
            const char *top = NULL;
            uint32_t top_n = 0;
            for (uint32_t i = 0; i < jobs->capacity; i++) {
                uint32_t n = owned(jobs, jobs->ents[i].info.owner);
                if (n > top_n) {
                    top_n = n;
                    top = jobs->ents[i].info.owner;
                }
            }
            char victim[DSC_JOB_OWNER_MAX];
            snprintf(victim, sizeof victim, "%s", top ? top : "");
            slot = oldest_of(jobs, victim);
        }
        if (slot->used) {
            jobs->dropped++;
            dropped = 1;
        }
        memset(slot, 0, sizeof *slot);
        slot->used = 1;
        memcpy(slot->info.job, name, sizeof name);
        memcpy(slot->info.owner, who, sizeof who);
        slot->info.rank = req->rank;
        slot->info.first_seen = now;
    }
    dsc_job_info_t *info = &slot->info;
    copy_str(info->dataset, sizeof info->dataset, req->dataset);
    snprintf(info->peer, sizeof info->peer, "%s", peer ? peer : "");
    info->world_size = req->world_size;
    info->stall_fraction = (double)req->stall_ppm / DSC_REPORT_STALL_ONE;
    info->samples_per_s = req->samples_per_s;
    info->bytes_per_s = req->bytes_per_s;
    info->bottleneck = req->bottleneck;
    copy_str(info->verdict, sizeof info->verdict, req->verdict);
    info->last_report = now;
    info->reports++;
    info->finished = (req->flags & DSC_REPORT_FLAG_FINISHED) != 0;
    /* A report without the trailer (a connection not granted it) keeps the last figures. */
    if (req->has_hedge) {
        info->has_hedge = 1;
        info->hedge = req->hedge;
    }
    pthread_mutex_unlock(&jobs->lock);
    return dropped;
}

static int info_cmp(const void *a, const void *b) {
    const dsc_job_info_t *x = a, *y = b;
    int c = strcmp(x->job, y->job);
    if (c != 0)
        return c;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

uint32_t dsc_jobs_snapshot(dsc_jobs_t *jobs, double now, dsc_job_info_t *out, uint32_t cap) {
    pthread_mutex_lock(&jobs->lock);
    expire(jobs, now);
    uint32_t n = 0;
    for (uint32_t i = 0; i < jobs->capacity; i++) {
        if (!jobs->ents[i].used)
            continue;
        if (n < cap)
            out[n] = jobs->ents[i].info;
        n++;
    }
    pthread_mutex_unlock(&jobs->lock);
    qsort(out, n < cap ? n : cap, sizeof *out, info_cmp);
    return n;
}

void dsc_jobs_hedge(dsc_jobs_t *jobs, double now, dsc_jobs_hedge_t *out) {
    memset(out, 0, sizeof *out);
    if (jobs == NULL)
        return;
    pthread_mutex_lock(&jobs->lock);
    expire(jobs, now);
    for (uint32_t i = 0; i < jobs->capacity; i++) {
        const dsc_job_info_t *j = &jobs->ents[i].info;
        if (!jobs->ents[i].used || !j->has_hedge)
            continue;
        out->loaders++;
        /* A closed loader holds no server slow any more. */
        out->slow_now += (j->hedge.flags & DSC_REPORT_HEDGE_SLOW) && !j->finished;
        out->sum.hedges += j->hedge.hedges;
        out->sum.hedges_won += j->hedge.hedges_won;
        out->sum.hedge_bytes += j->hedge.hedge_bytes;
        out->sum.wasted_bytes += j->hedge.wasted_bytes;
        out->sum.slow_marks += j->hedge.slow_marks;
        out->sum.excused += j->hedge.excused;
    }
    pthread_mutex_unlock(&jobs->lock);
}

static void hedge_fields(cJSON *o, const dsc_report_hedge_t *h) {
    cJSON_AddNumberToObject(o, "hedges", (double)h->hedges);
    cJSON_AddNumberToObject(o, "hedges_won", (double)h->hedges_won);
    cJSON_AddNumberToObject(o, "hedge_bytes", (double)h->hedge_bytes);
    cJSON_AddNumberToObject(o, "wasted_bytes", (double)h->wasted_bytes);
    cJSON_AddNumberToObject(o, "slow_marks", (double)h->slow_marks);
    cJSON_AddNumberToObject(o, "excused", (double)h->excused);
}

uint64_t dsc_jobs_dropped(dsc_jobs_t *jobs) {
    pthread_mutex_lock(&jobs->lock);
    uint64_t n = jobs->dropped;
    pthread_mutex_unlock(&jobs->lock);
    return n;
}

double dsc_jobs_expiry(const dsc_jobs_t *jobs) {
    return jobs->expiry_s;
}

/* A copy of the live entries (malloc'd, capacity entries); *count set. NULL on ENOMEM. */
static dsc_job_info_t *live(dsc_jobs_t *jobs, double now, uint32_t *count) {
    *count = 0;
    dsc_job_info_t *list = malloc((jobs ? jobs->capacity : 1) * sizeof *list);
    if (list != NULL && jobs != NULL)
        *count = dsc_jobs_snapshot(jobs, now, list, jobs->capacity);
    return list;
}

char *dsc_jobs_json(dsc_jobs_t *jobs, double now) {
    uint32_t n = 0;
    dsc_job_info_t *list = live(jobs, now, &n);
    cJSON *arr = list ? cJSON_CreateArray() : NULL;
    for (uint32_t i = 0; arr != NULL && i < n; i++) {
        const dsc_job_info_t *j = &list[i];
        cJSON *o = cJSON_CreateObject();
        if (o == NULL || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            cJSON_Delete(arr);
            arr = NULL;
            break;
        }
        cJSON_AddStringToObject(o, "job", j->job);
        cJSON_AddNumberToObject(o, "rank", j->rank);
        cJSON_AddNumberToObject(o, "world_size", j->world_size);
        cJSON_AddStringToObject(o, "dataset", j->dataset);
        cJSON_AddStringToObject(o, "peer", j->peer);
        cJSON_AddNumberToObject(o, "stall", j->stall_fraction);
        cJSON_AddNumberToObject(o, "samples_per_s", (double)j->samples_per_s);
        cJSON_AddNumberToObject(o, "bytes_per_s", (double)j->bytes_per_s);
        const char *stage = dsc_bottleneck_name(j->bottleneck);
        cJSON_AddStringToObject(o, "bottleneck", stage ? stage : "unknown");
        cJSON_AddStringToObject(o, "verdict", j->verdict);
        cJSON_AddNumberToObject(o, "age_s", now - j->last_report);
        cJSON_AddNumberToObject(o, "reports", (double)j->reports);
        cJSON_AddBoolToObject(o, "finished", j->finished);
        cJSON *h = j->has_hedge ? cJSON_AddObjectToObject(o, "hedge") : NULL;
        if (h != NULL) {
            hedge_fields(h, &j->hedge);
            cJSON_AddBoolToObject(h, "slow", (j->hedge.flags & DSC_REPORT_HEDGE_SLOW) != 0);
        }
    }
    char *text = arr ? cJSON_PrintUnformatted(arr) : NULL;
    cJSON_Delete(arr);
    free(list);
    return text;
}

/* The job's labels (job names are label-safe by the protocol's rule; so are dataset names). */
#define LABELS "job=\"%s\",rank=\"%u\",dataset=\"%s\""

char *dsc_jobs_metrics_text(dsc_jobs_t *jobs, double now, int names) {
    uint32_t n = 0;
    dsc_job_info_t *list = live(jobs, now, &n);
    if (list == NULL)
        return NULL;
    dsc_text_t t = {0};
    dsc_text_add(&t,
                 "# HELP dscache_jobs Training jobs (job, rank) that reported in the last %.0f s.\n"
                 "# TYPE dscache_jobs gauge\ndscache_jobs %u\n",
                 jobs ? jobs->expiry_s : DSC_JOB_EXPIRY_S, n);
    dsc_text_add(
        &t,
        "# HELP dscache_jobs_dropped_total Job entries dropped because the table was full.\n"
        "# TYPE dscache_jobs_dropped_total counter\ndscache_jobs_dropped_total %llu\n",
        (unsigned long long)(jobs ? dsc_jobs_dropped(jobs) : 0));
    dsc_text_add(&t,
                 "# HELP dscache_job_reports_refused_total REPORTs refused: their dataset is not "
                 "one the reporting credential may read.\n"
                 "# TYPE dscache_job_reports_refused_total counter\n"
                 "dscache_job_reports_refused_total %llu\n",
                 (unsigned long long)(jobs ? dsc_jobs_refused(jobs) : 0));
    /* This server as its loaders see it (their REPORTs' straggler trailers, summed over the
     * live entries: an entry that expires takes its share with it, so these are gauges). */
    dsc_jobs_hedge_t hs;
    dsc_jobs_hedge(jobs, now, &hs);
    const struct {
        const char *name, *help;
        double v;
    } hedge_series[] = {
        {"dscache_straggler_loaders", "Loaders listed whose REPORTs carry straggler figures.",
         hs.loaders},
        {"dscache_straggler_slow_now", "Of which: loaders that have this server marked slow now.",
         hs.slow_now},
        {"dscache_straggler_slow_marks",
         "Times the loaders listed marked this server slow (no new work until it answers).",
         (double)hs.sum.slow_marks},
        {"dscache_straggler_hedges",
         "Requests to this server the loaders listed re-issued to another owner.",
         (double)hs.sum.hedges},
        {"dscache_straggler_hedges_won",
         "Of which: the re-issue arrived before this server's "
         "answer.",
         (double)hs.sum.hedges_won},
        {"dscache_straggler_hedge_bytes", "Decoded bytes of the re-issued requests.",
         (double)hs.sum.hedge_bytes},
        {"dscache_straggler_wasted_bytes",
         "Bytes this server sent late for re-issued requests (dropped by the loaders).",
         (double)hs.sum.wasted_bytes},
        {"dscache_straggler_stalls_excused",
         "Stalls the loaders did not hold against this server (it answered PING: reading "
         "through misses).",
         (double)hs.sum.excused},
    };
    for (size_t k = 0; k < sizeof hedge_series / sizeof hedge_series[0]; k++)
        dsc_text_add(&t, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n", hedge_series[k].name,
                     hedge_series[k].help, hedge_series[k].name, hedge_series[k].name,
                     hedge_series[k].v);
    if (!names) {
        free(list);
        return dsc_text_take(&t);
    }
    static const struct {
        const char *name, *help;
    } series[] = {
        {"dscache_job_stall_fraction", "Share of the job's step time spent waiting for data."},
        {"dscache_job_samples_per_second", "Samples per second the job consumes."},
        {"dscache_job_bytes_per_second", "Decoded batch bytes per second the job consumes."},
        {"dscache_job_report_age_seconds", "Seconds since the job's last report."},
    };
    for (size_t k = 0; k < sizeof series / sizeof series[0]; k++) {
        dsc_text_add(&t, "# HELP %s %s\n# TYPE %s gauge\n", series[k].name, series[k].help,
                     series[k].name);
        for (uint32_t i = 0; i < n; i++) {
            const dsc_job_info_t *j = &list[i];
            double v = k == 0   ? j->stall_fraction
                       : k == 1 ? (double)j->samples_per_s
                       : k == 2 ? (double)j->bytes_per_s
                                : now - j->last_report;
            dsc_text_add(&t, "%s{" LABELS "} %.6g\n", series[k].name, j->job, j->rank, j->dataset,
                         v);
        }
    }
    dsc_text_add(
        &t, "# HELP dscache_job_bottleneck The stage that limits the job now (1 for that stage).\n"
            "# TYPE dscache_job_bottleneck gauge\n");
    for (uint32_t i = 0; i < n; i++) {
        const char *stage = dsc_bottleneck_name(list[i].bottleneck);
        dsc_text_add(&t, "dscache_job_bottleneck{" LABELS ",stage=\"%s\"} 1\n", list[i].job,
                     list[i].rank, list[i].dataset, stage ? stage : "unknown");
    }
    free(list);
    return dsc_text_take(&t);
}

char *dsc_jobs_stat_add(dsc_jobs_t *jobs, char *json, double now, uint64_t connections,
                        uint64_t connections_total) {
    cJSON *root = json ? cJSON_Parse(json) : NULL;
    free(json);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return NULL;
    }
    char *list = jobs ? dsc_jobs_json(jobs, now) : NULL;
    cJSON *arr = list ? cJSON_Parse(list) : cJSON_CreateArray();
    free(list);
    cJSON *srv = cJSON_CreateObject();
    char *text = NULL;
    if (arr != NULL && srv != NULL && cJSON_AddItemToObject(root, "jobs", arr)) {
        arr = NULL;
        cJSON_AddNumberToObject(srv, "connections", (double)connections);
        cJSON_AddNumberToObject(srv, "connections_total", (double)connections_total);
        cJSON_AddNumberToObject(srv, "job_expiry_s", jobs ? jobs->expiry_s : DSC_JOB_EXPIRY_S);
        dsc_jobs_hedge_t hs;
        dsc_jobs_hedge(jobs, now, &hs);
        cJSON *st = cJSON_AddObjectToObject(srv, "stragglers");
        if (st != NULL) {
            cJSON_AddNumberToObject(st, "loaders", hs.loaders);
            cJSON_AddNumberToObject(st, "slow_now", hs.slow_now);
            hedge_fields(st, &hs.sum);
        }
        if (cJSON_AddItemToObject(root, "server", srv)) {
            srv = NULL;
            text = cJSON_PrintUnformatted(root);
        }
    }
    cJSON_Delete(arr);
    cJSON_Delete(srv);
    cJSON_Delete(root);
    return text;
}

char *dsc_resident_metrics_text(const char *stat_json) {
    cJSON *root = stat_json ? cJSON_Parse(stat_json) : NULL;
    dsc_text_t t = {0};
    dsc_text_add(&t,
                 "# HELP dscache_dataset_resident_fraction Bytes of the dataset resident in this "
                 "server's store / the dataset's size.\n"
                 "# TYPE dscache_dataset_resident_fraction gauge\n");
    const cJSON *d;
    cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(root, "datasets")) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(d, "name");
        const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(d, "bytes");
        const cJSON *cached = cJSON_GetObjectItemCaseSensitive(d, "cached_bytes");
        if (cJSON_IsString(name) && cJSON_IsNumber(bytes) && cJSON_IsNumber(cached))
            dsc_text_add(&t, "dscache_dataset_resident_fraction{dataset=\"%s\"} %.6g\n",
                         name->valuestring,
                         bytes->valuedouble > 0 ? cached->valuedouble / bytes->valuedouble : 0.0);
    }
    cJSON_Delete(root);
    return dsc_text_take(&t);
}
