/* dscached cluster state: options, owned sets from a member list (exactly R owners per shard),
 * view snapshots that survive a swap, members-file refresh, MEMBERS/STAT JSON. */
#include "cluster.h"
#include "testlib.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

extern int dsc__srvlog_level; /* server/srvlog.h */

#define SHARDS 3000u
#define REF_MEMBERS_HASH UINT64_C(0xad2e7338c0eb9d39)
#define REF_IMAGENET_1_PRIMARY "10.0.0.2:7070"

static dsc_cluster_t *make(const char *members, const char *self, uint32_t replicas) {
    dsc_cluster_options_t o = {.members = members, .advertise = self, .replicas = replicas};
    dsc_cluster_t *cl = NULL;
    int rc = dsc_cluster_create(&o, &cl);
    if (rc < 0) {
        fprintf(stderr, "create(%s, %s): %s\n", members ? members : "-", self, dsc_strerror(rc));
        return NULL;
    }
    return cl;
}

static void test_options(void) {
    dsc_cluster_t *cl = NULL;
    dsc_cluster_options_t o = {.members = "a:1,b:2", .advertise = "a:1", .replicas = 9};
    CHECK_EQ_INT(dsc_cluster_create(&o, &cl), DSC_EINVAL); /* replicas above 8 */
    o.replicas = 2;
    o.advertise = "no-port";
    CHECK_EQ_INT(dsc_cluster_create(&o, &cl), DSC_EINVAL);
    o.advertise = "a:0";
    CHECK_EQ_INT(dsc_cluster_create(&o, &cl), DSC_EINVAL);
    o.advertise = NULL;
    CHECK_EQ_INT(dsc_cluster_create(&o, &cl), DSC_EINVAL);
    o.advertise = "a:1";
    o.members = "a:1,garbage";
    CHECK_EQ_INT(dsc_cluster_create(&o, &cl), DSC_EINVAL);
    o.members = "dns:no-port";
    CHECK_EQ_INT(dsc_cluster_create(&o, &cl), DSC_EINVAL);
    o.members = "file:";
    CHECK_EQ_INT(dsc_cluster_create(&o, &cl), DSC_EINVAL);
    CHECK(cl == NULL);

    /* An IPv6 advertise address without brackets is put in the canonical form. */
    cl = make("[fd00::1]:7070,[fd00::2]:7070", "fd00::1:7070", 1);
    REQUIRE(cl != NULL);
    CHECK(strcmp(dsc_cluster_self(cl), "[fd00::1]:7070") == 0);
    dsc_cluster_view_t *v = dsc_cluster_acquire(cl);
    CHECK_EQ_INT(v->self_index, 0);
    CHECK_EQ_INT(v->replicas, 1);
    dsc_cluster_view_release(v);
    dsc_cluster_destroy(cl);

    /* A missing members file is not fatal: empty view, owns nothing, hash 0. */
    cl = make("file:/nonexistent/dscache-members", "a:1", 2);
    REQUIRE(cl != NULL);
    v = dsc_cluster_acquire(cl);
    CHECK_EQ_INT(v->members.count, 0);
    CHECK(v->clustered);
    CHECK(!dsc_cluster_owns(v, "ds", 0));
    CHECK(dsc_cluster_hello_hash(cl) == 0);
    dsc_cluster_view_release(v);
    CHECK(dsc_cluster_refresh(cl) == DSC_ENOENT);
    dsc_cluster_destroy(cl);
    dsc_cluster_destroy(NULL);
    dsc_cluster_view_release(NULL);
}

static void test_single_node(void) {
    dsc_cluster_t *cl = make(NULL, "127.0.0.1:7070", 0);
    REQUIRE(cl != NULL);
    CHECK(dsc_cluster_hello_hash(cl) == 0); /* HELLO: not clustered */
    dsc_cluster_view_t *v = dsc_cluster_acquire(cl);
    CHECK(!v->clustered);
    CHECK_EQ_INT(v->replicas, DSC_CLUSTER_DEFAULT_REPLICAS);
    CHECK_EQ_INT(v->members.count, 1);
    for (uint32_t s = 0; s < 100; s++)
        CHECK(dsc_cluster_owns(v, "ds", s));
    dsc_cluster_view_release(v);
    dsc_members_t m = {0, NULL};
    REQUIRE(dsc_members_add(&m, "a:1") == 1);
    CHECK_EQ_INT(dsc_cluster_set_members(cl, &m), DSC_EINVAL);
    CHECK(m.count == 0 && m.addrs == NULL); /* taken (freed) even when refused */
    CHECK_EQ_INT(dsc_cluster_refresh(cl), 0);

    char *json = dsc_cluster_members_json(cl);
    REQUIRE(json != NULL);
    cJSON *j = cJSON_Parse(json);
    REQUIRE(j != NULL);
    cJSON *members = cJSON_GetObjectItem(j, "members");
    CHECK(cJSON_GetArraySize(members) == 1);
    CHECK(strcmp(cJSON_GetArrayItem(members, 0)->valuestring, "127.0.0.1:7070") == 0);
    CHECK(strcmp(cJSON_GetObjectItem(j, "self")->valuestring, "127.0.0.1:7070") == 0);
    CHECK(cJSON_IsFalse(cJSON_GetObjectItem(j, "clustered")));
    CHECK(strlen(cJSON_GetObjectItem(j, "hash")->valuestring) == 16);
    cJSON_Delete(j);
    free(json);
    dsc_cluster_destroy(cl);
}

/* Three servers with the same list: every shard is owned by exactly R of them, and each one's
 * owned set is what dsc_placement_owns says for its index. */
static void test_owned_sets(void) {
    const char *list = "127.0.0.1:7001, 127.0.0.1:7002,127.0.0.1:7003";
    const char *selves[3] = {"127.0.0.1:7002", "127.0.0.1:7003", "127.0.0.1:7001"};
    for (uint32_t r = 1; r <= 3; r++) {
        dsc_cluster_t *cl[3];
        dsc_cluster_view_t *v[3];
        for (int i = 0; i < 3; i++) {
            cl[i] = make(list, selves[i], r);
            REQUIRE(cl[i] != NULL);
            v[i] = dsc_cluster_acquire(cl[i]);
            CHECK(v[i]->self_index >= 0);
            CHECK(strcmp(v[i]->members.addrs[v[i]->self_index], selves[i]) == 0);
        }
        CHECK(v[0]->hash == v[1]->hash && v[1]->hash == v[2]->hash);
        CHECK(dsc_cluster_hello_hash(cl[0]) == v[0]->hash && v[0]->hash != 0);
        uint32_t owned[3] = {0, 0, 0};
        int wrong = 0;
        for (uint32_t s = 0; s < SHARDS; s++) {
            int holders = 0;
            for (int i = 0; i < 3; i++) {
                int own = dsc_cluster_owns(v[i], "imagenet", s);
                wrong += own != dsc_placement_owns(&v[i]->members, (uint32_t)v[i]->self_index,
                                                   "imagenet", s, r);
                holders += own;
                owned[i] += (uint32_t)own;
            }
            wrong += holders != (int)r;
        }
        CHECK_EQ_INT(wrong, 0);
        CHECK_EQ_INT(owned[0] + owned[1] + owned[2], r * SHARDS);
        /* Balance: each holds about r/3 of the shards (within 10%). */
        for (int i = 0; i < 3; i++)
            CHECK(owned[i] * 30 >= r * SHARDS * 9 && owned[i] * 30 <= r * SHARDS * 11);
        for (int i = 0; i < 3; i++) {
            dsc_cluster_view_release(v[i]);
            dsc_cluster_destroy(cl[i]);
        }
    }
    /* Not in the list: owns nothing. */
    dsc_cluster_t *out = make(list, "127.0.0.1:7999", 2);
    REQUIRE(out != NULL);
    dsc_cluster_view_t *v = dsc_cluster_acquire(out);
    CHECK_EQ_INT(v->self_index, -1);
    int any = 0;
    for (uint32_t s = 0; s < 200; s++)
        any |= dsc_cluster_owns(v, "imagenet", s);
    CHECK(!any);
    dsc_cluster_view_release(v);
    dsc_cluster_destroy(out);
}

/* A held view stays intact across swaps; the newest is what acquire returns. */
static void test_snapshot_swap(void) {
    dsc_cluster_t *cl = make("a:1,b:1,c:1", "a:1", 2);
    REQUIRE(cl != NULL);
    dsc_cluster_view_t *old = dsc_cluster_acquire(cl);
    uint64_t old_hash = old->hash;
    CHECK_EQ_INT(old->generation, 1);

    dsc_members_t same;
    REQUIRE(dsc_members_parse("c:1 b:1 a:1", &same) == 0);
    CHECK_EQ_INT(dsc_cluster_set_members(cl, &same), 0); /* same list: no change */
    CHECK(same.count == 0);

    dsc_members_t two;
    REQUIRE(dsc_members_parse("a:1,b:1", &two) == 0);
    CHECK_EQ_INT(dsc_cluster_set_members(cl, &two), 1);
    dsc_cluster_view_t *now = dsc_cluster_acquire(cl);
    CHECK(now != old);
    CHECK_EQ_INT(now->generation, 2);
    CHECK_EQ_INT(now->members.count, 2);
    CHECK(now->hash != old_hash);
    CHECK(dsc_cluster_hello_hash(cl) == now->hash);
    /* The old snapshot is untouched while held. */
    CHECK_EQ_INT(old->members.count, 3);
    CHECK(old->hash == old_hash);
    CHECK(strcmp(old->members.addrs[2], "c:1") == 0);
    /* Two members, R=2: a owns everything now. */
    int all = 1;
    for (uint32_t s = 0; s < 500; s++)
        all &= dsc_cluster_owns(now, "ds", s);
    CHECK(all);
    dsc_cluster_view_release(old);
    dsc_cluster_view_release(now);

    /* The swap drops this server from the list: it owns nothing but keeps working. */
    dsc_members_t others;
    REQUIRE(dsc_members_parse("b:1,c:1", &others) == 0);
    CHECK_EQ_INT(dsc_cluster_set_members(cl, &others), 1);
    now = dsc_cluster_acquire(cl);
    CHECK_EQ_INT(now->self_index, -1);
    CHECK(!dsc_cluster_owns(now, "ds", 0));
    dsc_cluster_view_release(now);
    dsc_cluster_destroy(cl);
}

/* Readers acquire and release while a writer swaps lists: run under ASan/TSan, every view read
 * is complete (its hash matches its members). */
typedef struct race {
    dsc_cluster_t *cl;
    atomic_int stop;
    atomic_int bad;
    atomic_long reads;
} race_t;

static void *reader(void *arg) {
    race_t *r = arg;
    while (!atomic_load(&r->stop)) {
        dsc_cluster_view_t *v = dsc_cluster_acquire(r->cl);
        if (v->hash != dsc_members_hash(&v->members) || v->members.count < 2)
            atomic_fetch_add(&r->bad, 1);
        dsc_cluster_view_release(v);
        atomic_fetch_add(&r->reads, 1);
    }
    return NULL;
}

static void test_concurrent_swaps(void) {
    race_t r = {.cl = make("a:1,b:1", "a:1", 2)};
    REQUIRE(r.cl != NULL);
    atomic_init(&r.stop, 0);
    atomic_init(&r.bad, 0);
    atomic_init(&r.reads, 0);
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        REQUIRE(pthread_create(&t[i], NULL, reader, &r) == 0);
    /* The swaps must overlap the reads: on a busy machine the readers may not have run yet. */
    for (int w = 0; w < 5000 && atomic_load(&r.reads) == 0; w++)
        usleep(1000);
    int changes = 0;
    for (int i = 0; i < 2000; i++) {
        dsc_members_t m;
        char text[64];
        snprintf(text, sizeof text, "a:1,b:1,n%d:1", i % 7);
        REQUIRE(dsc_members_parse(text, &m) == 0);
        changes += dsc_cluster_set_members(r.cl, &m) == 1;
    }
    atomic_store(&r.stop, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    CHECK_EQ_INT(atomic_load(&r.bad), 0);
    CHECK(changes >= 1999); /* every swap changes the list (i % 7 differs from i-1's) */
    CHECK(atomic_load(&r.reads) > 0);
    dsc_cluster_destroy(r.cl);
}

static void write_file(const char *path, const char *text) {
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    REQUIRE(f != NULL);
    fputs(text, f);
    REQUIRE(fclose(f) == 0);
    REQUIRE(rename(tmp, path) == 0);
}

/* A members file: read at create, re-read by refresh; bad contents keep the current view. */
static void test_members_file(void) {
    char dir[] = "/tmp/dsc_cluster_XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    char path[256], spec[300];
    snprintf(path, sizeof path, "%s/members", dir);
    snprintf(spec, sizeof spec, "file:%s", path);
    write_file(path, "# the cluster\n10.0.0.1:7070\n10.0.0.2:7070\n10.0.0.3:7070\n");
    dsc_cluster_t *cl = make(spec, "10.0.0.2:7070", 2);
    REQUIRE(cl != NULL);
    dsc_cluster_view_t *v = dsc_cluster_acquire(cl);
    CHECK_EQ_INT(v->members.count, 3);
    CHECK_EQ_INT(v->self_index, 1);
    uint64_t h3 = v->hash;
    dsc_cluster_view_release(v);
    CHECK_EQ_INT(dsc_cluster_refresh(cl), 0); /* unchanged */

    write_file(path, "10.0.0.2:7070, 10.0.0.3:7070\n");
    CHECK_EQ_INT(dsc_cluster_refresh(cl), 1);
    v = dsc_cluster_acquire(cl);
    CHECK_EQ_INT(v->members.count, 2);
    CHECK(v->hash != h3);
    uint64_t h2 = v->hash;
    dsc_cluster_view_release(v);

    write_file(path, "not a member list\n");
    CHECK_EQ_INT(dsc_cluster_refresh(cl), DSC_EINVAL);
    CHECK(dsc_cluster_hello_hash(cl) == h2); /* kept */
    unlink(path);
    CHECK_EQ_INT(dsc_cluster_refresh(cl), DSC_ENOENT);
    CHECK(dsc_cluster_hello_hash(cl) == h2);
    dsc_cluster_destroy(cl);
    rmdir(dir);
}

static void test_stat_json(void) {
    dsc_cluster_t *cl = make("a:1,b:1,c:1", "b:1", 2);
    REQUIRE(cl != NULL);
    /* No catalog datasets: the cluster fields still appear; bad input is refused. */
    dsc_store_t *store = NULL;
    dsc_catalog_t *cat = NULL;
    REQUIRE(dsc_store_create(1 << 20, &store) == 0);
    REQUIRE(dsc_catalog_create(store, NULL, &cat) == 0);
    char *json = dsc_cluster_stat_json(cl, cat, "{\"store\":{},\"datasets\":[{\"name\":\"x\"}]}");
    REQUIRE(json != NULL);
    cJSON *j = cJSON_Parse(json);
    REQUIRE(j != NULL);
    cJSON *info = cJSON_GetObjectItem(j, "cluster");
    CHECK(cJSON_GetObjectItem(info, "members")->valuedouble == 3);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(info, "self_member")));
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)dsc_cluster_hello_hash(cl));
    CHECK(strcmp(cJSON_GetObjectItem(j, "members_hash")->valuestring, hex) == 0);
    /* A dataset the catalog does not serve gets no ownership fields. */
    CHECK(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "datasets"), 0),
                              "owned_shards") == NULL);
    cJSON_Delete(j);
    free(json);
    CHECK(dsc_cluster_stat_json(cl, cat, "[1,2]") == NULL);
    CHECK(dsc_cluster_stat_json(cl, cat, "{trunc") == NULL);
    CHECK(dsc_cluster_stat_json(cl, cat, NULL) == NULL);
    dsc_catalog_destroy(cat);
    dsc_store_destroy(store);
    dsc_cluster_destroy(cl);
}

/* The placement as proto/PROTOCOL.md (Placement) specifies it, computed here from XXH3 directly,
 * gives the same owners and hash as proto/placement.c; prints the reference values the document
 * quotes. */
static void test_documented_formula(void) {
    const char *text = "10.0.0.3:7070,10.0.0.1:7070,10.0.0.2:7070,10.0.0.4:7070";
    dsc_members_t m;
    REQUIRE(dsc_members_parse(text, &m) == 0);
    char joined[256] = "";
    for (uint32_t i = 0; i < m.count; i++) {
        strcat(joined, m.addrs[i]);
        strcat(joined, ",");
    }
    CHECK(strcmp(joined, "10.0.0.1:7070,10.0.0.2:7070,10.0.0.3:7070,10.0.0.4:7070,") == 0);
    uint64_t hash = XXH3_64bits(joined, strlen(joined));
    CHECK(dsc_members_hash(&m) == hash);
    int wrong = 0;
    for (uint32_t shard = 0; shard < 2000; shard++) {
        const char *ds = shard % 2 ? "imagenet" : "c4-en";
        uint8_t key_bytes[64];
        size_t len = strlen(ds);
        memcpy(key_bytes, ds, len);
        for (int b = 0; b < 4; b++)
            key_bytes[len + (size_t)b] = (uint8_t)(shard >> (8 * b));
        uint64_t key = XXH3_64bits(key_bytes, len + 4);
        uint64_t w[4];
        for (uint32_t i = 0; i < m.count; i++)
            w[i] = XXH3_64bits_withSeed(m.addrs[i], strlen(m.addrs[i]), key);
        uint32_t expect[4] = {0, 1, 2, 3}; /* members by decreasing weight */
        for (int i = 0; i < 4; i++)
            for (int j = i + 1; j < 4; j++)
                if (w[expect[j]] > w[expect[i]]) {
                    uint32_t t = expect[i];
                    expect[i] = expect[j];
                    expect[j] = t;
                }
        uint32_t got[3];
        REQUIRE(dsc_placement_owners(&m, ds, shard, 3, got) == 3);
        wrong += got[0] != expect[0] || got[1] != expect[1] || got[2] != expect[2];
        if (shard < 4 && getenv("DSC_PRINT_REFERENCE"))
            printf("%s shard %u: key %016llx owners %s, %s, %s\n", ds, shard,
                   (unsigned long long)key, m.addrs[got[0]], m.addrs[got[1]], m.addrs[got[2]]);
    }
    CHECK_EQ_INT(wrong, 0);
    if (getenv("DSC_PRINT_REFERENCE"))
        printf("members_hash %016llx\n", (unsigned long long)hash);
    /* Reference values quoted in proto/PROTOCOL.md. */
    CHECK(hash == REF_MEMBERS_HASH);
    uint32_t owners[3];
    REQUIRE(dsc_placement_owners(&m, "imagenet", 1, 3, owners) == 3);
    CHECK(strcmp(m.addrs[owners[0]], REF_IMAGENET_1_PRIMARY) == 0);
    CHECK(strcmp(m.addrs[owners[1]], "10.0.0.3:7070") == 0);
    CHECK(strcmp(m.addrs[owners[2]], "10.0.0.4:7070") == 0);
    REQUIRE(dsc_placement_owners(&m, "c4-en", 2, 2, owners) == 2);
    CHECK(strcmp(m.addrs[owners[0]], "10.0.0.3:7070") == 0);
    CHECK(strcmp(m.addrs[owners[1]], "10.0.0.1:7070") == 0);
    dsc_members_free(&m);
}

int main(void) {
    dsc__srvlog_level = DSC_LOG_ERROR; /* the expected warnings would only be noise here */
    test_options();
    test_single_node();
    test_owned_sets();
    test_snapshot_swap();
    test_concurrent_swaps();
    test_members_file();
    test_stat_json();
    test_documented_formula();
    return TEST_DONE();
}
