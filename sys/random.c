/* Cryptographic random bytes for authentication nonces (sys/dsc_sys.h), from libsodium. */
#include "dsc_sys.h"
#include "dscache_base.h"

#include <sodium.h>

int dsc_auth_random(uint8_t *buf, size_t len) {
    if (sodium_init() < 0)
        return DSC_EIO;
    randombytes_buf(buf, len);
    return 0;
}
