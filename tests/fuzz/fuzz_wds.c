/* libFuzzer target for the WebDataset tar reader (libarchive's tar reader and our grouping of
 * files into samples): never reads out of bounds, ends, and every sample it yields is well
 * formed (a key, 1..DSC_WDS_MAX_MEMBERS members with extensions, held <= size); with a small
 * sample limit, a sample within it holds all its bytes and one over it says so (too_large) and
 * holds at most the limit. */
#include "wds.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static volatile unsigned touched;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = malloc(size ? size : 1);
    if (buf == NULL)
        return 0;
    if (size)
        memcpy(buf, data, size);
    for (int limit = 0; limit < 3; limit++) {
        dsc_wds_reader_t *reader = NULL;
        uint64_t sample_limit = limit == 2 ? 40 : DSC_WDS_DEFAULT_SAMPLE_LIMIT;
        if (dsc_wds_reader_open_memory(buf, size, limit == 1 ? 16 : 0, &reader) == 0) {
            dsc_wds_reader_set_sample_limit(reader, sample_limit);
            const dsc_wds_sample_t *sample;
            int rc;
            uint64_t expect = 0;
            while ((rc = dsc_wds_reader_next(reader, &sample)) == 1) {
                if (sample->key == NULL || sample->key[0] == '\0' || sample->member_count == 0 ||
                    sample->member_count > DSC_WDS_MAX_MEMBERS || sample->ordinal != expect++)
                    abort();
                uint64_t held = 0, declared = 0;
                for (uint32_t m = 0; m < sample->member_count; m++) {
                    const dsc_wds_member_t *mem = &sample->members[m];
                    if (mem->ext == NULL || mem->ext[0] == '\0' || mem->held > mem->size ||
                        (limit == 1 && mem->held > 16))
                        abort();
                    held += mem->held;
                    declared += mem->size;
                    if (limit == 2 && sample->too_large == NULL && mem->held != mem->size)
                        abort();
                    if (mem->held > 0) /* both ends of the data are readable */
                        touched += (unsigned)mem->data[0] + mem->data[mem->held - 1];
                    int64_t v;
                    dsc_wds_parse_int(mem->data, (size_t)mem->held, &v);
                }
                if (held > sample_limit ||
                    (sample->too_large == NULL) != (declared <= sample_limit))
                    abort();
            }
            if (rc < 0 && dsc_wds_reader_error(reader)[0] == '\0')
                abort();
            if (dsc_wds_reader_next(reader, &sample) != (rc < 0 ? rc : 0))
                abort();
        }
        dsc_wds_reader_close(reader);
    }
    free(buf);
    return 0;
}
