#!/usr/bin/env bash
# Damaged copies fail over, and fail the loader only when nothing intact is left. Two dscached
# with --replicas 2 (members file: each holds a full copy), one of them serving a copy whose
# shard 1 is damaged in every chunk:
#   server path:  a flipped byte: that server answers CORRUPT, the loader reads the chunks from
#                 the other replica;
#   client path:  a silently damaged copy (the lz4 blocks decode to wrong bytes under correct
#                 stored checksums, and a manifest rewritten to match): beside an intact replica
#                 it is another dataset version, answered CHANGED, and the loader reads the chunks
#                 from the intact replica; served alone, the decoded-bytes check fails in the
#                 loader, which reads the fallback files;
# each run: every sample exactly once with the bytes of the intact files (cluster_check),
# checksum_failures and failovers > 0, a WARN naming server, shard and chunk. With a single
# damaged server: the fallback files serve the chunks; without fallback_path the loader fails
# with DSC_ECORRUPT / DSC_EDATASUM and a clear message; damaged fallback files alone give
# DSC_ECHUNKSUM.
set -euo pipefail
source "$(dirname "$0")/cluster_lib.sh"
[ -x "$DSC_BIN/shard_damage" ] || { echo "SKIP: $DSC_BIN/shard_damage not built"; exit 77; }

ds=cr
samples=8192
# 3 shards; shard 1 has 128 chunks (16 routing groups of 8), so both replicas get some of it.
"$DSC_BIN/dscache" ingest synthetic -o "$work/good" --name "$ds" --samples "$samples" \
    --field x:f32:32 --field y:i64 --compress lz4 --chunk-size 4K --shard-size 512K >/dev/null
cp -r "$work/good" "$work/flip"
cp -r "$work/good" "$work/silent"
n=$("$DSC_BIN/shard_damage" flip "$work/flip" 1)
m=$("$DSC_BIN/shard_damage" silent "$work/silent" 1)
pass "shard 1 damaged: $n chunks with a flipped byte, $m silently (valid stored checksums)"

# serve NAME DIR [MEMBERS_FILE]: dscached on port 0 serving DIR (clustered when a members file
# is given). Without peer warm-up (--peer-rate 0): a damaged server would otherwise load the
# intact replica's copy of shard 1 from its RAM (checked against the same manifest) and never
# answer CORRUPT, which is what this test is about.
serve() {
    local name=$1 dir=$2 cluster=()
    [ $# -ge 3 ] && cluster=(--replicas 2 --members-file "$3" --peer-rate 0)
    start_member "$name" --threads 1 --io-threads 1 --memory 32M --log-level warn --data "$dir" \
        "${cluster[@]}"
}
# pair NAME_A DIR_A NAME_B DIR_B MEMBERS: two clustered servers sharing a members file.
pair() {
    serve "$1" "$2" "$5"
    serve "$3" "$4" "$5"
    write_members "$5" "${ADDR[$1]}" "${ADDR[$3]}"
    for n in "$1" "$3"; do
        until_ok 15 has_members "${ADDR[$n]}" 2 || { echo "FAIL: $n did not read the members"; exit 1; }
    done
}
epoch() { # epoch NAME ARGS...: one epoch checked against the intact files
    local name=$1; shift
    "$DSC_BIN/cluster_check" epoch --dataset "$ds" --dir "$work/good" --ids "$work/ids.$name" \
        --window 1024 "$@" >"$work/$name.out" 2>"$work/$name.err"
}

# Server path: b answers CORRUPT for shard 1.
pair a "$work/good" b "$work/flip" "$work/members1"
if epoch corrupt --servers "file:$work/members1" --corrupt 1; then
    cat "$work/corrupt.out"
    check_exactly_once "$samples" 1 "$work/ids.corrupt" \
        && pass "CORRUPT answers: exactly once, bytes of the intact files" \
        || fail "CORRUPT answers: not exactly once"
    grep -q "warn: server ${ADDR[b]}: GET $ds shard 1 chunk [0-9]* (of [0-9]*): CORRUPT" \
        "$work/corrupt.err" && pass "WARN names server, shard and chunk" \
        || { cat "$work/corrupt.err"; fail "no WARN line for the CORRUPT answer"; }
    ! grep -q "error:" "$work/corrupt.err" || { cat "$work/corrupt.err"; fail "ERROR logged"; }
else
    cat "$work/corrupt.out" "$work/corrupt.err"
    fail "epoch with a CORRUPT replica"
fi

# Replica path: the silently damaged copy comes with a rewritten manifest (its file checksum),
# so beside the intact replica it is another dataset version (PROTOCOL.md, Dataset versions).
# The loader reads the manifest from the first member in address order: that one gets the
# intact files, the other the damaged copy, which then answers CHANGED, and the loader reads its
# chunks from the intact replica before any damaged byte arrives. (The decoded-bytes check
# itself is exercised by server f below.) Both start on empty directories and are filled once
# their ports, hence their order, are known.
mkdir -p "$work/pc" "$work/pd"
pair c "$work/pc" d "$work/pd" "$work/members2"
if [[ "${ADDR[c]}" < "${ADDR[d]}" ]]; then first=c second=d; else first=d second=c; fi
cp "$work/good"/* "$work/p$first/"
cp "$work/silent"/* "$work/p$second/"
kill -HUP "${PID[c]}" "${PID[d]}"
for n in c d; do
    until_ok 10 sh -c "'$DSC_BIN/srv_client' call '${ADDR[$n]}' LIST | grep -q '\"$ds\"'" \
        || fail "server $n does not list $ds after SIGHUP"
done
if epoch silent --servers "file:$work/members2"; then
    cat "$work/silent.out"
    check_exactly_once "$samples" 1 "$work/ids.silent" \
        && pass "replica with another manifest: exactly once, bytes of the intact files" \
        || fail "replica with another manifest: not exactly once"
    grep -Eq "failovers [1-9]" "$work/silent.out" &&
        grep -q "warn: server ${ADDR[$second]}: GET $ds shard [0-9]* chunk [0-9]* (of [0-9]*): CHANGED" \
            "$work/silent.err" && pass "WARN names the replica answering CHANGED; its chunks failed over" \
        || { cat "$work/silent.err"; fail "no CHANGED failover for the replica with another manifest"; }
else
    cat "$work/silent.out" "$work/silent.err"
    fail "epoch beside a replica with another manifest"
fi

# One damaged server: the fallback files serve what it cannot; without them, a clear error.
serve e "$work/flip"
serve f "$work/silent"
for srv in e f; do
    if epoch fb$srv --servers "${ADDR[$srv]}" --fallback "$work/good" --corrupt 1; then
        check_exactly_once "$samples" 1 "$work/ids.fb$srv" \
            && pass "server $srv damaged, fallback files intact: exactly once" \
            || fail "fallback after $srv: not exactly once"
    else
        cat "$work/fb$srv.out" "$work/fb$srv.err"
        fail "fallback after damaged server $srv"
    fi
done
expect_fail() { # expect_fail NAME ERROR ARGS...
    local name=$1 err=$2; shift 2
    if epoch "$name" --corrupt 1 --expect-error "$err" "$@"; then
        grep "error: loader failed: dataset $ds shard 1 " "$work/$name.err" | head -1
        grep -q "error: loader failed: dataset $ds shard 1 (shard-[0-9]*\.dsc) chunk [0-9]*: .*($err); read from .*, and no other replica.* is left.*Fixes: .*fallback_path" \
            "$work/$name.err" && [ "$(grep -c 'error: ' "$work/$name.err")" = 1 ] \
            && pass "$name: fails with $err and says why, in one error line" \
            || { cat "$work/$name.err"; fail "$name: no clear message"; }
    else
        cat "$work/$name.out" "$work/$name.err"
        fail "$name: expected $err after correct batches only"
    fi
}
expect_fail nofb-e DSC_ECORRUPT --servers "${ADDR[e]}"
expect_fail nofb-f DSC_EDATASUM --servers "${ADDR[f]}"
expect_fail files DSC_ECHUNKSUM --servers "" --fallback "$work/flip"

finish
