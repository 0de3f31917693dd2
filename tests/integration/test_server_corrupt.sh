#!/usr/bin/env bash
# Damage on disk, located. Shard 1: one byte flipped in one chunk (header, index and footer
# intact); shard 2: truncated. The damaged chunk alone is answered CORRUPT ("damaged chunk C",
# naming the shard's file) and every other chunk of shard 1 is served, whether the shard was
# loaded by the warm-up, by a GET's miss, or is read through (a store smaller than a shard); the
# truncated shard is refused whole. Each damaged shard is logged once with its file and chunk,
# counted (STAT, /metrics), and named as damaged by /readyz and `dscache stat`.
source "$(dirname "$0")/server_lib.sh"
[ -x "$DSC_BIN/shard_damage" ] || { echo "SKIP: $DSC_BIN/shard_damage not built"; exit 77; }

# prepare DIR SAMPLES COMPRESS [ingest args]: the dataset "badds" in DIR, damaged as above;
# sets dsdir, f1, f2 (the files of shards 1 and 2) and chunks (of shard 1).
bad=2 # the damaged chunk of shard 1
prepare() {
    dsdir=$1
    make_dataset "$dsdir" badds "$2" "$3" "${@:4}"
    f1=$(mf 1 file)
    f2=$(mf 2 file)
    chunks=$(mf 1 chunks)
    [ "$chunks" -ge 4 ] || fail "shard 1 has $chunks chunks: want at least 4"
    n=$("$DSC_BIN/shard_damage" chunk "$dsdir" 1 "$bad") && [ "$n" = 1 ] \
        || fail "shard_damage chunk: $n"
    local size
    size=$(stat -c %s "$dsdir/$f2")
    truncate -s $((size - 100)) "$dsdir/$f2"
}
mf() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["shards"][int(sys.argv[2])][sys.argv[3]])' "$dsdir/manifest.json" "$@"; }
prepare "$work/ds" 2000 lz4

# check NAME: the answers of one server.
check() {
    local name=$1 addr_var="ADDR_$1" how=$2
    local addr=${!addr_var}
    out=$("$TOOL" geterr "$addr" badds 1 "$bad" 1)
    grep -q "^CORRUPT [0-9]* damaged chunk $bad of dataset badds shard 1 (file $f1)" <<<"$out" \
        && pass "$how: the damaged chunk answers CORRUPT, naming chunk, shard and file" \
        || fail "$how: damaged chunk: $out"
    out=$("$TOOL" geterr "$addr" badds 1 $((bad - 1)) 3)
    grep -q "^CORRUPT [0-9]* damaged chunk $bad " <<<"$out" \
        && pass "$how: a range holding it answers CORRUPT for chunk $bad" \
        || fail "$how: range over the damaged chunk: $out"
    local served=0
    for c in $(seq 0 $((chunks - 1))); do
        [ "$c" = "$bad" ] && continue
        out=$("$TOOL" get "$addr" badds 1 "$c" 1)
        grep -q '^OK' <<<"$out" && served=$((served + 1)) \
            || fail "$how: shard 1 chunk $c not served: $out"
    done
    out=$("$TOOL" get "$addr" badds 1 $((bad + 1)) $((chunks - bad - 1)))
    grep -q '^OK' <<<"$out" || fail "$how: chunks after the damaged one as one range: $out"
    [ "$served" = $((chunks - 1)) ] && pass "$how: the other $((chunks - 1)) chunks of shard 1 are served"
    out=$("$TOOL" geterr "$addr" badds 2 0 1)
    grep -q '^CORRUPT' <<<"$out" && pass "$how: the truncated shard answers CORRUPT" \
        || fail "$how: truncated shard: $out"
    for s in 0 3; do
        out=$("$TOOL" get "$addr" badds $s 0 1)
        grep -q '^OK' <<<"$out" || fail "$how: shard $s: $out"
    done
}

# report NAME HOW: what the server says about the damage.
report() {
    local name=$1 how=$2 addr_var="ADDR_$1" http_var="HTTP_$1"
    local addr=${!addr_var} http=${!http_var}
    stat=$("$TOOL" call "$addr" STAT badds)
    [ "$(json_get "$stat" '[d["shard"] for d in j["datasets"][0]["damaged"] if d["state"] == "chunks"]')" = "[1]" ] \
        && [ "$(json_get "$stat" 'j["datasets"][0]["damaged_chunks"]')" = 1 ] \
        && [ "$(json_get "$stat" '[d["first_chunk"] for d in j["datasets"][0]["damaged"] if d["shard"] == 1]')" = "[$bad]" ] \
        && pass "$how: STAT names shard 1 as damaged (1 chunk, chunk $bad)" \
        || fail "$how: STAT damaged: $stat"
    [ "$(metric "$http" dscache_damaged_chunks)" = 1 ] && [ "$(metric "$http" dscache_damaged_shards)" = 1 ] \
        && pass "$how: /metrics dscache_damaged_chunks 1, dscache_damaged_shards 1" \
        || fail "$how: damage metrics: $(curl -sf "http://$http/metrics" | grep damaged)"
    lines=$(grep -c "shard 1 ($dsdir/$f1).*chunk $bad" "$work/server-$name.log" || true)
    [ "$lines" = 1 ] && pass "$how: the damage is logged once, with file and chunk" \
        || fail "$how: $lines log lines for shard 1: $(cat "$work/server-$name.log")"
    ready=$(curl -s "http://$http/readyz")
    grep -q "damaged shard.*badds shard 1 ($f1: 1 of $chunks chunks, first chunk $bad)" <<<"$ready" \
        && pass "$how: /readyz names the damaged shard" || fail "$how: /readyz: $ready"
    if [ "${3:-}" = full ]; then
        grep -q "badds shard 2 ($f2: whole shard refused)" <<<"$ready" \
            && ! grep -q "store full" <<<"$ready" \
            && pass "$how: /readyz names the refused shard, no store-full excuse" \
            || fail "$how: /readyz about shard 2: $ready"
    fi
    table=$("$CLI" stat --server "$addr")
    grep -q "^damaged: dataset badds shard 1 ($f1): 1 of $chunks chunks damaged (first: chunk $bad)" <<<"$table" \
        && pass "$how: dscache stat names the damaged shard" || fail "$how: dscache stat: $table"
}

# Warm: the warm-up loads every shard, the damaged one included.
start_server a --data "$work/ds" --memory 16M --warm
until_ok 20 curl -sf "http://$HTTP_a/readyz" || fail "server a never ready"
check a "warm"
report a "warm" full
grep -q "marked bad" "$work/server-a.log" && [ "$(grep -c "marked bad" "$work/server-a.log")" = 1 ] \
    && pass "warm: the truncated shard is marked bad once" || fail "warm: marked-bad lines"
[ "$(metric "$HTTP_a" 'dscache_requests_total{op="GET",status="CORRUPT"}')" = 3 ] \
    && pass "warm: metrics count 3 CORRUPT answers" || fail "warm: CORRUPT count"

# Loaded by a GET's miss (no warm-up): the first GET of the damaged chunk waits for the load.
start_server b --data "$work/ds" --memory 16M
check b "miss"
report b "miss"

# Read through: shard 1 (3 MiB, raw) is larger than the store (2 MiB, the smallest there is):
# every GET of it reads its chunks from the file.
prepare "$work/big" 9500 none --shard-size 3M
start_server c --data "$work/big" --memory 2M
check c "read-through"
[ "$(json_get "$("$TOOL" call "$ADDR_c" STAT badds)" 'j["store"]["read_through"]')" -gt 0 ] \
    && ! grep -q "1 of $chunks chunks damaged" "$work/server-c.log" \
    && pass "read-through: shard 1 was read through, never loaded whole" \
    || fail "read-through: the server did not read through: $(cat "$work/server-c.log")"
report c "read-through"

for s in a b c; do
    stop_server $s
    [ "$STOP_RC" = 0 ] || fail "server $s exit $STOP_RC"
done
finish
