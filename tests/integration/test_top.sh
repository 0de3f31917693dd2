#!/usr/bin/env bash
# dscache top against a live cluster on loopback: two dscached, a loader (dscache bench) that
# reports its job to both. --once prints one frame with both servers, the dataset's resident
# fraction and the job with its stall and verdict; the live view, driven in tmux (send-keys /
# capture-pane), refreshes and quits on q. STAT lists the job (JSON, and the table of `dscache
# stat`); /metrics has its series.
source "$(dirname "$0")/server_lib.sh"
command -v tmux >/dev/null || { echo "SKIP: tmux is not installed (deploy/local/setup.sh)"; exit 77; }
TMUX_SOCK="dsctop$$"
stop_tmux() { tmux -L "$TMUX_SOCK" kill-server 2>/dev/null || true; }
cleanup_hooks+=(stop_tmux)

make_dataset "$work/ds" topds 20000 lz4
start_server a --data "$work/ds"
start_server b --data "$work/ds"
servers="$ADDR_a,$ADDR_b"

# A job that reads for a while, reporting every 0.5 s.
"$CLI" bench --server "$servers" --dataset topds --batch-size 64 --seconds 30 --compute-ms 2 \
    --job top-test-job --report-seconds 0.5 >"$work/bench.txt" 2>&1 &
bench_pid=$!
pids+=("$bench_pid")
has_job() { "$CLI" stat --server "$1" --json | grep -q '"job":"top-test-job"'; }
until_ok 20 has_job "$ADDR_a" || fail "STAT of server a never listed the job"
until_ok 20 has_job "$ADDR_b" || fail "STAT of server b never listed the job"
"$CLI" stat --server "$ADDR_a" --json >"$work/stat.json"
grep -qE '"job":"top-test-job","rank":0,"world_size":1,"dataset":"topds","peer":"127\.0\.0\.1(:[0-9]+)?","stall":[0-9.e-]+' \
    "$work/stat.json" && pass "STAT lists the job with rank, peer and stall" \
    || fail "STAT job entry: $(cat "$work/stat.json")"
# The table view: the jobs after the datasets, one line per rank with stall, rate and age.
"$CLI" stat --server "$ADDR_a" >"$work/stat.txt" || fail "stat (table) failed"
grep -qE '^JOB +RANK +DATASET +STALL +SAMPLES/S +AGE$' "$work/stat.txt" \
    && grep -qE '^top-test-job +0/1 +topds +[0-9.]+% +[0-9]+ +[0-9.]+s$' "$work/stat.txt" \
    && [ "$(grep -n '^JOB ' "$work/stat.txt" | cut -d: -f1)" -gt \
         "$(grep -n '^DATASET ' "$work/stat.txt" | cut -d: -f1)" ] \
    && pass "stat prints the jobs table (job, rank, dataset, stall, samples/s, age) after the datasets" \
    || fail "stat table lacks the job: $(cat "$work/stat.txt")"
metrics=$(curl -sf "http://$HTTP_a/metrics")
grep -qE '^dscache_job_stall_fraction\{job="top-test-job",rank="0",dataset="topds"\} ' <<<"$metrics" \
    && pass "/metrics: dscache_job_stall_fraction of the job" || fail "/metrics lacks the job's stall"
grep -qE '^dscache_dataset_resident_fraction\{dataset="topds"\} ' <<<"$metrics" \
    || fail "/metrics lacks the resident fraction"

# --once: one frame for scripts (once the job has measured enough for a verdict; by the time top
# reads it the window may say unknown: no stage is the limit, e.g. planning under ASan).
has_verdict() {
    "$CLI" stat --server "$ADDR_a" --json | grep -qE '"job":"top-test-job"[^}]*"bottleneck":"(none|fetch|server|decode|collate|h2d|cache|inflight)"'
}
until_ok 20 has_verdict || fail "the job never reported a verdict"
"$CLI" top --once --interval 0.5 --server "$servers" >"$work/once.txt" 2>&1 || fail "top --once failed"
for pattern in "^dscache top" "^$ADDR_a +[0-9.]+ +[0-9.]+ +[0-9]+ " "^$ADDR_b " \
    "^topds +[0-9]+ +[0-9.]+% " \
    "^top-test-job +topds +1/1 +[0-9.]+ +[0-9.]+ +[1-9][0-9]* +(none|fetch|server|decode|collate|h2d|cache|inflight|unknown) "; do
    grep -qE "$pattern" "$work/once.txt" || fail "top --once lacks /$pattern/: $(cat "$work/once.txt")"
done
pass "top --once: servers, dataset resident fraction, the job with stall, rate and verdict"
cat "$work/once.txt"

# A server that is down shows as such; top still draws the others.
expect 0 "$ADDR_a" "$CLI" top --once --interval 0.2 --server "$ADDR_a,127.0.0.1:1"
expect 1 "no server answered" "$CLI" top --once --interval 0.2 --server 127.0.0.1:1
expect 2 "--server is required" "$CLI" top --once

# The live view in a terminal: it refreshes, and q quits.
tmux -L "$TMUX_SOCK" new-session -d -s top -x 160 -y 40 \
    "$CLI top --server $servers --interval 0.3; echo TOP-EXITED-\$?; sleep 30"
frame() { tmux -L "$TMUX_SOCK" capture-pane -p -t top; }
until_ok 10 bash -c "$(declare -f frame); TMUX_SOCK=$TMUX_SOCK; frame | grep -q 'top-test-job'" \
    || fail "tmux: the live view never showed the job: $(frame)"
first=$(frame | head -1)
sleep 1.5
second=$(frame | head -1)
[ "$first" != "$second" ] && pass "tmux: the view refreshes ($first -> $second)" \
    || fail "tmux: the header did not change in 1.5 s: $first"
frame | grep -q "q quits" || fail "tmux: the view does not say how to quit"
tmux -L "$TMUX_SOCK" send-keys -t top q
until_ok 5 bash -c "$(declare -f frame); TMUX_SOCK=$TMUX_SOCK; frame | grep -q 'TOP-EXITED-0'" \
    && pass "tmux: q quits with status 0" || fail "tmux: q did not quit: $(frame)"

# A narrow terminal: lines are cut to its width (ending in ...), never wrapped into the next row.
tmux -L "$TMUX_SOCK" new-session -d -s narrow -x 72 -y 40 \
    "$CLI top --server $servers --interval 0.3; sleep 30"
narrow() { tmux -L "$TMUX_SOCK" capture-pane -p -J -t narrow; }
until_ok 10 bash -c "$(declare -f narrow); TMUX_SOCK=$TMUX_SOCK; narrow | grep -q '^top-test-job'" \
    || fail "tmux (72 columns): the live view never showed the job: $(narrow)"
long=$(narrow | awk 'length($0) > 72' | head -3)
[ -z "$long" ] && pass "tmux (72 columns): no line wraps" \
    || fail "tmux (72 columns): lines wrap past the width: $long"
narrow | grep -qE '^top-test-job .*\.\.\.$' && pass "tmux (72 columns): the job's line is cut with ..." \
    || fail "tmux (72 columns): the job's line is not cut: $(narrow | grep top-test-job)"
tmux -L "$TMUX_SOCK" send-keys -t narrow q

kill "$bench_pid" 2>/dev/null || true
finish
