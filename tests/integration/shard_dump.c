/* Test helper: decodes every sample of a dataset directory and writes one file per field,
 * OUT_DIR/<field>.bin, holding that field of sample 0, 1, 2, ... back to back (numpy order). A
 * variable-length field also gets OUT_DIR/<field>.offsets.bin: samples + 1 int64 row offsets
 * into <field>.bin, dataset-wide (each chunk's layout is checked with dsc_chunk_layout). */
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
        fprintf(stderr, "usage: shard_dump DATASET_DIR OUT_DIR\n");
        return 2;
    }
    dsc_manifest_t *m = NULL;
    int rc = dsc_manifest_load(argv[1], &m);
    if (rc < 0) {
        fprintf(stderr, "shard_dump: %s: %s\n", argv[1], dsc_strerror(rc));
        return 1;
    }
    int status = 1;
    FILE *out[DSC_MAX_FIELDS] = {0}, *offs[DSC_MAX_FIELDS] = {0};
    uint64_t rows_done[DSC_MAX_FIELDS] = {0};
    uint8_t *raw = NULL;
    uint8_t *file = NULL;
    uint64_t samples = 0;
    for (uint32_t f = 0; f < m->schema.field_count; f++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.bin", argv[2], m->schema.fields[f].name);
        out[f] = fopen(path, "wb");
        if (out[f] == NULL) {
            fprintf(stderr, "shard_dump: %s: %s\n", path, strerror(errno));
            goto cleanup;
        }
        if (m->schema.fields[f].variable) {
            snprintf(path, sizeof path, "%s/%s.offsets.bin", argv[2], m->schema.fields[f].name);
            offs[f] = fopen(path, "wb");
            int64_t zero = 0;
            if (offs[f] == NULL || fwrite(&zero, 8, 1, offs[f]) != 1) {
                fprintf(stderr, "shard_dump: %s: %s\n", path, strerror(errno));
                goto cleanup;
            }
        }
    }
    for (uint32_t s = 0; s < m->shard_count; s++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[1], m->shards[s].file);
        uint64_t len = 0;
        free(file);
        file = testdata_read_file(path, &len);
        if (file == NULL) {
            fprintf(stderr, "shard_dump: cannot read %s\n", path);
            goto cleanup;
        }
        dsc_shard_view_t view;
        rc = dsc_shard_parse(file, len, &view);
        if (rc < 0) {
            fprintf(stderr, "shard_dump: %s: %s\n", path, dsc_strerror(rc));
            goto cleanup;
        }
        if (!dsc_schema_equal(&view.header.schema, &m->schema)) {
            fprintf(stderr, "shard_dump: %s: schema differs from the manifest\n", path);
            goto cleanup;
        }
        for (uint32_t i = 0; i < view.footer.chunk_count; i++) {
            dsc_chunk_entry_t e;
            if ((rc = dsc_shard_chunk(&view, i, &e)) < 0)
                goto chunk_error;
            free(raw);
            raw = malloc(e.raw_len ? e.raw_len : 1);
            if (raw == NULL)
                goto cleanup;
            rc = dsc_chunk_decode(&e, dsc_shard_chunk_data(&view, &e), raw, e.raw_len);
            if (rc < 0)
                goto chunk_error;
            dsc_chunk_layout_t layout;
            if ((rc = dsc_chunk_layout(&m->schema, e.sample_count, raw, e.raw_len, &layout)) < 0)
                goto chunk_error;
            for (uint32_t f = 0; f < m->schema.field_count; f++) {
                const dsc_chunk_field_t *cf = &layout.fields[f];
                if (fwrite(cf->values, 1, (size_t)cf->bytes, out[f]) != cf->bytes) {
                    fprintf(stderr, "shard_dump: write failed\n");
                    goto cleanup;
                }
                for (uint32_t k = 1; offs[f] != NULL && k <= e.sample_count; k++) {
                    int64_t at = (int64_t)(rows_done[f] + dsc_chunk_offset(&layout, f, k));
                    if (fwrite(&at, 8, 1, offs[f]) != 1) {
                        fprintf(stderr, "shard_dump: write failed\n");
                        goto cleanup;
                    }
                }
                rows_done[f] += cf->rows;
            }
            samples += e.sample_count;
            continue;
        chunk_error:
            fprintf(stderr, "shard_dump: %s: chunk %u: %s\n", path, i, dsc_strerror(rc));
            goto cleanup;
        }
    }
    printf("%llu samples\n", (unsigned long long)samples);
    status = samples == m->samples ? 0 : 1;

cleanup:
    for (uint32_t f = 0; f < DSC_MAX_FIELDS; f++)
        if ((out[f] != NULL && fclose(out[f]) != 0) || (offs[f] != NULL && fclose(offs[f]) != 0))
            status = 1;
    free(raw);
    free(file);
    dsc_manifest_free(m);
    return status;
}
