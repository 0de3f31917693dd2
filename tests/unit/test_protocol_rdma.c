/* RDMA_CONNECT and RDMA_GET codecs (proto/PROTOCOL.md "RDMA"): round trips, every truncation,
 * every single-byte change, each validation rule, and the MTU / rd_atomic negotiation. */
#include "protocol.h"
#include "testlib.h"

#include <string.h>

typedef int (*decode_fn)(const uint8_t *body, size_t len, void *out);
typedef int (*reencode_fn)(const void *decoded, uint8_t *out, size_t cap);

static int dec_conn_req(const uint8_t *b, size_t n, void *o) {
    return dsc_rdma_connect_req_decode(b, n, o);
}
static int enc_conn_req(const void *d, uint8_t *o, size_t c) {
    return dsc_rdma_connect_req_encode(d, o, c);
}
static int dec_conn_resp(const uint8_t *b, size_t n, void *o) {
    return dsc_rdma_connect_resp_decode(b, n, o);
}
static int enc_conn_resp(const void *d, uint8_t *o, size_t c) {
    return dsc_rdma_connect_resp_encode(d, o, c);
}
static int dec_get_req(const uint8_t *b, size_t n, void *o) {
    return dsc_rdma_get_req_decode(b, n, o);
}
/* Re-encodes a decoded request: its lease ids come from the wire copy. */
static int enc_get_req(const void *d, uint8_t *o, size_t c) {
    dsc_rdma_get_req_t req = *(const dsc_rdma_get_req_t *)d;
    uint64_t ids[DSC_RDMA_MAX_RELEASE];
    for (uint16_t i = 0; i < req.release_count; i++)
        ids[i] = dsc_rdma_get_req_release(&req, i);
    req.release = ids;
    return dsc_rdma_get_req_encode(&req, o, c);
}
static int dec_get_resp(const uint8_t *b, size_t n, void *o) {
    return dsc_rdma_get_resp_decode(b, n, o);
}
/* Re-encodes a decoded response of either form. */
static int enc_get_resp(const void *d, uint8_t *o, size_t c) {
    const dsc_rdma_get_resp_t *r = d;
    static dsc_chunk_entry_t entries[DSC_GET_MAX_CHUNKS];
    static dsc_rdma_desc_t descs[DSC_GET_MAX_CHUNKS];
    for (uint32_t i = 0; i < r->chunk_count; i++)
        dsc_chunk_entry_decode(r->entries + (size_t)i * DSC_CHUNK_ENTRY_SIZE, &entries[i]);
    if (r->flags & DSC_RDMA_GET_INLINE) {
        int n = dsc_rdma_get_resp_inline_prefix_encode(entries, r->chunk_count, o, c);
        if (n < 0 || c - (size_t)n < r->inline_resp.data_len)
            return n < 0 ? n : DSC_ENOSPC;
        memcpy(o + n, r->inline_resp.data, r->inline_resp.data_len);
        return n + (int)r->inline_resp.data_len;
    }
    for (uint32_t i = 0; i < r->chunk_count; i++)
        REQUIRE(dsc_rdma_get_resp_chunk(r, i, &entries[i], &descs[i]) == 0);
    return dsc_rdma_get_resp_encode(r->lease_id, r->lease_ttl_ms, entries, descs, r->chunk_count, o,
                                    c);
}

/* Every strict prefix is rejected, the whole body is accepted and re-encodes to itself, a
 * trailing byte is rejected, and every single-byte change is either rejected or is itself
 * canonical (re-encodes to the changed bytes): the decoder never accepts what the encoder would
 * not produce. */
static void check_codec(const char *what, const uint8_t *body, size_t len, decode_fn dec,
                        reencode_fn enc) {
    static uint8_t buf[1 << 16], again[1 << 16];
    union {
        dsc_rdma_qp_info_t a;
        dsc_rdma_connect_resp_t b;
        dsc_rdma_get_req_t c;
        dsc_rdma_get_resp_t d;
    } out;
    REQUIRE(len < sizeof buf);
    for (size_t n = 0; n < len; n++) {
        memcpy(buf, body, n);
        if (dec(buf, n, &out) != DSC_EBADFRAME) {
            fprintf(stderr, "%s: prefix of %zu bytes accepted\n", what, n);
            CHECK(0);
        }
    }
    memcpy(buf, body, len);
    REQUIRE(dec(buf, len, &out) == 0);
    CHECK_EQ_INT(enc(&out, again, sizeof again), len);
    CHECK(memcmp(again, body, len) == 0);
    buf[len] = 0;
    CHECK(dec(buf, len + 1, &out) == DSC_EBADFRAME);
    for (size_t i = 0; i < len; i++) {
        for (int bit = 0; bit < 8; bit++) {
            memcpy(buf, body, len);
            buf[i] ^= (uint8_t)(1u << bit);
            if (dec(buf, len, &out) == 0) {
                int n = enc(&out, again, sizeof again);
                if (n != (int)len || memcmp(again, buf, len) != 0) {
                    fprintf(stderr, "%s: byte %zu bit %d accepted but not canonical\n", what, i,
                            bit);
                    CHECK(0);
                }
            }
        }
    }
}

static dsc_rdma_qp_info_t sample_qp(void) {
    dsc_rdma_qp_info_t q;
    memset(&q, 0, sizeof q);
    q.version = 1;
    q.link_layer = DSC_RDMA_LINK_ETHERNET;
    q.port = 1;
    q.mtu = 5;
    q.rd_atomic = 16;
    q.qpn = 0x123456;
    q.psn = 0xabcdef;
    static const uint8_t gid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 7};
    memcpy(q.gid, gid, 16);
    q.device.ptr = "mlx5_0";
    q.device.len = 6;
    return q;
}

static void test_connect(void) {
    uint8_t body[256];
    dsc_rdma_qp_info_t q = sample_qp();
    int n = dsc_rdma_connect_req_encode(&q, body, sizeof body);
    CHECK_EQ_INT(n, DSC_RDMA_CONNECT_FIXED + 2 + 6);
    /* Layout from PROTOCOL.md, written out by hand. */
    CHECK(body[0] == 1 && body[1] == 0 && body[2] == DSC_RDMA_LINK_ETHERNET && body[3] == 1);
    CHECK(body[4] == 5 && body[5] == 16 && body[8] == 0x56 && body[9] == 0x34 && body[10] == 0x12);
    CHECK(body[12] == 0xef && body[26] == 0xff && body[31] == 7 && body[32] == 6);
    check_codec("connect_req", body, (size_t)n, dec_conn_req, enc_conn_req);
    dsc_rdma_qp_info_t got;
    REQUIRE(dsc_rdma_connect_req_decode(body, (size_t)n, &got) == 0);
    CHECK(got.qpn == q.qpn && got.psn == q.psn && got.mtu == 5 && got.device.len == 6 &&
          memcmp(got.device.ptr, "mlx5_0", 6) == 0 && memcmp(got.gid, q.gid, 16) == 0);

    /* Values the decoder refuses are refused by the encoder too. */
    dsc_rdma_qp_info_t bad;
    bad = q, bad.mtu = 6;
    CHECK(dsc_rdma_connect_req_encode(&bad, body, sizeof body) == DSC_EINVAL);
    bad = q, bad.mtu = 0;
    CHECK(dsc_rdma_connect_req_encode(&bad, body, sizeof body) == DSC_EINVAL);
    bad = q, bad.qpn = 0x1000000;
    CHECK(dsc_rdma_connect_req_encode(&bad, body, sizeof body) == DSC_EINVAL);
    bad = q, bad.qpn = 0;
    CHECK(dsc_rdma_connect_req_encode(&bad, body, sizeof body) == DSC_EINVAL);
    bad = q, bad.psn = 0x1000000;
    CHECK(dsc_rdma_connect_req_encode(&bad, body, sizeof body) == DSC_EINVAL);
    bad = q, bad.link_layer = 3;
    CHECK(dsc_rdma_connect_req_encode(&bad, body, sizeof body) == DSC_EINVAL);
    bad = q, memset(bad.gid, 0, 16); /* RoCE without a GID */
    CHECK(dsc_rdma_connect_req_encode(&bad, body, sizeof body) == DSC_EINVAL);
    bad.link_layer = DSC_RDMA_LINK_IB, bad.lid = 7; /* InfiniBand may go by LID alone */
    CHECK(dsc_rdma_connect_req_encode(&bad, body, sizeof body) > 0);
    bad = q, bad.device.ptr = "a\0b", bad.device.len = 3;
    CHECK(dsc_rdma_connect_req_encode(&bad, body, sizeof body) == DSC_EINVAL);
    CHECK(dsc_rdma_connect_req_encode(&q, body, 10) == DSC_ENOSPC);

    dsc_rdma_connect_resp_t resp;
    memset(&resp, 0, sizeof resp);
    resp.qp = q;
    resp.qp.qpn = 77;
    resp.qp.mtu = 3;
    resp.lease_ttl_ms = 10000;
    resp.max_lease_bytes = 64ull << 20;
    resp.probe = (dsc_rdma_desc_t){0x7f0000001000ull, 0xdeadbeef, 4096, 0x1122334455667788ull};
    n = dsc_rdma_connect_resp_encode(&resp, body, sizeof body);
    CHECK_EQ_INT(n, DSC_RDMA_CONNECT_FIXED + 4 + 8 + DSC_RDMA_DESC_SIZE + 2 + 6);
    check_codec("connect_resp", body, (size_t)n, dec_conn_resp, enc_conn_resp);
    dsc_rdma_connect_resp_t rgot;
    REQUIRE(dsc_rdma_connect_resp_decode(body, (size_t)n, &rgot) == 0);
    CHECK(rgot.probe.addr == resp.probe.addr && rgot.probe.rkey == 0xdeadbeef &&
          rgot.probe.len == 4096 && rgot.lease_ttl_ms == 10000 && rgot.qp.qpn == 77);
    dsc_rdma_connect_resp_t rbad = resp;
    rbad.probe.len = DSC_RDMA_PROBE_MAX + 1;
    CHECK(dsc_rdma_connect_resp_encode(&rbad, body, sizeof body) == DSC_EINVAL);
    rbad = resp, rbad.probe.addr = UINT64_MAX - 100; /* would wrap */
    CHECK(dsc_rdma_connect_resp_encode(&rbad, body, sizeof body) == DSC_EINVAL);
    rbad = resp, rbad.lease_ttl_ms = 0;
    CHECK(dsc_rdma_connect_resp_encode(&rbad, body, sizeof body) == DSC_EINVAL);
    rbad = resp, rbad.probe.len = 0;
    CHECK(dsc_rdma_connect_resp_encode(&rbad, body, sizeof body) == DSC_EINVAL);
}

static void test_negotiate(void) {
    dsc_rdma_qp_info_t q = sample_qp();
    uint16_t version;
    uint8_t mtu, rd;
    /* Client 4096, server 1024: both use 1024 (a mismatch fails READs, Mooncake #3868). */
    CHECK(dsc_rdma_connect_negotiate(&q, DSC_RDMA_LINK_ETHERNET, 3, 8, &version, &mtu, &rd) == 0);
    CHECK(mtu == 3 && rd == 8 && version == 1);
    q.mtu = 2;
    CHECK(dsc_rdma_connect_negotiate(&q, DSC_RDMA_LINK_ETHERNET, 5, 16, &version, &mtu, &rd) == 0);
    CHECK(mtu == 2 && rd == 16);
    q.version = 9; /* a newer client gets this build's version */
    CHECK(dsc_rdma_connect_negotiate(&q, DSC_RDMA_LINK_ETHERNET, 5, 16, &version, &mtu, &rd) == 0);
    CHECK(version == DSC_RDMA_VERSION);
    CHECK(dsc_rdma_connect_negotiate(&q, DSC_RDMA_LINK_IB, 5, 16, &version, &mtu, &rd) ==
          DSC_ENOTSUP);
    CHECK(dsc_rdma_connect_negotiate(&q, DSC_RDMA_LINK_ETHERNET, 6, 16, &version, &mtu, &rd) ==
          DSC_EINVAL);
}

static void test_get_req(void) {
    uint8_t body[4096];
    uint64_t ids[3] = {1, 0x8000000000000001ull, 42};
    dsc_rdma_get_req_t req;
    memset(&req, 0, sizeof req);
    req.get = (dsc_get_req_t){{"imagenet", 8}, 3, 10, 4, 0, 0};
    req.release_count = 3;
    req.release = ids;
    int n = dsc_rdma_get_req_encode(&req, body, sizeof body);
    CHECK_EQ_INT(n, 2 + 8 + 16 + 2 + 24);
    check_codec("get_req", body, (size_t)n, dec_get_req, enc_get_req);
    dsc_rdma_get_req_t got;
    REQUIRE(dsc_rdma_get_req_decode(body, (size_t)n, &got) == 0);
    CHECK(got.release_count == 3 && dsc_rdma_get_req_release(&got, 1) == ids[1] &&
          dsc_rdma_get_req_release(&got, 3) == 0 && got.get.chunk_count == 4);
    /* The GET part is the GET request encoding byte for byte. */
    uint8_t get_body[64];
    int gn = dsc_get_req_encode(&req.get, get_body, sizeof get_body);
    CHECK(gn == n - 26 && memcmp(get_body, body, (size_t)gn) == 0);

    /* No releases. */
    req.release_count = 0;
    n = dsc_rdma_get_req_encode(&req, body, sizeof body);
    check_codec("get_req_plain", body, (size_t)n, dec_get_req, enc_get_req);
    /* Release-only form. */
    dsc_rdma_get_req_t rel;
    memset(&rel, 0, sizeof rel);
    rel.release_count = 2;
    rel.release = ids;
    n = dsc_rdma_get_req_encode(&rel, body, sizeof body);
    CHECK_EQ_INT(n, 2 + 16 + 2 + 16);
    check_codec("get_req_release", body, (size_t)n, dec_get_req, enc_get_req);
    rel.release_count = 0; /* release-only without releases is meaningless */
    CHECK(dsc_rdma_get_req_encode(&rel, body, sizeof body) == DSC_EINVAL);
    rel.release_count = 2, rel.get.shard_id = 1;
    CHECK(dsc_rdma_get_req_encode(&rel, body, sizeof body) == DSC_EINVAL);
    /* Lease id 0 and too many releases. */
    uint64_t zero_ids[2] = {5, 0};
    req.release_count = 2, req.release = zero_ids;
    CHECK(dsc_rdma_get_req_encode(&req, body, sizeof body) == DSC_EINVAL);
    static uint64_t many[DSC_RDMA_MAX_RELEASE + 1];
    for (int i = 0; i <= DSC_RDMA_MAX_RELEASE; i++)
        many[i] = (uint64_t)i + 1;
    req.release = many, req.release_count = DSC_RDMA_MAX_RELEASE;
    n = dsc_rdma_get_req_encode(&req, body, sizeof body);
    CHECK(n > 0 && dsc_rdma_get_req_decode(body, (size_t)n, &got) == 0);
    req.release_count = DSC_RDMA_MAX_RELEASE + 1;
    CHECK(dsc_rdma_get_req_encode(&req, body, sizeof body) == DSC_EINVAL);
    /* A hand-made body claiming 257 releases is refused. */
    req.release_count = DSC_RDMA_MAX_RELEASE;
    n = dsc_rdma_get_req_encode(&req, body, sizeof body);
    body[n - 2 - 8 * DSC_RDMA_MAX_RELEASE] = (DSC_RDMA_MAX_RELEASE + 1) & 0xff;
    body[n - 1 - 8 * DSC_RDMA_MAX_RELEASE] = (DSC_RDMA_MAX_RELEASE + 1) >> 8;
    body[n] = 1, body[n + 1] = 0, body[n + 2] = 0, body[n + 3] = 0, body[n + 4] = 0;
    body[n + 5] = 0, body[n + 6] = 0, body[n + 7] = 0;
    CHECK(dsc_rdma_get_req_decode(body, (size_t)n + 8, &got) == DSC_EBADFRAME);
}

static void make_chunks(dsc_chunk_entry_t *entries, dsc_rdma_desc_t *descs, uint32_t count) {
    for (uint32_t i = 0; i < count; i++) {
        memset(&entries[i], 0, sizeof entries[i]);
        entries[i].offset = 4096 + 1000ull * i;
        entries[i].first_sample = 8ull * i;
        entries[i].sample_count = 8;
        entries[i].codec = i % 2 ? DSC_CODEC_LZ4 : DSC_CODEC_RAW;
        entries[i].raw_len = 64;
        entries[i].stored_len = i % 2 ? 40 : 64;
        entries[i].stored_checksum = 0x1000 + i;
        entries[i].raw_checksum = i % 2 ? 0x2000 + i : 0x1000 + i;
        descs[i].addr = 0x7f0000000000ull + entries[i].offset;
        descs[i].rkey = 0x42;
        descs[i].len = entries[i].stored_len;
        descs[i].checksum = entries[i].stored_checksum;
    }
}

static void test_get_resp(void) {
    static uint8_t body[1 << 16];
    dsc_chunk_entry_t entries[3];
    dsc_rdma_desc_t descs[3];
    make_chunks(entries, descs, 3);
    int n = dsc_rdma_get_resp_encode(77, 10000, entries, descs, 3, body, sizeof body);
    CHECK_EQ_INT(n, DSC_RDMA_GET_RESP_SIZE(3));
    check_codec("get_resp", body, (size_t)n, dec_get_resp, enc_get_resp);
    dsc_rdma_get_resp_t resp;
    REQUIRE(dsc_rdma_get_resp_decode(body, (size_t)n, &resp) == 0);
    CHECK(resp.lease_id == 77 && resp.lease_ttl_ms == 10000 && resp.chunk_count == 3 &&
          resp.total_bytes == 64 + 40 + 64 && resp.inline_resp.data == NULL);
    dsc_chunk_entry_t e;
    dsc_rdma_desc_t d;
    CHECK(dsc_rdma_get_resp_chunk(&resp, 1, &e, &d) == 0);
    CHECK(d.addr == descs[1].addr && d.len == 40 && e.codec == DSC_CODEC_LZ4);
    CHECK(dsc_rdma_get_resp_chunk(&resp, 3, &e, &d) == DSC_ERANGE);

    /* A descriptor must agree with its entry, must not wrap, and must not be empty. */
    dsc_rdma_desc_t bad[3];
    memcpy(bad, descs, sizeof bad);
    bad[2].len = 63;
    CHECK(dsc_rdma_get_resp_encode(77, 10000, entries, bad, 3, body, sizeof body) == DSC_EINVAL);
    memcpy(bad, descs, sizeof bad);
    bad[0].checksum ^= 1;
    CHECK(dsc_rdma_get_resp_encode(77, 10000, entries, bad, 3, body, sizeof body) == DSC_EINVAL);
    memcpy(bad, descs, sizeof bad);
    bad[1].addr = UINT64_MAX - 10;
    CHECK(dsc_rdma_get_resp_encode(77, 10000, entries, bad, 3, body, sizeof body) == DSC_EINVAL);
    CHECK(dsc_rdma_get_resp_encode(0, 10000, entries, descs, 3, body, sizeof body) == DSC_EINVAL);
    CHECK(dsc_rdma_get_resp_encode(7, 0, entries, descs, 3, body, sizeof body) == DSC_EINVAL);
    CHECK(dsc_rdma_get_resp_encode(7, 1, entries, descs, 3, body, 100) == DSC_ENOSPC);
    /* The same checks hold on the wire: patch the encoded body. */
    n = dsc_rdma_get_resp_encode(77, 10000, entries, descs, 3, body, sizeof body);
    size_t desc2 = DSC_RDMA_GET_RESP_INLINE_PREFIX(3) + 2 * DSC_RDMA_DESC_SIZE;
    body[desc2 + 12] ^= 1; /* len of descriptor 2 */
    CHECK(dsc_rdma_get_resp_decode(body, (size_t)n, &resp) == DSC_EBADFRAME);
    body[desc2 + 12] ^= 1;
    body[DSC_RDMA_GET_RESP_HEAD + 29] = 1; /* padding of entry 0 */
    CHECK(dsc_rdma_get_resp_decode(body, (size_t)n, &resp) == DSC_EBADFRAME);
    body[DSC_RDMA_GET_RESP_HEAD + 29] = 0;
    CHECK(dsc_rdma_get_resp_decode(body, (size_t)n, &resp) == 0);

    /* Inline form: the stored bytes follow, exactly as for GET. */
    int p = dsc_rdma_get_resp_inline_prefix_encode(entries, 3, body, sizeof body);
    CHECK_EQ_INT(p, DSC_RDMA_GET_RESP_INLINE_PREFIX(3));
    for (int i = 0; i < 168; i++)
        body[p + i] = (uint8_t)i;
    check_codec("get_resp_inline", body, (size_t)p + 168, dec_get_resp, enc_get_resp);
    REQUIRE(dsc_rdma_get_resp_decode(body, (size_t)p + 168, &resp) == 0);
    CHECK(resp.descs == NULL && resp.lease_id == 0 && resp.inline_resp.data_len == 168);
    CHECK(dsc_rdma_get_resp_chunk(&resp, 0, &e, &d) == DSC_EINVAL);
    dsc_get_resp_iter_t it;
    dsc_get_resp_iter_init(&it, &resp.inline_resp);
    const uint8_t *data;
    int chunks = 0;
    while (dsc_get_resp_iter_next(&it, &e, &data) == 1)
        chunks++;
    CHECK(chunks == 3 && data == body + p + 104 && e.stored_len == 64);
    CHECK(dsc_rdma_get_resp_decode(body, (size_t)p + 167, &resp) == DSC_EBADFRAME);
    /* An empty chunk cannot be leased (no zero-length READs). */
    entries[1].stored_len = 0, descs[1].len = 0;
    CHECK(dsc_rdma_get_resp_encode(7, 1, entries, descs, 3, body, sizeof body) == DSC_EINVAL);

    /* The largest answer: 4096 chunks. */
    static dsc_chunk_entry_t big_e[DSC_GET_MAX_CHUNKS];
    static dsc_rdma_desc_t big_d[DSC_GET_MAX_CHUNKS];
    make_chunks(big_e, big_d, DSC_GET_MAX_CHUNKS);
    static uint8_t big[DSC_RDMA_GET_RESP_SIZE(DSC_GET_MAX_CHUNKS)];
    n = dsc_rdma_get_resp_encode(9, 5, big_e, big_d, DSC_GET_MAX_CHUNKS, big, sizeof big);
    CHECK_EQ_INT(n, sizeof big);
    CHECK(dsc_rdma_get_resp_decode(big, sizeof big, &resp) == 0);
    CHECK(dsc_rdma_get_resp_encode(9, 5, big_e, big_d, DSC_GET_MAX_CHUNKS + 1, big, sizeof big) ==
          DSC_EINVAL);
}

int main(void) {
    test_connect();
    test_negotiate();
    test_get_req();
    test_get_resp();
    return TEST_DONE();
}
