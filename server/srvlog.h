/* Server log (srvlog): leveled lines on stderr with a timestamp; the level is checked before
 * formatting. SRV_LOG(level, ...) is the server's; the client has DSC_LOG(logger, level, ...). */
#ifndef DSC_SERVER_SRVLOG_H
#define DSC_SERVER_SRVLOG_H

#include "dscache_base.h" /* DSC_LOG_ERROR .. DSC_LOG_DEBUG */

extern int dsc__srvlog_level;

/* Parses "error", "warn", "info", "debug": the level, or DSC_EINVAL. */
int dsc__srvlog_parse_level(const char *text);
/* Writes one line (no trailing newline needed). Thread-safe: one write(2) per line. */
void dsc__srvlog_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define SRV_LOG(level, ...)                                                                        \
    do {                                                                                           \
        if ((level) <= dsc__srvlog_level)                                                          \
            dsc__srvlog_write((level), __VA_ARGS__);                                               \
    } while (0)
#define LOG_ERROR(...) SRV_LOG(DSC_LOG_ERROR, __VA_ARGS__)
#define LOG_WARN(...) SRV_LOG(DSC_LOG_WARN, __VA_ARGS__)
#define LOG_INFO(...) SRV_LOG(DSC_LOG_INFO, __VA_ARGS__)
#define LOG_DEBUG(...) SRV_LOG(DSC_LOG_DEBUG, __VA_ARGS__)

#endif
