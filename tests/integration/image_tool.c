/* Test helper: runs the image codec (client/lib/image/image.c) on files, for the Python pixel
 * checks and the benchmarks. image_tool decode FILE OUT.raw H W CROP FLIP LAYOUT SEED EPOCH INDEX
 * [R,G,B] writes the decoded sample (3*H*W bytes) and prints "x y w h flip" (the box, source px);
 *       R,G,B: alpha composited over that colour (else dropped)
 *   image_tool rgb FILE OUT.raw MAX_SIDE        prints "w h" (whole image, HWC)
 *   image_tool bench CROP H W FLIP SECONDS FILE...   prints "images N seconds S cpu_seconds C"
 *       (one thread, the files decoded round after round for SECONDS of wall time)
 * CROP: center, random_resized, none; LAYOUT: chw, hwc. Exit 0, 1 on a decode error (message on
 * stderr), 2 on bad arguments. */
#include "image.h"

#include "dscache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint8_t *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = n > 0 ? (size_t)n : 0;
    return buf;
}

static int parse_crop(const char *s) {
    if (!strcmp(s, "center"))
        return DSC_IMAGE_CROP_CENTER;
    if (!strcmp(s, "random_resized"))
        return DSC_IMAGE_CROP_RANDOM_RESIZED;
    if (!strcmp(s, "none"))
        return DSC_IMAGE_CROP_NONE;
    return -1;
}

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static double now(void) {
    return clock_s(CLOCK_MONOTONIC);
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    dsc_image_ctx_t *ctx = NULL;
    if (dsc__image_ctx_create(NULL, &ctx) < 0)
        return 1;
    int rc = 2;
    if (!strcmp(argv[1], "decode") && (argc == 12 || argc == 13)) {
        dsc_image_spec_t spec;
        dsc__image_spec_init(&spec);
        spec.height = (uint32_t)atoi(argv[4]);
        spec.width = (uint32_t)atoi(argv[5]);
        spec.crop = parse_crop(argv[6]);
        spec.flip = atoi(argv[7]);
        spec.layout = !strcmp(argv[8], "hwc") ? DSC_IMAGE_LAYOUT_HWC : DSC_IMAGE_LAYOUT_CHW;
        unsigned bg[3];
        if (argc == 13) {
            if (sscanf(argv[12], "%u,%u,%u", &bg[0], &bg[1], &bg[2]) != 3 || bg[0] > 255 ||
                bg[1] > 255 || bg[2] > 255)
                return 2;
            spec.background = 1;
            for (int c = 0; c < 3; c++)
                spec.background_rgb[c] = (uint8_t)bg[c];
        }
        size_t len, out_len = (size_t)spec.height * spec.width * 3;
        uint8_t *data = read_file(argv[2], &len), *out = malloc(out_len);
        dsc_image_box_t box;
        int err = data && out ? dsc__image_decode(ctx, data, len, &spec, strtoull(argv[9], 0, 0),
                                                  strtoull(argv[10], 0, 0),
                                                  strtoull(argv[11], 0, 0), out, out_len, &box)
                              : DSC_EIO;
        if (err < 0) {
            fprintf(stderr, "%s: %s (%s)\n", argv[2], dsc_strerror(err), dsc__image_error(ctx));
            rc = 1;
        } else {
            FILE *f = fopen(argv[3], "wb");
            rc = f && fwrite(out, 1, out_len, f) == out_len ? 0 : 1;
            if (f)
                fclose(f);
            printf("%.6f %.6f %.6f %.6f %d\n", box.x, box.y, box.w, box.h, box.flip);
        }
        free(data);
        free(out);
    } else if (!strcmp(argv[1], "rgb") && argc == 5) {
        size_t len;
        uint8_t *data = read_file(argv[2], &len), *rgb = NULL;
        uint32_t w = 0, h = 0;
        int err = data
                      ? dsc__image_decode_rgb(ctx, data, len, (uint32_t)atoi(argv[4]), &rgb, &w, &h)
                      : DSC_EIO;
        if (err < 0) {
            fprintf(stderr, "%s: %s (%s)\n", argv[2], dsc_strerror(err), dsc__image_error(ctx));
            rc = 1;
        } else {
            FILE *f = fopen(argv[3], "wb");
            rc = f && fwrite(rgb, 1, (size_t)w * h * 3, f) == (size_t)w * h * 3 ? 0 : 1;
            if (f)
                fclose(f);
            printf("%u %u\n", w, h);
        }
        free(data);
        free(rgb);
    } else if (!strcmp(argv[1], "bench") && argc >= 8) {
        dsc_image_spec_t spec;
        dsc__image_spec_init(&spec);
        spec.crop = parse_crop(argv[2]);
        spec.height = (uint32_t)atoi(argv[3]);
        spec.width = (uint32_t)atoi(argv[4]);
        spec.flip = atoi(argv[5]);
        double seconds = atof(argv[6]);
        int files = argc - 7;
        uint8_t **data = calloc((size_t)files, sizeof *data);
        size_t *lens = calloc((size_t)files, sizeof *lens);
        size_t out_len = (size_t)spec.height * spec.width * 3;
        uint8_t *out = malloc(out_len);
        rc = 0;
        for (int i = 0; i < files && rc == 0; i++)
            if (!(data[i] = read_file(argv[7 + i], &lens[i])))
                rc = 1;
        uint64_t n = 0;
        double t0 = now(), t = t0, cpu0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        while (rc == 0 && t - t0 < seconds) {
            for (int i = 0; i < files; i++, n++) {
                int err =
                    dsc__image_decode(ctx, data[i], lens[i], &spec, 1, 0, n, out, out_len, NULL);
                if (err < 0) {
                    fprintf(stderr, "%s: %s\n", argv[7 + i], dsc__image_error(ctx));
                    rc = 1;
                    break;
                }
            }
            t = now();
        }
        printf("images %llu seconds %.4f cpu_seconds %.4f\n", (unsigned long long)n, t - t0,
               clock_s(CLOCK_PROCESS_CPUTIME_ID) - cpu0);
        for (int i = 0; i < files; i++)
            free(data[i]);
        free(data);
        free(lens);
        free(out);
    }
    dsc__image_ctx_destroy(ctx);
    return rc;
}
