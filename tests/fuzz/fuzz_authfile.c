/* libFuzzer target: credential files and client token files (proto/auth.h) as read from disk:
 * every line through dsc_auth_line_parse, the whole text through dsc_auth_token_parse; what is
 * accepted must satisfy the validity rules the server and client rely on. */
#include "auth.h"

#include <stdint.h>
#include <string.h>

#define FUZZ_ASSERT(cond)                                                                          \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

static int inside(const char *p, size_t n, const char *base, size_t len) {
    return p >= base && n <= len && (size_t)(p - base) <= len - n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    size_t start = 0;
    while (start < size) {
        const char *nl = memchr(text + start, '\n', size - start);
        size_t end = nl ? (size_t)(nl - text) : size;
        dsc_auth_line_t line;
        const char *why = NULL;
        int rc = dsc_auth_line_parse(text + start, end - start, &line, &why);
        FUZZ_ASSERT(rc == 1 || rc == 0 || (rc == DSC_EINVAL && why != NULL));
        if (rc == 1) {
            FUZZ_ASSERT(dsc_auth_name_valid(line.name.ptr, line.name.len));
            FUZZ_ASSERT(dsc_auth_secret_valid(line.secret.ptr, line.secret.len));
            FUZZ_ASSERT(line.role == DSC_ROLE_READ || line.role == DSC_ROLE_ADMIN);
            FUZZ_ASSERT(inside(line.datasets, line.datasets_len, text + start, end - start));
            size_t pos = 0;
            uint32_t count = 0;
            dsc_str_t ds;
            while (dsc_auth_line_next_dataset(&line, &pos, &ds) == 1) {
                FUZZ_ASSERT(ds.len >= 1 && ds.len <= DSC_MAX_NAME - 1);
                FUZZ_ASSERT(memchr(ds.ptr, '\0', ds.len) == NULL);
                count++;
            }
            FUZZ_ASSERT(count == line.dataset_count);
        }
        start = end + 1;
    }
    dsc_str_t name, secret;
    const char *why = NULL;
    if (dsc_auth_token_parse(text, size, &name, &secret, &why) == 0) {
        FUZZ_ASSERT(dsc_auth_name_valid(name.ptr, name.len));
        FUZZ_ASSERT(dsc_auth_secret_valid(secret.ptr, secret.len));
        FUZZ_ASSERT(inside(secret.ptr, secret.len, text, size));
    } else {
        FUZZ_ASSERT(why != NULL);
    }
    return 0;
}
