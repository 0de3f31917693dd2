#!/usr/bin/env bash
# Pipelined bursts (the batched write path): hundreds of mixed requests in one send answered in
# order and intact, every answer before the error for a bad frame that follows a burst, many
# connections at once with answers on their own connection; the server exits 0.
source "$(dirname "$0")/server_lib.sh"
CHECK=$DSC_BIN/pipeline_check
[ -x "$CHECK" ] || { echo "SKIP: $CHECK not built"; exit 77; }

make_dataset "$work/raw" piperaw 3000 none
make_dataset "$work/lz" pipelz 3000 lz4
start_server a --data "$work/raw" --data "$work/lz" --memory 64M --warm
for ds in piperaw pipelz; do
    out=$("$CHECK" "$ADDR_a" "$ds" 2>&1) && pass "$ds: pipelined bursts" || fail "$ds: $out"
    echo "$out"
done
[ "$(metric "$HTTP_a" dscache_open_connections)" = 0 ] && pass "every connection closed" \
    || fail "connections left open: $(metric "$HTTP_a" dscache_open_connections)"
stop_server a
[ "$STOP_RC" = 0 ] && pass "exit 0" || fail "exit $STOP_RC"
finish
