#!/usr/bin/env bash
# A dataset written by the C writer with variable and fixed fields (ids:i32[], mel:f32[?,80],
# image:u8[3,32,32], label:i64; format version 2) is inspected, served by dscached and fetched
# with dscache get: every shard's bytes equal its decoded chunks read from the files. A
# version-1 dataset beside it still loads and serves.
source "$(dirname "$0")/server_lib.sh"
WT=$DSC_BIN/writer_tool
[ -x "$WT" ] || { echo "SKIP: $WT not built"; exit 77; }

"$WT" write "$work/var" 1500 2 >"$work/write.log" || { cat "$work/write.log"; fail "writer_tool write"; finish; }
pass "$(cat "$work/write.log")"
ls -a "$work" | grep -q '^\.var\.tmp' && fail "temporary directory left beside the dataset"
grep -q '"version":	2' "$work/var/manifest.json" || fail "manifest is not version 2"
grep -q 'null' "$work/var/manifest.json" || fail "no null (variable) dimension in the manifest"

# inspect: verified, variable fields shown with their statistics
out=$("$CLI" inspect "$work/var") || fail "inspect: $out"
grep -qE 'field +ids +i32 +\[\?\] +variable: [0-9]+ rows of 4 bytes, largest sample 60 rows \(240 bytes\)' <<<"$out" \
    || fail "inspect lacks the ids statistics: $out"
grep -qE 'field +mel +f32 +\[\?, 80\] +variable: .*largest sample 5 rows \(1600 bytes\)' <<<"$out" \
    || fail "inspect lacks the mel statistics: $out"
grep -qE 'field +image +u8 +\[3, 32, 32\]$' <<<"$out" || fail "inspect: image: $out"
grep -q "every shard and chunk verified" <<<"$out" && pass "inspect verifies the version-2 dataset"
json=$("$CLI" inspect --json "$work/var")
grep -q '"version":	2' <<<"$json" && grep -q '"rows_max":	60' <<<"$json" \
    && pass "inspect --json carries version and statistics" || fail "inspect --json: $json"

make_dataset "$work/fixed" fixed 500 lz4
start_server a --data "$work/var" --data "$work/fixed"
shards=$(grep -c '"file"' "$work/var/manifest.json")
[ "$shards" -ge 3 ] || fail "expected several shards, got $shards"
for ((s = 0; s < shards; s++)); do
    "$WT" chunks "$work/var" "$s" "$work/want-$s.bin" || fail "writer_tool chunks $s"
    if "$CLI" get --server "$ADDR_a" --dataset var --shard "$s" -o "$work/got-$s.bin"; then
        cmp -s "$work/want-$s.bin" "$work/got-$s.bin" || fail "shard $s: fetched bytes differ"
    else
        fail "dscache get shard $s"
    fi
done
pass "dscache get: $shards shards of the version-2 dataset, bytes equal"
"$CLI" get --server "$ADDR_a" --dataset var --shard 0 --chunks 1:2 -o "$work/part.bin" \
    && [ -s "$work/part.bin" ] && pass "dscache get --chunks on a version-2 shard" \
    || fail "dscache get --chunks on the version-2 dataset"
"$CLI" get --server "$ADDR_a" --dataset fixed --shard 0 -o "$work/fixed.bin" \
    && pass "the version-1 dataset beside it serves" || fail "version-1 dataset"

# A writer killed mid-way leaves no dataset: the server given its path finds nothing to load.
"$WT" write "$work/half" 200000 1 >/dev/null 2>&1 &
wpid=$!
pids+=("$wpid")
for _ in $(seq 1 100); do
    ls "$work"/.half.tmp-*/shard-00001.dsc >/dev/null 2>&1 && break
    sleep 0.05
done
kill -KILL "$wpid" 2>/dev/null
wait "$wpid" 2>/dev/null || true
[ -e "$work/half" ] && fail "a killed writer left $work/half"
ls "$work"/.half.tmp-*/manifest.json >/dev/null 2>&1 && fail "a killed writer left a manifest"
tmp=$(ls -d "$work"/.half.tmp-* 2>/dev/null | head -1)
if [ -n "$tmp" ]; then
    START_NO_WAIT=1 start_server b --data "$tmp"
    until_log=0
    for _ in $(seq 1 100); do
        grep -q "no manifest.json yet" "$work/server-b.log" && { until_log=1; break; }
        sleep 0.05
    done
    [ "$until_log" = 1 ] && ! grep -q "dataset half" "$work/server-b.log" \
        && pass "dscached loads nothing from the killed writer's directory" \
        || fail "dscached on the killed writer's directory: $(cat "$work/server-b.log")"
    stop_server b
else
    fail "the killed writer left no temporary directory to check (killed too early?)"
fi
stop_server a
finish
