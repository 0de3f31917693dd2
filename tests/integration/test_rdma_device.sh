#!/usr/bin/env bash
# RDMA transport on a real device: where /sys/class/infiniband lists one, dscached --rdma required
# and a loader with transport rdma (the system's libibverbs) run an epoch byte-exact over RDMA
# READ on 127.0.0.1 (the device's own loopback), and dscache doctor --server passes its probe
# READ. Elsewhere it skips, saying why.
set -euo pipefail
source "$(dirname "$0")/server_lib.sh"
CHECK=$DSC_BIN/rdma_check
[ -x "$CHECK" ] || { echo "SKIP: $CHECK not built"; exit 77; }
devices=$(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' ' || true)
if [ -z "$devices" ]; then
    echo "SKIP: no RDMA device on this host (/sys/class/infiniband lists none; the test kernels" \
        "have no CONFIG_INFINIBAND, so not even Soft-RoCE): the fake-library tests" \
        "(test_rdma_loader.sh) cover the transport here"
    exit 77
fi
if [ "${DSC_HAVE_VERBS_H:-ON}" != ON ]; then
    echo "SKIP: built without rdma-core headers: the transport is not compiled in"
    exit 77
fi
unset DSC_IBVERBS_LIB DSC_FAKEVERBS_FAULTS DSCACHE_TRANSPORT
echo "RDMA devices: $devices"
"$CLI" doctor || echo "note: dscache doctor reports a problem (above); the checks below say more"
make_dataset "$work/lz4" lz4ds 20000 lz4
start_server A --data "$work/lz4" --rdma required --memory 256M
grep "rdma: on" "$work/server-A.log"
"$CHECK" epoch --servers "$ADDR_A" --dataset lz4ds --dir "$work/lz4" --transport rdma \
    --epochs 2 --expect-rdma 1 | grep -vE "^log DEBUG" || fail "epoch over the device"
"$CLI" doctor --server "$ADDR_A" | tee "$work/doctor.txt" || true
grep -qE "probe READ +ok" "$work/doctor.txt" || fail "doctor --server: probe READ not ok"
pass "real device: epoch byte-exact over RDMA READ; doctor probe READ ok"
finish
