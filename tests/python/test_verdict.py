"""The loader's verdict, induced for real against dscached on loopback: a slow consumer (none),
one decode thread on lz4 data with assist off (decode), a tiny cache_bytes (cache), one of three
servers stopped and continued in bursts with SIGSTOP / SIGCONT (server), a 30 ms delay each way
(a relaying proxy) with 512 KiB in flight (inflight). Each case checks
Loader.stats()["bottleneck"], its suggestion and the metrics text; the servers' STAT lists the
job with its stall. (Network shaping: tests/netns/test_verdict_netns.sh.)"""
import json
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

te.require_tools()
import dscache  # noqa: E402

env = te.Env()
t = te.Checks()
CLI = os.path.join(te.BIN, "dscache")
ds = os.path.join(env.dir, "vds")
subprocess.run([CLI, "ingest", "synthetic", "-o", ds, "--name", "vds", "--samples", "60000",
                "--field", "x:f32:512", "--field", "y:i64", "--compress", "lz4",
                "--shard-size", "2M", "--chunk-size", "128K"], check=True,
               stdout=subprocess.DEVNULL)
servers = [env.start_server(ds) for _ in range(3)]
addrs = [a for _, a in servers]
# Every server reads the dataset once (loads every shard into RAM), so that the cases below
# measure the loader, not cold disk reads.
for a in addrs:
    warm = dscache.Loader(servers=a, dataset="vds", batch_size=1024, shuffle=False,
                          report_seconds=0)
    for _ in warm:
        pass
    warm.close()


def run(seconds, step_s=0.0, stop_when=None, **kw):
    """Iterates for `seconds` (a simulated step of step_s per batch); returns stats()."""
    loader = dscache.Loader(servers=addrs[:1] if "servers" not in kw else kw.pop("servers"),
                            dataset="vds", report_seconds=1, **kw)
    t0 = time.monotonic()
    done = False
    while not done:
        for _ in loader:
            if step_s:
                time.sleep(step_s)
            if time.monotonic() - t0 > seconds:
                done = True
                break
    st = loader.stats()
    text = loader.metrics_text()
    loader.close()
    print("%-8s stall %.1f%% | %s | %s" % (st["bottleneck"], 100 * st["verdict_stall_fraction"],
                                           st["evidence"], st["suggestion"]))
    print("\n".join(x for x in text.splitlines() if x.startswith("dscache_loader_server_")))
    return st, text


def stat(addr):
    out = subprocess.run([CLI, "stat", "--server", addr, "--json"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


# ---- none: the trainer (40 ms a step) is slower than the loader ---------------------------------
# 12 s: the verdict window (5-10 s) then starts after the start-up (connections, first fetches).
st, text = run(12, step_s=0.04, batch_size=64, job="slow-consumer")
t.check(st["bottleneck"] == "none", "slow consumer: verdict none (%s)" % st["bottleneck"])
t.check("trainer is the limit" in st["suggestion"], "none: suggestion says the trainer limits")
t.check('dscache_loader_bottleneck{dataset="vds",stage="none"} 1' in text, "metrics: none")
t.check("# verdict: none" in text, "metrics: verdict comment")
jobs = stat(addrs[0])["jobs"]
mine = [j for j in jobs if j["job"] == "slow-consumer"]
t.check(len(mine) == 1 and mine[0]["rank"] == 0 and 0 <= mine[0]["stall"] < 0.05,
        "STAT lists the job with its stall: %s" % mine)
t.check(mine and mine[0]["samples_per_s"] > 0, "STAT: the job's rate")

# ---- decode: one thread, lz4, next() does not help --------------------------------------------
st, _ = run(7, batch_size=256, decode_threads=1, assist=False, job="decode-bound")
t.check(st["bottleneck"] == "decode", "1 decode thread, no assist: decode (%s)" % st["bottleneck"])
t.check("raise decode_threads from 1 to 2" in st["suggestion"], "decode: suggestion names threads")
t.check(st["stall_waits"]["decode"] > 0, "stall blamed on decode")
# The same loader with more threads and assist is no longer decode-bound by that margin.
jobs = {j["job"]: j for j in stat(addrs[0])["jobs"]}
t.check("decode-bound" in jobs and jobs["decode-bound"]["bottleneck"] == "decode",
        "STAT: the job's bottleneck is reported")
t.check("decode-bound" in jobs and jobs["decode-bound"]["stall"] > 0.01,
        "STAT: the decode-bound job's stall")

# ---- cache: shuffle windows far larger than cache_bytes ---------------------------------------
st, _ = run(7, batch_size=64, cache_bytes=2 << 20, shuffle_window=20000, job="tiny-cache")
t.check(st["bottleneck"] == "cache", "tiny cache: cache (%s)" % st["bottleneck"])
t.check(st["suggestion"].startswith("cache_bytes 2 MiB holds 0.") and "raise it to" in
        st["suggestion"] and "shuffle_window" in st["suggestion"],
        "cache: suggestion with sizes: %s" % st["suggestion"])
t.check(st["refetches"] > 0, "tiny cache: refetches counted")

# ---- server: one of three stopped in bursts ---------------------------------------------------
slow_proc, slow_addr = servers[2]
stop = threading.Event()


def bursts():
    while not stop.is_set():
        os.kill(slow_proc.pid, signal.SIGSTOP)
        time.sleep(0.8)
        os.kill(slow_proc.pid, signal.SIGCONT)
        time.sleep(0.2)
    os.kill(slow_proc.pid, signal.SIGCONT)


burst = threading.Thread(target=bursts)
burst.start()
try:
    # replicas=1: each shard has one owner, so the loader cannot route around the slow one.
    st, _ = run(12, servers=addrs, batch_size=64, job="one-slow-server",
                timeout_ms=20000, replicas=1)
finally:
    stop.set()
    burst.join()
t.check(st["bottleneck"] == "server", "SIGSTOP bursts: server (%s)" % st["bottleneck"])
t.check(st["bottleneck_server"] == slow_addr,
        "the slow server is named: %s (stopped: %s)" % (st["bottleneck_server"], slow_addr))
t.check(slow_addr in st["suggestion"] and "slower than the others" in st["suggestion"],
        "server: suggestion names it")
# Every server the job read from lists it.
for a in addrs:
    names = [j["job"] for j in stat(a)["jobs"]]
    t.check("one-slow-server" in names, "STAT of %s lists the job" % a)

# ---- inflight: a long round trip and a small budget -------------------------------------------
proxy = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "delay_proxy.py"),
                          "30", addrs[0]], stdout=subprocess.PIPE, text=True)
try:
    proxy_addr = "127.0.0.1:%s" % proxy.stdout.readline().strip()
    st, _ = run(12, servers=[proxy_addr], batch_size=64, inflight_bytes=512 << 10,
                job="long-round-trip")
finally:
    proxy.kill()
    proxy.wait()
t.check(st["bottleneck"] == "inflight", "30 ms delay, 512 KiB: inflight (%s)" % st["bottleneck"])
t.check("raise inflight_bytes from 512 KiB to 1 MiB" in st["suggestion"],
        "inflight: suggestion doubles the budget: %s" % st["suggestion"])
sys.exit(t.done())
