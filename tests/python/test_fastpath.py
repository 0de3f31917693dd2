"""The compiled next() (client/python/ext/fastpath.c, dscache._fast): where the build made it, the
package loads it and every loader of fixed-size host fields uses it; its batches equal the
ctypes path's byte for byte, dtype and shape (numpy and torch output, copy=True, indices=True, a
short last batch); arrays kept past next() and past close() keep their bytes, the loader is
destroyed with the last of them, and nothing leaks over many batches; a closed loader raises;
DSCACHE_FASTPATH=0 turns it off and says so; variable-length fields keep the ctypes path. Runs
in the release build (python_test_fastpath) and under ASan+UBSan (pyasan_test_fastpath)."""
import gc
import os
import subprocess
import sys
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
