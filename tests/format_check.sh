#!/usr/bin/env bash
# Fails when a C source or header differs from the project's .clang-format (clang-format 14).
# Fix with: clang-format -i FILE...
set -euo pipefail
cd "$(dirname "$0")/.."
if git rev-parse --git-dir >/dev/null 2>&1; then
    mapfile -t files < <(git ls-files '*.c' '*.h')
else
    mapfile -t files < <(find proto server client tests -name '*.c' -o -name '*.h')
fi
if clang-format --dry-run -Werror "${files[@]}" 2>/tmp/dsc_format.$$; then
    rm -f /tmp/dsc_format.$$
    echo "format: ${#files[@]} files match .clang-format"
else
    grep -oE '^[^:]+\.[ch]' /tmp/dsc_format.$$ | sort -u | sed 's/^/format: differs: /'
    rm -f /tmp/dsc_format.$$
    echo "format: run clang-format -i on the files above"
    exit 1
fi
