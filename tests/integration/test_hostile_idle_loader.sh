#!/usr/bin/env bash
# A trainer idle through an evaluation: the server (--idle-timeout 2) closes the loader's idle
# connections during a 4 s pause; the loader reopens them quietly and the epoch goes on with
# every batch right and no warning or error about a failed server.
source "$(dirname "$0")/server_lib.sh"
source "$(dirname "$0")/hostile_lib.sh"
LOADER=$DSC_BIN/loader_check
[ -x "$LOADER" ] || { echo "SKIP: $LOADER not built"; exit 77; }

make_dataset "$work/ds" idleds 20000 lz4
start_server a --data "$work/ds" --memory 64M --idle-timeout 2 --log-level debug
out=$("$LOADER" idle --servers "$ADDR_a" --dataset idleds --dir "$work/ds" --batch 16 --cache 1 \
    --prefetch 2 --pause-s 4 2>&1) && pass "loader across the idle time-out: $(grep '^idle:' <<<"$out")" \
    || fail "loader across the idle time-out: $out"
grep -q 'idle longer than the idle time-out' "$work/server-a.log" \
    && pass "the server did close idle connections" || fail "no idle connection was closed"
stop_within a 40
finish
