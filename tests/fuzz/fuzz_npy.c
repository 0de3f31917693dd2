/* libFuzzer target for the .npy header parser: never reads out of bounds, and what it accepts
 * is self-consistent (offset inside the input, known dtype, size = itemsize * prod(shape)). */
#include "npy.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* a private copy of exactly `size` bytes, so ASan sees any read past the end */
    uint8_t *buf = malloc(size ? size : 1);
    if (buf == NULL)
        return 0;
    if (size)
        memcpy(buf, data, size);
    dsc_npy_header_t header;
    int64_t total = dsc_npy_header_size(buf, size);
    int64_t rc = dsc_npy_parse(buf, size, &header);
    if (rc > 0) {
        if (total != rc || (uint64_t)rc > size || header.data_offset != (uint64_t)rc)
            abort();
        if (dsc_dtype_size(header.dtype) == 0 || header.ndim > DSC_NPY_MAX_DIMS ||
            header.fortran_order || header.problem != NULL)
            abort();
        uint64_t bytes = (uint64_t)dsc_dtype_size(header.dtype);
        for (uint32_t i = 0; i < header.ndim; i++)
            bytes *= header.shape[i];
        if (bytes != header.data_bytes)
            abort();
        /* one byte less is a partial header, never a different answer */
        dsc_npy_header_t shorter;
        if (dsc_npy_parse(buf, (size_t)rc - 1, &shorter) != DSC_ETRUNCATED)
            abort();
    } else if (rc == 0 || header.problem == NULL) {
        abort(); /* every rejection carries a reason */
    }
    free(buf);
    return 0;
}
