# Shared by test_slowfs*.sh (sourced after server_lib.sh): skips where tests/slowfs is not built or
# FUSE is unavailable; mount_slowfs mounts $work/ds at $mnt through slowfs (by PID), umount_slowfs
# undoes it (also on exit).
SLOWFS=$DSC_BIN/slowfs
[ -x "$SLOWFS" ] || { echo "SKIP: slowfs not built (libfuse3 not found at configure time)"; exit 77; }
[ -c /dev/fuse ] || { echo "SKIP: /dev/fuse is missing"; exit 77; }
command -v fusermount3 >/dev/null || { echo "SKIP: fusermount3 is not installed (Debian fuse3)"; exit 77; }

mnt=$work/mnt
sfs_pid=
# mount_slowfs ARGS...: mounts $work/ds at $mnt through slowfs (foreground, by PID).
mount_slowfs() {
    mkdir -p "$mnt"
    "$SLOWFS" "$work/ds" "$mnt" -f "$@" >"$work/slowfs.log" 2>&1 &
    sfs_pid=$!
    for _ in $(seq 1 100); do
        [ -f "$mnt/manifest.json" ] && return 0
        kill -0 "$sfs_pid" 2>/dev/null || break
        sleep 0.05
    done
    return 1
}
# umount_slowfs: unmounts (slowfs then exits and prints its counters) and waits for it.
umount_slowfs() {
    [ -n "$sfs_pid" ] || return 0
    fusermount3 -u "$mnt" 2>/dev/null || fusermount3 -uz "$mnt" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$sfs_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$sfs_pid" 2>/dev/null || true
    wait "$sfs_pid" 2>/dev/null || true
    sfs_pid=
    return 0
}
cleanup_hooks+=(umount_slowfs)
