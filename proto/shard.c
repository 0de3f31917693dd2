/* Shard file format (proto/FORMAT.md): schema rules, header/index/footer codecs, validation and
 * the chunk codec (raw or lz4, XXH3-64 checksums). Pure functions over memory: no I/O. */
#include "shard.h"
#include "wire.h"

#include <limits.h>
#include <string.h>

#include <lz4.h>
#include <lz4hc.h>
#include <xxhash.h>

/* Fixed part of the header before the dataset name: magic, version, flags, header_len,
 * shard_id, sample_count, chunk_samples. */
#define HEADER_FIXED 36
#define HEADER_CHECKSUM 8
/* Smallest valid header: fixed part, 1-byte dataset name, one scalar field with a 1-byte name. */
#define HEADER_MIN (HEADER_FIXED + 1 + 1 + 1 + (1 + 1 + 1 + 1) + HEADER_CHECKSUM)

uint64_t dsc_checksum(const void *data, size_t len) {
    return (uint64_t)XXH3_64bits(data, len);
}

/* Names: 1..DSC_MAX_NAME-1 bytes of [A-Za-z0-9_.-]. */
static int name_valid(const char *name, size_t len) {
    if (len == 0 || len >= DSC_MAX_NAME)
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '.' || c == '-';
        if (!ok)
            return 0;
    }
    return 1;
}

/* Length of a NUL-terminated name held in a DSC_MAX_NAME array, or DSC_MAX_NAME when the
 * array holds no NUL (never valid). */
static size_t name_len(const char name[DSC_MAX_NAME]) {
    const char *nul = memchr(name, '\0', DSC_MAX_NAME);
    return nul ? (size_t)(nul - name) : DSC_MAX_NAME;
}

int dsc_schema_finish(dsc_schema_t *schema) {
    if (schema == NULL || schema->field_count < 1 || schema->field_count > DSC_MAX_FIELDS)
        return DSC_EBADSCHEMA;
    uint64_t total = 0;
    uint32_t var_count = 0;
    for (uint32_t i = 0; i < schema->field_count; i++) {
        dsc_field_t *field = &schema->fields[i];
        size_t len = name_len(field->name);
        if (!name_valid(field->name, len))
            return DSC_EBADSCHEMA;
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(schema->fields[j].name, field->name) == 0)
                return DSC_EBADSCHEMA;
        int elem = dsc_dtype_size(field->dtype);
        if (elem <= 0 || field->ndim > DSC_MAX_DIMS)
            return DSC_EBADSCHEMA;
        int variable = field->ndim >= 1 && field->shape[0] == DSC_DIM_VARIABLE;
        uint64_t row = (uint64_t)elem; /* dtype size * prod(shape[1..ndim)) */
        for (uint32_t d = 0; d < DSC_MAX_DIMS; d++) {
            if (d >= field->ndim) {
                field->shape[d] = 0; /* unused dims are zero, so equal schemas compare equal */
                continue;
            }
            if (d == 0)
                continue;
            if (field->shape[d] == 0)
                return DSC_EBADSCHEMA; /* only the leading dimension may be variable */
            if (__builtin_mul_overflow(row, (uint64_t)field->shape[d], &row) || row > UINT32_MAX)
                return DSC_EOVERFLOW;
        }
        uint64_t bytes = 0;
        if (!variable) {
            bytes = row;
            if (field->ndim >= 1 &&
                (__builtin_mul_overflow(bytes, (uint64_t)field->shape[0], &bytes) ||
                 bytes > UINT32_MAX))
                return DSC_EOVERFLOW;
        }
        field->row_bytes = row;
        field->sample_bytes = bytes;
        field->variable = (uint8_t)variable;
        var_count += (uint32_t)variable;
        total += bytes; /* at most 16 * 2^32: cannot wrap */
    }
    if (total > UINT32_MAX)
        return DSC_EOVERFLOW;
    schema->sample_bytes = total;
    schema->var_count = var_count;
    return 0;
}

int dsc_schema_version(const dsc_schema_t *schema) {
    return schema->var_count > 0 ? DSC_SHARD_VERSION_VAR : DSC_SHARD_VERSION;
}

uint64_t dsc_schema_chunk_min(const dsc_schema_t *schema, uint64_t samples) {
    uint64_t fixed, table, tables, total;
    if (__builtin_mul_overflow(samples, schema->sample_bytes, &fixed) ||
        __builtin_add_overflow(samples, 1, &table) ||
        __builtin_mul_overflow(table, (uint64_t)8 * schema->var_count, &tables) ||
        __builtin_add_overflow(fixed, schema->var_count ? tables : 0, &total))
        return UINT64_MAX;
    return total;
}

int dsc_schema_equal(const dsc_schema_t *a, const dsc_schema_t *b) {
    if (a->field_count != b->field_count || a->field_count > DSC_MAX_FIELDS)
        return 0;
    for (uint32_t i = 0; i < a->field_count; i++) {
        const dsc_field_t *fa = &a->fields[i], *fb = &b->fields[i];
        if (strncmp(fa->name, fb->name, DSC_MAX_NAME) != 0 || fa->dtype != fb->dtype ||
            fa->ndim != fb->ndim || fa->ndim > DSC_MAX_DIMS)
            return 0;
        for (uint32_t d = 0; d < fa->ndim; d++)
            if (fa->shape[d] != fb->shape[d])
                return 0;
    }
    return 1;
}

uint64_t dsc_schema_field_offset(const dsc_schema_t *schema, uint32_t field, uint64_t samples) {
    uint64_t offset = 0;
    uint32_t end = field < schema->field_count ? field : schema->field_count;
    if (end > DSC_MAX_FIELDS)
        end = DSC_MAX_FIELDS;
    for (uint32_t i = 0; i < end; i++)
        offset += schema->fields[i].sample_bytes * samples; /* 0 for variable fields */
    return offset;
}

/* ---- Header ---------------------------------------------------------------------------- */

size_t dsc_shard_header_size(const dsc_shard_header_t *header) {
    size_t size = HEADER_FIXED + 1 + name_len(header->dataset) + 1 + HEADER_CHECKSUM;
    uint32_t count = header->schema.field_count;
    if (count > DSC_MAX_FIELDS)
        count = DSC_MAX_FIELDS;
    for (uint32_t i = 0; i < count; i++) {
        const dsc_field_t *field = &header->schema.fields[i];
        uint32_t ndim = field->ndim > DSC_MAX_DIMS ? DSC_MAX_DIMS : field->ndim;
        size += 1 + name_len(field->name) + 1 + 1 + 4 * (size_t)ndim;
    }
    return size;
}

/* Chunk count implied by a header, or UINT64_MAX when chunk_samples is 0. */
static uint64_t expected_chunks(const dsc_shard_header_t *header) {
    if (header->chunk_samples == 0)
        return UINT64_MAX;
    return header->sample_count / header->chunk_samples +
           (header->sample_count % header->chunk_samples != 0);
}

/* Header fields outside the schema that both the encoder and the decoder insist on. */
static int header_fields_valid(const dsc_shard_header_t *header) {
    if (header->flags != 0 || header->chunk_samples == 0)
        return 0;
    if (!name_valid(header->dataset, name_len(header->dataset)))
        return 0;
    if (expected_chunks(header) > UINT32_MAX)
        return 0;
    /* A full chunk must fit the decoder's bound (and so a u32 raw_len): its fixed part and, in
     * version 2, its offset tables (the rows come on top, checked per chunk). */
    return dsc_schema_chunk_min(&header->schema, header->chunk_samples) <= DSC_CHUNK_MAX_RAW;
}

int dsc_shard_header_encode(const dsc_shard_header_t *header, uint8_t *out, size_t cap) {
    dsc_schema_t schema = header->schema;
    int rc = dsc_schema_finish(&schema);
    if (rc < 0)
        return rc == DSC_EOVERFLOW ? DSC_EINVAL : DSC_EBADSCHEMA;
    dsc_shard_header_t checked = *header;
    checked.schema = schema;
    if (!header_fields_valid(&checked))
        return DSC_EINVAL;
    size_t size = dsc_shard_header_size(&checked);
    if (size > cap)
        return DSC_ENOSPC;

    dsc_wr_t w;
    dsc_wr_init(&w, out, cap);
    dsc_wr_bytes(&w, DSC_SHARD_MAGIC, 8);
    dsc_wr_u16(&w, (uint16_t)dsc_schema_version(&schema));
    dsc_wr_u16(&w, checked.flags);
    dsc_wr_u32(&w, (uint32_t)size);
    dsc_wr_u64(&w, checked.shard_id);
    dsc_wr_u64(&w, checked.sample_count);
    dsc_wr_u32(&w, checked.chunk_samples);
    size_t len = name_len(checked.dataset);
    dsc_wr_u8(&w, (uint8_t)len);
    dsc_wr_bytes(&w, checked.dataset, len);
    dsc_wr_u8(&w, (uint8_t)schema.field_count);
    for (uint32_t i = 0; i < schema.field_count; i++) {
        const dsc_field_t *field = &schema.fields[i];
        len = name_len(field->name);
        dsc_wr_u8(&w, (uint8_t)len);
        dsc_wr_bytes(&w, field->name, len);
        dsc_wr_u8(&w, field->dtype);
        dsc_wr_u8(&w, field->ndim);
        for (uint32_t d = 0; d < field->ndim; d++)
            dsc_wr_u32(&w, field->shape[d]);
    }
    if (w.bad || w.pos + HEADER_CHECKSUM != size)
        return DSC_EINVAL; /* defensive: size and encoding disagree */
    dsc_wr_u64(&w, dsc_checksum(out, w.pos));
    return (int)size;
}

int dsc_shard_header_decode(const uint8_t *buf, size_t len, dsc_shard_header_t *out) {
    /* A prefix of the magic is a truncated shard; anything else is not a shard at all. */
    if (len < 8)
        return memcmp(buf, DSC_SHARD_MAGIC, len) == 0 ? DSC_ETRUNCATED : DSC_EBADMAGIC;
    if (memcmp(buf, DSC_SHARD_MAGIC, 8) != 0)
        return DSC_EBADMAGIC;
    if (len < 16)
        return DSC_ETRUNCATED;
    uint16_t version = (uint16_t)(buf[8] | buf[9] << 8);
    if (version != DSC_SHARD_VERSION && version != DSC_SHARD_VERSION_VAR)
        return DSC_EVERSION;
    uint32_t header_len = dsc_load_u32(buf + 12);
    if (header_len < HEADER_MIN || header_len > DSC_SHARD_MAX_HEADER)
        return DSC_EBADHEADER;
    if (len < header_len)
        return DSC_ETRUNCATED;
    size_t body = header_len - HEADER_CHECKSUM;
    if (dsc_checksum(buf, body) != dsc_load_u64(buf + body))
        return DSC_EBADHEADER;

    dsc_shard_header_t h;
    memset(&h, 0, sizeof h);
    dsc_rd_t r;
    dsc_rd_init(&r, buf, body);
    dsc_rd_bytes(&r, 8);
    h.version = dsc_rd_u16(&r);
    h.flags = dsc_rd_u16(&r);
    h.header_len = dsc_rd_u32(&r);
    h.shard_id = dsc_rd_u64(&r);
    h.sample_count = dsc_rd_u64(&r);
    h.chunk_samples = dsc_rd_u32(&r);
    uint8_t n = dsc_rd_u8(&r);
    const uint8_t *name = dsc_rd_bytes(&r, n);
    if (name == NULL || !name_valid((const char *)name, n))
        return DSC_EBADHEADER; /* checked on the stored bytes: a NUL inside must not cut it */
    memcpy(h.dataset, name, n);
    uint8_t field_count = dsc_rd_u8(&r);
    if (r.bad)
        return DSC_EBADHEADER;
    if (field_count < 1 || field_count > DSC_MAX_FIELDS)
        return DSC_EBADSCHEMA;
    h.schema.field_count = field_count;
    for (uint32_t i = 0; i < field_count; i++) {
        dsc_field_t *field = &h.schema.fields[i];
        n = dsc_rd_u8(&r);
        name = dsc_rd_bytes(&r, n);
        if (name == NULL)
            return DSC_EBADHEADER;
        if (!name_valid((const char *)name, n))
            return DSC_EBADSCHEMA;
        memcpy(field->name, name, n);
        field->dtype = dsc_rd_u8(&r);
        field->ndim = dsc_rd_u8(&r);
        if (r.bad)
            return DSC_EBADHEADER;
        if (field->ndim > DSC_MAX_DIMS)
            return DSC_EBADSCHEMA;
        for (uint32_t d = 0; d < field->ndim; d++)
            field->shape[d] = dsc_rd_u32(&r);
    }
    if (r.bad || r.pos != body)
        return DSC_EBADHEADER; /* the checksummed bytes and the declared layout disagree */
    int rc = dsc_schema_finish(&h.schema);
    if (rc < 0)
        return rc;
    /* Version 1 knows no variable dimension (a zero dimension is invalid there, as it always
     * was); version 2 is only written for a schema that has one, so the encoding stays
     * canonical. */
    if (h.version == DSC_SHARD_VERSION && h.schema.var_count > 0)
        return DSC_EBADSCHEMA;
    if (h.version == DSC_SHARD_VERSION_VAR && h.schema.var_count == 0)
        return DSC_EBADHEADER;
    if (!header_fields_valid(&h))
        return DSC_EBADHEADER;
    *out = h;
    return (int)header_len;
}

/* ---- Index entries and footer ---------------------------------------------------------- */

void dsc_chunk_entry_encode(const dsc_chunk_entry_t *entry, uint8_t out[DSC_CHUNK_ENTRY_SIZE]) {
    dsc_store_u64(out, entry->offset);
    dsc_store_u64(out + 8, entry->first_sample);
    dsc_store_u32(out + 16, entry->stored_len);
    dsc_store_u32(out + 20, entry->raw_len);
    dsc_store_u32(out + 24, entry->sample_count);
    out[28] = entry->codec;
    out[29] = out[30] = out[31] = 0;
    dsc_store_u64(out + 32, entry->stored_checksum);
    dsc_store_u64(out + 40, entry->raw_checksum);
}

void dsc_chunk_entry_decode(const uint8_t in[DSC_CHUNK_ENTRY_SIZE], dsc_chunk_entry_t *entry) {
    entry->offset = dsc_load_u64(in);
    entry->first_sample = dsc_load_u64(in + 8);
    entry->stored_len = dsc_load_u32(in + 16);
    entry->raw_len = dsc_load_u32(in + 20);
    entry->sample_count = dsc_load_u32(in + 24);
    entry->codec = in[28];
    entry->stored_checksum = dsc_load_u64(in + 32);
    entry->raw_checksum = dsc_load_u64(in + 40);
}

void dsc_shard_footer_encode(const dsc_shard_footer_t *footer, uint8_t out[DSC_SHARD_FOOTER_SIZE]) {
    dsc_store_u64(out, footer->index_offset);
    dsc_store_u32(out + 8, footer->chunk_count);
    dsc_store_u32(out + 12, footer->flags);
    dsc_store_u64(out + 16, footer->index_checksum);
    memcpy(out + 24, DSC_SHARD_END_MAGIC, 8);
}

int dsc_shard_footer_decode(const uint8_t in[DSC_SHARD_FOOTER_SIZE], dsc_shard_footer_t *footer) {
    if (memcmp(in + 24, DSC_SHARD_END_MAGIC, 8) != 0)
        return DSC_EBADFOOTER;
    dsc_shard_footer_t f;
    f.index_offset = dsc_load_u64(in);
    f.chunk_count = dsc_load_u32(in + 8);
    f.flags = dsc_load_u32(in + 12);
    f.index_checksum = dsc_load_u64(in + 16);
    if (f.flags != 0)
        return DSC_EBADFOOTER; /* no footer flags are defined in version 1 */
    *footer = f;
    return 0;
}

/* Footer consistency with the header and the file: the index lies between the header and the
 * footer and fills that space exactly, and it holds as many chunks as the header implies. */
static int footer_check(const dsc_shard_header_t *header, const dsc_shard_footer_t *footer,
                        uint64_t file_size) {
    if (file_size < (uint64_t)header->header_len + DSC_SHARD_FOOTER_SIZE)
        return DSC_ETRUNCATED;
    uint64_t index_end = file_size - DSC_SHARD_FOOTER_SIZE;
    if (footer->index_offset < header->header_len || footer->index_offset > index_end)
        return DSC_EBADFOOTER;
    if (index_end - footer->index_offset != (uint64_t)footer->chunk_count * DSC_CHUNK_ENTRY_SIZE)
        return DSC_EBADFOOTER;
    if (footer->chunk_count != expected_chunks(header))
        return DSC_EBADFOOTER;
    return 0;
}

int dsc_shard_check_index(const dsc_shard_header_t *header, const dsc_shard_footer_t *footer,
                          const uint8_t *index, uint64_t file_size) {
    /* The same placement rules as dsc_shard_parse, reported as an index fault for callers that
     * read the index on its own. */
    if (footer_check(header, footer, file_size) < 0)
        return DSC_EBADINDEX;
    size_t index_len = (size_t)footer->chunk_count * DSC_CHUNK_ENTRY_SIZE;
    if (dsc_checksum(index, index_len) != footer->index_checksum)
        return DSC_EBADINDEX;

    int variable = header->schema.var_count > 0;
    uint64_t next_sample = 0;
    uint64_t prev_end = header->header_len;
    for (uint32_t i = 0; i < footer->chunk_count; i++) {
        const uint8_t *raw = index + (size_t)i * DSC_CHUNK_ENTRY_SIZE;
        dsc_chunk_entry_t e;
        dsc_chunk_entry_decode(raw, &e);
        if (raw[29] != 0 || raw[30] != 0 || raw[31] != 0)
            return DSC_EBADINDEX;
        if (e.first_sample != next_sample)
            return DSC_EBADINDEX;
        uint64_t left = header->sample_count - next_sample;
        uint64_t want = left < header->chunk_samples ? left : header->chunk_samples;
        if (e.sample_count == 0 || e.sample_count != want)
            return DSC_EBADINDEX;
        /* Version 1: exactly the samples' bytes. Version 2: at least the fixed part and the
         * offset tables (the exact size needs the decoded offsets: dsc_chunk_layout). Both are
         * <= DSC_CHUNK_MAX_RAW by header_fields_valid. */
        uint64_t least = dsc_schema_chunk_min(&header->schema, e.sample_count);
        if (variable ? (e.raw_len < least || e.raw_len > DSC_CHUNK_MAX_RAW)
                     : (uint64_t)e.raw_len != least)
            return DSC_EBADINDEX;
        if (e.codec == DSC_CODEC_RAW) {
            if (e.stored_len != e.raw_len || e.stored_checksum != e.raw_checksum)
                return DSC_EBADINDEX;
        } else if (e.codec == DSC_CODEC_LZ4) {
            /* Compressed chunks are only kept when they shrink (dsc_chunk_encode). */
            if (e.stored_len == 0 || e.stored_len >= e.raw_len)
                return DSC_EBADINDEX;
        } else {
            return DSC_EBADINDEX;
        }
        uint64_t end;
        if (__builtin_add_overflow(e.offset, (uint64_t)e.stored_len, &end))
            return DSC_EOVERFLOW;
        if (e.offset < prev_end || end > footer->index_offset)
            return DSC_EBADINDEX;
        prev_end = end;
        next_sample += e.sample_count;
    }
    if (next_sample != header->sample_count)
        return DSC_EBADINDEX;
    return 0;
}

/* ---- Whole shard ------------------------------------------------------------------------ */

int dsc_shard_parse(const uint8_t *buf, uint64_t len, dsc_shard_view_t *out) {
    dsc_shard_view_t view;
    memset(&view, 0, sizeof view);
    size_t head_len = len > DSC_SHARD_MAX_HEADER ? DSC_SHARD_MAX_HEADER : (size_t)len;
    int rc = dsc_shard_header_decode(buf, head_len, &view.header);
    if (rc < 0)
        return rc;
    if (len < (uint64_t)view.header.header_len + DSC_SHARD_FOOTER_SIZE)
        return DSC_ETRUNCATED;
    rc = dsc_shard_footer_decode(buf + len - DSC_SHARD_FOOTER_SIZE, &view.footer);
    if (rc < 0)
        return rc;
    rc = footer_check(&view.header, &view.footer, len);
    if (rc < 0)
        return rc;
    view.index = buf + view.footer.index_offset;
    rc = dsc_shard_check_index(&view.header, &view.footer, view.index, len);
    if (rc < 0)
        return rc;
    view.base = buf;
    view.size = len;
    *out = view;
    return 0;
}

int dsc_shard_chunk(const dsc_shard_view_t *view, uint32_t i, dsc_chunk_entry_t *out) {
    if (i >= view->footer.chunk_count)
        return DSC_ERANGE;
    dsc_chunk_entry_decode(view->index + (size_t)i * DSC_CHUNK_ENTRY_SIZE, out);
    return 0;
}

const uint8_t *dsc_shard_chunk_data(const dsc_shard_view_t *view, const dsc_chunk_entry_t *e) {
    /* Entries from dsc_shard_chunk are in bounds; a hand-made one may not be. */
    if (e->offset > view->size || e->stored_len > view->size - e->offset)
        return NULL;
    return view->base + e->offset;
}

/* ---- Decoded chunk layout ---------------------------------------------------------------- */

int dsc_chunk_layout(const dsc_schema_t *schema, uint32_t samples, const void *raw,
                     uint64_t raw_len, dsc_chunk_layout_t *out) {
    if (schema == NULL || out == NULL || (raw == NULL && raw_len > 0) || samples == 0 ||
        schema->field_count < 1 || schema->field_count > DSC_MAX_FIELDS)
        return DSC_EINVAL;
    uint64_t least = dsc_schema_chunk_min(schema, samples);
    if (least == UINT64_MAX || raw_len < least)
        return DSC_EBADINDEX;
    if (schema->var_count == 0 && raw_len != least)
        return DSC_EBADINDEX;
    const uint8_t *base = raw;
    dsc_chunk_layout_t layout;
    memset(&layout, 0, sizeof layout);
    layout.samples = samples;
    layout.field_count = schema->field_count;
    uint64_t pos = 0; /* pos <= raw_len throughout */
    for (uint32_t f = 0; f < schema->field_count; f++) {
        const dsc_field_t *field = &schema->fields[f];
        if (field->variable)
            continue;
        uint64_t bytes = field->sample_bytes * samples; /* <= least <= raw_len */
        layout.fields[f].values = base + pos;
        layout.fields[f].bytes = bytes;
        pos += bytes;
    }
    for (uint32_t f = 0; f < schema->field_count; f++) {
        const dsc_field_t *field = &schema->fields[f];
        if (!field->variable)
            continue;
        uint64_t table = ((uint64_t)samples + 1) * 8;
        if (raw_len - pos < table)
            return DSC_ECORRUPT; /* an earlier field's rows took the room of this table */
        const uint8_t *offsets = base + pos;
        pos += table;
        if (dsc_load_u64(offsets) != 0)
            return DSC_ECORRUPT;
        uint64_t prev = 0;
        for (uint32_t i = 1; i <= samples; i++) {
            uint64_t next = dsc_load_u64(offsets + (size_t)i * 8);
            if (next < prev)
                return DSC_ECORRUPT;
            prev = next;
        }
        uint64_t bytes;
        if (__builtin_mul_overflow(prev, field->row_bytes, &bytes) || bytes > raw_len - pos)
            return DSC_ECORRUPT;
        layout.fields[f].offsets = offsets;
        layout.fields[f].rows = prev;
        layout.fields[f].values = base + pos;
        layout.fields[f].bytes = bytes;
        pos += bytes;
    }
    if (pos != raw_len)
        return DSC_ECORRUPT;
    *out = layout;
    return 0;
}

uint64_t dsc_chunk_offset(const dsc_chunk_layout_t *layout, uint32_t field, uint32_t i) {
    if (field >= layout->field_count || field >= DSC_MAX_FIELDS || i > layout->samples ||
        layout->fields[field].offsets == NULL)
        return 0;
    return dsc_load_u64(layout->fields[field].offsets + (size_t)i * 8);
}

int dsc_chunk_sample(const dsc_chunk_layout_t *layout, const dsc_schema_t *schema, uint32_t field,
                     uint32_t i, const uint8_t **data, uint64_t *bytes) {
    if (field >= layout->field_count || field >= DSC_MAX_FIELDS || i >= layout->samples)
        return DSC_ERANGE;
    const dsc_chunk_field_t *cf = &layout->fields[field];
    const dsc_field_t *f = &schema->fields[field];
    if (cf->offsets == NULL) {
        *data = cf->values + (uint64_t)i * f->sample_bytes;
        *bytes = f->sample_bytes;
        return 0;
    }
    uint64_t lo = dsc_chunk_offset(layout, field, i), hi = dsc_chunk_offset(layout, field, i + 1);
    *data = cf->values + lo * f->row_bytes;
    *bytes = (hi - lo) * f->row_bytes;
    return 0;
}

/* ---- Chunk codec ------------------------------------------------------------------------ */

int dsc_chunk_verify(const dsc_chunk_entry_t *entry, const void *stored) {
    return dsc_checksum(stored, entry->stored_len) == entry->stored_checksum ? 0 : DSC_ECHUNKSUM;
}

int dsc_chunk_decode(const dsc_chunk_entry_t *entry, const void *stored, void *dst,
                     size_t dst_cap) {
    if (entry->codec != DSC_CODEC_RAW && entry->codec != DSC_CODEC_LZ4)
        return DSC_EBADINDEX;
    if (entry->raw_len == 0 || entry->raw_len > DSC_CHUNK_MAX_RAW)
        return DSC_EBADINDEX;
    if (entry->raw_len > dst_cap)
        return DSC_ENOSPC;
    if (dsc_chunk_verify(entry, stored) < 0)
        return DSC_ECHUNKSUM;
    if (entry->codec == DSC_CODEC_RAW) {
        if (entry->stored_len != entry->raw_len)
            return DSC_EBADINDEX;
        /* The stored bytes are the decoded bytes: both checksums must be the same number. */
        if (entry->raw_checksum != entry->stored_checksum)
            return DSC_EDATASUM;
        memcpy(dst, stored, entry->raw_len);
        return (int)entry->raw_len;
    }
    if (entry->stored_len == 0 || entry->stored_len > INT_MAX)
        return DSC_EBADINDEX;
    int got = LZ4_decompress_safe((const char *)stored, (char *)dst, (int)entry->stored_len,
                                  (int)entry->raw_len);
    if (got < 0 || (uint32_t)got != entry->raw_len)
        return DSC_EDECOMPRESS;
    if (dsc_checksum(dst, entry->raw_len) != entry->raw_checksum)
        return DSC_EDATASUM;
    return (int)entry->raw_len;
}

size_t dsc_chunk_encode_bound(size_t raw_len) {
    /* A chunk that does not shrink is stored raw, out of the caller's own buffer. */
    return raw_len;
}

int dsc_chunk_encode(int codec, int level, const void *raw, size_t raw_len, void *dst,
                     size_t dst_cap, dsc_chunk_entry_t *entry, const void **stored_out) {
    if (raw == NULL || entry == NULL || stored_out == NULL || raw_len == 0 ||
        raw_len > DSC_CHUNK_MAX_RAW)
        return DSC_EINVAL;
    if (codec != DSC_CODEC_RAW && codec != DSC_CODEC_LZ4)
        return DSC_EINVAL;
    if (codec == DSC_CODEC_LZ4 && (level < 0 || level > LZ4HC_CLEVEL_MAX))
        return DSC_EINVAL;
    uint64_t raw_checksum = dsc_checksum(raw, raw_len);
    int stored_len = 0;
    if (codec == DSC_CODEC_LZ4) {
        if (dst == NULL || dst_cap < dsc_chunk_encode_bound(raw_len))
            return DSC_ENOSPC;
        /* Room for raw_len - 1 bytes: output that would not shrink the chunk fails early. */
        int cap = (int)(raw_len - 1);
        if (cap > 0) {
            if (level == 0)
                stored_len =
                    LZ4_compress_default((const char *)raw, (char *)dst, (int)raw_len, cap);
            else
                stored_len =
                    LZ4_compress_HC((const char *)raw, (char *)dst, (int)raw_len, cap, level);
        }
    }
    entry->raw_len = (uint32_t)raw_len;
    entry->raw_checksum = raw_checksum;
    if (stored_len > 0 && (size_t)stored_len < raw_len) {
        entry->codec = DSC_CODEC_LZ4;
        entry->stored_len = (uint32_t)stored_len;
        entry->stored_checksum = dsc_checksum(dst, (size_t)stored_len);
        *stored_out = dst;
    } else {
        entry->codec = DSC_CODEC_RAW;
        entry->stored_len = (uint32_t)raw_len;
        entry->stored_checksum = raw_checksum;
        *stored_out = raw;
    }
    return 0;
}
