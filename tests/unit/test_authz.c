/* Connection authorisation (server/authz.h) without sockets: a full HELLO/AUTH exchange with the
 * server's proof, one try per nonce, the gate before and after AUTH, roles, dataset lists and
 * LIST/STAT filtering, and a reload that removes or changes a credential ending the connection. */
#include "authz.h"
#include "dsc_sys.h"
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char path[] = "/tmp/dsc_authz_XXXXXX";

static void write_file(const char *text) {
    FILE *f = fopen(path, "w");
    REQUIRE(f != NULL);
    fputs(text, f);
    fclose(f);
}

static uint8_t last_mac[DSC_AUTH_MAC_SIZE]; /* the client MAC of the last login */

/* HELLO + AUTH as name with secret; returns the AUTH status. */
static uint32_t login(dsc_authz_t *az, dsc_conn_auth_t *ca, const char *name, const char *secret) {
    uint8_t cn[DSC_AUTH_NONCE_SIZE], init_buf[DSC_AUTH_INIT_MAX];
    REQUIRE(dsc_auth_random(cn, sizeof cn) == 0);
    dsc_auth_init_t init = {DSC_AUTH_METHOD_HMAC_SHA256, {name, (uint16_t)strlen(name)}, cn};
    int n = dsc_auth_init_encode(&init, init_buf, sizeof init_buf);
    REQUIRE(n > 0);
    dsc_hello_req_t req = {.min_version = 1,
                           .max_version = 1,
                           .features = DSC_FEATURE_AUTH,
                           .auth = {(const char *)init_buf, (uint16_t)n}};
    dsc_hello_resp_t resp = {0};
    const char *msg = NULL;
    REQUIRE(dsc__authz_hello(az, ca, &req, 1, &resp, &msg) == DSC_STATUS_OK);
    REQUIRE(resp.features == DSC_FEATURE_AUTH && resp.server_nonce != NULL);
    uint8_t mac[DSC_AUTH_MAC_SIZE], server_mac[DSC_AUTH_MAC_SIZE], want[DSC_AUTH_MAC_SIZE];
    REQUIRE(dsc_auth_mac(DSC_AUTH_CLIENT, secret, strlen(secret), 1, name, strlen(name), cn,
                         resp.server_nonce, mac) == 0);
    REQUIRE(dsc_auth_mac(DSC_AUTH_SERVER, secret, strlen(secret), 1, name, strlen(name), cn,
                         resp.server_nonce, want) == 0);
    uint32_t st = dsc__authz_auth(az, ca, mac, sizeof mac, "test-peer", server_mac, &msg);
    if (st == DSC_STATUS_OK)
        CHECK(dsc_auth_mac_equal(server_mac, want));
    memcpy(last_mac, mac, sizeof mac);
    return st;
}

static uint32_t check(dsc_authz_t *az, dsc_conn_auth_t *ca, uint8_t op, int *close_after) {
    const char *msg = NULL;
    return dsc__authz_check(az, ca, op, "test-peer", &msg, close_after);
}

int main(void) {
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    close(fd);
    write_file("reader read s3cr3t-s3cr3t-s3cr3t imagenet\nops admin 0123456789abcdef0123\n");
    char err[256];
    dsc_authz_t az = {0};
    REQUIRE(dsc_credstore_create(path, &az.store, err, sizeof err) == 0);
    az.failures = dsc_authfail_create();
    REQUIRE(az.failures != NULL);
    int close_after = 0;

    /* Before AUTH: only HELLO, AUTH, PING. */
    dsc_conn_auth_t anon = {0};
    CHECK_EQ_INT(check(&az, &anon, DSC_OP_PING, &close_after), DSC_STATUS_OK);
    CHECK_EQ_INT(check(&az, &anon, DSC_OP_LIST, &close_after), DSC_STATUS_UNAUTHORIZED);
    CHECK_EQ_INT(check(&az, &anon, 99, &close_after), DSC_STATUS_UNAUTHORIZED);
    CHECK(!close_after);

    /* Wrong secret, then unknown name: UNAUTHORIZED, nothing served after. */
    dsc_conn_auth_t bad = {0};
    CHECK_EQ_INT(login(&az, &bad, "reader", "not-the-secret-xyz"), DSC_STATUS_UNAUTHORIZED);
    CHECK_EQ_INT(check(&az, &bad, DSC_OP_LIST, &close_after), DSC_STATUS_UNAUTHORIZED);
    dsc__authz_conn_close(&bad);
    dsc_conn_auth_t nobody = {0};
    CHECK_EQ_INT(login(&az, &nobody, "nobody", "s3cr3t-s3cr3t-s3cr3t"), DSC_STATUS_UNAUTHORIZED);
    dsc__authz_conn_close(&nobody);

    /* A read credential limited to imagenet. */
    dsc_conn_auth_t reader = {0};
    REQUIRE(login(&az, &reader, "reader", "s3cr3t-s3cr3t-s3cr3t") == DSC_STATUS_OK);
    CHECK(strcmp(dsc__authz_role_name(&reader), "read") == 0);
    CHECK_EQ_INT(check(&az, &reader, DSC_OP_GET, &close_after), DSC_STATUS_OK);
    CHECK_EQ_INT(check(&az, &reader, DSC_OP_EVICT, &close_after), DSC_STATUS_UNAUTHORIZED);
    CHECK_EQ_INT(check(&az, &reader, 20, &close_after), DSC_STATUS_UNAUTHORIZED); /* admin range */
    CHECK(dsc__authz_may_read(&reader, "imagenet", 8));
    CHECK(!dsc__authz_may_read(&reader, "c4", 2));
    char *list = strdup("[{\"name\":\"c4\",\"shards\":2},{\"name\":\"imagenet\",\"shards\":3}]");
    list = dsc__authz_filter_json(&reader, list);
    REQUIRE(list != NULL);
    CHECK(strstr(list, "imagenet") != NULL && strstr(list, "c4") == NULL);
    free(list);
    char *stat = strdup("{\"store\":{\"bytes\":1},\"datasets\":[{\"name\":\"c4\"},{\"name\":"
                        "\"imagenet\"}]}");
    stat = dsc__authz_filter_json(&reader, stat);
    REQUIRE(stat != NULL);
    CHECK(strstr(stat, "imagenet") != NULL && strstr(stat, "c4") == NULL &&
          strstr(stat, "store") != NULL);
    free(stat);

    /* The same AUTH again on an authenticated connection: the nonce is spent, and the
     * connection loses what it had proven. */
    dsc_conn_auth_t twice = {0};
    REQUIRE(login(&az, &twice, "ops", "0123456789abcdef0123") == DSC_STATUS_OK);
    uint8_t spare[DSC_AUTH_MAC_SIZE];
    const char *why = NULL;
    CHECK_EQ_INT(dsc__authz_auth(&az, &twice, last_mac, sizeof last_mac, "p", spare, &why),
                 DSC_STATUS_UNAUTHORIZED);
    CHECK_EQ_INT(check(&az, &twice, DSC_OP_LIST, &close_after), DSC_STATUS_UNAUTHORIZED);
    dsc__authz_conn_close(&twice);

    dsc_conn_auth_t admin = {0};
    REQUIRE(login(&az, &admin, "ops", "0123456789abcdef0123") == DSC_STATUS_OK);
    CHECK_EQ_INT(check(&az, &admin, DSC_OP_EVICT, &close_after), DSC_STATUS_OK);
    CHECK(dsc__authz_may_read(&admin, "c4", 2));

    /* Reload: reader's secret changes, ops stays: reader's connection ends, ops' goes on. */
    write_file("reader read n3w-s3cr3t-s3cr3t-s3cr3t\nops admin 0123456789abcdef0123\n");
    REQUIRE(dsc_credstore_reload(az.store, err, sizeof err) == 2);
    CHECK_EQ_INT(check(&az, &admin, DSC_OP_WARM, &close_after), DSC_STATUS_OK);
    CHECK(!close_after);
    CHECK_EQ_INT(check(&az, &reader, DSC_OP_GET, &close_after), DSC_STATUS_UNAUTHORIZED);
    CHECK(close_after);
    CHECK_EQ_INT(check(&az, &reader, DSC_OP_GET, &close_after), DSC_STATUS_UNAUTHORIZED);
    /* Removal ends ops too. */
    write_file("reader read n3w-s3cr3t-s3cr3t-s3cr3t\n");
    REQUIRE(dsc_credstore_reload(az.store, err, sizeof err) == 1);
    CHECK_EQ_INT(check(&az, &admin, DSC_OP_LIST, &close_after), DSC_STATUS_UNAUTHORIZED);
    CHECK(close_after);
    CHECK(dsc_authfail_total(az.failures) >= 8);

    /* No store: anonymous, admin refused unless allowed; AUTH unsupported. */
    dsc_authz_t open = {.failures = az.failures};
    dsc_conn_auth_t a2 = {0};
    CHECK_EQ_INT(check(&open, &a2, DSC_OP_GET, &close_after), DSC_STATUS_OK);
    CHECK_EQ_INT(check(&open, &a2, DSC_OP_WARM, &close_after), DSC_STATUS_UNAUTHORIZED);
    open.allow_anonymous_admin = 1;
    CHECK_EQ_INT(check(&open, &a2, DSC_OP_WARM, &close_after), DSC_STATUS_OK);
    uint8_t mac[DSC_AUTH_MAC_SIZE] = {0}, out[DSC_AUTH_MAC_SIZE];
    const char *msg = NULL;
    CHECK_EQ_INT(dsc__authz_auth(&open, &a2, mac, sizeof mac, "p", out, &msg),
                 DSC_STATUS_UNSUPPORTED);

    dsc__authz_conn_close(&anon);
    dsc__authz_conn_close(&reader);
    dsc__authz_conn_close(&admin);
    dsc__authz_conn_close(&a2);
    dsc_credstore_destroy(az.store);
    dsc_authfail_destroy(az.failures);
    unlink(path);
    return TEST_DONE();
}
