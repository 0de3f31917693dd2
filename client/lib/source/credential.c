/* Client credential loading (client/lib/source/credential.h): which file, bounded read, parse with
 * proto/auth.c, wipe. */
#include "credential.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOKEN_MAX_BYTES (64u << 10)

void dsc__credential_wipe(dsc_credential_t *cred) {
    if (cred != NULL)
        dsc_auth_wipe(cred, sizeof *cred);
}

static int read_token(const char *path, dsc_credential_t *out, char *why, size_t why_len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int rc = -errno;
        snprintf(why, why_len, "token file %s: %s", path, strerror(errno));
        return rc;
    }
    char *buf = malloc(TOKEN_MAX_BYTES + 1);
    if (buf == NULL) {
        close(fd);
        snprintf(why, why_len, "token file %s: out of memory", path);
        return DSC_ENOMEM;
    }
    size_t len = 0;
    int rc = 0;
    for (;;) {
        ssize_t n = read(fd, buf + len, TOKEN_MAX_BYTES + 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            snprintf(why, why_len, "token file %s: %s", path, strerror(errno));
            break;
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (len > TOKEN_MAX_BYTES) {
            rc = DSC_ETOOLARGE;
            snprintf(why, why_len, "token file %s: over 64 KiB", path);
            break;
        }
    }
    close(fd);
    if (rc == 0) {
        dsc_str_t name, secret;
        const char *reason = "invalid";
        rc = dsc_auth_token_parse(buf, len, &name, &secret, &reason);
        if (rc < 0) {
            snprintf(why, why_len, "token file %s: %s", path, reason);
        } else {
            memcpy(out->name, name.ptr, name.len);
            out->name[name.len] = '\0';
            memcpy(out->secret, secret.ptr, secret.len);
            out->secret[secret.len] = '\0';
            out->secret_len = secret.len;
            rc = 1;
        }
    }
    dsc_auth_wipe(buf, len < TOKEN_MAX_BYTES + 1 ? len : TOKEN_MAX_BYTES + 1);
    free(buf);
    return rc;
}

int dsc__credential_load(const char *path, dsc_credential_t *out, char *why, size_t why_len) {
    char scratch[8];
    if (why == NULL || why_len == 0) {
        why = scratch;
        why_len = sizeof scratch;
    }
    why[0] = '\0';
    if (out == NULL)
        return DSC_EINVAL;
    memset(out, 0, sizeof *out);
    if (path != NULL && path[0] != '\0')
        return read_token(path, out, why, why_len);
    const char *env = getenv(DSC_TOKEN_ENV);
    if (env != NULL && env[0] != '\0')
        return read_token(env, out, why, why_len);
    if (access(DSC_TOKEN_DEFAULT_PATH, F_OK) == 0)
        return read_token(DSC_TOKEN_DEFAULT_PATH, out, why, why_len);
    return 0;
}
