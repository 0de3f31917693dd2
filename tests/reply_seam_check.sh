#!/usr/bin/env bash
# The server's reply seam (server/net/reply.h): request dispatch (dispatch.c) and the TCP transport
# (tcp.c) know RDMA only through the reply tables. Fails when either includes rdma.h (or the verbs
# headers), names a function of rdma.c, or when tcp.c answers an RDMA opcode itself; and when
# rdma.c holds the no-verbs stand-ins again (they live in rdma_stub.c, chosen by CMake).
# usage: reply_seam_check.sh [SOURCE_ROOT]   (default: the tree this script is in)
set -euo pipefail
root=$(cd "${1:-$(dirname "$0")/..}" && pwd)
bad=0
fail() {
    echo "FAIL: $*"
    bad=$((bad + 1))
}
for f in server/net/dispatch.c server/net/tcp.c; do
    [ -f "$root/$f" ] || { fail "$f missing"; continue; }
    while IFS= read -r hit; do
        fail "$f:$hit: includes an RDMA header (use the reply tables of reply.h)"
    done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"(rdma|rdma_link|verbs)\.h"' \
        "$root/$f" | cut -d: -f1)
    while IFS= read -r hit; do
        fail "$f:${hit%%:*}: calls into rdma.c (${hit#*:}): go through srv->layer or reply->ops"
    done < <(grep -noE '\bdsc_{1,2}rdma_(srv_[a-z_]+|on_[a-z_]+|release|over_bound|reply_get|revoke|watch|unwatch|offered|layer)\b' \
        "$root/$f" || true)
done
if grep -nE '\bDSC_OP_RDMA_[A-Z_]+\b' "$root/server/net/tcp.c" >/dev/null; then
    fail "server/net/tcp.c names an RDMA opcode: the RDMA table (rdma.c) answers those"
fi
if [ -f "$root/server/net/rdma.c" ] &&
    [ "$(grep -cE '^int dsc_rdma_srv_create\(' "$root/server/net/rdma.c")" -gt 1 ]; then
    fail "server/net/rdma.c has a no-verbs branch: the stand-ins belong in server/net/rdma_stub.c"
fi
[ -f "$root/server/net/rdma_stub.c" ] || fail "server/net/rdma_stub.c missing (the no-verbs stand-ins)"
if [ "$bad" -gt 0 ]; then
    exit 1
fi
echo "ok: dispatch.c and tcp.c reach RDMA only through the reply tables ($root/server)"
