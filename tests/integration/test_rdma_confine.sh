#!/usr/bin/env bash
# Issue 20: RDMA READs confined to what was leased, through the test-only fake verbs library
# (which enforces type-2 memory windows as a NIC does). A hostile client written from
# proto/PROTOCOL.md (rdma_hostile confine), with a credential limited to dataset A: the leased
# chunk reads fine; a READ of dataset B's bytes, of A's next chunk (not leased), of a lease after
# its release, and under another connection's lease key each complete with a remote access error
# and fence that connection. A loader still reads every sample byte-exact over RDMA (its chunks
# each under their lease's window). On a device without memory windows (DSC_FAKEVERBS_MW=off)
# the server says so at start, refuses RDMA_CONNECT to the limited credential (which then loads
# over TCP) and still serves an unrestricted one over RDMA.
set -euo pipefail
source "$(dirname "$0")/server_lib.sh"
source "$(dirname "$0")/rdma_lib.sh"
HOSTILE=$DSC_BIN/rdma_hostile
[ -x "$HOSTILE" ] || { echo "SKIP: $HOSTILE not built"; exit 77; }

make_dataset "$work/a" dsa 3000 none
make_dataset "$work/b" dsb 3000 none
S_LIM=limited-secret-AAAAAAAAAAAAAAAA
S_ALL=everything-secret-BBBBBBBBBBBBBB
printf 'lim read %s dsa\nall read %s\n' "$S_LIM" "$S_ALL" >"$work/creds"
chmod 600 "$work/creds"
printf 'lim %s\n' "$S_LIM" >"$work/tok-lim"
printf 'all %s\n' "$S_ALL" >"$work/tok-all"
chmod 600 "$work/tok-lim" "$work/tok-all"
value() { local v; v=$(metric "$1" "$2"); [ "$v" = missing ] && v=0; echo "$v"; }

start_server C --data "$work/a" --data "$work/b" --auth-file "$work/creds" --rdma required \
    --rdma-lease-ttl-ms 60000
grep -q "READs confined to leased chunks" "$work/server-C.log" \
    && pass "the server confines READs with memory windows" || fail "no confinement line"
[ "$(value "$HTTP_C" dscache_rdma_windows)" = 1 ] || fail "dscache_rdma_windows is not 1"
if "$HOSTILE" confine --servers "$ADDR_C" --dataset dsa --other dsb --token "$work/tok-lim" \
    --admin-token "$work/tok-all" >"$work/confine.txt" 2>&1; then
    pass "B's bytes, unleased bytes, a released lease and another connection's key: refused"
else
    fail "rdma_hostile confine"
fi
cat "$work/confine.txt"
n=$(grep -c "connection fenced yes" "$work/confine.txt" || true)
[ "$n" = 4 ] && pass "each refused READ fenced its connection" || fail "$n of 4 fenced"
grep -q "IBV_EVENT_QP_ACCESS_ERR on the queue pair" "$work/server-C.log" \
    || fail "no WARN line about the access error"
# A loader with the limited credential: every sample of A byte-exact over RDMA, no fallback.
DSCACHE_TOKEN_FILE=$work/tok-lim "$CHECK" epoch --servers "$ADDR_C" --dataset dsa \
    --dir "$work/a" --transport rdma --epochs 1 --expect-rdma 1 >"$work/epoch.txt" 2>&1 \
    && pass "a loader limited to A reads A over RDMA, byte-exact" \
    || { cat "$work/epoch.txt"; fail "loader epoch over RDMA"; }
grep "^stats:" "$work/epoch.txt" || true
until_ok 5 bash -c "[ \"\$(curl -sf http://$HTTP_C/metrics | awk '\$1==\"dscache_rdma_leases\"{print \$2}')\" = 0 ]" \
    || fail "leases left after the loader"
[ "$(value "$HTTP_C" dscache_rdma_windows_bound)" = 0 ] || fail "windows still bound"
binds=$(value "$HTTP_C" 'dscache_rdma_window_ops_total{op="bind"}')
invs=$(value "$HTTP_C" 'dscache_rdma_window_ops_total{op="invalidate"}')
bs=$(value "$HTTP_C" 'dscache_rdma_window_seconds_total{op="bind"}')
is=$(value "$HTTP_C" 'dscache_rdma_window_seconds_total{op="invalidate"}')
echo "windows: $binds binds in $bs s, $invs invalidations in $is s (fakeverbs)"
[ "$binds" -gt 0 ] && [ "$invs" -gt 0 ] || fail "no window was bound and invalidated"
stop_server C
[ "$STOP_RC" = 0 ] || fail "server C exited $STOP_RC"
! grep -E "Sanitizer|runtime error" "$work/server-C.log" || fail "sanitizer report in server C"

# The doctor says whether this device can confine READs.
"$CLI" doctor 2>&1 | grep -q "memory windows *ok *type 2" && pass "doctor: memory windows ok" \
    || fail "doctor does not report the memory windows"
DSC_FAKEVERBS_MW=off "$CLI" doctor 2>&1 | grep -q "memory windows *WARN .*cannot confine RDMA READs" \
    && pass "doctor: no memory windows is a WARN with the consequence" \
    || fail "doctor does not warn about missing memory windows"

# A device without memory windows: stated at start; RDMA refused to the limited credential only.
DSC_FAKEVERBS_MW=off start_server N --data "$work/a" --data "$work/b" --auth-file "$work/creds" \
    --rdma required
grep -q "no memory windows: fakeverbs0 reports no type-2 memory windows" "$work/server-N.log" \
    && pass "no windows: stated at start" || fail "no line about missing windows"
[ "$(value "$HTTP_N" dscache_rdma_windows)" = 0 ] || fail "dscache_rdma_windows is not 0"
DSCACHE_TOKEN_FILE=$work/tok-lim "$CHECK" epoch --servers "$ADDR_N" --dataset dsa \
    --dir "$work/a" --transport auto --epochs 1 --expect-rdma 0 >"$work/lim.txt" 2>&1 \
    || { cat "$work/lim.txt"; fail "limited loader without windows"; }
grep -q "cannot be confined to leased chunks" "$work/lim.txt" \
    && pass "no windows: the limited credential loads over TCP, told why" \
    || { cat "$work/lim.txt"; fail "no reason for the TCP fallback"; }
[ "$(value "$HTTP_N" dscache_rdma_connect_refused_limited_total)" -ge 1 ] \
    || fail "refusal not counted"
DSCACHE_TOKEN_FILE=$work/tok-all "$CHECK" epoch --servers "$ADDR_N" --dataset dsb \
    --dir "$work/b" --transport rdma --epochs 1 --expect-rdma 1 >"$work/all.txt" 2>&1 \
    && pass "no windows: an unrestricted credential still reads over RDMA" \
    || { cat "$work/all.txt"; fail "unrestricted loader without windows"; }
stop_server N
[ "$STOP_RC" = 0 ] || fail "server N exited $STOP_RC"
finish
