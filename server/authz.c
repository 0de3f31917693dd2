/* Connection authentication and authorisation (server/authz.h): HELLO nonce, AUTH check and the
 * server's proof, per-request role and dataset checks with re-validation after a credential
 * reload, LIST/STAT filtering. */
#include "authz.h"
#include "dsc_sys.h"
#include "srvlog.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Opcodes 16..31 are the admin range (WARM, EVICT and later ones). */
static int is_admin_op(uint8_t opcode) {
    return opcode >= 16 && opcode < 32;
}

static void record_failure(const dsc_authz_t *az, const char *peer, const char *reason) {
    char line[256];
    if (dsc_authfail_record(az->failures, peer ? peer : "?", reason, line, sizeof line))
        LOG_WARN("%s", line);
}

static void drop_credential(dsc_conn_auth_t *ca) {
    dsc_credset_release(ca->set);
    ca->set = NULL;
    ca->cred = NULL;
}

uint32_t dsc__authz_hello(const dsc_authz_t *az, dsc_conn_auth_t *ca, const dsc_hello_req_t *req,
                          uint16_t version, dsc_hello_resp_t *resp, const char **message) {
    /* A second HELLO starts over: whatever was proven before no longer holds. */
    drop_credential(ca);
    ca->state = DSC_AUTH_STATE_NONE;
    ca->version = version;
    resp->features = 0;
    resp->server_nonce = NULL;
    if (az->store == NULL || !(req->features & DSC_FEATURE_AUTH))
        return DSC_STATUS_OK; /* anonymous; a store then refuses every data request */
    dsc_auth_init_t init;
    if (dsc_auth_init_decode((const uint8_t *)req->auth.ptr, req->auth.len, &init) < 0) {
        *message = "malformed authentication in HELLO";
        return DSC_STATUS_BAD_REQUEST;
    }
    if (dsc_auth_random(ca->server_nonce, sizeof ca->server_nonce) < 0) {
        *message = "no random source for the authentication nonce";
        return DSC_STATUS_INTERNAL;
    }
    memcpy(ca->name, init.name.ptr, init.name.len);
    ca->name[init.name.len] = '\0';
    memcpy(ca->client_nonce, init.client_nonce, DSC_AUTH_NONCE_SIZE);
    ca->state = DSC_AUTH_STATE_CHALLENGED;
    resp->features = DSC_FEATURE_AUTH;
    resp->server_nonce = ca->server_nonce;
    return DSC_STATUS_OK;
}

uint32_t dsc__authz_auth(const dsc_authz_t *az, dsc_conn_auth_t *ca, const uint8_t *body,
                         size_t len, const char *peer, uint8_t mac_out[DSC_AUTH_MAC_SIZE],
                         const char **message) {
    if (az->store == NULL) {
        *message = "this server does not authenticate (no --auth-file)";
        return DSC_STATUS_UNSUPPORTED;
    }
    if (ca->state != DSC_AUTH_STATE_CHALLENGED) {
        drop_credential(ca); /* an AUTH out of turn ends what was proven before */
        ca->state = DSC_AUTH_STATE_FAILED;
        *message = "AUTH without a fresh HELLO challenge";
        record_failure(az, peer, "AUTH without a HELLO challenge");
        return DSC_STATUS_UNAUTHORIZED;
    }
    /* One try per nonce, whatever the outcome. */
    ca->state = DSC_AUTH_STATE_FAILED;
    *message = "authentication failed";
    const uint8_t *theirs;
    if (dsc_auth_mac_decode(body, len, &theirs) < 0) {
        record_failure(az, peer, "malformed AUTH");
        return DSC_STATUS_UNAUTHORIZED;
    }
    dsc_credset_t *set = dsc_credstore_acquire(az->store);
    const dsc_cred_t *cred = dsc_credset_find(set, ca->name, strlen(ca->name));
    uint8_t expect[DSC_AUTH_MAC_SIZE];
    size_t secret_len = 0;
    const char *secret = cred ? dsc_cred_secret(cred, &secret_len) : NULL;
    int ok = cred != NULL &&
             dsc_auth_mac(DSC_AUTH_CLIENT, secret, secret_len, ca->version, ca->name,
                          strlen(ca->name), ca->client_nonce, ca->server_nonce, expect) == 0 &&
             dsc_auth_mac_equal(theirs, expect) &&
             dsc_auth_mac(DSC_AUTH_SERVER, secret, secret_len, ca->version, ca->name,
                          strlen(ca->name), ca->client_nonce, ca->server_nonce, mac_out) == 0;
    dsc_auth_wipe(expect, sizeof expect);
    dsc_auth_wipe(ca->server_nonce, sizeof ca->server_nonce);
    if (!ok) {
        dsc_credset_release(set);
        char reason[128];
        snprintf(reason, sizeof reason, "credential \"%s\": %s", ca->name,
                 cred ? "wrong proof of the secret" : "unknown name");
        record_failure(az, peer, reason);
        return DSC_STATUS_UNAUTHORIZED;
    }
    ca->set = set;
    ca->cred = cred;
    ca->state = DSC_AUTH_STATE_OK;
    *message = NULL;
    LOG_DEBUG("peer %s authenticated as %s (%s)", peer ? peer : "?", ca->name,
              dsc__authz_role_name(ca));
    return DSC_STATUS_OK;
}

/* After a reload: keep the connection when its credential is still there, unchanged. */
static int revalidate(const dsc_authz_t *az, dsc_conn_auth_t *ca) {
    if (dsc_credstore_generation(az->store) == dsc_credset_generation(ca->set))
        return 1;
    dsc_credset_t *set = dsc_credstore_acquire(az->store);
    const dsc_cred_t *now = dsc_credset_find(set, ca->name, strlen(ca->name));
    if (now == NULL || !dsc_cred_same(now, ca->cred)) {
        dsc_credset_release(set);
        return 0;
    }
    dsc_credset_release(ca->set);
    ca->set = set;
    ca->cred = now;
    ca->revised = 1;
    return 1;
}

int dsc__authz_recheck(const dsc_authz_t *az, dsc_conn_auth_t *ca, const char *peer) {
    if (az->store == NULL || ca->state != DSC_AUTH_STATE_OK || ca->set == NULL)
        return 0;
    if (!revalidate(az, ca)) {
        char reason[160];
        snprintf(reason, sizeof reason,
                 "credential \"%s\" removed or changed by a reload: connection closed", ca->name);
        record_failure(az, peer, reason);
        drop_credential(ca);
        ca->state = DSC_AUTH_STATE_FAILED;
        return -1;
    }
    if (!ca->revised)
        return 0;
    ca->revised = 0;
    return 1;
}

uint32_t dsc__authz_check(const dsc_authz_t *az, dsc_conn_auth_t *ca, uint8_t opcode,
                          const char *peer, const char **message, int *close_after) {
    *close_after = 0;
    if (opcode == DSC_OP_HELLO || opcode == DSC_OP_AUTH || opcode == DSC_OP_PING)
        return DSC_STATUS_OK;
    if (az->store == NULL) {
        if (is_admin_op(opcode) && !az->allow_anonymous_admin) {
            *message = "admin operation refused: this server has no --auth-file and no "
                       "--allow-anonymous-admin";
            record_failure(az, peer, "anonymous admin operation");
            return DSC_STATUS_UNAUTHORIZED;
        }
        return DSC_STATUS_OK;
    }
    if (ca->state != DSC_AUTH_STATE_OK) {
        *message = "authentication required: connect with a credential (--auth-file or "
                   "DSCACHE_TOKEN_FILE, docs/security.md)";
        record_failure(az, peer,
                       ca->state == DSC_AUTH_STATE_FAILED ? "request after a failed authentication"
                                                          : "request before authentication");
        return DSC_STATUS_UNAUTHORIZED;
    }
    if (!revalidate(az, ca)) {
        char reason[128];
        snprintf(reason, sizeof reason, "credential \"%s\" removed or changed by a reload",
                 ca->name);
        record_failure(az, peer, reason);
        drop_credential(ca);
        ca->state = DSC_AUTH_STATE_FAILED;
        *message = "credential removed or changed: authenticate again";
        *close_after = 1;
        return DSC_STATUS_UNAUTHORIZED;
    }
    if (is_admin_op(opcode) && dsc_cred_role(ca->cred) != DSC_ROLE_ADMIN) {
        char reason[128];
        snprintf(reason, sizeof reason, "credential \"%s\" (read) asked for %s", ca->name,
                 dsc_opcode_name(opcode));
        record_failure(az, peer, reason);
        *message = "admin operation refused: the credential's role is read";
        return DSC_STATUS_UNAUTHORIZED;
    }
    return DSC_STATUS_OK;
}

int dsc__authz_may_read(const dsc_conn_auth_t *ca, const char *dataset, size_t len) {
    if (ca->state != DSC_AUTH_STATE_OK || ca->cred == NULL)
        return 1; /* anonymous service: the gate has already refused what is refused */
    return dsc_cred_may_read(ca->cred, dataset, len);
}

/* Drops the objects of `array` whose dataset (member `key`) the credential may not read. */
static void filter_array(const dsc_conn_auth_t *ca, cJSON *array, const char *key) {
    cJSON *item = array ? array->child : NULL;
    while (item != NULL) {
        cJSON *next = item->next;
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(item, key);
        if (!cJSON_IsString(name) ||
            !dsc__authz_may_read(ca, name->valuestring, strlen(name->valuestring)))
            cJSON_Delete(cJSON_DetachItemViaPointer(array, item));
        item = next;
    }
}

char *dsc__authz_filter_json(const dsc_conn_auth_t *ca, char *json) {
    if (json == NULL || ca->state != DSC_AUTH_STATE_OK || ca->cred == NULL ||
        dsc_cred_dataset_count(ca->cred) == 0)
        return json;
    cJSON *root = cJSON_Parse(json);
    free(json);
    if (root == NULL)
        return NULL;
    if (cJSON_IsArray(root)) {
        filter_array(ca, root, "name");
    } else {
        filter_array(ca, cJSON_GetObjectItemCaseSensitive(root, "datasets"), "name");
        /* STAT's job list: a job on a dataset the credential may not see is not shown either. */
        filter_array(ca, cJSON_GetObjectItemCaseSensitive(root, "jobs"), "dataset");
    }
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return out;
}

void dsc__authz_conn_close(dsc_conn_auth_t *ca) {
    drop_credential(ca);
    dsc_auth_wipe(ca->client_nonce, sizeof ca->client_nonce);
    dsc_auth_wipe(ca->server_nonce, sizeof ca->server_nonce);
}

const char *dsc__authz_role_name(const dsc_conn_auth_t *ca) {
    if (ca->state != DSC_AUTH_STATE_OK || ca->cred == NULL)
        return "anonymous";
    return dsc_cred_role(ca->cred) == DSC_ROLE_ADMIN ? "admin" : "read";
}
