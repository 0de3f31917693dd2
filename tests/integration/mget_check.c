/* MGET probes for tests/integration/test_mget.sh, against a real dscached:
 *   compare ADDR DATASET N SEED [fallback]   N chunks drawn at random (seeded) from every shard,
 *                  duplicates included, plus a shard and a chunk the dataset does not have,
 *                  fetched by one dsc__conn_mget and compared, entry and bytes, with a single GET
 *                  of each; "fallback" clears the granted MGET feature first, as an older server
 *                  would have (the call then sends GETs). Prints one line; exits 1 on a mismatch.
 *   hostile ADDR DATASET   malformed and hostile MGET bodies on one connection (every
 *                  truncation, trailing bytes, zero / too many / miscounted entries, unknown
 *                  flags, unknown dataset, another version, out-of-range and duplicate entries,
 *                  an answer over the frame limit), each answered cleanly with the connection
 *                  still serving a PING after it; one frame sent a byte at a time; the client
 *                  call splitting an over-limit answer. One line per case; exits 1 on any
 *                  unexpected outcome.
 *   source ADDR DATASET N SEED [loop]   the same through the data-source table
 *                  (dsc__source_mget over the TCP source: its MGET, or with "loop" the
 *                  single-chunk submit / complete path the RDMA source and the fallback files
 *                  take), chunk entries checked against the manifest, bytes against single GETs.
 *   damaged ADDR DATASET SHARD CHUNK   one MGET of chunks CHUNK-1, CHUNK, CHUNK+1 of SHARD,
 *                  chunk 0 of shard 0 and chunk 0 of shard 2; prints the entries' statuses.
 *   token ADDR TOKEN|- DATASET   one dsc__conn_mget of chunk 0 of shards 0 and 1 under a
 *                  credential (or anonymously); prints "OK n" or "ERR <name> <message>". */
#include "conn.h"
#include "credential.h"
#include "manifest.h"
#include "mget.h"
#include "multiget.h"
#include "protocol.h"
#include "range.h"
#include "shard.h"
#include "source_mget.h"
#include "sources.h"
#include "test_frames.h"
#include "wire.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TIMEOUT_MS 20000

static int die(const char *what, int rc) {
    fprintf(stderr, "mget_check: %s: %s\n", what, rc < 0 ? dsc_strerror(rc) : "failed");
    return 1;
}

static const char *ename(int rc) {
    const char *name = dsc_err_name(rc);
    return strncmp(name, "DSC_", 4) == 0 ? name + 4 : name;
}

static void *alloc_malloc(void *arg, uint32_t index, size_t len) {
    (void)arg;
    (void)index;
    return malloc(len ? len : 1);
}

/* Field by field: the struct has padding. */
static int entry_eq(const dsc_chunk_entry_t *a, const dsc_chunk_entry_t *b) {
    return a->offset == b->offset && a->first_sample == b->first_sample &&
           a->stored_len == b->stored_len && a->raw_len == b->raw_len &&
           a->sample_count == b->sample_count && a->codec == b->codec &&
           a->stored_checksum == b->stored_checksum && a->raw_checksum == b->raw_checksum;
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int fetch_manifest(dsc_conn_t *c, const char *ds, dsc_manifest_t **m) {
    uint8_t req[DSC_MAX_NAME + 8];
    int n = dsc_name_req_encode(ds, req, sizeof req);
    if (n < 0)
        return n;
    uint8_t *body = NULL;
    size_t len = 0;
    int rc = dsc_conn_call(c, DSC_OP_MANIFEST, req, (size_t)n, &body, &len);
    if (rc == 0)
        rc = dsc_manifest_parse((const char *)body, len, m);
    free(body);
    return rc;
}

/* One chunk by a single GET (the reference): its entry and malloc'd stored bytes. */
static int single_get(dsc_conn_t *c, const char *ds, uint32_t shard, uint32_t chunk,
                      dsc_chunk_entry_t *e, uint8_t **data) {
    dsc_get_req_t req = {.dataset = {ds, (uint16_t)strlen(ds)},
                         .shard_id = shard,
                         .first_chunk = chunk,
                         .chunk_count = 1};
    uint8_t body[128];
    int n = dsc_get_req_encode(&req, body, sizeof body);
    if (n < 0)
        return n;
    uint8_t *resp = NULL;
    size_t len = 0;
    int rc = dsc_conn_call(c, DSC_OP_GET, body, (size_t)n, &resp, &len);
    if (rc < 0)
        return rc;
    dsc_get_resp_t r;
    const uint8_t *p;
    if (dsc_get_resp_decode(resp, len, &r) < 0 || dsc_get_resp_chunk(&r, 0, e, &p) < 0) {
        free(resp);
        return DSC_EPROTO;
    }
    *data = malloc(e->stored_len ? e->stored_len : 1);
    memcpy(*data, p, e->stored_len);
    free(resp);
    return 0;
}

static int cmd_compare(int argc, char **argv) {
    if (argc < 6)
        return die("usage: compare ADDR DATASET N SEED [fallback]", 0);
    const char *ds = argv[3];
    uint32_t n = (uint32_t)strtoul(argv[4], NULL, 10);
    uint64_t seed = strtoull(argv[5], NULL, 10) | 1;
    int fallback = argc > 6 && strcmp(argv[6], "fallback") == 0;
    dsc_conn_t *c = NULL;
    int rc = dsc_conn_open_addr(argv[2], TIMEOUT_MS, 0, &c);
    if (rc < 0)
        return die("connect", rc);
    if (!(dsc_conn_info(c)->features & DSC_FEATURE_MGET))
        return die("the server did not grant DSC_FEATURE_MGET", 0);
    if (fallback) /* what an older server answers: the bit not granted */
        ((dsc_conn_info_t *)dsc_conn_info(c))->features &= ~DSC_FEATURE_MGET;
    dsc_manifest_t *m = NULL;
    if ((rc = fetch_manifest(c, ds, &m)) < 0)
        return die("manifest", rc);
    uint32_t total = n + 2;
    dsc_mget_chunk_t *chunks = calloc(total, sizeof *chunks);
    uint32_t shards_hit = 0;
    uint8_t *seen = calloc(m->shard_count, 1);
    for (uint32_t i = 0; i < n; i++) {
        if (i > 0 && rng_next(&seed) % 8 == 0) { /* a duplicate of an earlier entry */
            chunks[i] = chunks[rng_next(&seed) % i];
            continue;
        }
        uint32_t s = (uint32_t)(rng_next(&seed) % m->shard_count);
        chunks[i].shard = s;
        chunks[i].chunk = (uint32_t)(rng_next(&seed) % m->shards[s].chunks);
    }
    for (uint32_t i = 0; i < n; i++)
        if (!seen[chunks[i].shard]++)
            shards_hit++;
    chunks[n] = (dsc_mget_chunk_t){.shard = m->shard_count + 5, .chunk = 0};
    chunks[n + 1] = (dsc_mget_chunk_t){.shard = 0, .chunk = m->shards[0].chunks + 3};
    uint64_t wire = 0;
    rc = dsc__conn_mget(c, ds, m->version, chunks, total, alloc_malloc, NULL, &wire);
    if (rc < 0)
        return die(dsc_conn_last_error(c)[0] ? dsc_conn_last_error(c) : "mget", rc);
    int bad = 0;
    if (rc != (int)n) {
        fprintf(stderr, "mget: %d chunks OK, expected %u\n", rc, n);
        bad++;
    }
    if (chunks[n].status != DSC_ENOTFOUND || chunks[n + 1].status != DSC_EBADREQ) {
        fprintf(stderr, "mget: missing shard gave %s, chunk beyond its shard %s\n",
                ename(chunks[n].status), ename(chunks[n + 1].status));
        bad++;
    }
    uint64_t bytes = 0;
    uint8_t *raw = malloc(DSC_CHUNK_MAX_RAW / 16);
    for (uint32_t i = 0; i < n; i++) {
        dsc_chunk_entry_t e;
        uint8_t *data = NULL;
        rc = single_get(c, ds, chunks[i].shard, chunks[i].chunk, &e, &data);
        if (rc < 0)
            return die("GET", rc);
        const dsc_mget_chunk_t *g = &chunks[i];
        if (g->status != 0 || !entry_eq(&g->entry, &e) ||
            memcmp(g->stored, data, e.stored_len) != 0 ||
            dsc_chunk_decode(&g->entry, g->stored, raw, DSC_CHUNK_MAX_RAW / 16) != (int)e.raw_len) {
            fprintf(stderr, "shard %u chunk %u: MGET (%s) differs from GET\n", g->shard, g->chunk,
                    ename(g->status));
            bad++;
        }
        bytes += e.stored_len;
        free(data);
    }
    if (wire != bytes) {
        fprintf(stderr, "wire bytes %llu, expected %llu\n", (unsigned long long)wire,
                (unsigned long long)bytes);
        bad++;
    }
    for (uint32_t i = 0; i < total; i++)
        free(chunks[i].stored);
    printf("%s of %u chunks from %u shards (+2 absent): %s, %llu bytes\n",
           fallback ? "GET fallback" : "MGET", n, shards_hit,
           bad ? "DIFFERENT from single GETs" : "identical to single GETs",
           (unsigned long long)bytes);
    free(raw);
    free(seen);
    free(chunks);
    dsc_manifest_free(m);
    dsc_conn_close(c);
    return bad ? 1 : 0;
}

static int cmd_source(int argc, char **argv) {
    if (argc < 6)
        return die("usage: source ADDR DATASET N SEED [loop]", 0);
    const char *ds = argv[3];
    uint32_t n = (uint32_t)strtoul(argv[4], NULL, 10);
    uint64_t seed = strtoull(argv[5], NULL, 10) | 1;
    int loop = argc > 6 && strcmp(argv[6], "loop") == 0;
    dsc_conn_t *ref = NULL;
    int rc = dsc_conn_open_addr(argv[2], TIMEOUT_MS, 0, &ref);
    if (rc < 0)
        return die("connect", rc);
    dsc_manifest_t *m = NULL;
    if ((rc = fetch_manifest(ref, ds, &m)) < 0)
        return die("manifest", rc);
    dsc_bufpool_t pool;
    dsc__bufpool_init(&pool, 16u << 20);
    dsc_transport_counters_t counters;
    memset(&counters, 0, sizeof counters);
    dsc_source_env_t env = {.pool = &pool,
                            .dataset = ds,
                            .timeout_ms = TIMEOUT_MS,
                            .manifest = m,
                            .counters = &counters};
    dsc_source_ops_t ops = dsc__source_tcp;
    if (loop)
        ops.mget = NULL;
    void *ep = NULL, *conn = NULL;
    uint64_t hash = 0;
    if ((rc = ops.endpoint_open(&env, argv[2], &ep)) < 0 ||
        (rc = ops.open(ep, 0, &conn, &hash)) < 0)
        return die("source open", rc);
    dsc_chunk_ent_t *ents = calloc(n, sizeof *ents);
    dsc_chunk_ent_t **ptrs = calloc(n, sizeof *ptrs);
    int *status = calloc(n, sizeof *status);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t sh = (uint32_t)(rng_next(&seed) % m->shard_count);
        const dsc_manifest_shard_t *ms = &m->shards[sh];
        uint32_t ch = (uint32_t)(rng_next(&seed) % ms->chunks);
        ents[i].shard = sh;
        ents[i].shard_chunk = ch;
        ents[i].samples = ch + 1 < ms->chunks
                              ? ms->chunk_samples
                              : (uint32_t)(ms->samples - (uint64_t)ch * ms->chunk_samples);
        ents[i].raw_len = dsc__chunk_raw_estimate(m, ents[i].samples);
        ptrs[i] = &ents[i];
    }
    int conn_bad = 0;
    uint64_t wire = 0;
    rc = dsc__source_mget(&ops, conn, ptrs, n, status, &conn_bad, &wire);
    int bad = rc != (int)n;
    if (bad)
        fprintf(stderr, "source mget: %d of %u chunks (%s)\n", rc, n, rc < 0 ? ename(rc) : "");
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < n && !bad; i++) {
        dsc_chunk_entry_t e;
        uint8_t *data = NULL;
        if ((rc = single_get(ref, ds, ents[i].shard, ents[i].shard_chunk, &e, &data)) < 0)
            return die("GET", rc);
        if (status[i] != 0 || !entry_eq(&ents[i].entry, &e) ||
            memcmp(ents[i].stored, data, e.stored_len) != 0) {
            fprintf(stderr, "shard %u chunk %u: differs from GET (%s)\n", ents[i].shard,
                    ents[i].shard_chunk, ename(status[i]));
            bad++;
        }
        bytes += e.stored_len;
        free(data);
    }
    if (!bad && wire != bytes) {
        fprintf(stderr, "wire %llu, expected %llu\n", (unsigned long long)wire,
                (unsigned long long)bytes);
        bad++;
    }
    printf("source %s: %u chunks %s\n", loop ? "loop of single requests" : "tcp MGET", n,
           bad ? "DIFFERENT from single GETs" : "identical to single GETs");
    for (uint32_t i = 0; i < n; i++)
        if (ents[i].stored != NULL)
            dsc__bufpool_put(&pool, ents[i].stored, ents[i].stored_cap);
    ops.close(conn);
    ops.endpoint_close(ep);
    dsc__bufpool_close(&pool);
    free(ents);
    free(ptrs);
    free(status);
    dsc_manifest_free(m);
    dsc_conn_close(ref);
    return bad ? 1 : 0;
}

/* ---- hostile ----------------------------------------------------------------------------- */

/* Sends one MGET body on c and receives the answer: returns its status (or a negative error),
 * with the body in *resp (malloc'd) when asked. */
static int mget_raw(dsc_conn_t *c, const uint8_t *body, size_t len, uint8_t **resp,
                    size_t *resp_len) {
    static uint64_t id = 1000;
    int rc = dsc_conn_send(c, DSC_OP_MGET, ++id, body, len);
    if (rc < 0)
        return rc;
    dsc_frame_header_t h;
    if ((rc = dsc_conn_recv_header(c, &h)) < 0)
        return rc;
    if (h.request_id != id || h.opcode != DSC_OP_MGET)
        return DSC_EPROTO;
    uint8_t *b = malloc(h.body_len + 1);
    if ((rc = dsc_conn_recv_body(c, b, h.body_len)) < 0) {
        free(b);
        return rc;
    }
    if (resp != NULL) {
        *resp = b;
        *resp_len = h.body_len;
    } else {
        free(b);
    }
    return (int)h.status;
}

/* The connection still answers: a PING echoes. */
static int ping_ok(dsc_conn_t *c) {
    uint8_t *resp = NULL;
    size_t len = 0;
    int rc = dsc_conn_call(c, DSC_OP_PING, "ping", 4, &resp, &len);
    int ok = rc == 0 && len == 4 && memcmp(resp, "ping", 4) == 0;
    free(resp);
    return ok;
}

static int encode(const char *ds, uint32_t flags, uint64_t version, const dsc_mget_item_t *items,
                  uint32_t count, uint8_t *out, size_t cap) {
    dsc_mget_req_t req = {.dataset = {ds, (uint16_t)strlen(ds)},
                          .flags = flags,
                          .version = version,
                          .count = count,
                          .items = items};
    return dsc_mget_req_encode(&req, out, cap);
}

static int cmd_hostile(int argc, char **argv) {
    if (argc < 4)
        return die("usage: hostile ADDR DATASET", 0);
    const char *addr = argv[2], *ds = argv[3];
    dsc_conn_t *c = NULL;
    int rc = dsc_conn_open_addr(addr, TIMEOUT_MS, 0, &c);
    if (rc < 0)
        return die("connect", rc);
    dsc_manifest_t *m = NULL;
    if ((rc = fetch_manifest(c, ds, &m)) < 0)
        return die("manifest", rc);
    if (m->shard_count < 2)
        return die("the dataset needs two shards at least", 0);
    int fails = 0, st = 0;
#define EXPECT(name, cond)                                                                         \
    do {                                                                                           \
        int ok_ = (cond) && ping_ok(c);                                                            \
        printf("%-48s %s (status %d)\n", name, ok_ ? "ok" : "UNEXPECTED", st);                     \
        fails += !ok_;                                                                             \
    } while (0)
    static uint8_t body[DSC_MGET_MAX_REQ_BODY + 64];
    static dsc_mget_item_t items[DSC_MGET_MAX_ENTRIES + 1];
    dsc_mget_item_t three[3] = {{0, 0}, {1, 0}, {0, 1}};

    /* Every truncation of a valid body (version included), and one byte too many. */
    int n = encode(ds, DSC_GET_FLAG_VERSION, m->version, three, 3, body, sizeof body);
    if (n < 0)
        return die("encode", n);
    int trunc_bad = 0;
    for (int cut = 0; cut < n; cut++) {
        st = mget_raw(c, body, (size_t)cut, NULL, NULL);
        trunc_bad += st != DSC_STATUS_BAD_REQUEST;
    }
    st = trunc_bad;
    EXPECT("every truncation: BAD_REQUEST", trunc_bad == 0);
    body[n] = 0;
    st = mget_raw(c, body, (size_t)n + 1, NULL, NULL);
    EXPECT("a trailing byte: BAD_REQUEST", st == DSC_STATUS_BAD_REQUEST);
    /* Every single-byte change of the valid body: a clean answer each time. */
    int flip_bad = 0;
    for (int i = 0; i < n; i++) {
        uint8_t keep = body[i];
        body[i] ^= 0x5A;
        st = mget_raw(c, body, (size_t)n, NULL, NULL);
        flip_bad += st < 0;
        body[i] = keep;
    }
    st = flip_bad;
    EXPECT("every byte changed: answered", flip_bad == 0);

    /* Counts: zero, one over the bound, more than the body holds. */
    n = encode(ds, 0, 0, three, 1, body, sizeof body);
    size_t count_at = 2 + strlen(ds) + 4;
    dsc_store_u32(body + count_at, 0);
    st = mget_raw(c, body, count_at + 4, NULL, NULL);
    EXPECT("zero entries: BAD_REQUEST", st == DSC_STATUS_BAD_REQUEST);
    for (uint32_t i = 0; i <= DSC_MGET_MAX_ENTRIES; i++)
        items[i] = (dsc_mget_item_t){0, 0};
    n = encode(ds, 0, 0, items, DSC_MGET_MAX_ENTRIES, body, sizeof body);
    dsc_store_u32(body + count_at, DSC_MGET_MAX_ENTRIES + 1);
    memset(body + n, 0, DSC_MGET_ITEM_SIZE);
    st = mget_raw(c, body, (size_t)n + DSC_MGET_ITEM_SIZE, NULL, NULL);
    EXPECT("4097 entries: BAD_REQUEST", st == DSC_STATUS_BAD_REQUEST);
    n = encode(ds, 0, 0, three, 1, body, sizeof body);
    dsc_store_u32(body + count_at, 0xFFFFFFFFu);
    st = mget_raw(c, body, (size_t)n, NULL, NULL);
    EXPECT("count 2^32-1 with one entry: BAD_REQUEST", st == DSC_STATUS_BAD_REQUEST);
    n = encode(ds, 0, 0, three, 1, body, sizeof body);
    dsc_store_u32(body + count_at - 4, 0x80);
    st = mget_raw(c, body, (size_t)n, NULL, NULL);
    EXPECT("unknown flag: BAD_REQUEST", st == DSC_STATUS_BAD_REQUEST);

    /* Datasets: unknown, another version. */
    n = encode("no-such-dataset", 0, 0, three, 3, body, sizeof body);
    st = mget_raw(c, body, (size_t)n, NULL, NULL);
    EXPECT("unknown dataset: NOT_FOUND", st == DSC_STATUS_NOT_FOUND);
    n = encode(ds, DSC_GET_FLAG_VERSION, m->version ^ 1, three, 3, body, sizeof body);
    st = mget_raw(c, body, (size_t)n, NULL, NULL);
    EXPECT("another dataset version: CHANGED", st == DSC_STATUS_CHANGED);

    /* Out-of-range and huge entries among good ones: each answered on its own. */
    dsc_mget_item_t mixed[6] = {{0, 0},
                                {0xFFFFFFFFu, 0},
                                {1, 0xFFFFFFFFu},
                                {m->shard_count, 0},
                                {0, m->shards[0].chunks},
                                {1, m->shards[1].chunks - 1}};
    n = encode(ds, 0, 0, mixed, 6, body, sizeof body);
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    st = mget_raw(c, body, (size_t)n, &resp, &resp_len);
    dsc_mget_resp_t r;
    int mixed_ok = st == DSC_STATUS_OK && dsc_mget_resp_decode(resp, resp_len, &r) == 0 &&
                   r.count == 6 && r.ok == 2 &&
                   dsc_mget_resp_record(&r, 0, NULL) == DSC_STATUS_OK &&
                   dsc_mget_resp_record(&r, 1, NULL) == DSC_STATUS_NOT_FOUND &&
                   dsc_mget_resp_record(&r, 2, NULL) == DSC_STATUS_BAD_REQUEST &&
                   dsc_mget_resp_record(&r, 3, NULL) == DSC_STATUS_NOT_FOUND &&
                   dsc_mget_resp_record(&r, 4, NULL) == DSC_STATUS_BAD_REQUEST &&
                   dsc_mget_resp_record(&r, 5, NULL) == DSC_STATUS_OK;
    free(resp);
    EXPECT("out-of-range entries: per-entry statuses", mixed_ok);

    /* Every entry absent: an OK answer without data. */
    dsc_mget_item_t absent[2] = {{0xFFFFFFF0u, 1}, {0, 0xFFFFFFF0u}};
    n = encode(ds, 0, 0, absent, 2, body, sizeof body);
    st = mget_raw(c, body, (size_t)n, &resp, &resp_len);
    int absent_ok = st == DSC_STATUS_OK && dsc_mget_resp_decode(resp, resp_len, &r) == 0 &&
                    r.ok == 0 && r.data_len == 0;
    free(resp);
    EXPECT("only absent entries: OK, no data", absent_ok);

    /* Duplicates: 64 times the same chunk, each answered with the same bytes. */
    for (uint32_t i = 0; i < 64; i++)
        items[i] = (dsc_mget_item_t){1, 0};
    n = encode(ds, 0, 0, items, 64, body, sizeof body);
    st = mget_raw(c, body, (size_t)n, &resp, &resp_len);
    int dup_ok = st == DSC_STATUS_OK && dsc_mget_resp_decode(resp, resp_len, &r) == 0 && r.ok == 64;
    if (dup_ok) {
        dsc_chunk_entry_t e0;
        dsc_mget_resp_record(&r, 0, &e0);
        dup_ok = r.data_len == 64ull * e0.stored_len;
        for (uint32_t i = 1; dup_ok && i < 64; i++)
            dup_ok = memcmp(r.data, r.data + (size_t)i * e0.stored_len, e0.stored_len) == 0;
    }
    free(resp);
    EXPECT("64 duplicates: 64 identical answers", dup_ok);

    /* An answer over the frame limit: the largest chunk, 4096 times, is refused TOO_LARGE when
     * it would pass 64 MiB (as a GET of too many chunks is). */
    uint32_t big_shard = 0;
    uint64_t big = 0;
    for (uint32_t s = 0; s < m->shard_count && s < 4; s++) {
        dsc_chunk_entry_t e;
        uint8_t *data = NULL;
        if (single_get(c, ds, s, 0, &e, &data) == 0 && e.stored_len > big) {
            big = e.stored_len;
            big_shard = s;
        }
        free(data);
    }
    if (big * DSC_MGET_MAX_ENTRIES + DSC_MGET_RESP_PREFIX(DSC_MGET_MAX_ENTRIES) >
        DSC_FRAME_MAX_BODY) {
        for (uint32_t i = 0; i < DSC_MGET_MAX_ENTRIES; i++)
            items[i] = (dsc_mget_item_t){big_shard, 0};
        n = encode(ds, 0, 0, items, DSC_MGET_MAX_ENTRIES, body, sizeof body);
        st = mget_raw(c, body, (size_t)n, NULL, NULL);
        EXPECT("answer over 64 MiB: TOO_LARGE", st == DSC_STATUS_TOO_LARGE);
        /* The client call splits it and gets every chunk. */
        dsc_mget_chunk_t *many = calloc(DSC_MGET_MAX_ENTRIES, sizeof *many);
        for (uint32_t i = 0; i < DSC_MGET_MAX_ENTRIES; i++)
            many[i] = (dsc_mget_chunk_t){.shard = big_shard, .chunk = 0};
        rc = dsc__conn_mget(c, ds, 0, many, DSC_MGET_MAX_ENTRIES, alloc_malloc, NULL, NULL);
        st = rc;
        int split_ok = rc == DSC_MGET_MAX_ENTRIES;
        for (uint32_t i = 0; i < DSC_MGET_MAX_ENTRIES; i++)
            free(many[i].stored);
        free(many);
        EXPECT("dsc__conn_mget splits it: every chunk", split_ok);
    } else {
        printf("%-48s skipped (chunks of %llu bytes cannot pass 64 MiB)\n",
               "answer over 64 MiB: TOO_LARGE", (unsigned long long)big);
    }

    /* A valid frame sent one byte per write, on a raw connection after HELLO. */
    int fd = raw_connect(addr);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    uint8_t frame[512];
    dsc_hello_req_t hello = {.min_version = 1, .max_version = 1, .client_name = {"t", 1}};
    int hn = dsc_hello_req_encode(&hello, frame + DSC_FRAME_HEADER_SIZE, 256);
    dsc_frame_header_t h = {.version = 1, .opcode = DSC_OP_HELLO, .request_id = 1};
    int fl = dsc_frame_encode(&h, frame + DSC_FRAME_HEADER_SIZE, (size_t)hn, frame, sizeof frame);
    send_all(fd, frame, (size_t)fl);
    n = encode(ds, 0, 0, three, 3, body, sizeof body);
    h = (dsc_frame_header_t){.version = 1, .opcode = DSC_OP_MGET, .request_id = 2};
    fl = dsc_frame_encode(&h, body, (size_t)n, frame, sizeof frame);
    for (int i = 0; i < fl; i++) {
        send_all(fd, frame + i, 1);
        usleep(200);
    }
    /* The HELLO answer, then the MGET answer's header. */
    uint8_t in[1 << 16];
    size_t have = 0;
    int mget_status = -1;
    while (mget_status < 0) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 10000) <= 0)
            break;
        ssize_t k = recv(fd, in + have, sizeof in - have, 0);
        if (k <= 0)
            break;
        have += (size_t)k;
        dsc_frame_header_t a;
        while (have >= DSC_FRAME_HEADER_SIZE &&
               dsc_frame_header_decode(in, have, 0, &a) == DSC_FRAME_HEADER_SIZE) {
            if (a.opcode == DSC_OP_MGET) {
                mget_status = (int)a.status;
                break;
            }
            size_t whole = DSC_FRAME_HEADER_SIZE + a.body_len;
            if (have < whole)
                break;
            memmove(in, in + whole, have - whole);
            have -= whole;
        }
    }
    close(fd);
    st = mget_status;
    EXPECT("a frame sent byte by byte: OK", st == DSC_STATUS_OK);

    printf("%s\n", fails ? "hostile MGET: UNEXPECTED outcomes" : "hostile MGET: all clean");
    dsc_manifest_free(m);
    dsc_conn_close(c);
    return fails ? 1 : 0;
}

static int cmd_damaged(int argc, char **argv) {
    if (argc < 6)
        return die("usage: damaged ADDR DATASET SHARD CHUNK", 0);
    const char *ds = argv[3];
    uint32_t shard = (uint32_t)strtoul(argv[4], NULL, 10);
    uint32_t chunk = (uint32_t)strtoul(argv[5], NULL, 10);
    dsc_conn_t *c = NULL;
    int rc = dsc_conn_open_addr(argv[2], TIMEOUT_MS, 0, &c);
    if (rc < 0)
        return die("connect", rc);
    dsc_mget_item_t items[5] = {
        {shard, chunk - 1}, {shard, chunk}, {shard, chunk + 1}, {0, 0}, {2, 0}};
    uint8_t body[256], *resp = NULL;
    size_t len = 0;
    int n = encode(ds, 0, 0, items, 5, body, sizeof body);
    int st = mget_raw(c, body, (size_t)n, &resp, &len);
    dsc_mget_resp_t r;
    if (st != DSC_STATUS_OK || dsc_mget_resp_decode(resp, len, &r) < 0)
        return die("MGET", st < 0 ? st : 0);
    for (uint32_t i = 0; i < r.count; i++)
        printf("%s%s", i ? " " : "", dsc_status_name((uint32_t)dsc_mget_resp_record(&r, i, NULL)));
    printf("\n");
    free(resp);
    dsc_conn_close(c);
    return 0;
}

static int cmd_token(int argc, char **argv) {
    if (argc < 5)
        return die("usage: token ADDR TOKEN DATASET", 0);
    dsc_credential_t cred;
    int anonymous = strcmp(argv[3], "-") == 0, rc = 0;
    if (!anonymous) {
        char why[512];
        rc = dsc__credential_load(argv[3], &cred, why, sizeof why);
        if (rc <= 0)
            return die(why, rc < 0 ? rc : DSC_EINVAL);
    }
    dsc_conn_t *c = NULL;
    rc = dsc_conn_open_addr_auth(argv[2], TIMEOUT_MS, 0, anonymous ? NULL : &cred, &c);
    if (!anonymous)
        dsc__credential_wipe(&cred);
    if (rc < 0) {
        printf("CONNECT_ERR %s\n", ename(rc));
        return 0;
    }
    if (argc > 5 && strcmp(argv[5], "range") == 0) { /* one RANGE: samples 0..1 of chunk 0 */
        dsc_sample_span_t span = {0, 2};
        dsc_range_item_t item = {.shard_id = 0, .chunk = 0, .range_count = 1, .spans = &span};
        dsc_range_req_t req = {
            .dataset = {argv[4], (uint16_t)strlen(argv[4])}, .count = 1, .items = &item};
        uint8_t body[256];
        int len = dsc_range_req_encode(&req, body, sizeof body);
        dsc_frame_header_t h;
        rc = len < 0 ? len : dsc_conn_send(c, DSC_OP_RANGE, 1, body, (size_t)len);
        if (rc == 0)
            rc = dsc_conn_recv_header(c, &h);
        static uint8_t answer[1 << 20];
        if (rc == 0 && h.body_len > sizeof answer)
            rc = DSC_EPROTO;
        if (rc == 0)
            rc = dsc_conn_recv_body(c, answer, h.body_len);
        if (rc < 0)
            printf("CONN_ERR %s\n", ename(rc));
        else if (h.status != DSC_STATUS_OK)
            printf("ERR %s %.*s\n", ename(dsc_status_to_err(h.status)), (int)h.body_len,
                   (const char *)answer);
        else
            printf("OK RANGE\n");
        dsc_conn_close(c);
        return 0;
    }
    dsc_mget_chunk_t chunks[2] = {{.shard = 0, .chunk = 0}, {.shard = 1, .chunk = 0}};
    rc = dsc__conn_mget(c, argv[4], 0, chunks, 2, alloc_malloc, NULL, NULL);
    if (rc < 0)
        printf("ERR %s %s\n", ename(rc), dsc_conn_last_error(c));
    else
        printf("OK %d\n", rc);
    free(chunks[0].stored);
    free(chunks[1].stored);
    dsc_conn_close(c);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2)
        return die("usage: mget_check compare|hostile|token ...", 0);
    if (strcmp(argv[1], "compare") == 0)
        return cmd_compare(argc, argv);
    if (strcmp(argv[1], "hostile") == 0)
        return cmd_hostile(argc, argv);
    if (strcmp(argv[1], "source") == 0)
        return cmd_source(argc, argv);
    if (strcmp(argv[1], "damaged") == 0)
        return cmd_damaged(argc, argv);
    if (strcmp(argv[1], "token") == 0)
        return cmd_token(argc, argv);
    return die("unknown command", 0);
}
