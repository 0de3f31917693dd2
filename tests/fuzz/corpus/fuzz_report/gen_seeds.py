#!/usr/bin/env python3
"""Writes REPORT seeds (proto/PROTOCOL.md, REPORT request), laid out independently of the C
encoder: the bodies for fuzz_report here, and whole frames for fuzz_frame beside it (which
test_protocol decodes, so every opcode has a seed).
Run: python3 tests/fuzz/corpus/fuzz_report/gen_seeds.py
"""
import os
import struct

MAGIC = 0x50435344
REPORT = 9


def s(text):
    data = text.encode()
    return struct.pack("<H", len(data)) + data


def body(job, dataset, rank, world, stall_ppm, sps, bps, stage, verdict):
    return (struct.pack("<I", 0) + s(job) + s(dataset) +
            struct.pack("<IIIQQB", rank, world, stall_ppm, sps, bps, stage) + s(verdict))


def hedge(flags, hedges, won, hedge_bytes, wasted, marks, excused):
    """The straggler trailer (PROTOCOL.md, REPORT straggler trailer)."""
    return struct.pack("<IQQQQQQ", flags, hedges, won, hedge_bytes, wasted, marks, excused)


def frame(opcode, data=b"", request_id=1, flags=0):
    return struct.pack("<IBBHIQI", MAGIC, 1, opcode, flags, 0, request_id, len(data)) + data


SEEDS = {
    "report_decode": body("llama-7b", "c4-en", 3, 8, 412000, 51234, 420000000, 4,
                          "raise decode_threads from 2 to 4"),
    "report_none": body("job@host:1234", "imagenet", 0, 1, 3000, 9000, 1 << 30, 1, ""),
    "report_server": body("resnet/run-2", "imagenet", 7, 8, 1000000, 0, 0, 3,
                          "server 10.0.0.3:7070 answers 4.0x slower than the others"),
    "report_hedge": body("llama-7b", "c4-en", 1, 4, 20000, 8000, 1 << 28, 1, "") +
    hedge(1, 40, 31, 5 << 20, 3 << 20, 2, 7),
    "report_hedge_later": body("j", "d", 0, 1, 0, 0, 0, 0, "") + hedge(0, 1, 1, 4096, 0, 1, 0) +
    b"\x01\x02\x03",
}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    for name, data in SEEDS.items():
        with open(os.path.join(here, name + ".bin"), "wb") as f:
            f.write(data)
    frames = os.path.join(os.path.dirname(here), "fuzz_frame")
    with open(os.path.join(frames, "report_req.bin"), "wb") as f:
        f.write(frame(REPORT, SEEDS["report_decode"], request_id=21))
    with open(os.path.join(frames, "report_resp.bin"), "wb") as f:
        f.write(frame(REPORT, b"", request_id=21, flags=1))


if __name__ == "__main__":
    main()
