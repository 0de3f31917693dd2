#!/usr/bin/env python3
"""Writes RANGE seeds (proto/PROTOCOL.md, RANGE), laid out independently of the C encoder: request
bodies for fuzz_range here, and whole frames for fuzz_frame beside it (which test_protocol
decodes, so every opcode has a seed). The answer has MGET's layout (fuzz_mget's seeds).
Run: python3 tests/fuzz/corpus/fuzz_range/gen_seeds.py
"""
import os
import struct

MAGIC = 0x50435344
RANGE = 12
FLAG_VERSION = 1


def request(dataset, items, version=None):
    """items: (shard, chunk, [(first, count), ...])."""
    name = dataset.encode()
    flags = FLAG_VERSION if version is not None else 0
    out = struct.pack("<H", len(name)) + name + struct.pack("<I", flags)
    if version is not None:
        out += struct.pack("<Q", version)
    out += struct.pack("<I", len(items))
    for shard, chunk, spans in items:
        out += struct.pack("<III", shard, chunk, len(spans))
        for first, count in spans:
            out += struct.pack("<II", first, count)
    return out


SEEDS = {
    "range_req_one": request("imagenet", [(3, 7, [(5, 1)])]),
    "range_req_many": request("c4-en", [(i % 7, (i * 13) % 50, [(i % 5, 2), (10 + i % 9, 3)])
                                        for i in range(32)]),
    "range_req_version": request("x", [(0, 0, [(0, 40)]), (0, 0, [(1, 1), (3, 1), (39, 1)]),
                                       (0xFFFFFFFF, 0xFFFFFFFF, [(0xFFFFFFFE, 1)])],
                                 version=0x1122334455667788),
    "range_req_past": request("x", [(1, 2, [(30, 20)])]),
}


def frame(opcode, data=b"", request_id=1, flags=0):
    return struct.pack("<IBBHIQI", MAGIC, 1, opcode, flags, 0, request_id, len(data)) + data


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    for name, data in SEEDS.items():
        with open(os.path.join(here, name + ".bin"), "wb") as f:
            f.write(data)
    frames = os.path.join(os.path.dirname(here), "fuzz_frame")
    with open(os.path.join(frames, "range_req.bin"), "wb") as f:
        f.write(frame(RANGE, SEEDS["range_req_many"], request_id=12))
    mget = os.path.join(os.path.dirname(here), "fuzz_mget", "mget_resp_mixed.bin")
    with open(mget, "rb") as src, open(os.path.join(frames, "range_resp.bin"), "wb") as f:
        f.write(frame(RANGE, src.read(), request_id=12, flags=1))


if __name__ == "__main__":
    main()
