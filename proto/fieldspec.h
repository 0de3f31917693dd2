/* Field specs: the one text form of a dataset field, "name:dtype[dims]", parsed for the CLI, the
 * C writer and Python alike. Pure over memory: no I/O, no allocation, safe on hostile input
 * (tests/fuzz/fuzz_fieldspec.c). */
#ifndef DSC_FIELDSPEC_H
#define DSC_FIELDSPEC_H

#include "shard.h"

#include <stddef.h>

/* The grammar (spaces and tabs allowed around every token):
 *
 *   field  := NAME ':' DTYPE [ '[' dims ']' | ':' xdims ]
 *   dims   := ''  |  dim { ',' dim }        '' is one variable dimension: "i32[]" = "i32[?]"
 *   dim    := '?' (the leading one only: a variable number of rows) | 1..2^32-1 in decimal
 *   xdims  := ''  |  N { 'x' N }            the CLI's older form: "image:u8:3x32x32"
 *   list   := field { ',' field } [ ',' ]   commas inside [] belong to the dims
 *
 * NAME is 1..63 of [A-Za-z0-9_.-]; DTYPE one of u8 i8 u16 i16 u32 i32 i64 f16 bf16 f32 f64 or
 * its numpy spelling (uint8 ... float64, bfloat16). No dims: a scalar. Examples: "label:i64",
 * "image:u8[3,32,32]", "ids:i32[]", "mel:f32[?,80]", "image:uint8:3x32x32". */

/* The field may be given without "NAME:" (its type only: "u8[3,32,32]"); the name is then "". A
 * text with no ':' before its dims is read that way, and so is DTYPE ':' xdims ("u8:3x32x32"). */
#define DSC_FIELDSPEC_TYPE_ONLY 1u

/* The field's sample (a variable field's row) must fit 2^32 - 1 bytes, as in a dataset. */
#define DSC_FIELDSPEC_SIZED 2u

/* Why a text was refused: what (a static phrase), the offending token at byte offset pos
 * (len bytes, 0 when the problem is a missing piece at pos), and the field's text (item, item_len)
 * it lies in. Offsets are into the whole text given. */
typedef struct dsc_fieldspec_error {
    const char *what;
    const char *hint; /* static, "" when none: e.g. the dtypes there are */
    size_t pos, len;
    size_t item, item_len;
} dsc_fieldspec_error_t;

/* Parses one field from text[0, len) (NUL bytes inside are refused) into *out: name, dtype, ndim
 * and shape (shape[0] == DSC_DIM_VARIABLE for a variable leading dimension); the derived sizes are
 * not set (dsc_schema_finish does). flags: DSC_FIELDSPEC_TYPE_ONLY, DSC_FIELDSPEC_SIZED or both.
 * Returns 0, or
 * DSC_EINVAL with *err filled (then *out holds no meaning). */
int dsc_fieldspec_parse(const char *text, size_t len, unsigned flags, dsc_field_t *out,
                        dsc_fieldspec_error_t *err);

/* Parses a comma-separated list of fields from text[0, len) into *schema and finishes it
 * (dsc_schema_finish: sizes derived, a sample or a row over 2^32 - 1 bytes refused). Returns 0,
 * or DSC_EINVAL with *err filled: an empty list, a bad field, a name given twice, more than
 * DSC_MAX_FIELDS fields, a size over 2^32 - 1. */
int dsc_fieldspec_parse_list(const char *text, size_t len, dsc_schema_t *schema,
                             dsc_fieldspec_error_t *err);

/* The message for err, naming the field's text and the offending token with its position
 * (1-based, in characters of the whole text): "field spec 'x:u8[3,?]', position 8: only the
 * leading dimension may be variable: '?'". Writes at most cap bytes (NUL-terminated) and returns
 * the length of the whole message. */
int dsc_fieldspec_message(const char *text, size_t len, const dsc_fieldspec_error_t *err, char *buf,
                          size_t cap);

/* Writes one field back in the grammar's own form ("mel:f32[?,80]", "label:i64"; the name left
 * out when it is ""), NUL-terminated. Returns its length, or DSC_ENOSPC when cap is too small
 * (DSC_FIELDSPEC_MAX always suffices), or DSC_EINVAL for an unknown dtype. */
#define DSC_FIELDSPEC_MAX (DSC_MAX_NAME + 1 + 8 + 2 + DSC_MAX_DIMS * 11)
int dsc_fieldspec_format(const dsc_field_t *field, char *buf, size_t cap);

#endif
