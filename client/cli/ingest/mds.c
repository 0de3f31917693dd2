/* MosaicML Streaming MDS reader (see mds.h and docs/ingest.md for the layout). */
#include "mds.h"

#include "dscache_base.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t load_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int fail(char *err, size_t err_len, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t err_len, int rc, const char *fmt, ...) {
    if (err != NULL && err_len > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return rc;
}

static const struct {
    const char *name;
    int dtype;
} scalars[] = {
    {"int", DSC_DTYPE_I64},     {"int8", DSC_DTYPE_I8},     {"int16", DSC_DTYPE_I16},
    {"int32", DSC_DTYPE_I32},   {"int64", DSC_DTYPE_I64},   {"uint8", DSC_DTYPE_U8},
    {"uint16", DSC_DTYPE_U16},  {"uint32", DSC_DTYPE_U32},  {"uint64", DSC_DTYPE_I64},
    {"float16", DSC_DTYPE_F16}, {"float32", DSC_DTYPE_F32}, {"float64", DSC_DTYPE_F64},
};

static const char *const byte_encodings[] = {
    "bytes", "str", "jpeg", "png", "pil", "pkl", "json", "str_int", "str_float", "str_decimal"};

static int scalar_dtype(const char *name) {
    for (size_t i = 0; i < sizeof scalars / sizeof scalars[0]; i++)
        if (strcmp(scalars[i].name, name) == 0)
            return scalars[i].dtype;
    return 0;
}

/* Fills kind, dtype, dims and size from the encoding text. Returns 0 or DSC_ENOTSUP. */
static int classify(dsc_mds_column_t *c, char *why, size_t why_len) {
    const char *e = c->encoding;
    for (size_t i = 0; i < sizeof byte_encodings / sizeof byte_encodings[0]; i++)
        if (strcmp(e, byte_encodings[i]) == 0) {
            c->kind = DSC_MDS_BYTES;
            c->dtype = DSC_DTYPE_U8;
            c->size = 0;
            return 0;
        }
    int dtype = scalar_dtype(e);
    if (dtype != 0) {
        c->kind = DSC_MDS_SCALAR;
        c->dtype = dtype;
        c->u64_as_i64 = strcmp(e, "uint64") == 0;
        c->size = (uint64_t)dsc_dtype_size(dtype);
        return 0;
    }
    if (strcmp(e, "ndarray") == 0) {
        c->kind = DSC_MDS_NDARRAY_DYN;
        c->dtype = 0;
        c->size = 0;
        return 0;
    }
    if (strncmp(e, "ndarray:", 8) == 0) {
        char dtype_name[16];
        const char *p = e + 8, *colon = strchr(p, ':');
        size_t name_len = colon ? (size_t)(colon - p) : strlen(p);
        if (name_len >= sizeof dtype_name)
            return fail(why, why_len, DSC_ENOTSUP, "ndarray dtype in '%s' is unknown", e);
        memcpy(dtype_name, p, name_len);
        dtype_name[name_len] = '\0';
        dtype = scalar_dtype(dtype_name);
        if (dtype == 0 || strcmp(dtype_name, "int") == 0)
            return fail(why, why_len, DSC_ENOTSUP,
                        "ndarray dtype '%s' is not one of int8..int64, "
                        "uint8..uint64, float16/32/64",
                        dtype_name);
        c->dtype = dtype;
        c->u64_as_i64 = strcmp(dtype_name, "uint64") == 0;
        if (colon == NULL) { /* a fixed dtype, the shape stored per value */
            c->kind = DSC_MDS_NDARRAY_DYN;
            c->size = 0;
            return 0;
        }
        c->kind = DSC_MDS_NDARRAY;
        uint64_t elements = 1;
        p = colon + 1;
        c->ndim = 0;
        while (*p != '\0') {
            char *end;
            unsigned long long d = strtoull(p, &end, 10);
            if (end == p || d == 0 || d > UINT32_MAX || (*end != ',' && *end != '\0') ||
                c->ndim == DSC_MDS_MAX_DIMS)
                return fail(why, why_len, DSC_ENOTSUP,
                            "ndarray shape in '%s' is not 1 to %d "
                            "dimensions >= 1",
                            e, DSC_MDS_MAX_DIMS);
            if (elements > UINT64_MAX / 16 / d)
                return fail(why, why_len, DSC_ENOTSUP, "ndarray shape in '%s' is too large", e);
            elements *= d;
            c->dims[c->ndim++] = (uint32_t)d;
            p = *end == ',' ? end + 1 : end;
        }
        if (c->ndim == 0)
            return fail(why, why_len, DSC_ENOTSUP, "ndarray shape in '%s' is empty", e);
        c->size = elements * (uint64_t)dsc_dtype_size(dtype);
        return 0;
    }
    return fail(why, why_len, DSC_ENOTSUP, "unknown encoding '%s'", e);
}

/* A relative path inside the dataset directory: not empty, not absolute, no "." or ".."
 * component (merged indexes name shards as "SUBDIR/shard.00000.mds"). */
static int plain_name(const char *s) {
    if (s[0] == '\0' || s[0] == '/')
        return 0;
    for (const char *p = s; *p;) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return 0;
        p += n + (slash != NULL);
        if (slash != NULL && *p == '\0')
            return 0; /* a trailing slash */
    }
    return 1;
}

static int copy_string(char *dst, size_t cap, const cJSON *item) {
    if (!cJSON_IsString(item) || item->valuestring == NULL || strlen(item->valuestring) >= cap)
        return -1;
    memcpy(dst, item->valuestring, strlen(item->valuestring) + 1);
    return 0;
}

static int get_u64(const cJSON *obj, const char *key, uint64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 9007199254740992.0 ||
        v->valuedouble != (double)(uint64_t)v->valuedouble)
        return -1;
    *out = (uint64_t)v->valuedouble;
    return 0;
}

static int parse_file_info(const cJSON *obj, char *name, size_t cap, uint64_t *bytes) {
    if (!cJSON_IsObject(obj))
        return -1;
    if (copy_string(name, cap, cJSON_GetObjectItemCaseSensitive(obj, "basename")) < 0 ||
        !plain_name(name) || get_u64(obj, "bytes", bytes) < 0)
        return -1;
    return 0;
}

/* Columns of shard s into cols; the first shard defines them, the others must match. */
static int parse_columns(const cJSON *shard, uint32_t s, dsc_mds_index_t *out, char *err,
                         size_t err_len) {
    const cJSON *names = cJSON_GetObjectItemCaseSensitive(shard, "column_names");
    const cJSON *encs = cJSON_GetObjectItemCaseSensitive(shard, "column_encodings");
    const cJSON *sizes = cJSON_GetObjectItemCaseSensitive(shard, "column_sizes");
    if (!cJSON_IsArray(names) || !cJSON_IsArray(encs) || !cJSON_IsArray(sizes))
        return fail(err, err_len, DSC_EBADMANIFEST,
                    "shard %u: column_names, column_encodings or column_sizes missing", s);
    int n = cJSON_GetArraySize(names);
    if (n < 1 || n > DSC_MDS_MAX_COLUMNS || cJSON_GetArraySize(encs) != n ||
        cJSON_GetArraySize(sizes) != n)
        return fail(err, err_len, DSC_EBADMANIFEST,
                    "shard %u: 1 to %d columns with as many encodings and sizes expected", s,
                    DSC_MDS_MAX_COLUMNS);
    if (s > 0 && (uint32_t)n != out->column_count)
        return fail(err, err_len, DSC_EBADMANIFEST, "shard %u: %d columns, shard 0 has %u", s, n,
                    out->column_count);
    for (int i = 0; i < n; i++) {
        dsc_mds_column_t c;
        memset(&c, 0, sizeof c);
        if (copy_string(c.name, sizeof c.name, cJSON_GetArrayItem(names, i)) < 0 ||
            c.name[0] == '\0')
            return fail(err, err_len, DSC_EBADMANIFEST, "shard %u: column %d: bad name", s, i);
        if (copy_string(c.encoding, sizeof c.encoding, cJSON_GetArrayItem(encs, i)) < 0)
            return fail(err, err_len, DSC_EBADMANIFEST, "shard %u: column '%s': bad encoding", s,
                        c.name);
        char why[160];
        int rc = classify(&c, why, sizeof why);
        if (rc < 0)
            return fail(err, err_len, rc, "column '%s': %s", c.name, why);
        const cJSON *size = cJSON_GetArrayItem(sizes, i);
        uint64_t declared = 0;
        if (cJSON_IsNull(size))
            declared = 0;
        else if (!cJSON_IsNumber(size) || size->valuedouble < 1 ||
                 size->valuedouble > 9007199254740992.0 ||
                 size->valuedouble != (double)(uint64_t)size->valuedouble)
            return fail(err, err_len, DSC_EBADMANIFEST, "shard %u: column '%s': bad size", s,
                        c.name);
        else
            declared = (uint64_t)size->valuedouble;
        if (declared != c.size)
            return fail(err, err_len, DSC_EBADMANIFEST,
                        "shard %u: column '%s': size %llu disagrees with encoding '%s' (%llu)", s,
                        c.name, (unsigned long long)declared, c.encoding,
                        (unsigned long long)c.size);
        if (s == 0) {
            for (int j = 0; j < i; j++)
                if (strcmp(out->columns[j].name, c.name) == 0)
                    return fail(err, err_len, DSC_EBADMANIFEST, "column '%s' appears twice",
                                c.name);
            out->columns[i] = c;
        } else if (strcmp(out->columns[i].name, c.name) != 0 ||
                   strcmp(out->columns[i].encoding, c.encoding) != 0) {
            return fail(err, err_len, DSC_EBADMANIFEST,
                        "shard %u: column %d is '%s' (%s), shard 0 has '%s' (%s)", s, i, c.name,
                        c.encoding, out->columns[i].name, out->columns[i].encoding);
        }
    }
    out->column_count = (uint32_t)n;
    return 0;
}

int dsc_mds_index_parse(const char *json, size_t len, dsc_mds_index_t *out, char *err,
                        size_t err_len) {
    memset(out, 0, sizeof *out);
    if (err != NULL && err_len > 0)
        err[0] = '\0';
    cJSON *root = cJSON_ParseWithLength(json, len);
    int rc;
    if (root == NULL)
        return fail(err, err_len, DSC_EBADMANIFEST, "not valid JSON");
    const cJSON *version = cJSON_GetObjectItemCaseSensitive(root, "version");
    const cJSON *shards = cJSON_GetObjectItemCaseSensitive(root, "shards");
    if (!cJSON_IsNumber(version) || version->valuedouble != 2) {
        rc = fail(err, err_len, DSC_EBADMANIFEST, "index version is not 2");
        goto cleanup;
    }
    if (!cJSON_IsArray(shards) || cJSON_GetArraySize(shards) < 1) {
        rc = fail(err, err_len, DSC_EBADMANIFEST, "no \"shards\" list");
        goto cleanup;
    }
    int count = cJSON_GetArraySize(shards);
    out->shards = calloc((size_t)count, sizeof *out->shards);
    if (out->shards == NULL) {
        rc = DSC_ENOMEM;
        goto cleanup;
    }
    out->shard_count = (uint32_t)count;
    uint32_t s = 0;
    const cJSON *shard;
    cJSON_ArrayForEach(shard, shards) {
        dsc_mds_shard_info_t *info = &out->shards[s];
        const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(shard, "format");
        const cJSON *sv = cJSON_GetObjectItemCaseSensitive(shard, "version");
        if (!cJSON_IsObject(shard) || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, "mds") ||
            !cJSON_IsNumber(sv) || sv->valuedouble != 2) {
            rc = fail(err, err_len,
                      cJSON_IsString(fmt) && strcmp(fmt->valuestring, "mds") ? DSC_ENOTSUP
                                                                             : DSC_EBADMANIFEST,
                      "shard %u: not an MDS version 2 shard (format \"mds\", version 2)", s);
            goto cleanup;
        }
        if (get_u64(shard, "samples", &info->samples) < 0 || info->samples > UINT32_MAX) {
            rc = fail(err, err_len, DSC_EBADMANIFEST, "shard %u: bad \"samples\"", s);
            goto cleanup;
        }
        if (parse_file_info(cJSON_GetObjectItemCaseSensitive(shard, "raw_data"), info->raw_basename,
                            sizeof info->raw_basename, &info->raw_bytes) < 0) {
            rc = fail(err, err_len, DSC_EBADMANIFEST, "shard %u: bad \"raw_data\"", s);
            goto cleanup;
        }
        const cJSON *compression = cJSON_GetObjectItemCaseSensitive(shard, "compression");
        const cJSON *zip = cJSON_GetObjectItemCaseSensitive(shard, "zip_data");
        if (compression == NULL || cJSON_IsNull(compression)) {
            if (zip != NULL && !cJSON_IsNull(zip)) {
                rc = fail(err, err_len, DSC_EBADMANIFEST,
                          "shard %u: zip_data without a compression", s);
                goto cleanup;
            }
        } else {
            if (!cJSON_IsString(compression) ||
                (strcmp(compression->valuestring, "zstd") != 0 &&
                 strncmp(compression->valuestring, "zstd:", 5) != 0)) {
                rc = fail(err, err_len, DSC_ENOTSUP,
                          "shard %u: compression %s: only zstd is supported", s,
                          cJSON_IsString(compression) ? compression->valuestring : "?");
                goto cleanup;
            }
            if (parse_file_info(zip, info->zip_basename, sizeof info->zip_basename,
                                &info->zip_bytes) < 0) {
                rc = fail(err, err_len, DSC_EBADMANIFEST, "shard %u: bad \"zip_data\"", s);
                goto cleanup;
            }
            info->zstd = 1;
        }
        rc = parse_columns(shard, s, out, err, err_len);
        if (rc < 0)
            goto cleanup;
        out->samples += info->samples;
        s++;
    }
    rc = 0;
cleanup:
    cJSON_Delete(root);
    if (rc < 0)
        dsc_mds_index_free(out);
    return rc;
}

void dsc_mds_index_free(dsc_mds_index_t *index) {
    if (index == NULL)
        return;
    free(index->shards);
    index->shards = NULL;
    index->shard_count = 0;
}

int dsc_mds_shard_open(const uint8_t *buf, size_t len, uint64_t expected_samples,
                       dsc_mds_shard_t *out, const char **problem) {
    memset(out, 0, sizeof *out);
    *problem = NULL;
    if (len < 4) {
        *problem = "shorter than its sample count";
        return DSC_ETRUNCATED;
    }
    uint32_t n = load_u32(buf);
    if (n != expected_samples) {
        *problem = "sample count disagrees with index.json";
        return DSC_EBADHEADER;
    }
    uint64_t table_end = 4 + ((uint64_t)n + 1) * 4;
    if (table_end > len) {
        *problem = "shorter than its offset table";
        return DSC_ETRUNCATED;
    }
    uint32_t prev = load_u32(buf + 4);
    if (prev < table_end) {
        *problem = "first sample offset inside the offset table";
        return DSC_EBADHEADER;
    }
    for (uint32_t i = 1; i <= n; i++) {
        uint32_t v = load_u32(buf + 4 + 4 * (uint64_t)i);
        if (v < prev) {
            *problem = "sample offsets decrease";
            return DSC_EBADHEADER;
        }
        prev = v;
    }
    if (prev > len) {
        *problem = "the last sample ends past the end of the shard";
        return DSC_ETRUNCATED;
    }
    out->buf = buf;
    out->len = len;
    out->samples = n;
    return 0;
}

int dsc_mds_table_begin(dsc_mds_table_t *t, uint32_t count, uint64_t expected_samples,
                        uint64_t shard_bytes, uint64_t sample_limit, const char **problem) {
    memset(t, 0, sizeof *t);
    *problem = NULL;
    if (count != expected_samples) {
        *problem = "sample count disagrees with index.json";
        return DSC_EBADHEADER;
    }
    t->samples = count;
    t->table_end = 4 + ((uint64_t)count + 1) * 4;
    t->shard_bytes = shard_bytes;
    t->sample_limit = sample_limit;
    if (t->table_end > shard_bytes) {
        *problem = "shorter than its offset table";
        return DSC_ETRUNCATED;
    }
    return 0;
}

int dsc_mds_table_next(dsc_mds_table_t *t, uint32_t offset, uint64_t *sample_bytes,
                       const char **problem) {
    *problem = NULL;
    *sample_bytes = 0;
    if (t->given > t->samples)
        return DSC_ERANGE;
    if (t->given == 0) {
        if (offset < t->table_end) {
            *problem = "first sample offset inside the offset table";
            return DSC_EBADHEADER;
        }
        if (offset > t->shard_bytes) {
            *problem = "the first sample starts past the end of the shard";
            return DSC_ETRUNCATED;
        }
        t->first = t->prev = offset;
        t->given = 1;
        return 0;
    }
    if (offset < t->prev) {
        *problem = "sample offsets decrease";
        return DSC_EBADHEADER;
    }
    if (offset > t->shard_bytes) {
        *problem = "a sample ends past the end of the shard";
        return DSC_ETRUNCATED;
    }
    *sample_bytes = (uint64_t)offset - t->prev;
    t->prev = offset;
    t->given++;
    if (*sample_bytes > t->sample_limit) {
        *problem = "a sample over the size limit";
        return DSC_ETOOLARGE;
    }
    return 0;
}

int dsc_mds_sample(const dsc_mds_shard_t *shard, const dsc_mds_index_t *index, uint32_t i,
                   dsc_mds_value_t *values, const char **problem) {
    *problem = NULL;
    if (i >= shard->samples)
        return DSC_ERANGE;
    uint32_t begin = load_u32(shard->buf + 4 + 4 * (uint64_t)i);
    uint32_t end = load_u32(shard->buf + 8 + 4 * (uint64_t)i);
    /* open checked the order and the bounds */
    return dsc_mds_sample_split(index, shard->buf + begin, end - begin, values, problem);
}

int dsc_mds_sample_split(const dsc_mds_index_t *index, const uint8_t *data, uint64_t len,
                         dsc_mds_value_t *values, const char **problem) {
    *problem = NULL;
    const uint8_t *p = data;
    uint64_t left = len;
    uint64_t sizes[DSC_MDS_MAX_COLUMNS];
    for (uint32_t c = 0; c < index->column_count; c++) {
        if (index->columns[c].size != 0) {
            sizes[c] = index->columns[c].size;
            continue;
        }
        if (left < 4) {
            *problem = "shorter than its column sizes";
            return DSC_ECORRUPT;
        }
        sizes[c] = load_u32(p);
        p += 4;
        left -= 4;
    }
    for (uint32_t c = 0; c < index->column_count; c++) {
        if (sizes[c] > left) {
            *problem = "a column runs past the end of the sample";
            return DSC_ECORRUPT;
        }
        values[c].data = p;
        values[c].bytes = sizes[c];
        p += sizes[c];
        left -= sizes[c];
    }
    if (left != 0) {
        *problem = "bytes left after the last column";
        return DSC_ECORRUPT;
    }
    return 0;
}

static int value_dtype(unsigned code) {
    switch (code) {
    case 8:
        return DSC_DTYPE_U8;
    case 9:
        return DSC_DTYPE_I8;
    case 16:
        return DSC_DTYPE_U16;
    case 17:
        return DSC_DTYPE_I16;
    case 18:
        return DSC_DTYPE_F16;
    case 32:
        return DSC_DTYPE_U32;
    case 33:
        return DSC_DTYPE_I32;
    case 34:
        return DSC_DTYPE_F32;
    case 64:
    case 65:
        return DSC_DTYPE_I64;
    case 66:
        return DSC_DTYPE_F64;
    default:
        return 0;
    }
}

int dsc_mds_ndarray(const dsc_mds_column_t *column, const uint8_t *data, uint64_t len, int *dtype,
                    uint32_t *ndim, uint64_t shape[DSC_MDS_MAX_DIMS], uint64_t *values_off,
                    const char **problem) {
    uint64_t at = 0;
    *problem = NULL;
    *dtype = column->dtype;
    if (*dtype == 0) {
        if (len < 1 || (*dtype = value_dtype(data[0])) == 0) {
            *problem = "ndarray: missing or unknown dtype code";
            return DSC_ECORRUPT;
        }
        at = 1;
    }
    if (at >= len) {
        *problem = "ndarray: missing its shape";
        return DSC_ECORRUPT;
    }
    unsigned byte = data[at++];
    *ndim = byte >> 2;
    unsigned width = 1u << (byte & 3);
    if (*ndim < 1 || *ndim > DSC_MDS_MAX_DIMS) {
        *problem = "ndarray: 0 or more than 8 dimensions";
        return DSC_ECORRUPT;
    }
    if (len - at < (uint64_t)*ndim * width) {
        *problem = "ndarray: shorter than its shape";
        return DSC_ECORRUPT;
    }
    uint64_t elements = 1;
    for (uint32_t i = 0; i < *ndim; i++) {
        uint64_t d = 0;
        for (unsigned b = width; b-- > 0;)
            d = d << 8 | data[at + b];
        at += width;
        if (d == 0 || d > UINT32_MAX || elements > UINT64_MAX / 16 / d) {
            *problem = "ndarray: a zero or oversized dimension";
            return DSC_ECORRUPT;
        }
        shape[i] = d;
        elements *= d;
    }
    if (len - at != elements * (uint64_t)dsc_dtype_size(*dtype)) {
        *problem = "ndarray: values disagree with the shape";
        return DSC_ECORRUPT;
    }
    *values_off = at;
    return 0;
}
