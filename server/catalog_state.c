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

int dsc__shard_open(const char *path, const char **why) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
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

/* The identity of dir/manifest.json: 0 and the fields, or -1 (cannot stat). */
static int manifest_identity(const char *dir, uint64_t id[4]) {
    char path[4096];
    struct stat st;
    if (snprintf(path, sizeof path, "%s/%s", dir, DSC_MANIFEST_FILE) >= (int)sizeof path ||
        stat(path, &st) != 0)
        return -1;
    id[0] = (uint64_t)st.st_dev;
    id[1] = (uint64_t)st.st_ino;
    id[2] = (uint64_t)st.st_size;
    id[3] = (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
    return 0;
}

void dsc__dataset_note_manifest(dsc_dataset_t *ds) {
    uint64_t id[4] = {0, 0, 0, 0};
    (void)manifest_identity(ds->dir, id);
    ds->mf_dev = id[0];
    ds->mf_ino = id[1];
    ds->mf_size = id[2];
    ds->mf_mtime_ns = id[3];
}

int dsc__dataset_changed_on_disk(dsc_catalog_t *cat, dsc_dataset_t *ds, int full) {
    uint64_t id[4];
    if (manifest_identity(ds->dir, id) < 0)
        return 1;
    pthread_mutex_lock(&cat->lock);
    int same_id = id[0] == ds->mf_dev && id[1] == ds->mf_ino && id[2] == ds->mf_size &&
                  id[3] == ds->mf_mtime_ns;
    pthread_mutex_unlock(&cat->lock);
    if (same_id && !full)
        return 0;
    dsc_manifest_t *m = NULL;
    if (dsc_manifest_load(ds->dir, &m) < 0)
        return 1;
    char *json = dsc_manifest_to_json(m);
    dsc_manifest_free(m);
    if (json == NULL)
        return 0; /* out of memory: not known to have changed */
    int changed = strcmp(json, ds->json) != 0;
    free(json);
    if (!changed) {
        pthread_mutex_lock(&cat->lock);
        ds->mf_dev = id[0];
        ds->mf_ino = id[1];
        ds->mf_size = id[2];
        ds->mf_mtime_ns = id[3];
        pthread_mutex_unlock(&cat->lock);
    }
    return changed;
}
