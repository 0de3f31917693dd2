/* libFuzzer target: walks the input as a stream of frames (header decode, then the body decoder
 * of its opcode and direction, RDMA_CONNECT and RDMA_GET included) and checks that decoders never
 * crash and that whatever they accept re-encodes to the same bytes. */
#include "auth.h"
#include "protocol.h"

#include <stdint.h>
#include <string.h>

/* A property violation, not a crash on input: stop loudly in every build. */
#define FUZZ_ASSERT(cond)                                                                          \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

/* Room for the largest re-encoded body: HELLO with two 64 KiB strings, or an RDMA_GET answer
 * with 4096 chunks (295 KiB). */
static uint8_t scratch[1 << 19];

/* Encoders of accepted values must reproduce the body exactly: the encoding is canonical. */
static void same_bytes(int n, const uint8_t *body, size_t len) {
    FUZZ_ASSERT(n >= 0 && (size_t)n == len);
    FUZZ_ASSERT(len == 0 || memcmp(scratch, body, len) == 0);
}

static void check_get_resp(const uint8_t *body, size_t len) {
    dsc_get_resp_t resp;
    int rc = dsc_get_resp_decode(body, len, &resp);
    /* The streaming path must agree with the whole-body decoder. */
    int psize = dsc_get_resp_prefix_size(body, len);
    if (psize > 0 && (size_t)psize <= len) {
        dsc_get_resp_t pre;
        int prc = dsc_get_resp_prefix_decode(body, (size_t)psize, len, &pre);
        FUZZ_ASSERT(prc == rc);
        if (prc == 0)
            FUZZ_ASSERT(pre.chunk_count == resp.chunk_count && pre.data_len == resp.data_len);
    } else {
        FUZZ_ASSERT(rc < 0);
    }
    if (rc < 0)
        return;
    FUZZ_ASSERT(resp.chunk_count >= 1 && resp.chunk_count <= DSC_GET_MAX_CHUNKS);
    FUZZ_ASSERT(resp.data >= body && resp.data + resp.data_len == body + len);
    dsc_get_resp_iter_t it;
    dsc_get_resp_iter_init(&it, &resp);
    dsc_chunk_entry_t entry;
    const uint8_t *data;
    uint64_t total = 0;
    uint32_t chunks = 0;
    while ((rc = dsc_get_resp_iter_next(&it, &entry, &data)) == 1) {
        FUZZ_ASSERT(data >= resp.data && entry.stored_len <= resp.data_len);
        FUZZ_ASSERT((uint64_t)(data - resp.data) + entry.stored_len <= resp.data_len);
        FUZZ_ASSERT(entry.raw_len <= DSC_CHUNK_MAX_RAW);
        /* Touch the first and last stored byte so ASan sees any bad pointer. */
        if (entry.stored_len > 0) {
            volatile uint8_t first = data[0], last = data[entry.stored_len - 1];
            (void)first;
            (void)last;
        }
        total += entry.stored_len;
        chunks++;
    }
    FUZZ_ASSERT(rc == 0 && chunks == resp.chunk_count && total == resp.data_len);
    /* Random access to the last chunk agrees with the walk. */
    FUZZ_ASSERT(dsc_get_resp_chunk(&resp, resp.chunk_count - 1, &entry, &data) == 0);
    FUZZ_ASSERT(data + entry.stored_len == resp.data + resp.data_len);
    FUZZ_ASSERT(dsc_get_resp_chunk(&resp, resp.chunk_count, &entry, &data) == DSC_ERANGE);
}

static void check_rdma_get_resp(const uint8_t *body, size_t len) {
    dsc_rdma_get_resp_t resp;
    if (dsc_rdma_get_resp_decode(body, len, &resp) < 0)
        return;
    FUZZ_ASSERT(resp.chunk_count >= 1 && resp.chunk_count <= DSC_GET_MAX_CHUNKS);
    static dsc_chunk_entry_t entries[DSC_GET_MAX_CHUNKS];
    static dsc_rdma_desc_t descs[DSC_GET_MAX_CHUNKS];
    uint64_t total = 0;
    int n;
    if (resp.flags & DSC_RDMA_GET_INLINE) {
        /* The inline part is a GET answer: the GET walker must accept it as is. */
        FUZZ_ASSERT(resp.descs == NULL && resp.lease_id == 0);
        FUZZ_ASSERT(resp.inline_resp.data + resp.inline_resp.data_len == body + len);
        dsc_get_resp_iter_t it;
        dsc_get_resp_iter_init(&it, &resp.inline_resp);
        uint32_t i = 0;
        const uint8_t *data;
        while (dsc_get_resp_iter_next(&it, &entries[i], &data) == 1) {
            total += entries[i].stored_len;
            i++;
        }
        FUZZ_ASSERT(i == resp.chunk_count && total == resp.inline_resp.data_len);
        n = dsc_rdma_get_resp_inline_prefix_encode(entries, resp.chunk_count, scratch,
                                                   sizeof scratch);
        FUZZ_ASSERT(n > 0 && (size_t)n + resp.inline_resp.data_len == len);
        FUZZ_ASSERT(memcmp(scratch, body, (size_t)n) == 0);
    } else {
        FUZZ_ASSERT(resp.lease_id != 0 && resp.lease_ttl_ms >= 1);
        for (uint32_t i = 0; i < resp.chunk_count; i++) {
            FUZZ_ASSERT(dsc_rdma_get_resp_chunk(&resp, i, &entries[i], &descs[i]) == 0);
            FUZZ_ASSERT(descs[i].len == entries[i].stored_len && descs[i].len >= 1);
            FUZZ_ASSERT(descs[i].addr + descs[i].len > descs[i].addr); /* no wrap */
            total += descs[i].len;
        }
        FUZZ_ASSERT(dsc_rdma_get_resp_chunk(&resp, resp.chunk_count, &entries[0], &descs[0]) ==
                    DSC_ERANGE);
        same_bytes(dsc_rdma_get_resp_encode(resp.lease_id, resp.lease_ttl_ms, entries, descs,
                                            resp.chunk_count, scratch, sizeof scratch),
                   body, len);
    }
    FUZZ_ASSERT(total == resp.total_bytes);
}

static void check_body(const dsc_frame_header_t *h, const uint8_t *body, size_t len) {
    int response = (h->flags & DSC_FLAG_RESPONSE) != 0;
    if (response && h->status != DSC_STATUS_OK) {
        FUZZ_ASSERT(dsc_status_to_err(h->status) < 0); /* the body is a message */
        (void)dsc_status_name(h->status);
        return;
    }
    switch (h->opcode) {
    case DSC_OP_HELLO:
        if (response) {
            dsc_hello_resp_t resp;
            if (dsc_hello_resp_decode(body, len, &resp) == 0) {
                FUZZ_ASSERT(resp.version >= 1 && resp.max_body >= DSC_FRAME_MIN_MAX_BODY);
                same_bytes(dsc_hello_resp_encode(&resp, scratch, sizeof scratch), body, len);
            }
        } else {
            dsc_hello_req_t req;
            if (dsc_hello_req_decode(body, len, &req) == 0) {
                FUZZ_ASSERT(req.min_version >= 1 && req.min_version <= req.max_version);
                int v = dsc_hello_negotiate(req.min_version, req.max_version);
                FUZZ_ASSERT(v == DSC_EVERSION ||
                            (v >= req.min_version && v <= req.max_version &&
                             v >= DSC_PROTO_MIN_VERSION && v <= DSC_PROTO_VERSION));
                same_bytes(dsc_hello_req_encode(&req, scratch, sizeof scratch), body, len);
                dsc_auth_init_t init;
                if ((req.features & DSC_FEATURE_AUTH) &&
                    dsc_auth_init_decode((const uint8_t *)req.auth.ptr, req.auth.len, &init) == 0) {
                    FUZZ_ASSERT(dsc_auth_name_valid(init.name.ptr, init.name.len));
                    uint8_t again[DSC_AUTH_INIT_MAX];
                    int n = dsc_auth_init_encode(&init, again, sizeof again);
                    FUZZ_ASSERT(n >= 0 && (size_t)n == req.auth.len);
                    FUZZ_ASSERT(memcmp(again, req.auth.ptr, req.auth.len) == 0);
                }
            }
        }
        break;
    case DSC_OP_AUTH: {
        const uint8_t *mac;
        if (dsc_auth_mac_decode(body, len, &mac) == 0)
            FUZZ_ASSERT(len == DSC_AUTH_MAC_SIZE && mac == body);
        else
            FUZZ_ASSERT(len != DSC_AUTH_MAC_SIZE);
        break;
    }
    case DSC_OP_MANIFEST:
    case DSC_OP_STAT:
        if (!response) {
            dsc_str_t name;
            if (dsc_name_req_decode(body, len, &name) == 0) {
                char text[DSC_MAX_NAME];
                FUZZ_ASSERT(name.len < DSC_MAX_NAME);
                memcpy(text, name.ptr, name.len);
                text[name.len] = '\0';
                same_bytes(dsc_name_req_encode(text, scratch, sizeof scratch), body, len);
            }
        }
        break;
    case DSC_OP_WARM:
    case DSC_OP_EVICT:
        if (!response) {
            dsc_shard_req_t req;
            if (dsc_shard_req_decode(body, len, &req) == 0)
                same_bytes(dsc_shard_req_encode(&req, scratch, sizeof scratch), body, len);
        }
        break;
    case DSC_OP_POLICY:
        if (!response) {
            dsc_policy_req_t req;
            if (dsc_policy_req_decode(body, len, &req) == 0) {
                FUZZ_ASSERT(req.action >= DSC_POLICY_OP_PIN &&
                            req.action <= DSC_POLICY_OP_PRIORITY);
                FUZZ_ASSERT(req.action != DSC_POLICY_OP_PRIORITY ||
                            req.bytes <= DSC_POLICY_MAX_PRIORITY);
                same_bytes(dsc_policy_req_encode(&req, scratch, sizeof scratch), body, len);
            }
        }
        break;
    case DSC_OP_GET:
        if (response) {
            check_get_resp(body, len);
        } else {
            dsc_get_req_t req;
            if (dsc_get_req_decode(body, len, &req) == 0) {
                FUZZ_ASSERT(req.chunk_count >= 1 && req.chunk_count <= DSC_GET_MAX_CHUNKS);
                same_bytes(dsc_get_req_encode(&req, scratch, sizeof scratch), body, len);
            }
        }
        break;
    case DSC_OP_RDMA_CONNECT:
        if (response) {
            dsc_rdma_connect_resp_t resp;
            if (dsc_rdma_connect_resp_decode(body, len, &resp) == 0) {
                FUZZ_ASSERT(resp.qp.mtu >= 1 && resp.qp.mtu <= 5 && resp.lease_ttl_ms >= 1);
                FUZZ_ASSERT(resp.probe.len >= 1 && resp.probe.len <= DSC_RDMA_PROBE_MAX);
                same_bytes(dsc_rdma_connect_resp_encode(&resp, scratch, sizeof scratch), body, len);
            }
        } else {
            dsc_rdma_qp_info_t req;
            if (dsc_rdma_connect_req_decode(body, len, &req) == 0) {
                FUZZ_ASSERT(req.qpn >= 1 && req.qpn <= DSC_RDMA_MAX_QPN);
                uint16_t version;
                uint8_t mtu, rd;
                int rc =
                    dsc_rdma_connect_negotiate(&req, req.link_layer, 3, 16, &version, &mtu, &rd);
                FUZZ_ASSERT(rc == 0 && mtu <= 3 && mtu <= req.mtu && rd >= 1 && rd <= 16 &&
                            version >= 1 && version <= req.version);
                same_bytes(dsc_rdma_connect_req_encode(&req, scratch, sizeof scratch), body, len);
            }
        }
        break;
    case DSC_OP_RDMA_GET:
        if (response) {
            check_rdma_get_resp(body, len);
        } else {
            dsc_rdma_get_req_t req;
            if (dsc_rdma_get_req_decode(body, len, &req) == 0) {
                uint64_t ids[DSC_RDMA_MAX_RELEASE];
                FUZZ_ASSERT(req.release_count <= DSC_RDMA_MAX_RELEASE);
                for (uint16_t i = 0; i < req.release_count; i++) {
                    ids[i] = dsc_rdma_get_req_release(&req, i);
                    FUZZ_ASSERT(ids[i] != 0);
                }
                req.release = ids;
                same_bytes(dsc_rdma_get_req_encode(&req, scratch, sizeof scratch), body, len);
            }
        }
        break;
    default:
        /* PING, LIST, MEMBERS and the JSON answers carry no binary body; unknown and reserved
         * opcodes are answered UNSUPPORTED. Names must exist either way. */
        (void)dsc_opcode_name(h->opcode);
        (void)dsc_opcode_known(h->opcode);
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t pos = 0;
    while (pos < size) {
        dsc_frame_header_t h;
        int rc = dsc_frame_header_decode(data + pos, size - pos, 0, &h);
        if (rc == 0) {
            FUZZ_ASSERT(size - pos < DSC_FRAME_HEADER_SIZE);
            break;
        }
        if (rc < 0) {
            FUZZ_ASSERT(rc == DSC_EBADMAGIC || rc == DSC_EVERSION || rc == DSC_ETOOLARGE ||
                        rc == DSC_EBADFRAME);
            /* A server would answer BAD_REQUEST and close: an error frame always fits. */
            uint8_t err[DSC_FRAME_HEADER_SIZE + DSC_ERROR_MAX_MESSAGE];
            FUZZ_ASSERT(dsc_error_frame_encode(0, 0, dsc_err_to_status(rc), dsc_strerror(rc), err,
                                               sizeof err) > 0);
            break;
        }
        FUZZ_ASSERT(rc == DSC_FRAME_HEADER_SIZE && h.body_len <= DSC_FRAME_MAX_BODY);
        pos += DSC_FRAME_HEADER_SIZE;
        size_t body_len = h.body_len;
        if (body_len > size - pos) {
            /* Body still arriving: decode the part that is here anyway (more decoder input). */
            body_len = size - pos;
            check_body(&h, data + pos, body_len);
            break;
        }
        check_body(&h, data + pos, body_len);
        pos += body_len;
    }
    return 0;
}
