#!/usr/bin/env bash
# Writer throughput (MB/s of decoded sample bytes, 1 MB = 10^6 bytes): dscache.Writer (Python)
# against `dscache ingest npy` on the same samples, both reading the same .npy files, both lz4 on
# the default threads (the cores), as the ratio Writer / ingest npy (target >= 0.8). Writer runs
# twice: write_batch over 1 MiB batches and write() per record. A variable-length run
# (input_ids:i32[] of 0..2047 tokens through write_batch) has no ingest npy counterpart and is
# shown against the fixed one. With the lz4 tool installed, `lz4 -b1` on 1 MiB of the same data
# is the compression reference. Each figure: the best of RUNS (default 3) runs. Under a minute on
# 2 cores with the defaults.
# Usage: tests/bench/bench_writer.sh [BUILD_DIR]  (default build/; BENCH_MB=150, RUNS=3, BENCH_TMP)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
cli=$build/bin/dscache
py=${DSC_PYTHON:-/usr/bin/python3}
[ -x "$cli" ] || { echo "bench_writer: $cli not built (cmake --build $build)" >&2; exit 1; }
mb=${BENCH_MB:-150}
runs=${RUNS:-3}
work=$(mktemp -d "${BENCH_TMP:-/tmp}/bench_writer.XXXXXX")
trap 'rm -rf "$work"' EXIT
export PYTHONPATH=$root/client/python DSCACHE_LIB=$build/lib/libdscache.so

# image u8 3x64x64 + label i64, values in runs (lz4 finds about 3x, like ingest synthetic)
"$py" - "$work" "$mb" <<'EOF'
import sys, numpy as np
work, mb = sys.argv[1], int(sys.argv[2])
n = mb * 1000000 // (3 * 64 * 64 + 8)
rng = np.random.default_rng(1)
runs = rng.integers(0, 16, (n, 3 * 64 * 64 // 8), dtype=np.uint8)
img = np.repeat(runs, 8, axis=1).reshape(n, 3, 64, 64)
img[:, :, ::7, ::5] = rng.integers(0, 256, img[:, :, ::7, ::5].shape, dtype=np.uint8)
np.save(work + "/image.npy", img)
np.save(work + "/label.npy", np.arange(n, dtype=np.int64))
open(work + "/chunk.bin", "wb").write(img.reshape(-1)[: 1 << 20].tobytes())
EOF

"$py" - "$work" "$runs" "$cli" <<'EOF'
import json, os, shutil, subprocess, sys, time
import numpy as np
import dscache
work, runs, cli = sys.argv[1], int(sys.argv[2]), sys.argv[3]
fields = {"image": "u8[3,64,64]", "label": "i64"}

def ingest(path):
    subprocess.run([cli, "ingest", "npy", "-o", path, "image=" + work + "/image.npy",
                    "label=" + work + "/label.npy"], check=True, stdout=subprocess.DEVNULL)

def batches(path):
    img = np.asarray(np.load(work + "/image.npy", mmap_mode="r"))  # plain views: no memmap cost per row
    lab = np.asarray(np.load(work + "/label.npy", mmap_mode="r"))
    step = (1 << 20) // (3 * 64 * 64)
    with dscache.Writer(path, fields=fields, progress=False) as w:
        for i in range(0, len(lab), step):
            w.write_batch({"image": img[i:i + step], "label": lab[i:i + step]})

def records(path):
    img = np.asarray(np.load(work + "/image.npy", mmap_mode="r"))  # plain views: no memmap cost per row
    lab = np.asarray(np.load(work + "/label.npy", mmap_mode="r"))
    with dscache.Writer(path, fields=fields, progress=False) as w:
        for i in range(len(lab)):
            w.write({"image": img[i], "label": lab[i]})

raw = len(np.load(work + "/label.npy", mmap_mode="r")) * (3 * 64 * 64 + 8)
# variable length: about the same bytes as input_ids of 0..2047 int32 tokens
rng = np.random.default_rng(2)
n_var = raw // (4 * 1024)
lens = rng.integers(0, 2048, n_var)
tokens = (rng.integers(0, 512, int(lens.sum()), dtype=np.int32))
offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
var_raw = tokens.nbytes
def var(path):
    step = 256
    with dscache.Writer(path, fields={"input_ids": "i32[]"}, progress=False) as w:
        for i in range(0, n_var, step):
            o = offsets[i:i + step + 1]
            w.write_batch({"input_ids": (tokens[o[0]:o[-1]], o - o[0])})

# The paths interleaved, round after round, each figure the best of its rounds: the machine's
# other load hits all of them alike.
best = {}
for _ in range(runs):
    for name, fn in (("ingest", ingest), ("batch", batches), ("record", records), ("var", var)):
        shutil.rmtree(work + "/out", ignore_errors=True)
        s = time.perf_counter()
        fn(work + "/out")
        t = time.perf_counter() - s
        best[name] = min(best.get(name, t), t)
        if name == "ingest":
            m = json.load(open(work + "/out/manifest.json"))
            raw = m["samples"] * m["sample_bytes"]
            stored = sum(os.path.getsize(os.path.join(work, "out", sh["file"])) for sh in m["shards"])
t_ingest, t_batch, t_rec, t_var = best["ingest"], best["batch"], best["record"], best["var"]

mbps = lambda b, t: b / t / 1e6
print("samples: image u8[3,64,64] + label i64, %.1f MB raw, lz4 ratio %.2f, %d cores, best of %d"
      % (raw / 1e6, raw / stored, os.cpu_count(), runs))
print("%-40s %8s %8s %10s" % ("path", "seconds", "MB/s", "vs ingest"))
print("%-40s %8.2f %8.1f %10s" % ("dscache ingest npy (reference)", t_ingest, mbps(raw, t_ingest), "1.00x"))
print("%-40s %8.2f %8.1f %9.2fx" % ("dscache.Writer write_batch (1 MiB)", t_batch, mbps(raw, t_batch), t_ingest / t_batch))
print("%-40s %8.2f %8.1f %9.2fx" % ("dscache.Writer write() per record", t_rec, mbps(raw, t_rec), t_ingest / t_rec))
print("%-40s %8.2f %8.1f %10s" % ("dscache.Writer i32[] 0..2047 (%.0f MB)" % (var_raw / 1e6), t_var, mbps(var_raw, t_var), "-"))
EOF

if command -v lz4 >/dev/null 2>&1; then
    printf 'reference: lz4 -b1 on 1 MiB of the image data, one core: %s\n' \
        "$(lz4 -b1 -i2 "$work/chunk.bin" 2>&1 | tr '\r' '\n' | grep 'MB/s' | tail -1 | sed 's/^.*: *//')"
fi
