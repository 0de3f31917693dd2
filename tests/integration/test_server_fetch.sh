#!/usr/bin/env bash
# dscached serves every chunk of a raw and an lz4 dataset byte-identical to the shard files
# (pipelined, answers in any order), STAT/LIST/MANIFEST/MEMBERS answer, /metrics counters move,
# 256 concurrent connections each get a GET answered, and the dscache get/stat commands work.
source "$(dirname "$0")/server_lib.sh"

make_dataset "$work/raw" rawds 3000 none
make_dataset "$work/lz4" lz4ds 3000 lz4
start_server a --data "$work/raw" --data "$work/lz4" --memory 64M --warm

out=$("$TOOL" fetch "$ADDR_a" rawds "$work/raw" 8) && pass "raw: $out" || fail "raw fetch: $out"
out=$("$TOOL" fetch "$ADDR_a" lz4ds "$work/lz4" 16) && pass "lz4: $out" || fail "lz4 fetch: $out"
out=$("$TOOL" fetch "$ADDR_a" lz4ds "$work/lz4" 1) && pass "lz4 depth 1: $out" || fail "lz4 fetch depth 1: $out"

stat=$("$TOOL" call "$ADDR_a" STAT)
shards=$(python3 -c 'import json; print(json.load(open("'"$work"'/raw/manifest.json"))["shards"].__len__())')
[ "$(json_get "$stat" '[d for d in j["datasets"] if d["name"]=="rawds"][0]["cached_shards"]')" = "$shards" ] \
    && pass "warm: all $shards raw shards cached" || fail "STAT after warm: $stat"
[ "$(json_get "$stat" '[d for d in j["datasets"] if d["name"]=="lz4ds"][0]["hits"] > 0')" = True ] \
    && pass "STAT counts hits" || fail "STAT hits: $stat"
[ "$(json_get "$stat" 'j["store"]["used"] > 0 and j["store"]["capacity"] >= 64<<20')" = True ] \
    && pass "STAT store figures" || fail "STAT store: $stat"
one=$("$TOOL" call "$ADDR_a" STAT lz4ds)
[ "$(json_get "$one" 'len(j["datasets"])')" = 1 ] && pass "STAT one dataset" || fail "STAT lz4ds: $one"
out=$("$TOOL" call "$ADDR_a" STAT nosuch)
grep -q ENOTFOUND <<<"$out" && pass "STAT unknown dataset: NOT_FOUND" || fail "STAT nosuch: $out"
list=$("$TOOL" call "$ADDR_a" LIST)
[ "$(json_get "$list" 'sorted(d["name"] for d in j)')" = "['lz4ds', 'rawds']" ] \
    && pass "LIST" || fail "LIST: $list"
man=$("$TOOL" call "$ADDR_a" MANIFEST lz4ds)
[ "$(json_get "$man" 'j["name"]')" = lz4ds ] && pass "MANIFEST" || fail "MANIFEST: $man"
out=$("$TOOL" call "$ADDR_a" MEMBERS)
[ "$(json_get "$out" 'j["members"] == ["'"$ADDR_a"'"] and j["self"] == "'"$ADDR_a"'" and not j["clustered"]')" = True ] \
    && pass "MEMBERS: single node, itself" || fail "MEMBERS: $out"
out=$("$TOOL" get "$ADDR_a" rawds 0 0 4000 || true)
grep -q BAD_REQUEST <<<"$out" && pass "chunk range out of bounds: BAD_REQUEST" || fail "range: $out"
out=$("$TOOL" get "$ADDR_a" rawds 99999 0 1 || true)
grep -q NOT_FOUND <<<"$out" && pass "unknown shard: NOT_FOUND" || fail "shard: $out"

out=$("$TOOL" conc "$ADDR_a" lz4ds 256) && pass "$out" || fail "256 connections: $out"

# dscache get: the decoded samples of a whole shard, and of a chunk range.
if "$CLI" get --help >/dev/null 2>&1; then
    "$CLI" get --server "$ADDR_a" --dataset lz4ds --shard 1 -o "$work/s1.bin" \
        && "$CLI" get --server "$ADDR_a" --dataset rawds --shard 1 -o "$work/r1.bin" \
        && cmp -s "$work/s1.bin" "$work/r1.bin" \
        && pass "dscache get: lz4 and raw shard 1 decode to the same samples" \
        || fail "dscache get: decoded shards differ"
    chunk_raw=$(python3 -c 'import json; m=json.load(open("'"$work"'/lz4/manifest.json")); print(m["shards"][1]["chunk_samples"] * (256 * 4 + 8))')
    "$CLI" get --server "$ADDR_a" --dataset lz4ds --shard 1 --chunks 1:2 -o "$work/s1c.bin" \
        && [ "$(stat -c %s "$work/s1c.bin")" = $((2 * chunk_raw)) ] \
        && cmp -s "$work/s1c.bin" <(tail -c +$((chunk_raw + 1)) "$work/s1.bin" | head -c $((2 * chunk_raw))) \
        && pass "dscache get --chunks 1:2" || fail "dscache get --chunks"
    [ "$(stat -c %s "$work/s1.bin")" = "$(python3 -c 'import json; m=json.load(open("'"$work"'/lz4/manifest.json")); print(m["shards"][1]["samples"] * (256 * 4 + 8))')" ] \
        && pass "dscache get: whole shard size = samples x sample bytes" || fail "get size"
    out=$("$CLI" get --server "$ADDR_a" --dataset nosuch --shard 0 -o "$work/x.bin" 2>&1) \
        && fail "get of an unknown dataset succeeded" || pass "dscache get unknown dataset: $out"
    out=$("$CLI" stat --server "$ADDR_a") && grep -q lz4ds <<<"$out" && pass "dscache stat" \
        || fail "dscache stat: $out"
    out=$("$CLI" stat --server "$ADDR_a" --dataset rawds --json)
    [ "$(json_get "$out" 'j["datasets"][0]["name"]')" = rawds ] && pass "dscache stat --json" \
        || fail "dscache stat --json: $out"
fi

# /metrics
served=$(metric "$HTTP_a" dscache_bytes_served_total)
[ "$served" != missing ] && [ "$served" -gt 0 ] && pass "metrics: bytes served $served" \
    || fail "bytes_served: $served"
gets=$(metric "$HTTP_a" 'dscache_requests_total{op="GET",status="OK"}')
[ "$gets" != missing ] && [ "$gets" -gt 256 ] && pass "metrics: GET OK $gets" || fail "GET OK: $gets"
for m in dscache_hits_total dscache_misses_total dscache_evictions_total dscache_store_bytes \
    dscache_store_capacity_bytes dscache_open_connections dscache_load_seconds_count \
    'dscache_load_seconds_bucket{le="+Inf"}'; do
    [ "$(metric "$HTTP_a" "$m")" != missing ] || fail "metric $m missing"
done
[ "$(metric "$HTTP_a" dscache_load_seconds_count)" -ge "$shards" ] && pass "load histogram" \
    || fail "load histogram count"
curl -sf "http://$HTTP_a/healthz" >/dev/null && pass "/healthz" || fail "/healthz"
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://$HTTP_a/nope")" = 404 ] && pass "HTTP 404" \
    || fail "HTTP unknown path"

stop_server a
[ "$STOP_RC" = 0 ] && pass "SIGTERM: exit 0" || fail "exit code $STOP_RC"
finish
