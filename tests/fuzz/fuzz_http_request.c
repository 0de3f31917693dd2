/* libFuzzer target for the HTTP port's request-head parser (server/net/http.h,
 * dsc_http_parse_head): any bytes from a client, cut anywhere, never read out of bounds; a whole
 * head's length is within the input, and its method and path lie inside it, the path starting with
 * '/'. */
#include "http.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_ASSERT(cond)                                                                          \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* An exact-size copy, so that ASan sees any read past the end. */
    char *buf = malloc(size ? size : 1);
    if (buf == NULL)
        return 0;
    memcpy(buf, data, size);
    dsc_http_head_t h;
    int rc = dsc_http_parse_head(buf, size, &h);
    FUZZ_ASSERT(rc == 0 || rc == DSC_EINVAL || (rc > 0 && (size_t)rc <= size));
    if (rc > 0) {
        FUZZ_ASSERT(h.method == buf && h.method_len > 0 && h.method_len < (size_t)rc);
        FUZZ_ASSERT(h.path > buf && h.path + h.path_len <= buf + rc && h.path[0] == '/');
        /* Fed again byte by byte, the head is whole only at its end. */
        for (size_t n = 0; n < (size_t)rc; n++) {
            dsc_http_head_t p;
            FUZZ_ASSERT(dsc_http_parse_head(buf, n, &p) <= 0);
        }
    }
    free(buf);
    return 0;
}
