/* Streaming shard writer (header, chunks, index, footer; only the index stays in memory) and
 * the dataset writer on top of it: cuts shards and chunks, writes manifest.json at the end. */
#ifndef DSC_CLI_WRITER_H
#define DSC_CLI_WRITER_H

#include "manifest.h"
#include "shard.h"

#include <stddef.h>
#include <stdint.h>

/* ---- One shard file ----------------------------------------------------------------------- */
typedef struct dsc_shard_writer dsc_shard_writer_t;

typedef struct dsc_shard_result {
    uint64_t file_bytes;   /* size of the finished file */
    uint64_t checksum;     /* XXH3-64 of the whole file */
    uint64_t raw_bytes;    /* decoded sample bytes */
    uint64_t stored_bytes; /* chunk bytes as stored */
    uint32_t chunks;
} dsc_shard_result_t;

/* Creates "path.tmp" and writes the encoded header (complete: sample_count and chunk_samples
 * are known up front). codec is DSC_CODEC_RAW or DSC_CODEC_LZ4; level as dsc_chunk_encode.
 * Returns 0 and *out, DSC_EINVAL (bad header, codec or level), DSC_ENOMEM, or -errno. */
int dsc_shard_writer_open(const char *path, const dsc_shard_header_t *header, int codec, int level,
                          dsc_shard_writer_t **out);
/* Encodes and appends one chunk of `samples` samples. raw holds them field-major (field 0 of
 * every sample, then field 1, ...), samples * sample_bytes bytes. Every chunk but the last holds
 * exactly header.chunk_samples samples. Returns 0, DSC_EINVAL (count breaks that rule or the
 * shard's sample_count), DSC_ENOMEM, or -errno from write. The data is copied or written before
 * the call returns. */
int dsc_shard_writer_add(dsc_shard_writer_t *writer, const void *raw, uint32_t samples);
/* Writes index and footer, closes the file and renames "path.tmp" to path. Fills *result when
 * non-NULL. Returns 0, DSC_EINVAL (fewer samples than sample_count), or -errno. Frees the writer
 * in every case (on failure the temporary file is removed). */
int dsc_shard_writer_finish(dsc_shard_writer_t *writer, dsc_shard_result_t *result);
/* Closes and removes the temporary file and frees the writer. NULL is a no-op. */
void dsc_shard_writer_abort(dsc_shard_writer_t *writer);

/* ---- A dataset directory ------------------------------------------------------------------ */
typedef struct dsc_dataset_writer dsc_dataset_writer_t;

typedef struct dsc_dataset_writer_options {
    const char *dir;        /* existing directory; files shard-00000.dsc ... and manifest.json */
    const char *name;       /* dataset name (1..63 of [A-Za-z0-9_.-]) */
    dsc_schema_t schema;    /* finished by the writer (dsc_schema_finish) */
    uint64_t total_samples; /* samples that will be added, >= 1 */
    uint64_t shard_bytes;   /* raw sample bytes per shard (at least one sample per shard) */
    uint64_t chunk_bytes;   /* raw sample bytes per chunk (at least one sample per chunk) */
    int codec;              /* DSC_CODEC_RAW or DSC_CODEC_LZ4 */
    int level;              /* 0 fast lz4, 1..12 lz4hc */
} dsc_dataset_writer_options_t;

typedef struct dsc_dataset_stats {
    uint64_t samples;
    uint32_t shards;
    uint64_t chunks;
    uint64_t raw_bytes;    /* sample bytes */
    uint64_t stored_bytes; /* chunk bytes as stored */
    uint64_t file_bytes;   /* shard files, headers and indexes included */
} dsc_dataset_stats_t;

/* Plans the layout (chunk_samples = max(1, chunk_bytes / sample_bytes), shards a multiple of
 * it) and allocates one chunk buffer. Writes nothing yet. Returns 0 and *out, DSC_EBADSCHEMA,
 * DSC_EINVAL (name, sizes, codec), DSC_ETOOLARGE (a sample over DSC_CHUNK_MAX_RAW, more than
 * DSC_MAX_SHARDS shards), DSC_ENOMEM. */
int dsc_dataset_writer_create(const dsc_dataset_writer_options_t *options,
                              dsc_dataset_writer_t **out);
/* Samples per chunk: the natural batch for callers that read their input in pieces. */
uint32_t dsc_dataset_writer_chunk_samples(const dsc_dataset_writer_t *writer);
/* The finished schema (sizes derived). */
const dsc_schema_t *dsc_dataset_writer_schema(const dsc_dataset_writer_t *writer);
/* Appends `samples` samples: field_data[f] points at samples * fields[f].sample_bytes bytes,
 * sample after sample (the natural layout of one array per field). Copies them; writes shard
 * files as chunks fill. Returns 0, DSC_EINVAL (more samples than total_samples), DSC_ENOMEM, or
 * -errno. After an error only dsc_dataset_writer_abort is valid. */
int dsc_dataset_writer_add(dsc_dataset_writer_t *writer, const void *const *field_data,
                           uint64_t samples);
/* Finishes the last shard and writes manifest.json. Fills *stats when non-NULL. Returns 0,
 * DSC_EINVAL (fewer samples than total_samples), or -errno. Frees the writer in every case. */
int dsc_dataset_writer_finish(dsc_dataset_writer_t *writer, dsc_dataset_stats_t *stats);
/* Removes the shard being written and frees the writer (finished shards stay, without a
 * manifest). NULL is a no-op. */
void dsc_dataset_writer_abort(dsc_dataset_writer_t *writer);
/* Bytes written so far (raw sample bytes taken and stored bytes written), for progress. */
void dsc_dataset_writer_progress(const dsc_dataset_writer_t *writer, uint64_t *raw_bytes,
                                 uint64_t *stored_bytes);

/* 1 when name is a valid dataset or field name (1..63 of [A-Za-z0-9_.-]), else 0. */
int dsc_name_valid(const char *name);

#endif
