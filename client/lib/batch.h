/* Loader batches: batch slots and the handed-out batch. Above pipeline.c and cuda.c, below
 * state.c and loader.c. */
#ifndef DSC_BATCH_H
#define DSC_BATCH_H

#include "pipeline.h"

/* Lays out a slot (field_off, slot_bytes) and allocates cons.slot_count slots (pinned + device
 * memory with CUDA). Returns 0 or DSC_ENOMEM / DSC_ECUDA; dsc__slots_free undoes a partial one. */
int dsc__slots_alloc(dsc_loader_t *loader);
void dsc__slots_free(dsc_loader_t *loader);
/* Gives the handed-out batch's slot back (none: no-op). Under lock. */
void dsc__batch_release_current(dsc_loader_t *loader);

#endif
