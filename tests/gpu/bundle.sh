#!/usr/bin/env bash
# Packs a build for a GPU host that has no build tools or -dev packages (a CUDA image, say):
# BUILD_DIR's bin/ and lib/, the shared libraries they need beyond the C library (libuv, lz4,
# xxHash, cJSON, libsodium, ...), and memcached with its libraries when it is
# installed (for tests/bench/bench_server). libcudart is not packed: the loader dlopens the host's.
# On the GPU host:
#   export LD_LIBRARY_PATH=$PWD/OUT_DIR/deps
#   tests/gpu/run_gpu_checks.sh --prebuilt OUT_DIR
#   OUT_DIR/bin/bench_server --memcached OUT_DIR/bin/memcached
# Usage: tests/gpu/bundle.sh BUILD_DIR OUT_DIR
set -euo pipefail
[ $# -eq 2 ] || { sed -n '2,10p' "$0" >&2; exit 2; }
build=$1 out=$2
[ -x "$build/bin/dscached" ] && [ -f "$build/lib/libdscache.so" ] ||
    { echo "bundle: $build holds no built dscached and libdscache.so" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/deps"
cp -a "$build/bin/." "$out/bin/"
cp -a "$build/lib/." "$out/lib/"

# The libraries a binary needs, less those every glibc system has (and libffi, which a Python
# interpreter on the host brings in its own version).
deps_of() {
    ldd "$1" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' |
        grep -Ev '/(libc|libm|libpthread|libdl|librt|libresolv|ld-linux-x86-64|libffi)\.so' || true
}
{
    deps_of "$build/bin/dscached"
    deps_of "$build/bin/dscache" # libarchive and zstd (ingest webdataset, mds)
    deps_of "$build/lib/libdscache.so"
} | sort -u | while read -r lib; do cp -L "$lib" "$out/deps/"; done

if [ -x /usr/bin/memcached ]; then
    mkdir -p "$out/deps-memcached"
    cp -L /usr/bin/memcached "$out/bin/memcached.bin"
    deps_of /usr/bin/memcached | while read -r lib; do cp -L "$lib" "$out/deps-memcached/"; done
    # exec keeps the PID, which bench_server stops and measures.
    cat >"$out/bin/memcached" <<'EOF'
#!/bin/sh
here=$(cd "$(dirname "$0")" && pwd)
LD_LIBRARY_PATH=$here/../deps-memcached exec "$here/memcached.bin" "$@"
EOF
    chmod +x "$out/bin/memcached"
else
    echo "bundle: /usr/bin/memcached is not installed: bench_server will skip memcached" >&2
fi
echo "bundle: $out ($(du -sh "$out" | cut -f1)): $(ls "$out/deps" | tr '\n' ' ')"
