#!/usr/bin/env bash
# dscache ingest on hostile files: a small .tar.zst holding a 512 MiB member, a zstd MDS shard
# whose table declares a 600 MiB sample and a Megatron index declaring a 300 MiB document are
# refused before the member or sample is read: the message gives the real declared size, the
# file and the sample; peak RSS stays under the bound docs/ingest.md states (64 MiB plus the
# writer's chunks in flight, (2 x threads + 2) x 8 x --chunk-size, plus twice the largest sample
# ingested, here a few bytes). With --skip-bad the others are ingested, within the same bound.
set -euo pipefail
DSC_BIN=${DSC_BIN:?DSC_BIN must point at the build bin directory}
PY=${DSC_PYTHON:-/usr/bin/python3}
CLI=$DSC_BIN/dscache
SRC=$(dirname "$0")/ingest_sources.py
[ -x "$CLI" ] || { echo "SKIP: $CLI not built"; exit 77; }
"$PY" -c 'import numpy' 2>/dev/null || { echo "SKIP: $PY has no numpy"; exit 77; }
command -v zstd >/dev/null || { echo "SKIP: no zstd command to write the hostile files"; exit 77; }
[ -x /usr/bin/time ] || { echo "SKIP: no /usr/bin/time to measure peak RSS"; exit 77; }
source "$(dirname "$0")/base_lib.sh"

THREADS=2
CHUNK_MIB=1
BOUND_KB=$(((64 + (2 * THREADS + 2) * 8 * CHUNK_MIB) * 1024))
if [ "${DSC_SANITIZE:-OFF}" = ON ] || [ "${DSC_TSAN:-OFF}" = ON ]; then
    BOUND_KB=$((400 * 1024)) # the sanitizers' shadow memory and ASan's quarantine; still under
fi                           # the 530-620 MB the readers peaked at before they checked sizes

# run_bounded CODE PATTERN WHAT CMD...: CMD exits CODE with output matching PATTERN, and its
# peak RSS (GNU time's %M, KiB) is under BOUND_KB.
run_bounded() {
    local code=$1 pattern=$2 what=$3; shift 3
    local out=$work/out.txt rss rc=0
    /usr/bin/time -o "$work/rss" -f %M "$@" >"$out" 2>&1 || rc=$?
    rss=$(tail -1 "$work/rss")
    [ "$rc" -eq "$code" ] || fail "$what: exit $rc (wanted $code): $(cat "$out")"
    grep -Eq -- "$pattern" "$out" || fail "$what: output lacks /$pattern/: $(cat "$out")"
    [ "$rss" -lt "$BOUND_KB" ] ||
        fail "$what: peak RSS $rss KiB, over the documented $BOUND_KB KiB"
    echo "$what: peak RSS $rss KiB (bound $BOUND_KB KiB)"
}

common=(--threads "$THREADS" --chunk-size "${CHUNK_MIB}M")

# ---- WebDataset: a 17 KB .tar.zst with a 512 MiB member ------------------------------------
"$PY" "$SRC" hostile-wds "$work/big.tar.zst" --mib 512
echo "big.tar.zst: $(stat -c %s "$work/big.tar.zst") bytes"
run_bounded 1 "big.tar.zst: sample s000001: file s000001.bin: 536870912 bytes as its header declares, over the 268435456-byte limit" \
    "webdataset, refused" "$CLI" ingest webdataset -o "$work/wds" "${common[@]}" "$work/big.tar.zst"
[ ! -e "$work/wds" ] || fail "webdataset: a refused ingest left $work/wds"
grep -q 18446744073709551615 "$work/out.txt" && fail "webdataset: 2^64-1 in the message"
run_bounded 0 "ingested 2 samples, skipped 1" "webdataset, --skip-bad" \
    "$CLI" ingest webdataset -o "$work/wds" --skip-bad "${common[@]}" "$work/big.tar.zst"
# a lower --max-sample-size refuses smaller members
rm -rf "$work/wds"
run_bounded 1 "s000000.bin: 10 bytes as its header declares, over the 8-byte limit" \
    "webdataset, --max-sample-size 8" "$CLI" ingest webdataset -o "$work/wds" \
    --max-sample-size 8 "${common[@]}" "$work/big.tar.zst"

# ---- MDS: a zstd shard whose table declares a 600 MiB sample -------------------------------
"$PY" "$SRC" hostile-mds "$work/mds-src" --mib 600
run_bounded 1 "shard.00000.mds.zstd: sample 1 \(dataset sample 1\): the offset table declares 629145612 bytes for it, over the 268435456-byte limit" \
    "mds, refused" "$CLI" ingest mds -o "$work/mds" "${common[@]}" "$work/mds-src"
[ ! -e "$work/mds" ] || fail "mds: a refused ingest left $work/mds"
run_bounded 0 "ingested 2 samples, skipped 1" "mds, --skip-bad" \
    "$CLI" ingest mds -o "$work/mds" --skip-bad "${common[@]}" "$work/mds-src"
# index.json's raw size against the zstd frame's declared size, before decompressing
raw=$("$PY" - "$work/mds-src/index.json" <<'EOF'
import json, sys
p = sys.argv[1]
d = json.load(open(p))
print(d["shards"][0]["raw_data"]["bytes"])
d["shards"][0]["raw_data"]["bytes"] += 1
json.dump(d, open(p, "w"))
EOF
)
rm -rf "$work/mds"
run_bounded 1 "the frame declares $raw decompressed bytes, index.json's raw_data says $((raw + 1))" \
    "mds, frame size" "$CLI" ingest mds -o "$work/mds" "${common[@]}" "$work/mds-src"

# ---- Megatron: an index declaring a 300 MiB document (the .bin sparse) ---------------------
"$PY" "$SRC" hostile-megatron "$work/mm" --mib 300
run_bounded 1 "mm.idx: document 1: 1 sequences of 314572800 bytes in all \(as the index declares\), over the 268435456-byte limit" \
    "megatron, refused" "$CLI" ingest megatron -o "$work/meg" "${common[@]}" "$work/mm"
[ ! -e "$work/meg" ] || fail "megatron: a refused ingest left $work/meg"
run_bounded 0 "ingested 2 samples, skipped 1" "megatron, --skip-bad" \
    "$CLI" ingest megatron -o "$work/meg" --skip-bad "${common[@]}" "$work/mm"

finish
