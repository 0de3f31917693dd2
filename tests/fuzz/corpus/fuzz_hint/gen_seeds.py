#!/usr/bin/env python3
"""Writes HINT seeds (proto/PROTOCOL.md, HINT request), laid out independently of the C encoder:
the bodies for fuzz_hint here, and whole frames for fuzz_frame beside it (which test_protocol
decodes, so every opcode has a seed).
Run: python3 tests/fuzz/corpus/fuzz_hint/gen_seeds.py
"""
import os
import struct

MAGIC = 0x50435344
HINT = 10


def body(hinter, dataset, ranges, flags=0):
    name = dataset.encode()
    out = struct.pack("<IQH", flags, hinter, len(name)) + name + struct.pack("<I", len(ranges))
    for shard, first, count, due in ranges:
        out += struct.pack("<IIII", shard, first, count, due)
    return out


def frame(opcode, data=b"", request_id=1, flags=0):
    return struct.pack("<IBBHIQI", MAGIC, 1, opcode, flags, 0, request_id, len(data)) + data


SEEDS = {
    "hint_one": body(0x1122334455667788, "c4-en", [(7, 2, 3, 0)]),
    "hint_many": body(42, "imagenet", [(i % 5, i * 3, 1 + i % 16, 20 * i) for i in range(40)]),
    "hint_edges": body(0, "x", [(0xFFFFFFFF, 0xFFFFFFC0, 64, 600000), (0, 0, 1, 0)]),
    "hint_answer": struct.pack("<I", 3),
    "hint_identify": body(99, "imagenet", []),
}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    for name, data in SEEDS.items():
        with open(os.path.join(here, name + ".bin"), "wb") as f:
            f.write(data)
    frames = os.path.join(os.path.dirname(here), "fuzz_frame")
    with open(os.path.join(frames, "hint_req.bin"), "wb") as f:
        f.write(frame(HINT, SEEDS["hint_one"], request_id=(1 << 63) | 5))
    with open(os.path.join(frames, "hint_resp.bin"), "wb") as f:
        f.write(frame(HINT, SEEDS["hint_answer"], request_id=(1 << 63) | 5, flags=1))


if __name__ == "__main__":
    main()
