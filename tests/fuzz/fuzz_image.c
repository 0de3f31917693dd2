/* libFuzzer target for the image decoders (JPEG, PNG, WebP through client/lib/image/image.c): any
 * input gives a decode or DSC_EDECODE with a message, never a read out of bounds, a crash or a
 * different answer for the same bytes. Small limits keep each input cheap. */
#include "image.h"

#include "dscache.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static dsc_image_ctx_t *ctx;
    if (!ctx) {
        dsc_image_limits_t limits = {.max_pixels = 1u << 20, .max_side = 4096};
        if (dsc__image_ctx_create(&limits, &ctx) < 0)
            return 0;
    }
    /* a private copy of exactly `size` bytes, so ASan sees any read past the end */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    if (size)
        memcpy(buf, data, size);
    dsc_image_spec_t spec;
    dsc__image_spec_init(&spec);
    spec.height = 24;
    spec.width = 32;
    spec.crop = size % 3; /* center, random_resized, none */
    spec.flip = 1;
    spec.layout = (size / 3) % 2;
    uint8_t out[24 * 32 * 3], again[24 * 32 * 3];
    int rc = dsc__image_decode(ctx, buf, size, &spec, 1, 2, size, out, sizeof out, NULL);
    if (rc != 0 && rc != DSC_EDECODE && rc != DSC_ENOMEM)
        abort();
    if (rc == DSC_EDECODE && dsc__image_error(ctx)[0] == 0)
        abort();
    if (rc == 0) {
        int rc2 = dsc__image_decode(ctx, buf, size, &spec, 1, 2, size, again, sizeof again, NULL);
        if (rc2 != 0 || memcmp(out, again, sizeof out) != 0)
            abort();
        uint8_t *rgb = NULL;
        uint32_t w = 0, h = 0;
        if (dsc__image_decode_rgb(ctx, buf, size, 64, &rgb, &w, &h) == 0) {
            if (w < 1 || h < 1 || w > 64 || h > 64)
                abort();
            volatile uint8_t last = rgb[(size_t)w * h * 3 - 1];
            (void)last;
            free(rgb);
        }
    }
    free(buf);
    return 0;
}
