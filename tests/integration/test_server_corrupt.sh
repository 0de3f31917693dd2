#!/usr/bin/env bash
# One shard damaged on disk (a flipped byte inside a chunk, and another shard truncated): each is
# answered CORRUPT, logged once, counted as bad, never served; every other shard is served.
source "$(dirname "$0")/server_lib.sh"

make_dataset "$work/ds" badds 2000 lz4
f1=$(python3 -c 'import json; print(json.load(open("'"$work"'/ds/manifest.json"))["shards"][1]["file"])')
f2=$(python3 -c 'import json; print(json.load(open("'"$work"'/ds/manifest.json"))["shards"][2]["file"])')
python3 - "$work/ds/$f1" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[len(b) // 2] ^= 0x40
open(p, "wb").write(bytes(b))
PY
size=$(stat -c %s "$work/ds/$f2")
truncate -s $((size - 100)) "$work/ds/$f2"

start_server a --data "$work/ds" --memory 16M
for i in 1 2 3; do
    out=$("$TOOL" get "$ADDR_a" badds 1 0 1)
    grep -q '^CORRUPT' <<<"$out" || fail "flipped shard, try $i: $out"
    out=$("$TOOL" get "$ADDR_a" badds 2 0 1)
    grep -q '^CORRUPT' <<<"$out" || fail "truncated shard, try $i: $out"
done
pass "damaged shards answered CORRUPT"
for s in 0 3; do
    out=$("$TOOL" get "$ADDR_a" badds $s 0 1)
    grep -q '^OK' <<<"$out" && pass "shard $s still served" || fail "shard $s: $out"
done
stat=$("$TOOL" call "$ADDR_a" STAT badds)
[ "$(json_get "$stat" 'j["datasets"][0]["bad_shards"]')" = 2 ] && pass "STAT: 2 bad shards" \
    || fail "STAT bad shards: $stat"
n=$(grep -c "marked bad" "$work/server-a.log" || true)
[ "$n" = 2 ] && pass "each bad shard logged once" || fail "bad-shard log lines: $n"
[ "$(metric "$HTTP_a" 'dscache_requests_total{op="GET",status="CORRUPT"}')" = 6 ] \
    && pass "metrics: 6 CORRUPT answers" || fail "CORRUPT count"
stop_server a
[ "$STOP_RC" = 0 ] || fail "exit $STOP_RC"
finish
