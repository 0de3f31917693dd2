/* Image codec: format sniffing, JPEG/PNG/WebP decode of images made here, crop geometry
 * (torchvision's Resize + CenterCrop and RandomResizedCrop rules, fallback), alpha dropped or
 * composited, keyed determinism, flip, layouts, limits, and every prefix of a valid file (an
 * error or a decode, never a crash). */
#include "image.h"
#include "jpegenc.h"
#include "testlib.h"

#include "dscache.h"

#include <math.h>
#include <png.h>
#include <webp/encode.h>

#define SW 320
#define SH 240

/* A smooth RGB test picture: red follows x, green y, blue a slow wave. */
static uint8_t *picture(void) {
    uint8_t *p = malloc(SW * SH * 3);
    REQUIRE(p);
    for (int y = 0; y < SH; y++)
        for (int x = 0; x < SW; x++) {
            uint8_t *q = p + ((size_t)y * SW + x) * 3;
            q[0] = (uint8_t)(x * 255 / (SW - 1));
            q[1] = (uint8_t)(y * 255 / (SH - 1));
            q[2] = (uint8_t)(128 + 100 * sin(x / 20.0));
        }
    return p;
}

static uint8_t *make_png(const uint8_t *rgb, size_t *len) {
    png_image image;
    memset(&image, 0, sizeof image);
    image.version = PNG_IMAGE_VERSION;
    image.width = SW;
    image.height = SH;
    image.format = PNG_FORMAT_RGB;
    png_alloc_size_t size = 0;
    REQUIRE(png_image_write_to_memory(&image, NULL, &size, 0, rgb, 0, NULL));
    uint8_t *buf = malloc(size);
    REQUIRE(buf && png_image_write_to_memory(&image, buf, &size, 0, rgb, 0, NULL));
    *len = size;
    return buf;
}

static double mean_abs_diff(const uint8_t *a, const uint8_t *b, size_t n) {
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += abs((int)a[i] - (int)b[i]);
    return sum / n;
}

static dsc_image_spec_t spec_of(int crop, uint32_t h, uint32_t w, int flip, int layout) {
    dsc_image_spec_t spec;
    dsc__image_spec_init(&spec);
    spec.crop = crop;
    spec.height = h;
    spec.width = w;
    spec.flip = flip;
    spec.layout = layout;
    return spec;
}

static void test_sniff(const uint8_t *jpeg, size_t jlen, const uint8_t *png, size_t plen,
                       const uint8_t *webp, size_t wlen) {
    CHECK_EQ_INT(dsc__image_sniff(jpeg, jlen), DSC_IMAGE_JPEG);
    CHECK_EQ_INT(dsc__image_sniff(png, plen), DSC_IMAGE_PNG);
    CHECK_EQ_INT(dsc__image_sniff(webp, wlen), DSC_IMAGE_WEBP);
    CHECK_EQ_INT(dsc__image_sniff("GIF89a", 6), DSC_IMAGE_UNKNOWN);
    CHECK_EQ_INT(dsc__image_sniff(jpeg, 2), DSC_IMAGE_UNKNOWN);
    CHECK(strcmp(dsc__image_format_name(DSC_IMAGE_WEBP), "webp") == 0);
}

/* `none` at the source size returns the source; every format within its codec's loss. */
static void test_decode_formats(dsc_image_ctx_t *ctx, const uint8_t *rgb, const uint8_t *jpeg,
                                size_t jlen, const uint8_t *png, size_t plen, const uint8_t *webp,
                                size_t wlen) {
    dsc_image_spec_t spec = spec_of(DSC_IMAGE_CROP_NONE, SH, SW, 0, DSC_IMAGE_LAYOUT_HWC);
    size_t n = SW * SH * 3;
    uint8_t *out = malloc(n);
    REQUIRE(out);
    CHECK_EQ_INT(dsc__image_decode(ctx, png, plen, &spec, 0, 0, 0, out, n, NULL), 0);
    CHECK(memcmp(out, rgb, n) == 0); /* PNG is lossless and the resize an identity */
    CHECK_EQ_INT(dsc__image_decode(ctx, webp, wlen, &spec, 0, 0, 0, out, n, NULL), 0);
    CHECK(memcmp(out, rgb, n) == 0); /* lossless WebP */
    CHECK_EQ_INT(dsc__image_decode(ctx, jpeg, jlen, &spec, 0, 0, 0, out, n, NULL), 0);
    CHECK(mean_abs_diff(out, rgb, n) < 2.0);
    int format;
    uint32_t w, h;
    CHECK_EQ_INT(dsc__image_info(ctx, jpeg, jlen, &format, &w, &h), 0);
    CHECK(format == DSC_IMAGE_JPEG && w == SW && h == SH);
    /* wrong output size */
    CHECK_EQ_INT(dsc__image_decode(ctx, png, plen, &spec, 0, 0, 0, out, n - 1, NULL), DSC_EINVAL);
    free(out);
}

/* A JPEG decoded at a DCT scale (64x48 out of 320x240: 1/2) stays close to the PNG path. */
static void test_dct_scale(dsc_image_ctx_t *ctx, const uint8_t *jpeg, size_t jlen,
                           const uint8_t *png, size_t plen) {
    dsc_image_spec_t spec = spec_of(DSC_IMAGE_CROP_NONE, 48, 64, 0, DSC_IMAGE_LAYOUT_CHW);
    size_t n = 64 * 48 * 3;
    uint8_t a[64 * 48 * 3], b[64 * 48 * 3];
    CHECK_EQ_INT(dsc__image_decode(ctx, jpeg, jlen, &spec, 0, 0, 0, a, n, NULL), 0);
    CHECK_EQ_INT(dsc__image_decode(ctx, png, plen, &spec, 0, 0, 0, b, n, NULL), 0);
    CHECK(mean_abs_diff(a, b, n) < 2.5);
    /* CHW: the red plane grows left to right */
    CHECK(a[63] > a[0] + 150);
    /* the green plane grows top to bottom */
    CHECK(a[64 * 48 + 47 * 64] > a[64 * 48] + 150);
}

static void test_center_and_layouts(dsc_image_ctx_t *ctx, const uint8_t *png, size_t plen) {
    dsc_image_box_t box;
    dsc_image_spec_t chw = spec_of(DSC_IMAGE_CROP_CENTER, 32, 32, 0, DSC_IMAGE_LAYOUT_CHW);
    dsc_image_spec_t hwc = spec_of(DSC_IMAGE_CROP_CENTER, 32, 32, 0, DSC_IMAGE_LAYOUT_HWC);
    uint8_t a[32 * 32 * 3], b[32 * 32 * 3];
    CHECK_EQ_INT(dsc__image_decode(ctx, png, plen, &chw, 0, 0, 0, a, sizeof a, &box), 0);
    /* Resize(32): 42x32 (int(32 * 320 / 240)); CenterCrop(32) at int(round(10 / 2.0)) = 5 */
    CHECK(box.w == 32 * (SW / 42.0) && box.h == SH && box.x == 5 * (SW / 42.0) && box.y == 0);
    CHECK(box.context == 1);
    CHECK_EQ_INT(dsc__image_decode(ctx, png, plen, &hwc, 0, 0, 0, b, sizeof b, NULL), 0);
    int same = 1;
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 32 * 32; i++)
            same &= a[c * 32 * 32 + i] == b[i * 3 + c];
    CHECK(same);
}

/* torchvision's Resize(s) + CenterCrop((h, w)) geometry, worked out by hand from its code. */
static void test_center_geometry(void) {
    static const struct {
        uint32_t sw, sh, h, w;
        double x, y, bw, bh; /* in resized pixels: scaled below */
        uint32_t new_w, new_h;
    } cases[] = {
        /* 500x375 -> Resize(224): 298x224 (int(224 * 500 / 375) = 298), left round(37.0) */
        {500, 375, 224, 224, 37, 0, 224, 224, 298, 224},
        /* 375x500: 224x298, top 37 */
        {375, 500, 224, 224, 0, 37, 224, 224, 224, 298},
        /* 301x224: no resize (Resize(224) keeps it), left round(38.5) = 38 (halves to even) */
        {301, 224, 224, 224, 38, 0, 224, 224, 301, 224},
        /* 303x224: left round(39.5) = 40 */
        {303, 224, 224, 224, 40, 0, 224, 224, 303, 224},
        /* 640x480 to 96 (h) x 160 (w): s = 120 covers 160 wide (int(120 * 640 / 480) = 160) */
        {640, 480, 96, 160, 0, 12, 160, 96, 160, 120},
        /* a square source */
        {256, 256, 224, 224, 0, 0, 224, 224, 224, 224},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dsc_image_spec_t spec =
            spec_of(DSC_IMAGE_CROP_CENTER, cases[i].h, cases[i].w, 0, DSC_IMAGE_LAYOUT_CHW);
        dsc_image_box_t box;
        dsc__image_plan(&spec, cases[i].sw, cases[i].sh, 0, 0, 0, &box);
        double fx = (double)cases[i].sw / cases[i].new_w, fy = (double)cases[i].sh / cases[i].new_h;
        int ok = fabs(box.x - cases[i].x * fx) < 1e-9 && fabs(box.y - cases[i].y * fy) < 1e-9 &&
                 fabs(box.w - cases[i].bw * fx) < 1e-9 && fabs(box.h - cases[i].bh * fy) < 1e-9;
        if (!ok)
            fprintf(stderr, "center %ux%u -> %ux%u: box %.4f %.4f %.4f %.4f\n", cases[i].sw,
                    cases[i].sh, cases[i].w, cases[i].h, box.x, box.y, box.w, box.h);
        CHECK(ok && box.context == 1);
    }
}

/* 8-bit RGBA or gray+alpha PNG (the simplified writer: colour stored as given). */
static uint8_t *make_png_format(const uint8_t *px, uint32_t w, uint32_t h, uint32_t format,
                                size_t *len) {
    png_image image;
    memset(&image, 0, sizeof image);
    image.version = PNG_IMAGE_VERSION;
    image.width = w;
    image.height = h;
    image.format = format;
    png_alloc_size_t size = 0;
    REQUIRE(png_image_write_to_memory(&image, NULL, &size, 0, px, 0, NULL));
    uint8_t *buf = malloc(size);
    REQUIRE(buf && png_image_write_to_memory(&image, buf, &size, 0, px, 0, NULL));
    *len = size;
    return buf;
}

/* (c * a + bg * (255 - a)) / 255 rounded: PIL's paste with a mask. */
static uint8_t over(uint8_t c, uint8_t a, uint8_t bg) {
    return (uint8_t)floor((c * a + bg * (255.0 - a)) / 255.0 + 0.5);
}

/* Alpha: dropped by default (the colour as stored, PIL's convert("RGB")) for PNG (RGBA, gray +
 * alpha) and WebP alike; composited over spec.background_rgb with spec.background = 1. */
static void test_alpha(dsc_image_ctx_t *ctx) {
    enum { W = 16, H = 8 };
    uint8_t rgba[W * H * 4], ga[W * H * 2];
    for (int i = 0; i < W * H; i++) {
        rgba[4 * i] = (uint8_t)(200 - i);
        rgba[4 * i + 1] = (uint8_t)(i * 2);
        rgba[4 * i + 2] = 90;
        rgba[4 * i + 3] = (uint8_t)(i * 2); /* 0 (transparent) .. 254 */
        ga[2 * i] = (uint8_t)(30 + i);
        ga[2 * i + 1] = (uint8_t)(255 - 2 * i);
    }
    size_t plen = 0, glen = 0;
    uint8_t *png = make_png_format(rgba, W, H, PNG_FORMAT_RGBA, &plen);
    uint8_t *gpng = make_png_format(ga, W, H, PNG_FORMAT_GA, &glen);
    uint8_t *webp = NULL;
    size_t wlen = WebPEncodeLosslessRGBA(rgba, W, H, W * 4, &webp);
    REQUIRE(wlen > 0);
    dsc_image_spec_t spec = spec_of(DSC_IMAGE_CROP_NONE, H, W, 0, DSC_IMAGE_LAYOUT_HWC);
    uint8_t out[W * H * 3];
    const uint8_t *files[] = {png, webp};
    size_t lens[] = {plen, wlen};
    for (int f = 0; f < 2; f++) {
        spec.background = 0;
        CHECK_EQ_INT(
            dsc__image_decode(ctx, files[f], lens[f], &spec, 0, 0, 0, out, sizeof out, NULL), 0);
        int dropped = 1, composited = 1;
        /* (the lossless WebP encoder rewrites the colour of fully transparent pixels) */
        for (int i = 0; i < W * H; i++)
            for (int c = 0; c < 3; c++)
                dropped &= out[3 * i + c] == rgba[4 * i + c] || (f == 1 && rgba[4 * i + 3] == 0);
        spec.background = 1;
        spec.background_rgb[0] = 255;
        spec.background_rgb[1] = 128;
        spec.background_rgb[2] = 0;
        CHECK_EQ_INT(
            dsc__image_decode(ctx, files[f], lens[f], &spec, 0, 0, 0, out, sizeof out, NULL), 0);
        for (int i = 0; i < W * H; i++)
            for (int c = 0; c < 3; c++)
                composited &= out[3 * i + c] ==
                              over(rgba[4 * i + c], rgba[4 * i + 3], spec.background_rgb[c]);
        if (!dropped || !composited)
            fprintf(stderr, "alpha, %s: dropped %d composited %d\n", f ? "webp" : "png", dropped,
                    composited);
        CHECK(dropped && composited);
    }
    /* gray + alpha: gray in the three channels, or composited */
    spec.background = 0;
    CHECK_EQ_INT(dsc__image_decode(ctx, gpng, glen, &spec, 0, 0, 0, out, sizeof out, NULL), 0);
    int gray = 1;
    for (int i = 0; i < W * H; i++)
        gray &=
            out[3 * i] == ga[2 * i] && out[3 * i + 1] == ga[2 * i] && out[3 * i + 2] == ga[2 * i];
    CHECK(gray);
    spec.background = 1;
    CHECK_EQ_INT(dsc__image_decode(ctx, gpng, glen, &spec, 0, 0, 0, out, sizeof out, NULL), 0);
    int gray_over = 1;
    for (int i = 0; i < W * H; i++)
        for (int c = 0; c < 3; c++)
            gray_over &= out[3 * i + c] == over(ga[2 * i], ga[2 * i + 1], spec.background_rgb[c]);
    CHECK(gray_over);
    /* the whole-image decode (ingest's re-encode) drops or composites alike */
    uint8_t *rgb = NULL;
    uint32_t w = 0, h = 0;
    const uint8_t white[3] = {255, 255, 255};
    CHECK_EQ_INT(dsc__image_decode_rgb_over(ctx, png, plen, 0, white, &rgb, &w, &h), 0);
    CHECK(rgb && w == W && h == H && rgb[0] == over(rgba[0], rgba[3], 255));
    free(rgb);
    rgb = NULL;
    CHECK_EQ_INT(dsc__image_decode_rgb(ctx, png, plen, 0, &rgb, &w, &h), 0);
    CHECK(rgb && rgb[0] == rgba[0] && rgb[3] == rgba[4]);
    free(rgb);
    WebPFree(webp);
    free(png);
    free(gpng);
}

static int box_eq(const dsc_image_box_t *a, const dsc_image_box_t *b) {
    return a->x == b->x && a->y == b->y && a->w == b->w && a->h == b->h && a->flip == b->flip;
}

/* Keyed: a pure function of (seed, epoch, index); epochs, indices and seeds differ. */
static void test_plan(void) {
    dsc_image_spec_t spec = spec_of(DSC_IMAGE_CROP_RANDOM_RESIZED, 224, 224, 1, 0);
    dsc_image_box_t a, b;
    int differ_epoch = 0, differ_seed = 0, flips = 0;
    for (uint64_t i = 0; i < 200; i++) {
        dsc__image_plan(&spec, 500, 375, 7, 3, i, &a);
        dsc__image_plan(&spec, 500, 375, 7, 3, i, &b);
        CHECK(box_eq(&a, &b));
        /* inside the image, whole pixels, torchvision's bounds on area and aspect */
        CHECK(a.x >= 0 && a.y >= 0 && a.x + a.w <= 500 && a.y + a.h <= 375);
        CHECK(a.w == floor(a.w) && a.h == floor(a.h) && a.x == floor(a.x));
        double area = a.w * a.h / (500.0 * 375.0), ratio = a.w / a.h;
        /* rounding w and h moves area and aspect a little past the drawn values */
        CHECK(area > 0.08 * 0.97 && area <= 1.0);
        CHECK(ratio > 0.75 * 0.97 && ratio < 4.0 / 3.0 * 1.03);
        flips += a.flip;
        dsc__image_plan(&spec, 500, 375, 7, 4, i, &b);
        differ_epoch += !box_eq(&a, &b);
        dsc__image_plan(&spec, 500, 375, 8, 3, i, &b);
        differ_seed += !box_eq(&a, &b);
    }
    CHECK(differ_epoch > 190 && differ_seed > 190);
    CHECK(flips > 70 && flips < 130); /* p = 1/2 */
    /* the fallback: no box of aspect in [1, 1] with area >= 0.9 fits a 1000x10 image */
    spec.scale[0] = 0.9;
    spec.ratio[0] = spec.ratio[1] = 1.0;
    dsc__image_plan(&spec, 1000, 10, 1, 0, 0, &a);
    CHECK(a.w == 10 && a.h == 10 && a.x == 495 && a.y == 0);
    /* none and center ignore the keys (but flip does not) */
    spec = spec_of(DSC_IMAGE_CROP_NONE, 8, 8, 0, 0);
    dsc__image_plan(&spec, 100, 50, 1, 2, 3, &a);
    CHECK(a.x == 0 && a.y == 0 && a.w == 100 && a.h == 50 && a.flip == 0);
}

/* A flipped sample is the mirror of the unflipped one with the same box. */
static void test_flip(dsc_image_ctx_t *ctx, const uint8_t *png, size_t plen) {
    dsc_image_spec_t with = spec_of(DSC_IMAGE_CROP_RANDOM_RESIZED, 24, 40, 1, 0);
    dsc_image_spec_t without = with;
    without.flip = 0;
    uint8_t a[24 * 40 * 3], b[24 * 40 * 3];
    dsc_image_box_t box;
    uint64_t index = 0;
    for (; index < 64; index++) {
        dsc__image_plan(&with, SW, SH, 5, 0, index, &box);
        if (box.flip)
            break;
    }
    REQUIRE(box.flip);
    CHECK_EQ_INT(dsc__image_decode(ctx, png, plen, &with, 5, 0, index, a, sizeof a, NULL), 0);
    CHECK_EQ_INT(dsc__image_decode(ctx, png, plen, &without, 5, 0, index, b, sizeof b, NULL), 0);
    int mirrored = 1;
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < 24; y++)
            for (int x = 0; x < 40; x++)
                mirrored &= a[(c * 24 + y) * 40 + x] == b[(c * 24 + y) * 40 + 39 - x];
    CHECK(mirrored);
    CHECK(memcmp(a, b, sizeof a) != 0);
}

static void test_bad(dsc_image_ctx_t *ctx, const uint8_t *jpeg, size_t jlen, const uint8_t *png,
                     size_t plen, const uint8_t *webp, size_t wlen) {
    dsc_image_spec_t spec = spec_of(DSC_IMAGE_CROP_RANDOM_RESIZED, 16, 16, 1, 0);
    uint8_t out[16 * 16 * 3];
    CHECK_EQ_INT(dsc__image_decode(ctx, "hello", 5, &spec, 0, 0, 0, out, sizeof out, NULL),
                 DSC_EDECODE);
    CHECK(strstr(dsc__image_error(ctx), "not a JPEG") != NULL);
    /* a JPEG cut in half: "Premature end" */
    CHECK_EQ_INT(dsc__image_decode(ctx, jpeg, jlen / 2, &spec, 0, 0, 0, out, sizeof out, NULL),
                 DSC_EDECODE);
    CHECK(strncmp(dsc__image_error(ctx), "jpeg:", 5) == 0);
    /* every prefix of each format: a decode or DSC_EDECODE, nothing else */
    const uint8_t *files[3] = {jpeg, png, webp};
    size_t lens[3] = {jlen, plen, wlen};
    for (int f = 0; f < 3; f++) {
        int bad = 0;
        for (size_t n = 0; n < lens[f]; n += 1 + n / 64) {
            uint8_t *copy = malloc(n ? n : 1); /* exact size: ASan sees an overread */
            REQUIRE(copy);
            memcpy(copy, files[f], n);
            int rc = dsc__image_decode(ctx, copy, n, &spec, 0, 0, n, out, sizeof out, NULL);
            bad += rc != 0 && rc != DSC_EDECODE;
            if (n < 8)
                CHECK_EQ_INT(rc, DSC_EDECODE);
            free(copy);
        }
        CHECK_EQ_INT(bad, 0);
    }
    /* limits */
    dsc_image_limits_t limits = {.max_pixels = 1000, .max_side = 0};
    dsc_image_ctx_t *small = NULL;
    REQUIRE(dsc__image_ctx_create(&limits, &small) == 0);
    CHECK_EQ_INT(dsc__image_decode(small, png, plen, &spec, 0, 0, 0, out, sizeof out, NULL),
                 DSC_EDECODE);
    CHECK(strstr(dsc__image_error(small), "over the limit") != NULL);
    dsc__image_ctx_destroy(small);
    dsc__image_ctx_destroy(NULL);
    /* specs */
    spec.scale[0] = 0;
    CHECK_EQ_INT(dsc__image_spec_check(&spec), DSC_EINVAL);
    spec = spec_of(DSC_IMAGE_CROP_NONE, 0, 16, 0, 0);
    CHECK_EQ_INT(dsc__image_spec_check(&spec), DSC_EINVAL);
    CHECK(strcmp(dsc_err_name(DSC_EDECODE), "DSC_EDECODE") == 0);
}

/* A stand-in for nvJPEG (dsc_image_region_fn): the full-size decode of another context, and
 * its region copied out; counts its calls and can fail. */
typedef struct region_src {
    dsc_image_ctx_t *ctx;
    int calls, fail;
    uint32_t last_w, last_h;
} region_src_t;

static int region_cpu(void *arg, const void *data, size_t len, uint32_t full_w, uint32_t full_h,
                      uint32_t x0, uint32_t y0, uint32_t w, uint32_t h, uint8_t *rgb, char *why,
                      size_t why_len) {
    region_src_t *src = arg;
    src->calls++;
    src->last_w = w;
    src->last_h = h;
    if (src->fail) {
        snprintf(why, why_len, "refused for the test");
        return DSC_EDECODE;
    }
    uint8_t *full = NULL;
    uint32_t fw = 0, fh = 0;
    int rc = dsc__image_decode_rgb(src->ctx, data, len, 0, &full, &fw, &fh);
    if (rc < 0)
        return rc;
    REQUIRE(fw == full_w && fh == full_h && x0 + w <= fw && y0 + h <= fh);
    for (uint32_t r = 0; r < h; r++)
        memcpy(rgb + (size_t)r * w * 3, full + ((size_t)(y0 + r) * fw + x0) * 3, (size_t)w * 3);
    free(full);
    return 0;
}

/* dsc__image_decode_with: the same box as the codec's own path, pixels within the IDCT's
 * difference, the region no larger than the box's pixels; PNG bypasses it; a
 * refusal falls back to libjpeg. */
static void test_external_jpeg(dsc_image_ctx_t *ctx, const uint8_t *jpeg, size_t jlen,
                               const uint8_t *png, size_t plen) {
    region_src_t src = {0};
    REQUIRE(dsc__image_ctx_create(NULL, &src.ctx) == 0);
    dsc_image_spec_t spec = spec_of(DSC_IMAGE_CROP_RANDOM_RESIZED, 56, 64, 1, DSC_IMAGE_LAYOUT_CHW);
    uint8_t a[64 * 56 * 3], b[64 * 56 * 3];
    for (uint64_t index = 0; index < 20; index++) {
        dsc_image_box_t ba, bb;
        CHECK_EQ_INT(dsc__image_decode(ctx, jpeg, jlen, &spec, 3, 1, index, a, sizeof a, &ba), 0);
        CHECK_EQ_INT(dsc__image_decode_with(ctx, jpeg, jlen, &spec, 3, 1, index, b, sizeof b, &bb,
                                            region_cpu, &src),
                     0);
        CHECK(ba.x == bb.x && ba.y == bb.y && ba.w == bb.w && ba.h == bb.h && ba.flip == bb.flip);
        CHECK(src.last_w <= ceil(bb.w) + 1 && src.last_h <= ceil(bb.h) + 1);
        CHECK(mean_abs_diff(a, b, sizeof a) < 2.0);
    }
    CHECK_EQ_INT(src.calls, 20);
    CHECK_EQ_INT(
        dsc__image_decode_with(ctx, png, plen, &spec, 3, 1, 0, b, sizeof b, NULL, region_cpu, &src),
        0);
    CHECK_EQ_INT(src.calls, 20); /* not a JPEG: the codec's own decoder */
    /* refused by the other decoder: libjpeg's bytes; a truncated file: libjpeg's error */
    src.fail = 1;
    CHECK_EQ_INT(dsc__image_decode(ctx, jpeg, jlen, &spec, 3, 1, 0, a, sizeof a, NULL), 0);
    CHECK_EQ_INT(dsc__image_decode_with(ctx, jpeg, jlen, &spec, 3, 1, 0, b, sizeof b, NULL,
                                        region_cpu, &src),
                 0);
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK_EQ_INT(dsc__image_decode_with(ctx, jpeg, jlen / 2, &spec, 3, 1, 0, b, sizeof b, NULL,
                                        region_cpu, &src),
                 DSC_EDECODE);
    CHECK(strstr(dsc__image_error(ctx), "Premature end") != NULL);
    dsc__image_ctx_destroy(src.ctx);
}

static void test_rgb_and_reencode(dsc_image_ctx_t *ctx, const uint8_t *jpeg, size_t jlen) {
    uint8_t *rgb = NULL, *again = NULL;
    uint32_t w = 0, h = 0;
    CHECK_EQ_INT(dsc__image_decode_rgb(ctx, jpeg, jlen, 100, &rgb, &w, &h), 0);
    if (!rgb)
        fprintf(stderr, "decode_rgb: %s\n", dsc__image_error(ctx));
    CHECK(w == 100 && h == 75);
    size_t len = 0;
    CHECK_EQ_INT(dsc_jpeg_encode(NULL, rgb, w, h, 80, &again, &len), 0);
    int format;
    uint32_t w2, h2;
    CHECK_EQ_INT(dsc__image_info(ctx, again, len, &format, &w2, &h2), 0);
    CHECK(format == DSC_IMAGE_JPEG && w2 == 100 && h2 == 75);
    CHECK_EQ_INT(dsc_jpeg_encode(NULL, rgb, w, h, 0, &again, &len), DSC_EINVAL);
    free(rgb);
    free(again);
}

/* A JPEG without its quantization tables (an abbreviated stream) decodes alike on a fresh
 * context and on one that decoded a complete JPEG before: libjpeg keeps the previous image's
 * tables, which must not fill the gap (the same bytes once gave an image or an error by the
 * order of the files before them). */
static void test_abbreviated(dsc_image_ctx_t *ctx, const uint8_t *jpeg, size_t jlen) {
    uint8_t *cut = malloc(jlen);
    REQUIRE(cut);
    size_t n = 0, i = 2, dropped = 0;
    memcpy(cut, jpeg, 2);
    n = 2;
    while (i + 4 <= jlen && jpeg[i] == 0xFF && jpeg[i + 1] != 0xDA) {
        size_t seg = (size_t)jpeg[i + 2] << 8 | jpeg[i + 3];
        if (jpeg[i + 1] == 0xDB)
            dropped++;
        else {
            memcpy(cut + n, jpeg + i, 2 + seg);
            n += 2 + seg;
        }
        i += 2 + seg;
    }
    memcpy(cut + n, jpeg + i, jlen - i);
    n += jlen - i;
    CHECK(dropped > 0);
    dsc_image_ctx_t *fresh = NULL;
    REQUIRE(dsc__image_ctx_create(NULL, &fresh) == 0);
    dsc_image_spec_t spec;
    dsc__image_spec_init(&spec);
    spec.width = 32;
    spec.height = 24;
    uint8_t a[32 * 24 * 3], b[32 * 24 * 3];
    int rc_fresh = dsc__image_decode(fresh, cut, n, &spec, 1, 0, 0, a, sizeof a, NULL);
    CHECK_EQ_INT(rc_fresh, DSC_EDECODE);
    CHECK_EQ_INT(dsc__image_decode(ctx, jpeg, jlen, &spec, 1, 0, 0, b, sizeof b, NULL), 0);
    CHECK_EQ_INT(dsc__image_decode(ctx, cut, n, &spec, 1, 0, 0, b, sizeof b, NULL), rc_fresh);
    CHECK(strstr(dsc__image_error(ctx), "uantization table") != NULL);
    /* the whole-image path (TurboJPEG's handle) alike */
    uint8_t *rgb = NULL;
    uint32_t w = 0, h = 0;
    CHECK_EQ_INT(dsc__image_decode_rgb(ctx, jpeg, jlen, 100, &rgb, &w, &h), 0);
    free(rgb);
    rgb = NULL;
    CHECK_EQ_INT(dsc__image_decode_rgb(ctx, cut, n, 100, &rgb, &w, &h), DSC_EDECODE);
    free(rgb);
    /* and a complete JPEG still decodes on the context afterwards */
    CHECK_EQ_INT(dsc__image_decode(ctx, jpeg, jlen, &spec, 1, 0, 0, b, sizeof b, NULL), 0);
    dsc__image_ctx_destroy(fresh);
    free(cut);
}

int main(void) {
    uint8_t *rgb = picture();
    dsc_image_ctx_t *ctx = NULL;
    REQUIRE(dsc__image_ctx_create(NULL, &ctx) == 0);
    uint8_t *jpeg = NULL, *webp = NULL;
    size_t jlen = 0, plen = 0;
    REQUIRE(dsc_jpeg_encode(NULL, rgb, SW, SH, 95, &jpeg, &jlen) == 0);
    uint8_t *png = make_png(rgb, &plen);
    size_t wlen = WebPEncodeLosslessRGB(rgb, SW, SH, SW * 3, &webp);
    REQUIRE(wlen > 0);

    test_sniff(jpeg, jlen, png, plen, webp, wlen);
    test_decode_formats(ctx, rgb, jpeg, jlen, png, plen, webp, wlen);
    test_dct_scale(ctx, jpeg, jlen, png, plen);
    test_center_and_layouts(ctx, png, plen);
    test_center_geometry();
    test_alpha(ctx);
    test_plan();
    test_flip(ctx, png, plen);
    test_bad(ctx, jpeg, jlen, png, plen, webp, wlen);
    test_rgb_and_reencode(ctx, jpeg, jlen);
    test_external_jpeg(ctx, jpeg, jlen, png, plen);
    test_abbreviated(ctx, jpeg, jlen);

    WebPFree(webp);
    free(png);
    free(jpeg);
    free(rgb);
    dsc__image_ctx_destroy(ctx);
    return TEST_DONE();
}
