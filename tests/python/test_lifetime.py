"""Batch lifetime, options layout, replicas from the servers and error causes (issue 12, part 2):
numpy and torch batches kept past next() keep their bytes (10 kept, gradient accumulation over
4), the loader adds slots for them and max_held_bytes gives DSC_EHELD; _Options matches the C
struct and init2 writes only the caller's size; a loader without replicas takes the servers'
(--replicas 1: each shard read from its owner only, no extra misses) and an explicit
disagreeing value warns; wrong port, unresolvable host and a mistyped dataset say why."""
import ctypes
import gc
import json
import os
import subprocess
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

te.require_tools()
import numpy as np  # noqa: E402
import dscache  # noqa: E402

env = te.Env()
t = te.Checks()
rng = np.random.default_rng(5)
N = 3000
arrays = {"x": rng.standard_normal((N, 8)).astype(np.float32),
          "y": np.arange(N, dtype=np.int64)}
ds = env.ingest_npy("lds", arrays)
_, addr = env.start_server(ds)


def rows_ok(batch):
    idx = np.asarray(batch["__index__"]).astype(np.int64)
    x, y = batch["x"], batch["y"]
    if not isinstance(x, np.ndarray):
        x, y = x.numpy(), y.numpy()
    return bool(np.array_equal(x, arrays["x"][idx]) and np.array_equal(y, arrays["y"][idx]))


t.check(dscache.batches_outlive_next is True, "batches_outlive_next")

# ---- 10 batches kept, then every byte checked (numpy, and torch when present) ----------------
outputs = ["numpy"]
try:
    import torch  # noqa: F401
    outputs.append("torch")
except ImportError:
    print("torch not installed: the torch half of the lifetime checks is not run")
for output in outputs:
    with dscache.Loader(servers=addr, dataset="lds", batch_size=32, seed=1, indices=True,
                        output=output) as ld:
        it = iter(ld)
        kept = [next(it) for _ in range(10)]
        bad = sum(not rows_ok(b) for b in kept)
        t.check(bad == 0, "%s: 10 batches kept keep their bytes (%d bad)" % (output, bad))
        st = ld.stats()
        t.check(st["slots_added"] >= 6, "%s: slots added for held batches: %d"
                % (output, st["slots_added"]))
        # Dropped: their slots go back, the epoch goes on without more slots.
        added = st["slots_added"]
        del kept
        gc.collect()
        rest = 0
        for batch in it:
            rest += rows_ok(batch)
        t.check(ld.stats()["slots_added"] == added, "%s: no slot added once batches are dropped "
                "(%d, then %d; holds %d)" % (output, added, ld.stats()["slots_added"], ld._holds))
        # Gradient accumulation over 4, zero-copy.
        ld.set_epoch(1)
        acc, bad, seen = [], 0, 0
        for batch in ld:
            acc.append(batch)
            if len(acc) == 4:
                bad += sum(not rows_ok(b) for b in acc)
                seen += len(acc)
                acc = []
        bad += sum(not rows_ok(b) for b in acc)
        seen += len(acc)
        t.check(bad == 0 and seen == len(ld), "%s: gradient accumulation over 4: %d of %d "
                "batches bad" % (output, bad, seen))
        # A batch outlives close(): the loader is freed when its last batch goes.
        del acc, batch
        keep = next(iter(ld))
        ld.close()
        t.check(rows_ok(keep), "%s: a batch kept past close() keeps its bytes" % output)
        del keep
        gc.collect()
        t.check(ld._handle is None, "%s: closed loader freed with its last batch" % output)

# ---- the cap: DSC_EHELD, not a deadlock, not an overwrite -------------------------------------
slot = 32 * 8 * 4 + 256  # x: 32 * 32 bytes, y: 32 * 8 bytes, each rounded up to 256
ld = dscache.Loader(servers=addr, dataset="lds", batch_size=32, seed=1, indices=True,
                    max_held_bytes=3 * slot)
it = iter(ld)
held = [next(it) for _ in range(3)]
try:
    next(it)
    t.check(False, "a 4th batch beyond max_held_bytes was handed out")
except dscache.Error as e:
    t.check(e.name == "DSC_EHELD" and "max_held_bytes" in str(e), "cap error: %s" % e)
t.check(all(rows_ok(b) for b in held), "held batches intact after the cap error")
held.pop(0)
gc.collect()
t.check(rows_ok(next(it)), "next() works again once a batch is dropped")
del held
ld.close()

# ---- _Options matches the C struct; init2 writes only the caller's size -----------------------
lib = dscache._load()
py_size = ctypes.sizeof(dscache._Options)
cap = py_size + 64
buf = (ctypes.c_uint8 * cap)(*([0xAB] * cap))
lib.dsc_loader_options_init(ctypes.cast(buf, ctypes.POINTER(dscache._Options)))
c_size = ctypes.c_size_t.from_buffer(buf).value
t.check(c_size == py_size, "options struct: C %d bytes, Python %d" % (c_size, py_size))
t.check(all(buf[i] == 0xAB for i in range(c_size, cap)), "options_init writes sizeof only")
small = dscache._Options.cache_bytes.offset  # the first struct: up to stats_log_seconds
buf = (ctypes.c_uint8 * cap)(*([0xCD] * cap))
rc = lib.dsc_loader_options_init2(ctypes.cast(buf, ctypes.POINTER(dscache._Options)), small)
t.check(rc == 0 and ctypes.c_size_t.from_buffer(buf).value == small and
        all(buf[i] == 0xCD for i in range(small, cap)), "init2 writes only the given size")
o = dscache._Options()
lib.dsc_loader_options_init2(ctypes.byref(o), ctypes.sizeof(o))
t.check(o.replicas == 0 and o.max_held_bytes == 1 << 30 and o.batch_size == 32,
        "option defaults: replicas from the servers, max_held_bytes 1 GiB")

# ---- errors name their cause ------------------------------------------------------------------
for kwargs, want in [
        (dict(servers="127.0.0.1:1", dataset="lds", timeout_ms=300), "connection refused"),
        (dict(servers="no-such-host.invalid:7070", dataset="lds", timeout_ms=300),
         "not resolved"),
        (dict(servers=addr, dataset="lsd"), "it has: lds")]:
    try:
        dscache.Loader(**kwargs)
        t.check(False, "%r accepted" % kwargs)
    except dscache.Error as e:
        server = kwargs["servers"]
        t.check(want in str(e) and server in str(e), "%s: %s" % (want, e))

# ---- replicas learned from the servers (MEMBERS) ----------------------------------------------
members = os.path.join(env.dir, "members")
addrs = []
for i in range(2):
    port_file = os.path.join(env.dir, "rport.%d" % i)
    proc = subprocess.Popen([os.path.join(te.BIN, "dscached"), "--listen", "127.0.0.1:0",
                             "--http", "off", "--port-file", port_file, "--log-level", "error",
                             "--threads", "1", "--data", ds, "--replicas", "1",
                             "--members-file", members])
    env.procs.append(proc)
    for _ in range(200):
        if os.path.exists(port_file) and os.path.getsize(port_file) > 0:
            break
        time.sleep(0.05)
    addrs.append("127.0.0.1:%s" % open(port_file).read().strip())
with open(members + ".tmp", "w") as f:
    f.write("\n".join(addrs) + "\n")
os.rename(members + ".tmp", members)
time.sleep(1.5)  # the servers re-read the file once a second


def misses():
    total = 0
    for a in addrs:
        out = subprocess.run([os.path.join(te.BIN, "dscache"), "stat", "--server", a, "--json"],
                             capture_output=True, text=True, check=True).stdout
        total += sum(d.get("misses", 0) for d in json.loads(out)["datasets"])
    return total


shards = len(json.load(open(os.path.join(ds, "manifest.json")))["shards"])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    ld = dscache.Loader(servers=addrs, dataset="lds", batch_size=50, seed=3, indices=True)
    got = sum(1 for b in ld for _ in b["__index__"])
    ld.close()
t.check(got == N, "replicas from the servers: every sample (%d of %d)" % (got, N))
t.check(not [w for w in caught if "replicas" in str(w.message)], "no replicas warning")
m = misses()
print("replicas learned: %d misses over 2 servers for %d shards" % (m, shards))
t.check(m <= shards, "replicas learned: each shard missed on one server only (%d misses, %d "
        "shards)" % (m, shards))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    ld = dscache.Loader(servers=addrs, dataset="lds", batch_size=50, seed=3, replicas=2)
    ld.close()
msgs = [str(w.message) for w in caught if "replicas" in str(w.message)]
t.check(len(msgs) == 1 and "servers use 1" in msgs[0], "explicit replicas=2 warns: %s" % msgs)
t.done()
