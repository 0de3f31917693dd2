# Test hosts in network namespaces, joined by veth pairs on one bridge; sourced by netns tests.
# Every name carries this shell's PID so parallel runs never collide; netns_cleanup (run it from
# an EXIT trap) removes what was created. Addresses: 10.<net>.0.<i>/24, inside our own
# namespaces only.
#   netns_check              exits 77 with a reason where namespaces cannot be made
#   netns_setup N [NET]      hosts h1..hN; address of host i: $(netns_ip i)
#   netns_exec I CMD...      runs CMD inside host I
#   netns_link_down I / netns_link_up I   cuts / restores host I's link
#   netns_shape I RATE       shapes host I's link (tc tbf), e.g. 2gbit

NETNS_TAG="d$$"
NETNS_HOSTS=0
NETNS_NET=${NETNS_NET:-77}

netns_check() {
    if [ "$(id -u)" -ne 0 ]; then
        echo "SKIP: network namespaces need root"
        exit 77
    fi
    if ! command -v ip >/dev/null; then
        echo "SKIP: iproute2 (ip) is not installed"
        exit 77
    fi
    if ! ip netns add "${NETNS_TAG}probe" 2>/dev/null; then
        echo "SKIP: creating a network namespace is not permitted here"
        exit 77
    fi
    ip netns del "${NETNS_TAG}probe"
    if ! ip link add "${NETNS_TAG}br" type bridge 2>/dev/null; then
        echo "SKIP: creating a bridge is not permitted here"
        exit 77
    fi
    ip link del "${NETNS_TAG}br"
}

netns_ip() { echo "10.${NETNS_NET}.0.$1"; }
netns_name() { echo "${NETNS_TAG}h$1"; }

netns_setup() {
    local n=$1
    NETNS_NET=${2:-$NETNS_NET}
    ip link add "${NETNS_TAG}br" type bridge
    ip link set "${NETNS_TAG}br" up
    for i in $(seq 1 "$n"); do
        local ns; ns=$(netns_name "$i")
        ip netns add "$ns"
        ip link add "${NETNS_TAG}v$i" type veth peer name "${NETNS_TAG}p$i"
        ip link set "${NETNS_TAG}p$i" netns "$ns"
        ip link set "${NETNS_TAG}v$i" master "${NETNS_TAG}br"
        ip link set "${NETNS_TAG}v$i" up
        ip netns exec "$ns" ip link set lo up
        ip netns exec "$ns" ip addr add "$(netns_ip "$i")/24" dev "${NETNS_TAG}p$i"
        ip netns exec "$ns" ip link set "${NETNS_TAG}p$i" up
        NETNS_HOSTS=$i
    done
}

netns_exec() {
    local i=$1; shift
    ip netns exec "$(netns_name "$i")" "$@"
}

netns_link_down() { ip link set "${NETNS_TAG}v$1" down; }
netns_link_up() { ip link set "${NETNS_TAG}v$1" up; }

# Shapes both directions of host I's link.
netns_shape() {
    local i=$1 rate=$2
    tc qdisc replace dev "${NETNS_TAG}v$i" root tbf rate "$rate" burst 512k latency 20ms
    netns_exec "$i" tc qdisc replace dev "${NETNS_TAG}p$i" root tbf rate "$rate" burst 512k latency 20ms
}

netns_cleanup() {
    for i in $(seq 1 "$NETNS_HOSTS"); do
        ip netns pids "$(netns_name "$i")" 2>/dev/null | xargs -r kill -9 2>/dev/null
        ip netns del "$(netns_name "$i")" 2>/dev/null
        ip link del "${NETNS_TAG}v$i" 2>/dev/null
    done
    ip link del "${NETNS_TAG}br" 2>/dev/null
    true
}
