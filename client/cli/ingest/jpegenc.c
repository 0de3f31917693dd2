/* JPEG encoding through turbojpeg (jpegenc.h). */
#include "jpegenc.h"

#include "dscache_base.h"

#include <stdio.h>
#include <stdlib.h>
#include <turbojpeg.h>

struct dsc_jpeg_encoder {
    tjhandle tj;
    char error[200];
};

int dsc_jpeg_encoder_create(dsc_jpeg_encoder_t **out) {
    dsc_jpeg_encoder_t *enc = calloc(1, sizeof *enc);
    if (enc == NULL || (enc->tj = tjInitCompress()) == NULL) {
        free(enc);
        return DSC_ENOMEM;
    }
    *out = enc;
    return 0;
}

void dsc_jpeg_encoder_destroy(dsc_jpeg_encoder_t *enc) {
    if (enc == NULL)
        return;
    tjDestroy(enc->tj);
    free(enc);
}

const char *dsc_jpeg_encoder_error(const dsc_jpeg_encoder_t *enc) {
    return enc != NULL ? enc->error : "";
}

int dsc_jpeg_encode(dsc_jpeg_encoder_t *enc, const uint8_t *rgb, uint32_t width, uint32_t height,
                    int quality, uint8_t **jpeg, size_t *jpeg_len) {
    if (!rgb || width < 1 || height < 1 || width > 65500 || height > 65500 || quality < 1 ||
        quality > 100)
        return DSC_EINVAL;
    dsc_jpeg_encoder_t *own = NULL;
    if (enc == NULL) {
        if (dsc_jpeg_encoder_create(&own) < 0)
            return DSC_ENOMEM;
        enc = own;
    }
    enc->error[0] = '\0';
    int rc = 0;
    unsigned long size = tjBufSize((int)width, (int)height, TJSAMP_420);
    uint8_t *buf = malloc(size);
    if (buf == NULL) {
        rc = DSC_ENOMEM;
        goto done;
    }
    unsigned long out_size = size;
    if (tjCompress2(enc->tj, rgb, (int)width, (int)width * 3, (int)height, TJPF_RGB, &buf,
                    &out_size, TJSAMP_420, quality, TJFLAG_NOREALLOC) != 0) {
        snprintf(enc->error, sizeof enc->error, "jpeg encode: %s", tjGetErrorStr2(enc->tj));
        free(buf);
        rc = DSC_EDECODE;
        goto done;
    }
    *jpeg = buf;
    *jpeg_len = out_size;
done:
    dsc_jpeg_encoder_destroy(own);
    return rc;
}
