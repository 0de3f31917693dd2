#!/usr/bin/env bash
# Fair service under saturation, the measurement (not a test): one paced job (dscache bench
# --compute-ms STEP_MS, one connection) beside one greedy job (no step, GREEDY_CONNS
# connections) on a dscached whose send capacity is the limit (--send-rate SEND_RATE, below
# what the greedy job alone would take). In one run: the paced job alone, the greedy job alone,
# both together with --fair off (answers in arrival order: the "before") and with --fair on
# (deficit round-robin between jobs). Prints the paced job's stall and the greedy job's
# throughput in each, with the ratios against the runs alone.
# usage: DSC_BIN=build/bin bash tests/bench/bench_fair.sh
#        env: RUN_SECONDS (5) STEP_MS (5) GREEDY_CONNS (8) SAMPLES (60000) BATCH (64)
#        SEND_RATE (150M: the paced job needs BATCH x 4 KiB / STEP_MS = 52 MB/s, under half)
#        SERVER_THREADS (1) UNCAPPED (1: also the shared run without --send-rate)
#        CACHE (16M) GREEDY_CACHE (128M) SHUFFLE (1024): the loaders' --cache (the greedy
#        job's bounds what it keeps requested ahead) and --shuffle-window
#        NETNS (0; 1: the server in a network namespace behind a veth link shaped by tc tbf to
#        LINK_RATE (1200mbit), the loaders in another; the "uncapped" run is then the kernel
#        sharing the link per connection, and SEND_RATE defaults to 95% of the link, 136M)
set -euo pipefail
here=$(dirname "$0")
source "$here/../integration/loader_env.sh"
RUN_S=${RUN_SECONDS:-5}
STEP_MS=${STEP_MS:-5}
CONNS=${GREEDY_CONNS:-8}
SAMPLES=${SAMPLES:-60000}
BATCH=${BATCH:-64}
NETNS=${NETNS:-0}
LINK_RATE=${LINK_RATE:-1200mbit}
if [ "$NETNS" = 1 ]; then RATE=${SEND_RATE:-136M}; else RATE=${SEND_RATE:-150M}; fi
UNCAPPED=${UNCAPPED:-1}

make_ds fair --samples "$SAMPLES" --field x:u8:4096 --compress none
host=127.0.0.1
run_c() { "$@"; } # where the loaders run
if [ "$NETNS" = 1 ]; then
    source "$here/../netns/lib.sh"
    netns_check
    cleanup_hooks+=(netns_cleanup)
    netns_setup 2 78
    netns_shape 1 "$LINK_RATE"
    host=$(netns_ip 1)
    run_c() { netns_exec 2 "$@"; }
fi
# Client caches smaller than the dataset (240 MB), so that every epoch is read from the server.
bench() { run_c "$DSC_BIN/dscache" bench --server "$host:$port" --dataset fair --batch-size "$BATCH" \
    --seconds "$RUN_S" --shuffle-window "${SHUFFLE:-1024}" "$@"; }
paced() { bench --compute-ms "$STEP_MS" --connections 1 --cache "${CACHE:-16M}" --job paced; }
greedy() { bench --connections "$CONNS" --prefetch 8 --cache "${GREEDY_CACHE:-128M}" --job greedy; }
stall_of() { sed -n 's/^stall: \([0-9.]*\)%.*/\1/p' "$1"; }
rate_of() { sed -n 's/^throughput: \([0-9]*\) samples.*/\1/p' "$1"; }
serve() { # serve ARGS...: a fresh warm server (stops the previous one)
    if [ -n "${server_pid:-}" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
    if [ "$NETNS" = 1 ]; then
        local pf="$work/port.$RANDOM"
        netns_exec 1 "$DSC_BIN/dscached" --listen "$host:0" --http off --port-file "$pf" \
            --log-level error --data "$work/fair" --memory 1G --warm \
            --threads "${SERVER_THREADS:-1}" "$@" &
        server_pid=$!
        pids+=("$server_pid")
        for _ in $(seq 100); do [ -s "$pf" ] && break; sleep 0.05; done
        port=$(cat "$pf")
    else
        start_server --data "$work/fair" --memory 1G --warm --threads "${SERVER_THREADS:-1}" "$@"
    fi
    sleep 1
}
shared() { # shared TAG: greedy and paced together
    greedy >"$work/greedy_$1.txt" &
    local g=$!
    pids+=("$g")
    sleep 0.5
    paced >"$work/paced_$1.txt"
    wait "$g"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }

serve --send-rate "$RATE" --fair on
paced >"$work/paced_alone.txt"
greedy >"$work/greedy_alone.txt"
shared on
serve --send-rate "$RATE" --fair off
shared off
if [ "$UNCAPPED" = 1 ]; then
    serve
    shared uncapped
fi

pa=$(stall_of "$work/paced_alone.txt"); ga=$(rate_of "$work/greedy_alone.txt")
[ "$NETNS" = 1 ] && echo "server behind a veth link shaped to $LINK_RATE (tc tbf), loaders in another namespace"
echo "send rate $RATE, paced job step ${STEP_MS} ms x batch $BATCH (1 connection)," \
    "greedy job $CONNS connections, ${RUN_S} s each"
echo "paced alone:            stall ${pa}%"
echo "greedy alone:           $ga samples/s"
for t in off on uncapped; do
    [ -f "$work/paced_$t.txt" ] || continue
    ps=$(stall_of "$work/paced_$t.txt"); gs=$(rate_of "$work/greedy_$t.txt")
    pr=$(rate_of "$work/paced_$t.txt")
    case $t in off) what="sharing, --fair off:  " ;; on) what="sharing, --fair on:   " ;;
        *) what="sharing, no send cap: " ;; esac
    echo "$what  paced stall ${ps}% ($pr samples/s), greedy $gs samples/s" \
        "($(ratio "$gs" "$ga") of alone)"
done
