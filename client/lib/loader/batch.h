/* Loader batches: batch slots and the handed-out batch. Above pipeline.c and cuda.c, below
 * state.c and loader.c. */
#ifndef DSC_BATCH_H
#define DSC_BATCH_H

#include "pipeline.h"

/* Lays out a slot (field_off, slot_bytes) and allocates cons.slot_count slots (pinned + device
 * memory with CUDA). Returns 0 or DSC_ENOMEM / DSC_ECUDA; dsc__slots_free undoes a partial one. */
int dsc__slots_alloc(dsc_loader_t *loader);
void dsc__slots_free(dsc_loader_t *loader);
/* Drops next()'s reference to the handed-out batch (none: no-op); the slot goes back once no
 * other reference is left. Under lock. */
void dsc__batch_release_current(dsc_loader_t *loader);
/* Makes b (the batch of a READY step's slot) the handed-out one, with next()'s reference. Under
 * lock. */
void dsc__batch_hand_out(dsc_loader_t *loader, dsc_batch_t *b);
/* A slot no step or batch uses, now owned by `owner` (any value but SLOT_FREE), or NULL when
 * every slot is in use (dsc__slots_make_room adds one). Under lock. */
dsc_batch_slot_t *dsc__slot_take_free(dsc_loader_t *loader, uint64_t owner);
/* Gives a slot taken with dsc__slot_take_free back unused. Under lock. */
void dsc__slot_give_back(dsc_loader_t *loader, dsc_batch_slot_t *slot);
/* Hands b (the batch of a collated slot) to a caller that owns it outright (reader.c): one
 * reference, dropped by dsc_batch_release; no next() reference. Under lock. */
void dsc__batch_hand_over(dsc_loader_t *loader, dsc_batch_t *b);
/* dsc_batch_retain for a batch handed out, the loader's lock held. */
void dsc__batch_retain_locked(dsc_batch_t *batch);
/* Before next() waits: adds slots until prefetch_batches - 1 (at least 1) are not held by the
 * caller. Returns 0, or DSC_EHELD (logged) when the batches held plus one more would pass
 * max_held_bytes, or DSC_ENOMEM / DSC_ECUDA when no slot could be added and none is free. Under
 * lock. */
int dsc__slots_make_room(dsc_loader_t *loader);

#endif
