/* libFuzzer target: parses the input as a whole shard file, decodes every chunk into a bounded
 * buffer, and checks that what the parser accepts is self-consistent and canonical. */
#include "shard.h"

#include <stdint.h>
#include <string.h>

/* A property violation, not a crash on input: stop loudly in every build. */
#define FUZZ_ASSERT(cond)                                                                          \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

static uint8_t decoded[1 << 20];
static uint8_t header_copy[DSC_SHARD_MAX_HEADER];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dsc_shard_view_t view;
    int rc = dsc_shard_parse(data, size, &view);
    if (rc < 0) {
        FUZZ_ASSERT(strcmp(dsc_err_name(rc), "DSC_UNKNOWN") != 0);
        return 0;
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
        FUZZ_ASSERT((uint64_t)entry.raw_len == entry.sample_count * view.header.schema.sample_bytes);
        samples += entry.sample_count;
        int got = dsc_chunk_decode(&entry, stored, decoded, sizeof decoded);
        if (entry.raw_len > sizeof decoded)
            FUZZ_ASSERT(got == DSC_ENOSPC);
        else if (got >= 0)
            FUZZ_ASSERT((uint32_t)got == entry.raw_len &&
                        dsc_checksum(decoded, entry.raw_len) == entry.raw_checksum);
        else
            FUZZ_ASSERT(got == DSC_ECHUNKSUM || got == DSC_EDECOMPRESS || got == DSC_EDATASUM);
    }
    FUZZ_ASSERT(samples == view.header.sample_count);
    dsc_chunk_entry_t entry;
    FUZZ_ASSERT(dsc_shard_chunk(&view, view.footer.chunk_count, &entry) == DSC_ERANGE);
    return 0;
}
