#!/usr/bin/env bash
# The hint horizon (issue 21): a loader hints the chunks of the next seconds of demand, computed
# from the plan, not only what its queue holds (about --cache of it). One job of one epoch on a
# dataset 4x the server's RAM behind tests/slowfs (20 ms per read), with a loader cache of 8 MiB
# (32 chunks of 256 KiB). Polling the server's /metrics while it runs:
#   - with the horizon (the default, 4 s), the hinted ranges waiting to be read ahead
#     (dscache_staging_pending, one chunk each) reach more than twice the loader's cache, and
#     GETs are answered from staged ranges (dscache_staging_hits_total > 0);
#   - with DSCACHE_HINT_SECONDS=0 (hints name only what is queued) they stay at or below it (the
#     test can tell the two apart);
#   - both read from storage about the missed bytes once (<= 1.1x): what is read ahead is asked
#     for (bench --epochs 1 tells the loader its last epoch: nothing of the next is hinted).
source "$(dirname "$0")/server_lib.sh"
source "$(dirname "$0")/slowfs_lib.sh"

# 20000 samples of 3080 bytes in 256 KiB chunks: 62 MB; the store holds a quarter of it.
"$CLI" ingest synthetic -o "$work/ds" --name hz --samples 20000 --field image:u8:3x32x32 \
    --field label:i64 --seed 1 --compress none --shard-size 4M --chunk-size 256K >/dev/null
if ! mount_slowfs --latency-ms 20 --bandwidth 400M; then
    echo "SKIP: FUSE cannot mount here: $(tail -2 "$work/slowfs.log" | tr '\n' ' ')"
    exit 77
fi
CHUNK=262144 CACHE=$((8 << 20))

# run_job TAG: a warmed server, one `dscache bench` epoch; prints "max_pending hits read_through
# missed" (the pending gauge polled every 20 ms while the job runs).
run_job() {
    local tag=$1
    start_server "$tag" --data "$mnt" --memory 16M --warm
    local addr_var="ADDR_$tag" http_var="HTTP_$tag"
    local addr=${!addr_var} http=${!http_var}
    "$CLI" bench --server "$addr" --dataset hz --batch-size 128 --compute-ms 10 --epochs 1 \
        --seed 7 --cache $CACHE --shuffle-window 1024 --job "$tag" >"$work/bench-$tag.out" 2>&1 &
    local job=$! max=0 v
    pids+=("$job")
    while kill -0 "$job" 2>/dev/null; do
        v=$(curl -sf "http://$http/metrics" | awk '$1 == "dscache_staging_pending" { printf "%d", $2 }')
        [ -n "$v" ] && [ "$v" -gt "$max" ] && max=$v
        sleep 0.02
    done
    wait "$job" || fail "$tag: $(tail -3 "$work/bench-$tag.out")"
    echo "$max $(json_get "$("$TOOL" call "$addr" STAT hz)" \
        '"%d %d %d" % (j["store"]["staging"]["hits"], j["store"]["read_through_bytes"], j["datasets"][0]["bytes"] - j["datasets"][0]["cached_bytes"])')"
    stop_server "$tag"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }

read -r pend hits rt missed < <(run_job horizon)
echo "horizon: at most $pend ranges pending ($((pend * CHUNK >> 20)) MiB; cache $((CACHE >> 20)) MiB)," \
    "$hits GETs from staged ranges, read through $(ratio "$rt" "$missed")x the missed bytes"
[ $((pend * CHUNK)) -gt $((2 * CACHE)) ] \
    && pass "hinted beyond the cache: $((pend * CHUNK >> 20)) MiB pending > 2 x $((CACHE >> 20)) MiB" \
    || fail "hinted $((pend * CHUNK >> 20)) MiB pending at most (want > 2 x the cache, $((CACHE >> 20)) MiB)"
[ "$hits" -gt 0 ] && pass "$hits GETs answered from staged ranges" || fail "no GET answered from a staged range"
le "$(ratio "$rt" "$missed")" 1.1 && pass "storage read $(ratio "$rt" "$missed")x the missed bytes (<= 1.1x)" \
    || fail "storage read $(ratio "$rt" "$missed")x the missed bytes (want <= 1.1x: read ahead, never asked)"

read -r pend hits rt missed < <(DSCACHE_HINT_SECONDS=0 run_job queue)
echo "queue only: at most $pend ranges pending, $hits GETs from staged ranges," \
    "read through $(ratio "$rt" "$missed")x the missed bytes"
[ $((pend * CHUNK)) -le "$CACHE" ] \
    && pass "without the horizon: $((pend * CHUNK >> 20)) MiB pending at most (<= the cache: the test can tell)" \
    || fail "without the horizon $((pend * CHUNK >> 20)) MiB pending (> the cache): the test cannot tell"
le "$(ratio "$rt" "$missed")" 1.1 || fail "queue only: storage read $(ratio "$rt" "$missed")x the missed bytes"
finish
