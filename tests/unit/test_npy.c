/* .npy header parser: accepted headers (versions 1-3, every supported dtype, odd spellings),
 * every rejection with its code, and every prefix of a valid header is a partial one. */
#include "npy.h"
#include "testlib.h"

/* Builds a version-1 (or 2) file header around a dictionary text, padded like numpy does. */
static size_t make(uint8_t *out, size_t cap, int version, const char *dict) {
    size_t preamble = version == 1 ? 10 : 12;
    size_t len = strlen(dict);
    size_t total = preamble + len + 1;
    size_t padded = (total + 63) / 64 * 64;
    REQUIRE(padded <= cap);
    memcpy(out, "\x93NUMPY", 6);
    out[6] = (uint8_t)version;
    out[7] = 0;
    size_t dict_len = padded - preamble;
    out[8] = (uint8_t)dict_len;
    out[9] = (uint8_t)(dict_len >> 8);
    if (version != 1) {
        out[10] = (uint8_t)(dict_len >> 16);
        out[11] = (uint8_t)(dict_len >> 24);
    }
    memcpy(out + preamble, dict, len);
    memset(out + preamble + len, ' ', padded - preamble - len - 1);
    out[padded - 1] = '\n';
    return padded;
}

static int64_t parse_dict(int version, const char *dict, dsc_npy_header_t *h) {
    uint8_t buf[4096];
    size_t n = make(buf, sizeof buf, version, dict);
    return dsc_npy_parse(buf, n, h);
}

int main(void) {
    dsc_npy_header_t h;
    uint8_t buf[4096];

    /* a typical header, and every prefix of it */
    size_t n =
        make(buf, sizeof buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (10, 3, 4), }");
    CHECK_EQ_INT(dsc_npy_parse(buf, n, &h), (int64_t)n);
    CHECK_EQ_INT(h.dtype, DSC_DTYPE_F32);
    CHECK_EQ_INT(h.ndim, 3);
    CHECK_EQ_INT(h.shape[0], 10);
    CHECK_EQ_INT(h.shape[2], 4);
    CHECK_EQ_INT(h.data_offset, n);
    CHECK_EQ_INT(h.data_bytes, 10 * 3 * 4 * 4);
    CHECK(h.problem == NULL);
    for (size_t len = 0; len < n; len++) {
        int64_t rc = dsc_npy_parse(buf, len, &h);
        if (rc != DSC_ETRUNCATED) {
            fprintf(stderr, "prefix %zu: %lld\n", len, (long long)rc);
            CHECK(rc == DSC_ETRUNCATED);
        }
        CHECK(h.problem != NULL);
    }
    /* the size probe needs the preamble only */
    CHECK_EQ_INT(dsc_npy_header_size(buf, 10), (int64_t)n);
    CHECK_EQ_INT(dsc_npy_header_size(buf, 9), DSC_ETRUNCATED);

    /* every supported dtype */
    static const struct {
        const char *descr;
        int dtype;
    } ok[] = {{"|u1", DSC_DTYPE_U8},  {"|i1", DSC_DTYPE_I8},  {"<u2", DSC_DTYPE_U16},
              {"<i2", DSC_DTYPE_I16}, {"<u4", DSC_DTYPE_U32}, {"<i4", DSC_DTYPE_I32},
              {"<i8", DSC_DTYPE_I64}, {"<f2", DSC_DTYPE_F16}, {"<f4", DSC_DTYPE_F32},
              {"<f8", DSC_DTYPE_F64}, {"=f4", DSC_DTYPE_F32}, {">u1", DSC_DTYPE_U8}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char dict[256];
        snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (2,), }",
                 ok[i].descr);
        CHECK(parse_dict(1, dict, &h) > 0);
        CHECK_EQ_INT(h.dtype, ok[i].dtype);
    }
    /* key order, double quotes, scalar and 1-tuple shapes, no trailing comma, version 2, 'L' */
    CHECK(parse_dict(1, "{'shape': (), 'fortran_order': False, 'descr': '<i8'}", &h) > 0);
    CHECK_EQ_INT(h.ndim, 0);
    CHECK_EQ_INT(h.data_bytes, 8);
    CHECK(parse_dict(2, "{\"descr\": \"<u2\", \"fortran_order\": False, \"shape\": (7,)}", &h) > 0);
    CHECK_EQ_INT(h.ndim, 1);
    CHECK_EQ_INT(h.major, 2);
    CHECK(parse_dict(1, "{'descr': '<u2', 'fortran_order': False, 'shape': (3L, 5L), }", &h) > 0);
    CHECK_EQ_INT(h.shape[1], 5);
    CHECK(parse_dict(1, "{'descr': '<u2', 'fortran_order': False, 'shape': (0, 5), }", &h) > 0);
    CHECK_EQ_INT(h.data_bytes, 0);

    /* rejections: not ingestible */
    CHECK_EQ_INT(parse_dict(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", &h),
                 DSC_ENOTSUP);
    CHECK(h.problem != NULL && strstr(h.problem, "Fortran") != NULL);
    CHECK_EQ_INT(parse_dict(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", &h),
                 DSC_ENOTSUP);
    CHECK(strstr(h.problem, "big-endian") != NULL);
    CHECK_EQ_INT(parse_dict(1, "{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", &h),
                 DSC_ENOTSUP);
    CHECK(strstr(h.problem, "object") != NULL);
    CHECK_EQ_INT(parse_dict(1, "{'descr': '<u8', 'fortran_order': False, 'shape': (2,), }", &h),
                 DSC_ENOTSUP);
    CHECK(strcmp(h.descr, "<u8") == 0);
    CHECK_EQ_INT(parse_dict(1, "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", &h),
                 DSC_ENOTSUP);
    CHECK_EQ_INT(parse_dict(1,
                            "{'descr': [('a', '<i4'), ('b', [('c', '<f4')])], "
                            "'fortran_order': False, 'shape': (2,), }",
                            &h),
                 DSC_ENOTSUP);
    CHECK(strstr(h.problem, "structured") != NULL);
    CHECK_EQ_INT(parse_dict(1,
                            "{'descr': '<f8', 'fortran_order': False, "
                            "'shape': (4294967296, 4294967296), }",
                            &h),
                 DSC_EOVERFLOW);

    /* rejections: malformed */
    static const char *bad[] = {
        "",
        "[]",
        "{",
        "{'descr': '<f4'}",
        "{'descr': '<f4', 'fortran_order': False}",
        "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}",
        "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } junk",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,,), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2 3), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,), }",
        "{'descr': '<f\\4', 'fortran_order': False, 'shape': (2,), }",
        "{'descr': '<f4, 'fortran_order': False, 'shape': (2,), }",
        "{descr: '<f4', 'fortran_order': False, 'shape': (2,), }",
        "{'descr': [('a', '<i4'), 'fortran_order': False, 'shape': (2,), }",
        ("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,"
         "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1), }"),
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t rc = parse_dict(1, bad[i], &h);
        if (rc != DSC_EBADHEADER)
            fprintf(stderr, "bad[%zu] -> %lld\n", i, (long long)rc);
        CHECK_EQ_INT(rc, DSC_EBADHEADER);
        CHECK(h.problem != NULL);
    }
    /* magic, version, size bound */
    n = make(buf, sizeof buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }");
    buf[1] = 'X';
    CHECK_EQ_INT(dsc_npy_parse(buf, n, &h), DSC_EBADMAGIC);
    buf[1] = 'N';
    buf[6] = 4;
    CHECK_EQ_INT(dsc_npy_parse(buf, n, &h), DSC_EVERSION);
    buf[6] = 2;
    buf[8] = buf[9] = buf[10] = buf[11] = 0xff;
    CHECK_EQ_INT(dsc_npy_parse(buf, n, &h), DSC_ETOOLARGE);
    CHECK_EQ_INT(dsc_npy_parse(buf, 3, &h), DSC_ETRUNCATED);
    return TEST_DONE();
}
