/* libFuzzer target: parses the input as a manifest; whatever is accepted must serialize and
 * parse back to the same manifest and the same text, and be JSON that cJSON accepts whole (the
 * parser's own allocation-free syntax check is never more lenient than cJSON). */
#include "manifest.h"

#include <cjson/cJSON.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A property violation, not a crash on input: stop loudly in every build. */
#define FUZZ_ASSERT(cond)                                                                          \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dsc_manifest_t *first = NULL, *second = NULL;
    int rc = dsc_manifest_parse((const char *)data, size, &first);
    if (rc < 0) {
        FUZZ_ASSERT(first == NULL && strcmp(dsc_err_name(rc), "DSC_UNKNOWN") != 0);
        return 0;
    }
    cJSON *whole = cJSON_ParseWithLength((const char *)data, size);
    FUZZ_ASSERT(whole != NULL);
    cJSON_Delete(whole);
    char *text = dsc_manifest_to_json(first);
    FUZZ_ASSERT(text != NULL);
    FUZZ_ASSERT(dsc_manifest_parse(text, strlen(text), &second) == 0);
    char *again = dsc_manifest_to_json(second);
    FUZZ_ASSERT(again != NULL && strcmp(text, again) == 0);
    FUZZ_ASSERT(strcmp(first->name, second->name) == 0);
    FUZZ_ASSERT(dsc_schema_equal(&first->schema, &second->schema));
    FUZZ_ASSERT(first->schema.sample_bytes == second->schema.sample_bytes);
    FUZZ_ASSERT(first->samples == second->samples && first->bytes == second->bytes);
    FUZZ_ASSERT(first->schema.var_count == second->schema.var_count);
    FUZZ_ASSERT(memcmp(first->field_stats, second->field_stats, sizeof first->field_stats) == 0);
    FUZZ_ASSERT((first->meta_json == NULL) == (second->meta_json == NULL));
    FUZZ_ASSERT(first->meta_json == NULL || strcmp(first->meta_json, second->meta_json) == 0);
    FUZZ_ASSERT(first->shard_count == second->shard_count);
    FUZZ_ASSERT(memcmp(first->shards, second->shards, first->shard_count * sizeof *first->shards) ==
                0);
    /* Every sample maps to the shard that holds it. */
    if (first->samples > 0) {
        int64_t last = dsc_manifest_find_sample(first, first->samples - 1);
        FUZZ_ASSERT(last >= 0 && first->shards[last].samples > 0);
        int64_t zero = dsc_manifest_find_sample(first, 0);
        FUZZ_ASSERT(zero >= 0 && first->shards[zero].first_sample == 0 &&
                    first->shards[zero].samples > 0);
    }
    FUZZ_ASSERT(dsc_manifest_find_sample(first, first->samples) == -1);
    free(again);
    free(text);
    dsc_manifest_free(second);
    dsc_manifest_free(first);
    return 0;
}
