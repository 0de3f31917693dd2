#!/usr/bin/env bash
# Finding: dscache get/stat/list must not trust the server. Through a proxy that damages a real
# server's answers, get refuses a GET answer with the wrong opcode, the wrong request id, another
# chunk's data or another shard's chunk (and leaves no output file); against a server that stops
# answering after HELLO, get, stat and list give up after --timeout.
source "$(dirname "$0")/server_lib.sh"
source "$(dirname "$0")/hostile_lib.sh"

# A dataset whose last shard holds fewer samples than one chunk (another shard's chunk differs).
make_dataset "$work/probe" cli 2000 none
per_shard=$(json_get "$(cat "$work/probe/manifest.json")" 'j["shards"][0]["samples"]')
make_dataset "$work/ds" cli $((per_shard * 3 + 5)) none
last=3
start_server a --data "$work/ds" --memory 16M

# proxy MODE: starts the damaging proxy in front of server a; sets PROXY (its address).
proxy() {
    rm -f "$work/proxy.port"
    "$HOSTILE" proxy "$1" "$work/proxy.port" "$ADDR_a" 2>"$work/proxy.log" &
    PROXY_PID=$!
    pids+=("$PROXY_PID")
    until_ok 10 test -s "$work/proxy.port" || fail "proxy $1 did not start"
    PROXY=127.0.0.1:$(cat "$work/proxy.port")
}
unproxy() { kill "$PROXY_PID" 2>/dev/null || true; wait "$PROXY_PID" 2>/dev/null || true; }

# The proxy relaying unchanged: get works and gives what the server gives directly.
"$CLI" get --server "$ADDR_a" --dataset cli --shard 0 -o "$work/direct.bin" \
    && pass "get, directly" || fail "get, directly"
proxy none
"$CLI" get --server "$PROXY" --dataset cli --shard 0 -o "$work/relayed.bin" --timeout 10 \
    && cmp -s "$work/direct.bin" "$work/relayed.bin" && pass "get through an honest proxy" \
    || fail "get through an honest proxy"
unproxy

# damaged MODE PATTERN GET_ARGS...: get through the proxy must fail (not hang) naming PATTERN.
damaged() {
    local mode=$1 pattern=$2; shift 2
    proxy "$mode"
    rm -f "$work/out.bin"
    local out rc=0 t0=$SECONDS
    out=$(timeout 60 "$CLI" get --server "$PROXY" --dataset cli -o "$work/out.bin" "$@" 2>&1) || rc=$?
    if [ "$rc" = 0 ]; then
        fail "$mode: get accepted the damaged answers"
    elif [ "$rc" = 124 ]; then
        fail "$mode: get hung"
    elif ! grep -qiE "$pattern" <<<"$out"; then
        fail "$mode: exit $rc, message lacks /$pattern/: $out"
    else
        pass "$mode: refused in $((SECONDS - t0)) s: $out"
    fi
    [ ! -e "$work/out.bin" ] && pass "$mode: no output file" || fail "$mode: output file written"
    unproxy
}
damaged opcode 'opcode|unexpected|malformed' --shard 0
damaged reqid 'request id|unexpected|malformed' --shard 0
damaged chunk 'chunk|sample|malformed' --shard 0 --chunks 0:2
damaged "shard:$last" 'chunk|sample|malformed' --shard 0 --chunks 0:1
damaged silent 'timed out' --shard 0 --timeout 2

# stat and list against the silent server give up after --timeout as well.
proxy silent
for cmd in stat list; do
    t0=$SECONDS
    out=$(timeout 60 "$CLI" "$cmd" --server "$PROXY" --timeout 2 2>&1) && rc=0 || rc=$?
    [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ $((SECONDS - t0)) -le 8 ] && grep -q 'timed out' <<<"$out" \
        && pass "$cmd gives up after --timeout: $out" || fail "$cmd vs a silent server: exit $rc: $out"
done
unproxy
stop_within a 40
finish
