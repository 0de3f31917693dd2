/* Dataset writer (dsc_writer_*, dscache.h): field specs, chunk assembly (fixed fields and
 * variable-length sections, proto/FORMAT.md), compression on worker threads with chunks written
 * in order, shard files, the manifest last, and the atomic finish (hidden temporary directory
 * beside the target, fsync, rename).
 * Over 1,000 lines: one writer's state (the open chunk, the worker queue, the in-order shard
 * writes, the atomic publish) is touched by every step of a write; what stands alone is cut out
 * already (field specs: proto/fieldspec.c; shard and manifest codecs: proto/). */
#include "writer.h"

#include "fieldspec.h"
#include "log.h"
#include "manifest.h"
#include "manifest_io.h"
#include "shard.h"
#include "wire.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#if defined(__linux__)
#include <sys/syscall.h>
#endif

#define DEFAULT_SHARD_BYTES (64ull << 20)
#define DEFAULT_CHUNK_BYTES (1u << 20)
#define DEFAULT_HC_LEVEL 9
#define MAX_THREADS 64
#define HASH_BLOCK (1u << 20)

static _Thread_local char create_error[512];

enum { JOB_FREE = 0, JOB_QUEUED, JOB_DONE };

/* One chunk on its way: assembled by the caller, encoded by a worker, written by the caller in
 * sequence order. Buffers are kept and reused (memory: the ring, not the dataset). */
typedef struct job {
    uint8_t *raw;
    size_t raw_cap, raw_len;
    uint8_t *dst;
    size_t dst_cap;
    uint32_t samples;
    uint32_t chunk_samples; /* of the shard it belongs to */
    int last_in_shard;
    int state;
    int rc;
    dsc_chunk_entry_t entry;
    const void *stored;
} job_t;

/* Samples of the chunk being filled, per field. */
typedef struct column_buf {
    uint8_t *data; /* fixed: n * sample_bytes; variable: the rows' bytes */
    size_t len, cap;
    uint64_t *offsets; /* variable: n + 1 row offsets */
    size_t offsets_cap;
} column_buf_t;

struct dsc_writer {
    dsc_logger_t log;
    char err[512];
    char *path;    /* target directory */
    char *tmp_dir; /* hidden temporary directory beside it */
    char *parent;  /* the directory holding both */
    char *base;    /* path's last component */
    char name[DSC_MAX_NAME];
    dsc_schema_t schema;
    int codec, level, replace;
    uint64_t shard_bytes;
    uint64_t chunk_bytes;
    char *meta_json;
    dsc_writer_progress_fn progress_fn;
    void *progress_ctx;
    double start;
    int failed;    /* a write or allocation failed: only abort is left */
    int finishing; /* dsc_writer_finish is flushing the last chunk */

    /* Chunk being filled. */
    column_buf_t cols[DSC_MAX_FIELDS];
    uint32_t fill;          /* samples in it */
    uint64_t fill_values;   /* bytes of variable rows in it */
    uint32_t chunk_samples; /* of the shard being cut; 0 until its first chunk fixes it */
    /* Shard being cut (at submit time). */
    uint64_t cut_raw;

    /* Statistics. */
    uint64_t samples;
    uint64_t rows_total[DSC_MAX_FIELDS], rows_max[DSC_MAX_FIELDS];
    dsc_writer_stats_t stats;

    /* Jobs ring and workers. */
    job_t *jobs;
    uint32_t job_count;
    uint64_t next_submit, next_encode, next_write;
    pthread_mutex_t lock;
    pthread_cond_t work_cond, done_cond;
    pthread_t *threads;
    uint32_t thread_count;
    int stop;
    int threads_ready; /* lock and conds initialized */

    /* Shard being written (in sequence order). */
    int fd;
    uint32_t shard_index;
    uint64_t offset;
    uint64_t shard_samples;
    uint32_t shard_chunk_samples; /* of the shard being written */
    dsc_chunk_entry_t *entries;
    uint32_t entry_count, entry_cap;
    size_t header_size;
    dsc_manifest_shard_t *shards;
    uint32_t shard_count, shard_cap;
};

/* ---- Errors ------------------------------------------------------------------------------ */

static void set_error(dsc_writer_t *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void set_error(dsc_writer_t *w, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (w != NULL)
        vsnprintf(w->err, sizeof w->err, fmt, ap);
    else
        vsnprintf(create_error, sizeof create_error, fmt, ap);
    va_end(ap);
    if (w != NULL)
        DSC_LOG(&w->log, DSC_LOG_ERROR, "writer %s: %s", w->path, w->err);
}

DSC_EXTERN int dsc_writer_last_error(const dsc_writer_t *w, char *buf, size_t len) {
    const char *text = w != NULL ? w->err : create_error;
    if (buf != NULL && len > 0)
        snprintf(buf, len, "%s", text);
    return (int)strlen(text);
}

/* ---- Field specs (the grammar: proto/fieldspec.h) ------------------------------------------ */

DSC_EXTERN int dsc_field_spec_parse(const char *spec, dsc_field_info_t *out, char *err,
                                    size_t err_cap) {
    if (err != NULL && err_cap > 0)
        err[0] = '\0';
    if (spec == NULL || out == NULL) {
        if (err != NULL && err_cap > 0)
            snprintf(err, err_cap, "no field spec given");
        return DSC_EINVAL;
    }
    size_t len = strlen(spec);
    dsc_fieldspec_error_t why;
    dsc_schema_t one = {.field_count = 1};
    if (dsc_fieldspec_parse(spec, len, DSC_FIELDSPEC_TYPE_ONLY | DSC_FIELDSPEC_SIZED,
                            &one.fields[0], &why) < 0) {
        if (err != NULL)
            dsc_fieldspec_message(spec, len, &why, err, err_cap);
        return DSC_EINVAL;
    }
    char name[DSC_MAX_NAME];
    memcpy(name, one.fields[0].name, sizeof name);
    if (name[0] == '\0') /* a type alone: sized under a stand-in name */
        memcpy(one.fields[0].name, "x", 2);
    if (dsc_schema_finish(&one) < 0) { /* checked by DSC_FIELDSPEC_SIZED: defensive */
        if (err != NULL && err_cap > 0)
            snprintf(err, err_cap, "field spec '%s': invalid", spec);
        return DSC_EINVAL;
    }
    const dsc_field_t *f = &one.fields[0];
    memset(out, 0, sizeof *out);
    memcpy(out->name, name, sizeof out->name);
    out->dtype = f->dtype;
    out->ndim = f->ndim;
    for (uint32_t d = 0; d < f->ndim; d++)
        out->shape[d] = d == 0 && f->variable ? -1 : (int64_t)f->shape[d];
    out->sample_bytes = f->variable ? f->row_bytes : f->sample_bytes;
    return 0;
}

int dsc__name_valid(const char *name) {
    if (name == NULL)
        return 0;
    size_t n = strlen(name);
    if (n == 0 || n >= DSC_MAX_NAME)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

/* ---- Options ----------------------------------------------------------------------------- */

/* The first version of the options struct ends before `replace`. */
#define OPTIONS_MIN_SIZE offsetof(dsc_writer_options_t, replace)

DSC_EXTERN int dsc_writer_options_init(dsc_writer_options_t *options, size_t struct_size) {
    if (options == NULL || struct_size < OPTIONS_MIN_SIZE)
        return DSC_EINVAL;
    dsc_writer_options_t d;
    memset(&d, 0, sizeof d);
    d.struct_size = struct_size;
    d.compress = "lz4";
    d.log_level = DSC_LOG_WARN;
    memcpy(options, &d, struct_size < sizeof d ? struct_size : sizeof d);
    return 0;
}

/* ---- Small helpers ------------------------------------------------------------------------ */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static char *join(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 2);
    if (s != NULL) {
        memcpy(s, a, la);
        s[la] = '/';
        memcpy(s + la + 1, b, lb + 1);
    }
    return s;
}

static int grow(void **ptr, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    void *p = realloc(*ptr, n * elem);
    if (p == NULL)
        return DSC_ENOMEM;
    *ptr = p;
    *cap = n;
    return 0;
}

static int write_all(int fd, const void *data, size_t len) {
    const uint8_t *p = data;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

/* mkdir -p of dir. */
static int make_dirs(const char *dir) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return -ENAMETOOLONG;
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return -errno;
    return 0;
}

/* Removes every entry of dir (plain files only: the writer makes nothing else) and dir; its
 * manifest first, so that a dataset being removed stops being one at once. */
static void remove_dir(const char *dir) {
    char *manifest = join(dir, DSC_MANIFEST_FILE);
    if (manifest != NULL)
        unlink(manifest);
    free(manifest);
    DIR *d = opendir(dir);
    if (d != NULL) {
        struct dirent *ent;
        while ((ent = readdir(d)) != NULL) {
            if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0)
                continue;
            char *p = join(dir, ent->d_name);
            if (p != NULL)
                unlink(p);
            free(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

static int rename_noreplace(const char *from, const char *to) {
#if defined(__linux__) && defined(SYS_renameat2)
    if (syscall(SYS_renameat2, AT_FDCWD, from, AT_FDCWD, to, 1 /* RENAME_NOREPLACE */) == 0)
        return 0;
    if (errno != ENOSYS && errno != EINVAL)
        return -errno;
#endif
    /* No renameat2 here: refuse an existing target ourselves (a narrow race remains). */
    struct stat st;
    if (lstat(to, &st) == 0)
        return -EEXIST;
    return rename(from, to) == 0 ? 0 : -errno;
}

/* A test hook: DSC_TEST_WRITER_PAUSE_MS=N sleeps N ms after each shard file and at each step of
 * a replace, so that a test can kill the writer at every point of the swap. */
static void test_pause(void) {
    static int pause_ms = -1;
    if (pause_ms < 0) {
        const char *v = getenv("DSC_TEST_WRITER_PAUSE_MS");
        pause_ms = v != NULL ? atoi(v) : 0;
    }
    if (pause_ms > 0) {
        struct timespec ts = {pause_ms / 1000, (long)(pause_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* 1 for the names a dataset directory holds: manifest.json (and its temporary), shard-*.dsc
 * (and their temporaries). */
static int dataset_file(const char *name) {
    size_t len = strlen(name);
    if (strcmp(name, DSC_MANIFEST_FILE) == 0 || strncmp(name, DSC_MANIFEST_FILE ".tmp", 17) == 0)
        return 1;
    return strncmp(name, "shard-", 6) == 0 &&
           ((len > 10 && strcmp(name + len - 4, ".dsc") == 0) ||
            (len > 14 && strcmp(name + len - 8, ".dsc.tmp") == 0));
}

/* Checks that dir may be replaced whole: it holds only a dataset's files (or nothing). Returns
 * 0, -ENOTEMPTY (something else is there: the message names it) or -errno. */
static int check_replaceable(dsc_writer_t *w, const char *dir) {
    DIR *d = opendir(dir);
    if (d == NULL) {
        int rc = -errno;
        set_error(w, "cannot read %s: %s", dir, dsc_strerror(rc));
        return rc;
    }
    int rc = 0;
    struct dirent *ent;
    while (rc == 0 && (ent = readdir(d)) != NULL) {
        if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0)
            continue;
        if (!dataset_file(ent->d_name)) {
            set_error(w,
                      "%s holds '%s', which is not part of a dataset: a replace swaps the whole "
                      "directory, so it refuses one holding anything but %s and shard-*.dsc "
                      "files (move it away first)",
                      dir, ent->d_name, DSC_MANIFEST_FILE);
            rc = -ENOTEMPTY;
        }
    }
    closedir(d);
    return rc;
}

/* Leftovers of writers of the same target that died (a kill, a crash): ".BASE.tmp-PID-N" (a
 * dataset being written, or the old one being removed after a swap) and ".BASE.old-PID-N" (the
 * old dataset moved aside by a replace without RENAME_EXCHANGE). A temporary is removed; an old
 * one is removed once path holds a dataset again, else kept and reported (it is the only copy).
 * Only directories of processes no longer alive on this host are touched. Logged at WARN. */
static void clean_leftovers(dsc_writer_t *w) {
    DIR *d = opendir(w->parent);
    if (d == NULL)
        return;
    size_t blen = strlen(w->base);
    struct stat st;
    char *manifest = join(w->path, DSC_MANIFEST_FILE);
    int target_whole = manifest != NULL && stat(manifest, &st) == 0;
    free(manifest);
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        const char *n = ent->d_name;
        if (n[0] != '.' || strncmp(n + 1, w->base, blen) != 0)
            continue;
        const char *kind = n + 1 + blen;
        int old = strncmp(kind, ".old-", 5) == 0;
        if (!old && strncmp(kind, ".tmp-", 5) != 0)
            continue;
        char *end;
        long pid = strtol(kind + 5, &end, 10);
        if (pid <= 0 || *end != '-' || pid == (long)getpid())
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue; /* its writer may still be at work */
        char *p = join(w->parent, n);
        if (p == NULL)
            continue;
        if (old && !target_whole) {
            DSC_LOG(&w->log, DSC_LOG_WARN,
                    "%s holds the previous dataset of %s, left by a replace that was interrupted "
                    "before the new one was in place: rename it to %s to keep it (not removed)",
                    p, w->path, w->path);
        } else if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
            remove_dir(p);
            DSC_LOG(&w->log, DSC_LOG_WARN, "removed %s, left by an interrupted writer of %s", p,
                    w->path);
        }
        free(p);
    }
    closedir(d);
}

/* ---- Workers -------------------------------------------------------------------------------- */

static void encode_job(dsc_writer_t *w, job_t *job) {
    memset(&job->entry, 0, sizeof job->entry);
    size_t bound = dsc_chunk_encode_bound(job->raw_len);
    if (w->codec == DSC_CODEC_LZ4 && bound > job->dst_cap) {
        uint8_t *grown = realloc(job->dst, bound);
        if (grown == NULL) {
            job->rc = DSC_ENOMEM;
            return;
        }
        job->dst = grown;
        job->dst_cap = bound;
    }
    job->rc = dsc_chunk_encode(w->codec, w->level, job->raw, job->raw_len, job->dst, job->dst_cap,
                               &job->entry, &job->stored);
}

static void *worker_main(void *arg) {
    dsc_writer_t *w = arg;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (!w->stop && w->next_encode == w->next_submit)
            pthread_cond_wait(&w->work_cond, &w->lock);
        if (w->stop)
            break;
        job_t *job = &w->jobs[w->next_encode % w->job_count];
        w->next_encode++;
        pthread_mutex_unlock(&w->lock);
        encode_job(w, job);
        pthread_mutex_lock(&w->lock);
        job->state = JOB_DONE;
        pthread_cond_broadcast(&w->done_cond);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

static void stop_workers(dsc_writer_t *w) {
    if (w->threads == NULL)
        return;
    pthread_mutex_lock(&w->lock);
    w->stop = 1;
    pthread_cond_broadcast(&w->work_cond);
    pthread_mutex_unlock(&w->lock);
    for (uint32_t i = 0; i < w->thread_count; i++)
        pthread_join(w->threads[i], NULL);
    free(w->threads);
    w->threads = NULL;
    w->thread_count = 0;
}

/* ---- Shard files (written in sequence order, on the caller's thread) ------------------------- */

static int open_shard(dsc_writer_t *w) {
    if (w->shard_count >= DSC_MAX_SHARDS) {
        set_error(w, "more than %u shards: raise shard_bytes", DSC_MAX_SHARDS);
        return DSC_ETOOLARGE;
    }
    char file[32], *path;
    snprintf(file, sizeof file, "shard-%05u.dsc", w->shard_count);
    if ((path = join(w->tmp_dir, file)) == NULL)
        return DSC_ENOMEM;
    w->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    int rc = w->fd < 0 ? -errno : 0;
    if (rc < 0)
        set_error(w, "cannot create %s: %s", path, dsc_strerror(rc));
    free(path);
    if (rc < 0)
        return rc;
    /* The header's size depends on the schema and the name only: room for it now, the header
     * itself (with the shard's sample count) when the shard is complete. */
    uint8_t zeros[DSC_SHARD_MAX_HEADER];
    memset(zeros, 0, sizeof zeros);
    rc = write_all(w->fd, zeros, w->header_size);
    if (rc < 0) {
        set_error(w, "writing shard %u: %s", w->shard_count, dsc_strerror(rc));
        return rc;
    }
    w->offset = w->header_size;
    w->shard_samples = 0;
    w->entry_count = 0;
    w->shard_index = w->shard_count;
    return 0;
}

/* XXH3-64 of the whole file, read back (the header is written last, at offset 0). */
static int file_checksum(int fd, uint64_t size, uint64_t *out) {
    XXH3_state_t *state = XXH3_createState();
    uint8_t *buf = malloc(HASH_BLOCK);
    int rc = state != NULL && buf != NULL ? 0 : DSC_ENOMEM;
    if (rc == 0)
        XXH3_64bits_reset(state);
    for (uint64_t pos = 0; rc == 0 && pos < size;) {
        size_t want = size - pos < HASH_BLOCK ? (size_t)(size - pos) : HASH_BLOCK;
        ssize_t n = pread(fd, buf, want, (off_t)pos);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = n < 0 ? -errno : DSC_EIO;
            break;
        }
        XXH3_64bits_update(state, buf, (size_t)n);
        pos += (uint64_t)n;
    }
    if (rc == 0)
        *out = XXH3_64bits_digest(state);
    XXH3_freeState(state);
    free(buf);
    return rc;
}

static int close_shard(dsc_writer_t *w) {
    int rc;
    uint8_t *index = NULL;
    size_t index_len = (size_t)w->entry_count * DSC_CHUNK_ENTRY_SIZE;
    if (w->shard_count == w->shard_cap) {
        uint32_t cap = w->shard_cap ? w->shard_cap * 2 : 16;
        dsc_manifest_shard_t *grown = realloc(w->shards, cap * sizeof *grown);
        if (grown == NULL)
            return DSC_ENOMEM;
        w->shards = grown;
        w->shard_cap = cap;
    }
    index = malloc(index_len ? index_len : 1);
    if (index == NULL)
        return DSC_ENOMEM;
    for (uint32_t i = 0; i < w->entry_count; i++)
        dsc_chunk_entry_encode(&w->entries[i], index + (size_t)i * DSC_CHUNK_ENTRY_SIZE);
    dsc_shard_footer_t footer = {.index_offset = w->offset,
                                 .chunk_count = w->entry_count,
                                 .flags = 0,
                                 .index_checksum = dsc_checksum(index, index_len)};
    uint8_t footer_bytes[DSC_SHARD_FOOTER_SIZE];
    dsc_shard_footer_encode(&footer, footer_bytes);
    dsc_shard_header_t header;
    memset(&header, 0, sizeof header);
    header.shard_id = w->shard_index;
    header.sample_count = w->shard_samples;
    /* A dataset of one chunk says so (chunk_samples == its samples), as it always was written. */
    header.chunk_samples = w->finishing && w->shard_count == 0 && w->entry_count == 1
                               ? (uint32_t)w->shard_samples
                               : w->shard_chunk_samples;
    snprintf(header.dataset, sizeof header.dataset, "%s", w->name);
    header.schema = w->schema;
    uint8_t head[DSC_SHARD_MAX_HEADER];
    int hl = dsc_shard_header_encode(&header, head, sizeof head);
    uint64_t size = w->offset + index_len + DSC_SHARD_FOOTER_SIZE, checksum = 0;
    if (hl < 0 || (size_t)hl != w->header_size) {
        rc = hl < 0 ? hl : DSC_EINVAL; /* defensive: the planned header size is exact */
        set_error(w, "shard %u: header: %s", w->shard_index, dsc_strerror(rc));
        goto done;
    }
    if ((rc = write_all(w->fd, index, index_len)) < 0 ||
        (rc = write_all(w->fd, footer_bytes, sizeof footer_bytes)) < 0)
        goto io;
    if (pwrite(w->fd, head, (size_t)hl, 0) != hl) {
        rc = errno ? -errno : DSC_EIO;
        goto io;
    }
    if (fsync(w->fd) < 0) {
        rc = -errno;
        goto io;
    }
    /* The fd is write-only: read back through a second descriptor. */
    char file[32], *path;
    snprintf(file, sizeof file, "shard-%05u.dsc", w->shard_index);
    if ((path = join(w->tmp_dir, file)) == NULL) {
        rc = DSC_ENOMEM;
        goto done;
    }
    int rfd = open(path, O_RDONLY | O_CLOEXEC);
    free(path);
    if (rfd < 0) {
        rc = -errno;
        goto io;
    }
    rc = file_checksum(rfd, size, &checksum);
    close(rfd);
    if (rc < 0)
        goto io;
    if (close(w->fd) < 0) {
        w->fd = -1;
        rc = -errno;
        goto io;
    }
    w->fd = -1;
    dsc_manifest_shard_t *ms = &w->shards[w->shard_count];
    memset(ms, 0, sizeof *ms);
    ms->id = w->shard_index;
    snprintf(ms->file, sizeof ms->file, "%s", file);
    ms->samples = w->shard_samples;
    ms->bytes = size;
    ms->chunks = w->entry_count;
    ms->chunk_samples = header.chunk_samples;
    ms->checksum = checksum;
    w->shard_count++;
    w->stats.shards++;
    w->stats.file_bytes += size;
    test_pause();
    rc = 0;
    goto done;
io:
    set_error(w, "writing shard %u: %s", w->shard_index, dsc_strerror(rc));
done:
    free(index);
    return rc;
}

/* Writes job (encoded) into the shard files. */
static int write_job(dsc_writer_t *w, job_t *job) {
    int rc = job->rc;
    if (rc < 0) {
        set_error(w, "compressing chunk: %s", dsc_strerror(rc));
        return rc;
    }
    if (w->fd < 0) {
        if ((rc = open_shard(w)) < 0)
            return rc;
        w->shard_chunk_samples = job->chunk_samples;
    }
    size_t cap = w->entry_cap;
    if ((rc = grow((void **)&w->entries, &cap, (size_t)w->entry_count + 1, sizeof *w->entries)) < 0)
        return rc;
    w->entry_cap = (uint32_t)cap;
    dsc_chunk_entry_t e = job->entry;
    e.offset = w->offset;
    e.first_sample = w->shard_samples;
    e.sample_count = job->samples;
    if ((rc = write_all(w->fd, job->stored, e.stored_len)) < 0) {
        set_error(w, "writing shard %u: %s", w->shard_index, dsc_strerror(rc));
        return rc;
    }
    w->offset += e.stored_len;
    w->entries[w->entry_count++] = e;
    w->shard_samples += job->samples;
    w->stats.chunks++;
    w->stats.raw_bytes += e.raw_len;
    w->stats.stored_bytes += e.stored_len;
    if (job->last_in_shard && (rc = close_shard(w)) < 0)
        return rc;
    if (w->progress_fn != NULL)
        w->progress_fn(w->progress_ctx, w->samples, w->stats.raw_bytes, w->stats.stored_bytes);
    return 0;
}

/* Writes finished jobs in order; with `wait`, until the oldest one is done (until_all: every
 * job submitted). */
static int drain(dsc_writer_t *w, int wait_one, int until_all) {
    for (;;) {
        pthread_mutex_lock(&w->lock);
        if (w->next_write == w->next_submit) {
            pthread_mutex_unlock(&w->lock);
            return 0;
        }
        job_t *job = &w->jobs[w->next_write % w->job_count];
        if (job->state != JOB_DONE) {
            if (!wait_one && !until_all) {
                pthread_mutex_unlock(&w->lock);
                return 0;
            }
            while (job->state != JOB_DONE)
                pthread_cond_wait(&w->done_cond, &w->lock);
        }
        pthread_mutex_unlock(&w->lock);
        int rc = write_job(w, job);
        pthread_mutex_lock(&w->lock);
        job->state = JOB_FREE;
        w->next_write++;
        pthread_mutex_unlock(&w->lock);
        if (rc < 0) {
            w->failed = 1; /* a shard is incomplete: nothing more can be added */
            return rc;
        }
        wait_one = 0;
    }
}

/* ---- Chunk assembly ------------------------------------------------------------------------- */

/* Decoded size of the chunk being filled plus `more` samples of `more_values` row bytes. */
static uint64_t fill_size(const dsc_writer_t *w, uint32_t more, uint64_t more_values) {
    uint64_t min = dsc_schema_chunk_min(&w->schema, (uint64_t)w->fill + more);
    return min == UINT64_MAX ? UINT64_MAX : min + w->fill_values + more_values;
}

/* Hands the chunk being filled to the workers. last: the shard ends with it. */
static int emit_chunk(dsc_writer_t *w, int last) {
    int rc;
    if (w->fill == 0)
        return 0;
    if (w->chunk_samples == 0)
        w->chunk_samples = w->fill;
    /* A free job: write finished chunks until the oldest slot is free. */
    while (w->next_submit - w->next_write >= w->job_count)
        if ((rc = drain(w, 1, 0)) < 0)
            return rc;
    job_t *job = &w->jobs[w->next_submit % w->job_count];
    uint64_t raw_len = fill_size(w, 0, 0);
    if (raw_len > job->raw_cap) {
        uint8_t *grown = realloc(job->raw, (size_t)raw_len);
        if (grown == NULL)
            return DSC_ENOMEM;
        job->raw = grown;
        job->raw_cap = (size_t)raw_len;
    }
    uint8_t *out = job->raw;
    for (uint32_t f = 0; f < w->schema.field_count; f++)
        if (!w->schema.fields[f].variable) {
            memcpy(out, w->cols[f].data, w->cols[f].len);
            out += w->cols[f].len;
        }
    for (uint32_t f = 0; f < w->schema.field_count; f++) {
        column_buf_t *c = &w->cols[f];
        if (!w->schema.fields[f].variable)
            continue;
        for (uint32_t k = 0; k <= w->fill; k++)
            dsc_store_u64(out + (size_t)k * 8, c->offsets[k]);
        out += (size_t)(w->fill + 1) * 8;
        if (c->len > 0)
            memcpy(out, c->data, c->len);
        out += c->len;
    }
    job->raw_len = (size_t)raw_len;
    job->samples = w->fill;
    /* The shard ends when another chunk like this one would take it past shard_bytes (at least
     * one chunk per shard): for fixed fields, floor(shard_bytes / chunk bytes) chunks. */
    w->cut_raw += raw_len;
    if (w->cut_raw + raw_len > w->shard_bytes)
        last = 1;
    if (last)
        w->cut_raw = 0;
    job->last_in_shard = last;
    job->chunk_samples = w->chunk_samples;
    job->rc = 0;
    /* With variable fields each shard plans its chunks anew from its first chunk, so a dataset
     * whose samples grow (or shrink) keeps chunks near chunk_bytes. */
    if (last && w->schema.var_count > 0)
        w->chunk_samples = 0;
    for (uint32_t f = 0; f < w->schema.field_count; f++)
        w->cols[f].len = 0;
    w->fill = 0;
    w->fill_values = 0;
    if (w->threads == NULL) {
        encode_job(w, job);
        job->state = JOB_DONE;
        w->next_submit++;
        w->next_encode++;
    } else {
        pthread_mutex_lock(&w->lock);
        job->state = JOB_QUEUED;
        w->next_submit++;
        pthread_cond_signal(&w->work_cond);
        pthread_mutex_unlock(&w->lock);
    }
    return drain(w, 0, 0);
}

/* Checks one sample's values; sample is its position in the dataset. */
static int check_values(dsc_writer_t *w, const dsc_writer_value_t *values, uint64_t sample) {
    for (uint32_t f = 0; f < w->schema.field_count; f++) {
        const dsc_field_t *field = &w->schema.fields[f];
        char spec[160];
        dsc_fieldspec_format(field, spec, sizeof spec);
        if (values[f].data == NULL && values[f].bytes > 0) {
            set_error(w, "field '%s' of sample %llu: no data for %llu bytes", field->name,
                      (unsigned long long)sample, (unsigned long long)values[f].bytes);
            return DSC_EINVAL;
        }
        if (!field->variable && values[f].bytes != field->sample_bytes) {
            set_error(w, "field '%s' of sample %llu: %llu bytes, expected %llu (%s)", field->name,
                      (unsigned long long)sample, (unsigned long long)values[f].bytes,
                      (unsigned long long)field->sample_bytes, spec);
            return DSC_EINVAL;
        }
        if (field->variable && values[f].bytes % field->row_bytes != 0) {
            set_error(w,
                      "field '%s' of sample %llu: %llu bytes, not a multiple of its row of %llu "
                      "bytes (%s)",
                      field->name, (unsigned long long)sample, (unsigned long long)values[f].bytes,
                      (unsigned long long)field->row_bytes, spec);
            return DSC_EINVAL;
        }
    }
    return 0;
}

/* Appends one checked sample to the chunk being filled (cutting chunks as needed). */
static int append_sample(dsc_writer_t *w, const dsc_writer_value_t *values) {
    int rc;
    /* the real sum (for the message), and whether any value alone passes a chunk's bound */
    uint64_t values_bytes = 0, declared = 0;
    int over = 0;
    for (uint32_t f = 0; f < w->schema.field_count; f++) {
        if (!w->schema.fields[f].variable)
            continue;
        if (__builtin_add_overflow(declared, values[f].bytes, &declared))
            declared = UINT64_MAX;
        over |= values[f].bytes > DSC_CHUNK_MAX_RAW;
    }
    values_bytes = over ? UINT64_MAX : declared; /* each <= 2^28 when not over: no overflow */
    /* A chunk never passes 256 MiB, and with variable fields not 4 * chunk_bytes either (unless
     * one sample alone does): close it early, as its shard's last (the only chunk that may be
     * short), when this sample would take it over; the next shard plans its chunks anew. */
    uint64_t limit = DSC_CHUNK_MAX_RAW;
    if (w->schema.var_count > 0 && 4 * w->chunk_bytes < limit)
        limit = 4 * w->chunk_bytes;
    if (w->fill > 0 && (values_bytes == UINT64_MAX || fill_size(w, 1, values_bytes) > limit)) {
        int last = w->chunk_samples != 0 && w->fill < w->chunk_samples;
        if ((rc = emit_chunk(w, last)) < 0)
            return rc;
    }
    if (values_bytes == UINT64_MAX || fill_size(w, 1, values_bytes) > DSC_CHUNK_MAX_RAW) {
        set_error(w,
                  "sample %llu: %llu%s bytes of variable fields, over what one chunk can hold "
                  "(%u bytes with the rest of its sample)",
                  (unsigned long long)w->samples, (unsigned long long)declared,
                  declared == UINT64_MAX ? " or more" : "", DSC_CHUNK_MAX_RAW);
        return DSC_ETOOLARGE;
    }
    for (uint32_t f = 0; f < w->schema.field_count; f++) {
        const dsc_field_t *field = &w->schema.fields[f];
        column_buf_t *c = &w->cols[f];
        size_t bytes = (size_t)values[f].bytes;
        if ((rc = grow((void **)&c->data, &c->cap, c->len + bytes, 1)) < 0)
            return rc;
        if (bytes > 0)
            memcpy(c->data + c->len, values[f].data, bytes);
        c->len += bytes;
        if (field->variable) {
            if ((rc = grow((void **)&c->offsets, &c->offsets_cap, (size_t)w->fill + 2,
                           sizeof *c->offsets)) < 0)
                return rc;
            uint64_t rows = values[f].bytes / field->row_bytes;
            if (w->fill == 0)
                c->offsets[0] = 0;
            c->offsets[w->fill + 1] = c->offsets[w->fill] + rows;
            if (__builtin_add_overflow(w->rows_total[f], rows, &w->rows_total[f])) {
                set_error(w, "field '%s': more than 2^64 - 1 rows", field->name);
                return DSC_EOVERFLOW;
            }
            if (rows > w->rows_max[f])
                w->rows_max[f] = rows;
        }
    }
    w->fill++;
    w->fill_values += values_bytes;
    w->samples++;
    if (w->chunk_samples != 0 ? w->fill == w->chunk_samples : fill_size(w, 0, 0) >= w->chunk_bytes)
        return emit_chunk(w, 0);
    return 0;
}

DSC_EXTERN int dsc_writer_add(dsc_writer_t *w, const dsc_writer_value_t *values, uint32_t count) {
    if (w == NULL)
        return DSC_EINVAL;
    if (w->failed) {
        set_error(w, "an earlier error stopped this writer: abort it");
        return DSC_EINVAL;
    }
    if (values == NULL || count != w->schema.field_count) {
        set_error(w, "sample %llu: %u values, the schema has %u fields",
                  (unsigned long long)w->samples, values == NULL ? 0 : count,
                  w->schema.field_count);
        return DSC_EINVAL;
    }
    int rc = check_values(w, values, w->samples);
    if (rc < 0)
        return rc;
    rc = append_sample(w, values);
    if (rc < 0 && rc != DSC_ETOOLARGE)
        w->failed = 1;
    return rc;
}

DSC_EXTERN int dsc_writer_add_columns(dsc_writer_t *w, const dsc_writer_column_t *columns,
                                      uint32_t count, uint64_t samples) {
    if (w == NULL)
        return DSC_EINVAL;
    if (w->failed) {
        set_error(w, "an earlier error stopped this writer: abort it");
        return DSC_EINVAL;
    }
    if (columns == NULL || count != w->schema.field_count) {
        set_error(w, "samples from %llu: %u columns, the schema has %u fields",
                  (unsigned long long)w->samples, columns == NULL ? 0 : count,
                  w->schema.field_count);
        return DSC_EINVAL;
    }
    /* Check everything first: on a mismatch no sample is added. */
    for (uint32_t f = 0; f < count; f++) {
        const dsc_field_t *field = &w->schema.fields[f];
        const dsc_writer_column_t *c = &columns[f];
        char spec[160];
        dsc_fieldspec_format(field, spec, sizeof spec);
        if (c->data == NULL && c->bytes > 0) {
            set_error(w, "field '%s': no data for %llu bytes", field->name,
                      (unsigned long long)c->bytes);
            return DSC_EINVAL;
        }
        if (!field->variable) {
            uint64_t want;
            if (__builtin_mul_overflow(samples, field->sample_bytes, &want) || c->bytes != want) {
                set_error(w,
                          "field '%s' of samples %llu..%llu: %llu bytes, expected %llu samples "
                          "of %llu bytes (%s)",
                          field->name, (unsigned long long)w->samples,
                          (unsigned long long)(w->samples + samples - (samples > 0)),
                          (unsigned long long)c->bytes, (unsigned long long)samples,
                          (unsigned long long)field->sample_bytes, spec);
                return DSC_EINVAL;
            }
            continue;
        }
        if (c->offsets == NULL) {
            set_error(w, "field '%s' (%s): a variable field needs offsets", field->name, spec);
            return DSC_EINVAL;
        }
        if (c->offsets[0] != 0) {
            set_error(w, "field '%s' of sample %llu: offsets[0] is %lld, not 0", field->name,
                      (unsigned long long)w->samples, (long long)c->offsets[0]);
            return DSC_EINVAL;
        }
        for (uint64_t k = 0; k < samples; k++)
            if (c->offsets[k + 1] < c->offsets[k]) {
                set_error(w, "field '%s' of sample %llu: offsets decrease (%lld, then %lld)",
                          field->name, (unsigned long long)(w->samples + k),
                          (long long)c->offsets[k], (long long)c->offsets[k + 1]);
                return DSC_EINVAL;
            }
        uint64_t bytes;
        if (__builtin_mul_overflow((uint64_t)c->offsets[samples], field->row_bytes, &bytes) ||
            bytes != c->bytes) {
            set_error(w,
                      "field '%s': %lld rows of %llu bytes (%s) by the offsets, the data holds "
                      "%llu bytes",
                      field->name, (long long)c->offsets[samples],
                      (unsigned long long)field->row_bytes, spec, (unsigned long long)c->bytes);
            return DSC_EINVAL;
        }
    }
    /* A sample too large for any chunk is refused before any sample is added. */
    uint64_t room = DSC_CHUNK_MAX_RAW - dsc_schema_chunk_min(&w->schema, 1);
    for (uint64_t k = 0; w->schema.var_count > 0 && k < samples; k++) {
        uint64_t bytes = 0;
        for (uint32_t f = 0; f < count; f++)
            if (w->schema.fields[f].variable)
                bytes += (uint64_t)(columns[f].offsets[k + 1] - columns[f].offsets[k]) *
                         w->schema.fields[f].row_bytes; /* each <= the column's bytes */
        if (bytes > room) {
            set_error(w,
                      "sample %llu: %llu bytes of variable fields, over what one chunk can hold "
                      "(%u bytes with the rest of its sample)",
                      (unsigned long long)(w->samples + k), (unsigned long long)bytes,
                      DSC_CHUNK_MAX_RAW);
            return DSC_ETOOLARGE;
        }
    }
    int rc = 0;
    if (w->schema.var_count == 0 && w->chunk_samples != 0) {
        /* Fixed fields only: whole runs per field, no per-sample work. */
        uint64_t done = 0;
        while (done < samples && rc == 0) {
            uint64_t take = w->chunk_samples - w->fill;
            if (take > samples - done)
                take = samples - done;
            for (uint32_t f = 0; f < count && rc == 0; f++) {
                column_buf_t *c = &w->cols[f];
                size_t bytes = (size_t)(take * w->schema.fields[f].sample_bytes);
                if ((rc = grow((void **)&c->data, &c->cap, c->len + bytes, 1)) < 0)
                    break;
                memcpy(c->data + c->len,
                       (const uint8_t *)columns[f].data + done * w->schema.fields[f].sample_bytes,
                       bytes);
                c->len += bytes;
            }
            if (rc < 0)
                break;
            w->fill += (uint32_t)take;
            w->samples += take;
            done += take;
            if (w->fill == w->chunk_samples)
                rc = emit_chunk(w, 0);
        }
    } else {
        dsc_writer_value_t values[DSC_MAX_FIELDS];
        for (uint64_t k = 0; k < samples && rc == 0; k++) {
            for (uint32_t f = 0; f < count; f++) {
                const dsc_field_t *field = &w->schema.fields[f];
                const uint8_t *base = columns[f].data;
                if (field->variable) {
                    uint64_t lo = (uint64_t)columns[f].offsets[k];
                    uint64_t hi = (uint64_t)columns[f].offsets[k + 1];
                    values[f].data = base ? base + lo * field->row_bytes : NULL;
                    values[f].bytes = (hi - lo) * field->row_bytes;
                } else {
                    values[f].data = base + k * field->sample_bytes;
                    values[f].bytes = field->sample_bytes;
                }
            }
            rc = append_sample(w, values);
        }
    }
    if (rc < 0 && rc != DSC_ETOOLARGE)
        w->failed = 1;
    return rc;
}

/* ---- Create, finish, abort ------------------------------------------------------------------ */

static void writer_free(dsc_writer_t *w) {
    if (w == NULL)
        return;
    stop_workers(w);
    if (w->fd >= 0)
        close(w->fd);
    for (uint32_t i = 0; w->jobs != NULL && i < w->job_count; i++) {
        free(w->jobs[i].raw);
        free(w->jobs[i].dst);
    }
    free(w->jobs);
    for (uint32_t f = 0; f < DSC_MAX_FIELDS; f++) {
        free(w->cols[f].data);
        free(w->cols[f].offsets);
    }
    if (w->threads_ready) {
        pthread_mutex_destroy(&w->lock);
        pthread_cond_destroy(&w->work_cond);
        pthread_cond_destroy(&w->done_cond);
    }
    free(w->entries);
    free(w->shards);
    free(w->meta_json);
    free(w->path);
    free(w->tmp_dir);
    free(w->parent);
    free(w->base);
    free(w);
}

DSC_EXTERN int dsc_writer_create(const dsc_writer_options_t *options, dsc_writer_t **out) {
    static atomic_uint counter;
    create_error[0] = '\0';
    if (options == NULL || out == NULL || options->struct_size < OPTIONS_MIN_SIZE) {
        set_error(NULL, "options NULL or struct_size %zu too small",
                  options ? options->struct_size : 0);
        return DSC_EINVAL;
    }
    dsc_writer_options_t o;
    dsc_writer_options_init(&o, sizeof o);
    memcpy(&o, options, options->struct_size < sizeof o ? options->struct_size : sizeof o);
    if (o.path == NULL || o.path[0] == '\0') {
        set_error(NULL, "no path given");
        return DSC_EINVAL;
    }
    int rc;
    dsc_writer_t *w = calloc(1, sizeof *w);
    if (w == NULL)
        return DSC_ENOMEM;
    w->fd = -1;
    w->start = now_s();
    dsc__logger_init(&w->log, o.log_fn, o.log_ctx, o.log_level);
    /* path without trailing slashes; its parent and last component */
    w->path = strdup(o.path);
    if (w->path == NULL) {
        rc = DSC_ENOMEM;
        goto fail;
    }
    size_t n = strlen(w->path);
    while (n > 1 && w->path[n - 1] == '/')
        w->path[--n] = '\0';
    char *slash = strrchr(w->path, '/');
    const char *base = slash ? slash + 1 : w->path;
    w->parent = slash == NULL      ? strdup(".")
                : slash == w->path ? strdup("/")
                                   : strndup(w->path, (size_t)(slash - w->path));
    if (w->parent == NULL) {
        rc = DSC_ENOMEM;
        goto fail;
    }
    const char *name = o.name != NULL ? o.name : base;
    if (!dsc__name_valid(name)) {
        set_error(NULL,
                  o.name != NULL ? "dataset name '%s': use 1-63 of A-Z a-z 0-9 _ . -"
                                 : "the directory's name '%s' is not a valid dataset name (1-63 "
                                   "of A-Z a-z 0-9 _ . -): give a name",
                  name);
        rc = DSC_EINVAL;
        goto fail;
    }
    snprintf(w->name, sizeof w->name, "%s", name);
    dsc_fieldspec_error_t why;
    size_t fields_len = o.fields != NULL ? strlen(o.fields) : 0;
    if (dsc_fieldspec_parse_list(o.fields, fields_len, &w->schema, &why) < 0) {
        char err[384];
        dsc_fieldspec_message(o.fields, fields_len, &why, err, sizeof err);
        set_error(NULL, "fields: %s", err);
        rc = DSC_EINVAL;
        goto fail;
    }
    const char *compress = o.compress ? o.compress : "lz4";
    if (strcmp(compress, "none") == 0) {
        w->codec = DSC_CODEC_RAW;
    } else if (strcmp(compress, "lz4") == 0) {
        w->codec = DSC_CODEC_LZ4;
    } else if (strcmp(compress, "lz4hc") == 0) {
        w->codec = DSC_CODEC_LZ4;
        w->level = o.level ? o.level : DEFAULT_HC_LEVEL;
    } else {
        set_error(NULL, "compress '%s': expected none, lz4 or lz4hc", compress);
        rc = DSC_EINVAL;
        goto fail;
    }
    if (o.level != 0 && (strcmp(compress, "lz4hc") != 0 || o.level < 1 || o.level > 12)) {
        set_error(NULL, "level %d: a level 1..12 goes with compress lz4hc only", o.level);
        rc = DSC_EINVAL;
        goto fail;
    }
    if (o.chunk_bytes > DSC_CHUNK_MAX_RAW) {
        set_error(NULL, "chunk_bytes %u: at most %u", o.chunk_bytes, DSC_CHUNK_MAX_RAW);
        rc = DSC_EINVAL;
        goto fail;
    }
    w->chunk_bytes = o.chunk_bytes ? o.chunk_bytes : DEFAULT_CHUNK_BYTES;
    w->shard_bytes = o.shard_bytes ? o.shard_bytes : DEFAULT_SHARD_BYTES;
    w->replace = o.replace;
    w->progress_fn = o.progress_fn;
    w->progress_ctx = o.progress_ctx;
    if (o.meta_json != NULL) {
        dsc_manifest_t probe;
        memset(&probe, 0, sizeof probe);
        if (dsc_manifest_set_meta(&probe, o.meta_json) < 0) {
            set_error(NULL, "meta_json is not a JSON object");
            rc = DSC_EINVAL;
            goto fail;
        }
        w->meta_json = probe.meta_json;
    }
    if (dsc_schema_chunk_min(&w->schema, 1) > DSC_CHUNK_MAX_RAW) {
        set_error(NULL, "a sample's fixed fields take %llu bytes, over the %u bytes of a chunk",
                  (unsigned long long)w->schema.sample_bytes, DSC_CHUNK_MAX_RAW);
        rc = DSC_EINVAL;
        goto fail;
    }
    /* Fixed fields only: the chunk's sample count is known now (as the ingest CLI always had). */
    if (w->schema.var_count == 0) {
        uint64_t sb = w->schema.sample_bytes;
        uint64_t cs = w->chunk_bytes / sb;
        if (cs == 0)
            cs = 1;
        if (cs > DSC_CHUNK_MAX_RAW / sb)
            cs = DSC_CHUNK_MAX_RAW / sb;
        uint64_t shard_samples = w->shard_bytes / sb;
        if (shard_samples < cs)
            cs = shard_samples > 0 ? shard_samples : 1; /* a chunk never spans shards */
        w->chunk_samples = (uint32_t)cs;
    }
    dsc_shard_header_t header;
    memset(&header, 0, sizeof header);
    snprintf(header.dataset, sizeof header.dataset, "%s", w->name);
    header.schema = w->schema;
    w->header_size = dsc_shard_header_size(&header);

    /* The target and the temporary directory beside it. */
    struct stat st;
    if (lstat(w->path, &st) == 0) {
        if (!w->replace) {
            char *m = join(w->path, DSC_MANIFEST_FILE);
            struct stat mst;
            int dataset = m != NULL && stat(m, &mst) == 0;
            free(m);
            set_error(NULL,
                      "%s exists%s: a writer creates a new dataset directory; to replace it, "
                      "pass replace (dscache ingest --replace, dscache.Writer(replace=True), "
                      "dsc_writer_options_t.replace = 1)",
                      w->path, dataset ? " and holds a dataset" : "");
            rc = -EEXIST;
            goto fail;
        }
        if (!S_ISDIR(st.st_mode)) {
            set_error(NULL, "%s exists and is not a directory", w->path);
            rc = -ENOTDIR;
            goto fail;
        }
        if ((rc = check_replaceable(NULL, w->path)) < 0)
            goto fail;
    }
    if ((rc = make_dirs(w->parent)) < 0) {
        set_error(NULL, "cannot create %s: %s", w->parent, dsc_strerror(rc));
        goto fail;
    }
    if ((w->base = strdup(base)) == NULL) {
        rc = DSC_ENOMEM;
        goto fail;
    }
    clean_leftovers(w);
    char tmp_name[DSC_MAX_NAME + 64];
    for (int attempt = 0;; attempt++) {
        snprintf(tmp_name, sizeof tmp_name, ".%s.tmp-%ld-%u", base, (long)getpid(),
                 atomic_fetch_add(&counter, 1));
        free(w->tmp_dir);
        if ((w->tmp_dir = join(w->parent, tmp_name)) == NULL) {
            rc = DSC_ENOMEM;
            goto fail;
        }
        if (mkdir(w->tmp_dir, 0755) == 0)
            break;
        rc = -errno;
        if (rc != -EEXIST || attempt > 100) {
            set_error(NULL, "cannot create %s: %s", w->tmp_dir, dsc_strerror(rc));
            free(w->tmp_dir);
            w->tmp_dir = NULL;
            goto fail;
        }
    }

    /* Threads and the jobs ring: 2 * threads + 2 chunks in flight at most. */
    uint32_t threads = o.threads;
    if (threads == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cores > 0 ? (uint32_t)cores : 1;
    }
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    if (w->codec == DSC_CODEC_RAW)
        threads = 0; /* a checksum per chunk: not worth a thread */
    w->job_count = 2 * threads + 2;
    w->jobs = calloc(w->job_count, sizeof *w->jobs);
    if (w->jobs == NULL) {
        rc = DSC_ENOMEM;
        goto fail;
    }
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->work_cond, NULL);
    pthread_cond_init(&w->done_cond, NULL);
    w->threads_ready = 1;
    if (threads > 0) {
        w->threads = calloc(threads, sizeof *w->threads);
        if (w->threads == NULL) {
            rc = DSC_ENOMEM;
            goto fail;
        }
        for (uint32_t i = 0; i < threads; i++) {
            int err = pthread_create(&w->threads[i], NULL, worker_main, w);
            if (err != 0) {
                rc = -err;
                set_error(NULL, "cannot start a compression thread: %s", dsc_strerror(rc));
                goto fail;
            }
            w->thread_count++;
        }
    }
    DSC_LOG(&w->log, DSC_LOG_INFO, "writer %s: %u fields, %s, %u threads, writing under %s",
            w->path, w->schema.field_count, compress, threads, w->tmp_dir);
    *out = w;
    return 0;
fail:
    if (w->tmp_dir != NULL)
        remove_dir(w->tmp_dir);
    if (create_error[0] == '\0')
        set_error(NULL, "%s", dsc_strerror(rc));
    writer_free(w);
    return rc;
}

static int rename_exchange(const char *a, const char *b) {
#if defined(__linux__) && defined(SYS_renameat2)
    if (syscall(SYS_renameat2, AT_FDCWD, a, AT_FDCWD, b, 2 /* RENAME_EXCHANGE */) == 0)
        return 0;
    return -errno;
#else
    (void)a;
    (void)b;
    return -ENOSYS;
#endif
}

/* Moves the finished temporary directory to path. Replacing an existing directory, the two are
 * swapped in one step (renameat2 RENAME_EXCHANGE), so path holds the whole old dataset or the
 * whole new one at every instant; the old one, now under the temporary name, is then removed
 * (its manifest first). Where the filesystem cannot exchange, the old directory is renamed to
 * ".BASE.old-PID-N" and the new one to path: path is missing in between, and a crash there
 * leaves the old dataset whole under that name (the next writer of path reports it). */
static int publish(dsc_writer_t *w) {
    int rc;
    struct stat st;
    if (!w->replace || lstat(w->path, &st) != 0) {
        rc = rename_noreplace(w->tmp_dir, w->path);
        if (rc < 0) {
            set_error(w, "cannot rename %s to %s: %s", w->tmp_dir, w->path, dsc_strerror(rc));
            return rc;
        }
        return fsync_dir(w->parent);
    }
    if (!S_ISDIR(st.st_mode)) {
        set_error(w, "%s is no longer a directory: not replaced", w->path);
        return -ENOTDIR;
    }
    if ((rc = check_replaceable(w, w->path)) < 0) /* what came there since create */
        return rc;
    test_pause();
    /* DSC_TEST_WRITER_NO_EXCHANGE=1: the path of filesystems without RENAME_EXCHANGE (tests) */
    const char *no_exchange = getenv("DSC_TEST_WRITER_NO_EXCHANGE");
    rc = no_exchange != NULL && no_exchange[0] == '1' ? -EINVAL
                                                      : rename_exchange(w->tmp_dir, w->path);
    if (rc == 0) {
        DSC_LOG(&w->log, DSC_LOG_INFO, "writer %s: swapped in, removing the old dataset", w->path);
        fsync_dir(w->parent);
        test_pause();
        remove_dir(w->tmp_dir); /* now the old dataset: its manifest goes first */
        return 0;
    }
    if (rc != -EINVAL && rc != -ENOSYS && rc != -ENOTSUP) {
        set_error(w, "cannot swap %s into %s: %s", w->tmp_dir, w->path, dsc_strerror(rc));
        return rc;
    }
    static atomic_uint old_counter;
    char old_name[DSC_MAX_NAME + 64];
    snprintf(old_name, sizeof old_name, ".%s.old-%ld-%u", w->base, (long)getpid(),
             atomic_fetch_add(&old_counter, 1));
    char *old = join(w->parent, old_name);
    if (old == NULL)
        return DSC_ENOMEM;
    if (rename(w->path, old) != 0) {
        rc = -errno;
        set_error(w, "cannot move the old %s aside to %s: %s", w->path, old, dsc_strerror(rc));
        free(old);
        return rc;
    }
    test_pause();
    if ((rc = rename_noreplace(w->tmp_dir, w->path)) < 0) {
        set_error(w, "cannot rename %s to %s: %s", w->tmp_dir, w->path, dsc_strerror(rc));
        if (rename_noreplace(old, w->path) < 0)
            DSC_LOG(&w->log, DSC_LOG_ERROR, "the old dataset of %s is left at %s", w->path, old);
        free(old);
        return rc;
    }
    fsync_dir(w->parent);
    test_pause();
    remove_dir(old);
    free(old);
    return 0;
}

DSC_EXTERN int dsc_writer_set_meta(dsc_writer_t *w, const char *meta_json) {
    if (w == NULL)
        return DSC_EINVAL;
    if (meta_json != NULL && strlen(meta_json) > DSC_MANIFEST_META_MAX_BYTES) {
        set_error(w, "meta_json is %zu bytes, over the %u a manifest's \"meta\" may hold",
                  strlen(meta_json), DSC_MANIFEST_META_MAX_BYTES);
        return DSC_EINVAL;
    }
    dsc_manifest_t probe;
    memset(&probe, 0, sizeof probe);
    int rc = meta_json != NULL ? dsc_manifest_set_meta(&probe, meta_json) : 0;
    if (rc < 0) {
        set_error(w, "meta_json is not a JSON object");
        return rc == DSC_ENOMEM ? DSC_ENOMEM : DSC_EINVAL;
    }
    free(w->meta_json);
    w->meta_json = probe.meta_json;
    return 0;
}

DSC_EXTERN int dsc_writer_finish(dsc_writer_t *w, dsc_writer_stats_t *stats) {
    if (w == NULL)
        return DSC_EINVAL;
    int rc = 0;
    dsc_manifest_t *m = NULL;
    if (w->failed) {
        set_error(w, "an earlier error stopped this writer");
        rc = DSC_EINVAL;
        goto fail;
    }
    w->finishing = 1;
    if ((rc = emit_chunk(w, 1)) < 0 || (rc = drain(w, 0, 1)) < 0)
        goto fail;
    if (w->fd >= 0 && (rc = close_shard(w)) < 0) /* a shard whose last chunk came full */
        goto fail;
    if (w->samples == 0) {
        set_error(w, "no samples were added: nothing to write");
        rc = DSC_EINVAL;
        goto fail;
    }
    stop_workers(w);
    m = dsc_manifest_alloc(w->shard_count);
    if (m == NULL) {
        rc = DSC_ENOMEM;
        goto fail;
    }
    snprintf(m->name, sizeof m->name, "%s", w->name);
    m->schema = w->schema;
    memcpy(m->shards, w->shards, w->shard_count * sizeof *m->shards);
    for (uint32_t f = 0; f < w->schema.field_count; f++) {
        const dsc_field_t *field = &w->schema.fields[f];
        if (!field->variable)
            continue;
        dsc_manifest_field_stats_t *fs = &m->field_stats[f];
        fs->rows_total = w->rows_total[f];
        fs->rows_max = w->rows_max[f];
        fs->bytes_max = w->rows_max[f] * field->row_bytes; /* <= 256 MiB: one chunk holds it */
        fs->bytes_mean = (double)w->rows_total[f] * (double)field->row_bytes / (double)w->samples;
    }
    m->meta_json = w->meta_json;
    w->meta_json = NULL;
    dsc_manifest_finish(m);
    if ((rc = dsc_manifest_save(w->tmp_dir, m)) < 0) {
        set_error(w, "writing %s/%s: %s", w->tmp_dir, DSC_MANIFEST_FILE, dsc_strerror(rc));
        goto fail;
    }
    if ((rc = fsync_dir(w->tmp_dir)) < 0) {
        set_error(w, "fsync %s: %s", w->tmp_dir, dsc_strerror(rc));
        goto fail;
    }
    if ((rc = publish(w)) < 0)
        goto fail;
    w->stats.samples = w->samples;
    w->stats.seconds = now_s() - w->start;
    if (stats != NULL && stats->struct_size >= sizeof(size_t)) {
        size_t size = stats->struct_size < sizeof w->stats ? stats->struct_size : sizeof w->stats;
        w->stats.struct_size = size;
        memcpy(stats, &w->stats, size);
    }
    DSC_LOG(&w->log, DSC_LOG_INFO, "writer %s: %llu samples, %u shards, %llu chunks", w->path,
            (unsigned long long)w->samples, w->stats.shards, (unsigned long long)w->stats.chunks);
    dsc_manifest_free(m);
    writer_free(w);
    return 0;
fail:
    snprintf(create_error, sizeof create_error, "%s", w->err[0] ? w->err : dsc_strerror(rc));
    dsc_manifest_free(m);
    stop_workers(w);
    if (w->fd >= 0) {
        close(w->fd);
        w->fd = -1;
    }
    remove_dir(w->tmp_dir);
    writer_free(w);
    return rc;
}

DSC_EXTERN void dsc_writer_abort(dsc_writer_t *w) {
    if (w == NULL)
        return;
    stop_workers(w);
    if (w->fd >= 0) {
        close(w->fd);
        w->fd = -1;
    }
    if (w->tmp_dir != NULL)
        remove_dir(w->tmp_dir);
    writer_free(w);
}
