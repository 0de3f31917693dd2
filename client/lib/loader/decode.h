/* Loader decode and collate: the decode threads (and next() when it assists) verify and
 * decompress received chunks and collate steps into batch slots. Below fetch.c and scheduler.c
 * (which hand it work), above route.c. */
#ifndef DSC_DECODE_H
#define DSC_DECODE_H

#include "pipeline.h"

/* Logs at ERROR why the step's collation failed (st->error DSC_ETOOLARGE: which sample of
 * which variable field, how many bytes, the option to raise), as next() reaches it. Under lock. */
void dsc__step_error_log(dsc_loader_t *loader, const dsc_step_t *st);
/* A decode thread (arg: the loader). */
void *dsc__worker_main(void *arg);
/* One unit of work, if there is one: collate a step whose chunks are all decoded, else verify +
 * decode one received chunk. Under lock (released while working). Returns 1 when it did
 * something, 0 when there was nothing to do. */
int dsc__worker_pass(dsc_loader_t *loader, dsc_worker_ctx_t *ctx);
/* next()'s help while it waits (assist): as dsc__worker_pass, except that with an image field
 * it collates only the batch next() waits for. Under lock. */
int dsc__assist_pass(dsc_loader_t *loader, dsc_worker_ctx_t *ctx);
/* Collates step st (count samples: ids, src entries all CH_READY and referenced, in_chunk) into
 * slot, as the decode threads do: fixed fields copied, variable fields packed or padded, image
 * fields decoded with the crop of (seed, st->epoch, ids[k]). For a caller that plans its own
 * steps (reader.c). Unlocked. Adds to *truncated, *decode_errors and *image_seconds. Returns 0,
 * DSC_ETOOLARGE (st->err_* say which sample: dsc__step_error_log), DSC_EDECODE (logged) or
 * DSC_ENOMEM. */
int dsc__step_collate(dsc_loader_t *loader, dsc_worker_ctx_t *ctx, dsc_step_t *st,
                      dsc_batch_slot_t *slot, uint64_t *truncated, uint64_t *decode_errors,
                      double *image_seconds);
/* A chunk's stored bytes arrived: queue it for decoding (state CH_RECEIVED) and wake a worker.
 * Under lock. */
void dsc__decode_push(dsc_loader_t *loader, dsc_chunk_ent_t *ent);
/* Wakes an idle decode thread for one new unit of work, and next() when it would assist. Under
 * lock. */
void dsc__work_signal(dsc_loader_t *loader);

/* With device="cuda" and an image field: loads nvJPEG once to see that it works (cfg.nvjpeg = 1:
 * the decode threads decode JPEGs with it), else says at WARN why images are decoded on the host.
 * Called by create, before the threads start. */
void dsc__decode_probe_gpu(dsc_loader_t *loader);

#endif
