#!/usr/bin/env bash
# Replacing a dataset: every `dscache ingest` form refuses an existing dataset directory without
# --replace (the message names the directory and --replace) and leaves it as it was; a replace
# killed (SIGKILL) at many points, each shard written and each step of the swap included (the
# writer's test hook DSC_TEST_WRITER_PAUSE_MS slows those down), always leaves the directory
# holding the whole old or the whole new dataset: a manifest, exactly the shard files it lists,
# each whole (dscache inspect). Then the same on the rename path used where RENAME_EXCHANGE is
# missing (DSC_TEST_WRITER_NO_EXCHANGE=1), where a kill in the gap leaves the old dataset whole
# beside it, which the next ingest reports.
set -euo pipefail
DSC_BIN=${DSC_BIN:?DSC_BIN must point at the build bin directory}
PY=${DSC_PYTHON:-/usr/bin/python3}
CLI=$DSC_BIN/dscache
SRC=$(dirname "$0")/ingest_sources.py
[ -x "$CLI" ] || { echo "SKIP: $CLI not built"; exit 77; }
"$PY" -c 'import numpy' 2>/dev/null || { echo "SKIP: $PY has no numpy"; exit 77; }
source "$(dirname "$0")/base_lib.sh"

# ---- every form refuses an existing dataset ------------------------------------------------
old_ds() { # a small dataset at $1
    rm -rf "$1"
    "$CLI" ingest synthetic -o "$1" --samples 100 --field old:u8:16 >/dev/null ||
        fail "cannot make a dataset at $1"
}
fingerprint() { (cd "$1" && sha256sum manifest.json shard-*.dsc); }

"$PY" -c 'import numpy as np, sys; np.save(sys.argv[1], np.arange(40, dtype=np.int32).reshape(10, 4))' \
    "$work/a.npy"
"$PY" -c 'import numpy as np, sys; np.arange(1000, dtype=np.uint16).tofile(sys.argv[1])' \
    "$work/train.bin"
"$PY" "$SRC" wds "$work/wds" --tars 1 --samples 5 >/dev/null
"$PY" "$SRC" mds "$work/mds" --samples 5 >/dev/null
"$PY" "$SRC" megatron "$work/meg" --docs 5 >/dev/null
mkdir -p "$work/imgs/cat"
printf 'not really a jpeg' >"$work/imgs/cat/a.jpg"

forms=(
    "npy|x=$work/a.npy"
    "synthetic|--samples 10 --field x:u8:4"
    "tokens|--dtype u16 --seq-len 7 $work/train.bin"
    "webdataset|$work/wds/shard-000.tar"
    "mds|$work/mds"
    "megatron|$work/meg"
    "images|$work/imgs --encoded"
)
ds=$work/ds
for entry in "${forms[@]}"; do
    form=${entry%%|*}
    args=${entry#*|}
    old_ds "$ds"
    before=$(fingerprint "$ds")
    # shellcheck disable=SC2086 # args are words
    expect 1 "$ds exists and holds a dataset: pass --replace" "$CLI" ingest $form -o "$ds" $args
    [ "$(fingerprint "$ds")" = "$before" ] || fail "$form: a refused ingest changed $ds"
    [ -z "$(ls -A "$work" | grep '^\.ds\.' || true)" ] || fail "$form: left $(ls -A "$work")"
    if [ "$form" != images ]; then # the fake jpeg does not decode: the refusal is the point
        # shellcheck disable=SC2086
        expect 0 "ingested" "$CLI" ingest $form -o "$ds" --replace $args
        expect 0 "verified" "$CLI" inspect "$ds"
        [ -z "$(ls "$ds" | grep -v -e '^manifest.json$' -e '^shard-[0-9]*\.dsc$' || true)" ] ||
            fail "$form --replace: $ds holds $(ls "$ds")"
    fi
    pass "ingest $form refuses an existing dataset without --replace"
done

# ---- a replace killed at many points -------------------------------------------------------
# old: 400 samples of a:u8[4096] in 4 shards; new: 900 samples of b:i32[300] in about 12 shards
make_old() {
    rm -rf "$ds"
    "$CLI" ingest synthetic -o "$ds" --samples 400 --field a:u8:4096 --shard-size 400K \
        --chunk-size 64K >/dev/null || fail "cannot make the old dataset"
}
new_args=(--samples 900 --field b:i32:300 --seed 7 --shard-size 100K --chunk-size 32K --replace)

# whole DIR: the manifest's dataset is the old or the new one, DIR holds exactly its shard
# files, and inspect verifies every one (sizes, checksums, chunks). Prints old|new|missing.
state_of() {
    local dir=$1
    [ -d "$dir" ] || { echo missing; return; }
    "$CLI" inspect "$dir" -q >/dev/null 2>&1 || { echo "broken: $("$CLI" inspect "$dir" -q 2>&1 | head -3)"; return; }
    "$PY" - "$dir" <<'EOF'
import json, os, sys
d = sys.argv[1]
m = json.load(open(os.path.join(d, "manifest.json")))
listed = sorted(s["file"] for s in m["shards"])
present = sorted(f for f in os.listdir(d) if f != "manifest.json")
if listed != present:
    print("mixed: lists %s, holds %s" % (listed, present))
elif m["samples"] == 400 and m["schema"][0]["name"] == "a":
    print("old")
elif m["samples"] == 900 and m["schema"][0]["name"] == "b":
    print("new")
else:
    print("other: %d samples" % m["samples"])
EOF
}

# kill_at MS ENV...: runs the replace with ENV, SIGKILLs it after MS ms; prints the state after.
kill_at() {
    local ms=$1; shift
    env "$@" "$CLI" ingest synthetic -o "$ds" "${new_args[@]}" >/dev/null 2>&1 &
    local pid=$!
    pids+=("$pid")
    sleep "$(awk -v m="$ms" 'BEGIN { printf "%.3f", m / 1000 }')"
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

# run_kills LABEL ENV...: times one whole replace, then kills replaces at 16 points across that
# time (and past it); every state must be old or new.
run_kills() {
    local label=$1; shift
    make_old
    local t0 t1 total
    t0=$(date +%s%N)
    env "$@" "$CLI" ingest synthetic -o "$ds" "${new_args[@]}" >/dev/null ||
        fail "$label: the replace failed"
    t1=$(date +%s%N)
    total=$(((t1 - t0) / 1000000))
    [ "$(state_of "$ds")" = new ] || fail "$label: a whole replace left $(state_of "$ds")"
    echo "$label: one replace takes $total ms"
    local i ms st olds=0 news=0
    for i in $(seq 1 16); do
        make_old
        ms=$((total * i / 14))
        kill_at "$ms" "$@"
        st=$(state_of "$ds")
        case $st in
        old) olds=$((olds + 1)) ;;
        new) news=$((news + 1)) ;;
        missing)
            # only where the swap is two renames: the old dataset must be whole beside it
            local aside
            aside=$(ls -d "$work"/.ds.old-* 2>/dev/null | head -1 || true)
            if [ -n "$aside" ] && [ "$(state_of "$aside")" = old ]; then
                olds=$((olds + 1))
                expect 0 "holds the previous dataset of $ds" \
                    "$CLI" ingest synthetic -o "$ds" --samples 10 --field x:u8
                rm -rf "$ds" "$aside"
            else
                fail "$label: killed at $ms ms: $ds missing and no whole old dataset beside it"
            fi ;;
        *) fail "$label: killed at $ms ms: $ds is $st" ;;
        esac
    done
    echo "$label: 16 kills: $olds left the old dataset, $news the new one"
    [ "$olds" -gt 0 ] && [ "$news" -gt 0 ] ||
        fail "$label: the kills did not span the replace ($olds old, $news new)"
    # the next ingest removes what the killed ones left beside the directory
    make_old
    expect 0 "ingested" "$CLI" ingest synthetic -o "$ds" "${new_args[@]}"
    [ -z "$(ls -A "$work" | grep '^\.ds\.' || true)" ] ||
        fail "$label: leftovers after a later ingest: $(ls -A "$work" | grep '^\.ds\.')"
    pass "$label: a killed replace always leaves the whole old or the whole new dataset"
}

run_kills "exchange" DSC_TEST_WRITER_PAUSE_MS=40
run_kills "two renames" DSC_TEST_WRITER_PAUSE_MS=40 DSC_TEST_WRITER_NO_EXCHANGE=1

finish
