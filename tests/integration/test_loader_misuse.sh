#!/usr/bin/env bash
# The mistakes a user makes with the C loader (misuse_check, a plain C program over the public
# API) each get an error or warning that names the cause and the fix, never silence:
#   - rank / world_size that disagree with the launcher's RANK / WORLD_SIZE: create fails naming
#     both (ignore_rank_env = 1 allows it; rank and world size taken from them read half each);
#   - an epoch with no batch for a rank (batch_size over a rank's share with drop_last): create
#     fails with samples, per rank, batch size and drop_last; a dropped last batch is one WARN
#     with the samples never seen, once over three epochs;
#   - a server entry without a port; the HTTP port given as the data port (the data port named,
#     by the loader and by the CLI);
#   - a damaged chunk with no other source: one error naming server, dataset, shard file, chunk
#     and the fixes, with its DSC_E code once;
#   - dscached --data on a folder without a manifest points at dscache ingest;
#   - a loader that closes sends a final REPORT: STAT and dscache top show the job finished; the
#     default job name comes from torchrun's run id or Slurm's job id.
source "$(dirname "$0")/server_lib.sh"
CHECK=$DSC_BIN/misuse_check
for exe in "$CHECK" "$DSC_BIN/shard_damage"; do
    [ -x "$exe" ] || { echo "SKIP: $exe not built"; exit 77; }
done
# The launcher's variables of whoever runs the suite must not leak into the checks.
unset RANK WORLD_SIZE LOCAL_RANK TORCHELASTIC_RUN_ID SLURM_JOB_ID DSCACHE_JOB DSCACHE_LOG

"$CLI" ingest synthetic -o "$work/d" --name d --samples 300 --field x:u8:4 --field y:i64 \
    --chunk-size 1K --seed 1 >/dev/null
cp -r "$work/d" "$work/flip"
"$DSC_BIN/shard_damage" flip "$work/flip" 0 >/dev/null
start_server a --data "$work/d"

# ---- ranks against the launcher's environment ------------------------------------------------
expect 3 'DSC_EINVAL: .*rank 0 / world_size 1 disagree with the launcher.s environment RANK=1 WORLD_SIZE=2.*ignore_rank_env' \
    env RANK=1 WORLD_SIZE=2 "$CHECK" --servers "$ADDR_a" --dataset d
expect 3 'rank 1 / world_size 4 disagree .* RANK=1 WORLD_SIZE=2' \
    env RANK=1 WORLD_SIZE=2 "$CHECK" --servers "$ADDR_a" --dataset d --rank 1 --world 4
expect 0 'done: [0-9]+ batches, 300 samples' \
    env RANK=1 WORLD_SIZE=2 "$CHECK" --servers "$ADDR_a" --dataset d --ignore-rank-env 1
expect 0 'done: [0-9]+ batches, 150 samples' \
    env RANK=1 WORLD_SIZE=2 "$CHECK" --servers "$ADDR_a" --dataset d --rank 1 --world 2
pass "rank / world_size against RANK / WORLD_SIZE"

# ---- epochs with no batch; the dropped last batch --------------------------------------------
expect 3 'DSC_EINVAL: .*no batch: dataset d has 300 samples, 300 per rank over world_size 1, fewer than batch_size 1000, and drop_last' \
    "$CHECK" --servers "$ADDR_a" --dataset d --batch 1000 --drop-last 1
expect 3 '300 samples, 150 per rank over world_size 2, fewer than batch_size 200.*at most 150' \
    "$CHECK" --servers "$ADDR_a" --dataset d --batch 200 --drop-last 1 --world 2 --rank 1
out=$("$CHECK" --servers "$ADDR_a" --dataset d --batch 128 --drop-last 1 --epochs 3 2>&1) \
    || fail "drop_last epochs: $out"
n=$(grep -c 'log warn: loader: drop_last: each epoch hands out 256 of the 300 samples of d .*44 samples per epoch are never seen' <<<"$out" || true)
[ "$n" = 1 ] && pass "a dropped last batch is said once: $(grep 'drop_last:' <<<"$out")" \
    || fail "drop_last WARN $n times (wanted 1): $out"
grep -q 'done: 6 batches, 768 samples' <<<"$out" || fail "drop_last: 2 batches an epoch: $out"

# ---- server addresses ------------------------------------------------------------------------
expect 3 'DSC_EINVAL: servers "127.0.0.1": "127.0.0.1" is not HOST:PORT' \
    "$CHECK" --servers 127.0.0.1 --dataset d
expect 3 "server $HTTP_a: that is dscached's HTTP port .*; the data port is $ADDR_a" \
    "$CHECK" --servers "$HTTP_a" --dataset d
expect 1 "dscache stat: $HTTP_a: that is dscached's HTTP port .*; the data port is $ADDR_a" \
    "$CLI" stat --server "$HTTP_a"
pass "a server without a port, the HTTP port as data port (loader and CLI)"

# ---- a damaged chunk, no other source --------------------------------------------------------
START_NO_WAIT=1 start_server b --data "$work/flip"
out=$("$CHECK" --servers "$ADDR_b" --dataset d --batch 50 2>&1) && fail "damaged: no error: $out"
line=$(grep '^next failed' <<<"$out" || true)
why=${line#next failed: DSC_ECORRUPT: }
if [ "$why" = "$line" ] || [ -z "$line" ]; then
    fail "damaged chunk: not DSC_ECORRUPT: $out"
else
    grep -qE "^(loader failed: )?dataset d shard 0 \(shard-00000\.dsc\) chunk [0-9]+: .*server $ADDR_b" <<<"$why" \
        || fail "the error names dataset, shard file, chunk and server: $why"
    for fix in fallback_path '--replicas' 're-ingest' 'dscache inspect'; do
        grep -qF -- "$fix" <<<"$why" || fail "the error lacks the fix '$fix': $why"
    done
    [ "$(grep -o 'DSC_E[A-Z]*' <<<"$why" | wc -l)" = 1 ] || fail "the code more than once: $why"
    pass "damaged chunk: $why"
fi

# ---- dscached --data on a folder without a manifest -----------------------------------------
mkdir -p "$work/empty"
START_NO_WAIT=1 start_server e --data "$work/empty"
grep -q -- "--data $work/empty has no manifest.json .*dscache ingest" "$work/server-e.log" \
    && pass "--data without a manifest points at dscache ingest" \
    || fail "no pointer at dscache ingest: $(cat "$work/server-e.log")"
stop_server e

# ---- the final REPORT, the job name from the launcher -----------------------------------------
"$CHECK" --servers "$ADDR_a" --dataset d --job misuse-job >/dev/null || fail "job run"
TORCHELASTIC_RUN_ID=rid7 "$CHECK" --servers "$ADDR_a" --dataset d >/dev/null || fail "torchrun run"
SLURM_JOB_ID=4242 "$CHECK" --servers "$ADDR_a" --dataset d >/dev/null || fail "slurm run"
stat=$("$CLI" stat --server "$ADDR_a" --json)
for job in misuse-job torchrun-rid7 slurm-4242; do
    grep -qE "\"job\":\"$job\"[^}]*\"finished\":true" <<<"$stat" \
        && pass "job $job listed, finished" || fail "job $job not listed as finished: $stat"
done
"$CLI" top --once --server "$ADDR_a" >"$work/top.txt" 2>&1 || fail "top --once"
grep -qE '^misuse-job +d +1/1 .* finished +finished [0-9]+ s ago' "$work/top.txt" \
    && pass "dscache top shows the job finished" || fail "top: $(cat "$work/top.txt")"
finish
