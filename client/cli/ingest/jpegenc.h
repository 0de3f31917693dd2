/* JPEG encoding (turbojpeg) for `dscache ingest images --max-side/--quality`: only the CLI
 * encodes, so the encoder lives here, outside libdscache (which decodes only). */
#ifndef DSC_INGEST_JPEGENC_H
#define DSC_INGEST_JPEGENC_H

#include <stddef.h>
#include <stdint.h>

/* One encoder (a turbojpeg handle and its last error), used by one thread at a time. */
typedef struct dsc_jpeg_encoder dsc_jpeg_encoder_t;

/* Returns 0 and *out, or DSC_ENOMEM. */
int dsc_jpeg_encoder_create(dsc_jpeg_encoder_t **out);
/* NULL is a no-op. */
void dsc_jpeg_encoder_destroy(dsc_jpeg_encoder_t *enc);

/* Encodes RGB HWC (width * 3 bytes a row) as a baseline JPEG (4:2:0, quality 1..100). *jpeg is
 * malloc'ed (the caller frees it). enc NULL: a one-off encoder for this call. Returns 0,
 * DSC_EINVAL (no pixels, a side outside 1..65500, a quality outside 1..100), DSC_ENOMEM or
 * DSC_EDECODE (the encoder failed: dsc_jpeg_encoder_error says why). */
int dsc_jpeg_encode(dsc_jpeg_encoder_t *enc, const uint8_t *rgb, uint32_t width, uint32_t height,
                    int quality, uint8_t **jpeg, size_t *jpeg_len);
/* Why the last dsc_jpeg_encode on enc failed ("" when it did not). */
const char *dsc_jpeg_encoder_error(const dsc_jpeg_encoder_t *enc);

#endif
