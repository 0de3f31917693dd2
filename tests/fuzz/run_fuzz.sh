#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time from the seed corpus kept in tests/fuzz/corpus.
# The seed corpus is copied so the tree is never modified; a finding fails the test.
set -euo pipefail
target=$1 corpus=$2 seconds=${3:-30}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus"
[ -d "$corpus" ] && cp -r "$corpus"/. "$work/corpus/" 2>/dev/null || true
cd "$work"
"$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$work/" "$work/corpus"
