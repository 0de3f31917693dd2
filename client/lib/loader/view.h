/* Loader cluster view: the member list placement is computed over, kept current while the loader
 * runs (view thread). Adopting a view adds peers (their I/O threads, fetch.c) and re-routes queued
 * chunks (route.c). Above fetch.c and route.c, below loader.c. */
#ifndef DSC_VIEW_H
#define DSC_VIEW_H

#include "pipeline.h"

/* The view thread (arg: the loader). */
void *dsc__view_main(void *arg);
/* Installs `members` (taken over; *members is left empty) as the current view: peers for new
 * addresses (their I/O threads started when the loader runs), removed ones stop getting work,
 * queued chunks are re-routed in their planned order. Under lock. Returns 0, or DSC_ERANGE
 * (more than DSC_LOADER_MAX_PEERS addresses over the loader's life; the view is kept) or
 * DSC_ENOMEM. */
int dsc__view_adopt(dsc_loader_t *loader, dsc_members_t *members);
/* Parses a MEMBERS answer (proto/PROTOCOL.md) into *out (canonical list, free with
 * dsc_members_free) and *hash; *clustered from the answer, *self_member = the answering server's
 * "self" is in the list. Never reads past len. Returns 0, or DSC_EPROTO (not the documented
 * JSON, a bad member, or a hash that does not match the list), DSC_ENOMEM. */
int dsc__members_json_parse(const char *text, size_t len, dsc_members_t *out, uint64_t *hash,
                            int *clustered, int *self_member);
/* Asks the servers (MEMBERS) for their replication factor before the threads run: with
 * opt.replicas 0 it becomes theirs (2 when none says), and an explicit value they disagree with
 * is logged at WARN (and kept). Returns the servers' value, or 0 when none said. */
int dsc__view_learn_replicas(dsc_loader_t *loader);
/* The names of the datasets server addr has (LIST), ", "-separated in buf (cut at a whole name
 * when cap is too small). Returns how many, or a DSC_E* code. */
int dsc__view_list_datasets(const dsc_loader_t *loader, const char *addr, char *buf, size_t cap);

#endif
