#!/usr/bin/env bash
# Finding: a shard file replaced by a FIFO (or any non-regular file) must not block an I/O thread:
# one found at start-up is refused at scan time (logged, GETs of that shard fail at once); one
# swapped in while the server runs fails its load at once (opened O_NONBLOCK, fstat S_ISREG); and
# with a single I/O thread another dataset's misses are served meanwhile.
source "$(dirname "$0")/server_lib.sh"
source "$(dirname "$0")/hostile_lib.sh"

make_dataset "$work/a" fifoa 3000 none
make_dataset "$work/b" fifob 3000 none
shard_file() { ls "$1" | grep '\.dsc$' | sed -n "$(($2 + 1))p"; }
f1=$(shard_file "$work/a" 1)
rm "$work/a/$f1" && mkfifo "$work/a/$f1"
# A 1 MiB store and one I/O thread: GETs of most shards are read-throughs on that one thread.
start_server a --data "$work/a" --data "$work/b" --memory 1M --io-threads 1
grep -qiE "$f1.*(regular|fifo)|(regular|fifo).*$f1" "$work/server-a.log" \
    && pass "the FIFO is refused at scan time (logged)" || fail "no log line refusing $f1"
out=$(timeout 10 "$TOOL" get "$ADDR_a" fifoa 1 0 1 2>&1) || true
[ -n "$out" ] && ! grep -q '^OK' <<<"$out" && pass "GET of the FIFO shard fails at once: $out" \
    || fail "GET of the FIFO shard: '$out'"

# Swapped in while the server runs: the load fails at once.
f2=$(shard_file "$work/a" 2)
rm "$work/a/$f2" && mkfifo "$work/a/$f2"
out=$(timeout 10 "$TOOL" get "$ADDR_a" fifoa 2 0 1 2>&1) || true
[ -n "$out" ] && ! grep -q '^OK' <<<"$out" && pass "GET of a shard turned FIFO fails at once: $out" \
    || fail "GET of the shard turned FIFO: '$out'"
out=$(timeout 60 "$TOOL" fetch "$ADDR_a" fifob "$work/b" 4 2>&1) && pass "dataset fifob served: $out" \
    || fail "dataset fifob behind the FIFO: $out"
out=$(timeout 10 "$TOOL" get "$ADDR_a" fifoa 0 0 1 2>&1) && grep -q '^OK' <<<"$out" \
    && pass "the other shards of fifoa are served" || fail "fifoa shard 0: $out"
kill -0 "$PID_a" && pass "server alive" || fail "server died"
stop_within a 40
finish
