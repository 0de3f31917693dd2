/* The packing row builder (client/lib/loader/pack.c): documents of a long-tailed length
 * distribution (1 .. 8192 tokens) packed into rows of 4096 and unpacked again through the segment
 * arrays: every token exactly once, in order, efficiency >= 99% when split; cut mode; the layout
 * arrays (position_ids, document_ids, cu_seqlens) agree with the segments. */
#include "pack.h"
#include "testlib.h"

#include <math.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return rng_state;
}
/* Token counts of real text are about log-normal: median ~400, a long tail cut at 8192. */
static uint64_t doc_length(void) {
    double u1 = ((double)(rnd() >> 11) + 1) / 9007199254740993.0;
    double u2 = (double)(rnd() >> 11) / 9007199254740992.0;
    double z = sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
    double len = exp(6.0 + 1.3 * z);
    if (len < 1)
        len = 1;
    if (len > 8192)
        len = 8192;
    return (uint64_t)len;
}
static int32_t token(uint64_t doc, uint64_t k) {
    return (int32_t)(doc * 100003u + k);
}

#define DOCS 3000

static uint64_t lens[DOCS];
static uint64_t seen[DOCS]; /* tokens of each document seen so far, in order */

/* Checks one finished batch against the documents and marks their tokens seen. */
static void check_batch(const dsc_pack_rows_t *p, uint32_t rows) {
    const int32_t *tok = (const int32_t *)p->tokens;
    CHECK_EQ_INT(p->cu_seqlens[0], 0);
    CHECK_EQ_INT(p->cu_seqlens[p->segments], (int64_t)rows * p->length);
    uint64_t used = 0;
    for (uint32_t s = 0; s < p->segments; s++) {
        int32_t a = p->cu_seqlens[s], b = p->cu_seqlens[s + 1];
        REQUIRE(b > a);
        CHECK((uint32_t)a / p->length == (uint32_t)(b - 1) / p->length); /* within one row */
        int64_t d = p->segment_index[s];
        for (int32_t t = a; t < b; t++) {
            CHECK_EQ_INT(p->document_ids[t], d < 0 ? -1 : (int32_t)s);
            CHECK_EQ_INT(p->position_ids[t], d < 0 ? 0 : t - a);
            if (d < 0)
                CHECK_EQ_INT(tok[t], 0);
        }
        if (d < 0)
            continue;
        REQUIRE(d < DOCS);
        /* The segment continues the document exactly where its last segment stopped. */
        CHECK_EQ_INT(p->segment_start[s], (int64_t)seen[d]);
        for (int32_t t = a; t < b; t++)
            CHECK_EQ_INT(tok[t], token((uint64_t)d, seen[d] + (uint64_t)(t - a)));
        seen[d] += (uint64_t)(b - a);
        used += (uint64_t)(b - a);
    }
    CHECK_EQ_INT(used, p->tokens_used);
}

/* Packs all documents (each given as one call sequence, as the packer does) and checks. */
static void run(int cut, uint32_t rows, uint32_t length, double *efficiency, uint64_t *cut_tokens) {
    dsc_pack_rows_t p;
    REQUIRE(dsc__pack_rows_init(&p, rows, length, sizeof(int32_t), cut) == 0);
    memset(seen, 0, sizeof seen);
    int32_t *buf = malloc(8192 * sizeof(int32_t));
    REQUIRE(buf != NULL);
    uint64_t slots = 0, tokens = 0, docs = 0, cut_total = 0;
    dsc__pack_rows_reset(&p);
    for (uint64_t d = 0; d < DOCS; d++) {
        for (uint64_t k = 0; k < lens[d]; k++)
            buf[k] = token(d, k);
        uint64_t off = 0;
        while (!dsc__pack_rows_place(&p, (int64_t)d, (const uint8_t *)buf, lens[d], &off)) {
            uint32_t r = dsc__pack_rows_finish(&p);
            CHECK_EQ_INT(r, rows);
            check_batch(&p, r);
            slots += (uint64_t)r * length, tokens += p.tokens_used, docs += p.documents;
            cut_total += p.cut_tokens;
            dsc__pack_rows_reset(&p);
        }
    }
    uint32_t r = dsc__pack_rows_finish(&p);
    check_batch(&p, r);
    slots += (uint64_t)r * length, tokens += p.tokens_used, docs += p.documents;
    cut_total += p.cut_tokens;
    CHECK_EQ_INT(docs, DOCS);
    uint64_t want = 0;
    for (uint64_t d = 0; d < DOCS; d++) {
        uint64_t expect = cut && lens[d] > length ? length : lens[d];
        CHECK_EQ_INT(seen[d], expect); /* every token exactly once */
        want += lens[d];
    }
    CHECK_EQ_INT(tokens + cut_total, want);
    *efficiency = (double)tokens / (double)slots;
    *cut_tokens = cut_total;
    free(buf);
    dsc__pack_rows_free(&p);
}

int main(void) {
    uint64_t total = 0, longest = 0;
    for (int d = 0; d < DOCS; d++) {
        lens[d] = doc_length();
        total += lens[d];
        if (lens[d] > longest)
            longest = lens[d];
    }
    printf("documents %d, tokens %llu, mean %.0f, longest %llu\n", DOCS, (unsigned long long)total,
           (double)total / DOCS, (unsigned long long)longest);
    double eff;
    uint64_t cut_tokens;
    run(0, 8, 4096, &eff, &cut_tokens);
    printf("split, rows of 4096: efficiency %.4f\n", eff);
    CHECK(eff >= 0.99);
    CHECK_EQ_INT(cut_tokens, 0);
    run(0, 1, 1, &eff, &cut_tokens); /* one token per row: every token its own segment */
    CHECK(eff == 1.0);
    run(1, 8, 4096, &eff, &cut_tokens);
    printf("cut, rows of 4096: efficiency %.4f, tokens cut %llu\n", eff,
           (unsigned long long)cut_tokens);
    CHECK(cut_tokens > 0);
    run(1, 3, 2048, &eff, &cut_tokens);

    /* A 0-token document is counted and takes no room; a split document is counted once. */
    dsc_pack_rows_t p;
    REQUIRE(dsc__pack_rows_init(&p, 2, 4, sizeof(int32_t), 0) == 0);
    dsc__pack_rows_reset(&p);
    int32_t seven[7] = {1, 2, 3, 4, 5, 6, 7};
    uint64_t off = 0;
    CHECK_EQ_INT(dsc__pack_rows_place(&p, 0, (const uint8_t *)seven, 0, &off), 1);
    off = 0;
    CHECK_EQ_INT(dsc__pack_rows_place(&p, 1, (const uint8_t *)seven, 7, &off), 1);
    CHECK_EQ_INT(p.documents, 2);
    CHECK_EQ_INT(p.split_documents, 1);
    CHECK_EQ_INT(p.segments, 2);
    off = 0;
    CHECK_EQ_INT(dsc__pack_rows_place(&p, 2, (const uint8_t *)seven, 3, &off), 0);
    CHECK_EQ_INT(off, 1); /* the batch filled after one token */
    CHECK(dsc__pack_rows_full(&p));
    CHECK_EQ_INT(dsc__pack_rows_finish(&p), 2);
    CHECK_EQ_INT(p.position_ids[4], 0); /* the second row restarts the positions */
    dsc__pack_rows_free(&p);
    dsc__pack_rows_free(NULL);
    return TEST_DONE();
}
