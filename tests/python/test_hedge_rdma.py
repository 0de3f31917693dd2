"""Stragglers over RDMA (docs/cluster.md, "Stragglers"), through the test-only fake verbs library:
three clustered dscached (--replicas 2, --rdma required), a loader with transport "rdma" and
timeout_ms 60 s; one server is SIGSTOPped while the loader streams. The fake NIC serves READs
from a thread of the server's process, so the stopped server leaves requests unanswered, parked
and in READ alike: all of them are re-issued to the other owner (the READ's bytes dropped when it
completes), so batches keep coming with every sample's bytes long before timeout_ms; once
continued the server is back in use and its late READs were counted as wasted. Before, requests
over RDMA were waited for: the loader stalled until the server was continued."""
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

te.require_tools()
fake = os.environ.get("DSC_FAKEVERBS_LIB", "")
if not fake or not os.path.exists(fake):
    te.skip("libfakeverbs not built (no rdma-core headers at build time)")
os.environ["DSC_IBVERBS_LIB"] = fake
os.environ.pop("DSCACHE_TRANSPORT", None)
os.environ.pop("DSC_FAKEVERBS_DEVICES", None)
import numpy as np  # noqa: E402
import dscache  # noqa: E402

env = te.Env()
t = te.Checks()
rng = np.random.default_rng(11)
N = 20000
arrays = {"x": rng.standard_normal((N, 16)).astype(np.float32),
          "y": np.arange(N, dtype=np.int64)}
ds = env.ingest_npy("pyhr", arrays)
TIMEOUT_MS = 60000
# The server is stopped for up to TIMEOUT_MS / 4 (15 s); its leases must outlive that stop, or
# on SIGCONT it fences the loader's connection (a lease not released within the default 10 s),
# which fails a READ: right for the server, but not what this test is about (seen once in four
# runs beside a CPU burner on both cores, the stop then lasting 11.9 s).
LEASE_TTL_MS = 2 * TIMEOUT_MS

members = os.path.join(env.dir, "members")
procs, addrs = [], []
for i in range(3):
    port_file = os.path.join(env.dir, "port.%d" % i)
    proc = subprocess.Popen(te.DIE_WITH_TEST + [
        os.path.join(te.BIN, "dscached"), "--listen", "127.0.0.1:0", "--http", "off",
        "--port-file", port_file, "--log-level", "error", "--threads", "1", "--data", ds,
        "--replicas", "2", "--members-file", members, "--warm", "--memory", "64M",
        "--rdma", "required", "--rdma-lease-ttl-ms", str(LEASE_TTL_MS)])
    env.procs.append(proc)
    procs.append(proc)
    for _ in range(400):
        if os.path.exists(port_file) and os.path.getsize(port_file) > 0:
            break
        if proc.poll() is not None:
            te.skip("dscached --rdma required did not start with the fake verbs library")
        time.sleep(0.05)
    addrs.append("127.0.0.1:%s" % open(port_file).read().strip())
with open(members + ".tmp", "w") as f:
    f.write("\n".join(addrs) + "\n")
os.rename(members + ".tmp", members)
time.sleep(1.5)  # the servers re-read the file once a second

loader = dscache.Loader(servers=addrs, dataset="pyhr", batch_size=32, seed=3, indices=True,
                        replicas=2, timeout_ms=TIMEOUT_MS, server_inflight_bytes=64 << 10,
                        inflight_bytes=256 << 10, cache_bytes=1, prefetch=1, transport="rdma")


def batches():
    while True:
        for batch in loader:
            yield batch


stream = batches()


def take(n, on_batch=None):
    for _ in range(n):
        batch = next(stream)
        idx = batch["__index__"]
        t.check(np.array_equal(batch["x"], arrays["x"][idx]) and
                np.array_equal(batch["y"], idx), "batch bytes equal the source")
        if on_batch is not None:
            on_batch()
        time.sleep(0.001)


take(100)
st = loader.stats()
t.check(st["rdma_bytes"] > 0 and st["tcp_connections"] == 0, "the bytes come by RDMA READ")
limit_s = TIMEOUT_MS / 1e3 / 4
stopped_at = time.monotonic()
procs[0].send_signal(signal.SIGSTOP)
continued = threading.Event()


def cont():
    continued.set()
    procs[0].send_signal(signal.SIGCONT)


timer = threading.Timer(limit_s, cont)
timer.start()
marked = []


def note_slow():
    if not marked and loader.stats()["slow_servers"] > 0:
        marked.append(time.monotonic() - stopped_at)


take(300, note_slow)
flowed = not continued.is_set()
took = time.monotonic() - stopped_at
timer.cancel()
st = loader.stats()
if not continued.is_set():
    procs[0].send_signal(signal.SIGCONT)
print("RDMA: 300 batches with one server stopped in %.2f s; marked slow after %s s; hedges %d "
      "(won %d, denied %d), hedged %d bytes, %d late bytes dropped, %d bytes received, %d by READ"
      % (took, "%.2f" % marked[0] if marked else "-", st["hedges"], st["hedges_won"],
         st["hedges_denied"], st["hedge_bytes"], st["hedge_wasted_bytes"], st["wire_bytes"],
         st["rdma_bytes"]))
t.check(flowed, "batches kept flowing over RDMA while a server was stopped (it was continued "
        "after %.0f s, before 300 batches)" % limit_s)
t.check(st["slow_marks"] >= 1 and bool(marked), "the stopped server was marked slow")
t.check(st["hedges"] >= 1, "requests of the stopped server were re-issued over RDMA")
t.check(st["tcp_connections"] == 0, "no connection fell back to TCP (transport rdma)")
t.check(st["hedge_bytes"] <= 0.05 * st["wire_bytes"] + (8 << 20), "hedged bytes within budget")
deadline = time.monotonic() + limit_s
while loader.stats()["slow_servers"] > 0 and time.monotonic() < deadline:
    take(10)
take(50)
st = loader.stats()
t.check(st["slow_servers"] == 0, "the continued server is back in use")
t.check(st["rdma_errors"] == 0, "no READ failed (%d)" % st["rdma_errors"])
print("after: hedges %d, %d late bytes dropped" % (st["hedges"], st["hedge_wasted_bytes"]))
loader.close()
for p in procs:
    p.send_signal(signal.SIGKILL)
    p.wait()
sys.exit(t.done())
