/* RGB u8 resampling with the triangle (bilinear) kernel widened by the shrink factor, in 14-bit
 * fixed point (SSE2 where the compiler targets it, else scalar code of the same arithmetic), two
 * separable passes: Pillow's Image.resize(BILINEAR, box=...) algorithm, so that the decode
 * stage's pixels match PIL's (within 1 of Pillow's 22-bit arithmetic, tests/unit). */
#ifndef DSC_RESAMPLE_H
#define DSC_RESAMPLE_H

#include <stddef.h>
#include <stdint.h>

/* Reusable working memory (coefficients, the intermediate image); zero-initialise it, free it
 * with dsc__resample_scratch_free. One thread at a time. */
typedef struct dsc_resample_scratch {
    int16_t *coef;
    int32_t *bounds;
    size_t coef_cap, bounds_cap; /* elements */
    double *weights;
    size_t weights_cap; /* elements */
    uint8_t *temp;
    size_t temp_cap; /* bytes */
    int scalar;      /* 1: the scalar loops even where SSE2 is there (tests compare the two) */
} dsc_resample_scratch_t;

/* Resamples the box [x0, x1) x [y0, y1) (source pixels, fractional allowed, inside the image)
 * of src (sw x sh RGB, rows src_stride bytes apart) to dst (dw x dh RGB, packed). Pixels outside
 * the source are never read: the kernel is renormalised at its edges. Returns 0, or DSC_EINVAL
 * (empty or outside box, zero size), DSC_ENOMEM. */
int dsc__resample_rgb(dsc_resample_scratch_t *scratch, const uint8_t *src, uint32_t sw, uint32_t sh,
                      size_t src_stride, double x0, double y0, double x1, double y1, uint8_t *dst,
                      uint32_t dw, uint32_t dh);
/* As dsc__resample_rgb, writing dst as planar CHW (three dw x dh planes) when planar, and
 * mirrored left-right when flip: the decode stage's output, without another pass over it. */
int dsc__resample_rgb_to(dsc_resample_scratch_t *scratch, const uint8_t *src, uint32_t sw,
                         uint32_t sh, size_t src_stride, double x0, double y0, double x1, double y1,
                         uint8_t *dst, uint32_t dw, uint32_t dh, int planar, int flip);
/* Frees the buffers (keeps `scalar`). NULL is a no-op. */
void dsc__resample_scratch_free(dsc_resample_scratch_t *scratch);

#endif
