/* Server credentials (--auth-file, docs/security.md): an immutable, reference-counted set of
 * credentials (name, role, secret, datasets) swapped whole on reload, and the rate-limited
 * record of authentication failures. Does no logging itself: it hands back the lines to log. */
#ifndef DSC_SERVER_CREDSTORE_H
#define DSC_SERVER_CREDSTORE_H

#include "auth.h"

#include <stddef.h>
#include <stdint.h>

typedef struct dsc_credstore dsc_credstore_t;
typedef struct dsc_credset dsc_credset_t;
typedef struct dsc_cred dsc_cred_t;

/* Reads the credential file at path (format: proto/auth.h dsc_auth_line_parse, one credential
 * per line; duplicate names, an empty set or any bad line reject the whole file). Returns 0 and
 * *out, or DSC_EINVAL / -errno / DSC_ENOMEM with a reason ("FILE:LINE: why") in err. */
int dsc_credstore_create(const char *path, dsc_credstore_t **out, char *err, size_t err_len);
/* How the credential file is protected, checked on the descriptor it is read from (as ssh checks
 * private keys): a file group- or world-readable or -writable, or owned by another user than
 * this process's (root excepted), gets a one-line warning in `warn` ("FILE is readable by group
 * and others (mode 0644): chmod 600 FILE"), empty when it is fine. With refuse_insecure such a
 * file is refused instead (DSC_EUNAUTH, the same line in err). */
int dsc_credstore_open(const char *path, int refuse_insecure, dsc_credstore_t **out, char *err,
                       size_t err_len, char *warn, size_t warn_len);
/* As dsc_credstore_reload, with the file's protection checked as at dsc_credstore_open (the
 * store's refuse_insecure applies; warn gets the warning, or ""). */
int dsc_credstore_reload_checked(dsc_credstore_t *cs, char *err, size_t err_len, char *warn,
                                 size_t warn_len);
/* Reads the file again and, when it is valid, makes it the current set (connections already
 * authenticated are re-checked on their next request: a removed credential or changed secret
 * ends them). A bad file keeps the current set. Returns the number of credentials, or an error
 * as above with the reason in err. Any thread. */
int dsc_credstore_reload(dsc_credstore_t *cs, char *err, size_t err_len);
/* Frees the store (and the current set once no connection holds it). NULL is a no-op. */
void dsc_credstore_destroy(dsc_credstore_t *cs);

/* Bumped by every successful reload; cheap (one atomic load). */
uint64_t dsc_credstore_generation(const dsc_credstore_t *cs);
/* The current set, with a reference the caller releases. Never NULL. Any thread. */
dsc_credset_t *dsc_credstore_acquire(dsc_credstore_t *cs);
void dsc_credset_release(dsc_credset_t *set); /* NULL is a no-op */
/* The set's generation (the store's generation when it was installed). */
uint64_t dsc_credset_generation(const dsc_credset_t *set);
/* The credential named name (len bytes), or NULL. Valid while the set is held. */
const dsc_cred_t *dsc_credset_find(const dsc_credset_t *set, const char *name, size_t len);
uint32_t dsc_credset_count(const dsc_credset_t *set);

const char *dsc_cred_name(const dsc_cred_t *cred);
dsc_role_t dsc_cred_role(const dsc_cred_t *cred);
const char *dsc_cred_secret(const dsc_cred_t *cred, size_t *len);
/* 1 when the two credentials have the same name and secret (constant time in the secret). */
int dsc_cred_same(const dsc_cred_t *a, const dsc_cred_t *b);
/* Datasets the credential is limited to (0: every dataset). */
uint32_t dsc_cred_dataset_count(const dsc_cred_t *cred);
/* 1 when the credential may see the dataset (no dataset list: every dataset). */
int dsc_cred_may_read(const dsc_cred_t *cred, const char *dataset, size_t len);

/* Authentication failures: counted for /metrics and logged with a rate limit. */
typedef struct dsc_authfail dsc_authfail_t;
#define DSC_AUTH_LOG_INTERVAL 60 /* seconds between two lines about one peer */
#define DSC_AUTH_LOG_BURST 10    /* lines per second over all peers */
/* Returns a counter, or NULL (out of memory). Free with dsc_authfail_destroy (NULL: no-op). */
dsc_authfail_t *dsc_authfail_create(void);
void dsc_authfail_destroy(dsc_authfail_t *af);
/* Counts one failure from peer (an address text, e.g. "10.0.0.7") and decides whether to log
 * it: returns 1 and the line to log in line (naming the failures from that peer not logged since
 * its last line) at most once per peer per DSC_AUTH_LOG_INTERVAL and DSC_AUTH_LOG_BURST lines a
 * second over all peers; else 0. Any thread. */
int dsc_authfail_record(dsc_authfail_t *af, const char *peer, const char *reason, char *line,
                        size_t line_len);
/* Failures recorded since start (NULL: 0). Any thread. */
uint64_t dsc_authfail_total(const dsc_authfail_t *af);

#endif
