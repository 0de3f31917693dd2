#!/usr/bin/env bash
# Direct placement: chunks whose samples all land, in order, in one batch are verified and
# decoded (or copied) straight into the batch slot. Batch bytes equal the shard files for a
# one-field lz4 dataset (decoded into the slot), a two-field lz4 one (through the worker's
# scratch buffer) and a raw one (copied after the checksum pass), with shuffle=0 and with a
# chunk-order-only shuffle (window 1); restarts (set_epoch, state_load) during placement; and
# the loader's counter shows that placement happened (and never with per-sample shuffling).
set -euo pipefail
source "$(dirname "$0")/loader_env.sh"

# 16 samples of 128 bytes per 2 KiB chunk; batches of 40 hold two whole chunks and straddle
# others.
make_ds tok --samples 2000 --field tok:u16:64 --compress lz4 --chunk-size 2K --shard-size 16K
make_ds two --samples 1500 --field x:f32:4x4 --field y:i64 --compress lz4 --chunk-size 2K \
    --shard-size 24K
make_ds raw --samples 1100 --field img:u8:3x5x7 --field t:u16:9 --compress none --chunk-size 3K \
    --shard-size 40K
start_server --data "$work/tok" --data "$work/two" --data "$work/raw"
check() { "$DSC_BIN/loader_check" "$@" --servers "127.0.0.1:$port"; }

for ds in tok two raw; do
    check once --dataset $ds --dir "$work/$ds" --batch 40 --shuffle 0
    check order --dataset $ds --dir "$work/$ds" --batch 40 --shuffle 0
    check resume --dataset $ds --dir "$work/$ds" --batch 64 --shuffle 0 --threads 1
    check once --dataset $ds --dir "$work/$ds" --batch 40 --window 1
done
# One slot, one chunk in flight: placement waits for the slot, never writes a busy one.
check once --dataset tok --dir "$work/tok" --batch 33 --shuffle 0 --prefetch 1 --inflight 1

placed() {
    "$DSC_BIN/dscache" bench --server "127.0.0.1:$port" --seconds 0.5 "$@" |
        sed -n 's/.*chunks placed straight into slots \([0-9]*\).*/\1/p'
}
for ds in tok two raw; do
    n=$(placed --dataset $ds --batch-size 64 --no-shuffle)
    [ -n "$n" ] && [ "$n" -gt 0 ] || { echo "FAIL: $ds: no chunk placed with shuffle=0 (got '$n')"; exit 1; }
    echo "$ds: $n chunks placed straight into slots in 0.5 s (shuffle=0)"
done
n=$(placed --dataset tok --batch-size 64 --shuffle-window 8192)
[ "$n" = 0 ] || { echo "FAIL: tok: $n chunks placed with per-sample shuffling"; exit 1; }
# dscache bench --no-assist: next() does no work of its own.
n=$("$DSC_BIN/dscache" bench --server "127.0.0.1:$port" --seconds 0.5 --dataset tok \
    --batch-size 64 --decode-threads 1 --no-assist |
    sed -n 's/.*work done by a waiting next() \([0-9]*\) (--no-assist).*/\1/p')
[ "$n" = 0 ] || { echo "FAIL: --no-assist: next() did work ('$n')"; exit 1; }
echo ok
