#!/usr/bin/env bash
# dscached serving a dataset through tests/slowfs (a FUSE passthrough with a per-read latency and
# a bandwidth cap): every chunk read through it equals the shard files, a read-through takes at
# least the store's latency, slowfs paces its reads to the cap, and the server keeps many reads
# in flight at once (more than its --io-threads). Skips where slowfs is not built or FUSE cannot
# mount here. slowfs and the server are stopped by PID; the mount is undone on exit.
source "$(dirname "$0")/server_lib.sh"
source "$(dirname "$0")/slowfs_lib.sh"

make_dataset "$work/ds" sfds 8000 none
if ! mount_slowfs --latency-ms 30 --bandwidth 20M; then
    echo "SKIP: FUSE cannot mount here: $(tail -2 "$work/slowfs.log" | tr '\n' ' ')"
    exit 77
fi
cmp -s "$work/ds/manifest.json" "$mnt/manifest.json" && pass "slowfs mounted: files read back" \
    || fail "manifest differs through slowfs"

# A 1 MiB store, warmed: most of the ~8 MiB dataset is read through from slowfs.
t_mount=$(date +%s%N)
start_server a --data "$mnt" --memory 1M --io-threads 4 --warm
total=$(json_get "$("$TOOL" call "$ADDR_a" STAT sfds)" 'j["datasets"][0]["shards"]')
# The shards not resident (shard_map: "o" owned, not cached): each GET of them reads through.
cold=($(json_get "$("$TOOL" call "$ADDR_a" STAT sfds)" \
    '" ".join(str(i) for i, c in enumerate(j["datasets"][0]["shard_map"]) if c == "o")'))
[ "${#cold[@]}" -ge 9 ] || fail "only ${#cold[@]} shards read through: want at least 9"

# One chunk of a shard nobody asked for yet: at least the 30 ms latency (index + chunk reads).
t0=$(date +%s%N)
out=$("$TOOL" get "$ADDR_a" sfds "${cold[0]}" 0 1)
ms=$((($(date +%s%N) - t0) / 1000000))
grep -q '^OK' <<<"$out" || fail "GET through slowfs: $out"
[ "$ms" -ge 30 ] && pass "one read-through chunk took $ms ms (latency 30 ms)" \
    || fail "a read-through took $ms ms under a 30 ms store latency: slowfs adds no latency"

# Chunk 1 of every other cold shard at once, each from its own client: distinct shards cannot be
# coalesced, so slowfs sees as many reads at once as the server keeps in flight.
gets=()
for s in "${cold[@]:1}"; do
    "$TOOL" get "$ADDR_a" sfds "$s" 1 1 >"$work/get-$s.out" 2>&1 &
    gets+=("$!")
done
for p in "${gets[@]}"; do wait "$p" || true; done
okc=$(cat "$work"/get-*.out | grep -c '^OK' || true)
[ "$okc" = $((${#cold[@]} - 1)) ] && pass "$okc concurrent read-throughs of distinct shards answered" \
    || fail "concurrent GETs: $okc of $((${#cold[@]} - 1)) OK"
running_max=$(json_get "$("$TOOL" call "$ADDR_a" STAT sfds)" 'j["store"]["backing"]["running_max"]')
[ "$running_max" -gt 4 ] && pass "STAT: $running_max backing reads ran at once (4 --io-threads)" \
    || fail "STAT backing.running_max $running_max: read-throughs serialized on the I/O threads"

# Every chunk, 32 GETs in flight, compared byte for byte with the files underneath.
t0=$(date +%s%N)
out=$("$TOOL" fetch "$ADDR_a" sfds "$work/ds" 32) && pass "fetch through slowfs: $out" \
    || fail "fetch through slowfs: $out"
run_ms=$((($(date +%s%N) - t_mount) / 1000000))
coalesced=$(metric "$HTTP_a" dscache_backing_coalesced_total)
[ "$coalesced" != missing ] && [ "$coalesced" -gt 0 ] \
    && pass "$coalesced read-throughs coalesced into a neighbour's backing read" \
    || fail "no read-through coalesced (dscache_backing_coalesced_total $coalesced)"
for m in dscache_backing_reads_total dscache_backing_queue_depth dscache_backing_in_flight \
    dscache_backing_latency_seconds; do
    [ "$(metric "$HTTP_a" $m)" != missing ] || fail "/metrics lacks $m"
done
# dscache top shows the server's backing read latency (about slowfs's 30 ms, or more when paced).
top=$("$CLI" top --server "$ADDR_a" --once 2>&1 || true)
lat=$(awk -v a="$ADDR_a" '$1 == a { print $(NF - 2) }' <<<"$top") # BACK ms, then PEER MB/s and STATUS
grep -q 'BACK ms' <<<"$top" && awk -v l="${lat:-0}" 'BEGIN { exit !(l >= 25) }' \
    && pass "dscache top: backing latency $lat ms" || fail "dscache top backing latency '$lat': $top"
stop_server a
umount_slowfs
counters=$(grep '^slowfs:' "$work/slowfs.log" || true)
bytes=$(sed -E 's/.* ([0-9]+) bytes.*/\1/' <<<"$counters")
peak=$(sed -E 's/.*at most ([0-9]+) in flight.*/\1/' <<<"$counters")
[ -n "$counters" ] && pass "slowfs: $counters" || fail "slowfs printed no counters"
# Paced: everything slowfs delivered since the server started (warm-up, GETs, the fetch) cannot
# have arrived faster than 20 MB/s (5% slack for the clock).
min_ms=$((bytes / 20000 * 95 / 100))
[ "$run_ms" -ge "$min_ms" ] \
    && pass "served for $run_ms ms, slowfs delivered $bytes bytes at <= 20 MB/s" \
    || fail "served for $run_ms ms, $bytes bytes from slowfs: faster than the 20 MB/s cap"
[ "${peak:-0}" -gt 4 ] && pass "$peak reads in flight at once at slowfs (4 I/O threads)" \
    || fail "at most ${peak:-0} reads in flight at slowfs: read-throughs are serialized on the I/O threads"
finish
