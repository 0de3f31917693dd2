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

typedef struct dsc_manifest {
    char name[DSC_MAX_NAME];
    dsc_schema_t schema;
    uint64_t samples; /* derived: sum of the shards' samples */
    uint64_t bytes;   /* derived: sum of the shards' file sizes */
    uint32_t shard_count;
    dsc_manifest_shard_t *shards; /* shard_count entries, owned by the manifest */
    /* dsc_dataset_version (protocol.h) of the JSON text it was parsed from: for a manifest
     * received in a MANIFEST answer, the version a loader names in its GETs; 0 when built in
     * memory. Not part of the JSON. */
    uint64_t version;
} dsc_manifest_t;

/* Parses a manifest from JSON text (need not be NUL-terminated). Returns 0 and *out (free with
 * dsc_manifest_free), DSC_EBADMANIFEST (syntax, a missing or wrong-typed field, ids out of
 * order, chunk counts inconsistent with samples), DSC_EVERSION (a manifest version other than
 * 1), DSC_EBADSCHEMA, DSC_ETOOLARGE, DSC_ENOMEM. */
int dsc_manifest_parse(const char *json, size_t len, dsc_manifest_t **out);
/* Serializes to JSON (malloc'd, NUL-terminated; caller frees) or NULL on ENOMEM. */
char *dsc_manifest_to_json(const dsc_manifest_t *manifest);
/* Reads and parses DIR/manifest.json: as dsc_manifest_parse, plus DSC_ENOENT / DSC_EIO. */
int dsc_manifest_load(const char *dir, dsc_manifest_t **out);
/* Writes DIR/manifest.json atomically (temp file + rename). Returns 0 or -errno; DSC_EINVAL
 * (nothing written) for a manifest that dsc_manifest_parse would reject. */
int dsc_manifest_save(const char *dir, const dsc_manifest_t *manifest);
/* Allocates an empty manifest with room for shard_count shards (zeroed). NULL on ENOMEM. */
dsc_manifest_t *dsc_manifest_alloc(uint32_t shard_count);
/* Recomputes the derived fields (first_sample, samples, bytes). */
void dsc_manifest_finish(dsc_manifest_t *manifest);
/* Shard holding dataset-wide sample `sample` (binary search); -1 when out of range. */
int64_t dsc_manifest_find_sample(const dsc_manifest_t *manifest, uint64_t sample);
/* NULL is a no-op. */
void dsc_manifest_free(dsc_manifest_t *manifest);

#endif
