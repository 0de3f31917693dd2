/* Manifest tests: round trip through JSON and through DIR/manifest.json, sample lookup, and every
 * kind of invalid manifest rejected with its error. */
#include "manifest.h"
#include "manifest_io.h"
#include "testlib.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *BASE =
    "{\"format\":\"dscache-manifest\",\"version\":1,\"name\":\"demo\",\"sample_bytes\":72,"
    "\"samples\":30,\"schema\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[4,4]},"
    "{\"name\":\"y\",\"dtype\":\"i64\",\"shape\":[]}],\"shards\":["
    "{\"id\":0,\"file\":\"shard-00000.dsc\",\"samples\":20,\"bytes\":4096,\"chunks\":3,"
    "\"chunk_samples\":8,\"checksum\":\"0123456789abcdef\"},"
    "{\"id\":1,\"file\":\"shard-00001.dsc\",\"samples\":10,\"bytes\":2048,\"chunks\":2,"
    "\"chunk_samples\":8,\"checksum\":\"FEDCBA9876543210\"}]}";

/* BASE with the first `from` replaced by `to` (malloc'd). */
static char *replace(const char *from, const char *to) {
    const char *at = strstr(BASE, from);
    REQUIRE(at != NULL);
    size_t head = (size_t)(at - BASE), from_len = strlen(from), to_len = strlen(to);
    char *out = malloc(strlen(BASE) - from_len + to_len + 1);
    memcpy(out, BASE, head);
    memcpy(out + head, to, to_len);
    strcpy(out + head + to_len, at + from_len);
    return out;
}

/* Parses exactly len bytes from a copy without a terminating NUL. */
static int parse_exact(const char *text, size_t len, dsc_manifest_t **out) {
    char *copy = malloc(len ? len : 1);
    memcpy(copy, text, len);
    dsc_manifest_t *local = NULL;
    int rc = dsc_manifest_parse(copy, len, out ? out : &local);
    dsc_manifest_free(local);
    free(copy);
    return rc;
}

static void check_case(int line, const char *from, const char *to, int want) {
    char *text = replace(from, to);
    int rc = parse_exact(text, strlen(text), NULL);
    if (rc != want)
        fprintf(stderr, "case at line %d: %s -> %s gave %s, want %s\n", line, from, to,
                dsc_err_name(rc), dsc_err_name(want));
    CHECK_EQ_INT(rc, want);
    free(text);
}
#define CASE(from, to, want) check_case(__LINE__, from, to, want)

static void test_base(void) {
    dsc_manifest_t *m = NULL;
    REQUIRE(parse_exact(BASE, strlen(BASE), &m) == 0);
    CHECK(strcmp(m->name, "demo") == 0);
    CHECK_EQ_INT(m->schema.field_count, 2);
    CHECK_EQ_INT(m->schema.fields[0].dtype, DSC_DTYPE_F32);
    CHECK_EQ_INT(m->schema.fields[0].ndim, 2);
    CHECK_EQ_INT(m->schema.fields[1].ndim, 0);
    CHECK_EQ_INT(m->schema.sample_bytes, 72);
    CHECK_EQ_INT(m->shard_count, 2);
    CHECK_EQ_INT(m->samples, 30);
    CHECK_EQ_INT(m->bytes, 6144);
    CHECK(m->shards[0].checksum == 0x0123456789abcdefull);
    CHECK(m->shards[1].checksum == 0xFEDCBA9876543210ull);
    CHECK(strcmp(m->shards[1].file, "shard-00001.dsc") == 0);
    CHECK_EQ_INT(m->shards[1].first_sample, 20);
    CHECK_EQ_INT(m->shards[1].chunks, 2);
    CHECK_EQ_INT(dsc_manifest_find_sample(m, 0), 0);
    CHECK_EQ_INT(dsc_manifest_find_sample(m, 19), 0);
    CHECK_EQ_INT(dsc_manifest_find_sample(m, 20), 1);
    CHECK_EQ_INT(dsc_manifest_find_sample(m, 29), 1);
    CHECK_EQ_INT(dsc_manifest_find_sample(m, 30), -1);
    CHECK_EQ_INT(dsc_manifest_find_sample(NULL, 0), -1);

    /* to_json and back gives the same manifest and the same text. */
    char *json = dsc_manifest_to_json(m);
    REQUIRE(json != NULL);
    dsc_manifest_t *again = NULL;
    CHECK_EQ_INT(dsc_manifest_parse(json, strlen(json), &again), 0);
    if (again) {
        char *json2 = dsc_manifest_to_json(again);
        CHECK(json2 && strcmp(json, json2) == 0);
        free(json2);
        CHECK(dsc_schema_equal(&m->schema, &again->schema));
        CHECK(memcmp(m->shards, again->shards, 2 * sizeof *m->shards) == 0);
    }
    dsc_manifest_free(again);
    free(json);
    dsc_manifest_free(m);

    /* Whitespace around the document, numpy dtype spellings, hex integers, upper-case hex. */
    char *text = malloc(strlen(BASE) + 8);
    sprintf(text, " \n%s \r\n\t", BASE);
    CHECK_EQ_INT(parse_exact(text, strlen(text), NULL), 0);
    free(text);
    CASE("\"f32\"", "\"float32\"", 0);
    CASE("\"bytes\":4096", "\"bytes\":\"0x1000\"", 0);
    CASE("\"bytes\":4096", "\"bytes\":\"0xFFFFFFFFFFFFFFFF\"", DSC_EBADMANIFEST); /* sum wraps */
    CASE("\"samples\":20", "\"samples\":2e1", 0);
}

static void test_invalid(void) {
    /* Syntax and top level. */
    CASE("{", "[", DSC_EBADMANIFEST);
    CASE("}]}", "}]", DSC_EBADMANIFEST);
    CASE("}]}", "}]}x", DSC_EBADMANIFEST);
    CASE("}]}", "}]}{}", DSC_EBADMANIFEST);
    CASE("\"dscache-manifest\"", "\"dscache-manifes\"", DSC_EBADMANIFEST);
    CASE("\"format\"", "\"formats\"", DSC_EBADMANIFEST);
    CASE("\"version\":1", "\"version\":3", DSC_EVERSION);
    /* Version 2 is for a schema with a variable field only (tests/unit/test_manifest_v2.c). */
    CASE("\"version\":1", "\"version\":2", DSC_EBADMANIFEST);
    CASE("\"version\":1", "\"version\":\"1\"", DSC_EBADMANIFEST);
    CASE("\"version\":1", "\"version\":true", DSC_EBADMANIFEST);
    CASE("\"name\":\"demo\"", "\"name\":\"de/mo\"", DSC_EBADMANIFEST);
    CASE("\"name\":\"demo\"", "\"name\":\"\"", DSC_EBADMANIFEST);
    CASE("\"name\":\"demo\"", "\"name\":5", DSC_EBADMANIFEST);
    CASE("\"name\":\"demo\"",
         "\"name\":\"0123456789012345678901234567890123456789012345678901234567890123\"",
         DSC_EBADMANIFEST);
    CASE("\"sample_bytes\":72", "\"sample_bytes\":73", DSC_EBADMANIFEST);
    CASE("\"sample_bytes\":72,", "", DSC_EBADMANIFEST);
    CASE("\"samples\":30", "\"samples\":31", DSC_EBADMANIFEST);
    CASE("\"samples\":30", "\"samples\":null", DSC_EBADMANIFEST);

    /* Schema. */
    CASE("\"f32\"", "\"f33\"", DSC_EBADSCHEMA);
    CASE("\"dtype\":\"f32\"", "\"dtype\":10", DSC_EBADMANIFEST);
    CASE("[4,4]", "[4,0]", DSC_EBADSCHEMA);
    CASE("[4,4]", "[4,-4]", DSC_EBADSCHEMA);
    CASE("[4,4]", "[4,4.5]", DSC_EBADSCHEMA);
    CASE("[4,4]", "[4,\"4\"]", DSC_EBADSCHEMA);
    CASE("[4,4]", "[4294967296]", DSC_EBADSCHEMA);
    CASE("[4,4]", "[1,1,1,1,1,1,1,1,1]", DSC_EBADSCHEMA);
    CASE("[4,4]", "[65536,65536]", DSC_EBADSCHEMA); /* a sample over 2^32 bytes */
    CASE("[4,4]", "4", DSC_EBADMANIFEST);
    CASE("\"name\":\"y\"", "\"name\":\"x\"", DSC_EBADSCHEMA); /* duplicate field */
    CASE("\"name\":\"y\"", "\"name\":\"y z\"", DSC_EBADSCHEMA);
    CASE("\"name\":\"y\"", "\"nam\":\"y\"", DSC_EBADMANIFEST);
    CASE("{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[4,4]},", "", DSC_EBADMANIFEST); /* 72 != 8 */
    CASE("{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[4,4]},", "7,", DSC_EBADMANIFEST);
    CASE("\"schema\":[", "\"schema\":{\"a\":[", DSC_EBADMANIFEST);
    char schema17[2048] = "\"schema\":[";
    for (int i = 0; i < 17; i++)
        sprintf(schema17 + strlen(schema17), "{\"name\":\"f%d\",\"dtype\":\"u8\",\"shape\":[]},",
                i);
    CASE("\"schema\":[", schema17, DSC_EBADSCHEMA);
    CASE("\"schema\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[4,4]},"
         "{\"name\":\"y\",\"dtype\":\"i64\",\"shape\":[]}]",
         "\"schema\":[]", DSC_EBADSCHEMA);

    /* Shards. */
    CASE("\"id\":1", "\"id\":2", DSC_EBADMANIFEST);
    CASE("\"id\":0", "\"id\":0.5", DSC_EBADMANIFEST);
    CASE("\"id\":0", "\"id\":-1", DSC_EBADMANIFEST);
    CASE("\"id\":0,", "", DSC_EBADMANIFEST);
    CASE("\"shard-00000.dsc\"", "\"../shard\"", DSC_EBADMANIFEST);
    CASE("\"shard-00000.dsc\"", "\"a/b\"", DSC_EBADMANIFEST);
    CASE("\"shard-00000.dsc\"", "\"..\"", DSC_EBADMANIFEST);
    CASE("\"shard-00000.dsc\"", "\".\"", DSC_EBADMANIFEST);
    CASE("\"shard-00000.dsc\"", "\"\"", DSC_EBADMANIFEST);
    CASE("\"shard-00000.dsc\"", "\"a\\u0000b\"", DSC_EBADMANIFEST);
    CASE("\"shard-00000.dsc\"", "\"/etc/passwd\"", DSC_EBADMANIFEST);
    char long_file[160] = "\"";
    memset(long_file + 1, 'f', 128);
    strcpy(long_file + 129, "\"");
    CASE("\"shard-00000.dsc\"", long_file, DSC_EBADMANIFEST);
    long_file[128] = '"';
    long_file[129] = '\0';
    CASE("\"shard-00000.dsc\"", long_file, 0); /* 127 bytes fits */
    CASE("\"chunks\":3", "\"chunks\":2", DSC_EBADMANIFEST);
    CASE("\"chunks\":3", "\"chunks\":4", DSC_EBADMANIFEST);
    CASE("\"chunk_samples\":8", "\"chunk_samples\":0", DSC_EBADMANIFEST);
    CASE("\"chunk_samples\":8", "\"chunk_samples\":4294967296", DSC_EBADMANIFEST);
    CASE("\"samples\":20,\"bytes\":4096,\"chunks\":3,\"chunk_samples\":8",
         "\"samples\":20,\"bytes\":4096,\"chunks\":1,\"chunk_samples\":20000000",
         DSC_EBADMANIFEST); /* a chunk over the decoder's bound */
    CASE("0123456789abcdef", "0123456789abcde", DSC_EBADMANIFEST);
    CASE("0123456789abcdef", "0123456789abcdeg", DSC_EBADMANIFEST);
    CASE("0123456789abcdef", "0123456789abcdef0", DSC_EBADMANIFEST);
    CASE("\"0123456789abcdef\"", "81985529216486895", DSC_EBADMANIFEST);
    CASE("\"samples\":20", "\"samples\":1e300", DSC_EBADMANIFEST);
    CASE("\"samples\":20", "\"samples\":-20", DSC_EBADMANIFEST);
    CASE("\"samples\":20", "\"samples\":\"20\"", DSC_EBADMANIFEST);
    CASE("\"samples\":20", "\"samples\":\"0x\"", DSC_EBADMANIFEST);
    CASE("\"samples\":20", "\"samples\":\"0x1g\"", DSC_EBADMANIFEST);
    CASE("\"samples\":20", "\"samples\":\"0x11111111111111111\"", DSC_EBADMANIFEST);
    CASE("\"bytes\":4096,", "", DSC_EBADMANIFEST);
    CASE("\"bytes\":4096", "\"bytes\":10", DSC_EBADMANIFEST); /* smaller than any shard */
    CASE("\"shards\":[", "\"shards\":[7,", DSC_EBADMANIFEST);
    CASE("\"shards\":[", "\"shards\":{\"a\":[", DSC_EBADMANIFEST);

    /* Empty shard list, and more shards than allowed (rejected before looking at them). */
    char *none = malloc(strlen(BASE) + 1);
    strcpy(none, BASE);
    strcpy(strstr(none, "\"shards\":[") + strlen("\"shards\":["), "]}");
    CHECK_EQ_INT(parse_exact(none, strlen(none), NULL), DSC_EBADMANIFEST);
    free(none);
    size_t many = DSC_MAX_SHARDS + 1;
    char *big = malloc(strlen(BASE) + many * 2 + 16);
    strcpy(big, BASE);
    char *p = strstr(big, "\"shards\":[") + strlen("\"shards\":[");
    for (size_t i = 0; i < many; i++) {
        *p++ = '0';
        *p++ = ',';
    }
    strcpy(p - 1, "]}");
    CHECK_EQ_INT(parse_exact(big, strlen(big), NULL), DSC_ETOOLARGE);
    free(big);

    /* Documents that are not manifests at all. */
    dsc_manifest_t *m = NULL;
    CHECK_EQ_INT(dsc_manifest_parse("", 0, &m), DSC_EBADMANIFEST);
    CHECK_EQ_INT(dsc_manifest_parse("null", 4, &m), DSC_EBADMANIFEST);
    CHECK_EQ_INT(dsc_manifest_parse("[]", 2, &m), DSC_EBADMANIFEST);
    CHECK_EQ_INT(dsc_manifest_parse("{}", 2, &m), DSC_EBADMANIFEST);
    CHECK_EQ_INT(dsc_manifest_parse(BASE, (size_t)DSC_MANIFEST_MAX_BYTES + 1, &m), DSC_ETOOLARGE);
    CHECK_EQ_INT(dsc_manifest_parse(NULL, 0, &m), DSC_EINVAL);
    CHECK(m == NULL);
    /* An embedded NUL ends the document early: the rest is not whitespace. */
    size_t len = strlen(BASE);
    char *nul = malloc(len + 2);
    memcpy(nul, BASE, len);
    nul[len] = '\0';
    nul[len + 1] = ' ';
    CHECK_EQ_INT(parse_exact(nul, len + 2, NULL), DSC_EBADMANIFEST);
    free(nul);
    /* Every proper prefix fails, none reads past its end (ASan). */
    int prefix_failures = 0;
    for (size_t cut = 0; cut < len; cut++)
        prefix_failures += parse_exact(BASE, cut, NULL) >= 0;
    CHECK_EQ_INT(prefix_failures, 0);
}

/* Values over 2^53 travel as "0x..." strings; everything survives the round trip. */
static void test_build_and_big_values(void) {
    dsc_manifest_t *m = dsc_manifest_alloc(3);
    REQUIRE(m != NULL);
    snprintf(m->name, sizeof m->name, "big.set");
    m->schema.field_count = 1;
    snprintf(m->schema.fields[0].name, DSC_MAX_NAME, "tokens");
    m->schema.fields[0].dtype = DSC_DTYPE_U8;
    uint64_t counts[3] = {1ull << 54, 0, 12345};
    for (uint32_t i = 0; i < 3; i++) {
        dsc_manifest_shard_t *s = &m->shards[i];
        s->id = i;
        snprintf(s->file, sizeof s->file, "shard-%05u.dsc", i);
        s->samples = counts[i];
        s->chunk_samples = 1u << 28;
        s->chunks = (uint32_t)((counts[i] + s->chunk_samples - 1) / s->chunk_samples);
        s->bytes = i == 0 ? (1ull << 60) + 3 : 4096;
        s->checksum = 0xFFFFFFFFFFFFFFFFull - i;
    }
    dsc_manifest_finish(m);
    CHECK_EQ_INT(m->schema.sample_bytes, 1);
    CHECK(m->samples == (1ull << 54) + 12345);
    CHECK(m->shards[2].first_sample == 1ull << 54 && m->shards[1].first_sample == 1ull << 54);
    CHECK_EQ_INT(dsc_manifest_find_sample(m, (1ull << 54) - 1), 0);
    CHECK_EQ_INT(dsc_manifest_find_sample(m, 1ull << 54), 2); /* not the empty shard 1 */
    CHECK_EQ_INT(dsc_manifest_find_sample(m, (1ull << 54) + 12344), 2);
    CHECK_EQ_INT(dsc_manifest_find_sample(m, (1ull << 54) + 12345), -1);

    char *json = dsc_manifest_to_json(m);
    REQUIRE(json != NULL);
    CHECK(strstr(json, "\"0x40000000000000\"") != NULL);   /* 2^54 samples */
    CHECK(strstr(json, "\"0x1000000000000003\"") != NULL); /* 2^60 + 3 bytes */
    CHECK(strstr(json, "\"ffffffffffffffff\"") != NULL);
    dsc_manifest_t *back = NULL;
    CHECK_EQ_INT(dsc_manifest_parse(json, strlen(json), &back), 0);
    if (back) {
        CHECK(back->samples == m->samples && back->bytes == m->bytes);
        CHECK(memcmp(back->shards, m->shards, 3 * sizeof *m->shards) == 0);
        CHECK(strcmp(back->name, "big.set") == 0);
    }
    dsc_manifest_free(back);
    free(json);

    /* Files: save, load, overwrite atomically; invalid manifests are not written. */
    char dir[] = "/tmp/dsc_test_manifest.XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, DSC_MANIFEST_FILE);
    CHECK_EQ_INT(dsc_manifest_load(dir, &back), DSC_ENOENT);
    CHECK_EQ_INT(dsc_manifest_save(dir, m), 0);
    back = NULL;
    CHECK_EQ_INT(dsc_manifest_load(dir, &back), 0);
    CHECK(back && back->samples == m->samples && back->shard_count == 3);
    dsc_manifest_free(back);
    m->shards[2].chunks = 7; /* inconsistent with its samples */
    CHECK_EQ_INT(dsc_manifest_save(dir, m), DSC_EINVAL);
    back = NULL;
    CHECK_EQ_INT(dsc_manifest_load(dir, &back), 0); /* the old one is still there */
    dsc_manifest_free(back);
    CHECK_EQ_INT(dsc_manifest_save("/nonexistent-dir-for-test", m), DSC_EINVAL);
    m->shards[2].chunks = 1;
    CHECK_EQ_INT(dsc_manifest_save("/nonexistent-dir-for-test", m), DSC_ENOENT);
    /* A file over the size limit (sparse) and a damaged file. */
    int fd = open(path, O_WRONLY | O_TRUNC);
    REQUIRE(fd >= 0);
    CHECK(ftruncate(fd, (off_t)DSC_MANIFEST_MAX_BYTES + 1) == 0);
    close(fd);
    CHECK_EQ_INT(dsc_manifest_load(dir, &back), DSC_ETOOLARGE);
    fd = open(path, O_WRONLY | O_TRUNC);
    CHECK(write(fd, "{\"format\":", 10) == 10);
    close(fd);
    CHECK_EQ_INT(dsc_manifest_load(dir, &back), DSC_EBADMANIFEST);
    unlink(path);
    CHECK(rmdir(dir) == 0); /* no temp file left behind */
    dsc_manifest_free(m);
    dsc_manifest_free(NULL);
}

/* Unknown keys anywhere are skipped (and cost nothing), but their syntax is checked as cJSON
 * would; the first of duplicate keys counts; the limits on what is built hold. */
static void test_unknown_keys(void) {
    dsc_manifest_t *ref = NULL, *m = NULL;
    REQUIRE(dsc_manifest_parse(BASE, strlen(BASE), &ref) == 0);
    char *ref_json = dsc_manifest_to_json(ref);
    static const char *const same[][2] = {
        {"\"version\":1,", "\"version\":1,\"junk\":{\"a\":[1,2.5e3,-0.5,true,false,null,"
                           "\"s\\n\\u00e9\\ud83d\\ude00\"],\"b\":{}},"},
        {"\"name\":\"x\",\"dtype\"", "\"name\":\"x\",\"extra\":[[[]]],\"dtype\""},
        {"\"chunk_samples\":8,\"checksum\":\"0123",
         "\"chunk_samples\":8,\"more\":{\"k\":\"v\"},\"checksum\":\"0123"},
        {"\"name\":\"demo\"", "\"name\":\"demo\",\"name\":\"other\""},
        {"\"shards\":[", "\"shards\" : [ "},
    };
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        char *text = replace(same[i][0], same[i][1]);
        m = NULL;
        CHECK_EQ_INT(dsc_manifest_parse(text, strlen(text), &m), 0);
        char *json = m ? dsc_manifest_to_json(m) : NULL;
        CHECK(json != NULL && strcmp(json, ref_json) == 0);
        /* Every proper prefix is refused. */
        for (size_t len = 0; len < strlen(text); len++)
            CHECK(parse_exact(text, len, NULL) < 0);
        free(json);
        dsc_manifest_free(m);
        free(text);
    }
    /* Syntax faults inside unknown keys are faults. */
    static const char *const bad[] = {
        "\"junk\":[1,2,],",      "\"junk\":[1,2,}],",     "\"junk\":\"\\x\",",
        "\"junk\":\"\\ud800\",", "\"junk\":\"\\udc00\",", "\"junk\":tru,",
        "\"junk\":{\"a\"},",     "\"junk\":{1:2},",       "\"junk\":-,",
        "\"junk\":\"\\u12g4\",", "\"junk\":[1 2],",       "\"junk\":,",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char to[128];
        snprintf(to, sizeof to, "\"version\":1,%s", bad[i]);
        char *text = replace("\"version\":1,", to);
        if (parse_exact(text, strlen(text), NULL) != DSC_EBADMANIFEST)
            fprintf(stderr, "accepted: %s\n", bad[i]);
        CHECK_EQ_INT(parse_exact(text, strlen(text), NULL), DSC_EBADMANIFEST);
        free(text);
    }
    /* Nesting: cJSON's limit of 1000 levels, in an unknown key too. */
    for (int depth = 999; depth <= 1001; depth += 2) {
        size_t n = (size_t)depth;
        char *to = malloc(2 * n + 32);
        strcpy(to, "\"version\":1,\"deep\":");
        memset(to + strlen(to), '[', n);
        to[19 + n] = '\0';
        memset(to + strlen(to), ']', n);
        to[19 + 2 * n] = '\0';
        strcat(to, ",");
        char *text = replace("\"version\":1,", to);
        CHECK_EQ_INT(parse_exact(text, strlen(text), NULL), depth < 1000 ? 0 : DSC_EBADMANIFEST);
        free(text);
        free(to);
    }
    /* What is built stays bounded: a shape of 100000 dimensions, a name that is an array, a
     * "meta" over its limit. */
    char *to = malloc(200000 + 64);
    strcpy(to, "\"shape\":[");
    char *q = to + strlen(to);
    for (int i = 0; i < 100000; i++) {
        if (i > 0)
            *q++ = ',';
        *q++ = '1';
    }
    strcpy(q, "]");
    char *text = replace("\"shape\":[4,4]", to);
    CHECK_EQ_INT(parse_exact(text, strlen(text), NULL), DSC_EBADSCHEMA);
    free(text);
    text = replace("\"name\":\"demo\"", "\"name\":[\"demo\",[1,2,3]]");
    CHECK_EQ_INT(parse_exact(text, strlen(text), NULL), DSC_EBADMANIFEST);
    free(text);
    size_t big = DSC_MANIFEST_META_MAX_BYTES + 16;
    char *meta = malloc(big + 64);
    strcpy(meta, "\"version\":1,\"meta\":{\"k\":\"");
    size_t at = strlen(meta);
    memset(meta + at, 'a', big);
    strcpy(meta + at + big, "\"},");
    text = replace("\"version\":1,", meta);
    CHECK_EQ_INT(parse_exact(text, strlen(text), NULL), DSC_ETOOLARGE);
    free(text);
    /* The same size as an unknown key is fine. */
    memcpy(meta + 13, "mexa", 4);
    text = replace("\"version\":1,", meta);
    CHECK_EQ_INT(parse_exact(text, strlen(text), NULL), 0);
    free(text);
    free(meta);
    free(to);
    free(ref_json);
    dsc_manifest_free(ref);
}

/* Loading never blocks on a FIFO, and DSC_MANIFEST_NOFOLLOW refuses a link. */
static void test_load_hostile(void) {
    char dir[] = "/tmp/dsc_test_manifest_fifo.XXXXXX", other[] = "/tmp/dsc_test_manifest_o.XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL && mkdtemp(other) != NULL);
    char path[256], target[256];
    snprintf(path, sizeof path, "%s/%s", dir, DSC_MANIFEST_FILE);
    snprintf(target, sizeof target, "%s/%s", other, DSC_MANIFEST_FILE);
    REQUIRE(mkfifo(path, 0600) == 0);
    dsc_manifest_t *m = NULL;
    const char *why = NULL;
    CHECK_EQ_INT(dsc_manifest_load_file(dir, 0, NULL, &why, &m), DSC_EIO);
    CHECK(why != NULL && strstr(why, "regular") != NULL);
    unlink(path);
    int fd = open(target, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    REQUIRE(fd >= 0);
    CHECK(write(fd, BASE, strlen(BASE)) == (ssize_t)strlen(BASE));
    close(fd);
    REQUIRE(symlink(target, path) == 0);
    dsc_manifest_file_id_t id = {0, 0, 0, 0};
    CHECK_EQ_INT(dsc_manifest_load_file(dir, 0, &id, NULL, &m), 0);
    CHECK(id.size == strlen(BASE) && id.ino != 0);
    dsc_manifest_free(m);
    m = NULL;
    CHECK_EQ_INT(dsc_manifest_load_file(dir, DSC_MANIFEST_NOFOLLOW, NULL, &why, &m), DSC_EIO);
    CHECK(m == NULL && why != NULL && strstr(why, "symbolic link") != NULL);
    unlink(path);
    unlink(target);
    CHECK(rmdir(dir) == 0 && rmdir(other) == 0);
}

int main(void) {
    test_base();
    test_invalid();
    test_build_and_big_values();
    test_unknown_keys();
    test_load_hostile();
    return TEST_DONE();
}
