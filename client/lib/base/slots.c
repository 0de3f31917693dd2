/* Loader memory: mlock'd host regions and the chunk buffer pool (see slots.h). */
#include "slots.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static size_t round_pages(size_t bytes) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (bytes + page - 1) / page * page;
}

void *dsc__host_alloc(size_t bytes, const dsc_logger_t *log, int *locked) {
    static atomic_int logged;
    size_t len = round_pages(bytes ? bytes : 1);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    *locked = mlock(p, len) == 0;
    if (!*locked) {
        int err = errno;
        if (atomic_exchange(&logged, 1) == 0)
            DSC_LOG(log, DSC_LOG_INFO,
                    "mlock of batch slots not permitted (%s): using pageable memory",
                    strerror(err));
        /* Touch the pages now so that the first batches do not pay the faults. */
        memset(p, 0, len);
    }
    return p;
}

void dsc__host_free(void *ptr, size_t bytes) {
    if (ptr == NULL)
        return;
    munmap(ptr, round_pages(bytes ? bytes : 1));
}

/* Buffers of at least this many bytes are mapped with MAP_POPULATE: the kernel fills in all
 * pages in one call, where a malloc'd buffer would take a page fault per 4 KiB inside the first
 * recv into it (the profile showed those faults at several % of the loader's CPU). */
#define POOL_MAP_MIN (256u << 10)

static void pool_release(void *ptr, size_t cap) {
    if (cap >= POOL_MAP_MIN)
        munmap(ptr, cap);
    else
        free(ptr);
}

void dsc__bufpool_init(dsc_bufpool_t *pool, size_t max_cached) {
    memset(pool, 0, sizeof *pool);
    pthread_mutex_init(&pool->lock, NULL);
    pool->max_cached = max_cached;
}

void dsc__bufpool_close(dsc_bufpool_t *pool) {
    for (uint32_t i = 0; i < pool->count; i++)
        pool_release(pool->free_list[i].ptr, pool->free_list[i].cap);
    pool->count = 0;
    pool->cached_bytes = 0;
    pthread_mutex_destroy(&pool->lock);
}

void *dsc__bufpool_get(dsc_bufpool_t *pool, size_t bytes, size_t *cap) {
    if (bytes == 0)
        bytes = 1;
    pthread_mutex_lock(&pool->lock);
    /* The most recently returned buffer that fits closely (within 1/8): its lines are the
     * likeliest to be still cached, so the receive into it writes to cache, not to memory.
     * Else the best fit among buffers no more than twice as large. */
    int pick = -1;
    for (int i = (int)pool->count - 1; i >= 0; i--) {
        size_t c = pool->free_list[i].cap;
        if (c < bytes || c / 2 > bytes)
            continue;
        if (c - bytes <= bytes / 8) {
            pick = i;
            break;
        }
        if (pick < 0 || c < pool->free_list[pick].cap)
            pick = i;
    }
    if (pick >= 0) {
        void *p = pool->free_list[pick].ptr;
        *cap = pool->free_list[pick].cap;
        pool->cached_bytes -= *cap;
        pool->count--;
        memmove(&pool->free_list[pick], &pool->free_list[pick + 1],
                (pool->count - (uint32_t)pick) * sizeof pool->free_list[0]);
        pthread_mutex_unlock(&pool->lock);
        return p;
    }
    pthread_mutex_unlock(&pool->lock);
    /* 64-byte alignment keeps the decoders' and memcpy's wide loads aligned. */
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (rounded >= POOL_MAP_MIN) {
        size_t len = round_pages(rounded);
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        if (p == MAP_FAILED)
            return NULL;
        *cap = len;
        return p;
    }
    void *p = NULL;
    if (posix_memalign(&p, 64, rounded) != 0)
        return NULL;
    *cap = rounded;
    return p;
}

void dsc__bufpool_put(dsc_bufpool_t *pool, void *ptr, size_t cap) {
    if (ptr == NULL)
        return;
    pthread_mutex_lock(&pool->lock);
    if (pool->count < sizeof pool->free_list / sizeof pool->free_list[0] &&
        pool->cached_bytes + cap <= pool->max_cached) {
        pool->free_list[pool->count].ptr = ptr;
        pool->free_list[pool->count].cap = cap;
        pool->count++;
        pool->cached_bytes += cap;
        ptr = NULL;
    }
    pthread_mutex_unlock(&pool->lock);
    if (ptr != NULL)
        pool_release(ptr, cap);
}
