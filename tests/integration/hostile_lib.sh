#!/usr/bin/env bash
# Shared by test_hostile_*.sh (sourced after server_lib.sh): the hostile client tool, a
# sanitizer flag, process figures from /proc (peak RSS, CPU ticks), and timing of /healthz.
HOSTILE=$DSC_BIN/hostile_client
[ -x "$HOSTILE" ] || { echo "SKIP: $HOSTILE not built"; exit 77; }
# ASan/TSan builds: memory and timing figures are the sanitizer's, not the server's.
SANITIZED=0
[ "${DSC_SANITIZE:-OFF}" = ON ] || [ "${DSC_TSAN:-OFF}" = ON ] && SANITIZED=1

# peak_rss_kb PID: VmHWM (the peak resident set) in KiB.
peak_rss_kb() { awk '/^VmHWM:/ { print $2 }' "/proc/$1/status"; }
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
# cpu_ticks PID: user + system clock ticks used so far.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# healthz_ms HTTP: milliseconds /healthz took to answer 200 (99999 when it did not within 2 s).
healthz_ms() {
    local t
    t=$(curl -s -o /dev/null --max-time 2 -w '%{http_code} %{time_total}' "http://$1/healthz") \
        || { echo 99999; return; }
    [ "${t%% *}" = 200 ] || { echo 99999; return; }
    awk -v s="${t#* }" 'BEGIN { printf "%d\n", s * 1000 }'
}

# wait_line FILE PATTERN SECONDS: waits until FILE has a line matching PATTERN; 1 on time-out.
wait_line() {
    local deadline=$((SECONDS + $3))
    until grep -qE "$2" "$1" 2>/dev/null; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.1
    done
}

# conns_at_least HTTP N / conns_equal HTTP N: the server's open-connection gauge (for until_ok).
# hmetric HTTP NAME: as metric, but gives "missing" when /metrics does not answer within 3 s.
hmetric() {
    curl -sf --max-time 3 "http://$1/metrics" \
        | awk -v k="$2" '$1 == k { print $2; found = 1 } END { if (!found) print "missing" }'
}
conns_at_least() { local v; v=$(hmetric "$1" dscache_open_connections); [ "$v" != missing ] && [ "$v" -ge "$2" ]; }
conns_equal() { [ "$(hmetric "$1" dscache_open_connections)" = "$2" ]; }

# stop_within NAME SECONDS: SIGTERM, then a failure (and SIGKILL) unless the server exits 0 within
# SECONDS.
stop_within() {
    local pid_var="PID_$1" deadline=$((SECONDS + $2))
    local pid=${!pid_var}
    kill -TERM "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
        fail "$1: still running $2 s after SIGTERM"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    STOP_RC=0
    wait "$pid" || STOP_RC=$?
    [ "$STOP_RC" = 0 ] && pass "$1: stopped on SIGTERM, exit 0" || fail "$1: exit $STOP_RC"
}
