/* Read-ahead hints and the hint horizon (hints.c): what each I/O thread tells its server of the
 * chunks it will ask for. Below fetch.c and scheduler.c. */
#ifndef DSC_HINTS_H
#define DSC_HINTS_H

#include "pipeline.h"

#include <stddef.h>
#include <stdint.h>

/* Creates the horizon's order, bit sets, ring and pending list (after the scheduler's chunk
 * table: sched.fetched_words is set). Returns 0 or DSC_E*; dsc__hints_free undoes a partial
 * init. */
int dsc__hints_init(dsc_loader_t *loader);
/* Frees what dsc__hints_init made (no thread runs any more). Takes a zeroed loader->hints. */
void dsc__hints_free(dsc_loader_t *loader);
/* The plan restarted (dsc__sched_restart): the horizon starts again from the plan's new position
 * (a walk in progress drops what it looked up). Under lock. */
void dsc__hints_restart(dsc_loader_t *loader);
/* Whether the horizon named global chunk `chunk` for epoch `epoch` already (the planner then
 * marks its entry hinted: the queue's hints skip it, and it is asked for alone). Under lock. */
int dsc__hints_named(const dsc_loader_t *loader, uint64_t epoch, uint64_t chunk);
/* Once per tick of an I/O thread with a connection open, now in monotonic seconds: when a HINT is
 * due for its peer, walks the hint horizon (at most every 0.1 s for all peers; without the lock
 * while it looks up samples, so loader state may change across the call) and builds the HINT
 * body into out[cap]: the chunks queued for the peer and not named yet, up to 4 s ahead, then
 * those the horizon named for it, each with its due time (DSCACHE_HINT_SECONDS: the horizon's
 * reach, 0 .. 600, default 4; DSCACHE_HINTS=0: no hints). A connection that never hinted gets a
 * body naming only this loader. Under lock. Returns the body's length (> 0: send it with the
 * source's hint op; the connection counts as named), or 0 when nothing is due. */
int dsc__hints_tick(dsc_io_t *io, double now, uint8_t *out, size_t cap);
/* After an answer on io's connection: a HINT answered UNSUPPORTED turns hints to that peer off
 * (said once, at INFO). Under lock. */
void dsc__hints_answered(dsc_io_t *io);

#endif
