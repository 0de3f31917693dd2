/* Shared machinery of dscache ingest webdataset|megatron|mds: options, schema text, the writer
 * sink, --skip-bad accounting, progress and the one-line summary (see ingest_common.h). */
#include "ingest_common.h"

#include "dscache.h"
#include "shard.h"
#include "util.h"

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

enum {
    OPT_NAME = 1001,
    OPT_COMPRESS,
    OPT_LEVEL,
    OPT_SHARD_SIZE,
    OPT_CHUNK_SIZE,
    OPT_THREADS,
    OPT_SKIP_BAD,
    OPT_DRY_RUN,
    OPT_REPLACE,
    OPT_MAX_SAMPLE,
};

/* The one table of common options; mask: the INGEST_OPT_* a form names to take it (0: all). */
static const struct {
    struct option option;
    unsigned mask;
} common_options[] = {
    {{"output", required_argument, NULL, 'o'}, 0},
    {{"help", no_argument, NULL, 'h'}, 0},
    {{"name", required_argument, NULL, OPT_NAME}, INGEST_OPT_NAME},
    {{"compress", required_argument, NULL, OPT_COMPRESS}, INGEST_OPT_COMPRESS},
    {{"level", required_argument, NULL, OPT_LEVEL}, INGEST_OPT_COMPRESS},
    {{"shard-size", required_argument, NULL, OPT_SHARD_SIZE}, INGEST_OPT_SIZES},
    {{"chunk-size", required_argument, NULL, OPT_CHUNK_SIZE}, INGEST_OPT_SIZES},
    {{"threads", required_argument, NULL, OPT_THREADS}, INGEST_OPT_THREADS},
    {{"skip-bad", no_argument, NULL, OPT_SKIP_BAD}, INGEST_OPT_SKIP_BAD},
    {{"dry-run", no_argument, NULL, OPT_DRY_RUN}, INGEST_OPT_DRY_RUN},
    {{"replace", no_argument, NULL, OPT_REPLACE}, INGEST_OPT_REPLACE},
    {{"force", no_argument, NULL, OPT_REPLACE}, INGEST_OPT_REPLACE},
    {{"max-sample-size", required_argument, NULL, OPT_MAX_SAMPLE}, INGEST_OPT_MAX_SAMPLE},
};
#define COMMON_COUNT (sizeof common_options / sizeof common_options[0])
#define FORM_OPTIONS_MAX 16

/* One common option (id c). Returns DSC_CLI_OK or DSC_CLI_USAGE after printing why. */
static int common_option(const char *cmd, ingest_options_t *opt, int c, const char *arg) {
    uint64_t v;
    switch (c) {
    case 'o':
        opt->out_dir = arg;
        return DSC_CLI_OK;
    case OPT_NAME:
        if (!ingest_name_valid(arg))
            return dsc_cli_usage(cmd, "--name '%s': use 1-63 of A-Z a-z 0-9 _ . -", arg);
        opt->name = arg;
        return DSC_CLI_OK;
    case OPT_COMPRESS:
        if (strcmp(arg, "none") && strcmp(arg, "lz4") && strcmp(arg, "lz4hc"))
            return dsc_cli_usage(cmd, "--compress '%s': expected none, lz4 or lz4hc", arg);
        opt->compress = arg;
        opt->compress_given = 1;
        return DSC_CLI_OK;
    case OPT_LEVEL:
        if (dsc_cli_parse_u64(cmd, "--level", arg, 1, 12, &v) < 0)
            return DSC_CLI_USAGE;
        opt->level = (int)v;
        return DSC_CLI_OK;
    case OPT_SHARD_SIZE:
        if (dsc_cli_parse_size(cmd, "--shard-size", arg, &opt->shard_bytes) < 0)
            return DSC_CLI_USAGE;
        if (opt->shard_bytes == 0)
            return dsc_cli_usage(cmd, "--shard-size must be > 0");
        return DSC_CLI_OK;
    case OPT_CHUNK_SIZE:
        if (dsc_cli_parse_size(cmd, "--chunk-size", arg, &v) < 0)
            return DSC_CLI_USAGE;
        if (v == 0 || v > DSC_CHUNK_MAX_RAW)
            return dsc_cli_usage(cmd, "--chunk-size '%s': 1 byte to 256M (what one chunk holds)",
                                 arg);
        opt->chunk_bytes = v;
        return DSC_CLI_OK;
    case OPT_THREADS:
        if (dsc_cli_parse_u64(cmd, "--threads", arg, 0, 1024, &v) < 0)
            return DSC_CLI_USAGE;
        opt->threads = (uint32_t)v;
        return DSC_CLI_OK;
    case OPT_SKIP_BAD:
        opt->skip_bad = 1;
        return DSC_CLI_OK;
    case OPT_DRY_RUN:
        opt->dry_run = 1;
        return DSC_CLI_OK;
    case OPT_REPLACE:
        opt->replace = 1;
        return DSC_CLI_OK;
    case OPT_MAX_SAMPLE:
        if (dsc_cli_parse_size(cmd, "--max-sample-size", arg, &v) < 0)
            return DSC_CLI_USAGE;
        if (v == 0 || v > INGEST_MAX_SAMPLE_DEFAULT)
            return dsc_cli_usage(cmd, "--max-sample-size '%s': 1 byte to 256M", arg);
        opt->max_sample = v;
        return DSC_CLI_OK;
    default:
        return dsc_cli_usage(cmd, "unknown option");
    }
}

int ingest_main(const ingest_form_t *form, void *state, int argc, char **argv) {
    struct option table[COMMON_COUNT + FORM_OPTIONS_MAX + 1];
    size_t n = 0;
    for (size_t i = 0; i < COMMON_COUNT; i++)
        if ((common_options[i].mask & form->common) == common_options[i].mask)
            table[n++] = common_options[i].option;
    for (size_t i = 0; form->options != NULL && form->options[i].name != NULL; i++) {
        if (i == FORM_OPTIONS_MAX)
            return dsc_cli_fail(form->cmd, "more than %d options of its own", FORM_OPTIONS_MAX);
        table[n++] = form->options[i];
    }
    memset(&table[n], 0, sizeof table[n]);

    ingest_options_t opt;
    ingest_options_init(&opt);
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":o:h", table, NULL)) != -1) {
        const char *optname = argv[optind - 1];
        int rc;
        if (c == 'h') {
            form->help();
            return DSC_CLI_OK;
        } else if (c == ':') {
            return dsc_cli_usage(form->cmd, "option %s needs a value", optname);
        } else if (c == '?') {
            return dsc_cli_usage(form->cmd, "unknown option '%s'", optname);
        } else if (c >= INGEST_FORM_OPTION) {
            rc = form->option(state, c, optarg);
        } else {
            rc = common_option(form->cmd, &opt, c, optarg);
        }
        if (rc != DSC_CLI_OK)
            return rc;
    }
    if (opt.level > 0 && strcmp(opt.compress, "lz4hc") != 0)
        return dsc_cli_usage(form->cmd, "--level applies to --compress lz4hc only");
    if (opt.out_dir == NULL && !opt.dry_run)
        return dsc_cli_usage(form->cmd, "missing -o OUT_DIR%s",
                             form->common & INGEST_OPT_DRY_RUN ? " (or --dry-run)" : "");
    return form->run(state, &opt, argc - optind, argv + optind);
}

int ingest_options_check(const char *cmd, const ingest_options_t *opt) {
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
            if (opt->name == NULL && strstr(why, "not a valid dataset name") != NULL)
                return dsc_cli_usage(cmd, "%s: pass --name", why);
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

int ingest_run_add_columns(ingest_run_t *run, const dsc_writer_column_t *columns, uint64_t count) {
    for (uint32_t i = 0; i < run->field_count; i++)
        run->value_bytes += columns[i].bytes;
    if (run->writer != NULL) {
        int rc = dsc_writer_add_columns(run->writer, columns, run->field_count, count);
        if (rc < 0) {
            char why[512] = "";
            dsc_writer_last_error(run->writer, why, sizeof why);
            dsc_cli_progress_done(&run->progress);
            return dsc_cli_fail(run->cmd, "writing %s: %s%s%s", run->opt.out_dir, dsc_strerror(rc),
                                why[0] ? ": " : "", why);
        }
    }
    run->samples += count;
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

int ingest_run_set_meta(ingest_run_t *run, const char *meta_json) {
    if (run->writer == NULL)
        return 0;
    int rc = dsc_writer_set_meta(run->writer, meta_json);
    if (rc < 0) {
        char why[512] = "";
        dsc_writer_last_error(run->writer, why, sizeof why);
        dsc_cli_progress_done(&run->progress);
        return dsc_cli_fail(run->cmd, "%s: meta: %s", run->opt.out_dir,
                            why[0] ? why : dsc_strerror(rc));
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
    dsc_writer_stats_t stats;
    memset(&stats, 0, sizeof stats);
    stats.struct_size = sizeof stats;
    if (run->writer != NULL) {
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
    printf("%s %llu samples, skipped %llu, source %.2f MB, values %.2f MB, %.2f s, %.1f MB/s",
           run->opt.dry_run ? "checked" : "ingested", (unsigned long long)run->samples,
           (unsigned long long)run->skipped, mb, (double)run->value_bytes / 1e6, seconds,
           seconds > 0 ? mb / seconds : 0.0);
    if (!run->opt.dry_run) {
        char raw_text[32], stored_text[32];
        printf(" into %s: %u shards (%llu chunks), raw %s, stored %s, ratio %.2f", run->opt.out_dir,
               stats.shards, (unsigned long long)stats.chunks,
               dsc_format_size(stats.raw_bytes, raw_text, sizeof raw_text),
               dsc_format_size(stats.stored_bytes, stored_text, sizeof stored_text),
               stats.stored_bytes ? (double)stats.raw_bytes / (double)stats.stored_bytes : 0.0);
    }
    printf("\n");
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
