/* Writer tests (dsc_writer_*): a dataset with variable and fixed fields written on several
 * threads and read back value for value (every chunk's layout checked), the size statistics and
 * meta in the manifest, field-spec and value errors naming the field and the sample, batches
 * (add_columns), the atomic finish (nothing at path before it; abort, a failed finish and a
 * writer killed mid-way leave nothing a server would load), replace, and fixed-only datasets
 * staying format version 1. */
#include "dscache.h"
#include "manifest.h"
#include "manifest_io.h"
#include "shard.h"
#include "testdata.h"
#include "testlib.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char root[] = "/tmp/dsc_test_writer_XXXXXX";

static void remove_tree(const char *dir);

/* Sample i: ids i32[] of i % 7 values, mel f32[?,80] of (i * 3) % 4 rows, image u8[3,32,32],
 * label i64. */
static uint32_t ids_len(uint64_t i) {
    return (uint32_t)(i % 7);
}
static uint32_t mel_rows(uint64_t i) {
    return (uint32_t)((i * 3) % 4);
}

typedef struct sample {
    int32_t ids[8];
    float mel[4 * 80];
    uint8_t image[3 * 32 * 32];
    int64_t label;
} sample_t;

static void make_sample(uint64_t i, sample_t *s) {
    for (uint32_t k = 0; k < ids_len(i); k++)
        s->ids[k] = (int32_t)(i * 100 + k);
    for (uint32_t k = 0; k < mel_rows(i) * 80; k++)
        s->mel[k] = (float)i + (float)k / 1024.0f;
    for (uint32_t k = 0; k < sizeof s->image; k++)
        s->image[k] = (uint8_t)(i + k / 64); /* runs: lz4 finds something */
    s->label = (int64_t)i * -3;
}

static void sample_values(const sample_t *s, uint64_t i, dsc_writer_value_t v[4]) {
    v[0] = (dsc_writer_value_t){s->ids, ids_len(i) * 4};
    v[1] = (dsc_writer_value_t){s->mel, mel_rows(i) * 320};
    v[2] = (dsc_writer_value_t){s->image, sizeof s->image};
    v[3] = (dsc_writer_value_t){&s->label, 8};
}

static const char *FIELDS = "ids:i32[],mel:f32[?,80],image:u8[3,32,32],label:i64";

static void path_of(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", root, name);
}

/* Entries of root whose name starts with '.' (temporary directories). */
static int hidden_entries(void) {
    DIR *d = opendir(root);
    REQUIRE(d != NULL);
    int n = 0;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL)
        if (ent->d_name[0] == '.' && strcmp(ent->d_name, ".") != 0 &&
            strcmp(ent->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

static int exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

/* Reads the dataset at dir back and compares every sample with make_sample; counts mismatches. */
static int verify_dataset(const char *dir, uint64_t want_samples) {
    dsc_manifest_t *m = NULL;
    REQUIRE(dsc_manifest_load(dir, &m) == 0);
    CHECK_EQ_INT(m->samples, want_samples);
    int bad = 0;
    uint64_t next = 0;
    for (uint32_t s = 0; s < m->shard_count; s++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, m->shards[s].file);
        uint64_t len;
        uint8_t *file = testdata_read_file(path, &len);
        REQUIRE(file != NULL && len == m->shards[s].bytes);
        CHECK(dsc_checksum(file, len) == m->shards[s].checksum);
        dsc_shard_view_t v;
        REQUIRE(dsc_shard_parse(file, len, &v) == 0);
        CHECK(dsc_schema_equal(&v.header.schema, &m->schema));
        CHECK_EQ_INT(v.header.version, dsc_schema_version(&m->schema));
        CHECK_EQ_INT(v.header.shard_id, s);
        for (uint32_t c = 0; c < v.footer.chunk_count; c++) {
            dsc_chunk_entry_t e;
            REQUIRE(dsc_shard_chunk(&v, c, &e) == 0);
            uint8_t *raw = malloc(e.raw_len);
            REQUIRE(raw != NULL);
            REQUIRE(dsc_chunk_decode(&e, dsc_shard_chunk_data(&v, &e), raw, e.raw_len) ==
                    (int)e.raw_len);
            dsc_chunk_layout_t l;
            REQUIRE(dsc_chunk_layout(&m->schema, e.sample_count, raw, e.raw_len, &l) == 0);
            for (uint32_t k = 0; k < e.sample_count; k++, next++) {
                sample_t want;
                make_sample(next, &want);
                dsc_writer_value_t wv[4];
                sample_values(&want, next, wv);
                for (uint32_t f = 0; f < m->schema.field_count; f++) {
                    const uint8_t *data;
                    uint64_t bytes;
                    REQUIRE(dsc_chunk_sample(&l, &m->schema, f, k, &data, &bytes) == 0);
                    if (bytes != wv[f].bytes || memcmp(data, wv[f].data, bytes) != 0)
                        bad++;
                }
            }
            free(raw);
        }
        free(file);
    }
    CHECK_EQ_INT(next, want_samples);
    dsc_manifest_free(m);
    return bad;
}

static void options(dsc_writer_options_t *o, const char *path) {
    REQUIRE(dsc_writer_options_init(o, sizeof *o) == 0);
    o->path = path;
    o->fields = FIELDS;
    o->threads = 3;
    o->chunk_bytes = 16 << 10;  /* many chunks */
    o->shard_bytes = 100 << 10; /* several shards */
}

static uint64_t progress_calls;
static void on_progress(void *ctx, uint64_t samples, uint64_t raw, uint64_t stored) {
    (void)ctx;
    (void)samples;
    CHECK(stored > 0 && raw > 0);
    progress_calls++;
}

static void test_roundtrip(void) {
    char path[512];
    path_of(path, sizeof path, "sub/var");
    dsc_writer_options_t o;
    options(&o, path);
    o.meta_json = "{\"classes\": [\"a\", \"b\"]}";
    o.progress_fn = on_progress;
    dsc_writer_t *w = NULL;
    REQUIRE(dsc_writer_create(&o, &w) == 0);
    const uint64_t n = 700;
    for (uint64_t i = 0; i < n; i++) {
        sample_t s;
        make_sample(i, &s);
        dsc_writer_value_t v[4];
        sample_values(&s, i, v);
        REQUIRE(dsc_writer_add(w, v, 4) == 0);
        if (i == 100) {
            CHECK(!exists(path));              /* nothing at path before finish */
            CHECK_EQ_INT(hidden_entries(), 0); /* the temporary directory is under sub/ */
        }
    }
    /* The meta replaced once every sample is in (ingest images --skip-bad records the skipped
     * files so): an object only. */
    CHECK_EQ_INT(dsc_writer_set_meta(w, "[1]"), DSC_EINVAL);
    CHECK_EQ_INT(dsc_writer_set_meta(NULL, "{}"), DSC_EINVAL);
    REQUIRE(dsc_writer_set_meta(w, "{\"classes\": [\"a\", \"b\"], \"skipped\": {\"count\": 1}}") ==
            0);
    dsc_writer_stats_t st = {.struct_size = sizeof st};
    REQUIRE(dsc_writer_finish(w, &st) == 0);
    CHECK_EQ_INT(st.samples, n);
    CHECK(st.shards > 2 && st.chunks > st.shards);
    CHECK(st.stored_bytes < st.raw_bytes);
    CHECK(progress_calls == st.chunks);
    CHECK_EQ_INT(verify_dataset(path, n), 0);

    dsc_manifest_t *m = NULL;
    REQUIRE(dsc_manifest_load(path, &m) == 0);
    CHECK(strcmp(m->name, "var") == 0);
    CHECK_EQ_INT(m->schema.var_count, 2);
    uint64_t rows = 0, rmax = 0;
    for (uint64_t i = 0; i < n; i++) {
        rows += ids_len(i);
        rmax = ids_len(i) > rmax ? ids_len(i) : rmax;
    }
    CHECK_EQ_INT(m->field_stats[0].rows_total, rows);
    CHECK_EQ_INT(m->field_stats[0].rows_max, rmax);
    CHECK_EQ_INT(m->field_stats[0].bytes_max, rmax * 4);
    CHECK(m->field_stats[0].bytes_mean > 0 && m->field_stats[0].bytes_mean < 4 * 7);
    CHECK_EQ_INT(m->field_stats[1].bytes_max, 3 * 320);
    CHECK(m->meta_json != NULL &&
          strcmp(m->meta_json, "{\"classes\":[\"a\",\"b\"],\"skipped\":{\"count\":1}}") == 0);
    /* Each shard plans its chunks near chunk_bytes (16 KiB; samples of 3-4 KiB). */
    for (uint32_t s = 0; s < m->shard_count; s++)
        CHECK(m->shards[s].chunk_samples >= 3 && m->shards[s].chunk_samples <= 6);
    dsc_manifest_free(m);
    char sub[512];
    path_of(sub, sizeof sub, "sub");
    DIR *d = opendir(sub);
    REQUIRE(d != NULL);
    int entries = 0;
    for (struct dirent *ent; (ent = readdir(d)) != NULL;)
        entries += ent->d_name[0] != '.';
    closedir(d);
    CHECK_EQ_INT(entries, 1); /* just var/: the temporary directory is gone */

    /* The same path again: it exists now. */
    REQUIRE(dsc_writer_options_init(&o, sizeof o) == 0);
    o.path = path;
    o.fields = FIELDS;
    CHECK_EQ_INT(dsc_writer_create(&o, &w), -EEXIST);
    char why[512];
    dsc_writer_last_error(NULL, why, sizeof why);
    CHECK(strstr(why, "exists") != NULL);
}

static void test_columns(void) {
    char path[512], ref[512];
    path_of(path, sizeof path, "cols");
    path_of(ref, sizeof ref, "colz"); /* same name length: same offsets */
    const uint64_t n = 300;
    /* Columns: all samples of a field together; variable ones with offsets. */
    int32_t *ids = malloc(n * 8 * 4);
    float *mel = malloc(n * 4 * 320);
    uint8_t *image = malloc(n * 3072);
    int64_t *label = malloc(n * 8), *ids_off = malloc((n + 1) * 8), *mel_off = malloc((n + 1) * 8);
    REQUIRE(ids && mel && image && label && ids_off && mel_off);
    ids_off[0] = mel_off[0] = 0;
    for (uint64_t i = 0; i < n; i++) {
        sample_t s;
        make_sample(i, &s);
        memcpy(ids + ids_off[i], s.ids, ids_len(i) * 4);
        memcpy(mel + mel_off[i] * 80, s.mel, mel_rows(i) * 320);
        memcpy(image + i * 3072, s.image, 3072);
        label[i] = s.label;
        ids_off[i + 1] = ids_off[i] + ids_len(i);
        mel_off[i + 1] = mel_off[i] + mel_rows(i);
    }
    dsc_writer_column_t cols[4] = {
        {ids, (uint64_t)ids_off[n] * 4, ids_off},
        {mel, (uint64_t)mel_off[n] * 320, mel_off},
        {image, n * 3072, NULL},
        {label, n * 8, NULL},
    };
    dsc_writer_options_t o;
    options(&o, path);
    dsc_writer_t *w = NULL;
    REQUIRE(dsc_writer_create(&o, &w) == 0);
    /* Bad batches are refused whole and name the field and sample. */
    char why[512];
    int64_t saved = ids_off[5];
    ids_off[5] = ids_off[6] + 1; /* offsets[6] < offsets[5] */
    CHECK_EQ_INT(dsc_writer_add_columns(w, cols, 4, n), DSC_EINVAL);
    dsc_writer_last_error(w, why, sizeof why);
    CHECK(strstr(why, "field 'ids'") != NULL && strstr(why, "decrease") != NULL);
    ids_off[5] = saved;
    cols[2].bytes -= 1;
    CHECK_EQ_INT(dsc_writer_add_columns(w, cols, 4, n), DSC_EINVAL);
    dsc_writer_last_error(w, why, sizeof why);
    CHECK(strstr(why, "field 'image'") != NULL);
    cols[2].bytes += 1;
    cols[1].offsets = NULL;
    CHECK_EQ_INT(dsc_writer_add_columns(w, cols, 4, n), DSC_EINVAL);
    cols[1].offsets = mel_off;
    cols[0].bytes += 4;
    CHECK_EQ_INT(dsc_writer_add_columns(w, cols, 4, n), DSC_EINVAL);
    cols[0].bytes -= 4;
    CHECK_EQ_INT(dsc_writer_add_columns(w, cols, 3, n), DSC_EINVAL);
    /* In two batches: [0, 100), then [100, n) with its offsets counted from 0. */
    dsc_writer_column_t first[4] = {
        {ids, (uint64_t)ids_off[100] * 4, ids_off},
        {mel, (uint64_t)mel_off[100] * 320, mel_off},
        {image, 100 * 3072, NULL},
        {label, 100 * 8, NULL},
    };
    REQUIRE(dsc_writer_add_columns(w, first, 4, 100) == 0);
    int64_t *ids_rest = malloc((n - 100 + 1) * 8), *mel_rest = malloc((n - 100 + 1) * 8);
    REQUIRE(ids_rest && mel_rest);
    for (uint64_t i = 100; i <= n; i++) {
        ids_rest[i - 100] = ids_off[i] - ids_off[100];
        mel_rest[i - 100] = mel_off[i] - mel_off[100];
    }
    dsc_writer_column_t rest[4] = {
        {ids + ids_off[100], (uint64_t)ids_rest[n - 100] * 4, ids_rest},
        {mel + mel_off[100] * 80, (uint64_t)mel_rest[n - 100] * 320, mel_rest},
        {image + 100 * 3072, (n - 100) * 3072, NULL},
        {label + 100, (n - 100) * 8, NULL},
    };
    CHECK_EQ_INT(dsc_writer_add_columns(w, rest, 4, 0), DSC_EINVAL); /* bytes for 0 samples */
    REQUIRE(dsc_writer_add_columns(w, rest, 4, n - 100) == 0);
    free(ids_rest);
    free(mel_rest);
    REQUIRE(dsc_writer_finish(w, NULL) == 0);
    CHECK_EQ_INT(verify_dataset(path, n), 0);

    /* The same samples one at a time, on one thread: the same files. */
    options(&o, ref);
    o.threads = 1;
    REQUIRE(dsc_writer_create(&o, &w) == 0);
    for (uint64_t i = 0; i < n; i++) {
        sample_t s;
        make_sample(i, &s);
        dsc_writer_value_t v[4];
        sample_values(&s, i, v);
        REQUIRE(dsc_writer_add(w, v, 4) == 0);
    }
    REQUIRE(dsc_writer_finish(w, NULL) == 0);
    char a[1024], b[1024];
    snprintf(a, sizeof a, "%s/shard-00000.dsc", path);
    snprintf(b, sizeof b, "%s/shard-00000.dsc", ref);
    uint64_t la, lb;
    uint8_t *fa = testdata_read_file(a, &la), *fb = testdata_read_file(b, &lb);
    REQUIRE(fa && fb);
    /* Same bytes except the dataset name in the header (and so its checksum). */
    dsc_shard_view_t va, vb;
    REQUIRE(dsc_shard_parse(fa, la, &va) == 0 && dsc_shard_parse(fb, lb, &vb) == 0);
    CHECK(la == lb && va.header.header_len == vb.header.header_len);
    CHECK(memcmp(fa + va.header.header_len, fb + vb.header.header_len, la - va.header.header_len) ==
          0);
    free(fa);
    free(fb);
    free(ids);
    free(mel);
    free(image);
    free(label);
    free(ids_off);
    free(mel_off);
}

static void test_errors(void) {
    char path[512];
    path_of(path, sizeof path, "err");
    dsc_writer_options_t o;
    dsc_writer_t *w = NULL;
    char why[512];
    struct {
        const char *fields, *want;
    } bad_specs[] = {
        {"", "no fields"},
        {"x", "NAME:DTYPE"},
        {"x:u7", "unknown dtype"},
        {"x:u8[3,?]", "leading"},
        {"x:u8[0]", "dimension"},
        {"x:u8[3,]", "trailing"},
        {"x:u8[3", "dims"},
        {"x:u8,x:i64", "twice"},
        {"a b:u8", "name"},
        {"x:u8[1,2,3,4,5,6,7,8,9]", "at most"},
        {"x:f64[65536,65536]", "2^32"},
    };
    for (size_t i = 0; i < sizeof bad_specs / sizeof bad_specs[0]; i++) {
        options(&o, path);
        o.fields = bad_specs[i].fields;
        CHECK_EQ_INT(dsc_writer_create(&o, &w), DSC_EINVAL);
        dsc_writer_last_error(NULL, why, sizeof why);
        if (strstr(why, bad_specs[i].want) == NULL)
            fprintf(stderr, "spec '%s': '%s' lacks '%s'\n", bad_specs[i].fields, why,
                    bad_specs[i].want);
        CHECK(strstr(why, bad_specs[i].want) != NULL);
    }
    options(&o, path);
    o.compress = "zstd";
    CHECK_EQ_INT(dsc_writer_create(&o, &w), DSC_EINVAL);
    options(&o, path);
    o.level = 5; /* lz4 has no level */
    CHECK_EQ_INT(dsc_writer_create(&o, &w), DSC_EINVAL);
    options(&o, path);
    o.meta_json = "[1]";
    CHECK_EQ_INT(dsc_writer_create(&o, &w), DSC_EINVAL);
    options(&o, path);
    o.name = "bad name";
    CHECK_EQ_INT(dsc_writer_create(&o, &w), DSC_EINVAL);
    CHECK_EQ_INT(dsc_writer_options_init(&o, 8), DSC_EINVAL);
    CHECK_EQ_INT(hidden_entries(), 0);

    /* Values that do not match: refused, named, and the writer goes on. */
    options(&o, path);
    REQUIRE(dsc_writer_create(&o, &w) == 0);
    sample_t s;
    make_sample(0, &s);
    dsc_writer_value_t v[4];
    sample_values(&s, 0, v);
    REQUIRE(dsc_writer_add(w, v, 4) == 0);
    REQUIRE(dsc_writer_add(w, v, 4) == 0);
    v[2].bytes = 3000;
    CHECK_EQ_INT(dsc_writer_add(w, v, 4), DSC_EINVAL);
    dsc_writer_last_error(w, why, sizeof why);
    CHECK(strcmp(why, "field 'image' of sample 2: 3000 bytes, expected 3072 (image:u8[3,32,32])") ==
          0);
    v[2].bytes = 3072;
    v[1].bytes = 100;
    CHECK_EQ_INT(dsc_writer_add(w, v, 4), DSC_EINVAL);
    dsc_writer_last_error(w, why, sizeof why);
    CHECK(strstr(why, "field 'mel' of sample 2: 100 bytes, not a multiple") != NULL);
    v[1].bytes = 0;
    CHECK_EQ_INT(dsc_writer_add(w, v, 3), DSC_EINVAL);
    v[0].data = NULL;
    v[0].bytes = 4;
    CHECK_EQ_INT(dsc_writer_add(w, v, 4), DSC_EINVAL);
    v[0].bytes = 0; /* NULL with 0 bytes: an empty sample */
    /* A sample larger than any chunk: refused before its bytes are read. */
    v[1].data = s.mel;
    v[1].bytes = (uint64_t)320 * (DSC_CHUNK_MAX_RAW / 320 + 1);
    CHECK_EQ_INT(dsc_writer_add(w, v, 4), DSC_ETOOLARGE);
    dsc_writer_last_error(w, why, sizeof why);
    CHECK(strstr(why, "sample 2") != NULL);
    v[1].bytes = 0;
    REQUIRE(dsc_writer_add(w, v, 4) == 0);
    dsc_writer_abort(w);
    CHECK(!exists(path));
    CHECK_EQ_INT(hidden_entries(), 0);
    dsc_writer_abort(NULL);

    /* The same through add_columns: refused before any sample of the batch is added. */
    options(&o, path);
    REQUIRE(dsc_writer_create(&o, &w) == 0);
    int64_t ids_off[3] = {0, 0, 0}, mel_off[3] = {0, 1, 900000}; /* 288 MB in sample 1 */
    int64_t labels[2] = {7, 8};
    static uint8_t images[2 * 3072];
    dsc_writer_column_t big[4] = {{NULL, 0, ids_off},
                                  {s.mel, 900000ull * 320, mel_off},
                                  {images, sizeof images, NULL},
                                  {labels, sizeof labels, NULL}};
    CHECK_EQ_INT(dsc_writer_add_columns(w, big, 4, 2), DSC_ETOOLARGE);
    dsc_writer_last_error(w, why, sizeof why);
    CHECK(strstr(why, "sample 1:") != NULL);
    mel_off[2] = 1;
    big[1].bytes = 320;
    REQUIRE(dsc_writer_add_columns(w, big, 4, 2) == 0);
    REQUIRE(dsc_writer_finish(w, NULL) == 0);
    dsc_manifest_t *m = NULL;
    REQUIRE(dsc_manifest_load(path, &m) == 0);
    CHECK_EQ_INT(m->samples, 2);
    dsc_manifest_free(m);
    remove_tree(path);

    /* finish without samples: an error, and nothing left. */
    options(&o, path);
    REQUIRE(dsc_writer_create(&o, &w) == 0);
    CHECK_EQ_INT(dsc_writer_finish(w, NULL), DSC_EINVAL);
    dsc_writer_last_error(NULL, why, sizeof why);
    CHECK(strstr(why, "no samples") != NULL);
    CHECK(!exists(path));
    CHECK_EQ_INT(hidden_entries(), 0);

    /* path taken while writing: finish fails, the temporary directory goes. */
    options(&o, path);
    REQUIRE(dsc_writer_create(&o, &w) == 0);
    sample_values(&s, 0, v);
    REQUIRE(dsc_writer_add(w, v, 4) == 0);
    REQUIRE(mkdir(path, 0755) == 0);
    char keep[1024];
    snprintf(keep, sizeof keep, "%s/keep", path);
    FILE *f = fopen(keep, "w");
    REQUIRE(f != NULL);
    fclose(f);
    CHECK_EQ_INT(dsc_writer_finish(w, NULL), -EEXIST);
    CHECK(exists(keep));
    CHECK_EQ_INT(hidden_entries(), 0);

    /* replace swaps the whole directory: one holding a file that is not a dataset's is
     * refused, naming it; emptied, it is taken. */
    options(&o, path);
    o.replace = 1;
    CHECK_EQ_INT(dsc_writer_create(&o, &w), -ENOTEMPTY);
    dsc_writer_last_error(NULL, why, sizeof why);
    CHECK(strstr(why, "'keep'") != NULL);
    CHECK(exists(keep));
    REQUIRE(unlink(keep) == 0);
    REQUIRE(dsc_writer_create(&o, &w) == 0);
    for (uint64_t i = 0; i < 50; i++) {
        make_sample(i, &s);
        sample_values(&s, i, v);
        REQUIRE(dsc_writer_add(w, v, 4) == 0);
    }
    REQUIRE(dsc_writer_finish(w, NULL) == 0);
    CHECK_EQ_INT(verify_dataset(path, 50), 0);
    /* without replace an existing dataset is refused, the message naming it and replace */
    options(&o, path);
    CHECK_EQ_INT(dsc_writer_create(&o, &w), -EEXIST);
    dsc_writer_last_error(NULL, why, sizeof why);
    CHECK(strstr(why, path) != NULL && strstr(why, "holds a dataset") != NULL &&
          strstr(why, "replace") != NULL);
    CHECK_EQ_INT(verify_dataset(path, 50), 0);
    /* and again, smaller: no stale shard remains */
    options(&o, path);
    o.replace = 1;
    o.shard_bytes = 1 << 30;
    REQUIRE(dsc_writer_create(&o, &w) == 0);
    for (uint64_t i = 0; i < 5; i++) {
        make_sample(i, &s);
        sample_values(&s, i, v);
        REQUIRE(dsc_writer_add(w, v, 4) == 0);
    }
    REQUIRE(dsc_writer_finish(w, NULL) == 0);
    CHECK_EQ_INT(verify_dataset(path, 5), 0);
    char stale[1024];
    snprintf(stale, sizeof stale, "%s/shard-00001.dsc", path);
    CHECK(!exists(stale));
    CHECK_EQ_INT(hidden_entries(), 0);
}

/* Fixed fields only: format version 1, the chunk size from chunk_bytes. */
static void test_fixed(void) {
    char path[512];
    path_of(path, sizeof path, "fixed");
    dsc_writer_options_t o;
    REQUIRE(dsc_writer_options_init(&o, sizeof o) == 0);
    o.path = path;
    o.name = "fixed-set";
    o.fields = "x:f32[4,4], y:i64";
    o.compress = "lz4hc";
    o.level = 3;
    o.chunk_bytes = 720;
    dsc_writer_t *w = NULL;
    REQUIRE(dsc_writer_create(&o, &w) == 0);
    float x[16] = {0};
    int64_t y = 0;
    for (int i = 0; i < 25; i++) {
        x[0] = (float)i;
        y = i;
        dsc_writer_value_t v[2] = {{x, sizeof x}, {&y, 8}};
        REQUIRE(dsc_writer_add(w, v, 2) == 0);
    }
    REQUIRE(dsc_writer_finish(w, NULL) == 0);
    dsc_manifest_t *m = NULL;
    REQUIRE(dsc_manifest_load(path, &m) == 0);
    CHECK(strcmp(m->name, "fixed-set") == 0);
    CHECK_EQ_INT(m->schema.var_count, 0);
    CHECK_EQ_INT(m->shards[0].chunk_samples, 10);
    CHECK_EQ_INT(m->shards[0].chunks, 3);
    char shard[1024];
    snprintf(shard, sizeof shard, "%s/%s", path, m->shards[0].file);
    uint64_t len;
    uint8_t *file = testdata_read_file(shard, &len);
    REQUIRE(file != NULL);
    dsc_shard_view_t v;
    REQUIRE(dsc_shard_parse(file, len, &v) == 0);
    CHECK_EQ_INT(v.header.version, DSC_SHARD_VERSION);
    free(file);
    dsc_manifest_free(m);
    testdata_t td;
    REQUIRE(testdata_load(path, 1, &td) == 0);
    CHECK(td.bytes[24 * 72] == 0 && ((float *)(td.bytes + 24 * 72))[0] == 24.0f);
    testdata_free(&td);
}

/* Samples that grow 300-fold: every chunk stays within 4 * chunk_bytes (a sample larger than
 * that gets a chunk of its own), each shard plans its chunk size anew, every value reads back. */
static uint32_t growth_len(uint32_t i) {
    return i < 100 ? 10 : i < 200 ? 3000 : 20000;
}

static void test_growth(void) {
    char path[512];
    path_of(path, sizeof path, "growth");
    dsc_writer_options_t o;
    REQUIRE(dsc_writer_options_init(&o, sizeof o) == 0);
    o.path = path;
    o.fields = "b:u8[]";
    o.chunk_bytes = 4096;
    o.threads = 2;
    dsc_writer_t *w = NULL;
    REQUIRE(dsc_writer_create(&o, &w) == 0);
    static uint8_t buf[20000];
    for (uint32_t i = 0; i < 220; i++) {
        memset(buf, (int)(i & 0xff), growth_len(i));
        dsc_writer_value_t v = {buf, growth_len(i)};
        REQUIRE(dsc_writer_add(w, &v, 1) == 0);
    }
    REQUIRE(dsc_writer_finish(w, NULL) == 0);
    dsc_manifest_t *m = NULL;
    REQUIRE(dsc_manifest_load(path, &m) == 0);
    CHECK(m->shard_count >= 3);
    CHECK(m->shards[0].chunk_samples > 100); /* 10-byte samples: hundreds per 4 KiB chunk */
    CHECK_EQ_INT(m->shards[m->shard_count - 1].chunk_samples, 1); /* 20000-byte samples */
    CHECK_EQ_INT(m->field_stats[0].rows_max, 20000);
    uint32_t next = 0;
    for (uint32_t s = 0; s < m->shard_count; s++) {
        char file[1024];
        snprintf(file, sizeof file, "%s/%s", path, m->shards[s].file);
        uint64_t len;
        uint8_t *data = testdata_read_file(file, &len);
        dsc_shard_view_t v;
        REQUIRE(data != NULL && dsc_shard_parse(data, len, &v) == 0);
        for (uint32_t c = 0; c < v.footer.chunk_count; c++) {
            dsc_chunk_entry_t e;
            REQUIRE(dsc_shard_chunk(&v, c, &e) == 0);
            CHECK(e.raw_len <= 4 * 4096 || e.sample_count == 1);
            uint8_t *raw = malloc(e.raw_len);
            REQUIRE(raw && dsc_chunk_decode(&e, dsc_shard_chunk_data(&v, &e), raw, e.raw_len) ==
                               (int)e.raw_len);
            dsc_chunk_layout_t l;
            REQUIRE(dsc_chunk_layout(&m->schema, e.sample_count, raw, e.raw_len, &l) == 0);
            for (uint32_t k = 0; k < e.sample_count; k++, next++) {
                const uint8_t *p;
                uint64_t n;
                REQUIRE(dsc_chunk_sample(&l, &m->schema, 0, k, &p, &n) == 0);
                CHECK_EQ_INT(n, growth_len(next));
                CHECK(n == 0 || (p[0] == (next & 0xff) && p[n - 1] == (next & 0xff)));
            }
            free(raw);
        }
        free(data);
    }
    CHECK_EQ_INT(next, 220);
    dsc_manifest_free(m);
}

/* Memory follows the chunks in flight, not the dataset: 96 MB of variable samples through
 * 64 KiB chunks on 2 threads raise the peak RSS by a few MB at most (bound checked: 24 MB). */
static long peak_rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, "VmHWM:", 6) == 0)
            kb = strtol(line + 6, NULL, 10);
    if (f != NULL)
        fclose(f);
    return kb;
}

static void test_memory_bound(void) {
    long before = peak_rss_kb();
    if (before < 0) {
        printf("note: no /proc/self/status VmHWM, memory bound not checked\n");
        return;
    }
    char path[512];
    path_of(path, sizeof path, "big");
    dsc_writer_options_t o;
    REQUIRE(dsc_writer_options_init(&o, sizeof o) == 0);
    o.path = path;
    o.fields = "tokens:u16[],label:i64";
    o.chunk_bytes = 64 << 10;
    o.shard_bytes = 16 << 20;
    o.threads = 2;
    dsc_writer_t *w = NULL;
    REQUIRE(dsc_writer_create(&o, &w) == 0);
    static uint16_t tokens[4096];
    for (uint32_t k = 0; k < 4096; k++)
        tokens[k] = (uint16_t)(k * 7);
    uint64_t bytes = 0;
    for (int64_t i = 0; bytes < (96u << 20); i++) {
        uint32_t n = (uint32_t)(i * 13 % 4096);
        dsc_writer_value_t v[2] = {{tokens, n * 2ull}, {&i, 8}};
        REQUIRE(dsc_writer_add(w, v, 2) == 0);
        bytes += n * 2ull + 8;
    }
    dsc_writer_stats_t st = {.struct_size = sizeof st};
    REQUIRE(dsc_writer_finish(w, &st) == 0);
    CHECK(st.shards >= 5);
    printf("memory: %llu bytes in %u shards, peak RSS +%ld KiB\n", (unsigned long long)st.raw_bytes,
           st.shards, peak_rss_kb() - before);
    long grown = peak_rss_kb() - before;
    if (grown > 24 * 1024)
        fprintf(stderr, "peak RSS grew by %ld KiB writing %llu bytes\n", grown,
                (unsigned long long)bytes);
    CHECK(grown <= 24 * 1024);
    remove_tree(path);
}

/* A writer process killed mid-way (SIGKILL: no cleanup at all) leaves no path and no
 * manifest: nothing a server would load. */
static void test_killed(void) {
    char path[512];
    path_of(path, sizeof path, "killed");
    int pipefd[2];
    REQUIRE(pipe(pipefd) == 0);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        close(pipefd[0]);
        dsc_writer_options_t o;
        options(&o, path);
        dsc_writer_t *w = NULL;
        if (dsc_writer_create(&o, &w) != 0)
            _exit(3);
        for (uint64_t i = 0;; i++) {
            sample_t s;
            make_sample(i, &s);
            dsc_writer_value_t v[4];
            sample_values(&s, i, v);
            if (dsc_writer_add(w, v, 4) != 0)
                _exit(4);
            if (i == 2000 && write(pipefd[1], "x", 1) != 1)
                _exit(5);
        }
    }
    close(pipefd[1]);
    char c;
    CHECK_EQ_INT(read(pipefd[0], &c, 1), 1); /* several shards written by now */
    close(pipefd[0]);
    kill(pid, SIGKILL);
    int status;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    CHECK(!exists(path));
    /* What is left: one hidden directory, with shard files but no manifest. */
    DIR *d = opendir(root);
    REQUIRE(d != NULL);
    int found = 0;
    for (struct dirent *ent; (ent = readdir(d)) != NULL;) {
        if (strncmp(ent->d_name, ".killed.tmp-", 12) != 0)
            continue;
        found++;
        char tmp[1024];
        snprintf(tmp, sizeof tmp, "%s/%s", root, ent->d_name);
        dsc_manifest_t *m = NULL;
        CHECK_EQ_INT(dsc_manifest_load(tmp, &m), DSC_ENOENT);
        char shard[2048];
        snprintf(shard, sizeof shard, "%s/shard-00000.dsc", tmp);
        CHECK(exists(shard));
        /* clean up by hand, as a user would */
        DIR *t = opendir(tmp);
        for (struct dirent *e; t != NULL && (e = readdir(t)) != NULL;) {
            snprintf(shard, sizeof shard, "%s/%s", tmp, e->d_name);
            if (e->d_name[0] != '.')
                unlink(shard);
        }
        if (t != NULL)
            closedir(t);
        CHECK_EQ_INT(rmdir(tmp), 0);
    }
    closedir(d);
    CHECK_EQ_INT(found, 1);
}

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    for (struct dirent *ent; (ent = readdir(d)) != NULL;) {
        if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0)
            continue;
        char p[2048];
        snprintf(p, sizeof p, "%s/%s", dir, ent->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            remove_tree(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

int main(void) {
    REQUIRE(mkdtemp(root) != NULL);
    test_roundtrip();
    test_columns();
    test_errors();
    test_fixed();
    test_growth();
    test_memory_bound();
    test_killed();
    remove_tree(root);
    return TEST_DONE();
}
