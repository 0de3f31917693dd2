/* Authentication codecs and MACs (proto/auth.h): the PROTOCOL.md test vectors, auth-init and
 * HELLO-with-nonce round trips and every truncation, direction separation, credential lines and
 * token files. */
#include "auth.h"
#include "dsc_sys.h"
#include "protocol.h"
#include "testlib.h"

#include <stdint.h>
#include <string.h>

static void hex(const uint8_t *b, size_t n, char *out) {
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
}

static void check_mac(dsc_auth_dir_t dir, const char *secret, uint16_t version, const char *name,
                      const uint8_t *cn, const uint8_t *sn, const char *want) {
    uint8_t mac[DSC_AUTH_MAC_SIZE];
    char got[2 * DSC_AUTH_MAC_SIZE + 1];
    REQUIRE(dsc_auth_mac(dir, secret, strlen(secret), version, name, strlen(name), cn, sn, mac) ==
            0);
    hex(mac, sizeof mac, got);
    if (strcmp(got, want) != 0)
        fprintf(stderr, "vector %s/%s: got %s want %s\n", name, dir ? "server" : "client", got,
                want);
    CHECK(strcmp(got, want) == 0);
}

/* The vectors printed in proto/PROTOCOL.md (computed independently with Python's hmac). */
static void test_vectors(void) {
    uint8_t cn[32], sn[32];
    for (int i = 0; i < 32; i++) {
        cn[i] = (uint8_t)i;
        sn[i] = (uint8_t)(32 + i);
    }
    const char *secret = "correct-horse-battery-staple-42";
    check_mac(DSC_AUTH_CLIENT, secret, 1, "trainer", cn, sn,
              "dd7a5169057e7a423276e191e7c9b5171bf10544320bf05913edc7fb477ff910");
    check_mac(DSC_AUTH_SERVER, secret, 1, "trainer", cn, sn,
              "cf55c550c1f23d7c1d457ab0165dffd3dc058a028b89652bc177eeae7459357c");
    char long_secret[101];
    memset(long_secret, 'x', 40);
    memset(long_secret + 40, 'Z', 60);
    long_secret[100] = '\0';
    memset(cn, 0xa5, 32);
    memset(sn, 0x5a, 32);
    check_mac(DSC_AUTH_CLIENT, long_secret, 2, "svc.cluster-admin@k8s", cn, sn,
              "9d977249e7b1e6915a23ce52b8e5a9ae88cc5cfad9fcdde3683a452c95191fd5");
    check_mac(DSC_AUTH_SERVER, long_secret, 2, "svc.cluster-admin@k8s", cn, sn,
              "0f5c683b60b32a663f21db436469af1554b8427ace3b355c604b2a0a630e44e2");
}

static void test_mac_properties(void) {
    uint8_t cn[32] = {1}, sn[32] = {2}, a[32], b[32];
    const char *s = "0123456789abcdef";
    REQUIRE(dsc_auth_mac(DSC_AUTH_CLIENT, s, 16, 1, "n", 1, cn, sn, a) == 0);
    REQUIRE(dsc_auth_mac(DSC_AUTH_SERVER, s, 16, 1, "n", 1, cn, sn, b) == 0);
    CHECK(!dsc_auth_mac_equal(a, b)); /* a client MAC cannot be reflected as the server's */
    REQUIRE(dsc_auth_mac(DSC_AUTH_CLIENT, s, 16, 1, "n", 1, cn, sn, b) == 0);
    CHECK(dsc_auth_mac_equal(a, b));
    sn[31] ^= 1; /* a fresh server nonce changes the answer: no replay */
    REQUIRE(dsc_auth_mac(DSC_AUTH_CLIENT, s, 16, 1, "n", 1, cn, sn, b) == 0);
    CHECK(!dsc_auth_mac_equal(a, b));
    sn[31] ^= 1;
    REQUIRE(dsc_auth_mac(DSC_AUTH_CLIENT, s, 16, 2, "n", 1, cn, sn, b) == 0);
    CHECK(!dsc_auth_mac_equal(a, b)); /* version bound */
    REQUIRE(dsc_auth_mac(DSC_AUTH_CLIENT, s, 16, 1, "m", 1, cn, sn, b) == 0);
    CHECK(!dsc_auth_mac_equal(a, b)); /* name bound */
    CHECK_EQ_INT(dsc_auth_mac(DSC_AUTH_CLIENT, "short", 5, 1, "n", 1, cn, sn, b), DSC_EINVAL);
    CHECK_EQ_INT(dsc_auth_mac(DSC_AUTH_CLIENT, s, 16, 1, "bad name", 8, cn, sn, b), DSC_EINVAL);
    CHECK_EQ_INT(dsc_auth_mac(DSC_AUTH_CLIENT, s, 16, 1, "n", 1, NULL, sn, b), DSC_EINVAL);
    uint8_t r1[32] = {0}, r2[32] = {0};
    REQUIRE(dsc_auth_random(r1, 32) == 0 && dsc_auth_random(r2, 32) == 0);
    CHECK(memcmp(r1, r2, 32) != 0);
    dsc_auth_wipe(r1, 32);
    uint8_t zero[32] = {0};
    CHECK(memcmp(r1, zero, 32) == 0);
    dsc_auth_wipe(NULL, 4);
}

static void test_init_codec(void) {
    uint8_t nonce[32];
    memset(nonce, 0x33, sizeof nonce);
    dsc_auth_init_t init = {DSC_AUTH_METHOD_HMAC_SHA256, {"trainer", 7}, nonce};
    uint8_t buf[128];
    int n = dsc_auth_init_encode(&init, buf, sizeof buf);
    CHECK_EQ_INT(n, 2 + 7 + 32);
    CHECK_EQ_INT(buf[0], 1);
    CHECK_EQ_INT(buf[1], 7);
    dsc_auth_init_t got;
    REQUIRE(dsc_auth_init_decode(buf, (size_t)n, &got) == 0);
    CHECK(got.name.len == 7 && memcmp(got.name.ptr, "trainer", 7) == 0);
    CHECK(memcmp(got.client_nonce, nonce, 32) == 0);
    /* Re-encoding gives the same bytes. */
    uint8_t again[128];
    CHECK_EQ_INT(dsc_auth_init_encode(&got, again, sizeof again), n);
    CHECK(memcmp(again, buf, (size_t)n) == 0);
    /* Every strict prefix and one trailing byte are rejected, on exact-size copies. */
    for (int len = 0; len <= n + 1; len++) {
        if (len == n)
            continue;
        uint8_t *exact = malloc((size_t)len + 1);
        REQUIRE(exact != NULL);
        memcpy(exact, buf, (size_t)(len <= n ? len : n));
        if (len > n)
            exact[n] = 0;
        CHECK_EQ_INT(dsc_auth_init_decode(exact, (size_t)len, &got), DSC_EBADFRAME);
        free(exact);
    }
    buf[0] = 2; /* unknown method */
    CHECK_EQ_INT(dsc_auth_init_decode(buf, (size_t)n, &got), DSC_EBADFRAME);
    buf[0] = 1;
    buf[3] = ' '; /* "tr ainer": space in a name */
    CHECK_EQ_INT(dsc_auth_init_decode(buf, (size_t)n, &got), DSC_EBADFRAME);
    CHECK_EQ_INT(dsc_auth_init_encode(&init, buf, 10), DSC_ENOSPC);
    init.name.len = 0;
    CHECK_EQ_INT(dsc_auth_init_encode(&init, buf, sizeof buf), DSC_EINVAL);

    const uint8_t *mac;
    uint8_t m[33] = {0};
    CHECK_EQ_INT(dsc_auth_mac_decode(m, 32, &mac), 0);
    CHECK(mac == m);
    CHECK_EQ_INT(dsc_auth_mac_decode(m, 31, &mac), DSC_EBADFRAME);
    CHECK_EQ_INT(dsc_auth_mac_decode(m, 33, &mac), DSC_EBADFRAME);
}

static void test_hello_nonce(void) {
    uint8_t nonce[32];
    for (int i = 0; i < 32; i++)
        nonce[i] = (uint8_t)(0xc0 + i);
    dsc_hello_resp_t resp = {.version = 1,
                             .features = DSC_FEATURE_AUTH,
                             .max_body = DSC_FRAME_MAX_BODY,
                             .server_name = {"s", 1},
                             .server_nonce = nonce};
    uint8_t buf[128];
    int n = dsc_hello_resp_encode(&resp, buf, sizeof buf);
    CHECK_EQ_INT(n, 2 + 4 + 8 + 4 + 2 + 1 + 32);
    dsc_hello_resp_t got;
    REQUIRE(dsc_hello_resp_decode(buf, (size_t)n, &got) == 0);
    REQUIRE(got.server_nonce != NULL);
    CHECK(memcmp(got.server_nonce, nonce, 32) == 0);
    for (int len = 0; len < n; len++)
        CHECK_EQ_INT(dsc_hello_resp_decode(buf, (size_t)len, &got), DSC_EBADFRAME);
    resp.server_nonce = NULL;
    CHECK_EQ_INT(dsc_hello_resp_encode(&resp, buf, sizeof buf), DSC_EINVAL);
    resp.features = 0;
    n = dsc_hello_resp_encode(&resp, buf, sizeof buf);
    REQUIRE(dsc_hello_resp_decode(buf, (size_t)n, &got) == 0);
    CHECK(got.server_nonce == NULL);
}

static int parse(const char *line, dsc_auth_line_t *out, const char **why) {
    return dsc_auth_line_parse(line, strlen(line), out, why);
}

static void test_lines(void) {
    dsc_auth_line_t l;
    const char *why = NULL;
    CHECK_EQ_INT(parse("", &l, &why), 0);
    CHECK_EQ_INT(parse("   # comment", &l, &why), 0);
    REQUIRE(parse("trainer read 0123456789abcdef0123", &l, &why) == 1);
    CHECK(l.role == DSC_ROLE_READ && l.dataset_count == 0 && l.secret.len == 20);
    REQUIRE(parse("ops admin  0123456789abcdef * # all\r", &l, &why) == 1);
    CHECK(l.role == DSC_ROLE_ADMIN && l.dataset_count == 0);
    REQUIRE(parse("t\tread\t0123456789abcdef\timagenet c4-en", &l, &why) == 1);
    CHECK_EQ_INT(l.dataset_count, 2);
    size_t pos = 0;
    dsc_str_t ds;
    REQUIRE(dsc_auth_line_next_dataset(&l, &pos, &ds) == 1);
    CHECK(ds.len == 8 && memcmp(ds.ptr, "imagenet", 8) == 0);
    REQUIRE(dsc_auth_line_next_dataset(&l, &pos, &ds) == 1);
    CHECK(ds.len == 5 && memcmp(ds.ptr, "c4-en", 5) == 0);
    CHECK_EQ_INT(dsc_auth_line_next_dataset(&l, &pos, &ds), 0);
    CHECK_EQ_INT(parse("trainer read", &l, &why), DSC_EINVAL);
    CHECK_EQ_INT(parse("trainer write 0123456789abcdef", &l, &why), DSC_EINVAL);
    CHECK(strstr(why, "role") != NULL);
    CHECK_EQ_INT(parse("trainer read short", &l, &why), DSC_EINVAL);
    CHECK(strstr(why, "secret") != NULL);
    CHECK_EQ_INT(parse("tr/ainer read 0123456789abcdef", &l, &why), DSC_EINVAL);
    CHECK_EQ_INT(parse("t read 0123456789abcdef * imagenet", &l, &why), DSC_EINVAL);
    char long_ds[200];
    snprintf(long_ds, sizeof long_ds, "t read 0123456789abcdef %0100d", 7);
    CHECK_EQ_INT(parse(long_ds, &l, &why), DSC_EINVAL);
    CHECK_EQ_INT(dsc_auth_line_parse("t read 0123456789abcdef\0x", 25, &l, &why), DSC_EINVAL);

    dsc_str_t name, secret;
    const char *tok = "# dscache token\n\nworker-1  s3cr3t-s3cr3t-s3cr3t\n";
    REQUIRE(dsc_auth_token_parse(tok, strlen(tok), &name, &secret, &why) == 0);
    CHECK(name.len == 8 && memcmp(name.ptr, "worker-1", 8) == 0);
    CHECK(secret.len == 20 && memcmp(secret.ptr, "s3cr3t-s3cr3t-s3cr3t", 20) == 0);
    tok = "ops admin 0123456789abcdefXYZ imagenet\n";
    REQUIRE(dsc_auth_token_parse(tok, strlen(tok), &name, &secret, &why) == 0);
    CHECK(secret.len == 19 && memcmp(secret.ptr, "0123456789abcdefXYZ", 19) == 0);
    tok = "worker s3cr3t-s3cr3t-s3cr3t\r\n"; /* written on Windows */
    REQUIRE(dsc_auth_token_parse(tok, strlen(tok), &name, &secret, &why) == 0);
    CHECK(secret.len == 20);
    CHECK_EQ_INT(dsc_auth_token_parse("# nothing\n", 10, &name, &secret, &why), DSC_EINVAL);
    CHECK_EQ_INT(dsc_auth_token_parse("onlyname\n", 9, &name, &secret, &why), DSC_EINVAL);
    CHECK_EQ_INT(dsc_auth_token_parse("a b c d", 7, &name, &secret, &why), DSC_EINVAL);
    CHECK_EQ_INT(dsc_auth_token_parse("a short", 7, &name, &secret, &why), DSC_EINVAL);
}

int main(void) {
    test_vectors();
    test_mac_properties();
    test_init_codec();
    test_hello_nonce();
    test_lines();
    return TEST_DONE();
}
