/* dscached's options: the table of its command line and JSON config file (the config first, the
 * command line over it), their parsing and checking, and the --help text. main.c starts the
 * server from what they say. */
#ifndef DSC_SRV_OPTIONS_H
#define DSC_SRV_OPTIONS_H

#include "catalog_types.h"
#include "fairq.h"
#include "rdma.h"
#include "server_types.h"

#include <stdint.h>

struct cJSON;

/* Repeatable options (--data, --data-root, --pin, --limit, --priority) take at most this many. */
#define DSC_SRV_MAX_DIRS 256

typedef struct dsc_srv_options {
    const char *dirs[DSC_SRV_MAX_DIRS];
    int dir_count;
    const char *roots[DSC_SRV_MAX_DIRS]; /* --data-root */
    int root_count;
    uint32_t root_interval;             /* --data-root-interval (seconds; 0: none) */
    const char *pins[DSC_SRV_MAX_DIRS]; /* --pin DATASET */
    int pin_count;
    const char *limits[DSC_SRV_MAX_DIRS]; /* --limit DATASET=BYTES */
    int limit_count;
    const char *priorities[DSC_SRV_MAX_DIRS]; /* --priority DATASET=N */
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
    struct cJSON *config; /* --config: the parsed file, whose strings the fields above point into */
} dsc_srv_options_t;

/* Fills *o with the defaults --help gives (threads 0: main.c sets the number of cores). */
void dsc__srv_options_defaults(dsc_srv_options_t *o);
/* Reads the --config files named in argv (in order), then the command line over them. --help and
 * --version print to stdout and exit(0). Returns 0, or DSC_EINVAL / DSC_ENOMEM after a line on
 * stderr naming the option and its value. The fields point into argv and o->config: both must
 * outlive *o (dsc__srv_options_close). */
int dsc__srv_options_parse(int argc, char **argv, dsc_srv_options_t *o);
/* Frees what parsing kept (the config file's JSON). Takes a zeroed *o. */
void dsc__srv_options_close(dsc_srv_options_t *o);
/* A decimal in min..max (no sign, no suffix) into *out. Returns 0 or DSC_EINVAL. */
int dsc__srv_parse_u32(const char *text, uint32_t min, uint32_t max, uint32_t *out);

#endif
