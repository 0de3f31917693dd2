#!/usr/bin/env bash
# The main job, on one machine: installs what is missing, builds dscache, makes the default
# dataset if it is missing (a synthetic image set: 20000 samples of image u8 3x32x32 + label
# i64, about 60 MB, lz4; plus an uncompressed copy of the same samples for the second baseline)
# and verifies it, starts a local dscached (port 0, --port-file), and trains a small torch model
# through dscache.Loader, each step also spending --compute-ms of simulated accelerator time;
# then the same loop fed by two file-reading baselines through torch's DataLoader:
#   naive: per sample, read the stored bytes of its lz4 chunk and decode the whole chunk;
#   pread: per sample, preadv only the sample's bytes from the uncompressed copy.
# Before each baseline, that dataset's files (only those) are evicted from the page cache with
# fsync + posix_fadvise(DONTNEED). Prints throughput and data stall side by side, then draws the
# loader's throughput and stall over time with its verdict into $DEMO_DIR/dscache-demo.png
# (dscache bench --plot); stops the server it started. On a fresh machine the first run spends
# most of its time in apt-get (torch alone is about a gigabyte installed); once installed and
# built, about 2 minutes on 2 cores (1 min 56 s at load average 1-3; 13 min 40 s at 13-15), most
# of it the naive baseline's (docs/benchmarks.md).
# With a GPU that torch sees, the model trains on it (--device auto, the default): dscache hands
# out batches already on the device; the baselines pin and copy them.
# Usage: deploy/local/demo.sh [--compute-ms MS] [--steps N] [--batch-size B] [--workers W]
#        [--device auto|cpu|cuda:N]
#        DEMO_DIR=... (data, default .demo/), DEMO_SAMPLES=N, DEMO_BUILD_DIR=...
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
demo_dir=${DEMO_DIR:-$root/.demo}
samples=${DEMO_SAMPLES:-20000}
build=${DEMO_BUILD_DIR:-$root/build}
compute_ms=5
steps=300
batch=256
workers=2
device=auto
while [ $# -gt 0 ]; do
    case "$1" in
    --compute-ms) compute_ms=${2:?--compute-ms needs a value}; shift 2 ;;
    --steps) steps=${2:?--steps needs a value}; shift 2 ;;
    --batch-size) batch=${2:?--batch-size needs a value}; shift 2 ;;
    --workers) workers=${2:?--workers needs a value}; shift 2 ;;
    --device) device=${2:?--device needs a value}; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "demo: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
step() { printf '\n== %s ==\n' "$*"; }
die() { echo "demo: $*" >&2; exit 1; }

step "setup: packages"
bash deploy/local/setup.sh --demo || die "package setup failed (see above)"

step "build ($build): the server, the CLI and the library"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null || die "cmake configure failed"
# Only what the demo runs (the tests are tests/run.sh's to build): the Python binding's compiled
# next() too where python3-dev made it a target.
targets=(dscached dscache_cli dscache)
cmake --build "$build" --target help 2>/dev/null | grep -q dscache_fastpath && targets+=(dscache_fastpath)
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" >/dev/null ||
    die "build failed: run 'cmake --build $build' to see why"
cli=$build/bin/dscache
[ -x "$cli" ] || die "$cli was not built"
echo "built $cli ($("$cli" --version))"

if [ -f "$demo_dir/cifar-synth/manifest.json" ]; then
    step "dataset: $demo_dir/cifar-synth exists (remove it to make it again)"
else
    step "ingest: $samples synthetic samples (image u8 3x32x32, label i64) -> $demo_dir/cifar-synth"
    mkdir -p "$demo_dir"
    "$cli" ingest synthetic -o "$demo_dir/cifar-synth" --name cifar-synth --samples "$samples" \
        --field image:u8:3x32x32 --field label:i64 --seed 1 --compress lz4 \
        --shard-size 16M --chunk-size 1M
fi

if [ -f "$demo_dir/cifar-synth-raw/manifest.json" ]; then
    step "dataset: $demo_dir/cifar-synth-raw exists (the uncompressed copy for the pread baseline)"
else
    step "ingest: the same samples uncompressed -> $demo_dir/cifar-synth-raw (pread baseline)"
    "$cli" ingest synthetic -o "$demo_dir/cifar-synth-raw" --name cifar-synth-raw \
        --samples "$samples" --field image:u8:3x32x32 --field label:i64 --seed 1 \
        --compress none --shard-size 16M --chunk-size 1M
fi

step "inspect: every shard and chunk"
"$cli" inspect "$demo_dir/cifar-synth"

step "serve: dscached on 127.0.0.1 (port 0)"
server_pid=""
cleanup() {
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
        echo "demo: stopped dscached (pid $server_pid)"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
port_file="$demo_dir/dscached.port"
rm -f "$port_file"
"$build/bin/dscached" --data "$demo_dir/cifar-synth" --listen 127.0.0.1:0 --http 127.0.0.1:0 \
    --port-file "$port_file" --memory 512M --warm --log-level warn &
server_pid=$!
for _ in $(seq 100); do
    [ -s "$port_file" ] && break
    kill -0 "$server_pid" 2>/dev/null || die "dscached exited at start-up"
    sleep 0.1
done
[ -s "$port_file" ] || die "dscached wrote no port file"
addr="127.0.0.1:$(cat "$port_file")"
echo "dscached pid $server_pid serving cifar-synth on $addr"

py=/usr/bin/python3
"$py" -c 'import numpy, torch' 2>/dev/null || die "$py lacks numpy or torch (deploy/local/setup.sh installs them)"
export DSCACHE_LIB="$build/lib/libdscache.so"
train=(deploy/local/train_demo.py --dataset cifar-synth --dir "$demo_dir/cifar-synth"
       --batch-size "$batch" --compute-ms "$compute_ms" --device "$device")

step "train: $steps steps of batch $batch, ${compute_ms} ms simulated compute per step (device $device)"
dsc_json=$("$py" "${train[@]}" --mode dscache --servers "$addr" --steps "$steps" --json) ||
    die "training through dscache failed"
# The naive baseline decodes a whole chunk per sample: a quarter of the steps keeps it short.
file_steps=$(( steps / 4 > 10 ? steps / 4 : 10 ))
step "baseline 1 (naive): $file_steps steps, per sample: read + lz4-decode its whole chunk ($workers DataLoader workers)"
file_json=$("$py" "${train[@]}" --mode files --steps "$file_steps" --workers "$workers" --json) ||
    die "training from files failed"
step "baseline 2 (pread): $steps steps, per sample: preadv of its bytes from the uncompressed copy ($workers DataLoader workers)"
pread_json=$("$py" deploy/local/train_demo.py --dataset cifar-synth-raw \
    --dir "$demo_dir/cifar-synth-raw" --batch-size "$batch" --compute-ms "$compute_ms" \
    --device "$device" --mode pread --steps "$steps" --workers "$workers" --json) ||
    die "training from the uncompressed copy failed"

step "result"
"$py" - "$dsc_json" "$file_json" "$pread_json" <<'PYEOF'
import json, sys
rows = [json.loads(a) for a in sys.argv[1:]]
print("%-6s %8s %12s %8s %10s  %-15s %s" % ("feed", "steps", "samples/s", "stall", "step ms",
                                             "loss", "what it does"))
for r in rows:
    print("%-6s %8d %12.0f %7.1f%% %10.2f  %.3f -> %.3f  %s%s" % (
        r["mode"], r["steps"], r["samples_per_s"], r["stall_pct"], r["step_ms"],
        r["loss_first"], r["loss_last"], r["label"],
        ("; " + r["note"]) if r["note"] else ""))
d, f, p = rows
print("model device: %s" % d["device"])
print("dscache: %.1fx the naive baseline's throughput and %.1fx the pread baseline's; "
      "data stall %.1f%% vs %.1f%% and %.1f%%" % (
          d["samples_per_s"] / f["samples_per_s"], d["samples_per_s"] / p["samples_per_s"],
          d["stall_pct"], f["stall_pct"], p["stall_pct"]))
PYEOF

# The loader over time: throughput and stall with the stage breakdown, and its verdict
# (docs/diagnosis.md), drawn with python3-matplotlib beside the table above.
step "plot: 10 s of the loader with ${compute_ms} ms per step -> $demo_dir/dscache-demo.png"
if "$cli" bench --server "$addr" --dataset cifar-synth --batch-size "$batch" --seconds 10 \
    --compute-ms "$compute_ms" --job demo --plot "$demo_dir/dscache-demo.png"; then
    echo "picture: $demo_dir/dscache-demo.png (series: $demo_dir/dscache-demo.csv)"
else
    echo "demo: no picture (see the message above); the table stands" >&2
fi
