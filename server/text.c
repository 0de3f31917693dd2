/* Growable text buffer (text.h). */
#include "text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void dsc_text_add(dsc_text_t *t, const char *fmt, ...) {
    while (!t->failed) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->p ? t->p + t->len : NULL, t->p ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = 1;
            return;
        }
        if (t->p != NULL && (size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = (t->cap + (size_t)n + 1) * 2;
        char *p = realloc(t->p, cap);
        if (p == NULL) {
            t->failed = 1;
            return;
        }
        t->p = p;
        t->cap = cap;
    }
}

char *dsc_text_take(dsc_text_t *t) {
    char *p = t->p;
    if (t->failed) {
        free(p);
        p = NULL;
    }
    t->p = NULL;
    t->len = t->cap = 0;
    return p;
}
