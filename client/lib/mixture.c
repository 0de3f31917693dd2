/* Mixtures (docs/mixtures.md): one loader per source, batches composed by the quota method
 * (every source within one sample of its share after every sample), exact resume. Uses the
 * loaders through the public API only. */
#include "pipeline.h"
#include "shard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIX_MAX_SOURCES 64
#define MIX_STATE_MAGIC "DSCM"
#define MIX_STATE_VERSION 1

/* One source: its loader, the batch being read (with the loader's state before it) and the
 * samples of it used. */
typedef struct mix_source {
    dsc_loader_t *loader;
    char *dataset;
    double weight;
    uint32_t batch;
    uint32_t field_index[DSC_MAX_FIELDS]; /* the needed fields' indexes in its dataset */
    dsc_batch_t *current;
    uint32_t current_samples, cursor;
    uint8_t before[DSC_STATE_MAX_BYTES];
    int before_len;
    uint32_t skip;  /* after state_load: samples of the first batch already used */
    uint64_t count; /* samples handed out since step 0 (the quota counter) */
    uint64_t delivered;
    uint64_t epoch; /* source-epoch */
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
    mix_source_t src[MIX_MAX_SOURCES];
    uint32_t field_count;
    mix_field_t fields[DSC_MAX_FIELDS];
    uint64_t total; /* samples handed out since step 0 */
    uint64_t step;
    uint64_t identity;
    int have_batch;
    uint32_t batch_samples;
    int32_t *source;
    uint64_t *indices, *source_epoch;
    uint32_t *picks;
};

DSC_EXTERN int dsc_source_options_init(dsc_source_options_t *options, size_t size) {
    if (options == NULL || size < sizeof(dsc_source_options_t))
        return DSC_EINVAL;
    memset(options, 0, size);
    options->struct_size = size;
    options->weight = 1.0;
    return 0;
}

DSC_EXTERN void dsc_mixture_destroy(dsc_mixture_t *mixture) {
    if (mixture == NULL)
        return;
    for (uint32_t k = 0; k < mixture->count; k++) {
        dsc_batch_release(mixture->src[k].current);
        dsc_loader_destroy(mixture->src[k].loader);
        free(mixture->src[k].dataset);
    }
    for (uint32_t f = 0; f < mixture->field_count; f++) {
        free(mixture->fields[f].values);
        free(mixture->fields[f].offsets);
    }
    free(mixture->source);
    free(mixture->indices);
    free(mixture->source_epoch);
    free(mixture->picks);
    free(mixture);
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
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
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
                DSC_LOG(&m->log, DSC_LOG_ERROR, "mixture: source '%s' has no field '%s'",
                        m->src[k].dataset, names[f]);
                return DSC_EINVAL;
            }
            if (k == 0) {
                mf->info = fi;
            } else if (fi.dtype != mf->info.dtype || fi.ndim != mf->info.ndim ||
                       memcmp(fi.shape, mf->info.shape, sizeof fi.shape[0] * fi.ndim) != 0) {
                describe(&mf->info, want, sizeof want);
                describe(&fi, have, sizeof have);
                DSC_LOG(&m->log, DSC_LOG_ERROR,
                        "mixture: field '%s' differs between sources: '%s' has %s, '%s' has %s",
                        names[f], m->src[0].dataset, want, m->src[k].dataset, have);
                return DSC_EINVAL;
            }
            const dsc_var_field_t *var = &m->src[k].loader->cfg.var[at];
            if (var->pad || var->image) {
                DSC_LOG(&m->log, DSC_LOG_ERROR,
                        "mixture: field '%s' is %s: a mixture takes values + offsets", names[f],
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

DSC_EXTERN int dsc_mixture_create(const dsc_loader_options_t *common,
                                  const dsc_source_options_t *sources, uint32_t count,
                                  const char *const *fields, uint32_t field_count,
                                  dsc_mixture_t **out) {
    if (common == NULL || out == NULL || (sources == NULL && count > 0) ||
        (fields == NULL && field_count > 0))
        return DSC_EINVAL;
    dsc_loader_options_t opt;
    if (dsc_loader_options_init2(&opt, sizeof opt) < 0)
        return DSC_EINVAL;
    memcpy(&opt, common, common->struct_size < sizeof opt ? common->struct_size : sizeof opt);
    opt.struct_size = sizeof opt;
    dsc_mixture_t *m = calloc(1, sizeof *m);
    if (m == NULL)
        return DSC_ENOMEM;
    dsc__logger_init(&m->log, opt.log_fn, opt.log_ctx, opt.log_level);
    int rc = DSC_EINVAL;
    if (count == 0 || count > MIX_MAX_SOURCES || field_count > DSC_MAX_FIELDS) {
        DSC_LOG(&m->log, DSC_LOG_ERROR, "mixture: %u sources (1 .. %u)%s", count, MIX_MAX_SOURCES,
                field_count > DSC_MAX_FIELDS ? ", too many fields" : "");
        goto fail;
    }
    if (opt.order != DSC_ORDER_LOCAL || opt.device >= 0) {
        DSC_LOG(&m->log, DSC_LOG_ERROR, "mixture: %s",
                opt.device >= 0 ? "host batches only (device -1)" : "local order only");
        goto fail;
    }
    m->batch_size = opt.batch_size ? opt.batch_size : 32;
    size_t stride = sources[0].struct_size;
    if (stride < sizeof(dsc_source_options_t)) {
        DSC_LOG(&m->log, DSC_LOG_ERROR, "mixture: source options struct_size %zu too small",
                stride);
        goto fail;
    }
    double wsum = 0;
    for (uint32_t k = 0; k < count; k++) {
        const dsc_source_options_t *so =
            (const dsc_source_options_t *)((const char *)sources + k * stride);
        const char *name = so->dataset ? so->dataset : "(null)";
        if (so->dataset == NULL || !(so->weight > 0) || !isfinite(so->weight)) {
            DSC_LOG(&m->log, DSC_LOG_ERROR, "mixture: source %u ('%s'): %s", k, name,
                    so->dataset == NULL ? "no dataset" : "weight must be > 0 and finite");
            goto fail;
        }
        for (uint32_t j = 0; j < k; j++)
            if (strcmp(m->src[j].dataset, so->dataset) == 0) {
                DSC_LOG(&m->log, DSC_LOG_ERROR, "mixture: dataset '%s' named twice", name);
                goto fail;
            }
        wsum += so->weight;
        m->src[k].dataset = strdup(so->dataset);
        m->src[k].weight = so->weight;
        if (m->src[k].dataset == NULL) {
            rc = DSC_ENOMEM;
            goto fail;
        }
        m->count = k + 1;
    }
    for (uint32_t k = 0; k < count; k++) {
        const dsc_source_options_t *so =
            (const dsc_source_options_t *)((const char *)sources + k * stride);
        dsc_loader_options_t lo = opt;
        lo.dataset = so->dataset;
        if (so->servers)
            lo.servers = so->servers;
        if (so->auth_file)
            lo.auth_file = so->auth_file;
        if (so->replicas)
            lo.replicas = so->replicas;
        lo.fallback_path = so->fallback_path;
        if (so->shuffle_window)
            lo.shuffle_window = so->shuffle_window;
        lo.seed = opt.seed + k;
        lo.batch_size = (uint32_t)ceil((double)m->batch_size * so->weight / wsum);
        if (lo.batch_size < 1)
            lo.batch_size = 1;
        m->src[k].batch = lo.batch_size;
        rc = dsc_loader_create(&lo, &m->src[k].loader);
        if (rc < 0) {
            char why[512];
            dsc_loader_last_error(NULL, why, sizeof why);
            DSC_LOG(&m->log, DSC_LOG_ERROR, "mixture: source '%s': %s (%s)", so->dataset,
                    dsc_strerror(rc), why);
            goto fail;
        }
    }
    const char *first[DSC_MAX_FIELDS];
    char names[DSC_MAX_FIELDS][DSC_MAX_NAME];
    if (fields == NULL) { /* every field of the first source */
        field_count = dsc_loader_field_count(m->src[0].loader);
        for (uint32_t f = 0; f < field_count; f++) {
            dsc_field_info_t fi;
            dsc_loader_field(m->src[0].loader, f, &fi);
            snprintf(names[f], DSC_MAX_NAME, "%s", fi.name);
            first[f] = names[f];
        }
        fields = first;
    }
    rc = agree(m, fields, field_count);
    if (rc < 0)
        goto fail;
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
    for (uint32_t k = 0; k < count; k++) {
        id = id * 31 + dsc_checksum(m->src[k].dataset, strlen(m->src[k].dataset));
        id = id * 31 + dsc_checksum(&m->src[k].weight, sizeof m->src[k].weight);
    }
    for (uint32_t f = 0; f < m->field_count; f++)
        id = id * 31 + dsc_checksum(m->fields[f].name, strlen(m->fields[f].name));
    m->identity = id;
    for (uint32_t k = 0; k < count; k++)
        m->src[k].before_len =
            dsc_loader_state_save(m->src[k].loader, m->src[k].before, sizeof m->src[k].before);
    *out = m;
    return 0;
fail:
    dsc_mixture_destroy(m);
    return rc;
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

/* Makes sure source k has a batch with an unused sample. Returns 0 or a loader error. */
static int source_ready(dsc_mixture_t *m, uint32_t k) {
    mix_source_t *s = &m->src[k];
    int ends = 0; /* epoch ends in a row without a batch: the loader has no epoch left */
    while (s->current == NULL || s->cursor >= s->current_samples) {
        if (s->current != NULL) {
            dsc_batch_release(s->current);
            s->current = NULL;
        }
        s->before_len = dsc_loader_state_save(s->loader, s->before, sizeof s->before);
        if (s->before_len < 0)
            return s->before_len;
        dsc_batch_t *b = NULL;
        int rc = dsc_loader_next(s->loader, &b);
        if (rc == DSC_EOF) { /* wrap: its next epoch */
            if (++ends > 1) {
                DSC_LOG(&m->log, DSC_LOG_INFO, "mixture: source '%s' has no epoch left (epochs)",
                        s->dataset);
                return DSC_EOF;
            }
            s->epoch++;
            continue;
        }
        if (rc < 0) {
            DSC_LOG(&m->log, DSC_LOG_ERROR, "mixture: source '%s': %s", s->dataset,
                    dsc_strerror(rc));
            return rc;
        }
        dsc_batch_retain(b); /* kept past the loader's next next() while it is read */
        s->current = b;
        s->current_samples = dsc_batch_samples(b);
        s->cursor = s->skip;
        s->skip = 0;
    }
    return 0;
}

/* Appends sample `row` of source k's current batch to needed field f. */
static int append(dsc_mixture_t *m, uint32_t f, uint32_t k, uint32_t row, uint32_t at) {
    mix_field_t *mf = &m->fields[f];
    dsc_field_view_t fv;
    memset(&fv, 0, sizeof fv);
    fv.struct_size = sizeof fv;
    int rc = dsc_batch_field_view(m->src[k].current, m->src[k].field_index[f], &fv);
    if (rc < 0)
        return rc;
    if (!mf->var) {
        memcpy(mf->values + (size_t)at * mf->row_bytes,
               (const uint8_t *)fv.values.data + (size_t)row * mf->row_bytes, mf->row_bytes);
        return 0;
    }
    int64_t a = fv.offsets[row], e = fv.offsets[row + 1];
    size_t bytes = (size_t)(e - a) * mf->row_bytes;
    if (mf->values_len + bytes > mf->values_cap) {
        size_t cap = mf->values_cap ? mf->values_cap : 4096;
        while (cap < mf->values_len + bytes)
            cap *= 2;
        uint8_t *grown = realloc(mf->values, cap);
        if (grown == NULL)
            return DSC_ENOMEM;
        mf->values = grown, mf->values_cap = cap;
    }
    memcpy(mf->values + mf->values_len, (const uint8_t *)fv.values.data + (size_t)a * mf->row_bytes,
           bytes);
    mf->values_len += bytes;
    mf->offsets[at + 1] = mf->offsets[at] + (e - a);
    return 0;
}

DSC_EXTERN int dsc_mixture_next(dsc_mixture_t *mixture, dsc_mixture_batch_t *out) {
    if (mixture == NULL || out == NULL || out->struct_size < sizeof *out)
        return DSC_EINVAL;
    dsc_mixture_t *m = mixture;
    m->have_batch = 0;
    for (uint32_t f = 0; f < m->field_count; f++) {
        m->fields[f].values_len = 0;
        if (m->fields[f].var)
            m->fields[f].offsets[0] = 0;
    }
    for (uint32_t i = 0; i < m->batch_size; i++) {
        uint32_t k = quota_pick(m, m->total);
        int rc = source_ready(m, k);
        if (rc < 0)
            return rc;
        mix_source_t *s = &m->src[k];
        for (uint32_t f = 0; f < m->field_count; f++) {
            rc = append(m, f, k, s->cursor, i);
            if (rc < 0)
                return rc;
        }
        m->source[i] = (int32_t)k;
        m->indices[i] = dsc_batch_indices(s->current)[s->cursor];
        m->source_epoch[i] = s->epoch;
        s->cursor++;
        s->count++, s->delivered++;
        m->total++;
    }
    m->have_batch = 1;
    m->batch_samples = m->batch_size;
    out->step = m->step++;
    out->samples = m->batch_size;
    out->source = m->source;
    out->indices = m->indices;
    out->source_epoch = m->source_epoch;
    return 0;
}

DSC_EXTERN int dsc_mixture_field_view(const dsc_mixture_t *mixture, uint32_t field,
                                      dsc_field_view_t *out) {
    if (mixture == NULL || out == NULL || out->struct_size < sizeof *out || !mixture->have_batch)
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
    if (samples != NULL)
        *samples = mixture->src[source].delivered;
    return out ? dsc_loader_stats(mixture->src[source].loader, out) : 0;
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

/* Layout: "DSCM", version, 3 zero bytes; identity u64; sources u64; total u64; step u64; per
 * source: count u64, epoch u64, used u64, state length u64, state bytes; checksum u64. */
DSC_EXTERN int dsc_mixture_state_save(const dsc_mixture_t *mixture, void *buf, size_t cap) {
    if (mixture == NULL || (buf == NULL && cap > 0))
        return DSC_EINVAL;
    size_t need = 40 + 8;
    for (uint32_t k = 0; k < mixture->count; k++)
        need += 32 + (size_t)mixture->src[k].before_len;
    if (cap < need)
        return (int)need;
    uint8_t *p = buf, *at = p + 40;
    memcpy(p, MIX_STATE_MAGIC, 4);
    p[4] = MIX_STATE_VERSION, p[5] = p[6] = p[7] = 0;
    put_u64(p + 8, mixture->identity);
    put_u64(p + 16, mixture->count);
    put_u64(p + 24, mixture->total);
    put_u64(p + 32, mixture->step);
    for (uint32_t k = 0; k < mixture->count; k++) {
        const mix_source_t *s = &mixture->src[k];
        uint64_t used = s->current ? s->cursor : s->skip;
        put_u64(at, s->count);
        put_u64(at + 8, s->epoch);
        put_u64(at + 16, used);
        put_u64(at + 24, (uint64_t)s->before_len);
        memcpy(at + 32, s->before, (size_t)s->before_len);
        at += 32 + s->before_len;
    }
    put_u64(at, dsc_checksum(p, (size_t)(at - p)));
    return (int)need;
}

DSC_EXTERN int dsc_mixture_state_load(dsc_mixture_t *mixture, const void *buf, size_t len) {
    if (mixture == NULL || buf == NULL)
        return DSC_EINVAL;
    const uint8_t *p = buf;
    if (len < 48 || memcmp(p, MIX_STATE_MAGIC, 4) != 0) {
        DSC_LOG(&mixture->log, DSC_LOG_ERROR, "mixture: state_load: not a mixture state");
        return DSC_EBADSTATE;
    }
    if (p[4] != MIX_STATE_VERSION || get_u64(p + len - 8) != dsc_checksum(p, len - 8)) {
        DSC_LOG(&mixture->log, DSC_LOG_ERROR,
                "mixture: state_load: damaged or another version (%zu bytes)", len);
        return DSC_EBADSTATE;
    }
    if (get_u64(p + 8) != mixture->identity || get_u64(p + 16) != mixture->count) {
        DSC_LOG(&mixture->log, DSC_LOG_ERROR,
                "mixture: state_load: the state is of another mixture (other datasets, weights, "
                "seed, batch_size or fields)");
        return DSC_EBADSTATE;
    }
    /* Check the per-source layout fits before changing anything. */
    size_t off = 40;
    for (uint32_t k = 0; k < mixture->count; k++) {
        if (off + 32 > len - 8 || get_u64(p + off + 24) > DSC_STATE_MAX_BYTES ||
            off + 32 + get_u64(p + off + 24) > len - 8) {
            DSC_LOG(&mixture->log, DSC_LOG_ERROR, "mixture: state_load: damaged");
            return DSC_EBADSTATE;
        }
        off += 32 + get_u64(p + off + 24);
    }
    off = 40;
    for (uint32_t k = 0; k < mixture->count; k++) {
        mix_source_t *s = &mixture->src[k];
        uint64_t slen = get_u64(p + off + 24);
        if (s->current != NULL)
            dsc_batch_release(s->current);
        s->current = NULL;
        int rc = dsc_loader_state_load(s->loader, p + off + 32, slen);
        if (rc < 0) {
            DSC_LOG(&mixture->log, DSC_LOG_ERROR, "mixture: state_load: source '%s': %s",
                    s->dataset, dsc_strerror(rc));
            return rc;
        }
        s->count = get_u64(p + off);
        s->epoch = get_u64(p + off + 8);
        s->skip = (uint32_t)get_u64(p + off + 16);
        memcpy(s->before, p + off + 32, slen);
        s->before_len = (int)slen;
        off += 32 + slen;
    }
    mixture->total = get_u64(p + 24);
    mixture->step = get_u64(p + 32);
    mixture->have_batch = 0;
    return 0;
}
