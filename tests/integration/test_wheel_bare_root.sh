#!/usr/bin/env bash
# The wheel of `pip install ./client/python` on a bare image: a minimal Debian root made by
# mmdebstrap (variant apt, plus python3 and python3-numpy: no -dev package, none of libuv,
# libcjson, libsodium, libarchive, libjpeg, libturbojpeg, libpng, libwebp) gets the wheel built
# from this checkout (pip run from its own wheel: pip is not installed there). Inside it, under
# unshare (PID and mount namespaces: everything started inside dies with it, its mounts go with
# it) + chroot: `import dscache` loads the wheel's libdscache, `dscache --help` and `dscached
# --help` run, `dscache ingest` writes an array dataset and an image folder (PNG, and JPEG and
# WebP where the host's PIL makes them), a dscached on 127.0.0.1 serves them and a loader epoch
# returns every array byte and the images' colours. readelf -d: no file of the wheel needs a
# library outside glibc and the wheel's own dscache/_libs. The root's tarball is kept in the
# build directory (wheel-root/) between runs: mmdebstrap takes minutes. Skips with the reason
# where mmdebstrap, root, patchelf or Debian's archive is missing.
set -euo pipefail
source "$(dirname "$0")/base_lib.sh"
src=${DSC_SRC:?}
build=$(dirname "$DSC_BIN")
PY=${DSC_PYTHON:-/usr/bin/python3}
if [ "${DSC_SANITIZE:-OFF}" = ON ] || [ "${DSC_TSAN:-OFF}" = ON ]; then
    echo "SKIP: the wheel is a release build (a sanitizer build's library needs its runtime)"; exit 77
fi
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (mmdebstrap --mode=root, chroot)"; exit 77; }
for tool in mmdebstrap unshare chroot patchelf readelf curl; do
    command -v "$tool" >/dev/null ||
        { echo "SKIP: $tool is not installed (deploy/local/setup.sh installs it)"; exit 77; }
done
"$PY" -m pip --version >/dev/null 2>&1 || { echo "SKIP: $PY has no pip (python3-pip)"; exit 77; }
pipwhl=$(ls /usr/share/python-wheels/pip-*.whl 2>/dev/null | sort -V | tail -n1 || true)
[ -n "$pipwhl" ] || pipwhl=$("$PY" -c 'import ensurepip, glob, os
print((sorted(glob.glob(os.path.join(os.path.dirname(ensurepip.__file__), "_bundled", "pip-*.whl"))) or [""])[-1])' 2>/dev/null || true)
[ -n "$pipwhl" ] || { echo "SKIP: no pip wheel to run inside the root (python3-pip-whl)"; exit 77; }
suite=bookworm
if grep -q '^ID=debian' /etc/os-release 2>/dev/null; then
    suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
fi

# ---- the root file system, cached ----------------------------------------------------------
cache=$build/wheel-root
mkdir -p "$cache"
tarball=$cache/$suite-apt-python3-numpy.tar
exec 9>"$cache/lock"
flock 9 # one mmdebstrap at a time; a second run waits, then uses its tarball
if [ ! -s "$tarball" ]; then
    curl -sfI --max-time 30 "http://deb.debian.org/debian/dists/$suite/InRelease" >/dev/null ||
        { echo "SKIP: Debian's archive (deb.debian.org) cannot be reached: mmdebstrap cannot make the root"; exit 77; }
    echo "note: making the $suite root with mmdebstrap (minutes; kept in $tarball)"
    t0=$SECONDS
    rc=0
    mmdebstrap --mode=root --variant=apt --include=python3,python3-numpy --format=tar \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' --aptopt='Acquire::Retries "3"' \
        "$suite" "$cache/making.tar" >"$work/mmdebstrap.log" 2>&1 || rc=$?
    if [ $rc != 0 ]; then
        rm -f "$cache/making.tar"
        if grep -qiE "failed to fetch|temporary failure|could not resolve|unable to connect|connection" "$work/mmdebstrap.log"; then
            echo "SKIP: mmdebstrap cannot reach Debian's archive here:"; tail -n 3 "$work/mmdebstrap.log"; exit 77
        fi
        tail -n 20 "$work/mmdebstrap.log"; fail "mmdebstrap exit $rc"; finish
    fi
    mv "$cache/making.tar" "$tarball"
    pass "mmdebstrap: $suite + python3 + python3-numpy in $((SECONDS - t0)) s ($(du -h "$tarball" | cut -f1))"
fi
flock -u 9

# ---- the wheel, as pip builds it from the checkout ------------------------------------------
# Its CMake build goes beside the build tree (shared with python/test_install.py, which builds
# the same targets: ctest runs the two one at a time).
t0=$SECONDS
rc=0
DSCACHE_BUILD_DIR=$build/python-wheel-test PIP_NO_INDEX=1 PIP_CONFIG_FILE=/dev/null \
    "$PY" -m pip --disable-pip-version-check wheel -v --no-deps --no-build-isolation \
    "$src/client/python" -w "$work/dist" >"$work/wheel.log" 2>&1 || rc=$?
[ $rc = 0 ] || { tail -n 40 "$work/wheel.log"; fail "pip wheel exit $rc"; finish; }
whl=$(ls "$work"/dist/dscache-*.whl)
pass "wheel built in $((SECONDS - t0)) s: $(basename "$whl"), $(stat -c %s "$whl") bytes"
grep "dscache build: static" "$work/wheel.log" | sed 's/^ *//' || true

# ---- the bare root ----------------------------------------------------------------------------
root=$work/root
mkdir -p "$root"
# Mounts are made only inside the namespace below (private propagation): none can outlive it.
# Should one show up here all the same, it is unmounted before $work is removed, and if that
# fails $work is left in place rather than removed through a mount.
unmount_root() {
    local m
    for m in $(awk -v r="$root" 'index($5, r) == 1 {print $5}' /proc/self/mountinfo | sort -r); do
        umount -R "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
    if awk -v r="$root" 'index($5, r) == 1 {f = 1} END {exit !f}' /proc/self/mountinfo; then
        echo "FAIL: mounts remain under $root: left in place" >&2
        work=$(mktemp -d)
    fi
}
cleanup_hooks+=(unmount_root)
tar -C "$root" -xf "$tarball"
for lib in libuv.so.1 libcjson.so.1 libsodium.so.23 libarchive.so.13 libturbojpeg.so.0 \
           libjpeg.so.62 libpng16.so.16 libwebp.so.7 libibverbs.so.1; do
    found=$(find "$root/usr/lib" "$root/lib" -name "$lib*" 2>/dev/null | head -n1)
    [ -z "$found" ] || fail "the bare root holds $lib (${found#"$root"}): the test would prove nothing"
done
for pkg in python3 python3-numpy; do
    grep -q "^Package: $pkg\$" "$root/var/lib/dpkg/status" || fail "the root lacks $pkg"
done
if grep -q -- '-dev$' <(grep '^Package: ' "$root/var/lib/dpkg/status"); then
    fail "the root holds -dev packages: $(grep '^Package: .*-dev$' "$root/var/lib/dpkg/status" | tr '\n' ' ')"
fi
pass "bare root: $(grep -c '^Package: ' "$root/var/lib/dpkg/status") packages, no -dev, none of the libraries the wheel carries"

mkdir -p "$root/tmp/in/imgs/red" "$root/tmp/in/imgs/green" "$root/tmp/in/imgs/blue"
cp "$whl" "$pipwhl" "$root/tmp/in/"
# Images on the host: PNG through zlib alone; JPEG and WebP where PIL is here.
"$PY" - "$root/tmp/in/imgs" <<'PY'
import os, struct, sys, zlib
out = sys.argv[1]
colours = {"red": (200, 30, 40), "green": (20, 180, 60), "blue": (30, 50, 210)}
def png(path, rgb, w=24, h=20):
    raw = b"".join(b"\0" + bytes(rgb) * w for _ in range(h))
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
kinds = ["png"]
try:
    from PIL import Image
except ImportError:
    Image = None
for name, rgb in colours.items():
    png(os.path.join(out, name, "a.png"), rgb)
    if Image is not None:
        Image.new("RGB", (30, 22), rgb).save(os.path.join(out, name, "b.jpg"), quality=95)
        Image.new("RGB", (26, 26), rgb).save(os.path.join(out, name, "c.webp"), lossless=True)
print("note: images: " + ("png, jpg, webp" if Image is not None else "png only (no PIL here)"))
PY

cat >"$root/tmp/in/inside.sh" <<'SH'
set -eu
cd /tmp/in
step() { echo "inside: $*"; }
python3 "$(ls pip-*.whl)/pip" install -q --no-index --no-deps --break-system-packages \
    --root-user-action=ignore --disable-pip-version-check ./dscache-*.whl
step "pip installed the wheel"
python3 -c 'import dscache; print("inside: import dscache:", dscache.library_path, dscache.fastpath)'
command -v dscache dscached
dscached --help | head -n1
dscache --help | head -n1
python3 -c 'import numpy as np; np.save("v.npy", (np.arange(1024 * 6, dtype=np.int64) * 7919 % 1000003).reshape(1024, 6))'
dscache ingest npy -o ds-ids --name ids v=v.npy >/dev/null
dscache ingest images imgs -o ds-imgs --name imgs --encoded >/dev/null
step "dscache ingest npy and images wrote two datasets"
dscached --data ds-ids --data ds-imgs --listen 127.0.0.1:0 --http off --port-file port --memory 32M \
    --threads 1 >server.log 2>&1 &
server=$!
i=0
until [ -s port ]; do
    i=$((i + 1)); [ $i -lt 300 ] || { cat server.log; exit 1; }
    kill -0 $server || { cat server.log; exit 1; }
    sleep 0.1
done
step "dscached serves on 127.0.0.1:$(cat port)"
python3 - <<'PY'
import numpy as np, dscache
server = "127.0.0.1:" + open("port").read().strip()
want = np.load("v.npy")
loader = dscache.Loader(servers=server, dataset="ids", batch_size=64, seed=3, epochs=1, copy=True)
got = np.concatenate([b["v"] for b in loader])
got = got[np.argsort(got[:, 0], kind="stable")]
order = np.argsort(want[:, 0], kind="stable")
assert got.tobytes() == want[order].tobytes(), "the epoch's bytes differ from the array's"
print("inside: loader epoch: %d samples, %d bytes, equal to the array's" % (len(got), got.nbytes))
colours = {0: (30, 50, 210), 1: (20, 180, 60), 2: (200, 30, 40)}  # blue, green, red: sorted
loader = dscache.Loader(servers=server, dataset="imgs", batch_size=3, seed=1, epochs=1, copy=True,
                        decode={"image": dscache.Image(size=16, crop="center")})
n = 0
for b in loader:
    for img, label in zip(b["image"], b["label"]):
        assert img.shape == (3, 16, 16), img.shape
        err = np.abs(img.reshape(3, -1).astype(int) - np.array(colours[int(label)])[:, None]).max()
        assert err <= 3, "label %d: pixels off by %d" % (label, err)
        n += 1
print("inside: image epoch: %d images decoded to their colours" % n)
PY
kill $server
wait $server || true
step "done"
SH

# unshare: new PID namespace (--kill-child: the namespace ends with the test's unshare, every
# process in it with it) and mount namespace (private): /proc and /dev exist only in there.
t0=$SECONDS
rc=0
unshare --mount --propagation private --pid --fork --kill-child --mount-proc="$root/proc" \
    bash -c 'mount --rbind /dev "$1/dev" && exec chroot "$1" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root bash /tmp/in/inside.sh' \
    _ "$root" >"$work/inside.log" 2>&1 &
pids+=($!)
wait $! || rc=$?
sed 's/^/  /' "$work/inside.log"
[ $rc = 0 ] || fail "inside the bare root: exit $rc"
grep -q "^inside: done" "$work/inside.log" && pass "bare root: import, --help, ingest, server and loader epochs in $((SECONDS - t0)) s"
unmount_root

# ---- what the installed files need -------------------------------------------------------------
pkg=$(find "$root/usr/local/lib" -type d -name dscache -path '*-packages/*' | head -n1)
[ -n "$pkg" ] || fail "no dscache package under /usr/local/lib in the root"
if [ -n "$pkg" ]; then
    own=$(ls "$pkg/_libs" 2>/dev/null | tr '\n' ' ')
    for f in "$pkg"/libdscache.so "$pkg"/bin/* "$pkg"/_fastpath*.so "$pkg"/_libs/*; do
        [ -f "$f" ] || continue
        for need in $(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
            case "$need" in
            libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | ld-linux*.so.*) ;;
            *) [[ " $own " == *" $need "* ]] || fail "${f#"$pkg"/} needs $need, neither glibc's nor the wheel's" ;;
            esac
            case "$need" in libibverbs* | librdmacm* | libcuda* | libcudart* | libnvjpeg*)
                fail "${f#"$pkg"/} links $need (it must be loaded at run time)" ;;
            esac
        done
    done
    pass "readelf -d: glibc and the wheel's own _libs ($own) only"
fi
finish
