#!/usr/bin/env bash
# The loader's verdict on a shaped link (C counterpart: dscache bench prints the verdict of
# dsc_stats_t): dscached on h1, the trainer on h2, the link between them limited by tc tbf to
# 40 Mbit/s: the verdict is "fetch" with the network named in the suggestion. (A long round trip
# with a small in-flight budget, "inflight", is induced in tests/python/test_verdict.py through a
# delaying relay: netem is not available on every kernel.)
set -euo pipefail
here=$(dirname "$0")
source "$here/lib.sh"
netns_check
command -v tc >/dev/null || { echo "SKIP: tc (iproute2) is not installed"; exit 77; }
source "$here/../integration/base_lib.sh"
DSC_BIN=${DSC_BIN:?DSC_BIN must point at the build bin directory}
cleanup_hooks+=(netns_cleanup)

netns_setup 2 78
ds=vn
"$DSC_BIN/dscache" ingest synthetic -o "$work/$ds" --name "$ds" --samples 40000 \
    --field x:f32:256 --field y:i64 --compress none --chunk-size 64K --shard-size 1M >/dev/null
addr=$(netns_ip 1):7070
netns_exec 1 "$DSC_BIN/dscached" --listen "$addr" --http off --threads 1 --memory 256M \
    --log-level warn --data "$work/$ds" --warm >"$work/server-1.log" 2>&1 &
pids+=("$!")
until_ok 20 netns_exec 2 "$DSC_BIN/dscache" stat --server "$addr" \
    || { cat "$work/server-1.log"; echo "FAIL: server on h1 not reachable"; exit 1; }

# bench OUT ARGS...: 12 s of a fast consumer on h2 (the verdict covers its last 5-10 s).
bench() {
    local out=$1; shift
    netns_exec 2 "$DSC_BIN/dscache" bench --server "$addr" --dataset "$ds" --batch-size 64 \
        --seconds 12 --job "netns-$out" "$@" >"$work/$out.txt" 2>&1 || true
    grep -E '^(throughput|stall|limit|suggestion):' "$work/$out.txt" | sed "s/^/  $out: /"
}

# Bandwidth: 40 Mbit/s both ways.
netns_shape 1 40mbit
bench bandwidth
if grep -q '^limit: fetch' "$work/bandwidth.txt"; then
    pass "tbf 40mbit: the verdict is fetch"
else
    fail "tbf 40mbit: wanted limit: fetch: $(cat "$work/bandwidth.txt")"
fi
grep -q 'network or the servers are the limit' "$work/bandwidth.txt" \
    || fail "fetch: the suggestion names the network"

finish
