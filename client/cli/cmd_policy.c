/* dscache pin | unpin | limit | priority: a dataset's memory on one server, changed live (the
 * admin operation POLICY, PROTOCOL.md). */
#include "cli.h"

#include "conn.h"
#include "protocol.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct option long_options[] = {
    DSC_CLI_TARGET_OPTIONS,
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static void print_help(const char *cmd) {
    int is_limit = strcmp(cmd, "limit") == 0;
    int is_priority = strcmp(cmd, "priority") == 0;
    printf("usage: dscache %s --server HOST:PORT [--dataset] DATASET%s\n"
           "\n"
           "%s\n"
           "The setting is by name: a dataset not served yet (a --data-root may bring it)\n"
           "gets it when it appears, and a replaced dataset keeps it. An admin operation\n"
           "(an admin credential once the server authenticates clients); the server logs it.\n"
           "\n"
           "  --server HOST:PORT   the dscached data port\n"
           "  --dataset NAME       the dataset (or as the first argument)\n"
           "%s"
           "  --timeout SECONDS    give up when the server is silent that long (default 10)\n"
           "  -h, --help           this text\n",
           cmd,
           is_limit      ? " BYTES"
           : is_priority ? " N"
                         : "",
           is_priority
               ? "Sets a dataset's priority (0..1000; 0, the default, for every dataset not given\n"
                 "one): when the store is full, its loads evict unpinned shards of datasets of a\n"
                 "lower priority first (least recently used first among them), then of its own\n"
                 "and equal ones. Nothing is evicted now: later loads follow it. Replaces the\n"
                 "priority from --priority or the configuration until the server restarts."
           : strcmp(cmd, "pin") == 0
               ? "Pins a dataset: it stays resident (never evicted to make room, by the LRU or\n"
                 "another dataset's warm-up; EVICT skips it) and its shards start loading now,\n"
                 "evicting unpinned ones if the store is full. Prints the loads started."
           : strcmp(cmd, "unpin") == 0
               ? "Unpins a dataset: its shards are evicted like any other's again."
               : "Caps a dataset's resident bytes: shards over the cap are evicted now (least\n"
                 "recently used first) and misses beyond it are read through (lru: evicting the\n"
                 "dataset's own shards first). BYTES takes K M G T; 0 removes the cap. Prints\n"
                 "the shards evicted.",
           is_limit ? "  BYTES                the cap (suffixes K M G T; 0: none)\n"
           : is_priority
               ? "  N                    the priority, 0..1000 (higher keeps its shards)\n"
               : "");
}

/* argv[0] is "pin", "unpin", "limit" or "priority". */
static int run(int argc, char **argv) {
    const char *cmd = argv[0];
    int is_limit = strcmp(cmd, "limit") == 0;
    int is_priority = strcmp(cmd, "priority") == 0;
    dsc_cli_target_t target = {.server = NULL, .dataset = NULL};
    optind = 1;
    int opt;
    while ((opt = getopt_long(argc, argv, "h", long_options, NULL)) != -1) {
        if (dsc_cli_target_option(&target, opt, optarg))
            continue;
        if (opt == 'h') {
            print_help(cmd);
            return DSC_CLI_OK;
        }
        return dsc_cli_usage(cmd, "unknown option");
    }
    if (target.dataset == NULL && optind < argc)
        target.dataset = argv[optind++];
    uint64_t bytes = 0;
    if (is_limit) {
        if (optind >= argc)
            return dsc_cli_usage(cmd, "BYTES is required (0 removes the limit)");
        if (dsc_cli_parse_size(cmd, "BYTES", argv[optind++], &bytes) < 0)
            return DSC_CLI_USAGE;
    } else if (is_priority) {
        if (optind >= argc)
            return dsc_cli_usage(cmd, "N is required (0..%d)", DSC_POLICY_MAX_PRIORITY);
        const char *arg = argv[optind++];
        char *end = NULL;
        unsigned long v = strtoul(arg, &end, 10);
        if (arg[0] < '0' || arg[0] > '9' || *end != '\0' || v > DSC_POLICY_MAX_PRIORITY)
            return dsc_cli_usage(cmd, "N: '%s' is not a priority 0..%d", arg,
                                 DSC_POLICY_MAX_PRIORITY);
        bytes = v;
    }
    if (optind < argc)
        return dsc_cli_usage(cmd, "unexpected argument '%s'", argv[optind]);
    if (target.server == NULL)
        return dsc_cli_usage(cmd, "--server HOST:PORT is required");
    if (target.dataset == NULL)
        return dsc_cli_usage(cmd, "DATASET is required");
    size_t name_len = strlen(target.dataset);
    dsc_policy_req_t req = {
        .dataset = {target.dataset, (uint16_t)(name_len < DSC_MAX_NAME ? name_len : 0)},
        .action = is_limit                  ? DSC_POLICY_OP_LIMIT
                  : is_priority             ? DSC_POLICY_OP_PRIORITY
                  : strcmp(cmd, "pin") == 0 ? DSC_POLICY_OP_PIN
                                            : DSC_POLICY_OP_UNPIN,
        .bytes = bytes};
    uint8_t body[DSC_MAX_NAME + 16];
    int n = dsc_policy_req_encode(&req, body, sizeof body);
    if (n < 0)
        return dsc_cli_usage(cmd, "'%s': not a valid dataset name", target.dataset);
    uint32_t timeout_ms = 10000;
    if (target.timeout && dsc_cli_timeout_ms(cmd, &target, &timeout_ms) < 0)
        return DSC_CLI_USAGE;
    dsc_conn_t *conn = NULL;
    if (dsc_cli_connect(cmd, target.server, timeout_ms, &conn) != DSC_CLI_OK)
        return DSC_CLI_FAIL;
    uint8_t *resp = NULL;
    size_t len = 0;
    int rc = dsc_conn_call(conn, DSC_OP_POLICY, body, (size_t)n, &resp, &len);
    int exit_code = DSC_CLI_OK;
    if (rc < 0) {
        exit_code = dsc_cli_fail(cmd, "%s: %s%s%s", target.server, dsc_strerror(rc),
                                 *dsc_conn_last_error(conn) ? ": " : "", dsc_conn_last_error(conn));
    } else if (len != 4) {
        exit_code =
            dsc_cli_fail(cmd, "%s: malformed POLICY answer (%zu bytes)", target.server, len);
    } else {
        uint32_t count = (uint32_t)resp[0] | (uint32_t)resp[1] << 8 | (uint32_t)resp[2] << 16 |
                         (uint32_t)resp[3] << 24;
        if (req.action == DSC_POLICY_OP_PIN)
            printf("%s: pinned, %u shard%s loading\n", target.dataset, count,
                   count == 1 ? "" : "s");
        else if (req.action == DSC_POLICY_OP_UNPIN)
            printf("%s: unpinned\n", target.dataset);
        else if (req.action == DSC_POLICY_OP_PRIORITY)
            printf("%s: priority %llu\n", target.dataset, (unsigned long long)bytes);
        else if (bytes == 0)
            printf("%s: limit removed\n", target.dataset);
        else
            printf("%s: limited to %llu bytes, %u shard%s evicted\n", target.dataset,
                   (unsigned long long)bytes, count, count == 1 ? "" : "s");
    }
    free(resp);
    dsc_conn_close(conn);
    return exit_code;
}

int dsc_cmd_pin(int argc, char **argv) {
    return run(argc, argv);
}

int dsc_cmd_unpin(int argc, char **argv) {
    return run(argc, argv);
}

int dsc_cmd_limit(int argc, char **argv) {
    return run(argc, argv);
}

int dsc_cmd_priority(int argc, char **argv) {
    return run(argc, argv);
}
