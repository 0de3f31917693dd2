#!/usr/bin/env bash
# Look-ahead across epochs bounded by need (issue 21): a one-epoch job of 8 ranks on a dataset
# larger than 8 x cache_bytes receives at most 1.1x the stored dataset, although each rank's
# cache could hold most of its next epoch's run (before: 1.3x here, up to 2x where batches
# span a rank's windows); and a multi-epoch job does not stall at the epoch boundary for it (the
# next epoch's first steps are fetched ahead, the rest when next() asks for that epoch), with no
# chunk fetched twice. With options.epochs = 1 nothing past the epoch is fetched at all.
set -euo pipefail
source "$(dirname "$0")/loader_env.sh"

# 24,000 x 3 KiB (72 MiB decoded, 28 MB stored in 32 KiB chunks); cache_bytes 6 MiB: 8 ranks
# hold 48 MiB, under the dataset, and each holds the two 256-sample windows it needs.
make_ds la --samples 24000 --field x:u8:3072 --compress lz4 --chunk-size 32K --shard-size 4M
start_server --data "$work/la"
check() {
    "$DSC_BIN/loader_check" "$@" --servers "127.0.0.1:$port" --dataset la --dir "$work/la" \
        --window 256 --cache 6291456 --to 8
}
# A 2 ms step (6 ms in sanitized builds, whose loader and server are several times slower): the
# loader keeps ahead of it. One that waits on its fetches 5% of the time looks ahead as far as
# cache_bytes allows (a store at its bandwidth needs that), which this check is not about: each
# rank that waited on its fetches 4% of its steps or more (a busy machine) adds its cache_bytes
# (in stored bytes) to the bound. Where every rank did, loader_check says so and the step it
# needs (twice the worst rank's time per batch) and the check runs again with that, three times
# at most; then the test skips, saying why.
step=2
if [ "${DSC_SANITIZE:-OFF}" = ON ] || [ "${DSC_TSAN:-OFF}" = ON ]; then step=6; fi
oneepoch() {
    local s=$step try rc out
    for try in 1 2 3; do
        rc=0
        out=$(check oneepoch --slow-ms "$s" --max-stall 0.04 "$@" 2>&1) || rc=$?
        echo "$out"
        [ "$rc" = 77 ] || return "$rc"
        s=$(awk '/retry-slow-ms/ { print $NF }' <<<"$out")
    done
    echo "SKIP: the loader waited on its fetches at every step tried (last ${s} ms): too busy a" \
        "machine for the one-epoch bound"
    exit 77
}
oneepoch --batch 16 --pause-s 0.1 --max-first 1.1
oneepoch --batch 64 --pause-s 0.1 --max-first 1.1
# A step that spans a whole 256-sample window: the next epoch's look-ahead is the steps one answer
# time covers, rounded up, at least 1 (1.16x when it was at least 2; 1.08x measured).
oneepoch --batch 256 --pause-s 0.1 --max-first 1.1
# A job that says it runs one epoch (options.epochs = 1) fetches nothing past it, even where a
# step spans a whole window (batch 256: 1.08x without the option): each chunk about once.
oneepoch --batch 256 --pause-s 0.1 --job-epochs 1 --max-first 1.01
# 5 ms steps, 5 epochs on rank 0 of 8: the first 8 steps of the later epochs block at most 2 steps'
# time in all, plus the mean answer time of the run (4 steps under ASan, 8 under ThreadSanitizer,
# whose slow-down is the most uneven: 30 ms once in CI there), as do 8 steps mid-epoch, on the
# median over the epochs: a busy machine answers late now and then at one boundary or another
# (10-80 ms at one boundary in three here beside other builds, 0.1 ms at the others), a boundary
# that waits every time is what this bounds; no refetch (measured: under 1 ms on most runs).
# Then the mechanism without timing: left to settle at each epoch's end, the next epoch's first
# step waits on no fetch at all (with the next epoch deferred until next() asks for it: 19 ms in
# all over 4 boundaries, and 4-6 ms per boundary in the timed check, under its bound).
steps=2
if [ "$step" != 2 ]; then steps=4; fi
if [ "${DSC_TSAN:-OFF}" = ON ]; then steps=8; fi
# A timing bound missed where this process gets under 0.8 of a core when it asks for one (a
# machine busy with other work: most boundaries then blocked 30-90 ms, fetched ahead or not):
# loader_check says so, and the test skips, saying why, once the settled check has passed.
rc=0
check boundary --batch 16 --slow-ms 5 --epochs 4 --max-ratio $steps || rc=$?
[ "$rc" = 0 ] || [ "$rc" = 77 ] || exit "$rc"
check boundary --batch 16 --slow-ms 5 --epochs 4 --settle 1
if [ "$rc" = 77 ]; then
    echo "SKIP: the boundary's timing was not checked: a machine too busy for it (above)"
    exit 77
fi
echo ok
