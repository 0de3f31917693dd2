/* nvJPEG through dlopen (see nvjpeg.h): the few declarations used, written out, so that this
 * builds without the CUDA toolkit's headers. Their values are those of nvjpeg.h (CUDA 11, 12). */
#include "nvjpeg.h"

#include "dscache.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NVJPEG_MAX_COMPONENT 4
#define NVJPEG_STATUS_SUCCESS 0
#define NVJPEG_OUTPUT_RGBI 5

typedef struct nvjpeg_image {
    unsigned char *channel[NVJPEG_MAX_COMPONENT];
    size_t pitch[NVJPEG_MAX_COMPONENT];
} nvjpeg_image_t;

struct dsc_nvjpeg {
    void *lib;
    void *cudart;
    void *dev; /* the decoded image, device memory */
    size_t dev_cap;
    int (*cuda_malloc)(void **ptr, size_t bytes);
    int (*cuda_free)(void *ptr);
    int (*cuda_memcpy2d)(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                         size_t height, int kind);
    void *handle; /* nvjpegHandle_t */
    void *state;  /* nvjpegJpegState_t */
    int (*create_simple)(void **handle);
    int (*destroy)(void *handle);
    int (*state_create)(void *handle, void **state);
    int (*state_destroy)(void *state);
    int (*get_image_info)(void *handle, const unsigned char *data, size_t length, int *components,
                          int *subsampling, int *widths, int *heights);
    int (*decode)(void *handle, void *state, const unsigned char *data, size_t length, int format,
                  nvjpeg_image_t *destination, void *stream);
};

int dsc__nvjpeg_open(dsc_nvjpeg_t **out, char *why, size_t len) {
    static const char *libs[] = {"libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so.11",
                                 "libnvjpeg.so"};
    if (len)
        why[0] = 0;
    dsc_nvjpeg_t *nv = calloc(1, sizeof *nv);
    if (!nv)
        return DSC_ENOMEM;
    const char *env = getenv("DSCACHE_NVJPEG_LIB");
    if (env && *env)
        nv->lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    for (size_t i = 0; !env && i < sizeof libs / sizeof libs[0] && !nv->lib; i++)
        nv->lib = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL);
    int rc = DSC_ENOTSUP;
    if (!nv->lib) {
        snprintf(why, len, "no nvJPEG library (%s) could be loaded",
                 env && *env ? env : "libnvjpeg.so.13/.12/.11");
        goto fail;
    }
    struct {
        void **slot;
        const char *name;
    } syms[] = {{(void **)&nv->create_simple, "nvjpegCreateSimple"},
                {(void **)&nv->destroy, "nvjpegDestroy"},
                {(void **)&nv->state_create, "nvjpegJpegStateCreate"},
                {(void **)&nv->state_destroy, "nvjpegJpegStateDestroy"},
                {(void **)&nv->get_image_info, "nvjpegGetImageInfo"},
                {(void **)&nv->decode, "nvjpegDecode"}};
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++)
        if (!(*syms[i].slot = dlsym(nv->lib, syms[i].name))) {
            snprintf(why, len, "the nvJPEG library lacks %s", syms[i].name);
            goto fail;
        }
    /* the CUDA runtime, for the device buffer and the copy of a region back */
    static const char *cudarts[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so"};
    for (size_t i = 0; i < sizeof cudarts / sizeof cudarts[0] && !nv->cudart; i++)
        nv->cudart = dlopen(cudarts[i], RTLD_NOW | RTLD_LOCAL);
    if (!nv->cudart) {
        snprintf(why, len, "no CUDA runtime (libcudart.so.13/.12) could be loaded");
        goto fail;
    }
    if (!(*(void **)&nv->cuda_malloc = dlsym(nv->cudart, "cudaMalloc")) ||
        !(*(void **)&nv->cuda_free = dlsym(nv->cudart, "cudaFree")) ||
        !(*(void **)&nv->cuda_memcpy2d = dlsym(nv->cudart, "cudaMemcpy2D"))) {
        snprintf(why, len, "the CUDA runtime lacks cudaMalloc/cudaFree/cudaMemcpy2D");
        goto fail;
    }
    int st = nv->create_simple(&nv->handle);
    if (st != NVJPEG_STATUS_SUCCESS) {
        snprintf(why, len, "nvjpegCreateSimple failed (status %d): no usable GPU?", st);
        rc = DSC_ENODEVICE;
        goto fail;
    }
    st = nv->state_create(nv->handle, &nv->state);
    if (st != NVJPEG_STATUS_SUCCESS) {
        snprintf(why, len, "nvjpegJpegStateCreate failed (status %d)", st);
        rc = DSC_ENODEVICE;
        goto fail;
    }
    *out = nv;
    return 0;
fail:
    dsc__nvjpeg_close(nv);
    return rc;
}

void dsc__nvjpeg_close(dsc_nvjpeg_t *nv) {
    if (!nv)
        return;
    if (nv->dev)
        nv->cuda_free(nv->dev);
    if (nv->state)
        nv->state_destroy(nv->state);
    if (nv->handle)
        nv->destroy(nv->handle);
    if (nv->lib)
        dlclose(nv->lib);
    if (nv->cudart)
        dlclose(nv->cudart);
    free(nv);
}

int dsc__nvjpeg_info(dsc_nvjpeg_t *nv, const void *data, size_t len, uint32_t *width,
                     uint32_t *height) {
    int components = 0, subsampling = 0;
    int widths[NVJPEG_MAX_COMPONENT] = {0}, heights[NVJPEG_MAX_COMPONENT] = {0};
    if (nv->get_image_info(nv->handle, data, len, &components, &subsampling, widths, heights) !=
            NVJPEG_STATUS_SUCCESS ||
        widths[0] < 1 || heights[0] < 1)
        return DSC_EDECODE;
    *width = (uint32_t)widths[0];
    *height = (uint32_t)heights[0];
    return 0;
}

int dsc__nvjpeg_decode_rgbi(dsc_nvjpeg_t *nv, const void *data, size_t len, void *dev, size_t pitch,
                            void *stream) {
    nvjpeg_image_t image;
    memset(&image, 0, sizeof image);
    image.channel[0] = dev;
    image.pitch[0] = pitch;
    return nv->decode(nv->handle, nv->state, data, len, NVJPEG_OUTPUT_RGBI, &image, stream) ==
                   NVJPEG_STATUS_SUCCESS
               ? 0
               : DSC_EDECODE;
}

#define CUDA_MEMCPY_DEVICE_TO_HOST 2 /* cudaMemcpyDeviceToHost */

int dsc__nvjpeg_decode_region(void *arg, const void *data, size_t len, uint32_t full_w,
                              uint32_t full_h, uint32_t x0, uint32_t y0, uint32_t w, uint32_t h,
                              uint8_t *rgb, char *why, size_t why_len) {
    dsc_nvjpeg_t *nv = arg;
    uint32_t gw = 0, gh = 0;
    if (dsc__nvjpeg_info(nv, data, len, &gw, &gh) < 0) {
        snprintf(why, why_len, "nvjpegGetImageInfo refused the header");
        return DSC_EDECODE;
    }
    if (gw != full_w || gh != full_h || x0 + w > gw || y0 + h > gh) {
        snprintf(why, why_len, "nvJPEG sees %ux%u, the header says %ux%u", gw, gh, full_w, full_h);
        return DSC_EDECODE;
    }
    size_t pitch = (size_t)gw * 3, need = pitch * gh;
    if (need > nv->dev_cap) {
        if (nv->dev)
            nv->cuda_free(nv->dev);
        nv->dev = NULL;
        nv->dev_cap = 0;
        if (nv->cuda_malloc(&nv->dev, need) != 0 || !nv->dev) {
            nv->dev = NULL;
            snprintf(why, why_len, "cudaMalloc of %zu bytes failed", need);
            return DSC_ENOMEM;
        }
        nv->dev_cap = need;
    }
    /* Both on the legacy default stream: the copy (synchronous for the host) follows the
     * decode. */
    if (dsc__nvjpeg_decode_rgbi(nv, data, len, nv->dev, pitch, NULL) < 0) {
        snprintf(why, why_len, "nvjpegDecode failed");
        return DSC_EDECODE;
    }
    int st = nv->cuda_memcpy2d(rgb, (size_t)w * 3,
                               (uint8_t *)nv->dev + (size_t)y0 * pitch + (size_t)x0 * 3, pitch,
                               (size_t)w * 3, h, CUDA_MEMCPY_DEVICE_TO_HOST);
    if (st != 0) {
        snprintf(why, why_len, "cudaMemcpy2D failed (error %d)", st);
        return DSC_ECUDA;
    }
    return 0;
}
