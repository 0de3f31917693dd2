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
 * for byte; tests/python/test_fastpath.py compares them). */
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

static struct PyModuleDef fastpath_module = {
    PyModuleDef_HEAD_INIT,
    "_fastpath",
    "dscache.Loader's next() in C for host batches of fixed-size fields (optional).",
    -1,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__fastpath(void) {
    if (PyType_Ready(&HoldType) < 0 || PyType_Ready(&SpanType) < 0 || PyType_Ready(&NexterType) < 0)
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
    return m;
}
