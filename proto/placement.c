/* Member lists and rendezvous hashing (see placement.h and proto/PROTOCOL.md, Placement). */
#include "placement.h"
#include "dscache_base.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

static int cmp_member(const void *a, const void *b) {
    return strcmp((const char *)a, (const char *)b);
}

int dsc_members_find(const dsc_members_t *members, const char *hostport) {
    if (members->count == 0)
        return -1;
    const char(*hit)[DSC_MEMBER_MAX] =
        bsearch(hostport, members->addrs, members->count, DSC_MEMBER_MAX, cmp_member);
    return hit ? (int)(hit - members->addrs) : -1;
}

int dsc_members_add(dsc_members_t *members, const char *hostport) {
    char host[DSC_MEMBER_MAX];
    uint16_t port;
    size_t len = strlen(hostport);
    if (len == 0 || len >= DSC_MEMBER_MAX ||
        dsc_split_hostport(hostport, host, sizeof host, &port) != 0 || port == 0)
        return DSC_EINVAL;
    if (dsc_members_find(members, hostport) >= 0)
        return 0;
    if (members->count >= DSC_MAX_MEMBERS)
        return DSC_ERANGE;
    char(*grown)[DSC_MEMBER_MAX] =
        realloc(members->addrs, (size_t)(members->count + 1) * DSC_MEMBER_MAX);
    if (grown == NULL)
        return DSC_ENOMEM;
    members->addrs = grown;
    /* Insertion keeps the list sorted: O(n) per add, lists are small. */
    uint32_t pos = 0;
    while (pos < members->count && strcmp(members->addrs[pos], hostport) < 0)
        pos++;
    memmove(members->addrs[pos + 1], members->addrs[pos],
            (size_t)(members->count - pos) * DSC_MEMBER_MAX);
    memset(members->addrs[pos], 0, DSC_MEMBER_MAX);
    memcpy(members->addrs[pos], hostport, len);
    members->count++;
    return 1;
}

int dsc_members_parse(const char *text, dsc_members_t *out) {
    out->count = 0;
    out->addrs = NULL;
    if (text == NULL)
        return DSC_EINVAL;
    const char *p = text;
    while (*p) {
        if (*p == '#') {
            while (*p && *p != '\n')
                p++;
            continue;
        }
        if (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') {
            p++;
            continue;
        }
        const char *start = p;
        while (*p && *p != ',' && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r' && *p != '#')
            p++;
        size_t len = (size_t)(p - start);
        char entry[DSC_MEMBER_MAX];
        int rc = DSC_EINVAL;
        if (len < sizeof entry) {
            memcpy(entry, start, len);
            entry[len] = '\0';
            rc = dsc_members_add(out, entry);
        }
        if (rc < 0) {
            dsc_members_free(out);
            return rc;
        }
    }
    if (out->count == 0)
        return DSC_EINVAL;
    return 0;
}

uint64_t dsc_members_hash(const dsc_members_t *members) {
    if (members == NULL || members->count == 0)
        return 0;
    XXH3_state_t state;
    XXH3_64bits_reset(&state);
    for (uint32_t i = 0; i < members->count; i++) {
        XXH3_64bits_update(&state, members->addrs[i], strlen(members->addrs[i]));
        XXH3_64bits_update(&state, ",", 1);
    }
    uint64_t h = XXH3_64bits_digest(&state);
    return h ? h : 1; /* 0 means "no view" on the wire */
}

int dsc_members_equal(const dsc_members_t *a, const dsc_members_t *b) {
    if (a->count != b->count)
        return 0;
    for (uint32_t i = 0; i < a->count; i++)
        if (strcmp(a->addrs[i], b->addrs[i]) != 0)
            return 0;
    return 1;
}

void dsc_members_free(dsc_members_t *members) {
    if (members == NULL)
        return;
    free(members->addrs);
    members->addrs = NULL;
    members->count = 0;
}

/* Weight of one member for one key. The key is hashed once per call site; the member string
 * is mixed in with it as the seed so each (member, key) pair gets an independent weight. */
static uint64_t weight(const char *member, uint64_t key_hash) {
    return XXH3_64bits_withSeed(member, strlen(member), key_hash);
}

static uint64_t key_hash(const char *dataset, uint32_t shard_id) {
    uint8_t buf[DSC_MAX_NAME + 4];
    size_t len = strnlen(dataset, DSC_MAX_NAME - 1);
    memcpy(buf, dataset, len);
    buf[len] = (uint8_t)shard_id;
    buf[len + 1] = (uint8_t)(shard_id >> 8);
    buf[len + 2] = (uint8_t)(shard_id >> 16);
    buf[len + 3] = (uint8_t)(shard_id >> 24);
    return XXH3_64bits(buf, len + 4);
}

int dsc_placement_owners(const dsc_members_t *members, const char *dataset, uint32_t shard_id,
                         uint32_t replicas, uint32_t *out) {
    if (members == NULL || members->count == 0 || replicas == 0 || replicas > DSC_MAX_REPLICAS)
        return DSC_EINVAL;
    uint32_t want = replicas < members->count ? replicas : members->count;
    uint64_t best_w[DSC_MAX_REPLICAS];
    uint32_t found = 0;
    uint64_t key = key_hash(dataset, shard_id);
    /* Keep the top `want` weights in descending order (insertion into a tiny array). Ties
     * (practically impossible) break by list order, which is canonical. */
    for (uint32_t i = 0; i < members->count; i++) {
        uint64_t w = weight(members->addrs[i], key);
        uint32_t pos = found;
        while (pos > 0 && best_w[pos - 1] < w)
            pos--;
        if (pos >= want)
            continue;
        uint32_t last = found < want ? found : want - 1;
        for (uint32_t j = last; j > pos; j--) {
            best_w[j] = best_w[j - 1];
            out[j] = out[j - 1];
        }
        best_w[pos] = w;
        out[pos] = i;
        if (found < want)
            found++;
    }
    return (int)found;
}

int dsc_placement_owns(const dsc_members_t *members, uint32_t index, const char *dataset,
                       uint32_t shard_id, uint32_t replicas) {
    uint32_t owners[DSC_MAX_REPLICAS];
    int n = dsc_placement_owners(members, dataset, shard_id, replicas, owners);
    for (int i = 0; i < n; i++)
        if (owners[i] == index)
            return 1;
    return 0;
}
