#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_frame (valid frames of every opcode) next to this script.

The layouts are written out independently of the C encoders (proto/PROTOCOL.md), so
test_protocol, which decodes every seed, also cross-checks the document against the code.
Run: python3 tests/fuzz/corpus/fuzz_frame/gen_seeds.py
"""
import json
import os
import struct

MAGIC = 0x50435344
RESPONSE = 0x0001
OP = dict(PEER_READ=14, HELLO=1, PING=2, LIST=3, MANIFEST=4, GET=5, STAT=6, MEMBERS=7, AUTH=8, WARM=16, EVICT=17,
          POLICY=18, RDMA_CONNECT=32, RDMA_GET=33)


def frame(opcode, body=b"", request_id=1, flags=0, status=0, version=1):
    return struct.pack("<IBBHIQI", MAGIC, version, opcode, flags, status, request_id,
                       len(body)) + body


def s(text):
    data = text.encode() if isinstance(text, str) else text
    return struct.pack("<H", len(data)) + data


def entry(offset, first_sample, stored_len, raw_len, samples, codec, stored_sum, raw_sum):
    return struct.pack("<QQIIIB3xQQ", offset, first_sample, stored_len, raw_len, samples, codec,
                       stored_sum, raw_sum)


def get_resp(chunks):
    """chunks: list of (codec, stored bytes, raw_len)."""
    prefix = struct.pack("<II", len(chunks), 0)
    data = b""
    offset = 4096
    for i, (codec, stored, raw_len) in enumerate(chunks):
        prefix += entry(offset, i * 4, len(stored), raw_len, 4, codec, 0x1234 + i, 0x5678 + i)
        offset += len(stored)
        data += stored
    return prefix + data


def qp_info(qpn, mtu, rd_atomic, gid, device):
    return struct.pack("<HBBBBHII", 1, 2, 1, mtu, rd_atomic, 0, qpn, 0x00ABCDEF) + gid + s(device)


def rdma_connect_resp():
    gid = bytes(10) + b"\xff\xff" + bytes([10, 0, 0, 7])
    fixed = qp_info(0x77, 3, 16, gid, "mlx5_0")[:-8]
    return (fixed + struct.pack("<IQ", 10000, 64 << 20) +
            struct.pack("<QIIQ", 0x7F0000001000, 0xDEADBEEF, 4096, 0x1122334455667788) +
            s("mlx5_0"))


def rdma_get_resp(chunks, inline=False):
    """chunks: list of (codec, stored bytes, raw_len)."""
    count = len(chunks)
    head = struct.pack("<IIQII", count, 1 if inline else 0, 0 if inline else 42,
                       0 if inline else 10000, 0)
    entries, descs, data = b"", b"", b""
    offset = 4096
    for i, (codec, stored, raw_len) in enumerate(chunks):
        entries += entry(offset, i * 4, len(stored), raw_len, 4, codec, 0x1234 + i, 0x5678 + i)
        descs += struct.pack("<QIIQ", 0x7F0000000000 + offset, 0x42, len(stored), 0x1234 + i)
        offset += len(stored)
        data += stored
    return head + entries + (data if inline else descs)


def js(value):
    return json.dumps(value, separators=(",", ":")).encode()


def seeds():
    hello_req = struct.pack("<HHIQ", 1, 1, 0, 0) + s("") + s("libdscache")
    hello_auth = struct.pack("<HHIQ", 1, 3, 1, 0xABCDEF) + s(b"secret\x00token") + s("t0")
    hello_resp = struct.pack("<HIQI", 1, 0, 0xABCDEF, 64 << 20) + s("dscached 127.0.0.1:7070")
    get_req = s("imagenet") + struct.pack("<IIII", 3, 0, 2, 0)
    resp = get_resp([(0, bytes(range(16)), 16), (1, b"\x40abcd", 64)])
    yield "hello_req", frame(OP["HELLO"], hello_req)
    yield "hello_req_auth", frame(OP["HELLO"], hello_auth, request_id=0)
    yield "hello_resp", frame(OP["HELLO"], hello_resp, flags=RESPONSE)
    yield "ping_req", frame(OP["PING"], request_id=2)
    yield "ping_resp", frame(OP["PING"], request_id=2, flags=RESPONSE)
    yield "list_req", frame(OP["LIST"], request_id=3)
    yield "list_resp", frame(OP["LIST"], js([{"name": "imagenet", "shards": 2, "samples": 8,
                                               "bytes": 4096}]), 3, RESPONSE)
    yield "manifest_req", frame(OP["MANIFEST"], s("imagenet"), 4)
    yield "manifest_resp", frame(OP["MANIFEST"], js({"name": "imagenet", "shards": []}), 4,
                                 RESPONSE)
    yield "get_req", frame(OP["GET"], get_req, 5)
    yield "get_resp", frame(OP["GET"], resp, 5, RESPONSE)
    yield "get_not_found", frame(OP["GET"], b"no shard 3 in imagenet", 6, RESPONSE, status=1)
    yield "stat_req", frame(OP["STAT"], s(""), 7)
    yield "stat_resp", frame(OP["STAT"], js({"store": {"bytes": 0}, "datasets": []}), 7, RESPONSE)
    yield "members_req", frame(OP["MEMBERS"], request_id=8)
    yield "members_resp", frame(OP["MEMBERS"], js({"members": ["127.0.0.1:7070", "127.0.0.1:7071"],
                                                   "replicas": 2, "hash": "00ff00ff00ff00ff"}), 8,
                                RESPONSE)
    yield "warm_req", frame(OP["WARM"], s("imagenet") + struct.pack("<I", 0xFFFFFFFF), 9)
    yield "warm_resp", frame(OP["WARM"], struct.pack("<I", 12), 9, RESPONSE)
    yield "evict_req", frame(OP["EVICT"], s("tokens") + struct.pack("<I", 4), 10)
    yield "evict_resp", frame(OP["EVICT"], struct.pack("<I", 1), 10, RESPONSE)
    yield "policy_req", frame(OP["POLICY"], s("imagenet") + struct.pack("<BQ", 3, 1 << 30), 15)
    yield "policy_req_priority", frame(OP["POLICY"], s("imagenet") + struct.pack("<BQ", 4, 500),
                                       16)
    yield "policy_resp", frame(OP["POLICY"], struct.pack("<I", 3), 15, RESPONSE)
    yield "get_req_version", frame(OP["GET"], s("imagenet") + struct.pack("<IIIIQ", 3, 0, 2, 1,
                                                                          0x0123456789ABCDEF), 16)
    yield "get_changed", frame(OP["GET"], b"dataset imagenet changed", 16, RESPONSE, status=11)
    # Authentication (PROTOCOL.md, Authentication): auth-init in HELLO, nonce in its answer,
    # AUTH carrying the client's MAC, its answer the server's MAC or UNAUTHORIZED.
    auth_init = struct.pack("<BB", 1, 7) + b"trainer" + bytes(range(32))
    hello_init = struct.pack("<HHIQ", 1, 1, 1, 0) + s(auth_init) + s("libdscache")
    hello_nonce = (struct.pack("<HIQI", 1, 1, 0, 64 << 20) + s("dscached 127.0.0.1:7070") +
                   bytes(range(32, 64)))
    yield "hello_req_auth_init", frame(OP["HELLO"], hello_init, request_id=1)
    yield "hello_resp_nonce", frame(OP["HELLO"], hello_nonce, 1, RESPONSE)
    yield "auth_req", frame(OP["AUTH"], bytes.fromhex(
        "dd7a5169057e7a423276e191e7c9b5171bf10544320bf05913edc7fb477ff910"), 2)
    yield "auth_resp", frame(OP["AUTH"], bytes.fromhex(
        "cf55c550c1f23d7c1d457ab0165dffd3dc058a028b89652bc177eeae7459357c"), 2, RESPONSE)
    yield "auth_unauthorized", frame(OP["AUTH"], b"authentication failed", 2, RESPONSE,
                                     status=7)
    gid = bytes(10) + b"\xff\xff" + bytes([10, 0, 0, 8])
    yield "rdma_connect_req", frame(OP["RDMA_CONNECT"], qp_info(0x123456, 5, 16, gid, "rxe0"), 11)
    yield "rdma_connect_resp", frame(OP["RDMA_CONNECT"], rdma_connect_resp(), 11, RESPONSE)
    releases = struct.pack("<HQQ", 2, 40, 41)
    yield "rdma_get_req", frame(OP["RDMA_GET"], get_req + releases, 12)
    yield "rdma_get_req_plain", frame(OP["RDMA_GET"], get_req + struct.pack("<H", 0), 13)
    yield "rdma_release_req", frame(OP["RDMA_GET"], s("") + struct.pack("<IIIIHQ", 0, 0, 0, 0,
                                                                          1, 42), 14)
    yield "rdma_release_resp", frame(OP["RDMA_GET"], b"", 14, RESPONSE)
    chunks = [(0, bytes(range(16)), 16), (1, b"\x40abcd", 64)]
    yield "rdma_get_resp", frame(OP["RDMA_GET"], rdma_get_resp(chunks), 12, RESPONSE)
    yield "rdma_get_resp_inline", frame(OP["RDMA_GET"], rdma_get_resp(chunks, True), 13,
                                        RESPONSE)
    yield "rdma_connect_unsupported", frame(OP["RDMA_CONNECT"], b"", 11, RESPONSE, status=10)
    yield "rdma_get_unsupported", frame(OP["RDMA_GET"], b"", 12, RESPONSE, status=10)
    yield "version_mismatch", frame(OP["HELLO"], b"need version 1", 0, RESPONSE, status=6)
    peer_req = struct.pack("<H", 4) + b"imgs" + struct.pack("<IIQQI", 3, 1, 0x0123456789ABCDEF, 0, 4096)
    yield "peer_read_req", frame(OP["PEER_READ"], peer_req, 13)
    yield "peer_read_resp", frame(OP["PEER_READ"], bytes(range(256)) * 16, 13, RESPONSE)
    yield "peer_read_unavailable", frame(OP["PEER_READ"], b"shard not resident on this server", 14,
                                         RESPONSE, status=4)
    pipelined = (frame(OP["HELLO"], hello_req, 1) + frame(OP["GET"], get_req, 2) +
                 frame(OP["GET"], get_req, 3) + frame(OP["PING"], b"", 4))
    yield "pipelined_requests", pipelined
    yield "pipelined_responses", (frame(OP["GET"], resp, 3, RESPONSE) +
                                  frame(OP["PING"], b"", 4, RESPONSE) +
                                  frame(OP["GET"], resp, 2, RESPONSE))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    for name, data in seeds():
        with open(os.path.join(here, name + ".bin"), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
