#!/usr/bin/env bash
# Straggler benchmark (not a test): paced trainer ranks (dscache bench --compute-ms) read from
# dscached servers on 127.0.0.1 (--replicas 2, --warm) while one server straggles, each run
# twice in the same session, hedging off (DSCACHE_HEDGE=0: the loader waits for the server, as
# before) and on. Prints a markdown table: per run the max and mean over ranks of the stall, and
# the stragglers line of the ranks (slow marks, hedges, late bytes dropped as a share of those
# received).
#   pause   the server is SIGSTOPped for PAUSE_S at 3 s, then every PAUSE_EVERY s
#   netem   its outgoing packets are delayed NETEM_DELAY (tc netem on lo, matched by its port)
#           for PAUSE_S at the same times; needs root and the sch_netem module, else skipped
#           with the reason
#   spike   netem's stand-in where the kernel lacks sch_netem: the servers are started again
#           with the first one reached through tests/bench/spike_proxy.py (a TCP relay; the
#           server --advertise-s the relay's address, so loaders and peers alike go through
#           it), which for PAUSE_S at the same times delays its traffic both ways by spikes of
#           SPIKE_MIN_MS..SPIKE_MAX_MS, a new one drawn every SPIKE_STEP_MS; its reference row
#           "none via relay" runs on the same servers, the relay in the path, no spike
#   none    no straggler (the reference)
# Two configurations by default: the issue's (3 servers, 1 rank) and 4 servers x 4 ranks.
# usage: DSC_BIN=build/bin bash tests/bench/bench_straggler.sh
#   env: CONFIGS ("3x1 4x4": SERVERSxRANKS) RUN_S (12) PAUSE_S (1.5) PAUSE_EVERY (4.5)
#        COMPUTE_MS (4) BATCH (128) SAMPLES (65536) NETEM_DELAY (200ms)
#        SCENARIOS (none pause netem spike) SPIKE_MIN_MS (50) SPIKE_MAX_MS (300) SPIKE_STEP_MS (250)
set -euo pipefail
DSC_BIN=${DSC_BIN:?DSC_BIN must point at the build bin directory}
CONFIGS=${CONFIGS:-3x1 4x4}
RUN_S=${RUN_S:-12}
PAUSE_S=${PAUSE_S:-1.5}
PAUSE_EVERY=${PAUSE_EVERY:-4.5}
COMPUTE_MS=${COMPUTE_MS:-4}
BATCH=${BATCH:-128}
SAMPLES=${SAMPLES:-65536}
NETEM_DELAY=${NETEM_DELAY:-200ms}
SCENARIOS=${SCENARIOS:-none pause netem spike}
SPIKE_MIN_MS=${SPIKE_MIN_MS:-50}
SPIKE_MAX_MS=${SPIKE_MAX_MS:-300}
SPIKE_STEP_MS=${SPIKE_STEP_MS:-250}
here=$(cd "$(dirname "$0")" && pwd)
proxy=0 # 1 while the servers of the spike rows run, the first behind the relay

work=$(mktemp -d /tmp/dsc-straggler.XXXXXX)
pids=()
netem_on=0
cleanup() {
    for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [ "$netem_on" = 1 ] && tc qdisc del dev lo root 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

"$DSC_BIN/dscache" ingest synthetic -o "$work/ds" --name st --samples "$SAMPLES" \
    --field x:f32:256 --field y:i64 --chunk-size 64K --shard-size 1M >/dev/null

netem_reason=""
if [ "$(id -u)" -ne 0 ]; then
    netem_reason="needs root"
elif ! tc qdisc add dev lo root handle 1: prio 2>/dev/null; then
    netem_reason="tc cannot add a qdisc on lo"
else
    if ! tc qdisc add dev lo parent 1:3 handle 30: netem delay 0ms 2>/dev/null; then
        netem_reason="tc netem is unavailable (no sch_netem module in this kernel)"
    fi
    tc qdisc del dev lo root 2>/dev/null || true
fi

# start_servers N: N dscached on one members file; sets ADDRS, SPIDS (and PROXY_PID: the first
# server behind spike_proxy.py when the spike scenario runs).
start_servers() {
    local n=$1 advertise=()
    SPIDS=()
    ADDRS=()
    PROXY_PID=""
    rm -f "$work/members" "$work"/*.port
    if [ "$proxy" = 1 ]; then
        /usr/bin/python3 "$here/spike_proxy.py" "$work/proxy.port" "$work/1.port" \
            "$SPIKE_MIN_MS" "$SPIKE_MAX_MS" "$SPIKE_STEP_MS" 2>"$work/proxy.log" &
        PROXY_PID=$!
        pids+=("$!")
        for _ in $(seq 100); do [ -s "$work/proxy.port" ] && break; sleep 0.05; done
        advertise=(--advertise "127.0.0.1:$(cat "$work/proxy.port")")
    fi
    for i in $(seq 1 "$n"); do
        local adv=()
        [ "$i" = 1 ] && adv=("${advertise[@]}")
        "$DSC_BIN/dscached" --listen 127.0.0.1:0 --http off --port-file "$work/$i.port" \
            --threads 1 --io-threads 2 --memory 256M --log-level error --data "$work/ds" --warm \
            --replicas 2 --members-file "$work/members" "${adv[@]}" >"$work/server-$i.log" 2>&1 &
        SPIDS+=("$!")
        pids+=("$!")
    done
    for i in $(seq 1 "$n"); do
        for _ in $(seq 100); do [ -s "$work/$i.port" ] && break; sleep 0.05; done
        if [ "$i" = 1 ] && [ "$proxy" = 1 ]; then
            ADDRS+=("127.0.0.1:$(cat "$work/proxy.port")")
        else
            ADDRS+=("127.0.0.1:$(cat "$work/$i.port")")
        fi
    done
    printf '%s\n' "${ADDRS[@]}" >"$work/members.tmp"
    mv "$work/members.tmp" "$work/members"
    sleep 4 # the servers read the file (each second) and warm their shards
}

stop_servers() {
    for p in "${SPIDS[@]}" $PROXY_PID; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
    for p in "${SPIDS[@]}" $PROXY_PID; do wait "$p" 2>/dev/null || true; done
}

# straggle SCENARIO PID PORT: at 3 s, then every PAUSE_EVERY s (while a whole episode fits
# before the last second), the server straggles for PAUSE_S.
straggle() {
    local scenario=$1 pid=$2 port=$3 at=3
    sleep "$at"
    while awk -v a="$at" -v p="$PAUSE_S" -v r="$RUN_S" 'BEGIN { exit !(a + p < r - 1) }'; do
        case $scenario in
        pause) kill -STOP "$pid" ;;
        spike) kill -USR1 "$PROXY_PID" ;;
        netem)
            tc qdisc add dev lo root handle 1: prio
            tc qdisc add dev lo parent 1:3 handle 30: netem delay "$NETEM_DELAY"
            tc filter add dev lo parent 1:0 protocol ip u32 match ip sport "$port" 0xffff flowid 1:3
            netem_on=1
            ;;
        esac
        sleep "$PAUSE_S"
        case $scenario in
        pause) kill -CONT "$pid" ;;
        spike) kill -USR2 "$PROXY_PID" ;;
        netem) tc qdisc del dev lo root; netem_on=0 ;;
        esac
        sleep "$(awk -v e="$PAUSE_EVERY" -v p="$PAUSE_S" 'BEGIN { print e - p }')"
        at=$(awk -v a="$at" -v e="$PAUSE_EVERY" 'BEGIN { print a + e }')
    done
}

# run SCENARIO HEDGE RANKS: one row of the table.
run() {
    local scenario=$1 hedge=$2 ranks=$3 rpids=() r
    for r in $(seq 0 $((ranks - 1))); do
        DSCACHE_HEDGE=$hedge "$DSC_BIN/dscache" bench --servers "file:$work/members" --dataset st \
            --batch-size "$BATCH" --compute-ms "$COMPUTE_MS" --cache 8M --shuffle-window 1024 \
            --seconds "$RUN_S" --rank "$r" --world-size "$ranks" >"$work/rank-$r.out" 2>&1 &
        rpids+=("$!")
    done
    local spid=""
    if [ "$scenario" != none ] && [ "$scenario" != "none via relay" ]; then
        straggle "$scenario" "${SPIDS[0]}" "${ADDRS[0]##*:}" &
        spid=$!
    fi
    for p in "${rpids[@]}"; do wait "$p" || { cat "$work"/rank-*.out; exit 1; }; done
    [ -n "$spid" ] && wait "$spid"
    /usr/bin/python3 - "$scenario" "$hedge" "$work"/rank-*.out <<'EOF'
import re, sys
scenario, hedge, files = sys.argv[1], sys.argv[2], sys.argv[3:]
stalls, marks, hedges, won, dropped, denied = [], 0, 0, 0, [], 0
for f in files:
    text = open(f).read()
    stalls.append(float(re.search(r"^stall: ([0-9.]+)%", text, re.M).group(1)))
    m = re.search(r"^stragglers: (\d+) slow marks, (\d+) requests hedged \((\d+) won, (\d+) "
                  r"denied.*\(([0-9.]+)% of received\)", text, re.M)
    if m:
        marks += int(m.group(1)); hedges += int(m.group(2)); won += int(m.group(3))
        denied += int(m.group(4)); dropped.append(float(m.group(5)))
print("| %s | %s | %.1f%% | %.1f%% | %d | %d (%d won, %d denied) | %s |" % (
    scenario, "on" if hedge == "1" else "off", max(stalls), sum(stalls) / len(stalls), marks,
    hedges, won, denied, "%.2f%%" % max(dropped) if dropped else "-"))
EOF
}

for config in $CONFIGS; do
    servers=${config%x*}
    ranks=${config#*x}
    echo
    echo "### $servers servers (--replicas 2), $ranks rank(s), batch $BATCH, compute $COMPUTE_MS ms, ${RUN_S} s; straggler: ${PAUSE_S} s every ${PAUSE_EVERY} s from 3 s; spike rows: ${SPIKE_MIN_MS}-${SPIKE_MAX_MS} ms delays, a new one every ${SPIKE_STEP_MS} ms, the first server behind spike_proxy.py"
    echo
    echo "| straggler | hedging | max stall over ranks | mean stall | slow marks | hedged requests | late bytes dropped (max over ranks) |"
    echo "|---|---|---|---|---|---|---|"
    proxy=0
    start_servers "$servers"
    for scenario in $SCENARIOS; do
        if [ "$scenario" = netem ] && [ -n "$netem_reason" ]; then
            echo "| netem $NETEM_DELAY | - | skipped: $netem_reason | | | | |"
            continue
        fi
        [ "$scenario" = spike ] && continue
        for hedge in 0 1; do run "$scenario" "$hedge" "$ranks"; done
    done
    stop_servers
    case " $SCENARIOS " in
    *" spike "*)
        # Servers started again, the first behind the relay: its reference, then its spikes.
        proxy=1
        start_servers "$servers"
        for scenario in "none via relay" spike; do
            for hedge in 0 1; do run "$scenario" "$hedge" "$ranks"; done
        done
        stop_servers
        ;;
    esac
done
