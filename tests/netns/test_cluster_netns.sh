#!/usr/bin/env bash
# Six hosts in network namespaces on one bridge: dscached on h1..h4 (each on its own address,
# one members file, --replicas 2, --warm), trainer ranks 0 and 1 on h5 and h6. Mid-epoch the
# server on h1 is SIGKILLed and h2's link is cut: both ranks still get every sample exactly once
# per epoch with the bytes of the shard files, within a time bound, and count failovers.
set -euo pipefail
here=$(dirname "$0")
source "$here/lib.sh"
netns_check
source "$here/../integration/cluster_lib.sh"
cleanup_hooks+=(netns_cleanup)

netns_setup 6
ds=cn
samples=16384
"$DSC_BIN/dscache" ingest synthetic -o "$work/$ds" --name "$ds" --samples "$samples" \
    --field x:f32:64 --field y:i64 --compress lz4 --chunk-size 16K --shard-size 128K >/dev/null
members=$work/members
for i in 1 2 3 4; do echo "$(netns_ip "$i"):7070"; done >"$members"

for i in 1 2 3 4; do
    netns_exec "$i" "$DSC_BIN/dscached" --listen "$(netns_ip "$i"):7070" --http off --threads 1 \
        --io-threads 2 --memory 64M --log-level warn --data "$work/$ds" --warm --replicas 2 \
        --members-file "$members" >"$work/server-$i.log" 2>&1 &
    PID[$i]=$!
    pids+=("$!")
done
# Checked from a trainer host: the servers are reachable across the bridge.
DSC_RUN="netns_exec 5"
for i in 1 2 3 4; do
    addr=$(netns_ip "$i"):7070
    until_ok 20 has_members "$addr" 4 \
        || { cat "$work/server-$i.log"; echo "FAIL: server on h$i not reachable"; exit 1; }
    until_ok 20 warmed "$addr" "$ds" || { echo "FAIL: server on h$i did not warm"; exit 1; }
done
pass "4 servers on h1..h4 ($(netns_ip 1) .. $(netns_ip 4)), replicas 2, warmed"

trainer_host() { netns_exec $((5 + $1)) "${@:2}"; } # rank r runs on h5 + r
start_failover_ranks trainer_host
kill -KILL "${PID[1]}"
netns_link_down 2
echo "killed the server on h1, cut h2's link after $((SECONDS - ranks_start)) s"
check_failover_ranks "across hosts, h1's server killed, h2 (timed out) cut off" 45 \
    "$(netns_ip 2):7070"

finish
