/* libFuzzer target for the MosaicML MDS reader: the input is parsed as an index.json and, with a
 * fixed index of every column kind, as a decompressed shard; nothing reads out of bounds and
 * every accepted sample's column values lie inside the sample. */
#include "dscache_base.h"
#include "mds.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char fixed_index[] =
    "{\"version\":2,\"shards\":[{\"format\":\"mds\",\"version\":2,\"compression\":null,"
    "\"samples\":3,\"raw_data\":{\"basename\":\"shard.00000.mds\",\"bytes\":1},\"zip_data\":null,"
    "\"column_names\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\"],"
    "\"column_encodings\":[\"bytes\",\"int\",\"ndarray:int16:2,3\",\"str\",\"ndarray\","
    "\"ndarray:uint16\"],\"column_sizes\":[null,8,12,null,null,null]}]}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = malloc(size ? size : 1);
    if (buf == NULL)
        return 0;
    if (size)
        memcpy(buf, data, size);
    char err[256];
    dsc_mds_index_t index;
    if (dsc_mds_index_parse((const char *)buf, size, &index, err, sizeof err) == 0) {
        if (index.column_count == 0 || index.shard_count == 0)
            abort();
        for (uint32_t c = 0; c < index.column_count; c++)
            if (index.columns[c].dtype == 0 || index.columns[c].name[0] == '\0')
                abort();
        dsc_mds_index_free(&index);
    } else if (err[0] == '\0') {
        abort();
    }
    dsc_mds_index_t fixed;
    if (dsc_mds_index_parse(fixed_index, sizeof fixed_index - 1, &fixed, err, sizeof err) != 0)
        abort();
    const char *problem;
    dsc_mds_shard_t shard;
    uint64_t expect = size >= 4 ? (uint64_t)buf[0] | (uint64_t)buf[1] << 8 : 0;
    if (dsc_mds_shard_open(buf, size, expect, &shard, &problem) == 0) {
        for (uint32_t i = 0; i < shard.samples; i++) {
            dsc_mds_value_t values[DSC_MDS_MAX_COLUMNS];
            if (dsc_mds_sample(&shard, &fixed, i, values, &problem) == 0) {
                for (uint32_t c = 0; c < fixed.column_count; c++)
                    if (values[c].data < buf || values[c].data + values[c].bytes > buf + size)
                        abort();
                if (values[1].bytes != 8 || values[2].bytes != 12)
                    abort();
                for (uint32_t c = 4; c < 6; c++) {
                    int dtype;
                    uint32_t ndim;
                    uint64_t shape[DSC_MDS_MAX_DIMS], off;
                    if (dsc_mds_ndarray(&fixed.columns[c], values[c].data, values[c].bytes, &dtype,
                                        &ndim, shape, &off, &problem) == 0) {
                        uint64_t n = (uint64_t)dsc_dtype_size(dtype);
                        for (uint32_t d = 0; d < ndim; d++)
                            n *= shape[d];
                        if (off > values[c].bytes || values[c].bytes - off != n || ndim == 0)
                            abort();
                    } else if (problem == NULL) {
                        abort();
                    }
                }
            } else if (problem == NULL) {
                abort();
            }
        }
    } else if (problem == NULL) {
        abort();
    }
    /* The streamed table (dsc_mds_table_*) agrees with dsc_mds_shard_open on the same bytes,
     * and each sample split from its own bytes (dsc_mds_sample_split) as dsc_mds_sample does. */
    if (size >= 4) {
        uint32_t count = (uint32_t)buf[0] | (uint32_t)buf[1] << 8 | (uint32_t)buf[2] << 16 |
                         (uint32_t)buf[3] << 24;
        uint64_t limit = size >= 5 ? buf[4] * 16u : 0;
        dsc_mds_table_t table;
        int rc = dsc_mds_table_begin(&table, count, expect, size, limit, &problem);
        uint64_t i = 0, over = 0;
        for (; rc == 0 && i <= table.samples; i++) {
            uint64_t at = 4 + 4 * i, bytes;
            if (at + 4 > size) {
                rc = DSC_ETRUNCATED;
                break;
            }
            uint32_t off = (uint32_t)buf[at] | (uint32_t)buf[at + 1] << 8 |
                           (uint32_t)buf[at + 2] << 16 | (uint32_t)buf[at + 3] << 24;
            rc = dsc_mds_table_next(&table, off, &bytes, &problem);
            if (rc == DSC_ETOOLARGE) {
                if (bytes <= limit)
                    abort();
                over++;
                rc = 0;
            } else if (rc == 0 && i > 0 && bytes > limit) {
                abort();
            } else if (rc < 0 && problem == NULL) {
                abort();
            }
        }
        int opened = dsc_mds_shard_open(buf, size, expect, &shard, &problem) == 0;
        if (opened != (rc == 0))
            abort();
        for (uint32_t k = 0; opened && k < shard.samples; k++) {
            dsc_mds_value_t a[DSC_MDS_MAX_COLUMNS], b[DSC_MDS_MAX_COLUMNS];
            uint32_t begin = (uint32_t)buf[4 + 4 * k] | (uint32_t)buf[5 + 4 * k] << 8 |
                             (uint32_t)buf[6 + 4 * k] << 16 | (uint32_t)buf[7 + 4 * k] << 24;
            uint32_t end = (uint32_t)buf[8 + 4 * k] | (uint32_t)buf[9 + 4 * k] << 8 |
                           (uint32_t)buf[10 + 4 * k] << 16 | (uint32_t)buf[11 + 4 * k] << 24;
            int ra = dsc_mds_sample(&shard, &fixed, k, a, &problem);
            int rb = dsc_mds_sample_split(&fixed, buf + begin, end - begin, b, &problem);
            if (ra != rb)
                abort();
            for (uint32_t c = 0; ra == 0 && c < fixed.column_count; c++)
                if (a[c].data != b[c].data || a[c].bytes != b[c].bytes)
                    abort();
        }
        (void)over;
    }
    dsc_mds_index_free(&fixed);
    free(buf);
    return 0;
}
