/* Data source "tcp": chunks from a dscached server by pipelined GET requests on a blocking TCP
 * connection (conn.c), received straight into pooled buffers; the manifest by a MANIFEST call;
 * batches of chunks of any shards by MGET (multiget.c). */
#include "conn.h"
#include "hint.h"
#include "mget.h"
#include "multiget.h"
#include "placement.h"
#include "range.h"
#include "source.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tcp_endpoint {
    const dsc_source_env_t *env;
    char addr[DSC_MEMBER_MAX];
} tcp_endpoint_t;

typedef struct tcp_conn {
    const tcp_endpoint_t *ep;
    dsc_conn_t *conn;
    dsc_report_resp_t answer; /* the latest REPORT answer's figures (tcp_report_answer) */
    int answer_new;
    int hint_refused;      /* a HINT was answered UNSUPPORTED (tcp_hint_refused) */
    uint64_t hint_trimmed; /* ranges the server trimmed from HINTs beyond this job's share */
    int hint_trim_said;    /* the trimming was logged (once per connection) */
} tcp_conn_t;

/* A HINT's OK answer: the long one (DSC_FEATURE_HINT_SHARE) says how many ranges the server
 * trimmed beyond this credential's and job's part of its staging area. Those are read when
 * asked for, as without read-ahead: said once per connection at WARN. */
static void hint_answer(tcp_conn_t *c, const uint8_t *body, size_t len) {
    dsc_hint_resp_t r;
    if (dsc_hint_resp_decode_share(body, len, &r) < 0 || !r.has_share || r.trimmed == 0)
        return;
    c->hint_trimmed += r.trimmed;
    if (c->hint_trim_said)
        return;
    c->hint_trim_said = 1;
    DSC_LOG(c->ep->env->log, DSC_LOG_WARN,
            "server %s: read-ahead trimmed %u of %u hinted ranges: this job's part of the "
            "server's staging area is %llu bytes (%llu held), shared with other credentials' "
            "and jobs' hints; the rest is read when asked for (said once per connection)",
            c->ep->addr, r.trimmed, r.trimmed + r.accepted, (unsigned long long)r.share_bytes,
            (unsigned long long)r.held_bytes);
}

static int tcp_endpoint_open(const dsc_source_env_t *env, const char *addr, void **out) {
    tcp_endpoint_t *ep = calloc(1, sizeof *ep);
    if (ep == NULL)
        return DSC_ENOMEM;
    ep->env = env;
    snprintf(ep->addr, sizeof ep->addr, "%s", addr);
    *out = ep;
    return 0;
}

static void tcp_endpoint_close(void *endpoint) {
    free(endpoint);
}

static int tcp_manifest(void *endpoint, uint64_t view_hash, dsc_manifest_t **out,
                        uint64_t *hello_hash) {
    const tcp_endpoint_t *ep = endpoint;
    const dsc_source_env_t *env = ep->env;
    *hello_hash = 0;
    uint8_t req[DSC_MAX_NAME + 8];
    int req_len = dsc_name_req_encode(env->dataset, req, sizeof req);
    if (req_len < 0)
        return req_len;
    dsc_conn_t *conn = NULL;
    int r = dsc_conn_open_addr_auth(ep->addr, env->timeout_ms, view_hash, env->cred, &conn);
    if (r < 0) {
        DSC_LOG(env->log, DSC_LOG_WARN, "server %s: %s", ep->addr, dsc_strerror(r));
        return r;
    }
    *hello_hash = dsc_conn_info(conn)->members_hash;
    uint8_t *body = NULL;
    size_t len = 0;
    r = dsc_conn_call(conn, DSC_OP_MANIFEST, req, (size_t)req_len, &body, &len);
    if (r == 0) {
        r = dsc_manifest_parse((const char *)body, len, out);
        if (r < 0)
            DSC_LOG(env->log, DSC_LOG_ERROR, "server %s: manifest of %s: %s", ep->addr,
                    env->dataset, dsc_strerror(r));
    } else {
        DSC_LOG(env->log, r == DSC_ENOTFOUND ? DSC_LOG_ERROR : DSC_LOG_WARN,
                "server %s: MANIFEST %s: %s%s%s", ep->addr, env->dataset, dsc_strerror(r),
                dsc_conn_last_error(conn)[0] ? ": " : "", dsc_conn_last_error(conn));
    }
    free(body);
    dsc_conn_close(conn);
    return r;
}

static int tcp_open(void *endpoint, uint64_t view_hash, void **out, uint64_t *hello_hash) {
    const tcp_endpoint_t *ep = endpoint;
    tcp_conn_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        return DSC_ENOMEM;
    c->ep = ep;
    int rc =
        dsc_conn_open_addr_auth(ep->addr, ep->env->timeout_ms, view_hash, ep->env->cred, &c->conn);
    if (rc < 0) {
        free(c);
        return rc;
    }
    *hello_hash = dsc_conn_info(c->conn)->members_hash;
    *out = c;
    return 0;
}

/* Chunks of any shards one MGET names on this connection: what the server's max_body holds, at
 * most DSC_SOURCE_MAX_CHUNKS; 0 without the MGET feature (GETs of runs only). */
static uint32_t tcp_scatter_max(void *conn) {
    tcp_conn_t *c = conn;
    const dsc_conn_info_t *info = dsc_conn_info(c->conn);
    if (!(info->features & DSC_FEATURE_MGET))
        return 0;
    uint32_t head = DSC_MGET_REQ_HEAD(DSC_GET_FLAG_VERSION, DSC_MAX_NAME - 1);
    uint32_t room = info->max_body > head ? (info->max_body - head) / DSC_MGET_ITEM_SIZE : 0;
    if (room < 2)
        return 0;
    return room < DSC_SOURCE_MAX_CHUNKS ? room : DSC_SOURCE_MAX_CHUNKS;
}

/* A scattered request (req->scattered): one MGET naming its chunks in order. */
static int mget_submit(tcp_conn_t *c, const dsc_source_req_t *req, uint32_t flags,
                       uint64_t version) {
    const char *dataset = c->ep->env->dataset;
    dsc_mget_item_t items[DSC_SOURCE_MAX_CHUNKS];
    for (uint32_t i = 0; i < req->count; i++)
        items[i] = (dsc_mget_item_t){req->chunks[i]->shard, req->chunks[i]->shard_chunk};
    dsc_mget_req_t mreq = {.dataset = {dataset, (uint16_t)strlen(dataset)},
                           .flags = flags,
                           .version = version,
                           .count = req->count,
                           .items = items};
    uint8_t body[DSC_MGET_REQ_HEAD(DSC_GET_FLAG_VERSION, DSC_MAX_NAME - 1) +
                 DSC_SOURCE_MAX_CHUNKS * DSC_MGET_ITEM_SIZE];
    int len = dsc_mget_req_encode(&mreq, body, sizeof body);
    return len < 0 ? len : dsc_conn_send(c->conn, DSC_OP_MGET, req->id, body, (size_t)len);
}

/* Whether RANGE may be sent on this connection: granted in HELLO, and room for the largest
 * request in the server's max_body. */
static int tcp_range_ok(void *conn) {
    tcp_conn_t *c = conn;
    const dsc_conn_info_t *info = dsc_conn_info(c->conn);
    return (info->features & DSC_FEATURE_RANGE) && info->max_body >= DSC_RANGE_MAX_REQ_BODY;
}

/* A ranged request (req->ranged): one RANGE naming each chunk's runs of sel (fetch.c keeps the
 * runs within DSC_RANGE_MAX_RANGES). */
static int range_submit(tcp_conn_t *c, const dsc_source_req_t *req, uint32_t flags,
                        uint64_t version) {
    const char *dataset = c->ep->env->dataset;
    static _Thread_local dsc_sample_span_t spans[DSC_RANGE_MAX_RANGES];
    static _Thread_local uint8_t body[DSC_RANGE_MAX_REQ_BODY];
    dsc_range_item_t items[DSC_SOURCE_MAX_CHUNKS];
    uint32_t used = 0;
    for (uint32_t i = 0; i < req->count; i++) {
        const dsc_chunk_ent_t *ent = req->chunks[i];
        items[i] = (dsc_range_item_t){
            .shard_id = ent->shard, .chunk = ent->shard_chunk, .spans = &spans[used]};
        for (uint32_t k = 0; k < ent->samples; k++) {
            if (k > 0 && ent->sel[k] == ent->sel[k - 1] + 1) {
                spans[used - 1].count++;
                continue;
            }
            if (used == DSC_RANGE_MAX_RANGES)
                return DSC_EINVAL; /* fetch.c bounds the spans: never */
            spans[used++] = (dsc_sample_span_t){ent->sel[k], 1};
            items[i].range_count++;
        }
    }
    dsc_range_req_t rreq = {.dataset = {dataset, (uint16_t)strlen(dataset)},
                            .flags = flags,
                            .version = version,
                            .count = req->count,
                            .items = items};
    int len = dsc_range_req_encode(&rreq, body, sizeof body);
    return len < 0 ? len : dsc_conn_send(c->conn, DSC_OP_RANGE, req->id, body, (size_t)len);
}

static int tcp_submit(void *conn, dsc_source_req_t *req) {
    tcp_conn_t *c = conn;
    const char *dataset = c->ep->env->dataset;
    dsc_get_req_t get = {
        .dataset = {dataset, (uint16_t)strlen(dataset)},
        .shard_id = req->chunks[0]->shard,
        .first_chunk = req->chunks[0]->shard_chunk,
        .chunk_count = req->count,
    };
    /* A server that checks versions answers CHANGED (DSC_ECHANGED) once the dataset it serves is
     * no longer the one whose manifest this loader read: never chunks of another version. */
    const dsc_manifest_t *m = c->ep->env->manifest;
    if (m != NULL && m->version != 0 &&
        (dsc_conn_info(c->conn)->features & DSC_FEATURE_DATASET_VERSION)) {
        get.flags = DSC_GET_FLAG_VERSION;
        get.version = m->version;
    }
    if (req->ranged)
        return range_submit(c, req, get.flags, get.version);
    if (req->scattered)
        return mget_submit(c, req, get.flags, get.version);
    uint8_t body[DSC_MAX_NAME + 32];
    int len = dsc_get_req_encode(&get, body, sizeof body);
    return len < 0 ? len : dsc_conn_send(c->conn, DSC_OP_GET, req->id, body, (size_t)len);
}

/* Reads and discards n body bytes, keeping the first msg_cap - 1 of them (printable) in msg. */
static int drain(dsc_conn_t *conn, uint64_t n, char *msg, size_t msg_cap) {
    uint8_t buf[1024];
    size_t kept = 0;
    while (n > 0) {
        size_t take = n < sizeof buf ? (size_t)n : sizeof buf;
        int rc = dsc_conn_recv_body(conn, buf, take);
        if (rc < 0)
            return rc;
        if (msg != NULL && kept + 1 < msg_cap) {
            size_t k = take < msg_cap - 1 - kept ? take : msg_cap - 1 - kept;
            memcpy(msg + kept, buf, k);
            kept += k;
        }
        n -= take;
    }
    if (msg != NULL && msg_cap > 0) {
        msg[kept] = '\0';
        for (size_t i = 0; i < kept; i++)
            if (msg[i] < 0x20)
                msg[i] = ' ';
    }
    return 0;
}

/* Receives the stored bytes of one chunk of a GET or MGET answer into a pooled buffer, after
 * checking its entry e against the manifest. */
static int recv_chunk(tcp_conn_t *c, dsc_chunk_ent_t *ent, const dsc_chunk_entry_t *e,
                      uint64_t *wire) {
    const dsc_source_env_t *env = c->ep->env;
    if (e->sample_count != ent->samples || !dsc__chunk_raw_len_ok(ent, e->raw_len)) {
        DSC_LOG(env->log, DSC_LOG_ERROR,
                "server %s: shard %u chunk %u holds %u samples "
                "(%u bytes), the manifest says %u",
                c->ep->addr, ent->shard, ent->shard_chunk, e->sample_count, e->raw_len,
                ent->samples);
        return DSC_EPROTO;
    }
    ent->stored = dsc__bufpool_get(env->pool, e->stored_len, &ent->stored_cap);
    if (ent->stored == NULL)
        return DSC_ENOMEM;
    int rc = dsc_conn_recv_body(c->conn, ent->stored, e->stored_len);
    if (rc < 0)
        return rc;
    ent->entry = *e;
    *wire += e->stored_len;
    return 0;
}

/* The OK answer to a scattered request (an MGET, header h): each chunk's record, then the stored
 * bytes of the OK ones in request order. A chunk answered with an error fails the whole request
 * with that error (*conn_bad 0) once the answer is read: its chunks then fail over together, as
 * a merged GET's do (the others' bytes go back with them). Returns as tcp_complete. */
static int mget_complete(tcp_conn_t *c, dsc_source_req_t *req, const dsc_frame_header_t *h,
                         int *conn_bad, uint64_t *wire) {
    const dsc_source_env_t *env = c->ep->env;
    uint8_t prefix[DSC_MGET_RESP_PREFIX(DSC_SOURCE_MAX_CHUNKS)];
    if (h->body_len < 8)
        return DSC_EPROTO;
    int rc = dsc_conn_recv_body(c->conn, prefix, 8);
    if (rc < 0)
        return rc;
    int psize = dsc_mget_resp_prefix_size(prefix, 8);
    if (psize < 0 || (uint32_t)psize != DSC_MGET_RESP_PREFIX(req->count) ||
        (uint32_t)psize > h->body_len)
        return DSC_EPROTO;
    rc = dsc_conn_recv_body(c->conn, prefix + 8, (size_t)psize - 8);
    if (rc < 0)
        return rc;
    dsc_mget_resp_t resp;
    if (dsc_mget_resp_prefix_decode(prefix, (size_t)psize, h->body_len, &resp) < 0)
        return DSC_EPROTO;
    int failed = 0;
    for (uint32_t i = 0; i < req->count; i++) {
        dsc_chunk_ent_t *ent = req->chunks[i];
        dsc_chunk_entry_t e;
        int64_t st = dsc_mget_resp_record(&resp, i, &e);
        if (st == DSC_STATUS_OK) {
            rc = recv_chunk(c, ent, &e, wire);
            if (rc < 0)
                return rc;
            continue;
        }
        int err = dsc_status_to_err((uint32_t)st);
        DSC_LOG(env->log,
                err == DSC_EUNAVAIL || err == DSC_ECORRUPT || err == DSC_ECHANGED ? DSC_LOG_WARN
                                                                                  : DSC_LOG_ERROR,
                "server %s: %s %s shard %u chunk %u (%u of %u): %s", c->ep->addr,
                req->ranged ? "RANGE" : "MGET", env->dataset, ent->shard, ent->shard_chunk, i + 1,
                req->count, dsc_status_name((uint32_t)st));
        /* A damaged chunk's error wins over its run's UNAVAILABLE siblings (read through with
         * it): the request then goes where intact copies are (a replica, the fallback files). */
        if (failed == 0 || (failed == DSC_EUNAVAIL && err != DSC_EUNAVAIL))
            failed = err;
    }
    *conn_bad = 0;
    return failed;
}

/* Receives the next response (responses may come in any order: a RAM hit overtakes a load)
 * into its chunks' buffers. */
static int tcp_complete(void *conn, dsc_source_req_t *out, uint32_t count, uint32_t *index,
                        int *conn_bad, uint64_t *wire) {
    tcp_conn_t *c = conn;
    const dsc_source_env_t *env = c->ep->env;
    const char *addr = c->ep->addr;
    dsc_frame_header_t h;
    *conn_bad = 1;
    int rc = dsc_conn_recv_header(c->conn, &h);
    if (rc < 0)
        return rc;
    /* Answers to REPORTs (tcp_report) are dropped: a server without REPORT answers UNSUPPORTED,
     * which only costs the report. */
    while ((h.request_id & DSC_SOURCE_REPORT_ID) &&
           (h.opcode == DSC_OP_REPORT || h.opcode == DSC_OP_HINT) &&
           (h.flags & DSC_FLAG_RESPONSE)) {
        /* A HINT's answer only matters when it says the server has no read-ahead. */
        if (h.opcode == DSC_OP_HINT && h.status == DSC_STATUS_UNSUPPORTED)
            c->hint_refused = 1;
        /* An OK answer may carry the server's figures (dsc_report_resp_t): kept for the
         * verdict; anything else in it is dropped. */
        uint8_t ab[256];
        if (h.opcode == DSC_OP_REPORT && h.status == DSC_STATUS_OK &&
            h.body_len >= DSC_REPORT_RESP_SIZE && h.body_len <= sizeof ab) {
            rc = dsc_conn_recv_body(c->conn, ab, h.body_len);
            if (rc == 0 && dsc_report_resp_decode(ab, h.body_len, &c->answer) == 1)
                c->answer_new = 1;
        } else if (h.opcode == DSC_OP_HINT && h.status == DSC_STATUS_OK &&
                   h.body_len <= sizeof ab) {
            rc = dsc_conn_recv_body(c->conn, ab, h.body_len);
            if (rc == 0)
                hint_answer(c, ab, h.body_len);
        } else {
            rc = drain(c->conn, h.body_len, NULL, 0);
        }
        if (rc == 0)
            rc = dsc_conn_recv_header(c->conn, &h);
        if (rc < 0)
            return rc;
    }
    double answer_at = dsc_now_s();
    dsc_source_req_t *req = NULL;
    for (uint32_t i = 0; i < count; i++)
        if (out[i].id == h.request_id) {
            req = &out[i];
            *index = i;
        }
    if (req != NULL)
        req->answer_at = answer_at;
    uint32_t want = req == NULL      ? DSC_OP_GET
                    : req->ranged    ? DSC_OP_RANGE
                    : req->scattered ? DSC_OP_MGET
                                     : DSC_OP_GET;
    if (req == NULL || h.opcode != want || !(h.flags & DSC_FLAG_RESPONSE)) {
        DSC_LOG(env->log, DSC_LOG_ERROR,
                "server %s: response to no outstanding request "
                "(id %llu, opcode %u)",
                addr, (unsigned long long)h.request_id, h.opcode);
        return DSC_EPROTO;
    }
    if (!dsc__req_claim(req)) {
        /* Abandoned: its chunks were re-issued to another server (hedge.c) and may be gone; the
         * late answer is read and dropped, its bytes counted by the caller as wasted. */
        rc = drain(c->conn, h.body_len, NULL, 0);
        if (rc < 0)
            return rc;
        *wire += h.body_len;
        *conn_bad = 0;
        return 0;
    }
    if (h.status != DSC_STATUS_OK) {
        char msg[256];
        rc = drain(c->conn, h.body_len, msg, sizeof msg);
        if (rc < 0)
            return rc;
        *conn_bad = 0;
        rc = dsc_status_to_err(h.status);
        /* Unavailable, corrupt or another dataset version there: the chunks fail over (an error
         * if nothing is left). */
        DSC_LOG(env->log,
                rc == DSC_EUNAVAIL || rc == DSC_ECORRUPT || rc == DSC_ECHANGED ? DSC_LOG_WARN
                                                                               : DSC_LOG_ERROR,
                "server %s: %s %s shard %u chunk %u (of %u): %s: %s", addr, dsc_opcode_name(want),
                env->dataset, req->chunks[0]->shard, req->chunks[0]->shard_chunk, req->count,
                dsc_status_name(h.status), msg);
        return rc;
    }
    if (req->scattered || req->ranged) /* one answer layout (proto/mget.h) */
        return mget_complete(c, req, &h, conn_bad, wire);
    uint8_t prefix[DSC_GET_RESP_PREFIX(DSC_SOURCE_MAX_MERGE)];
    if (h.body_len < 8)
        return DSC_EPROTO;
    rc = dsc_conn_recv_body(c->conn, prefix, 8);
    if (rc < 0)
        return rc;
    int psize = dsc_get_resp_prefix_size(prefix, 8);
    if (psize < 0 || (uint32_t)psize != DSC_GET_RESP_PREFIX(req->count) ||
        (uint32_t)psize > h.body_len)
        return DSC_EPROTO;
    rc = dsc_conn_recv_body(c->conn, prefix + 8, (size_t)psize - 8);
    if (rc < 0)
        return rc;
    dsc_get_resp_t resp;
    rc = dsc_get_resp_prefix_decode(prefix, (size_t)psize, h.body_len, &resp);
    if (rc < 0)
        return DSC_EPROTO;
    dsc_get_resp_iter_t it;
    dsc_get_resp_iter_init(&it, &resp);
    for (uint32_t i = 0; i < req->count; i++) {
        dsc_chunk_ent_t *ent = req->chunks[i];
        dsc_chunk_entry_t e;
        const uint8_t *unused;
        if (dsc_get_resp_iter_next(&it, &e, &unused) != 1)
            return DSC_EPROTO;
        rc = recv_chunk(c, ent, &e, wire);
        if (rc < 0)
            return rc;
    }
    *conn_bad = 0;
    return 0;
}

/* Stored bytes of a batched fetch: from the loader's buffer pool, the capacity kept per chunk. */
typedef struct tcp_mget_arg {
    dsc_bufpool_t *pool;
    dsc_chunk_ent_t **chunks;
} tcp_mget_arg_t;

static void *tcp_mget_alloc(void *arg, uint32_t index, size_t len) {
    tcp_mget_arg_t *a = arg;
    dsc_chunk_ent_t *ent = a->chunks[index];
    ent->stored = dsc__bufpool_get(a->pool, len, &ent->stored_cap);
    return ent->stored;
}

/* Chunks of any shards by MGET (the GET fallback on a server without it: multiget.h), each
 * checked against its stored checksum and against the manifest as tcp_complete checks it. */
static int tcp_mget(void *conn, dsc_chunk_ent_t **chunks, uint32_t count, int *status,
                    int *conn_bad, uint64_t *wire) {
    tcp_conn_t *c = conn;
    const dsc_source_env_t *env = c->ep->env;
    *conn_bad = 0;
    dsc_mget_chunk_t small[64];
    dsc_mget_chunk_t *mc = count <= 64 ? small : malloc(count * sizeof *mc);
    if (mc == NULL)
        return DSC_ENOMEM;
    for (uint32_t i = 0; i < count; i++) {
        mc[i].shard = chunks[i]->shard;
        mc[i].chunk = chunks[i]->shard_chunk;
    }
    tcp_mget_arg_t arg = {env->pool, chunks};
    uint64_t version = env->manifest != NULL ? env->manifest->version : 0;
    int rc = dsc__conn_mget(c->conn, env->dataset, version, mc, count, tcp_mget_alloc, &arg, wire);
    int ok = 0;
    for (uint32_t i = 0; i < count; i++) {
        dsc_chunk_ent_t *ent = chunks[i];
        status[i] = mc[i].status;
        if (status[i] == 0) {
            ent->entry = mc[i].entry;
            if (ent->entry.sample_count != ent->samples ||
                !dsc__chunk_raw_len_ok(ent, ent->entry.raw_len)) {
                DSC_LOG(env->log, DSC_LOG_ERROR,
                        "server %s: shard %u chunk %u holds %u samples (%u bytes), the manifest "
                        "says %u",
                        c->ep->addr, ent->shard, ent->shard_chunk, ent->entry.sample_count,
                        ent->entry.raw_len, ent->samples);
                status[i] = DSC_EPROTO;
            }
        } else if (rc >= 0 && status[i] != DSC_ENOMEM) {
            /* Unavailable, corrupt or gone there: the caller may ask another peer. */
            DSC_LOG(env->log, DSC_LOG_WARN, "server %s: MGET %s shard %u chunk %u: %s", c->ep->addr,
                    env->dataset, ent->shard, ent->shard_chunk, dsc_strerror(status[i]));
        }
        ok += status[i] == 0;
    }
    if (mc != small)
        free(mc);
    if (rc < 0) {
        /* The dataset itself (not found, changed) leaves the connection usable. */
        *conn_bad = rc != DSC_ENOTFOUND && rc != DSC_ECHANGED && rc != DSC_EUNAUTH;
        DSC_LOG(env->log, DSC_LOG_WARN, "server %s: MGET %s: %s%s%s", c->ep->addr, env->dataset,
                dsc_strerror(rc), dsc_conn_last_error(c->conn)[0] ? ": " : "",
                dsc_conn_last_error(c->conn));
        return rc;
    }
    return ok;
}

/* A REPORT answer consumed while idle: its figures are kept as in tcp_complete. */
static void keep_answer(void *arg, const dsc_frame_header_t *h, const uint8_t *body) {
    tcp_conn_t *c = arg;
    if (h->opcode == DSC_OP_HINT) {
        if (h->status == DSC_STATUS_UNSUPPORTED)
            c->hint_refused = 1;
        else if (h->status == DSC_STATUS_OK)
            hint_answer(c, body, h->body_len);
        return;
    }
    if (h->status == DSC_STATUS_OK && dsc_report_resp_decode(body, h->body_len, &c->answer) == 1)
        c->answer_new = 1;
}

static int tcp_idle_closed(void *conn) {
    tcp_conn_t *c = conn;
    /* Nothing is outstanding: the answers of REPORTs (and HINTs) sent while idle are dropped here;
     * any other byte, EOF or an error means the server gave up on it. */
    return dsc_conn_idle_check_cb(c->conn, DSC_SOURCE_REPORT_ID, DSC_OP_REPORT, keep_answer, c);
}

static void tcp_wake(void *conn) {
    tcp_conn_t *c = conn;
    dsc_conn_shutdown(c->conn);
}

static void tcp_close(void *conn) {
    tcp_conn_t *c = conn;
    if (c == NULL)
        return;
    dsc_conn_close(c->conn);
    free(c);
}

static int tcp_report_answer(void *conn, dsc_report_resp_t *out) {
    tcp_conn_t *c = conn;
    if (!c->answer_new)
        return 0;
    *out = c->answer;
    c->answer_new = 0;
    return 1;
}

static int tcp_report(void *conn, uint64_t id, const uint8_t *body, size_t len) {
    tcp_conn_t *c = conn;
    /* An older server refuses the straggler trailer (trailing bytes): sent to those granting it. */
    if (!(dsc_conn_info(c->conn)->features & DSC_FEATURE_REPORT_HEDGE))
        len = dsc_report_req_strip_hedge(len);
    return dsc_conn_send(c->conn, DSC_OP_REPORT, id, body, len);
}

static int tcp_hint(void *conn, uint64_t id, const uint8_t *body, size_t len) {
    tcp_conn_t *c = conn;
    return dsc_conn_send(c->conn, DSC_OP_HINT, id, body, len);
}

static int tcp_hint_refused(void *conn) {
    tcp_conn_t *c = conn;
    int refused = c->hint_refused;
    c->hint_refused = 0;
    return refused;
}

static int tcp_abandon_ok(void *conn) {
    (void)conn;
    return 1; /* tcp_complete claims every answer */
}

const dsc_source_ops_t dsc__source_tcp = {
    .name = "tcp",
    .max_outstanding = 64,
    .peer_bounded = 1,
    .abandon_ok = tcp_abandon_ok,
    .endpoint_open = tcp_endpoint_open,
    .endpoint_close = tcp_endpoint_close,
    .manifest = tcp_manifest,
    .open = tcp_open,
    .submit = tcp_submit,
    .complete = tcp_complete,
    .mget = tcp_mget,
    .range_ok = tcp_range_ok,
    .scatter_max = tcp_scatter_max,
    .report = tcp_report,
    .report_answer = tcp_report_answer,
    .hint = tcp_hint,
    .hint_refused = tcp_hint_refused,
    .idle_closed = tcp_idle_closed,
    .wake = tcp_wake,
    .close = tcp_close,
};
