#!/usr/bin/env bash
# The codec floor does no I/O: proto/*.c (the system glue is in sys/) calls no file,
# socket, mapping or process function and includes no header that exists for them, so that every
# decoder can be fuzzed and reused anywhere (STYLE.md "Our way" 1). Fails naming each call.
# usage: proto_io_check.sh [PROTO_DIR]   (default: proto/ of the tree this script is in)
set -euo pipefail
dir=$(cd "${1:-$(dirname "$0")/../proto}" && pwd)
ls "$dir"/*.c >/dev/null 2>&1 || { echo "proto_io_check: no C sources in $dir" >&2; exit 2; }
calls='open|openat|creat|close|read|pread|readv|write|pwrite|writev|lseek|fopen|fdopen|freopen|'
calls+='fread|fwrite|fgets|fputs|fprintf|fscanf|fclose|fflush|fseek|ftell|fileno|fsync|fdatasync|'
calls+='sync_file_range|rename|renameat|renameat2|link|unlink|unlinkat|remove|mkdir|rmdir|'
calls+='mkstemp|tmpfile|stat|fstat|lstat|fstatat|statx|access|truncate|ftruncate|'
calls+='posix_fadvise|fallocate|mmap|munmap|mremap|msync|madvise|opendir|fdopendir|readdir|'
calls+='closedir|socket|connect|bind|listen|accept|accept4|send|sendto|sendmsg|recv|recvfrom|'
calls+='recvmsg|getaddrinfo|poll|epoll_wait|select|ioctl|fcntl|dlopen|getrandom|system|popen|'
calls+='fork|execv|execve|execvp|getenv|setenv|perror|printf|puts|putchar'
headers='fcntl\.h|unistd\.h|sys/mman\.h|sys/stat\.h|sys/socket\.h|dirent\.h|netdb\.h|dlfcn\.h|'
headers+='sys/random\.h|poll\.h|sys/ioctl\.h'
bad=0
for f in "$dir"/*.c; do
    # Code only: comments and string literals are blanked first (a line number is kept per line).
    hits=$(sed -E 's://.*$::; s:"([^"\\]|\\.)*":"":g' "$f" |
        awk 'BEGIN { c = 0 } {
                 line = $0; out = ""
                 while (length(line) > 0) {
                     if (c) { i = index(line, "*/"); if (i == 0) { line = ""; break }
                              line = substr(line, i + 2); c = 0 }
                     else { i = index(line, "/*"); if (i == 0) { out = out line; break }
                            out = out substr(line, 1, i - 1); line = substr(line, i + 2); c = 1 }
                 }
                 print NR ":" out }' |
        grep -E "(^|[^A-Za-z0-9_.>])($calls)[[:space:]]*\(|#[[:space:]]*include[[:space:]]*<($headers)>" ||
        true)
    if [ -n "$hits" ]; then
        while IFS= read -r h; do
            echo "FAIL: $(basename "$f"):${h%%:*}: I/O in the codec: $(echo "${h#*:}" | sed -E 's/^[[:space:]]+//')"
            bad=$((bad + 1))
        done <<<"$hits"
    fi
done
if [ "$bad" -gt 0 ]; then
    echo "(file, socket and process calls belong in sys/, which the codec never includes)"
    exit 1
fi
echo "ok: $(ls "$dir"/*.c | wc -l) codec sources without I/O ($dir)"
