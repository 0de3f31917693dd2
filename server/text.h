/* A growable text buffer for the server's text answers (/metrics, the job table): printf-style
 * appends that remember a failure instead of reporting each one. */
#ifndef DSC_SERVER_TEXT_H
#define DSC_SERVER_TEXT_H

#include <stddef.h>

typedef struct dsc_text {
    char *p; /* malloc'd, NUL-terminated once anything was added */
    size_t len, cap;
    int failed; /* out of memory or a formatting error: later appends do nothing */
} dsc_text_t;

/* Appends printf-style; on failure sets t->failed. Start from a zeroed dsc_text_t. */
void dsc_text_add(dsc_text_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The text (malloc'd; the caller frees it), or NULL after a failure (the buffer freed). */
char *dsc_text_take(dsc_text_t *t);

#endif
