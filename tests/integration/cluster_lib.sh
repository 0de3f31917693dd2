# Shared by the cluster tests (sourced): dscached members started by PID with a members file,
# cluster_check trainer ranks, and the exactly-once check over the sample ids they wrote.
# Sources base_lib.sh ($work, pids, cleanup_hooks, fail/pass/finish, until_ok, json_get). $DSC_RUN,
# when set (e.g. "netns_exec 5"), prefixes the srv_client calls, to run them from another host.
DSC_BIN=${DSC_BIN:?DSC_BIN must point at the build bin directory}
PY=${DSC_PYTHON:-/usr/bin/python3}
for exe in dscache dscached cluster_check srv_client; do
    [ -x "$DSC_BIN/$exe" ] || { echo "SKIP: $DSC_BIN/$exe not built"; exit 77; }
done
source "$(dirname "${BASH_SOURCE[0]}")/base_lib.sh"

declare -gA ADDR PID
# start_member NAME ARGS...: dscached on 127.0.0.1 port 0 (--http off) with ARGS, its log in
# $work/server-NAME.log; sets ADDR[NAME] and PID[NAME]; exits 1 when no port shows up in 5 s.
start_member() {
    local name=$1 pf=$work/$1.port; shift
    "$DSC_BIN/dscached" --listen 127.0.0.1:0 --http off --port-file "$pf" "$@" \
        >"$work/server-$name.log" 2>&1 &
    PID[$name]=$!
    pids+=("$!")
    for _ in $(seq 100); do
        [ -s "$pf" ] && break
        sleep 0.05
    done
    [ -s "$pf" ] || { cat "$work/server-$name.log"; echo "FAIL: $name wrote no port"; exit 1; }
    ADDR[$name]=127.0.0.1:$(cat "$pf")
}

# write_members FILE ADDR...: replaces the members file at once (the servers re-read it).
write_members() {
    local file=$1; shift
    printf '%s\n' "$@" >"$file.tmp"
    mv "$file.tmp" "$file"
}

DSC_RUN=${DSC_RUN:-}
members_count() { json_get "$($DSC_RUN "$DSC_BIN/srv_client" call "$1" MEMBERS)" 'len(j["members"])'; }
# warmed ADDR DATASET: the server holds every shard it owns.
warmed() {
    [ "$(json_get "$($DSC_RUN "$DSC_BIN/srv_client" call "$1" STAT "$2")" \
        'j["datasets"][0]["owned_cached_shards"] == j["datasets"][0]["owned_shards"] > 0')" = True ]
}
has_members() { [ "$(members_count "$1")" = "$2" ]; }

# check_exactly_once SAMPLES EPOCHS IDS_FILE...: every (epoch, sample) exactly once over the
# files (lines "EPOCH SAMPLE"); prints a summary; 1 on a missing, repeated or foreign sample.
check_exactly_once() {
    local samples=$1 epochs=$2; shift 2
    sort -k1,1n -k2,2n "$@" | awk -v n="$samples" -v e="$epochs" '
        { total++; if ($0 == prev) dup++; prev = $0; if ($2 >= n || $1 >= e) bad++ }
        END {
            printf "%d ids over %d epoch(s) of %d samples: %d repeated, %d out of range\n",
                total, e, n, dup, bad
            exit (dup == 0 && bad == 0 && total == n * e) ? 0 : 1
        }'
}

# sum_stat FIELD FILE...: sums "FIELD N" over the ranks' summary lines.
sum_stat() {
    local field=$1; shift
    cat "$@" | awk -v f="$field" '{ for (i = 1; i < NF; i++) if ($i == f) s += $(i + 1) } END { print s + 0 }'
}

# start_failover_ranks [LAUNCH]: trainer ranks 0 and 1 of world 2 reading 2 epochs of $ds over
# file:$members (bytes checked against $work/$ds; 1 s time-out, 6 ms steps, a shuffle window,
# cache and in-flight budget small enough that fetching goes on all epoch), in the background,
# each as `LAUNCH RANK cluster_check ...` when LAUNCH (a command) is given. Each writes
# $work/rank$r.out, rank$r.err and ids.$r. Sets rank_pids and ranks_start ($SECONDS at the
# start); returns once both passed batch 30.
start_failover_ranks() {
    local r run=()
    rank_pids=()
    ranks_start=$SECONDS
    for r in 0 1; do
        [ $# -ge 1 ] && run=("$1" "$r")
        "${run[@]}" "$DSC_BIN/cluster_check" epoch --servers "file:$members" --dataset "$ds" \
            --dir "$work/$ds" --rank "$r" --world 2 --epochs 2 --timeout-ms 1000 --slow-ms 6 \
            --mark-at 30 --mark "$work/mark.$r" --window 512 --cache 262144 --inflight 131072 \
            --ids "$work/ids.$r" >"$work/rank$r.out" 2>"$work/rank$r.err" &
        rank_pids+=("$!")
        pids+=("$!")
    done
    until_ok 20 test -e "$work/mark.0" -a -e "$work/mark.1" || fail "ranks made no progress"
}

# check_failover_ranks WHAT BOUND_S TIMED_OUT_ADDR: waits for the ranks of start_failover_ranks
# (showing their summary lines), then checks: each exited 0, every sample exactly once per epoch
# over both, failovers or slow marks counted, done within BOUND_S seconds of their start, and the server at
# TIMED_OUT_ADDR given up on by the time-out. WHAT describes the run in the verdict lines.
check_failover_ranks() {
    local what=$1 bound=$2 timed_out=$3 i rc took failovers retries slow
    for i in "${!rank_pids[@]}"; do
        rc=0
        wait "${rank_pids[$i]}" || rc=$?
        cat "$work/rank$i.out"
        [ "$rc" = 0 ] || { tail -20 "$work/rank$i.err"; fail "rank $i exited $rc"; }
    done
    took=$((SECONDS - ranks_start))
    check_exactly_once "$samples" 2 "$work/ids.0" "$work/ids.1" \
        && pass "2 ranks x 2 epochs, $what: exactly once, bytes checked" \
        || fail "$what: not exactly once"
    failovers=$(sum_stat failovers "$work/rank0.out" "$work/rank1.out")
    retries=$(sum_stat retries "$work/rank0.out" "$work/rank1.out")
    # work moves off a dead or cut-off server by failover, or earlier when the straggler
    # thread marks it slow (docs/cluster.md, Stragglers): either counts
    slow=$(sum_stat slow_marks "$work/rank0.out" "$work/rank1.out")
    [ $((failovers + slow)) -gt 0 ] && pass "failovers $failovers, slow marks $slow, retries $retries" \
        || fail "no failover or slow mark counted"
    [ "$took" -le "$bound" ] && pass "failover run took $took s (bound $bound s)" \
        || fail "failover run took $took s"
    grep -q "server $timed_out failed: timed out" "$work/rank0.err" "$work/rank1.err" \
        && pass "$timed_out was given up on by the time-out" \
        || fail "no time-out seen for $timed_out"
}
