#!/usr/bin/env bash
# Layering check of a directory of C modules (client/lib, server/, client/cli): fails when the
# module graph of DIR/*.c/*.h has a cycle. A module is a .c file with its own header (X.c, X.h,
# X_int.h, X_stub.c, X_common.c; a header without a .c, such as a types-only one, is a module of
# its own). Edges: every `#include "Y.h"` of a file in the directory, and every header's
# declaration of a function or object that another module's .c defines (a header declaring module
# M's functions is M's interface: including it depends on M).
# usage: loader_layering_check.sh [DIR] [--print]   (DIR: default client/lib of this tree)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dir="$here/client/lib"
print=0
for arg in "$@"; do
    case "$arg" in
    --print) print=1 ;;
    *) dir=$arg ;;
    esac
done
if [ ! -d "$dir" ] || ! ls "$dir"/*.c >/dev/null 2>&1; then
    echo "loader_layering_check: no C sources in $dir" >&2
    exit 2
fi

module_of() { # file name -> module name
    local b
    b=$(basename "$1")
    b=${b%.c}
    b=${b%.h}
    if [ -e "$dir/${b%_int}.c" ]; then b=${b%_int}; fi
    # X_stub.c (X.c's stand-in in a build without what X needs) and X_common.c (what both share)
    # without a header of their own are parts of module X: they implement X.h.
    case "$b" in
    *_stub | *_common)
        if [ ! -e "$dir/$b.h" ] && [ -e "$dir/${b%_*}.h" ]; then b=${b%_*}; fi
        ;;
    esac
    echo "$b"
}

edges=$(mktemp)
defs=$(mktemp)
decls=$(mktemp)
trap 'rm -f "$edges" "$defs" "$decls"' EXIT

# Names defined (non-static, at column 0) by each .c file: "name module".
for f in "$dir"/*.c; do
    m=$(module_of "$f")
    grep -E '^[A-Za-z_]' "$f" | grep -vE '^(static|typedef|struct|enum|union)\b|;[[:space:]]*$' |
        grep -oE '\bdsc_[A-Za-z0-9_]*[[:space:]]*(\(|=)' | sed -E 's/[[:space:]]*[(=]$//' |
        sed "s/\$/ $m/" >>"$defs" || true
done

for f in "$dir"/*.c "$dir"/*.h; do
    [ -e "$f" ] || continue
    m=$(module_of "$f")
    # Includes of headers in this directory.
    { grep -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]+"' "$f" || true; } |
        sed -E 's/.*"([^"]+)".*/\1/' | while read -r inc; do
        if [ -e "$dir/$inc" ]; then
            t=$(module_of "$inc")
            if [ "$t" != "$m" ]; then echo "$m $t include $(basename "$f"):$inc"; fi
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
