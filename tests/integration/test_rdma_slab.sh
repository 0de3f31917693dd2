#!/usr/bin/env bash
# The loader's RDMA data path, through the test-only fake verbs library (DSC_IBVERBS_LIB) and its
# per-process statistics (DSC_FAKEVERBS_STATS): a loader with 2 connections registers exactly one
# memory region over 2 epochs (one slab shared by its I/O threads), keeps more than one request
# in READ on a QP at once with default options, and every sample equals the files (raw and lz4);
# a slab too small for what 4 connections keep in flight (DSCACHE_RDMA_SLAB_BYTES) makes I/O
# threads wait for room, without deadlock or a wrong byte; a slab that cannot be registered (the
# memlock limit) keeps transport auto on TCP with one line naming the fix, and makes transport
# rdma fail clearly.
set -euo pipefail
source "$(dirname "$0")/server_lib.sh"
source "$(dirname "$0")/rdma_lib.sh"

make_dataset "$work/raw" rawds 8000 none
make_dataset "$work/lz4" lz4ds 8000 lz4
make_dataset "$work/big" bigds 48000 none --shard-size 4M --chunk-size 256K
start_server A --data "$work/raw" --data "$work/lz4" --data "$work/big" --rdma required \
    --memory 64M

# stat FILE PID KEY: the value of KEY on the statistics line of process PID.
stat() {
    awk -v pid="$2" -v key="$3" '$1 == "fakeverbs" && $3 == pid {
        for (i = 4; i < NF; i += 2) if ($i == key) print $(i + 1) }' "$1"
}

# 1. One registration per loader, READs pipelined per QP, every sample equal to the files.
before=$fails
for ds in raw lz4; do
    stats=$work/stats-$ds.txt
    DSC_FAKEVERBS_STATS=$stats "$CHECK" epoch --servers "$ADDR_A" --dataset ${ds}ds \
        --dir "$work/$ds" --transport rdma --connections 2 --epochs 2 --expect-rdma 1 \
        >"$work/$ds.txt" 2>&1 &
    pid=$!
    wait $pid || { cat "$work/$ds.txt"; fail "$ds: epochs over RDMA"; continue; }
    grep "^stats:" "$work/$ds.txt"
    grep "rdma: loader slab" "$work/$ds.txt" || true
    cat "$stats"
    reg=$(stat "$stats" $pid reg_mr)
    reads=$(stat "$stats" $pid max_qp_read_requests)
    [ -n "$reg" ] && [ -n "$reads" ] || fail "$ds: no statistics line for the loader (pid $pid)"
    [ "$reg" = 1 ] ||
        fail "$ds: the loader registered $reg memory regions over 2 epochs and 2 connections, not 1"
    [ "${reads:-0}" -gt 1 ] ||
        fail "$ds: at most ${reads:-?} READ request(s) outstanding on one QP: not pipelined"
    grep -qE "log INFO: rdma: loader slab of [0-9.]+ MiB \((2 MiB hugetlb pages|normal pages, \
transparent huge pages requested)\) registered once in [0-9.]+ ms" "$work/$ds.txt" ||
        fail "$ds: no slab line (size, pages, registration time)"
done
[ "$(metric "$HTTP_A" dscache_rdma_leases)" = 0 ] || fail "leases left after the loaders exited"
[ "$fails" = "$before" ] && pass "one slab registered per loader (2 connections, 2 epochs); \
READs of several requests in flight per QP; raw and lz4 byte-exact"

# 2. A slab of twice the largest request (the least DSCACHE_RDMA_SLAB_BYTES allows; 256 KiB
# chunks) shared by 4 connections that keep up to 64 requests each: threads wait for room
# (holders complete their READs first), every sample arrives once and equal to the files.
before=$fails
stats=$work/stats-big.txt
DSCACHE_RDMA_SLAB_BYTES=1 DSC_FAKEVERBS_STATS=$stats "$CHECK" epoch --servers "$ADDR_A" \
    --dataset bigds --dir "$work/big" --transport rdma --connections 4 --epochs 2 --batch 256 \
    --expect-rdma 1 >"$work/big.txt" 2>&1 &
pid=$!
wait $pid || { cat "$work/big.txt"; fail "epochs through a small slab"; }
grep -E "^stats:|rdma: loader slab" "$work/big.txt" || true
[ "$(stat "$stats" $pid reg_mr)" = 1 ] || fail "small slab: not exactly one registration"
[ "$(stat "$stats" $pid max_qp_read_requests)" -gt 1 ] || fail "small slab: not pipelined"
line=$(grep -E "rdma: loader slab: peak [0-9.]+ of [0-9.]+ MiB in use; [0-9]+ wait\(s\) for room, \
[0-9]+ refused" "$work/big.txt" || true)
[ -n "$line" ] || fail "no slab summary line at destroy"
size=$(grep -oE "loader slab of [0-9.]+ MiB" "$work/big.txt" | grep -oE "[0-9.]+")
[ "$size" = "10.0" ] || fail "small slab: $size MiB, wanted 10.0 (twice a 16-chunk request)"
waits=$(sed -E 's/.* ([0-9]+) wait\(s\) for room, ([0-9]+) refused.*/\1 \2/' <<<"$line")
[ "$(awk '{ print $1 + $2 }' <<<"$waits")" -gt 0 ] ||
    fail "the small slab was never short of room (waits, refusals: $waits): nothing exercised"
[ "$fails" = "$before" ] && pass "4 connections through a 10 MiB slab: waits for room \
(waits, refused tries: $waits), no deadlock, every sample byte-exact"

# 3. The slab cannot be registered (a memlock limit below its size): auto keeps TCP with one
# line naming the fix, rdma fails clearly.
before=$fails
DSC_FAKEVERBS_MEMLOCK=1048576 "$CHECK" epoch --servers "$ADDR_A" --dataset rawds \
    --dir "$work/raw" --transport auto --expect-rdma 0 >"$work/memlock.txt" 2>&1 ||
    { cat "$work/memlock.txt"; fail "auto with a slab that cannot be registered"; }
n=$(grep -c "transport auto: RDMA unavailable (cannot register" "$work/memlock.txt" || true)
[ "$n" = 1 ] || fail "wanted one fallback line, got $n: $(cat "$work/memlock.txt")"
grep -E "cannot register" "$work/memlock.txt"
grep -qE "RLIMIT_MEMLOCK.*CAP_IPC_LOCK.*dscache doctor" "$work/memlock.txt" ||
    fail "the fallback line does not name RLIMIT_MEMLOCK, CAP_IPC_LOCK and dscache doctor"
DSC_FAKEVERBS_MEMLOCK=1048576 "$CHECK" create --servers "$ADDR_A" --dataset rawds \
    --transport rdma >"$work/memlock-rdma.txt" 2>&1 ||
    { cat "$work/memlock-rdma.txt"; fail "transport rdma with a slab that cannot be registered"; }
grep -qE "log ERROR: transport rdma: RDMA is unavailable here: cannot register .*RLIMIT_MEMLOCK" \
    "$work/memlock-rdma.txt" || fail "no clear error: $(cat "$work/memlock-rdma.txt")"
[ "$fails" = "$before" ] && pass "a slab that cannot be registered: auto uses TCP (one line with \
the fix), rdma fails clearly"
finish
