/* Test helper for the writer: `writer_tool write DIR SAMPLES [THREADS]` writes a dataset with
 * the fields ids:i32[], mel:f32[?,80], image:u8[3,32,32] and label:i64 through the public C
 * writer (deterministic values); `writer_tool chunks DIR SHARD OUT` writes the decoded chunks of
 * one shard back to back, each layout checked: what `dscache get` must fetch. */
#include "dscache.h"
#include "manifest.h"
#include "manifest_io.h"
#include "shard.h"
#include "testdata.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int write_dataset(const char *dir, uint64_t samples, uint32_t threads) {
    dsc_writer_options_t o;
    dsc_writer_options_init(&o, sizeof o);
    o.path = dir;
    o.fields = "ids:i32[],mel:f32[?,80],image:u8[3,32,32],label:i64";
    o.threads = threads;
    o.chunk_bytes = 64 << 10;
    o.shard_bytes = 512 << 10;
    dsc_writer_t *w = NULL;
    int rc = dsc_writer_create(&o, &w);
    if (rc < 0) {
        char why[512];
        dsc_writer_last_error(NULL, why, sizeof why);
        fprintf(stderr, "writer_tool: %s\n", why);
        return 1;
    }
    static int32_t ids[64];
    static float mel[5 * 80];
    static uint8_t image[3072];
    for (uint64_t i = 0; i < samples; i++) {
        uint32_t n_ids = (uint32_t)((i * 7) % 61), n_mel = (uint32_t)(i % 6);
        for (uint32_t k = 0; k < n_ids; k++)
            ids[k] = (int32_t)(i * 1000 + k);
        for (uint32_t k = 0; k < n_mel * 80; k++)
            mel[k] = (float)i * 0.5f + (float)k;
        for (uint32_t k = 0; k < sizeof image; k++)
            image[k] = (uint8_t)((i + k / 32) & 0xff);
        int64_t label = (int64_t)i;
        dsc_writer_value_t v[4] = {
            {ids, n_ids * 4ull}, {mel, n_mel * 320ull}, {image, sizeof image}, {&label, 8}};
        if ((rc = dsc_writer_add(w, v, 4)) < 0) {
            char why[512];
            dsc_writer_last_error(w, why, sizeof why);
            fprintf(stderr, "writer_tool: %s\n", why);
            dsc_writer_abort(w);
            return 1;
        }
    }
    dsc_writer_stats_t st = {.struct_size = sizeof st};
    if ((rc = dsc_writer_finish(w, &st)) < 0) {
        char why[512];
        dsc_writer_last_error(NULL, why, sizeof why);
        fprintf(stderr, "writer_tool: finish: %s\n", why);
        return 1;
    }
    printf("wrote %llu samples, %u shards, %llu chunks\n", (unsigned long long)st.samples,
           st.shards, (unsigned long long)st.chunks);
    return 0;
}

static int dump_chunks(const char *dir, uint32_t shard, const char *out_path) {
    dsc_manifest_t *m = NULL;
    int rc = dsc_manifest_load(dir, &m);
    if (rc < 0 || shard >= m->shard_count) {
        fprintf(stderr, "writer_tool: %s: %s\n", dir, rc < 0 ? dsc_strerror(rc) : "no such shard");
        dsc_manifest_free(m);
        return 1;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, m->shards[shard].file);
    uint64_t len;
    uint8_t *file = testdata_read_file(path, &len);
    FILE *out = fopen(out_path, "wb");
    dsc_shard_view_t v;
    int status = 1;
    if (file == NULL || out == NULL || dsc_shard_parse(file, len, &v) < 0)
        goto done;
    for (uint32_t c = 0; c < v.footer.chunk_count; c++) {
        dsc_chunk_entry_t e;
        dsc_shard_chunk(&v, c, &e);
        uint8_t *raw = malloc(e.raw_len);
        dsc_chunk_layout_t l;
        int ok = raw != NULL &&
                 dsc_chunk_decode(&e, dsc_shard_chunk_data(&v, &e), raw, e.raw_len) >= 0 &&
                 dsc_chunk_layout(&m->schema, e.sample_count, raw, e.raw_len, &l) == 0 &&
                 fwrite(raw, 1, e.raw_len, out) == e.raw_len;
        free(raw);
        if (!ok)
            goto done;
    }
    status = 0;
done:
    if (out != NULL && fclose(out) != 0)
        status = 1;
    if (status != 0)
        fprintf(stderr, "writer_tool: cannot dump %s\n", path);
    free(file);
    dsc_manifest_free(m);
    return status;
}

int main(int argc, char **argv) {
    if (argc >= 4 && strcmp(argv[1], "write") == 0)
        return write_dataset(argv[2], strtoull(argv[3], NULL, 10),
                             argc > 4 ? (uint32_t)atoi(argv[4]) : 0);
    if (argc == 5 && strcmp(argv[1], "chunks") == 0)
        return dump_chunks(argv[2], (uint32_t)atoi(argv[3]), argv[4]);
    fprintf(stderr, "usage: writer_tool write DIR SAMPLES [THREADS] | chunks DIR SHARD OUT\n");
    return 2;
}
