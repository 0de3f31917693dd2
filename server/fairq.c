/* Deficit round-robin between jobs, the send budget and per-job totals (fairq.h). */
#include "fairq.h"
#include "auth.h"
#include "report.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dsc_fq_init(dsc_fq_t *fq, uint64_t quantum, int fifo, struct dsc_fq_totals *totals) {
    memset(fq, 0, sizeof *fq);
    fq->totals = totals;
    fq->quantum = quantum ? quantum : DSC_FQ_QUANTUM;
    fq->fifo = fifo;
}

dsc_fq_flow_t *dsc_fq_flow_get(dsc_fq_t *fq, const char *owner, const char *name, uint32_t weight) {
    int shared = name != NULL && name[0] != '\0';
    if (owner == NULL)
        owner = "";
    if (shared)
        for (dsc_fq_flow_t *f = fq->named; f; f = f->next_named)
            if (strcmp(f->name, name) == 0 && strcmp(f->owner, owner) == 0) {
                f->refs++;
                return f;
            }
    dsc_fq_flow_t *f = calloc(1, sizeof *f);
    if (f == NULL)
        return NULL;
    if (shared) {
        snprintf(f->name, sizeof f->name, "%s", name);
        snprintf(f->owner, sizeof f->owner, "%s", owner);
    }
    f->weight = weight == 0 ? 1 : weight > DSC_FQ_WEIGHT_MAX ? DSC_FQ_WEIGHT_MAX : weight;
    f->refs = 1;
    f->shared = (unsigned)shared;
    if (shared) {
        f->next_named = fq->named;
        fq->named = f;
    }
    return f;
}

static void flow_free(dsc_fq_t *fq, dsc_fq_flow_t *flow) {
    if (fq->totals)
        dsc_fq_take_totals(fq->totals, flow);
    if (flow->shared)
        for (dsc_fq_flow_t **p = &fq->named; *p; p = &(*p)->next_named)
            if (*p == flow) {
                *p = flow->next_named;
                break;
            }
    free(flow);
}

void dsc_fq_flow_put(dsc_fq_t *fq, dsc_fq_flow_t *flow) {
    if (flow == NULL)
        return;
    if (--flow->refs == 0 && flow->queued == 0)
        flow_free(fq, flow);
}

void dsc_fq_push(dsc_fq_t *fq, dsc_fq_flow_t *flow, dsc_fq_item_t *item, uint64_t now_ns) {
    item->next = NULL;
    item->enq_ns = now_ns;
    item->seq = fq->next_seq++;
    if (flow->tail)
        flow->tail->next = item;
    else
        flow->head = item;
    flow->tail = item;
    flow->queued++;
    flow->queued_bytes += item->bytes;
    fq->queued++;
    fq->queued_bytes += item->bytes;
    if (!flow->active) {
        /* A flow that was idle starts with nothing saved up, at the end of the turn order. */
        flow->active = 1;
        flow->granted = 0;
        flow->deficit = 0;
        flow->next_active = NULL;
        if (fq->active_tail)
            fq->active_tail->next_active = flow;
        else
            fq->active_head = flow;
        fq->active_tail = flow;
    }
}

/* Unlinks flow (after prev, NULL: the head) from the active list. */
static void active_unlink(dsc_fq_t *fq, dsc_fq_flow_t *prev, dsc_fq_flow_t *flow) {
    if (prev)
        prev->next_active = flow->next_active;
    else
        fq->active_head = flow->next_active;
    if (fq->active_tail == flow)
        fq->active_tail = prev;
    flow->next_active = NULL;
    flow->active = 0;
    flow->granted = 0;
    flow->deficit = 0;
}

static dsc_fq_item_t *take_head(dsc_fq_t *fq, dsc_fq_flow_t *prev, dsc_fq_flow_t *f,
                                uint64_t now_ns) {
    dsc_fq_item_t *it = f->head;
    f->head = it->next;
    if (f->head == NULL)
        f->tail = NULL;
    it->next = NULL;
    f->queued--;
    f->queued_bytes -= it->bytes;
    fq->queued--;
    fq->queued_bytes -= it->bytes;
    f->sent_bytes += it->bytes;
    f->sent_items++;
    f->queue_ns += now_ns > it->enq_ns ? now_ns - it->enq_ns : 0;
    if (f->head == NULL)
        active_unlink(fq, prev, f); /* an emptied flow keeps no deficit */
    return it;
}

dsc_fq_item_t *dsc_fq_pop(dsc_fq_t *fq, uint64_t now_ns) {
    if (fq->active_head == NULL)
        return NULL;
    dsc_fq_flow_t *f = NULL, *prev = NULL;
    if (fq->fifo) {
        /* The oldest head among the active flows. */
        dsc_fq_flow_t *p = NULL;
        for (dsc_fq_flow_t *g = fq->active_head; g; p = g, g = g->next_active)
            if (f == NULL || g->head->seq < f->head->seq) {
                f = g;
                prev = p;
            }
    } else {
        /* Each turn adds quantum x weight to the flow's deficit; it sends while its head fits,
         * then goes to the back. Terminates: every turn adds at least one quantum. */
        for (;;) {
            f = fq->active_head;
            if (!f->granted) {
                f->deficit += (int64_t)(fq->quantum * f->weight);
                f->granted = 1;
            }
            if ((int64_t)f->head->bytes <= f->deficit) {
                f->deficit -= (int64_t)f->head->bytes;
                break;
            }
            f->granted = 0;
            if (f->next_active != NULL) { /* to the back of the turn order */
                fq->active_head = f->next_active;
                fq->active_tail->next_active = f;
                fq->active_tail = f;
                f->next_active = NULL;
            }
        }
    }
    dsc_fq_item_t *it = take_head(fq, prev, f, now_ns);
    if (fq->totals && (!f->active || f->sent_items >= DSC_FQ_TOTALS_EVERY ||
                       f->sent_bytes >= DSC_FQ_TOTALS_BYTES))
        dsc_fq_take_totals(fq->totals, f);
    if (!f->active && f->refs == 0)
        flow_free(fq, f); /* its last connection closed while its items were queued */
    return it;
}

uint32_t dsc_fq_remove(dsc_fq_t *fq, dsc_fq_flow_t *flow, int (*drop)(dsc_fq_item_t *, void *),
                       void *arg) {
    uint32_t n = 0;
    dsc_fq_item_t **p = &flow->head, *last = NULL;
    while (*p) {
        dsc_fq_item_t *it = *p, *next = it->next;
        uint64_t bytes = it->bytes;
        if (drop(it, arg)) { /* it may be freed by now */
            *p = next;
            flow->queued--;
            flow->queued_bytes -= bytes;
            fq->queued--;
            fq->queued_bytes -= bytes;
            n++;
        } else {
            last = it;
            p = &it->next;
        }
    }
    flow->tail = last;
    if (flow->head == NULL && flow->active) {
        dsc_fq_flow_t *prev = NULL;
        for (dsc_fq_flow_t *g = fq->active_head; g && g != flow; g = g->next_active)
            prev = g;
        active_unlink(fq, prev, flow);
    }
    if (flow->queued == 0 && flow->refs == 0)
        flow_free(fq, flow);
    return n;
}

void dsc_fq_destroy(dsc_fq_t *fq) {
    while (fq->named)
        flow_free(fq, fq->named);
    fq->active_head = fq->active_tail = NULL;
}

/* ---- the send budget ------------------------------------------------------------------------ */

void dsc_fq_budget_init(dsc_fq_budget_t *b, uint64_t rate, uint64_t burst) {
    memset(b, 0, sizeof *b);
    pthread_mutex_init(&b->lock, NULL);
    b->rate = rate;
    b->burst = burst ? burst : rate / 100 > (256u << 10) ? rate / 100 : (256u << 10);
    b->tokens = (double)b->burst;
}

void dsc_fq_budget_destroy(dsc_fq_budget_t *b) {
    pthread_mutex_destroy(&b->lock);
}

double dsc_fq_budget_take(dsc_fq_budget_t *b, uint64_t now_ns, uint64_t *wait_ns) {
    pthread_mutex_lock(&b->lock);
    *wait_ns = 0;
    if (b->rate == 0)
        return 1e18;
    if (b->last_ns != 0 && now_ns > b->last_ns) {
        b->tokens += (double)(now_ns - b->last_ns) * (double)b->rate / 1e9;
        if (b->tokens > (double)b->burst)
            b->tokens = (double)b->burst;
    }
    if (now_ns > b->last_ns)
        b->last_ns = now_ns;
    if (b->tokens <= 0)
        *wait_ns = (uint64_t)((1.0 - b->tokens) * 1e9 / (double)b->rate) + 1;
    return b->tokens;
}

void dsc_fq_budget_spend(dsc_fq_budget_t *b, uint64_t bytes, int waited) {
    if (b->rate != 0)
        b->tokens -= (double)bytes;
    b->waits += waited != 0;
    pthread_mutex_unlock(&b->lock);
}

/* ---- totals per job ----------------------------------------------------------------------- */

void dsc_fq_totals_init(dsc_fq_totals_t *t) {
    memset(t, 0, sizeof *t);
    pthread_mutex_init(&t->lock, NULL);
}

void dsc_fq_totals_destroy(dsc_fq_totals_t *t) {
    pthread_mutex_destroy(&t->lock);
}

void dsc_fq_take_totals(dsc_fq_totals_t *t, dsc_fq_flow_t *flow) {
    if (flow->sent_items == 0)
        return;
    pthread_mutex_lock(&t->lock);
    dsc_fq_total_t *e = NULL;
    for (uint32_t i = 0; i < t->count && e == NULL; i++)
        if (strcmp(t->ent[i].name, flow->name) == 0 && strcmp(t->ent[i].owner, flow->owner) == 0)
            e = &t->ent[i];
    if (e == NULL && t->count < DSC_FQ_STATS_MAX) {
        e = &t->ent[t->count++];
        snprintf(e->name, sizeof e->name, "%s", flow->name);
        snprintf(e->owner, sizeof e->owner, "%s", flow->owner);
        e->weight = flow->shared ? flow->weight : 1;
    }
    if (e == NULL) { /* the table is full: the rest counted together under "*" */
        e = &t->ent[DSC_FQ_STATS_MAX];
        snprintf(e->name, sizeof e->name, "*");
        e->weight = 0;
    }
    e->sent_bytes += flow->sent_bytes;
    e->sent_items += flow->sent_items;
    e->queue_ns += flow->queue_ns;
    pthread_mutex_unlock(&t->lock);
    flow->sent_bytes = flow->sent_items = flow->queue_ns = 0;
}

uint32_t dsc_fq_totals_snapshot(dsc_fq_totals_t *t, dsc_fq_total_t *out, uint32_t cap) {
    pthread_mutex_lock(&t->lock);
    uint32_t n = t->count + (t->ent[DSC_FQ_STATS_MAX].sent_items > 0);
    for (uint32_t i = 0, k = 0; i <= DSC_FQ_STATS_MAX && k < cap; i++) {
        if (i < t->count || (i == DSC_FQ_STATS_MAX && t->ent[i].sent_items > 0))
            out[k++] = t->ent[i];
    }
    pthread_mutex_unlock(&t->lock);
    return n;
}

int dsc_fq_parse_weight(const char *spec, char owner[DSC_FQ_NAME_MAX], char name[DSC_FQ_NAME_MAX],
                        uint32_t *weight) {
    const char *eq = spec ? strrchr(spec, '=') : NULL;
    if (eq == NULL || !dsc_report_job_valid(spec, (size_t)(eq - spec)))
        return DSC_EINVAL;
    char *end = NULL;
    unsigned long w = strtoul(eq + 1, &end, 10);
    if (eq[1] < '0' || eq[1] > '9' || *end != '\0' || w == 0 || w > DSC_FQ_WEIGHT_MAX)
        return DSC_EINVAL;
    const char *colon = memchr(spec, ':', (size_t)(eq - spec));
    size_t ol = colon ? (size_t)(colon - spec) : 0;
    if (colon && dsc_auth_name_valid(spec, ol) && ol < DSC_FQ_NAME_MAX &&
        dsc_report_job_valid(colon + 1, (size_t)(eq - colon - 1))) {
        memcpy(owner, spec, ol);
        owner[ol] = '\0';
        memcpy(name, colon + 1, (size_t)(eq - colon - 1));
        name[eq - colon - 1] = '\0';
    } else {
        owner[0] = '\0';
        memcpy(name, spec, (size_t)(eq - spec));
        name[eq - spec] = '\0';
    }
    *weight = (uint32_t)w;
    return 0;
}
