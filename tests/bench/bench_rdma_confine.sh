#!/usr/bin/env bash
# Cost of confining RDMA READs to leases (issue 20; not a test): one RDMA_GET of one 32 KiB chunk
# (releasing the previous lease) + the READ of it, round trip median and p99, against a server
# whose leases bind memory windows and one on a device without windows (DSC_FAKEVERBS_MW=off:
# the arena's single region key, the design before), in the same run; plus the server's own time
# per bind and per invalidation (dscache_rdma_window_seconds_total / _ops_total). Through the
# test-only fake verbs library only: its window operations are a hop to a helper thread, not a
# NIC's, so the figures bound the code path, not a device (docs/rdma.md says what they mean).
# usage: DSC_BIN=build/bin DSC_FAKEVERBS_LIB=build/lib/libfakeverbs.so bash tests/bench/bench_rdma_confine.sh
#   env: ROUNDS (2000)
set -euo pipefail
here=$(dirname "$0")
source "$here/../integration/server_lib.sh"
source "$here/../integration/rdma_lib.sh"
HOSTILE=$DSC_BIN/rdma_hostile
[ -x "$HOSTILE" ] || { echo "SKIP: $HOSTILE not built"; exit 77; }
ROUNDS=${ROUNDS:-2000}
make_dataset "$work/a" dsa 3000 none
S=bench-secret-FFFFFFFFFFFFFFFFFF
printf 'bench read %s\n' "$S" >"$work/creds"
printf 'bench %s\n' "$S" >"$work/tok"
chmod 600 "$work/creds" "$work/tok"
echo "| design | RDMA_GET + READ median | p99 | server time per bind | per invalidation |"
echo "|---|---|---|---|---|"
for design in windows region; do
    if [ $design = region ]; then export DSC_FAKEVERBS_MW=off; else unset DSC_FAKEVERBS_MW; fi
    start_server $design --data "$work/a" --auth-file "$work/creds" --rdma required --warm
    a="ADDR_$design" h="HTTP_$design"
    out=$("$HOSTILE" latency --servers "${!a}" --dataset dsa --token "$work/tok" --count "$ROUNDS")
    med=$(sed -n 's/.*median \([0-9.]*\) us.*/\1/p' <<<"$out")
    p99=$(sed -n 's/.*p99 \([0-9.]*\) us.*/\1/p' <<<"$out")
    m=$(curl -sf "http://${!h}/metrics")
    per() { awk -v s="dscache_rdma_window_seconds_total{op=\"$1\"}" -v o="dscache_rdma_window_ops_total{op=\"$1\"}" \
        '$1==s{t=$2} $1==o{n=$2} END{ if (n>0) printf "%.1f us", t/n*1e6; else print "-" }' <<<"$m"; }
    echo "| $design | $med us | $p99 us | $(per bind) | $(per invalidate) |"
    [ $design = windows ] && w_med=$med || r_med=$med
    stop_server $design
done
awk -v w="$w_med" -v r="$r_med" 'BEGIN { printf "windows / region median: %.2fx (fakeverbs)\n", w / r }'
