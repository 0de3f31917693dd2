#!/usr/bin/env bash
# GPU checks, for a machine with an NVIDIA GPU, CUDA runtime and torch with CUDA (not run by
# ctest's default labels): builds, runs the CUDA unit test and the Python CUDA test (batch bytes
# on the device equal the source), then measures host-to-device bandwidth through the loader
# (its own stream, pinned slots, events) against cudaMemcpy from pinned memory (torch).
# Usage: tests/gpu/run_gpu_checks.sh [BUILD_DIR]     exit 77 when no GPU is visible.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-gpu}
py=${DSC_PYTHON:-/usr/bin/python3}
"$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
    { echo "SKIP: torch sees no CUDA device here"; exit 77; }
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$(nproc)" --target dscache dscache_cli dscached test_cuda >/dev/null
export DSC_BIN=$build/bin DSC_SRC=$root DSCACHE_LIB=$build/lib/libdscache.so
export PYTHONPATH=$root/client/python
echo "== test_cuda (C)"
"$build/bin/test_cuda"
echo "== test_cuda.py (device bytes equal the source)"
"$py" "$root/tests/python/test_cuda.py"

work=$(mktemp -d)
server_pid=""
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
"$build/bin/dscache" ingest synthetic -o "$work/gpu" --name gpu --samples 20000 \
    --field x:f32:3x64x64 --compress none --chunk-size 4M >/dev/null
"$build/bin/dscached" --data "$work/gpu" --listen 127.0.0.1:0 --http off --memory 4G --warm \
    --port-file "$work/port" --log-level warn &
server_pid=$!
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
echo "== H2D bandwidth: loader vs cudaMemcpy from pinned memory"
"$py" - "127.0.0.1:$(cat "$work/port")" <<'PYEOF'
import sys, time, torch, dscache
addr = sys.argv[1]
batch = 256
loader = dscache.Loader(servers=addr, dataset="gpu", batch_size=batch, device="cuda:0",
                        output="torch", decode_threads=4, connections=4, shuffle=False)
stream = torch.cuda.Stream()
loader.set_stream(stream)
n = 0
t0 = time.perf_counter()
with torch.cuda.stream(stream):
    for epoch in range(3):
        loader.set_epoch(epoch)
        for b in loader:
            b["x"].sum()  # touch the batch on the consumer's stream
            n += 1
torch.cuda.synchronize()
wall = time.perf_counter() - t0
st = loader.stats()
h2d_gbps = st["bytes"] / st["h2d_seconds"] / 1e9 if st["h2d_seconds"] > 0 else 0
print("loader: %d batches, %.2f GB/s delivered to the GPU, H2D copies %.2f GB/s (event time), "
      "stall %.1f%%" % (n, st["bytes"] / wall / 1e9, h2d_gbps, 100 * st["stall_fraction"]))
nbytes = batch * 3 * 64 * 64 * 4
src = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda:0")
for _ in range(3):
    dst.copy_(src, non_blocking=True)
torch.cuda.synchronize()
reps = 200
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
for _ in range(reps):
    dst.copy_(src, non_blocking=True)
end.record()
torch.cuda.synchronize()
memcpy_gbps = reps * nbytes / (start.elapsed_time(end) / 1000) / 1e9
print("cudaMemcpy from pinned memory (torch): %.2f GB/s; loader H2D at %.2fx" %
      (memcpy_gbps, h2d_gbps / memcpy_gbps if memcpy_gbps else 0))
loader.close()
PYEOF
