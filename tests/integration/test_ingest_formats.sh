#!/usr/bin/env bash
# dscache ingest webdataset|megatron|mds on sources this test writes (tests/integration/
# ingest_sources.py): every sample read back from the shard files (ingest_dump) equals its
# source, field by field, variable-length fields included; --field selection and renaming,
# compressed tars, several tars in order, Megatron documents and --seq-len windows, raw and
# zstd MDS shards; --help for each form.
set -euo pipefail
DSC_BIN=${DSC_BIN:?DSC_BIN must point at the build bin directory}
PY=${DSC_PYTHON:-/usr/bin/python3}
CLI=$DSC_BIN/dscache
DUMP=$DSC_BIN/ingest_dump
HERE=$(cd "$(dirname "$0")" && pwd)
for exe in "$CLI" "$DUMP"; do
    [ -x "$exe" ] || { echo "SKIP: $exe not built"; exit 77; }
done
"$PY" -c 'import numpy' 2>/dev/null || { echo "SKIP: $PY has no numpy"; exit 77; }
source "$HERE/base_lib.sh"
EXPECT_ICASE=1

for form in webdataset megatron mds; do
    expect 0 "usage: dscache ingest $form" "$CLI" ingest "$form" --help
done

dump() { # DATASET DUMP_DIR
    mkdir -p "$2"
    "$DUMP" "$1" "$2" >/dev/null || fail "ingest_dump $1"
}

# check KIND DUMP_DIR ARGS...: compares the dump with the regenerated sources
check() {
    "$PY" "$HERE/ingest_check.py" "$@" || { fail "read-back differs: $*"; return 1; }
}

# ---- WebDataset: two tars, 50 samples, every extension; then a selection with renaming ------
"$PY" "$HERE/ingest_sources.py" wds "$work/wds" --tars 2 --samples 50
expect 0 "schema: jpg:u8\[\],cls:i64,npy:f32\[\?,4\],txt:u8\[\]" \
    "$CLI" ingest webdataset -o "$work/ds-wds" "$work/wds/shard-000.tar" "$work/wds/shard-001.tar"
expect 0 "ingested 50 samples, skipped 0" \
    "$CLI" ingest webdataset -o "$work/ds-wds2" --compress none "$work/wds/shard-000.tar" \
    "$work/wds/shard-001.tar"
dump "$work/ds-wds" "$work/d-wds"
check wds "$work/d-wds" 50 jpg:jpg cls:cls npy:npy txt:txt && pass "webdataset: every field"
expect 0 "schema: image:u8\[\],label:i64$" \
    "$CLI" ingest webdataset -o "$work/ds-sel" --field jpg:image --field CLS:label \
    "$work/wds/shard-000.tar" "$work/wds/shard-001.tar"
dump "$work/ds-sel" "$work/d-sel"
check wds "$work/d-sel" 50 jpg:image cls:label && pass "webdataset: --field selection, renaming"
meta() { # DATASET: the manifest's meta object, compact
    "$PY" -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1] + "/manifest.json")).get("meta"), sort_keys=True))' "$1"
}
[ "$(meta "$work/ds-sel")" = '{"extensions": {"image": "jpg", "label": "cls"}, "source": "webdataset"}' ] ||
    fail "webdataset meta: $(meta "$work/ds-sel")"
[ ! -e "$work/d-sel/npy.bin" ] || fail "a field not selected was written"
# a gzip-compressed tar reads the same
gzip -c "$work/wds/shard-000.tar" >"$work/wds/shard-000.tar.gz"
expect 0 "ingested 50 samples" "$CLI" ingest webdataset -o "$work/ds-gz" \
    "$work/wds/shard-000.tar.gz" "$work/wds/shard-001.tar"
dump "$work/ds-gz" "$work/d-gz"
check wds "$work/d-gz" 50 jpg:jpg txt:txt && pass "webdataset: a .tar.gz"
expect 2 "--field 'jpg::nope'" "$CLI" ingest webdataset -o "$work/x" --field jpg::nope \
    "$work/wds/shard-000.tar"

# ---- Megatron: documents (uint16 and int32) and --seq-len windows ---------------------------
for dtype in uint16 int32; do
    "$PY" "$HERE/ingest_sources.py" megatron "$work/meg-$dtype" --docs 40 --dtype "$dtype"
    want=$([ "$dtype" = uint16 ] && echo u16 || echo i32)
    expect 0 "schema: tokens:$want\[\]" "$CLI" ingest megatron -o "$work/ds-meg-$dtype" \
        "$work/meg-$dtype"
    dump "$work/ds-meg-$dtype" "$work/d-meg-$dtype"
    check megatron "$work/d-meg-$dtype" 40 "$dtype" 0 && pass "megatron $dtype: one sample per document"
done
expect 0 "schema: tokens:u16\[17\]" \
    "$CLI" ingest megatron -o "$work/ds-meg-seq" --seq-len 16 "$work/meg-uint16"
dump "$work/ds-meg-seq" "$work/d-meg-seq"
check megatron "$work/d-meg-seq" 40 uint16 16 && pass "megatron: --seq-len 16 windows of 17"
[ "$(meta "$work/ds-meg-seq")" = '{"documents": 40, "seq_len": 16, "source": "megatron"}' ] ||
    fail "megatron meta: $(meta "$work/ds-meg-seq")"

# ---- MDS: raw and zstd shards, every column kind ---------------------------------------------
"$PY" "$HERE/ingest_sources.py" mds "$work/mds" --samples 60
expect 0 "ingested 60 samples, skipped 0" "$CLI" ingest mds -o "$work/ds-mds" "$work/mds"
dump "$work/ds-mds" "$work/d-mds"
check mds "$work/d-mds" 60 && pass "mds: raw shards"
meta "$work/ds-mds" | grep -q '"image": "jpeg".*"source": "mds"' || fail "mds meta: $(meta "$work/ds-mds")"
if command -v zstd >/dev/null 2>&1; then
    "$PY" "$HERE/ingest_sources.py" mds "$work/mdsz" --samples 60 --zstd
    expect 0 "schema: any:i32\[\],big:i64,blob:u8\[\],count:u32,feat:f32\[\?,3\],half:f16,image:u8\[\],label:i64,score:f32,small:u8,text:u8\[\],vec:i16\[2,3\]" \
        "$CLI" ingest mds -o "$work/ds-mdsz" "$work/mdsz"
    dump "$work/ds-mdsz" "$work/d-mdsz"
    check mds "$work/d-mdsz" 60 && pass "mds: zstd shards"
else
    echo "note: no zstd command: the zstd MDS case is not run"
fi
expect 0 "schema: picture:u8\[\],label:i64$" "$CLI" ingest mds --dry-run --field image:picture \
    --field label "$work/mds"
expect 2 "has no column 'nope'" "$CLI" ingest mds -o "$work/x" --field nope "$work/mds"
finish
