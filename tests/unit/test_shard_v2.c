/* Shard format version 2 tests: variable-length fields. Schema rules, header round trip and
 * version rules, whole shards parsed and decoded, every truncation and every bit flip, the
 * decoded-chunk layout validator against a hand-built bad layout for each of its rules, and the
 * version-1 shards written before version 2 existed (tests/fuzz/corpus/fuzz_shard) still
 * parsing unchanged. `test_shard_v2 --write-corpus DIR` writes small valid v2 shards as seeds. */
#include "shard.h"
#include "testlib.h"
#include "wire.h"

#include <errno.h>
#include <sys/stat.h>

static uint16_t load_u16(const uint8_t *p) {
    return (uint16_t)(p[0] | p[1] << 8);
}

static void store_u16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void add_field(dsc_schema_t *s, const char *name, int dtype, int ndim,
                      const uint32_t *dims) {
    dsc_field_t *f = &s->fields[s->field_count++];
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    f->dtype = (uint8_t)dtype;
    f->ndim = (uint8_t)ndim;
    for (int d = 0; d < ndim; d++)
        f->shape[d] = dims[d];
}

/* tokens i32[], label i64, mel f32[?,3], image u8[2,2]. */
static dsc_schema_t var_schema(void) {
    dsc_schema_t s;
    memset(&s, 0, sizeof s);
    add_field(&s, "tokens", DSC_DTYPE_I32, 1, (uint32_t[]){DSC_DIM_VARIABLE});
    add_field(&s, "label", DSC_DTYPE_I64, 0, NULL);
    add_field(&s, "mel", DSC_DTYPE_F32, 2, (uint32_t[]){DSC_DIM_VARIABLE, 3});
    add_field(&s, "image", DSC_DTYPE_U8, 2, (uint32_t[]){2, 2});
    REQUIRE(dsc_schema_finish(&s) == 0);
    return s;
}

/* Rows of variable field f in dataset sample i (0 included). */
static uint64_t rows_of(uint32_t f, uint64_t i) {
    return f == 0 ? i % 5 : (i * 7) % 3;
}

/* Byte b of field f of sample i. */
static uint8_t value_byte(uint32_t f, uint64_t i, uint64_t b) {
    return (uint8_t)(i * 31 + f * 7 + b);
}

/* Decoded chunk of samples [first, first + n) into out (cap bytes). Returns its size. */
static size_t build_chunk(const dsc_schema_t *s, uint64_t first, uint32_t n, uint8_t *out,
                          size_t cap) {
    size_t pos = 0;
    for (uint32_t f = 0; f < s->field_count; f++) {
        const dsc_field_t *field = &s->fields[f];
        if (field->variable)
            continue;
        for (uint32_t k = 0; k < n; k++)
            for (uint64_t b = 0; b < field->sample_bytes; b++) {
                REQUIRE(pos < cap);
                out[pos++] = value_byte(f, first + k, b);
            }
    }
    for (uint32_t f = 0; f < s->field_count; f++) {
        const dsc_field_t *field = &s->fields[f];
        if (!field->variable)
            continue;
        uint64_t off = 0;
        REQUIRE(pos + (n + 1) * 8 <= cap);
        for (uint32_t k = 0; k <= n; k++) {
            dsc_store_u64(out + pos + (size_t)k * 8, off);
            if (k < n)
                off += rows_of(f, first + k);
        }
        pos += (size_t)(n + 1) * 8;
        for (uint32_t k = 0; k < n; k++)
            for (uint64_t b = 0; b < rows_of(f, first + k) * field->row_bytes; b++) {
                REQUIRE(pos < cap);
                out[pos++] = value_byte(f, first + k, b);
            }
    }
    return pos;
}

typedef struct built {
    uint8_t *buf;
    size_t len;
    dsc_shard_header_t header;
} built_t;

static void build_shard(const dsc_schema_t *s, uint64_t samples, uint32_t chunk_samples, int codec,
                        built_t *out) {
    memset(out, 0, sizeof *out);
    dsc_shard_header_t *h = &out->header;
    h->shard_id = 3;
    h->sample_count = samples;
    h->chunk_samples = chunk_samples;
    snprintf(h->dataset, sizeof h->dataset, "var-set");
    h->schema = *s;
    size_t cap = 1 << 20;
    out->buf = calloc(1, cap);
    uint8_t *raw = malloc(cap), *dst = malloc(cap), index[64 * DSC_CHUNK_ENTRY_SIZE];
    REQUIRE(out->buf && raw && dst);
    int hl = dsc_shard_header_encode(h, out->buf, cap);
    REQUIRE(hl > 0);
    h->header_len = (uint32_t)hl;
    h->version = DSC_SHARD_VERSION_VAR;
    size_t pos = (size_t)hl;
    uint32_t chunks = (uint32_t)((samples + chunk_samples - 1) / chunk_samples);
    REQUIRE(chunks <= 64);
    for (uint32_t c = 0; c < chunks; c++) {
        uint64_t first = (uint64_t)c * chunk_samples;
        uint32_t n = (uint32_t)(samples - first < chunk_samples ? samples - first : chunk_samples);
        size_t raw_len = build_chunk(s, first, n, raw, cap);
        dsc_chunk_entry_t e;
        memset(&e, 0, sizeof e);
        const void *stored;
        REQUIRE(dsc_chunk_encode(codec, 0, raw, raw_len, dst, cap, &e, &stored) == 0);
        e.offset = pos;
        e.first_sample = first;
        e.sample_count = n;
        memcpy(out->buf + pos, stored, e.stored_len);
        pos += e.stored_len;
        dsc_chunk_entry_encode(&e, index + (size_t)c * DSC_CHUNK_ENTRY_SIZE);
    }
    size_t index_len = (size_t)chunks * DSC_CHUNK_ENTRY_SIZE;
    dsc_shard_footer_t footer = {.index_offset = pos,
                                 .chunk_count = chunks,
                                 .index_checksum = dsc_checksum(index, index_len)};
    memcpy(out->buf + pos, index, index_len);
    pos += index_len;
    dsc_shard_footer_encode(&footer, out->buf + pos);
    out->len = pos + DSC_SHARD_FOOTER_SIZE;
    free(raw);
    free(dst);
}

/* Parses a copy of exactly len bytes (ASan sees any read past the end), decodes every chunk and
 * checks its layout. Returns the first error, or 0 when everything decodes; with check != 0 the
 * values are also compared with the pattern (a mismatch is a failed CHECK). */
static int parse_and_decode(const uint8_t *buf, size_t len, int check) {
    uint8_t *copy = malloc(len ? len : 1);
    memcpy(copy, buf, len);
    dsc_shard_view_t v;
    int rc = dsc_shard_parse(copy, len, &v);
    uint8_t *raw = malloc(DSC_CHUNK_MAX_RAW / 256);
    for (uint32_t c = 0; rc == 0 && c < v.footer.chunk_count; c++) {
        dsc_chunk_entry_t e;
        REQUIRE(dsc_shard_chunk(&v, c, &e) == 0);
        int got = dsc_chunk_decode(&e, dsc_shard_chunk_data(&v, &e), raw, DSC_CHUNK_MAX_RAW / 256);
        if (got < 0) {
            rc = got;
            break;
        }
        dsc_chunk_layout_t layout;
        rc = dsc_chunk_layout(&v.header.schema, e.sample_count, raw, e.raw_len, &layout);
        if (rc < 0 || !check)
            continue;
        const dsc_schema_t *s = &v.header.schema;
        for (uint32_t k = 0; k < e.sample_count; k++)
            for (uint32_t f = 0; f < s->field_count; f++) {
                const uint8_t *data;
                uint64_t bytes;
                REQUIRE(dsc_chunk_sample(&layout, s, f, k, &data, &bytes) == 0);
                uint64_t i = e.first_sample + k;
                uint64_t want = s->fields[f].variable ? rows_of(f, i) * s->fields[f].row_bytes
                                                      : s->fields[f].sample_bytes;
                CHECK_EQ_INT(bytes, want);
                for (uint64_t b = 0; b < bytes && b < want; b++)
                    if (data[b] != value_byte(f, i, b)) {
                        CHECK(data[b] == value_byte(f, i, b));
                        break;
                    }
            }
        CHECK(dsc_chunk_sample(&layout, s, 0, e.sample_count, &(const uint8_t *){0},
                               &(uint64_t){0}) == DSC_ERANGE);
    }
    free(raw);
    free(copy);
    return rc;
}

/* ---- Schema ------------------------------------------------------------------------------ */

static void test_schema(void) {
    dsc_schema_t s = var_schema();
    CHECK_EQ_INT(s.var_count, 2);
    CHECK_EQ_INT(s.sample_bytes, 8 + 4); /* label + image: the fixed part */
    CHECK(s.fields[0].variable && s.fields[2].variable && !s.fields[1].variable);
    CHECK_EQ_INT(s.fields[0].row_bytes, 4);
    CHECK_EQ_INT(s.fields[0].sample_bytes, 0);
    CHECK_EQ_INT(s.fields[2].row_bytes, 12);
    CHECK_EQ_INT(s.fields[3].row_bytes, 2);
    CHECK_EQ_INT(s.fields[1].row_bytes, 8);
    CHECK_EQ_INT(dsc_schema_version(&s), DSC_SHARD_VERSION_VAR);
    CHECK_EQ_INT(dsc_schema_chunk_min(&s, 10), 10 * 12 + 2 * 11 * 8);
    CHECK_EQ_INT(dsc_schema_chunk_min(&s, UINT64_MAX), UINT64_MAX);

    dsc_schema_t t;
    memset(&t, 0, sizeof t);
    add_field(&t, "x", DSC_DTYPE_F32, 2, (uint32_t[]){4, 4});
    REQUIRE(dsc_schema_finish(&t) == 0);
    CHECK_EQ_INT(t.var_count, 0);
    CHECK_EQ_INT(dsc_schema_version(&t), DSC_SHARD_VERSION);
    CHECK_EQ_INT(dsc_schema_chunk_min(&t, 3), 3 * 64);
    /* Only the leading dimension may vary. */
    t.fields[0].shape[1] = DSC_DIM_VARIABLE;
    CHECK_EQ_INT(dsc_schema_finish(&t), DSC_EBADSCHEMA);
    /* A variable field whose row alone is over 2^32 - 1 bytes. */
    memset(&t, 0, sizeof t);
    add_field(&t, "x", DSC_DTYPE_F64, 3, (uint32_t[]){DSC_DIM_VARIABLE, 65536, 8192});
    CHECK_EQ_INT(dsc_schema_finish(&t), DSC_EOVERFLOW);
    /* Only variable fields: the fixed part is empty. */
    memset(&t, 0, sizeof t);
    add_field(&t, "bytes", DSC_DTYPE_U8, 1, (uint32_t[]){DSC_DIM_VARIABLE});
    REQUIRE(dsc_schema_finish(&t) == 0);
    CHECK_EQ_INT(t.sample_bytes, 0);
    CHECK_EQ_INT(dsc_schema_chunk_min(&t, 4), 5 * 8);
    /* Equality sees the variable dimension. */
    dsc_schema_t a = var_schema(), b = var_schema();
    CHECK(dsc_schema_equal(&a, &b));
    b.fields[0].shape[0] = 1;
    REQUIRE(dsc_schema_finish(&b) == 0);
    CHECK(!dsc_schema_equal(&a, &b));
}

/* ---- Header ------------------------------------------------------------------------------- */

static void reseal_header(uint8_t *buf) {
    uint32_t hl = dsc_load_u32(buf + 12);
    dsc_store_u64(buf + hl - 8, dsc_checksum(buf, hl - 8));
}

static void test_header(void) {
    dsc_shard_header_t h;
    memset(&h, 0, sizeof h);
    h.sample_count = 10;
    h.chunk_samples = 4;
    snprintf(h.dataset, sizeof h.dataset, "d");
    h.schema = var_schema();
    uint8_t buf[DSC_SHARD_MAX_HEADER], again[DSC_SHARD_MAX_HEADER];
    int n = dsc_shard_header_encode(&h, buf, sizeof buf);
    REQUIRE(n > 0);
    CHECK_EQ_INT(n, dsc_shard_header_size(&h));
    CHECK_EQ_INT(load_u16(buf + 8), DSC_SHARD_VERSION_VAR);
    dsc_shard_header_t back;
    CHECK_EQ_INT(dsc_shard_header_decode(buf, (size_t)n, &back), n);
    CHECK_EQ_INT(back.version, DSC_SHARD_VERSION_VAR);
    CHECK(dsc_schema_equal(&back.schema, &h.schema));
    CHECK_EQ_INT(back.schema.var_count, 2);
    CHECK_EQ_INT(back.schema.fields[2].shape[0], DSC_DIM_VARIABLE);
    CHECK_EQ_INT(dsc_shard_header_encode(&back, again, sizeof again), n);
    CHECK(memcmp(buf, again, (size_t)n) == 0); /* canonical */
    for (int len = 0; len < n; len++) {
        uint8_t *copy = malloc((size_t)len + 1);
        memcpy(copy, buf, (size_t)len);
        CHECK_EQ_INT(dsc_shard_header_decode(copy, (size_t)len, &back), DSC_ETRUNCATED);
        free(copy);
    }

    /* A variable dimension under version 1: invalid there, as a zero dimension always was. */
    uint8_t v1[DSC_SHARD_MAX_HEADER];
    memcpy(v1, buf, (size_t)n);
    store_u16(v1 + 8, DSC_SHARD_VERSION);
    reseal_header(v1);
    CHECK_EQ_INT(dsc_shard_header_decode(v1, (size_t)n, &back), DSC_EBADSCHEMA);
    /* Version 3 does not exist. */
    store_u16(v1 + 8, 3);
    reseal_header(v1);
    CHECK_EQ_INT(dsc_shard_header_decode(v1, (size_t)n, &back), DSC_EVERSION);

    /* A fixed schema is written as version 1; claiming version 2 for it is refused. */
    dsc_shard_header_t f = h;
    memset(&f.schema, 0, sizeof f.schema);
    add_field(&f.schema, "x", DSC_DTYPE_U8, 1, (uint32_t[]){7});
    int m = dsc_shard_header_encode(&f, buf, sizeof buf);
    REQUIRE(m > 0);
    CHECK_EQ_INT(load_u16(buf + 8), DSC_SHARD_VERSION);
    store_u16(buf + 8, DSC_SHARD_VERSION_VAR);
    reseal_header(buf);
    CHECK_EQ_INT(dsc_shard_header_decode(buf, (size_t)m, &back), DSC_EBADHEADER);

    /* The chunk bound counts the offset tables: 2^24 samples of an i32[] field need
     * (2^24 + 1) * 8 bytes of offsets, over 128 MiB but under 256; with a second table it is
     * over. */
    dsc_shard_header_t big = h;
    memset(&big.schema, 0, sizeof big.schema);
    add_field(&big.schema, "a", DSC_DTYPE_I32, 1, (uint32_t[]){DSC_DIM_VARIABLE});
    big.chunk_samples = 1u << 24;
    big.sample_count = 1u << 24;
    CHECK(dsc_shard_header_encode(&big, buf, sizeof buf) > 0);
    add_field(&big.schema, "b", DSC_DTYPE_I32, 1, (uint32_t[]){DSC_DIM_VARIABLE});
    add_field(&big.schema, "c", DSC_DTYPE_I32, 1, (uint32_t[]){DSC_DIM_VARIABLE});
    CHECK_EQ_INT(dsc_shard_header_encode(&big, buf, sizeof buf), DSC_EINVAL);
}

/* ---- Whole shards -------------------------------------------------------------------------- */

static void test_roundtrip(void) {
    dsc_schema_t s = var_schema();
    int codecs[] = {DSC_CODEC_RAW, DSC_CODEC_LZ4};
    for (int c = 0; c < 2; c++) {
        built_t b;
        build_shard(&s, 23, 5, codecs[c], &b);
        CHECK_EQ_INT(parse_and_decode(b.buf, b.len, 1), 0);
        dsc_shard_view_t v;
        REQUIRE(dsc_shard_parse(b.buf, b.len, &v) == 0);
        CHECK_EQ_INT(v.header.version, DSC_SHARD_VERSION_VAR);
        CHECK_EQ_INT(v.footer.chunk_count, 5);
        free(b.buf);
    }
    /* Only variable fields, every sample empty in one chunk (rows 0 throughout: tokens of
     * samples 0 and 5 are empty, mel of 0, 3). */
    dsc_schema_t t;
    memset(&t, 0, sizeof t);
    add_field(&t, "tokens", DSC_DTYPE_I32, 1, (uint32_t[]){DSC_DIM_VARIABLE});
    REQUIRE(dsc_schema_finish(&t) == 0);
    built_t b;
    build_shard(&t, 1, 1, DSC_CODEC_LZ4, &b);
    CHECK_EQ_INT(parse_and_decode(b.buf, b.len, 1), 0);
    free(b.buf);
}

static void test_damage(void) {
    dsc_schema_t s = var_schema();
    built_t b;
    build_shard(&s, 11, 4, DSC_CODEC_RAW, &b);
    REQUIRE(parse_and_decode(b.buf, b.len, 1) == 0);
    /* Every truncation fails. */
    for (size_t len = 0; len < b.len; len++) {
        dsc_shard_view_t v;
        uint8_t *copy = malloc(len ? len : 1);
        memcpy(copy, b.buf, len);
        int rc = dsc_shard_parse(copy, len, &v);
        free(copy);
        if (rc == 0)
            fprintf(stderr, "cut at %zu parsed\n", len);
        CHECK(rc < 0);
    }
    /* Every bit flip is found: by the parse, or by a chunk's decode. */
    int undetected = 0;
    for (size_t i = 0; i < b.len; i++)
        for (int bit = 0; bit < 8; bit++) {
            b.buf[i] ^= (uint8_t)(1u << bit);
            if (parse_and_decode(b.buf, b.len, 0) == 0)
                undetected++;
            b.buf[i] ^= (uint8_t)(1u << bit);
        }
    CHECK_EQ_INT(undetected, 0);

    /* An entry whose raw_len is below the least a chunk of its samples needs, index resealed. */
    dsc_shard_view_t v;
    REQUIRE(dsc_shard_parse(b.buf, b.len, &v) == 0);
    uint8_t *entry = (uint8_t *)b.buf + v.footer.index_offset;
    uint32_t raw_len = dsc_load_u32(entry + 20);
    uint64_t least = dsc_schema_chunk_min(&s, 4);
    REQUIRE(raw_len >= least);
    dsc_store_u32(entry + 20, (uint32_t)least - 1);
    dsc_store_u32(entry + 16, (uint32_t)least - 1); /* raw chunk: stored_len == raw_len */
    uint8_t *footer = b.buf + b.len - DSC_SHARD_FOOTER_SIZE;
    dsc_store_u64(footer + 16,
                  dsc_checksum(entry, (size_t)v.footer.chunk_count * DSC_CHUNK_ENTRY_SIZE));
    CHECK_EQ_INT(dsc_shard_parse(b.buf, b.len, &v), DSC_EBADINDEX);
    free(b.buf);
}

/* ---- Layout validator ----------------------------------------------------------------------- */

static int layout_of(const dsc_schema_t *s, uint32_t n, const uint8_t *raw, size_t len) {
    uint8_t *copy = malloc(len ? len : 1);
    memcpy(copy, raw, len);
    dsc_chunk_layout_t l;
    int rc = dsc_chunk_layout(s, n, copy, len, &l);
    free(copy);
    return rc;
}

static void test_layout(void) {
    dsc_schema_t s = var_schema();
    uint8_t raw[4096];
    const uint32_t n = 6;
    size_t len = build_chunk(&s, 10, n, raw, sizeof raw);
    dsc_chunk_layout_t l;
    REQUIRE(dsc_chunk_layout(&s, n, raw, len, &l) == 0);
    CHECK_EQ_INT(l.samples, n);
    /* Fixed part first, field-major: label (n * 8) then image (n * 4). */
    CHECK(l.fields[1].values == raw && l.fields[1].bytes == n * 8);
    CHECK(l.fields[3].values == raw + n * 8 && l.fields[3].bytes == n * 4);
    CHECK(l.fields[1].offsets == NULL);
    /* Then tokens' offsets and rows, then mel's. */
    uint64_t rows = 0;
    for (uint32_t k = 0; k < n; k++)
        rows += rows_of(0, 10 + k);
    CHECK(l.fields[0].offsets == raw + n * 12);
    CHECK_EQ_INT(l.fields[0].rows, rows);
    CHECK_EQ_INT(l.fields[0].bytes, rows * 4);
    CHECK(l.fields[2].offsets == l.fields[0].values + l.fields[0].bytes);
    CHECK_EQ_INT(dsc_chunk_offset(&l, 0, 0), 0);
    CHECK_EQ_INT(dsc_chunk_offset(&l, 0, n), rows);
    CHECK_EQ_INT(dsc_chunk_offset(&l, 0, n + 1), 0);
    CHECK_EQ_INT(dsc_chunk_offset(&l, 1, 1), 0);
    CHECK(l.fields[2].values + l.fields[2].bytes == raw + len);

    /* Each rule, broken by hand. */
    CHECK_EQ_INT(dsc_chunk_layout(&s, 0, raw, len, &l), DSC_EINVAL);
    CHECK_EQ_INT(dsc_chunk_layout(NULL, n, raw, len, &l), DSC_EINVAL);
    CHECK_EQ_INT(layout_of(&s, n, raw, dsc_schema_chunk_min(&s, n) - 1), DSC_EBADINDEX);
    uint8_t bad[4096];
    size_t tokens_at = n * 12, mel_at = (size_t)(l.fields[2].offsets - raw);
#define BROKEN(stmt, blen, want)                                                                   \
    do {                                                                                           \
        memcpy(bad, raw, len);                                                                     \
        stmt;                                                                                      \
        CHECK_EQ_INT(layout_of(&s, n, bad, (blen)), want);                                         \
    } while (0)
    BROKEN((void)0, len, 0);
    BROKEN(dsc_store_u64(bad + tokens_at, 1), len, DSC_ECORRUPT);             /* offsets[0] != 0 */
    BROKEN(dsc_store_u64(bad + mel_at, 1), len, DSC_ECORRUPT);                /* second field too */
    BROKEN(dsc_store_u64(bad + tokens_at + 16, rows + 1), len, DSC_ECORRUPT); /* decreasing */
    BROKEN(dsc_store_u64(bad + tokens_at + 8 * n, rows + 1), len, DSC_ECORRUPT); /* one row more */
    BROKEN(dsc_store_u64(bad + tokens_at + 8 * n, UINT64_MAX), len, DSC_ECORRUPT); /* overflow */
    BROKEN(dsc_store_u64(bad + tokens_at + 8 * n, 1ull << 62), len, DSC_ECORRUPT); /* wraps *4 */
    BROKEN((void)0, len - 1, DSC_ECORRUPT);      /* a byte short */
    BROKEN(bad[len] = 0, len + 1, DSC_ECORRUPT); /* a byte left over */
    /* The first field's rows eat the second field's table: tokens claims everything. */
    BROKEN(dsc_store_u64(bad + tokens_at + 8 * n, (len - tokens_at - 8 * (n + 1)) / 4), len,
           DSC_ECORRUPT);
#undef BROKEN
    /* Every prefix fails; every bit flip either fails or stays inside the buffer. */
    for (size_t cut = 0; cut < len; cut++)
        CHECK(layout_of(&s, n, raw, cut) < 0);
    for (size_t i = 0; i < len; i++)
        for (int bit = 0; bit < 8; bit++) {
            memcpy(bad, raw, len);
            bad[i] ^= (uint8_t)(1u << bit);
            dsc_chunk_layout_t fl;
            int rc = dsc_chunk_layout(&s, n, bad, len, &fl);
            CHECK(rc == 0 || rc == DSC_ECORRUPT);
            if (rc == 0)
                for (uint32_t f = 0; f < s.field_count; f++)
                    CHECK(fl.fields[f].values >= bad &&
                          fl.fields[f].values + fl.fields[f].bytes <= bad + len);
        }

    /* A version-1 schema: the chunk is exactly samples * sample_bytes. */
    dsc_schema_t t;
    memset(&t, 0, sizeof t);
    add_field(&t, "a", DSC_DTYPE_U16, 1, (uint32_t[]){3});
    add_field(&t, "b", DSC_DTYPE_U8, 0, NULL);
    REQUIRE(dsc_schema_finish(&t) == 0);
    CHECK_EQ_INT(dsc_chunk_layout(&t, 4, raw, 28, &l), 0);
    CHECK(l.fields[1].values == raw + 24 && l.fields[1].bytes == 4);
    CHECK_EQ_INT(dsc_chunk_layout(&t, 4, raw, 29, &l), DSC_EBADINDEX);
    CHECK_EQ_INT(dsc_chunk_layout(&t, 4, raw, 27, &l), DSC_EBADINDEX);
}

/* ---- Version-1 shards written before version 2 ---------------------------------------------- */

static void test_v1_unchanged(void) {
    const char *src = getenv("DSC_SRC");
    if (src == NULL) {
        printf("note: DSC_SRC unset, version-1 corpus check not run\n");
        return;
    }
    /* XXH3-64 of each file as committed (written by the version-1-only code). */
    static const struct {
        const char *name;
        uint64_t checksum;
    } files[] = {
        {"raw-multi.dsc", 0x3c8ba59cb759b60eull},   {"lz4-multi.dsc", 0xa44f2f171c1613eaull},
        {"lz4hc-mixed.dsc", 0xef66ef2d331ae36aull}, {"lz4-single.dsc", 0x01628035456a6379ull},
        {"empty.dsc", 0x388c00726d2840c7ull},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/tests/fuzz/corpus/fuzz_shard/%s", src, files[i].name);
        FILE *f = fopen(path, "rb");
        REQUIRE(f != NULL);
        static uint8_t buf[1 << 16];
        size_t len = fread(buf, 1, sizeof buf, f);
        fclose(f);
        CHECK(dsc_checksum(buf, len) == files[i].checksum);
        dsc_shard_view_t v;
        CHECK_EQ_INT(dsc_shard_parse(buf, len, &v), 0);
        CHECK_EQ_INT(v.header.version, DSC_SHARD_VERSION);
        CHECK_EQ_INT(v.header.schema.var_count, 0);
        uint8_t again[DSC_SHARD_MAX_HEADER];
        int n = dsc_shard_header_encode(&v.header, again, sizeof again);
        CHECK(n > 0 && (uint32_t)n == v.header.header_len && memcmp(again, buf, (size_t)n) == 0);
        CHECK_EQ_INT(parse_and_decode(buf, len, 0), 0);
    }
}

static int write_corpus(const char *dir) {
    mkdir(dir, 0755);
    dsc_schema_t s = var_schema();
    struct {
        const char *name;
        uint64_t samples;
        uint32_t chunk;
        int codec;
    } seeds[] = {{"var-raw.dsc", 9, 4, DSC_CODEC_RAW}, {"var-lz4.dsc", 12, 12, DSC_CODEC_LZ4}};
    for (size_t i = 0; i < 2; i++) {
        built_t b;
        build_shard(&s, seeds[i].samples, seeds[i].chunk, seeds[i].codec, &b);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, seeds[i].name);
        FILE *f = fopen(path, "wb");
        REQUIRE(f != NULL && fwrite(b.buf, 1, b.len, f) == b.len);
        fclose(f);
        printf("wrote %s (%zu bytes)\n", path, b.len);
        free(b.buf);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--write-corpus") == 0)
        return write_corpus(argv[2]);
    test_schema();
    test_header();
    test_roundtrip();
    test_damage();
    test_layout();
    test_v1_unchanged();
    return TEST_DONE();
}
