/* What every form of dscache ingest shares: the common options and the one option loop
 * (ingest_main), the schema they declare, the sink their samples go to (the dataset writer, or
 * nothing with --dry-run), bad-sample accounting for --skip-bad, progress and the summary. */
#ifndef DSC_CLI_INGEST_COMMON_H
#define DSC_CLI_INGEST_COMMON_H

#include "cli.h"
#include "dscache.h"

#include <getopt.h>
#include <stddef.h>
#include <stdint.h>

#define INGEST_MAX_FIELDS 64
#define INGEST_MAX_DIMS 8

/* One declared field: name:dtype[dims], dims[0] == 0 when the leading dimension varies. */
typedef struct ingest_field {
    char name[64];
    int dtype;
    uint32_t ndim; /* 0: a scalar */
    uint64_t dims[INGEST_MAX_DIMS];
} ingest_field_t;

/* One value of a sample, as the writer takes it. */
typedef struct ingest_value {
    const void *data;
    uint64_t bytes;
} ingest_value_t;

typedef struct ingest_options {
    const char *out_dir;
    const char *name;
    const char *compress; /* "lz4" unless given (compress_given) */
    int compress_given;
    int level; /* 0: not given (the writer's default 9 with lz4hc) */
    uint64_t shard_bytes, chunk_bytes;
    uint32_t threads; /* 0: the cores */
    int skip_bad;
    int dry_run;
    int replace;         /* --replace (or --force): an existing dataset at out_dir is swapped */
    uint64_t max_sample; /* --max-sample-size: a sample's declared bytes at most this */
} ingest_options_t;

/* The default bound on one sample's bytes: what one chunk of the writer can hold. */
#define INGEST_MAX_SAMPLE_DEFAULT (256ull << 20)

/* The common options: one table (ingest_common.c), parsed once by ingest_main for every form.
 * -o/--output and -h/--help are always there; a form takes the others it names in its mask. */
enum {
    INGEST_OPT_NAME = 1u << 0,       /* --name */
    INGEST_OPT_COMPRESS = 1u << 1,   /* --compress, --level */
    INGEST_OPT_SIZES = 1u << 2,      /* --shard-size, --chunk-size */
    INGEST_OPT_REPLACE = 1u << 3,    /* --replace, --force */
    INGEST_OPT_THREADS = 1u << 4,    /* --threads */
    INGEST_OPT_SKIP_BAD = 1u << 5,   /* --skip-bad */
    INGEST_OPT_DRY_RUN = 1u << 6,    /* --dry-run (then -o may be left out) */
    INGEST_OPT_MAX_SAMPLE = 1u << 7, /* --max-sample-size */
};
#define INGEST_OPT_WRITER                                                                          \
    (INGEST_OPT_NAME | INGEST_OPT_COMPRESS | INGEST_OPT_SIZES | INGEST_OPT_REPLACE)
#define INGEST_OPT_ALL 0xFFu

/* A form's own options have getopt ids from INGEST_FORM_OPTION up. */
#define INGEST_FORM_OPTION 2000

/* One form of `dscache ingest`: what it adds to the common options, and its reader. */
typedef struct ingest_form {
    const char *cmd;              /* "ingest webdataset": the name its messages carry */
    unsigned common;              /* INGEST_OPT_* it takes */
    const struct option *options; /* its own options ({NULL, 0, NULL, 0} ends them), or NULL */
    void (*help)(void);
    /* One of its own options (id from options[]). Returns DSC_CLI_OK or DSC_CLI_USAGE after
     * printing why. NULL when it has none. */
    int (*option)(void *state, int id, const char *arg);
    /* Reads the input (the arguments left after the options) into the dataset, through
     * ingest_run_begin/add/finish. Returns a DSC_CLI_* exit code. */
    int (*run)(void *state, const ingest_options_t *opt, int argc, char **argv);
} ingest_form_t;

/* The one option loop of every ingest form: parses argv (argv[0] the form's name) against the
 * common table and the form's own options, prints --help, refuses an unknown option or a
 * missing value, --level without lz4hc and a missing -o (unless --dry-run), then calls
 * form->run with the rest. Returns a DSC_CLI_* exit code. */
int ingest_main(const ingest_form_t *form, void *state, int argc, char **argv);

/* The common options' help of webdataset, megatron and mds (each form prints its own). */
#define INGEST_COMMON_HELP                                                                         \
    "Common options:\n"                                                                            \
    "  -o, --output DIR       dataset directory to create; it appears only when complete. An\n"    \
    "                         existing one holding a dataset needs --replace; an empty one is\n"   \
    "                         taken; one holding anything else is refused\n"                       \
    "      --replace          replace the dataset at DIR: the new one is written beside it and\n"  \
    "                         swapped in by one rename, so DIR holds the whole old or the whole\n" \
    "                         new dataset at every instant (an interrupted run leaves one of\n"    \
    "                         them whole; --force is the same)\n"                                  \
    "      --max-sample-size BYTES  refuse a sample whose declared size is over BYTES, before\n"   \
    "                         reading it (default and most 256M, what one chunk holds)\n"          \
    "      --name NAME        dataset name (default: DIR's base name)\n"                           \
    "      --compress C       none, lz4 or lz4hc (default lz4)\n"                                  \
    "      --level N          lz4hc level (default 9)\n"                                           \
    "      --shard-size BYTES decoded bytes per shard file (default 64M)\n"                        \
    "      --chunk-size BYTES decoded bytes per chunk (default 1M)\n"                              \
    "      --threads N        compression threads (default: the cores)\n"                          \
    "      --skip-bad         skip a bad sample (counted in the summary, the first ones named)\n"  \
    "                         instead of failing on it\n"                                          \
    "      --dry-run          read and check every sample, print the schema and the summary,\n"    \
    "                         write nothing (no -o needed)\n"                                      \
    "  -h, --help             this text\n"

void ingest_options_init(ingest_options_t *opt);
/* Checks the output directory (ingest_output_check) unless --dry-run. Returns DSC_CLI_OK or
 * DSC_CLI_FAIL (message printed). */
int ingest_options_check(const char *cmd, const ingest_options_t *opt);

/* Checks the output directory before anything is read: missing (created), an empty directory
 * (swapped in), or one holding a dataset with replace (swapped in). Sets *writer_replace for
 * dsc_writer_options_t.replace. Returns 0 or DSC_CLI_FAIL after printing why (naming the
 * directory and --replace). */
int ingest_output_check(const char *cmd, const char *dir, int replace, int *writer_replace);
/* A dsc_log_fn for the dataset writer: prints its warnings and errors on stderr as
 * "dscache CMD: warning: ..." (ctx: the command's name). */
void ingest_writer_log(void *ctx, int level, const char *message);

/* "name:dtype[d0,d1]" ("?" for a variable d0, nothing for a scalar) into buf. */
void ingest_field_spec(const ingest_field_t *f, char *buf, size_t len);
/* Bytes of one row (one step of dims[0]; the whole value for a scalar) and, for a fixed field,
 * of the whole value; 0 for a variable field's value. */
uint64_t ingest_field_row_bytes(const ingest_field_t *f);
uint64_t ingest_field_fixed_bytes(const ingest_field_t *f);
int ingest_field_variable(const ingest_field_t *f);

typedef struct ingest_run ingest_run_t;

/* Starts a run: prints the schema line, creates the writer (not with --dry-run). source_bytes:
 * the inputs' total size, for the progress bar. Returns 0 and *out, DSC_CLI_FAIL (printed), or
 * DSC_CLI_USAGE when the dataset name taken from the directory is not valid (pass --name). */
int ingest_run_begin(const char *cmd, const ingest_options_t *opt, const ingest_field_t *fields,
                     uint32_t count, const char *meta_json, uint64_t source_bytes,
                     ingest_run_t **out);
/* Adds one sample (values[i] for fields[i]). Returns 0 or DSC_CLI_FAIL (printed). */
int ingest_run_add(ingest_run_t *run, const ingest_value_t *values);
/* Adds count samples at once, field-major (dsc_writer_add_columns: columns[i] for fields[i]).
 * Returns 0 or DSC_CLI_FAIL (printed). */
int ingest_run_add_columns(ingest_run_t *run, const dsc_writer_column_t *columns, uint64_t count);
/* A bad sample: with --skip-bad counts it (naming the first 10 on stderr) and returns 0; without,
 * prints "dscache CMD: FILE: sample WHO: WHY" and returns DSC_CLI_FAIL. count: samples lost
 * (a damaged MDS shard loses all of its samples at once). */
int ingest_run_bad(ingest_run_t *run, const char *file, const char *who, uint64_t count,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Replaces the manifest's "meta" (dsc_writer_set_meta), e.g. once the skipped samples are known.
 * Returns 0 or DSC_CLI_FAIL (printed). No-op with --dry-run. */
int ingest_run_set_meta(ingest_run_t *run, const char *meta_json);
/* Source bytes consumed so far (progress). */
void ingest_run_progress(ingest_run_t *run, uint64_t source_done);
/* Prints a note line ("dscache CMD: note: ...") once the run is over, e.g. ignored files. */
void ingest_run_note(ingest_run_t *run, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Finishes the dataset and prints the summary: samples, skipped, source bytes, MB/s, and the
 * writer's shards, chunks, raw and stored bytes. Returns
 * DSC_CLI_OK or DSC_CLI_FAIL. Frees run. A run with no sample at all fails. */
int ingest_run_finish(ingest_run_t *run);
/* Removes what was written; frees run. NULL is a no-op. */
void ingest_run_abort(ingest_run_t *run);

/* 1 when name is a valid dataset or field name (1..63 of [A-Za-z0-9_.-]), else 0. */
int ingest_name_valid(const char *name);
/* Maps a field name to a valid dscache name in place ([A-Za-z0-9_.-], 1..63): other bytes
 * become '_'. Returns 0, or DSC_EINVAL when empty. */
int ingest_sanitize_name(char *name);

/* Appends s as a JSON string (quoted, escaped; bytes >= 0x80 as \u00XX) at buf + *at, within cap
 * bytes; stops (keeping buf NUL-terminated) when full. */
void ingest_json_string(char *buf, size_t cap, size_t *at, const char *s);

/* Reads a whole file into a fresh buffer (*len bytes, *out to free). Returns 0 or -errno. */
int ingest_read_file(const char *path, uint8_t **out, size_t *len);

#endif
