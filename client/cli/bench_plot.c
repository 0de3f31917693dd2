/* dscache bench --plot (bench_plot.h): the loader's figures per interval into a CSV, drawn by
 * dscache_plot.py. Found as $DSCACHE_PLOT_SCRIPT, beside the installed binary
 * (../share/dscache/dscache_plot.py), or in the source tree it was built from. */
#include "bench_plot.h"

#include "cli.h"
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef DSC_PLOT_SCRIPT_SOURCE
#define DSC_PLOT_SCRIPT_SOURCE ""
#endif

int dsc_bench_plot_open(dsc_bench_plot_t *plot, const char *cmd, dsc_loader_t *loader, double now) {
    size_t n = strlen(plot->png);
    if (n >= 4 && strcmp(plot->png + n - 4, ".png") == 0)
        snprintf(plot->csv, sizeof plot->csv, "%.*s.csv", (int)(n - 4), plot->png);
    else
        snprintf(plot->csv, sizeof plot->csv, "%s.csv", plot->png);
    plot->out = fopen(plot->csv, "w");
    if (plot->out == NULL) {
        dsc_cli_fail(cmd, "--plot: cannot write %s: %s", plot->csv, strerror(errno));
        return -1;
    }
    fprintf(plot->out,
            "t,samples_per_s,mb_per_s,stall,wait_fetch,wait_budget,wait_decode,"
            "wait_collate,step_s,network_s,decode_s,collate_s,h2d_s,bottleneck,suggestion\n");
    plot->prev.struct_size = sizeof plot->prev;
    dsc_loader_stats(loader, &plot->prev);
    plot->t0 = plot->last = now;
    plot->rows = 0;
    return 0;
}

void dsc_bench_plot_sample(dsc_bench_plot_t *plot, dsc_loader_t *loader, double now) {
    double dt = now - plot->last;
    if (plot->out == NULL || dt < plot->interval)
        return;
    dsc_stats_t s = {.struct_size = sizeof s};
    if (dsc_loader_stats(loader, &s) < 0)
        return;
    const dsc_stats_t *p = &plot->prev;
    double stall = s.stall_seconds - p->stall_seconds;
    double compute = s.compute_seconds - p->compute_seconds;
    double w[6];
    for (int i = 0; i < 6; i++)
        w[i] = s.stall_waits[i] - p->stall_waits[i];
    /* The suggestion in CSV quoting. */
    char quoted[600];
    size_t q = 0;
    quoted[q++] = '"';
    for (const char *c = s.suggestion; *c && q < sizeof quoted - 3; c++) {
        if (*c == '"')
            quoted[q++] = '"';
        quoted[q++] = *c;
    }
    quoted[q++] = '"';
    quoted[q] = '\0';
    fprintf(plot->out, "%.3f,%.1f,%.3f,%.5f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%s,%s\n",
            now - plot->t0, (double)(s.samples - p->samples) / dt,
            (double)(s.bytes - p->bytes) / dt / 1e6,
            stall + compute > 0 ? stall / (stall + compute) : 0,
            w[DSC_STALL_WAIT_PLAN] + w[DSC_STALL_WAIT_QUEUED] + w[DSC_STALL_WAIT_NETWORK],
            w[DSC_STALL_WAIT_BUDGET], w[DSC_STALL_WAIT_DECODE], w[DSC_STALL_WAIT_COLLATE],
            stall + compute, (s.network_seconds - p->network_seconds) / dt,
            (s.decode_seconds - p->decode_seconds) / dt,
            (s.collate_seconds - p->collate_seconds) / dt, (s.h2d_seconds - p->h2d_seconds) / dt,
            dsc_bottleneck_name(s.bottleneck), quoted);
    plot->prev = s;
    plot->last = now;
    plot->rows++;
}

/* The plot script: the first of $DSCACHE_PLOT_SCRIPT, the install's share directory, the
 * source tree, that exists. */
static int find_script(char *out, size_t cap) {
    const char *env = getenv("DSCACHE_PLOT_SCRIPT");
    if (env != NULL && *env) {
        snprintf(out, cap, "%s", env);
        return access(out, R_OK) == 0 ? 0 : -1;
    }
    char exe[PATH_MAX - 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash != NULL) {
            *slash = '\0';
            int len = snprintf(out, cap, "%s/../share/dscache/dscache_plot.py", exe);
            if (len > 0 && (size_t)len < cap && access(out, R_OK) == 0)
                return 0;
        }
    }
    snprintf(out, cap, "%s", DSC_PLOT_SCRIPT_SOURCE);
    return out[0] && access(out, R_OK) == 0 ? 0 : -1;
}

int dsc_bench_plot_finish(dsc_bench_plot_t *plot, const char *cmd, const char *verdict) {
    if (plot->out == NULL)
        return DSC_CLI_FAIL;
    int bad = fclose(plot->out) != 0;
    plot->out = NULL;
    if (bad || plot->rows == 0)
        return dsc_cli_fail(cmd, "--plot: %s", bad ? "cannot write the series" : "no points");
    char script[PATH_MAX];
    if (find_script(script, sizeof script) < 0)
        return dsc_cli_fail(cmd,
                            "--plot: dscache_plot.py not found (set DSCACHE_PLOT_SCRIPT); "
                            "the series is in %s",
                            plot->csv);
    const char *python = getenv("DSCACHE_PYTHON");
    if (python == NULL || *python == '\0')
        python = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return dsc_cli_fail(cmd, "--plot: fork: %s", strerror(errno));
    if (pid == 0) {
        if (verdict != NULL)
            execlp(python, python, script, plot->csv, plot->png, "--verdict", verdict,
                   (char *)NULL);
        else
            execlp(python, python, script, plot->csv, plot->png, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    if (code == 3)
        return dsc_cli_fail(cmd,
                            "--plot: matplotlib is not installed (Debian: apt-get install "
                            "python3-matplotlib); the series is in %s",
                            plot->csv);
    if (code == 127)
        return dsc_cli_fail(cmd, "--plot: cannot run %s (set DSCACHE_PYTHON); the series is in %s",
                            python, plot->csv);
    if (code != 0)
        return dsc_cli_fail(cmd, "--plot: %s failed (exit %d); the series is in %s", script, code,
                            plot->csv);
    printf("plot: %s (series %s, %d points)\n", plot->png, plot->csv, plot->rows);
    return DSC_CLI_OK;
}
