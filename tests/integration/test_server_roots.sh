#!/usr/bin/env bash
# --data-root: a dataset written into the root while the server runs (a hidden temporary
# directory renamed into place) is listed and served within 10 s with no SIGHUP; a directory
# without its manifest yet is ignored until it has one; a removed dataset stops being listed
# and served (NOT_FOUND) once gone. A dataset replaced in place: GETs naming the old version
# are answered CHANGED, and a running C loader stops with DSC_ECHANGED. Without inotify, the
# periodic rescan finds new datasets.
source "$(dirname "$0")/server_lib.sh"

root=$work/root
mkdir -p "$root"
make_dataset "$root/first" first 300 none
start_server a --data-root "$root" --memory 64M
$CLI list --server "$ADDR_a" | grep -q '^first ' && pass "start-up: first listed" \
    || fail "first not listed at start-up"

# Written under a hidden name, renamed into the root: served within 10 s, without SIGHUP.
make_dataset "$root/.second.tmp" second 300 lz4
mv "$root/.second.tmp" "$root/second"
t0=$(date +%s%N)
until_ok 10 sh -c "'$CLI' list --server '$ADDR_a' | grep -q '^second '" \
    || fail "second not listed within 10 s of its rename"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
out=$("$TOOL" get "$ADDR_a" second 0 0 1)
[ "${out%% *}" = OK ] && pass "renamed-in dataset listed after ${ms} ms and served: $out" \
    || fail "GET second: $out"

# A directory whose manifest is not there yet is ignored; once the manifest lands it is served.
make_dataset "$work/third-src" third 300 none
mkdir "$root/third"
cp "$work/third-src"/*.dsc "$root/third/"
sleep 1.5
$CLI list --server "$ADDR_a" | grep -q '^third ' && fail "third listed without a manifest"
pass "a directory without its manifest is not listed"
cp "$work/third-src/manifest.json" "$root/third/.m.tmp" && mv "$root/third/.m.tmp" "$root/third/manifest.json"
until_ok 10 sh -c "'$CLI' list --server '$ADDR_a' | grep -q '^third '" \
    && pass "third listed once its manifest is written" || fail "third not listed after its manifest"

# Removed: no longer listed, GETs answered NOT_FOUND.
rm -rf "$root/first"
until_ok 10 sh -c "! '$CLI' list --server '$ADDR_a' | grep -q '^first '" \
    && pass "removed dataset no longer listed" || fail "first still listed after rm -rf"
out=$("$TOOL" get "$ADDR_a" first 0 0 1)
[ "${out%% *}" = NOT_FOUND ] && pass "removed dataset: GET $out" || fail "GET first after removal: $out"
grep -q "dataset first removed" "$work/server-a.log" && pass "removal logged" || fail "no removal line"

# Replaced in place: a loader names the version it read (the MANIFEST answer's hash); after the
# swap its GETs are answered CHANGED (DSC_ECHANGED), never with the new version's chunks.
v1=$("$TOOL" call "$ADDR_a" VERSION second)
out=$(SRV_CLIENT_VERSION=$v1 "$TOOL" get "$ADDR_a" second 0 0 1)
[ "${out%% *}" = OK ] && pass "GET naming the served version $v1: $out" || fail "GET v1: $out"
make_dataset "$root/.second.new" second 600 none
mv "$root/second" "$root/.second.old" && mv "$root/.second.new" "$root/second"
until_ok 10 sh -c "[ \"\$('$TOOL' call '$ADDR_a' VERSION second)\" != '$v1' ]" \
    || fail "second's version did not change after the swap"
v2=$("$TOOL" call "$ADDR_a" VERSION second)
out=$(SRV_CLIENT_VERSION=$v1 "$TOOL" geterr "$ADDR_a" second 0 0 1)
case $out in
CHANGED*"version $v1"*"version $v2"*) pass "GET naming the old version after the swap: ${out:0:120}" ;;
*) fail "GET v1 after the swap: $out" ;;
esac
out=$(SRV_CLIENT_VERSION=$v2 "$TOOL" get "$ADDR_a" second 0 0 1)
[ "${out%% *}" = OK ] && pass "GET naming the new version $v2: $out" || fail "GET v2: $out"
"$TOOL" call "$ADDR_a" LIST | grep -q "\"version\":\"$v2\"" && pass "LIST shows version $v2" \
    || fail "LIST without version $v2"

# The C loader names the version it read: a dataset swapped under a running job stops it with
# DSC_ECHANGED (its client cache is kept small so that it keeps asking the server).
"$CLI" ingest synthetic -o "$root/swap" --name swap --samples 20000 --field x:u8:2048 \
    --compress none --shard-size 1M --chunk-size 64K >/dev/null
"$CLI" ingest synthetic -o "$root/.swap.new" --name swap --samples 20000 --field x:u8:2048 \
    --compress none --shard-size 1M --chunk-size 64K --seed 7 >/dev/null
until_ok 10 sh -c "'$CLI' list --server '$ADDR_a' | grep -q '^swap '" || fail "swap not listed"
bench_rc=0
"$CLI" bench --server "$ADDR_a" --dataset swap --seconds 8 --compute-ms 2 --cache 8M \
    >"$work/bench.out" 2>&1 &
bench=$!
pids+=("$bench")
sleep 2
mv "$root/swap" "$root/.swap.old" && mv "$root/.swap.new" "$root/swap"
wait "$bench" || bench_rc=$?
if [ "$bench_rc" != 0 ] && grep -q "DSC_ECHANGED" "$work/bench.out"; then
    pass "loader on the old version stopped: $(grep -m1 ECHANGED "$work/bench.out")"
else
    fail "loader across the swap: rc $bench_rc: $(tail -3 "$work/bench.out")"
fi
grep -q "SIGHUP" "$work/server-a.log" && fail "a SIGHUP was logged"
stop_server a
[ "$STOP_RC" = 0 ] || fail "server exit $STOP_RC"

# Where inotify sees nothing (a network file system written from another machine; simulated by
# DSC_TEST_NO_INOTIFY=1), the periodic rescan (--data-root-interval) picks a dataset up.
root2=$work/root2
mkdir -p "$root2"
DSC_TEST_NO_INOTIFY=1 start_server b --data-root "$root2" --data-root-interval 1 --memory 16M
grep -q "inotify unavailable" "$work/server-b.log" && pass "without inotify: WARN at start" \
    || fail "no inotify WARN"
make_dataset "$root2/late" late 300 none
until_ok 5 sh -c "'$CLI' list --server '$ADDR_b' | grep -q '^late '" \
    && pass "without inotify: the periodic rescan serves a new dataset" \
    || fail "late not listed by the periodic rescan"
stop_server b
[ "$STOP_RC" = 0 ] || fail "server b exit $STOP_RC"
finish
