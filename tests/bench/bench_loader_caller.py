#!/usr/bin/python3
"""The caller's order against the loader's own, on the same data in one run
(docs/order.md#the-callers-order): dscache.Loader(order=DistributedSampler(shuffle=True)) and
dscache.Loader() (its own shuffled local order), batch 256, on 3 KB and 48 KB samples served
from one warmed dscached. Per sample size:
  - samples/s with no compute, the two loaders alternating (own, caller, own, caller, ...)
    --rounds times over --epochs epochs each (the first epoch of each run left out), and the
    median of the per-round ratios caller / own (target >= 0.8x);
  - the stall (share of the step spent in next()) of each at a fixed step: --compute-ms per
    batch (default: twice the own order's mean batch time measured above);
  - wire bytes per epoch over the stored size, for each (--cache-fraction F gives both loaders
    a cache_bytes of F times the decoded dataset: below 1 the caller's random order refetches),
    and requests sent per epoch (the caller's order asks for its chunks by MGET, up to 64 of
    any shards per request; --chunk-size picks the datasets' chunk size, default the
    ingester's 1 MiB).
Prints a markdown table and, with --json, the figures.

usage: /usr/bin/python3 tests/bench/bench_loader_caller.py [--bin DIR] [--rounds N] [--epochs N]
           [--compute-ms MS] [--cache-fraction F] [--chunk-size SIZE] [--json FILE]
DIR holds dscached and dscache (default: build/bin); libdscache.so is found through DSCACHE_LIB
or DIR/../lib. Needs numpy and torch (for DistributedSampler). The server started is killed by
PID before the script exits.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))

BATCH = 256
# name, field, samples: about 96 and 192 MiB, each well inside the loader's default cache_bytes
# (256 MiB) so that neither order fetches a chunk twice per epoch.
SIZES = (("3KB", "x:u8:3072", 32768), ("48KB", "x:u8:49152", 4096))


def start_server(bindir, work, dirs):
    port_file = os.path.join(work, "port")
    log = open(os.path.join(work, "server.log"), "w")
    args = [os.path.join(bindir, "dscached"), "--listen", "127.0.0.1:0", "--http", "off",
            "--port-file", port_file, "--memory", "1G", "--threads", "2", "--warm"]
    for d in dirs:
        args += ["--data", d]
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(1200):
        if os.path.exists(port_file) and os.path.getsize(port_file):
            return proc, "127.0.0.1:" + open(port_file).read().strip()
        if proc.poll() is not None:
            raise RuntimeError("dscached exited: see %s" % log.name)
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("dscached wrote no port file")


def run(make, epochs, compute_s=0.0):
    """Epochs 1 .. epochs - 1 of a loader (epoch 0 warms it): samples/s, stall share, wire
    bytes per epoch."""
    ld, sampler = make()
    samples = wire0 = req0 = 0
    t0 = None
    stall = busy = 0.0
    for e in range(epochs):
        if sampler is not None:
            sampler.set_epoch(e)
        if e == 1:
            st = ld.stats()
            wire0, req0, t0 = st["wire_bytes"], st["requests"], time.perf_counter()
            stall0, compute0 = st["stall_seconds"], st["compute_seconds"]
        for batch in ld:
            if e >= 1:
                samples += len(batch["x"])
            if compute_s > 0:
                end = time.perf_counter() + compute_s
                while time.perf_counter() < end:
                    pass
    seconds = time.perf_counter() - t0
    st = ld.stats()
    stall = st["stall_seconds"] - stall0
    busy = st["compute_seconds"] - compute0
    ld.close()
    return {"samples_per_s": samples / seconds, "stall": stall / (stall + busy),
            "wire_per_epoch": (st["wire_bytes"] - wire0) / (epochs - 1),
            "requests_per_epoch": (st["requests"] - req0) / (epochs - 1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--compute-ms", type=float, default=0.0)
    ap.add_argument("--cache-fraction", type=float, default=0.0,
                    help="cache_bytes of both loaders as this fraction of the dataset's decoded "
                    "bytes (default 0: the loaders' default, 256 MiB, which holds each dataset)")
    ap.add_argument("--chunk-size", default=None, help="the datasets' chunk size (ingest "
                    "--chunk-size, e.g. 64K; default the ingester's)")
    ap.add_argument("--json")
    args = ap.parse_args()
    if "DSCACHE_LIB" not in os.environ:
        os.environ["DSCACHE_LIB"] = os.path.join(args.bin, "..", "lib", "libdscache.so")
    import dscache
    from torch.utils.data import DistributedSampler

    work = tempfile.mkdtemp(prefix="dsc-bench-caller-")
    proc = None
    results = {}
    try:
        dirs = []
        for name, field, n in SIZES:
            d = os.path.join(work, name)
            subprocess.run([os.path.join(args.bin, "dscache"), "ingest", "synthetic", "-o", d,
                            "--name", "b" + name, "--samples", str(n), "--field", field,
                            "--field", "label:i64", "--compress", "lz4", "--seed", "1"] +
                           (["--chunk-size", args.chunk_size] if args.chunk_size else []),
                           check=True, stdout=subprocess.DEVNULL)
            dirs.append(d)
        proc, addr = start_server(args.bin, work, dirs)
        for (name, field, n), d in zip(SIZES, dirs):
            stored = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)
                         if f.endswith(".dsc"))

            sample_bytes = int(field.rsplit(":", 1)[1]) + 8
            cache = {}
            if args.cache_fraction > 0:
                cache["cache_bytes"] = int(args.cache_fraction * n * sample_bytes)

            def own():
                return dscache.Loader(servers=[addr], dataset="b" + name, batch_size=BATCH,
                                      seed=1, **cache), None

            def caller():
                s = DistributedSampler(range(n), num_replicas=1, rank=0, shuffle=True, seed=1)
                return dscache.Loader(servers=[addr], dataset="b" + name, batch_size=BATCH,
                                      seed=1, order=s, **cache), s

            rounds, owns, callers = [], [], []
            for _ in range(args.rounds):
                a = run(own, args.epochs)
                b = run(caller, args.epochs)
                owns.append(a)
                callers.append(b)
                rounds.append(b["samples_per_s"] / a["samples_per_s"])
            step_s = statistics.median(BATCH / r["samples_per_s"] for r in owns)
            compute_s = args.compute_ms / 1e3 if args.compute_ms > 0 else 2 * step_s
            sa = run(own, args.epochs, compute_s)
            sb = run(caller, args.epochs, compute_s)
            results[name] = {
                "own_samples_per_s": statistics.median(r["samples_per_s"] for r in owns),
                "caller_samples_per_s": statistics.median(r["samples_per_s"] for r in callers),
                "ratio_median": statistics.median(rounds),
                "ratio_min": min(rounds), "ratio_max": max(rounds),
                "compute_ms": compute_s * 1e3,
                "own_stall": sa["stall"], "caller_stall": sb["stall"],
                "own_wire_x": statistics.median(r["wire_per_epoch"] for r in owns) / stored,
                "caller_wire_x": statistics.median(r["wire_per_epoch"] for r in callers) / stored,
                "own_requests": statistics.median(r["requests_per_epoch"] for r in owns),
                "caller_requests": statistics.median(r["requests_per_epoch"] for r in callers),
                "samples": n, "stored_bytes": stored,
                "cache_bytes": cache.get("cache_bytes", 0),
            }
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)

    print("| samples | own order samples/s | caller's order samples/s | ratio (median, min-max "
          "of %d rounds) | step (compute) | stall own | stall caller | wire/epoch own | "
          "wire/epoch caller | requests/epoch own / caller |" % args.rounds)
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        print("| %s x %d | %.0f | %.0f | %.2fx (%.2f-%.2f) | %.1f ms | %.1f%% | %.1f%% | %.2fx | "
              "%.2fx | %.0f / %.0f |" % (name, r["samples"], r["own_samples_per_s"], r["caller_samples_per_s"],
                           r["ratio_median"], r["ratio_min"], r["ratio_max"], r["compute_ms"],
                           100 * r["own_stall"], 100 * r["caller_stall"], r["own_wire_x"],
                           r["caller_wire_x"], r["own_requests"], r["caller_requests"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
