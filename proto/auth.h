/* Authentication (proto/PROTOCOL.md, Authentication): the HELLO auth-init codec, the AUTH
 * bodies, the HMAC-SHA-256 challenge-response over both nonces, and the parser of credential
 * lines. Pure functions over memory: no I/O, no allocation, safe on hostile input. Nonces come from
 * dsc_auth_random (sys). */
#ifndef DSC_AUTH_H
#define DSC_AUTH_H

#include "protocol.h"

#include <stddef.h>
#include <stdint.h>

/* DSC_FEATURE_AUTH and DSC_AUTH_NONCE_SIZE: protocol.h (the HELLO codec carries the nonce). */
#define DSC_AUTH_METHOD_HMAC_SHA256 1
#define DSC_AUTH_MAC_SIZE 32
#define DSC_AUTH_NAME_MAX 63    /* credential name bytes */
#define DSC_AUTH_SECRET_MIN 16  /* secret bytes */
#define DSC_AUTH_SECRET_MAX 256 /* secret bytes */
#define DSC_AUTH_INIT_MAX (2 + DSC_AUTH_NAME_MAX + DSC_AUTH_NONCE_SIZE)

/* Which side computes the MAC: the label that goes first into it, so that a client's MAC can
 * never be reflected as a server's and back. */
typedef enum { DSC_AUTH_CLIENT = 0, DSC_AUTH_SERVER = 1 } dsc_auth_dir_t;

typedef enum { DSC_ROLE_READ = 1, DSC_ROLE_ADMIN = 2 } dsc_role_t;

/* The HELLO `auth` field of a client that sets DSC_FEATURE_AUTH. */
typedef struct dsc_auth_init {
    uint8_t method;              /* DSC_AUTH_METHOD_HMAC_SHA256 */
    dsc_str_t name;              /* credential name, 1..63 bytes of [A-Za-z0-9._@-] */
    const uint8_t *client_nonce; /* DSC_AUTH_NONCE_SIZE bytes */
} dsc_auth_init_t;

/* 1 when name (len bytes) is a valid credential name: 1..63 bytes of [A-Za-z0-9._@-]. */
int dsc_auth_name_valid(const char *name, size_t len);
/* 1 when the secret is 16..256 printable, non-space ASCII bytes (0x21..0x7e). */
int dsc_auth_secret_valid(const char *secret, size_t len);

/* Encodes the auth-init into out. Returns the bytes written (2 + name + 32), DSC_ENOSPC, or
 * DSC_EINVAL (unknown method, invalid name, nonce NULL). */
int dsc_auth_init_encode(const dsc_auth_init_t *init, uint8_t *out, size_t cap);
/* Decodes an auth-init from the HELLO auth field. Returns 0 or DSC_EBADFRAME (truncated,
 * trailing bytes, unknown method, invalid name); on error *out is untouched. Pointers point into
 * body. */
int dsc_auth_init_decode(const uint8_t *body, size_t len, dsc_auth_init_t *out);
/* AUTH request and AUTH OK response bodies are exactly one MAC. Decode: 0 and *mac pointing
 * into body, or DSC_EBADFRAME (len != DSC_AUTH_MAC_SIZE). */
int dsc_auth_mac_decode(const uint8_t *body, size_t len, const uint8_t **mac);

/* Computes HMAC-SHA-256 with key = the secret's bytes over
 *   label || 0x00 || u16 version || u8 name_len || name || client_nonce || server_nonce
 * where label is "dscache-auth-v1 client" (DSC_AUTH_CLIENT) or "dscache-auth-v1 server",
 * version the negotiated protocol version (little-endian). Returns 0, or DSC_EINVAL (invalid
 * secret or name, NULL nonce). Thread-safe. */
int dsc_auth_mac(dsc_auth_dir_t dir, const char *secret, size_t secret_len, uint16_t version,
                 const char *name, size_t name_len, const uint8_t client_nonce[DSC_AUTH_NONCE_SIZE],
                 const uint8_t server_nonce[DSC_AUTH_NONCE_SIZE], uint8_t mac[DSC_AUTH_MAC_SIZE]);
/* Compares two MACs in constant time: 1 when equal, else 0. */
int dsc_auth_mac_equal(const uint8_t a[DSC_AUTH_MAC_SIZE], const uint8_t b[DSC_AUTH_MAC_SIZE]);
/* Overwrites len bytes at p with zeros in a way the compiler does not remove. NULL is a no-op. */
void dsc_auth_wipe(void *p, size_t len);

/* One line of a credential file: NAME ROLE SECRET [DATASET ...], fields separated by spaces or
 * tabs, '#' starts a comment (at the start of a field), no datasets (or "*") = every dataset. */
typedef struct dsc_auth_line {
    dsc_str_t name;
    dsc_role_t role;
    dsc_str_t secret;
    const char *datasets; /* the rest of the line after SECRET (may be empty) */
    size_t datasets_len;
    uint32_t dataset_count; /* 0: every dataset */
} dsc_auth_line_t;
/* Parses one line (len bytes, no newline; a trailing '\r' is ignored). Returns 1 and *out for a
 * credential, 0 for a blank or comment line, or DSC_EINVAL with *why set to a static reason
 * (name, role, secret or dataset invalid, missing fields). Pointers point into line. */
int dsc_auth_line_parse(const char *line, size_t len, dsc_auth_line_t *out, const char **why);
/* Next whitespace-separated dataset of a parsed line's datasets; *pos starts at 0. Returns 1
 * and *name, or 0 at the end. */
int dsc_auth_line_next_dataset(const dsc_auth_line_t *line, size_t *pos, dsc_str_t *name);

/* A client token file: the first credential line of text, either NAME SECRET or a server-file
 * line NAME ROLE SECRET [DATASET ...] (the role and datasets are ignored). Returns 0 with
 * *name and *secret pointing into text, or DSC_EINVAL with *why (no credential line, invalid
 * name or secret). */
int dsc_auth_token_parse(const char *text, size_t len, dsc_str_t *name, dsc_str_t *secret,
                         const char **why);

#endif
