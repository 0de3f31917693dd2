#!/usr/bin/env bash
# Ingest throughput (MB/s of raw sample bytes, 1 MB = 10^6 bytes) of `dscache ingest synthetic`
# for --compress none, lz4 and lz4hc on a ~500 MB dataset in a temporary directory (removed at
# the end), printed as a table; with the lz4 tool installed, `lz4 -b` figures on one chunk of
# the same data for reference.
# Then the other formats (webdataset, megatron, mds) beside a plain copy of their source bytes.
# Usage: tests/bench/bench_ingest.sh [BUILD_DIR]    (default build/; BENCH_MB=500, BENCH_TMP=/tmp,
#        BENCH_FORMAT_MB=100, BENCH_FORMATS_ONLY=1 to run only the formats)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
cli=$build/bin/dscache
[ -x "$cli" ] || { echo "bench_ingest: $cli not built (cmake --build $build)" >&2; exit 1; }
mb=${BENCH_MB:-500}
sample_bytes=$((3 * 64 * 64 + 8)) # image u8 3x64x64 + label i64
samples=$((mb * 1000000 / sample_bytes))
work=$(mktemp -d "${BENCH_TMP:-/tmp}/bench_ingest.XXXXXX")
trap 'rm -rf "$work"' EXIT

if [ "${BENCH_FORMATS_ONLY:-0}" != 1 ]; then # BENCH_FORMATS_ONLY=1: only the section below
echo "dscache ingest synthetic: $samples samples of $sample_bytes bytes ($((samples * sample_bytes / 1000000)) MB raw), chunk 1M, shard 64M, $(nproc) cores"
printf '%-12s %10s %10s %7s %8s %9s\n' compress "raw MB" "stored MB" ratio seconds "MB/s"
for mode in none lz4 lz4hc; do
    out=$work/ds-$mode
    start=$(date +%s.%N)
    "$cli" ingest synthetic -o "$out" --samples "$samples" --seed 1 --compress "$mode" \
        --field image:u8:3x64x64 --field label:i64 >"$work/log" 2>&1 \
        || { cat "$work/log" >&2; exit 1; }
    end=$(date +%s.%N)
    raw=$((samples * sample_bytes))
    stored=$(cat "$out"/shard-*.dsc | wc -c)
    awk -v m="$mode" -v r="$raw" -v s="$stored" -v a="$start" -v b="$end" 'BEGIN {
        t = b - a; printf "%-12s %10.1f %10.1f %7.2f %8.2f %9.1f\n", m, r / 1e6, s / 1e6, r / s, t, r / 1e6 / t }'
    [ "$mode" = none ] && head -c $((1 << 20)) "$out/shard-00000.dsc" >"$work/chunk.bin"
    rm -rf "$out"
done
# the same as above with level 1 (fastest lz4hc)
out=$work/ds-hc1
start=$(date +%s.%N)
"$cli" ingest synthetic -o "$out" --samples "$samples" --seed 1 --compress lz4hc --level 1 \
    --field image:u8:3x64x64 --field label:i64 >/dev/null
end=$(date +%s.%N)
stored=$(cat "$out"/shard-*.dsc | wc -c)
awk -v m="lz4hc -1" -v r="$((samples * sample_bytes))" -v s="$stored" -v a="$start" -v b="$end" 'BEGIN {
    t = b - a; printf "%-12s %10.1f %10.1f %7.2f %8.2f %9.1f\n", m, r / 1e6, s / 1e6, r / s, t, r / 1e6 / t }'
rm -rf "$out"

if command -v lz4 >/dev/null 2>&1 && [ -s "$work/chunk.bin" ]; then
    echo
    echo "reference: lz4 -b on the first MiB of a raw shard (compression / decompression speed)"
    for level in 1 9; do
        printf 'lz4 -b%-3s %s\n' "$level" \
            "$(lz4 -b"$level" -i2 "$work/chunk.bin" 2>&1 | tr '\r' '\n' | grep 'MB/s' | tail -1 | sed 's/^.*: *//')"
    done
fi
fi

# ---- other formats: webdataset, megatron, mds (issue 18) ------------------------------------
# Each source (~BENCH_FORMAT_MB MB, default 100, written here by Python) is read alone (--dry-run:
# the reader, nothing written) and ingested with --compress none and with lz4; the references are
# a plain copy of the same source bytes (cat to a file in the same directory) and the same copy
# followed by an fsync of it (the writer fsyncs its shards) in the same run. MB/s counts source bytes; "per core" divides by
# the command's CPU seconds (user + sys) instead of the wall time.
fmt_mb=${BENCH_FORMAT_MB:-100}
py=${DSC_PYTHON:-/usr/bin/python3}
if ! "$py" -c 'import numpy' 2>/dev/null; then
    echo "bench_ingest: $py has no numpy: the format section is not run" >&2
    exit 0
fi
"$py" - "$work" "$fmt_mb" <<'EOF'
import io, json, os, struct, subprocess, sys, tarfile
import numpy as np
work, mb = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(5)
total = mb * 1000000
# payload bytes from a small alphabet in runs: compressible about 2x, like encoded media is not
def payload(n):
    runs = rng.integers(0, 16, n // 4 + 1, dtype=np.uint8).repeat(4)[:n]
    return (runs * 16 + rng.integers(0, 16, n, dtype=np.uint8)).tobytes()
# webdataset: samples of a 40 KB .jpg-like blob, a .cls and a 64x4 float32 .npy
os.makedirs(f"{work}/wds", exist_ok=True)
per_sample = 40000 + 1100
n = total // per_sample
for t in range(2):
    with tarfile.open(f"{work}/wds/b-{t}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(t * n // 2, (t + 1) * n // 2):
            for ext, data in (("jpg", payload(40000)), ("cls", b"%d" % (i % 1000))):
                info = tarfile.TarInfo(f"k{i:07d}.{ext}"); info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            buf = io.BytesIO(); np.save(buf, rng.standard_normal((64, 4)).astype(np.float32))
            info = tarfile.TarInfo(f"k{i:07d}.npy"); info.size = len(buf.getvalue())
            tar.addfile(info, io.BytesIO(buf.getvalue()))
# megatron: uint16 documents of 200..2000 tokens
tokens = total // 2
lengths = []
while sum(lengths) < tokens:
    lengths.append(int(rng.integers(200, 2000)))
flat = (rng.integers(0, 512, sum(lengths)) * 37 % 50257).astype(np.uint16)
with open(f"{work}/meg.bin", "wb") as f:
    f.write(flat.tobytes())
ptr = np.concatenate([[0], np.cumsum(lengths)[:-1]]) * 2
with open(f"{work}/meg.idx", "wb") as f:
    f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(lengths), len(lengths) + 1))
    f.write(np.array(lengths, np.int32).tobytes() + ptr.astype(np.int64).tobytes())
    f.write(np.arange(len(lengths) + 1, dtype=np.int64).tobytes())
# mds: samples of a 40 KB jpeg column, an int and a str; shards of 32 MB, raw and zstd
names = ["image", "label", "text"]; encs = ["jpeg", "int", "str"]; sizes = [None, 8, None]
for zstd in (False, True):
    d = f"{work}/mds{'z' if zstd else ''}"; os.makedirs(d, exist_ok=True)
    cfg = {"version": 2, "format": "mds", "compression": "zstd:3" if zstd else None,
           "hashes": [], "size_limit": 1 << 25, "column_names": names,
           "column_encodings": encs, "column_sizes": sizes}
    cfg_data = json.dumps(cfg, sort_keys=True).encode()
    shards, s, i, left = [], 0, 0, total
    local = np.random.default_rng(9)
    while left > 0:
        enc = []
        while left > 0 and sum(map(len, enc)) < (1 << 25) - 100000:
            img = payload(40000); txt = b"sample %d" % i
            enc.append(np.array([len(img), len(txt)], np.uint32).tobytes() + img +
                       np.int64(i).tobytes() + txt)
            left -= len(enc[-1]); i += 1
        off = np.array([0] + [len(e) for e in enc]).cumsum().astype(np.uint32)
        off += 4 + len(off) * 4 + len(cfg_data)
        raw = np.uint32(len(enc)).tobytes() + off.tobytes() + cfg_data + b"".join(enc)
        name = f"shard.{s:05d}.mds"
        info = {"samples": len(enc), "raw_data": {"basename": name, "bytes": len(raw), "hashes": {}},
                "zip_data": None}
        if zstd:
            packed = subprocess.run(["zstd", "-q", "-3", "-c", "-T0"], input=raw, check=True,
                                    stdout=subprocess.PIPE).stdout
            open(f"{d}/{name}.zstd", "wb").write(packed)
            info["zip_data"] = {"basename": name + ".zstd", "bytes": len(packed), "hashes": {}}
        else:
            open(f"{d}/{name}", "wb").write(raw)
        info.update(cfg); shards.append(info); s += 1
    json.dump({"version": 2, "shards": shards}, open(f"{d}/index.json", "w"), sort_keys=True)
EOF
# timed LABEL SOURCE_BYTES CMD...: one row (wall MB/s and MB/s per CPU second)
timed() {
    local label=$1 bytes=$2; shift 2
    /usr/bin/time -f "%e %U %S" -o "$work/time" "$@" >"$work/log" 2>&1 || { cat "$work/log" >&2; exit 1; }
    awk -v l="$label" -v b="$bytes" '{ cpu = $2 + $3; if (cpu <= 0) cpu = 0.001; if ($1 <= 0) $1 = 0.001
        printf "%-34s %9.1f %8.2f %9.1f %12.1f\n", l, b / 1e6, $1, b / 1e6 / $1, b / 1e6 / cpu }' "$work/time"
}
sum_bytes() { cat "$@" | wc -c; }
copies() { # LABEL BYTES FILES...: the two reference rows
    local label=$1 bytes=$2; shift 2
    timed "copy (cat) of $label" "$bytes" sh -c 'f=$1; shift; cat "$@" >"$f"' sh "$work/copy.bin" "$@"
    timed "copy + fsync of $label" "$bytes" sh -c 'f=$1; shift; cat "$@" >"$f" && sync "$f"' sh \
        "$work/copy.bin" "$@"
}
echo
echo "other formats: source MB as read; MB/s = source bytes / wall s; per core = / CPU s"
printf '%-34s %9s %8s %9s %12s\n' path "source MB" seconds "MB/s" "MB/s/core"
w=$(sum_bytes "$work"/wds/*.tar)
copies "the tars" "$w" "$work"/wds/*.tar
timed "webdataset --dry-run (reader)" "$w" "$cli" ingest webdataset --dry-run "$work"/wds/*.tar
for c in none lz4; do
    timed "webdataset --compress $c" "$w" "$cli" ingest webdataset -o "$work/o-wds-$c" \
        --compress "$c" "$work"/wds/*.tar
done
m=$(sum_bytes "$work/meg.bin" "$work/meg.idx")
copies ".bin + .idx" "$m" "$work/meg.bin" "$work/meg.idx"
timed "megatron --dry-run (index only)" "$m" "$cli" ingest megatron --dry-run "$work/meg"
for c in none lz4; do
    timed "megatron docs --compress $c" "$m" "$cli" ingest megatron -o "$work/o-meg-$c" \
        --compress "$c" "$work/meg"
done
timed "megatron --seq-len 2048 lz4" "$m" "$cli" ingest megatron -o "$work/o-meg-seq" \
    --seq-len 2048 "$work/meg"
for d in mds mdsz; do
    b=$(sum_bytes "$work/$d"/shard.*)
    copies "$d shards" "$b" "$work/$d"/shard.*
    timed "$d --dry-run (reader)" "$b" "$cli" ingest mds --dry-run "$work/$d"
    for c in none lz4; do
        timed "$d --compress $c" "$b" "$cli" ingest mds -o "$work/o-$d-$c" --compress "$c" \
            "$work/$d"
    done
done
rm -rf "$work"/o-* "$work/copy.bin"
