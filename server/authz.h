/* Authentication and authorisation of one connection (docs/security.md): the HELLO/AUTH
 * challenge-response state, the role and dataset checks each request passes, the filtering of
 * LIST/STAT answers to the datasets a credential may see. Independent of the transport: the
 * connection embeds a dsc_conn_auth_t and the dispatcher calls these functions. */
#ifndef DSC_SERVER_AUTHZ_H
#define DSC_SERVER_AUTHZ_H

#include "auth.h"
#include "credstore.h"
#include "protocol.h"

#include <stddef.h>
#include <stdint.h>

/* The server's policy; lives as long as the server. */
typedef struct dsc_authz {
    dsc_credstore_t *store;    /* NULL: anonymous service (no --auth-file) */
    dsc_authfail_t *failures;  /* counted and logged failures (never NULL once initialised) */
    int allow_anonymous_admin; /* without a store: serve WARM/EVICT anonymously */
} dsc_authz_t;

typedef enum {
    DSC_AUTH_STATE_NONE = 0,   /* no HELLO yet, or an anonymous HELLO */
    DSC_AUTH_STATE_CHALLENGED, /* HELLO sent our nonce: waiting for AUTH */
    DSC_AUTH_STATE_OK,         /* authenticated as cred */
    DSC_AUTH_STATE_FAILED,     /* a failed AUTH: nothing more is served */
} dsc_auth_state_t;

/* Per-connection state; zero-initialised memory is a valid fresh state. */
typedef struct dsc_conn_auth {
    dsc_auth_state_t state;
    uint16_t version;
    char name[DSC_AUTH_NAME_MAX + 1];
    uint8_t client_nonce[DSC_AUTH_NONCE_SIZE];
    uint8_t server_nonce[DSC_AUTH_NONCE_SIZE];
    dsc_credset_t *set;     /* held while authenticated */
    const dsc_cred_t *cred; /* inside set */
    int revised;            /* cred was swapped for its reloaded version (dsc__authz_recheck) */
} dsc_conn_auth_t;

/* HELLO: with a store and a client asking for DSC_FEATURE_AUTH, grants the feature and puts a
 * fresh nonce in resp->server_nonce (pointing into ca). An unknown credential name gets a nonce
 * too, so names cannot be probed; it fails at AUTH. Returns DSC_STATUS_OK, or BAD_REQUEST with
 * *message (an auth field that is not an auth-init) or INTERNAL (no random bytes). */
uint32_t dsc__authz_hello(const dsc_authz_t *az, dsc_conn_auth_t *ca, const dsc_hello_req_t *req,
                          uint16_t version, dsc_hello_resp_t *resp, const char **message);
/* AUTH: checks the client's MAC (constant time) and writes the server's MAC into mac_out.
 * Returns DSC_STATUS_OK, or UNAUTHORIZED with *message (then the connection should be closed:
 * each nonce gets one try), counting and logging (rate-limited) the failure for peer. */
uint32_t dsc__authz_auth(const dsc_authz_t *az, dsc_conn_auth_t *ca, const uint8_t *body,
                         size_t len, const char *peer, uint8_t mac_out[DSC_AUTH_MAC_SIZE],
                         const char **message);
/* Whether the connection may run opcode (before its body is looked at): DSC_STATUS_OK, or
 * UNAUTHORIZED with *message; *close_after set when the connection must end (its credential was
 * removed or changed by a reload). Refusals are counted and logged for peer. HELLO, AUTH and
 * PING always pass; unknown opcodes pass (they are answered UNSUPPORTED). */
uint32_t dsc__authz_check(const dsc_authz_t *az, dsc_conn_auth_t *ca, uint8_t opcode,
                          const char *peer, const char **message, int *close_after);
/* Revocation at once (called for every connection on each loop tick, ~100 ms): after a reload,
 * re-checks an authenticated connection's credential. Returns 0 (nothing changed, or the
 * connection is not authenticated), 1 (the credential is still there with the same secret but
 * was reloaded, possibly with another dataset list: cred now points at the new one, so requests
 * see the new list at once; the caller ends what the old list allowed, e.g. RDMA leases), or -1
 * (removed or its secret changed: the credential is dropped, the failure counted and logged, and
 * the caller closes the connection). One atomic load when nothing was reloaded. */
int dsc__authz_recheck(const dsc_authz_t *az, dsc_conn_auth_t *ca, const char *peer);
/* 1 when the connection may see the dataset (anonymous and unrestricted credentials: all). A
 * dataset it may not see is answered NOT_FOUND, as if it did not exist. */
int dsc__authz_may_read(const dsc_conn_auth_t *ca, const char *dataset, size_t len);
/* Drops the entries of datasets the connection may not see from a LIST answer (a JSON array of
 * objects with "name") or a STAT answer (its "datasets" array, and its "jobs" by "dataset"). Takes
 * json (malloc'd) and returns the answer to send (json itself when nothing is restricted; NULL when
 * out of memory, json then freed). */
char *dsc__authz_filter_json(const dsc_conn_auth_t *ca, char *json);
/* Releases what the connection holds and wipes its nonces. Idempotent. */
void dsc__authz_conn_close(dsc_conn_auth_t *ca);
/* "admin", "read" or "anonymous": the connection's role, for logs. */
const char *dsc__authz_role_name(const dsc_conn_auth_t *ca);

#endif
