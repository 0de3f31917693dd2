/* Error names and messages, dtype table, size parsing, time and checked arithmetic. */
#include "dscache_base.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* The system's message for a -errno code the list does not map, or "unknown error". Codes from
 * -4000 down are the project's own, never errno values. */
static const char *errno_message(int err) {
    if (err >= 0 || err <= -4000)
        return "unknown error";
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
    /* Static, untranslated, NULL for a number the system has no message for. */
    const char *desc = strerrordesc_np(-err);
    return desc != NULL ? desc : "unknown error";
#else
    /* One buffer per thread keeps the result stable until this thread's next call. */
    static _Thread_local char buf[128];
#if defined(__GLIBC__)
    const char *msg = strerror_r(-err, buf, sizeof buf); /* GNU: may return a static string */
    return msg != NULL ? msg : "unknown error";
#else
    return strerror_r(-err, buf, sizeof buf) == 0 ? buf : "unknown error";
#endif
#endif
}

DSC_EXTERN const char *dsc_strerror(int err) {
    switch (err) {
#define DSC_ERR_MSG_(name, value, msg)                                                             \
    case DSC_##name:                                                                               \
        return msg;
        DSC_ERRNO_MAP(DSC_ERR_MSG_)
#undef DSC_ERR_MSG_
    case 0:
        return "success";
    default:
        return errno_message(err);
    }
}

DSC_EXTERN const char *dsc_err_name(int err) {
    switch (err) {
#define DSC_ERR_NAME_(name, value, msg)                                                            \
    case DSC_##name:                                                                               \
        return "DSC_" #name;
        DSC_ERRNO_MAP(DSC_ERR_NAME_)
#undef DSC_ERR_NAME_
    default:
        return "DSC_UNKNOWN";
    }
}

DSC_EXTERN const char *dsc_version(void) {
    return DSC_VERSION_STRING;
}

static const struct {
    const char *name;
    const char *numpy;
    int size;
} dtype_table[] = {
    [DSC_DTYPE_U8] = {"u8", "uint8", 1},        [DSC_DTYPE_I8] = {"i8", "int8", 1},
    [DSC_DTYPE_U16] = {"u16", "uint16", 2},     [DSC_DTYPE_I16] = {"i16", "int16", 2},
    [DSC_DTYPE_U32] = {"u32", "uint32", 4},     [DSC_DTYPE_I32] = {"i32", "int32", 4},
    [DSC_DTYPE_I64] = {"i64", "int64", 8},      [DSC_DTYPE_F16] = {"f16", "float16", 2},
    [DSC_DTYPE_BF16] = {"bf16", "bfloat16", 2}, [DSC_DTYPE_F32] = {"f32", "float32", 4},
    [DSC_DTYPE_F64] = {"f64", "float64", 8},
};
#define DTYPE_COUNT ((int)(sizeof dtype_table / sizeof dtype_table[0]))

DSC_EXTERN int dsc_dtype_size(int dtype) {
    return dtype > 0 && dtype < DTYPE_COUNT ? dtype_table[dtype].size : 0;
}

DSC_EXTERN const char *dsc_dtype_name(int dtype) {
    return dtype > 0 && dtype < DTYPE_COUNT ? dtype_table[dtype].name : NULL;
}

DSC_EXTERN int dsc_dtype_parse(const char *name) {
    if (name == NULL)
        return DSC_EINVAL;
    for (int i = 1; i < DTYPE_COUNT; i++)
        if (strcmp(name, dtype_table[i].name) == 0 || strcmp(name, dtype_table[i].numpy) == 0)
            return i;
    return DSC_EINVAL;
}

int dsc_parse_size(const char *text, uint64_t *out) {
    if (text == NULL || *text < '0' || *text > '9')
        return DSC_EINVAL;
    char *end;
    errno = 0;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno != 0)
        return DSC_EINVAL;
    uint64_t mult = 1;
    if (*end != '\0') {
        switch (*end) {
        case 'k':
        case 'K':
            mult = 1ULL << 10;
            break;
        case 'm':
        case 'M':
            mult = 1ULL << 20;
            break;
        case 'g':
        case 'G':
            mult = 1ULL << 30;
            break;
        case 't':
        case 'T':
            mult = 1ULL << 40;
            break;
        case 'b':
        case 'B':
            mult = 1;
            end--;
            break;
        default:
            return DSC_EINVAL;
        }
        end++;
        if (strcasecmp(end, "") != 0 && strcasecmp(end, "b") != 0 && strcasecmp(end, "ib") != 0)
            return DSC_EINVAL;
    }
    return dsc_mul_u64(value, mult, out) == 0 ? 0 : DSC_EINVAL;
}

char *dsc_format_size(uint64_t bytes, char *buf, size_t cap) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, cap, "%.1f %s", v, units[u]);
    return buf;
}

uint64_t dsc_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

double dsc_now_s(void) {
    return (double)dsc_now_ns() / 1e9;
}

int dsc_add_u64(uint64_t a, uint64_t b, uint64_t *out) {
    if (__builtin_add_overflow(a, b, out))
        return DSC_EOVERFLOW;
    return 0;
}

int dsc_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    if (__builtin_mul_overflow(a, b, out))
        return DSC_EOVERFLOW;
    return 0;
}

int dsc_split_hostport(const char *text, char *host, size_t host_cap, uint16_t *port) {
    if (text == NULL || host_cap == 0)
        return DSC_EINVAL;
    const char *colon;
    const char *hbeg = text;
    size_t hlen;
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (close == NULL || close[1] != ':')
            return DSC_EINVAL;
        hbeg = text + 1;
        hlen = (size_t)(close - hbeg);
        colon = close + 1;
    } else {
        colon = strrchr(text, ':');
        if (colon == NULL)
            return DSC_EINVAL;
        hlen = (size_t)(colon - text);
    }
    if (hlen == 0 || hlen >= host_cap)
        return DSC_EINVAL;
    char *end;
    errno = 0;
    unsigned long p = strtoul(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end != '\0' || errno != 0 || p > 65535)
        return DSC_EINVAL;
    memcpy(host, hbeg, hlen);
    host[hlen] = '\0';
    *port = (uint16_t)p;
    return 0;
}
