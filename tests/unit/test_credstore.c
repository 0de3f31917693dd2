/* Server credential store (server/credstore.h): loading, roles and dataset lists, reload that
 * keeps the old set on a bad file, references held across a reload, failure log rate limit. */
#include "credstore.h"
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    REQUIRE(f != NULL);
    fputs(text, f);
    fclose(f);
}

int main(void) {
    char path[] = "/tmp/dsc_credstore_XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    close(fd);
    char err[256] = "";
    dsc_credstore_t *cs = NULL;

    write_file(path, "# test\ntrainer read s3cr3t-s3cr3t-s3cr3t imagenet c4\n"
                     "ops admin 0123456789abcdef0123\n");
    REQUIRE(dsc_credstore_create(path, &cs, err, sizeof err) == 0);
    dsc_credset_t *set = dsc_credstore_acquire(cs);
    CHECK_EQ_INT(dsc_credset_count(set), 2);
    const dsc_cred_t *t = dsc_credset_find(set, "trainer", 7);
    REQUIRE(t != NULL);
    CHECK(dsc_cred_role(t) == DSC_ROLE_READ);
    CHECK(dsc_cred_may_read(t, "imagenet", 8) && dsc_cred_may_read(t, "c4", 2));
    CHECK(!dsc_cred_may_read(t, "c4-en", 5) && !dsc_cred_may_read(t, "imagene", 7));
    size_t slen;
    const char *sec = dsc_cred_secret(t, &slen);
    CHECK(slen == 20 && memcmp(sec, "s3cr3t-s3cr3t-s3cr3t", 20) == 0);
    const dsc_cred_t *o = dsc_credset_find(set, "ops", 3);
    REQUIRE(o != NULL);
    CHECK(dsc_cred_role(o) == DSC_ROLE_ADMIN && dsc_cred_may_read(o, "anything", 8));
    CHECK(dsc_credset_find(set, "op", 2) == NULL && dsc_credset_find(set, "nobody", 6) == NULL);
    uint64_t gen = dsc_credstore_generation(cs);

    /* A bad file keeps the current set and says where it is wrong. */
    write_file(path, "trainer read s3cr3t-s3cr3t-s3cr3t\nops superuser 0123456789abcdef0123\n");
    CHECK_EQ_INT(dsc_credstore_reload(cs, err, sizeof err), DSC_EINVAL);
    CHECK(strstr(err, ":2: invalid role") != NULL);
    CHECK(dsc_credstore_generation(cs) == gen);
    write_file(path, "a read 0123456789abcdef0123\na admin 0123456789abcdef0123\n");
    CHECK_EQ_INT(dsc_credstore_reload(cs, err, sizeof err), DSC_EINVAL);
    CHECK(strstr(err, "duplicate") != NULL);
    write_file(path, "# nothing\n");
    CHECK_EQ_INT(dsc_credstore_reload(cs, err, sizeof err), DSC_EINVAL);
    CHECK(strstr(err, "no credentials") != NULL);

    /* A good file replaces the set; the old one stays valid while held. */
    write_file(path, "trainer read 0ther-s3cr3t-s3cr3t\nnew admin fresh-secret-0000000\n");
    CHECK_EQ_INT(dsc_credstore_reload(cs, err, sizeof err), 2);
    CHECK(dsc_credstore_generation(cs) == gen + 1);
    dsc_credset_t *set2 = dsc_credstore_acquire(cs);
    CHECK(dsc_credset_generation(set2) == gen + 1);
    CHECK(dsc_credset_find(set2, "ops", 3) == NULL);
    const dsc_cred_t *t2 = dsc_credset_find(set2, "trainer", 7);
    REQUIRE(t2 != NULL);
    CHECK(!dsc_cred_same(t, t2)); /* same name, new secret */
    CHECK(dsc_cred_same(t2, t2));
    CHECK(dsc_cred_may_read(t2, "c4-en", 5));        /* no list now: every dataset */
    CHECK(strcmp(dsc_cred_name(t), "trainer") == 0); /* old set still readable */
    dsc_credset_release(set);
    dsc_credset_release(set2);

    unlink(path);
    CHECK(dsc_credstore_reload(cs, err, sizeof err) < 0); /* missing file: kept */
    dsc_credstore_destroy(cs);
    CHECK(dsc_credstore_create(path, &cs, err, sizeof err) < 0);

    /* Failures: every one counted, one line per peer per interval. */
    dsc_authfail_t *af = dsc_authfail_create();
    REQUIRE(af != NULL);
    char line[256];
    CHECK_EQ_INT(dsc_authfail_record(af, "10.0.0.1", "bad MAC", line, sizeof line), 1);
    CHECK(strstr(line, "10.0.0.1") != NULL && strstr(line, "bad MAC") != NULL);
    for (int i = 0; i < 100; i++)
        CHECK_EQ_INT(dsc_authfail_record(af, "10.0.0.1", "bad MAC", line, sizeof line), 0);
    CHECK_EQ_INT(dsc_authfail_record(af, "10.0.0.2", "unknown", line, sizeof line), 1);
    CHECK(dsc_authfail_total(af) == 102);
    /* Many distinct peers at once: at most the burst is logged per second (CLOCK_MONOTONIC
     * seconds, as the store counts them; a slow run, e.g. under a sanitizer, may span two). */
    int logged = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 200; i++) {
        char peer[32];
        snprintf(peer, sizeof peer, "10.1.%d.%d", i / 256, i % 256);
        logged += dsc_authfail_record(af, peer, "x", line, sizeof line);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK(logged <= DSC_AUTH_LOG_BURST * (int)(t1.tv_sec - t0.tv_sec + 1));
    CHECK(logged < 200); /* the burst limit held back some */
    CHECK(dsc_authfail_total(af) == 302);
    dsc_authfail_destroy(af);
    dsc_authfail_destroy(NULL);
    CHECK(dsc_authfail_total(NULL) == 0);
    return TEST_DONE();
}
