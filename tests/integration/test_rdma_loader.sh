#!/usr/bin/env bash
# RDMA transport end to end through the test-only fake verbs library (DSC_IBVERBS_LIB): every
# chunk of raw and lz4 datasets read by RDMA READ equals the files; TCP and RDMA loaders on one
# server at once; EVICT and SIGHUP rescans while READs are outstanding; a client that never
# releases its lease is fenced (its QP destroyed, the connection closed) while others are served;
# error completions and a server killed mid-epoch move the chunks, exactly once; an arena split
# into overlapping regions serves every chunk by READ; auto without a device, or against a server
# with --rdma off (whose HELLO does not offer RDMA: no RDMA_CONNECT is sent), falls back to TCP
# with one clear line; required fails clearly (loader and server). Device events and the QP set-up
# on the thread pool: test_rdma_events.sh.
set -euo pipefail
source "$(dirname "$0")/server_lib.sh"
source "$(dirname "$0")/rdma_lib.sh"

make_dataset "$work/lz4" lz4ds 4000 lz4
make_dataset "$work/raw" rawds 3000 none
start_server A --data "$work/lz4" --data "$work/raw" --rdma required --memory 64M
grep -q "rdma: on: device fakeverbs0 port 1 (RoCE, MTU 4096" "$work/server-A.log" ||
    fail "no registration line: $(cat "$work/server-A.log")"
grep -qE "registered for remote READ in 1 region\(s\) in [0-9.]+ ms" "$work/server-A.log" ||
    fail "registration time not logged"

run_check() { "$CHECK" "$@" >"$work/out.txt" 2>&1 || { cat "$work/out.txt"; fail "rdma_check $*"; }; }

# 1. Every chunk over RDMA equals the files (raw and lz4), two epochs each.
for ds in lz4 raw; do
    run_check epoch --servers "$ADDR_A" --dataset ${ds}ds --dir "$work/$ds" --transport rdma \
        --epochs 2 --expect-rdma 1
    grep -q "log INFO: server $ADDR_A: transport rdma (device fakeverbs0, path MTU 4096" \
        "$work/out.txt" || fail "no transport line: $(cat "$work/out.txt")"
    grep "^stats:" "$work/out.txt"
done
[ "$(metric "$HTTP_A" dscache_rdma_leases)" = 0 ] || fail "leases left after the loaders exited"
[ "$(metric "$HTTP_A" dscache_rdma_connections)" = 0 ] || fail "QPs left after the loaders exited"
[ "$(metric "$HTTP_A" dscache_rdma_leases_expired_total)" = 0 ] || fail "a lease expired"
[ "$(metric "$HTTP_A" 'dscache_transport_bytes_total{transport="rdma"}')" -gt 0 ] ||
    fail "no RDMA bytes counted"
pass "raw and lz4 epochs over RDMA equal the files; leases all released"
out=$("$CLI" doctor --pin-bytes 4K --server "$ADDR_A") || fail "doctor --server: exit $?: $out"
grep -E "probe READ" <<<"$out"
grep -qE "probe READ +ok +4096 bytes READ from $ADDR_A over fakeverbs0 .* checksum ok" <<<"$out" ||
    fail "doctor --server: no probe READ: $out"
pass "dscache doctor --server READs the server's probe region"

# 1b. The arena split at a 2 MiB max_mr_size: 23 regions of 2 MiB overlapping by 1 MiB (a region
# every MiB), so the chunks that straddle a 2 MiB boundary (packed shards of 32 KiB chunks do; with
# regions side by side they were answered inline) are READ like every other: no byte inline, the
# loader's RDMA bytes equal its wire bytes. Read-through buffers (a minio server whose 1 MiB store
# holds few shards) are outside registered memory and answered inline.
DSC_FAKEVERBS_MAX_MR_SIZE=2097152 start_server M --data "$work/raw" --rdma required --memory 24M
grep -q "registered for remote READ in 23 region(s) .* regions of 2097152 bytes (max_mr_size) \
overlapping by 1048576 bytes" "$work/server-M.log" ||
    fail "arena not split at max_mr_size into overlapping regions: $(grep 'rdma:' "$work/server-M.log")"
[ "$(metric "$HTTP_M" dscache_rdma_regions)" = 23 ] || fail "dscache_rdma_regions"
run_check epoch --servers "$ADDR_M" --dataset rawds --dir "$work/raw" --transport rdma \
    --expect-rdma 1 --epochs 2
grep "^stats:" "$work/out.txt"
read -r rdma_b wire_b < <(sed -nE 's/^stats: .* rdma_bytes ([0-9]+) wire_bytes ([0-9]+) .*/\1 \2/p' \
    "$work/out.txt")
[ -n "$rdma_b" ] && [ "$rdma_b" = "$wire_b" ] ||
    fail "split arena: rdma_bytes $rdma_b != wire_bytes $wire_b (chunks answered inline)"
split_inline=$(metric "$HTTP_M" 'dscache_transport_bytes_total{transport="rdma_inline"}')
[ "$split_inline" = 0 ] || fail "split arena: $split_inline bytes answered inline"
start_server R --data "$work/raw" --rdma required --memory 1M --policy minio
run_check epoch --servers "$ADDR_R" --dataset rawds --dir "$work/raw" --transport rdma
inline=$(metric "$HTTP_R" 'dscache_transport_bytes_total{transport="rdma_inline"}')
echo "read-through bytes answered inline: $inline; split arena inline bytes: $split_inline"
[ "$inline" -gt 0 ] || fail "no read-through answered inline"
pass "split arena: overlapping regions, every chunk READ (none inline); read-through inline"

# 2. TCP and RDMA loaders on one server at once.
get_ok() {
    local v
    v=$(metric "$HTTP_A" 'dscache_requests_total{op="GET",status="OK"}')
    [ "$v" = missing ] && v=0
    echo "$v"
}
tcp_before=$(get_ok)
"$CHECK" epoch --servers "$ADDR_A" --dataset lz4ds --dir "$work/lz4" --transport tcp \
    --expect-rdma 0 --epochs 2 >"$work/tcp.txt" 2>&1 &
p1=$!
"$CHECK" epoch --servers "$ADDR_A" --dataset lz4ds --dir "$work/lz4" --transport rdma \
    --expect-rdma 1 --epochs 2 >"$work/rdma.txt" 2>&1 &
p2=$!
wait $p1 || { cat "$work/tcp.txt"; fail "TCP loader beside an RDMA loader"; }
wait $p2 || { cat "$work/rdma.txt"; fail "RDMA loader beside a TCP loader"; }
[ "$(get_ok)" -gt "$tcp_before" ] || fail "the TCP loader sent no GET"
pass "a TCP and an RDMA loader on one server, both byte-exact"

# 3. EVICT and SIGHUP rescans while READs are outstanding (an LRU server with a small store
# evicts on its own too): no stale or freed bytes reach a batch.
start_server E --data "$work/lz4" --data "$work/raw" --rdma required --memory 1M --policy lru
"$CHECK" epoch --servers "$ADDR_E" --dataset lz4ds --dir "$work/lz4" --transport rdma \
    --epochs 4 --expect-rdma 1 >"$work/evict.txt" 2>&1 &
pc=$!
evicts=0
while kill -0 $pc 2>/dev/null; do
    "$TOOL" call "$ADDR_E" EVICT lz4ds >/dev/null 2>&1 && evicts=$((evicts + 1))
    kill -HUP "$PID_E"
    sleep 0.02
done
wait $pc || { cat "$work/evict.txt"; fail "loader under EVICT + SIGHUP"; }
kill -0 "$PID_E" || fail "server E died"
echo "EVICTs sent during the epochs: $evicts; evictions: $(metric "$HTTP_E" dscache_evictions_total)"
[ "$evicts" -gt 0 ] || fail "no EVICT was sent during the epochs"
pass "EVICT + SIGHUP during outstanding READs: every batch byte-exact"

# 4. A client that never releases its lease: fenced after the TTL, the server serves others.
start_server T --data "$work/lz4" --rdma required --rdma-lease-ttl-ms 800
"$CHECK" stale --servers "$ADDR_T" --dataset lz4ds --ttl-ms 800 >"$work/stale.txt" 2>&1 ||
    { cat "$work/stale.txt"; fail "stale client"; }
cat "$work/stale.txt"
[ "$(metric "$HTTP_T" dscache_rdma_leases_expired_total)" -ge 1 ] || fail "no expiry counted"
[ "$(metric "$HTTP_T" dscache_rdma_leases)" = 0 ] || fail "the expired lease still holds"
[ "$(metric "$HTTP_T" dscache_rdma_connections)" = 0 ] || fail "the fenced QP still exists"
grep -q "lease(s) not released within 800 ms: fencing the connection" "$work/server-T.log" ||
    fail "no fence line in the server log"
run_check epoch --servers "$ADDR_T" --dataset lz4ds --dir "$work/lz4" --transport rdma \
    --expect-rdma 1
pass "lease expiry fences the client (QP destroyed, holds dropped); others still served"

# 5. Error completions on the client: the chunks move to a new connection, exactly once.
for fault in drop_cqe=40 fail_post=25; do
    DSC_FAKEVERBS_FAULTS=$fault run_check epoch --servers "$ADDR_A" --dataset rawds \
        --dir "$work/raw" --transport auto --timeout-ms 1000
    grep "^stats:" "$work/out.txt"
    grep -qE "log WARN: server $ADDR_A: RDMA READ of shard .* failed: .*; this connection \
continues over TCP" "$work/out.txt" || fail "$fault: no failure logged: $(cat "$work/out.txt")"
    grep -qE "^stats: .* rdma_errors [1-9]" "$work/out.txt" || fail "$fault: no RDMA error counted"
done
pass "error completions (lost CQE, failed post): the connection moves to TCP, every sample once"

# 6. A server killed mid-epoch (it SIGKILLs itself serving its 20th READ): the loader moves
# the chunks to the other replica, exactly once.
DSC_FAKEVERBS_FAULTS=kill_on_read=20 start_server K --data "$work/raw" --rdma required
start_server L --data "$work/raw" --rdma required
"$CHECK" epoch --servers "$ADDR_K,$ADDR_L" --dataset rawds --dir "$work/raw" --transport rdma \
    --epochs 2 --timeout-ms 1000 >"$work/kill.txt" 2>&1 || { cat "$work/kill.txt"; fail "kill"; }
grep "^stats:" "$work/kill.txt"
sleep 0.2
! kill -0 "$PID_K" 2>/dev/null || fail "server K was not killed by its fault"
pass "server killed mid-READ: chunks moved to the other replica, every sample once"

# 7. auto without a device on the client: TCP, with one clear line.
DSC_FAKEVERBS_DEVICES=0 run_check epoch --servers "$ADDR_A" --dataset rawds --dir "$work/raw" \
    --transport auto --expect-rdma 0
n=$(grep -c "log INFO: transport auto: RDMA unavailable (no RDMA device" "$work/out.txt" || true)
[ "$n" = 1 ] || fail "wanted one fallback line, got $n: $(cat "$work/out.txt")"
grep "transport auto" "$work/out.txt"
# ... and against a server with --rdma off: HELLO does not offer RDMA, so the loader sends no
# RDMA_CONNECT at all (the server's counter of them stays where a raw one left it) and says why
# once per server.
start_server O --data "$work/raw" --rdma off
grep -q "rdma: off" "$work/server-O.log" && fail "--rdma off should log nothing about RDMA"
rdma_connects() {
    local v
    v=$(metric "$1" 'dscache_requests_total{op="RDMA_CONNECT",status="UNSUPPORTED"}')
    [ "$v" = missing ] && v=0
    echo "$v"
}
"$CHECK" hello --servers "$ADDR_O" --dataset rawds | grep -q "rdma 0" || fail "HELLO of --rdma off"
"$CHECK" hello --servers "$ADDR_A" --dataset rawds | grep -q "rdma 1" || fail "HELLO of --rdma on"
run_check connect --servers "$ADDR_O" --dataset rawds
grep -q "connect: .*RDMA is off on this server" "$work/out.txt" || fail "raw RDMA_CONNECT to O"
[ "$(rdma_connects "$HTTP_O")" = 1 ] || fail "the raw RDMA_CONNECT was not counted"
run_check epoch --servers "$ADDR_O" --dataset rawds --dir "$work/raw" --transport auto \
    --expect-rdma 0
n=$(grep -c "transport tcp (RDMA: the server does not offer RDMA (started with --rdma off, or no \
device))" "$work/out.txt" || true)
[ "$n" = 1 ] || fail "wanted one per-server fallback line, got $n: $(cat "$work/out.txt")"
grep "transport tcp" "$work/out.txt"
[ "$(rdma_connects "$HTTP_O")" = 1 ] || fail "the loader sent RDMA_CONNECT to a server without RDMA"
pass "auto falls back to TCP with one clear line (no device; server without RDMA: no RDMA_CONNECT)"

# 8. required without RDMA fails clearly: the loader at create, the server at start.
DSC_FAKEVERBS_DEVICES=0 run_check create --servers "$ADDR_A" --dataset rawds --transport rdma
grep -q "log ERROR: transport rdma: RDMA is unavailable here: no RDMA device" "$work/out.txt" ||
    fail "no clear loader error: $(cat "$work/out.txt")"
run_check create --servers "$ADDR_O" --dataset rawds --transport rdma --timeout-ms 1000
grep -q "transport rdma required: the server does not offer RDMA" "$work/out.txt" ||
    fail "no clear loader error against --rdma off: $(cat "$work/out.txt")"
rc=0
DSC_FAKEVERBS_DEVICES=0 "$SERVER" --listen 127.0.0.1:0 --http off --data "$work/raw" \
    --rdma required >"$work/req.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "dscached --rdma required started without a device"
grep -q "rdma required but RDMA is unavailable: no RDMA device" "$work/req.log" ||
    fail "no clear server error: $(cat "$work/req.log")"
DSC_FAKEVERBS_DEVICES=0 start_server N --data "$work/raw"
grep -q "info  rdma: off (no RDMA device" "$work/server-N.log" ||
    fail "auto without a device: no INFO line: $(cat "$work/server-N.log")"
pass "required fails clearly without RDMA (loader and server); auto logs one INFO line"
finish
