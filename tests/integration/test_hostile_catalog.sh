#!/usr/bin/env bash
# Finding: the live catalog (--data-root) against a careless or hostile tenant. A 16 MiB manifest
# of unknown keys costs the server no more than its size while read and nothing kept (RSS from
# /proc, bounds relative to the file's size: docs/server.md), and is not parsed again by later
# rescans (STAT "catalog"."manifest_parses"); a manifest.json that is a FIFO, a manifest that is
# a symbolic link to a FIFO outside the root, and a dataset directory that is a symbolic link out
# of the root are refused (listed in STAT "catalog"."refused") without blocking: datasets added
# afterwards are listed; a directory whose manifest claims a served dataset's name is refused
# even when its name sorts first (GETs keep returning the first directory's bytes, the ERROR
# names both directories, dscache stat shows the conflict) until the first one is removed; and
# SIGTERM stops the server within --drain-seconds plus a second.
source "$(dirname "$0")/server_lib.sh"
source "$(dirname "$0")/hostile_lib.sh"

root=$work/root
outside=$work/outside
mkdir -p "$root" "$outside"
make_dataset "$root/base" base 300 none
start_server a --data-root "$root" --data-root-interval 1 --memory 64M --drain-seconds 2
# use_server NAME: the server the helpers below talk to.
use_server() {
    local pid_var="PID_$1" addr_var="ADDR_$1"
    cur_pid=${!pid_var} cur_addr=${!addr_var} log=$work/server-$1.log
}
use_server a
PY=${DSC_PYTHON:-/usr/bin/python3}

stat_json() { "$TOOL" call "$cur_addr" STAT; }
# parses: STAT's count of manifests read (-1: not reported).
parses() { json_get "$(stat_json)" 'j.get("catalog", {}).get("manifest_parses", -1)'; }
listed() { "$CLI" list --server "$cur_addr" | grep -q "^$1 "; }
rescans() { grep -c 'rescan: [0-9]* datasets served' "$log" || true; }
# hup_rescan: SIGHUP, then waits for the rescan it asks for (its "N datasets served" line).
hup_rescan() {
    local n
    n=$(rescans)
    kill -HUP "$cur_pid"
    until_ok 60 sh -c "[ \$(grep -c 'rescan: [0-9]* datasets served' '$log') -gt $n ]" \
        || fail "no rescan within 60 s of SIGHUP"
}
# add_dataset NAME DIRNAME [ingest args]: written under a hidden name, renamed into the root.
add_dataset() {
    make_dataset "$root/.$2.tmp" "$1" 300 none "${@:3}"
    mv "$root/.$2.tmp" "$root/$2"
}

# ---- A huge manifest: 16 MiB of unknown keys (FORMAT.md: ignored) -------------------------------
make_dataset "$work/huge-src" huge 300 none
"$PY" - "$work/huge-src/manifest.json" "$outside/huge.json" <<'EOF'
import sys
text = open(sys.argv[1]).read().rstrip()
assert text.endswith("}")
n = 8 << 20  # "0," per element: 16 MiB, the costliest shape for a tree parser
junk = '"junk_' + 'x' * 40 + '":[' + "0," * (n - 1) + "0]"
open(sys.argv[2], "w").write(text[:-1] + "," + junk + "}\n")
EOF
msize=$(stat -c %s "$outside/huge.json")
sleep 1.5 # the start-up rescans are over: the figures below are the huge manifest's
rss0=$(rss_kb "$cur_pid")
hwm0=$(peak_rss_kb "$cur_pid")
p0=$(parses)
mkdir "$root/.huge.tmp"
cp "$work/huge-src"/*.dsc "$root/.huge.tmp/"
cp "$outside/huge.json" "$root/.huge.tmp/manifest.json"
mv "$root/.huge.tmp" "$root/huge"
until_ok 60 listed huge && pass "a dataset with a $((msize >> 20)) MiB manifest of unknown keys is listed" \
    || fail "huge not listed within 60 s"
p1=$(parses)
rss1=$(rss_kb "$cur_pid")
hwm1=$(peak_rss_kb "$cur_pid")
kept_kb=$((rss1 - rss0))
peak_kb=$((hwm1 > rss0 ? hwm1 - rss0 : 0))
msize_kb=$((msize / 1024))
echo "manifest ${msize_kb} KiB: RSS ${rss0} -> ${rss1} KiB (kept ${kept_kb} KiB), peak ${hwm0} -> ${hwm1} KiB (${peak_kb} KiB over the RSS before); parses ${p0} -> ${p1}"
if [ "$SANITIZED" = 1 ]; then
    echo "skip: RSS bounds under a sanitizer (its allocator's figures, not the server's)"
else
    # docs/server.md: while read, the file's size (unmapped after) plus the known keys' parse;
    # kept, what the shards and "meta" need (a few KiB here).
    [ "$kept_kb" -lt $((msize_kb / 4)) ] \
        && pass "RSS kept after the huge manifest: ${kept_kb} KiB (< a quarter of its ${msize_kb} KiB)" \
        || fail "RSS kept ${kept_kb} KiB after a ${msize_kb} KiB manifest (want < $((msize_kb / 4)))"
    [ "$peak_kb" -lt $((2 * msize_kb)) ] \
        && pass "peak RSS while reading it: ${peak_kb} KiB over the RSS before (< twice its size)" \
        || fail "peak RSS ${peak_kb} KiB over the RSS before (want < $((2 * msize_kb)) KiB)"
fi
# Rescans (SIGHUP, and the periodic one every second) do not read it again.
hup_rescan
hup_rescan
sleep 2.5
p2=$(parses)
[ "$p2" = "$p1" ] && [ "$p1" -gt 0 ] && pass "unchanged manifests are not parsed again by 2 SIGHUP and the periodic rescans ($p1 -> $p2)" \
    || fail "manifest parses grew from $p1 to $p2 across rescans that found nothing changed"
# A rewritten manifest (another inode) is read again.
cp "$root/huge/manifest.json" "$root/huge/.m.tmp" && mv "$root/huge/.m.tmp" "$root/huge/manifest.json"
hup_rescan
p3=$(parses)
[ "$p3" -gt "$p2" ] && pass "a rewritten manifest is read again ($p2 -> $p3)" \
    || fail "a rewritten manifest was not read again ($p2 -> $p3)"

# ---- A claimant of a served name, sorting first --------------------------------------------------
make_dataset "$root/.zz-orig.tmp" shared 300 none
mv "$root/.zz-orig.tmp" "$root/zz-orig"
until_ok 10 listed shared || fail "shared not listed"
v1=$("$TOOL" call "$cur_addr" VERSION shared)
[[ $v1 =~ ^[0-9a-f]{16}$ ]] || fail "VERSION shared: $v1"
make_dataset "$root/.aa-claim.tmp" shared 300 none --seed 7
mv "$root/.aa-claim.tmp" "$root/aa-claim"
wait_line "$log" " error .*aa-claim.*shared.*zz-orig" 10 \
    && pass "the claimant is refused: $(grep -m1 ' error .*aa-claim' "$log" | cut -c1-220)" \
    || fail "no error line naming aa-claim and zz-orig"
hup_rescan
sleep 1.5 # and a periodic rescan or two
out=$(timeout 60 "$TOOL" fetch "$cur_addr" shared "$root/zz-orig" 4 2>&1) \
    && pass "GETs return the first directory's bytes: $out" || fail "shared is no longer zz-orig's: $out"
[ "$("$TOOL" call "$cur_addr" VERSION shared)" = "$v1" ] && pass "the version stays $v1" \
    || fail "the version of shared changed"
st=$("$CLI" stat --server "$cur_addr")
grep -q "conflict: .*aa-claim claims dataset shared, which belongs to .*zz-orig" <<<"$st" \
    && pass "dscache stat shows the conflict: $(grep conflict: <<<"$st")" \
    || fail "dscache stat does not show the conflict: $st"
n=$(grep -c " error .*aa-claim.*shared" "$log" || true)
[ "$n" = 1 ] && pass "the conflict is logged once" || fail "the conflict was logged $n times"
# Once the first directory is removed the name is free: the claimant is served.
rm -rf "$root/zz-orig"
until_ok 10 sh -c "[ \"\$('$TOOL' call '$cur_addr' VERSION shared)\" != '$v1' ]" \
    || fail "shared not taken over by aa-claim after zz-orig was removed"
out=$(timeout 60 "$TOOL" fetch "$cur_addr" shared "$root/aa-claim" 4 2>&1) \
    && pass "after zz-orig's removal the name goes to aa-claim: $out" || fail "shared after removal: $out"

kill -0 "$cur_pid" && pass "server a alive" || fail "server a died"
stop_within a 3

# ---- Files that would block or lead out of the root ----------------------------------------------
# A second server, on a second root: what blocked the catalog there no longer matters to the parts
# above.
root=$work/root2
mkdir -p "$root"
make_dataset "$root/base" base 300 none
start_server b --data-root "$root" --data-root-interval 1 --memory 64M --drain-seconds 2
use_server b
# A dataset directory that is a link to a dataset outside the root: not served.
make_dataset "$outside/evil" evil 300 none
ln -s "$outside/evil" "$root/evil-link"
add_dataset late0 late0
until_ok 10 listed late0 || fail "late0 not listed within 10 s"
hup_rescan
listed evil && fail "a dataset directory linked from outside the root is served" \
    || pass "a dataset directory that is a link out of the root is not served"
# A FIFO named manifest.json, and a manifest that is a link to a FIFO outside the root.
mkdir "$root/fifo-manifest"
mkfifo "$root/fifo-manifest/manifest.json"
add_dataset late1 late1
until_ok 10 listed late1 && pass "a FIFO manifest.json blocks nothing: late1 listed" \
    || fail "late1 not listed within 10 s beside a FIFO manifest.json"
mkfifo "$outside/fifo"
mkdir "$root/link-manifest"
ln -s "$outside/fifo" "$root/link-manifest/manifest.json"
add_dataset late2 late2
until_ok 10 listed late2 && pass "a manifest linked to a FIFO out of the root blocks nothing: late2 listed" \
    || fail "late2 not listed within 10 s beside a manifest linked out of the root"
hup_rescan
refused=$(json_get "$(stat_json)" '" ".join(sorted(e["dir"].rsplit("/", 1)[1] for e in j.get("catalog", {}).get("refused", [])))')
[ "$refused" = "evil-link fifo-manifest link-manifest" ] \
    && pass "STAT lists the refused directories: $refused" || fail "STAT refused: '$refused'"
grep -q "fifo-manifest: not a regular file" "$log" && pass "the FIFO manifest is logged as refused" \
    || fail "no log line refusing the FIFO manifest"
n=$(grep -c "fifo-manifest: not a regular file" "$log" || true)
[ "$n" = 1 ] && pass "logged once, not at every rescan" || fail "the refusal was logged $n times"

kill -0 "$PID_b" && pass "server b alive" || fail "server b died"
# --drain-seconds 2: stopped within 3 s, the FIFOs still there.
stop_within b 3
finish
