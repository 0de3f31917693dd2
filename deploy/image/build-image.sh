#!/usr/bin/env bash
# Builds the dscache OCI image without a registry: a minimal Debian 12 root file system
# (mmdebstrap --variant=minbase, from Debian's package archive) holding only the runtime
# libraries dscached and dscache link, plus an install of this build (cmake --install into
# /usr/local), a dscache user (uid 10001), then an OCI image layout written by umoci.
#   --trainer   the trainer image instead: adds python3, python3-numpy and the dscache Python
#               package (and python3-torch with --torch); entrypoint python3
# Usage: deploy/image/build-image.sh --build BUILD_DIR --out LAYOUT_DIR [--tag TAG]
#        [--trainer [--torch]] [--mirror URL]
# The image is LAYOUT_DIR:TAG (default tag: the version, "-trainer" appended for --trainer);
# load it with `skopeo copy oci:LAYOUT_DIR:TAG containers-storage:dscache:TAG` or
# `podman load`, or run it unpacked (umoci unpack + crun, as tests/image/test_image.sh does).
# Needs root (or a user namespace: mmdebstrap --mode=unshare), mmdebstrap and umoci.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build="" out="" tag="" trainer=0 torch=0 mirror=""
while [ $# -gt 0 ]; do
    case "$1" in
    --build) build=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    --tag) tag=${2:?}; shift 2 ;;
    --trainer) trainer=1; shift ;;
    --torch) torch=1; shift ;;
    --mirror) mirror=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "build-image: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
[ -n "$build" ] && [ -n "$out" ] || { echo "build-image: --build and --out are required" >&2; exit 2; }
for tool in mmdebstrap umoci; do
    command -v "$tool" >/dev/null || { echo "build-image: $tool is not installed (apt-get install $tool)" >&2; exit 3; }
done
version=$(grep -oE 'DSC_VERSION_STRING "[^"]+"' "$root/proto/dscache_base.h" | cut -d'"' -f2)
[ -n "$tag" ] || tag=$version$([ $trainer = 1 ] && echo -trainer || true)

# The runtime libraries of what this build links (ldd), and nothing else: dscached links no
# RDMA library (the transport is not built into it), so rdma-core stays out.
pkgs="libuv1,liblz4-1,libxxhash0,libcjson1,libsodium23,libarchive13,libzstd1,libturbojpeg0,libjpeg62-turbo,libpng16-16,libwebp7"
if [ $trainer = 1 ]; then
    pkgs="liblz4-1,libxxhash0,libcjson1,libsodium23,libturbojpeg0,libjpeg62-turbo,libpng16-16,libwebp7,python3-minimal,python3-numpy"
    [ $torch = 0 ] || pkgs="$pkgs,python3-torch"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs
mode=root
[ "$(id -u)" = 0 ] || mode=unshare
echo "build-image: mmdebstrap minbase bookworm + $pkgs ($mode mode)"
mmdebstrap --mode="$mode" --variant=minbase --include="$pkgs" \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --aptopt='Acquire::Retries "3"' --skip=cleanup/apt/lists \
    bookworm "$rootfs" ${mirror:+"$mirror"} >"$work/mmdebstrap.log" 2>&1 ||
    { tail -n 20 "$work/mmdebstrap.log" >&2; echo "build-image: mmdebstrap failed" >&2; exit 4; }
rm -rf "$rootfs/var/lib/apt/lists/"* "$rootfs/var/cache/apt/"*

cmake --install "$build" --prefix "$rootfs/usr/local" >/dev/null
rm -rf "$rootfs/usr/local/include" "$rootfs/usr/local/lib/cmake" "$rootfs/usr/local/lib/pkgconfig" \
       "$rootfs/usr/local/lib/systemd" "$rootfs/usr/local/lib/sysusers.d"
if [ $trainer = 1 ]; then
    rm -f "$rootfs/usr/local/bin/dscached"
    pyver=$(ls "$rootfs/usr/lib/" | grep -E '^python3\.[0-9]+$' | sort -V | tail -n1)
    mkdir -p "$rootfs/usr/local/lib/$pyver/dist-packages"
    cp -r "$root/client/python/dscache" "$rootfs/usr/local/lib/$pyver/dist-packages/"
    find "$rootfs/usr/local/lib/$pyver" -name __pycache__ -prune -exec rm -rf {} +
fi
# Python finds the library through DSCACHE_LIB; ld.so through /usr/local/lib (ld.so.conf.d).
ldconfig -r "$rootfs"
echo "dscache:x:10001:10001:dscache:/nonexistent:/usr/sbin/nologin" >>"$rootfs/etc/passwd"
echo "dscache:x:10001:" >>"$rootfs/etc/group"
echo "dscache:!:19000::::::" >>"$rootfs/etc/shadow"

# The OCI layout: one layer holding the whole root file system, then the image config.
rm -rf "$out"
umoci init --layout "$out"
umoci new --image "$out:$tag"
umoci unpack --image "$out:$tag" "$work/bundle" >/dev/null
rm -rf "$work/bundle/rootfs"
mv "$rootfs" "$work/bundle/rootfs"
umoci repack --image "$out:$tag" "$work/bundle" >/dev/null
if [ $trainer = 1 ]; then
    umoci config --image "$out:$tag" --config.user 10001:10001 \
        --config.env PATH=/usr/local/bin:/usr/bin:/bin \
        --config.env DSCACHE_LIB=/usr/local/lib/libdscache.so \
        --config.entrypoint python3 --config.workingdir / \
        --author dscache --config.label org.opencontainers.image.title=dscache-trainer
else
    umoci config --image "$out:$tag" --config.user 10001:10001 \
        --config.env PATH=/usr/local/bin:/usr/bin:/bin \
        --config.entrypoint /usr/local/bin/dscached --config.cmd --help \
        --config.exposedports 7070/tcp --config.exposedports 7071/tcp --config.workingdir / \
        --author dscache --config.label org.opencontainers.image.title=dscache
fi
umoci gc --layout "$out"
size=$(du -sh "$out" | cut -f1)
echo "build-image: $out:$tag ($size)"
