/* dsc_sys: system glue shared by the server, the client library and the tools: exact pread and
 * member-list resolution (file read, DNS); libibverbs loaded at run time is in verbs.h. It may
 * include proto/ headers; the proto/ codec never includes it, so the codec stays free of I/O and
 * can be fuzzed. Link target: dsc_sys. */
#ifndef DSC_SYS_H
#define DSC_SYS_H

#include "placement.h"

#include <stdint.h>

/* Reads exactly len bytes of fd at offset (retrying short reads and EINTR). Returns 0,
 * DSC_ETRUNCATED (end of file first) or -errno. Blocks. */
int dsc_pread_full(int fd, void *dst, uint64_t len, uint64_t offset);

/* Resolves a member spec into a list: "HOST:PORT,..." as dsc_members_parse; "file:PATH" reads
 * PATH (same syntax); "dns:NAME:PORT" resolves NAME to every IPv4/IPv6 address (what a
 * Kubernetes headless Service gives) and pairs each with PORT. Does I/O (file read,
 * getaddrinfo) and may block. Returns 0 and fills *out (free with dsc_members_free), or the
 * errors of dsc_members_parse plus DSC_ENOENT / DSC_EIO (file), DSC_EUNAVAIL (name did not
 * resolve). */
int dsc_members_resolve(const char *spec, dsc_members_t *out);

/* Fills buf with len bytes from the system's cryptographic random source (libsodium's
 * randombytes: getrandom(2)), for authentication nonces. Returns 0 or DSC_EIO (the library
 * failed to initialise). Thread-safe; may block at boot until the kernel's pool is seeded. */
int dsc_auth_random(uint8_t *buf, size_t len);

#endif
