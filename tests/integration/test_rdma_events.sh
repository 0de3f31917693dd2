#!/usr/bin/env bash
# The RDMA server's device events and queue-pair set-up, through the test-only fake verbs library
# (DSC_IBVERBS_LIB): a READ that breaks the rkey or bounds checks makes the server's QP report
# IBV_EVENT_QP_ACCESS_ERR, and the server fences that connection at once (QP destroyed, holds
# dropped, connection closed; one WARN line naming the peer and the event) while a loader beside it
# keeps being served; clients that close right after such a READ are safe; PORT_ERR stops RDMA for
# new connections until PORT_ACTIVE, GID_CHANGE is logged; RDMA_CONNECT runs on the thread pool
# (the loop serves others meanwhile, a duplicate is refused, connections closed meanwhile only
# lose their QP). Every server stops cleanly: exit 0, no sanitizer report.
set -euo pipefail
source "$(dirname "$0")/server_lib.sh"
source "$(dirname "$0")/rdma_lib.sh"

make_dataset "$work/raw" rawds 3000 none
run_check() { "$CHECK" "$@" >"$work/out.txt" 2>&1 || { cat "$work/out.txt"; fail "rdma_check $*"; }; }
value() { local v; v=$(metric "$1" "$2"); [ "$v" = missing ] && v=0; echo "$v"; }
# value_is HTTP NAME WANT: the metric has that value now (for until_ok, which re-runs it).
value_is() { [ "$(value "$1" "$2")" = "$3" ]; }
# stop_clean NAME: SIGTERM, exit 0, and no sanitizer report in its log.
stop_clean() {
    stop_server "$1"
    [ "$STOP_RC" = 0 ] || fail "server $1 exited $STOP_RC"
    ! grep -E "Sanitizer|runtime error" "$work/server-$1.log" || fail "sanitizer report in server $1"
}

# 1. Bad READs (a wrong rkey, then an address past every region) beside a loader: each fences
# only its own connection, at once (the lease TTL is 60 s), and the loader is not disturbed.
ctl=$work/port.ctl
echo active >"$ctl"
DSC_FAKEVERBS_PORT_CTL=$ctl start_server Q --data "$work/raw" --rdma required \
    --rdma-lease-ttl-ms 60000
"$CHECK" epoch --servers "$ADDR_Q" --dataset rawds --dir "$work/raw" --transport rdma \
    --epochs 6 --expect-rdma 1 >"$work/beside.txt" 2>&1 &
beside=$!
for bad in rkey bounds; do
    run_check badread --servers "$ADDR_Q" --dataset rawds --bad $bad --ttl-ms 60000
    grep -E "bad READ|server sent|closed by" "$work/out.txt"
done
wait $beside || { cat "$work/beside.txt"; fail "the loader beside the bad READs"; }
grep "^stats:" "$work/beside.txt"
grep -qE "^stats: .* rdma_fallbacks 0 rdma_errors 0 " "$work/beside.txt" ||
    fail "the loader beside the bad READs saw RDMA errors"
n=$(grep -c "warn  rdma: IBV_EVENT_QP_ACCESS_ERR on the queue pair of 127.0.0.1 (QP [0-9]*)" \
    "$work/server-Q.log" || true)
[ "$n" = 2 ] || fail "wanted 2 WARN lines naming the peer and the event, got $n"
grep "IBV_EVENT_QP_ACCESS_ERR" "$work/server-Q.log" | head -2
[ "$(value "$HTTP_Q" dscache_rdma_qp_errors_total)" = 2 ] || fail "QP errors not counted"
[ "$(value "$HTTP_Q" dscache_rdma_leases_expired_total)" = 0 ] || fail "a lease expired instead"
until_ok 5 value_is "$HTTP_Q" dscache_rdma_connections 0 || fail "a fenced QP is left"
[ "$(value "$HTTP_Q" dscache_rdma_leases)" = 0 ] || fail "a fenced connection's hold is left"
pass "bad rkey / out-of-bounds READs: QP_ACCESS_ERR fences only that connection, at once"

# 2. Clients that close right after their bad READ: the event may arrive for a QP the close has
# already destroyed (or is destroying); nothing leaks, nothing crashes, the server serves on.
for i in 1 2 3 4 5; do
    run_check badread --servers "$ADDR_Q" --dataset rawds --bad rkey --close-now 1
done
until_ok 5 value_is "$HTTP_Q" dscache_rdma_connections 0 || fail "QPs left after closes"
until_ok 5 value_is "$HTTP_Q" dscache_rdma_leases 0 || fail "holds left after closes"
echo "QP errors fenced: $(value "$HTTP_Q" dscache_rdma_qp_errors_total) (2 + those of the 5" \
    "closing clients whose event came before their close); async events read:" \
    "$(value "$HTTP_Q" dscache_rdma_async_events_total)"
[ "$(value "$HTTP_Q" dscache_rdma_async_events_total)" -ge 2 ] || fail "no async event counted"
run_check epoch --servers "$ADDR_Q" --dataset rawds --dir "$work/raw" --transport rdma \
    --expect-rdma 1
pass "clients closing right after a bad READ: no QP or hold left, the server serves on"

# 3. PORT_ERR: new connections are refused RDMA (UNAVAILABLE, with the reason) and use TCP;
# GID_CHANGE is logged; PORT_ACTIVE offers RDMA again.
[ "$(value "$HTTP_Q" dscache_rdma_offered)" = 1 ] || fail "RDMA not offered before the port error"
echo down >"$ctl"
until_ok 5 grep -q "warn  rdma: IBV_EVENT_PORT_ERR on fakeverbs0 port 1" "$work/server-Q.log" ||
    fail "no PORT_ERR line"
[ "$(value "$HTTP_Q" dscache_rdma_offered)" = 0 ] || fail "RDMA still offered after PORT_ERR"
run_check epoch --servers "$ADDR_Q" --dataset rawds --dir "$work/raw" --transport auto \
    --expect-rdma 0
n=$(grep -c "transport tcp (RDMA: the server refused RDMA_CONNECT: .*IBV_EVENT_PORT_ERR on \
fakeverbs0 port 1" "$work/out.txt" || true)
[ "$n" = 1 ] || fail "wanted one fallback line naming the port error, got $n: $(cat "$work/out.txt")"
grep "transport tcp" "$work/out.txt"
echo "gid 1" >"$ctl"
until_ok 5 grep -q "info  rdma: IBV_EVENT_GID_CHANGE on fakeverbs0 port 1" "$work/server-Q.log" ||
    fail "no GID_CHANGE line"
echo active >"$ctl"
until_ok 5 grep -q "info  rdma: IBV_EVENT_PORT_ACTIVE on fakeverbs0 port 1: offering RDMA" \
    "$work/server-Q.log" || fail "no PORT_ACTIVE line"
[ "$(value "$HTTP_Q" dscache_rdma_offered)" = 1 ] || fail "RDMA not offered after PORT_ACTIVE"
run_check epoch --servers "$ADDR_Q" --dataset rawds --dir "$work/raw" --transport rdma \
    --expect-rdma 1
grep -E "rdma: IBV_EVENT_(PORT|GID)" "$work/server-Q.log"
pass "PORT_ERR refuses RDMA to new connections until PORT_ACTIVE; GID_CHANGE logged"
stop_clean Q

# 4. RDMA_CONNECT on the thread pool, against QP creation that takes 1.5 s (one loop): the loop
# answers another connection meanwhile, a second RDMA_CONNECT is refused at once, and three
# connections reset with theirs in flight are not answered: their QPs are destroyed.
DSC_FAKEVERBS_FAULTS=qp_delay_ms=1500 start_server S --data "$work/raw" --rdma required \
    --threads 1
run_check slowconnect --servers "$ADDR_S" --dataset rawds --delay-ms 1500 --closed 3
grep -E "answer|closed" "$work/out.txt"
until_ok 10 value_is "$HTTP_S" dscache_rdma_connect_failures_total 4 ||
    fail "wanted 4 connect failures (1 duplicate + 3 reset), got" \
        "$(value "$HTTP_S" dscache_rdma_connect_failures_total)"
[ "$(value "$HTTP_S" dscache_rdma_connects_total)" = 1 ] || fail "wanted exactly 1 RDMA connect"
until_ok 5 value_is "$HTTP_S" dscache_rdma_connections 0 || fail "a QP is left"
run_check epoch --servers "$ADDR_S" --dataset rawds --dir "$work/raw" --transport rdma \
    --expect-rdma 1 --timeout-ms 10000
pass "RDMA_CONNECT off the loop: others served meanwhile; reset connections lose only their QP"
stop_clean S
finish
