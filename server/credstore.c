/* Server credentials (server/credstore.h): the credential file read into an immutable set, swapped
 * under a mutex and held by reference count; secrets wiped when a set is freed; the per-peer
 * rate limit of failure log lines. */
#include "credstore.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_FILE_BYTES (1u << 20)
#define MAX_CREDENTIALS 4096

struct dsc_cred {
    char name[DSC_AUTH_NAME_MAX + 1];
    dsc_role_t role;
    char secret[DSC_AUTH_SECRET_MAX + 1];
    size_t secret_len;
    uint32_t dataset_count; /* 0: every dataset */
    char (*datasets)[DSC_MAX_NAME];
};

struct dsc_credset {
    atomic_uint refs;
    uint64_t generation;
    uint32_t count;
    dsc_cred_t *creds;
};

struct dsc_credstore {
    char *path;
    int refuse_insecure;
    pthread_mutex_t lock;
    dsc_credset_t *current; /* under lock */
    atomic_uint_fast64_t generation;
};

static void set_free(dsc_credset_t *set) {
    if (set == NULL)
        return;
    for (uint32_t i = 0; i < set->count; i++) {
        dsc_auth_wipe(set->creds[i].secret, sizeof set->creds[i].secret);
        free(set->creds[i].datasets);
    }
    free(set->creds);
    free(set);
}

static int fail(char *err, size_t err_len, int rc, const char *fmt, const char *path, size_t line,
                const char *why) {
    if (err != NULL && err_len > 0)
        snprintf(err, err_len, fmt, path, line, why);
    return rc;
}

/* The file's protection (fstat of the descriptor read): "" when fine, else one line in why. */
static void protection(int fd, const char *path, char *why, size_t why_len) {
    why[0] = '\0';
    struct stat st;
    if (fstat(fd, &st) != 0)
        return;
    unsigned mode = (unsigned)st.st_mode & 0777u;
    const char *access =
        (mode & 022u) ? ((mode & 044u) ? "readable and writable" : "writable") : "readable";
    const char *who = (mode & 070u) && (mode & 007u) ? "group and others"
                      : (mode & 070u)                ? "group"
                                                     : "others";
    if (st.st_uid != geteuid() && st.st_uid != 0)
        snprintf(why, why_len,
                 "%s is owned by uid %u, not by this server's user (uid %u) or root: chown it "
                 "to the server's user and chmod 600",
                 path, (unsigned)st.st_uid, (unsigned)geteuid());
    else if (mode & 077u)
        snprintf(why, why_len, "%s is %s by %s (mode %04o): it holds secrets; chmod 600 %s", path,
                 access, who, mode, path);
}

/* Reads the whole file (bounded), its protection into why (may be NULL). Returns its length, or
 * -errno / DSC_ETOOLARGE / DSC_ENOMEM. */
static long read_file(const char *path, char **out, char *why, size_t why_len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (why != NULL)
        protection(fd, path, why, why_len);
    char *buf = malloc(MAX_FILE_BYTES + 1);
    if (buf == NULL) {
        close(fd);
        return DSC_ENOMEM;
    }
    size_t len = 0;
    for (;;) {
        ssize_t n = read(fd, buf + len, MAX_FILE_BYTES + 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int rc = -errno;
            close(fd);
            free(buf);
            return rc;
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (len > MAX_FILE_BYTES) {
            close(fd);
            dsc_auth_wipe(buf, len);
            free(buf);
            return DSC_ETOOLARGE;
        }
    }
    close(fd);
    *out = buf;
    return (long)len;
}

/* Parses text into a new set. Returns the set or NULL with err filled. */
static dsc_credset_t *parse_set(const char *path, const char *text, size_t len, char *err,
                                size_t err_len, int *rc_out) {
    dsc_credset_t *set = calloc(1, sizeof *set);
    if (set == NULL) {
        *rc_out = fail(err, err_len, DSC_ENOMEM, "%s:%zu: %s", path, 0, "out of memory");
        return NULL;
    }
    uint32_t cap = 0;
    size_t start = 0, lineno = 0;
    while (start < len) {
        const char *nl = memchr(text + start, '\n', len - start);
        size_t end = nl ? (size_t)(nl - text) : len;
        lineno++;
        dsc_auth_line_t line;
        const char *why = "invalid line";
        int rc = dsc_auth_line_parse(text + start, end - start, &line, &why);
        start = end + 1;
        if (rc == 0)
            continue;
        if (rc < 0) {
            *rc_out = fail(err, err_len, DSC_EINVAL, "%s:%zu: %s", path, lineno, why);
            goto bad;
        }
        if (dsc_credset_find(set, line.name.ptr, line.name.len) != NULL) {
            *rc_out = fail(err, err_len, DSC_EINVAL, "%s:%zu: %s", path, lineno,
                           "duplicate credential name");
            goto bad;
        }
        if (set->count == MAX_CREDENTIALS) {
            *rc_out = fail(err, err_len, DSC_EINVAL, "%s:%zu: %s", path, lineno,
                           "more than 4096 credentials");
            goto bad;
        }
        if (set->count == cap) {
            uint32_t ncap = cap ? cap * 2 : 8;
            dsc_cred_t *grown = calloc(ncap, sizeof *grown);
            if (grown == NULL) {
                *rc_out =
                    fail(err, err_len, DSC_ENOMEM, "%s:%zu: %s", path, lineno, "out of memory");
                goto bad;
            }
            if (set->count)
                memcpy(grown, set->creds, set->count * sizeof *grown);
            if (set->creds)
                dsc_auth_wipe(set->creds, set->count * sizeof *grown);
            free(set->creds);
            set->creds = grown;
            cap = ncap;
        }
        dsc_cred_t *c = &set->creds[set->count];
        memcpy(c->name, line.name.ptr, line.name.len);
        c->name[line.name.len] = '\0';
        c->role = line.role;
        memcpy(c->secret, line.secret.ptr, line.secret.len);
        c->secret[line.secret.len] = '\0';
        c->secret_len = line.secret.len;
        if (line.dataset_count > 0) {
            c->datasets = calloc(line.dataset_count, sizeof *c->datasets);
            if (c->datasets == NULL) {
                *rc_out =
                    fail(err, err_len, DSC_ENOMEM, "%s:%zu: %s", path, lineno, "out of memory");
                set->count++; /* so that set_free wipes it */
                goto bad;
            }
            size_t pos = 0;
            dsc_str_t ds;
            uint32_t i = 0;
            while (i < line.dataset_count && dsc_auth_line_next_dataset(&line, &pos, &ds)) {
                memcpy(c->datasets[i], ds.ptr, ds.len);
                c->datasets[i][ds.len] = '\0';
                i++;
            }
            c->dataset_count = i;
        }
        set->count++;
    }
    if (set->count == 0) {
        *rc_out = fail(err, err_len, DSC_EINVAL, "%s:%zu: %s", path, lineno,
                       "no credentials (every client would be refused)");
        goto bad;
    }
    atomic_init(&set->refs, 1);
    return set;
bad:
    set_free(set);
    return NULL;
}

static dsc_credset_t *load(const char *path, int refuse, char *err, size_t err_len, char *warn,
                           size_t warn_len, int *rc_out) {
    char *text = NULL;
    char why[600] = "";
    long len = read_file(path, &text, why, sizeof why);
    if (len < 0) {
        *rc_out = fail(err, err_len, (int)len, "%s:%zu: %s", path, 0,
                       len == DSC_ETOOLARGE ? "file over 1 MiB" : dsc_strerror((int)len));
        return NULL;
    }
    if (warn != NULL && warn_len > 0)
        snprintf(warn, warn_len, "%s", why);
    if (refuse && why[0] != '\0') {
        dsc_auth_wipe(text, (size_t)len);
        free(text);
        if (err != NULL && err_len > 0)
            snprintf(err, err_len, "refused (--insecure-auth-file refuse): %s", why);
        *rc_out = DSC_EUNAUTH;
        return NULL;
    }
    dsc_credset_t *set = parse_set(path, text, (size_t)len, err, err_len, rc_out);
    dsc_auth_wipe(text, (size_t)len);
    free(text);
    return set;
}

int dsc_credstore_create(const char *path, dsc_credstore_t **out, char *err, size_t err_len) {
    return dsc_credstore_open(path, 0, out, err, err_len, NULL, 0);
}

int dsc_credstore_open(const char *path, int refuse_insecure, dsc_credstore_t **out, char *err,
                       size_t err_len, char *warn, size_t warn_len) {
    if (path == NULL || out == NULL)
        return DSC_EINVAL;
    *out = NULL;
    int rc = 0;
    dsc_credset_t *set = load(path, refuse_insecure, err, err_len, warn, warn_len, &rc);
    if (set == NULL)
        return rc;
    dsc_credstore_t *cs = calloc(1, sizeof *cs);
    char *copy = strdup(path);
    if (cs == NULL || copy == NULL) {
        free(cs);
        free(copy);
        set_free(set);
        return fail(err, err_len, DSC_ENOMEM, "%s:%zu: %s", path, 0, "out of memory");
    }
    cs->path = copy;
    cs->refuse_insecure = refuse_insecure;
    pthread_mutex_init(&cs->lock, NULL);
    set->generation = 1;
    atomic_init(&cs->generation, 1);
    cs->current = set;
    *out = cs;
    return 0;
}

int dsc_credstore_reload(dsc_credstore_t *cs, char *err, size_t err_len) {
    return dsc_credstore_reload_checked(cs, err, err_len, NULL, 0);
}

int dsc_credstore_reload_checked(dsc_credstore_t *cs, char *err, size_t err_len, char *warn,
                                 size_t warn_len) {
    if (cs == NULL)
        return DSC_EINVAL;
    int rc = 0;
    dsc_credset_t *set = load(cs->path, cs->refuse_insecure, err, err_len, warn, warn_len, &rc);
    if (set == NULL)
        return rc;
    pthread_mutex_lock(&cs->lock);
    dsc_credset_t *old = cs->current;
    set->generation = atomic_load(&cs->generation) + 1;
    cs->current = set;
    atomic_store(&cs->generation, set->generation);
    pthread_mutex_unlock(&cs->lock);
    dsc_credset_release(old);
    return (int)set->count;
}

void dsc_credstore_destroy(dsc_credstore_t *cs) {
    if (cs == NULL)
        return;
    dsc_credset_release(cs->current);
    pthread_mutex_destroy(&cs->lock);
    free(cs->path);
    free(cs);
}

uint64_t dsc_credstore_generation(const dsc_credstore_t *cs) {
    return atomic_load_explicit(&((dsc_credstore_t *)cs)->generation, memory_order_acquire);
}

dsc_credset_t *dsc_credstore_acquire(dsc_credstore_t *cs) {
    pthread_mutex_lock(&cs->lock);
    dsc_credset_t *set = cs->current;
    atomic_fetch_add(&set->refs, 1);
    pthread_mutex_unlock(&cs->lock);
    return set;
}

void dsc_credset_release(dsc_credset_t *set) {
    if (set != NULL && atomic_fetch_sub(&set->refs, 1) == 1)
        set_free(set);
}

uint64_t dsc_credset_generation(const dsc_credset_t *set) {
    return set->generation;
}

uint32_t dsc_credset_count(const dsc_credset_t *set) {
    return set ? set->count : 0;
}

const dsc_cred_t *dsc_credset_find(const dsc_credset_t *set, const char *name, size_t len) {
    if (set == NULL || name == NULL)
        return NULL;
    for (uint32_t i = 0; i < set->count; i++)
        if (strlen(set->creds[i].name) == len && memcmp(set->creds[i].name, name, len) == 0)
            return &set->creds[i];
    return NULL;
}

const char *dsc_cred_name(const dsc_cred_t *cred) {
    return cred->name;
}

dsc_role_t dsc_cred_role(const dsc_cred_t *cred) {
    return cred->role;
}

const char *dsc_cred_secret(const dsc_cred_t *cred, size_t *len) {
    *len = cred->secret_len;
    return cred->secret;
}

int dsc_cred_same(const dsc_cred_t *a, const dsc_cred_t *b) {
    if (strcmp(a->name, b->name) != 0 || a->secret_len != b->secret_len)
        return 0;
    unsigned char diff = 0;
    for (size_t i = 0; i < a->secret_len; i++)
        diff |= (unsigned char)(a->secret[i] ^ b->secret[i]);
    return diff == 0;
}

uint32_t dsc_cred_dataset_count(const dsc_cred_t *cred) {
    return cred->dataset_count;
}

int dsc_cred_may_read(const dsc_cred_t *cred, const char *dataset, size_t len) {
    if (cred->dataset_count == 0)
        return 1;
    for (uint32_t i = 0; i < cred->dataset_count; i++)
        if (strlen(cred->datasets[i]) == len && memcmp(cred->datasets[i], dataset, len) == 0)
            return 1;
    return 0;
}

/* ---- Failure log rate limit ---------------------------------------------------------------- */

#define PEER_SLOTS 64

typedef struct peer_slot {
    char peer[64];
    time_t last_logged;
    uint64_t suppressed;
} peer_slot_t;

struct dsc_authfail {
    pthread_mutex_t lock;
    atomic_uint_fast64_t total;
    peer_slot_t slots[PEER_SLOTS];
    time_t burst_second;
    uint32_t burst_lines;
};

dsc_authfail_t *dsc_authfail_create(void) {
    dsc_authfail_t *af = calloc(1, sizeof *af);
    if (af == NULL)
        return NULL;
    pthread_mutex_init(&af->lock, NULL);
    atomic_init(&af->total, 0);
    return af;
}

void dsc_authfail_destroy(dsc_authfail_t *af) {
    if (af == NULL)
        return;
    pthread_mutex_destroy(&af->lock);
    free(af);
}

int dsc_authfail_record(dsc_authfail_t *af, const char *peer, const char *reason, char *line,
                        size_t line_len) {
    if (af == NULL)
        return 0;
    atomic_fetch_add(&af->total, 1);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    time_t now = ts.tv_sec;
    int log = 0;
    uint64_t suppressed = 0;
    pthread_mutex_lock(&af->lock);
    peer_slot_t *slot = NULL, *victim = NULL;
    for (int i = 0; i < PEER_SLOTS && slot == NULL; i++) {
        peer_slot_t *s = &af->slots[i];
        if (s->peer[0] != '\0' && strcmp(s->peer, peer) == 0)
            slot = s;
        else if (victim == NULL || (victim->peer[0] != '\0' &&
                                    (s->peer[0] == '\0' || s->last_logged < victim->last_logged)))
            victim = s; /* an empty slot, else the least recently logged one */
    }
    int fresh = slot == NULL;
    if (fresh) {
        /* A peer not seen lately takes the least recently logged slot. */
        slot = victim;
        snprintf(slot->peer, sizeof slot->peer, "%s", peer);
        slot->suppressed = 0;
    }
    if (fresh || now - slot->last_logged >= DSC_AUTH_LOG_INTERVAL) {
        if (af->burst_second != now) {
            af->burst_second = now;
            af->burst_lines = 0;
        }
        if (af->burst_lines < DSC_AUTH_LOG_BURST) {
            af->burst_lines++;
            log = 1;
            suppressed = slot->suppressed;
            slot->suppressed = 0;
            slot->last_logged = now;
        }
    }
    if (!log)
        slot->suppressed++;
    pthread_mutex_unlock(&af->lock);
    if (log && line != NULL && line_len > 0) {
        if (suppressed)
            snprintf(line, line_len,
                     "authentication failed from %s: %s (%llu more from it not logged)", peer,
                     reason, (unsigned long long)suppressed);
        else
            snprintf(line, line_len, "authentication failed from %s: %s", peer, reason);
    }
    return log;
}

uint64_t dsc_authfail_total(const dsc_authfail_t *af) {
    return af ? atomic_load(&((dsc_authfail_t *)af)->total) : 0;
}
