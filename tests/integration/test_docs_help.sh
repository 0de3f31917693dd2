#!/usr/bin/env bash
# The --help blocks in docs/*.md are the binaries' own output (tests/docs_help.py): each fenced
# block after a `<!-- generated: CMD -->` line equals what CMD prints. First checks that a copy
# with one line of such a block changed fails, so the check cannot pass by finding nothing.
set -euo pipefail
DSC_BIN=${DSC_BIN:?DSC_BIN must point at the build bin directory}
src=$(cd "$(dirname "$0")/../.." && pwd)
py=${DSC_PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=$(command -v python3)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/tests"
cp "$src/tests/docs_help.py" "$work/tests/"
cp -r "$src/docs" "$work/docs"
file=$(grep -l '^<!-- generated: ' "$work"/docs/*.md | head -1)
[ -n "$file" ] || { echo "FAIL: no generated --help block in docs/"; exit 1; }
# Damage the second line of the first generated block.
line=$(grep -n '^<!-- generated: ' "$file" | head -1 | cut -d: -f1)
sed -i "$((line + 2))s/^/X/" "$file"
if "$py" "$work/tests/docs_help.py" "$DSC_BIN" >"$work/damaged.txt" 2>&1; then
    echo "FAIL: a damaged block passed the check: $(cat "$work/damaged.txt")"; exit 1
fi
echo "ok: a damaged copy fails: $(head -1 "$work/damaged.txt")"

if ! "$py" "$src/tests/docs_help.py" "$DSC_BIN"; then
    echo "FAIL: docs/ are out of date: run tests/docs_help.py $DSC_BIN --write"; exit 1
fi
echo "all passed"
