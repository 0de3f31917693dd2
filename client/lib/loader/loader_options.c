/* Loader options: the defaults (dsc_loader_options_fill), the checks of a caller's options and
 * of the launcher's RANK / WORLD_SIZE, the per-field options (dsc_field_options_t: padding,
 * budgets, image decode), and the settings derived from the dataset (cache budget, order_ahead).
 * Called by loader.c's create only; words for what it refuses go to the loader's log. */
#include "loader_options.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dsc__options_defaults(dsc_loader_options_t *options) {
    memset(options, 0, sizeof *options);
    options->struct_size = sizeof *options;
    options->batch_size = 32;
    options->world_size = 1;
    options->shuffle = 1;
    options->shuffle_window = 0; /* from the dataset (AUTO_WINDOW_BYTES) */
    options->prefetch_batches = 4;
    options->inflight_bytes = 64ull << 20;
    options->decode_threads = 2;
    options->connections = 2;
    options->device = -1;
    options->timeout_ms = 5000;
    options->replicas = 0; /* the servers' */
    options->log_level = DSC_LOG_WARN;
    options->cache_bytes = 0; /* from the dataset (dsc__options_cache_budget) */
    options->order = DSC_ORDER_LOCAL;
    options->max_held_bytes = DSC__LOADER_DEFAULT_MAX_HELD_BYTES;
}

DSC_EXTERN int dsc_loader_options_fill(dsc_loader_options_t *options, size_t size) {
    if (options == NULL || size < DSC__LOADER_OPTIONS_MIN_SIZE)
        return DSC_EINVAL;
    dsc_loader_options_t full;
    dsc__options_defaults(&full);
    full.struct_size = size;
    /* Only the caller's bytes: its struct may be an older, smaller one. */
    memcpy(options, &full, size < sizeof full ? size : sizeof full);
    if (size > sizeof full)
        memset((char *)options + sizeof full, 0, size - sizeof full);
    return 0;
}

/* The name a release gave dsc_loader_options_fill. */
DSC_EXTERN int dsc_loader_options_init2(dsc_loader_options_t *options, size_t size) {
    return dsc_loader_options_fill(options, size);
}

DSC_EXTERN void dsc_loader_options_init(dsc_loader_options_t *options) {
    if (options != NULL)
        dsc__options_defaults(options);
}

int dsc__options_check(const dsc_loader_options_t *o, const dsc_logger_t *log) {
    const char *bad = NULL;
    if (o->dataset == NULL || o->dataset[0] == '\0' || strlen(o->dataset) >= DSC_MAX_NAME)
        bad = "dataset (1..63 bytes) is required";
    else if ((o->servers == NULL || o->servers[0] == '\0') && o->fallback_path == NULL)
        bad = "servers or fallback_path is required";
    else if (o->batch_size == 0)
        bad = "batch_size must be >= 1";
    else if (o->world_size == 0)
        bad = "world_size must be >= 1";
    else if (o->rank >= o->world_size)
        bad = "rank must be < world_size";
    else if (o->prefetch_batches == 0 || o->prefetch_batches > 1024)
        bad = "prefetch_batches must be in 1..1024";
    else if (o->decode_threads == 0 || o->decode_threads > 256)
        bad = "decode_threads must be in 1..256";
    else if (o->connections == 0 || o->connections > 64)
        bad = "connections must be in 1..64";
    else if (o->replicas > DSC_MAX_REPLICAS)
        bad = "replicas must be <= 8";
    else if (o->timeout_ms > 3600u * 1000u)
        bad = "timeout_ms must be at most an hour (0: the default, 5000)";
    else if (o->device < -1)
        bad = "device must be -1 (host) or a CUDA device index";
    else if (o->order != DSC_ORDER_LOCAL && o->order != DSC_ORDER_GLOBAL &&
             o->order != DSC_ORDER_CALLER)
        bad = "order must be DSC_ORDER_LOCAL (0), DSC_ORDER_GLOBAL (1) or DSC_ORDER_CALLER (2)";
    else if (o->order == DSC_ORDER_CALLER && (o->world_size != 1 || o->rank != 0))
        bad = "order DSC_ORDER_CALLER takes the caller's order as this rank's (its sampler splits "
              "the ranks, e.g. torch's DistributedSampler): world_size must be 1 and rank 0";
    else if (o->order == DSC_ORDER_CALLER && o->drop_last)
        bad = "order DSC_ORDER_CALLER hands out the batches as pushed: drop_last does not apply "
              "(drop the short batch before pushing it)";
    else if (o->order == DSC_ORDER_CALLER && o->shuffle_window != 0)
        bad = "order DSC_ORDER_CALLER: the caller's order is not shuffled again (shuffle_window "
              "must be 0)";
    else if (o->order == DSC_ORDER_CALLER && o->epochs != 0)
        bad = "order DSC_ORDER_CALLER: the caller's order says where epochs end (epochs must be "
              "0)";
    else if (o->order == DSC_ORDER_CALLER && o->order_ahead > (1u << 20) / o->batch_size)
        bad = "order_ahead must be at most 2^20 / batch_size";
    if (bad != NULL) {
        DSC_LOG(log, DSC_LOG_ERROR, "invalid loader options: %s", bad);
        return DSC_EINVAL;
    }
    return 0;
}

DSC_EXTERN int dsc_field_options_init(dsc_field_options_t *options, size_t size) {
    if (options == NULL || size < offsetof(dsc_field_options_t, max_len) + sizeof(uint64_t))
        return DSC_EINVAL;
    dsc_field_options_t full;
    memset(&full, 0, sizeof full);
    full.struct_size = size;
    dsc_image_spec_t spec;
    dsc__image_spec_init(&spec);
    full.image_height = spec.height;
    full.image_width = spec.width;
    full.image_crop = spec.crop;
    memcpy(full.image_scale, spec.scale, sizeof full.image_scale);
    memcpy(full.image_ratio, spec.ratio, sizeof full.image_ratio);
    memcpy(options, &full, size < sizeof full ? size : sizeof full);
    if (size > sizeof full)
        memset((char *)options + sizeof full, 0, size - sizeof full);
    return 0;
}

/* pad_value in the field's dtype, little-endian in out. Integers: truncated toward zero,
 * wrapped to the width; bf16: the f32's upper half (truncated); f16: exact for zero, infinities
 * and values whose f32 mantissa fits 10 bits (small integers, halves), else truncated. */
static void pad_encode(int dtype, double value, uint8_t out[8]) {
    memset(out, 0, 8);
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        int64_t i64;
        float f32;
        double f64;
    } u;
    memset(&u, 0, sizeof u);
    /* Integers through int64 (a double out of an integer type's range is undefined in C):
     * saturated at the int64 range, NaN as 0, then wrapped to the dtype's width. */
    int64_t iv = value != value                 ? 0
                 : value >= 9.2233720368547e18  ? INT64_MAX
                 : value <= -9.2233720368547e18 ? INT64_MIN
                                                : (int64_t)value;
    switch (dtype) {
    case DSC_DTYPE_U8:
        u.u8 = (uint8_t)iv;
        break;
    case DSC_DTYPE_I8:
        u.i8 = (int8_t)iv;
        break;
    case DSC_DTYPE_U16:
        u.u16 = (uint16_t)iv;
        break;
    case DSC_DTYPE_I16:
        u.i16 = (int16_t)iv;
        break;
    case DSC_DTYPE_U32:
        u.u32 = (uint32_t)iv;
        break;
    case DSC_DTYPE_I32:
        u.i32 = (int32_t)iv;
        break;
    case DSC_DTYPE_I64:
        u.i64 = iv;
        break;
    case DSC_DTYPE_F32:
        u.f32 = (float)value;
        break;
    case DSC_DTYPE_F64:
        u.f64 = value;
        break;
    case DSC_DTYPE_BF16: {
        float f = (float)value;
        uint32_t bits;
        memcpy(&bits, &f, 4);
        u.u16 = (uint16_t)(bits >> 16);
        break;
    }
    case DSC_DTYPE_F16: {
        /* Exact for 0, +-1, +-inf and small integers, which is what padding uses. */
        float f = (float)value;
        uint32_t bits;
        memcpy(&bits, &f, 4);
        uint32_t sign = (bits >> 16) & 0x8000u;
        int32_t exp = (int32_t)((bits >> 23) & 0xff) - 127 + 15;
        uint32_t mant = (bits >> 13) & 0x3ffu;
        if (((bits >> 23) & 0xff) == 0)
            u.u16 = (uint16_t)sign;
        else if (exp >= 31)
            u.u16 = (uint16_t)(sign | 0x7c00u);
        else if (exp <= 0)
            u.u16 = (uint16_t)sign;
        else
            u.u16 = (uint16_t)(sign | (uint32_t)exp << 10 | mant);
        break;
    }
    default:
        break;
    }
    memcpy(out, &u, 8);
}

/* A u8[] field decoded as an image (dsc_field_options_t.image): its spec, checked. Returns 0 or
 * DSC_EINVAL (a field of another type, a bad size, crop, range or layout). */
static int setup_image_field(dsc_loader_t *loader, uint32_t f, const dsc_field_options_t *o) {
    const dsc_field_t *fd = &loader->cfg.manifest->schema.fields[f];
    dsc_var_field_t *v = &loader->cfg.var[f];
    if (fd->dtype != DSC_DTYPE_U8 || fd->ndim != 1) {
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                "invalid loader options: image decode of field '%s' (dataset %s): only a u8[] "
                "field (encoded bytes) can be decoded",
                fd->name, loader->cfg.dataset);
        return DSC_EINVAL;
    }
    dsc__image_spec_init(&v->spec);
    v->spec.height = o->image_height;
    v->spec.width = o->image_width;
    v->spec.crop = o->image_crop;
    memcpy(v->spec.scale, o->image_scale, sizeof v->spec.scale);
    memcpy(v->spec.ratio, o->image_ratio, sizeof v->spec.ratio);
    v->spec.flip = o->image_flip != 0;
    v->spec.layout = o->image_layout;
    /* image_background came after the first image options: read where the caller's struct
     * holds it */
    if (o->struct_size >= offsetof(dsc_field_options_t, image_background_rgb) + 3 &&
        o->image_background) {
        v->spec.background = 1;
        memcpy(v->spec.background_rgb, o->image_background_rgb, 3);
    }
    if (dsc__image_spec_check(&v->spec) < 0 || (o->on_decode_error != DSC_DECODE_ERROR_FAIL &&
                                                o->on_decode_error != DSC_DECODE_ERROR_FILL)) {
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                "invalid loader options: image decode of field '%s': size %ux%u (1..8192 each), "
                "crop %d, scale [%g, %g] (0 < lo <= hi <= 1), ratio [%g, %g] (0 < lo <= hi), "
                "layout %d, on_decode_error %d",
                fd->name, o->image_height, o->image_width, o->image_crop, o->image_scale[0],
                o->image_scale[1], o->image_ratio[0], o->image_ratio[1], o->image_layout,
                o->on_decode_error);
        return DSC_EINVAL;
    }
    v->image = 1;
    v->image_fill = o->on_decode_error == DSC_DECODE_ERROR_FILL;
    return 0;
}

/* Settles each variable-length field's output mode and slot room from the caller's
 * field_options (read here, during create, and not kept) and the manifest's size statistics,
 * bounding every slot region (docs/loader.md#variable-length-fields). Returns 0 or DSC_EINVAL
 * (an option naming no variable field, a budget too small for one row, a slot past
 * DSC__SLOT_FIELD_MAX). */
int dsc__options_setup_var_fields(dsc_loader_t *loader, const dsc_loader_options_t *options) {
    const dsc_manifest_t *m = loader->cfg.manifest;
    const dsc_schema_t *schema = &m->schema;
    uint64_t batch = loader->cfg.opt.batch_size;
    loader->cfg.var_count = 0;
    for (uint32_t f = 0; f < schema->field_count; f++) {
        const dsc_field_t *fd = &schema->fields[f];
        dsc_var_field_t *v = &loader->cfg.var[f];
        memset(v, 0, sizeof *v);
        if (!fd->variable)
            continue;
        v->is_var = 1;
        v->row_bytes = fd->row_bytes;
        loader->cfg.var_count++;
    }
    const dsc_field_options_t *fo = NULL;
    uint32_t fo_count = 0;
    if (options->struct_size >=
        offsetof(dsc_loader_options_t, field_option_count) + sizeof options->field_option_count) {
        fo = options->field_options;
        fo_count = options->field_option_count;
    }
    loader->cfg.opt.field_options = NULL; /* the caller's array is not kept */
    loader->cfg.opt.field_option_count = 0;
    if (fo_count > 0 && fo == NULL) {
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                "invalid loader options: field_option_count %u with field_options NULL", fo_count);
        return DSC_EINVAL;
    }
    size_t stride = fo_count > 0 ? fo[0].struct_size : 0;
    if (fo_count > 0 && stride < offsetof(dsc_field_options_t, max_len) + sizeof(uint64_t)) {
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                "invalid loader options: field_options[0].struct_size %zu (use "
                "dsc_field_options_init)",
                stride);
        return DSC_EINVAL;
    }
    uint64_t explicit_budget[DSC_MAX_FIELDS] = {0};
    for (uint32_t i = 0; i < fo_count; i++) {
        const dsc_field_options_t *o =
            (const dsc_field_options_t *)(const void *)((const char *)fo + i * stride);
        uint32_t f = 0;
        while (o->name != NULL && f < schema->field_count &&
               strcmp(schema->fields[f].name, o->name) != 0)
            f++;
        if (o->name == NULL || f == schema->field_count || !loader->cfg.var[f].is_var) {
            DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                    "invalid loader options: field options for %s%s%s: dataset %s has no "
                    "variable-length field of that name",
                    o->name ? "'" : "", o->name ? o->name : "(no name)", o->name ? "'" : "",
                    loader->cfg.dataset);
            return DSC_EINVAL;
        }
        dsc_var_field_t *v = &loader->cfg.var[f];
        if (stride >= offsetof(dsc_field_options_t, on_decode_error) + sizeof(int) && o->image) {
            int rc = setup_image_field(loader, f, o);
            if (rc < 0)
                return rc;
            continue;
        }
        v->pad = o->pad != 0;
        v->max_len = o->max_len;
        pad_encode(schema->fields[f].dtype, o->pad_value, v->pad_bytes);
        explicit_budget[f] = o->max_bytes;
    }
    for (uint32_t f = 0; f < schema->field_count; f++) {
        dsc_var_field_t *v = &loader->cfg.var[f];
        if (!v->is_var || v->image)
            continue;
        const char *name = schema->fields[f].name;
        const dsc_manifest_field_stats_t *vs = &m->field_stats[f];
        if (v->pad) {
            /* Room per sample: the largest sample the manifest knows, or max_len rows when
             * fewer (at least one row, so that an all-empty field still has a region). */
            v->lcap = vs->rows_max ? vs->rows_max : 1;
            if (v->max_len && v->max_len < v->lcap)
                v->lcap = v->max_len;
            if (v->lcap > DSC__SLOT_FIELD_MAX / batch / v->row_bytes) {
                DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                        "dataset %s: padded field '%s': %llu rows of %llu bytes for each of %llu "
                        "samples is over %llu bytes per batch slot; set a smaller max_len",
                        loader->cfg.dataset, name, (unsigned long long)v->lcap,
                        (unsigned long long)v->row_bytes, (unsigned long long)batch,
                        (unsigned long long)DSC__SLOT_FIELD_MAX);
                return DSC_EINVAL;
            }
            continue;
        }
        if (explicit_budget[f]) {
            v->budget = explicit_budget[f];
            v->budget_from = "set by max_bytes";
        } else {
            int exact = 0;
            v->budget = dsc__var_default_budget(batch, vs->bytes_max, vs->bytes_mean, &exact);
            v->budget_from = exact ? "the default: batch_size x the manifest's bytes_max"
                                   : "the default: the largest of 64 MiB, the manifest's "
                                     "bytes_max and 4 x batch_size x its bytes_mean";
        }
        /* Row-aligned, so that the values region holds whole rows; the default at least one
         * row (a field whose samples are all empty). */
        v->budget = v->budget / v->row_bytes * v->row_bytes;
        if (v->budget == 0 && !explicit_budget[f])
            v->budget = v->row_bytes;
        if (v->budget == 0 || v->budget > DSC__SLOT_FIELD_MAX) {
            DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                    "invalid loader options: max_bytes of field '%s' must hold one row (%llu "
                    "bytes) and be at most %llu",
                    name, (unsigned long long)v->row_bytes,
                    (unsigned long long)DSC__SLOT_FIELD_MAX);
            return DSC_EINVAL;
        }
    }
    return 0;
}

/* Warns when the decoded chunks of the shuffle windows the planner must hold do not fit in
 * cache_bytes. The planner plans steps while held_bytes < cache_bytes, and a chunk is dropped
 * once the planned steps that need it are collated; a window of W samples holds W * sample_bytes
 * of whole chunks plus the two chunks it shares with its neighbours. A chunk's last sample in
 * its window comes near the window's end, so at a window boundary nearly all of window w is
 * still held while the first steps of w + 1 are planned (and, with prefetch_batches slots, may
 * be collated before w's last step): unless all of w + 1 can be planned then, chunks whose other
 * samples lie in its unplanned rest are dropped and fetched again (stats.refetches). Measured:
 * no refetch from about 1.8 window footprints up, hundreds at 1.5 with a fast consumer. The
 * order is never changed to fit: it stays a pure function of the options. With cache_bytes 0
 * (the default) it is set to the larger of DSC__LOADER_DEFAULT_CACHE_BYTES and that need instead.
 */
void dsc__options_cache_budget(dsc_loader_t *loader) {
    int automatic = loader->cfg.opt.cache_bytes == 0;
    dsc_cache_need_t c;
    dsc__cache_need(loader, &c);
    uint64_t need = c.need, edge = c.edge;
    if (automatic) { /* the default: never refetch */
        loader->cfg.opt.cache_bytes =
            need > DSC__LOADER_DEFAULT_CACHE_BYTES ? need : DSC__LOADER_DEFAULT_CACHE_BYTES;
        return;
    }
    if (need <= loader->cfg.opt.cache_bytes || dsc__order_is_caller(loader))
        return; /* the caller's order has no shuffle window */
    uint64_t fit =
        loader->cfg.opt.cache_bytes > edge
            ? (loader->cfg.opt.cache_bytes - edge) / DSC__WINDOWS_HELD / loader->cfg.sample_bytes
            : 0;
    char lower[160] = "";
    if (loader->cfg.opt.shuffle && fit >= 1)
        snprintf(lower, sizeof lower, " or lower shuffle_window to %llu", (unsigned long long)fit);
    DSC_LOG(&loader->cfg.log, DSC_LOG_WARN,
            "loader: cache_bytes %llu is too small for the shuffle window: %u windows of %llu "
            "samples (+ %llu of a step) of %llu bytes, each with 2 edge chunks of up to %llu "
            "bytes, need %llu bytes of decoded chunks at once, so chunks will be fetched several "
            "times per epoch (see the refetches statistic); raise cache_bytes to %llu%s",
            (unsigned long long)loader->cfg.opt.cache_bytes, DSC__WINDOWS_HELD,
            (unsigned long long)c.window, (unsigned long long)c.per_step,
            (unsigned long long)loader->cfg.sample_bytes, (unsigned long long)c.chunk_max,
            (unsigned long long)need, (unsigned long long)need, lower);
}

/* Order caller: the batches the caller may push ahead when order_ahead is 0 (dscache.h): those
 * whose decoded bytes fill cache_bytes, so that the planner sees as far as it may hold chunks,
 * at least those filling the in-flight budget plus the slots, so that the fetches keep the
 * budget busy; at most DEFAULT_AHEAD_MAX and 2^18 samples (what the caller pulls from its
 * sampler at the start of an epoch). */
#define DEFAULT_AHEAD_MAX 1024u
void dsc__options_order_ahead(dsc_loader_t *loader) {
    dsc_loader_options_t *o = &loader->cfg.opt;
    if (o->order_ahead == 0) {
        uint64_t step_bytes = (uint64_t)o->batch_size * loader->cfg.sample_bytes;
        uint64_t ahead = (o->cache_bytes + step_bytes - 1) / step_bytes;
        uint64_t least = (o->inflight_bytes + step_bytes - 1) / step_bytes + o->prefetch_batches;
        uint64_t most = (1u << 18) / o->batch_size;
        most = most < DEFAULT_AHEAD_MAX ? most : DEFAULT_AHEAD_MAX;
        ahead = ahead > least ? ahead : least;
        ahead = ahead < most ? ahead : most;
        o->order_ahead = (uint32_t)(ahead > o->prefetch_batches ? ahead : o->prefetch_batches);
    }
    DSC_LOG(&loader->cfg.log, DSC_LOG_INFO,
            "loader: the caller's order, pushed up to %u batches ahead of next()", o->order_ahead);
}

/* Why a server list did not parse, in words: the entry without a port, when there is one. */
void dsc__options_explain_servers(const char *spec, int rc, char *why, size_t cap) {
    snprintf(why, cap, "%s", dsc_strerror(rc));
    if (rc != DSC_EINVAL || strncmp(spec, "file:", 5) == 0)
        return;
    if (strncmp(spec, "dns:", 4) == 0) {
        snprintf(why, cap,
                 "not dns:NAME:PORT (the data port of dscached --listen, e.g. "
                 "dns:dscache.default.svc:7070)");
        return;
    }
    const char *p = spec;
    while (*p) {
        size_t n = strcspn(p, ", \t\r\n");
        if (n > 0 && p[0] != '#') {
            const char *colon = NULL;
            for (size_t i = 0; i < n; i++)
                if (p[i] == ':')
                    colon = p + i;
            int port_ok = colon != NULL && colon + 1 < p + n && (p[0] != '[' || colon[-1] == ']');
            for (const char *c = colon ? colon + 1 : p; port_ok && c < p + n; c++)
                port_ok = *c >= '0' && *c <= '9';
            if (!port_ok) {
                /* The example keeps the host part: "h:abc" -> h:7070, "h" -> h:7070. */
                size_t host = n;
                if (colon != NULL &&
                    (p[0] == '[' ? colon[-1] == ']' : memchr(p, ':', (size_t)(colon - p)) == NULL))
                    host = (size_t)(colon - p);
                snprintf(why, cap,
                         "\"%.*s\" is not HOST:PORT: name each server with its data port (the "
                         "one dscached --listen gives, e.g. %.*s:7070)",
                         (int)(n > 100 ? 100 : n), p, (int)(host > 100 ? 100 : host), p);
                return;
            }
        }
        p += n;
        while (*p == ',' || *p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
            p++;
    }
}

/* An environment integer (RANK, WORLD_SIZE): 1 and *out when set to a whole number, 0 when unset
 * or empty, -1 when set to something else. */
static int env_uint(const char *name, uint64_t *out) {
    const char *v = getenv(name);
    if (v == NULL || v[0] == '\0')
        return 0;
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || v[0] == '-')
        return -1;
    *out = x;
    return 1;
}

/* rank / world_size against RANK / WORLD_SIZE of the launcher (torchrun, Slurm and MPI wrappers
 * set them): a process told it is rank 0 of 1 inside a 2-rank job reads the samples of another
 * rank (or all of them) without a word otherwise. ignore_rank_env turns the check off. */
int dsc__options_check_rank_env(const dsc_loader_options_t *o, const dsc_logger_t *log) {
    if (o->ignore_rank_env)
        return 0;
    uint64_t env_rank = 0, env_world = 0;
    int has_rank = env_uint("RANK", &env_rank), has_world = env_uint("WORLD_SIZE", &env_world);
    if (has_rank < 0 || has_world < 0) {
        DSC_LOG(log, DSC_LOG_ERROR,
                "invalid loader options: environment %s=\"%s\" is not a whole number (the "
                "launcher's rank / world size; set ignore_rank_env = 1 to ignore it)",
                has_rank < 0 ? "RANK" : "WORLD_SIZE", getenv(has_rank < 0 ? "RANK" : "WORLD_SIZE"));
        return DSC_EINVAL;
    }
    int world_bad = has_world > 0 && env_world != o->world_size;
    int rank_bad = has_rank > 0 && env_rank != o->rank;
    if (!world_bad && !rank_bad)
        return 0;
    char envtext[96];
    snprintf(envtext, sizeof envtext, "%s%.20s%s%s%.20s", has_rank > 0 ? "RANK=" : "",
             has_rank > 0 ? getenv("RANK") : "", has_rank > 0 && has_world > 0 ? " " : "",
             has_world > 0 ? "WORLD_SIZE=" : "", has_world > 0 ? getenv("WORLD_SIZE") : "");
    char harm[160];
    if (world_bad)
        snprintf(harm, sizeof harm,
                 "the ranks would not split the dataset as the job's %llu "
                 "ranks should",
                 (unsigned long long)env_world);
    else
        snprintf(harm, sizeof harm,
                 "this process would read rank %u's samples, which that rank "
                 "reads too",
                 o->rank);
    DSC_LOG(log, DSC_LOG_ERROR,
            "invalid loader options: rank %u / world_size %u disagree with the launcher's "
            "environment %s: %s; set rank and world_size from the environment, or "
            "ignore_rank_env = 1 if this process is meant to read as rank %u of %u",
            o->rank, o->world_size, envtext, harm, o->rank, o->world_size);
    return DSC_EINVAL;
}

/* An epoch that gives a rank no batch at all is a mistake (batch_size larger than a rank's share
 * with drop_last): refused with the numbers. A dropped last batch is said once, with the samples
 * each epoch never hands out. */
int dsc__options_check_epoch_size(dsc_loader_t *loader) {
    const dsc_loader_options_t *o = &loader->cfg.opt;
    dsc_split_t sp;
    int rc =
        dsc__split_init(&sp, loader->cfg.samples, 0, o->batch_size, o->world_size, o->drop_last);
    if (rc < 0)
        return rc;
    if (sp.steps == 0) {
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                "invalid loader options: an epoch would give each rank no batch: dataset %s has "
                "%llu samples, %llu per rank over world_size %u, fewer than batch_size %u, and "
                "drop_last drops the short batch; lower batch_size to at most %llu or turn "
                "drop_last off",
                loader->cfg.dataset, (unsigned long long)loader->cfg.samples,
                (unsigned long long)sp.per_rank, o->world_size, o->batch_size,
                (unsigned long long)sp.per_rank);
        return DSC_EINVAL;
    }
    uint64_t seen = sp.steps * o->batch_size * o->world_size;
    if (o->drop_last && seen < loader->cfg.samples)
        DSC_LOG(&loader->cfg.log, DSC_LOG_WARN,
                "loader: drop_last: each epoch hands out %llu of the %llu samples of %s (%llu "
                "steps of batch %u on %u rank(s)); %llu samples per epoch are never seen%s",
                (unsigned long long)seen, (unsigned long long)loader->cfg.samples,
                loader->cfg.dataset, (unsigned long long)sp.steps, o->batch_size, o->world_size,
                (unsigned long long)(loader->cfg.samples - seen),
                o->shuffle ? " (other ones each epoch)" : " (the same ones every epoch)");
    return 0;
}
