/* The loader's RDMA slab (rdma_slab.c): one mapping (2 MiB hugetlb pages where the system has
 * them, else normal pages with MADV_HUGEPAGE) that the RDMA source registers once, carved into
 * per-request regions by a small thread-safe allocator shared by the loader's I/O threads. */
#ifndef DSC_RDMA_SLAB_H
#define DSC_RDMA_SLAB_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Regions are whole blocks of this many bytes, aligned to it. */
#define DSC_RDMA_SLAB_BLOCK 4096u
/* The mapping is a whole number of these (one hugetlb page). */
#define DSC_RDMA_SLAB_ALIGN (UINT64_C(2) << 20)

typedef struct dsc_rdma_slab_waiter dsc_rdma_slab_waiter_t;

typedef struct dsc_rdma_slab {
    uint8_t *base;
    size_t bytes; /* a multiple of DSC_RDMA_SLAB_ALIGN */
    int hugetlb;  /* 1: backed by MAP_HUGETLB pages; 0: normal pages (THP requested) */
    pthread_mutex_t lock;
    pthread_cond_t cv;
    uint64_t *used_bits; /* one bit per block, 1 = allocated */
    uint32_t blocks, used;
    dsc_rdma_slab_waiter_t *head, *tail; /* callers holding nothing, served first come first */
    uint32_t peak;                       /* most blocks in use at once */
    uint64_t waits, refusals;            /* callers that queued; tries refused */
} dsc_rdma_slab_t;

/* What the slab went through, for the loader's closing log line and tests. */
typedef struct dsc_rdma_slab_stats {
    uint64_t used_bytes, peak_bytes;
    uint64_t waits;    /* dsc__rdma_slab_alloc_wait calls that had to queue */
    uint64_t refusals; /* dsc__rdma_slab_try_alloc calls answered DSC_EAGAIN */
} dsc_rdma_slab_stats_t;

/* One allocation: [offset, offset + blocks * DSC_RDMA_SLAB_BLOCK) of the slab; blocks 0: none. */
typedef struct dsc_rdma_slab_region {
    uint64_t offset;
    uint32_t blocks;
} dsc_rdma_slab_region_t;

/* Maps at least `bytes` (rounded up to DSC_RDMA_SLAB_ALIGN): MAP_HUGETLB first, silently falling
 * back to a normal mapping with madvise(MADV_HUGEPAGE). Returns 0, DSC_EINVAL (bytes 0) or
 * DSC_ENOMEM. The memory stays mapped until dsc__rdma_slab_close. */
int dsc__rdma_slab_init(dsc_rdma_slab_t *slab, uint64_t bytes);
/* Unmaps. Every region must have been freed and nothing may still write into it (its QPs are
 * destroyed, its registration gone). A zeroed or closed slab is a no-op. */
void dsc__rdma_slab_close(dsc_rdma_slab_t *slab);

/* For a caller that already holds regions: a region of `bytes` now, or DSC_EAGAIN when there is
 * no room or callers holding nothing are waiting (they go first; the caller frees what it holds
 * as its READs complete, and asks again, or waits with dsc__rdma_slab_alloc_wait once it holds
 * nothing). DSC_ETOOLARGE: bytes is 0 or more than the slab. Never blocks (the lock aside). */
int dsc__rdma_slab_try_alloc(dsc_rdma_slab_t *slab, uint64_t bytes, dsc_rdma_slab_region_t *out);
/* For a caller that holds no region: waits, first come first served, until `bytes` fit.
 * Returns 0, DSC_ETIMEDOUT (deadline passed, dsc_now_s seconds), DSC_ECLOSED (*cancel became
 * non-zero; checked at least every 100 ms) or DSC_ETOOLARGE. Since callers holding regions may
 * not allocate while anyone waits, and they free as their READs complete, the wait ends. */
int dsc__rdma_slab_alloc_wait(dsc_rdma_slab_t *slab, uint64_t bytes, double deadline,
                              const atomic_int *cancel, dsc_rdma_slab_region_t *out);
/* Frees the region (nothing may write into it any more) and serves waiters; r->blocks becomes
 * 0. A region of 0 blocks is a no-op. */
void dsc__rdma_slab_free(dsc_rdma_slab_t *slab, dsc_rdma_slab_region_t *r);
/* Bytes allocated now, the peak, and the contention counters. */
void dsc__rdma_slab_stats(dsc_rdma_slab_t *slab, dsc_rdma_slab_stats_t *out);

#endif
