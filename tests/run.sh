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
#
# With options, only the release build (build/, as above) and its tests, chosen and repeated,
# to find tests that fail now and then (docs/testing.md, "Repeated runs and a CPU burner"):
#   tests/run.sh [--repeat N] [-R REGEX] [-E REGEX] [-L LABEL] [-j J] [--burn]
#   --repeat N   runs the chosen tests N times (default 1), every run to the end; then says which
#                test failed in which run and exits 1 if any did
#   -R/-E/-L     ctest's: names matching / not matching REGEX, tests with LABEL (default: all)
#   -j J         tests at once (default: the cores)
#   --burn       one busy loop per core beside the runs (a loaded CI machine), stopped by PID
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
    sed -n '/^# With options/,/^# *--burn/p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}
repeat=0 burn=0 jobs=$(nproc) select=()
while [ $# -gt 0 ]; do
    case $1 in
    --repeat)
        [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --repeat wants a count >= 1" >&2; usage; }
        repeat=$2; shift 2 ;;
    -R | -E | -L)
        [ -n "${2:-}" ] || { echo "run.sh: $1 wants a regular expression" >&2; usage; }
        select+=("$1" "$2"); shift 2 ;;
    -j)
        [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: -j wants a count >= 1" >&2; usage; }
        jobs=$2; shift 2 ;;
    --burn) burn=1; shift ;;
    -h | --help) usage ;;
    *) echo "run.sh: unknown option $1" >&2; usage ;;
    esac
done
# Any option: the chosen release tests, $repeat times (at least once).
chosen=0
if [ "$repeat" -gt 0 ] || [ "$burn" = 1 ] || [ ${#select[@]} -gt 0 ]; then chosen=1; fi
[ "$repeat" -gt 0 ] || repeat=1

bash deploy/local/setup.sh
fuzz_s=${DSC_FUZZ_SECONDS:-15}

# ctest hides a skipped test's output: print every skip with its reason.
print_skips() {
    local log=$1/Testing/Temporary/LastTest.log
    [ -f "$log" ] || return 0
    awk '/^[0-9]+\/[0-9]+ Testing: /{name=$3} /^SKIP:/{print "  skipped " name ": " substr($0, 7)}' "$log"
}

# burn_start: one busy loop per core, killed by PID when this script exits.
burners=()
burn_stop() {
    local pid
    for pid in "${burners[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${burners[@]}"; do wait "$pid" 2>/dev/null || true; done
    burners=()
}
burn_start() {
    local i
    trap burn_stop EXIT
    trap 'exit 130' INT TERM
    for i in $(seq 1 "$(nproc)"); do
        (while :; do :; done) &
        burners+=($!)
    done
    echo "== CPU burner: ${#burners[@]} busy loop(s), PIDs ${burners[*]} =="
}

# repeat_tests: the chosen tests of build/ $repeat times; a summary of the failures by run and by
# test; 1 if any test failed in any run.
repeat_tests() {
    local run failed_log=build/Testing/Temporary/LastTestsFailed.log
    local -a runs_failed=()
    local -A failed_runs=()
    for run in $(seq 1 "$repeat"); do
        echo "== tests (release), run $run of $repeat${select[*]:+: ${select[*]}} =="
        rm -f "$failed_log"
        if (cd build && ctest --output-on-failure -j "$jobs" "${select[@]}"); then
            runs_failed+=("run $run: all passed")
        else
            local names=()
            [ -f "$failed_log" ] && mapfile -t names < <(cut -d: -f2- "$failed_log")
            [ ${#names[@]} -gt 0 ] || names=("(ctest failed; no test named)")
            runs_failed+=("run $run: FAILED ${names[*]}")
            local n
            for n in "${names[@]}"; do failed_runs[$n]+=" $run"; done
        fi
        [ "$run" -gt 1 ] || print_skips build
    done
    echo "== summary: $repeat run(s)${select[*]:+ of ${select[*]}}$([ "$burn" = 1 ] && echo ", beside a CPU burner") =="
    printf '  %s\n' "${runs_failed[@]}"
    if [ ${#failed_runs[@]} -eq 0 ]; then
        echo "== every run passed =="
        return 0
    fi
    local t r
    for t in "${!failed_runs[@]}"; do
        r=(${failed_runs[$t]})
        echo "  $t failed ${#r[@]} of $repeat run(s): run(s)${failed_runs[$t]}"
    done
    return 1
}

if [ "$chosen" = 1 ]; then
    echo "== build (release) =="
    cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSC_WERROR=ON >/dev/null
    cmake --build build -j "$(nproc)"
    [ "$burn" = 0 ] || burn_start
    repeat_tests
    exit $?
fi

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
