"""Stragglers in `dscache top` and the server's /metrics (docs/diagnosis.md, "dscache top"):
three clustered dscached (--replicas 2, peer warm-up on); one is SIGSTOPped while a loader
(report_seconds 0.5) streams, so the loader marks it slow and re-issues its requests. Once it is
continued, the loader's REPORTs carry what it saw of that server (PROTOCOL.md, "REPORT straggler
trailer"), and `dscache top --json` and the server's /metrics show the same slow marks and
hedges as the loader's own per-server metrics. The other servers show no slow mark, and every
server shows its peer warm-up (shards from peers, shards left)."""
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

te.require_tools()
import numpy as np  # noqa: E402
import dscache  # noqa: E402

env = te.Env()
t = te.Checks()
rng = np.random.default_rng(7)
N = 20000
arrays = {"x": rng.standard_normal((N, 16)).astype(np.float32),
          "y": np.arange(N, dtype=np.int64)}
ds = env.ingest_npy("pyht", arrays)
TIMEOUT_MS = 60000

members = os.path.join(env.dir, "members")
procs, addrs, https = [], [], []
for i in range(3):
    port_file = os.path.join(env.dir, "port.%d" % i)
    http_file = os.path.join(env.dir, "hport.%d" % i)
    proc = subprocess.Popen(te.DIE_WITH_TEST + [
        os.path.join(te.BIN, "dscached"), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
        "--port-file", port_file, "--http-port-file", http_file, "--log-level", "error",
        "--threads", "1", "--data", ds, "--replicas", "2", "--members-file", members,
        "--warm", "--memory", "64M"])
    env.procs.append(proc)
    procs.append(proc)
    for _ in range(400):
        if all(os.path.exists(p) and os.path.getsize(p) > 0 for p in (port_file, http_file)):
            break
        time.sleep(0.05)
    addrs.append("127.0.0.1:%s" % open(port_file).read().strip())
    https.append("127.0.0.1:%s" % open(http_file).read().strip())
with open(members + ".tmp", "w") as f:
    f.write("\n".join(addrs) + "\n")
os.rename(members + ".tmp", members)
time.sleep(1.5)  # the servers re-read the file once a second

loader = dscache.Loader(servers=addrs, dataset="pyht", batch_size=32, seed=3, indices=True,
                        replicas=2, timeout_ms=TIMEOUT_MS, server_inflight_bytes=64 << 10,
                        inflight_bytes=256 << 10, cache_bytes=1, prefetch=1, report_seconds=0.5)


def batches():
    while True:
        for batch in loader:
            yield batch


stream = batches()


def take(n):
    for _ in range(n):
        batch = next(stream)
        idx = batch["__index__"]
        t.check(np.array_equal(batch["x"], arrays["x"][idx]), "batch bytes equal the source")
        time.sleep(0.001)


def loader_figure(name, addr):
    m = re.search(r'^dscache_loader_server_%s\{dataset="pyht",server="%s"\} (\S+)$' %
                  (name, re.escape(addr)), loader.metrics_text(), re.M)
    return float(m.group(1)) if m else None


def top_json():
    out = subprocess.run([os.path.join(te.BIN, "dscache"), "top", "--json", "--interval", "0.2",
                          "--server", ",".join(addrs)], capture_output=True, text=True,
                         timeout=60)
    t.check(out.returncode == 0, "dscache top --json exits 0 (%s)" % out.stderr.strip())
    return json.loads(out.stdout) if out.returncode == 0 else {"servers": []}


def server_metric(i, name):
    text = urllib.request.urlopen("http://%s/metrics" % https[i], timeout=10).read().decode()
    m = re.search(r"^%s (\S+)$" % name, text, re.M)
    return float(m.group(1)) if m else None


take(100)
procs[0].send_signal(signal.SIGSTOP)
stopped = True
try:
    deadline = time.monotonic() + TIMEOUT_MS / 1e3 / 4
    while loader.stats()["slow_servers"] == 0 and time.monotonic() < deadline:
        take(10)
    t.check(loader.stats()["slow_marks"] >= 1, "the stopped server was marked slow")
    take(50)
finally:
    procs[0].send_signal(signal.SIGCONT)
    stopped = False
# Back in use, then reported to: the loader's figures about server 0 stop changing (nothing of
# its is outstanding any more) and its REPORTs (every 0.5 s) carry them.
deadline = time.monotonic() + TIMEOUT_MS / 1e3 / 4
while loader.stats()["slow_servers"] > 0 and time.monotonic() < deadline:
    take(10)
t.check(loader.stats()["slow_servers"] == 0, "the continued server is back in use")
marks = loader_figure("slow_marks_total", addrs[0])
hedges = loader_figure("hedges_total", addrs[0])
won = loader_figure("hedges_won_total", addrs[0])
wasted = loader_figure("hedge_wasted_bytes_total", addrs[0])
print("loader's view of %s: %s slow marks, %s hedges (%s won), %s wasted bytes" %
      (addrs[0], marks, hedges, won, wasted))
t.check(marks is not None and marks >= 1, "the loader's metrics name the stopped server")

frame, shown = None, None
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    take(5)
    frame = top_json()
    shown = frame["servers"][0].get("stragglers") if frame["servers"] else None
    if shown and shown.get("slow_marks", 0) >= marks and shown.get("slow_now", 1) == 0:
        break
    time.sleep(0.5)
print("top --json for %s: %s" % (addrs[0], json.dumps(frame["servers"][0] if frame else None)))
t.check(shown is not None, "top --json has the stopped server's straggler figures")
if shown:
    t.check(shown["loaders"] == 1, "one loader reports them (%s)" % shown["loaders"])
    t.check(shown["slow_marks"] == marks, "top's slow marks equal the loader's (%s vs %s)" %
            (shown["slow_marks"], marks))
    t.check(shown["slow_now"] == 0, "no loader holds it slow any more")
    # Its requests re-issued before it was continued: the same count on both sides once it
    # answers again (no new hedge of its: it is back in use).
    t.check(shown["hedges"] == loader_figure("hedges_total", addrs[0]),
            "top's hedges equal the loader's (%s vs %s)" %
            (shown["hedges"], loader_figure("hedges_total", addrs[0])))
    t.check(shown["wasted_bytes"] <= loader_figure("hedge_wasted_bytes_total", addrs[0]),
            "top's wasted bytes at most the loader's")
for i in (1, 2):
    other = frame["servers"][i].get("stragglers") if frame else None
    t.check(other is not None and other["slow_marks"] == 0 and other["hedges"] == 0,
            "server %d was not marked slow nor hedged: %s" % (i, other))
for i, s in enumerate(frame["servers"] if frame else []):
    w = s.get("peer_warm") or {}
    t.check(w.get("shards_left") == 0 and w.get("bytes_left") == 0 and "shards" in w and
            "bytes" in w,
            "server %d shows its peer warm-up, done: %s" % (i, w))

# The text frame has the same figures in its STRAGGLERS table.
out = subprocess.run([os.path.join(te.BIN, "dscache"), "top", "--once", "--interval", "0.2",
                      "--server", ",".join(addrs)], capture_output=True, text=True, timeout=60)
row = [ln for ln in out.stdout.splitlines() if ln.startswith(addrs[0] + " ") and "from peers" in ln]
print(out.stdout)
t.check(len(row) == 1 and row[0].split()[3] == "%.0f" % marks,
        "top's STRAGGLERS row shows the slow marks: %s" % row)

# /metrics of the stopped server: the same sums.
t.check(server_metric(0, "dscache_straggler_slow_marks") == marks,
        "server /metrics: dscache_straggler_slow_marks %s == %s" %
        (server_metric(0, "dscache_straggler_slow_marks"), marks))
t.check(server_metric(0, "dscache_straggler_hedges") == shown.get("hedges") if shown else False,
        "server /metrics: dscache_straggler_hedges")
t.check(server_metric(1, "dscache_straggler_slow_marks") == 0,
        "server 1 /metrics: no slow mark")
loader.close()
for p in procs:
    p.send_signal(signal.SIGKILL)
    p.wait()
sys.exit(t.done())
