"""dscache.Loader over three clustered dscached (members file, --replicas 2): the cluster options
reach the C library (the options struct matches its size), one server is SIGKILLed and another
SIGSTOPped mid-epoch, and the epoch still yields every sample once with the source bytes."""
import ctypes
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

te.require_tools()
import numpy as np  # noqa: E402
import dscache  # noqa: E402

env = te.Env()
t = te.Checks()
rng = np.random.default_rng(11)
N = 4000
arrays = {"x": rng.standard_normal((N, 16)).astype(np.float32),
          "y": rng.integers(0, 1000, (N,), dtype=np.int64)}
ds = env.ingest_npy("pycl", arrays)

# The Python options struct is as large as the C one (the C init writes struct_size bytes).
opts = dscache._Options()
dscache._load().dsc_loader_options_init2(ctypes.byref(opts), ctypes.sizeof(opts))
t.check(opts.struct_size == ctypes.sizeof(dscache._Options),
        "options struct: C %d bytes, Python %d" % (opts.struct_size, ctypes.sizeof(opts)))
t.check(opts.timeout_ms == 5000 and opts.replicas == 0 and opts.server_inflight_bytes == 0,
        "cluster option defaults")

members = os.path.join(env.dir, "members")
procs, addrs = [], []
for i in range(3):
    port_file = os.path.join(env.dir, "cport.%d" % i)
    proc = subprocess.Popen([os.path.join(te.BIN, "dscached"), "--listen", "127.0.0.1:0",
                             "--http", "off", "--port-file", port_file, "--log-level", "error",
                             "--threads", "1", "--data", ds, "--replicas", "2",
                             "--members-file", members])
    env.procs.append(proc)
    procs.append(proc)
    for _ in range(200):
        if os.path.exists(port_file) and os.path.getsize(port_file) > 0:
            break
        time.sleep(0.05)
    addrs.append("127.0.0.1:%s" % open(port_file).read().strip())
with open(members + ".tmp", "w") as f:
    f.write("\n".join(addrs) + "\n")
os.rename(members + ".tmp", members)
time.sleep(1.5)  # the servers re-read the file once a second

loader = dscache.Loader(servers=addrs, dataset="pycl", batch_size=40, seed=9, indices=True,
                        replicas=2, timeout_ms=800, server_inflight_bytes=64 << 10,
                        cache_bytes=1, prefetch=1)
seen = []
start = time.monotonic()
for step, batch in enumerate(loader):
    idx = batch["__index__"]
    seen.extend(idx.tolist())
    for name, src in arrays.items():
        t.check(np.array_equal(batch[name], src[idx]), "%s equals the source" % name)
    if step == 10:
        procs[0].send_signal(signal.SIGKILL)
        procs[1].send_signal(signal.SIGSTOP)
    time.sleep(0.002)
took = time.monotonic() - start
procs[1].send_signal(signal.SIGCONT)
t.check(sorted(seen) == list(range(N)), "every sample once with one server killed, one stopped")
st = loader.stats()
print("epoch in %.2f s: requests %d, retries %d, failovers %d" %
      (took, st["requests"], st["retries"], st["failovers"]))
t.check(st["retries"] + st["failovers"] > 0, "the loss of two servers was noticed")
t.check(took < 30, "epoch took %.1f s" % took)
loader.close()

for bad in ({"timeout_ms": -1}, {"replicas": 9}):
    try:
        dscache.Loader(servers=addrs[2:], dataset="pycl", **bad)
        t.check(False, "bad option %s accepted" % bad)
    except (dscache.Error, ValueError, OverflowError, TypeError, ctypes.ArgumentError) as e:
        print("refused %s: %s" % (bad, e))
sys.exit(t.done())
