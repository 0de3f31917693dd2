# Shared by tests/integration/test_loader_*.sh (sourced): a work directory, dscached on
# 127.0.0.1 port 0 read from --port-file, and cleanup by PID on exit (base_lib.sh).
DSC_BIN=${DSC_BIN:?DSC_BIN must point at the build bin directory}
for exe in dscache dscached loader_check; do
    [ -x "$DSC_BIN/$exe" ] || { echo "SKIP: $DSC_BIN/$exe not built"; exit 77; }
done
source "$(dirname "${BASH_SOURCE[0]}")/base_lib.sh"

# make_ds NAME ARGS...: a synthetic dataset in $work/NAME.
make_ds() {
    local name=$1; shift
    "$DSC_BIN/dscache" ingest synthetic -o "$work/$name" --name "$name" "$@" >/dev/null
}

# start_server ARGS...: starts dscached, sets $port and $server_pid.
start_server() {
    local pf="$work/port.$RANDOM"
    "$DSC_BIN/dscached" --listen 127.0.0.1:0 --http off --port-file "$pf" --log-level error \
        --threads 2 "$@" &
    server_pid=$!
    pids+=("$server_pid")
    for _ in $(seq 100); do
        [ -s "$pf" ] && break
        kill -0 "$server_pid" 2>/dev/null || { echo "FAIL: dscached exited" >&2; exit 1; }
        sleep 0.05
    done
    [ -s "$pf" ] || { echo "FAIL: dscached wrote no port file" >&2; exit 1; }
    port=$(cat "$pf")
}
