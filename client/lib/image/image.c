/* Image codec: JPEG / PNG / WebP bytes -> RGB u8, one crop + resize + flip, CHW or HWC, with
 * torchvision's crop geometry and PIL's convert("RGB") for alpha, palettes and gray.
 * Decoders: TurboJPEG (libjpeg-turbo), libpng, libwebp. Resize: resample.c (PIL's BILINEAR
 * algorithm, fixed point). */
#include "image.h"
#include "resample.h"

#include "dscache.h"

#include <stdio.h> /* before jpeglib.h, which needs FILE */

#include <jerror.h>
#include <jpeglib.h>

#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#include <webp/decode.h>

#define ERR_LEN 160

typedef struct jpeg_fail {
    struct jpeg_error_mgr mgr;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
} jpeg_fail_t;

struct dsc_image_ctx {
    /* libjpeg's decompressor, created on the first JPEG and reused (jpeg_abort_decompress
     * between images keeps its permanent allocations): the crop decode's path */
    struct jpeg_decompress_struct jpeg;
    jpeg_fail_t jpeg_fail;
    struct jpeg_progress_mgr jpeg_progress;
    int jpeg_ready;
    J_DCT_METHOD jpeg_dct; /* JDCT_IFAST, or JDCT_ISLOW with DSCACHE_JPEG_DCT=accurate */
    double jpeg_cover;     /* 3, or 1 with DSCACHE_JPEG_SCALE=fast: jpeg_denominator */
    tjhandle tj_decode;
    dsc_image_limits_t limits;
    uint8_t *pixels; /* the decoded source, RGB HWC (RGBA while a PNG or WebP decodes) */
    size_t pixels_cap;
    uint8_t *rows; /* libpng's row pointers (png_bytep each) */
    size_t rows_cap;
    dsc_resample_scratch_t resample;
    char error[ERR_LEN];
};

static int grow(uint8_t **buf, size_t *cap, size_t need) {
    if (need <= *cap)
        return 0;
    uint8_t *p = realloc(*buf, need);
    if (!p)
        return DSC_ENOMEM;
    *buf = p;
    *cap = need;
    return 0;
}

__attribute__((format(printf, 2, 3))) static int fail(dsc_image_ctx_t *ctx, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->error, sizeof ctx->error, fmt, ap);
    va_end(ap);
    return DSC_EDECODE;
}

void dsc__image_spec_init(dsc_image_spec_t *spec) {
    memset(spec, 0, sizeof *spec);
    spec->height = spec->width = 224;
    spec->crop = DSC_IMAGE_CROP_CENTER;
    spec->scale[0] = 0.08;
    spec->scale[1] = 1.0;
    spec->ratio[0] = 3.0 / 4.0;
    spec->ratio[1] = 4.0 / 3.0;
    spec->layout = DSC_IMAGE_LAYOUT_CHW;
}

int dsc__image_spec_check(const dsc_image_spec_t *spec) {
    if (!spec || spec->height < 1 || spec->height > 8192 || spec->width < 1 || spec->width > 8192)
        return DSC_EINVAL;
    if (spec->crop < DSC_IMAGE_CROP_CENTER || spec->crop > DSC_IMAGE_CROP_NONE)
        return DSC_EINVAL;
    if (spec->layout != DSC_IMAGE_LAYOUT_CHW && spec->layout != DSC_IMAGE_LAYOUT_HWC)
        return DSC_EINVAL;
    if (spec->crop == DSC_IMAGE_CROP_RANDOM_RESIZED &&
        !(spec->scale[0] > 0 && spec->scale[0] <= spec->scale[1] && spec->scale[1] <= 1 &&
          spec->ratio[0] > 0 && spec->ratio[0] <= spec->ratio[1] && isfinite(spec->ratio[1])))
        return DSC_EINVAL;
    return 0;
}

int dsc__image_sniff(const void *data, size_t len) {
    const uint8_t *p = data;
    if (len >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF)
        return DSC_IMAGE_JPEG;
    if (len >= 8 && memcmp(p, "\x89PNG\r\n\x1a\n", 8) == 0)
        return DSC_IMAGE_PNG;
    if (len >= 12 && memcmp(p, "RIFF", 4) == 0 && memcmp(p + 8, "WEBP", 4) == 0)
        return DSC_IMAGE_WEBP;
    return DSC_IMAGE_UNKNOWN;
}

const char *dsc__image_format_name(int format) {
    switch (format) {
    case DSC_IMAGE_JPEG:
        return "jpeg";
    case DSC_IMAGE_PNG:
        return "png";
    case DSC_IMAGE_WEBP:
        return "webp";
    default:
        return "unknown";
    }
}

int dsc__image_ctx_create(const dsc_image_limits_t *limits, dsc_image_ctx_t **out) {
    dsc_image_ctx_t *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return DSC_ENOMEM;
    ctx->limits.max_pixels = 64ull << 20;
    ctx->limits.max_side = 32768;
    if (limits) {
        if (limits->max_pixels)
            ctx->limits.max_pixels = limits->max_pixels;
        if (limits->max_side)
            ctx->limits.max_side = limits->max_side;
    }
    /* The fast integer IDCT by default (as TensorFlow's decode_jpeg): mean |diff| about 1 of 255
     * against the accurate one (docs/loader.md#image-decode gives the measured tolerance). */
    const char *dct = getenv("DSCACHE_JPEG_DCT");
    ctx->jpeg_dct =
        dct && (!strcmp(dct, "accurate") || !strcmp(dct, "islow")) ? JDCT_ISLOW : JDCT_IFAST;
    const char *scale = getenv("DSCACHE_JPEG_SCALE");
    ctx->jpeg_cover = scale && !strcmp(scale, "fast") ? 1.0 : 3.0;
    ctx->tj_decode = tjInitDecompress();
    if (!ctx->tj_decode) {
        free(ctx);
        return DSC_ENOMEM;
    }
    *out = ctx;
    return 0;
}

void dsc__image_ctx_destroy(dsc_image_ctx_t *ctx) {
    if (!ctx)
        return;
    if (ctx->jpeg_ready)
        jpeg_destroy_decompress(&ctx->jpeg);
    if (ctx->tj_decode)
        tjDestroy(ctx->tj_decode);
    free(ctx->pixels);
    free(ctx->rows);
    dsc__resample_scratch_free(&ctx->resample);
    free(ctx);
}

const char *dsc__image_error(const dsc_image_ctx_t *ctx) {
    return ctx->error;
}

static int check_size(dsc_image_ctx_t *ctx, const char *what, uint64_t w, uint64_t h) {
    if (w < 1 || h < 1)
        return fail(ctx, "%s: empty image (%llux%llu)", what, (unsigned long long)w,
                    (unsigned long long)h);
    if (w > ctx->limits.max_side || h > ctx->limits.max_side || w * h > ctx->limits.max_pixels)
        return fail(ctx, "%s: %llux%llu is over the limit (%u per side, %llu pixels)", what,
                    (unsigned long long)w, (unsigned long long)h, ctx->limits.max_side,
                    (unsigned long long)ctx->limits.max_pixels);
    return 0;
}

/* ---- Headers ---------------------------------------------------------------------------- */

/* libjpeg keeps the quantization and Huffman tables of one image in its decompressor for the
 * next (the abbreviated datastreams of JPEG's "tables-only" mode rely on it), so a reused
 * decompressor fills a stream's missing table with the previous image's: the same bytes
 * would decode differently, or decode instead of failing, depending on what came before.
 * Returns 1 when every table the frame and its scans use is defined in the stream itself
 * before the scan that uses it; 0 when one is not, the coding is arithmetic (its conditioning
 * tables persist too), or the markers cannot be followed: the caller then decodes with a
 * fresh decompressor, as libjpeg decodes the file alone (an error, or the standard Huffman
 * tables of motion JPEG). Only markers are read: a scan's entropy-coded bytes are skipped. */
static int jpeg_self_contained(const uint8_t *p, size_t n) {
    if (n < 4 || p[0] != 0xFF || p[1] != 0xD8)
        return 1; /* not a JPEG stream: the header fails alike either way */
    unsigned quant = 0, huff = 0, need_quant = 0; /* huff: bit class * 4 + id */
    size_t i = 2;
    while (i + 4 <= n) {
        if (p[i] != 0xFF)
            return 0;
        uint8_t m = p[i + 1];
        if (m == 0xFF) { /* fill byte */
            i++;
            continue;
        }
        if (m == 0xD9)
            return 1;
        if ((m >= 0xD0 && m <= 0xD7) || m == 0x01) {
            i += 2;
            continue;
        }
        size_t seg = (size_t)p[i + 2] << 8 | p[i + 3];
        if (seg < 2 || seg > n - i - 2)
            return 0;
        const uint8_t *s = p + i + 4;
        size_t len = seg - 2;
        if (m == 0xDB) { /* DQT: (precision << 4 | id) then 64 or 128 bytes, repeated */
            for (size_t k = 0; k < len; k += 1 + ((s[k] >> 4) ? 128 : 64)) {
                if ((s[k] & 15) > 3)
                    return 0;
                quant |= 1u << (s[k] & 15);
            }
        } else if (m == 0xC4) { /* DHT: (class << 4 | id), 16 counts, the symbols */
            for (size_t k = 0; k < len;) {
                if (len - k < 17 || (s[k] >> 4) > 1 || (s[k] & 15) > 3)
                    return 0;
                size_t symbols = 0;
                for (int b = 1; b <= 16; b++)
                    symbols += s[k + b];
                huff |= 1u << ((s[k] >> 4) * 4 + (s[k] & 15));
                k += 17 + symbols;
            }
        } else if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
            if (m >= 0xC9 || len < 6 || len < 6 + 3 * (size_t)s[5])
                return 0; /* arithmetic coding, or a frame header cut short */
            for (unsigned c = 0; c < s[5]; c++) {
                if (s[6 + 3 * c + 2] > 3)
                    return 0;
                need_quant |= 1u << s[6 + 3 * c + 2];
            }
        } else if (m == 0xDA) { /* SOS: the tables its components use must exist by now */
            if (need_quant & ~quant || len < 1 || len < 1 + 2 * (size_t)s[0] + 3)
                return 0;
            unsigned ss = s[1 + 2 * s[0]], se = s[2 + 2 * s[0]];
            for (unsigned c = 0; c < s[0]; c++) {
                unsigned td = s[2 + 2 * c] >> 4, ta = s[2 + 2 * c] & 15;
                if ((ss == 0 && (td > 3 || !(huff >> td & 1))) ||
                    (se > 0 && (ta > 3 || !(huff >> (4 + ta) & 1))))
                    return 0;
            }
            /* past the entropy-coded bytes: to the next marker that is not a stuffed 0xFF00, a
             * restart marker or a fill byte */
            for (i += 2 + seg; i + 1 < n; i++) {
                const uint8_t *ff = memchr(p + i, 0xFF, n - 1 - i);
                if (!ff)
                    return 1; /* no marker after the scan: the decoder says what is missing */
                i = (size_t)(ff - p);
                if (p[i + 1] != 0 && p[i + 1] != 0xFF && !(p[i + 1] >= 0xD0 && p[i + 1] <= 0xD7))
                    break;
            }
            continue;
        }
        i += 2 + seg;
    }
    return 1;
}

/* A TurboJPEG handle that failed part-way through a header can refuse the next, valid file
 * ("Bogus DQT index", libjpeg-turbo 2.1): a failed handle is replaced. Returns DSC_EDECODE, or
 * DSC_ENOMEM when no new handle could be made (the next call retries). */
static int tj_reset(dsc_image_ctx_t *ctx) {
    if (ctx->tj_decode)
        tjDestroy(ctx->tj_decode);
    ctx->tj_decode = tjInitDecompress();
    return ctx->tj_decode ? DSC_EDECODE : DSC_ENOMEM;
}

static int jpeg_header(dsc_image_ctx_t *ctx, const void *data, size_t len, uint32_t *w,
                       uint32_t *h) {
    int width, height, subsamp, colorspace;
    if (!ctx->tj_decode && !(ctx->tj_decode = tjInitDecompress()))
        return DSC_ENOMEM;
    if (len > 0xFFFFFFFFul)
        return fail(ctx, "jpeg: %zu bytes is too large", len);
    if (!jpeg_self_contained(data, len) && tj_reset(ctx) == DSC_ENOMEM)
        return DSC_ENOMEM;
    if (tjDecompressHeader3(ctx->tj_decode, data, (unsigned long)len, &width, &height, &subsamp,
                            &colorspace) != 0) {
        fail(ctx, "jpeg: %s", tjGetErrorStr2(ctx->tj_decode));
        return tj_reset(ctx);
    }
    if (colorspace == TJCS_CMYK || colorspace == TJCS_YCCK)
        return fail(ctx, "jpeg: CMYK/YCCK images are not supported");
    *w = (uint32_t)width;
    *h = (uint32_t)height;
    return check_size(ctx, "jpeg", *w, *h);
}

static int png_header(dsc_image_ctx_t *ctx, png_image *image, const void *data, size_t len) {
    memset(image, 0, sizeof *image);
    image->version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(image, data, len)) {
        int rc = fail(ctx, "png: %s", image->message);
        png_image_free(image);
        return rc;
    }
    int rc = check_size(ctx, "png", image->width, image->height);
    if (rc < 0)
        png_image_free(image);
    return rc;
}

static int webp_header(dsc_image_ctx_t *ctx, const void *data, size_t len, uint32_t *w, uint32_t *h,
                       int *has_alpha) {
    WebPBitstreamFeatures features;
    if (WebPGetFeatures(data, len, &features) != VP8_STATUS_OK)
        return fail(ctx, "webp: not a valid WebP header");
    if (features.has_animation)
        return fail(ctx, "webp: animated images are not supported");
    *w = (uint32_t)features.width;
    *h = (uint32_t)features.height;
    if (has_alpha)
        *has_alpha = features.has_alpha;
    return check_size(ctx, "webp", *w, *h);
}

int dsc__image_info(dsc_image_ctx_t *ctx, const void *data, size_t len, int *format,
                    uint32_t *width, uint32_t *height) {
    ctx->error[0] = 0;
    int fmt = dsc__image_sniff(data, len);
    *format = fmt;
    switch (fmt) {
    case DSC_IMAGE_JPEG:
        return jpeg_header(ctx, data, len, width, height);
    case DSC_IMAGE_WEBP:
        return webp_header(ctx, data, len, width, height, NULL);
    case DSC_IMAGE_PNG: {
        png_image image;
        int rc = png_header(ctx, &image, data, len);
        if (rc < 0)
            return rc;
        *width = image.width;
        *height = image.height;
        png_image_free(&image);
        return 0;
    }
    default:
        return fail(ctx, "not a JPEG, PNG or WebP image (%zu bytes, first byte 0x%02x)", len,
                    len ? ((const uint8_t *)data)[0] : 0);
    }
}

/* ---- The keyed draws (docs/order.md, "Image augmentation") ----------------------------- */

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

#define IMAGE_TAG 0x494D414745ull /* "IMAGE" */
#define GOLDEN 0x9E3779B97F4A7C15ull

static uint64_t draw(uint64_t key, uint64_t k) {
    return mix64(key + (k + 1) * GOLDEN);
}
static double draw_unit(uint64_t key, uint64_t k) { /* [0, 1) */
    return (double)(draw(key, k) >> 11) * 0x1.0p-53;
}
static uint64_t draw_below(uint64_t key, uint64_t k, uint64_t n) { /* [0, n) */
    return (uint64_t)(((unsigned __int128)draw(key, k) * n) >> 64);
}

/* int(s * long / short) as Python computes it: the exact product, one rounded division. */
static uint64_t resized_long(uint64_t s, uint32_t long_side, uint32_t short_side) {
    return (uint64_t)((double)(s * long_side) / short_side);
}

/* int(round((resized - out) / 2.0)): a half rounds to the even neighbour. */
static double center_offset(uint64_t resized, uint32_t out) {
    uint64_t d = resized - out, k = d / 2;
    if (d % 2 == 1 && k % 2 == 1)
        k++;
    return (double)k;
}

void dsc__image_plan(const dsc_image_spec_t *spec, uint32_t src_w, uint32_t src_h, uint64_t seed,
                     uint64_t epoch, uint64_t index, dsc_image_box_t *box) {
    uint64_t key = mix64(mix64(mix64(seed ^ IMAGE_TAG) ^ epoch) ^ index);
    double W = src_w, H = src_h;
    box->flip = spec->flip ? (int)(draw(key, 40) >> 63) : 0;
    box->context = 0;
    if (spec->crop == DSC_IMAGE_CROP_NONE) {
        box->x = box->y = 0;
        box->w = W;
        box->h = H;
        return;
    }
    if (spec->crop == DSC_IMAGE_CROP_CENTER) {
        /* torchvision's Resize(s) + CenterCrop((height, width)): the shorter side resized to s,
         * the longer to int(s * long / short) (Python's int of a float quotient); s the
         * smallest at which that covers the output (s = height = width for a square output:
         * Resize(S) + CenterCrop(S)); the crop at int(round((resized - out) / 2.0)), Python's
         * round (halves to even). The box is that crop in source pixels; the resize reads
         * around it as a resize of the whole image does (context). */
        int w_short = src_w <= src_h;
        uint32_t short_side = w_short ? src_w : src_h, long_side = w_short ? src_h : src_w;
        uint32_t need_short = w_short ? spec->width : spec->height;
        uint32_t need_long = w_short ? spec->height : spec->width;
        uint64_t s = ((uint64_t)need_long * short_side + long_side - 1) / long_side;
        if (s < need_short)
            s = need_short;
        while (resized_long(s, long_side, short_side) < need_long)
            s++;
        uint64_t resized_l = resized_long(s, long_side, short_side);
        uint64_t new_w = w_short ? s : resized_l, new_h = w_short ? resized_l : s;
        double fx = W / (double)new_w, fy = H / (double)new_h;
        box->x = center_offset(new_w, spec->width) * fx;
        box->y = center_offset(new_h, spec->height) * fy;
        box->w = spec->width * fx;
        box->h = spec->height * fy;
        box->context = 1;
        return;
    }
    /* torchvision RandomResizedCrop.get_params: 10 tries, then the centred fallback. */
    double area = W * H, log_lo = log(spec->ratio[0]), log_hi = log(spec->ratio[1]);
    for (uint64_t t = 0; t < 10; t++) {
        double target =
            area * (spec->scale[0] + (spec->scale[1] - spec->scale[0]) * draw_unit(key, 4 * t));
        double aspect = exp(log_lo + (log_hi - log_lo) * draw_unit(key, 4 * t + 1));
        double w = round(sqrt(target * aspect)), h = round(sqrt(target / aspect));
        if (w > 0 && w <= W && h > 0 && h <= H) {
            box->y = (double)draw_below(key, 4 * t + 2, (uint64_t)(H - h) + 1);
            box->x = (double)draw_below(key, 4 * t + 3, (uint64_t)(W - w) + 1);
            box->w = w;
            box->h = h;
            return;
        }
    }
    double in_ratio = W / H, w = W, h = H;
    if (in_ratio < spec->ratio[0]) {
        h = round(w / spec->ratio[0]);
    } else if (in_ratio > spec->ratio[1]) {
        w = round(h * spec->ratio[1]);
    }
    if (h < 1)
        h = 1;
    if (w < 1)
        w = 1;
    box->w = w;
    box->h = h;
    box->x = floor((W - w) / 2);
    box->y = floor((H - h) / 2);
}

/* The pixels a resize of a box bw x bh to ow x oh reads on each side of it (context): the
 * bilinear kernel's reach, max(1, bw / ow) source pixels (resample.c), rounded up, plus one. */
static double context_margin(double bw, uint32_t ow) {
    return ceil(fmax(1.0, bw / ow)) + 1;
}

/* ---- Full decodes into ctx->pixels ------------------------------------------------------ */

/* The largest DCT denominator (1, 2, 4, 8) at which the region w x h still has at least
 * ctx->jpeg_cover times need_w x need_h pixels. TurboJPEG's scaled size is ceil(size * 1/d). The
 * IDCT's own shrink is close to a box filter, not PIL's bilinear one: measured on photos against
 * PIL's resize of the full decode (tests/python/test_image_torchvision.py), a scaled region of 1
 * to 2 times the output differed by up to mean 3.2, p99 20 of 255, of 2 to 3 times by up to mean
 * 2.0, p99 13, of 3 times or more by at most mean 0.9, p99 5: the default cover is 3;
 * DSCACHE_JPEG_SCALE=fast sets 1 (faster, farther from torchvision; docs/loader.md). */
static int jpeg_denominator(const dsc_image_ctx_t *ctx, double w, double h, uint32_t need_w,
                            uint32_t need_h) {
    int d = 8;
    while (d > 1 && (w / d < ctx->jpeg_cover * need_w || h / d < ctx->jpeg_cover * need_h))
        d /= 2;
    return d;
}

/* Decodes into ctx->pixels at 1/denom: *w x *h RGB. */
static int jpeg_decode(dsc_image_ctx_t *ctx, const void *data, size_t len, int denom, uint32_t *w,
                       uint32_t *h) {
    uint32_t full_w, full_h;
    int rc = jpeg_header(ctx, data, len, &full_w, &full_h);
    if (rc < 0)
        return rc;
    uint32_t sw = (uint32_t)TJSCALED(full_w, ((tjscalingfactor){1, denom}));
    uint32_t sh = (uint32_t)TJSCALED(full_h, ((tjscalingfactor){1, denom}));
    if (grow(&ctx->pixels, &ctx->pixels_cap, (size_t)sw * sh * 3) < 0)
        return DSC_ENOMEM;
    if (tjDecompress2(ctx->tj_decode, data, (unsigned long)len, ctx->pixels, (int)sw, (int)sw * 3,
                      (int)sh, TJPF_RGB, TJFLAG_LIMITSCANS) != 0) {
        /* A warning (corrupt data the decoder recovered from) is accepted, except a missing
         * end: a truncated file, which PIL refuses too. */
        const char *msg = tjGetErrorStr2(ctx->tj_decode);
        if (tjGetErrorCode(ctx->tj_decode) != TJERR_WARNING || strstr(msg, "Premature end")) {
            fail(ctx, "jpeg: %s", msg);
            return tj_reset(ctx);
        }
    }
    *w = sw;
    *h = sh;
    return 0;
}

/* ---- JPEG, only the crop: libjpeg's API (jpeg_crop_scanline, jpeg_skip_scanlines) ------ */

static void jpeg_on_error(j_common_ptr cinfo) {
    jpeg_fail_t *f = (jpeg_fail_t *)(void *)cinfo->err;
    f->mgr.format_message(cinfo, f->message);
    longjmp(f->jump, 1);
}

/* A progressive file of more scans than any encoder writes is refused (TurboJPEG's
 * TJFLAG_LIMITSCANS): each scan re-reads the coefficients, so a crafted file costs quadratic
 * time otherwise. */
static void jpeg_on_progress(j_common_ptr cinfo) {
    j_decompress_ptr d = (j_decompress_ptr)(void *)cinfo;
    if (d->is_decompressor && d->input_scan_number > 500) {
        jpeg_fail_t *f = (jpeg_fail_t *)(void *)cinfo->err;
        snprintf(f->message, sizeof f->message, "more than 500 scans");
        longjmp(f->jump, 1);
    }
}

/* Warnings (level -1) are recovered damage, accepted as PIL accepts them, except a missing end:
 * a truncated file fails as with TurboJPEG above. Trace messages (level >= 0) are dropped. */
static void jpeg_on_message(j_common_ptr cinfo, int level) {
    if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF)
        jpeg_on_error(cinfo);
}

/* Reads the header (once), plans the crop (dsc__image_plan: *box, the full size in *full_w x
 * *full_h), and decodes the box's rows and columns at the smallest DCT scale 1/d that covers it
 * into ctx->pixels: the scaled image is *sw x *sh; the buffer holds its columns [*ox, *ox + *pw)
 * and rows [*oy, *oy + *ph) (rows below the crop are never decoded, rows above are
 * entropy-decoded only, columns outside the iMCU columns the crop touches are skipped).
 * Returns 0, DSC_EDECODE or DSC_ENOMEM. */
static int jpeg_decode_planned(dsc_image_ctx_t *ctx, const void *data, size_t len,
                               const dsc_image_spec_t *spec, uint64_t seed, uint64_t epoch,
                               uint64_t index, dsc_image_box_t *box, uint32_t *full_w,
                               uint32_t *full_h, uint32_t *sw, uint32_t *sh, uint32_t *ox,
                               uint32_t *oy, uint32_t *pw, uint32_t *ph) {
    if (len > 0xFFFFFFFFul)
        return fail(ctx, "jpeg: %zu bytes is too large", len);
    j_decompress_ptr cinfo = &ctx->jpeg;
    jpeg_fail_t *jf = &ctx->jpeg_fail;
    if (ctx->jpeg_ready && !jpeg_self_contained(data, len)) {
        jpeg_destroy_decompress(cinfo); /* no table of the previous image may fill a gap */
        ctx->jpeg_ready = 0;
    }
    if (!ctx->jpeg_ready) {
        memset(cinfo, 0, sizeof *cinfo);
        cinfo->err = jpeg_std_error(&jf->mgr);
        jf->mgr.error_exit = jpeg_on_error;
        jf->mgr.emit_message = jpeg_on_message;
        if (setjmp(jf->jump)) /* out of memory in jpeg_create_decompress */
            return DSC_ENOMEM;
        jpeg_create_decompress(cinfo);
        ctx->jpeg_progress.progress_monitor = jpeg_on_progress;
        ctx->jpeg_ready = 1;
    }
    jf->message[0] = 0;
    volatile int rc = 0;
    if (setjmp(jf->jump)) {
        jpeg_abort_decompress(cinfo);
        return rc ? rc : fail(ctx, "jpeg: %s", jf->message[0] ? jf->message : "?");
    }
    jpeg_mem_src(cinfo, data, (unsigned long)len);
    jpeg_read_header(cinfo, TRUE);
    if (cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK) {
        rc = fail(ctx, "jpeg: CMYK/YCCK images are not supported");
        longjmp(jf->jump, 1);
    }
    *full_w = cinfo->image_width;
    *full_h = cinfo->image_height;
    if ((rc = check_size(ctx, "jpeg", *full_w, *full_h)) < 0)
        longjmp(jf->jump, 1);
    dsc__image_plan(spec, *full_w, *full_h, seed, epoch, index, box);
    cinfo->out_color_space = JCS_RGB;
    cinfo->dct_method = ctx->jpeg_dct;
    cinfo->scale_num = 1;
    cinfo->scale_denom = (unsigned)jpeg_denominator(ctx, box->w, box->h, spec->width, spec->height);
    cinfo->progress = &ctx->jpeg_progress;
    jpeg_start_decompress(cinfo);
    *sw = cinfo->output_width;
    *sh = cinfo->output_height;
    double fx = (double)*sw / *full_w, fy = (double)*sh / *full_h;
    double mx = box->context ? context_margin(box->w * fx, spec->width) : 0;
    double my = box->context ? context_margin(box->h * fy, spec->height) : 0;
    uint32_t x0 = (uint32_t)fmax(0, floor(box->x * fx) - mx);
    uint32_t x1 = (uint32_t)fmin(*sw, ceil((box->x + box->w) * fx) + mx);
    uint32_t y0 = (uint32_t)fmax(0, floor(box->y * fy) - my);
    uint32_t y1 = (uint32_t)fmin(*sh, ceil((box->y + box->h) * fy) + my);
    if (x1 <= x0)
        x1 = x0 + 1 <= *sw ? x0 + 1 : *sw;
    if (y1 <= y0)
        y1 = y0 + 1 <= *sh ? y0 + 1 : *sh;
    JDIMENSION xoff = x0, width = x1 - x0;
    if (width < *sw)
        jpeg_crop_scanline(cinfo, &xoff, &width);
    *ox = xoff;
    *pw = width;
    *oy = y0;
    *ph = y1 - y0;
    size_t row = (size_t)width * 3;
    if (grow(&ctx->pixels, &ctx->pixels_cap, row * *ph) < 0) {
        rc = DSC_ENOMEM;
        longjmp(jf->jump, 1);
    }
    if (y0 > 0 && jpeg_skip_scanlines(cinfo, y0) != y0)
        longjmp(jf->jump, 1);
    while (cinfo->output_scanline < y1) {
        JSAMPROW rows[16];
        JDIMENSION want = y1 - cinfo->output_scanline;
        if (want > 16)
            want = 16;
        for (JDIMENSION r = 0; r < want; r++)
            rows[r] = ctx->pixels + (size_t)(cinfo->output_scanline + r - y0) * row;
        if (jpeg_read_scanlines(cinfo, rows, want) < 1) {
            snprintf(jf->message, sizeof jf->message, "no more scanlines");
            longjmp(jf->jump, 1);
        }
    }
    jpeg_abort_decompress(cinfo); /* the rows below the crop are never decoded */
    return 0;
}

/* n RGBA pixels to RGB in place: alpha dropped (background NULL: PIL's convert("RGB")), or the
 * colour composited over background as PIL's paste(image, mask=alpha) on that colour does:
 * (c * a + bg * (255 - a)) / 255, rounded. */
static void rgba_to_rgb(uint8_t *px, size_t n, const uint8_t *background) {
    for (size_t i = 0; i < n; i++) {
        const uint8_t *src = px + 4 * i;
        uint8_t *dst = px + 3 * i;
        uint32_t r = src[0], g = src[1], b = src[2], a = src[3];
        if (background && a != 255) {
            uint32_t v[3] = {r * a + background[0] * (255 - a) + 128,
                             g * a + background[1] * (255 - a) + 128,
                             b * a + background[2] * (255 - a) + 128};
            r = (v[0] + (v[0] >> 8)) >> 8;
            g = (v[1] + (v[1] >> 8)) >> 8;
            b = (v[2] + (v[2] >> 8)) >> 8;
        }
        dst[0] = (uint8_t)r;
        dst[1] = (uint8_t)g;
        dst[2] = (uint8_t)b;
    }
}

typedef struct png_source {
    const uint8_t *data;
    size_t len, pos;
} png_source_t;

static void png_read_bytes(png_structp png, png_bytep out, size_t n) {
    png_source_t *src = png_get_io_ptr(png);
    if (n > src->len - src->pos)
        png_error(png, "the file ends inside the image data (truncated)");
    memcpy(out, src->data + src->pos, n);
    src->pos += n;
}

static void png_on_error(png_structp png, png_const_charp message) {
    dsc_image_ctx_t *ctx = png_get_error_ptr(png);
    snprintf(ctx->error, sizeof ctx->error, "png: %s", message);
    png_longjmp(png, 1);
}

/* Warnings (a bad ancillary chunk's CRC, an odd ICC profile) are accepted, as PIL accepts them. */
static void png_on_warning(png_structp png, png_const_charp message) {
    (void)png;
    (void)message;
}

/* PIL's reading of a PNG, then convert("RGB"): 16-bit samples keep their high byte, palettes
 * and gray become RGB (1/2/4-bit gray scaled to 0..255), no gamma is applied (gAMA, sRGB and
 * iCCP are ignored), alpha and tRNS are dropped. With background, alpha (and tRNS, as
 * convert("RGBA") reads it) is composited over it instead. Into ctx->pixels, *w x *h RGB. */
static int png_decode(dsc_image_ctx_t *ctx, const void *data, size_t len, const uint8_t *background,
                      uint32_t *w, uint32_t *h) {
    png_structp png =
        png_create_read_struct(PNG_LIBPNG_VER_STRING, ctx, png_on_error, png_on_warning);
    if (!png)
        return DSC_ENOMEM;
    png_infop info = png_create_info_struct(png);
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return DSC_ENOMEM;
    }
    png_source_t src = {data, len, 0};
    volatile int rc = DSC_EDECODE;
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        return rc;
    }
    png_set_read_fn(png, &src, png_read_bytes);
    png_read_info(png, info);
    png_uint_32 width = png_get_image_width(png, info), height = png_get_image_height(png, info);
    int depth = png_get_bit_depth(png, info), type = png_get_color_type(png, info);
    if (check_size(ctx, "png", width, height) < 0)
        png_longjmp(png, 1);
    if (depth == 16)
        png_set_strip_16(png); /* the high byte, as PIL's "RGB;16B" and "LA;16B" */
    if (type == PNG_COLOR_TYPE_PALETTE)
        png_set_palette_to_rgb(png);
    if (type == PNG_COLOR_TYPE_GRAY && depth < 8)
        png_set_expand_gray_1_2_4_to_8(png);
    if (background && png_get_valid(png, info, PNG_INFO_tRNS))
        png_set_tRNS_to_alpha(png);
    if (type == PNG_COLOR_TYPE_GRAY || type == PNG_COLOR_TYPE_GRAY_ALPHA)
        png_set_gray_to_rgb(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    size_t channels = png_get_channels(png, info);
    if ((channels != 3 && channels != 4) || png_get_rowbytes(png, info) != width * channels) {
        snprintf(ctx->error, sizeof ctx->error, "png: unexpected row layout (%zu channels)",
                 channels);
        png_longjmp(png, 1);
    }
    if (grow(&ctx->pixels, &ctx->pixels_cap, (size_t)width * height * channels) < 0 ||
        grow(&ctx->rows, &ctx->rows_cap, (size_t)height * sizeof(png_bytep)) < 0) {
        rc = DSC_ENOMEM;
        png_longjmp(png, 1);
    }
    png_bytepp rows = (png_bytepp)(void *)ctx->rows;
    for (png_uint_32 y = 0; y < height; y++)
        rows[y] = ctx->pixels + (size_t)y * width * channels;
    /* no png_read_end: what follows the image data (its end chunk too) is not read, as PIL
     * does not */
    png_read_image(png, rows);
    png_destroy_read_struct(&png, &info, NULL);
    if (channels == 4)
        rgba_to_rgb(ctx->pixels, (size_t)width * height, background);
    *w = width;
    *h = height;
    return 0;
}

/* The colour channels as stored (PIL's convert("RGB") of the RGBA it reads), or with
 * background alpha composited over it. */
static int webp_decode(dsc_image_ctx_t *ctx, const void *data, size_t len,
                       const uint8_t *background, uint32_t *w, uint32_t *h) {
    int has_alpha = 0;
    int rc = webp_header(ctx, data, len, w, h, &has_alpha);
    if (rc < 0)
        return rc;
    int rgba = background && has_alpha;
    size_t bytes = (size_t)*w * *h * (rgba ? 4 : 3);
    if (grow(&ctx->pixels, &ctx->pixels_cap, bytes) < 0)
        return DSC_ENOMEM;
    if (rgba ? !WebPDecodeRGBAInto(data, len, ctx->pixels, bytes, (int)*w * 4)
             : !WebPDecodeRGBInto(data, len, ctx->pixels, bytes, (int)*w * 3))
        return fail(ctx, "webp: the image data does not decode");
    if (rgba)
        rgba_to_rgb(ctx->pixels, (size_t)*w * *h, background);
    return 0;
}

/* Decodes into ctx->pixels, choosing the JPEG scale from the box (in full-size pixels) and the
 * output it must cover. Returns the scale factor applied (sw / full_w) in *factor_x/y. */
static int decode_for(dsc_image_ctx_t *ctx, const void *data, size_t len, int format,
                      const dsc_image_box_t *box, uint32_t need_w, uint32_t need_h,
                      const uint8_t *background, uint32_t *w, uint32_t *h) {
    switch (format) {
    case DSC_IMAGE_JPEG: {
        int d = jpeg_denominator(ctx, box->w, box->h, need_w, need_h);
        return jpeg_decode(ctx, data, len, d, w, h);
    }
    case DSC_IMAGE_PNG:
        return png_decode(ctx, data, len, background, w, h);
    case DSC_IMAGE_WEBP:
        return webp_decode(ctx, data, len, background, w, h);
    default:
        break;
    }
    return fail(ctx, "not a JPEG, PNG or WebP image");
}

/* Resizes the region (x, y, bw, bh) of ctx->pixels (sw x sh RGB) to ow x oh into dst, planar
 * (CHW) or not, mirrored or not. Without context the resampler sees only the whole pixels the
 * region touches, as PIL's crop then resize does; with context also the pixels around it that
 * the kernel reaches, as PIL's resize of the whole image then crop does. */
static int resize_region(dsc_image_ctx_t *ctx, uint32_t sw, uint32_t sh, double x, double y,
                         double bw, double bh, uint8_t *dst, uint32_t ow, uint32_t oh, int planar,
                         int flip, int context) {
    double mx = context ? context_margin(bw, ow) : 0, my = context ? context_margin(bh, oh) : 0;
    double x0 = fmax(0, floor(x) - mx), y0 = fmax(0, floor(y) - my);
    double x1 = fmin(sw, ceil(x + bw - 1e-9) + mx), y1 = fmin(sh, ceil(y + bh - 1e-9) + my);
    if (x1 <= x0)
        x1 = fmin(sw, x0 + 1);
    if (y1 <= y0)
        y1 = fmin(sh, y0 + 1);
    uint32_t iw = (uint32_t)(x1 - x0), ih = (uint32_t)(y1 - y0);
    const uint8_t *src = ctx->pixels + ((size_t)y0 * sw + (size_t)x0) * 3;
    double bx0 = fmax(0, x - x0), by0 = fmax(0, y - y0);
    double bx1 = fmin(iw, x + bw - x0), by1 = fmin(ih, y + bh - y0);
    if (bx1 <= bx0 || by1 <= by0)
        return fail(ctx, "empty crop");
    int rc = dsc__resample_rgb_to(&ctx->resample, src, iw, ih, (size_t)sw * 3, bx0, by0, bx1, by1,
                                  dst, ow, oh, planar, flip);
    return rc == DSC_EINVAL ? fail(ctx, "resize: bad box") : rc;
}

int dsc__image_decode(dsc_image_ctx_t *ctx, const void *data, size_t len,
                      const dsc_image_spec_t *spec, uint64_t seed, uint64_t epoch, uint64_t index,
                      uint8_t *out, size_t out_len, dsc_image_box_t *box_out) {
    if (dsc__image_spec_check(spec) < 0 || !out ||
        out_len != (size_t)spec->width * spec->height * 3)
        return DSC_EINVAL;
    int format = dsc__image_sniff(data, len);
    uint32_t full_w, full_h, sw, sh, ox = 0, oy = 0, pw, ph;
    dsc_image_box_t box;
    int rc;
    ctx->error[0] = 0;
    if (format == DSC_IMAGE_JPEG) {
        rc = jpeg_decode_planned(ctx, data, len, spec, seed, epoch, index, &box, &full_w, &full_h,
                                 &sw, &sh, &ox, &oy, &pw, &ph);
    } else {
        rc = dsc__image_info(ctx, data, len, &format, &full_w, &full_h);
        if (rc < 0)
            return rc;
        dsc__image_plan(spec, full_w, full_h, seed, epoch, index, &box);
        rc = decode_for(ctx, data, len, format, &box, spec->width, spec->height,
                        spec->background ? spec->background_rgb : NULL, &sw, &sh);
        pw = sw;
        ph = sh;
    }
    if (rc < 0)
        return rc;
    if (box_out)
        *box_out = box;
    /* The box in the decoded (possibly DCT-scaled) buffer's pixels; the resampler writes the
     * layout and the flip itself. */
    double fx = (double)sw / full_w, fy = (double)sh / full_h;
    return resize_region(ctx, pw, ph, box.x * fx - ox, box.y * fy - oy, box.w * fx, box.h * fy, out,
                         spec->width, spec->height, spec->layout == DSC_IMAGE_LAYOUT_CHW, box.flip,
                         box.context);
}

int dsc__image_decode_with(dsc_image_ctx_t *ctx, const void *data, size_t len,
                           const dsc_image_spec_t *spec, uint64_t seed, uint64_t epoch,
                           uint64_t index, uint8_t *out, size_t out_len, dsc_image_box_t *box_out,
                           dsc_image_region_fn region, void *region_arg) {
    if (dsc__image_sniff(data, len) != DSC_IMAGE_JPEG || region == NULL)
        return dsc__image_decode(ctx, data, len, spec, seed, epoch, index, out, out_len, box_out);
    if (dsc__image_spec_check(spec) < 0 || !out ||
        out_len != (size_t)spec->width * spec->height * 3)
        return DSC_EINVAL;
    int format;
    uint32_t full_w, full_h;
    int rc = dsc__image_info(ctx, data, len, &format, &full_w, &full_h);
    if (rc < 0)
        return rc;
    dsc_image_box_t box;
    dsc__image_plan(spec, full_w, full_h, seed, epoch, index, &box);
    /* the whole pixels the box touches (and those around it the kernel reaches, with context),
     * as resize_region cuts them */
    double mx = box.context ? context_margin(box.w, spec->width) : 0;
    double my = box.context ? context_margin(box.h, spec->height) : 0;
    uint32_t x0 = (uint32_t)fmax(0, floor(box.x) - mx), y0 = (uint32_t)fmax(0, floor(box.y) - my);
    uint32_t x1 = (uint32_t)fmin(full_w, ceil(box.x + box.w - 1e-9) + mx);
    uint32_t y1 = (uint32_t)fmin(full_h, ceil(box.y + box.h - 1e-9) + my);
    if (x1 <= x0)
        x1 = x0 + 1 <= full_w ? x0 + 1 : full_w;
    if (y1 <= y0)
        y1 = y0 + 1 <= full_h ? y0 + 1 : full_h;
    if (x1 <= x0 || y1 <= y0)
        return fail(ctx, "empty crop");
    uint32_t w = x1 - x0, h = y1 - y0;
    if (grow(&ctx->pixels, &ctx->pixels_cap, (size_t)w * h * 3) < 0)
        return DSC_ENOMEM;
    char why[ERR_LEN] = ""; /* the other decoder's reason, unused: libjpeg gives its own */
    rc = region(region_arg, data, len, full_w, full_h, x0, y0, w, h, ctx->pixels, why, sizeof why);
    /* A file the other decoder refuses (a variant it lacks), or its device out of memory:
     * libjpeg decodes it, and gives a bad file its error. */
    if (rc < 0)
        return dsc__image_decode(ctx, data, len, spec, seed, epoch, index, out, out_len, box_out);
    if (box_out)
        *box_out = box;
    return resize_region(ctx, w, h, box.x - x0, box.y - y0, box.w, box.h, out, spec->width,
                         spec->height, spec->layout == DSC_IMAGE_LAYOUT_CHW, box.flip, box.context);
}

int dsc__image_decode_rgb(dsc_image_ctx_t *ctx, const void *data, size_t len, uint32_t max_side,
                          uint8_t **rgb, uint32_t *width, uint32_t *height) {
    return dsc__image_decode_rgb_over(ctx, data, len, max_side, NULL, rgb, width, height);
}

int dsc__image_decode_rgb_over(dsc_image_ctx_t *ctx, const void *data, size_t len,
                               uint32_t max_side, const uint8_t *background, uint8_t **rgb,
                               uint32_t *width, uint32_t *height) {
    int format;
    uint32_t full_w, full_h;
    int rc = dsc__image_info(ctx, data, len, &format, &full_w, &full_h);
    if (rc < 0)
        return rc;
    uint32_t ow = full_w, oh = full_h;
    uint32_t longer = full_w > full_h ? full_w : full_h;
    if (max_side && longer > max_side) {
        double f = (double)max_side / longer;
        ow = (uint32_t)fmax(1, round(full_w * f));
        oh = (uint32_t)fmax(1, round(full_h * f));
    }
    dsc_image_box_t box = {0, 0, full_w, full_h, 0, 0};
    uint32_t sw, sh;
    rc = decode_for(ctx, data, len, format, &box, ow, oh, background, &sw, &sh);
    if (rc < 0)
        return rc;
    uint8_t *buf = malloc((size_t)ow * oh * 3);
    if (!buf)
        return DSC_ENOMEM;
    if (sw == ow && sh == oh) {
        memcpy(buf, ctx->pixels, (size_t)ow * oh * 3);
    } else {
        rc = resize_region(ctx, sw, sh, 0, 0, sw, sh, buf, ow, oh, 0, 0, 0);
        if (rc < 0) {
            free(buf);
            return rc;
        }
    }
    *rgb = buf;
    *width = ow;
    *height = oh;
    return 0;
}
