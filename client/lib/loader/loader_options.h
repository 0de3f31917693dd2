/* Loader options: defaults, checks and what create derives from them (loader_options.c). Below
 * loader.c only. */
#ifndef DSC_LOADER_OPTIONS_H
#define DSC_LOADER_OPTIONS_H

#include "pipeline.h"

#include <stddef.h>

/* The cache_bytes a loader takes at least when cache_bytes is 0 (dsc__options_cache_budget). */
#define DSC__LOADER_DEFAULT_CACHE_BYTES (256ull << 20)
/* max_held_bytes when 0 or absent from the caller's struct. */
#define DSC__LOADER_DEFAULT_MAX_HELD_BYTES (1ull << 30)
/* The struct_size of the first dsc_loader_options_t (up to timeout_ms .. stats_log_seconds):
 * smaller ones are refused. */
#define DSC__LOADER_OPTIONS_MIN_SIZE offsetof(dsc_loader_options_t, cache_bytes)

/* Fills all of *options (this version's struct) with the defaults dscache.h gives. */
void dsc__options_defaults(dsc_loader_options_t *options);
/* The caller's options, each against its range (dscache.h). Returns 0, or DSC_EINVAL after an
 * ERROR line in log naming the option. */
int dsc__options_check(const dsc_loader_options_t *o, const dsc_logger_t *log);
/* rank / world_size against the launcher's RANK / WORLD_SIZE (unless ignore_rank_env). Returns 0,
 * or DSC_EINVAL after an ERROR line in log saying what would go wrong. */
int dsc__options_check_rank_env(const dsc_loader_options_t *o, const dsc_logger_t *log);
/* Why the server list spec did not parse (rc its error), in words, into why[cap]. */
void dsc__options_explain_servers(const char *spec, int rc, char *why, size_t cap);
/* Settles each variable-length field's output mode and slot room from the caller's
 * field_options (read here, during create, and not kept) and the manifest's size statistics,
 * bounding every slot region (docs/loader.md#variable-length-fields). Returns 0 or DSC_EINVAL
 * (an option naming no variable field, a budget too small for one row, a slot past
 * DSC__SLOT_FIELD_MAX), logged. */
int dsc__options_setup_var_fields(dsc_loader_t *loader, const dsc_loader_options_t *options);
/* Refuses an epoch that gives a rank no batch (DSC_EINVAL, logged); warns once of the samples a
 * dropped last batch never hands out. Returns 0 or DSC_E*. */
int dsc__options_check_epoch_size(dsc_loader_t *loader);
/* cache_bytes 0: the larger of DSC__LOADER_DEFAULT_CACHE_BYTES and what the shuffle windows need
 * held; otherwise warns when that need is over cache_bytes (chunks then fetched again). */
void dsc__options_cache_budget(dsc_loader_t *loader);
/* Order caller: order_ahead when 0 (dscache.h), said at INFO. */
void dsc__options_order_ahead(dsc_loader_t *loader);

#endif
