/* Mixtures behind a loader (docs/mixtures.md): dsc_loader_create with options.sources makes a
 * loader whose batches the mixture composes straight into the loader's batch slots, handed out
 * as any loader's dsc_batch_t. loader.c, state.c and stats.c call these when loader->mix is set. */
#ifndef DSC_MIXTURE_H
#define DSC_MIXTURE_H

#include "pipeline.h"

/* dsc_loader_create for options->n_sources > 0. On failure *why (cap bytes) says why. Returns as
 * dsc_loader_create. */
int dsc__mix_loader_create(const dsc_loader_options_t *options, dsc_loader_t **out, char *why,
                           size_t cap);
/* dsc_loader_destroy of such a loader. */
void dsc__mix_loader_destroy(dsc_loader_t *loader);
/* dsc_loader_next of such a loader: the next batch its composer thread made (retain: the
 * caller's reference too). */
int dsc__mix_loader_next(dsc_loader_t *loader, dsc_batch_t **out, int retain);
/* The loader's figures (its own next() and batches; the sources' wire and stage figures summed;
 * the verdict of the source with the most stall). Fills a whole dsc_stats_t. */
void dsc__mix_loader_stats(const dsc_loader_t *loader, dsc_stats_t *out);
/* dsc_loader_state_load and dsc_loader_set_epoch of such a loader. */
int dsc__mix_loader_state_load(dsc_loader_t *loader, const void *buf, size_t len);
int dsc__mix_loader_set_epoch(dsc_loader_t *loader, uint64_t epoch);
/* The options of another loader over the same mixture (a temporary loader of an old rank, say,
 * whose rank and world_size the caller sets): the loader's own options with its sources (up to
 * cap, from the mixture's copies, valid while the loader lives) and no borrowed strings. Returns
 * the number of sources, or DSC_EINVAL (not a loader over a mixture, cap too small). */
int dsc__mix_loader_options(const dsc_loader_t *loader, dsc_loader_options_t *lo,
                            dsc_source_options_t *so, uint32_t cap);

#endif
