/* Megatron-LM / NeMo MMIDIDX index parser (see mmidx.h and docs/ingest.md). */
#include "mmidx.h"

#include "dscache_base.h"

#include <string.h>

static uint64_t load_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint32_t load_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int dtype_of_code(unsigned code) {
    switch (code) {
    case 1:
        return DSC_DTYPE_U8;
    case 2:
        return DSC_DTYPE_I8;
    case 3:
        return DSC_DTYPE_I16;
    case 4:
        return DSC_DTYPE_I32;
    case 5:
        return DSC_DTYPE_I64;
    case 6:
        return DSC_DTYPE_F64;
    case 7:
        return DSC_DTYPE_F32;
    case 8:
        return DSC_DTYPE_U16;
    default:
        return 0;
    }
}

static int reject(dsc_mmidx_t *out, int rc, const char *problem) {
    out->problem = problem;
    return rc;
}

int dsc_mmidx_parse(const uint8_t *buf, size_t len, dsc_mmidx_t *out) {
    memset(out, 0, sizeof *out);
    if (len < DSC_MMIDX_MAGIC_LEN)
        return reject(out, DSC_ETRUNCATED, "shorter than the MMIDIDX magic");
    if (memcmp(buf, DSC_MMIDX_MAGIC, DSC_MMIDX_MAGIC_LEN) != 0)
        return reject(out, DSC_EBADMAGIC, "no MMIDIDX magic (not a Megatron indexed dataset)");
    if (len < DSC_MMIDX_HEADER_BYTES)
        return reject(out, DSC_ETRUNCATED, "shorter than the 34-byte header");
    if (load_u64(buf + 9) != 1)
        return reject(out, DSC_EVERSION, "index version is not 1");
    out->dtype = dtype_of_code(buf[17]);
    if (out->dtype == 0)
        return reject(out, DSC_ENOTSUP, "unknown dtype code (1..8 are known)");
    out->item_bytes = (uint32_t)dsc_dtype_size(out->dtype);
    uint64_t sequences = load_u64(buf + 18);
    uint64_t doc_entries = load_u64(buf + 26);
    uint64_t rest = len - DSC_MMIDX_HEADER_BYTES;
    /* 12 bytes per sequence (i32 length, i64 pointer) and 8 per document entry, without overflow */
    if (sequences > rest / 12 || doc_entries > (rest - sequences * 12) / 8)
        return reject(out, DSC_ETRUNCATED, "shorter than its sequence and document arrays");
    uint64_t arrays = sequences * 12 + doc_entries * 8;
    if (rest == arrays)
        out->multimodal = 0;
    else if (rest - arrays == sequences && sequences > 0)
        out->multimodal = 1;
    else
        return reject(out, DSC_EBADHEADER,
                      "bytes after the document index (size disagrees with "
                      "the counts)");
    if (doc_entries == 0)
        return reject(out, DSC_EBADHEADER, "empty document index (it holds at least one entry, 0)");
    out->sequences = sequences;
    out->documents = doc_entries - 1;
    out->lengths = buf + DSC_MMIDX_HEADER_BYTES;
    out->pointers = out->lengths + sequences * 4;
    out->doc_index = out->pointers + sequences * 8;
    for (uint64_t s = 0; s < sequences; s++)
        if (load_u32(out->lengths + 4 * s) > INT32_MAX)
            return reject(out, DSC_EBADHEADER, "a negative sequence length");
    uint64_t prev = 0;
    for (uint64_t d = 0; d < doc_entries; d++) {
        uint64_t v = load_u64(out->doc_index + 8 * d);
        if (d == 0 && v != 0)
            return reject(out, DSC_EBADHEADER, "the document index does not start at 0");
        if (v < prev || v > sequences)
            return reject(out, DSC_EBADHEADER,
                          "the document index decreases or points past the last sequence");
        prev = v;
    }
    if (prev != sequences)
        return reject(out, DSC_EBADHEADER, "the document index does not end at the sequence count");
    return 0;
}

int dsc_mmidx_sequence(const dsc_mmidx_t *idx, uint64_t s, uint64_t bin_bytes, uint64_t *offset,
                       uint64_t *bytes) {
    if (s >= idx->sequences)
        return DSC_ERANGE;
    uint64_t pointer = load_u64(idx->pointers + 8 * s);
    uint64_t size = (uint64_t)load_u32(idx->lengths + 4 * s) * idx->item_bytes;
    if (pointer > INT64_MAX || pointer > bin_bytes || size > bin_bytes - pointer)
        return DSC_EOVERFLOW;
    *offset = pointer;
    *bytes = size;
    return 0;
}

int dsc_mmidx_document(const dsc_mmidx_t *idx, uint64_t d, uint64_t *first, uint64_t *count) {
    if (d >= idx->documents)
        return DSC_ERANGE;
    uint64_t a = load_u64(idx->doc_index + 8 * d), b = load_u64(idx->doc_index + 8 * (d + 1));
    *first = a;
    *count = b - a; /* parse checked a <= b */
    return 0;
}

uint64_t dsc_mmidx_total_bytes(const dsc_mmidx_t *idx) {
    uint64_t total = 0;
    for (uint64_t s = 0; s < idx->sequences; s++)
        total += (uint64_t)load_u32(idx->lengths + 4 * s) * idx->item_bytes;
    return total;
}
