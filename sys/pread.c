/* dsc_pread_full: the exact positional read the server's store and the client's fallback use. */
#include "dsc_sys.h"
#include "dscache_base.h"

#include <errno.h>
#include <stddef.h>
#include <sys/types.h>
#include <unistd.h>

int dsc_pread_full(int fd, void *dst, uint64_t len, uint64_t offset) {
    uint8_t *p = dst;
    uint64_t got = 0;
    while (got < len) {
        size_t want = len - got > (1u << 30) ? (1u << 30) : (size_t)(len - got);
        ssize_t n = pread(fd, p + got, want, (off_t)(offset + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            return DSC_ETRUNCATED;
        got += (uint64_t)n;
    }
    return 0;
}
