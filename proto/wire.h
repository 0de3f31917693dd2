/* Little-endian cursor readers and writers for frames and shard files: bounds-checked, no
 * allocation. A reader that runs past its end sets `bad` and returns zeros from then on, so a
 * decoder checks once at the end instead of after every field. */
#ifndef DSC_WIRE_H
#define DSC_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct dsc_rd {
    const uint8_t *p;
    size_t len;
    size_t pos;
    int bad; /* set once a read went past len */
} dsc_rd_t;

typedef struct dsc_wr {
    uint8_t *p;
    size_t cap;
    size_t pos;
    int bad; /* set once a write did not fit */
} dsc_wr_t;

static inline void dsc_rd_init(dsc_rd_t *r, const void *p, size_t len) {
    r->p = (const uint8_t *)p;
    r->len = len;
    r->pos = 0;
    r->bad = 0;
}
static inline size_t dsc_rd_left(const dsc_rd_t *r) {
    return r->bad ? 0 : r->len - r->pos;
}
/* Returns a pointer to the next n bytes and advances, or NULL (and bad) when fewer remain. */
static inline const uint8_t *dsc_rd_bytes(dsc_rd_t *r, size_t n) {
    if (r->bad || n > r->len - r->pos) {
        r->bad = 1;
        return NULL;
    }
    const uint8_t *q = r->p + r->pos;
    r->pos += n;
    return q;
}
static inline uint8_t dsc_rd_u8(dsc_rd_t *r) {
    const uint8_t *q = dsc_rd_bytes(r, 1);
    return q ? q[0] : 0;
}
static inline uint16_t dsc_rd_u16(dsc_rd_t *r) {
    const uint8_t *q = dsc_rd_bytes(r, 2);
    return q ? (uint16_t)(q[0] | (uint16_t)q[1] << 8) : 0;
}
static inline uint32_t dsc_rd_u32(dsc_rd_t *r) {
    const uint8_t *q = dsc_rd_bytes(r, 4);
    return q ? (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24
             : 0;
}
static inline uint64_t dsc_rd_u64(dsc_rd_t *r) {
    uint64_t lo = dsc_rd_u32(r);
    uint64_t hi = dsc_rd_u32(r);
    return lo | hi << 32;
}

static inline void dsc_wr_init(dsc_wr_t *w, void *p, size_t cap) {
    w->p = (uint8_t *)p;
    w->cap = cap;
    w->pos = 0;
    w->bad = 0;
}
static inline void dsc_wr_bytes(dsc_wr_t *w, const void *src, size_t n) {
    if (w->bad || n > w->cap - w->pos) {
        w->bad = 1;
        return;
    }
    if (n)
        memcpy(w->p + w->pos, src, n);
    w->pos += n;
}
static inline void dsc_wr_u8(dsc_wr_t *w, uint8_t v) {
    dsc_wr_bytes(w, &v, 1);
}
static inline void dsc_wr_u16(dsc_wr_t *w, uint16_t v) {
    uint8_t b[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    dsc_wr_bytes(w, b, 2);
}
static inline void dsc_wr_u32(dsc_wr_t *w, uint32_t v) {
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    dsc_wr_bytes(w, b, 4);
}
static inline void dsc_wr_u64(dsc_wr_t *w, uint64_t v) {
    dsc_wr_u32(w, (uint32_t)v);
    dsc_wr_u32(w, (uint32_t)(v >> 32));
}

/* Unaligned little-endian loads/stores on raw buffers. */
static inline uint32_t dsc_load_u32(const uint8_t *q) {
    return (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
}
static inline uint64_t dsc_load_u64(const uint8_t *q) {
    return (uint64_t)dsc_load_u32(q) | (uint64_t)dsc_load_u32(q + 4) << 32;
}
static inline void dsc_store_u32(uint8_t *q, uint32_t v) {
    q[0] = (uint8_t)v;
    q[1] = (uint8_t)(v >> 8);
    q[2] = (uint8_t)(v >> 16);
    q[3] = (uint8_t)(v >> 24);
}
static inline void dsc_store_u64(uint8_t *q, uint64_t v) {
    dsc_store_u32(q, (uint32_t)v);
    dsc_store_u32(q + 4, (uint32_t)(v >> 32));
}

#endif
