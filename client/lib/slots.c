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

void dsc__bufpool_init(dsc_bufpool_t *pool, size_t max_cached) {
    memset(pool, 0, sizeof *pool);
    pthread_mutex_init(&pool->lock, NULL);
    pool->max_cached = max_cached;
}

void dsc__bufpool_close(dsc_bufpool_t *pool) {
    for (uint32_t i = 0; i < pool->count; i++)
        free(pool->free_list[i].ptr);
    pool->count = 0;
    pool->cached_bytes = 0;
    pthread_mutex_destroy(&pool->lock);
}

void *dsc__bufpool_get(dsc_bufpool_t *pool, size_t bytes, size_t *cap) {
    if (bytes == 0)
        bytes = 1;
    pthread_mutex_lock(&pool->lock);
    /* Best fit among buffers no more than twice as large. */
    int best = -1;
    for (uint32_t i = 0; i < pool->count; i++) {
        size_t c = pool->free_list[i].cap;
        if (c >= bytes && c / 2 <= bytes && (best < 0 || c < pool->free_list[best].cap))
            best = (int)i;
    }
    if (best >= 0) {
        void *p = pool->free_list[best].ptr;
        *cap = pool->free_list[best].cap;
        pool->cached_bytes -= *cap;
        pool->free_list[best] = pool->free_list[--pool->count];
        pthread_mutex_unlock(&pool->lock);
        return p;
    }
    pthread_mutex_unlock(&pool->lock);
    /* 64-byte alignment keeps the decoders' and memcpy's wide loads aligned. */
    size_t rounded = (bytes + 63) & ~(size_t)63;
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
    free(ptr);
}
