/* Small shared helpers (util.h): byte-size parsing and formatting, monotonic time, checked
 * arithmetic, host:port splitting. */
#include "util.h"
#include "dscache_base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

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
