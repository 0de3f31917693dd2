/* MosaicML Streaming MDS reader: index.json (shard list and column encodings) and the layout of
 * one decompressed shard (sample count, offset table, per-sample column sizes and values). The
 * shard functions are pure (no I/O, no allocation); the index parser allocates its shard table. */
#ifndef DSC_MDS_H
#define DSC_MDS_H

#include <stddef.h>
#include <stdint.h>

#define DSC_MDS_MAX_COLUMNS 64
#define DSC_MDS_MAX_DIMS 8

/* How a column's bytes become a dscache field. */
typedef enum {
    DSC_MDS_BYTES = 1,   /* bytes, str, jpeg, png, pil, pkl, json, str_int/float/decimal: u8[] */
    DSC_MDS_SCALAR,      /* int, int8..int64, uint8..uint64, float16/32/64: one value */
    DSC_MDS_NDARRAY,     /* ndarray:DTYPE:D0,D1,...: a fixed-shape array */
    DSC_MDS_NDARRAY_DYN, /* ndarray or ndarray:DTYPE: dtype and/or shape stored per value */
} dsc_mds_kind_t;

typedef struct dsc_mds_column {
    char name[64];
    char encoding[64];
    int kind;       /* dsc_mds_kind_t */
    int dtype;      /* DSC_DTYPE_* (DSC_DTYPE_U8 for bytes; 0: a dynamic ndarray's dtype) */
    int u64_as_i64; /* uint64 stored as i64, bits unchanged (dscache has no u64) */
    uint32_t ndim;  /* ndarray only */
    uint32_t dims[DSC_MDS_MAX_DIMS];
    uint64_t size; /* fixed bytes per sample, or 0 when variable (a u32 size precedes) */
} dsc_mds_column_t;

typedef struct dsc_mds_shard_info {
    char raw_basename[256]; /* the decompressed shard's name */
    uint64_t raw_bytes;
    char zip_basename[256]; /* "" when stored raw */
    uint64_t zip_bytes;
    int zstd; /* 1 when zip_basename holds zstd data */
    uint64_t samples;
} dsc_mds_shard_info_t;

typedef struct dsc_mds_index {
    uint32_t column_count;
    dsc_mds_column_t columns[DSC_MDS_MAX_COLUMNS];
    uint32_t shard_count;
    dsc_mds_shard_info_t *shards; /* owned; dsc_mds_index_free */
    uint64_t samples;             /* sum over shards */
} dsc_mds_index_t;

/* Parses an index.json held in json[0..len) (need not be NUL-terminated). Every shard must be
 * format "mds" version 2 with the same column names, encodings and sizes; compression null or
 * "zstd[:LEVEL]"; basenames relative paths without "." or ".." components. Returns 0 and fills
 * *out (free with dsc_mds_index_free), DSC_EBADMANIFEST (malformed or inconsistent),
 * DSC_ENOTSUP (an encoding or a compression this reader does not take), DSC_ENOMEM. On errors
 * err (when non-NULL) says what and where, e.g. "shard 3: column 'x': encoding 'ndarray' needs
 * a fixed dtype and shape". */
int dsc_mds_index_parse(const char *json, size_t len, dsc_mds_index_t *out, char *err,
                        size_t err_len);
/* Frees what dsc_mds_index_parse allocated; a zeroed index is fine. */
void dsc_mds_index_free(dsc_mds_index_t *index);

/* One decompressed shard held in buf[0..len): u32 sample count, (count + 1) u32 offsets from
 * the start of the file, then the samples (the config JSON sits between table and samples). */
typedef struct dsc_mds_shard {
    const uint8_t *buf;
    size_t len;
    uint32_t samples;
} dsc_mds_shard_t;

/* Checks the header and the offset table: the count equals expected_samples, offsets never
 * decrease, the first is past the table and the last is <= len. Returns 0 and *out,
 * DSC_ETRUNCATED (shorter than its table), DSC_EBADHEADER (count or offsets wrong; *problem says
 * which). Never reads outside buf. */
int dsc_mds_shard_open(const uint8_t *buf, size_t len, uint64_t expected_samples,
                       dsc_mds_shard_t *out, const char **problem);

/* One column value of a sample: pointer into the shard buffer. */
typedef struct dsc_mds_value {
    const uint8_t *data;
    uint64_t bytes;
} dsc_mds_value_t;

/* The offset table read piece by piece (a shard streamed, not held): begin with the shard's
 * sample count field, then give the n + 1 offsets in order to next. Checks what
 * dsc_mds_shard_open checks (count, first offset past the table, never decreasing, the last
 * within shard_bytes) and, offset by offset, each sample's size against sample_limit. Pure. */
typedef struct dsc_mds_table {
    uint32_t samples;     /* the count field */
    uint64_t table_end;   /* 4 + 4 (samples + 1): where the table ends */
    uint64_t shard_bytes; /* the decompressed shard's size */
    uint64_t sample_limit;
    uint64_t given; /* offsets given so far */
    uint32_t first; /* offset 0: where the samples start */
    uint32_t prev;  /* the last offset given */
} dsc_mds_table_t;

/* Returns 0, DSC_EBADHEADER (the count disagrees with expected_samples) or DSC_ETRUNCATED (the
 * table alone passes shard_bytes); *problem says which. */
int dsc_mds_table_begin(dsc_mds_table_t *t, uint32_t count, uint64_t expected_samples,
                        uint64_t shard_bytes, uint64_t sample_limit, const char **problem);
/* Takes the next offset (offset i, i = 0..samples). For i >= 1 sets *sample_bytes to sample
 * i - 1's size. Returns 0, DSC_ETOOLARGE (sample i - 1 is over sample_limit: a sample-level
 * refusal, the table stays usable), DSC_EBADHEADER or DSC_ETRUNCATED (the table is damaged:
 * *problem says how; stop there), DSC_ERANGE (more offsets than the table
 * holds). */
int dsc_mds_table_next(dsc_mds_table_t *t, uint32_t offset, uint64_t *sample_bytes,
                       const char **problem);

/* Splits one sample's bytes data[0..len) into values[0..column_count) as dsc_mds_sample does
 * (the pointers are into data). Returns 0 or DSC_ECORRUPT (*problem says which). Pure. */
int dsc_mds_sample_split(const dsc_mds_index_t *index, const uint8_t *data, uint64_t len,
                         dsc_mds_value_t *values, const char **problem);

/* Splits sample i into values[0..column_count): the u32 sizes of the variable columns, then the
 * columns in order, which must fill the sample's bytes exactly. Returns 0, DSC_ERANGE (i out of
 * range) or DSC_ECORRUPT (sizes disagree with the sample's length; *problem says which). */
int dsc_mds_sample(const dsc_mds_shard_t *shard, const dsc_mds_index_t *index, uint32_t i,
                   dsc_mds_value_t *values, const char **problem);

/* The header of a dynamic ndarray value (encoding "ndarray" or "ndarray:DTYPE"): a dtype code
 * byte when the encoding names none (8 uint8, 9 int8, 16 uint16, 17 int16, 18 float16, 32
 * uint32, 33 int32, 34 float32, 64 uint64, 65 int64, 66 float64), a byte ndim << 2 | width
 * (shape values of 1, 2, 4 or 8 bytes), ndim shape values, then the array's values. Returns 0
 * with *dtype (DSC_DTYPE_*; uint64 as i64), *ndim (1..DSC_MDS_MAX_DIMS), shape and *values_off;
 * DSC_ECORRUPT when it does not parse or the values are not prod(shape) x itemsize bytes
 * (*problem says which). Pure; never reads outside data[0..len). */
int dsc_mds_ndarray(const dsc_mds_column_t *column, const uint8_t *data, uint64_t len, int *dtype,
                    uint32_t *ndim, uint64_t shape[DSC_MDS_MAX_DIMS], uint64_t *values_off,
                    const char **problem);

#endif
