/* Loader shared state: failing the loader (the first error wins, every thread wakes) and the
 * cache need of the shuffle windows. */
#include "pipeline.h"

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
