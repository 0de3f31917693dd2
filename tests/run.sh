#!/usr/bin/env bash
# The whole test suite: installs missing packages, builds (gcc, -Werror), runs every test, builds
# Release with gcc and with clang (-Werror, no second test run: every documented build type
# compiles), then builds again with clang + AddressSanitizer + UndefinedBehaviorSanitizer +
# libFuzzer and runs the tests and the bounded fuzz runs there, then with ThreadSanitizer (the
# loader's and the server's threads) and runs the C tests once more. Every build here passes
# -DDSC_WERROR=ON: warnings are errors in CI, never in a user's build.
#   DSC_FUZZ_SECONDS=N   seconds per fuzz target (default 15)
#   DSC_SKIP_ASAN=1      only the first build (quick local runs)
#   DSC_SKIP_TSAN=1      no ThreadSanitizer build
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/local/setup.sh
jobs=$(nproc)
fuzz_s=${DSC_FUZZ_SECONDS:-15}

# ctest hides a skipped test's output: print every skip with its reason.
print_skips() {
    local log=$1/Testing/Temporary/LastTest.log
    [ -f "$log" ] || return 0
    awk '/^[0-9]+\/[0-9]+ Testing: /{name=$3} /^SKIP:/{print "  skipped " name ": " substr($0, 7)}' "$log"
}

echo "== format =="
bash tests/format_check.sh

echo "== build (release) =="
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSC_WERROR=ON >/dev/null
cmake --build build -j "$jobs"
echo "== tests (release) =="
(cd build && ctest --output-on-failure -j "$jobs")
print_skips build

# -O3 finds warnings that -O2 does not (maybe-uninitialized): build Release with both compilers.
for cc in gcc clang; do
    echo "== build (Release, $cc, -Werror; built only) =="
    CC=$cc cmake -S . -B "build-release-$cc" -DCMAKE_BUILD_TYPE=Release -DDSC_WERROR=ON >/dev/null
    cmake --build "build-release-$cc" -j "$jobs"
done

if [ "${DSC_SKIP_ASAN:-0}" != 1 ]; then
    echo "== build (clang, ASan+UBSan, libFuzzer) =="
    CC=clang cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DDSC_SANITIZE=ON -DDSC_FUZZ=ON \
        -DDSC_FUZZ_SECONDS="$fuzz_s" -DDSC_WERROR=ON >/dev/null
    cmake --build build-asan -j "$jobs"
    echo "== tests (ASan+UBSan) and fuzzing (${fuzz_s}s per target) =="
    # Python loads libdscache into an uninstrumented interpreter: those tests run in the
    # release build only.
    (cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j "$jobs" -LE 'python|image')
    print_skips build-asan
fi
if [ "${DSC_SKIP_ASAN:-0}" != 1 ] && [ "${DSC_SKIP_TSAN:-0}" != 1 ]; then
    echo "== build (clang, ThreadSanitizer) =="
    CC=clang cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DDSC_TSAN=ON -DDSC_WERROR=ON >/dev/null
    cmake --build build-tsan -j "$jobs"
    echo "== tests (ThreadSanitizer) =="
    (cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -j "$jobs" -LE 'python|image|notsan')
    print_skips build-tsan
fi
echo "== all tests passed =="
