#!/usr/bin/env bash
# Shared by test_server_*.sh: start dscached on 127.0.0.1 port 0, stop it by PID, make datasets.
# Every server started is killed by PID in the EXIT trap, and the work directory removed
# (base_lib.sh: also fail, pass, finish, expect, until_ok, json_get).
set -euo pipefail
DSC_BIN=${DSC_BIN:?DSC_BIN must point at the build bin directory}
SERVER=$DSC_BIN/dscached
CLI=$DSC_BIN/dscache
TOOL=$DSC_BIN/srv_client
for exe in "$SERVER" "$CLI" "$TOOL"; do
    [ -x "$exe" ] || { echo "SKIP: $exe not built"; exit 77; }
done
command -v curl >/dev/null || { echo "SKIP: curl is not installed"; exit 77; }

source "$(dirname "${BASH_SOURCE[0]}")/base_lib.sh"

# start_server NAME ARGS...: runs dscached with ARGS on port 0; sets PID_<NAME>, ADDR_<NAME>,
# HTTP_<NAME>. Waits for the port files, then for /readyz (unless START_NO_WAIT=1: a --warm
# server whose member list does not hold it yet is not ready).
start_server() {
    local name=$1; shift
    local log=$work/server-$name.log
    rm -f "$work/$name.port" "$work/$name.hport"
    "$SERVER" --listen 127.0.0.1:0 --http 127.0.0.1:0 --port-file "$work/$name.port" \
        --http-port-file "$work/$name.hport" --threads 2 "$@" >"$log" 2>&1 &
    local pid=$!
    pids+=("$pid")
    for _ in $(seq 1 200); do
        [ -s "$work/$name.port" ] && [ -s "$work/$name.hport" ] && break
        kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; echo "server $name died" >&2; return 1; }
        sleep 0.05
    done
    [ -s "$work/$name.port" ] || { echo "server $name did not write its port" >&2; return 1; }
    printf -v "PID_$name" %s "$pid"
    printf -v "ADDR_$name" %s "127.0.0.1:$(cat "$work/$name.port")"
    printf -v "HTTP_$name" %s "127.0.0.1:$(cat "$work/$name.hport")"
    local http="127.0.0.1:$(cat "$work/$name.hport")"
    [ "${START_NO_WAIT:-0}" = 1 ] && return 0
    for _ in $(seq 1 400); do
        curl -sf "http://$http/readyz" >/dev/null && return 0
        sleep 0.05
    done
    echo "server $name never became ready" >&2
    return 1
}

# stop_server NAME [SIGNAL]: signals the server and waits; sets STOP_RC to its exit code.
stop_server() {
    local pid_var="PID_$1" sig=${2:-TERM}
    local pid=${!pid_var}
    kill -"$sig" "$pid" 2>/dev/null || true
    STOP_RC=0
    wait "$pid" || STOP_RC=$?
}

# metric HTTP NAME_WITH_LABELS: the value of one sample line of /metrics.
metric() {
    curl -sf "http://$1/metrics" | awk -v k="$2" '$1 == k { print $2; found = 1 } END { if (!found) print "missing" }'
}

# make_dataset DIR NAME SAMPLES COMPRESS [extra ingest args]: a synthetic dataset.
make_dataset() {
    local dir=$1 name=$2 samples=$3 compress=$4; shift 4
    "$CLI" ingest synthetic -o "$dir" --name "$name" --samples "$samples" \
        --field x:f32:256 --field y:i64 --compress "$compress" --shard-size 256K \
        --chunk-size 32K "$@" >/dev/null
}
