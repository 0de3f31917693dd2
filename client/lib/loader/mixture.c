/* Mixtures (docs/mixtures.md): one loader per source, batches composed by the quota method
 * (every source within one sample of its share after every sample), exact resume. Uses the
 * loaders through the public API only.
 * Over 1,000 lines: the engine and the loader over it (the composer thread, from "A loader over
 * a mixture" on) share the mixture's private state, and the engine's state save, load and
 * position call into a running composer; cutting them apart needs that call-back as a seam of
 * its own first (else the two files would call each other). */
#include "mixture.h"

#include "batch.h"
#include "pack.h"
#include "shard.h"
#include "util.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIX_MAX_SOURCES 64
#define MIX_STATE_MAGIC "DSCM"
#define MIX_STATE_VERSION 2
#define MIX_SOURCE_BATCH_MIN 64 /* a smaller share reads up to four steps' worth a batch */
#define MIX_MAX_EXTRA 64        /* leftover batches of old ranks after a world-size change */

/* A source batch being read: the batch, its needed fields' views and the samples used. */
typedef struct mix_piece {
    dsc_loader_t *owner; /* a temporary loader of an old rank (leftovers), else NULL */
    dsc_batch_t *batch;
    dsc_field_view_t views[DSC_MAX_FIELDS];
    uint32_t samples, cursor;
    int packed;            /* a packed source's packed batch (pb), rows as samples */
    dsc_packed_batch_t pb; /* valid until its packer's next call */
} mix_piece_t;

#define MIX_STATE_MAX DSC_PACK_STATE_MAX_BYTES /* a source's state: its loader's or packer's */
#define HAVE(p) ((p)->batch != NULL || (p)->packed)

/* One source: its loader, the batch being read (with the loader's state before it), the
 * samples of it used, and where it stands in its source-epoch (repeat). */
typedef struct mix_source {
    dsc_loader_t *loader;
    dsc_loader_options_t lo; /* what its loader was made with (temporary loaders of old ranks) */
    char *dataset, *servers, *auth_file, *fallback_path;
    double weight, repeat;
    uint32_t batch;
    uint32_t full;   /* whole passes per source-epoch (repeat's integer part) */
    uint64_t cut;    /* samples of the part pass (repeat's fraction), per rank; 0: none */
    uint64_t passes; /* whole passes done in the source-epoch */
    uint64_t taken;  /* samples taken in the pass under way */
    uint64_t loader_epoch;
    uint64_t dataset_samples;
    int ends; /* pass ends in a row without a batch: 2 means no epoch left */
    uint32_t field_index[DSC_MAX_FIELDS]; /* the needed fields' indexes in its dataset */
    mix_piece_t cur;                      /* HAVE(&cur) 0: none */
    dsc_packer_t *packer;                 /* packing: the source's packer over its loader */
    uint32_t *row_seg;                    /* packing: per row of cur.pb, its first segment */
    uint8_t before[MIX_STATE_MAX];
    int before_len;
    uint32_t skip;  /* after state_load: samples of the first batch already used */
    uint64_t count; /* samples picked since step 0 (the quota counter) */
    uint64_t delivered;
    uint64_t epoch; /* source-epoch */
    /* After a resume onto another world size: the old ranks' part-used batches this rank
     * delivers first, and what they came from (saved while they last). */
    mix_piece_t extra[MIX_MAX_EXTRA];
    uint32_t extra_n, extra_at;
    int carry;
    uint32_t carry_world;
    uint8_t carry_state[DSC_STATE_MAX_BYTES];
    int carry_len;
    uint64_t carry_skip, carry_used;
} mix_source_t;

/* A needed field's output buffers. */
typedef struct mix_field {
    char name[DSC_MAX_NAME];
    dsc_field_info_t info;
    int var;
    uint64_t row_bytes; /* var: bytes per row; fixed: bytes per sample */
    uint8_t *values;
    size_t values_cap, values_len;
    int64_t *offsets;
} mix_field_t;

struct dsc_mixture {
    dsc_logger_t log;
    uint32_t count, batch_size;
    uint32_t rank, world;
    int stop; /* exhausted "stop" */
    mix_source_t src[MIX_MAX_SOURCES];
    uint32_t field_count;
    mix_field_t fields[DSC_MAX_FIELDS];
    uint64_t total; /* samples picked since step 0 */
    uint64_t step, epoch;
    int stop_next, dead;
    uint64_t identity;
    int have_batch;
    uint32_t batch_samples;
    int32_t *source;
    uint64_t *indices, *source_epoch;
    uint32_t *picks;
    char error[512];
    /* The outputs (fields' values and offsets, source, indices) are a loader's batch slot
     * (dsc_loader_create with sources): set before each next, not the mixture's to free or grow. */
    int external;
    struct mix_run *run; /* that loader's composer thread (NULL: composed in next()) */
    /* Packing: the batch's rows (batch_size at most) of pack_len tokens and their segments. */
    int packed;
    uint32_t pack_len, pack_elem;
    int pack_dtype;
    uint8_t *ptok;
    int32_t *ppos, *pdid, *pcu;
    int64_t *psi, *pss;
    uint32_t psegs;
    uint64_t ptokens;
};

static _Thread_local char create_error[512];

/* The loader over the mixture composes ahead (below): the public state, info and stats calls
 * on its mixture give the consumer's side. */
static int run_state_save(const dsc_mixture_t *m, void *buf, size_t cap);
static int run_state_load(dsc_mixture_t *m, const void *buf, size_t len);
static void run_position(const dsc_mixture_t *m, uint64_t *epoch, uint64_t *step,
                         uint64_t *delivered);
static int run_start(dsc_loader_t *l);
static void run_stop(dsc_loader_t *l);

/* Says why (the log, and the text dsc_mixture_last_error gives). */
#define MIX_ERR(m, ...)                                                                            \
    do {                                                                                           \
        snprintf((m)->error, sizeof(m)->error, __VA_ARGS__);                                       \
        DSC_LOG(&(m)->log, DSC_LOG_ERROR, "%s", (m)->error);                                       \
    } while (0)

DSC_EXTERN int dsc_source_options_init(dsc_source_options_t *options, size_t size) {
    if (options == NULL || size < offsetof(dsc_source_options_t, repeat))
        return DSC_EINVAL;
    memset(options, 0, size);
    options->struct_size = size;
    options->weight = 1.0;
    if (size >= offsetof(dsc_source_options_t, repeat) + sizeof options->repeat)
        options->repeat = 1.0;
    return 0;
}

static void piece_drop(mix_piece_t *p) {
    p->packed = 0;
    if (p->batch != NULL)
        dsc_batch_release(p->batch);
    if (p->owner != NULL)
        dsc_loader_destroy(p->owner);
    p->batch = NULL, p->owner = NULL;
    p->samples = p->cursor = 0;
}

static void extra_clear(mix_source_t *s) {
    for (uint32_t i = 0; i < s->extra_n; i++)
        piece_drop(&s->extra[i]);
    s->extra_n = s->extra_at = 0;
    s->carry = 0;
}

DSC_EXTERN void dsc_mixture_destroy(dsc_mixture_t *mixture) {
    if (mixture == NULL)
        return;
    for (uint32_t k = 0; k < mixture->count; k++) {
        mix_source_t *s = &mixture->src[k];
        piece_drop(&s->cur);
        extra_clear(s);
        dsc_packer_destroy(s->packer);
        free(s->row_seg);
        dsc_loader_destroy(s->loader);
        free(s->dataset);
        free(s->servers);
        free(s->auth_file);
        free(s->fallback_path);
    }
    for (uint32_t f = 0; f < mixture->field_count && !mixture->external; f++) {
        free(mixture->fields[f].values);
        free(mixture->fields[f].offsets);
    }
    if (!mixture->external) {
        free(mixture->source);
        free(mixture->indices);
        free(mixture->source_epoch);
    }
    free(mixture->picks);
    free(mixture->ptok);
    free(mixture->ppos);
    free(mixture->pdid);
    free(mixture->pcu);
    free(mixture->psi);
    free(mixture->pss);
    free(mixture);
}

DSC_EXTERN int dsc_mixture_last_error(const dsc_mixture_t *mixture, char *buf, size_t cap) {
    const char *text = mixture ? mixture->error : create_error;
    if (buf != NULL && cap > 0)
        snprintf(buf, cap, "%s", text);
    return (int)strlen(text);
}

static char *dup_or_null(const char *s, int *fail) {
    if (s == NULL)
        return NULL;
    char *d = strdup(s);
    if (d == NULL)
        *fail = 1;
    return d;
}

/* A source's batch: ceil(batch_size * weight / W) in millionths, as the Python binding did. */
static uint32_t share_of(uint32_t batch_size, double weight, double wsum) {
    uint64_t w = (uint64_t)(weight * 1e6), all = (uint64_t)(wsum * 1e6);
    uint64_t n = all ? ((uint64_t)batch_size * w + all - 1) / all : 1;
    return n < 1 ? 1 : (uint32_t)n;
}

/* A source's part of a count the mixture shares out by weight: round(n * weight / W), at least
 * 1 (n 0: 0, the loader's default). */
static uint32_t share_count(uint32_t n, double weight, double wsum) {
    if (n == 0)
        return 0;
    double part = nearbyint((double)n * weight / wsum);
    return part < 1 ? 1 : (uint32_t)part;
}

static void describe(const dsc_field_info_t *fi, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "%s[", dsc_dtype_name(fi->dtype));
    for (uint32_t d = 0; d < fi->ndim && n < cap; d++) {
        if (fi->shape[d] < 0)
            n += (size_t)snprintf(buf + n, cap - n, "%s?", d ? "," : "");
        else
            n +=
                (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? "," : "", (long long)fi->shape[d]);
    }
    const char *d = dsc_dtype_name(fi->dtype); /* "i32" -> "int32", as numpy names it */
    const char *word = d[0] == 'i' ? "int" : d[0] == 'u' ? "uint" : d[0] == 'f' ? "float" : "";
    if (n < cap)
        snprintf(buf + n, cap - n, "] (%s%s)", word, *word ? d + 1 : d);
}

static int find_field(dsc_loader_t *l, const char *name, dsc_field_info_t *out) {
    uint32_t n = dsc_loader_field_count(l);
    for (uint32_t f = 0; f < n; f++)
        if (dsc_loader_field(l, f, out) == 0 && strcmp(out->name, name) == 0)
            return (int)f;
    return -1;
}

/* Checks the needed fields against every source and sets up their output buffers. */
static int agree(dsc_mixture_t *m, const char *const *names, uint32_t n) {
    char want[128], have[128];
    for (uint32_t f = 0; f < n; f++) {
        mix_field_t *mf = &m->fields[f];
        for (uint32_t k = 0; k < m->count; k++) {
            dsc_field_info_t fi;
            int at = find_field(m->src[k].loader, names[f], &fi);
            if (at < 0) {
                MIX_ERR(m, "mixture: source '%s' has no field '%s'", m->src[k].dataset, names[f]);
                return DSC_EINVAL;
            }
            if (k == 0) {
                mf->info = fi;
            } else if (fi.dtype != mf->info.dtype || fi.ndim != mf->info.ndim ||
                       memcmp(fi.shape, mf->info.shape, sizeof fi.shape[0] * fi.ndim) != 0) {
                describe(&mf->info, want, sizeof want);
                describe(&fi, have, sizeof have);
                MIX_ERR(m, "mixture: field '%s' differs between sources: '%s' has %s, '%s' has %s",
                        names[f], m->src[0].dataset, want, m->src[k].dataset, have);
                return DSC_EINVAL;
            }
            const dsc_var_field_t *var = &m->src[k].loader->cfg.var[at];
            if (var->pad || var->image) {
                MIX_ERR(m, "mixture: field '%s' is %s: a mixture takes values + offsets", names[f],
                        var->pad ? "padded" : "decoded as an image");
                return DSC_EINVAL;
            }
            m->src[k].field_index[f] = (uint32_t)at;
        }
        snprintf(mf->name, sizeof mf->name, "%s", names[f]);
        mf->var = mf->info.ndim > 0 && mf->info.shape[0] < 0;
        mf->row_bytes = mf->info.sample_bytes;
        if (!mf->var) {
            mf->values_cap = (size_t)mf->row_bytes * m->batch_size;
            mf->values = malloc(mf->values_cap ? mf->values_cap : 1);
        } else {
            mf->offsets = calloc((size_t)m->batch_size + 1, sizeof(int64_t));
        }
        if ((mf->var && mf->offsets == NULL) || (!mf->var && mf->values == NULL))
            return DSC_ENOMEM;
    }
    m->field_count = n;
    return 0;
}

/* The part pass (repeat's fraction) of source s on `world` ranks: samples per rank (0: none). */
static uint64_t part_cut(const mix_source_t *s, uint32_t world) {
    double frac = s->repeat - (double)s->full;
    if (!(frac > 0))
        return 0;
    uint64_t per_rank = (s->dataset_samples + world - 1) / world;
    double cut = nearbyint(frac * (double)per_rank); /* half to even, as Python round */
    return cut < 1 ? 1 : (uint64_t)cut;
}

/* A source's state: its packer's when packed, else its loader's. */
static int src_save(const mix_source_t *s, uint8_t *buf, size_t cap) {
    return s->packer ? dsc_packer_state_save(s->packer, buf, cap)
                     : dsc_loader_state_save(s->loader, buf, cap);
}
static int src_load(mix_source_t *s, const uint8_t *buf, size_t len) {
    return s->packer ? dsc_packer_state_load(s->packer, buf, len)
                     : dsc_loader_state_load(s->loader, buf, len);
}

/* shared 1 (fields NULL): the batch holds the fields every source has (in the first source's
 * order) rather than every field of the first source. */
static int mixture_create(const dsc_loader_options_t *common, const dsc_source_options_t *sources,
                          uint32_t count, const char *const *fields, uint32_t field_count,
                          const dsc_pack_options_t *pack, int shared, dsc_mixture_t **out) {
    if (common != NULL && sources == NULL && count == 0 &&
        common->struct_size >= offsetof(dsc_loader_options_t, n_sources) + sizeof(uint32_t))
        sources = common->sources, count = common->n_sources; /* the options' own sources */
    if (common == NULL || out == NULL || (sources == NULL && count > 0) ||
        (fields == NULL && field_count > 0)) {
        snprintf(create_error, sizeof create_error, "mixture: NULL options, sources or fields");
        return DSC_EINVAL;
    }
    dsc_loader_options_t opt;
    if (dsc_loader_options_init2(&opt, sizeof opt) < 0)
        return DSC_EINVAL;
    memcpy(&opt, common, common->struct_size < sizeof opt ? common->struct_size : sizeof opt);
    opt.struct_size = sizeof opt;
    opt.sources = NULL, opt.n_sources = 0;
    dsc_mixture_t *m = calloc(1, sizeof *m);
    if (m == NULL)
        return DSC_ENOMEM;
    dsc__logger_init(&m->log, opt.log_fn, opt.log_ctx, opt.log_level);
    int rc = DSC_EINVAL;
    if (count == 0 || count > MIX_MAX_SOURCES || field_count > DSC_MAX_FIELDS) {
        MIX_ERR(m, "mixture: %u sources (1 .. %u)%s", count, MIX_MAX_SOURCES,
                field_count > DSC_MAX_FIELDS ? ", too many fields" : "");
        goto fail;
    }
    if (opt.order != DSC_ORDER_LOCAL || opt.device >= 0) {
        MIX_ERR(m, "mixture: %s",
                opt.device >= 0 ? "host batches only (device -1)" : "local order only");
        goto fail;
    }
    if (opt.exhausted != DSC_EXHAUSTED_WRAP && opt.exhausted != DSC_EXHAUSTED_STOP) {
        MIX_ERR(m, "mixture: exhausted %d (DSC_EXHAUSTED_WRAP or DSC_EXHAUSTED_STOP)",
                opt.exhausted);
        goto fail;
    }
    m->stop = opt.exhausted == DSC_EXHAUSTED_STOP;
    m->batch_size = opt.batch_size ? opt.batch_size : 32;
    m->rank = opt.rank;
    m->world = opt.world_size ? opt.world_size : 1;
    size_t stride = sources[0].struct_size;
    if (stride < offsetof(dsc_source_options_t, repeat)) {
        MIX_ERR(m, "mixture: source options struct_size %zu too small", stride);
        goto fail;
    }
    double wsum = 0;
    for (uint32_t k = 0; k < count; k++) {
        const dsc_source_options_t *so =
            (const dsc_source_options_t *)((const char *)sources + k * stride);
        const char *name = so->dataset ? so->dataset : "(null)";
        double repeat =
            stride >= offsetof(dsc_source_options_t, repeat) + sizeof so->repeat && so->repeat != 0
                ? so->repeat
                : 1.0;
        if (so->dataset == NULL || so->dataset[0] == '\0' || !(so->weight > 0) ||
            !isfinite(so->weight) || !(repeat > 0) || !isfinite(repeat)) {
            MIX_ERR(m, "mixture: source %u ('%s'): %s", k, name,
                    so->dataset == NULL || so->dataset[0] == '\0' ? "no dataset"
                    : !(so->weight > 0) || !isfinite(so->weight)  ? "weight must be > 0 and finite"
                                                                 : "repeat must be > 0 and finite");
            goto fail;
        }
        for (uint32_t j = 0; j < k; j++)
            if (strcmp(m->src[j].dataset, so->dataset) == 0) {
                MIX_ERR(m, "mixture: dataset '%s' named twice", name);
                goto fail;
            }
        wsum += so->weight;
        mix_source_t *s = &m->src[k];
        int oom = 0;
        s->dataset = dup_or_null(so->dataset, &oom);
        s->servers = dup_or_null(so->servers ? so->servers : opt.servers, &oom);
        s->auth_file = dup_or_null(so->auth_file ? so->auth_file : opt.auth_file, &oom);
        s->fallback_path = dup_or_null(so->fallback_path, &oom);
        s->weight = so->weight;
        s->repeat = repeat;
        m->count = k + 1;
        if (oom) {
            rc = DSC_ENOMEM;
            goto fail;
        }
    }
    for (uint32_t k = 0; k < count; k++) {
        const dsc_source_options_t *so =
            (const dsc_source_options_t *)((const char *)sources + k * stride);
        mix_source_t *s = &m->src[k];
        dsc_loader_options_t lo = opt;
        lo.dataset = s->dataset;
        lo.servers = s->servers;
        lo.auth_file = s->auth_file;
        if (so->replicas)
            lo.replicas = so->replicas;
        lo.fallback_path = s->fallback_path;
        if (so->shuffle_window)
            lo.shuffle_window = so->shuffle_window;
        lo.seed = opt.seed + k;
        /* The common decode threads and connections are shared out by weight (at least one
         * each), not given to every source: three sources with the common 2 + 2 each ran at
         * 0.38x of one loader on a loaded 2-core machine, with 1 + 1 each at 0.83x in the same
         * minutes (docs/benchmarks.md). */
        lo.decode_threads = share_count(opt.decode_threads, so->weight, wsum);
        lo.connections = share_count(opt.connections, so->weight, wsum);
        /* A source batch of about four steps' share (up to 64 samples; a larger share as it
         * is): the loader's per-batch work is paid by more samples. */
        lo.batch_size = share_of(m->batch_size, so->weight, wsum);
        if (lo.batch_size < MIX_SOURCE_BATCH_MIN)
            lo.batch_size =
                lo.batch_size * 4 < MIX_SOURCE_BATCH_MIN ? lo.batch_size * 4 : MIX_SOURCE_BATCH_MIN;
        s->batch = lo.batch_size;
        if (pack != NULL && lo.batch_size < 256) /* a packed batch takes a few loader batches */
            lo.batch_size = 256;
        rc = dsc_loader_create(&lo, &s->loader);
        if (rc < 0) {
            char why[400];
            dsc_loader_last_error(NULL, why, sizeof why);
            MIX_ERR(m, "mixture: source '%s': %s (%s)", so->dataset, dsc_strerror(rc), why);
            goto fail;
        }
        /* Kept for the temporary loaders of old ranks (a resume onto another world size): the
         * strings are the mixture's copies; what create copies is not needed again. */
        lo.job_name = NULL, lo.transport = NULL, lo.field_options = NULL;
        lo.field_option_count = 0;
        lo.ignore_rank_env = 1;
        lo.report_seconds = -1;
        lo.stats_log_seconds = 0;
        s->lo = lo;
        s->dataset_samples = dsc_loader_dataset_samples(s->loader);
        if (s->dataset_samples == 0) {
            MIX_ERR(m, "mixture: source '%s' is empty (0 samples)", so->dataset);
            rc = DSC_EINVAL;
            goto fail;
        }
        s->full = (uint32_t)s->repeat;
        double frac = s->repeat - (double)s->full;
        if (frac > 0 && pack != NULL) {
            MIX_ERR(m,
                    "mixture: source '%s': a fractional repeat (%g) is not supported with "
                    "packing (a pass's rows are not known ahead)",
                    so->dataset, s->repeat);
            rc = DSC_EINVAL;
            goto fail;
        }
        s->cut = part_cut(s, m->world);
    }
    const char *first[DSC_MAX_FIELDS];
    char names[DSC_MAX_FIELDS][DSC_MAX_NAME];
    if (fields == NULL) { /* every field of the first source (shared: that all sources have) */
        uint32_t all = dsc_loader_field_count(m->src[0].loader);
        field_count = 0;
        for (uint32_t f = 0; f < all; f++) {
            dsc_field_info_t fi, other;
            dsc_loader_field(m->src[0].loader, f, &fi);
            uint32_t k = 1;
            while (shared && k < count && find_field(m->src[k].loader, fi.name, &other) >= 0)
                k++;
            if (shared && k < count)
                continue;
            snprintf(names[field_count], DSC_MAX_NAME, "%s", fi.name);
            first[field_count] = names[field_count];
            field_count++;
        }
        if (field_count == 0) { /* name a source that has none of the first's fields */
            char list[256];
            size_t len = 0;
            list[0] = '\0';
            uint32_t culprit = count - 1;
            for (uint32_t f = 0; f < all && len < sizeof list; f++) {
                dsc_field_info_t fi;
                dsc_loader_field(m->src[0].loader, f, &fi);
                len += (size_t)snprintf(list + len, sizeof list - len, "%s'%s'", f ? ", " : "",
                                        fi.name);
            }
            for (uint32_t k = count - 1; k > 0; k--) {
                uint32_t has = 0;
                for (uint32_t f = 0; f < all; f++) {
                    dsc_field_info_t fi, other;
                    dsc_loader_field(m->src[0].loader, f, &fi);
                    has += find_field(m->src[k].loader, fi.name, &other) >= 0;
                }
                if (has == 0)
                    culprit = k;
            }
            MIX_ERR(m,
                    "mixture: the sources have no field in common: source '%s' lacks the fields "
                    "of '%s' (%s)",
                    m->src[culprit].dataset, m->src[0].dataset, list);
            rc = DSC_EINVAL;
            goto fail;
        }
        fields = first;
    }
    if (pack != NULL) {
        if (pack->struct_size < sizeof *pack || pack->field == NULL) {
            MIX_ERR(m, "mixture: pack options without a field (or struct_size too small)");
            rc = DSC_EINVAL;
            goto fail;
        }
        fields = &pack->field, field_count = 1;
    }
    rc = agree(m, fields, field_count);
    if (rc < 0)
        goto fail;
    if (pack != NULL) {
        m->packed = 1;
        m->pack_len = pack->length;
        for (uint32_t k = 0; k < count; k++) {
            mix_source_t *s = &m->src[k];
            dsc_pack_options_t po = *pack;
            po.struct_size = sizeof po;
            po.rows = s->batch;
            rc = dsc_packer_create(s->loader, &po, &s->packer);
            if (rc < 0) {
                char why[400];
                dsc_loader_last_error(s->loader, why, sizeof why);
                MIX_ERR(m, "mixture: source '%s': %s", s->dataset, why[0] ? why : dsc_strerror(rc));
                goto fail;
            }
            s->row_seg = calloc((size_t)s->batch + 1, sizeof *s->row_seg);
            if (s->row_seg == NULL) {
                rc = DSC_ENOMEM;
                goto fail;
            }
        }
        m->pack_dtype = m->fields[0].info.dtype;
        m->pack_elem = (uint32_t)dsc_dtype_size(m->pack_dtype);
        size_t slots = (size_t)m->batch_size * m->pack_len, segs = slots + m->batch_size;
        m->ptok = malloc(slots * m->pack_elem + 1);
        m->ppos = malloc(slots * sizeof(int32_t) + 1);
        m->pdid = malloc(slots * sizeof(int32_t) + 1);
        m->pcu = malloc((segs + 1) * sizeof(int32_t));
        m->psi = malloc(segs * sizeof(int64_t) + 1);
        m->pss = malloc(segs * sizeof(int64_t) + 1);
        if (!m->ptok || !m->ppos || !m->pdid || !m->pcu || !m->psi || !m->pss) {
            rc = DSC_ENOMEM;
            goto fail;
        }
    }
    m->source = calloc(m->batch_size, sizeof *m->source);
    m->indices = calloc(m->batch_size, sizeof *m->indices);
    m->source_epoch = calloc(m->batch_size, sizeof *m->source_epoch);
    m->picks = calloc(m->batch_size, sizeof *m->picks);
    if (!m->source || !m->indices || !m->source_epoch || !m->picks) {
        rc = DSC_ENOMEM;
        goto fail;
    }
    /* What the composition depends on, for state_load. */
    uint64_t id = opt.seed * 1000003u + m->batch_size;
    id = id * 31 + (uint64_t)m->stop;
    for (uint32_t k = 0; k < count; k++) {
        id = id * 31 + dsc_checksum(m->src[k].dataset, strlen(m->src[k].dataset));
        id = id * 31 + dsc_checksum(&m->src[k].weight, sizeof m->src[k].weight);
        id = id * 31 + dsc_checksum(&m->src[k].repeat, sizeof m->src[k].repeat);
    }
    for (uint32_t f = 0; f < m->field_count; f++)
        id = id * 31 + dsc_checksum(m->fields[f].name, strlen(m->fields[f].name));
    if (pack != NULL)
        id = id * 31 + pack->length * 2u + (pack->cut ? 1u : 0u);
    m->identity = id;
    for (uint32_t k = 0; k < count; k++)
        m->src[k].before_len = src_save(&m->src[k], m->src[k].before, sizeof m->src[k].before);
    *out = m;
    return 0;
fail:
    snprintf(create_error, sizeof create_error, "%s", m->error);
    dsc_mixture_destroy(m);
    return rc;
}

DSC_EXTERN int dsc_mixture_create(const dsc_loader_options_t *common,
                                  const dsc_source_options_t *sources, uint32_t count,
                                  const char *const *fields, uint32_t field_count,
                                  dsc_mixture_t **out) {
    create_error[0] = '\0';
    return mixture_create(common, sources, count, fields, field_count, NULL, 0, out);
}

DSC_EXTERN int dsc_mixture_create_packed(const dsc_loader_options_t *common,
                                         const dsc_source_options_t *sources, uint32_t count,
                                         const dsc_pack_options_t *pack, dsc_mixture_t **out) {
    create_error[0] = '\0';
    if (pack == NULL) {
        snprintf(create_error, sizeof create_error, "mixture: NULL pack options");
        return DSC_EINVAL;
    }
    return mixture_create(common, sources, count, NULL, 0, pack, 0, out);
}

DSC_EXTERN int dsc_mixture_packed(const dsc_mixture_t *mixture, dsc_packed_batch_t *out) {
    if (mixture == NULL || out == NULL ||
        out->struct_size < offsetof(dsc_packed_batch_t, segment_source) || !mixture->packed ||
        !mixture->have_batch)
        return DSC_EINVAL;
    const dsc_mixture_t *m = mixture;
    size_t size = out->struct_size;
    memset(out, 0, size < sizeof *out ? size : sizeof *out); /* segment_source NULL: see source */
    out->struct_size = size;
    out->epoch = m->epoch;
    out->step = m->step - 1;
    out->rows = m->batch_samples;
    out->length = m->pack_len;
    out->dtype = m->pack_dtype;
    out->tokens = m->ptok;
    out->position_ids = m->ppos;
    out->document_ids = m->pdid;
    out->cu_seqlens = m->pcu;
    out->segments = m->psegs;
    out->segment_index = m->psi;
    out->segment_start = m->pss;
    out->tokens_used = m->ptokens;
    return 0;
}

DSC_EXTERN uint32_t dsc_mixture_field_count(const dsc_mixture_t *mixture) {
    return mixture ? mixture->field_count : 0;
}

DSC_EXTERN int dsc_mixture_field(const dsc_mixture_t *mixture, uint32_t field,
                                 dsc_field_info_t *out) {
    if (mixture == NULL || out == NULL)
        return DSC_EINVAL;
    if (field >= mixture->field_count)
        return DSC_ERANGE;
    *out = mixture->fields[field].info;
    return 0;
}

DSC_EXTERN uint32_t dsc_mixture_source_batch(const dsc_mixture_t *mixture, uint32_t source) {
    return mixture && source < mixture->count ? mixture->src[source].batch : 0;
}

/* The quota method: the source of sample total + 1. */
static uint32_t quota_pick(const dsc_mixture_t *m, uint64_t total) {
    double wsum = 0;
    for (uint32_t k = 0; k < m->count; k++)
        wsum += m->src[k].weight;
    uint32_t best = 0;
    double best_gap = 0;
    for (uint32_t k = 0; k < m->count; k++) {
        double gap = (double)(total + 1) * m->src[k].weight / wsum - (double)m->src[k].count;
        if (k == 0 || gap > best_gap)
            best = k, best_gap = gap;
    }
    return best;
}

/* Views of the needed fields of p->batch. */
static int piece_views(const dsc_mixture_t *m, const mix_source_t *s, mix_piece_t *p) {
    for (uint32_t f = 0; f < m->field_count; f++) {
        memset(&p->views[f], 0, sizeof p->views[f]);
        p->views[f].struct_size = sizeof p->views[f];
        int rc = dsc_batch_field_view(p->batch, s->field_index[f], &p->views[f]);
        if (rc < 0)
            return rc;
    }
    p->samples = dsc_batch_samples(p->batch);
    return 0;
}

/* The next sample of source k: *from and *row, 1; 0 when its source-epoch ends under
 * exhausted "stop" (m->stop_next set); DSC_EOF when it has no epoch left (epochs); or a loader
 * error. The piece stays valid until the next call for this source. */
static int take_one(dsc_mixture_t *m, uint32_t k, mix_piece_t **from, uint32_t *row) {
    mix_source_t *s = &m->src[k];
    while (s->extra_at < s->extra_n) { /* an old world size's leftovers first */
        mix_piece_t *p = &s->extra[s->extra_at];
        if (p->cursor < p->samples) {
            *from = p, *row = p->cursor++;
            if (s->carry != 2) /* an old part pass's rest: taken stays the old ranks' */
                s->taken++;
            s->carry_used++;
            return 1;
        }
        piece_drop(p);
        s->extra_at++;
    }
    if (s->carry) {
        int part = s->carry == 2;
        extra_clear(s);
        if (part && s->taken < s->cut) /* the old part pass is done: so is this source-epoch */
            s->taken = s->cut;
    }
    for (;;) {
        if (s->passes == s->full && s->taken >= s->cut) {
            /* The source-epoch's passes are done (repeat): a part pass is cut short, its loader
             * goes on to its next epoch. */
            if (s->taken > 0) {
                piece_drop(&s->cur);
                s->skip = 0; /* a resume's skip was of the batch cut short, not of the next */
                s->loader_epoch++;
                int rc = dsc_loader_set_epoch(s->loader, s->loader_epoch);
                if (rc < 0) {
                    MIX_ERR(m, "mixture: source '%s': set_epoch: %s", s->dataset, dsc_strerror(rc));
                    return rc;
                }
            }
            s->passes = s->taken = 0;
            s->epoch++;
            if (m->stop) {
                m->stop_next = 1;
                return 0;
            }
        }
        if (HAVE(&s->cur) && s->cur.cursor >= s->cur.samples)
            piece_drop(&s->cur);
        if (!HAVE(&s->cur)) {
            s->before_len = src_save(s, s->before, sizeof s->before);
            if (s->before_len < 0)
                return s->before_len;
            dsc_batch_t *b = NULL;
            int rc;
            if (s->packer != NULL) {
                memset(&s->cur.pb, 0, sizeof s->cur.pb);
                s->cur.pb.struct_size = sizeof s->cur.pb;
                rc = dsc_packer_next(s->packer, &s->cur.pb);
            } else {
                rc = dsc_loader_next(s->loader, &b);
            }
            if (rc == DSC_EOF) { /* a pass ends */
                if (s->ends++ > 0) {
                    DSC_LOG(&m->log, DSC_LOG_INFO,
                            "mixture: source '%s' has no epoch left (epochs): the mixture ends",
                            s->dataset);
                    m->stop_next = m->dead = 1;
                    return DSC_EOF;
                }
                s->loader_epoch++;
                s->passes++;
                s->taken = 0;
                continue;
            }
            if (rc < 0) {
                char why[300];
                dsc_loader_last_error(s->loader, why, sizeof why);
                MIX_ERR(m, "mixture: source '%s': %s (%s)", s->dataset, dsc_strerror(rc), why);
                return rc;
            }
            s->ends = 0;
            if (s->packer != NULL) {
                const dsc_packed_batch_t *pb = &s->cur.pb;
                s->cur.packed = 1;
                s->cur.samples = pb->rows;
                uint32_t g = 0;
                for (uint32_t r = 0; r <= pb->rows; r++) {
                    while (g < pb->segments && pb->cu_seqlens[g] < (int64_t)r * pb->length)
                        g++;
                    s->row_seg[r] = g;
                }
            } else {
                dsc_batch_retain(b); /* kept past the loader's next next() while it is read */
                s->cur.batch = b;
                rc = piece_views(m, s, &s->cur);
                if (rc < 0)
                    return rc;
            }
            s->cur.cursor = s->skip;
            s->skip = 0;
            continue;
        }
        *from = &s->cur, *row = s->cur.cursor++;
        s->taken++;
        return 1;
    }
}

/* Appends sample `row` of piece p to needed field f as batch sample `at`. */
static int append(dsc_mixture_t *m, uint32_t f, const mix_piece_t *p, uint32_t row, uint32_t at) {
    mix_field_t *mf = &m->fields[f];
    const dsc_field_view_t *fv = &p->views[f];
    if (!mf->var) {
        memcpy(mf->values + (size_t)at * mf->row_bytes,
               (const uint8_t *)fv->values.data + (size_t)row * mf->row_bytes, mf->row_bytes);
        return 0;
    }
    int64_t a = fv->offsets[row], e = fv->offsets[row + 1];
    size_t bytes = (size_t)(e - a) * mf->row_bytes;
    if (mf->values_len + bytes > mf->values_cap) {
        if (m->external) {
            MIX_ERR(m,
                    "mixture: field '%s': the batch's values pass the slot's %zu bytes (the "
                    "default budget: batch_size x the sources' largest sample, or 64 MiB)",
                    mf->name, mf->values_cap);
            return DSC_ETOOLARGE;
        }
        size_t cap = mf->values_cap ? mf->values_cap : 4096;
        while (cap < mf->values_len + bytes)
            cap *= 2;
        uint8_t *grown = realloc(mf->values, cap);
        if (grown == NULL)
            return DSC_ENOMEM;
        mf->values = grown, mf->values_cap = cap;
    }
    memcpy(mf->values + mf->values_len,
           (const uint8_t *)fv->values.data + (size_t)a * mf->row_bytes, bytes);
    mf->values_len += bytes;
    mf->offsets[at + 1] = mf->offsets[at] + (e - a);
    return 0;
}

/* Appends row `row` of source s's packed batch as the batch's row `at`: its tokens and
 * positions, and its segments renumbered over the batch (padding runs too, document_ids -1). */
static void append_packed(dsc_mixture_t *m, const mix_source_t *s, uint32_t row, uint32_t at) {
    const dsc_packed_batch_t *pb = &s->cur.pb;
    size_t L = m->pack_len, src = (size_t)row * L, dst = (size_t)at * L;
    memcpy(m->ptok + dst * m->pack_elem, (const uint8_t *)pb->tokens + src * m->pack_elem,
           L * m->pack_elem);
    memcpy(m->ppos + dst, pb->position_ids + src, L * sizeof(int32_t));
    for (uint32_t g = s->row_seg[row]; g < s->row_seg[row + 1]; g++) {
        size_t a = (size_t)pb->cu_seqlens[g] - src, e = (size_t)pb->cu_seqlens[g + 1] - src;
        int32_t id = pb->segment_index[g] < 0 ? -1 : (int32_t)m->psegs;
        for (size_t t = a; t < e; t++)
            m->pdid[dst + t] = id;
        if (id >= 0)
            m->ptokens += e - a;
        m->pcu[m->psegs] = (int32_t)(dst + a);
        m->psi[m->psegs] = pb->segment_index[g];
        m->pss[m->psegs] = pb->segment_start[g];
        m->psegs++;
    }
}

DSC_EXTERN int dsc_mixture_next(dsc_mixture_t *mixture, dsc_mixture_batch_t *out) {
    if (mixture == NULL || out == NULL || out->struct_size < sizeof *out)
        return DSC_EINVAL;
    dsc_mixture_t *m = mixture;
    m->have_batch = 0;
    if (m->dead)
        return DSC_EOF;
    if (m->stop_next) { /* exhausted "stop": the epoch ended with the last batch */
        m->stop_next = 0;
        m->epoch++, m->step = 0;
        return DSC_EOF;
    }
    for (uint32_t f = 0; f < m->field_count; f++) {
        m->fields[f].values_len = 0;
        if (m->fields[f].var)
            m->fields[f].offsets[0] = 0;
    }
    m->psegs = 0, m->ptokens = 0;
    /* The composition first (a pure function of the counters), then each pick's sample; a
     * source that ends under "stop" (or has no epoch left) gives no more in this batch. */
    for (uint32_t i = 0; i < m->batch_size; i++) {
        uint32_t k = quota_pick(m, m->total);
        m->picks[i] = k;
        m->src[k].count++;
        m->total++;
    }
    uint64_t done[(MIX_MAX_SOURCES + 63) / 64] = {0};
    uint32_t n = 0;
    for (uint32_t i = 0; i < m->batch_size; i++) {
        uint32_t k = m->picks[i];
        if (done[k / 64] >> (k % 64) & 1)
            continue;
        mix_piece_t *p = NULL;
        uint32_t row = 0;
        int rc = take_one(m, k, &p, &row);
        if (rc == 0 || rc == DSC_EOF) {
            done[k / 64] |= 1ull << (k % 64);
            continue;
        }
        if (rc < 0)
            return rc;
        mix_source_t *s = &m->src[k];
        if (p->packed) {
            append_packed(m, s, row, n);
        } else {
            for (uint32_t f = 0; f < m->field_count; f++) {
                rc = append(m, f, p, row, n);
                if (rc < 0)
                    return rc;
            }
        }
        m->source[n] = (int32_t)k;
        m->indices[n] = p->packed ? row : dsc_batch_indices(p->batch)[row];
        m->source_epoch[n] = s->epoch;
        s->delivered++;
        n++;
    }
    m->step++;
    if (n == 0) { /* nothing left this epoch */
        m->stop_next = 0;
        m->epoch++, m->step = 0;
        return DSC_EOF;
    }
    if (m->packed)
        m->pcu[m->psegs] = (int32_t)((size_t)n * m->pack_len);
    m->have_batch = 1;
    m->batch_samples = n;
    out->step = m->step - 1;
    out->samples = n;
    out->source = m->source;
    out->indices = m->indices;
    out->source_epoch = m->source_epoch;
    if (out->struct_size >= offsetof(dsc_mixture_batch_t, epoch) + sizeof out->epoch)
        out->epoch = m->epoch;
    return 0;
}

DSC_EXTERN int dsc_mixture_field_view(const dsc_mixture_t *mixture, uint32_t field,
                                      dsc_field_view_t *out) {
    if (mixture == NULL || out == NULL || out->struct_size < sizeof *out || !mixture->have_batch ||
        mixture->packed)
        return DSC_EINVAL;
    if (field >= mixture->field_count)
        return DSC_ERANGE;
    const mix_field_t *mf = &mixture->fields[field];
    size_t size = out->struct_size;
    memset(out, 0, sizeof *out);
    out->struct_size = size;
    out->kind = mf->var ? DSC_FIELD_VALUES : DSC_FIELD_FIXED;
    dsc_tensor_view_t *v = &out->values;
    v->name = mf->name;
    v->data = mf->values;
    v->dtype = mf->info.dtype;
    v->device = -1;
    uint32_t b = mixture->batch_samples;
    if (mf->var) {
        int64_t rows = mf->offsets[b];
        v->ndim = mf->info.ndim;
        v->shape[0] = rows;
        for (uint32_t d = 1; d < mf->info.ndim; d++)
            v->shape[d] = mf->info.shape[d];
        v->bytes = mf->values_len;
        out->offsets = mf->offsets;
        out->rows = rows;
    } else {
        v->ndim = mf->info.ndim + 1;
        v->shape[0] = b;
        for (uint32_t d = 0; d < mf->info.ndim; d++)
            v->shape[d + 1] = mf->info.shape[d];
        v->bytes = (uint64_t)b * mf->row_bytes;
    }
    return 0;
}

DSC_EXTERN int dsc_mixture_source_stats(const dsc_mixture_t *mixture, uint32_t source,
                                        uint64_t *samples, dsc_stats_t *out) {
    if (mixture == NULL)
        return DSC_EINVAL;
    if (source >= mixture->count)
        return DSC_ERANGE;
    if (samples != NULL) {
        uint64_t delivered[MIX_MAX_SOURCES];
        run_position(mixture, NULL, NULL, delivered);
        *samples = delivered[source];
    }
    return out ? dsc_loader_stats(mixture->src[source].loader, out) : 0;
}

DSC_EXTERN int dsc_mixture_info(const dsc_mixture_t *mixture, dsc_mixture_info_t *out) {
    if (mixture == NULL || out == NULL || out->struct_size < sizeof *out)
        return DSC_EINVAL;
    out->sources = mixture->count;
    run_position(mixture, &out->epoch, &out->step, NULL);
    out->rank = mixture->rank;
    out->world_size = mixture->world;
    double worst = 0;
    out->starving_source = -1;
    out->stall_seconds = 0;
    for (uint32_t k = 0; k < mixture->count; k++) {
        dsc_stats_t st;
        memset(&st, 0, sizeof st);
        st.struct_size = sizeof st;
        if (dsc_loader_stats(mixture->src[k].loader, &st) < 0)
            continue;
        out->stall_seconds += st.stall_seconds;
        if (st.stall_seconds > worst)
            worst = st.stall_seconds, out->starving_source = (int32_t)k;
    }
    return 0;
}

static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

#define MIX_HEAD 72 /* magic .. rank */
#define MIX_SRC 96  /* per source, before its two loader states */

/* Layout (little-endian u64s): "DSCM", version, 3 zero bytes; identity; sources; total; step;
 * epoch; flags (1 stop_next, 2 dead); world_size; rank. Per source: count (quota), source-epoch,
 * used (samples of the batch at the state used), passes, taken, loader epoch, delivered, carry
 * (1: delivering an old world size's leftovers; 2: the rest of its part pass), carry world,
 * carry skip, carry used, carry
 * state length; the carry state; state length; the state. Then a checksum of all before it. */
static int state_save_now(const dsc_mixture_t *mixture, void *buf, size_t cap);

DSC_EXTERN int dsc_mixture_state_save(const dsc_mixture_t *mixture, void *buf, size_t cap) {
    if (mixture == NULL || (buf == NULL && cap > 0))
        return DSC_EINVAL;
    return mixture->run ? run_state_save(mixture, buf, cap) : state_save_now(mixture, buf, cap);
}

/* The state where the composition stands now. */
static int state_save_now(const dsc_mixture_t *mixture, void *buf, size_t cap) {
    const dsc_mixture_t *m = mixture;
    uint8_t states[MIX_MAX_SOURCES][MIX_STATE_MAX];
    int lens[MIX_MAX_SOURCES];
    uint64_t used[MIX_MAX_SOURCES];
    size_t need = MIX_HEAD + 8;
    for (uint32_t k = 0; k < m->count; k++) {
        const mix_source_t *s = &m->src[k];
        if (HAVE(&s->cur) && s->cur.cursor < s->cur.samples) {
            memcpy(states[k], s->before, (size_t)s->before_len);
            lens[k] = s->before_len, used[k] = s->cur.cursor;
        } else {
            lens[k] = src_save(s, states[k], MIX_STATE_MAX);
            if (lens[k] < 0)
                return lens[k];
            used[k] = HAVE(&s->cur) ? 0 : s->skip;
        }
        need += MIX_SRC + 8 + (size_t)lens[k] + (s->carry ? (size_t)s->carry_len : 0);
    }
    if (need > INT32_MAX)
        return DSC_ETOOLARGE;
    if (cap < need)
        return (int)need;
    uint8_t *p = buf, *at = p + MIX_HEAD;
    memcpy(p, MIX_STATE_MAGIC, 4);
    p[4] = MIX_STATE_VERSION, p[5] = p[6] = p[7] = 0;
    put_u64(p + 8, m->identity);
    put_u64(p + 16, m->count);
    put_u64(p + 24, m->total);
    put_u64(p + 32, m->step);
    put_u64(p + 40, m->epoch);
    put_u64(p + 48, (uint64_t)(m->stop_next ? 1 : 0) | (m->dead ? 2 : 0));
    put_u64(p + 56, m->world);
    put_u64(p + 64, m->rank);
    for (uint32_t k = 0; k < m->count; k++) {
        const mix_source_t *s = &m->src[k];
        uint64_t v[12] = {s->count,
                          s->epoch,
                          used[k],
                          s->passes,
                          s->taken,
                          s->loader_epoch,
                          s->delivered,
                          (uint64_t)s->carry,
                          s->carry ? s->carry_world : 0,
                          s->carry ? s->carry_skip : 0,
                          s->carry ? s->carry_used : 0,
                          s->carry ? (uint64_t)s->carry_len : 0};
        for (int i = 0; i < 12; i++)
            put_u64(at + 8 * i, v[i]);
        at += MIX_SRC;
        if (s->carry) {
            memcpy(at, s->carry_state, (size_t)s->carry_len);
            at += s->carry_len;
        }
        put_u64(at, (uint64_t)lens[k]);
        memcpy(at + 8, states[k], (size_t)lens[k]);
        at += 8 + lens[k];
    }
    put_u64(at, dsc_checksum(p, (size_t)(at - p)));
    return (int)need;
}

/* A temporary loader of source s as old rank r of old_world ranks, at `before` (*out even on a
 * failure after create: the caller destroys it). */
static int old_rank_loader(const mix_source_t *s, uint32_t r, uint32_t old_world,
                           const uint8_t *before, size_t before_len, dsc_loader_t **out) {
    dsc_loader_options_t lo = s->lo;
    lo.rank = r, lo.world_size = old_world;
    lo.prefetch_batches = 1;
    *out = NULL;
    int rc = dsc_loader_create(&lo, out);
    return rc == 0 ? dsc_loader_state_load(*out, before, before_len) : rc;
}

/* A resume onto another world size, source s: every old rank had used `skip` samples of its
 * source batch at `before`. This rank takes the unused rest of the batches of the old ranks r
 * with r % world_size == rank (read again by a temporary loader of that old rank, kept while
 * its batch is delivered), first; *after gets the source loader's state after that batch, from
 * which the loader re-splits the samples not yet delivered over the new ranks (docs/order.md).
 */
static int leftovers(dsc_mixture_t *m, mix_source_t *s, uint32_t old_world, const uint8_t *before,
                     size_t before_len, uint64_t skip, uint8_t *after, int *after_len) {
    extra_clear(s);
    *after_len = -1;
    for (uint32_t r = 0; r < old_world; r++) {
        int mine = r % m->world == m->rank;
        if (!mine && *after_len >= 0)
            continue;
        if (mine && s->extra_n >= MIX_MAX_EXTRA) {
            MIX_ERR(m, "mixture: state_load: source '%s': more than %u old ranks per new rank",
                    s->dataset, MIX_MAX_EXTRA);
            return DSC_EINVAL;
        }
        dsc_loader_t *tmp = NULL;
        int rc = old_rank_loader(s, r, old_world, before, before_len, &tmp);
        dsc_batch_t *b = NULL;
        if (rc == 0)
            rc = dsc_loader_next(tmp, &b);
        if (rc == DSC_EOF)
            rc = 0, b = NULL;
        if (rc == 0 && *after_len < 0)
            *after_len = dsc_loader_state_save(tmp, after, DSC_STATE_MAX_BYTES);
        if (rc < 0 || *after_len < 0) {
            rc = rc < 0 ? rc : *after_len;
            MIX_ERR(m, "mixture: state_load: source '%s', old rank %u of %u: %s", s->dataset, r,
                    old_world, dsc_strerror(rc));
            dsc_loader_destroy(tmp);
            return rc;
        }
        if (mine && b != NULL && skip < dsc_batch_samples(b)) {
            mix_piece_t *p = &s->extra[s->extra_n++];
            dsc_batch_retain(b);
            p->batch = b, p->owner = tmp;
            rc = piece_views(m, s, p);
            if (rc < 0)
                return rc;
            p->cursor = (uint32_t)skip;
        } else {
            dsc_loader_destroy(tmp);
        }
    }
    s->carry = s->extra_n > 0;
    s->carry_world = old_world;
    memcpy(s->carry_state, before, before_len);
    s->carry_len = (int)before_len;
    s->carry_skip = skip, s->carry_used = 0;
    return 0;
}

/* A resume onto another world size inside source s's part pass: every old rank had taken
 * `taken` of its `cut_old` samples, the last `skip` of them from the batch at `before`. This rank
 * delivers the rest of the part pass of the old ranks r with r % world_size == rank (read again
 * by temporary loaders of those old ranks: each old rank's next cut_old - taken samples), and
 * then the source-epoch ends, as it would have on the old ranks; no other rank delivers any of
 * them. carry 2 marks it (its state resumes that rank on that world size only, as carry 1). */
static int part_leftovers(dsc_mixture_t *m, mix_source_t *s, uint32_t old_world,
                          const uint8_t *before, size_t before_len, uint64_t skip, uint64_t taken) {
    extra_clear(s);
    uint64_t cut_old = part_cut(s, old_world);
    for (uint32_t r = m->rank; r < old_world && taken < cut_old; r += m->world) {
        dsc_loader_t *tmp = NULL;
        int rc = old_rank_loader(s, r, old_world, before, before_len, &tmp);
        uint64_t need = cut_old - taken, from = skip;
        mix_piece_t *last = NULL;
        while (rc == 0 && need > 0) {
            dsc_batch_t *b = NULL;
            rc = dsc_loader_next(tmp, &b);
            if (rc == DSC_EOF) { /* the rank's share ended first (cannot be short of cut) */
                rc = 0;
                break;
            }
            if (rc < 0)
                break;
            uint32_t n = dsc_batch_samples(b);
            if (from < n) {
                if (s->extra_n >= MIX_MAX_EXTRA) {
                    MIX_ERR(m,
                            "mixture: state_load: source '%s': the rest of the old ranks' part "
                            "pass takes more than %u source batches on this rank",
                            s->dataset, MIX_MAX_EXTRA);
                    rc = DSC_EINVAL;
                    break;
                }
                mix_piece_t *p = &s->extra[s->extra_n++];
                dsc_batch_retain(b);
                p->batch = b;
                rc = piece_views(m, s, p);
                p->cursor = (uint32_t)from;
                uint64_t take = n - from < need ? n - from : need;
                p->samples = (uint32_t)(from + take);
                need -= take;
                last = p;
            }
            from = from > n ? from - n : 0;
        }
        if (rc < 0) {
            MIX_ERR(m, "mixture: state_load: source '%s', old rank %u of %u: %s", s->dataset, r,
                    old_world, dsc_strerror(rc));
            extra_clear(s); /* its batches first, then their loader */
            dsc_loader_destroy(tmp);
            return rc;
        }
        if (last != NULL)
            last->owner = tmp; /* destroyed with its last piece */
        else
            dsc_loader_destroy(tmp);
    }
    s->carry = s->extra_n > 0 ? 2 : 0;
    s->carry_world = old_world;
    memcpy(s->carry_state, before, before_len);
    s->carry_len = (int)before_len;
    s->carry_skip = skip, s->carry_used = 0;
    return 0;
}

/* Passes over the first n samples of the leftovers just read again (a state saved while they
 * were delivered had delivered n). */
static void drop_carried(mix_source_t *s, uint64_t n) {
    for (; n > 0; n--) {
        while (s->extra_at < s->extra_n &&
               s->extra[s->extra_at].cursor >= s->extra[s->extra_at].samples)
            piece_drop(&s->extra[s->extra_at++]);
        if (s->extra_at >= s->extra_n)
            break;
        s->extra[s->extra_at].cursor++;
        s->carry_used++;
    }
}

static int state_load_now(dsc_mixture_t *mixture, const void *buf, size_t len);

DSC_EXTERN int dsc_mixture_state_load(dsc_mixture_t *mixture, const void *buf, size_t len) {
    if (mixture == NULL || buf == NULL)
        return DSC_EINVAL;
    return mixture->run ? run_state_load(mixture, buf, len) : state_load_now(mixture, buf, len);
}

/* A source's counters from its state record (after its loader or packer was loaded). */
static void src_counters(mix_source_t *s, const uint8_t *r) {
    s->before_len = src_save(s, s->before, sizeof s->before);
    s->count = get_u64(r);
    s->epoch = get_u64(r + 8);
    s->passes = get_u64(r + 24);
    s->taken = get_u64(r + 32);
    s->loader_epoch = get_u64(r + 40);
    s->delivered = get_u64(r + 48);
    s->ends = 0;
}

/* The mixture's counters from a state's head. */
static void mixture_counters(dsc_mixture_t *m, const uint8_t *p) {
    m->total = get_u64(p + 24);
    m->step = get_u64(p + 32);
    m->epoch = get_u64(p + 40);
    m->stop_next = (get_u64(p + 48) & 1) != 0;
    m->dead = (get_u64(p + 48) & 2) != 0;
    m->have_batch = 0;
}

/* One source's record in a state: the record (MIX_SRC bytes of counters), the carry state and
 * the source's state. */
typedef struct mix_rec {
    const uint8_t *r, *cstate, *state;
    size_t clen, slen;
} mix_rec_t;

/* Checks a state's head, checksum, identity and layout, and finds its per-source records
 * (rec[m->count]). Returns 0 or DSC_EBADSTATE (said). */
static int split_state(dsc_mixture_t *m, const uint8_t *p, size_t len, mix_rec_t *rec) {
    if (len < MIX_HEAD + 8 || memcmp(p, MIX_STATE_MAGIC, 4) != 0) {
        MIX_ERR(m, "mixture: state_load: not a mixture state");
        return DSC_EBADSTATE;
    }
    if (p[4] != MIX_STATE_VERSION || get_u64(p + len - 8) != dsc_checksum(p, len - 8)) {
        MIX_ERR(m, "mixture: state_load: damaged or another version (%zu bytes, version %u)", len,
                p[4]);
        return DSC_EBADSTATE;
    }
    if (get_u64(p + 8) != m->identity || get_u64(p + 16) != m->count) {
        MIX_ERR(m, "mixture: state_load: the state is of another mixture (other datasets, "
                   "weights, repeat, exhausted, seed, batch_size or fields)");
        return DSC_EBADSTATE;
    }
    size_t off = MIX_HEAD;
    for (uint32_t k = 0; k < m->count; k++) {
        uint64_t clen = off + MIX_SRC <= len - 8 ? get_u64(p + off + 88) : UINT64_MAX;
        if (clen > DSC_STATE_MAX_BYTES || off + MIX_SRC + clen + 8 > len - 8) {
            MIX_ERR(m, "mixture: state_load: damaged");
            return DSC_EBADSTATE;
        }
        uint64_t slen = get_u64(p + off + MIX_SRC + clen);
        if (slen > MIX_STATE_MAX || off + MIX_SRC + clen + 8 + slen > len - 8) {
            MIX_ERR(m, "mixture: state_load: damaged");
            return DSC_EBADSTATE;
        }
        rec[k].r = p + off;
        rec[k].cstate = p + off + MIX_SRC, rec[k].clen = (size_t)clen;
        rec[k].state = rec[k].cstate + clen + 8, rec[k].slen = (size_t)slen;
        off += MIX_SRC + clen + 8 + slen;
    }
    return 0;
}

static int state_load_now(dsc_mixture_t *mixture, const void *buf, size_t len) {
    dsc_mixture_t *m = mixture;
    const uint8_t *p = buf;
    mix_rec_t rec[MIX_MAX_SOURCES];
    int rc0 = split_state(m, p, len, rec);
    if (rc0 < 0)
        return rc0;
    uint64_t old_world = get_u64(p + 56), old_rank = get_u64(p + 64);
    /* Check the sources' records before changing anything. */
    for (uint32_t k = 0; k < m->count; k++) {
        const uint8_t *r = rec[k].r;
        if (get_u64(r + 56) &&
            (old_world != m->world || old_rank != m->rank || get_u64(r + 64) == 0)) {
            MIX_ERR(m,
                    "mixture: state_load: the state was saved while rank %llu of %llu still "
                    "delivered the samples left over by a change of world size: it resumes only "
                    "that rank of that world size (save again a few steps later)",
                    (unsigned long long)old_rank, (unsigned long long)old_world);
            return DSC_EBADSTATE;
        }
        if (old_world != m->world && m->packed) {
            MIX_ERR(m,
                    "mixture: state_load: a packed mixture saved on %llu ranks resumes on %u from "
                    "the states of all %llu old ranks (dsc_mixture_state_load_world; Python: "
                    "load_state_dict with the list of every old rank's state_dict()): each rank's "
                    "packed sources stand at documents of their own (docs/mixtures.md)",
                    (unsigned long long)old_world, m->world, (unsigned long long)old_world);
            return DSC_EBADSTATE;
        }
    }
    for (uint32_t k = 0; k < m->count; k++) {
        mix_source_t *s = &m->src[k];
        const uint8_t *r = rec[k].r;
        size_t clen = rec[k].clen;
        const uint8_t *cstate = rec[k].cstate;
        size_t slen = rec[k].slen;
        const uint8_t *state = rec[k].state;
        uint64_t used = get_u64(r + 16);
        piece_drop(&s->cur);
        extra_clear(s);
        s->skip = 0;
        uint8_t after[DSC_STATE_MAX_BYTES];
        int after_len = -1, rc = 0, end_part = 0;
        /* In the part pass of a fractional repeat (its passes done), where the old ranks had
         * taken `taken` of their cut: on another world size they are delivered by the new ranks
         * (part_leftovers), or the part pass ended. */
        uint64_t taken = get_u64(r + 32), cut_old = part_cut(s, (uint32_t)old_world);
        int in_part = s->cut > 0 && get_u64(r + 24) == s->full && taken > 0;
        if (get_u64(r + 56) == 2) { /* still delivering an old part pass's rest */
            rc = part_leftovers(m, s, (uint32_t)get_u64(r + 64), cstate, clen, get_u64(r + 72),
                                taken);
            if (rc == 0)
                drop_carried(s, get_u64(r + 80));
            if (rc == 0)
                rc = dsc_loader_state_load(s->loader, state, slen);
        } else if (old_world != m->world && in_part) {
            if (taken < cut_old)
                rc = part_leftovers(m, s, (uint32_t)old_world, state, slen, used, taken);
            end_part = s->carry == 0; /* none of it left for this rank */
            if (rc == 0)
                rc = dsc_loader_state_load(s->loader, state, slen);
        } else if (get_u64(r + 56)) { /* still delivering an old world size's leftovers */
            rc = leftovers(m, s, (uint32_t)get_u64(r + 64), cstate, clen, get_u64(r + 72), after,
                           &after_len);
            if (rc == 0)
                drop_carried(s, get_u64(r + 80));
            if (rc == 0)
                rc = dsc_loader_state_load(s->loader, state, slen);
        } else if (old_world != m->world && used > 0) {
            rc = leftovers(m, s, (uint32_t)old_world, state, slen, used, after, &after_len);
            if (rc == 0)
                rc = dsc_loader_state_load(s->loader, after, (size_t)after_len);
        } else {
            rc = src_load(s, state, slen);
            s->skip = (uint32_t)used;
        }
        if (rc < 0) {
            if (m->error[0] == '\0' || strstr(m->error, s->dataset) == NULL)
                MIX_ERR(m, "mixture: state_load: source '%s': %s", s->dataset, dsc_strerror(rc));
            return rc;
        }
        src_counters(s, r);
        if (end_part && s->taken < s->cut)
            s->taken = s->cut; /* the next pick ends the source-epoch */
    }
    mixture_counters(m, p);
    return 0;
}

/* A packed mixture onto another world size: each old rank's packed sources stand at documents
 * of their own (the rows of a step are the same on every rank, their documents are not), so
 * every old rank's state is needed. Per source, each old rank's packer state at the start of the
 * packed batch it was reading is carried past the rows of it used (a temporary loader and
 * packer of that rank), and the source's packer resumes from those states as
 * dsc_packer_state_load_world does; the quota counters are every rank's (checked equal). */
static int load_world_packed(dsc_mixture_t *m, const void *const *states, const size_t *lens,
                             uint32_t old_world) {
    mix_rec_t(*rec)[MIX_MAX_SOURCES] = calloc(old_world, sizeof *rec);
    uint8_t(*after)[DSC_PACK_STATE_MAX_BYTES] = calloc(old_world, sizeof *after);
    const void **ptrs = calloc(old_world, sizeof *ptrs);
    size_t *alens = calloc(old_world, sizeof *alens);
    int rc = rec && after && ptrs && alens ? 0 : DSC_ENOMEM;
    for (uint32_t r = 0; r < old_world && rc == 0; r++) {
        const uint8_t *p = states[r];
        rc = split_state(m, p, lens[r], rec[r]);
        if (rc < 0)
            break;
        const uint8_t *p0 = states[0];
        if (get_u64(p + 56) != old_world || get_u64(p + 64) != r) {
            MIX_ERR(m,
                    "mixture: state_load_world: state %u of %u is rank %llu of %llu: give every "
                    "old rank's state, in rank order",
                    r, old_world, (unsigned long long)get_u64(p + 64),
                    (unsigned long long)get_u64(p + 56));
            rc = DSC_EBADSTATE;
        } else if (memcmp(p + 24, p0 + 24, 32) != 0) {
            MIX_ERR(m,
                    "mixture: state_load_world: old ranks 0 and %u were saved at different steps "
                    "(%llu, %llu): give the states of one step",
                    r, (unsigned long long)get_u64(p0 + 32), (unsigned long long)get_u64(p + 32));
            rc = DSC_EBADSTATE;
        }
        for (uint32_t k = 0; k < m->count && rc == 0; k++) {
            const uint8_t *a = rec[r][k].r, *b = rec[0][k].r;
            if (get_u64(a + 56)) {
                MIX_ERR(m,
                        "mixture: state_load_world: old rank %u still delivered the samples "
                        "left over by an earlier change of world size (save again a few steps "
                        "later)",
                        r);
                rc = DSC_EBADSTATE;
            } else if (get_u64(a) != get_u64(b) || get_u64(a + 8) != get_u64(b + 8) ||
                       get_u64(a + 24) != get_u64(b + 24) || get_u64(a + 32) != get_u64(b + 32) ||
                       get_u64(a + 40) != get_u64(b + 40)) {
                MIX_ERR(m,
                        "mixture: state_load_world: source '%s': old ranks 0 and %u stand in "
                        "different passes of it (one rank's packed rows of an epoch ran out "
                        "first): resume from states saved a few steps later",
                        m->src[k].dataset, r);
                rc = DSC_EBADSTATE;
            }
        }
    }
    for (uint32_t k = 0; k < m->count && rc == 0; k++) {
        mix_source_t *s = &m->src[k];
        for (uint32_t r = 0; r < old_world && rc == 0; r++) {
            const mix_rec_t *x = &rec[r][k];
            uint64_t used = get_u64(x->r + 16);
            rc = dsc__packer_state_after_rows(s->packer, x->state, x->slen, old_world, r,
                                              (uint32_t)used, after[r], sizeof after[r]);
            if (rc >= 0)
                ptrs[r] = after[r], alens[r] = (size_t)rc, rc = 0;
            else
                MIX_ERR(m, "mixture: state_load_world: source '%s', old rank %u of %u: %s",
                        s->dataset, r, old_world, dsc_strerror(rc));
        }
        if (rc < 0)
            break;
        piece_drop(&s->cur);
        extra_clear(s);
        s->skip = 0;
        rc = dsc_packer_state_load_world(s->packer, ptrs, alens, old_world);
        if (rc < 0) {
            MIX_ERR(m, "mixture: state_load_world: source '%s': %s (the log says why)", s->dataset,
                    dsc_strerror(rc));
            break;
        }
        src_counters(s, rec[0][k].r);
    }
    if (rc == 0)
        mixture_counters(m, states[0]);
    free(rec);
    free(after);
    free(ptrs);
    free(alens);
    return rc;
}

DSC_EXTERN int dsc_mixture_state_load_world(dsc_mixture_t *mixture, const void *const *states,
                                            const size_t *lens, uint32_t old_world) {
    if (mixture == NULL || states == NULL || lens == NULL || old_world == 0 || old_world > 0xffff)
        return DSC_EINVAL;
    for (uint32_t r = 0; r < old_world; r++)
        if (states[r] == NULL)
            return DSC_EINVAL;
    dsc_mixture_t *m = mixture;
    if (old_world == m->world) /* every rank its own state */
        return dsc_mixture_state_load(m, states[m->rank], lens[m->rank]);
    if (!m->packed) /* the same on every rank */
        return dsc_mixture_state_load(m, states[0], lens[0]);
    if (m->run != NULL) {
        MIX_ERR(m, "mixture: state_load_world: a loader over a mixture is not packed");
        return DSC_EINVAL;
    }
    m->error[0] = '\0';
    return load_world_packed(m, states, lens, old_world);
}

/* ---- A loader over a mixture (dsc_loader_create with options.sources) ----------------------
 * The loader has no peers or plan, and one thread of its own (the composer, below): its batch
 * slots (batch.c), a schema of the mixture's fields plus "source" (int32 per sample) and
 * "source_epoch" (int64), and the mixture, which composes each batch straight into a free slot
 * ahead of next() (the sources' loaders prefetch and decode in their own threads). Batches are
 * handed out, retained and released as any loader's. */

#define MIX_SOURCE_FIELD "source"
#define MIX_EPOCH_FIELD "source_epoch"

static void loader_error(dsc_loader_t *l, const char *text) {
    pthread_mutex_lock(&l->err_lock);
    snprintf(l->err_text, sizeof l->err_text, "%s", text);
    pthread_mutex_unlock(&l->err_lock);
}

/* The values bytes a slot holds for needed field f: batch_size x the largest sample any source's
 * manifest knows while that is at most 64 MiB (every batch fits), else as a loader sizes its
 * default budget (docs/loader.md#variable-length-fields). */
static uint64_t field_budget(const dsc_mixture_t *m, uint32_t f) {
    uint64_t bytes_max = 0;
    double bytes_mean = 0;
    for (uint32_t k = 0; k < m->count; k++) {
        const dsc_manifest_t *man = m->src[k].loader->cfg.manifest;
        const dsc_manifest_field_stats_t *vs = &man->field_stats[m->src[k].field_index[f]];
        if (vs->bytes_max > bytes_max)
            bytes_max = vs->bytes_max;
        if (vs->bytes_mean > bytes_mean)
            bytes_mean = vs->bytes_mean;
    }
    int exact = 0;
    uint64_t row = m->fields[f].row_bytes ? m->fields[f].row_bytes : 1;
    uint64_t budget = dsc__var_default_budget(m->batch_size, bytes_max, bytes_mean, &exact);
    if (budget > DSC__SLOT_FIELD_MAX)
        budget = DSC__SLOT_FIELD_MAX;
    budget = budget / row * row;
    return budget ? budget : row;
}

int dsc__mix_loader_create(const dsc_loader_options_t *options, dsc_loader_t **out, char *why,
                           size_t cap) {
    create_error[0] = '\0';
    dsc_mixture_t *m = NULL;
    int rc = mixture_create(options, NULL, 0, NULL, 0, NULL, 1, &m);
    if (rc < 0) {
        snprintf(why, cap, "%s", create_error);
        return rc;
    }
    dsc_loader_t *l = calloc(1, sizeof *l);
    dsc_manifest_t *man = calloc(1, sizeof *man);
    if (l == NULL || man == NULL) {
        free(l);
        free(man);
        dsc_mixture_destroy(m);
        snprintf(why, cap, "%s", dsc_strerror(DSC_ENOMEM));
        return DSC_ENOMEM;
    }
    pthread_mutex_init(&l->err_lock, NULL);
    pthread_mutex_init(&l->lock, NULL);
    pthread_cond_init(&l->sched_cv, NULL);
    pthread_cond_init(&l->io_cv, NULL);
    pthread_cond_init(&l->work_cv, NULL);
    pthread_cond_init(&l->cons_cv, NULL);
    pthread_cond_init(&l->view.cv, NULL);
    l->mix = m;
    l->mix_options = dsc__mix_loader_options;
    l->cfg.manifest = man;
    dsc_loader_options_init2(&l->cfg.opt, sizeof l->cfg.opt);
    memcpy(&l->cfg.opt, options,
           options->struct_size < sizeof l->cfg.opt ? options->struct_size : sizeof l->cfg.opt);
    dsc_loader_options_t *o = &l->cfg.opt;
    o->struct_size = sizeof *o;
    o->sources = NULL, o->n_sources = 0;
    o->dataset = NULL, o->servers = NULL, o->auth_file = NULL, o->fallback_path = NULL;
    o->job_name = NULL, o->transport = NULL, o->field_options = NULL;
    o->field_option_count = 0;
    o->batch_size = m->batch_size;
    dsc__logger_init(&l->cfg.log, o->log_fn, o->log_ctx, o->log_level);
    /* Errors logged on the loader (its packer's, say) are its last error, as a loader's. */
    l->cfg.log.err_lock = &l->err_lock;
    l->cfg.log.err_buf = l->err_text;
    l->cfg.log.err_cap = sizeof l->err_text;
    char name[DSC_MAX_NAME];
    snprintf(name, sizeof name, "mixture of %u sources", m->count);
    snprintf(man->name, sizeof man->name, "%s", name);
    l->cfg.dataset = strdup(name);
    rc = l->cfg.dataset ? 0 : DSC_ENOMEM;
    dsc_schema_t *schema = &man->schema;
    for (uint32_t f = 0; rc == 0 && f < m->field_count; f++) {
        const dsc_manifest_t *first = m->src[0].loader->cfg.manifest;
        uint32_t at = m->src[0].field_index[f];
        schema->fields[f] = first->schema.fields[at];
        if (strcmp(m->fields[f].name, MIX_SOURCE_FIELD) == 0 ||
            strcmp(m->fields[f].name, MIX_EPOCH_FIELD) == 0) {
            snprintf(why, cap,
                     "mixture: the sources have a field named '%s': the loader's batches add "
                     "their own '%s' and '%s' (each sample's source index and source-epoch)",
                     m->fields[f].name, MIX_SOURCE_FIELD, MIX_EPOCH_FIELD);
            rc = DSC_EINVAL;
            break;
        }
        if (m->fields[f].var) {
            l->cfg.var[f].is_var = 1;
            l->cfg.var[f].row_bytes = m->fields[f].row_bytes;
            l->cfg.var[f].budget = field_budget(m, f);
            l->cfg.var[f].budget_from = "batch_size x the sources' largest sample";
            l->cfg.var_count++;
        } else {
            schema->sample_bytes += schema->fields[f].sample_bytes;
        }
    }
    if (rc == 0 && m->field_count + 2 > DSC_MAX_FIELDS) {
        snprintf(why, cap, "mixture: %u fields and '%s', '%s' pass %u fields", m->field_count,
                 MIX_SOURCE_FIELD, MIX_EPOCH_FIELD, DSC_MAX_FIELDS);
        rc = DSC_EINVAL;
    }
    if (rc == 0) {
        dsc_field_t *sf = &schema->fields[m->field_count];
        snprintf(sf->name, sizeof sf->name, "%s", MIX_SOURCE_FIELD);
        sf->dtype = DSC_DTYPE_I32;
        sf->ndim = 0;
        sf->sample_bytes = sf->row_bytes = sizeof(int32_t);
        schema->sample_bytes += sizeof(int32_t);
        dsc_field_t *ef = &schema->fields[m->field_count + 1];
        snprintf(ef->name, sizeof ef->name, "%s", MIX_EPOCH_FIELD);
        ef->dtype = DSC_DTYPE_I64;
        ef->ndim = 0;
        ef->sample_bytes = ef->row_bytes = sizeof(int64_t);
        schema->sample_bytes += sizeof(int64_t);
        schema->field_count = m->field_count + 2;
        schema->var_count = l->cfg.var_count;
        l->cfg.field_count = schema->field_count;
        for (uint32_t k = 0; k < m->count; k++)
            l->cfg.samples += m->src[k].dataset_samples;
        man->samples = l->cfg.samples;
        l->cons.slot_count = o->prefetch_batches > 2 ? o->prefetch_batches : 2;
        rc = dsc__slots_alloc(l);
        if (rc < 0)
            snprintf(why, cap, "mixture: batch slots: %s", dsc_strerror(rc));
    }
    if (rc < 0) {
        dsc__mix_loader_destroy(l);
        return rc;
    }
    /* The composed fields land in the slots from now on. */
    for (uint32_t f = 0; f < m->field_count; f++) {
        free(m->fields[f].values), free(m->fields[f].offsets);
        m->fields[f].values = NULL, m->fields[f].offsets = NULL;
    }
    free(m->source), free(m->indices), free(m->source_epoch);
    m->source = NULL, m->indices = NULL, m->source_epoch = NULL;
    m->external = 1;
    l->stats.created_at = dsc_now_s();
    rc = run_start(l);
    if (rc < 0) {
        snprintf(why, cap, "mixture: composer thread: %s", dsc_strerror(rc));
        dsc__mix_loader_destroy(l);
        return rc;
    }
    DSC_LOG(&l->cfg.log, DSC_LOG_INFO, "loader: a mixture of %u sources, %u fields and '%s', '%s'",
            m->count, m->field_count, MIX_SOURCE_FIELD, MIX_EPOCH_FIELD);
    *out = l;
    return 0;
}

void dsc__mix_loader_destroy(dsc_loader_t *l) {
    if (l == NULL)
        return;
    uint32_t kept = 0;
    for (uint32_t i = 0; l->cons.slots != NULL && i < l->cons.slot_count; i++) {
        const dsc_batch_slot_t *slot = l->cons.slots[i];
        if (slot != NULL && slot->refs > (&slot->batch == l->cons.current ? 1u : 0u))
            kept++;
    }
    if (kept > 0)
        DSC_LOG(&l->cfg.log, DSC_LOG_WARN,
                "loader destroyed while %u batch(es) are still held (retained, or DLPack tensors "
                "of them alive): their memory is freed now and any view of it is invalid",
                kept);
    run_stop(l);
    dsc_mixture_destroy(l->mix);
    dsc__slots_free(l);
    free(l->cfg.manifest);
    free(l->cfg.dataset);
    pthread_mutex_destroy(&l->lock);
    pthread_cond_destroy(&l->sched_cv);
    pthread_cond_destroy(&l->io_cv);
    pthread_cond_destroy(&l->work_cv);
    pthread_cond_destroy(&l->cons_cv);
    pthread_cond_destroy(&l->view.cv);
    pthread_mutex_destroy(&l->err_lock);
    free(l);
}

/* Points the mixture's outputs at slot's regions. */
static void aim(dsc_loader_t *l, dsc_batch_slot_t *slot) {
    dsc_mixture_t *m = l->mix;
    for (uint32_t f = 0; f < m->field_count; f++) {
        mix_field_t *mf = &m->fields[f];
        mf->values = slot->host + l->cfg.field_off[f];
        if (mf->var) {
            mf->offsets = (int64_t *)(void *)(slot->host + l->cfg.var[f].aux_off);
            mf->values_cap = l->cfg.var[f].budget;
        }
    }
    m->source = (int32_t *)(void *)(slot->host + l->cfg.field_off[m->field_count]);
    m->indices = slot->batch.indices;
    m->source_epoch = (uint64_t *)(void *)(slot->host + l->cfg.field_off[m->field_count + 1]);
}

/* The composer: a thread of the loader composes up to `ahead` batches into free slots ahead of
 * next(), each with the mixture's state and position after it, so that next() only hands out a
 * ready slot and the state, info and stats name the batch handed out. Under the loader's lock but
 * while composing (the mixture is the composer's alone then, or the caller's while paused). */
#define RUN_RING 64

typedef struct mix_done {
    uint32_t slot;        /* rc 0: the slot composed into */
    int rc;               /* 0, DSC_EOF or the composition's error */
    uint32_t samples;     /* rc 0 */
    uint64_t step, epoch; /* the batch's step; the mixture's epoch after it */
    uint64_t bytes;       /* decoded bytes of the batch */
    uint64_t var_rows[DSC_MAX_FIELDS];
    uint8_t *state; /* the mixture's state after it (malloc'd, grown as needed) */
    size_t state_cap;
    int state_len;
    uint64_t *delivered; /* per source, samples delivered after it */
} mix_done_t;

typedef struct mix_run {
    dsc_loader_t *loader;
    pthread_t thread;
    int started, stop, paused, composing;
    int finished; /* no more batches: done_rc for every later next() */
    int done_rc;
    uint32_t ahead;
    mix_done_t ring[RUN_RING];
    uint32_t head, count;
    /* The consumer's side: the state and position after the last batch handed out. */
    uint8_t *state;
    size_t state_cap;
    int state_len;
    uint64_t epoch, step;
    uint64_t *delivered;
} mix_run_t;

/* Copies a state into a growable buffer. Returns 0 or DSC_ENOMEM. */
static int keep_state(uint8_t **buf, size_t *cap, int *len, const uint8_t *src, int n) {
    if ((size_t)n > *cap) {
        uint8_t *grown = realloc(*buf, (size_t)n);
        if (grown == NULL)
            return DSC_ENOMEM;
        *buf = grown, *cap = (size_t)n;
    }
    memcpy(*buf, src, (size_t)n);
    *len = n;
    return 0;
}

/* The mixture's state now into e's buffer. Returns 0 or a DSC_E* code. Composer or paused. */
static int save_into(const dsc_mixture_t *m, mix_done_t *e) {
    int need = state_save_now(m, NULL, 0);
    if (need < 0)
        return need;
    if ((size_t)need > e->state_cap) {
        uint8_t *grown = realloc(e->state, (size_t)need);
        if (grown == NULL)
            return DSC_ENOMEM;
        e->state = grown, e->state_cap = (size_t)need;
    }
    int n = state_save_now(m, e->state, e->state_cap);
    if (n < 0)
        return n;
    e->state_len = n;
    return 0;
}

static void *composer(void *arg) {
    dsc_loader_t *l = arg;
    dsc_mixture_t *m = l->mix;
    mix_run_t *run = m->run;
    pthread_mutex_lock(&l->lock);
    while (!run->stop) {
        dsc_batch_slot_t *slot = NULL;
        if (run->paused || run->finished || run->count >= run->ahead ||
            (slot = dsc__slot_take_free(l, SLOT_FREE - 1)) == NULL) {
            pthread_cond_wait(&l->sched_cv, &l->lock);
            continue;
        }
        mix_done_t *e = &run->ring[(run->head + run->count) % RUN_RING];
        run->composing = 1;
        pthread_mutex_unlock(&l->lock);
        aim(l, slot); /* the slot is the composer's alone until handed out */
        dsc_mixture_batch_t mb;
        memset(&mb, 0, sizeof mb);
        mb.struct_size = sizeof mb;
        int rc = dsc_mixture_next(m, &mb);
        e->rc = rc;
        if (rc == 0) {
            e->samples = mb.samples;
            e->step = mb.step;
            e->bytes = (uint64_t)mb.samples * l->cfg.manifest->schema.sample_bytes;
            for (uint32_t f = 0; f < m->field_count; f++)
                if (m->fields[f].var) {
                    e->var_rows[f] = (uint64_t)m->fields[f].offsets[mb.samples];
                    e->bytes += m->fields[f].values_len;
                }
        }
        e->epoch = m->epoch;
        if (rc == 0 || rc == DSC_EOF) {
            int src = save_into(m, e);
            if (src < 0)
                e->rc = rc = src;
        }
        for (uint32_t k = 0; k < m->count; k++)
            e->delivered[k] = m->src[k].delivered;
        if (rc < 0 && rc != DSC_EOF) /* a batch half composed: the loader fails, as one does */
            loader_error(l, m->error[0] ? m->error : dsc_strerror(rc));
        pthread_mutex_lock(&l->lock);
        run->composing = 0;
        if (rc == 0)
            e->slot = slot->batch.slot;
        else
            dsc__slot_give_back(l, slot);
        if ((rc < 0 && rc != DSC_EOF) || (rc == DSC_EOF && m->dead))
            run->finished = 1, run->done_rc = rc;
        run->count++;
        pthread_cond_broadcast(&l->cons_cv);
    }
    pthread_mutex_unlock(&l->lock);
    return NULL;
}

/* Drops the batches composed ahead (their slots go back). Under lock, composer paused/idle. */
static void run_drop(dsc_loader_t *l, mix_run_t *run) {
    for (; run->count > 0; run->count--, run->head = (run->head + 1) % RUN_RING) {
        mix_done_t *e = &run->ring[run->head];
        if (e->rc == 0)
            dsc__slot_give_back(l, l->cons.slots[e->slot]);
    }
}

static int run_start(dsc_loader_t *l) {
    dsc_mixture_t *m = l->mix;
    mix_run_t *run = calloc(1, sizeof *run);
    if (run == NULL)
        return DSC_ENOMEM;
    m->run = run;
    run->loader = l;
    uint32_t prefetch = l->cfg.opt.prefetch_batches;
    run->ahead = prefetch > 1 ? prefetch - 1 : 1;
    if (run->ahead > RUN_RING - 1)
        run->ahead = RUN_RING - 1;
    run->delivered = calloc(m->count, sizeof *run->delivered);
    if (run->delivered == NULL)
        return DSC_ENOMEM;
    for (uint32_t i = 0; i < RUN_RING; i++) {
        run->ring[i].delivered = calloc(m->count, sizeof *run->ring[i].delivered);
        if (run->ring[i].delivered == NULL)
            return DSC_ENOMEM;
    }
    mix_done_t first;
    memset(&first, 0, sizeof first);
    int rc = save_into(m, &first);
    if (rc == 0)
        rc =
            keep_state(&run->state, &run->state_cap, &run->state_len, first.state, first.state_len);
    free(first.state);
    if (rc < 0)
        return rc;
    if (pthread_create(&run->thread, NULL, composer, l) != 0)
        return DSC_ENOMEM;
    run->started = 1;
    return 0;
}

static void run_stop(dsc_loader_t *l) {
    mix_run_t *run = l->mix ? l->mix->run : NULL;
    if (run == NULL)
        return;
    pthread_mutex_lock(&l->lock);
    run->stop = 1;
    pthread_cond_broadcast(&l->sched_cv);
    pthread_mutex_unlock(&l->lock);
    if (run->started)
        pthread_join(run->thread, NULL);
    for (uint32_t i = 0; i < RUN_RING; i++) {
        free(run->ring[i].state);
        free(run->ring[i].delivered);
    }
    free(run->state);
    free(run->delivered);
    free(run);
    l->mix->run = NULL;
}

static int run_state_save(const dsc_mixture_t *m, void *buf, size_t cap) {
    mix_run_t *run = m->run;
    pthread_mutex_lock(&run->loader->lock);
    int n = run->state_len;
    if (buf != NULL && cap >= (size_t)n)
        memcpy(buf, run->state, (size_t)n);
    pthread_mutex_unlock(&run->loader->lock);
    return n;
}

static int run_state_load(dsc_mixture_t *m, const void *buf, size_t len) {
    mix_run_t *run = m->run;
    dsc_loader_t *l = run->loader;
    pthread_mutex_lock(&l->lock);
    run->paused = 1;
    while (run->composing)
        pthread_cond_wait(&l->cons_cv, &l->lock);
    run_drop(l, run);
    pthread_mutex_unlock(&l->lock);
    m->error[0] = '\0';
    int rc = state_load_now(m, buf, len);
    pthread_mutex_lock(&l->lock);
    if (rc == 0) {
        rc = keep_state(&run->state, &run->state_cap, &run->state_len, buf, (int)len);
        run->epoch = m->epoch, run->step = m->step;
        for (uint32_t k = 0; k < m->count; k++)
            run->delivered[k] = m->src[k].delivered;
        run->finished = 0, run->done_rc = 0;
    }
    run->paused = 0;
    pthread_cond_broadcast(&l->sched_cv);
    pthread_mutex_unlock(&l->lock);
    return rc;
}

static void run_position(const dsc_mixture_t *m, uint64_t *epoch, uint64_t *step,
                         uint64_t *delivered) {
    mix_run_t *run = m->run;
    if (run != NULL)
        pthread_mutex_lock(&run->loader->lock);
    if (epoch != NULL)
        *epoch = run ? run->epoch : m->epoch;
    if (step != NULL)
        *step = run ? run->step : m->step;
    for (uint32_t k = 0; delivered != NULL && k < m->count; k++)
        delivered[k] = run ? run->delivered[k] : m->src[k].delivered;
    if (run != NULL)
        pthread_mutex_unlock(&run->loader->lock);
}

int dsc__mix_loader_next(dsc_loader_t *l, dsc_batch_t **out, int retain) {
    mix_run_t *run = l->mix->run;
    double t0 = dsc_now_s();
    pthread_mutex_lock(&l->lock);
    if (l->stats.last_return > 0)
        l->stats.st.compute_seconds += t0 - l->stats.last_return;
    dsc__batch_release_current(l);
    int rc = l->error;
    if (rc == 0)
        rc = dsc__slots_make_room(l); /* slots beside the held ones for the composer */
    pthread_cond_broadcast(&l->sched_cv);
    while (rc == 0 && run->count == 0 && !run->finished)
        pthread_cond_wait(&l->cons_cv, &l->lock);
    if (rc == 0 && run->count == 0)
        rc = run->done_rc;
    if (rc == 0) {
        mix_done_t *e = &run->ring[run->head];
        run->head = (run->head + 1) % RUN_RING;
        run->count--;
        pthread_cond_broadcast(&l->sched_cv); /* room to compose one more */
        rc = e->rc;
        if (rc == 0 || rc == DSC_EOF) {
            if (keep_state(&run->state, &run->state_cap, &run->state_len, e->state, e->state_len) <
                0)
                rc = DSC_ENOMEM;
            run->epoch = e->epoch;
            run->step = rc == 0 ? e->step + 1 : 0;
            for (uint32_t k = 0; k < l->mix->count; k++)
                run->delivered[k] = e->delivered[k];
        }
        if (rc == 0) {
            dsc_batch_slot_t *slot = l->cons.slots[e->slot];
            dsc_batch_t *b = &slot->batch;
            slot->owner = l->cons.cons_seq;
            b->samples = e->samples;
            b->step = e->step;
            b->seq = l->cons.cons_seq++;
            memcpy(slot->var_rows, e->var_rows, sizeof slot->var_rows);
            dsc__batch_hand_out(l, b);
            if (retain)
                dsc__batch_retain_locked(b);
            l->stats.st.batches++;
            l->stats.st.samples += e->samples;
            l->stats.st.bytes += e->bytes;
            *out = b;
        } else if (e->rc == 0) {
            dsc__slot_give_back(l, l->cons.slots[e->slot]);
        }
        if (rc < 0 && rc != DSC_EOF)
            l->error = rc;
    }
    l->stats.st.epoch = run->epoch;
    double t1 = dsc_now_s();
    l->stats.st.stall_seconds += t1 - t0;
    l->stats.last_return = t1;
    pthread_mutex_unlock(&l->lock);
    return rc;
}

void dsc__mix_loader_stats(const dsc_loader_t *loader, dsc_stats_t *out) {
    dsc_loader_t *l = (dsc_loader_t *)(uintptr_t)loader; /* the lock only */
    const dsc_mixture_t *m = l->mix;
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    double worst = -1;
    for (uint32_t k = 0; k < m->count; k++) {
        dsc_stats_t s;
        memset(&s, 0, sizeof s);
        s.struct_size = sizeof s;
        if (dsc_loader_stats(m->src[k].loader, &s) < 0)
            continue;
        out->wire_bytes += s.wire_bytes;
        out->requests += s.requests;
        out->retries += s.retries;
        out->failovers += s.failovers;
        out->checksum_failures += s.checksum_failures;
        out->network_seconds += s.network_seconds;
        out->decode_seconds += s.decode_seconds;
        out->collate_seconds += s.collate_seconds;
        out->placed_chunks += s.placed_chunks;
        out->refetches += s.refetches;
        out->assists += s.assists;
        out->epoch_wire_bytes += s.epoch_wire_bytes;
        out->slots_added += s.slots_added;
        if (s.stall_seconds > worst) { /* the verdict is the starving source's */
            worst = s.stall_seconds;
            out->bottleneck = s.bottleneck;
            out->verdict_seconds = s.verdict_seconds;
            out->verdict_stall_fraction = s.verdict_stall_fraction;
            memcpy(out->bottleneck_server, s.bottleneck_server, sizeof s.bottleneck_server);
        }
    }
    pthread_mutex_lock(&l->lock);
    out->epoch = l->stats.st.epoch;
    out->batches = l->stats.st.batches;
    out->samples = l->stats.st.samples;
    out->bytes = l->stats.st.bytes;
    out->stall_seconds = l->stats.st.stall_seconds;
    out->compute_seconds = l->stats.st.compute_seconds;
    out->slots_added += l->stats.st.slots_added;
    pthread_mutex_unlock(&l->lock);
    double busy = out->stall_seconds + out->compute_seconds;
    out->stall_fraction = busy > 0 ? out->stall_seconds / busy : 0;
    out->wall_seconds = dsc_now_s() - l->stats.created_at;
}

int dsc__mix_loader_state_load(dsc_loader_t *l, const void *buf, size_t len) {
    int rc = dsc_mixture_state_load(l->mix, buf, len);
    if (rc < 0)
        loader_error(l, l->mix->error[0] ? l->mix->error : dsc_strerror(rc));
    return rc;
}

int dsc__mix_loader_set_epoch(dsc_loader_t *l, uint64_t epoch) {
    uint64_t now = 0;
    run_position(l->mix, &now, NULL, NULL);
    if (epoch == now)
        return 0;
    char text[200];
    snprintf(text, sizeof text,
             "loader over a mixture: set_epoch(%llu) refused: its epoch (%llu) follows its "
             "sources (exhausted wrap or stop); resume with the state instead",
             (unsigned long long)epoch, (unsigned long long)now);
    DSC_LOG(&l->cfg.log, DSC_LOG_ERROR, "%s", text);
    loader_error(l, text);
    return DSC_EINVAL;
}

int dsc__mix_loader_options(const dsc_loader_t *loader, dsc_loader_options_t *lo,
                            dsc_source_options_t *so, uint32_t cap) {
    const dsc_mixture_t *m = loader ? loader->mix : NULL;
    if (m == NULL || m->count > cap)
        return DSC_EINVAL;
    *lo = loader->cfg.opt;
    lo->servers = NULL, lo->dataset = NULL, lo->auth_file = NULL, lo->fallback_path = NULL;
    lo->job_name = NULL, lo->transport = NULL;
    lo->field_options = NULL, lo->field_option_count = 0;
    lo->ignore_rank_env = 1;
    lo->report_seconds = -1;
    lo->stats_log_seconds = 0;
    for (uint32_t k = 0; k < m->count; k++) {
        const mix_source_t *s = &m->src[k];
        dsc_source_options_init(&so[k], sizeof so[k]);
        so[k].dataset = s->dataset;
        so[k].servers = s->servers;
        so[k].auth_file = s->auth_file;
        so[k].fallback_path = s->fallback_path;
        so[k].replicas = s->lo.replicas;
        so[k].shuffle_window = s->lo.shuffle_window;
        so[k].weight = s->weight;
        so[k].repeat = s->repeat;
    }
    lo->sources = so, lo->n_sources = m->count;
    return (int)m->count;
}

DSC_EXTERN dsc_mixture_t *dsc_loader_mixture(const dsc_loader_t *loader) {
    return loader ? loader->mix : NULL;
}
