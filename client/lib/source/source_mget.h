/* A batch of chunks from one data source (source.h): the source's own batched fetch, or its
 * single-chunk requests pipelined. */
#ifndef DSC_SOURCE_MGET_H
#define DSC_SOURCE_MGET_H

#include "source.h"

/* Fetches chunks[0..count) on conn of source ops with ops->mget, or, without one, with
 * single-chunk requests through submit / complete (at most ops->max_outstanding in flight;
 * request ids 1..count), each checked against its stored checksum: the contract of
 * dsc_source_ops_t.mget. For the map-style reader and the sampler-driven loader. */
int dsc__source_mget(const dsc_source_ops_t *ops, void *conn, dsc_chunk_ent_t **chunks,
                     uint32_t count, int *status, int *conn_bad, uint64_t *wire);

#endif
