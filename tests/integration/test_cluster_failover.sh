#!/usr/bin/env bash
# Four dscached on 127.0.0.1 sharing a members file (--replicas 2, --warm) and trainer ranks
# (cluster_check, bytes checked against the shard files):
#   placement: the owners the client computes are the shards each server warmed ('O');
#   balance:   a clean epoch reads only warmed owners (no misses) and from every server;
#   view:      a client given one seed address adopts the servers' 4-member view; a client on
#              the members file follows a change of the file mid-epoch;
#   failover:  two ranks, one server SIGKILLed and one SIGSTOPped mid-epoch: every sample
#              exactly once per epoch across the ranks, failovers counted, within a time bound;
#   fallback:  every server gone: the shard files are read directly.
set -euo pipefail
source "$(dirname "$0")/cluster_lib.sh"

ds=cl
samples=16384
"$DSC_BIN/dscache" ingest synthetic -o "$work/$ds" --name "$ds" --samples "$samples" \
    --field x:f32:64 --field y:i64 --compress lz4 --chunk-size 16K --shard-size 128K >/dev/null
shards=$(json_get "$(cat "$work/$ds/manifest.json")" 'len(j["shards"])')
members=$work/members

for n in a b c d; do
    start_member "$n" --threads 1 --io-threads 2 --memory 64M --log-level warn \
        --data "$work/$ds" --warm --replicas 2 --members-file "$members"
done
write_members "$members" "${ADDR[a]}" "${ADDR[b]}" "${ADDR[c]}" "${ADDR[d]}"
for n in a b c d; do
    until_ok 15 has_members "${ADDR[$n]}" 4 || { echo "FAIL: $n did not read the members"; exit 1; }
    until_ok 20 warmed "${ADDR[$n]}" "$ds" || { echo "FAIL: $n did not warm"; exit 1; }
done
pass "4 servers, $shards shards, replicas 2, warmed"

stat_of() { "$DSC_BIN/srv_client" call "$1" STAT "$ds"; }

# Placement: the client's owner lists (the loader's routing function over the same file) are
# exactly the servers that warmed each shard.
"$DSC_BIN/cluster_check" owners --servers "file:$members" --dataset "$ds" --shards "$shards" \
    --replicas 2 >"$work/owners"
if "$PY" - "$work/owners" "${ADDR[a]}" "$(stat_of "${ADDR[a]}")" "${ADDR[b]}" \
    "$(stat_of "${ADDR[b]}")" "${ADDR[c]}" "$(stat_of "${ADDR[c]}")" "${ADDR[d]}" \
    "$(stat_of "${ADDR[d]}")" <<'EOF'
import json, sys
owners = {}
for line in open(sys.argv[1]):
    shard, rest = line.split(":", 1)
    owners[int(shard.split()[1])] = rest.split()
maps = {sys.argv[i]: json.loads(sys.argv[i + 1])["datasets"][0]["shard_map"] for i in range(2, 10, 2)}
primaries = {}
for shard, own in owners.items():
    warmed = sorted(a for a, m in maps.items() if m[shard] == "O")
    assert warmed == sorted(own), "shard %d: client owners %s, warmed on %s" % (shard, own, warmed)
    primaries[own[0]] = primaries.get(own[0], 0) + 1
print("primaries per server:", sorted(primaries.values()))
EOF
then pass "client owner lists = servers that warmed each shard ('O' in shard_map)"
else fail "placement differs between client and servers"; fi

# Balance: a clean epoch hits only warmed owners (no misses anywhere) and reads evenly from all
# four (each between 1/8 and 3/8 of the bytes; an even share is 1/4).
declare -A BYTES0
for n in a b c d; do
    BYTES0[$n]=$(json_get "$(stat_of "${ADDR[$n]}")" 'j["datasets"][0]["bytes_served"]')
done
"$DSC_BIN/cluster_check" epoch --servers "file:$members" --dataset "$ds" --dir "$work/$ds" \
    --ids "$work/ids.clean" >"$work/clean.out" 2>"$work/clean.err" \
    || { cat "$work/clean.out" "$work/clean.err"; fail "clean epoch"; }
cat "$work/clean.out"
check_exactly_once "$samples" 1 "$work/ids.clean" && pass "clean epoch: exactly once" \
    || fail "clean epoch not exactly once"
[ "$(sum_stat failovers "$work/clean.out")" = 0 ] && pass "clean epoch: no failover" \
    || fail "failovers in a clean epoch"
declare -A SERVED
total=0
for n in a b c d; do
    st=$(stat_of "${ADDR[$n]}")
    misses=$(json_get "$st" 'j["datasets"][0]["misses"]')
    SERVED[$n]=$(($(json_get "$st" 'j["datasets"][0]["bytes_served"]') - BYTES0[$n]))
    total=$((total + SERVED[$n]))
    [ "$misses" = 0 ] || fail "server $n: $misses misses (a read of a shard it does not hold)"
done
spread=""
for n in a b c d; do
    spread="$spread $n=$((100 * SERVED[$n] / total))%"
    [ $((8 * SERVED[$n])) -ge "$total" ] && [ $((8 * SERVED[$n])) -le $((3 * total)) ] \
        || fail "server $n served ${SERVED[$n]} of $total bytes"
done
pass "reads spread over the replicas, all hits (bytes per server:$spread)"

# View: a client that knows one seed address adopts the servers' view.
"$DSC_BIN/cluster_check" epoch --servers "${ADDR[c]}" --dataset "$ds" --dir "$work/$ds" \
    --ids "$work/ids.seed" --slow-ms 2 >"$work/seed.out" 2>"$work/seed.err" \
    || { cat "$work/seed.out" "$work/seed.err"; fail "seed epoch"; }
check_exactly_once "$samples" 1 "$work/ids.seed" && pass "seed client: exactly once" \
    || fail "seed client not exactly once"
grep -q "agree on cluster view .* (4 members): adopting it" "$work/seed.err" \
    && grep -q "cluster view changed: 1 -> 4 servers (3 new)" "$work/seed.err" \
    && pass "seed client adopted the 4-member view from MEMBERS" \
    || { cat "$work/seed.err"; fail "seed client did not adopt the servers' view"; }

# View: the members file changes mid-epoch (d leaves): the client re-reads it.
"$DSC_BIN/cluster_check" epoch --servers "file:$members" --dataset "$ds" --dir "$work/$ds" \
    --ids "$work/ids.file" --slow-ms 8 --mark-at 20 --mark "$work/file.mark" \
    --window 512 --cache 262144 --inflight 131072 \
    >"$work/file.out" 2>"$work/file.err" &
rank_pid=$!
pids+=("$rank_pid")
until_ok 20 test -e "$work/file.mark" || fail "file-change rank made no progress"
write_members "$members" "${ADDR[a]}" "${ADDR[b]}" "${ADDR[c]}"
rc=0
wait "$rank_pid" || rc=$?
[ "$rc" = 0 ] || { cat "$work/file.out" "$work/file.err"; fail "file-change rank exited $rc"; }
check_exactly_once "$samples" 1 "$work/ids.file" && pass "members file changed mid-epoch: exactly once" \
    || fail "file change: not exactly once"
grep -q "cluster view changed: 4 -> 3 servers" "$work/file.err" \
    && pass "client followed the file: 4 -> 3 servers" \
    || { cat "$work/file.err"; fail "client did not follow the members file"; }
write_members "$members" "${ADDR[a]}" "${ADDR[b]}" "${ADDR[c]}" "${ADDR[d]}"
for n in a b c d; do
    until_ok 15 has_members "${ADDR[$n]}" 4 || fail "$n did not re-read the members"
done

# Failover: two ranks, two epochs; a is SIGKILLed and b SIGSTOPped once both ranks are going.
start_failover_ranks
kill -KILL "${PID[a]}"
kill -STOP "${PID[b]}"
echo "killed a (${ADDR[a]}), stopped b (${ADDR[b]}) after $((SECONDS - ranks_start)) s"
check_failover_ranks "a killed and b (the one timed out) stopped" 40 "${ADDR[b]}"

# Fallback: c and d gone too (b still stopped): the shard files are read directly.
kill -KILL "${PID[c]}" "${PID[d]}"
start=$SECONDS
"$DSC_BIN/cluster_check" epoch --servers "file:$members" --dataset "$ds" --dir "$work/$ds" \
    --timeout-ms 500 --fallback "$work/$ds" --ids "$work/ids.fb" >"$work/fb.out" \
    2>"$work/fb.err" || { cat "$work/fb.out"; tail -20 "$work/fb.err"; fail "fallback epoch"; }
cat "$work/fb.out"
check_exactly_once "$samples" 1 "$work/ids.fb" \
    && pass "every server down: fallback files, exactly once in $((SECONDS - start)) s" \
    || fail "fallback: not exactly once"

finish
