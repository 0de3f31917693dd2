#!/usr/bin/env bash
# Slow backing storage (issue 21): a dataset of D bytes served by one dscached with --memory C
# (MinIO policy) whose shards lie behind tests/slowfs (a FUSE passthrough with a per-read latency
# and a bandwidth cap), read by `dscache bench` with a simulated step (--compute-ms) that demands
# a fixed rate. Every epoch must read at least (1 - C/D) of the data from the store, so zero
# stall needs backing bandwidth >= bound = (1 - C/D) x demand; each row's cap is a multiple of
# that bound (C/D = 1: of the demand, the warm-up's rate) and the row prints the bound, the
# throughput the bound allows (min(1, cap / bound)), what was reached and the verdict.
# usage: tests/bench/bench_slowstore.sh [--full] [--seconds S] [--bin DIR] [--ref-bin DIR]
#   default matrix: C/D 0.25, caps 0.8x and 1.2x, latency 0.1/20/50 ms (a few minutes)
#   --full: C/D {1, 0.5, 0.25} x cap {0.8, 1.2, 2}x x latency {0.1, 5, 20, 50} ms
#   --row CD:MULT:LAT_MS: only this row (repeatable), e.g. --row 0.25:1.2:20
#   --ref-bin DIR: also run each row with the dscached in DIR (the reference), side by side
#   --jobs N: N jobs with the same seed and options at once (read-ahead shares their backing
#     reads); adds "storage reads": backing bytes / the bytes one job's misses need
#   --no-readahead: the server without read-ahead (--staging-memory 0), loaders without hints
# Needs /dev/fuse and fusermount3; everything started is stopped by PID on exit.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN=${DSC_BIN:-$here/../../build/bin}
REF_BIN=
seconds=8
full=0
jobs=1
readahead=1
rows=()
while [ $# -gt 0 ]; do
    case $1 in
    --full) full=1 ;;
    --row) rows+=("$2"); shift ;;
    --seconds) seconds=$2; shift ;;
    --bin) BIN=$2; shift ;;
    --ref-bin) REF_BIN=$2; shift ;;
    --jobs) jobs=$2; shift ;;
    --no-readahead) readahead=0 ;;
    -h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
for exe in dscached dscache slowfs; do
    [ -x "$BIN/$exe" ] || { echo "SKIP: $BIN/$exe not built"; exit 77; }
done
[ -c /dev/fuse ] && command -v fusermount3 >/dev/null || { echo "SKIP: no /dev/fuse or fusermount3"; exit 77; }

work=$(mktemp -d)
pids=()
mnt=$work/mnt
cleanup() {
    set +e
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    fusermount3 -uz "$mnt" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

# 100000 samples of 3080 bytes (308 MB raw, 1 MiB chunks, 16 MiB shards); batches of 1024
# samples (3.15 MB) after a 10 ms step: 315 MB/s demanded.
samples=100000 sample_bytes=3080 batch=1024 step_ms=10
"$BIN/dscache" ingest synthetic -o "$work/ds" --name slow --samples $samples \
    --field image:u8:3x32x32 --field label:i64 --seed 1 --compress none --shard-size 16M --chunk-size 1M >/dev/null
D=$(du -sb "$work/ds" | cut -f1)
demand=$((batch * sample_bytes * 1000 / step_ms)) # bytes/s

metric() { curl -sf "http://$1/metrics" | awk -v k="$2" '$1 == k { print $2 }'; }

# run_row BIN CD MULT LAT_MS: prints "stall% throughput% backing_MBps verdict".
run_row() {
    local bin=$1 cd=$2 mult=$3 lat=$4
    local mem bound cap
    mem=$(awk -v d="$D" -v c="$cd" 'BEGIN { printf "%d", d * c }')
    bound=$(awk -v q="$demand" -v c="$cd" 'BEGIN { printf "%d", (1 - c) * q }')
    cap=$(awk -v b="$bound" -v q="$demand" -v m="$mult" 'BEGIN { printf "%d", (b > 0 ? b : q) * m }')
    mkdir -p "$mnt"
    "$BIN/slowfs" "$work/ds" "$mnt" -f --latency-ms "$lat" --bandwidth "$cap" >"$work/slowfs.log" 2>&1 &
    local sfs=$!
    pids+=("$sfs")
    for _ in $(seq 1 100); do [ -f "$mnt/manifest.json" ] && break; sleep 0.05; done
    rm -f "$work/port" "$work/hport"
        local extra=()
    [ "$readahead" = 1 ] || extra=(--staging-memory 0)
    "$bin/dscached" --data "$mnt" --listen 127.0.0.1:0 --http 127.0.0.1:0 --port-file "$work/port" \
        --http-port-file "$work/hport" --memory "$mem" --warm --policy minio --threads 2 \
        "${extra[@]}" >"$work/server.log" 2>&1 &
    local srv=$!
    pids+=("$srv")
    for _ in $(seq 1 600); do [ -s "$work/hport" ] && break; sleep 0.1; done
    local http=127.0.0.1:$(cat "$work/hport") addr=127.0.0.1:$(cat "$work/port")
    for _ in $(seq 1 1200); do curl -sf "http://$http/readyz" >/dev/null && break; sleep 0.1; done
    local rb0 rb1 out
    rb0=$(( $(metric "$http" dscache_read_through_bytes_total) + $(metric "$http" dscache_loaded_bytes_total) ))
        local hints=1 k jp=()
    [ "$readahead" = 1 ] || hints=0
    for k in $(seq 2 "$jobs"); do
        DSCACHE_HINTS=$hints "$BIN/dscache" bench --server "$addr" --dataset slow \
            --batch-size $batch --compute-ms $step_ms --seconds "$seconds" --cache 64M \
            --report-seconds 1 --job "job$k" >"$work/job$k.out" 2>&1 &
        jp+=("$!")
        pids+=("$!")
    done
    out=$(DSCACHE_HINTS=$hints "$BIN/dscache" bench --server "$addr" --dataset slow \
        --batch-size $batch --compute-ms $step_ms --seconds "$seconds" --cache 64M \
        --report-seconds 1 --job job1 2>&1) || true
    for k in "${jp[@]}"; do wait "$k" 2>/dev/null || true; done
    [ -n "${BENCH_VERBOSE:-}" ] && grep -E "^(limit|suggestion)" <<<"$out" >&2
    rb1=$(( $(metric "$http" dscache_read_through_bytes_total) + $(metric "$http" dscache_loaded_bytes_total) ))
        [ -n "${BENCH_VERBOSE:-}" ] && curl -sf "http://$http/metrics" | grep -E '^dscache_(staging|backing_coalesced|read_through)' >&2
    kill -TERM "$srv" 2>/dev/null; wait "$srv" 2>/dev/null || true
    fusermount3 -u "$mnt" 2>/dev/null || fusermount3 -uz "$mnt"
    wait "$sfs" 2>/dev/null || true
    local stall gbps verdict recv share=""
    if [ "$jobs" -gt 1 ]; then
        # Storage reads: backing bytes over what the job that received most needed from storage.
        # (the job that went fastest: its decoded bytes x the miss share)
        recv=$(for f in "$work"/job*.out; do sed -nE 's/^throughput: .* ([0-9.]+) GB\/s decoded.*/\1/p' "$f"; done
            sed -nE 's/^throughput: .* ([0-9.]+) GB\/s decoded.*/\1/p' <<<"$out")
        recv=$(sort -g <<<"$recv" | tail -1)
        share=$(awk -v b="$((rb1 - rb0))" -v g="${recv:-0}" -v c="$cd" -v t="$seconds" \
            'BEGIN { printf " | %.2fx", ((g > 0 && c < 1) ? b / (g * 1e9 * t * (1 - c)) : 0) }')
        for f in "$work"/job*.out; do
            share="$share, other job: $(sed -nE 's/^stall: ([0-9.]+)%.*/\1/p' "$f")% stall"
        done
        rm -f "$work"/job*.out
    fi
    stall=$(sed -nE 's/^stall: ([0-9.]+)%.*/\1/p' <<<"$out")
    gbps=$(sed -nE 's/^throughput: .* ([0-9.]+) GB\/s decoded.*/\1/p' <<<"$out")
    verdict=$(sed -nE 's/^limit: ([a-z_]+).*/\1/p' <<<"$out")
    awk -v s="${stall:-nan}" -v g="${gbps:-0}" -v q="$demand" -v r0="$rb0" -v r1="$rb1" \
        -v t="$seconds" -v v="${verdict:-?}" \
        -v sh="$share" \
        'BEGIN { printf "%s%% | %.0f%% | %.0f MB/s | %s%s", s, 100 * g * 1e9 / q, (r1 - r0) / t / 1e6, v, sh }'
}

if [ "$full" = 1 ]; then cds="1 0.5 0.25" mults="0.8 1.2 2" lats="0.1 5 20 50"
else cds="0.25" mults="0.8 1.2" lats="0.1 20 50"; fi
echo "dataset $((D / 1000000)) MB, demand $((demand / 1000000)) MB/s (batch $batch x $sample_bytes B per ${step_ms} ms step), ${seconds} s per row, $(nproc) cores, $jobs job(s), read-ahead $([ "$readahead" = 1 ] && echo on || echo off)"
sharecol="" sharesep=""
[ "$jobs" -gt 1 ] && sharecol=" storage reads (x one job's misses), other jobs |" sharesep="---|"
if [ -n "$REF_BIN" ]; then
    echo "| C/D | cap (x bound) | latency | bound | throughput allowed | reference: stall, throughput, backing used, verdict | stall | throughput | backing used | verdict |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
else
    echo "| C/D | cap (x bound) | latency | bound | throughput allowed | stall | throughput | backing used | verdict |$sharecol"
    echo "|---|---|---|---|---|---|---|---|---|$sharesep"
fi
if [ ${#rows[@]} -eq 0 ]; then
    for cd in $cds; do for m in $mults; do for l in $lats; do rows+=("$cd:$m:$l"); done; done; done
fi
for spec in "${rows[@]}"; do
            IFS=: read -r cd m l <<<"$spec"
            bound=$(awk -v q="$demand" -v c="$cd" 'BEGIN { printf "%.0f", (1 - c) * q / 1e6 }')
            allowed=$(awk -v c="$cd" -v m="$m" 'BEGIN { print (c >= 1 || m >= 1) ? "100%" : sprintf("%.0f%%", 100 * m) }')
            row="| $cd | ${m}x | $l ms | $bound MB/s | $allowed"
            [ -n "$REF_BIN" ] && row="$row | $(run_row "$REF_BIN" "$cd" "$m" "$l" | sed 's/ | /, /g')"
            echo "$row | $(run_row "$BIN" "$cd" "$m" "$l") |"
done
