/* Manifest version 2 tests: a variable dimension written as null, the per-field size statistics,
 * the optional "meta" object (in either version), and every rule of them broken once. */
#include "manifest.h"
#include "manifest_io.h"
#include "testlib.h"

#include <sys/stat.h>
#include <unistd.h>

static const char *BASE =
    "{\"format\":\"dscache-manifest\",\"version\":2,\"name\":\"sft\",\"sample_bytes\":8,"
    "\"samples\":30,\"schema\":["
    "{\"name\":\"input_ids\",\"dtype\":\"i32\",\"shape\":[null],"
    "\"rows_total\":300,\"rows_max\":40,\"bytes_max\":160,\"bytes_mean\":40},"
    "{\"name\":\"label\",\"dtype\":\"i64\",\"shape\":[]},"
    "{\"name\":\"mel\",\"dtype\":\"f32\",\"shape\":[null,80],"
    "\"rows_total\":10,\"rows_max\":3,\"bytes_max\":960,\"bytes_mean\":106.66666666666667}],"
    "\"meta\":{\"classes\":[\"cat\",\"dog\"],\"n\":2},"
    "\"shards\":[{\"id\":0,\"file\":\"shard-00000.dsc\",\"samples\":30,\"bytes\":4096,"
    "\"chunks\":4,\"chunk_samples\":8,\"checksum\":\"0123456789abcdef\"}]}";

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
    dsc_manifest_t *m = NULL, *again = NULL;
    REQUIRE(parse_exact(BASE, strlen(BASE), &m) == 0);
    CHECK_EQ_INT(m->schema.var_count, 2);
    CHECK_EQ_INT(m->schema.sample_bytes, 8);
    CHECK(m->schema.fields[0].variable && m->schema.fields[0].shape[0] == DSC_DIM_VARIABLE);
    CHECK_EQ_INT(m->schema.fields[2].ndim, 2);
    CHECK_EQ_INT(m->schema.fields[2].shape[1], 80);
    CHECK_EQ_INT(m->schema.fields[2].row_bytes, 320);
    CHECK_EQ_INT(m->field_stats[0].rows_total, 300);
    CHECK_EQ_INT(m->field_stats[0].rows_max, 40);
    CHECK_EQ_INT(m->field_stats[0].bytes_max, 160);
    CHECK(m->field_stats[0].bytes_mean == 40.0);
    CHECK_EQ_INT(m->field_stats[2].bytes_max, 960);
    CHECK_EQ_INT(m->field_stats[1].rows_total, 0);
    REQUIRE(m->meta_json != NULL);
    CHECK(strcmp(m->meta_json, "{\"classes\":[\"cat\",\"dog\"],\"n\":2}") == 0);

    /* Serialized: version 2, null dims, statistics and meta; parses back to the same. */
    char *text = dsc_manifest_to_json(m);
    REQUIRE(text != NULL);
    CHECK(strstr(text, "\"version\":\t2") != NULL);
    CHECK(strstr(text, "null") != NULL);
    CHECK(strstr(text, "\"bytes_mean\":\t106.66666666666667") != NULL);
    REQUIRE(dsc_manifest_parse(text, strlen(text), &again) == 0);
    CHECK(dsc_schema_equal(&m->schema, &again->schema));
    CHECK(memcmp(m->field_stats, again->field_stats, sizeof m->field_stats) == 0);
    CHECK(strcmp(m->meta_json, again->meta_json) == 0);
    char *text2 = dsc_manifest_to_json(again);
    CHECK(text2 != NULL && strcmp(text, text2) == 0);
    free(text2);
    free(text);
    dsc_manifest_free(again);

    /* Save and load through a directory. */
    char dir[] = "/tmp/dsc_manifest_v2_XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    CHECK_EQ_INT(dsc_manifest_save(dir, m), 0);
    dsc_manifest_t *loaded = NULL;
    CHECK_EQ_INT(dsc_manifest_load(dir, &loaded), 0);
    CHECK(loaded != NULL && loaded->field_stats[2].rows_total == 10);
    dsc_manifest_free(loaded);
    /* A meta that is not an object is refused, nothing written. */
    CHECK_EQ_INT(dsc_manifest_set_meta(m, "[1,2]"), DSC_EINVAL);
    CHECK_EQ_INT(dsc_manifest_set_meta(m, "{\"a\":"), DSC_EINVAL);
    CHECK(strcmp(m->meta_json, "{\"classes\":[\"cat\",\"dog\"],\"n\":2}") == 0);
    free(m->meta_json);
    m->meta_json = strdup("[]");
    CHECK_EQ_INT(dsc_manifest_save(dir, m), DSC_EINVAL);
    CHECK_EQ_INT(dsc_manifest_set_meta(m, NULL), 0);
    CHECK(m->meta_json == NULL);
    CHECK_EQ_INT(dsc_manifest_set_meta(m, " { \"k\" : [ 1 ] } "), 0);
    CHECK(strcmp(m->meta_json, "{\"k\":[1]}") == 0);
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    unlink(path);
    rmdir(dir);
    dsc_manifest_free(m);
}

/* A fixed-shape manifest stays version 1, byte for byte; meta is allowed there too. */
static void test_v1_meta(void) {
    const char *v1 = "{\"format\":\"dscache-manifest\",\"version\":1,\"name\":\"img\","
                     "\"sample_bytes\":3080,\"samples\":2,\"schema\":["
                     "{\"name\":\"image\",\"dtype\":\"u8\",\"shape\":[3,32,32]},"
                     "{\"name\":\"label\",\"dtype\":\"i64\",\"shape\":[]}],"
                     "\"meta\":{\"classes\":[\"a\",\"b\"]},"
                     "\"shards\":[{\"id\":0,\"file\":\"s.dsc\",\"samples\":2,\"bytes\":9000,"
                     "\"chunks\":1,\"chunk_samples\":2,\"checksum\":\"0123456789abcdef\"}]}";
    dsc_manifest_t *m = NULL;
    REQUIRE(parse_exact(v1, strlen(v1), &m) == 0);
    CHECK(m->meta_json != NULL && strcmp(m->meta_json, "{\"classes\":[\"a\",\"b\"]}") == 0);
    char *text = dsc_manifest_to_json(m);
    REQUIRE(text != NULL);
    CHECK(strstr(text, "\"version\":\t1") != NULL);
    CHECK(strstr(text, "rows_total") == NULL);
    free(m->meta_json);
    m->meta_json = NULL;
    char *plain = dsc_manifest_to_json(m);
    CHECK(plain != NULL && strstr(plain, "meta") == NULL);
    free(plain);
    free(text);
    dsc_manifest_free(m);
    /* Version 2 without any variable field is refused (it would not be canonical). */
    char *v2 = strdup(v1);
    memcpy(strstr(v2, "\"version\":1") + 10, "2", 1);
    CHECK_EQ_INT(parse_exact(v2, strlen(v2), NULL), DSC_EBADMANIFEST);
    free(v2);
}

static void test_invalid(void) {
    /* Versions. */
    CASE("\"version\":2", "\"version\":1", DSC_EBADSCHEMA); /* null dim in version 1 */
    CASE("\"version\":2", "\"version\":3", DSC_EVERSION);
    /* The variable dimension: only leading, only null. */
    CASE("\"shape\":[null,80]", "\"shape\":[80,null]", DSC_EBADSCHEMA);
    CASE("\"shape\":[null,80]", "\"shape\":[null,null]", DSC_EBADSCHEMA);
    CASE("\"shape\":[null,80]", "\"shape\":[0,80]", DSC_EBADSCHEMA);
    CASE("\"shape\":[null,80]", "\"shape\":[null,0]", DSC_EBADSCHEMA);
    /* Statistics: present, typed, consistent. */
    CASE("\"rows_total\":300,", "", DSC_EBADMANIFEST);
    CASE("\"rows_max\":40,", "", DSC_EBADMANIFEST);
    CASE("\"bytes_max\":160,", "", DSC_EBADMANIFEST);
    CASE(",\"bytes_mean\":40", "", DSC_EBADMANIFEST);
    CASE("\"rows_total\":300", "\"rows_total\":-1", DSC_EBADMANIFEST);
    CASE("\"rows_total\":300", "\"rows_total\":\"300\"", DSC_EBADMANIFEST);
    CASE("\"rows_total\":300", "\"rows_total\":39", DSC_EBADMANIFEST);   /* < rows_max */
    CASE("\"rows_total\":300", "\"rows_total\":1201", DSC_EBADMANIFEST); /* > 30 * 40 */
    CASE("\"rows_total\":300", "\"rows_total\":1200", 0);
    CASE("\"bytes_max\":160", "\"bytes_max\":161", DSC_EBADMANIFEST); /* != 40 * 4 */
    CASE("\"bytes_mean\":40", "\"bytes_mean\":161", DSC_EBADMANIFEST);
    CASE("\"bytes_mean\":40", "\"bytes_mean\":-1", DSC_EBADMANIFEST);
    CASE("\"bytes_mean\":40", "\"bytes_mean\":\"40\"", DSC_EBADMANIFEST);
    CASE("\"rows_max\":40,\"bytes_max\":160",
         "\"rows_max\":\"0xffffffffffffffff\",\"bytes_max\":160",
         DSC_EBADMANIFEST); /* rows_max * row_bytes overflows */
    /* The fixed part. */
    CASE("\"sample_bytes\":8", "\"sample_bytes\":12", DSC_EBADMANIFEST);
    /* meta: an object or nothing. */
    CASE("\"meta\":{\"classes\":[\"cat\",\"dog\"],\"n\":2}", "\"meta\":[1]", DSC_EBADMANIFEST);
    CASE("\"meta\":{\"classes\":[\"cat\",\"dog\"],\"n\":2}", "\"meta\":null", DSC_EBADMANIFEST);
    CASE("\"meta\":{\"classes\":[\"cat\",\"dog\"],\"n\":2},", "", 0);
}

/* Every prefix of the document fails. */
static void test_prefixes(void) {
    size_t len = strlen(BASE);
    for (size_t cut = 0; cut < len; cut++)
        CHECK(parse_exact(BASE, cut, NULL) < 0);
}

int main(void) {
    test_base();
    test_v1_meta();
    test_invalid();
    test_prefixes();
    return TEST_DONE();
}
