#!/usr/bin/env bash
# Finding: jobs were keyed by name only, so any credential could REPORT another team's weighted
# job name and take its share of fair service (--job-weight). A job is now (credential, name):
# with --auth-file a weight names its credential (--job-weight CRED:NAME=W; a bare NAME=W is
# refused at start, naming the fix), and another credential's job of the same name is a job of
# its own, of weight 1, in its own queue.
source "$(dirname "$0")/server_lib.sh"
AUTH=$DSC_BIN/auth_check
[ -x "$AUTH" ] || { echo "SKIP: $AUTH not built"; exit 77; }

make_dataset "$work/ds" fds 200 none
S_A=alice-secret-0123456789abcdef0
S_B=bob-secret-fedcba98765432100
printf 'alice read %s\nbob read %s\n' "$S_A" "$S_B" >"$work/creds"
chmod 600 "$work/creds"
printf 'alice %s\n' "$S_A" >"$work/tok-a"
printf 'bob %s\n' "$S_B" >"$work/tok-b"

# A weight without its credential, on a server with credentials: refused, naming the form.
expect 1 "CRED:heavy=3" timeout 20 "$SERVER" --data "$work/ds" --auth-file "$work/creds" \
    --listen 127.0.0.1:0 --http off --job-weight heavy=3

start_server a --data "$work/ds" --auth-file "$work/creds" --send-rate 1G \
    --job-weight alice:heavy=3
# Both credentials REPORT job "heavy" and GET under the send rate (their answers are queued
# per job, and counted per job in /metrics).
for who in a b; do
    out=$("$AUTH" stage "$ADDR_a" "$work/tok-$who" fds heavy get 0 1 4 1 0)
    echo "$who: $out"
    grep -q '^GET ok 4 of 4' <<<"$out" || fail "$who's GETs: $out"
done
wa=$(metric "$HTTP_a" 'dscache_job_weight{credential="alice",job="heavy"}')
wb=$(metric "$HTTP_a" 'dscache_job_weight{credential="bob",job="heavy"}')
echo "weights: alice/heavy $wa, bob/heavy $wb"
[ "$wa" = 3 ] && pass "alice's job heavy has its weight 3" || fail "alice's heavy weighs '$wa'"
[ "$wb" = 1 ] && pass "bob's job of the same name is its own, weight 1" \
    || fail "bob's heavy weighs '$wb' (it took alice's weight or queue)"
stop_server a
finish
