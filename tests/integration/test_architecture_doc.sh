#!/usr/bin/env bash
# docs/ARCHITECTURE.md and its picture match the tree:
#  1. docs/images/architecture-graph.txt (the text form of docs/images/architecture.png: wings,
#     modules, #include edges between wings) equals a fresh one from
#     docs/images/architecture_picture.py;
#  2. every wing of tests/layering_check.sh's table is named in docs/ARCHITECTURE.md (`wing`);
#  3. every path and every name.c / name.h written in backticks in docs/ARCHITECTURE.md exists
#     (a path from the root, or docs/ relative; a file name anywhere in the tree), and so does
#     every file its Markdown links and images point to.
# Then, on a scratch copy of the tree, a renamed module, a new wing in the table and a name in
# the doc that no file has are each refused (the checks above can fail).
# usage: test_architecture_doc.sh [ROOT]   (ROOT: check that tree only, no scratch copies)
set -euo pipefail
src=${DSC_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
py=${DSC_PYTHON:-/usr/bin/python3}

check() { # ROOT: prints what is wrong, fails when something is
    local root=$1 fresh rc=0
    fresh=$(mktemp)
    "$py" "$root/docs/images/architecture_picture.py" --root "$root" --text-only --graph "$fresh"
    if ! diff -u "$root/docs/images/architecture-graph.txt" "$fresh" >"$fresh.diff"; then
        echo "FAIL: docs/images/architecture-graph.txt is stale (the tree's wings, modules or" \
             "include edges changed): rerun /usr/bin/python3 docs/images/architecture_picture.py" \
             "and commit architecture.png and architecture-graph.txt; the difference:"
        head -40 "$fresh.diff"
        rc=1
    fi
    rm -f "$fresh" "$fresh.diff"
    "$py" - "$root" <<'EOF' || rc=1
import os, re, sys, glob
root = sys.argv[1]
doc_path = os.path.join(root, "docs", "ARCHITECTURE.md")
doc = open(doc_path).read()
check_sh = open(os.path.join(root, "tests", "layering_check.sh")).read()
table = re.search(r"^table='\n(.*?)^'", check_sh, re.S | re.M).group(1)
wings = [line.split()[0] for line in table.splitlines() if line.split()]
spans = re.findall(r"`([^`\n]+)`", doc)
bad = 0
for w in wings:
    if not any(re.search(r"(^|[\s(,])%s($|[\s),:])" % re.escape(w), s) for s in spans):
        print("FAIL: the wing %s of tests/layering_check.sh is not named (`%s`) in "
              "docs/ARCHITECTURE.md" % (w, w))
        bad += 1
names = set()
for d, dirs, files in os.walk(root):
    dirs[:] = [x for x in dirs if not x.startswith(".") and not x.startswith("build")]
    names.update(files)
tops = ("proto/", "sys/", "server/", "client/", "docs/", "tests/", "deploy/", "examples/", "cmake/")


def expand(tok):  # a{b,c}d -> abd acd
    m = re.search(r"\{([^{}]*)\}", tok)
    if not m:
        return [tok]
    head, tail = tok[:m.start()], tok[m.end():]
    return [x for alt in m.group(1).split(",") for x in expand(head + alt + tail)]


seen = set()
for s in spans:
    for tok in s.split():
        tok = tok.strip(",;:.()\"'")
        tok = re.sub(r"\(\)$", "", tok)
        if not tok or tok in seen:
            continue
        seen.add(tok)
        if tok.startswith(tops) or tok.startswith("docs/"):
            for p in expand(tok):
                p = p.rstrip("/")
                if not (glob.glob(os.path.join(root, p))
                        or glob.glob(os.path.join(root, "docs", p))):
                    print("FAIL: docs/ARCHITECTURE.md names `%s`, which is not in the tree" % p)
                    bad += 1
        elif re.fullmatch(r"[A-Za-z0-9_]+\.[ch]", tok):
            if tok not in names:
                print("FAIL: docs/ARCHITECTURE.md names `%s`, and no file of the tree is "
                      "named so" % tok)
                bad += 1
for link in re.findall(r"\]\(([^)#\s]+)[^)]*\)", doc):
    if "://" in link:
        continue
    if not os.path.exists(os.path.join(root, "docs", link)):
        print("FAIL: docs/ARCHITECTURE.md links to %s, which is not in docs/" % link)
        bad += 1
if bad:
    print("FAIL: %d name(s) of docs/ARCHITECTURE.md do not match the tree" % bad)
    sys.exit(1)
print("ARCHITECTURE.md ok: %d wings named, %d names in backticks checked" % (len(wings), len(seen)))
EOF
    return $rc
}

if [ $# -gt 0 ]; then
    check "$1"
    exit
fi
check "$src"

# The checks can fail: each change below, made to a scratch copy, is refused.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
copy() {
    rm -rf "$tmp/t"
    mkdir -p "$tmp/t"
    local e
    for e in "$src"/*; do # the tree without its build folders
        case ${e##*/} in build*) ;; *) cp -r "$e" "$tmp/t/" ;; esac
    done
}
expect_fail() { # WHAT PATTERN
    if out=$(check "$tmp/t" 2>&1); then
        echo "FAIL: $1 passed the check"
        exit 1
    fi
    if ! grep -q -- "$2" <<<"$out"; then
        echo "FAIL: $1 was refused, but not for the expected reason ($2):"
        echo "$out"
        exit 1
    fi
    echo "refused as it should be: $1"
}
copy
check "$tmp/t" >/dev/null || { echo "FAIL: the scratch copy fails before any change"; exit 1; }
mv "$tmp/t/server/cache/staging.c" "$tmp/t/server/cache/stage.c"
expect_fail "staging.c renamed to stage.c" "architecture-graph.txt is stale"
expect_fail "staging.c renamed to stage.c" "names \`staging.c\`"
copy
new_row='pyx-new     client/python/newext/*      api codec'
sed -i "s|^py-ext |$new_row\npy-ext |" \
    "$tmp/t/tests/layering_check.sh"
expect_fail "a new wing pyx-new in the table" "wing pyx-new of tests/layering_check.sh is not named"
copy
# shellcheck disable=SC2016 # the backticks are Markdown
echo 'The new module `server/net/quic.c` and `quic.h`.' >>"$tmp/t/docs/ARCHITECTURE.md"
expect_fail "a doc naming server/net/quic.c" "names \`server/net/quic.c\`"
expect_fail "a doc naming quic.h" "names \`quic.h\`"
echo "ok: the picture's text form and docs/ARCHITECTURE.md match the tree, and changes are refused"
