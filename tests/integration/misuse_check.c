/* misuse_check: a C loader as a user writes one, for test_loader_misuse.sh. Creates a loader from
 * the options given, reads --epochs epochs and says what happened: every log line at INFO and
 * above ("log warn: ..."), then "create failed: NAME: WHY", "next failed: NAME: WHY" (WHY:
 * dsc_loader_last_error) or "done: N batches, S samples".
 * usage: misuse_check --dataset N [--servers S] [--fallback DIR] [--batch B] [--rank R]
 *        [--world W] [--drop-last 0|1] [--epochs E] [--ignore-rank-env 0|1] [--job NAME]
 * Exit: 0 done, 3 create failed, 4 next failed, 2 usage. */
#include "dscache.h"
#include "testdata.h"

#include <stdio.h>
#include <string.h>

static void on_log(void *ctx, int level, const char *message) {
    (void)ctx;
    static const char *names[] = {"error", "warn", "info", "debug"};
    printf("log %s: %s\n", names[level < 0 ? 0 : level > 3 ? 3 : level], message);
    fflush(stdout);
}

int main(int argc, char **argv) {
    const char *servers = NULL, *dataset = NULL, *fallback = NULL, *job = NULL;
    uint32_t batch = 32, rank = 0, world = 1, epochs = 1;
    int drop_last = 0, ignore_rank_env = 0;
    const testopt_t opts[] = {
        TESTOPT("--servers", &servers),
        TESTOPT("--dataset", &dataset),
        TESTOPT("--fallback", &fallback),
        TESTOPT("--batch", &batch),
        TESTOPT("--rank", &rank),
        TESTOPT("--world", &world),
        TESTOPT("--drop-last", &drop_last),
        TESTOPT("--epochs", &epochs),
        TESTOPT("--job", &job),
        TESTOPT("--ignore-rank-env", &ignore_rank_env),
    };
    if (testopt_parse("misuse_check", argc, argv, 1, opts, sizeof opts / sizeof opts[0]) != 0 ||
        dataset == NULL)
        return 2;
    dsc_loader_options_t o;
    DSC_LOADER_OPTIONS_INIT(&o);
    o.servers = servers;
    o.dataset = dataset;
    o.fallback_path = fallback;
    o.batch_size = batch;
    o.rank = rank;
    o.world_size = world;
    o.drop_last = drop_last;
    o.ignore_rank_env = ignore_rank_env;
    o.job_name = job;
    o.timeout_ms = 2000;
    o.log_fn = on_log;
    o.log_level = DSC_LOG_INFO;
    char why[1024];
    dsc_loader_t *l = NULL;
    int rc = dsc_loader_create(&o, &l);
    if (rc < 0) {
        dsc_loader_last_error(NULL, why, sizeof why);
        printf("create failed: %s: %s\n", dsc_err_name(rc), why);
        return 3;
    }
    uint64_t batches = 0, samples = 0;
    for (uint32_t e = 0; e < epochs; e++) {
        dsc_loader_set_epoch(l, e);
        dsc_batch_t *b;
        while ((rc = dsc_loader_next(l, &b)) == 0) {
            batches++;
            samples += dsc_batch_samples(b);
        }
        if (rc != DSC_EOF) {
            dsc_loader_last_error(l, why, sizeof why);
            printf("next failed: %s: %s\n", dsc_err_name(rc), why);
            dsc_loader_destroy(l);
            return 4;
        }
    }
    dsc_loader_destroy(l);
    printf("done: %llu batches, %llu samples\n", (unsigned long long)batches,
           (unsigned long long)samples);
    return 0;
}
