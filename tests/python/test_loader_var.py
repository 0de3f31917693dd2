"""Variable-length fields in dscache.Loader (issue 18) over a real dscached: a format-version-2
dataset (tok i32[], mel f32[?,80], img u8[3,4,4], label i64) written by loader_var_check gen,
whose every value is a function of the sample index. numpy and torch outputs, values + offsets
(zero-copy views of the slot) and padded (pad=, max_len= truncating, counted in stats), 2 ranks
each sample once, and the error naming dataset, sample and option for a sample over its
max_bytes budget; and a dataset written by dscache.Writer from a list of dicts."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

te.require_tools()
if not os.path.exists(os.path.join(te.BIN, "loader_var_check")):
    te.skip("loader_var_check is not built")
import numpy as np  # noqa: E402
import dscache  # noqa: E402

env = te.Env()
t = te.Checks()
N = 150
ds_dir = os.path.join(env.dir, "pvar")
subprocess.run([os.path.join(te.BIN, "loader_var_check"), "gen", ds_dir, "pvar", str(N), "lz4"],
               check=True)
# The user's path too: dscache.Writer on a list of dicts with a variable-length input_ids (the
# Hugging Face five lines), served beside it.
rng = np.random.default_rng(5)
records = [{"input_ids": rng.integers(0, 50000, int(rng.integers(0, 40)), dtype=np.int32),
            "label": i % 7} for i in range(120)]
hf_dir = os.path.join(env.dir, "hf")
with dscache.Writer(hf_dir, name="hf", fields={"input_ids": "i32[]", "label": "i64"},
                    chunk_bytes=2048, meta={"classes": ["cat", "dog"]}) as w:
    for rec in records:
        w.write(rec)
_, addr = env.start_server(ds_dir, hf_dir)


# The formulas of loader_var_check.c.
def tok(i):
    return np.array([i * 1000 + j for j in range((i * 7) % 13)], dtype=np.int32)


def mel(i):
    r = np.arange(i % 5, dtype=np.float32)[:, None] * np.float32(0.5)
    c = np.arange(80, dtype=np.float32)[None, :] * np.float32(0.001)
    return (np.float32(i) + r + c).astype(np.float32)


def img(i):
    return ((i * 3 + np.arange(48)) & 0xff).astype(np.uint8).reshape(3, 4, 4)


def loader(**kw):
    args = dict(servers=addr, dataset="pvar", batch_size=8, seed=2, indices=True,
                shuffle_window=30)
    args.update(kw)
    return dscache.Loader(**args)


def np_(x):
    return x.numpy() if hasattr(x, "numpy") else np.asarray(x)


def check_values(batch, what):
    """values + offsets: byte-equal to the formulas; returns the batch's indices."""
    idx = [int(i) for i in np_(batch["__index__"])]
    to, mo = np_(batch["tok_offsets"]), np_(batch["mel_offsets"])
    tv, mv = np_(batch["tok"]), np_(batch["mel"])
    ok = (to.dtype == np.int64 and to.shape == (len(idx) + 1,) and to[0] == 0 and
          tv.dtype == np.int32 and tv.ndim == 1 and tv.shape[0] == to[-1] and
          mv.dtype == np.float32 and mv.shape == (mo[-1], 80))
    for k, i in enumerate(idx):
        ok = ok and np.array_equal(tv[to[k]:to[k + 1]], tok(i))
        ok = ok and np.array_equal(mv[mo[k]:mo[k + 1]].view(np.uint32), mel(i).view(np.uint32))
        ok = ok and np.array_equal(np_(batch["img"])[k], img(i))
        ok = ok and int(np_(batch["label"])[k]) == i * 11 - 5
    t.check(ok, what + ": values + offsets equal the written samples")
    return idx


# ---- numpy, values + offsets, zero-copy ------------------------------------------------------
ld = loader()
t.check(ld.meta is None, "no meta in the manifest: Loader.meta is None")
t.check(ld.fields[0] == ("tok", "int32", (None,)) and ld.fields[1] == ("mel", "float32",
                                                                       (None, 80)),
        "fields show the variable dimension as None: %r" % (ld.fields[:2],))
seen = []
for b in ld:
    seen += check_values(b, "numpy")
    t.check(not b["tok"].flags.owndata and not b["tok_offsets"].flags.owndata,
            "numpy values and offsets are views of the batch slot")
t.check(sorted(seen) == list(range(N)), "one epoch: every sample once")
ld.close()

# ---- 2 ranks: each sample exactly once (values), copy=True --------------------------------
seen = []
for r in range(2):
    with loader(rank=r, world_size=2, copy=True) as ld:
        for b in ld:
            t.check(b["tok"].flags.owndata, "copy=True gives copies")
            seen += check_values(b, "rank %d" % r)
t.check(sorted(seen) == list(range(N)), "2 ranks: every sample once")

# ---- padded, with max_len truncating ---------------------------------------------------------
with loader(pad={"tok": -1, "mel": 0.5}, max_len={"tok": 4}) as ld:
    cut = 0
    ok = True
    for b in ld:
        idx = [int(i) for i in b["__index__"]]
        tl, ml = b["tok_lengths"], b["mel_lengths"]
        tp, mp = b["tok"], b["mel"]
        ok = ok and tp.shape == (len(idx), int(tl.max())) and mp.shape == (len(idx),
                                                                             int(ml.max()), 80)
        ok = ok and "tok_offsets" not in b and tl.dtype == np.int64
        for k, i in enumerate(idx):
            want = tok(i)[:4]
            cut += len(tok(i)) > 4
            row = np.full(tp.shape[1], -1, dtype=np.int32)
            row[:len(want)] = want
            ok = ok and tl[k] == len(want) and np.array_equal(tp[k], row)
            m = np.full((mp.shape[1], 80), 0.5, dtype=np.float32)
            m[:ml[k]] = mel(i)
            ok = ok and ml[k] == i % 5 and np.array_equal(mp[k].view(np.uint32), m.view(np.uint32))
    t.check(ok, "padded: [B, L] to the batch's longest, pad values, lengths")
    t.check(cut > 0 and ld.stats()["truncated_samples"] == cut,
            "truncated_samples counts the samples cut to max_len: %d vs %d"
            % (ld.stats()["truncated_samples"], cut))

# ---- torch (DLPack), both modes ---------------------------------------------------------------
try:
    import torch
except ImportError:
    torch = None
if torch is None:
    print("SKIP (part): torch is not installed: torch outputs not checked")
else:
    with loader(output="torch") as ld:
        seen = []
        for b in ld:
            t.check(isinstance(b["tok"], torch.Tensor) and b["tok_offsets"].dtype == torch.int64
                    and b["mel"].dtype == torch.float32, "torch tensors")
            seen += check_values(b, "torch")
        t.check(sorted(seen) == list(range(N)), "torch: every sample once")
    with loader(output="torch", pad={"tok": 0}) as ld:
        b = next(iter(ld))
        idx = [int(i) for i in b["__index__"]]
        tl = b["tok_lengths"]
        t.check(b["tok"].shape == (len(idx), int(tl.max())) and
                all(torch.equal(b["tok"][k, :int(tl[k])], torch.from_numpy(tok(i)))
                    for k, i in enumerate(idx)), "torch padded")

# ---- dscache.Writer's dataset: values + offsets and padded equal the records ---------------
for pad in (None, {"input_ids": 0}):
    with dscache.Loader(servers=addr, dataset="hf", batch_size=16, seed=4, indices=True,
                        pad=pad) as ld:
        seen, ok = [], True
        for b in ld:
            idx = [int(i) for i in b["__index__"]]
            seen += idx
            for k, i in enumerate(idx):
                want = records[i]["input_ids"]
                if pad is None:
                    o = b["input_ids_offsets"]
                    got = b["input_ids"][o[k]:o[k + 1]]
                else:
                    got = b["input_ids"][k, :b["input_ids_lengths"][k]]
                    ok = ok and not b["input_ids"][k, len(want):].any()
                ok = ok and np.array_equal(got, want) and b["label"][k] == records[i]["label"]
        t.check(ld.meta == {"classes": ["cat", "dog"]}, "Loader.meta: %r" % (ld.meta,))
        t.check(ok and sorted(seen) == list(range(len(records))),
                "dscache.Writer dataset (%s): every record once, equal"
                % ("padded" if pad else "values + offsets"))

# ---- a sample over the budget: a clear error, never a silent truncation ----------------------
with loader(max_bytes={"tok": 16}) as ld:
    try:
        for b in ld:
            pass
        t.check(False, "a batch over max_bytes raises")
    except dscache.Error as e:
        msg = str(e)
        print("expected error:", msg)
        t.check(e.name == "DSC_ETOOLARGE" and "pvar" in msg and "sample " in msg and
                "max_bytes" in msg and "'tok'" in msg,
                "the error names dataset, sample and option: %s" % msg)

# ---- options that name no variable field -----------------------------------------------------
try:
    loader(pad={"label": 0})
    t.check(False, "pad on a fixed field is refused")
except dscache.Error as e:
    t.check("label" in str(e), "the refusal names the field: %s" % e)
try:
    loader(max_len={"tok": 4})
    t.check(False, "max_len without pad is refused")
except ValueError:
    pass

sys.exit(t.done())
