#!/usr/bin/env bash
# Hostile clients: garbage, a request before HELLO, an absurd length, half a frame, a response
# flag, bad magic, malformed bodies, unknown opcodes, disconnects mid-response, byte-by-byte
# frames; then 256 concurrent connections and a normal client still work, and the server exits 0.
source "$(dirname "$0")/server_lib.sh"

make_dataset "$work/ds" hostds 2000 lz4
start_server a --data "$work/ds" --memory 16M
out=$("$TOOL" hostile "$ADDR_a" hostds) && pass "hostile cases" || fail "hostile: $out"
echo "$out"
out=$("$TOOL" conc "$ADDR_a" hostds 256) && pass "$out" || fail "256 connections: $out"
out=$("$TOOL" fetch "$ADDR_a" hostds "$work/ds" 8) && pass "$out" || fail "fetch: $out"
kill -0 "$PID_a" && pass "server alive" || fail "server died"
[ "$(metric "$HTTP_a" dscache_open_connections)" = 0 ] && pass "every connection closed" \
    || fail "connections left open: $(metric "$HTTP_a" dscache_open_connections)"
stop_server a
[ "$STOP_RC" = 0 ] && pass "exit 0" || fail "exit $STOP_RC"
finish
