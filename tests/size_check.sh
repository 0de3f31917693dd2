#!/usr/bin/env bash
# File sizes: a C file of the tree over 1,000 lines says in its first comment why it is not cut
# (a line reading "Over N lines: <why>"); the others are expected to be cut into modules.
# usage: size_check.sh [SOURCE_ROOT] [LIMIT]   (default: this tree, 1000)
set -euo pipefail
root=$(cd "${1:-$(dirname "$0")/..}" && pwd)
limit=${2:-1000}
bad=0 big=0
while IFS= read -r f; do
    n=$(wc -l <"$f")
    [ "$n" -gt "$limit" ] || continue
    big=$((big + 1))
    rel=${f#"$root"/}
    # The first comment: from the first line to the first "*/".
    why=$(awk 'NR == 1 && !/^\/\*/ { exit } { print } /\*\// { exit }' "$f" |
          grep -oE '[Oo]ver [0-9,]+ lines[^.]*' | head -1 || true)
    if [ -z "$why" ]; then
        echo "FAIL: $rel has $n lines and its first comment does not say why (\"Over N lines: ...\")"
        bad=$((bad + 1))
    else
        echo "$rel: $n lines: $why"
    fi
done < <(find "$root/proto" "$root/sys" "$root/server" "$root/client" -name '*.c' | sort)
if [ "$bad" -gt 0 ]; then
    echo "FAIL: $bad file(s) over $limit lines without their reason"
    exit 1
fi
echo "sizes ok: $big file(s) over $limit lines, each with its reason"
