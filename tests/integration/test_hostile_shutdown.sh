#!/usr/bin/env bash
# Finding: SIGTERM while read-through loads run (a 1 MiB store, clients sending whole-shard GETs
# and hanging up) must not free what the I/O threads still use (ASan: heap-use-after-free in
# deliver; TSan: a destroyed mutex in mailbox_push), and every GET waiting on a load at SIGTERM
# is answered (data or an error status) before the connection closes.
source "$(dirname "$0")/server_lib.sh"
source "$(dirname "$0")/hostile_lib.sh"

make_dataset "$work/ds" sdds 16000 none
shards=$(ls "$work/ds" | grep -c '\.dsc$' || true)
chunks=8
for round in 1 2 3; do
    # Every load (whole-shard or read-through) pauses 30 ms: loads are in flight at SIGTERM.
    DSC_TEST_LOAD_DELAY_MS=30 start_server "r$round" --data "$work/ds" --memory 1M --io-threads 2
    addr_var="ADDR_r$round"
    addr=${!addr_var}
    # The drain client's 40 GETs are read and waiting on loads (30 ms each, 2 I/O threads)
    # before the churn starts; SIGTERM comes while both are in flight.
    "$HOSTILE" drain "$addr" sdds "$shards" "$chunks" 40 >"$work/drain.out" 2>&1 &
    drain=$!
    pids+=("$drain")
    wait_line "$work/drain.out" '^sent' 20 || fail "round $round: the drain client did not send"
    sleep 0.2
    churn=()
    for i in 1 2 3 4; do
        "$HOSTILE" churn "$addr" sdds "$shards" "$chunks" 1000 >/dev/null 2>&1 &
        churn+=("$!")
        pids+=("$!")
    done
    sleep 0.3
    stop_within "r$round" 40
    drc=0
    wait "$drain" || drc=$?
    out=$(tail -1 "$work/drain.out")
    [ "$drc" = 0 ] && pass "round $round: $out" || fail "round $round: $out"
    for p in "${churn[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    log=$work/server-r$round.log
    if grep -qE 'AddressSanitizer|ThreadSanitizer|runtime error' "$log"; then
        fail "round $round: sanitizer report"
        grep -m5 -E 'ERROR|WARNING|SUMMARY' "$log" >&2
    else
        pass "round $round: no sanitizer report"
    fi
done
finish
