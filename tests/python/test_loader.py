"""dscache.Loader through a real dscached: numpy batches equal the source arrays, torch output,
state_dict resume, a tiny torch model trained on loader batches, errors become exceptions."""
import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

te.require_tools()
import numpy as np  # noqa: E402
import dscache  # noqa: E402

env = te.Env()
t = te.Checks()
rng = np.random.default_rng(5)
N = 1237
emb = rng.standard_normal((N, 5)).astype(np.float32)
w_true = np.array([0.5, -1.0, 2.0, 0.25, 1.5], dtype=np.float32)
arrays = {
    "image": rng.integers(0, 256, (N, 3, 8, 8), dtype=np.uint8),
    "label": rng.integers(-2**40, 2**40, (N,), dtype=np.int64),
    "emb": emb,
    "target": (emb @ w_true).astype(np.float32)[:, None],
    "half": rng.standard_normal((N, 2, 3)).astype(np.float16),
}
ds = env.ingest_npy("pyds", arrays)
_, addr = env.start_server(ds)

# ---- numpy: every batch equals the source rows it names; one epoch covers each once ----------
t.check(dscache.__version__ == "0.1.0", "version")
loader = dscache.Loader(servers=[addr], dataset="pyds", batch_size=32, seed=3, indices=True)
t.check(len(loader) == (N + 31) // 32, "len")
t.check(loader.dataset_samples == N, "dataset_samples")
seen = []
for batch in loader:
    idx = batch["__index__"]
    seen.extend(idx.tolist())
    for name, src in arrays.items():
        a = batch[name]
        t.check(a.dtype == src.dtype and a.shape == (len(idx),) + src.shape[1:],
                "%s dtype/shape %s %s" % (name, a.dtype, a.shape))
        t.check(np.array_equal(a, src[idx]), "%s bytes equal the source" % name)
t.check(sorted(seen) == list(range(N)), "one epoch covers every sample once")
first_epoch = seen
# The next iteration is the next epoch, in another order.
second = [i for b in loader for i in b["__index__"].tolist()]
t.check(sorted(second) == list(range(N)) and second != first_epoch, "next epoch reshuffled")
loader.set_epoch(0)
again = [i for b in loader for i in b["__index__"].tolist()]
t.check(again == first_epoch, "set_epoch(0) repeats epoch 0")
st = loader.stats()
for key in ("batches", "bytes", "stall_seconds", "stall_fraction", "wire_bytes"):
    t.check(key in st, "stats has " + key)
t.check(st["batches"] == 3 * len(loader), "stats batches %d" % st["batches"])
t.check(0.0 <= st["stall_fraction"] <= 1.0, "stall_fraction in [0, 1]")
t.check("dscache_loader_batches_total" in loader.metrics_text(), "metrics text")
for key in ("placed_chunks", "refetches", "checksum_failures", "failovers"):
    t.check(key in st, "stats has " + key)
t.check(st["refetches"] == 0, "default settings: no chunk fetched twice per epoch")
t.check("dscache_loader_assists_total" in loader.metrics_text(), "metrics text: assists")

# ---- assist: a waiting next() decodes and collates; assist=False only waits -----------------
# One decode thread, compressible lz4 chunks (decoding is slower than receiving, so received
# chunks queue up) and a consumer that never pauses: next() waits for nearly every batch, and
# with assist it takes queued work (counted), without it none. Both give the source bytes.
M = 3000
zarr = {"z": (np.arange(M * 1024) % 7).astype(np.float32).reshape(M, 1024)}
zds = env.ingest_npy("zds", zarr, chunk_size="64K")
_, zaddr = env.start_server(zds)
for assist in (True, False):
    al = dscache.Loader(servers=zaddr, dataset="zds", batch_size=64, seed=5, indices=True,
                        decode_threads=1, assist=assist)
    got, bad = [], 0
    for _ in range(3):
        for batch in al:
            idx = batch["__index__"]
            bad += not np.array_equal(batch["z"], zarr["z"][idx])
            got.extend(idx.tolist())
    t.check(bad == 0, "assist=%s: bytes equal the source (%d bad batches)" % (assist, bad))
    t.check(sorted(got) == sorted(list(range(M)) * 3), "assist=%s: 3 epochs, each once" % assist)
    n_assists = al.stats()["assists"]
    print("assist=%s: %d units of work done by next()" % (assist, n_assists))
    if assist:
        t.check(n_assists > 0, "assist=True: next() did work while waiting (%d)" % n_assists)
    else:
        t.check(n_assists == 0, "assist=False: next() only waited (%d)" % n_assists)
    al.close()
t.check("dscache_loader_refetches_total" in loader.metrics_text(), "metrics text: refetches")
# The Python stats struct is as large as the C one. The library copies min(struct_size, its own
# size) bytes: offer a larger buffer filled with a pattern (twice, with two patterns) and see
# where its writes stop.
py_size = ctypes.sizeof(dscache._Stats)
cap = py_size + 64
written = 0
for fill in (0x00, 0xFF):
    buf = (ctypes.c_uint8 * cap)(*([fill] * cap))
    ctypes.c_size_t.from_buffer(buf).value = cap
    rc = dscache._load().dsc_loader_stats(loader._h(),
                                          ctypes.cast(buf, ctypes.POINTER(dscache._Stats)))
    t.check(rc == 0, "dsc_loader_stats into a larger buffer")
    t.check(ctypes.c_size_t.from_buffer(buf).value == cap, "struct_size kept")
    for i in range(ctypes.sizeof(ctypes.c_size_t), cap):
        if buf[i] != fill:
            written = max(written, i + 1)
c_size = (written + 7) // 8 * 8
t.check(c_size == py_size, "stats struct: C %d bytes, Python %d" % (c_size, py_size))
loader.close()

# ---- state_dict resume ------------------------------------------------------------------------
a = dscache.Loader(servers=addr, dataset="pyds", batch_size=16, seed=9, indices=True)
full = [b["__index__"].tolist() for b in a]
a.set_epoch(0)
it = iter(a)
for _ in range(7):
    next(it)
state = a.state_dict()
a.close()
b = dscache.Loader(servers=addr, dataset="pyds", batch_size=16, seed=9, indices=True)
b.load_state_dict(state)
rest = [x["__index__"].tolist() for x in b]
t.check(rest == full[7:], "resume from state_dict continues where it stopped")
try:
    b.load_state_dict({"dscache_state": b"garbage"})
    t.check(False, "bad state accepted")
except dscache.Error as e:
    t.check(e.name == "DSC_EBADSTATE", "bad state -> DSC_EBADSTATE, got %s" % e.name)
b.close()

# ---- epochs=: a job's last epoch fetches nothing past it -------------------------------------
one = dscache.Loader(servers=addr, dataset="pyds", batch_size=16, seed=9, indices=True, epochs=1)
first = [x["__index__"].tolist() for x in one]
t.check(first == full, "epochs=1: the first epoch is the same as without the option")
t.check([x for x in one] == [], "epochs=1: a second pass yields nothing")
one.set_epoch(3)
t.check([x for x in one] == [], "epochs=1: set_epoch past the last epoch yields nothing")
one.close()
try:
    dscache.Loader(servers=addr, dataset="pyds", epochs=-1)
    t.check(False, "epochs=-1 accepted")
except ValueError:
    pass

# ---- errors become exceptions ---------------------------------------------------------------
try:
    dscache.Loader(servers=addr, dataset="no-such-dataset")
    t.check(False, "unknown dataset accepted")
except dscache.Error as e:
    t.check(e.code == -4016 and e.name == "DSC_ENOTFOUND", "unknown dataset -> ENOTFOUND")
    t.check("no-such-dataset" in str(e), "message names the dataset: %s" % e)
try:
    dscache.Loader(servers=addr, dataset="pyds", batch_size=0)
    t.check(False, "batch_size 0 accepted")
except dscache.Error as e:
    t.check(e.name == "DSC_EINVAL" and "batch_size" in str(e), "batch_size 0 -> EINVAL: %s" % e)
try:
    dscache.Loader(servers="127.0.0.1:1", dataset="pyds", timeout_ms=500)
    t.check(False, "dead server accepted")
except dscache.Error as e:
    t.check(e.name == "DSC_EUNAVAIL", "no server -> EUNAVAIL, got %s" % e.name)
closed = dscache.Loader(servers=addr, dataset="pyds")
closed.close()
try:
    next(iter(closed))
    t.check(False, "closed loader iterated")
except ValueError:
    pass

# ---- fallback files: no server at all, and a server that dies mid-epoch ----------------------
def check_batch(batch):
    idx = batch["__index__"]
    for name, src in arrays.items():
        t.check(np.array_equal(batch[name], src[idx]), "fallback: %s equals the source" % name)
    return idx.tolist()


fb = dscache.Loader(dataset="pyds", fallback_path=ds, batch_size=50, seed=2, indices=True)
got = [i for b in fb for i in check_batch(b)]
t.check(sorted(got) == list(range(N)), "fallback-only epoch covers every sample once")
fb.close()
proc2, addr2 = env.start_server(ds)
lf = dscache.Loader(servers=addr2, dataset="pyds", fallback_path=ds, batch_size=20, seed=4,
                    indices=True, cache_bytes=1, prefetch=1, timeout_ms=1000)
it = iter(lf)
got = [i for _ in range(5) for i in check_batch(next(it))]
proc2.kill()
proc2.wait()
got += [i for b in it for i in check_batch(b)]
t.check(sorted(got) == list(range(N)), "epoch completes from the files after the server died")
t.check(lf.stats()["failovers"] > 0, "failovers counted")
lf.close()

# ---- torch: tensors via DLPack, and a tiny model that learns ---------------------------------
try:
    import torch
except ImportError:
    torch = None
if torch is not None:
    torch.manual_seed(0)
    loader = dscache.Loader(servers=addr, dataset="pyds", batch_size=64, seed=1,
                            output="torch", indices=True)
    batch = next(iter(loader))
    idx = batch["__index__"]
    t.check(isinstance(batch["emb"], torch.Tensor) and batch["emb"].dtype == torch.float32,
            "torch tensor")
    t.check(batch["image"].dtype == torch.uint8 and tuple(batch["image"].shape) == (64, 3, 8, 8),
            "torch uint8 image")
    t.check(torch.equal(batch["label"], torch.from_numpy(arrays["label"][idx])), "torch bytes")
    t.check(batch["half"].dtype == torch.float16, "torch float16")
    del batch
    model = torch.nn.Linear(5, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for epoch in range(3):
        loader.set_epoch(epoch)
        for batch in loader:
            loss = torch.nn.functional.mse_loss(model(batch["emb"]), batch["target"])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    print("loss: first %.4f, last %.4f over %d steps" % (losses[0], losses[-1], len(losses)))
    t.check(len(losses) == 3 * len(loader), "steps")
    t.check(losses[-1] < 0.1 * losses[0], "loss decreases")
    loader.close()
else:
    print("torch not installed: torch checks skipped")
sys.exit(t.done())
