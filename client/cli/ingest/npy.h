/* .npy header parser (NumPy format versions 1.0, 2.0, 3.0): dtype, order and shape of an array
 * file, so its data can be streamed in bounded pieces. Pure: no I/O, no allocation. */
#ifndef DSC_NPY_H
#define DSC_NPY_H

#include "dscache.h"

#include <stddef.h>
#include <stdint.h>

#define DSC_NPY_MAX_DIMS 32           /* numpy's own limit */
#define DSC_NPY_PREAMBLE 12           /* enough bytes to know the full header length */
#define DSC_NPY_MAX_HEADER (1u << 20) /* bound on the header dictionary we accept */

typedef struct dsc_npy_header {
    int major, minor;  /* format version */
    int dtype;         /* DSC_DTYPE_*, or 0 when the descr is not one we support */
    char descr[32];    /* the 'descr' text as written (truncated), for messages */
    int fortran_order; /* 1 when the file says 'fortran_order': True */
    uint32_t ndim;     /* 0 (a scalar) .. DSC_NPY_MAX_DIMS */
    uint64_t shape[DSC_NPY_MAX_DIMS];
    uint64_t data_offset; /* file offset of the first data byte == total header size */
    uint64_t data_bytes;  /* itemsize * prod(shape) (0 when dtype is 0) */
    const char *problem;  /* static text saying why a header was rejected, else NULL */
} dsc_npy_header_t;

/* Bytes of the whole header (preamble + dictionary) from the first DSC_NPY_PREAMBLE bytes of a
 * file: the caller reads that many bytes and then calls dsc_npy_parse. Returns the size (> 0),
 * DSC_ETRUNCATED when len < 10 (or < 12 for versions 2 and 3), DSC_EBADMAGIC (not a .npy
 * file), DSC_EVERSION (unknown major version), DSC_ETOOLARGE (over DSC_NPY_MAX_HEADER). */
int64_t dsc_npy_header_size(const uint8_t *buf, size_t len);

/* Parses a whole .npy header held in buf[0..len). Consumed / partial / error:
 *   > 0                  the header is valid and supported; returns data_offset and fills *out
 *   DSC_ETRUNCATED       len is shorter than the header
 *   DSC_EBADMAGIC, DSC_EVERSION, DSC_ETOOLARGE   as dsc_npy_header_size
 *   DSC_EBADHEADER       the dictionary is malformed (out->problem says where)
 *   DSC_ENOTSUP          well-formed but not ingestible: Fortran order, big-endian, object,
 *                        structured or an unsupported dtype (out->problem and out->descr say)
 *   DSC_EOVERFLOW        the shape's byte size overflows 64 bits
 * On errors *out is partly filled (problem, descr when known). Never reads outside the buffer;
 * the header text need not be NUL-terminated. Thread-safe. */
int64_t dsc_npy_parse(const uint8_t *buf, size_t len, dsc_npy_header_t *out);

#endif
