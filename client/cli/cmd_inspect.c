/* dscache inspect: verifies a dataset directory (manifest, every shard file and every chunk)
 * and prints its summary, or one line per problem found. */
#include "cli.h"
#include "manifest.h"
#include "manifest_io.h"
#include "shard.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define CMD "inspect"

static void print_help(void) {
    printf(
        "usage: dscache inspect DIR [--quiet] [--json]\n"
        "\n"
        "Loads DIR/manifest.json and checks every shard file it lists: file size and whole-file\n"
        "checksum against the manifest, header, index and footer, that the header's dataset,\n"
        "schema, shard id and sample counts agree with the manifest, and every chunk (stored\n"
        "checksum, decompression, decoded checksum, and for variable-length fields the decoded\n"
        "offsets). Prints the dataset's summary (a variable dimension shows as ?, with the\n"
        "field's size statistics, checked against the samples), or one line per problem naming\n"
        "the shard file, the chunk and the kind of damage.\n"
        "\n"
        "Options:\n"
        "  -q, --quiet   print problems only (nothing when the dataset is sound)\n"
        "      --json    print one JSON document (summary, shards, problems) on stdout\n"
        "  -h, --help    this text\n"
        "\n"
        "Exit codes: 0 every check holds, 1 a problem was found (or the manifest cannot be\n"
        "read), 2 bad arguments.\n");
}

typedef struct inspect_state {
    const char *dir;
    int quiet;
    int json;
    uint64_t problems;
    cJSON *problem_list; /* --json only */
    uint64_t raw_bytes;
    uint64_t stored_bytes;
    uint64_t chunks;
    uint64_t rows_total[DSC_MAX_FIELDS]; /* variable fields: rows seen in the chunks */
    uint64_t rows_max[DSC_MAX_FIELDS];
} inspect_state_t;

/* One problem: a line on stdout (or stderr with --json: stdout stays one JSON document) and,
 * with --json, an entry. chunk < 0: the problem is not about one chunk. err: a DSC_E* code or
 * 0 when the message says it all. */
static void report(inspect_state_t *st, const char *file, int64_t chunk, int err, const char *fmt,
                   ...) __attribute__((format(printf, 5, 6)));

static void report(inspect_state_t *st, const char *file, int64_t chunk, int err, const char *fmt,
                   ...) {
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    char line[1024];
    int n = snprintf(line, sizeof line, "%s", file);
    if (chunk >= 0 && n >= 0 && (size_t)n < sizeof line)
        n += snprintf(line + n, sizeof line - (size_t)n, ": chunk %lld", (long long)chunk);
    if (n >= 0 && (size_t)n < sizeof line)
        n += snprintf(line + n, sizeof line - (size_t)n, ": %s", detail);
    if (err != 0 && n >= 0 && (size_t)n < sizeof line)
        snprintf(line + n, sizeof line - (size_t)n, " (%s)", dsc_err_name(err));
    fprintf(st->json ? stderr : stdout, "%s\n", line);
    st->problems++;
    if (st->problem_list != NULL) {
        cJSON *item = cJSON_CreateObject();
        if (item != NULL) {
            cJSON_AddStringToObject(item, "file", file);
            if (chunk >= 0)
                cJSON_AddNumberToObject(item, "chunk", (double)chunk);
            else
                cJSON_AddNullToObject(item, "chunk");
            cJSON_AddStringToObject(item, "error", err != 0 ? dsc_err_name(err) : "");
            cJSON_AddStringToObject(item, "message", detail);
            cJSON_AddItemToArray(st->problem_list, item);
        }
    }
}

/* Checks one shard file; reports every problem; returns the number found. */
static uint64_t check_shard(inspect_state_t *st, const dsc_manifest_t *m, uint32_t index,
                            uint8_t **scratch, size_t *scratch_cap) {
    const dsc_manifest_shard_t *ms = &m->shards[index];
    uint64_t before = st->problems;
    char path[4096];
    void *map = MAP_FAILED;
    uint64_t size = 0;
    int fd = -1;
    if (snprintf(path, sizeof path, "%s/%s", st->dir, ms->file) >= (int)sizeof path) {
        report(st, ms->file, -1, DSC_EINVAL, "path too long");
        goto cleanup;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int err = -errno;
        report(st, ms->file, -1, err, "cannot open: %s", dsc_strerror(err));
        goto cleanup;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        report(st, ms->file, -1, DSC_EINVAL, "not a regular file");
        goto cleanup;
    }
    size = (uint64_t)sb.st_size;
    if (size != ms->bytes)
        report(st, ms->file, -1, size < ms->bytes ? DSC_ETRUNCATED : DSC_EINVAL,
               "file size %llu, manifest says %llu%s", (unsigned long long)size,
               (unsigned long long)ms->bytes, size < ms->bytes ? " (truncated)" : "");
    if (size == 0) {
        report(st, ms->file, -1, DSC_ETRUNCATED, "empty file");
        goto cleanup;
    }
    map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        int err = -errno;
        report(st, ms->file, -1, err, "cannot map: %s", dsc_strerror(err));
        goto cleanup;
    }
    const uint8_t *base = map;
    uint64_t sum = dsc_checksum(base, (size_t)size);
    if (sum != ms->checksum)
        report(st, ms->file, -1, DSC_EFILESUM, "%s: %016llx, manifest says %016llx",
               dsc_strerror(DSC_EFILESUM), (unsigned long long)sum,
               (unsigned long long)ms->checksum);

    dsc_shard_view_t view;
    int rc = dsc_shard_parse(base, size, &view);
    if (rc < 0) {
        report(st, ms->file, -1, rc, "cannot parse shard: %s", dsc_strerror(rc));
        goto cleanup;
    }
    const dsc_shard_header_t *h = &view.header;
    if (strcmp(h->dataset, m->name) != 0)
        report(st, ms->file, -1, DSC_EBADHEADER, "header names dataset '%s', manifest '%s'",
               h->dataset, m->name);
    if (h->shard_id != ms->id)
        report(st, ms->file, -1, DSC_EBADHEADER, "header shard id %llu, manifest %u",
               (unsigned long long)h->shard_id, ms->id);
    if (!dsc_schema_equal(&h->schema, &m->schema))
        report(st, ms->file, -1, DSC_EBADSCHEMA, "header schema differs from the manifest's");
    if (h->sample_count != ms->samples)
        report(st, ms->file, -1, DSC_EBADHEADER, "header holds %llu samples, manifest says %llu",
               (unsigned long long)h->sample_count, (unsigned long long)ms->samples);
    if (h->chunk_samples != ms->chunk_samples)
        report(st, ms->file, -1, DSC_EBADHEADER, "header chunk_samples %u, manifest says %u",
               h->chunk_samples, ms->chunk_samples);
    if (view.footer.chunk_count != ms->chunks)
        report(st, ms->file, -1, DSC_EBADINDEX, "index holds %u chunks, manifest says %u",
               view.footer.chunk_count, ms->chunks);

    uint64_t samples = 0;
    for (uint32_t i = 0; i < view.footer.chunk_count; i++) {
        dsc_chunk_entry_t e;
        rc = dsc_shard_chunk(&view, i, &e);
        if (rc < 0) {
            report(st, ms->file, i, rc, "%s", dsc_strerror(rc));
            continue;
        }
        if (e.raw_len > *scratch_cap) {
            uint8_t *grown = realloc(*scratch, e.raw_len);
            if (grown == NULL) {
                report(st, ms->file, i, DSC_ENOMEM, "%s", dsc_strerror(DSC_ENOMEM));
                continue;
            }
            *scratch = grown;
            *scratch_cap = e.raw_len;
        }
        rc = dsc_chunk_decode(&e, dsc_shard_chunk_data(&view, &e), *scratch, *scratch_cap);
        if (rc < 0) {
            report(st, ms->file, i, rc, "%s", dsc_strerror(rc));
            continue;
        }
        dsc_chunk_layout_t layout;
        rc = dsc_chunk_layout(&h->schema, e.sample_count, *scratch, e.raw_len, &layout);
        if (rc < 0) {
            report(st, ms->file, i, rc, "decoded layout: %s", dsc_strerror(rc));
            continue;
        }
        for (uint32_t f = 0; f < h->schema.field_count; f++) {
            if (!h->schema.fields[f].variable)
                continue;
            st->rows_total[f] += layout.fields[f].rows;
            for (uint32_t k = 0; k < e.sample_count; k++) {
                uint64_t rows =
                    dsc_chunk_offset(&layout, f, k + 1) - dsc_chunk_offset(&layout, f, k);
                if (rows > st->rows_max[f])
                    st->rows_max[f] = rows;
            }
        }
        samples += e.sample_count;
        st->chunks++;
        st->raw_bytes += e.raw_len;
        st->stored_bytes += e.stored_len;
    }
    if (samples != h->sample_count && st->problems == before)
        report(st, ms->file, -1, DSC_EBADINDEX, "chunks hold %llu samples, header says %llu",
               (unsigned long long)samples, (unsigned long long)h->sample_count);

cleanup:
    if (map != MAP_FAILED)
        munmap(map, (size_t)size);
    if (fd >= 0)
        close(fd);
    return st->problems - before;
}

static cJSON *schema_json(const dsc_schema_t *schema, const dsc_manifest_field_stats_t *stats) {
    cJSON *fields = cJSON_CreateArray();
    for (uint32_t f = 0; fields != NULL && f < schema->field_count; f++) {
        const dsc_field_t *field = &schema->fields[f];
        cJSON *item = cJSON_CreateObject();
        cJSON *shape = cJSON_CreateArray();
        if (item == NULL || shape == NULL) {
            cJSON_Delete(item);
            cJSON_Delete(shape);
            break;
        }
        cJSON_AddStringToObject(item, "name", field->name);
        cJSON_AddStringToObject(item, "dtype", dsc_dtype_name(field->dtype));
        for (uint32_t d = 0; d < field->ndim; d++)
            cJSON_AddItemToArray(shape, d == 0 && field->variable
                                            ? cJSON_CreateNull()
                                            : cJSON_CreateNumber(field->shape[d]));
        cJSON_AddItemToObject(item, "shape", shape);
        cJSON_AddNumberToObject(item, "sample_bytes", (double)field->sample_bytes);
        if (field->variable) {
            const dsc_manifest_field_stats_t *fs = &stats[f];
            cJSON_AddBoolToObject(item, "variable", 1);
            cJSON_AddNumberToObject(item, "row_bytes", (double)field->row_bytes);
            cJSON_AddNumberToObject(item, "rows_total", (double)fs->rows_total);
            cJSON_AddNumberToObject(item, "rows_max", (double)fs->rows_max);
            cJSON_AddNumberToObject(item, "bytes_max", (double)fs->bytes_max);
            cJSON_AddNumberToObject(item, "bytes_mean", fs->bytes_mean);
        }
        cJSON_AddItemToArray(fields, item);
    }
    return fields;
}

static void format_shape(const dsc_field_t *field, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = '\0';
    n += (size_t)snprintf(buf, cap, "[");
    for (uint32_t d = 0; d < field->ndim && n < cap; d++) {
        if (d == 0 && field->variable)
            n += (size_t)snprintf(buf + n, cap - n, "?");
        else
            n += (size_t)snprintf(buf + n, cap - n, "%s%u", d ? ", " : "", field->shape[d]);
    }
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
}

/* The images `ingest images --skip-bad` left out (meta "skipped"): how many of the folder's, the
 * map back to ImageFolder indices, and the first few with their errors. */
static void print_skipped(const char *meta_json) {
    cJSON *meta = cJSON_Parse(meta_json);
    const cJSON *sk = cJSON_GetObjectItemCaseSensitive(meta, "skipped");
    const cJSON *count = cJSON_GetObjectItemCaseSensitive(sk, "count");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(sk, "source_images");
    const cJSON *indices = cJSON_GetObjectItemCaseSensitive(sk, "indices");
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(sk, "files");
    if (cJSON_IsNumber(count) && cJSON_IsNumber(of) && cJSON_IsArray(indices)) {
        printf("skipped   %.0f of %.0f source images (ingest --skip-bad): sample i is "
               "ImageFolder[j], j the i-th index not in meta.skipped.indices [",
               count->valuedouble, of->valuedouble);
        int n = 0;
        const cJSON *x;
        cJSON_ArrayForEach(x, indices) {
            if (n == 10) {
                printf(", ...");
                break;
            }
            printf("%s%.0f", n++ ? ", " : "", x->valuedouble);
        }
        printf("]\n");
        n = 0;
        cJSON_ArrayForEach(x, files) {
            const cJSON *i = cJSON_GetObjectItemCaseSensitive(x, "index");
            const cJSON *p = cJSON_GetObjectItemCaseSensitive(x, "path");
            const cJSON *e = cJSON_GetObjectItemCaseSensitive(x, "error");
            if (n++ == 5) {
                printf("          ... (meta.skipped.files lists %d)\n", cJSON_GetArraySize(files));
                break;
            }
            if (cJSON_IsNumber(i) && cJSON_IsString(p) && cJSON_IsString(e))
                printf("          [%.0f] %s: %s\n", i->valuedouble, p->valuestring, e->valuestring);
        }
    }
    cJSON_Delete(meta);
}

static void print_summary(const inspect_state_t *st, const dsc_manifest_t *m) {
    char text[32];
    printf("dataset   %s (%s)\n", m->name, st->dir);
    if (m->schema.var_count == 0)
        printf("samples   %llu of %llu bytes\n", (unsigned long long)m->samples,
               (unsigned long long)m->schema.sample_bytes);
    else
        printf("samples   %llu of %llu fixed bytes + %u variable field(s) (format version 2)\n",
               (unsigned long long)m->samples, (unsigned long long)m->schema.sample_bytes,
               m->schema.var_count);
    for (uint32_t f = 0; f < m->schema.field_count; f++) {
        const dsc_field_t *field = &m->schema.fields[f];
        char shape[160];
        format_shape(field, shape, sizeof shape);
        if (!field->variable) {
            printf("field     %-16s %-5s %s\n", field->name, dsc_dtype_name(field->dtype), shape);
            continue;
        }
        const dsc_manifest_field_stats_t *fs = &m->field_stats[f];
        printf("field     %-16s %-5s %-12s variable: %llu rows of %llu bytes, largest sample %llu "
               "rows (%llu bytes), mean %.1f bytes\n",
               field->name, dsc_dtype_name(field->dtype), shape, (unsigned long long)fs->rows_total,
               (unsigned long long)field->row_bytes, (unsigned long long)fs->rows_max,
               (unsigned long long)fs->bytes_max, fs->bytes_mean);
    }
    if (m->meta_json != NULL) {
        printf("meta      %.200s%s\n", m->meta_json, strlen(m->meta_json) > 200 ? " ..." : "");
        print_skipped(m->meta_json);
    }
    printf("shards    %u, %llu chunks\n", m->shard_count, (unsigned long long)st->chunks);
    printf("raw       %s\n", dsc_format_size(st->raw_bytes, text, sizeof text));
    printf("stored    %s (files %s), ratio %.2f\n",
           dsc_format_size(st->stored_bytes, text, sizeof text),
           dsc_format_size(m->bytes, (char[32]){0}, 32),
           st->stored_bytes ? (double)st->raw_bytes / (double)st->stored_bytes : 0.0);
}

int dsc_cmd_inspect(int argc, char **argv) {
    static const struct option long_options[] = {
        {"quiet", no_argument, NULL, 'q'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    inspect_state_t st;
    memset(&st, 0, sizeof st);
    dsc_manifest_t *manifest = NULL;
    cJSON *doc = NULL;
    uint8_t *scratch = NULL;
    size_t scratch_cap = 0;
    int exit_code = DSC_CLI_FAIL;

    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "qh", long_options, NULL)) != -1) {
        switch (c) {
        case 'q':
            st.quiet = 1;
            break;
        case 'j':
            st.json = 1;
            break;
        case 'h':
            print_help();
            return DSC_CLI_OK;
        default:
            return dsc_cli_usage(CMD, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (argc - optind != 1)
        return dsc_cli_usage(CMD, argc - optind == 0 ? "missing DIR" : "expected one DIR");
    st.dir = argv[optind];

    int rc = dsc_manifest_load(st.dir, &manifest);
    if (rc < 0) {
        if (rc == DSC_ENOENT)
            return dsc_cli_fail(CMD, "%s/%s: no such file (not a dataset directory?)", st.dir,
                                DSC_MANIFEST_FILE);
        return dsc_cli_fail(CMD, "%s/%s: cannot load the manifest: %s (%s)", st.dir,
                            DSC_MANIFEST_FILE, dsc_strerror(rc), dsc_err_name(rc));
    }
    cJSON *shard_list = NULL;
    if (st.json) {
        doc = cJSON_CreateObject();
        st.problem_list = cJSON_CreateArray();
        shard_list = cJSON_CreateArray();
        if (doc == NULL || st.problem_list == NULL || shard_list == NULL) {
            cJSON_Delete(st.problem_list);
            cJSON_Delete(shard_list);
            dsc_cli_fail(CMD, "%s", dsc_strerror(DSC_ENOMEM));
            goto cleanup;
        }
    }
    for (uint32_t i = 0; i < manifest->shard_count; i++) {
        uint64_t found = check_shard(&st, manifest, i, &scratch, &scratch_cap);
        if (shard_list != NULL) {
            const dsc_manifest_shard_t *ms = &manifest->shards[i];
            cJSON *item = cJSON_CreateObject();
            if (item != NULL) {
                cJSON_AddNumberToObject(item, "id", ms->id);
                cJSON_AddStringToObject(item, "file", ms->file);
                cJSON_AddNumberToObject(item, "samples", (double)ms->samples);
                cJSON_AddNumberToObject(item, "first_sample", (double)ms->first_sample);
                cJSON_AddNumberToObject(item, "bytes", (double)ms->bytes);
                cJSON_AddNumberToObject(item, "chunks", ms->chunks);
                cJSON_AddNumberToObject(item, "chunk_samples", ms->chunk_samples);
                cJSON_AddBoolToObject(item, "ok", found == 0);
                cJSON_AddItemToArray(shard_list, item);
            }
        }
    }
    /* The size statistics must describe the samples (a loader sizes its buffers by them). */
    for (uint32_t f = 0; f < manifest->schema.field_count && st.problems == 0; f++) {
        const dsc_manifest_field_stats_t *fs = &manifest->field_stats[f];
        if (manifest->schema.fields[f].variable &&
            (fs->rows_total != st.rows_total[f] || fs->rows_max != st.rows_max[f]))
            report(&st, DSC_MANIFEST_FILE, -1, DSC_EBADMANIFEST,
                   "field '%s': manifest says %llu rows (largest %llu), the chunks hold %llu "
                   "(largest %llu)",
                   manifest->schema.fields[f].name, (unsigned long long)fs->rows_total,
                   (unsigned long long)fs->rows_max, (unsigned long long)st.rows_total[f],
                   (unsigned long long)st.rows_max[f]);
    }
    if (st.json) {
        cJSON_AddStringToObject(doc, "name", manifest->name);
        cJSON_AddStringToObject(doc, "dir", st.dir);
        cJSON_AddNumberToObject(doc, "samples", (double)manifest->samples);
        cJSON_AddNumberToObject(doc, "sample_bytes", (double)manifest->schema.sample_bytes);
        cJSON_AddNumberToObject(doc, "version", manifest->schema.var_count ? 2 : 1);
        cJSON_AddItemToObject(doc, "fields", schema_json(&manifest->schema, manifest->field_stats));
        if (manifest->meta_json != NULL)
            cJSON_AddItemToObject(doc, "meta", cJSON_Parse(manifest->meta_json));
        cJSON_AddNumberToObject(doc, "shard_count", manifest->shard_count);
        cJSON_AddNumberToObject(doc, "chunks", (double)st.chunks);
        cJSON_AddNumberToObject(doc, "raw_bytes", (double)st.raw_bytes);
        cJSON_AddNumberToObject(doc, "stored_bytes", (double)st.stored_bytes);
        cJSON_AddNumberToObject(doc, "file_bytes", (double)manifest->bytes);
        cJSON_AddNumberToObject(
            doc, "ratio", st.stored_bytes ? (double)st.raw_bytes / (double)st.stored_bytes : 0.0);
        cJSON_AddBoolToObject(doc, "ok", st.problems == 0);
        cJSON_AddItemToObject(doc, "shards", shard_list);
        cJSON_AddItemToObject(doc, "problems", st.problem_list);
        st.problem_list = NULL;
        char *text = cJSON_Print(doc);
        if (text == NULL) {
            dsc_cli_fail(CMD, "%s", dsc_strerror(DSC_ENOMEM));
            goto cleanup;
        }
        printf("%s\n", text);
        free(text);
    } else if (!st.quiet) {
        print_summary(&st, manifest);
    }
    if (st.problems > 0) {
        fprintf(stderr, "dscache inspect: %s: %llu problem(s) found\n", st.dir,
                (unsigned long long)st.problems);
        goto cleanup;
    }
    if (!st.quiet && !st.json)
        printf("ok        every shard and chunk verified\n");
    exit_code = DSC_CLI_OK;

cleanup:
    cJSON_Delete(doc);
    free(scratch);
    dsc_manifest_free(manifest);
    return exit_code;
}
