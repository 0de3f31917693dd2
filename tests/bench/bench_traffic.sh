#!/usr/bin/env bash
# Network bytes per epoch / stored size, real processes against one dscached on 127.0.0.1 (not a
# test): for 1, 2, 4, 8 and 16 ranks (one `dscache bench` process per rank, all at once, batch
# 64), old (global) vs new (local) order, at default options and two shuffle windows, on a dataset
# of 40,000 3 KiB samples (lz4) and on one of 49 KB samples (default options). Three figures per
# cell, summed over ranks: "first" = bytes received from start to the end of epoch 1 (includes
# what the planner prefetched into epoch 2: at most one epoch ahead); "per epoch" = the largest,
# over epochs, of the bytes that epoch's steps caused to be fetched (stats.epoch_wire_bytes: a
# chunk counts for the epoch of the step that first needed it); "steady" = bytes received per
# epoch from the end of epoch 1 to the end of epoch EPOCHS (chunks a rank still holds when its
# next epoch needs them are not fetched again, so it can be below 1 where a rank's share fits its
# look-ahead). Then loader throughput at 1 and 8 ranks (samples/s summed over ranks, RUN_SECONDS
# per run).
# usage: DSC_BIN=build/bin bash tests/bench/bench_traffic.sh   env: EPOCHS (3) RUN_SECONDS (5)
#        SAMPLES (40000) BIG_SAMPLES (3000) WORLDS ("1 2 4 8 16") TABLES (1; 0: throughput only;
#        defaults: the default-options table on the small dataset only) THROUGHPUT (1)
set -euo pipefail
here=$(dirname "$0")
source "$here/../integration/loader_env.sh"
EPOCHS=${EPOCHS:-3}
RUN_S=${RUN_SECONDS:-5}
SAMPLES=${SAMPLES:-40000}
BIG_SAMPLES=${BIG_SAMPLES:-3000}
WORLDS=${WORLDS:-1 2 4 8 16}

make_ds small --samples "$SAMPLES" --field x:u8:3072 --compress lz4
if [ "${TABLES:-1}" = 1 ]; then
    make_ds big --samples "$BIG_SAMPLES" --field x:u8:49152 --compress lz4
    start_server --data "$work/small" --data "$work/big"
else
    start_server --data "$work/small"
fi
stored() { cat "$work/$1"/*.dsc | wc -c; }

# run DS W ORDER [bench options]: prints "first / per epoch / steady" ratios to the stored size.
run() {
    local ds=$1 w=$2 order=$3
    shift 3
    local out=() r
    for ((r = 0; r < w; r++)); do
        "$DSC_BIN/dscache" bench --server "127.0.0.1:$port" --dataset "$ds" --batch-size 64 \
            --epochs "$EPOCHS" --rank "$r" --world-size "$w" --order "$order" "$@" \
            >"$work/out.$r" &
        out+=($!)
    done
    local failed=0
    for r in "${out[@]}"; do wait "$r" || failed=1; done
    if [ "$failed" = 1 ]; then # a cell with a missing rank would read low
        echo "bench_traffic: a rank of $ds at $w ranks ($order) failed" >&2
        printf 'FAILED'
        rm -f "$work"/out.*
        return
    fi
    local size
    size=$(stored "$ds")
    cat "$work"/out.* | awk -v size="$size" -v e="$EPOCHS" '
        /at each epoch/ { split($0, a, ":"); n = split(a[3], v, " "); first += v[1];
                          steady += (v[n] - v[1]) / (e - 1); }
        /fetched for each epoch/ { split($0, a, ":"); n = split(a[2], v, " ");
                                   for (i = 1; i <= n; i++) attr[i] += v[i]; }
        END { m = 0; for (i in attr) if (attr[i] > m) m = attr[i];
              printf "%.2fx / %.2fx / %.2fx", first / size, m / size, steady / size }'
    rm -f "$work"/out.*
}

table() {
    local ds=$1 label=$2
    shift 2
    printf '| %s | order |' "$label"
    for w in $WORLDS; do printf ' %s ranks |' "$w"; done
    printf '\n|---|---|'
    for w in $WORLDS; do printf -- '---|'; done
    printf '\n'
    for order in global local; do
        printf '| first / per epoch / steady | %s |' "$order"
        for w in $WORLDS; do printf ' %s |' "$(run "$ds" "$w" "$order" "$@")"; done
        printf '\n'
    done
    echo
}

if [ "${TABLES:-1}" = defaults ]; then
echo "## Network bytes / stored size (first epoch / per epoch / steady state), batch 64"
echo
echo "dataset small: $SAMPLES x 3 KiB, lz4, stored $(stored small) bytes"
echo
table small "default options"
fi
if [ "${TABLES:-1}" = 1 ]; then
echo "## Network bytes / stored size (first epoch / per epoch / steady state), batch 64"
echo
echo "dataset small: $SAMPLES x 3 KiB, lz4, stored $(stored small) bytes"
echo
table small "default options"
table small "shuffle_window 64" --shuffle-window 64
table small "shuffle_window 1024" --shuffle-window 1024
echo
echo "dataset big: $BIG_SAMPLES x 48 KiB, lz4, stored $(stored big) bytes"
echo
table big "default options"
echo
fi
[ "${THROUGHPUT:-1}" = 1 ] || exit 0
echo "## Loader throughput (samples/s summed over ranks, ${RUN_S} s, batch 64, dataset small)"
echo
echo "| ranks | global | local |"
echo "|---|---|---|"
for w in 1 8; do
    printf '| %s |' "$w"
    for order in global local; do
        pids_run=()
        for ((r = 0; r < w; r++)); do
            "$DSC_BIN/dscache" bench --server "127.0.0.1:$port" --dataset small \
                --batch-size 64 --seconds "$RUN_S" --rank "$r" --world-size "$w" \
                --order "$order" >"$work/tp.$r" &
            pids_run+=($!)
        done
        for p in "${pids_run[@]}"; do wait "$p"; done
        printf ' %s |' "$(cat "$work"/tp.* | awk '/^throughput/ { s += $2 } END { printf "%.0f", s }')"
        rm -f "$work"/tp.*
    done
    printf '\n'
done
