/* dscache ingest mds: a MosaicML Streaming MDS dataset (index.json + shard.NNNNN.mds, raw or
 * zstd-compressed) into a dataset, column by column. */
#include "dsc_sys.h"
#include "ingest_common.h"
#include "mds.h"

#include "dscache.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
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

/* ---- Shards, streamed ---------------------------------------------------------------------
 * A shard is never held whole: it is read (and decompressed) in pieces of IO_PIECE bytes, the
 * offset table through one stream and the samples through another, and only the sample being
 * ingested is held, after its size (from the table) has been checked against the limit. Memory:
 * two zstd windows (as the frame asks; at most 2^ZSTD_WINDOW_LOG_MAX), 4 x IO_PIECE, and one
 * sample. */
#define IO_PIECE (128u << 10)
#define ZSTD_WINDOW_LOG_MAX 27 /* zstd's own default limit (128 MiB): levels <= 19 use <= 8 MiB */

typedef struct stream {
    int fd;
    uint64_t file_bytes, file_pos; /* the file as stored */
    ZSTD_DStream *z;               /* NULL: a raw shard */
    uint8_t *in, *out;             /* IO_PIECE each (zstd) */
    ZSTD_inBuffer zin;
    size_t out_len, out_off;
    int frame_done;
    uint64_t pos; /* decompressed bytes consumed */
} stream_t;

static void stream_close(stream_t *s) {
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
    ZSTD_freeDStream(s->z);
    s->z = NULL;
    free(s->in);
    free(s->out);
    s->in = s->out = NULL;
}

/* Opens the shard's file (as index.json names it), checking its size against index.json and,
 * for zstd, the frame's declared decompressed size against raw_bytes, before anything else is
 * read. Returns 0 or a DSC_E* code with why filled. */
static int stream_open(stream_t *s, const char *path, const dsc_mds_shard_info_t *info, char *why,
                       size_t why_len) {
    memset(s, 0, sizeof *s);
    s->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (s->fd < 0) {
        int rc = -errno;
        snprintf(why, why_len, "%s", dsc_strerror(rc));
        return rc;
    }
    struct stat st;
    if (fstat(s->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(why, why_len, "not a regular file");
        return DSC_EIO;
    }
    uint64_t want = info->zstd ? info->zip_bytes : info->raw_bytes;
    s->file_bytes = (uint64_t)st.st_size;
    if (s->file_bytes != want) {
        snprintf(why, why_len, "%llu bytes, index.json says %llu (truncated or replaced)",
                 (unsigned long long)s->file_bytes, (unsigned long long)want);
        return DSC_ETRUNCATED;
    }
    if (!info->zstd)
        return 0;
    s->z = ZSTD_createDStream();
    s->in = malloc(IO_PIECE);
    s->out = malloc(IO_PIECE);
    if (s->z == NULL || s->in == NULL || s->out == NULL) {
        snprintf(why, why_len, "%s", dsc_strerror(DSC_ENOMEM));
        return DSC_ENOMEM;
    }
    ZSTD_DCtx_setParameter(s->z, ZSTD_d_windowLogMax, ZSTD_WINDOW_LOG_MAX);
    uint8_t head[18]; /* ZSTD_FRAMEHEADERSIZE_MAX */
    ssize_t n = pread(s->fd, head, sizeof head, 0);
    unsigned long long declared = n > 0 ? ZSTD_getFrameContentSize(head, (size_t)n) : 0;
    if (n <= 0 || declared == ZSTD_CONTENTSIZE_ERROR) {
        snprintf(why, why_len, "zstd: not a zstd frame");
        return DSC_EDECOMPRESS;
    }
    if (declared != ZSTD_CONTENTSIZE_UNKNOWN && declared != info->raw_bytes) {
        snprintf(why, why_len,
                 "zstd: the frame declares %llu decompressed bytes, index.json's raw_data says "
                 "%llu",
                 declared, (unsigned long long)info->raw_bytes);
        return DSC_EDECOMPRESS;
    }
    return 0;
}

/* Reads exactly len decompressed bytes into dst (NULL: skipped). Returns 0 or a DSC_E* code
 * with why filled. */
static int stream_read(stream_t *s, uint8_t *dst, uint64_t len, char *why, size_t why_len) {
    while (len > 0) {
        if (s->z == NULL) {
            size_t piece = len < IO_PIECE ? (size_t)len : IO_PIECE;
            if (s->file_pos + piece > s->file_bytes) {
                snprintf(why, why_len, "ends at byte %llu, inside what its table promises",
                         (unsigned long long)s->file_bytes);
                return DSC_ETRUNCATED;
            }
            if (dst != NULL) {
                int rc = dsc_pread_full(s->fd, dst, piece, s->file_pos);
                if (rc < 0) {
                    snprintf(why, why_len, "read: %s", dsc_strerror(rc));
                    return rc;
                }
                dst += piece;
            }
            s->file_pos += piece;
            s->pos += piece;
            len -= piece;
            continue;
        }
        if (s->out_off < s->out_len) {
            size_t take = s->out_len - s->out_off;
            if (take > len)
                take = (size_t)len;
            if (dst != NULL) {
                memcpy(dst, s->out + s->out_off, take);
                dst += take;
            }
            s->out_off += take;
            s->pos += take;
            len -= take;
            continue;
        }
        if (s->frame_done) {
            snprintf(why, why_len,
                     "zstd: the frame ends at %llu decompressed bytes, inside what "
                     "its table promises",
                     (unsigned long long)s->pos);
            return DSC_ETRUNCATED;
        }
        if (s->zin.pos == s->zin.size) {
            size_t piece = s->file_bytes - s->file_pos < IO_PIECE
                               ? (size_t)(s->file_bytes - s->file_pos)
                               : IO_PIECE;
            if (piece == 0) {
                snprintf(why, why_len, "zstd: the compressed data ends inside the frame");
                return DSC_ETRUNCATED;
            }
            int rc = dsc_pread_full(s->fd, s->in, piece, s->file_pos);
            if (rc < 0) {
                snprintf(why, why_len, "read: %s", dsc_strerror(rc));
                return rc;
            }
            s->file_pos += piece;
            s->zin = (ZSTD_inBuffer){s->in, piece, 0};
        }
        ZSTD_outBuffer zout = {s->out, IO_PIECE, 0};
        size_t r = ZSTD_decompressStream(s->z, &zout, &s->zin);
        if (ZSTD_isError(r)) {
            snprintf(why, why_len, "zstd: %s", ZSTD_getErrorName(r));
            return DSC_EDECOMPRESS;
        }
        s->out_len = zout.pos;
        s->out_off = 0;
        if (r == 0)
            s->frame_done = 1;
    }
    return 0;
}

/* Reads the rest of a zstd shard: the frame must end (its checksum checked) exactly at
 * raw_bytes, with nothing after it. Raw shards: nothing to do. */
static int stream_finish(stream_t *s, uint64_t raw_bytes, char *why, size_t why_len) {
    if (s->z == NULL)
        return 0;
    if (s->pos > raw_bytes)
        return DSC_EDECOMPRESS;
    int rc = stream_read(s, NULL, raw_bytes - s->pos, why, why_len);
    if (rc < 0)
        return rc;
    while (!s->frame_done && s->out_off == s->out_len) {
        uint8_t probe;
        rc = stream_read(s, &probe, 1, why, why_len);
        if (rc == 0) {
            snprintf(why, why_len, "zstd: decompressed size differs from index.json's raw bytes");
            return DSC_EDECOMPRESS;
        }
        if (!s->frame_done)
            return rc;
    }
    if (s->out_off != s->out_len || s->zin.pos != s->zin.size || s->file_pos != s->file_bytes) {
        snprintf(why, why_len, "zstd: decompressed size differs from index.json's raw bytes");
        return DSC_EDECOMPRESS;
    }
    return 0;
}

static int read_u32(stream_t *s, uint32_t *v, char *why, size_t why_len) {
    uint8_t b[4];
    int rc = stream_read(s, b, 4, why, why_len);
    *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return rc;
}

/* One shard being read: the table through `table`, the samples through `data`. */
typedef struct shard_reader {
    char path[4096 + 256];
    const dsc_mds_shard_info_t *info;
    stream_t table, data;
    dsc_mds_table_t t;
    uint32_t next; /* the next sample */
    uint8_t *sample;
    size_t sample_cap;
} shard_reader_t;

static void shard_close(shard_reader_t *r) {
    stream_close(&r->table);
    stream_close(&r->data);
}

/* Checks the whole shard before any of its samples is used: its file size, for zstd the frame
 * (declared size, decompression to its end, checksum), the sample count and the offset table,
 * each sample's size against limit. Returns 0 (then *over_index is the first sample over the
 * limit, or UINT32_MAX, and *over_bytes its size) or a DSC_E* code with why filled. */
static int shard_check(const char *path, const dsc_mds_shard_info_t *info, uint64_t limit,
                       uint32_t *over_index, uint64_t *over_bytes, uint32_t *over_count, char *why,
                       size_t why_len) {
    stream_t s;
    *over_index = UINT32_MAX;
    *over_bytes = 0;
    *over_count = 0;
    int rc = stream_open(&s, path, info, why, why_len);
    uint32_t count = 0;
    dsc_mds_table_t t;
    const char *problem = NULL;
    if (rc == 0 && (rc = read_u32(&s, &count, why, why_len)) == DSC_ETRUNCATED)
        snprintf(why, why_len, "shorter than its sample count");
    if (rc == 0)
        rc = dsc_mds_table_begin(&t, count, info->samples, info->raw_bytes, limit, &problem);
    for (uint64_t i = 0; rc == 0 && i <= t.samples; i++) {
        uint32_t off;
        uint64_t bytes;
        if ((rc = read_u32(&s, &off, why, why_len)) < 0)
            break;
        rc = dsc_mds_table_next(&t, off, &bytes, &problem);
        if (rc == DSC_ETOOLARGE) {
            if ((*over_count)++ == 0) {
                *over_index = (uint32_t)(i - 1);
                *over_bytes = bytes;
            }
            rc = 0;
        }
    }
    if (rc == 0)
        rc = stream_finish(&s, info->raw_bytes, why, why_len);
    if (rc < 0 && problem != NULL)
        snprintf(why, why_len, "%s", problem);
    stream_close(&s);
    return rc;
}

/* Opens the shard for its samples (after shard_check). Returns 0 or a DSC_E* code (why). */
static int shard_open(shard_reader_t *r, const dsc_mds_shard_info_t *info, uint64_t limit,
                      char *why, size_t why_len) {
    r->info = info;
    r->next = 0;
    const char *problem = NULL;
    uint32_t count = 0, first = 0;
    int rc = stream_open(&r->table, r->path, info, why, why_len);
    if (rc == 0)
        rc = stream_open(&r->data, r->path, info, why, why_len);
    if (rc == 0)
        rc = read_u32(&r->table, &count, why, why_len);
    if (rc == 0)
        rc = dsc_mds_table_begin(&r->t, count, info->samples, info->raw_bytes, limit, &problem);
    uint64_t unused;
    if (rc == 0 && (rc = read_u32(&r->table, &first, why, why_len)) == 0)
        rc = dsc_mds_table_next(&r->t, first, &unused, &problem);
    if (rc == 0) /* the data stream to the first sample: past the table and the config JSON */
        rc = stream_read(&r->data, NULL, first, why, why_len);
    if (rc < 0 && problem != NULL)
        snprintf(why, why_len, "%s (the file changed since it was checked)", problem);
    return rc;
}

/* The next sample's bytes: returns 0 with *data and *len, DSC_ETOOLARGE (*len the declared size;
 * its bytes skipped, never held), or another DSC_E* code (why). */
static int shard_next(shard_reader_t *r, const uint8_t **data, uint64_t *len, char *why,
                      size_t why_len) {
    uint32_t off;
    const char *problem = NULL;
    int rc = read_u32(&r->table, &off, why, why_len);
    if (rc == 0)
        rc = dsc_mds_table_next(&r->t, off, len, &problem);
    r->next++;
    if (rc == DSC_ETOOLARGE) {
        int skip = stream_read(&r->data, NULL, *len, why, why_len);
        return skip < 0 ? skip : DSC_ETOOLARGE;
    }
    if (rc < 0) {
        if (problem != NULL)
            snprintf(why, why_len, "%s (the file changed since it was checked)", problem);
        return rc;
    }
    if (*len > r->sample_cap) {
        uint8_t *grown = realloc(r->sample, (size_t)*len);
        if (grown == NULL) {
            snprintf(why, why_len, "%s", dsc_strerror(DSC_ENOMEM));
            return DSC_ENOMEM;
        }
        r->sample = grown;
        r->sample_cap = (size_t)*len;
    }
    rc = stream_read(&r->data, r->sample, *len, why, why_len);
    *data = r->sample;
    return rc;
}

static void too_large_text(char *buf, size_t len, uint64_t bytes, uint64_t limit) {
    snprintf(buf, len,
             "the offset table declares %llu bytes for it, over the %llu-byte limit of a sample "
             "(--max-sample-size); not read",
             (unsigned long long)bytes, (unsigned long long)limit);
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

typedef struct mds_args {
    const char *selected[INGEST_MAX_FIELDS];
    uint32_t selected_count;
} mds_args_t;

static int mds_option(void *state, int id, const char *arg) {
    mds_args_t *args = state;
    (void)id; /* 2001: --field */
    if (args->selected_count == INGEST_MAX_FIELDS)
        return dsc_cli_usage(CMD, "at most %d --field options", INGEST_MAX_FIELDS);
    args->selected[args->selected_count++] = arg;
    return DSC_CLI_OK;
}

static int mds_run(void *state, const ingest_options_t *options, int argc, char **argv) {
    mds_args_t *args = state;
    ingest_options_t opt = *options;
    const char **selected = args->selected;
    uint32_t selected_count = args->selected_count;
    if (argc != 1)
        return dsc_cli_usage(CMD, "expected one DIR (holding index.json)");
    int checked = ingest_options_check(CMD, &opt);
    if (checked != DSC_CLI_OK)
        return checked;
    const char *dir = argv[0];
    int exit_code = DSC_CLI_FAIL;
    char index_path[4096];
    snprintf(index_path, sizeof index_path, "%s/index.json", dir);
    uint8_t *text = NULL;
    shard_reader_t reader;
    memset(&reader, 0, sizeof reader);
    reader.table.fd = reader.data.fd = -1;
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
            const dsc_mds_shard_info_t *info = &index.shards[s];
            char why[512];
            uint32_t over_index, over_count;
            uint64_t over_bytes;
            snprintf(reader.path, sizeof reader.path, "%s/%s", dir,
                     info->zstd ? info->zip_basename : info->raw_basename);
            rc = shard_check(reader.path, info, opt.max_sample, &over_index, &over_bytes,
                             &over_count, why, sizeof why);
            if (rc == 0 && over_count > 0 && !opt.skip_bad) {
                too_large_text(why, sizeof why, over_bytes, opt.max_sample);
                dsc_cli_fail(CMD,
                             "%s: sample %u (dataset sample %llu): %s (--skip-bad skips bad "
                             "samples)",
                             reader.path, over_index,
                             (unsigned long long)(first_of_shard + over_index), why);
                goto cleanup;
            }
            if (rc == 0)
                rc = shard_open(&reader, info, opt.max_sample, why, sizeof why);
            if (rc < 0) {
                shard_close(&reader);
                if (opt.skip_bad)
                    continue; /* the second pass counts it */
                dsc_cli_fail(CMD, "%s: shard %u (%llu samples): %s (--skip-bad skips bad samples)",
                             reader.path, s, (unsigned long long)info->samples, why);
                goto cleanup;
            }
            for (uint32_t i = 0; i < info->samples; i++) {
                dsc_mds_value_t values[DSC_MDS_MAX_COLUMNS];
                dyn_ref_t seen[INGEST_MAX_FIELDS];
                const uint8_t *data = NULL;
                uint64_t len = 0;
                const char *problem;
                rc = shard_next(&reader, &data, &len, why, sizeof why);
                if (rc == DSC_ETOOLARGE)
                    continue; /* counted by the second pass */
                if (rc < 0) {
                    shard_close(&reader);
                    if (opt.skip_bad)
                        break;
                    dsc_cli_fail(CMD, "%s: shard %u: %s", reader.path, s, why);
                    goto cleanup;
                }
                int bad = dsc_mds_sample_split(&index, data, len, values, &problem) < 0;
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
                                 reader.path, i, (unsigned long long)(first_of_shard + i), why);
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
            shard_close(&reader);
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
        char why[512], who[96];
        snprintf(who, sizeof who, "shard %u (%llu samples)", s, (unsigned long long)info->samples);
        snprintf(reader.path, sizeof reader.path, "%s/%s", dir,
                 info->zstd ? info->zip_basename : info->raw_basename);
        uint32_t over_index, over_count;
        uint64_t over_bytes;
        rc = shard_check(reader.path, info, opt.max_sample, &over_index, &over_bytes, &over_count,
                         why, sizeof why);
        if (rc == 0 && over_count > 0 && !opt.skip_bad) { /* refused before it is read */
            snprintf(who, sizeof who, "sample %u (dataset sample %llu)", over_index,
                     (unsigned long long)(ordinal + over_index));
            too_large_text(why, sizeof why, over_bytes, opt.max_sample);
            ingest_run_bad(run, reader.path, who, 1, "%s", why);
            goto cleanup;
        }
        if (rc == 0)
            rc = shard_open(&reader, info, opt.max_sample, why, sizeof why);
        if (rc < 0) {
            shard_close(&reader);
            if (ingest_run_bad(run, reader.path, who, info->samples, "%s", why) != 0)
                goto cleanup;
            ordinal += info->samples;
            done += info->zstd ? info->zip_bytes : info->raw_bytes;
            continue;
        }
        for (uint32_t i = 0; i < info->samples; i++, ordinal++) {
            dsc_mds_value_t values[DSC_MDS_MAX_COLUMNS];
            const uint8_t *data = NULL;
            uint64_t len = 0;
            const char *problem;
            snprintf(who, sizeof who, "sample %u (dataset sample %llu)", i,
                     (unsigned long long)ordinal);
            rc = shard_next(&reader, &data, &len, why, sizeof why);
            if (rc == DSC_ETOOLARGE) {
                too_large_text(why, sizeof why, len, opt.max_sample);
                if (ingest_run_bad(run, reader.path, who, 1, "%s", why) != 0)
                    goto cleanup;
                continue;
            }
            if (rc < 0) { /* the file changed since the check: the rest of the shard is lost */
                if (ingest_run_bad(run, reader.path, who, info->samples - i, "%s", why) != 0)
                    goto cleanup;
                ordinal += info->samples - i;
                break;
            }
            rc = dsc_mds_sample_split(&index, data, len, values, &problem);
            if (rc < 0) {
                if (ingest_run_bad(run, reader.path, who, 1, "%s", problem) != 0)
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
                if (ingest_run_bad(run, reader.path, who, 1, "%s", why) != 0)
                    goto cleanup;
                continue;
            }
            if (ingest_run_add(run, out) != 0)
                goto cleanup;
        }
        shard_close(&reader);
        done += info->zstd ? info->zip_bytes : info->raw_bytes;
        ingest_run_progress(run, done);
    }
    exit_code = ingest_run_finish(run);
    run = NULL;

cleanup:
    ingest_run_abort(run);
    shard_close(&reader);
    free(reader.sample);
    dsc_mds_index_free(&index);
    return exit_code;
}

int dsc_cmd_ingest_mds(int argc, char **argv) {
    static const struct option options[] = {{"field", required_argument, NULL, 2001},
                                            {NULL, 0, NULL, 0}};
    static const ingest_form_t form = {CMD,        INGEST_OPT_ALL, options,
                                       print_help, mds_option,     mds_run};
    mds_args_t args;
    memset(&args, 0, sizeof args);
    return ingest_main(&form, &args, argc, argv);
}
