/* Cluster checks for tests/integration/test_cluster_*.sh and tests/netns/test_cluster_netns.sh:
 * one trainer rank reads epochs through the loader from several dscached, checks every batch's
 * bytes against the shard files, writes the sample ids it got, and prints its failover counts.
 * usage: cluster_check epoch --servers SPEC --dataset NAME --dir DATASET_DIR [options]
 *          --rank R --world W --epochs E --ids FILE --mark-at N --mark FILE --slow-ms MS
 *          --timeout-ms MS --batch B --fallback DIR --seed S --cache BYTES --inflight BYTES
 *          --window SAMPLES --no-verify 1 (bytes not checked: the shard files are not read)
 *          --corrupt 1 (damaged copies are served: checksum failures and fail-overs expected)
 *          --expect-error NAME (the epoch must end with this error, e.g. DSC_ECORRUPT, after
 *          correct batches only)
 *        cluster_check owners --servers SPEC --dataset NAME --shards N [--replicas R]
 *          prints "shard I: OWNER OWNER" computed the way the loader routes (placement.h) */
#include "dsc_sys.h"
#include "dscache.h"
#include "placement.h"
#include "testdata.h"
#include "testlib.h"
#include "util.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *servers, *dataset, *dir, *ids_path, *mark_path, *fallback;
static uint32_t batch = 32, rank_id = 0, world = 1, epochs = 1, replicas = 2, shards = 0;
static uint32_t timeout_ms = 0;
static uint64_t mark_at = 0, seed = 7, cache = 0, inflight = 0;
static uint32_t window = 0;
static int no_verify = 0, corrupt = 0;
static const char *expect_error;
static double slow_ms = 0;

/* The dataset decoded from its shard files (only its sizes with --no-verify 1). */
static testdata_t source;

/* Loader log lines go to stderr with the rank, so the scripts can look for them. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static void on_log(void *ctx, int level, const char *message) {
    (void)ctx;
    static const char *names[] = {"error", "warn", "info", "debug"};
    pthread_mutex_lock(&log_lock);
    fprintf(stderr, "rank %u %s: %s\n", rank_id, names[level & 3], message);
    pthread_mutex_unlock(&log_lock);
}

static int verify_batch(dsc_loader_t *l, dsc_batch_t *b) {
    int bad = testdata_batch_mismatches(&source, b, dsc_loader_field_count(l));
    REQUIRE(bad >= 0);
    if (bad)
        fprintf(stderr, "rank %u batch %llu: %d sample field(s) differ from the shard files\n",
                rank_id, (unsigned long long)dsc_batch_step(b), bad);
    return bad;
}

static int mode_epoch(void) {
    REQUIRE(testdata_load(dir, !no_verify, &source) == 0);
    dsc_loader_options_t o;
    dsc_loader_options_init(&o);
    o.servers = servers;
    o.dataset = dataset;
    o.batch_size = batch;
    o.seed = seed;
    o.rank = rank_id;
    o.world_size = world;
    o.replicas = replicas;
    o.fallback_path = fallback;
    o.log_fn = on_log;
    o.log_level = DSC_LOG_INFO;
    if (timeout_ms)
        o.timeout_ms = timeout_ms;
    if (cache)
        o.cache_bytes = cache;
    if (inflight)
        o.inflight_bytes = inflight;
    if (window)
        o.shuffle_window = window;
    dsc_loader_t *l = NULL;
    int rc = dsc_loader_create(&o, &l);
    if (rc < 0) {
        fprintf(stderr, "rank %u: dsc_loader_create: %s (%s)\n", rank_id, dsc_strerror(rc),
                dsc_err_name(rc));
        return 1;
    }
    FILE *ids = ids_path ? fopen(ids_path, "w") : NULL;
    REQUIRE(ids_path == NULL || ids != NULL);
    uint64_t batches = 0, samples = 0, bad = 0;
    double t0 = dsc_now_s();
    for (uint32_t e = 0; e < epochs; e++) {
        uint64_t expect = dsc_loader_len(l), got = 0, epoch_samples = 0;
        double e0 = dsc_now_s();
        for (;;) {
            dsc_batch_t *b;
            rc = dsc_loader_next(l, &b);
            if (rc == DSC_EOF)
                break;
            if (rc < 0) {
                fprintf(stderr, "rank %u: next after %llu batches: %s (%s)\n", rank_id,
                        (unsigned long long)batches, dsc_strerror(rc), dsc_err_name(rc));
                break;
            }
            if (!no_verify)
                bad += (uint64_t)verify_batch(l, b);
            const uint64_t *idx = dsc_batch_indices(b);
            for (uint32_t k = 0; k < dsc_batch_samples(b); k++)
                if (ids)
                    fprintf(ids, "%u %llu\n", e, (unsigned long long)idx[k]);
            samples += dsc_batch_samples(b);
            epoch_samples += dsc_batch_samples(b);
            batches++;
            got++;
            if (mark_path && batches == mark_at) {
                int fd = open(mark_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
                if (fd >= 0)
                    close(fd);
            }
            if (slow_ms > 0)
                usleep((useconds_t)(slow_ms * 1000));
        }
        if (rc < 0 && rc != DSC_EOF)
            break;
        double es = dsc_now_s() - e0;
        printf("epoch %u: %.2f s, %.1f MB/s\n", e, es,
               epoch_samples * source.sample_bytes / es / 1e6);
        CHECK_EQ_INT(got, expect);
    }
    double secs = dsc_now_s() - t0;
    if (ids)
        fclose(ids);
    dsc_stats_t st = {.struct_size = sizeof st};
    REQUIRE(dsc_loader_stats(l, &st) == 0);
    printf(
        "rank %u: %llu batches, %llu samples in %.2f s, %llu bad; requests %llu retries %llu "
        "failovers %llu slow_marks %llu hedges %llu checksum_failures %llu refetches %llu wire_mib "
        "%.1f stall %.1f%%\n",
        rank_id, (unsigned long long)batches, (unsigned long long)samples, secs,
        (unsigned long long)bad, (unsigned long long)st.requests, (unsigned long long)st.retries,
        (unsigned long long)st.failovers, (unsigned long long)st.slow_marks,
        (unsigned long long)st.hedges, (unsigned long long)st.checksum_failures,
        (unsigned long long)st.refetches, st.wire_bytes / 1048576.0, 100.0 * st.stall_fraction);
    if (expect_error != NULL) {
        CHECK(rc < 0 && rc != DSC_EOF && strcmp(dsc_err_name(rc), expect_error) == 0);
        dsc_batch_t *b;
        CHECK(dsc_loader_next(l, &b) == rc); /* the loader stays failed */
    } else {
        CHECK(rc == DSC_EOF);
    }
    CHECK(bad == 0);
    if (corrupt)
        CHECK(st.checksum_failures > 0);
    else
        CHECK(st.checksum_failures == 0);
    if (corrupt && expect_error == NULL)
        CHECK(st.failovers > 0);
    dsc_loader_destroy(l);
    testdata_free(&source);
    return TEST_DONE();
}

static int mode_owners(void) {
    dsc_members_t members = {0};
    int rc = dsc_members_resolve(servers, &members);
    if (rc < 0) {
        fprintf(stderr, "cluster_check: servers %s: %s\n", servers, dsc_strerror(rc));
        return 1;
    }
    for (uint32_t s = 0; s < shards; s++) {
        uint32_t owners[DSC_MAX_REPLICAS];
        int n = dsc_placement_owners(&members, dataset, s, replicas, owners);
        REQUIRE(n > 0);
        printf("shard %u:", s);
        for (int i = 0; i < n; i++)
            printf(" %s", members.addrs[owners[i]]);
        printf("\n");
    }
    dsc_members_free(&members);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: cluster_check epoch|owners --servers S --dataset N [...]\n");
        return 2;
    }
    const char *mode = argv[1];
    const testopt_t opts[] = {
        TESTOPT("--servers", &servers),
        TESTOPT("--dataset", &dataset),
        TESTOPT("--dir", &dir),
        TESTOPT("--ids", &ids_path),
        TESTOPT("--mark", &mark_path),
        TESTOPT("--mark-at", &mark_at),
        TESTOPT("--fallback", &fallback),
        TESTOPT("--batch", &batch),
        TESTOPT("--rank", &rank_id),
        TESTOPT("--world", &world),
        TESTOPT("--epochs", &epochs),
        TESTOPT("--replicas", &replicas),
        TESTOPT("--shards", &shards),
        TESTOPT("--timeout-ms", &timeout_ms),
        TESTOPT("--cache", &cache),
        TESTOPT("--inflight", &inflight),
        TESTOPT("--window", &window),
        TESTOPT("--corrupt", &corrupt),
        TESTOPT("--expect-error", &expect_error),
        TESTOPT("--no-verify", &no_verify),
        TESTOPT("--seed", &seed),
        TESTOPT("--slow-ms", &slow_ms),
    };
    if (testopt_parse("cluster_check", argc, argv, 2, opts, sizeof opts / sizeof opts[0]) != 0)
        return 2;
    REQUIRE(servers && dataset);
    if (!strcmp(mode, "owners"))
        return mode_owners();
    REQUIRE(dir != NULL);
    if (!strcmp(mode, "epoch"))
        return mode_epoch();
    fprintf(stderr, "cluster_check: unknown mode %s\n", mode);
    return 2;
}
