#!/usr/bin/env bash
# The README's C example, exactly as written: its build line (taken from README.md, run in a tree
# laid out as a checkout with its build/) compiles the README's C block, and the program runs
# with no LD_LIBRARY_PATH against a server at the address the example names (127.0.0.1:7070,
# inside a network namespace this test makes, so no port of the machine is taken): it reads
# every batch of "imgs" and exits 0; with no server it exits 1 and prints the detailed message
# (the server tried and what happened), not only the error's name.
source "$(dirname "$0")/server_lib.sh"
src=${DSC_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
build=$(dirname "$DSC_BIN")
if [ "${DSC_SANITIZE:-OFF}" = ON ] || [ "${DSC_TSAN:-OFF}" = ON ]; then
    echo "SKIP: a sanitizer build's library needs the sanitizer runtime in the example; the" \
        "README example runs in the release build"
    exit 77
fi
if ! unshare --net true 2>/dev/null; then
    echo "SKIP: cannot make a network namespace here (unshare --net needs root or user namespaces)"
    exit 77
fi
command -v cc >/dev/null || { echo "SKIP: no C compiler (cc)"; exit 77; }

# The build line: the inline code after "C, built against the build tree (" in README.md.
line=$(awk '/^C, built against the build tree/{f=1} f{print} f&&/\):?$|\) or /{exit}' "$src/README.md" |
    tr '\n' ' ' | sed -n 's/.*build tree (`\([^`]*\)`.*/\1/p')
[ -n "$line" ] || { fail "README.md has no build line for the C example"; finish; }
case "$line" in cc\ *) ;; *) fail "README's C build line does not start with cc: $line"; finish ;; esac
# The C block: the first ```c fence after that line.
awk '/^C, built against the build tree/{f=1} f&&/^```c$/{c=1; next} c&&/^```$/{exit} c{print}' \
    "$src/README.md" >"$work/train.c"
[ -s "$work/train.c" ] || { fail "README.md has no C block after its build line"; finish; }

# A tree shaped like the README's: the sources and build/ at the top.
tree=$work/tree
mkdir -p "$tree"
ln -s "$src/client" "$tree/client"
ln -s "$src/proto" "$tree/proto"
ln -s "$build" "$tree/build"
cp "$work/train.c" "$tree/train.c"
if (cd "$tree" && env -u LD_LIBRARY_PATH bash -c "$line") >"$work/cc.log" 2>&1; then
    pass "the README's build line compiles its C block: $line"
else
    fail "the README's build line failed: $line: $(cat "$work/cc.log")"
    finish
fi
exe=$tree/train
[ -x "$exe" ] || exe=$tree/a.out
[ -x "$exe" ] || { fail "the build line made neither train nor a.out"; finish; }

# The dataset the example reads: "imgs", field 0 of shape [3, 32, 32] u8.
"$CLI" ingest synthetic -o "$work/imgs" --name imgs --samples 1000 --field image:u8:3x32x32 \
    --field label:i64 --shard-size 1M --chunk-size 64K >/dev/null

# In a fresh network namespace: only its loopback, so 127.0.0.1:7070 is the test's alone.
cat >"$work/ns.sh" <<EOF
set -u
ip link set lo up
"$SERVER" --data "$work/imgs" --listen 127.0.0.1:7070 --http 127.0.0.1:0 \
    --http-port-file "$work/ns.hport" --threads 2 >"$work/server-ns.log" 2>&1 &
srv=\$!
trap 'kill -KILL \$srv 2>/dev/null; wait \$srv 2>/dev/null' EXIT
for _ in \$(seq 1 400); do
    [ -s "$work/ns.hport" ] && curl -sf "http://127.0.0.1:\$(cat "$work/ns.hport")/readyz" >/dev/null && break
    sleep 0.05
done
env -u LD_LIBRARY_PATH "$exe"; echo "rc=\$?"
kill -KILL \$srv; wait \$srv 2>/dev/null
env -u LD_LIBRARY_PATH "$exe"; echo "rc=\$?"
EOF
out=$(timeout 120 unshare --net bash "$work/ns.sh" 2>&1) || true
first=$(grep -m1 '^rc=' <<<"$out" || true)
second=$(grep '^rc=' <<<"$out" | sed -n 2p || true)
if [ "$first" = rc=0 ]; then
    pass "the example read every batch of imgs from 127.0.0.1:7070 and exited 0"
else
    fail "the example against a live server: $first: $out"
fi
if [ "$second" = rc=1 ] && grep -q '^dscache: .*: .*127\.0\.0\.1:7070' <<<"$out"; then
    pass "with no server it exits 1 with the detail: $(grep -m1 '^dscache:' <<<"$out")"
else
    fail "with no server: wanted rc=1 and a message naming 127.0.0.1:7070: $out"
fi
finish
