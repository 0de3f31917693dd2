#!/usr/bin/env bash
# Installs the Debian packages dscache needs to build, test and demo, only those missing.
# Usage: deploy/local/setup.sh [--bench]   (--bench adds memcached and lz4 for tests/bench)
set -euo pipefail
pkgs=(cmake make gcc pkg-config clang libclang-rt-14-dev clang-format git
      libuv1-dev liblz4-dev libxxhash-dev libcjson-dev libmicrohttpd-dev libdlpack-dev
      libibverbs-dev librdmacm-dev
      python3 python3-numpy python3-torch python3-pip python3-setuptools python3-wheel python3-venv
      iproute2 procps curl)
# tmux drives dscache top in its test; matplotlib draws bench --plot and the demo's picture.
pkgs+=(tmux python3-matplotlib)
if [ "${1:-}" = "--bench" ]; then
    pkgs+=(memcached lz4 libmemcached-dev)
fi
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
echo "setup: installing missing packages: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
    echo "setup: need root to install packages (run as root, or install them: apt-get install ${missing[*]})" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
