#!/usr/bin/env bash
# Issue 20: revocation at once, through the test-only fake verbs library. A SIGHUP that removes a
# credential closes its TCP connections (one UNAUTHORIZED frame, then the close) and destroys its
# RDMA queue pairs within 1 s, releasing their leases, even on connections that send nothing; a
# SIGHUP that narrows a credential from datasets A and B to A invalidates its RDMA leases on B at
# once (the next READ of them is a remote access error) and its GETs of B answer NOT_FOUND.
set -euo pipefail
source "$(dirname "$0")/server_lib.sh"
source "$(dirname "$0")/rdma_lib.sh"
HOSTILE=$DSC_BIN/rdma_hostile
AUTH=$DSC_BIN/auth_check
for exe in "$HOSTILE" "$AUTH"; do [ -x "$exe" ] || { echo "SKIP: $exe not built"; exit 77; }; done

make_dataset "$work/a" dsa 3000 none
make_dataset "$work/b" dsb 3000 none
S_GONE=removed-secret-CCCCCCCCCCCCCCCC
S_NAR=narrowed-secret-DDDDDDDDDDDDDDD
S_ADM=admin-secret-EEEEEEEEEEEEEEEEEE
printf 'gone read %s\nnar read %s dsa dsb\nops admin %s\n' "$S_GONE" "$S_NAR" "$S_ADM" \
    >"$work/creds"
chmod 600 "$work/creds"
printf 'gone %s\n' "$S_GONE" >"$work/tok-gone"
printf 'nar %s\n' "$S_NAR" >"$work/tok-nar"
chmod 600 "$work/tok-gone" "$work/tok-nar"
value() { local v; v=$(metric "$1" "$2"); [ "$v" = missing ] && v=0; echo "$v"; }

# The idle time-out (300 s) and the lease TTL (60 s) are far away: only revocation can end them.
start_server R --data "$work/a" --data "$work/b" --auth-file "$work/creds" --rdma required \
    --rdma-lease-ttl-ms 60000
rm -f "$work/go"
"$HOSTILE" revoke --servers "$ADDR_R" --dataset dsa --other dsb --token "$work/tok-gone" \
    --other-token "$work/tok-nar" --go-file "$work/go" >"$work/revoke.txt" 2>&1 &
client=$!
pids+=("$client")
until_ok 10 grep -q '^ready' "$work/revoke.txt" || { cat "$work/revoke.txt"; fail "client not ready"; }
[ "$(value "$HTTP_R" dscache_rdma_leases)" = 2 ] || fail "two leases expected before the reload"
printf 'nar read %s dsa\nops admin %s\n' "$S_NAR" "$S_ADM" >"$work/creds.new"
chmod 600 "$work/creds.new"
mv "$work/creds.new" "$work/creds"
kill -HUP "$PID_R"
touch "$work/go"
rc=0
wait "$client" || rc=$?
cat "$work/revoke.txt"
[ "$rc" = 0 ] && pass "removed: TCP and RDMA ended within 1 s; narrowed: its B lease ended" \
    || fail "rdma_hostile revoke (exit $rc)"
until_ok 5 bash -c "[ \"\$(curl -sf http://$HTTP_R/metrics | awk '\$1==\"dscache_rdma_leases\"{print \$2}')\" = 0 ]" \
    || fail "leases left after the revocation"
[ "$(value "$HTTP_R" dscache_rdma_leases_revoked_total)" -ge 2 ] || fail "revoked leases not counted"
[ "$(value "$HTTP_R" dscache_rdma_connections)" = 0 ] || fail "queue pairs left"
grep -q 'credential \\"gone\\" removed or changed by a reload: connection closed\|credential "gone" removed or changed by a reload: connection closed' \
    "$work/server-R.log" && pass "the closing is logged" || fail "no log line for the closing"
# The narrowed credential over TCP: A still served, B now absent.
expect 0 '^OK [0-9]+ bytes' "$AUTH" op "$ADDR_R" "$work/tok-nar" GET dsa 0
expect 0 '^ERR ENOTFOUND' "$AUTH" op "$ADDR_R" "$work/tok-nar" GET dsb 0
expect 0 '^CONNECT_ERR EUNAUTH' "$AUTH" op "$ADDR_R" "$work/tok-gone" LIST
stop_server R
[ "$STOP_RC" = 0 ] || fail "server R exited $STOP_RC"
! grep -E "Sanitizer|runtime error" "$work/server-R.log" || fail "sanitizer report in server R"
finish
