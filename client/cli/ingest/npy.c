/* .npy header parser: magic, version, header length and the Python dict literal
 * {'descr': '<f4', 'fortran_order': False, 'shape': (N, ...), } that numpy writes. */
#include "npy.h"

#include <string.h>

static const uint8_t npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

int64_t dsc_npy_header_size(const uint8_t *buf, size_t len) {
    if (len < 8)
        return DSC_ETRUNCATED;
    if (memcmp(buf, npy_magic, sizeof npy_magic) != 0)
        return DSC_EBADMAGIC;
    uint64_t dict_len;
    uint64_t preamble;
    switch (buf[6]) {
    case 1:
        if (len < 10)
            return DSC_ETRUNCATED;
        dict_len = (uint64_t)buf[8] | (uint64_t)buf[9] << 8;
        preamble = 10;
        break;
    case 2:
    case 3:
        if (len < 12)
            return DSC_ETRUNCATED;
        dict_len = (uint64_t)buf[8] | (uint64_t)buf[9] << 8 | (uint64_t)buf[10] << 16 |
                   (uint64_t)buf[11] << 24;
        preamble = 12;
        break;
    default:
        return DSC_EVERSION;
    }
    if (dict_len > DSC_NPY_MAX_HEADER)
        return DSC_ETOOLARGE;
    return (int64_t)(preamble + dict_len);
}

/* A cursor over the dictionary text; every read checks the end. */
typedef struct {
    const char *p;
    const char *end;
} cursor_t;

static void skip_space(cursor_t *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static int accept(cursor_t *c, char ch) {
    skip_space(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A quoted string without escapes: sets [*s, *s + *n). Returns 0 or -1. */
static int parse_string(cursor_t *c, const char **s, size_t *n) {
    skip_space(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return -1;
    char quote = *c->p++;
    const char *start = c->p;
    while (c->p < c->end && *c->p != quote) {
        if (*c->p == '\\')
            return -1;
        c->p++;
    }
    if (c->p >= c->end)
        return -1;
    *s = start;
    *n = (size_t)(c->p - start);
    c->p++;
    return 0;
}

static int parse_word(cursor_t *c, const char *word) {
    size_t n = strlen(word);
    skip_space(c);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0)
        return 0;
    c->p += n;
    return 1;
}

/* A non-negative decimal integer (an optional Python 2 'L' suffix). Returns 0 or -1. */
static int parse_uint(cursor_t *c, uint64_t *out) {
    skip_space(c);
    if (c->p >= c->end || *c->p < '0' || *c->p > '9')
        return -1;
    uint64_t v = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        if (v > (UINT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (uint64_t)(*c->p - '0');
        c->p++;
    }
    if (c->p < c->end && *c->p == 'L')
        c->p++;
    *out = v;
    return 0;
}

/* "(3, 4)", "(3,)", "()": returns 0 or -1. */
static int parse_shape(cursor_t *c, dsc_npy_header_t *out) {
    if (!accept(c, '('))
        return -1;
    out->ndim = 0;
    if (accept(c, ')'))
        return 0;
    for (;;) {
        if (out->ndim >= DSC_NPY_MAX_DIMS)
            return -1;
        if (parse_uint(c, &out->shape[out->ndim]) != 0)
            return -1;
        out->ndim++;
        if (accept(c, ')'))
            return 0;
        if (!accept(c, ','))
            return -1;
        if (accept(c, ')'))
            return 0;
    }
}

typedef struct {
    const char *text;
    int dtype;
} descr_map_t;

static const descr_map_t descr_table[] = {
    {"u1", DSC_DTYPE_U8},  {"i1", DSC_DTYPE_I8},  {"u2", DSC_DTYPE_U16}, {"i2", DSC_DTYPE_I16},
    {"u4", DSC_DTYPE_U32}, {"i4", DSC_DTYPE_I32}, {"i8", DSC_DTYPE_I64}, {"f2", DSC_DTYPE_F16},
    {"f4", DSC_DTYPE_F32}, {"f8", DSC_DTYPE_F64},
};

/* Maps a descr such as "<f4" or "|u1" to a dtype: returns it, or 0 with out->problem set. */
static int map_descr(const char *s, size_t n, dsc_npy_header_t *out) {
    size_t keep = n < sizeof out->descr - 1 ? n : sizeof out->descr - 1;
    memcpy(out->descr, s, keep);
    out->descr[keep] = '\0';
    if (n < 2) {
        out->problem = "unsupported dtype";
        return 0;
    }
    char order = s[0];
    const char *kind = s + 1;
    size_t kind_len = n - 1;
    if (order != '<' && order != '>' && order != '|' && order != '=') {
        /* numpy always writes a byte-order character; anything else is a type we do not map */
        order = '=';
        kind = s;
        kind_len = n;
    }
    if (kind_len >= 1 && kind[0] == 'O') {
        out->problem = "object arrays are not supported (pickled Python objects)";
        return 0;
    }
    for (size_t i = 0; i < sizeof descr_table / sizeof descr_table[0]; i++) {
        if (kind_len == 2 && memcmp(kind, descr_table[i].text, 2) == 0) {
            int dtype = descr_table[i].dtype;
            if (order == '>' && dsc_dtype_size(dtype) > 1) {
                out->problem = "big-endian data is not supported (convert with "
                               ".astype(arr.dtype.newbyteorder('<')))";
                return 0;
            }
            return dtype;
        }
    }
    out->problem = "unsupported dtype (supported: u1 i1 u2 i2 u4 i4 i8 f2 f4 f8, little-endian)";
    return 0;
}

int64_t dsc_npy_parse(const uint8_t *buf, size_t len, dsc_npy_header_t *out) {
    memset(out, 0, sizeof *out);
    int64_t total = dsc_npy_header_size(buf, len);
    if (total < 0) {
        out->problem = total == DSC_EBADMAGIC   ? "not a .npy file (bad magic)"
                       : total == DSC_EVERSION  ? "unknown .npy format version"
                       : total == DSC_ETOOLARGE ? "header too large"
                                                : "file shorter than a .npy header";
        return total;
    }
    if ((uint64_t)total > len) {
        out->problem = "file shorter than its .npy header";
        return DSC_ETRUNCATED;
    }
    out->major = buf[6];
    out->minor = buf[7];
    size_t preamble = out->major == 1 ? 10 : 12;
    cursor_t c = {(const char *)buf + preamble, (const char *)buf + total};

    int have_descr = 0, have_order = 0, have_shape = 0;
    int descr_list = 0;
    const char *descr = NULL;
    size_t descr_len = 0;
    if (!accept(&c, '{')) {
        out->problem = "header is not a dictionary";
        return DSC_EBADHEADER;
    }
    while (!accept(&c, '}')) {
        const char *key;
        size_t key_len;
        if (parse_string(&c, &key, &key_len) != 0 || !accept(&c, ':')) {
            out->problem = "malformed dictionary key";
            return DSC_EBADHEADER;
        }
        if (key_len == 5 && memcmp(key, "descr", 5) == 0 && !have_descr) {
            have_descr = 1;
            skip_space(&c);
            if (c.p < c.end && *c.p == '[') {
                /* a structured dtype: a list of tuples we do not need to read */
                descr_list = 1;
                int depth = 0;
                while (c.p < c.end) {
                    char ch = *c.p++;
                    if (ch == '[' || ch == '(')
                        depth++;
                    else if ((ch == ']' || ch == ')') && --depth == 0)
                        break;
                }
                if (depth != 0) {
                    out->problem = "malformed 'descr'";
                    return DSC_EBADHEADER;
                }
            } else if (parse_string(&c, &descr, &descr_len) != 0) {
                out->problem = "malformed 'descr'";
                return DSC_EBADHEADER;
            }
        } else if (key_len == 13 && memcmp(key, "fortran_order", 13) == 0 && !have_order) {
            have_order = 1;
            if (parse_word(&c, "True"))
                out->fortran_order = 1;
            else if (parse_word(&c, "False"))
                out->fortran_order = 0;
            else {
                out->problem = "malformed 'fortran_order'";
                return DSC_EBADHEADER;
            }
        } else if (key_len == 5 && memcmp(key, "shape", 5) == 0 && !have_shape) {
            have_shape = 1;
            if (parse_shape(&c, out) != 0) {
                out->problem = "malformed 'shape'";
                return DSC_EBADHEADER;
            }
        } else {
            out->problem = "unknown or repeated key in header";
            return DSC_EBADHEADER;
        }
        if (!accept(&c, ',')) {
            if (!accept(&c, '}')) {
                out->problem = "malformed dictionary";
                return DSC_EBADHEADER;
            }
            break;
        }
    }
    skip_space(&c);
    if (c.p != c.end) {
        out->problem = "junk after the header dictionary";
        return DSC_EBADHEADER;
    }
    if (!have_descr || !have_order || !have_shape) {
        out->problem = "header lacks 'descr', 'fortran_order' or 'shape'";
        return DSC_EBADHEADER;
    }
    if (descr_list) {
        memcpy(out->descr, "[...]", 6);
        out->problem = "structured (record) dtypes are not supported: one field per file";
        return DSC_ENOTSUP;
    }
    out->dtype = map_descr(descr, descr_len, out);
    if (out->dtype == 0)
        return DSC_ENOTSUP;
    uint64_t bytes = (uint64_t)dsc_dtype_size(out->dtype);
    for (uint32_t i = 0; i < out->ndim; i++) {
        if (__builtin_mul_overflow(bytes, out->shape[i], &bytes)) {
            out->problem = "array size overflows";
            return DSC_EOVERFLOW;
        }
    }
    out->data_bytes = bytes;
    out->data_offset = (uint64_t)total;
    /* Fortran order of an array with at most one non-trivial axis is the same bytes as C order,
     * but numpy only writes True for genuinely column-major data, so refuse it outright. */
    if (out->fortran_order) {
        out->problem = "Fortran-order (column-major) arrays are not supported (save "
                       "np.ascontiguousarray(arr))";
        return DSC_ENOTSUP;
    }
    return total;
}
