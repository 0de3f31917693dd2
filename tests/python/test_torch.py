"""dscache.torch and the Python conventions: DataLoader(Dataset, batch_size=None) over a real
dscached, workers refused clearly, transform=, torch.device, a state dict that torch.save /
torch.load(weights_only=True) keep and that resumes, a loop that prefetches one batch ahead,
error families, the library's log lines in Python logging (from its own threads too) and
DSCACHE_LOG, and deploy/local/train_demo.py --torch-dataloader training the demo model."""
import io
import json
import logging
import os
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

te.require_tools()
try:
    import torch
except ImportError:
    te.skip("torch is not installed")
import numpy as np  # noqa: E402
import dscache  # noqa: E402
import dscache.torch  # noqa: E402

env = te.Env()
t = te.Checks()
rng = np.random.default_rng(11)
N = 1000
image = rng.integers(0, 256, (N, 1, 8, 8), dtype=np.uint8)
# Labels a linear model can learn (train_demo's model is one Linear layer).
label = np.argmax(image.reshape(N, 64).astype(np.float32) @ rng.standard_normal((64, 10)), 1)
arrays = {"image": image, "label": label.astype(np.int64)}
ds_dir = env.ingest_npy("tds", arrays)
_, addr = env.start_server(ds_dir)


def check_rows(batch, what):
    idx = np.asarray(batch["__index__"])
    ok = all(np.array_equal(np.asarray(batch[k]), arrays[k][idx]) for k in arrays)
    t.check(ok, what + ": batch equals the source rows")
    return idx.tolist()


# ---- DataLoader(Dataset, batch_size=None, num_workers=0): one epoch, each sample once -------
ds = dscache.torch.Dataset(servers=addr, dataset="tds", batch_size=64, seed=1, indices=True,
                           device=torch.device("cpu"))
t.check(isinstance(ds, torch.utils.data.IterableDataset), "an IterableDataset")
dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
t.check(len(dl) == (N + 63) // 64, "len(DataLoader) is the batches per epoch: %d" % len(dl))
seen = []
for batch in dl:
    t.check(isinstance(batch["image"], torch.Tensor), "torch tensors by default")
    seen += check_rows(batch, "DataLoader")
t.check(sorted(seen) == list(range(N)), "a DataLoader epoch covers every sample once")
second = [i for b in dl for i in b["__index__"].tolist()]
t.check(sorted(second) == list(range(N)) and second != seen, "next DataLoader pass: next epoch")
ds.set_epoch(0)
t.check([i for b in dl for i in b["__index__"].tolist()] == seen, "set_epoch(0) repeats")
t.check(ds.rank == 0 and ds.world_size == 1, "rank 0/1 without torch.distributed or RANK")

# ---- num_workers > 0: a clear error (fork and spawn) -----------------------------------------
for ctx in ("fork", "spawn"):
    try:
        wl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1,
                                         multiprocessing_context=ctx)
        next(iter(wl))
        t.check(False, "num_workers=1 (%s) accepted" % ctx)
    except Exception as e:  # the worker's RuntimeError, re-raised; or the pickling TypeError
        t.check("num_workers=0" in str(e), "num_workers=1 (%s): clear error: %s"
                % (ctx, str(e).splitlines()[-1][:200]))
ds.close()

# ---- transform= and torch.device -------------------------------------------------------------
calls = []


def to_float(batch):
    calls.append(threading.get_ident())
    return {"x": batch["image"].float() / 255.0, "y": batch["label"], "i": batch["__index__"]}


tds = dscache.torch.Dataset(servers=addr, dataset="tds", batch_size=100, seed=2, indices=True,
                            transform=to_float, device="cpu")
b = next(iter(torch.utils.data.DataLoader(tds, batch_size=None)))
t.check(set(b) == {"x", "y", "i"} and b["x"].dtype == torch.float32, "transform applied")
t.check(torch.allclose(b["x"], torch.from_numpy(arrays["image"][b["i"].numpy()]).float() / 255.0),
        "transform result equals the source")
t.check(len(calls) == 1, "transform called once per batch")
tds.close()
t.check(dscache._parse_device(torch.device("cpu")) == -1, "torch.device('cpu')")
t.check(dscache._parse_device(torch.device("cuda:1")) == 1, "torch.device('cuda:1')")
t.check(dscache._parse_device(torch.device("cuda", 0)) == 0, "torch.device('cuda', 0)")
try:
    dscache._parse_device("tpu")
    t.check(False, "device 'tpu' accepted")
except ValueError:
    pass
if not torch.cuda.is_available():
    try:
        dscache.torch.Dataset(servers=addr, dataset="tds", device=torch.device("cuda:0"))
        t.check(False, "cuda device without a GPU accepted")
    except dscache.Error as e:
        t.check(e.name in ("DSC_ENODEVICE", "DSC_ENOTSUP"), "no GPU: %s" % e)

# ---- state dict: plain, survives torch.save/torch.load(weights_only=True), resumes ------------
a = dscache.torch.Dataset(servers=addr, dataset="tds", batch_size=30, seed=9, indices=True)
full = [x["__index__"].tolist() for x in a]
a.set_epoch(0)
it = iter(a)
for _ in range(5):
    next(it)
state = a.state_dict()
t.check(isinstance(state, dict) and all(isinstance(k, str) and isinstance(v, (str, int))
                                        for k, v in state.items()), "state: str keys, str/int values")
f = io.BytesIO()
torch.save({"model": {"w": torch.zeros(2)}, "data": state}, f)
f.seek(0)
loaded = torch.load(f, weights_only=True)
t.check(loaded["data"] == state, "torch.load(weights_only=True) returns the same state")
legacy = {"dscache_state": bytes.fromhex(state["dscache_state"])}
a.close()
for form, st in (("dict of strings", loaded["data"]), ("bytes (older form)", legacy)):
    r = dscache.torch.Dataset(servers=addr, dataset="tds", batch_size=30, seed=9, indices=True)
    r.load_state_dict(st)
    t.check([x["__index__"].tolist() for x in r] == full[5:], "resume from %s" % form)
    r.close()
other = dscache.Loader(servers=addr, dataset="tds", batch_size=30, seed=10)
for bad in ({"dscache_state": "zz"}, {"nothing": 1}, state):
    try:
        other.load_state_dict(bad)
        t.check(False, "state %r accepted by a loader with another seed" % (bad,))
    except dscache.BadState as e:
        t.check(isinstance(e, dscache.Error) and e.code == -4024, "BadState keeps the code")
other.close()

# ---- a Lightning-style loop: the next batch is fetched before the current one is used --------
# Zero-copy batches are only valid until the next one is requested; until they own their slot
# (dscache.batches_outlive_next) this loop needs copy=True. It runs zero-copy once they do.
zero_copy = getattr(dscache, "batches_outlive_next", False)
print("prefetch-ahead loop: %s" % ("zero-copy" if zero_copy else "copy=True (zero-copy later)"))
la = dscache.torch.Dataset(servers=addr, dataset="tds", batch_size=50, seed=4, indices=True,
                           copy=not zero_copy)
it = iter(torch.utils.data.DataLoader(la, batch_size=None))
cur = next(it, None)
got = []
while cur is not None:
    nxt = next(it, None)  # fetched before `cur` is used, as Lightning does
    got += check_rows(cur, "prefetch-ahead")
    cur = nxt
t.check(sorted(got) == list(range(N)), "prefetch-ahead loop: every sample once")
la.close()

# ---- error families --------------------------------------------------------------------------
cases = [
    (dict(servers=addr, dataset="no-such"), dscache.NotFound, "DSC_ENOTFOUND"),
    (dict(servers=addr, dataset="tds", batch_size=0), dscache.InvalidOption, "DSC_EINVAL"),
    (dict(servers="127.0.0.1:1", dataset="tds", timeout_ms=300), dscache.Unavailable,
     "DSC_EUNAVAIL"),
]
for kwargs, cls, name in cases:
    try:
        dscache.Loader(**kwargs)
        t.check(False, "%r accepted" % kwargs)
    except dscache.Error as e:
        t.check(type(e) is cls and e.name == name and e.code < 0,
                "%s -> %s (%s), got %s %s" % (kwargs, cls.__name__, name, type(e).__name__, e))
t.check(issubclass(dscache.InvalidOption, ValueError), "InvalidOption is a ValueError")
try:
    dscache.Loader(servers=addr, dataset="tdz")
except dscache.NotFound as e:
    t.check("tdz" in str(e) and "it has: tds" in str(e) and addr in str(e),
            "a mistyped dataset names it and lists the datasets: %s" % e)

# ---- logging: library lines reach logger "dscache", also from the library's threads ----------
records = []


class Keep(logging.Handler):
    def emit(self, record):
        records.append(record)


h = Keep()
lg = logging.getLogger("dscache")
lg.addHandler(h)
lg.setLevel(logging.INFO)
proc2, addr2 = env.start_server(ds_dir)
lf = dscache.Loader(servers=addr2, dataset="tds", fallback_path=ds_dir, batch_size=20, seed=4,
                    prefetch=1, cache_bytes=1, timeout_ms=1000, stats_log_seconds=0.01)
it = iter(lf)
for _ in range(3):
    next(it)
proc2.kill()
proc2.wait()
n = sum(1 for _ in it)
lf.close()
lg.removeHandler(h)
lg.setLevel(logging.NOTSET)
msgs = [r.getMessage() for r in records]
t.check(any(m.startswith("loader: dataset tds") for m in msgs), "INFO create line in logging")
t.check(any(r.levelno == logging.WARNING for r in records), "a WARN after the server died")
main = threading.main_thread().ident
t.check(any(r.thread != main for r in records),
        "lines from the library's own threads (%d records, threads %s)"
        % (len(records), sorted({r.threadName for r in records})))
print("logging: %d records, e.g. %s" % (len(records), msgs[:2]))
code = ("import dscache; l = dscache.Loader(servers=%r, dataset='tds'); l.close()" % addr)
for level, want in (("info", True), ("", False)):
    e = dict(os.environ, DSCACHE_LOG=level)
    r = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True)
    t.check(r.returncode == 0, "DSCACHE_LOG=%s run: %s" % (level, r.stderr[-300:]))
    has = "dscache INFO: loader: dataset tds" in r.stderr
    t.check(has == want, "DSCACHE_LOG=%r: stderr %s the INFO line: %r"
            % (level, "has" if has else "lacks", r.stderr[:200]))

# ---- the demo trainer through DataLoader(dscache.torch.Dataset, batch_size=None) -------------
demo = os.path.join(te.SRC, "deploy", "local", "train_demo.py")
r = subprocess.run([sys.executable, demo, "--mode", "dscache", "--torch-dataloader",
                    "--servers", addr, "--dataset", "tds", "--dir", ds_dir, "--batch-size", "50",
                    "--steps", "60", "--compute-ms", "0", "--json"],
                   capture_output=True, text=True, env=os.environ)
t.check(r.returncode == 0, "train_demo --torch-dataloader ran: %s" % r.stderr[-500:])
if r.returncode == 0:
    res = json.loads(r.stdout.strip().splitlines()[-1])
    print("train_demo --torch-dataloader: loss %.3f -> %.3f" % (res["loss_first"],
                                                                 res["loss_last"]))
    t.check(res["loss_last"] < res["loss_first"], "the demo model learns through DataLoader")
    t.check("DataLoader" in res["label"], "label names the DataLoader path: %s" % res["label"])
sys.exit(t.done())
