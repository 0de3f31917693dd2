/* Batched chunk fetch (multiget.h): MGET requests on a blocking connection, answers received
 * straight into the caller's buffers and checked against their stored checksums; pipelined
 * single-chunk GETs on a server without MGET. */
#include "multiget.h"
#include "mget.h"
#include "source.h"

#include <stdlib.h>
#include <string.h>

#define PENDING 1     /* a chunk's status until it is answered (never an outcome) */
#define GET_WINDOW 64 /* GETs outstanding at once in the fallback (the TCP source's bound) */

typedef struct mget_call {
    dsc_conn_t *conn;
    dsc_str_t dataset;
    uint32_t flags; /* DSC_GET_FLAG_VERSION when the version is checked */
    uint64_t version;
    dsc_mget_chunk_t *chunks;
    dsc_mget_alloc_fn alloc;
    void *arg;
    uint64_t wire;
    uint64_t next_id;
    uint32_t max_batch; /* entries per MGET within the server's max_body */
} mget_call_t;

static int skip(dsc_conn_t *conn, uint64_t n) {
    uint8_t buf[4096];
    while (n > 0) {
        size_t take = n < sizeof buf ? (size_t)n : sizeof buf;
        int rc = dsc_conn_recv_body(conn, buf, take);
        if (rc < 0)
            return rc;
        n -= take;
    }
    return 0;
}

/* The next answer's header, past the answers of REPORTs and HINTs (advisory, dropped). */
static int next_header(dsc_conn_t *conn, dsc_frame_header_t *h) {
    for (;;) {
        int rc = dsc_conn_recv_header(conn, h);
        if (rc < 0)
            return rc;
        if (!((h->request_id & DSC_SOURCE_REPORT_ID) &&
              (h->opcode == DSC_OP_REPORT || h->opcode == DSC_OP_HINT)))
            return 0;
        rc = skip(conn, h->body_len);
        if (rc < 0)
            return rc;
    }
}

/* An error answer: keeps its message as the connection's last error and sets *err to its code.
 * Returns 0, or a receive error (the connection is lost). */
static int error_answer(dsc_conn_t *conn, const dsc_frame_header_t *h, int *err) {
    uint8_t msg[DSC_ERROR_MAX_MESSAGE];
    if (h->body_len > sizeof msg)
        return DSC_EPROTO;
    int rc = dsc_conn_recv_body(conn, msg, h->body_len);
    if (rc < 0)
        return rc;
    dsc_conn_set_last_error(conn, msg, h->body_len);
    *err = dsc_status_to_err(h->status);
    return 0;
}

/* Receives chunk i's stored bytes (entry e) into a buffer from alloc and checks them. */
static int recv_chunk(mget_call_t *call, uint32_t i, const dsc_chunk_entry_t *e) {
    dsc_mget_chunk_t *c = &call->chunks[i];
    uint8_t *buf = call->alloc(call->arg, i, e->stored_len);
    if (buf == NULL) {
        c->status = DSC_ENOMEM;
        return skip(call->conn, e->stored_len);
    }
    c->stored = buf;
    int rc = dsc_conn_recv_body(call->conn, buf, e->stored_len);
    if (rc < 0)
        return rc;
    call->wire += e->stored_len;
    c->entry = *e;
    c->status = dsc_chunk_verify(e, buf); /* 0 or DSC_ECHUNKSUM */
    return 0;
}

/* The fallback: chunks [start, start + n) by GETs of one chunk, GET_WINDOW at a time. */
static int get_batch(mget_call_t *call, uint32_t start, uint32_t n) {
    for (uint32_t w = start; w < start + n; w += GET_WINDOW) {
        uint32_t k = start + n - w < GET_WINDOW ? start + n - w : GET_WINDOW;
        uint64_t base = call->next_id;
        call->next_id += k;
        uint32_t sent = 0;
        for (uint32_t j = 0; j < k; j++) {
            const dsc_mget_chunk_t *c = &call->chunks[w + j];
            dsc_get_req_t get = {.dataset = call->dataset,
                                 .shard_id = c->shard,
                                 .first_chunk = c->chunk,
                                 .chunk_count = 1,
                                 .flags = call->flags,
                                 .version = call->version};
            uint8_t body[DSC_MAX_NAME + 32];
            int len = dsc_get_req_encode(&get, body, sizeof body);
            if (len == DSC_EINVAL) { /* a chunk index no GET can name (2^32 - 1) */
                call->chunks[w + j].status = DSC_EBADREQ;
                continue;
            }
            int rc =
                len < 0 ? len : dsc_conn_send(call->conn, DSC_OP_GET, base + j, body, (size_t)len);
            if (rc < 0)
                return rc;
            sent++;
        }
        for (uint32_t got = 0; got < sent; got++) {
            dsc_frame_header_t h;
            int rc = next_header(call->conn, &h);
            if (rc < 0)
                return rc;
            uint64_t j = h.request_id - base;
            if (h.request_id < base || j >= k || h.opcode != DSC_OP_GET ||
                call->chunks[w + j].status != PENDING)
                return DSC_EPROTO;
            if (h.status != DSC_STATUS_OK) {
                rc = error_answer(call->conn, &h, &call->chunks[w + j].status);
                if (rc < 0)
                    return rc;
                continue;
            }
            uint8_t prefix[DSC_GET_RESP_PREFIX(1)];
            if (h.body_len < sizeof prefix)
                return DSC_EPROTO;
            rc = dsc_conn_recv_body(call->conn, prefix, sizeof prefix);
            if (rc < 0)
                return rc;
            dsc_get_resp_t resp;
            if (dsc_get_resp_prefix_size(prefix, 8) != (int)sizeof prefix ||
                dsc_get_resp_prefix_decode(prefix, sizeof prefix, h.body_len, &resp) < 0)
                return DSC_EPROTO;
            dsc_chunk_entry_t e;
            dsc_chunk_entry_decode(resp.entries, &e);
            rc = recv_chunk(call, (uint32_t)(w + j), &e);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

/* Chunks [start, start + n) by one MGET (n <= max_batch); an answer over the frame limit is
 * split in two. */
static int mget_batch(mget_call_t *call, uint32_t start, uint32_t n) {
    dsc_mget_item_t *items = malloc(n * sizeof *items);
    uint8_t *body =
        malloc(DSC_MGET_REQ_HEAD(call->flags, call->dataset.len) + (size_t)n * DSC_MGET_ITEM_SIZE);
    if (items == NULL || body == NULL) {
        free(items);
        free(body);
        return DSC_ENOMEM;
    }
    for (uint32_t i = 0; i < n; i++)
        items[i] = (dsc_mget_item_t){call->chunks[start + i].shard, call->chunks[start + i].chunk};
    dsc_mget_req_t req = {.dataset = call->dataset,
                          .flags = call->flags,
                          .version = call->version,
                          .count = n,
                          .items = items};
    int len = dsc_mget_req_encode(&req, body,
                                  DSC_MGET_REQ_HEAD(call->flags, call->dataset.len) +
                                      (size_t)n * DSC_MGET_ITEM_SIZE);
    uint64_t id = call->next_id++;
    int rc = len < 0 ? len : dsc_conn_send(call->conn, DSC_OP_MGET, id, body, (size_t)len);
    free(items);
    free(body);
    if (rc < 0)
        return rc;
    dsc_frame_header_t h;
    rc = next_header(call->conn, &h);
    if (rc < 0)
        return rc;
    if (h.request_id != id || h.opcode != DSC_OP_MGET)
        return DSC_EPROTO;
    if (h.status != DSC_STATUS_OK) {
        int err = 0;
        rc = error_answer(call->conn, &h, &err);
        if (rc < 0)
            return rc;
        if (h.status == DSC_STATUS_UNSUPPORTED) /* granted in HELLO, refused now: GETs */
            return get_batch(call, start, n);
        if (h.status != DSC_STATUS_TOO_LARGE)
            return err;
        if (n == 1) {
            call->chunks[start].status = DSC_ETOOLARGE;
            return 0;
        }
        rc = mget_batch(call, start, n / 2);
        return rc < 0 ? rc : mget_batch(call, start + n / 2, n - n / 2);
    }
    uint8_t head[8];
    if (h.body_len < sizeof head)
        return DSC_EPROTO;
    rc = dsc_conn_recv_body(call->conn, head, sizeof head);
    if (rc < 0)
        return rc;
    int psize = dsc_mget_resp_prefix_size(head, sizeof head);
    if (psize < 0 || (uint32_t)psize != DSC_MGET_RESP_PREFIX(n) || (uint32_t)psize > h.body_len)
        return DSC_EPROTO;
    uint8_t *prefix = malloc((size_t)psize);
    if (prefix == NULL)
        return DSC_ENOMEM; /* the answer is still on the wire: the connection is lost */
    memcpy(prefix, head, sizeof head);
    rc = dsc_conn_recv_body(call->conn, prefix + sizeof head, (size_t)psize - sizeof head);
    dsc_mget_resp_t resp;
    if (rc == 0 && dsc_mget_resp_prefix_decode(prefix, (size_t)psize, h.body_len, &resp) < 0)
        rc = DSC_EPROTO;
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
        dsc_chunk_entry_t e;
        int64_t st = dsc_mget_resp_record(&resp, i, &e);
        if (st == DSC_STATUS_OK)
            rc = recv_chunk(call, start + i, &e);
        else
            call->chunks[start + i].status = dsc_status_to_err((uint32_t)st);
    }
    free(prefix);
    return rc;
}

int dsc__conn_mget(dsc_conn_t *conn, const char *dataset, uint64_t version,
                   dsc_mget_chunk_t *chunks, uint32_t count, dsc_mget_alloc_fn alloc, void *arg,
                   uint64_t *wire) {
    size_t name_len = dataset != NULL ? strlen(dataset) : 0;
    if (conn == NULL || (chunks == NULL && count > 0) || alloc == NULL || name_len == 0 ||
        name_len >= DSC_MAX_NAME)
        return DSC_EINVAL;
    const dsc_conn_info_t *info = dsc_conn_info(conn);
    mget_call_t call = {.conn = conn,
                        .dataset = {dataset, (uint16_t)name_len},
                        .chunks = chunks,
                        .alloc = alloc,
                        .arg = arg,
                        .next_id = 1};
    if (version != 0 && (info->features & DSC_FEATURE_DATASET_VERSION)) {
        call.flags = DSC_GET_FLAG_VERSION;
        call.version = version;
    }
    /* As many entries as the server's max_body takes (dscached's 64 KiB: all 4096). */
    uint32_t head = DSC_MGET_REQ_HEAD(call.flags, name_len);
    uint32_t room = info->max_body > head ? (info->max_body - head) / DSC_MGET_ITEM_SIZE : 0;
    call.max_batch = room < DSC_MGET_MAX_ENTRIES ? room : DSC_MGET_MAX_ENTRIES;
    int use_mget = (info->features & DSC_FEATURE_MGET) && call.max_batch > 0;
    for (uint32_t i = 0; i < count; i++) {
        memset(&chunks[i].entry, 0, sizeof chunks[i].entry);
        chunks[i].stored = NULL;
        chunks[i].status = PENDING;
    }
    int rc = 0;
    for (uint32_t start = 0; rc == 0 && start < count;) {
        uint32_t n = use_mget ? call.max_batch : GET_WINDOW;
        if (n > count - start)
            n = count - start;
        rc = use_mget ? mget_batch(&call, start, n) : get_batch(&call, start, n);
        start += n;
    }
    if (wire != NULL)
        *wire += call.wire;
    int ok = 0;
    for (uint32_t i = 0; i < count; i++) {
        if (chunks[i].status == PENDING)
            chunks[i].status = rc < 0 ? rc : DSC_EPROTO;
        ok += chunks[i].status == 0;
    }
    return rc < 0 ? rc : ok;
}
