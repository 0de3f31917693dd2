/* Fair queueing of a server's responses between jobs: deficit round-robin (Shreedhar and
 * Varghese, 1995) over flows, one flow per job (as named in its REPORTs) or per connection that
 * has not named one, each with a weight. Also the send budget (a token bucket, --send-rate) the
 * queue is served under, and per-job totals (bytes sent, time queued) for /metrics.
 * Why DRR (docs/server.md): O(1) per response whatever the number of flows, exact byte shares
 * in proportion to the weights for responses of any size (a flow's deficit carries the
 * remainder to its next turn), no per-flow timestamps, and a flow that is idle gets nothing
 * saved up (work-conserving: what it does not use goes to the others).
 * A dsc_fq_t and its flows are not locked here: the server guards its one queue with the
 * budget's lock (tcp.c); the budget's own calls and the totals are thread-safe. No I/O. */
#ifndef DSC_SERVER_FAIRQ_H
#define DSC_SERVER_FAIRQ_H

#include "dscache_base.h" /* DSC_E* */

#include <pthread.h>
#include <stdint.h>

#define DSC_FQ_NAME_MAX 64          /* a job name (DSC_REPORT_MAX_JOB + 1) */
#define DSC_FQ_QUANTUM (256u << 10) /* bytes a weight-1 flow may send per turn */
#define DSC_FQ_WEIGHT_MAX 1000u
#define DSC_FQ_STATS_MAX 64 /* jobs with their own totals; the rest: "other" */

/* A queued item, embedded in the caller's object. */
typedef struct dsc_fq_item {
    struct dsc_fq_item *next;
    uint64_t bytes;
    uint64_t enq_ns; /* set by dsc_fq_push */
    uint64_t seq;    /* arrival order (the FIFO mode) */
} dsc_fq_item_t;

typedef struct dsc_fq_flow {
    char owner[DSC_FQ_NAME_MAX]; /* the job's credential ("": anonymous) */
    char name[DSC_FQ_NAME_MAX];  /* "" for a connection's own flow */
    uint32_t weight;             /* 1..DSC_FQ_WEIGHT_MAX */
    int64_t deficit;             /* bytes the flow may still send in its turn */
    dsc_fq_item_t *head, *tail;
    uint64_t queued_bytes;
    uint32_t queued;
    int refs;            /* dsc_fq_flow_get / put */
    unsigned active : 1, /* on the active list: has items */
        granted : 1,     /* its quantum for the current turn is added */
        shared : 1;      /* in the table by name (else private to one connection) */
    struct dsc_fq_flow *next_active, *next_named;
    uint64_t sent_bytes, sent_items, queue_ns; /* since the last dsc_fq_take_totals */
} dsc_fq_flow_t;

struct dsc_fq_totals;

typedef struct dsc_fq {
    struct dsc_fq_totals *totals;             /* per-job totals (may be NULL; not owned) */
    dsc_fq_flow_t *active_head, *active_tail; /* flows with items, in turn order */
    dsc_fq_flow_t *named;                     /* shared flows, by name */
    uint64_t quantum;                         /* bytes per weight per turn */
    uint64_t next_seq;
    uint64_t queued_bytes;
    uint32_t queued;
    int fifo; /* 1: no fairness, items go in arrival order whatever their flow (--fair off) */
} dsc_fq_t;

/* quantum 0: DSC_FQ_QUANTUM. A quantum below the largest item still works (the flow waits
 * turns until its deficit covers it), only less smoothly. */
void dsc_fq_init(dsc_fq_t *fq, uint64_t quantum, int fifo, struct dsc_fq_totals *totals);
/* The flow of job `name` of credential `owner` (NULL or "": anonymous; a job is the pair, so
 * two credentials' jobs of one name are two flows), or with name NULL or "" a new private flow;
 * created with `weight` (0: 1; capped at DSC_FQ_WEIGHT_MAX) if absent; a reference the caller
 * gives back with dsc_fq_flow_put. NULL on ENOMEM. */
dsc_fq_flow_t *dsc_fq_flow_get(dsc_fq_t *fq, const char *owner, const char *name, uint32_t weight);
/* Drops a reference; the flow is freed at the last one once it holds no items (a flow with
 * items is freed when its last item is popped). NULL is a no-op. */
void dsc_fq_flow_put(dsc_fq_t *fq, dsc_fq_flow_t *flow);
/* Appends item (bytes set by the caller) to flow at now_ns. */
void dsc_fq_push(dsc_fq_t *fq, dsc_fq_flow_t *flow, dsc_fq_item_t *item, uint64_t now_ns);
/* The next item to send (deficit round-robin; arrival order with fifo), taken off its queue, its
 * bytes and time queued (to now_ns) counted for its flow, and moved into fq->totals (when set)
 * every DSC_FQ_TOTALS_EVERY items or DSC_FQ_TOTALS_BYTES bytes and when the flow empties. NULL
 * when nothing is queued. */
#define DSC_FQ_TOTALS_EVERY 16
#define DSC_FQ_TOTALS_BYTES (256u << 10)
dsc_fq_item_t *dsc_fq_pop(dsc_fq_t *fq, uint64_t now_ns);
/* Removes every item for which drop(item, arg) is non-zero (drop may free it) from flow's queue
 * (a closing connection's items); returns how many. An emptied flow leaves the turn order, and is
 * freed if it has no references left. */
uint32_t dsc_fq_remove(dsc_fq_t *fq, dsc_fq_flow_t *flow, int (*drop)(dsc_fq_item_t *, void *),
                       void *arg);
/* Frees the table's flows (items still queued are the caller's). */
void dsc_fq_destroy(dsc_fq_t *fq);

/* ---- the send budget: a token bucket shared by the loops --------------------------------- */

typedef struct dsc_fq_budget {
    pthread_mutex_t lock;
    uint64_t rate;  /* bytes per second; 0: unlimited */
    uint64_t burst; /* the most tokens saved up (bytes) */
    double tokens;  /* may go below 0: a response larger than what is left still goes */
    uint64_t last_ns;
    uint64_t waits; /* times the budget was empty with responses queued */
} dsc_fq_budget_t;

/* rate 0: unlimited (dsc_fq_budget_take always grants). burst: 0 picks rate / 100 (10 ms of
 * sending), at least 256 KiB. */
void dsc_fq_budget_init(dsc_fq_budget_t *b, uint64_t rate, uint64_t burst);
void dsc_fq_budget_destroy(dsc_fq_budget_t *b);
/* Tokens available at now_ns (> 0: that many bytes may be sent; <= 0: none, and *wait_ns is
 * how long until there are). Locks the budget: dsc_fq_budget_spend must follow at once. */
double dsc_fq_budget_take(dsc_fq_budget_t *b, uint64_t now_ns, uint64_t *wait_ns);
/* Spends `bytes` (what was sent since take) and unlocks. */
void dsc_fq_budget_spend(dsc_fq_budget_t *b, uint64_t bytes, int waited);

/* ---- totals per job (thread-safe) ---------------------------------------------------------- */

typedef struct dsc_fq_total {
    char owner[DSC_FQ_NAME_MAX]; /* the job's credential ("": anonymous) */
    char name[DSC_FQ_NAME_MAX];  /* "" unreported connections, "*" the jobs beyond the table */
    uint32_t weight;
    uint64_t sent_bytes, sent_items, queue_ns;
} dsc_fq_total_t;

typedef struct dsc_fq_totals {
    pthread_mutex_t lock;
    uint32_t count;
    dsc_fq_total_t ent[DSC_FQ_STATS_MAX + 1];
} dsc_fq_totals_t;

void dsc_fq_totals_init(dsc_fq_totals_t *t);
void dsc_fq_totals_destroy(dsc_fq_totals_t *t);
/* Moves the flow's counts since the last call into t. */
void dsc_fq_take_totals(dsc_fq_totals_t *t, dsc_fq_flow_t *flow);
/* Copies up to cap entries; returns how many there are. */
uint32_t dsc_fq_totals_snapshot(dsc_fq_totals_t *t, dsc_fq_total_t *out, uint32_t cap);

/* ---- weights from the configuration ----------------------------------------------------- */

/* Parses "CRED:NAME=W" or "NAME=W" (W 1..DSC_FQ_WEIGHT_MAX). When the part before the first ':'
 * is a credential name (proto/auth.h) and the rest a job name of the REPORT alphabet, owner is
 * that credential and name the rest; otherwise owner is "" and name the whole (which must be a
 * job name). Returns 0 with owner, name and weight, or DSC_EINVAL. (On a server without
 * credentials, the caller takes owner ":" name as the job's whole name.) */
int dsc_fq_parse_weight(const char *spec, char owner[DSC_FQ_NAME_MAX], char name[DSC_FQ_NAME_MAX],
                        uint32_t *weight);

#endif
