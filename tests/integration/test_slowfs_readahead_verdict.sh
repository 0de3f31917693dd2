#!/usr/bin/env bash
# Storage that keeps just ahead of the GETs is still named (issue 33): a dataset 4x the server's
# RAM behind tests/slowfs at 20 ms per read, its bandwidth capped at 1.7x the bound (what the
# misses of this machine's loader need, measured first against the dataset in RAM). Read-ahead
# (HINT) answers most GETs from staged ranges: their bytes were read from the store all the
# same, so the REPORT answer counts them with the misses (it counted them as RAM hits, the miss
# share fell near 0 and the verdict said `fetch: the network or the servers are the limit`).
source "$(dirname "$0")/server_lib.sh"
source "$(dirname "$0")/slowfs_lib.sh"

# 20000 samples of 3080 bytes in 1 MiB chunks: 62 MB; the store holds a quarter of it.
"$CLI" ingest synthetic -o "$work/ds" --name ra --samples 20000 --field image:u8:3x32x32 \
    --field label:i64 --seed 1 --compress none --shard-size 4M --chunk-size 1M >/dev/null
D=$(du -sb "$work/ds" | cut -f1)
bench() { # ADDR SECONDS JOB: dscache bench with a 5 ms step
    "$CLI" bench --server "$1" --dataset ra --batch-size 256 --compute-ms 5 --seconds "$2" \
        --cache 32M --shuffle-window 4000 --report-seconds 1 --job "$3" 2>&1
}
# The demand of this machine's loader: the dataset in RAM.
start_server ram --data "$work/ds" --memory 128M --warm
out=$(bench "$ADDR_ram" 3 ra-ram) || fail "dscache bench (RAM): $out"
stop_server ram
demand=$(sed -nE 's/^throughput: .* ([0-9.]+) GB\/s decoded.*/\1/p' <<<"$out")
# 3/4 of it misses a server holding a quarter: the bound; the store gets 1.7x that.
cap=$(awk -v g="${demand:-0}" 'BEGIN { printf "%d", g * 1e9 * 0.75 * 1.7 }')
[ "$cap" -gt 1000000 ] || fail "no demand measured: $out"
echo "demand $(awk -v g="$demand" 'BEGIN { printf "%.1f", g * 1000 }') MB/s; store capped at $((cap / 1000000)) MB/s, 20 ms per read"
if ! mount_slowfs --latency-ms 20 --bandwidth "$cap"; then
    echo "SKIP: FUSE cannot mount here: $(tail -2 "$work/slowfs.log" | tr '\n' ' ')"
    exit 77
fi
start_server a --data "$mnt" --memory $((D / 4)) --warm
out=$(bench "$ADDR_a" 8 ra-slow) || fail "dscache bench: $out"
grep -E '^(stall|stall by cause|busy|limit|suggestion):' <<<"$out"
stat=$("$TOOL" call "$ADDR_a" STAT ra)
report=$("$TOOL" call "$ADDR_a" REPORT ra)
echo "REPORT answer: $report"
read -r staged hits misses <<<"$(json_get "$stat" \
    '"%d %d %d" % (j["store"]["staging"]["hits"], sum(d["hits"] for d in j["datasets"]), sum(d["misses"] for d in j["datasets"]))')"
[ "$staged" -gt 0 ] || { echo "SKIP: read-ahead answered no GET here (STAT: $stat)"; exit 77; }
json_get "$report" "j['misses'] == $misses + $staged and j['hits'] == $hits - $staged" | grep -qx True \
    && pass "REPORT counts the $staged GETs answered from read-ahead with the $misses misses" \
    || fail "REPORT $report; STAT: $hits hits ($staged from read-ahead), $misses misses"
# The verdict: the link is loopback, never the limit; the stall waits on the store.
limit=$(sed -nE 's/^limit: ([a-z0-9]+).*/\1/p' <<<"$out")
case $limit in
fetch | inflight | server) fail "the verdict blames the network or the server: $(grep '^limit' <<<"$out")" ;;
*) pass "verdict $limit (not the network)" ;;
esac
stop_server a
finish
