#!/usr/bin/env bash
# RDMA benchmark (not a test): loader throughput over RDMA READ vs TCP against one dscached on
# 127.0.0.1, in the same run (ratio against the TCP reference), printed as a markdown table.
#  - With an RDMA device (/sys/class/infiniband lists one): the system's libibverbs.
#  - Without one that part is skipped (its reason printed), and the same comparison runs through
#    the test-only fake verbs library, labelled "correctness smoke test, not a performance
#    figure": its READs are memcpy by a helper thread behind a UNIX socket.
# usage: DSC_BIN=build/bin [DSC_FAKEVERBS_LIB=build/lib/libfakeverbs.so] bash tests/bench/bench_rdma.sh
#   env: SAMPLES (60000) EPOCHS (3)
set -euo pipefail
here=$(dirname "$0")
source "$here/../integration/server_lib.sh"
CHECK=$DSC_BIN/rdma_check
[ -x "$CHECK" ] || { echo "SKIP: $CHECK not built"; exit 77; }
SAMPLES=${SAMPLES:-60000}
EPOCHS=${EPOCHS:-3}
unset DSCACHE_TRANSPORT DSC_FAKEVERBS_FAULTS

"$CLI" ingest synthetic -o "$work/ds" --name benchds --samples "$SAMPLES" --field x:f32:256 \
    --field y:i64 --compress none --shard-size 4M --chunk-size 256K >/dev/null

# run LABEL: TCP then RDMA loaders against one server; prints a table row each.
run() {
    local label=$1
    start_server "$label" --data "$work/ds" --rdma required --memory 1G --warm
    local addr_var="ADDR_$label" tcp rdma
    for t in tcp rdma; do
        "$CHECK" epoch --servers "${!addr_var}" --dataset benchds --dir "$work/ds" \
            --transport "$t" --epochs "$EPOCHS" --batch 256 \
            --expect-rdma "$([ $t = rdma ] && echo 1 || echo 0)" >"$work/$label-$t.txt" 2>&1 ||
            { cat "$work/$label-$t.txt"; fail "$label $t"; }
        local mbs
        mbs=$(awk '/^throughput:/ { print $2 }' "$work/$label-$t.txt")
        printf -v "$t" %s "$mbs"
    done
    stop_server "$label"
    echo "| $label | $tcp | $rdma | $(awk -v a="$rdma" -v b="$tcp" 'BEGIN { printf "%.2f", a / b }') |"
}

echo "Loader throughput, $SAMPLES samples x 1032 bytes, $EPOCHS epochs, one server on 127.0.0.1"
echo "(machine: $(nproc) cores; $(uname -r))"
echo
echo "| verbs library | TCP MB/s | RDMA MB/s | RDMA / TCP |"
echo "|---|---|---|---|"
devices=$(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' ' || true)
if [ -n "$devices" ]; then
    (unset DSC_IBVERBS_LIB; run device)
else
    echo "| real device | - | - | skipped: no RDMA device (/sys/class/infiniband lists none) |"
fi
fake=${DSC_FAKEVERBS_LIB:-}
if [ -n "$fake" ] && [ -f "$fake" ]; then
    DSC_IBVERBS_LIB=$fake run fakeverbs
    echo
    echo "fakeverbs row: correctness smoke test, not a performance figure (READs are memcpy by a"
    echo "helper thread over a UNIX socket; the RDMA path also copies from its slab)."
else
    echo "| fakeverbs | - | - | skipped: libfakeverbs not built |"
fi
finish
