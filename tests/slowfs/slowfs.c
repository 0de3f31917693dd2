/* slowfs: a read-only FUSE passthrough that behaves like slow backing storage. Every read
 * request waits a fixed latency (concurrently with the others: a store with that latency and
 * unbounded parallelism), and all reads together are paced to a bandwidth cap (one shared
 * pacer: a read of n bytes ends no sooner than n / bandwidth after the previous one's end).
 * Files are opened with direct I/O, so each read(2)/pread(2) of up to 1 MiB reaches slowfs as
 * one request (larger ones as several, in parallel) and the page cache never hides the delay.
 * A test tool (tests/, never installed): see --help and docs/testing.md. */
#define FUSE_USE_VERSION 35
#include <fuse3/fuse.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

static char source[PATH_MAX];
static double latency_s = 0;     /* per read request */
static double bandwidth_bps = 0; /* bytes per second; 0: unlimited */
static pthread_mutex_t pace_lock = PTHREAD_MUTEX_INITIALIZER;
static double pace_next = 0; /* when the pacer is next free (CLOCK_MONOTONIC seconds) */
static atomic_uint_fast64_t reads_total, bytes_total;
static atomic_int in_flight, in_flight_max;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_until(double t) {
    struct timespec ts = {.tv_sec = (time_t)t, .tv_nsec = (long)((t - (double)(time_t)t) * 1e9)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

static void real_path(char *out, size_t n, const char *path) {
    snprintf(out, n, "%s%s", source, path);
}

static void *sfs_init(struct fuse_conn_info *conn, struct fuse_config *cfg) {
    cfg->direct_io = 1;
    cfg->kernel_cache = 0;
    cfg->attr_timeout = 60;
    cfg->entry_timeout = 60;
    /* Up to 1 MiB per request (libfuse derives max_pages from max_write), and enough
     * background requests that the kernel never queues what slowfs could run at once. */
    conn->max_write = 1u << 20;
    conn->max_readahead = 1u << 20;
    conn->max_background = 512;
    conn->congestion_threshold = 384;
    return NULL;
}

static int sfs_getattr(const char *path, struct stat *st, struct fuse_file_info *fi) {
    (void)fi;
    char p[PATH_MAX];
    real_path(p, sizeof p, path);
    return lstat(p, st) == 0 ? 0 : -errno;
}

static int sfs_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
                       struct fuse_file_info *fi, enum fuse_readdir_flags flags) {
    (void)off;
    (void)fi;
    (void)flags;
    char p[PATH_MAX];
    real_path(p, sizeof p, path);
    DIR *d = opendir(p);
    if (d == NULL)
        return -errno;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        struct stat st = {.st_ino = e->d_ino, .st_mode = (mode_t)e->d_type << 12};
        if (fill(buf, e->d_name, &st, 0, 0))
            break;
    }
    closedir(d);
    return 0;
}

static int sfs_open(const char *path, struct fuse_file_info *fi) {
    if ((fi->flags & O_ACCMODE) != O_RDONLY)
        return -EROFS;
    char p[PATH_MAX];
    real_path(p, sizeof p, path);
    int fd = open(p, O_RDONLY);
    if (fd < 0)
        return -errno;
    fi->fh = (uint64_t)fd;
    fi->direct_io = 1;
    return 0;
}

static int sfs_read(const char *path, char *buf, size_t size, off_t off,
                    struct fuse_file_info *fi) {
    (void)path;
    double t0 = now_s();
    int cur = atomic_fetch_add(&in_flight, 1) + 1;
    int prev = atomic_load(&in_flight_max);
    while (cur > prev && !atomic_compare_exchange_weak(&in_flight_max, &prev, cur)) {
    }
    ssize_t n = pread((int)fi->fh, buf, size, off);
    int rc = n < 0 ? -errno : (int)n;
    double done = t0 + latency_s;
    if (n > 0 && bandwidth_bps > 0) {
        pthread_mutex_lock(&pace_lock);
        double start = pace_next > t0 ? pace_next : t0;
        pace_next = start + (double)n / bandwidth_bps;
        double paced = pace_next;
        pthread_mutex_unlock(&pace_lock);
        if (paced > done)
            done = paced;
    }
    sleep_until(done);
    atomic_fetch_sub(&in_flight, 1);
    if (n > 0) {
        atomic_fetch_add(&reads_total, 1);
        atomic_fetch_add(&bytes_total, (uint64_t)n);
    }
    return rc;
}

static int sfs_release(const char *path, struct fuse_file_info *fi) {
    (void)path;
    close((int)fi->fh);
    return 0;
}

static int sfs_statfs(const char *path, struct statvfs *st) {
    char p[PATH_MAX];
    real_path(p, sizeof p, path);
    return statvfs(p, st) == 0 ? 0 : -errno;
}

static void sfs_destroy(void *priv) {
    (void)priv;
    fprintf(stderr, "slowfs: %llu reads, %llu bytes, at most %d in flight\n",
            (unsigned long long)atomic_load(&reads_total),
            (unsigned long long)atomic_load(&bytes_total), atomic_load(&in_flight_max));
}

static const struct fuse_operations ops = {
    .init = sfs_init,
    .getattr = sfs_getattr,
    .readdir = sfs_readdir,
    .open = sfs_open,
    .read = sfs_read,
    .release = sfs_release,
    .statfs = sfs_statfs,
    .destroy = sfs_destroy,
};

static void usage(FILE *f) {
    fprintf(f, "usage: slowfs SOURCE MOUNTPOINT [--latency-ms MS] [--bandwidth BYTES_PER_S]\n"
               "              [--threads N] [-f]\n\n"
               "Mounts SOURCE read-only at MOUNTPOINT through FUSE, as a slow store: every read\n"
               "request waits MS milliseconds (concurrently with the others) and all reads\n"
               "together are paced to BYTES_PER_S (suffixes K M G, powers of 1000; default:\n"
               "unlimited). Files are opened with direct I/O: a read of up to 1 MiB is one\n"
               "request. On unmount (fusermount3 -u MOUNTPOINT) it prints the reads, bytes and\n"
               "the most requests in flight at once.\n\n"
               "  --latency-ms MS   fixed latency per read request (default 0)\n"
               "  --bandwidth B     bandwidth cap over all reads, bytes/s (default: none)\n"
               "  --threads N       most requests served at once (default 256)\n"
               "  -f                stay in the foreground (default: daemonize)\n"
               "  --help            this text\n");
}

static int parse_rate(const char *s, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0)
        return -1;
    if (*end == 'K' || *end == 'k')
        v *= 1e3, end++;
    else if (*end == 'M' || *end == 'm')
        v *= 1e6, end++;
    else if (*end == 'G' || *end == 'g')
        v *= 1e9, end++;
    if (*end != '\0')
        return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv) {
    const char *src = NULL, *mnt = NULL;
    int foreground = 0;
    unsigned threads = 256;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--latency-ms") == 0 && v) {
            char *end;
            double ms = strtod(v, &end);
            if (end == v || *end != '\0' || ms < 0) {
                fprintf(stderr, "slowfs: --latency-ms: not a number of milliseconds: %s\n", v);
                return 2;
            }
            latency_s = ms / 1e3;
            i++;
        } else if (strcmp(a, "--bandwidth") == 0 && v) {
            if (parse_rate(v, &bandwidth_bps) < 0) {
                fprintf(stderr, "slowfs: --bandwidth: not a rate in bytes/s: %s\n", v);
                return 2;
            }
            i++;
        } else if (strcmp(a, "--threads") == 0 && v) {
            threads = (unsigned)strtoul(v, NULL, 10);
            if (threads < 1 || threads > 4096) {
                fprintf(stderr, "slowfs: --threads: 1..4096: %s\n", v);
                return 2;
            }
            i++;
        } else if (strcmp(a, "-f") == 0) {
            foreground = 1;
        } else if (a[0] != '-' && src == NULL) {
            src = a;
        } else if (a[0] != '-' && mnt == NULL) {
            mnt = a;
        } else {
            fprintf(stderr, "slowfs: unknown argument: %s (see --help)\n", a);
            return 2;
        }
    }
    if (src == NULL || mnt == NULL) {
        usage(stderr);
        return 2;
    }
    if (realpath(src, source) == NULL) {
        fprintf(stderr, "slowfs: %s: %s\n", src, strerror(errno));
        return 1;
    }
    char thr[64];
    snprintf(thr, sizeof thr, "max_threads=%u", threads);
    char *fargv[] = {
        argv[0], (char *)mnt, "-o", "ro,default_permissions", "-o", thr, foreground ? "-f" : NULL,
        NULL};
    int fargc = foreground ? 7 : 6;
    return fuse_main(fargc, fargv, &ops, NULL);
}
