#!/usr/bin/env bash
# Memory stays within the configured bound: a dataset many times the prefetch + cache budget
# streams through with resident memory bounded (VmRSS from /proc/self/status).
set -euo pipefail
source "$(dirname "$0")/loader_env.sh"

samples=24000 # 24000 x 4 KiB = ~94 MiB, lz4
bound=80      # MiB: libraries + slots + 16 MiB cache + 8 MiB in flight + pool, with margin
if [ "${DSC_SANITIZE:-OFF}" = ON ] || [ "${DSC_TSAN:-OFF}" = ON ]; then
    samples=6000
    bound=400   # the sanitizers' shadow memory (and ASan's quarantine)
fi
make_ds big --samples "$samples" --field x:u8:64x64 --compress lz4 --chunk-size 256K \
    --shard-size 8M
start_server --data "$work/big" --memory 512M
"$DSC_BIN/loader_check" rss --servers "127.0.0.1:$port" --dataset big --dir "$work/big" \
    --batch 64 --window 2048 --inflight $((8 << 20)) --cache $((16 << 20)) --rss-mb "$bound"
