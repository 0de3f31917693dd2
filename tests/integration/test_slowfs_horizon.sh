#!/usr/bin/env bash
# The hint horizon: a loader hints the chunks of the next seconds of demand, computed from the plan,
# not only what its queue holds (about --cache of it). One job of one epoch on a dataset 4x the
# server's RAM behind tests/slowfs (20 ms per read), with a loader cache of 8 MiB (32 chunks of
# 256 KiB). Polling the server's /metrics while it runs, the hinted ranges that no GET has asked
# for yet ("ahead": accepted - served from staging - joined - expired - dropped unused, one chunk
# each) are the hints' reach past what the loader is fetching:
#   - with the horizon (the default, 4 s) they reach more than 1.5x the loader's cache, and GETs
#     are answered from staged ranges (dscache_staging_hits_total > 0);
#   - with DSCACHE_HINT_SECONDS=0 (hints name only what is queued) they stay at or below it (the
#     test can tell the two apart);
#   - both read from storage about the missed bytes once (<= 1.1x): what is read ahead is asked
#     for (bench --epochs 1 tells the loader its last epoch: nothing of the next is hinted).
# Speed: how far 4 s of demand reaches depends on the machine's step time, so the bound is checked
# against the reach the step times measured in the same run give at least (4 s / the mean step
# after each batch, the run's waiting counted from its start, x the chunks per step not held by
# the server); where that reach is under 4x the cache, or the bound is missed while the machine
# gives a process under 0.8 of a core (a machine too slow or too busy to tell the horizon from
# the queue), the test skips, saying so, once the rest is checked. GETs answered from staged
# ranges (none with queue-only hints) are checked on any machine. It never uses the pending
# gauge (hinted ranges not yet being read) as the bound: that one is a spike whose height is the
# server's backing read rate against the poll interval.
source "$(dirname "$0")/server_lib.sh"
source "$(dirname "$0")/slowfs_lib.sh"

# 20000 samples of 3080 bytes in 256 KiB chunks: 62 MB; the store holds a quarter of it.
"$CLI" ingest synthetic -o "$work/ds" --name hz --samples 20000 --field image:u8:3x32x32 \
    --field label:i64 --seed 1 --compress none --shard-size 4M --chunk-size 256K >/dev/null
if ! mount_slowfs --latency-ms 20 --bandwidth 400M; then
    echo "SKIP: FUSE cannot mount here: $(tail -2 "$work/slowfs.log" | tr '\n' ' ')"
    exit 77
fi
CHUNK=262144 CACHE=$((8 << 20)) HORIZON_S=4
CACHE_CHUNKS=$((CACHE / CHUNK))
CHUNKS=$(json_get "$(cat "$work/ds/manifest.json")" 'sum(s["chunks"] for s in j["shards"])')

# run_job TAG: a warmed server, one `dscache bench` epoch; prints "max_ahead max_pending hits
# read_through missed cached_bytes bytes step_s batches" (the staging counters polled every 20 ms
# while the job runs; step_s the loader's mean step, computing + waiting in next(), per batch).
run_job() {
    local tag=$1
    start_server "$tag" --data "$mnt" --memory 16M --warm
    local addr_var="ADDR_$tag" http_var="HTTP_$tag"
    local addr=${!addr_var} http=${!http_var}
    "$CLI" bench --server "$addr" --dataset hz --batch-size 128 --compute-ms 10 --epochs 1 \
        --seed 7 --cache $CACHE --shuffle-window 1024 --job "$tag" >"$work/bench-$tag.out" 2>&1 &
    local job=$! max_ahead=0 max_pend=0 a p
    pids+=("$job")
    while kill -0 "$job" 2>/dev/null; do
        a= p=
        read -r a p < <(curl -sf "http://$http/metrics" | awk '
            $1 ~ /^dscache_staging_/ { v[substr($1, 17)] = $2 }
            END { served = v["hits_total"] + v["joined_total"] + v["expired_total"]
                  served += v["dropped_unused_total"]
                  if ("pending" in v) printf "%d %d\n", v["accepted_total"] - served, v["pending"] }') || true
        [ -n "$a" ] && [ "$a" -gt "$max_ahead" ] && max_ahead=$a
        [ -n "$p" ] && [ "$p" -gt "$max_pend" ] && max_pend=$p
        sleep 0.02
    done
    wait "$job" || fail "$tag: $(tail -3 "$work/bench-$tag.out")"
    # "stall: 1.2% (0.02 s waiting in next(), 1.67 s computing)" and "1.7 s: 157 batches, ..."
    local step
    step=$(awk '/^stall:/ { gsub(/[(),]/, " "); for (i = 1; i <= NF; i++) { if ($(i+1) == "s" && $(i+2) == "waiting") w = $i; if ($(i+1) == "s" && $(i+2) == "computing") c = $i } }
                / batches, / { for (i = 1; i <= NF; i++) if ($(i+1) == "batches,") b = $i }
                END { if (b > 0) printf "%.6f %d %.6f %.6f", (w + c) / b, b, w, c }' "$work/bench-$tag.out")
    echo "$max_ahead $max_pend $(json_get "$("$TOOL" call "$addr" STAT hz)" \
        '"%d %d %d %d %d" % (j["store"]["staging"]["hits"], j["store"]["read_through_bytes"], j["datasets"][0]["bytes"] - j["datasets"][0]["cached_bytes"], j["datasets"][0]["cached_bytes"], j["datasets"][0]["bytes"])') $step"
    stop_server "$tag"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }

read -r ahead pend hits rt missed cached bytes step batches waited computed < <(run_job horizon)
[ -n "$computed" ] || { fail "no step time in the bench output: $(cat "$work/bench-horizon.out")"; finish; }
# The reach 4 s of demand has at least, in hinted (not resident) chunks. After batch n the loader
# reaches 4 s / its mean step so far, at most the rest of the epoch; that mean is at most (all the
# run's waiting + n x its computing per batch) / n, the waiting all counted from the start (where
# start-up put most of it). The most of that over the epoch, x the chunks per step x the share
# the server does not hold.
expect=$(awk -v h=$HORIZON_S -v w="$waited" -v cs="$computed" -v b="$batches" -v c="$CHUNKS" \
    -v m="$missed" -v t="$bytes" 'BEGIN {
        for (n = 1; n < b; n++) { r = h * n / (w + n * cs / b); if (r > b - n) r = b - n; if (r > best) best = r }
        printf "%d", best * c / b * m / t }')
echo "horizon: mean step $(awk -v s="$step" 'BEGIN { printf "%.1f", s * 1000 }') ms over $batches batches:" \
    "4 s reach at least $expect hinted chunks; at most $ahead ranges ahead of the GETs" \
    "($((ahead * CHUNK >> 20)) MiB; cache $((CACHE >> 20)) MiB), $pend pending at once," \
    "$hits GETs from staged ranges, read through $(ratio "$rt" "$missed")x the missed bytes"
# More than 1.5x the cache (queue-only hints: 0), where the run's steps give the horizon a reach of
# 4x the cache or more (else not checked: the test skips once the rest is checked). Missed where this machine gives a process under 0.8 of a core when it asks for one (beside a CPU
# burner 42 ahead of 149 expected: the loader's threads wait for the CPU too), the test skips,
# saying so, once the rest is checked; missed with the CPU there, it fails.
cpu_share() {
    "${DSC_PYTHON:-/usr/bin/python3}" -c 'import time
w0, c0 = time.monotonic(), time.thread_time()
while time.monotonic() - w0 < 0.5:
    pass
print("%.2f" % ((time.thread_time() - c0) / (time.monotonic() - w0)))'
}
busy=
if [ "$expect" -lt $((4 * CACHE_CHUNKS)) ]; then
    busy="this run's steps give 4 s of demand a reach of $expect chunks at least, under 4x the loader's cache ($((4 * CACHE_CHUNKS))): too slow a machine to tell the horizon from the queue"
elif [ "$ahead" -le $((3 * CACHE_CHUNKS / 2)) ]; then
    share=$(cpu_share)
    awk -v s="$share" 'BEGIN { exit !(s < 0.8) }' \
        && busy="hinted $ahead ranges ahead at most, while this machine gives a process $share of a core when it asks for one (under 0.8)"
fi
if [ -n "$busy" ]; then
    echo "not checked: $busy"
elif [ "$ahead" -gt $((3 * CACHE_CHUNKS / 2)) ]; then
    pass "hinted beyond the cache: $((ahead * CHUNK >> 20)) MiB ahead of the GETs > 1.5 x $((CACHE >> 20)) MiB"
else
    fail "hinted $((ahead * CHUNK >> 20)) MiB ahead of the GETs at most (want > 1.5 x the cache, $((CACHE >> 20)) MiB; 4 s of demand at these steps reaches at least $((expect * CHUNK >> 20)) MiB)"
fi
# Whatever the machine: queue-only hints never get a range staged before its GET (0 hits).
[ "$hits" -gt 0 ] && pass "$hits GETs answered from staged ranges" || fail "no GET answered from a staged range"
le "$(ratio "$rt" "$missed")" 1.1 && pass "storage read $(ratio "$rt" "$missed")x the missed bytes (<= 1.1x)" \
    || fail "storage read $(ratio "$rt" "$missed")x the missed bytes (want <= 1.1x: read ahead, never asked)"

read -r ahead pend hits rt missed _ < <(DSCACHE_HINT_SECONDS=0 run_job queue)
echo "queue only: at most $ahead ranges ahead of the GETs, $pend pending at once, $hits GETs from" \
    "staged ranges, read through $(ratio "$rt" "$missed")x the missed bytes"
[ "$ahead" -le "$CACHE_CHUNKS" ] \
    && pass "without the horizon: $((ahead * CHUNK >> 20)) MiB ahead at most (<= the cache: the test can tell)" \
    || fail "without the horizon $((ahead * CHUNK >> 20)) MiB ahead (> the cache): the test cannot tell"
le "$(ratio "$rt" "$missed")" 1.1 || fail "queue only: storage read $(ratio "$rt" "$missed")x the missed bytes"
if [ "$fails" = 0 ] && [ -n "$busy" ]; then
    echo "SKIP: the horizon's reach was not checked: $busy"
    exit 77
fi
finish
