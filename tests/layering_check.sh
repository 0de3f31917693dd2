#!/usr/bin/env bash
# The walls between the wings (docs/ARCHITECTURE.md): every #include of a project header in
# proto/, sys/, server/ and client/ is checked against the table below, which says what each wing
# may include. Header names are unique in the tree (the build searches all of a side's wings), so
# a name says which file it is.
# usage: layering_check.sh [SOURCE_ROOT]   (default: the tree this script is in)
#        layering_check.sh --self-test     (forbidden includes added to a copy are each found)
set -euo pipefail

# wing        files (globs, first match wins; * spans folders)                   may include (besides itself)
table='
codec       proto/*                                             -
sys         sys/*                                               codec
srv-base    server/srvlog.* server/text.* server/fairq.*        sys codec
srv-cache   server/cache/*                                      srv-base sys codec
srv-net     server/net/*                                        srv-mid srv-cache srv-base sys codec
srv-top     server/main.c server/options.*                      srv-net srv-mid srv-cache srv-base sys codec
srv-mid     server/*                                            srv-cache srv-base sys codec
api         client/include/*                                    codec
cl-base     client/lib/base/*                                   api sys codec
cl-source   client/lib/source/*                                 cl-base api sys codec
cl-image    client/lib/image/*                                  cl-base api sys codec
cl-writer   client/lib/writer/*                                 cl-base api sys codec
cl-loader   client/lib/loader/*                                 cl-source cl-image cl-base api sys codec
cli         client/cli/*                                        cl-loader cl-writer cl-source cl-image cl-base api sys codec
py-ext      client/python/ext/*                                 api codec
'
# So: proto/ is a codec of its own; sys/ reaches neither server/ nor client/; server/ and client/
# meet only in proto/ and sys/; source/ never includes loader/; image/ and writer/ include
# neither (nor each other); net/ sits on the flat modules, which sit on cache/.

self_test() {
    local here tmp out rc=0
    here=$(cd "$(dirname "$0")/.." && pwd)
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' RETURN
    mkdir -p "$tmp/client"
    cp -r "$here/proto" "$here/sys" "$here/server" "$tmp/"
    cp -r "$here/client/include" "$here/client/lib" "$here/client/cli" "$tmp/client/"
    bash "$0" "$tmp" >/dev/null || { echo "FAIL: the copy fails before any change"; return 1; }
    # file that gets the include | header it includes | the wing named in the refusal
    cases='
client/lib/source/conn.c loader.h cl-loader
client/lib/image/image.c conn.h cl-source
client/lib/writer/writer.c image.h cl-image
client/lib/base/slots.c source.h cl-source
sys/pread.c catalog.h srv-cache
sys/resolve.c loader.h cl-loader
proto/shard.c dsc_sys.h sys
server/net/tcp.c conn.h cl-source
client/lib/loader/fetch.c store.h srv-cache
server/cache/catalog.c tcp.h srv-net
server/cluster.c dispatch.h srv-net
'
    while read -r file header wing; do
        [ -n "$file" ] && echo "#include \"$header\"" >>"$tmp/$file"
    done <<<"$cases"
    if out=$(bash "$0" "$tmp" 2>&1); then
        echo "FAIL: a copy with forbidden includes passed the check"
        return 1
    fi
    while read -r file header wing; do
        [ -n "$file" ] || continue
        if grep -q "^$file:.*\"$header\".*($wing)" <<<"$out"; then
            echo "found: $(grep "^$file:.*\"$header\"" <<<"$out")"
        else
            echo "FAIL: $file including $header ($wing) was not refused"
            rc=1
        fi
    done <<<"$cases"
    return $rc
}
if [ "${1:-}" = "--self-test" ]; then
    self_test
    echo "self-test ok: each forbidden include added to a copy of the tree is refused"
    exit 0
fi

root=$(cd "${1:-$(dirname "$0")/..}" && pwd)
set -f # the table's globs are matched against paths, never expanded
declare -A allowed header_of
# The table's rows: the wing, its globs (the fields with a '/'), then the wings it may include.
wings=() globs=()
while read -r wing rest; do
    [ -n "$wing" ] || continue
    files="" may=""
    for f in $rest; do
        case $f in */*) files="$files $f" ;; -) ;; *) may="$may $f" ;; esac
    done
    wings+=("$wing")
    globs+=("$files")
    allowed[$wing]=" $wing$may "
done <<<"$table"

wing_of() { # path relative to root -> $WING ("" outside the checked tree)
    local i g
    WING=""
    for i in "${!wings[@]}"; do
        for g in ${globs[$i]}; do
            # shellcheck disable=SC2053
            if [[ $1 == $g ]]; then
                WING=${wings[$i]}
                return
            fi
        done
    done
}

# Every project header, by name.
while IFS= read -r h; do
    rel=${h#"$root"/}
    name=${rel##*/}
    if [ -n "${header_of[$name]:-}" ]; then
        echo "FAIL: two headers named $name: ${header_of[$name]} and $rel (names must be unique)"
        exit 1
    fi
    header_of[$name]=$rel
done < <(find "$root/proto" "$root/sys" "$root/server" "$root/client" -name '*.h' \
         -not -path '*/python/dscache/*' | sort)

files=0 includes=0 bad=0
include_re='include[[:space:]]*[<"]([^">]+)[">]'
declare -A seen_wing
while IFS= read -r file; do
    rel=${file#"$root"/}
    wing_of "$rel"
    wing=$WING
    if [ -z "$wing" ]; then
        echo "FAIL: $rel belongs to no wing of the table (add it to tests/layering_check.sh)"
        bad=$((bad + 1))
        continue
    fi
    seen_wing[$wing]=1
    files=$((files + 1))
    while IFS=: read -r line text; do
        [[ $text =~ $include_re ]] || continue
        name=${BASH_REMATCH[1]}
        case $name in */*) continue ;; esac # project headers are named without a folder
        target=${header_of[$name]:-}
        [ -n "$target" ] || continue # a system header
        includes=$((includes + 1))
        wing_of "$target"
        twing=$WING
        case ${allowed[$wing]} in
        *" $twing "*) ;;
        *)
            echo "$rel:$line: includes \"$name\" = $target ($twing): the $wing wing may include" \
                 "only:${allowed[$wing]}"
            bad=$((bad + 1))
            ;;
        esac
    done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"][^">]+[">]' "$file" || true)
done < <(find "$root/proto" "$root/sys" "$root/server" "$root/client" -type f \
         \( -name '*.c' -o -name '*.h' \) -not -path '*/python/dscache/*' | sort)

if [ "$files" -lt 10 ] || [ "$includes" -lt 10 ]; then
    echo "FAIL: only $files files / $includes includes found under $root (wrong root?)"
    exit 1
fi
if [ "$bad" -gt 0 ]; then
    echo "FAIL: $bad include(s) cross the walls of tests/layering_check.sh's table"
    exit 1
fi
echo "layering ok: $files files in ${#seen_wing[@]} wings, $includes project includes under $root"
