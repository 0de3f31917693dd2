/* Placement: canonical member lists, rendezvous owners, ~1/N movement, balance, resolution. */
#include "dsc_sys.h"
#include "dscache.h"
#include "placement.h"
#include "testlib.h"

#include <unistd.h>

static void test_parse(void) {
    dsc_members_t a, b;
    REQUIRE(dsc_members_parse("10.0.0.2:7070, 10.0.0.1:7070\n10.0.0.2:7070 # dup\n", &a) == 0);
    CHECK_EQ_INT(a.count, 2);
    CHECK(strcmp(a.addrs[0], "10.0.0.1:7070") == 0);
    REQUIRE(dsc_members_parse("10.0.0.1:7070,10.0.0.2:7070", &b) == 0);
    CHECK(dsc_members_equal(&a, &b));
    CHECK(dsc_members_hash(&a) == dsc_members_hash(&b));
    CHECK(dsc_members_hash(&a) != 0);
    CHECK_EQ_INT(dsc_members_find(&a, "10.0.0.2:7070"), 1);
    CHECK_EQ_INT(dsc_members_find(&a, "10.0.0.3:7070"), -1);
    CHECK_EQ_INT(dsc_members_add(&b, "10.0.0.3:7070"), 1);
    CHECK(dsc_members_hash(&a) != dsc_members_hash(&b));
    CHECK(!dsc_members_equal(&a, &b));
    dsc_members_free(&a);
    dsc_members_free(&b);
    dsc_members_t bad;
    CHECK_EQ_INT(dsc_members_parse("", &bad), DSC_EINVAL);
    CHECK_EQ_INT(dsc_members_parse("host-without-port", &bad), DSC_EINVAL);
    CHECK_EQ_INT(dsc_members_parse("h:1,h:99999", &bad), DSC_EINVAL);
    CHECK_EQ_INT(dsc_members_parse("h:0", &bad), DSC_EINVAL);
    CHECK(bad.addrs == NULL);
    dsc_members_free(NULL);
}

static dsc_members_t make_members(uint32_t n) {
    dsc_members_t m = {0, NULL};
    for (uint32_t i = 0; i < n; i++) {
        char addr[64];
        snprintf(addr, sizeof addr, "10.1.%u.%u:7070", i / 200, i % 200 + 1);
        REQUIRE(dsc_members_add(&m, addr) == 1);
    }
    return m;
}

#define SHARDS 20000u

static void test_owners_and_movement(void) {
    dsc_members_t m8 = make_members(8);
    uint32_t *prim = malloc(SHARDS * sizeof *prim);
    uint32_t counts[9] = {0};
    for (uint32_t s = 0; s < SHARDS; s++) {
        uint32_t o1[1], o3[3];
        REQUIRE(dsc_placement_owners(&m8, "ds", s, 1, o1) == 1);
        REQUIRE(dsc_placement_owners(&m8, "ds", s, 3, o3) == 3);
        CHECK(o1[0] == o3[0]); /* replicas extend the primary, never reorder it */
        CHECK(o3[0] != o3[1] && o3[1] != o3[2] && o3[0] != o3[2]);
        CHECK(dsc_placement_owns(&m8, o3[2], "ds", s, 3));
        prim[s] = o1[0];
        counts[o1[0]]++;
    }
    /* Balance: every member within 10% of the mean (2500). */
    for (int i = 0; i < 8; i++)
        CHECK(counts[i] > 2250 && counts[i] < 2750);

    /* Another dataset name places differently. */
    int differ = 0;
    for (uint32_t s = 0; s < 100; s++) {
        uint32_t o[1];
        dsc_placement_owners(&m8, "other", s, 1, o);
        differ += o[0] != prim[s];
    }
    CHECK(differ > 50);

    /* Adding a ninth member moves ~1/9 of the primaries, all of them to the new member. */
    dsc_members_t m9 = make_members(9);
    int new_index = -1;
    for (uint32_t i = 0; i < 9; i++)
        if (dsc_members_find(&m8, m9.addrs[i]) < 0)
            new_index = (int)i;
    REQUIRE(new_index >= 0);
    uint32_t moved = 0, moved_elsewhere = 0;
    for (uint32_t s = 0; s < SHARDS; s++) {
        uint32_t o[1];
        dsc_placement_owners(&m9, "ds", s, 1, o);
        const char *before = m8.addrs[prim[s]];
        if (strcmp(before, m9.addrs[o[0]]) != 0) {
            moved++;
            if ((int)o[0] != new_index)
                moved_elsewhere++;
        }
    }
    double frac = (double)moved / SHARDS;
    printf("add 1 of 9: moved %.4f of shards (ideal %.4f)\n", frac, 1.0 / 9);
    CHECK(frac > 0.09 && frac < 0.135);
    CHECK_EQ_INT(moved_elsewhere, 0);

    /* Removing one member moves exactly the shards it owned. */
    dsc_members_t m7 = {0, NULL};
    for (uint32_t i = 1; i < 8; i++)
        dsc_members_add(&m7, m8.addrs[i]);
    uint32_t moved_rm = 0, wrong = 0;
    for (uint32_t s = 0; s < SHARDS; s++) {
        uint32_t o[1];
        dsc_placement_owners(&m7, "ds", s, 1, o);
        int changed = strcmp(m8.addrs[prim[s]], m7.addrs[o[0]]) != 0;
        moved_rm += changed;
        wrong += changed != (prim[s] == 0);
    }
    printf("remove 1 of 8: moved %.4f of shards (ideal %.4f)\n", (double)moved_rm / SHARDS,
           1.0 / 8);
    CHECK_EQ_INT(wrong, 0);

    uint32_t o[2];
    CHECK_EQ_INT(dsc_placement_owners(&m8, "ds", 0, 0, o), DSC_EINVAL);
    CHECK_EQ_INT(dsc_placement_owners(&m8, "ds", 0, DSC_MAX_REPLICAS + 1, o), DSC_EINVAL);
    dsc_members_t one = make_members(1);
    CHECK_EQ_INT(dsc_placement_owners(&one, "ds", 5, 2, o), 1); /* R capped by N */
    dsc_members_free(&one);
    dsc_members_free(&m7);
    dsc_members_free(&m8);
    dsc_members_free(&m9);
    free(prim);
}

static void test_resolve(void) {
    char path[] = "/tmp/dsc_members_XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    const char *text = "# cluster\n127.0.0.1:7002\n127.0.0.1:7001\n";
    REQUIRE(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    char spec[64];
    snprintf(spec, sizeof spec, "file:%s", path);
    dsc_members_t m;
    REQUIRE(dsc_members_resolve(spec, &m) == 0);
    CHECK_EQ_INT(m.count, 2);
    CHECK(strcmp(m.addrs[0], "127.0.0.1:7001") == 0);
    dsc_members_free(&m);
    unlink(path);
    CHECK_EQ_INT(dsc_members_resolve(spec, &m), DSC_ENOENT);
    REQUIRE(dsc_members_resolve("dns:localhost:7070", &m) == 0);
    CHECK(m.count >= 1);
    CHECK(dsc_members_find(&m, "127.0.0.1:7070") >= 0 || dsc_members_find(&m, "[::1]:7070") >= 0);
    dsc_members_free(&m);
    CHECK_EQ_INT(dsc_members_resolve("dns:no-such-host.invalid:7070", &m), DSC_EUNAVAIL);
    CHECK_EQ_INT(dsc_members_resolve("dns:nohostport", &m), DSC_EINVAL);
}

int main(void) {
    test_parse();
    test_owners_and_movement();
    test_resolve();
    return TEST_DONE();
}
