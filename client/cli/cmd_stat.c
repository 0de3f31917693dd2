/* dscache stat: a server's statistics (STAT) as tables (the store, the datasets, the jobs it
 * feeds), or the raw JSON with --json. */
#include "cli.h"

#include "conn.h"
#include "protocol.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMD "stat"

static void print_help(void) {
    printf("usage: dscache stat --server HOST:PORT [--dataset NAME] [--json] [--timeout S]\n"
           "\n"
           "Prints the server's store use; per dataset, shards, cached shards and bytes, hits,\n"
           "misses, bytes served and bad shards (damaged shards are named below the table);\n"
           "then the jobs it feeds, as their loaders report them (REPORT, every few seconds):\n"
           "job, rank/world size, dataset, data stall, samples/s and the age of the last report;\n"
           "then dataset directories the server does not serve: a name that belongs to the\n"
           "directory that served it first (conflict), a manifest refused (not a regular file,\n"
           "a link out of --data-root, invalid).\n"
           "\n"
           "  --server HOST:PORT   the dscached data port\n"
           "  --timeout SECONDS    give up when the server is silent that long (default 30)\n"
           "  --dataset NAME       one dataset only (default: all)\n"
           "  --json               the server's JSON answer as it is\n"
           "  -h, --help           this text\n");
}

static const struct option long_options[] = {
    DSC_CLI_TARGET_OPTIONS,
    {"json", no_argument, NULL, 'j'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0.0;
}

static const char *str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "?";
}

/* Memory per dataset: resident bytes against its share (its limit, else the store less what
 * pinned datasets hold), the limit, whether it is pinned and its priority (dscache
 * pin|unpin|limit|priority). */
static void print_memory(const cJSON *list) {
    printf("\n%-24s %12s %12s %12s %6s %8s\n", "MEMORY", "RESIDENT", "SHARE", "LIMIT", "PINNED",
           "PRIORITY");
    const cJSON *d;
    cJSON_ArrayForEach(d, list) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(d, "name");
        char a[32], b[32], c[32];
        double limit = num(d, "limit_bytes");
        if (limit > 0)
            dsc_format_size((uint64_t)limit, c, sizeof c);
        else
            snprintf(c, sizeof c, "none");
        printf("%-24s %12s %12s %12s %6s %8.0f\n", cJSON_IsString(name) ? name->valuestring : "?",
               dsc_format_size((uint64_t)num(d, "cached_bytes"), a, sizeof a),
               dsc_format_size((uint64_t)num(d, "share_bytes"), b, sizeof b), c,
               num(d, "pinned") > 0 ? "yes" : "no", num(d, "priority"));
    }
}

/* Damaged shards by name, below the datasets table ("damaged" of each dataset in STAT). */
static void print_damaged(const cJSON *datasets) {
    int any = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, datasets) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(d, "damaged")) {
            if (!any)
                printf("\n");
            any = 1;
            if (strcmp(str(e, "state"), "bad") == 0)
                printf("damaged: dataset %s shard %.0f (%s): whole shard refused (failed "
                       "validation), answered CORRUPT\n",
                       str(d, "name"), num(e, "shard"), str(e, "file"));
            else
                printf("damaged: dataset %s shard %.0f (%s): %.0f of %.0f chunks damaged (first: "
                       "chunk %.0f), answered CORRUPT; its other chunks are served\n",
                       str(d, "name"), num(e, "shard"), str(e, "file"), num(e, "damaged_chunks"),
                       num(e, "chunks"), num(e, "first_chunk"));
        }
    }
    if (any)
        printf("  loaders read damaged chunks from a replica or fallback_path; repair: re-ingest "
               "the shard (dscache inspect DIR names the damage)\n");
}

/* The jobs table: one line per (job, rank) the server has a report from ("jobs" of STAT). */
static void print_jobs(const cJSON *jobs) {
    int n = cJSON_IsArray(jobs) ? cJSON_GetArraySize(jobs) : 0;
    if (n == 0) {
        printf("\njobs: none reporting\n");
        return;
    }
    printf("\n%-32s %9s %-24s %7s %11s %8s\n", "JOB", "RANK", "DATASET", "STALL", "SAMPLES/S",
           "AGE");
    const cJSON *j;
    cJSON_ArrayForEach(j, jobs) {
        char rank[24];
        snprintf(rank, sizeof rank, "%.0f/%.0f", num(j, "rank"), num(j, "world_size"));
        printf("%-32s %9s %-24s %6.1f%% %11.0f %7.1fs\n", str(j, "job"), rank, str(j, "dataset"),
               100.0 * num(j, "stall"), num(j, "samples_per_s"), num(j, "age_s"));
    }
}

/* Directories not served ("catalog" of STAT): name conflicts and refused manifests. */
static void print_catalog(const cJSON *catalog) {
    const cJSON *e;
    int any = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(catalog, "conflicts")) {
        if (!any++)
            printf("\n");
        printf("conflict: %s claims dataset %s, which belongs to %s (served from there first): "
               "not served\n",
               str(e, "dir"), str(e, "name"), str(e, "served_from"));
    }
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(catalog, "refused")) {
        if (!any++)
            printf("\n");
        printf("refused: %s: %s (%s)\n", str(e, "dir"), str(e, "reason"), str(e, "error"));
    }
    double listed = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(catalog, "conflicts")) +
                    cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(catalog, "refused"));
    double total = num(catalog, "conflict_count") + num(catalog, "refused_count");
    if (total > listed)
        printf("... and %.0f more (dscache stat --json)\n", total - listed);
}

static int print_table(const char *json, size_t len) {
    cJSON *root = cJSON_ParseWithLength(json, len);
    const cJSON *store = cJSON_GetObjectItemCaseSensitive(root, "store");
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "datasets");
    if (!cJSON_IsObject(store) || !cJSON_IsArray(list)) {
        cJSON_Delete(root);
        return dsc_cli_fail(CMD, "malformed STAT answer");
    }
    char a[32], b[32], c[32];
    const cJSON *policy = cJSON_GetObjectItemCaseSensitive(store, "policy");
    printf("store: %s used of %s, policy %s, %.0f evictions, %.0f read-through loads\n\n",
           dsc_format_size((uint64_t)num(store, "used"), a, sizeof a),
           dsc_format_size((uint64_t)num(store, "capacity"), b, sizeof b),
           cJSON_IsString(policy) ? policy->valuestring : "?", num(store, "evictions"),
           num(store, "read_through"));
    printf("%-24s %8s %8s %12s %12s %10s %10s %6s %12s %5s\n", "DATASET", "SHARDS", "CACHED",
           "CACHED_BYTES", "SIZE", "HITS", "MISSES", "HIT%", "SERVED", "BAD");
    const cJSON *d;
    cJSON_ArrayForEach(d, list) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(d, "name");
        double hits = num(d, "hits"), misses = num(d, "misses");
        printf(
            "%-24s %8.0f %8.0f %12s %12s %10.0f %10.0f %5.1f%% %12s %5.0f\n",
            cJSON_IsString(name) ? name->valuestring : "?", num(d, "shards"),
            num(d, "cached_shards"), dsc_format_size((uint64_t)num(d, "cached_bytes"), a, sizeof a),
            dsc_format_size((uint64_t)num(d, "bytes"), b, sizeof b), hits, misses,
            hits + misses > 0 ? 100.0 * hits / (hits + misses) : 0.0,
            dsc_format_size((uint64_t)num(d, "bytes_served"), c, sizeof c), num(d, "bad_shards"));
    }
    print_memory(list);
    print_damaged(list);
    print_jobs(cJSON_GetObjectItemCaseSensitive(root, "jobs"));
    print_catalog(cJSON_GetObjectItemCaseSensitive(root, "catalog"));
    cJSON_Delete(root);
    return DSC_CLI_OK;
}

int dsc_cmd_stat(int argc, char **argv) {
    dsc_cli_target_t target = {.server = NULL, .dataset = ""};
    int json = 0;
    optind = 1;
    int opt;
    while ((opt = getopt_long(argc, argv, "h", long_options, NULL)) != -1) {
        if (dsc_cli_target_option(&target, opt, optarg))
            continue;
        switch (opt) {
        case 'j':
            json = 1;
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
    const char *server = target.server, *dataset = target.dataset;
    if (server == NULL)
        return dsc_cli_usage(CMD, "--server is required");
    uint8_t body[DSC_MAX_NAME + 8];
    int n = dsc_name_req_encode(dataset, body, sizeof body);
    if (n < 0)
        return dsc_cli_usage(CMD, "--dataset '%s': not a valid name", dataset);
    uint32_t timeout_ms;
    if (dsc_cli_timeout_ms(CMD, &target, &timeout_ms) < 0)
        return DSC_CLI_USAGE;
    dsc_conn_t *conn = NULL;
    if (dsc_cli_connect(CMD, server, timeout_ms, &conn) != DSC_CLI_OK)
        return DSC_CLI_FAIL;
    uint8_t *resp = NULL;
    size_t len = 0;
    int rc = dsc_conn_call(conn, DSC_OP_STAT, body, (size_t)n, &resp, &len);
    int exit_code;
    if (rc < 0)
        exit_code = dsc_cli_fail(CMD, "%s: %s%s%s", server, dsc_strerror(rc),
                                 *dsc_conn_last_error(conn) ? ": " : "", dsc_conn_last_error(conn));
    else if (json)
        exit_code = printf("%s\n", (const char *)resp) < 0 ? DSC_CLI_FAIL : DSC_CLI_OK;
    else
        exit_code = print_table((const char *)resp, len);
    free(resp);
    dsc_conn_close(conn);
    return exit_code;
}
