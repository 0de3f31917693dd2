#!/usr/bin/env bash
# Finding: one tenant's hints for ranges it never reads filled the whole staging area, and
# another tenant's hints were answered "accepted" and never staged until the first one's entries
# expired. Now the staging area is divided between credentials (an equal part each, of it an
# equal part per job): credential A hinting far more than the area holds, and never reading, is
# trimmed to its part (the HINT answer says how many ranges were accepted and trimmed), and
# credential B's hints, sent after A filled the area, are staged (A's unread ranges beyond its
# part give way) and its GETs are served from staging.
source "$(dirname "$0")/server_lib.sh"
AUTH=$DSC_BIN/auth_check
[ -x "$AUTH" ] || { echo "SKIP: $AUTH not built"; exit 77; }

# 62 MB in 4 MiB shards of 256 KiB chunks (16 a shard); the store holds 16 MiB of it (warm and
# full, so that hinted shards are not loaded whole), the staging area 4 MiB.
"$CLI" ingest synthetic -o "$work/ds" --name st --samples 20000 --field image:u8:3x32x32 \
    --field label:i64 --seed 1 --compress none --shard-size 4M --chunk-size 256K >/dev/null
shards=$(json_get "$(cat "$work/ds/manifest.json")" 'len(j["shards"])')
S_A=alice-secret-0123456789abcdef0
S_B=bob-secret-fedcba98765432100
printf 'alice read %s\nbob read %s\n' "$S_A" "$S_B" >"$work/creds"
chmod 600 "$work/creds"
printf 'alice %s\n' "$S_A" >"$work/tok-a"
printf 'bob %s\n' "$S_B" >"$work/tok-b"
staging=$((4 << 20))
start_server a --data "$work/ds" --memory 16M --warm --auth-file "$work/creds" \
    --staging-memory "$staging" --staging-ttl 120
m() { metric "$HTTP_a" "$1"; }
resident=$(m dscache_cached_shards)
echo "shards $shards, resident $resident"
[ "$shards" -ge $((resident + 8)) ] || { echo "SKIP: only $shards shards, $resident resident"; exit 77; }
a0=$((shards - 8)) # A: 5 shards from a0, every chunk, 4 chunks a range (1 MiB): 20 MiB
b0=$((shards - 3)) # B: 3 other shards, 8 one-chunk ranges each (256 KiB): 6 MiB

# field LINE NAME: the number after NAME in LINE.
field() { awk -v k="$2" '{ for (i = 1; i < NF; i++) if ($i == k) print $(i + 1) }' <<<"$1"; }

out=$("$AUTH" stage "$ADDR_a" "$work/tok-a" st flood hint "$a0" 5 16 4 20000)
echo "A: $out"
a_ranges=$(field "$out" ranges) a_acc=$(field "$out" accepted) a_trim=$(field "$out" trimmed)
[ -n "$a_acc" ] && [ "$a_acc" -ge 1 ] && [ $((a_acc * (1 << 20))) -le "$staging" ] \
    && pass "A's flood trimmed to its part: $a_acc of $a_ranges ranges of 1 MiB accepted ($staging bytes staging)" \
    || fail "A's hint answer: $out (want 1..$((staging >> 20)) of $a_ranges accepted)"
[ "$(field "$out" long)" = 1 ] && [ "$((a_acc + a_trim))" = "$a_ranges" ] \
    && [ "$(field "$out" share)" = "$staging" ] \
    && pass "the long answer: $a_trim trimmed, share $staging bytes (A alone)" \
    || fail "A's long answer: $out"
# A's accepted ranges are read ahead (and never read by A).
staged_at_least() { local v; v=$(m dscache_staging_staged_total); [ "$v" -ge "$1" ]; }
until_ok 30 staged_at_least "$a_acc" || fail "A's ranges not staged: $(m dscache_staging_staged_total)"
echo "staging after A: $(m dscache_staging_bytes) bytes, staged $(m dscache_staging_staged_total)"

# B, after A filled its part: its hints are accepted within its part (half now) and staged.
hits0=$(m dscache_staging_hits_total)
out=$("$AUTH" stage "$ADDR_a" "$work/tok-b" st reader hint "$b0" 3 8 1 5000)
echo "B: $out"
b_acc=$(field "$out" accepted)
[ -n "$b_acc" ] && [ "$b_acc" -ge 1 ] && [ "$(field "$out" share)" = $((staging / 2)) ] \
    && pass "B's hints accepted within its half: $b_acc ranges" || fail "B's hint answer: $out"
want=$((a_acc + b_acc))
until_ok 20 staged_at_least "$want" \
    && pass "B's ranges staged beside A's flood (staged $(m dscache_staging_staged_total), reclaimed $(m dscache_staging_reclaimed_total))" \
    || fail "B's ranges not staged within 20 s: staged $(m dscache_staging_staged_total) of $want, pending $(m dscache_staging_pending), bytes $(m dscache_staging_bytes)"
out=$("$AUTH" stage "$ADDR_a" "$work/tok-b" st reader get "$b0" 3 8 1 5000)
hits=$(( $(m dscache_staging_hits_total) - hits0 ))
echo "B: $out, staging hits $hits"
[ "$hits" -ge "$b_acc" ] && pass "B's GETs served from staging ($hits of its $b_acc accepted ranges)" \
    || fail "B's GETs from staging: $hits (want >= $b_acc); $out"
trimmed=$(m dscache_staging_trimmed_total)
[ "$trimmed" -ge "$a_trim" ] && pass "trimmed ranges counted ($trimmed)" \
    || fail "dscache_staging_trimmed_total $trimmed"
# A loader whose hints are trimmed says so (once per connection), naming the server and its part.
DSCACHE_LOG=warn DSCACHE_TOKEN_FILE=$work/tok-a timeout 120 "$CLI" bench --server "$ADDR_a" --dataset st \
    --batch-size 128 --compute-ms 1 --epochs 1 --seed 7 --cache 64M --job late \
    >"$work/bench.out" 2>&1 || fail "dscache bench as alice: $(tail -3 "$work/bench.out")"
line=$(grep -m1 'read-ahead trimmed' "$work/bench.out" || true)
echo "loader: $line"
[ -n "$line" ] && grep -q "$ADDR_a" <<<"$line" && pass "the loader warns that its hints were trimmed" \
    || fail "no 'read-ahead trimmed' warning from the loader: $(grep -i hint "$work/bench.out" | head -3)"
stop_server a
finish
