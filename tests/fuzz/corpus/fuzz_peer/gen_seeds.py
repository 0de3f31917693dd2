#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_peer (PEER_READ request bodies, proto/peer.h) beside this file."""
import os
import struct

here = os.path.dirname(os.path.abspath(__file__))


def req(name, shard, flags, version, offset, length):
    return struct.pack("<H", len(name)) + name + struct.pack("<IIQQI", shard, flags, version, offset, length)


seeds = {
    "peer_whole.bin": req(b"imgs", 3, 1, 0x1234567890ABCDEF, 0, 8 << 20),
    "peer_tail.bin": req(b"clds", 0, 0, 0, 123456, 100),
    "peer_longname.bin": req(b"n" * 63, 0xFFFFFFFF, 1, 1, (1 << 63) - 1, 1),
    "peer_zero_len.bin": req(b"x", 0, 0, 0, 0, 0),
    "peer_bad_flags.bin": req(b"x", 0, 2, 0, 0, 1),
}
for name, body in seeds.items():
    with open(os.path.join(here, name), "wb") as f:
        f.write(body)
