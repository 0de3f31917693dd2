/* Loader memory: page-aligned, mlock'd host regions for batch slots, and a small pool of chunk
 * buffers reused across requests (no page faults on the hot path). */
#ifndef DSC_SLOTS_H
#define DSC_SLOTS_H

#include "log.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* Maps `bytes` (rounded up to pages) of anonymous memory and tries to mlock it. *locked says
 * whether it worked; the first failure is logged once per process at INFO (RLIMIT_MEMLOCK is
 * often small in containers). Returns NULL on ENOMEM. */
void *dsc__host_alloc(size_t bytes, const dsc_logger_t *log, int *locked);
/* NULL is a no-op. bytes as given to dsc__host_alloc. */
void dsc__host_free(void *ptr, size_t bytes);

/* Chunk buffers: get() returns a buffer of at least `bytes` (reusing a free one of similar
 * size, the most recently returned first), put() gives it back; at most max_cached bytes stay
 * cached. Large buffers are mapped with their pages already populated; a buffer goes back only
 * through put() with the capacity get() gave (never free()). Thread-safe. */
typedef struct dsc_bufpool {
    pthread_mutex_t lock;
    size_t max_cached;
    size_t cached_bytes;
    uint32_t count;
    struct {
        void *ptr;
        size_t cap;
    } free_list[512];
} dsc_bufpool_t;

void dsc__bufpool_init(dsc_bufpool_t *pool, size_t max_cached);
void dsc__bufpool_close(dsc_bufpool_t *pool);
/* Returns the buffer and its capacity in *cap, or NULL (ENOMEM). */
void *dsc__bufpool_get(dsc_bufpool_t *pool, size_t bytes, size_t *cap);
/* NULL is a no-op. */
void dsc__bufpool_put(dsc_bufpool_t *pool, void *ptr, size_t cap);

#endif
