/* Shared helpers: error names and messages, dtype table, size parsing and formatting, checked
 * arithmetic, HOST:PORT splitting, monotonic time. */
#include "dscache.h"
#include "testlib.h"
#include "util.h"

static void test_errors(void) {
    static const struct {
        int code;
        const char *name;
    } codes[] = {
#define CODE_(name, value, msg) {DSC_##name, "DSC_" #name},
        DSC_ERRNO_MAP(CODE_)
#undef CODE_
    };
    size_t n = sizeof codes / sizeof codes[0];
    CHECK(n >= 40);
    for (size_t i = 0; i < n; i++) {
        int code = codes[i].code;
        CHECK(code < 0);
        const char *msg = dsc_strerror(code), *name = dsc_err_name(code);
        CHECK(msg != NULL && name != NULL);
        if (msg == NULL || name == NULL)
            continue;
        CHECK(strcmp(name, codes[i].name) == 0);
        CHECK(strcmp(msg, "unknown error") != 0 && msg[0] != '\0');
        for (size_t j = 0; j < i; j++) {
            CHECK(codes[j].code != code);
            CHECK(strcmp(dsc_strerror(codes[j].code), msg) != 0);
            CHECK(strcmp(dsc_err_name(codes[j].code), name) != 0);
        }
        /* The project's own codes sit below -4000, clear of every errno value. */
        if (strcmp(name, "DSC_EOF") == 0 || code <= -4000)
            CHECK(code < -4000);
    }
    CHECK(strcmp(dsc_strerror(0), "success") == 0);
    CHECK(strcmp(dsc_strerror(-999999), "unknown error") == 0);
    CHECK(strcmp(dsc_strerror(12345), "unknown error") == 0);
    CHECK(strcmp(dsc_err_name(-999999), "DSC_UNKNOWN") == 0);
    CHECK(DSC_ENOMEM == -ENOMEM && DSC_ENOENT == -ENOENT && DSC_EINVAL == -EINVAL);
    CHECK(strcmp(dsc_err_name(DSC_ECHUNKSUM), "DSC_ECHUNKSUM") == 0);
    CHECK(strcmp(dsc_version(), DSC_VERSION_STRING) == 0);
}

/* A -errno value the list does not map reads as the system's message, not "unknown error". */
static void test_strerror_errno(void) {
    static const int unmapped[] = {EPERM, EMFILE, EHOSTUNREACH, EROFS, ENOTDIR};
    for (size_t i = 0; i < sizeof unmapped / sizeof unmapped[0]; i++) {
        int e = unmapped[i];
        CHECK(strcmp(dsc_err_name(-e), "DSC_UNKNOWN") == 0); /* really not in the list */
        const char *msg = dsc_strerror(-e);
        REQUIRE(msg != NULL);
        CHECK(strcmp(msg, "unknown error") != 0);
        /* No setlocale() here: the C locale, where strerror() is untranslated too. */
        CHECK(strcmp(msg, strerror(e)) == 0);
    }
    CHECK(strcmp(dsc_strerror(-EPERM), "Operation not permitted") == 0);
    /* Mapped codes keep the list's own message. */
    CHECK(strcmp(dsc_strerror(-ENOMEM), "out of memory") == 0);
    CHECK(strcmp(dsc_strerror(DSC_ECHUNKSUM), "chunk checksum mismatch (stored bytes)") == 0);
    /* Project range (unassigned), numbers without a system message, positive values. */
    CHECK(strcmp(dsc_strerror(-4000), "unknown error") == 0);
    CHECK(strcmp(dsc_strerror(-4999), "unknown error") == 0);
    CHECK(strcmp(dsc_strerror(-3999), "unknown error") == 0);
    CHECK(strcmp(dsc_strerror(EPERM), "unknown error") == 0);
    CHECK(strcmp(dsc_strerror(-2147483647 - 1), "unknown error") == 0);
    for (int e = 1; e < 4000; e++) {
        const char *msg = dsc_strerror(-e);
        CHECK(msg != NULL && msg[0] != '\0');
    }
}

static void test_dtypes(void) {
    static const struct {
        int dtype;
        const char *name, *numpy;
        int size;
    } table[] = {
        {DSC_DTYPE_U8, "u8", "uint8", 1},        {DSC_DTYPE_I8, "i8", "int8", 1},
        {DSC_DTYPE_U16, "u16", "uint16", 2},     {DSC_DTYPE_I16, "i16", "int16", 2},
        {DSC_DTYPE_U32, "u32", "uint32", 4},     {DSC_DTYPE_I32, "i32", "int32", 4},
        {DSC_DTYPE_I64, "i64", "int64", 8},      {DSC_DTYPE_F16, "f16", "float16", 2},
        {DSC_DTYPE_BF16, "bf16", "bfloat16", 2}, {DSC_DTYPE_F32, "f32", "float32", 4},
        {DSC_DTYPE_F64, "f64", "float64", 8},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int dt = table[i].dtype;
        CHECK_EQ_INT(dsc_dtype_size(dt), table[i].size);
        CHECK(dsc_dtype_name(dt) != NULL && strcmp(dsc_dtype_name(dt), table[i].name) == 0);
        CHECK_EQ_INT(dsc_dtype_parse(table[i].name), dt);
        CHECK_EQ_INT(dsc_dtype_parse(table[i].numpy), dt);
    }
    CHECK_EQ_INT(dsc_dtype_size(0), 0);
    CHECK_EQ_INT(dsc_dtype_size(12), 0);
    CHECK_EQ_INT(dsc_dtype_size(-1), 0);
    CHECK(dsc_dtype_name(0) == NULL && dsc_dtype_name(12) == NULL && dsc_dtype_name(-5) == NULL);
    CHECK_EQ_INT(dsc_dtype_parse(NULL), DSC_EINVAL);
    CHECK_EQ_INT(dsc_dtype_parse(""), DSC_EINVAL);
    CHECK_EQ_INT(dsc_dtype_parse("f128"), DSC_EINVAL);
    CHECK_EQ_INT(dsc_dtype_parse("F32"), DSC_EINVAL);
    CHECK_EQ_INT(dsc_dtype_parse("u64"), DSC_EINVAL); /* not in the table */
}

static void test_parse_size(void) {
    static const struct {
        const char *text;
        uint64_t value;
    } good[] = {
        {"0", 0},
        {"4096", 4096},
        {"64K", 64ull << 10},
        {"64k", 64ull << 10},
        {"512M", 512ull << 20},
        {"512MiB", 512ull << 20},
        {"512MB", 512ull << 20},
        {"4G", 4ull << 30},
        {"1T", 1ull << 40},
        {"4096B", 4096},
        {"16777215T", 16777215ull << 40},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uint64_t v = 1;
        CHECK_EQ_INT(dsc_parse_size(good[i].text, &v), 0);
        CHECK(v == good[i].value);
    }
    static const char *bad[] = {
        "",
        "1.5G",
        "12Q",
        "G",
        "-1",
        " 4G",
        "4G ",
        "4 G",
        "4GG",
        "4Gx",
        "4BB",
        "0x10",
        "+4",
        "4GiBB",
        "18446744073709551616", /* 2^64 */
        "16777216T",            /* 2^64 bytes */
        "99999999999999999999999K",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v = 77;
        int rc = dsc_parse_size(bad[i], &v);
        if (rc != DSC_EINVAL)
            fprintf(stderr, "dsc_parse_size(\"%s\") accepted\n", bad[i]);
        CHECK_EQ_INT(rc, DSC_EINVAL);
    }
    uint64_t v;
    CHECK_EQ_INT(dsc_parse_size(NULL, &v), DSC_EINVAL);

    char buf[32];
    CHECK(strcmp(dsc_format_size(512, buf, sizeof buf), "512 B") == 0);
    CHECK(strcmp(dsc_format_size(3ull << 29, buf, sizeof buf), "1.5 GiB") == 0);
    CHECK(strcmp(dsc_format_size(1ull << 50, buf, sizeof buf), "1024.0 TiB") == 0);
    char tiny[4];
    dsc_format_size(1ull << 30, tiny, sizeof tiny);
    CHECK(strlen(tiny) == 3); /* truncated, still terminated */
}

static void test_arith_and_time(void) {
    uint64_t out;
    CHECK_EQ_INT(dsc_add_u64(UINT64_MAX - 1, 1, &out), 0);
    CHECK(out == UINT64_MAX);
    CHECK_EQ_INT(dsc_add_u64(UINT64_MAX, 1, &out), DSC_EOVERFLOW);
    CHECK_EQ_INT(dsc_mul_u64(1ull << 32, 1ull << 31, &out), 0);
    CHECK(out == 1ull << 63);
    CHECK_EQ_INT(dsc_mul_u64(1ull << 32, 1ull << 32, &out), DSC_EOVERFLOW);
    uint64_t a = dsc_now_ns(), b = dsc_now_ns();
    CHECK(a > 0 && b >= a);
    CHECK(dsc_now_s() > 0.0);
}

static void test_hostport(void) {
    char host[64];
    uint16_t port = 0;
    CHECK_EQ_INT(dsc_split_hostport("127.0.0.1:8080", host, sizeof host, &port), 0);
    CHECK(strcmp(host, "127.0.0.1") == 0 && port == 8080);
    CHECK_EQ_INT(dsc_split_hostport("cache-0.svc:0", host, sizeof host, &port), 0);
    CHECK(strcmp(host, "cache-0.svc") == 0 && port == 0);
    CHECK_EQ_INT(dsc_split_hostport("[::1]:65535", host, sizeof host, &port), 0);
    CHECK(strcmp(host, "::1") == 0 && port == 65535);
    static const char *bad[] = {
        "host",
        "host:",
        ":80",
        "host:65536",
        "host:80x",
        "host:-1",
        "[::1]9000",
        "[::1",
        "[]:80",
        "",
        "host:99999999999999999999",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = dsc_split_hostport(bad[i], host, sizeof host, &port);
        if (rc != DSC_EINVAL)
            fprintf(stderr, "dsc_split_hostport(\"%s\") accepted\n", bad[i]);
        CHECK_EQ_INT(rc, DSC_EINVAL);
    }
    CHECK_EQ_INT(dsc_split_hostport(NULL, host, sizeof host, &port), DSC_EINVAL);
    /* The host must fit with its NUL. */
    CHECK_EQ_INT(dsc_split_hostport("abcd:1", host, 4, &port), DSC_EINVAL);
    CHECK_EQ_INT(dsc_split_hostport("abc:1", host, 4, &port), 0);
    CHECK(strcmp(host, "abc") == 0 && port == 1);
    CHECK_EQ_INT(dsc_split_hostport("a:1", host, 0, &port), DSC_EINVAL);
}

int main(void) {
    test_errors();
    test_strerror_errno();
    test_dtypes();
    test_parse_size();
    test_arith_and_time();
    test_hostport();
    return TEST_DONE();
}
