/* Small shared helpers: byte-size parsing ("512M"), monotonic time, checked arithmetic. */
#ifndef DSC_UTIL_H
#define DSC_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Parses "4096", "64K", "512M", "4G", "1T" (powers of 1024; "KiB"/"MB" spellings accepted).
 * Returns 0 and *out, or DSC_EINVAL for anything else (empty, junk, overflow). */
int dsc_parse_size(const char *text, uint64_t *out);
/* Formats a byte count as "1.5 GiB" into buf (always NUL-terminated); returns buf. */
char *dsc_format_size(uint64_t bytes, char *buf, size_t cap);
/* Monotonic clock in nanoseconds / seconds. */
uint64_t dsc_now_ns(void);
double dsc_now_s(void);
/* Checked arithmetic: return 0 and *out, or DSC_EOVERFLOW. */
int dsc_add_u64(uint64_t a, uint64_t b, uint64_t *out);
int dsc_mul_u64(uint64_t a, uint64_t b, uint64_t *out);
/* Splits "HOST:PORT" (IPv4, name, or "[v6]:port"): returns 0, or DSC_EINVAL. host gets at
 * most host_cap-1 bytes. */
int dsc_split_hostport(const char *text, char *host, size_t host_cap, uint16_t *port);

#endif
