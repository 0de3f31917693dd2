/* The loader's data-source interface: how the stored bytes of chunks arrive, behind a table of
 * functions. The fetch policy (fetch.c: routing, in-flight budgets, merging, fail-over, back-off)
 * drives a source only through this table and never knows whether the bytes came over TCP, from
 * local files or otherwise. Implementations: source_tcp.c (pipelined GETs to a dscached, over
 * conn.c), source_files.c (the fallback path: shard files read directly) and source_rdma.c
 * (chunks by RDMA READ out of the server's registered arena; docs/rdma.md). The registry,
 * sources.h, picks one per member address (dsc__source_for_addr).
 *
 * The RDMA source is the model for another: its endpoint_open registers nothing per peer (the
 * loader's one slab, rdma_slab.c, is registered once by dsc__rdma_client_open before any
 * connection); open connects over TCP first (HELLO, then RDMA_CONNECT: an RC queue pair per
 * connection, checked by a READ of the server's probe region); submit sends an RDMA_GET on the
 * TCP channel, whose answer names (address, rkey, length) descriptors under a lease, and posts
 * the READs into slab regions; complete polls the completion queue (sleeping on its completion
 * channel), fills each entry and piggybacks the lease's release on a later RDMA_GET; wake and
 * close as for TCP (close destroys the QP before the slab regions are reused). Under transport
 * auto, any RDMA failure keeps that connection on TCP (source_tcp.c's table, with a back-off per
 * server); an answer the server sends inline (bytes not in registered memory) is taken as is.
 * The control plane (manifest, cluster view) stays on TCP (conn.c / view.c).
 *
 * Threading: an endpoint is shared by the peer's I/O threads; a connection belongs to one I/O
 * thread. Every function runs without the loader's lock, except wake (under it, from destroy). */
#ifndef DSC_SOURCE_H
#define DSC_SOURCE_H

#include "chunks.h"
#include "credential.h"
#include "log.h"
#include "manifest.h"
#include "report.h"
#include "slots.h"

#include <stdatomic.h>

#include <stdint.h>

/* Consecutive chunks of one shard fetched as one request. */
#define DSC_SOURCE_MAX_MERGE 16
/* Chunks of any shards fetched as one scattered request (a source with scatter_max, below: TCP's
 * MGET), for the map-style reader and the caller's order, whose queues rarely hold runs. */
#define DSC_SOURCE_MAX_CHUNKS 64
/* Scattered requests take chunks of at most DSC_SOURCE_SCATTER_CHUNK_BYTES decoded bytes, and
 * DSC_SOURCE_SCATTER_MAX_BYTES in all. Small chunks only: there the round trips and per-request
 * costs are what an MGET saves. Measured here with several MGETs pipelined per connection, chunks
 * of 64 KiB and 1 MiB came 1.2-5x slower by MGET than by pipelined GETs (an MGET answer is
 * gathered on the server and delivered whole; a GET's chunk is decoded as it lands), 4 KiB ones
 * as fast or faster with 64x fewer requests (docs/benchmarks.md, "Scattered requests"). */
#define DSC_SOURCE_SCATTER_CHUNK_BYTES (16u << 10)
#define DSC_SOURCE_SCATTER_MAX_BYTES (256u << 10)
/* Decoded bytes merged into one request at most, unless one chunk alone is larger (fetch.c).
 * Chunks of variable-length fields count at the most they can hold (dsc__chunk_raw_bound), so
 * that a request's real size stays within max(this, one chunk's bound): what the RDMA slab is
 * sized by. */
#define DSC_SOURCE_MERGE_MAX_BYTES (8u << 20)

/* One request: count consecutive chunks of one shard (chunks[0]->shard, from
 * chunks[0]->shard_chunk, count <= DSC_SOURCE_MAX_MERGE), or with scattered set count chunks of
 * any shards (count <= the connection's scatter_max). The source fills each entry's stored /
 * stored_cap (from env->pool) and entry. */
typedef struct dsc_source_req {
    uint64_t id;
    uint32_t count;
    int scattered;
    int ranged; /* one RANGE (proto/range.h): chunks of any shards, each entry's sel only */
    dsc_chunk_ent_t *chunks[DSC_SOURCE_MAX_CHUNKS];
    double answer_at; /* set by complete(): when its answer began to arrive (monotonic seconds;
                         0: the source cannot tell), for the verdict's latency figure */
    double sent_at;   /* fetch.c: when it was submitted (monotonic seconds) */
    /* DSC_REQ_SENT until complete() claims it for receiving (dsc__req_claim), or until hedge.c
     * abandons it (its chunks re-issued to another server): one atomic compare-and-swap decides,
     * so the source never writes into chunks that moved elsewhere. __atomic builtins only. */
    uint32_t claim;
    uint32_t hedge_left;  /* hedge.c: abandoned: re-issued chunks not yet delivered */
    uint64_t hedge_bytes; /* hedge.c: abandoned: the decoded bytes re-issued */
} dsc_source_req_t;

enum { DSC_REQ_SENT = 0, DSC_REQ_RECEIVING = 1, DSC_REQ_ABANDONED = 2 };

/* Called by a source's complete() when an answer to req arrives, before it touches req->chunks:
 * 1 when the answer is to be received into them, 0 when the request was abandoned (hedge.c
 * re-issued its chunks elsewhere, and may have freed them): the source then drains the answer,
 * touches no chunk, and returns 0 with *index (the caller drops it). Only sources with
 * `abandon` set are ever abandoned. */
static inline int dsc__req_claim(dsc_source_req_t *req) {
    uint32_t want = DSC_REQ_SENT;
    if (__atomic_compare_exchange_n(&req->claim, &want, DSC_REQ_RECEIVING, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
        return 1;
    return want == DSC_REQ_RECEIVING;
}

/* Request ids of REPORTs (report below) carry this bit, GET ids never do. */
#define DSC_SOURCE_REPORT_ID (1ull << 63)
/* Which transport the connections to servers use (options.transport, DSCACHE_TRANSPORT). */
typedef enum dsc_transport {
    DSC_TRANSPORT_TCP = 0,
    DSC_TRANSPORT_AUTO = 1, /* RDMA where both sides can, else TCP per connection */
    DSC_TRANSPORT_RDMA = 2, /* RDMA or an error */
} dsc_transport_t;

/* Per-transport connection and byte counters, written by the sources, read by stats.c. */
typedef struct dsc_transport_counters {
    atomic_uint_fast64_t rdma_connections; /* open now over RDMA */
    atomic_uint_fast64_t tcp_connections;  /* open now over TCP under transport auto */
    atomic_uint_fast64_t rdma_bytes;       /* chunk bytes received by RDMA READ */
    atomic_uint_fast64_t rdma_fallbacks;   /* connections that fell back to TCP */
    atomic_uint_fast64_t rdma_errors;      /* RDMA connections lost to an error completion */
} dsc_transport_counters_t;

typedef struct dsc_rdma_client dsc_rdma_client_t; /* source_rdma.c */

/* What every source may use; owned by the loader, constant while its threads run (manifest is
 * NULL until it has been fetched, set before any request). */
typedef struct dsc_source_env {
    const dsc_logger_t *log;
    dsc_bufpool_t *pool;
    const char *dataset;
    uint32_t timeout_ms;
    const dsc_manifest_t *manifest;
    const dsc_credential_t *cred; /* what server connections authenticate with (NULL: none) */
    dsc_transport_t transport;
    dsc_rdma_client_t *rdma; /* the RDMA device (NULL: none, every connection uses TCP) */
    dsc_transport_counters_t *counters;
} dsc_source_env_t;

typedef struct dsc_source_ops {
    const char *name;
    /* Requests one connection may have outstanding (submitted, not completed). */
    uint32_t max_outstanding;
    /* 1: the per-peer in-flight bound applies (a remote server shared by many clients); 0: the
     * source is read one request at a time per thread and needs none. */
    int peer_bounded;
    /* Optional (NULL: never): 1 when the requests outstanding on conn may be abandoned (their
     * chunks re-issued to another owner by hedge.c while the server is stalled): its complete()
     * calls dsc__req_claim before it writes a request's chunks and drops an abandoned one's
     * answer. 0: they are waited for (the server still gets no new work while slow). Called
     * under the loader's lock while another thread may be in complete() on conn: reads only
     * what does not change under it (or atomics). */
    int (*abandon_ok)(void *conn);
    /* Per peer: `addr` (a server address, or the fallback directory). Returns 0 and *out, or
     * DSC_ENOMEM. */
    int (*endpoint_open)(const dsc_source_env_t *env, const char *addr, void **out);
    void (*endpoint_close)(void *endpoint);
    /* The dataset's manifest from this peer (*out: caller frees with dsc_manifest_free);
     * *hello_hash: the peer's cluster view (0: none). view_hash is the client's view. Logs its
     * failures. Returns 0 or DSC_E* (DSC_ENOTFOUND, DSC_EBADMANIFEST, DSC_EBADSCHEMA are
     * definite answers; connection errors are not). */
    int (*manifest)(void *endpoint, uint64_t view_hash, dsc_manifest_t **out, uint64_t *hello_hash);
    /* A connection for one I/O thread; *hello_hash as above. Returns 0 and *out, or a
     * connection error (DSC_ECONNREFUSED, DSC_ETIMEDOUT, ...). */
    int (*open)(void *endpoint, uint64_t view_hash, void **out, uint64_t *hello_hash);
    /* Sends (or records) one request. Returns 0, or an error after which the connection is
     * unusable. */
    int (*submit)(void *conn, dsc_source_req_t *req);
    /* Waits for one of the `count` outstanding requests out[] to finish and receives it. Sets
     * *index (when the request is known), *wire (stored bytes received) and *conn_bad. Returns
     * 0; an error for request *index only (*conn_bad 0: DSC_EUNAVAIL and DSC_ECORRUPT mean
     * another peer may serve it); or, with *conn_bad 1, a connection error (every outstanding
     * request is lost). */
    int (*complete)(void *conn, dsc_source_req_t *out, uint32_t count, uint32_t *index,
                    int *conn_bad, uint64_t *wire);
    /* Optional (NULL: dsc__source_mget, source_mget.h, fetches one chunk per request through submit
     * and complete, as the RDMA source and the fallback files do): fetches chunks[0..count), chunks
     * of any shards of the dataset in any order (each entry's shard, shard_chunk, samples, raw_len
     * and raw_min set, as for submit), with as few requests as it can (TCP: MGET,
     * source_tcp.c), waiting for all of them. Nothing may be outstanding on conn. Fills each
     * chunk's stored / stored_cap (from env->pool) and entry, checks the stored bytes against
     * entry.stored_checksum and the entry against the manifest, and sets status[i]: 0, or that
     * chunk's own error (DSC_ECORRUPT, DSC_EUNAVAIL, DSC_ECHUNKSUM, DSC_ENOTFOUND, DSC_EBADREQ,
     * DSC_EPROTO for an entry the manifest contradicts, ...; its stored buffer, if any, is still
     * the caller's to give back). *wire grows by the stored bytes received. Returns the number
     * of chunks with status 0, or an error for the whole call (every status then holds it):
     * *conn_bad 1 when the connection is unusable (a connection error), else 0 (DSC_ENOTFOUND,
     * DSC_ECHANGED: the dataset itself). */
    int (*mget)(void *conn, dsc_chunk_ent_t **chunks, uint32_t count, int *status, int *conn_bad,
                uint64_t *wire);
    /* Optional (NULL: 0): how many chunks of any shards one scattered request (submit with
     * req->scattered) may name on this connection, 2..DSC_SOURCE_MAX_CHUNKS, or 0 when it takes
     * consecutive runs only (TCP: the MGET feature granted in HELLO; one answer then carries
     * every chunk, each with its own status, and complete() fails the whole request with the
     * first failing chunk's error, so that the chunks fail over together). */
    uint32_t (*scatter_max)(void *conn);
    /* Optional (NULL: 0): 1 when requests with `ranged` may be submitted on conn (TCP: the
     * RANGE feature granted in HELLO); the answer is read as a scattered one's. Else fetch.c
     * sends ranged entries as whole chunks. */
    int (*range_ok)(void *conn);
    /* Optional (NULL: the source has no server to tell): sends a REPORT request (body from
     * proto/report.h, with the straggler trailer: left out here for a server that did not grant
     * DSC_FEATURE_REPORT_HEDGE) with request id `id` (DSC_SOURCE_REPORT_ID set); complete() drops
     * its answer, whatever its status. Returns 0, or an error after which the connection is
     * unusable. */
    int (*report)(void *conn, uint64_t id, const uint8_t *body, size_t len);
    /* Optional (NULL: no read-ahead hints): sends a HINT request (body from proto/hint.h) with
     * request id `id` (DSC_SOURCE_REPORT_ID set); complete() drops its answer. Returns 0, or an
     * error after which the connection is unusable. */
    int (*hint)(void *conn, uint64_t id, const uint8_t *body, size_t len);
    /* Optional: 1 once a HINT was answered UNSUPPORTED on conn (the server has no read-ahead)
     * since the last call; else 0. Never blocks. */
    int (*hint_refused)(void *conn);
    /* Optional: 1 and *out when a REPORT answer with the server's figures (proto/report.h
     * dsc_report_resp_t) arrived on conn since the last call; else 0. Never blocks. */
    int (*report_answer)(void *conn, dsc_report_resp_t *out);
    /* Called before the first request after a pause (nothing outstanding): 1 when the peer has
     * closed the connection meanwhile (a server's idle time-out; it never sends unprompted), so
     * the caller reopens it quietly instead of failing the peer; else 0. Never blocks. NULL: the
     * source's connections do not expire. */
    int (*idle_closed)(void *conn);
    /* Makes a thread blocked in submit or complete on conn return soon with an error. Thread-safe
     * with respect to them. */
    void (*wake)(void *conn);
    /* Closes and frees. NULL is a no-op. */
    void (*close)(void *conn);
} dsc_source_ops_t;

#endif
