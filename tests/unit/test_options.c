/* dsc_loader_options_fill (and dsc_loader_options_init2, its earlier name) and dsc_loader_create
 * with an older, smaller options struct: fill writes only the caller's bytes (guard bytes after a
 * truncated copy of the struct stay), create reads only struct_size bytes (the struct is
 * heap-allocated to its size, so ASan sees a read past it) and gives the missing fields their
 * defaults; a struct smaller than the first version is refused, and dsc_loader_last_error says why
 * create failed. */
#include "dscache.h"
#include "testlib.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* dsc_loader_options_t as it was before max_held_bytes. */
typedef struct old_options {
    size_t struct_size;
    const char *servers, *dataset;
    uint32_t batch_size;
    uint64_t seed;
    uint32_t rank, world_size;
    int shuffle;
    uint32_t shuffle_window;
    int drop_last;
    uint32_t prefetch_batches;
    uint64_t inflight_bytes;
    uint32_t decode_threads, connections;
    int device;
    uint32_t timeout_ms, replicas;
    const char *fallback_path;
    dsc_log_fn log_fn;
    void *log_ctx;
    int log_level;
    double stats_log_seconds;
    uint64_t cache_bytes, server_inflight_bytes;
    int no_assist;
} old_options_t;

int main(void) {
    CHECK(sizeof(old_options_t) < sizeof(dsc_loader_options_t));
    CHECK(offsetof(old_options_t, no_assist) == offsetof(dsc_loader_options_t, no_assist));

    /* fill, and init2 as a program built against that name calls it, into a truncated struct
     * followed by guard bytes. */
    for (int alias = 0; alias < 2; alias++) {
        unsigned char mem[sizeof(dsc_loader_options_t) + 64];
        memset(mem, 0xA5, sizeof mem);
        dsc_loader_options_t *into = (dsc_loader_options_t *)(void *)mem;
        REQUIRE((alias ? dsc_loader_options_init2(into, sizeof(old_options_t))
                       : dsc_loader_options_fill(into, sizeof(old_options_t))) == 0);
        old_options_t old;
        memcpy(&old, mem, sizeof old);
        CHECK(old.struct_size == sizeof(old_options_t));
        CHECK(old.batch_size == 32 && old.prefetch_batches == 4 && old.replicas == 0);
        for (size_t i = sizeof(old_options_t); i < sizeof mem; i++)
            CHECK(mem[i] == 0xA5);
    }
    /* A newer, larger struct (a program built against a later header): its extra bytes are
     * zeroed. */
    unsigned char big[sizeof(dsc_loader_options_t) + 32];
    memset(big, 0xA5, sizeof big);
    REQUIRE(dsc_loader_options_fill((dsc_loader_options_t *)(void *)big, sizeof big) == 0);
    for (size_t i = sizeof(dsc_loader_options_t); i < sizeof big; i++)
        CHECK(big[i] == 0);

    /* The full struct: the macro passes its size, the old symbol fills it all. */
    dsc_loader_options_t full, plain;
    memset(&full, 0x5A, sizeof full);
    REQUIRE(DSC_LOADER_OPTIONS_INIT(&full) == 0);
    dsc_loader_options_init(&plain);
    CHECK(full.struct_size == sizeof full && plain.struct_size == sizeof plain);
    CHECK(full.max_held_bytes == (1ull << 30) && plain.max_held_bytes == full.max_held_bytes);
    CHECK(dsc_loader_options_fill(&full, 16) == DSC_EINVAL);
    CHECK(dsc_loader_options_fill(NULL, sizeof full) == DSC_EINVAL);
    CHECK(dsc_loader_options_init2(&full, 16) == DSC_EINVAL);

    /* create reads only the old struct: a fallback directory that does not exist fails at the
     * files, not at the options. */
    old_options_t *o = malloc(sizeof *o);
    REQUIRE(o != NULL);
    REQUIRE(dsc_loader_options_fill((dsc_loader_options_t *)o, sizeof *o) == 0);
    o->dataset = "ds";
    o->fallback_path = "/nonexistent/dscache-test-options";
    dsc_loader_t *l = NULL;
    int rc = dsc_loader_create((const dsc_loader_options_t *)o, &l);
    CHECK(rc < 0 && rc != DSC_EINVAL && l == NULL);
    char why[512];
    CHECK(dsc_loader_last_error(NULL, why, sizeof why) > 0);
    printf("old struct, missing directory: %s: %s\n", dsc_err_name(rc), why);

    /* Smaller than the first version: refused, and said so. */
    o->struct_size = offsetof(dsc_loader_options_t, cache_bytes) - 8;
    CHECK(dsc_loader_create((const dsc_loader_options_t *)o, &l) == DSC_EINVAL);
    CHECK(dsc_loader_last_error(NULL, why, sizeof why) > 0 && strstr(why, "struct_size") != NULL);
    free(o);
    return TEST_DONE();
}
