/* REPORT request codec (proto/PROTOCOL.md; the bottleneck names it carries are dscache_base.c's).
 * No I/O, no allocation; the decoder is bounds-checked and safe on hostile input. */
#include "report.h"
#include "wire.h"

#include <string.h>

int dsc_report_job_valid(const char *name, size_t len) {
    if (name == NULL || len == 0 || len > DSC_REPORT_MAX_JOB)
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '.' || c == ':' || c == '@' || c == '/' || c == '-';
        if (!ok)
            return 0;
    }
    return 1;
}

/* Dataset names follow the format's rule: 1..63 bytes of [A-Za-z0-9_.-]. */
static int dataset_valid(dsc_str_t s) {
    if (s.ptr == NULL || s.len < 1 || s.len >= DSC_MAX_NAME)
        return 0;
    for (uint16_t i = 0; i < s.len; i++) {
        char c = s.ptr[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

static int verdict_valid(dsc_str_t s) {
    if (s.len == 0)
        return 1;
    return s.ptr != NULL && s.len <= DSC_REPORT_MAX_VERDICT && memchr(s.ptr, '\0', s.len) == NULL;
}

static int req_valid(const dsc_report_req_t *r) {
    return (r->flags & ~DSC_REPORT_FLAG_FINISHED) == 0 &&
           dsc_report_job_valid(r->job.ptr, r->job.len) && dataset_valid(r->dataset) &&
           r->world_size >= 1 && r->rank < r->world_size && r->stall_ppm <= DSC_REPORT_STALL_ONE &&
           r->bottleneck < DSC_BOTTLENECK_COUNT && verdict_valid(r->verdict);
}

static void wr_str(dsc_wr_t *w, dsc_str_t s) {
    dsc_wr_u16(w, s.len);
    if (s.len > 0)
        dsc_wr_bytes(w, s.ptr, s.len);
}

static dsc_str_t rd_str(dsc_rd_t *r) {
    dsc_str_t s = {"", 0};
    uint16_t len = dsc_rd_u16(r);
    const uint8_t *p = dsc_rd_bytes(r, len);
    if (p != NULL) {
        s.ptr = (const char *)p;
        s.len = len;
    }
    return s;
}

int dsc_report_req_encode(const dsc_report_req_t *req, uint8_t *out, size_t cap) {
    if (req == NULL || !req_valid(req))
        return DSC_EINVAL;
    dsc_wr_t w;
    dsc_wr_init(&w, out, cap);
    dsc_wr_u32(&w, req->flags);
    wr_str(&w, req->job);
    wr_str(&w, req->dataset);
    dsc_wr_u32(&w, req->rank);
    dsc_wr_u32(&w, req->world_size);
    dsc_wr_u32(&w, req->stall_ppm);
    dsc_wr_u64(&w, req->samples_per_s);
    dsc_wr_u64(&w, req->bytes_per_s);
    dsc_wr_u8(&w, req->bottleneck);
    wr_str(&w, req->verdict);
    if (req->has_hedge) {
        const dsc_report_hedge_t *h = &req->hedge;
        dsc_wr_u32(&w, h->flags);
        dsc_wr_u64(&w, h->hedges);
        dsc_wr_u64(&w, h->hedges_won);
        dsc_wr_u64(&w, h->hedge_bytes);
        dsc_wr_u64(&w, h->wasted_bytes);
        dsc_wr_u64(&w, h->slow_marks);
        dsc_wr_u64(&w, h->excused);
    }
    return w.bad ? DSC_ENOSPC : (int)w.pos;
}

size_t dsc_report_req_strip_hedge(size_t len) {
    return len >= DSC_REPORT_HEDGE_SIZE ? len - DSC_REPORT_HEDGE_SIZE : len;
}

int dsc_report_req_decode(const uint8_t *body, size_t len, dsc_report_req_t *out) {
    if (body == NULL && len > 0)
        return DSC_EBADFRAME;
    dsc_rd_t r;
    dsc_rd_init(&r, body, len);
    dsc_report_req_t req;
    req.flags = dsc_rd_u32(&r);
    req.job = rd_str(&r);
    req.dataset = rd_str(&r);
    req.rank = dsc_rd_u32(&r);
    req.world_size = dsc_rd_u32(&r);
    req.stall_ppm = dsc_rd_u32(&r);
    req.samples_per_s = dsc_rd_u64(&r);
    req.bytes_per_s = dsc_rd_u64(&r);
    req.bottleneck = dsc_rd_u8(&r);
    req.verdict = rd_str(&r);
    req.has_hedge = 0;
    memset(&req.hedge, 0, sizeof req.hedge);
    if (!r.bad && r.pos < r.len) {
        /* The straggler trailer; what follows a whole one is a later version's. */
        if (r.len - r.pos < DSC_REPORT_HEDGE_SIZE)
            return DSC_EBADFRAME;
        req.has_hedge = 1;
        req.hedge.flags = dsc_rd_u32(&r);
        req.hedge.hedges = dsc_rd_u64(&r);
        req.hedge.hedges_won = dsc_rd_u64(&r);
        req.hedge.hedge_bytes = dsc_rd_u64(&r);
        req.hedge.wasted_bytes = dsc_rd_u64(&r);
        req.hedge.slow_marks = dsc_rd_u64(&r);
        req.hedge.excused = dsc_rd_u64(&r);
        r.pos = r.len;
    }
    if (r.bad || r.pos != r.len || !req_valid(&req))
        return DSC_EBADFRAME;
    *out = req;
    return 0;
}

int dsc_report_resp_encode(const dsc_report_resp_t *resp, uint8_t *out, size_t cap) {
    if (resp == NULL || resp->flags != 0)
        return DSC_EINVAL;
    dsc_wr_t w;
    dsc_wr_init(&w, out, cap);
    dsc_wr_u32(&w, resp->flags);
    dsc_wr_u32(&w, resp->backing_pool);
    dsc_wr_u64(&w, resp->hits);
    dsc_wr_u64(&w, resp->misses);
    dsc_wr_u64(&w, resp->backing_bytes);
    dsc_wr_u64(&w, resp->backing_busy_us);
    dsc_wr_u64(&w, resp->backing_wait_us);
    dsc_wr_u64(&w, resp->backing_rate);
    dsc_wr_u64(&w, resp->store_capacity);
    dsc_wr_u32(&w, resp->backing_latency_us);
    dsc_wr_u32(&w, resp->backing_running);
    return w.bad ? DSC_ENOSPC : (int)w.pos;
}

int dsc_report_resp_decode(const uint8_t *body, size_t len, dsc_report_resp_t *out) {
    if (len == 0)
        return 0;
    if (body == NULL || len < DSC_REPORT_RESP_SIZE)
        return DSC_EBADFRAME;
    dsc_rd_t r;
    dsc_rd_init(&r, body, DSC_REPORT_RESP_SIZE);
    dsc_report_resp_t v;
    v.flags = dsc_rd_u32(&r);
    v.backing_pool = dsc_rd_u32(&r);
    v.hits = dsc_rd_u64(&r);
    v.misses = dsc_rd_u64(&r);
    v.backing_bytes = dsc_rd_u64(&r);
    v.backing_busy_us = dsc_rd_u64(&r);
    v.backing_wait_us = dsc_rd_u64(&r);
    v.backing_rate = dsc_rd_u64(&r);
    v.store_capacity = dsc_rd_u64(&r);
    v.backing_latency_us = dsc_rd_u32(&r);
    v.backing_running = dsc_rd_u32(&r);
    if (r.bad || r.pos != r.len || v.flags != 0)
        return DSC_EBADFRAME;
    *out = v;
    return 1;
}
