#!/usr/bin/env bash
# MGET (batched GET across shards): chunks drawn at random from every shard, duplicates and
# absent ones included, come back in one request byte-equal to single GETs (counted once in
# dscache_requests_total{op="MGET"}), from RAM and by read-through; the client's GET fallback
# (a server that does not grant the feature) gives the same bytes with no MGET sent; hostile MGET
# bodies get clean answers and the server keeps serving; a credential confined to one dataset
# cannot MGET (nor RANGE) another (NOT_FOUND, exactly as GET), nor can an anonymous client on a
# server with credentials; a damaged chunk is CORRUPT alone, its neighbours served, a truncated shard's
# entries CORRUPT, in RAM and by read-through.
source "$(dirname "$0")/server_lib.sh"
MGET=$DSC_BIN/mget_check
[ -x "$MGET" ] || { echo "SKIP: $MGET not built"; exit 77; }
value() { local v; v=$(metric "$1" "$2"); [ "$v" = missing ] && v=0; echo "$v"; }
mget_ok() { value "$1" 'dscache_requests_total{op="MGET",status="OK"}'; }

make_dataset "$work/ds" mgetds 3000 none
make_dataset "$work/dsz" mgetz 3000 lz4

# ---- from RAM --------------------------------------------------------------------------------
start_server a --data "$work/ds" --data "$work/dsz" --memory 64M
before=$(mget_ok "$HTTP_a")
out=$("$MGET" compare "$ADDR_a" mgetds 64 7) && pass "$out" || fail "compare: $out"
after=$(mget_ok "$HTTP_a")
[ "$after" = $((before + 1)) ] && pass "64 chunks in one MGET request" \
    || fail "MGET requests counted: $before -> $after (expected one)"
out=$("$MGET" compare "$ADDR_a" mgetz 300 11) && pass "lz4: $out" || fail "compare lz4: $out"
# A new client and a server that does not grant MGET: the same bytes by GETs, no MGET sent.
before=$(mget_ok "$HTTP_a")
out=$("$MGET" compare "$ADDR_a" mgetds 64 7 fallback) && pass "$out" || fail "fallback: $out"
[ "$(mget_ok "$HTTP_a")" = "$before" ] && pass "the fallback sends no MGET" \
    || fail "the fallback sent an MGET"
# The data-source table: the TCP source's MGET, and the single-request loop of the others.
before=$(mget_ok "$HTTP_a")
out=$("$MGET" source "$ADDR_a" mgetz 100 13) && pass "$out" || fail "source: $out"
[ "$(mget_ok "$HTTP_a")" = $((before + 1)) ] && pass "the TCP source sends one MGET" \
    || fail "the TCP source's MGETs: $before -> $(mget_ok "$HTTP_a")"
out=$("$MGET" source "$ADDR_a" mgetz 100 13 loop) && pass "$out" || fail "source loop: $out"
out=$("$MGET" hostile "$ADDR_a" mgetds) && pass "hostile MGET bodies answered cleanly" \
    || fail "hostile: $out"
echo "$out"
[ "$(value "$HTTP_a" 'dscache_requests_total{op="MGET",status="BAD_REQUEST"}')" -gt 0 ] \
    && pass "refusals counted in dscache_requests_total" || fail "MGET refusals not counted"
out=$("$MGET" compare "$ADDR_a" mgetds 200 3) && pass "still serving: $out" \
    || fail "after the hostile cases: $out"
kill -0 "$PID_a" && pass "server alive" || fail "server died"
stop_server a
[ "$STOP_RC" = 0 ] && pass "exit 0" || fail "exit $STOP_RC"

# ---- by read-through: a store that holds a few shards only -----------------------------------
start_server r --data "$work/ds" --memory 600K
out=$("$MGET" compare "$ADDR_r" mgetds 128 5) && pass "read-through: $out" \
    || fail "read-through compare: $out"
[ "$(value "$HTTP_r" dscache_read_through_total)" != 0 ] \
    && pass "chunks served by read-through ($(value "$HTTP_r" dscache_read_through_total))" \
    || fail "no read-through: that path was not run"
stop_server r

# ---- damage: one damaged chunk does not fail the others ---------------------------------------
if [ -x "$DSC_BIN/shard_damage" ]; then
    make_dataset "$work/bad" badds 2000 lz4
    n=$("$DSC_BIN/shard_damage" chunk "$work/bad" 1 2) && [ "$n" = 1 ] || fail "shard_damage: $n"
    f2=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["shards"][2]["file"])' \
        "$work/bad/manifest.json")
    truncate -s $(($(stat -c %s "$work/bad/$f2") - 100)) "$work/bad/$f2"
    # In RAM: the damaged chunk alone is CORRUPT, the truncated shard refused whole.
    start_server d --data "$work/bad" --memory 64M --warm
    expect 0 '^OK CORRUPT OK OK CORRUPT$' "$MGET" damaged "$ADDR_d" badds 1 2
    stop_server d
    # Read through (a store smaller than a shard): the same answers (a run read together with a
    # damaged chunk may also come back UNAVAILABLE for its good chunks: asked again, served).
    start_server t --data "$work/bad" --memory 64K
    expect 0 '^(OK|UNAVAILABLE) CORRUPT (OK|UNAVAILABLE) OK CORRUPT$' \
        "$MGET" damaged "$ADDR_t" badds 1 2
    expect 0 '^OK OK OK OK CORRUPT$' "$MGET" damaged "$ADDR_t" badds 1 5
    stop_server t
else
    echo "skipped the damage cases: $DSC_BIN/shard_damage not built"
fi

# ---- within the credential's datasets ---------------------------------------------------------
make_dataset "$work/b" mgetb 1000 none
S_LIM=limited-secret-AAAAAAAAAAAAAAAA
printf 'lim read %s mgetds\n' "$S_LIM" >"$work/creds"
chmod 600 "$work/creds"
printf 'lim %s\n' "$S_LIM" >"$work/tok-lim"
start_server p --data "$work/ds" --data "$work/b" --auth-file "$work/creds"
expect 0 '^OK 2$' "$MGET" token "$ADDR_p" "$work/tok-lim" mgetds
expect 0 '^ERR ENOTFOUND no such dataset' "$MGET" token "$ADDR_p" "$work/tok-lim" mgetb
expect 0 '^ERR EUNAUTH' "$MGET" token "$ADDR_p" - mgetds
# RANGE (sample ranges) is confined exactly as MGET.
expect 0 '^OK RANGE$' "$MGET" token "$ADDR_p" "$work/tok-lim" mgetds range
expect 0 '^ERR ENOTFOUND no such dataset' "$MGET" token "$ADDR_p" "$work/tok-lim" mgetb range
expect 0 '^ERR EUNAUTH' "$MGET" token "$ADDR_p" - mgetds range
stop_server p
finish
