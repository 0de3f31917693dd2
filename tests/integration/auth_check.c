/* Authentication probes for tests/integration/test_auth.sh, against a real dscached:
 *   op ADDR TOKEN|- OP [DATASET [SHARD]]   one request under a credential (or anonymously; OP
 *                                          HINT: chunk 0 of SHARD);
 *                                          prints "OK <body>" / "ERR <name> <message>" /
 *                                          "CONNECT_ERR <name>"
 *   replay ADDR TOKEN                      a good exchange, then its client MAC replayed on a
 *                                          new connection and the server's MAC reflected back
 *   raw ADDR                               requests on a connection that never authenticates
 *   report ADDR TOKEN DATASET JOB N        N REPORTs (jobs JOB-0 .. JOB-N-1) on one connection;
 *                                          prints "REPORT ok K refused R [last error]"
 *   stage ADDR TOKEN DATASET JOB hint|get SHARD0 SHARDS CHUNKS RANGE DUE_MS [SEND_RATE_GETS]
 *                                          one connection: a REPORT naming JOB, then (hint) one
 *                                          HINT of the ranges of RANGE chunks covering chunks
 *                                          0..CHUNKS-1 of shards SHARD0.. (SHARDS of them), due
 *                                          DUE_MS + 10 ms each, printing "HINT ranges R accepted
 *                                          A trimmed T share S held H long L" (L: 1 for the long
 *                                          answer); or (get) a GET of each such range, printing
 *                                          "GET ok K of R"
 * Exit 0 when the probe ran (the script judges the output), 1 on a local failure. */
#include "auth.h"
#include "conn.h"
#include "credential.h"
#include "dsc_sys.h"
#include "hint.h"
#include "protocol.h"
#include "report.h"
#include "wire.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TIMEOUT_MS 10000

/* "EUNAUTH" for DSC_EUNAUTH: the names the test script matches. */
static const char *ename(int rc) {
    const char *name = dsc_err_name(rc);
    return strncmp(name, "DSC_", 4) == 0 ? name + 4 : name;
}

static int die(const char *what, int rc) {
    fprintf(stderr, "auth_check: %s: %s\n", what, rc ? dsc_strerror(rc) : "failed");
    return 1;
}

static int load_token(const char *arg, dsc_credential_t *cred, dsc_credential_t **out) {
    *out = NULL;
    if (strcmp(arg, "-") == 0)
        return 0;
    char why[512];
    int rc = dsc__credential_load(arg, cred, why, sizeof why);
    if (rc <= 0) {
        fprintf(stderr, "auth_check: %s\n", why);
        return rc < 0 ? rc : DSC_EINVAL;
    }
    *out = cred;
    return 0;
}

/* Encodes the body of OP; returns the opcode or -1. */
static int encode_op(int argc, char **argv, int at, uint8_t *body, int *len) {
    const char *op = argv[at];
    const char *name = argc > at + 1 ? argv[at + 1] : "";
    uint32_t shard = argc > at + 2 ? (uint32_t)strtoul(argv[at + 2], NULL, 10) : DSC_SHARD_ALL;
    *len = 0;
    if (strcmp(op, "LIST") == 0)
        return DSC_OP_LIST;
    if (strcmp(op, "MEMBERS") == 0)
        return DSC_OP_MEMBERS;
    if (strcmp(op, "PING") == 0) {
        memcpy(body, "ping", 4);
        *len = 4;
        return DSC_OP_PING;
    }
    if (strcmp(op, "STAT") == 0 || strcmp(op, "MANIFEST") == 0) {
        *len = dsc_name_req_encode(name, body, 256);
        return op[0] == 'S' ? DSC_OP_STAT : DSC_OP_MANIFEST;
    }
    if (strcmp(op, "GET") == 0) {
        dsc_get_req_t req = {.dataset = {name, (uint16_t)strlen(name)},
                             .shard_id = shard == DSC_SHARD_ALL ? 0 : shard,
                             .first_chunk = 0,
                             .chunk_count = 1};
        *len = dsc_get_req_encode(&req, body, 256);
        return DSC_OP_GET;
    }
    if (strcmp(op, "HINT") == 0) { /* chunk 0 of the shard, due now */
        dsc_hint_range_t r = {.shard_id = shard == DSC_SHARD_ALL ? 0 : shard, .chunk_count = 1};
        dsc_hint_req_t req = {
            .hinter = 7, .dataset = {name, (uint16_t)strlen(name)}, .range_count = 1, .ranges = &r};
        *len = dsc_hint_req_encode(&req, body, 256);
        return DSC_OP_HINT;
    }
    if (strcmp(op, "WARM") == 0 || strcmp(op, "EVICT") == 0) {
        dsc_shard_req_t req = {.dataset = {name, (uint16_t)strlen(name)}, .shard_id = shard};
        *len = dsc_shard_req_encode(&req, body, 256);
        return op[0] == 'W' ? DSC_OP_WARM : DSC_OP_EVICT;
    }
    return -1;
}

static void print_answer(dsc_conn_t *c, int opcode, int rc, const uint8_t *resp, size_t len) {
    if (rc < 0)
        printf("ERR %s %s\n", ename(rc), dsc_conn_last_error(c));
    else if (opcode == DSC_OP_WARM || opcode == DSC_OP_EVICT || opcode == DSC_OP_HINT)
        printf("OK %u\n", len == 4 ? dsc_load_u32(resp) : 0xFFFFFFFFu);
    else if (opcode == DSC_OP_GET)
        printf("OK %zu bytes\n", len);
    else
        printf("OK %.*s\n", (int)len, (const char *)resp);
}

static int cmd_op(int argc, char **argv) {
    if (argc < 5)
        return die("usage: op ADDR TOKEN|- OP [DATASET [SHARD]]", 0);
    dsc_credential_t store, *cred;
    int rc = load_token(argv[3], &store, &cred);
    if (rc < 0)
        return die("token", rc);
    uint8_t body[256];
    int len;
    int opcode = encode_op(argc, argv, 4, body, &len);
    if (opcode < 0 || len < 0)
        return die("unknown operation", 0);
    dsc_conn_t *c = NULL;
    rc = dsc_conn_open_addr_auth(argv[2], TIMEOUT_MS, 0, cred, &c);
    dsc__credential_wipe(&store);
    if (rc < 0) {
        printf("CONNECT_ERR %s\n", ename(rc));
        return 0;
    }
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    rc = dsc_conn_call(c, (uint8_t)opcode, body, (size_t)len, &resp, &resp_len);
    print_answer(c, opcode, rc, resp, resp_len);
    free(resp);
    dsc_conn_close(c);
    return 0;
}

/* ---- Hand-driven handshakes ------------------------------------------------------------- */

typedef struct hs {
    dsc_conn_t *conn;
    uint16_t version;
    uint8_t server_nonce[DSC_AUTH_NONCE_SIZE];
} hs_t;

/* Connects anonymously, then sends a HELLO carrying name + client_nonce by hand (a second HELLO
 * on the connection starts the handshake over on the server). Returns 0 and h->server_nonce. */
static int hello_by_hand(const char *addr, const char *name, const uint8_t *client_nonce, hs_t *h) {
    int rc = dsc_conn_open_addr(addr, TIMEOUT_MS, 0, &h->conn);
    if (rc < 0)
        return rc;
    uint8_t init[DSC_AUTH_INIT_MAX], body[512];
    dsc_auth_init_t ai = {
        DSC_AUTH_METHOD_HMAC_SHA256, {name, (uint16_t)strlen(name)}, client_nonce};
    int n = dsc_auth_init_encode(&ai, init, sizeof init);
    if (n < 0)
        return n;
    dsc_hello_req_t req = {.min_version = 1,
                           .max_version = DSC_PROTO_VERSION,
                           .features = DSC_FEATURE_AUTH,
                           .auth = {(const char *)init, (uint16_t)n},
                           .client_name = {"auth_check", 10}};
    n = dsc_hello_req_encode(&req, body, sizeof body);
    uint8_t *resp = NULL;
    size_t len = 0;
    rc = dsc_conn_call(h->conn, DSC_OP_HELLO, body, (size_t)n, &resp, &len);
    dsc_hello_resp_t hr;
    if (rc == 0 && (dsc_hello_resp_decode(resp, len, &hr) < 0 || hr.server_nonce == NULL))
        rc = DSC_EPROTO;
    if (rc == 0) {
        h->version = hr.version;
        memcpy(h->server_nonce, hr.server_nonce, DSC_AUTH_NONCE_SIZE);
    }
    free(resp);
    return rc;
}

/* Sends AUTH with mac; returns the call's result and the server's MAC in server_mac. */
static int send_auth(hs_t *h, const uint8_t *mac, uint8_t *server_mac) {
    uint8_t *resp = NULL;
    size_t len = 0;
    int rc = dsc_conn_call(h->conn, DSC_OP_AUTH, mac, DSC_AUTH_MAC_SIZE, &resp, &len);
    if (rc == 0 && len == DSC_AUTH_MAC_SIZE && server_mac)
        memcpy(server_mac, resp, len);
    free(resp);
    return rc;
}

static int cmd_replay(int argc, char **argv) {
    if (argc < 4)
        return die("usage: replay ADDR TOKEN", 0);
    dsc_credential_t cred;
    char why[512];
    if (dsc__credential_load(argv[3], &cred, why, sizeof why) <= 0)
        return die(why, 0);
    const char *addr = argv[2];
    uint8_t cn[DSC_AUTH_NONCE_SIZE], mac[DSC_AUTH_MAC_SIZE], want[DSC_AUTH_MAC_SIZE];
    uint8_t server_mac[DSC_AUTH_MAC_SIZE], first_nonce[DSC_AUTH_NONCE_SIZE];
    dsc_auth_random(cn, sizeof cn);

    /* 1. A genuine exchange, recorded. */
    hs_t a = {0};
    int rc = hello_by_hand(addr, cred.name, cn, &a);
    if (rc < 0)
        return die("hello 1", rc);
    memcpy(first_nonce, a.server_nonce, sizeof first_nonce);
    dsc_auth_mac(DSC_AUTH_CLIENT, cred.secret, cred.secret_len, a.version, cred.name,
                 strlen(cred.name), cn, a.server_nonce, mac);
    dsc_auth_mac(DSC_AUTH_SERVER, cred.secret, cred.secret_len, a.version, cred.name,
                 strlen(cred.name), cn, a.server_nonce, want);
    rc = send_auth(&a, mac, server_mac);
    printf("genuine: %s server-proof %s\n", rc == 0 ? "OK" : ename(rc),
           rc == 0 && dsc_auth_mac_equal(server_mac, want) ? "valid" : "INVALID");
    uint8_t *resp = NULL;
    size_t len = 0;
    rc = dsc_conn_call(a.conn, DSC_OP_LIST, NULL, 0, &resp, &len);
    printf("genuine LIST: %s\n", rc == 0 ? "OK" : ename(rc));
    free(resp);
    /* The same AUTH again on the authenticated connection: no second try per nonce. */
    rc = send_auth(&a, mac, NULL);
    printf("second AUTH same connection: %s\n", rc == 0 ? "OK" : ename(rc));
    dsc_conn_close(a.conn);

    /* 2. The recorded client MAC on a new connection (same client nonce, new server nonce). */
    hs_t b = {0};
    rc = hello_by_hand(addr, cred.name, cn, &b);
    if (rc < 0)
        return die("hello 2", rc);
    printf("server nonce fresh: %s\n",
           memcmp(first_nonce, b.server_nonce, sizeof first_nonce) != 0 ? "yes" : "NO");
    rc = send_auth(&b, mac, NULL);
    printf("replayed AUTH: %s\n", rc == 0 ? "OK" : ename(rc));
    resp = NULL;
    rc = dsc_conn_call(b.conn, DSC_OP_LIST, NULL, 0, &resp, &len);
    printf("LIST after replay: %s\n", rc == 0 ? "OK" : ename(rc));
    free(resp);
    dsc_conn_close(b.conn);

    /* 3. Reflection: the server's own proof offered back as the client's. */
    hs_t c = {0};
    rc = hello_by_hand(addr, cred.name, cn, &c);
    if (rc < 0)
        return die("hello 3", rc);
    dsc_auth_mac(DSC_AUTH_SERVER, cred.secret, cred.secret_len, c.version, cred.name,
                 strlen(cred.name), cn, c.server_nonce, mac);
    rc = send_auth(&c, mac, NULL);
    printf("reflected server proof: %s\n", rc == 0 ? "OK" : ename(rc));
    dsc_conn_close(c.conn);
    dsc__credential_wipe(&cred);
    return 0;
}

/* raw ADDR: a connection that never authenticates asks for everything, then sends AUTH with a
 * MAC of zeros; prints one line per request. */
static int cmd_raw(int argc, char **argv) {
    if (argc < 3)
        return die("usage: raw ADDR [DATASET]", 0);
    const char *ds = argc > 3 ? argv[3] : "x";
    dsc_conn_t *c = NULL;
    int rc = dsc_conn_open_addr(argv[2], TIMEOUT_MS, 0, &c);
    if (rc < 0)
        return die("connect", rc);
    static const char *ops[] = {"PING", "LIST",    "STAT", "MANIFEST",
                                "GET",  "MEMBERS", "WARM", "EVICT"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        char *args[] = {(char *)ops[i], (char *)ds};
        uint8_t body[256];
        int len;
        int opcode = encode_op(2, args, 0, body, &len);
        uint8_t *resp = NULL;
        size_t resp_len = 0;
        rc = dsc_conn_call(c, (uint8_t)opcode, body, (size_t)len, &resp, &resp_len);
        printf("%s: %s\n", ops[i], rc == 0 ? "OK" : ename(rc));
        free(resp);
    }
    uint8_t zeros[DSC_AUTH_MAC_SIZE] = {0};
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    rc = dsc_conn_call(c, DSC_OP_AUTH, zeros, sizeof zeros, &resp, &resp_len);
    printf("AUTH without challenge: %s\n", rc == 0 ? "OK" : ename(rc));
    free(resp);
    dsc_conn_close(c);
    return 0;
}

static int cmd_report(int argc, char **argv) {
    if (argc < 7)
        return die("usage: report ADDR TOKEN DATASET JOB N", 0);
    dsc_credential_t store, *cred;
    int rc = load_token(argv[3], &store, &cred);
    if (rc < 0)
        return die("token", rc);
    dsc_conn_t *c = NULL;
    rc = dsc_conn_open_addr_auth(argv[2], TIMEOUT_MS, 0, cred, &c);
    dsc__credential_wipe(&store);
    if (rc < 0) {
        printf("CONNECT_ERR %s\n", ename(rc));
        return 0;
    }
    uint32_t n = (uint32_t)strtoul(argv[6], NULL, 10), ok = 0, refused = 0;
    char last[300] = "";
    for (uint32_t i = 0; i < n; i++) {
        char job[64];
        snprintf(job, sizeof job, "%s-%u", argv[5], i);
        dsc_report_req_t req = {.job = {job, (uint16_t)strlen(job)},
                                .dataset = {argv[4], (uint16_t)strlen(argv[4])},
                                .world_size = 1,
                                .stall_ppm = 1000,
                                .samples_per_s = 10,
                                .bytes_per_s = 100};
        uint8_t body[512];
        int len = dsc_report_req_encode(&req, body, sizeof body);
        if (len < 0)
            return die("encode REPORT", len);
        uint8_t *resp = NULL;
        size_t resp_len = 0;
        rc = dsc_conn_call(c, DSC_OP_REPORT, body, (size_t)len, &resp, &resp_len);
        free(resp);
        if (rc == 0) {
            ok++;
        } else {
            refused++;
            snprintf(last, sizeof last, "%s %s", ename(rc), dsc_conn_last_error(c));
        }
    }
    printf("REPORT ok %u refused %u %s\n", ok, refused, last);
    dsc_conn_close(c);
    return 0;
}

/* A REPORT naming job on c (so that its answers and read-ahead are that job's). */
static int report_job(dsc_conn_t *c, const char *dataset, const char *job) {
    dsc_report_req_t req = {.job = {job, (uint16_t)strlen(job)},
                            .dataset = {dataset, (uint16_t)strlen(dataset)},
                            .world_size = 1,
                            .stall_ppm = 1000,
                            .samples_per_s = 10,
                            .bytes_per_s = 100};
    uint8_t body[512];
    int len = dsc_report_req_encode(&req, body, sizeof body);
    if (len < 0)
        return len;
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    int rc = dsc_conn_call(c, DSC_OP_REPORT, body, (size_t)len, &resp, &resp_len);
    free(resp);
    return rc;
}

static int cmd_stage(int argc, char **argv) {
    if (argc < 12)
        return die("usage: stage ADDR TOKEN DATASET JOB hint|get SHARD0 SHARDS CHUNKS RANGE DUE_MS",
                   0);
    const char *dataset = argv[4], *job = argv[5], *mode = argv[6];
    uint32_t shard0 = (uint32_t)strtoul(argv[7], NULL, 10);
    uint32_t shards = (uint32_t)strtoul(argv[8], NULL, 10);
    uint32_t chunks = (uint32_t)strtoul(argv[9], NULL, 10);
    uint32_t range = (uint32_t)strtoul(argv[10], NULL, 10);
    uint32_t due = (uint32_t)strtoul(argv[11], NULL, 10);
    if (range == 0 || range > DSC_HINT_MAX_RANGE_CHUNKS)
        return die("RANGE must be 1..64 chunks", 0);
    static dsc_hint_range_t ranges[DSC_HINT_MAX_RANGES];
    uint32_t n = 0;
    for (uint32_t s = 0; s < shards; s++)
        for (uint32_t f = 0; f < chunks && n < DSC_HINT_MAX_RANGES; f += range) {
            ranges[n] = (dsc_hint_range_t){.shard_id = shard0 + s,
                                           .first_chunk = f,
                                           .chunk_count = f + range <= chunks ? range : chunks - f,
                                           .due_ms = due + 10 * n};
            n++;
        }
    dsc_credential_t store, *cred;
    int rc = load_token(argv[3], &store, &cred);
    if (rc < 0)
        return die("token", rc);
    dsc_conn_t *c = NULL;
    rc = dsc_conn_open_addr_auth(argv[2], TIMEOUT_MS, 0, cred, &c);
    dsc__credential_wipe(&store);
    if (rc < 0) {
        printf("CONNECT_ERR %s\n", ename(rc));
        return 0;
    }
    if ((rc = report_job(c, dataset, job)) < 0) {
        printf("REPORT_ERR %s %s\n", ename(rc), dsc_conn_last_error(c));
        dsc_conn_close(c);
        return 0;
    }
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    if (strcmp(mode, "hint") == 0) {
        dsc_hint_req_t req = {.hinter = 0x5eed0000u + (uint64_t)strlen(job) * 131 + job[0],
                              .dataset = {dataset, (uint16_t)strlen(dataset)},
                              .range_count = n,
                              .ranges = ranges};
        static uint8_t body[DSC_HINT_MAX_BODY];
        int len = dsc_hint_req_encode(&req, body, sizeof body);
        if (len < 0)
            return die("encode HINT", len);
        rc = dsc_conn_call(c, DSC_OP_HINT, body, (size_t)len, &resp, &resp_len);
        dsc_hint_resp_t r = {0};
        if (rc < 0 || dsc_hint_resp_decode_share(resp, resp_len, &r) < 0)
            printf("HINT_ERR %s %s\n", ename(rc), dsc_conn_last_error(c));
        else
            printf("HINT ranges %u accepted %u trimmed %u share %llu held %llu long %d\n", n,
                   r.accepted, r.trimmed, (unsigned long long)r.share_bytes,
                   (unsigned long long)r.held_bytes, r.has_share);
        free(resp);
    } else {
        uint32_t ok = 0;
        for (uint32_t i = 0; i < n; i++) {
            dsc_get_req_t g = {.dataset = {dataset, (uint16_t)strlen(dataset)},
                               .shard_id = ranges[i].shard_id,
                               .first_chunk = ranges[i].first_chunk,
                               .chunk_count = ranges[i].chunk_count};
            uint8_t body[256];
            int len = dsc_get_req_encode(&g, body, sizeof body);
            if (len < 0)
                return die("encode GET", len);
            rc = dsc_conn_call(c, DSC_OP_GET, body, (size_t)len, &resp, &resp_len);
            ok += rc == 0;
            free(resp);
            resp = NULL;
        }
        printf("GET ok %u of %u\n", ok, n);
    }
    dsc_conn_close(c);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2)
        return die("usage: auth_check op|replay|raw|report|stage ...", 0);
    if (strcmp(argv[1], "stage") == 0)
        return cmd_stage(argc, argv);
    if (strcmp(argv[1], "report") == 0)
        return cmd_report(argc, argv);
    if (strcmp(argv[1], "op") == 0)
        return cmd_op(argc, argv);
    if (strcmp(argv[1], "replay") == 0)
        return cmd_replay(argc, argv);
    if (strcmp(argv[1], "raw") == 0)
        return cmd_raw(argc, argv);
    return die("unknown command", 0);
}
