/* Watches the catalog's --data-root directories (inotify) and rescans the catalog a moment after
 * a dataset directory appears, goes, or gets its manifest, so that datasets come and go without a
 * restart or a SIGHUP (SIGHUP still rescans: the fallback where inotify is not available, for
 * example on some network file systems). One thread; rescans run on it. */
#ifndef DSC_SERVER_ROOTWATCH_H
#define DSC_SERVER_ROOTWATCH_H

#include "catalog.h"

typedef struct dsc_rootwatch dsc_rootwatch_t;

/* Starts watching every root of cat (none: *out NULL, returns 0). Returns 0 and *out, or
 * DSC_ENOMEM; without inotify it logs a WARN (changes are then picked up on SIGHUP only) and
 * returns 0 with *out NULL. */
int dsc_rootwatch_start(dsc_catalog_t *cat, dsc_rootwatch_t **out);
/* Stops the thread (within half a second) and frees. NULL is a no-op. */
void dsc_rootwatch_stop(dsc_rootwatch_t *w);

#endif
