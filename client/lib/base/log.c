/* Client library logging (see log.h). */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int env_level(void) {
    const char *v = getenv("DSCACHE_LOG");
    if (v == NULL || *v == '\0')
        return -1;
    if (strcasecmp(v, "error") == 0)
        return DSC_LOG_ERROR;
    if (strcasecmp(v, "warn") == 0 || strcasecmp(v, "warning") == 0)
        return DSC_LOG_WARN;
    if (strcasecmp(v, "info") == 0)
        return DSC_LOG_INFO;
    if (strcasecmp(v, "debug") == 0)
        return DSC_LOG_DEBUG;
    return DSC_LOG_WARN;
}

void dsc__logger_init(dsc_logger_t *logger, dsc_log_fn fn, void *ctx, int level) {
    logger->err_lock = NULL; /* the loader sets these after */
    logger->err_buf = NULL;
    logger->err_cap = 0;
    logger->fn = fn;
    logger->ctx = ctx;
    if (fn != NULL) {
        logger->level = level;
        int env = env_level(); /* the variable can raise the level of a callback too */
        if (env > logger->level)
            logger->level = env;
    } else {
        logger->level = env_level();
    }
}

void dsc__log(const dsc_logger_t *logger, int level, const char *fmt, ...) {
    int keep = level == DSC_LOG_ERROR && logger->err_buf != NULL;
    if (level > logger->level && !keep)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (keep) {
        pthread_mutex_lock(logger->err_lock);
        snprintf(logger->err_buf, logger->err_cap, "%s", line);
        pthread_mutex_unlock(logger->err_lock);
    }
    if (level > logger->level)
        return;
    if (logger->fn != NULL) {
        logger->fn(logger->ctx, level, line);
        return;
    }
    static const char *names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
    fprintf(stderr, "dscache %s: %s\n", names[level < 0 ? 0 : level > 3 ? 3 : level], line);
}
