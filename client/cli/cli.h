/* The dscache command-line tool: the small helpers its commands share (cli.c), their exit codes
 * and the command type. The commands themselves are declared in commands.h, for main.c only:
 * a command includes this header and never calls main.c or another command. */
#ifndef DSC_CLI_H
#define DSC_CLI_H

#include <stdint.h>
#include <stdio.h>

/* Exit codes of every command. */
enum { DSC_CLI_OK = 0, DSC_CLI_FAIL = 1, DSC_CLI_USAGE = 2 };

/* A command: argv[0] is the command's name, argv[1..] its arguments. Returns an exit code.
 * "--help" anywhere prints the command's usage to stdout and returns DSC_CLI_OK. */
typedef int (*dsc_cmd_fn)(int argc, char **argv);

/* ---- Helpers (cli.c) -------------------------------------------------------------------- */

/* Prints "dscache CMD: <message>" and a hint to run "dscache CMD --help" to stderr; returns
 * DSC_CLI_USAGE so a command can `return dsc_cli_usage(...)`. */
int dsc_cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints "dscache CMD: <message>" to stderr; returns DSC_CLI_FAIL. */
int dsc_cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Option values: 0 and *out, or DSC_EINVAL after printing a usage message naming the option
 * (the caller then returns DSC_CLI_USAGE). Sizes accept "4096", "64K", "512M", "4G". */
int dsc_cli_parse_size(const char *cmd, const char *option, const char *text, uint64_t *out);
/* Decimal integer in [min, max]. */
int dsc_cli_parse_u64(const char *cmd, const char *option, const char *text, uint64_t min,
                      uint64_t max, uint64_t *out);

/* The --server HOST:PORT, --dataset NAME and --timeout SECONDS options of the commands that talk
 * to one server: put DSC_CLI_TARGET_OPTIONS in the getopt_long table (needs <getopt.h>; it claims
 * the option values 's', 'd' and 'T') and pass each option to dsc_cli_target_option before the
 * command's own. */
typedef struct dsc_cli_target {
    const char *server;  /* NULL until --server is given */
    const char *dataset; /* the caller's default until --dataset is given */
    const char *timeout; /* NULL until --timeout is given (see dsc_cli_timeout_ms) */
} dsc_cli_target_t;

/* clang-format off */
#define DSC_CLI_TARGET_OPTIONS \
    {"server", required_argument, NULL, 's'}, {"dataset", required_argument, NULL, 'd'}, \
    {"timeout", required_argument, NULL, 'T'}
/* clang-format on */

/* --timeout: the longest wait, in seconds, for the server to connect, accept a request or send
 * the next bytes of an answer; a server that stays silent longer fails the command. */
#define DSC_CLI_TIMEOUT_DEFAULT_S 30
/* The --timeout of target in milliseconds (DSC_CLI_TIMEOUT_DEFAULT_S when not given). Returns 0,
 * or DSC_EINVAL after printing a usage message (the caller returns DSC_CLI_USAGE). */
int dsc_cli_timeout_ms(const char *cmd, const dsc_cli_target_t *target, uint32_t *ms);

/* Stores the value of a getopt_long result opt with argument arg in target when it is one of
 * DSC_CLI_TARGET_OPTIONS. Returns 1 when it was (the caller goes on to the next option), else 0. */
int dsc_cli_target_option(dsc_cli_target_t *target, int opt, const char *arg);

/* The --auth-file given on the command line (any position), or NULL: then the credential comes
 * from $DSCACHE_TOKEN_FILE or the Kubernetes default path (client/lib/source/credential.h). */
const char *dsc_cli_auth_file(void);
/* Sets it (main.c, which takes --auth-file out of argv before the command parses). */
void dsc_cli_set_auth_file(const char *path);
/* Opens a connection (with HELLO) to server with a timeout of timeout_ms for every wait. Returns
 * DSC_CLI_OK and *conn (the caller closes it with dsc_conn_close), or DSC_CLI_FAIL after
 * printing "dscache CMD: SERVER: <error>" (*conn is then NULL). */
struct dsc_conn;
int dsc_cli_connect(const char *cmd, const char *server, uint32_t timeout_ms,
                    struct dsc_conn **conn);

/* A progress bar on stderr, drawn only when stderr is a terminal, at most 10 times a second.
 * Units are bytes. */
typedef struct dsc_cli_progress {
    int enabled;
    const char *label;
    uint64_t total;
    double start;
    double last_draw;
} dsc_cli_progress_t;

void dsc_cli_progress_init(dsc_cli_progress_t *progress, const char *label, uint64_t total);
void dsc_cli_progress_update(dsc_cli_progress_t *progress, uint64_t done);
/* Erases the bar (when drawn); returns the seconds since init. */
double dsc_cli_progress_done(dsc_cli_progress_t *progress);

#endif
