#!/usr/bin/env bash
# Installs the Debian packages dscache needs to build and test, only those missing.
# Also installs the offline Kubernetes manifest checker's npm packages (deploy/k8s/check, from its
# package-lock.json) when node_modules is missing there.
# Usage: deploy/local/setup.sh [--bench | --demo]
#   --bench  adds memcached and lz4 for tests/bench
#   --demo   only what deploy/local/demo.sh uses: the build, numpy, torch, matplotlib, curl (no
#            test tools, no sanitizer runtime, no npm packages, no RDMA headers: the demo runs
#            on loopback TCP, and the build leaves RDMA out without them)
set -euo pipefail
profile=${1:-}
case "$profile" in
'' | --bench | --demo) ;;
*) echo "setup: unknown option $profile (usage: setup.sh [--bench | --demo])" >&2; exit 2 ;;
esac
demo_pkgs=(cmake make gcc pkg-config
      libuv1-dev liblz4-dev libxxhash-dev libcjson-dev libdlpack-dev libsodium-dev
      libarchive-dev libzstd-dev
      libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev libwebp-dev
      python3 python3-dev python3-numpy python3-torch python3-matplotlib procps curl)
pkgs=(cmake make gcc pkg-config clang libclang-rt-14-dev clang-format git
      libuv1-dev liblz4-dev libxxhash-dev libcjson-dev libdlpack-dev libsodium-dev
      libarchive-dev libzstd-dev zstd
      libibverbs-dev librdmacm-dev libfuse3-dev fuse3 liburing-dev
      libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev libwebp-dev
      python3 python3-dev python3-numpy python3-torch python3-pip python3-setuptools python3-wheel python3-venv
      iproute2 procps curl
      python3-yaml systemd
      mmdebstrap umoci)
# node and npm may come from elsewhere than Debian's nodejs package: only their absence counts.
command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
command -v npm >/dev/null 2>&1 || pkgs+=(npm)
# tmux drives dscache top in its test; matplotlib draws bench --plot and the demo's picture.
pkgs+=(tmux python3-matplotlib)
# pip install ./client/python: patchelf puts the libraries that have no static archive (libcjson)
# into the wheel.
pkgs+=(patchelf)
# The pixel tests compare with torchvision (PIL images) on real PNGs and JPEG photos.
pkgs+=(python3-pil python3-torchvision openclipart-png mate-backgrounds)
# python_test_mypy checks the Python package's type hints with Debian's mypy.
pkgs+=(mypy)
if [ "$profile" = --bench ]; then
    pkgs+=(memcached lz4 libmemcached-dev)
fi
[ "$profile" = --demo ] && pkgs=("${demo_pkgs[@]}")
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing missing packages: ${missing[*]}"
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup: need root to install packages (run as root, or install them: apt-get install ${missing[*]})" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
[ "$profile" = --demo ] && exit 0 # the demo checks no Kubernetes manifest
check_dir=$(cd "$(dirname "$0")/../k8s/check" && pwd)
if [ ! -d "$check_dir/node_modules/kubernetes-models" ] && command -v npm >/dev/null 2>&1; then
    echo "setup: npm ci in $check_dir (Kubernetes schema checker)"
    # A failure here only makes the manifest test skip with its reason.
    (cd "$check_dir" && npm ci --no-audit --no-fund --loglevel=error) ||
        echo "setup: npm ci failed: the manifest schema test will be skipped" >&2
fi
