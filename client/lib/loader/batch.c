/* Loader batches: the batch slots (host and device memory steps are collated into, added while
 * the caller holds batches), batch references, and the public batch accessors, tensor views and
 * DLPack export. Calls down
 * only: pipeline.c, cuda.c, slots.c. */
#include "batch.h"

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define SLOT_ALIGN 256

static int slot_new(dsc_loader_t *loader, uint32_t i) {
    dsc_batch_slot_t *s = calloc(1, sizeof *s);
    if (s == NULL)
        return DSC_ENOMEM;
    loader->cons.slots[i] = s;
    s->owner = SLOT_FREE;
    s->host_bytes = loader->cons.slot_bytes;
    s->batch.loader = loader;
    s->batch.slot = i;
    s->batch.indices = calloc(loader->cfg.opt.batch_size, sizeof(uint64_t));
    if (s->batch.indices == NULL)
        return DSC_ENOMEM;
    if (loader->cfg.cuda != NULL) {
        s->host = dsc__cuda_host_alloc(loader->cfg.cuda, loader->cons.slot_bytes);
        s->host_cuda = 1;
        s->dev = dsc__cuda_dev_alloc(loader->cfg.cuda, loader->cons.slot_bytes);
        if (s->host == NULL || s->dev == NULL)
            return DSC_ECUDA;
        return dsc__cuda_slot_init(loader->cfg.cuda, &s->ev);
    }
    s->host = dsc__host_alloc(loader->cons.slot_bytes, &loader->cfg.log, &s->locked);
    return s->host == NULL ? DSC_ENOMEM : 0;
}

static void slot_free(dsc_loader_t *loader, dsc_batch_slot_t *s) {
    if (s == NULL)
        return;
    if (s->host_cuda) {
        dsc__cuda_host_free(loader->cfg.cuda, s->host);
        dsc__cuda_dev_free(loader->cfg.cuda, s->dev);
        dsc__cuda_slot_close(loader->cfg.cuda, &s->ev);
    } else {
        dsc__host_free(s->host, s->host_bytes);
    }
    free(s->batch.indices);
    free(s);
}

static uint64_t align_up(uint64_t bytes) {
    return (bytes + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
}

int dsc__slots_alloc(dsc_loader_t *loader) {
    uint64_t off = 0;
    uint64_t batch = loader->cfg.opt.batch_size;
    for (uint32_t f = 0; f < loader->cfg.field_count; f++) {
        dsc_var_field_t *v = &loader->cfg.var[f];
        uint64_t bytes = loader->cfg.manifest->schema.fields[f].sample_bytes * batch;
        if (v->image) {
            bytes = batch * 3 * v->spec.height * v->spec.width; /* decoded: fixed, no offsets */
        } else if (v->is_var) {
            /* Offsets (B + 1) or lengths (B), int64, then the values: the field's budget, or
             * B x lcap rows padded. lcap and budget are bounded at create (loader.c). */
            v->aux_off = off;
            off += align_up((batch + (v->pad ? 0 : 1)) * sizeof(int64_t));
            bytes = v->pad ? batch * v->lcap * v->row_bytes : v->budget;
        }
        loader->cfg.field_off[f] = off;
        off += align_up(bytes);
    }
    loader->cons.slot_bytes = off;
    uint32_t count = loader->cons.slot_count;
    loader->cons.slot_count = 0;
    loader->cons.slot_cap = count;
    loader->cons.slots = calloc(count, sizeof(dsc_batch_slot_t *));
    if (loader->cons.slots == NULL)
        return DSC_ENOMEM;
    for (uint32_t i = 0; i < count; i++) {
        loader->cons.slot_count = i + 1; /* a partial slot is freed too */
        int rc = slot_new(loader, i);
        if (rc < 0)
            return rc;
    }
    return 0;
}

void dsc__slots_free(dsc_loader_t *loader) {
    if (loader->cons.slots == NULL)
        return;
    for (uint32_t i = 0; i < loader->cons.slot_count; i++)
        slot_free(loader, loader->cons.slots[i]);
    free(loader->cons.slots);
    loader->cons.slots = NULL;
}

/* Adds one slot. Under lock (the allocation too: it is rare, and the scheduler must not
 * hand out a slot that is half made). Returns 0, DSC_ENOMEM or DSC_ECUDA. */
static int slot_add(dsc_loader_t *loader) {
    if (loader->cons.slot_count == loader->cons.slot_cap) {
        uint32_t cap = loader->cons.slot_cap * 2;
        dsc_batch_slot_t **n = realloc(loader->cons.slots, cap * sizeof *n);
        if (n == NULL)
            return DSC_ENOMEM;
        loader->cons.slots = n;
        loader->cons.slot_cap = cap;
    }
    uint32_t i = loader->cons.slot_count;
    int rc = slot_new(loader, i);
    if (rc < 0) {
        slot_free(loader, loader->cons.slots[i]);
        loader->cons.slots[i] = NULL;
        return rc;
    }
    loader->cons.slot_count = i + 1;
    loader->stats.st.slots_added++;
    pthread_cond_broadcast(&loader->sched_cv);
    return 0;
}

int dsc__slots_make_room(dsc_loader_t *loader) {
    uint64_t slot_bytes = loader->cons.slot_bytes ? loader->cons.slot_bytes : 1;
    uint64_t cap = loader->cfg.opt.max_held_bytes;
    uint32_t held = loader->cons.held;
    if (held > 0 && (uint64_t)(held + 1) * slot_bytes > cap) {
        DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                "loader: %u batches are still held (kept past next(): retained, or tensors of "
                "them alive) and one more would pass max_held_bytes %llu (slots of %llu bytes): "
                "free or copy the batches you keep, or raise max_held_bytes",
                held, (unsigned long long)cap, (unsigned long long)slot_bytes);
        return DSC_EHELD;
    }
    /* Slots for the prefetcher beside the held ones: prefetch_batches - 1 (as when the caller
     * holds only the current batch), at least 1 so that the next batch can be made. */
    uint32_t spare =
        loader->cfg.opt.prefetch_batches > 1 ? loader->cfg.opt.prefetch_batches - 1 : 1;
    while (loader->cons.slot_count < held + spare) {
        int rc = slot_add(loader);
        if (rc < 0) {
            DSC_LOG(&loader->cfg.log, DSC_LOG_ERROR,
                    "loader: cannot add a batch slot of %llu bytes beside the %u held: %s",
                    (unsigned long long)slot_bytes, held, dsc_strerror(rc));
            /* Progress is still possible while one slot is not held. */
            if (loader->cons.slot_count > held)
                break;
            return rc;
        }
        DSC_LOG(&loader->cfg.log, DSC_LOG_DEBUG, "loader: %u batches held: now %u slots", held,
                loader->cons.slot_count);
    }
    return 0;
}

/* Drops one reference of a slot's batch; the last one gives the slot back. Under lock. */
static void slot_unref(dsc_loader_t *loader, dsc_batch_slot_t *slot) {
    if (slot->refs == 0)
        return;
    if (--slot->refs > 0)
        return;
    if (loader->cfg.cuda != NULL &&
        dsc__cuda_slot_release(loader->cfg.cuda, &slot->ev, loader->cons.user_stream) < 0)
        dsc__loader_fail(loader, DSC_ECUDA);
    slot->owner = SLOT_FREE;
    loader->cons.held--;
    pthread_cond_broadcast(&loader->sched_cv);
}

static dsc_batch_slot_t *slot_of(const dsc_batch_t *batch) {
    return (dsc_batch_slot_t *)((char *)(uintptr_t)batch - offsetof(dsc_batch_slot_t, batch));
}

void dsc__batch_hand_out(dsc_loader_t *loader, dsc_batch_t *b) {
    dsc_batch_slot_t *slot = slot_of(b);
    b->handed = 1;
    slot->refs = 1;
    loader->cons.held++;
    loader->cons.current = b;
}

dsc_batch_slot_t *dsc__slot_take_free(dsc_loader_t *loader, uint64_t owner) {
    for (uint32_t i = 0; i < loader->cons.slot_count; i++) {
        dsc_batch_slot_t *slot = loader->cons.slots[i];
        if (slot->owner == SLOT_FREE && slot->refs == 0) {
            slot->owner = owner;
            return slot;
        }
    }
    return NULL;
}

void dsc__batch_hand_over(dsc_loader_t *loader, dsc_batch_t *b) {
    dsc_batch_slot_t *slot = slot_of(b);
    b->handed = 0; /* no next() reference: the caller's alone */
    slot->refs = 1;
    loader->cons.held++;
}

void dsc__slot_give_back(dsc_loader_t *loader, dsc_batch_slot_t *slot) {
    slot->owner = SLOT_FREE;
    pthread_cond_broadcast(&loader->sched_cv);
}

void dsc__batch_release_current(dsc_loader_t *loader) {
    dsc_batch_t *b = loader->cons.current;
    if (b == NULL)
        return;
    b->handed = 0;
    loader->cons.retired_seq = b->seq + 1;
    loader->cons.current = NULL;
    slot_unref(loader, slot_of(b));
    pthread_cond_broadcast(&loader->sched_cv);
}

DSC_EXTERN void dsc_batch_release(dsc_batch_t *batch) {
    if (batch == NULL)
        return;
    dsc_loader_t *loader = batch->loader;
    pthread_mutex_lock(&loader->lock);
    /* References taken with retain (or by DLPack tensors) go first: next()'s is the last. */
    int loaned = batch->handed && loader->cons.current == batch;
    if (slot_of(batch)->refs > (uint32_t)loaned)
        slot_unref(loader, slot_of(batch));
    else if (loaned)
        dsc__batch_release_current(loader);
    pthread_mutex_unlock(&loader->lock);
}

void dsc__batch_retain_locked(dsc_batch_t *batch) {
    dsc_batch_slot_t *slot = slot_of(batch);
    if (slot->refs > 0 && slot->refs < UINT32_MAX)
        slot->refs++;
}

DSC_EXTERN int dsc_batch_retain(dsc_batch_t *batch) {
    if (batch == NULL)
        return DSC_EINVAL;
    dsc_loader_t *loader = batch->loader;
    pthread_mutex_lock(&loader->lock);
    dsc_batch_slot_t *slot = slot_of(batch);
    int rc = DSC_EINVAL;
    if (slot->refs > 0 && slot->refs < UINT32_MAX) {
        slot->refs++;
        rc = 0;
    }
    pthread_mutex_unlock(&loader->lock);
    return rc;
}

DSC_EXTERN uint32_t dsc_batch_samples(const dsc_batch_t *batch) {
    return batch ? batch->samples : 0;
}

DSC_EXTERN uint64_t dsc_batch_step(const dsc_batch_t *batch) {
    return batch ? batch->step : 0;
}

DSC_EXTERN const uint64_t *dsc_batch_indices(const dsc_batch_t *batch) {
    return batch ? batch->indices : NULL;
}

/* Where slot memory at byte offset off is for the caller: host, or device with CUDA. */
static void *slot_ptr(const dsc_loader_t *loader, const dsc_batch_slot_t *slot, uint64_t off) {
    return (loader->cfg.cuda != NULL ? slot->dev : slot->host) + off;
}

DSC_EXTERN int dsc_batch_field(const dsc_batch_t *batch, uint32_t field, dsc_tensor_view_t *out) {
    if (batch == NULL || out == NULL || field >= batch->loader->cfg.field_count)
        return DSC_ERANGE;
    const dsc_loader_t *loader = batch->loader;
    const dsc_field_t *f = &loader->cfg.manifest->schema.fields[field];
    const dsc_var_field_t *v = &loader->cfg.var[field];
    const dsc_batch_slot_t *slot = slot_of(batch);
    memset(out, 0, sizeof *out);
    out->name = f->name;
    out->dtype = f->dtype;
    if (v->image) {
        int hwc = v->spec.layout == DSC_IMAGE_LAYOUT_HWC;
        out->ndim = 4;
        out->shape[0] = batch->samples;
        out->shape[1] = hwc ? v->spec.height : 3;
        out->shape[2] = hwc ? v->spec.width : v->spec.height;
        out->shape[3] = hwc ? 3 : v->spec.width;
        out->bytes = (uint64_t)batch->samples * 3 * v->spec.height * v->spec.width;
    } else if (v->is_var) {
        /* Values: [total_rows, ...row shape], or padded [B, L, ...row shape]. */
        uint32_t d0 = 0;
        if (v->pad)
            out->shape[d0++] = batch->samples;
        out->shape[d0++] = (int64_t)slot->var_rows[field];
        for (uint32_t d = 1; d < f->ndim; d++)
            out->shape[d0++] = f->shape[d];
        out->ndim = d0;
        out->bytes = slot->var_rows[field] * v->row_bytes * (v->pad ? batch->samples : 1u);
    } else {
        out->ndim = 1u + f->ndim;
        out->shape[0] = batch->samples;
        for (uint32_t d = 0; d < f->ndim; d++)
            out->shape[d + 1] = f->shape[d];
        out->bytes = f->sample_bytes * batch->samples;
    }
    if (loader->cfg.cuda != NULL) {
        out->data = slot->dev + loader->cfg.field_off[field];
        out->device = loader->cfg.opt.device;
    } else {
        out->data = slot->host + loader->cfg.field_off[field];
        out->device = -1;
    }
    return 0;
}

DSC_EXTERN int dsc_batch_field_view(const dsc_batch_t *batch, uint32_t field,
                                    dsc_field_view_t *out) {
    if (batch == NULL || out == NULL ||
        out->struct_size < offsetof(dsc_field_view_t, rows) + sizeof out->rows)
        return DSC_EINVAL;
    dsc_field_view_t v;
    memset(&v, 0, sizeof v);
    int rc = dsc_batch_field(batch, field, &v.values);
    if (rc < 0)
        return rc;
    const dsc_loader_t *loader = batch->loader;
    const dsc_var_field_t *var = &loader->cfg.var[field];
    const dsc_batch_slot_t *slot = slot_of(batch);
    v.kind = !var->is_var || var->image ? DSC_FIELD_FIXED
             : var->pad                 ? DSC_FIELD_PADDED
                                        : DSC_FIELD_VALUES;
    if (var->is_var && !var->image) {
        const int64_t *aux = slot_ptr(loader, slot, var->aux_off);
        if (var->pad) {
            v.lengths = aux;
            v.rows = (int64_t)slot->var_rows[field] * batch->samples;
        } else {
            v.offsets = aux;
            v.rows = (int64_t)slot->var_rows[field];
        }
    }
    size_t caller = out->struct_size;
    memcpy(out, &v, caller < sizeof v ? caller : sizeof v);
    out->struct_size = caller;
    return 0;
}

typedef struct dlpack_holder {
    DLManagedTensor managed;
    int64_t shape[DSC_MAX_DIMS + 1];
    dsc_batch_t *batch; /* the reference the tensor holds */
} dlpack_holder_t;

static void dlpack_deleter(DLManagedTensor *self) {
    dlpack_holder_t *h = self->manager_ctx;
    dsc_batch_release(h->batch);
    free(h);
}

static int dlpack_dtype(int dtype, DLDataType *out) {
    int size = dsc_dtype_size(dtype);
    if (size == 0)
        return DSC_EINVAL;
    out->bits = (uint8_t)(size * 8);
    out->lanes = 1;
    switch (dtype) {
    case DSC_DTYPE_U8:
    case DSC_DTYPE_U16:
    case DSC_DTYPE_U32:
        out->code = kDLUInt;
        break;
    case DSC_DTYPE_I8:
    case DSC_DTYPE_I16:
    case DSC_DTYPE_I32:
    case DSC_DTYPE_I64:
        out->code = kDLInt;
        break;
    case DSC_DTYPE_BF16:
        out->code = kDLBfloat;
        break;
    default:
        out->code = kDLFloat;
        break;
    }
    return 0;
}

DSC_EXTERN int dsc_batch_dlpack(dsc_batch_t *batch, uint32_t field, struct DLManagedTensor **out) {
    return dsc_batch_dlpack_part(batch, field, DSC_PART_VALUES, out);
}

DSC_EXTERN int dsc_batch_dlpack_part(dsc_batch_t *batch, uint32_t field, int part,
                                     struct DLManagedTensor **out) {
    dsc_tensor_view_t view;
    if (out == NULL)
        return DSC_EINVAL;
    int rc = dsc_batch_field(batch, field, &view);
    if (rc < 0)
        return rc;
    if (part != DSC_PART_VALUES) {
        const dsc_var_field_t *var = &batch->loader->cfg.var[field];
        if (!var->is_var || var->image || part != (var->pad ? DSC_PART_LENGTHS : DSC_PART_OFFSETS))
            return DSC_ERANGE;
        view.data = slot_ptr(batch->loader, slot_of(batch), var->aux_off);
        view.dtype = DSC_DTYPE_I64;
        view.ndim = 1;
        view.shape[0] = batch->samples + (var->pad ? 0 : 1);
        view.bytes = (uint64_t)view.shape[0] * sizeof(int64_t);
    }
    dlpack_holder_t *h = calloc(1, sizeof *h);
    if (h == NULL)
        return DSC_ENOMEM;
    memcpy(h->shape, view.shape, sizeof h->shape);
    DLTensor *t = &h->managed.dl_tensor;
    t->data = view.data;
    t->device.device_type = view.device >= 0 ? kDLCUDA : kDLCPU;
    t->device.device_id = view.device >= 0 ? view.device : 0;
    t->ndim = (int)view.ndim;
    rc = dlpack_dtype(view.dtype, &t->dtype);
    if (rc == 0)
        rc = dsc_batch_retain(batch);
    if (rc < 0) {
        free(h);
        return rc;
    }
    h->batch = batch;
    t->shape = h->shape;
    t->strides = NULL; /* compact, row-major */
    t->byte_offset = 0;
    h->managed.manager_ctx = h;
    h->managed.deleter = dlpack_deleter;
    *out = &h->managed;
    return 0;
}
