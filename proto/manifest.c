/* Dataset manifest (proto/FORMAT.md): JSON codec with cJSON, whole-manifest validation,
 * sample-to-shard lookup. A pure codec, from and to memory: the file I/O (load, atomic save of
 * DIR/manifest.json) is sys/manifest_io.c. */
#include "manifest.h"
#include "protocol.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#define MANIFEST_FORMAT "dscache-manifest"
#define MANIFEST_VERSION 1            /* fixed-shape fields only */
#define MANIFEST_VERSION_VAR 2        /* at least one variable field */
#define EXACT_DOUBLE_MAX (1ull << 53) /* larger integers are written as "0x..." strings */
/* Smallest possible shard file: the smallest header (51 bytes) and the footer. */
#define SHARD_MIN_BYTES (51 + DSC_SHARD_FOOTER_SIZE)

dsc_manifest_t *dsc_manifest_alloc(uint32_t shard_count) {
    dsc_manifest_t *manifest = calloc(1, sizeof *manifest);
    if (manifest == NULL)
        return NULL;
    manifest->shards = calloc(shard_count ? shard_count : 1, sizeof *manifest->shards);
    if (manifest->shards == NULL) {
        free(manifest);
        return NULL;
    }
    manifest->shard_count = shard_count;
    return manifest;
}

void dsc_manifest_free(dsc_manifest_t *manifest) {
    if (manifest == NULL)
        return;
    free(manifest->shards);
    free(manifest->meta_json);
    free(manifest);
}

void dsc_manifest_finish(dsc_manifest_t *manifest) {
    (void)dsc_schema_finish(&manifest->schema); /* validity is judged by parse and save */
    uint64_t samples = 0, bytes = 0;
    for (uint32_t i = 0; i < manifest->shard_count; i++) {
        manifest->shards[i].first_sample = samples;
        samples += manifest->shards[i].samples;
        bytes += manifest->shards[i].bytes;
    }
    manifest->samples = samples;
    manifest->bytes = bytes;
}

uint64_t dsc_manifest_chunk_bound(const dsc_manifest_t *manifest, uint32_t chunk_samples) {
    const dsc_schema_t *schema = &manifest->schema;
    uint64_t bound = dsc_schema_chunk_min(schema, chunk_samples);
    for (uint32_t f = 0; f < schema->field_count && f < DSC_MAX_FIELDS; f++) {
        uint64_t rows;
        if (!schema->fields[f].variable)
            continue;
        if (__builtin_mul_overflow(manifest->field_stats[f].bytes_max, (uint64_t)chunk_samples,
                                   &rows) ||
            __builtin_add_overflow(bound, rows, &bound))
            return DSC_CHUNK_MAX_RAW;
    }
    if (schema->var_count > 0 && bound > DSC_CHUNK_MAX_RAW)
        return DSC_CHUNK_MAX_RAW;
    return bound;
}

int64_t dsc_manifest_find_sample(const dsc_manifest_t *manifest, uint64_t sample) {
    if (manifest == NULL || manifest->shard_count == 0 || sample >= manifest->samples)
        return -1;
    /* The last shard whose first_sample <= sample holds it: an empty shard shares its
     * first_sample with the next one, so it is never the last such shard. O(log n). */
    uint32_t lo = 0, hi = manifest->shard_count; /* answer in [lo, hi) */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (manifest->shards[mid].first_sample <= sample)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* ---- Parsing ------------------------------------------------------------------------------ */

static int name_ok(const char *name, size_t max_len) {
    size_t len = strlen(name);
    if (len == 0 || len > max_len)
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

/* A file name inside the dataset directory: a plain name, no '/', not "." or "..". */
static int file_ok(const char *name) {
    return name_ok(name, sizeof(((dsc_manifest_shard_t *)0)->file) - 1) && strcmp(name, ".") != 0 &&
           strcmp(name, "..") != 0;
}

/* Hex digits (either case) of a NUL-terminated string, at most 16 of them (callers check the
 * length). Returns 0 and *out, or -1 on a non-hex character. */
static int parse_hex(const char *s, uint64_t *out) {
    uint64_t value = 0;
    for (const char *p = s; *p; p++) {
        int digit;
        if (*p >= '0' && *p <= '9')
            digit = *p - '0';
        else if (*p >= 'a' && *p <= 'f')
            digit = *p - 'a' + 10;
        else if (*p >= 'A' && *p <= 'F')
            digit = *p - 'A' + 10;
        else
            return -1;
        value = value << 4 | (uint64_t)digit;
    }
    *out = value;
    return 0;
}

/* An unsigned integer: a JSON number that is an exact integer in [0, 2^53], or a string
 * "0x" + 1..16 hex digits. Returns 0 when it is one and <= max. */
static int get_u64(const cJSON *object, const char *key, uint64_t max, uint64_t *out) {
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(object, key);
    uint64_t value = 0;
    if (cJSON_IsNumber(item)) {
        double d = item->valuedouble;
        if (!(d >= 0.0 && d <= (double)EXACT_DOUBLE_MAX))
            return -1;
        value = (uint64_t)d;
        if ((double)value != d)
            return -1; /* not an integer */
    } else if (cJSON_IsString(item)) {
        const char *s = item->valuestring;
        if (s[0] != '0' || s[1] != 'x')
            return -1;
        size_t len = strlen(s + 2);
        if (len < 1 || len > 16 || parse_hex(s + 2, &value) < 0)
            return -1;
    } else {
        return -1;
    }
    if (value > max)
        return -1;
    *out = value;
    return 0;
}

static int get_u32(const cJSON *object, const char *key, uint32_t *out) {
    uint64_t value;
    if (get_u64(object, key, UINT32_MAX, &value) < 0)
        return -1;
    *out = (uint32_t)value;
    return 0;
}

/* Exactly 16 hex digits (lower or upper case). */
static int get_checksum(const cJSON *object, const char *key, uint64_t *out) {
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(object, key);
    if (!cJSON_IsString(item) || strlen(item->valuestring) != 16)
        return -1;
    uint64_t value;
    if (parse_hex(item->valuestring, &value) < 0)
        return -1;
    *out = value;
    return 0;
}

static const char *get_string(const cJSON *object, const char *key) {
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(object, key);
    return cJSON_IsString(item) ? item->valuestring : NULL;
}

/* A non-negative finite number. */
static int get_double(const cJSON *object, const char *key, double *out) {
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(object, key);
    if (!cJSON_IsNumber(item) || !(item->valuedouble >= 0.0 && item->valuedouble <= 1e300))
        return -1;
    *out = item->valuedouble;
    return 0;
}

/* The size statistics of variable field `field` (of a finished schema) over `samples` samples. */
static int parse_field_stats(const cJSON *item, const dsc_field_t *field, uint64_t samples,
                             dsc_manifest_field_stats_t *stats) {
    if (get_u64(item, "rows_total", UINT64_MAX, &stats->rows_total) < 0 ||
        get_u64(item, "rows_max", UINT64_MAX, &stats->rows_max) < 0 ||
        get_u64(item, "bytes_max", UINT64_MAX, &stats->bytes_max) < 0 ||
        get_double(item, "bytes_mean", &stats->bytes_mean) < 0)
        return DSC_EBADMANIFEST;
    uint64_t bytes, most;
    if (__builtin_mul_overflow(stats->rows_max, field->row_bytes, &bytes) ||
        bytes != stats->bytes_max || stats->rows_max > stats->rows_total)
        return DSC_EBADMANIFEST;
    if (!__builtin_mul_overflow(stats->rows_max, samples, &most) && stats->rows_total > most)
        return DSC_EBADMANIFEST; /* more rows than samples * the largest sample */
    if (stats->bytes_mean > (double)stats->bytes_max)
        return DSC_EBADMANIFEST;
    return 0;
}

static int parse_schema(const cJSON *array, dsc_schema_t *schema) {
    if (!cJSON_IsArray(array))
        return DSC_EBADMANIFEST;
    int count = cJSON_GetArraySize(array);
    if (count < 1 || count > DSC_MAX_FIELDS)
        return DSC_EBADSCHEMA;
    memset(schema, 0, sizeof *schema);
    schema->field_count = (uint32_t)count;
    uint32_t i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, array) {
        dsc_field_t *field = &schema->fields[i++];
        if (!cJSON_IsObject(item))
            return DSC_EBADMANIFEST;
        const char *name = get_string(item, "name");
        const char *dtype = get_string(item, "dtype");
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
        if (name == NULL || dtype == NULL || !cJSON_IsArray(shape))
            return DSC_EBADMANIFEST;
        if (!name_ok(name, DSC_MAX_NAME - 1))
            return DSC_EBADSCHEMA;
        memcpy(field->name, name, strlen(name) + 1);
        int dt = dsc_dtype_parse(dtype);
        if (dt < 0)
            return DSC_EBADSCHEMA;
        field->dtype = (uint8_t)dt;
        int ndim = cJSON_GetArraySize(shape);
        if (ndim > DSC_MAX_DIMS)
            return DSC_EBADSCHEMA;
        field->ndim = (uint8_t)ndim;
        uint32_t d = 0;
        const cJSON *dim;
        cJSON_ArrayForEach(dim, shape) {
            if (d == 0 && cJSON_IsNull(dim)) { /* a variable leading dimension */
                field->shape[d++] = DSC_DIM_VARIABLE;
                continue;
            }
            double v = cJSON_IsNumber(dim) ? dim->valuedouble : -1.0;
            if (!(v >= 1.0 && v <= (double)UINT32_MAX) || (double)(uint32_t)v != v)
                return DSC_EBADSCHEMA;
            field->shape[d++] = (uint32_t)v;
        }
    }
    int rc = dsc_schema_finish(schema);
    return rc < 0 ? DSC_EBADSCHEMA : 0;
}

static int parse_shard(const cJSON *item, uint32_t position, const dsc_schema_t *schema,
                       dsc_manifest_shard_t *shard) {
    if (!cJSON_IsObject(item))
        return DSC_EBADMANIFEST;
    uint32_t id;
    if (get_u32(item, "id", &id) < 0 || id != position)
        return DSC_EBADMANIFEST;
    shard->id = id;
    const char *file = get_string(item, "file");
    if (file == NULL || !file_ok(file))
        return DSC_EBADMANIFEST;
    memcpy(shard->file, file, strlen(file) + 1);
    if (get_u64(item, "samples", UINT64_MAX, &shard->samples) < 0 ||
        get_u64(item, "bytes", UINT64_MAX, &shard->bytes) < 0 ||
        get_u32(item, "chunks", &shard->chunks) < 0 ||
        get_u32(item, "chunk_samples", &shard->chunk_samples) < 0 ||
        get_checksum(item, "checksum", &shard->checksum) < 0)
        return DSC_EBADMANIFEST;
    /* The same rules a shard header obeys (proto/FORMAT.md). */
    if (shard->chunk_samples == 0 ||
        dsc_schema_chunk_min(schema, shard->chunk_samples) > DSC_CHUNK_MAX_RAW)
        return DSC_EBADMANIFEST;
    uint64_t chunks =
        shard->samples / shard->chunk_samples + (shard->samples % shard->chunk_samples != 0);
    if (chunks != shard->chunks)
        return DSC_EBADMANIFEST;
    if (shard->bytes < SHARD_MIN_BYTES + (uint64_t)shard->chunks * DSC_CHUNK_ENTRY_SIZE)
        return DSC_EBADMANIFEST;
    return 0;
}

/* ---- Scanning without allocating ---------------------------------------------------------- */

/* The manifest is scanned before anything is built: the whole document is checked (the syntax
 * cJSON accepts), then only the known keys' values are handed to cJSON, one shard at a time, so
 * that unknown keys (FORMAT.md: ignored) cost no memory however large, and the memory of a parse
 * is bounded by the shard count and "meta", not by the file's size. */
#define SCAN_MAX_DEPTH 1000 /* cJSON's nesting limit (CJSON_NESTING_LIMIT) */

/* cJSON skips every byte from 1 to 32 between tokens. */
static const char *skip_ws(const char *p, const char *end) {
    while (p < end && (unsigned char)*p <= 32 && *p != '\0')
        p++;
    return p;
}

static int hex4(const char *p, const char *end, unsigned *out) {
    if (end - p < 4)
        return -1;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        unsigned d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (unsigned)(c - 'A' + 10);
        else
            return -1;
        v = v << 4 | d;
    }
    *out = v;
    return 0;
}

/* A string at p ('"'): the escapes cJSON decodes (\uXXXX with valid surrogate pairs), any other
 * byte as it is. Returns the byte after the closing quote, or NULL. */
static const char *scan_string(const char *p, const char *end) {
    if (p >= end || *p != '"')
        return NULL;
    for (p++; p < end; p++) {
        if (*p == '"')
            return p + 1;
        if (*p != '\\')
            continue;
        if (++p >= end)
            return NULL;
        if (strchr("bfnrt\"\\/", *p) != NULL && *p != '\0')
            continue;
        unsigned u, low;
        if (*p != 'u' || hex4(p + 1, end, &u) < 0 || (u >= 0xDC00 && u <= 0xDFFF))
            return NULL;
        p += 4;
        if (u >= 0xD800 && u <= 0xDBFF) { /* a high surrogate: a low one must follow */
            if (end - p < 7 || p[1] != '\\' || p[2] != 'u' || hex4(p + 3, end, &low) < 0 ||
                low < 0xDC00 || low > 0xDFFF)
                return NULL;
            p += 6;
        }
    }
    return NULL;
}

static int number_char(char c) {
    return (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.' || c == 'e' || c == 'E';
}

static const char *digits(const char *p, const char *end) {
    while (p < end && *p >= '0' && *p <= '9')
        p++;
    return p;
}

/* A number as cJSON reads one: the longest prefix of a run of "0123456789+-.eE" (at most 63)
 * that strtod accepts (at least one character). A run that is a JSON number whole is all of it
 * (the common case, without strtod). Returns the byte after it, or NULL. */
static const char *scan_number(const char *p, const char *end) {
    size_t n = 0;
    while (p + n < end && n < 63 && number_char(p[n]))
        n++;
    const char *run_end = p + n, *q = p;
    if (q < run_end && *q == '-')
        q++;
    const char *int_end = digits(q, run_end);
    int json = int_end > q && (*q != '0' || int_end == q + 1);
    q = int_end;
    if (json && q < run_end && *q == '.') {
        const char *frac = digits(q + 1, run_end);
        json = frac > q + 1;
        q = frac;
    }
    if (json && q < run_end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < run_end && (*q == '+' || *q == '-'))
            q++;
        const char *exp = digits(q, run_end);
        json = exp > q;
        q = exp;
    }
    if (json && q == run_end && n < 63)
        return run_end;
    char buf[64];
    memcpy(buf, p, n);
    buf[n] = '\0';
    char *stop = NULL;
    (void)strtod(buf, &stop);
    return stop == buf ? NULL : p + (stop - buf);
}

static const char *scan_scalar(const char *p, const char *end) {
    if (p >= end)
        return NULL;
    if (*p == '"')
        return scan_string(p, end);
    static const char *const literals[] = {"null", "false", "true"};
    for (size_t i = 0; i < 3; i++) {
        size_t len = strlen(literals[i]);
        if ((size_t)(end - p) >= len && memcmp(p, literals[i], len) == 0)
            return p + len;
    }
    if (*p == '-' || (*p >= '0' && *p <= '9'))
        return scan_number(p, end);
    return NULL;
}

/* An object member's key and colon at p: returns the byte after ':' (and spaces), or NULL. */
static const char *scan_key(const char *p, const char *end) {
    p = scan_string(skip_ws(p, end), end);
    if (p == NULL)
        return NULL;
    p = skip_ws(p, end);
    return p < end && *p == ':' ? p + 1 : NULL;
}

/* Skips one JSON value at p (leading spaces allowed), checking its syntax as cJSON would;
 * iterative, a bit per nesting level. Returns the byte after it, or NULL. Never allocates. */
static const char *skip_value(const char *p, const char *end) {
    uint8_t is_object[SCAN_MAX_DEPTH / 8 + 1];
    unsigned depth = 0;
    for (;;) {
        /* A value is expected at p. */
        p = skip_ws(p, end);
        if (p >= end)
            return NULL;
        if (*p == '{' || *p == '[') {
            if (depth >= SCAN_MAX_DEPTH)
                return NULL;
            int object = *p == '{';
            if (object)
                is_object[depth / 8] |= (uint8_t)(1u << (depth % 8));
            else
                is_object[depth / 8] &= (uint8_t) ~(1u << (depth % 8));
            depth++;
            p = skip_ws(p + 1, end);
            if (p < end && *p == (object ? '}' : ']')) {
                p++;
                depth--;
            } else {
                if (object && (p = scan_key(p, end)) == NULL)
                    return NULL;
                continue;
            }
        } else if ((p = scan_scalar(p, end)) == NULL) {
            return NULL;
        }
        /* After a value: close containers until one goes on (',') or the value is whole. */
        for (;;) {
            if (depth == 0)
                return p;
            int object = (is_object[(depth - 1) / 8] >> ((depth - 1) % 8)) & 1;
            p = skip_ws(p, end);
            if (p >= end)
                return NULL;
            if (*p == ',') {
                p++;
                if (object && (p = scan_key(p, end)) == NULL)
                    return NULL;
                break;
            }
            if (*p != (object ? '}' : ']'))
                return NULL;
            p++;
            depth--;
        }
    }
}

/* Walks an array or object already checked by skip_value: each call gives the next element
 * (an object's: its key without quotes in key/key_len, escapes left as written) as
 * [value, value_end). */
typedef struct json_iter {
    const char *p, *end;
    int object, started;
    const char *key, *value, *value_end;
    size_t key_len;
} json_iter_t;

static void iter_init(json_iter_t *it, const char *value, const char *end) {
    memset(it, 0, sizeof *it);
    it->p = skip_ws(value, end);
    it->end = end;
    it->object = it->p < end && *it->p == '{';
}

/* Returns 1 with the next element, 0 at the end. */
static int iter_next(json_iter_t *it) {
    const char *q = skip_ws(it->p, it->end);
    if (q >= it->end)
        return 0;
    if (!it->started) {
        it->started = 1;
        if (*q != '{' && *q != '[')
            return 0;
        q = skip_ws(q + 1, it->end);
        if (*q == '}' || *q == ']')
            return 0;
    } else {
        if (*q != ',')
            return 0; /* the closing bracket */
        q = skip_ws(q + 1, it->end);
    }
    if (it->object) {
        const char *after = scan_string(q, it->end);
        it->key = q + 1;
        it->key_len = (size_t)(after - q) - 2;
        q = skip_ws(after, it->end) + 1; /* past ':' */
    }
    it->value = skip_ws(q, it->end);
    it->value_end = skip_value(it->value, it->end);
    it->p = it->value_end;
    return 1;
}

static int key_is(const json_iter_t *it, const char *name) {
    return it->key_len == strlen(name) && memcmp(it->key, name, it->key_len) == 0;
}

/* ---- Building only what is read ------------------------------------------------------------ */

/* A value read as a scalar: parsed by cJSON when it is one; an array or object becomes an empty
 * one (every reader of a scalar key refuses it by its type, as before), so that its contents
 * cost nothing. NULL on ENOMEM. */
static cJSON *build_scalar(const char *value, const char *value_end) {
    if (*value == '{')
        return cJSON_CreateObject();
    if (*value == '[')
        return cJSON_CreateArray();
    return cJSON_ParseWithLength(value, (size_t)(value_end - value));
}

/* An array of at most max + 1 scalars (the elements after the (max + 1)th are not read: a count
 * over max is refused by the reader); anything else as build_scalar. */
static cJSON *build_scalar_array(const char *value, const char *value_end, int max) {
    if (*value != '[')
        return build_scalar(value, value_end);
    cJSON *array = cJSON_CreateArray();
    json_iter_t it;
    iter_init(&it, value, value_end);
    for (int n = 0; array != NULL && n <= max && iter_next(&it); n++) {
        cJSON *item = build_scalar(it.value, it.value_end);
        if (item == NULL || !cJSON_AddItemToArray(array, item)) {
            cJSON_Delete(item);
            cJSON_Delete(array);
            return NULL;
        }
    }
    return array;
}

/* How a known key's value is built. */
enum { BUILD_SCALAR, BUILD_SHAPE, BUILD_FIELDS, BUILD_META, BUILD_SKIP };
typedef struct known_key {
    const char *name;
    int build;
} known_key_t;

static const known_key_t field_keys[] = {{"name", BUILD_SCALAR},       {"dtype", BUILD_SCALAR},
                                         {"shape", BUILD_SHAPE},       {"rows_total", BUILD_SCALAR},
                                         {"rows_max", BUILD_SCALAR},   {"bytes_max", BUILD_SCALAR},
                                         {"bytes_mean", BUILD_SCALAR}, {NULL, 0}};
static const known_key_t shard_keys[] = {
    {"id", BUILD_SCALAR},       {"file", BUILD_SCALAR},
    {"samples", BUILD_SCALAR},  {"bytes", BUILD_SCALAR},
    {"chunks", BUILD_SCALAR},   {"chunk_samples", BUILD_SCALAR},
    {"checksum", BUILD_SCALAR}, {NULL, 0}};
/* "shards" is walked one element at a time by parse_document, not built. */
static const known_key_t root_keys[] = {
    {"format", BUILD_SCALAR},       {"version", BUILD_SCALAR}, {"name", BUILD_SCALAR},
    {"sample_bytes", BUILD_SCALAR}, {"samples", BUILD_SCALAR}, {"schema", BUILD_FIELDS},
    {"meta", BUILD_META},           {"shards", BUILD_SKIP},    {NULL, 0}};

static cJSON *build_object(const char *value, const char *value_end, const known_key_t *keys,
                           int *rc);

static cJSON *build_value(const char *value, const char *value_end, int build, int *rc) {
    switch (build) {
    case BUILD_SHAPE:
        return build_scalar_array(value, value_end, DSC_MAX_DIMS);
    case BUILD_FIELDS: {
        if (*value != '[')
            return build_scalar(value, value_end);
        cJSON *array = cJSON_CreateArray();
        json_iter_t it;
        iter_init(&it, value, value_end);
        for (int n = 0; array != NULL && n <= DSC_MAX_FIELDS && iter_next(&it); n++) {
            cJSON *item = build_object(it.value, it.value_end, field_keys, rc);
            if (item == NULL || !cJSON_AddItemToArray(array, item)) {
                cJSON_Delete(item);
                cJSON_Delete(array);
                return NULL;
            }
        }
        return array;
    }
    case BUILD_META:
        if ((size_t)(value_end - value) > DSC_MANIFEST_META_MAX_BYTES) {
            *rc = DSC_ETOOLARGE;
            return NULL;
        }
        return cJSON_ParseWithLength(value, (size_t)(value_end - value));
    default:
        return build_scalar(value, value_end);
    }
}

/* The object at value with only the first occurrence of each of its known keys (what
 * cJSON_GetObjectItemCaseSensitive would find), the others skipped; anything but an object as
 * build_scalar. NULL with *rc: DSC_ENOMEM, or DSC_ETOOLARGE ("meta" over its limit). */
static cJSON *build_object(const char *value, const char *value_end, const known_key_t *keys,
                           int *rc) {
    *rc = DSC_EBADMANIFEST; /* cJSON reports ENOMEM and syntax alike (see parse_document) */
    if (*value != '{')
        return build_scalar(value, value_end);
    cJSON *object = cJSON_CreateObject();
    uint32_t seen = 0;
    json_iter_t it;
    iter_init(&it, value, value_end);
    while (object != NULL && iter_next(&it)) {
        uint32_t k = 0;
        while (keys[k].name != NULL && !key_is(&it, keys[k].name))
            k++;
        if (keys[k].name == NULL || (seen & (1u << k)) || keys[k].build == BUILD_SKIP)
            continue;
        seen |= 1u << k;
        cJSON *item = build_value(it.value, it.value_end, keys[k].build, rc);
        if (item == NULL || !cJSON_AddItemToObject(object, keys[k].name, item)) {
            cJSON_Delete(item);
            cJSON_Delete(object);
            return NULL;
        }
    }
    return object;
}

/* Parses a document (need not be NUL-terminated) into a fresh manifest: its syntax is checked
 * whole first, then only the known keys are built (see "Scanning without allocating"). */
static int parse_document(const char *text, size_t len, dsc_manifest_t **out) {
    const char *end = text + len;
    const char *doc = skip_ws(text, end);
    const char *doc_end = skip_value(doc, end);
    dsc_manifest_t *manifest = NULL;
    cJSON *root = NULL;
    int rc = DSC_EBADMANIFEST;
    if (doc_end == NULL)
        goto cleanup;
    /* Only whitespace may follow the document (this also rejects embedded NULs). */
    for (const char *p = doc_end; p < end; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            goto cleanup;
    if (*doc != '{')
        goto cleanup;
    root = build_object(doc, doc_end, root_keys, &rc);
    if (root == NULL)
        goto cleanup;
    rc = DSC_EBADMANIFEST;
    const char *format = get_string(root, "format");
    if (format == NULL || strcmp(format, MANIFEST_FORMAT) != 0)
        goto cleanup;
    uint64_t version;
    if (get_u64(root, "version", UINT32_MAX, &version) < 0)
        goto cleanup;
    if (version != MANIFEST_VERSION && version != MANIFEST_VERSION_VAR) {
        rc = DSC_EVERSION;
        goto cleanup;
    }
    /* "shards": its first occurrence, walked one element at a time. */
    json_iter_t it;
    const char *shards = NULL, *shards_end = NULL;
    iter_init(&it, doc, doc_end);
    while (shards == NULL && iter_next(&it))
        if (key_is(&it, "shards")) {
            shards = it.value;
            shards_end = it.value_end;
        }
    if (shards == NULL || *shards != '[')
        goto cleanup;
    uint32_t count = 0;
    iter_init(&it, shards, shards_end);
    while (count <= DSC_MAX_SHARDS && iter_next(&it))
        count++;
    if (count < 1)
        goto cleanup;
    if (count > DSC_MAX_SHARDS) {
        rc = DSC_ETOOLARGE;
        goto cleanup;
    }
    manifest = dsc_manifest_alloc(count);
    if (manifest == NULL) {
        rc = DSC_ENOMEM;
        goto cleanup;
    }
    const char *name = get_string(root, "name");
    if (name == NULL || !name_ok(name, DSC_MAX_NAME - 1))
        goto cleanup;
    memcpy(manifest->name, name, strlen(name) + 1);
    const cJSON *schema_json = cJSON_GetObjectItemCaseSensitive(root, "schema");
    rc = parse_schema(schema_json, &manifest->schema);
    if (rc < 0)
        goto cleanup;
    /* Version 1 readers know no variable dimension; version 2 is written only when there is
     * one (so the text stays canonical). */
    if (version == MANIFEST_VERSION && manifest->schema.var_count > 0) {
        rc = DSC_EBADSCHEMA;
        goto cleanup;
    }
    rc = DSC_EBADMANIFEST;
    if (version == MANIFEST_VERSION_VAR && manifest->schema.var_count == 0)
        goto cleanup;
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "meta");
    if (meta != NULL) {
        if (!cJSON_IsObject(meta))
            goto cleanup;
        manifest->meta_json = cJSON_PrintUnformatted(meta);
        if (manifest->meta_json == NULL) {
            rc = DSC_ENOMEM;
            goto cleanup;
        }
    }
    uint32_t position = 0;
    uint64_t samples = 0, bytes = 0;
    iter_init(&it, shards, shards_end);
    while (iter_next(&it)) {
        dsc_manifest_shard_t *shard = &manifest->shards[position];
        cJSON *item = build_object(it.value, it.value_end, shard_keys, &rc);
        if (item == NULL)
            goto cleanup;
        rc = parse_shard(item, position, &manifest->schema, shard);
        cJSON_Delete(item);
        if (rc < 0)
            goto cleanup;
        rc = DSC_EBADMANIFEST;
        if (__builtin_add_overflow(samples, shard->samples, &samples) ||
            __builtin_add_overflow(bytes, shard->bytes, &bytes))
            goto cleanup;
        position++;
    }
    dsc_manifest_finish(manifest);
    /* The derived totals are written for readers; they must agree. */
    uint64_t total, sample_bytes;
    if (get_u64(root, "samples", UINT64_MAX, &total) < 0 || total != manifest->samples)
        goto cleanup;
    if (get_u64(root, "sample_bytes", UINT64_MAX, &sample_bytes) < 0 ||
        sample_bytes != manifest->schema.sample_bytes)
        goto cleanup;
    for (uint32_t f = 0; f < manifest->schema.field_count; f++) {
        const dsc_field_t *field = &manifest->schema.fields[f];
        if (!field->variable)
            continue;
        rc = parse_field_stats(cJSON_GetArrayItem(schema_json, (int)f), field, manifest->samples,
                               &manifest->field_stats[f]);
        if (rc < 0)
            goto cleanup;
    }
    *out = manifest;
    manifest = NULL;
    rc = 0;
cleanup:
    dsc_manifest_free(manifest);
    cJSON_Delete(root);
    return rc;
}

int dsc_manifest_parse(const char *json, size_t len, dsc_manifest_t **out) {
    if (json == NULL || out == NULL)
        return DSC_EINVAL;
    if (len > DSC_MANIFEST_MAX_BYTES)
        return DSC_ETOOLARGE;
    /* cJSON decodes \u0000 into a NUL inside a string, which would silently cut a name
     * short: such documents are refused whole (no valid manifest needs one). */
    for (size_t i = 0; i + 6 <= len; i++)
        if (json[i] == '\\' && json[i + 1] == 'u' && memcmp(json + i + 2, "0000", 4) == 0)
            return DSC_EBADMANIFEST;
    int rc = parse_document(json, len, out);
    if (rc == 0)
        (*out)->version = dsc_dataset_version(json, len);
    return rc;
}

/* ---- Serializing -------------------------------------------------------------------------- */

/* Adds an unsigned integer: a number when a double holds it exactly, else a "0x..." string. */
static int add_u64(cJSON *object, const char *key, uint64_t value) {
    if (value <= EXACT_DOUBLE_MAX)
        return cJSON_AddNumberToObject(object, key, (double)value) != NULL;
    char hex[24];
    snprintf(hex, sizeof hex, "0x%llx", (unsigned long long)value);
    return cJSON_AddStringToObject(object, key, hex) != NULL;
}

char *dsc_manifest_to_json(const dsc_manifest_t *manifest) {
    char *text = NULL;
    cJSON *root = cJSON_CreateObject();
    if (root == NULL)
        return NULL;
    int variable = manifest->schema.var_count > 0;
    int ok = cJSON_AddStringToObject(root, "format", MANIFEST_FORMAT) != NULL &&
             cJSON_AddNumberToObject(root, "version",
                                     variable ? MANIFEST_VERSION_VAR : MANIFEST_VERSION) != NULL &&
             cJSON_AddStringToObject(root, "name", manifest->name) != NULL &&
             add_u64(root, "sample_bytes", manifest->schema.sample_bytes) &&
             add_u64(root, "samples", manifest->samples);
    cJSON *schema = ok ? cJSON_AddArrayToObject(root, "schema") : NULL;
    ok = schema != NULL;
    uint32_t fields = manifest->schema.field_count;
    for (uint32_t i = 0; ok && i < fields && i < DSC_MAX_FIELDS; i++) {
        const dsc_field_t *field = &manifest->schema.fields[i];
        const char *dtype = dsc_dtype_name(field->dtype);
        cJSON *object = cJSON_CreateObject();
        ok = object != NULL && cJSON_AddItemToArray(schema, object);
        if (!ok) {
            cJSON_Delete(object);
            break;
        }
        ok = cJSON_AddStringToObject(object, "name", field->name) != NULL &&
             cJSON_AddStringToObject(object, "dtype", dtype ? dtype : "invalid") != NULL;
        cJSON *shape = ok ? cJSON_AddArrayToObject(object, "shape") : NULL;
        ok = shape != NULL;
        for (uint32_t d = 0; ok && d < field->ndim && d < DSC_MAX_DIMS; d++) {
            cJSON *dim = d == 0 && field->variable ? cJSON_CreateNull()
                                                   : cJSON_CreateNumber((double)field->shape[d]);
            ok = dim != NULL && cJSON_AddItemToArray(shape, dim);
            if (!ok)
                cJSON_Delete(dim);
        }
        if (ok && field->variable) {
            const dsc_manifest_field_stats_t *st = &manifest->field_stats[i];
            ok = add_u64(object, "rows_total", st->rows_total) &&
                 add_u64(object, "rows_max", st->rows_max) &&
                 add_u64(object, "bytes_max", st->bytes_max) &&
                 cJSON_AddNumberToObject(object, "bytes_mean", st->bytes_mean) != NULL;
        }
    }
    cJSON *shards = ok ? cJSON_AddArrayToObject(root, "shards") : NULL;
    ok = ok && shards != NULL;
    for (uint32_t i = 0; ok && i < manifest->shard_count; i++) {
        const dsc_manifest_shard_t *shard = &manifest->shards[i];
        cJSON *object = cJSON_CreateObject();
        ok = object != NULL && cJSON_AddItemToArray(shards, object);
        if (!ok) {
            cJSON_Delete(object);
            break;
        }
        char checksum[17];
        snprintf(checksum, sizeof checksum, "%016llx", (unsigned long long)shard->checksum);
        char file[sizeof shard->file];
        snprintf(file, sizeof file, "%.*s", (int)sizeof file - 1, shard->file);
        ok = add_u64(object, "id", shard->id) &&
             cJSON_AddStringToObject(object, "file", file) != NULL &&
             add_u64(object, "samples", shard->samples) && add_u64(object, "bytes", shard->bytes) &&
             add_u64(object, "chunks", shard->chunks) &&
             add_u64(object, "chunk_samples", shard->chunk_samples) &&
             cJSON_AddStringToObject(object, "checksum", checksum) != NULL;
    }
    if (ok && manifest->meta_json != NULL) {
        cJSON *meta = cJSON_Parse(manifest->meta_json);
        ok = cJSON_IsObject(meta) && cJSON_AddItemToObject(root, "meta", meta);
        if (!ok)
            cJSON_Delete(meta);
    }
    if (ok)
        text = cJSON_Print(root);
    cJSON_Delete(root);
    return text;
}

int dsc_manifest_set_meta(dsc_manifest_t *manifest, const char *json) {
    if (manifest == NULL)
        return DSC_EINVAL;
    char *copy = NULL;
    if (json != NULL) {
        cJSON *meta = cJSON_Parse(json);
        if (!cJSON_IsObject(meta)) {
            cJSON_Delete(meta);
            return DSC_EINVAL;
        }
        copy = cJSON_PrintUnformatted(meta);
        cJSON_Delete(meta);
        if (copy == NULL)
            return DSC_ENOMEM;
    }
    free(manifest->meta_json);
    manifest->meta_json = copy;
    return 0;
}
