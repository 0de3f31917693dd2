/* dscache top: a live view of a cache cluster, refreshed like top(1): per server its hit rate,
 * throughput and connections, per dataset the resident fraction, per job (from the loaders'
 * REPORTs) its stall, rate and verdict. q quits; --once prints one frame for scripts. */
#include "cli.h"

#include "conn.h"
#include "placement.h"
#include "protocol.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define CMD "top"
#define MAX_SERVERS 64
#define MAX_JOBS 256
#define MAX_DATASETS 64

static void print_help(void) {
    printf("usage: dscache top --server HOST:PORT[,HOST:PORT...] [--interval SECONDS] [--once]\n"
           "                   [--json]\n"
           "\n"
           "A live view of the cluster, refreshed every interval: per server the hit rate,\n"
           "throughput and open connections; per dataset the fraction of its shards resident\n"
           "on some server; per training job (the loaders report to the servers they read\n"
           "from) its stall, rate, bottleneck and the suggested change, or \"finished\" once\n"
           "its loaders closed. Press q to quit.\n"
           "\n"
           "STRAGGLERS: per server, what the loaders reading from it report of it (summed\n"
           "over their REPORTs): LOADERS reporting, SLOW (loaders that have it marked slow\n"
           "now), MARKS (times marked slow), HEDGES (its requests re-issued to another owner),\n"
           "WON (of which the re-issue answered first), HEDGED (their bytes), WASTED (its\n"
           "late answers, dropped), EXCUSED (stalls excused: it answered PING, reading\n"
           "through), and its PEER WARM-UP: shards and MB fetched from peers, shards read\n"
           "from the backing store instead, owned shards (and MB) still to warm.\n"
           "\n"
           "  --server LIST        dscached data ports, comma-separated (or repeat the option)\n"
           "  --interval SECONDS   refresh period, 0.2..60 (default 1)\n"
           "  --once               print one frame (rates over one interval) and exit\n"
           "  --json               as --once, the frame as one JSON object (servers with\n"
           "                       their figures, stragglers and peer warm-up; jobs)\n"
           "  -h, --help           this text\n");
}

static const struct option long_options[] = {
    {"server", required_argument, NULL, 's'}, {"interval", required_argument, NULL, 'i'},
    {"once", no_argument, NULL, '1'},         {"json", no_argument, NULL, 'j'},
    {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
};

typedef struct server_view {
    char addr[DSC_MEMBER_MAX];
    dsc_conn_t *conn;
    cJSON *stat; /* last answer, or NULL */
    char error[160];
    double at;
    /* Totals of the previous sample, for rates. */
    double prev_hits, prev_misses, prev_served, prev_backing, prev_peer, prev_at;
    int have_prev;
    /* Figures shown: backing_mbps and backing_ms are what the server reads from its backing
     * store (loads and read-throughs) and one read's latency (-1: not reported). */
    double hit_rate, mbps, connections, backing_mbps, backing_ms;
    /* Peer warm-up: MB/s read from peers over the last interval (-1: not reported), owned shards
     * not resident yet (-1: not clustered or not reported). */
    double peer_mbps, shards_left;
    /* The loaders' view of it (STAT "server"."stragglers"; NULL: an older server). */
    const cJSON *stragglers;
    double peer_shards, peer_bytes, peer_fallbacks, bytes_left; /* bytes_left -1: not reported */
} server_view_t;

typedef struct job_view {
    char job[80];
    char dataset[64];
    uint32_t ranks, world_size, finished; /* finished: ranks whose last report said so */
    double stall_max, stall_sum, sps, age;
    char bottleneck[16];
    char verdict[256];
} job_view_t;

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0.0;
}

static const char *str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* One STAT per server; a failed connection is re-opened at the next sample. */
static void sample(server_view_t *s) {
    cJSON_Delete(s->stat);
    s->stat = NULL;
    if (s->conn == NULL) {
        int rc = dsc_conn_open_addr(s->addr, 3000, 0, &s->conn);
        uint16_t data_port = 0;
        if (rc < 0) {
            s->conn = NULL;
            if ((rc == DSC_ECLOSED || rc == DSC_EPROTO || rc == DSC_ECONNRESET) &&
                dsc_conn_http_probe(s->addr, 1000, &data_port) && data_port != 0)
                snprintf(s->error, sizeof s->error, "an HTTP port: the data port is %u",
                         (unsigned)data_port);
            else
                snprintf(s->error, sizeof s->error, "%s", dsc_strerror(rc));
            return;
        }
    }
    uint8_t body[8];
    int n = dsc_name_req_encode("", body, sizeof body);
    uint8_t *resp = NULL;
    size_t len = 0;
    int rc = n < 0 ? n : dsc_conn_call(s->conn, DSC_OP_STAT, body, (size_t)n, &resp, &len);
    if (rc < 0) {
        snprintf(s->error, sizeof s->error, "%s", dsc_strerror(rc));
        dsc_conn_close(s->conn);
        s->conn = NULL;
        free(resp);
        return;
    }
    s->stat = cJSON_ParseWithLength((const char *)resp, len);
    free(resp);
    if (s->stat == NULL) {
        snprintf(s->error, sizeof s->error, "malformed STAT answer");
        return;
    }
    s->error[0] = '\0';
    s->at = dsc_now_s();
    double hits = 0, misses = 0, served = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(s->stat, "datasets")) {
        hits += num(d, "hits");
        misses += num(d, "misses");
        served += num(d, "bytes_served");
    }
    const cJSON *srv = cJSON_GetObjectItemCaseSensitive(s->stat, "server");
    s->connections = num(srv, "connections");
    s->stragglers = cJSON_GetObjectItemCaseSensitive(srv, "stragglers");
    if (!cJSON_IsObject(s->stragglers))
        s->stragglers = NULL;
    const cJSON *store = cJSON_GetObjectItemCaseSensitive(s->stat, "store");
    const cJSON *backing = cJSON_GetObjectItemCaseSensitive(store, "backing");
    double backed = num(store, "read_through_bytes") + num(store, "bytes_loaded");
    s->backing_ms = cJSON_IsObject(backing) ? num(backing, "latency_ms") : -1;
    s->backing_mbps = s->have_prev && s->at > s->prev_at
                          ? (backed - s->prev_backing) / (s->at - s->prev_at) / 1e6
                          : 0;
    s->prev_backing = backed;
    const cJSON *peer = cJSON_GetObjectItemCaseSensitive(store, "peer_warm");
    double peer_bytes = num(peer, "bytes");
    s->peer_mbps = !cJSON_IsObject(peer) ? -1
                   : s->have_prev && s->at > s->prev_at
                       ? (peer_bytes - s->prev_peer) / (s->at - s->prev_at) / 1e6
                       : 0;
    s->prev_peer = peer_bytes;
    s->peer_shards = num(peer, "shards");
    s->peer_bytes = peer_bytes;
    s->peer_fallbacks = num(peer, "fallbacks");
    const cJSON *cluster = cJSON_GetObjectItemCaseSensitive(s->stat, "cluster");
    const cJSON *left = cJSON_GetObjectItemCaseSensitive(cluster, "warm_shards_left");
    s->shards_left =
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cluster, "clustered")) && cJSON_IsNumber(left)
            ? left->valuedouble
            : -1;
    const cJSON *left_bytes = cJSON_GetObjectItemCaseSensitive(cluster, "warm_bytes_left");
    s->bytes_left =
        s->shards_left >= 0 && cJSON_IsNumber(left_bytes) ? left_bytes->valuedouble : -1;
    if (s->have_prev && s->at > s->prev_at) {
        /* Over the last interval; with no GET in it, since the server started. */
        double dh = hits - s->prev_hits, dm = misses - s->prev_misses;
        s->hit_rate = dh + dm > 0         ? dh / (dh + dm)
                      : hits + misses > 0 ? hits / (hits + misses)
                                          : -1;
        s->mbps = (served - s->prev_served) / (s->at - s->prev_at) / 1e6;
    } else {
        s->hit_rate = hits + misses > 0 ? hits / (hits + misses) : -1;
        s->mbps = 0;
    }
    s->prev_hits = hits;
    s->prev_misses = misses;
    s->prev_served = served;
    s->prev_at = s->at;
    s->have_prev = 1;
}

/* Jobs over all servers: one entry per (job, rank), the freshest report wins; then grouped by
 * job (ranks, worst and mean stall, summed rate, the verdict of the most stalled rank). */
static uint32_t collect_jobs(server_view_t *servers, uint32_t count, job_view_t *jobs) {
    typedef struct {
        const cJSON *o;
        char key[96];
    } rank_t;
    static rank_t ranks[MAX_JOBS * 4];
    uint32_t nr = 0;
    for (uint32_t i = 0; i < count; i++) {
        const cJSON *j;
        cJSON_ArrayForEach(j, cJSON_GetObjectItemCaseSensitive(servers[i].stat, "jobs")) {
            char key[96];
            snprintf(key, sizeof key, "%s#%.0f", str(j, "job"), num(j, "rank"));
            uint32_t k = 0;
            while (k < nr && strcmp(ranks[k].key, key) != 0)
                k++;
            if (k == nr) {
                if (nr == sizeof ranks / sizeof ranks[0])
                    continue;
                memcpy(ranks[nr].key, key, sizeof key);
                ranks[nr++].o = j;
            } else if (num(j, "age_s") < num(ranks[k].o, "age_s")) {
                ranks[k].o = j;
            }
        }
    }
    uint32_t nj = 0;
    for (uint32_t k = 0; k < nr; k++) {
        const cJSON *o = ranks[k].o;
        uint32_t g = 0;
        while (g < nj && strcmp(jobs[g].job, str(o, "job")) != 0)
            g++;
        if (g == nj) {
            if (nj == MAX_JOBS)
                continue;
            memset(&jobs[g], 0, sizeof jobs[g]);
            snprintf(jobs[g].job, sizeof jobs[g].job, "%s", str(o, "job"));
            snprintf(jobs[g].dataset, sizeof jobs[g].dataset, "%s", str(o, "dataset"));
            jobs[g].stall_max = -1;
            jobs[g].age = 1e9;
            nj++;
        }
        job_view_t *v = &jobs[g];
        double stall = num(o, "stall");
        v->ranks++;
        v->world_size = (uint32_t)num(o, "world_size");
        if (num(o, "age_s") < v->age)
            v->age = num(o, "age_s");
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "finished"))) {
            v->finished++;
            continue; /* a closed loader reads nothing: not in the rate, stall or suggestion */
        }
        v->stall_sum += stall;
        v->sps += num(o, "samples_per_s");
        if (stall > v->stall_max) {
            v->stall_max = stall;
            snprintf(v->bottleneck, sizeof v->bottleneck, "%s", str(o, "bottleneck"));
            snprintf(v->verdict, sizeof v->verdict, "%s", str(o, "verdict"));
        }
    }
    return nj;
}

/* A server's peer warm-up: "N sh M MB from peers[, F from store][, L left]" ("-": not
 * clustered or not reported). */
static void warm_text(const server_view_t *s, char *buf, size_t cap) {
    if (s->shards_left < 0 && s->peer_shards == 0) {
        snprintf(buf, cap, "-");
        return;
    }
    int n = snprintf(buf, cap, "%.0f sh %.1f MB from peers", s->peer_shards, s->peer_bytes / 1e6);
    if (n > 0 && (size_t)n < cap && s->peer_fallbacks > 0)
        n += snprintf(buf + n, cap - (size_t)n, ", %.0f from store", s->peer_fallbacks);
    if (n > 0 && (size_t)n < cap && s->shards_left > 0 && s->bytes_left >= 0)
        snprintf(buf + n, cap - (size_t)n, ", %.0f left (%.1f MB)", s->shards_left,
                 s->bytes_left / 1e6);
    else if (n > 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, s->shards_left > 0 ? ", %.0f left" : ", warm",
                 s->shards_left);
}

/* Per server, the loaders' view of it (hedge.c figures from their REPORTs) and its warm-up. */
static void draw_stragglers(FILE *out, server_view_t *servers, uint32_t count) {
    fprintf(out, "\n%-24s %7s %5s %6s %7s %6s %10s %10s %7s  %s\n", "STRAGGLERS", "LOADERS", "SLOW",
            "MARKS", "HEDGES", "WON", "HEDGED", "WASTED", "EXCUSED", "PEER WARM-UP");
    for (uint32_t i = 0; i < count; i++) {
        const server_view_t *s = &servers[i];
        char warm[96];
        warm_text(s, warm, sizeof warm);
        const cJSON *h = s->stragglers;
        if (s->stat == NULL || h == NULL) {
            fprintf(out, "%-24s %7s %5s %6s %7s %6s %10s %10s %7s  %s\n", s->addr, "-", "-", "-",
                    "-", "-", "-", "-", "-",
                    s->stat == NULL ? "-" : "(not reported: an older server)");
            continue;
        }
        char hedged[32], wasted[32];
        dsc_format_size((uint64_t)num(h, "hedge_bytes"), hedged, sizeof hedged);
        dsc_format_size((uint64_t)num(h, "wasted_bytes"), wasted, sizeof wasted);
        fprintf(out, "%-24s %7.0f %5.0f %6.0f %7.0f %6.0f %10s %10s %7.0f  %s\n", s->addr,
                num(h, "loaders"), num(h, "slow_now"), num(h, "slow_marks"), num(h, "hedges"),
                num(h, "hedges_won"), hedged, wasted, num(h, "excused"), warm);
    }
}

static void draw_frame(FILE *out, server_view_t *servers, uint32_t count, int tty) {
    time_t now = time(NULL);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%H:%M:%S", localtime(&now));
    fprintf(out, "dscache top - %s - %u server%s%s\n\n", stamp, count, count == 1 ? "" : "s",
            tty ? " - q quits" : "");
    fprintf(out, "%-24s %7s %10s %6s %10s %10s %8s %10s %s\n", "SERVER", "HIT%", "MB/s", "CONNS",
            "STORE", "BACK MB/s", "BACK ms", "PEER MB/s", "STATUS");
    char a[32];
    for (uint32_t i = 0; i < count; i++) {
        server_view_t *s = &servers[i];
        if (s->stat == NULL) {
            fprintf(out, "%-24s %7s %10s %6s %10s %10s %8s %10s %s\n", s->addr, "-", "-", "-", "-",
                    "-", "-", "-", s->error);
            continue;
        }
        const cJSON *store = cJSON_GetObjectItemCaseSensitive(s->stat, "store");
        char hit[16];
        if (s->hit_rate < 0)
            snprintf(hit, sizeof hit, "-");
        else
            snprintf(hit, sizeof hit, "%.1f", 100 * s->hit_rate);
        char lat[16];
        if (s->backing_ms < 0)
            snprintf(lat, sizeof lat, "-");
        else
            snprintf(lat, sizeof lat, "%.1f", s->backing_ms);
        char peer[16], status[48];
        if (s->peer_mbps < 0)
            snprintf(peer, sizeof peer, "-");
        else
            snprintf(peer, sizeof peer, "%.1f", s->peer_mbps);
        if (s->shards_left > 0)
            snprintf(status, sizeof status, "warming: %.0f shards left", s->shards_left);
        else
            snprintf(status, sizeof status, "up");
        fprintf(out, "%-24s %7s %10.1f %6.0f %10s %10.1f %8s %10s %s\n", s->addr, hit, s->mbps,
                s->connections, dsc_format_size((uint64_t)num(store, "used"), a, sizeof a),
                s->backing_mbps, lat, peer, status);
    }
    draw_stragglers(out, servers, count);
    /* Datasets: shards resident on at least one server (from the shard maps when the servers
     * are clustered, else the largest per-server count). */
    fprintf(out, "\n%-24s %8s %9s %s\n", "DATASET", "SHARDS", "RESIDENT", "");
    struct {
        char name[64];
        uint32_t shards;
        char map[4096];
        double cached_max;
    } ds[MAX_DATASETS];
    uint32_t nd = 0;
    for (uint32_t i = 0; i < count; i++) {
        const cJSON *d;
        cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(servers[i].stat, "datasets")) {
            uint32_t k = 0;
            while (k < nd && strcmp(ds[k].name, str(d, "name")) != 0)
                k++;
            if (k == nd) {
                if (nd == MAX_DATASETS)
                    continue;
                memset(&ds[k], 0, sizeof ds[k]);
                snprintf(ds[k].name, sizeof ds[k].name, "%s", str(d, "name"));
                ds[k].shards = (uint32_t)num(d, "shards");
                nd++;
            }
            const char *map = str(d, "shard_map");
            for (size_t c = 0; map[c] && c < sizeof ds[k].map - 1; c++)
                if (map[c] == 'O' || map[c] == 'c')
                    ds[k].map[c] = 1;
            if (num(d, "cached_shards") > ds[k].cached_max)
                ds[k].cached_max = num(d, "cached_shards");
        }
    }
    for (uint32_t k = 0; k < nd; k++) {
        uint32_t union_count = 0;
        for (uint32_t c = 0; c < ds[k].shards && c < sizeof ds[k].map; c++)
            union_count += ds[k].map[c] != 0;
        double resident = union_count > ds[k].cached_max ? union_count : ds[k].cached_max;
        double fraction = ds[k].shards ? resident / ds[k].shards : 0;
        char bar[21];
        int filled = (int)(fraction * 20 + 0.5);
        for (int b = 0; b < 20; b++)
            bar[b] = b < filled ? '#' : '.';
        bar[20] = '\0';
        fprintf(out, "%-24s %8u %8.1f%% [%s]\n", ds[k].name, ds[k].shards, 100 * fraction, bar);
    }
    static job_view_t jobs[MAX_JOBS];
    uint32_t nj = collect_jobs(servers, count, jobs);
    fprintf(out, "\n%-24s %-12s %7s %7s %7s %10s %-9s %s\n", "JOB", "DATASET", "RANKS", "STALL%",
            "MAX%", "SAMPLES/s", "LIMIT", "SUGGESTION");
    if (nj == 0)
        fprintf(out, "(no job has reported yet)\n");
    for (uint32_t g = 0; g < nj; g++) {
        job_view_t *v = &jobs[g];
        char ranks[24];
        snprintf(ranks, sizeof ranks, "%u/%u", v->ranks, v->world_size);
        if (v->finished == v->ranks) {
            fprintf(out, "%-24s %-12s %7s %7s %7s %10s %-9s finished %.0f s ago\n", v->job,
                    v->dataset, ranks, "-", "-", "-", "finished", v->age);
            continue;
        }
        if (v->finished > 0)
            snprintf(ranks, sizeof ranks, "%u/%u", v->ranks - v->finished, v->world_size);
        uint32_t live = v->ranks - v->finished;
        fprintf(out, "%-24s %-12s %7s %7.1f %7.1f %10.0f %-9s %s%s\n", v->job, v->dataset, ranks,
                100 * v->stall_sum / live, 100 * v->stall_max, v->sps, v->bottleneck, v->verdict,
                v->finished ? " (some ranks finished)" : "");
    }
}

/* --json: the frame as one object: {"servers": [{"server", "error" | the figures, "stragglers",
 * "peer_warm"}], "jobs": [{"job", "dataset", "ranks", "world_size", "finished", "stall",
 * "stall_max", "samples_per_s", "bottleneck", "suggestion"}]}. Returns 0 or DSC_ENOMEM. */
static int print_json(FILE *out, server_view_t *servers, uint32_t count) {
    cJSON *root = cJSON_CreateObject();
    cJSON *list = root ? cJSON_AddArrayToObject(root, "servers") : NULL;
    for (uint32_t i = 0; list != NULL && i < count; i++) {
        const server_view_t *s = &servers[i];
        cJSON *o = cJSON_CreateObject();
        if (o == NULL || !cJSON_AddItemToArray(list, o)) {
            cJSON_Delete(o);
            break;
        }
        cJSON_AddStringToObject(o, "server", s->addr);
        if (s->stat == NULL) {
            cJSON_AddStringToObject(o, "error", s->error);
            continue;
        }
        if (s->hit_rate >= 0)
            cJSON_AddNumberToObject(o, "hit_rate", s->hit_rate);
        else
            cJSON_AddNullToObject(o, "hit_rate");
        cJSON_AddNumberToObject(o, "mb_per_s", s->mbps);
        cJSON_AddNumberToObject(o, "connections", s->connections);
        cJSON_AddNumberToObject(o, "backing_mb_per_s", s->backing_mbps);
        if (s->stragglers != NULL)
            cJSON_AddItemToObject(o, "stragglers", cJSON_Duplicate(s->stragglers, 1));
        else
            cJSON_AddNullToObject(o, "stragglers");
        cJSON *w = cJSON_AddObjectToObject(o, "peer_warm");
        if (w != NULL) {
            cJSON_AddNumberToObject(w, "shards", s->peer_shards);
            cJSON_AddNumberToObject(w, "bytes", s->peer_bytes);
            cJSON_AddNumberToObject(w, "fallbacks", s->peer_fallbacks);
            cJSON_AddNumberToObject(w, "mb_per_s", s->peer_mbps);
            if (s->shards_left >= 0)
                cJSON_AddNumberToObject(w, "shards_left", s->shards_left);
            else
                cJSON_AddNullToObject(w, "shards_left");
            if (s->bytes_left >= 0)
                cJSON_AddNumberToObject(w, "bytes_left", s->bytes_left);
            else
                cJSON_AddNullToObject(w, "bytes_left");
        }
    }
    static job_view_t jobs[MAX_JOBS];
    uint32_t nj = collect_jobs(servers, count, jobs);
    cJSON *jl = root ? cJSON_AddArrayToObject(root, "jobs") : NULL;
    for (uint32_t g = 0; jl != NULL && g < nj; g++) {
        const job_view_t *v = &jobs[g];
        cJSON *o = cJSON_CreateObject();
        if (o == NULL || !cJSON_AddItemToArray(jl, o)) {
            cJSON_Delete(o);
            break;
        }
        uint32_t live = v->ranks - v->finished;
        cJSON_AddStringToObject(o, "job", v->job);
        cJSON_AddStringToObject(o, "dataset", v->dataset);
        cJSON_AddNumberToObject(o, "ranks", v->ranks);
        cJSON_AddNumberToObject(o, "world_size", v->world_size);
        cJSON_AddNumberToObject(o, "finished", v->finished);
        cJSON_AddNumberToObject(o, "stall", live ? v->stall_sum / live : 0);
        cJSON_AddNumberToObject(o, "stall_max", v->stall_max > 0 ? v->stall_max : 0);
        cJSON_AddNumberToObject(o, "samples_per_s", v->sps);
        cJSON_AddStringToObject(o, "bottleneck", v->bottleneck);
        cJSON_AddStringToObject(o, "suggestion", v->verdict);
    }
    char *text = list && jl ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (text == NULL)
        return DSC_ENOMEM;
    fprintf(out, "%s\n", text);
    free(text);
    return 0;
}

/* The terminal's width in columns, 0 when unknown (not a terminal: then nothing is cut). */
static size_t terminal_columns(int fd) {
    struct winsize ws;
    if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    return 0;
}

/* Draws one frame; in a terminal each line is cut to its width (ending in "..."), so that a
 * long suggestion never wraps into the next table row. */
static void draw(FILE *out, server_view_t *servers, uint32_t count, int tty) {
    size_t width = tty ? terminal_columns(fileno(out)) : 0;
    char *text = NULL;
    size_t len = 0;
    FILE *mem = width > 0 ? open_memstream(&text, &len) : NULL;
    if (mem == NULL) { /* not a terminal, or no memory for the frame: drawn as it is */
        if (tty)
            fputs("\033[H\033[2J", out);
        draw_frame(out, servers, count, tty);
        fflush(out);
        return;
    }
    draw_frame(mem, servers, count, tty);
    fclose(mem);
    fputs("\033[H\033[2J", out);
    for (char *line = text; line < text + len;) {
        char *nl = memchr(line, '\n', (size_t)(text + len - line));
        size_t n = nl != NULL ? (size_t)(nl - line) : (size_t)(text + len - line);
        if (n > width && width > 3)
            fprintf(out, "%.*s...", (int)(width - 3), line);
        else
            fwrite(line, 1, n < width ? n : width, out);
        if (nl == NULL)
            break;
        fputc('\n', out);
        line = nl + 1;
    }
    free(text);
    fflush(out);
}

static struct termios saved_termios;
static int raw_mode;

static void restore_terminal(void) {
    if (raw_mode) {
        tcsetattr(STDIN_FILENO, TCSANOW, &saved_termios);
        fputs("\033[?25h", stdout);
        fflush(stdout);
        raw_mode = 0;
    }
}

static volatile sig_atomic_t stop_requested;
static void on_signal(int sig) {
    (void)sig;
    stop_requested = 1;
}

static int add_servers(const char *list, server_view_t *servers, uint32_t *count) {
    const char *p = list;
    while (*p) {
        size_t n = strcspn(p, ", ");
        if (n > 0) {
            if (*count == MAX_SERVERS || n >= DSC_MEMBER_MAX)
                return -1;
            memcpy(servers[*count].addr, p, n);
            servers[*count].addr[n] = '\0';
            (*count)++;
        }
        p += n;
        if (*p)
            p++;
    }
    return 0;
}

int dsc_cmd_top(int argc, char **argv) {
    static server_view_t servers[MAX_SERVERS];
    memset(servers, 0, sizeof servers);
    uint32_t count = 0;
    double interval = 1.0;
    int once = 0, json = 0;
    optind = 1;
    int opt;
    while ((opt = getopt_long(argc, argv, "h", long_options, NULL)) != -1) {
        switch (opt) {
        case 's':
            if (add_servers(optarg, servers, &count) < 0)
                return dsc_cli_usage(CMD, "--server: at most %d servers of HOST:PORT", MAX_SERVERS);
            break;
        case 'i': {
            char *end = NULL;
            interval = strtod(optarg, &end);
            if (end == optarg || *end != '\0' || !(interval >= 0.2 && interval <= 60))
                return dsc_cli_usage(CMD,
                                     "--interval: '%s' is not a number of seconds in "
                                     "[0.2, 60]",
                                     optarg);
            break;
        }
        case '1':
            once = 1;
            break;
        case 'j':
            once = json = 1;
            break;
        case 'h':
            print_help();
            return DSC_CLI_OK;
        default:
            return dsc_cli_usage(CMD, "unknown option");
        }
    }
    if (optind < argc)
        return dsc_cli_usage(CMD, "unexpected argument '%s'", argv[optind]);
    if (count == 0)
        return dsc_cli_usage(CMD, "--server is required");
    for (uint32_t i = 0; i < count; i++)
        sample(&servers[i]);
    int exit_code = DSC_CLI_OK;
    if (once) {
        usleep((useconds_t)(interval * 1e6));
        uint32_t up = 0;
        for (uint32_t i = 0; i < count; i++) {
            sample(&servers[i]);
            up += servers[i].stat != NULL;
        }
        if (json) {
            if (print_json(stdout, servers, count) < 0)
                exit_code = dsc_cli_fail(CMD, "out of memory for the JSON frame");
        } else {
            draw(stdout, servers, count, 0);
        }
        if (up == 0)
            exit_code =
                dsc_cli_fail(CMD, "no server answered (%s: %s)", servers[0].addr, servers[0].error);
    } else {
        int tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
        if (tty && tcgetattr(STDIN_FILENO, &saved_termios) == 0) {
            struct termios t = saved_termios;
            t.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
            t.c_cc[VMIN] = 0;
            t.c_cc[VTIME] = 0;
            if (tcsetattr(STDIN_FILENO, TCSANOW, &t) == 0) {
                raw_mode = 1;
                atexit(restore_terminal);
                fputs("\033[?25l", stdout);
            }
        }
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        int stdin_open = 1;
        while (!stop_requested) {
            draw(stdout, servers, count, tty);
            double until = dsc_now_s() + interval;
            int quit = 0;
            while (!stop_requested && !quit) {
                double left = until - dsc_now_s();
                if (left <= 0)
                    break;
                struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
                int r = poll(&pfd, stdin_open ? 1 : 0, (int)(left * 1000) + 1);
                if (r > 0 && (pfd.revents & (POLLIN | POLLHUP))) {
                    char c;
                    ssize_t got = read(STDIN_FILENO, &c, 1);
                    if (got == 1 && (c == 'q' || c == 'Q'))
                        quit = 1;
                    else if (got == 0)
                        stdin_open = 0; /* EOF: keep refreshing until a signal */
                }
            }
            if (quit)
                break;
            for (uint32_t i = 0; i < count; i++)
                sample(&servers[i]);
        }
        restore_terminal();
    }
    for (uint32_t i = 0; i < count; i++) {
        cJSON_Delete(servers[i].stat);
        dsc_conn_close(servers[i].conn);
    }
    return exit_code;
}
