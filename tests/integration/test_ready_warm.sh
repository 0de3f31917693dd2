#!/usr/bin/env bash
# Readiness means warm, as the pods run it: servers on 127.0.0.1 share a members file that lists
# every started server, ready or not (what the peers Service with publishNotReadyAddresses
# gives them). A new member is not ready before the shards it owns are resident: its /readyz
# says why, its owned/resident gauges differ, and it turns 200 only once they are equal. A
# member outside the list is not ready until --ready-timeout, whose expiry /readyz reports.
# Also: a second dscached on a port another one already serves exits with a clear error.
source "$(dirname "$0")/server_lib.sh"

make_dataset "$work/ds" rw 6000 lz4
shards=$(json_get "$(cat "$work/ds/manifest.json")" 'len(j["shards"])')
members=$work/members
readyz() { curl -s "http://$1/readyz" || true; }
code() { curl -s -o /dev/null -w '%{http_code}' "http://$1/readyz" || true; }

# 1. The first member: not ready while the list is unknown, then ready once warm.
START_NO_WAIT=1 start_server a --data "$work/ds" --memory 64M --warm --replicas 1 \
    --members-file "$members"
r=$(readyz "$HTTP_a")
[[ "$r" == "not ready: member list not known yet" ]] && pass "a, no list yet: $r" || fail "a: '$r'"
echo "$ADDR_a" >"$members.tmp" && mv "$members.tmp" "$members"
until_ok 30 curl -sf "http://$HTTP_a/readyz" || fail "a never ready"
r=$(readyz "$HTTP_a")
[[ "$r" == "ready: $shards of $shards owned shards resident, 1 members" ]] && pass "a: $r" \
    || fail "a ready: '$r'"

# 2. A new member with slow loads (250 ms a shard): listed at once (as with not-ready addresses
# published), owns about half the shards, and is not ready before they are resident.
export DSC_TEST_LOAD_DELAY_MS=250
START_NO_WAIT=1 start_server b --data "$work/ds" --memory 64M --warm --replicas 1 \
    --members-file "$members" --io-threads 1
unset DSC_TEST_LOAD_DELAY_MS
r=$(readyz "$HTTP_b")
[[ "$r" == "not ready: "*"$ADDR_b is not in the member list (1 members)"* || "$r" == "not ready: warming up"* ]] \
    && pass "b before the list names it: $r" || fail "b: '$r'"
printf '%s\n%s\n' "$ADDR_a" "$ADDR_b" >"$members.tmp" && mv "$members.tmp" "$members"
seen_partial=0 became_ready=0
for _ in $(seq 1 300); do
    owned=$(metric "$HTTP_b" dscache_owned_shards)
    resident=$(metric "$HTTP_b" dscache_owned_resident_shards)
    c=$(code "$HTTP_b")
    if [ "$c" = 200 ]; then
        became_ready=1
        break
    fi
    if [ "$owned" != missing ] && [ "$owned" -gt 0 ] && [ "$resident" -lt "$owned" ]; then
        [ $seen_partial = 1 ] || pass "b not ready with $resident of $owned owned shards resident: $(readyz "$HTTP_b")"
        seen_partial=1
    fi
    sleep 0.1
done
[ $seen_partial = 1 ] || fail "never saw b owning shards it had not loaded"
[ $became_ready = 1 ] || fail "b never became ready: $(readyz "$HTTP_b")"
owned=$(metric "$HTTP_b" dscache_owned_shards)
resident=$(metric "$HTTP_b" dscache_owned_resident_shards)
[ "$owned" -gt 0 ] && [ "$owned" -lt "$shards" ] && [ "$resident" = "$owned" ] \
    && pass "b ready with its $owned of $shards shards resident" || fail "b ready: owned $owned resident $resident"
[ "$(metric "$HTTP_b" dscache_ready)" = 1 ] && [ "$(metric "$HTTP_b" dscache_cluster_members)" = 2 ] \
    && pass "b metrics: ready 1, 2 members" || fail "b metrics"
[ "$(code "$HTTP_a")" = 200 ] && pass "a stayed ready while the view changed" || fail "a not ready"

# 3. Outside the list with --ready-timeout 1: ready after a second, saying what was missing.
START_NO_WAIT=1 start_server c --data "$work/ds" --memory 64M --warm --replicas 1 \
    --members-file "$members" --ready-timeout 1
[ "$(code "$HTTP_c")" = 503 ] && pass "c outside the list: 503" || fail "c: $(readyz "$HTTP_c")"
until_ok 10 curl -sf "http://$HTTP_c/readyz" || fail "c: --ready-timeout did not expire"
r=$(readyz "$HTTP_c")
[[ "$r" == "ready: --ready-timeout 1s expired; $ADDR_c is not in the member list (2 members)" ]] \
    && pass "c: $r" || fail "c after the time-out: '$r'"

# 4. A second dscached on a's port: refused with a clear message (no SO_REUSEPORT sharing).
rc=0
out=$("$SERVER" --data "$work/ds" --listen "$ADDR_a" --http off 2>&1) || rc=$?
[ $rc != 0 ] && [[ "$out" == *"cannot listen on $ADDR_a: the port is already in use"* ]] \
    && pass "second dscached on $ADDR_a: exit $rc" || fail "second dscached: rc $rc: $out"
for n in a b c; do stop_server "$n"; [ "$STOP_RC" = 0 ] || fail "server $n exit $STOP_RC"; done
finish
