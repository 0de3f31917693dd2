#!/usr/bin/env bash
# Random access by sample index (dsc_reader_*, reader_check.c): batches of any indices byte-equal
# to the shard files, served by dscached and read from the files alone; the chunk cache (a chunk
# fetched once while it fits; a cache too small: single samples by RANGE, no refetch); bad
# input; a damaged chunk read from an intact copy, else failing with the loader's error;
# variable-length fields (values and padded) equal to the loader's batches for the same indices.
set -euo pipefail
source "$(dirname "$0")/loader_env.sh"
for exe in reader_check shard_damage loader_var_check; do
    [ -x "$DSC_BIN/$exe" ] || { echo "SKIP: $DSC_BIN/$exe not built"; exit 77; }
done

# 3000 samples of 264 bytes in 3 shards, 15 samples per chunk (200 chunks).
make_ds rd --samples 3000 --field x:f32:64 --field y:i64 --compress lz4 --chunk-size 4K \
    --shard-size 300K
make_ds rr --samples 1000 --field x:u8:100 --field y:i32 --compress none --chunk-size 2K \
    --shard-size 40K
start_server --data "$work/rd" --data "$work/rr"
srv="127.0.0.1:$port"
"$DSC_BIN/reader_check" data --servers "$srv" --dataset rd --dir "$work/rd"
"$DSC_BIN/reader_check" data --servers "$srv" --dataset rr --dir "$work/rr" --batch 7
"$DSC_BIN/reader_check" data --fallback "$work/rd" --dataset rd --dir "$work/rd"
"$DSC_BIN/reader_check" cache --servers "$srv" --dataset rd --dir "$work/rd"
"$DSC_BIN/reader_check" bad --servers "$srv" --dataset rd --dir "$work/rd"

# Damaged copies: a server answering CORRUPT beside intact fallback files reads them instead;
# alone, the request fails with the loader's error naming shard and chunk.
cp -r "$work/rd" "$work/flip"
cp -r "$work/rd" "$work/silent"
"$DSC_BIN/shard_damage" flip "$work/flip" 1 >/dev/null
"$DSC_BIN/shard_damage" silent "$work/silent" 1 >/dev/null
start_server --data "$work/flip"
"$DSC_BIN/reader_check" data --servers "127.0.0.1:$port" --fallback "$work/rd" --dataset rd \
    --dir "$work/rd" --damaged 1
"$DSC_BIN/reader_check" corrupt --servers "127.0.0.1:$port" --dataset rd --dir "$work/rd" \
    --expect-error DSC_ECORRUPT
start_server --data "$work/silent"
"$DSC_BIN/reader_check" corrupt --servers "127.0.0.1:$port" --dataset rd --dir "$work/rd" \
    --expect-error DSC_EDATASUM
"$DSC_BIN/reader_check" corrupt --fallback "$work/flip" --dataset rd --dir "$work/rd" \
    --expect-error DSC_ECHUNKSUM

# Variable-length fields: the reader's batches equal the loader's for the same indices.
"$DSC_BIN/loader_var_check" gen "$work/varz" varz 200 lz4
"$DSC_BIN/loader_var_check" gen "$work/varr" varr 131 raw
start_server --data "$work/varz" --data "$work/varr"
"$DSC_BIN/reader_check" loadereq --servers "127.0.0.1:$port" --dataset varz --batch 16
"$DSC_BIN/reader_check" loadereq --servers "127.0.0.1:$port" --dataset varr --batch 5
"$DSC_BIN/reader_check" loadereq --servers "127.0.0.1:$port" --dataset varz --batch 16 --pad 1 \
    --max-len 7
"$DSC_BIN/reader_check" loadereq --fallback "$work/varz" --dataset varz --batch 9
echo ok
