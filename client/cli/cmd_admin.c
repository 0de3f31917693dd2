/* dscache list | warm | evict: a server's datasets (LIST) and the admin operations WARM and EVICT
 * (load shards into the store, or drop them) against one server. */
#include "cli.h"

#include "conn.h"
#include "protocol.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct option long_options[] = {
    DSC_CLI_TARGET_OPTIONS,
    {"shard", required_argument, NULL, 'S'},
    {"json", no_argument, NULL, 'j'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static void print_help(const char *cmd) {
    if (strcmp(cmd, "list") == 0) {
        printf("usage: dscache list --server HOST:PORT [--json]\n"
               "\n"
               "Lists the datasets a server serves: name, shards, samples, bytes.\n"
               "\n"
               "  --server HOST:PORT   the dscached data port\n"
               "  --json               the server's JSON answer as it is\n"
               "  --timeout SECONDS    give up when the server is silent that long (default 10)\n"
               "  -h, --help           this text\n");
        return;
    }
    printf("usage: dscache %s --server HOST:PORT --dataset NAME [--shard ID]\n"
           "\n"
           "%s\n"
           "(An admin operation: once servers authenticate clients it needs an admin\n"
           "credential.)\n"
           "\n"
           "  --server HOST:PORT   the dscached data port\n"
           "  --dataset NAME       the dataset\n"
           "  --shard ID           one shard (default: every shard of the dataset)\n"
           "  --timeout SECONDS    give up when the server is silent that long (default:\n"
           "                       600 for warm, 10 for evict)\n"
           "  -h, --help           this text\n",
           cmd,
           strcmp(cmd, "warm") == 0
               ? "Loads shards into the server's store and waits until they are resident\n"
                 "(a progress bar on a terminal; it stops waiting once nothing has changed for\n"
                 "3 s: store full or the dataset's limit reached); prints how many loads it\n"
                 "started."
               : "Drops shards from the server's store (a shard in use by an answer is dropped\n"
                 "once that answer is sent); prints how many were dropped.");
}

static int print_list(const char *cmd, const char *json, size_t len) {
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!cJSON_IsArray(root)) {
        cJSON_Delete(root);
        return dsc_cli_fail(cmd, "malformed LIST answer");
    }
    printf("%-24s %8s %12s %14s\n", "DATASET", "SHARDS", "SAMPLES", "BYTES");
    const cJSON *d;
    cJSON_ArrayForEach(d, root) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(d, "name");
        const cJSON *shards = cJSON_GetObjectItemCaseSensitive(d, "shards");
        const cJSON *samples = cJSON_GetObjectItemCaseSensitive(d, "samples");
        const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(d, "bytes");
        printf("%-24s %8.0f %12.0f %14.0f\n", cJSON_IsString(name) ? name->valuestring : "?",
               cJSON_IsNumber(shards) ? shards->valuedouble : 0.0,
               cJSON_IsNumber(samples) ? samples->valuedouble : 0.0,
               cJSON_IsNumber(bytes) ? bytes->valuedouble : 0.0);
    }
    cJSON_Delete(root);
    return DSC_CLI_OK;
}

/* STAT of one dataset: its shards, how many are resident and how many loading, and whether
 * shard `shard` (DSC_SHARD_ALL: none) is resident (its "shard_map" character). Returns 0 or
 * DSC_E*. */
typedef struct residency {
    double cached, shards, loading;
    int shard_resident;
} residency_t;

static int resident_of(dsc_conn_t *conn, const char *dataset, uint32_t shard, residency_t *out) {
    uint8_t body[DSC_MAX_NAME + 8];
    int n = dsc_name_req_encode(dataset, body, sizeof body);
    if (n < 0)
        return n;
    uint8_t *resp = NULL;
    size_t len = 0;
    int rc = dsc_conn_call(conn, DSC_OP_STAT, body, (size_t)n, &resp, &len);
    if (rc < 0)
        return rc;
    cJSON *root = cJSON_ParseWithLength((const char *)resp, len);
    free(resp);
    const cJSON *d = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "datasets"), 0);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(d, "cached_shards");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(d, "shards");
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(d, "loading_shards");
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(d, "shard_map");
    rc = cJSON_IsNumber(c) && cJSON_IsNumber(t) ? 0 : DSC_EPROTO;
    if (rc == 0) {
        out->cached = c->valuedouble;
        out->shards = t->valuedouble;
        out->loading = cJSON_IsNumber(l) ? l->valuedouble : -1; /* -1: an older server */
        out->shard_resident = 0;
        if (shard != DSC_SHARD_ALL && cJSON_IsString(map) && shard < strlen(map->valuestring)) {
            char m = map->valuestring[shard];
            out->shard_resident = m == 'O' || m == 'c';
        }
    }
    cJSON_Delete(root);
    return rc;
}

/* After WARM of a whole dataset: waits until every shard is resident, or nothing has changed for
 * 3 s with no load in flight (store full, or the dataset's limit reached: the rest is read
 * through), or timeout_ms; a progress bar on stderr when it is a terminal. Returns 1 (all
 * resident), 0 (not all: said on stdout) or -1 (STAT failed). */
static int wait_resident(dsc_conn_t *conn, const char *dataset, uint32_t timeout_ms) {
    residency_t r = {0};
    double last = -1, t0 = dsc_now_s(), changed = t0;
    int tty = isatty(STDERR_FILENO), got = 0;
    while (resident_of(conn, dataset, DSC_SHARD_ALL, &r) == 0) {
        got = 1;
        double now = dsc_now_s();
        if (r.cached != last) {
            last = r.cached;
            changed = now;
        }
        if (tty) {
            int filled = r.shards > 0 ? (int)(30 * r.cached / r.shards) : 30;
            fprintf(stderr, "\rwarming %s [%.*s%*s] %.0f/%.0f shards", dataset, filled,
                    "==============================", 30 - filled, "", r.cached, r.shards);
        }
        if (r.cached >= r.shards || (now - changed >= 3 && r.loading <= 0) ||
            (now - t0) * 1000 >= timeout_ms)
            break;
        usleep(200 * 1000);
    }
    if (tty)
        fprintf(stderr, "\n");
    if (got && r.cached < r.shards)
        printf("%s: %.0f of %.0f shards resident (store full or the dataset's limit reached: "
               "the rest are read through)\n",
               dataset, r.cached, r.shards);
    return got ? r.cached >= r.shards : -1;
}

/* After WARM of one shard that started its load: waits until the shard is resident or the
 * dataset has no load in flight any more (the load failed, or was evicted at once), or
 * timeout_ms. Returns 1 resident, 0 not, -1 STAT failed. */
static int wait_shard(dsc_conn_t *conn, const char *dataset, uint32_t shard, uint32_t timeout_ms) {
    double t0 = dsc_now_s();
    residency_t r = {0};
    while (resident_of(conn, dataset, shard, &r) == 0) {
        if (r.shard_resident || r.loading < 0) /* an older server: it cannot say, as before */
            return 1;
        if (r.loading == 0 || (dsc_now_s() - t0) * 1000 >= timeout_ms)
            return 0;
        usleep(20 * 1000);
    }
    return -1;
}

/* argv[0] is "list", "warm" or "evict". */
static int run(int argc, char **argv) {
    const char *cmd = argv[0];
    int is_list = strcmp(cmd, "list") == 0, is_warm = strcmp(cmd, "warm") == 0;
    dsc_cli_target_t target = {.server = NULL, .dataset = NULL};
    uint32_t shard = DSC_SHARD_ALL;
    int json = 0;
    optind = 1;
    int opt;
    while ((opt = getopt_long(argc, argv, "h", long_options, NULL)) != -1) {
        if (dsc_cli_target_option(&target, opt, optarg))
            continue;
        switch (opt) {
        case 'S': {
            uint64_t v;
            if (dsc_cli_parse_u64(cmd, "--shard", optarg, 0, UINT32_MAX - 1, &v) < 0)
                return DSC_CLI_USAGE;
            shard = (uint32_t)v;
            break;
        }
        case 'j':
            json = 1;
            break;
        case 'h':
            print_help(cmd);
            return DSC_CLI_OK;
        default:
            return dsc_cli_usage(cmd, "unknown option");
        }
    }
    if (optind < argc)
        return dsc_cli_usage(cmd, "unexpected argument '%s'", argv[optind]);
    if (target.server == NULL)
        return dsc_cli_usage(cmd, "--server HOST:PORT is required");
    uint8_t body[DSC_MAX_NAME + 16];
    int n = 0;
    if (!is_list) {
        if (target.dataset == NULL)
            return dsc_cli_usage(cmd, "--dataset NAME is required");
        dsc_shard_req_t req = {.shard_id = shard};
        size_t name_len = strlen(target.dataset);
        if (name_len == 0 || name_len >= DSC_MAX_NAME)
            return dsc_cli_usage(cmd, "--dataset '%s': not a valid name", target.dataset);
        req.dataset.ptr = target.dataset;
        req.dataset.len = (uint16_t)name_len;
        n = dsc_shard_req_encode(&req, body, sizeof body);
        if (n < 0)
            return dsc_cli_usage(cmd, "--dataset '%s': not a valid name", target.dataset);
    } else if (target.dataset != NULL) {
        return dsc_cli_usage(cmd, "--dataset is not an option of list");
    }
    /* WARM waits for the loads: a long time-out unless --timeout says otherwise. */
    uint32_t timeout_ms = is_warm ? 600000 : 10000;
    if (target.timeout && dsc_cli_timeout_ms(cmd, &target, &timeout_ms) < 0)
        return DSC_CLI_USAGE;
    dsc_conn_t *conn = NULL;
    if (dsc_cli_connect(cmd, target.server, timeout_ms, &conn) != DSC_CLI_OK)
        return DSC_CLI_FAIL;
    uint8_t *resp = NULL;
    size_t len = 0;
    uint32_t op = is_list ? DSC_OP_LIST : is_warm ? DSC_OP_WARM : DSC_OP_EVICT;
    int rc = dsc_conn_call(conn, op, body, (size_t)n, &resp, &len);
    int exit_code;
    if (rc < 0) {
        exit_code = dsc_cli_fail(cmd, "%s: %s%s%s", target.server, dsc_strerror(rc),
                                 *dsc_conn_last_error(conn) ? ": " : "", dsc_conn_last_error(conn));
    } else if (is_list) {
        exit_code =
            json ? (printf("%.*s\n", (int)len, (const char *)resp) < 0 ? DSC_CLI_FAIL : DSC_CLI_OK)
                 : print_list(cmd, (const char *)resp, len);
    } else if (len != 4) {
        exit_code = dsc_cli_fail(cmd, "%s: malformed %s answer (%zu bytes)", target.server,
                                 is_warm ? "WARM" : "EVICT", len);
    } else {
        uint32_t count = (uint32_t)resp[0] | (uint32_t)resp[1] << 8 | (uint32_t)resp[2] << 16 |
                         (uint32_t)resp[3] << 24; /* little-endian, as every frame field */
        char which[32] = "all shards";
        if (shard != DSC_SHARD_ALL)
            snprintf(which, sizeof which, "shard %u", shard);
        exit_code = DSC_CLI_OK;
        /* WARM answers once its loads are started: "loaded" is said when they are done. */
        int done = 1;
        if (is_warm && count > 0)
            done = shard == DSC_SHARD_ALL ? wait_resident(conn, target.dataset, timeout_ms)
                                          : wait_shard(conn, target.dataset, shard, timeout_ms);
        if (done > 0)
            printf("%s (%s): %u shard%s %s\n", target.dataset, which, count, count == 1 ? "" : "s",
                   is_warm ? "loaded" : "dropped");
        else if (done < 0)
            exit_code = dsc_cli_fail(cmd, "%s: STAT failed while waiting for the load: %s",
                                     target.server, dsc_conn_last_error(conn));
        else if (shard != DSC_SHARD_ALL)
            exit_code = dsc_cli_fail(cmd,
                                     "%s (%s): the load did not make it resident (store "
                                     "full, or the shard is damaged: see the server's log)",
                                     target.dataset, which);
        /* else a whole dataset partly resident (store full, a limit): wait_resident said so,
         * and it is no error (docs/operations.md) */
        fflush(stdout);
    }
    free(resp);
    dsc_conn_close(conn);
    return exit_code;
}

int dsc_cmd_list(int argc, char **argv) {
    return run(argc, argv);
}

int dsc_cmd_warm(int argc, char **argv) {
    return run(argc, argv);
}

int dsc_cmd_evict(int argc, char **argv) {
    return run(argc, argv);
}
