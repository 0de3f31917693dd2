#!/usr/bin/env bash
# The verdict names the backing store (issue 21): a dataset 4x the server's RAM behind tests/slowfs
# capped far below the rate its misses need, read by `dscache bench` with a simulated step. The
# loader's verdict is `storage`, with the miss share, the rate obtained and the one zero stall
# needs, and a fix in numbers; the job table (STAT) records `storage` too. Against a server that
# sends no figures in its REPORT answers the verdict could not say it (it was `fetch`).
source "$(dirname "$0")/server_lib.sh"
source "$(dirname "$0")/slowfs_lib.sh"

# 20000 samples of 3080 bytes in 1 MiB chunks: 62 MB; the store holds a quarter of it.
"$CLI" ingest synthetic -o "$work/ds" --name sv --samples 20000 --field image:u8:3x32x32 \
    --field label:i64 --seed 1 --compress none --shard-size 4M --chunk-size 1M >/dev/null
# A batch of 256 samples (0.79 MB) per 5 ms step demands 158 MB/s; 3/4 of it misses, so zero
# stall needs about 118 MB/s from the store, capped here at 30 MB/s. The loader's cache (32 MiB)
# holds two shuffle windows of 4000 samples (25 MB) but not the dataset: nothing is refetched
# (with the dataset's default window it held 0.6 of two, and the refetches made it `cache`).
if ! mount_slowfs --latency-ms 5 --bandwidth 30M; then
    echo "SKIP: FUSE cannot mount here: $(tail -2 "$work/slowfs.log" | tr '\n' ' ')"
    exit 77
fi
start_server a --data "$mnt" --memory 16M --warm
out=$("$CLI" bench --server "$ADDR_a" --dataset sv --batch-size 256 --compute-ms 5 --seconds 12 \
    --cache 32M --shuffle-window 4000 --report-seconds 1 --job sv-bench 2>&1) || fail "dscache bench: $out"
limit=$(grep '^limit:' <<<"$out" || true)
sugg=$(grep '^suggestion:' <<<"$out" || true)
echo "$limit"
echo "$sugg"
grep -q '^limit: storage: ' <<<"$limit" && pass "the verdict names the backing store" \
    || fail "verdict is not storage: $limit"
grep -qE '[0-9]+% of the GETs missed the servers. RAM' <<<"$limit" && pass "evidence: the miss share" \
    || fail "evidence lacks the miss share: $limit"
grep -qE 'it delivered [0-9.]+ MB/s' <<<"$limit" && grep -qE 'zero stall needs [0-9.]+ MB/s' <<<"$limit" \
    && pass "evidence: the rate obtained and the one needed" || fail "evidence lacks the rates: $limit"
# The rate obtained is at most the cap (30 MB/s; 25% slack for the clock) and at least half of
# what the server read from the store over the whole run (its read_through_bytes over the bench's
# 12 s: what this machine's FUSE and server managed, not a figure assumed for it); the rate needed
# is above it (the store is short of it: how far depends on how fast this machine's loader and
# step demand, 118 MB/s on a quiet one, 46 beside other builds).
got=$(sed -nE 's/.*it delivered ([0-9.]+) MB\/s.*/\1/p' <<<"$limit")
need=$(sed -nE 's/.*zero stall needs ([0-9.]+) MB\/s.*/\1/p' <<<"$limit")
avg=$(json_get "$("$TOOL" call "$ADDR_a" STAT sv)" '"%.1f" % (j["store"]["read_through_bytes"] / 12 / 1e6)')
awk -v g="${got:-0}" -v n="${need:-0}" -v a="$avg" 'BEGIN { exit !(g >= 0.5 * a && g <= 37.5 && n > g) }' \
    && pass "storage delivered $got MB/s (cap 30; $avg MB/s read over the run), zero stall needs $need MB/s" \
    || fail "rates: delivered ${got:-?} MB/s, needed ${need:-?} MB/s (cap 30 MB/s; $avg MB/s read over the run)"
grep -qE 'of RAM' <<<"$sugg" && grep -qE '[0-9.]+ MB/s' <<<"$sugg" \
    && pass "the fix in numbers: $sugg" || fail "suggestion lacks numbers: $sugg"
job=$(json_get "$("$TOOL" call "$ADDR_a" STAT sv)" \
    '[x["bottleneck"] for x in j["jobs"] if x["job"] == "sv-bench"][0]')
[ "$job" = storage ] && pass "STAT job table: bottleneck storage" || fail "STAT job bottleneck: $job"
stop_server a
finish
