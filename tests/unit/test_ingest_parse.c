/* The readers of dscache ingest webdataset|megatron|mds: WebDataset key/extension rules and
 * label parsing, grouping of tar files into samples (complete and truncated tars), the Megatron
 * MMIDIDX index parser (every prefix, every inconsistency) and the MDS index and shard layout. */
#include "dscache_base.h"
#include "mds.h"
#include "mmidx.h"
#include "testlib.h"
#include "wds.h"

#include <stdio.h>

/* ---- a tiny ustar writer -------------------------------------------------------------------- */
static size_t tar_add(uint8_t *out, size_t at, const char *name, const void *data, size_t len) {
    uint8_t *h = out + at;
    memset(h, 0, 512);
    snprintf((char *)h, 100, "%s", name);
    memcpy(h + 100, "0000644", 7);
    memcpy(h + 108, "0000000", 7);
    memcpy(h + 116, "0000000", 7);
    snprintf((char *)h + 124, 12, "%011o", (unsigned)len);
    memcpy(h + 136, "00000000000", 11);
    h[156] = '0';
    memcpy(h + 257,
           "ustar\0"
           "00",
           8);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    memcpy(out + at + 512, data, len);
    size_t padded = (len + 511) / 512 * 512;
    memset(out + at + 512 + len, 0, padded - len);
    return at + 512 + padded;
}

static void test_wds_rules(void) {
    size_t key_len;
    const char *ext;
    CHECK(dsc_wds_split("a/b/s001.seg.png", &key_len, &ext) == 0);
    CHECK(key_len == 8 && strcmp(ext, "seg.png") == 0);
    CHECK(dsc_wds_split("s1.jpg", &key_len, &ext) == 0 && key_len == 2 && !strcmp(ext, "jpg"));
    CHECK(dsc_wds_split("d.x/s1.cls", &key_len, &ext) == 0 && key_len == 6);
    CHECK(dsc_wds_split("noext", &key_len, &ext) == DSC_EINVAL);
    CHECK(dsc_wds_split("dir/.hidden", &key_len, &ext) == DSC_EINVAL);
    CHECK(dsc_wds_split("trailing.", &key_len, &ext) == DSC_EINVAL);
    CHECK(dsc_wds_split("__key__.txt", &key_len, &ext) == 0); /* not of the __x__ form */
    CHECK(dsc_wds_split("__meta__", &key_len, &ext) == DSC_EINVAL);

    int64_t v;
    CHECK(dsc_wds_parse_int((const uint8_t *)"42", 2, &v) == 0 && v == 42);
    CHECK(dsc_wds_parse_int((const uint8_t *)" -7\n", 4, &v) == 0 && v == -7);
    CHECK(dsc_wds_parse_int((const uint8_t *)"9223372036854775807", 19, &v) == 0 && v == INT64_MAX);
    CHECK(dsc_wds_parse_int((const uint8_t *)"-9223372036854775808", 20, &v) == 0 &&
          v == INT64_MIN);
    CHECK(dsc_wds_parse_int((const uint8_t *)"9223372036854775808", 19, &v) == DSC_EINVAL);
    CHECK(dsc_wds_parse_int((const uint8_t *)"99999999999999999999", 20, &v) == DSC_EINVAL);
    CHECK(dsc_wds_parse_int((const uint8_t *)"1 2", 3, &v) == DSC_EINVAL);
    CHECK(dsc_wds_parse_int((const uint8_t *)"cat", 3, &v) == DSC_EINVAL);
    CHECK(dsc_wds_parse_int((const uint8_t *)"", 0, &v) == DSC_EINVAL);
    CHECK(dsc_wds_parse_int((const uint8_t *)"-", 1, &v) == DSC_EINVAL);
}

static void test_wds_grouping(void) {
    static uint8_t tar[16384];
    size_t at = 0;
    at = tar_add(tar, at, "a.jpg", "JJJ", 3);
    at = tar_add(tar, at, "a.CLS", "1", 1);
    at = tar_add(tar, at, "README", "x", 1); /* no extension: skipped */
    at = tar_add(tar, at, "b.jpg", "KK", 2);
    at = tar_add(tar, at, "b.cls", "2", 1);
    at = tar_add(tar, at, "b.cls", "3", 1);     /* a duplicate extension */
    at = tar_add(tar, at, "a.txt", "again", 5); /* a key seen before, not adjacent: a new sample */
    memset(tar + at, 0, 1024);
    size_t full = at + 1024;

    dsc_wds_reader_t *r = NULL;
    REQUIRE(dsc_wds_reader_open_memory(tar, full, 0, &r) == 0);
    const dsc_wds_sample_t *s;
    REQUIRE(dsc_wds_reader_next(r, &s) == 1);
    CHECK(strcmp(s->key, "a") == 0 && s->member_count == 2 && s->ordinal == 0);
    CHECK(strcmp(s->members[0].ext, "jpg") == 0 && s->members[0].size == 3 &&
          memcmp(s->members[0].data, "JJJ", 3) == 0);
    CHECK(strcmp(s->members[1].ext, "cls") == 0 && s->members[1].data[0] == '1');
    CHECK(s->duplicate == NULL);
    REQUIRE(dsc_wds_reader_next(r, &s) == 1);
    CHECK(strcmp(s->key, "b") == 0 && s->member_count == 3 && s->duplicate != NULL &&
          strcmp(s->duplicate, "cls") == 0);
    REQUIRE(dsc_wds_reader_next(r, &s) == 1);
    CHECK(strcmp(s->key, "a") == 0 && s->member_count == 1 && s->ordinal == 2);
    CHECK(dsc_wds_reader_next(r, &s) == 0);
    CHECK(dsc_wds_reader_skipped_files(r) == 1);
    CHECK(dsc_wds_reader_bytes(r) == 3 + 1 + 2 + 1 + 1 + 5);
    dsc_wds_reader_close(r);

    /* prefix limit: data held up to the limit, sizes kept */
    REQUIRE(dsc_wds_reader_open_memory(tar, full, 2, &r) == 0);
    REQUIRE(dsc_wds_reader_next(r, &s) == 1);
    CHECK(s->members[0].size == 3 && s->members[0].held == 2);
    dsc_wds_reader_close(r);

    /* truncated inside the data of the second sample: an error naming that sample */
    size_t cut = 512 * 2 + 512 * 2 + 512 * 2 + 512 + 1; /* a.jpg a.CLS README b.jpg header+1 */
    REQUIRE(dsc_wds_reader_open_memory(tar, cut, 0, &r) == 0);
    CHECK(dsc_wds_reader_next(r, &s) == 1);
    int rc = dsc_wds_reader_next(r, &s);
    CHECK(rc == DSC_ETRUNCATED);
    CHECK(strcmp(dsc_wds_reader_key(r), "b") == 0);
    CHECK(dsc_wds_reader_error(r)[0] != '\0');
    CHECK(dsc_wds_reader_next(r, &s) == rc); /* sticky */
    dsc_wds_reader_close(r);

    /* every truncation either ends cleanly at a file boundary or fails; never a crash */
    for (size_t len = 0; len < full; len += 37) {
        REQUIRE(dsc_wds_reader_open_memory(tar, len, 0, &r) == 0 || r != NULL);
        int n = 0;
        while ((rc = dsc_wds_reader_next(r, &s)) == 1)
            n++;
        CHECK(rc <= 0 && n <= 3);
        dsc_wds_reader_close(r);
    }
}

/* ---- Megatron ------------------------------------------------------------------------------- */
static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* 3 sequences (lengths 2, 3, 4) in 2 documents (seq 0 | seqs 1-2), uint16. */
static size_t make_idx(uint8_t *b) {
    memcpy(b, "MMIDIDX\0\0", 9);
    put64(b + 9, 1);
    b[17] = 8;
    put64(b + 18, 3);
    put64(b + 26, 3);
    uint32_t lengths[3] = {2, 3, 4};
    uint64_t ptr = 0;
    for (int s = 0; s < 3; s++) {
        put32(b + 34 + 4 * s, lengths[s]);
        put64(b + 34 + 12 + 8 * s, ptr);
        ptr += lengths[s] * 2;
    }
    put64(b + 34 + 36, 0);
    put64(b + 34 + 44, 1);
    put64(b + 34 + 52, 3);
    return 34 + 36 + 24;
}

static void test_mmidx(void) {
    uint8_t b[256];
    size_t n = make_idx(b);
    dsc_mmidx_t idx;
    REQUIRE(dsc_mmidx_parse(b, n, &idx) == 0);
    CHECK(idx.dtype == DSC_DTYPE_U16 && idx.item_bytes == 2 && idx.sequences == 3 &&
          idx.documents == 2 && !idx.multimodal);
    CHECK(dsc_mmidx_total_bytes(&idx) == 18);
    uint64_t first, count, off, bytes;
    CHECK(dsc_mmidx_document(&idx, 1, &first, &count) == 0 && first == 1 && count == 2);
    CHECK(dsc_mmidx_document(&idx, 2, &first, &count) == DSC_ERANGE);
    CHECK(dsc_mmidx_sequence(&idx, 2, 18, &off, &bytes) == 0 && off == 10 && bytes == 8);
    CHECK(dsc_mmidx_sequence(&idx, 2, 17, &off, &bytes) == DSC_EOVERFLOW); /* .bin too short */
    CHECK(dsc_mmidx_sequence(&idx, 3, 18, &off, &bytes) == DSC_ERANGE);
    /* every shorter prefix is refused with a reason */
    for (size_t len = 0; len < n; len++) {
        int rc = dsc_mmidx_parse(b, len, &idx);
        CHECK(rc < 0 && idx.problem != NULL);
    }
    /* a multimodal index: one mode byte per sequence */
    b[n] = b[n + 1] = b[n + 2] = 0;
    CHECK(dsc_mmidx_parse(b, n + 3, &idx) == 0 && idx.multimodal == 1);
    CHECK(dsc_mmidx_parse(b, n + 1, &idx) == DSC_EBADHEADER);
    /* each inconsistency */
    uint8_t c[256];
    memcpy(c, b, n);
    c[0] = 'X';
    CHECK(dsc_mmidx_parse(c, n, &idx) == DSC_EBADMAGIC);
    memcpy(c, b, n);
    c[9] = 2;
    CHECK(dsc_mmidx_parse(c, n, &idx) == DSC_EVERSION);
    memcpy(c, b, n);
    c[17] = 9;
    CHECK(dsc_mmidx_parse(c, n, &idx) == DSC_ENOTSUP);
    memcpy(c, b, n);
    put64(c + 34 + 36, 1); /* document index not starting at 0 */
    CHECK(dsc_mmidx_parse(c, n, &idx) == DSC_EBADHEADER);
    memcpy(c, b, n);
    put64(c + 34 + 52, 2); /* not ending at the sequence count */
    CHECK(dsc_mmidx_parse(c, n, &idx) == DSC_EBADHEADER);
    memcpy(c, b, n);
    put64(c + 34 + 44, 4); /* past the last sequence */
    CHECK(dsc_mmidx_parse(c, n, &idx) == DSC_EBADHEADER);
    memcpy(c, b, n);
    put32(c + 34, 0x80000000u); /* negative length */
    CHECK(dsc_mmidx_parse(c, n, &idx) == DSC_EBADHEADER);
    memcpy(c, b, n);
    put64(c + 18, UINT64_MAX / 4); /* absurd counts: no overflow, truncated */
    CHECK(dsc_mmidx_parse(c, n, &idx) == DSC_ETRUNCATED);
}

/* ---- MDS ------------------------------------------------------------------------------------ */
static const char index_json[] =
    "{\"version\": 2, \"shards\": [{\"format\": \"mds\", \"version\": 2, \"compression\": "
    "\"zstd:7\", \"hashes\": [], \"size_limit\": 67108864, \"samples\": 2,"
    "\"raw_data\": {\"basename\": \"shard.00000.mds\", \"bytes\": 100, \"hashes\": {}},"
    "\"zip_data\": {\"basename\": \"shard.00000.mds.zstd\", \"bytes\": 60, \"hashes\": {}},"
    "\"column_names\": [\"b\", \"n\", \"v\"], \"column_encodings\": [\"str\", \"int\", "
    "\"ndarray:uint8:2,2\"], \"column_sizes\": [null, 8, 4]}]}";

static void test_mds(void) {
    dsc_mds_index_t index;
    char err[256];
    REQUIRE(dsc_mds_index_parse(index_json, strlen(index_json), &index, err, sizeof err) == 0);
    CHECK(index.column_count == 3 && index.shard_count == 1 && index.samples == 2);
    CHECK(index.shards[0].zstd == 1 &&
          strcmp(index.shards[0].zip_basename, "shard.00000.mds.zstd") == 0);
    CHECK(index.columns[0].kind == DSC_MDS_BYTES && index.columns[0].size == 0);
    CHECK(index.columns[1].dtype == DSC_DTYPE_I64 && index.columns[1].size == 8);
    CHECK(index.columns[2].kind == DSC_MDS_NDARRAY && index.columns[2].ndim == 2 &&
          index.columns[2].size == 4);

    /* a shard of two samples: "hi",5,[1,2,3,4] and "",-1,[5,6,7,8] */
    uint8_t shard[128];
    size_t at = 4 + 3 * 4 + 2; /* count, 3 offsets, a 2-byte "config" */
    uint8_t *p = shard + at;
    uint32_t off0 = (uint32_t)at;
    put32(p, 2), memcpy(p + 4, "hi", 2), put64(p + 6, 5), memcpy(p + 14, "\1\2\3\4", 4);
    p += 18;
    uint32_t off1 = (uint32_t)(p - shard);
    put32(p, 0), put64(p + 4, (uint64_t)-1), memcpy(p + 12, "\5\6\7\10", 4);
    p += 16;
    uint32_t end = (uint32_t)(p - shard);
    put32(shard, 2), put32(shard + 4, off0), put32(shard + 8, off1), put32(shard + 12, end);
    memcpy(shard + 16, "{}", 2);
    dsc_mds_shard_t s;
    const char *problem;
    REQUIRE(dsc_mds_shard_open(shard, end, 2, &s, &problem) == 0);
    dsc_mds_value_t v[3];
    REQUIRE(dsc_mds_sample(&s, &index, 0, v, &problem) == 0);
    CHECK(v[0].bytes == 2 && memcmp(v[0].data, "hi", 2) == 0 && v[1].bytes == 8 &&
          v[2].bytes == 4 && v[2].data[3] == 4);
    REQUIRE(dsc_mds_sample(&s, &index, 1, v, &problem) == 0);
    CHECK(v[0].bytes == 0 && v[2].data[0] == 5);
    CHECK(dsc_mds_sample(&s, &index, 2, v, &problem) == DSC_ERANGE);
    CHECK(dsc_mds_shard_open(shard, end, 3, &s, &problem) == DSC_EBADHEADER && problem);
    for (size_t len = 0; len < end; len++) /* every truncation is caught when opening */
        CHECK(dsc_mds_shard_open(shard, len, 2, &s, &problem) < 0 && problem != NULL);
    /* a variable size that runs past the sample */
    put32(shard + off0, 200);
    REQUIRE(dsc_mds_shard_open(shard, end, 2, &s, &problem) == 0);
    CHECK(dsc_mds_sample(&s, &index, 0, v, &problem) == DSC_ECORRUPT && problem != NULL);
    put32(shard + off0, 1); /* one byte left over */
    CHECK(dsc_mds_sample(&s, &index, 0, v, &problem) == DSC_ECORRUPT);
    dsc_mds_index_free(&index);
    /* a merged index names shards in subdirectories */
    {
        char merged[sizeof index_json + 16];
        const char *at_name = strstr(index_json, "\"shard.00000.mds\"");
        REQUIRE(at_name != NULL);
        snprintf(merged, sizeof merged, "%.*s\"train/shard.00000.mds\"%s",
                 (int)(at_name - index_json), index_json, at_name + strlen("\"shard.00000.mds\""));
        CHECK(dsc_mds_index_parse(merged, strlen(merged), &index, err, sizeof err) == 0);
        CHECK(strcmp(index.shards[0].raw_basename, "train/shard.00000.mds") == 0);
        dsc_mds_index_free(&index);
    }

    /* index problems */
    const char *bad[] = {
        "{}",
        "{\"version\": 2, \"shards\": []}",
        "[1,2]",
        "{\"version\": 2, \"shards\": [{\"format\": \"json\", \"version\": 2}]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(dsc_mds_index_parse(bad[i], strlen(bad[i]), &index, err, sizeof err) < 0);
        CHECK(err[0] != '\0');
    }
    char text[sizeof index_json + 16];
    const struct {
        const char *from, *to;
        int rc;
    } edits[] = {
        {"\"ndarray:uint8:2,2\"", "\"ndarray\"", DSC_EBADMANIFEST}, /* declared size 4 */
        {"\"ndarray:uint8:2,2\"", "\"ndarray:complex64:2,2\"", DSC_ENOTSUP},
        {"\"zstd:7\"", "\"gz\"", DSC_ENOTSUP},
        {"[null, 8, 4]", "[null, 8, 5]", DSC_EBADMANIFEST},
        {"shard.00000.mds\"", "../x.mds\"", DSC_EBADMANIFEST},
        {"shard.00000.mds\"", "a/./x.mds\"", DSC_EBADMANIFEST},
        {"shard.00000.mds\"", "/etc/x.mds\"", DSC_EBADMANIFEST},
        {"shard.00000.mds\"", "a/\"", DSC_EBADMANIFEST},
        {"\"int\"", "\"pkl2\"", DSC_ENOTSUP},
    };
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        const char *at_from = strstr(index_json, edits[i].from);
        REQUIRE(at_from != NULL);
        size_t head = (size_t)(at_from - index_json);
        snprintf(text, sizeof text, "%.*s%s%s", (int)head, index_json, edits[i].to,
                 at_from + strlen(edits[i].from));
        int rc = dsc_mds_index_parse(text, strlen(text), &index, err, sizeof err);
        CHECK_EQ_INT(rc, edits[i].rc);
        CHECK(err[0] != '\0');
    }
    /* every prefix of the index is refused, never a crash */
    for (size_t len = 0; len < strlen(index_json); len += 7)
        CHECK(dsc_mds_index_parse(index_json, len, &index, err, sizeof err) < 0);
}

static void test_mds_ndarray(void) {
    dsc_mds_column_t dyn, typed;
    memset(&dyn, 0, sizeof dyn);
    memset(&typed, 0, sizeof typed);
    dyn.kind = typed.kind = DSC_MDS_NDARRAY_DYN;
    typed.dtype = DSC_DTYPE_I16;
    /* "ndarray": int32 (33), 2 dims of u8 width, shape 2x1, 8 value bytes */
    const uint8_t a[] = {33, 2 << 2 | 0, 2, 1, 1, 0, 0, 0, 2, 0, 0, 0};
    int dtype;
    uint32_t ndim;
    uint64_t shape[DSC_MDS_MAX_DIMS], off;
    const char *problem;
    CHECK(dsc_mds_ndarray(&dyn, a, sizeof a, &dtype, &ndim, shape, &off, &problem) == 0);
    CHECK(dtype == DSC_DTYPE_I32 && ndim == 2 && shape[0] == 2 && shape[1] == 1 && off == 4);
    for (size_t len = 0; len < sizeof a; len++) /* every truncation refused with a reason */
        CHECK(dsc_mds_ndarray(&dyn, a, len, &dtype, &ndim, shape, &off, &problem) == DSC_ECORRUPT &&
              problem != NULL);
    /* "ndarray:int16": no dtype byte; a u16-wide shape of 3 */
    const uint8_t b[] = {1 << 2 | 1, 3, 0, 1, 0, 2, 0, 3, 0};
    CHECK(dsc_mds_ndarray(&typed, b, sizeof b, &dtype, &ndim, shape, &off, &problem) == 0);
    CHECK(dtype == DSC_DTYPE_I16 && ndim == 1 && shape[0] == 3 && off == 3);
    const uint8_t zero_dim[] = {33, 1 << 2, 0};
    CHECK(dsc_mds_ndarray(&dyn, zero_dim, sizeof zero_dim, &dtype, &ndim, shape, &off, &problem) ==
          DSC_ECORRUPT);
    const uint8_t bad_code[] = {7, 1 << 2, 1, 0};
    CHECK(dsc_mds_ndarray(&dyn, bad_code, sizeof bad_code, &dtype, &ndim, shape, &off, &problem) ==
          DSC_ECORRUPT);
    const uint8_t nine_dims[] = {8, 9 << 2};
    CHECK(dsc_mds_ndarray(&dyn, nine_dims, sizeof nine_dims, &dtype, &ndim, shape, &off,
                          &problem) == DSC_ECORRUPT);
}

int main(void) {
    test_wds_rules();
    test_wds_grouping();
    test_mmidx();
    test_mds();
    test_mds_ndarray();
    TEST_DONE();
}
