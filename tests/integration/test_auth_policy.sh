#!/usr/bin/env bash
# Issue 20, the parts without RDMA: a REPORT for a dataset the credential cannot read is refused
# (NOT_FOUND, as for an absent dataset), counted and not listed (a HINT likewise); one credential reporting 70 jobs
# keeps at most its share (16) and pushes out none of another credential's jobs; --metrics-names
# hide keeps every dataset and job name off the unauthenticated /metrics (default show), while
# /healthz and /readyz stay open; a credential file readable by others gets a WARN at start and
# at every SIGHUP, and --insecure-auth-file refuse refuses it (start-up error; on SIGHUP the
# current set is kept).
set -euo pipefail
source "$(dirname "$0")/server_lib.sh"
AUTH=$DSC_BIN/auth_check
[ -x "$AUTH" ] || { echo "SKIP: $AUTH not built"; exit 77; }
value() { local v; v=$(metric "$1" "$2"); [ "$v" = missing ] && v=0; echo "$v"; }

make_dataset "$work/a" dsa 300 none
make_dataset "$work/b" dsb 300 none
S_LIM=limited-secret-AAAAAAAAAAAAAAAA
S_B=bteam-secret-BBBBBBBBBBBBBBBBBB
printf 'lim read %s dsa\nbteam read %s dsb\n' "$S_LIM" "$S_B" >"$work/creds"
chmod 600 "$work/creds"
printf 'lim %s\n' "$S_LIM" >"$work/tok-lim"
printf 'bteam %s\n' "$S_B" >"$work/tok-b"

# ---- REPORT within the credential -------------------------------------------------------
start_server P --data "$work/a" --data "$work/b" --auth-file "$work/creds"
! grep -q "auth-file.*readable" "$work/server-P.log" || fail "WARN for a mode-600 file"
expect 0 '^REPORT ok 2 refused 0' "$AUTH" report "$ADDR_P" "$work/tok-b" dsb bjob 2
expect 0 '^REPORT ok 0 refused 3 ENOTFOUND' "$AUTH" report "$ADDR_P" "$work/tok-lim" dsb sneaky 3
# A HINT (read-ahead) within the credential too: NOT_FOUND outside it, UNAUTHORIZED anonymously.
expect 0 '^OK [0-9]+$' "$AUTH" op "$ADDR_P" "$work/tok-lim" HINT dsa 0
expect 0 '^ERR ENOTFOUND' "$AUTH" op "$ADDR_P" "$work/tok-lim" HINT dsb 0
expect 0 '^ERR EUNAUTH' "$AUTH" op "$ADDR_P" - HINT dsa 0
[ "$(value "$HTTP_P" dscache_job_reports_refused_total)" = 3 ] \
    && pass "REPORTs for a dataset the credential cannot read: refused and counted" \
    || fail "refused REPORTs not counted"
curl -sf "http://$HTTP_P/metrics" | grep -q 'job="sneaky' && fail "a refused REPORT is listed"
expect 0 '^REPORT ok 70 refused 0' "$AUTH" report "$ADDR_P" "$work/tok-lim" dsa flood 70
m=$(curl -sf "http://$HTTP_P/metrics")
b=$(grep -c '^dscache_job_stall_fraction{job="bjob-' <<<"$m" || true)
f=$(grep -c '^dscache_job_stall_fraction{job="flood-' <<<"$m" || true)
[ "$b" = 2 ] && pass "70 jobs of one credential leave the other's 2 jobs listed" \
    || fail "bteam's jobs listed: $b (wanted 2)"
[ "$f" = 16 ] && pass "the flooding credential holds its share: 16" || fail "flood jobs listed: $f"
grep -q '^dscache_dataset_shards{dataset="dsa"}' <<<"$m" || fail "default: dataset names shown"

# ---- A credential file others can read: WARN at start and at each SIGHUP -----------------
chmod 644 "$work/creds"
kill -HUP "$PID_P"
until_ok 5 grep -q "SIGHUP: --auth-file: .*creds is readable by group and others (mode 0644)" \
    "$work/server-P.log" && pass "SIGHUP: WARN for a mode-644 credential file" \
    || fail "no WARN at SIGHUP"
stop_server P

start_server W --data "$work/a" --auth-file "$work/creds" --metrics-names hide
grep -q "warn.*--auth-file: .*creds is readable by group and others (mode 0644): it holds secrets; chmod 600" \
    "$work/server-W.log" && pass "start: WARN for a mode-644 credential file" \
    || { cat "$work/server-W.log"; fail "no WARN at start"; }
# ---- --metrics-names hide -----------------------------------------------------------------
expect 0 '^REPORT ok 1 refused 0' "$AUTH" report "$ADDR_W" "$work/tok-lim" dsa secretjob 1
m=$(curl -sf "http://$HTTP_W/metrics")
if grep -E 'dataset=|job=|dsa|secretjob' <<<"$m"; then
    fail "--metrics-names hide: a dataset or job name on /metrics"
else
    pass "--metrics-names hide: no dataset or job name on /metrics"
fi
grep -q '^dscache_jobs 1$' <<<"$m" || fail "the job count is still there"
curl -sf "http://$HTTP_W/healthz" >/dev/null && curl -sf "http://$HTTP_W/readyz" >/dev/null \
    && pass "/healthz and /readyz stay open" || fail "/healthz or /readyz"
stop_server W

# ---- A credential file owned by another user (needs root to chown it) -------------------
if [ "$(id -u)" = 0 ]; then
    cp "$work/creds" "$work/creds-other"
    chmod 600 "$work/creds-other"
    chown 65534 "$work/creds-other"
    start_server O --data "$work/a" --auth-file "$work/creds-other"
    grep -q "warn.*creds-other is owned by uid 65534, not by this server's user (uid 0)" \
        "$work/server-O.log" && pass "start: WARN for a file owned by another user" \
        || fail "no WARN for a file owned by another user"
    stop_server O
else
    echo "SKIP (part): not root, cannot give the credential file another owner"
fi

# ---- --insecure-auth-file refuse --------------------------------------------------------
rc=0
timeout 20 "$SERVER" --listen 127.0.0.1:0 --http off --data "$work/a" --auth-file "$work/creds" \
    --insecure-auth-file refuse >"$work/refuse.log" 2>&1 || rc=$?
[ "$rc" != 0 ] && grep -q "refused (--insecure-auth-file refuse): .*mode 0644" "$work/refuse.log" \
    && pass "--insecure-auth-file refuse: start-up error naming the mode" \
    || { cat "$work/refuse.log"; fail "an insecure file was accepted under refuse (exit $rc)"; }
chmod 600 "$work/creds"
start_server F --data "$work/a" --auth-file "$work/creds" --insecure-auth-file refuse
chmod 666 "$work/creds"
kill -HUP "$PID_F"
until_ok 5 grep -q "SIGHUP: credentials not reloaded, keeping the current set: refused" \
    "$work/server-F.log" && pass "refuse: an insecure file at SIGHUP keeps the current set" \
    || fail "no refusal at SIGHUP"
expect 0 '^OK ' "$AUTH" op "$ADDR_F" "$work/tok-lim" LIST
stop_server F
finish
