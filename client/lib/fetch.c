/* Loader I/O threads: pipelined GETs on one connection each (or reads from the fallback shard
 * files), chunks received straight into pooled buffers; fail-over to other replicas; the
 * manifest fetch. */
#include "loader_int.h"
#include "report.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MERGE_MAX_BYTES (8u << 20)

/* ---- Manifest ------------------------------------------------------------------------------ */

int dsc__fetch_manifest(dsc_loader_t *loader) {
    int rc = DSC_EUNAVAIL;
    uint8_t req[DSC_MAX_NAME + 8];
    int req_len = dsc_name_req_encode(loader->dataset, req, sizeof req);
    if (req_len < 0)
        return req_len;
    uint64_t members_hash = loader->view_hash;
    for (uint32_t i = 0; i < loader->server_count; i++) {
        dsc_conn_t *conn = NULL;
        int r = dsc_conn_open_addr(loader->servers[i].addr, loader->opt.timeout_ms, members_hash,
                                   &conn);
        if (r < 0) {
            DSC_LOG(&loader->log, DSC_LOG_WARN, "server %s: %s", loader->servers[i].addr,
                    dsc_strerror(r));
            continue;
        }
        pthread_mutex_lock(&loader->lock);
        dsc__view_hello(loader, i, dsc_conn_info(conn)->members_hash);
        pthread_mutex_unlock(&loader->lock);
        uint8_t *body = NULL;
        size_t len = 0;
        r = dsc_conn_call(conn, DSC_OP_MANIFEST, req, (size_t)req_len, &body, &len);
        if (r == 0) {
            r = dsc_manifest_parse((const char *)body, len, &loader->manifest);
            if (r < 0)
                DSC_LOG(&loader->log, DSC_LOG_ERROR, "server %s: manifest of %s: %s",
                        loader->servers[i].addr, loader->dataset, dsc_strerror(r));
        } else {
            DSC_LOG(&loader->log, r == DSC_ENOTFOUND ? DSC_LOG_ERROR : DSC_LOG_WARN,
                    "server %s: MANIFEST %s: %s%s%s", loader->servers[i].addr, loader->dataset,
                    dsc_strerror(r), dsc_conn_last_error(conn)[0] ? ": " : "",
                    dsc_conn_last_error(conn));
        }
        free(body);
        dsc_conn_close(conn);
        if (r == 0)
            return 0;
        /* A definite answer (unknown dataset, corrupt manifest) is not retried elsewhere. */
        if (r == DSC_ENOTFOUND || r == DSC_EBADMANIFEST || r == DSC_EBADSCHEMA)
            return r;
        rc = r == DSC_ECONNREFUSED || r == DSC_ETIMEDOUT || r == DSC_ECLOSED || r == DSC_ECONNRESET
                 ? DSC_EUNAVAIL
                 : r;
    }
    if (loader->fallback != NULL) {
        rc = dsc_manifest_load(loader->fallback, &loader->manifest);
        if (rc < 0)
            DSC_LOG(&loader->log, DSC_LOG_ERROR, "fallback %s: manifest: %s", loader->fallback,
                    dsc_strerror(rc));
        else if (strcmp(loader->manifest->name, loader->dataset) != 0) {
            DSC_LOG(&loader->log, DSC_LOG_ERROR, "fallback %s holds dataset %s, not %s",
                    loader->fallback, loader->manifest->name, loader->dataset);
            rc = DSC_ENOTFOUND;
        }
        return rc;
    }
    if (rc == DSC_EUNAVAIL)
        DSC_LOG(&loader->log, DSC_LOG_ERROR, "no server answered for dataset %s", loader->dataset);
    return rc;
}

/* ---- Fallback shard files ------------------------------------------------------------------ */

/* Opens shard `shard` and reads + validates its index. Under files_lock. */
static int file_open(dsc_loader_t *loader, uint32_t shard) {
    dsc_file_shard_t *f = &loader->files[shard];
    if (f->fd >= 0)
        return 0;
    if (f->failed)
        return f->failed;
    const dsc_manifest_shard_t *ms = &loader->manifest->shards[shard];
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", loader->fallback, ms->file);
    int rc;
    uint8_t *head = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        goto fail;
    }
    off_t size = lseek(fd, 0, SEEK_END);
    rc = DSC_ETRUNCATED;
    if (size < (off_t)DSC_SHARD_FOOTER_SIZE + 64)
        goto fail;
    size_t head_len = (uint64_t)size < DSC_SHARD_MAX_HEADER ? (size_t)size : DSC_SHARD_MAX_HEADER;
    head = malloc(head_len);
    rc = DSC_ENOMEM;
    if (head == NULL)
        goto fail;
    dsc_shard_header_t header;
    dsc_shard_footer_t footer;
    uint8_t foot[DSC_SHARD_FOOTER_SIZE];
    if ((rc = dsc_pread_full(fd, head, head_len, 0)) < 0 ||
        (rc = dsc_shard_header_decode(head, head_len, &header)) < 0 ||
        (rc = dsc_pread_full(fd, foot, sizeof foot, (uint64_t)size - sizeof foot)) < 0 ||
        (rc = dsc_shard_footer_decode(foot, &footer)) < 0)
        goto fail;
    rc = DSC_EBADINDEX;
    if (!dsc_schema_equal(&header.schema, &loader->manifest->schema) ||
        header.sample_count != ms->samples || footer.chunk_count != ms->chunks ||
        header.chunk_samples != ms->chunk_samples ||
        footer.index_offset > (uint64_t)size - DSC_SHARD_FOOTER_SIZE ||
        (uint64_t)footer.chunk_count * DSC_CHUNK_ENTRY_SIZE >
            (uint64_t)size - DSC_SHARD_FOOTER_SIZE - footer.index_offset)
        goto fail;
    f->index = malloc((size_t)footer.chunk_count * DSC_CHUNK_ENTRY_SIZE);
    rc = DSC_ENOMEM;
    if (f->index == NULL)
        goto fail;
    if ((rc = dsc_pread_full(fd, f->index, (size_t)footer.chunk_count * DSC_CHUNK_ENTRY_SIZE,
                             footer.index_offset)) < 0 ||
        (rc = dsc_shard_check_index(&header, &footer, f->index, (uint64_t)size)) < 0)
        goto fail;
    f->chunk_count = footer.chunk_count;
    f->fd = fd;
    free(head);
    return 0;
fail:
    DSC_LOG(&loader->log, DSC_LOG_ERROR, "fallback shard %s: %s", path, dsc_strerror(rc));
    free(head);
    free(f->index);
    f->index = NULL;
    if (fd >= 0)
        close(fd);
    f->failed = rc;
    return rc;
}

/* Reads the stored bytes of each chunk of req from the files. Unlocked. */
static int file_read(dsc_io_t *io, dsc_io_req_t *req, uint64_t *wire) {
    dsc_loader_t *loader = io->loader;
    for (uint32_t i = 0; i < req->count; i++) {
        dsc_chunk_ent_t *ent = req->chunks[i];
        pthread_mutex_lock(&loader->files_lock);
        int rc = file_open(loader, ent->shard);
        pthread_mutex_unlock(&loader->files_lock);
        if (rc < 0)
            return rc;
        const dsc_file_shard_t *f = &loader->files[ent->shard];
        dsc_chunk_entry_t e;
        dsc_chunk_entry_decode(f->index + (size_t)ent->shard_chunk * DSC_CHUNK_ENTRY_SIZE, &e);
        if (e.sample_count != ent->samples || e.raw_len != ent->raw_len)
            return DSC_EBADINDEX;
        ent->stored = dsc__bufpool_get(&loader->pool, e.stored_len, &ent->stored_cap);
        if (ent->stored == NULL)
            return DSC_ENOMEM;
        rc = dsc_pread_full(f->fd, ent->stored, e.stored_len, e.offset);
        if (rc < 0)
            return rc;
        ent->entry = e;
        *wire += e.stored_len;
    }
    return 0;
}

/* ---- Server connections -------------------------------------------------------------------- */

/* Reads and discards n body bytes. */
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

/* Receives the response to the oldest outstanding request into its chunks' buffers. Unlocked.
 * Returns 0, a connection error (the connection is then unusable: *conn_bad), or a status
 * error for this request only. */
/* The answer to a REPORT (diag.c) sent on this connection: drained and dropped; a server
 * without REPORT answers UNSUPPORTED, which only costs the report. */
#define REPORT_ANSWER 1

static int recv_response(dsc_io_t *io, dsc_io_req_t **req_out, int *conn_bad, uint64_t *wire,
                         double *header_at) {
    dsc_loader_t *loader = io->loader;
    dsc_frame_header_t h;
    *conn_bad = 1;
    int rc = dsc_conn_recv_header(io->conn, &h);
    if (rc < 0)
        return rc;
    *header_at = dsc_now_s();
    if (h.opcode == DSC_OP_REPORT && (h.request_id & DSC_DIAG_REPORT_ID) &&
        (h.flags & DSC_FLAG_RESPONSE)) {
        char msg[128];
        rc = drain(io->conn, h.body_len, msg, sizeof msg);
        if (rc < 0)
            return rc;
        *conn_bad = 0;
        return REPORT_ANSWER;
    }
    /* Responses may come in any order (a RAM hit overtakes a load): match the id. */
    dsc_io_req_t *req = NULL;
    for (uint32_t i = 0; i < io->out_count; i++)
        if (io->out[i].id == h.request_id)
            req = &io->out[i];
    if (req == NULL || h.opcode != DSC_OP_GET || !(h.flags & DSC_FLAG_RESPONSE)) {
        DSC_LOG(&loader->log, DSC_LOG_ERROR,
                "server %s: response to no outstanding request "
                "(id %llu, opcode %u)",
                loader->servers[io->server].addr, (unsigned long long)h.request_id, h.opcode);
        return DSC_EPROTO;
    }
    *req_out = req;
    if (h.status != DSC_STATUS_OK) {
        char msg[256];
        rc = drain(io->conn, h.body_len, msg, sizeof msg);
        if (rc < 0)
            return rc;
        *conn_bad = 0;
        rc = dsc_status_to_err(h.status);
        /* Unavailable or corrupt there: the chunks fail over (an error if nothing is left). */
        DSC_LOG(&loader->log,
                rc == DSC_EUNAVAIL || rc == DSC_ECORRUPT ? DSC_LOG_WARN : DSC_LOG_ERROR,
                "server %s: GET %s shard %u chunk %u (of %u): %s: %s",
                loader->servers[io->server].addr, loader->dataset, req->chunks[0]->shard,
                req->chunks[0]->shard_chunk, req->count, dsc_status_name(h.status), msg);
        return rc;
    }
    uint8_t prefix[DSC_GET_RESP_PREFIX(IO_MAX_MERGE)];
    if (h.body_len < 8)
        return DSC_EPROTO;
    rc = dsc_conn_recv_body(io->conn, prefix, 8);
    if (rc < 0)
        return rc;
    int psize = dsc_get_resp_prefix_size(prefix, 8);
    if (psize < 0 || (uint32_t)psize != DSC_GET_RESP_PREFIX(req->count) ||
        (uint32_t)psize > h.body_len)
        return DSC_EPROTO;
    rc = dsc_conn_recv_body(io->conn, prefix + 8, (size_t)psize - 8);
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
        if (e.sample_count != ent->samples || e.raw_len != ent->raw_len) {
            DSC_LOG(&loader->log, DSC_LOG_ERROR,
                    "server %s: shard %u chunk %u holds %u samples "
                    "(%u bytes), the manifest says %u",
                    loader->servers[io->server].addr, ent->shard, ent->shard_chunk + i,
                    e.sample_count, e.raw_len, ent->samples);
            return DSC_EPROTO;
        }
        ent->stored = dsc__bufpool_get(&loader->pool, e.stored_len, &ent->stored_cap);
        if (ent->stored == NULL)
            return DSC_ENOMEM;
        rc = dsc_conn_recv_body(io->conn, ent->stored, e.stored_len);
        if (rc < 0)
            return rc;
        ent->entry = e;
        *wire += e.stored_len;
    }
    *conn_bad = 0;
    return 0;
}

/* Marks slot `failed` tried for the chunk and queues it where dsc__route_chunk says. Under lock.
 * Returns the slot, or -1 when no source is left. */
static int reroute(dsc_loader_t *loader, dsc_chunk_ent_t *ent, uint32_t failed) {
    if (failed <= DSC__FALLBACK)
        ent->tried[failed / 64] |= 1ull << (failed % 64);
    int s = dsc__route_chunk(loader, ent);
    if (s < 0 || (uint32_t)s == failed)
        return -1;
    dsc__server_push(loader, (uint32_t)s, ent);
    return s;
}

int dsc__chunk_refetch(dsc_loader_t *loader, dsc_chunk_ent_t *ent, int err) {
    uint32_t failed = ent->server;
    loader->st.checksum_failures++;
    int s = reroute(loader, ent, failed);
    if (s < 0) {
        if (loader->error == 0 && !loader->stop)
            DSC_LOG(&loader->log, DSC_LOG_ERROR,
                    "%s shard %u chunk %u: %s from %s, and no other replica%s is left to read "
                    "it from",
                    loader->dataset, ent->shard, ent->shard_chunk, dsc_strerror(err),
                    loader->servers[failed].addr,
                    loader->fallback != NULL ? " or fallback file" : " (no fallback_path)");
        return err;
    }
    loader->st.failovers++;
    pthread_cond_broadcast(&loader->io_cv);
    return s;
}

/* Frees a cancelled entry or puts a live one back in a server's queue after a failure on slot
 * `failed` (sent: it was in flight there, not just queued). A corrupt answer (err
 * DSC_ECORRUPT) goes through dsc__chunk_refetch. Under lock. Returns 0 or the error that ends
 * the loader. */
static int requeue(dsc_loader_t *loader, dsc_chunk_ent_t *ent, uint32_t failed, int err, int sent) {
    if (sent) {
        loader->inflight_used -= ent->raw_len;
        loader->servers[failed].inflight_bytes -= ent->raw_len;
    }
    dsc__bufpool_put(&loader->pool, ent->stored, ent->stored_cap);
    ent->stored = NULL;
    ent->stored_cap = 0;
    if (ent->cancelled) {
        dsc__chunk_free(loader, ent);
        return 0;
    }
    if (dsc__is_corruption(err)) {
        ent->server = failed;
        int s = dsc__chunk_refetch(loader, ent, err);
        if (s >= 0 && sent)
            loader->st.retries++;
        return s < 0 ? s : 0;
    }
    if (reroute(loader, ent, failed) < 0)
        return loader->members.count > 1 ? DSC_EALLDOWN : err;
    if (sent)
        loader->st.retries++;
    loader->st.failovers++;
    return 0;
}

/* The connection failed with err: close it, mark the server down, move its work elsewhere.
 * Under lock. */
static void conn_failed(dsc_io_t *io, int err) {
    dsc_loader_t *loader = io->loader;
    dsc_server_t *srv = &loader->servers[io->server];
    /* Logged once when the server goes down, not on every failed probe. */
    if (!loader->stop)
        DSC_LOG(&loader->log, srv->alive ? DSC_LOG_WARN : DSC_LOG_DEBUG,
                "server %s failed: %s (%s)", srv->addr, dsc_strerror(err), dsc_err_name(err));
    dsc_conn_close(io->conn);
    io->conn = NULL;
    if (io->server != DSC__FALLBACK) {
        if (srv->alive)
            srv->retry_at = dsc_now_s() + srv->backoff;
        srv->alive = 0;
    }
    int rc = 0;
    for (uint32_t k = 0; k < io->out_count; k++) {
        dsc_io_req_t *req = &io->out[k];
        for (uint32_t i = 0; i < req->count; i++) {
            int r = requeue(loader, req->chunks[i], io->server, err, 1);
            if (r < 0 && rc == 0)
                rc = r;
        }
    }
    io->out_count = 0;
    if (io->server != DSC__FALLBACK) {
        dsc_chunk_ent_t *ent;
        while ((ent = dsc__queue_pop(&srv->queue)) != NULL) {
            int r = requeue(loader, ent, io->server, err, 0);
            if (r < 0 && rc == 0)
                rc = r;
        }
    }
    if (rc < 0 && !loader->stop)
        dsc__loader_fail(loader, rc);
    pthread_cond_broadcast(&loader->io_cv);
}

/* Received (or read) chunks go to the decode queue; cancelled ones are freed. Under lock. */
static void deliver(dsc_io_t *io, dsc_io_req_t *req) {
    dsc_loader_t *loader = io->loader;
    loader->diag.c.chunks_fetched += req->count;
    for (uint32_t i = 0; i < req->count; i++) {
        dsc_chunk_ent_t *ent = req->chunks[i];
        loader->servers[io->server].inflight_bytes -= ent->raw_len;
        if (ent->cancelled) {
            loader->inflight_used -= ent->raw_len;
            dsc__chunk_free(loader, ent);
            continue;
        }
        ent->state = CH_RECEIVED;
        dsc__queue_push(&loader->decode_queue, ent);
        dsc__work_signal(loader);
    }
    pthread_cond_broadcast(&loader->io_cv); /* the per-server budget has room again */
}

/* Takes the next request off the server's queue: one chunk, plus the following queued chunks
 * of the same shard when they are consecutive. Under lock. Returns 0 when nothing may be sent. */
static int take_request(dsc_io_t *io, dsc_io_req_t *req) {
    dsc_loader_t *loader = io->loader;
    dsc_server_t *srv = &loader->servers[io->server];
    dsc_chunk_queue_t *q = &srv->queue;
    uint64_t budget = loader->opt.inflight_bytes;
    /* The files are read one request at a time per thread: no per-server bound there. */
    uint64_t server_budget =
        io->server == DSC__FALLBACK ? UINT64_MAX : dsc__server_inflight_limit(loader);
    if (q->head == NULL)
        return 0;
    if (loader->inflight_used > 0 && loader->inflight_used + q->head->raw_len > budget)
        return 0;
    if (srv->inflight_bytes > 0 && srv->inflight_bytes + q->head->raw_len > server_budget)
        return 0;
    req->count = 0;
    uint64_t bytes = 0;
    do {
        dsc_chunk_ent_t *ent = dsc__queue_pop(q);
        ent->state = CH_INFLIGHT;
        loader->inflight_used += ent->raw_len;
        srv->inflight_bytes += ent->raw_len;
        bytes += ent->raw_len;
        req->chunks[req->count++] = ent;
        dsc_chunk_ent_t *next = q->head;
        if (next == NULL || next->shard != ent->shard ||
            next->shard_chunk != ent->shard_chunk + 1 || req->count == IO_MAX_MERGE ||
            bytes + next->raw_len > MERGE_MAX_BYTES ||
            loader->inflight_used + next->raw_len > budget ||
            srv->inflight_bytes + next->raw_len > server_budget)
            break;
    } while (1);
    req->id = io->next_id++;
    loader->st.requests++;
    return 1;
}

static void timed_wait(dsc_loader_t *loader, double seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)(seconds * 1e9);
    ts.tv_sec += (time_t)(ns / 1000000000u);
    ts.tv_nsec = (long)(ns % 1000000000u);
    pthread_cond_timedwait(&loader->io_cv, &loader->lock, &ts);
}

static void io_loop_files(dsc_io_t *io) {
    dsc_loader_t *loader = io->loader;
    while (!loader->stop) {
        dsc_io_req_t req;
        if (loader->error || !take_request(io, &req)) {
            pthread_cond_wait(&loader->io_cv, &loader->lock);
            continue;
        }
        pthread_mutex_unlock(&loader->lock);
        uint64_t wire = 0;
        double t0 = dsc_now_s();
        int rc = file_read(io, &req, &wire);
        double t1 = dsc_now_s();
        pthread_mutex_lock(&loader->lock);
        loader->st.network_seconds += t1 - t0;
        loader->st.wire_bytes += wire;
        if (rc < 0) {
            for (uint32_t i = 0; i < req.count; i++)
                requeue(loader, req.chunks[i], io->server, rc, 1); /* the last resort */
            if (!loader->stop)
                dsc__loader_fail(loader, rc);
            continue;
        }
        deliver(io, &req);
    }
}

/* Back-off between probes of a failed server: 1 s, doubling up to this. */
#define BACKOFF_MAX_S 10.0

static void io_loop_server(dsc_io_t *io) {
    dsc_loader_t *loader = io->loader;
    dsc_server_t *srv = &loader->servers[io->server];
    while (!loader->stop) {
        if (loader->error) {
            pthread_cond_wait(&loader->io_cv, &loader->lock);
            continue;
        }
        if (io->conn != NULL && !srv->member && io->out_count == 0 && srv->queue.head == NULL) {
            /* Left the view: nothing is routed here any more. */
            dsc_conn_close(io->conn);
            io->conn = NULL;
        }
        if (io->conn == NULL) {
            /* Connect lazily when work is queued; a failed member is probed, by one thread at a
             * time, once its back-off has passed (its queue is empty: work went elsewhere). */
            double now = dsc_now_s();
            int connect_now = srv->alive ? srv->queue.head != NULL
                                         : srv->member && !srv->probing && now >= srv->retry_at;
            if (!connect_now) {
                if (!srv->alive && srv->member && !srv->probing)
                    timed_wait(loader, srv->retry_at - now);
                else
                    pthread_cond_wait(&loader->io_cv, &loader->lock);
                continue;
            }
            int probe = !srv->alive;
            if (probe)
                srv->probing = 1;
            uint64_t members_hash = loader->view_hash;
            pthread_mutex_unlock(&loader->lock);
            dsc_conn_t *conn = NULL;
            int rc = dsc_conn_open_addr(srv->addr, loader->opt.timeout_ms, members_hash, &conn);
            pthread_mutex_lock(&loader->lock);
            if (probe)
                srv->probing = 0;
            if (rc < 0) {
                io->conn = NULL;
                conn_failed(io, rc);
                srv->retry_at = dsc_now_s() + srv->backoff;
                srv->backoff = srv->backoff * 2 < BACKOFF_MAX_S ? srv->backoff * 2 : BACKOFF_MAX_S;
                continue;
            }
            if (loader->stop) {
                dsc_conn_close(conn);
                break;
            }
            io->conn = conn;
            if (!srv->alive) {
                DSC_LOG(&loader->log, DSC_LOG_INFO, "server %s is back", srv->addr);
                pthread_cond_broadcast(&loader->io_cv);
            }
            srv->alive = 1;
            srv->backoff = 1.0;
            dsc__view_hello(loader, io->server, dsc_conn_info(conn)->members_hash);
            continue; /* re-check the queue: the hello may have taken a while */
        }
        /* Now and then, the job's stall and rate to the server (one I/O thread per server). */
        int rc = 0;
        double report_every =
            loader->opt.report_seconds > 0 ? loader->opt.report_seconds : DSC_DIAG_REPORT_S;
        if (io == &srv->io[0] && loader->opt.report_seconds >= 0 && dsc_now_s() >= io->report_due) {
            uint8_t body[DSC_REPORT_MAX_BODY];
            double now = dsc_now_s();
            int len = dsc__diag_report_body(loader, now, body, sizeof body);
            io->report_due = now + report_every;
            uint64_t id = DSC_DIAG_REPORT_ID | io->report_seq++;
            dsc_conn_t *conn = io->conn;
            pthread_mutex_unlock(&loader->lock);
            if (len > 0)
                rc = dsc_conn_send(conn, DSC_OP_REPORT, id, body, (size_t)len);
            pthread_mutex_lock(&loader->lock);
            if (rc < 0) {
                conn_failed(io, rc);
                continue;
            }
        }
        /* Send what the budget allows. */
        while (rc == 0 && io->out_count < IO_MAX_OUTSTANDING && !loader->stop) {
            dsc_io_req_t *req = &io->out[io->out_count];
            if (!take_request(io, req))
                break;
            io->out_count++;
            dsc_get_req_t get = {
                .dataset = {loader->dataset, (uint16_t)strlen(loader->dataset)},
                .shard_id = req->chunks[0]->shard,
                .first_chunk = req->chunks[0]->shard_chunk,
                .chunk_count = req->count,
            };
            uint8_t body[DSC_MAX_NAME + 32];
            int len = dsc_get_req_encode(&get, body, sizeof body);
            dsc_conn_t *conn = io->conn;
            pthread_mutex_unlock(&loader->lock);
            rc = len < 0 ? len : dsc_conn_send(conn, DSC_OP_GET, req->id, body, (size_t)len);
            pthread_mutex_lock(&loader->lock);
        }
        if (rc < 0) {
            conn_failed(io, rc);
            continue;
        }
        if (io->out_count == 0) {
            pthread_cond_wait(&loader->io_cv, &loader->lock);
            continue;
        }
        dsc_io_req_t *req = NULL;
        pthread_mutex_unlock(&loader->lock);
        int conn_bad = 0;
        uint64_t wire = 0;
        double t0 = dsc_now_s(), header_at = 0;
        rc = recv_response(io, &req, &conn_bad, &wire, &header_at);
        double t1 = dsc_now_s();
        pthread_mutex_lock(&loader->lock);
        loader->st.network_seconds += t1 - t0;
        loader->st.wire_bytes += wire;
        /* Per server, for the verdict: time per byte, and the share spent before answers
         * start (latency) rather than streaming (bandwidth). */
        dsc_verdict_server_t *vs = &loader->diag.servers[io->server];
        vs->recv_seconds += t1 - t0;
        vs->wait_seconds += (header_at > 0 ? header_at : t1) - t0;
        vs->bytes += wire;
        if (rc < 0 && conn_bad) {
            conn_failed(io, rc);
            continue;
        }
        if (rc == REPORT_ANSWER)
            continue;
        vs->responses++;
        dsc_io_req_t done = *req; /* swap-remove: the array is unordered */
        *req = io->out[--io->out_count];
        req = &done;
        if (rc == DSC_EUNAVAIL || rc == DSC_ECORRUPT) {
            /* Busy or not loaded there, or its copy is damaged: try another replica (a corrupt
             * chunk then the fallback files), never the same server again for these chunks. */
            for (uint32_t i = 0; i < req->count; i++) {
                int r = requeue(loader, req->chunks[i], io->server, rc, 1);
                if (r < 0)
                    dsc__loader_fail(loader, r);
            }
            pthread_cond_broadcast(&loader->io_cv);
        } else if (rc < 0) {
            for (uint32_t i = 0; i < req->count; i++) {
                dsc_chunk_ent_t *ent = req->chunks[i];
                loader->inflight_used -= ent->raw_len;
                srv->inflight_bytes -= ent->raw_len;
                dsc__bufpool_put(&loader->pool, ent->stored, ent->stored_cap);
                ent->stored = NULL;
                ent->stored_cap = 0;
                ent->state = CH_QUEUED; /* owned by the table again; freed with it */
                if (ent->cancelled)
                    dsc__chunk_free(loader, ent);
            }
            dsc__loader_fail(loader, rc);
        } else {
            deliver(io, req);
        }
    }
    /* Outstanding entries cancelled by a restart belong to this thread. */
    for (uint32_t k = 0; k < io->out_count; k++)
        for (uint32_t i = 0; i < io->out[k].count; i++)
            if (io->out[k].chunks[i]->cancelled)
                dsc__chunk_free(loader, io->out[k].chunks[i]);
    io->out_count = 0;
}

void *dsc__io_main(void *arg) {
    dsc_io_t *io = arg;
    dsc_loader_t *loader = io->loader;
    pthread_mutex_lock(&loader->lock);
    if (io->server == DSC__FALLBACK)
        io_loop_files(io);
    else
        io_loop_server(io);
    pthread_mutex_unlock(&loader->lock);
    return NULL;
}
