/* dscache_base.h: what every layer of dscache shares: the error codes (one X-macro list), data
 * types, limits, log levels and the version. Installed beside dscache.h, which includes it;
 * it includes nothing of the project, so the proto/ codec, the server and the client build on it.
 */
#ifndef DSCACHE_BASE_H
#define DSCACHE_BASE_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the public API: exported from libdscache.so (built with hidden visibility). */
#if defined(DSC_SHARED) && defined(DSC_BUILDING)
#define DSC_EXTERN __attribute__((visibility("default")))
#else
#define DSC_EXTERN
#endif

#define DSC_VERSION_MAJOR 0
#define DSC_VERSION_MINOR 1
#define DSC_VERSION_PATCH 0
#define DSC_VERSION_STRING "0.1.0"

/* ---- Errors ------------------------------------------------------------------------------
 * Every int-returning call returns >= 0 on success (or a count) and a negative DSC_E* code on
 * failure. Codes that POSIX has are -errno; the project's own codes are below -4000. */
#define DSC_ERRNO_MAP(XX)                                                                          \
    XX(ENOMEM, -ENOMEM, "out of memory")                                                           \
    XX(EINVAL, -EINVAL, "invalid argument")                                                        \
    XX(EIO, -EIO, "i/o error")                                                                     \
    XX(ENOENT, -ENOENT, "no such file or directory")                                               \
    XX(EACCES, -EACCES, "permission denied")                                                       \
    XX(EAGAIN, -EAGAIN, "resource temporarily unavailable")                                        \
    XX(ENOSPC, -ENOSPC, "no space left (buffer or capacity too small)")                            \
    XX(ETIMEDOUT, -ETIMEDOUT, "timed out")                                                         \
    XX(ECONNREFUSED, -ECONNREFUSED, "connection refused")                                          \
    XX(ECONNRESET, -ECONNRESET, "connection reset by peer")                                        \
    XX(EPIPE, -EPIPE, "broken pipe")                                                               \
    XX(ENOTSUP, -ENOTSUP, "operation not supported")                                               \
    XX(ECANCELED, -ECANCELED, "operation canceled")                                                \
    XX(EBUSY, -EBUSY, "resource busy")                                                             \
    XX(ERANGE, -ERANGE, "value out of range")                                                      \
    XX(EADDRINUSE, -EADDRINUSE, "address already in use")                                          \
    XX(EOF, -4001, "end of epoch")                                                                 \
    XX(EBADMAGIC, -4002, "bad magic number")                                                       \
    XX(EVERSION, -4003, "unsupported format or protocol version")                                  \
    XX(ETRUNCATED, -4004, "truncated input")                                                       \
    XX(EBADHEADER, -4005, "corrupt or invalid shard header")                                       \
    XX(EBADSCHEMA, -4006, "invalid schema")                                                        \
    XX(EBADINDEX, -4007, "corrupt or invalid chunk index")                                         \
    XX(EBADFOOTER, -4008, "corrupt or invalid shard footer")                                       \
    XX(ECHUNKSUM, -4009, "chunk checksum mismatch (stored bytes)")                                 \
    XX(EDECOMPRESS, -4010, "chunk decompression failed")                                           \
    XX(EDATASUM, -4011, "chunk checksum mismatch (decoded bytes)")                                 \
    XX(EOVERFLOW, -4012, "size or offset overflow")                                                \
    XX(EBADFRAME, -4013, "malformed protocol frame")                                               \
    XX(ETOOLARGE, -4014, "frame or request too large")                                             \
    XX(EPROTO, -4015, "protocol violation")                                                        \
    XX(ENOTFOUND, -4016, "dataset or shard not found")                                             \
    XX(EUNAVAIL, -4017, "server unavailable")                                                      \
    XX(EUNAUTH, -4018, "unauthorised")                                                             \
    XX(EBADMANIFEST, -4019, "corrupt or invalid manifest")                                         \
    XX(ECORRUPT, -4020, "data corrupt on the server")                                              \
    XX(ENODEVICE, -4021, "no CUDA device available")                                               \
    XX(ECUDA, -4022, "CUDA error")                                                                 \
    XX(ESERVER, -4023, "server internal error")                                                    \
    XX(EBADSTATE, -4024, "invalid saved loader state")                                             \
    XX(EALLDOWN, -4025, "every replica of a shard failed")                                         \
    XX(ECLOSED, -4026, "connection closed")                                                        \
    XX(EBADREQ, -4027, "bad request (rejected by the server)")                                     \
    XX(EFILESUM, -4028, "shard file checksum mismatch")                                            \
    XX(EHELD, -4029, "batches held by the caller would exceed max_held_bytes")                     \
    XX(EDECODE, -4040, "image does not decode")                                                    \
    XX(ECHANGED, -4050, "dataset changed on the server since it was opened")

typedef enum {
#define DSC_ERR_ENUM_(name, value, msg) DSC_##name = (value),
    DSC_ERRNO_MAP(DSC_ERR_ENUM_)
#undef DSC_ERR_ENUM_
} dsc_errno_t;

/* A static message for an error code: the list's message; for another -errno value (1..3999)
 * the system's message for it ("Operation not permitted"); "unknown error" otherwise. Never
 * NULL, thread-safe. */
DSC_EXTERN const char *dsc_strerror(int err);
/* The code's name, e.g. "DSC_ECHUNKSUM" ("DSC_UNKNOWN" for codes not in the list). */
DSC_EXTERN const char *dsc_err_name(int err);
/* "0.1.0" */
DSC_EXTERN const char *dsc_version(void);

/* ---- Data types --------------------------------------------------------------------------- */
typedef enum {
    DSC_DTYPE_U8 = 1,
    DSC_DTYPE_I8 = 2,
    DSC_DTYPE_U16 = 3,
    DSC_DTYPE_I16 = 4,
    DSC_DTYPE_U32 = 5,
    DSC_DTYPE_I32 = 6,
    DSC_DTYPE_I64 = 7,
    DSC_DTYPE_F16 = 8,
    DSC_DTYPE_BF16 = 9,
    DSC_DTYPE_F32 = 10,
    DSC_DTYPE_F64 = 11,
} dsc_dtype_t;

/* Bytes per element (1..8), or 0 for an unknown dtype. */
DSC_EXTERN int dsc_dtype_size(int dtype);
/* "u8", "f32", ... or NULL for an unknown dtype. */
DSC_EXTERN const char *dsc_dtype_name(int dtype);
/* Parses "u8".."f64" (also numpy spellings "uint8", "float32", "bfloat16"): the dtype, or
 * DSC_EINVAL. */
DSC_EXTERN int dsc_dtype_parse(const char *name);

#define DSC_MAX_FIELDS 16
#define DSC_MAX_DIMS 8
#define DSC_MAX_NAME 64 /* including the terminating NUL */

/* ---- Log levels ---------------------------------------------------------------------------
 * Shared by the client library's log callback and the server's log. */
enum { DSC_LOG_ERROR = 0, DSC_LOG_WARN = 1, DSC_LOG_INFO = 2, DSC_LOG_DEBUG = 3 };

/* ---- Bottlenecks ---------------------------------------------------------------------------
 * What limits a loader now (docs/diagnosis.md): the verdict in dsc_stats_t.bottleneck, and the
 * stage a loader reports to the servers (REPORT, proto/PROTOCOL.md). The numbers are on the
 * wire: never renumber, only append. */
typedef enum {
    DSC_BOTTLENECK_UNKNOWN = 0,  /* too little measured yet */
    DSC_BOTTLENECK_NONE = 1,     /* stall under 1%: the trainer is the limit */
    DSC_BOTTLENECK_FETCH = 2,    /* the network / servers as a whole */
    DSC_BOTTLENECK_SERVER = 3,   /* one server slower than the others */
    DSC_BOTTLENECK_DECODE = 4,   /* checksum + lz4 on the decode threads */
    DSC_BOTTLENECK_COLLATE = 5,  /* copying samples into batch slots */
    DSC_BOTTLENECK_H2D = 6,      /* host-to-device copies */
    DSC_BOTTLENECK_CACHE = 7,    /* refetches: cache_bytes too small for the shuffle window */
    DSC_BOTTLENECK_INFLIGHT = 8, /* the in-flight byte budget */
    DSC_BOTTLENECK_STORAGE = 9,  /* misses read from the servers' backing storage */
} dsc_bottleneck_t;
#define DSC_BOTTLENECK_COUNT 10

/* "unknown", "none", "fetch", "server", "decode", "collate", "h2d", "cache", "inflight"; NULL
 * for a value outside the list. */
DSC_EXTERN const char *dsc_bottleneck_name(int bottleneck);

#ifdef __cplusplus
}
#endif
#endif /* DSCACHE_BASE_H */
