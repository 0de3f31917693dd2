#!/usr/bin/env bash
# Epoch orders through a real dscached (docs/order.md): the default local order and the global
# one each give every sample exactly once with the right bytes for world 1, 3 and 8 (with and
# without drop_last); a 4-rank job saved mid-epoch, at its first and last step and at its end
# resumes on 2 ranks (and 8 -> 3, 2 -> 16) exactly once; 8 ranks receive at most 1.1x the stored
# dataset per epoch in the local order (the global order: several times it). Traffic is measured
# over 3 epochs after the first, with a cache_bytes below a rank's share of the dataset (but above
# what its window needs), so that the loader cannot keep the whole dataset across epochs; and
# with default options, where the bytes each epoch's steps caused to be fetched
# (stats.epoch_wire_bytes) stay at most 1.1x the stored size at 8 ranks.
set -euo pipefail
source "$(dirname "$0")/loader_env.sh"

make_ds ord --samples 12000 --field x:u8:3072 --compress lz4 --chunk-size 64K --shard-size 4M
make_ds small --samples 3001 --field x:f32:4x4 --field y:i64 --compress lz4 \
    --chunk-size 2K --shard-size 32K
start_server --data "$work/ord" --data "$work/small"
check() { "$DSC_BIN/loader_check" "$@" --servers "127.0.0.1:$port"; }

for order in 0 1; do
    check once --dataset small --dir "$work/small" --batch 16 --window 300 --order "$order"
    check resize --dataset small --dir "$work/small" --batch 16 --from 4 --to 2 --order "$order"
done
check resize --dataset small --dir "$work/small" --batch 8 --from 8 --to 3
check resize --dataset small --dir "$work/small" --batch 8 --from 2 --to 16
traffic() {
    check traffic --dataset ord --dir "$work/ord" --batch 64 --window 256 --cache 3145728 \
        --epochs 3 "$@"
}
traffic --to 8 --max-ratio 1.1 --max-attributed 1.1
traffic --to 3 --max-ratio 1.1 --max-attributed 1.1
traffic --to 8 --order 1 --min-ratio 3
# Default options (cache_bytes far above a rank's share, so ranks keep chunks across epochs and
# plan one epoch ahead): each epoch's steps cause at most 1.1x the stored size to be fetched, and
# the first epoch receives about its own bytes and the next epoch's (a rank's look-ahead ring
# holds about 15 of its epochs here: without the one-epoch limit it would fetch most of them).
check traffic --dataset ord --dir "$work/ord" --batch 64 --epochs 3 --to 8 --max-attributed 1.1 \
    --max-first 3
echo ok
