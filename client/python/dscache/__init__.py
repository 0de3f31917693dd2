"""dscache: Python binding of libdscache (ctypes over the C ABI, nothing to compile).

    import dscache
    loader = dscache.Loader(servers="10.0.0.1:7070,10.0.0.2:7070", dataset="imagenet",
                            batch_size=256, seed=0)   # rank/world size: see below
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader:          # dict: field name -> array [B, ...field shape]
            train_step(batch["image"], batch["label"])

Batches are zero-copy views of the loader's batch slots, and each batch keeps its slot until
the last array or tensor of it is freed: keeping batches (one-ahead prefetch, gradient
accumulation) is safe, and the loader adds slots while you hold them, up to max_held_bytes
(then Error DSC_EHELD). Drop batches promptly to stay within prefetch slots; copy=True gives
copies instead. For PyTorch see dscache.torch.

Rank and world size, unless given: torch.distributed's when it is initialised, else the RANK and
WORLD_SIZE environment variables, else 0 and 1.

The library is loaded at import (ImportError naming every place tried when none loads), from:
$DSCACHE_LIB; a copy bundled in this package; the library installed by the same
`cmake --install` as this package; the dynamic linker's search path (libdscache.so.0:
LD_LIBRARY_PATH, ld.so.cache, /usr/lib...); the build tree (build/lib) of the source checkout
holding this package.

Errors raise dscache.Error (with .code, the negative DSC_E* value, and .name) or one of its
family subclasses: Unavailable, NotFound, Corrupt, BadState, InvalidOption. The library's log
lines go to the Python logger "dscache"; DSCACHE_LOG=error|warn|info|debug sets its level (and
prints to stderr when the application configured no logging handler).
"""

import atexit
import collections
import ctypes
import ctypes.util
import logging
import os
import sys
import threading
import warnings
import weakref

__version__ = "0.1.0"
__all__ = ["Loader", "Error", "Unavailable", "NotFound", "Corrupt", "BadState",
           "InvalidOption", "resolve_rank", "__version__", "library_path"]

_log = logging.getLogger("dscache")
_log.addHandler(logging.NullHandler())  # quiet unless the application configures logging


# ---- Errors ---------------------------------------------------------------------------------

class Error(Exception):
    """A libdscache error: .code (negative DSC_E* value), .name ("DSC_EUNAVAIL"), message."""

    def __init__(self, code, message, name=None):
        super().__init__(message)
        self.code = code
        self.name = name or "DSC_UNKNOWN"

    def __str__(self):
        return "%s (%s)" % (self.args[0], self.name)


class Unavailable(Error):
    """No server (or no replica of a shard) answered: network, time-out, servers down."""


class NotFound(Error):
    """The dataset (or a shard, or a fallback file) does not exist."""


class Corrupt(Error):
    """Stored or received data failed a check (checksum, header, manifest, decompression)."""


class BadState(Error):
    """A saved loader state that is damaged or was saved with other order settings."""


class InvalidOption(Error, ValueError):
    """A loader option or argument the library rejects (also a ValueError)."""


# DSC_E* names (without "DSC_") by family; codes not listed raise plain Error.
_FAMILIES = {
    Unavailable: ("EUNAVAIL", "EALLDOWN", "ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "ECLOSED",
                  "EPIPE"),
    NotFound: ("ENOTFOUND", "ENOENT"),
    Corrupt: ("ECORRUPT", "ECHUNKSUM", "EDATASUM", "EFILESUM", "EDECOMPRESS", "EBADMAGIC",
              "EBADHEADER", "EBADSCHEMA", "EBADINDEX", "EBADFOOTER", "EBADMANIFEST",
              "ETRUNCATED"),
    BadState: ("EBADSTATE",),
    InvalidOption: ("EINVAL", "ERANGE"),
}
_FAMILY_BY_NAME = {"DSC_" + n: cls for cls, names in _FAMILIES.items() for n in names}


def _error(code, message, name):
    return _FAMILY_BY_NAME.get(name, Error)(code, message, name)


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
        ("auth_file", ctypes.c_char_p),
        ("order", ctypes.c_int),
        ("max_held_bytes", ctypes.c_uint64),
        ("job_name", ctypes.c_char_p),
        ("report_seconds", ctypes.c_double),
        ("transport", ctypes.c_char_p),
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
    ("epoch_wire_bytes", ctypes.c_uint64),
    ("slots_added", ctypes.c_uint64),
    ("bottleneck", ctypes.c_int32),
    ("verdict_seconds", ctypes.c_double),
    ("verdict_stall_fraction", ctypes.c_double),
    ("stall_waits", ctypes.c_double * 6),
    ("bottleneck_server", ctypes.c_char * 128),
    ("evidence", ctypes.c_char * 256),
    ("suggestion", ctypes.c_char * 256),
    ("rdma_connections", ctypes.c_uint64),
    ("tcp_connections", ctypes.c_uint64),
    ("rdma_bytes", ctypes.c_uint64),
    ("rdma_fallbacks", ctypes.c_uint64),
    ("rdma_errors", ctypes.c_uint64),
]

# dscache_base.h dsc_bottleneck_t, in order (the numbers are on the wire: append only).
BOTTLENECKS = ("unknown", "none", "fetch", "server", "decode", "collate", "h2d", "cache",
               "inflight")
# dsc_stats_t.stall_waits, in order.
STALL_WAITS = ("plan", "queued", "budget", "network", "decode", "collate")


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

_LIB_NAME = "libdscache.so.0"


def _candidates():
    """(description, path or soname) in search order; see the module docstring."""
    here = os.path.dirname(os.path.abspath(__file__))
    yield "bundled", os.path.join(here, "libdscache.so")
    try:
        from . import _install  # written by `cmake --install` next to the installed package
        yield "cmake --install prefix", os.path.join(_install.LIBDIR, _LIB_NAME)
    except ImportError:
        pass
    yield "dynamic linker search path", _LIB_NAME
    found = ctypes.util.find_library("dscache")
    if found and found != _LIB_NAME:
        yield "ldconfig (find_library)", found
    # client/python/dscache -> <checkout>/build/lib
    yield "source checkout build tree", os.path.normpath(
        os.path.join(here, "..", "..", "..", "build", "lib", "libdscache.so"))


def _open_library():
    env = os.environ.get("DSCACHE_LIB")
    if env:
        # An explicit choice that fails is an error, never a silent fall-back to another copy.
        try:
            return ctypes.CDLL(env), env
        except OSError as e:
            raise ImportError("dscache: DSCACHE_LIB=%s cannot be loaded: %s" % (env, e)) from None
    tried = ["DSCACHE_LIB (not set)"]
    for what, path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append("%s: %s (absent)" % (what, path))
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s: %s (%s)" % (what, path, e))
    raise ImportError("dscache: libdscache not found. Install it (cmake --install, or a wheel "
                      "that bundles it) or set DSCACHE_LIB=/path/to/libdscache.so. Tried:\n  "
                      + "\n  ".join(tried))


_lib = None
library_path = None


def _load():
    """The loaded library (loaded at import; ImportError when it cannot be)."""
    global _lib, library_path
    if _lib is not None:
        return _lib
    lib, path = _open_library()
    vp, ip, u32, u64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_uint64
    sig = {
        "dsc_strerror": (ctypes.c_char_p, [ip]),
        "dsc_err_name": (ctypes.c_char_p, [ip]),
        "dsc_version": (ctypes.c_char_p, []),
        "dsc_loader_options_init2": (ip, [ctypes.POINTER(_Options), ctypes.c_size_t]),
        "dsc_batch_retain": (ip, [vp]),
        "dsc_loader_last_error": (ip, [vp, ctypes.c_char_p, ctypes.c_size_t]),
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
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise ImportError("dscache: %s lacks %s (another version of libdscache?)"
                              % (path, name)) from None
        fn.restype = res
        fn.argtypes = args
    _lib = lib
    library_path = path
    return lib


def _last_error(handle):
    """The library's account of the last failure (handle None: this thread's last create)."""
    lib = _load()
    buf = ctypes.create_string_buffer(1024)
    lib.dsc_loader_last_error(handle, buf, len(buf))
    return buf.value.decode(errors="replace")


def _check(rc, handle=False):
    """rc, or raises its error; handle (a loader handle, or None for create) adds the library's
    detail (each server tried and why it failed) to the message."""
    if rc >= 0:
        return rc
    lib = _load()
    msg = lib.dsc_strerror(rc).decode()
    if handle is not False:
        detail = _last_error(handle)
        if detail:
            msg = msg + ": " + detail
    raise _error(rc, msg, lib.dsc_err_name(rc).decode())


# ---- Logging: C log lines -> the Python logger "dscache" -----------------------------------
# One callback for every loader, alive as long as the module; log_ctx is a key into _sinks
# (the loader's last error lines, for exception messages). The library calls it from its own
# threads too: ctypes takes the GIL for the call, logging and deque.append are thread-safe.

_LEVELS = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO, 3: logging.DEBUG}
_ENV_LEVELS = {"error": 0, "warn": 1, "warning": 1, "info": 2, "debug": 3}
_sinks = {}
_sink_ids = iter(range(1, 1 << 62))
_sinks_lock = threading.Lock()


@_LOG_FN
def _on_log(ctx, level, message):
    text = message.decode(errors="replace") if message else ""
    if level == 1 and text.startswith("loader: replicas "):
        # Raised in the thread that creates the loader (the check runs inside create).
        warnings.warn("dscache: " + text, RuntimeWarning, stacklevel=3)
    if level == 0:
        sink = _sinks.get(ctx or 0)
        if sink is not None:
            sink.append(text)
    if level == 1 and "too small for the shuffle window" in text:
        # Said once, at create: chunks would be fetched several times per epoch.
        warnings.warn(text, RuntimeWarning, stacklevel=2)
    _log.log(_LEVELS.get(level, logging.DEBUG), "%s", text)


_stderr_handler = None


def _has_handler(logger):
    while logger is not None:
        if any(not isinstance(h, logging.NullHandler) for h in logger.handlers):
            return True
        if not logger.propagate:
            return False
        logger = logger.parent
    return False


def _c_log_level():
    """The C library's log_level for the "dscache" logger's effective level, after applying
    DSCACHE_LOG (which the library applies to a callback's level too)."""
    global _stderr_handler
    env = os.environ.get("DSCACHE_LOG", "").strip().lower()
    if env:
        lvl = _ENV_LEVELS.get(env, 1)
        if _log.level == logging.NOTSET or _log.level > _LEVELS[lvl]:
            _log.setLevel(_LEVELS[lvl])
        if _stderr_handler is None and not _has_handler(_log):
            # As the library does without a callback: DSCACHE_LOG alone prints to stderr.
            _stderr_handler = logging.StreamHandler(sys.stderr)
            _stderr_handler.setFormatter(logging.Formatter("dscache %(levelname)s: %(message)s"))
            _log.addHandler(_stderr_handler)
    eff = _log.getEffectiveLevel()
    return 3 if eff <= logging.DEBUG else 2 if eff <= logging.INFO else \
        1 if eff <= logging.WARNING else 0


# ---- Rank and world size --------------------------------------------------------------------

def _env_int(name):
    v = os.environ.get(name)
    if v is None or v.strip() == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise ValueError("environment variable %s=%r is not an integer" % (name, v)) from None


def _torch_dist():
    """torch.distributed when torch is already imported and its process group initialised
    (torch is never imported here)."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist
    except Exception:
        pass
    return None


def resolve_rank(rank=None, world_size=None):
    """(rank, world_size, source): explicit arguments win; else torch.distributed's when it is
    initialised; else the RANK / WORLD_SIZE environment variables (torchrun, Slurm wrappers);
    else 0 / 1. Warns (warnings.warn and the "dscache" logger) when the environment says there
    are several ranks but world_size=1 was given: every rank would then read the whole
    dataset."""
    dist = _torch_dist()
    if dist is not None:
        env_rank, env_world, source = dist.get_rank(), dist.get_world_size(), "torch.distributed"
    else:
        env_rank, env_world, source = _env_int("RANK"), _env_int("WORLD_SIZE"), "environment"
    if world_size is not None:
        if world_size == 1 and env_world is not None and env_world > 1:
            msg = ("dscache: world_size=1 was given but %s says %d ranks: every rank will read "
                   "the whole dataset (leave world_size unset to take it from there)"
                   % (source, env_world))
            warnings.warn(msg, RuntimeWarning, stacklevel=3)
            _log.warning("%s", msg)
        world, src_w = world_size, "argument"
    elif env_world is not None:
        world, src_w = env_world, source
    else:
        world, src_w = 1, "default"
    if rank is not None:
        r = rank
    elif env_rank is not None and world_size is None:
        r = env_rank
    elif env_rank is not None and env_world == world:
        r = env_rank
    else:
        r = 0
    if world < 1 or not 0 <= r < world:
        raise ValueError("rank %d / world_size %d (from %s): need 0 <= rank < world_size"
                         % (r, world, src_w))
    return r, world, src_w


def _parse_device(device):
    """-1 for the host, else the CUDA device index: "cuda:N"/torch.device("cuda", N) -> N;
    "cuda" -> torch's current device when torch has initialised CUDA, else LOCAL_RANK, else 0."""
    if device is None:
        return -1
    text = str(device)  # torch.device prints as "cpu", "cuda", "cuda:0"
    if text == "cpu":
        return -1
    if text.startswith("cuda:") and text[5:].isdigit():
        return int(text[5:])
    if text == "cuda":
        tc = getattr(sys.modules.get("torch"), "cuda", None)
        try:
            if tc is not None and tc.is_initialized():
                return int(tc.current_device())
        except Exception:
            pass
        local = _env_int("LOCAL_RANK")
        return local if local is not None else 0
    raise ValueError("device must be 'cpu', 'cuda', 'cuda:N' or a torch.device, not %r"
                     % (device,))


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


class _Hold:
    """One reference to a batch (dsc_batch_retain when batch is given; a DLPack tensor's own
    otherwise) and to its loader: the loader is destroyed only after the last one goes."""

    def __init__(self, loader, batch):
        self._loader = loader
        self._batch = None
        with loader._hold_lock:
            loader._holds += 1
        if batch is not None:
            try:
                _check(loader._lib.dsc_batch_retain(batch))
            except Error:
                loader._unhold()
                raise
            self._batch = batch

    def __del__(self):
        loader = self.__dict__.get("_loader")
        if loader is None:
            return
        if self._batch is not None and loader._handle:
            loader._lib.dsc_batch_release(self._batch)
        loader._unhold()


class _HostArray:
    """A batch field's host memory for numpy (the array's base): keeps the batch's _Hold."""

    def __init__(self, hold, ptr, shape, dtype):
        self._hold = hold
        self.__array_interface__ = {"data": (ptr, False), "shape": shape,
                                    "typestr": dtype.str, "version": 3}


# DLPack tensors handed to torch: their deleter is wrapped so that the loader's _Hold goes with
# the library's reference (torch calls it when the tensor's storage is freed, any thread).
_dlpack_holds = {}
_dlpack_holds_lock = threading.Lock()


@_DELETER
def _dlpack_deleter(managed):
    key = ctypes.cast(managed, ctypes.c_void_p).value
    with _dlpack_holds_lock:
        orig, hold = _dlpack_holds.pop(key, (None, None))
    # After the loader was destroyed (only at exit) its batches are gone: nothing to release.
    if orig is not None and hold is not None and hold._loader._handle:
        orig(managed)
    del hold


def _dlpack_track(managed, hold):
    key = ctypes.cast(managed, ctypes.c_void_p).value
    with _dlpack_holds_lock:
        # A copy of the function address: the field object would read the struct's new value.
        orig = _DELETER(ctypes.cast(managed.contents.deleter, ctypes.c_void_p).value)
        _dlpack_holds[key] = (orig, hold)
    managed.contents.deleter = _dlpack_deleter


_live = weakref.WeakSet()


@atexit.register
def _close_live_loaders():
    # Stop the library's threads before the interpreter goes: a log callback into a finalising
    # interpreter must not happen.
    for loader in list(_live):
        try:
            loader._destroy()  # even with batches alive: the process is ending
        except Exception:
            pass


class Loader:
    """Iterable over the batches of one rank, epoch after epoch.

    servers: "HOST:PORT,..." or a list of "HOST:PORT" (also "dns:NAME:PORT", "file:PATH").
    rank, world_size: None (default) takes them from torch.distributed when initialised, else
    from RANK / WORLD_SIZE, else 0 / 1 (see resolve_rank). device: "cpu" (host batches),
    "cuda" / "cuda:N" or a torch.device (batches already on that GPU; needs output="torch";
    "cuda" alone is torch's current device, else LOCAL_RANK). output: "numpy" (dict of numpy
    arrays; bf16 as raw uint16 bits) or "torch" (dict of torch tensors through DLPack).
    transform: a callable applied to each batch dict (on the device when batches are on it);
    its result is what iteration yields. fallback_path: a dataset directory readable here, used
    when no server answers. timeout_ms: how long a request may wait on a server before it is
    moved to another replica (and the server probed with back-off). replicas: the servers'
    --replicas; None (default) takes the servers' (a value they disagree with warns).
    max_held_bytes: bound on the batch memory kept alive by batches still referenced (default
    1 GiB; past it next() raises Error DSC_EHELD). server_inflight_bytes: bound on bytes in flight to one server (default
    2 * inflight_bytes / servers). assist: a wait for the next batch does that batch's decoding
    and collation in the calling thread (the GIL is released) instead of sleeping (CPU batches
    only). auth_file: a token file (NAME SECRET) to authenticate with; None takes
    $DSCACHE_TOKEN_FILE, else /var/run/secrets/dscache/token when it exists, else connects
    anonymously (docs/security.md). order: "local" (default: each rank reads a contiguous run of the shuffled chunks,
    so about the stored dataset crosses the network once per epoch at any world size) or
    "global" (the world-size-independent order; every rank reads about the whole dataset per
    epoch); see docs/order.md. shuffle_window and cache_bytes default to sizes taken from the
    dataset, so that no chunk is fetched twice per epoch. job: the job name the loader reports to its servers (default:
    DSCACHE_JOB, else HOST-PID); report_seconds: seconds between those reports (default 5; 0
    or less: never).
    transport: "tcp", "rdma" or "auto" (None:
    $DSCACHE_TRANSPORT, else "auto": RDMA READ where this host and the server both can, else
    TCP per connection; "rdma" fails without it). Iterating yields the rest of the
    current epoch; the next iteration continues with the following epoch (or call set_epoch
    first).
    """

    def __init__(self, servers=None, dataset=None, batch_size=32, seed=0, rank=None,
                 world_size=None, shuffle=True, shuffle_window=None, drop_last=False, prefetch=4,
                 decode_threads=2, connections=2, device="cpu", output="numpy",
                 fallback_path=None, inflight_bytes=None, cache_bytes=None, timeout_ms=5000,
                 replicas=None, copy=False, indices=False, stats_log_seconds=0.0,
                 server_inflight_bytes=None, assist=True, transform=None, max_held_bytes=None,
                 auth_file=None, order="local", job=None,
                 report_seconds=None, transport=None):
        lib = _load()
        self._lib = lib
        self._handle = None
        self._sink_id = 0
        if order not in ("local", "global"):
            raise ValueError("order must be 'local' or 'global'")
        if output not in ("numpy", "torch"):
            raise ValueError("output must be 'numpy' or 'torch'")
        dev = _parse_device(device)
        if dev >= 0 and output != "torch":
            raise ValueError("device batches need output='torch'")
        if isinstance(servers, (list, tuple)):
            servers = ",".join(servers)
        if dataset is None:
            raise ValueError("dataset is required")
        if transform is not None and not callable(transform):
            raise TypeError("transform must be callable")
        rank, world_size, self.rank_source = resolve_rank(rank, world_size)
        self.rank, self.world_size = rank, world_size
        self.dataset = dataset
        self._output = output
        self._copy = copy
        self._want_indices = indices
        self._device = dev
        self._transform = transform
        self._messages = collections.deque(maxlen=8)
        with _sinks_lock:
            self._sink_id = next(_sink_ids)
            _sinks[self._sink_id] = self._messages

        opts = _Options()
        _check(lib.dsc_loader_options_init2(ctypes.byref(opts), ctypes.sizeof(opts)))
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
        opts.replicas = replicas or 0
        opts.fallback_path = fallback_path.encode() if fallback_path else None
        opts.log_fn = _on_log
        opts.log_ctx = self._sink_id
        opts.log_level = _c_log_level()
        opts.stats_log_seconds = stats_log_seconds
        if inflight_bytes:
            opts.inflight_bytes = inflight_bytes
        if cache_bytes:
            opts.cache_bytes = cache_bytes
        if server_inflight_bytes:
            opts.server_inflight_bytes = server_inflight_bytes
        opts.no_assist = 0 if assist else 1
        opts.auth_file = os.fsencode(auth_file) if auth_file else None
        if max_held_bytes:
            opts.max_held_bytes = max_held_bytes
        if job:
            opts.job_name = str(job).encode()
        if report_seconds is not None:
            opts.report_seconds = float(report_seconds) if report_seconds > 0 else -1.0
        if transport is not None and transport not in ("tcp", "rdma", "auto"):
            raise ValueError("transport must be 'tcp', 'rdma' or 'auto'")
        opts.transport = transport.encode() if transport else None
        handle = ctypes.c_void_p()
        try:
            _check(lib.dsc_loader_create(ctypes.byref(opts), ctypes.byref(handle)), None)
        except Error:
            self._drop_sink()
            raise
        self._handle = handle
        self._pid = os.getpid()
        _live.add(self)
        self._fields = []
        for f in range(lib.dsc_loader_field_count(handle)):
            info = _FieldInfo()
            _check(lib.dsc_loader_field(handle, f, ctypes.byref(info)))
            self._fields.append((info.name.decode(), info.dtype,
                                 tuple(info.shape[d] for d in range(info.ndim))))
        self._batch = ctypes.c_void_p()
        self._holds = 0           # batch references alive in Python (_Hold objects)
        self._close_pending = False
        self._hold_lock = threading.Lock()

    # -- lifetime --
    def _drop_sink(self):
        with _sinks_lock:
            _sinks.pop(self._sink_id, None)

    def close(self):
        """Stops the loader. Its memory is freed once no batch of it is alive any more (arrays
        and tensors handed out stay valid until freed)."""
        if self._handle:
            with self._hold_lock:
                self._close_pending = True
                if self._holds > 0:
                    return  # the last batch freed destroys it
            self._destroy()

    def _destroy(self):
        self._close_pending = True
        handle, self._handle = self._handle, None
        if handle:
            # A forked child (e.g. a DataLoader worker) has the handle but not the threads:
            # only the creating process destroys the loader.
            if os.getpid() == self._pid:
                self._lib.dsc_loader_destroy(handle)
            self._drop_sink()

    def _unhold(self):
        with self._hold_lock:
            self._holds -= 1
            last = self._holds == 0 and self._close_pending
        if last:
            self._destroy()

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
        if not self._handle or self._close_pending:
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
        _check(rc, h)
        out = self._convert(self._batch)
        return self._transform(out) if self._transform is not None else out

    def _convert(self, batch):
        import numpy as np
        out = {}
        n = self._lib.dsc_batch_samples(batch)
        ref = None
        for f, (name, dtype, shape) in enumerate(self._fields):
            if self._output == "torch":
                managed = ctypes.POINTER(_DLManagedTensor)()
                # The tensor holds a reference to the batch (its slot), dropped by its deleter.
                _check(self._lib.dsc_batch_dlpack(batch, f, ctypes.byref(managed)))
                _dlpack_track(managed, _Hold(self, None))
                capsule = _PyCapsule_New(ctypes.cast(managed, ctypes.c_void_p), b"dltensor",
                                         ctypes.cast(_capsule_destructor, ctypes.c_void_p))
                t = _torch_from_dlpack(capsule)
                out[name] = t.clone() if self._copy else t
            else:
                view = _TensorView()
                _check(self._lib.dsc_batch_field(batch, f, ctypes.byref(view)))
                np_dtype = np.dtype(_NP_DTYPES[dtype])
                if self._copy or not view.bytes:
                    buf = (ctypes.c_uint8 * view.bytes).from_address(view.data) if view.bytes \
                        else bytearray()
                    a = np.frombuffer(buf, dtype=np_dtype).reshape((n,) + shape).copy()
                else:
                    if ref is None:  # one reference per batch, shared by its arrays
                        ref = _Hold(self, batch.value)
                    a = np.asarray(_HostArray(ref, view.data, (n,) + shape, np_dtype))
                out[name] = a
        if self._want_indices:
            idx = self._lib.dsc_batch_indices(batch)
            index = np.ctypeslib.as_array(idx, shape=(n,)).copy()
            if self._output == "torch":  # torch has no uint64 (DataLoader cannot convert it)
                import torch
                index = torch.from_numpy(index.astype(np.int64))
            out["__index__"] = index
        return out

    # -- epochs and resume --
    def set_epoch(self, epoch):
        """Starts `epoch` from its first batch (a no-op when already there)."""
        _check(self._lib.dsc_loader_set_epoch(self._h(), epoch), self._h())

    def state_dict(self):
        """{"dscache_state": "<hex>"}: a plain dict of strings (torch.save / torch.load with
        weights_only=True keep it as is) holding the epoch and where it stands (local order: steps done at each world size this
        epoch; global: the global position), the same on every rank and resumable on any world
        size; loading it into a loader with another seed, shuffle, shuffle_window or order raises
        BadState instead of resuming into another order."""
        buf = ctypes.create_string_buffer(192)
        n = _check(self._lib.dsc_loader_state_save(self._h(), buf, 192))
        return {"dscache_state": buf.raw[:n].hex()}

    def load_state_dict(self, state):
        """Resumes from state_dict()'s dict (also the older {"dscache_state": bytes} form)."""
        try:
            data = state["dscache_state"]
        except (TypeError, KeyError):
            raise BadState(-4024, "not a dscache state dict (no 'dscache_state' key)",
                           "DSC_EBADSTATE") from None
        if isinstance(data, str):
            try:
                data = bytes.fromhex(data)
            except ValueError:
                raise BadState(-4024, "dscache_state is not a hex string", "DSC_EBADSTATE") \
                    from None
        data = bytes(data)
        buf = ctypes.create_string_buffer(data, len(data))
        _check(self._lib.dsc_loader_state_load(self._h(), buf, len(data)), self._h())

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
        assists (chunk decodes and collations done by next() while it waited) and
        epoch_wire_bytes (wire bytes fetched for the last completed epoch: each chunk counts for
        the epoch of the step that first needed it).

        The verdict (docs/diagnosis.md): bottleneck names what limits the job over the last
        5-10 s ("none", "fetch", "server", "decode", "collate", "h2d", "cache", "inflight", or
        "unknown" before enough is measured), with bottleneck_server (the slow server's
        HOST:PORT), evidence (the figures used) and suggestion (the change that would help);
        verdict_seconds and verdict_stall_fraction describe its window; stall_waits maps what
        next() waited on (plan, queued, budget, network, decode, collate) to seconds.
        Transport: rdma_connections and tcp_connections (server
        connections open now over RDMA READ, and over TCP after a fallback under transport
        auto), rdma_bytes, rdma_fallbacks and rdma_errors."""
        s = _Stats()
        s.struct_size = ctypes.sizeof(_Stats)
        _check(self._lib.dsc_loader_stats(self._h(), ctypes.byref(s)))
        out = {}
        for name, _ in _STAT_FIELDS:
            if name == "struct_size":
                continue
            value = getattr(s, name)
            if name == "bottleneck":
                value = BOTTLENECKS[value] if 0 <= value < len(BOTTLENECKS) else "unknown"
            elif name == "stall_waits":
                value = dict(zip(STALL_WAITS, list(value)))
            elif isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            out[name] = value
        return out

    def metrics_text(self):
        """The stats in Prometheus text format."""
        need = _check(self._lib.dsc_loader_metrics_text(self._h(), None, 0))
        buf = ctypes.create_string_buffer(need + 1)
        _check(self._lib.dsc_loader_metrics_text(self._h(), buf, need + 1))
        return buf.value.decode()


# A batch owns its slot until its last array / tensor is freed (see docs/python.md): batches
# may be kept past the next one, zero-copy.
batches_outlive_next = True

_load()  # at import: a missing library is reported here, with every place tried
