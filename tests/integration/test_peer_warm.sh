#!/usr/bin/env bash
# Peer warm-up (docs/cluster.md): three dscached, --replicas 2, --warm. A member restarted on its
# own address becomes ready having read every shard it owns from the other live owner (PEER_READ)
# and none from the backing storage; with a second member down too, it reads from the backing
# storage only the shards no live owner holds (within 1.1x of their bytes). The owners that
# served it count the bytes. PEER_READ itself: only resident shards (never a load), bounds, a
# malformed body; a member whose disk copy of a shard is damaged loads the intact replica's; and
# with --auth-file a member authenticates with --peer-credential (a credential confined to other
# datasets gets nothing and falls back; no --peer-credential: off, with a WARN).
source "$(dirname "$0")/server_lib.sh"
PY=${DSC_PYTHON:-/usr/bin/python3}

stat_of() { "$TOOL" call "$1" STAT clds; }
ready() { curl -sf "http://$1/readyz" >/dev/null; }

make_dataset "$work/ds" clds 6000 lz4
shards=$(json_get "$(cat "$work/ds/manifest.json")" 'len(j["shards"])')
[ "$shards" -ge 12 ] || fail "dataset too small: $shards shards"

members=$work/members
for n in a b c; do
    START_NO_WAIT=1 start_server "$n" --data "$work/ds" --memory 64M --warm --replicas 2 \
        --members-file "$members"
done
printf '%s\n%s\n%s\n' "$ADDR_a" "$ADDR_b" "$ADDR_c" >"$members.tmp"
mv "$members.tmp" "$members"
for n in a b c; do
    h=HTTP_$n
    until_ok 30 ready "${!h}" || fail "server $n not ready"
done
grep -q "peer warm-up: shards are read from live owners first" "$work/server-a.log" \
    && pass "peer warm-up on by default in a cluster" || fail "no peer warm-up line in the log"

# restart NAME: stops the member and starts it again on the same address (the member list is
# unchanged, as for a StatefulSet pod); waits until /readyz answers 200.
restart() {
    local name=$1 a=ADDR_$1; local addr=${!a}; shift
    stop_server "$name"
    START_NO_WAIT=1 start_server "$name" --data "$work/ds" --memory 64M --warm --replicas 2 \
        --members-file "$members" --listen "$addr" "$@"
    local h=HTTP_$name
    until_ok 30 ready "${!h}"
}

# served_by_ab: the PEER_READ bytes a and b answered so far (members that started together may
# already have read from each other).
served_by_ab() {
    local n h v sum=0
    for n in a b; do
        h=HTTP_$n
        v=$(metric "${!h}" dscache_peer_read_bytes_total)
        sum=$((sum + ${v%.*}))
    done
    echo "$sum"
}
served0=$(served_by_ab)

# 1. One member restarted: the other owner of each of its shards is live.
restart c || fail "c not ready after its restart"
s=$(stat_of "$ADDR_c")
"$PY" - "$s" "$work/ds/manifest.json" <<'EOF' && pass "restarted c: every owned shard from its peer, 0 bytes from the backing storage" || fail "restart c: $s"
import json, sys
s = json.loads(sys.argv[1]); m = json.load(open(sys.argv[2]))
d = s["datasets"][0]; pw = s["store"]["peer_warm"]
owned = [i for i, ch in enumerate(d["shard_map"]) if ch in "Oo"]
owned_bytes = sum(m["shards"][i]["bytes"] for i in owned)
print("owned %d shards, %d bytes; peer_warm %s; left %s" % (len(owned), owned_bytes, pw, s["cluster"]["warm_shards_left"]))
assert d["owned_cached_shards"] == d["owned_shards"] == len(owned) > 0
assert pw["enabled"] and pw["shards"] == len(owned) and pw["bytes"] == owned_bytes, pw
assert pw["backing_bytes"] == 0 and pw["fallbacks"] == 0 and pw["refused"] == 0, pw
assert s["cluster"]["warm_shards_left"] == 0
EOF
served=$(($(served_by_ab) - served0))
peer_bytes=$(json_get "$(stat_of "$ADDR_c")" 'j["store"]["peer_warm"]["bytes"]')
[ "$served" = "$peer_bytes" ] && pass "a and b answered the $served bytes c read (dscache_peer_read_bytes_total)" \
    || fail "peers served $served bytes, c read $peer_bytes"
[ "$(metric "$HTTP_c" dscache_peer_warm_bytes_total)" = "$peer_bytes" ] \
    && [ "$(metric "$HTTP_c" dscache_warm_shards_left)" = 0 ] \
    && pass "metrics: dscache_peer_warm_bytes_total, dscache_warm_shards_left" \
    || fail "metrics of c: $(curl -s "http://$HTTP_c/metrics" | grep -E 'peer|left')"

# 1b. --peer-rate bounds the warm-up: restarted with 200K/s, c takes at least (bytes - one shard)
#     / rate to be ready, and dscache top shows it warming from its peers meanwhile.
rate=204800
t0=$(date +%s.%N)
stop_server c
START_NO_WAIT=1 start_server c --data "$work/ds" --memory 64M --warm --replicas 2 \
    --members-file "$members" --listen "$ADDR_c" --peer-rate 200K
"$CLI" top --once --interval 0.5 --server "$ADDR_a,$ADDR_c" >"$work/top.txt" 2>&1 || true
until_ok 60 ready "$HTTP_c" || fail "c not ready with --peer-rate 200K"
t1=$(date +%s.%N)
"$PY" - "$t0" "$t1" "$rate" "$(stat_of "$ADDR_c")" "$work/ds/manifest.json" <<'EOF2' && pass "--peer-rate 200K: the warm-up took at least its bytes / rate" || fail "--peer-rate not honoured"
import json, sys
t0, t1, rate = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
s = json.loads(sys.argv[4]); m = json.load(open(sys.argv[5]))
pw = s["store"]["peer_warm"]
largest = max(sh["bytes"] for sh in m["shards"])
floor = (pw["bytes"] - largest) / rate
print("%d bytes from peers in %.2f s (at most %.0f B/s: at least %.2f s)" % (pw["bytes"], t1 - t0, rate, floor))
assert pw["backing_bytes"] == 0 and pw["bytes"] > 2 * largest and t1 - t0 >= floor
EOF2
grep -qE '^SERVER .* PEER MB/s +STATUS' "$work/top.txt" \
    && grep -qE "^$ADDR_c .* warming: [0-9]+ shards left" "$work/top.txt" \
    && grep -qE "^$ADDR_c .* from peers, [0-9]+ left \([0-9.]+ MB\)" "$work/top.txt" \
    && pass "dscache top: PEER MB/s, 'warming: N shards left' and the STRAGGLERS table's peer warm-up (shards, MB left) while c warms" \
    || fail "dscache top during the warm-up: $(cat "$work/top.txt")"

# 2. b down too: c's shards owned by b and c have no live replica; only they are read from disk.
stop_server b
restart c || fail "c not ready after its restart with b down"
"$PY" - "$(stat_of "$ADDR_c")" "$(stat_of "$ADDR_a")" "$work/ds/manifest.json" <<'EOF' && pass "with b down: c read from the backing storage only what a did not hold (<= 1.1x)" || fail "restart c with b down"
import json, sys
c = json.loads(sys.argv[1]); a = json.loads(sys.argv[2]); m = json.load(open(sys.argv[3]))
cm, am = c["datasets"][0]["shard_map"], a["datasets"][0]["shard_map"]
owned = [i for i, ch in enumerate(cm) if ch in "Oo"]
nobody = [i for i in owned if am[i] not in "Oc"]  # no live replica held it
held = [i for i in owned if am[i] in "Oc"]
pw = c["store"]["peer_warm"]
nobody_bytes = sum(m["shards"][i]["bytes"] for i in nobody)
held_bytes = sum(m["shards"][i]["bytes"] for i in held)
print("c owns %d: %d held by a (%d B), %d by nobody live (%d B); peer_warm %s" % (len(owned), len(held), held_bytes, len(nobody), nobody_bytes, pw))
assert nobody and held, "placement gave no shard of each kind"
assert pw["bytes"] == held_bytes and pw["shards"] == len(held), pw
assert pw["backing_bytes"] <= 1.1 * nobody_bytes and pw["backing_bytes"] >= nobody_bytes, pw
assert c["datasets"][0]["owned_cached_shards"] == len(owned)
EOF

# 3. PEER_READ on the wire (opcode 14): a resident shard's bytes, nothing for one not resident.
START_NO_WAIT=1 start_server cold --data "$work/ds" --memory 64M
"$PY" - "$ADDR_a" "$ADDR_cold" "$work/ds" "$(stat_of "$ADDR_a")" <<'EOF' && pass "PEER_READ: resident bytes exact; not resident UNAVAILABLE (no load); bounds and bad bodies refused" || fail "PEER_READ on the wire"
import json, socket, struct, sys
a, cold, ds = sys.argv[1], sys.argv[2], sys.argv[3]
am = json.loads(sys.argv[4])["datasets"][0]["shard_map"]
m = json.load(open(ds + "/manifest.json"))
def conn(addr):
    h, p = addr.rsplit(":", 1)
    s = socket.create_connection((h, int(p)), timeout=10)
    call(s, 1, struct.pack("<HHIQ", 1, 1, 0, 0) + struct.pack("<H", 0) + struct.pack("<H", 1) + b"t")
    return s
def recv(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b)); assert c, "closed"
        b += c
    return b
rid = [0]
def call(s, op, body):
    rid[0] += 1
    s.sendall(struct.pack("<IBBHIQI", 0x50435344, 1, op, 0, 0, rid[0], len(body)) + body)
    magic, ver, rop, flags, status, req, blen = struct.unpack("<IBBHIQI", recv(s, 24))
    assert rop == op and req == rid[0] and flags == 1
    return status, recv(s, blen)
def req(shard, off, n, name=b"clds", flags=0, version=0):
    return struct.pack("<H", len(name)) + name + struct.pack("<IIQQI", shard, flags, version, off, n)
i = next(k for k, ch in enumerate(am) if ch in "Oc")
f = open(ds + "/" + m["shards"][i]["file"], "rb").read()
s = conn(a)
st, body = call(s, 14, req(i, 0, len(f)))
assert st == 0 and body == f, (st, len(body))
st, body = call(s, 14, req(i, 100, 50))
assert st == 0 and body == f[100:150]
assert call(s, 14, req(i, len(f) - 10, 11))[0] == 2          # beyond the file
assert call(s, 14, req(i, 0, 10, name=b"nope"))[0] == 1      # no such dataset
assert call(s, 14, req(10**6, 0, 10))[0] == 1                # no such shard
assert call(s, 14, req(i, 0, 0))[0] == 2                     # length 0
assert call(s, 14, req(i, 0, (8 << 20) + 1))[0] == 2         # over DSC_PEER_READ_MAX
assert call(s, 14, req(i, 0, 10) + b"x")[0] == 2             # trailing byte
assert call(s, 14, req(i, 0, 10, flags=1, version=12345))[0] == 11   # another version: CHANGED
assert call(s, 14, b"\x01")[0] == 2                          # truncated
c = conn(cold)
assert call(c, 14, req(0, 0, 10))[0] == 4                    # not resident: UNAVAILABLE
st = json.loads(call(c, 6, struct.pack("<H", 4) + b"clds")[1])
assert st["datasets"][0]["cached_shards"] == 0, "PEER_READ loaded a shard"
EOF

# 4. A shard damaged on one member's disk: loaded from the intact replica's RAM (the copy is
#    checked against the manifest), so that member serves it whole instead of answering CORRUPT.
if [ -x "$DSC_BIN/shard_damage" ]; then
    cp -r "$work/ds" "$work/flip"
    "$DSC_BIN/shard_damage" flip "$work/flip" 1 >/dev/null
    members3=$work/members3
    START_NO_WAIT=1 start_server r --data "$work/ds" --memory 64M --warm --replicas 2 \
        --members-file "$members3"
    echo "$ADDR_r" >"$members3.tmp" && mv "$members3.tmp" "$members3"
    until_ok 30 ready "$HTTP_r" || fail "r not ready"
    START_NO_WAIT=1 start_server s --data "$work/flip" --memory 64M --warm --replicas 2 \
        --members-file "$members3"
    printf '%s\n%s\n' "$ADDR_r" "$ADDR_s" >"$members3.tmp" && mv "$members3.tmp" "$members3"
    healed() {
        [ "$(json_get "$(stat_of "$ADDR_s")" 'j["datasets"][0]["cached_shards"] == '"$shards"' and j["store"]["peer_warm"]["shards"] == '"$shards"' and j["datasets"][0]["damaged_shards"] == 0')" = True ]
    }
    until_ok 30 healed && "$TOOL" get "$ADDR_s" clds 1 0 1 >/dev/null \
        && pass "a member with shard 1 damaged on disk loaded it intact from its peer and serves it" \
        || fail "damaged member: $(stat_of "$ADDR_s")"
fi

# 5. --auth-file: members authenticate to each other with --peer-credential.
secret_p=peer-secret-0123456789abcdef
secret_o=other-secret-0123456789abcdef
printf 'peer read %s clds\nnarrow read %s otherds\nops admin admin-secret-0123456789ab\n' \
    "$secret_p" "$secret_o" >"$work/auth"
chmod 600 "$work/auth"
printf 'ops admin-secret-0123456789ab\n' >"$work/ops.token"
chmod 600 "$work/ops.token"
stat_auth() { DSCACHE_TOKEN_FILE=$work/ops.token "$CLI" stat --server "$1" --dataset clds --json; }
members2=$work/members2
for n in p q; do
    START_NO_WAIT=1 start_server "$n" --data "$work/ds" --memory 64M --warm --replicas 2 \
        --members-file "$members2" --auth-file "$work/auth" --peer-credential peer
done
printf '%s\n%s\n' "$ADDR_p" "$ADDR_q" >"$members2.tmp"
mv "$members2.tmp" "$members2"
for n in p q; do
    h=HTTP_$n
    until_ok 30 ready "${!h}" || fail "server $n (auth) not ready"
done
restart2() { # restart2 ARGS...: q restarted on its address with ARGS
    stop_server q
    START_NO_WAIT=1 start_server q --data "$work/ds" --memory 64M --warm --replicas 2 \
        --members-file "$members2" --auth-file "$work/auth" --listen "$ADDR_q" "$@"
    until_ok 30 ready "$HTTP_q"
}
restart2 --peer-credential peer || fail "q not ready (auth)"
[ "$(json_get "$(stat_auth "$ADDR_q")" 'j["store"]["peer_warm"]["shards"] == '"$shards"' and j["store"]["peer_warm"]["backing_bytes"] == 0')" = True ] \
    && pass "auth: q authenticated as 'peer' and read all $shards shards from p" \
    || fail "auth restart: $(stat_auth "$ADDR_q")"
restart2 --peer-credential narrow || fail "q not ready (narrow credential)"
[ "$(json_get "$(stat_auth "$ADDR_q")" 'j["store"]["peer_warm"]["shards"] == 0 and j["store"]["peer_warm"]["fallbacks"] == '"$shards"'')" = True ] \
    && pass "auth: a credential confined to another dataset reads nothing from p (NOT_FOUND), falls back" \
    || fail "narrow credential: $(stat_auth "$ADDR_q")"
restart2 || fail "q not ready (no peer credential)"
grep -q "peer warm-up off: --auth-file is set but no --peer-credential" "$work/server-q.log" \
    && [ "$(json_get "$(stat_auth "$ADDR_q")" 'j["store"]["peer_warm"]["enabled"]')" = False ] \
    && pass "auth without --peer-credential: peer warm-up off, with a WARN" \
    || fail "no warning without --peer-credential"
expect 1 "no such credential" "$SERVER" --data "$work/ds" --listen 127.0.0.1:0 --http off \
    --members "$ADDR_p" --auth-file "$work/auth" --peer-credential nobody
finish
