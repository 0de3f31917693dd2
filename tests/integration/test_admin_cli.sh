#!/usr/bin/env bash
# The operator's commands: dscached --version and dscache --version; dscache list, warm and
# evict against a server (the store's resident shards move as they say, warm returning once they
# are resident); malformed addresses get a message that says what is expected.
source "$(dirname "$0")/server_lib.sh"

ver=$(grep -oE 'DSC_VERSION_STRING "[^"]+"' "$DSC_SRC/proto/dscache_base.h" | cut -d'"' -f2)
[ "$("$SERVER" --version)" = "dscached $ver" ] && pass "dscached --version: $ver" || fail "dscached --version"
[ "$("$CLI" --version)" = "dscache $ver" ] && pass "dscache --version: $ver" || fail "dscache --version"

make_dataset "$work/ds" adm 3000 lz4
shards=$(json_get "$(cat "$work/ds/manifest.json")" 'len(j["shards"])')
# warm and evict are admin operations: anonymous ones need --allow-anonymous-admin.
start_server a --data "$work/ds" --memory 64M --allow-anonymous-admin
cached() { json_get "$("$TOOL" call "$ADDR_a" STAT adm)" 'j["datasets"][0]["cached_shards"]'; }

out=$("$CLI" list --server "$ADDR_a")
grep -qE "^adm +$shards +3000 " <<<"$out" && pass "list: $(tail -n1 <<<"$out")" || fail "list: $out"
[ "$(json_get "$("$CLI" list --server "$ADDR_a" --json)" 'j[0]["name"]')" = adm ] \
    && pass "list --json" || fail "list --json"
[ "$(cached)" = 0 ] || fail "not warm, yet $(cached) shards cached"
# WARM answers when its loads are started; dscache warm says "loaded" once they are done
# (STAT's loading_shards and shard_map), so the shard is resident when it returns.
out=$("$CLI" warm --server "$ADDR_a" --dataset adm --shard 1)
c=$(cached)
loading=$(json_get "$("$TOOL" call "$ADDR_a" STAT adm)" 'j["datasets"][0]["loading_shards"]')
[ "$out" = "adm (shard 1): 1 shard loaded" ] && [ "$c" = 1 ] && [ "$loading" = 0 ] \
    && pass "warm --shard 1: $out, resident when it returns" \
    || fail "warm --shard 1: '$out', cached $c right after, loading_shards $loading"
out=$("$CLI" warm --server "$ADDR_a" --dataset adm)
[ "$(cached)" = "$shards" ] && pass "warm: $out; $shards cached" || fail "warm: '$out', cached $(cached)"
out=$("$CLI" evict --server "$ADDR_a" --dataset adm)
[ "$out" = "adm (all shards): $shards shards dropped" ] && [ "$(cached)" = 0 ] \
    && pass "evict: $out" || fail "evict: '$out', cached $(cached)"
rc=0; out=$("$CLI" warm --server "$ADDR_a" --dataset nosuch 2>&1) || rc=$?
[ $rc = 1 ] && [[ "$out" == *"NOT_FOUND"* || "$out" == *"not found"* ]] && pass "warm nosuch: $out" \
    || fail "warm nosuch: rc $rc: $out"

# Malformed addresses.
for bad in localhost 127.0.0.1 "[::1" "host:99999" ":7070"; do
    rc=0; out=$("$CLI" list --server "$bad" 2>&1) || rc=$?
    [ $rc != 0 ] && [[ "$out" == *"--server '$bad': not HOST:PORT"* ]] \
        || fail "--server $bad: rc $rc: $out"
done
pass "malformed --server values are named with the expected form"
rc=0; out=$("$SERVER" --data "$work/ds" --listen 7070 2>&1) || rc=$?
[ $rc != 0 ] && [[ "$out" == *"invalid --listen '7070': expected HOST:PORT"* ]] \
    && pass "dscached --listen 7070: $out" || fail "--listen 7070: rc $rc: $out"
rc=0; out=$("$CLI" warm --server "$ADDR_a" 2>&1) || rc=$?
[ $rc = 2 ] && [[ "$out" == *"--dataset NAME is required"* ]] && pass "warm without --dataset: usage" \
    || fail "warm without --dataset: rc $rc: $out"
# Metrics: the new series, no name clashes under OpenMetrics (a counter NAME_total beside a
# series NAME), and promtool's lint where it is installed.
"$CLI" get --server "$ADDR_a" --dataset adm --shard 0 -o "$work/shard0" >/dev/null \
    || fail "get shard 0 (for the GET latency histogram)"
chunks0=$(json_get "$(cat "$work/ds/manifest.json")" 'j["shards"][0]["chunks"]')
curl -sf "http://$HTTP_a/metrics" >"$work/metrics"
# GET latency histogram: one observation per GET answered OK (dscache get sends one per chunk
# or run of chunks), cumulative buckets that never decrease, +Inf equal to the count.
lat=$(awk -v want="$chunks0" '
    /^dscache_get_latency_seconds_bucket/ { v = $2 + 0; if (v < last) bad = "decreasing"; last = v
        if ($1 ~ /le="\+Inf"/) inf = v }
    /^dscache_get_latency_seconds_count / { count = $2 + 0 }
    END { if (bad != "") print bad; else if (count < 1 || count > want) print "count " count " for " want " chunks";
          else if (inf != count) print "+Inf " inf " != count " count; else print "ok " count }' "$work/metrics")
[[ "$lat" == ok* ]] && pass "dscache_get_latency_seconds: $lat GETs observed" || fail "GET latency histogram: $lat"
grep -q "^dscache_build_info{version=\"$ver\"} 1$" "$work/metrics" && pass "dscache_build_info $ver" \
    || fail "no dscache_build_info"
for m in dscache_cluster_members dscache_owned_shards dscache_owned_resident_shards \
         'dscache_dataset_shards{dataset="adm"}' 'dscache_dataset_hits_total{dataset="adm"}'; do
    [ "$(metric "$HTTP_a" "$m")" != missing ] || fail "metric $m missing"
done
[ "$(metric "$HTTP_a" 'dscache_dataset_shards{dataset="adm"}')" = "$shards" ] \
    && pass "per-dataset series: $shards shards of adm" || fail "dscache_dataset_shards"
clash=$(awk '$1 == "#" && $2 == "TYPE" { t[$3] = $4 } END {
    for (n in t) if (t[n] == "counter" && n ~ /_total$/) { b = substr(n, 1, length(n) - 6); if (b in t) print b }
}' "$work/metrics")
[ -z "$clash" ] && pass "no series beside a counter of the same name + _total" || fail "name clash: $clash"
if command -v promtool >/dev/null; then
    out=$(promtool check metrics <"$work/metrics" 2>&1) && pass "promtool check metrics: clean" \
        || fail "promtool check metrics: $out"
else
    echo "note: promtool is not installed (Debian package prometheus): lint not run"
fi
stop_server a
[ "$STOP_RC" = 0 ] || fail "server exit $STOP_RC"
finish
