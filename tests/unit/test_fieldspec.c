/* Field specs (proto/fieldspec.h): every form the writers take (the bracket form, the CLI's
 * older NxN form, numpy dtype names, spaces, a type alone), every refusal with its position and
 * token, lists (duplicates, too many, sizes), the messages, formatting back, every prefix and
 * every single-byte change of valid specs, and the library's dsc_field_spec_parse. */
#include "dscache.h"
#include "fieldspec.h"
#include "testlib.h"

#include <string.h>

/* Parses text (NUL-terminated) alone and formats it back. Returns the parse result. */
static int parse_fmt(const char *text, unsigned flags, char *out, size_t cap,
                     dsc_fieldspec_error_t *err) {
    dsc_field_t f;
    int rc = dsc_fieldspec_parse(text, strlen(text), flags, &f, err);
    if (rc == 0)
        REQUIRE(dsc_fieldspec_format(&f, out, cap) > 0);
    return rc;
}

static void test_valid(void) {
    static const struct {
        const char *text, *canonical;
        unsigned flags;
    } cases[] = {
        {"label:i64", "label:i64", 0},
        {"image:u8[3,32,32]", "image:u8[3,32,32]", 0},
        {"ids:i32[]", "ids:i32[?]", 0},
        {"ids:i32[ ]", "ids:i32[?]", 0},
        {"ids:i32[?]", "ids:i32[?]", 0},
        {"mel:f32[?,80]", "mel:f32[?,80]", 0},
        {"  mel : f32 [ ? , 80 ]  ", "mel:f32[?,80]", 0},
        {"\tmel:f32[?,\t80]", "mel:f32[?,80]", 0},
        {"image:u8:3x32x32", "image:u8[3,32,32]", 0},
        {"image:u8:3x32x32  ", "image:u8[3,32,32]", 0},
        {"label:i64:", "label:i64", 0},
        {"x:uint8[2]", "x:u8[2]", 0},
        {"x:bfloat16", "x:bf16", 0},
        {"x:float64:1", "x:f64[1]", 0},
        {"x:int32[]", "x:i32[?]", 0},
        {"x:u8[03]", "x:u8[3]", 0},
        {"a.b-c_9:u16[4294967295]", "a.b-c_9:u16[4294967295]", 0},
        {"x:u8[1,1,1,1,1,1,1,1]", "x:u8[1,1,1,1,1,1,1,1]", 0},
        {"x:u8:1x1x1x1x1x1x1x1", "x:u8[1,1,1,1,1,1,1,1]", 0},
        {"abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijk:u8",
         "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijk:u8", 0},
        /* the type alone (dscache.Writer's {name: spec}) */
        {"u8[3,32,32]", "u8[3,32,32]", DSC_FIELDSPEC_TYPE_ONLY},
        {"i32[]", "i32[?]", DSC_FIELDSPEC_TYPE_ONLY},
        {"int32[]", "i32[?]", DSC_FIELDSPEC_TYPE_ONLY},
        {" f32 [?,80] ", "f32[?,80]", DSC_FIELDSPEC_TYPE_ONLY},
        {"i64", "i64", DSC_FIELDSPEC_TYPE_ONLY},
        {"u8:3x32x32", "u8[3,32,32]", DSC_FIELDSPEC_TYPE_ONLY},
        {"u8:", "u8", DSC_FIELDSPEC_TYPE_ONLY},
        {"label:i64", "label:i64", DSC_FIELDSPEC_TYPE_ONLY}, /* a name is still taken */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[DSC_FIELDSPEC_MAX];
        dsc_fieldspec_error_t err;
        int rc = parse_fmt(cases[i].text, cases[i].flags, out, sizeof out, &err);
        if (rc != 0 || strcmp(out, cases[i].canonical) != 0)
            fprintf(stderr, "'%s': rc %d, '%s' (want '%s'), %s\n", cases[i].text, rc,
                    rc == 0 ? out : "", cases[i].canonical, rc == 0 ? "" : err.what);
        CHECK(rc == 0 && strcmp(out, cases[i].canonical) == 0);
        /* the canonical form parses to itself */
        char again[DSC_FIELDSPEC_MAX];
        CHECK(parse_fmt(cases[i].canonical, cases[i].flags, again, sizeof again, &err) == 0 &&
              strcmp(again, cases[i].canonical) == 0);
    }
    /* every dtype, by both names */
    for (int d = DSC_DTYPE_U8; d <= DSC_DTYPE_F64; d++) {
        char text[64], out[DSC_FIELDSPEC_MAX];
        dsc_fieldspec_error_t err;
        snprintf(text, sizeof text, "v:%s[2]", dsc_dtype_name(d));
        REQUIRE(parse_fmt(text, 0, out, sizeof out, &err) == 0);
        CHECK(strcmp(out, text) == 0);
    }
    dsc_field_t f;
    REQUIRE(dsc_fieldspec_parse("mel:f32[?,80]", 13, 0, &f, NULL) == 0);
    CHECK(strcmp(f.name, "mel") == 0 && f.dtype == DSC_DTYPE_F32 && f.ndim == 2 &&
          f.shape[0] == DSC_DIM_VARIABLE && f.shape[1] == 80);
    /* len bounds the text: what follows is not read */
    REQUIRE(dsc_fieldspec_parse("x:u8[3]garbage", 7, 0, &f, NULL) == 0);
    CHECK(f.ndim == 1 && f.shape[0] == 3);
}

static void test_errors(void) {
    static const struct {
        const char *text;
        size_t len; /* 0: strlen */
        unsigned flags;
        const char *what;
        size_t pos, tok;
    } cases[] = {
        {"", 0, 0, "expected NAME:DTYPE", 0, 0},
        {"x", 0, 0, "expected NAME:DTYPE", 0, 0},
        {"u8[3]", 0, 0, "expected NAME:DTYPE", 0, 0},
        {":u8", 0, 0, "missing field name", 0, 0},
        {"a b:u8", 0, 0, "field name must be", 0, 3},
        {"a/b:u8", 0, 0, "field name must be", 0, 3},
        {"abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijkl:u8", 0, 0,
         "longer than 63", 0, 64},
        {"x:", 0, 0, "missing dtype", 2, 0},
        {"x:[3]", 0, 0, "missing dtype", 2, 0},
        {"x:u7", 0, 0, "unknown dtype", 2, 2},
        {"x:uint8x", 0, 0, "unknown dtype", 2, 6},
        {"x:u8\0", 5, 0, "unknown dtype", 2, 3},
        {"x:u8[3,?]", 0, 0, "only the leading dimension may be variable", 7, 1},
        {"x:u8[?,?]", 0, 0, "only the leading dimension may be variable", 7, 1},
        {"x:u8[0]", 0, 0, "bad dimension", 5, 1},
        {"x:u8[4294967296]", 0, 0, "bad dimension", 5, 10},
        {"x:u8[99999999999999999999999]", 0, 0, "bad dimension", 5, 23},
        {"x:u8[3,]", 0, 0, "trailing ','", 6, 1},
        {"x:u8[3", 0, 0, "missing ']'", 4, 1},
        {"x:u8[", 0, 0, "missing ']'", 4, 1},
        {"x:u8[3,", 0, 0, "missing ']'", 4, 1},
        {"x:u8[,3]", 0, 0, "missing dimension", 5, 0},
        {"x:u8[3a]", 0, 0, "bad dimension", 5, 2},
        {"x:u8[a]", 0, 0, "bad dimension", 5, 1},
        {"x:u8[-1]", 0, 0, "bad dimension", 5, 2},
        {"x:u8[3;4]", 0, 0, "bad dimension", 5, 3},
        {"x:u8[3 4]", 0, 0, "bad dimension", 5, 1},
        {"x:u8[1,1,1,1,1,1,1,1,1]", 0, 0, "at most 8 dimensions", 21, 1},
        {"x:u8[3]x", 0, 0, "unexpected text", 7, 1},
        {"x:u8[3]:4", 0, 0, "unexpected text", 7, 2},
        {"x:u8 y", 0, 0, "unexpected text", 5, 1},
        {"x:u8:3x0", 0, 0, "bad dimension", 7, 1},
        {"x:u8:3xx", 0, 0, "missing dimension", 7, 0},
        {"x:u8:3x", 0, 0, "missing dimension", 7, 0},
        {"x:u8:a", 0, 0, "bad dimension", 5, 1},
        {"x:u8:3;", 0, 0, "bad dimension", 5, 2},
        {"x:u8:3 x4", 0, 0, "unexpected text", 7, 2},
        {"x:u8:?", 0, 0, "bad dimension", 5, 1},
        {"x:u8:1x1x1x1x1x1x1x1x1", 0, 0, "at most 8 dimensions", 21, 1},
        {"q8", 0, DSC_FIELDSPEC_TYPE_ONLY, "unknown dtype", 0, 2},
        {"", 0, DSC_FIELDSPEC_TYPE_ONLY, "missing dtype", 0, 0},
        {"u8:3x", 0, DSC_FIELDSPEC_TYPE_ONLY, "missing dimension", 5, 0},
        {"u8[3,?]", 0, DSC_FIELDSPEC_TYPE_ONLY, "only the leading", 5, 1},
        {"x:f64[65536,65536]", 0, DSC_FIELDSPEC_SIZED, "over 2^32 - 1", 0, 0},
        {"f64[65536,65536]", 0, DSC_FIELDSPEC_SIZED | DSC_FIELDSPEC_TYPE_ONLY, "over 2^32 - 1", 0,
         0},
        {"x:u16[?,4294967295]", 0, DSC_FIELDSPEC_SIZED, "over 2^32 - 1", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len = cases[i].len ? cases[i].len : strlen(cases[i].text);
        dsc_field_t f;
        dsc_fieldspec_error_t err;
        int rc = dsc_fieldspec_parse(cases[i].text, len, cases[i].flags, &f, &err);
        int ok = rc == DSC_EINVAL && err.what != NULL && strstr(err.what, cases[i].what) &&
                 err.pos == cases[i].pos && err.len == cases[i].tok;
        if (!ok)
            fprintf(stderr, "'%s': rc %d, '%s' at %zu+%zu (want '%s' at %zu+%zu)\n", cases[i].text,
                    rc, rc ? err.what : "", rc ? err.pos : 0, rc ? err.len : 0, cases[i].what,
                    cases[i].pos, cases[i].tok);
        CHECK(ok);
        char msg[512];
        int n = dsc_fieldspec_message(cases[i].text, len, &err, msg, sizeof msg);
        CHECK(n > 0 && (size_t)n == strlen(msg) && strstr(msg, cases[i].what) != NULL);
    }
}

static void test_lists(void) {
    dsc_schema_t s;
    dsc_fieldspec_error_t err;
    const char *two = "x:u8[3,4], y:i64 ,ids:i32[]";
    REQUIRE(dsc_fieldspec_parse_list(two, strlen(two), &s, &err) == 0);
    CHECK(s.field_count == 3 && s.sample_bytes == 20 && s.var_count == 1);
    CHECK(strcmp(s.fields[1].name, "y") == 0 && s.fields[2].variable == 1);
    const char *old = "image:u8:3x32x32,label:i64,"; /* one trailing ',' allowed */
    REQUIRE(dsc_fieldspec_parse_list(old, strlen(old), &s, &err) == 0);
    CHECK(s.field_count == 2 && s.fields[0].sample_bytes == 3072);
    char sixteen[256] = "";
    for (int i = 0; i < 16; i++)
        snprintf(sixteen + strlen(sixteen), sizeof sixteen - strlen(sixteen), "%sf%d:u8",
                 i ? "," : "", i);
    CHECK(dsc_fieldspec_parse_list(sixteen, strlen(sixteen), &s, &err) == 0);

    static const struct {
        const char *text, *what;
        size_t pos, tok, item;
    } cases[] = {
        {"", "no fields given", 0, 0, 0},
        {"   ", "no fields given", 0, 0, 0},
        {"x:u8,,y:u8", "empty field spec", 5, 0, 5},
        {",x:u8", "empty field spec", 0, 0, 0},
        {"x:u8, ,", "empty field spec", 6, 0, 6},
        {"x:u8,x:i64", "given twice", 5, 1, 5},
        {"x:f64[65536,65536]", "over 2^32 - 1", 0, 0, 0},
        {"a:u8,b:q8", "unknown dtype", 7, 2, 5},
        {"a:u8[1,2],b:u8[3", "missing ']'", 14, 1, 10},
        {"a:u8[1,2],  b", "expected NAME:DTYPE", 12, 0, 12},
        {"x:u8, y:u8[2]:", "unexpected text", 13, 1, 6},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = dsc_fieldspec_parse_list(cases[i].text, strlen(cases[i].text), &s, &err);
        int ok = rc == DSC_EINVAL && strstr(err.what, cases[i].what) && err.pos == cases[i].pos &&
                 err.len == cases[i].tok && err.item == cases[i].item;
        if (!ok)
            fprintf(stderr, "list '%s': rc %d, '%s' at %zu+%zu item %zu\n", cases[i].text, rc,
                    rc ? err.what : "", err.pos, err.len, err.item);
        CHECK(ok);
    }
    char seventeen[300];
    snprintf(seventeen, sizeof seventeen, "%s,g:u8", sixteen);
    CHECK(dsc_fieldspec_parse_list(seventeen, strlen(seventeen), &s, &err) == DSC_EINVAL &&
          strstr(err.what, "more than 16") && err.item == strlen(sixteen) + 1);
    CHECK(dsc_fieldspec_parse_list(NULL, 0, &s, &err) == DSC_EINVAL);
}

static void test_messages(void) {
    dsc_field_t f;
    dsc_fieldspec_error_t err;
    char msg[512];
    const char *t = "x:u8[3,?]";
    REQUIRE(dsc_fieldspec_parse(t, strlen(t), 0, &f, &err) == DSC_EINVAL);
    dsc_fieldspec_message(t, strlen(t), &err, msg, sizeof msg);
    CHECK(strcmp(msg, "field spec 'x:u8[3,?]', position 8: only the leading dimension may be "
                      "variable: '?'") == 0);
    dsc_schema_t s;
    t = "a:u8,b:q8";
    REQUIRE(dsc_fieldspec_parse_list(t, strlen(t), &s, &err) == DSC_EINVAL);
    dsc_fieldspec_message(t, strlen(t), &err, msg, sizeof msg);
    CHECK(strcmp(msg, "field spec 'b:q8', position 8: unknown dtype: 'q8' (u8 i8 u16 i16 u32 i32 "
                      "i64 f16 bf16 f32 f64)") == 0);
    t = "";
    REQUIRE(dsc_fieldspec_parse_list(t, 0, &s, &err) == DSC_EINVAL);
    dsc_fieldspec_message(t, 0, &err, msg, sizeof msg);
    CHECK(strcmp(msg, "no fields given (e.g. \"input_ids:i32[],label:i64\")") == 0);
    t = "x:u8,,y:u8";
    REQUIRE(dsc_fieldspec_parse_list(t, strlen(t), &s, &err) == DSC_EINVAL);
    dsc_fieldspec_message(t, strlen(t), &err, msg, sizeof msg);
    CHECK(strcmp(msg, "empty field spec (position 6)") == 0);
    /* bytes outside printable ASCII are shown escaped */
    t = "x:\x01\xff";
    REQUIRE(dsc_fieldspec_parse(t, strlen(t), 0, &f, &err) == DSC_EINVAL);
    dsc_fieldspec_message(t, strlen(t), &err, msg, sizeof msg);
    CHECK(strcmp(msg, "field spec 'x:\\x01\\xff', position 3: unknown dtype: '\\x01\\xff' (u8 i8 "
                      "u16 i16 u32 i32 i64 f16 bf16 f32 f64)") == 0);
    /* a small buffer: cut, NUL-terminated, the whole length returned */
    t = "x:u8[3,?]";
    REQUIRE(dsc_fieldspec_parse(t, strlen(t), 0, &f, &err) == DSC_EINVAL);
    char small[10];
    int n = dsc_fieldspec_message(t, strlen(t), &err, small, sizeof small);
    CHECK(n > 10 && strlen(small) == 9 && strncmp(small, "field spe", 9) == 0);
    CHECK(dsc_fieldspec_message(t, strlen(t), &err, NULL, 0) == n);
    /* a long spec is cut in the message */
    char big[400];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    REQUIRE(dsc_fieldspec_parse(big, strlen(big), 0, &f, &err) == DSC_EINVAL);
    n = dsc_fieldspec_message(big, strlen(big), &err, msg, sizeof msg);
    CHECK(n < 200 && strstr(msg, "...") != NULL);
}

static void test_format(void) {
    dsc_field_t f;
    REQUIRE(dsc_fieldspec_parse("mel:f32[?,80]", 13, 0, &f, NULL) == 0);
    char buf[DSC_FIELDSPEC_MAX];
    CHECK(dsc_fieldspec_format(&f, buf, sizeof buf) == 13 && strcmp(buf, "mel:f32[?,80]") == 0);
    CHECK(dsc_fieldspec_format(&f, buf, 13) == DSC_ENOSPC && buf[0] == '\0');
    CHECK(dsc_fieldspec_format(&f, buf, 14) == 13);
    f.dtype = 0;
    CHECK(dsc_fieldspec_format(&f, buf, sizeof buf) == DSC_EINVAL);
    /* the longest field fits DSC_FIELDSPEC_MAX */
    memset(&f, 0, sizeof f);
    memset(f.name, 'n', DSC_MAX_NAME - 1);
    f.dtype = DSC_DTYPE_BF16;
    f.ndim = DSC_MAX_DIMS;
    for (int d = 0; d < DSC_MAX_DIMS; d++)
        f.shape[d] = UINT32_MAX;
    CHECK(dsc_fieldspec_format(&f, buf, sizeof buf) > 0);
}

/* Parsing never reads past len and every refusal points inside the text. */
static void check_any(const char *text, size_t len) {
    dsc_field_t f;
    dsc_fieldspec_error_t err;
    char msg[512];
    for (unsigned flags = 0; flags <= (DSC_FIELDSPEC_TYPE_ONLY | DSC_FIELDSPEC_SIZED); flags++) {
        if (dsc_fieldspec_parse(text, len, flags, &f, &err) < 0) {
            CHECK(err.pos + err.len <= len && err.item + err.item_len <= len);
            CHECK(dsc_fieldspec_message(text, len, &err, msg, sizeof msg) > 0);
        } else {
            CHECK(dsc_fieldspec_format(&f, msg, sizeof msg) > 0);
        }
    }
    dsc_schema_t s;
    if (dsc_fieldspec_parse_list(text, len, &s, &err) < 0)
        CHECK(err.pos + err.len <= len && err.item + err.item_len <= len);
}

static void test_prefixes_and_bytes(void) {
    static const char *valid[] = {"image:u8[3,32,32]", "  mel : f32 [ ? , 80 ]  ",
                                  "image:u8:3x32x32", "ids:i32[],label:i64"};
    for (size_t i = 0; i < sizeof valid / sizeof valid[0]; i++) {
        size_t len = strlen(valid[i]);
        for (size_t n = 0; n <= len; n++) {
            char copy[64]; /* exactly n bytes, no NUL after: ASan sees an over-read */
            memcpy(copy, valid[i], n);
            char *heap = malloc(n ? n : 1);
            REQUIRE(heap != NULL);
            memcpy(heap, copy, n);
            check_any(heap, n);
            free(heap);
        }
        for (size_t at = 0; at < len; at++)
            for (int b = 0; b < 256; b += 7) {
                char copy[64];
                memcpy(copy, valid[i], len);
                copy[at] = (char)b;
                check_any(copy, len);
            }
    }
}

static void test_library_call(void) {
    dsc_field_info_t info;
    char err[256];
    REQUIRE(dsc_field_spec_parse("u8[3,32,32]", &info, err, sizeof err) == 0);
    CHECK(info.name[0] == '\0' && info.dtype == DSC_DTYPE_U8 && info.ndim == 3 &&
          info.shape[0] == 3 && info.shape[2] == 32 && info.sample_bytes == 3072);
    REQUIRE(dsc_field_spec_parse("mel:float32[?,80]", &info, err, sizeof err) == 0);
    CHECK(strcmp(info.name, "mel") == 0 && info.dtype == DSC_DTYPE_F32 && info.ndim == 2 &&
          info.shape[0] == -1 && info.shape[1] == 80 && info.sample_bytes == 320);
    REQUIRE(dsc_field_spec_parse("u8:2x2", &info, err, sizeof err) == 0);
    CHECK(info.ndim == 2 && info.sample_bytes == 4);
    CHECK(dsc_field_spec_parse("u8[3,?]", &info, err, sizeof err) == DSC_EINVAL &&
          strcmp(err, "field spec 'u8[3,?]', position 6: only the leading dimension may be "
                      "variable: '?'") == 0);
    CHECK(dsc_field_spec_parse("f64[65536,65536]", &info, err, sizeof err) == DSC_EINVAL &&
          strstr(err, "2^32") != NULL);
    CHECK(dsc_field_spec_parse("q8", &info, NULL, 0) == DSC_EINVAL);
    CHECK(dsc_field_spec_parse(NULL, &info, err, sizeof err) == DSC_EINVAL && err[0] != '\0');
}

int main(void) {
    test_valid();
    test_errors();
    test_lists();
    test_messages();
    test_format();
    test_prefixes_and_bytes();
    test_library_call();
    return TEST_DONE();
}
