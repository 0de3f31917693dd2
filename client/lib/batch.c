/* Loader batches: the batch slots (host and device memory steps are collated into), releasing a
 * handed-out batch, and the public batch accessors, tensor views and DLPack export. Calls down
 * only: pipeline.c, cuda.c, slots.c. */
#include "batch.h"

#include <dlpack/dlpack.h>
#include <stdlib.h>
#include <string.h>

#define SLOT_ALIGN 256

int dsc__slots_alloc(dsc_loader_t *loader) {
    uint64_t off = 0;
    for (uint32_t f = 0; f < loader->cfg.field_count; f++) {
        loader->cfg.field_off[f] = off;
        uint64_t bytes =
            loader->cfg.manifest->schema.fields[f].sample_bytes * loader->cfg.opt.batch_size;
        off += (bytes + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
    }
    loader->cons.slot_bytes = off;
    loader->cons.slots = calloc(loader->cons.slot_count, sizeof(dsc_batch_slot_t));
    if (loader->cons.slots == NULL)
        return DSC_ENOMEM;
    for (uint32_t i = 0; i < loader->cons.slot_count; i++) {
        dsc_batch_slot_t *s = &loader->cons.slots[i];
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
            int rc = dsc__cuda_slot_init(loader->cfg.cuda, &s->ev);
            if (rc < 0)
                return rc;
        } else {
            s->host = dsc__host_alloc(loader->cons.slot_bytes, &loader->cfg.log, &s->locked);
            if (s->host == NULL)
                return DSC_ENOMEM;
        }
    }
    return 0;
}

void dsc__slots_free(dsc_loader_t *loader) {
    if (loader->cons.slots == NULL)
        return;
    for (uint32_t i = 0; i < loader->cons.slot_count; i++) {
        dsc_batch_slot_t *s = &loader->cons.slots[i];
        if (s->host_cuda) {
            dsc__cuda_host_free(loader->cfg.cuda, s->host);
            dsc__cuda_dev_free(loader->cfg.cuda, s->dev);
            dsc__cuda_slot_close(loader->cfg.cuda, &s->ev);
        } else {
            dsc__host_free(s->host, s->host_bytes);
        }
        free(s->batch.indices);
    }
    free(loader->cons.slots);
    loader->cons.slots = NULL;
}

void dsc__batch_release_current(dsc_loader_t *loader) {
    dsc_batch_t *b = loader->cons.current;
    if (b == NULL)
        return;
    dsc_batch_slot_t *slot = &loader->cons.slots[b->slot];
    if (loader->cfg.cuda != NULL &&
        dsc__cuda_slot_release(loader->cfg.cuda, &slot->ev, loader->cons.user_stream) < 0)
        dsc__loader_fail(loader, DSC_ECUDA);
    b->handed = 0;
    slot->owner = SLOT_FREE;
    loader->cons.retired_seq = b->seq + 1;
    loader->cons.current = NULL;
    pthread_cond_broadcast(&loader->sched_cv);
}

DSC_EXTERN void dsc_batch_release(dsc_batch_t *batch) {
    if (batch == NULL)
        return;
    dsc_loader_t *loader = batch->loader;
    pthread_mutex_lock(&loader->lock);
    if (batch->handed && loader->cons.current == batch)
        dsc__batch_release_current(loader);
    pthread_mutex_unlock(&loader->lock);
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

DSC_EXTERN int dsc_batch_field(const dsc_batch_t *batch, uint32_t field, dsc_tensor_view_t *out) {
    if (batch == NULL || out == NULL || field >= batch->loader->cfg.field_count)
        return DSC_ERANGE;
    const dsc_loader_t *loader = batch->loader;
    const dsc_field_t *f = &loader->cfg.manifest->schema.fields[field];
    const dsc_batch_slot_t *slot = &loader->cons.slots[batch->slot];
    memset(out, 0, sizeof *out);
    out->name = f->name;
    out->dtype = f->dtype;
    out->ndim = 1u + f->ndim;
    out->shape[0] = batch->samples;
    for (uint32_t d = 0; d < f->ndim; d++)
        out->shape[d + 1] = f->shape[d];
    out->bytes = f->sample_bytes * batch->samples;
    if (loader->cfg.cuda != NULL) {
        out->data = slot->dev + loader->cfg.field_off[field];
        out->device = loader->cfg.opt.device;
    } else {
        out->data = slot->host + loader->cfg.field_off[field];
        out->device = -1;
    }
    return 0;
}

typedef struct dlpack_holder {
    DLManagedTensor managed;
    int64_t shape[DSC_MAX_DIMS + 1];
} dlpack_holder_t;

static void dlpack_deleter(DLManagedTensor *self) {
    free(self->manager_ctx);
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
    dsc_tensor_view_t view;
    if (out == NULL)
        return DSC_EINVAL;
    int rc = dsc_batch_field(batch, field, &view);
    if (rc < 0)
        return rc;
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
    if (rc < 0) {
        free(h);
        return rc;
    }
    t->shape = h->shape;
    t->strides = NULL; /* compact, row-major */
    t->byte_offset = 0;
    h->managed.manager_ctx = h;
    h->managed.deleter = dlpack_deleter;
    *out = &h->managed;
    return 0;
}
