/* Loader shared state: failing the loader (the first error wins, every thread wakes). */
#include "pipeline.h"

void dsc__loader_fail(dsc_loader_t *loader, int err) {
    if (loader->error == 0 && err < 0) {
        loader->error = err;
        /* Not while stopping: destroy() closes connections under outstanding requests, and
         * what that leaves undone is no failure of the loader's. */
        if (!loader->stop)
            DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR, "loader failed: %s (%s)", dsc_strerror(err),
                    dsc_err_name(err));
    }
    pthread_cond_broadcast(&loader->cons_cv);
    pthread_cond_broadcast(&loader->sched_cv);
    pthread_cond_broadcast(&loader->io_cv);
    pthread_cond_broadcast(&loader->work_cv);
}
