#!/usr/bin/env bash
# One bad-input case of dscache ingest webdataset|megatron|mds (registered once per CASE in
# tests/CMakeLists.txt): without --skip-bad the ingest fails with a message naming the file and
# the sample and leaves no dataset; with --skip-bad it succeeds, the summary counts the skipped
# samples and the dataset holds exactly the others.
# Usage: ingest_bad.sh CASE   (wds_truncated wds_missing wds_badcls wds_dtype megatron_bigsize
#        megatron_shortbin megatron_tail megatron_header mds_truncated mds_badsample mds_badzstd
#        mds_encoding)
set -euo pipefail
case_name=${1:?usage: ingest_bad.sh CASE}
DSC_BIN=${DSC_BIN:?DSC_BIN must point at the build bin directory}
PY=${DSC_PYTHON:-/usr/bin/python3}
CLI=$DSC_BIN/dscache
SRC=$(dirname "$0")/ingest_sources.py
[ -x "$CLI" ] || { echo "SKIP: $CLI not built"; exit 77; }
"$PY" -c 'import numpy' 2>/dev/null || { echo "SKIP: $PY has no numpy"; exit 77; }
source "$(dirname "$0")/base_lib.sh"
EXPECT_ICASE=1

# run_case FORM SOURCE ERROR_PATTERN SKIPPED KEPT [EXTRA ARGS...]
run_case() {
    local form=$1 source=$2 pattern=$3 skipped=$4 kept=$5; shift 5
    local out=$work/out
    expect 1 "$pattern" "$CLI" ingest "$form" -o "$out" "$@" "$source"
    [ ! -e "$out" ] || fail "a failed ingest left $out behind"
    [ -z "$(ls -A "$work" | grep -v -e '^src' -e '^out$' || true)" ] ||
        fail "a failed ingest left files in $work: $(ls -A "$work")"
    if [ "$kept" = none ]; then
        expect 1 "$pattern" "$CLI" ingest "$form" -o "$out" --skip-bad "$@" "$source"
        return
    fi
    expect 0 "ingested $kept samples, skipped $skipped" \
        "$CLI" ingest "$form" -o "$out" --skip-bad "$@" "$source"
    local n
    n=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["samples"])' \
        "$out/manifest.json" 2>/dev/null || echo "no manifest")
    [ "$n" = "$kept" ] || fail "the dataset holds $n samples, expected $kept"
    pass "$case_name"
}

src=$work/src
case $case_name in
wds_*)
    "$PY" "$SRC" wds "$src" --samples 50 --damage "${case_name#wds_}"
    tars=("$src"/shard-000.tar "$src"/shard-001.tar)
    case $case_name in
    wds_truncated) # tar 1 ends inside sample s000038: 25 + 13 kept, the partial one counted
        run_case webdataset "${tars[1]}" "shard-001.tar: sample s000038: .*truncated" 1 38 \
            "${tars[0]}" ;;
    wds_missing) run_case webdataset "${tars[1]}" "shard-000.tar: sample s000007: no .cls" 1 49 \
        "${tars[0]}" ;;
    wds_badcls) run_case webdataset "${tars[1]}" \
        "shard-000.tar: sample s000009: .cls: 'not-a-number' is not an integer" 1 49 "${tars[0]}" ;;
    wds_dtype) run_case webdataset "${tars[1]}" "shard-000.tar: sample s000011: .npy: dtype <f8" \
        1 49 "${tars[0]}" ;;
    esac ;;
megatron_*)
    damage=${case_name#megatron_}
    case $damage in
    bigsize | shortbin)
        "$PY" "$SRC" megatron "$src" --docs 40 --damage "$damage"
        run_case megatron "$src" "src.idx: document 39: sequence 41 runs past the end of .*src.bin" \
            1 39 ;;
    tail) # bytes in the .bin that no sequence covers: an error, a note with --skip-bad
        "$PY" "$SRC" megatron "$src" --docs 40
        printf 'tail' >>"$src.bin"
        run_case megatron "$src" "src.bin: 4 bytes after the end of the last sequence" 0 40 ;;
    header) # an index cut short: no sample can be trusted, --skip-bad does not help
        "$PY" "$SRC" megatron "$src" --docs 40
        head -c 100 "$src.idx" >"$src.cut" && mv "$src.cut" "$src.idx"
        run_case megatron "$src" "src.idx: shorter than its sequence and document arrays" 0 none ;;
    esac ;;
mds_*)
    damage=${case_name#mds_}
    case $damage in
    truncated)
        "$PY" "$SRC" mds "$src" --samples 60 --damage truncated
        run_case mds "$src" "shard.00001.mds: shard 1 \\(25 samples\\): .*truncated" 25 35 ;;
    badsample)
        "$PY" "$SRC" mds "$src" --samples 60 --damage badsample
        run_case mds "$src" "shard.00001.mds: sample 5 \\(dataset sample 30\\)" 1 59 ;;
    badzstd)
        command -v zstd >/dev/null || { echo "SKIP: no zstd command"; exit 77; }
        "$PY" "$SRC" mds "$src" --samples 60 --zstd --damage badzstd
        run_case mds "$src" "shard.00001.mds.zstd: shard 1 \\(25 samples\\): zstd" 25 35 ;;
    encoding) # an encoding this reader does not take: refused up front, naming the column
        "$PY" "$SRC" mds "$src" --samples 10
        sed -i 's/"ndarray:int16:2,3"/"ndarray:complex64:2,3"/g' "$src/index.json"
        run_case mds "$src" "index.json: column 'vec': ndarray dtype 'complex64'" 0 none ;;
    esac ;;
*) echo "ingest_bad.sh: unknown case $case_name" >&2; exit 2 ;;
esac
finish
