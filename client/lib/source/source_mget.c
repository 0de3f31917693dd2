/* dsc__source_mget (source_mget.h): a batch of chunks from one data source, by the source's own
 * batched fetch where it has one (TCP: MGET), else by single-chunk requests pipelined through
 * its submit / complete. */
#include "source_mget.h"

#include <string.h>

int dsc__source_mget(const dsc_source_ops_t *ops, void *conn, dsc_chunk_ent_t **chunks,
                     uint32_t count, int *status, int *conn_bad, uint64_t *wire) {
    *conn_bad = 0;
    if (ops->mget != NULL)
        return ops->mget(conn, chunks, count, status, conn_bad, wire);
    enum { PENDING = 1 };
    dsc_source_req_t out[DSC_SOURCE_MAX_MERGE * 4];
    uint32_t window = ops->max_outstanding;
    if (window > sizeof out / sizeof out[0])
        window = sizeof out / sizeof out[0];
    if (window == 0)
        window = 1;
    for (uint32_t i = 0; i < count; i++)
        status[i] = PENDING;
    uint32_t next = 0, outstanding = 0;
    int rc = 0;
    while (rc == 0 && (next < count || outstanding > 0)) {
        while (next < count && outstanding < window) {
            dsc_source_req_t *req = &out[outstanding];
            memset(req, 0, sizeof *req);
            req->id = (uint64_t)next + 1;
            req->count = 1;
            req->chunks[0] = chunks[next];
            rc = ops->submit(conn, req);
            if (rc < 0) {
                *conn_bad = 1;
                break;
            }
            outstanding++;
            next++;
        }
        if (rc < 0)
            break;
        uint32_t index = 0;
        uint64_t got = 0;
        int bad = 0;
        int r = ops->complete(conn, out, outstanding, &index, &bad, &got);
        *wire += got;
        if (bad) {
            *conn_bad = 1;
            rc = r < 0 ? r : DSC_EPROTO;
            break;
        }
        uint32_t i = (uint32_t)(out[index].id - 1);
        dsc_chunk_ent_t *ent = chunks[i];
        status[i] = r < 0 ? r : dsc_chunk_verify(&ent->entry, ent->stored);
        out[index] = out[--outstanding];
    }
    int ok = 0;
    for (uint32_t i = 0; i < count; i++) {
        if (status[i] == PENDING)
            status[i] = rc < 0 ? rc : DSC_EPROTO;
        ok += status[i] == 0;
    }
    return rc < 0 ? rc : ok;
}
