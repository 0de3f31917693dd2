/* RAM store: one arena reserved with mmap (2 MiB aligned, MAP_NORESERVE, hugepages and mlock
 * where the system allows) and an extent allocator inside it. Whole shards live in extents;
 * freed extents go back to the kernel with MADV_DONTNEED. */
#ifndef DSC_SERVER_STORE_H
#define DSC_SERVER_STORE_H

#include <stddef.h>
#include <stdint.h>

#define DSC_STORE_PAGE 4096u
#define DSC_STORE_ALIGN (2u << 20)

typedef struct dsc_store dsc_store_t;

typedef struct dsc_store_info {
    uint64_t capacity;     /* bytes reserved (rounded up to 2 MiB) */
    uint64_t used;         /* bytes in allocated extents (page-rounded) */
    uint64_t largest_free; /* the largest contiguous free extent */
    uint32_t free_extents;
    uint32_t allocations;
    int hugetlb; /* the arena is MAP_HUGETLB */
    int locked;  /* pages are mlock'ed as they fault in */
} dsc_store_info_t;

/* Reserves an arena of `capacity` bytes (no memory is committed until it is written). Logs once
 * which of hugepages / mlock were not available. Returns 0 and *out, DSC_EINVAL (capacity 0),
 * or DSC_ENOMEM (the address space could not be reserved). */
int dsc_store_create(uint64_t capacity, dsc_store_t **out);
/* Unmaps the arena. Every pointer handed out becomes invalid. NULL is a no-op. */
void dsc_store_destroy(dsc_store_t *store);

/* Allocates `size` bytes (rounded up to 4 KiB) with best fit. Returns 0 and *ptr (4 KiB
 * aligned), DSC_EINVAL (size 0) or DSC_ENOSPC (no free extent that large: the caller evicts
 * or reads through). O(free extents). Thread-safe (internal mutex, never on the read path). */
int dsc_store_alloc(dsc_store_t *store, uint64_t size, uint8_t **ptr);
/* Frees an extent from dsc_store_alloc (same size), coalescing with its neighbours, and gives
 * its pages back to the kernel. NULL is a no-op. Thread-safe. */
void dsc_store_free(dsc_store_t *store, uint8_t *ptr, uint64_t size);
/* 1 when size bytes could be allocated right now, else 0. */
int dsc_store_fits(dsc_store_t *store, uint64_t size);
void dsc_store_info(dsc_store_t *store, dsc_store_info_t *out);
/* Arena base and length (for registering the whole arena once, e.g. with RDMA). */
uint8_t *dsc_store_base(const dsc_store_t *store);
uint64_t dsc_store_capacity(const dsc_store_t *store);
/* 1: the arena is registered for RDMA (set before registering, cleared after deregistering):
 * dsc_store_free then keeps the pages (no munlock/MADV_DONTNEED), only poisoning them for ASan,
 * because a registered memory region keeps the physical pages it pinned. Any thread. */
void dsc_store_set_pinned(dsc_store_t *store, int pinned);
/* 1 when [ptr, ptr + len) lies inside the arena. */
int dsc_store_contains(const dsc_store_t *store, const void *ptr, uint64_t len);

#endif
