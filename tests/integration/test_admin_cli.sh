#!/usr/bin/env bash
# The operator's commands: dscached --version and dscache --version; dscache list, warm and
# evict against a server (the store's resident shards move as they say); malformed addresses get
# a message that says what is expected.
source "$(dirname "$0")/server_lib.sh"

ver=$(grep -oE 'DSC_VERSION_STRING "[^"]+"' "$DSC_SRC/client/include/dscache.h" | cut -d'"' -f2)
[ "$("$SERVER" --version)" = "dscached $ver" ] && pass "dscached --version: $ver" || fail "dscached --version"
[ "$("$CLI" --version)" = "dscache $ver" ] && pass "dscache --version: $ver" || fail "dscache --version"

make_dataset "$work/ds" adm 3000 lz4
shards=$(json_get "$(cat "$work/ds/manifest.json")" 'len(j["shards"])')
start_server a --data "$work/ds" --memory 64M
cached() { json_get "$("$TOOL" call "$ADDR_a" STAT adm)" 'j["datasets"][0]["cached_shards"]'; }

out=$("$CLI" list --server "$ADDR_a")
grep -qE "^adm +$shards +3000 " <<<"$out" && pass "list: $(tail -n1 <<<"$out")" || fail "list: $out"
[ "$(json_get "$("$CLI" list --server "$ADDR_a" --json)" 'j[0]["name"]')" = adm ] \
    && pass "list --json" || fail "list --json"
[ "$(cached)" = 0 ] || fail "not warm, yet $(cached) shards cached"
out=$("$CLI" warm --server "$ADDR_a" --dataset adm --shard 1)
[ "$out" = "adm (shard 1): 1 shard loaded" ] && [ "$(cached)" = 1 ] && pass "warm --shard 1: $out" \
    || fail "warm --shard 1: '$out', cached $(cached)"
out=$("$CLI" warm --server "$ADDR_a" --dataset adm)
[ "$(cached)" = "$shards" ] && pass "warm: $out; $shards cached" || fail "warm: '$out', cached $(cached)"
out=$("$CLI" evict --server "$ADDR_a" --dataset adm)
[ "$out" = "adm (all shards): $shards shards dropped" ] && [ "$(cached)" = 0 ] \
    && pass "evict: $out" || fail "evict: '$out', cached $(cached)"
rc=0; out=$("$CLI" warm --server "$ADDR_a" --dataset nosuch 2>&1) || rc=$?
[ $rc = 1 ] && [[ "$out" == *"NOT_FOUND"* || "$out" == *"not found"* ]] && pass "warm nosuch: $out" \
    || fail "warm nosuch: rc $rc: $out"

# Malformed addresses.
for bad in localhost 127.0.0.1 "[::1" "host:99999" ":7070"; do
    rc=0; out=$("$CLI" list --server "$bad" 2>&1) || rc=$?
    [ $rc != 0 ] && [[ "$out" == *"--server '$bad': not HOST:PORT"* ]] \
        || fail "--server $bad: rc $rc: $out"
done
pass "malformed --server values are named with the expected form"
rc=0; out=$("$SERVER" --data "$work/ds" --listen 7070 2>&1) || rc=$?
[ $rc != 0 ] && [[ "$out" == *"invalid --listen '7070': expected HOST:PORT"* ]] \
    && pass "dscached --listen 7070: $out" || fail "--listen 7070: rc $rc: $out"
rc=0; out=$("$CLI" warm --server "$ADDR_a" 2>&1) || rc=$?
[ $rc = 2 ] && [[ "$out" == *"--dataset NAME is required"* ]] && pass "warm without --dataset: usage" \
    || fail "warm without --dataset: rc $rc: $out"
stop_server a
[ "$STOP_RC" = 0 ] || fail "server exit $STOP_RC"
finish
