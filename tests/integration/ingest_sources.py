"""Writes the source data of the ingest tests (WebDataset tars, a Megatron indexed dataset, an
MDS dataset) from a seed, and returns the values each sample must have once ingested, so a test
compares what dscache stored with what it wrote. Follows each format's published layout; needs
only numpy (and the zstd command for compressed MDS shards).

    python3 ingest_sources.py wds DIR [--tars N] [--samples N] [--damage KIND]
    python3 ingest_sources.py megatron PREFIX [--docs N] [--dtype uint16|int32] [--damage KIND]
    python3 ingest_sources.py mds DIR [--samples N] [--zstd] [--damage KIND]
    python3 ingest_sources.py hostile-wds FILE.tar.zst --mib N   (sample s000001 holds N MiB)
    python3 ingest_sources.py hostile-mds DIR --mib N   (zstd; dataset sample 1 declares N MiB)
    python3 ingest_sources.py hostile-megatron PREFIX --mib N   (document 1 declares N MiB; the
                                                                 .bin is sparse)

The hostile ones are small files that declare (and decompress to) a huge member or sample; they
are streamed through the zstd command, never held.
"""
import io
import json
import os
import struct
import subprocess
import sys
import tarfile

import numpy as np


# ---- WebDataset ---------------------------------------------------------------------------

def wds_samples(n, seed=1):
    """n samples: jpg (random bytes, 1..300), cls (int), npy (float32 [rows, 4], rows 1..5),
    txt (a caption), each as the bytes the tar holds and the value dscache must store."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        jpg = rng.integers(0, 256, int(rng.integers(1, 300)), dtype=np.uint8).tobytes()
        cls = int(rng.integers(-5, 1000))
        arr = rng.standard_normal((int(rng.integers(1, 6)), 4)).astype(np.float32)
        txt = ("caption %d " % i + "x" * int(rng.integers(0, 20))).encode()
        out.append({"key": "s%06d" % i, "jpg": jpg, "cls": cls, "npy": arr, "txt": txt})
    return out


def npy_bytes(arr):
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def add_member(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write_wds(directory, tars=2, samples=50, damage=None, seed=1):
    os.makedirs(directory, exist_ok=True)
    data = wds_samples(samples, seed)
    paths = []
    per = (samples + tars - 1) // tars
    for t in range(tars):
        path = os.path.join(directory, "shard-%03d.tar" % t)
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
            for i, s in enumerate(data[t * per:(t + 1) * per]):
                index = t * per + i
                k = s["key"]
                add_member(tar, k + ".jpg", s["jpg"])
                if not (damage == "missing" and index == 7):
                    add_member(tar, k + ".cls", b"%d" % s["cls"] if not (
                        damage == "badcls" and index == 9) else b"not-a-number")
                npy = s["npy"]
                if damage == "dtype" and index == 11:
                    npy = npy.astype(np.float64)
                add_member(tar, k + ".npy", npy_bytes(npy))
                add_member(tar, k + ".txt", s["txt"])
        paths.append(path)
    if damage == "truncated":
        raw = open(paths[-1], "rb").read()
        open(paths[-1], "wb").write(raw[:len(raw) // 2 + 100])
    return paths, data


# ---- Megatron indexed dataset (MMIDIDX) ---------------------------------------------------

MEGATRON_CODES = {"uint8": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "float64": 6,
                  "float32": 7, "uint16": 8}


def megatron_docs(n, dtype="uint16", seed=2):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 30000, int(rng.integers(1, 40))).astype(dtype) for _ in range(n)]


def write_megatron(prefix, docs=40, dtype="uint16", damage=None, seed=2):
    documents = megatron_docs(docs, dtype, seed)
    # documents 3 and 4 hold two sequences each (sentence-split data), the rest one
    seqs, doc_index = [], [0]
    for d, doc in enumerate(documents):
        if d in (3, 4) and len(doc) > 1:
            seqs += [doc[:len(doc) // 2], doc[len(doc) // 2:]]
        else:
            seqs.append(doc)
        doc_index.append(len(seqs))
    itemsize = np.dtype(dtype).itemsize
    lengths = [len(s) for s in seqs]
    pointers, p = [], 0
    for n in lengths:
        pointers.append(p)
        p += n * itemsize
    if damage == "bigsize":
        lengths[-1] += 1000  # the index promises more tokens than the .bin holds
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", MEGATRON_CODES[dtype]))
        f.write(struct.pack("<Q", len(seqs)))
        f.write(struct.pack("<Q", len(doc_index)))
        f.write(np.array(lengths, np.int32).tobytes())
        f.write(np.array(pointers, np.int64).tobytes())
        f.write(np.array(doc_index, np.int64).tobytes())
    with open(prefix + ".bin", "wb") as f:
        for s in seqs:
            f.write(s.tobytes())
    if damage == "shortbin":
        raw = open(prefix + ".bin", "rb").read()
        open(prefix + ".bin", "wb").write(raw[:-7])
    return documents


# ---- MosaicML Streaming MDS ---------------------------------------------------------------

MDS_COLUMNS = {"image": "jpeg", "label": "int", "small": "uint8", "score": "float32",
               "text": "str", "blob": "bytes", "vec": "ndarray:int16:2,3", "half": "float16",
               "big": "int64", "count": "uint32", "feat": "ndarray:float32", "any": "ndarray"}
MDS_SIZES = {"int": 8, "uint8": 1, "float32": 4, "ndarray:int16:2,3": 12, "float16": 2,
             "int64": 8, "uint32": 4}


def mds_samples(n, seed=3):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        out.append({
            "image": b"\xff\xd8" + rng.integers(0, 256, int(rng.integers(0, 200)),
                                                 dtype=np.uint8).tobytes(),
            "label": np.int64(rng.integers(-2**40, 2**40)),
            "small": np.uint8(rng.integers(0, 256)),
            "score": np.float32(rng.standard_normal()),
            "text": ("text %d " % i + "y" * int(rng.integers(0, 30))).encode(),
            "blob": rng.integers(0, 256, int(rng.integers(0, 50)), dtype=np.uint8).tobytes(),
            "vec": rng.integers(-999, 999, (2, 3)).astype(np.int16),
            "half": np.float16(rng.standard_normal()),
            "big": np.int64(rng.integers(-2**62, 2**62)),
            "count": np.uint32(rng.integers(0, 2**32)),
            "feat": rng.standard_normal((int(rng.integers(1, 5)), 3)).astype(np.float32),
            "any": rng.integers(-9, 9, int(rng.integers(1, 300))).astype(np.int32),
        })
    return out


NDARRAY_DTYPE_CODES = {"uint8": 8, "int8": 9, "uint16": 16, "int16": 17, "float16": 18,
                       "uint32": 32, "int32": 33, "float32": 34, "uint64": 64, "int64": 65,
                       "float64": 66}


def mds_encode(name, value):
    """The bytes MDSWriter stores for column `name` (Streaming's NDArray layout for a dynamic
    ndarray: [dtype code] [ndim << 2 | shape width] [shape] [values])."""
    if isinstance(value, bytes):
        return value
    enc = MDS_COLUMNS[name]
    if enc in ("ndarray", "ndarray:" + value.dtype.name):
        head = b"" if enc != "ndarray" else bytes([NDARRAY_DTYPE_CODES[value.dtype.name]])
        shape = np.array(value.shape, np.int64)
        width = 0 if shape.max() < 256 else 1 if shape.max() < 65536 else 2
        head += bytes([(value.ndim << 2) | width])
        head += shape.astype(["uint8", "uint16", "uint32"][width]).tobytes()
        return head + value.tobytes()
    return np.asarray(value).tobytes()


def mds_stored(name, value):
    """What dscache stores for that column: the encoded bytes, or an ndarray's values."""
    if isinstance(value, bytes):
        return value
    return np.asarray(value).tobytes()


def write_mds(directory, samples=60, per_shard=25, zstd=False, damage=None, seed=3):
    os.makedirs(directory, exist_ok=True)
    data = mds_samples(samples, seed)
    names = sorted(MDS_COLUMNS)
    encodings = [MDS_COLUMNS[k] for k in names]
    sizes = [MDS_SIZES.get(e) for e in encodings]
    config = {"version": 2, "format": "mds", "compression": "zstd:3" if zstd else None,
              "hashes": [], "size_limit": 1 << 26, "column_names": names,
              "column_encodings": encodings, "column_sizes": sizes}
    config_data = json.dumps(config, sort_keys=True).encode()
    shards = []
    for s, first in enumerate(range(0, samples, per_shard)):
        encoded = []
        for index, sample in enumerate(data[first:first + per_shard], start=first):
            head = [len(mds_encode(k, sample[k])) for k, size in zip(names, sizes) if size is None]
            body = b"".join(mds_encode(k, sample[k]) for k in names)
            if damage == "badsample" and index == 30:
                body = body[:-3]  # the sample's sizes no longer add up
            encoded.append(np.array(head, np.uint32).tobytes() + body)
        count = np.uint32(len(encoded))
        offsets = np.array([0] + [len(e) for e in encoded]).cumsum().astype(np.uint32)
        offsets += 4 + len(offsets) * 4 + len(config_data)
        raw = count.tobytes() + offsets.tobytes() + config_data + b"".join(encoded)
        raw_name = "shard.%05d.mds" % s
        info = {"samples": len(encoded), "raw_data": {"basename": raw_name, "bytes": len(raw),
                                                      "hashes": {}}, "zip_data": None}
        if zstd:
            packed = subprocess.run(["zstd", "-q", "-3", "-c"], input=raw, check=True,
                                    stdout=subprocess.PIPE).stdout
            if damage == "badzstd" and s == 1:
                packed = packed[:len(packed) // 2] + bytes(64) + packed[len(packed) // 2 + 64:]
            info["zip_data"] = {"basename": raw_name + ".zstd", "bytes": len(packed),
                                "hashes": {}}
            open(os.path.join(directory, raw_name + ".zstd"), "wb").write(packed)
        else:
            if damage == "truncated" and s == 1:
                raw = raw[:len(raw) - 40]
            open(os.path.join(directory, raw_name), "wb").write(raw)
        info.update(config)
        shards.append(info)
    with open(os.path.join(directory, "index.json"), "w") as f:
        json.dump({"version": 2, "shards": shards}, f, sort_keys=True)
    return data


# ---- Hostile: small files that decompress to huge members ----------------------------------

class _Zeros(io.RawIOBase):
    def __init__(self, n):
        self.left = n

    def readable(self):
        return True

    def readinto(self, b):
        k = min(len(b), self.left)
        b[:k] = bytes(k)
        self.left -= k
        return k


def _zstd_writer(path, size=None):
    """A zstd process compressing its stdin into path; size: the content size written in the
    frame header (as a one-shot compression writes it)."""
    out = open(path, "wb")
    args = ["zstd", "-q", "-3", "-c"] + (["--stream-size=%d" % size] if size is not None else [])
    return subprocess.Popen(args, stdin=subprocess.PIPE, stdout=out), out


def write_hostile_wds(path, mib):
    """Three samples: s000000 and s000002 small, s000001's .bin N MiB of zeros (a .tar.zst of a
    few KiB)."""
    proc, out = _zstd_writer(path)
    with tarfile.open(fileobj=proc.stdin, mode="w|", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(3):
            key = "s%06d" % i
            for ext, data in (("cls", str(i).encode()), ("bin", b"x" * 10)):
                ti = tarfile.TarInfo("%s.%s" % (key, ext))
                if i == 1 and ext == "bin":
                    ti.size = mib << 20
                    tar.addfile(ti, _Zeros(ti.size))
                else:
                    ti.size = len(data)
                    tar.addfile(ti, io.BytesIO(data))
    proc.stdin.close()
    proc.wait()
    out.close()


def write_hostile_mds(directory, mib):
    """One zstd shard of 3 samples (columns blob:bytes, label:int); sample 1's blob N MiB of
    zeros, so the offset table declares it N MiB and a bit."""
    os.makedirs(directory, exist_ok=True)
    names, encodings, sizes = ["blob", "label"], ["bytes", "int"], [None, 8]
    config = {"version": 2, "format": "mds", "compression": "zstd:19", "hashes": [],
              "size_limit": 1 << 26, "column_names": names, "column_encodings": encodings,
              "column_sizes": sizes}
    config_data = json.dumps(config, sort_keys=True).encode()
    blobs = [10, mib << 20, 10]
    lengths = [4 + b + 8 for b in blobs]
    first = 4 + 4 * (len(blobs) + 1) + len(config_data)
    offsets = [first]
    for n in lengths:
        offsets.append(offsets[-1] + n)
    raw_bytes = offsets[-1]
    name = "shard.00000.mds"
    proc, out = _zstd_writer(os.path.join(directory, name + ".zstd"), raw_bytes)
    w = proc.stdin
    w.write(struct.pack("<I", len(blobs)) + struct.pack("<%dI" % len(offsets), *offsets))
    w.write(config_data)
    for i, b in enumerate(blobs):
        w.write(struct.pack("<I", b))
        left = b
        while left > 0:
            k = min(left, 1 << 20)
            w.write(bytes(k))
            left -= k
        w.write(struct.pack("<q", i))
    w.close()
    proc.wait()
    out.close()
    info = {"samples": len(blobs), "raw_data": {"basename": name, "bytes": raw_bytes, "hashes": {}},
            "zip_data": {"basename": name + ".zstd",
                         "bytes": os.path.getsize(os.path.join(directory, name + ".zstd")),
                         "hashes": {}}}
    info.update(config)
    with open(os.path.join(directory, "index.json"), "w") as f:
        json.dump({"version": 2, "shards": [info]}, f, sort_keys=True)


def write_hostile_megatron(prefix, mib):
    """Three uint16 documents of one sequence; document 1 declares N MiB (the .bin sparse)."""
    lengths = [5, (mib << 20) // 2, 5]
    pointers = [0, 10, 10 + (mib << 20)]
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, MEGATRON_CODES["uint16"], 3, 4))
        f.write(np.array(lengths, np.int32).tobytes())
        f.write(np.array(pointers, np.int64).tobytes())
        f.write(np.array([0, 1, 2, 3], np.int64).tobytes())
    with open(prefix + ".bin", "wb") as f:
        f.truncate(pointers[-1] + 10)


def main(argv):
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["wds", "megatron", "mds", "hostile-wds", "hostile-mds",
                                     "hostile-megatron"])
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("path")
    ap.add_argument("--tars", type=int, default=2)
    ap.add_argument("--samples", type=int, default=50)
    ap.add_argument("--docs", type=int, default=40)
    ap.add_argument("--dtype", default="uint16")
    ap.add_argument("--zstd", action="store_true")
    ap.add_argument("--damage")
    a = ap.parse_args(argv)
    if a.kind == "hostile-megatron":
        write_hostile_megatron(a.path, a.mib)
    elif a.kind == "hostile-wds":
        write_hostile_wds(a.path, a.mib)
    elif a.kind == "hostile-mds":
        write_hostile_mds(a.path, a.mib)
    elif a.kind == "wds":
        write_wds(a.path, a.tars, a.samples, a.damage)
    elif a.kind == "megatron":
        write_megatron(a.path, a.docs, a.dtype, a.damage)
    else:
        write_mds(a.path, a.samples, zstd=a.zstd, damage=a.damage)


if __name__ == "__main__":
    main(sys.argv[1:])
