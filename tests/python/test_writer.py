"""dscache.Writer: the Hugging Face five lines of docs/ingest.md run on a list of dicts with a
variable-length input_ids, read back with shard_dump (values and offsets) and compared; the
same through write_batch; fixed and variable fields with numpy, lists, bytes, torch tensors
and tuples; an exception inside `with` leaves nothing; dtype, shape and missing-field errors are
ValueErrors (dscache.InvalidOption) naming the field and the record; the dataset serves from
dscached and `dscache inspect` verifies it."""
import errno
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

te.require_tools()
import numpy as np  # noqa: E402
import dscache  # noqa: E402

env = te.Env()
t = te.Checks()
rng = np.random.default_rng(18)


def dump(path):
    """{field: values} and {field: offsets} of a dataset, decoded by shard_dump."""
    out = os.path.join(env.dir, "dump-" + os.path.basename(path))
    os.makedirs(out, exist_ok=True)
    subprocess.run([os.path.join(te.BIN, "shard_dump"), path, out], check=True,
                   stdout=subprocess.DEVNULL)
    manifest = json.load(open(os.path.join(path, "manifest.json")))
    values, offsets = {}, {}
    for f in manifest["schema"]:
        dt = np.dtype({"u8": "uint8", "i8": "int8", "u16": "uint16", "i16": "int16",
                       "u32": "uint32", "i32": "int32", "i64": "int64", "f16": "float16",
                       "bf16": "uint16", "f32": "float32", "f64": "float64"}[f["dtype"]])
        values[f["name"]] = np.fromfile(os.path.join(out, f["name"] + ".bin"), dtype=dt)
        op = os.path.join(out, f["name"] + ".offsets.bin")
        if os.path.exists(op):
            offsets[f["name"]] = np.fromfile(op, dtype=np.int64)
    return manifest, values, offsets


# ---- The five lines, on a list of dicts (what a Hugging Face dataset yields) ---------------
N = 500
ds = [{"input_ids": rng.integers(0, 50000, rng.integers(0, 40)).tolist(),
       "label": int(rng.integers(0, 5)), "text": "ignored"} for _ in range(N)]
path = os.path.join(env.dir, "sft")

import dscache  # noqa: E402,F811  (the five lines, as docs/ingest.md shows them)
with dscache.Writer(path, name="sft", compress="lz4",
                    fields={"input_ids": "i32[]", "label": "i64"}) as w:
    for rec in ds:
        w.write(rec)

t.check(w.stats["samples"] == N, "stats samples")
manifest, values, offsets = dump(path)
t.check(manifest["version"] == 2, "manifest version 2")
t.check(manifest["schema"][0]["shape"] == [None], "input_ids shape [null]")
want_ids = np.concatenate([np.asarray(r["input_ids"], dtype=np.int32) for r in ds])
want_off = np.concatenate([[0], np.cumsum([len(r["input_ids"]) for r in ds])])
t.check(np.array_equal(values["input_ids"], want_ids), "input_ids values")
t.check(np.array_equal(offsets["input_ids"], want_off), "input_ids offsets")
t.check(np.array_equal(values["label"], [r["label"] for r in ds]), "labels")
lens = [len(r["input_ids"]) for r in ds]
st = manifest["schema"][0]
t.check(st["rows_total"] == sum(lens) and st["rows_max"] == max(lens), "statistics")
t.check(abs(st["bytes_mean"] - 4 * sum(lens) / N) < 1e-6, "bytes_mean")

# The same records through write_batch give the same dataset (all but the name in the headers).
path_b = os.path.join(env.dir, "sfb")
with dscache.Writer(path_b, fields={"input_ids": "i32[]", "label": "i64"}) as w:
    w.write_batch({"input_ids": [r["input_ids"] for r in ds[:123]],
                   "label": [r["label"] for r in ds[:123]]})
    ids = [np.asarray(r["input_ids"], dtype=np.int32) for r in ds[123:]]
    off = np.concatenate([[0], np.cumsum([len(x) for x in ids])])
    w.write_batch({"input_ids": (np.concatenate(ids), off),
                   "label": np.array([r["label"] for r in ds[123:]])})
_, vb, ob = dump(path_b)
t.check(np.array_equal(vb["input_ids"], want_ids) and np.array_equal(ob["input_ids"], want_off),
        "write_batch: same values and offsets")

# ---- All kinds of fields and values ---------------------------------------------------------
import torch  # noqa: E402

path_m = os.path.join(env.dir, "mixed")
M = 64
mel = [rng.standard_normal((int(rng.integers(0, 5)), 80)).astype(np.float32) for _ in range(M)]
img = rng.integers(0, 256, (M, 3, 32, 32), dtype=np.uint8)
jpeg = [bytes(rng.integers(0, 256, int(rng.integers(1, 300)), dtype=np.uint8)) for _ in range(M)]
with dscache.Writer(path_m, fields={"mel": "f32[?,80]", "image": "u8[3,32,32]", "label": "i64",
                                    "jpeg": "u8[]", "w": ("float16", (2,))},
                    meta={"classes": ["cat", "dog"]}, threads=2, chunk_bytes=8192) as w:
    for i in range(M):
        rec = (torch.from_numpy(mel[i]), img[i], np.int64(i), jpeg[i], [0.5, i])
        w.write(rec if i % 2 else dict(zip(["mel", "image", "label", "jpeg", "w"], rec)))
manifest, v, o = dump(path_m)
t.check(manifest["meta"] == {"classes": ["cat", "dog"]}, "meta kept")
t.check(np.array_equal(v["mel"], np.concatenate(mel).ravel()), "mel values")
t.check(np.array_equal(o["mel"], np.concatenate([[0], np.cumsum([len(m) for m in mel])])),
        "mel offsets (rows)")
t.check(np.array_equal(v["image"], img.ravel()), "image")
t.check(np.array_equal(v["jpeg"], np.frombuffer(b"".join(jpeg), np.uint8)), "jpeg bytes")
t.check(np.array_equal(v["w"].reshape(M, 2)[:, 1], np.arange(M, dtype=np.float16)), "f16 cast")
out = subprocess.run([os.path.join(te.BIN, "dscache"), "inspect", path_m], capture_output=True,
                     text=True)
t.check(out.returncode == 0 and "verified" in out.stdout and "[?, 80]" in out.stdout,
        "inspect: " + out.stdout + out.stderr)

# Fixed fields only stay version 1 and load with the Loader (through dscached).
path_f = os.path.join(env.dir, "fixed")
X = rng.standard_normal((300, 4, 4)).astype(np.float32)
with dscache.Writer(path_f, fields={"x": "f32[4,4]", "y": "i64"}) as w:
    w.write_batch({"x": X[:100], "y": np.arange(100)})
    for i in range(100, 300):
        w.write({"x": X[i], "y": i})
t.check(json.load(open(os.path.join(path_f, "manifest.json")))["version"] == 1, "fixed: version 1")
_, addr = env.start_server(path_f)
ld = dscache.Loader(servers=[addr], dataset="fixed", batch_size=50, shuffle=False)
got = np.concatenate([b["x"] for b in ld])
t.check(np.array_equal(got, X), "fixed dataset through dscached and the Loader")
del ld

# ---- Errors ----------------------------------------------------------------------------------


def expect_error(fn, *words):
    try:
        fn()
    except ValueError as e:
        t.check(isinstance(e, dscache.InvalidOption), "InvalidOption: %r" % e)
        t.check(all(wd in str(e) for wd in words), "message %r lacks %r" % (str(e), words))
        return
    t.check(False, "no error for %r" % (words,))


def in_writer(records, fields=None, batch=None):
    p = os.path.join(env.dir, "err")

    def run():
        with dscache.Writer(p, fields=fields or {"ids": "i32[]", "img": "u8[2,2]"}) as w:
            for r in records:
                w.write(r)
            if batch is not None:
                w.write_batch(batch)
    return run


good = {"ids": [1, 2], "img": np.zeros((2, 2), np.uint8)}
expect_error(in_writer([good, {"ids": [1]}]), "record 1", "'img'")                # missing
expect_error(in_writer([good, good, {"ids": [1], "img": np.zeros((2, 3), np.uint8)}]),
             "field 'img' of record 2", "shape (2, 3)")                           # shape
expect_error(in_writer([{"ids": [1.5], "img": good["img"]}]), "field 'ids' of record 0",
             "float64")                                                            # dtype
expect_error(in_writer([{"ids": [2**40], "img": good["img"]}]), "do not fit int32")
expect_error(in_writer([{"ids": [[1, 2]], "img": good["img"]}]), "field 'ids'", "shape")
expect_error(in_writer([{"ids": b"abcd", "img": good["img"]}]), "bytes")
expect_error(in_writer([(1, 2, 3)]), "record 0", "3 values")
expect_error(in_writer([], batch={"ids": [[1], [2]], "img": np.zeros((3, 2, 2), np.uint8)}),
             "has 2 records", "has 3")
expect_error(in_writer([], batch={"ids": (np.zeros(3, np.int32), [0, 2, 1, 3]),
                                  "img": np.zeros((3, 2, 2), np.uint8)}), "decrease")
expect_error(lambda: dscache.Writer(os.path.join(env.dir, "x"), fields={"a": "i32[3,?]"}),
             "'a'", "variable")
expect_error(lambda: dscache.Writer(os.path.join(env.dir, "x"), fields={"a": "q8"}), "dtype")
expect_error(lambda: dscache.Writer(os.path.join(env.dir, "x"), fields={"a": "u8"},
                                    compress="zstd"), "zstd")
t.check(not os.path.exists(os.path.join(env.dir, "err")), "a failed with-block left err/")
t.check(not any(n.startswith(".") for n in os.listdir(env.dir)),
        "temporary directories left: %s" % os.listdir(env.dir))

# An exception of the caller's inside `with` aborts: nothing appears.
try:
    with dscache.Writer(os.path.join(env.dir, "boom"), fields={"a": "u8[]"}) as w:
        for i in range(1000):
            w.write({"a": b"x" * i})
        raise KeyboardInterrupt
except KeyboardInterrupt:
    pass
t.check(not os.path.exists(os.path.join(env.dir, "boom")), "exception inside with left boom/")
t.check(not any(n.startswith(".") for n in os.listdir(env.dir)), "temporary directory left")
# progress=True draws a progress line on stderr (by default only when stderr is a terminal).
import io  # noqa: E402
saved, sys.stderr = sys.stderr, io.StringIO()
try:
    with dscache.Writer(os.path.join(env.dir, "prog"), fields={"a": "u8[]"}, progress=True) as w:
        for i in range(10):
            w.write({"a": b"x" * i})
    drawn = sys.stderr.getvalue()
finally:
    sys.stderr = saved
t.check("writing " in drawn and "10 records" in drawn, "progress line: %r" % drawn)
saved, sys.stderr = sys.stderr, io.StringIO()
try:
    with dscache.Writer(os.path.join(env.dir, "quiet"), fields={"a": "u8[]"}) as w:
        w.write({"a": b"x"})
    drawn = sys.stderr.getvalue()
finally:
    sys.stderr = saved
t.check(drawn == "", "no progress line when stderr is not a terminal: %r" % drawn)

# An existing path is refused (not overwritten).
try:
    dscache.Writer(path, fields={"a": "u8"})
    t.check(False, "an existing path was accepted")
except FileExistsError as e:
    t.check("exists" in str(e), "FileExistsError message: %s" % e)
    t.check(path in str(e) and "replace=True" in str(e),
            "the message names the directory and replace=True: %s" % e)

# replace=True swaps a new dataset in whole; a directory holding other files is refused.
rdir = os.path.join(env.dir, "replaced")
with dscache.Writer(rdir, fields={"a": "u8[8]"}) as w:
    for i in range(30):
        w.write({"a": np.full(8, i, np.uint8)})
before = json.load(open(os.path.join(rdir, "manifest.json")))
try:
    dscache.Writer(rdir, fields={"b": "i64"})
    t.check(False, "an existing dataset was accepted without replace=True")
except FileExistsError as e:
    t.check("replace=True" in str(e) and rdir in str(e), "names replace=True: %s" % e)
t.check(json.load(open(os.path.join(rdir, "manifest.json"))) == before, "a refusal changes nothing")
with dscache.Writer(rdir, fields={"b": "i64"}, replace=True) as w:
    for i in range(7):
        w.write({"b": i})
after = json.load(open(os.path.join(rdir, "manifest.json")))
t.check(after["samples"] == 7 and after["schema"][0]["name"] == "b", "replaced: %s" % after)
t.check(sorted(os.listdir(rdir)) == ["manifest.json", "shard-00000.dsc"],
        "only the new dataset's files: %s" % os.listdir(rdir))
t.check(not [n for n in os.listdir(env.dir) if n.startswith(".replaced.")],
        "nothing left beside it: %s" % os.listdir(env.dir))
open(os.path.join(rdir, "notes.txt"), "w").write("mine")
try:
    dscache.Writer(rdir, fields={"b": "i64"}, replace=True)
    t.check(False, "a directory holding another file was replaced")
except OSError as e:
    t.check(e.errno == errno.ENOTEMPTY and "notes.txt" in str(e), "ENOTEMPTY naming it: %s" % e)
t.check(os.path.exists(os.path.join(rdir, "notes.txt")), "the other file stays")

sys.exit(t.done())
