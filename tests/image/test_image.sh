#!/usr/bin/env bash
# The server image, built with no registry (deploy/image/build-image.sh: mmdebstrap minbase from
# Debian's packages + this build, an OCI layout by umoci) and started: unpacked with umoci and
# run by an OCI runtime (crun or runc) with the host's network, a dataset bind-mounted; from
# outside the container /readyz answers 200 and `dscache get` fetches and verifies a shard;
# SIGTERM stops it with exit 0. Where no OCI runtime can start a container here, the image's
# root file system runs under unshare(1) namespaces + chroot as the image's user instead, and
# the test says so. Skips (with the reason) where mmdebstrap or umoci is missing or cannot
# reach Debian's archive. Label "image": minutes, run once in the release pass.
set -euo pipefail
source "$(dirname "$0")/../integration/base_lib.sh"
src=${DSC_SRC:?}
build=$(dirname "$DSC_BIN")
if [ "${DSC_SANITIZE:-OFF}" = ON ] || [ "${DSC_TSAN:-OFF}" = ON ]; then
    echo "SKIP: the image holds the release build (sanitizer runtimes are not in it)"; exit 77
fi
for tool in mmdebstrap umoci curl; do
    command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed (apt-get install $tool)"; exit 77; }
done
[ "$(id -u)" = 0 ] || unshare --user --map-root-user true 2>/dev/null ||
    { echo "SKIP: neither root nor user namespaces: mmdebstrap cannot build a root file system"; exit 77; }

layout=$work/layout
rc=0
bash "$src/deploy/image/build-image.sh" --build "$build" --out "$layout" --tag test >"$work/build.log" 2>&1 || rc=$?
if [ $rc = 4 ] && grep -qiE "failed to fetch|temporary failure|could not resolve|unable to connect|connection" "$work/build.log"; then
    echo "SKIP: mmdebstrap cannot reach Debian's archive here:"; tail -n 3 "$work/build.log"; exit 77
fi
[ $rc = 0 ] || { cat "$work/build.log"; fail "build-image.sh exit $rc"; finish; }
pass "$(tail -n1 "$work/build.log")"

bundle=$work/bundle
umoci unpack --image "$layout:test" "$bundle" >/dev/null 2>&1 || fail "umoci unpack"
rootfs=$bundle/rootfs
for f in usr/local/bin/dscached usr/local/bin/dscache usr/local/lib/libdscache.so; do
    [ -e "$rootfs/$f" ] || fail "image lacks /$f"
done
if ls "$rootfs"/usr/lib/x86_64-linux-gnu/libibverbs* >/dev/null 2>&1; then fail "image holds RDMA libraries"; fi
grep -q '^dscache:x:10001:' "$rootfs/etc/passwd" || fail "image has no dscache user"

# A dataset on the host, bind-mounted at /data; the server writes its ports there.
data=$work/data
"$DSC_BIN/dscache" ingest synthetic -o "$data/ds" --name imgds --samples 2000 --field x:u8:256 \
    --shard-size 64K >/dev/null
chmod -R a+rwX "$data"
chmod a+x "$work"
args=(/usr/local/bin/dscached --data /data/ds --listen 127.0.0.1:0 --http 127.0.0.1:0
      --port-file /data/port --http-port-file /data/hport --memory 32M --threads 1 --warm)
/usr/bin/python3 - "$bundle/config.json" "$data" "${args[@]}" <<'PY'
import json, sys
path, data, args = sys.argv[1], sys.argv[2], sys.argv[3:]
c = json.load(open(path))
if c["process"]["args"][0] != "/usr/local/bin/dscached":
    sys.exit("entrypoint is %r, not dscached" % c["process"]["args"])
if c["process"]["user"].get("uid") != 10001:
    sys.exit("image user is %r, not 10001" % c["process"]["user"])
c["process"]["args"] = args
c["process"]["terminal"] = False
# The host's network: /readyz and GET from outside on 127.0.0.1. No cgroup set-up (the
# runtime's cgroup manager is off: this machine may be in hybrid cgroup mode).
c["linux"]["namespaces"] = [n for n in c["linux"]["namespaces"] if n["type"] != "network"]
c["linux"].pop("resources", None)
c["linux"].pop("cgroupsPath", None)
c["mounts"] = [m for m in c["mounts"] if m["type"] != "cgroup"]
c["mounts"].append({"destination": "/data", "type": "bind", "source": data, "options": ["rbind", "rw"]})
json.dump(c, open(path, "w"))
PY
pass "image config: entrypoint /usr/local/bin/dscached, user 10001"

id=dscache-test-$$
runner="" pid=""
start_with() { # runtime: starts the container in the background; 0 once the port files exist
    rm -f "$data/port" "$data/hport"
    "$@" >"$work/run.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    for _ in $(seq 1 100); do
        [ -s "$data/port" ] && [ -s "$data/hport" ] && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
for rt in crun runc; do
    command -v "$rt" >/dev/null || continue
    mgr=()
    [ "$rt" = crun ] && mgr=(--cgroup-manager=disabled)
    if start_with "$rt" "${mgr[@]}" run --bundle "$bundle" "$id"; then
        runner=$rt
        break
    fi
    echo "note: $rt cannot start the container here: $(tail -n1 "$work/run.log")"
    "$rt" "${mgr[@]}" delete -f "$id" >/dev/null 2>&1 || true
done
if [ -z "$runner" ]; then
    command -v unshare >/dev/null && [ "$(id -u)" = 0 ] ||
        { echo "SKIP: no OCI runtime starts a container here and unshare+chroot needs root"; exit 77; }
    echo "note: no OCI runtime works here; running the image's root file system with unshare + chroot as uid 10001"
    mkdir -p "$rootfs/data"
    mount --bind "$data" "$rootfs/data"
    umount_data() { umount "$rootfs/data" 2>/dev/null || umount -l "$rootfs/data" 2>/dev/null || true; }
    cleanup_hooks+=(umount_data)
    start_with unshare --pid --fork --mount-proc="$rootfs/proc" --ipc --uts \
        chroot --userspec=10001:10001 "$rootfs" "${args[@]}" ||
        { cat "$work/run.log"; fail "the image's dscached did not start"; finish; }
    runner="unshare+chroot"
fi
addr=127.0.0.1:$(cat "$data/port")
http=127.0.0.1:$(cat "$data/hport")
until_ok 30 curl -sf "http://$http/readyz" && pass "started with $runner: /readyz $(curl -s "http://$http/readyz")" \
    || fail "not ready: $(curl -s "http://$http/readyz"); $(cat "$work/run.log")"
"$DSC_BIN/dscache" get --server "$addr" --dataset imgds --shard 0 -o "$work/shard0.bin" >"$work/get.log" 2>&1 \
    || fail "dscache get: $(cat "$work/get.log")"
got=$(stat -c %s "$work/shard0.bin" 2>/dev/null || echo 0)
want=$(json_get "$(cat "$data/ds/manifest.json")" 'j["shards"][0]["samples"] * 256')
[ "$got" = "$want" ] && pass "GET from outside: shard 0 fetched and verified, $got bytes decoded" \
    || fail "GET shard 0: $got bytes, want $want"
if [ "$runner" = unshare+chroot ]; then
    child=$(ps --ppid "$pid" -o pid= | tr -d ' ')   # dscached (chroot execs it)
    kill -TERM "$child" 2>/dev/null || true
else
    "$runner" $([ "$runner" = crun ] && echo --cgroup-manager=disabled) kill "$id" TERM 2>/dev/null || true
fi
rc=0
wait "$pid" || rc=$?
[ $rc = 0 ] && pass "SIGTERM: exit 0" || fail "container exit $rc: $(tail -n 3 "$work/run.log")"
[ "$runner" = unshare+chroot ] || "$runner" $([ "$runner" = crun ] && echo --cgroup-manager=disabled) delete -f "$id" >/dev/null 2>&1 || true
finish
