#!/usr/bin/python3
"""Cache policy benchmark: minio vs lru on a dataset 1.5x the server's memory, read by the real
loader (dscache.Loader) for several shuffled epochs. Per epoch: the server's hit rate (STAT
hits/misses deltas), bytes it read from disk (whole-shard loads + read-through), loader
throughput. Prints a markdown table.

usage: /usr/bin/python3 tests/bench/bench_policy.py [--bin DIR] [--epochs N] [--shard-mb MB]
           [--shards N] [--memory-mb MB]
DIR holds dscached and dscache (default: build/bin); libdscache.so is found through DSCACHE_LIB
or DIR/../lib. Every server started is killed by PID before the script exits.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


def metrics(http):
    text = urllib.request.urlopen(f"http://{http}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def start_server(bindir, work, data, memory, policy):
    port_file = os.path.join(work, f"{policy}.port")
    hport_file = os.path.join(work, f"{policy}.hport")
    log = open(os.path.join(work, f"server-{policy}.log"), "w")
    proc = subprocess.Popen([os.path.join(bindir, "dscached"), "--listen", "127.0.0.1:0",
                             "--http", "127.0.0.1:0", "--port-file", port_file,
                             "--http-port-file", hport_file, "--data", data,
                             "--memory", f"{memory}M", "--policy", policy, "--threads", "2"],
                            stdout=log, stderr=subprocess.STDOUT)
    for _ in range(400):
        if os.path.exists(port_file) and os.path.getsize(port_file) and \
                os.path.exists(hport_file) and os.path.getsize(hport_file):
            break
        if proc.poll() is not None:
            raise RuntimeError(f"dscached ({policy}) exited: see {log.name}")
        time.sleep(0.05)
    else:
        proc.kill()
        raise RuntimeError("dscached did not write its ports")
    addr = "127.0.0.1:" + open(port_file).read().strip()
    http = "127.0.0.1:" + open(hport_file).read().strip()
    for _ in range(400):
        try:
            urllib.request.urlopen(f"http://{http}/readyz", timeout=2)
            break
        except Exception:
            time.sleep(0.05)
    return proc, addr, http


def run_policy(dscache, bindir, work, data, memory, policy, epochs, batch, cache_mb, window):
    proc, addr, http = start_server(bindir, work, data, memory, policy)
    rows = []
    try:
        loader = dscache.Loader(servers=addr, dataset="polds", batch_size=batch, seed=1,
                                shuffle=True, shuffle_window=window,
                                cache_bytes=cache_mb << 20, prefetch=4)
        with loader:
            for epoch in range(epochs):
                m0 = metrics(http)
                loader.set_epoch(epoch)
                t0 = time.perf_counter()
                samples = 0
                for b in loader:
                    samples += len(next(iter(b.values())))
                secs = time.perf_counter() - t0
                m1 = metrics(http)
                d = {k: m1.get(k, 0) - m0.get(k, 0) for k in m1}
                hits, misses = d["dscache_hits_total"], d["dscache_misses_total"]
                disk = d["dscache_loaded_bytes_total"] + d["dscache_read_through_bytes_total"]
                rows.append({
                    "policy": policy, "epoch": epoch + 1, "gets": int(hits + misses),
                    "hit_rate": hits / max(hits + misses, 1), "disk_mb": disk / 2**20,
                    "served_mb": d["dscache_bytes_served_total"] / 2**20,
                    "evictions": int(d["dscache_evictions_total"]),
                    "read_through": int(d["dscache_read_through_total"]),
                    "samples_s": samples / secs, "mb_s": samples * sample_bytes(data) / secs / 1e6,
                    "seconds": secs, "samples": samples})
        rows[-1]["metadata"] = int(metrics(http).get("dscache_metadata_bytes", 0))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return rows


def sample_bytes(data):
    return json.load(open(os.path.join(data, "manifest.json")))["sample_bytes"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.environ.get("DSC_BIN", os.path.join(ROOT, "build", "bin")))
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--shard-mb", type=int, default=16)
    ap.add_argument("--shards", type=int, default=12)
    ap.add_argument("--memory-mb", type=int, default=0,
                    help="server --memory (default: dataset / 1.5, rounded up to whole shards)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--cache-mb", type=int, default=64,
                    help="loader decoded-chunk budget (below the dataset: a trainer cannot hold it)")
    ap.add_argument("--window", type=int, default=1024, help="loader shuffle window (samples)")
    args = ap.parse_args()
    bindir = os.path.abspath(args.bin)
    for exe in ("dscached", "dscache"):
        if not os.access(os.path.join(bindir, exe), os.X_OK):
            print(f"SKIP: {bindir}/{exe} not built")
            return 77
    os.environ.setdefault("DSCACHE_LIB", os.path.join(bindir, "..", "lib", "libdscache.so"))
    sys.path.insert(0, os.path.join(ROOT, "client", "python"))
    import dscache

    work = tempfile.mkdtemp(prefix="bench_policy.")
    try:
        data = os.path.join(work, "ds")
        # 16 KiB samples (f32 x 4096), 1 MiB chunks, shard_mb MiB shards, raw (no lz4) so that
        # disk bytes and served bytes compare directly.
        samples = args.shards * args.shard_mb * 64
        subprocess.run([os.path.join(bindir, "dscache"), "ingest", "synthetic", "-o", data,
                        "--name", "polds", "--samples", str(samples), "--field", "x:f32:4096",
                        "--compress", "none", "--shard-size", f"{args.shard_mb}M",
                        "--chunk-size", "1M"], check=True, stdout=subprocess.DEVNULL)
        m = json.load(open(os.path.join(data, "manifest.json")))
        dataset_mb = sum(s["bytes"] for s in m["shards"]) / 2**20
        shard_file_mb = m["shards"][0]["bytes"] / 2**20
        memory = args.memory_mb
        if memory == 0:
            # dataset / 1.5 worth of whole shards, plus room for the files' headers and indexes.
            fit = int(args.shards / 1.5)
            memory = int(fit * shard_file_mb) + 2
        rows = []
        for policy in ("minio", "lru"):
            rows += run_policy(dscache, bindir, work, data, memory, policy, args.epochs,
                               args.batch, args.cache_mb, args.window)
        print(f"\ndataset: {args.shards} shards x {shard_file_mb:.2f} MiB = {dataset_mb:.1f} MiB "
              f"(1 MiB chunks, raw), server --memory {memory}M "
              f"({dataset_mb / memory:.2f}x), loader: {args.epochs} shuffled epochs, batch "
              f"{args.batch}, shuffle window {args.window} samples, client chunk budget "
              f"{args.cache_mb} MiB; shard files in the page "
              f"cache, so 'disk' bytes are what the server read, not device time\n")
        print("| policy | epoch | GETs | hit rate | read from disk (MiB) | served (MiB) "
              "| evictions | read-throughs | loader samples/s | loader MB/s |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['policy']} | {r['epoch']} | {r['gets']} | {r['hit_rate'] * 100:.1f}% "
                  f"| {r['disk_mb']:.1f} | {r['served_mb']:.1f} | {r['evictions']} "
                  f"| {r['read_through']} | {r['samples_s']:.0f} | {r['mb_s']:.0f} |")
        for r in rows:
            if "metadata" in r:
                print(f"\n{r['policy']}: server metadata {r['metadata']} bytes")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
