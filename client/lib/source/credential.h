/* Client credential (docs/security.md): the name and secret this process authenticates with,
 * read from an explicit token file, $DSCACHE_TOKEN_FILE, or the Kubernetes default path. */
#ifndef DSC_CREDENTIAL_H
#define DSC_CREDENTIAL_H

#include "auth.h"

#include <stddef.h>

/* Where a Kubernetes pod mounts the token Secret by default (docs/security.md). */
#define DSC_TOKEN_DEFAULT_PATH "/var/run/secrets/dscache/token"
#define DSC_TOKEN_ENV "DSCACHE_TOKEN_FILE"

typedef struct dsc_credential {
    char name[DSC_AUTH_NAME_MAX + 1];
    char secret[DSC_AUTH_SECRET_MAX + 1];
    size_t secret_len;
} dsc_credential_t;

/* Finds and reads the credential: path when given (non-NULL, non-empty), else $DSCACHE_TOKEN_FILE
 * when set and non-empty, else DSC_TOKEN_DEFAULT_PATH when that file exists. Returns 1 with *out
 * filled, 0 when none is configured (anonymous; *out zeroed), or an error with a reason in why
 * (naming the file): -errno (a named file cannot be read), DSC_EINVAL (bad contents),
 * DSC_ETOOLARGE (over 64 KiB). The file's bytes are wiped from memory after parsing. */
int dsc__credential_load(const char *path, dsc_credential_t *out, char *why, size_t why_len);
/* Wipes the secret (and name). NULL is a no-op. */
void dsc__credential_wipe(dsc_credential_t *cred);

#endif
