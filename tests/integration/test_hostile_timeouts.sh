#!/usr/bin/env bash
# Finding: data connections need a header time-out (slowloris: a frame started and never
# finished, or dribbled a byte a second) and an idle time-out, and one peer a connection limit.
# With --header-timeout 2 --idle-timeout 3 --max-conns-per-peer 16: 200 half-sent frames and 50
# dribbling ones are closed, idle connections after HELLO too (and not before their time), a
# peer's 17th connection is refused while other peers are served.
source "$(dirname "$0")/server_lib.sh"
source "$(dirname "$0")/hostile_lib.sh"

make_dataset "$work/ds" tods 500 none
start_server a --data "$work/ds" --memory 16M --header-timeout 2 --idle-timeout 3 \
    --max-conns-per-peer 16

# hold_expect N SECONDS MODE WANT_CLOSED WHAT (with HOSTILE_SOURCES set by the caller or not)
hold_expect() {
    local out
    out=$("$HOSTILE" hold "$ADDR_a" "$1" "$2" "$3" 2>&1 | tr '\n' ' ')
    [ "$out" = "opened $1 closed-by-server $4 " ] && pass "$5: $out" || fail "$5: $out (want $4 closed)"
}

export HOSTILE_SOURCES=16 # 16 peers, so that the per-peer limit is not what closes these
hold_expect 200 5 partial 200 "half-sent frames closed by the header time-out"
hold_expect 50 6 dribble 50 "frames dribbled a byte a second closed by the header time-out"
hold_expect 20 6 hello 20 "idle connections closed by the idle time-out"
hold_expect 20 1.5 hello 0 "connections idle 1.5 s stay open"
until_ok 10 conns_equal "$HTTP_a" 0 && pass "every connection closed" \
    || fail "connections left: $(hmetric "$HTTP_a" dscache_open_connections)"

# One peer (127.0.0.2 only): 16 connections are served, the 24 beyond are closed at once.
HOSTILE_SOURCES=1 hold_expect 40 1 hello 24 "one peer's connections beyond 16 refused"
export HOSTILE_SOURCES=1
"$HOSTILE" hold "$ADDR_a" 16 4 hello >"$work/peer.out" 2>&1 &
pids+=("$!")
wait_line "$work/peer.out" '^opened' 10 || true
out=$(timeout 10 "$TOOL" get "$ADDR_a" tods 0 0 1 2>&1) && grep -q '^OK' <<<"$out" \
    && pass "another peer is served while one is at its limit" || fail "other peer: $out"
v=$(hmetric "$HTTP_a" dscache_connection_timeouts_total)
[ "$v" != missing ] && [ "$v" -ge 270 ] && pass "dscache_connection_timeouts_total $v" \
    || fail "dscache_connection_timeouts_total $v (want >= 270)"
v=$(hmetric "$HTTP_a" dscache_peer_refusals_total)
[ "$v" != missing ] && [ "$v" -ge 24 ] && pass "dscache_peer_refusals_total $v" \
    || fail "dscache_peer_refusals_total $v (want >= 24)"
grep -qiE 'per.peer|connections from' "$work/server-a.log" \
    && pass "the refusal is logged" || fail "no log line about the per-peer limit"
stop_within a 40
finish
