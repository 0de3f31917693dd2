/* Image codec: JPEG (libjpeg-turbo's TurboJPEG, decoded at the smallest DCT scale that covers
 * the crop), PNG (libpng) and WebP (libwebp) bytes into a fixed-size RGB u8 image, with one
 * resize (resample.c), a crop (center, random-resized, none: torchvision's geometry), a flip and
 * a layout. Alpha is dropped as PIL's convert("RGB") drops it, or composited over a colour. */
#ifndef DSC_IMAGE_H
#define DSC_IMAGE_H

#include "dscache.h"

#include <stddef.h>
#include <stdint.h>

typedef enum dsc_image_format {
    DSC_IMAGE_UNKNOWN = 0,
    DSC_IMAGE_JPEG = 1,
    DSC_IMAGE_PNG = 2,
    DSC_IMAGE_WEBP = 3,
} dsc_image_format_t;

/* dsc_image_crop_t and dsc_image_layout_t: dscache.h. */

/* What one decoded sample becomes. dsc__image_spec_init gives the defaults: 224x224, center,
 * scale [0.08, 1], ratio [3/4, 4/3], no flip, CHW, alpha dropped. */
typedef struct dsc_image_spec {
    uint32_t height, width; /* output size, 1..8192 each */
    int crop;               /* dsc_image_crop_t */
    double scale[2];        /* random_resized: area fraction range, 0 < lo <= hi <= 1 */
    double ratio[2];        /* random_resized: aspect (w/h) range, 0 < lo <= hi */
    int flip;               /* 1: horizontal flip with probability 1/2 (keyed, docs/order.md) */
    int layout;             /* dsc_image_layout_t */
    int background;         /* 0: alpha dropped (the colour channels as stored: PIL's
                               convert("RGB")); 1: composited over background_rgb */
    uint8_t background_rgb[3];
} dsc_image_spec_t;

/* The region of the source image a sample is cut from, in source pixels, and its flip. With
 * context = 1 (crop "center": torchvision's Resize then CenterCrop) the resize reads the pixels
 * around the box too, as a resize of the whole image does; with 0 (random_resized: crop then
 * resize; none) only the box's. */
typedef struct dsc_image_box {
    double x, y, w, h;
    int flip;
    int context;
} dsc_image_box_t;

typedef struct dsc_image_ctx dsc_image_ctx_t;

/* Limits applied to every input (decoded pixel count and side); defaults 64 Mi pixels and
 * 32768. The fuzz target lowers them. */
typedef struct dsc_image_limits {
    uint64_t max_pixels;
    uint32_t max_side;
} dsc_image_limits_t;

void dsc__image_spec_init(dsc_image_spec_t *spec);
/* Returns 0 when spec is usable, else DSC_EINVAL. */
int dsc__image_spec_check(const dsc_image_spec_t *spec);

/* The format named by the first bytes (magic numbers), DSC_IMAGE_UNKNOWN when none. Pure. */
int dsc__image_sniff(const void *data, size_t len);
/* "jpeg", "png", "webp", "unknown". */
const char *dsc__image_format_name(int format);

/* A decoder context: a TurboJPEG handle and scratch buffers, for one thread at a time.
 * limits NULL: the defaults. Returns 0 and *out, or DSC_ENOMEM. */
int dsc__image_ctx_create(const dsc_image_limits_t *limits, dsc_image_ctx_t **out);
/* NULL is a no-op. */
void dsc__image_ctx_destroy(dsc_image_ctx_t *ctx);
/* Why the last failing call on ctx failed ("jpeg: Premature end of JPEG file"); "" after a
 * success. Valid until the next call on ctx. */
const char *dsc__image_error(const dsc_image_ctx_t *ctx);

/* Reads the header only: *format, *width, *height. Returns 0, DSC_EDECODE (not an image of a
 * known format, a corrupt header, over the limits; dsc__image_error says which). */
int dsc__image_info(dsc_image_ctx_t *ctx, const void *data, size_t len, int *format,
                    uint32_t *width, uint32_t *height);

/* The crop and flip of sample `index` in `epoch`: a pure function of (seed, epoch, index),
 * the source size and spec (docs/order.md gives the keyed hash and the draws). */
void dsc__image_plan(const dsc_image_spec_t *spec, uint32_t src_w, uint32_t src_h, uint64_t seed,
                     uint64_t epoch, uint64_t index, dsc_image_box_t *box);

/* Decodes data into out (3 * height * width bytes, spec's layout): crop per dsc__image_plan
 * with (seed, epoch, index), resize, flip. box may be NULL; else it receives the box used.
 * Returns 0, DSC_EINVAL (bad spec or out_len), DSC_EDECODE (dsc__image_error says why),
 * DSC_ENOMEM. out is unspecified after a failure. */
int dsc__image_decode(dsc_image_ctx_t *ctx, const void *data, size_t len,
                      const dsc_image_spec_t *spec, uint64_t seed, uint64_t epoch, uint64_t index,
                      uint8_t *out, size_t out_len, dsc_image_box_t *box);

/* A JPEG decoder outside this module (nvJPEG on the GPU): decodes the full-size image and
 * writes its pixels [x0, x0 + w) x [y0, y0 + h), RGB, rows 3 * w bytes apart, into rgb. Returns
 * 0, DSC_EDECODE (why: len bytes, NUL-terminated) or another DSC_E* code. */
typedef int (*dsc_image_region_fn)(void *arg, const void *data, size_t len, uint32_t full_w,
                                   uint32_t full_h, uint32_t x0, uint32_t y0, uint32_t w,
                                   uint32_t h, uint8_t *rgb, char *why, size_t why_len);

/* As dsc__image_decode, with the JPEG pixels from `region` (the whole pixels the box touches, at
 * full size: no DCT scaling) instead of libjpeg; PNG and WebP decode as there. The crop, resize,
 * flip and layout are the same code: only the IDCT and chroma upsampling differ. A JPEG for
 * which `region` fails (any code) is decoded by libjpeg instead, whose error a bad file gets. */
int dsc__image_decode_with(dsc_image_ctx_t *ctx, const void *data, size_t len,
                           const dsc_image_spec_t *spec, uint64_t seed, uint64_t epoch,
                           uint64_t index, uint8_t *out, size_t out_len, dsc_image_box_t *box,
                           dsc_image_region_fn region, void *region_arg);

/* Decodes the whole image into RGB HWC, shrunk so that its longer side is at most max_side
 * (0: full size; the aspect is kept, the DCT scale used where it covers), alpha dropped. *rgb
 * is malloc'ed (the caller frees it), *width x *height. Returns 0, DSC_EDECODE or DSC_ENOMEM. */
int dsc__image_decode_rgb(dsc_image_ctx_t *ctx, const void *data, size_t len, uint32_t max_side,
                          uint8_t **rgb, uint32_t *width, uint32_t *height);
/* As dsc__image_decode_rgb, with alpha composited over background[0..2] (R, G, B) where
 * background is not NULL. */
int dsc__image_decode_rgb_over(dsc_image_ctx_t *ctx, const void *data, size_t len,
                               uint32_t max_side, const uint8_t *background, uint8_t **rgb,
                               uint32_t *width, uint32_t *height);

/* (Encoding JPEG is the CLI's alone: client/cli/ingest/jpegenc.h, outside libdscache.) */

#endif
