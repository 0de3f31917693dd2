"""The loader's verdict, induced for real against dscached on loopback: a slow consumer (none),
one decode thread on lz4 data with assist off (decode), a tiny cache_bytes (cache), one of three
servers stopped 80 ms of every 100 ms with SIGSTOP / SIGCONT (server: slow, but it answers, so no
slow mark moves its work away), a 30 ms delay each way
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
    print("         decode threads busy %.0f%% of %.1f s (summed)" % (100 * busy(st),
                                                                   st["wall_seconds"]))
    print("\n".join(x for x in text.splitlines() if x.startswith("dscache_loader_server_")))
    return st, text


def busy(st):
    """The share of the run's wall time the decode threads spent decoding and collating, summed
    (a wall-clock figure: on a busy machine it counts the waits for a core too)."""
    return (st["decode_seconds"] + st["collate_seconds"]) / st["wall_seconds"]


def cpu_share(seconds=0.5):
    """The share of one core this process gets when it asks for one: a spin of `seconds`, its
    thread's CPU time over the wall time (about 1 on an idle machine, less beside other work)."""
    w0, c0 = time.monotonic(), time.thread_time()
    while time.monotonic() - w0 < seconds:
        pass
    return (time.thread_time() - c0) / (time.monotonic() - w0)


# Each case's premise is a machine with a core to spare for each stage: on a busy one the servers
# (other processes) deliver slower than one thread decodes, a 40 ms step outruns a starved loader,
# and the verdict then rightly names another stage (seen beside other builds: fetch for the decode
# and the slow-consumer cases, this process getting 9-14% of a core). So a case runs up to three
# times, each run that names another stage followed by a measure of the CPU this process gets when
# it asks for a core; where every run named another stage while that share was under 0.8 (the
# machine, not the verdict), the case is skipped, saying so (the test then exits 77 once the other
# cases have run); a wrong verdict with the CPU there is a failure.
skipped = []


def case(name, expect, attempt_run):
    """Runs attempt_run(job) (-> (stats, metrics text)) until the verdict is `expect`, three times
    at most, with the job names name-1, name-2, ...; returns (stats, text, job), or None when the
    case is skipped (every run named another stage on a machine short of CPU)."""
    shares = []
    for attempt in range(1, 4):
        job = "%s-%d" % (name, attempt)
        st, text = attempt_run(job)
        if st["bottleneck"] == expect:
            return st, text, job
        shares.append(cpu_share())
        print("%s, run %d: %s, not %s, with %.0f%% of a core to be had" % (
            name, attempt, st["bottleneck"], expect, 100 * shares[-1]))
    said = "/".join("%.2f" % c for c in shares)
    if max(shares) < 0.8:
        skipped.append("%s: %s was not the verdict in 3 runs, on a machine that gave this process "
                       "%s of a core (under 0.8)" % (name, expect, said))
        return None
    t.check(False, "%s: verdict %s in 3 runs, not %s (%s of a core)" % (
        name, st["bottleneck"], expect, said))
    return None


def stat(addr):
    out = subprocess.run([CLI, "stat", "--server", addr, "--json"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


# ---- none: the trainer (40 ms a step) is slower than the loader ---------------------------------
# 12 s: the verdict window (5-10 s) then starts after the start-up (connections, first fetches).
got = case("slow-consumer", "none", lambda job: run(12, step_s=0.04, batch_size=64, job=job))
if got:
    st, text, job = got
    t.check("trainer is the limit" in st["suggestion"], "none: suggestion says the trainer limits")
    t.check('dscache_loader_bottleneck{dataset="vds",stage="none"} 1' in text, "metrics: none")
    t.check("# verdict: none" in text, "metrics: verdict comment")
    jobs = stat(addrs[0])["jobs"]
    mine = [j for j in jobs if j["job"] == job]
    t.check(len(mine) == 1 and mine[0]["rank"] == 0 and 0 <= mine[0]["stall"] < 0.05,
            "STAT lists the job with its stall: %s" % mine)
    t.check(mine and mine[0]["samples_per_s"] > 0, "STAT: the job's rate")

# ---- decode: one thread, lz4, next() does not help --------------------------------------------
got = case("decode-bound", "decode", lambda job: run(7, batch_size=256, decode_threads=1,
                                                      assist=False, job=job))
if got:
    st, _, job = got
    t.check("raise decode_threads from 1 to 2" in st["suggestion"],
            "decode: suggestion names threads")
    t.check(st["stall_waits"]["decode"] > 0, "stall blamed on decode")
    jobs = {j["job"]: j for j in stat(addrs[0])["jobs"]}
    t.check(job in jobs and jobs[job]["bottleneck"] == "decode",
            "STAT: the job's bottleneck is reported")
    t.check(job in jobs and jobs[job]["stall"] > 0.01, "STAT: the decode-bound job's stall")

# ---- cache: shuffle windows far larger than cache_bytes ---------------------------------------
got = case("tiny-cache", "cache", lambda job: run(7, batch_size=64, cache_bytes=2 << 20,
                                                  shuffle_window=20000, job=job))
if got:
    st = got[0]
    t.check(st["suggestion"].startswith("cache_bytes 2 MiB holds 0.") and "raise it to" in
            st["suggestion"] and "shuffle_window" in st["suggestion"],
            "cache: suggestion with sizes: %s" % st["suggestion"])
    t.check(st["refetches"] > 0, "tiny cache: refetches counted")

# ---- server: one of three stopped in bursts ---------------------------------------------------
slow_proc, slow_addr = servers[2]


def one_slow_server(job):
    """A server that runs 20% of the time in short bursts: slow but live. Each pause (80 ms) is
    under the loader's straggler threshold (100 ms at least, docs/cluster.md), so PINGs are
    answered and no slow mark moves its chunks elsewhere: it stays the limit. (Long pauses are the
    straggler case: the loader routes around them, python_test_hedge.)"""
    stop = threading.Event()

    def bursts():
        while not stop.is_set():
            os.kill(slow_proc.pid, signal.SIGSTOP)
            time.sleep(0.08)
            os.kill(slow_proc.pid, signal.SIGCONT)
            time.sleep(0.02)
        os.kill(slow_proc.pid, signal.SIGCONT)

    burst = threading.Thread(target=bursts)
    burst.start()
    try:
        return run(12, servers=addrs, batch_size=64, job=job, timeout_ms=20000)
    finally:
        stop.set()
        burst.join()


got = case("one-slow-server", "server", one_slow_server)
if got:
    st, _, job = got
    t.check(st["bottleneck_server"] == slow_addr,
            "the slow server is named: %s (stopped: %s)" % (st["bottleneck_server"], slow_addr))
    t.check(slow_addr in st["suggestion"] and "slower than the others" in st["suggestion"],
            "server: suggestion names it")
    t.check(st["slow_marks"] == 0, "a slow but live server is not marked slow (%d marks)"
            % st["slow_marks"])
    # Every server the job read from lists it.
    for a in addrs:
        names = [j["job"] for j in stat(a)["jobs"]]
        t.check(job in names, "STAT of %s lists the job" % a)


# ---- inflight: a long round trip and a small budget -------------------------------------------
def long_round_trip(job):
    proxy = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__),
                                                           "delay_proxy.py"), "30", addrs[0]],
                             stdout=subprocess.PIPE, text=True)
    try:
        proxy_addr = "127.0.0.1:%s" % proxy.stdout.readline().strip()
        return run(12, servers=[proxy_addr], batch_size=64, inflight_bytes=512 << 10, job=job)
    finally:
        proxy.kill()
        proxy.wait()


got = case("long-round-trip", "inflight", long_round_trip)
if got:
    st = got[0]
    t.check("raise inflight_bytes from 512 KiB to 1 MiB" in st["suggestion"],
            "inflight: suggestion doubles the budget: %s" % st["suggestion"])
if skipped and not t.failures:
    te.skip("; ".join(skipped) + " (the other cases passed)")
sys.exit(t.done())
