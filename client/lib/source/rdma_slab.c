/* The loader's RDMA slab (rdma_slab.h): one mapping carved into block-aligned regions with a
 * first-fit bitmap allocator; callers holding nothing wait first come first served, and callers
 * holding regions are refused while anyone waits, so no thread starves and none deadlocks. */
#include "rdma_slab.h"
#include "dscache.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

/* Free regions are poisoned for AddressSanitizer: a READ that lands in a region after it was
 * freed (its QP not yet destroyed) is reported at once. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SLAB_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define SLAB_ASAN 1
#endif
#ifdef SLAB_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

struct dsc_rdma_slab_waiter {
    uint32_t blocks;
    int granted;
    dsc_rdma_slab_region_t region;
    dsc_rdma_slab_waiter_t *next;
};

int dsc__rdma_slab_init(dsc_rdma_slab_t *slab, uint64_t bytes) {
    memset(slab, 0, sizeof *slab);
    if (bytes == 0 || bytes > (UINT64_C(1) << 40))
        return DSC_EINVAL;
    size_t cap =
        (size_t)((bytes + DSC_RDMA_SLAB_ALIGN - 1) / DSC_RDMA_SLAB_ALIGN * DSC_RDMA_SLAB_ALIGN);
    void *p = MAP_FAILED;
#ifdef MAP_HUGETLB
    /* Reserved at mmap time (MAP_PRIVATE without MAP_NORESERVE): fails now, not with SIGBUS
     * later, where the system has too few hugetlb pages. */
    p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
    slab->hugetlb = p != MAP_FAILED;
#endif
    if (p == MAP_FAILED) {
        p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return DSC_ENOMEM;
#ifdef MADV_HUGEPAGE
        madvise(p, cap, MADV_HUGEPAGE); /* best effort: THP may be off */
#endif
    }
    slab->blocks = (uint32_t)(cap / DSC_RDMA_SLAB_BLOCK);
    slab->used_bits = calloc((slab->blocks + 63) / 64, sizeof(uint64_t));
    if (slab->used_bits == NULL) {
        munmap(p, cap);
        memset(slab, 0, sizeof *slab);
        return DSC_ENOMEM;
    }
    slab->base = p;
    slab->bytes = cap;
    pthread_mutex_init(&slab->lock, NULL);
    pthread_cond_init(&slab->cv, NULL);
    POISON(slab->base, slab->bytes);
    return 0;
}

void dsc__rdma_slab_close(dsc_rdma_slab_t *slab) {
    if (slab == NULL || slab->base == NULL)
        return;
    UNPOISON(slab->base, slab->bytes);
    munmap(slab->base, slab->bytes);
    free(slab->used_bits);
    pthread_mutex_destroy(&slab->lock);
    pthread_cond_destroy(&slab->cv);
    memset(slab, 0, sizeof *slab);
}

static int bit(const dsc_rdma_slab_t *s, uint32_t i) {
    return (int)((s->used_bits[i / 64] >> (i % 64)) & 1);
}

/* The first run of n free blocks starting in [from, to), or -1. Whole words are skipped. */
static int64_t find_from(const dsc_rdma_slab_t *s, uint32_t from, uint32_t to, uint32_t n) {
    uint32_t run = 0;
    uint32_t i = from;
    while (i < to) {
        uint64_t w = s->used_bits[i / 64];
        if (i % 64 == 0 && i + 64 <= s->blocks) {
            if (w == ~UINT64_C(0)) {
                run = 0;
                i += 64;
                continue;
            }
            if (w == 0) {
                if (run + 64 >= n)
                    return (int64_t)(i - run);
                run += 64;
                i += 64;
                continue;
            }
        }
        if (bit(s, i)) {
            run = 0;
        } else if (++run == n) {
            return (int64_t)(i + 1 - n);
        }
        i++;
    }
    return -1;
}

/* First fit: the lowest free run. What is in flight is usually far below the slab's size, so
 * READs keep landing in the same few pages, warm in cache (and, without a NIC that pins the
 * whole slab at registration, the rest is never even faulted in). Next fit, circling the slab,
 * measured 20 % of the loader's CPU time in page clearing through fakeverbs. Under lock. */
static int take(dsc_rdma_slab_t *s, uint32_t n, dsc_rdma_slab_region_t *out) {
    if (n > s->blocks - s->used)
        return 0;
    int64_t at = find_from(s, 0, s->blocks, n);
    if (at < 0)
        return 0;
    for (uint32_t i = (uint32_t)at; i < (uint32_t)at + n; i++)
        s->used_bits[i / 64] |= UINT64_C(1) << (i % 64);
    s->used += n;
    if (s->used > s->peak)
        s->peak = s->used;
    out->offset = (uint64_t)at * DSC_RDMA_SLAB_BLOCK;
    out->blocks = n;
    UNPOISON(s->base + out->offset, (size_t)n * DSC_RDMA_SLAB_BLOCK);
    return 1;
}

/* Serves waiters in order while the first one fits. Under lock. */
static void serve_waiters(dsc_rdma_slab_t *s) {
    int served = 0;
    while (s->head != NULL && take(s, s->head->blocks, &s->head->region)) {
        s->head->granted = 1;
        s->head = s->head->next;
        served = 1;
    }
    if (s->head == NULL)
        s->tail = NULL;
    if (served)
        pthread_cond_broadcast(&s->cv);
}

static uint32_t blocks_for(uint64_t bytes) {
    return (uint32_t)((bytes + DSC_RDMA_SLAB_BLOCK - 1) / DSC_RDMA_SLAB_BLOCK);
}

int dsc__rdma_slab_try_alloc(dsc_rdma_slab_t *slab, uint64_t bytes, dsc_rdma_slab_region_t *out) {
    out->blocks = 0;
    if (bytes == 0 || bytes > slab->bytes)
        return DSC_ETOOLARGE;
    pthread_mutex_lock(&slab->lock);
    int ok = slab->head == NULL && take(slab, blocks_for(bytes), out);
    slab->refusals += !ok;
    pthread_mutex_unlock(&slab->lock);
    return ok ? 0 : DSC_EAGAIN;
}

int dsc__rdma_slab_alloc_wait(dsc_rdma_slab_t *slab, uint64_t bytes, double deadline,
                              const atomic_int *cancel, dsc_rdma_slab_region_t *out) {
    out->blocks = 0;
    if (bytes == 0 || bytes > slab->bytes)
        return DSC_ETOOLARGE;
    dsc_rdma_slab_waiter_t me = {.blocks = blocks_for(bytes)};
    pthread_mutex_lock(&slab->lock);
    if (slab->head == NULL && take(slab, me.blocks, out)) {
        pthread_mutex_unlock(&slab->lock);
        return 0;
    }
    slab->waits++;
    if (slab->tail)
        slab->tail->next = &me;
    else
        slab->head = &me;
    slab->tail = &me;
    int rc = 0;
    while (!me.granted) {
        double now = dsc_now_s();
        if (cancel != NULL && atomic_load(cancel)) {
            rc = DSC_ECLOSED;
            break;
        }
        if (now >= deadline) {
            rc = DSC_ETIMEDOUT;
            break;
        }
        double until = deadline - now < 0.1 ? deadline - now : 0.1;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)(until * 1e9);
        ts.tv_sec += (time_t)(ns / 1000000000u);
        ts.tv_nsec = (long)(ns % 1000000000u);
        pthread_cond_timedwait(&slab->cv, &slab->lock, &ts);
    }
    if (!me.granted) {
        /* Leave the queue; whoever was behind may fit now. */
        dsc_rdma_slab_waiter_t *prev = NULL;
        for (dsc_rdma_slab_waiter_t *w = slab->head; w != NULL; prev = w, w = w->next)
            if (w == &me) {
                if (prev)
                    prev->next = me.next;
                else
                    slab->head = me.next;
                if (slab->tail == &me)
                    slab->tail = prev;
                break;
            }
        serve_waiters(slab);
    } else {
        *out = me.region;
    }
    pthread_mutex_unlock(&slab->lock);
    return rc;
}

void dsc__rdma_slab_free(dsc_rdma_slab_t *slab, dsc_rdma_slab_region_t *r) {
    if (r == NULL || r->blocks == 0)
        return;
    pthread_mutex_lock(&slab->lock);
    uint32_t first = (uint32_t)(r->offset / DSC_RDMA_SLAB_BLOCK);
    for (uint32_t i = first; i < first + r->blocks; i++)
        slab->used_bits[i / 64] &= ~(UINT64_C(1) << (i % 64));
    slab->used -= r->blocks;
    POISON(slab->base + r->offset, (size_t)r->blocks * DSC_RDMA_SLAB_BLOCK);
    serve_waiters(slab);
    pthread_mutex_unlock(&slab->lock);
    r->blocks = 0;
}

void dsc__rdma_slab_stats(dsc_rdma_slab_t *slab, dsc_rdma_slab_stats_t *out) {
    pthread_mutex_lock(&slab->lock);
    out->used_bytes = (uint64_t)slab->used * DSC_RDMA_SLAB_BLOCK;
    out->peak_bytes = (uint64_t)slab->peak * DSC_RDMA_SLAB_BLOCK;
    out->waits = slab->waits;
    out->refusals = slab->refusals;
    pthread_mutex_unlock(&slab->lock);
}
