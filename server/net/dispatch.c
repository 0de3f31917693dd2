/* Request dispatch: decodes each request frame and runs its operation against the catalog,
 * answering through the connection's reply interface (reply.h) without knowing the transport.
 * A GET that misses waits for its load and is answered when the catalog delivers it to the
 * connection's mailbox.
 * Over 1,000 lines: one handler per opcode (eighteen of them), each short, all over the one shard
 * preamble (chunks_acquire) and the answer counting here; the codecs are proto/'s, the waits
 * the catalog's, the transports behind reply.h. */
#include "dispatch.h"
#include "hint.h"
#include "mget.h"
#include "peer.h"
#include "range.h"
#include "report.h"
#include "server_core.h"
#include "srvlog.h"
#include "staging.h"
#include "store.h"
#include "util.h"
#include "wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A GET waiting for a load. */
typedef struct pending_get {
    dsc_waiter_t waiter; /* first */
    dsc_server_t *srv;
    dsc_reply_t *reply;
    dsc_dataset_t *ds;
    uint64_t request_id;
    uint64_t reserve;  /* counted against the connection's bounds while it waits */
    uint64_t start_ns; /* when the request was decoded: the latency histogram */
    uint32_t shard_id, first_chunk, chunk_count;
    uint8_t opcode; /* DSC_OP_GET or DSC_OP_RDMA_GET */
} pending_get_t;

static void on_get_loaded(dsc_waiter_t *w);

/* Whose requests these are: the credential the connection authenticated as ("": anonymous). A
 * job is (credential, REPORTed name), so no credential can take another's job (fairq.h,
 * staging.h). */
static const char *owner_of(const dsc_reply_t *reply) {
    return reply->auth.state == DSC_AUTH_STATE_OK ? reply->auth.name : "";
}

/* ---- answering (every answer is counted here, once) -------------------------------------- */

static void answer(dsc_server_t *srv, dsc_reply_t *reply, uint8_t opcode, uint64_t id,
                   uint32_t status, const void *body, size_t len) {
    dsc__server_count_request(srv, opcode, status);
    reply->ops->frame(reply, opcode, id, status, body, len);
}

static void answer_error(dsc_server_t *srv, dsc_reply_t *reply, uint8_t opcode, uint64_t id,
                         uint32_t status, const char *message) {
    size_t len = strlen(message);
    if (len > DSC_ERROR_MAX_MESSAGE)
        len = DSC_ERROR_MAX_MESSAGE;
    answer(srv, reply, opcode, id, status, message, len);
}

/* An error after which the connection is closed (see dsc_reply_ops_t.fatal). */
static void answer_fatal(dsc_server_t *srv, dsc_reply_t *reply, uint8_t opcode, uint64_t id,
                         uint32_t status, const char *message) {
    dsc__server_count_request(srv, opcode, status);
    reply->ops->fatal(reply, opcode, id, status, message);
}

static void answer_json(dsc_server_t *srv, dsc_reply_t *reply, uint8_t opcode, uint64_t id,
                        char *json) {
    if (json == NULL)
        answer_error(srv, reply, opcode, id, DSC_STATUS_INTERNAL, "out of memory");
    else
        answer(srv, reply, opcode, id, DSC_STATUS_OK, json, strlen(json));
    free(json);
}

static uint32_t load_error_status(int rc) {
    switch (rc) {
    case DSC_ECORRUPT:
        return DSC_STATUS_CORRUPT;
    case DSC_EUNAVAIL:
        return DSC_STATUS_UNAVAILABLE;
    case DSC_ECHANGED:
        return DSC_STATUS_CHANGED;
    default:
        return DSC_STATUS_INTERNAL;
    }
}

static const char *load_error_message(int rc) {
    switch (rc) {
    case DSC_ECORRUPT:
        return "shard failed validation on the server";
    case DSC_EUNAVAIL:
        return "shard cannot be loaded now";
    case DSC_ECHANGED:
        return "dataset changed: replaced on this server's disk since it read the manifest (its "
               "shard files are the new version's); read the manifest again and start over";
    default:
        return dsc_strerror(rc);
    }
}

/* ---- the shard preamble: find dataset, find shard, validate range, take a hold ------------ */

/* What a request names, or why it cannot be served (the error answer's status and message). */
typedef struct shard_ref {
    dsc_dataset_t *ds;
    dsc_shard_slot_t *slot; /* NULL for DSC_SHARD_ALL */
    uint32_t status;
    const char *message;
    char changed[DSC_MAX_NAME + 160]; /* the CHANGED message */
} shard_ref_t;

static int refuse(shard_ref_t *ref, uint32_t status, const char *message) {
    ref->status = status;
    ref->message = message;
    return -1;
}

/* Finds the dataset and the shard (DSC_SHARD_ALL too when all_ok). A dataset outside the
 * connection's credential is not found (authz.h). Returns 0, or -1 with ref->status and
 * ref->message set. */
static int shard_find(dsc_server_t *srv, const dsc_reply_t *reply, dsc_str_t dataset,
                      uint32_t shard_id, int all_ok, shard_ref_t *ref) {
    ref->ds = dsc__authz_may_read(&reply->auth, dataset.ptr, dataset.len)
                  ? dsc_catalog_find(srv->cat, dataset.ptr, dataset.len)
                  : NULL;
    if (ref->ds == NULL)
        return refuse(ref, DSC_STATUS_NOT_FOUND, "no such dataset");
    ref->slot = NULL;
    if (all_ok && shard_id == DSC_SHARD_ALL)
        return 0;
    ref->slot = dsc_dataset_shard_slot(ref->ds, shard_id);
    if (ref->slot == NULL)
        return refuse(ref, DSC_STATUS_NOT_FOUND, "no such shard");
    return 0;
}

/* The preamble of every chunk read: finds the dataset and the shard, checks the chunk range
 * against the manifest and takes a hold on the shard's bytes. Returns 1 (a hit: *hold filled),
 * 0 (a miss: the answer comes from on_get_loaded; the reply counts the wait), or -1 with
 * ref->status and ref->message set. */
static int chunks_acquire(dsc_server_t *srv, dsc_reply_t *reply, uint8_t opcode, uint64_t id,
                          const dsc_get_req_t *req, uint64_t start_ns, dsc_hold_t *hold,
                          shard_ref_t *ref) {
    if (shard_find(srv, reply, req->dataset, req->shard_id, 0, ref) < 0)
        return -1;
    if ((req->flags & DSC_GET_FLAG_VERSION) && req->version != dsc_dataset_version_of(ref->ds)) {
        /* Replaced since the loader read its manifest: never a batch of the other version. */
        snprintf(ref->changed, sizeof ref->changed,
                 "dataset %s changed: the request names version %016llx, this server now "
                 "serves version %016llx; read the manifest again and start over",
                 dsc_dataset_manifest(ref->ds)->name, (unsigned long long)req->version,
                 (unsigned long long)dsc_dataset_version_of(ref->ds));
        return refuse(ref, DSC_STATUS_CHANGED, ref->changed);
    }
    const dsc_manifest_shard_t *meta = &dsc_dataset_manifest(ref->ds)->shards[req->shard_id];
    if (req->chunk_count == 0 || (uint64_t)req->first_chunk + req->chunk_count > meta->chunks)
        return refuse(ref, DSC_STATUS_BAD_REQUEST, "chunk range out of bounds");
    pending_get_t *pg = malloc(sizeof *pg);
    if (pg == NULL)
        return refuse(ref, DSC_STATUS_INTERNAL, "out of memory");
    memset(pg, 0, sizeof *pg);
    pg->waiter.mailbox = reply->mailbox;
    pg->waiter.fn = on_get_loaded;
    pg->srv = srv;
    pg->reply = reply;
    pg->ds = ref->ds;
    pg->request_id = id;
    pg->opcode = opcode;
    pg->start_ns = start_ns;
    pg->shard_id = req->shard_id;
    pg->first_chunk = req->first_chunk;
    pg->chunk_count = req->chunk_count;
    pg->waiter.first_chunk = req->first_chunk; /* a read-through reads only these chunks */
    pg->waiter.chunk_count = req->chunk_count;
    pg->waiter.hinter = reply->hinter;
    /* Its read-through, if any, queues in its job's turn (or its connection's). */
    _Static_assert(sizeof pg->waiter.job == sizeof reply->job, "job names of one size");
    memcpy(pg->waiter.job, reply->job, sizeof pg->waiter.job);
    pg->waiter.job[sizeof pg->waiter.job - 1] = '\0';
    snprintf(pg->waiter.owner, sizeof pg->waiter.owner, "%s", owner_of(reply));
    pg->waiter.conn = (uintptr_t)reply;
    /* What the answer can pin at most, counted as held while the load runs, so a client that
     * pipelines misses and never reads stops being read before read-through buffers pile up:
     * the requested chunks at their largest stored size (raw, or lz4's worst case), plus the
     * index and a page either side, never more than the shard file. */
    uint64_t chunk_raw =
        dsc_manifest_chunk_bound(dsc_dataset_manifest(ref->ds), meta->chunk_samples);
    uint64_t bound = (uint64_t)req->chunk_count * (chunk_raw + chunk_raw / 255 + 16) +
                     (uint64_t)meta->chunks * DSC_CHUNK_ENTRY_SIZE + 2 * 4096;
    pg->reserve = bound < meta->bytes ? bound : meta->bytes;
    int rc = dsc_catalog_acquire(srv->cat, ref->slot, &pg->waiter, hold);
    if (rc == 0) {
        reply->ops->wait_begin(reply, pg->reserve);
        return 0;
    }
    free(pg);
    if (rc == 1)
        return 1;
    return refuse(ref, load_error_status(rc), load_error_message(rc));
}

/* ---- GET --------------------------------------------------------------------------------- */

/* A chunk damaged on this server's disk: CORRUPT for the GET that asked for it, with a message
 * that starts "damaged chunk C" (PROTOCOL.md, GET response); the shard's other chunks are
 * served. */
static void answer_damaged(dsc_server_t *srv, dsc_reply_t *reply, uint8_t opcode, uint64_t id,
                           dsc_dataset_t *ds, uint32_t shard_id, uint32_t chunk) {
    const dsc_manifest_t *m = dsc_dataset_manifest(ds);
    char msg[DSC_MAX_NAME + 512];
    snprintf(msg, sizeof msg,
             "damaged chunk %u of dataset %s shard %u (file %s) on this server: its stored "
             "checksum differs; the shard's other chunks are served. Read this chunk from a "
             "replica or fallback_path; repair: re-ingest the shard (dscache inspect on the "
             "dataset directory names the damage)",
             chunk, m->name, shard_id, shard_id < m->shard_count ? m->shards[shard_id].file : "?");
    answer_error(srv, reply, opcode, id, DSC_STATUS_CORRUPT, msg);
}

/* Answers a GET out of a hold (taken: released here or by the reply). */
static void send_get(dsc_server_t *srv, dsc_reply_t *reply, uint8_t opcode, uint64_t id,
                     dsc_dataset_t *ds, uint32_t shard_id, dsc_hold_t *hold, uint32_t first,
                     uint32_t count, uint64_t start_ns) {
    if ((uint64_t)first + count > hold->chunk_count) {
        dsc_hold_release(srv->cat, hold);
        answer_error(srv, reply, opcode, id, DSC_STATUS_BAD_REQUEST, "chunk range out of bounds");
        return;
    }
    int64_t damaged = dsc_hold_damaged_chunk(hold, first, count);
    if (damaged >= 0) {
        dsc_hold_release(srv->cat, hold);
        answer_damaged(srv, reply, opcode, id, ds, shard_id, (uint32_t)damaged);
        return;
    }
    dsc_chunk_entry_t small[16];
    dsc_chunk_entry_t *entries = count <= 16 ? small : malloc(count * sizeof *entries);
    if (entries == NULL) {
        dsc_hold_release(srv->cat, hold);
        answer_error(srv, reply, opcode, id, DSC_STATUS_INTERNAL, "out of memory");
        return;
    }
    uint64_t data_len = 0;
    for (uint32_t i = 0; i < count; i++) {
        dsc_chunk_entry_decode(hold->index + (size_t)(first + i) * DSC_CHUNK_ENTRY_SIZE,
                               &entries[i]);
        data_len += entries[i].stored_len;
    }
    int rc = 0;
    if (DSC_GET_RESP_PREFIX(count) + data_len > DSC_FRAME_MAX_BODY) {
        rc = DSC_ETOOLARGE;
    } else {
        dsc_get_answer_t ans = {.request_id = id,
                                .entries = entries,
                                .count = count,
                                .data_len = data_len,
                                .opcode = opcode,
                                .dataset = dsc_dataset_manifest(ds)->name};
        rc = reply->ops->get(reply, &ans, hold);
    }
    if (entries != small)
        free(entries);
    if (rc == 0) {
        dsc__server_count_request(srv, opcode, DSC_STATUS_OK);
        dsc__server_count_get_latency(srv, start_ns);
        dsc_dataset_count_served(ds, data_len);
        return;
    }
    dsc_hold_release(srv->cat, hold);
    if (rc == DSC_EBUSY)
        answer_error(srv, reply, opcode, id, DSC_STATUS_BUSY,
                     "RDMA leases over max_lease_bytes: release some first");
    else if (rc == DSC_ETOOLARGE)
        answer_error(srv, reply, opcode, id, DSC_STATUS_TOO_LARGE,
                     "response over the frame limit: ask for fewer chunks");
    else if (rc == DSC_ENOMEM)
        answer_error(srv, reply, opcode, id, DSC_STATUS_INTERNAL, "out of memory");
    else
        answer_error(srv, reply, opcode, id, DSC_STATUS_INTERNAL, "cannot encode the response");
}

/* Runs on the connection's thread when a load it waited for has finished. */
static void on_get_loaded(dsc_waiter_t *w) {
    pending_get_t *pg = (pending_get_t *)w;
    dsc_reply_t *reply = pg->reply;
    if (reply->ops->closing(reply)) {
        if (w->status == 0)
            dsc_hold_release(pg->srv->cat, &w->hold);
    } else if (w->status == 0) {
        send_get(pg->srv, reply, pg->opcode, pg->request_id, pg->ds, pg->shard_id, &w->hold,
                 pg->first_chunk, pg->chunk_count, pg->start_ns);
    } else if (w->status == DSC_ECORRUPT && w->chunk_damaged) {
        answer_damaged(pg->srv, reply, pg->opcode, pg->request_id, pg->ds, pg->shard_id,
                       w->damaged_chunk);
    } else {
        answer_error(pg->srv, reply, pg->opcode, pg->request_id, load_error_status(w->status),
                     load_error_message(w->status));
    }
    uint64_t reserve = pg->reserve;
    free(pg);
    reply->ops->wait_end(reply, reserve);
}

static void handle_get(dsc_server_t *srv, dsc_reply_t *reply, uint64_t id, const uint8_t *body,
                       size_t len) {
    uint64_t start_ns = dsc_now_ns();
    dsc_get_req_t req;
    if (dsc_get_req_decode(body, len, &req) < 0) {
        answer_error(srv, reply, DSC_OP_GET, id, DSC_STATUS_BAD_REQUEST, "malformed GET body");
        return;
    }
    dsc_hold_t hold;
    shard_ref_t ref;
    int rc = chunks_acquire(srv, reply, DSC_OP_GET, id, &req, start_ns, &hold, &ref);
    if (rc == 1)
        send_get(srv, reply, DSC_OP_GET, id, ref.ds, req.shard_id, &hold, req.first_chunk,
                 req.chunk_count, start_ns);
    else if (rc < 0)
        answer_error(srv, reply, DSC_OP_GET, id, ref.status, ref.message);
}

/* ---- PEER_READ --------------------------------------------------------------------------- */

typedef struct peer_fill {
    const uint8_t *src;
    size_t len;
} peer_fill_t;

static void peer_fill(void *arg, uint8_t *body) {
    const peer_fill_t *f = arg;
    memcpy(body, f->src, f->len);
}

/* A warming peer reads a resident shard's file bytes (proto/peer.h): authorised as a GET of the
 * dataset; never loads or reads through, so a copy comes only from RAM. */
static void handle_peer_read(dsc_server_t *srv, dsc_reply_t *reply, uint64_t id,
                             const uint8_t *body, size_t len) {
    dsc_peer_req_t req;
    if (dsc_peer_req_decode(body, len, &req) < 0) {
        answer_error(srv, reply, DSC_OP_PEER_READ, id, DSC_STATUS_BAD_REQUEST,
                     "malformed PEER_READ body");
        return;
    }
    shard_ref_t ref;
    if (shard_find(srv, reply, req.dataset, req.shard_id, 0, &ref) < 0) {
        answer_error(srv, reply, DSC_OP_PEER_READ, id, ref.status, ref.message);
        return;
    }
    if ((req.flags & DSC_PEER_FLAG_VERSION) && req.version != dsc_dataset_version_of(ref.ds)) {
        answer_error(srv, reply, DSC_OP_PEER_READ, id, DSC_STATUS_CHANGED,
                     "this server serves another version of the dataset");
        return;
    }
    dsc_hold_t hold;
    if (!dsc_catalog_peek(srv->cat, ref.slot, &hold)) {
        answer_error(srv, reply, DSC_OP_PEER_READ, id, DSC_STATUS_UNAVAILABLE,
                     "shard not resident on this server");
        return;
    }
    if (req.offset > hold.size || req.length > hold.size - req.offset) {
        dsc_hold_release(srv->cat, &hold);
        answer_error(srv, reply, DSC_OP_PEER_READ, id, DSC_STATUS_BAD_REQUEST,
                     "range beyond the shard file");
        return;
    }
    peer_fill_t f = {.src = hold.data + req.offset, .len = req.length};
    int rc = reply->ops->frame_fill(reply, DSC_OP_PEER_READ, id, req.length, peer_fill, &f);
    dsc_hold_release(srv->cat, &hold);
    if (rc < 0) {
        answer_error(srv, reply, DSC_OP_PEER_READ, id, DSC_STATUS_INTERNAL, "out of memory");
        return;
    }
    dsc__server_count_request(srv, DSC_OP_PEER_READ, DSC_STATUS_OK);
    dsc__server_count_peer_served(srv, req.length);
}

/* ---- MGET -------------------------------------------------------------------------------- */

/* An MGET's entries are grouped into runs: consecutive chunks of one shard (duplicates
 * included), each acquired exactly as a GET of those chunks would be (a hit, a load joined, a
 * staged range, or a read-through of just them). The answer goes out once every run is in; its
 * body is gathered from the runs' holds into the transport's buffer (one copy). */
#define MGET_NO_RUN UINT32_MAX

typedef struct pending_mget pending_mget_t;

typedef struct mget_run {
    dsc_waiter_t waiter; /* first */
    pending_mget_t *pm;
    uint32_t shard_id, first, count;
    uint32_t status;  /* the entries' status when the run has no hold */
    uint32_t damaged; /* status CORRUPT from a read-through: the damaged chunk, else NO_RUN */
    int held;         /* hold is filled (released at the end) */
    dsc_hold_t hold;
} mget_run_t;

struct pending_mget {
    dsc_server_t *srv;
    dsc_reply_t *reply;
    dsc_dataset_t *ds;
    uint64_t request_id;
    uint8_t opcode; /* DSC_OP_MGET, or DSC_OP_RANGE: answers are sub-chunks of spans */
    /* RANGE only: per entry its spans (copied: the request body is gone by the answer) and the
     * sub-chunk answered for it (stored bytes, malloc'd; its entry in entries). */
    dsc_range_item_t *ritems;
    dsc_sample_span_t *spans;
    uint8_t **sub;
    uint64_t reserve; /* counted against the connection's bounds while runs wait */
    uint32_t count, run_count, waiting;
    dsc_mget_item_t *items;     /* count, in request order */
    uint32_t *entry_run;        /* count: the entry's run, or MGET_NO_RUN (status already set) */
    uint32_t *status;           /* count: the answer's per-entry status */
    dsc_chunk_entry_t *entries; /* count: OK entries' index entries */
    mget_run_t *runs;           /* run_count */
};

static void mget_free(pending_mget_t *pm) {
    for (uint32_t r = 0; r < pm->run_count; r++)
        if (pm->runs[r].held)
            dsc_hold_release(pm->srv->cat, &pm->runs[r].hold);
    if (pm->sub != NULL)
        for (uint32_t i = 0; i < pm->count; i++)
            free(pm->sub[i]);
    free(pm->sub);
    free(pm->ritems);
    free(pm->spans);
    free(pm->items);
    free(pm->entry_run);
    free(pm->status);
    free(pm->entries);
    free(pm->runs);
    free(pm);
}

/* An index entry as the answer's decoder accepts it (checked when the shard was loaded; a
 * mismatch here would only be a damaged index, answered CORRUPT). */
static int mget_entry_ok(const dsc_chunk_entry_t *e) {
    return (e->codec == DSC_CODEC_RAW || e->codec == DSC_CODEC_LZ4) &&
           e->raw_len <= DSC_CHUNK_MAX_RAW &&
           (e->codec != DSC_CODEC_RAW || e->stored_len == e->raw_len);
}

static void mget_fill(void *arg, uint8_t *body) {
    pending_mget_t *pm = arg;
    size_t prefix = DSC_MGET_RESP_PREFIX(pm->count);
    /* Cannot fail: every OK entry passed mget_entry_ok and the room is exact. */
    dsc_mget_resp_prefix_encode(pm->status, pm->entries, pm->count, body, prefix);
    uint8_t *p = body + prefix;
    for (uint32_t i = 0; i < pm->count; i++) {
        if (pm->status[i] != DSC_STATUS_OK)
            continue;
        const uint8_t *src = pm->sub != NULL
                                 ? pm->sub[i]
                                 : pm->runs[pm->entry_run[i]].hold.data + pm->entries[i].offset;
        memcpy(p, src, pm->entries[i].stored_len);
        p += pm->entries[i].stored_len;
    }
}

/* RANGE: entry i's sub-chunk from the held chunk (pm->entries[i], its index entry). The stored
 * bytes are checked against the writer's checksums and decoded (dsc_chunk_decode), the spans'
 * samples copied out as a decoded chunk of their own (dsc_range_extract), compressed again when
 * the chunk was (lz4, kept when it shrinks), and entries[i] becomes the sub-chunk's entry, with
 * checksums computed here: the client verifies the transfer against them. Returns the entry's
 * status: OK, CORRUPT (the stored chunk fails its checksums or its layout), BAD_REQUEST (a span
 * past the chunk: checked against the manifest before, so only a chunk whose index disagrees
 * with it), BUSY (out of memory). Runs on the connection's thread: O(the chunk's bytes). */
static uint32_t range_sub_chunk(pending_mget_t *pm, uint32_t i, const dsc_hold_t *hold) {
    const dsc_chunk_entry_t whole = pm->entries[i];
    const dsc_schema_t *schema = &dsc_dataset_manifest(pm->ds)->schema;
    uint8_t *raw = malloc(whole.raw_len ? whole.raw_len : 1);
    if (raw == NULL)
        return DSC_STATUS_BUSY;
    uint32_t status = DSC_STATUS_CORRUPT;
    uint8_t *sub = NULL, *enc = NULL;
    dsc_chunk_layout_t layout;
    int rc = dsc_chunk_decode(&whole, hold->data + whole.offset, raw, whole.raw_len);
    if (rc < 0 || whole.sample_count == 0 ||
        dsc_chunk_layout(schema, whole.sample_count, raw, whole.raw_len, &layout) < 0)
        goto out;
    int64_t size = dsc_range_extract(schema, &layout, &pm->ritems[i], NULL, 0);
    if (size < 0) {
        status = size == DSC_ERANGE ? DSC_STATUS_BAD_REQUEST : DSC_STATUS_TOO_LARGE;
        goto out;
    }
    status = DSC_STATUS_BUSY;
    sub = malloc(size ? (size_t)size : 1);
    if (sub == NULL)
        goto out;
    dsc_range_extract(schema, &layout, &pm->ritems[i], sub, (size_t)size);
    dsc_chunk_entry_t e = whole;
    const void *stored = NULL;
    if (whole.codec == DSC_CODEC_LZ4) {
        enc = malloc(dsc_chunk_encode_bound((size_t)size));
        if (enc == NULL)
            goto out;
        rc = dsc_chunk_encode(DSC_CODEC_LZ4, 0, sub, (size_t)size, enc,
                              dsc_chunk_encode_bound((size_t)size), &e, &stored);
    } else {
        rc = dsc_chunk_encode(DSC_CODEC_RAW, 0, sub, (size_t)size, NULL, 0, &e, &stored);
    }
    if (rc < 0)
        goto out;
    e.offset = 0;
    e.first_sample = whole.first_sample;
    e.sample_count = (uint32_t)dsc_range_item_samples(&pm->ritems[i]);
    if (stored == enc) { /* compressed: keep that, drop the decoded copy */
        free(sub);
        sub = enc;
        enc = NULL;
    }
    pm->sub[i] = sub;
    sub = NULL;
    pm->entries[i] = e;
    status = mget_entry_ok(&e) ? DSC_STATUS_OK : DSC_STATUS_INTERNAL;
out:
    free(enc);
    free(sub);
    free(raw);
    return status;
}

/* Every run is in: each entry's status, then the answer (or TOO_LARGE over the frame bound, as
 * GET). Frees pm. */
static void mget_finish(pending_mget_t *pm) {
    dsc_server_t *srv = pm->srv;
    dsc_reply_t *reply = pm->reply;
    if (reply->ops->closing(reply)) {
        mget_free(pm);
        return;
    }
    uint64_t data_len = 0;
    for (uint32_t i = 0; i < pm->count; i++) {
        if (pm->entry_run[i] == MGET_NO_RUN)
            continue;
        const mget_run_t *run = &pm->runs[pm->entry_run[i]];
        uint32_t chunk = pm->items[i].chunk;
        if (!run->held) {
            pm->status[i] = run->status;
            if (run->status == DSC_STATUS_CORRUPT && run->damaged != MGET_NO_RUN &&
                run->damaged != chunk)
                pm->status[i] = DSC_STATUS_UNAVAILABLE; /* read with a damaged one: ask again */
            continue;
        }
        if (chunk >= run->hold.chunk_count) {
            pm->status[i] = DSC_STATUS_BAD_REQUEST;
            continue;
        }
        if (dsc_hold_damaged_chunk(&run->hold, chunk, 1) >= 0) {
            pm->status[i] = DSC_STATUS_CORRUPT;
            continue;
        }
        dsc_chunk_entry_decode(run->hold.index + (size_t)chunk * DSC_CHUNK_ENTRY_SIZE,
                               &pm->entries[i]);
        if (!mget_entry_ok(&pm->entries[i])) {
            pm->status[i] = DSC_STATUS_CORRUPT;
            continue;
        }
        pm->status[i] = DSC_STATUS_OK;
        if (pm->opcode == DSC_OP_RANGE)
            pm->status[i] = range_sub_chunk(pm, i, &run->hold);
        if (pm->status[i] == DSC_STATUS_OK)
            data_len += pm->entries[i].stored_len;
    }
    uint64_t body_len = DSC_MGET_RESP_PREFIX(pm->count) + data_len;
    if (body_len > DSC_FRAME_MAX_BODY) {
        answer_error(srv, reply, pm->opcode, pm->request_id, DSC_STATUS_TOO_LARGE,
                     pm->opcode == DSC_OP_RANGE
                         ? "RANGE response over the frame limit: ask for fewer samples"
                         : "MGET response over the frame limit: ask for fewer chunks");
    } else if (reply->ops->frame_fill(reply, pm->opcode, pm->request_id, (size_t)body_len,
                                      mget_fill, pm) < 0) {
        answer_error(srv, reply, pm->opcode, pm->request_id, DSC_STATUS_INTERNAL, "out of memory");
    } else {
        dsc__server_count_request(srv, pm->opcode, DSC_STATUS_OK);
        dsc_dataset_count_served(pm->ds, data_len);
    }
    mget_free(pm);
}

/* Runs on the connection's thread when a run's load has finished. */
static void on_mget_run_loaded(dsc_waiter_t *w) {
    mget_run_t *run = (mget_run_t *)w;
    pending_mget_t *pm = run->pm;
    if (w->status == 0) {
        run->hold = w->hold;
        run->held = 1;
    } else if (w->status == DSC_ECORRUPT && w->chunk_damaged) {
        run->status = DSC_STATUS_CORRUPT;
        run->damaged = w->damaged_chunk;
    } else {
        run->status = load_error_status(w->status);
    }
    if (--pm->waiting > 0)
        return;
    dsc_reply_t *reply = pm->reply;
    uint64_t reserve = pm->reserve;
    mget_finish(pm);
    reply->ops->wait_end(reply, reserve);
}

/* Sort key of an entry: (shard, chunk, position), so runs come out in shard order. */
typedef struct mget_key {
    uint64_t loc;
    uint32_t index;
} mget_key_t;

static int mget_key_cmp(const void *a, const void *b) {
    const mget_key_t *x = a, *y = b;
    if (x->loc != y->loc)
        return x->loc < y->loc ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* The request as MGET and RANGE share it: dataset, version and the chunks named. */
typedef struct mget_head {
    uint8_t opcode;
    dsc_str_t dataset;
    uint32_t flags, count;
    uint64_t version;
} mget_head_t;

/* Checks the dataset (credential, version) and allocates the pending request. Returns it, or
 * NULL after answering the error. */
static pending_mget_t *mget_begin(dsc_server_t *srv, dsc_reply_t *reply, uint64_t id,
                                  const mget_head_t *req, shard_ref_t *ref) {
    if (shard_find(srv, reply, req->dataset, DSC_SHARD_ALL, 1, ref) < 0) {
        answer_error(srv, reply, req->opcode, id, ref->status, ref->message);
        return NULL;
    }
    const dsc_manifest_t *m = dsc_dataset_manifest(ref->ds);
    if ((req->flags & DSC_GET_FLAG_VERSION) && req->version != dsc_dataset_version_of(ref->ds)) {
        snprintf(ref->changed, sizeof ref->changed,
                 "dataset %s changed: the request names version %016llx, this server now "
                 "serves version %016llx; read the manifest again and start over",
                 m->name, (unsigned long long)req->version,
                 (unsigned long long)dsc_dataset_version_of(ref->ds));
        answer_error(srv, reply, req->opcode, id, DSC_STATUS_CHANGED, ref->changed);
        return NULL;
    }
    uint32_t n = req->count;
    pending_mget_t *pm = calloc(1, sizeof *pm);
    if (pm != NULL) {
        pm->items = malloc(n * sizeof *pm->items);
        pm->entry_run = malloc(n * sizeof *pm->entry_run);
        pm->status = calloc(n, sizeof *pm->status);
        pm->entries = calloc(n, sizeof *pm->entries);
    }
    if (pm == NULL || pm->items == NULL || pm->entry_run == NULL || pm->status == NULL ||
        pm->entries == NULL) {
        if (pm != NULL)
            mget_free(pm);
        answer_error(srv, reply, req->opcode, id, DSC_STATUS_INTERNAL, "out of memory");
        return NULL;
    }
    pm->srv = srv;
    pm->reply = reply;
    pm->ds = ref->ds;
    pm->request_id = id;
    pm->count = n;
    pm->opcode = req->opcode;
    return pm;
}

static void mget_acquire(pending_mget_t *pm);

static void handle_mget(dsc_server_t *srv, dsc_reply_t *reply, uint64_t id, const uint8_t *body,
                        size_t len) {
    dsc_mget_req_t req;
    if (dsc_mget_req_decode(body, len, &req) < 0) {
        answer_error(srv, reply, DSC_OP_MGET, id, DSC_STATUS_BAD_REQUEST, "malformed MGET body");
        return;
    }
    mget_head_t head = {DSC_OP_MGET, req.dataset, req.flags, req.count, req.version};
    shard_ref_t ref;
    pending_mget_t *pm = mget_begin(srv, reply, id, &head, &ref);
    if (pm == NULL)
        return;
    for (uint32_t i = 0; i < req.count; i++)
        dsc_mget_item_at(&req, i, &pm->items[i]);
    mget_acquire(pm);
}

/* RANGE: as MGET, each entry's answer the sub-chunk of its spans. Spans past a chunk's samples
 * (by the manifest) refuse the whole request, naming the entry. */
static void handle_range(dsc_server_t *srv, dsc_reply_t *reply, uint64_t id, const uint8_t *body,
                         size_t len) {
    dsc_range_req_t req;
    if (dsc_range_req_decode(body, len, &req) < 0) {
        answer_error(srv, reply, DSC_OP_RANGE, id, DSC_STATUS_BAD_REQUEST,
                     "malformed RANGE body (proto/PROTOCOL.md, RANGE: 1 to 1024 chunks, 1 to 4096 "
                     "sample ranges in all, each chunk's ranges non-empty, increasing, apart)");
        return;
    }
    mget_head_t head = {DSC_OP_RANGE, req.dataset, req.flags, req.count, req.version};
    shard_ref_t ref;
    pending_mget_t *pm = mget_begin(srv, reply, id, &head, &ref);
    if (pm == NULL)
        return;
    const dsc_manifest_t *m = dsc_dataset_manifest(ref.ds);
    pm->ritems = calloc(req.count, sizeof *pm->ritems);
    pm->spans = malloc(req.ranges * sizeof *pm->spans);
    pm->sub = calloc(req.count, sizeof *pm->sub);
    if (pm->ritems == NULL || pm->spans == NULL || pm->sub == NULL) {
        mget_free(pm);
        answer_error(srv, reply, DSC_OP_RANGE, id, DSC_STATUS_INTERNAL, "out of memory");
        return;
    }
    size_t pos = 0;
    uint32_t used = 0;
    for (uint32_t i = 0; i < req.count; i++) {
        dsc_range_item_t it;
        dsc_range_item_next(&req, &pos, &it); /* cannot fail: the decoder walked them */
        pm->items[i] = (dsc_mget_item_t){it.shard_id, it.chunk};
        for (uint32_t k = 0; k < it.range_count; k++)
            dsc_range_span_at(&it, k, &pm->spans[used + k]);
        pm->ritems[i] = (dsc_range_item_t){.shard_id = it.shard_id,
                                           .chunk = it.chunk,
                                           .range_count = it.range_count,
                                           .spans = &pm->spans[used]};
        used += it.range_count;
        if (it.shard_id >= m->shard_count || it.chunk >= m->shards[it.shard_id].chunks)
            continue; /* that entry's NOT_FOUND / BAD_REQUEST, as in MGET */
        const dsc_manifest_shard_t *meta = &m->shards[it.shard_id];
        uint64_t first = (uint64_t)it.chunk * meta->chunk_samples;
        uint64_t samples = meta->samples - first < meta->chunk_samples ? meta->samples - first
                                                                       : meta->chunk_samples;
        const dsc_sample_span_t *last = &pm->spans[used - 1];
        if ((uint64_t)last->first + last->count > samples) {
            char msg[256];
            snprintf(msg, sizeof msg,
                     "RANGE entry %u (shard %u chunk %u): samples %u..%llu asked, the chunk holds "
                     "%llu (0..%llu)",
                     i, it.shard_id, it.chunk, last->first,
                     (unsigned long long)last->first + last->count - 1, (unsigned long long)samples,
                     (unsigned long long)samples - 1);
            mget_free(pm);
            answer_error(srv, reply, DSC_OP_RANGE, id, DSC_STATUS_BAD_REQUEST, msg);
            return;
        }
    }
    mget_acquire(pm);
}

/* Groups a pending MGET / RANGE's entries into runs and acquires them; answers at once when
 * every run is a hit. */
static void mget_acquire(pending_mget_t *pm) {
    dsc_server_t *srv = pm->srv;
    dsc_reply_t *reply = pm->reply;
    uint64_t id = pm->request_id;
    uint32_t n = pm->count;
    const dsc_manifest_t *m = dsc_dataset_manifest(pm->ds);
    dsc_dataset_t *ds = pm->ds;
    uint8_t opcode = pm->opcode;
    mget_key_t *keys = malloc(n * sizeof *keys);
    if (keys == NULL) {
        mget_free(pm);
        answer_error(srv, reply, opcode, id, DSC_STATUS_INTERNAL, "out of memory");
        return;
    }
    /* Entries the dataset does not have are answered alone; the others sorted into runs. */
    uint32_t valid = 0;
    for (uint32_t i = 0; i < n; i++) {
        const dsc_mget_item_t *it = &pm->items[i];
        pm->entry_run[i] = MGET_NO_RUN;
        if (it->shard_id >= m->shard_count || dsc_dataset_shard_slot(ds, it->shard_id) == NULL)
            pm->status[i] = DSC_STATUS_NOT_FOUND;
        else if (it->chunk >= m->shards[it->shard_id].chunks)
            pm->status[i] = DSC_STATUS_BAD_REQUEST;
        else
            keys[valid++] = (mget_key_t){(uint64_t)it->shard_id << 32 | it->chunk, i};
    }
    qsort(keys, valid, sizeof *keys, mget_key_cmp);
    uint32_t runs = 0;
    for (uint32_t k = 0; k < valid; k++)
        if (k == 0 || keys[k].loc > keys[k - 1].loc + 1 ||
            keys[k].loc >> 32 != keys[k - 1].loc >> 32)
            runs++;
    pm->runs = runs ? calloc(runs, sizeof *pm->runs) : NULL;
    if (runs && pm->runs == NULL) {
        free(keys);
        mget_free(pm);
        answer_error(srv, reply, opcode, id, DSC_STATUS_INTERNAL, "out of memory");
        return;
    }
    pm->run_count = runs;
    mget_run_t *run = NULL;
    for (uint32_t k = 0; k < valid; k++) {
        uint32_t shard = (uint32_t)(keys[k].loc >> 32), chunk = (uint32_t)keys[k].loc;
        if (run == NULL || shard != run->shard_id || chunk > run->first + run->count) {
            run = run == NULL ? pm->runs : run + 1;
            run->pm = pm;
            run->shard_id = shard;
            run->first = chunk;
            run->count = 1;
            run->damaged = MGET_NO_RUN;
        } else if (chunk == run->first + run->count) {
            run->count++;
        }
        pm->entry_run[keys[k].index] = (uint32_t)(run - pm->runs);
    }
    free(keys);
    /* Acquire every run. Waiters are delivered through the mailbox, drained on this thread
     * after this function returns, so none can finish the request under our feet. */
    for (uint32_t r = 0; r < runs; r++) {
        mget_run_t *ru = &pm->runs[r];
        const dsc_manifest_shard_t *meta = &m->shards[ru->shard_id];
        ru->waiter.mailbox = reply->mailbox;
        ru->waiter.fn = on_mget_run_loaded;
        ru->waiter.first_chunk = ru->first;
        ru->waiter.chunk_count = ru->count;
        ru->waiter.hinter = reply->hinter;
        memcpy(ru->waiter.job, reply->job, sizeof ru->waiter.job);
        ru->waiter.job[sizeof ru->waiter.job - 1] = '\0';
        ru->waiter.conn = (uintptr_t)reply;
        int rc = dsc_catalog_acquire(srv->cat, dsc_dataset_shard_slot(ds, ru->shard_id),
                                     &ru->waiter, &ru->hold);
        if (rc == 1) {
            ru->held = 1;
        } else if (rc == 0) {
            /* As a GET's: the most this run's part of the answer can pin while it waits. */
            uint64_t chunk_raw = dsc_manifest_chunk_bound(m, meta->chunk_samples);
            uint64_t bound = (uint64_t)ru->count * (chunk_raw + chunk_raw / 255 + 16) +
                             (uint64_t)meta->chunks * DSC_CHUNK_ENTRY_SIZE + 2 * 4096;
            pm->reserve += bound < meta->bytes ? bound : meta->bytes;
            pm->waiting++;
        } else {
            ru->status = load_error_status(rc);
        }
    }
    if (pm->waiting == 0)
        mget_finish(pm);
    else
        reply->ops->wait_begin(reply, pm->reserve);
}

/* RDMA_GET: releases first, then a GET whose answer carries descriptors (the connection's
 * reply table has leases once RDMA_CONNECT succeeded: reply.h). */
static void handle_rdma_get(dsc_server_t *srv, dsc_reply_t *reply, uint64_t id, const uint8_t *body,
                            size_t len) {
    uint64_t start_ns = dsc_now_ns();
    dsc_rdma_get_req_t req;
    if (dsc_rdma_get_req_decode(body, len, &req) < 0) {
        answer_error(srv, reply, DSC_OP_RDMA_GET, id, DSC_STATUS_BAD_REQUEST,
                     "malformed RDMA_GET body");
        return;
    }
    if (reply->ops->leases_release == NULL || reply->ops->leases_release(reply, &req) < 0) {
        answer_error(srv, reply, DSC_OP_RDMA_GET, id, DSC_STATUS_BAD_REQUEST,
                     "RDMA_GET before a successful RDMA_CONNECT");
        return;
    }
    if (req.get.chunk_count == 0) { /* release-only */
        answer(srv, reply, DSC_OP_RDMA_GET, id, DSC_STATUS_OK, NULL, 0);
        return;
    }
    dsc_hold_t hold;
    shard_ref_t ref;
    int rc = chunks_acquire(srv, reply, DSC_OP_RDMA_GET, id, &req.get, start_ns, &hold, &ref);
    if (rc == 1)
        send_get(srv, reply, DSC_OP_RDMA_GET, id, ref.ds, req.get.shard_id, &hold,
                 req.get.first_chunk, req.get.chunk_count, start_ns);
    else if (rc < 0)
        answer_error(srv, reply, DSC_OP_RDMA_GET, id, ref.status, ref.message);
}

/* ---- other operations -------------------------------------------------------------------- */

static void handle_hello(dsc_server_t *srv, dsc_reply_t *reply, uint64_t id, const uint8_t *body,
                         size_t len) {
    dsc_hello_req_t req;
    if (dsc_hello_req_decode(body, len, &req) < 0) {
        answer_fatal(srv, reply, DSC_OP_HELLO, id, DSC_STATUS_BAD_REQUEST, "malformed HELLO body");
        return;
    }
    int version = dsc_hello_negotiate(req.min_version, req.max_version);
    if (version < 0) {
        char msg[128];
        snprintf(msg, sizeof msg, "no common protocol version: server speaks %d..%d",
                 DSC_PROTO_MIN_VERSION, DSC_PROTO_VERSION);
        answer_fatal(srv, reply, DSC_OP_HELLO, id, DSC_STATUS_VERSION_MISMATCH, msg);
        return;
    }
    dsc_hello_resp_t resp = {.version = (uint16_t)version,
                             .members_hash = dsc_cluster_hello_hash(dsc__server_cluster(srv)),
                             .max_body = DSC_SERVER_MAX_BODY, /* enforced exactly (tcp.c) */
                             .server_name = {srv->name, (uint16_t)strlen(srv->name)}};
    /* Only a clustered server (hash != 0) has a view a client should follow. */
    if (req.members_hash != 0 && resp.members_hash != 0 && req.members_hash != resp.members_hash &&
        !reply->view_logged) {
        reply->view_logged = 1;
        LOG_INFO("client %.*s has member view %016llx, this server %016llx: it should ask "
                 "MEMBERS",
                 (int)req.client_name.len, req.client_name.ptr,
                 (unsigned long long)req.members_hash, (unsigned long long)resp.members_hash);
    }
    const char *deny = NULL;
    uint32_t st =
        dsc__authz_hello(&srv->authz, &reply->auth, &req, (uint16_t)version, &resp, &deny);
    if (st != DSC_STATUS_OK) {
        answer_fatal(srv, reply, DSC_OP_HELLO, id, st, deny);
        return;
    }
    /* Granted only to a client that asked (older ones would refuse an unknown bit). */
    if ((req.features & DSC_FEATURE_RDMA) && srv->layer != NULL && srv->layer->offered(srv))
        resp.features |= DSC_FEATURE_RDMA;
    if (req.features & DSC_FEATURE_DATASET_VERSION)
        resp.features |= DSC_FEATURE_DATASET_VERSION;
    if (req.features & DSC_FEATURE_MGET)
        resp.features |= DSC_FEATURE_MGET;
    if (req.features & DSC_FEATURE_REPORT_HEDGE)
        resp.features |= DSC_FEATURE_REPORT_HEDGE;
    if (req.features & DSC_FEATURE_RANGE)
        resp.features |= DSC_FEATURE_RANGE;
    reply->hint_share = 0;
    if ((req.features & DSC_FEATURE_HINT_SHARE) && dsc_catalog_staging_on(srv->cat)) {
        resp.features |= DSC_FEATURE_HINT_SHARE;
        reply->hint_share = 1;
    }
    uint8_t out[256 + DSC_AUTH_NONCE_SIZE];
    int n = dsc_hello_resp_encode(&resp, out, sizeof out);
    if (n < 0) {
        answer_fatal(srv, reply, DSC_OP_HELLO, id, DSC_STATUS_INTERNAL, "cannot encode HELLO");
        return;
    }
    reply->hello = 1;
    answer(srv, reply, DSC_OP_HELLO, id, DSC_STATUS_OK, out, (size_t)n);
}

/* AUTH: the client's proof; answered with the server's, or UNAUTHORIZED and closed (one try
 * per nonce). */
static void handle_auth(dsc_server_t *srv, dsc_reply_t *reply, uint64_t id, const uint8_t *body,
                        size_t len) {
    uint8_t mac[DSC_AUTH_MAC_SIZE];
    const char *deny = NULL;
    uint32_t st = dsc__authz_auth(&srv->authz, &reply->auth, body, len, reply->peer, mac, &deny);
    if (st == DSC_STATUS_OK)
        answer(srv, reply, DSC_OP_AUTH, id, DSC_STATUS_OK, mac, sizeof mac);
    else if (st == DSC_STATUS_UNSUPPORTED)
        answer_error(srv, reply, DSC_OP_AUTH, id, st, deny);
    else
        answer_fatal(srv, reply, DSC_OP_AUTH, id, st, deny);
    dsc_auth_wipe(mac, sizeof mac);
}

static void handle_admin(dsc_server_t *srv, dsc_reply_t *reply, uint8_t opcode, uint64_t id,
                         const uint8_t *body, size_t len) {
    dsc_shard_req_t req;
    if (dsc_shard_req_decode(body, len, &req) < 0) {
        answer_error(srv, reply, opcode, id, DSC_STATUS_BAD_REQUEST, "malformed WARM/EVICT body");
        return;
    }
    shard_ref_t ref;
    if (shard_find(srv, reply, req.dataset, req.shard_id, 1, &ref) < 0) {
        answer_error(srv, reply, opcode, id, ref.status, ref.message);
        return;
    }
    int n = opcode == DSC_OP_WARM ? dsc_catalog_warm(srv->cat, ref.ds, req.shard_id)
                                  : dsc_catalog_evict(srv->cat, ref.ds, req.shard_id);
    uint8_t out[4];
    dsc_store_u32(out, (uint32_t)(n < 0 ? 0 : n));
    answer(srv, reply, opcode, id, DSC_STATUS_OK, out, sizeof out);
}

/* POLICY: pin, unpin, limit or prioritise a dataset's memory (admin; logged with who asked;
 * a new priority steers the evictions of later loads, none now). The dataset
 * need not be served yet (a --data-root may bring it later); one the credential may not read
 * is not found. */
static void handle_policy(dsc_server_t *srv, dsc_reply_t *reply, uint64_t id, const uint8_t *body,
                          size_t len) {
    dsc_policy_req_t req;
    if (dsc_policy_req_decode(body, len, &req) < 0) {
        answer_error(srv, reply, DSC_OP_POLICY, id, DSC_STATUS_BAD_REQUEST,
                     "malformed POLICY body");
        return;
    }
    if (!dsc__authz_may_read(&reply->auth, req.dataset.ptr, req.dataset.len)) {
        answer_error(srv, reply, DSC_OP_POLICY, id, DSC_STATUS_NOT_FOUND, "no such dataset");
        return;
    }
    int op = req.action == DSC_POLICY_OP_PIN        ? DSC_POLICY_PIN
             : req.action == DSC_POLICY_OP_UNPIN    ? DSC_POLICY_UNPIN
             : req.action == DSC_POLICY_OP_PRIORITY ? DSC_POLICY_PRIORITY
                                                    : DSC_POLICY_LIMIT;
    int n = dsc_catalog_set_policy(srv->cat, req.dataset.ptr, req.dataset.len, op, req.bytes);
    if (n < 0) {
        answer_error(srv, reply, DSC_OP_POLICY, id, dsc_err_to_status(n), dsc_strerror(n));
        return;
    }
    char what[48];
    if (op == DSC_POLICY_LIMIT && req.bytes > 0)
        snprintf(what, sizeof what, "limited to %llu bytes", (unsigned long long)req.bytes);
    else if (op == DSC_POLICY_PRIORITY)
        snprintf(what, sizeof what, "priority set to %llu", (unsigned long long)req.bytes);
    else
        snprintf(what, sizeof what, "%s",
                 op == DSC_POLICY_PIN     ? "pinned"
                 : op == DSC_POLICY_UNPIN ? "unpinned"
                                          : "limit removed");
    LOG_INFO("admin: dataset %.*s %s by %s from %s (%d shards %s)", (int)req.dataset.len,
             req.dataset.ptr, what,
             reply->auth.cred ? dsc_cred_name(reply->auth.cred) : "anonymous", reply->peer, n,
             op == DSC_POLICY_PIN ? "loading" : "evicted");
    uint8_t out[4];
    dsc_store_u32(out, (uint32_t)n);
    answer(srv, reply, DSC_OP_POLICY, id, DSC_STATUS_OK, out, sizeof out);
}

static void handle_manifest(dsc_server_t *srv, dsc_reply_t *reply, uint64_t id, const uint8_t *body,
                            size_t len) {
    dsc_str_t name;
    if (dsc_name_req_decode(body, len, &name) < 0 || name.len == 0) {
        answer_error(srv, reply, DSC_OP_MANIFEST, id, DSC_STATUS_BAD_REQUEST,
                     "MANIFEST needs a dataset name");
        return;
    }
    dsc_dataset_t *ds = dsc__authz_may_read(&reply->auth, name.ptr, name.len)
                            ? dsc_catalog_find(srv->cat, name.ptr, name.len)
                            : NULL;
    if (ds == NULL) {
        answer_error(srv, reply, DSC_OP_MANIFEST, id, DSC_STATUS_NOT_FOUND, "no such dataset");
        return;
    }
    size_t json_len;
    const char *json = dsc_dataset_manifest_json(ds, &json_len);
    if (json_len > DSC_FRAME_MAX_BODY)
        answer_error(srv, reply, DSC_OP_MANIFEST, id, DSC_STATUS_TOO_LARGE,
                     "manifest over the frame limit");
    else
        answer(srv, reply, DSC_OP_MANIFEST, id, DSC_STATUS_OK, json, json_len);
}

static void handle_stat(dsc_server_t *srv, dsc_reply_t *reply, uint64_t id, const uint8_t *body,
                        size_t len) {
    dsc_str_t name;
    if (dsc_name_req_decode(body, len, &name) < 0) {
        answer_error(srv, reply, DSC_OP_STAT, id, DSC_STATUS_BAD_REQUEST, "malformed STAT body");
        return;
    }
    /* An empty name is every dataset: filtered below to what the credential may see. */
    int not_found = name.len > 0 && !dsc__authz_may_read(&reply->auth, name.ptr, name.len);
    char *json = not_found ? NULL : dsc_catalog_stat_json(srv->cat, name.ptr, name.len, &not_found);
    dsc_cluster_t *cluster = dsc__server_cluster(srv);
    if (json && cluster) {
        char *full = dsc_cluster_stat_json(cluster, srv->cat, json);
        free(json);
        json = full;
    }
    if (not_found) {
        free(json);
        answer_error(srv, reply, DSC_OP_STAT, id, DSC_STATUS_NOT_FOUND, "no such dataset");
        return;
    }
    /* The jobs this server feeds (REPORT) and its connections; then what the credential may see. */
    json = dsc_jobs_stat_add(srv->jobs, json, dsc_now_s(), atomic_load(&srv->connections),
                             atomic_load(&srv->connections_total));
    answer_json(srv, reply, DSC_OP_STAT, id, dsc__authz_filter_json(&reply->auth, json));
}

/* REPORT: a loader's job, stall and rate go into the job table (STAT, /metrics). */
static void handle_report(dsc_server_t *srv, dsc_reply_t *reply, uint64_t id, const uint8_t *body,
                          size_t len) {
    dsc_report_req_t req;
    if (dsc_report_req_decode(body, len, &req) < 0) {
        answer_error(srv, reply, DSC_OP_REPORT, id, DSC_STATUS_BAD_REQUEST,
                     "malformed REPORT body");
        return;
    }
    /* Within the credential: a job on a dataset it may not read is refused as if absent. */
    if (!dsc__authz_may_read(&reply->auth, req.dataset.ptr, req.dataset.len)) {
        dsc_jobs_count_refused(srv->jobs);
        answer_error(srv, reply, DSC_OP_REPORT, id, DSC_STATUS_NOT_FOUND, "no such dataset");
        return;
    }
    dsc_jobs_report(srv->jobs, &req, reply->peer,
                    reply->auth.cred ? dsc_cred_name(reply->auth.cred) : NULL, dsc_now_s());
    /* The connection's answers are queued under this job from now on (fairq.h, --send-rate). */
    size_t jl = req.job.len < sizeof reply->job - 1 ? req.job.len : sizeof reply->job - 1;
    memcpy(reply->job, req.job.ptr, jl);
    reply->job[jl] = '\0';
    /* The answer tells the loader about this server's misses and backing store (its verdict
     * names the store when that is the limit). */
    dsc_catalog_totals_t tot;
    dsc_catalog_totals(srv->cat, &tot);
    dsc_store_info_t si;
    dsc_store_info(dsc_catalog_store(srv->cat), &si);
    /* A GET answered from a range read ahead for a hint found its bytes in RAM, but they were
     * read from the store for it all the same: it counts with the misses, else a store that keeps
     * just ahead of the GETs (20 ms per read at 1.7x the bound) hid behind a miss share near 0
     * and the verdict blamed the network. */
    uint64_t staged = tot.staging.hits < tot.hits ? tot.staging.hits : tot.hits;
    dsc_report_resp_t resp = {
        .backing_pool = (uint32_t)tot.backing.pool,
        .hits = tot.hits - staged,
        .misses = tot.misses + staged,
        .backing_bytes = tot.read_through_bytes + tot.bytes_loaded,
        .backing_busy_us = (uint64_t)(tot.backing.read_seconds * 1e6),
        .backing_wait_us = (uint64_t)(tot.backing.wait_seconds * 1e6),
        .backing_rate = tot.backing.rate,
        .store_capacity = si.capacity,
        .backing_latency_us =
            tot.backing.latency * 1e6 < 4e9 ? (uint32_t)(tot.backing.latency * 1e6) : UINT32_MAX,
        .backing_running = (uint32_t)tot.backing.running,
    };
    uint8_t body_out[DSC_REPORT_RESP_SIZE];
    int n = dsc_report_resp_encode(&resp, body_out, sizeof body_out);
    answer(srv, reply, DSC_OP_REPORT, id, DSC_STATUS_OK, body_out, n > 0 ? (size_t)n : 0);
}

/* HINT: chunk ranges a loader will ask for next, read ahead into the staging area (staging.h). */
static void handle_hint(dsc_server_t *srv, dsc_reply_t *reply, uint64_t id, const uint8_t *body,
                        size_t len) {
    if (!dsc_catalog_staging_on(srv->cat)) {
        answer_error(srv, reply, DSC_OP_HINT, id, DSC_STATUS_UNSUPPORTED,
                     "read-ahead is off on this server (--staging-memory 0)");
        return;
    }
    dsc_hint_req_t req;
    if (dsc_hint_req_decode(body, len, &req) < 0) {
        answer_error(srv, reply, DSC_OP_HINT, id, DSC_STATUS_BAD_REQUEST, "malformed HINT body");
        return;
    }
    /* Within the credential: a dataset it may not read is refused as if absent. */
    dsc_dataset_t *ds = dsc__authz_may_read(&reply->auth, req.dataset.ptr, req.dataset.len)
                            ? dsc_catalog_find(srv->cat, req.dataset.ptr, req.dataset.len)
                            : NULL;
    if (ds == NULL) {
        answer_error(srv, reply, DSC_OP_HINT, id, DSC_STATUS_NOT_FOUND, "no such dataset");
        return;
    }
    reply->hinter = req.hinter; /* this connection's GETs are that loader's */
    /* Read ahead within the part of staging that is this credential's job's (staging.h). */
    dsc_hint_resp_t r;
    dsc__staging_hint_request(srv->cat, ds, owner_of(reply), reply->job, req.hinter, &req, &r);
    uint8_t out[DSC_HINT_RESP_SHARE_SIZE];
    int n = reply->hint_share ? dsc_hint_resp_encode_share(&r, out, sizeof out)
                              : dsc_hint_resp_encode(r.accepted, out, sizeof out);
    answer(srv, reply, DSC_OP_HINT, id, DSC_STATUS_OK, out, n > 0 ? (size_t)n : 0);
}

void dsc__dispatch_frame(dsc_server_t *srv, dsc_reply_t *reply, const dsc_frame_header_t *h,
                         const uint8_t *body) {
    if (h->flags & DSC_FLAG_RESPONSE) {
        answer_fatal(srv, reply, h->opcode, h->request_id, DSC_STATUS_BAD_REQUEST,
                     "a response frame sent to the server");
        return;
    }
    if (!reply->hello && h->opcode != DSC_OP_HELLO) {
        answer_fatal(srv, reply, h->opcode, h->request_id, DSC_STATUS_BAD_REQUEST,
                     "HELLO must be the first request");
        return;
    }
    /* PROTOCOL.md: requests carry status 0 and empty bodies are empty. The frame boundary is
     * intact, so the connection stays usable. (A second HELLO starts over: see authz.c.) */
    if (h->status != DSC_STATUS_OK) {
        answer_error(srv, reply, h->opcode, h->request_id, DSC_STATUS_BAD_REQUEST,
                     "a request must carry status 0");
        return;
    }
    if ((h->opcode == DSC_OP_LIST || h->opcode == DSC_OP_MEMBERS) && h->body_len != 0) {
        answer_error(srv, reply, h->opcode, h->request_id, DSC_STATUS_BAD_REQUEST,
                     "this request takes an empty body");
        return;
    }
    const char *deny = NULL;
    int close_after = 0;
    uint32_t allowed =
        dsc__authz_check(&srv->authz, &reply->auth, h->opcode, reply->peer, &deny, &close_after);
    if (allowed != DSC_STATUS_OK) {
        if (close_after)
            answer_fatal(srv, reply, h->opcode, h->request_id, allowed, deny);
        else
            answer_error(srv, reply, h->opcode, h->request_id, allowed, deny);
        return;
    }
    switch (h->opcode) {
    case DSC_OP_HELLO:
        handle_hello(srv, reply, h->request_id, body, h->body_len);
        break;
    case DSC_OP_PING:
        answer(srv, reply, DSC_OP_PING, h->request_id, DSC_STATUS_OK, body, h->body_len);
        break;
    case DSC_OP_AUTH:
        handle_auth(srv, reply, h->request_id, body, h->body_len);
        break;
    case DSC_OP_LIST:
        answer_json(srv, reply, DSC_OP_LIST, h->request_id,
                    dsc__authz_filter_json(&reply->auth, dsc_catalog_list_json(srv->cat)));
        break;
    case DSC_OP_MANIFEST:
        handle_manifest(srv, reply, h->request_id, body, h->body_len);
        break;
    case DSC_OP_GET:
        handle_get(srv, reply, h->request_id, body, h->body_len);
        break;
    case DSC_OP_MGET:
        handle_mget(srv, reply, h->request_id, body, h->body_len);
        break;
    case DSC_OP_RANGE:
        handle_range(srv, reply, h->request_id, body, h->body_len);
        break;
    case DSC_OP_PEER_READ:
        handle_peer_read(srv, reply, h->request_id, body, h->body_len);
        break;
    case DSC_OP_STAT:
        handle_stat(srv, reply, h->request_id, body, h->body_len);
        break;
    case DSC_OP_REPORT:
        handle_report(srv, reply, h->request_id, body, h->body_len);
        break;
    case DSC_OP_HINT:
        handle_hint(srv, reply, h->request_id, body, h->body_len);
        break;
    case DSC_OP_WARM:
    case DSC_OP_EVICT:
        handle_admin(srv, reply, h->opcode, h->request_id, body, h->body_len);
        break;
    case DSC_OP_POLICY:
        handle_policy(srv, reply, h->request_id, body, h->body_len);
        break;
    case DSC_OP_RDMA_CONNECT:
        if (srv->layer != NULL)
            srv->layer->connect(srv, reply, h->request_id, body, h->body_len);
        else
            answer_error(srv, reply, DSC_OP_RDMA_CONNECT, h->request_id, DSC_STATUS_UNSUPPORTED,
                         "no RDMA");
        break;
    case DSC_OP_RDMA_GET:
        handle_rdma_get(srv, reply, h->request_id, body, h->body_len);
        break;
    case DSC_OP_MEMBERS: {
        dsc_cluster_t *cluster = dsc__server_cluster(srv);
        if (cluster == NULL)
            answer_error(srv, reply, DSC_OP_MEMBERS, h->request_id, DSC_STATUS_UNSUPPORTED,
                         "this server has no membership");
        else
            answer_json(srv, reply, DSC_OP_MEMBERS, h->request_id,
                        dsc_cluster_members_json(cluster));
        break;
    }
    default:
        answer_error(srv, reply, h->opcode, h->request_id, DSC_STATUS_UNSUPPORTED,
                     dsc_opcode_known(h->opcode) ? "operation not supported by this server"
                                                 : "unknown operation");
        break;
    }
}
