/* Server log lines: "2024-01-02T03:04:05.678Z info  message". */
#include "srvlog.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

int dsc__srvlog_level = DSC_LOG_INFO;

static const char *level_names[] = {"error", "warn", "info", "debug"};

int dsc__srvlog_parse_level(const char *text) {
    for (int i = 0; i < 4; i++)
        if (text != NULL && strcmp(text, level_names[i]) == 0)
            return i;
    return DSC_EINVAL;
}

void dsc__srvlog_write(int level, const char *fmt, ...) {
    char line[2048];
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    int n = (int)strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
    n += snprintf(line + n, sizeof line - (size_t)n, ".%03dZ %-5s ", (int)(tv.tv_usec / 1000),
                  level >= 0 && level < 4 ? level_names[level] : "?");
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        m = 0;
    n += m;
    if (n > (int)sizeof line - 2)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}
