#!/usr/bin/env bash
# dscache bench --plot: the series CSV (a header and a row per interval, with the verdict) and a
# PNG drawn by dscache_plot.py; without matplotlib, a clear message, the CSV kept, exit 1.
source "$(dirname "$0")/server_lib.sh"
py=${DSC_PYTHON:-/usr/bin/python3}
make_dataset "$work/ds" plotds 20000 lz4
start_server a --data "$work/ds"

# Without matplotlib (a stand-in package that fails to import, first on the path).
mkdir -p "$work/nompl/matplotlib"
echo 'raise ImportError("no matplotlib here")' >"$work/nompl/matplotlib/__init__.py"
PYTHONPATH="$work/nompl" DSCACHE_PYTHON="$py" expect 1 \
    "matplotlib is not installed \(Debian: apt-get install python3-matplotlib\); the series is in $work/none.csv" \
    "$CLI" bench --server "$ADDR_a" --dataset plotds --seconds 1.5 --plot "$work/none.png"
[ -s "$work/none.csv" ] && [ ! -e "$work/none.png" ] && pass "no matplotlib: message, CSV kept, no PNG" \
    || fail "no matplotlib: wanted the CSV and no PNG"
# The footer is the run's final verdict, as bench prints it (a stand-in python records argv).
printf '#!/bin/sh\nprintf "%%s\\n" "$@" >"%s"\n' "$work/argv.txt" >"$work/argv.sh"
chmod +x "$work/argv.sh"
DSCACHE_PYTHON="$work/argv.sh" "$CLI" bench --server "$ADDR_a" --dataset plotds --seconds 1 \
    --plot "$work/v.png" >"$work/v.txt" 2>&1 || true
printed="$(grep '^limit: ' "$work/v.txt") - $(sed -n 's/^suggestion: //p' "$work/v.txt")"
passed=$(sed -n '/^--verdict$/{n;p}' "$work/argv.txt" 2>/dev/null)
[ -n "$passed" ] && [ "$passed" = "$printed" ] && pass "the plot's footer is the printed verdict" \
    || fail "footer: passed '$passed', printed '$printed'"
expect 2 "plot-interval wants seconds" "$CLI" bench --server "$ADDR_a" --dataset plotds \
    --plot "$work/x.png" --plot-interval 0

if ! "$py" -c 'import matplotlib' 2>/dev/null; then
    echo "SKIP: $py has no matplotlib (deploy/local/setup.sh installs python3-matplotlib): the PNG is not checked"
    exit 77
fi
DSCACHE_PYTHON="$py" "$CLI" bench --server "$ADDR_a" --dataset plotds --batch-size 64 --seconds 3 \
    --compute-ms 2 --plot-interval 0.25 --plot "$work/run.png" >"$work/bench.txt" 2>&1 \
    || fail "bench --plot failed: $(cat "$work/bench.txt")"
head -1 "$work/run.csv" | grep -q '^t,samples_per_s,mb_per_s,stall,wait_fetch,wait_budget,wait_decode,wait_collate,step_s,' \
    || fail "CSV header: $(head -1 "$work/run.csv")"
rows=$(($(wc -l <"$work/run.csv") - 1))
[ "$rows" -ge 8 ] && pass "CSV: $rows points" || fail "CSV: only $rows points in 3 s at 0.25 s"
grep -qE ',(unknown|none|fetch|server|decode|collate|h2d|cache|inflight),' "$work/run.csv" \
    || fail "CSV rows lack the bottleneck"
magic=$(head -c 8 "$work/run.png" | od -An -tx1 | tr -d ' \n')
[ "$magic" = "89504e470d0a1a0a" ] && [ "$(stat -c %s "$work/run.png")" -gt 10000 ] \
    && pass "PNG written ($(stat -c %s "$work/run.png") bytes)" || fail "not a PNG: $magic"
grep -q "^plot: $work/run.png" "$work/bench.txt" || fail "bench does not name the picture"
finish
