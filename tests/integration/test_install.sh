#!/usr/bin/env bash
# Installs the build into a temporary prefix and builds a small trainer-side program against it
# both ways a C/C++ build finds a library: pkg-config and CMake's find_package(dscache).
# Also checks that libdscache.so exports only the public dsc_* API.
set -euo pipefail
build=$(dirname "$DSC_BIN")
if [ "${DSC_SANITIZE:-OFF}" = ON ] || [ "${DSC_TSAN:-OFF}" = ON ]; then
    echo "SKIP: the sanitizer build's library needs the sanitizer runtime in every consumer;" \
         "the install test runs in the release build"
    exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null

libdir=$(dirname "$(find "$prefix" -name 'libdscache.so' | head -n1)")
[ -f "$prefix/include/dscache.h" ] || { echo "FAIL: header not installed"; exit 1; }
[ -f "$prefix/include/dscache_base.h" ] || { echo "FAIL: dscache_base.h (included by dscache.h) not installed"; exit 1; }
[ -f "$libdir/pkgconfig/dscache.pc" ] || { echo "FAIL: dscache.pc not installed"; exit 1; }
[ -f "$libdir/cmake/dscache/dscacheConfig.cmake" ] || { echo "FAIL: CMake config not installed"; exit 1; }
[ -x "$prefix/bin/dscached" ] || { echo "FAIL: dscached not installed"; exit 1; }
[ -x "$prefix/bin/dscache" ] || { echo "FAIL: dscache CLI not installed"; exit 1; }

# Only the public API leaves the shared library.
leaked=$(nm -D --defined-only "$libdir/libdscache.so" | awk '$2 ~ /[TDBR]/ {print $3}' \
         | grep -v '^dsc_' | grep -v '^_' || true)
if [ -n "$leaked" ]; then
    echo "FAIL: libdscache.so exports non-API symbols:"; echo "$leaked" | head; exit 1
fi
for sym in dsc_loader_create dsc_loader_next dsc_strerror dsc_batch_dlpack; do
    nm -D --defined-only "$libdir/libdscache.so" | grep -q " $sym\$" \
        || { echo "FAIL: $sym not exported"; exit 1; }
done
internal=$(nm -D --defined-only "$libdir/libdscache.so" | grep -c ' dsc_shard_parse$' || true)
[ "$internal" = 0 ] || { echo "FAIL: internal dsc_shard_parse is exported"; exit 1; }

mkdir -p "$work/app"
cat > "$work/app/app.c" <<'C'
#include <dscache.h>
#include <stdio.h>
#include <string.h>
int main(void) {
    dsc_loader_options_t o;
    dsc_loader_options_init(&o);
    if (strcmp(dsc_version(), DSC_VERSION_STRING) != 0) return 1;
    if (dsc_loader_create(&o, NULL) >= 0) return 2; /* no servers, no dataset: must fail */
    printf("%s %s\n", dsc_version(), dsc_err_name(DSC_ECHUNKSUM));
    return 0;
}
C
# 1. pkg-config
export PKG_CONFIG_PATH=$libdir/pkgconfig
cc -Wall -Werror -o "$work/app/app_pc" "$work/app/app.c" $(pkg-config --cflags --libs dscache)
# No LD_LIBRARY_PATH: the pkg-config flags carry the rpath.
out=$("$work/app/app_pc")
[ "$out" = "$(pkg-config --modversion dscache) DSC_ECHUNKSUM" ] || { echo "FAIL: pkg-config app printed '$out'"; exit 1; }

# 2. CMake find_package
cat > "$work/app/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.18)
project(app C)
find_package(dscache 0.1 REQUIRED)
add_executable(app_cmake app.c)
target_link_libraries(app_cmake PRIVATE dscache::dscache)
CM
cmake -S "$work/app" -B "$work/app/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/app/build" >/dev/null
# No LD_LIBRARY_PATH: CMake gives an imported library's directory as the build rpath.
out2=$("$work/app/build/app_cmake")
[ "$out2" = "$out" ] || { echo "FAIL: CMake app printed '$out2'"; exit 1; }
echo "install ok: $out (pkg-config and find_package)"
