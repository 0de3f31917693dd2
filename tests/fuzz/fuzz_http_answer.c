/* libFuzzer target for the answer parser of the loader's HTTP-port probe (client/lib/source/conn.h,
 * dsc_conn_http_answer_parse): any bytes from a peer, cut anywhere, never read out of bounds; a
 * port is only reported for an answer that starts with "HTTP/", and is in 1..65535. */
#include "conn.h"

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
    uint16_t port = 12345;
    int http = dsc_conn_http_answer_parse(buf, size, &port);
    FUZZ_ASSERT(http == 0 || http == 1);
    FUZZ_ASSERT(http == (size >= 5 && memcmp(buf, "HTTP/", 5) == 0));
    FUZZ_ASSERT(http || port == 0);
    free(buf);
    return 0;
}
