/* libFuzzer target: parses the input as a whole shard file, decodes every chunk into a bounded
 * buffer, and checks that what the parser accepts is self-consistent and canonical. Each input
 * runs twice: as given, and with every checksum recomputed, so that mutations reach the
 * structural checks and the lz4 decoder instead of stopping at a checksum. */
#include "shard.h"
#include "wire.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A property violation, not a crash on input: stop loudly in every build. */
#define FUZZ_ASSERT(cond)                                                                          \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

static uint8_t decoded[1 << 20];
static uint8_t header_copy[DSC_SHARD_MAX_HEADER];

static void check_shard(const uint8_t *data, size_t size) {
    dsc_shard_view_t view;
    int rc = dsc_shard_parse(data, size, &view);
    if (rc < 0) {
        FUZZ_ASSERT(strcmp(dsc_err_name(rc), "DSC_UNKNOWN") != 0);
        return;
    }
    FUZZ_ASSERT(rc == 0 && view.base == data && view.size == size);
    /* Decoding then encoding an accepted header gives back the same bytes. */
    int n = dsc_shard_header_encode(&view.header, header_copy, sizeof header_copy);
    FUZZ_ASSERT(n > 0 && (uint32_t)n == view.header.header_len);
    FUZZ_ASSERT(memcmp(header_copy, data, (size_t)n) == 0);

    uint64_t samples = 0;
    for (uint32_t i = 0; i < view.footer.chunk_count; i++) {
        dsc_chunk_entry_t entry;
        FUZZ_ASSERT(dsc_shard_chunk(&view, i, &entry) == 0);
        const uint8_t *stored = dsc_shard_chunk_data(&view, &entry);
        FUZZ_ASSERT(stored != NULL && stored >= data + view.header.header_len);
        FUZZ_ASSERT(stored + entry.stored_len <= data + view.footer.index_offset);
        FUZZ_ASSERT(entry.first_sample == samples);
        const dsc_schema_t *schema = &view.header.schema;
        uint64_t least = dsc_schema_chunk_min(schema, entry.sample_count);
        if (schema->var_count == 0)
            FUZZ_ASSERT((uint64_t)entry.raw_len == least);
        else
            FUZZ_ASSERT((uint64_t)entry.raw_len >= least && entry.raw_len <= DSC_CHUNK_MAX_RAW);
        samples += entry.sample_count;
        int got = dsc_chunk_decode(&entry, stored, decoded, sizeof decoded);
        if (entry.raw_len > sizeof decoded) {
            FUZZ_ASSERT(got == DSC_ENOSPC);
        } else if (got >= 0) {
            FUZZ_ASSERT((uint32_t)got == entry.raw_len &&
                        dsc_checksum(decoded, entry.raw_len) == entry.raw_checksum);
            /* The layout check reads inside the decoded bytes only (ASan: an exact copy), and
             * what it accepts stays inside them. */
            uint8_t *exact = malloc(entry.raw_len);
            FUZZ_ASSERT(exact != NULL);
            memcpy(exact, decoded, entry.raw_len);
            dsc_chunk_layout_t layout;
            int lrc = dsc_chunk_layout(schema, entry.sample_count, exact, entry.raw_len, &layout);
            if (schema->var_count == 0)
                FUZZ_ASSERT(lrc == 0);
            FUZZ_ASSERT(lrc == 0 || lrc == DSC_ECORRUPT);
            for (uint32_t f = 0; lrc == 0 && f < schema->field_count; f++) {
                const dsc_chunk_field_t *cf = &layout.fields[f];
                FUZZ_ASSERT(cf->values >= exact && cf->bytes <= entry.raw_len &&
                            cf->values + cf->bytes <= exact + entry.raw_len);
                for (uint32_t k = 0; k < entry.sample_count; k++) {
                    const uint8_t *p;
                    uint64_t n;
                    FUZZ_ASSERT(dsc_chunk_sample(&layout, schema, f, k, &p, &n) == 0);
                    FUZZ_ASSERT(p >= cf->values && p + n <= cf->values + cf->bytes);
                }
            }
            free(exact);
        } else {
            FUZZ_ASSERT(got == DSC_ECHUNKSUM || got == DSC_EDECOMPRESS || got == DSC_EDATASUM);
        }
    }
    FUZZ_ASSERT(samples == view.header.sample_count);
    dsc_chunk_entry_t entry;
    FUZZ_ASSERT(dsc_shard_chunk(&view, view.footer.chunk_count, &entry) == DSC_ERANGE);
}

/* Recomputes the header checksum, every chunk's stored checksum (and the decoded one of raw
 * chunks) and the index checksum, wherever the fields that locate them are in bounds. */
static void reseal(uint8_t *buf, size_t size) {
    if (size >= 24 && memcmp(buf, DSC_SHARD_MAGIC, 8) == 0) {
        uint32_t header_len = dsc_load_u32(buf + 12);
        if (header_len >= 24 && header_len <= size)
            dsc_store_u64(buf + header_len - 8, dsc_checksum(buf, header_len - 8));
    }
    if (size < DSC_SHARD_FOOTER_SIZE)
        return;
    uint8_t *footer = buf + size - DSC_SHARD_FOOTER_SIZE;
    uint64_t index_offset = dsc_load_u64(footer);
    uint64_t count = dsc_load_u32(footer + 8);
    uint64_t room = size - DSC_SHARD_FOOTER_SIZE;
    if (index_offset > room || room - index_offset != count * DSC_CHUNK_ENTRY_SIZE)
        return;
    uint8_t *index = buf + index_offset;
    for (uint64_t i = 0; i < count; i++) {
        uint8_t *entry = index + i * DSC_CHUNK_ENTRY_SIZE;
        uint64_t offset = dsc_load_u64(entry);
        uint32_t stored_len = dsc_load_u32(entry + 16);
        if (offset > size || stored_len > size - offset)
            continue;
        uint64_t sum = dsc_checksum(buf + offset, stored_len);
        dsc_store_u64(entry + 32, sum);
        if (entry[28] == DSC_CODEC_RAW)
            dsc_store_u64(entry + 40, sum);
    }
    dsc_store_u64(footer + 16, dsc_checksum(index, (size_t)count * DSC_CHUNK_ENTRY_SIZE));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    check_shard(data, size);
    uint8_t *copy = malloc(size ? size : 1);
    if (copy == NULL)
        return 0;
    memcpy(copy, data, size);
    reseal(copy, size);
    check_shard(copy, size);
    free(copy);
    return 0;
}
