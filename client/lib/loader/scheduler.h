/* Loader scheduler: plans steps ahead (the epoch order of plan.h, chunks routed and queued) and
 * gives them batch slots in stream order. Above route.c, decode.c, hints.c and chunks.c, below
 * state.c and loader.c. */
#ifndef DSC_SCHEDULER_H
#define DSC_SCHEDULER_H

#include "pipeline.h"

/* The scheduler thread (arg: the loader). */
void *dsc__sched_main(void *arg);
/* Creates the epoch order, the chunk table, the step ring (after cons.slot_count is set) and the
 * first epoch's split. Returns 0 or DSC_E*; dsc__sched_free undoes a partial init. */
int dsc__sched_init(dsc_loader_t *loader);
/* Frees what dsc__sched_init made (no thread runs any more). */
void dsc__sched_free(dsc_loader_t *loader);
/* Plans from position pos of epoch `epoch` on (the steps planned so far were dropped by the
 * caller). Order global: pos is a global position (hist, nhist unused). Order local: pos is the
 * steps done in the segment after the nhist earlier segments hist[] of the epoch (checked with
 * dsc__sched_check_segments), or DSC__POS_DONE. Under lock. Returns 0 or DSC_E* (a position the
 * plan refuses). */
int dsc__sched_restart(dsc_loader_t *loader, uint64_t epoch, const dsc_plan_seg_t *hist,
                       uint32_t nhist, uint64_t pos);
/* Order local: whether nhist earlier segments hist[] and pos steps done (or DSC__POS_DONE) in
 * the segment at this loader's world and batch size fit the dataset. Under lock. Returns 0, or
 * DSC_EINVAL / DSC_ERANGE (not a state this order produces). */
int dsc__sched_check_segments(dsc_loader_t *loader, const dsc_plan_seg_t *hist, uint32_t nhist,
                              uint64_t pos);
/* Order caller (dsc_loader_push_order): appends one pushed batch of n indices (the first ones
 * skipped while a state_load's skip lasts) and, with DSC_PUSH_END, the epoch's end mark. Under
 * lock. Returns the room left, or DSC_EINVAL / DSC_ERANGE / DSC_EAGAIN / DSC_EBADSTATE or the
 * loader's error (as dscache.h says; nothing taken then). */
int dsc__sched_push(dsc_loader_t *loader, const uint64_t *ids, size_t n, int flags);
/* Order caller: batches (and end marks) the caller may push now; 0 for the other orders. Under
 * lock. */
uint32_t dsc__sched_order_room(const dsc_loader_t *loader);
/* Steps in an epoch of this rank (order caller: 0). */
uint64_t dsc__sched_epoch_steps(const dsc_loader_t *loader);

#endif
