/* Dataset writer internals shared with the CLI: field spec parsing and formatting, name rule.
 * The writer itself is public (dsc_writer_*, dscache.h). */
#ifndef DSC_CLIENT_WRITER_H
#define DSC_CLIENT_WRITER_H

#include "dscache.h"
#include "shard.h"

#include <stddef.h>

/* Parses "name:dtype[dims],..." ("label:i64", "image:u8[3,32,32]", "ids:i32[]", "mel:f32[?,80]")
 * into a finished schema. Returns 0, or DSC_EINVAL with a message naming the field in err. */
int dsc__writer_parse_fields(const char *spec, dsc_schema_t *schema, char *err, size_t err_cap);
/* Writes one field back as a spec ("mel:f32[?,80]"). Returns its length or DSC_ENOSPC. */
int dsc__writer_format_field(const dsc_field_t *field, char *buf, size_t cap);
/* 1 when name is a valid dataset or field name (1..63 of [A-Za-z0-9_.-]), else 0. */
int dsc__name_valid(const char *name);

#endif
