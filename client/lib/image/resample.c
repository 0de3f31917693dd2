/* Separable fixed-point resampling of RGB u8 (Pillow's ImagingResample with the bilinear
 * filter): per output column/row a window of source pixels and its normalised weights in 14-bit
 * fixed point (int16, so that SSE2's pmaddwd multiplies two taps at once), one pass over the rows
 * the other pass needs, clipped to u8, then the other pass, writing HWC or CHW, flipped or not. */
#include "resample.h"

#include "dscache.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#define HAVE_SSE2 1
#else
#define HAVE_SSE2 0
#endif

/* 14 bits: a weight of 1.0 is 16384, inside int16; u8 x weight sums stay far inside int32. */
#define PRECISION_BITS 14
#define ROUND_HALF (1 << (PRECISION_BITS - 1))

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
 * bounds[2i] first input, bounds[2i+1] count; coef[i * taps + k]. Every window gets the same
 * even count of taps (the widest window's, rounded up; a window is moved left where it would pass
 * in_size, its weights shifted, zero weights around them), so that the loops over taps have one
 * trip count per call and the pairs of taps need no odd case. Only where in_size is smaller than
 * that count do windows keep their own, smaller, count. Returns taps or < 0. */
static int coefficients(dsc_resample_scratch_t *s, size_t coef_off, size_t bounds_off,
                        uint32_t in_size, double in0, double in1, uint32_t out_size) {
    double scale = (in1 - in0) / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 1.0 * filterscale, ss = 1.0 / filterscale;
    int ksize = (int)ceil(support) * 2 + 1; /* Pillow's bound on a window */
    if (reserve((void **)&s->bounds, &s->bounds_cap, bounds_off + (size_t)out_size * 2,
                sizeof *s->bounds) < 0 ||
        reserve((void **)&s->weights, &s->weights_cap, (size_t)ksize, sizeof *s->weights) < 0)
        return DSC_ENOMEM;
    int32_t *bounds = s->bounds + bounds_off;
    int widest = 1;
    for (uint32_t i = 0; i < out_size; i++) {
        double center = in0 + (i + 0.5) * scale;
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
        bounds[2 * i] = lo;
        bounds[2 * i + 1] = n;
        if (n > widest)
            widest = n;
    }
    int taps = (widest + 1) & ~1;
    int fixed = (uint32_t)taps <= in_size;
    if (reserve((void **)&s->coef, &s->coef_cap, coef_off + (size_t)out_size * taps,
                sizeof *s->coef) < 0)
        return DSC_ENOMEM;
    double *weights = s->weights;
    int16_t *coef = s->coef + coef_off;
    for (uint32_t i = 0; i < out_size; i++) {
        double center = in0 + (i + 0.5) * scale, total = 0;
        int lo = bounds[2 * i], n = bounds[2 * i + 1];
        for (int k = 0; k < n; k++) {
            weights[k] = triangle((k + lo - center + 0.5) * ss);
            total += weights[k];
        }
        int shift = 0;
        if (fixed) {
            int start = lo + taps > (int)in_size ? (int)in_size - taps : lo;
            shift = lo - start;
            bounds[2 * i] = start;
            bounds[2 * i + 1] = taps;
        }
        int16_t *c = coef + (size_t)i * taps;
        memset(c, 0, (size_t)taps * sizeof *c);
        for (int k = 0; k < n; k++) {
            double w = total != 0 ? weights[k] / total : (k == 0);
            c[k + shift] = (int16_t)(w < 0 ? w * (1 << PRECISION_BITS) - 0.5
                                           : w * (1 << PRECISION_BITS) + 0.5);
        }
    }
    return taps;
}

static inline uint8_t clip8(int32_t v) {
    v >>= PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* Where the horizontal pass puts its output pixels: interleaved (HWC) or three planes
 * plane_stride apart (CHW), mirrored when flip. */
typedef struct out_row {
    uint8_t *base;
    size_t plane_stride; /* 0: interleaved */
    int flip;
} out_row_t;

/* One output pixel as 0x00BBGGRR. */
static inline uint32_t horizontal_pixel_scalar(const uint8_t *p, const int16_t *c, int n) {
    int32_t r = ROUND_HALF, g = ROUND_HALF, b = ROUND_HALF;
    for (int k = 0; k < n; k++) {
        r += p[3 * k] * c[k];
        g += p[3 * k + 1] * c[k];
        b += p[3 * k + 2] * c[k];
    }
    return clip8(r) | (uint32_t)clip8(g) << 8 | (uint32_t)clip8(b) << 16;
}

#if HAVE_SSE2
static inline __m128i load_pixel16(const uint8_t *p) { /* 4 bytes: R G B and the next byte */
    int32_t v;
    memcpy(&v, p, 4);
    return _mm_unpacklo_epi8(_mm_cvtsi32_si128(v), _mm_setzero_si128());
}

/* Taps in pairs: (R0 R1 G0 G1 B0 B1 X0 X1) . (c0 c1 ...) by pmaddwd; an odd window's last
 * pair takes the pixel after it at weight 0 (c holds n rounded up to even weights). Reads the
 * byte after that pair's second pixel: the caller checks that it lies inside the source. TAPS
 * is a constant where the caller knows it, so that the loop unrolls. */
static inline __attribute__((always_inline)) uint32_t
horizontal_pixel_sse2(const uint8_t *p, const int16_t *c, int taps) {
    __m128i acc = _mm_set1_epi32(ROUND_HALF);
    for (int k = 0; k < taps; k += 2) {
        __m128i ab = _mm_unpacklo_epi16(load_pixel16(p + 3 * k), load_pixel16(p + 3 * k + 3));
        int32_t pair;
        memcpy(&pair, c + k, 4);
        acc = _mm_add_epi32(acc, _mm_madd_epi16(ab, _mm_set1_epi32(pair)));
    }
    acc = _mm_srai_epi32(acc, PRECISION_BITS);
    acc = _mm_packs_epi32(acc, acc);
    return (uint32_t)_mm_cvtsi128_si32(_mm_packus_epi16(acc, acc)) & 0xFFFFFFu;
}
#endif

/* One row of dw outputs; taps > 0: every window has that many (coefficients()), else bounds
 * give each its own. */
static inline __attribute__((always_inline)) void
horizontal_row(const dsc_resample_scratch_t *s, const uint8_t *in, const uint8_t *src_end,
               const int16_t *coef, const int32_t *bounds, int stride_c, int taps, uint8_t *o0,
               size_t plane_stride, int flip, uint32_t dw) {
    uint8_t *o1 = o0 + plane_stride, *o2 = o0 + 2 * plane_stride;
    for (uint32_t i = 0; i < dw; i++) {
        const int16_t *c = coef + (size_t)i * stride_c;
        const uint8_t *p = in + (size_t)bounds[2 * i] * 3;
        int n = taps ? taps : bounds[2 * i + 1];
        uint32_t v;
#if HAVE_SSE2
        int pairs = (n + 1) & ~1;
        if (!s->scalar && p + 3 * pairs + 1 <= src_end)
            v = horizontal_pixel_sse2(p, c, taps ? taps : pairs);
        else
#endif
            v = horizontal_pixel_scalar(p, c, n);
        uint32_t x = flip ? dw - 1 - i : i;
        if (plane_stride) {
            o0[x] = (uint8_t)v;
            o1[x] = (uint8_t)(v >> 8);
            o2[x] = (uint8_t)(v >> 16);
        } else {
            memcpy(o0 + (size_t)x * 3, &v, 2);
            o0[(size_t)x * 3 + 2] = (uint8_t)(v >> 16);
        }
    }
    (void)s;
    (void)src_end;
}

/* rows x dw outputs from rows of the source (stride apart, ending at src_end), horizontally;
 * output row r at out.base + r * row_step. */
static void horizontal(const dsc_resample_scratch_t *s, const uint8_t *src, size_t stride,
                       const uint8_t *src_end, uint32_t rows, const int16_t *coef,
                       const int32_t *bounds, int taps, int fixed, out_row_t out, size_t row_step,
                       uint32_t dw) {
    for (uint32_t r = 0; r < rows; r++, out.base += row_step) {
        const uint8_t *in = src + (size_t)r * stride;
        if (!fixed) {
            horizontal_row(s, in, src_end, coef, bounds, taps, 0, out.base, out.plane_stride,
                           out.flip, dw);
            continue;
        }
        switch (taps) { /* the common widths, unrolled */
        case 2:
            horizontal_row(s, in, src_end, coef, bounds, 2, 2, out.base, out.plane_stride, out.flip,
                           dw);
            break;
        case 4:
            horizontal_row(s, in, src_end, coef, bounds, 4, 4, out.base, out.plane_stride, out.flip,
                           dw);
            break;
        case 6:
            horizontal_row(s, in, src_end, coef, bounds, 6, 6, out.base, out.plane_stride, out.flip,
                           dw);
            break;
        default:
            horizontal_row(s, in, src_end, coef, bounds, taps, taps, out.base, out.plane_stride,
                           out.flip, dw);
            break;
        }
    }
}

#if HAVE_SSE2
/* acc0..3 (16 outputs) += rows r0, r1 (16 bytes each at x) . w (c0 c1 in each 32-bit lane). */
#define MADD_PAIR(r0, r1, w)                                                                       \
    do {                                                                                           \
        __m128i l0_ = _mm_unpacklo_epi8(r0, zero), h0_ = _mm_unpackhi_epi8(r0, zero);              \
        __m128i l1_ = _mm_unpacklo_epi8(r1, zero), h1_ = _mm_unpackhi_epi8(r1, zero);              \
        a0 = _mm_add_epi32(a0, _mm_madd_epi16(_mm_unpacklo_epi16(l0_, l1_), w));                   \
        a1 = _mm_add_epi32(a1, _mm_madd_epi16(_mm_unpackhi_epi16(l0_, l1_), w));                   \
        a2 = _mm_add_epi32(a2, _mm_madd_epi16(_mm_unpacklo_epi16(h0_, h1_), w));                   \
        a3 = _mm_add_epi32(a3, _mm_madd_epi16(_mm_unpackhi_epi16(h0_, h1_), w));                   \
    } while (0)
#define MAX_PAIRS 16
#endif

/* One output row of len bytes: sum over k < n of rows[base + k * stride][x] * c[k]. */
static void vertical_row(const dsc_resample_scratch_t *s, const uint8_t *base, size_t stride,
                         const int16_t *c, int n, size_t len, uint8_t *out) {
    size_t x = 0;
#if HAVE_SSE2
    if (!s->scalar && n <= 2 * MAX_PAIRS) {
        /* the weight pairs and row pointers once per row, not per 16 bytes */
        const __m128i zero = _mm_setzero_si128();
        __m128i w[MAX_PAIRS];
        const uint8_t *rows[2 * MAX_PAIRS];
        int full = n / 2, odd = n & 1;
        for (int p = 0; p < full + odd; p++) {
            int k = 2 * p;
            uint32_t pair = (uint16_t)c[k];
            if (k + 1 < n)
                pair |= (uint32_t)(uint16_t)c[k + 1] << 16;
            w[p] = _mm_set1_epi32((int32_t)pair);
            rows[k] = base + (size_t)k * stride;
            rows[k + 1] = k + 1 < n ? base + (size_t)(k + 1) * stride : rows[k];
        }
        for (; x + 16 <= len; x += 16) {
            __m128i a0 = _mm_set1_epi32(ROUND_HALF), a1 = a0, a2 = a0, a3 = a0;
            for (int p = 0; p < full; p++) {
                __m128i r0 = _mm_loadu_si128((const __m128i *)(rows[2 * p] + x));
                __m128i r1 = _mm_loadu_si128((const __m128i *)(rows[2 * p + 1] + x));
                MADD_PAIR(r0, r1, w[p]);
            }
            if (odd) {
                __m128i r0 = _mm_loadu_si128((const __m128i *)(rows[2 * full] + x));
                MADD_PAIR(r0, zero, w[full]);
            }
            a0 = _mm_srai_epi32(a0, PRECISION_BITS);
            a1 = _mm_srai_epi32(a1, PRECISION_BITS);
            a2 = _mm_srai_epi32(a2, PRECISION_BITS);
            a3 = _mm_srai_epi32(a3, PRECISION_BITS);
            __m128i v = _mm_packus_epi16(_mm_packs_epi32(a0, a1), _mm_packs_epi32(a2, a3));
            _mm_storeu_si128((__m128i *)(out + x), v);
        }
    }
#endif
    (void)s;
    for (; x < len; x++) {
        int32_t acc = ROUND_HALF;
        for (int k = 0; k < n; k++)
            acc += base[(size_t)k * stride + x] * c[k];
        out[x] = clip8(acc);
    }
}

/* dh output rows from rows of src (stride apart; src holds rows from row_first on). Each source
 * row holds `segments` runs of seg_len bytes seg_len apart; output row j's run g goes to
 * dst + g * seg_step + j * row_step. */
static void vertical(const dsc_resample_scratch_t *s, const uint8_t *src, size_t stride,
                     uint32_t row_first, const int16_t *coef, const int32_t *bounds, int ksize,
                     uint32_t segments, size_t seg_len, uint8_t *dst, size_t seg_step,
                     size_t row_step, uint32_t dh) {
    for (uint32_t j = 0; j < dh; j++) {
        const int16_t *c = coef + (size_t)j * ksize;
        const uint8_t *base = src + (size_t)(bounds[2 * j] - row_first) * stride;
        int n = bounds[2 * j + 1];
        for (uint32_t g = 0; g < segments; g++)
            vertical_row(s, base + g * seg_len, stride, c, n, seg_len,
                         dst + g * seg_step + (size_t)j * row_step);
    }
}

int dsc__resample_rgb_to(dsc_resample_scratch_t *s, const uint8_t *src, uint32_t sw, uint32_t sh,
                         size_t src_stride, double x0, double y0, double x1, double y1,
                         uint8_t *dst, uint32_t dw, uint32_t dh, int planar, int flip) {
    if (!src || !dst || sw < 1 || sh < 1 || dw < 1 || dh < 1 || !(x0 >= 0 && y0 >= 0) ||
        !(x1 > x0 && y1 > y0) || x1 > sw + 1e-6 || y1 > sh + 1e-6 || src_stride < (size_t)sw * 3)
        return DSC_EINVAL;
    int hk = coefficients(s, 0, 0, sw, x0, x1, dw);
    if (hk < 0)
        return hk;
    size_t hcoef_n = (size_t)dw * hk;
    int vk = coefficients(s, hcoef_n, (size_t)dw * 2, sh, y0, y1, dh);
    if (vk < 0)
        return vk;
    const int16_t *hcoef = s->coef, *vcoef = s->coef + hcoef_n;
    const int32_t *hbounds = s->bounds, *vbounds = s->bounds + (size_t)dw * 2;
    size_t plane = (size_t)dw * dh;
    const uint8_t *src_end = src + (size_t)(sh - 1) * src_stride + (size_t)sw * 3;
    if (dh < sh) {
        /* Shrinking vertically: the vertical pass first, over whole source rows (contiguous,
         * vectorised), leaves only dh rows for the horizontal pass, which writes the output's
         * layout. Pillow runs the horizontal pass first; the two orders differ only in the
         * intermediate rounding. */
        size_t row_bytes = (size_t)sw * 3;
        if (reserve((void **)&s->temp, &s->temp_cap, (size_t)dh * row_bytes, 1) < 0)
            return DSC_ENOMEM;
        vertical(s, src, src_stride, 0, vcoef, vbounds, vk, 1, row_bytes, s->temp, 0, row_bytes,
                 dh);
        out_row_t out = {dst, planar ? plane : 0, flip};
        horizontal(s, s->temp, row_bytes, s->temp + (size_t)dh * row_bytes, dh, hcoef, hbounds, hk,
                   (uint32_t)hk <= sw, out, planar ? dw : (size_t)dw * 3, dw);
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
    /* The intermediate rows hold the output's layout (planar: R, G, B runs of dw per row), so
     * that the vertical pass writes straight into dst. */
    out_row_t mid = {s->temp, planar ? dw : 0, flip};
    horizontal(s, src + (size_t)row_first * src_stride, src_stride, src_end, rows, hcoef, hbounds,
               hk, (uint32_t)hk <= sw, mid, row_bytes, dw);
    if (planar)
        vertical(s, s->temp, row_bytes, row_first, vcoef, vbounds, vk, 3, dw, dst, plane, dw, dh);
    else
        vertical(s, s->temp, row_bytes, row_first, vcoef, vbounds, vk, 1, row_bytes, dst, 0,
                 row_bytes, dh);
    return 0;
}

int dsc__resample_rgb(dsc_resample_scratch_t *s, const uint8_t *src, uint32_t sw, uint32_t sh,
                      size_t src_stride, double x0, double y0, double x1, double y1, uint8_t *dst,
                      uint32_t dw, uint32_t dh) {
    return dsc__resample_rgb_to(s, src, sw, sh, src_stride, x0, y0, x1, y1, dst, dw, dh, 0, 0);
}

void dsc__resample_scratch_free(dsc_resample_scratch_t *s) {
    if (!s)
        return;
    free(s->coef);
    free(s->bounds);
    free(s->temp);
    free(s->weights);
    int scalar = s->scalar;
    memset(s, 0, sizeof *s);
    s->scalar = scalar;
}
