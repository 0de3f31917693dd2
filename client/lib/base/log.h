/* Client library logging: the application's callback, or stderr when DSCACHE_LOG is set, with the
 * level checked before any formatting. */
#ifndef DSC_CLIENT_LOG_H
#define DSC_CLIENT_LOG_H

#include "dscache.h"

#include <pthread.h>
#include <stddef.h>

typedef struct dsc_logger {
    dsc_log_fn fn; /* NULL: stderr when DSCACHE_LOG is set, else quiet */
    void *ctx;
    int level; /* messages with a level above this are dropped unformatted; -1 = none */
    /* When set: every ERROR line is also kept here (the last one), whatever the level, for
     * dsc_loader_last_error. */
    pthread_mutex_t *err_lock;
    char *err_buf;
    size_t err_cap;
} dsc_logger_t;

/* Fills *logger from the options' callback and level, or DSCACHE_LOG=error|warn|info|debug. */
void dsc__logger_init(dsc_logger_t *logger, dsc_log_fn fn, void *ctx, int level);
/* Formats and emits one line (no trailing newline needed). Thread-safe. */
void dsc__log(const dsc_logger_t *logger, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define DSC_LOG(logger, lvl, ...)                                                                  \
    do {                                                                                           \
        if ((lvl) <= (logger)->level || ((lvl) == DSC_LOG_ERROR && (logger)->err_buf != NULL))     \
            dsc__log((logger), (lvl), __VA_ARGS__);                                                \
    } while (0)

#endif
