/* dscache get: fetch one shard (or a chunk range) from a server with pipelined GETs, verify and
 * decode every chunk, and write the decoded sample bytes to a file. */
#include "cli.h"

#include "conn.h"
#include "manifest.h"
#include "protocol.h"
#include "shard.h"
#include "util.h"

#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CMD "get"
#define GET_DEPTH 8

static void print_help(void) {
    printf("usage: dscache get --server HOST:PORT --dataset NAME --shard ID -o FILE\n"
           "                   [--chunks FIRST:COUNT]\n"
           "\n"
           "Fetches the chunks of one shard (all of them, or COUNT chunks from FIRST) with\n"
           "pipelined GET requests, verifies both checksums of every chunk and decompresses it,\n"
           "and writes the DECODED SAMPLE BYTES in chunk order to FILE: the raw field-major\n"
           "chunk contents (see proto/FORMAT.md), not the shard file itself; for a dataset with\n"
           "variable-length fields each chunk's offsets and values too, its layout checked. The\n"
           "same shard ingested raw or lz4 gives the same bytes. Every answer is checked as the "
           "loader\n"
           "checks it (opcode, request id, the chunk's place and sample count against the\n"
           "manifest, lengths, checksums); a damaged answer fails the command, FILE untouched.\n"
           "\n"
           "  --server HOST:PORT     the dscached data port\n"
           "  --dataset NAME         dataset name\n"
           "  --shard ID             shard id (0-based)\n"
           "  --chunks FIRST:COUNT   only these chunks (default: every chunk of the shard)\n"
           "  --timeout SECONDS      give up when the server is silent that long (default 30)\n"
           "  -o, --output FILE      output file (written via FILE.tmp + rename)\n"
           "  -h, --help             this text\n");
}

static const struct option long_options[] = {
    DSC_CLI_TARGET_OPTIONS,
    {"shard", required_argument, NULL, 'i'},
    {"chunks", required_argument, NULL, 'c'},
    {"output", required_argument, NULL, 'o'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static int fetch_manifest(dsc_conn_t *conn, const char *dataset, dsc_manifest_t **out) {
    uint8_t body[DSC_MAX_NAME + 8];
    int n = dsc_name_req_encode(dataset, body, sizeof body);
    if (n < 0)
        return n;
    uint8_t *resp = NULL;
    size_t len = 0;
    int rc = dsc_conn_call(conn, DSC_OP_MANIFEST, body, (size_t)n, &resp, &len);
    if (rc == 0)
        rc = dsc_manifest_parse((const char *)resp, len, out);
    free(resp);
    return rc;
}

/* What the answers must match: the shard's manifest entry and the chunks asked for. */
typedef struct get_expect {
    const dsc_manifest_shard_t *shard;
    uint32_t first, count; /* chunks [first, first + count), request id i asks for first + i */
    uint32_t sent;         /* requests sent so far (ids 0 .. sent - 1) */
    const dsc_schema_t *schema;
    uint8_t *answered; /* answered[i]: request i has had its answer */
    uint64_t written;  /* variable fields: bytes written so far (chunks arrive in order) */
} get_expect_t;

/* Receives one GET answer for chunk (first + request_id), checks it against the request and the
 * manifest as the loader does (opcode, response flag, an outstanding request id, one chunk, its
 * first sample and sample count, its decoded length, both checksums), decodes it and writes it
 * at its place in fd. */
static int receive_one(const char *server, dsc_conn_t *conn, int fd, get_expect_t *ex,
                       uint64_t chunk_raw, uint8_t *raw, size_t raw_cap) {
    dsc_frame_header_t h;
    int rc = dsc_conn_recv_header(conn, &h);
    if (rc < 0)
        return dsc_cli_fail(CMD, "%s: %s", server, dsc_strerror(rc));
    uint64_t index = h.request_id;
    if (h.opcode != DSC_OP_GET || !(h.flags & DSC_FLAG_RESPONSE))
        return dsc_cli_fail(CMD, "%s: unexpected answer (opcode %u, flags 0x%x) to a GET", server,
                            h.opcode, h.flags);
    if (index >= ex->sent || ex->answered[index])
        return dsc_cli_fail(CMD, "%s: answer for request id %llu, which is not outstanding", server,
                            (unsigned long long)index);
    ex->answered[index] = 1;
    uint8_t *body = malloc(h.body_len ? h.body_len : 1);
    if (body == NULL)
        return dsc_cli_fail(CMD, "out of memory");
    if ((rc = dsc_conn_recv_body(conn, body, h.body_len)) < 0) {
        free(body);
        return dsc_cli_fail(CMD, "%s: %s", server, dsc_strerror(rc));
    }
    int exit_code = DSC_CLI_FAIL;
    uint32_t chunk = ex->first + (uint32_t)index;
    if (h.status != DSC_STATUS_OK) {
        dsc_cli_fail(CMD, "chunk %u: server answered %s: %.*s", chunk, dsc_status_name(h.status),
                     (int)(h.body_len > DSC_ERROR_MAX_MESSAGE ? DSC_ERROR_MAX_MESSAGE : h.body_len),
                     (const char *)body);
        goto done;
    }
    dsc_get_resp_t resp;
    dsc_chunk_entry_t entry;
    const uint8_t *data;
    if (dsc_get_resp_decode(body, h.body_len, &resp) < 0 || resp.chunk_count != 1 ||
        dsc_get_resp_chunk(&resp, 0, &entry, &data) < 0) {
        dsc_cli_fail(CMD, "malformed answer for request %llu", (unsigned long long)index);
        goto done;
    }
    /* The chunk's place in the shard and its size follow from the manifest: an answer carrying
     * another chunk (or another shard's) does not fit. */
    uint64_t first_sample = (uint64_t)chunk * ex->shard->chunk_samples;
    uint64_t want_samples =
        ex->shard->samples > first_sample ? ex->shard->samples - first_sample : 0;
    if (want_samples > ex->shard->chunk_samples)
        want_samples = ex->shard->chunk_samples;
    uint64_t least = want_samples ? dsc_schema_chunk_min(ex->schema, want_samples) : 1;
    int size_ok = ex->schema->var_count ? entry.raw_len >= least : entry.raw_len == least;
    if (entry.first_sample != first_sample || entry.sample_count != want_samples || !size_ok ||
        entry.raw_len > raw_cap) {
        dsc_cli_fail(CMD,
                     "shard %u chunk %u: the answer holds samples %llu..+%u (%u bytes), the "
                     "manifest says %llu..+%llu",
                     ex->shard->id, chunk, (unsigned long long)entry.first_sample,
                     entry.sample_count, entry.raw_len, (unsigned long long)first_sample,
                     (unsigned long long)want_samples);
        goto done;
    }
    rc = dsc_chunk_decode(&entry, data, raw, raw_cap);
    if (rc < 0) {
        dsc_cli_fail(CMD, "chunk %u: %s", chunk, dsc_strerror(rc));
        goto done;
    }
    dsc_chunk_layout_t layout;
    rc = dsc_chunk_layout(ex->schema, entry.sample_count, raw, entry.raw_len, &layout);
    if (rc < 0) {
        dsc_cli_fail(CMD, "shard %u chunk %u: decoded layout: %s", ex->shard->id, chunk,
                     dsc_strerror(rc));
        goto done;
    }
    /* Fixed fields: every chunk has its place; variable ones: one request at a time, so the
     * answers come in order and follow each other. */
    off_t at = ex->schema->var_count ? (off_t)ex->written : (off_t)(index * chunk_raw);
    if (pwrite(fd, raw, entry.raw_len, at) != (ssize_t)entry.raw_len) {
        dsc_cli_fail(CMD, "write: %s", strerror(errno));
        goto done;
    }
    ex->written += entry.raw_len;
    exit_code = DSC_CLI_OK;
done:
    free(body);
    return exit_code;
}

int dsc_cmd_get(int argc, char **argv) {
    dsc_cli_target_t target = {.server = NULL, .dataset = NULL};
    const char *output = NULL, *chunks = NULL;
    uint64_t shard = UINT64_MAX;
    optind = 1;
    int opt;
    while ((opt = getopt_long(argc, argv, "o:h", long_options, NULL)) != -1) {
        if (dsc_cli_target_option(&target, opt, optarg))
            continue;
        switch (opt) {
        case 'c':
            chunks = optarg;
            break;
        case 'o':
            output = optarg;
            break;
        case 'i':
            if (dsc_cli_parse_u64(CMD, "--shard", optarg, 0, UINT32_MAX - 1, &shard) < 0)
                return DSC_CLI_USAGE;
            break;
        case 'h':
            print_help();
            return DSC_CLI_OK;
        default:
            return dsc_cli_usage(CMD, "unknown option");
        }
    }
    if (optind < argc)
        return dsc_cli_usage(CMD, "unexpected argument '%s'", argv[optind]);
    const char *server = target.server, *dataset = target.dataset;
    if (!server || !dataset || !output || shard == UINT64_MAX)
        return dsc_cli_usage(CMD, "--server, --dataset, --shard and -o are required");
    unsigned long long cfirst = 0, ccount = 0;
    int have_range = 0;
    if (chunks) {
        char tail;
        if (sscanf(chunks, "%llu:%llu%c", &cfirst, &ccount, &tail) != 2 || ccount == 0)
            return dsc_cli_usage(CMD, "--chunks '%s': expected FIRST:COUNT, COUNT >= 1", chunks);
        have_range = 1;
    }

    uint32_t timeout_ms;
    if (dsc_cli_timeout_ms(CMD, &target, &timeout_ms) < 0)
        return DSC_CLI_USAGE;

    int exit_code = DSC_CLI_FAIL, fd = -1;
    dsc_conn_t *conn = NULL;
    dsc_manifest_t *m = NULL;
    uint8_t *raw = NULL, *answered = NULL;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", output);
    if (dsc_cli_connect(CMD, server, timeout_ms, &conn) != DSC_CLI_OK)
        goto done;
    int rc;
    if ((rc = fetch_manifest(conn, dataset, &m)) < 0) {
        exit_code = dsc_cli_fail(CMD, "dataset %s: %s%s%s", dataset, dsc_strerror(rc),
                                 *dsc_conn_last_error(conn) ? ": " : "", dsc_conn_last_error(conn));
        goto done;
    }
    if (shard >= m->shard_count) {
        exit_code = dsc_cli_fail(CMD, "dataset %s has %u shards: no shard %llu", dataset,
                                 m->shard_count, (unsigned long long)shard);
        goto done;
    }
    const dsc_manifest_shard_t *meta = &m->shards[shard];
    if (!have_range) {
        cfirst = 0;
        ccount = meta->chunks;
    }
    if (cfirst >= meta->chunks || ccount > meta->chunks - cfirst) {
        exit_code = dsc_cli_fail(CMD, "shard %llu has %u chunks: --chunks %llu:%llu is outside",
                                 (unsigned long long)shard, meta->chunks, cfirst, ccount);
        goto done;
    }
    /* The largest decoded chunk (exact without variable fields, from the size statistics with). */
    uint64_t chunk_raw = dsc_manifest_chunk_bound(m, meta->chunk_samples);
    uint32_t depth = m->schema.var_count ? 1 : GET_DEPTH;
    if (chunk_raw == 0 || chunk_raw > DSC_CHUNK_MAX_RAW) {
        exit_code = dsc_cli_fail(CMD, "manifest: chunk size %llu out of range",
                                 (unsigned long long)chunk_raw);
        goto done;
    }
    raw = malloc(chunk_raw);
    answered = calloc(ccount, 1);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (raw == NULL || answered == NULL || fd < 0) {
        exit_code =
            dsc_cli_fail(CMD, "%s: %s", raw ? tmp : "buffer", strerror(raw ? errno : ENOMEM));
        goto done;
    }
    uint32_t sent = 0, got = 0, count = (uint32_t)ccount;
    get_expect_t ex = {.shard = meta,
                       .first = (uint32_t)cfirst,
                       .count = count,
                       .schema = &m->schema,
                       .answered = answered};
    while (got < count) {
        while (sent < count && sent - got < depth) {
            dsc_get_req_t req = {.dataset = {dataset, (uint16_t)strlen(dataset)},
                                 .shard_id = (uint32_t)shard,
                                 .first_chunk = (uint32_t)cfirst + sent,
                                 .chunk_count = 1};
            uint8_t body[128];
            int n = dsc_get_req_encode(&req, body, sizeof body);
            if (n < 0 || (rc = dsc_conn_send(conn, DSC_OP_GET, sent, body, (size_t)n)) < 0) {
                exit_code = dsc_cli_fail(CMD, "%s: %s", server, dsc_strerror(n < 0 ? n : rc));
                goto done;
            }
            sent++;
            ex.sent = sent;
        }
        if (receive_one(server, conn, fd, &ex, chunk_raw, raw, chunk_raw) != DSC_CLI_OK)
            goto done;
        got++;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        fd = -1;
        exit_code = dsc_cli_fail(CMD, "%s: %s", tmp, strerror(errno));
        goto done;
    }
    fd = -1;
    if (rename(tmp, output) != 0) {
        exit_code = dsc_cli_fail(CMD, "%s: %s", output, strerror(errno));
        goto done;
    }
    exit_code = DSC_CLI_OK;
done:
    if (fd >= 0)
        close(fd);
    if (exit_code != DSC_CLI_OK)
        unlink(tmp);
    free(raw);
    free(answered);
    dsc_manifest_free(m);
    dsc_conn_close(conn);
    return exit_code;
}
