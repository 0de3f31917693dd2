/* Field specs (fieldspec.h): one recursive-descent pass over the text, every refusal naming its
 * token and position. Pure: no I/O, no allocation. */
#include "fieldspec.h"

#include <stdio.h>
#include <string.h>

#define DTYPES_HINT " (u8 i8 u16 i16 u32 i32 i64 f16 bf16 f32 f64)"
#define BRACKET_HINT " (each 1..2^32-1, or ? first)"
#define X_HINT " (e.g. 3x32x32: each 1..2^32-1)"

typedef struct cursor {
    const char *text;
    size_t pos, end;
    dsc_fieldspec_error_t *err;
} cursor_t;

static int is_space(char c) {
    return c == ' ' || c == '\t';
}

static int is_digit(char c) {
    return c >= '0' && c <= '9';
}

static int is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '_' ||
           c == '.' || c == '-';
}

/* ch is one of stops (never the NUL byte, which strchr would find). */
static int in_set(const char *stops, char ch) {
    return ch != '\0' && strchr(stops, ch) != NULL;
}

static void skip_space(cursor_t *c) {
    while (c->pos < c->end && is_space(c->text[c->pos]))
        c->pos++;
}

static int at_end(const cursor_t *c) {
    return c->pos >= c->end;
}

static char peek(const cursor_t *c) {
    return c->pos < c->end ? c->text[c->pos] : '\0';
}

static int fail(cursor_t *c, const char *what, const char *hint, size_t pos, size_t len) {
    c->err->what = what;
    c->err->hint = hint;
    c->err->pos = pos;
    c->err->len = len;
    return DSC_EINVAL;
}

/* The end of the token starting at from: up to (not including) a space, one of stops, or end. */
static size_t token_end(const cursor_t *c, size_t from, const char *stops) {
    while (from < c->end && !is_space(c->text[from]) && !in_set(stops, c->text[from]))
        from++;
    return from;
}

static int parse_name(cursor_t *c, size_t colon, dsc_field_t *out) {
    size_t start = c->pos, stop = colon;
    while (stop > start && is_space(c->text[stop - 1]))
        stop--;
    if (stop == start)
        return fail(c, "missing field name before ':'", "", start, 0);
    for (size_t i = start; i < stop; i++)
        if (!is_name_char(c->text[i]))
            return fail(c, "field name must be 1-63 of A-Z a-z 0-9 _ . -", "", start, stop - start);
    if (stop - start >= DSC_MAX_NAME)
        return fail(c, "field name longer than 63 characters", "", start, stop - start);
    memcpy(out->name, c->text + start, stop - start);
    out->name[stop - start] = '\0';
    c->pos = colon + 1;
    return 0;
}

static int parse_dtype(cursor_t *c, dsc_field_t *out) {
    skip_space(c);
    size_t start = c->pos, stop = token_end(c, start, "[:,");
    if (stop == start)
        return fail(c, "missing dtype", DTYPES_HINT, start, 0);
    char word[16];
    int dtype = DSC_EINVAL;
    if (stop - start < sizeof word) {
        memcpy(word, c->text + start, stop - start);
        word[stop - start] = '\0';
        dtype = strlen(word) == stop - start ? dsc_dtype_parse(word) : DSC_EINVAL; /* no NUL */
    }
    if (dtype < 0)
        return fail(c, "unknown dtype", DTYPES_HINT, start, stop - start);
    out->dtype = (uint8_t)dtype;
    c->pos = stop;
    return 0;
}

/* A decimal 1..2^32-1 at c->pos (a digit there). */
static int parse_number(cursor_t *c, uint32_t *out, const char *stops, const char *hint) {
    size_t start = c->pos;
    uint64_t v = 0;
    int big = 0;
    while (c->pos < c->end && is_digit(c->text[c->pos])) {
        v = v * 10 + (uint64_t)(c->text[c->pos++] - '0');
        if (v > UINT32_MAX) {
            big = 1;
            v = UINT32_MAX + 1ull; /* stays over, without wrapping */
        }
    }
    if (!at_end(c) && !is_space(peek(c)) && !in_set(stops, peek(c)))
        return fail(c, "bad dimension", hint, start, token_end(c, start, stops) - start);
    if (v == 0 || big)
        return fail(c, "bad dimension", hint, start, c->pos - start);
    *out = (uint32_t)v;
    return 0;
}

/* "[" dims "]" with c->pos on the '['. */
static int parse_bracket_dims(cursor_t *c, dsc_field_t *out) {
    size_t open = c->pos++;
    skip_space(c);
    if (peek(c) == ']') { /* "[]": one variable dimension */
        out->ndim = 1;
        out->shape[0] = DSC_DIM_VARIABLE;
        c->pos++;
        return 0;
    }
    for (;;) {
        skip_space(c);
        if (at_end(c))
            return fail(c, "missing ']' to close the dims", "", open, 1);
        size_t start = c->pos;
        if (out->ndim >= DSC_MAX_DIMS)
            return fail(c, "at most 8 dimensions", "", start, token_end(c, start, ",]") - start);
        if (peek(c) == '?') {
            c->pos++;
            if (out->ndim != 0)
                return fail(c, "only the leading dimension may be variable", "", start, 1);
            out->shape[out->ndim++] = DSC_DIM_VARIABLE;
        } else if (is_digit(peek(c))) {
            uint32_t d;
            if (parse_number(c, &d, ",]", BRACKET_HINT) < 0)
                return DSC_EINVAL;
            out->shape[out->ndim++] = d;
        } else if (peek(c) == ',' || peek(c) == ']') {
            return fail(c, "missing dimension", BRACKET_HINT, start, 0);
        } else {
            return fail(c, "bad dimension", BRACKET_HINT, start, token_end(c, start, ",]") - start);
        }
        skip_space(c);
        if (at_end(c))
            return fail(c, "missing ']' to close the dims", "", open, 1);
        char next = c->text[c->pos++];
        if (next == ']')
            return 0;
        if (next != ',')
            return fail(c, "bad dimension", BRACKET_HINT, start, token_end(c, start, ",]") - start);
        skip_space(c);
        if (peek(c) == ']')
            return fail(c, "trailing ',' in the dims", "", c->pos - 1, 1);
    }
}

/* ":" NxN... with c->pos after the ':' (the CLI's older form). */
static int parse_x_dims(cursor_t *c, dsc_field_t *out) {
    skip_space(c);
    if (at_end(c))
        return 0; /* "name:dtype:": a scalar, as the CLI took it */
    for (;;) {
        size_t start = c->pos;
        if (out->ndim >= DSC_MAX_DIMS)
            return fail(c, "at most 8 dimensions", "", start, token_end(c, start, "x") - start);
        if (!is_digit(peek(c)))
            return fail(c, at_end(c) || peek(c) == 'x' ? "missing dimension" : "bad dimension",
                        X_HINT, start, token_end(c, start, "x") - start);
        uint32_t d;
        if (parse_number(c, &d, "x", X_HINT) < 0)
            return DSC_EINVAL;
        out->shape[out->ndim++] = d;
        if (peek(c) != 'x')
            return 0;
        c->pos++;
    }
}

/* With DSC_FIELDSPEC_TYPE_ONLY, "u8:3x32x32" is a type with the older dims, not a field named
 * "u8": a dtype never starts with a digit, so a name is never followed by one. */
static int type_with_x_dims(const cursor_t *c, size_t colon, unsigned flags) {
    if (!(flags & DSC_FIELDSPEC_TYPE_ONLY))
        return 0;
    size_t start = c->pos, stop = colon;
    while (stop > start && is_space(c->text[stop - 1]))
        stop--;
    char word[16];
    if (stop == start || stop - start >= sizeof word)
        return 0;
    memcpy(word, c->text + start, stop - start);
    word[stop - start] = '\0';
    if (strlen(word) != stop - start || dsc_dtype_parse(word) < 0)
        return 0;
    size_t after = colon + 1;
    while (after < c->end && is_space(c->text[after]))
        after++;
    return after == c->end || is_digit(c->text[after]);
}

/* A sample (or a row) of the field fits 2^32 - 1 bytes, as a dataset needs. */
static int check_size(cursor_t *c, const dsc_field_t *field) {
    dsc_schema_t one = {.field_count = 1, .fields = {*field}};
    if (one.fields[0].name[0] == '\0') /* a type alone: sized under a stand-in name */
        memcpy(one.fields[0].name, "x", 2);
    if (dsc_schema_finish(&one) < 0)
        return fail(c, "a sample or a row of this field is over 2^32 - 1 bytes", "", c->err->item,
                    0);
    return 0;
}

static int parse_field(cursor_t *c, unsigned flags, dsc_field_t *out) {
    memset(out, 0, sizeof *out);
    skip_space(c);
    size_t colon = c->pos;
    while (colon < c->end && c->text[colon] != ':' && c->text[colon] != '[')
        colon++;
    if (colon < c->end && c->text[colon] == ':' && !type_with_x_dims(c, colon, flags)) {
        if (parse_name(c, colon, out) < 0)
            return DSC_EINVAL;
    } else if (!(flags & DSC_FIELDSPEC_TYPE_ONLY)) {
        return fail(c, "expected NAME:DTYPE[DIMS]", ", e.g. image:u8[3,32,32] or label:i64", c->pos,
                    0);
    }
    if (parse_dtype(c, out) < 0)
        return DSC_EINVAL;
    skip_space(c);
    int rc = 0;
    if (peek(c) == '[') {
        rc = parse_bracket_dims(c, out);
    } else if (peek(c) == ':') {
        c->pos++;
        rc = parse_x_dims(c, out);
    }
    if (rc < 0)
        return rc;
    skip_space(c);
    if (!at_end(c))
        return fail(c, "unexpected text after the field (dims go last: [D,D,...])", "", c->pos,
                    c->end - c->pos);
    return (flags & DSC_FIELDSPEC_SIZED) ? check_size(c, out) : 0;
}

/* The item's bounds without the spaces around it. */
static void set_item(dsc_fieldspec_error_t *err, const char *text, size_t start, size_t end) {
    while (start < end && is_space(text[start]))
        start++;
    while (end > start && is_space(text[end - 1]))
        end--;
    err->item = start;
    err->item_len = end - start;
}

int dsc_fieldspec_parse(const char *text, size_t len, unsigned flags, dsc_field_t *out,
                        dsc_fieldspec_error_t *err) {
    dsc_fieldspec_error_t scratch;
    if (err == NULL)
        err = &scratch;
    memset(err, 0, sizeof *err);
    if (text == NULL || out == NULL) {
        err->what = "no field spec given";
        err->hint = "";
        return DSC_EINVAL;
    }
    set_item(err, text, 0, len);
    cursor_t c = {text, 0, len, err};
    return parse_field(&c, flags, out);
}

int dsc_fieldspec_parse_list(const char *text, size_t len, dsc_schema_t *schema,
                             dsc_fieldspec_error_t *err) {
    dsc_fieldspec_error_t scratch;
    if (err == NULL)
        err = &scratch;
    memset(err, 0, sizeof *err);
    err->hint = "";
    if (schema == NULL) {
        err->what = "no schema to fill";
        return DSC_EINVAL;
    }
    memset(schema, 0, sizeof *schema);
    size_t first = 0;
    while (text != NULL && first < len && is_space(text[first]))
        first++;
    if (text == NULL || first == len) {
        err->what = "no fields given";
        err->hint = " (e.g. \"input_ids:i32[],label:i64\")";
        return DSC_EINVAL;
    }
    size_t start = 0;
    while (start < len) {
        size_t end = start;
        int depth = 0;
        while (end < len && !(text[end] == ',' && depth == 0)) {
            if (text[end] == '[')
                depth++;
            else if (text[end] == ']' && depth > 0)
                depth--;
            end++;
        }
        set_item(err, text, start, end);
        size_t next = end < len ? end + 1 : end;
        if (err->item_len == 0) {
            if (end == len && start > 0) /* one trailing ',' is allowed */
                break;
            err->what = "empty field spec";
            err->pos = err->item;
            return DSC_EINVAL;
        }
        if (schema->field_count >= DSC_MAX_FIELDS) {
            err->what = "more than 16 fields";
            err->pos = err->item;
            err->len = err->item_len;
            return DSC_EINVAL;
        }
        dsc_field_t *field = &schema->fields[schema->field_count];
        cursor_t c = {text, start, end, err};
        if (parse_field(&c, DSC_FIELDSPEC_SIZED, field) < 0)
            return DSC_EINVAL;
        for (uint32_t g = 0; g < schema->field_count; g++)
            if (strcmp(schema->fields[g].name, field->name) == 0) {
                size_t at = err->item;
                return fail(&c, "field name given twice", "", at, strlen(field->name));
            }
        schema->field_count++;
        start = next;
    }
    if (dsc_schema_finish(schema) < 0) { /* each field passed alone: defensive */
        err->what = "invalid schema";
        err->item = err->item_len = err->pos = err->len = 0;
        return DSC_EINVAL;
    }
    return 0;
}

/* Appends text[from, from + n) with bytes outside printable ASCII as \xNN, cut at limit bytes. */
static size_t put_text(char *buf, size_t cap, size_t at, const char *text, size_t n, size_t limit) {
    for (size_t i = 0; i < n; i++) {
        if (i == limit) {
            at += (size_t)snprintf(at < cap ? buf + at : NULL, at < cap ? cap - at : 0, "...");
            break;
        }
        unsigned char ch = (unsigned char)text[i];
        if (ch >= 0x20 && ch < 0x7f)
            at += (size_t)snprintf(at < cap ? buf + at : NULL, at < cap ? cap - at : 0, "%c", ch);
        else
            at += (size_t)snprintf(at < cap ? buf + at : NULL, at < cap ? cap - at : 0, "\\x%02x",
                                   ch);
    }
    return at;
}

#define PUT(...)                                                                                   \
    at += (size_t)snprintf(at < cap ? buf + at : NULL, at < cap ? cap - at : 0, __VA_ARGS__)

int dsc_fieldspec_message(const char *text, size_t len, const dsc_fieldspec_error_t *err, char *buf,
                          size_t cap) {
    size_t at = 0;
    if (cap > 0)
        buf[0] = '\0';
    const char *what = err != NULL && err->what != NULL ? err->what : "invalid field spec";
    const char *hint = err != NULL && err->hint != NULL ? err->hint : "";
    if (err == NULL || text == NULL || err->item + err->item_len > len ||
        err->pos + err->len > len) {
        PUT("%s%s", what, hint);
    } else if (err->item_len == 0) {
        PUT("%s%s", what, hint);
        if (err->pos > 0)
            PUT(" (position %zu)", err->pos + 1);
    } else {
        PUT("field spec '");
        at = put_text(buf, cap, at, text + err->item, err->item_len, 80);
        PUT("', position %zu: %s", err->pos + 1, what);
        if (err->len > 0) {
            PUT(": '");
            at = put_text(buf, cap, at, text + err->pos, err->len, 40);
            PUT("'");
        }
        PUT("%s", hint);
    }
    if (cap > 0 && at >= cap)
        buf[cap - 1] = '\0';
    return (int)at;
}

int dsc_fieldspec_format(const dsc_field_t *field, char *buf, size_t cap) {
    const char *dtype = dsc_dtype_name(field->dtype);
    if (dtype == NULL || field->ndim > DSC_MAX_DIMS)
        return DSC_EINVAL;
    size_t at = 0;
    if (field->name[0] != '\0')
        PUT("%.*s:", DSC_MAX_NAME - 1, field->name);
    PUT("%s", dtype);
    if (field->ndim > 0) {
        PUT("[");
        for (uint32_t d = 0; d < field->ndim; d++) {
            if (d == 0 && field->shape[0] == DSC_DIM_VARIABLE)
                PUT("?");
            else
                PUT("%s%u", d ? "," : "", field->shape[d]);
        }
        PUT("]");
    }
    if (at >= cap) {
        if (cap > 0)
            buf[0] = '\0';
        return DSC_ENOSPC;
    }
    return (int)at;
}
