/* The loader's internal entry points for the modules above it (reader.c): a loader made for
 * random access, with the caller naming the samples instead of a plan. */
#ifndef DSC_LOADER_H
#define DSC_LOADER_H

#include "pipeline.h"

/* dsc_loader_create for a dsc_reader_t: the same options, connections, manifest, variable and
 * image field settings, slots and I/O threads, but no scheduler and no decode threads (the
 * reader's caller decodes and collates on its own thread, dsc__worker_pass), no rank split and
 * no rank environment check, two slots (more are added while batches are held), and cache_bytes
 * 0 meaning 256 MiB. The chunk table is left for the reader to size. Returns as
 * dsc_loader_create (dsc_loader_last_error(NULL, ...) says why it failed). */
int dsc__loader_create_reader(const dsc_loader_options_t *options, dsc_loader_t **out);

#endif
