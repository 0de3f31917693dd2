/* Authentication codecs and MACs (proto/auth.h): auth-init and AUTH bodies, HMAC-SHA-256 over the
 * handshake transcript (libsodium), constant-time comparison, credential line parsing. No I/O,
 * no allocation. */
#include "auth.h"
#include "wire.h"

#include <sodium.h>
#include <string.h>

static const char LABEL_CLIENT[] = "dscache-auth-v1 client";
static const char LABEL_SERVER[] = "dscache-auth-v1 server";

int dsc_auth_name_valid(const char *name, size_t len) {
    if (name == NULL || len == 0 || len > DSC_AUTH_NAME_MAX)
        return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)name[i];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '.' || ch == '_' || ch == '-' || ch == '@';
        if (!ok)
            return 0;
    }
    return 1;
}

int dsc_auth_secret_valid(const char *secret, size_t len) {
    if (secret == NULL || len < DSC_AUTH_SECRET_MIN || len > DSC_AUTH_SECRET_MAX)
        return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)secret[i];
        if (ch < 0x21 || ch > 0x7e)
            return 0;
    }
    return 1;
}

int dsc_auth_init_encode(const dsc_auth_init_t *init, uint8_t *out, size_t cap) {
    if (init == NULL || init->method != DSC_AUTH_METHOD_HMAC_SHA256 ||
        !dsc_auth_name_valid(init->name.ptr, init->name.len) || init->client_nonce == NULL)
        return DSC_EINVAL;
    dsc_wr_t w;
    dsc_wr_init(&w, out, cap);
    dsc_wr_u8(&w, init->method);
    dsc_wr_u8(&w, (uint8_t)init->name.len);
    dsc_wr_bytes(&w, init->name.ptr, init->name.len);
    dsc_wr_bytes(&w, init->client_nonce, DSC_AUTH_NONCE_SIZE);
    if (w.bad)
        return DSC_ENOSPC;
    return (int)w.pos;
}

int dsc_auth_init_decode(const uint8_t *body, size_t len, dsc_auth_init_t *out) {
    dsc_rd_t r;
    dsc_rd_init(&r, body, len);
    dsc_auth_init_t init;
    init.method = dsc_rd_u8(&r);
    uint8_t name_len = dsc_rd_u8(&r);
    init.name.ptr = (const char *)dsc_rd_bytes(&r, name_len);
    init.name.len = name_len;
    init.client_nonce = dsc_rd_bytes(&r, DSC_AUTH_NONCE_SIZE);
    if (r.bad || dsc_rd_left(&r) != 0 || init.method != DSC_AUTH_METHOD_HMAC_SHA256 ||
        !dsc_auth_name_valid(init.name.ptr, init.name.len))
        return DSC_EBADFRAME;
    *out = init;
    return 0;
}

int dsc_auth_mac_decode(const uint8_t *body, size_t len, const uint8_t **mac) {
    if (body == NULL || len != DSC_AUTH_MAC_SIZE)
        return DSC_EBADFRAME;
    *mac = body;
    return 0;
}

int dsc_auth_mac(dsc_auth_dir_t dir, const char *secret, size_t secret_len, uint16_t version,
                 const char *name, size_t name_len, const uint8_t client_nonce[DSC_AUTH_NONCE_SIZE],
                 const uint8_t server_nonce[DSC_AUTH_NONCE_SIZE], uint8_t mac[DSC_AUTH_MAC_SIZE]) {
    if (!dsc_auth_secret_valid(secret, secret_len) || !dsc_auth_name_valid(name, name_len) ||
        client_nonce == NULL || server_nonce == NULL || mac == NULL)
        return DSC_EINVAL;
    const char *label = dir == DSC_AUTH_SERVER ? LABEL_SERVER : LABEL_CLIENT;
    uint8_t head[4] = {0, (uint8_t)version, (uint8_t)(version >> 8), (uint8_t)name_len};
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, (const unsigned char *)secret, secret_len);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)label, strlen(label));
    crypto_auth_hmacsha256_update(&st, head, sizeof head);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)name, name_len);
    crypto_auth_hmacsha256_update(&st, client_nonce, DSC_AUTH_NONCE_SIZE);
    crypto_auth_hmacsha256_update(&st, server_nonce, DSC_AUTH_NONCE_SIZE);
    crypto_auth_hmacsha256_final(&st, mac);
    sodium_memzero(&st, sizeof st); /* holds key-derived pads */
    return 0;
}

int dsc_auth_mac_equal(const uint8_t a[DSC_AUTH_MAC_SIZE], const uint8_t b[DSC_AUTH_MAC_SIZE]) {
    return sodium_memcmp(a, b, DSC_AUTH_MAC_SIZE) == 0;
}

void dsc_auth_wipe(void *p, size_t len) {
    if (p != NULL && len > 0)
        sodium_memzero(p, len);
}

/* ---- Credential lines ---------------------------------------------------------------------- */

static int is_blank(char ch) {
    return ch == ' ' || ch == '\t';
}

/* Next field of line from *pos: 1 and *field, or 0 at the end or at a comment. */
static int next_field(const char *line, size_t len, size_t *pos, dsc_str_t *field) {
    size_t i = *pos;
    while (i < len && is_blank(line[i]))
        i++;
    if (i >= len || line[i] == '#') {
        *pos = len;
        return 0;
    }
    size_t start = i;
    while (i < len && !is_blank(line[i]))
        i++;
    field->ptr = line + start;
    field->len = (uint16_t)(i - start > UINT16_MAX ? UINT16_MAX : i - start);
    *pos = i;
    return 1;
}

static int str_is(dsc_str_t s, const char *text) {
    return s.len == strlen(text) && memcmp(s.ptr, text, s.len) == 0;
}

static int dataset_name_ok(dsc_str_t s) {
    if (s.len == 0 || s.len > DSC_MAX_NAME - 1)
        return 0;
    for (size_t i = 0; i < s.len; i++)
        if (s.ptr[i] == '\0' || (unsigned char)s.ptr[i] < 0x21 || s.ptr[i] == 0x7f)
            return 0;
    return 1;
}

int dsc_auth_line_parse(const char *line, size_t len, dsc_auth_line_t *out, const char **why) {
    static const char *dummy;
    if (why == NULL)
        why = &dummy;
    if (line == NULL || out == NULL) {
        *why = "no line";
        return DSC_EINVAL;
    }
    if (len > 0 && line[len - 1] == '\r')
        len--;
    if (memchr(line, '\0', len) != NULL) {
        *why = "NUL byte in line";
        return DSC_EINVAL;
    }
    size_t pos = 0;
    dsc_str_t name, role, secret;
    if (!next_field(line, len, &pos, &name))
        return 0;
    if (!next_field(line, len, &pos, &role) || !next_field(line, len, &pos, &secret)) {
        *why = "a credential needs NAME ROLE SECRET [DATASET ...]";
        return DSC_EINVAL;
    }
    if (!dsc_auth_name_valid(name.ptr, name.len)) {
        *why = "invalid name (1..63 of A-Z a-z 0-9 . _ @ -)";
        return DSC_EINVAL;
    }
    dsc_auth_line_t parsed = {.name = name, .secret = secret};
    if (str_is(role, "read"))
        parsed.role = DSC_ROLE_READ;
    else if (str_is(role, "admin"))
        parsed.role = DSC_ROLE_ADMIN;
    else {
        *why = "invalid role (read or admin)";
        return DSC_EINVAL;
    }
    if (!dsc_auth_secret_valid(secret.ptr, secret.len)) {
        *why = "invalid secret (16..256 printable ASCII bytes, no spaces)";
        return DSC_EINVAL;
    }
    parsed.datasets = line + pos;
    parsed.datasets_len = len - pos;
    size_t dpos = 0;
    dsc_str_t ds;
    int all = 0;
    uint32_t count = 0;
    while (next_field(parsed.datasets, parsed.datasets_len, &dpos, &ds)) {
        if (str_is(ds, "*")) {
            all = 1;
            continue;
        }
        if (!dataset_name_ok(ds)) {
            *why = "invalid dataset name (1..63 bytes)";
            return DSC_EINVAL;
        }
        count++;
    }
    if (all && count > 0) {
        *why = "'*' (every dataset) together with dataset names";
        return DSC_EINVAL;
    }
    parsed.dataset_count = count;
    *out = parsed;
    return 1;
}

int dsc_auth_line_next_dataset(const dsc_auth_line_t *line, size_t *pos, dsc_str_t *name) {
    while (next_field(line->datasets, line->datasets_len, pos, name))
        if (!str_is(*name, "*"))
            return 1;
    return 0;
}

int dsc_auth_token_parse(const char *text, size_t len, dsc_str_t *name, dsc_str_t *secret,
                         const char **why) {
    static const char *dummy;
    if (why == NULL)
        why = &dummy;
    if (text == NULL || name == NULL || secret == NULL) {
        *why = "no text";
        return DSC_EINVAL;
    }
    size_t start = 0;
    while (start < len) {
        const char *nl = memchr(text + start, '\n', len - start);
        size_t end = nl ? (size_t)(nl - text) : len;
        const char *line = text + start;
        size_t line_len = end - start;
        if (line_len > 0 && line[line_len - 1] == '\r')
            line_len--;
        start = end + 1;
        if (memchr(line, '\0', line_len) != NULL) {
            *why = "NUL byte in token file";
            return DSC_EINVAL;
        }
        size_t pos = 0;
        dsc_str_t f[3];
        int n = 0;
        while (n < 3 && next_field(line, line_len, &pos, &f[n]))
            n++;
        if (n == 0)
            continue;
        if (n == 1) {
            *why = "a token line needs NAME SECRET";
            return DSC_EINVAL;
        }
        /* NAME SECRET, or a server line NAME ROLE SECRET [...]: a secret is never a role word. */
        dsc_str_t s = (n == 3 && (str_is(f[1], "read") || str_is(f[1], "admin"))) ? f[2] : f[1];
        if (n == 3 && s.ptr == f[1].ptr) {
            *why = "a token line is NAME SECRET (or NAME ROLE SECRET [DATASET ...])";
            return DSC_EINVAL;
        }
        if (!dsc_auth_name_valid(f[0].ptr, f[0].len)) {
            *why = "invalid credential name (1..63 of A-Z a-z 0-9 . _ @ -)";
            return DSC_EINVAL;
        }
        if (!dsc_auth_secret_valid(s.ptr, s.len)) {
            *why = "invalid secret (16..256 printable ASCII bytes, no spaces)";
            return DSC_EINVAL;
        }
        *name = f[0];
        *secret = s;
        return 0;
    }
    *why = "no credential line";
    return DSC_EINVAL;
}
