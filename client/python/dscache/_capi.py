"""dscache C ABI: ctypes declarations of client/include/dscache.h, the library search and
load, and the error check every call goes through."""

import ctypes
import ctypes.util
import os
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from ._errors import _error

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
        ("field_options", ctypes.c_void_p),
        ("field_option_count", ctypes.c_uint32),
        ("ignore_rank_env", ctypes.c_int),
        ("epochs", ctypes.c_uint64),
        ("order_ahead", ctypes.c_uint32),
        ("sources", ctypes.c_void_p),
        ("n_sources", ctypes.c_uint32),
        ("exhausted", ctypes.c_int),
    ]


class _SourceOptions(ctypes.Structure):  # dsc_source_options_t
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("dataset", ctypes.c_char_p),
        ("weight", ctypes.c_double),
        ("servers", ctypes.c_char_p),
        ("auth_file", ctypes.c_char_p),
        ("replicas", ctypes.c_uint32),
        ("fallback_path", ctypes.c_char_p),
        ("shuffle_window", ctypes.c_uint32),
        ("repeat", ctypes.c_double),
    ]


class _MixtureBatch(ctypes.Structure):  # dsc_mixture_batch_t
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("step", ctypes.c_uint64),
        ("samples", ctypes.c_uint32),
        ("source", ctypes.c_void_p),
        ("indices", ctypes.c_void_p),
        ("source_epoch", ctypes.c_void_p),
        ("epoch", ctypes.c_uint64),
    ]


class _MixtureInfo(ctypes.Structure):  # dsc_mixture_info_t
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("sources", ctypes.c_uint32),
        ("rank", ctypes.c_uint32),
        ("world_size", ctypes.c_uint32),
        ("epoch", ctypes.c_uint64),
        ("step", ctypes.c_uint64),
        ("stall_seconds", ctypes.c_double),
        ("starving_source", ctypes.c_int32),
    ]


class _FieldOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("name", ctypes.c_char_p),
        ("max_bytes", ctypes.c_uint64),
        ("pad", ctypes.c_int),
        ("pad_value", ctypes.c_double),
        ("max_len", ctypes.c_uint64),
        ("image", ctypes.c_int),
        ("image_height", ctypes.c_uint32),
        ("image_width", ctypes.c_uint32),
        ("image_crop", ctypes.c_int),
        ("image_scale", ctypes.c_double * 2),
        ("image_ratio", ctypes.c_double * 2),
        ("image_flip", ctypes.c_int),
        ("image_layout", ctypes.c_int),
        ("on_decode_error", ctypes.c_int),
        ("image_background", ctypes.c_int),
        ("image_background_rgb", ctypes.c_uint8 * 3),
    ]


_MAX_DIMS = 8

_WRITER_PROGRESS_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64,
                                       ctypes.c_uint64)


class _WriterOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("path", ctypes.c_char_p),
        ("name", ctypes.c_char_p),
        ("fields", ctypes.c_char_p),
        ("compress", ctypes.c_char_p),
        ("level", ctypes.c_int),
        ("shard_bytes", ctypes.c_uint64),
        ("chunk_bytes", ctypes.c_uint32),
        ("threads", ctypes.c_uint32),
        ("meta_json", ctypes.c_char_p),
        ("progress_fn", _WRITER_PROGRESS_FN),
        ("progress_ctx", ctypes.c_void_p),
        ("log_fn", _LOG_FN),
        ("log_ctx", ctypes.c_void_p),
        ("log_level", ctypes.c_int),
        ("replace", ctypes.c_int),
    ]


class _WriterValue(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("bytes", ctypes.c_uint64)]


class _WriterColumn(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("bytes", ctypes.c_uint64),
                ("offsets", ctypes.c_void_p)]


class _WriterStats(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("samples", ctypes.c_uint64),
        ("shards", ctypes.c_uint32),
        ("chunks", ctypes.c_uint64),
        ("raw_bytes", ctypes.c_uint64),
        ("stored_bytes", ctypes.c_uint64),
        ("file_bytes", ctypes.c_uint64),
        ("seconds", ctypes.c_double),
    ]


class _FieldInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * 64),
        ("dtype", ctypes.c_int),
        ("ndim", ctypes.c_uint32),
        ("shape", ctypes.c_int64 * _MAX_DIMS),
        ("sample_bytes", ctypes.c_uint64),
    ]


def _field_specs(count: Callable[[Any], int], field: Callable[[Any, int, Any], int],
                 handle: Any) -> List[Tuple[str, int, Tuple[Any, ...]]]:
    """[(name, dtype, shape)] of a loader's or reader's fields, through its count and field
    calls (dsc_loader_field_count/dsc_loader_field, or the reader's); None for a variable
    dimension."""
    specs = []
    for f in range(count(handle)):
        info = _FieldInfo()
        _check(field(handle, f, ctypes.byref(info)))
        specs.append((info.name.decode(), info.dtype,
                      tuple(None if info.shape[d] < 0 else info.shape[d]
                            for d in range(info.ndim))))
    return specs


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


# dsc_field_view_t.kind
_FIELD_FIXED, _FIELD_VALUES, _FIELD_PADDED = 0, 1, 2
# dsc_batch_dlpack_part parts
_PART_VALUES, _PART_OFFSETS, _PART_LENGTHS = 0, 1, 2


class _FieldView(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("kind", ctypes.c_int),
        ("values", _TensorView),
        ("offsets", ctypes.c_void_p),
        ("lengths", ctypes.c_void_p),
        ("rows", ctypes.c_int64),
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
    ("truncated_samples", ctypes.c_uint64),
    ("decode_errors", ctypes.c_uint64),
    ("image_seconds", ctypes.c_double),
    ("hedges", ctypes.c_uint64),
    ("hedges_won", ctypes.c_uint64),
    ("hedge_bytes", ctypes.c_uint64),
    ("hedge_wasted_bytes", ctypes.c_uint64),
    ("hedges_denied", ctypes.c_uint64),
    ("slow_marks", ctypes.c_uint64),
    ("slow_servers", ctypes.c_uint64),
    ("stalls_excused", ctypes.c_uint64),
]

# dscache_base.h dsc_bottleneck_t, in order (the numbers are on the wire: append only).
BOTTLENECKS = ("unknown", "none", "fetch", "server", "decode", "collate", "h2d", "cache",
               "inflight", "storage")
# dsc_stats_t.stall_waits, in order.
STALL_WAITS = ("plan", "queued", "budget", "network", "decode", "collate")


class _Stats(ctypes.Structure):
    _fields_ = _STAT_FIELDS


class _PackOptions(ctypes.Structure):  # dsc_pack_options_t
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("field", ctypes.c_char_p),
        ("length", ctypes.c_uint32),
        ("rows", ctypes.c_uint32),
        ("cut", ctypes.c_int),
        ("ahead", ctypes.c_uint32),
        ("on_caller_thread", ctypes.c_int),
    ]


class _PackedBatch(ctypes.Structure):  # dsc_packed_batch_t
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("epoch", ctypes.c_uint64),
        ("step", ctypes.c_uint64),
        ("rows", ctypes.c_uint32),
        ("length", ctypes.c_uint32),
        ("dtype", ctypes.c_int),
        ("tokens", ctypes.c_void_p),
        ("position_ids", ctypes.c_void_p),
        ("document_ids", ctypes.c_void_p),
        ("cu_seqlens", ctypes.c_void_p),
        ("segments", ctypes.c_uint32),
        ("segment_index", ctypes.c_void_p),
        ("segment_start", ctypes.c_void_p),
        ("tokens_used", ctypes.c_uint64),
        ("segment_source", ctypes.c_void_p),
    ]


_PACK_STAT_FIELDS = [
    ("struct_size", ctypes.c_size_t),
    ("batches", ctypes.c_uint64),
    ("rows", ctypes.c_uint64),
    ("slots", ctypes.c_uint64),
    ("tokens", ctypes.c_uint64),
    ("documents", ctypes.c_uint64),
    ("split_documents", ctypes.c_uint64),
    ("cut_documents", ctypes.c_uint64),
    ("cut_tokens", ctypes.c_uint64),
    ("efficiency", ctypes.c_double),
    ("pack_seconds", ctypes.c_double),
    ("wait_seconds", ctypes.c_double),
]


class _PackStats(ctypes.Structure):  # dsc_pack_stats_t
    _fields_ = _PACK_STAT_FIELDS


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


def _candidates() -> Iterator[Tuple[str, str]]:
    """(description, path or soname) in search order; see the module docstring."""
    here = os.path.dirname(os.path.abspath(__file__))
    yield "bundled", os.path.join(here, "libdscache.so")
    try:
        # written by `cmake --install` next to the installed package (absent in the source tree)
        from . import _install  # type: ignore[attr-defined]
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


def _open_library() -> Tuple[ctypes.CDLL, str]:
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


_lib: Any = None  # the ctypes.CDLL, its functions declared
library_path: Optional[str] = None


def _load() -> Any:
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
        "dsc_loader_options_fill": (ip, [ctypes.POINTER(_Options), ctypes.c_size_t]),
        "dsc_loader_options_init2": (ip, [ctypes.POINTER(_Options), ctypes.c_size_t]),
        "dsc_batch_retain": (ip, [vp]),
        "dsc_loader_last_error": (ip, [vp, ctypes.c_char_p, ctypes.c_size_t]),
        "dsc_loader_create": (ip, [ctypes.POINTER(_Options), ctypes.POINTER(vp)]),
        "dsc_loader_destroy": (None, [vp]),
        "dsc_batch_release": (None, [vp]),
        "dsc_loader_set_epoch": (ip, [vp, u64]),
        # indices as a plain address (a numpy uint64 array's)
        "dsc_loader_push_order": (ip, [vp, vp, ctypes.c_size_t, ip]),
        "dsc_loader_order_room": (ip, [vp]),
        "dsc_loader_len": (u64, [vp]),
        "dsc_loader_dataset_samples": (u64, [vp]),
        "dsc_loader_state_save": (ip, [vp, vp, ctypes.c_size_t]),
        "dsc_loader_state_load": (ip, [vp, vp, ctypes.c_size_t]),
        "dsc_loader_field_count": (u32, [vp]),
        "dsc_loader_meta": (ctypes.c_char_p, [vp]),
        "dsc_loader_field": (ip, [vp, u32, ctypes.POINTER(_FieldInfo)]),
        "dsc_loader_set_stream": (ip, [vp, vp]),
        "dsc_batch_step": (u64, [vp]),
        "dsc_batch_indices": (ctypes.POINTER(ctypes.c_uint64), [vp]),
        "dsc_batch_field_view": (ip, [vp, u32, ctypes.POINTER(_FieldView)]),
        # Pointers as plain addresses: next() passes the same ones for every batch.
        "dsc_loader_next_views": (ip, [vp, vp, ip, vp, u32]),
        "dsc_batch_dlpack_part": (ip, [vp, u32, ctypes.c_int,
                                       ctypes.POINTER(ctypes.POINTER(_DLManagedTensor))]),
        "dsc_field_options_init": (ip, [ctypes.POINTER(_FieldOptions), ctypes.c_size_t]),
        "dsc_loader_stats": (ip, [vp, ctypes.POINTER(_Stats)]),
        "dsc_loader_metrics_text": (ip, [vp, ctypes.c_char_p, ctypes.c_size_t]),
        "dsc_source_options_init": (ip, [ctypes.POINTER(_SourceOptions), ctypes.c_size_t]),
        "dsc_mixture_create": (ip, [ctypes.POINTER(_Options), vp, u32, vp, u32,
                                    ctypes.POINTER(vp)]),
        "dsc_mixture_create_packed": (ip, [ctypes.POINTER(_Options), vp, u32,
                                           ctypes.POINTER(_PackOptions), ctypes.POINTER(vp)]),
        "dsc_mixture_packed": (ip, [vp, ctypes.POINTER(_PackedBatch)]),
        "dsc_mixture_destroy": (None, [vp]),
        "dsc_loader_mixture": (vp, [vp]),
        "dsc_packer_state_load_world": (ip, [vp, vp, vp, u32]),
        "dsc_mixture_next": (ip, [vp, ctypes.POINTER(_MixtureBatch)]),
        "dsc_mixture_field_view": (ip, [vp, u32, vp]),
        "dsc_mixture_field_count": (u32, [vp]),
        "dsc_mixture_field": (ip, [vp, u32, ctypes.POINTER(_FieldInfo)]),
        "dsc_mixture_source_batch": (u32, [vp, u32]),
        "dsc_mixture_source_stats": (ip, [vp, u32, ctypes.POINTER(u64), ctypes.POINTER(_Stats)]),
        "dsc_mixture_info": (ip, [vp, ctypes.POINTER(_MixtureInfo)]),
        "dsc_mixture_last_error": (ip, [vp, ctypes.c_char_p, ctypes.c_size_t]),
        "dsc_mixture_state_save": (ip, [vp, vp, ctypes.c_size_t]),
        "dsc_mixture_state_load": (ip, [vp, vp, ctypes.c_size_t]),
        "dsc_mixture_state_load_world": (ip, [vp, vp, vp, u32]),
        "dsc_pack_options_init": (ip, [ctypes.POINTER(_PackOptions), ctypes.c_size_t]),
        "dsc_packer_create": (ip, [vp, ctypes.POINTER(_PackOptions), ctypes.POINTER(vp)]),
        "dsc_packer_destroy": (None, [vp]),
        "dsc_packer_next": (ip, [vp, ctypes.POINTER(_PackedBatch)]),
        "dsc_packer_next_into": (ip, [vp, ctypes.POINTER(_PackedBatch), vp, vp, vp, vp, vp,
                                      vp]),
        "dsc_packer_next_held": (ip, [vp, ctypes.POINTER(_PackedBatch), ctypes.POINTER(vp)]),
        "dsc_packer_release": (None, [vp]),
        "dsc_packer_set_epoch": (ip, [vp, u64]),
        "dsc_packer_state_save": (ip, [vp, vp, ctypes.c_size_t]),
        "dsc_packer_state_load": (ip, [vp, vp, ctypes.c_size_t]),
        "dsc_packer_stats": (ip, [vp, ctypes.POINTER(_PackStats)]),
        "dsc_writer_options_init": (ip, [ctypes.POINTER(_WriterOptions), ctypes.c_size_t]),
        "dsc_writer_create": (ip, [ctypes.POINTER(_WriterOptions), ctypes.POINTER(vp)]),
        "dsc_writer_add": (ip, [vp, ctypes.POINTER(_WriterValue), u32]),
        "dsc_writer_add_columns": (ip, [vp, ctypes.POINTER(_WriterColumn), u32, u64]),
        "dsc_writer_last_error": (ip, [vp, ctypes.c_char_p, ctypes.c_size_t]),
        "dsc_writer_finish": (ip, [vp, ctypes.POINTER(_WriterStats)]),
        "dsc_writer_abort": (None, [vp]),
        "dsc_field_spec_parse": (ip, [ctypes.c_char_p, ctypes.POINTER(_FieldInfo),
                                      ctypes.c_char_p, ctypes.c_size_t]),
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


def _last_error(handle: Any) -> str:
    """The library's account of the last failure (handle None: this thread's last create)."""
    lib = _load()
    buf = ctypes.create_string_buffer(1024)
    lib.dsc_loader_last_error(handle, buf, len(buf))
    return buf.value.decode(errors="replace")


def _check(rc: int, handle: Any = False) -> int:
    """rc, or raises its error; handle (a loader handle, or None for create) adds the library's
    detail (each server tried and why it failed) to the message."""
    if rc >= 0:
        return rc
    lib = _load()
    msg = lib.dsc_strerror(rc).decode()
    name = lib.dsc_err_name(rc).decode()
    if handle is not False:
        detail = _last_error(handle)
        if detail.startswith("loader failed: "):
            detail = detail[len("loader failed: "):]
        if detail and (name in detail or detail.startswith(msg)):
            msg = detail  # the library's account already says what and which code
        elif detail:
            msg = msg + ": " + detail
    raise _error(rc, msg, name)


def _stats_dict(s: "_Stats") -> Dict[str, Any]:
    """A dsc_stats_t as the dict stats() returns: the bottleneck and stall waits by name, strings
    decoded (struct_size left out)."""
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
