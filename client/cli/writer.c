/* Streaming shard writer and dataset writer: chunks are encoded and written as they fill, only
 * the chunk index is kept in memory; files are written as NAME.tmp and renamed when complete. */
#include "writer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

/* ---- One shard file ----------------------------------------------------------------------- */

struct dsc_shard_writer {
    int fd;
    char *path;
    char *tmp_path;
    dsc_shard_header_t header;
    int codec;
    int level;
    uint64_t offset; /* bytes written so far == file offset of the next write */
    XXH3_state_t *hash;
    dsc_chunk_entry_t *entries;
    uint32_t entry_count;
    uint32_t entry_cap;
    uint64_t samples; /* samples written */
    uint8_t *encode_buf;
    size_t encode_cap;
    uint64_t raw_bytes;
    uint64_t stored_bytes;
};

static int write_all(dsc_shard_writer_t *w, const void *data, size_t len) {
    const uint8_t *p = data;
    size_t left = len;
    while (left > 0) {
        ssize_t n = write(w->fd, p, left);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += n;
        left -= (size_t)n;
    }
    if (XXH3_64bits_update(w->hash, data, len) != XXH_OK)
        return DSC_EINVAL;
    w->offset += len;
    return 0;
}

static char *str_printf(const char *fmt, const char *a, const char *b) {
    int n = snprintf(NULL, 0, fmt, a, b);
    char *s = n < 0 ? NULL : malloc((size_t)n + 1);
    if (s != NULL)
        snprintf(s, (size_t)n + 1, fmt, a, b);
    return s;
}

static void shard_writer_free(dsc_shard_writer_t *w) {
    if (w == NULL)
        return;
    if (w->fd >= 0)
        close(w->fd);
    XXH3_freeState(w->hash);
    free(w->entries);
    free(w->encode_buf);
    free(w->path);
    free(w->tmp_path);
    free(w);
}

int dsc_shard_writer_open(const char *path, const dsc_shard_header_t *header, int codec, int level,
                          dsc_shard_writer_t **out) {
    int rc;
    uint8_t *encoded = NULL;
    dsc_shard_writer_t *w = NULL;
    if (path == NULL || header == NULL || out == NULL)
        return DSC_EINVAL;
    if (codec != DSC_CODEC_RAW && codec != DSC_CODEC_LZ4)
        return DSC_EINVAL;
    if (level < 0 || level > 12 || header->sample_count == 0 || header->chunk_samples == 0)
        return DSC_EINVAL;
    w = calloc(1, sizeof *w);
    if (w == NULL)
        return DSC_ENOMEM;
    w->fd = -1;
    w->header = *header;
    w->header.version = (uint16_t)dsc_schema_version(&w->header.schema);
    w->codec = codec;
    w->level = level;
    w->path = str_printf("%s%s", path, "");
    w->tmp_path = str_printf("%s%s", path, ".tmp");
    w->hash = XXH3_createState();
    if (w->path == NULL || w->tmp_path == NULL || w->hash == NULL) {
        rc = DSC_ENOMEM;
        goto fail;
    }
    XXH3_64bits_reset(w->hash);

    size_t header_size = dsc_shard_header_size(&w->header);
    if (header_size == 0 || header_size > DSC_SHARD_MAX_HEADER) {
        rc = DSC_EINVAL;
        goto fail;
    }
    encoded = malloc(header_size);
    if (encoded == NULL) {
        rc = DSC_ENOMEM;
        goto fail;
    }
    rc = dsc_shard_header_encode(&w->header, encoded, header_size);
    if (rc < 0)
        goto fail;
    w->fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        rc = -errno;
        goto fail;
    }
    rc = write_all(w, encoded, (size_t)rc);
    if (rc < 0)
        goto fail_unlink;
    free(encoded);
    *out = w;
    return 0;

fail_unlink:
    unlink(w->tmp_path);
fail:
    free(encoded);
    shard_writer_free(w);
    return rc;
}

int dsc_shard_writer_add(dsc_shard_writer_t *w, const void *raw, uint32_t samples) {
    if (w == NULL || raw == NULL || samples == 0 || samples > w->header.chunk_samples)
        return DSC_EINVAL;
    if (samples > w->header.sample_count - w->samples)
        return DSC_EINVAL;
    /* only the last chunk may be short: a short chunk must end the shard */
    if (samples < w->header.chunk_samples && w->samples + samples != w->header.sample_count)
        return DSC_EINVAL;
    uint64_t raw_len = (uint64_t)samples * w->header.schema.sample_bytes;
    if (raw_len > DSC_CHUNK_MAX_RAW)
        return DSC_ETOOLARGE;
    size_t bound = dsc_chunk_encode_bound((size_t)raw_len);
    if (bound > w->encode_cap) {
        uint8_t *grown = realloc(w->encode_buf, bound);
        if (grown == NULL)
            return DSC_ENOMEM;
        w->encode_buf = grown;
        w->encode_cap = bound;
    }
    if (w->entry_count == w->entry_cap) {
        uint32_t cap = w->entry_cap ? w->entry_cap * 2 : 64;
        dsc_chunk_entry_t *grown = realloc(w->entries, cap * sizeof *grown);
        if (grown == NULL)
            return DSC_ENOMEM;
        w->entries = grown;
        w->entry_cap = cap;
    }
    dsc_chunk_entry_t entry;
    memset(&entry, 0, sizeof entry);
    const void *stored = NULL;
    int rc = dsc_chunk_encode(w->codec, w->level, raw, (size_t)raw_len, w->encode_buf,
                              w->encode_cap, &entry, &stored);
    if (rc < 0)
        return rc;
    entry.offset = w->offset;
    entry.first_sample = w->samples;
    entry.sample_count = samples;
    rc = write_all(w, stored, entry.stored_len);
    if (rc < 0)
        return rc;
    w->entries[w->entry_count++] = entry;
    w->samples += samples;
    w->raw_bytes += raw_len;
    w->stored_bytes += entry.stored_len;
    return 0;
}

int dsc_shard_writer_finish(dsc_shard_writer_t *w, dsc_shard_result_t *result) {
    int rc;
    uint8_t *index = NULL;
    if (w == NULL)
        return DSC_EINVAL;
    if (w->samples != w->header.sample_count) {
        rc = DSC_EINVAL;
        goto fail;
    }
    size_t index_len = (size_t)w->entry_count * DSC_CHUNK_ENTRY_SIZE;
    index = malloc(index_len ? index_len : 1);
    if (index == NULL) {
        rc = DSC_ENOMEM;
        goto fail;
    }
    for (uint32_t i = 0; i < w->entry_count; i++)
        dsc_chunk_entry_encode(&w->entries[i], index + (size_t)i * DSC_CHUNK_ENTRY_SIZE);
    dsc_shard_footer_t footer;
    memset(&footer, 0, sizeof footer);
    footer.index_offset = w->offset;
    footer.chunk_count = w->entry_count;
    footer.index_checksum = dsc_checksum(index, index_len);
    uint8_t footer_bytes[DSC_SHARD_FOOTER_SIZE];
    dsc_shard_footer_encode(&footer, footer_bytes);
    rc = write_all(w, index, index_len);
    if (rc < 0)
        goto fail;
    rc = write_all(w, footer_bytes, sizeof footer_bytes);
    if (rc < 0)
        goto fail;
    if (close(w->fd) != 0) {
        w->fd = -1;
        rc = -errno;
        goto fail;
    }
    w->fd = -1;
    if (rename(w->tmp_path, w->path) != 0) {
        rc = -errno;
        goto fail;
    }
    if (result != NULL) {
        result->file_bytes = w->offset;
        result->checksum = XXH3_64bits_digest(w->hash);
        result->raw_bytes = w->raw_bytes;
        result->stored_bytes = w->stored_bytes;
        result->chunks = w->entry_count;
    }
    free(index);
    shard_writer_free(w);
    return 0;

fail:
    free(index);
    dsc_shard_writer_abort(w);
    return rc;
}

void dsc_shard_writer_abort(dsc_shard_writer_t *w) {
    if (w == NULL)
        return;
    if (w->fd >= 0) {
        close(w->fd);
        w->fd = -1;
    }
    unlink(w->tmp_path);
    shard_writer_free(w);
}

/* ---- A dataset directory ------------------------------------------------------------------ */

struct dsc_dataset_writer {
    char *dir;
    char name[DSC_MAX_NAME];
    dsc_schema_t schema;
    uint64_t field_offset[DSC_MAX_FIELDS]; /* field offsets inside a full chunk */
    uint64_t total_samples;
    uint64_t shard_samples; /* samples per shard (the last may hold fewer) */
    uint32_t chunk_samples;
    uint32_t shard_count;
    int codec;
    int level;
    uint8_t *chunk;      /* one full chunk, field-major */
    uint32_t chunk_fill; /* samples in chunk */
    dsc_shard_writer_t *shard;
    uint32_t shard_index; /* shard being written */
    uint64_t shard_size;  /* its sample_count */
    uint64_t shard_done;  /* its samples already handed to the shard writer */
    uint64_t added;
    dsc_manifest_t *manifest;
    dsc_dataset_stats_t stats;
};

int dsc_name_valid(const char *name) {
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

int dsc_dataset_writer_create(const dsc_dataset_writer_options_t *options,
                              dsc_dataset_writer_t **out) {
    int rc;
    dsc_dataset_writer_t *w = NULL;
    if (options == NULL || out == NULL || options->dir == NULL || !dsc_name_valid(options->name))
        return DSC_EINVAL;
    if (options->total_samples == 0 || options->chunk_bytes == 0 || options->shard_bytes == 0)
        return DSC_EINVAL;
    if ((options->codec != DSC_CODEC_RAW && options->codec != DSC_CODEC_LZ4) ||
        options->level < 0 || options->level > 12)
        return DSC_EINVAL;
    w = calloc(1, sizeof *w);
    if (w == NULL)
        return DSC_ENOMEM;
    w->schema = options->schema;
    rc = dsc_schema_finish(&w->schema);
    if (rc < 0)
        goto fail;
    uint64_t sample_bytes = w->schema.sample_bytes;
    if (sample_bytes == 0) {
        rc = DSC_EBADSCHEMA;
        goto fail;
    }
    if (sample_bytes > DSC_CHUNK_MAX_RAW) {
        rc = DSC_ETOOLARGE;
        goto fail;
    }
    uint64_t chunk_samples = options->chunk_bytes / sample_bytes;
    if (chunk_samples == 0)
        chunk_samples = 1;
    if (chunk_samples > DSC_CHUNK_MAX_RAW / sample_bytes)
        chunk_samples = DSC_CHUNK_MAX_RAW / sample_bytes;
    uint64_t shard_samples = options->shard_bytes / sample_bytes;
    if (shard_samples == 0)
        shard_samples = 1;
    if (shard_samples < chunk_samples)
        chunk_samples = shard_samples; /* a chunk never spans shards */
    else
        shard_samples -= shard_samples % chunk_samples; /* no short chunk inside a dataset */
    if (chunk_samples > options->total_samples)
        chunk_samples = options->total_samples;
    uint64_t shard_count = (options->total_samples + shard_samples - 1) / shard_samples;
    if (shard_count > DSC_MAX_SHARDS) {
        rc = DSC_ETOOLARGE;
        goto fail;
    }
    w->total_samples = options->total_samples;
    w->chunk_samples = (uint32_t)chunk_samples;
    w->shard_samples = shard_samples;
    w->shard_count = (uint32_t)shard_count;
    w->codec = options->codec;
    w->level = options->codec == DSC_CODEC_RAW ? 0 : options->level;
    snprintf(w->name, sizeof w->name, "%s", options->name);
    for (uint32_t f = 0; f < w->schema.field_count; f++)
        w->field_offset[f] = dsc_schema_field_offset(&w->schema, f, chunk_samples);
    w->dir = strdup(options->dir);
    w->chunk = malloc((size_t)(chunk_samples * sample_bytes));
    w->manifest = dsc_manifest_alloc(w->shard_count);
    if (w->dir == NULL || w->chunk == NULL || w->manifest == NULL) {
        rc = DSC_ENOMEM;
        goto fail;
    }
    snprintf(w->manifest->name, sizeof w->manifest->name, "%s", w->name);
    w->manifest->schema = w->schema;
    w->manifest->shard_count = w->shard_count;
    *out = w;
    return 0;

fail:
    dsc_dataset_writer_abort(w);
    return rc;
}

uint32_t dsc_dataset_writer_chunk_samples(const dsc_dataset_writer_t *w) {
    return w->chunk_samples;
}

const dsc_schema_t *dsc_dataset_writer_schema(const dsc_dataset_writer_t *w) {
    return &w->schema;
}

void dsc_dataset_writer_progress(const dsc_dataset_writer_t *w, uint64_t *raw_bytes,
                                 uint64_t *stored_bytes) {
    *raw_bytes = w->added * w->schema.sample_bytes;
    *stored_bytes = w->stats.stored_bytes + (w->shard != NULL ? w->shard->stored_bytes : 0);
}

static int open_shard(dsc_dataset_writer_t *w) {
    dsc_manifest_shard_t *entry = &w->manifest->shards[w->shard_index];
    dsc_shard_header_t header;
    memset(&header, 0, sizeof header);
    uint64_t first = (uint64_t)w->shard_index * w->shard_samples;
    uint64_t left = w->total_samples - first;
    header.version = DSC_SHARD_VERSION;
    header.shard_id = w->shard_index;
    header.sample_count = left < w->shard_samples ? left : w->shard_samples;
    header.chunk_samples = w->chunk_samples;
    snprintf(header.dataset, sizeof header.dataset, "%s", w->name);
    header.schema = w->schema;
    snprintf(entry->file, sizeof entry->file, "shard-%05u.dsc", w->shard_index);
    char *path = str_printf("%s/%s", w->dir, entry->file);
    if (path == NULL)
        return DSC_ENOMEM;
    int rc = dsc_shard_writer_open(path, &header, w->codec, w->level, &w->shard);
    free(path);
    if (rc < 0)
        return rc;
    w->shard_size = header.sample_count;
    w->shard_done = 0;
    return 0;
}

static int close_shard(dsc_dataset_writer_t *w) {
    dsc_manifest_shard_t *entry = &w->manifest->shards[w->shard_index];
    dsc_shard_result_t result;
    int rc = dsc_shard_writer_finish(w->shard, &result);
    w->shard = NULL;
    if (rc < 0)
        return rc;
    entry->id = w->shard_index;
    entry->samples = w->shard_size;
    entry->bytes = result.file_bytes;
    entry->chunks = result.chunks;
    entry->chunk_samples = w->chunk_samples;
    entry->checksum = result.checksum;
    w->stats.shards++;
    w->stats.chunks += result.chunks;
    w->stats.raw_bytes += result.raw_bytes;
    w->stats.stored_bytes += result.stored_bytes;
    w->stats.file_bytes += result.file_bytes;
    w->shard_index++;
    return 0;
}

/* Hands the buffered chunk (chunk_fill samples) to the shard writer. A short chunk is compacted
 * first: its fields move down to the offsets a chunk of chunk_fill samples has. */
static int flush_chunk(dsc_dataset_writer_t *w) {
    uint32_t n = w->chunk_fill;
    if (n < w->chunk_samples) {
        for (uint32_t f = 1; f < w->schema.field_count; f++) {
            uint64_t to = dsc_schema_field_offset(&w->schema, f, n);
            memmove(w->chunk + to, w->chunk + w->field_offset[f],
                    (size_t)(n * w->schema.fields[f].sample_bytes));
        }
    }
    int rc = dsc_shard_writer_add(w->shard, w->chunk, n);
    if (rc < 0)
        return rc;
    w->shard_done += n;
    w->chunk_fill = 0;
    if (w->shard_done == w->shard_size)
        return close_shard(w);
    return 0;
}

int dsc_dataset_writer_add(dsc_dataset_writer_t *w, const void *const *field_data,
                           uint64_t samples) {
    if (w == NULL || field_data == NULL)
        return DSC_EINVAL;
    if (samples > w->total_samples - w->added)
        return DSC_EINVAL;
    uint64_t done = 0;
    while (done < samples) {
        int rc;
        if (w->shard == NULL && (rc = open_shard(w)) < 0)
            return rc;
        uint64_t left_in_shard = w->shard_size - w->shard_done;
        uint64_t target = left_in_shard < w->chunk_samples ? left_in_shard : w->chunk_samples;
        uint64_t take = target - w->chunk_fill;
        if (take > samples - done)
            take = samples - done;
        for (uint32_t f = 0; f < w->schema.field_count; f++) {
            uint64_t fb = w->schema.fields[f].sample_bytes;
            memcpy(w->chunk + w->field_offset[f] + w->chunk_fill * fb,
                   (const uint8_t *)field_data[f] + done * fb, (size_t)(take * fb));
        }
        w->chunk_fill += (uint32_t)take;
        done += take;
        w->added += take;
        if (w->chunk_fill == target && (rc = flush_chunk(w)) < 0)
            return rc;
    }
    return 0;
}

int dsc_dataset_writer_finish(dsc_dataset_writer_t *w, dsc_dataset_stats_t *stats) {
    int rc;
    if (w == NULL)
        return DSC_EINVAL;
    if (w->added != w->total_samples || w->shard != NULL || w->shard_index != w->shard_count) {
        rc = DSC_EINVAL;
        goto done;
    }
    dsc_manifest_finish(w->manifest);
    rc = dsc_manifest_save(w->dir, w->manifest);
    if (rc < 0)
        goto done;
    w->stats.samples = w->added;
    if (stats != NULL)
        *stats = w->stats;
done:
    dsc_dataset_writer_abort(w);
    return rc;
}

void dsc_dataset_writer_abort(dsc_dataset_writer_t *w) {
    if (w == NULL)
        return;
    dsc_shard_writer_abort(w->shard);
    dsc_manifest_free(w->manifest);
    free(w->chunk);
    free(w->dir);
    free(w);
}
