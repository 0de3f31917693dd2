/* Loader stream state: restart at (epoch, position) and the saved-state encoding (the public
 * set_epoch, state_save, state_load). Above scheduler.c and batch.c, below loader.c. */
#ifndef DSC_STATE_H
#define DSC_STATE_H

#include "pipeline.h"

/* Drops everything planned or prefetched and restarts the stream at (epoch, pos): waits for
 * running collations, releases the handed-out batch. Order local: pos is the steps done in the
 * segment after the nhist earlier segments hist[] of the epoch (checked by the caller), or
 * DSC__POS_DONE; order global: a global position (hist NULL, nhist 0). Under lock. Returns 0 or
 * DSC_E*. */
int dsc__stream_restart(dsc_loader_t *loader, uint64_t epoch, const dsc_plan_seg_t *hist,
                        uint32_t nhist, uint64_t pos);

#endif
