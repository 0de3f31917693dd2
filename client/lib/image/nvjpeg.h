/* nvJPEG (part of the CUDA toolkit) loaded at run time with dlopen, as libcudart in cuda.c: the
 * library loads and runs where it is absent. Decodes a JPEG into device memory, RGB interleaved;
 * the loader's decode stage (decode.c) uses it with device="cuda" (docs/loader.md#image-decode). */
#ifndef DSC_NVJPEG_H
#define DSC_NVJPEG_H

#include <stddef.h>
#include <stdint.h>

typedef struct dsc_nvjpeg dsc_nvjpeg_t;

/* Loads libnvjpeg ($DSCACHE_NVJPEG_LIB, else libnvjpeg.so.13/.12/.11/.so) and creates a handle
 * and a decode state. Returns 0 and *out, DSC_ENOTSUP (no library, or a symbol missing),
 * DSC_ENODEVICE (the library refused to create a handle: no usable GPU) or DSC_ENOMEM (also
 * loads libcudart, for the device buffer: DSC_ENOTSUP without it); on
 * failure why (len bytes, NUL-terminated) says which. One thread at a time per handle. */
int dsc__nvjpeg_open(dsc_nvjpeg_t **out, char *why, size_t len);
/* NULL is a no-op. */
void dsc__nvjpeg_close(dsc_nvjpeg_t *nv);
/* The image's size (the first component's). Returns 0 or DSC_EDECODE. */
int dsc__nvjpeg_info(dsc_nvjpeg_t *nv, const void *data, size_t len, uint32_t *width,
                     uint32_t *height);
/* Decodes data into device memory dev (height rows of pitch >= 3 * width bytes, RGB
 * interleaved) on the CUDA stream `stream` (NULL: the legacy default stream); the caller
 * synchronises the stream before reading. Returns 0 or DSC_EDECODE. */
int dsc__nvjpeg_decode_rgbi(dsc_nvjpeg_t *nv, const void *data, size_t len, void *dev, size_t pitch,
                            void *stream);

/* A dsc_image_region_fn (image.h) over nvJPEG, arg the dsc_nvjpeg_t: decodes the image into
 * the handle's device buffer (grown to the image, kept) and copies the region back to rgb (host).
 * The calling thread must have the loader's device current. Returns 0, DSC_EDECODE (why says
 * which step), DSC_ENOMEM (device memory), DSC_ECUDA (the copy). */
int dsc__nvjpeg_decode_region(void *arg, const void *data, size_t len, uint32_t full_w,
                              uint32_t full_h, uint32_t x0, uint32_t y0, uint32_t w, uint32_t h,
                              uint8_t *rgb, char *why, size_t why_len);

#endif
