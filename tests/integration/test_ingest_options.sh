#!/usr/bin/env bash
# Every form of dscache ingest parses the common options through one table and one loop
# (client/cli/ingest/ingest_common.c: ingest_main): the same bad option gets the same refusal, exit 2,
# before any input is read, from tokens, npy, synthetic, images, webdataset, megatron and mds
# alike; --help still prints each form's own text; every form's summary gives the writer's shards.
set -euo pipefail
DSC_BIN=${DSC_BIN:?DSC_BIN must point at the build bin directory}
CLI=$DSC_BIN/dscache
[ -x "$CLI" ] || { echo "SKIP: $CLI not built"; exit 77; }
source "$(dirname "$0")/base_lib.sh"

# Each form with the arguments it needs besides the common options (inputs that do not exist:
# every refusal below comes before any input is opened).
forms=(
    "tokens --dtype u16 --seq-len 4 $work/none.bin"
    "npy a=$work/none.npy"
    "synthetic --samples 5 --field x:u8"
    "images $work/none --encoded"
    "webdataset $work/none.tar"
    "megatron $work/none"
    "mds $work/none"
)
for form in "${forms[@]}"; do
    name=${form%% *}
    # shellcheck disable=SC2086 # the form's words split on purpose
    set -- $form
    expect 2 "--level applies to --compress lz4hc only" "$CLI" ingest "$@" -o "$work/x" --level 3
    expect 2 "--name 'a b': use 1-63" "$CLI" ingest "$@" -o "$work/x" --name 'a b'
    expect 2 "--chunk-size '512M': 1 byte to 256M" "$CLI" ingest "$@" -o "$work/x" \
        --chunk-size 512M
    expect 2 "--shard-size must be > 0" "$CLI" ingest "$@" -o "$work/x" --shard-size 0
    expect 2 "--compress 'zstd': expected none, lz4 or lz4hc" "$CLI" ingest "$@" -o "$work/x" \
        --compress zstd
    expect 2 "unknown option '--frobnicate'" "$CLI" ingest "$@" -o "$work/x" --frobnicate
    expect 2 "option --shard-size needs a value" "$CLI" ingest "$@" -o "$work/x" --shard-size
    expect 2 "missing -o OUT_DIR" "$CLI" ingest "$@"
    expect 0 "usage: dscache ingest" "$CLI" ingest "$name" --help
    [ -e "$work/x" ] && fail "$name: a refused ingest left $work/x"
    pass "$name: the common options refused alike"
done
# options of the writer only where a form takes them
expect 2 "unknown option '--skip-bad'" "$CLI" ingest synthetic -o "$work/x" --samples 5 \
    --field x:u8 --skip-bad
expect 2 "unknown option '--dry-run'" "$CLI" ingest images "$work/none" -o "$work/x" --encoded \
    --dry-run

# one summary for every form: the run's counts and the writer's shards, chunks and ratio
expect 0 "ingested 100 samples, skipped 0, .* into $work/syn: 1 shards \\(1 chunks\\), raw .*ratio" \
    "$CLI" ingest synthetic -o "$work/syn" --samples 100 --field 'x:u8[4]' --field y:i64
head -c 4000 /dev/zero >"$work/t.bin"
expect 0 "ingested 400 samples, skipped 0, .* 1 shards" "$CLI" ingest tokens -o "$work/tok" \
    --dtype u16 --seq-len 4 "$work/t.bin"
finish
