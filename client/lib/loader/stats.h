/* Loader statistics: the public stats and Prometheus text, and the periodic INFO line. Reads the
 * counters each stage keeps in stats.st; above pipeline.c only. */
#ifndef DSC_STATS_H
#define DSC_STATS_H

#include "pipeline.h"

/* Logs the periodic INFO line when opt.stats_log_seconds have passed. Under lock. */
void dsc__stats_maybe_log(dsc_loader_t *loader, double now);

#endif
