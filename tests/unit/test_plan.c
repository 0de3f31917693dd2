/* Epoch plan: order is a permutation, seeded, windowed; rank split is exactly-once, resumable
 * and elastic across world sizes. */
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
};
#define NSHARDS (sizeof shards / sizeof shards[0])
#define N 2805u

static dsc_manifest_t manifest = {.name = "t", .shard_count = NSHARDS, .shards = shards};

static dsc_order_t *make(uint64_t seed, int shuffle, uint32_t window, uint64_t epoch) {
    dsc_order_t *o = NULL;
    REQUIRE(dsc__order_create(&manifest, seed, shuffle, window, &o) == 0);
    dsc__order_set_epoch(o, epoch);
    return o;
}

static void order_values(dsc_order_t *o, uint64_t *g) {
    for (uint64_t i = 0; i < N; i++)
        g[i] = dsc__order_at(o, i);
}

static int is_permutation(const uint64_t *g, uint64_t n) {
    unsigned char *seen = calloc(n, 1);
    int ok = 1;
    for (uint64_t i = 0; i < n; i++) {
        if (g[i] >= n || seen[g[i]])
            ok = 0;
        else
            seen[g[i]] = 1;
    }
    free(seen);
    return ok;
}

static void test_order(void) {
    static uint64_t g[N], h[N], w1[N];
    dsc_order_t *o = make(1, 0, 0, 0);
    CHECK_EQ_INT(dsc__order_samples(o), N);
    CHECK_EQ_INT(dsc__order_chunks(o), 16 + 4 + 6 + 1 + 143);
    order_values(o, g);
    for (uint64_t i = 0; i < N; i++)
        if (g[i] != i) {
            CHECK(!"shuffle=0 is the dataset order");
            break;
        }
    dsc__order_destroy(o);

    o = make(42, 1, 100, 3);
    order_values(o, g);
    CHECK(is_permutation(g, N));
    /* Random access in any order gives the same values as a sequential walk. */
    for (uint64_t i = N; i-- > 0;)
        if (dsc__order_at(o, i) != g[i]) {
            CHECK(!"random access equals sequential");
            break;
        }
    CHECK(dsc__order_at(o, N + 5) == g[5]); /* wraps */
    dsc__order_destroy(o);

    o = make(42, 1, 100, 3);
    order_values(o, h);
    CHECK(memcmp(g, h, sizeof g) == 0); /* same seed + epoch: same order */
    dsc__order_destroy(o);
    o = make(43, 1, 100, 3);
    order_values(o, h);
    CHECK(memcmp(g, h, sizeof g) != 0); /* other seed */
    dsc__order_destroy(o);
    o = make(42, 1, 100, 4);
    order_values(o, h);
    CHECK(memcmp(g, h, sizeof g) != 0); /* other epoch */
    dsc__order_set_epoch(o, 3);         /* back to epoch 3: same again */
    order_values(o, h);
    CHECK(memcmp(g, h, sizeof g) == 0);
    dsc__order_destroy(o);

    /* window 1: no sample shuffle, so G is whole chunks back to back, each in order. */
    o = make(42, 1, 1, 3);
    order_values(o, w1);
    CHECK(is_permutation(w1, N));
    uint64_t i = 0, moved = 0;
    while (i < N) {
        dsc_sample_loc_t loc;
        REQUIRE(dsc__order_locate(o, w1[i], &loc) == 0);
        CHECK_EQ_INT(loc.in_chunk, 0); /* a chunk starts here */
        for (uint32_t k = 0; k < loc.chunk_samples; k++)
            CHECK(w1[i + k] == w1[i] + k);
        if (w1[i] != i)
            moved++;
        i += loc.chunk_samples;
    }
    CHECK(i == N);
    CHECK(moved > 0); /* chunks were shuffled */
    dsc__order_destroy(o);
    /* Windowed order: each window holds the same set of samples as the unwindowed stream. */
    for (uint64_t w = 0; w * 100 < N; w++) {
        uint64_t end = (w + 1) * 100 < N ? (w + 1) * 100 : N;
        static uint64_t a[100], b[100];
        memcpy(a, g + w * 100, (end - w * 100) * 8);
        memcpy(b, w1 + w * 100, (end - w * 100) * 8);
        uint64_t sum_a = 0, sum_b = 0, xa = 0, xb = 0, diff = 0;
        for (uint64_t k = 0; k < end - w * 100; k++) {
            sum_a += a[k];
            sum_b += b[k];
            xa ^= a[k] * 0x9E3779B97F4A7C15ULL;
            xb ^= b[k] * 0x9E3779B97F4A7C15ULL;
            diff += a[k] != b[k];
        }
        CHECK(sum_a == sum_b && xa == xb);
        if (end - w * 100 > 10)
            CHECK(diff > 0); /* samples moved inside the window */
    }
}

static void test_locate(void) {
    dsc_order_t *o = make(0, 1, 0, 0);
    dsc_sample_loc_t loc;
    REQUIRE(dsc__order_locate(o, 0, &loc) == 0);
    CHECK(loc.shard == 0 && loc.shard_chunk == 0 && loc.in_chunk == 0 && loc.chunk == 0);
    REQUIRE(dsc__order_locate(o, 1000 + 36, &loc) == 0); /* last sample of shard 1 */
    CHECK(loc.shard == 1 && loc.shard_chunk == 3 && loc.in_chunk == 6 && loc.chunk_samples == 7);
    CHECK_EQ_INT(loc.chunk, 16 + 3);
    REQUIRE(dsc__order_locate(o, N - 1, &loc) == 0); /* 999 = 142*7 + 5 */
    CHECK(loc.shard == 4 && loc.shard_chunk == 142 && loc.in_chunk == 4 && loc.chunk_samples == 5);
    CHECK(dsc__order_locate(o, N, &loc) == DSC_ERANGE);
    dsc__order_destroy(o);

    /* Bad manifests are rejected. */
    dsc_manifest_shard_t bad = {.samples = 10, .chunk_samples = 3, .chunks = 3};
    dsc_manifest_t m = {.shard_count = 1, .shards = &bad};
    CHECK(dsc__order_create(&m, 0, 1, 0, &o) == DSC_EBADMANIFEST);
    bad.chunks = 4;
    bad.chunk_samples = 0;
    CHECK(dsc__order_create(&m, 0, 1, 0, &o) == DSC_EBADMANIFEST);
    m.shard_count = 0;
    CHECK(dsc__order_create(&m, 0, 1, 0, &o) == DSC_EBADMANIFEST);
}

/* Runs ranks 0..world-1 from position `start` for `max_steps` steps (or all), counting each
 * sample seen in `count`. Returns the samples seen; checks batch sizes on the way. */
static uint64_t run_ranks(dsc_order_t *o, uint64_t start, uint32_t batch, uint32_t world,
                          int drop_last, uint64_t max_steps, uint32_t *count) {
    dsc_split_t sp;
    REQUIRE(dsc__split_init(&sp, N, start, batch, world, drop_last) == 0);
    uint64_t seen = 0;
    uint64_t steps = sp.steps < max_steps ? sp.steps : max_steps;
    for (uint32_t r = 0; r < world; r++) {
        for (uint64_t s = 0; s < steps; s++) {
            uint64_t first;
            uint32_t n;
            REQUIRE(dsc__split_step(&sp, s, r, &first, &n) == 0);
            if (s + 1 < sp.steps || drop_last)
                CHECK_EQ_INT(n, batch);
            CHECK(n >= 1 && n <= batch);
            for (uint32_t k = 0; k < n; k++)
                count[dsc__order_at(o, first + k)]++;
            seen += n;
        }
        uint64_t first;
        uint32_t n;
        CHECK(dsc__split_step(&sp, sp.steps, r, &first, &n) == DSC_ERANGE);
    }
    return seen;
}

static void test_split_exactly_once(void) {
    static const uint32_t worlds[] = {1, 3, 8};
    static const uint32_t batches[] = {1, 7, 32};
    dsc_order_t *o = make(7, 1, 256, 1);
    static uint32_t count[N];
    for (size_t wi = 0; wi < 3; wi++)
        for (size_t bi = 0; bi < 3; bi++)
            for (int drop = 0; drop <= 1; drop++) {
                uint32_t w = worlds[wi], b = batches[bi];
                memset(count, 0, sizeof count);
                uint64_t seen = run_ranks(o, 0, b, w, drop, UINT64_MAX, count);
                dsc_split_t sp;
                REQUIRE(dsc__split_init(&sp, N, 0, b, w, drop) == 0);
                uint64_t once = 0, twice = 0, more = 0;
                for (uint64_t i = 0; i < N; i++) {
                    once += count[i] == 1;
                    twice += count[i] == 2;
                    more += count[i] > 2;
                }
                CHECK(more == 0);
                if (drop) {
                    CHECK(twice == 0);
                    CHECK_EQ_INT(seen, sp.steps * b * w);
                    CHECK(N - seen < (uint64_t)b * w); /* only a tail is dropped */
                    /* The samples seen are exactly the prefix of G. */
                    for (uint64_t p = 0; p < seen; p++)
                        CHECK(count[dsc__order_at(o, p)] == 1);
                } else {
                    uint64_t pad = (w - N % w) % w;
                    CHECK_EQ_INT(seen, N + pad);
                    CHECK_EQ_INT(once + twice, N); /* every sample at least once */
                    CHECK_EQ_INT(twice, pad);
                    for (uint64_t p = 0; p < pad; p++) /* padding is G's start */
                        CHECK(count[dsc__order_at(o, p)] == 2);
                    CHECK_EQ_INT(sp.per_rank, (N + w - 1) / w);
                }
            }
    dsc__order_destroy(o);
}

static void test_resume(void) {
    dsc_order_t *o = make(9, 1, 512, 2);
    const uint32_t b = 16, w = 3;
    dsc_split_t full;
    REQUIRE(dsc__split_init(&full, N, 0, b, w, 0) == 0);
    static const uint64_t points[] = {0, 1, 5, 20, 58};
    for (size_t i = 0; i < 5; i++) {
        uint64_t k = points[i];
        REQUIRE(k <= full.steps);
        dsc_split_t rest;
        REQUIRE(dsc__split_init(&rest, N, dsc__split_position(&full, k), b, w, 0) == 0);
        CHECK_EQ_INT(rest.steps, full.steps - k);
        for (uint64_t s = 0; s < rest.steps; s++)
            for (uint32_t r = 0; r < w; r++) {
                uint64_t f1, f2;
                uint32_t n1, n2;
                REQUIRE(dsc__split_step(&full, k + s, r, &f1, &n1) == 0);
                REQUIRE(dsc__split_step(&rest, s, r, &f2, &n2) == 0);
                CHECK(f1 == f2 && n1 == n2);
            }
    }
    CHECK_EQ_INT(dsc__split_position(&full, full.steps), N);
    dsc_split_t done;
    REQUIRE(dsc__split_init(&done, N, N, b, w, 0) == 0);
    CHECK_EQ_INT(done.steps, 0);
    CHECK(dsc__split_init(&done, N, N + 1, b, w, 0) == DSC_EINVAL);
    CHECK(dsc__split_init(&done, N, 0, 0, w, 0) == DSC_EINVAL);
    CHECK(dsc__split_init(&done, N, 0, b, 0, 0) == DSC_EINVAL);
    dsc__order_destroy(o);
}

static void test_elastic(void) {
    dsc_order_t *o = make(11, 1, 300, 5);
    static uint32_t count[N];
    static const uint32_t targets[] = {4, 16};
    for (int drop = 0; drop <= 1; drop++)
        for (size_t t = 0; t < 2; t++) {
            const uint32_t b = 8;
            memset(count, 0, sizeof count);
            uint64_t k = 13;
            uint64_t seen = run_ranks(o, 0, b, 8, drop, k, count);
            dsc_split_t first;
            REQUIRE(dsc__split_init(&first, N, 0, b, 8, drop) == 0);
            uint64_t pos = dsc__split_position(&first, k);
            CHECK_EQ_INT(pos, k * b * 8);
            CHECK_EQ_INT(seen, pos);
            uint32_t w = targets[t];
            seen += run_ranks(o, pos, b, w, drop, UINT64_MAX, count);
            uint64_t dup = 0, missing = 0;
            for (uint64_t i = 0; i < N; i++) {
                dup += count[i] > 1 ? count[i] - 1 : 0;
                missing += count[i] == 0;
            }
            if (drop) {
                CHECK(dup == 0);
                CHECK(missing < (uint64_t)b * w);
                CHECK_EQ_INT(seen + missing, N);
            } else {
                CHECK(missing == 0);
                CHECK_EQ_INT(dup, (w - (N - pos) % w) % w);
            }
        }
    dsc__order_destroy(o);
}

static void test_rng(void) {
    uint64_t s = 1, hist[5] = {0};
    for (int i = 0; i < 50000; i++)
        hist[dsc__rng_below(&s, 5)]++;
    for (int i = 0; i < 5; i++)
        CHECK(hist[i] > 9000 && hist[i] < 11000);
    CHECK(dsc__rng_below(&s, 1) == 0);
}

int main(void) {
    test_rng();
    test_order();
    test_locate();
    test_split_exactly_once();
    test_resume();
    test_elastic();
    return TEST_DONE();
}
