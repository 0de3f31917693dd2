#!/usr/bin/env bash
# Batch lifetime through a real dscached: batches kept past next() (retained, or held by a
# DLPack tensor) are never overwritten (10 kept, a one-ahead consumer, gradient accumulation
# over 4, every byte checked), slots are added while batches are held, max_held_bytes gives
# DSC_EHELD naming the bound, and an older, smaller options struct is accepted.
set -euo pipefail
source "$(dirname "$0")/loader_env.sh"

make_ds holdds --samples 2000 --field x:f32:4x4 --field y:i64 --compress lz4 \
    --chunk-size 2K --shard-size 32K
start_server --data "$work/holdds"
"$DSC_BIN/loader_check" hold --dataset holdds --dir "$work/holdds" --batch 32 --window 300 \
    --servers "127.0.0.1:$port"
echo ok
