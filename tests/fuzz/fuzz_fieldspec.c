/* libFuzzer target for field specs (proto/fieldspec.h): the parsers never crash nor read past the
 * text; a refusal points inside it and renders a message; what they accept formats back to a
 * spec that parses to the same field (one field, a type alone, and a list). */
#include "fieldspec.h"

#include <stdint.h>
#include <string.h>

#define FUZZ_ASSERT(cond)                                                                          \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

static int same_field(const dsc_field_t *a, const dsc_field_t *b) {
    if (strcmp(a->name, b->name) != 0 || a->dtype != b->dtype || a->ndim != b->ndim)
        return 0;
    for (uint32_t d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            return 0;
    return 1;
}

static void check_refusal(const char *text, size_t size, const dsc_fieldspec_error_t *err) {
    FUZZ_ASSERT(err->what != NULL && err->hint != NULL);
    FUZZ_ASSERT(err->pos + err->len <= size && err->item + err->item_len <= size);
    char msg[512];
    int n = dsc_fieldspec_message(text, size, err, msg, sizeof msg);
    FUZZ_ASSERT(n > 0 && strlen(msg) == ((size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    dsc_fieldspec_error_t err;
    for (unsigned flags = 0; flags <= (DSC_FIELDSPEC_TYPE_ONLY | DSC_FIELDSPEC_SIZED); flags++) {
        dsc_field_t f, again;
        int rc = dsc_fieldspec_parse(text, size, flags, &f, &err);
        FUZZ_ASSERT(rc == 0 || rc == DSC_EINVAL);
        if (rc < 0) {
            check_refusal(text, size, &err);
            continue;
        }
        FUZZ_ASSERT(f.dtype >= DSC_DTYPE_U8 && f.dtype <= DSC_DTYPE_F64);
        FUZZ_ASSERT(f.ndim <= DSC_MAX_DIMS);
        FUZZ_ASSERT((flags & DSC_FIELDSPEC_TYPE_ONLY) || f.name[0] != '\0');
        for (uint32_t d = 1; d < f.ndim; d++)
            FUZZ_ASSERT(f.shape[d] != DSC_DIM_VARIABLE);
        char spec[DSC_FIELDSPEC_MAX];
        int n = dsc_fieldspec_format(&f, spec, sizeof spec);
        FUZZ_ASSERT(n > 0 && (size_t)n == strlen(spec));
        FUZZ_ASSERT(dsc_fieldspec_parse(spec, (size_t)n, flags, &again, NULL) == 0);
        FUZZ_ASSERT(same_field(&f, &again));
    }
    dsc_schema_t s, again;
    int rc = dsc_fieldspec_parse_list(text, size, &s, &err);
    FUZZ_ASSERT(rc == 0 || rc == DSC_EINVAL);
    if (rc < 0) {
        check_refusal(text, size, &err);
        return 0;
    }
    FUZZ_ASSERT(s.field_count >= 1 && s.field_count <= DSC_MAX_FIELDS);
    char list[DSC_MAX_FIELDS * (DSC_FIELDSPEC_MAX + 1)];
    size_t at = 0;
    for (uint32_t i = 0; i < s.field_count; i++) {
        if (i)
            list[at++] = ',';
        int n = dsc_fieldspec_format(&s.fields[i], list + at, sizeof list - at);
        FUZZ_ASSERT(n > 0);
        at += (size_t)n;
    }
    FUZZ_ASSERT(dsc_fieldspec_parse_list(list, at, &again, NULL) == 0);
    FUZZ_ASSERT(dsc_schema_equal(&s, &again));
    return 0;
}
