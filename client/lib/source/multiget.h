/* Batched chunk fetch over one server connection: many chunks of several shards of one dataset
 * in one round trip (MGET, proto/PROTOCOL.md), so that random access to small chunks does not
 * cost a round trip each. Each chunk's stored bytes are checked against its stored checksum
 * (dsc_chunk_verify), as the loader's GET path checks them before decoding. Falls back to
 * pipelined single-chunk GETs on a server that did not grant DSC_FEATURE_MGET in HELLO (an
 * older dscached), with the same results. Internal to libdscache: for the map-style reader and
 * the sampler-driven loader (and the bench/test tools). */
#ifndef DSC_MULTIGET_H
#define DSC_MULTIGET_H

#include "conn.h"
#include "shard.h"

#include <stddef.h>
#include <stdint.h>

/* One chunk to fetch, and what became of it. */
typedef struct dsc_mget_chunk {
    uint32_t shard; /* in: shard id */
    uint32_t chunk; /* in: chunk index within the shard (dsc_chunk_entry_t.first_sample and
                       sample_count say which samples it holds) */
    /* out: 0, or this chunk's own error (the others are unaffected):
     *   DSC_ENOTFOUND   no such shard in the dataset;
     *   DSC_EBADREQ     the chunk index is beyond the shard;
     *   DSC_ECORRUPT    damaged on the server (another replica or the fallback files may hold
     *                   an intact copy);
     *   DSC_EUNAVAIL    cannot be served now (load failed, read-through memory short, read
     *                   together with a damaged chunk): ask again or another replica;
     *   DSC_ECHUNKSUM   the bytes received differ from the entry's stored checksum;
     *   DSC_ETOOLARGE   the chunk alone is over the frame limit;
     *   DSC_ENOMEM      alloc returned NULL (its bytes were read and dropped);
     *   DSC_ECHANGED    the shard's file was replaced on disk (the GET fallback: also the
     *                   dataset version changed, which MGET answers for the whole call);
     *   DSC_ESERVER     a status this client does not know. */
    int status;
    dsc_chunk_entry_t entry; /* out, status 0: the chunk's index entry (codec, stored_len,
                                raw_len, checksums, first_sample, sample_count); decode the
                                bytes with dsc_chunk_decode, which checks raw_checksum */
    uint8_t *stored;         /* out: the buffer alloc returned for its stored bytes, or NULL
                                when none was asked for; the caller's, even when status != 0 */
} dsc_mget_chunk_t;

/* Returns a buffer of at least len bytes (len >= 0; 0 for an empty chunk) for the stored bytes of
 * chunks[index], or NULL (that chunk fails with DSC_ENOMEM). Called on the calling thread, at
 * most once per chunk, in no particular order. */
typedef void *(*dsc_mget_alloc_fn)(void *arg, uint32_t index, size_t len);

/* Fetches chunks[0..count) of `dataset` on conn, filling each one's status, entry and stored.
 * Chunks may repeat and may lie in any shards, in any order. The requests are MGETs of at most
 * DSC_MGET_MAX_ENTRIES chunks within the server's max_body (one round trip each; an answer
 * over the frame limit is split in two and asked again); without DSC_FEATURE_MGET, pipelined
 * GETs of one chunk (at most 64 outstanding). version: the dataset version the caller's manifest
 * has (dsc_manifest_t.version): sent when the server checks versions (DSC_FEATURE_DATASET_VERSION),
 * 0: not checked. *wire (may be NULL) grows by the stored bytes received.
 *
 * Returns the number of chunks with status 0 (0..count), or an error for the whole call, after
 * which every chunk not yet answered has that status: DSC_EINVAL (conn, chunks or alloc NULL,
 * a dataset name that is empty or over 63 bytes), DSC_ENOTFOUND (no such dataset on the server,
 * or not one the connection's credential may read: exactly as GET), DSC_ECHANGED (the server
 * serves another version), DSC_EUNAUTH, or a connection error (DSC_ECLOSED, DSC_ETIMEDOUT,
 * DSC_ECONNRESET, DSC_EPROTO for an answer that breaks the protocol, ...: the connection is
 * unusable then; close it). The server's message of a whole-call refusal is in
 * dsc_conn_last_error(conn).
 *
 * Blocks until every chunk is answered (bounded by the connection's time-out per receive). The
 * connection must have nothing outstanding, except REPORT / HINT requests whose ids carry
 * DSC_SOURCE_REPORT_ID (bit 63): their answers are read and dropped. One thread at a time per
 * connection, as for every conn.h call. */
int dsc__conn_mget(dsc_conn_t *conn, const char *dataset, uint64_t version,
                   dsc_mget_chunk_t *chunks, uint32_t count, dsc_mget_alloc_fn alloc, void *arg,
                   uint64_t *wire);

#endif
