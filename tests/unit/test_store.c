/* RAM store and catalog: extent allocation and coalescing, loads shared by concurrent misses,
 * the reference-count rule (a referenced shard is never evicted), lru eviction, minio
 * read-through, corrupt shards marked bad. */
#include "catalog.h"
#include "manifest_io.h"
#include "protocol.h"
#include "store.h"
#include "testlib.h"
#include "util.h"

#include <stdatomic.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- a small dataset written with the format codecs ------------------------------------- */

#define SAMPLE_BYTES 4096
#define CHUNK_SAMPLES 16

static dsc_schema_t schema(void) {
    dsc_schema_t s;
    memset(&s, 0, sizeof s);
    s.field_count = 1;
    snprintf(s.fields[0].name, sizeof s.fields[0].name, "x");
    s.fields[0].dtype = DSC_DTYPE_U8;
    s.fields[0].ndim = 1;
    s.fields[0].shape[0] = SAMPLE_BYTES;
    REQUIRE(dsc_schema_finish(&s) == 0);
    return s;
}

/* Writes DIR/shard-N.dsc with `samples` raw samples; fills the manifest entry. */
static void write_shard(const char *dir, const char *name, uint32_t id, uint32_t samples,
                        dsc_manifest_shard_t *meta) {
    dsc_shard_header_t h;
    memset(&h, 0, sizeof h);
    h.version = DSC_SHARD_VERSION;
    h.shard_id = id;
    h.sample_count = samples;
    h.chunk_samples = CHUNK_SAMPLES;
    snprintf(h.dataset, sizeof h.dataset, "%s", name);
    h.schema = schema();
    uint32_t chunks = (samples + CHUNK_SAMPLES - 1) / CHUNK_SAMPLES;
    size_t cap = DSC_SHARD_MAX_HEADER + (size_t)samples * SAMPLE_BYTES +
                 (size_t)chunks * DSC_CHUNK_ENTRY_SIZE + DSC_SHARD_FOOTER_SIZE;
    uint8_t *file = calloc(1, cap);
    uint8_t *raw = malloc(CHUNK_SAMPLES * SAMPLE_BYTES);
    REQUIRE(file && raw);
    int hl = dsc_shard_header_encode(&h, file, DSC_SHARD_MAX_HEADER);
    REQUIRE(hl > 0);
    size_t pos = (size_t)hl;
    uint8_t *index = malloc((size_t)chunks * DSC_CHUNK_ENTRY_SIZE);
    for (uint32_t c = 0; c < chunks; c++) {
        uint32_t n = samples - c * CHUNK_SAMPLES < CHUNK_SAMPLES ? samples - c * CHUNK_SAMPLES
                                                                 : CHUNK_SAMPLES;
        for (size_t i = 0; i < (size_t)n * SAMPLE_BYTES; i++)
            raw[i] = (uint8_t)(id * 31 + c * 7 + i);
        dsc_chunk_entry_t e;
        memset(&e, 0, sizeof e);
        const void *stored;
        REQUIRE(dsc_chunk_encode(DSC_CODEC_RAW, 0, raw, (size_t)n * SAMPLE_BYTES, file + pos,
                                 cap - pos, &e, &stored) == 0);
        if (stored != file + pos)
            memcpy(file + pos, stored, e.stored_len);
        e.offset = pos;
        e.first_sample = (uint64_t)c * CHUNK_SAMPLES;
        e.sample_count = n;
        dsc_chunk_entry_encode(&e, index + (size_t)c * DSC_CHUNK_ENTRY_SIZE);
        pos += e.stored_len;
    }
    dsc_shard_footer_t f = {.index_offset = pos, .chunk_count = chunks};
    f.index_checksum = dsc_checksum(index, (size_t)chunks * DSC_CHUNK_ENTRY_SIZE);
    memcpy(file + pos, index, (size_t)chunks * DSC_CHUNK_ENTRY_SIZE);
    pos += (size_t)chunks * DSC_CHUNK_ENTRY_SIZE;
    dsc_shard_footer_encode(&f, file + pos);
    pos += DSC_SHARD_FOOTER_SIZE;
    dsc_shard_view_t view;
    REQUIRE(dsc_shard_parse(file, pos, &view) == 0);

    memset(meta, 0, sizeof *meta);
    meta->id = id;
    snprintf(meta->file, sizeof meta->file, "shard-%u.dsc", id);
    meta->samples = samples;
    meta->bytes = pos;
    meta->chunks = chunks;
    meta->chunk_samples = CHUNK_SAMPLES;
    meta->checksum = dsc_checksum(file, pos);
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, meta->file);
    FILE *out = fopen(path, "wb");
    REQUIRE(out && fwrite(file, 1, pos, out) == pos);
    fclose(out);
    free(index);
    free(raw);
    free(file);
}

static void write_dataset(const char *dir, const char *name, uint32_t shards, uint32_t samples) {
    mkdir(dir, 0755);
    dsc_manifest_t *m = dsc_manifest_alloc(shards);
    REQUIRE(m);
    snprintf(m->name, sizeof m->name, "%s", name);
    m->schema = schema();
    for (uint32_t i = 0; i < shards; i++)
        write_shard(dir, name, i, samples, &m->shards[i]);
    dsc_manifest_finish(m);
    REQUIRE(dsc_manifest_save(dir, m) == 0);
    dsc_manifest_free(m);
}

/* ---- waiting for loads ------------------------------------------------------------------ */

typedef struct test_waiter {
    dsc_waiter_t w; /* first */
    atomic_int done;
} test_waiter_t;

static void on_done(dsc_waiter_t *w) {
    atomic_store(&((test_waiter_t *)w)->done, 1);
}

/* Acquires shard `id`, waiting for a load when needed. Returns the acquire/load status. */
static int get_shard(dsc_catalog_t *cat, dsc_dataset_t *ds, uint32_t id, dsc_hold_t *hold,
                     int *was_hit) {
    test_waiter_t tw;
    memset(&tw, 0, sizeof tw);
    tw.w.fn = on_done;
    int rc = dsc_catalog_acquire(cat, dsc_dataset_shard_slot(ds, id), &tw.w, hold);
    if (was_hit)
        *was_hit = rc == 1;
    if (rc == 1)
        return 0;
    if (rc < 0)
        return rc;
    for (int i = 0; i < 5000 && !atomic_load(&tw.done); i++)
        usleep(1000);
    REQUIRE(atomic_load(&tw.done));
    *hold = tw.w.hold;
    return tw.w.status;
}

/* A read-through hold carries every chunk a whole-shard request asked for and the index, but
 * not the rest of the file: each chunk's stored bytes must verify against its index entry. */
static int hold_chunks_ok(const dsc_hold_t *hold) {
    if (hold->chunk_count == 0)
        return 0;
    for (uint32_t i = 0; i < hold->chunk_count; i++) {
        dsc_chunk_entry_t e;
        dsc_chunk_entry_decode(hold->index + (size_t)i * DSC_CHUNK_ENTRY_SIZE, &e);
        if (e.offset + e.stored_len > hold->size || dsc_chunk_verify(&e, hold->data + e.offset) < 0)
            return 0;
    }
    return 1;
}

static int cached_shards(dsc_catalog_t *cat) {
    dsc_catalog_totals_t t;
    dsc_catalog_totals(cat, &t);
    return (int)t.cached_shards;
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_extents(void) {
    dsc_store_t *s = NULL;
    REQUIRE(dsc_store_create(8u << 20, &s) == 0);
    dsc_store_info_t info;
    dsc_store_info(s, &info);
    CHECK_EQ_INT(info.capacity, 8u << 20);
    CHECK((uintptr_t)dsc_store_base(s) % DSC_STORE_ALIGN == 0);
    uint8_t *a, *b, *c, *d;
    CHECK_EQ_INT(dsc_store_alloc(s, 0, &a), DSC_EINVAL);
    REQUIRE(dsc_store_alloc(s, 3u << 20, &a) == 0);
    REQUIRE(dsc_store_alloc(s, 3u << 20, &b) == 0);
    REQUIRE(dsc_store_alloc(s, 1, &c) == 0); /* rounds to a page */
    memset(a, 1, 3u << 20);
    memset(b, 2, 3u << 20);
    c[0] = 3;
    CHECK(b >= a + (3u << 20) && c >= b + (3u << 20));
    dsc_store_info(s, &info);
    CHECK_EQ_INT(info.used, (6u << 20) + DSC_STORE_PAGE);
    CHECK_EQ_INT(dsc_store_alloc(s, 3u << 20, &d), DSC_ENOSPC);
    CHECK(!dsc_store_fits(s, 3u << 20));
    dsc_store_free(s, a, 3u << 20);
    CHECK(dsc_store_fits(s, 3u << 20));
    /* Best fit: a 1 MiB request goes into the tail hole, not the 3 MiB one. */
    REQUIRE(dsc_store_alloc(s, 1u << 20, &d) == 0);
    CHECK(d > c);
    dsc_store_free(s, b, 3u << 20);
    dsc_store_free(s, d, 1u << 20);
    dsc_store_free(s, c, 1);
    dsc_store_info(s, &info);
    CHECK_EQ_INT(info.used, 0);
    CHECK_EQ_INT(info.free_extents, 1); /* everything coalesced */
    CHECK_EQ_INT(info.largest_free, 8u << 20);
    /* Many small extents freed in a scattered order coalesce back too. */
    uint8_t *p[64];
    for (int i = 0; i < 64; i++)
        REQUIRE(dsc_store_alloc(s, 64u << 10, &p[i]) == 0);
    for (int i = 0; i < 64; i += 2)
        dsc_store_free(s, p[i], 64u << 10);
    dsc_store_info(s, &info);
    CHECK_EQ_INT(info.free_extents, 33);
    for (int i = 1; i < 64; i += 2)
        dsc_store_free(s, p[i], 64u << 10);
    dsc_store_info(s, &info);
    CHECK_EQ_INT(info.free_extents, 1);
    CHECK_EQ_INT(info.allocations, 0);
    dsc_store_destroy(s);
    dsc_store_destroy(NULL);
}

/* Shards of 48 samples x 4 KiB (~197 KiB): a 2 MiB store holds 10 of them. */
#define SHARD_SAMPLES 48

static void test_lru_refcount(const char *dir) {
    dsc_store_t *store = NULL;
    dsc_catalog_t *cat = NULL;
    REQUIRE(dsc_store_create(2u << 20, &store) == 0);
    dsc_catalog_options_t opt = {.policy = DSC_POLICY_LRU, .io_threads = 2};
    REQUIRE(dsc_catalog_create(store, &opt, &cat) == 0);
    REQUIRE(dsc_catalog_add_dir(cat, dir) == 0);
    dsc_dataset_t *ds = dsc_catalog_find(cat, "lru", 3);
    REQUIRE(ds != NULL);
    CHECK(dsc_catalog_find(cat, "lr", 2) == NULL);
    const dsc_manifest_t *m = dsc_dataset_manifest(ds);
    REQUIRE(m->shard_count == 16);

    /* Eight concurrent misses of one shard: one load, every waiter gets the same bytes. */
    {
        test_waiter_t tw[8];
        dsc_hold_t hold[8];
        memset(hold, 0, sizeof hold);
        for (int i = 0; i < 8; i++) {
            memset(&tw[i], 0, sizeof tw[i]);
            tw[i].w.fn = on_done;
            int rc = dsc_catalog_acquire(cat, dsc_dataset_shard_slot(ds, 7), &tw[i].w, &hold[i]);
            CHECK(rc == 0 || rc == 1);
            if (rc == 1)
                atomic_store(&tw[i].done, 2);
        }
        for (int i = 0; i < 8; i++) {
            for (int k = 0; k < 5000 && !atomic_load(&tw[i].done); k++)
                usleep(1000);
            REQUIRE(atomic_load(&tw[i].done));
            if (atomic_load(&tw[i].done) == 1) {
                CHECK_EQ_INT(tw[i].w.status, 0);
                hold[i] = tw[i].w.hold;
            }
            CHECK(hold[i].slot != NULL && hold[i].data == hold[0].data);
        }
        dsc_catalog_totals_t t0;
        dsc_catalog_totals(cat, &t0);
        CHECK_EQ_INT(t0.loads, 1);
        CHECK_EQ_INT(t0.hits + t0.misses, 8);
        for (int i = 0; i < 8; i++)
            dsc_hold_release(cat, &hold[i]);
        CHECK_EQ_INT(dsc_catalog_evict(cat, ds, 7), 1);
    }

    /* Shard 0 is taken first (the least recently used) and kept referenced. */
    dsc_hold_t held;
    int hit;
    REQUIRE(get_shard(cat, ds, 0, &held, &hit) == 0);
    CHECK(!hit && held.slot != NULL && held.temp == NULL);
    CHECK_EQ_INT(held.size, m->shards[0].bytes);
    CHECK(dsc_checksum(held.data, held.size) == m->shards[0].checksum);
    /* Fill the rest of the store several times over; every other shard is released. */
    for (uint32_t round = 0; round < 2; round++)
        for (uint32_t id = 1; id < 16; id++) {
            dsc_hold_t h;
            REQUIRE(get_shard(cat, ds, id, &h, NULL) == 0);
            CHECK(dsc_checksum(h.data, h.size) == m->shards[id].checksum);
            dsc_hold_release(cat, &h);
        }
    dsc_catalog_totals_t t;
    dsc_catalog_totals(cat, &t);
    CHECK(t.evictions > 0);
    CHECK_EQ_INT(t.read_through, 0);
    /* The referenced shard survived every eviction and its bytes are intact. */
    CHECK(dsc_checksum(held.data, held.size) == m->shards[0].checksum);
    dsc_hold_t again;
    REQUIRE(get_shard(cat, ds, 0, &again, &hit) == 0);
    CHECK(hit && again.data == held.data);
    dsc_hold_release(cat, &again);
    /* EVICT does not drop it while held, and does after the release. */
    CHECK_EQ_INT(dsc_catalog_evict(cat, ds, 0), 0);
    dsc_hold_release(cat, &held);
    CHECK(held.slot == NULL);
    dsc_hold_release(cat, &held); /* a zeroed hold is a no-op */
    CHECK_EQ_INT(dsc_catalog_evict(cat, ds, 0), 1);
    int left = cached_shards(cat);
    CHECK_EQ_INT(dsc_catalog_evict(cat, ds, DSC_SHARD_ALL), left); /* evicts what is left */
    CHECK_EQ_INT(cached_shards(cat), 0);
    dsc_store_info_t si;
    dsc_store_info(store, &si);
    CHECK_EQ_INT(si.used, 0);

    /* Everything referenced: a further miss is read through a temporary buffer. */
    dsc_hold_t holds[16];
    uint32_t n = 0;
    for (; n < 16; n++) {
        REQUIRE(get_shard(cat, ds, n, &holds[n], NULL) == 0);
        if (holds[n].temp) {
            CHECK(holds[n].size == m->shards[n].bytes);
            CHECK(hold_chunks_ok(&holds[n]));
            n++;
            break;
        }
    }
    CHECK(n < 16 && holds[n - 1].temp != NULL);
    for (uint32_t i = 0; i < n; i++)
        dsc_hold_release(cat, &holds[i]);
    dsc_catalog_destroy(cat);
    dsc_store_destroy(store);
}

static void test_minio_read_through(const char *dir) {
    dsc_store_t *store = NULL;
    dsc_catalog_t *cat = NULL;
    REQUIRE(dsc_store_create(1u << 20, &store) == 0); /* 2 MiB after rounding */
    dsc_catalog_options_t opt = {.policy = DSC_POLICY_MINIO, .io_threads = 2};
    REQUIRE(dsc_catalog_create(store, &opt, &cat) == 0);
    REQUIRE(dsc_catalog_add_dir(cat, dir) == 0);
    dsc_dataset_t *ds = dsc_catalog_find(cat, "lru", 3);
    REQUIRE(ds);
    int warmed = dsc_catalog_warm_all(cat);
    CHECK(warmed > 0 && warmed < 16);
    int resident = cached_shards(cat);
    CHECK_EQ_INT(resident, warmed);
    /* Misses of a shard the store has no room for: each is read through, correct bytes. */
    uint32_t id = 15;
    dsc_catalog_totals_t before, after;
    dsc_catalog_totals(cat, &before);
    test_waiter_t tw[8];
    dsc_hold_t dummy;
    int queued = 0;
    for (int i = 0; i < 8; i++) {
        memset(&tw[i], 0, sizeof tw[i]);
        tw[i].w.fn = on_done;
        int rc = dsc_catalog_acquire(cat, dsc_dataset_shard_slot(ds, id), &tw[i].w, &dummy);
        CHECK(rc == 0);
        queued += rc == 0;
    }
    CHECK_EQ_INT(queued, 8);
    for (int i = 0; i < 8; i++) {
        for (int k = 0; k < 5000 && !atomic_load(&tw[i].done); k++)
            usleep(1000);
        REQUIRE(atomic_load(&tw[i].done));
        CHECK_EQ_INT(tw[i].w.status, 0);
        CHECK(tw[i].w.hold.temp != NULL); /* the store is full: read through */
        CHECK(tw[i].w.hold.size == dsc_dataset_manifest(ds)->shards[id].bytes);
        CHECK(hold_chunks_ok(&tw[i].w.hold));
    }
    dsc_catalog_totals(cat, &after);
    /* Each miss is read through on its own (chunk ranges of one shard are not shared), and no
     * whole-shard load starts for a shard the store has no room for. */
    CHECK_EQ_INT(after.read_through - before.read_through, 8);
    CHECK_EQ_INT(after.loads - before.loads, 0);
    CHECK_EQ_INT(after.misses - before.misses, 8);
    for (int i = 0; i < 8; i++)
        dsc_hold_release(cat, &tw[i].w.hold);
    /* minio never evicts to make room. */
    for (uint32_t s = 0; s < 16; s++) {
        dsc_hold_t h;
        REQUIRE(get_shard(cat, ds, s, &h, NULL) == 0);
        dsc_hold_release(cat, &h);
    }
    dsc_catalog_totals(cat, &after);
    CHECK_EQ_INT(after.evictions, 0);
    CHECK(cached_shards(cat) >= resident);
    dsc_catalog_destroy(cat);
    dsc_store_destroy(store);
}

/* Shard 1: one byte flipped inside a chunk (header, index, footer intact): resident, that chunk
 * alone known damaged. Shard 2: truncated: refused whole (marked bad). */
static void test_corrupt(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/shard-1.dsc", dir);
    FILE *f = fopen(path, "r+b");
    REQUIRE(f);
    fseek(f, 5000, SEEK_SET);
    int ch = fgetc(f);
    fseek(f, 5000, SEEK_SET);
    fputc(ch ^ 0x10, f);
    fclose(f);
    snprintf(path, sizeof path, "%s/shard-2.dsc", dir);
    struct stat st;
    REQUIRE(stat(path, &st) == 0 && truncate(path, st.st_size - 100) == 0);

    dsc_store_t *store = NULL;
    dsc_catalog_t *cat = NULL;
    REQUIRE(dsc_store_create(8u << 20, &store) == 0);
    REQUIRE(dsc_catalog_create(store, NULL, &cat) == 0);
    REQUIRE(dsc_catalog_add_dir(cat, dir) == 0);
    CHECK_EQ_INT(dsc_catalog_add_dir(cat, dir), DSC_EINVAL); /* the same dataset twice */
    dsc_dataset_t *ds = dsc_catalog_find(cat, "bad", 3);
    REQUIRE(ds);
    dsc_hold_t h;
    /* The chunk holding byte 5000 is the one damaged; every other one verifies. */
    REQUIRE(get_shard(cat, ds, 1, &h, NULL) == 0);
    REQUIRE(h.damage != NULL);
    int64_t bad = -1;
    for (uint32_t i = 0; i < h.chunk_count; i++) {
        dsc_chunk_entry_t e;
        dsc_chunk_entry_decode(h.index + (size_t)i * DSC_CHUNK_ENTRY_SIZE, &e);
        int damaged = dsc_hold_damaged_chunk(&h, i, 1) == (int64_t)i;
        CHECK_EQ_INT(damaged, dsc_chunk_verify(&e, h.data + e.offset) < 0);
        if (e.offset <= 5000 && 5000 < e.offset + e.stored_len)
            bad = i;
    }
    REQUIRE(bad >= 0);
    CHECK_EQ_INT(dsc_hold_damaged_chunk(&h, 0, h.chunk_count), bad);
    dsc_hold_release(cat, &h);
    int hit = 0;
    REQUIRE(get_shard(cat, ds, 1, &h, &hit) == 0); /* resident: a hit, the map with it */
    CHECK(hit && dsc_hold_damaged_chunk(&h, (uint32_t)bad, 1) == bad);
    dsc_hold_release(cat, &h);
    CHECK_EQ_INT(get_shard(cat, ds, 2, &h, NULL), DSC_ECORRUPT);
    CHECK_EQ_INT(get_shard(cat, ds, 2, &h, NULL), DSC_ECORRUPT); /* marked: no second load */
    REQUIRE(get_shard(cat, ds, 0, &h, NULL) == 0);
    CHECK(h.damage == NULL && dsc_hold_damaged_chunk(&h, 0, h.chunk_count) == -1);
    dsc_hold_release(cat, &h);
    dsc_catalog_totals_t t;
    dsc_catalog_totals(cat, &t);
    CHECK_EQ_INT(t.bad_shards, 1);
    CHECK_EQ_INT(t.damaged_shards, 1);
    CHECK_EQ_INT(t.damaged_chunks, 1);
    CHECK_EQ_INT(t.load_failures, 1);
    char text[256];
    uint32_t whole = 0;
    CHECK_EQ_INT(dsc_catalog_damage_text(cat, text, sizeof text, &whole), 2);
    CHECK_EQ_INT(whole, 1);
    CHECK(strstr(text, "bad shard 1 (shard-1.dsc: 1 of ") != NULL);
    CHECK(strstr(text, "bad shard 2 (shard-2.dsc: whole shard refused)") != NULL);
    CHECK_EQ_INT(dsc_catalog_damage_text(cat, text, 8, NULL), 2); /* cut, still terminated */
    CHECK(strlen(text) < 8);
    int nf = 0;
    char *json = dsc_catalog_stat_json(cat, "bad", 3, &nf);
    CHECK(json && strstr(json, "\"bad_shards\":1") && strstr(json, "\"damaged_chunks\":1") &&
          strstr(json, "\"state\":\"chunks\"") && strstr(json, "\"state\":\"bad\""));
    free(json);
    CHECK(dsc_catalog_stat_json(cat, "nope", 4, &nf) == NULL && nf == 1);
    dsc_catalog_destroy(cat);
    dsc_store_destroy(store);
}

int main(void) {
    char dir[] = "/tmp/dsc_test_store.XXXXXX";
    REQUIRE(mkdtemp(dir));
    char lru_dir[600], bad_dir[600];
    snprintf(lru_dir, sizeof lru_dir, "%s/lru", dir);
    snprintf(bad_dir, sizeof bad_dir, "%s/bad", dir);
    write_dataset(lru_dir, "lru", 16, SHARD_SAMPLES);
    write_dataset(bad_dir, "bad", 3, SHARD_SAMPLES);

    test_extents();
    test_lru_refcount(lru_dir);
    test_minio_read_through(lru_dir);
    test_corrupt(bad_dir);

    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return TEST_DONE();
}
