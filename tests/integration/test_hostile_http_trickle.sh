#!/usr/bin/env bash
# Finding: 2,000 HTTP connections that each trickle one byte of a request head a second must not
# lock /healthz and /readyz out (a liveness probe would restart the pod): a newcomer is admitted
# when every slot is held (the oldest connection of the address holding the most is closed for
# it), a head not whole within --http-header-timeout is closed whatever it trickles, and one
# address holds at most --http-max-conns-per-peer connections. All of it counted in /metrics.
source "$(dirname "$0")/server_lib.sh"
source "$(dirname "$0")/hostile_lib.sh"

need=6000
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt "$need" ]; then
    echo "SKIP: the descriptor hard limit is $hard, this test needs $need"
    exit 77
fi
ulimit -Sn "$need"

make_dataset "$work/ds" tds 50 none
header_timeout=10 # the default: the server runs with its defaults
start_server a --data "$work/ds" --memory 16M
hm() { hmetric "$HTTP_a" "$1"; }

# probes WHAT: /healthz and /readyz five times each, every one answered (curl, 2 s at most).
probes() {
    local bad=0 ms all="" code
    for _ in 1 2 3 4 5; do
        ms=$(healthz_ms "$HTTP_a")
        all="$all $ms"
        [ "$ms" -lt 99999 ] || bad=$((bad + 1))
        code=$(curl -s -o /dev/null --max-time 2 -w '%{http_code}' "http://$HTTP_a/readyz") || true
        [ "$code" = 200 ] || bad=$((bad + 1))
        sleep 0.2
    done
    echo "/healthz with $1: ms$all"
    [ "$bad" = 0 ] && pass "/healthz and /readyz answered with $1" \
        || fail "/healthz or /readyz unanswered $bad times of 10 with $1 (healthz ms:$all)"
}

probes "no load"

# 2,000 trickling connections from 40 loopback addresses (50 each: under the per-address limit),
# more than the 1024 slots.
HOSTILE_SOURCES=40 "$HOSTILE" hold "$HTTP_a" 2000 60 trickle >"$work/trickle.out" 2>&1 &
trickle=$!
pids+=("$trickle")
wait_line "$work/trickle.out" '^opened' 60 || fail "trickling connections were not opened"
grep -q '^opened 2000$' "$work/trickle.out" && pass "2000 trickling HTTP connections opened" \
    || fail "trickling connections: $(cat "$work/trickle.out")"
t_opened=$SECONDS
probes "2000 trickling connections"
open=$(hm dscache_http_open_connections)
evicted=$(hm dscache_http_full_evictions_total)
echo "while trickling: open $open, evicted for newcomers $evicted"
[ "$open" != missing ] && [ "$open" -le 1024 ] && pass "at most --http-max-conns open ($open)" \
    || fail "open HTTP connections: $open"
[ "$evicted" != missing ] && [ "$evicted" -ge 900 ] \
    && pass "newcomers admitted past the slots held ($evicted evictions)" \
    || fail "dscache_http_full_evictions_total $evicted (want >= 900: 2000 connections, 1024 slots)"
[ "$((SECONDS - t_opened))" -lt "$header_timeout" ] \
    || echo "note: the probes ended $((SECONDS - t_opened)) s after the connections opened, past the header deadline"

# The trickle goes on, but no head is ever whole: every connection is closed at the deadline.
only_probe() { local v; v=$(hm dscache_http_open_connections); [ "$v" != missing ] && [ "$v" -le 1 ]; }
until_ok $((header_timeout * 5 + 20)) only_probe \
    && pass "every trickling connection closed by the header deadline ($((SECONDS - t_opened)) s, deadline $header_timeout s)" \
    || fail "still open while trickling: $(hm dscache_http_open_connections)"
timeouts=$(hm dscache_http_header_timeouts_total)
[ "$timeouts" != missing ] && [ "$timeouts" -ge 900 ] \
    && pass "header time-outs counted ($timeouts)" || fail "dscache_http_header_timeouts_total $timeouts"
kill "$trickle" 2>/dev/null || true
wait "$trickle" 2>/dev/null || true

# One address: 200 trickling connections from 127.0.0.2; it keeps 64 at most (its oldest go).
before=$(hm dscache_http_peer_evictions_total)
HOSTILE_SOURCES=1 "$HOSTILE" hold "$HTTP_a" 200 60 trickle >"$work/one.out" 2>&1 &
one=$!
pids+=("$one")
wait_line "$work/one.out" '^opened' 30 || fail "the one address's connections were not opened"
evicted_136() { local v; v=$(hm dscache_http_peer_evictions_total); [ "$v" != missing ] && [ $((v - before)) -ge 136 ]; }
until_ok 20 evicted_136 || true # the server may still be accepting them
open=$(hm dscache_http_open_connections)
after=$(hm dscache_http_peer_evictions_total)
echo "one address, 200 connections: open $open, evicted $before -> $after"
[ "$open" != missing ] && [ "$open" -le 65 ] && pass "one address holds at most 64 ($open open)" \
    || fail "one address holds $open HTTP connections"
[ "$after" != missing ] && [ $((after - before)) -ge 136 ] \
    && pass "per-address evictions counted ($((after - before)))" \
    || fail "dscache_http_peer_evictions_total $before -> $after"
probes "one address at its limit"
kill "$one" 2>/dev/null || true
wait "$one" 2>/dev/null || true

stop_within a 10
finish
