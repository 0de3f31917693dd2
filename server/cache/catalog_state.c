/* The catalog's state operations that both of its layers need (catalog_state.h): a resident
 * slot's eviction, the index cache's unlinking, read-through buffers, opening a shard file, the
 * load histogram's bounds, the per-chunk damage map. Moved below catalog.c and readthrough.c so
 * that calls go one way: catalog.c -> readthrough.c -> here. */
#include "catalog_state.h"
#include "dscache_base.h"
#include "manifest.h"

#include <stdio.h>
#include <string.h>

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

const double dsc_load_bucket_bounds[DSC_LOAD_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025,
                                                         0.05,  0.1,    0.25,  1.0,  5.0};

int dsc__slot_evict_locked(dsc_catalog_t *cat, dsc_shard_slot_t *s) {
    if (s->state != SLOT_RESIDENT)
        return 0;
    int zero = 0;
    if (!atomic_compare_exchange_strong(&s->refs, &zero, -1))
        return 0;
    dsc_store_free(cat->store, s->data, s->meta->bytes);
    s->data = NULL;
    s->index = NULL;
    s->state = SLOT_ABSENT;
    s->ds->cached_shards--;
    s->ds->cached_bytes -= s->meta->bytes;
    atomic_fetch_add_explicit(&cat->evictions, 1, memory_order_relaxed);
    return 1;
}

void dsc__index_drop_locked(dsc_catalog_t *cat, shard_index_t *si) {
    if (si->slot == NULL)
        return;
    if (si->lru_prev)
        si->lru_prev->lru_next = si->lru_next;
    else
        cat->index_head = si->lru_next;
    if (si->lru_next)
        si->lru_next->lru_prev = si->lru_prev;
    else
        cat->index_tail = si->lru_prev;
    si->lru_prev = si->lru_next = NULL;
    si->slot->sindex = NULL;
    si->slot = NULL;
    cat->index_bytes -= si->bytes;
    cat->index_count--;
    if (--si->refs == 0)
        free(si);
}

void dsc__tempbuf_free(dsc_tempbuf_t *tb) {
    if (tb == NULL)
        return;
    if (tb->data)
        munmap(tb->data, tb->map_len);
    free(tb);
}

int dsc__shard_open(const char *path, int nofollow, const char **why) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | (nofollow ? O_NOFOLLOW : 0));
    if (fd < 0 && errno == ELOOP && nofollow) {
        *why = "a symbolic link (not followed under --data-root)";
        return DSC_EUNAVAIL;
    }
    if (fd < 0) {
        *why = "cannot open";
        return -errno;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = -errno;
        close(fd);
        *why = "cannot stat";
        return err;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        *why = "not a regular file";
        return DSC_EUNAVAIL;
    }
    return fd;
}

int dsc__slot_mark_damaged_locked(dsc_shard_slot_t *s, uint32_t c) {
    if (c >= s->meta->chunks)
        return 0;
    if (s->damage == NULL) {
        s->damage = calloc(((size_t)s->meta->chunks + 7) / 8, 1);
        if (s->damage == NULL)
            return DSC_ENOMEM;
    }
    if (s->damage[c / 8] & (1u << (c % 8)))
        return 0;
    s->damage[c / 8] |= (uint8_t)(1u << (c % 8));
    s->damaged++;
    return 1;
}

void dsc__slot_set_damage_locked(dsc_shard_slot_t *s, uint8_t *map, uint32_t damaged) {
    free(s->damage);
    s->damage = map;
    s->damaged = map ? damaged : 0;
}

int64_t dsc__damage_first(const uint8_t *map, uint32_t first, uint32_t count) {
    if (map == NULL)
        return -1;
    for (uint64_t c = first; c < (uint64_t)first + count; c++)
        if (map[c / 8] & (1u << (c % 8)))
            return (int64_t)c;
    return -1;
}

int dsc__manifest_identity(const char *dir, int nofollow, dsc_manifest_file_id_t *id,
                           int *regular) {
    char path[4096];
    struct stat st;
    memset(id, 0, sizeof *id);
    *regular = 0;
    if (snprintf(path, sizeof path, "%s/%s", dir, DSC_MANIFEST_FILE) >= (int)sizeof path)
        return DSC_EINVAL;
    if ((nofollow ? lstat(path, &st) : stat(path, &st)) != 0)
        return -errno;
    id->dev = (uint64_t)st.st_dev;
    id->ino = (uint64_t)st.st_ino;
    id->size = (uint64_t)st.st_size;
    id->mtime_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
    *regular = S_ISREG(st.st_mode);
    return 0;
}

int dsc__manifest_read(dsc_catalog_t *cat, const char *dir, int nofollow,
                       dsc_manifest_file_id_t *id, const char **why, dsc_manifest_t **out) {
    atomic_fetch_add_explicit(&cat->manifest_parses, 1, memory_order_relaxed);
    return dsc_manifest_load_file(dir, nofollow ? DSC_MANIFEST_NOFOLLOW : 0, id, why, out);
}

static int same_id(const dsc_manifest_file_id_t *id, const dsc_dataset_t *ds) {
    return id->dev == ds->mf_dev && id->ino == ds->mf_ino && id->size == ds->mf_size &&
           id->mtime_ns == ds->mf_mtime_ns;
}

int dsc__dataset_changed_on_disk(dsc_catalog_t *cat, dsc_dataset_t *ds, int full) {
    dsc_manifest_file_id_t id;
    int regular;
    if (dsc__manifest_identity(ds->dir, ds->confined, &id, &regular) < 0 || !regular)
        return 1;
    pthread_mutex_lock(&cat->lock);
    int same = same_id(&id, ds);
    pthread_mutex_unlock(&cat->lock);
    if (same && !full)
        return 0;
    dsc_manifest_t *m = NULL;
    if (dsc__manifest_read(cat, ds->dir, ds->confined, &id, NULL, &m) < 0)
        return 1;
    char *json = dsc_manifest_to_json(m);
    dsc_manifest_free(m);
    if (json == NULL)
        return 0; /* out of memory: not known to have changed */
    int changed = strcmp(json, ds->json) != 0;
    free(json);
    if (!changed) {
        pthread_mutex_lock(&cat->lock);
        ds->mf_dev = id.dev;
        ds->mf_ino = id.ino;
        ds->mf_size = id.size;
        ds->mf_mtime_ns = id.mtime_ns;
        pthread_mutex_unlock(&cat->lock);
    }
    return changed;
}
