#!/usr/bin/env bash
# Finding: the server must enforce exactly the max_body it advertises in HELLO (a PING of
# max_body bytes is echoed, one byte more is TOO_LARGE), reject trailing bytes on every operation
# (LIST, MEMBERS, STAT, MANIFEST, GET, EVICT), answer a request with a non-zero status with
# BAD_REQUEST (the connection staying usable) and a second HELLO as proto/PROTOCOL.md says (it
# starts over).
source "$(dirname "$0")/server_lib.sh"
source "$(dirname "$0")/hostile_lib.sh"

make_dataset "$work/ds" cfds 500 none
start_server a --data "$work/ds" --memory 16M --allow-anonymous-admin
out=$("$HOSTILE" conform "$ADDR_a" 2>&1) && pass "conformance probes" || fail "conformance: $out"
echo "$out"
grep -q 'second HELLO' "$DSC_SRC/proto/PROTOCOL.md" && pass "PROTOCOL.md says what a second HELLO gets" \
    || fail "PROTOCOL.md does not mention a second HELLO"
kill -0 "$PID_a" && pass "server alive" || fail "server died"
stop_within a 40
finish
