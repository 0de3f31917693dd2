/* Watches the catalog's --data-root directories (inotify) and rescans the catalog a moment after
 * a dataset directory appears, goes, or gets its manifest, so that datasets come and go without a
 * restart or a SIGHUP (SIGHUP still rescans: the fallback where inotify is not available, for
 * example on some network file systems). One thread; rescans run on it. */
#ifndef DSC_SERVER_ROOTWATCH_H
#define DSC_SERVER_ROOTWATCH_H

#include "catalog.h"

#include <stdint.h>

typedef struct dsc_rootwatch dsc_rootwatch_t;

/* Starts watching every root of cat (none: *out NULL, returns 0), and rescans every
 * interval_s seconds besides (0: never): inotify sees only this machine's changes, so on a
 * network file system written from elsewhere (a Kubernetes ReadWriteMany volume) the periodic
 * rescan is what finds them. Returns 0 and *out, or DSC_ENOMEM; without inotify it logs a WARN
 * and relies on the periodic rescan and SIGHUP. */
int dsc_rootwatch_start(dsc_catalog_t *cat, uint32_t interval_s, dsc_rootwatch_t **out);
/* Environment, for tests: DSC_TEST_NO_INOTIFY=1 acts as if inotify were unavailable. */
/* Asks the watcher's thread for a full rescan (SIGHUP: logged "rescan: N datasets served"), so
 * that the caller never waits for a rescan's file I/O. Any thread. */
void dsc_rootwatch_request(dsc_rootwatch_t *w);
/* Cancels the catalog's rescans (dsc_catalog_cancel_rescans: one under way gives up at its next
 * directory, no manifest read blocks), stops the thread and frees. NULL is a no-op. */
void dsc_rootwatch_stop(dsc_rootwatch_t *w);

#endif
