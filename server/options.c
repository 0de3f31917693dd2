/* dscached's options: the --help text, one option applied (apply), the JSON config file and the
 * command line (options.h). */
#include "options.h"
#include "http.h"
#include "peerwarm.h"
#include "srvlog.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dsc__srv_options_defaults(dsc_srv_options_t *o) {
    memset(o, 0, sizeof *o);
    snprintf(o->listen, sizeof o->listen, "127.0.0.1:7070");
    snprintf(o->http, sizeof o->http, "127.0.0.1:7071");
    o->memory = UINT64_C(1) << 30;
    o->staging_memory = UINT64_MAX;
    o->staging_ttl = 30;
    o->root_interval = 10;
    o->threads = 0; /* after the options: the number of cores */
    o->io_threads = 4;
    o->max_out = UINT64_C(64) << 20;
    o->max_out_total = UINT64_C(1) << 30;
    o->header_timeout = 10;
    o->idle_timeout = 300;
    o->max_conns_per_peer = 1024;
    o->http_max_conns = DSC_HTTP_MAX_CONNS_DEFAULT;
    o->http_timeout = DSC_HTTP_TIMEOUT_DEFAULT_S;
    o->http_header_timeout = DSC_HTTP_HEADER_TIMEOUT_DEFAULT_S;
    o->http_max_conns_per_peer = DSC_HTTP_MAX_CONNS_PER_PEER_DEFAULT;
    o->drain_seconds = 30;
    o->peer_rate = DSC_PEERWARM_DEFAULT_RATE;
    o->log_level = DSC_LOG_INFO;
    o->policy = DSC_POLICY_MINIO;
    o->rdma = DSC_RDMA_MODE_AUTO;
}

void dsc__srv_options_close(dsc_srv_options_t *o) {
    if (o == NULL)
        return;
    cJSON_Delete(o->config);
    o->config = NULL;
}

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

int dsc__srv_parse_u32(const char *text, uint32_t min, uint32_t max, uint32_t *out) {
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

/* Applies one option (from the command line or the config file). */
static int apply(dsc_srv_options_t *o, const char *key, const char *value) {
    if (strcmp(key, "data") == 0) {
        if (o->dir_count == DSC_SRV_MAX_DIRS)
            return bad("--data (too many directories)", value);
        o->dirs[o->dir_count++] = value;
    } else if (strcmp(key, "pin") == 0) {
        if (o->pin_count == DSC_SRV_MAX_DIRS || value[0] == '\0' || strlen(value) >= DSC_MAX_NAME)
            return bad("--pin (a dataset name)", value);
        o->pins[o->pin_count++] = value;
    } else if (strcmp(key, "limit") == 0) {
        const char *eq = strchr(value, '=');
        uint64_t bytes;
        if (o->limit_count == DSC_SRV_MAX_DIRS || eq == NULL || eq == value ||
            eq - value >= DSC_MAX_NAME || dsc_parse_size(eq + 1, &bytes) < 0)
            return bad("--limit (DATASET=BYTES)", value);
        o->limits[o->limit_count++] = value;
    } else if (strcmp(key, "priority") == 0) {
        const char *eq = strchr(value, '=');
        uint32_t prio;
        if (o->priority_count == DSC_SRV_MAX_DIRS || eq == NULL || eq == value ||
            eq - value >= DSC_MAX_NAME ||
            dsc__srv_parse_u32(eq + 1, 0, DSC_MAX_PRIORITY, &prio) < 0)
            return bad("--priority (DATASET=N, N 0..1000)", value);
        o->priorities[o->priority_count++] = value;
    } else if (strcmp(key, "data_root_interval") == 0) {
        if (dsc__srv_parse_u32(value, 0, 86400, &o->root_interval) < 0)
            return bad("--data-root-interval (seconds)", value);
    } else if (strcmp(key, "data_root") == 0) {
        if (o->root_count == DSC_SRV_MAX_DIRS || value[0] == '\0')
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
        if (dsc__srv_parse_u32(value, 1, 86400, &o->header_timeout) < 0)
            return bad("--header-timeout", value);
    } else if (strcmp(key, "idle_timeout") == 0) {
        if (dsc__srv_parse_u32(value, 0, 86400 * 7, &o->idle_timeout) < 0)
            return bad("--idle-timeout", value);
    } else if (strcmp(key, "max_conns_per_peer") == 0) {
        if (dsc__srv_parse_u32(value, 0, 1u << 24, &o->max_conns_per_peer) < 0)
            return bad("--max-conns-per-peer", value);
    } else if (strcmp(key, "http_max_conns") == 0) {
        if (dsc__srv_parse_u32(value, 1, 1u << 20, &o->http_max_conns) < 0)
            return bad("--http-max-conns", value);
    } else if (strcmp(key, "http_timeout") == 0) {
        if (dsc__srv_parse_u32(value, 1, 86400, &o->http_timeout) < 0)
            return bad("--http-timeout", value);
    } else if (strcmp(key, "http_header_timeout") == 0) {
        if (dsc__srv_parse_u32(value, 1, 3600, &o->http_header_timeout) < 0)
            return bad("--http-header-timeout", value);
    } else if (strcmp(key, "http_max_conns_per_peer") == 0) {
        if (dsc__srv_parse_u32(value, 0, 1u << 20, &o->http_max_conns_per_peer) < 0)
            return bad("--http-max-conns-per-peer", value);
    } else if (strcmp(key, "threads") == 0) {
        if (dsc__srv_parse_u32(value, 1, 1024, &o->threads) < 0)
            return bad("--threads", value);
    } else if (strcmp(key, "io_threads") == 0) {
        if (dsc__srv_parse_u32(value, 1, 256, &o->io_threads) < 0)
            return bad("--io-threads", value);
    } else if (strcmp(key, "backing_reads") == 0) {
        if (dsc__srv_parse_u32(value, 1, 1024, &o->backing_reads) < 0)
            return bad("--backing-reads", value);
    } else if (strcmp(key, "backing_rate") == 0) {
        if (dsc_parse_size(value, &o->backing_rate) < 0 || o->backing_rate == 0)
            return bad("--backing-rate", value);
    } else if (strcmp(key, "staging_memory") == 0) {
        if (dsc_parse_size(value, &o->staging_memory) < 0)
            return bad("--staging-memory", value);
    } else if (strcmp(key, "staging_ttl") == 0) {
        if (dsc__srv_parse_u32(value, 1, 86400, &o->staging_ttl) < 0)
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
        if (dsc__srv_parse_u32(value, 1, 86400, &o->drain_seconds) < 0)
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
        if (dsc__srv_parse_u32(value, 1, 64, &o->jobs_per_credential) < 0)
            return bad("--jobs-per-credential (1..64)", value);
    } else if (strcmp(key, "allow_anonymous_admin") == 0) {
        o->allow_anonymous_admin = strcmp(value, "1") == 0 || strcmp(value, "true") == 0;
    } else if (strcmp(key, "advertise") == 0) {
        o->advertise = value;
    } else if (strcmp(key, "replicas") == 0) {
        if (dsc__srv_parse_u32(value, 1, DSC_MAX_REPLICAS, &o->replicas) < 0)
            return bad("--replicas (1..8)", value);
    } else if (strcmp(key, "members_refresh") == 0) {
        if (dsc__srv_parse_u32(value, 1, 86400, &o->members_refresh) < 0)
            return bad("--members-refresh", value);
    } else if (strcmp(key, "ready_timeout") == 0) {
        if (dsc__srv_parse_u32(value, 0, 86400 * 7, &o->ready_timeout) < 0)
            return bad("--ready-timeout (seconds)", value);
    } else if (strcmp(key, "rdma") == 0) {
        if (dsc_rdma_mode_parse(value, &o->rdma) < 0)
            return bad("--rdma (off, auto or required)", value);
    } else if (strcmp(key, "rdma_lease_ttl_ms") == 0) {
        if (dsc__srv_parse_u32(value, 1, 3600u * 1000u, &o->rdma_lease_ttl_ms) < 0)
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

static int load_config(dsc_srv_options_t *o, const char *path) {
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
    /* Its strings must outlive the options: the parsed JSON is kept until
     * dsc__srv_options_close (a second --config's replaces it there, the first's kept). */
    o->config = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(o->config)) {
        fprintf(stderr, "dscached: --config %s: not a JSON object\n", path);
        return DSC_EINVAL;
    }
    static char numbers[64][32];
    int used = 0;
    cJSON *item;
    cJSON_ArrayForEach(item, o->config) {
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

int dsc__srv_options_parse(int argc, char **argv, dsc_srv_options_t *o) {
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
