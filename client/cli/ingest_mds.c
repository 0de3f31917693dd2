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
        "  bytes, str, jpeg, png, pil, pkl, json, str_int, str_float, str_decimal\n"
        "                               u8[]: the encoded bytes as stored (str: UTF-8 text)\n"
        "An ndarray without a fixed dtype and shape, and other encodings, are refused.\n"
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
    if (ingest_options_check(CMD, &opt) < 0)
        return DSC_CLI_USAGE;
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
        }
        for (uint32_t g = 0; g < f; g++)
            if (strcmp(fields[g].name, field->name) == 0) {
                exit_code = dsc_cli_usage(CMD, "two fields named '%s'", field->name);
                goto cleanup;
            }
    }
    uint64_t source_bytes = 0;
    for (uint32_t s = 0; s < index.shard_count; s++)
        source_bytes += index.shards[s].zstd ? index.shards[s].zip_bytes
                                             : index.shards[s].raw_bytes;
    if (ingest_run_begin(CMD, &opt, fields, field_count, NULL, source_bytes, &run) != 0)
        goto cleanup;
    for (uint32_t f = 0; f < field_count; f++)
        if (index.columns[column_of[f]].u64_as_i64)
            ingest_run_note(run, "column '%s' (%s) stored as i64, bits unchanged",
                            index.columns[column_of[f]].name, index.columns[column_of[f]].encoding);

    uint64_t done = 0, ordinal = 0;
    for (uint32_t s = 0; s < index.shard_count; s++) {
        const dsc_mds_shard_info_t *info = &index.shards[s];
        char path[4096 + 256], why[256], who[96];
        size_t raw_len = 0;
        snprintf(who, sizeof who, "shard %u (%llu samples)", s,
                 (unsigned long long)info->samples);
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
            for (uint32_t f = 0; f < field_count; f++) {
                out[f].data = values[column_of[f]].data;
                out[f].bytes = values[column_of[f]].bytes;
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
