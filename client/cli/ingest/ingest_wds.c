/* dscache ingest webdataset: WebDataset tar shards into a dataset. Two passes: the first reads
 * the tars' headers and the first bytes of each file to fix the schema (which fields, .npy dtype
 * and shape, whether .txt holds integers) and to find bad samples before anything is written;
 * the second reads everything and writes. */
#include "ingest_common.h"
#include "npy.h"
#include "wds.h"

#include "dscache.h"

#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CMD "ingest webdataset"
#define SCAN_PREFIX (64u << 10) /* bytes of each file the first pass reads */
#define INT_MAX_TEXT 64         /* a .cls/.txt label longer than this is not an integer */
#define MAX_TARS 65536

static void print_help(void) {
    printf(
        "usage: dscache ingest webdataset -o OUT_DIR [--field EXT[:NAME[:TYPE]] ...] [OPTIONS]\n"
        "                                 SHARD.tar [SHARD.tar ...]\n"
        "\n"
        "Reads WebDataset tar shards (plain or compressed tars), in the order given, and writes\n"
        "one sample per WebDataset sample: files are grouped by key (the path up to the first\n"
        "dot of the file name; consecutive files with the same key form a sample) and the\n"
        "extension after that dot (lower-cased) names the field. By extension:\n"
        "  npy        the array: a fixed DTYPE[shape] when every sample has the same shape,\n"
        "             else DTYPE[?,...] (a variable leading dimension)\n"
        "  cls        an integer label: i64\n"
        "  txt        i64 when every sample's .txt holds an integer, else u8[] (the text)\n"
        "  any other  u8[]: the file's bytes as stored (jpg, png, webp, json, ...)\n"
        "\n"
        "      --field EXT[:NAME[:TYPE]]   ingest only these extensions (repeat; in this order),\n"
        "                         as field NAME (default EXT), TYPE one of auto (the rule above),\n"
        "                         npy, int or bytes. Example: --field jpg:image --field cls:label\n"
        "                         Without --field: the extensions of the first sample.\n"
        "\n"
        "Bad samples are errors naming the tar and the sample's key: a file of a field missing,\n"
        "two files with the same extension, a .cls (or an int field) that is not an integer, a\n"
        "bad .npy or one whose dtype or trailing dimensions differ from the first sample's, a\n"
        "tar truncated inside a file. Nothing is written when the first pass finds one. With\n"
        "--skip-bad they are skipped and counted (a truncated tar: what precedes the damage is\n"
        "kept). Files without a key.extension form and extensions not selected are counted in\n"
        "a note.\n"
        "\n" INGEST_COMMON_HELP "\n"
        "Prints a progress bar when stderr is a terminal and a one-line summary at the end.\n"
        "Exit codes: 0 done, 1 failed (input or I/O error), 2 bad arguments.\n");
}

enum { T_AUTO, T_NPY, T_INT, T_BYTES };

typedef struct wfield {
    char ext[64];
    ingest_field_t field;
    int type;     /* as asked (T_AUTO resolves per extension) */
    int resolved; /* T_NPY, T_INT or T_BYTES once the first pass is over */
    int txt_auto; /* T_AUTO on txt: i64 while every value is an integer */
    int all_int;
    int have_ref; /* npy: the first good sample's dtype and shape */
    int ref_dtype;
    uint32_t ref_ndim;
    uint64_t ref_shape[DSC_NPY_MAX_DIMS];
    int same_shape;
    char ref_descr[32];
} wfield_t;

typedef struct plan {
    wfield_t f[INGEST_MAX_FIELDS];
    uint32_t count;
    int from_first_sample;
    char ignored_ext[8][32];
    uint64_t ignored_count[8];
    uint64_t ignored_other;
} plan_t;

static int parse_field_option(plan_t *plan, const char *arg) {
    if (plan->count == INGEST_MAX_FIELDS)
        return dsc_cli_usage(CMD, "at most %d --field options", INGEST_MAX_FIELDS);
    wfield_t *w = &plan->f[plan->count];
    memset(w, 0, sizeof *w);
    char copy[256];
    snprintf(copy, sizeof copy, "%s", arg);
    char *name = strchr(copy, ':'), *type = NULL;
    if (name != NULL) {
        *name++ = '\0';
        type = strchr(name, ':');
        if (type != NULL)
            *type++ = '\0';
    }
    if (copy[0] == '\0' || strlen(copy) >= sizeof w->ext)
        return dsc_cli_usage(CMD, "--field '%s': expected EXT[:NAME[:TYPE]]", arg);
    for (char *p = copy; *p; p++)
        *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
    snprintf(w->ext, sizeof w->ext, "%s", copy);
    snprintf(w->field.name, sizeof w->field.name, "%s", name && name[0] ? name : copy);
    if (!ingest_name_valid(w->field.name))
        return dsc_cli_usage(CMD,
                             "--field '%s': '%s' is not a valid field name "
                             "(1-63 of A-Z a-z 0-9 _ . -)",
                             arg, w->field.name);
    if (type == NULL || strcmp(type, "auto") == 0)
        w->type = T_AUTO;
    else if (strcmp(type, "npy") == 0)
        w->type = T_NPY;
    else if (strcmp(type, "int") == 0)
        w->type = T_INT;
    else if (strcmp(type, "bytes") == 0)
        w->type = T_BYTES;
    else
        return dsc_cli_usage(CMD, "--field '%s': TYPE is auto, npy, int or bytes", arg);
    for (uint32_t i = 0; i < plan->count; i++)
        if (strcmp(plan->f[i].ext, w->ext) == 0 ||
            strcmp(plan->f[i].field.name, w->field.name) == 0)
            return dsc_cli_usage(CMD, "--field '%s': extension or name given twice", arg);
    plan->count++;
    return 0;
}

/* T_AUTO by extension: npy, cls, txt (decided by the data), bytes. */
static void resolve_auto(wfield_t *w) {
    if (w->type != T_AUTO) {
        w->resolved = w->type;
        return;
    }
    if (strcmp(w->ext, "npy") == 0)
        w->resolved = T_NPY;
    else if (strcmp(w->ext, "cls") == 0)
        w->resolved = T_INT;
    else if (strcmp(w->ext, "txt") == 0) {
        w->resolved = T_INT;
        w->txt_auto = 1;
        w->all_int = 1;
    } else
        w->resolved = T_BYTES;
}

static const dsc_wds_member_t *find_member(const dsc_wds_sample_t *s, const char *ext) {
    for (uint32_t m = 0; m < s->member_count; m++)
        if (strcmp(s->members[m].ext, ext) == 0)
            return &s->members[m];
    return NULL;
}

static void note_ignored(plan_t *plan, const dsc_wds_sample_t *s) {
    for (uint32_t m = 0; m < s->member_count; m++) {
        const char *ext = s->members[m].ext;
        uint32_t f = 0;
        while (f < plan->count && strcmp(plan->f[f].ext, ext) != 0)
            f++;
        if (f < plan->count)
            continue;
        uint32_t i = 0;
        while (i < 8 && plan->ignored_ext[i][0] && strcmp(plan->ignored_ext[i], ext) != 0)
            i++;
        if (i == 8) {
            plan->ignored_other++;
            continue;
        }
        if (!plan->ignored_ext[i][0])
            snprintf(plan->ignored_ext[i], sizeof plan->ignored_ext[i], "%s", ext);
        plan->ignored_count[i]++;
    }
}

/* Checks one sample against the plan. pass 1 (final == 0): the data may be a prefix, the plan's
 * references are updated when the sample is good (commit). pass 2 (final == 1): values are
 * filled (int_values holds the decoded labels). Returns 0 good, 1 bad (why says what). */
static int check_sample(plan_t *plan, const dsc_wds_sample_t *s, int final, ingest_value_t *values,
                        int64_t *int_values, char *why, size_t why_len) {
    dsc_npy_header_t headers[INGEST_MAX_FIELDS];
    if (s->too_large != NULL) { /* refused before its data was read */
        snprintf(why, why_len, "%s (--max-sample-size)", s->too_large);
        return 1;
    }
    if (s->duplicate != NULL) {
        snprintf(why, why_len, "two files with extension '%s'", s->duplicate);
        return 1;
    }
    for (uint32_t f = 0; f < plan->count; f++) {
        wfield_t *w = &plan->f[f];
        const dsc_wds_member_t *m = find_member(s, w->ext);
        if (m == NULL) {
            snprintf(why, why_len, "no .%s file (field '%s')", w->ext, w->field.name);
            return 1;
        }
        switch (w->resolved) {
        case T_NPY: {
            dsc_npy_header_t *h = &headers[f];
            int64_t rc = dsc_npy_parse(m->data, (size_t)m->held, h);
            if (rc == DSC_ETRUNCATED && m->held < m->size) {
                snprintf(why, why_len, ".%s: .npy header over %u bytes", w->ext, SCAN_PREFIX);
                return 1;
            }
            if (rc < 0) {
                snprintf(why, why_len, ".%s: not a usable .npy (%s)", w->ext,
                         h->problem ? h->problem : dsc_strerror((int)rc));
                return 1;
            }
            if (h->data_offset + h->data_bytes != m->size) {
                snprintf(why, why_len, ".%s: %llu data bytes, the .npy header says %llu", w->ext,
                         (unsigned long long)(m->size - h->data_offset),
                         (unsigned long long)h->data_bytes);
                return 1;
            }
            if (w->have_ref) {
                int trailing_differ = h->ndim != w->ref_ndim;
                for (uint32_t i = 1; !trailing_differ && i < h->ndim; i++)
                    trailing_differ = h->shape[i] != w->ref_shape[i];
                if (h->dtype != w->ref_dtype || trailing_differ) {
                    snprintf(why, why_len,
                             ".%s: dtype %s with %u dimensions, earlier samples have %s with %u "
                             "(and the same dimensions after the first)",
                             w->ext, h->descr, h->ndim, w->ref_descr, w->ref_ndim);
                    return 1;
                }
                if (final && w->field.dims[0] != 0 && h->ndim > 0 &&
                    h->shape[0] != w->field.dims[0]) {
                    snprintf(why, why_len, ".%s: the tar changed between the passes", w->ext);
                    return 1;
                }
            } else if (h->ndim > INGEST_MAX_DIMS) {
                snprintf(why, why_len, ".%s: over %d dimensions", w->ext, INGEST_MAX_DIMS);
                return 1;
            }
            if (final) {
                values[f].data = m->data + h->data_offset;
                values[f].bytes = h->data_bytes;
            }
            break;
        }
        case T_INT: {
            int64_t v = 0;
            int ok = m->size <= INT_MAX_TEXT && m->held == m->size &&
                     dsc_wds_parse_int(m->data, (size_t)m->held, &v) == 0;
            if (!ok && !w->txt_auto) {
                snprintf(why, why_len, ".%s: '%.*s%s' is not an integer (field '%s')", w->ext,
                         (int)(m->held < 24 ? m->held : 24), (const char *)m->data,
                         m->held > 24 ? "..." : "", w->field.name);
                return 1;
            }
            if (final) {
                int_values[f] = v;
                values[f].data = &int_values[f];
                values[f].bytes = 8;
            }
            break;
        }
        default:
            if (final) {
                values[f].data = m->data;
                values[f].bytes = m->size;
            }
            break;
        }
    }
    if (!final) { /* commit: the sample is good */
        for (uint32_t f = 0; f < plan->count; f++) {
            wfield_t *w = &plan->f[f];
            const dsc_wds_member_t *m = find_member(s, w->ext);
            if (w->resolved == T_NPY) {
                const dsc_npy_header_t *h = &headers[f];
                if (!w->have_ref) {
                    w->have_ref = 1;
                    w->same_shape = 1;
                    w->ref_dtype = h->dtype;
                    w->ref_ndim = h->ndim;
                    memcpy(w->ref_shape, h->shape, sizeof w->ref_shape);
                    snprintf(w->ref_descr, sizeof w->ref_descr, "%s", h->descr);
                } else if (h->ndim > 0 && h->shape[0] != w->ref_shape[0]) {
                    w->same_shape = 0;
                }
            } else if (w->txt_auto && w->all_int) {
                int64_t v;
                if (m->size > INT_MAX_TEXT || m->held != m->size ||
                    dsc_wds_parse_int(m->data, (size_t)m->held, &v) != 0)
                    w->all_int = 0;
            }
        }
    }
    return 0;
}

/* The plan from the first sample's extensions (no --field given). */
static int plan_from_sample(plan_t *plan, const dsc_wds_sample_t *s, const char *tar) {
    for (uint32_t m = 0; m < s->member_count && plan->count < INGEST_MAX_FIELDS; m++) {
        wfield_t *w = &plan->f[plan->count];
        memset(w, 0, sizeof *w);
        if (strlen(s->members[m].ext) >= sizeof w->ext)
            return dsc_cli_fail(CMD, "%s: sample %s: extension '%s' too long", tar, s->key,
                                s->members[m].ext);
        snprintf(w->ext, sizeof w->ext, "%s", s->members[m].ext);
        memcpy(w->field.name, w->ext, sizeof w->ext);
        ingest_sanitize_name(w->field.name);
        w->type = T_AUTO;
        int dup = 0;
        for (uint32_t i = 0; i < plan->count; i++)
            dup |= strcmp(plan->f[i].ext, w->ext) == 0 ||
                   strcmp(plan->f[i].field.name, w->field.name) == 0;
        if (dup)
            continue; /* the duplicate makes the sample bad; the field is there once */
        resolve_auto(w);
        plan->count++;
    }
    return 0;
}

static int tar_failure(ingest_run_t *run, const ingest_options_t *opt, const char *tar,
                       dsc_wds_reader_t *r, int rc) {
    char who[DSC_WDS_MAX_NAME + 64];
    const char *key = dsc_wds_reader_key(r);
    if (key[0])
        snprintf(who, sizeof who, "sample %s", key);
    else
        snprintf(who, sizeof who, "after the last complete sample");
    const char *why = dsc_wds_reader_error(r);
    if (run == NULL) { /* first pass */
        if (opt->skip_bad)
            return 0;
        return dsc_cli_fail(CMD, "%s: %s: %s (%s; --skip-bad keeps what precedes it)", tar, who,
                            why, dsc_strerror(rc));
    }
    return ingest_run_bad(run, tar, who, key[0] ? 1 : 0, "%s; the rest of this tar is lost", why);
}

static int wds_option(void *state, int id, const char *arg) {
    (void)id; /* 2001: --field */
    return parse_field_option(state, arg) != 0 ? DSC_CLI_USAGE : DSC_CLI_OK;
}

static int wds_run(void *state, const ingest_options_t *options, int argc, char **argv) {
    plan_t *plan = state;
    ingest_options_t opt = *options;
    int exit_code = DSC_CLI_USAGE;
    if (argc < 1) {
        dsc_cli_usage(CMD, "expected one or more SHARD.tar");
        goto cleanup_plan;
    }
    if (argc > MAX_TARS) {
        dsc_cli_usage(CMD, "at most %d tars", MAX_TARS);
        goto cleanup_plan;
    }
    if ((exit_code = ingest_options_check(CMD, &opt)) != DSC_CLI_OK)
        goto cleanup_plan;
    for (uint32_t f = 0; f < plan->count; f++)
        resolve_auto(&plan->f[f]);
    plan->from_first_sample = plan->count == 0;

    exit_code = DSC_CLI_FAIL;
    char **tars = argv;
    int tar_count = argc;
    uint64_t source_bytes = 0;
    for (int t = 0; t < tar_count; t++) {
        struct stat st;
        if (stat(tars[t], &st) != 0 || !S_ISREG(st.st_mode)) {
            dsc_cli_fail(CMD, "%s: not a readable file", tars[t]);
            goto cleanup_plan;
        }
        source_bytes += (uint64_t)st.st_size;
    }

    /* pass 1: schema and bad samples, nothing written */
    char why[1024];
    uint64_t good = 0, skipped_files = 0, scanned = 0;
    dsc_cli_progress_t scan;
    dsc_cli_progress_init(&scan, "scan", source_bytes);
    for (int t = 0; t < tar_count; t++) {
        dsc_wds_reader_t *r = NULL;
        int rc = dsc_wds_reader_open_file(tars[t], SCAN_PREFIX, &r);
        if (r != NULL)
            dsc_wds_reader_set_sample_limit(r, opt.max_sample);
        const dsc_wds_sample_t *s;
        while (rc == 0 && (rc = dsc_wds_reader_next(r, &s)) == 1) {
            rc = 0;
            if (plan->count == 0 && plan_from_sample(plan, s, tars[t]) != 0) {
                dsc_wds_reader_close(r);
                goto cleanup_plan;
            }
            if (check_sample(plan, s, 0, NULL, NULL, why, sizeof why) != 0) {
                if (!opt.skip_bad) {
                    dsc_cli_progress_done(&scan);
                    dsc_cli_fail(CMD, "%s: sample %s: %s (--skip-bad skips bad samples)", tars[t],
                                 s->key, why);
                    dsc_wds_reader_close(r);
                    goto cleanup_plan;
                }
                continue;
            }
            good++;
            dsc_cli_progress_update(&scan, scanned + dsc_wds_reader_position(r));
        }
        struct stat st;
        scanned += stat(tars[t], &st) == 0 ? (uint64_t)st.st_size : 0;
        if (rc < 0 && !opt.skip_bad)
            dsc_cli_progress_done(&scan);
        if (rc < 0 && tar_failure(NULL, &opt, tars[t], r, rc) != 0) {
            dsc_wds_reader_close(r);
            goto cleanup_plan;
        }
        dsc_wds_reader_close(r);
    }
    dsc_cli_progress_done(&scan);
    if (plan->count == 0 || good == 0) {
        dsc_cli_fail(CMD, "no good sample in the %d tar(s)", tar_count);
        goto cleanup_plan;
    }
    ingest_field_t fields[INGEST_MAX_FIELDS];
    int txt_as_int[INGEST_MAX_FIELDS] = {0};
    for (uint32_t f = 0; f < plan->count; f++) {
        wfield_t *w = &plan->f[f];
        ingest_field_t *field = &w->field;
        field->ndim = 0;
        if (w->resolved == T_NPY) {
            field->dtype = w->ref_dtype;
            field->ndim = w->ref_ndim;
            for (uint32_t i = 0; i < w->ref_ndim; i++)
                field->dims[i] = w->ref_shape[i];
            if (w->ref_ndim > 0 && !w->same_shape)
                field->dims[0] = 0;
        } else if (w->resolved == T_INT && !(w->txt_auto && !w->all_int)) {
            field->dtype = DSC_DTYPE_I64;
            txt_as_int[f] = w->txt_auto;
        } else {
            w->resolved = T_BYTES;
            w->txt_auto = 0;
            field->dtype = DSC_DTYPE_U8;
            field->ndim = 1;
            field->dims[0] = 0;
        }
        w->txt_auto = 0; /* pass 2: the type is settled */
        fields[f] = *field;
    }

    /* pass 2: write */
    ingest_run_t *run = NULL;
    /* meta: where each field came from, e.g. {"source": "webdataset", "extensions": {"image":
     * "jpg"}} (a loader that decodes images can tell the encoding from it) */
    char meta[16384];
    size_t at = 0;
    meta[0] = '\0';
    snprintf(meta, sizeof meta, "{\"source\": \"webdataset\", \"extensions\": {");
    at = strlen(meta);
    for (uint32_t f = 0; f < plan->count; f++) {
        ingest_json_string(meta, sizeof meta, &at, plan->f[f].field.name);
        snprintf(meta + at, sizeof meta - at, ": ");
        at += strlen(meta + at);
        ingest_json_string(meta, sizeof meta, &at, plan->f[f].ext);
        if (f + 1 < plan->count) {
            snprintf(meta + at, sizeof meta - at, ", ");
            at += strlen(meta + at);
        }
    }
    snprintf(meta + at, sizeof meta - at, "}}");
    if (ingest_run_begin(CMD, &opt, fields, plan->count, meta, source_bytes, &run) != 0)
        goto cleanup_plan;
    for (uint32_t f = 0; f < plan->count; f++)
        if (txt_as_int[f])
            ingest_run_note(run,
                            "every .%s holds an integer: field '%s' is i64 (--field %s:%s:bytes "
                            "keeps the text)",
                            plan->f[f].ext, plan->f[f].field.name, plan->f[f].ext,
                            plan->f[f].field.name);
    uint64_t done_before = 0;
    for (int t = 0; t < tar_count; t++) {
        dsc_wds_reader_t *r = NULL;
        int rc = dsc_wds_reader_open_file(tars[t], 0, &r);
        if (r != NULL)
            dsc_wds_reader_set_sample_limit(r, opt.max_sample);
        const dsc_wds_sample_t *s;
        while (rc == 0 && (rc = dsc_wds_reader_next(r, &s)) == 1) {
            rc = 0;
            ingest_value_t values[INGEST_MAX_FIELDS];
            int64_t ints[INGEST_MAX_FIELDS];
            note_ignored(plan, s);
            if (check_sample(plan, s, 1, values, ints, why, sizeof why) != 0) {
                char who[DSC_WDS_MAX_NAME + 64];
                snprintf(who, sizeof who, "sample %s", s->key);
                if (ingest_run_bad(run, tars[t], who, 1, "%s", why) != 0) {
                    dsc_wds_reader_close(r);
                    goto cleanup_run;
                }
                continue;
            }
            if (ingest_run_add(run, values) != 0) {
                dsc_wds_reader_close(r);
                goto cleanup_run;
            }
            ingest_run_progress(run, done_before + dsc_wds_reader_position(r));
        }
        if (rc < 0 && tar_failure(run, &opt, tars[t], r, rc) != 0) {
            dsc_wds_reader_close(r);
            goto cleanup_run;
        }
        skipped_files += dsc_wds_reader_skipped_files(r);
        dsc_wds_reader_close(r);
        struct stat st;
        done_before += stat(tars[t], &st) == 0 ? (uint64_t)st.st_size : 0;
        ingest_run_progress(run, done_before);
    }
    for (int i = 0; i < 8 && plan->ignored_ext[i][0]; i++)
        ingest_run_note(run, "%llu files with extension '%s' not ingested (not %s)",
                        (unsigned long long)plan->ignored_count[i], plan->ignored_ext[i],
                        plan->from_first_sample ? "in the first sample; --field selects fields"
                                                : "a --field");
    if (plan->ignored_other)
        ingest_run_note(run, "%llu more files with other extensions not ingested",
                        (unsigned long long)plan->ignored_other);
    if (skipped_files)
        ingest_run_note(run,
                        "%llu tar entries skipped (directories, links, or no key.extension name, "
                        "as WebDataset does)",
                        (unsigned long long)skipped_files);
    exit_code = ingest_run_finish(run);
    run = NULL;
cleanup_run:
    ingest_run_abort(run);
cleanup_plan:
    return exit_code;
}

int dsc_cmd_ingest_webdataset(int argc, char **argv) {
    static const struct option options[] = {{"field", required_argument, NULL, 2001},
                                            {NULL, 0, NULL, 0}};
    static const ingest_form_t form = {CMD,        INGEST_OPT_ALL, options,
                                       print_help, wds_option,     wds_run};
    plan_t *plan = calloc(1, sizeof *plan);
    if (plan == NULL)
        return dsc_cli_fail(CMD, "%s", dsc_strerror(DSC_ENOMEM));
    int exit_code = ingest_main(&form, plan, argc, argv);
    free(plan);
    return exit_code;
}
