/* The helpers every dscache command shares (cli.h): usage and failure messages, option values,
 * the --server/--dataset/--timeout options, the connection with HELLO and credential, the
 * progress bar. Below the commands (cmd_*.c) and main.c; calls none of them. */
#include "cli.h"

#include "conn.h"
#include "dscache.h"
#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *auth_file; /* --auth-file, taken out of argv by main */

void dsc_cli_set_auth_file(const char *path) {
    auth_file = path;
}

const char *dsc_cli_auth_file(void) {
    return auth_file;
}

/* ---- Helpers ---------------------------------------------------------------------------- */

int dsc_cli_usage(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "dscache %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'dscache %s --help'.\n", cmd);
    return DSC_CLI_USAGE;
}

int dsc_cli_fail(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "dscache %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return DSC_CLI_FAIL;
}

int dsc_cli_parse_size(const char *cmd, const char *option, const char *text, uint64_t *out) {
    if (dsc_parse_size(text, out) != 0) {
        dsc_cli_usage(cmd, "%s: '%s' is not a size (e.g. 4096, 64K, 512M, 4G)", option, text);
        return DSC_EINVAL;
    }
    return 0;
}

int dsc_cli_parse_u64(const char *cmd, const char *option, const char *text, uint64_t min,
                      uint64_t max, uint64_t *out) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = 0;
    if (text != NULL && text[0] >= '0' && text[0] <= '9')
        v = strtoull(text, &end, 10);
    if (text == NULL || end == NULL || *end != '\0' || errno != 0 || v < min || v > max) {
        dsc_cli_usage(cmd, "%s: '%s' is not an integer in [%llu, %llu]", option, text ? text : "",
                      (unsigned long long)min, (unsigned long long)max);
        return DSC_EINVAL;
    }
    *out = v;
    return 0;
}

int dsc_cli_target_option(dsc_cli_target_t *target, int opt, const char *arg) {
    switch (opt) {
    case 's':
        target->server = arg;
        return 1;
    case 'd':
        target->dataset = arg;
        return 1;
    case 'T':
        target->timeout = arg;
        return 1;
    default:
        return 0;
    }
}

int dsc_cli_timeout_ms(const char *cmd, const dsc_cli_target_t *target, uint32_t *ms) {
    uint64_t seconds = DSC_CLI_TIMEOUT_DEFAULT_S;
    if (target->timeout &&
        dsc_cli_parse_u64(cmd, "--timeout", target->timeout, 1, 86400, &seconds) < 0)
        return DSC_EINVAL;
    *ms = (uint32_t)(seconds * 1000);
    return 0;
}

int dsc_cli_connect(const char *cmd, const char *server, uint32_t timeout_ms, dsc_conn_t **conn) {
    char host[256];
    uint16_t port = 0;
    *conn = NULL;
    if (dsc_split_hostport(server, host, sizeof host, &port) < 0 || port == 0 || host[0] == '\0')
        return dsc_cli_fail(cmd,
                            "--server '%s': not HOST:PORT (a name or IPv4 address and a port "
                            "1-65535, or [IPv6]:PORT; e.g. 10.0.0.1:7070)",
                            server);
    dsc_credential_t cred;
    char why[512];
    int found = dsc__credential_load(auth_file, &cred, why, sizeof why);
    if (found < 0)
        return dsc_cli_fail(cmd, "%s", why);
    int rc = dsc_conn_open_addr_auth(server, timeout_ms, 0, found ? &cred : NULL, conn);
    dsc__credential_wipe(&cred);
    if (rc < 0) {
        *conn = NULL;
        if (rc == DSC_EUNAUTH)
            return dsc_cli_fail(cmd, "%s: %s (%s)", server, dsc_strerror(rc),
                                found ? "the credential was refused, or the server does not "
                                        "authenticate"
                                      : "the server requires a credential: --auth-file");
        uint16_t data_port = 0;
        if ((rc == DSC_ECLOSED || rc == DSC_EPROTO || rc == DSC_ECONNRESET || rc == DSC_EBADMAGIC ||
             rc == DSC_ETIMEDOUT) &&
            dsc_conn_http_probe(server, 1000, &data_port)) {
            if (data_port != 0)
                return dsc_cli_fail(cmd,
                                    "%s: that is dscached's HTTP port (it answers HTTP, not the "
                                    "data protocol); the data port is %s:%u",
                                    server, host, (unsigned)data_port);
            return dsc_cli_fail(cmd,
                                "%s: that port answers HTTP, not the dscache data protocol; give "
                                "the data port (dscached --listen, default 7070)",
                                server);
        }
        return dsc_cli_fail(cmd, "%s: %s", server, dsc_strerror(rc));
    }
    return DSC_CLI_OK;
}

void dsc_cli_progress_init(dsc_cli_progress_t *p, const char *label, uint64_t total) {
    p->enabled = isatty(STDERR_FILENO);
    p->label = label;
    p->total = total;
    p->start = dsc_now_s();
    p->last_draw = 0;
}

void dsc_cli_progress_update(dsc_cli_progress_t *p, uint64_t done) {
    if (!p->enabled)
        return;
    double now = dsc_now_s();
    if (now - p->last_draw < 0.1 && done < p->total)
        return;
    p->last_draw = now;
    double fraction = p->total ? (double)done / (double)p->total : 1.0;
    if (fraction > 1.0)
        fraction = 1.0;
    enum { WIDTH = 30 };
    char bar[WIDTH + 1];
    int filled = (int)(fraction * WIDTH);
    for (int i = 0; i < WIDTH; i++)
        bar[i] = i < filled ? '#' : '.';
    bar[WIDTH] = '\0';
    double elapsed = now - p->start;
    double rate = elapsed > 0 ? (double)done / elapsed / 1e6 : 0.0;
    char done_text[32], total_text[32];
    fprintf(stderr, "\r%s [%s] %5.1f%%  %s / %s  %.0f MB/s ", p->label, bar, fraction * 100.0,
            dsc_format_size(done, done_text, sizeof done_text),
            dsc_format_size(p->total, total_text, sizeof total_text), rate);
    fflush(stderr);
}

double dsc_cli_progress_done(dsc_cli_progress_t *p) {
    if (p->enabled && p->last_draw > 0) {
        fprintf(stderr, "\r%*s\r", 100, "");
        fflush(stderr);
    }
    return dsc_now_s() - p->start;
}
