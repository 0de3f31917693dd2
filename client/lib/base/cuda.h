/* CUDA runtime, loaded at run time with dlopen so that libdscache loads on machines without
 * CUDA. Only the handful of calls the loader needs; errors become DSC_ECUDA / DSC_ENODEVICE. */
#ifndef DSC_CUDA_H
#define DSC_CUDA_H

#include "log.h"

#include <stddef.h>

typedef struct dsc_cuda dsc_cuda_t;

/* Loads libcudart (.so.13, .so.12, .so) and selects `device`. Returns 0 and *out, or
 * DSC_ENODEVICE (no runtime library, no device, or index out of range; the reason is logged
 * once at ERROR), DSC_ECUDA, DSC_ENOMEM. */
int dsc__cuda_open(int device, const dsc_logger_t *log, dsc_cuda_t **out);
/* Frees the stream and events. NULL is a no-op. */
void dsc__cuda_close(dsc_cuda_t *cuda);
/* Makes the loader's device current on the calling thread (worker threads call it once). */
int dsc__cuda_bind_thread(dsc_cuda_t *cuda);

/* Pinned host memory (cudaHostAlloc) and device memory. Return NULL on failure. */
void *dsc__cuda_host_alloc(dsc_cuda_t *cuda, size_t bytes);
void dsc__cuda_host_free(dsc_cuda_t *cuda, void *ptr);
void *dsc__cuda_dev_alloc(dsc_cuda_t *cuda, size_t bytes);
void dsc__cuda_dev_free(dsc_cuda_t *cuda, void *ptr);

/* Per-slot events: `done` is recorded after the slot's copy, `released` on the consumer's
 * stream when the consumer gives the slot back. */
typedef struct dsc_cuda_slot {
    void *done;     /* cudaEvent_t */
    void *started;  /* cudaEvent_t, for the copy time */
    void *released; /* cudaEvent_t */
    int released_recorded;
    int copy_pending;    /* a copy was issued and its time not yet counted */
    uint64_t copy_bytes; /* the size of that copy */
} dsc_cuda_slot_t;
int dsc__cuda_slot_init(dsc_cuda_t *cuda, dsc_cuda_slot_t *slot);
void dsc__cuda_slot_close(dsc_cuda_t *cuda, dsc_cuda_slot_t *slot);

/* Waits (host side) until the slot's previous copy finished reading its host buffer. */
int dsc__cuda_slot_wait_copy(dsc_cuda_t *cuda, dsc_cuda_slot_t *slot);
/* Queues host -> device on the loader's stream, after the consumer released the device buffer;
 * records `done`. Never blocks on the device. The previous copy of this slot, which must have
 * been waited for (dsc__cuda_slot_wait_copy), is measured first: its device time (event to
 * event) and size go to *prev_seconds and *prev_bytes (0 and 0 when there was none). */
int dsc__cuda_slot_copy(dsc_cuda_t *cuda, dsc_cuda_slot_t *slot, void *dst, const void *src,
                        size_t bytes, double *prev_seconds, uint64_t *prev_bytes);
/* Orders the consumer's stream (NULL: legacy default stream) after the slot's copy. */
int dsc__cuda_slot_hand_out(dsc_cuda_t *cuda, dsc_cuda_slot_t *slot, void *stream);
/* Records `released` on the consumer's stream. */
int dsc__cuda_slot_release(dsc_cuda_t *cuda, dsc_cuda_slot_t *slot, void *stream);

#endif
