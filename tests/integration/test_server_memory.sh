#!/usr/bin/env bash
# A store smaller than the dataset: under lru shards are evicted and every answer stays correct;
# under minio nothing is evicted, shards beyond the resident set are read through, answers stay
# correct. WARM and EVICT admin operations move the cached counts.
source "$(dirname "$0")/server_lib.sh"

# About 3 MiB of raw shards against a 2 MiB store (the arena rounds to 2 MiB).
make_dataset "$work/ds" memds 3000 none
cached() { json_get "$("$TOOL" call "$1" STAT memds)" "$2"; }

# WARM/EVICT below are admin operations: anonymous ones need --allow-anonymous-admin.
start_server lru --data "$work/ds" --memory 1M --policy lru --allow-anonymous-admin
for round in 1 2; do
    out=$("$TOOL" fetch "$ADDR_lru" memds "$work/ds" 8) && pass "lru round $round: $out" \
        || fail "lru fetch: $out"
done
ev=$(metric "$HTTP_lru" dscache_evictions_total)
[ "$ev" != missing ] && [ "$ev" -gt 0 ] && pass "lru: $ev evictions" || fail "lru evictions: $ev"
used=$(metric "$HTTP_lru" dscache_store_bytes)
[ "$used" -le $((2 << 20)) ] && pass "lru: store bytes $used within capacity" || fail "store bytes $used"
[ "$(metric "$HTTP_lru" dscache_read_through_total)" = 0 ] && pass "lru: no read-through" \
    || fail "lru read through"
n=$("$TOOL" call "$ADDR_lru" EVICT memds)
[ "$n" -gt 0 ] && [ "$(cached "$ADDR_lru" 'j["datasets"][0]["cached_shards"]')" = 0 ] \
    && pass "EVICT all: $n shards dropped" || fail "EVICT: $n"
n=$("$TOOL" call "$ADDR_lru" WARM memds 2)
sleep 0.3
[ "$n" = 1 ] && [ "$(cached "$ADDR_lru" 'j["datasets"][0]["cached_shards"]')" = 1 ] \
    && pass "WARM one shard" || fail "WARM one shard: $n"
out=$("$TOOL" call "$ADDR_lru" WARM nosuch)
grep -q ENOTFOUND <<<"$out" && pass "WARM unknown dataset: NOT_FOUND" || fail "WARM nosuch: $out"
stop_server lru
[ "$STOP_RC" = 0 ] || fail "lru server exit $STOP_RC"

start_server minio --data "$work/ds" --memory 1M --warm
resident=$(cached "$ADDR_minio" 'j["datasets"][0]["cached_shards"]')
total=$(cached "$ADDR_minio" 'j["datasets"][0]["shards"]')
[ "$resident" -gt 0 ] && [ "$resident" -lt "$total" ] && pass "minio warm: $resident/$total resident" \
    || fail "minio resident $resident/$total"
for round in 1 2; do
    out=$("$TOOL" fetch "$ADDR_minio" memds "$work/ds" 8) && pass "minio round $round: $out" \
        || fail "minio fetch: $out"
done
[ "$(metric "$HTTP_minio" dscache_evictions_total)" = 0 ] && pass "minio: no evictions" \
    || fail "minio evicted"
rt=$(metric "$HTTP_minio" dscache_read_through_total)
[ "$rt" -gt 0 ] && pass "minio: $rt read-through loads" || fail "minio read through $rt"
after=$(cached "$ADDR_minio" 'j["datasets"][0]["cached_shards"]')
[ "$after" -ge "$resident" ] && pass "minio: resident set kept ($resident -> $after)" \
    || fail "minio resident set shrank: $resident -> $after"
stop_server minio
[ "$STOP_RC" = 0 ] || fail "minio server exit $STOP_RC"
finish
