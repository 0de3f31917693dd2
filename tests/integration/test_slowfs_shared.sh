#!/usr/bin/env bash
# Two jobs with the same seed and options started together on one dataset 4x the server's RAM
# behind tests/slowfs (20 ms per read) read it from storage about once (issue 21): each loader
# announces the chunks it will ask for next (HINT), the server reads the non-resident ones ahead
# into its staging area and keeps each until both jobs were served. Asserts, from the server's
# STAT, backing bytes read through <= 1.2x the dataset bytes that are not resident (the bytes
# that must come from storage), and that the same run without hints (DSCACHE_HINTS=0) against a
# server without read-ahead (--staging-memory 0) reads them about twice (> 1.2x): the "before".
# Also: an old-style server (staging off) answers HINT UNSUPPORTED and the loaders carry on.
source "$(dirname "$0")/server_lib.sh"
source "$(dirname "$0")/slowfs_lib.sh"

# 20000 samples of 3080 bytes in 256 KiB chunks: 62 MB; the store holds a quarter of it.
"$CLI" ingest synthetic -o "$work/ds" --name sh --samples 20000 --field image:u8:3x32x32 \
    --field label:i64 --seed 1 --compress none --shard-size 4M --chunk-size 256K >/dev/null
if ! mount_slowfs --latency-ms 20 --bandwidth 400M; then
    echo "SKIP: FUSE cannot mount here: $(tail -2 "$work/slowfs.log" | tr '\n' ' ')"
    exit 77
fi

# run_pair TAG SERVER_ARGS... : starts a warmed server, runs two `dscache bench` of one epoch
# each at once (same seed and options), prints "ratio through missed" from STAT.
run_pair() {
    local tag=$1; shift
    start_server "$tag" --data "$mnt" --memory 16M --warm "$@"
    local addr_var="ADDR_$tag" addr
    addr=${!addr_var}
    local j1 j2
    for k in 1 2; do
        [ "$k" = 2 ] && sleep "$OFFSET"
        "$CLI" bench --server "$addr" --dataset sh --batch-size 128 --compute-ms 10 --epochs 1 \
            --seed 7 --cache 64M --job "$tag-$k" >"$work/bench-$tag-$k.out" 2>&1 &
        eval "j$k=\$!"
        pids+=("$!")
    done
    wait "$j1" || fail "$tag: job 1: $(tail -3 "$work/bench-$tag-1.out")"
    wait "$j2" || fail "$tag: job 2: $(tail -3 "$work/bench-$tag-2.out")"
    json_get "$("$TOOL" call "$addr" STAT sh)" \
        '"%.3f %d %d %d %d" % (j["store"]["read_through_bytes"] / (j["datasets"][0]["bytes"] - j["datasets"][0]["cached_bytes"]), j["store"]["read_through_bytes"], j["datasets"][0]["bytes"] - j["datasets"][0]["cached_bytes"], j["store"]["staging"]["hits"], j["store"]["staging"]["hints"])'
    stop_server "$tag"
}

# "Together": the second job starts 0.3 s after the first (as two launches on a busy machine do);
# each epoch takes about 1.6 s (a 394 KB batch per 10 ms step).
OFFSET=${OFFSET:-0.3}
t0=$(date +%s)
read -r after through missed hits hints < <(run_pair after)
echo "with hints: read through $through bytes for $missed missed bytes: ${after}x"
[ "$hints" -gt 0 ] && [ "$hits" -gt 0 ] \
    && pass "STAT store.staging: $hints hinted ranges, $hits GETs answered from staged ranges" \
    || fail "STAT store.staging: hints $hints, hits $hits (want both > 0)"
awk -v r="$after" 'BEGIN { exit !(r <= 1.2) }' \
    && pass "two jobs together read the missed bytes ${after}x from storage (<= 1.2x)" \
    || fail "two jobs together read the missed bytes ${after}x from storage (want <= 1.2x)"
# The same server without hints: only GETs that arrive while their chunks are being read share
# that read (single-flight), the rest read them again.
read -r nohint through missed _ _ < <(DSCACHE_HINTS=0 run_pair nohint)
echo "without hints: read through $through bytes for $missed missed bytes: ${nohint}x"
awk -v r="$nohint" 'BEGIN { exit !(r > 1.2) }' \
    && pass "without hints: ${nohint}x (> 1.2x: the hints make the difference)" \
    || fail "without hints the jobs read ${nohint}x: the test cannot tell the hints' effect"
# A server without read-ahead answers HINT UNSUPPORTED: the loaders stop hinting, say so once
# (DSCACHE_LOG=info), and read as before.
read -r before through missed _ _ < <(DSCACHE_LOG=info run_pair before --staging-memory 0)
echo "no read-ahead on the server: read through $through bytes for $missed missed bytes: ${before}x"
awk -v r="$before" 'BEGIN { exit !(r > 1.2) }' \
    && pass "without read-ahead on the server: ${before}x (> 1.2x)" \
    || fail "without read-ahead on the server the jobs read ${before}x: the test cannot tell"
for k in 1 2; do
    n=$(grep -c 'has no read-ahead (HINT answered UNSUPPORTED)' "$work/bench-before-$k.out" || true)
    [ "$n" = 1 ] && pass "job $k: UNSUPPORTED logged once, then no more hints" \
        || fail "job $k: the UNSUPPORTED line appears $n times (want 1)"
done
echo "took $(($(date +%s) - t0)) s"
finish
