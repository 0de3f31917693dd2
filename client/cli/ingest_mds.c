/* dscache ingest mds: a MosaicML Streaming MDS dataset (index.json + shard.NNNNN.mds, raw or
 * zstd-compressed) into a dataset, column by column. */
#include "ingest_common.h"
#include "mds.h"

#include "dscache.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#define CMD "ingest mds"

static void print_help(void) {
    printf(
        "usage: dscache ingest mds -o OUT_DIR [--field COLUMN[:NAME] ...] [OPTIONS] DIR\n"
        "\n"
        "Reads a MosaicML Streaming MDS dataset: DIR/index.json and the shards it lists, raw\n"
        "(shard.00000.mds) or zstd-compressed (shard.00000.mds.zstd), and writes one field per\n"
        "column, in the index's column order:\n"
        "  int, int8..int64, uint8..uint32, float16/32/64   a scalar of that type (int: i64)\n"
        "  uint64                       i64, bits unchanged (dscache has no u64; a note says so)\n"
        "  ndarray:DTYPE:D0,D1,...      a fixed-shape array DTYPE[D0,D1,...]\n"
        "  ndarray, ndarray:DTYPE       dtype and shape stored per sample: DTYPE[shape] when\n"
        "                               all agree, else DTYPE[?,...] (a variable leading\n"
        "                               dimension; dtype and later dimensions must agree)\n"
        "  bytes, str, jpeg, png, pil, pkl, json, str_int, str_float, str_decimal\n"
        "                               u8[]: the encoded bytes as stored (str: UTF-8 text)\n"
        "Other encodings are refused.\n"
        "\n"
        "      --field COLUMN[:NAME]   ingest only these columns (repeat; in this order),\n"
        "                              optionally renamed\n"
        "\n"
        "A shard whose file is missing, has another size than index.json says, does not\n"
        "decompress, or whose sample table is damaged is an error naming the file; so is a\n"
        "sample whose column sizes do not add up. With --skip-bad the shard's (or the\n"
        "sample's) samples are skipped and counted.\n"
        "\n" INGEST_COMMON_HELP "\n"
        "Prints a progress bar when stderr is a terminal and a one-line summary at the end.\n"
        "Exit codes: 0 done, 1 failed (input or I/O error), 2 bad arguments.\n");
}

/* The shard's decompressed bytes into *raw (to free), or a reason in why. */
static int load_shard(const char *dir, const dsc_mds_shard_info_t *info, uint8_t **raw,
                      size_t *raw_len, char *path, size_t path_len, char *why, size_t why_len) {
    const char *base = info->zstd ? info->zip_basename : info->raw_basename;
    uint64_t want = info->zstd ? info->zip_bytes : info->raw_bytes;
    snprintf(path, path_len, "%s/%s", dir, base);
    uint8_t *file = NULL;
    size_t len = 0;
    int rc = ingest_read_file(path, &file, &len);
    if (rc < 0) {
        snprintf(why, why_len, "%s", dsc_strerror(rc));
        return rc;
    }
    if (len != want) {
        snprintf(why, why_len, "%zu bytes, index.json says %llu (truncated or replaced)", len,
                 (unsigned long long)want);
        free(file);
        return DSC_ETRUNCATED;
    }
    if (!info->zstd) {
        *raw = file;
        *raw_len = len;
        return 0;
    }
    uint8_t *out = malloc(info->raw_bytes ? (size_t)info->raw_bytes : 1);
    if (out == NULL) {
        free(file);
        snprintf(why, why_len, "%s", dsc_strerror(DSC_ENOMEM));
        return DSC_ENOMEM;
    }
    size_t got = ZSTD_decompress(out, (size_t)info->raw_bytes, file, len);
    free(file);
    if (ZSTD_isError(got) || got != info->raw_bytes) {
        snprintf(why, why_len, "zstd: %s",
                 ZSTD_isError(got) ? ZSTD_getErrorName(got)
                                   : "decompressed size differs from index.json's raw bytes");
        free(out);
        return DSC_EDECOMPRESS;
    }
    *raw = out;
    *raw_len = got;
    return 0;
}

/* A dynamic ndarray column's common dtype and shape, found by a first pass over the shards. */
typedef struct dyn_ref {
    int have, dtype, same_shape;
    uint32_t ndim;
    uint64_t shape[DSC_MDS_MAX_DIMS];
} dyn_ref_t;

/* Checks a dynamic ndarray value against its reference (when there is one); fills *out with the
 * array's values. final: against the settled field (fixed shape included). Returns 0 or 1 (bad,
 * why says what). */
static int check_dynamic(const dsc_mds_column_t *col, const dyn_ref_t *ref,
                         const ingest_field_t *field, int final, const dsc_mds_value_t *v,
                         ingest_value_t *out, dyn_ref_t *seen, char *why, size_t why_len) {
    int dtype;
    uint32_t ndim;
    uint64_t shape[DSC_MDS_MAX_DIMS], off;
    const char *problem;
    if (dsc_mds_ndarray(col, v->data, v->bytes, &dtype, &ndim, shape, &off, &problem) < 0) {
        snprintf(why, why_len, "column '%s': %s", col->name, problem);
        return 1;
    }
    if (ref->have) {
        int differ = dtype != ref->dtype || ndim != ref->ndim;
        for (uint32_t i = 1; !differ && i < ndim; i++)
            differ = shape[i] != ref->shape[i];
        if (final && !differ && field->dims[0] != 0)
            differ = shape[0] != field->dims[0];
        if (differ) {
            snprintf(why, why_len,
                     "column '%s': a %s array of %u dimensions, earlier samples have %s with %u "
                     "(and the same dimensions after the first)",
                     col->name, dsc_dtype_name(dtype), ndim, dsc_dtype_name(ref->dtype), ref->ndim);
            return 1;
        }
    }
    if (out != NULL) {
        out->data = v->data + off;
        out->bytes = v->bytes - off;
    }
    if (seen != NULL) {
        seen->dtype = dtype;
        seen->ndim = ndim;
        memcpy(seen->shape, shape, sizeof shape);
    }
    return 0;
}

int dsc_cmd_ingest_mds(int argc, char **argv) {
    static const struct option options[] = {
        INGEST_COMMON_OPTIONS, {"field", required_argument, NULL, 2001}, {NULL, 0, NULL, 0}};
    ingest_options_t opt;
    ingest_options_init(&opt);
    const char *selected[INGEST_MAX_FIELDS];
    uint32_t selected_count = 0;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:h", options, NULL)) != -1) {
        int handled = ingest_common_option(CMD, &opt, c, optarg);
        if (handled < 0)
            return DSC_CLI_USAGE;
        if (handled)
            continue;
        switch (c) {
        case 'h':
            print_help();
            return DSC_CLI_OK;
        case 2001:
            if (selected_count == INGEST_MAX_FIELDS)
                return dsc_cli_usage(CMD, "at most %d --field options", INGEST_MAX_FIELDS);
            selected[selected_count++] = optarg;
            break;
        default:
            return dsc_cli_usage(CMD, "unknown option");
        }
    }
    if (optind != argc - 1)
        return dsc_cli_usage(CMD, "expected one DIR (holding index.json)");
    int checked = ingest_options_check(CMD, &opt);
    if (checked != DSC_CLI_OK)
        return checked;
    const char *dir = argv[optind];
    int exit_code = DSC_CLI_FAIL;
    char index_path[4096];
    snprintf(index_path, sizeof index_path, "%s/index.json", dir);
    uint8_t *text = NULL, *raw = NULL;
    size_t text_len = 0;
    dsc_mds_index_t index;
    memset(&index, 0, sizeof index);
    ingest_run_t *run = NULL;
    int rc = ingest_read_file(index_path, &text, &text_len);
    if (rc < 0)
        return dsc_cli_fail(CMD, "%s: %s", index_path, dsc_strerror(rc));
    char err[512];
    rc = dsc_mds_index_parse((const char *)text, text_len, &index, err, sizeof err);
    free(text);
    if (rc < 0)
        return dsc_cli_fail(CMD, "%s: %s", index_path, err);

    /* columns to fields */
    uint32_t column_of[INGEST_MAX_FIELDS];
    ingest_field_t fields[INGEST_MAX_FIELDS];
    uint32_t field_count = selected_count ? selected_count : index.column_count;
    int have_dynamic = 0;
    dyn_ref_t refs[INGEST_MAX_FIELDS];
    memset(refs, 0, sizeof refs);
    memset(fields, 0, sizeof fields);
    for (uint32_t f = 0; f < field_count; f++) {
        char column[64] = "", rename[64] = "";
        if (selected_count) {
            const char *colon = strchr(selected[f], ':');
            size_t n = colon ? (size_t)(colon - selected[f]) : strlen(selected[f]);
            snprintf(column, sizeof column, "%.*s", (int)n, selected[f]);
            if (colon)
                snprintf(rename, sizeof rename, "%s", colon + 1);
        } else {
            snprintf(column, sizeof column, "%s", index.columns[f].name);
        }
        uint32_t col = 0;
        while (col < index.column_count && strcmp(index.columns[col].name, column) != 0)
            col++;
        if (col == index.column_count) {
            exit_code = dsc_cli_usage(CMD, "--field %s: %s has no column '%s'", selected[f],
                                      index_path, column);
            goto cleanup;
        }
        const dsc_mds_column_t *mc = &index.columns[col];
        column_of[f] = col;
        ingest_field_t *field = &fields[f];
        snprintf(field->name, sizeof field->name, "%s", rename[0] ? rename : mc->name);
        ingest_sanitize_name(field->name);
        field->dtype = mc->dtype;
        if (mc->kind == DSC_MDS_BYTES) {
            field->ndim = 1;
            field->dims[0] = 0;
        } else if (mc->kind == DSC_MDS_NDARRAY) {
            field->ndim = mc->ndim;
            for (uint32_t i = 0; i < mc->ndim; i++)
                field->dims[i] = mc->dims[i];
        } else if (mc->kind == DSC_MDS_NDARRAY_DYN) {
            have_dynamic = 1; /* dtype and shape settled by the first pass */
        }
        for (uint32_t g = 0; g < f; g++)
            if (strcmp(fields[g].name, field->name) == 0) {
                exit_code = dsc_cli_usage(CMD, "two fields named '%s'", field->name);
                goto cleanup;
            }
    }
    if (have_dynamic) { /* first pass: the dynamic ndarrays' dtype and shape */
        uint64_t first_of_shard = 0;
        for (uint32_t s = 0; s < index.shard_count; first_of_shard += index.shards[s++].samples) {
            char path[4096 + 256], why[512];
            size_t raw_len = 0;
            const char *problem = NULL;
            dsc_mds_shard_t shard;
            rc = load_shard(dir, &index.shards[s], &raw, &raw_len, path, sizeof path, why,
                            sizeof why);
            if (rc == 0)
                rc = dsc_mds_shard_open(raw, raw_len, index.shards[s].samples, &shard, &problem);
            if (rc < 0) {
                free(raw);
                raw = NULL;
                if (opt.skip_bad)
                    continue; /* the second pass counts it */
                dsc_cli_fail(CMD, "%s: shard %u (%llu samples): %s (--skip-bad skips bad samples)",
                             path, s, (unsigned long long)index.shards[s].samples,
                             problem ? problem : why);
                goto cleanup;
            }
            for (uint32_t i = 0; i < shard.samples; i++) {
                dsc_mds_value_t values[DSC_MDS_MAX_COLUMNS];
                dyn_ref_t seen[INGEST_MAX_FIELDS];
                int bad = dsc_mds_sample(&shard, &index, i, values, &problem) < 0;
                if (bad)
                    snprintf(why, sizeof why, "%s", problem);
                for (uint32_t f = 0; !bad && f < field_count; f++) {
                    const dsc_mds_column_t *col = &index.columns[column_of[f]];
                    if (col->kind == DSC_MDS_NDARRAY_DYN)
                        bad = check_dynamic(col, &refs[f], &fields[f], 0, &values[column_of[f]],
                                            NULL, &seen[f], why, sizeof why);
                }
                if (bad) {
                    if (opt.skip_bad)
                        continue;
                    dsc_cli_fail(CMD,
                                 "%s: sample %u (dataset sample %llu): %s (--skip-bad skips bad "
                                 "samples)",
                                 path, i, (unsigned long long)(first_of_shard + i), why);
                    goto cleanup;
                }
                for (uint32_t f = 0; f < field_count; f++) {
                    if (index.columns[column_of[f]].kind != DSC_MDS_NDARRAY_DYN)
                        continue;
                    if (!refs[f].have) {
                        refs[f] = seen[f];
                        refs[f].have = 1;
                        refs[f].same_shape = 1;
                    } else if (seen[f].shape[0] != refs[f].shape[0]) {
                        refs[f].same_shape = 0;
                    }
                }
            }
            free(raw);
            raw = NULL;
        }
        for (uint32_t f = 0; f < field_count; f++) {
            if (index.columns[column_of[f]].kind != DSC_MDS_NDARRAY_DYN)
                continue;
            if (!refs[f].have) {
                dsc_cli_fail(CMD, "%s: column '%s': no good sample to learn its dtype and shape",
                             index_path, index.columns[column_of[f]].name);
                goto cleanup;
            }
            fields[f].dtype = refs[f].dtype;
            fields[f].ndim = refs[f].ndim;
            for (uint32_t i = 0; i < refs[f].ndim; i++)
                fields[f].dims[i] = refs[f].shape[i];
            if (!refs[f].same_shape)
                fields[f].dims[0] = 0;
        }
    }
    uint64_t source_bytes = 0;
    for (uint32_t s = 0; s < index.shard_count; s++)
        source_bytes +=
            index.shards[s].zstd ? index.shards[s].zip_bytes : index.shards[s].raw_bytes;
    /* meta: each field's MDS encoding, e.g. {"source": "mds", "encodings": {"image": "jpeg"}} */
    char meta[16384];
    size_t at = 0;
    snprintf(meta, sizeof meta, "{\"source\": \"mds\", \"encodings\": {");
    at = strlen(meta);
    for (uint32_t f = 0; f < field_count; f++) {
        ingest_json_string(meta, sizeof meta, &at, fields[f].name);
        snprintf(meta + at, sizeof meta - at, ": ");
        at += strlen(meta + at);
        ingest_json_string(meta, sizeof meta, &at, index.columns[column_of[f]].encoding);
        if (f + 1 < field_count) {
            snprintf(meta + at, sizeof meta - at, ", ");
            at += strlen(meta + at);
        }
    }
    snprintf(meta + at, sizeof meta - at, "}}");
    if (ingest_run_begin(CMD, &opt, fields, field_count, meta, source_bytes, &run) != 0)
        goto cleanup;
    for (uint32_t f = 0; f < field_count; f++)
        if (index.columns[column_of[f]].u64_as_i64)
            ingest_run_note(run, "column '%s' (%s) stored as i64, bits unchanged",
                            index.columns[column_of[f]].name, index.columns[column_of[f]].encoding);

    uint64_t done = 0, ordinal = 0;
    for (uint32_t s = 0; s < index.shard_count; s++) {
        const dsc_mds_shard_info_t *info = &index.shards[s];
        char path[4096 + 256], why[512], who[96];
        size_t raw_len = 0;
        snprintf(who, sizeof who, "shard %u (%llu samples)", s, (unsigned long long)info->samples);
        rc = load_shard(dir, info, &raw, &raw_len, path, sizeof path, why, sizeof why);
        dsc_mds_shard_t shard;
        const char *problem = NULL;
        if (rc == 0)
            rc = dsc_mds_shard_open(raw, raw_len, info->samples, &shard, &problem);
        if (rc < 0) {
            if (ingest_run_bad(run, path, who, info->samples, "%s", problem ? problem : why) != 0)
                goto cleanup;
            free(raw);
            raw = NULL;
            ordinal += info->samples;
            done += info->zstd ? info->zip_bytes : info->raw_bytes;
            continue;
        }
        for (uint32_t i = 0; i < shard.samples; i++, ordinal++) {
            dsc_mds_value_t values[DSC_MDS_MAX_COLUMNS];
            rc = dsc_mds_sample(&shard, &index, i, values, &problem);
            if (rc < 0) {
                snprintf(who, sizeof who, "sample %u (dataset sample %llu)", i,
                         (unsigned long long)ordinal);
                if (ingest_run_bad(run, path, who, 1, "%s", problem) != 0)
                    goto cleanup;
                continue;
            }
            ingest_value_t out[INGEST_MAX_FIELDS];
            int bad = 0;
            for (uint32_t f = 0; f < field_count && !bad; f++) {
                const dsc_mds_column_t *col = &index.columns[column_of[f]];
                out[f].data = values[column_of[f]].data;
                out[f].bytes = values[column_of[f]].bytes;
                if (col->kind == DSC_MDS_NDARRAY_DYN)
                    bad = check_dynamic(col, &refs[f], &fields[f], 1, &values[column_of[f]],
                                        &out[f], NULL, why, sizeof why);
            }
            if (bad) {
                snprintf(who, sizeof who, "sample %u (dataset sample %llu)", i,
                         (unsigned long long)ordinal);
                if (ingest_run_bad(run, path, who, 1, "%s", why) != 0)
                    goto cleanup;
                continue;
            }
            if (ingest_run_add(run, out) != 0)
                goto cleanup;
        }
        free(raw);
        raw = NULL;
        done += info->zstd ? info->zip_bytes : info->raw_bytes;
        ingest_run_progress(run, done);
    }
    exit_code = ingest_run_finish(run);
    run = NULL;

cleanup:
    ingest_run_abort(run);
    free(raw);
    dsc_mds_index_free(&index);
    return exit_code;
}
