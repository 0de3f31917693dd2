/* The loader's reading of a MEMBERS answer (client/lib/loader/view.c): the documented JSON gives
 * the canonical list and its hash; every prefix, hostile member strings, wrong types and a hash
 * that does not match the list are refused without reading past the given length. */
#include "testlib.h"
#include "view.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse(const char *text, size_t len, dsc_members_t *m, uint64_t *hash, int *clustered,
                 int *self_member) {
    /* A private copy of exactly len bytes, so ASan sees any read past the end. */
    char *copy = malloc(len ? len : 1);
    REQUIRE(copy != NULL);
    memcpy(copy, text, len);
    int rc = dsc__members_json_parse(copy, len, m, hash, clustered, self_member);
    free(copy);
    return rc;
}

int main(void) {
    dsc_members_t ref = {0};
    REQUIRE(dsc_members_parse("10.0.0.2:7070,10.0.0.1:7070,10.0.0.3:7070", &ref) == 0);
    char text[1024];
    snprintf(text, sizeof text,
             "{\"members\":[\"10.0.0.3:7070\",\"10.0.0.1:7070\",\"10.0.0.2:7070\"],"
             "\"replicas\":2,\"hash\":\"%016llx\",\"self\":\"10.0.0.1:7070\",\"clustered\":true}",
             (unsigned long long)dsc_members_hash(&ref));

    dsc_members_t m;
    uint64_t hash = 0;
    int clustered = 0, self_member = 0;
    CHECK(parse(text, strlen(text), &m, &hash, &clustered, &self_member) == 0);
    CHECK(dsc_members_equal(&m, &ref) && hash == dsc_members_hash(&ref));
    CHECK(clustered == 1 && self_member == 1);
    CHECK(m.count == 3 && strcmp(m.addrs[0], "10.0.0.1:7070") == 0); /* canonical order */
    dsc_members_free(&m);

    /* Every proper prefix is refused and leaves an empty list. */
    for (size_t len = 0; len < strlen(text); len++) {
        int rc = parse(text, len, &m, &hash, &clustered, &self_member);
        CHECK(rc == DSC_EPROTO);
        CHECK(m.count == 0 && m.addrs == NULL);
    }

    /* A server outside its list, or outside any cluster. */
    snprintf(text, sizeof text,
             "{\"members\":[\"10.0.0.3:7070\",\"10.0.0.1:7070\",\"10.0.0.2:7070\"],"
             "\"hash\":\"%016llx\",\"self\":\"10.0.0.9:7070\",\"clustered\":false}",
             (unsigned long long)dsc_members_hash(&ref));
    CHECK(parse(text, strlen(text), &m, &hash, &clustered, &self_member) == 0);
    CHECK(clustered == 0 && self_member == 0);
    dsc_members_free(&m);

    const char *bad[] = {
        "",
        "null",
        "[]",
        "{}",
        "{\"members\":\"10.0.0.1:7070\",\"hash\":\"0000000000000001\"}",
        "{\"members\":[1,2],\"hash\":\"0000000000000001\"}",
        "{\"members\":[\"no-port\"],\"hash\":\"0000000000000001\"}",
        "{\"members\":[\"a:0\"],\"hash\":\"0000000000000001\"}",
        "{\"members\":[\"a:70000\"],\"hash\":\"0000000000000001\"}",
        "{\"members\":[\"a:1\"],\"hash\":1}",
        "{\"members\":[\"a:1\"],\"hash\":\"xyz\"}",
        "{\"members\":[\"a:1\"],\"hash\":\"00000000000000010\"}",
        "{\"members\":[\"a:1\"],\"hash\":\"ABCDEF0123456789\"}",
        "{\"members\":[\"a:1\"],\"hash\":\"0000000000000001\"}", /* not the list's hash */
        "{\"members\":[\"a:1\"]",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = parse(bad[i], strlen(bad[i]), &m, &hash, &clustered, &self_member);
        if (rc != DSC_EPROTO)
            fprintf(stderr, "accepted or wrong error %d: %s\n", rc, bad[i]);
        CHECK(rc == DSC_EPROTO);
        CHECK(m.count == 0);
    }

    /* A member string longer than a member may be. */
    char big[600];
    memset(big, 'h', sizeof big);
    memcpy(big, "{\"members\":[\"", 13);
    snprintf(big + 400, sizeof big - 400, ":1\"],\"hash\":\"0000000000000001\"}");
    CHECK(parse(big, strlen(big), &m, &hash, &clustered, &self_member) == DSC_EPROTO);

    /* An empty list hashes to 0: consistent, parsed (the caller ignores such views). */
    const char *empty = "{\"members\":[],\"hash\":\"0000000000000000\",\"clustered\":true}";
    CHECK(parse(empty, strlen(empty), &m, &hash, &clustered, &self_member) == 0);
    CHECK(m.count == 0 && hash == 0 && self_member == 0);
    dsc_members_free(&m);

    dsc_members_free(&ref);
    return TEST_DONE();
}
