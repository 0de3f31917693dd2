/* Data source "files": the fallback path. Chunks are read with pread from the dataset's shard
 * files in a local (or shared-filesystem) directory, validated against the manifest; the manifest
 * is the directory's own. Requests complete synchronously, one per connection at a time. */
#include "dsc_sys.h"
#include "manifest_io.h"
#include "source.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One shard file: opened on first use. */
typedef struct file_shard {
    int fd; /* -1 until opened */
    int failed;
    uint64_t chunk_count;
    uint8_t *index; /* chunk_count entries */
} file_shard_t;

/* The directory, shared by the peer's I/O threads. */
typedef struct files_endpoint {
    const dsc_source_env_t *env;
    char *dir;
    pthread_mutex_t lock; /* guards shards (opening; an opened shard is read-only) */
    uint32_t shard_count;
    file_shard_t *shards; /* allocated on first use (the manifest is known by then) */
} files_endpoint_t;

/* A connection: the request submitted and not yet completed. */
typedef struct files_conn {
    files_endpoint_t *ep;
    uint32_t pending;
} files_conn_t;

static int files_endpoint_open(const dsc_source_env_t *env, const char *addr, void **out) {
    files_endpoint_t *ep = calloc(1, sizeof *ep);
    if (ep == NULL)
        return DSC_ENOMEM;
    size_t n = strlen(addr) + 1;
    ep->dir = malloc(n);
    if (ep->dir == NULL) {
        free(ep);
        return DSC_ENOMEM;
    }
    memcpy(ep->dir, addr, n);
    ep->env = env;
    pthread_mutex_init(&ep->lock, NULL);
    *out = ep;
    return 0;
}

static void files_endpoint_close(void *endpoint) {
    files_endpoint_t *ep = endpoint;
    if (ep == NULL)
        return;
    for (uint32_t i = 0; ep->shards != NULL && i < ep->shard_count; i++) {
        if (ep->shards[i].fd >= 0)
            close(ep->shards[i].fd);
        free(ep->shards[i].index);
    }
    free(ep->shards);
    pthread_mutex_destroy(&ep->lock);
    free(ep->dir);
    free(ep);
}

static int files_manifest(void *endpoint, uint64_t view_hash, dsc_manifest_t **out,
                          uint64_t *hello_hash) {
    const files_endpoint_t *ep = endpoint;
    const dsc_source_env_t *env = ep->env;
    (void)view_hash;
    *hello_hash = 0;
    int rc = dsc_manifest_load(ep->dir, out);
    if (rc < 0) {
        DSC_LOG(env->log, DSC_LOG_ERROR, "fallback %s: manifest: %s", ep->dir, dsc_strerror(rc));
    } else if (strcmp((*out)->name, env->dataset) != 0) {
        DSC_LOG(env->log, DSC_LOG_ERROR, "fallback %s holds dataset %s, not %s", ep->dir,
                (*out)->name, env->dataset);
        rc = DSC_ENOTFOUND;
    }
    return rc;
}

/* Opens shard `shard` and reads + validates its index. Under ep->lock. */
static int shard_open(files_endpoint_t *ep, uint32_t shard) {
    const dsc_manifest_t *m = ep->env->manifest;
    if (ep->shards == NULL) {
        ep->shards = calloc(m->shard_count, sizeof *ep->shards);
        if (ep->shards == NULL)
            return DSC_ENOMEM;
        ep->shard_count = m->shard_count;
        for (uint32_t i = 0; i < m->shard_count; i++)
            ep->shards[i].fd = -1;
    }
    file_shard_t *f = &ep->shards[shard];
    if (f->fd >= 0)
        return 0;
    if (f->failed)
        return f->failed;
    const dsc_manifest_shard_t *ms = &m->shards[shard];
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", ep->dir, ms->file);
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
    if (!dsc_schema_equal(&header.schema, &m->schema) || header.sample_count != ms->samples ||
        footer.chunk_count != ms->chunks || header.chunk_samples != ms->chunk_samples ||
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
    DSC_LOG(ep->env->log, DSC_LOG_ERROR, "fallback shard %s: %s", path, dsc_strerror(rc));
    free(head);
    free(f->index);
    f->index = NULL;
    if (fd >= 0)
        close(fd);
    f->failed = rc;
    return rc;
}

static int files_open(void *endpoint, uint64_t view_hash, void **out, uint64_t *hello_hash) {
    (void)view_hash;
    files_conn_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        return DSC_ENOMEM;
    c->ep = endpoint;
    *hello_hash = 0;
    *out = c;
    return 0;
}

static int files_submit(void *conn, dsc_source_req_t *req) {
    (void)req;
    files_conn_t *c = conn;
    c->pending++;
    return 0;
}

/* Reads the stored bytes of each chunk of the oldest submitted request. */
static int files_complete(void *conn, dsc_source_req_t *out, uint32_t count, uint32_t *index,
                          int *conn_bad, uint64_t *wire) {
    files_conn_t *c = conn;
    files_endpoint_t *ep = c->ep;
    *conn_bad = 0;
    if (count == 0 || c->pending == 0)
        return DSC_EINVAL;
    c->pending--;
    dsc_source_req_t *req = &out[0];
    *index = 0;
    for (uint32_t i = 0; i < req->count; i++) {
        dsc_chunk_ent_t *ent = req->chunks[i];
        pthread_mutex_lock(&ep->lock);
        int rc = shard_open(ep, ent->shard);
        pthread_mutex_unlock(&ep->lock);
        if (rc < 0)
            return rc;
        const file_shard_t *f = &ep->shards[ent->shard];
        dsc_chunk_entry_t e;
        dsc_chunk_entry_decode(f->index + (size_t)ent->shard_chunk * DSC_CHUNK_ENTRY_SIZE, &e);
        if (e.sample_count != ent->samples || !dsc__chunk_raw_len_ok(ent, e.raw_len))
            return DSC_EBADINDEX;
        ent->stored = dsc__bufpool_get(ep->env->pool, e.stored_len, &ent->stored_cap);
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

static void files_wake(void *conn) {
    (void)conn; /* reads of local files end by themselves */
}

static void files_close(void *conn) {
    free(conn);
}

const dsc_source_ops_t dsc__source_files = {
    .name = "files",
    .max_outstanding = 1,
    .peer_bounded = 0,
    .endpoint_open = files_endpoint_open,
    .endpoint_close = files_endpoint_close,
    .manifest = files_manifest,
    .open = files_open,
    .submit = files_submit,
    .complete = files_complete,
    .wake = files_wake,
    .close = files_close,
};
