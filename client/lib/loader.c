/* Loader API, the top of the loader: options, create/destroy (wiring the stages and starting
 * their threads), and the consumer side (next). See pipeline.h and docs/architecture-client.md
 * for the layers; this file calls down into all of them and nothing calls back up into it. */
#include "loader.h"
#include "batch.h"
#include "decode.h"
#include "diag.h"
#include "dsc_sys.h"
#include "fetch.h"
#include "hedge.h"
#include "mixture.h"
#include "pipeline.h"
#include "scheduler.h"
#include "sources.h"
#include "stats.h"
#include "util.h"

#include "view.h"
#include <sched.h>

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define DEFAULT_CACHE_BYTES (256ull << 20)

#define DEFAULT_MAX_HELD_BYTES (1ull << 30)
/* The struct_size of the first dsc_loader_options_t (up to timeout_ms .. stats_log_seconds):
 * smaller ones are refused. */
#define OPTIONS_MIN_SIZE offsetof(dsc_loader_options_t, cache_bytes)

static void options_defaults(dsc_loader_options_t *options) {
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
    options->cache_bytes = 0; /* from the dataset (check_cache_budget) */
    options->order = DSC_ORDER_LOCAL;
    options->max_held_bytes = DEFAULT_MAX_HELD_BYTES;
}

DSC_EXTERN int dsc_loader_options_init2(dsc_loader_options_t *options, size_t size) {
    if (options == NULL || size < OPTIONS_MIN_SIZE)
        return DSC_EINVAL;
    dsc_loader_options_t full;
    options_defaults(&full);
    full.struct_size = size;
    /* Only the caller's bytes: its struct may be an older, smaller one. */
    memcpy(options, &full, size < sizeof full ? size : sizeof full);
    if (size > sizeof full)
        memset((char *)options + sizeof full, 0, size - sizeof full);
    return 0;
}

DSC_EXTERN void dsc_loader_options_init(dsc_loader_options_t *options) {
    if (options != NULL)
        options_defaults(options);
}

/* ---- Create / destroy --------------------------------------------------------------------- */

/* The calling thread's last dsc_loader_create failure, in words. */
static _Thread_local char create_error[1024];

/* Why one server did not give the manifest, appended to buf at *used. */
static void explain_peer(const dsc_loader_t *loader, const dsc_peer_t *peer, char *buf, size_t cap,
                         size_t *used) {
    int r = peer->manifest_rc;
    uint16_t data_port = 0;
    char why[640];
    snprintf(why, sizeof why, "%s", dsc_strerror(r));
    if (r == DSC_EUNAVAIL) {
        /* conn.c says EUNAVAIL when the name does not resolve: say which. */
        char host[DSC_MEMBER_MAX];
        snprintf(host, sizeof host, "%s", peer->addr);
        char *colon = strrchr(host, ':');
        if (colon != NULL)
            *colon = '\0';
        if (host[0] == '[') {
            memmove(host, host + 1, strlen(host));
            char *end = strchr(host, ']');
            if (end)
                *end = '\0';
        }
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
        struct addrinfo *res = NULL;
        int g = getaddrinfo(host, NULL, &hints, &res);
        if (g != 0)
            snprintf(why, sizeof why, "host name %s not resolved (%s)", host, gai_strerror(g));
        if (res != NULL)
            freeaddrinfo(res);
    } else if ((r == DSC_ECLOSED || r == DSC_EPROTO || r == DSC_ECONNRESET || r == DSC_EBADMAGIC ||
                r == DSC_ETIMEDOUT) &&
               dsc_conn_http_probe(peer->addr, 1000, &data_port)) {
        /* No HELLO answer but HTTP: the loader was given the HTTP port. */
        char host[DSC_MEMBER_MAX];
        snprintf(host, sizeof host, "%s", peer->addr);
        char *colon = strrchr(host, ':');
        if (colon != NULL)
            *colon = '\0';
        if (data_port != 0)
            snprintf(why, sizeof why,
                     "that is dscached's HTTP port (it answers HTTP, not the data protocol); the "
                     "data port is %s:%u",
                     host, (unsigned)data_port);
        else
            snprintf(why, sizeof why,
                     "that port answers HTTP, not the dscache data protocol (an HTTP port?); give "
                     "the data port, the one dscached --listen gives (default 7070)");
    } else if (r == DSC_EVERSION) {
        snprintf(why, sizeof why, "protocol version not supported (another dscache version?)");
    } else if (r == DSC_ENOTFOUND) {
        char names[512];
        int n = dsc__view_list_datasets(loader, peer->addr, names, sizeof names);
        if (n > 0)
            snprintf(why, sizeof why, "dataset %s not found; it has: %s", loader->cfg.dataset,
                     names);
        else if (n == 0)
            snprintf(why, sizeof why, "dataset %s not found; it has no datasets",
                     loader->cfg.dataset);
        else
            snprintf(why, sizeof why, "dataset %s not found", loader->cfg.dataset);
    }
    int k =
        snprintf(buf + *used, cap - *used, "%sserver %s: %s", *used ? "; " : "", peer->addr, why);
    if (k > 0)
        *used = (size_t)k >= cap - *used ? cap - 1 : *used + (size_t)k;
}

/* create failed with rc: the thread's create_error says why (per server for the manifest). */
static void explain_create_failure(dsc_loader_t *loader, int rc, int manifest_step) {
    char text[sizeof create_error];
    size_t used = 0;
    text[0] = '\0';
    if (loader != NULL && manifest_step) {
        for (uint32_t i = 0; i < loader->net.peer_count && used + 1 < sizeof text; i++)
            if (loader->net.peers[i].manifest_rc < 0)
                explain_peer(loader, &loader->net.peers[i], text, sizeof text, &used);
    }
    if (used == 0 && loader != NULL) {
        pthread_mutex_lock(&loader->err_lock);
        snprintf(text, sizeof text, "%s", loader->err_text);
        pthread_mutex_unlock(&loader->err_lock);
    }
    if (text[0] == '\0')
        snprintf(text, sizeof text, "%s", dsc_strerror(rc));
    else if (loader != NULL && manifest_step && used > 0)
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR, "loader: no manifest of %s: %s",
                loader->cfg.dataset, text);
    snprintf(create_error, sizeof create_error, "%s", text);
}

DSC_EXTERN int dsc_loader_last_error(const dsc_loader_t *loader, char *buf, size_t cap) {
    char text[sizeof create_error];
    if (loader == NULL) {
        snprintf(text, sizeof text, "%s", create_error);
    } else {
        dsc_loader_t *l = (dsc_loader_t *)(uintptr_t)loader;
        pthread_mutex_lock(&l->err_lock);
        snprintf(text, sizeof text, "%s", l->err_text);
        pthread_mutex_unlock(&l->err_lock);
    }
    if (buf != NULL && cap > 0)
        snprintf(buf, cap, "%s", text);
    return (int)strlen(text);
}

static char *dup_str(const char *s) {
    if (s == NULL)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

static int check_options(const dsc_loader_options_t *o, const dsc_logger_t *log) {
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
static int setup_var_fields(dsc_loader_t *loader, const dsc_loader_options_t *options) {
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

static int start_threads(dsc_loader_t *loader, int reader) {
    pthread_mutex_lock(&loader->lock);
    int rc = 0;
    for (uint32_t s = 0; s < loader->net.peer_count && rc == 0; s++)
        rc = dsc__peer_start(loader, s);
    if (rc == 0 && loader->cfg.fallback != NULL)
        rc = dsc__peer_start(loader, DSC__PEER_FALLBACK);
    loader->net.threads_running = 1;
    pthread_mutex_unlock(&loader->lock);
    if (rc < 0)
        return rc;
    for (uint32_t i = 0; i < loader->work.worker_count; i++) {
        if (pthread_create(&loader->work.workers[i], NULL, dsc__worker_main, loader) != 0)
            return DSC_ENOMEM;
        loader->work.workers_started++;
    }
    if (!reader) { /* a reader (reader.c) plans nothing: its caller names the samples */
        if (pthread_create(&loader->sched.thread, NULL, dsc__sched_main, loader) != 0)
            return DSC_ENOMEM;
        loader->sched.started = 1;
    }
    if (loader->net.peer_count > 0) {
        if (pthread_create(&loader->view.thread, NULL, dsc__view_main, loader) != 0)
            return DSC_ENOMEM;
        loader->view.started = 1;
        if (pthread_create(&loader->hedge.thread, NULL, dsc__hedge_main, loader) != 0)
            return DSC_ENOMEM;
        loader->hedge.started = 1;
    }
    return 0;
}

/* Shuffle windows whose decoded chunks must be held at once for every chunk to be fetched once
 * per epoch (see check_cache_budget). */
/* The default shuffle window holds at most 8192 samples and about this many bytes, so that the
 * default cache (two windows) stays near 256 MiB on any sample size. */
#define AUTO_WINDOW_BYTES (64ull << 20)

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
 * (the default) it is set to the larger of DEFAULT_CACHE_BYTES and that need instead. */
static void check_cache_budget(dsc_loader_t *loader) {
    int automatic = loader->cfg.opt.cache_bytes == 0;
    dsc_cache_need_t c;
    dsc__cache_need(loader, &c);
    uint64_t need = c.need, edge = c.edge;
    if (automatic) { /* the default: never refetch */
        loader->cfg.opt.cache_bytes = need > DEFAULT_CACHE_BYTES ? need : DEFAULT_CACHE_BYTES;
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
static void order_ahead_default(dsc_loader_t *loader) {
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
static void explain_servers(const char *spec, int rc, char *why, size_t cap) {
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
static int check_rank_env(const dsc_loader_options_t *o, const dsc_logger_t *log) {
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
static int check_epoch_size(dsc_loader_t *loader) {
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

/* reader 1: the loader of a dsc_reader_t (loader.h). */
static int loader_create(const dsc_loader_options_t *options, int reader, dsc_loader_t **out) {
    create_error[0] = '\0';
    if (options == NULL || out == NULL || options->struct_size < OPTIONS_MIN_SIZE) {
        snprintf(create_error, sizeof create_error, "invalid loader options: %s",
                 options == NULL || out == NULL
                     ? "NULL options or out"
                     : "struct_size smaller than the first dsc_loader_options_t");
        return DSC_EINVAL;
    }
    if (options->struct_size >= offsetof(dsc_loader_options_t, n_sources) + sizeof(uint32_t) &&
        options->n_sources > 0) {
        if (reader) {
            snprintf(create_error, sizeof create_error,
                     "invalid reader options: n_sources %u: a reader reads one dataset",
                     options->n_sources);
            return DSC_EINVAL;
        }
        return dsc__mix_loader_create(options, out, create_error, sizeof create_error);
    }
    int manifest_step = 0;
    dsc_loader_t *loader = calloc(1, sizeof *loader);
    if (loader == NULL) {
        snprintf(create_error, sizeof create_error, "%s", dsc_strerror(DSC_ENOMEM));
        return DSC_ENOMEM;
    }
    pthread_mutex_init(&loader->err_lock, NULL);
    /* Copy what the caller's struct holds; newer fields keep their defaults. */
    options_defaults(&loader->cfg.opt);
    size_t n = options->struct_size < sizeof loader->cfg.opt ? options->struct_size
                                                             : sizeof loader->cfg.opt;
    memcpy(&loader->cfg.opt, options, n);
    loader->cfg.opt.struct_size = sizeof loader->cfg.opt;
    loader->cfg.reader = reader;
    if (reader) {
        /* One batch at a time, collated by the caller's thread: no plan, no rank split. */
        loader->cfg.opt.prefetch_batches = 2;
        loader->cfg.opt.decode_threads = 1; /* checked below; none is started */
        loader->cfg.opt.rank = 0;
        loader->cfg.opt.world_size = 1;
        loader->cfg.opt.shuffle = 0;
        loader->cfg.opt.drop_last = 0;
    }
    if (loader->cfg.opt.timeout_ms == 0)
        loader->cfg.opt.timeout_ms = 5000;
    if (loader->cfg.opt.max_held_bytes == 0)
        loader->cfg.opt.max_held_bytes = DEFAULT_MAX_HELD_BYTES;
    dsc__logger_init(&loader->cfg.log, options->log_fn, options->log_ctx, options->log_level);
    loader->cfg.log.err_lock = &loader->err_lock;
    loader->cfg.log.err_buf = loader->err_text;
    loader->cfg.log.err_cap = sizeof loader->err_text;
    pthread_mutex_init(&loader->lock, NULL);
    pthread_cond_init(&loader->sched_cv, NULL);
    pthread_cond_init(&loader->io_cv, NULL);
    pthread_cond_init(&loader->work_cv, NULL);
    pthread_cond_init(&loader->cons_cv, NULL);
    pthread_cond_init(&loader->view.cv, NULL);
    loader->stats.created_at = loader->stats.last_log = dsc_now_s();
    loader->stats.st.struct_size = sizeof loader->stats.st;
    dsc__epoch_wire_reset(loader);
    int rc = check_options(&loader->cfg.opt, &loader->cfg.log);
    /* A reader has no ranks; with the caller's order the sampler splits them. */
    if (rc == 0 && !reader && loader->cfg.opt.order != DSC_ORDER_CALLER)
        rc = check_rank_env(&loader->cfg.opt, &loader->cfg.log);
    if (loader->cfg.opt.order == DSC_ORDER_CALLER)
        loader->cfg.opt.shuffle = 0; /* the order object only locates samples */
    if (rc < 0)
        goto fail;
    dsc__hedge_init(loader);
    rc = dsc__diag_init(loader, loader->stats.created_at); /* takes the job name while valid */
    loader->cfg.opt.job_name = NULL;                       /* the caller's string is not kept */
    if (rc < 0)
        goto fail;
    rc = DSC_ENOMEM;
    loader->cfg.dataset = dup_str(options->dataset);
    loader->cfg.fallback = dup_str(options->fallback_path);
    loader->cfg.opt.dataset = loader->cfg.dataset;
    loader->cfg.opt.fallback_path = loader->cfg.fallback;
    loader->cfg.opt.servers = NULL; /* the caller's string is not kept */
    loader->cfg.opt.auth_file = NULL;
    if (loader->cfg.dataset == NULL || (options->fallback_path && loader->cfg.fallback == NULL))
        goto fail;
    loader->cfg.cred = calloc(1, sizeof *loader->cfg.cred);
    if (loader->cfg.cred == NULL)
        goto fail;
    {
        /* Read once here (docs/security.md); the buffer is wiped, the secret kept for
         * reconnects until destroy. */
        const char *auth_file = options->struct_size > offsetof(dsc_loader_options_t, auth_file)
                                    ? options->auth_file
                                    : NULL;
        char why[512];
        int found = dsc__credential_load(auth_file, loader->cfg.cred, why, sizeof why);
        if (found < 0) {
            DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR, "%s", why);
            rc = found;
            goto fail;
        }
        if (found == 0) {
            free(loader->cfg.cred);
            loader->cfg.cred = NULL;
        } else {
            DSC_LOG(&loader->cfg.log, DSC_LOG_INFO, "authenticating as %s", loader->cfg.cred->name);
        }
    }
    loader->cfg.source_env = (dsc_source_env_t){
        .log = &loader->cfg.log,
        .pool = &loader->cfg.pool,
        .dataset = loader->cfg.dataset,
        .timeout_ms = loader->cfg.opt.timeout_ms,
        .cred = loader->cfg.cred,
        .counters = &loader->cfg.transport_counters,
    };
    /* transport: the option, else $DSCACHE_TRANSPORT, else auto. */
    const char *transport = options->struct_size > offsetof(dsc_loader_options_t, transport)
                                ? options->transport
                                : NULL;
    const char *transport_from = "transport";
    if (transport == NULL || transport[0] == '\0') {
        transport = getenv("DSCACHE_TRANSPORT");
        transport_from = "DSCACHE_TRANSPORT";
    }
    if (transport == NULL || transport[0] == '\0')
        transport = "auto";
    loader->cfg.opt.transport = NULL; /* the caller's string is not kept */
    if (dsc__transport_parse(transport, &loader->cfg.source_env.transport) < 0) {
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                "invalid loader options: %s \"%s\" (tcp, rdma or auto)", transport_from, transport);
        rc = DSC_EINVAL;
        goto fail;
    }
    rc = DSC_ENOMEM;
    loader->net.peers = calloc(DSC_LOADER_MAX_PEERS + 1, sizeof(dsc_peer_t));
    if (loader->net.peers == NULL)
        goto fail;
    dsc_peer_t *files = &loader->net.peers[DSC__PEER_FALLBACK];
    snprintf(files->addr, DSC_MEMBER_MAX, "fallback files");
    files->used = 1;
    files->alive = loader->cfg.fallback != NULL;
    files->io = calloc(loader->cfg.opt.connections, sizeof(dsc_io_t));
    if (files->io == NULL)
        goto fail;
    if (loader->cfg.fallback != NULL) {
        files->source = &dsc__source_files;
        if (files->source->endpoint_open(&loader->cfg.source_env, loader->cfg.fallback,
                                         &files->endpoint) < 0)
            goto fail;
    }
    if (options->servers != NULL && options->servers[0] != '\0') {
        loader->cfg.servers_spec = dup_str(options->servers);
        if (loader->cfg.servers_spec == NULL)
            goto fail;
        dsc_members_t members = {0};
        rc = dsc_members_resolve(options->servers, &members);
        if (rc == 0) {
            pthread_mutex_lock(&loader->lock);
            rc = dsc__view_adopt(loader, &members);
            pthread_mutex_unlock(&loader->lock);
        }
        dsc_members_free(&members);
        if (rc < 0) {
            char why[256];
            explain_servers(options->servers, rc, why, sizeof why);
            DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR, "servers \"%s\": %s", options->servers, why);
            goto fail;
        }
        loader->view.changes = 0; /* the first view is not a change */
    }
    /* Freed chunk buffers are kept for reuse up to the memory the budgets allow anyway: no
     * page faults and munmaps on the hot path. */
    dsc__bufpool_init(&loader->cfg.pool,
                      (size_t)(loader->cfg.opt.inflight_bytes + (loader->cfg.opt.cache_bytes
                                                                     ? loader->cfg.opt.cache_bytes
                                                                     : DEFAULT_CACHE_BYTES)));

    rc = dsc__fetch_manifest(loader);
    if (rc < 0) {
        manifest_step = 1;
        goto fail;
    }
    const dsc_manifest_t *m = loader->cfg.manifest;
    loader->cfg.samples = m->samples;
    loader->cfg.field_count = m->schema.field_count;
    rc = setup_var_fields(loader, options);
    if (rc < 0)
        goto fail;
    /* Decoded bytes per sample, for the budgets: variable fields count their mean size. */
    loader->cfg.sample_bytes = dsc__chunk_raw_estimate(m, 1);
    if (loader->cfg.samples == 0 || loader->cfg.sample_bytes == 0) {
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR, "dataset %s is empty", loader->cfg.dataset);
        rc = DSC_EBADMANIFEST;
        goto fail;
    }
    rc = reader || dsc__order_is_caller(loader) ? 0 : check_epoch_size(loader);
    if (rc < 0)
        goto fail;
    if (loader->cfg.opt.shuffle_window == 0) { /* a window of at most AUTO_WINDOW_BYTES */
        uint64_t w = AUTO_WINDOW_BYTES / loader->cfg.sample_bytes;
        loader->cfg.opt.shuffle_window = (uint32_t)(w >= 8192 ? 8192 : w ? w : 1);
    }
    loader->cfg.source_env.manifest = m;
    /* The RDMA slab is sized by the largest request, so after the manifest (fetched over TCP);
     * registered before any I/O thread connects. $DSCACHE_RDMA_SLAB_BYTES overrides the size
     * (a tight memlock limit), never below twice the largest request. */
    uint64_t slab_bytes = dsc__rdma_slab_bytes(m, loader->cfg.opt.inflight_bytes);
    const char *slab_env = getenv("DSCACHE_RDMA_SLAB_BYTES");
    if (loader->cfg.source_env.transport != DSC_TRANSPORT_TCP && slab_env != NULL &&
        slab_env[0] != '\0') {
        if (dsc_parse_size(slab_env, &slab_bytes) < 0) {
            DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                    "invalid DSCACHE_RDMA_SLAB_BYTES \"%s\" (a size: 64M, 1G, ...)", slab_env);
            rc = DSC_EINVAL;
            goto fail;
        }
        uint64_t least = dsc__rdma_slab_bytes(m, 0);
        slab_bytes = slab_bytes < least ? least : slab_bytes;
    }
    rc = dsc__rdma_client_open(loader->cfg.source_env.transport, slab_bytes, &loader->cfg.log,
                               &loader->cfg.source_env.rdma);
    if (rc < 0)
        goto fail;
    if (loader->net.peer_count > 0)
        dsc__view_learn_replicas(loader);
    else if (loader->cfg.opt.replicas == 0)
        loader->cfg.opt.replicas = 1; /* fallback files only: placement is not used */
    if (!reader)
        check_cache_budget(loader);
    else if (loader->cfg.opt.cache_bytes == 0)
        loader->cfg.opt.cache_bytes = DEFAULT_CACHE_BYTES;
    loader->cfg.cache_bytes = loader->cfg.opt.cache_bytes;
    if (dsc__order_is_caller(loader))
        order_ahead_default(loader);
    if (loader->cfg.opt.device >= 0) {
        rc = dsc__cuda_open(loader->cfg.opt.device, &loader->cfg.log, &loader->cfg.cuda);
        if (rc < 0)
            goto fail;
        dsc__decode_probe_gpu(loader);
    }
    loader->work.assist = !loader->cfg.opt.no_assist && loader->cfg.cuda == NULL;
    loader->cons.slot_count = loader->cfg.opt.prefetch_batches;
    rc = dsc__slots_alloc(loader);
    if (rc < 0)
        goto fail;
    rc = reader ? 0 : dsc__sched_init(loader); /* a reader makes its own chunk table */
    if (rc < 0)
        goto fail;
    rc = DSC_ENOMEM;
    loader->work.worker_count = reader ? 0 : loader->cfg.opt.decode_threads;
    loader->work.workers = calloc(loader->work.worker_count + 1, sizeof(pthread_t));
    if (loader->work.workers == NULL)
        goto fail;
    rc = start_threads(loader, reader);
    if (rc < 0)
        goto fail;
    DSC_LOG(&loader->cfg.log, DSC_LOG_INFO,
            "loader: dataset %s (%llu samples, %u shards), %u server(s), batch %u, rank %u/%u, "
            "%u slots of %zu bytes%s",
            loader->cfg.dataset, (unsigned long long)loader->cfg.samples, m->shard_count,
            loader->net.peer_count, loader->cfg.opt.batch_size, loader->cfg.opt.rank,
            loader->cfg.opt.world_size, loader->cons.slot_count, loader->cons.slot_bytes,
            loader->cfg.cuda ? " (pinned, CUDA)" : "");
    *out = loader;
    return 0;
fail:
    explain_create_failure(loader, rc, manifest_step);
    dsc_loader_destroy(loader);
    return rc;
}

DSC_EXTERN int dsc_loader_create(const dsc_loader_options_t *options, dsc_loader_t **out) {
    return loader_create(options, 0, out);
}

int dsc__loader_create_reader(const dsc_loader_options_t *options, dsc_loader_t **out) {
    return loader_create(options, 1, out);
}

DSC_EXTERN void dsc_loader_destroy(dsc_loader_t *loader) {
    if (loader == NULL)
        return;
    if (loader->mix != NULL) {
        dsc__mix_loader_destroy(loader);
        return;
    }
    pthread_mutex_lock(&loader->lock);
    /* Batches kept past next() (retained, or DLPack tensors alive) lose their memory now: the
     * caller hears it, rather than reading freed slots later without a word. */
    uint32_t kept = 0;
    for (uint32_t i = 0; loader->cons.slots != NULL && i < loader->cons.slot_count; i++) {
        const dsc_batch_slot_t *slot = loader->cons.slots[i];
        if (slot != NULL && slot->refs > (&slot->batch == loader->cons.current ? 1u : 0u))
            kept++;
    }
    if (kept > 0)
        DSC_LOG(&loader->cfg.log, DSC_LOG_WARN,
                "loader destroyed while %u batch(es) are still held (retained, or DLPack tensors "
                "of them alive): their memory is freed now and any view of it is invalid; "
                "release them (or delete the tensors) before dsc_loader_destroy",
                kept);
    loader->stop = 1;
    pthread_cond_broadcast(&loader->sched_cv);
    pthread_cond_broadcast(&loader->io_cv);
    pthread_cond_broadcast(&loader->work_cv);
    pthread_cond_broadcast(&loader->cons_cv);
    pthread_cond_broadcast(&loader->view.cv);
    /* Wake threads blocked in their data source or on the view thread's connection. */
    if (loader->net.peers != NULL)
        for (uint32_t p = 0; p <= DSC__PEER_FALLBACK; p++) {
            dsc_peer_t *peer = &loader->net.peers[p];
            for (uint32_t i = 0; peer->io != NULL && i < loader->cfg.opt.connections; i++)
                if (peer->io[i].conn != NULL)
                    peer->source->wake(peer->io[i].conn);
        }
    dsc_conn_shutdown(loader->view.conn);
    dsc_conn_shutdown(loader->hedge.conn);
    pthread_mutex_unlock(&loader->lock);
    if (loader->view.started)
        pthread_join(loader->view.thread, NULL);
    if (loader->hedge.started)
        pthread_join(loader->hedge.thread, NULL);
    if (loader->sched.started)
        pthread_join(loader->sched.thread, NULL);
    for (uint32_t i = 0; i < loader->work.workers_started; i++)
        pthread_join(loader->work.workers[i], NULL);
    if (loader->net.peers != NULL)
        for (uint32_t p = 0; p <= DSC__PEER_FALLBACK; p++)
            for (uint32_t i = 0; loader->net.peers[p].io != NULL && i < loader->cfg.opt.connections;
                 i++)
                if (loader->net.peers[p].io[i].started)
                    pthread_join(loader->net.peers[p].io[i].thread, NULL);
    /* Threads are gone: the servers hear that the job finished, then what is left is freed (I/O
     * threads freed the cancelled entries they held). */
    if (loader->net.threads_running)
        dsc__diag_final_report(loader);
    dsc__hedge_free(loader);
    dsc__sched_free(loader);
    dsc__diag_free(loader);
    if (loader->net.peers != NULL)
        for (uint32_t p = 0; p <= DSC__PEER_FALLBACK; p++) {
            dsc_peer_t *peer = &loader->net.peers[p];
            for (uint32_t i = 0; peer->io != NULL && i < loader->cfg.opt.connections; i++)
                if (peer->io[i].conn != NULL)
                    peer->source->close(peer->io[i].conn);
            free(peer->io);
            if (peer->endpoint != NULL)
                peer->source->endpoint_close(peer->endpoint);
        }
    dsc__rdma_client_close(loader->cfg.source_env.rdma); /* after every connection */
    free(loader->work.workers);
    free(loader->work.assist_ctx.scratch);
    dsc__image_ctx_destroy(loader->work.assist_ctx.image);
    dsc__slots_free(loader);
    dsc__cuda_close(loader->cfg.cuda);
    dsc_manifest_free(loader->cfg.manifest);
    dsc_members_free(&loader->net.members);
    free(loader->net.member_peer);
    free(loader->cfg.servers_spec);
    dsc__credential_wipe(loader->cfg.cred);
    free(loader->cfg.cred);
    free(loader->net.peers);
    if (loader->cfg.pool.max_cached)
        dsc__bufpool_close(&loader->cfg.pool);
    free(loader->cfg.dataset);
    free(loader->cfg.fallback);
    pthread_mutex_destroy(&loader->lock);
    pthread_cond_destroy(&loader->sched_cv);
    pthread_cond_destroy(&loader->io_cv);
    pthread_cond_destroy(&loader->work_cv);
    pthread_cond_destroy(&loader->cons_cv);
    pthread_cond_destroy(&loader->view.cv);
    pthread_mutex_destroy(&loader->err_lock);
    free(loader);
}

/* ---- Consumer ------------------------------------------------------------------------------ */

/* Decoded bytes of a collated batch of `count` samples in slot. */
static uint64_t batch_bytes(const dsc_loader_t *loader, const dsc_batch_slot_t *slot,
                            uint32_t count) {
    const dsc_schema_t *schema = &loader->cfg.manifest->schema;
    uint64_t bytes = (uint64_t)count * schema->sample_bytes; /* the fixed fields */
    for (uint32_t f = 0; loader->cfg.var_count > 0 && f < schema->field_count; f++) {
        const dsc_var_field_t *v = &loader->cfg.var[f];
        if (v->image)
            bytes += (uint64_t)count * v->spec.height * v->spec.width * 3;
        else if (v->is_var)
            bytes += slot->var_rows[f] * v->row_bytes * (v->pad ? count : 1u);
    }
    return bytes;
}

/* dsc_loader_next; with retain, the batch handed out gets that reference for the caller too (as
 * dsc_batch_retain), under the same lock. */
static int loader_next(dsc_loader_t *loader, dsc_batch_t **out, int retain) {
    if (loader->mix != NULL)
        return dsc__mix_loader_next(loader, out, retain);
    double t0 = dsc_now_s();
    pthread_mutex_lock(&loader->lock);
    if (loader->stats.last_return > 0)
        loader->stats.st.compute_seconds += t0 - loader->stats.last_return;
    if (loader->cons.want_epoch < loader->cons.cons_epoch) { /* the next epoch is asked for */
        loader->cons.want_epoch = loader->cons.cons_epoch;
        pthread_cond_broadcast(&loader->sched_cv);
    }
    dsc__batch_release_current(loader);
    int rc = 0;
    dsc_step_t *st = NULL;
    /* What the wait is spent on, for the verdict: re-read at each wake-up (diag.c). */
    int cause = -1;
    uint32_t cause_peer = UINT32_MAX;
    double mark = t0;
    for (;;) {
        if (loader->error) {
            rc = loader->error;
            break;
        }
        /* Batches the caller holds keep their slots: the next batch needs another one. */
        rc = dsc__slots_make_room(loader);
        if (rc < 0) {
            if (rc != DSC_EHELD)
                dsc__loader_fail(loader, rc);
            break;
        }
        if (loader->cons.cons_seq < loader->sched.slot_seq) {
            st = &loader->sched.steps[loader->cons.cons_seq % loader->sched.step_cap];
            if (st->state == ST_READY)
                break;
        } else if (dsc__order_is_caller(loader) &&
                   loader->cons.cons_seq >= loader->sched.caller.push_seq) {
            rc = DSC_EAGAIN; /* nothing pushed to wait for: not a failure */
            DSC_LOG(&loader->cfg.log, DSC_LOG_WARN,
                    "next(): nothing pushed ahead (order caller): push the epoch's next batch "
                    "or its end mark first (dsc_loader_push_order)");
            break;
        } else if (loader->cfg.opt.epochs > 0 &&
                   loader->cons.cons_epoch >= loader->cfg.opt.epochs &&
                   loader->cons.cons_seq >= loader->sched.plan_seq) {
            rc = DSC_EOF; /* past the job's last epoch (options.epochs): every pass is empty */
            break;
        }
        /* Each look books the time since the last one to what the last look found; the first
         * look books the time since next() was called (the loader's lock, slot room) to what it
         * finds: the step was not ready then either. */
        double now = dsc_now_s();
        if (cause >= 0)
            dsc__diag_blame(loader, cause, cause_peer, now - mark);
        else
            mark = t0;
        int was = cause;
        cause = dsc__diag_waiting_on(loader, &cause_peer);
        if (was < 0)
            dsc__diag_blame(loader, cause, cause_peer, now - mark);
        mark = now;
        /* Rather than sleep, do the work the batch waits for (or any other there is). */
        if (loader->work.assist && dsc__assist_pass(loader, &loader->work.assist_ctx)) {
            loader->stats.st.assists++;
            continue;
        }
        loader->work.consumer_waiting = loader->work.assist; /* else new work is not its business */
        pthread_cond_wait(&loader->cons_cv, &loader->lock);
        loader->work.consumer_waiting = 0;
    }
    double t1 = dsc_now_s();
    loader->stats.st.stall_seconds += t1 - t0;
    dsc__diag_blame(loader, cause, cause_peer, t1 - mark);
    if (rc == 0 && st->error < 0) {
        /* This batch could not be collated: the loader fails here, the batches before it
         * handed out, with the line that says why as its last error. */
        rc = st->error;
        dsc__step_error_log(loader, st);
        dsc__loader_fail_logged(loader, rc);
    }
    if (rc == 0) {
        dsc_batch_slot_t *slot = loader->cons.slots[st->slot];
        loader->cons.cons_seq++;
        if (st->eof) {
            slot->owner = SLOT_FREE;
            loader->cons.retired_seq = st->seq + 1;
            loader->cons.cons_epoch = st->epoch + 1;
            loader->cons.cons_pos = 0;
            loader->cons.cons_nhist = 0;
            loader->cons.cons_samples = loader->cons.cons_hash = 0;
            loader->stats.st.epoch = loader->cons.cons_epoch;
            const dsc_epoch_wire_t *ew = &loader->stats.epoch_wire[st->epoch % DSC__EPOCH_RING];
            loader->stats.st.epoch_wire_bytes = ew->epoch == st->epoch ? ew->bytes : 0;
            pthread_cond_broadcast(&loader->sched_cv);
            rc = DSC_EOF;
        } else {
            st->state = ST_HANDED;
            dsc_batch_t *b = &slot->batch;
            b->samples = st->count;
            b->step = st->step;
            b->seq = st->seq;
            memcpy(b->indices, st->ids, st->count * sizeof(uint64_t));
            dsc__batch_hand_out(loader, b);
            loader->cons.cons_epoch = st->epoch;
            loader->cons.cons_pos = st->pos_after;
            if (dsc__order_is_caller(loader)) { /* where the caller's order stands (state.c) */
                loader->cons.cons_samples += st->count;
                for (uint32_t k = 0; k < st->count; k++)
                    loader->cons.cons_hash = dsc__caller_hash(loader->cons.cons_hash, st->ids[k]);
            }
            loader->stats.st.epoch = st->epoch;
            loader->stats.st.batches++;
            loader->stats.st.samples += st->count;
            loader->stats.st.bytes += batch_bytes(loader, slot, st->count);
            loader->stats.st.truncated_samples += slot->truncated;
            loader->stats.st.decode_errors += slot->decode_errors;
            if (loader->cfg.cuda != NULL) {
                rc = dsc__cuda_slot_hand_out(loader->cfg.cuda, &slot->ev, loader->cons.user_stream);
                if (rc < 0)
                    dsc__loader_fail(loader, rc);
            }
            if (rc == 0) {
                *out = b;
                if (retain)
                    dsc__batch_retain_locked(b);
            }
        }
    }
    dsc__stats_maybe_log(loader, t1);
    dsc__diag_tick(loader, t1);
    loader->stats.last_return = dsc_now_s();
    pthread_mutex_unlock(&loader->lock);
    return rc;
}

DSC_EXTERN int dsc_loader_next(dsc_loader_t *loader, dsc_batch_t **out) {
    if (loader == NULL || out == NULL)
        return DSC_EINVAL;
    return loader_next(loader, out, 0);
}

DSC_EXTERN int dsc_loader_next_views(dsc_loader_t *loader, dsc_batch_t **out, int retain,
                                     dsc_field_view_t *views, uint32_t view_count) {
    if (loader == NULL || out == NULL || (views == NULL && view_count > 0) ||
        view_count > loader->cfg.field_count)
        return DSC_EINVAL;
    for (uint32_t f = 0; f < view_count; f++)
        if (views[f].struct_size < offsetof(dsc_field_view_t, rows) + sizeof views[f].rows)
            return DSC_EINVAL;
    int rc = loader_next(loader, out, retain);
    if (rc < 0)
        return rc;
    /* The views read the slot's layout only: stable while the batch is handed out. */
    for (uint32_t f = 0; f < view_count; f++) {
        rc = dsc_batch_field_view(*out, f, &views[f]);
        if (rc < 0) {
            if (retain)
                dsc_batch_release(*out);
            return rc;
        }
    }
    return (int)(*out)->samples;
}

DSC_EXTERN int dsc_loader_push_order(dsc_loader_t *loader, const uint64_t *indices, size_t n,
                                     int flags) {
    if (loader == NULL)
        return DSC_EINVAL;
    pthread_mutex_lock(&loader->lock);
    int rc = dsc__sched_push(loader, indices, n, flags);
    pthread_mutex_unlock(&loader->lock);
    return rc;
}

DSC_EXTERN int dsc_loader_order_room(const dsc_loader_t *loader) {
    if (loader == NULL)
        return 0;
    dsc_loader_t *l = (dsc_loader_t *)loader; /* the lock only */
    pthread_mutex_lock(&l->lock);
    int room = (int)dsc__sched_order_room(loader);
    pthread_mutex_unlock(&l->lock);
    return room;
}

DSC_EXTERN uint64_t dsc_loader_len(const dsc_loader_t *loader) {
    return loader && loader->mix == NULL ? dsc__sched_epoch_steps(loader) : 0;
}

DSC_EXTERN uint64_t dsc_loader_dataset_samples(const dsc_loader_t *loader) {
    return loader ? loader->cfg.samples : 0;
}

DSC_EXTERN uint32_t dsc_loader_field_count(const dsc_loader_t *loader) {
    return loader ? loader->cfg.field_count : 0;
}

DSC_EXTERN const char *dsc_loader_meta(const dsc_loader_t *loader) {
    return loader ? loader->cfg.manifest->meta_json : NULL;
}

DSC_EXTERN int dsc_loader_field(const dsc_loader_t *loader, uint32_t field, dsc_field_info_t *out) {
    if (loader == NULL || out == NULL || field >= loader->cfg.field_count)
        return DSC_ERANGE;
    const dsc_field_t *f = &loader->cfg.manifest->schema.fields[field];
    memset(out, 0, sizeof *out);
    memcpy(out->name, f->name, DSC_MAX_NAME);
    out->dtype = f->dtype;
    out->ndim = f->ndim;
    for (uint32_t d = 0; d < f->ndim; d++)
        out->shape[d] = f->shape[d];
    out->sample_bytes = f->sample_bytes;
    const dsc_var_field_t *v = &loader->cfg.var[field];
    if (v->image) { /* handed out decoded: a fixed u8 field */
        int hwc = v->spec.layout == DSC_IMAGE_LAYOUT_HWC;
        out->ndim = 3;
        out->shape[0] = hwc ? v->spec.height : 3;
        out->shape[1] = hwc ? v->spec.width : v->spec.height;
        out->shape[2] = hwc ? 3 : v->spec.width;
        out->sample_bytes = 3ull * v->spec.height * v->spec.width;
    } else if (f->variable) {
        out->shape[0] = -1;
        out->sample_bytes = f->row_bytes;
    }
    return 0;
}

DSC_EXTERN int dsc_loader_set_stream(dsc_loader_t *loader, void *cuda_stream) {
    if (loader == NULL)
        return DSC_EINVAL;
    if (loader->cfg.cuda == NULL)
        return DSC_ENOTSUP;
    pthread_mutex_lock(&loader->lock);
    loader->cons.user_stream = cuda_stream;
    pthread_mutex_unlock(&loader->lock);
    return 0;
}
