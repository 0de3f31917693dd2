/* Loader shared state: failing the loader (the first error wins, every thread wakes), the
 * scheduling policy of the loader's threads, the cache need of the shuffle windows and the
 * default budget of a variable-length field. */
#include "pipeline.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

static void fail(dsc_loader_t *loader, int err, int logged) {
    if (loader->error == 0 && err < 0) {
        loader->error = err;
        /* Not while stopping: destroy() closes connections under outstanding requests, and
         * what that leaves undone is no failure of the loader's. */
        if (!loader->stop && !logged)
            DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR, "loader failed: %s (%s)", dsc_strerror(err),
                    dsc_err_name(err));
    }
    pthread_cond_broadcast(&loader->cons_cv);
    pthread_cond_broadcast(&loader->sched_cv);
    pthread_cond_broadcast(&loader->io_cv);
    pthread_cond_broadcast(&loader->work_cv);
}

void dsc__loader_thread_start(void) {
#ifdef SCHED_BATCH
    /* On busy cores a woken decode or scheduler thread took the consumer's core at each release
     * or next() that signalled it: dsc_batch_release cost 185 us instead of 18 (2 cores, load 4,
     * docs/benchmarks.md). */
    const char *env = getenv("DSCACHE_LOADER_SCHED");
    if (env != NULL && strcmp(env, "other") == 0)
        return;
    struct sched_param param = {0};
    (void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &param); /* a hint: errors ignored */
#endif
}

void dsc__loader_fail(dsc_loader_t *loader, int err) {
    fail(loader, err, 0);
}

void dsc__loader_fail_logged(dsc_loader_t *loader, int err) {
    fail(loader, err, 1);
}

void dsc__cache_need(const dsc_loader_t *loader, dsc_cache_need_t *out) {
    const dsc_manifest_t *m = loader->cfg.manifest;
    uint64_t chunk_max = 0;
    for (uint32_t i = 0; i < m->shard_count; i++) {
        uint64_t c = dsc__chunk_raw_estimate(m, m->shards[i].chunk_samples);
        if (c > chunk_max)
            chunk_max = c;
    }
    uint64_t window = loader->cfg.opt.shuffle ? loader->cfg.opt.shuffle_window : 0;
    if (window > loader->cfg.samples)
        window = loader->cfg.samples;
    /* The steps that finish a window reach up to one step's span past it: batch_size *
     * world_size positions in the global order, a rank's own batch in the local one. */
    uint64_t per_step = (uint64_t)loader->cfg.opt.batch_size;
    if (!dsc__order_is_local(loader))
        per_step *= loader->cfg.opt.world_size;
    out->window = window;
    out->per_step = per_step;
    out->chunk_max = chunk_max;
    out->edge = DSC__WINDOWS_HELD * (per_step * loader->cfg.sample_bytes + 2 * chunk_max);
    out->need = out->edge + DSC__WINDOWS_HELD * window * loader->cfg.sample_bytes;
}

void dsc__loader_fail_with(dsc_loader_t *loader, int err, const char *text) {
    if (loader->error == 0 && err < 0 && !loader->stop) {
        loader->error = err;
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR, "loader failed: %s", text);
    }
    dsc__loader_fail(loader, err); /* wakes every thread; the error is set: not logged again */
}

/* The default values budget per batch of a variable field: B x bytes_max (every batch fits)
 * while that is at most VAR_BUDGET_EXACT; beyond, the largest of VAR_BUDGET_EXACT, bytes_max
 * (any one sample fits) and 4 x B x bytes_mean (a batch four times the mean size fits). */
#define VAR_BUDGET_EXACT (64ull << 20)

uint64_t dsc__var_default_budget(uint64_t batch, uint64_t bytes_max, double bytes_mean,
                                 int *exact) {
    *exact = bytes_max <= VAR_BUDGET_EXACT / batch;
    if (*exact)
        return batch * bytes_max;
    double four = 4.0 * (double)batch * bytes_mean;
    uint64_t b = bytes_max > VAR_BUDGET_EXACT ? bytes_max : VAR_BUDGET_EXACT;
    if (four > (double)b)
        b = four < (double)DSC__SLOT_FIELD_MAX ? (uint64_t)four : DSC__SLOT_FIELD_MAX;
    return b;
}
