"""The compiled next() (client/python/ext/fastpath.c, dscache._fast): where the build made it, the
package loads it and every loader of fixed-size host fields uses it; its batches equal the
ctypes path's byte for byte, dtype and shape (numpy and torch output, copy=True, indices=True, a
short last batch); arrays kept past next() and past close() keep their bytes, the loader is
destroyed with the last of them, and nothing leaks over many batches; a closed loader raises;
DSCACHE_FASTPATH=0 turns it off and says so; variable-length fields keep the ctypes path.
Packed batches (pack=, the packer's thread) come from its PackNexter: byte for byte the ctypes
path's over two epochs and a resume (numpy and torch), never overwritten by later batches, valid
after close(), each hold freed once; pack_ahead=0 keeps the ctypes path. Runs
in the release build (python_test_fastpath) and under ASan+UBSan (pyasan_test_fastpath)."""
import gc
import os
import subprocess
import sys
import threading
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

# In the sanitizer build (pyasan_test_fastpath) python runs with the sanitizer runtime preloaded;
# the servers and tools it starts link their own (a python child gets it back).
PRELOAD = os.environ.pop("LD_PRELOAD", None)

te.require_tools()
import numpy as np  # noqa: E402
import dscache  # noqa: E402

lib_dir = os.environ.get("DSC_LIB", "")
cache = os.path.join(os.path.dirname(lib_dir), "CMakeCache.txt")
built = os.path.exists(cache) and "DSC_HAVE_PYTHON_FASTPATH:INTERNAL=ON" in open(cache).read()
if not built:
    te.skip("this build has no compiled next() (no Python headers: python3-dev), so there is "
            "nothing to compare with the ctypes path: %s" % dscache.fastpath_reason)

t = te.Checks()
t.check(dscache.fastpath is not None and dscache.fastpath.startswith(lib_dir),
        "the build made the compiled next() and the package loads it from the build tree: %s "
        "(%s)" % (dscache.fastpath, dscache.fastpath_reason))
if dscache.fastpath is None:
    sys.exit(t.done())

env = te.Env()
rng = np.random.default_rng(3)
N = 1003  # a short last batch at batch_size 32
arrays = {"x": rng.standard_normal((N, 8)).astype(np.float32),
          "y": np.arange(N, dtype=np.int64) * 7,
          "z": rng.integers(0, 255, (N, 3, 4), dtype=np.uint8),
          "w": rng.integers(-1000, 1000, N).astype(np.int16)}
ds = env.ingest_npy("fp", arrays)
_, addr = env.start_server(ds)

try:
    import torch
    outputs = ["numpy", "torch"]
except ImportError:
    torch = None
    outputs = ["numpy"]
    print("torch not installed: the torch output is not compared")


def loader(**kw):
    opts = dict(servers=addr, dataset="fp", batch_size=32, seed=11, prefetch=4)
    opts.update(kw)
    return dscache.Loader(**opts)


def same(a, b):
    if type(a) is not type(b):
        return False
    if torch is not None and isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


# ---- the same batches as the ctypes path, every option that changes the arrays ----------------
for output in outputs:
    for copy in (False, True):
        for indices in (False, True):
            what = "output=%s copy=%s indices=%s" % (output, copy, indices)
            fast, slow = (loader(output=output, copy=copy, indices=indices) for _ in range(2))
            slow._fast = None  # the ctypes path
            t.check(fast._fast is not None, "%s: the compiled next() serves" % what)
            bad = count = 0
            shapes = set()
            for epoch in (0, 1):
                fast.set_epoch(epoch)
                slow.set_epoch(epoch)
                for a, b in zip(fast, slow):
                    count += 1
                    shapes.add(len(a["x"]))
                    if list(a) != list(b) or not all(same(a[k], b[k]) for k in b):
                        bad += 1
                    if indices:  # and they are the rows they say they are
                        idx = np.asarray(a["__index__"]).astype(np.int64)
                        x = a["x"] if output == "numpy" else a["x"].numpy()
                        bad += not np.array_equal(x, arrays["x"][idx])
            t.check(count == 2 * len(fast) and bad == 0 and shapes == {32, N % 32},
                    "%s: %d batches over 2 epochs equal the ctypes path's (%d differ, batch "
                    "sizes %s)" % (what, count, bad, sorted(shapes)))
            if output == "numpy" and not copy:
                t.check(a["x"].flags.writeable and a["x"].flags.c_contiguous,
                        "%s: arrays are writable and C-contiguous, as before" % what)
            fast.close()
            slow.close()

# ---- lifetime: kept past next() and close(); the loader goes with the last array -------------
for output in outputs:
    ld = loader(output=output, indices=True)
    it = iter(ld)
    kept = [next(it) for _ in range(10)]
    fp = ld._fast
    t.check(fp.holds == 10, "%s: one hold per batch kept: %d" % (output, fp.holds))
    only = kept[3]["x"]  # one array alone keeps its batch
    ld.close()
    t.check(ld._handle is not None, "%s: close() with batches alive waits for them" % output)
    try:
        next(it)
        t.check(False, "%s: next() after close() raises" % output)
    except ValueError:
        pass
    bad = 0
    for b in kept:
        idx = np.asarray(b["__index__"]).astype(np.int64)
        x = b["x"] if output == "numpy" else b["x"].numpy()
        bad += not np.array_equal(x, arrays["x"][idx])
    t.check(bad == 0, "%s: 10 batches kept past close() keep their bytes (%d bad)"
            % (output, bad))
    want = arrays["x"][np.asarray(kept[3]["__index__"]).astype(np.int64)]
    del kept, b, x
    gc.collect()
    t.check(fp.holds == 1 and ld._handle is not None,
            "%s: one array alone keeps the loader (%d holds)" % (output, fp.holds))
    got = np.array(only) if output == "numpy" else only.numpy().copy()
    t.check(np.array_equal(got, want), "%s: and its bytes" % output)
    del only
    gc.collect()
    t.check(fp.holds == 0 and ld._handle is None,
            "%s: the last array freed destroys the loader (%d holds, handle %s)"
            % (output, fp.holds, ld._handle))

# ---- nothing leaks: Python memory flat over many batches, every hold given back --------------
ld = loader(batch_size=8, max_held_bytes=1 << 20)  # a leaked hold would end in DSC_EHELD
tracemalloc.start()
sizes = []
for epoch in range(12):
    ld.set_epoch(epoch)
    for b in ld:
        pass
    del b
    gc.collect()
    sizes.append(tracemalloc.get_traced_memory()[0])
tracemalloc.stop()
grew = sizes[-1] - sizes[2]
t.check(grew < 64 << 10 and ld._fast.holds == 0,
        "12 epochs of %d batches: Python memory grew %d bytes from epoch 3 to 12 (%s), %d holds"
        % (len(ld), grew, sizes, ld._fast.holds))
ld.close()

# ---- off with DSCACHE_FASTPATH=0, and said so ------------------------------------------------
r = subprocess.run([sys.executable, "-c", "import dscache; print(dscache.fastpath, "
                    "dscache.fastpath_reason)"], capture_output=True, text=True,
                   env=dict(os.environ, DSCACHE_FASTPATH="0",
                            **({"LD_PRELOAD": PRELOAD} if PRELOAD else {})))
t.check(r.returncode == 0 and r.stdout.strip() == "None DSCACHE_FASTPATH=0",
        "DSCACHE_FASTPATH=0: no compiled next(), and the reason: %r %s"
        % (r.stdout, r.stderr[-300:]))

# ---- packed batches (pack=): PackNexter against the ctypes path -------------------------------
prng = np.random.default_rng(7)
plen = np.clip(np.exp(prng.normal(4.0, 1.0, 300)), 1, 700).astype(np.int64)
pdir = os.path.join(env.dir, "docs")
with dscache.Writer(pdir, name="docs", fields={"ids": "i32[]", "label": "i64"},
                    chunk_bytes=8192) as w:
    for i in range(len(plen)):
        w.write({"ids": (np.arange(plen[i]) + i * 1000).astype(np.int32), "label": i})
_, paddr = env.start_server(pdir)
PL, PROWS = 128, 4
PKEYS = ["ids", "position_ids", "document_ids", "cu_seqlens", "segment_index", "segment_start"]


def packed(fast=True, **kw):
    opts = dict(servers=paddr, dataset="docs", batch_size=PROWS, seed=5, shuffle_window=32,
                pack={"ids": PL})
    opts.update(kw)
    ld = dscache.Loader(**opts)
    if not fast:
        ld._pack_fast = None  # the ctypes path (_next_packed)
    return ld


def frozen(b):
    """The batch's keys and arrays as they are now (copies)."""
    return [(k, np.array(v.numpy() if torch is not None and isinstance(v, torch.Tensor) else v,
                         copy=True)) for k, v in b.items()]


def same_packed(xs, ys):
    """Two lists of frozen batches: the same keys in order, dtypes, shapes and bytes."""
    return len(xs) == len(ys) and all(
        [k for k, _ in x] == [k for k, _ in y] and
        all(a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
            for (_, a), (_, b) in zip(x, y)) for x, y in zip(xs, ys))


for output in outputs:
    fast, slow = packed(output=output), packed(False, output=output)
    t.check(fast._pack_fast is not None,
            "pack, output=%s: the compiled next() serves packed batches" % output)
    got, want, rows, spans = [], [], set(), 0
    for epoch in (0, 1):
        fast.set_epoch(epoch)
        slow.set_epoch(epoch)
        for a in fast:
            got.append(frozen(a))
            rows.add(len(a["ids"]))
            spans += output == "numpy" and type(a["ids"].base).__name__ == "Span"
        want += [frozen(b) for b in slow]
    t.check(same_packed(got, want) and [k for k, _ in got[0]] == PKEYS,
            "pack, output=%s: %d batches over 2 epochs equal the ctypes path's byte for byte "
            "(%d from it; keys %s)" % (output, len(got), len(want), [k for k, _ in got[0]]))
    t.check(min(rows) < PROWS == max(rows),
            "pack, output=%s: the epoch's last batch has fewer rows, as the ctypes path's: %s"
            % (output, sorted(rows)))
    if output == "numpy":  # the arrays are the module's (over a Span), not the ctypes path's
        t.check(spans == len(got), "pack: every batch came from the compiled next() (%d of %d "
                "over its Span)" % (spans, len(got)))
    fast.close()
    slow.close()

# Resumed mid-epoch: the fast path, a new fast loader and a new ctypes one continue alike.
ld = packed()
it = iter(ld)
for _ in range(5):
    next(it)
state = ld.state_dict()
rest = [frozen(b) for b in it]
ld.close()
again, other = packed(), packed(False)
again.load_state_dict(state)
other.load_state_dict(state)
rest_fast, rest_slow = [frozen(b) for b in again], [frozen(b) for b in other]
t.check(len(rest) > 3 and same_packed(rest, rest_fast) and same_packed(rest, rest_slow),
        "pack: resumed after 5 batches, the compiled and the ctypes path continue byte for byte "
        "(%d, %d, %d batches)" % (len(rest), len(rest_fast), len(rest_slow)))
again.close()
other.close()

# Held batches: never overwritten by later batches, valid after close(); each freed once.
ld = packed()
kept = list(ld)  # epoch 0, all alive
ref = [frozen(b) for b in kept]
pf = ld._pack_fast
t.check(pf.holds == len(kept), "pack: one hold per batch kept: %d of %d" % (pf.holds, len(kept)))
for _ in range(2):  # two more epochs through the packer's ring
    for b in ld:
        pass
del b
gc.collect()
t.check(same_packed([frozen(b) for b in kept], ref) and pf.holds == len(kept),
        "pack: %d batches kept through 2 later epochs keep their bytes (%d holds)"
        % (len(kept), pf.holds))
ld.close()
try:
    next(ld)
    t.check(False, "pack: next() after close() raises")
except ValueError:
    pass
t.check(same_packed([frozen(b) for b in kept], ref),
        "pack: the kept batches keep their bytes after close()")
only = kept[2]["cu_seqlens"]  # one array alone keeps its batch
want_cu = ref[2][3][1]
del kept
gc.collect()
t.check(pf.holds == 1 and np.array_equal(only, want_cu),
        "pack: one array alone keeps its batch after close() (%d holds)" % pf.holds)
del only
gc.collect()
t.check(pf.holds == 0, "pack: every hold freed (%d left)" % pf.holds)

# Held batches freed on another thread while close() destroys the packer: each release waits
# for the destroy (the loader's _pack_lock) or comes after it (ASan sees any overlap).
left = 0
for _ in range(10):
    ld = packed()
    pf = ld._pack_fast
    kept = [next(ld) for _ in range(6)]
    dropper = threading.Thread(target=lambda: [kept.pop() for _ in range(len(kept))])
    dropper.start()
    ld.close()
    dropper.join()
    gc.collect()
    left += pf.holds
t.check(left == 0, "pack: batches freed while close() runs are each given back (%d left)" % left)

# Packed on the caller's thread (pack_ahead=0): the ctypes path, the same batches.
ld, ld0 = packed(), packed(pack_ahead=0)
t.check(ld0._pack_fast is None and same_packed([frozen(b) for b in ld], [frozen(b) for b in ld0]),
        "pack_ahead=0: the ctypes path serves (%s), the same batches" % ld0._pack_fast)
ld.close()
ld0.close()

# ---- variable-length fields keep the ctypes path ---------------------------------------------
vdir = os.path.join(env.dir, "var")
with dscache.Writer(vdir, fields={"ids": "i32[]", "label": "i64"}) as w:
    for i in range(100):
        w.write({"ids": np.arange(i % 7 + 1, dtype=np.int32), "label": i})
_, vaddr = env.start_server(vdir)
with dscache.Loader(servers=vaddr, dataset="var", batch_size=10, seed=0) as ld:
    n = sum(len(b["label"]) for b in ld)
    t.check(ld._fast is None and n == 100, "a variable-length field: the ctypes path serves (%s, "
            "%d samples)" % (ld._fast, n))
sys.exit(t.done())
