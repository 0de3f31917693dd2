#!/usr/bin/env bash
# Look-ahead across epochs (issue 21): the bytes a one-epoch job of 8 ranks receives, over the
# dataset's stored size (the reference: 1.00x is each byte once), and the stall at the epoch
# boundary of a multi-epoch job with a 5 ms step. One dscached on 127.0.0.1; the ranks of the
# one-epoch job run one after another (tests/integration/loader_check oneepoch: each waits
# 0.1 s after its epoch, as a job saving a checkpoint would, before it is destroyed); the
# boundary figure is the time next() blocked over the first 8 steps of epochs 1..3 of rank 0
# (loader_check boundary), beside 8 steps mid-epoch.
# usage: tests/bench/bench_lookahead.sh [--bin DIR] [--ref-bin DIR]
#   --ref-bin DIR: the same rows with the loader_check of DIR (another build: the reference)
# Dataset: 24,000 x 3 KiB (72 MiB decoded, 28 MB stored, 32 KiB chunks), cache_bytes 6 MiB
# (8 ranks hold 48 MiB, under the dataset), shuffle window 256. About 40 s per build.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN=${DSC_BIN:-$here/../../build/bin}
REF_BIN=
while [ $# -gt 0 ]; do
    case $1 in
    --bin) BIN=$2; shift ;;
    --ref-bin) REF_BIN=$2; shift ;;
    -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
for exe in dscached dscache loader_check; do
    [ -x "$BIN/$exe" ] || { echo "SKIP: $BIN/$exe not built"; exit 77; }
done
work=$(mktemp -d)
pids=()
cleanup() {
    set +e
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    rm -rf "$work"
}
trap cleanup EXIT
"$BIN/dscache" ingest synthetic -o "$work/la" --name la --samples 24000 --field x:u8:3072 \
    --compress lz4 --chunk-size 32K --shard-size 4M >/dev/null
"$BIN/dscached" --listen 127.0.0.1:0 --http off --port-file "$work/port" --log-level error \
    --threads 2 --data "$work/la" &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.05; done
port=$(cat "$work/port")

# ratio BIN BATCH [ARGS]: the one-epoch job's bytes over the stored size.
ratio() {
    local bin=$1 b=$2
    shift 2
    "$bin/loader_check" oneepoch --servers "127.0.0.1:$port" --dataset la --dir "$work/la" \
        --window 256 --cache 6291456 --to 8 --batch "$b" --slow-ms 2 --pause-s 0.1 "$@" |
        sed -nE 's/.*: ([0-9.]+x) the stored size.*/\1/p'
}
# boundary BIN: "worst / mean ms over the first 8 steps; worst ms mid-epoch; stall".
boundary() {
    "$1/loader_check" boundary --servers "127.0.0.1:$port" --dataset la --dir "$work/la" \
        --window 256 --cache 6291456 --to 8 --batch 16 --slow-ms 5 --epochs 3 |
        sed -nE 's/^boundary: worst ([0-9.]+) ms \(mean ([0-9.]+) ms\).*worst ([0-9.]+) ms mid-epoch.*stall ([0-9.]+%).*/\1 \/ \2 ms | \3 ms | \4/p'
}
echo "dataset 24000 x 3 KiB, stored $(du -sb "$work/la" | cut -f1) bytes; 8 ranks, cache_bytes 6 MiB, window 256"
if [ -n "$REF_BIN" ]; then
    echo "| case | reference | this build |"
    echo "|---|---|---|"
else
    echo "| case | this build |"
    echo "|---|---|"
fi
for b in 16 64 256; do
    if [ -n "$REF_BIN" ]; then
        echo "| one epoch, batch $b: bytes received / stored | $(ratio "$REF_BIN" $b) | $(ratio "$BIN" $b) |"
    else
        echo "| one epoch, batch $b: bytes received / stored | $(ratio "$BIN" $b) |"
    fi
done
# options.epochs = 1 (only this build has it).
if [ -n "$REF_BIN" ]; then
    echo "| one epoch, batch 256, epochs = 1 | - | $(ratio "$BIN" 256 --job-epochs 1) |"
else
    echo "| one epoch, batch 256, epochs = 1 | $(ratio "$BIN" 256 --job-epochs 1) |"
fi
if [ -n "$REF_BIN" ]; then
    echo "| 5 ms step, batch 16: first 8 steps of epochs 1..3 blocked (worst / mean) \| 8 mid-epoch steps \| stall | $(boundary "$REF_BIN") | $(boundary "$BIN") |"
else
    echo "| 5 ms step, batch 16: first 8 steps of epochs 1..3 blocked (worst / mean) \| 8 mid-epoch steps \| stall | $(boundary "$BIN") |"
fi
