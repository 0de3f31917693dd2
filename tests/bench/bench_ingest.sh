#!/usr/bin/env bash
# Ingest throughput (MB/s of raw sample bytes, 1 MB = 10^6 bytes) of `dscache ingest synthetic`
# for --compress none, lz4 and lz4hc on a ~500 MB dataset in a temporary directory (removed at
# the end), printed as a table; with the lz4 tool installed, `lz4 -b` figures on one chunk of
# the same data for reference.
# Usage: tests/bench/bench_ingest.sh [BUILD_DIR]    (default build/; BENCH_MB=500, BENCH_TMP=/tmp)
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
