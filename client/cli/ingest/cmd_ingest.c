/* dscache ingest: turns a token file, .npy arrays or a synthetic generator into a dataset
 * directory (shard files + manifest.json), reading its input in bounded pieces.
 * Just over 800 lines: the three inputs (tokens, .npy, synthetic) share one bounded writer loop
 * and its progress report.
 */
#include "cli.h"
#include "dsc_sys.h"
#include "fieldspec.h"
#include "ingest_common.h"
#include "ingest_forms.h"
#include "manifest.h"
#include "npy.h"
#include "util.h"
#include "writer.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CMD "ingest"
#define MAX_INPUTS DSC_MAX_FIELDS

static void print_help(void) {
    printf(
        "usage: dscache ingest tokens    -o OUT_DIR --dtype u16|u32 --seq-len N [OPTIONS] FILE\n"
        "       dscache ingest npy       -o OUT_DIR [OPTIONS] NAME=FILE.npy [NAME=FILE.npy ...]\n"
        "       dscache ingest synthetic -o OUT_DIR --samples N --field NAME:DTYPE[DIMS]\n"
        "                                [--field ...] [--seed S] [OPTIONS]\n"
        "       dscache ingest webdataset|megatron|mds ...   (each FORM --help)\n"
        "       dscache ingest images    DIR -o OUT_DIR (--encoded | --size H[xW]) [OPTIONS]\n"
        "                                (an ImageFolder tree: dscache ingest images --help)\n"
        "\n"
        "Writes a dataset directory: shard-00000.dsc, shard-00001.dsc, ... and manifest.json.\n"
        "\n"
        "Forms:\n"
        "  tokens     a flat file of token ids (nanoGPT's train.bin). Samples are disjoint\n"
        "             windows of seq_len+1 consecutive tokens (input and shifted target), with\n"
        "             stride seq_len+1: sample i holds tokens [i*(N+1), (i+1)*(N+1)). One field\n"
        "             \"tokens\" of shape [N+1]. The tail shorter than a window is dropped and\n"
        "             reported.\n"
        "  npy        one field per .npy file; the first axis is the sample axis and every file\n"
        "             must have the same length. C order, little-endian u1 i1 u2 i2 u4 i4 i8 f2\n"
        "             f4 f8; Fortran order, big-endian, object and structured arrays are refused.\n"
        "  synthetic  deterministic data: sample i of field F is a pure function of (seed, F, i)\n"
        "             (a splitmix64 stream; small values in runs, so it compresses).\n"
        "\n"
        "Options:\n"
        "  -o, --output DIR       output directory (created when missing, or an empty one); a\n"
        "                         directory that holds a dataset needs --replace, one that holds\n"
        "                         anything else is refused\n"
        "      --replace          replace the dataset at OUT_DIR (--force is the same)\n"
        "      --name NAME        dataset name (default: OUT_DIR's base name); [A-Za-z0-9_.-]\n"
        "      --compress C       none, lz4 or lz4hc (default lz4); a chunk that does not shrink\n"
        "                         is stored raw\n"
        "      --level N          lz4hc level 1..12 (default 9; only with --compress lz4hc)\n"
        "      --shard-size BYTES raw sample bytes per shard file (default 64M)\n"
        "      --chunk-size BYTES raw sample bytes per chunk, the unit of transfer (default 1M);\n"
        "                         a chunk holds max(1, BYTES / sample_bytes) samples\n"
        "  tokens:\n"
        "      --dtype u16|u32    token id type of FILE (little-endian)\n"
        "      --seq-len N        tokens per training sequence (a sample holds N+1)\n"
        "  synthetic:\n"
        "      --samples N        number of samples\n"
        "      --field SPEC       NAME:DTYPE[DIMS], e.g. image:u8[3,32,32] or label:i64 (no\n"
        "                         dims: a scalar; the older image:u8:3x32x32 works too), as\n"
        "                         the writer and dscache.Writer take it (docs/ingest.md#fields);\n"
        "                         a fixed shape; repeat for more fields\n"
        "      --seed S           generator seed (default 0)\n"
        "  -h, --help             this text\n"
        "\n"
        "Compresses on every core (the library's writer, docs/ingest.md) and writes under a\n"
        "hidden temporary directory beside OUT_DIR (.NAME.tmp-PID-N), renamed to OUT_DIR when\n"
        "complete; with --replace the two directories are swapped in one rename (renameat2\n"
        "RENAME_EXCHANGE), so OUT_DIR holds the whole old or the whole new dataset at every\n"
        "instant, and the old one is then removed. An interrupted ingest leaves OUT_DIR whole\n"
        "(as it was, or the new dataset once swapped in), plus at most a hidden\n"
        ".NAME.tmp-PID-N beside it, which the next ingest of OUT_DIR removes. On a filesystem\n"
        "without RENAME_EXCHANGE the swap is two renames: interrupted between them, OUT_DIR is\n"
        "missing and the old dataset is whole in .NAME.old-PID-N (the next ingest says so).\n"
        "Python records (variable-length fields too): dscache.Writer.\n"
        "Prints a progress bar when stderr is a terminal and a one-line summary at the end.\n"
        "Exit codes: 0 done, 1 failed (input or I/O error), 2 bad arguments.\n");
}

/* ---- Sources: fill `count` samples starting at `first` into per-field buffers ------------- */

typedef struct source source_t;
struct source {
    dsc_schema_t schema;
    uint64_t samples;
    int (*fill)(source_t *src, uint64_t first, uint64_t count, uint8_t **bufs);
    /* tokens and npy: one file per field */
    int fds[MAX_INPUTS];
    const char *paths[MAX_INPUTS];
    uint64_t data_offset[MAX_INPUTS];
    /* synthetic */
    uint64_t seed;
    uint64_t field_key[MAX_INPUTS];
    uint8_t value_bytes[MAX_INPUTS][16][8]; /* encoded values 0..15 per field dtype */
};

static int fill_files(source_t *src, uint64_t first, uint64_t count, uint8_t **bufs) {
    for (uint32_t f = 0; f < src->schema.field_count; f++) {
        uint64_t fb = src->schema.fields[f].sample_bytes;
        int rc = dsc_pread_full(src->fds[f], bufs[f], (size_t)(count * fb),
                                src->data_offset[f] + first * fb);
        if (rc < 0) {
            fprintf(stderr, "dscache ingest: %s: read failed: %s\n", src->paths[f],
                    rc == DSC_ETRUNCATED ? "file shrank while reading" : dsc_strerror(rc));
            return rc;
        }
    }
    return 0;
}

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t fnv1a64(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

/* The little-endian bytes of the small integer v (0..15) in dtype. */
static void encode_small(int dtype, unsigned v, uint8_t out[8]) {
    uint64_t bits = v;
    memset(out, 0, 8);
    switch (dtype) {
    case DSC_DTYPE_F16:
        if (v != 0) {
            unsigned e = 0;
            while ((v >> (e + 1)) != 0)
                e++;
            bits = (uint64_t)((e + 15) << 10 | ((v - (1u << e)) << (10 - e)));
        }
        break;
    case DSC_DTYPE_BF16:
    case DSC_DTYPE_F32: {
        float x = (float)v;
        uint32_t u;
        memcpy(&u, &x, 4);
        bits = dtype == DSC_DTYPE_BF16 ? u >> 16 : u;
        break;
    }
    case DSC_DTYPE_F64: {
        double x = (double)v;
        memcpy(&bits, &x, 8);
        break;
    }
    default:
        break;
    }
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(bits >> (8 * i));
}

/* Sample `index` of field f: element values in 0..15; each element repeats the previous one
 * with probability 7/8 (runs make lz4 useful). State per sample, so any sample can be
 * recomputed alone: state = seed ^ fnv1a64(name) ^ index * 0xD1B54A32D192ED03, then 7 bits per
 * element from successive splitmix64 outputs (9 elements per output, low bits first): the low 4
 * bits are a new value, used when the high 3 bits are 0 or for the first element. */
static void synth_sample(const source_t *src, uint32_t f, uint64_t index, uint8_t *out) {
    const dsc_field_t *field = &src->schema.fields[f];
    int esize = dsc_dtype_size(field->dtype);
    uint64_t elements = field->sample_bytes / (uint64_t)esize;
    const uint8_t(*table)[8] = src->value_bytes[f];
    uint64_t state = src->seed ^ src->field_key[f] ^ (index * 0xD1B54A32D192ED03ull);
    uint64_t r = 0;
    int left = 0;
    unsigned value = 0;
    /* constant-size copies per element size: this loop is the generator's whole cost */
#define SYNTH_LOOP(SIZE)                                                                           \
    for (uint64_t e = 0; e < elements; e++) {                                                      \
        if (left == 0) {                                                                           \
            r = splitmix64(&state);                                                                \
            left = 9;                                                                              \
        }                                                                                          \
        unsigned x = (unsigned)(r & 0x7F);                                                         \
        r >>= 7;                                                                                   \
        left--;                                                                                    \
        if (e == 0 || (x >> 4) == 0)                                                               \
            value = x & 15;                                                                        \
        memcpy(out + e * SIZE, table[value], SIZE);                                                \
    }
    switch (esize) {
    case 1:
        SYNTH_LOOP(1)
        break;
    case 2:
        SYNTH_LOOP(2)
        break;
    case 4:
        SYNTH_LOOP(4)
        break;
    default:
        SYNTH_LOOP(8)
        break;
    }
#undef SYNTH_LOOP
}

static int fill_synthetic(source_t *src, uint64_t first, uint64_t count, uint8_t **bufs) {
    for (uint32_t f = 0; f < src->schema.field_count; f++) {
        uint64_t fb = src->schema.fields[f].sample_bytes;
        for (uint64_t i = 0; i < count; i++)
            synth_sample(src, f, first + i, bufs[f] + i * fb);
    }
    return 0;
}

/* ---- The common driver -------------------------------------------------------------------- */

/* Reads the source in pieces of about 1 MiB and hands them, field-major, to the one ingest run
 * (ingest_common.c: the library's writer compresses on every core and finishes atomically). */
static int run_ingest(const ingest_options_t *opt, source_t *src) {
    const dsc_schema_t *schema = &src->schema;
    ingest_field_t fields[MAX_INPUTS];
    memset(fields, 0, sizeof fields);
    for (uint32_t f = 0; f < schema->field_count; f++) {
        const dsc_field_t *from = &schema->fields[f];
        snprintf(fields[f].name, sizeof fields[f].name, "%s", from->name);
        fields[f].dtype = from->dtype;
        fields[f].ndim = from->ndim;
        for (uint32_t d = 0; d < from->ndim; d++)
            fields[f].dims[d] = from->shape[d];
    }
    ingest_run_t *run = NULL;
    int exit_code = ingest_run_begin(CMD, opt, fields, schema->field_count, NULL,
                                     src->samples * schema->sample_bytes, &run);
    if (exit_code != DSC_CLI_OK)
        return exit_code;
    exit_code = DSC_CLI_FAIL;
    uint8_t *bufs[MAX_INPUTS] = {0};
    uint64_t batch = schema->sample_bytes ? (1ull << 20) / schema->sample_bytes : 1;
    if (batch == 0)
        batch = 1;
    if (batch > src->samples)
        batch = src->samples;
    for (uint32_t f = 0; f < schema->field_count; f++) {
        bufs[f] = malloc((size_t)(batch * schema->fields[f].sample_bytes));
        if (bufs[f] == NULL) {
            dsc_cli_fail(CMD, "%s", dsc_strerror(DSC_ENOMEM));
            goto cleanup;
        }
    }
    for (uint64_t first = 0; first < src->samples; first += batch) {
        uint64_t count = src->samples - first < batch ? src->samples - first : batch;
        if (src->fill(src, first, count, bufs) < 0)
            goto cleanup;
        dsc_writer_column_t columns[MAX_INPUTS];
        for (uint32_t f = 0; f < schema->field_count; f++)
            columns[f] =
                (dsc_writer_column_t){bufs[f], count * schema->fields[f].sample_bytes, NULL};
        if (ingest_run_add_columns(run, columns, count) != 0)
            goto cleanup;
        ingest_run_progress(run, (first + count) * schema->sample_bytes);
    }
    exit_code = ingest_run_finish(run);
    run = NULL;
cleanup:
    ingest_run_abort(run);
    for (uint32_t f = 0; f < MAX_INPUTS; f++)
        free(bufs[f]);
    return exit_code;
}

/* ---- Forms -------------------------------------------------------------------------------- */

static int open_input(const char *path, uint64_t *size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        dsc_cli_fail(CMD, "%s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        dsc_cli_fail(CMD, "%s: not a regular file", path);
        close(fd);
        return -1;
    }
    *size = (uint64_t)st.st_size;
    return fd;
}

static int setup_tokens(source_t *src, const char *path, int dtype, uint64_t seq_len) {
    uint64_t size;
    int fd = open_input(path, &size);
    if (fd < 0)
        return DSC_CLI_FAIL;
    src->fds[0] = fd;
    src->paths[0] = path;
    uint64_t esize = (uint64_t)dsc_dtype_size(dtype);
    if (size % esize != 0)
        return dsc_cli_fail(CMD, "%s: size %llu is not a multiple of %llu bytes: wrong --dtype?",
                            path, (unsigned long long)size, (unsigned long long)esize);
    uint64_t tokens = size / esize;
    uint64_t window = seq_len + 1;
    src->samples = tokens / window;
    if (src->samples == 0)
        return dsc_cli_fail(CMD, "%s: %llu tokens, fewer than one window of %llu", path,
                            (unsigned long long)tokens, (unsigned long long)window);
    uint64_t dropped = tokens - src->samples * window;
    if (dropped > 0)
        fprintf(stderr,
                "dscache ingest: %s: dropped the last %llu tokens (shorter than a window of "
                "%llu)\n",
                path, (unsigned long long)dropped, (unsigned long long)window);
    src->schema.field_count = 1;
    snprintf(src->schema.fields[0].name, DSC_MAX_NAME, "tokens");
    src->schema.fields[0].dtype = (uint8_t)dtype;
    src->schema.fields[0].ndim = 1;
    src->schema.fields[0].shape[0] = (uint32_t)window;
    src->data_offset[0] = 0;
    src->fill = fill_files;
    return DSC_CLI_OK;
}

static int setup_npy_input(source_t *src, uint32_t f, const char *arg) {
    const char *eq = strchr(arg, '=');
    if (eq == NULL || eq == arg)
        return dsc_cli_usage(CMD, "'%s': expected NAME=FILE.npy", arg);
    size_t name_len = (size_t)(eq - arg);
    dsc_field_t *field = &src->schema.fields[f];
    if (name_len >= DSC_MAX_NAME)
        return dsc_cli_usage(CMD, "'%s': field name longer than %d characters", arg,
                             DSC_MAX_NAME - 1);
    memcpy(field->name, arg, name_len);
    field->name[name_len] = '\0';
    if (!dsc__name_valid(field->name))
        return dsc_cli_usage(CMD, "'%s': field name must be 1-63 of A-Z a-z 0-9 _ . -", arg);
    for (uint32_t g = 0; g < f; g++)
        if (strcmp(src->schema.fields[g].name, field->name) == 0)
            return dsc_cli_usage(CMD, "field '%s' given twice", field->name);
    const char *path = eq + 1;
    src->paths[f] = path;
    uint64_t size;
    int fd = open_input(path, &size);
    if (fd < 0)
        return DSC_CLI_FAIL;
    src->fds[f] = fd;

    uint8_t preamble[DSC_NPY_PREAMBLE];
    size_t got = size < sizeof preamble ? (size_t)size : sizeof preamble;
    dsc_npy_header_t npy;
    int rc = dsc_pread_full(fd, preamble, got, 0);
    if (rc < 0)
        return dsc_cli_fail(CMD, "%s: %s", path, dsc_strerror(rc));
    int64_t header_size = dsc_npy_header_size(preamble, got);
    if (header_size < 0) {
        dsc_npy_parse(preamble, got, &npy);
        return dsc_cli_fail(CMD, "%s: %s", path, npy.problem);
    }
    if ((uint64_t)header_size > size)
        return dsc_cli_fail(CMD, "%s: file shorter than its .npy header", path);
    uint8_t *header = malloc((size_t)header_size);
    if (header == NULL)
        return dsc_cli_fail(CMD, "%s", dsc_strerror(DSC_ENOMEM));
    rc = dsc_pread_full(fd, header, (size_t)header_size, 0);
    int64_t parsed = rc < 0 ? rc : dsc_npy_parse(header, (size_t)header_size, &npy);
    free(header);
    if (rc < 0)
        return dsc_cli_fail(CMD, "%s: %s", path, dsc_strerror(rc));
    if (parsed < 0) {
        if (npy.descr[0] != '\0' && parsed == DSC_ENOTSUP && npy.dtype == 0)
            return dsc_cli_fail(CMD, "%s: dtype '%s': %s", path, npy.descr, npy.problem);
        return dsc_cli_fail(CMD, "%s: %s", path, npy.problem ? npy.problem : "invalid header");
    }
    if (npy.ndim == 0)
        return dsc_cli_fail(CMD, "%s: a 0-d array has no sample axis (need shape (N, ...))", path);
    if (npy.ndim - 1 > DSC_MAX_DIMS)
        return dsc_cli_fail(CMD, "%s: %u dimensions per sample, at most %d", path, npy.ndim - 1,
                            DSC_MAX_DIMS);
    if (npy.shape[0] == 0)
        return dsc_cli_fail(CMD, "%s: the array holds no samples (shape[0] == 0)", path);
    field->dtype = (uint8_t)npy.dtype;
    field->ndim = (uint8_t)(npy.ndim - 1);
    for (uint32_t d = 1; d < npy.ndim; d++) {
        if (npy.shape[d] == 0 || npy.shape[d] > UINT32_MAX)
            return dsc_cli_fail(CMD, "%s: axis %u has length %llu (must be 1..2^32-1)", path, d,
                                (unsigned long long)npy.shape[d]);
        field->shape[d - 1] = (uint32_t)npy.shape[d];
    }
    uint64_t end = npy.data_offset + npy.data_bytes;
    if (size < end)
        return dsc_cli_fail(CMD,
                            "%s: truncated: the header promises %llu data bytes, the file "
                            "holds %llu",
                            path, (unsigned long long)npy.data_bytes,
                            (unsigned long long)(size - npy.data_offset));
    if (size > end)
        return dsc_cli_fail(CMD, "%s: %llu unexpected bytes after the array data", path,
                            (unsigned long long)(size - end));
    if (f == 0) {
        src->samples = npy.shape[0];
    } else if (npy.shape[0] != src->samples) {
        return dsc_cli_fail(CMD,
                            "%s: %llu samples, but %s has %llu: every file needs the same "
                            "first axis",
                            path, (unsigned long long)npy.shape[0], src->paths[0],
                            (unsigned long long)src->samples);
    }
    src->data_offset[f] = npy.data_offset;
    return DSC_CLI_OK;
}

static int parse_field_spec(source_t *src, const char *spec) {
    uint32_t f = src->schema.field_count;
    if (f >= DSC_MAX_FIELDS)
        return dsc_cli_usage(CMD, "at most %d fields", DSC_MAX_FIELDS);
    dsc_field_t *field = &src->schema.fields[f];
    dsc_fieldspec_error_t why;
    if (dsc_fieldspec_parse(spec, strlen(spec), DSC_FIELDSPEC_SIZED, field, &why) < 0) {
        char text[384];
        dsc_fieldspec_message(spec, strlen(spec), &why, text, sizeof text);
        return dsc_cli_usage(CMD, "--field: %s", text);
    }
    if (field->ndim > 0 && field->shape[0] == DSC_DIM_VARIABLE)
        return dsc_cli_usage(CMD,
                             "--field '%s': synthetic fields have a fixed shape (a variable one: "
                             "dscache.Writer)",
                             spec);
    for (uint32_t g = 0; g < f; g++)
        if (strcmp(src->schema.fields[g].name, field->name) == 0)
            return dsc_cli_usage(CMD, "--field '%s': field '%s' given twice", spec, field->name);
    src->field_key[f] = fnv1a64(field->name);
    src->schema.field_count = f + 1;
    return DSC_CLI_OK;
}

/* ---- Entry point -------------------------------------------------------------------------- */

enum { FORM_TOKENS, FORM_NPY, FORM_SYNTHETIC };
enum { OPT_DTYPE = INGEST_FORM_OPTION, OPT_SEQ_LEN, OPT_SAMPLES, OPT_FIELD, OPT_SEED };

/* What tokens, npy and synthetic take besides the common options (one table for the three: an
 * option of another form is named as such). */
typedef struct form_args {
    int form;
    source_t *src;
    int token_dtype;
    uint64_t seq_len, samples, seed;
    int have_seq_len, have_samples, have_seed;
} form_args_t;

static int form_option(void *state, int id, const char *arg) {
    form_args_t *a = state;
    switch (id) {
    case OPT_DTYPE:
        a->token_dtype = dsc_dtype_parse(arg);
        if (a->token_dtype != DSC_DTYPE_U16 && a->token_dtype != DSC_DTYPE_U32)
            return dsc_cli_usage(CMD, "--dtype '%s': token ids are u16 or u32", arg);
        return DSC_CLI_OK;
    case OPT_SEQ_LEN:
        a->have_seq_len = 1;
        return dsc_cli_parse_u64(CMD, "--seq-len", arg, 1, (1u << 26), &a->seq_len) < 0
                   ? DSC_CLI_USAGE
                   : DSC_CLI_OK;
    case OPT_SAMPLES:
        a->have_samples = 1;
        return dsc_cli_parse_u64(CMD, "--samples", arg, 1, UINT64_MAX / 2, &a->samples) < 0
                   ? DSC_CLI_USAGE
                   : DSC_CLI_OK;
    case OPT_FIELD:
        if (a->form != FORM_SYNTHETIC)
            return dsc_cli_usage(CMD, "--field applies to 'ingest synthetic' only");
        return parse_field_spec(a->src, arg);
    default: /* OPT_SEED */
        a->have_seed = 1;
        return dsc_cli_parse_u64(CMD, "--seed", arg, 0, UINT64_MAX, &a->seed) < 0 ? DSC_CLI_USAGE
                                                                                  : DSC_CLI_OK;
    }
}

static int form_run(void *state, const ingest_options_t *opt, int positional, char **args) {
    form_args_t *a = state;
    source_t *src = a->src;
    int exit_code = DSC_CLI_USAGE;
    if (a->form != FORM_TOKENS && (a->token_dtype != 0 || a->have_seq_len))
        return dsc_cli_usage(CMD, "--dtype and --seq-len apply to 'ingest tokens' only");
    if (a->form != FORM_SYNTHETIC && (a->have_samples || a->have_seed))
        return dsc_cli_usage(CMD, "--samples and --seed apply to 'ingest synthetic' only");
    switch (a->form) {
    case FORM_TOKENS:
        if (a->token_dtype == 0 || !a->have_seq_len)
            return dsc_cli_usage(CMD, "tokens: --dtype u16|u32 and --seq-len N are required");
        if (positional != 1)
            return dsc_cli_usage(CMD, "tokens: expected exactly one FILE, got %d", positional);
        exit_code = setup_tokens(src, args[0], a->token_dtype, a->seq_len);
        break;
    case FORM_NPY:
        if (positional < 1)
            return dsc_cli_usage(CMD, "npy: expected NAME=FILE.npy arguments");
        if (positional > MAX_INPUTS)
            return dsc_cli_usage(CMD, "npy: at most %d fields", MAX_INPUTS);
        for (int i = 0; i < positional; i++) {
            src->schema.field_count = (uint32_t)i + 1;
            exit_code = setup_npy_input(src, (uint32_t)i, args[i]);
            if (exit_code != DSC_CLI_OK)
                return exit_code;
        }
        src->fill = fill_files;
        break;
    default: /* FORM_SYNTHETIC */
        if (!a->have_samples || src->schema.field_count == 0)
            return dsc_cli_usage(CMD,
                                 "synthetic: --samples N and at least one --field are required");
        if (positional != 0)
            return dsc_cli_usage(CMD, "synthetic: unexpected argument '%s'", args[0]);
        src->samples = a->samples;
        src->seed = a->seed;
        for (uint32_t f = 0; f < src->schema.field_count; f++)
            for (unsigned v = 0; v < 16; v++)
                encode_small(src->schema.fields[f].dtype, v, src->value_bytes[f][v]);
        src->fill = fill_synthetic;
        exit_code = DSC_CLI_OK;
        break;
    }
    if (exit_code != DSC_CLI_OK)
        return exit_code;
    int rc = dsc_schema_finish(&src->schema);
    if (rc < 0)
        return dsc_cli_fail(CMD, "invalid schema: %s", dsc_strerror(rc));
    return run_ingest(opt, src);
}

int dsc_cmd_ingest(int argc, char **argv) {
    static const struct option options[] = {
        {"dtype", required_argument, NULL, OPT_DTYPE},
        {"seq-len", required_argument, NULL, OPT_SEQ_LEN},
        {"samples", required_argument, NULL, OPT_SAMPLES},
        {"field", required_argument, NULL, OPT_FIELD},
        {"seed", required_argument, NULL, OPT_SEED},
        {NULL, 0, NULL, 0},
    };
    static const ingest_form_t form = {CMD,        INGEST_OPT_WRITER, options,
                                       print_help, form_option,       form_run};

    /* the readers of other formats: ingest_wds.c, ingest_megatron.c, ingest_mds.c,
     * ingest_images.c */
    if (argc >= 2 && strcmp(argv[1], "webdataset") == 0)
        return dsc_cmd_ingest_webdataset(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "megatron") == 0)
        return dsc_cmd_ingest_megatron(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "mds") == 0)
        return dsc_cmd_ingest_mds(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "images") == 0)
        return dsc_ingest_images(argc - 1, argv + 1);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            print_help();
            return DSC_CLI_OK;
        }
    }
    if (argc < 2)
        return dsc_cli_usage(CMD, "missing the input form: tokens, npy or synthetic");
    form_args_t args;
    memset(&args, 0, sizeof args);
    if (strcmp(argv[1], "tokens") == 0)
        args.form = FORM_TOKENS;
    else if (strcmp(argv[1], "npy") == 0)
        args.form = FORM_NPY;
    else if (strcmp(argv[1], "synthetic") == 0)
        args.form = FORM_SYNTHETIC;
    else
        return dsc_cli_usage(CMD, "unknown input form '%s' (tokens, npy or synthetic)", argv[1]);
    args.src = calloc(1, sizeof *args.src);
    if (args.src == NULL)
        return dsc_cli_fail(CMD, "%s", dsc_strerror(DSC_ENOMEM));
    for (int f = 0; f < MAX_INPUTS; f++)
        args.src->fds[f] = -1;
    int exit_code = ingest_main(&form, &args, argc - 1, argv + 1);
    for (int f = 0; f < MAX_INPUTS; f++)
        if (args.src->fds[f] >= 0)
            close(args.src->fds[f]);
    free(args.src);
    return exit_code;
}
