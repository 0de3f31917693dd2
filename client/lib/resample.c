/* Separable fixed-point resampling of RGB u8 (Pillow's ImagingResample with the bilinear
 * filter): per output column/row a window of source pixels and its normalised weights, a
 * horizontal pass over the rows the vertical pass needs, clipped to u8, then the vertical pass. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3") /* the vertical pass vectorises at O3 */
#endif
#include "resample.h"

#include "dscache.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PRECISION_BITS (32 - 8 - 2)

static double triangle(double x) {
    if (x < 0)
        x = -x;
    return x < 1 ? 1 - x : 0;
}

static int reserve(void **buf, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap)
        return 0;
    void *p = realloc(*buf, need * elem);
    if (!p)
        return DSC_ENOMEM;
    *buf = p;
    *cap = need;
    return 0;
}

/* Window and fixed-point weights of each of out_size outputs over [in0, in1) of in_size inputs:
 * bounds[2i] first input, bounds[2i+1] count; coef[i * ksize + k]. Returns ksize or < 0. */
static int coefficients(dsc_resample_scratch_t *s, int32_t **coef_out, int32_t **bounds_out,
                        size_t coef_off, size_t bounds_off, uint32_t in_size, double in0,
                        double in1, uint32_t out_size) {
    double scale = (in1 - in0) / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 1.0 * filterscale;
    int ksize = (int)ceil(support) * 2 + 1;
    if (reserve((void **)&s->coef, &s->coef_cap, coef_off + (size_t)out_size * ksize,
                sizeof *s->coef) < 0 ||
        reserve((void **)&s->bounds, &s->bounds_cap, bounds_off + (size_t)out_size * 2,
                sizeof *s->bounds) < 0 ||
        reserve((void **)&s->weights, &s->weights_cap, (size_t)ksize, sizeof *s->weights) < 0)
        return DSC_ENOMEM;
    double *weights = s->weights;
    int32_t *coef = s->coef + coef_off, *bounds = s->bounds + bounds_off;
    for (uint32_t i = 0; i < out_size; i++) {
        double center = in0 + (i + 0.5) * scale, ss = 1.0 / filterscale, total = 0;
        int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);
        if (lo < 0)
            lo = 0;
        if (hi > (int)in_size)
            hi = (int)in_size;
        int n = hi - lo;
        if (n > ksize)
            n = ksize;
        if (n < 1) { /* a box narrower than the kernel's reach: nearest pixel */
            lo = (int)fmin(fmax(floor(center), 0), in_size - 1);
            n = 1;
        }
        for (int k = 0; k < n; k++) {
            weights[k] = triangle((k + lo - center + 0.5) * ss);
            total += weights[k];
        }
        int32_t *c = coef + (size_t)i * ksize;
        for (int k = 0; k < ksize; k++) {
            double w = k < n ? (total != 0 ? weights[k] / total : (k == 0)) : 0;
            c[k] = (int32_t)(w < 0 ? w * (1 << PRECISION_BITS) - 0.5
                                   : w * (1 << PRECISION_BITS) + 0.5);
        }
        bounds[2 * i] = lo;
        bounds[2 * i + 1] = n;
    }
    *coef_out = coef;
    *bounds_out = bounds;
    return ksize;
}

static inline uint8_t clip8(int32_t v) {
    v >>= PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* rows x dw outputs from rows of the source (stride apart), horizontally. */
static void horizontal(const uint8_t *src, size_t stride, uint32_t rows, const int32_t *coef,
                       const int32_t *bounds, int ksize, uint8_t *dst, uint32_t dw) {
    for (uint32_t r = 0; r < rows; r++) {
        const uint8_t *in = src + (size_t)r * stride;
        uint8_t *out = dst + (size_t)r * dw * 3;
        for (uint32_t i = 0; i < dw; i++) {
            const int32_t *c = coef + (size_t)i * ksize;
            const uint8_t *p = in + (size_t)bounds[2 * i] * 3;
            int n = bounds[2 * i + 1];
            int32_t a = 1 << (PRECISION_BITS - 1), b = a, g = a;
            for (int k = 0; k < n; k++) {
                a += p[3 * k] * c[k];
                g += p[3 * k + 1] * c[k];
                b += p[3 * k + 2] * c[k];
            }
            out[3 * i] = clip8(a);
            out[3 * i + 1] = clip8(g);
            out[3 * i + 2] = clip8(b);
        }
    }
}

/* dh output rows of row_bytes from rows of src (stride apart; src holds rows from row_first on). */
static int vertical(dsc_resample_scratch_t *s, const uint8_t *src, size_t stride,
                    uint32_t row_first, size_t row_bytes, const int32_t *coef,
                    const int32_t *bounds, int ksize, uint8_t *dst, uint32_t dh) {
    if (reserve((void **)&s->acc, &s->acc_cap, row_bytes, sizeof *s->acc) < 0)
        return DSC_ENOMEM;
    int32_t *acc = s->acc;
    for (uint32_t j = 0; j < dh; j++) {
        const int32_t *c = coef + (size_t)j * ksize;
        const uint8_t *base = src + (size_t)(bounds[2 * j] - row_first) * stride;
        int n = bounds[2 * j + 1];
        for (size_t x = 0; x < row_bytes; x++)
            acc[x] = 1 << (PRECISION_BITS - 1);
        for (int k = 0; k < n; k++) {
            const uint8_t *in = base + (size_t)k * stride;
            int32_t w = c[k];
            for (size_t x = 0; x < row_bytes; x++)
                acc[x] += in[x] * w;
        }
        uint8_t *out = dst + (size_t)j * row_bytes;
        for (size_t x = 0; x < row_bytes; x++)
            out[x] = clip8(acc[x]);
    }
    return 0;
}

int dsc__resample_rgb(dsc_resample_scratch_t *s, const uint8_t *src, uint32_t sw, uint32_t sh,
                      size_t src_stride, double x0, double y0, double x1, double y1, uint8_t *dst,
                      uint32_t dw, uint32_t dh) {
    if (!src || !dst || sw < 1 || sh < 1 || dw < 1 || dh < 1 || !(x0 >= 0 && y0 >= 0) ||
        !(x1 > x0 && y1 > y0) || x1 > sw + 1e-6 || y1 > sh + 1e-6)
        return DSC_EINVAL;
    int32_t *hcoef, *hbounds, *vcoef, *vbounds;
    int hk = coefficients(s, &hcoef, &hbounds, 0, 0, sw, x0, x1, dw);
    if (hk < 0)
        return hk;
    size_t hcoef_n = (size_t)dw * hk;
    int vk = coefficients(s, &vcoef, &vbounds, hcoef_n, (size_t)dw * 2, sh, y0, y1, dh);
    if (vk < 0)
        return vk;
    hcoef = s->coef; /* the second call may have moved the arrays */
    hbounds = s->bounds;
    vcoef = s->coef + hcoef_n;
    vbounds = s->bounds + (size_t)dw * 2;
    if (dh < sh) {
        /* Shrinking vertically: the vertical pass first, over whole source rows (contiguous,
         * vectorised), leaves only dh rows for the scalar horizontal pass. Pillow runs the
         * horizontal pass first; the two orders differ only in the intermediate rounding. */
        size_t row_bytes = (size_t)sw * 3;
        if (reserve((void **)&s->temp, &s->temp_cap, (size_t)dh * row_bytes, 1) < 0)
            return DSC_ENOMEM;
        int rc = vertical(s, src, src_stride, 0, row_bytes, vcoef, vbounds, vk, s->temp, dh);
        if (rc < 0)
            return rc;
        horizontal(s->temp, row_bytes, dh, hcoef, hbounds, hk, dst, dw);
        return 0;
    }
    /* the source rows the vertical pass reads */
    uint32_t row_first = (uint32_t)vbounds[0], row_last = 0;
    for (uint32_t i = 0; i < dh; i++) {
        if ((uint32_t)vbounds[2 * i] < row_first)
            row_first = (uint32_t)vbounds[2 * i];
        if ((uint32_t)(vbounds[2 * i] + vbounds[2 * i + 1]) > row_last)
            row_last = (uint32_t)(vbounds[2 * i] + vbounds[2 * i + 1]);
    }
    uint32_t rows = row_last - row_first;
    size_t row_bytes = (size_t)dw * 3;
    if (reserve((void **)&s->temp, &s->temp_cap, (size_t)rows * row_bytes, 1) < 0)
        return DSC_ENOMEM;
    horizontal(src + (size_t)row_first * src_stride, src_stride, rows, hcoef, hbounds, hk, s->temp,
               dw);
    return vertical(s, s->temp, row_bytes, row_first, row_bytes, vcoef, vbounds, vk, dst, dh);
}

void dsc__resample_scratch_free(dsc_resample_scratch_t *s) {
    if (!s)
        return;
    free(s->coef);
    free(s->bounds);
    free(s->temp);
    free(s->weights);
    free(s->acc);
    memset(s, 0, sizeof *s);
}
