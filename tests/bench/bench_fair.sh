#!/usr/bin/env bash
# Fair service under saturation, the measurement (not a test): one paced job (dscache bench
# --compute-ms STEP_MS, one connection) beside one greedy job (no step, GREEDY_CONNS
# connections) on the same dscached. Prints the paced job's stall alone and beside the greedy
# job, and the greedy job's throughput alone and sharing, with the ratios (each figure from
# the same run of this script). With no scheduler between jobs in the server, this gives the
# "before" figures of issue 22.
# usage: DSC_BIN=build/bin bash tests/bench/bench_fair.sh
#        env: RUN_SECONDS (5) STEP_MS (5) GREEDY_CONNS (8) SAMPLES (20000) BATCH (64)
#        SERVER_THREADS (1: one event loop, so the server's send capacity is the limit sooner)
set -euo pipefail
here=$(dirname "$0")
source "$here/../integration/loader_env.sh"
RUN_S=${RUN_SECONDS:-5}
STEP_MS=${STEP_MS:-5}
CONNS=${GREEDY_CONNS:-8}
SAMPLES=${SAMPLES:-20000}
BATCH=${BATCH:-64}

make_ds fair --samples "$SAMPLES" --field x:u8:4096 --compress none
start_server --data "$work/fair" --memory 1G --warm --threads "${SERVER_THREADS:-1}"
sleep 1
bench() { "$DSC_BIN/dscache" bench --server "127.0.0.1:$port" --dataset fair --batch-size "$BATCH" \
    --seconds "$RUN_S" "$@"; }
stall_of() { sed -n 's/^stall: \([0-9.]*\)%.*/\1/p' "$1"; }
rate_of() { sed -n 's/^throughput: \([0-9]*\) samples.*/\1/p' "$1"; }

bench --compute-ms "$STEP_MS" --connections 1 --job paced >"$work/paced_alone.txt"
bench --connections "$CONNS" --prefetch 8 --job greedy >"$work/greedy_alone.txt"
bench --connections "$CONNS" --prefetch 8 --job greedy >"$work/greedy_shared.txt" &
g=$!
pids+=("$g")
sleep 0.5
bench --compute-ms "$STEP_MS" --connections 1 --job paced >"$work/paced_shared.txt"
wait "$g"

pa=$(stall_of "$work/paced_alone.txt"); ps=$(stall_of "$work/paced_shared.txt")
ga=$(rate_of "$work/greedy_alone.txt"); gs=$(rate_of "$work/greedy_shared.txt")
echo "paced job (step ${STEP_MS} ms, 1 connection): stall alone ${pa}%, beside the greedy job ${ps}%"
echo "greedy job (${CONNS} connections): ${ga} samples/s alone, ${gs} samples/s sharing" \
    "($(awk -v a="$ga" -v b="$gs" 'BEGIN { printf "%.2f", (a > 0 ? b / a : 0) }') of alone)"
