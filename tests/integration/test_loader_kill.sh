#!/usr/bin/env bash
# The server dies mid-epoch: the loader reports a clear error code (never a wrong batch: every
# batch before is checked against the shard files), and keeps reporting it.
set -euo pipefail
source "$(dirname "$0")/loader_env.sh"

make_ds k --samples 4000 --field x:f32:8 --compress lz4 --chunk-size 1K --shard-size 16K
start_server --data "$work/k"
out="$work/out"
"$DSC_BIN/loader_check" kill --servers "127.0.0.1:$port" --dataset k --dir "$work/k" \
    --batch 8 --slow-ms 2 --cache 1 >"$out" 2>&1 &
check_pid=$!
pids+=("$check_pid")
sleep 1
kill -9 "$server_pid"
rc=0
wait "$check_pid" || rc=$?
cat "$out"
[ "$rc" -eq 0 ] || { echo "FAIL: loader_check kill exited $rc"; exit 1; }
grep -q "batches before the error" "$out" || { echo "FAIL: no error seen"; exit 1; }
# Unknown dataset and no server: clear errors at create.
if "$DSC_BIN/loader_check" once --servers "127.0.0.1:$port" --dataset k --dir "$work/k" \
    >"$out" 2>&1; then
    echo "FAIL: a loader was created with the server gone"; exit 1
fi
grep -q DSC_EUNAVAIL "$out" || { cat "$out"; echo "FAIL: expected DSC_EUNAVAIL"; exit 1; }
echo ok
