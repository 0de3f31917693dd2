/* The resampler (client/lib/image/resample.c): its SSE2 loops give the bytes of its scalar loops,
 * both stay within 1 of a double-precision evaluation of Pillow's BILINEAR kernel, and the planar
 * and flipped outputs are the interleaved output rearranged; sizes and boxes at random, including
 * sources narrower than the kernel, exact-size source buffers (an overread shows under ASan),
 * and bad arguments. */
#include "resample.h"
#include "testlib.h"

#include "dscache.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(uint32_t n) { /* [0, n) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

static double tri(double x) {
    x = fabs(x);
    return x < 1 ? 1 - x : 0;
}

/* Pillow's algorithm in doubles, no intermediate rounding: out = V . (H . src). */
static void reference(const uint8_t *src, uint32_t sw, uint32_t sh, double x0, double y0, double x1,
                      double y1, double *dst, uint32_t dw, uint32_t dh) {
    double *mid = calloc((size_t)sh * dw * 3, sizeof *mid);
    REQUIRE(mid);
    for (int pass = 0; pass < 2; pass++) {
        uint32_t in_size = pass ? sh : sw, out_size = pass ? dh : dw;
        double in0 = pass ? y0 : x0, in1 = pass ? y1 : x1, scale = (in1 - in0) / out_size;
        double fs = scale < 1 ? 1 : scale, support = fs;
        for (uint32_t i = 0; i < out_size; i++) {
            double center = in0 + (i + 0.5) * scale, total = 0;
            int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);
            lo = lo < 0 ? 0 : lo;
            hi = hi > (int)in_size ? (int)in_size : hi;
            if (hi <= lo) {
                lo = (int)fmin(fmax(floor(center), 0), in_size - 1);
                hi = lo + 1;
            }
            double *w = malloc((size_t)(hi - lo) * sizeof *w);
            REQUIRE(w);
            for (int k = lo; k < hi; k++)
                total += w[k - lo] = tri((k - center + 0.5) / fs);
            for (int k = lo; k < hi; k++)
                w[k - lo] = total ? w[k - lo] / total : (k == lo);
            if (!pass) {
                for (uint32_t y = 0; y < sh; y++)
                    for (int c = 0; c < 3; c++) {
                        double a = 0;
                        for (int k = lo; k < hi; k++)
                            a += w[k - lo] * src[((size_t)y * sw + k) * 3 + c];
                        mid[((size_t)y * dw + i) * 3 + c] = a;
                    }
            } else {
                for (uint32_t x = 0; x < dw; x++)
                    for (int c = 0; c < 3; c++) {
                        double a = 0;
                        for (int k = lo; k < hi; k++)
                            a += w[k - lo] * mid[((size_t)k * dw + x) * 3 + c];
                        dst[((size_t)i * dw + x) * 3 + c] = a;
                    }
            }
            free(w);
        }
    }
    free(mid);
}

static void test_random_cases(void) {
    dsc_resample_scratch_t fast = {0}, slow = {.scalar = 1};
    int worst = 0, mismatches = 0, layout_bad = 0;
    for (int t = 0; t < 300; t++) {
        uint32_t sw = 1 + rnd(t < 20 ? 5 : 400), sh = 1 + rnd(t < 20 ? 5 : 300);
        uint32_t dw = 1 + rnd(t % 3 ? 80 : 260), dh = 1 + rnd(t % 3 ? 80 : 260);
        double x0 = rnd(sw) * 0.5, y0 = rnd(sh) * 0.5;
        if (x0 >= sw)
            x0 = 0;
        if (y0 >= sh)
            y0 = 0;
        double x1 = x0 + (sw - x0) * (1 + rnd(100)) / 100.0,
               y1 = y0 + (sh - y0) * (1 + rnd(100)) / 100.0;
        size_t n = (size_t)sw * sh * 3, out = (size_t)dw * dh * 3;
        uint8_t *src = malloc(n), *a = malloc(out), *b = malloc(out), *p = malloc(out),
                *f = malloc(out);
        double *ref = malloc(out * sizeof *ref);
        REQUIRE(src && a && b && p && f && ref);
        /* a smooth picture with noise and saturated edges: clipping and rounding both happen */
        for (size_t i = 0; i < n; i++)
            src[i] = (uint8_t)(i % 7 == 0 ? 255 * (rnd(2)) : (i * 37 / 11 + rnd(40)) & 0xFF);
        CHECK_EQ_INT(
            dsc__resample_rgb(&fast, src, sw, sh, (size_t)sw * 3, x0, y0, x1, y1, a, dw, dh), 0);
        CHECK_EQ_INT(
            dsc__resample_rgb(&slow, src, sw, sh, (size_t)sw * 3, x0, y0, x1, y1, b, dw, dh), 0);
        mismatches += memcmp(a, b, out) != 0;
        CHECK_EQ_INT(dsc__resample_rgb_to(&fast, src, sw, sh, (size_t)sw * 3, x0, y0, x1, y1, p, dw,
                                          dh, 1, 0),
                     0);
        CHECK_EQ_INT(dsc__resample_rgb_to(&fast, src, sw, sh, (size_t)sw * 3, x0, y0, x1, y1, f, dw,
                                          dh, 1, 1),
                     0);
        reference(src, sw, sh, x0, y0, x1, y1, ref, dw, dh);
        for (uint32_t y = 0; y < dh; y++)
            for (uint32_t x = 0; x < dw; x++)
                for (int c = 0; c < 3; c++) {
                    size_t i = ((size_t)y * dw + x) * 3 + c;
                    double want = fmin(255, fmax(0, ref[i]));
                    int d = (int)ceil(fabs(a[i] - want) - 0.5 - 1e-9);
                    if (d > worst)
                        worst = d;
                    size_t planar = ((size_t)c * dh + y) * dw + x;
                    size_t mirrored = ((size_t)c * dh + y) * dw + (dw - 1 - x);
                    layout_bad += p[planar] != a[i] || f[mirrored] != a[i];
                }
        free(src);
        free(a);
        free(b);
        free(p);
        free(f);
        free(ref);
    }
    CHECK_EQ_INT(mismatches, 0);
    CHECK_EQ_INT(layout_bad, 0);
    /* two rounded passes against one exact evaluation: at most 1 apart */
    CHECK(worst <= 1);
    if (worst > 1)
        fprintf(stderr, "worst |diff| from the double-precision kernel: %d\n", worst);
    dsc__resample_scratch_free(&fast);
    dsc__resample_scratch_free(&slow);
    CHECK_EQ_INT(slow.scalar, 1);
}

static void test_identity_and_bad(void) {
    dsc_resample_scratch_t s = {0};
    uint8_t src[8 * 6 * 3], dst[8 * 6 * 3];
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (uint8_t)(i * 29);
    /* the whole image at its own size: each output is its pixel (weight 1 on one tap) */
    CHECK_EQ_INT(dsc__resample_rgb(&s, src, 8, 6, 24, 0, 0, 8, 6, dst, 8, 6), 0);
    CHECK(memcmp(src, dst, sizeof src) == 0);
    CHECK_EQ_INT(dsc__resample_rgb(&s, src, 8, 6, 24, 0, 0, 9, 6, dst, 8, 6), DSC_EINVAL);
    CHECK_EQ_INT(dsc__resample_rgb(&s, src, 8, 6, 24, 2, 0, 2, 6, dst, 8, 6), DSC_EINVAL);
    CHECK_EQ_INT(dsc__resample_rgb(&s, src, 8, 6, 23, 0, 0, 8, 6, dst, 8, 6), DSC_EINVAL);
    CHECK_EQ_INT(dsc__resample_rgb(&s, NULL, 8, 6, 24, 0, 0, 8, 6, dst, 8, 6), DSC_EINVAL);
    CHECK_EQ_INT(dsc__resample_rgb(&s, src, 8, 6, 24, 0, 0, 8, 6, dst, 0, 6), DSC_EINVAL);
    dsc__resample_scratch_free(&s);
    dsc__resample_scratch_free(NULL);
}

int main(void) {
    test_identity_and_bad();
    test_random_cases();
    return TEST_DONE();
}
