#!/usr/bin/env bash
# Finding: clients that pipeline GETs of non-resident shards and never read their answers must not
# grow the server: everything held for a connection (answers, read-through buffers, partial
# requests) counts against --max-out per connection and --max-out-total for the whole server;
# such a connection stops being read. With 8 of them the peak RSS stays under
# start + 2 x --memory + the bounds, and a well-behaved client is still served meanwhile.
source "$(dirname "$0")/server_lib.sh"
source "$(dirname "$0")/hostile_lib.sh"

# ~20 MiB of 256 KiB shards (8 chunks of 32 KiB each) against a 2 MiB store: nearly every GET is a
# read-through of a whole shard.
make_dataset "$work/ds" memds 20000 none
shards=$(ls "$work/ds" | grep -c '\.dsc$' || true)
[ "$shards" -ge 40 ] || { fail "dataset has $shards shards"; finish; }
chunks=8

# run_flood NAME BOUND_MB ARGS...: 8 non-reading clients for 4 s against a server started with
# ARGS; the peak RSS must stay under the start RSS + BOUND_MB.
run_flood() {
    local name=$1 bound_mb=$2; shift 2
    start_server "$name" --data "$work/ds" --memory 2M "$@"
    local pid_var="PID_$name" addr_var="ADDR_$name" http_var="HTTP_$name"
    local pid=${!pid_var} addr=${!addr_var} http=${!http_var}
    local base_kb
    base_kb=$(rss_kb "$pid")
    local flood=()
    for i in $(seq 1 8); do
        "$HOSTILE" flood "$addr" memds "$shards" "$chunks" 4 >"$work/flood-$name-$i.out" 2>&1 &
        flood+=("$!")
        pids+=("$!")
    done
    sleep 2
    # A polite client is served while the flood goes on (the server is not wedged).
    out=$("$TOOL" get "$addr" memds 1 0 1) && grep -q '^OK' <<<"$out" \
        && pass "$name: a reading client is served during the flood" \
        || fail "$name: reading client during the flood: $out"
    for p in "${flood[@]}"; do wait "$p" || true; done
    local peak_kb paused
    peak_kb=$(peak_rss_kb "$pid")
    paused=$(hmetric "$http" dscache_backpressure_pauses_total)
    echo "$name: RSS at start $((base_kb / 1024)) MiB, peak $((peak_kb / 1024)) MiB" \
        "(bound: start + $bound_mb MiB); paused reads $paused;" \
        "$(cat "$work"/flood-"$name"-*.out | awk '{ s += $2 } END { print s }') GETs written"
    if [ "$SANITIZED" = 1 ]; then
        echo "$name: peak RSS not checked under a sanitizer (shadow memory and quarantine)"
    elif [ "$peak_kb" -le $((base_kb + bound_mb * 1024)) ]; then
        pass "$name: peak RSS $((peak_kb / 1024)) MiB within the bound"
    else
        fail "$name: peak RSS $((peak_kb / 1024)) MiB over start $((base_kb / 1024)) + $bound_mb MiB"
    fi
    [ "$paused" != missing ] && [ "$paused" -gt 0 ] && pass "$name: reads were paused" \
        || fail "$name: no read was paused ($paused)"
    kill -0 "$pid" && pass "$name: server alive" || fail "$name: server died"
    stop_within "$name" 40
}

# Per-connection bound only: 2 x 2 MiB store + 8 x 1 MiB + 16 MiB of slack (allocator, stacks).
run_flood a 28 --max-out 1M
# The server-wide bound below the per-connection ones: 2 x 2 MiB + 4 MiB + 16 MiB of slack.
run_flood b 24 --max-out 4M --max-out-total 4M
finish
