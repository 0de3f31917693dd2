#!/usr/bin/env bash
# `dscached --data PARENT`, where PARENT holds dataset directories rather than being one: the
# warning points at --data-root PARENT (what the user meant) as well as at --data PARENT/NAME,
# and following it serves the datasets.
source "$(dirname "$0")/server_lib.sh"
mkdir -p "$work/parent"
make_dataset "$work/parent/a" dsa 200 lz4
make_dataset "$work/parent/b" dsb 200 lz4

START_NO_WAIT=1 start_server wrong --data "$work/parent"
until_ok 10 grep -q 'is not a dataset directory' "$work/server-wrong.log" || true
line=$(grep -m1 'is not a dataset directory' "$work/server-wrong.log" || true)
case "$line" in
*"--data-root $work/parent"*) pass "the warning suggests --data-root: $line" ;;
*) fail "the warning for --data PARENT does not suggest --data-root PARENT: '$line'" ;;
esac
grep -qE -- "--data $work/parent/(a|b)" <<<"$line" && pass "and names one dataset directory" ||
    fail "the warning names no dataset directory: '$line'"

# Following the advice serves both datasets.
start_server right --data-root "$work/parent"
out=$("$CLI" list --server "$ADDR_right" 2>&1 || true)
if grep -q dsa <<<"$out" && grep -q dsb <<<"$out"; then
    pass "--data-root PARENT serves both datasets"
else
    fail "--data-root PARENT: dscache list says: $out"
fi
finish
