/* Packing of variable-length documents into fixed-length rows (docs/packing.md): the pure row
 * builder (no I/O, unit-tested alone) under the public dsc_packer_* of pack.c. */
#ifndef DSC_CLIENT_PACK_H
#define DSC_CLIENT_PACK_H

#include "dscache.h"

#include <stddef.h>
#include <stdint.h>

/* One packed batch being built: rows x length tokens of elem bytes, with its layout arrays. */
typedef struct dsc_pack_rows {
    uint32_t rows, length, elem;
    int cut;
    uint8_t *tokens;
    int32_t *position_ids, *document_ids, *cu_seqlens;
    int64_t *segment_index, *segment_start;
    int32_t *segment_source; /* [segments]: the document's source (sources set), -1 padding */
    int sources;             /* 1: segment_source is kept, from `source` */
    int32_t source;          /* the source of the document being placed (sources set) */
    uint32_t segments;
    uint32_t row, col; /* the next free token: row `row`, column `col` */
    uint64_t tokens_used;
    /* Counters, added to by place (the packer sums them into its stats per batch handed out). */
    uint64_t documents, split_documents, cut_documents, cut_tokens;
} dsc_pack_rows_t;

/* Allocates the buffers for rows x length tokens of elem bytes. Returns 0 or DSC_ENOMEM. */
int dsc__pack_rows_init(dsc_pack_rows_t *p, uint32_t rows, uint32_t length, uint32_t elem, int cut);
void dsc__pack_rows_free(dsc_pack_rows_t *p);
/* Empties the batch (keeps the buffers and settings; zeroes the counters). */
void dsc__pack_rows_reset(dsc_pack_rows_t *p);
/* 1 when every row is full (no room left). */
int dsc__pack_rows_full(const dsc_pack_rows_t *p);
/* Lays document `index` (n tokens at data, elem bytes each) into the batch from its token
 * `*offset` on, as far as the batch has room; advances *offset. Returns 1 when the document is
 * done (all its tokens placed, or cut), 0 when the batch filled first (call again with the next
 * batch and the same *offset). Split mode: a document continues in the next row. Cut mode: a
 * document that does not fit the room left of a non-empty row starts the next row; one longer
 * than length keeps its first length tokens (the rest counted in cut_tokens). A 0-token document
 * is done at once (counted). */
int dsc__pack_rows_place(dsc_pack_rows_t *p, int64_t index, const uint8_t *data, uint64_t n,
                         uint64_t *offset);
/* Closes the batch: pads the rest of the row being filled (rows after it are not handed out)
 * and finishes cu_seqlens. Returns the rows handed out (0: nothing placed). */
uint32_t dsc__pack_rows_finish(dsc_pack_rows_t *p);

/* The packed-stream state of old rank old_rank of old_world ranks after `rows` rows of the
 * packed batch that `state` (that rank's dsc_packer_state_save at the start of the batch) starts:
 * a temporary loader of that rank and a packer of like's settings pack those rows again (a packed
 * mixture saves a source's state at the start of the batch it reads, with the rows used). Writes
 * the state into out; returns its length, DSC_ETOOLARGE, DSC_EBADSTATE (the batch has fewer rows)
 * or the temporary loader's or packer's error (logged on like's logger). */
int dsc__packer_state_after_rows(const dsc_packer_t *like, const void *state, size_t len,
                                 uint32_t old_world, uint32_t old_rank, uint32_t rows, void *out,
                                 size_t cap);

#endif
