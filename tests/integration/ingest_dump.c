/* Test helper for the ingest tests: decodes every sample of a dataset directory (shard format
 * version 1 or 2) and writes, per field, OUT_DIR/<field>.bin (the values of sample 0, 1, 2, ...
 * back to back) and OUT_DIR/<field>.len (each sample's value size in bytes, u64 little-endian),
 * so variable-length fields can be compared with their sources. */
#include "manifest.h"
#include "manifest_io.h"
#include "shard.h"
#include "testdata.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: ingest_dump DATASET_DIR OUT_DIR\n");
        return 2;
    }
    dsc_manifest_t *m = NULL;
    int rc = dsc_manifest_load(argv[1], &m);
    if (rc < 0) {
        fprintf(stderr, "ingest_dump: %s: %s\n", argv[1], dsc_strerror(rc));
        return 1;
    }
    int status = 1;
    FILE *out[DSC_MAX_FIELDS] = {0}, *lens[DSC_MAX_FIELDS] = {0};
    uint8_t *raw = NULL, *file = NULL;
    uint64_t samples = 0;
    for (uint32_t f = 0; f < m->schema.field_count; f++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.bin", argv[2], m->schema.fields[f].name);
        out[f] = fopen(path, "wb");
        snprintf(path, sizeof path, "%s/%s.len", argv[2], m->schema.fields[f].name);
        lens[f] = fopen(path, "wb");
        if (out[f] == NULL || lens[f] == NULL) {
            fprintf(stderr, "ingest_dump: %s: %s\n", path, strerror(errno));
            goto cleanup;
        }
    }
    for (uint32_t s = 0; s < m->shard_count; s++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[1], m->shards[s].file);
        uint64_t len = 0;
        free(file);
        file = testdata_read_file(path, &len);
        if (file == NULL) {
            fprintf(stderr, "ingest_dump: cannot read %s\n", path);
            goto cleanup;
        }
        dsc_shard_view_t view;
        rc = dsc_shard_parse(file, len, &view);
        if (rc < 0) {
            fprintf(stderr, "ingest_dump: %s: %s\n", path, dsc_strerror(rc));
            goto cleanup;
        }
        for (uint32_t i = 0; i < view.footer.chunk_count; i++) {
            dsc_chunk_entry_t e;
            dsc_chunk_layout_t layout;
            if ((rc = dsc_shard_chunk(&view, i, &e)) < 0)
                goto chunk_error;
            free(raw);
            raw = malloc(e.raw_len ? e.raw_len : 1);
            if (raw == NULL)
                goto cleanup;
            if ((rc = dsc_chunk_decode(&e, dsc_shard_chunk_data(&view, &e), raw, e.raw_len)) < 0)
                goto chunk_error;
            rc = dsc_chunk_layout(&view.header.schema, e.sample_count, raw, e.raw_len, &layout);
            if (rc < 0)
                goto chunk_error;
            for (uint32_t j = 0; j < e.sample_count; j++)
                for (uint32_t f = 0; f < m->schema.field_count; f++) {
                    const uint8_t *data;
                    uint64_t bytes;
                    if ((rc = dsc_chunk_sample(&layout, &view.header.schema, f, j, &data, &bytes)) <
                        0)
                        goto chunk_error;
                    uint8_t le[8];
                    for (int b = 0; b < 8; b++)
                        le[b] = (uint8_t)(bytes >> (8 * b));
                    if (fwrite(data, 1, (size_t)bytes, out[f]) != bytes ||
                        fwrite(le, 1, 8, lens[f]) != 8) {
                        fprintf(stderr, "ingest_dump: write failed\n");
                        goto cleanup;
                    }
                }
            samples += e.sample_count;
            continue;
        chunk_error:
            fprintf(stderr, "ingest_dump: %s: chunk %u: %s\n", path, i, dsc_strerror(rc));
            goto cleanup;
        }
    }
    printf("%llu samples\n", (unsigned long long)samples);
    status = samples == m->samples ? 0 : 1;

cleanup:
    for (uint32_t f = 0; f < DSC_MAX_FIELDS; f++) {
        if (out[f] != NULL && fclose(out[f]) != 0)
            status = 1;
        if (lens[f] != NULL && fclose(lens[f]) != 0)
            status = 1;
    }
    free(raw);
    free(file);
    dsc_manifest_free(m);
    return status;
}
