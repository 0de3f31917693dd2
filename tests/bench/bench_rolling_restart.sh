#!/usr/bin/env bash
# Rolling restart with peer warm-up: tests/integration/test_rolling_restart.sh (4 dscached,
# --replicas 2, each restarted in turn on its address during a paced `dscache bench`) with a
# longer job and a larger dataset, run with peer warm-up (the default) and without it
# (--peer-rate 0), ROUNDS times each. Prints per run the undisturbed and the restarted stall, the
# restarts' duration, and the bytes read from the backing storage and from peers during them;
# results go in docs/benchmarks.md.
# usage: tests/bench/bench_rolling_restart.sh [--rounds N] [--seconds S] [--samples N]
#        [--compute-ms MS] [--batch B] [--slowfs "SLOWFS OPTIONS"]
#        (defaults: 3 rounds, 25 s, 60000 samples, 4 ms, 64; --slowfs: the dataset read through
#        tests/slowfs, e.g. --slowfs "--latency-ms 20 --bandwidth 2M")
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export DSC_BIN=${DSC_BIN:-$here/../../build/bin}
rounds=3
export ROLL_SECONDS=25 ROLL_SAMPLES=60000 ROLL_COMPUTE_MS=4 ROLL_BATCH=64
while [ $# -gt 0 ]; do
    case $1 in
    --rounds) rounds=$2; shift ;;
    --seconds) ROLL_SECONDS=$2; shift ;;
    --samples) ROLL_SAMPLES=$2; shift ;;
    --compute-ms) ROLL_COMPUTE_MS=$2; shift ;;
    --batch) ROLL_BATCH=$2; shift ;;
    --slowfs) export ROLL_SLOWFS=$2; shift ;;
    *) echo "unknown option: $1" >&2; exit 2 ;;
    esac
    shift
done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
printf '%-14s %5s %12s %12s %10s %14s %14s %10s\n' "mode" "run" "stall base%" "stall roll%" \
    "restarts" "backing bytes" "peer bytes" "dataset"
for mode in peer off; do
    for r in $(seq "$rounds"); do
        : >"$out"
        args=""
        [ "$mode" = off ] && args="--peer-rate 0"
        ROLL_OUT=$out ROLL_SERVER_ARGS=$args bash "$here/../integration/test_rolling_restart.sh" \
            >"$out.log" 2>&1 || true
        get() { awk -v k="$1" '$1 == k { v = $2 } END { print v }' "$out"; }
        printf '%-14s %5s %12s %12s %9ss %14s %14s %10s\n' \
            "$([ "$mode" = peer ] && echo "peer warm-up" || echo "--peer-rate 0")" "$r" \
            "$(get stall_base)" "$(get stall_roll)" "$(get roll_seconds)" "$(get backing_bytes)" \
            "$(get peer_bytes)" "$(get dataset_bytes)"
    done
done
rm -f "$out.log"
