#!/usr/bin/env bash
# Call-cycle check of a folder of C modules, its wings (subfolders) included: fails when the module
# graph of the .c/.h files under DIR has a cycle. A module is a .c file with its own header (X.c,
# X.h, X_int.h; a header without a .c, such as a types-only one, is a module of its own); names
# are unique across a folder's wings (the build searches them all). Edges: every `#include "Y.h"`
# of a file under DIR naming a header under DIR, and every header's declaration of a function or
# object that another module's .c defines (a header declaring module M's functions is M's
# interface: including it depends on M).
# usage: cycle_check.sh [--print] DIR...   (default: every wing of this tree, see below)
#        cycle_check.sh --self-test        (a cycle added to a copy of a wing is found)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
print=0
dirs=()
for arg in "$@"; do
    case "$arg" in
    --print) print=1 ;;
    --self-test)
        tmp=$(mktemp -d)
        trap 'rm -rf "$tmp"' EXIT
        cp -r "$here/client/lib/base" "$tmp/base"
        bash "$0" "$tmp/base" >/dev/null || { echo "FAIL: the copy of client/lib/base has a cycle already"; exit 1; }
        # chunks.c -> slots.h -> log: log.c including chunks.h closes a circle.
        echo '#include "chunks.h"' >>"$tmp/base/log.c"
        if out=$(bash "$0" "$tmp/base" 2>&1); then
            echo "FAIL: a cycle log -> chunks -> slots -> log added to a copy of client/lib/base passed:"
            echo "$out"
            exit 1
        fi
        case "$out" in
        *"cycle among: chunks log slots"*) ;;
        *) echo "FAIL: the check did not name the added cycle: $out"; exit 1 ;;
        esac
        echo "self-test ok: $(echo "$out" | head -1 | sed 's/^FAIL: //')"
        exit 0
        ;;
    *) dirs+=("$arg") ;;
    esac
done
if [ "${#dirs[@]}" -eq 0 ]; then
    # Every folder of modules, its wings included (a cycle inside a wing is one of its folder).
    dirs=(proto sys server client/lib client/cli)
    dirs=("${dirs[@]/#/$here/}")
fi
if [ "${#dirs[@]}" -gt 1 ]; then
    rc=0
    for d in "${dirs[@]}"; do
        if [ "$print" = 1 ]; then bash "$0" --print "$d" || rc=1; else bash "$0" "$d" || rc=1; fi
    done
    exit $rc
fi
dir=${dirs[0]}
if [ ! -d "$dir" ] || [ -z "$(find "$dir" -name '*.c' -print -quit)" ]; then
    echo "cycle_check: no C sources under $dir" >&2
    exit 2
fi
mapfile -t cfiles < <(find "$dir" -name '*.c' | sort)
mapfile -t hfiles < <(find "$dir" -name '*.h' | sort)
declare -A has_c has_h
for f in "${cfiles[@]}"; do has_c[$(basename "$f" .c)]=1; done
for f in "${hfiles[@]}"; do has_h[$(basename "$f")]=1; done

module_of() { # file name -> $MODULE, the module's name
    local b=${1##*/}
    b=${b%.c}
    b=${b%.h}
    if [ -n "${has_c[${b%_int}]:-}" ]; then b=${b%_int}; fi
    MODULE=$b
}

edges=$(mktemp)
defs=$(mktemp)
decls=$(mktemp)
trap 'rm -f "$edges" "$edges.kept" "$defs" "$decls"' EXIT

# Names defined (non-static, at column 0) by each .c file: "name module".
for f in "${cfiles[@]}"; do
    module_of "$f"
    m=$MODULE
    grep -E '^[A-Za-z_]' "$f" | grep -vE '^(static|typedef|struct|enum|union)\b|;[[:space:]]*$' |
        grep -oE '\bdsc_[A-Za-z0-9_]*[[:space:]]*(\(|=)' | sed -E 's/[[:space:]]*[(=]$//' |
        sed "s/\$/ $m/" >>"$defs" || true
done

for f in "${cfiles[@]}" "${hfiles[@]}"; do
    module_of "$f"
    m=$MODULE
    # Includes of headers in this directory.
    { grep -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]+"' "$f" || true; } |
        sed -E 's/.*"([^"]+)".*/\1/' | while read -r inc; do
        if [ -n "${has_h[$inc]:-}" ]; then
            module_of "$inc"
            if [ "$MODULE" != "$m" ]; then echo "$m $MODULE include ${f##*/}:$inc"; fi
        fi
    done >>"$edges"
    # Names a header declares: "module name file", matched against the definitions below.
    case "$f" in
    *.h)
        { grep -E '^[A-Za-z_]' "$f" || true; } |
            { grep -vE '^(static|typedef|struct|enum|union)\b|^#' || true; } |
            { grep -oE '\bdsc_[A-Za-z0-9_]*[[:space:]]*(\(|;)' || true; } |
            sed -E "s/[[:space:]]*[(;]\$//; s/^/$m /; s/\$/ $(basename "$f")/" >>"$decls"
        ;;
    esac
done
# A header declaring a name another module defines depends on that module.
awk 'FNR == NR { def[$1] = $2; next }
     ($2 in def) && def[$2] != $1 { print $1, def[$2], "declares", $3 ":" $2 }' "$defs" "$decls" \
    >>"$edges"
# A .c file including a shared header that declares its own definitions (dsc_sys.h for pread.c,
# random.c and resolve.c) implements that header: that include is no dependency.
awk 'FILENAME == ARGV[1] { def[$1] = $2; next }
     FILENAME == ARGV[2] { if ($2 in def) impl[$3, def[$2]] = 1; next }
     { split($4, at, ":"); if ($3 == "include" && at[1] ~ /\.c$/ && ((at[2], $1) in impl)) next; print }' \
    "$defs" "$decls" "$edges" >"$edges.kept"
mv "$edges.kept" "$edges"

if [ "$print" = 1 ]; then
    awk '{ print $1 " -> " $2 }' "$edges" | sort -u
fi

# Kahn's algorithm, forwards (drop nodes nothing unordered points to) and backwards (drop nodes
# that point to nothing unordered): what is left lies on a cycle.
left=$(awk '
    { if (!(($1, $2) in seen)) { seen[$1, $2] = 1; e_from[++ne] = $1; e_to[ne] = $2 }
      node[$1] = 1; node[$2] = 1 }
    function peel(dir,    changed, i, v, deg) {
        do {
            changed = 0
            split("", deg)
            for (i = 1; i <= ne; i++)
                if (!(e_from[i] in gone) && !(e_to[i] in gone))
                    deg[dir ? e_from[i] : e_to[i]]++
            for (v in node)
                if (!(v in gone) && !(v in deg)) { gone[v] = 1; changed = 1 }
        } while (changed)
    }
    END {
        peel(0); peel(1); peel(0)
        for (v in node) if (!(v in gone)) print v
    }' "$edges" | sort)

if [ -n "$left" ]; then
    echo "FAIL: the module graph of $dir has a cycle among: $(echo $left)"
    echo "edges between them:"
    awk -v l=" $(echo $left) " 'index(l, " " $1 " ") && index(l, " " $2 " ") { print "  " $0 }' \
        "$edges" | sort -u
    exit 1
fi
echo "ok: $(awk '{ print $1; print $2 }' "$edges" | sort -u | wc -l) modules, $(awk '{ print $1, $2 }' "$edges" | sort -u | wc -l) dependencies, no cycle ($dir)"
