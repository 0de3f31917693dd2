#!/usr/bin/env bash
# Cluster benchmark (not a test; needs root): prints markdown tables.
#  1. Scaling: 1, 2 and 4 dscached (--replicas 2, --warm) on hosts h1..h4 and two trainer ranks
#     (dscache bench, world 2) on h5 and h6, each host in its own network namespace with its link
#     shaped by tc tbf: servers at SERVER_RATE, clients at CLIENT_RATE. Aggregate = the bytes both
#     ranks received per second; it should follow min(servers * SERVER_RATE, 2 * CLIENT_RATE).
#  2. Cold vs warm: one dscached (no --warm) whose dataset sits on an ext4 loop device read
#     through a blkio cgroup throttle of DISK_MBPS; one rank reads two epochs: the first loads
#     every shard from the throttled disk, the second is served from RAM.
# usage: DSC_BIN=build/bin bash tests/bench/bench_cluster.sh
#   env: SERVER_RATE (200mbit) CLIENT_RATE (300mbit) SECONDS_PER_RUN (6) DATASET_MB (256)
#        DISK_MBPS (40)
set -euo pipefail
here=$(dirname "$0")
DSC_BIN=${DSC_BIN:?DSC_BIN must point at the build bin directory}
source "$here/../netns/lib.sh"
netns_check
source "$here/../integration/cluster_lib.sh"
SERVER_RATE=${SERVER_RATE:-200mbit}
CLIENT_RATE=${CLIENT_RATE:-300mbit}
RUN_S=${SECONDS_PER_RUN:-6}
DATASET_MB=${DATASET_MB:-256}
DISK_MBPS=${DISK_MBPS:-40}

loopdev=""
cgroup=/sys/fs/cgroup/blkio/dsc-bench-$$
storage_cleanup() {
    if mountpoint -q "$work/mnt" 2>/dev/null; then umount "$work/mnt" || true; fi
    if [ -n "$loopdev" ]; then losetup -d "$loopdev" 2>/dev/null || true; fi
    if [ -d "$cgroup" ]; then rmdir "$cgroup" 2>/dev/null || true; fi
}
cleanup_hooks+=(netns_cleanup storage_cleanup)

ds=bench
samples=$((DATASET_MB * 256)) # 4 KiB samples
"$DSC_BIN/dscache" ingest synthetic -o "$work/$ds" --name "$ds" --samples "$samples" \
    --field x:f32:1024 --compress none --chunk-size 1M --shard-size 4M >/dev/null
shards=$("$PY" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["shards"]))' \
    "$work/$ds/manifest.json")

rate_mbit() { # "200mbit" / "1gbit" -> megabits
    case $1 in
    *gbit) echo $((${1%gbit} * 1000)) ;;
    *mbit) echo "${1%mbit}" ;;
    *) echo "?" ;;
    esac
}

# --- 1. Scaling over shaped links -------------------------------------------------------------
if [ -z "${SKIP_SCALING:-}" ]; then
netns_setup 6 79
for i in 1 2 3 4; do netns_shape "$i" "$SERVER_RATE"; done
for i in 5 6; do netns_shape "$i" "$CLIENT_RATE"; done
members=$work/members
DSC_RUN="netns_exec 5" # warmed asks from a client host

rows=()
for n in 1 2 4; do
    for i in $(seq 1 "$n"); do echo "$(netns_ip "$i"):7070"; done >"$members"
    server_pids=()
    for i in $(seq 1 "$n"); do
        netns_exec "$i" "$DSC_BIN/dscached" --listen "$(netns_ip "$i"):7070" --http off \
            --threads 1 --memory 1G --log-level warn --data "$work/$ds" --warm --replicas 2 \
            --members-file "$members" >"$work/server-$n-$i.log" 2>&1 &
        server_pids+=("$!")
        pids+=("$!")
    done
    for i in $(seq 1 "$n"); do
        until_ok 60 warmed "$(netns_ip "$i"):7070" "$ds" \
            || { echo "server $(netns_ip "$i"):7070 did not warm" >&2; exit 1; }
    done
    client_pids=()
    for r in 0 1; do
        netns_exec $((5 + r)) "$DSC_BIN/dscache" bench --servers "file:$members" --dataset "$ds" \
            --batch-size 64 --seconds "$RUN_S" --rank "$r" --world-size 2 --cache 16777216 \
            --shuffle-window 1024 \
            --inflight 16777216 --connections 2 >"$work/bench-$n-$r.out" 2>&1 &
        client_pids+=("$!")
        pids+=("$!")
    done
    for pid in "${client_pids[@]}"; do wait "$pid"; done
    for pid in "${server_pids[@]}"; do kill -KILL "$pid"; wait "$pid" 2>/dev/null || true; done
    recv=$(cat "$work/bench-$n-0.out" "$work/bench-$n-1.out" | awk '/^throughput:/ {
        for (i = 1; i + 2 <= NF; i++) if ($(i + 1) == "GB/s" && $(i + 2) ~ /^received/) s += $i }
        END { printf "%.1f", s * 1000 }')
    stall=$(cat "$work/bench-$n-0.out" "$work/bench-$n-1.out" | awk '/^stall:/ { s += $2; k++ } END { printf "%.0f", s / k }')
    srv=$(rate_mbit "$SERVER_RATE")
    cli=$(rate_mbit "$CLIENT_RATE")
    expect=$((n * srv < 2 * cli ? n * srv : 2 * cli))
    mbit=$("$PY" -c "print(round($recv * 8))")
    rows+=("| $n | $recv | $mbit | $expect | $((100 * mbit / expect))% | $stall% |")
done

echo
echo "### Aggregate throughput, 2 clients (ranks of world 2), links shaped with tc tbf"
echo
echo "Dataset: $DATASET_MB MiB uncompressed ($shards shards of 4 MiB, 1 MiB chunks), replicas 2;"
echo "server links $SERVER_RATE, client links $CLIENT_RATE; $RUN_S s per run; loader cache 16 MiB,"
echo "shuffle window 1024 samples (so every chunk crosses the network once per epoch)."
echo
echo "| servers | received MB/s (both clients) | Mbit/s | link bound Mbit/s | of bound | stall |"
echo "|--------:|-----------------------------:|-------:|------------------:|---------:|------:|"
printf '%s\n' "${rows[@]}"
netns_cleanup
NETNS_HOSTS=0
fi

# --- 2. Cold vs warm over throttled storage ---------------------------------------------------
if [ ! -d /sys/fs/cgroup/blkio ] || ! command -v losetup >/dev/null || ! command -v mkfs.ext4 >/dev/null; then
    echo
    echo "(cold vs warm skipped: needs the cgroup v1 blkio controller, losetup and mkfs.ext4)"
    exit 0
fi
img=$work/disk.img
truncate -s $((DATASET_MB * 3 / 2 + 64))M "$img"
loopdev=$(losetup -f --show "$img")
mkfs.ext4 -q "$loopdev"
mkdir -p "$work/mnt"
mount "$loopdev" "$work/mnt"
cp -r "$work/$ds" "$work/mnt/"
umount "$work/mnt" # drops the dataset's pages from the page cache
mount "$loopdev" "$work/mnt"
mkdir "$cgroup"
echo "$(lsblk -no MAJ:MIN "$loopdev" | tr -d ' ') $((DISK_MBPS * 1000000))" \
    >"$cgroup/blkio.throttle.read_bps_device"
pf=$work/cold.port
bash -c 'echo $$ >"$1/cgroup.procs"; shift; exec "$@"' _ "$cgroup" "$DSC_BIN/dscached" \
    --listen 127.0.0.1:0 --port-file "$pf" --http off --threads 1 --io-threads 4 --memory 2G \
    --log-level warn --data "$work/mnt/$ds" >"$work/cold-server.log" 2>&1 &
pids+=("$!")
for _ in $(seq 100); do [ -s "$pf" ] && break; sleep 0.05; done
"$DSC_BIN/cluster_check" epoch --servers "127.0.0.1:$(cat "$pf")" --dataset "$ds" \
    --dir "$work/mnt/$ds" --no-verify 1 --epochs 2 --batch 64 --cache 16777216 --window 1024 \
    --timeout-ms 30000 >"$work/cold.out" 2>"$work/cold.err" || { cat "$work/cold.out" "$work/cold.err"; exit 1; }
echo
echo "### Cold first epoch vs warm second epoch (storage throttled to $DISK_MBPS MB/s)"
echo
echo "One dscached without --warm (read-through on a miss) over an ext4 loop device throttled by a"
echo "blkio cgroup (blkio.throttle.read_bps_device), page cache empty at start; one client,"
echo "loopback network."
echo
echo "| epoch | seconds | MB/s delivered |"
echo "|------:|--------:|---------------:|"
awk '/^epoch / { printf "| %s (%s) | %s | %s |\n", $2, $2 == "0:" ? "cold" : "warm", $3, $5 }' "$work/cold.out" | sed 's/: (/ (/'
