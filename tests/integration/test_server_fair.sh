#!/usr/bin/env bash
# Fair service under --send-rate (server/fairq.c): two greedy jobs, "heavy" with weight 3 from
# the config file (job_weight) and "light" (weight 1), two connections each, read at once from a
# server whose send rate is the limit. With --fair on (the default) the bytes sent to each, from
# /metrics (dscache_job_sent_bytes_total), are in the ratio of their weights; with --fair off
# (arrival order) they are about equal. The total stays within the cap, and the loaders (which
# check every chunk's checksum) get their answers whole although they are queued in pieces. The
# ratios are checked where the cap is the limit (the loaders take 60% of it or more); a machine
# too busy for that makes the test skip, saying so, once everything else has been checked.
set -euo pipefail
source "$(dirname "$0")/server_lib.sh"
RATE_MB=40
"$CLI" ingest synthetic -o "$work/ds" --name fair --samples 12000 --field x:u8:4096 \
    --compress none >/dev/null
cat >"$work/fair.json" <<JSON
{"send_rate": "${RATE_MB}M", "job_weight": ["heavy=3"]}
JSON

# sent NAME: "HEAVY LIGHT T", the bytes sent to each job so far and the time (s).
sent() {
    local http_var="HTTP_$1" body
    body=$(curl -sf "http://${!http_var}/metrics")
    awk -v t="$(date +%s.%N)" '$1 == "dscache_job_sent_bytes_total{job=\"heavy\"}" { h = $2 }
        $1 == "dscache_job_sent_bytes_total{job=\"light\"}" { l = $2 }
        END { print (h == "" ? 0 : h), (l == "" ? 0 : l), t }' <<<"$body"
}

run_pair() { # run_pair SERVER_NAME: the two jobs at once for 4 s; the totals from 1 s to 3 s
    local addr_var="ADDR_$1"
    for job in heavy light; do
        "$CLI" bench --server "${!addr_var}" --dataset fair --batch-size 64 --seconds 4 \
            --connections 2 --prefetch 8 --cache 8M --shuffle-window 512 --job "$job" \
            >"$work/bench-$1-$job.txt" 2>&1 &
        pids+=("$!")
    done
    sleep 1.5
    read -r h0 l0 t0 <<<"$(sent "$1")"
    sleep 2
    read -r h1 l1 t1 <<<"$(sent "$1")"
    local p rc
    for p in "${pids[@]: -2}"; do
        rc=0
        wait "$p" || rc=$?
        [ "$rc" = 0 ] || fail "fair $1: a bench exited $rc (answers cut in pieces must arrive whole)"
    done
}

check() { # check MODE: ratio heavy/light over the middle of the run within the mode's bounds
    local heavy light ratio total
    heavy=$(awk -v a="$h0" -v b="$h1" 'BEGIN { print b - a }')
    light=$(awk -v a="$l0" -v b="$l1" 'BEGIN { print b - a }')
    ratio=$(awk -v a="$heavy" -v b="$light" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 99) }')
    total=$(awk -v a="$heavy" -v b="$light" -v t="$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" \
        'BEGIN { printf "%.1f", (a + b) / t / 1e6 }')
    echo "fair $1: heavy $heavy bytes, light $light bytes: ratio $ratio, $total MB/s in all"
    # The cap (totals are counted in steps of a few answers: some slack).
    awk -v t="$total" -v r="$RATE_MB" 'BEGIN { exit !(t <= r * 1.048576 * 1.2) }' ||
        fail "fair $1: $total MB/s sent in all, over --send-rate ${RATE_MB}M"
    # The ratio says something only where the cap is the limit (answers wait in its queue): a
    # machine too busy for the two loaders to take 60% of it is not, and says so.
    if ! awk -v t="$total" -v r="$RATE_MB" 'BEGIN { exit !(t >= r * 0.6) }'; then
        unbound+=("fair $1: the loaders took $total MB/s of the ${RATE_MB}M cap (under 60%)")
        return 0
    fi
    if [ "$1" = on ]; then
        awk -v x="$ratio" 'BEGIN { exit !(x >= 2.2 && x <= 4.0) }' ||
            fail "fair on: heavy/light $ratio, wanted about 3 (weights 3:1)"
    else
        awk -v x="$ratio" 'BEGIN { exit !(x >= 0.6 && x <= 1.7) }' ||
            fail "fair off: heavy/light $ratio, wanted about 1 (arrival order)"
    fi
}

unbound=()
start_server on --data "$work/ds" --memory 256M --warm --config "$work/fair.json" --threads 2 \
    --log-level error
[ "$(metric "$HTTP_on" 'dscache_send_rate_bytes')" = $((RATE_MB << 20)) ] ||
    fail "dscache_send_rate_bytes is not --send-rate"
run_pair on
check on
# Copied-body answers (STAT, its JSON in the frame) go through the same queue whole.
json_get "$("$TOOL" call "$ADDR_on" STAT fair)" "j['datasets'][0]['name']" | grep -qx fair \
    || fail "STAT under --send-rate"
[ "$(metric "$HTTP_on" 'dscache_job_weight{job="heavy"}')" = 3 ] ||
    fail "dscache_job_weight{job=\"heavy\"} is not the configured 3"
q=$(metric "$HTTP_on" 'dscache_job_queue_seconds_total{job="light"}')
awk -v q="$q" 'BEGIN { exit !(q > 0) }' || fail "no queue time counted for the light job ($q)"
# A loader killed while its answers wait in the queue: the server drops them (their holds
# released) and goes on serving the other job.
"$CLI" bench --server "$ADDR_on" --dataset fair --batch-size 64 --seconds 3 --connections 4 \
    --prefetch 8 --cache 8M --shuffle-window 512 --job victim >/dev/null 2>&1 &
victim=$!
pids+=("$victim")
"$CLI" bench --server "$ADDR_on" --dataset fair --batch-size 64 --seconds 2 --connections 1 \
    --cache 8M --shuffle-window 512 --job survivor >"$work/survivor.txt" 2>&1 &
survivor=$!
pids+=("$survivor")
sleep 1
kill -KILL "$victim"
rc=0
wait "$survivor" || rc=$?
[ "$rc" = 0 ] && kill -0 "$PID_on" 2>/dev/null && pass "a loader killed mid-queue: the other served" \
    || fail "after killing a loader with queued answers: survivor rc $rc: $(tail -2 "$work/survivor.txt")"
stop_server on
[ "$STOP_RC" = 0 ] || fail "server exit $STOP_RC after the kill"

start_server off --data "$work/ds" --memory 256M --warm --config "$work/fair.json" --threads 1 \
    --fair off \
    --log-level error
run_pair off
check off
stop_server off
expect 1 "job-weight" "$SERVER" --data "$work/ds" --job-weight "heavy=0"
expect 1 "fair" "$SERVER" --data "$work/ds" --fair maybe
if [ "$fails" = 0 ] && [ ${#unbound[@]} -gt 0 ]; then
    echo "SKIP: the send rate was not the limit, so the shares could not be told: ${unbound[*]}"
    exit 77
fi
finish
