/* CUDA runtime through dlopen (see cuda.h): the loader works without CUDA installed. */
#include "cuda.h"

#include <dlfcn.h>
#include <stdlib.h>

typedef int cuda_err_t;
typedef void *cuda_stream_t;
typedef void *cuda_event_t;

#define CUDA_SUCCESS 0
#define CUDA_NOT_READY 600
#define CUDA_MEMCPY_H2D 1
#define CUDA_STREAM_NON_BLOCKING 1u
#define CUDA_EVENT_DEFAULT 0u

struct dsc_cuda {
    void *lib;
    int device;
    const dsc_logger_t *log;
    cuda_stream_t stream;
    cuda_err_t (*get_device_count)(int *);
    cuda_err_t (*set_device)(int);
    cuda_err_t (*host_alloc)(void **, size_t, unsigned);
    cuda_err_t (*free_host)(void *);
    cuda_err_t (*malloc_)(void **, size_t);
    cuda_err_t (*free_)(void *);
    cuda_err_t (*stream_create)(cuda_stream_t *, unsigned);
    cuda_err_t (*stream_destroy)(cuda_stream_t);
    cuda_err_t (*stream_wait_event)(cuda_stream_t, cuda_event_t, unsigned);
    cuda_err_t (*event_create)(cuda_event_t *, unsigned);
    cuda_err_t (*event_destroy)(cuda_event_t);
    cuda_err_t (*event_record)(cuda_event_t, cuda_stream_t);
    cuda_err_t (*event_synchronize)(cuda_event_t);
    cuda_err_t (*event_query)(cuda_event_t);
    cuda_err_t (*event_elapsed)(float *, cuda_event_t, cuda_event_t);
    cuda_err_t (*memcpy_async)(void *, const void *, size_t, int, cuda_stream_t);
    const char *(*error_string)(cuda_err_t);
};

static const char *err_text(const dsc_cuda_t *cuda, cuda_err_t err) {
    return cuda->error_string ? cuda->error_string(err) : "?";
}

/* Converts a CUDA error once, where it enters, logging what failed. */
static int check(const dsc_cuda_t *cuda, cuda_err_t err, const char *what) {
    if (err == CUDA_SUCCESS)
        return 0;
    DSC_LOG(cuda->log, DSC_LOG_ERROR, "CUDA %s failed: %s (%d)", what, err_text(cuda, err), err);
    return DSC_ECUDA;
}

#define LOAD(field, name)                                                                          \
    do {                                                                                           \
        *(void **)(&cuda->field) = dlsym(cuda->lib, name);                                         \
        if (cuda->field == NULL) {                                                                 \
            missing = name;                                                                        \
            goto no_device;                                                                        \
        }                                                                                          \
    } while (0)

int dsc__cuda_open(int device, const dsc_logger_t *log, dsc_cuda_t **out) {
    static const char *libs[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so"};
    const char *missing = NULL;
    dsc_cuda_t *cuda = calloc(1, sizeof *cuda);
    if (cuda == NULL)
        return DSC_ENOMEM;
    cuda->device = device;
    cuda->log = log;
    for (size_t i = 0; i < sizeof libs / sizeof libs[0] && cuda->lib == NULL; i++)
        cuda->lib = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL);
    if (cuda->lib == NULL) {
        DSC_LOG(log, DSC_LOG_ERROR,
                "device %d requested but no CUDA runtime (libcudart.so.13/.12) "
                "could be loaded",
                device);
        goto fail_nodev;
    }
    LOAD(error_string, "cudaGetErrorString");
    LOAD(get_device_count, "cudaGetDeviceCount");
    LOAD(set_device, "cudaSetDevice");
    LOAD(host_alloc, "cudaHostAlloc");
    LOAD(free_host, "cudaFreeHost");
    LOAD(malloc_, "cudaMalloc");
    LOAD(free_, "cudaFree");
    LOAD(stream_create, "cudaStreamCreateWithFlags");
    LOAD(stream_destroy, "cudaStreamDestroy");
    LOAD(stream_wait_event, "cudaStreamWaitEvent");
    LOAD(event_create, "cudaEventCreateWithFlags");
    LOAD(event_destroy, "cudaEventDestroy");
    LOAD(event_record, "cudaEventRecord");
    LOAD(event_synchronize, "cudaEventSynchronize");
    LOAD(event_query, "cudaEventQuery");
    LOAD(event_elapsed, "cudaEventElapsedTime");
    LOAD(memcpy_async, "cudaMemcpyAsync");
    int count = 0;
    cuda_err_t err = cuda->get_device_count(&count);
    if (err != CUDA_SUCCESS || count <= 0) {
        DSC_LOG(log, DSC_LOG_ERROR, "device %d requested but the CUDA runtime sees no device (%s)",
                device, err != CUDA_SUCCESS ? err_text(cuda, err) : "count 0");
        goto fail_nodev;
    }
    if (device >= count) {
        DSC_LOG(log, DSC_LOG_ERROR, "device %d requested but only %d CUDA device(s) exist", device,
                count);
        goto fail_nodev;
    }
    int rc = check(cuda, cuda->set_device(device), "cudaSetDevice");
    if (rc == 0)
        rc = check(cuda, cuda->stream_create(&cuda->stream, CUDA_STREAM_NON_BLOCKING),
                   "cudaStreamCreate");
    if (rc < 0) {
        dsc__cuda_close(cuda);
        return rc;
    }
    *out = cuda;
    return 0;
no_device:
    DSC_LOG(log, DSC_LOG_ERROR, "CUDA runtime lacks %s", missing);
fail_nodev:
    dsc__cuda_close(cuda);
    return DSC_ENODEVICE;
}

void dsc__cuda_close(dsc_cuda_t *cuda) {
    if (cuda == NULL)
        return;
    if (cuda->stream != NULL && cuda->stream_destroy != NULL)
        cuda->stream_destroy(cuda->stream);
    /* The runtime library stays loaded: unloading libcudart while the process may still hold
     * its contexts is unsafe. */
    free(cuda);
}

int dsc__cuda_bind_thread(dsc_cuda_t *cuda) {
    return check(cuda, cuda->set_device(cuda->device), "cudaSetDevice");
}

void *dsc__cuda_host_alloc(dsc_cuda_t *cuda, size_t bytes) {
    void *p = NULL;
    if (check(cuda, cuda->host_alloc(&p, bytes, 0), "cudaHostAlloc") < 0)
        return NULL;
    return p;
}

void dsc__cuda_host_free(dsc_cuda_t *cuda, void *ptr) {
    if (ptr != NULL)
        cuda->free_host(ptr);
}

void *dsc__cuda_dev_alloc(dsc_cuda_t *cuda, size_t bytes) {
    void *p = NULL;
    if (check(cuda, cuda->malloc_(&p, bytes), "cudaMalloc") < 0)
        return NULL;
    return p;
}

void dsc__cuda_dev_free(dsc_cuda_t *cuda, void *ptr) {
    if (ptr != NULL)
        cuda->free_(ptr);
}

int dsc__cuda_slot_init(dsc_cuda_t *cuda, dsc_cuda_slot_t *slot) {
    int rc = check(cuda, cuda->event_create(&slot->done, CUDA_EVENT_DEFAULT), "cudaEventCreate");
    if (rc == 0)
        rc = check(cuda, cuda->event_create(&slot->started, CUDA_EVENT_DEFAULT), "cudaEventCreate");
    if (rc == 0)
        rc =
            check(cuda, cuda->event_create(&slot->released, CUDA_EVENT_DEFAULT), "cudaEventCreate");
    slot->released_recorded = 0;
    slot->copy_pending = 0;
    return rc;
}

void dsc__cuda_slot_close(dsc_cuda_t *cuda, dsc_cuda_slot_t *slot) {
    if (cuda == NULL)
        return;
    if (slot->done)
        cuda->event_destroy(slot->done);
    if (slot->started)
        cuda->event_destroy(slot->started);
    if (slot->released)
        cuda->event_destroy(slot->released);
    slot->done = slot->started = slot->released = NULL;
}

int dsc__cuda_slot_wait_copy(dsc_cuda_t *cuda, dsc_cuda_slot_t *slot) {
    if (!slot->copy_pending)
        return 0;
    return check(cuda, cuda->event_synchronize(slot->done), "cudaEventSynchronize");
}

int dsc__cuda_slot_copy(dsc_cuda_t *cuda, dsc_cuda_slot_t *slot, void *dst, const void *src,
                        size_t bytes, double *prev_seconds, uint64_t *prev_bytes) {
    int rc = 0;
    *prev_seconds = 0;
    *prev_bytes = 0;
    if (slot->copy_pending) {
        /* Measured here, before the events are recorded again: the copy is complete (the
         * caller waited for it), whether or not the consumer's work on it has run yet. */
        float ms = 0;
        if (cuda->event_elapsed(&ms, slot->started, slot->done) == CUDA_SUCCESS) {
            *prev_seconds = ms / 1000.0;
            *prev_bytes = slot->copy_bytes;
        }
        slot->copy_pending = 0;
    }
    if (slot->released_recorded)
        rc = check(cuda, cuda->stream_wait_event(cuda->stream, slot->released, 0),
                   "cudaStreamWaitEvent");
    if (rc == 0)
        rc = check(cuda, cuda->event_record(slot->started, cuda->stream), "cudaEventRecord");
    if (rc == 0)
        rc = check(cuda, cuda->memcpy_async(dst, src, bytes, CUDA_MEMCPY_H2D, cuda->stream),
                   "cudaMemcpyAsync");
    if (rc == 0)
        rc = check(cuda, cuda->event_record(slot->done, cuda->stream), "cudaEventRecord");
    if (rc == 0) {
        slot->copy_pending = 1;
        slot->copy_bytes = bytes;
    }
    return rc;
}

int dsc__cuda_slot_hand_out(dsc_cuda_t *cuda, dsc_cuda_slot_t *slot, void *stream) {
    return check(cuda, cuda->stream_wait_event(stream, slot->done, 0), "cudaStreamWaitEvent");
}

int dsc__cuda_slot_release(dsc_cuda_t *cuda, dsc_cuda_slot_t *slot, void *stream) {
    int rc = check(cuda, cuda->event_record(slot->released, stream), "cudaEventRecord");
    if (rc == 0)
        slot->released_recorded = 1;
    return rc;
}
