/* The dataset manifest's file I/O (manifest_io.h): DIR/manifest.json loaded without blocking on a
 * FIFO or device, and saved atomically; the text is parsed and written by the codec
 * (proto/manifest.c). */
#include "manifest_io.h"
#include "protocol.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int dsc_manifest_load(const char *dir, dsc_manifest_t **out) {
    return dsc_manifest_load_file(dir, 0, NULL, NULL, out);
}

int dsc_manifest_load_file(const char *dir, unsigned flags, dsc_manifest_file_id_t *id,
                           const char **why, dsc_manifest_t **out) {
    const char *unused;
    if (why == NULL)
        why = &unused;
    *why = "cannot open";
    char path[4096];
    if (dir == NULL || out == NULL ||
        snprintf(path, sizeof path, "%s/%s", dir, DSC_MANIFEST_FILE) >= (int)sizeof path)
        return DSC_EINVAL;
    /* O_NONBLOCK: opening a FIFO (or a device) put in its place must not wait for a writer. */
    int oflags = O_RDONLY | O_CLOEXEC | O_NONBLOCK;
    if (flags & DSC_MANIFEST_NOFOLLOW)
        oflags |= O_NOFOLLOW;
    int fd = open(path, oflags);
    if (fd < 0) {
        int err = errno;
        if (err == ELOOP && (flags & DSC_MANIFEST_NOFOLLOW)) {
            *why = "a symbolic link (not followed)";
            return DSC_EIO;
        }
        return err == ENOENT ? DSC_ENOENT : err == EACCES ? DSC_EACCES : -err;
    }
    char *text = MAP_FAILED;
    size_t size = 0;
    int rc;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        *why = "cannot stat";
        rc = DSC_EIO;
        goto cleanup;
    }
    if (!S_ISREG(st.st_mode)) {
        *why = "not a regular file";
        rc = DSC_EIO;
        goto cleanup;
    }
    if (id != NULL) {
        id->dev = (uint64_t)st.st_dev;
        id->ino = (uint64_t)st.st_ino;
        id->size = (uint64_t)st.st_size;
        id->mtime_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
    }
    if ((uint64_t)st.st_size > DSC_MANIFEST_MAX_BYTES) {
        *why = "larger than 64 MiB";
        rc = DSC_ETOOLARGE;
        goto cleanup;
    }
    /* An anonymous mapping, not malloc: its pages go back to the system when unmapped, however
     * the allocator would have kept a large freed block. Not the file mapped: a file truncated
     * under a mapping faults (SIGBUS). */
    size = (size_t)st.st_size;
    text = mmap(NULL, size ? size : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (text == MAP_FAILED) {
        *why = "out of memory";
        rc = DSC_ENOMEM;
        goto cleanup;
    }
    size_t got = 0;
    while (got < size) {
        ssize_t n = read(fd, text + got, size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            *why = "read failed or the file shrank";
            rc = DSC_EIO; /* an error, or the file shrank under us */
            goto cleanup;
        }
        got += (size_t)n;
    }
    *why = "invalid";
    rc = dsc_manifest_parse(text, size, out);
cleanup:
    if (text != MAP_FAILED)
        munmap(text, size ? size : 1);
    close(fd);
    return rc;
}

static int write_all(int fd, const char *data, size_t len) {
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

int dsc_manifest_save(const char *dir, const dsc_manifest_t *manifest) {
    if (dir == NULL || manifest == NULL)
        return DSC_EINVAL;
    char path[4096], tmp[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, DSC_MANIFEST_FILE) >= (int)sizeof path ||
        snprintf(tmp, sizeof tmp, "%s/.%s.%ld.tmp", dir, DSC_MANIFEST_FILE, (long)getpid()) >=
            (int)sizeof tmp)
        return DSC_EINVAL;
    int fd = -1, rc;
    dsc_manifest_t *check = NULL;
    char *text = dsc_manifest_to_json(manifest);
    if (text == NULL)
        return manifest->meta_json != NULL ? DSC_EINVAL : DSC_ENOMEM;
    size_t len = strlen(text);
    /* Never write a manifest that the readers would reject. */
    rc = dsc_manifest_parse(text, len, &check);
    if (rc < 0) {
        rc = rc == DSC_ENOMEM ? DSC_ENOMEM : DSC_EINVAL;
        goto cleanup;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = -errno;
        goto cleanup;
    }
    rc = write_all(fd, text, len);
    if (rc == 0)
        rc = write_all(fd, "\n", 1);
    if (rc == 0 && fsync(fd) < 0)
        rc = -errno;
    if (close(fd) < 0 && rc == 0)
        rc = -errno;
    fd = -1;
    if (rc == 0 && rename(tmp, path) < 0)
        rc = -errno;
    if (rc < 0)
        unlink(tmp);
cleanup:
    if (fd >= 0)
        close(fd);
    dsc_manifest_free(check);
    free(text);
    return rc;
}
