"""dscache.MapDataset: map-style (random) access to a dataset by sample index, over the C reader
(dsc_reader_*): ds[i] is one sample, ds[[i, j, ...]] and ds.__getitems__(indices) one batch
collated in C, zero-copy."""

import atexit
import collections
import ctypes
import logging
import operator
import os
import threading
import weakref
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Tuple, Union

from ._capi import (_FieldInfo, _FieldView, _Options, _Stats, _STAT_FIELDS, _TensorView, _check,
                    _field_specs, _load)
from ._errors import _error
from ._logbridge import _c_log_level, _on_log, _sink_ids, _sinks, _sinks_lock
from ._types import Batch as _BatchDict, Servers, Stats
from .loader import Image, Loader, _field_options

_log = logging.getLogger("dscache")
_live: "weakref.WeakSet[_Reader]" = weakref.WeakSet()
_DEFAULT_BATCH = 256
_ERANGE = -34  # DSC_ERANGE is -ERANGE


@atexit.register
def _close_live_readers() -> None:
    for reader in list(_live):
        try:
            reader._destroy()
        except Exception:
            pass


class _CollatedMarker:
    """What Batch()[0] gives: torch's collate (registered by dscache.torch) sees a batch that is
    collated already and hands it on as it is."""
    __slots__ = ()

    def __repr__(self) -> str:
        return ("<dscache batch collated already: register dscache.torch (import it) so that "
                "torch's default_collate passes it on>")


_MARKER = _CollatedMarker()


class Batch(Dict[str, Any]):
    """A batch from MapDataset: a dict of field name -> array [B, ...] (numpy, or torch tensors
    with output="torch"). It is what torch's DataLoader gets from __getitems__: its default
    collate (with dscache.torch imported) passes it on without copying (batch[0], which torch's
    collate reads first, is a marker for that)."""

    def __missing__(self, key: Any) -> Any:
        if key == 0 and not isinstance(key, bool):
            import sys
            if "torch" in sys.modules:
                from . import torch as _t  # noqa: F401  (registers the marker's collate)
            return _MARKER
        raise KeyError(key)


def _reader_sig(lib: Any) -> None:
    """Declares the reader's functions (libdscache built with dsc_reader_*)."""
    if getattr(lib, "_dsc_reader_sig", False):
        return
    vp, ip, u32, u64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_uint64
    sig = {
        "dsc_reader_create": (ip, [ctypes.POINTER(_Options), ctypes.POINTER(vp)]),
        "dsc_reader_destroy": (None, [vp]),
        "dsc_reader_len": (u64, [vp]),
        "dsc_reader_get": (ip, [vp, vp, ctypes.c_size_t, ctypes.POINTER(vp)]),
        "dsc_reader_get_views": (ip, [vp, vp, ctypes.c_size_t, vp, vp, u32]),
        "dsc_reader_set_epoch": (ip, [vp, u64]),
        "dsc_reader_field_count": (u32, [vp]),
        "dsc_reader_field": (ip, [vp, u32, ctypes.POINTER(_FieldInfo)]),
        "dsc_reader_meta": (ctypes.c_char_p, [vp]),
        "dsc_reader_stats": (ip, [vp, ctypes.POINTER(_Stats)]),
        "dsc_reader_last_error": (ip, [vp, ctypes.c_char_p, ctypes.c_size_t]),
    }
    for name, (res, args) in sig.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise ImportError("dscache: libdscache lacks %s (an older library?)" % name) from None
        fn.restype = res
        fn.argtypes = args
    lib._dsc_reader_sig = True


def _reader_error(lib: Any, rc: int, handle: Optional[ctypes.c_void_p]) -> Exception:
    buf = ctypes.create_string_buffer(1024)
    lib.dsc_reader_last_error(handle, buf, len(buf))
    detail = buf.value.decode(errors="replace")
    if detail.startswith("loader failed: "):
        detail = detail[len("loader failed: "):]
    msg = lib.dsc_strerror(rc).decode()
    name = lib.dsc_err_name(rc).decode()
    if detail:
        msg = detail if (name in detail or "reader:" in detail) else msg + ": " + detail
    return _error(rc, msg, name)


class _Reader:
    """One process's dsc_reader_t and what converting its batches needs. Converting reuses the
    Loader's code (the same views, the same arrays); _Hold objects keep a batch, and the reader,
    alive while an array of it lives."""

    # Loader's methods, typed loosely: a _Reader has what they use of a Loader.
    _convert_views: Any = Loader._convert_views
    _convert_var: Any = Loader._convert_var
    _tensor: Any = Loader._tensor

    def __init__(self, opts_fn: Callable[[Any, int, int], Tuple[Any, Any]], output: str,
                 copy: bool, want_indices: bool, max_batch: int) -> None:
        lib = _load()
        _reader_sig(lib)
        self._lib = lib
        self._handle: Optional[ctypes.c_void_p] = None
        self._output = output
        self._copy = copy
        self._want_indices = want_indices
        self._device = -1
        self._holds = 0
        self._close_pending = False
        self._hold_lock = threading.Lock()
        self._call_lock = threading.Lock()
        self._fast = None
        self._messages: Optional[Deque[str]] = None
        with _sinks_lock:
            self._sink_id = next(_sink_ids)
            _sinks[self._sink_id] = self._messages = collections.deque(maxlen=8)
        opts, keep = opts_fn(lib, max_batch, self._sink_id)
        handle = ctypes.c_void_p()
        rc = lib.dsc_reader_create(ctypes.byref(opts), ctypes.byref(handle))
        del keep
        if rc < 0:
            self._drop_sink()
            raise _reader_error(lib, rc, None)
        self._handle = handle
        self._pid = os.getpid()
        self.max_batch = max_batch
        _live.add(self)
        self._fields = _field_specs(lib.dsc_reader_field_count, lib.dsc_reader_field, handle)
        self.samples = int(lib.dsc_reader_len(handle))
        self._prepare()

    def _prepare(self) -> None:
        import numpy as np
        from ._capi import _NP_DTYPES
        count = len(self._fields)
        self._views = (_FieldView * max(1, count))()
        for v in self._views:
            v.struct_size = ctypes.sizeof(_FieldView)
        self._view_count = count
        self._batch = ctypes.c_void_p()
        self._batch_addr = ctypes.addressof(self._batch)
        self._views_addr = ctypes.addressof(self._views)
        self._np = np
        self._torch: Any = None
        if self._output == "torch":
            import torch
            self._torch = torch
        self._retain = 0 if self._copy else 1
        plan: List[Tuple[Any, ...]] = []
        for name, dtype, shape in self._fields:
            var = bool(shape) and shape[0] is None
            np_dtype = np.dtype(_NP_DTYPES[dtype])
            via_numpy = dtype not in (3, 5)
            item = np_dtype.itemsize
            for d in shape if not var else ():
                item *= d
            plan.append((name, np_dtype, shape, var, dtype == 9, via_numpy, item))
        self._plan = plan
        self._words = memoryview(self._views).cast("B").cast("Q")
        self._data_word = (_FieldView.values.offset + _TensorView.data.offset) // 8
        self._view_words = ctypes.sizeof(_FieldView) // 8
        self._array_types: Dict[Tuple[int, int], Any] = {}
        self._get_views = self._lib.dsc_reader_get_views

    def get(self, indices: Any) -> _BatchDict:
        """The batch dict of indices: a C-contiguous uint64 numpy array of indices in range (at
        most max_batch of them)."""
        n = len(indices)
        # One request at a time: the views and the batch handle are this reader's scratch.
        with self._call_lock:
            h = self._handle
            if not h or self._close_pending:
                raise ValueError("MapDataset is closed")
            # The address from __array_interface__: ndarray.ctypes costs tens of microseconds.
            rc = self._get_views(h, indices.__array_interface__["data"][0], n,
                                 self._batch_addr, self._views_addr, self._view_count)
            if rc < 0:
                raise _reader_error(self._lib, rc, h)
            out = self._convert_views(rc)
            if self._copy:
                self._lib.dsc_batch_release(self._batch)
        return out

    def set_epoch(self, epoch: int) -> None:
        _check(self._lib.dsc_reader_set_epoch(self._handle, int(epoch)))

    def stats(self) -> Stats:
        s = _Stats()
        s.struct_size = ctypes.sizeof(_Stats)
        _check(self._lib.dsc_reader_stats(self._handle, ctypes.byref(s)))
        out: Stats = {}
        for name, _ in _STAT_FIELDS:
            if name in ("struct_size", "stall_waits", "bottleneck", "bottleneck_server",
                        "evidence", "suggestion", "verdict_seconds", "verdict_stall_fraction"):
                continue
            out[name] = getattr(s, name)
        return out

    # -- lifetime (the _Hold protocol of loader.py) --
    def _drop_sink(self) -> None:
        with _sinks_lock:
            _sinks.pop(self._sink_id, None)

    def close(self) -> None:
        if self._handle:
            with self._hold_lock:
                self._close_pending = True
                if self._holds > 0:
                    return  # the last array freed destroys it
            self._destroy()

    def _destroy(self) -> None:
        self._close_pending = True
        handle, self._handle = self._handle, None
        if handle:
            # A forked child has the handle but not the threads: only its creator destroys it.
            if os.getpid() == self._pid:
                self._lib.dsc_reader_destroy(handle)
            self._drop_sink()

    def _unhold(self) -> None:
        with self._hold_lock:
            self._holds -= 1
            last = self._holds == 0 and self._close_pending
        if last:
            self._destroy()

    def _fast_last(self) -> None:
        pass


_INT_ONLY = {int}


def _index_array(indices: Any, n: int) -> Any:
    """Many indices as a uint64 array for the reader, checked as _as_index checks one (in numpy:
    a batch of 256 costs microseconds, not one Python call per index)."""
    import numpy as np
    if isinstance(indices, np.ndarray):
        a = indices
    elif isinstance(indices, list) and set(map(type, indices)) == _INT_ONLY:
        # What samplers give (a list of ints): 15x faster than np.asarray's type inference (the
        # type check in C, not a generator: a tenth of the batch's Python time at 256 indices).
        a = np.fromiter(indices, np.int64, len(indices))
    elif hasattr(indices, "numpy") and hasattr(indices, "dtype"):  # a torch tensor
        a = indices.detach().cpu().numpy()
    else:
        a = np.asarray(indices if isinstance(indices, (list, tuple)) else list(indices))
    if a.ndim != 1:
        raise TypeError("MapDataset indices must be a flat sequence of integers (an array of "
                        "shape %s given)" % (a.shape,))
    if a.size == 0:
        raise ValueError("MapDataset: an empty list of indices gives no batch")
    if a.dtype.kind not in "iu":
        # Not all integers: name the first culprit as one index would.
        for i in (indices.tolist() if hasattr(indices, "tolist") else indices):
            _as_index(i, n)
        raise TypeError("MapDataset indices must be integers, not %s" % a.dtype)
    b = a.astype(np.int64, copy=False)
    neg = b < 0
    if neg.any():
        b = np.where(neg, b + n, b)
    bad = (b < 0) | (b >= n)
    if bad.any():
        _as_index(int(a[int(np.argmax(bad))]), n)  # raises, naming the index and the length
    return np.ascontiguousarray(b).view(np.uint64)


def _as_index(i: Any, n: int) -> int:
    """An index as a non-negative int: Python semantics for negative ones (-1 is the last
    sample); IndexError naming the index and the length past the end; TypeError for what is not
    an integer (bool included)."""
    if isinstance(i, bool):
        raise TypeError("MapDataset indices must be integers, not bool")
    try:
        k = operator.index(i)
    except TypeError:
        raise TypeError("MapDataset indices must be integers (or a sequence of integers), not %s"
                        % type(i).__name__) from None
    if k < 0:
        k += n
    if not 0 <= k < n:
        raise IndexError("MapDataset index %d out of range: the dataset has %d samples "
                         "(valid: %d .. %d, or -%d .. -1)" % (operator.index(i), n, 0, n - 1, n))
    return k


class MapDataset:
    """Map-style access to a dscache dataset: len(ds) samples, ds[i] one sample (a dict of
    field name -> array of the field's per-sample shape), ds[[i, j, ...]], ds[a:b] and
    ds.__getitems__(indices) one batch (a dscache.mapds.Batch dict of [B, ...] arrays, collated
    in C as the loader collates, zero-copy views of the batch that keep it alive).

    Takes the Loader's connection and decode arguments: servers, dataset, seed (keys the image
    crops and flips with the epoch and the sample index, as the loader's), connections,
    fallback_path, inflight_bytes, server_inflight_bytes, cache_bytes (decoded chunk bytes kept
    for later requests, least recently used out first; default 256 MiB), timeout_ms, replicas,
    auth_file, transport, job, report_seconds, max_held_bytes, pad, max_len, max_bytes, decode,
    on_decode_error, copy (arrays copied out of the batch), indices (batches carry "__index__").
    output: "numpy" or "torch" (dscache.torch.MapDataset defaults to "torch"). batch_size: the
    most indices one request names (default 256; a larger request reopens the reader with room
    for it, once, losing its cache: a WARN says so). getitems: False hides __getitems__ from
    torch's DataLoader (its fetcher then calls ds[i] per sample and collate_fn gets the list of
    samples a custom collate function expects).

    Variable-length fields: a sample's field holds its rows; a batch holds values
    [total_rows, ...] and f + "_offsets" (or padded [B, L, ...] and f + "_lengths" with pad=).

    Indices: ints, numpy or torch integers; negative ones count from the end (Python
    semantics); past the end raises IndexError naming the index and the length; a non-integer
    raises TypeError. Duplicates are allowed.

    Processes: the C reader (threads and sockets) is opened on first use in each process and
    never crosses a fork: a torch DataLoader worker opens its own (pickling the dataset for
    spawned workers carries only the arguments). set_epoch(e) sets the epoch image crops are
    keyed by (call it before the epoch's DataLoader iterator starts its workers)."""

    _EXCLUSIVE = ("shuffle", "shuffle_window", "rank", "world_size", "drop_last", "order",
                  "epochs", "device", "prefetch", "decode_threads")

    def __init__(self, servers: Servers = None, dataset: Optional[str] = None, seed: int = 0,
                 batch_size: int = _DEFAULT_BATCH, output: str = "numpy", copy: bool = False,
                 indices: bool = False, getitems: bool = True, connections: int = 2,
                 fallback_path: Optional[str] = None, inflight_bytes: Optional[int] = None,
                 cache_bytes: Optional[int] = None, timeout_ms: int = 5000,
                 replicas: Optional[int] = None, server_inflight_bytes: Optional[int] = None,
                 max_held_bytes: Optional[int] = None,
                 auth_file: Union[str, "os.PathLike[str]", None] = None, job: Optional[str] = None,
                 report_seconds: Optional[float] = None, transport: Optional[str] = None,
                 pad: Optional[Dict[str, float]] = None, max_len: Optional[Dict[str, int]] = None,
                 max_bytes: Optional[Dict[str, int]] = None,
                 decode: Optional[Dict[str, Image]] = None, on_decode_error: str = "raise",
                 epoch: int = 0, **kwargs: Any) -> None:
        for key in kwargs:
            if key in self._EXCLUSIVE:
                raise ValueError(
                    "MapDataset(%s=...): a map-style dataset reads the indices it is given, in "
                    "the order given: shuffle and split ranks with the sampler (e.g. "
                    "DistributedSampler(ds, shuffle=True)); for the loader's own order use "
                    "dscache.Loader" % key)
            raise TypeError("MapDataset() got an unexpected keyword argument %r" % key)
        if dataset is None:
            raise ValueError("dataset is required")
        if output not in ("numpy", "torch"):
            raise ValueError("output must be 'numpy' or 'torch'")
        if transport is not None and transport not in ("tcp", "rdma", "auto"):
            raise ValueError("transport must be 'tcp', 'rdma' or 'auto'")
        if int(batch_size) < 1:
            raise ValueError("batch_size must be >= 1")
        if isinstance(servers, (list, tuple)):
            servers = ",".join(servers)
        self.dataset = dataset
        self.output = output
        self._args: Dict[str, Any]
        self._args = dict(servers=servers, dataset=dataset, seed=int(seed),
                          connections=connections, fallback_path=fallback_path,
                          inflight_bytes=inflight_bytes, cache_bytes=cache_bytes,
                          timeout_ms=timeout_ms, replicas=replicas,
                          server_inflight_bytes=server_inflight_bytes,
                          max_held_bytes=max_held_bytes, auth_file=auth_file, job=job,
                          report_seconds=report_seconds, transport=transport, pad=pad,
                          max_len=max_len, max_bytes=max_bytes, decode=decode,
                          on_decode_error=on_decode_error)
        _field_options(_load(), pad, max_len, max_bytes, decode, on_decode_error)  # checks
        self._copy = bool(copy)
        self._want_indices = bool(indices)
        self._max_batch = int(batch_size)
        self._epoch = int(epoch)
        self._reader: Optional[_Reader] = None
        self._pid: Optional[int] = None
        self._len = 0
        import numpy as np
        self._np = np
        if not getitems:
            # torch's fetcher checks it: per-sample ds[i] instead
            setattr(self, "__getitems__", None)
        self._open()  # errors (unknown dataset, no server) here, in the creating process

    # -- the per-process reader --
    def _options(self, lib: Any, max_batch: int, sink_id: int) -> Tuple[Any, Any]:
        a = self._args
        opts = _Options()
        _check(lib.dsc_loader_options_fill(ctypes.byref(opts), ctypes.sizeof(opts)))
        opts.servers = a["servers"].encode() if a["servers"] else None
        opts.dataset = a["dataset"].encode()
        opts.batch_size = max_batch
        opts.seed = a["seed"]
        opts.connections = a["connections"]
        opts.timeout_ms = a["timeout_ms"]
        opts.replicas = a["replicas"] or 0
        opts.fallback_path = a["fallback_path"].encode() if a["fallback_path"] else None
        opts.log_fn = _on_log
        opts.log_ctx = sink_id
        opts.log_level = _c_log_level()
        for key in ("inflight_bytes", "cache_bytes", "server_inflight_bytes", "max_held_bytes"):
            if a[key]:
                setattr(opts, key, int(a[key]))
        opts.auth_file = os.fsencode(a["auth_file"]) if a["auth_file"] else None
        if a["job"]:
            opts.job_name = str(a["job"]).encode()
        if a["report_seconds"] is not None:
            rs = a["report_seconds"]
            opts.report_seconds = float(rs) if rs > 0 else -1.0
        opts.transport = a["transport"].encode() if a["transport"] else None
        field_opts = _field_options(lib, a["pad"], a["max_len"], a["max_bytes"], a["decode"],
                                    a["on_decode_error"])
        if field_opts is not None:
            opts.field_options = ctypes.cast(field_opts, ctypes.c_void_p)
            opts.field_option_count = len(field_opts)
        return opts, field_opts

    def _open(self, max_batch: Optional[int] = None) -> _Reader:
        max_batch = max(max_batch or 0, self._max_batch)
        r = _Reader(self._options, self.output, self._copy, self._want_indices, max_batch)
        if self._epoch:
            r.set_epoch(self._epoch)
        self._reader, self._pid = r, os.getpid()
        self._max_batch = max_batch
        self._len = r.samples
        return r

    def _r(self, n: int = 1) -> _Reader:
        r = self._reader
        if r is None or self._pid != os.getpid():
            # First use in this process (a DataLoader worker): never the parent's reader.
            self._reader = None
            return self._open(n)
        if n > r.max_batch:
            _log.warning("dscache.MapDataset: a request of %d indices is larger than batch_size "
                         "%d: reopening the reader with room for %d (its cache is dropped; "
                         "pass batch_size=%d to avoid this)", n, r.max_batch, n, n)
            r.close()
            self._reader = None
            return self._open(n)
        return r

    def __getstate__(self) -> Dict[str, Any]:
        # Pickled for spawned DataLoader workers: the arguments only, never the reader.
        state = self.__dict__.copy()
        state["_reader"] = None
        state["_pid"] = None
        state.pop("_np", None)
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        import numpy as np
        self.__dict__.update(state)
        self._np = np

    # -- access --
    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[_BatchDict]:
        for i in range(self._len):
            yield self[i]

    def __getitem__(self, key: Any) -> _BatchDict:
        if isinstance(key, slice):
            return self.__getitems__(range(*key.indices(self._len)))
        if isinstance(key, (list, tuple)) or (hasattr(key, "ndim") and key.ndim
                                              and hasattr(key, "__len__")):
            return self.__getitems__(key)
        k = _as_index(key, self._len)
        batch = self._r(1).get(self._np.array((k,), dtype=self._np.uint64))
        return self._sample(batch)

    def _sample(self, batch: _BatchDict) -> _BatchDict:
        """Sample 0 of a one-sample batch: each field without the batch dimension (a variable
        field: its rows)."""
        out: _BatchDict = {}
        for name, _, shape in self._r()._fields:
            v = batch[name]
            if shape and shape[0] is None:
                off = batch.get(name + "_offsets")
                if off is not None:
                    out[name] = v[int(off[0]):int(off[1])]
                else:
                    out[name] = v[0][:int(batch[name + "_lengths"][0])]
            else:
                out[name] = v[0]
        if "__index__" in batch:
            out["__index__"] = batch["__index__"][0]
        return out

    def __getitems__(self, indices: Any) -> Batch:
        """One batch of the samples indices (in that order, duplicates allowed), collated in C:
        a Batch dict of [B, ...] arrays (or tensors), zero-copy views of the batch."""
        idx = _index_array(indices, self._len)
        return Batch(self._r(len(idx)).get(idx))

    # -- epochs, information --
    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch image crops and flips are keyed by (as the loader's: the same sample
        and epoch decode to the same pixels in both). Call it before iterating a DataLoader
        with workers: they take the dataset as it is when their iterator starts."""
        self._epoch = int(epoch)
        if self._reader is not None and self._pid == os.getpid():
            self._reader.set_epoch(self._epoch)

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def fields(self) -> List[Tuple[str, str, Tuple[Optional[int], ...]]]:
        from ._capi import _NP_DTYPES
        return [(n, _NP_DTYPES[d] if d != 9 else "bfloat16", s) for n, d, s in self._r()._fields]

    def stats(self) -> Stats:
        """This process's reader counters (dsc_stats_t): batches, samples, requests (GETs and MGETs sent),
        wire_bytes, refetches (chunks fetched again after the cache dropped them, this epoch),
        checksum_failures, failovers, decode/collate/image_seconds, stall_seconds (time inside
        requests)..."""
        return self._r().stats()

    def close(self) -> None:
        """Closes this process's reader (its memory goes once no array of it is alive)."""
        r, self._reader = self._reader, None
        if r is not None and self._pid == os.getpid():
            r.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return "dscache.MapDataset(dataset=%r, samples=%s, output=%r)" % (
            self.dataset, self._len, self.output)


__all__ = ["MapDataset", "Batch"]
