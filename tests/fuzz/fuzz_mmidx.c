/* libFuzzer target for the Megatron MMIDIDX index parser: never reads out of bounds, and what it
 * accepts is self-consistent (documents cover the sequences in order; every sequence query
 * either fits a .bin of the described size or is refused). */
#include "mmidx.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = malloc(size ? size : 1);
    if (buf == NULL)
        return 0;
    if (size)
        memcpy(buf, data, size);
    dsc_mmidx_t idx;
    int rc = dsc_mmidx_parse(buf, size, &idx);
    if (rc == 0) {
        if (idx.problem != NULL || idx.item_bytes == 0)
            abort();
        uint64_t next = 0;
        for (uint64_t d = 0; d < idx.documents && d < 4096; d++) {
            uint64_t first, count;
            if (dsc_mmidx_document(&idx, d, &first, &count) != 0 || first != next)
                abort();
            next = first + count;
        }
        uint64_t total = dsc_mmidx_total_bytes(&idx);
        for (uint64_t s = 0; s < idx.sequences && s < 4096; s++) {
            uint64_t offset, bytes;
            int q = dsc_mmidx_sequence(&idx, s, total, &offset, &bytes);
            if (q == 0 && (offset > total || bytes > total - offset))
                abort();
        }
        uint64_t offset, bytes;
        if (dsc_mmidx_sequence(&idx, idx.sequences, total, &offset, &bytes) == 0)
            abort();
    } else if (idx.problem == NULL) {
        abort(); /* every rejection carries a reason */
    }
    free(buf);
    return 0;
}
