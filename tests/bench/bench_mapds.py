#!/usr/bin/python3
"""Map-style access benchmark (dscache.torch.MapDataset over dsc_reader_*), 3 KB and 48 KB
samples, batch 256, one dscached on 127.0.0.1 with the dataset in memory. In one run, per size:
  (a) DataLoader(MapDataset, batch_size=256, sampler=DistributedSampler(shuffle=True)) with 0 and
      2 workers against the loader's own order on the same data (dscache.torch.Dataset through
      DataLoader(batch_size=None)): samples/s and the ratio (target >= 0.8x);
  (b) the same DataLoader over a per-sample np.memmap map-style dataset of the same bytes (an
      .npy file per field, in the page cache), 2 workers: the ratio (target >= 3x);
  (c) ds[i] in a loop at random i: latency p50 / p99 with the chunk cached (warm) and with a
      cache too small to keep it (cold: one GET of the sample's chunk each), against one GET
      round trip of a chunk of that size (bench_rtt's method: one connection, no pipelining);
  (d) bytes on the wire per epoch for a random sampler (DistributedSampler, shuffle) at 1 and 4
      ranks, as a multiple of the stored dataset, epochs 1 and 2 (one MapDataset per rank kept
      across them): with cache_bytes holding the dataset (the sampler's shuffle window is the
      whole dataset), a quarter and a sixteenth of it; with the requests per epoch (whole
      chunks, or sample ranges: RANGE, chosen by the reader).
Prints markdown tables. --wire-only runs (d) alone.

usage: /usr/bin/python3 tests/bench/bench_mapds.py [--bin DIR] [--samples-3k N]
           [--samples-48k N] [--quick] [--wire-only]
DIR holds dscached and dscache (default: build/bin); libdscache.so is found through DSCACHE_LIB
or DIR/../lib. The server started is killed by PID before the script exits.
"""
import argparse
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))

B = 256


def machine():
    model = "?"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "%s, %d cores (nproc), Linux %s" % (model, os.cpu_count(), platform.release())


def start_server(bindir, work, data):
    port_file = os.path.join(work, "port")
    log = open(os.path.join(work, "server.log"), "w")
    proc = subprocess.Popen([os.path.join(bindir, "dscached"), "--listen", "127.0.0.1:0",
                             "--http", "off", "--port-file", port_file, "--log-level", "error",
                             "--threads", "2", "--memory", "1G"] +
                            [x for d in data for x in ("--data", d)],
                            stdout=log, stderr=subprocess.STDOUT)
    for _ in range(400):
        if os.path.exists(port_file) and os.path.getsize(port_file):
            return proc, "127.0.0.1:" + open(port_file).read().strip()
        if proc.poll() is not None:
            raise RuntimeError("dscached exited: see " + log.name)
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("dscached wrote no port file")


def make_dataset(bindir, work, name, samples, sample_bytes):
    """x: u8[sample_bytes - 8] of random bytes, y: i64 index; as .npy files (the memmap
    baseline) and ingested from them (lz4: random bytes are stored raw)."""
    import numpy as np
    rng = np.random.default_rng(1)
    xp, yp = os.path.join(work, name + "-x.npy"), os.path.join(work, name + "-y.npy")
    x = np.lib.format.open_memmap(xp, mode="w+", dtype=np.uint8,
                                  shape=(samples, sample_bytes - 8))
    for s in range(0, samples, 4096):
        e = min(samples, s + 4096)
        x[s:e] = rng.integers(0, 256, (e - s, sample_bytes - 8), dtype=np.uint8)
    x.flush()
    del x
    np.save(yp, np.arange(samples, dtype=np.int64))
    out = os.path.join(work, name)
    subprocess.run([os.path.join(bindir, "dscache"), "ingest", "npy", "-o", out, "--name", name,
                    "x=" + xp, "y=" + yp], check=True, stdout=subprocess.DEVNULL)
    stored = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out)
                 if f.endswith(".dsc"))
    return out, xp, yp, stored


class MemmapDataset:
    """The per-sample baseline: one np.memmap per field, ds[i] copies sample i out."""

    def __init__(self, xp, yp):
        self.xp, self.yp, self.x, self.y = xp, yp, None, None
        import numpy as np
        self.n = np.load(yp, mmap_mode="r").shape[0]

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import numpy as np
        import torch
        if self.x is None:  # opened per worker process
            self.x = np.load(self.xp, mmap_mode="r")
            self.y = np.load(self.yp, mmap_mode="r")
        return {"x": torch.from_numpy(np.array(self.x[i])),
                "y": torch.tensor(int(self.y[i]))}


T0 = time.perf_counter()


def note(what):
    print("[%6.1f s] %s" % (time.perf_counter() - T0, what), file=sys.stderr, flush=True)


class ZeroDataset:
    """The DataLoader's own ceiling: batches of zero tensors of the sample size, made in the
    worker (no data read), through the same worker and IPC path."""

    def __init__(self, n, sample_bytes):
        self.n, self.sample_bytes = n, sample_bytes

    def __len__(self):
        return self.n

    def __getitems__(self, idx):
        import torch
        return {"x": torch.zeros(len(idx), self.sample_bytes - 8, dtype=torch.uint8),
                "y": torch.zeros(len(idx), dtype=torch.int64)}


def rate(dl, limit_s):
    """samples/s over one pass of dl (cut after limit_s seconds), first batch excluded."""
    it = iter(dl)
    first = next(it)
    n, t0 = 0, time.perf_counter()
    del first
    for batch in it:
        n += len(batch["y"])
        if time.perf_counter() - t0 > limit_s:
            break
    return n / (time.perf_counter() - t0)


def pct(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(p / 100 * len(v)))]


def wire_bytes(addr, name, stored, DataLoader, DistributedSampler, dscache, label):
    """(d): per cache size and rank count, the wire bytes (as a multiple of the stored dataset)
    and requests of epochs 1 and 2, all ranks together."""
    out = []
    for cache, cache_what in ((0, "default (256 MiB, holds the dataset)"),
                              (max(1, stored // 4), "a quarter of the dataset"),
                              (max(1, stored // 16), "a sixteenth of the dataset")):
        for world in (1, 4):
            wire, reqs = [0, 0], [0, 0]
            for rank in range(world):
                d = dscache.torch.MapDataset(servers=addr, dataset=name, batch_size=B,
                                             cache_bytes=cache or None, timeout_ms=30000)
                sampler = DistributedSampler(d, num_replicas=world, rank=rank, shuffle=True,
                                             seed=3)
                for epoch in (0, 1):
                    before = d.stats() if epoch else {"wire_bytes": 0, "requests": 0}
                    sampler.set_epoch(epoch)
                    for _ in DataLoader(d, batch_size=B, sampler=sampler):
                        pass
                    st = d.stats()
                    wire[epoch] += st["wire_bytes"] - before["wire_bytes"]
                    reqs[epoch] += st["requests"] - before["requests"]
                d.close()
            out.append((label, cache_what, world, (wire[0] / stored, wire[1] / stored), reqs))
    note("%s: wire bytes done" % label)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--samples-3k", type=int, default=40960)
    ap.add_argument("--samples-48k", type=int, default=4096)
    ap.add_argument("--seconds", type=float, default=6.0, help="cap per throughput pass")
    ap.add_argument("--quick", action="store_true", help="small datasets, short passes")
    ap.add_argument("--wire-only", action="store_true", help="only (d): wire bytes per epoch")
    args = ap.parse_args()
    if args.quick:
        args.samples_3k, args.samples_48k, args.seconds = 8192, 1024, 2.0
    if not os.environ.get("DSCACHE_LIB"):
        lib = os.path.normpath(os.path.join(args.bin, "..", "lib", "libdscache.so"))
        if os.path.exists(lib):
            os.environ["DSCACHE_LIB"] = lib
    import numpy as np
    import torch
    from torch.utils.data import DataLoader, DistributedSampler
    import dscache
    import dscache.torch
    torch.set_num_threads(1)
    work = tempfile.mkdtemp(prefix="bench-mapds-")
    proc = None
    try:
        sets = {}
        for label, samples, size in (("3 KB", args.samples_3k, 3072),
                                     ("48 KB", args.samples_48k, 49152)):
            name = "m%d" % (size // 1024)
            sets[label] = (name, samples) + make_dataset(args.bin, work, name, samples, size)
        note("datasets made")
        proc, addr = start_server(args.bin, work, [v[2] for v in sets.values()])
        rtt = subprocess.run([os.path.join(args.bin, "bench_rtt"), "--rounds", "1",
                              "--requests", "300"], capture_output=True, text=True).stdout
        print("# Map-style access (bench_mapds.py)\n")
        print("Machine: %s. torch %s, numpy %s, batch %d.\n" % (machine(), torch.__version__,
                                                               np.__version__, B))
        print("```\n" + rtt.strip() + "\n```\n")
        rows, lat, wire = [], [], []
        for label, (name, n, ddir, xp, yp, stored) in sets.items():
            if args.wire_only:
                wire += wire_bytes(addr, name, stored, DataLoader, DistributedSampler, dscache,
                                   label)
                continue
            # (a) the loader's own order: warm the server's memory with one epoch first
            lds = dscache.torch.Dataset(servers=addr, dataset=name, batch_size=B, seed=1,
                                        output="torch", timeout_ms=30000)
            for _ in DataLoader(lds, batch_size=None):
                pass
            own = rate(DataLoader(lds, batch_size=None), args.seconds)
            lds.close()
            mds = dscache.torch.MapDataset(servers=addr, dataset=name, batch_size=B,
                                           timeout_ms=30000)
            res = {}
            for workers in (0, 2):
                # Two epochs through one DataLoader (workers kept: each keeps its reader and
                # cache): the first starts with an empty cache, the second finds it full.
                sampler = DistributedSampler(mds, num_replicas=1, rank=0, shuffle=True, seed=1)
                dl = DataLoader(mds, batch_size=B, sampler=sampler, num_workers=workers,
                                persistent_workers=workers > 0)
                for epoch in (0, 1):
                    sampler.set_epoch(epoch)
                    res[(workers, epoch)] = rate(dl, 1e9)
                del dl
            mm = MemmapDataset(xp, yp)
            np.asarray(np.load(xp, mmap_mode="r")).sum()  # in the page cache, as the server's
            sampler = DistributedSampler(mm, num_replicas=1, rank=0, shuffle=True, seed=1)
            base = rate(DataLoader(mm, batch_size=B, sampler=sampler, num_workers=2),
                        args.seconds)
            zero = ZeroDataset(n, 3072 if label == "3 KB" else 49152)
            ceiling = rate(DataLoader(zero, batch_size=B, sampler=range(n), num_workers=2,
                                      collate_fn=lambda b: b), args.seconds)
            note("%s: throughput done" % label)
            rows.append((label, own, res, base, ceiling))
            # (c) latency of ds[i]
            rng = np.random.default_rng(2)
            warm_ds = dscache.MapDataset(servers=addr, dataset=name, timeout_ms=30000)
            for j in range(0, n, B):
                warm_ds[list(range(j, min(n, j + B)))]  # every chunk cached
            cold_ds = dscache.MapDataset(servers=addr, dataset=name, cache_bytes=1,
                                     timeout_ms=30000)
            out = {}
            for what, d in (("warm", warm_ds), ("cold", cold_ds)):
                times = []
                for i in rng.integers(0, n, 2000 if what == "warm" else 400):
                    t0 = time.perf_counter()
                    d[int(i)]
                    times.append((time.perf_counter() - t0) * 1e6)
                out[what] = (pct(times, 50), pct(times, 99))
            st = cold_ds.stats()
            chunk = st["wire_bytes"] / max(1, st["requests"])
            note("%s: latency done" % label)
            lat.append((label, out["warm"], out["cold"], chunk))
            warm_ds.close()
            cold_ds.close()
            wire += wire_bytes(addr, name, stored, DataLoader, DistributedSampler, dscache,
                               label)
            mds.close()
        if args.wire_only:
            rows, lat = [], []
        print("| samples | loader's own order | MapDataset 0 workers, epoch 1 / 2 | MapDataset 2 "
              "workers, epoch 1 / 2 | np.memmap, 2 workers | (a) 0 w / own, epoch 1 / 2 | "
              "(a) 2 w / own, epoch 1 / 2 | (b) 2 w / memmap, epoch 1 / 2 | DataLoader ceiling, "
              "2 workers (zero tensors, no data read) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for label, own, res, base, ceiling in rows:
            print("| %s | %.0f /s | %.0f / %.0f /s | %.0f / %.0f /s | %.0f /s | %.2fx / %.2fx "
                  "| %.2fx / %.2fx | %.2fx / %.2fx | %.0f /s |"
                  % (label, own, res[(0, 0)], res[(0, 1)], res[(2, 0)], res[(2, 1)], base,
                     res[(0, 0)] / own, res[(0, 1)] / own, res[(2, 0)] / own,
                     res[(2, 1)] / own, res[(2, 0)] / base, res[(2, 1)] / base, ceiling))
        print("\nLoad average at the end: %s" % (open("/proc/loadavg").read().split()[:3],))
        print("\n| samples | ds[i] cached chunk p50 / p99 | ds[i] uncached (one GET of the "
              "chunk) p50 / p99 | chunk bytes on the wire |")
        print("|---|---|---|---|")
        for label, warm, cold, chunk in lat:
            print("| %s | %.0f / %.0f us | %.0f / %.0f us | %.0f KiB |"
                  % (label, warm[0], warm[1], cold[0], cold[1], chunk / 1024))
        print("\n| samples | cache_bytes | ranks | wire bytes / stored dataset, epoch 1 / 2 "
              "(all ranks) | requests, epoch 1 / 2 (all ranks) |")
        print("|---|---|---|---|---|")
        for label, cache_what, world, ratio, reqs in wire:
            print("| %s | %s | %d | %.2fx / %.2fx | %d / %d |"
                  % (label, cache_what, world, ratio[0], ratio[1], reqs[0], reqs[1]))
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
