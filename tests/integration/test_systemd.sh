#!/usr/bin/env bash
# cmake --install puts the systemd unit, the sysusers.d entry, the example configuration and the
# man pages in place; the unit names the configured install's dscached and configuration;
# systemd-sysusers creates the dscache user from the entry (in a scratch root);
# systemd-analyze verify finds nothing to report (where systemd-analyze is installed); the man
# pages render (where man is installed); the example configuration is one dscached accepts.
set -euo pipefail
source "$(dirname "$0")/base_lib.sh"
build=$(dirname "$DSC_BIN")
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
unit=$prefix/lib/systemd/system/dscached.service
for f in "$unit" "$prefix/lib/sysusers.d/dscache.conf" "$prefix/etc/dscache/dscached.json.example" \
         "$prefix/share/man/man8/dscached.8" "$prefix/share/man/man1/dscache.1"; do
    [ -f "$f" ] || fail "not installed: ${f#$prefix/}"
done
pass "installed: unit, sysusers.d entry, example configuration, dscached(8), dscache(1)"
configured=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$build/CMakeCache.txt")
exec_line=$(grep '^ExecStart=' "$unit")
[ "$exec_line" = "ExecStart=$configured/bin/dscached --config $( [ "$configured" = /usr ] && echo /etc || echo "$configured/etc")/dscache/dscached.json" ] \
    && pass "unit: $exec_line" || fail "unit ExecStart: $exec_line (prefix $configured)"

if command -v systemd-sysusers >/dev/null; then
    mkdir -p "$work/root/etc"
    systemd-sysusers --root="$work/root" "$prefix/lib/sysusers.d/dscache.conf" >/dev/null 2>&1 || true
    grep -q '^dscache:' "$work/root/etc/passwd" && grep -q '^dscache:' "$work/root/etc/group" \
        && pass "systemd-sysusers creates the dscache user and group" \
        || fail "systemd-sysusers did not create dscache: $(cat "$work/root/etc/passwd" 2>/dev/null)"
else
    echo "note: systemd-sysusers not installed: the user entry was not exercised"
fi

if command -v systemd-analyze >/dev/null; then
    # The unit as this prefix would have it (the binary must exist for verify).
    sed "s#^ExecStart=[^ ]*#ExecStart=$prefix/bin/dscached#" "$unit" >"$work/dscached.service"
    out=$(MANPATH=$prefix/share/man SYSTEMD_LOG_LEVEL=notice \
          systemd-analyze verify --man="$(command -v man >/dev/null && echo yes || echo no)" \
          "$work/dscached.service" 2>&1) || fail "systemd-analyze verify failed: $out"
    out=$(grep -v -e '^$' <<<"$out" | grep -v "Failed to prepare filename" || true)
    [ -z "$out" ] && pass "systemd-analyze verify: clean" || fail "systemd-analyze verify: $out"
else
    echo "note: systemd-analyze not installed: the unit was not verified"
fi
if command -v man >/dev/null; then
    for page in "$prefix/share/man/man8/dscached.8" "$prefix/share/man/man1/dscache.1"; do
        out=$(MANWIDTH=80 man -l "$page" 2>&1 >/dev/null) || fail "man $page: $out"
        [ -z "$out" ] || fail "man warns on $page: $out"
    done
    pass "man pages render without warnings"
fi
# Every key of the example configuration is one dscached knows: it starts with it.
sed -e "s#/srv/datasets/train#$work/ds#" -e 's#0.0.0.0:7070#127.0.0.1:0#' -e 's#0.0.0.0:7071#127.0.0.1:0#' \
    -e 's#"64G"#"16M"#' "$prefix/etc/dscache/dscached.json.example" >"$work/conf.json"
"$DSC_BIN/dscache" ingest synthetic -o "$work/ds" --samples 100 --field x:u8:16 >/dev/null
"$DSC_BIN/dscached" --config "$work/conf.json" --port-file "$work/port" >"$work/log" 2>&1 &
pid=$!
pids+=("$pid")
until_ok 10 test -s "$work/port" && pass "dscached starts with the example configuration" \
    || fail "example configuration: $(cat "$work/log")"
kill "$pid"; wait "$pid" || fail "dscached exit $?"
finish
