/* Peer warm-up (docs/cluster.md, "Peer warm-up"): a clustered server that loads a shard it owns
 * first asks the shard's other owners for their resident copy (PEER_READ, proto/peer.h) over the
 * data path, authenticated with a credential of the shared --auth-file, paced to --peer-rate;
 * only what no live owner holds is read from the backing storage. Installed on the catalog as its
 * peer source (catalog_types.h dsc_peer_source_t); the copy is validated there like a read from
 * disk. Blocking sockets, on the catalog's I/O threads only. */
#ifndef DSC_SERVER_PEERWARM_H
#define DSC_SERVER_PEERWARM_H

#include "catalog.h"
#include "cluster.h"
#include "credstore.h"

#include <stdint.h>

#define DSC_PEERWARM_DEFAULT_RATE (512ull << 20) /* bytes/s */
#define DSC_PEERWARM_TIMEOUT_MS 2000             /* connect, and each read or write */
/* The same, for a load a request waits for (a miss): a stopped peer (its kernel still accepts
 * connections) must not hold the request past its client's time-out; the shard is read from the
 * backing storage instead. */
#define DSC_PEERWARM_URGENT_MS 250
#define DSC_PEERWARM_DEAD_MS 3000 /* a peer that timed out or failed is skipped this long */

typedef struct dsc_peerwarm dsc_peerwarm_t;

typedef struct dsc_peerwarm_options {
    dsc_cluster_t *cluster;       /* the membership (owners of a shard); required */
    dsc_credstore_t *credentials; /* --auth-file, NULL: peers are asked anonymously */
    const char *credential;       /* the credential of `credentials` presented to peers */
    uint64_t rate;                /* bytes/s over all peers (0: DSC_PEERWARM_DEFAULT_RATE) */
    uint32_t timeout_ms;          /* 0: DSC_PEERWARM_TIMEOUT_MS */
} dsc_peerwarm_options_t;

/* Returns 0 and *out, DSC_EINVAL (no cluster; a credential name with no credentials or not in
 * them: the reason is logged) or DSC_ENOMEM. */
int dsc_peerwarm_create(const dsc_peerwarm_options_t *options, dsc_peerwarm_t **out);
/* The source to hand dsc_catalog_set_peer_source; valid until destroy. */
const dsc_peer_source_t *dsc_peerwarm_source(dsc_peerwarm_t *pw);
/* Closes pooled connections and frees; after the catalog's I/O threads ended (or the source was
 * removed). NULL is a no-op. */
void dsc_peerwarm_destroy(dsc_peerwarm_t *pw);

#endif
