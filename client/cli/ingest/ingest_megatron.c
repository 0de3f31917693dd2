/* dscache ingest megatron: a Megatron-LM / NeMo indexed dataset (PREFIX.idx + PREFIX.bin) into a
 * dataset: one sample per document (a variable-length token field) or packed --seq-len windows. */
#include "dsc_sys.h"
#include "ingest_common.h"
#include "mmidx.h"

#include "dscache.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define CMD "ingest megatron"

static void print_help(void) {
    printf("usage: dscache ingest megatron -o OUT_DIR [--seq-len N] [--field NAME] [OPTIONS] "
           "PREFIX\n"
           "\n"
           "Reads a Megatron-LM / NeMo indexed dataset, PREFIX.idx (the MMIDIDX index: token\n"
           "dtype, sequence lengths and byte offsets, document boundaries) and PREFIX.bin (the\n"
           "tokens), and writes a dataset with one token field (default name \"tokens\", the\n"
           "index's dtype):\n"
           "  default        one sample per document: the tokens of its sequences, concatenated,\n"
           "                 as a variable-length field (e.g. tokens:u16[])\n"
           "  --seq-len N    the documents' tokens in order, cut into disjoint windows of N+1\n"
           "                 tokens (input and shifted target, as `ingest tokens`): a fixed field\n"
           "                 of shape [N+1]; the tail shorter than a window is dropped and\n"
           "                 reported\n"
           "      --field NAME   name of the token field (default tokens)\n"
           "\n"
           "The .idx is checked whole before anything is written: a header, counts or document\n"
           "index that do not add up, and a sequence that runs past the end of PREFIX.bin, are\n"
           "errors naming the file and the document; with --skip-bad such documents are skipped\n"
           "and counted. Bytes of PREFIX.bin that no sequence covers are an error too (a note\n"
           "with --skip-bad).\n"
           "\n" INGEST_COMMON_HELP "\n"
           "Prints a progress bar when stderr is a terminal and a one-line summary at the end.\n"
           "Exit codes: 0 done, 1 failed (input or I/O error), 2 bad arguments.\n");
}

typedef struct mapped {
    const uint8_t *data;
    size_t len;
} mapped_t;

static int map_file(const char *path, mapped_t *m) {
    m->data = NULL;
    m->len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return dsc_cli_fail(CMD, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0) {
        close(fd);
        return dsc_cli_fail(CMD, "%s: %s", path, strerror(errno));
    }
    m->len = (size_t)st.st_size;
    if (m->len > 0) {
        void *p = mmap(NULL, m->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            return dsc_cli_fail(CMD, "%s: mmap: %s", path, strerror(errno));
        }
        madvise(p, m->len, MADV_SEQUENTIAL);
        m->data = p;
    }
    close(fd);
    return 0;
}

static void unmap_file(mapped_t *m) {
    if (m->data != NULL)
        munmap((void *)m->data, m->len);
    m->data = NULL;
}

typedef struct megatron_args {
    uint64_t seq_len;
    const char *field_name;
} megatron_args_t;

static int megatron_option(void *state, int id, const char *arg) {
    megatron_args_t *args = state;
    if (id == 2001)
        return dsc_cli_parse_u64(CMD, "--seq-len", arg, 1, 1u << 26, &args->seq_len) < 0
                   ? DSC_CLI_USAGE
                   : DSC_CLI_OK;
    args->field_name = arg; /* 2002: --field */
    return DSC_CLI_OK;
}

static int megatron_run(void *state, const ingest_options_t *options, int argc, char **argv) {
    const megatron_args_t *args = state;
    ingest_options_t opt = *options;
    uint64_t seq_len = args->seq_len;
    const char *field_name = args->field_name;
    if (argc != 1)
        return dsc_cli_usage(CMD, "expected one PREFIX (of PREFIX.idx and PREFIX.bin)");
    int checked = ingest_options_check(CMD, &opt);
    if (checked != DSC_CLI_OK)
        return checked;
    const char *prefix = argv[0];
    char idx_path[4096], bin_path[4096];
    snprintf(idx_path, sizeof idx_path, "%s.idx", prefix);
    snprintf(bin_path, sizeof bin_path, "%s.bin", prefix);

    int exit_code = DSC_CLI_FAIL;
    mapped_t idx_map = {0};
    /* The .bin is read with pread into bounded buffers (a document at most --max-sample-size, a
     * window), never mapped: its pages would count in the process's memory. */
    struct {
        int fd;
        size_t len;
    } bin_map = {-1, 0};
    ingest_run_t *run = NULL;
    uint8_t *scratch = NULL;
    size_t scratch_cap = 0;
    if (map_file(idx_path, &idx_map) != 0)
        goto cleanup;
    struct stat bin_st;
    bin_map.fd = open(bin_path, O_RDONLY | O_CLOEXEC);
    if (bin_map.fd < 0 || fstat(bin_map.fd, &bin_st) != 0) {
        dsc_cli_fail(CMD, "%s: %s", bin_path, strerror(errno));
        goto cleanup;
    }
    bin_map.len = (size_t)bin_st.st_size;
    dsc_mmidx_t idx;
    int rc = dsc_mmidx_parse(idx_map.data, idx_map.len, &idx);
    if (rc < 0) {
        dsc_cli_fail(CMD, "%s: %s (%s)", idx_path, idx.problem, dsc_strerror(rc));
        goto cleanup;
    }
    if (idx.documents == 0) {
        dsc_cli_fail(CMD, "%s: the index holds no document", idx_path);
        goto cleanup;
    }
    /* the sizes the index promises against the .bin, before anything is written */
    uint64_t covered_end = 0, past_end = 0;
    for (uint64_t s = 0; s < idx.sequences; s++) {
        uint64_t off, bytes;
        if (dsc_mmidx_sequence(&idx, s, bin_map.len, &off, &bytes) < 0) {
            past_end++;
            continue;
        }
        if (off + bytes > covered_end)
            covered_end = off + bytes;
    }

    if (past_end > 0 && !opt.skip_bad) { /* name the first bad document before writing */
        for (uint64_t d = 0; d < idx.documents; d++) {
            uint64_t first, count, off, bytes;
            dsc_mmidx_document(&idx, d, &first, &count);
            for (uint64_t s = first; s < first + count; s++)
                if (dsc_mmidx_sequence(&idx, s, bin_map.len, &off, &bytes) < 0) {
                    dsc_cli_fail(CMD,
                                 "%s: document %llu: sequence %llu runs past the end of %s (%zu "
                                 "bytes): the index and the data disagree (%llu sequences do; "
                                 "--skip-bad skips their documents)",
                                 idx_path, (unsigned long long)d, (unsigned long long)s, bin_path,
                                 bin_map.len, (unsigned long long)past_end);
                    goto cleanup;
                }
        }
    }
    ingest_field_t field;
    memset(&field, 0, sizeof field);
    snprintf(field.name, sizeof field.name, "%s", field_name);
    field.dtype = idx.dtype;
    field.ndim = 1;
    field.dims[0] = seq_len ? seq_len + 1 : 0;
    /* meta: the source and its layout, e.g. {"source": "megatron", "documents": 1000} */
    char meta[256];
    if (seq_len)
        snprintf(meta, sizeof meta,
                 "{\"source\": \"megatron\", \"documents\": %llu, \"seq_len\": %llu}",
                 (unsigned long long)idx.documents, (unsigned long long)seq_len);
    else
        snprintf(meta, sizeof meta, "{\"source\": \"megatron\", \"documents\": %llu}",
                 (unsigned long long)idx.documents);
    if (ingest_run_begin(CMD, &opt, &field, 1, meta, bin_map.len, &run) != 0)
        goto cleanup;
    if (covered_end < bin_map.len && past_end == 0) {
        if (!opt.skip_bad) {
            dsc_cli_fail(CMD,
                         "%s: %llu bytes after the end of the last sequence of %s (the index "
                         "and the data disagree; --skip-bad ingests what the index covers)",
                         bin_path, (unsigned long long)(bin_map.len - covered_end), idx_path);
            goto cleanup;
        }
        ingest_run_note(run, "%s: %llu bytes after the last sequence were not ingested", bin_path,
                        (unsigned long long)(bin_map.len - covered_end));
    }
    uint64_t window_bytes = seq_len ? (seq_len + 1) * idx.item_bytes : 0;
    if (window_bytes > opt.max_sample) {
        dsc_cli_fail(CMD,
                     "--seq-len %llu: a window of %llu bytes, over the %llu-byte limit of a "
                     "sample (--max-sample-size)",
                     (unsigned long long)seq_len, (unsigned long long)window_bytes,
                     (unsigned long long)opt.max_sample);
        goto cleanup;
    }
    uint64_t window_used = 0, done_bytes = 0;
    if (seq_len) {
        scratch = malloc((size_t)window_bytes);
        scratch_cap = (size_t)window_bytes;
        if (scratch == NULL) {
            dsc_cli_fail(CMD, "%s", dsc_strerror(DSC_ENOMEM));
            goto cleanup;
        }
    }
    for (uint64_t d = 0; d < idx.documents; d++) {
        uint64_t first, count, doc_bytes = 0;
        dsc_mmidx_document(&idx, d, &first, &count);
        int bad = 0;
        for (uint64_t s = first; s < first + count; s++) {
            uint64_t off, bytes;
            if (dsc_mmidx_sequence(&idx, s, bin_map.len, &off, &bytes) < 0) {
                char who[64];
                snprintf(who, sizeof who, "document %llu", (unsigned long long)d);
                if (ingest_run_bad(run, idx_path, who, 1,
                                   "sequence %llu runs past the end of %s (%zu bytes): the index "
                                   "and the data disagree",
                                   (unsigned long long)s, bin_path, bin_map.len) != 0)
                    goto cleanup;
                bad = 1;
                break;
            }
            doc_bytes += bytes;
        }
        if (bad) {
            continue;
        }
        if (seq_len == 0 && doc_bytes > opt.max_sample) { /* the index's sizes, before reading */
            char who[64];
            snprintf(who, sizeof who, "document %llu", (unsigned long long)d);
            if (ingest_run_bad(run, idx_path, who, 1,
                               "%llu sequences of %llu bytes in all (as the index declares), over "
                               "the %llu-byte limit of a sample (--max-sample-size); not read",
                               (unsigned long long)count, (unsigned long long)doc_bytes,
                               (unsigned long long)opt.max_sample) != 0)
                goto cleanup;
            continue;
        }
        if (seq_len == 0) {
            ingest_value_t value;
            uint64_t off, bytes;
            {
                if (doc_bytes > scratch_cap) {
                    uint8_t *grown = realloc(scratch, (size_t)doc_bytes);
                    if (grown == NULL) {
                        dsc_cli_fail(CMD, "%s", dsc_strerror(DSC_ENOMEM));
                        goto cleanup;
                    }
                    scratch = grown;
                    scratch_cap = (size_t)doc_bytes;
                }
                uint64_t at = 0;
                for (uint64_t s = first; s < first + count; s++) {
                    dsc_mmidx_sequence(&idx, s, bin_map.len, &off, &bytes);
                    if ((rc = dsc_pread_full(bin_map.fd, scratch + at, bytes, off)) < 0) {
                        dsc_cli_fail(CMD, "%s: read: %s", bin_path, dsc_strerror(rc));
                        goto cleanup;
                    }
                    at += bytes;
                }
                value.data = scratch;
                value.bytes = doc_bytes;
            }
            if (ingest_run_add(run, &value) != 0)
                goto cleanup;
        } else {
            for (uint64_t s = first; s < first + count; s++) {
                uint64_t off, bytes;
                dsc_mmidx_sequence(&idx, s, bin_map.len, &off, &bytes);
                while (bytes > 0) {
                    uint64_t take = window_bytes - window_used;
                    if (take > bytes)
                        take = bytes;
                    if ((rc = dsc_pread_full(bin_map.fd, scratch + window_used, take, off)) < 0) {
                        dsc_cli_fail(CMD, "%s: read: %s", bin_path, dsc_strerror(rc));
                        goto cleanup;
                    }
                    window_used += take;
                    off += take;
                    bytes -= take;
                    if (window_used == window_bytes) {
                        ingest_value_t value = {scratch, window_bytes};
                        if (ingest_run_add(run, &value) != 0)
                            goto cleanup;
                        window_used = 0;
                    }
                }
            }
        }
        done_bytes += doc_bytes;
        ingest_run_progress(run, done_bytes);
    }
    if (seq_len && window_used > 0)
        ingest_run_note(run, "dropped the last %llu tokens (shorter than a window of %llu)",
                        (unsigned long long)(window_used / idx.item_bytes),
                        (unsigned long long)(seq_len + 1));
    exit_code = ingest_run_finish(run);
    run = NULL;

cleanup:
    ingest_run_abort(run);
    free(scratch);
    unmap_file(&idx_map);
    if (bin_map.fd >= 0)
        close(bin_map.fd);
    return exit_code;
}

int dsc_cmd_ingest_megatron(int argc, char **argv) {
    static const struct option options[] = {{"seq-len", required_argument, NULL, 2001},
                                            {"field", required_argument, NULL, 2002},
                                            {NULL, 0, NULL, 0}};
    static const ingest_form_t form = {CMD,        INGEST_OPT_ALL,  options,
                                       print_help, megatron_option, megatron_run};
    megatron_args_t args = {0, "tokens"};
    return ingest_main(&form, &args, argc, argv);
}
