#!/usr/bin/env bash
# Two jobs with the same seed and options started together on one dataset 4x the server's RAM
# behind tests/slowfs (20 ms per read) read it from storage about once (issue 21): each loader
# announces the chunks it will ask for next (HINT), the server reads the non-resident ones ahead
# into its staging area and keeps each until both jobs were served. From the server's STAT:
#   - two jobs with hints read through <= 1.2x the dataset bytes that are not resident (the bytes
#     that must come from storage), and <= 1.2x what one job alone reads;
#   - the same two jobs without hints (DSCACHE_HINTS=0) read > 1.2x what one job reads (the
#     "before": the test fails without the hints);
#   - a server without read-ahead (--staging-memory 0) answers HINT UNSUPPORTED: each loader
#     says so once and reads as before.
source "$(dirname "$0")/server_lib.sh"
source "$(dirname "$0")/slowfs_lib.sh"

# 20000 samples of 3080 bytes in 256 KiB chunks: 62 MB; the store holds a quarter of it.
"$CLI" ingest synthetic -o "$work/ds" --name sh --samples 20000 --field image:u8:3x32x32 \
    --field label:i64 --seed 1 --compress none --shard-size 4M --chunk-size 256K >/dev/null
if ! mount_slowfs --latency-ms 20 --bandwidth 400M; then
    echo "SKIP: FUSE cannot mount here: $(tail -2 "$work/slowfs.log" | tr '\n' ' ')"
    exit 77
fi

# "Together": the second job starts 0.3 s after the first (as two launches on a busy machine
# do); an epoch takes about 1.6 s (a 394 KB batch per 10 ms step).
OFFSET=${OFFSET:-0.3}

# run_jobs TAG N SERVER_ARGS...: a warmed server, N `dscache bench` of one epoch each (same seed
# and options), OFFSET apart; prints "read_through missed staging_hits staging_hints" (STAT).
run_jobs() {
    local tag=$1 n=$2; shift 2
    start_server "$tag" --data "$mnt" --memory 16M --warm "$@"
    local addr_var="ADDR_$tag" addr
    addr=${!addr_var}
    local jobs=()
    for k in $(seq 1 "$n"); do
        [ "$k" -gt 1 ] && sleep "$OFFSET"
        "$CLI" bench --server "$addr" --dataset sh --batch-size 128 --compute-ms 10 --epochs 1 \
            --seed 7 --cache 64M --job "$tag-$k" >"$work/bench-$tag-$k.out" 2>&1 &
        jobs+=("$!")
        pids+=("$!")
    done
    local k=0
    for p in "${jobs[@]}"; do
        k=$((k + 1))
        wait "$p" || fail "$tag: job $k: $(tail -3 "$work/bench-$tag-$k.out")"
    done
    json_get "$("$TOOL" call "$addr" STAT sh)" \
        '"%d %d %d %d" % (j["store"]["read_through_bytes"], j["datasets"][0]["bytes"] - j["datasets"][0]["cached_bytes"], j["store"]["staging"]["hits"], j["store"]["staging"]["hints"])'
    stop_server "$tag"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }

t0=$(date +%s)
read -r one missed _ _ < <(run_jobs one 1)
echo "one job: read through $one bytes for $missed missed bytes ($(ratio "$one" "$missed")x)"
read -r two missed hits hints < <(run_jobs two 2)
echo "two jobs: read through $two bytes ($(ratio "$two" "$missed")x the missed bytes," \
    "$(ratio "$two" "$one")x one job's)"
[ "$hints" -gt 0 ] && [ "$hits" -gt 0 ] \
    && pass "STAT store.staging: $hints hinted ranges, $hits GETs answered from staged ranges" \
    || fail "STAT store.staging: hints $hints, hits $hits (want both > 0)"
le "$(ratio "$two" "$missed")" 1.2 \
    && pass "two jobs together read the missed bytes $(ratio "$two" "$missed")x (<= 1.2x)" \
    || fail "two jobs together read the missed bytes $(ratio "$two" "$missed")x (want <= 1.2x)"
le "$(ratio "$two" "$one")" 1.2 \
    && pass "two jobs read $(ratio "$two" "$one")x what one job reads (<= 1.2x)" \
    || fail "two jobs read $(ratio "$two" "$one")x what one job reads (want <= 1.2x)"

read -r nohint missed _ _ < <(DSCACHE_HINTS=0 run_jobs nohint 2)
echo "two jobs without hints: read through $nohint bytes ($(ratio "$nohint" "$one")x one job's)"
le "$(ratio "$nohint" "$one")" 1.2 \
    && fail "without hints two jobs read $(ratio "$nohint" "$one")x one job: the test cannot tell" \
    || pass "without hints: $(ratio "$nohint" "$one")x one job (> 1.2x: the hints make the difference)"

read -r old missed _ _ < <(DSCACHE_LOG=info run_jobs old 2 --staging-memory 0)
echo "no read-ahead on the server: read through $old bytes ($(ratio "$old" "$one")x one job's)"
le "$(ratio "$old" "$one")" 1.2 \
    && fail "without read-ahead on the server: $(ratio "$old" "$one")x one job: the test cannot tell" \
    || pass "without read-ahead on the server: $(ratio "$old" "$one")x one job (> 1.2x)"
for k in 1 2; do
    n=$(grep -c 'has no read-ahead (HINT answered UNSUPPORTED)' "$work/bench-old-$k.out" || true)
    [ "$n" = 1 ] && pass "job $k: UNSUPPORTED logged once, then no more hints" \
        || fail "job $k: the UNSUPPORTED line appears $n times (want 1)"
done
echo "took $(($(date +%s) - t0)) s"
finish
