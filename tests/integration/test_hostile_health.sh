#!/usr/bin/env bash
# Finding: /healthz must answer within 100 ms however many clients hold connections: 2,000 data
# connections (descriptors above 1024, where a select()-based HTTP server goes blind) and then
# 500 idle HTTP connections on top (the HTTP server's own limit and time-outs must not lock
# /healthz out), and again once a client keeps reconnecting 64 idle HTTP connections.
source "$(dirname "$0")/server_lib.sh"
source "$(dirname "$0")/hostile_lib.sh"

need=6000
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt "$need" ]; then
    echo "SKIP: the descriptor hard limit is $hard, this test needs $need"
    exit 77
fi
ulimit -Sn "$need"
# Sanitizers slow every request down: the latency bound is theirs, ten times looser.
limit_ms=100
[ "$SANITIZED" = 1 ] && limit_ms=1000

make_dataset "$work/ds" hds 500 none
start_server a --data "$work/ds" --memory 16M

# check_healthz WHAT: five requests to /healthz, every one within limit_ms.
check_healthz() {
    local worst=0 ms all=""
    for _ in 1 2 3 4 5; do
        ms=$(healthz_ms "$HTTP_a")
        all="$all $ms"
        [ "$ms" -gt "$worst" ] && worst=$ms
        sleep 0.05
    done
    echo "/healthz with $1: ms$all"
    [ "$worst" -le "$limit_ms" ] && pass "/healthz within $limit_ms ms with $1 (worst $worst ms)" \
        || fail "/healthz with $1: worst $worst ms (limit $limit_ms)"
}

check_healthz "no load"
# 2,000 data connections from 8 loopback peers (250 each), HELLO sent on each.
HOSTILE_SOURCES=8 "$HOSTILE" hold "$ADDR_a" 2000 30 hello >"$work/data.out" 2>&1 &
hold_data=$!
pids+=("$hold_data")
wait_line "$work/data.out" '^opened' 60 || fail "data connections were not opened"
grep -q '^opened 2000$' "$work/data.out" && pass "2000 data connections open" \
    || fail "data connections: $(cat "$work/data.out")"
until_ok 10 conns_at_least "$HTTP_a" 2000 \
    || fail "the server counts $(hmetric "$HTTP_a" dscache_open_connections) connections"
check_healthz "2000 data connections"

# 500 idle HTTP connections on top (nothing sent on them).
"$HOSTILE" hold "$HTTP_a" 500 20 idle >"$work/http.out" 2>&1 &
hold_http=$!
pids+=("$hold_http")
wait_line "$work/http.out" '^opened' 30 || fail "HTTP connections were not opened"
grep -q '^opened 500$' "$work/http.out" && pass "500 idle HTTP connections open" \
    || fail "HTTP connections: $(cat "$work/http.out")"
sleep 0.5
check_healthz "2000 data and 500 idle HTTP connections"
kill "$hold_http" 2>/dev/null || true; wait "$hold_http" 2>/dev/null || true

# A client that holds 64 idle HTTP connections and reconnects each time they are dropped.
(
    while :; do "$HOSTILE" hold "$HTTP_a" 64 2 idle >/dev/null 2>&1; done
) &
churn=$!
pids+=("$churn")
sleep 3
check_healthz "64 idle HTTP connections reconnected"
kill "$churn" 2>/dev/null || true; wait "$churn" 2>/dev/null || true
kill "$hold_data" 2>/dev/null || true; wait "$hold_data" 2>/dev/null || true

until_ok 20 conns_equal "$HTTP_a" 0 \
    && pass "every data connection closed" \
    || fail "connections left: $(hmetric "$HTTP_a" dscache_open_connections)"
stop_within a 40
finish
