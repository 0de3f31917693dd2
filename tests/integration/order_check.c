/* The caller's order (DSC_ORDER_CALLER) against a real server, driven by
 * tests/integration/test_loader_caller.sh: batches come out exactly as pushed (indices, batch
 * boundaries, step numbers), byte-equal to the shard files, over two epochs of different orders
 * pushed a batch ahead at a time within the room the loader gives; a state saved mid-epoch
 * resumes in a new loader that is given the same order again (the consumed prefix is skipped and
 * checked, another order is refused); every bad input gets its error code and a log line naming
 * the culprit.
 * usage: order_check --servers S --dataset NAME --dir DATASET_DIR [--batch B] [--ahead A]
 *        [--slow-ms MS] [--epochs E] */
#include "dscache.h"
#include "testdata.h"

#include "testlib.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *servers, *dataset, *dir;
static uint32_t batch = 16, ahead = 0, epochs = 2;
static double slow_ms = 0;
static testdata_t source;

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char last_error[512];
static void on_log(void *ctx, int level, const char *message) {
    (void)ctx;
    pthread_mutex_lock(&log_lock);
    if (level == DSC_LOG_ERROR)
        snprintf(last_error, sizeof last_error, "%s", message);
    pthread_mutex_unlock(&log_lock);
}

static int error_says(const char *what) {
    pthread_mutex_lock(&log_lock);
    int yes = strstr(last_error, what) != NULL;
    if (!yes)
        fprintf(stderr, "last ERROR line \"%s\" does not say \"%s\"\n", last_error, what);
    pthread_mutex_unlock(&log_lock);
    return yes;
}

static void options(dsc_loader_options_t *o, int order) {
    DSC_LOADER_OPTIONS_INIT(o);
    o->servers = servers;
    o->dataset = dataset;
    o->batch_size = batch;
    o->order = order;
    o->order_ahead = ahead;
    o->timeout_ms = 3000;
    o->log_fn = on_log;
    o->log_level = DSC_LOG_WARN;
}

static dsc_loader_t *open_caller(void) {
    dsc_loader_options_t o;
    options(&o, DSC_ORDER_CALLER);
    dsc_loader_t *l = NULL;
    int rc = dsc_loader_create(&o, &l);
    if (rc < 0) {
        fprintf(stderr, "dsc_loader_create: %s (%s)\n", dsc_strerror(rc), dsc_err_name(rc));
        exit(1);
    }
    return l;
}

/* One epoch's order: batches of 1 .. batch indices (most full), a random permutation of the
 * dataset with some indices repeated, as a sampler may do. */
typedef struct order {
    uint64_t *ids;
    uint32_t *sizes;
    uint64_t total, batches;
} order_t;

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void make_order(order_t *o, uint64_t seed) {
    uint64_t n = source.samples, extra = n / 10;
    o->total = n + extra;
    o->ids = malloc(o->total * sizeof(uint64_t));
    o->sizes = malloc(o->total * sizeof(uint32_t));
    REQUIRE(o->ids && o->sizes);
    uint64_t s = seed;
    for (uint64_t i = 0; i < n; i++)
        o->ids[i] = i;
    for (uint64_t i = n - 1; i > 0; i--) {
        uint64_t j = rng_next(&s) % (i + 1), t = o->ids[i];
        o->ids[i] = o->ids[j];
        o->ids[j] = t;
    }
    for (uint64_t i = n; i < o->total; i++)
        o->ids[i] = rng_next(&s) % n;
    o->batches = 0;
    for (uint64_t at = 0; at < o->total; o->batches++) {
        uint32_t size = rng_next(&s) % 4 == 0 ? 1 + (uint32_t)(rng_next(&s) % batch) : batch;
        if (size > o->total - at)
            size = (uint32_t)(o->total - at);
        o->sizes[o->batches] = size;
        at += size;
    }
}

/* Pushes batches of o from *pushed (the batch count pushed so far, *at its first index) while
 * the loader has room, then the end mark. Returns the room left or an error. */
static int push_ahead(dsc_loader_t *l, const order_t *o, uint64_t *pushed, uint64_t *at,
                      int *ended) {
    int room = dsc_loader_order_room(l);
    while (room > 0 && !*ended) {
        if (*pushed == o->batches) {
            room = dsc_loader_push_order(l, NULL, 0, DSC_PUSH_END);
            *ended = room >= 0;
            break;
        }
        room = dsc_loader_push_order(l, o->ids + *at, o->sizes[*pushed], 0);
        if (room < 0)
            return room;
        *at += o->sizes[(*pushed)++];
    }
    return room;
}

/* Runs the rest of an epoch of o on l from batch `from` (its first index at `first`), pushing
 * ahead as it goes, stopping after `stop` batches (UINT64_MAX: to the end); checks every batch
 * against o and the source. Returns the batches received. */
static uint64_t run_epoch(dsc_loader_t *l, const order_t *o, uint64_t from, uint64_t first,
                          uint64_t stop, uint64_t step_base) {
    uint64_t pushed = 0, at = 0, got = 0, want_at = first;
    int ended = 0;
    for (uint64_t b = from;; b++) {
        int room = push_ahead(l, o, &pushed, &at, &ended);
        if (room < 0) {
            fprintf(stderr, "push_order: %s\n", dsc_strerror(room));
            CHECK(room >= 0);
            return got;
        }
        if (got == stop)
            return got;
        dsc_batch_t *bt;
        int rc = dsc_loader_next(l, &bt);
        if (b == o->batches) {
            CHECK_EQ_INT(rc, DSC_EOF);
            return got;
        }
        if (rc < 0) {
            fprintf(stderr, "next at batch %llu: %s\n", (unsigned long long)b, dsc_strerror(rc));
            CHECK(rc == 0);
            return got;
        }
        uint32_t n = dsc_batch_samples(bt);
        CHECK_EQ_INT(n, o->sizes[b]);
        CHECK_EQ_INT(dsc_batch_step(bt), step_base + got);
        if (n == o->sizes[b])
            CHECK(memcmp(dsc_batch_indices(bt), o->ids + want_at, n * sizeof(uint64_t)) == 0);
        CHECK(testdata_batch_mismatches(&source, bt, dsc_loader_field_count(l)) == 0);
        want_at += o->sizes[b];
        got++;
        if (slow_ms > 0)
            usleep((useconds_t)(slow_ms * 1000));
    }
}

static uint64_t first_of(const order_t *o, uint64_t b) {
    uint64_t at = 0;
    for (uint64_t i = 0; i < b; i++)
        at += o->sizes[i];
    return at;
}

/* Every bad input: its code, a log line naming the culprit, the loader still usable. */
static void bad_inputs(void) {
    dsc_loader_options_t o;
    dsc_loader_t *l = NULL;
    options(&o, DSC_ORDER_CALLER);
    o.world_size = 2;
    o.rank = 1;
    CHECK_EQ_INT(dsc_loader_create(&o, &l), DSC_EINVAL);
    char why[512];
    dsc_loader_last_error(NULL, why, sizeof why);
    CHECK(strstr(why, "world_size must be 1") != NULL);
    options(&o, DSC_ORDER_CALLER);
    o.drop_last = 1;
    CHECK_EQ_INT(dsc_loader_create(&o, &l), DSC_EINVAL);
    options(&o, DSC_ORDER_CALLER);
    o.shuffle_window = 64;
    CHECK_EQ_INT(dsc_loader_create(&o, &l), DSC_EINVAL);
    options(&o, DSC_ORDER_CALLER);
    o.epochs = 1;
    CHECK_EQ_INT(dsc_loader_create(&o, &l), DSC_EINVAL);
    options(&o, DSC_ORDER_CALLER);
    o.order_ahead = (1u << 20) / batch + 1;
    CHECK_EQ_INT(dsc_loader_create(&o, &l), DSC_EINVAL);

    l = open_caller();
    CHECK_EQ_INT(dsc_loader_len(l), 0);
    dsc_batch_t *b;
    CHECK_EQ_INT(dsc_loader_next(l, &b), DSC_EAGAIN); /* nothing pushed: no failure */
    uint64_t ids[2] = {0, source.samples};
    CHECK_EQ_INT(dsc_loader_push_order(l, ids, 2, 0), DSC_ERANGE);
    char want[128];
    snprintf(want, sizeof want, "index %llu (position 1 of epoch 0",
             (unsigned long long)source.samples);
    CHECK(error_says(want));
    snprintf(want, sizeof want, "has %llu samples", (unsigned long long)source.samples);
    CHECK(error_says(want));
    ids[1] = UINT64_MAX; /* a negative int64 seen as unsigned */
    CHECK_EQ_INT(dsc_loader_push_order(l, ids, 2, 0), DSC_ERANGE);
    CHECK_EQ_INT(dsc_loader_push_order(l, ids, 0, 0), DSC_EINVAL);
    CHECK_EQ_INT(dsc_loader_push_order(l, NULL, 1, 0), DSC_EINVAL);
    CHECK_EQ_INT(dsc_loader_push_order(l, ids, 1, 8), DSC_EINVAL);
    uint64_t *many = calloc(batch + 1, sizeof(uint64_t));
    REQUIRE(many != NULL);
    CHECK_EQ_INT(dsc_loader_push_order(l, many, batch + 1, 0), DSC_EINVAL);
    /* Filled to the room: one more is DSC_EAGAIN, then one next() makes room for one. */
    int room = dsc_loader_order_room(l);
    CHECK(room >= 1);
    for (int i = 0; i < room; i++)
        CHECK_EQ_INT(dsc_loader_push_order(l, many, 1, 0), room - 1 - i);
    CHECK_EQ_INT(dsc_loader_push_order(l, many, 1, 0), DSC_EAGAIN);
    CHECK_EQ_INT(dsc_loader_next(l, &b), 0);
    CHECK_EQ_INT(dsc_batch_samples(b), 1);
    CHECK_EQ_INT(dsc_loader_order_room(l), 1);
    /* A caller state into a loader of the loader's own order, and back. */
    uint8_t st[DSC_STATE_MAX_BYTES];
    int sn = dsc_loader_state_save(l, st, sizeof st);
    CHECK_EQ_INT(sn, 64);
    options(&o, DSC_ORDER_LOCAL);
    dsc_loader_t *own = NULL;
    REQUIRE(dsc_loader_create(&o, &own) == 0);
    CHECK_EQ_INT(dsc_loader_state_load(own, st, (size_t)sn), DSC_EBADSTATE);
    CHECK(error_says("saved with the caller's order, this loader has order local"));
    CHECK_EQ_INT(dsc_loader_push_order(own, ids, 1, 0), DSC_EINVAL);
    CHECK(error_says("plans its own order"));
    CHECK_EQ_INT(dsc_loader_order_room(own), 0);
    int on = dsc_loader_state_save(own, st, sizeof st);
    CHECK_EQ_INT(dsc_loader_state_load(l, st, (size_t)on), DSC_EBADSTATE);
    CHECK(error_says("this loader has the caller's order"));
    dsc_loader_destroy(own);
    /* set_epoch drops what was pushed: the full room again. */
    CHECK_EQ_INT(dsc_loader_set_epoch(l, 3), 0);
    CHECK_EQ_INT(dsc_loader_order_room(l), room);
    CHECK_EQ_INT(dsc_loader_next(l, &b), DSC_EAGAIN);
    free(many);
    dsc_loader_destroy(l);
}

int main(int argc, char **argv) {
    testopt_t opts[] = {
        TESTOPT("--servers", &servers), TESTOPT("--dataset", &dataset),
        TESTOPT("--dir", &dir),         TESTOPT("--batch", &batch),
        TESTOPT("--ahead", &ahead),     TESTOPT("--epochs", &epochs),
        TESTOPT("--slow-ms", &slow_ms),
    };
    if (testopt_parse("order_check", argc, argv, 1, opts, sizeof opts / sizeof opts[0]) != 0 ||
        !servers || !dataset || !dir) {
        fprintf(stderr, "usage: order_check --servers S --dataset NAME --dir DIR [--batch B] "
                        "[--ahead A] [--slow-ms MS] [--epochs E]\n");
        return 2;
    }
    REQUIRE(testdata_load(dir, 1, &source) == 0);

    /* Epochs of different orders, batch for batch, with the step numbers. */
    dsc_loader_t *l = open_caller();
    order_t ord[2];
    make_order(&ord[0], 11);
    make_order(&ord[1], 12);
    for (uint32_t e = 0; e < epochs; e++) {
        uint64_t got = run_epoch(l, &ord[e % 2], 0, 0, UINT64_MAX, 0);
        CHECK_EQ_INT(got, ord[e % 2].batches);
        dsc_stats_t s = {.struct_size = sizeof s};
        CHECK(dsc_loader_stats(l, &s) == 0 && s.epoch == e + 1);
    }
    printf("%u epochs of %llu batches as pushed\n", epochs, (unsigned long long)ord[0].batches);

    /* Resume: stop a third into epoch 1 of order 1, save, a new loader given the same order
     * again continues exactly; the saved state in a loader given another order is refused. */
    CHECK_EQ_INT(dsc_loader_set_epoch(l, 1), 0);
    uint64_t stop = ord[1].batches / 3;
    CHECK_EQ_INT(run_epoch(l, &ord[1], 0, 0, stop, 0), stop);
    uint8_t st[DSC_STATE_MAX_BYTES];
    int sn = dsc_loader_state_save(l, st, sizeof st);
    REQUIRE(sn > 0);
    dsc_loader_destroy(l);
    l = open_caller();
    CHECK_EQ_INT(dsc_loader_state_load(l, st, (size_t)sn), 0);
    uint64_t rest = run_epoch(l, &ord[1], stop, first_of(&ord[1], stop), UINT64_MAX, stop);
    CHECK_EQ_INT(rest, ord[1].batches - stop);
    dsc_stats_t s = {.struct_size = sizeof s};
    CHECK(dsc_loader_stats(l, &s) == 0 && s.epoch == 2);
    printf("resumed after %llu of %llu batches: the rest exactly\n", (unsigned long long)stop,
           (unsigned long long)ord[1].batches);
    CHECK_EQ_INT(dsc_loader_state_load(l, st, (size_t)sn), 0);
    uint64_t pushed = 0, at = 0;
    int ended = 0, rc = 0;
    while (rc >= 0 && !ended && pushed < ord[0].batches)
        rc = push_ahead(l, &ord[0], &pushed, &at, &ended);
    CHECK_EQ_INT(rc, DSC_EBADSTATE);
    CHECK(error_says("not the one the state was saved with"));
    dsc_loader_destroy(l);

    bad_inputs();
    free(ord[0].ids);
    free(ord[0].sizes);
    free(ord[1].ids);
    free(ord[1].sizes);
    testdata_free(&source);
    return TEST_DONE();
}
