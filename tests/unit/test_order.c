/* Local epoch order (plan.h): exactly once with the right padding for world sizes 1, 3, 8 and
 * 64, with and without drop_last; chunk locality; determinism; resume on the same and on other
 * world sizes (8->8, 8->4, 4->16, 8->4->16), mid-epoch and at epoch boundaries. */
#include "plan.h"
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

static dsc_manifest_shard_t shards[] = {
    {.id = 0, .samples = 1000, .chunk_samples = 64, .chunks = 16},
    {.id = 1, .samples = 37, .chunk_samples = 10, .chunks = 4},
    {.id = 2, .samples = 513, .chunk_samples = 100, .chunks = 6},
    {.id = 3, .samples = 256, .chunk_samples = 256, .chunks = 1},
    {.id = 4, .samples = 999, .chunk_samples = 7, .chunks = 143},
    {.id = 5, .samples = 4000, .chunk_samples = 50, .chunks = 80},
};
#define NSHARDS (sizeof shards / sizeof shards[0])
#define N 6805u

static dsc_manifest_t manifest = {.name = "t", .shard_count = NSHARDS, .shards = shards};
static uint32_t count[N];

static dsc_order_t *make(uint64_t seed, int shuffle, uint64_t epoch) {
    dsc_order_t *o = NULL;
    REQUIRE(dsc__order_create(&manifest, seed, shuffle, 0, &o) == 0);
    dsc__order_set_epoch(o, epoch);
    return o;
}

/* Runs steps [from, to) of every rank of lp, counting samples; returns the sum over ranks of
 * the distinct chunks each rank touched (what it fetches once per epoch). */
static uint64_t run(dsc_local_t *lp, uint64_t from, uint64_t to) {
    static unsigned char touched[4096];
    uint64_t chunks = 0;
    for (uint32_t r = 0; r < lp->world_size; r++) {
        memset(touched, 0, sizeof touched);
        for (uint64_t s = from; s < to && s < lp->steps; s++) {
            uint64_t first;
            uint32_t n;
            REQUIRE(dsc__local_step(lp, s, r, &first, &n) == 0);
            for (uint32_t k = 0; k < n; k++) {
                uint64_t id = dsc__local_at(lp, r, first + k);
                REQUIRE(id < N);
                count[id]++;
                dsc_sample_loc_t loc;
                REQUIRE(dsc__order_locate(lp->order, id, &loc) == 0);
                REQUIRE(loc.chunk < sizeof touched);
                chunks += !touched[loc.chunk];
                touched[loc.chunk] = 1;
            }
        }
    }
    return chunks;
}

/* Every sample seen once, `dup` extra times in all, none more than twice (padding). */
static void check_counts(uint64_t missing_ok, uint64_t dup, const char *what) {
    uint64_t missing = 0, extra = 0, more = 0;
    for (uint32_t i = 0; i < N; i++) {
        missing += count[i] == 0;
        extra += count[i] > 1 ? count[i] - 1 : 0;
        more += count[i] > 2;
    }
    if (missing != missing_ok || extra != dup || more != 0)
        fprintf(stderr, "%s: missing %llu (want %llu), extra %llu (want %llu), >2 %llu\n", what,
                (unsigned long long)missing, (unsigned long long)missing_ok,
                (unsigned long long)extra, (unsigned long long)dup, (unsigned long long)more);
    CHECK_EQ_INT(missing, missing_ok);
    CHECK_EQ_INT(extra, dup);
    CHECK_EQ_INT(more, 0);
}

static void test_feistel(void) {
    static unsigned char seen[70000];
    static const uint64_t sizes[] = {1, 2, 3, 4, 5, 7, 8, 17, 64, 100, 255, 256, 1000, 65537};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        uint64_t n = sizes[i], fixed = 0;
        memset(seen, 0, n);
        int ok = 1;
        for (uint64_t x = 0; x < n; x++) {
            uint64_t y = dsc__feistel_perm(0x1234 + n, n, x);
            if (y >= n || seen[y])
                ok = 0;
            else
                seen[y] = 1;
            fixed += y == x;
        }
        CHECK(ok);
        if (n >= 100)
            CHECK(fixed < n / 10); /* a shuffle, not the identity */
    }
    CHECK(dsc__feistel_perm(1, 1000, 5) != dsc__feistel_perm(2, 1000, 5) ||
          dsc__feistel_perm(1, 1000, 6) != dsc__feistel_perm(2, 1000, 6));
}

static void test_exactly_once(void) {
    static const uint32_t worlds[] = {1, 3, 8, 64};
    static const uint32_t batches[] = {1, 16, 64};
    dsc_order_t *o = make(7, 1, 2);
    for (size_t wi = 0; wi < 4; wi++)
        for (size_t bi = 0; bi < 3; bi++)
            for (int drop = 0; drop <= 1; drop++) {
                uint32_t w = worlds[wi], b = batches[bi];
                dsc_local_t lp;
                REQUIRE(dsc__local_init(&lp, o, 500, 1, NULL, 0, b, w, drop) == 0);
                CHECK_EQ_INT(lp.per_rank, drop ? N / w : (N + w - 1) / w);
                memset(count, 0, sizeof count);
                uint64_t chunks = run(&lp, 0, lp.steps);
                uint64_t per = lp.per_rank;
                if (drop) {
                    uint64_t taken = w * (per - per % b);
                    check_counts(N - taken, 0, "drop_last");
                } else {
                    check_counts(0, w * per - N, "padded");
                }
                /* Each rank reads a contiguous run of the chunk stream: the job touches at
                 * most every chunk once plus one shared edge chunk and one padding chunk per
                 * rank. */
                CHECK(chunks <= dsc__order_chunks(o) + 2u * w);
                if (w == 8 && b == 16 && !drop)
                    printf("world 8: %llu chunk fetches for %llu chunks\n",
                           (unsigned long long)chunks, (unsigned long long)dsc__order_chunks(o));
            }
    /* Shuffle off: one rank reads the dataset order. */
    dsc_order_t *plain = make(7, 0, 0);
    dsc_local_t lp;
    REQUIRE(dsc__local_init(&lp, plain, 500, 0, NULL, 0, 10, 1, 0) == 0);
    for (uint64_t t = 0; t < N; t++)
        if (dsc__local_at(&lp, 0, t) != t) {
            CHECK(!"shuffle off: dataset order");
            break;
        }
    dsc__order_destroy(plain);
    dsc__order_destroy(o);
}

static void test_determinism(void) {
    static uint64_t a[N], b[N];
    dsc_order_t *o1 = make(3, 1, 5), *o2 = make(3, 1, 5), *o3 = make(3, 1, 6);
    dsc_local_t l1, l2, l3;
    REQUIRE(dsc__local_init(&l1, o1, 300, 1, NULL, 0, 8, 3, 0) == 0);
    REQUIRE(dsc__local_init(&l2, o2, 300, 1, NULL, 0, 8, 3, 0) == 0);
    REQUIRE(dsc__local_init(&l3, o3, 300, 1, NULL, 0, 8, 3, 0) == 0);
    uint64_t same = 0, diff_epoch = 0, in_place = 0;
    for (uint64_t t = 0; t < l1.per_rank; t++) {
        a[t] = dsc__local_at(&l1, 1, t);
        b[t] = dsc__local_at(&l2, 1, t);
        same += a[t] == b[t];
        diff_epoch += a[t] != dsc__local_at(&l3, 1, t);
        in_place += t > 0 && a[t] == a[t - 1] + 1;
    }
    CHECK_EQ_INT(same, l1.per_rank);
    CHECK(diff_epoch > l1.per_rank / 2);
    CHECK(in_place < l1.per_rank / 4); /* shuffled inside the windows */
    dsc__order_destroy(o1);
    dsc__order_destroy(o2);
    dsc__order_destroy(o3);
}

/* Runs k steps at w1 (batch b1), then the rest at w2 (batch b2), optionally through a middle
 * segment (w_mid, k_mid steps, batch b1), and checks exactly once plus padding. */
static void resume_case(uint32_t w1, uint64_t k1, uint32_t w_mid, uint64_t k_mid, uint32_t w2,
                        uint32_t b1, uint32_t b2) {
    dsc_order_t *o = make(11, 1, 1);
    dsc_local_t first, mid, last;
    memset(count, 0, sizeof count);
    REQUIRE(dsc__local_init(&first, o, 700, 1, NULL, 0, b1, w1, 0) == 0);
    REQUIRE(k1 <= first.steps);
    run(&first, 0, k1);
    dsc_plan_seg_t hist[2] = {{w1, b1, k1}, {w_mid, b1, k_mid}};
    uint32_t nhist = k1 > 0;
    if (k1 == first.steps) { /* saved at the epoch's end: nothing left */
        check_counts(0, w1 * first.per_rank - N, "complete");
        dsc__order_destroy(o);
        return;
    }
    if (w1 == w2 && w_mid == 0 && b1 == b2) {
        /* Same world size: the same segment continues where it was. */
        run(&first, k1, first.steps);
        check_counts(0, w1 * first.per_rank - N, "same world");
        dsc__order_destroy(o);
        return;
    }
    if (w_mid) {
        REQUIRE(dsc__local_init(&mid, o, 700, 1, hist, nhist, b1, w_mid, 0) == 0);
        REQUIRE(k_mid < mid.steps);
        run(&mid, 0, k_mid);
        nhist++;
    }
    const dsc_plan_seg_t *h = k1 > 0 ? hist : hist + 1;
    REQUIRE(dsc__local_init(&last, o, 700, 1, h, nhist, b2, w2, 0) == 0);
    run(&last, 0, last.steps);
    uint64_t rest = last.lv[last.levels - 1].len;
    char what[64];
    snprintf(what, sizeof what, "%u@%llu -> %u -> %u", w1, (unsigned long long)k1, w_mid, w2);
    check_counts(0, w2 * last.per_rank - rest, what);
    dsc__order_destroy(o);
}

static void test_resume(void) {
    dsc_order_t *o = make(11, 1, 1);
    dsc_local_t lp;
    REQUIRE(dsc__local_init(&lp, o, 700, 1, NULL, 0, 16, 8, 0) == 0);
    uint64_t steps8 = lp.steps;
    REQUIRE(dsc__local_init(&lp, o, 700, 1, NULL, 0, 16, 4, 0) == 0);
    uint64_t steps4 = lp.steps;
    dsc__order_destroy(o);
    const uint64_t k8[] = {0, 1, steps8 / 2, steps8 - 1, steps8};
    for (int i = 0; i < 5; i++) {
        resume_case(8, k8[i], 0, 0, 8, 16, 16); /* 8 -> 8 */
        resume_case(8, k8[i], 0, 0, 4, 16, 16); /* 8 -> 4 */
    }
    const uint64_t k4[] = {0, 1, steps4 / 3, steps4 - 1, steps4};
    for (int i = 0; i < 5; i++) {
        resume_case(4, k4[i], 0, 0, 16, 16, 16); /* 4 -> 16 */
        resume_case(4, k4[i], 0, 0, 2, 16, 16);  /* 4 -> 2 */
    }
    resume_case(8, 5, 4, 7, 16, 16, 16); /* two resizes in one epoch */
    resume_case(8, 5, 0, 0, 8, 16, 32);  /* other batch size: a new segment */
    resume_case(3, 9, 64, 2, 1, 16, 5);
    /* A history segment that consumed more than every rank's share is refused. */
    o = make(11, 1, 1);
    dsc_plan_seg_t bad = {8, 16, N};
    CHECK_EQ_INT(dsc__local_init(&lp, o, 700, 1, &bad, 1, 16, 4, 0), DSC_EINVAL);
    dsc_plan_seg_t zero = {8, 16, 0};
    CHECK_EQ_INT(dsc__local_init(&lp, o, 700, 1, &zero, 1, 16, 4, 0), DSC_EINVAL);
    dsc_plan_seg_t many[DSC_PLAN_MAX_SEGS];
    for (int i = 0; i < DSC_PLAN_MAX_SEGS; i++)
        many[i] = (dsc_plan_seg_t){2, 1, 1};
    CHECK_EQ_INT(dsc__local_init(&lp, o, 700, 1, many, DSC_PLAN_MAX_SEGS, 16, 4, 0), DSC_ERANGE);
    REQUIRE(dsc__local_init(&lp, o, 700, 1, many, DSC_PLAN_MAX_SEGS - 1, 16, 4, 0) == 0);
    memset(count, 0, sizeof count);
    run(&lp, 0, lp.steps);
    /* The history's samples are not replayed; the rest once, plus the padding. */
    check_counts(2 * (DSC_PLAN_MAX_SEGS - 1), 4 * lp.per_rank - (N - 2 * (DSC_PLAN_MAX_SEGS - 1)),
                 "7 resizes");
    dsc__order_destroy(o);
}

int main(void) {
    test_feistel();
    test_exactly_once();
    test_determinism();
    test_resume();
    return TEST_DONE();
}
