/* Shared machinery of dscache ingest webdataset|megatron|mds: options, schema text, the writer
 * sink, --skip-bad accounting, progress and the one-line summary (see ingest_common.h). */
#include "ingest_common.h"

#include "dscache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BAD_NAMED_MAX 10

struct ingest_run {
    const char *cmd;
    ingest_options_t opt;
    uint32_t field_count;
    ingest_field_t fields[INGEST_MAX_FIELDS];
    dsc_writer_t *writer; /* NULL with --dry-run */
    uint64_t samples, skipped, bad_named, value_bytes, source_done;
    dsc_cli_progress_t progress;
    char notes[2048];
    size_t notes_used;
};

void ingest_options_init(ingest_options_t *opt) {
    memset(opt, 0, sizeof *opt);
    opt->compress = "lz4";
    opt->level = 0; /* the writer's default (9) */
    opt->shard_bytes = 64ull << 20;
    opt->chunk_bytes = 1u << 20;
    opt->max_sample = INGEST_MAX_SAMPLE_DEFAULT;
}

int ingest_common_option(const char *cmd, ingest_options_t *opt, int c, const char *arg) {
    uint64_t v;
    switch (c) {
    case 'o':
        opt->out_dir = arg;
        return 1;
    case 1001:
        opt->name = arg;
        return 1;
    case 1002:
        if (strcmp(arg, "none") && strcmp(arg, "lz4") && strcmp(arg, "lz4hc")) {
            dsc_cli_usage(cmd, "--compress '%s': expected none, lz4 or lz4hc", arg);
            return DSC_EINVAL;
        }
        opt->compress = arg;
        return 1;
    case 1003:
        if (dsc_cli_parse_u64(cmd, "--level", arg, 1, 12, &v) < 0)
            return DSC_EINVAL;
        opt->level = (int)v;
        return 1;
    case 1004:
        if (dsc_cli_parse_size(cmd, "--shard-size", arg, &opt->shard_bytes) < 0)
            return DSC_EINVAL;
        return 1;
    case 1005:
        if (dsc_cli_parse_size(cmd, "--chunk-size", arg, &v) < 0)
            return DSC_EINVAL;
        if (v == 0 || v > UINT32_MAX) {
            dsc_cli_usage(cmd, "--chunk-size '%s': 1 byte to 4G", arg);
            return DSC_EINVAL;
        }
        opt->chunk_bytes = v;
        return 1;
    case 1006:
        if (dsc_cli_parse_u64(cmd, "--threads", arg, 0, 1024, &v) < 0)
            return DSC_EINVAL;
        opt->threads = (uint32_t)v;
        return 1;
    case 1007:
        opt->skip_bad = 1;
        return 1;
    case 1008:
        opt->dry_run = 1;
        return 1;
    case 1009:
        opt->replace = 1;
        return 1;
    case 1010:
        if (dsc_cli_parse_size(cmd, "--max-sample-size", arg, &v) < 0)
            return DSC_EINVAL;
        if (v == 0 || v > INGEST_MAX_SAMPLE_DEFAULT) {
            dsc_cli_usage(cmd, "--max-sample-size '%s': 1 byte to 256M", arg);
            return DSC_EINVAL;
        }
        opt->max_sample = v;
        return 1;
    default:
        return 0;
    }
}

int ingest_options_check(const char *cmd, const ingest_options_t *opt) {
    if (opt->out_dir == NULL && !opt->dry_run) {
        return dsc_cli_usage(cmd, "-o DIR is required (or --dry-run)");
    }
    int writer_replace;
    if (!opt->dry_run && ingest_output_check(cmd, opt->out_dir, opt->replace, &writer_replace) != 0)
        return DSC_CLI_FAIL; /* checked again when the writer is created */
    return DSC_CLI_OK;
}

int ingest_output_check(const char *cmd, const char *dir, int replace, int *writer_replace) {
    *writer_replace = replace;
    struct stat st;
    if (lstat(dir, &st) != 0) {
        if (errno == ENOENT)
            return 0;
        return dsc_cli_fail(cmd, "cannot use output directory %s: %s", dir, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode))
        return dsc_cli_fail(cmd, "output %s exists and is not a directory", dir);
    DIR *d = opendir(dir);
    if (d == NULL)
        return dsc_cli_fail(cmd, "cannot open output directory %s: %s", dir, strerror(errno));
    int entries = 0, has_manifest = 0;
    char other[256] = "";
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0)
            continue;
        entries++;
        if (strcmp(ent->d_name, "manifest.json") == 0)
            has_manifest = 1;
        else if (other[0] == '\0' && strncmp(ent->d_name, "shard-", 6) != 0)
            snprintf(other, sizeof other, "%s", ent->d_name);
    }
    closedir(d);
    if (entries == 0) { /* an empty directory: swapped for the new dataset */
        *writer_replace = 1;
        return 0;
    }
    if (other[0] != '\0')
        return dsc_cli_fail(cmd,
                            "output %s holds '%s', which is not part of a dataset: refusing to "
                            "write there (a replace swaps the whole directory; give a new or "
                            "empty directory)",
                            dir, other);
    if (!replace)
        return dsc_cli_fail(cmd,
                            "output %s exists and holds %s: pass --replace to replace it (the "
                            "new dataset is swapped in when complete)",
                            dir, has_manifest ? "a dataset" : "shard files");
    *writer_replace = 1;
    return 0;
}

void ingest_writer_log(void *ctx, int level, const char *message) {
    if (level <= DSC_LOG_WARN)
        fprintf(stderr, "dscache %s: %s: %s\n", (const char *)ctx,
                level == DSC_LOG_ERROR ? "error" : "warning", message);
}

int ingest_field_variable(const ingest_field_t *f) {
    return f->ndim > 0 && f->dims[0] == 0;
}

uint64_t ingest_field_row_bytes(const ingest_field_t *f) {
    uint64_t b = (uint64_t)dsc_dtype_size(f->dtype);
    for (uint32_t i = 1; i < f->ndim; i++)
        b *= f->dims[i];
    return b;
}

uint64_t ingest_field_fixed_bytes(const ingest_field_t *f) {
    if (ingest_field_variable(f))
        return 0;
    return ingest_field_row_bytes(f) * (f->ndim ? f->dims[0] : 1);
}

void ingest_field_spec(const ingest_field_t *f, char *buf, size_t len) {
    size_t at = (size_t)snprintf(buf, len, "%s:%s", f->name, dsc_dtype_name(f->dtype));
    if (f->ndim == 0 || at >= len)
        return;
    if (ingest_field_variable(f) && f->ndim == 1) {
        snprintf(buf + at, len - at, "[]");
        return;
    }
    for (uint32_t i = 0; i < f->ndim && at < len; i++) {
        if (i == 0 && f->dims[0] == 0)
            at += (size_t)snprintf(buf + at, len - at, "[?");
        else
            at += (size_t)snprintf(buf + at, len - at, "%s%llu", i ? "," : "[",
                                   (unsigned long long)f->dims[i]);
    }
    if (at < len)
        snprintf(buf + at, len - at, "]");
}

static int name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
}

int ingest_name_valid(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n > 63)
        return 0;
    for (; *name; name++)
        if (!name_char(*name))
            return 0;
    return 1;
}

int ingest_sanitize_name(char *name) {
    size_t n = strlen(name);
    if (n == 0)
        return DSC_EINVAL;
    if (n > 63)
        name[63] = '\0';
    for (char *p = name; *p; p++)
        if (!name_char(*p))
            *p = '_';
    return 0;
}

static void append(char *buf, size_t cap, size_t *at, const char *piece) {
    size_t need = strlen(piece);
    if (*at + need >= cap)
        return;
    memcpy(buf + *at, piece, need + 1);
    *at += need;
}

void ingest_json_string(char *buf, size_t cap, size_t *at, const char *s) {
    char tmp[8];
    append(buf, cap, at, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            snprintf(tmp, sizeof tmp, "\\%c", c);
        else if (c < 0x20 || c >= 0x80)
            snprintf(tmp, sizeof tmp, "\\u%04x", c);
        else
            snprintf(tmp, sizeof tmp, "%c", c);
        append(buf, cap, at, tmp);
    }
    append(buf, cap, at, "\"");
}

int ingest_read_file(const char *path, uint8_t **out, size_t *len) {
    *out = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    int rc = 0;
    uint8_t *buf = NULL;
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        goto cleanup;
    }
    buf = malloc(st.st_size > 0 ? (size_t)st.st_size : 1);
    if (buf == NULL) {
        rc = -ENOMEM;
        goto cleanup;
    }
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = n < 0 ? -errno : -EIO;
            goto cleanup;
        }
        got += (size_t)n;
    }
    *out = buf;
    *len = got;
    buf = NULL;
cleanup:
    free(buf);
    close(fd);
    return rc;
}

static void build_spec(const ingest_field_t *fields, uint32_t count, char *buf, size_t len) {
    size_t at = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < count && at < len; i++) {
        char one[160];
        ingest_field_spec(&fields[i], one, sizeof one);
        at += (size_t)snprintf(buf + at, len - at, "%s%s", i ? "," : "", one);
    }
}

int ingest_run_begin(const char *cmd, const ingest_options_t *opt, const ingest_field_t *fields,
                     uint32_t count, const char *meta_json, uint64_t source_bytes,
                     ingest_run_t **out) {
    *out = NULL;
    if (count == 0)
        return dsc_cli_fail(cmd, "no field to ingest");
    if (count > DSC_MAX_FIELDS)
        return dsc_cli_fail(cmd,
                            "%u fields, more than the %d a dataset holds: select some with "
                            "--field",
                            count, DSC_MAX_FIELDS);
    ingest_run_t *run = calloc(1, sizeof *run);
    if (run == NULL)
        return dsc_cli_fail(cmd, "%s", dsc_strerror(DSC_ENOMEM));
    run->cmd = cmd;
    run->opt = *opt;
    run->field_count = count;
    memcpy(run->fields, fields, count * sizeof *fields);
    char spec[8192];
    build_spec(fields, count, spec, sizeof spec);
    printf("schema: %s\n", spec);
    fflush(stdout);
    if (!opt->dry_run) {
        int writer_replace = 0;
        if (ingest_output_check(cmd, opt->out_dir, opt->replace, &writer_replace) != 0) {
            free(run);
            return DSC_CLI_FAIL;
        }
        dsc_writer_options_t wopt;
        dsc_writer_options_init(&wopt, sizeof wopt);
        wopt.path = opt->out_dir;
        wopt.name = opt->name;
        wopt.fields = spec;
        wopt.compress = opt->compress;
        wopt.level = strcmp(opt->compress, "lz4hc") == 0 ? opt->level : 0;
        wopt.shard_bytes = opt->shard_bytes;
        wopt.chunk_bytes = (uint32_t)opt->chunk_bytes;
        wopt.threads = opt->threads;
        wopt.meta_json = meta_json;
        wopt.replace = writer_replace;
        wopt.log_fn = ingest_writer_log;
        wopt.log_ctx = (void *)cmd;
        int rc = dsc_writer_create(&wopt, &run->writer);
        if (rc < 0) {
            char why[512] = "";
            dsc_writer_last_error(NULL, why, sizeof why);
            free(run);
            return dsc_cli_fail(cmd, "cannot create %s: %s", opt->out_dir,
                                why[0] ? why : dsc_strerror(rc));
        }
    }
    dsc_cli_progress_init(&run->progress, cmd, source_bytes);
    *out = run;
    return 0;
}

int ingest_run_add(ingest_run_t *run, const ingest_value_t *values) {
    for (uint32_t i = 0; i < run->field_count; i++)
        run->value_bytes += values[i].bytes;
    if (run->writer != NULL) {
        dsc_writer_value_t v[INGEST_MAX_FIELDS];
        for (uint32_t i = 0; i < run->field_count; i++) {
            v[i].data = values[i].data;
            v[i].bytes = values[i].bytes;
        }
        int rc = dsc_writer_add(run->writer, v, run->field_count);
        if (rc < 0) {
            char why[512] = "";
            dsc_writer_last_error(run->writer, why, sizeof why);
            dsc_cli_progress_done(&run->progress);
            return dsc_cli_fail(run->cmd, "writing %s: %s%s%s", run->opt.out_dir, dsc_strerror(rc),
                                why[0] ? ": " : "", why);
        }
    }
    run->samples++;
    return 0;
}

int ingest_run_bad(ingest_run_t *run, const char *file, const char *who, uint64_t count,
                   const char *fmt, ...) {
    char why[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (!run->opt.skip_bad) {
        dsc_cli_progress_done(&run->progress);
        return dsc_cli_fail(run->cmd, "%s: %s: %s (--skip-bad skips bad samples)", file, who, why);
    }
    run->skipped += count;
    if (run->bad_named++ < BAD_NAMED_MAX) {
        dsc_cli_progress_done(&run->progress);
        fprintf(stderr, "dscache %s: skipped %s: %s: %s\n", run->cmd, file, who, why);
    }
    return 0;
}

void ingest_run_progress(ingest_run_t *run, uint64_t source_done) {
    run->source_done = source_done;
    dsc_cli_progress_update(&run->progress, source_done);
}

void ingest_run_note(ingest_run_t *run, const char *fmt, ...) {
    if (run->notes_used >= sizeof run->notes - 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(run->notes + run->notes_used, sizeof run->notes - run->notes_used, fmt, ap);
    va_end(ap);
    if (n > 0) {
        run->notes_used += (size_t)n;
        if (run->notes_used >= sizeof run->notes - 1)
            run->notes_used = sizeof run->notes - 2;
        run->notes[run->notes_used++] = '\n';
        run->notes[run->notes_used] = '\0';
    }
}

static void print_notes(const ingest_run_t *run) {
    const char *p = run->notes;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        fprintf(stderr, "dscache %s: note: %.*s\n", run->cmd, (int)n, p);
        p += n + (nl != NULL);
    }
}

int ingest_run_finish(ingest_run_t *run) {
    double seconds = dsc_cli_progress_done(&run->progress);
    print_notes(run);
    int exit_code = DSC_CLI_OK;
    if (run->samples == 0) {
        exit_code = dsc_cli_fail(run->cmd, "no sample to write (%llu skipped)",
                                 (unsigned long long)run->skipped);
        ingest_run_abort(run);
        return exit_code;
    }
    if (run->writer != NULL) {
        dsc_writer_stats_t stats;
        memset(&stats, 0, sizeof stats);
        stats.struct_size = sizeof stats;
        int rc = dsc_writer_finish(run->writer, &stats);
        run->writer = NULL;
        seconds = dsc_cli_progress_done(&run->progress);
        if (rc < 0) {
            char why[512] = "";
            dsc_writer_last_error(NULL, why, sizeof why);
            exit_code = dsc_cli_fail(run->cmd, "finishing %s: %s%s%s", run->opt.out_dir,
                                     dsc_strerror(rc), why[0] ? ": " : "", why);
            free(run);
            return exit_code;
        }
    }
    double mb = (double)run->source_done / 1e6;
    printf("%s %llu samples, skipped %llu, source %.2f MB, values %.2f MB, %.2f s, %.1f MB/s%s%s\n",
           run->opt.dry_run ? "checked" : "ingested", (unsigned long long)run->samples,
           (unsigned long long)run->skipped, mb, (double)run->value_bytes / 1e6, seconds,
           seconds > 0 ? mb / seconds : 0.0, run->opt.dry_run ? "" : " into ",
           run->opt.dry_run ? "" : run->opt.out_dir);
    free(run);
    return exit_code;
}

void ingest_run_abort(ingest_run_t *run) {
    if (run == NULL)
        return;
    dsc_cli_progress_done(&run->progress);
    dsc_writer_abort(run->writer);
    free(run);
}
