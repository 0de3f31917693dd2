#!/usr/bin/env bash
# The caller's order (DSC_ORDER_CALLER, docs/order.md#the-callers-order) through a real dscached:
# order_check pushes two epochs of sampler-like orders (a permutation with repeats, batches of 1
# .. B) ahead of next() within the room the loader gives, and checks every batch against the
# pushed one (indices, boundaries, step numbers) and the shard files byte for byte; a state saved
# mid-epoch resumes exactly in a new loader given the same order, and is refused with another;
# every bad input (index out of range, a negative one, batch sizes, a push past the room, rank /
# world size / drop_last / shuffle_window / epochs with the caller's order, states across orders)
# gets its code and a line naming the culprit. Run with a small look-ahead (the loader waits on
# the caller's pushes) and the default one (sized from cache_bytes).
set -euo pipefail
source "$(dirname "$0")/loader_env.sh"
[ -x "$DSC_BIN/order_check" ] || { echo "SKIP: $DSC_BIN/order_check not built"; exit 77; }

make_ds co --samples 3001 --field x:f32:4x4 --field y:i64 --compress lz4 \
    --chunk-size 2K --shard-size 32K
start_server --data "$work/co"
check() { "$DSC_BIN/order_check" --servers "127.0.0.1:$port" --dataset co --dir "$work/co" "$@"; }

check --batch 16 --ahead 3
check --batch 32
check --batch 7 --ahead 1 --epochs 3
echo ok
