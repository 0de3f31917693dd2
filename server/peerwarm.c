/* Peer warm-up: a whole-shard load asks the shard's other live owners for their resident copy
 * (PEER_READ) before the catalog reads the backing storage. See peerwarm.h. */
#include "peerwarm.h"
#include "auth.h"
#include "dsc_sys.h"
#include "peer.h"
#include "protocol.h"
#include "srvlog.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define POOL_MAX 16 /* idle connections kept, over every peer */
#define DEAD_MAX 64 /* peers remembered as refusing */

typedef struct pooled {
    char addr[DSC_MEMBER_MAX];
    int fd;
} pooled_t;

typedef struct dead_peer {
    char addr[DSC_MEMBER_MAX];
    double until;
} dead_peer_t;

struct dsc_peerwarm {
    dsc_peer_source_t source;
    dsc_cluster_t *cluster;
    dsc_credstore_t *credentials;
    char credential[DSC_AUTH_NAME_MAX + 1];
    uint64_t rate;
    uint32_t timeout_ms;
    pthread_mutex_t lock; /* pool, dead, pace_next, next_id, logged */
    pooled_t pool[POOL_MAX];
    uint32_t pool_len;
    dead_peer_t dead[DEAD_MAX];
    double pace_next;
    uint64_t next_id;
    int logged_auth; /* an authentication failure was logged */
    double log_next; /* the next time a failure may be logged (at most one a second) */
};

/* At most one line a second: a failing peer costs no flood. */
static int may_log(dsc_peerwarm_t *pw) {
    pthread_mutex_lock(&pw->lock);
    double now = dsc_now_s();
    int ok = now >= pw->log_next;
    if (ok)
        pw->log_next = now + 1;
    pthread_mutex_unlock(&pw->lock);
    return ok;
}

/* ---- blocking socket helpers ------------------------------------------------------------- */

static int wait_fd(int fd, short events, uint32_t timeout_ms) {
    struct pollfd p = {.fd = fd, .events = events};
    for (;;) {
        int n = poll(&p, 1, (int)timeout_ms);
        if (n > 0)
            return 0;
        if (n == 0)
            return DSC_ETIMEDOUT;
        if (errno != EINTR)
            return -errno;
    }
}

static int send_all(int fd, const uint8_t *p, size_t len, uint32_t timeout_ms) {
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                int rc = wait_fd(fd, POLLOUT, timeout_ms);
                if (rc < 0)
                    return rc;
                continue;
            }
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int recv_all(int fd, uint8_t *p, size_t len, uint32_t timeout_ms) {
    while (len > 0) {
        ssize_t n = recv(fd, p, len, 0);
        if (n == 0)
            return DSC_ECONNRESET;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                int rc = wait_fd(fd, POLLIN, timeout_ms);
                if (rc < 0)
                    return rc;
                continue;
            }
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int connect_to(const char *addr, uint32_t timeout_ms, int *out) {
    char host[DSC_MEMBER_MAX];
    uint16_t port;
    if (dsc_split_hostport(addr, host, sizeof host, &port) < 0)
        return DSC_EINVAL;
    char port_text[8];
    snprintf(port_text, sizeof port_text, "%u", (unsigned)port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, port_text, &hints, &res) != 0 || res == NULL)
        return DSC_EUNAVAIL;
    int rc = DSC_EUNAVAIL;
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        int fd =
            socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) {
            rc = -errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
            if (errno != EINPROGRESS) {
                rc = -errno;
                close(fd);
                continue;
            }
            rc = wait_fd(fd, POLLOUT, timeout_ms);
            int soerr = 0;
            socklen_t slen = sizeof soerr;
            if (rc == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &slen) == 0 && soerr)
                rc = -soerr;
            if (rc < 0) {
                close(fd);
                continue;
            }
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        *out = fd;
        freeaddrinfo(res);
        return 0;
    }
    freeaddrinfo(res);
    return rc;
}

/* One request frame out, one answer's header in (same opcode and id, a response). The body is
 * the caller's to read (hdr->body_len bytes). */
static int roundtrip(dsc_peerwarm_t *pw, int fd, uint32_t tmo, uint8_t opcode, const uint8_t *body,
                     size_t len, dsc_frame_header_t *hdr) {
    pthread_mutex_lock(&pw->lock);
    uint64_t id = ++pw->next_id;
    pthread_mutex_unlock(&pw->lock);
    uint8_t head[DSC_FRAME_HEADER_SIZE];
    dsc_frame_header_t h = {.version = DSC_PROTO_VERSION,
                            .opcode = opcode,
                            .request_id = id,
                            .body_len = (uint32_t)len};
    dsc_frame_header_encode(&h, head);
    int rc = send_all(fd, head, sizeof head, tmo);
    if (rc == 0 && len > 0)
        rc = send_all(fd, body, len, tmo);
    if (rc == 0)
        rc = recv_all(fd, head, sizeof head, tmo);
    if (rc < 0)
        return rc;
    rc = dsc_frame_header_decode(head, sizeof head, DSC_FRAME_MAX_BODY, hdr);
    if (rc < 0)
        return rc;
    if (!(hdr->flags & DSC_FLAG_RESPONSE) || hdr->opcode != opcode || hdr->request_id != id)
        return DSC_EPROTO;
    return 0;
}

/* Reads an error answer's message into msg (cut) and drops the rest. */
static int read_message(int fd, uint32_t tmo, uint32_t len, char *msg, size_t cap) {
    uint8_t buf[DSC_ERROR_MAX_MESSAGE];
    if (len > sizeof buf)
        return DSC_EPROTO;
    int rc = recv_all(fd, buf, len, tmo);
    if (rc < 0)
        return rc;
    size_t n = len < cap - 1 ? len : cap - 1;
    memcpy(msg, buf, n);
    msg[n] = '\0';
    return 0;
}

/* HELLO (and AUTH with the credential). Returns 0, or an error with why set. */
static int handshake(dsc_peerwarm_t *pw, int fd, uint32_t tmo, const char **why) {
    uint8_t nonce[DSC_AUTH_NONCE_SIZE], init[DSC_AUTH_INIT_MAX];
    char secret[DSC_AUTH_SECRET_MAX + 1];
    size_t secret_len = 0;
    int auth = pw->credential[0] != '\0';
    int init_len = 0, rc;
    if (auth) {
        dsc_credset_t *set = dsc_credstore_acquire(pw->credentials);
        const dsc_cred_t *cred = dsc_credset_find(set, pw->credential, strlen(pw->credential));
        if (cred != NULL) {
            const char *s = dsc_cred_secret(cred, &secret_len);
            memcpy(secret, s, secret_len);
        }
        dsc_credset_release(set);
        if (cred == NULL) {
            *why = "the peer credential is no longer in --auth-file";
            return DSC_EUNAUTH;
        }
        if (dsc_auth_random(nonce, sizeof nonce) < 0) {
            *why = "no random bytes for a nonce";
            rc = DSC_EIO;
            goto done;
        }
        dsc_auth_init_t ai = {.method = DSC_AUTH_METHOD_HMAC_SHA256,
                              .name = {pw->credential, (uint16_t)strlen(pw->credential)},
                              .client_nonce = nonce};
        init_len = dsc_auth_init_encode(&ai, init, sizeof init);
        if (init_len < 0) {
            rc = init_len;
            *why = "cannot encode the auth-init";
            goto done;
        }
    }
    const char *self = dsc_cluster_self(pw->cluster);
    char name[128];
    snprintf(name, sizeof name, "dscached peer warm-up %s", self);
    dsc_hello_req_t hello = {.min_version = 1,
                             .max_version = DSC_PROTO_VERSION,
                             .features = auth ? DSC_FEATURE_AUTH : 0,
                             .members_hash = dsc_cluster_hello_hash(pw->cluster),
                             .auth = {(const char *)init, (uint16_t)init_len},
                             .client_name = {name, (uint16_t)strlen(name)}};
    uint8_t body[512];
    int len = dsc_hello_req_encode(&hello, body, sizeof body);
    dsc_frame_header_t h;
    rc = len < 0 ? len : roundtrip(pw, fd, tmo, DSC_OP_HELLO, body, (size_t)len, &h);
    if (rc < 0) {
        *why = "HELLO";
        goto done;
    }
    if (h.status != DSC_STATUS_OK || h.body_len > sizeof body) {
        *why = "HELLO refused";
        rc = DSC_EPROTO;
        goto done;
    }
    if ((rc = recv_all(fd, body, h.body_len, tmo)) < 0) {
        *why = "HELLO answer";
        goto done;
    }
    dsc_hello_resp_t resp;
    if ((rc = dsc_hello_resp_decode(body, h.body_len, &resp)) < 0) {
        *why = "malformed HELLO answer";
        goto done;
    }
    if (!auth)
        goto done;
    if (!(resp.features & DSC_FEATURE_AUTH) || resp.server_nonce == NULL) {
        *why = "the peer does not authenticate (no --auth-file): refusing to present a "
               "credential to it";
        rc = DSC_EUNAUTH;
        goto done;
    }
    uint8_t mac[DSC_AUTH_MAC_SIZE], server_mac[DSC_AUTH_MAC_SIZE];
    const size_t name_len = strlen(pw->credential);
    if ((rc = dsc_auth_mac(DSC_AUTH_CLIENT, secret, secret_len, resp.version, pw->credential,
                           name_len, nonce, resp.server_nonce, mac)) < 0 ||
        (rc = dsc_auth_mac(DSC_AUTH_SERVER, secret, secret_len, resp.version, pw->credential,
                           name_len, nonce, resp.server_nonce, server_mac)) < 0) {
        *why = "cannot compute the MAC";
        goto done;
    }
    if ((rc = roundtrip(pw, fd, tmo, DSC_OP_AUTH, mac, sizeof mac, &h)) < 0) {
        *why = "AUTH";
        goto done;
    }
    if (h.status != DSC_STATUS_OK || h.body_len != DSC_AUTH_MAC_SIZE) {
        *why = "the peer refused the credential (UNAUTHORIZED)";
        rc = DSC_EUNAUTH;
        goto done;
    }
    if ((rc = recv_all(fd, mac, sizeof mac, tmo)) < 0) {
        *why = "AUTH answer";
        goto done;
    }
    if (!dsc_auth_mac_equal(mac, server_mac)) {
        *why = "the peer's MAC is wrong: it does not hold the credential's secret";
        rc = DSC_EUNAUTH;
    }
done:
    dsc_auth_wipe(secret, sizeof secret);
    return rc;
}

/* ---- pool, dead peers, pacing ------------------------------------------------------------ */

static int pool_take(dsc_peerwarm_t *pw, const char *addr) {
    int fd = -1;
    pthread_mutex_lock(&pw->lock);
    for (uint32_t i = 0; i < pw->pool_len; i++)
        if (strcmp(pw->pool[i].addr, addr) == 0) {
            fd = pw->pool[i].fd;
            pw->pool[i] = pw->pool[--pw->pool_len];
            break;
        }
    pthread_mutex_unlock(&pw->lock);
    return fd;
}

static void pool_put(dsc_peerwarm_t *pw, const char *addr, int fd) {
    pthread_mutex_lock(&pw->lock);
    if (pw->pool_len < POOL_MAX) {
        snprintf(pw->pool[pw->pool_len].addr, sizeof pw->pool[0].addr, "%s", addr);
        pw->pool[pw->pool_len++].fd = fd;
        fd = -1;
    }
    pthread_mutex_unlock(&pw->lock);
    if (fd >= 0)
        close(fd);
}

static int is_dead(dsc_peerwarm_t *pw, const char *addr, double now) {
    int dead = 0;
    pthread_mutex_lock(&pw->lock);
    for (uint32_t i = 0; i < DEAD_MAX; i++)
        if (pw->dead[i].until > now && strcmp(pw->dead[i].addr, addr) == 0)
            dead = 1;
    pthread_mutex_unlock(&pw->lock);
    return dead;
}

static void mark_dead(dsc_peerwarm_t *pw, const char *addr, double now) {
    pthread_mutex_lock(&pw->lock);
    uint32_t slot = 0;
    for (uint32_t i = 0; i < DEAD_MAX; i++)
        if (pw->dead[i].until < pw->dead[slot].until)
            slot = i;
    snprintf(pw->dead[slot].addr, sizeof pw->dead[slot].addr, "%s", addr);
    pw->dead[slot].until = now + DSC_PEERWARM_DEAD_MS / 1e3;
    pthread_mutex_unlock(&pw->lock);
}

/* Waits for the turn of `bytes` under --peer-rate (over every I/O thread). */
static void pace(dsc_peerwarm_t *pw, uint64_t bytes) {
    pthread_mutex_lock(&pw->lock);
    double now = dsc_now_s();
    double start = pw->pace_next > now ? pw->pace_next : now;
    pw->pace_next = start + (double)bytes / (double)pw->rate;
    pthread_mutex_unlock(&pw->lock);
    double wait = start - now;
    if (wait > 0) {
        struct timespec ts = {.tv_sec = (time_t)wait,
                              .tv_nsec = (long)((wait - (double)(time_t)wait) * 1e9)};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
}

/* ---- the fetch --------------------------------------------------------------------------- */

/* Reads the whole shard file from one peer. Returns 0, DSC_EUNAVAIL (the peer does not hold it:
 * the connection stays usable) or another error (the connection is dropped). */
static int fetch_from(dsc_peerwarm_t *pw, int fd, uint32_t tmo, const char *dataset,
                      uint64_t version, uint32_t shard_id, uint64_t bytes, uint8_t *dst, char *msg,
                      size_t cap) {
    for (uint64_t off = 0; off < bytes;) {
        uint32_t n = bytes - off > DSC_PEER_READ_MAX ? DSC_PEER_READ_MAX : (uint32_t)(bytes - off);
        dsc_peer_req_t req = {.dataset = {dataset, (uint16_t)strlen(dataset)},
                              .shard_id = shard_id,
                              .flags = DSC_PEER_FLAG_VERSION,
                              .version = version,
                              .offset = off,
                              .length = n};
        uint8_t body[DSC_PEER_REQ_MAX_BODY];
        int len = dsc_peer_req_encode(&req, body, sizeof body);
        if (len < 0)
            return len;
        pace(pw, n);
        dsc_frame_header_t h;
        int rc = roundtrip(pw, fd, tmo, DSC_OP_PEER_READ, body, (size_t)len, &h);
        if (rc < 0)
            return rc;
        if (h.status != DSC_STATUS_OK) {
            if ((rc = read_message(fd, tmo, h.body_len, msg, cap)) < 0)
                return rc;
            /* Frame intact: the connection stays usable for other shards. */
            return h.status == DSC_STATUS_UNAVAILABLE || h.status == DSC_STATUS_NOT_FOUND ||
                           h.status == DSC_STATUS_CHANGED || h.status == DSC_STATUS_UNSUPPORTED
                       ? DSC_EUNAVAIL
                       : dsc_status_to_err(h.status);
        }
        if (h.body_len != n)
            return DSC_EPROTO;
        if ((rc = recv_all(fd, dst + off, n, tmo)) < 0)
            return rc;
        off += n;
    }
    return 0;
}

/* Fetches the shard from the peer at addr: on a pooled connection first (it may be stale: the peer
 * restarted or closed it idle; then once more on a new one), else on a new one. A peer that
 * cannot be reached or fails mid-answer is skipped for DSC_PEERWARM_DEAD_MS. Returns as
 * fetch_from. */
static int try_peer(dsc_peerwarm_t *pw, const char *addr, const char *dataset, uint64_t version,
                    uint32_t shard_id, uint64_t bytes, uint8_t *dst, uint32_t tmo) {
    int rc = DSC_EUNAVAIL;
    for (int attempt = 0; attempt < 2; attempt++) {
        int fd = attempt == 0 ? pool_take(pw, addr) : -1;
        int pooled = fd >= 0;
        if (fd < 0) {
            const char *why = "connect";
            rc = connect_to(addr, tmo, &fd);
            if (rc == 0 && (rc = handshake(pw, fd, tmo, &why)) < 0) {
                close(fd);
                fd = -1;
            }
            if (rc < 0) {
                /* A refused connection costs nothing to try again (the peer may be back a
                 * moment later, restarted); one that timed out or failed the handshake does. */
                if (rc != DSC_ECONNREFUSED)
                    mark_dead(pw, addr, dsc_now_s());
                if (rc == DSC_EUNAUTH) {
                    pthread_mutex_lock(&pw->lock);
                    int first = !pw->logged_auth;
                    pw->logged_auth = 1;
                    pthread_mutex_unlock(&pw->lock);
                    if (first)
                        LOG_WARN("peer warm-up: %s: %s (credential '%s'); shards it holds are "
                                 "read from the backing storage (logged once)",
                                 addr, why, pw->credential);
                } else if (may_log(pw)) {
                    LOG_INFO("peer warm-up: %s: %s: %s (skipped for %d ms)", addr, why,
                             dsc_strerror(rc), DSC_PEERWARM_DEAD_MS);
                }
                return rc;
            }
        }
        char msg[256] = "";
        rc = fetch_from(pw, fd, tmo, dataset, version, shard_id, bytes, dst, msg, sizeof msg);
        if (rc == 0 || rc == DSC_EUNAVAIL) {
            pool_put(pw, addr, fd);
            return rc;
        }
        close(fd);
        if (pooled)
            continue; /* a stale pooled connection says nothing of the peer: try a new one */
        mark_dead(pw, addr, dsc_now_s()); /* e.g. stopped: answers nothing in time */
        if (may_log(pw))
            LOG_INFO("peer warm-up: %s: dataset %s shard %u: %s %s (skipped for %d ms)", addr,
                     dataset, shard_id, dsc_strerror(rc), msg, DSC_PEERWARM_DEAD_MS);
        return rc;
    }
    return rc;
}

static int peer_fetch(void *arg, const char *dataset, uint64_t version, uint32_t shard_id,
                      uint64_t bytes, uint8_t *dst, int urgent) {
    dsc_peerwarm_t *pw = arg;
    /* A request waits for this load: a peer that does not answer at once costs it little. */
    uint32_t tmo =
        urgent && pw->timeout_ms > DSC_PEERWARM_URGENT_MS ? DSC_PEERWARM_URGENT_MS : pw->timeout_ms;
    dsc_cluster_view_t *view = dsc_cluster_acquire(pw->cluster);
    uint32_t owners[DSC_MAX_REPLICAS];
    int n = 0;
    if (view->clustered && view->members.count > 1)
        n = dsc_placement_owners(&view->members, dataset, shard_id, view->replicas, owners);
    int rc = DSC_EUNAVAIL;
    for (int i = 0; i < n; i++) {
        if ((int)owners[i] == view->self_index)
            continue;
        const char *addr = view->members.addrs[owners[i]];
        if (is_dead(pw, addr, dsc_now_s()))
            continue;
        rc = try_peer(pw, addr, dataset, version, shard_id, bytes, dst, tmo);
        if (rc == 0)
            break;
    }
    dsc_cluster_view_release(view);
    return rc < 0 ? rc : 0;
}

/* ---- life cycle -------------------------------------------------------------------------- */

int dsc_peerwarm_create(const dsc_peerwarm_options_t *o, dsc_peerwarm_t **out) {
    if (o->cluster == NULL)
        return DSC_EINVAL;
    const char *cred = o->credential != NULL ? o->credential : "";
    if (cred[0] != '\0') {
        if (o->credentials == NULL) {
            LOG_ERROR("--peer-credential %s needs --auth-file (the credential is one of its "
                      "lines)",
                      cred);
            return DSC_EINVAL;
        }
        dsc_credset_t *set = dsc_credstore_acquire(o->credentials);
        int found = dsc_credset_find(set, cred, strlen(cred)) != NULL;
        dsc_credset_release(set);
        if (!found || strlen(cred) > DSC_AUTH_NAME_MAX) {
            LOG_ERROR("--peer-credential %s: no such credential in --auth-file", cred);
            return DSC_EINVAL;
        }
    }
    dsc_peerwarm_t *pw = calloc(1, sizeof *pw);
    if (pw == NULL)
        return DSC_ENOMEM;
    pw->source = (dsc_peer_source_t){.fetch = peer_fetch, .arg = pw};
    pw->cluster = o->cluster;
    pw->credentials = o->credentials;
    snprintf(pw->credential, sizeof pw->credential, "%s", cred);
    pw->rate = o->rate ? o->rate : DSC_PEERWARM_DEFAULT_RATE;
    pw->timeout_ms = o->timeout_ms ? o->timeout_ms : DSC_PEERWARM_TIMEOUT_MS;
    pthread_mutex_init(&pw->lock, NULL);
    *out = pw;
    return 0;
}

const dsc_peer_source_t *dsc_peerwarm_source(dsc_peerwarm_t *pw) {
    return &pw->source;
}

void dsc_peerwarm_destroy(dsc_peerwarm_t *pw) {
    if (pw == NULL)
        return;
    for (uint32_t i = 0; i < pw->pool_len; i++)
        close(pw->pool[i].fd);
    pthread_mutex_destroy(&pw->lock);
    free(pw);
}
