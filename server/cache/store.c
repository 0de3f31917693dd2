/* Arena + extent allocator. Free extents are kept in an array sorted by offset, so freeing is a
 * binary search plus coalescing; allocation is best fit over the free array. The metadata is
 * 16 bytes per free extent: far below 1% of the cached bytes for shards of any useful size. */
#include "store.h"
#include "dscache_base.h"
#include "srvlog.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Freed extents are poisoned for AddressSanitizer: a response that outlived its reference
 * would be reported at once. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DSC_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define DSC_ASAN 1
#endif
#ifdef DSC_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#ifndef MLOCK_ONFAULT
#define MLOCK_ONFAULT 0x01
#endif

typedef struct extent {
    uint64_t off, len; /* bytes, page multiples */
} extent_t;

struct dsc_store {
    pthread_mutex_t lock;
    uint8_t *base;
    uint64_t capacity;
    uint8_t *map; /* what mmap returned (base is 2 MiB aligned inside it) */
    uint64_t map_len;
    extent_t *free; /* sorted by off, never adjacent (always coalesced) */
    uint32_t free_count, free_cap;
    uint64_t used;
    uint32_t allocations;
    int hugetlb, locked;
    atomic_int pinned; /* registered for RDMA: freed pages stay (see dsc_store_set_pinned) */
};

static uint64_t round_up(uint64_t v, uint64_t a) {
    return (v + a - 1) / a * a;
}

/* Bytes of free reserved hugepages (/proc/meminfo), 0 when unknown. */
static uint64_t hugepages_free(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (f == NULL)
        return 0;
    char line[256];
    unsigned long long free_pages = 0, page_kb = 0;
    while (fgets(line, sizeof line, f)) {
        sscanf(line, "HugePages_Free: %llu", &free_pages);
        sscanf(line, "Hugepagesize: %llu kB", &page_kb);
    }
    fclose(f);
    return (uint64_t)free_pages * page_kb * 1024;
}

int dsc_store_create(uint64_t capacity, dsc_store_t **out) {
    if (out == NULL || capacity == 0)
        return DSC_EINVAL;
    *out = NULL;
    if (capacity > (UINT64_C(1) << 46))
        return DSC_ENOMEM;
    dsc_store_t *store = calloc(1, sizeof *store);
    if (store == NULL)
        return DSC_ENOMEM;
    store->capacity = round_up(capacity, DSC_STORE_ALIGN);
    store->free_cap = 64;
    store->free = malloc(store->free_cap * sizeof *store->free);
    if (store->free == NULL)
        goto fail;
    pthread_mutex_init(&store->lock, NULL);

    const char *fallbacks[2] = {NULL, NULL};
#ifdef MAP_HUGETLB
    /* Only with enough reserved hugepages: a MAP_HUGETLB mapping without them faults later. */
    if (hugepages_free() >= store->capacity) {
        store->map = mmap(NULL, store->capacity, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
        if (store->map != MAP_FAILED) {
            store->map_len = store->capacity;
            store->base = store->map;
            store->hugetlb = 1;
        }
    }
#endif
    if (!store->hugetlb) {
        fallbacks[0] = "no reserved hugepages (MAP_HUGETLB), using transparent hugepages";
        store->map_len = store->capacity + DSC_STORE_ALIGN;
        store->map = mmap(NULL, store->map_len, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (store->map == MAP_FAILED) {
            store->map = NULL;
            goto fail;
        }
        uintptr_t aligned = round_up((uintptr_t)store->map, DSC_STORE_ALIGN);
        store->base = (uint8_t *)aligned;
        /* Trim the unaligned head and tail so that only the arena stays mapped. */
        size_t head = (size_t)(store->base - store->map);
        if (head)
            munmap(store->map, head);
        size_t tail = (size_t)(store->map_len - head - store->capacity);
        if (tail)
            munmap(store->base + store->capacity, tail);
        store->map = store->base;
        store->map_len = store->capacity;
#ifdef MADV_HUGEPAGE
        madvise(store->base, store->capacity, MADV_HUGEPAGE);
#endif
    }
    if (mlock2(store->base, store->capacity, MLOCK_ONFAULT) == 0)
        store->locked = 1;
    else
        fallbacks[1] = "mlock not permitted (RLIMIT_MEMLOCK): cached pages may be swapped";
    for (int i = 0; i < 2; i++)
        if (fallbacks[i])
            LOG_INFO("store: %s", fallbacks[i]);

    store->free[0] = (extent_t){0, store->capacity};
    store->free_count = 1;
    *out = store;
    return 0;
fail:
    free(store->free);
    free(store);
    return DSC_ENOMEM;
}

void dsc_store_destroy(dsc_store_t *store) {
    if (store == NULL)
        return;
    if (store->map)
        munmap(store->map, store->map_len);
    pthread_mutex_destroy(&store->lock);
    free(store->free);
    free(store);
}

static int64_t best_fit(const dsc_store_t *store, uint64_t len) {
    int64_t best = -1;
    for (uint32_t i = 0; i < store->free_count; i++)
        if (store->free[i].len >= len && (best < 0 || store->free[i].len < store->free[best].len))
            best = i;
    return best;
}

int dsc_store_alloc(dsc_store_t *store, uint64_t size, uint8_t **ptr) {
    if (store == NULL || ptr == NULL || size == 0)
        return DSC_EINVAL;
    if (size > store->capacity)
        return DSC_ENOSPC;
    uint64_t len = round_up(size, DSC_STORE_PAGE);
    pthread_mutex_lock(&store->lock);
    int64_t i = best_fit(store, len);
    if (i < 0) {
        pthread_mutex_unlock(&store->lock);
        return DSC_ENOSPC;
    }
    extent_t *e = &store->free[i];
    *ptr = store->base + e->off;
    e->off += len;
    e->len -= len;
    if (e->len == 0) {
        memmove(e, e + 1, (store->free_count - (uint32_t)i - 1) * sizeof *e);
        store->free_count--;
    }
    store->used += len;
    store->allocations++;
    pthread_mutex_unlock(&store->lock);
    UNPOISON(*ptr, len);
    return 0;
}

void dsc_store_free(dsc_store_t *store, uint8_t *ptr, uint64_t size) {
    if (store == NULL || ptr == NULL || size == 0)
        return;
    uint64_t len = round_up(size, DSC_STORE_PAGE);
    uint64_t off = (uint64_t)(ptr - store->base);
    /* Give the pages back first (outside the lock: nobody else owns this range now). Not while
     * the arena is registered for RDMA: the memory region keeps the old physical pages, so after
     * MADV_DONTNEED the next shard would land on new pages while READs serve the old ones. */
    if (!atomic_load_explicit(&store->pinned, memory_order_acquire)) {
        if (store->locked)
            munlock(ptr, len);
        madvise(ptr, len, MADV_DONTNEED);
        if (store->locked)
            mlock2(ptr, len, MLOCK_ONFAULT);
    }
    POISON(ptr, len);

    pthread_mutex_lock(&store->lock);
    /* First free extent after off. */
    uint32_t lo = 0, hi = store->free_count;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (store->free[mid].off < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    int merge_prev = lo > 0 && store->free[lo - 1].off + store->free[lo - 1].len == off;
    int merge_next = lo < store->free_count && off + len == store->free[lo].off;
    if (merge_prev && merge_next) {
        store->free[lo - 1].len += len + store->free[lo].len;
        memmove(&store->free[lo], &store->free[lo + 1],
                (store->free_count - lo - 1) * sizeof(extent_t));
        store->free_count--;
    } else if (merge_prev) {
        store->free[lo - 1].len += len;
    } else if (merge_next) {
        store->free[lo].off = off;
        store->free[lo].len += len;
    } else {
        if (store->free_count == store->free_cap) {
            extent_t *grown = realloc(store->free, 2 * store->free_cap * sizeof(extent_t));
            if (grown == NULL) {
                /* Defensive: leak the extent rather than corrupt the free list. */
                pthread_mutex_unlock(&store->lock);
                LOG_ERROR("store: out of memory growing the free list (%llu bytes lost)",
                          (unsigned long long)len);
                return;
            }
            store->free = grown;
            store->free_cap *= 2;
        }
        memmove(&store->free[lo + 1], &store->free[lo],
                (store->free_count - lo) * sizeof(extent_t));
        store->free[lo] = (extent_t){off, len};
        store->free_count++;
    }
    store->used -= len;
    store->allocations--;
    pthread_mutex_unlock(&store->lock);
}

int dsc_store_fits(dsc_store_t *store, uint64_t size) {
    if (store == NULL || size == 0 || size > store->capacity)
        return 0;
    pthread_mutex_lock(&store->lock);
    int ok = best_fit(store, round_up(size, DSC_STORE_PAGE)) >= 0;
    pthread_mutex_unlock(&store->lock);
    return ok;
}

void dsc_store_info(dsc_store_t *store, dsc_store_info_t *out) {
    memset(out, 0, sizeof *out);
    if (store == NULL)
        return;
    pthread_mutex_lock(&store->lock);
    out->capacity = store->capacity;
    out->used = store->used;
    out->free_extents = store->free_count;
    out->allocations = store->allocations;
    for (uint32_t i = 0; i < store->free_count; i++)
        if (store->free[i].len > out->largest_free)
            out->largest_free = store->free[i].len;
    out->hugetlb = store->hugetlb;
    out->locked = store->locked;
    pthread_mutex_unlock(&store->lock);
}

uint8_t *dsc_store_base(const dsc_store_t *store) {
    return store ? store->base : NULL;
}

uint64_t dsc_store_capacity(const dsc_store_t *store) {
    return store ? store->capacity : 0;
}

void dsc_store_set_pinned(dsc_store_t *store, int pinned) {
    if (store != NULL)
        atomic_store_explicit(&store->pinned, pinned ? 1 : 0, memory_order_release);
}

int dsc_store_contains(const dsc_store_t *store, const void *ptr, uint64_t len) {
    if (store == NULL || ptr == NULL)
        return 0;
    uintptr_t p = (uintptr_t)ptr, b = (uintptr_t)store->base;
    return p >= b && len <= store->capacity && p - b <= store->capacity - len;
}
