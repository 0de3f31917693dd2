/* Dataset manifest (DIR/manifest.json, proto/FORMAT.md): schema and shard list. Parsed with
 * cJSON; every field is validated, an invalid manifest is rejected whole. */
#ifndef DSC_MANIFEST_H
#define DSC_MANIFEST_H

#include "shard.h"

#include <stddef.h>
#include <stdint.h>

#define DSC_MANIFEST_FILE "manifest.json"
#define DSC_MANIFEST_MAX_BYTES (64u << 20)
#define DSC_MAX_SHARDS (1u << 20)
/* The "meta" object's text (as written, spaces included) at most: it is kept, and parsed whole. */
#define DSC_MANIFEST_META_MAX_BYTES (1u << 20)

typedef struct dsc_manifest_shard {
    uint32_t id;    /* == its position in the list */
    char file[128]; /* file name inside the dataset directory (no '/') */
    uint64_t samples;
    uint64_t bytes; /* file size */
    uint32_t chunks;
    uint32_t chunk_samples; /* samples per chunk, the last chunk may hold fewer */
    uint64_t checksum;      /* XXH3-64 of the whole file */
    uint64_t first_sample;  /* derived: dataset-wide index of its first sample */
} dsc_manifest_shard_t;

/* Size statistics of a variable field over the whole dataset (manifest version 2). */
typedef struct dsc_manifest_field_stats {
    uint64_t rows_total; /* rows of every sample together */
    uint64_t rows_max;   /* the largest sample, in rows */
    uint64_t bytes_max;  /* the largest sample, in bytes (== rows_max * row_bytes) */
    double bytes_mean;   /* mean sample size in bytes (0..bytes_max) */
} dsc_manifest_field_stats_t;

typedef struct dsc_manifest {
    char name[DSC_MAX_NAME];
    dsc_schema_t schema;
    /* field_stats[f] for each variable field f of schema (zero for fixed fields). */
    dsc_manifest_field_stats_t field_stats[DSC_MAX_FIELDS];
    /* The top-level "meta" object as compact JSON text (malloc'd, owned by the manifest, freed by
     * dsc_manifest_free), or NULL when the manifest has none. */
    char *meta_json;
    uint64_t samples; /* derived: sum of the shards' samples */
    uint64_t bytes;   /* derived: sum of the shards' file sizes */
    uint32_t shard_count;
    dsc_manifest_shard_t *shards; /* shard_count entries, owned by the manifest */
    /* dsc_dataset_version (protocol.h) of the JSON text it was parsed from: for a manifest
     * received in a MANIFEST answer, the version a loader names in its GETs; 0 when built in
     * memory. Not part of the JSON. */
    uint64_t version;
} dsc_manifest_t;

/* Parses a manifest from JSON text (need not be NUL-terminated). The syntax of the whole text is
 * checked without allocating; only the known keys are then built (unknown keys cost no memory;
 * shards one at a time): memory O(shards + "meta"). Returns 0 and *out (free with
 * dsc_manifest_free), DSC_EBADMANIFEST (syntax, a missing or wrong-typed field, ids out of
 * order, chunk counts inconsistent with samples, size statistics missing or inconsistent, a
 * "meta" that is not an object, version 2 without a variable field), DSC_EVERSION (a manifest
 * version other than 1 and 2), DSC_EBADSCHEMA (also: a variable dimension in version 1),
 * DSC_ETOOLARGE (over 64 MiB, over 2^20 shards, "meta" over 1 MiB), DSC_ENOMEM. */
int dsc_manifest_parse(const char *json, size_t len, dsc_manifest_t **out);
/* Serializes to JSON (malloc'd, NUL-terminated; caller frees): version 1 when the schema has no
 * variable field (the same text as before version 2 existed, plus "meta" when set), else version
 * 2 with the field statistics. NULL on ENOMEM or when meta_json is not a JSON object. */
char *dsc_manifest_to_json(const dsc_manifest_t *manifest);
/* Allocates an empty manifest with room for shard_count shards (zeroed). NULL on ENOMEM. */
dsc_manifest_t *dsc_manifest_alloc(uint32_t shard_count);
/* Sets manifest->meta_json to a copy of json (a JSON object; NULL clears it). Returns 0,
 * DSC_EINVAL (not a JSON object), DSC_ENOMEM. */
int dsc_manifest_set_meta(dsc_manifest_t *manifest, const char *json);
/* Recomputes the derived fields (first_sample, samples, bytes). */
void dsc_manifest_finish(dsc_manifest_t *manifest);
/* Upper bound on the decoded size of a chunk of `chunk_samples` samples: exact for a schema
 * without variable fields (chunk_samples * sample_bytes), else the offset tables plus
 * chunk_samples times the largest sample of each variable field (field_stats), never more than
 * DSC_CHUNK_MAX_RAW. For sizing buffers before a chunk is read. */
uint64_t dsc_manifest_chunk_bound(const dsc_manifest_t *manifest, uint32_t chunk_samples);
/* Shard holding dataset-wide sample `sample` (binary search); -1 when out of range. */
int64_t dsc_manifest_find_sample(const dsc_manifest_t *manifest, uint64_t sample);
/* NULL is a no-op. */
void dsc_manifest_free(dsc_manifest_t *manifest);

#endif
