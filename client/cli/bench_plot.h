/* dscache bench --plot: samples the loader's statistics into a CSV series while the benchmark
 * runs, then draws it with dscache_plot.py (matplotlib, optional). */
#ifndef DSC_BENCH_PLOT_H
#define DSC_BENCH_PLOT_H

#include "dscache.h"

#include <stdio.h>

typedef struct dsc_bench_plot {
    const char *png; /* output picture (NULL: no plot) */
    double interval; /* seconds per point */
    char csv[4096];  /* the series: png with .csv in place of .png (or appended) */
    FILE *out;
    double t0, last;
    dsc_stats_t prev;
    int rows;
} dsc_bench_plot_t;

/* Creates the CSV and takes the first sample. Returns 0, or -1 after printing why. */
int dsc_bench_plot_open(dsc_bench_plot_t *plot, const char *cmd, dsc_loader_t *loader, double now);
/* Adds a point when an interval has passed since the last one. */
void dsc_bench_plot_sample(dsc_bench_plot_t *plot, dsc_loader_t *loader, double now);
/* Closes the CSV and runs the plot script, whose footer shows `verdict` (the run's final
 * verdict, as bench prints it; NULL: the last interval's). Returns DSC_CLI_OK, or DSC_CLI_FAIL
 * after printing why (matplotlib missing: says how to install it; the CSV stays). */
int dsc_bench_plot_finish(dsc_bench_plot_t *plot, const char *cmd, const char *verdict);

#endif
