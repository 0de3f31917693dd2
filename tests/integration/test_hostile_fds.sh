#!/usr/bin/env bash
# Finding: running out of descriptors must not wedge the server. Started with a limit of 128
# descriptors (soft and hard), 400 connections are opened, held 2 s and closed: afterwards the
# server uses almost no CPU (accept backs off instead of spinning on EMFILE), has released every
# descriptor, serves a new client and /healthz, and stops on SIGTERM. It logs its descriptor
# limit at start.
source "$(dirname "$0")/server_lib.sh"
source "$(dirname "$0")/hostile_lib.sh"

make_dataset "$work/ds" fdds 500 none
real_server=$SERVER
SERVER=$work/limited-dscached
printf '#!/usr/bin/env bash\nulimit -n 128 && exec "%s" "$@"\n' \
    "$real_server" >"$SERVER"
chmod +x "$SERVER"
start_server a --data "$work/ds" --memory 16M
grep -qiE 'descriptor.*128|128.*descriptor' "$work/server-a.log" \
    && pass "the descriptor limit is logged" || fail "no log line about the descriptor limit"
fds_at_start=$(ls "/proc/$PID_a/fd" | wc -l)

# Rounds of four clients opening 200 connections each at once, and one holding 100 HTTP
# connections (the event loops and the HTTP thread race for the few descriptors left).
for round in 1 2 3 4; do
    hp=()
    for i in 1 2 3 4; do
        "$HOSTILE" hold "$ADDR_a" 200 2 hello >"$work/hold$i.out" 2>&1 &
        hp+=("$!")
    done
    "$HOSTILE" hold "$HTTP_a" 100 2 idle >"$work/hold5.out" 2>&1 || true
    wait "${hp[@]}" || true
    echo "round $round: $(cat "$work"/hold*.out | tr '\n' ' ')"
done
sleep 1
t0=$(cpu_ticks "$PID_a")
sleep 2
t1=$(cpu_ticks "$PID_a")
hz=$(getconf CLK_TCK)
used=$((t1 - t0))
echo "CPU after the flood: $used ticks in 2 s ($hz ticks/s)"
[ "$used" -le $((hz / 2)) ] && pass "idle after the flood ($used ticks in 2 s)" \
    || fail "the server spins after the flood: $used ticks in 2 s"
until_ok 10 conns_equal "$HTTP_a" 0 && pass "every connection closed" \
    || fail "connections left: $(hmetric "$HTTP_a" dscache_open_connections)"
fds_now=$(ls "/proc/$PID_a/fd" | wc -l)
[ "$fds_now" -le $((fds_at_start + 2)) ] && pass "descriptors released ($fds_now, $fds_at_start at start)" \
    || fail "descriptors held: $fds_now ($fds_at_start at start)"
out=$(timeout 10 "$TOOL" get "$ADDR_a" fdds 0 0 1 2>&1) && grep -q '^OK' <<<"$out" \
    && pass "a new client is served" || fail "new client: $out"
[ "$(healthz_ms "$HTTP_a")" -lt 2000 ] && pass "/healthz answers" || fail "/healthz silent"
stop_within a 10
finish
