#!/usr/bin/env bash
# dscache ingest: .npy (several dtypes and shapes), token files and synthetic data are ingested
# raw / lz4 / lz4hc and every sample read back from the shard files equals its source, byte for
# byte; the generator is deterministic; bad inputs are refused with a clear message.
set -euo pipefail
DSC_BIN=${DSC_BIN:?DSC_BIN must point at the build bin directory}
PY=${DSC_PYTHON:-/usr/bin/python3}
CLI=$DSC_BIN/dscache
DUMP=$DSC_BIN/shard_dump
for exe in "$CLI" "$DUMP"; do
    [ -x "$exe" ] || { echo "SKIP: $exe not built"; exit 77; }
done
"$PY" -c 'import numpy' 2>/dev/null || { echo "SKIP: $PY has no numpy"; exit 77; }

source "$(dirname "$0")/base_lib.sh"
EXPECT_ICASE=1 # expect CODE PATTERN CMD...: messages matched case-insensitively

# ---- .npy: five fields of different dtypes and shapes, 1001 samples ------------------------
"$PY" - "$work" <<'EOF'
import numpy as np, sys
d = sys.argv[1]
rng = np.random.default_rng(7)
n = 1001
np.save(f"{d}/img.npy", rng.integers(0, 256, (n, 3, 4, 4), dtype=np.uint8))
np.save(f"{d}/pos.npy", rng.integers(-30000, 30000, (n, 5), dtype=np.int16))
np.save(f"{d}/half.npy", rng.standard_normal((n, 2, 3)).astype(np.float16))
np.save(f"{d}/emb.npy", rng.standard_normal((n, 7)).astype(np.float32))
np.save(f"{d}/label.npy", rng.integers(-2**62, 2**62, (n,), dtype=np.int64))
# rejected inputs
np.save(f"{d}/fortran.npy", np.asfortranarray(rng.standard_normal((n, 3)).astype(np.float32)))
np.save(f"{d}/big.npy", rng.standard_normal((n, 3)).astype(">f4"))
np.save(f"{d}/obj.npy", np.array([{"a": 1}] * n, dtype=object), allow_pickle=True)
np.save(f"{d}/short.npy", np.zeros((n - 1, 3), dtype=np.float32))
np.save(f"{d}/u64.npy", np.zeros((n, 3), dtype=np.uint64))
np.save(f"{d}/rec.npy", np.zeros(n, dtype=[("a", "<i4"), ("b", "<f4")]))
np.save(f"{d}/scalar.npy", np.float32(3.0))
raw = open(f"{d}/emb.npy", "rb").read()
open(f"{d}/trunc.npy", "wb").write(raw[:-10])
open(f"{d}/notnpy.npy", "wb").write(b"hello, this is not an array file\n" * 4)
EOF

check_npy() { # DATASET_DIR DUMP_DIR
    "$PY" - "$work" "$2" <<'EOF' || fail "npy read-back differs ($1)"
import numpy as np, sys
src, dump = sys.argv[1], sys.argv[2]
bad = 0
for name, f in [("image", "img"), ("pos", "pos"), ("half", "half"), ("emb", "emb"), ("label", "label")]:
    want = np.load(f"{src}/{f}.npy").tobytes()
    got = open(f"{dump}/{name}.bin", "rb").read()
    if got != want:
        print(f"field {name}: {len(got)} bytes read back, {len(want)} expected, equal={got == want}")
        bad += 1
sys.exit(1 if bad else 0)
EOF
}

for mode in none lz4 lz4hc; do
    out=$work/npy-$mode
    expect 0 "ingested 1001 samples" "$CLI" ingest npy -o "$out" --compress "$mode" \
        --chunk-size 4K --shard-size 48K image="$work/img.npy" pos="$work/pos.npy" \
        half="$work/half.npy" emb="$work/emb.npy" label="$work/label.npy"
    expect 0 "every shard and chunk verified" "$CLI" inspect "$out"
    mkdir -p "$work/dump-$mode"
    if "$DUMP" "$out" "$work/dump-$mode" >/dev/null; then
        check_npy "$mode" "$work/dump-$mode"
    else
        fail "shard_dump failed on $out"
    fi
    shards=$(ls "$out"/shard-*.dsc | wc -l)
    [ "$shards" -ge 3 ] || fail "$mode: expected several shards, got $shards"
    ls "$out"/*.tmp >/dev/null 2>&1 && fail "$mode: temporary files left behind"
done
# the schema in the manifest says what the files said
"$CLI" inspect --json "$work/npy-lz4" >"$work/npy.json" || fail "inspect --json failed"
"$PY" - "$work/npy.json" <<'EOF' || fail "inspect --json schema"
import json, sys
doc = json.load(open(sys.argv[1]))
fields = {f["name"]: (f["dtype"], f["shape"]) for f in doc["fields"]}
want = {"image": ("u8", [3, 4, 4]), "pos": ("i16", [5]), "half": ("f16", [2, 3]),
        "emb": ("f32", [7]), "label": ("i64", [])}
assert fields == want, fields
assert doc["samples"] == 1001 and doc["ok"] is True and doc["problems"] == [], doc
assert doc["name"] == "npy-lz4", doc["name"]
assert sum(s["samples"] for s in doc["shards"]) == 1001
EOF
# lz4 stores less than raw on compressible data
raw_size=$(du -sb "$work/npy-none" | cut -f1)

# ---- rejected .npy inputs: exit 1 and a message that says why ------------------------------
expect 1 "fortran" "$CLI" ingest npy -o "$work/bad1" a="$work/fortran.npy"
expect 1 "big-endian" "$CLI" ingest npy -o "$work/bad2" a="$work/big.npy"
expect 1 "object" "$CLI" ingest npy -o "$work/bad3" a="$work/obj.npy"
expect 1 "same first axis|1000 samples" "$CLI" ingest npy -o "$work/bad4" a="$work/emb.npy" \
    b="$work/short.npy"
expect 1 "unsupported dtype" "$CLI" ingest npy -o "$work/bad5" a="$work/u64.npy"
expect 1 "structured" "$CLI" ingest npy -o "$work/bad6" a="$work/rec.npy"
expect 1 "truncated" "$CLI" ingest npy -o "$work/bad7" a="$work/trunc.npy"
expect 1 "not a .npy" "$CLI" ingest npy -o "$work/bad8" a="$work/notnpy.npy"
expect 1 "sample axis" "$CLI" ingest npy -o "$work/bad9" a="$work/scalar.npy"
expect 1 "no such file" "$CLI" ingest npy -o "$work/bad10" a="$work/missing.npy"
expect 2 "NAME=FILE" "$CLI" ingest npy -o "$work/bad11" "$work/emb.npy"
expect 2 "given twice" "$CLI" ingest npy -o "$work/bad12" a="$work/emb.npy" a="$work/emb.npy"
[ -e "$work/bad1/manifest.json" ] && fail "a refused ingest left a manifest"

# ---- token files: u16 and u32, windows of seq_len + 1, the tail dropped ---------------------
"$PY" - "$work" <<'EOF'
import numpy as np, sys
d = sys.argv[1]
rng = np.random.default_rng(3)
rng.integers(0, 50257, 64 * 777 + 13, dtype=np.uint16).tofile(f"{d}/train16.bin")
rng.integers(0, 200000, 64 * 500 + 5, dtype=np.uint32).tofile(f"{d}/train32.bin")
EOF
for spec in "u16 16 777 13" "u32 32 500 5"; do
    read -r dtype bits windows tail <<<"$spec"
    out=$work/tok$bits
    expect 0 "dropped the last $tail tokens" "$CLI" ingest tokens -o "$out" --dtype "$dtype" \
        --seq-len 63 --chunk-size 8K --shard-size 64K "$work/train$bits.bin"
    expect 0 "every shard and chunk verified" "$CLI" inspect "$out"
    mkdir -p "$work/dump-tok$bits"
    "$DUMP" "$out" "$work/dump-tok$bits" >/dev/null || fail "shard_dump failed on $out"
    "$PY" - "$work/train$bits.bin" "$work/dump-tok$bits/tokens.bin" "$dtype" "$windows" <<'EOF' \
        || fail "tokens $dtype read-back differs"
import numpy as np, sys
src, dump, dtype, windows = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
t = np.fromfile(src, dtype={"u16": np.uint16, "u32": np.uint32}[dtype])
want = t[: windows * 64].reshape(windows, 64)
got = np.fromfile(dump, dtype=want.dtype)
assert got.size == want.size, (got.size, want.size)
assert np.array_equal(got.reshape(windows, 64), want)
EOF
done
printf 'abc' >"$work/odd.bin"
expect 1 "not a multiple" "$CLI" ingest tokens -o "$work/bad20" --dtype u16 --seq-len 4 "$work/odd.bin"
printf 'abcd' >"$work/tiny.bin"
expect 1 "fewer than one window" "$CLI" ingest tokens -o "$work/bad21" --dtype u16 --seq-len 4 \
    "$work/tiny.bin"

# ---- synthetic: deterministic by seed; the samples are what the documented generator gives --
syn() { "$CLI" ingest synthetic -o "$1" --name syn --samples 3000 --seed "$2" \
    --field image:u8:3x8x8 --field label:i64 --field emb:f16:5 --field w:f32:2x3 \
    --field b:bf16:4 --chunk-size 16K --shard-size 256K; }
syn "$work/syn-a" 42 >/dev/null || fail "synthetic ingest failed"
syn "$work/syn-b" 42 >/dev/null || fail "synthetic ingest failed"
syn "$work/syn-c" 43 >/dev/null || fail "synthetic ingest failed"
[ "$(ls "$work"/syn-a/shard-*.dsc | wc -l)" -ge 2 ] || fail "synthetic: expected several shards"
for f in "$work"/syn-a/shard-*.dsc "$work/syn-a/manifest.json"; do
    cmp -s "$f" "$work/syn-b/$(basename "$f")" || fail "same seed, different bytes: $(basename "$f")"
    cmp -s "$f" "$work/syn-c/$(basename "$f")" && fail "other seed, same bytes: $(basename "$f")"
done
"$CLI" ingest synthetic -o "$work/syn-d" --name same --samples 500 --seed 9 \
    --field x:u16:10 >/dev/null || fail "synthetic d"
"$CLI" ingest synthetic -o "$work/syn-e" --name same --samples 500 --seed 9 \
    --field x:u16:10 >/dev/null || fail "synthetic e"
cmp -s "$work/syn-d/shard-00000.dsc" "$work/syn-e/shard-00000.dsc" \
    || fail "same seed and name: shard files differ"
cmp -s "$work/syn-d/manifest.json" "$work/syn-e/manifest.json" \
    || fail "same seed and name: manifests differ"
mkdir -p "$work/dump-syn"
"$DUMP" "$work/syn-a" "$work/dump-syn" >/dev/null || fail "shard_dump failed on syn-a"
"$PY" - "$work/dump-syn" <<'EOF' || fail "synthetic samples differ from the documented generator"
import numpy as np, sys
M = (1 << 64) - 1
def splitmix(state):
    state = (state + 0x9E3779B97F4A7C15) & M
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return state, z ^ (z >> 31)
def fnv(s):
    h = 0xcbf29ce484222325
    for ch in s.encode():
        h = ((h ^ ch) * 0x100000001b3) & M
    return h
def values(seed, name, i, n):
    state = seed ^ fnv(name) ^ ((i * 0xD1B54A32D192ED03) & M)
    out, left, r, v = [], 0, 0, 0
    for e in range(n):
        if left == 0:
            state, r = splitmix(state)
            left = 9
        x = r & 0x7F
        r >>= 7
        left -= 1
        if e == 0 or (x >> 4) == 0:
            v = x & 15
        out.append(v)
    return np.array(out)
fields = {"image": (np.uint8, 192), "label": (np.int64, 1), "emb": (np.float16, 5),
          "w": (np.float32, 6), "b": ("bf16", 4)}
d = sys.argv[1]
runs = 0
for name, (dt, n) in fields.items():
    raw = open(f"{d}/{name}.bin", "rb").read()
    if dt == "bf16":
        arr = np.frombuffer(raw, dtype=np.uint16).reshape(3000, n)
    else:
        arr = np.frombuffer(raw, dtype=dt).reshape(3000, n)
    for i in (0, 1, 2, 1234, 2999):
        v = values(42, name, i, n)
        want = (v.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16) if dt == "bf16" \
            else v.astype(dt)
        assert np.array_equal(arr[i], want), (name, i, arr[i][:8], want[:8])
    runs += int((arr[:, 1:] == arr[:, :-1]).sum()) if n > 1 else 0
# values repeat (runs) so lz4 has something to find
img = np.frombuffer(open(f"{d}/image.bin", "rb").read(), dtype=np.uint8).reshape(3000, 192)
rep = (img[:, 1:] == img[:, :-1]).mean()
assert 0.8 < rep < 0.95, rep
EOF

# ---- compression ratio: lz4 shrinks the synthetic data ------------------------------------
"$CLI" ingest synthetic -o "$work/syn-raw" --compress none --samples 2000 --seed 1 \
    --field image:u8:3x32x32 >/dev/null || fail "synthetic raw"
"$CLI" ingest synthetic -o "$work/syn-lz4" --compress lz4 --samples 2000 --seed 1 \
    --field image:u8:3x32x32 >/dev/null || fail "synthetic lz4"
"$CLI" ingest synthetic -o "$work/syn-hc" --compress lz4hc --level 12 --samples 2000 --seed 1 \
    --field image:u8:3x32x32 >/dev/null || fail "synthetic lz4hc"
s_raw=$(stat -c %s "$work/syn-raw/shard-00000.dsc")
s_lz4=$(stat -c %s "$work/syn-lz4/shard-00000.dsc")
s_hc=$(stat -c %s "$work/syn-hc/shard-00000.dsc")
[ "$s_raw" -gt 6144000 ] || fail "raw shard too small: $s_raw"
[ $((s_lz4 * 2)) -lt "$s_raw" ] || fail "lz4 did not halve the size: $s_lz4 vs $s_raw"
[ "$s_hc" -le "$s_lz4" ] || fail "lz4hc larger than lz4: $s_hc vs $s_lz4"
[ "$raw_size" -gt 0 ] || fail "no raw npy dataset"

# ---- output directory rules -------------------------------------------------------------
mkdir -p "$work/busy"
echo keep >"$work/busy/notes.txt"
# a directory holding anything but a dataset is never written (a replace swaps it whole)
for extra in "" --replace --force; do
    expect 1 "holds 'notes.txt', which is not part of a dataset" \
        "$CLI" ingest synthetic -o "$work/busy" $extra --samples 10 --field x:u8
done
[ -e "$work/busy/manifest.json" ] && fail "wrote into a directory holding other files"
[ -e "$work/busy/notes.txt" ] || fail "an unrelated file was removed"
# an empty directory is taken
mkdir -p "$work/empty"
expect 0 "ingested 10 samples" "$CLI" ingest synthetic -o "$work/empty" --samples 10 --field x:u8
# re-ingesting into a dataset directory needs --replace, and leaves no stale shards
expect 1 "syn-a exists and holds a dataset: pass --replace" \
    "$CLI" ingest synthetic -o "$work/syn-a" --samples 10 --field x:u8
[ "$(ls "$work"/syn-a/shard-*.dsc | wc -l)" -ge 2 ] || fail "a refused ingest changed syn-a"
expect 0 "ingested" "$CLI" ingest synthetic -o "$work/syn-a" --replace --samples 10 --field x:u8
[ "$(ls "$work"/syn-a/shard-*.dsc | wc -l)" -eq 1 ] || fail "stale shards left in syn-a"
expect 0 "verified" "$CLI" inspect "$work/syn-a"

# ---- bad arguments: exit 2 and a message ---------------------------------------------------
expect 2 "missing the input form" "$CLI" ingest
expect 2 "unknown input form" "$CLI" ingest parquet -o "$work/x"
expect 2 "missing -o" "$CLI" ingest synthetic --samples 5 --field x:u8
expect 2 "--samples" "$CLI" ingest synthetic -o "$work/x" --field x:u8
expect 2 "unknown dtype" "$CLI" ingest synthetic -o "$work/x" --samples 5 --field x:u7
expect 2 "dimension" "$CLI" ingest synthetic -o "$work/x" --samples 5 --field x:u8:3x0
expect 2 "dimension" "$CLI" ingest synthetic -o "$work/x" --samples 5 --field x:u8:3xx
expect 2 "name" "$CLI" ingest synthetic -o "$work/x" --samples 5 --field 'a b:u8'
expect 2 "not an integer" "$CLI" ingest synthetic -o "$work/x" --samples -5 --field x:u8
expect 2 "lz4hc" "$CLI" ingest synthetic -o "$work/x" --samples 5 --field x:u8 --level 3
expect 2 "not an integer" "$CLI" ingest synthetic -o "$work/x" --samples 5 --field x:u8 \
    --compress lz4hc --level 13
expect 2 "none, lz4 or lz4hc" "$CLI" ingest synthetic -o "$work/x" --samples 5 --field x:u8 \
    --compress zstd
expect 2 "not a size" "$CLI" ingest synthetic -o "$work/x" --samples 5 --field x:u8 \
    --shard-size 12Q
expect 2 "u16 or u32" "$CLI" ingest tokens -o "$work/x" --dtype f32 --seq-len 4 "$work/tiny.bin"
expect 2 "required" "$CLI" ingest tokens -o "$work/x" --dtype u16 "$work/tiny.bin"
expect 2 "ingest tokens' only" "$CLI" ingest synthetic -o "$work/x" --samples 5 --field x:u8 --seq-len 3
expect 2 "unknown option" "$CLI" ingest synthetic -o "$work/x" --samples 5 --field x:u8 --frobnicate
expect 2 "needs a value" "$CLI" ingest synthetic -o "$work/x" --samples 5 --field
expect 2 "valid dataset name|--name" "$CLI" ingest synthetic -o "$work/bad name" --samples 5 \
    --field x:u8
expect 0 "--shard-size" "$CLI" ingest --help
expect 0 "ingest" "$CLI" --help
expect 2 "unknown command" "$CLI" frobnicate
[ -e "$work/x" ] && fail "a refused command created its output directory"

finish
