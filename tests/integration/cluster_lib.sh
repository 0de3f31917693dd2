# Shared by the cluster tests (sourced): dscached members started by PID with a members file,
# cluster_check trainer ranks, and the exactly-once check over the sample ids they wrote.
# The caller sets $work, the arrays pids=() and the functions run in its EXIT trap; $DSC_RUN, when
# set (e.g. "netns_exec 5"), prefixes the srv_client calls, to run them from another host.
DSC_BIN=${DSC_BIN:?DSC_BIN must point at the build bin directory}
PY=${DSC_PYTHON:-/usr/bin/python3}
for exe in dscache dscached cluster_check srv_client; do
    [ -x "$DSC_BIN/$exe" ] || { echo "SKIP: $DSC_BIN/$exe not built"; exit 77; }
done

# until_ok SECONDS CMD...: reruns CMD every 0.2 s until it succeeds; 1 when time runs out.
until_ok() {
    local deadline=$((SECONDS + $1)); shift
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.2
    done
}

# json_get JSON PYTHON_EXPR: evaluates an expression on the parsed JSON `j`.
json_get() {
    "$PY" -c 'import json,sys; j=json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"
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
