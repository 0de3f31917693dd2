#!/usr/bin/env bash
# Authentication and roles (docs/security.md) against real dscached processes: anonymous admin
# refused by default and allowed with --allow-anonymous-admin; with --auth-file: nothing but
# PING before AUTH, wrong and unknown secrets refused, a captured proof replayed or reflected is
# refused, read role cannot EVICT, datasets outside a credential's list are invisible, admin can
# EVICT, SIGHUP adds and removes credentials (a bad file keeps the set), the C loader, the CLI
# and Python read with a credential, and a recording proxy shows the secret never on the wire.
source "$(dirname "$0")/server_lib.sh"
AUTH=$DSC_BIN/auth_check
LOADER=$DSC_BIN/loader_check
for exe in "$AUTH" "$LOADER"; do
    [ -x "$exe" ] || { echo "SKIP: $exe not built"; exit 77; }
done
PY=${DSC_PYTHON:-/usr/bin/python3}

make_dataset "$work/ds" authds 600 lz4
make_dataset "$work/ds2" otherds 200 none

S_READ=read-secret-0123456789abcdef
S_ADMIN=admin-secret-fedcba9876543210
S_LIM=limited-secret-AAAAAAAAAAAAAAAA
S_NEW=newbie-secret-ZZZZZZZZZZZZZZZZ
printf '# test credentials\ntrainer read %s\nops admin %s\nlimited read %s authds\n' \
    "$S_READ" "$S_ADMIN" "$S_LIM" >"$work/creds"
chmod 600 "$work/creds"
tok() { printf '%s %s\n' "$1" "$2" >"$work/tok-$1"; echo "$work/tok-$1"; }
T_READ=$(tok trainer "$S_READ")
T_ADMIN=$(tok ops "$S_ADMIN")
T_LIM=$(tok limited "$S_LIM")
T_NEW=$(tok newbie "$S_NEW")
printf 'trainer wrong-secret-0123456789ab\n' >"$work/tok-wrong"
printf 'nobody %s\n' "$S_READ" >"$work/tok-nobody"

# ---- Anonymous server --------------------------------------------------------------------
start_server anon --data "$work/ds"
grep -q "warn .*no --auth-file" "$work/server-anon.log" && pass "anonymous: WARN at start" \
    || fail "no WARN about anonymous service"
expect 0 '^ERR EUNAUTH' "$AUTH" op "$ADDR_anon" - EVICT authds
expect 0 '^ERR EUNAUTH' "$AUTH" op "$ADDR_anon" - WARM authds 0
expect 0 '^OK \[.*authds' "$AUTH" op "$ADDR_anon" - LIST
expect 0 '^OK ' "$AUTH" op "$ADDR_anon" - GET authds 0
n=$(metric "$HTTP_anon" dscache_auth_failures_total)
[ "$n" = 2 ] && pass "anonymous: WARM/EVICT refused, counted ($n)" || fail "auth failures $n"
# A client holding a credential does not talk to a server that cannot prove it.
expect 0 '^CONNECT_ERR EUNAUTH' "$AUTH" op "$ADDR_anon" "$T_READ" LIST
stop_server anon

start_server open --data "$work/ds" --allow-anonymous-admin
expect 0 '^OK [1-9]' "$AUTH" op "$ADDR_open" - WARM authds
expect 0 '^OK [1-9]' "$AUTH" op "$ADDR_open" - EVICT authds
stop_server open

# ---- Server with credentials -------------------------------------------------------------
start_server a --data "$work/ds" --data "$work/ds2" --auth-file "$work/creds"
grep -q "authentication required: 3 credentials" "$work/server-a.log" \
    && pass "3 credentials loaded" || fail "no credentials line"

out=$("$AUTH" raw "$ADDR_a" authds)
grep -q '^PING: OK' <<<"$out" || fail "PING before AUTH: $out"
for op in LIST STAT MANIFEST GET MEMBERS WARM EVICT; do
    grep -q "^$op: EUNAUTH" <<<"$out" || fail "$op before AUTH not refused: $out"
done
grep -q '^AUTH without challenge: EUNAUTH' <<<"$out" || fail "AUTH without challenge: $out"
pass "without a credential: only PING served, everything else UNAUTHORIZED"
expect 0 '^ERR EUNAUTH' "$AUTH" op "$ADDR_a" - LIST
expect 0 '^CONNECT_ERR EUNAUTH' "$AUTH" op "$ADDR_a" "$work/tok-wrong" LIST
expect 0 '^CONNECT_ERR EUNAUTH' "$AUTH" op "$ADDR_a" "$work/tok-nobody" LIST
pass "wrong secret and unknown name: UNAUTHORIZED"

out=$("$AUTH" replay "$ADDR_a" "$T_READ")
for want in 'genuine: OK server-proof valid' 'genuine LIST: OK' \
    'second AUTH same connection: EUNAUTH' 'server nonce fresh: yes' 'replayed AUTH: EUNAUTH' \
    'LIST after replay: E' 'reflected server proof: EUNAUTH'; do
    grep -q "^$want" <<<"$out" || fail "replay: no '$want' in: $out"
done
pass "captured proof replayed on a new connection and reflected: refused"

expect 0 '^OK \[.*authds.*otherds|^OK \[.*otherds.*authds' "$AUTH" op "$ADDR_a" "$T_READ" LIST
expect 0 '^OK [0-9]+ bytes' "$AUTH" op "$ADDR_a" "$T_READ" GET authds 0
expect 0 '^ERR EUNAUTH .*role is read' "$AUTH" op "$ADDR_a" "$T_READ" EVICT authds
expect 0 '^ERR EUNAUTH' "$AUTH" op "$ADDR_a" "$T_READ" WARM authds 0
pass "read role: reads, WARM/EVICT UNAUTHORIZED"

out=$("$AUTH" op "$ADDR_a" "$T_LIM" LIST)
grep -q authds <<<"$out" && ! grep -q otherds <<<"$out" && pass "limited: LIST shows its dataset only" \
    || fail "limited LIST: $out"
# A job reading otherds reports to the server; STAT lists it for a credential that sees otherds.
DSCACHE_TOKEN_FILE="$T_READ" "$CLI" bench --server "$ADDR_a" --dataset otherds --seconds 1 \
    --job hiddenjob --report-seconds 0.2 >"$work/bench-other.txt" 2>&1 \
    || fail "bench on otherds: $(cat "$work/bench-other.txt")"
expect 0 'hiddenjob' "$AUTH" op "$ADDR_a" "$T_READ" STAT
out=$("$AUTH" op "$ADDR_a" "$T_LIM" STAT)
grep -q authds <<<"$out" && ! grep -q otherds <<<"$out" && ! grep -q hiddenjob <<<"$out" \
    && pass "limited: STAT shows its dataset only, and no job on another" \
    || fail "limited STAT: $out"
expect 0 '^ERR ENOTFOUND' "$AUTH" op "$ADDR_a" "$T_LIM" MANIFEST otherds
expect 0 '^ERR ENOTFOUND' "$AUTH" op "$ADDR_a" "$T_LIM" GET otherds 0
expect 0 '^ERR ENOTFOUND' "$AUTH" op "$ADDR_a" "$T_LIM" STAT otherds
expect 0 '^OK \{' "$AUTH" op "$ADDR_a" "$T_LIM" MANIFEST authds
pass "limited: a dataset outside its list is NOT_FOUND"

expect 0 '^OK [1-9]' "$AUTH" op "$ADDR_a" "$T_ADMIN" WARM authds
expect 0 '^OK [1-9]' "$AUTH" op "$ADDR_a" "$T_ADMIN" EVICT authds
pass "admin: WARM and EVICT served"

n=$(metric "$HTTP_a" dscache_auth_failures_total)
lines=$(grep -c "authentication failed from 127.0.0.1" "$work/server-a.log" || true)
[ "$n" != missing ] && [ "$n" -ge 15 ] && [ "$lines" -ge 1 ] && [ "$lines" -lt "$n" ] \
    && pass "failures: $n counted, $lines logged (rate-limited per peer)" \
    || fail "failures counted $n, logged $lines"

# ---- Clients with a credential: C loader (environment), CLI (option and environment), Python.
DSCACHE_TOKEN_FILE=$T_READ "$LOADER" once --servers "$ADDR_a" --dataset authds --dir "$work/ds" \
    >"$work/loader.out" 2>&1 && pass "C loader with DSCACHE_TOKEN_FILE: every batch verified" \
    || fail "loader: $(tail -3 "$work/loader.out")"
if "$LOADER" once --servers "$ADDR_a" --dataset authds --dir "$work/ds" >"$work/loader2.out" 2>&1; then
    fail "loader without a credential read the dataset"
else
    pass "loader without a credential fails"
fi
expect 0 'authds' "$CLI" stat --server "$ADDR_a" --auth-file "$T_READ"
expect 0 'authds' env DSCACHE_TOKEN_FILE="$T_READ" "$CLI" stat --server "$ADDR_a"
expect 1 "authentication required: .*DSCACHE_TOKEN_FILE" "$CLI" stat --server "$ADDR_a"
expect 1 "$work/tok-missing" "$CLI" stat --server "$ADDR_a" --auth-file "$work/tok-missing"
# Python loads libdscache into an uninstrumented interpreter: sanitizer builds check it in the
# release build only (as tests/python does).
if [ "${DSC_SANITIZE:-OFF}" = ON ] || [ "${DSC_TSAN:-OFF}" = ON ]; then
    echo "note: Python loader check not run in a sanitizer build (libdscache is instrumented)"
else
    out=$(PYTHONPATH="$DSC_SRC/client/python${PYTHONPATH:+:$PYTHONPATH}" "$PY" - "$ADDR_a" \
        "$T_READ" 2>&1 <<'EOF'
import sys
import dscache
loader = dscache.Loader(servers=sys.argv[1], dataset="authds", batch_size=50, shuffle=False,
                        auth_file=sys.argv[2])
print("samples", sum(len(b["y"]) for b in loader))
try:
    dscache.Loader(servers=sys.argv[1], dataset="authds", batch_size=50)
    print("anonymous loader created")
except Exception as e:
    print("anonymous refused:", type(e).__name__)
EOF
    ) || true
    grep -q '^samples 600$' <<<"$out" && pass "Python loader with auth_file=: 600 samples" \
        || fail "python: $out"
    grep -q '^anonymous refused' <<<"$out" && pass "Python loader without a credential refused" \
        || fail "python anonymous: $out"
fi

# ---- The secret never crosses the wire: a proxy records both directions. -------------------
"$PY" - "$ADDR_a" "$work/proxy.port" "$work/capture.bin" <<'EOF' &
import socket, sys, threading
host, port = sys.argv[1].rsplit(":", 1)
lsock = socket.socket()
lsock.bind(("127.0.0.1", 0))
lsock.listen(16)
with open(sys.argv[2] + ".tmp", "w") as f:
    f.write(str(lsock.getsockname()[1]))
import os
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
lock = threading.Lock()
out = open(sys.argv[3], "ab", buffering=0)
def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            with lock:
                out.write(data)
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
while True:
    c, _ = lsock.accept()
    s = socket.create_connection((host, int(port)))
    threading.Thread(target=pump, args=(c, s), daemon=True).start()
    threading.Thread(target=pump, args=(s, c), daemon=True).start()
EOF
pids+=("$!")
until_ok 10 test -s "$work/proxy.port" || fail "proxy did not start"
PROXY=127.0.0.1:$(cat "$work/proxy.port")
expect 0 '^OK \[' "$AUTH" op "$PROXY" "$T_READ" LIST
expect 0 '^OK [1-9]' "$AUTH" op "$PROXY" "$T_ADMIN" EVICT authds
expect 0 '^CONNECT_ERR EUNAUTH' "$AUTH" op "$PROXY" "$work/tok-wrong" LIST
expect 0 'authds' "$CLI" stat --server "$PROXY" --auth-file "$T_LIM"
out=$("$PY" - "$work/capture.bin" "$S_READ" "$S_ADMIN" "$S_LIM" <<'EOF'
import base64, sys
data = open(sys.argv[1], "rb").read()
print("captured", len(data), "names" if b"trainer" in data and b"ops" in data else "NO-NAMES")
for secret in sys.argv[2:]:
    s = secret.encode()
    forms = [s, s.hex().encode(), s.hex().upper().encode(), base64.b64encode(s),
             base64.b64encode(s).rstrip(b"="), base64.urlsafe_b64encode(s)]
    leaked = [f for f in forms if f in data]
    print("secret", "LEAKED" if leaked else "absent")
EOF
)
grep -q '^captured [0-9]* names' <<<"$out" && [ "$(grep -c '^secret absent' <<<"$out")" = 3 ] \
    && pass "capture of 4 handshakes: names present, secrets absent (raw, hex, base64)" \
    || fail "capture: $out"

# ---- SIGHUP: add one credential, remove another; a bad file keeps the set. ---------------
printf 'ops admin %s\nnewbie read %s\nlimited read %s authds\n' "$S_ADMIN" "$S_NEW" "$S_LIM" \
    >"$work/creds.new"
mv "$work/creds.new" "$work/creds"
kill -HUP "$PID_a"
until_ok 10 grep -q "SIGHUP: 3 credentials loaded" "$work/server-a.log" || fail "no reload line"
expect 0 '^OK \[' "$AUTH" op "$ADDR_a" "$T_NEW" LIST
expect 0 '^CONNECT_ERR EUNAUTH' "$AUTH" op "$ADDR_a" "$T_READ" LIST
pass "SIGHUP: newbie added, trainer removed"
printf 'newbie superuser %s\n' "$S_NEW" >"$work/creds"
kill -HUP "$PID_a"
until_ok 10 grep -q "error SIGHUP: credentials not reloaded, keeping the current set.*invalid role" \
    "$work/server-a.log" || fail "no ERROR for a bad credential file"
expect 0 '^OK \[' "$AUTH" op "$ADDR_a" "$T_NEW" LIST
expect 0 '^OK [1-9]' "$AUTH" op "$ADDR_a" "$T_ADMIN" WARM authds
pass "bad file on SIGHUP: ERROR logged, previous credentials still served"
stop_server a
[ "$STOP_RC" = 0 ] || fail "server a exit $STOP_RC"

# A bad --auth-file at start is refused with the reason.
if timeout 20 "$SERVER" --data "$work/ds" --listen 127.0.0.1:0 --http off --auth-file "$work/creds" \
    >"$work/server-bad.log" 2>&1; then
    fail "server started with a bad --auth-file"
else
    grep -q "invalid role" "$work/server-bad.log" && pass "bad --auth-file at start: refused" \
        || fail "bad --auth-file: $(cat "$work/server-bad.log")"
fi
finish
