"""Stragglers (docs/cluster.md): three clustered dscached (--replicas 2); one is SIGSTOPped while
the loader (timeout_ms 60 s) streams. It is marked slow long before timeout_ms and batches keep
coming, with every sample's bytes, while it stays stopped; the bytes re-issued stay within the
hedge budget; once continued it is back in use. Then a read-through: two servers without --warm
whose backing reads (--backing-rate) outlast the stall threshold answer PING, so their misses
are excused: no slow mark, no hedge."""
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

te.require_tools()
import numpy as np  # noqa: E402
import dscache  # noqa: E402

env = te.Env()
t = te.Checks()
rng = np.random.default_rng(5)
N = 20000
arrays = {"x": rng.standard_normal((N, 16)).astype(np.float32),
          "y": np.arange(N, dtype=np.int64)}
ds = env.ingest_npy("pyhd", arrays)
TIMEOUT_MS = 60000


def start_cluster(name, data, count, extra):
    members = os.path.join(env.dir, "members-" + name)
    procs, addrs = [], []
    for i in range(count):
        port_file = os.path.join(env.dir, "port-%s.%d" % (name, i))
        proc = subprocess.Popen(te.DIE_WITH_TEST + [
            os.path.join(te.BIN, "dscached"), "--listen", "127.0.0.1:0", "--http", "off",
            "--port-file", port_file, "--log-level", "error", "--threads", "1", "--data", data,
            "--replicas", "2", "--members-file", members] + extra)
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
    return procs, addrs


def batches(loader):
    while True:
        for batch in loader:
            yield batch


# ---- A stopped server while its replicas hold every chunk ----------------------------------
procs, addrs = start_cluster("a", ds, 3, ["--warm", "--memory", "64M"])
loader = dscache.Loader(servers=addrs, dataset="pyhd", batch_size=32, seed=3, indices=True,
                        replicas=2, timeout_ms=TIMEOUT_MS, server_inflight_bytes=64 << 10,
                        inflight_bytes=256 << 10, cache_bytes=1, prefetch=1)
stream = batches(loader)


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
# Stopped; continued by a timer at a quarter of timeout_ms unless the test gets there first.
# Without slow marking the loader waits on the stopped server's chunks until then.
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
print("300 batches with one server stopped in %.2f s; marked slow after %s s; hedges %d (won "
      "%d, denied %d), hedged %d bytes, %d late bytes dropped, %d bytes received" %
      (took, "%.2f" % marked[0] if marked else "-", st["hedges"], st["hedges_won"],
       st["hedges_denied"], st["hedge_bytes"], st["hedge_wasted_bytes"], st["wire_bytes"]))
t.check(flowed, "batches kept flowing while a server was stopped (it was continued after "
        "%.0f s, before 300 batches)" % limit_s)
t.check(st["slow_marks"] >= 1 and marked, "the stopped server was marked slow")
t.check(bool(marked) and marked[0] < TIMEOUT_MS / 1e3 / 10,
        "marked slow long before timeout_ms (%s s)" % (marked[0] if marked else None))
t.check(st["hedge_bytes"] <= 0.05 * st["wire_bytes"] + (8 << 20),
        "hedged bytes within the budget (5%% of %d received + one request): %d" %
        (st["wire_bytes"], st["hedge_bytes"]))
# Back in use: a PING probe finds it (batches keep being taken meanwhile).
deadline = time.monotonic() + limit_s
while loader.stats()["slow_servers"] > 0 and time.monotonic() < deadline:
    take(10)
st = loader.stats()
t.check(st["slow_servers"] == 0, "the continued server is back in use")
t.check(st["hedge_wasted_bytes"] <= st["hedge_bytes"] + 4096 * max(st["hedges"], 1),
        "late bytes dropped (%d) at most those re-issued (%d)" %
        (st["hedge_wasted_bytes"], st["hedge_bytes"]))
metrics = loader.metrics_text()
t.check("dscache_loader_hedges_total" in metrics and
        'dscache_loader_server_slow_marks_total{dataset="pyhd",server="%s"} ' % addrs[0] in
        metrics, "hedge metrics, per server")
loader.close()
for p in procs:
    p.send_signal(signal.SIGKILL)
    p.wait()

# ---- Read-through misses are not stragglers ------------------------------------------------
# No --warm and no read-ahead: every chunk is read through from the data directory at 256 KB/s
# when asked for, so a miss takes longer than the 10 ms stall threshold; the servers answer PING
# meanwhile.
M = 3000
small = {"x": arrays["x"][:M], "y": arrays["y"][:M]}
ds2 = env.ingest_npy("pyrt", small)
# peer warm-up off: these misses must be read from the backing storage, not a peer's RAM
procs, addrs = start_cluster("b", ds2, 2, ["--backing-rate", "256K", "--peer-rate", "0"])
os.environ["DSCACHE_HEDGE_MS"] = "10"
os.environ["DSCACHE_HINTS"] = "0"  # no read-ahead: the GETs wait for the reads themselves
loader = dscache.Loader(servers=addrs, dataset="pyrt", batch_size=32, seed=1, indices=True,
                        replicas=2, timeout_ms=TIMEOUT_MS)
seen = 0
for batch in loader:
    idx = batch["__index__"]
    t.check(np.array_equal(batch["x"], small["x"][idx]), "read-through bytes equal the source")
    seen += len(idx)
st = loader.stats()
print("read-through epoch: %d samples, %d stalls excused, %d slow marks, %d hedges" %
      (seen, st["stalls_excused"], st["slow_marks"], st["hedges"]))
t.check(seen == M, "read-through epoch complete")
t.check(st["stalls_excused"] >= 1, "a read-through outlasted the threshold and was excused")
t.check(st["slow_marks"] == 0 and st["hedges"] == 0,
        "misses did not mark a server slow nor hedge (%d marks, %d hedges)" %
        (st["slow_marks"], st["hedges"]))
loader.close()
sys.exit(t.done())
