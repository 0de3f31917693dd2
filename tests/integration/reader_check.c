/* Reader checks against a real server or shard files (driven by tests/integration/
 * test_reader.sh): random-access batches byte-equal to the dataset's shard files, the chunk
 * cache (no chunk fetched twice while it fits, counted in the reader's stats), bad input, a
 * corrupt chunk failing as in the loader, and batches equal to the loader's for the same
 * indices (variable-length fields, values and padded).
 * usage: reader_check MODE [--servers S] [--fallback DIR] --dataset NAME [--dir DATASET_DIR]
 *   modes: data | cache | bad | corrupt | loadereq */
#include "dscache.h"
#include "shard.h"
#include "testdata.h"

#include "testlib.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *servers, *fallback, *dataset, *dir, *expect_error;
static uint32_t batch = 64, pad = 0, max_len = 0, damaged = 0;
static uint64_t cache = 0, seed = 7;

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char last_error[1024];
static void on_log(void *ctx, int level, const char *message) {
    (void)ctx;
    pthread_mutex_lock(&log_lock);
    if (level == DSC_LOG_ERROR)
        snprintf(last_error, sizeof last_error, "%s", message);
    pthread_mutex_unlock(&log_lock);
}

static testdata_t source;

static void options(dsc_loader_options_t *o, dsc_field_options_t *fo) {
    DSC_LOADER_OPTIONS_INIT(o);
    o->servers = servers;
    o->fallback_path = fallback;
    o->dataset = dataset;
    o->batch_size = batch;
    o->seed = seed;
    o->timeout_ms = 3000;
    o->log_fn = on_log;
    o->log_level = DSC_LOG_WARN;
    if (cache)
        o->cache_bytes = cache;
    if (pad && fo != NULL) {
        o->field_options = fo;
        o->field_option_count = 1;
    }
}

static dsc_reader_t *open_reader(dsc_field_options_t *fo) {
    dsc_loader_options_t o;
    options(&o, fo);
    dsc_reader_t *r = NULL;
    int rc = dsc_reader_create(&o, &r);
    if (rc < 0) {
        char why[1024];
        dsc_reader_last_error(NULL, why, sizeof why);
        fprintf(stderr, "dsc_reader_create: %s (%s): %s\n", dsc_strerror(rc), dsc_err_name(rc),
                why);
        exit(1);
    }
    return r;
}

static void stats(dsc_reader_t *r, dsc_stats_t *s) {
    s->struct_size = sizeof *s;
    REQUIRE(dsc_reader_stats(r, s) == 0);
}

/* Reads indices[0..n) as one batch and checks it against the shard files. Returns the get's
 * result. */
static int get_checked(dsc_reader_t *r, const uint64_t *idx, size_t n) {
    dsc_batch_t *b = NULL;
    int rc = dsc_reader_get(r, idx, n, &b);
    if (rc < 0)
        return rc;
    CHECK(dsc_batch_samples(b) == n);
    CHECK(memcmp(dsc_batch_indices(b), idx, n * sizeof idx[0]) == 0);
    int bad = testdata_batch_mismatches(&source, b, source.schema.field_count);
    if (bad)
        fprintf(stderr, "a batch of %zu: %d sample field(s) differ from the source\n", n, bad);
    CHECK(bad == 0);
    dsc_batch_release(b);
    return 0;
}

static uint64_t rnd_state = 88172645463325252ull;
static uint64_t rnd(void) {
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}

/* Random batches (repeats allowed), one-sample requests, a reversed run, and batches kept
 * past later requests: every sample byte-equal to the shard files. */
static int mode_data(void) {
    dsc_reader_t *r = open_reader(NULL);
    uint64_t n = dsc_reader_len(r);
    CHECK(n == source.samples);
    uint64_t *idx = calloc(batch, sizeof *idx);
    REQUIRE(idx != NULL);
    for (int round = 0; round < 40; round++) {
        size_t count = 1 + rnd() % batch;
        for (size_t k = 0; k < count; k++)
            idx[k] = rnd() % n;
        REQUIRE(get_checked(r, idx, count) == 0);
    }
    for (uint64_t i = 0; i < n; i += 1 + n / 97)
        REQUIRE(get_checked(r, &i, 1) == 0);
    size_t run = batch < n ? batch : (size_t)n;
    for (size_t k = 0; k < run; k++)
        idx[k] = n - 1 - k;
    REQUIRE(get_checked(r, idx, run) == 0);
    /* Batches held at once are never overwritten by later requests. */
    dsc_batch_t *held[3];
    for (int h = 0; h < 3; h++) {
        idx[0] = (uint64_t)h * (n / 3);
        REQUIRE(dsc_reader_get(r, idx, 1, &held[h]) == 0);
    }
    for (int h = 0; h < 3; h++) {
        CHECK(dsc_batch_indices(held[h])[0] == (uint64_t)h * (n / 3));
        CHECK(testdata_batch_mismatches(&source, held[h], source.schema.field_count) == 0);
        dsc_batch_release(held[h]);
    }
    dsc_stats_t s;
    stats(r, &s);
    CHECK(s.batches > 40 && s.requests > 0);
    /* --damaged 1: the server's copy is damaged, the fallback files' intact. */
    CHECK(damaged ? s.checksum_failures > 0 && s.failovers > 0 : s.checksum_failures == 0);
    printf("data: %llu batches, %llu samples, %llu GETs, %llu wire bytes, %llu checksum "
           "failures\n",
           (unsigned long long)s.batches, (unsigned long long)s.samples,
           (unsigned long long)s.requests, (unsigned long long)s.wire_bytes,
           (unsigned long long)s.checksum_failures);
    free(idx);
    dsc_reader_destroy(r);
    return TEST_DONE();
}

/* The cache: every sample read one at a time in dataset order costs one fetch per chunk, and a
 * second pass none while the dataset fits in cache_bytes; with a cache smaller than a chunk's
 * neighbours the refetches are counted. */
static int mode_cache(void) {
    dsc_reader_t *r = open_reader(NULL);
    uint64_t n = dsc_reader_len(r);
    for (uint64_t i = 0; i < n; i++)
        REQUIRE(get_checked(r, &i, 1) == 0);
    dsc_stats_t s1, s2;
    stats(r, &s1);
    /* A sample-at-a-time pass without a cache would send n GETs; one per chunk at most. */
    printf("cache: %llu samples one at a time: %llu GETs, %llu wire bytes, %llu refetches\n",
           (unsigned long long)n, (unsigned long long)s1.requests,
           (unsigned long long)s1.wire_bytes, (unsigned long long)s1.refetches);
    CHECK(s1.requests > 0 && s1.requests * 4 <= n);
    CHECK(s1.refetches == 0);
    /* Random order, whole dataset again: all cached. */
    for (uint64_t k = 0; k < n; k++) {
        uint64_t i = rnd() % n;
        REQUIRE(get_checked(r, &i, 1) == 0);
    }
    stats(r, &s2);
    CHECK_EQ_INT(s2.requests, s1.requests);
    CHECK_EQ_INT(s2.wire_bytes, s1.wire_bytes);
    dsc_reader_destroy(r);
    /* A cache of about one chunk: random single samples go as sample ranges (RANGE), a
     * sample's bytes each rather than a chunk's, and no chunk is refetched (against a server
     * without RANGE they refetch whole chunks, counted in refetches). */
    cache = 1;
    r = open_reader(NULL);
    for (uint64_t k = 0; k < 200; k++) {
        uint64_t i = rnd() % n;
        REQUIRE(get_checked(r, &i, 1) == 0);
    }
    stats(r, &s2);
    printf("cache 1 byte: 200 random samples: %llu requests, %llu wire bytes, %llu refetches\n",
           (unsigned long long)s2.requests, (unsigned long long)s2.wire_bytes,
           (unsigned long long)s2.refetches);
    uint64_t chunk_bytes = s1.wire_bytes / s1.requests;
    CHECK(s2.refetches == 0 && s2.requests > 0 && s2.wire_bytes * 4 <= 200 * chunk_bytes);
    dsc_reader_destroy(r);
    return TEST_DONE();
}

/* Bad input: clear errors, the reader stays usable. */
static int mode_bad(void) {
    char why[1024];
    dsc_loader_options_t o;
    dsc_reader_t *r = NULL;
    options(&o, NULL);
    o.shuffle_window = 16;
    CHECK(dsc_reader_create(&o, &r) == DSC_EINVAL && r == NULL);
    dsc_reader_last_error(NULL, why, sizeof why);
    CHECK(strstr(why, "shuffle_window") != NULL);
    options(&o, NULL);
    o.world_size = 2;
    o.rank = 1;
    CHECK(dsc_reader_create(&o, &r) == DSC_EINVAL && r == NULL);
    dsc_reader_last_error(NULL, why, sizeof why);
    CHECK(strstr(why, "rank / world_size") != NULL && strstr(why, "sampler") != NULL);
    options(&o, NULL);
    o.dataset = "no-such-dataset";
    CHECK(dsc_reader_create(&o, &r) == DSC_ENOTFOUND && r == NULL);
    CHECK(dsc_reader_last_error(NULL, why, sizeof why) > 0);
    printf("unknown dataset: %s\n", why);

    r = open_reader(NULL);
    uint64_t n = dsc_reader_len(r);
    dsc_batch_t *b = NULL;
    uint64_t idx[3] = {0, n, 1};
    CHECK(dsc_reader_get(r, idx, 3, &b) == DSC_ERANGE && b == NULL);
    dsc_reader_last_error(r, why, sizeof why);
    char want[128];
    snprintf(want, sizeof want, "index %llu (position 1 of the request) is out of range",
             (unsigned long long)n);
    CHECK(strstr(why, want) != NULL);
    snprintf(want, sizeof want, "has %llu samples", (unsigned long long)n);
    CHECK(strstr(why, want) != NULL);
    printf("out of range: %s\n", why);
    CHECK(dsc_reader_get(r, idx, 0, &b) == DSC_EINVAL);
    uint64_t *many = calloc(batch + 1, sizeof *many);
    REQUIRE(many != NULL);
    CHECK(dsc_reader_get(r, many, batch + 1, &b) == DSC_EINVAL);
    dsc_reader_last_error(r, why, sizeof why);
    CHECK(strstr(why, "batch_size") != NULL);
    free(many);
    CHECK(dsc_reader_get(NULL, idx, 1, &b) == DSC_EINVAL);
    /* Still usable. */
    REQUIRE(get_checked(r, idx, 1) == 0);
    dsc_reader_last_error(r, why, sizeof why);
    CHECK(why[0] == '\0');
    dsc_reader_destroy(r);
    dsc_reader_destroy(NULL);
    return TEST_DONE();
}

/* A damaged chunk with no intact copy: the request that needs it fails with expect_error and
 * a line naming the chunk, as the loader's; requests before it were byte-equal. */
static int mode_corrupt(void) {
    REQUIRE(expect_error != NULL);
    dsc_reader_t *r = open_reader(NULL);
    uint64_t n = dsc_reader_len(r);
    int rc = 0;
    uint64_t good = 0;
    for (uint64_t i = 0; i < n && rc == 0; i++) {
        rc = get_checked(r, &i, 1);
        good += rc == 0;
    }
    char why[1024];
    dsc_reader_last_error(r, why, sizeof why);
    printf("corrupt: %llu samples read, then %s: %s\n", (unsigned long long)good, dsc_err_name(rc),
           why);
    CHECK(rc < 0 && strcmp(dsc_err_name(rc), expect_error) == 0);
    CHECK(good > 0);
    char want[128];
    snprintf(want, sizeof want, "dataset %s shard 1 ", dataset);
    CHECK(strstr(why, want) != NULL && strstr(why, "chunk") != NULL);
    dsc_stats_t s;
    stats(r, &s);
    CHECK(s.checksum_failures > 0);
    /* Failed for good, as a loader: the same code again. */
    uint64_t zero = 0;
    dsc_batch_t *b = NULL;
    CHECK(dsc_reader_get(r, &zero, 1, &b) == rc);
    dsc_reader_destroy(r);
    return TEST_DONE();
}

/* Compares one field of two batches byte for byte (values, offsets, lengths). */
static int same_field(dsc_batch_t *a, dsc_batch_t *b, uint32_t f) {
    dsc_field_view_t va = {.struct_size = sizeof va}, vb = {.struct_size = sizeof vb};
    REQUIRE(dsc_batch_field_view(a, f, &va) == 0 && dsc_batch_field_view(b, f, &vb) == 0);
    uint32_t n = dsc_batch_samples(a);
    if (va.kind != vb.kind || va.values.bytes != vb.values.bytes ||
        va.values.ndim != vb.values.ndim ||
        memcmp(va.values.shape, vb.values.shape, va.values.ndim * sizeof(int64_t)) != 0 ||
        memcmp(va.values.data, vb.values.data, va.values.bytes) != 0)
        return 0;
    if (va.offsets && memcmp(va.offsets, vb.offsets, (n + 1) * sizeof(int64_t)) != 0)
        return 0;
    if (va.lengths && memcmp(va.lengths, vb.lengths, n * sizeof(int64_t)) != 0)
        return 0;
    return 1;
}

/* Every batch of a loader epoch in dataset order equals the reader's batch of the same indices,
 * field by field (variable-length fields: values + offsets, or padded with --pad 1). */
static int mode_loadereq(void) {
    dsc_field_options_t fo;
    dsc_field_options_init(&fo, sizeof fo);
    dsc_loader_options_t o;
    options(&o, &fo);
    if (pad) {
        /* --pad 1: the first variable field padded, cut at max_len. */
        dsc_reader_t *probe = open_reader(NULL);
        for (uint32_t f = 0; f < dsc_reader_field_count(probe); f++) {
            dsc_field_info_t info;
            REQUIRE(dsc_reader_field(probe, f, &info) == 0);
            if (info.shape[0] == -1) {
                static char name[DSC_MAX_NAME];
                snprintf(name, sizeof name, "%s", info.name);
                fo.name = name;
                break;
            }
        }
        dsc_reader_destroy(probe);
        REQUIRE(fo.name != NULL);
        fo.pad = 1;
        fo.pad_value = -1;
        fo.max_len = max_len;
    }
    o.shuffle = 0;
    dsc_loader_t *l = NULL;
    REQUIRE(dsc_loader_create(&o, &l) == 0);
    dsc_reader_t *r = open_reader(&fo);
    REQUIRE(dsc_reader_field_count(r) == dsc_loader_field_count(l));
    uint64_t batches = 0, diff = 0;
    dsc_batch_t *lb;
    int rc;
    while ((rc = dsc_loader_next(l, &lb)) == 0) {
        dsc_batch_t *rb = NULL;
        uint32_t n = dsc_batch_samples(lb);
        REQUIRE(dsc_reader_get(r, dsc_batch_indices(lb), n, &rb) == 0);
        for (uint32_t f = 0; f < dsc_loader_field_count(l); f++)
            if (!same_field(lb, rb, f)) {
                fprintf(stderr, "batch %llu field %u differs from the loader's\n",
                        (unsigned long long)batches, f);
                diff++;
            }
        dsc_batch_release(rb);
        batches++;
    }
    CHECK(rc == DSC_EOF);
    CHECK(batches > 1 && diff == 0);
    printf("loadereq: %llu batches equal to the loader's%s\n", (unsigned long long)batches,
           pad ? " (padded)" : "");
    dsc_loader_destroy(l);
    dsc_reader_destroy(r);
    return TEST_DONE();
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: reader_check MODE [--servers S] --dataset N [--dir D] [...]\n");
        return 2;
    }
    const char *mode = argv[1];
    const testopt_t opts[] = {
        TESTOPT("--servers", &servers), TESTOPT("--fallback", &fallback),
        TESTOPT("--dataset", &dataset), TESTOPT("--dir", &dir),
        TESTOPT("--batch", &batch),     TESTOPT("--cache", &cache),
        TESTOPT("--pad", &pad),         TESTOPT("--max-len", &max_len),
        TESTOPT("--seed", &seed),       TESTOPT("--expect-error", &expect_error),
        TESTOPT("--damaged", &damaged),
    };
    if (testopt_parse("reader_check", argc, argv, 2, opts, sizeof opts / sizeof opts[0]) != 0)
        return 2;
    REQUIRE(dataset && (servers || fallback));
    if (strcmp(mode, "loadereq") != 0) {
        REQUIRE(dir != NULL);
        REQUIRE(testdata_load(dir, 1, &source) == 0);
    }
    if (!strcmp(mode, "data"))
        return mode_data();
    if (!strcmp(mode, "cache"))
        return mode_cache();
    if (!strcmp(mode, "bad"))
        return mode_bad();
    if (!strcmp(mode, "corrupt"))
        return mode_corrupt();
    if (!strcmp(mode, "loadereq"))
        return mode_loadereq();
    fprintf(stderr, "reader_check: unknown mode %s\n", mode);
    return 2;
}
