/* dscache._fastpath: dscache.Loader's next() in C for host batches of fixed-size fields.
 *
 * The ctypes path builds each batch in Python: a ctypes call, a hold object, a ctypes buffer
 * and an ndarray per field, and a second ctypes call when the batch is freed. After a 5 ms
 * training step the interpreter runs that cold (the decode threads had the caches): about
 * 70 us per batch on 2 cores, 1.4% of the step. Here it is one C call that returns the
 * batch's dict: dsc_loader_next_views with the GIL released, then per field a Span (the
 * field's bytes in the slot, through the buffer protocol) and numpy.ndarray(shape, dtype, span)
 * over it (copy=True: over a bytearray copy). Every Span of a batch refers to its Hold, which
 * gives the slot back (dsc_batch_release, the GIL released again) when the last array goes.
 *
 * Neither libdscache nor numpy's C API is linked. Python hands over the addresses of the
 * functions of the libdscache that ctypes loaded ($DSCACHE_LIB or wherever it was found), so the
 * two can never be different copies, and numpy.ndarray and the dtypes, so the module works with
 * any numpy and builds with Python's headers alone (a pip build under isolation has no numpy).
 * The module is optional: without it the ctypes path serves every batch (the same arrays, byte
 * for byte; tests/python/test_fastpath.py compares them).
 *
 * PackNexter does the same for packed batches (pack=, with the packer's thread): one call to
 * dsc_packer_next_held with the GIL released, then the six arrays of the batch over PackSpans
 * of one PackHold, whose dealloc gives the buffers back (dsc_packer_release) exactly once, under
 * the loader's _pack_lock (the lock Loader._destroy holds around dsc_packer_destroy: a release
 * may come after destroy, never during it). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <string.h>

#include "dscache.h"

typedef int (*next_views_fn)(dsc_loader_t *, dsc_batch_t **, int, dsc_field_view_t *, uint32_t);
typedef void (*release_fn)(dsc_batch_t *);
typedef const uint64_t *(*indices_fn)(const dsc_batch_t *);

typedef struct {
    PyObject *name;  /* the dict key */
    PyObject *dtype; /* the numpy dtype */
    PyObject *shape; /* (samples, ...field shape) for `samples`, or NULL */
    Py_ssize_t samples;
    Py_ssize_t ndim; /* the field's */
    Py_ssize_t dims[DSC_MAX_DIMS];
    Py_ssize_t item; /* bytes per sample */
} field_t;

typedef struct {
    PyObject ob_base;
    dsc_loader_t *loader; /* NULL once the loader is destroyed */
    PyObject *owner;      /* the dscache.Loader (borrowed: it owns this object) */
    next_views_fn next_views;
    release_fn release;
    indices_fn indices;
    dsc_field_view_t *views;
    field_t *fields;
    uint32_t count;
    int retain;            /* arrays over the slot, each batch one Hold; 0: copies */
    PyObject *ndarray;     /* numpy.ndarray */
    PyObject *index_dtype; /* numpy's uint64 (int64 for torch) when index_key is set */
    PyObject *from_numpy;  /* torch.from_numpy for output="torch", else NULL */
    PyObject *index_key;   /* "__index__" when the batch carries its indices, else NULL */
    Py_ssize_t holds;      /* Holds alive (the GIL guards it) */
    int close_pending;     /* close() came while holds were alive: the last calls _fast_last */
} Nexter;

/* One reference to a batch (the one dsc_loader_next_views took with retain) and to its loader:
 * the base of every array of the batch. */
typedef struct {
    PyObject ob_base;
    Nexter *nexter;
    PyObject *loader;
    dsc_batch_t *batch;
} Hold;

static void hold_dealloc(PyObject *self) {
    Hold *h = (Hold *)self;
    Nexter *n = h->nexter;
    if (n->loader != NULL && h->batch != NULL) {
        PyThreadState *ts = PyEval_SaveThread(); /* it takes the loader's lock */
        n->release(h->batch);
        PyEval_RestoreThread(ts);
    }
    n->holds--;
    if (n->holds == 0 && n->close_pending && n->loader != NULL) {
        /* The loader waits for its last batch to be destroyed (Loader.close). */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyObject *r = PyObject_CallMethod(h->loader, "_fast_last", NULL);
        if (r == NULL)
            PyErr_WriteUnraisable(h->loader);
        Py_XDECREF(r);
        PyErr_Restore(type, value, tb);
    }
    Py_DECREF(h->loader);
    Py_DECREF((PyObject *)n);
    PyObject_Free(self);
}

static PyTypeObject HoldType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dscache._fastpath.Hold",
    .tp_basicsize = sizeof(Hold),
    .tp_dealloc = hold_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One batch's slot, given back when the last array over it is freed.",
};

/* One field's bytes in a batch slot, writable, as the buffer of its numpy array. */
typedef struct {
    PyObject ob_base;
    PyObject *hold;
    void *data;
    Py_ssize_t bytes;
} Span;

static int span_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    Span *s = (Span *)self;
    return PyBuffer_FillInfo(view, self, s->data, s->bytes, 0, flags);
}

static void span_dealloc(PyObject *self) {
    Py_DECREF(((Span *)self)->hold);
    PyObject_Free(self);
}

static PyBufferProcs span_buffer = {.bf_getbuffer = span_getbuffer};

static PyTypeObject SpanType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dscache._fastpath.Span",
    .tp_basicsize = sizeof(Span),
    .tp_dealloc = span_dealloc,
    .tp_as_buffer = &span_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One field's bytes in a batch slot (the buffer of its array).",
};

static void nexter_dealloc(PyObject *self) {
    Nexter *n = (Nexter *)self;
    for (uint32_t f = 0; f < n->count; f++) {
        Py_XDECREF(n->fields[f].name);
        Py_XDECREF(n->fields[f].dtype);
        Py_XDECREF(n->fields[f].shape);
    }
    PyMem_Free(n->fields);
    PyMem_Free(n->views);
    Py_XDECREF(n->from_numpy);
    Py_XDECREF(n->index_key);
    Py_XDECREF(n->ndarray);
    Py_XDECREF(n->index_dtype);
    Py_TYPE(self)->tp_free(self);
}

static void *address(PyObject *o, const char *what) {
    void *p = PyLong_AsVoidPtr(o);
    if (p == NULL && !PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "_fastpath: %s is NULL", what);
    return p;
}

/* Nexter(loader, handle, next_views, release, indices, fields, retain, ndarray, from_numpy,
 *        index_key, index_dtype)
 * fields: a sequence of (name, numpy dtype, itemsize, shape tuple) of fixed-size host fields. */
static int nexter_init(PyObject *self, PyObject *args, PyObject *kw) {
    Nexter *n = (Nexter *)self;
    PyObject *owner, *handle, *fn_next, *fn_release, *fn_indices, *fields, *ndarray, *from_numpy,
        *index_key, *index_dtype;
    int retain;
    (void)kw;
    if (n->fields != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_fastpath.Nexter: initialised already");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "OOOOOOpOOOO", &owner, &handle, &fn_next, &fn_release, &fn_indices,
                          &fields, &retain, &ndarray, &from_numpy, &index_key, &index_dtype))
        return -1;
    n->loader = address(handle, "the loader handle");
    n->next_views = (next_views_fn)address(fn_next, "dsc_loader_next_views");
    n->release = (release_fn)address(fn_release, "dsc_batch_release");
    n->indices = (indices_fn)address(fn_indices, "dsc_batch_indices");
    if (PyErr_Occurred())
        return -1;
    n->owner = owner;
    n->retain = retain;
    PyObject *seq = PySequence_Fast(fields, "_fastpath.Nexter: fields must be a sequence");
    if (seq == NULL)
        return -1;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    if (count < 0 || count > (Py_ssize_t)UINT32_MAX) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "_fastpath.Nexter: too many fields");
        return -1;
    }
    n->fields = PyMem_Calloc(count ? (size_t)count : 1, sizeof *n->fields);
    n->views = PyMem_Calloc(count ? (size_t)count : 1, sizeof *n->views);
    if (n->fields == NULL || n->views == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t f = 0; f < count; f++) {
        field_t *fd = &n->fields[f];
        PyObject *name, *dtype, *shape;
        Py_ssize_t itemsize;
        n->views[f].struct_size = sizeof n->views[f];
        n->count = (uint32_t)f + 1; /* what dealloc frees */
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, f), "UOnO!", &name, &dtype, &itemsize,
                              &PyTuple_Type, &shape)) {
            Py_DECREF(seq);
            return -1;
        }
        Py_INCREF(name);
        fd->name = name;
        Py_INCREF(dtype);
        fd->dtype = dtype;
        Py_ssize_t nd = PyTuple_GET_SIZE(shape);
        if (nd > DSC_MAX_DIMS || itemsize <= 0) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_ValueError, "_fastpath.Nexter: too many dimensions, or no "
                                              "itemsize");
            return -1;
        }
        fd->ndim = nd;
        fd->item = itemsize;
        for (Py_ssize_t d = 0; d < nd; d++) {
            Py_ssize_t v = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, d));
            if (v < 0) {
                Py_DECREF(seq);
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_ValueError, "_fastpath.Nexter: a fixed shape only");
                return -1;
            }
            fd->dims[d] = v;
            fd->item *= v;
        }
    }
    Py_DECREF(seq);
    n->count = (uint32_t)count;
    Py_INCREF(ndarray);
    n->ndarray = ndarray;
    if (from_numpy != Py_None) {
        Py_INCREF(from_numpy);
        n->from_numpy = from_numpy;
    }
    if (index_key != Py_None) {
        Py_INCREF(index_key);
        n->index_key = index_key;
        Py_INCREF(index_dtype);
        n->index_dtype = index_dtype;
    }
    return 0;
}

/* The array shape (samples, ...dims) of a field, kept for the next batch of as many samples. */
static PyObject *field_shape(field_t *fd, Py_ssize_t samples) {
    if (fd->shape != NULL && fd->samples == samples)
        return fd->shape;
    PyObject *shape = PyTuple_New(fd->ndim + 1);
    if (shape == NULL)
        return NULL;
    for (Py_ssize_t d = 0; d <= fd->ndim; d++) {
        PyObject *v = PyLong_FromSsize_t(d == 0 ? samples : fd->dims[d - 1]);
        if (v == NULL) {
            Py_DECREF(shape);
            return NULL;
        }
        PyTuple_SET_ITEM(shape, d, v);
    }
    Py_XSETREF(fd->shape, shape);
    fd->samples = samples;
    return shape;
}

/* numpy.ndarray(shape, dtype, buffer), then torch.from_numpy for output="torch". */
static PyObject *make_array(Nexter *n, PyObject *shape, PyObject *dtype, PyObject *buffer) {
    PyObject *args = PyTuple_Pack(3, shape, dtype, buffer);
    if (args == NULL)
        return NULL;
    PyObject *a = PyObject_Call(n->ndarray, args, NULL);
    Py_DECREF(args);
    if (a == NULL || n->from_numpy == NULL)
        return a;
    PyObject *t = PyObject_CallOneArg(n->from_numpy, a);
    Py_DECREF(a);
    return t;
}

/* An array of the batch: over the slot (a Span on the Hold), or over a copy (hold NULL). */
static PyObject *field_array(Nexter *n, field_t *fd, void *data, Py_ssize_t samples,
                             PyObject *hold) {
    PyObject *shape = field_shape(fd, samples);
    if (shape == NULL)
        return NULL;
    Py_ssize_t bytes = samples * fd->item;
    PyObject *buffer;
    if (hold != NULL && bytes > 0) {
        Span *span = PyObject_New(Span, &SpanType);
        if (span == NULL)
            return NULL;
        Py_INCREF(hold);
        span->hold = hold;
        span->data = data;
        span->bytes = bytes;
        buffer = (PyObject *)span;
    } else {
        buffer = PyByteArray_FromStringAndSize(bytes > 0 ? data : NULL, bytes);
        if (buffer == NULL)
            return NULL;
    }
    PyObject *a = make_array(n, shape, fd->dtype, buffer);
    Py_DECREF(buffer);
    return a;
}

/* The next batch's dict, or the int that dsc_loader_next_views returned (DSC_EOF, an error:
 * the caller raises what it means). */
static PyObject *nexter_next(PyObject *self, PyObject *unused) {
    Nexter *n = (Nexter *)self;
    (void)unused;
    if (n->loader == NULL) {
        PyErr_SetString(PyExc_ValueError, "loader is closed");
        return NULL;
    }
    dsc_batch_t *batch = NULL;
    int rc;
    dsc_loader_t *loader = n->loader;
    PyThreadState *ts = PyEval_SaveThread(); /* it may wait for the batch */
    rc = n->next_views(loader, &batch, n->retain, n->views, n->count);
    PyEval_RestoreThread(ts);
    if (rc <= 0)
        return PyLong_FromLong(rc);
    Py_ssize_t samples = rc;
    Hold *hold = NULL;
    if (n->retain) {
        hold = PyObject_New(Hold, &HoldType);
        if (hold == NULL) {
            ts = PyEval_SaveThread();
            n->release(batch);
            PyEval_RestoreThread(ts);
            return NULL;
        }
        Py_INCREF(self);
        hold->nexter = n;
        Py_INCREF(n->owner);
        hold->loader = n->owner;
        hold->batch = batch;
        n->holds++;
    }
    PyObject *out = PyDict_New();
    if (out == NULL)
        goto fail;
    for (uint32_t f = 0; f < n->count; f++) {
        PyObject *a =
            field_array(n, &n->fields[f], n->views[f].values.data, samples, (PyObject *)hold);
        if (a == NULL)
            goto fail;
        int set = PyDict_SetItem(out, n->fields[f].name, a);
        Py_DECREF(a);
        if (set < 0)
            goto fail;
    }
    if (n->index_key != NULL) {
        /* A copy; int64 for torch (it has no uint64; the indices are < 2^63). */
        const uint64_t *ids = n->indices(batch);
        PyObject *buffer =
            PyByteArray_FromStringAndSize((const char *)ids, samples * (Py_ssize_t)sizeof *ids);
        PyObject *shape = buffer ? Py_BuildValue("(n)", samples) : NULL;
        PyObject *a = shape ? make_array(n, shape, n->index_dtype, buffer) : NULL;
        Py_XDECREF(shape);
        Py_XDECREF(buffer);
        if (a == NULL)
            goto fail;
        int set = PyDict_SetItem(out, n->index_key, a);
        Py_DECREF(a);
        if (set < 0)
            goto fail;
    }
    Py_XDECREF(hold);
    return out;
fail:
    Py_XDECREF(out);
    Py_XDECREF(hold); /* gives the slot back when no array took it */
    return NULL;
}

/* close() while batches are alive: True (the last one calls Loader._fast_last), else False. */
static PyObject *nexter_defer_close(PyObject *self, PyObject *unused) {
    Nexter *n = (Nexter *)self;
    (void)unused;
    n->close_pending = 1;
    return PyBool_FromLong(n->holds > 0);
}

/* The loader is destroyed: holds freed later give nothing back (its slots are gone). */
static PyObject *nexter_detach(PyObject *self, PyObject *unused) {
    Nexter *n = (Nexter *)self;
    (void)unused;
    n->loader = NULL;
    Py_RETURN_NONE;
}

static PyMethodDef nexter_methods[] = {
    {"next", nexter_next, METH_NOARGS,
     "The next batch's dict, or dsc_loader_next_views's int result when it is <= 0."},
    {"defer_close", nexter_defer_close, METH_NOARGS,
     "close(): True while batches are alive (the last calls the loader's _fast_last)."},
    {"detach", nexter_detach, METH_NOARGS, "The loader was destroyed."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef nexter_members[] = {
    {"holds", T_PYSSIZET, offsetof(Nexter, holds), READONLY, "batches alive"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject NexterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dscache._fastpath.Nexter",
    .tp_basicsize = sizeof(Nexter),
    .tp_dealloc = nexter_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "next() of one dscache.Loader whose fields are fixed-size host fields.",
    .tp_methods = nexter_methods,
    .tp_members = nexter_members,
    .tp_init = nexter_init,
    .tp_new = PyType_GenericNew,
};

/* ---- packed batches (pack=): dsc_packer_next_held ------------------------------------------ */

/* Py_NewRef, which Python 3.9 lacks. */
static PyObject *new_ref(PyObject *o) {
    Py_INCREF(o);
    return o;
}

typedef int (*next_held_fn)(dsc_packer_t *, dsc_packed_batch_t *, dsc_pack_hold_t **);
typedef void (*pack_release_fn)(dsc_pack_hold_t *);

enum { PACK_TOKENS, PACK_POS, PACK_DOC, PACK_CU, PACK_SI, PACK_SS, PACK_ARRAYS };

typedef struct {
    PyObject ob_base;
    dsc_packer_t *packer; /* NULL once the packer is destroyed (detach) */
    next_held_fn next_held;
    pack_release_fn release;
    PyObject *acquire; /* the loader's _pack_lock.acquire / .release */
    PyObject *unlock;
    PyObject *ndarray;             /* numpy.ndarray */
    PyObject *zeros;               /* numpy.zeros: an empty array, as _pack_view */
    PyObject *keys[PACK_ARRAYS];   /* the dict keys, in the ctypes path's order */
    PyObject *dtypes[PACK_ARRAYS]; /* their numpy dtypes */
    Py_ssize_t items[PACK_ARRAYS]; /* their itemsizes */
    Py_ssize_t length;             /* tokens per row */
    PyObject *rows_shape;          /* (rows, length), kept for the next batch of as many rows */
    Py_ssize_t shape_rows;         /* its rows */
    Py_ssize_t holds;              /* PackHolds alive (the GIL guards it) */
} PackNexter;

/* One held packed batch (dsc_pack_hold_t): the base of its six arrays. */
typedef struct {
    PyObject ob_base;
    PackNexter *nexter;
    dsc_pack_hold_t *hold;
} PackHold;

static void pack_hold_dealloc(PyObject *self) {
    PackHold *h = (PackHold *)self;
    PackNexter *n = h->nexter;
    if (h->hold != NULL) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        /* Not while the loader destroys the packer: its lock (an RLock, so a batch freed by the
         * collector on the thread that holds it cannot deadlock: destroy runs without the GIL,
         * so nothing is freed on this thread while it runs). */
        PyObject *r = PyObject_CallNoArgs(n->acquire);
        if (r == NULL) { /* interrupted: the buffers stay (a leak, said) rather than a race */
            PyErr_WriteUnraisable(self);
        } else {
            Py_DECREF(r);
            PyThreadState *ts = PyEval_SaveThread(); /* it takes the packer's lock */
            n->release(h->hold);
            PyEval_RestoreThread(ts);
            r = PyObject_CallNoArgs(n->unlock);
            if (r == NULL)
                PyErr_WriteUnraisable(self);
            Py_XDECREF(r);
        }
        h->hold = NULL;
        PyErr_Restore(type, value, tb);
    }
    n->holds--;
    Py_DECREF((PyObject *)n);
    PyObject_Free(self);
}

static PyTypeObject PackHoldType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dscache._fastpath.PackHold",
    .tp_basicsize = sizeof(PackHold),
    .tp_dealloc = pack_hold_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One held packed batch, given back when the last array over it is freed.",
};

static void pack_nexter_dealloc(PyObject *self) {
    PackNexter *n = (PackNexter *)self;
    for (int i = 0; i < PACK_ARRAYS; i++) {
        Py_XDECREF(n->keys[i]);
        Py_XDECREF(n->dtypes[i]);
    }
    Py_XDECREF(n->acquire);
    Py_XDECREF(n->unlock);
    Py_XDECREF(n->ndarray);
    Py_XDECREF(n->zeros);
    Py_XDECREF(n->rows_shape);
    Py_TYPE(self)->tp_free(self);
}

/* PackNexter(packer, next_held, release, lock, keys, dtypes, length, ndarray, zeros)
 * keys: the six dict keys (the packed field, position_ids, document_ids, cu_seqlens,
 * segment_index, segment_start); dtypes: their numpy dtypes; lock: the loader's _pack_lock. */
static int pack_nexter_init(PyObject *self, PyObject *args, PyObject *kw) {
    PackNexter *n = (PackNexter *)self;
    PyObject *handle, *fn_next, *fn_release, *lock, *keys, *dtypes, *ndarray, *zeros;
    Py_ssize_t length;
    (void)kw;
    if (n->ndarray != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_fastpath.PackNexter: initialised already");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "OOOOO!O!nOO", &handle, &fn_next, &fn_release, &lock, &PyTuple_Type,
                          &keys, &PyTuple_Type, &dtypes, &length, &ndarray, &zeros))
        return -1;
    n->packer = address(handle, "the packer handle");
    n->next_held = (next_held_fn)address(fn_next, "dsc_packer_next_held");
    n->release = (pack_release_fn)address(fn_release, "dsc_packer_release");
    if (PyErr_Occurred())
        return -1;
    if (PyTuple_GET_SIZE(keys) != PACK_ARRAYS || PyTuple_GET_SIZE(dtypes) != PACK_ARRAYS ||
        length < 1) {
        PyErr_SetString(PyExc_ValueError, "_fastpath.PackNexter: six keys and dtypes, and a row "
                                          "length >= 1");
        return -1;
    }
    n->acquire = PyObject_GetAttrString(lock, "acquire");
    n->unlock = n->acquire ? PyObject_GetAttrString(lock, "release") : NULL;
    if (n->unlock == NULL)
        return -1;
    for (int i = 0; i < PACK_ARRAYS; i++) {
        PyObject *item = PyObject_GetAttrString(PyTuple_GET_ITEM(dtypes, i), "itemsize");
        Py_ssize_t size = item ? PyLong_AsSsize_t(item) : -1;
        Py_XDECREF(item);
        if (size <= 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "_fastpath.PackNexter: a dtype of no itemsize");
            return -1;
        }
        n->items[i] = size;
        n->keys[i] = new_ref(PyTuple_GET_ITEM(keys, i));
        n->dtypes[i] = new_ref(PyTuple_GET_ITEM(dtypes, i));
    }
    n->length = length;
    n->zeros = new_ref(zeros);
    n->ndarray = new_ref(ndarray);
    return 0;
}

/* An array of the batch over `count` items at data, a Span on hold; numpy.zeros(shape, dtype)
 * for none (as the ctypes path's _pack_view). Steals shape. */
static PyObject *pack_array(PackNexter *n, int i, const void *data, Py_ssize_t count,
                            PyObject *shape, PyObject *hold) {
    if (shape == NULL)
        return NULL;
    PyObject *a;
    if (data == NULL || count == 0) {
        a = PyObject_CallFunctionObjArgs(n->zeros, shape, n->dtypes[i], NULL);
    } else {
        Span *span = PyObject_New(Span, &SpanType);
        if (span == NULL) {
            Py_DECREF(shape);
            return NULL;
        }
        span->hold = new_ref(hold);
        span->data = (void *)data; /* the held buffers are the caller's while held */
        span->bytes = count * n->items[i];
        PyObject *args = PyTuple_Pack(3, shape, n->dtypes[i], (PyObject *)span);
        Py_DECREF(span);
        a = args ? PyObject_Call(n->ndarray, args, NULL) : NULL;
        Py_XDECREF(args);
    }
    Py_DECREF(shape);
    return a;
}

/* The next packed batch's dict, or the int dsc_packer_next_held returned (DSC_EOF, an error:
 * the caller raises what it means). */
static PyObject *pack_nexter_next(PyObject *self, PyObject *unused) {
    PackNexter *n = (PackNexter *)self;
    (void)unused;
    if (n->packer == NULL) {
        PyErr_SetString(PyExc_ValueError, "loader is closed");
        return NULL;
    }
    dsc_packed_batch_t pb;
    memset(&pb, 0, sizeof pb);
    pb.struct_size = sizeof pb;
    dsc_pack_hold_t *held = NULL;
    dsc_packer_t *packer = n->packer;
    PyThreadState *ts = PyEval_SaveThread(); /* it may wait for the packer's thread */
    int rc = n->next_held(packer, &pb, &held);
    PyEval_RestoreThread(ts);
    if (rc < 0)
        return PyLong_FromLong(rc);
    PackHold *hold = PyObject_New(PackHold, &PackHoldType);
    if (hold == NULL) {
        PyObject *r = PyObject_CallNoArgs(n->acquire);
        if (r != NULL) {
            Py_DECREF(r);
            n->release(held);
            r = PyObject_CallNoArgs(n->unlock);
        }
        Py_XDECREF(r);
        return NULL;
    }
    hold->nexter = (PackNexter *)new_ref(self);
    hold->hold = held;
    n->holds++;
    Py_ssize_t rows = pb.rows, segs = pb.segments, cells = rows * n->length;
    if (n->rows_shape == NULL || n->shape_rows != rows) {
        Py_XSETREF(n->rows_shape, Py_BuildValue("(nn)", rows, n->length));
        n->shape_rows = rows;
    }
    PyObject *out = n->rows_shape != NULL ? PyDict_New() : NULL;
    if (out == NULL)
        goto fail;
    const void *data[PACK_ARRAYS] = {pb.tokens,     pb.position_ids,  pb.document_ids,
                                     pb.cu_seqlens, pb.segment_index, pb.segment_start};
    Py_ssize_t count[PACK_ARRAYS] = {cells, cells, cells, segs + 1, segs, segs};
    for (int i = 0; i < PACK_ARRAYS; i++) {
        PyObject *shape;
        if (i <= PACK_DOC)
            shape = new_ref(n->rows_shape);
        else
            shape = Py_BuildValue("(n)", count[i]);
        PyObject *a = pack_array(n, i, data[i], count[i], shape, (PyObject *)hold);
        if (a == NULL)
            goto fail;
        int set = PyDict_SetItem(out, n->keys[i], a);
        Py_DECREF(a);
        if (set < 0)
            goto fail;
    }
    Py_DECREF(hold);
    return out;
fail:
    Py_XDECREF(out);
    Py_DECREF(hold); /* gives the batch back when no array took it */
    return NULL;
}

/* The packer is destroyed: next() raises; holds freed later still give their buffers back
 * (dsc_packer_release frees them, the packer having let go of them). */
static PyObject *pack_nexter_detach(PyObject *self, PyObject *unused) {
    (void)unused;
    ((PackNexter *)self)->packer = NULL;
    Py_RETURN_NONE;
}

static PyMethodDef pack_nexter_methods[] = {
    {"next", pack_nexter_next, METH_NOARGS,
     "The next packed batch's dict, or dsc_packer_next_held's int result when it is < 0."},
    {"detach", pack_nexter_detach, METH_NOARGS, "The packer was destroyed."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef pack_nexter_members[] = {
    {"holds", T_PYSSIZET, offsetof(PackNexter, holds), READONLY, "packed batches alive"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject PackNexterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dscache._fastpath.PackNexter",
    .tp_basicsize = sizeof(PackNexter),
    .tp_dealloc = pack_nexter_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "next() of one packed dscache.Loader (pack=, the packer's thread).",
    .tp_methods = pack_nexter_methods,
    .tp_members = pack_nexter_members,
    .tp_init = pack_nexter_init,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef fastpath_module = {
    PyModuleDef_HEAD_INIT,
    "_fastpath",
    "dscache.Loader's next() in C for host batches of fixed-size fields and packed batches "
    "(optional).",
    -1,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__fastpath(void) {
    if (PyType_Ready(&HoldType) < 0 || PyType_Ready(&SpanType) < 0 ||
        PyType_Ready(&NexterType) < 0 || PyType_Ready(&PackHoldType) < 0 ||
        PyType_Ready(&PackNexterType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&fastpath_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&NexterType);
    if (PyModule_AddObject(m, "Nexter", (PyObject *)&NexterType) < 0) {
        Py_DECREF(&NexterType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&PackNexterType);
    if (PyModule_AddObject(m, "PackNexter", (PyObject *)&PackNexterType) < 0) {
        Py_DECREF(&PackNexterType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
