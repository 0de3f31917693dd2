#!/usr/bin/env bash
# SIGTERM while a large answer is in flight to a slow reader: the client receives it whole and the
# server exits 0. SIGTERM during a slow warm-up: queued loads are dropped and the server exits 0
# at once, never ready. SIGHUP: a dataset directory gains a shard (new manifest) and a new dataset
# directory's manifest appears; after the rescan both are served, and a dataset whose manifest
# went away is dropped.
source "$(dirname "$0")/server_lib.sh"

# ---- SIGTERM drain: one GET of a whole 8 MiB shard (raw, so nothing shrinks) -----------------
"$CLI" ingest synthetic -o "$work/big" --name bigds --samples 8192 --field x:u8:1024 \
    --compress none --shard-size 8M --chunk-size 1M >/dev/null
start_server a --data "$work/big" --memory 64M --warm --max-out 1M
"$TOOL" slow "$ADDR_a" bigds 0 "$work/sent" >"$work/slow.out" 2>&1 &
client=$!
for _ in $(seq 1 200); do [ -e "$work/sent" ] && break; sleep 0.05; done
sleep 0.3 # the request is read by the server
stop_server a TERM
client_rc=0
wait "$client" || client_rc=$?
[ "$STOP_RC" = 0 ] && pass "SIGTERM with an answer in flight: exit 0" || fail "server exit $STOP_RC"
[ "$client_rc" = 0 ] && pass "$(cat "$work/slow.out")" || fail "slow client: $(cat "$work/slow.out")"
grep -q "stopped" "$work/server-a.log" && pass "server logged its stop" || fail "no stop line"

# ---- SIGTERM during a warm-up: the loads still queued are dropped, exit 0 at once -------------
# DSC_TEST_LOAD_DELAY_MS makes each whole-shard load take 300 ms (one I/O thread): the full
# warm-up would take shards x 0.3 s.
make_dataset "$work/slow" slowds 4000 none
nshards=$(ls "$work/slow"/*.dsc | wc -l)
DSC_TEST_LOAD_DELAY_MS=300 "$SERVER" --listen 127.0.0.1:0 --http 127.0.0.1:0 \
    --port-file "$work/w.port" --http-port-file "$work/w.hport" --io-threads 1 --warm \
    --data "$work/slow" --log-level info >"$work/server-w.log" 2>&1 &
PID_w=$!
pids+=("$PID_w")
for _ in $(seq 1 200); do
    grep -q "warm-up: loading" "$work/server-w.log" && [ -s "$work/w.hport" ] && break
    sleep 0.05
done
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$(cat "$work/w.hport")/readyz")
[ "$code" = 503 ] && pass "warming $nshards shards: /readyz 503" || fail "/readyz $code while warming"
t0=$(date +%s%N)
stop_server w TERM
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$STOP_RC" = 0 ] && pass "SIGTERM during the warm-up: exit 0 in $ms ms" || fail "exit $STOP_RC"
[ "$ms" -lt $(( nshards * 300 / 2 )) ] && pass "faster than half the warm-up ($nshards x 300 ms)" \
    || fail "took $ms ms to stop (full warm-up: $(( nshards * 300 )) ms)"
line=$(grep -o "warm-up stopped (shutting down): [0-9]* of [0-9]* shards loaded" \
    "$work/server-w.log" || true)
loaded=$(sed -E 's/.*: ([0-9]+) of ([0-9]+) .*/\1/' <<<"$line")
if [ -n "$line" ] && [ "$loaded" -lt "$nshards" ]; then
    pass "log: $line"
else
    cat "$work/server-w.log"
    fail "no 'warm-up stopped' line with fewer than $nshards shards loaded"
fi
! grep -q " ready$" "$work/server-w.log" && pass "never reported ready" || fail "logged ready"

# ---- SIGHUP rescan ----------------------------------------------------------------------------
make_dataset "$work/grow" growds 1000 lz4 --seed 1
mkdir -p "$work/later"
make_dataset "$work/gone" goneds 500 lz4
start_server b --data "$work/grow" --data "$work/later" --data "$work/gone" --memory 16M
before=$(json_get "$("$TOOL" call "$ADDR_b" MANIFEST growds)" 'len(j["shards"])')
old_shards=$before
out=$("$TOOL" fetch "$ADDR_b" growds "$work/grow" 4) || fail "fetch before rescan: $out"
# Grow the dataset: re-ingest with more samples (same shard size: old shards keep their bytes).
make_dataset "$work/grow2" growds 2000 lz4 --seed 1
cp "$work/grow2"/*.dsc "$work/grow/"
cp "$work/grow2/manifest.json" "$work/grow/manifest.json"
rm -f "$work/gone/manifest.json"
make_dataset "$work/later" laterds 300 none
kill -HUP "$PID_b"
for _ in $(seq 1 100); do
    grep -q "rescan: .* datasets served" "$work/server-b.log" && break
    sleep 0.05
done
after=$(json_get "$("$TOOL" call "$ADDR_b" MANIFEST growds)" 'len(j["shards"])')
[ "$after" -gt "$old_shards" ] && pass "SIGHUP: growds has $after shards (was $old_shards)" \
    || fail "growds shards after rescan: $after"
out=$("$TOOL" fetch "$ADDR_b" growds "$work/grow" 4) && pass "new shards served: $out" \
    || fail "fetch after rescan: $out"
out=$("$TOOL" fetch "$ADDR_b" laterds "$work/later" 4) && pass "new dataset directory served: $out" \
    || fail "fetch laterds: $out"
out=$("$TOOL" call "$ADDR_b" STAT goneds)
grep -q ENOTFOUND <<<"$out" && pass "dataset without manifest dropped" || fail "goneds: $out"
stop_server b
[ "$STOP_RC" = 0 ] && pass "exit 0 after rescan" || fail "exit $STOP_RC"
finish
