#!/usr/bin/env bash
# Read-through at chunk granularity under minio with a full store: every chunk served equals the
# shard file, N single-chunk GETs of non-resident shards read N chunks from disk (not N shards),
# a damaged chunk is answered CORRUPT while its neighbours are served, a damaged index marks the
# shard bad, a rescan empties the index cache, and the bookkeeping stays under 1% of the cached
# bytes for realistic shards (16 MiB shards of 1 MiB chunks).
source "$(dirname "$0")/server_lib.sh"

# About 3 MiB of raw shards (256 KiB, 32 KiB chunks) against a 2 MiB store.
make_dataset "$work/ds" rtds 3000 none
start_server a --data "$work/ds" --memory 1M --warm
stat_a() { "$TOOL" call "$ADDR_a" STAT rtds; }
store_a() { json_get "$(stat_a)" "j['store']['$1']"; }
total=$(json_get "$(stat_a)" 'j["datasets"][0]["shards"]')
resident=$(json_get "$(stat_a)" 'j["datasets"][0]["cached_shards"]')
[ "$resident" -gt 0 ] && [ $((total - resident)) -ge 3 ] && pass "warm: $resident/$total resident" \
    || fail "resident $resident of $total: want at least 3 shards read through"

# Every chunk, one per GET, compared byte for byte with the files: twice (index cached the
# second time), and with 32 GETs in flight so read-throughs run concurrently.
for depth in 1 32; do
    out=$("$TOOL" fetch "$ADDR_a" rtds "$work/ds" "$depth") && pass "fetch depth $depth: $out" \
        || fail "fetch depth $depth: $out"
done
[ "$(store_a bytes_loaded)" = "$(metric "$HTTP_a" dscache_loaded_bytes_total)" ] \
    && pass "STAT bytes_loaded matches /metrics" || fail "bytes_loaded STAT vs metrics"
loaded0=$(store_a bytes_loaded)

# Which shards are read through: a GET that moves the read_through counter.
nonres=()
for s in $(seq 0 $((total - 1))); do
    rt0=$(store_a read_through)
    out=$("$TOOL" get "$ADDR_a" rtds "$s" 0 1)
    grep -q '^OK' <<<"$out" || fail "shard $s chunk 0: $out"
    [ "$(store_a read_through)" -gt "$rt0" ] && nonres+=("$s")
done
[ "${#nonres[@]}" = $((total - resident)) ] && pass "read through: shards ${nonres[*]}" \
    || fail "read-through shards ${nonres[*]}: expected $((total - resident))"
[ "${#nonres[@]}" -ge 3 ] || finish # the checks below need three read-through shards
entries=$(store_a index_cache_entries)
[ "$entries" = "${#nonres[@]}" ] && pass "index cache: $entries shard indexes" \
    || fail "index cache entries $entries"

# N single-chunk GETs of non-resident shards (indexes cached): exactly the chunks' stored bytes.
rb0=$(store_a read_through_bytes)
want=0 n=0
for s in "${nonres[@]}"; do
    for c in 1 3 5; do
        out=$("$TOOL" get "$ADDR_a" rtds "$s" "$c" 1)
        grep -q '^OK' <<<"$out" || { fail "shard $s chunk $c: $out"; continue; }
        want=$((want + ${out#OK } - 8 - 48)) # body: prefix (8 + 48) + stored bytes
        n=$((n + 1))
    done
done
s=${nonres[0]}
out=$("$TOOL" get "$ADDR_a" rtds "$s" 2 3)
grep -q '^OK' <<<"$out" && want=$((want + ${out#OK } - 8 - 3 * 48)) || fail "3-chunk GET: $out"
got=$(($(store_a read_through_bytes) - rb0))
shard_bytes=$(stat -c %s "$work/ds/$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["shards"][0]["file"])' "$work/ds/manifest.json")")
[ "$got" = "$want" ] && pass "$n single-chunk GETs + one 3-chunk GET read $got disk bytes = the chunks' bytes (whole shards: $(((n + 1) * shard_bytes)))" \
    || fail "disk bytes read $got, chunks hold $want"
[ "$got" -lt $(((n + 1) * shard_bytes / 4)) ] || fail "read amplification: $got bytes"
[ "$(store_a bytes_loaded)" = "$loaded0" ] && pass "no whole-shard loads" \
    || fail "whole-shard loads: bytes_loaded moved"
[ "$(metric "$HTTP_a" dscache_read_through_bytes_total)" = "$(store_a read_through_bytes)" ] \
    && pass "/metrics read_through_bytes matches STAT" || fail "metrics read_through_bytes"
[ "$(metric "$HTTP_a" dscache_evictions_total)" = 0 ] || fail "minio evicted"

# chunk_entry FILE I: "offset stored_len" of chunk I, from the footer and index.
chunk_entry() {
    python3 - "$1" "$2" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
index_offset, count = struct.unpack_from("<QI", b, len(b) - 32)
off, _, stored = struct.unpack_from("<QQI", b, index_offset + 48 * int(sys.argv[2]))
print(off, stored, index_offset)
PY
}
flip() { # flip FILE OFFSET: xor one byte in place
    python3 -c 'import sys
f = open(sys.argv[1], "r+b"); f.seek(int(sys.argv[2])); v = f.read(1)[0]
f.seek(int(sys.argv[2])); f.write(bytes([v ^ 0x40]))' "$1" "$2"
}
file_of() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["shards"][int(sys.argv[2])]["file"])' "$work/ds/manifest.json" "$1"; }

# A damaged chunk of a non-resident shard: that chunk (alone or in a range) is CORRUPT, the
# others of the shard are still served, the shard is not marked bad.
sa=${nonres[0]}
fa=$work/ds/$(file_of "$sa")
read -r off len _ < <(chunk_entry "$fa" 3)
flip "$fa" $((off + len / 2))
out=$("$TOOL" get "$ADDR_a" rtds "$sa" 3 1)
grep -q '^CORRUPT' <<<"$out" && pass "damaged chunk: CORRUPT" || fail "damaged chunk: $out"
out=$("$TOOL" get "$ADDR_a" rtds "$sa" 2 2)
grep -q '^CORRUPT' <<<"$out" && pass "range over the damaged chunk: CORRUPT" || fail "range: $out"
for c in 2 4; do
    out=$("$TOOL" get "$ADDR_a" rtds "$sa" "$c" 1)
    grep -q '^OK' <<<"$out" && pass "shard $sa chunk $c still served" || fail "chunk $c: $out"
done
[ "$(json_get "$(stat_a)" 'j["datasets"][0]["bad_shards"]')" = 0 ] \
    && pass "a damaged chunk does not mark the shard bad" || fail "shard marked bad"
n=$(grep -c "chunk 3 damaged (read through" "$work/server-a.log" || true)
[ "$n" = 1 ] && pass "damaged chunk logged once" || fail "damaged-chunk log lines: $n"

# A damaged index of another non-resident shard, seen after a rescan emptied the index cache:
# the shard is marked bad, logged once, and every GET of it is CORRUPT.
sb=${nonres[1]}
fb=$work/ds/$(file_of "$sb")
read -r _ _ index_offset < <(chunk_entry "$fb" 0)
flip "$fb" $((index_offset + 20))
kill -HUP "$PID_a"
for _ in $(seq 1 100); do
    grep -q "rescan: 1 datasets served" "$work/server-a.log" && break
    sleep 0.05
done
[ "$(store_a index_cache_entries)" = 0 ] && pass "rescan emptied the index cache" \
    || fail "index cache after rescan: $(store_a index_cache_entries)"
for c in 0 1; do
    out=$("$TOOL" get "$ADDR_a" rtds "$sb" "$c" 1)
    grep -q '^CORRUPT' <<<"$out" || fail "damaged index, chunk $c: $out"
done
[ "$(json_get "$(stat_a)" 'j["datasets"][0]["bad_shards"]')" = 1 ] \
    && pass "damaged index: shard marked bad" || fail "bad shards: $(stat_a)"
n=$(grep -c "marked bad" "$work/server-a.log" || true)
[ "$n" = 1 ] && pass "bad shard logged once" || fail "marked-bad log lines: $n"
sc=${nonres[2]}
out=$("$TOOL" get "$ADDR_a" rtds "$sc" 1 1)
grep -q '^OK' <<<"$out" && pass "other shards still read through" || fail "shard $sc: $out"
stop_server a
[ "$STOP_RC" = 0 ] || fail "exit $STOP_RC"

# Realistic shards: 4 x 16 MiB of 1 MiB chunks against a 40 MiB store (2 resident, 2 read
# through). After every chunk went through, the bookkeeping (slots, manifest, JSON, tables,
# cached indexes) stays under 1% of the cached bytes.
"$CLI" ingest synthetic -o "$work/big" --name bigds --samples 256 --field x:f32:65536 \
    --compress none --shard-size 16M --chunk-size 1M >/dev/null
start_server b --data "$work/big" --memory 40M --warm
out=$("$TOOL" fetch "$ADDR_b" bigds "$work/big" 4) && pass "16 MiB shards: $out" \
    || fail "16 MiB shards fetch: $out"
stat=$("$TOOL" call "$ADDR_b" STAT bigds)
meta=$(json_get "$stat" 'j["store"]["metadata_bytes"]')
cached=$(json_get "$stat" 'j["datasets"][0]["cached_bytes"]')
idx=$(json_get "$stat" 'j["store"]["index_cache_entries"]')
rt=$(json_get "$stat" 'j["store"]["read_through"]')
ratio=$(python3 -c "print(f'{$meta / max($cached, 1) * 100:.4f}')")
[ "$idx" -ge 1 ] && [ "$rt" -ge 1 ] && [ "$cached" -gt 0 ] && [ $((meta * 100)) -lt "$cached" ] \
    && pass "metadata $meta bytes = $ratio% of $cached cached bytes ($idx indexes cached)" \
    || fail "metadata $meta bytes vs cached $cached ($ratio%), indexes $idx, read-throughs $rt"
[ "$(metric "$HTTP_b" dscache_metadata_bytes)" -gt 0 ] && pass "/metrics dscache_metadata_bytes" \
    || fail "metrics metadata_bytes"
stop_server b
[ "$STOP_RC" = 0 ] || fail "exit $STOP_RC"
finish
