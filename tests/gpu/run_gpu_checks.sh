#!/usr/bin/env bash
# GPU checks, for a machine with an NVIDIA GPU, CUDA runtime and torch with CUDA (not run by
# ctest's default labels): builds (or takes a --prebuilt tree, see tests/gpu/bundle.sh), runs
# the CUDA unit test, the nvJPEG test (skips, saying why, without libnvjpeg) and the Python CUDA
# test (batch bytes on the device equal the source), then
# measures host-to-device bandwidth through the loader (its own stream, pinned slots, events)
# against cudaMemcpy from pinned memory (torch), and runs the demo trainer on the GPU fed by
# dscache and by the pread baseline.
# Usage: tests/gpu/run_gpu_checks.sh [BUILD_DIR | --prebuilt DIR]   exit 77 when no GPU is visible.
#        DSC_PYTHON=... (default: /usr/bin/python3 if it imports torch, else python3)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build-gpu
prebuilt=0
case "${1:-}" in
--prebuilt) build=$(cd "${2:?--prebuilt needs a directory}" && pwd); prebuilt=1 ;;
-h|--help) sed -n '2,9p' "$0"; exit 0 ;;
"") ;;
*) build=$1 ;;
esac
py=${DSC_PYTHON:-}
if [ -z "$py" ]; then
    py=python3
    /usr/bin/python3 -c 'import torch' 2>/dev/null && py=/usr/bin/python3
fi
"$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
    { echo "SKIP: torch ($py) sees no CUDA device here"; exit 77; }
if [ "$prebuilt" = 0 ]; then
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build "$build" -j "$(nproc)" --target dscache dscache_cli dscached test_cuda test_nvjpeg >/dev/null
fi
for f in bin/dscache bin/dscached bin/test_cuda lib/libdscache.so; do
    [ -e "$build/$f" ] || { echo "run_gpu_checks: $build/$f is missing" >&2; exit 1; }
done
export DSC_BIN=$build/bin DSC_SRC=$root DSCACHE_LIB=$build/lib/libdscache.so
export PYTHONPATH=$root/client/python PYTHONUNBUFFERED=1
"$py" -c 'import torch; print("torch %s, %s" % (torch.__version__, torch.cuda.get_device_name(0)))'
failed=""
echo "== test_cuda (C)"
"$build/bin/test_cuda" || failed="$failed test_cuda"
echo "== test_nvjpeg (nvJPEG decode into device memory against the CPU decode, mean |diff| <= 3)"
if [ -x "$build/bin/test_nvjpeg" ]; then
    rc=0
    "$build/bin/test_nvjpeg" || rc=$?
    [ "$rc" = 0 ] || [ "$rc" = 77 ] || failed="$failed test_nvjpeg"
else
    echo "test_nvjpeg is not in $build (an older bundle): not run"
fi
echo "== test_cuda.py (device bytes equal the source)"
"$py" "$root/tests/python/test_cuda.py" || failed="$failed test_cuda.py"

work=$(mktemp -d)
server_pid=""
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
"$build/bin/dscache" ingest synthetic -o "$work/gpu" --name gpu --samples 20000 \
    --field x:f32:3x64x64 --compress none --chunk-size 4M >/dev/null
# serve DIR MEMORY: a dscached on 127.0.0.1 port 0 (stopping the previous one); sets addr.
serve() {
    if [ -n "$server_pid" ]; then kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; fi
    rm -f "$work/port"
    "$build/bin/dscached" --data "$1" --listen 127.0.0.1:0 --http off --memory "$2" --warm \
        --port-file "$work/port" --log-level warn &
    server_pid=$!
    for _ in $(seq 100); do
        [ -s "$work/port" ] && break
        kill -0 "$server_pid" 2>/dev/null || { echo "run_gpu_checks: dscached died" >&2; exit 1; }
        sleep 0.1
    done
    [ -s "$work/port" ] || { echo "run_gpu_checks: dscached wrote no port" >&2; exit 1; }
    addr="127.0.0.1:$(cat "$work/port")"
}
serve "$work/gpu" 4G
echo "== H2D bandwidth: loader vs cudaMemcpy from pinned memory"
"$py" - "$addr" <<'PYEOF' || failed="$failed h2d-bandwidth"
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
h2d_gbps = st["h2d_bytes"] / st["h2d_seconds"] / 1e9 if st["h2d_seconds"] > 0 else 0
print("loader: %d batches, %.2f GB/s delivered to the GPU, stall %.1f%% (the consumer only sums "
      "each batch); its H2D copies: %.2f GB timed, %.2f GB/s (device time, event to event)" % (
          n, st["bytes"] / wall / 1e9, 100 * st["stall_fraction"], st["h2d_bytes"] / 1e9,
          h2d_gbps))
assert st["h2d_bytes"] > 0.9 * st["bytes"], "most copies are timed"
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

echo "== demo trainer on the GPU: dscache vs the pread baseline (batch 256, 5 ms simulated compute)"
"$build/bin/dscache" ingest synthetic -o "$work/img" --name img --samples 20000 \
    --field image:u8:3x32x32 --field label:i64 --seed 1 --compress lz4 --shard-size 16M \
    --chunk-size 1M >/dev/null
"$build/bin/dscache" ingest synthetic -o "$work/img-raw" --name img-raw --samples 20000 \
    --field image:u8:3x32x32 --field label:i64 --seed 1 --compress none --shard-size 16M \
    --chunk-size 1M >/dev/null
serve "$work/img" 1G
train=("$root/deploy/local/train_demo.py" --batch-size 256 --compute-ms 5 --device cuda:0
       --steps 300)
"$py" "${train[@]}" --mode dscache --servers "$addr" --dataset img \
    --dir "$work/img" || failed="$failed demo-dscache"
"$py" "${train[@]}" --mode pread --dataset img-raw --dir "$work/img-raw" --workers 2 ||
    failed="$failed demo-pread"
echo "== image decode with device=cuda: nvJPEG against the host path; without nvJPEG, a warning"
# 64 JPEGs written by PIL, ingested encoded; the same loader (seed, epoch: the same crops and
# flips) with device="cpu" and device="cuda". nvJPEG decodes at full size with its own IDCT and
# chroma upsampling, the host path at a DCT scale where it covers the crop with the fast IDCT:
# tolerance per batch mean |diff| <= 2.5 and p99 <= 24 (of 255; both are within mean 1.5 / p99
# 20 of PIL's decode, python_test_image_pixels). With DSCACHE_NVJPEG_LIB pointing nowhere,
# create warns (RuntimeWarning naming nvJPEG) and the bytes equal the host path's exactly.
"$py" - "$build" "$work/jpegs" <<'PYEOF' || failed="$failed nvjpeg-loader"
import os, subprocess, sys, warnings
import numpy as np, torch
from PIL import Image
import dscache
build, root = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(0)
for i in range(64):
    os.makedirs("%s/c%d" % (root, i % 2), exist_ok=True)
    w, h = [(500, 375), (640, 480), (375, 500), (320, 240)][i % 4]
    y, x = np.mgrid[0:h, 0:w]
    a = np.stack([x * 255.0 / w, y * 255.0 / h, 127 + 100 * np.sin(x / 13.0 + y / 7.0)], -1)
    a = np.clip(a + rng.normal(0, 8, a.shape), 0, 255).astype(np.uint8)
    Image.fromarray(a).save("%s/c%d/%03d.jpg" % (root, i % 2, i), quality=90)
subprocess.run([build + "/bin/dscache", "ingest", "images", root, "-o", root + "-ds", "--encoded",
                "--name", "jpegs"], check=True, stdout=subprocess.DEVNULL)
srv = subprocess.Popen([build + "/bin/dscached", "--data", root + "-ds", "--listen", "127.0.0.1:0",
                        "--http", "off", "--memory", "256M", "--port-file", root + "-port"])
try:
    import time
    for _ in range(100):
        if os.path.exists(root + "-port") and os.path.getsize(root + "-port") > 0:
            break
        time.sleep(0.1)
    addr = "127.0.0.1:" + open(root + "-port").read().strip()
    def batches(device):
        ld = dscache.Loader(servers=addr, dataset="jpegs", batch_size=16, seed=5, shuffle=True,
                            device=device, output="torch", decode_threads=2,
                            decode={"image": dscache.Image(size=(224, 224), crop="random_resized",
                                                           flip=True)})
        ld.set_epoch(1)
        out = [b["image"].cpu().numpy() for b in ld]
        ld.close()
        return np.concatenate(out)
    host = batches("cpu")
    if os.environ.get("DSC_HAVE_NVJPEG", "1") != "0":
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gpu = batches("cuda:0")
        nv_warn = [str(w.message) for w in caught if "nvJPEG" in str(w.message)]
        if nv_warn:
            print("nvJPEG is not usable here: %s" % nv_warn[0])
        else:
            d = np.abs(gpu.astype(np.int16) - host.astype(np.int16))
            mean, p99 = float(d.mean()), float(np.percentile(d, 99))
            print("nvJPEG vs host decode, %d images: mean |diff| %.2f, p99 %.0f" % (len(gpu), mean, p99))
            assert gpu.shape == host.shape and mean <= 2.5 and p99 <= 24, "over the tolerance"
    os.environ["DSCACHE_NVJPEG_LIB"] = "/nonexistent/libnvjpeg.so"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fallback = batches("cuda:0")
    msgs = [str(w.message) for w in caught if "nvJPEG" in str(w.message)]
    print("without nvJPEG: %s" % (msgs[0] if msgs else "NO WARNING"))
    assert msgs, "device=cuda without nvJPEG must warn"
    assert np.array_equal(fallback, host), "the host fallback must give the host path's bytes"
finally:
    srv.terminate()
    srv.wait()
PYEOF
if [ -n "$failed" ]; then
    echo "GPU checks FAILED:$failed"
    exit 1
fi
echo "GPU checks passed"
