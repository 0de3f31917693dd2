#!/usr/bin/env bash
# "RDMA follows TCP" through the test-only fake verbs library, whose GID table lists a routable
# DECOY (::ffff:10.254.Y.Z, on no local network, READs to or from it fail) before the GID on
# 127.0.0.0/8: loader and server pick the GID on their TCP connection's subnet and say so once;
# dscache doctor lists each GID with its network, names the local address and GID for --server,
# and its probe READ works against a server with --auth-file when given the token (and fails
# clearly without it); DSC_RDMA_GID_INDEX at the decoy makes RDMA fail and auto fall back to TCP
# with the reason; a table with no GID on the subnet falls back with a reason naming the address
# and the GIDs seen, and the doctor FAILs with the fix.
set -euo pipefail
source "$(dirname "$0")/server_lib.sh"
source "$(dirname "$0")/rdma_lib.sh"
GID_LO='::ffff:127\.[0-9]+\.[0-9]+\.[0-9]+'
GID_DECOY='::ffff:10\.254\.[0-9]+\.[0-9]+'

make_dataset "$work/raw" rawds 3000 none
run_check() { "$CHECK" "$@" >"$work/out.txt" 2>&1 || { cat "$work/out.txt"; fail "rdma_check $*"; }; }
# passed WHAT: "ok: WHAT" when the section added no failure.
seen_fails=0
passed() {
    if [ "$fails" = "$seen_fails" ]; then pass "$@"; fi
    seen_fails=$fails
}

# 1. Both sides choose the GID on 127.0.0.0/8, never the decoy listed before it.
start_server A --data "$work/raw" --rdma required
grep -q "rdma: on: device fakeverbs0 port 1 (RoCE, MTU 4096, GID per connection: the one on its \
TCP subnet)" "$work/server-A.log" || fail "no registration line: $(grep rdma: "$work/server-A.log")"
run_check epoch --servers "$ADDR_A" --dataset rawds --dir "$work/raw" --transport rdma \
    --expect-rdma 1 --epochs 2
grep "transport rdma" "$work/out.txt" || true
n=$(grep -cE "log INFO: server $ADDR_A: transport rdma \(device fakeverbs0, path MTU 4096, lease \
TTL [0-9]+ ms, GID index 2 $GID_LO, on the subnet of 127\.0\.0\.1/8 \(lo\)\)" "$work/out.txt" || true)
[ "$n" = 1 ] || fail "loader: wanted one transport line naming GID 2 on 127.0.0.1/8, got $n"
grep "connections to" "$work/server-A.log" || true
n=$(grep -cE "info  rdma: connections to 127\.0\.0\.1 use GID index 2 $GID_LO, on the subnet of \
127\.0\.0\.1/8 \(lo\)" "$work/server-A.log" || true)
[ "$n" = 1 ] || fail "server: wanted one line naming GID 2 on 127.0.0.1/8, got $n"
grep -E "$GID_DECOY" "$work/out.txt" "$work/server-A.log" && fail "the decoy GID was used"
passed "loader and server use the GID on 127.0.0.0/8 (not the decoy listed first); one line each"

# 2. The doctor: each GID with its network; for --server the local address and its GID.
out=$("$CLI" doctor --pin-bytes 4K) || fail "doctor: exit $?: $out"
grep "RoCE v2 GID" <<<"$out" || true
for pattern in "RoCE v2 GID +info +index 1: $GID_DECOY, on no local interface" \
    "RoCE v2 GID +ok +index 2: $GID_LO, on lo 127\.0\.0\.0/8" \
    "RoCE v2 GIDs +ok +2 routable, 1 on a local interface \(link-local GIDs skipped\)"; do
    grep -qE -- "$pattern" <<<"$out" || fail "doctor lacks /$pattern/: $out"
done
out=$("$CLI" doctor --pin-bytes 4K --server "$ADDR_A") || fail "doctor --server: exit $?: $out"
grep -E "TCP path|GID for it|probe READ" <<<"$out" || true
grep -qE "TCP path +ok +to $ADDR_A leaves from 127\.0\.0\.1/8 \(lo\)" <<<"$out" ||
    fail "doctor --server: no local address: $out"
grep -qE "GID for it +ok +GID index 2 $GID_LO, on the subnet of 127\.0\.0\.1/8 \(lo\)" <<<"$out" ||
    fail "doctor --server: no GID on 127.0.0.0/8: $out"
grep -qE "probe READ +ok +4096 bytes READ from $ADDR_A over fakeverbs0 \(GID index 2 $GID_LO" \
    <<<"$out" || fail "doctor --server: no probe READ from GID 2: $out"
# The GID line comes before the probe.
[ "$(grep -nE "GID for it" <<<"$out" | cut -d: -f1)" -lt \
    "$(grep -nE "probe READ" <<<"$out" | cut -d: -f1)" ] || fail "GID line after the probe"
passed "doctor: GIDs with their networks; --server names 127.0.0.1/8 and GID 2, then READs"

# 3. A server with --auth-file: the probe authenticates with --auth-file (or DSCACHE_TOKEN_FILE),
# and without a token fails saying so, with the fix.
SECRET=rdma-gid-secret-0123456789abcdef
printf 'trainer read %s\n' "$SECRET" >"$work/creds"
printf 'trainer %s\n' "$SECRET" >"$work/token"
printf 'trainer wrong-secret-0123456789abcd\n' >"$work/token-wrong"
chmod 600 "$work/creds" "$work/token" "$work/token-wrong"
start_server S --data "$work/raw" --rdma required --auth-file "$work/creds"
rc=0
out=$("$CLI" doctor --pin-bytes 4K --server "$ADDR_S" 2>&1) || rc=$?
grep -E "probe READ|fix:" <<<"$out" | tail -3 || true
[ "$rc" = 3 ] || fail "doctor against an --auth-file server without a token: exit $rc: $out"
grep -qE "probe READ +FAIL +the server refused RDMA_CONNECT: unauthorised: authentication \
required" <<<"$out" || fail "no clear refusal without a token: $out"
grep -A1 -E "probe READ +FAIL" <<<"$out" | grep -qE "fix: the server authenticates: give its \
token with --auth-file FILE" || fail "no --auth-file fix: $out"
out=$("$CLI" doctor --pin-bytes 4K --server "$ADDR_S" --auth-file "$work/token") ||
    fail "doctor --auth-file against an --auth-file server: exit $?: $out"
grep -E "credential|probe READ" <<<"$out" || true
grep -qE "credential +info +authenticating as trainer \($work/token\)" <<<"$out" ||
    fail "no credential line: $out"
grep -qE "probe READ +ok +4096 bytes READ from $ADDR_S over fakeverbs0" <<<"$out" ||
    fail "no probe READ with --auth-file: $out"
out=$(DSCACHE_TOKEN_FILE=$work/token "$CLI" doctor --pin-bytes 4K --server "$ADDR_S") ||
    fail "doctor with DSCACHE_TOKEN_FILE: exit $?: $out"
grep -qE "authenticating as trainer \(\\\$DSCACHE_TOKEN_FILE\)" <<<"$out" ||
    fail "DSCACHE_TOKEN_FILE not named: $out"
grep -qE "probe READ +ok" <<<"$out" || fail "no probe READ with DSCACHE_TOKEN_FILE: $out"
expect_fail_fix() { # CODE PATTERN FIX CMD...
    local code=$1 pattern=$2 fix=$3; shift 3
    local o r=0
    o=$("$@" 2>&1) || r=$?
    [ "$r" = "$code" ] || { fail "exit $r (wanted $code): $*: $o"; return; }
    grep -A1 -E -- "$pattern" <<<"$o" | tail -n 1 | grep -qE -- "fix: $fix" ||
        fail "lacks /$pattern/ + fix /$fix/: $o"
}
expect_fail_fix 3 "probe READ +FAIL +unauthorised" "the server's --auth-file must list this NAME" \
    "$CLI" doctor --pin-bytes 4K --server "$ADDR_S" --auth-file "$work/token-wrong"
expect_fail_fix 3 "credential +FAIL +token file $work/none: No such file" "give a readable token" \
    "$CLI" doctor --pin-bytes 4K --server "$ADDR_S" --auth-file "$work/none"
passed "doctor probe: works against an --auth-file server with the token, fails clearly without"

# 4. DSC_RDMA_GID_INDEX at the decoy (the old "first routable" choice): the probe READ fails,
# auto falls back to TCP with the reason, byte-exact; the doctor warns.
DSC_RDMA_GID_INDEX=1 run_check epoch --servers "$ADDR_A" --dataset rawds --dir "$work/raw" \
    --transport auto --expect-rdma 0 --timeout-ms 2000
grep -E "transport|GID" "$work/out.txt" | grep -v DEBUG || true
grep -qE "log WARN: server $ADDR_A: RDMA from GID index 1 $GID_DECOY, from DSC_RDMA_GID_INDEX, \
NOT on the subnet of 127\.0\.0\.1/8 \(lo\): READs may fail" "$work/out.txt" ||
    fail "no WARN for the forced off-subnet GID: $(cat "$work/out.txt")"
grep -qE "log INFO: server $ADDR_A: transport tcp \(RDMA: the probe READ failed \(transport retry \
counter exceeded\) from GID index 1 $GID_DECOY, from DSC_RDMA_GID_INDEX, NOT on the subnet of \
127\.0\.0\.1/8 \(lo\)" "$work/out.txt" || fail "no fallback line with the reason: $(cat "$work/out.txt")"
grep -qE "^stats: .*rdma_fallbacks [1-9]" "$work/out.txt" || fail "no fallback counted"
rc=0
out=$(DSC_RDMA_GID_INDEX=1 "$CLI" doctor --pin-bytes 4K --server "$ADDR_A" 2>&1) || rc=$?
grep -E "GID for it|probe READ" <<<"$out" || true
[ "$rc" = 3 ] || fail "doctor with the decoy forced: exit $rc"
grep -qE "GID for it +WARN +GID index 1 $GID_DECOY, from DSC_RDMA_GID_INDEX, NOT on the subnet" \
    <<<"$out" || fail "doctor: no WARN for the forced decoy: $out"
grep -qE "probe READ +FAIL +the probe READ failed \(transport retry counter exceeded\)" <<<"$out" ||
    fail "doctor: the probe READ from the decoy did not fail: $out"
# ... on the server side too: its QPs send from the decoy, the client falls back.
DSC_RDMA_GID_INDEX=1 start_server D --data "$work/raw" --rdma required
grep -qE "rdma: on: .*GID index 1 $GID_DECOY from DSC_RDMA_GID_INDEX" "$work/server-D.log" ||
    fail "server D: forced GID not in the rdma: on line: $(grep rdma: "$work/server-D.log")"
run_check epoch --servers "$ADDR_D" --dataset rawds --dir "$work/raw" --transport auto \
    --expect-rdma 0 --timeout-ms 2000
grep -qE "transport tcp \(RDMA: the probe READ failed \(transport retry counter exceeded\)" \
    "$work/out.txt" || fail "no fallback against a server on the decoy: $(cat "$work/out.txt")"
grep -qE "warn  rdma: connections to 127\.0\.0\.1 use GID index 1 $GID_DECOY, from \
DSC_RDMA_GID_INDEX, NOT on the subnet of 127\.0\.0\.1/8 \(lo\): READs may fail" \
    "$work/server-D.log" || fail "server D: no WARN: $(grep rdma: "$work/server-D.log")"
# A forced link-local index is refused at once.
DSC_RDMA_GID_INDEX=0 run_check epoch --servers "$ADDR_A" --dataset rawds --dir "$work/raw" \
    --transport auto --expect-rdma 0
grep -qE "transport auto: RDMA unavailable \(DSC_RDMA_GID_INDEX=0 names no routable GID of RDMA \
device fakeverbs0 port 1 \(empty or link-local\)\)" "$work/out.txt" ||
    fail "forced link-local GID: $(cat "$work/out.txt")"
passed "DSC_RDMA_GID_INDEX at the decoy: READs fail, auto falls back to TCP naming the GID"

# 5. No GID on the TCP subnet (the 127.0.0.0/8 GID removed, the decoy left): the loader falls back
# naming the address and every GID seen; the server refuses RDMA_CONNECT saying the same; the
# doctor FAILs with the fix.
DSC_FAKEVERBS_GID_LOOPBACK=off run_check epoch --servers "$ADDR_A" --dataset rawds \
    --dir "$work/raw" --transport auto --expect-rdma 0
grep "transport tcp" "$work/out.txt" || true
grep -qE "transport tcp \(RDMA: RDMA device fakeverbs0 port 1: no RoCE v2 GID is 127\.0\.0\.1 or \
on its subnet 127\.0\.0\.1/8 \(the TCP connection's local address\); GIDs seen: 0 fe80::[0-9a-f:]+ \
\(RoCE v2, link-local\), 1 $GID_DECOY \(RoCE v2\)\)" "$work/out.txt" ||
    fail "no fallback naming the address and GIDs: $(cat "$work/out.txt")"
rc=0
out=$(DSC_FAKEVERBS_GID_LOOPBACK=off "$CLI" doctor --pin-bytes 4K --server "$ADDR_A" 2>&1) || rc=$?
grep -E "RoCE v2 GIDs|GID for it|fix:" <<<"$out" || true
[ "$rc" = 3 ] || fail "doctor with no GID on the subnet: exit $rc"
grep -qE "RoCE v2 GIDs +WARN +1 routable, none on a local interface" <<<"$out" ||
    fail "doctor: no WARN for GIDs off every local network: $out"
grep -A1 -E "GID for it +FAIL +RDMA device fakeverbs0 port 1: no RoCE v2 GID is 127\.0\.0\.1" \
    <<<"$out" | grep -qE "fix: assign an IP on the RDMA netdev in the same subnet as \
127\.0\.0\.1/8" || fail "doctor: no FAIL with the fix: $out"
DSC_FAKEVERBS_GID_LOOPBACK=off start_server N --data "$work/raw" --rdma required
run_check epoch --servers "$ADDR_N" --dataset rawds --dir "$work/raw" --transport auto \
    --expect-rdma 0
grep -qE "transport tcp \(RDMA: the server refused RDMA_CONNECT: server unavailable: RDMA device \
fakeverbs0 port 1: no RoCE v2 GID is 127\.0\.0\.1" "$work/out.txt" ||
    fail "no server-side refusal: $(cat "$work/out.txt")"
grep -q "warn  rdma: RDMA_CONNECT from 127.0.0.1 refused: RDMA device fakeverbs0 port 1: no RoCE v2 GID" \
    "$work/server-N.log" || fail "server N logged no refusal"
passed "no GID on the TCP subnet: TCP with the address and GIDs named; doctor FAILs with the fix"
finish
