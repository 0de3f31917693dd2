#!/usr/bin/python3
"""Mixtures and packing against the single-dataset loader, ratios in one run (docs/mixtures.md,
docs/packing.md), on token documents of a log-normal length distribution (1..8192 tokens, i32)
served from one warmed dscached, at each dataset size of --docs (default 60000 and 6000
documents: 208 MB, more than a loader keeps, so every epoch is read from the server again, as
in training on a corpus; and 21 MB, which the loader keeps after its first epoch, so an epoch
lasts milliseconds and the epochs' turns are a large part of the time):
  - mixture: a three-source mixture (weights 0.6 / 0.3 / 0.1 over three datasets) against
    one loader over a fourth dataset holding the same documents (the same bytes), batch 64,
    samples/s over --seconds of iteration with no compute (epoch after epoch), alternating
    --rounds times; median ratio (target >= 0.9x); and the stall (share of the time in next())
    at a fixed step of 2 ms;
  - packing: pack={"input_ids": 4096} (rows of 4096, 16 rows a batch) against the same loader's
    values + offsets output (batch 64), in tokens/s (target >= 0.8x), and against packing those
    values + offsets batches with numpy on the calling thread (the same greedy split packing:
    input_ids, position_ids, cu_seqlens), median ratios.
Prints a markdown table per dataset size, with the single loader's wire bytes per epoch over the
stored bytes (about 1: read from the server every epoch; about 0: kept by the loader).

usage: /usr/bin/python3 tests/bench/bench_mix_pack.py [--bin DIR] [--docs N[,N...]] [--rounds N]
                                                      [--seconds S]
DIR holds dscached (default: build/bin); libdscache.so through DSCACHE_LIB or DIR/../lib. Each
server started is killed by PID before the script goes on or exits.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
src = os.path.normpath(os.path.join(here, "../.."))
ap = argparse.ArgumentParser()
ap.add_argument("--bin", default=os.path.join(src, "build", "bin"))
ap.add_argument("--docs", default="60000,6000", help="dataset sizes in documents, comma-separated")
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--seconds", type=float, default=1.5, help="iteration measured per rate")
args = ap.parse_args()
try:
    sizes = [int(x) for x in args.docs.split(",")]
    if not sizes or min(sizes) < 100:
        raise ValueError
except ValueError:
    ap.error("--docs: comma-separated document counts of at least 100, not %r" % args.docs)
os.environ.setdefault("DSCACHE_LIB", os.path.join(args.bin, "..", "lib", "libdscache.so"))
sys.path.insert(0, os.path.join(src, "client", "python"))
import numpy as np  # noqa: E402
import dscache  # noqa: E402


def numpy_pack(b, state, length=4096, rows=16):
    """Greedy split packing of a values + offsets batch on this thread; returns the tokens
    packed into full batches."""
    vals, offs = b["input_ids"], b["input_ids_offsets"]
    buf = state.setdefault("buf", [])
    buf.append(vals)
    state["n"] = state.get("n", 0) + len(vals)
    out = 0
    while state["n"] >= length * rows:
        flat = np.concatenate(buf)
        take = flat[: length * rows]
        state["buf"] = [flat[length * rows:]]
        state["n"] -= length * rows
        # document boundaries of the consumed tokens -> positions and cu_seqlens
        starts = np.zeros(length * rows, dtype=bool)
        ends = np.asarray(offs[1:], dtype=np.int64)
        starts[0] = True
        starts[ends[ends < length * rows]] = True
        starts[::length] = True
        idx = np.flatnonzero(starts)
        pos = np.arange(length * rows) - np.repeat(idx, np.diff(np.append(idx, length * rows)))
        cu = np.append(idx, length * rows).astype(np.int32)
        tokens = take.reshape(rows, length)
        pos = pos.reshape(rows, length).astype(np.int32)
        out += tokens.size + 0 * int(pos[0, 0]) + 0 * len(cu)
    return out


def rate(make, what, info=None):
    """(units/s) over args.seconds of iteration after one warm-up batch, across epochs (the
    next call after an epoch's end starts the next). info: a dict given the loader's wire
    bytes and epochs."""
    ld = make()
    it = iter(ld)
    next(it)
    got, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < args.seconds:
        try:
            b = next(it)
        except StopIteration:
            continue
        got += what(b)
    dt = time.perf_counter() - t0
    if info is not None:
        st = ld.stats()
        info["wire_bytes"], info["epochs"] = st["wire_bytes"], st["epoch"] + 1
    ld.close()
    return got / dt


def stall(make, steps, compute_s):
    """Share of the wall time spent in next() with compute_s of work a step (a sleep: the GIL
    released, as a trainer waiting on its GPU)."""
    ld = make()
    it = iter(ld)
    next(it)
    waited, t0 = 0.0, time.perf_counter()
    for _ in range(steps):
        a = time.perf_counter()
        try:
            next(it)
        except StopIteration:  # the loader's epoch ended: the next call starts the next
            next(it)
        waited += time.perf_counter() - a
        time.sleep(compute_s)
    total = time.perf_counter() - t0
    ld.close()
    return waited / total


def run_size(ndocs):
    """Writes the four datasets of ndocs documents, serves them from one dscached, measures;
    prints the table."""
    work = tempfile.mkdtemp(prefix="dsc-bench-mix-")
    proc = None
    try:
        rng = np.random.default_rng(1)
        lengths = np.clip(np.exp(rng.normal(6.0, 1.3, ndocs)), 1, 8192).astype(np.int64)
        docs = [rng.integers(0, 50000, int(k), dtype=np.int32) for k in lengths]
        parts = {"web": docs[: ndocs * 6 // 10], "code": docs[ndocs * 6 // 10: ndocs * 9 // 10],
                 "books": docs[ndocs * 9 // 10:], "all": docs}
        dirs = []
        for name, ds in parts.items():
            d = os.path.join(work, name)
            with dscache.Writer(d, name=name, fields={"input_ids": "i32[]"}) as w:
                for x in ds:
                    w.write({"input_ids": x})
            dirs.append(d)
        port_file = os.path.join(work, "port")
        cmd = [os.path.join(args.bin, "dscached"), "--listen", "127.0.0.1:0", "--http", "off",
               "--port-file", port_file, "--log-level", "error"]
        for d in dirs:
            cmd += ["--data", d]
        proc = subprocess.Popen(cmd)
        for _ in range(200):
            if os.path.exists(port_file) and os.path.getsize(port_file) > 0:
                break
            time.sleep(0.05)
        addr = "127.0.0.1:" + open(port_file).read().strip()
        total = int(lengths.sum())
        print("## %d documents, %d tokens (mean %.0f), %.1f MB" % (ndocs, total, total / ndocs,
                                                                   total * 4 / 1e6))
        single = lambda: dscache.Loader(servers=addr, dataset="all", batch_size=64,  # noqa
                                        seed=0)
        mix = lambda: dscache.Loader(sources=[dscache.Source("web", weight=0.6),  # noqa
                                              dscache.Source("code", weight=0.3),
                                              dscache.Source("books", weight=0.1)],
                                     servers=addr, batch_size=64, seed=0)
        packed = lambda: dscache.Loader(servers=addr, dataset="all", batch_size=16,  # noqa
                                        seed=0, pack={"input_ids": 4096})
        samples = lambda b: len(b["input_ids_offsets"]) - 1  # noqa
        tokens_vo = lambda b: len(b["input_ids"])  # noqa
        # The tokens of a packed batch from its segments (a few per document), not a pass over
        # every token slot: the count costs the packed side no more than len() the other.
        tokens_packed = lambda b: int(b["cu_seqlens"][-1]) - int(  # noqa
            np.diff(b["cu_seqlens"])[b["segment_index"] < 0].sum())

        def numpy_loader():
            ld = dscache.Loader(servers=addr, dataset="all", batch_size=64, seed=0)
            state = {}

            class W:
                def __iter__(self):
                    while True:  # epoch after epoch
                        for b in ld:
                            yield {"n": numpy_pack(b, state)}

                def close(self):
                    ld.close()
            return W()

        res = {"mix": [], "pack": [], "pack_np": [], "stall": [], "pstall": []}
        info = {}
        for r in range(args.rounds):
            s1 = rate(single, samples, info)
            s2 = rate(mix, lambda b: len(b["source"]))
            t1 = rate(single, tokens_vo)
            t2 = rate(packed, tokens_packed)
            t3 = rate(numpy_loader, lambda b: b["n"])
            res["mix"].append((s1, s2))
            res["pack"].append((t1, t2))
            res["pack_np"].append((t3, t2))
            res["stall"].append((stall(single, 200, 0.002), stall(mix, 200, 0.002)))
            res["pstall"].append((
                stall(single, 100, 0.004), stall(packed, 100, 0.004),
                stall(lambda: dscache.Loader(servers=addr, dataset="all", batch_size=16, seed=0,
                                             pack={"input_ids": 4096}, pack_ahead=0),
                      100, 0.004)))
            print("round %d: single %.0f samples/s, mixture %.0f; values+offsets %.2fM "
                  "tokens/s, packed %.2fM, numpy packing %.2fM"
                  % (r, s1, s2, t1 / 1e6, t2 / 1e6, t3 / 1e6))
        per_epoch = info["wire_bytes"] / max(1, info["epochs"] - 1) / (total * 4)
        print("single loader: %d epochs in %.1f s, wire bytes per epoch after the first / "
              "stored tokens' bytes: %.2f" % (info["epochs"], args.seconds, per_epoch))
        print("stall at a fixed step (2 ms of compute, batch 64): single %.1f%%, mixture %.1f%% "
              "(medians)" % (100 * statistics.median(a for a, _ in res["stall"]),
                             100 * statistics.median(b for _, b in res["stall"])))
        print("stall at a fixed step (4 ms): values+offsets %.1f%%, packed on the packer's "
              "thread %.1f%%, packed on the caller's thread %.1f%% (medians)"
              % tuple(100 * statistics.median(x[i] for x in res["pstall"]) for i in range(3)))
        print()
        print("| comparison (%d documents) | baseline | candidate | median ratio |" % ndocs)
        print("|---|---|---|---|")
        for key, label, unit in (("mix", "three-source mixture / single loader", "samples/s"),
                                 ("pack", "pack 4096 / values+offsets", "tokens/s"),
                                 ("pack_np", "pack 4096 / numpy packing on the caller's thread",
                                  "tokens/s")):
            base = statistics.median(a for a, _ in res[key])
            cand = statistics.median(b for _, b in res[key])
            ratio = statistics.median(b / a for a, b in res[key])
            scale = 1 if unit == "samples/s" else 1e6
            suffix = "" if unit == "samples/s" else "M"
            print("| %s | %.2f%s %s | %.2f%s %s | %.2fx |" % (label, base / scale, suffix, unit,
                                                            cand / scale, suffix, unit, ratio))
        print()
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)


for n in sizes:
    run_size(n)
