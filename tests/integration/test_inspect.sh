#!/usr/bin/env bash
# dscache inspect: a sound dataset passes; a flipped byte in a header, a chunk, the index or the
# footer, a truncated or missing shard, a damaged or inconsistent manifest each give exit 1 and a
# line naming the shard file (and chunk) and the damage; bad arguments give exit 2.
set -euo pipefail
DSC_BIN=${DSC_BIN:?DSC_BIN must point at the build bin directory}
PY=${DSC_PYTHON:-/usr/bin/python3}
CLI=$DSC_BIN/dscache
[ -x "$CLI" ] || { echo "SKIP: $CLI not built"; exit 77; }
"$PY" -c 'import json' 2>/dev/null || { echo "SKIP: no python at $PY"; exit 77; }

source "$(dirname "$0")/base_lib.sh" # $work, fail, expect CODE PATTERN CMD..., finish
# flip FILE OFFSET: inverts one byte in place
flip() {
    "$PY" - "$1" "$2" <<'EOF'
import sys
path, off = sys.argv[1], int(sys.argv[2])
with open(path, "r+b") as f:
    f.seek(off)
    b = f.read(1)
    f.seek(off)
    f.write(bytes([b[0] ^ 0xFF]))
EOF
}
# layout FILE: prints "index_offset chunk_count offset_of_chunk_2 stored_len_of_chunk_2"
layout() {
    "$PY" - "$1" <<'EOF'
import struct, sys
data = open(sys.argv[1], "rb").read()
index_offset, count = struct.unpack_from("<QI", data, len(data) - 32)
off, first, stored = struct.unpack_from("<QQI", data, index_offset + 2 * 48)
print(index_offset, count, off, stored)
EOF
}

good=$work/good
"$CLI" ingest synthetic -o "$good" --samples 4000 --seed 5 --field image:u8:3x16x16 \
    --field label:i64 --chunk-size 64K --shard-size 1M >/dev/null
expect 0 "every shard and chunk verified" "$CLI" inspect "$good"
expect 0 "ratio" "$CLI" inspect "$good"
out=$("$CLI" inspect --quiet "$good") || fail "inspect --quiet on a good dataset"
[ -z "$out" ] || fail "--quiet printed on a good dataset: $out"
"$CLI" inspect --json "$good" >"$work/good.json" || fail "inspect --json on a good dataset"
"$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["ok"] and d["samples"]==4000 and d["shard_count"]==3, d' \
    "$work/good.json" || fail "inspect --json summary"

fresh() { rm -rf "$work/bad"; cp -r "$good" "$work/bad"; }
victim=shard-00001.dsc
read -r index_offset chunk_count chunk2 chunk2_len <<<"$(layout "$good/$victim")"
[ "$chunk_count" -ge 3 ] || fail "test needs 3 chunks per shard, got $chunk_count"
size=$(stat -c %s "$good/$victim")

# a byte in the header
fresh; flip "$work/bad/$victim" 30
expect 1 "$victim: .*(corrupt or invalid shard header|DSC_EBADHEADER)" "$CLI" inspect "$work/bad"
# a byte inside chunk 2
fresh; flip "$work/bad/$victim" $((chunk2 + chunk2_len / 2))
expect 1 "$victim: chunk 2: chunk checksum mismatch.*DSC_ECHUNKSUM" "$CLI" inspect "$work/bad"
expect 1 "$victim: .*DSC_EFILESUM" "$CLI" inspect "$work/bad"
"$CLI" inspect --json "$work/bad" >"$work/bad.json" 2>/dev/null && fail "inspect --json passed damage"
"$PY" - "$work/bad.json" "$victim" <<'EOF' || fail "inspect --json problem list"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["ok"] is False
p = [x for x in d["problems"] if x["chunk"] is not None]
assert len(p) == 1 and p[0]["chunk"] == 2 and p[0]["file"] == sys.argv[2], d["problems"]
assert p[0]["error"] == "DSC_ECHUNKSUM", p
bad = [s["file"] for s in d["shards"] if not s["ok"]]
assert bad == [sys.argv[2]], bad
EOF
# the same in a dataset stored raw (no compression)
"$CLI" ingest synthetic -o "$work/raw" --compress none --samples 4000 --seed 5 \
    --field image:u8:3x16x16 --field label:i64 --chunk-size 64K --shard-size 1M >/dev/null
read -r _ _ raw2 raw2_len <<<"$(layout "$work/raw/$victim")"
flip "$work/raw/$victim" $((raw2 + raw2_len - 1))
expect 1 "$victim: chunk 2: .*DSC_ECHUNKSUM" "$CLI" inspect "$work/raw"
# a byte in the index (entry 1's stored_len)
fresh; flip "$work/bad/$victim" $((index_offset + 48 + 16))
expect 1 "$victim: .*(chunk index|DSC_EBADINDEX)" "$CLI" inspect "$work/bad"
# the footer: its end magic, and its index checksum
fresh; flip "$work/bad/$victim" $((size - 3))
expect 1 "$victim: .*(shard footer|DSC_EBADFOOTER)" "$CLI" inspect "$work/bad"
fresh; flip "$work/bad/$victim" $((size - 32 + 17))
expect 1 "$victim: .*DSC_EBADINDEX" "$CLI" inspect "$work/bad"
# the last byte of the file
fresh; flip "$work/bad/$victim" $((size - 1))
expect 1 "$victim: " "$CLI" inspect "$work/bad"
# truncated shard
fresh; truncate -s $((size - 100)) "$work/bad/$victim"
expect 1 "$victim: .*truncated" "$CLI" inspect "$work/bad"
fresh; : >"$work/bad/$victim"
expect 1 "$victim: .*empty file" "$CLI" inspect "$work/bad"
# missing shard file
fresh; rm "$work/bad/$victim"
expect 1 "$victim: cannot open: no such file" "$CLI" inspect "$work/bad"
# a shard that is another shard's file (header id differs from the manifest's)
fresh; cp "$work/bad/shard-00000.dsc" "$work/bad/$victim"
expect 1 "$victim: .*shard id" "$CLI" inspect "$work/bad"
# manifest: its checksum of a shard is wrong
fresh
"$PY" - "$work/bad/manifest.json" <<'EOF'
import json, sys
p = sys.argv[1]; m = json.load(open(p))
m["shards"][1]["checksum"] = "0123456789abcdef"
json.dump(m, open(p, "w"))
EOF
expect 1 "$victim: shard file checksum mismatch.*DSC_EFILESUM" "$CLI" inspect "$work/bad"
# manifest: a schema that does not match the shards (same sizes, other dtype), another name
fresh
"$PY" - "$work/bad/manifest.json" <<'EOF'
import json, sys
p = sys.argv[1]; m = json.load(open(p))
m["schema"][0]["dtype"] = "i8"
m["name"] = "other"
json.dump(m, open(p, "w"))
EOF
expect 1 "schema differs" "$CLI" inspect "$work/bad"
expect 1 "names dataset 'good', manifest 'other'" "$CLI" inspect "$work/bad"
# corrupt manifest, missing manifest, missing directory
fresh; printf '{"format": "dscache-manifest", "version": 1, "na' >"$work/bad/manifest.json"
expect 1 "manifest.json: cannot load the manifest: corrupt or invalid manifest" "$CLI" inspect "$work/bad"
fresh; printf '\x00\xff garbage' >"$work/bad/manifest.json"
expect 1 "cannot load the manifest" "$CLI" inspect "$work/bad"
fresh; rm "$work/bad/manifest.json"
expect 1 "manifest.json: no such file" "$CLI" inspect "$work/bad"
expect 1 "no such file" "$CLI" inspect "$work/does-not-exist"

# bad arguments
expect 2 "missing DIR" "$CLI" inspect
expect 2 "expected one DIR" "$CLI" inspect "$good" "$good"
expect 2 "unknown option" "$CLI" inspect --frobnicate "$good"
expect 0 "--quiet" "$CLI" inspect --help
expect 0 "--json" "$CLI" help inspect

finish
