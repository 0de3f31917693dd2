#!/usr/bin/env python3
"""Writes MGET seeds (proto/PROTOCOL.md, MGET), laid out independently of the C encoder: request
and answer bodies for fuzz_mget here, and whole frames for fuzz_frame beside it (which
test_protocol decodes, so every opcode has a seed).
Run: python3 tests/fuzz/corpus/fuzz_mget/gen_seeds.py
"""
import os
import struct

MAGIC = 0x50435344
MGET = 11
FLAG_VERSION = 1


def request(dataset, items, version=None):
    name = dataset.encode()
    flags = FLAG_VERSION if version is not None else 0
    out = struct.pack("<H", len(name)) + name + struct.pack("<I", flags)
    if version is not None:
        out += struct.pack("<Q", version)
    out += struct.pack("<I", len(items))
    for shard, chunk in items:
        out += struct.pack("<II", shard, chunk)
    return out


def entry(offset, first_sample, data, samples, codec=0, raw_len=None, raw_sum=0):
    raw_len = len(data) if raw_len is None else raw_len
    return struct.pack("<QQIIIBxxxQQ", offset, first_sample, len(data), raw_len, samples, codec,
                       0x0123456789ABCDEF, raw_sum)


def answer(records):
    """records: (status, entry bytes, stored bytes) for OK, (status,) otherwise."""
    out = struct.pack("<II", len(records), 0)
    data = b""
    for rec in records:
        if rec[0] == 0:
            out += struct.pack("<II", 0, 0) + rec[1]
            data += rec[2]
        else:
            out += struct.pack("<II", rec[0], 0) + bytes(48)
    return out + data


A = b"abcdefgh" * 4
B = b"\x01\x02\x03"
SEEDS = {
    "mget_req_one": request("imagenet", [(3, 7)]),
    "mget_req_many": request("c4-en", [(i % 7, (i * 13) % 50) for i in range(64)]),
    "mget_req_version": request("x", [(0, 0), (0, 0), (0xFFFFFFFF, 0xFFFFFFFF)],
                                version=0x1122334455667788),
    "mget_resp_mixed": answer([(0, entry(4096, 0, A, 4), A), (1,), (0, entry(64, 10, B, 1, codec=1,
                                                                             raw_len=40), B),
                               (2,), (5,)]),
    "mget_resp_all_missing": answer([(1,), (4,)]),
}


def frame(opcode, data=b"", request_id=1, flags=0):
    return struct.pack("<IBBHIQI", MAGIC, 1, opcode, flags, 0, request_id, len(data)) + data


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    for name, data in SEEDS.items():
        with open(os.path.join(here, name + ".bin"), "wb") as f:
            f.write(data)
    frames = os.path.join(os.path.dirname(here), "fuzz_frame")
    with open(os.path.join(frames, "mget_req.bin"), "wb") as f:
        f.write(frame(MGET, SEEDS["mget_req_many"], request_id=9))
    with open(os.path.join(frames, "mget_resp.bin"), "wb") as f:
        f.write(frame(MGET, SEEDS["mget_resp_mixed"], request_id=9, flags=1))


if __name__ == "__main__":
    main()
