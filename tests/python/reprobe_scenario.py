"""The restarted-server scenario shared by test_reprobe.py and tests/bench/bench_reprobe.py:
three clustered dscached on 127.0.0.1 (--replicas 2, --warm), one paced loader streaming; rounds
times the first server is stopped (SIGTERM), started again on its address and waited for until
/readyz answers 200, then the time until the loader's bytes from it grow again (its per-server
metric dscache_loader_server_bytes_total) is measured."""
import os
import re
import subprocess
import threading
import time
import urllib.request
from typing import List, Tuple

import dsc_testenv as te
import numpy as np
import dscache


def run(env: "te.Env", rounds: int) -> Tuple[List[float], List[float], List[Exception]]:
    """Runs the scenario: returns (delays after readiness, stop-to-ready times, the loader's
    errors), one entry per round for the first two."""
    rng = np.random.default_rng(3)
    N = 40000
    ds = env.ingest_npy("rp", {"x": rng.standard_normal((N, 64)).astype(np.float32),
                               "y": np.arange(N, dtype=np.int64)})
    members = os.path.join(env.dir, "members")

    def start(i, listen="127.0.0.1:0"):
        port_file = os.path.join(env.dir, "port.%d" % i)
        http_file = os.path.join(env.dir, "hport.%d" % i)
        for f in (port_file, http_file):
            if os.path.exists(f):
                os.unlink(f)
        proc = subprocess.Popen(te.DIE_WITH_TEST + [
            os.path.join(te.BIN, "dscached"), "--listen", listen, "--http", "127.0.0.1:0",
            "--port-file", port_file, "--http-port-file", http_file, "--log-level", "error",
            "--threads", "1", "--data", ds, "--replicas", "2", "--members-file", members, "--warm",
            "--memory", "64M"])
        env.procs.append(proc)
        for _ in range(400):
            if all(os.path.exists(p) and os.path.getsize(p) > 0 for p in (port_file, http_file)):
                break
            time.sleep(0.01)
        return (proc, "127.0.0.1:%s" % open(port_file).read().strip(),
                "127.0.0.1:%s" % open(http_file).read().strip())

    def ready(http):
        try:
            return urllib.request.urlopen("http://%s/readyz" % http, timeout=1).status == 200
        except OSError:
            return False

    servers = [start(i) for i in range(3)]
    with open(members + ".tmp", "w") as f:
        f.write("\n".join(s[1] for s in servers) + "\n")
    os.rename(members + ".tmp", members)
    time.sleep(1.5)
    addr0 = servers[0][1]
    loader = dscache.Loader(servers=[s[1] for s in servers], dataset="rp", batch_size=64, seed=1,
                            replicas=2, timeout_ms=30000, cache_bytes=1 << 20)
    stop = threading.Event()
    errors = []

    def consume():
        try:
            while not stop.is_set():
                for _ in loader:
                    time.sleep(0.004)
                    if stop.is_set():
                        break
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    th = threading.Thread(target=consume)
    th.start()

    def bytes_from(addr):
        m = re.search(r'^dscache_loader_server_bytes_total\{dataset="rp",server="%s"\} (\S+)$' %
                      re.escape(addr), loader.metrics_text(), re.M)
        return float(m.group(1)) if m else 0.0

    time.sleep(2)
    delays, downs = [], []
    for r in range(rounds):
        proc = servers[0][0]
        t_stop = time.monotonic()
        proc.terminate()
        proc.wait()
        servers[0] = start(0, listen=addr0)
        while not ready(servers[0][2]):
            time.sleep(0.005)
        t_ready = time.monotonic()
        before = bytes_from(addr0)
        while bytes_from(addr0) <= before and time.monotonic() - t_ready < 30:
            time.sleep(0.005)
        delays.append(time.monotonic() - t_ready)
        downs.append(t_ready - t_stop)
        print("round %d: down %.2f s (stop to ready), loader back %.2f s after ready" %
              (r + 1, downs[-1], delays[-1]), flush=True)
        time.sleep(1)
    stop.set()
    th.join()
    loader.close()
    return delays, downs, errors
