#!/usr/bin/env bash
# Keeps the front page honest: README.md is at most 16384 bytes, every relative link in README.md
# and docs/*.md names a file (and, into a Markdown file, a heading) that exists, and the Quick
# start section holds exactly two command lines, each starting with a script of the checkout.
# Usage: test_docs.sh [REPO_DIR]   (default: $DSC_SRC, else this checkout). Without REPO_DIR it
# first checks that a damaged copy fails each check, so a check that cannot fail is caught.
set -euo pipefail
readme_limit=16384
py=${DSC_PYTHON:-$(command -v python3 || true)}

# Prints "FAIL: ..." for each problem in the tree at $1; returns the number of problems.
check_tree() {
    local root=$1 problems=0 size md target file path line
    local readme=$root/README.md
    if [ ! -f "$readme" ]; then
        echo "FAIL: $readme does not exist"
        return 1
    fi

    # 1. The front page stays a front page.
    size=$(wc -c <"$readme")
    if [ "$size" -gt "$readme_limit" ]; then
        echo "FAIL: README.md is $size bytes, more than $readme_limit: move detail into docs/"
        problems=$((problems + 1))
    fi

    # 2. Relative links name files that exist. Fenced blocks and inline code are not links.
    local links=0
    for md in "$root/README.md" "$root"/docs/*.md; do
        [ -f "$md" ] || continue
        while IFS= read -r target; do
            target=${target#<}
            target=${target%%>*}
            target=${target%% *}
            case "$target" in
            '' | '#'* | [a-zA-Z]*:*) continue ;; # same-page anchor, http:, https:, mailto:
            esac
            links=$((links + 1))
            file=${target%%#*}
            file=${file%%\?*}
            file=${file//%20/ }
            if [ "${file:0:1}" = / ]; then
                path=$root$file
            else
                path=$(dirname "$md")/$file
            fi
            if [ ! -e "$path" ]; then
                echo "FAIL: ${md#"$root"/} links to $target: ${path#"$root"/} does not exist"
                problems=$((problems + 1))
            fi
        done < <(awk '/^[[:space:]]*(```|~~~)/ { fenced = !fenced; next } !fenced' "$md" |
            sed 's/`[^`]*`//g' |
            { grep -oE '\]\([^)]*\)|^[[:space:]]*\[[^]]+\]:[[:space:]]*[^[:space:]]+' || true; } |
            sed -E 's/^\]\(//; s/\)$//; s/^[[:space:]]*\[[^]]+\]:[[:space:]]*//')
    done
    if [ "$links" -eq 0 ]; then
        echo "FAIL: no relative link found in README.md or docs/*.md (links to docs/ expected)"
        problems=$((problems + 1))
    fi

    # 2b. A link to a heading of a Markdown file names a heading that file has (GitHub's anchors).
    if [ -n "$py" ]; then
        local bad_anchors
        bad_anchors=$("$py" - "$root" <<'PY'
import glob, os, re, sys
root = sys.argv[1]
def strip_code(text):
    out, fenced = [], False
    for line in text.split("\n"):
        if re.match(r"\s*(```|~~~)", line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out
cache = {}
def anchors(path):
    if path in cache:
        return cache[path]
    seen, result = {}, set()
    for line in strip_code(open(path, encoding="utf-8").read()):
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        result.add(slug if n == 0 else "%s-%d" % (slug, n))
    cache[path] = result
    return result
files = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
for md in files:
    if not os.path.isfile(md):
        continue
    for line in strip_code(open(md, encoding="utf-8").read()):
        line = re.sub(r"`[^`]*`", "", line)
        for target in re.findall(r"\]\(<?([^)\s>]*)", line):
            if "#" not in target or re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                continue
            file, anchor = target.split("#", 1)
            path = md if file == "" else os.path.normpath(os.path.join(os.path.dirname(md), file))
            if not path.endswith(".md") or not os.path.isfile(path):
                continue
            if anchor.lower() not in anchors(path):
                print("FAIL: %s links to %s: %s has no heading #%s"
                      % (os.path.relpath(md, root), target, os.path.relpath(path, root), anchor))
PY
        )
        if [ -n "$bad_anchors" ]; then
            echo "$bad_anchors"
            problems=$((problems + $(echo "$bad_anchors" | wc -l)))
        fi
    else
        echo "note: no python3, links to headings not checked (the files they name were)"
    fi

    # 3. Quick start: exactly two commands in its code block(s), each a script of the checkout.
    local commands
    commands=$(awk '
        /^[[:space:]]*(```|~~~)/ { fenced = !fenced; next }
        !fenced && /^##?[[:space:]]/ { inside = ($0 ~ /^##[[:space:]]+Quick start/); next }
        !inside || !fenced { next }
        {
            line = $0
            if (cont != "") { line = cont " " line; cont = "" }
            if (line ~ /\\[[:space:]]*$/) { sub(/\\[[:space:]]*$/, "", line); cont = line; next }
            if (line ~ /^[[:space:]]*(#|$)/) next
            print line
        }' "$readme")
    local count
    count=$(printf '%s' "$commands" | grep -c . || true)
    if [ "$count" -ne 2 ]; then
        echo "FAIL: the Quick start section has $count command lines in its code block(s), not 2:"
        printf '%s\n' "$commands" | sed 's/^/    /'
        problems=$((problems + 1))
    fi
    while IFS= read -r line; do
        [ -n "$line" ] || continue
        file=$(echo "$line" | awk '{ print $1 }')
        case "$file" in
        */*)
            if [ ! -x "$root/$file" ]; then
                echo "FAIL: Quick start runs $file, which is not an executable file of the checkout"
                problems=$((problems + 1))
            fi
            ;;
        esac
    done <<<"$commands"
    echo "checked: README.md $size bytes, $links relative links, $count Quick start commands"
    [ "$problems" -le 100 ] || problems=100 # an exit status wraps at 256
    return "$problems"
}

if [ $# -gt 0 ]; then
    root=$(cd "$1" && pwd)
else
    root=${DSC_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}

    # A damaged copy of the docs must fail every check.
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    mkdir -p "$work/docs" "$work/tests"
    printf '#!/bin/sh\n' >"$work/tests/run.sh"
    chmod +x "$work/tests/run.sh"
    printf '# Damaged\n\n## Quick start\n\n```sh\n./tests/run.sh\n./missing.sh\nmake x\n```\n' \
        >"$work/README.md"
    printf '[gone](../no-such-file.md) [heading](#no-such-heading)\n' >"$work/docs/x.md"
    head -c $((readme_limit + 1)) /dev/zero | tr '\0' 'x' >>"$work/README.md"
    set +e
    out=$(check_tree "$work")
    damaged=$?
    set -e
    for expect in "README.md is $(wc -c <"$work/README.md") bytes, more than $readme_limit" \
        "docs/x.md links to ../no-such-file.md" "has 3 command lines" \
        "runs ./missing.sh, which is not an executable file"; do
        if ! grep -qF "$expect" <<<"$out"; then
            echo "FAIL: the damaged copy did not report '$expect'; it reported:"
            echo "$out" | sed 's/^/    /'
            exit 1
        fi
    done
    if [ -n "$py" ] && ! grep -qF "has no heading #no-such-heading" <<<"$out"; then
        echo "FAIL: the damaged copy's link to a missing heading was not reported:"
        echo "$out" | sed 's/^/    /'
        exit 1
    fi
    [ "$damaged" -ge 4 ] || {
        echo "FAIL: the damaged copy gave $damaged problems, at least 4 expected"
        exit 1
    }
    echo "self-check: a damaged copy fails every check ($damaged problems)"
fi

set +e
check_tree "$root"
problems=$?
set -e
if [ "$problems" -ne 0 ]; then
    echo "FAIL: $problems problem(s) in the documentation of $root"
    exit 1
fi
echo "docs ok"
