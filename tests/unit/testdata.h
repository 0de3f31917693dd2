/* Dataset helpers for the test and benchmark programs: read a file, decode a whole dataset
 * sample-major from its shard files, compare a loader batch with it, read "--name value"
 * options into variables. Header-only (static inline, so a program pays for what it calls). */
#ifndef DSC_TESTDATA_H
#define DSC_TESTDATA_H

#include "dscache.h"
#include "manifest.h"
#include "manifest_io.h"
#include "shard.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads the whole file at path into a new buffer (the caller frees it) and sets *len. Returns
 * NULL when the file cannot be opened or read, or is empty (*len is then 0 or its size). */
static inline uint8_t *testdata_read_file(const char *path, uint64_t *len) {
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    uint8_t *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long size = ftell(f);
        if (size > 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)size)) != NULL &&
            fread(buf, 1, (size_t)size, f) != (size_t)size) {
            free(buf);
            buf = NULL;
        }
        *len = size > 0 ? (uint64_t)size : 0;
    }
    fclose(f);
    return buf;
}

/* A dataset as the loader should hand it out: sample i, field f is the field's sample_bytes
 * at bytes + i * sample_bytes + field_in_sample[f]. */
typedef struct testdata {
    uint8_t *bytes; /* samples * sample_bytes, sample-major; NULL when loaded without decode */
    uint64_t samples, sample_bytes;
    dsc_schema_t schema;
    uint64_t field_in_sample[DSC_MAX_FIELDS]; /* offset of each field inside one sample */
} testdata_t;

/* Frees what testdata_load allocated and zeroes *td. NULL and zeroed structs are fine. */
static inline void testdata_free(testdata_t *td) {
    if (td == NULL)
        return;
    free(td->bytes);
    memset(td, 0, sizeof *td);
}

/* Loads the dataset directory dir: its manifest (schema and sizes), and with decode != 0 every
 * chunk of every shard file, checksums verified, decoded into td->bytes. Files that disagree with
 * the manifest (schema, sample counts) are refused, never read past. Returns 0, or a DSC_E* code
 * after a line on stderr naming the file (then *td holds nothing to free). */
static inline int testdata_load(const char *dir, int decode, testdata_t *td) {
    memset(td, 0, sizeof *td);
    dsc_manifest_t *m = NULL;
    uint8_t *file = NULL, *raw = NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    int rc = dsc_manifest_load(dir, &m);
    if (rc < 0)
        goto fail;
    td->schema = m->schema;
    td->sample_bytes = m->schema.sample_bytes;
    td->samples = m->samples;
    uint64_t off = 0;
    for (uint32_t f = 0; f < td->schema.field_count; f++) {
        td->field_in_sample[f] = off;
        off += td->schema.fields[f].sample_bytes;
    }
    if (!decode) {
        dsc_manifest_free(m);
        return 0;
    }
    rc = DSC_ENOMEM;
    if (td->samples > SIZE_MAX / (td->sample_bytes ? td->sample_bytes : 1) ||
        (td->bytes = malloc(td->samples * td->sample_bytes + 1)) == NULL)
        goto fail;
    uint64_t first = 0;
    for (uint32_t s = 0; s < m->shard_count; s++) {
        snprintf(path, sizeof path, "%s/%s", dir, m->shards[s].file);
        uint64_t len = 0;
        free(file);
        rc = DSC_EIO;
        if ((file = testdata_read_file(path, &len)) == NULL)
            goto fail;
        dsc_shard_view_t view;
        if ((rc = dsc_shard_parse(file, len, &view)) < 0)
            goto fail;
        /* The index is checked against the shard's own header: with the manifest's schema and
         * counts equal to it, every copy below stays inside raw and td->bytes. */
        rc = DSC_EBADMANIFEST;
        if (!dsc_schema_equal(&view.header.schema, &m->schema) ||
            view.header.sample_count != m->shards[s].samples ||
            m->shards[s].samples > td->samples - first)
            goto fail;
        for (uint32_t c = 0; c < view.footer.chunk_count; c++) {
            dsc_chunk_entry_t e;
            if ((rc = dsc_shard_chunk(&view, c, &e)) < 0)
                goto fail;
            free(raw);
            rc = DSC_ENOMEM;
            if ((raw = malloc(e.raw_len ? e.raw_len : 1)) == NULL)
                goto fail;
            rc = dsc_chunk_decode(&e, dsc_shard_chunk_data(&view, &e), raw, e.raw_len);
            if (rc >= 0 && rc != (int)e.raw_len)
                rc = DSC_EBADINDEX;
            if (rc < 0)
                goto fail;
            for (uint32_t k = 0; k < e.sample_count; k++)
                for (uint32_t f = 0; f < td->schema.field_count; f++) {
                    uint64_t fsb = td->schema.fields[f].sample_bytes;
                    memcpy(td->bytes + (first + e.first_sample + k) * td->sample_bytes +
                               td->field_in_sample[f],
                           raw + dsc_schema_field_offset(&td->schema, f, e.sample_count) + k * fsb,
                           fsb);
                }
        }
        first += m->shards[s].samples;
    }
    rc = DSC_EBADMANIFEST;
    if (first != td->samples)
        goto fail;
    free(raw);
    free(file);
    dsc_manifest_free(m);
    return 0;
fail:
    fprintf(stderr, "testdata: %s: %s (%s)\n", path, dsc_strerror(rc), dsc_err_name(rc));
    free(raw);
    free(file);
    dsc_manifest_free(m);
    testdata_free(td);
    return rc;
}

/* Counts the (sample, field) pairs of batch b, over its first field_count fields, whose bytes
 * differ from td; a sample index past the dataset, and a field view on a device or shorter than
 * the batch, count as differing. Returns the count, or DSC_EINVAL when td was loaded without decode
 * or field_count exceeds its schema, or the error of dsc_batch_field. */
static inline int testdata_batch_mismatches(const testdata_t *td, dsc_batch_t *b,
                                            uint32_t field_count) {
    if (td->bytes == NULL || field_count > td->schema.field_count)
        return DSC_EINVAL;
    uint32_t n = dsc_batch_samples(b);
    const uint64_t *idx = dsc_batch_indices(b);
    int bad = 0;
    for (uint32_t f = 0; f < field_count; f++) {
        dsc_tensor_view_t v;
        int rc = dsc_batch_field(b, f, &v);
        if (rc < 0)
            return rc;
        uint64_t fsb = td->schema.fields[f].sample_bytes;
        for (uint32_t k = 0; k < n; k++)
            if (idx[k] >= td->samples || v.device != -1 || v.bytes < (uint64_t)(k + 1) * fsb ||
                memcmp((const uint8_t *)v.data + k * fsb,
                       td->bytes + idx[k] * td->sample_bytes + td->field_in_sample[f], fsb) != 0)
                bad++;
    }
    return bad;
}

/* ---- "--name value" options ------------------------------------------------------------- */

typedef enum { TESTOPT_STR, TESTOPT_U32, TESTOPT_U64, TESTOPT_INT, TESTOPT_DOUBLE } testopt_kind_t;

/* One option: its name and the variable its value goes to. Build entries with TESTOPT. */
typedef struct testopt {
    const char *name;
    testopt_kind_t kind;
    void *value;
} testopt_t;

/* {"--name", &variable}: the variable's type (const char *, uint32_t, uint64_t, int, double)
 * picks how the value is read; any other type does not compile. */
#define TESTOPT(name, ptr)                                                                           \
    {                                                                                                \
        (name),                                                                                    \
            _Generic((ptr),                                                                        \
                const char **: TESTOPT_STR,                                                        \
                uint32_t *: TESTOPT_U32,                                                           \
                uint64_t *: TESTOPT_U64,                                                           \
                int *: TESTOPT_INT,                                                                \
                double *: TESTOPT_DOUBLE),                                                         \
            (void *)(ptr) \
    }

/* Reads argv[first], argv[first + 1], ... as "--name value" pairs into the variables of opts
 * (count entries): strings as given, numbers the way atoi / strtoull / atof read them (no range
 * check); a last word without a value is ignored. Returns 0, or 2 after "PROG: unknown option
 * NAME" on stderr. */
static inline int testopt_parse(const char *prog, int argc, char **argv, int first,
                                const testopt_t *opts, size_t count) {
    for (int i = first; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        size_t o = 0;
        while (o < count && strcmp(k, opts[o].name) != 0)
            o++;
        if (o == count) {
            fprintf(stderr, "%s: unknown option %s\n", prog, k);
            return 2;
        }
        switch (opts[o].kind) {
        case TESTOPT_STR:
            *(const char **)opts[o].value = v;
            break;
        case TESTOPT_U32:
            *(uint32_t *)opts[o].value = (uint32_t)atoi(v);
            break;
        case TESTOPT_U64:
            *(uint64_t *)opts[o].value = strtoull(v, NULL, 10);
            break;
        case TESTOPT_INT:
            *(int *)opts[o].value = atoi(v);
            break;
        case TESTOPT_DOUBLE:
            *(double *)opts[o].value = atof(v);
            break;
        }
    }
    return 0;
}

#endif
