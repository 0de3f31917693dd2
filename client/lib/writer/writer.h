/* Dataset writer internals shared with the CLI: the name rule (field specs: proto/fieldspec.h).
 * The writer itself is public (dsc_writer_*, dscache.h). */
#ifndef DSC_CLIENT_WRITER_H
#define DSC_CLIENT_WRITER_H

#include "dscache.h"
#include "shard.h"

#include <stddef.h>

/* 1 when name is a valid dataset or field name (1..63 of [A-Za-z0-9_.-]), else 0. */
int dsc__name_valid(const char *name);

#endif
