/* dscache: command dispatch (a table of dsc_cmd_* functions, commands.h); the helpers the
 * commands share are in cli.c (cli.h), so that calls go one way: main -> cmd_* -> cli. */
#include "cli.h"
#include "commands.h"

#include "credential.h"
#include "dscache.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    dsc_cmd_fn run;
    const char *summary;
} commands[] = {
    {"ingest", dsc_cmd_ingest, "convert token files, .npy arrays or synthetic data into a dataset"},
    {"inspect", dsc_cmd_inspect, "verify a dataset directory and print its summary"},
    {"get", dsc_cmd_get, "fetch a shard from a server, verify and decode it into a file"},
    {"stat", dsc_cmd_stat, "show a server's store and per-dataset statistics"},
    {"bench", dsc_cmd_bench, "measure loader throughput and data stall against a server"},
    {"top", dsc_cmd_top, "live view of servers, datasets and the jobs they feed (q quits)"},
    {"doctor", dsc_cmd_doctor, "check whether RDMA can be used on this machine (preflight)"},
    {"list", dsc_cmd_list, "list the datasets a server serves"},
    {"warm", dsc_cmd_warm, "load a dataset's shards into a server's store (admin)"},
    {"evict", dsc_cmd_evict, "drop a dataset's shards from a server's store (admin)"},
    {"pin", dsc_cmd_pin, "keep a dataset resident on a server (admin)"},
    {"unpin", dsc_cmd_unpin, "undo pin (admin)"},
    {"limit", dsc_cmd_limit, "cap a dataset's resident bytes on a server (admin)"},
    {"priority", dsc_cmd_priority, "set a dataset's eviction priority on a server (admin)"},
};
#define COMMAND_COUNT (sizeof commands / sizeof commands[0])

static void print_usage(FILE *out) {
    fprintf(out,
            "usage: dscache COMMAND [OPTIONS] [ARGS]\n"
            "       dscache COMMAND --help   (the options of one command)\n"
            "       dscache --version\n\n"
            "Every command that talks to a server takes --auth-file FILE (a token file:\n"
            "NAME SECRET); without it $DSCACHE_TOKEN_FILE, else %s when it exists,\n"
            "else anonymous (docs/security.md).\n\n"
            "commands:\n",
            DSC_TOKEN_DEFAULT_PATH);
    for (size_t i = 0; i < COMMAND_COUNT; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv) {
    /* --auth-file FILE / --auth-file=FILE anywhere: taken out before the command parses. */
    int kept = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--auth-file") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "dscache: --auth-file needs a value\n");
                return DSC_CLI_USAGE;
            }
            dsc_cli_set_auth_file(argv[++i]);
        } else if (strncmp(argv[i], "--auth-file=", 12) == 0) {
            dsc_cli_set_auth_file(argv[i] + 12);
        } else {
            argv[kept++] = argv[i];
        }
    }
    argc = kept;
    argv[argc] = NULL;
    if (argc < 2) {
        print_usage(stderr);
        return DSC_CLI_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
        print_usage(stdout);
        return DSC_CLI_OK;
    }
    if (strcmp(name, "--version") == 0 || strcmp(name, "version") == 0) {
        printf("dscache %s\n", dsc_version());
        return DSC_CLI_OK;
    }
    if (strcmp(name, "help") == 0) {
        if (argc < 3) {
            print_usage(stdout);
            return DSC_CLI_OK;
        }
        for (size_t i = 0; i < COMMAND_COUNT; i++) {
            if (strcmp(argv[2], commands[i].name) == 0) {
                char *help_argv[] = {argv[2], "--help", NULL};
                return commands[i].run(2, help_argv);
            }
        }
        fprintf(stderr, "dscache: unknown command '%s' (see dscache --help)\n", argv[2]);
        return DSC_CLI_USAGE;
    }
    for (size_t i = 0; i < COMMAND_COUNT; i++)
        if (strcmp(name, commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "dscache: unknown command '%s' (see dscache --help)\n", name);
    return DSC_CLI_USAGE;
}
