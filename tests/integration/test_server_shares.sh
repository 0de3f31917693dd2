#!/usr/bin/env bash
# Memory per dataset, changed live (dscache pin|unpin|limit, admin operation POLICY): a limit set
# on a dataset that fills the store evicts it down to the limit and keeps a warm-up within it; a
# pinned dataset stays wholly resident while another dataset's warm-up fills a full LRU store,
# and once unpinned the same warm-up evicts it (the pin is what kept it). --pin/--limit at
# start-up, STAT and /metrics per dataset, and POLICY refused to an anonymous client.
source "$(dirname "$0")/server_lib.sh"

make_dataset "$work/a" hot 1000 none
make_dataset "$work/b" big 6000 none
start_server s --data "$work/a" --data "$work/b" --memory 4M --policy lru --allow-anonymous-admin
stat() { "$TOOL" call "$ADDR_s" STAT "$1"; }
field() { json_get "$(stat "$1")" "j['datasets'][0]['$2']"; }
a_bytes=$(field hot bytes)
mib=1048576

# No limit: a warm-up of big fills the store (dscache warm waits until nothing changes; the
# other warm-ups below use the bare WARM operation).
out=$($CLI warm --server "$ADDR_s" --dataset big)
echo "$out" | grep -q "shards resident (store full" && pass "dscache warm on a full store: ${out//$'\n'/; }" \
    || fail "dscache warm: $out"
before=$(field big cached_bytes)
[ "$before" -gt $((2 * mib)) ] && pass "unlimited: big holds $before bytes of a 4 MiB store" \
    || fail "big holds only $before bytes before the limit"

# Limit live: evicted down to the limit at once, and a new warm-up stays within it.
out=$($CLI limit --server "$ADDR_s" big 1M) || fail "dscache limit: $out"
after=$(field big cached_bytes)
[ "$after" -le "$mib" ] && [ "$after" -gt 0 ] && pass "limit 1M live: $out; big now $after bytes" \
    || fail "big holds $after bytes after limit 1M"
"$TOOL" call "$ADDR_s" WARM big >/dev/null
sleep 0.5
again=$(field big cached_bytes)
[ "$again" -le "$mib" ] && pass "warm-up within the limit: big $again bytes" \
    || fail "warm-up went past the limit: $again bytes"
[ "$(field big limit_bytes)" = "$mib" ] && [ "$(field big share_bytes)" = "$mib" ] \
    && pass "STAT: limit_bytes and share_bytes $mib" || fail "STAT big: $(stat big)"
# Reads beyond the limit are served (read through), not refused.
out=$("$TOOL" get "$ADDR_s" big 20 0 1)
[ "${out%% *}" = OK ] && pass "GET past the limit is read through: $out" || fail "GET big 20: $out"

# Pin hot, lift big's limit, warm big on the full store: hot stays wholly resident.
out=$($CLI pin --server "$ADDR_s" hot) || fail "dscache pin: $out"
until_ok 10 sh -c "[ \"\$('$TOOL' call '$ADDR_s' STAT hot | grep -o '\"cached_bytes\":[0-9]*')\" = '\"cached_bytes\":$a_bytes' ]" \
    || fail "hot not resident after pin"
$CLI limit --server "$ADDR_s" big 0 >/dev/null
for _ in 1 2 3; do
    "$TOOL" call "$ADDR_s" WARM big >/dev/null
    for s in 0 5 10 15 20; do "$TOOL" get "$ADDR_s" big $s 0 1 >/dev/null; done
    sleep 0.3
done
big_now=$(field big cached_bytes)
hot_now=$(field hot cached_bytes)
[ "$hot_now" = "$a_bytes" ] && [ "$big_now" -gt "$mib" ] \
    && pass "pinned hot survives big's warm-up on a full store: hot $hot_now/$a_bytes, big $big_now" \
    || fail "pinned hot: $hot_now of $a_bytes bytes (big $big_now)"
[ "$(field hot pinned)" = 1 ] && pass "STAT: hot pinned" || fail "STAT hot: $(stat hot)"
m=$(metric "$HTTP_s" 'dscache_dataset_pinned{dataset="hot"}')
r=$(metric "$HTTP_s" 'dscache_dataset_resident_bytes{dataset="hot"}')
[ "$m" = 1 ] && [ "$r" = "$a_bytes" ] && pass "/metrics: hot pinned 1, resident $r" \
    || fail "/metrics: pinned $m resident $r"
$CLI stat --server "$ADDR_s" | grep -Eq '^hot +[0-9.]+ ?[KMG]?i?B? .* yes +0$' \
    && pass "dscache stat: memory table shows hot pinned, priority 0" || { $CLI stat --server "$ADDR_s"; fail "dscache stat memory table"; }

# Unpinned, the same warm-up evicts hot: the pin was what kept it.
$CLI unpin --server "$ADDR_s" hot >/dev/null
for _ in 1 2 3; do
    for s in $(seq 0 23); do "$TOOL" get "$ADDR_s" big "$s" 0 1 >/dev/null; done
done
hot_now=$(field hot cached_bytes)
[ "$hot_now" -lt "$a_bytes" ] && pass "unpinned: big's reads evict hot ($hot_now of $a_bytes bytes left)" \
    || fail "unpinned hot still wholly resident ($hot_now)"
grep -q "admin: dataset hot pinned by anonymous" "$work/server-s.log" && \
    grep -q "admin: dataset big limited to 1048576 bytes" "$work/server-s.log" \
    && pass "POLICY operations logged" || fail "POLICY not logged"
stop_server s
[ "$STOP_RC" = 0 ] || fail "server s exit $STOP_RC"

# From the command line (the config file takes the same keys), and refused to anonymous clients.
start_server t --data "$work/a" --data "$work/b" --memory 4M --pin hot --limit big=512K
ADDR_s=$ADDR_t
until_ok 10 sh -c "'$TOOL' call '$ADDR_t' STAT hot | grep -q '\"cached_bytes\":$a_bytes'" \
    && pass "--pin hot: loaded at start" || fail "--pin: $(stat hot)"
[ "$(field hot pinned)" = 1 ] && [ "$(field big limit_bytes)" = 524288 ] \
    && pass "--pin/--limit in STAT" || fail "STAT: $(stat big)"
out=$($CLI unpin --server "$ADDR_t" hot 2>&1) && fail "anonymous unpin accepted: $out"
case $out in *nauthori*|*refused*) pass "anonymous POLICY refused: ${out:0:100}" ;; *) fail "unpin: $out" ;; esac
out=$($CLI priority --server "$ADDR_t" hot 5 2>&1) && fail "anonymous priority accepted: $out"
case $out in *nauthori*|*refused*) pass "anonymous POLICY priority refused" ;; *) fail "priority: $out" ;; esac
[ "$(field hot priority)" = 0 ] && pass "hot's priority unchanged" || fail "priority: $(stat hot)"
stop_server t
[ "$STOP_RC" = 0 ] || fail "server t exit $STOP_RC"
finish
