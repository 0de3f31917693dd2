#!/usr/bin/env bash
# Loader through a real dscached: batch bytes equal the shard files (raw and lz4, several
# dtypes and shapes), exactly once per epoch across ranks (world 1, 3, 8, with and without
# drop_last), same seed same order, resume and elastic resume (8 -> 4, 8 -> 16), a state refused
# by a loader with other shuffle settings, a cache_bytes too small for a shuffle window (warned,
# refetches counted).
set -euo pipefail
source "$(dirname "$0")/loader_env.sh"

make_ds lz4a --samples 3001 --field x:f32:4x4 --field y:i64 --compress lz4 \
    --chunk-size 2K --shard-size 32K
make_ds rawb --samples 1203 --field img:u8:3x5x7 --field h:f16:3 --field b:bf16:2x2 \
    --field t:u16:9 --compress none --chunk-size 3K --shard-size 40K
start_server --data "$work/lz4a" --data "$work/rawb"
check() { "$DSC_BIN/loader_check" "$@" --servers "127.0.0.1:$port"; }

check once --dataset lz4a --dir "$work/lz4a" --batch 16 --window 300
check once --dataset rawb --dir "$work/rawb" --batch 7 --window 100 --threads 1 --connections 1
check order --dataset lz4a --dir "$work/lz4a" --batch 32
check order --dataset rawb --dir "$work/rawb" --batch 8 --shuffle 0
check resume --dataset lz4a --dir "$work/lz4a" --batch 32 --window 500
check elastic --dataset lz4a --dir "$work/lz4a" --batch 16
# Tight budgets: one chunk in flight, a cache smaller than a window, one slot.
check once --dataset rawb --dir "$work/rawb" --batch 5 --prefetch 1 --inflight 1 --cache 1
# A cache smaller than a window's chunks: a warning at create and refetches counted; the
# suggested cache_bytes and the defaults fetch every chunk once per epoch.
check cache --dataset lz4a --dir "$work/lz4a" --batch 16 --window 600 --cache 20000
echo ok
