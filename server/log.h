/* Server log: leveled lines on stderr with a timestamp; the level is checked before formatting. */
#ifndef DSC_SERVER_LOG_H
#define DSC_SERVER_LOG_H

#include "dscache_base.h" /* DSC_LOG_ERROR .. DSC_LOG_DEBUG */

extern int dsc__log_level;

/* Parses "error", "warn", "info", "debug": the level, or DSC_EINVAL. */
int dsc__log_parse_level(const char *text);
/* Writes one line (no trailing newline needed). Thread-safe: one write(2) per line. */
void dsc__log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define DSC_LOG(level, ...)                                                                        \
    do {                                                                                           \
        if ((level) <= dsc__log_level)                                                             \
            dsc__log_write((level), __VA_ARGS__);                                                  \
    } while (0)
#define LOG_ERROR(...) DSC_LOG(DSC_LOG_ERROR, __VA_ARGS__)
#define LOG_WARN(...) DSC_LOG(DSC_LOG_WARN, __VA_ARGS__)
#define LOG_INFO(...) DSC_LOG(DSC_LOG_INFO, __VA_ARGS__)
#define LOG_DEBUG(...) DSC_LOG(DSC_LOG_DEBUG, __VA_ARGS__)

#endif
