#!/usr/bin/env bash
# Regenerates the seed corpora of fuzz_shard (small valid shards, written by the shard unit tests:
# version 1 by test_shard, version 2 by test_shard_v2 beside it) and fuzz_manifest (small valid
# manifests). Usage: make_format_seeds.sh PATH/TO/test_shard
set -euo pipefail
test_shard=${1:?usage: $0 PATH/TO/test_shard}
here=$(cd "$(dirname "$0")" && pwd)
"$test_shard" --write-corpus "$here/corpus/fuzz_shard"
"${test_shard}_v2" --write-corpus "$here/corpus/fuzz_shard"

out=$here/corpus/fuzz_manifest
mkdir -p "$out"
cat >"$out/two-shards.json" <<'JSON'
{"format":"dscache-manifest","version":1,"name":"demo","sample_bytes":72,"samples":30,
 "schema":[{"name":"x","dtype":"f32","shape":[4,4]},{"name":"y","dtype":"i64","shape":[]}],
 "shards":[{"id":0,"file":"shard-00000.dsc","samples":20,"bytes":4096,"chunks":3,"chunk_samples":8,"checksum":"0123456789abcdef"},
           {"id":1,"file":"shard-00001.dsc","samples":10,"bytes":2048,"chunks":2,"chunk_samples":8,"checksum":"FEDCBA9876543210"}]}
JSON
cat >"$out/big-values.json" <<'JSON'
{"format":"dscache-manifest","version":1,"name":"tokens.v2","sample_bytes":64,"samples":"0x2000000000303a",
 "schema":[{"name":"input_ids","dtype":"uint16","shape":[32]}],
 "shards":[{"id":0,"file":"a.dsc","samples":"0x20000000000001","bytes":"0x1000000000000003","chunks":"0x80000001","chunk_samples":4194304,"checksum":"ffffffffffffffff"},
           {"id":1,"file":"b.dsc","samples":0,"bytes":83,"chunks":0,"chunk_samples":1,"checksum":"0000000000000000"},
           {"id":2,"file":"c.dsc","samples":12345,"bytes":9999999,"chunks":1,"chunk_samples":16384,"checksum":"00000000deadbeef"}]}
JSON
cat >"$out/every-dtype.json" <<'JSON'
{"format":"dscache-manifest","version":1,"name":"all","sample_bytes":38,"samples":5,
 "schema":[{"name":"a","dtype":"u8","shape":[]},{"name":"b","dtype":"i8","shape":[1]},
           {"name":"c","dtype":"u16","shape":[1,1]},{"name":"d","dtype":"i16","shape":[]},
           {"name":"e","dtype":"u32","shape":[]},{"name":"f","dtype":"i32","shape":[]},
           {"name":"g","dtype":"i64","shape":[]},{"name":"h","dtype":"f16","shape":[]},
           {"name":"i","dtype":"bf16","shape":[]},{"name":"j","dtype":"f32","shape":[]},
           {"name":"k","dtype":"float64","shape":[1,1,1,1,1,1,1,1]}],
 "shards":[{"id":0,"file":"s.dsc","samples":5,"bytes":1000,"chunks":3,"chunk_samples":2,"checksum":"0123456789ABCDEF"}]}
JSON
cat >"$out/variable.json" <<'JSON'
{"format":"dscache-manifest","version":2,"name":"sft","sample_bytes":8,"samples":30,
 "schema":[{"name":"input_ids","dtype":"i32","shape":[null],"rows_total":300,"rows_max":40,"bytes_max":160,"bytes_mean":40},
           {"name":"label","dtype":"i64","shape":[]},
           {"name":"mel","dtype":"f32","shape":[null,80],"rows_total":10,"rows_max":3,"bytes_max":960,"bytes_mean":106.66666666666667}],
 "meta":{"classes":["cat","dog"],"n":2},
 "shards":[{"id":0,"file":"shard-00000.dsc","samples":30,"bytes":4096,"chunks":4,"chunk_samples":8,"checksum":"0123456789abcdef"}]}
JSON
cat >"$out/meta-v1.json" <<'JSON'
{"format":"dscache-manifest","version":1,"name":"img","sample_bytes":3080,"samples":2,
 "schema":[{"name":"image","dtype":"u8","shape":[3,32,32]},{"name":"label","dtype":"i64","shape":[]}],
 "meta":{"classes":["a","b"],"nested":{"x":[1,2.5,null,true]}},
 "shards":[{"id":0,"file":"s.dsc","samples":2,"bytes":9000,"chunks":1,"chunk_samples":2,"checksum":"0123456789abcdef"}]}
JSON
echo "wrote $(ls "$out" | wc -l) manifest seeds to $out"
