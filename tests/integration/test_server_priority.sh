#!/usr/bin/env bash
# Priorities between datasets for memory (--priority DATASET=N): on a full MinIO store a
# dataset of priority 0 warmed after another gets nothing (MinIO keeps what is resident), while
# one of a higher priority evicts the lower one's shards to load its own; a pinned dataset is
# never evicted for a higher priority. STAT shows each dataset's priority.
source "$(dirname "$0")/server_lib.sh"

make_dataset "$work/low" low 6000 none
make_dataset "$work/peer" peer 6000 none
make_dataset "$work/high" high 6000 none
make_dataset "$work/pin" pinned 1000 none
start_server s --data "$work/low" --data "$work/peer" --data "$work/high" --data "$work/pin" \
    --memory 4M --priority high=10 --pin pinned --allow-anonymous-admin
field() { json_get "$("$TOOL" call "$ADDR_s" STAT "$1")" "j['datasets'][0]['$2']"; }
mib=1048576
[ "$(field high priority)" = 10 ] && [ "$(field low priority)" = 0 ] \
    && pass "STAT: priorities 10 and 0" || fail "STAT priority: high $(field high priority)"
until_ok 10 sh -c "[ \"\$('$TOOL' call '$ADDR_s' STAT pinned | grep -o '\"cached_bytes\":[0-9]*')\" = '\"cached_bytes\":$(field pinned bytes)' ]" \
    || fail "pinned not resident"

$CLI warm --server "$ADDR_s" --dataset low >/dev/null
low0=$(field low cached_bytes)
[ "$low0" -gt $((2 * mib)) ] && pass "low fills the store: $low0 bytes" || fail "low holds $low0 bytes"
# Same priority: MinIO keeps the resident set.
$CLI warm --server "$ADDR_s" --dataset peer >/dev/null
peer=$(field peer cached_bytes)
[ "$peer" -lt $((mib / 2)) ] && pass "peer (priority 0) after low: $peer bytes (MinIO keeps low)" \
    || fail "peer got $peer bytes on a full MinIO store"
# Higher priority: its warm-up evicts low's shards.
$CLI warm --server "$ADDR_s" --dataset high >/dev/null
high=$(field high cached_bytes)
low1=$(field low cached_bytes)
[ "$high" -gt $((2 * mib)) ] && [ "$low1" -lt "$low0" ] \
    && pass "high (priority 10): $high bytes, low down from $low0 to $low1" \
    || fail "high holds $high bytes, low $low1 (was $low0)"
[ "$(field pinned cached_bytes)" = "$(field pinned bytes)" ] && pass "the pinned dataset stayed whole" \
    || fail "pinned evicted for a higher priority: $(field pinned cached_bytes)"
expect 1 "priority" "$SERVER" --data "$work/low" --priority low=1001
stop_server s
finish
