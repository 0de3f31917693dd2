/* Process, machine and statistics helpers shared by the benchmark programs: CPU seconds of a
 * process, spawning the servers, a description of the machine, medians and spreads of repeated
 * runs. Header-only (static inline, so a program pays for what it calls). */
#ifndef DSC_BENCH_COMMON_H
#define DSC_BENCH_COMMON_H

#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <unistd.h>

/* The most runs median() and spread() take at once (the programs' --reps limits are lower). */
#define BENCH_MAX_REPS 16

/* Online cores, at least 1. */
static inline int ncores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* User + system CPU seconds of process pid, from /proc/<pid>/stat; 0 when it cannot be read. */
static inline double proc_cpu_seconds(pid_t pid) {
    char path[64], buf[2048];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (p == NULL)
        return 0;
    unsigned long long utime = 0, stime = 0;
    /* Fields after ')': state(3) ... utime(14) stime(15). */
    int field = 2;
    char *save = NULL;
    for (char *tok = strtok_r(p + 1, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        field++;
        if (field == 14)
            utime = strtoull(tok, NULL, 10);
        if (field == 15) {
            stime = strtoull(tok, NULL, 10);
            break;
        }
    }
    return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

/* CPU seconds of this process, all threads; 0 when getrusage fails. */
static inline double self_cpu_seconds(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* The 1-minute load average, 0 when unknown. */
static inline double load_average(void) {
    double l = 0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = 0;
        fclose(f);
    }
    return l;
}

/* Writes "CPU model, cores, RAM, kernel" into out (cap bytes, always terminated). */
static inline void describe_machine(char *out, size_t cap) {
    char model[256] = "unknown CPU", line[512];
    unsigned long long mem_kb = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon) {
            snprintf(model, sizeof model, "%s", colon + 2);
            model[strcspn(model, "\n")] = '\0';
            break;
        }
    }
    if (f)
        fclose(f);
    f = fopen("/proc/meminfo", "r");
    if (f) {
        if (fscanf(f, "MemTotal: %llu kB", &mem_kb) != 1)
            mem_kb = 0;
        fclose(f);
    }
    struct utsname u;
    if (uname(&u) != 0)
        snprintf(u.release, sizeof u.release, "?");
    snprintf(out, cap, "%s, %d cores (nproc), %.1f GiB RAM, Linux %s", model, ncores(),
             (double)mem_kb / (1024.0 * 1024.0), u.release);
}

/* Starts argv[0] with argv, its stderr (and its stdout too when log_stdout) written to the file
 * log. Returns the child's pid, or -1 when fork fails; a failed exec exits the child with 127. */
static inline pid_t spawn(char *const argv[], const char *log, int log_stdout) {
    pid_t pid = fork();
    if (pid == 0) {
        FILE *f = freopen(log, "w", stderr);
        if (log_stdout)
            f = freopen(log, "a", stdout);
        (void)f;
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* Ignores SIGPIPE, writes the folder of this program (where dscached and dscache are found)
 * into bindir and makes a new empty folder /tmp/<name>.XXXXXX, its path in work. Returns 0, or
 * -1 when the program's path cannot be read or the folder cannot be made. */
static inline int bench_prepare(const char *name, char *bindir, size_t bindir_cap, char *work,
                                size_t work_cap) {
    signal(SIGPIPE, SIG_IGN);
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return -1;
    self[n] = '\0';
    snprintf(bindir, bindir_cap, "%s", dirname(self));
    snprintf(work, work_cap, "/tmp/%s.XXXXXX", name);
    return mkdtemp(work) == NULL ? -1 : 0;
}

/* How bench_start_dscached starts dscached. */
typedef struct bench_dscached {
    const char *prog;    /* this program's name, for the message when it fails */
    const char *path;    /* the dscached program */
    const char *data[2]; /* the two dataset folders it serves */
    const char *memory;  /* its --memory */
    const char *threads; /* its --threads */
    const char *work;    /* the folder its port file goes into */
    const char *log;     /* the file of its stderr (and of its stdout with log_stdout) */
    int log_stdout;
} bench_dscached_t;

/* Starts dscached on 127.0.0.1 with a free port, serving the two folders with every shard in
 * RAM (--warm), and waits up to 5 s for the port it took. Returns 0 with *pid and addr
 * ("127.0.0.1:PORT", addr_cap bytes), or -1 after printing "PROG: dscached did not start";
 * *pid is then the child that was started, or -1, for the caller to stop. */
static inline int bench_start_dscached(const bench_dscached_t *o, pid_t *pid, char *addr,
                                       size_t addr_cap) {
    char pfile[200];
    snprintf(pfile, sizeof pfile, "%s/port", o->work);
    char *args[] = {(char *)o->path,
                    "--data",
                    (char *)o->data[0],
                    "--data",
                    (char *)o->data[1],
                    "--listen",
                    "127.0.0.1:0",
                    "--http",
                    "off",
                    "--warm",
                    "--memory",
                    (char *)o->memory,
                    "--port-file",
                    pfile,
                    "--threads",
                    (char *)o->threads,
                    "--log-level",
                    "warn",
                    NULL};
    *pid = spawn(args, o->log, o->log_stdout);
    addr[0] = '\0';
    for (int i = 0; i < 250 && *pid > 0 && !addr[0]; i++) {
        FILE *f = fopen(pfile, "r");
        unsigned port;
        if (f && fscanf(f, "%u", &port) == 1)
            snprintf(addr, addr_cap, "127.0.0.1:%u", port);
        if (f)
            fclose(f);
        usleep(20000);
    }
    if (!addr[0]) {
        fprintf(stderr, "%s: dscached did not start (see %s)\n", o->prog, o->log);
        return -1;
    }
    return 0;
}

static inline int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0..n), 1 <= n; only the first BENCH_MAX_REPS values count. */
static inline double median(const double *v, int n) {
    double s[BENCH_MAX_REPS];
    if (n > BENCH_MAX_REPS)
        n = BENCH_MAX_REPS;
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/* (max - min) / median in percent: how much the repeated runs disagreed. 1 <= n. */
static inline double spread(const double *v, int n) {
    double lo = v[0], hi = v[0];
    for (int i = 1; i < n; i++) {
        lo = v[i] < lo ? v[i] : lo;
        hi = v[i] > hi ? v[i] : hi;
    }
    double m = median(v, n);
    return m > 0 ? 100.0 * (hi - lo) / m : 0;
}

#endif
