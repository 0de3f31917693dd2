/* Loader fetch policy: the I/O threads of each peer take queued chunks within the in-flight
 * budgets, merge consecutive ones into one request, drive the peer's data source (source.h) and
 * queue what arrives for decoding; failures fail over (route.c) and failed peers are probed with
 * back-off. Also the manifest fetch at create. Above route.c and decode.c, below view.c and
 * loader.c. */
#ifndef DSC_FETCH_H
#define DSC_FETCH_H

#include "pipeline.h"

/* Starts peer p's I/O threads that are not running yet. Under lock. Returns 0 or DSC_ENOMEM. */
int dsc__peer_start(dsc_loader_t *loader, uint32_t p);
/* Fetches and parses the manifest into cfg.manifest: from the first member peer that answers,
 * else the fallback files. Before the threads start. Returns 0 or DSC_E*. */
int dsc__fetch_manifest(dsc_loader_t *loader);

#endif
