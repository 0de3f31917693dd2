/* Shard file format (proto/FORMAT.md): schema, header, chunk index, footer, chunk codec.
 * Pure encode/decode/validate over memory: no I/O, no allocation, safe on hostile input. */
#ifndef DSC_SHARD_H
#define DSC_SHARD_H

#include "dscache_base.h"

#include <stddef.h>
#include <stdint.h>

#define DSC_SHARD_MAGIC "DSCSHRD1"     /* 8 bytes at offset 0 */
#define DSC_SHARD_END_MAGIC "DSCSHEND" /* last 8 bytes of the file */
#define DSC_SHARD_VERSION 1            /* every field of a fixed shape */
#define DSC_SHARD_VERSION_VAR 2        /* at least one field with a variable leading dimension */
#define DSC_SHARD_FOOTER_SIZE 32
#define DSC_CHUNK_ENTRY_SIZE 48
#define DSC_SHARD_MAX_HEADER 8192      /* bound on header_len */
#define DSC_CHUNK_MAX_RAW (256u << 20) /* bound on one chunk's decoded size */

enum { DSC_CODEC_RAW = 0, DSC_CODEC_LZ4 = 1 };

/* shape[0] of a field whose leading dimension varies from sample to sample (format version 2). */
#define DSC_DIM_VARIABLE 0u

/* One field of a sample: dtype and shape; the leading dimension may be variable. */
typedef struct dsc_field {
    char name[DSC_MAX_NAME];      /* NUL-terminated, 1..63 bytes of [A-Za-z0-9_.-] */
    uint8_t dtype;                /* DSC_DTYPE_* */
    uint8_t ndim;                 /* 0..DSC_MAX_DIMS (0 = scalar) */
    uint32_t shape[DSC_MAX_DIMS]; /* shape[0] == DSC_DIM_VARIABLE: variable rows (ndim >= 1) */
    /* Derived by dsc_schema_finish: */
    uint64_t sample_bytes; /* dtype size * prod(shape); 0 for a variable field */
    uint64_t row_bytes;    /* dtype size * prod(shape[1..ndim)): one step of the leading dim */
    uint8_t variable;      /* 1 when shape[0] == DSC_DIM_VARIABLE */
} dsc_field_t;

typedef struct dsc_schema {
    uint32_t field_count; /* 1..DSC_MAX_FIELDS */
    dsc_field_t fields[DSC_MAX_FIELDS];
    uint64_t sample_bytes; /* derived: sum of the fixed fields' sample_bytes (the fixed part) */
    uint32_t var_count;    /* derived: fields with a variable leading dimension */
} dsc_schema_t;

/* Validates names (non-empty, allowed characters, unique), dtypes, dims (each >= 1, except a
 * leading DSC_DIM_VARIABLE) and fills the derived sizes. Returns 0, DSC_EBADSCHEMA, or
 * DSC_EOVERFLOW (a fixed sample or a row over 2^32 - 1 bytes). */
int dsc_schema_finish(dsc_schema_t *schema);
/* Shard format version a finished schema is written with: DSC_SHARD_VERSION_VAR when it has a
 * variable field, else DSC_SHARD_VERSION. */
int dsc_schema_version(const dsc_schema_t *schema);
/* Smallest decoded chunk of `samples` samples: the fixed part plus, per variable field, its
 * (samples + 1) offsets (no rows). UINT64_MAX on overflow. For a schema without variable fields
 * it is the chunk's exact size. */
uint64_t dsc_schema_chunk_min(const dsc_schema_t *schema, uint64_t samples);
/* 1 when both schemas have the same fields, dtypes and shapes, else 0. */
int dsc_schema_equal(const dsc_schema_t *a, const dsc_schema_t *b);
/* Byte offset of fixed field `field` inside a decoded chunk of `samples` samples. Chunks are
 * field-major: fixed field 0 of every sample, then fixed field 1 of every sample, ...; the
 * variable fields' sections follow the fixed part (their places: dsc_chunk_layout). */
uint64_t dsc_schema_field_offset(const dsc_schema_t *schema, uint32_t field, uint64_t samples);

typedef struct dsc_shard_header {
    uint16_t version;
    uint16_t flags;
    uint32_t header_len; /* encoded size, checksum included */
    uint64_t shard_id;
    uint64_t sample_count;  /* samples in this shard */
    uint32_t chunk_samples; /* samples per chunk (the last chunk may hold fewer) */
    char dataset[DSC_MAX_NAME];
    dsc_schema_t schema;
} dsc_shard_header_t;

typedef struct dsc_chunk_entry {
    uint64_t offset;       /* file offset of the stored bytes */
    uint64_t first_sample; /* index of its first sample within the shard */
    uint32_t stored_len;   /* bytes in the file */
    uint32_t raw_len;      /* decoded bytes: version 1 == sample_count * schema.sample_bytes */
    uint32_t sample_count;
    uint8_t codec;            /* DSC_CODEC_* */
    uint64_t stored_checksum; /* XXH3-64 of the stored bytes */
    uint64_t raw_checksum;    /* XXH3-64 of the decoded bytes */
} dsc_chunk_entry_t;

typedef struct dsc_shard_footer {
    uint64_t index_offset;
    uint32_t chunk_count;
    uint32_t flags;
    uint64_t index_checksum; /* XXH3-64 of the index bytes */
} dsc_shard_footer_t;

/* Encoded size of a header (derived from its schema and dataset name). */
size_t dsc_shard_header_size(const dsc_shard_header_t *header);
/* Writes the header (setting header_len inside the encoding) into out. Returns the bytes
 * written, DSC_ENOSPC when cap is too small, DSC_EBADSCHEMA / DSC_EINVAL for bad contents. */
int dsc_shard_header_encode(const dsc_shard_header_t *header, uint8_t *out, size_t cap);
/* Decodes and validates a header from the first len bytes of a file. Returns the bytes consumed
 * (header_len), DSC_ETRUNCATED when len is shorter than the header, or DSC_EBADMAGIC,
 * DSC_EVERSION, DSC_EBADHEADER (checksum or fields), DSC_EBADSCHEMA. */
int dsc_shard_header_decode(const uint8_t *buf, size_t len, dsc_shard_header_t *out);

void dsc_chunk_entry_encode(const dsc_chunk_entry_t *entry, uint8_t out[DSC_CHUNK_ENTRY_SIZE]);
void dsc_chunk_entry_decode(const uint8_t in[DSC_CHUNK_ENTRY_SIZE], dsc_chunk_entry_t *entry);

void dsc_shard_footer_encode(const dsc_shard_footer_t *footer, uint8_t out[DSC_SHARD_FOOTER_SIZE]);
/* Returns 0 or DSC_EBADFOOTER (end magic). */
int dsc_shard_footer_decode(const uint8_t in[DSC_SHARD_FOOTER_SIZE], dsc_shard_footer_t *footer);

/* Validates an index against its header, footer and the file size: index checksum, every
 * entry's offset and length inside [header_len, index_offset), entries in file order without
 * overlap, samples contiguous from 0 to sample_count, raw_len consistent with the schema,
 * known codec, stored_len == raw_len for raw chunks. Returns 0, DSC_EBADINDEX, DSC_EOVERFLOW. */
int dsc_shard_check_index(const dsc_shard_header_t *header, const dsc_shard_footer_t *footer,
                          const uint8_t *index, uint64_t file_size);

/* A parsed shard over a whole file in memory. Holds pointers into buf: valid while buf is. */
typedef struct dsc_shard_view {
    const uint8_t *base;
    uint64_t size;
    dsc_shard_header_t header;
    dsc_shard_footer_t footer;
    const uint8_t *index; /* footer.chunk_count entries of DSC_CHUNK_ENTRY_SIZE bytes */
} dsc_shard_view_t;

/* Parses and validates header, footer and index of a shard held in memory (chunk checksums are
 * checked later, per chunk). Returns 0, or DSC_ETRUNCATED (shorter than header + footer), or an
 * error of the functions above. Never reads outside [buf, buf+len). */
int dsc_shard_parse(const uint8_t *buf, uint64_t len, dsc_shard_view_t *out);
/* Entry i of a parsed shard. Returns 0 or DSC_ERANGE. */
int dsc_shard_chunk(const dsc_shard_view_t *view, uint32_t i, dsc_chunk_entry_t *out);
/* Stored bytes of chunk entry e inside the view (bounds were checked by dsc_shard_parse). */
const uint8_t *dsc_shard_chunk_data(const dsc_shard_view_t *view, const dsc_chunk_entry_t *e);

/* Checks the stored checksum: 0 or DSC_ECHUNKSUM. */
int dsc_chunk_verify(const dsc_chunk_entry_t *entry, const void *stored);
/* Verifies the stored checksum, decodes (lz4 safe decoder: untrusted input is fine) into dst,
 * and verifies the decoded checksum. dst_cap must be >= entry->raw_len. Returns raw_len, or
 * DSC_ECHUNKSUM, DSC_EDECOMPRESS, DSC_EDATASUM, DSC_ENOSPC, DSC_EBADINDEX (unknown codec). */
int dsc_chunk_decode(const dsc_chunk_entry_t *entry, const void *stored, void *dst, size_t dst_cap);

/* ---- Decoded chunk layout (format version 2) ---------------------------------------------- */

/* One field of a decoded chunk: pointers into the caller's buffer. */
typedef struct dsc_chunk_field {
    const uint8_t *values; /* fixed: samples * sample_bytes bytes; variable: rows * row_bytes */
    uint64_t bytes;        /* bytes at values */
    /* Variable fields only (NULL / 0 for fixed ones): samples + 1 little-endian u64 row offsets,
     * not aligned (read them with dsc_chunk_offset); offsets[0] == 0, non-decreasing. */
    const uint8_t *offsets;
    uint64_t rows; /* offsets[samples] */
} dsc_chunk_field_t;

typedef struct dsc_chunk_layout {
    uint32_t samples;
    uint32_t field_count;
    dsc_chunk_field_t fields[DSC_MAX_FIELDS];
} dsc_chunk_layout_t;

/* Locates every field inside a decoded chunk of `samples` samples (raw_len bytes at raw) and
 * checks its layout: the fixed part, then per variable field (samples + 1) offsets starting at 0,
 * non-decreasing, and offsets[samples] * row_bytes value bytes, ending exactly at raw_len. Works
 * for version-1 schemas too (then raw_len must be samples * sample_bytes). Pure; reads only
 * [raw, raw + raw_len); all arithmetic overflow-checked; O(samples * variable fields). Returns 0
 * and *out (pointers into raw), DSC_EINVAL (NULL argument, samples 0, unfinished schema),
 * DSC_EBADINDEX (raw_len smaller than dsc_schema_chunk_min, or not equal to it for a schema
 * without variable fields), DSC_ECORRUPT (offsets[0] != 0, decreasing offsets, or rows that do
 * not end exactly at raw_len). */
int dsc_chunk_layout(const dsc_schema_t *schema, uint32_t samples, const void *raw,
                     uint64_t raw_len, dsc_chunk_layout_t *out);
/* Row offset `i` (0..samples) of variable field `field` of a checked layout; 0 for a fixed field
 * or an index out of range. */
uint64_t dsc_chunk_offset(const dsc_chunk_layout_t *layout, uint32_t field, uint32_t i);
/* Sample `i` of field `field` of a checked layout with row_bytes / sample_bytes from schema:
 * *data and *bytes. Returns 0 or DSC_ERANGE. */
int dsc_chunk_sample(const dsc_chunk_layout_t *layout, const dsc_schema_t *schema, uint32_t field,
                     uint32_t i, const uint8_t **data, uint64_t *bytes);

/* Worst-case stored size for raw_len decoded bytes, for sizing the encoder's buffer. */
size_t dsc_chunk_encode_bound(size_t raw_len);
/* Encodes raw bytes: codec DSC_CODEC_LZ4 with level 0 = fast lz4, level 1..12 = lz4hc level;
 * keeps the chunk raw when compression does not shrink it. Fills entry->stored_len, raw_len,
 * codec and both checksums (not offset, first_sample, sample_count). Writes the stored bytes to
 * dst unless the chunk stays raw, then the stored bytes are the input itself (*stored_out
 * points at raw or dst). Returns 0, DSC_ENOSPC, DSC_EINVAL. */
int dsc_chunk_encode(int codec, int level, const void *raw, size_t raw_len, void *dst,
                     size_t dst_cap, dsc_chunk_entry_t *entry, const void **stored_out);

/* XXH3-64 of a byte range (the checksum used everywhere in the format). */
uint64_t dsc_checksum(const void *data, size_t len);

#endif
