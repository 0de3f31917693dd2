/* Variable-length fields in the loader: batches per second of a token dataset `tok:i32[]`
 * (lengths 1..2L-1, mean L) against the fixed-shape reference `tok:i32[L]` of the same bytes,
 * both read from their shard files (fallback_path: no server, so the loader's own work is what
 * is measured), shuffled, values + offsets and padded; the median of interleaved runs, and the
 * ratio to the reference measured in the same run.
 * usage: bench_loader_var [--samples N] [--mean-len L] [--batch B] [--reps R] [--epochs E] */
#include "bench_common.h"
#include "dscache.h"
#include "manifest.h"
#include "manifest_io.h"
#include "shard.h"
#include "util.h"
#include "wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t samples = 40000, mean_len = 256;
static uint32_t batch = 256, reps = 3, epochs = 2;

static uint64_t len_of(uint64_t i, int variable) {
    return variable ? 1 + (i * 2654435761u) % (2 * mean_len - 1) : mean_len;
}

/* Writes DIR (lz4-free: raw chunks, so that decoding is a checksum pass) with `tok` fixed or
 * variable; ~1 MiB chunks, 16 MiB shards. Returns 0 or -1. */
static int write_dataset(const char *dir, const char *name, int variable) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    if (system(cmd) != 0)
        return -1;
    uint32_t chunk_samples = (uint32_t)((1u << 20) / (mean_len * 4));
    uint64_t shard_samples = (uint64_t)chunk_samples * 16;
    uint32_t shards = (uint32_t)((samples + shard_samples - 1) / shard_samples);
    dsc_manifest_t *m = dsc_manifest_alloc(shards);
    if (m == NULL)
        return -1;
    snprintf(m->name, DSC_MAX_NAME, "%s", name);
    m->schema.field_count = 1;
    snprintf(m->schema.fields[0].name, DSC_MAX_NAME, "tok");
    m->schema.fields[0].dtype = DSC_DTYPE_I32;
    m->schema.fields[0].ndim = 1;
    m->schema.fields[0].shape[0] = variable ? DSC_DIM_VARIABLE : (uint32_t)mean_len;
    if (dsc_schema_finish(&m->schema) < 0)
        return -1;
    uint64_t rows = 0, rows_max = 0;
    for (uint64_t i = 0; i < samples; i++) {
        rows += len_of(i, 1);
        rows_max = len_of(i, 1) > rows_max ? len_of(i, 1) : rows_max;
    }
    if (variable)
        m->field_stats[0] = (dsc_manifest_field_stats_t){rows, rows_max, rows_max * 4,
                                                         (double)rows * 4 / (double)samples};
    size_t raw_cap = (size_t)chunk_samples * (2 * mean_len * 4 + 8) + 8;
    size_t file_cap = 16 * raw_cap + (64u << 10);
    uint8_t *raw = malloc(raw_cap), *file = malloc(file_cap), *enc = malloc(raw_cap + 1024);
    uint8_t *index = malloc(16 * DSC_CHUNK_ENTRY_SIZE);
    int rc = -1;
    if (!raw || !file || !enc || !index)
        goto out;
    for (uint32_t s = 0; s < shards; s++) {
        uint64_t first = s * shard_samples;
        uint64_t count = samples - first < shard_samples ? samples - first : shard_samples;
        dsc_shard_header_t h;
        memset(&h, 0, sizeof h);
        h.shard_id = s;
        h.sample_count = count;
        h.chunk_samples = chunk_samples;
        snprintf(h.dataset, DSC_MAX_NAME, "%s", name);
        h.schema = m->schema;
        int hl = dsc_shard_header_encode(&h, file, file_cap);
        if (hl < 0)
            goto out;
        size_t at = (size_t)hl;
        uint32_t chunks = 0;
        for (uint64_t c = 0; c < count; c += chunk_samples, chunks++) {
            uint32_t n = (uint32_t)(count - c < chunk_samples ? count - c : chunk_samples);
            size_t len = 0;
            if (variable) {
                uint64_t off = 0;
                for (uint32_t k = 0; k <= n; k++) {
                    dsc_store_u64(raw + len, off);
                    len += 8;
                    if (k < n)
                        off += len_of(first + c + k, 1);
                }
            }
            for (uint32_t k = 0; k < n; k++)
                for (uint64_t j = 0; j < len_of(first + c + k, variable); j++) {
                    int32_t v = (int32_t)(first + c + k + j);
                    memcpy(raw + len, &v, 4);
                    len += 4;
                }
            dsc_chunk_entry_t e;
            memset(&e, 0, sizeof e);
            const void *stored = NULL;
            if (dsc_chunk_encode(DSC_CODEC_RAW, 0, raw, len, enc, raw_cap + 1024, &e, &stored) < 0)
                goto out;
            e.offset = at;
            e.first_sample = c;
            e.sample_count = n;
            memcpy(file + at, stored, e.stored_len);
            at += e.stored_len;
            dsc_chunk_entry_encode(&e, index + chunks * DSC_CHUNK_ENTRY_SIZE);
        }
        dsc_shard_footer_t footer = {.index_offset = at, .chunk_count = chunks};
        footer.index_checksum = dsc_checksum(index, (size_t)chunks * DSC_CHUNK_ENTRY_SIZE);
        memcpy(file + at, index, (size_t)chunks * DSC_CHUNK_ENTRY_SIZE);
        at += (size_t)chunks * DSC_CHUNK_ENTRY_SIZE;
        dsc_shard_footer_encode(&footer, file + at);
        at += DSC_SHARD_FOOTER_SIZE;
        dsc_manifest_shard_t *ms = &m->shards[s];
        ms->id = s;
        snprintf(ms->file, sizeof ms->file, "shard-%05u.dsc", s);
        ms->samples = count;
        ms->bytes = at;
        ms->chunks = chunks;
        ms->chunk_samples = chunk_samples;
        ms->checksum = dsc_checksum(file, at);
        snprintf(cmd, sizeof cmd, "%s/%s", dir, ms->file);
        FILE *fp = fopen(cmd, "wb");
        if (fp == NULL || fwrite(file, 1, at, fp) != at || fclose(fp) != 0)
            goto out;
    }
    dsc_manifest_finish(m);
    rc = dsc_manifest_save(dir, m) == 0 ? 0 : -1;
out:
    dsc_manifest_free(m);
    free(raw);
    free(file);
    free(enc);
    free(index);
    return rc;
}

typedef struct run {
    double seconds, collate_seconds;
    uint64_t bytes, batches;
} run_t;

/* `epochs` shuffled epochs from the files; pad: padded output. */
static int run_once(const char *dir, const char *name, int pad, run_t *out) {
    dsc_loader_options_t o;
    DSC_LOADER_OPTIONS_INIT(&o);
    o.fallback_path = dir;
    o.dataset = name;
    o.batch_size = batch;
    o.seed = 1;
    dsc_field_options_t fo;
    dsc_field_options_init(&fo, sizeof fo);
    fo.name = "tok";
    fo.pad = 1;
    if (pad) {
        o.field_options = &fo;
        o.field_option_count = 1;
    }
    dsc_loader_t *l;
    int rc = dsc_loader_create(&o, &l);
    if (rc < 0) {
        fprintf(stderr, "create %s: %s\n", name, dsc_strerror(rc));
        return rc;
    }
    double t0 = dsc_now_s();
    uint64_t sum = 0;
    for (uint32_t e = 0; e < epochs; e++) {
        dsc_batch_t *b;
        while ((rc = dsc_loader_next(l, &b)) == 0) {
            dsc_tensor_view_t v;
            dsc_batch_field(b, 0, &v);
            sum += ((const uint8_t *)v.data)[0]; /* touch it */
        }
        if (rc != DSC_EOF) {
            fprintf(stderr, "next %s: %s\n", name, dsc_strerror(rc));
            dsc_loader_destroy(l);
            return rc;
        }
    }
    out->seconds = dsc_now_s() - t0;
    dsc_stats_t st = {.struct_size = sizeof st};
    dsc_loader_stats(l, &st);
    out->collate_seconds = st.collate_seconds;
    out->bytes = st.bytes;
    out->batches = st.batches;
    dsc_loader_destroy(l);
    return sum == UINT64_MAX ? -1 : 0;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0) {
            printf("usage: bench_loader_var [--samples N (40000)] [--mean-len L (256)] [--batch B "
                   "(256)] [--reps R (3)] [--epochs E (2)]\n"
                   "Batches/s of tok:i32[] (lengths 1..2L-1) against tok:i32[L], same bytes, "
                   "read from shard files by the loader; median of R interleaved runs.\n");
            return 0;
        }
        if (v == NULL)
            break;
        if (strcmp(a, "--samples") == 0)
            samples = strtoull(v, NULL, 10);
        else if (strcmp(a, "--mean-len") == 0)
            mean_len = strtoull(v, NULL, 10);
        else if (strcmp(a, "--batch") == 0)
            batch = (uint32_t)atoi(v);
        else if (strcmp(a, "--reps") == 0)
            reps = (uint32_t)atoi(v);
        else if (strcmp(a, "--epochs") == 0)
            epochs = (uint32_t)atoi(v);
        else {
            fprintf(stderr, "bench_loader_var: unknown option %s (--help)\n", a);
            return 2;
        }
    }
    if (reps < 1 || reps > BENCH_MAX_REPS || mean_len < 1 || samples < batch) {
        fprintf(stderr, "bench_loader_var: bad sizes\n");
        return 2;
    }
    char work[] = "/tmp/dsc-bench-var-XXXXXX";
    if (mkdtemp(work) == NULL)
        return 1;
    char fixed_dir[128], var_dir[128];
    snprintf(fixed_dir, sizeof fixed_dir, "%s/fixed", work);
    snprintf(var_dir, sizeof var_dir, "%s/var", work);
    if (write_dataset(fixed_dir, "fixed", 0) < 0 || write_dataset(var_dir, "var", 1) < 0) {
        fprintf(stderr, "bench_loader_var: cannot write the datasets\n");
        return 1;
    }
    const char *names[3] = {"fixed i32[L] (reference)", "variable i32[], values + offsets",
                            "variable i32[], padded"};
    double rate[3][BENCH_MAX_REPS], collate[3][BENCH_MAX_REPS];
    int rc = 0;
    for (uint32_t r = 0; r < reps && rc == 0; r++)
        for (int k = 0; k < 3 && rc == 0; k++) {
            run_t run = {0};
            rc = run_once(k == 0 ? fixed_dir : var_dir, k == 0 ? "fixed" : "var", k == 2, &run);
            rate[k][r] = run.batches / run.seconds;
            collate[k][r] = run.collate_seconds / ((double)run.bytes / 1e9);
        }
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_loader_var: %s left behind\n", work);
    if (rc != 0)
        return 1;
    printf("bench_loader_var: %llu samples, mean %llu tokens (i32), batch %u, %u epochs, %u "
           "reps, %d cores\n",
           (unsigned long long)samples, (unsigned long long)mean_len, batch, epochs, reps,
           ncores());
    printf("| dataset | batches/s | x reference | collate s/GB |\n|---|---|---|---|\n");
    double ref = median(rate[0], (int)reps);
    for (int k = 0; k < 3; k++)
        printf("| %s | %.0f | %.2f | %.3f |\n", names[k], median(rate[k], (int)reps),
               median(rate[k], (int)reps) / ref, median(collate[k], (int)reps));
    return 0;
}
