/* The loader's RDMA slab allocator (client/lib/source/rdma_slab.c) and its sizing
 * (dsc__rdma_slab_bytes): block-aligned regions that never overlap, first fit across fragments,
 * callers holding nothing served first come first served while callers holding regions are
 * refused, time-out and cancel of a wait, and threads that pipeline regions like the I/O threads
 * do finishing without deadlock (run under TSan in the sanitizer pass). */
#include "rdma_slab.h"
#include "source_rdma.h"
#include "testlib.h"
#include "util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define MIB (UINT64_C(1) << 20)
#define BLOCK DSC_RDMA_SLAB_BLOCK

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static uint64_t used(dsc_rdma_slab_t *s) {
    dsc_rdma_slab_stats_t st;
    dsc__rdma_slab_stats(s, &st);
    return st.used_bytes;
}

static void test_basics(void) {
    dsc_rdma_slab_t s;
    CHECK_EQ_INT(dsc__rdma_slab_init(&s, 0), DSC_EINVAL);
    REQUIRE(dsc__rdma_slab_init(&s, 1) == 0);
    CHECK_EQ_INT(s.bytes, DSC_RDMA_SLAB_ALIGN); /* rounded up to one hugetlb page */
    CHECK(s.hugetlb == 0 || s.hugetlb == 1);
    printf("slab of %zu bytes, %s\n", s.bytes, s.hugetlb ? "hugetlb pages" : "normal pages");
    dsc_rdma_slab_region_t a, b, c;
    REQUIRE(dsc__rdma_slab_try_alloc(&s, 1, &a) == 0);
    REQUIRE(dsc__rdma_slab_try_alloc(&s, BLOCK + 1, &b) == 0);
    REQUIRE(dsc__rdma_slab_alloc_wait(&s, 3 * BLOCK, dsc_now_s() + 1, NULL, &c) == 0);
    CHECK_EQ_INT(a.blocks, 1);
    CHECK_EQ_INT(b.blocks, 2);
    CHECK_EQ_INT(c.blocks, 3);
    CHECK(a.offset % BLOCK == 0 && b.offset % BLOCK == 0 && c.offset % BLOCK == 0);
    CHECK(a.offset + BLOCK <= b.offset || b.offset + 2 * BLOCK <= a.offset);
    CHECK(b.offset + 2 * BLOCK <= c.offset || c.offset + 3 * BLOCK <= b.offset);
    CHECK_EQ_INT(used(&s), 6 * BLOCK);
    memset(s.base + c.offset, 0xab, 3 * BLOCK); /* writable (and not poisoned under ASan) */
    dsc_rdma_slab_region_t none;
    CHECK_EQ_INT(dsc__rdma_slab_try_alloc(&s, 0, &none), DSC_ETOOLARGE);
    CHECK_EQ_INT(dsc__rdma_slab_try_alloc(&s, s.bytes + 1, &none), DSC_ETOOLARGE);
    CHECK_EQ_INT(dsc__rdma_slab_alloc_wait(&s, s.bytes + 1, dsc_now_s() + 1, NULL, &none),
                 DSC_ETOOLARGE);
    dsc__rdma_slab_free(&s, &a);
    CHECK_EQ_INT(a.blocks, 0);
    dsc__rdma_slab_free(&s, &a); /* 0 blocks: a no-op */
    dsc__rdma_slab_free(&s, &b);
    dsc__rdma_slab_free(&s, &c);
    CHECK_EQ_INT(used(&s), 0);
    dsc__rdma_slab_close(&s);
    dsc__rdma_slab_close(&s); /* closed: a no-op */
}

/* Fragments: 256 free blocks in two separate holes do not hold a 256-block region; freeing the
 * piece between them does. */
static void test_fragments(void) {
    dsc_rdma_slab_t s;
    REQUIRE(dsc__rdma_slab_init(&s, 2 * MIB) == 0); /* 512 blocks */
    dsc_rdma_slab_region_t r[4], big;
    for (int i = 0; i < 4; i++)
        REQUIRE(dsc__rdma_slab_try_alloc(&s, 128 * BLOCK, &r[i]) == 0);
    CHECK_EQ_INT(dsc__rdma_slab_try_alloc(&s, 1, &big), DSC_EAGAIN); /* full */
    dsc__rdma_slab_free(&s, &r[0]);
    dsc__rdma_slab_free(&s, &r[2]);
    CHECK_EQ_INT(dsc__rdma_slab_try_alloc(&s, 256 * BLOCK, &big), DSC_EAGAIN);
    dsc__rdma_slab_free(&s, &r[1]);
    REQUIRE(dsc__rdma_slab_try_alloc(&s, 384 * BLOCK, &big) == 0);
    CHECK_EQ_INT(big.offset, 0);
    dsc__rdma_slab_free(&s, &big);
    dsc__rdma_slab_free(&s, &r[3]);
    CHECK_EQ_INT(used(&s), 0);
    dsc__rdma_slab_close(&s);
}

typedef struct waiter_arg {
    dsc_rdma_slab_t *slab;
    uint64_t bytes;
    double seconds;
    atomic_int *cancel;
    atomic_int done;
    int rc;
    dsc_rdma_slab_region_t region;
} waiter_arg_t;

static void *waiter_main(void *p) {
    waiter_arg_t *a = p;
    a->rc = dsc__rdma_slab_alloc_wait(a->slab, a->bytes, dsc_now_s() + a->seconds, a->cancel,
                                      &a->region);
    atomic_store(&a->done, 1);
    return NULL;
}

static int has_waiter(dsc_rdma_slab_t *s) {
    pthread_mutex_lock(&s->lock);
    int yes = s->head != NULL;
    pthread_mutex_unlock(&s->lock);
    return yes;
}

static void wait_queued(dsc_rdma_slab_t *s) {
    for (int i = 0; i < 2000 && !has_waiter(s); i++)
        sleep_ms(1);
    REQUIRE(has_waiter(s));
}

/* A caller holding nothing waits; while it waits, callers holding regions are refused even
 * where the room would fit them, so their frees reach the waiter; the wait ends with a region. */
static void test_waiter_first(void) {
    dsc_rdma_slab_t s;
    REQUIRE(dsc__rdma_slab_init(&s, 2 * MIB) == 0);
    dsc_rdma_slab_region_t r[4], small;
    for (int i = 0; i < 4; i++)
        REQUIRE(dsc__rdma_slab_try_alloc(&s, 128 * BLOCK, &r[i]) == 0);
    waiter_arg_t w = {.slab = &s, .bytes = 256 * BLOCK, .seconds = 30};
    atomic_init(&w.done, 0);
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, waiter_main, &w) == 0);
    wait_queued(&s);
    dsc__rdma_slab_free(&s, &r[0]); /* 128 free: not enough for the waiter */
    CHECK_EQ_INT(dsc__rdma_slab_try_alloc(&s, BLOCK, &small), DSC_EAGAIN); /* it goes first */
    CHECK(!atomic_load(&w.done));
    dsc__rdma_slab_free(&s, &r[1]); /* 256 contiguous: served at once by the free */
    pthread_join(t, NULL);
    CHECK_EQ_INT(w.rc, 0);
    CHECK_EQ_INT(w.region.blocks, 256);
    CHECK_EQ_INT(w.region.offset, 0);
    dsc__rdma_slab_free(&s, &r[2]);
    REQUIRE(dsc__rdma_slab_try_alloc(&s, BLOCK, &small) == 0); /* nobody waits any more */
    dsc__rdma_slab_free(&s, &small);
    dsc__rdma_slab_free(&s, &w.region);
    dsc__rdma_slab_free(&s, &r[3]);
    dsc__rdma_slab_close(&s);
}

/* Waits end on the deadline or on cancel, leave the queue, and let whoever was behind in. */
static void test_timeout_cancel(void) {
    dsc_rdma_slab_t s;
    REQUIRE(dsc__rdma_slab_init(&s, 2 * MIB) == 0);
    dsc_rdma_slab_region_t all, got;
    REQUIRE(dsc__rdma_slab_try_alloc(&s, s.bytes, &all) == 0);
    double t0 = dsc_now_s();
    CHECK_EQ_INT(dsc__rdma_slab_alloc_wait(&s, BLOCK, t0 + 0.05, NULL, &got), DSC_ETIMEDOUT);
    CHECK(dsc_now_s() - t0 >= 0.04);
    CHECK(!has_waiter(&s));
    /* A big waiter at the head is cancelled: the small one behind it is served. */
    atomic_int cancel;
    atomic_init(&cancel, 0);
    waiter_arg_t big = {.slab = &s, .bytes = s.bytes, .seconds = 30, .cancel = &cancel};
    waiter_arg_t small = {.slab = &s, .bytes = BLOCK, .seconds = 30};
    atomic_init(&big.done, 0);
    atomic_init(&small.done, 0);
    pthread_t tb, ts;
    REQUIRE(pthread_create(&tb, NULL, waiter_main, &big) == 0);
    wait_queued(&s);
    REQUIRE(pthread_create(&ts, NULL, waiter_main, &small) == 0);
    sleep_ms(20);
    dsc_rdma_slab_region_t part = all;
    part.blocks = 1;
    dsc__rdma_slab_free(&s, &part); /* one block free: the big head waiter does not fit */
    sleep_ms(20);
    CHECK(!atomic_load(&small.done)); /* behind the head, first come first served */
    atomic_store(&cancel, 1);
    pthread_join(tb, NULL);
    pthread_join(ts, NULL);
    CHECK_EQ_INT(big.rc, DSC_ECLOSED);
    CHECK_EQ_INT(small.rc, 0);
    CHECK_EQ_INT(small.region.offset, 0);
    dsc__rdma_slab_free(&s, &small.region);
    all.offset += BLOCK;
    all.blocks -= 1;
    dsc__rdma_slab_free(&s, &all);
    CHECK_EQ_INT(used(&s), 0);
    dsc__rdma_slab_close(&s);
}

/* Threads that behave like I/O threads: holding nothing, wait for a region; holding some, only
 * try for more (and on refusal free the oldest, as a completed READ would). Every region is
 * filled with the thread's pattern and checked before it is freed, so an overlap shows. */
#define STRESS_THREADS 4
#define STRESS_ROUNDS 3000
typedef struct stress_arg {
    dsc_rdma_slab_t *slab;
    uint32_t seed;
    uint8_t tag;
    int failures;
    uint64_t waits, refusals;
} stress_arg_t;

static uint32_t next_rand(uint32_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    return *x;
}

static int region_ok(const dsc_rdma_slab_t *s, const dsc_rdma_slab_region_t *r, uint8_t tag) {
    const uint8_t *p = s->base + r->offset;
    for (size_t i = 0; i < (size_t)r->blocks * BLOCK; i += 509)
        if (p[i] != tag)
            return 0;
    return 1;
}

static void *stress_main(void *p) {
    stress_arg_t *a = p;
    dsc_rdma_slab_region_t held[8];
    uint32_t head = 0, count = 0;
    for (int round = 0; round < STRESS_ROUNDS; round++) {
        uint64_t bytes = 1 + next_rand(&a->seed) % (a->slab->bytes / 4);
        dsc_rdma_slab_region_t r;
        int rc;
        if (count == 0) {
            rc = dsc__rdma_slab_alloc_wait(a->slab, bytes, dsc_now_s() + 30, NULL, &r);
            a->waits++;
            if (rc != 0) {
                a->failures++;
                break;
            }
        } else if (count == 8 || dsc__rdma_slab_try_alloc(a->slab, bytes, &r) != 0) {
            /* Refused or full: the oldest "READ completes". */
            a->refusals++;
            dsc_rdma_slab_region_t *old = &held[head];
            if (!region_ok(a->slab, old, a->tag))
                a->failures++;
            dsc__rdma_slab_free(a->slab, old);
            head = (head + 1) % 8;
            count--;
            continue;
        }
        memset(a->slab->base + r.offset, a->tag, (size_t)r.blocks * BLOCK);
        held[(head + count++) % 8] = r;
    }
    while (count > 0) {
        if (!region_ok(a->slab, &held[head], a->tag))
            a->failures++;
        dsc__rdma_slab_free(a->slab, &held[head]);
        head = (head + 1) % 8;
        count--;
    }
    return NULL;
}

static void test_stress(void) {
    dsc_rdma_slab_t s;
    REQUIRE(dsc__rdma_slab_init(&s, 4 * MIB) == 0);
    pthread_t t[STRESS_THREADS];
    stress_arg_t a[STRESS_THREADS];
    for (int i = 0; i < STRESS_THREADS; i++) {
        a[i] = (stress_arg_t){
            .slab = &s, .seed = 2463534242u + 7919u * (uint32_t)i, .tag = (uint8_t)(0x10 + i)};
        REQUIRE(pthread_create(&t[i], NULL, stress_main, &a[i]) == 0);
    }
    uint64_t waits = 0, refusals = 0;
    for (int i = 0; i < STRESS_THREADS; i++) {
        pthread_join(t[i], NULL);
        CHECK_EQ_INT(a[i].failures, 0);
        waits += a[i].waits;
        refusals += a[i].refusals;
    }
    printf("stress: %d threads x %d rounds: %llu waits, %llu refusals, no overlap, no deadlock\n",
           STRESS_THREADS, STRESS_ROUNDS, (unsigned long long)waits, (unsigned long long)refusals);
    CHECK(refusals > 0); /* the slab was contended */
    dsc_rdma_slab_stats_t st;
    dsc__rdma_slab_stats(&s, &st);
    CHECK_EQ_INT(st.used_bytes, 0);
    CHECK(st.refusals > 0 && st.refusals <= refusals); /* beside "holding 8 already" */
    CHECK(st.waits <= waits);                          /* only the waits that had to queue */
    printf("stress: %llu of the waits queued; peak %llu of %zu bytes in use\n",
           (unsigned long long)st.waits, (unsigned long long)st.peak_bytes, s.bytes);
    CHECK(st.peak_bytes > 0 && st.peak_bytes <= s.bytes);
    dsc__rdma_slab_close(&s);
}

/* About 2 x inflight_bytes, at least twice the largest request, at least 4 MiB. */
static void test_sizing(void) {
    CHECK_EQ_INT(dsc__rdma_slab_bytes(NULL, 64 * MIB), 128 * MIB);
    CHECK_EQ_INT(dsc__rdma_slab_bytes(NULL, 1024), 4 * MIB);
    dsc_manifest_shard_t shards[2];
    memset(shards, 0, sizeof shards);
    shards[0].chunk_samples = 100;
    shards[1].chunk_samples = 4096;
    dsc_manifest_t m;
    memset(&m, 0, sizeof m);
    m.schema.sample_bytes = 1024;
    m.shard_count = 2;
    m.shards = shards;
    uint64_t chunk = 4096 * 1024; /* 4 MiB: 16 of them (plus lz4 growth) per request */
    uint64_t request = DSC_SOURCE_MAX_MERGE * (chunk + chunk / 255 + 64);
    CHECK_EQ_INT(dsc__rdma_slab_bytes(&m, 64 * MIB), 2 * request);
    CHECK_EQ_INT(dsc__rdma_slab_bytes(&m, 1024 * MIB), 2048 * MIB);
}

int main(void) {
    test_basics();
    test_fragments();
    test_waiter_first();
    test_timeout_cancel();
    test_stress();
    test_sizing();
    return TEST_DONE();
}
