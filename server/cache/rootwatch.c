/* The --data-root watcher (rootwatch.h). Each root is watched for subdirectories created,
 * deleted or renamed in or out; each subdirectory for its manifest being written, renamed in or
 * deleted. Events are debounced: the rescan runs once 300 ms pass without a relevant event, or
 * 2 s after the first one while events keep coming (a writer filling many directories). Watches
 * on subdirectories are refreshed after each rescan; the kernel drops those of removed ones. */
#include "rootwatch.h"

#include "manifest.h"
#include "srvlog.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#define ROOT_MASK (IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_ONLYDIR)
#define SUB_MASK                                                                                   \
    (IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_ONLYDIR | IN_DONT_FOLLOW)
#define QUIET_NS (300ull * 1000000ull)
#define MAX_WAIT_NS (2000ull * 1000000ull)

struct dsc_rootwatch {
    dsc_catalog_t *cat;
    int fd;               /* inotify, or -1 */
    uint64_t interval_ns; /* periodic rescan (0: none) */
    int *root_wd;         /* watch descriptor of each root */
    uint32_t root_count;
    atomic_int stop;
    atomic_int hup; /* SIGHUP asked for a rescan (dsc_rootwatch_request) */
    pthread_t thread;
};

/* Watches every non-hidden subdirectory of every root for its manifest. */
static void watch_subdirs(dsc_rootwatch_t *w) {
    const char **roots;
    uint32_t n = dsc_catalog_roots(w->cat, &roots);
    for (uint32_t r = 0; r < n; r++) {
        /* open + fdopendir, not opendir: the descriptor's creation is then seen by every
         * checker that tracks descriptors (ThreadSanitizer reads a number last used by a socket
         * that libuv closed behind its back as that socket, and reports closedir as a race). */
        int dfd = open(roots[r], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
        if (d == NULL) {
            if (dfd >= 0)
                close(dfd);
            continue;
        }
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            char path[4096];
            if (e->d_name[0] == '.' ||
                snprintf(path, sizeof path, "%s/%s", roots[r], e->d_name) >= (int)sizeof path)
                continue;
            (void)inotify_add_watch(w->fd, path, SUB_MASK); /* not a directory: refused */
        }
        closedir(d);
    }
}

/* 1 when an event may change the catalog: a directory in a root, or a manifest in one. */
static int relevant(const dsc_rootwatch_t *w, const struct inotify_event *ev) {
    if (ev->mask & IN_Q_OVERFLOW)
        return 1;
    if (ev->len == 0 || ev->name[0] == '\0')
        return 0;
    for (uint32_t i = 0; i < w->root_count; i++)
        if (ev->wd == w->root_wd[i])
            return ev->name[0] != '.' || (ev->mask & IN_MOVED_FROM) != 0;
    return strcmp(ev->name, DSC_MANIFEST_FILE) == 0;
}

static void *watch_thread(void *arg) {
    dsc_rootwatch_t *w = arg;
    uint64_t first = 0, last = 0; /* ns of the first and latest relevant event not yet rescanned */
    uint64_t scanned = dsc_now_ns();
    _Alignas(struct inotify_event) char buf[16384];
    while (!atomic_load(&w->stop)) {
        struct pollfd p = {.fd = w->fd, .events = POLLIN};
        int pr = poll(&p, 1, first ? 100 : 200); /* fd -1: a plain wait */
        if (pr > 0 && w->fd >= 0) {
            ssize_t len;
            while ((len = read(w->fd, buf, sizeof buf)) > 0) {
                for (char *q = buf; q < buf + len;) {
                    const struct inotify_event *ev = (const struct inotify_event *)q;
                    if (relevant(w, ev)) {
                        last = dsc_now_ns();
                        if (first == 0)
                            first = last;
                    }
                    q += sizeof *ev + ev->len;
                }
            }
        }
        uint64_t now = dsc_now_ns();
        int periodic = w->interval_ns > 0 && now - scanned >= w->interval_ns;
        /* A load found a dataset replaced before this thread saw it (no inotify, a network
         * file system, or the quiet period still running): rescan now. */
        int asked = dsc_catalog_take_rescan_request(w->cat);
        int hup = atomic_exchange(&w->hup, 0);
        if (asked || hup || periodic ||
            (first && (now - last >= QUIET_NS || now - first >= MAX_WAIT_NS))) {
            first = last = 0;
            scanned = now;
            LOG_DEBUG("--data-root: rescanning (%s)", hup        ? "SIGHUP"
                                                      : asked    ? "a dataset replaced"
                                                      : periodic ? "periodic"
                                                                 : "changed");
            dsc_catalog_rescan_quiet(w->cat, !hup);
            if (w->fd >= 0)
                watch_subdirs(w);
        }
    }
    return NULL;
}

int dsc_rootwatch_start(dsc_catalog_t *cat, uint32_t interval_s, dsc_rootwatch_t **out) {
    *out = NULL;
    const char **roots;
    uint32_t n = dsc_catalog_roots(cat, &roots);
    if (n == 0)
        return 0;
    dsc_rootwatch_t *w = calloc(1, sizeof *w);
    int *wds = calloc(n, sizeof *wds);
    if (w == NULL || wds == NULL) {
        free(w);
        free(wds);
        return DSC_ENOMEM;
    }
    w->cat = cat;
    w->root_wd = wds;
    w->root_count = n;
    w->interval_ns = (uint64_t)interval_s * 1000000000ull;
    atomic_init(&w->stop, 0);
    atomic_init(&w->hup, 0);
    /* DSC_TEST_NO_INOTIFY=1, for tests: behave as where inotify is unavailable. */
    const char *no_inotify = getenv("DSC_TEST_NO_INOTIFY");
    if (no_inotify != NULL && strcmp(no_inotify, "1") == 0) {
        w->fd = -1;
        errno = ENOSYS;
    } else {
        w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    }
    if (w->fd < 0)
        LOG_WARN("--data-root: inotify unavailable (%s): datasets added or removed are picked "
                 "up by the rescan every %u s (--data-root-interval) or on SIGHUP",
                 strerror(errno), interval_s);
    for (uint32_t i = 0; w->fd >= 0 && i < n; i++) {
        wds[i] = inotify_add_watch(w->fd, roots[i], ROOT_MASK);
        if (wds[i] < 0)
            LOG_WARN("--data-root %s: cannot watch (%s): changes there are picked up by the "
                     "periodic rescan or on SIGHUP",
                     roots[i], strerror(errno));
    }
    if (w->fd >= 0)
        watch_subdirs(w);
    if (pthread_create(&w->thread, NULL, watch_thread, w) != 0) {
        if (w->fd >= 0)
            close(w->fd);
        free(wds);
        free(w);
        return DSC_ENOMEM;
    }
    /* A directory completed between the start-up scan and the watches: one more look. */
    dsc_catalog_rescan_quiet(cat, 1);
    *out = w;
    return 0;
}

void dsc_rootwatch_request(dsc_rootwatch_t *w) {
    atomic_store(&w->hup, 1);
}

void dsc_rootwatch_stop(dsc_rootwatch_t *w) {
    if (w == NULL)
        return;
    atomic_store(&w->stop, 1);
    dsc_catalog_cancel_rescans(w->cat); /* a rescan under way gives up at its next directory */
    pthread_join(w->thread, NULL);
    if (w->fd >= 0)
        close(w->fd);
    free(w->root_wd);
    free(w);
}
