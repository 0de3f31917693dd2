/* Error names and messages, the version, the dtype table and the bottleneck names: what
 * dscache_base.h declares (the helpers of util.h are util.c). */
#include "dscache_base.h"

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

DSC_EXTERN const char *dsc_bottleneck_name(int bottleneck) {
    static const char *const names[DSC_BOTTLENECK_COUNT] = {
        "unknown", "none", "fetch", "server",   "decode",
        "collate", "h2d",  "cache", "inflight", "storage",
    };
    if (bottleneck < 0 || bottleneck >= DSC_BOTTLENECK_COUNT)
        return NULL;
    return names[bottleneck];
}
