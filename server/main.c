/* dscached: the cache server. Options (command line over an optional JSON config file), start-up
 * (store, datasets, listeners, HTTP, cluster membership, warm-up), signals (SIGTERM/SIGINT drain
 * and exit 0, SIGHUP rescans the dataset directories and re-reads the member list and the
 * credential file). */
#include "catalog.h"
#include "cluster.h"
#include "credstore.h"
#include "fairq.h"
#include "http.h"
#include "jobs.h"
#include "peerwarm.h"
#include "rdma.h"
#include "rootwatch.h"
#include "server.h"
#include "srvlog.h"
#include "store.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#define MAX_DIRS 256

typedef struct options {
    const char *dirs[MAX_DIRS];
    int dir_count;
    const char *roots[MAX_DIRS]; /* --data-root */
    int root_count;
    uint32_t root_interval;     /* --data-root-interval (seconds; 0: none) */
    const char *pins[MAX_DIRS]; /* --pin DATASET */
    int pin_count;
    const char *limits[MAX_DIRS]; /* --limit DATASET=BYTES */
    int limit_count;
    const char *priorities[MAX_DIRS]; /* --priority DATASET=N */
    int priority_count;
    char listen[256];
    char http[256];
    uint64_t memory;
    uint32_t threads;
    uint32_t io_threads;
    uint32_t backing_reads;
    uint64_t backing_rate;
    uint64_t staging_memory;                    /* --staging-memory (UINT64_MAX: the default) */
    uint32_t staging_ttl;                       /* --staging-ttl, seconds */
    uint64_t send_rate;                         /* --send-rate (0: none) */
    int fair_off;                               /* --fair off */
    dsc_job_weight_t weights[DSC_FQ_STATS_MAX]; /* --job-weight NAME=W */
    uint32_t weight_count;
    int warm;
    const char *port_file;
    const char *http_port_file;
    dsc_policy_t policy;
    int log_level;
    uint64_t max_out;
    uint64_t max_out_total;
    uint32_t header_timeout, idle_timeout, max_conns_per_peer;
    uint32_t http_max_conns, http_timeout, http_header_timeout, http_max_conns_per_peer;
    uint32_t drain_seconds;
    const char *members;      /* member spec: "h:p,...", "file:PATH", "dns:NAME:PORT" */
    const char *members_file; /* --members-file PATH */
    const char *advertise;
    uint32_t replicas;
    uint32_t members_refresh;
    uint32_t ready_timeout;    /* seconds; 0: no time-out */
    const char *auth_file;     /* --auth-file: credentials (docs/security.md) */
    int allow_anonymous_admin; /* without --auth-file: serve WARM/EVICT anyway */
    dsc_rdma_mode_t rdma;
    uint32_t rdma_lease_ttl_ms;
    int refuse_insecure_auth_file; /* --insecure-auth-file refuse */
    int metrics_hide_names;        /* --metrics-names hide */
    uint32_t jobs_per_credential;  /* --jobs-per-credential (0: 16) */
    uint64_t peer_rate;            /* --peer-rate (0: peer warm-up off) */
    const char *peer_credential;   /* --peer-credential NAME */
} options_t;

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: dscached --data DIR [--data DIR ...] [--data-root DIR ...] [options]\n"
        "\n"
        "Serves datasets (each DIR holds manifest.json and its shard files, as dscache ingest\n"
        "writes them; the dataset name comes from the manifest) from RAM over TCP.\n"
        "\n"
        "  --data DIR            a dataset directory (repeat for several datasets)\n"
        "  --pin DATASET         keep DATASET resident (repeatable; also later, live:\n"
        "                        dscache pin/unpin): its shards are never evicted to make\n"
        "                        room and it is loaded at start, evicting unpinned shards\n"
        "  --limit DATASET=BYTES cap DATASET's resident bytes (repeatable; live: dscache\n"
        "                        limit); misses beyond it are read through\n"
        "  --priority DATASET=N  DATASET's priority for memory, 0..1000 (default 0;\n"
        "                        repeatable; live: dscache priority): on a full store its\n"
        "                        loads evict the shards of lower-priority datasets first\n"
        "                        (pinned ones never)\n"
        "  --data-root DIR       every subdirectory of DIR holding a complete manifest.json\n"
        "                        is a dataset (repeatable); datasets written there or removed\n"
        "                        are picked up within seconds (inotify; SIGHUP as fallback);\n"
        "                        names starting with '.' are skipped (a writer's temporary\n"
        "                        directory); --data is then optional\n"
        "  --data-root-interval S  also rescan the roots every S seconds (default 10; 0:\n"
        "                        never): inotify does not see changes made on another\n"
        "                        machine of a network file system\n"
        "  --listen HOST:PORT    data port (default 127.0.0.1:7070; port 0 picks a free one)\n"
        "  --http HOST:PORT      /metrics, /healthz, /readyz (default 127.0.0.1:7071;\n"
        "                        port 0 picks a free one; \"off\" or \"0\" disables HTTP)\n"
        "  --memory BYTES        store capacity, suffixes K M G T (default 1G)\n"
        "  --threads N           event loops, each with its own SO_REUSEPORT socket\n"
        "                        (default: the number of cores)\n"
        "  --io-threads N        threads loading whole shard files (default 4)\n"
        "  --backing-reads N     read-throughs in flight to the backing storage at once\n"
        "                        (default 32: enough for bandwidth x latency = 32 chunks,\n"
        "                        e.g. 640 MB/s at 50 ms per 1 MiB read); adjacent chunk\n"
        "                        ranges of one shard queued together are read as one\n"
        "  --backing-rate BYTES  cap on the bytes/s this server reads from the backing\n"
        "                        storage (read-throughs and loads), suffixes K M G\n"
        "                        (default: none)\n"
        "  --staging-memory BYTES  read-ahead staging area, apart from --memory: chunk\n"
        "                        ranges loaders announce (HINT) are read from the backing\n"
        "                        storage ahead of their GETs into it, and kept until every\n"
        "                        loader that announced them was served (default 256M;\n"
        "                        0: no read-ahead, HINT answered UNSUPPORTED, and GETs of\n"
        "                        chunks already being read no longer wait for that read)\n"
        "  --staging-ttl S       a staged range not asked for within S seconds is dropped\n"
        "                        (default 30)\n"
        "  --send-rate BYTES     cap on the bytes/s this server sends over TCP, all\n"
        "                        connections together, suffixes K M G (default: none).\n"
        "                        Set it a little under the link's rate (say 95%%) so that\n"
        "                        under saturation the queue forms here, where answers\n"
        "                        are scheduled between jobs, not in the NIC\n"
        "  --fair on|off         with --send-rate: answers waiting for it are sent by\n"
        "                        deficit round-robin between jobs (on, default; a job is\n"
        "                        the name its loaders REPORT, else each connection), or\n"
        "                        in arrival order (off)\n"
        "  --job-weight [CRED:]NAME=W  job NAME gets W shares (1..1000) of the send rate\n"
        "                        when it is saturated, others 1 (repeatable). A job is\n"
        "                        its credential and its name: with --auth-file, CRED\n"
        "                        (the credential whose job it is) is required\n"
        "  --warm                load every shard at start-up; /readyz answers 200 once\n"
        "                        the shards this server owns are resident (see below)\n"
        "  --ready-timeout N     with --warm: after N seconds /readyz answers 200 even if\n"
        "                        owned shards are still missing, saying so (default 0:\n"
        "                        never)\n"
        "  --policy minio|lru    when the store is full: minio (default) keeps the resident\n"
        "                        set and reads other shards through a temporary buffer;\n"
        "                        lru evicts the least recently used unreferenced shards\n"
        "  --max-out BYTES       queued response bytes per connection before its requests\n"
        "                        stop being read (default 64M)\n"
        "  --max-out-total BYTES the same bound over all connections (default 1G)\n"
        "  --header-timeout S    close a connection whose frame is not whole S seconds\n"
        "                        after its first byte (default 10)\n"
        "  --idle-timeout S      close a connection silent for S seconds (default 300;\n"
        "                        0: never)\n"
        "  --max-conns-per-peer N  data connections per client address (default 1024;\n"
        "                        0: no limit)\n"
        "  --http-max-conns N    open HTTP connections (default 1024)\n"
        "  --http-timeout S      close an idle HTTP connection after S seconds (default 5)\n"
        "  --http-header-timeout S  close an HTTP connection whose request head is not\n"
        "                        whole S seconds after it was accepted, whatever it\n"
        "                        trickles (default 10)\n"
        "  --http-max-conns-per-peer N  HTTP connections per client address; a newer one\n"
        "                        closes the address's oldest (default 64; 0: no limit)\n"
        "  --drain-seconds N     on SIGTERM, longest wait for in-flight answers (default 30)\n"
        "  --port-file FILE      write the bound data port to FILE (temp file + rename)\n"
        "  --http-port-file FILE write the bound HTTP port to FILE\n"
        "  --log-level LEVEL     error, warn, info (default) or debug\n"
        "  --rdma off|auto|required\n"
        "                        RDMA READ transport (docs/rdma.md): auto (default) offers it\n"
        "                        when an RDMA device is usable, else TCP only (one INFO line);\n"
        "                        required makes an unusable device a start-up error. With RDMA\n"
        "                        the whole --memory arena is registered (pinned) at start-up\n"
        "  --rdma-lease-ttl-ms N an RDMA lease not released by then fences its connection\n"
        "                        (default 10000)\n"
        "\n"
        "Cluster (without --members: a single node that owns every shard):\n"
        "  --members LIST        the cluster's servers: HOST:PORT,HOST:PORT,... or\n"
        "                        file:PATH or dns:NAME:PORT (every address NAME resolves to)\n"
        "  --members-file FILE   same as --members file:FILE; re-read when it changes\n"
        "  --members-refresh N   seconds between DNS re-resolutions (default 10)\n"
        "  --replicas R          servers holding each shard, 1..8 (default 2)\n"
        "  --advertise HOST:PORT this server's address as it appears in the member list\n"
        "                        (default: the --listen host with the bound port)\n"
        "                        --warm then loads only the shards this server owns\n"
        "                        (primary or replica); other shards are still served\n"
        "  --peer-rate BYTES     peer warm-up: a shard this server loads is first read from\n"
        "                        another owner holding it in RAM (over the data port), at\n"
        "                        most BYTES/s over all peers (default 512M; 0 or off: read\n"
        "                        only the backing storage); what no live owner holds is read\n"
        "                        from the backing storage\n"
        "  --peer-credential NAME  with --auth-file: the credential (a line of that file,\n"
        "                        the same on every member) presented to peers for peer\n"
        "                        warm-up; without it peer warm-up is off (a WARN says so)\n"
        "Readiness (--warm): /readyz answers 503 with the reason until the warm-up is\n"
        "done and, in a cluster, the member list is known, this server is in it and every\n"
        "shard it owns is resident (or the store is full); then 200, and it stays 200\n"
        "(later changes warm in the background). Without --warm: 200 at once.\n"
        "\n"
        "Security (docs/security.md):\n"
        "  --auth-file FILE      credentials, one per line: NAME read|admin SECRET [DATASET..];\n"
        "                        clients must authenticate (HELLO + AUTH, HMAC-SHA-256);\n"
        "                        re-read on SIGHUP (a bad file keeps the current set)\n"
        "  --allow-anonymous-admin  without --auth-file, serve WARM/EVICT to anyone\n"
        "                        (default: refused with UNAUTHORIZED)\n"
        "  --insecure-auth-file warn|refuse\n"
        "                        an --auth-file readable or writable by group or others, or\n"
        "                        owned by another user: warn (default: one WARN line at start\n"
        "                        and at each SIGHUP) or refuse it (start-up error; on SIGHUP\n"
        "                        the current set is kept)\n"
        "  --metrics-names show|hide\n"
        "                        /metrics on the --http port is unauthenticated: show\n"
        "                        (default) labels series with dataset and job names; hide\n"
        "                        leaves every per-dataset and per-job series out (/healthz\n"
        "                        and /readyz are unaffected)\n"
        "  --jobs-per-credential N  REPORTed jobs one credential may hold in the 64-entry job\n"
        "                        table (default 16); a REPORT for a dataset the credential\n"
        "                        cannot read is refused (NOT_FOUND) and counted\n"
        "\n"
        "  --config FILE         JSON object with the same keys (\"data\": [..],\n"
        "                        \"data_root\": [..], \"data_root_interval\",\n"
        "                        \"pin\": [..], \"priority\": [\"DATASET=N\", ..], \"limit\":\n"
        "                        [\"DATASET=BYTES\", ..], \"listen\",\n"
        "                        \"http\", \"memory\", \"threads\", \"io_threads\",\n"
        "                        \"backing_reads\", \"backing_rate\", \"staging_memory\",\n"
        "                        \"staging_ttl\", \"send_rate\", \"fair\",\n"
        "                        \"job_weight\": [\"[CRED:]NAME=W\", ..], \"warm\",\n"
        "                        \"policy\", \"max_out\", \"max_out_total\",\n"
        "                        \"header_timeout\", \"idle_timeout\", \"max_conns_per_peer\",\n"
        "                        \"http_max_conns\", \"http_timeout\",\n"
        "                        \"http_header_timeout\", \"http_max_conns_per_peer\",\n"
        "                        \"log_level\", \"drain_seconds\",\n"
        "                        \"members\", \"members_file\", \"members_refresh\",\n"
        "                        \"replicas\", \"advertise\", \"auth_file\",\n"
        "                        \"allow_anonymous_admin\", \"insecure_auth_file\",\n"
        "                        \"metrics_names\", \"jobs_per_credential\",\n"
        "                        \"peer_rate\", \"peer_credential\");\n"
        "                        command-line options override it\n"
        "  --version             print the version and exit\n"
        "  --help                this text\n"
        "\n"
        "Options take their value as the next argument or after '=' (--replicas=3).\n"
        "Signals: SIGTERM/SIGINT stop accepting, finish in-flight answers and exit 0;\n"
        "SIGHUP rereads every dataset directory's manifest (and lists the --data-root ones),\n"
        "the member list and the "
        "--auth-file.\n");
}

static int bad(const char *what, const char *value) {
    fprintf(stderr, "dscached: invalid %s: %s (see --help)\n", what, value ? value : "(none)");
    return DSC_EINVAL;
}

static int parse_u32(const char *text, uint32_t min, uint32_t max, uint32_t *out) {
    if (text == NULL || *text < '0' || *text > '9')
        return DSC_EINVAL;
    char *end;
    errno = 0;
    unsigned long v = strtoul(text, &end, 10);
    if (*end != '\0' || errno != 0 || v < min || v > max)
        return DSC_EINVAL;
    *out = (uint32_t)v;
    return 0;
}

/* Every connection, HTTP socket and shard read takes a descriptor: run with as many as allowed
 * (the soft limit raised to the hard one), and say how many, since running out is what an
 * operator sees first under a connection flood. */
static void raise_nofile_limit(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rlim_t was = rl.rlim_cur;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            rl.rlim_cur = was;
    }
    if (rl.rlim_cur == RLIM_INFINITY)
        LOG_INFO("descriptor limit (RLIMIT_NOFILE): unlimited");
    else
        LOG_INFO("descriptor limit (RLIMIT_NOFILE): %llu (was %llu, hard limit %llu)",
                 (unsigned long long)rl.rlim_cur, (unsigned long long)was,
                 (unsigned long long)rl.rlim_max);
}

/* Applies one option (from the command line or the config file). */
static int apply(options_t *o, const char *key, const char *value) {
    if (strcmp(key, "data") == 0) {
        if (o->dir_count == MAX_DIRS)
            return bad("--data (too many directories)", value);
        o->dirs[o->dir_count++] = value;
    } else if (strcmp(key, "pin") == 0) {
        if (o->pin_count == MAX_DIRS || value[0] == '\0' || strlen(value) >= DSC_MAX_NAME)
            return bad("--pin (a dataset name)", value);
        o->pins[o->pin_count++] = value;
    } else if (strcmp(key, "limit") == 0) {
        const char *eq = strchr(value, '=');
        uint64_t bytes;
        if (o->limit_count == MAX_DIRS || eq == NULL || eq == value || eq - value >= DSC_MAX_NAME ||
            dsc_parse_size(eq + 1, &bytes) < 0)
            return bad("--limit (DATASET=BYTES)", value);
        o->limits[o->limit_count++] = value;
    } else if (strcmp(key, "priority") == 0) {
        const char *eq = strchr(value, '=');
        uint32_t prio;
        if (o->priority_count == MAX_DIRS || eq == NULL || eq == value ||
            eq - value >= DSC_MAX_NAME || parse_u32(eq + 1, 0, DSC_MAX_PRIORITY, &prio) < 0)
            return bad("--priority (DATASET=N, N 0..1000)", value);
        o->priorities[o->priority_count++] = value;
    } else if (strcmp(key, "data_root_interval") == 0) {
        if (parse_u32(value, 0, 86400, &o->root_interval) < 0)
            return bad("--data-root-interval (seconds)", value);
    } else if (strcmp(key, "data_root") == 0) {
        if (o->root_count == MAX_DIRS || value[0] == '\0')
            return bad("--data-root", value);
        o->roots[o->root_count++] = value;
    } else if (strcmp(key, "listen") == 0) {
        snprintf(o->listen, sizeof o->listen, "%s", value);
    } else if (strcmp(key, "http") == 0) {
        snprintf(o->http, sizeof o->http, "%s", value);
    } else if (strcmp(key, "memory") == 0) {
        if (dsc_parse_size(value, &o->memory) < 0 || o->memory == 0)
            return bad("--memory", value);
    } else if (strcmp(key, "max_out") == 0) {
        if (dsc_parse_size(value, &o->max_out) < 0 || o->max_out == 0)
            return bad("--max-out", value);
    } else if (strcmp(key, "max_out_total") == 0) {
        if (dsc_parse_size(value, &o->max_out_total) < 0 || o->max_out_total == 0)
            return bad("--max-out-total", value);
    } else if (strcmp(key, "header_timeout") == 0) {
        if (parse_u32(value, 1, 86400, &o->header_timeout) < 0)
            return bad("--header-timeout", value);
    } else if (strcmp(key, "idle_timeout") == 0) {
        if (parse_u32(value, 0, 86400 * 7, &o->idle_timeout) < 0)
            return bad("--idle-timeout", value);
    } else if (strcmp(key, "max_conns_per_peer") == 0) {
        if (parse_u32(value, 0, 1u << 24, &o->max_conns_per_peer) < 0)
            return bad("--max-conns-per-peer", value);
    } else if (strcmp(key, "http_max_conns") == 0) {
        if (parse_u32(value, 1, 1u << 20, &o->http_max_conns) < 0)
            return bad("--http-max-conns", value);
    } else if (strcmp(key, "http_timeout") == 0) {
        if (parse_u32(value, 1, 86400, &o->http_timeout) < 0)
            return bad("--http-timeout", value);
    } else if (strcmp(key, "http_header_timeout") == 0) {
        if (parse_u32(value, 1, 3600, &o->http_header_timeout) < 0)
            return bad("--http-header-timeout", value);
    } else if (strcmp(key, "http_max_conns_per_peer") == 0) {
        if (parse_u32(value, 0, 1u << 20, &o->http_max_conns_per_peer) < 0)
            return bad("--http-max-conns-per-peer", value);
    } else if (strcmp(key, "threads") == 0) {
        if (parse_u32(value, 1, 1024, &o->threads) < 0)
            return bad("--threads", value);
    } else if (strcmp(key, "io_threads") == 0) {
        if (parse_u32(value, 1, 256, &o->io_threads) < 0)
            return bad("--io-threads", value);
    } else if (strcmp(key, "backing_reads") == 0) {
        if (parse_u32(value, 1, 1024, &o->backing_reads) < 0)
            return bad("--backing-reads", value);
    } else if (strcmp(key, "backing_rate") == 0) {
        if (dsc_parse_size(value, &o->backing_rate) < 0 || o->backing_rate == 0)
            return bad("--backing-rate", value);
    } else if (strcmp(key, "staging_memory") == 0) {
        if (dsc_parse_size(value, &o->staging_memory) < 0)
            return bad("--staging-memory", value);
    } else if (strcmp(key, "staging_ttl") == 0) {
        if (parse_u32(value, 1, 86400, &o->staging_ttl) < 0)
            return bad("--staging-ttl", value);
    } else if (strcmp(key, "send_rate") == 0) {
        if (dsc_parse_size(value, &o->send_rate) < 0 || o->send_rate == 0)
            return bad("--send-rate", value);
    } else if (strcmp(key, "fair") == 0) {
        if (strcmp(value, "on") == 0 || strcmp(value, "true") == 0)
            o->fair_off = 0;
        else if (strcmp(value, "off") == 0 || strcmp(value, "false") == 0)
            o->fair_off = 1;
        else
            return bad("--fair (on or off)", value);
    } else if (strcmp(key, "job_weight") == 0) {
        if (o->weight_count == DSC_FQ_STATS_MAX ||
            dsc_fq_parse_weight(value, o->weights[o->weight_count].owner,
                                o->weights[o->weight_count].name,
                                &o->weights[o->weight_count].weight) < 0)
            return bad("--job-weight (NAME=W, a job name and 1..1000)", value);
        o->weight_count++;
    } else if (strcmp(key, "drain_seconds") == 0) {
        if (parse_u32(value, 1, 86400, &o->drain_seconds) < 0)
            return bad("--drain-seconds", value);
    } else if (strcmp(key, "policy") == 0) {
        if (strcmp(value, "minio") == 0)
            o->policy = DSC_POLICY_MINIO;
        else if (strcmp(value, "lru") == 0)
            o->policy = DSC_POLICY_LRU;
        else
            return bad("--policy", value);
    } else if (strcmp(key, "log_level") == 0) {
        int level = dsc__srvlog_parse_level(value);
        if (level < 0)
            return bad("--log-level", value);
        o->log_level = level;
    } else if (strcmp(key, "port_file") == 0) {
        o->port_file = value;
    } else if (strcmp(key, "http_port_file") == 0) {
        o->http_port_file = value;
    } else if (strcmp(key, "members") == 0) {
        if (value[0] == '\0')
            return bad("--members", value);
        o->members = value;
    } else if (strcmp(key, "members_file") == 0) {
        if (value[0] == '\0')
            return bad("--members-file", value);
        o->members_file = value;
    } else if (strcmp(key, "auth_file") == 0) {
        o->auth_file = value;
    } else if (strcmp(key, "insecure_auth_file") == 0) {
        if (strcmp(value, "warn") == 0)
            o->refuse_insecure_auth_file = 0;
        else if (strcmp(value, "refuse") == 0)
            o->refuse_insecure_auth_file = 1;
        else
            return bad("--insecure-auth-file (warn or refuse)", value);
    } else if (strcmp(key, "metrics_names") == 0) {
        if (strcmp(value, "show") == 0)
            o->metrics_hide_names = 0;
        else if (strcmp(value, "hide") == 0)
            o->metrics_hide_names = 1;
        else
            return bad("--metrics-names (show or hide)", value);
    } else if (strcmp(key, "jobs_per_credential") == 0) {
        if (parse_u32(value, 1, 64, &o->jobs_per_credential) < 0)
            return bad("--jobs-per-credential (1..64)", value);
    } else if (strcmp(key, "allow_anonymous_admin") == 0) {
        o->allow_anonymous_admin = strcmp(value, "1") == 0 || strcmp(value, "true") == 0;
    } else if (strcmp(key, "advertise") == 0) {
        o->advertise = value;
    } else if (strcmp(key, "replicas") == 0) {
        if (parse_u32(value, 1, DSC_MAX_REPLICAS, &o->replicas) < 0)
            return bad("--replicas (1..8)", value);
    } else if (strcmp(key, "members_refresh") == 0) {
        if (parse_u32(value, 1, 86400, &o->members_refresh) < 0)
            return bad("--members-refresh", value);
    } else if (strcmp(key, "ready_timeout") == 0) {
        if (parse_u32(value, 0, 86400 * 7, &o->ready_timeout) < 0)
            return bad("--ready-timeout (seconds)", value);
    } else if (strcmp(key, "rdma") == 0) {
        if (dsc_rdma_mode_parse(value, &o->rdma) < 0)
            return bad("--rdma (off, auto or required)", value);
    } else if (strcmp(key, "rdma_lease_ttl_ms") == 0) {
        if (parse_u32(value, 1, 3600u * 1000u, &o->rdma_lease_ttl_ms) < 0)
            return bad("--rdma-lease-ttl-ms", value);
    } else if (strcmp(key, "peer_rate") == 0) {
        if (strcmp(value, "off") == 0)
            o->peer_rate = 0;
        else if (dsc_parse_size(value, &o->peer_rate) < 0)
            return bad("--peer-rate", value);
    } else if (strcmp(key, "peer_credential") == 0) {
        if (!dsc_auth_name_valid(value, strlen(value)))
            return bad("--peer-credential (a credential name)", value);
        o->peer_credential = value;
    } else if (strcmp(key, "warm") == 0) {
        o->warm = strcmp(value, "1") == 0 || strcmp(value, "true") == 0;
    } else {
        fprintf(stderr, "dscached: unknown option: %s (see --help)\n", key);
        return DSC_EINVAL;
    }
    return 0;
}

/* Config strings must outlive options_t: the parsed JSON is kept until exit. */
static cJSON *config_json;

static int load_config(options_t *o, const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "dscached: --config %s: %s\n", path, strerror(errno));
        return DSC_EINVAL;
    }
    char *text = malloc(1 << 20);
    size_t len = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (text == NULL)
        return DSC_ENOMEM;
    text[len] = '\0';
    config_json = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(config_json)) {
        fprintf(stderr, "dscached: --config %s: not a JSON object\n", path);
        return DSC_EINVAL;
    }
    static char numbers[64][32];
    int used = 0;
    cJSON *item;
    cJSON_ArrayForEach(item, config_json) {
        const char *key = item->string;
        if (cJSON_IsArray(item)) {
            cJSON *v;
            cJSON_ArrayForEach(v, item) {
                if (!cJSON_IsString(v) || apply(o, key, v->valuestring) < 0)
                    return bad("config entry", key);
            }
        } else if (cJSON_IsString(item)) {
            if (apply(o, key, item->valuestring) < 0)
                return DSC_EINVAL;
        } else if (cJSON_IsNumber(item) || cJSON_IsBool(item)) {
            if (used == 64)
                return bad("config (too many entries)", key);
            char *buf = numbers[used++];
            if (cJSON_IsBool(item))
                snprintf(buf, 32, "%s", cJSON_IsTrue(item) ? "true" : "false");
            else
                snprintf(buf, 32, "%.0f", item->valuedouble);
            if (apply(o, key, buf) < 0)
                return DSC_EINVAL;
        } else {
            return bad("config entry", key);
        }
    }
    return 0;
}

static int parse_args(int argc, char **argv, options_t *o) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("dscached %s\n", DSC_VERSION_STRING);
            exit(0);
        }
    for (int i = 1; i < argc; i++) {
        const char *path = NULL;
        if (strcmp(argv[i], "--config") == 0) {
            if (i + 1 >= argc)
                return bad("--config", NULL);
            path = argv[i + 1];
        } else if (strncmp(argv[i], "--config=", 9) == 0) {
            path = argv[i] + 9;
        }
        if (path) {
            int rc = load_config(o, path);
            if (rc < 0)
                return rc;
        }
    }
    /* Directories given on the command line replace those of the config file. */
    int cli_dirs = 0, cli_roots = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0)
            return bad("argument", arg);
        if (strcmp(arg, "--warm") == 0) {
            o->warm = 1;
            continue;
        }
        if (strcmp(arg, "--allow-anonymous-admin") == 0) {
            o->allow_anonymous_admin = 1;
            continue;
        }
        /* --key=value (the form Kubernetes manifests use) or --key value. */
        const char *eq = strchr(arg, '=');
        const char *value;
        char key[64];
        size_t key_len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        if (key_len == 0 || key_len >= sizeof key)
            return bad("option", arg);
        if (eq) {
            value = eq + 1;
        } else {
            if (i + 1 >= argc)
                return bad(arg, NULL);
            value = argv[++i];
        }
        memcpy(key, arg + 2, key_len);
        key[key_len] = '\0';
        if (strcmp(key, "config") == 0)
            continue;
        for (char *p = key; *p; p++)
            if (*p == '-')
                *p = '_';
        if (strcmp(key, "data") == 0 && cli_dirs++ == 0)
            o->dir_count = 0;
        if (strcmp(key, "data_root") == 0 && cli_roots++ == 0)
            o->root_count = 0;
        int rc = apply(o, key, value);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int write_port_file(const char *path, uint16_t port) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (f == NULL)
        return -errno;
    fprintf(f, "%u\n", (unsigned)port);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        int err = -errno;
        unlink(tmp);
        return err;
    }
    return 0;
}

/* ---- control loop: signals and warm-up ------------------------------------------------- */

typedef struct control {
    uv_loop_t loop;
    uv_signal_t sigterm, sigint, sighup;
    uv_work_t warm_work;
    dsc_catalog_t *cat;
    dsc_server_t *server;
    dsc_cluster_t *cluster;
    dsc_credstore_t *credentials;
    dsc_rootwatch_t *rootwatch; /* NULL: no --data-root */
    atomic_int warm_done;       /* the start-up warm-up finished (or there was none) */
    atomic_int stopping_flag;
    int stopping;
    /* Readiness (HTTP thread): latched once ready, with the reason it became so. */
    int want_warm;
    uint32_t ready_timeout;
    double started;
    pthread_mutex_t ready_lock;
    int ready_latched;
    char ready_why[256];
} control_t;

/* The warm-up is done and the smallest owned shard still missing does not fit in the store's
 * largest free extent: as warm as this store gets (the rest is read through or evicts). */
static int store_full(const control_t *ctl, const dsc_cluster_counts_t *cc) {
    dsc_store_info_t si;
    dsc_store_info(dsc_catalog_store(ctl->cat), &si);
    return cc->smallest_missing > 0 && si.largest_free < cc->smallest_missing;
}

/* Appends the damaged shards, by name, to a readiness reason (not latched: a read-through may
 * find damage later). */
static void append_damage(const control_t *ctl, char *why, size_t cap) {
    char list[768];
    uint32_t n = dsc_catalog_damage_text(ctl->cat, list, sizeof list, NULL);
    size_t used = strlen(why);
    if (n > 0 && used + 1 < cap)
        snprintf(why + used, cap - used,
                 "; %u damaged shard%s, answered CORRUPT for the damaged part (re-ingest; dscache "
                 "inspect names the damage): %s",
                 n, n == 1 ? "" : "s", list);
}

/* /readyz (see --help, Readiness): 1 once the start-up warm-up is done and, in a cluster, the
 * member list is known, this server is in it and every shard it owns is resident (single node:
 * the warm-up loaded what the store and the policy allow); or once --ready-timeout has passed
 * (the reason says what was missing). Latched: once ready, ready until stopped. */
static int readiness(void *arg, char *why, size_t cap) {
    control_t *ctl = arg;
    if (atomic_load(&ctl->stopping_flag)) {
        snprintf(why, cap, "stopping");
        return 0;
    }
    pthread_mutex_lock(&ctl->ready_lock);
    int ready = ctl->ready_latched;
    if (ready) {
        snprintf(why, cap, "%s", ctl->ready_why);
        pthread_mutex_unlock(&ctl->ready_lock);
        append_damage(ctl, why, cap);
        return 1;
    }
    dsc_cluster_counts_t cc;
    dsc_cluster_counts(ctl->cluster, ctl->cat, &cc);
    char missing[200] = "";
    if (!ctl->want_warm)
        ;
    else if (!atomic_load(&ctl->warm_done))
        snprintf(missing, sizeof missing, "warming up: %llu of %llu owned shards resident",
                 (unsigned long long)cc.owned_resident, (unsigned long long)cc.owned);
    else if (!cc.known)
        snprintf(missing, sizeof missing, "member list not known yet");
    else if (!cc.self_member)
        snprintf(missing, sizeof missing, "%s is not in the member list (%u members)",
                 dsc_cluster_self(ctl->cluster), cc.members);
    else if (cc.clustered && cc.owned_resident < cc.owned && !store_full(ctl, &cc))
        snprintf(missing, sizeof missing, "warming: %llu of %llu owned shards resident",
                 (unsigned long long)cc.owned_resident, (unsigned long long)cc.owned);
    /* Shards refused whole (failed validation) never become resident: not a store-full case. */
    uint32_t bad = 0;
    (void)dsc_catalog_damage_text(ctl->cat, NULL, 0, &bad);
    if (missing[0] == '\0') {
        ready = 1;
        snprintf(ctl->ready_why, sizeof ctl->ready_why,
                 "ready: %llu of %llu owned shards resident, %u members%s",
                 (unsigned long long)cc.owned_resident, (unsigned long long)cc.owned, cc.members,
                 cc.owned_resident + bad < cc.owned ? " (store full: the rest are read through)"
                                                    : "");
    } else if (ctl->ready_timeout > 0 && dsc_now_s() - ctl->started >= ctl->ready_timeout) {
        ready = 1;
        snprintf(ctl->ready_why, sizeof ctl->ready_why, "ready: --ready-timeout %us expired; %s",
                 ctl->ready_timeout, missing);
    }
    if (ready) {
        ctl->ready_latched = 1;
        LOG_INFO("%s", ctl->ready_why);
        snprintf(why, cap, "%s", ctl->ready_why);
    } else {
        snprintf(why, cap, "not ready: %s", missing);
    }
    pthread_mutex_unlock(&ctl->ready_lock);
    append_damage(ctl, why, cap);
    return ready;
}

static void on_stop_signal(uv_signal_t *handle, int signum) {
    control_t *ctl = handle->data;
    if (ctl->stopping)
        return;
    ctl->stopping = 1;
    atomic_store(&ctl->stopping_flag, 1);
    LOG_INFO("signal %d: stopping: no new connections, finishing in-flight answers", signum);
    dsc_server_stop(ctl->server);
    dsc_cluster_stop(ctl->cluster);   /* ends a warm-up's wait */
    dsc_catalog_stop_loads(ctl->cat); /* and drops the loads it queued */
    dsc_catalog_cancel_rescans(ctl->cat);
    uv_close((uv_handle_t *)&ctl->sigterm, NULL);
    uv_close((uv_handle_t *)&ctl->sigint, NULL);
    uv_close((uv_handle_t *)&ctl->sighup, NULL);
}

static void on_hup(uv_signal_t *handle, int signum) {
    (void)signum;
    control_t *ctl = handle->data;
    LOG_INFO("SIGHUP: rescanning the dataset directories");
    /* With a --data-root the watcher's thread rescans, so that this loop (and SIGTERM) never
     * waits for a rescan's file I/O; --data directories alone are read here (nothing blocks). */
    if (ctl->rootwatch != NULL)
        dsc_rootwatch_request(ctl->rootwatch);
    else
        dsc_catalog_rescan(ctl->cat);
    dsc_cluster_reload(ctl->cluster);
    if (ctl->credentials != NULL) {
        char err[768], warn[640];
        int n = dsc_credstore_reload_checked(ctl->credentials, err, sizeof err, warn, sizeof warn);
        if (warn[0] != '\0' && n >= 0)
            LOG_WARN("SIGHUP: --auth-file: %s (--insecure-auth-file refuse makes this an error)",
                     warn);
        if (n < 0)
            LOG_ERROR("SIGHUP: credentials not reloaded, keeping the current set: %s", err);
        else
            LOG_INFO("SIGHUP: %d credentials loaded", n);
    }
}

static void warm_work(uv_work_t *req) {
    control_t *ctl = req->data;
    dsc_cluster_warm(ctl->cluster, ctl->cat);
}

static void warm_done(uv_work_t *req, int status) {
    control_t *ctl = req->data;
    (void)status;
    if (ctl->stopping)
        return; /* the warm-up was cut short by SIGTERM: never ready */
    atomic_store(&ctl->warm_done, 1);
    LOG_INFO("warm-up done");
}

/* Peer warm-up (peerwarm.h) in a cluster with --peer-rate > 0: with --auth-file only when
 * --peer-credential names the credential to present. Returns 0 (*out NULL when off) or
 * DSC_EINVAL (logged). */
static int start_peer_warm(const options_t *o, dsc_cluster_t *cluster, dsc_credstore_t *credentials,
                           dsc_catalog_t *cat, dsc_peerwarm_t **out) {
    *out = NULL;
    if (o->members == NULL && o->members_file == NULL)
        return 0; /* single node: no peers */
    if (o->peer_rate == 0) {
        LOG_INFO("peer warm-up off (--peer-rate 0): owned shards are read from the backing "
                 "storage");
        return 0;
    }
    if (credentials != NULL && o->peer_credential == NULL) {
        LOG_WARN("peer warm-up off: --auth-file is set but no --peer-credential names the "
                 "credential to present to peers; owned shards are read from the backing "
                 "storage (docs/security.md)");
        return 0;
    }
    dsc_peerwarm_options_t popt = {.cluster = cluster,
                                   .credentials = credentials,
                                   .credential = o->peer_credential,
                                   .rate = o->peer_rate};
    int rc = dsc_peerwarm_create(&popt, out);
    if (rc < 0)
        return rc;
    dsc_catalog_set_peer_source(cat, dsc_peerwarm_source(*out));
    LOG_INFO("peer warm-up: shards are read from live owners first, at most %.1f MB/s%s%s",
             (double)o->peer_rate / 1e6, o->peer_credential ? ", as credential " : "",
             o->peer_credential ? o->peer_credential : "");
    return 0;
}

/* The membership: --members / --members-file, this server's address (--advertise, else the
 * listen host with the bound port). Returns 0 and *out, or DSC_EINVAL / DSC_ENOMEM (logged). */
/* A --data directory without a manifest is served once one appears (SIGHUP rescans), which is
 * right while a dataset is being written and a mistake otherwise: says what the directory holds
 * and how a dataset directory is made. */
static void explain_data_dir(const char *dir) {
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, DSC_MANIFEST_FILE);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || stat(path, &st) == 0)
        return;
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    unsigned shards = 0, files = 0, datasets = 0;
    char first[256] = "";
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        size_t n = strlen(e->d_name);
        snprintf(path, sizeof path, "%s/%s/%s", dir, e->d_name, DSC_MANIFEST_FILE);
        if (stat(path, &st) == 0) {
            if (datasets++ == 0)
                snprintf(first, sizeof first, "%s", e->d_name);
        } else if (n > 4 && strcmp(e->d_name + n - 4, ".dsc") == 0) {
            shards++;
        } else {
            files++;
        }
    }
    closedir(d);
    if (datasets > 0)
        LOG_WARN("--data %s is not a dataset directory (no %s) but holds %u dataset "
                 "director%s: serve them all with --data-root %s (datasets added there later "
                 "are served too), or give each one, e.g. --data %s/%s",
                 dir, DSC_MANIFEST_FILE, datasets, datasets == 1 ? "y" : "ies", dir, dir, first);
    else
        LOG_WARN("--data %s has no %s (%u shard files, %u other entries): it is not a dataset "
                 "directory yet. Write one with `dscache ingest` (npy arrays, token files ...: "
                 "dscache ingest --help), e.g. dscache ingest npy -o %s "
                 "image=images.npy; dscached serves it after a rescan (SIGHUP) finds the manifest",
                 dir, DSC_MANIFEST_FILE, shards, files, dir);
}

static int make_cluster(const options_t *o, const char *listen_host, uint16_t port,
                        dsc_cluster_t **out) {
    char spec[4096], self[DSC_MEMBER_MAX];
    const char *members = o->members;
    if (o->members && o->members_file) {
        LOG_ERROR("--members and --members-file are exclusive: give one");
        return DSC_EINVAL;
    }
    if (o->members_file) {
        if (snprintf(spec, sizeof spec, "file:%s", o->members_file) >= (int)sizeof spec) {
            LOG_ERROR("--members-file: path too long");
            return DSC_EINVAL;
        }
        members = spec;
    }
    const char *advertise = o->advertise;
    if (advertise == NULL) {
        int v6 = strchr(listen_host, ':') != NULL;
        snprintf(self, sizeof self, v6 ? "[%s]:%u" : "%s:%u", listen_host, (unsigned)port);
        advertise = self;
        int wildcard = strcmp(listen_host, "0.0.0.0") == 0 || strcmp(listen_host, "::") == 0;
        if (members && wildcard)
            LOG_WARN("cluster: --listen %s is a wildcard address: give --advertise HOST:PORT "
                     "as this server appears in the member list",
                     listen_host);
    }
    dsc_cluster_options_t copt = {.members = members,
                                  .advertise = advertise,
                                  .replicas = o->replicas,
                                  .refresh_seconds = o->members_refresh};
    return dsc_cluster_create(&copt, out);
}

static int listen_addr(const char *text, char *host, size_t cap, uint16_t *port, int *off) {
    *off = 0;
    if (strcmp(text, "off") == 0 || strcmp(text, "0") == 0) {
        *off = 1;
        return 0;
    }
    return dsc_split_hostport(text, host, cap, port);
}

int main(int argc, char **argv) {
    options_t o;
    memset(&o, 0, sizeof o);
    snprintf(o.listen, sizeof o.listen, "127.0.0.1:7070");
    snprintf(o.http, sizeof o.http, "127.0.0.1:7071");
    o.memory = UINT64_C(1) << 30;
    o.staging_memory = UINT64_MAX;
    o.staging_ttl = 30;
    o.root_interval = 10;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    o.threads = 0; /* after the options: the number of cores */
    o.io_threads = 4;
    o.max_out = UINT64_C(64) << 20;
    o.max_out_total = UINT64_C(1) << 30;
    o.header_timeout = 10;
    o.idle_timeout = 300;
    o.max_conns_per_peer = 1024;
    o.http_max_conns = DSC_HTTP_MAX_CONNS_DEFAULT;
    o.http_timeout = DSC_HTTP_TIMEOUT_DEFAULT_S;
    o.http_header_timeout = DSC_HTTP_HEADER_TIMEOUT_DEFAULT_S;
    o.http_max_conns_per_peer = DSC_HTTP_MAX_CONNS_PER_PEER_DEFAULT;
    o.drain_seconds = 30;
    o.peer_rate = DSC_PEERWARM_DEFAULT_RATE;
    o.log_level = DSC_LOG_INFO;
    o.policy = DSC_POLICY_MINIO;
    o.rdma = DSC_RDMA_MODE_AUTO;

    int exit_code = 1;
    dsc_store_t *store = NULL;
    dsc_catalog_t *cat = NULL;
    dsc_server_t *server = NULL;
    dsc_rdma_srv_t *rdma = NULL;
    dsc_http_t *http = NULL;
    dsc_cluster_t *cluster = NULL;
    dsc_peerwarm_t *peerwarm = NULL;
    dsc_credstore_t *credentials = NULL;
    dsc_rootwatch_t *rootwatch = NULL;
    control_t ctl;
    memset(&ctl, 0, sizeof ctl);
    int loop_ready = 0;

    signal(SIGPIPE, SIG_IGN); /* a peer gone mid-write is an error return, not a signal */
    if (parse_args(argc, argv, &o) < 0)
        goto done;
    dsc__srvlog_level = o.log_level;
    if (o.threads == 0)
        o.threads = cores > 0 ? (uint32_t)cores : 1;
    raise_nofile_limit();
    if (o.dir_count == 0 && o.root_count == 0) {
        fprintf(stderr, "dscached: no --data directory given (see --help)\n");
        goto done;
    }
    char listen_host[256], http_host[256];
    uint16_t listen_port = 0, http_port = 0;
    int listen_off, http_off;
    if (listen_addr(o.listen, listen_host, sizeof listen_host, &listen_port, &listen_off) < 0 ||
        listen_off) {
        fprintf(stderr,
                "dscached: invalid --listen '%s': expected HOST:PORT (e.g. 0.0.0.0:7070, "
                "127.0.0.1:0, [::]:7070)\n",
                o.listen);
        goto done;
    }
    if (listen_addr(o.http, http_host, sizeof http_host, &http_port, &http_off) < 0) {
        fprintf(stderr,
                "dscached: invalid --http '%s': expected HOST:PORT (e.g. 0.0.0.0:7071) or "
                "\"off\"\n",
                o.http);
        goto done;
    }

    int rc = dsc_store_create(o.memory, &store);
    if (rc < 0) {
        LOG_ERROR("cannot reserve a store of %llu bytes: %s", (unsigned long long)o.memory,
                  dsc_strerror(rc));
        goto done;
    }
    dsc_catalog_options_t copt = {
        .policy = o.policy,
        .io_threads = o.io_threads,
        .backing_reads = o.backing_reads,
        .backing_rate = o.backing_rate,
        .staging_memory = o.staging_memory == UINT64_MAX ? UINT64_C(256) << 20 : o.staging_memory,
        .staging_ttl_ms = o.staging_ttl * 1000u};
    if ((rc = dsc_catalog_create(store, &copt, &cat)) < 0) {
        LOG_ERROR("cannot create the catalog: %s", dsc_strerror(rc));
        goto done;
    }
    for (int i = 0; i < o.dir_count; i++) {
        explain_data_dir(o.dirs[i]);
        rc = dsc_catalog_add_dir(cat, o.dirs[i]);
        if (rc < 0) {
            LOG_ERROR("--data %s: %s", o.dirs[i], dsc_strerror(rc));
            goto done;
        }
    }
    for (int i = 0; i < o.limit_count; i++) {
        const char *eq = strchr(o.limits[i], '=');
        uint64_t bytes = 0;
        (void)dsc_parse_size(eq + 1, &bytes); /* checked by apply() */
        dsc_catalog_set_policy(cat, o.limits[i], (size_t)(eq - o.limits[i]), DSC_POLICY_LIMIT,
                               bytes);
        LOG_INFO("dataset %.*s: limited to %llu bytes (--limit)", (int)(eq - o.limits[i]),
                 o.limits[i], (unsigned long long)bytes);
    }
    for (int i = 0; i < o.priority_count; i++) {
        const char *eq = strchr(o.priorities[i], '=');
        uint32_t prio = 0;
        (void)parse_u32(eq + 1, 0, DSC_MAX_PRIORITY, &prio); /* checked by apply() */
        dsc_catalog_set_policy(cat, o.priorities[i], (size_t)(eq - o.priorities[i]),
                               DSC_POLICY_PRIORITY, prio);
        LOG_INFO("dataset %.*s: priority %u (--priority)", (int)(eq - o.priorities[i]),
                 o.priorities[i], prio);
    }
    for (int i = 0; i < o.pin_count; i++) {
        dsc_catalog_set_policy(cat, o.pins[i], strlen(o.pins[i]), DSC_POLICY_PIN, 0);
        LOG_INFO("dataset %s: pinned (--pin)", o.pins[i]);
    }
    for (int i = 0; i < o.root_count; i++) {
        if ((rc = dsc_catalog_add_root(cat, o.roots[i])) < 0) {
            LOG_ERROR("--data-root %s: %s", o.roots[i],
                      rc == DSC_ENOENT ? "not a directory" : dsc_strerror(rc));
            goto done;
        }
    }
    /* A job is (credential, name): with credentials every weight names its credential, so no
     * credential can take another's; without, the whole spec is the job's name. */
    for (uint32_t i = 0; i < o.weight_count; i++) {
        dsc_job_weight_t *w = &o.weights[i];
        if (o.auth_file == NULL && w->owner[0] != '\0') {
            char whole[sizeof w->name];
            snprintf(whole, sizeof whole, "%s:%s", w->owner, w->name);
            memcpy(w->name, whole, sizeof whole);
            w->owner[0] = '\0';
        } else if (o.auth_file != NULL && w->owner[0] == '\0') {
            LOG_ERROR("--job-weight %s=%u: with --auth-file a job is its credential and its "
                      "name: write CRED:%s=%u (the credential whose job it is)",
                      w->name, w->weight, w->name, w->weight);
            goto done;
        }
    }
    if (o.auth_file != NULL) {
        char err[768], warn[640];
        if ((rc = dsc_credstore_open(o.auth_file, o.refuse_insecure_auth_file, &credentials, err,
                                     sizeof err, warn, sizeof warn)) < 0) {
            LOG_ERROR("--auth-file: %s", err);
            goto done;
        }
        if (warn[0] != '\0')
            LOG_WARN("--auth-file: %s (--insecure-auth-file refuse makes this an error)", warn);
        if (o.allow_anonymous_admin)
            LOG_WARN("--allow-anonymous-admin has no effect with --auth-file");
        dsc_credset_t *set = dsc_credstore_acquire(credentials);
        LOG_INFO("authentication required: %u credentials from %s", dsc_credset_count(set),
                 o.auth_file);
        dsc_credset_release(set);
    } else if (o.allow_anonymous_admin) {
        LOG_WARN("no --auth-file: serving every client anonymously, WARM/EVICT included "
                 "(--allow-anonymous-admin)");
    } else {
        LOG_WARN("no --auth-file: serving every client anonymously; WARM/EVICT refused "
                 "(docs/security.md)");
    }
    dsc_rdma_srv_options_t ropt = {
        .mode = o.rdma, .lease_ttl_ms = o.rdma_lease_ttl_ms, .max_lease_bytes = o.max_out};
    if ((rc = dsc_rdma_srv_create(&ropt, store, &rdma)) < 0)
        goto done;
    dsc_server_options_t sopt = {.host = listen_host,
                                 .rdma = rdma,
                                 .port = listen_port,
                                 .threads = o.threads,
                                 .max_out = o.max_out,
                                 .max_out_total = o.max_out_total,
                                 .header_timeout_s = o.header_timeout,
                                 .idle_timeout_s = o.idle_timeout,
                                 .max_conns_per_peer = o.max_conns_per_peer,
                                 .drain_seconds = o.drain_seconds,
                                 .name = "dscached",
                                 .credentials = credentials,
                                 .allow_anonymous_admin = o.allow_anonymous_admin,
                                 .send_rate = o.send_rate,
                                 .fair_off = o.fair_off,
                                 .job_weights = o.weights,
                                 .job_weight_count = o.weight_count};
    if ((rc = dsc_server_start(cat, &sopt, &server)) < 0) {
        if (rc == DSC_EADDRINUSE)
            LOG_ERROR("cannot listen on %s: the port is already in use (another dscached or "
                      "another program listens there); stop it or choose another --listen",
                      o.listen);
        else
            LOG_ERROR("cannot listen on %s: %s", o.listen, dsc_strerror(rc));
        goto done;
    }
    if ((rc = make_cluster(&o, listen_host, dsc_server_port(server), &cluster)) < 0) {
        dsc_server_stop(server);
        goto done;
    }
    dsc_server_set_cluster(server, cluster);
    if ((rc = start_peer_warm(&o, cluster, credentials, cat, &peerwarm)) < 0) {
        dsc_server_stop(server);
        goto done;
    }
    dsc_jobs_set_share(dsc_server_jobs(server), o.jobs_per_credential);
    ctl.cat = cat;
    ctl.server = server;
    ctl.cluster = cluster;
    ctl.credentials = credentials;
    atomic_init(&ctl.warm_done, 0);
    atomic_init(&ctl.stopping_flag, 0);
    ctl.want_warm = o.warm;
    ctl.ready_timeout = o.ready_timeout;
    ctl.started = dsc_now_s();
    pthread_mutex_init(&ctl.ready_lock, NULL);
    if (!http_off) {
        dsc_http_source_t src = {.cat = cat,
                                 .server = server,
                                 .cluster = cluster,
                                 .data_port = dsc_server_port(server),
                                 .readiness = readiness,
                                 .readiness_arg = &ctl,
                                 .max_conns = o.http_max_conns,
                                 .timeout_s = o.http_timeout,
                                 .header_timeout_s = o.http_header_timeout,
                                 .max_conns_per_peer = o.http_max_conns_per_peer,
                                 .hide_names = o.metrics_hide_names};
        if ((rc = dsc_http_start(http_host, http_port, &src, &http)) < 0) {
            LOG_ERROR("cannot serve HTTP on %s: %s", o.http, dsc_strerror(rc));
            dsc_server_stop(server);
            goto done;
        }
    }
    LOG_INFO("dscached %s: listening on %s port %u (%u loops), HTTP %s port %u, store %llu "
             "bytes, policy %s",
             DSC_VERSION_STRING, listen_host, (unsigned)dsc_server_port(server), o.threads,
             http_off ? "off" : http_host, (unsigned)dsc_http_port(http),
             (unsigned long long)o.memory, o.policy == DSC_POLICY_LRU ? "lru" : "minio");

    if (o.port_file && (rc = write_port_file(o.port_file, dsc_server_port(server))) < 0) {
        LOG_ERROR("--port-file %s: %s", o.port_file, strerror(-rc));
        dsc_server_stop(server);
        goto done;
    }
    if (o.http_port_file && http &&
        (rc = write_port_file(o.http_port_file, dsc_http_port(http))) < 0) {
        LOG_ERROR("--http-port-file %s: %s", o.http_port_file, strerror(-rc));
        dsc_server_stop(server);
        goto done;
    }
    uv_loop_init(&ctl.loop);
    loop_ready = 1;
    uv_signal_init(&ctl.loop, &ctl.sigterm);
    uv_signal_init(&ctl.loop, &ctl.sigint);
    uv_signal_init(&ctl.loop, &ctl.sighup);
    ctl.sigterm.data = ctl.sigint.data = ctl.sighup.data = &ctl;
    uv_signal_start(&ctl.sigterm, on_stop_signal, SIGTERM);
    uv_signal_start(&ctl.sigint, on_stop_signal, SIGINT);
    uv_signal_start(&ctl.sighup, on_hup, SIGHUP);
    if ((rc = dsc_rootwatch_start(cat, o.root_interval, &rootwatch)) < 0)
        LOG_ERROR("--data-root: cannot watch: %s (SIGHUP rescans)", dsc_strerror(rc));
    ctl.rootwatch = rootwatch;
    if ((rc = dsc_cluster_start(cluster, &ctl.loop, cat)) < 0)
        LOG_ERROR("cluster: cannot start the membership refresh: %s (the list stays as read)",
                  dsc_strerror(rc));

    if (o.warm) {
        ctl.warm_work.data = &ctl;
        uv_queue_work(&ctl.loop, &ctl.warm_work, warm_work, warm_done);
    } else {
        atomic_store(&ctl.warm_done, 1);
    }
    uv_run(&ctl.loop, UV_RUN_DEFAULT);
    exit_code = 0;
done:
    /* HTTP first: its thread reads the server's counters, which destroy frees. */
    dsc_http_stop(http);
    dsc_rootwatch_stop(rootwatch); /* its rescans touch the catalog */
    dsc_server_destroy(server);    /* joins the loops once they have drained */
    dsc_rdma_srv_destroy(rdma);    /* after the loops: every QP is gone */
    if (loop_ready)
        uv_loop_close(&ctl.loop);
    dsc_catalog_destroy(cat); /* joins the I/O threads, which use peerwarm */
    dsc_peerwarm_destroy(peerwarm);
    dsc_cluster_destroy(cluster); /* after the loops and the I/O threads: they read it */
    dsc_store_destroy(store);
    dsc_credstore_destroy(credentials); /* after the server: connections hold its sets */
    cJSON_Delete(config_json);
    if (exit_code == 0)
        LOG_INFO("stopped");
    return exit_code;
}
