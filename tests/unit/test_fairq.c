/* Deficit round-robin between jobs (server/fairq.h): equal byte shares between backlogged flows
 * whatever their item sizes or item counts, shares by weight, an idle flow saves nothing up,
 * FIFO mode (--fair off) keeps arrival order, removal of a closing connection's items, the send
 * budget (token bucket), per-job totals and the NAME=W parser. */
#include "fairq.h"
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

typedef struct item {
    dsc_fq_item_t q;
    int owner; /* which flow (test index) */
    int conn;
} item_t;

static item_t *mk(int owner, uint64_t bytes) {
    item_t *it = calloc(1, sizeof *it);
    REQUIRE(it != NULL);
    it->owner = owner;
    it->q.bytes = bytes;
    return it;
}

/* Pops `count` items; sums the bytes per owner (owners 0..3). */
static void drain(dsc_fq_t *fq, int count, uint64_t sent[4]) {
    for (int i = 0; i < count; i++) {
        dsc_fq_item_t *q = dsc_fq_pop(fq, 1000 + (uint64_t)i);
        REQUIRE(q != NULL);
        item_t *it = (item_t *)q;
        sent[it->owner] += q->bytes;
        free(it);
    }
}

static void free_rest(dsc_fq_t *fq) {
    dsc_fq_item_t *q;
    while ((q = dsc_fq_pop(fq, 0)) != NULL)
        free(q);
}

/* A greedy flow with 8x the items (and 1 MiB ones) against a flow of 64 KiB items: while both
 * are backlogged, bytes sent differ by at most one quantum + one item. */
static void test_equal_shares(void) {
    dsc_fq_t fq;
    dsc_fq_init(&fq, 256u << 10, 0, NULL);
    dsc_fq_flow_t *greedy = dsc_fq_flow_get(&fq, NULL, "greedy", 1);
    dsc_fq_flow_t *paced = dsc_fq_flow_get(&fq, NULL, "paced", 1);
    REQUIRE(greedy && paced);
    CHECK(dsc_fq_flow_get(&fq, NULL, "greedy", 5) == greedy); /* by name: the same flow */
    CHECK_EQ_INT(greedy->refs, 2);
    dsc_fq_flow_put(&fq, greedy);
    for (int i = 0; i < 800; i++)
        dsc_fq_push(&fq, greedy, &mk(0, 1u << 20)->q, 1);
    for (int i = 0; i < 3000; i++)
        dsc_fq_push(&fq, paced, &mk(1, 64u << 10)->q, 1);
    CHECK_EQ_INT(fq.queued, 3800);
    uint64_t sent[4] = {0};
    drain(&fq, 1000, sent);
    uint64_t diff = sent[0] > sent[1] ? sent[0] - sent[1] : sent[1] - sent[0];
    CHECK(sent[0] > 0 && sent[1] > 0);
    CHECK(diff <= (256u << 10) + (1u << 20));
    /* FIFO would have sent 1000 greedy items first: none of the paced one's. */
    free_rest(&fq);
    CHECK_EQ_INT(fq.queued, 0);
    CHECK(fq.active_head == NULL);
    dsc_fq_flow_put(&fq, greedy);
    dsc_fq_flow_put(&fq, paced);
    CHECK(fq.named == NULL);
    dsc_fq_destroy(&fq);
}

/* Weights 3:1: bytes sent in that ratio while both are backlogged. */
static void test_weights(void) {
    dsc_fq_t fq;
    dsc_fq_init(&fq, 64u << 10, 0, NULL);
    dsc_fq_flow_t *a = dsc_fq_flow_get(&fq, NULL, "prod", 3),
                  *b = dsc_fq_flow_get(&fq, NULL, NULL, 0);
    REQUIRE(a && b);
    CHECK_EQ_INT(b->weight, 1);
    dsc_fq_flow_t *c = dsc_fq_flow_get(&fq, NULL, "", 1);
    CHECK(c != b && !c->shared && fq.named == a); /* private flows are never shared */
    dsc_fq_flow_put(&fq, c);
    for (int i = 0; i < 4000; i++) {
        dsc_fq_push(&fq, a, &mk(0, 4096)->q, 1);
        dsc_fq_push(&fq, b, &mk(1, 4096)->q, 1);
    }
    uint64_t sent[4] = {0};
    drain(&fq, 4000, sent);
    double ratio = (double)sent[0] / (double)sent[1];
    CHECK(ratio > 2.9 && ratio < 3.1);
    free_rest(&fq);
    dsc_fq_flow_put(&fq, a);
    dsc_fq_flow_put(&fq, b);
    dsc_fq_destroy(&fq);
}

/* A flow that went idle does not bank its unused turns: when it comes back it is served in
 * turn, not for a burst; and FIFO mode keeps arrival order across flows. */
static void test_idle_and_fifo(void) {
    dsc_fq_t fq;
    dsc_fq_init(&fq, 8192, 0, NULL);
    dsc_fq_flow_t *a = dsc_fq_flow_get(&fq, NULL, "a", 1), *b = dsc_fq_flow_get(&fq, NULL, "b", 1);
    for (int i = 0; i < 100; i++)
        dsc_fq_push(&fq, a, &mk(0, 4096)->q, 1);
    uint64_t sent[4] = {0};
    drain(&fq, 50, sent); /* b idle meanwhile */
    for (int i = 0; i < 100; i++)
        dsc_fq_push(&fq, b, &mk(1, 4096)->q, 1);
    memset(sent, 0, sizeof sent);
    drain(&fq, 20, sent);
    CHECK(sent[1] <= 12 * 4096 && sent[0] >= 8 * 4096); /* alternating by quantum, no burst */
    free_rest(&fq);

    dsc_fq_t ff;
    dsc_fq_init(&ff, 8192, 1, NULL);
    dsc_fq_flow_t *x = dsc_fq_flow_get(&ff, NULL, "x", 1), *y = dsc_fq_flow_get(&ff, NULL, "y", 1);
    int order[6] = {0, 0, 1, 0, 1, 1};
    for (int i = 0; i < 6; i++)
        dsc_fq_push(&ff, order[i] ? y : x, &mk(order[i], 1 + (uint64_t)i * 100000)->q, 1);
    for (int i = 0; i < 6; i++) {
        item_t *it = (item_t *)dsc_fq_pop(&ff, 2);
        REQUIRE(it != NULL);
        CHECK_EQ_INT(it->owner, order[i]);
        CHECK_EQ_INT(it->q.bytes, 1 + (uint64_t)i * 100000);
        free(it);
    }
    CHECK(dsc_fq_pop(&ff, 3) == NULL);
    dsc_fq_flow_put(&ff, x);
    dsc_fq_flow_put(&ff, y);
    dsc_fq_destroy(&ff);
    dsc_fq_flow_put(&fq, a);
    dsc_fq_flow_put(&fq, b);
    dsc_fq_destroy(&fq);
}

static int of_conn(dsc_fq_item_t *q, void *arg) {
    item_t *it = (item_t *)q;
    if (it->conn != *(int *)arg)
        return 0;
    free(it);
    return 1;
}

/* A closing connection's items leave a shared flow; a flow whose last reference went while it
 * had items is freed with its last item, its totals kept. */
static void test_remove_and_totals(void) {
    dsc_fq_totals_t tot;
    dsc_fq_totals_init(&tot);
    dsc_fq_t fq;
    dsc_fq_init(&fq, 0, 0, &tot);
    CHECK_EQ_INT(fq.quantum, DSC_FQ_QUANTUM);
    dsc_fq_flow_t *j = dsc_fq_flow_get(&fq, NULL, "job", 2);
    for (int i = 0; i < 10; i++) {
        item_t *it = mk(0, 1000);
        it->conn = i % 2;
        dsc_fq_push(&fq, j, &it->q, 100);
    }
    int conn = 1;
    CHECK_EQ_INT(dsc_fq_remove(&fq, j, of_conn, &conn), 5);
    CHECK_EQ_INT(j->queued, 5);
    CHECK_EQ_INT(fq.queued_bytes, 5000);
    dsc_fq_flow_put(&fq, j); /* last reference, items still queued: kept until they go */
    CHECK(fq.named == j);
    for (int i = 0; i < 5; i++) {
        item_t *it = (item_t *)dsc_fq_pop(&fq, 100 + 1000000);
        REQUIRE(it != NULL);
        CHECK_EQ_INT(it->conn, 0);
        free(it);
    }
    CHECK(fq.named == NULL && fq.active_head == NULL);
    dsc_fq_total_t out[4];
    CHECK_EQ_INT(dsc_fq_totals_snapshot(&tot, out, 4), 1);
    CHECK(strcmp(out[0].name, "job") == 0);
    CHECK_EQ_INT(out[0].weight, 2);
    CHECK_EQ_INT(out[0].sent_bytes, 5000);
    CHECK_EQ_INT(out[0].sent_items, 5);
    CHECK_EQ_INT(out[0].queue_ns, 5 * 1000000);
    dsc_fq_destroy(&fq);
    dsc_fq_totals_destroy(&tot);
}

/* The token bucket: a burst, then the rate; empty: how long to wait. */
static void test_budget(void) {
    dsc_fq_budget_t b;
    dsc_fq_budget_init(&b, 1000000, 100000); /* 1 MB/s, 100 kB burst */
    uint64_t wait = 0;
    CHECK(dsc_fq_budget_take(&b, 1000000000, &wait) == 100000.0 && wait == 0);
    dsc_fq_budget_spend(&b, 150000, 0); /* over by 50 kB */
    double t = dsc_fq_budget_take(&b, 1000000000, &wait);
    CHECK(t < 0 && wait > 49000000 && wait < 51000000); /* 50 ms */
    dsc_fq_budget_spend(&b, 0, 1);
    t = dsc_fq_budget_take(&b, 1000000000 + 60000000, &wait); /* 60 ms later: 10 kB */
    CHECK(t > 9999 && t < 10001 && wait == 0);
    dsc_fq_budget_spend(&b, 0, 0);
    t = dsc_fq_budget_take(&b, 1000000000 + 10000000000ull, &wait); /* capped at the burst */
    CHECK(t == 100000.0);
    dsc_fq_budget_spend(&b, 0, 0);
    CHECK_EQ_INT(b.waits, 1);
    dsc_fq_budget_destroy(&b);
    dsc_fq_budget_init(&b, 0, 0);
    CHECK(dsc_fq_budget_take(&b, 5, &wait) > 1e17);
    dsc_fq_budget_spend(&b, 1u << 30, 0);
    CHECK(dsc_fq_budget_take(&b, 6, &wait) > 1e17);
    dsc_fq_budget_spend(&b, 0, 0);
    dsc_fq_budget_destroy(&b);
}

static void test_parse_weight(void) {
    char owner[DSC_FQ_NAME_MAX], name[DSC_FQ_NAME_MAX];
    uint32_t w = 0;
    CHECK_EQ_INT(dsc_fq_parse_weight("team-a/llama=4", owner, name, &w), 0);
    CHECK(strcmp(name, "team-a/llama") == 0 && owner[0] == '\0' && w == 4);
    CHECK_EQ_INT(dsc_fq_parse_weight("x=1000", owner, name, &w), 0);
    /* A credential before the first ':' (credential names hold no ':' or '/'). */
    CHECK_EQ_INT(dsc_fq_parse_weight("alice:train:v2=3", owner, name, &w), 0);
    CHECK(strcmp(owner, "alice") == 0 && strcmp(name, "train:v2") == 0 && w == 3);
    CHECK_EQ_INT(dsc_fq_parse_weight("a/b:c=2", owner, name, &w), 0); /* "a/b" is no credential */
    CHECK(owner[0] == '\0' && strcmp(name, "a/b:c") == 0);
    CHECK_EQ_INT(dsc_fq_parse_weight(":c=2", owner, name, &w), 0);
    CHECK(owner[0] == '\0' && strcmp(name, ":c") == 0);
    const char *bad[] = {"x", "=3", "x=", "x=0", "x=1001", "x=3a", "x=-1", "sp ace=2", "x=+2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_EQ_INT(dsc_fq_parse_weight(bad[i], owner, name, &w), DSC_EINVAL);
}

/* A job is (credential, name): another credential's job of the same name is another flow, with
 * its own weight. */
static void test_owner_flows(void) {
    dsc_fq_t fq;
    dsc_fq_init(&fq, 0, 0, NULL);
    dsc_fq_flow_t *a = dsc_fq_flow_get(&fq, "alice", "train", 3);
    dsc_fq_flow_t *b = dsc_fq_flow_get(&fq, "bob", "train", 1);
    CHECK(a != NULL && b != NULL && a != b);
    CHECK(a->weight == 3 && b->weight == 1);
    dsc_fq_flow_t *a2 = dsc_fq_flow_get(&fq, "alice", "train", 1);
    CHECK(a2 == a);
    dsc_fq_flow_put(&fq, a2);
    dsc_fq_flow_put(&fq, a);
    dsc_fq_flow_put(&fq, b);
    dsc_fq_destroy(&fq);
}

int main(void) {
    test_owner_flows();
    test_equal_shares();
    test_weights();
    test_idle_and_fifo();
    test_remove_and_totals();
    test_budget();
    test_parse_weight();
    return TEST_DONE();
}
