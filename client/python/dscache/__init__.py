"""dscache: Python binding of libdscache (ctypes over the C ABI, nothing to compile).

    import dscache
    loader = dscache.Loader(servers="10.0.0.1:7070,10.0.0.2:7070", dataset="imagenet",
                            batch_size=256, seed=0, rank=rank, world_size=world)
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader:          # dict: field name -> array [B, ...field shape]
            train_step(batch["image"], batch["label"])

Batches are zero-copy views of the loader's batch slots: they stay valid until the next batch
is requested (the next iteration step), then the slot is refilled. Copy what you keep longer
(np.array(x) / tensor.clone()), or pass copy=True.

The library is found at $DSCACHE_LIB, next to this package (libdscache.so), or in the build
tree (build/lib) of the source checkout holding this package.
"""

import ctypes
import logging
import os
import warnings

__version__ = "0.1.0"
__all__ = ["Loader", "Error", "__version__", "library_path"]

_log = logging.getLogger("dscache")
_log.addHandler(logging.NullHandler())  # quiet unless the application configures logging


class Error(Exception):
    """A libdscache error: .code (negative DSC_E* value), .name ("DSC_EUNAVAIL"), message."""

    def __init__(self, code, message, name=None):
        super().__init__(message)
        self.code = code
        self.name = name or "DSC_UNKNOWN"

    def __str__(self):
        return "%s (%s)" % (self.args[0], self.name)


# ---- C declarations (client/include/dscache.h) --------------------------------------------

_LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)


class _Options(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("servers", ctypes.c_char_p),
        ("dataset", ctypes.c_char_p),
        ("batch_size", ctypes.c_uint32),
        ("seed", ctypes.c_uint64),
        ("rank", ctypes.c_uint32),
        ("world_size", ctypes.c_uint32),
        ("shuffle", ctypes.c_int),
        ("shuffle_window", ctypes.c_uint32),
        ("drop_last", ctypes.c_int),
        ("prefetch_batches", ctypes.c_uint32),
        ("inflight_bytes", ctypes.c_uint64),
        ("decode_threads", ctypes.c_uint32),
        ("connections", ctypes.c_uint32),
        ("device", ctypes.c_int),
        ("timeout_ms", ctypes.c_uint32),
        ("replicas", ctypes.c_uint32),
        ("fallback_path", ctypes.c_char_p),
        ("log_fn", _LOG_FN),
        ("log_ctx", ctypes.c_void_p),
        ("log_level", ctypes.c_int),
        ("stats_log_seconds", ctypes.c_double),
        ("cache_bytes", ctypes.c_uint64),
        ("server_inflight_bytes", ctypes.c_uint64),
        ("no_assist", ctypes.c_int),
        ("order", ctypes.c_int),
    ]


_MAX_DIMS = 8


class _FieldInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * 64),
        ("dtype", ctypes.c_int),
        ("ndim", ctypes.c_uint32),
        ("shape", ctypes.c_int64 * _MAX_DIMS),
        ("sample_bytes", ctypes.c_uint64),
    ]


class _TensorView(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("ndim", ctypes.c_uint32),
        ("shape", ctypes.c_int64 * (_MAX_DIMS + 1)),
        ("bytes", ctypes.c_uint64),
        ("device", ctypes.c_int),
    ]


_STAT_FIELDS = [
    ("struct_size", ctypes.c_size_t),
    ("epoch", ctypes.c_uint64),
    ("batches", ctypes.c_uint64),
    ("samples", ctypes.c_uint64),
    ("bytes", ctypes.c_uint64),
    ("wire_bytes", ctypes.c_uint64),
    ("requests", ctypes.c_uint64),
    ("retries", ctypes.c_uint64),
    ("failovers", ctypes.c_uint64),
    ("checksum_failures", ctypes.c_uint64),
    ("wall_seconds", ctypes.c_double),
    ("stall_seconds", ctypes.c_double),
    ("compute_seconds", ctypes.c_double),
    ("stall_fraction", ctypes.c_double),
    ("network_seconds", ctypes.c_double),
    ("decode_seconds", ctypes.c_double),
    ("collate_seconds", ctypes.c_double),
    ("h2d_seconds", ctypes.c_double),
    ("placed_chunks", ctypes.c_uint64),
    ("refetches", ctypes.c_uint64),
    ("h2d_bytes", ctypes.c_uint64),
    ("assists", ctypes.c_uint64),
]


class _Stats(ctypes.Structure):
    _fields_ = _STAT_FIELDS


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [
    ("dl_tensor", _DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _DELETER),
]

# numpy dtype names by DSC_DTYPE_* (bf16 has no numpy type: its raw bits come as uint16).
_NP_DTYPES = {1: "uint8", 2: "int8", 3: "uint16", 4: "int16", 5: "uint32", 6: "int32",
              7: "int64", 8: "float16", 9: "uint16", 10: "float32", 11: "float64"}

_EOF = -4001


def _candidates():
    env = os.environ.get("DSCACHE_LIB")
    if env:
        yield env
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "libdscache.so")
    # client/python/dscache -> <checkout>/build/lib
    for up in ("../../build/lib", "../../../build/lib"):
        yield os.path.normpath(os.path.join(here, up, "libdscache.so"))


_lib = None
library_path = None


def _load():
    global _lib, library_path
    if _lib is not None:
        return _lib
    tried = []
    for path in _candidates():
        tried.append(path)
        if os.path.exists(path):
            lib = ctypes.CDLL(path)
            break
    else:
        raise ImportError("dscache: libdscache.so not found (set DSCACHE_LIB); tried: "
                          + ", ".join(tried))
    vp, ip, u32, u64, i = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_uint64, int
    del i
    sig = {
        "dsc_strerror": (ctypes.c_char_p, [ip]),
        "dsc_err_name": (ctypes.c_char_p, [ip]),
        "dsc_version": (ctypes.c_char_p, []),
        "dsc_loader_options_init": (None, [ctypes.POINTER(_Options)]),
        "dsc_loader_create": (ip, [ctypes.POINTER(_Options), ctypes.POINTER(vp)]),
        "dsc_loader_destroy": (None, [vp]),
        "dsc_loader_next": (ip, [vp, ctypes.POINTER(vp)]),
        "dsc_batch_release": (None, [vp]),
        "dsc_loader_set_epoch": (ip, [vp, u64]),
        "dsc_loader_len": (u64, [vp]),
        "dsc_loader_dataset_samples": (u64, [vp]),
        "dsc_loader_state_save": (ip, [vp, vp, ctypes.c_size_t]),
        "dsc_loader_state_load": (ip, [vp, vp, ctypes.c_size_t]),
        "dsc_loader_field_count": (u32, [vp]),
        "dsc_loader_field": (ip, [vp, u32, ctypes.POINTER(_FieldInfo)]),
        "dsc_loader_set_stream": (ip, [vp, vp]),
        "dsc_batch_samples": (u32, [vp]),
        "dsc_batch_step": (u64, [vp]),
        "dsc_batch_indices": (ctypes.POINTER(ctypes.c_uint64), [vp]),
        "dsc_batch_field": (ip, [vp, u32, ctypes.POINTER(_TensorView)]),
        "dsc_batch_dlpack": (ip, [vp, u32, ctypes.POINTER(ctypes.POINTER(_DLManagedTensor))]),
        "dsc_loader_stats": (ip, [vp, ctypes.POINTER(_Stats)]),
        "dsc_loader_metrics_text": (ip, [vp, ctypes.c_char_p, ctypes.c_size_t]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    _lib = lib
    library_path = path
    return lib


def _check(rc, messages=None):
    if rc >= 0:
        return rc
    lib = _load()
    msg = lib.dsc_strerror(rc).decode()
    if messages:
        msg = msg + ": " + messages[-1]
    raise Error(rc, msg, lib.dsc_err_name(rc).decode())


# ---- DLPack capsules (torch output) ---------------------------------------------------------

_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
# The destructor gets the capsule while it is being freed: it must not take a reference, so
# these two are called on the raw pointer.
_PyCapsule_IsValid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))
_PyCapsule_GetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@_CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule_ptr):
    # An unconsumed capsule (still named "dltensor") owns its DLManagedTensor: free it.
    if _PyCapsule_IsValid(capsule_ptr, b"dltensor"):
        ptr = _PyCapsule_GetPointer(capsule_ptr, b"dltensor")
        managed = ctypes.cast(ptr, ctypes.POINTER(_DLManagedTensor))
        if managed.contents.deleter:
            managed.contents.deleter(managed)


def _torch_from_dlpack(capsule):
    import torch
    if hasattr(torch, "from_dlpack"):
        return torch.from_dlpack(capsule)
    return torch.utils.dlpack.from_dlpack(capsule)


class Loader:
    """Iterable over the batches of one rank, epoch after epoch.

    servers: "HOST:PORT,..." or a list of "HOST:PORT" (also "dns:NAME:PORT", "file:PATH").
    device: "cpu" (host batches) or "cuda" / "cuda:N" (batches already on that GPU; needs
    output="torch"). output: "numpy" (dict of numpy arrays; bf16 as raw uint16 bits) or
    "torch" (dict of torch tensors through DLPack). fallback_path: a dataset directory readable
    here, used when no server answers. timeout_ms: how long a request may wait on a server
    before it is moved to another replica (and the server probed with back-off). replicas: the
    servers' --replicas. server_inflight_bytes: bound on bytes in flight to one server (default
    2 * inflight_bytes / servers). assist: a wait for the next batch does that batch's decoding
    and collation in the calling thread (the GIL is released) instead of sleeping (CPU batches
    only). order: "local" (default: each rank reads a contiguous run of the shuffled chunks,
    about the stored dataset crosses the network once per epoch at any world size) or "global"
    (the world-size-independent order; every rank reads about the whole dataset per epoch); see
    docs/order.md. shuffle_window and cache_bytes default to sizes taken from the dataset, so
    that no chunk is fetched twice per epoch. Iterating yields the rest of the current epoch; the next
    iteration continues with the following epoch (or call set_epoch first).
    """

    def __init__(self, servers=None, dataset=None, batch_size=32, seed=0, rank=0, world_size=1,
                 shuffle=True, shuffle_window=None, drop_last=False, prefetch=4,
                 decode_threads=2, connections=2, device="cpu", output="numpy",
                 fallback_path=None, inflight_bytes=None, cache_bytes=None, timeout_ms=5000,
                 replicas=2, copy=False, indices=False, stats_log_seconds=0.0,
                 server_inflight_bytes=None, assist=True, order="local"):
        lib = _load()
        self._lib = lib
        self._handle = None
        self._messages = []
        if order not in ("local", "global"):
            raise ValueError("order must be 'local' or 'global'")
        if output not in ("numpy", "torch"):
            raise ValueError("output must be 'numpy' or 'torch'")
        dev = -1
        if device not in (None, "cpu"):
            text = str(device)
            if text == "cuda":
                dev = 0
            elif text.startswith("cuda:") and text[5:].isdigit():
                dev = int(text[5:])
            else:
                raise ValueError("device must be 'cpu', 'cuda' or 'cuda:N'")
            if output != "torch":
                raise ValueError("device batches need output='torch'")
        if isinstance(servers, (list, tuple)):
            servers = ",".join(servers)
        if dataset is None:
            raise ValueError("dataset is required")
        self._output = output
        self._copy = copy
        self._want_indices = indices
        self._device = dev

        def on_log(ctx, level, message):
            text = message.decode(errors="replace")
            if level == 0:
                self._messages.append(text)
                del self._messages[:-8]
            if level == 1 and "too small for the shuffle window" in text:
                # Said once, at create: chunks would be fetched several times per epoch.
                warnings.warn(text, RuntimeWarning, stacklevel=3)
            _log.log({0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO}.get(level,
                                                                                 logging.DEBUG),
                     "%s", text)

        self._log_fn = _LOG_FN(on_log)  # kept alive as long as the loader
        opts = _Options()
        lib.dsc_loader_options_init(ctypes.byref(opts))
        opts.servers = servers.encode() if servers else None
        opts.dataset = dataset.encode()
        opts.batch_size = batch_size
        opts.seed = seed
        opts.rank = rank
        opts.world_size = world_size
        opts.shuffle = 1 if shuffle else 0
        if shuffle_window:  # None: sized from the dataset (docs/order.md)
            opts.shuffle_window = shuffle_window
        opts.order = 0 if order == "local" else 1
        opts.drop_last = 1 if drop_last else 0
        opts.prefetch_batches = prefetch
        opts.decode_threads = decode_threads
        opts.connections = connections
        opts.device = dev
        opts.timeout_ms = timeout_ms
        opts.replicas = replicas
        opts.fallback_path = fallback_path.encode() if fallback_path else None
        opts.log_fn = self._log_fn
        opts.log_level = 2 if _log.isEnabledFor(logging.INFO) else 1
        opts.stats_log_seconds = stats_log_seconds
        if inflight_bytes:
            opts.inflight_bytes = inflight_bytes
        if cache_bytes:
            opts.cache_bytes = cache_bytes
        if server_inflight_bytes:
            opts.server_inflight_bytes = server_inflight_bytes
        opts.no_assist = 0 if assist else 1
        handle = ctypes.c_void_p()
        _check(lib.dsc_loader_create(ctypes.byref(opts), ctypes.byref(handle)), self._messages)
        self._handle = handle
        self._fields = []
        for f in range(lib.dsc_loader_field_count(handle)):
            info = _FieldInfo()
            _check(lib.dsc_loader_field(handle, f, ctypes.byref(info)))
            self._fields.append((info.name.decode(), info.dtype,
                                 tuple(info.shape[d] for d in range(info.ndim))))
        self._batch = ctypes.c_void_p()

    # -- lifetime --
    def close(self):
        """Stops the loader's threads and frees its memory (batches handed out become invalid)."""
        if self._handle:
            self._lib.dsc_loader_destroy(self._handle)
            self._handle = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _h(self):
        if not self._handle:
            raise ValueError("loader is closed")
        return self._handle

    # -- iteration --
    def __len__(self):
        """Batches this rank gets per epoch."""
        return int(self._lib.dsc_loader_len(self._h()))

    def __iter__(self):
        return self

    def __next__(self):
        h = self._h()
        rc = self._lib.dsc_loader_next(h, ctypes.byref(self._batch))
        if rc == _EOF:
            raise StopIteration
        _check(rc, self._messages)
        return self._convert(self._batch)

    def _convert(self, batch):
        import numpy as np
        out = {}
        n = self._lib.dsc_batch_samples(batch)
        for f, (name, dtype, shape) in enumerate(self._fields):
            if self._output == "torch":
                managed = ctypes.POINTER(_DLManagedTensor)()
                _check(self._lib.dsc_batch_dlpack(batch, f, ctypes.byref(managed)))
                capsule = _PyCapsule_New(ctypes.cast(managed, ctypes.c_void_p), b"dltensor",
                                         ctypes.cast(_capsule_destructor, ctypes.c_void_p))
                t = _torch_from_dlpack(capsule)
                out[name] = t.clone() if self._copy else t
            else:
                view = _TensorView()
                _check(self._lib.dsc_batch_field(batch, f, ctypes.byref(view)))
                buf = (ctypes.c_uint8 * view.bytes).from_address(view.data) if view.bytes else \
                    bytearray()
                a = np.frombuffer(buf, dtype=_NP_DTYPES[dtype]).reshape((n,) + shape)
                out[name] = a.copy() if self._copy else a
        if self._want_indices:
            idx = self._lib.dsc_batch_indices(batch)
            out["__index__"] = np.ctypeslib.as_array(idx, shape=(n,)).copy()
        return out

    # -- epochs and resume --
    def set_epoch(self, epoch):
        """Starts `epoch` from its first batch (a no-op when already there)."""
        _check(self._lib.dsc_loader_set_epoch(self._h(), epoch), self._messages)

    def state_dict(self):
        """{"dscache_state": bytes}: the epoch and the steps done (at each world size this epoch),
        the same on every rank; it resumes on any world size. Loading it into a loader with another
        seed, shuffle, shuffle_window or order raises Error
        (DSC_EBADSTATE) instead of resuming into another order."""
        buf = ctypes.create_string_buffer(192)
        n = _check(self._lib.dsc_loader_state_save(self._h(), buf, 192))
        return {"dscache_state": buf.raw[:n]}

    def load_state_dict(self, state):
        data = state["dscache_state"]
        buf = ctypes.create_string_buffer(bytes(data), len(data))
        _check(self._lib.dsc_loader_state_load(self._h(), buf, len(data)), self._messages)

    # -- information --
    @property
    def fields(self):
        """[(name, dtype name, per-sample shape)]"""
        return [(n, _NP_DTYPES[d] if d != 9 else "bfloat16", s) for n, d, s in self._fields]

    @property
    def dataset_samples(self):
        return int(self._lib.dsc_loader_dataset_samples(self._h()))

    def set_stream(self, stream):
        """Orders the batches before work queued on this CUDA stream (torch.cuda.Stream or a raw
        cudaStream_t as an int)."""
        ptr = getattr(stream, "cuda_stream", stream)
        _check(self._lib.dsc_loader_set_stream(self._h(), ctypes.c_void_p(ptr)))

    def stats(self):
        """Counters and times (the fields of dsc_stats_t): epoch, batches, samples, bytes,
        wire_bytes, requests, retries, failovers, checksum_failures, wall/stall/compute_seconds,
        stall_fraction, network/decode/collate/h2d_seconds, placed_chunks (chunks decoded straight
        into a batch slot), refetches (chunks fetched again within an epoch: cache_bytes too
        small for the shuffle window, see the loader's WARN) and h2d_bytes (the bytes of the
        host-to-device copies timed in h2d_seconds: their ratio is the copy bandwidth) and
        assists (chunk decodes and collations done by next() while it waited)."""
        s = _Stats()
        s.struct_size = ctypes.sizeof(_Stats)
        _check(self._lib.dsc_loader_stats(self._h(), ctypes.byref(s)))
        return {name: getattr(s, name) for name, _ in _STAT_FIELDS if name != "struct_size"}

    def metrics_text(self):
        """The stats in Prometheus text format."""
        need = _check(self._lib.dsc_loader_metrics_text(self._h(), None, 0))
        buf = ctypes.create_string_buffer(need + 1)
        _check(self._lib.dsc_loader_metrics_text(self._h(), buf, need + 1))
        return buf.value.decode()
