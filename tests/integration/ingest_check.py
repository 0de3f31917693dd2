"""Compares an ingest_dump output directory with the sources ingest_sources.py writes.

    python3 ingest_check.py wds DUMP N EXT:FIELD ...
    python3 ingest_check.py megatron DUMP DOCS DTYPE SEQ_LEN     (SEQ_LEN 0: one per document)
    python3 ingest_check.py mds DUMP N
Exits 1 naming the first differing field and sample.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ingest_sources as S  # noqa: E402


def field(d, name):
    vals = open(f"{d}/{name}.bin", "rb").read()
    lens = np.frombuffer(open(f"{d}/{name}.len", "rb").read(), np.uint64)
    out, at = [], 0
    for n in lens:
        out.append(vals[at:at + int(n)])
        at += int(n)
    return out


def main(argv):
    kind, d, args = argv[0], argv[1], argv[2:]
    bad = []

    def same(what, got, want):
        if len(got) != len(want):
            bad.append(f"{what}: {len(got)} samples read back, {len(want)} expected")
        else:
            for i, (a, b) in enumerate(zip(got, want)):
                if a != b:
                    bad.append(f"{what}: sample {i}: {a[:16]!r}... != {b[:16]!r}...")
                    break

    if kind == "wds":
        n = int(args[0])
        src = S.wds_samples(n)
        want = {"jpg": [s["jpg"] for s in src],
                "cls": [np.int64(s["cls"]).tobytes() for s in src],
                "npy": [s["npy"].tobytes() for s in src],
                "txt": [s["txt"] for s in src]}
        for spec in args[1:]:
            ext, name = spec.split(":")
            same(name, field(d, name), want[ext])
    elif kind == "megatron":
        docs, dtype, seq = int(args[0]), args[1], int(args[2])
        src = S.megatron_docs(docs, dtype)
        if seq == 0:
            same("tokens", field(d, "tokens"), [doc.tobytes() for doc in src])
        else:
            flat = np.concatenate(src)
            w = seq + 1
            same("tokens", field(d, "tokens"),
                 [flat[i * w:(i + 1) * w].tobytes() for i in range(len(flat) // w)])
    elif kind == "mds":
        src = S.mds_samples(int(args[0]))
        for col in S.MDS_COLUMNS:
            same(col, field(d, col), [S.mds_stored(col, s[col]) for s in src])
    for b in bad:
        print(b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
