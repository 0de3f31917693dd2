#!/usr/bin/env bash
# Layering check: the proto/ codec includes only proto/ headers, proto/sys only proto/ ones, and
# server/ and client/ do not include each other's headers (docs/architecture-proto.md).
# usage: layering_check.sh [SOURCE_ROOT]   (default: the tree this script is in)
set -euo pipefail
root=$(cd "${1:-$(dirname "$0")/..}" && pwd)

# The directories a layer's files search after their own, as the CMake targets set them.
declare -A search=(
    [codec]="proto"
    [sys]="proto/sys proto"
    [server]="server proto/sys proto"
    [client]="client/include client/lib client/cli proto/sys proto"
)
# The layers a layer may include.
declare -A allowed=([codec]="codec" [sys]="sys codec" [server]="server sys codec"
                    [client]="client sys codec")
# Every directory holding project headers: an include name found only here, outside the
# layer's own search path, is still a project header (a build that finds it relies on an extra -I).
all_dirs="proto proto/sys server client/include client/lib client/cli"

layer_of() { # path relative to root -> $LAYER: the layer name, or "" outside the checked ones
    case $1 in
    proto/sys/*) LAYER=sys ;;
    proto/*) LAYER=codec ;;
    server/*) LAYER=server ;;
    client/python/*) LAYER="" ;;
    client/*) LAYER=client ;;
    *) LAYER="" ;;
    esac
}

# Sets $TARGET to the file (relative to root) that `name` resolves to for a file in dir `own` of
# layer `layer`: own dir first for "quoted" names, then the layer's search path, then (to name
# what a wrong include reaches) every project header directory; "" for a system header.
resolve() {
    local own=$1 layer=$2 quoted=$3 name=$4 d
    local dirs="${search[$layer]} $all_dirs"
    [ "$quoted" = 1 ] && dirs="$own $dirs"
    TARGET=""
    for d in $dirs; do
        if [ -f "$root/$d/$name" ]; then
            TARGET="$d/$name"
            case $TARGET in
            *..*) TARGET=$(realpath --relative-to="$root" "$root/$TARGET") ;;
            esac
            return
        fi
    done
}

files=0 includes=0 bad=0
while IFS= read -r file; do
    rel=${file#"$root"/}
    layer_of "$rel"
    layer=$LAYER
    [ -n "$layer" ] || continue
    files=$((files + 1))
    own=$(dirname "$rel")
    while IFS=: read -r line text; do
        [ -n "$line" ] || continue
        [[ $text =~ include[[:space:]]*([<\"])([^\">]+)([\">]) ]] || continue
        spec=${BASH_REMATCH[1]}${BASH_REMATCH[2]}${BASH_REMATCH[3]}
        name=${BASH_REMATCH[2]}
        quoted=0
        [ "${BASH_REMATCH[1]}" = '"' ] && quoted=1
        includes=$((includes + 1))
        resolve "$own" "$layer" "$quoted" "$name"
        target=$TARGET
        [ -n "$target" ] || continue
        layer_of "$target"
        tlayer=$LAYER
        case " ${allowed[$layer]} " in
        *" $tlayer "*) ;;
        *)
            echo "$rel:$line: includes $spec = $target ($tlayer): the $layer layer may include" \
                 "only: ${allowed[$layer]}"
            bad=$((bad + 1))
            ;;
        esac
    done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"][^">]+[">]' "$file" || true)
done < <(find "$root/proto" "$root/server" "$root/client" -type f \( -name '*.c' -o -name '*.h' \) \
         | sort)

if [ "$files" -lt 10 ] || [ "$includes" -lt 10 ]; then
    echo "FAIL: only $files files / $includes includes found under $root (wrong root?)"
    exit 1
fi
if [ "$bad" -gt 0 ]; then
    echo "FAIL: $bad include(s) cross the layers (proto codec <- proto/sys <- server | client)"
    exit 1
fi
echo "layering ok: $files files, $includes includes under $root"
