# Shared by every test script (sourced, directly or through server_lib.sh / cluster_lib.sh): a work
# directory $work; the processes whose PIDs are added to pids=() are killed and waited for on exit,
# then the commands in cleanup_hooks=() run (e.g. netns_cleanup) and $work is removed; fail, pass
# and finish count and report the verdict; expect, until_ok and json_get.
work=$(mktemp -d)
pids=()
cleanup_hooks=()
cleanup() {
    set +e # every step runs, whatever failed before
    local pid hook
    for pid in "${pids[@]}"; do
        kill -CONT "$pid" 2>/dev/null # a SIGSTOPped one too
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    for hook in "${cleanup_hooks[@]}"; do "$hook"; done
    rm -rf "$work"
    return 0
}
trap cleanup EXIT

fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
pass() { echo "ok: $*"; }
# finish: the verdict. After a failure: the count and the end of every $work/server*.log, exit 1.
finish() {
    if [ "$fails" -ne 0 ]; then
        echo "$fails failure(s)" >&2
        local f
        for f in "$work"/server*.log; do
            [ -f "$f" ] && { echo "--- $f" >&2; tail -30 "$f" >&2; }
        done
        exit 1
    fi
    echo "all passed"
}

# expect CODE PATTERN CMD...: runs CMD; a failure unless it exits CODE with output (stdout and
# stderr) matching the extended regex PATTERN, case-insensitively when EXPECT_ICASE=1.
EXPECT_ICASE=0
expect() {
    local code=$1 pattern=$2; shift 2
    local out rc=0 flags=-qE
    [ "$EXPECT_ICASE" = 1 ] && flags=-qiE
    out=$("$@" 2>&1) || rc=$?
    if [ "$rc" -ne "$code" ]; then
        fail "exit $rc (wanted $code): $*: $out"
    elif ! grep "$flags" -- "$pattern" <<<"$out"; then
        fail "output lacks /$pattern/: $*: $out"
    fi
}

# until_ok SECONDS CMD...: reruns CMD every 0.2 s until it succeeds; 1 when time runs out.
until_ok() {
    local deadline=$((SECONDS + $1)); shift
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.2
    done
}

# json_get JSON PYTHON_EXPR: evaluates an expression on the parsed JSON `j`.
json_get() {
    "${DSC_PYTHON:-/usr/bin/python3}" -c \
        'import json,sys; j=json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"
}
