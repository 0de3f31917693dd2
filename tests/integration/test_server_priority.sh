#!/usr/bin/env bash
# Priorities between datasets for memory (--priority DATASET=N): on a full MinIO store a
# dataset of priority 0 warmed after another gets nothing (MinIO keeps what is resident), while
# one of a higher priority evicts the lower one's shards to load its own; a pinned dataset is
# never evicted for a higher priority. STAT and /metrics show each dataset's priority; a priority
# changed live (dscache priority) steers the next warm-up's evictions both ways.
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
[ "$(metric "$HTTP_s" 'dscache_dataset_priority{dataset="high"}')" = 10 ] \
    && pass "/metrics: dscache_dataset_priority of high is 10" \
    || fail "/metrics priority: $(metric "$HTTP_s" 'dscache_dataset_priority{dataset="high"}')"

# Live: peer raised above high (dscache priority, the POLICY admin operation) takes the store
# from high at its next warm-up, where at priority 0 it got nothing.
out=$($CLI priority --server "$ADDR_s" peer 20)
[ "$out" = "peer: priority 20" ] && pass "dscache priority: $out" || fail "dscache priority said: $out"
[ "$(field peer priority)" = 20 ] && pass "STAT: peer's priority is now 20" \
    || fail "STAT peer priority: $(field peer priority)"
[ "$(metric "$HTTP_s" 'dscache_dataset_priority{dataset="peer"}')" = 20 ] \
    && pass "/metrics follows: peer 20" || fail "/metrics peer priority not updated"
grep -q "admin: dataset peer priority set to 20 by anonymous" "$work/server-s.log" \
    && pass "the change is logged with who asked" || fail "no log line for the priority change"
[ "$(field peer cached_bytes)" = "$peer" ] && pass "nothing evicted by the change itself" \
    || fail "peer's bytes changed without a load: $(field peer cached_bytes)"
high0=$(field high cached_bytes)
$CLI warm --server "$ADDR_s" --dataset peer >/dev/null
peer1=$(field peer cached_bytes)
high1=$(field high cached_bytes)
[ "$peer1" -gt $((2 * mib)) ] && [ "$high1" -lt "$high0" ] \
    && pass "peer (priority 20, live): $peer1 bytes, high down from $high0 to $high1" \
    || fail "peer holds $peer1 bytes, high $high1 (was $high0) after the live priority"
[ "$(field pinned cached_bytes)" = "$(field pinned bytes)" ] \
    && pass "the pinned dataset stayed whole again" || fail "pinned evicted for priority 20"
# And back down: high (10) over peer (now 0) reclaims the store at its warm-up.
$CLI priority --server "$ADDR_s" --dataset peer 0 >/dev/null
$CLI warm --server "$ADDR_s" --dataset high >/dev/null
high2=$(field high cached_bytes)
peer2=$(field peer cached_bytes)
[ "$high2" -gt "$high1" ] && [ "$peer2" -lt "$peer1" ] \
    && pass "peer lowered to 0: high back to $high2 bytes, peer down to $peer2" \
    || fail "after lowering peer: high $high2 (was $high1), peer $peer2 (was $peer1)"
expect 2 "priority" "$CLI" priority --server "$ADDR_s" peer 1001
expect 2 "N is required" "$CLI" priority --server "$ADDR_s" peer
expect 1 "priority" "$SERVER" --data "$work/low" --priority low=1001
stop_server s
finish
