#!/usr/bin/env bash
# dscache doctor (RDMA preflight): on a machine without an RDMA device it explains that in plain
# words and exits 3; through DSC_IBVERBS_LIB it loads the test-only fake verbs library and sees
# its device, ACTIVE port, MTU and RoCE v2 GIDs with their networks (never the link-local one);
# a down port, no device, a missing or foreign library and a locked-memory limit below the bytes
# to pin each fail with their fix; usage errors exit 2.
set -euo pipefail
DSC_BIN=${DSC_BIN:?DSC_BIN must point at the build bin directory}
CLI=$DSC_BIN/dscache
[ -x "$CLI" ] || { echo "SKIP: $CLI not built"; exit 77; }
source "$(dirname "$0")/base_lib.sh" # $work, fail, expect CODE PATTERN CMD..., finish
unset DSC_IBVERBS_LIB DSC_FAKEVERBS_MTU DSC_FAKEVERBS_PORT DSC_FAKEVERBS_DEVICES
# expect_fix CODE PATTERN FIX CMD...: like expect, and the line after the one matching PATTERN
# is the fix, matching FIX.
expect_fix() {
    local code=$1 pattern=$2 fix=$3; shift 3
    local out rc=0
    out=$("$@" 2>&1) || rc=$?
    if [ "$rc" -ne "$code" ]; then
        fail "exit $rc (wanted $code): $*: $out"
    elif ! grep -A1 -E -- "$pattern" <<<"$out" | tail -n 1 | grep -qE -- "^ +fix: $fix"; then
        fail "output lacks /$pattern/ followed by fix /$fix/: $*: $out"
    fi
}

expect 0 "3  RDMA is unavailable here \(a check failed\); TCP will be used" "$CLI" doctor --help
expect 2 "--pin-bytes: 'lots' is not a size" "$CLI" doctor --pin-bytes lots
expect 2 "--server: 'nohost' is not HOST:PORT" "$CLI" doctor --server nohost
expect 2 "unexpected argument" "$CLI" doctor extra

# This machine, with the system's verbs library.
if [ "${DSC_HAVE_VERBS_H:-ON}" != ON ]; then
    expect 3 "no RDMA support: rdma-core's headers .* missing at build time" "$CLI" doctor
    echo "note: built without infiniband/verbs.h: the device checks are not compiled in"
    finish
    exit 0
fi
if [ -n "$(ls /sys/class/infiniband 2>/dev/null)" ]; then
    echo "note: this machine has RDMA devices ($(ls /sys/class/infiniband | tr '\n' ' ')):" \
        "the no-device case is not checked here"
    "$CLI" doctor || true
elif ldconfig -p >"$work/ldconfig.txt" 2>/dev/null && grep -q 'libibverbs.so.1 ' "$work/ldconfig.txt"; then
    expect_fix 3 "devices +FAIL +none: the kernel exposes no RDMA device" \
        "use a host with an RDMA NIC" "$CLI" doctor
    expect 3 "verdict: RDMA unavailable here \(1 check failed\); dscache uses TCP" "$CLI" doctor
    expect 3 "verbs library +ok +/.*libibverbs" "$CLI" doctor
else
    expect 3 "libibverbs.so.1 could not be loaded .*install it" "$CLI" doctor
fi
# A library that is not there, and one that is not a verbs library.
DSC_IBVERBS_LIB=$work/none.so expect 3 "DSC_IBVERBS_LIB=.*none.so could not be loaded" \
    "$CLI" doctor
DSC_IBVERBS_LIB=libc.so.6 expect 3 "lacks ibv_get_device_list" "$CLI" doctor

fake=${DSC_FAKEVERBS_LIB:-}
if [ -z "$fake" ] || [ ! -f "$fake" ]; then
    echo "SKIP: libfakeverbs not built (no rdma-core headers): only the checks above ran"
    finish
    exit 77
fi
export DSC_IBVERBS_LIB=$fake
out=$("$CLI" doctor --pin-bytes 4K) || fail "doctor on fakeverbs: exit $?"
echo "$out"
for pattern in "verbs library +ok +.*libfakeverbs.so" "devices +ok +1: fakeverbs0" \
    "fakeverbs0 port 1 +ok +state ACTIVE, link layer Ethernet" \
    "active MTU +ok +4096 bytes" \
    "RoCE v2 GID +ok +index 2: ::ffff:127\.[0-9]+\.[0-9]+\.[0-9]+, on lo 127\.0\.0\.0/8" \
    "RoCE v2 GID +info +index 1: ::ffff:10\.254\.[0-9]+\.[0-9]+, on no local interface" \
    "RoCE v2 GIDs +ok +2 routable, 1 on a local interface \(link-local GIDs skipped\)" \
    "max_mr_size 1.0 TiB" "fork safety +ok +not needed" "locked memory +ok" \
    "verdict: RDMA preflight passed"; do
    grep -qE -- "$pattern" <<<"$out" || fail "doctor on fakeverbs lacks /$pattern/"
done
grep -q "fe80" <<<"$out" && fail "doctor chose or printed a link-local GID"
# --server with nothing listening: the probe READ fails with its reason (the real probe against a
# server is in test_rdma_loader.sh).
expect_fix 3 "probe READ +FAIL +cannot reach 127.0.0.1:1 over TCP" "check the server runs" \
    "$CLI" doctor --pin-bytes 4K --server 127.0.0.1:1
# The GID encodes the doctor's own pid: three bytes of 127.X.Y.Z.
grep -qE "::ffff:127\.0\.0\.0," <<<"$out" && fail "GID does not encode a pid"

DSC_FAKEVERBS_MTU=1024 expect_fix 0 "active MTU +WARN +1024 bytes" "raise the netdev MTU" \
    "$CLI" doctor --pin-bytes 4K
DSC_FAKEVERBS_PORT=down expect_fix 3 "port 1 +FAIL +state DOWN" "bring the link up" \
    "$CLI" doctor --pin-bytes 4K
DSC_FAKEVERBS_DEVICES=0 expect 3 "devices +FAIL +none" "$CLI" doctor --pin-bytes 4K

# Locked memory below the bytes to pin, without CAP_IPC_LOCK (needs setpriv to drop it).
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null &&
    setpriv --bounding-set=-ipc_lock --inh-caps=-ipc_lock true 2>/dev/null; then
    (
        ulimit -l 1024
        expect_fix 3 "locked memory +FAIL +RLIMIT_MEMLOCK 1.0 MiB < 64.0 MiB to pin and no CAP_IPC_LOCK" \
            "raise the limit: docker run --ulimit memlock=-1" setpriv --bounding-set=-ipc_lock --inh-caps=-ipc_lock "$CLI" doctor --pin-bytes 64M
        [ "$fails" -eq 0 ] || exit 1
    ) || fail "memlock check"
elif [ "$(id -u)" != 0 ] && [ "$(ulimit -l)" != unlimited ]; then
    limit_kb=$(ulimit -l)
    expect 3 "locked memory +FAIL" "$CLI" doctor --pin-bytes $(((limit_kb + 1) * 1024))
else
    echo "note: cannot drop CAP_IPC_LOCK here (no setpriv): the memlock failure is not checked"
fi
finish
