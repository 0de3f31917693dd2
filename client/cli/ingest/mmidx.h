/* Megatron-LM / NeMo indexed dataset index (.idx, "MMIDIDX") parser: header, per-sequence
 * lengths and byte pointers into the .bin, document boundaries. Pure: no I/O, no allocation. */
#ifndef DSC_MMIDX_H
#define DSC_MMIDX_H

#include <stddef.h>
#include <stdint.h>

#define DSC_MMIDX_MAGIC "MMIDIDX\0\0"
#define DSC_MMIDX_MAGIC_LEN 9
#define DSC_MMIDX_HEADER_BYTES 34 /* magic 9, version u64, dtype code u8, two u64 counts */

typedef struct dsc_mmidx {
    int dtype;                /* DSC_DTYPE_* of a token */
    uint32_t item_bytes;      /* bytes per token */
    uint64_t sequences;       /* sequence count */
    uint64_t documents;       /* documents (the document index holds documents + 1 entries) */
    int multimodal;           /* 1 when a mode byte per sequence follows the document index */
    const uint8_t *lengths;   /* sequences x i32 little-endian, tokens per sequence */
    const uint8_t *pointers;  /* sequences x i64, byte offset of each sequence in the .bin */
    const uint8_t *doc_index; /* (documents + 1) x i64, first sequence of each document */
    const char *problem;      /* static text saying why the index was rejected, else NULL */
} dsc_mmidx_t;

/* Parses and checks a whole .idx file held in buf[0..len): magic, version 1, a known dtype
 * code (1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 6 f64, 7 f32, 8 u16), the file size equal to the
 * header plus the three arrays (plus one mode byte per sequence for a multimodal index), a
 * document index that starts at 0, never decreases and ends at the sequence count, and no
 * negative length. Returns 0 and fills *out (pointers into buf, valid while buf is),
 * DSC_ETRUNCATED (shorter than the header or its arrays), DSC_EBADMAGIC, DSC_EVERSION,
 * DSC_ENOTSUP (unknown dtype code), DSC_EBADHEADER (any other inconsistency; out->problem says
 * which). Never reads outside the buffer. O(sequences + documents). Thread-safe. */
int dsc_mmidx_parse(const uint8_t *buf, size_t len, dsc_mmidx_t *out);

/* Sequence s: its byte offset and byte size in the .bin. Returns 0, DSC_ERANGE (s out of
 * range) or DSC_EOVERFLOW (pointer negative, or offset + size past bin_bytes: the .idx and the
 * .bin disagree). */
int dsc_mmidx_sequence(const dsc_mmidx_t *idx, uint64_t s, uint64_t bin_bytes, uint64_t *offset,
                       uint64_t *bytes);

/* Document d: its first sequence and number of sequences. Returns 0 or DSC_ERANGE. */
int dsc_mmidx_document(const dsc_mmidx_t *idx, uint64_t d, uint64_t *first, uint64_t *count);

/* Total token bytes the index describes (sum of lengths x item_bytes). */
uint64_t dsc_mmidx_total_bytes(const dsc_mmidx_t *idx);

#endif
