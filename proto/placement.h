/* Cluster placement: member lists and rendezvous (highest-random-weight) hashing of
 * (dataset, shard) over them, with R replicas. Pure functions: every server and client that
 * holds the same member list computes the same owners. */
#ifndef DSC_PLACEMENT_H
#define DSC_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>

#define DSC_MEMBER_MAX 128 /* bytes of one "HOST:PORT", NUL included */
#define DSC_MAX_MEMBERS 1024
#define DSC_MAX_REPLICAS 8

/* A canonical member list: sorted, without duplicates. */
typedef struct dsc_members {
    uint32_t count;
    char (*addrs)[DSC_MEMBER_MAX]; /* count entries, owned by the list */
} dsc_members_t;

/* Parses "HOST:PORT,HOST:PORT,..." (spaces and newlines also separate; '#' starts a comment
 * that runs to the end of the line, so a members file can be given as is). Returns 0 and fills
 * *out (free with dsc_members_free), DSC_EINVAL (an entry that is not HOST:PORT, or none),
 * DSC_ERANGE (more than DSC_MAX_MEMBERS), DSC_ENOMEM. */
int dsc_members_parse(const char *text, dsc_members_t *out);
/* Adds one member keeping the list canonical. Returns 1 when added, 0 when already present,
 * DSC_EINVAL, DSC_ERANGE, DSC_ENOMEM. */
int dsc_members_add(dsc_members_t *members, const char *hostport);
/* Index of hostport in the list, or -1. */
int dsc_members_find(const dsc_members_t *members, const char *hostport);
/* XXH3-64 of the canonical list (0 for an empty list): equal lists, equal hashes. */
uint64_t dsc_members_hash(const dsc_members_t *members);
/* 1 when both lists hold the same members. */
int dsc_members_equal(const dsc_members_t *a, const dsc_members_t *b);
/* Frees the entries; the struct is left empty. NULL is a no-op. */
void dsc_members_free(dsc_members_t *members);

/* The owners of (dataset, shard): indices into members, best first (primary, then replicas),
 * min(replicas, count) of them written to out[]. Weight of a member = XXH3-64 over
 * (member, dataset, shard id), so adding or removing one member of N moves about 1/N of the
 * primaries and leaves the others in place. Returns the number written, or DSC_EINVAL
 * (replicas 0 or > DSC_MAX_REPLICAS, no members). O(count * replicas). */
int dsc_placement_owners(const dsc_members_t *members, const char *dataset, uint32_t shard_id,
                         uint32_t replicas, uint32_t *out);
/* 1 when members[index] is among the owners of (dataset, shard), else 0. */
int dsc_placement_owns(const dsc_members_t *members, uint32_t index, const char *dataset,
                       uint32_t shard_id, uint32_t replicas);

/* dsc_members_resolve (spec with "file:" / "dns:" to a list) does I/O: sys/dsc_sys.h. */

#endif
