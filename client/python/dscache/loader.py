"""dscache.Loader: the iterable over one rank's batches (options, iteration, epochs, state,
stats)."""

import atexit
import collections
import ctypes
import json
import logging
import os
import sys
import threading
import weakref
from typing import (TYPE_CHECKING, Any, Callable, cast, Deque, Dict, Iterable, List, Optional,
                    Sequence, Tuple, Union)

from . import _fast
from ._arrays import (_Hold, _HostArray, _PyCapsule_New, _capsule_destructor,
                      _dlpack_track, _torch_from_dlpack)
from ._capi import (_EOF, _FIELD_PADDED, _FIELD_VALUES, _NP_DTYPES,
                    _PART_LENGTHS, _PART_OFFSETS, _PART_VALUES, _DLManagedTensor,
                    _FieldInfo, _FieldOptions, _FieldView, _Options, _PACK_STAT_FIELDS,
                    _PackedBatch, _PackOptions, _PackStats, _Stats, _TensorView, _check,
                    _field_specs, _load, _stats_dict)
from ._errors import BadState, Error, InvalidOption
from ._logbridge import _c_log_level, _on_log, _sink_ids, _sinks, _sinks_lock
from ._order import OrderFeed
from ._ranks import _parse_device, resolve_rank
from ._types import Batch, Device, Servers, State, Stats

if TYPE_CHECKING:
    from .mixture import Source

_live: "weakref.WeakSet[Any]" = weakref.WeakSet()  # Loader and Mixture objects


@atexit.register
def _close_live_loaders() -> None:
    # Stop the library's threads before the interpreter goes: a log callback into a finalising
    # interpreter must not happen.
    for loader in list(_live):
        try:
            loader._destroy()  # even with batches alive: the process is ending
        except Exception:
            pass


class Loader:
    """Iterable over the batches of one rank, epoch after epoch.

    sources=[dscache.Source(...), ...] (instead of dataset) makes a mixture of datasets
    (dscache.mixture.Mixture, docs/mixtures.md).

    servers: "HOST:PORT,..." or a list of "HOST:PORT" (also "dns:NAME:PORT", "file:PATH").
    rank, world_size: None (default) takes them from torch.distributed when initialised, else
    from RANK / WORLD_SIZE, else 0 / 1 (see resolve_rank); explicit values that disagree with
    those raise InvalidOption naming both, unless ignore_rank_env=True. device: "cpu" (host batches),
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
    first). epochs: the epochs the job runs (None or 0: no limit); nothing past the last one
    is fetched (a one-epoch job receives its share once, not the next epoch's first steps too),
    and iterating past it yields nothing.

    The caller's order (docs/order.md#the-callers-order): order=sampler, any iterable of sample
    indices or of index batches (torch's DistributedSampler, a BatchSampler, a Megatron-style
    batch sampler, a list, a numpy array), makes the loader hand out exactly that order: each
    pass over it is one epoch (iter(order) at the epoch's first batch, so call
    sampler.set_epoch(e) before iterating, as with a DataLoader). Index batches are the batches
    (1 .. batch_size indices each; drop_last does not apply); a flat iterable is cut into
    batch_size batches, the short last one dropped with drop_last=True. The loader pulls the
    order up to order_ahead batches ahead of the batch handed out (default: the batches whose
    bytes fill cache_bytes, at least those filling inflight_bytes; at most 1024) on the thread
    that iterates, and fetches and hints its servers along it. The sampler splits the ranks:
    rank, world_size, shuffle, shuffle_window and epochs are refused with it (InvalidOption),
    as is anything it yields that is not an index (TypeError naming it and its position), an
    index past the dataset (IndexError with the index and the length) or a negative one
    (IndexError: not taken Python-style). state_dict() holds the position in the caller's order
    (its "epoch", "batches" and "samples"); load_state_dict() into a loader given the same
    sampler in the same state (sampler.set_epoch(state["epoch"])) skips what was consumed,
    checking that it is the same order (BadState otherwise).

    Variable-length fields (docs/loader.md#variable-length-fields): by default batch[f] holds
    the batch's values concatenated ([total_rows, ...]) and batch[f + "_offsets"] int64 B + 1
    row offsets. pad={f: value} gives batch[f] as [B, L, ...] padded with value to the
    batch's longest sample and batch[f + "_lengths"] int64 [B]; max_len={f: L} (padded fields
    only) truncates longer samples (counted in stats()["truncated_samples"]). max_bytes={f: N}
    sets the bytes of f one batch may hold (default from the dataset's size statistics); a
    batch needing more raises Error DSC_ETOOLARGE naming the sample, never truncating.

    Image decode (docs/loader.md#image-decode): decode={f: dscache.Image(size=(224, 224),
    crop="random_resized", flip=True)} decodes a u8[] field of JPEG/PNG/WebP bytes in the
    decode threads into batch[f] uint8 [B, 3, H, W] ([B, H, W, 3] with layout="hwc"); the crop
    and flip are a pure function of (seed, epoch, sample index). An image that does not decode
    raises DecodeError naming dataset, shard and sample, or with on_decode_error="fill" is a
    zero image counted in stats()["decode_errors"].

    Packing (docs/packing.md): pack={f: L} lays the documents of the 1-D variable-length field f
    end to end, in the epoch's order, into rows of L tokens: batch[f] is [rows, L] (rows:
    pack_rows, default batch_size, fewer at the epoch's end), with batch["position_ids"] and
    batch["document_ids"] (int32 [rows, L]: 0 at each segment's start; the segment, -1 for
    padding), batch["cu_seqlens"] (int32 [segments + 1] over the rows flattened; each padding
    run at a row's end is a segment of its own), batch["segment_index"] and
    batch["segment_start"] (int64 [segments]: the document's dataset index, -1 for padding, and
    the offset in it of the segment's first token). A document longer than the room left
    continues in the next row; pack_split=False starts it in a new row and cuts it at L tokens
    (counted in stats()["pack"]["cut_tokens"]). Other fields are dropped. The rows are packed on
    the packer's own C thread, pack_ahead batches ahead (default 2; 0: on the iterating
    thread). state_dict() resumes mid-document. len() is not known ahead (TypeError).
    """

    def __new__(cls, *args: Any, sources: Optional[Sequence["Source"]] = None,
                **kw: Any) -> Any:
        if sources is not None:  # a blend of datasets: its own class (mixture.py)
            from .mixture import Mixture
            if args or kw.get("dataset") is not None:
                raise InvalidOption(-22, "give either dataset= or sources=, not both (and "
                                    "servers= as a keyword)", "DSC_EINVAL")
            kw.pop("dataset", None)
            return Mixture(sources, **kw)
        return super().__new__(cls)

    def __init__(self, servers: Servers = None, dataset: Optional[str] = None,
                 batch_size: int = 32, seed: int = 0, rank: Optional[int] = None,
                 world_size: Optional[int] = None, shuffle: Optional[bool] = None,
                 shuffle_window: Optional[int] = None, drop_last: bool = False,
                 prefetch: int = 4, decode_threads: int = 2, connections: int = 2,
                 device: Device = "cpu", output: str = "numpy",
                 fallback_path: Optional[str] = None, inflight_bytes: Optional[int] = None,
                 cache_bytes: Optional[int] = None, timeout_ms: int = 5000,
                 replicas: Optional[int] = None, copy: bool = False, indices: bool = False,
                 stats_log_seconds: float = 0.0, server_inflight_bytes: Optional[int] = None,
                 assist: bool = True, transform: Optional[Callable[[Batch], Any]] = None,
                 max_held_bytes: Optional[int] = None,
                 auth_file: Union[str, "os.PathLike[str]", None] = None,
                 order: Union[str, Iterable[Any]] = "local", job: Optional[str] = None,
                 report_seconds: Optional[float] = None, transport: Optional[str] = None,
                 pad: Optional[Dict[str, float]] = None, max_len: Optional[Dict[str, int]] = None,
                 max_bytes: Optional[Dict[str, int]] = None,
                 decode: Optional[Dict[str, "Image"]] = None, on_decode_error: str = "raise",
                 ignore_rank_env: bool = False, epochs: Optional[int] = None,
                 order_ahead: Optional[int] = None, pack: Optional[Dict[str, int]] = None,
                 pack_split: bool = True, pack_rows: Optional[int] = None,
                 pack_ahead: Optional[int] = None,
                 sources: Optional[Sequence["Source"]] = None,
                 _mixture: Any = None) -> None:
        lib = _load()
        self._lib = lib
        self._handle = None
        self._sink_id = 0
        self._fast = self._packer = self._pack_fast = None
        caller = not isinstance(order, str)
        if not caller and order not in ("local", "global"):
            raise ValueError("order must be 'local', 'global' or a sampler (an iterable of "
                             "sample indices or of index batches)")
        if caller:
            _check_caller_options(order, rank, world_size, shuffle, shuffle_window, epochs)
        if shuffle is None:
            shuffle = True
        if output not in ("numpy", "torch"):
            raise ValueError("output must be 'numpy' or 'torch'")
        dev = _parse_device(device)
        if dev >= 0 and output != "torch":
            raise ValueError("device batches need output='torch'")
        if isinstance(servers, (list, tuple)):
            servers = ",".join(servers)
        if dataset is None and _mixture is None:
            raise ValueError("dataset is required")
        if transform is not None and not callable(transform):
            raise TypeError("transform must be callable")
        if caller:  # the sampler's ranks
            rank, world_size, self.rank_source = 0, 1, "order"
        else:
            rank, world_size, self.rank_source = resolve_rank(rank, world_size, ignore_rank_env)
        self.rank, self.world_size = rank, world_size
        self.dataset = dataset
        self.batch_size = batch_size
        self._output = output
        self._copy = copy
        self._want_indices = indices
        self._device = dev
        self._transform = transform
        self._messages: Deque[str] = collections.deque(maxlen=8)
        with _sinks_lock:
            self._sink_id = next(_sink_ids)
            _sinks[self._sink_id] = self._messages

        opts = _Options()
        _check(lib.dsc_loader_options_fill(ctypes.byref(opts), ctypes.sizeof(opts)))
        opts.servers = servers.encode() if servers else None
        opts.dataset = dataset.encode() if dataset is not None else None
        if _mixture is not None:  # mixture.py's sources: the library composes into the slots
            opts.sources, opts.n_sources, opts.exhausted = _mixture
        # Packed: batch_size is rows; the loader reads documents in batches of at least 256, so
        # that a packed batch takes a few loader batches, not one per row.
        opts.batch_size = max(batch_size, 256) if pack is not None else batch_size
        opts.seed = seed
        opts.rank = rank
        opts.world_size = world_size
        opts.shuffle = 1 if shuffle else 0
        if shuffle_window:  # None: sized from the dataset (docs/order.md)
            opts.shuffle_window = shuffle_window
        opts.order = 2 if caller else 0 if order == "local" else 1
        if order_ahead:
            opts.order_ahead = int(order_ahead)
        opts.drop_last = 1 if drop_last and not caller else 0  # the caller's: dropped here
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
        field_opts = _field_options(lib, pad, max_len, max_bytes, decode, on_decode_error)
        if field_opts is not None:
            opts.field_options = ctypes.cast(field_opts, ctypes.c_void_p)
            opts.field_option_count = len(field_opts)
        opts.ignore_rank_env = 1  # resolve_rank checked them, against torch.distributed too
        if epochs is not None:
            if int(epochs) < 0:
                raise ValueError("epochs must be >= 0 (0 or None: no limit)")
            opts.epochs = int(epochs)
        handle = ctypes.c_void_p()
        try:
            _check(lib.dsc_loader_create(ctypes.byref(opts), ctypes.byref(handle)), None)
        except Error:
            self._drop_sink()
            raise
        self._handle = handle
        self._pid = os.getpid()
        _live.add(self)
        self._fields = _field_specs(lib.dsc_loader_field_count, lib.dsc_loader_field, handle)
        self._feed = None
        if caller:
            self._feed = OrderFeed(order, batch_size, bool(drop_last),
                                   int(lib.dsc_loader_dataset_samples(handle)), lib)
        self._packer = None
        if pack is not None:
            try:
                self._packer = _make_packer(lib, handle, pack, pack_split,
                                            batch_size if pack_rows is None else pack_rows,
                                            caller, pack_ahead)
            except Exception:
                self._destroy()
                raise
            self._packed = _PackedBatch()
            self._packed.struct_size = ctypes.sizeof(_PackedBatch)
            self._pack_field = next(iter(pack))
            import numpy as np
            rows = batch_size if pack_rows is None else pack_rows
            length = next(iter(pack.values()))
            self._pack_shape = (rows, length)
            dtype = dict((n, d) for n, d, _ in self._fields)[self._pack_field]
            self._pack_dtype = np.dtype(_NP_DTYPES[dtype])
            # The per-segment arrays, sized for the most a batch can need: reused (their used
            # part is copied out, a few entries per document).
            # (tokens, position_ids, document_ids) sets, reused
            self._pack_pool: List[Tuple[Any, Any, Any]] = []
            # With the packer's thread: views over the buffers it packed into (no copy), held
            # until the last array over them goes (dsc_packer_next_held / dsc_packer_release).
            self._pack_held = pack_ahead != 0
            # Held around dsc_packer_destroy and every dsc_packer_release (a release may come
            # after destroy, never during it). Reentrant: a held batch freed by the collector on
            # the thread that holds it (outside the destroy call itself) cannot deadlock.
            self._pack_lock = threading.RLock()
            self._pack_bf16 = dtype == 9
            self._pack_cu = np.empty(rows * length + rows + 1, dtype=np.int32)
            self._pack_si = np.empty(rows * length + rows, dtype=np.int64)
            self._pack_ss = np.empty(rows * length + rows, dtype=np.int64)
        self._batch = ctypes.c_void_p()
        self._prepare_next()
        if self._packer is not None and self._pack_held and _mixture is None:
            # (over a mixture the batches add segment_source: the ctypes path makes it)
            self._prepare_pack_fast()
        self._holds = 0           # batch references alive in Python (_Hold objects)
        self._close_pending = False
        self._hold_lock = threading.Lock()

    # -- lifetime --
    def _drop_sink(self) -> None:
        with _sinks_lock:
            _sinks.pop(self._sink_id, None)

    def close(self) -> None:
        """Stops the loader. Its memory is freed once no batch of it is alive any more (arrays
        and tensors handed out stay valid until freed)."""
        if self._handle:
            with self._hold_lock:
                self._close_pending = True
                busy = self._holds > 0
                if self._fast is not None and self._fast.defer_close():
                    busy = True
                if busy:
                    return  # the last batch freed destroys it
            self._destroy()

    def _destroy(self) -> None:
        self._close_pending = True
        handle, self._handle = self._handle, None
        if handle:
            packer, self._packer = getattr(self, "_packer", None), None
            if self._pack_fast is not None:
                self._pack_fast.detach()  # next() raises; held batches freed later are freed
            if packer:
                with self._pack_lock:  # not while a held batch is given back
                    self._lib.dsc_packer_destroy(packer)
            if self._fast is not None:
                self._fast.detach()  # batches freed later give nothing back
            # A forked child (e.g. a DataLoader worker) has the handle but not the threads:
            # only the creating process destroys the loader.
            if os.getpid() == self._pid:
                self._lib.dsc_loader_destroy(handle)
            self._drop_sink()

    def _unhold(self) -> None:
        with self._hold_lock:
            self._holds -= 1
        self._fast_last()

    def _fast_last(self) -> None:
        """After a batch was freed (the ctypes path's, or the compiled next()'s last one, which
        calls this): destroys the loader once close() came and no batch of either is alive."""
        with self._hold_lock:
            last = (self._holds == 0 and self._close_pending and
                    (self._fast is None or self._fast.holds == 0))
        if last:
            self._destroy()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _h(self) -> ctypes.c_void_p:
        if not self._handle or self._close_pending:
            raise ValueError("loader is closed")
        return self._handle

    # -- iteration --
    def __len__(self) -> int:
        """Batches this rank gets per epoch (order=sampler: from len(sampler))."""
        if self._feed is not None:
            return self._feed.batches_per_epoch()
        if self._packer is not None:
            raise TypeError("a packed loader's batches per epoch depend on its documents' "
                            "lengths: len() is not known ahead")
        return int(self._lib.dsc_loader_len(self._h()))

    def __iter__(self) -> "Loader":
        return self

    def _prepare_next(self) -> None:
        """What next() reuses for every batch: one dsc_field_view_t per field (filled by
        dsc_loader_next_views), the numpy dtype and shape of each field, and how torch gets it."""
        import numpy as np
        count = len(self._fields)
        self._views = (_FieldView * max(1, count))()
        for v in self._views:
            v.struct_size = ctypes.sizeof(_FieldView)
        self._view_count = count
        self._batch_addr = ctypes.addressof(self._batch)
        self._views_addr = ctypes.addressof(self._views)
        self._next_views = self._lib.dsc_loader_next_views
        self._np = np
        self._torch = None
        if self._output == "torch":
            import torch
            self._torch = torch
        # The caller's reference to the batch comes with next() (one lock): host arrays keep it.
        self._retain = 0 if (self._copy or self._device >= 0) else 1
        plan = []
        for name, dtype, shape in self._fields:
            var = bool(shape) and shape[0] is None
            np_dtype = np.dtype(_NP_DTYPES[dtype])
            # torch over the numpy array (no DLPack round trip) where torch has the dtype: bf16
            # through int16 bits; uint16 / uint32 keep DLPack, as before.
            via_numpy = self._device < 0 and dtype not in (3, 5)
            item = np_dtype.itemsize
            for d in shape if not var else ():
                item *= d
            plan.append((name, np_dtype, shape, var, dtype == 9, via_numpy, item))
        self._plan = plan
        # The views' data pointers as integers, read without a ctypes object per field.
        self._words = memoryview(self._views).cast("B").cast("Q")
        self._data_word = (_FieldView.values.offset + _TensorView.data.offset) // 8
        self._view_words = ctypes.sizeof(_FieldView) // 8
        # (field, samples): (ctypes byte array type, array shape)
        self._array_types: Dict[Tuple[int, int], Any] = {}
        # The compiled next() (dscache._fast) where every field is a fixed-size host field that
        # numpy (and torch.from_numpy) carry as is: variable-length fields, device batches,
        # bf16 / uint16 / uint32 torch tensors keep the ctypes path.
        self._fast = None
        mod = _fast.module
        if mod is not None and all(not var and (self._torch is None or (via_numpy and not bf16))
                                   for _, _, _, var, bf16, via_numpy, _ in plan):
            lib = self._lib
            assert self._handle is not None

            def addr(fn: Any) -> Optional[int]:
                return ctypes.cast(fn, ctypes.c_void_p).value
            self._fast = mod.Nexter(
                self, self._handle.value, addr(lib.dsc_loader_next_views),
                addr(lib.dsc_batch_release), addr(lib.dsc_batch_indices),
                [(name, np_dtype, np_dtype.itemsize, shape) for name, np_dtype, shape, *_ in plan],
                bool(self._retain), np.ndarray,
                self._torch.from_numpy if self._torch is not None else None,
                "__index__" if self._want_indices else None,
                # torch has no uint64 (DataLoader cannot convert it): int64, as the ctypes path
                np.dtype(np.int64 if self._torch is not None else np.uint64))

    def _prepare_pack_fast(self) -> None:
        """The compiled next() of packed batches (dscache._fast's PackNexter) with the packer's
        thread: the arrays _next_packed's held path makes, built in one C call."""
        mod = _fast.module
        if mod is None:
            return
        cls = getattr(mod, "PackNexter", None)
        if cls is None:  # a module built before packed batches had one: worth a line
            logging.getLogger("dscache").warning(
                "dscache: the compiled next() at %s predates packed batches (rebuild it): "
                "ctypes serves them", _fast.path)
            return
        np = self._np
        lib = self._lib
        assert self._packer is not None

        def addr(fn: Any) -> Optional[int]:
            return ctypes.cast(fn, ctypes.c_void_p).value
        i32, i64 = np.dtype(np.int32), np.dtype(np.int64)
        self._pack_fast = cls(
            self._packer.value, addr(lib.dsc_packer_next_held), addr(lib.dsc_packer_release),
            self._pack_lock,
            (self._pack_field, "position_ids", "document_ids", "cu_seqlens", "segment_index",
             "segment_start"),
            (self._pack_dtype, i32, i32, i32, i64, i64), self._pack_shape[1], np.ndarray,
            np.zeros)
        # numpy out, no transform: the dict as the C call made it
        self._pack_plain = self._torch is None and self._transform is None

    def __next__(self) -> Batch:
        if self._feed is not None:  # the caller's order, pushed ahead of this batch
            self._feed.top_up(self._h())
        if self._packer is not None:
            pf = self._pack_fast
            if pf is None:
                return self._next_packed()
            if self._close_pending:
                raise ValueError("loader is closed")
            out = pf.next()  # the batch's dict, or what dsc_packer_next_held returned
            if out.__class__ is int:
                if out == _EOF:
                    raise StopIteration
                _check(out, self._handle)
            return out if self._pack_plain else self._packed_out(out, self._pack_bf16)
        fast = self._fast
        if fast is not None:
            if self._close_pending:
                raise ValueError("loader is closed")
            out = fast.next()  # the batch's dict, or what dsc_loader_next_views returned
            if out.__class__ is int:
                if out == _EOF:
                    self._epoch_done()
                    raise StopIteration
                _check(out, self._handle)
            return self._transform(out) if self._transform is not None else out
        h = self._handle
        if not h or self._close_pending:
            raise ValueError("loader is closed")
        n = self._next_views(h, self._batch_addr, self._retain, self._views_addr,
                             self._view_count)
        if n < 0:
            if n == _EOF:
                self._epoch_done()
                raise StopIteration
            _check(n, h)
        out = self._convert_views(n)
        return self._transform(out) if self._transform is not None else out

    def _next_packed(self) -> Batch:
        """The next packed batch: with the packer's thread, numpy views over the buffers it
        packed the batch into (dsc_packer_next_held: no copy; never overwritten while any array
        of the batch is alive, given back when the last goes); on this thread,
        dsc_packer_next_into lays it straight into numpy arrays the batch owns."""
        np = self._np
        h = self._h()
        pb = self._packed
        rows, length = self._pack_shape
        if self._pack_held:
            hold = ctypes.c_void_p()
            rc = self._lib.dsc_packer_next_held(self._packer, ctypes.byref(pb),
                                                ctypes.byref(hold))
            if rc == _EOF:
                raise StopIteration
            _check(rc, h)
            owner = _PackHold(self._lib, hold.value, self._pack_lock)
            n, segs = int(pb.rows), int(pb.segments)
            i32, i64 = np.dtype(np.int32), np.dtype(np.int64)
            out = {self._pack_field: _pack_view(pb.tokens, self._pack_dtype, (n, length), owner),
                   "position_ids": _pack_view(pb.position_ids, i32, (n, length), owner),
                   "document_ids": _pack_view(pb.document_ids, i32, (n, length), owner),
                   "cu_seqlens": _pack_view(pb.cu_seqlens, i32, (segs + 1,), owner),
                   "segment_index": _pack_view(pb.segment_index, i64, (segs,), owner),
                   "segment_start": _pack_view(pb.segment_start, i64, (segs,), owner)}
            if pb.segment_source:  # over a mixture: each segment's source
                out["segment_source"] = _pack_view(pb.segment_source, i32, (segs,), owner)
            return self._packed_out(out, pb.dtype == 9)
        tok: Any = None
        pos: Any = None
        did: Any = None
        # Reuse a set of arrays no batch handed out holds any more (only the pool refers to
        # them): fresh arrays of this size are fresh pages, faulted in on every batch.
        for held in self._pack_pool:
            if all(sys.getrefcount(a) <= 3 for a in held):
                tok, pos, did = held
                break
        if tok is None:
            tok = np.empty((rows, length), dtype=self._pack_dtype)
            pos = np.empty((rows, length), dtype=np.int32)
            did = np.empty((rows, length), dtype=np.int32)
            if len(self._pack_pool) < 4:
                self._pack_pool.append((tok, pos, did))
        cu = self._pack_cu
        si, ss = self._pack_si, self._pack_ss
        rc = self._lib.dsc_packer_next_into(self._packer, ctypes.byref(pb), tok.ctypes.data,
                                            pos.ctypes.data, did.ctypes.data, cu.ctypes.data,
                                            si.ctypes.data, ss.ctypes.data)
        if rc == _EOF:
            raise StopIteration
        _check(rc, h)
        n, segs = pb.rows, pb.segments
        if n < rows:  # the epoch's last batch
            tok, pos, did = tok[:n], pos[:n], did[:n]
        out = {self._pack_field: tok, "position_ids": pos, "document_ids": did,
               "cu_seqlens": cu[:segs + 1].copy(), "segment_index": si[:segs].copy(),
               "segment_start": ss[:segs].copy()}
        if pb.segment_source and segs:  # over a mixture: each segment's source (a copy)
            out["segment_source"] = np.frombuffer(
                (ctypes.c_int32 * segs).from_address(pb.segment_source), dtype=np.int32).copy()
        return self._packed_out(out, pb.dtype == 9)

    def _packed_out(self, out: Dict[str, Any], bf16: bool) -> Batch:
        """A packed batch's arrays as torch tensors when asked, through the transform."""
        np = self._np
        if self._torch is not None:
            torch = self._torch
            out = {k: (torch.from_numpy(v.view(np.int16)).view(torch.bfloat16) if bf16
                       and k == self._pack_field else torch.from_numpy(v))
                   for k, v in out.items()}
        return self._transform(out) if self._transform is not None else out

    def _epoch_done(self) -> None:
        if self._feed is not None:
            self._feed.epoch_done()

    def _convert_views(self, n: int) -> Batch:
        """The batch dict from the views dsc_loader_next_views filled: numpy arrays over the slot
        sharing one _Hold (the reference next() took), torch tensors over those arrays."""
        np, torch, batch = self._np, self._torch, self._batch
        ref = _Hold(self, batch.value, retained=True) if self._retain else None
        out: Batch = {}
        views = self._views
        words, types = self._words, self._array_types
        for f, (name, np_dtype, shape, var, bf16, via_numpy, item) in enumerate(self._plan):
            if torch is not None and not via_numpy:  # device batches, uint16 / uint32: DLPack
                if var:
                    self._convert_var(batch, f, name, None, n, None, out, views[f])
                else:
                    out[name] = self._tensor(batch, f, _PART_VALUES)
                continue
            if var:
                names: Tuple[str, ...] = self._convert_var(batch, f, name, np_dtype, n, ref,
                                                           out, views[f], True)
            else:
                t = types.get((f, n))
                if t is None:
                    t = types[(f, n)] = (ctypes.c_uint8 * (n * item), (n,) + shape)
                if not item:
                    out[name] = np.zeros(t[1], dtype=np_dtype)
                else:
                    # The array's base is the ctypes bytes over the slot, which keeps the _Hold.
                    buf: Any = t[0].from_address(words[self._data_word + f * self._view_words])
                    if ref is None:
                        out[name] = np.ndarray(t[1], np_dtype, buf).copy()
                    else:
                        buf._hold = ref
                        out[name] = np.ndarray(t[1], np_dtype, buf)
                names = (name,)
            if torch is not None:
                for key in names:
                    a = out[key]
                    if bf16 and key == name:
                        out[key] = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
                    else:
                        out[key] = torch.from_numpy(a)
        if self._want_indices:
            idx = self._lib.dsc_batch_indices(batch)
            index = np.ctypeslib.as_array(idx, shape=(n,)).copy()
            if torch is not None:  # torch has no uint64 (DataLoader cannot convert it)
                index = torch.from_numpy(index.astype(np.int64))
            out["__index__"] = index
        return out

    def _tensor(self, batch: ctypes.c_void_p, f: int, part: int) -> Any:
        managed = ctypes.POINTER(_DLManagedTensor)()
        # The tensor holds a reference to the batch (its slot), dropped by its deleter.
        _check(self._lib.dsc_batch_dlpack_part(batch, f, part, ctypes.byref(managed)))
        _dlpack_track(managed, _Hold(self, None))
        capsule = _PyCapsule_New(ctypes.cast(managed, ctypes.c_void_p), b"dltensor",
                                 ctypes.cast(_capsule_destructor, ctypes.c_void_p))
        t = _torch_from_dlpack(capsule)
        return t.clone() if self._copy else t

    def _convert_var(self, batch: ctypes.c_void_p, f: int, name: str, dtype: Any, n: int,
                     ref: Optional[_Hold], out: Batch, fv: Optional[_FieldView] = None,
                     host: bool = False) -> Tuple[str, str]:
        """A variable-length field: values + offsets, or padded values + lengths (fv: its view
        when read already; host: numpy arrays even for output="torch", dtype a numpy dtype).
        Returns the two keys it set."""
        import numpy as np
        if fv is None:
            fv = _FieldView()
            fv.struct_size = ctypes.sizeof(_FieldView)
            _check(self._lib.dsc_batch_field_view(batch, f, ctypes.byref(fv)))
        if fv.kind == _FIELD_PADDED:
            aux_name, aux_part, aux_ptr, aux_len = name + "_lengths", _PART_LENGTHS, fv.lengths, n
        else:
            aux_name, aux_part, aux_ptr, aux_len = (name + "_offsets", _PART_OFFSETS, fv.offsets,
                                                    n + 1)
        if self._output == "torch" and not host:
            out[name] = self._tensor(batch, f, _PART_VALUES)
            out[aux_name] = self._tensor(batch, f, aux_part)
            return name, aux_name
        view = fv.values
        vshape = tuple(view.shape[d] for d in range(view.ndim))
        np_dtype = dtype if host else np.dtype(_NP_DTYPES[dtype])
        i64 = np.dtype(np.int64)
        if self._copy or ref is None:
            def take(ptr: int, nbytes: int, shp: Tuple[int, ...], dt: Any) -> Any:
                if not nbytes:
                    return np.zeros(shp, dtype=dt)
                buf: Any = (ctypes.c_uint8 * nbytes).from_address(ptr)
                return np.frombuffer(buf, dtype=dt).reshape(shp).copy()
            out[name] = take(view.data, view.bytes, vshape, np_dtype)
            out[aux_name] = take(aux_ptr, aux_len * 8, (aux_len,), i64)
            return name, aux_name
        out[name] = (np.asarray(_HostArray(ref, view.data, vshape, np_dtype)) if view.bytes
                     else np.zeros(vshape, dtype=np_dtype))
        out[aux_name] = np.asarray(_HostArray(ref, aux_ptr, (aux_len,), i64))
        return name, aux_name

    # -- epochs and resume --
    def set_epoch(self, epoch: int) -> None:
        """Starts `epoch` from its first batch (a no-op when already there). order=sampler: what
        was pulled from the sampler is dropped; the next batch starts a new pass over it (set the
        sampler's own epoch too: sampler.set_epoch(epoch))."""
        if self._packer is not None:
            _check(self._lib.dsc_packer_set_epoch(self._packer, epoch), self._h())
            return
        _check(self._lib.dsc_loader_set_epoch(self._h(), epoch), self._h())
        if self._feed is not None:
            self._feed.reset()

    def state_dict(self) -> State:
        """{"dscache_state": "<hex>"}: a plain dict of strings (torch.save / torch.load with
        weights_only=True keep it as is) holding the epoch and where it stands (local order: steps done at each world size this
        epoch; global: the global position), the same on every rank and resumable on any world
        size; loading it into a loader with another seed, shuffle, shuffle_window or order raises
        BadState instead of resuming into another order. order=sampler: the position in the
        caller's order, also as "epoch", "batches" and "samples" (ints) for the sampler's state
        (docs/order.md#the-callers-order)."""
        if self._packer is not None:  # the packed stream's position (pack.c)
            need = _check(self._lib.dsc_packer_state_save(self._packer, None, 0))
            buf = ctypes.create_string_buffer(need)
            n = _check(self._lib.dsc_packer_state_save(self._packer, buf, need))
            return {"dscache_pack_state": buf.raw[:n].hex()}
        buf = ctypes.create_string_buffer(192)
        n = _check(self._lib.dsc_loader_state_save(self._h(), buf, 192))
        out: State = {"dscache_state": buf.raw[:n].hex()}
        if self._feed is not None:  # state version 4 (client/lib/state.c): for the sampler
            raw = buf.raw[:n]
            for key, at in (("epoch", 8), ("batches", 16), ("samples", 24)):
                out[key] = int.from_bytes(raw[at:at + 8], "little")
        return out

    def load_state_dict(self, state: Union[State, Sequence[State]]) -> None:
        """Resumes from state_dict()'s dict (also the older {"dscache_state": bytes} form).
        A packed loader also takes a list of every old rank's state_dict() (in rank order):
        a packed stream resumed onto another world size (docs/packing.md)."""
        if self._packer is not None and isinstance(state, (list, tuple)):
            return self._load_pack_world(state)
        if isinstance(state, (list, tuple)):
            raise BadState(-4024, "a list of states is taken only by a packed loader (pack=), "
                           "to resume onto another world size", "DSC_EBADSTATE")
        key = "dscache_pack_state" if self._packer is not None else "dscache_state"
        if isinstance(state, dict) and key not in state and (
                "dscache_state" in state or "dscache_pack_state" in state):
            raise BadState(-4024, "the state is of a %s loader, this loader %s" % (
                "packed" if "dscache_pack_state" in state else "unpacked",
                "packs (pack=)" if self._packer is not None else "does not pack"),
                "DSC_EBADSTATE")
        try:
            data = cast(State, state)[key]
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
        if self._packer is not None:
            _check(self._lib.dsc_packer_state_load(self._packer, buf, len(data)), self._h())
            return
        _check(self._lib.dsc_loader_state_load(self._h(), buf, len(data)), self._h())
        if self._feed is not None:  # the next batch pulls the sampler from its start again
            self._feed.reset()

    def _load_pack_world(self, states: Sequence[State]) -> None:
        """dsc_packer_state_load_world over every old rank's packed state."""
        raw = []
        for r, st in enumerate(states):
            data = st.get("dscache_pack_state") if isinstance(st, dict) else None
            if data is None:
                raise BadState(-4024, "state of old rank %d: not a packed loader's state_dict()"
                               % r, "DSC_EBADSTATE")
            try:
                raw.append(bytes.fromhex(data) if isinstance(data, str) else bytes(data))
            except ValueError:
                raise BadState(-4024, "state of old rank %d: not a hex string" % r,
                               "DSC_EBADSTATE") from None
        if not raw:
            raise BadState(-4024, "no old rank's state given", "DSC_EBADSTATE")
        bufs = [ctypes.create_string_buffer(d, len(d)) for d in raw]
        ptrs = (ctypes.c_void_p * len(raw))(*[ctypes.addressof(b) for b in bufs])
        lens = (ctypes.c_size_t * len(raw))(*[len(d) for d in raw])
        _check(self._lib.dsc_packer_state_load_world(self._packer, ptrs, lens, len(raw)),
               self._h())

    # -- information --
    @property
    def fields(self) -> List[Tuple[str, str, Tuple[Optional[int], ...]]]:
        """[(name, dtype name, per-sample shape)]; a variable-length field's leading dimension
        is None (e.g. (None,) for i32[], (None, 80) for f32[?,80])."""
        return [(n, _NP_DTYPES[d] if d != 9 else "bfloat16", s) for n, d, s in self._fields]

    @property
    def meta(self) -> Optional[Dict[str, Any]]:
        """The dataset manifest's "meta" object (what the writer stored, e.g. {"classes": [...]}
        from an image folder) as a dict, or None when it has none."""
        text = self._lib.dsc_loader_meta(self._h())
        return json.loads(text.decode()) if text else None

    @property
    def dataset_samples(self) -> int:
        return int(self._lib.dsc_loader_dataset_samples(self._h()))

    def set_stream(self, stream: Any) -> None:
        """Orders the batches before work queued on this CUDA stream (torch.cuda.Stream or a raw
        cudaStream_t as an int)."""
        ptr = getattr(stream, "cuda_stream", stream)
        _check(self._lib.dsc_loader_set_stream(self._h(), ctypes.c_void_p(ptr)))

    def stats(self) -> Stats:
        """Counters and times (the fields of dsc_stats_t): epoch, batches, samples, bytes,
        wire_bytes, requests, retries, failovers, checksum_failures, wall/stall/compute_seconds,
        stall_fraction, network/decode/collate/h2d_seconds, placed_chunks (chunks decoded straight
        into a batch slot), refetches (chunks fetched again within an epoch: cache_bytes too
        small for the shuffle window, see the loader's WARN) and h2d_bytes (the bytes of the
        host-to-device copies timed in h2d_seconds: their ratio is the copy bandwidth) and
        assists (chunk decodes and collations done by next() while it waited) and
        epoch_wire_bytes (wire bytes fetched for the last completed epoch: each chunk counts for
        the epoch of the step that first needed it) and truncated_samples (samples of padded
        variable-length fields cut to their max_len).

        The verdict (docs/diagnosis.md): bottleneck names what limits the job over the last
        5-10 s ("none", "fetch", "server", "decode", "collate", "h2d", "cache", "inflight",
        "storage", or "unknown" before enough is measured), with bottleneck_server (the slow
        server's HOST:PORT), evidence (the figures used) and suggestion (the change that would help);
        verdict_seconds and verdict_stall_fraction describe its window; stall_waits maps what
        next() waited on (plan, queued, budget, network, decode, collate) to seconds.
        Transport: rdma_connections and tcp_connections (server
        connections open now over RDMA READ, and over TCP after a fallback under transport
        auto), rdma_bytes, rdma_fallbacks and rdma_errors. Stragglers (docs/cluster.md): hedges
        (requests of a stalled server re-issued to another owner), hedges_won, hedge_bytes,
        hedge_wasted_bytes (the late answers dropped), hedges_denied (budget spent),
        slow_marks, slow_servers (marked slow now) and stalls_excused (a stall whose server
        answered PING: reading through, not slow)."""
        s = _Stats()
        s.struct_size = ctypes.sizeof(_Stats)
        _check(self._lib.dsc_loader_stats(self._h(), ctypes.byref(s)))
        out = _stats_dict(s)
        if self._packer is not None:
            ps = _PackStats()
            ps.struct_size = ctypes.sizeof(_PackStats)
            _check(self._lib.dsc_packer_stats(self._packer, ctypes.byref(ps)))
            out["pack"] = {name: getattr(ps, name) for name, _ in _PACK_STAT_FIELDS
                           if name != "struct_size"}
        return out

    def metrics_text(self) -> str:
        """The stats in Prometheus text format."""
        need = _check(self._lib.dsc_loader_metrics_text(self._h(), None, 0))
        buf = ctypes.create_string_buffer(need + 1)
        _check(self._lib.dsc_loader_metrics_text(self._h(), buf, need + 1))
        return buf.value.decode()


class _PackHold:
    """A packed batch held in the packer's buffers (dsc_packer_next_held): given back by
    dsc_packer_release when the last array over it goes (also after the loader closed)."""

    def __init__(self, lib: Any, hold: Optional[int], lock: Any) -> None:
        self._lib, self._hold, self._lock = lib, hold, lock

    def __del__(self) -> None:
        hold, self._hold = getattr(self, "_hold", None), None
        if hold:
            with self._lock:
                self._lib.dsc_packer_release(hold)


_pack_types: Dict[int, Any] = {}  # ctypes byte-array types by size (a packed batch's few sizes)


def _pack_view(ptr: Optional[int], dtype: Any, shape: Tuple[int, ...], owner: _PackHold) -> Any:
    """A numpy array over `shape` items of dtype at ptr, keeping owner alive while it lives."""
    import numpy as np
    count = 1
    for d in shape:
        count *= d
    if not ptr or count == 0:
        return np.zeros(shape, dtype=dtype)
    size = count * dtype.itemsize
    t = _pack_types.get(size)
    if t is None:
        if len(_pack_types) > 4096:  # sizes of many row counts / lengths: start over
            _pack_types.clear()
        t = _pack_types[size] = ctypes.c_uint8 * size
    buf = t.from_address(ptr)
    buf._dsc_owner = owner
    return np.frombuffer(buf, dtype=dtype).reshape(shape)


def _make_packer(lib: Any, handle: ctypes.c_void_p, pack: Dict[str, int], split: bool,
                 rows: Optional[int], caller: bool,
                 ahead: Optional[int] = None) -> ctypes.c_void_p:
    """The packer (dsc_packer_create) for pack={field: length}; the library names what it
    refuses (a fixed-shape field, a padded one, ...)."""
    if not isinstance(pack, dict) or len(pack) != 1:
        raise TypeError("pack must be a dict of one field: {name: tokens per row}, e.g. "
                        "{'input_ids': 4096}")
    (field, length), = pack.items()
    if caller:
        raise InvalidOption(-22, "pack= does not take order=sampler (the packed rows follow the "
                            "loader's own order)", "DSC_EINVAL")
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise InvalidOption(-22, "pack[%r]: the row length must be an int >= 1, not %r"
                            % (field, length), "DSC_EINVAL")
    if rows is not None and (not isinstance(rows, int) or rows < 1):
        raise InvalidOption(-22, "pack_rows must be an int >= 1, not %r" % (rows,), "DSC_EINVAL")
    po = _PackOptions()
    _check(lib.dsc_pack_options_init(ctypes.byref(po), ctypes.sizeof(po)))
    po.field = str(field).encode()
    po.length = length
    po.rows = rows or 0
    po.cut = 0 if split else 1
    if ahead is not None:
        if isinstance(ahead, bool) or not isinstance(ahead, int) or ahead < 0:
            raise InvalidOption(-22, "pack_ahead must be an int >= 0, not %r" % (ahead,),
                                "DSC_EINVAL")
        po.ahead = ahead
        po.on_caller_thread = 1 if ahead == 0 else 0
    packer = ctypes.c_void_p()
    _check(lib.dsc_packer_create(handle, ctypes.byref(po), ctypes.byref(packer)), handle)
    return packer


def _check_caller_options(order: Any, rank: Optional[int], world_size: Optional[int],
                          shuffle: Optional[bool], shuffle_window: Optional[int],
                          epochs: Optional[int]) -> None:
    """order=sampler: the sampler owns the order and the rank split; the loader's own settings
    of either are refused rather than applied on top (or ignored)."""
    if not hasattr(order, "__iter__"):
        raise TypeError("order must be 'local', 'global' or a sampler (an iterable of sample "
                        "indices or of index batches), got %s" % type(order).__name__)
    given = [n for n, v in (("rank", rank), ("world_size", world_size)) if v is not None]
    if given:
        raise InvalidOption(
            -22, "order=%s splits the ranks itself (e.g. DistributedSampler(num_replicas=, "
            "rank=)): the loader does not split again, so %s cannot be given with it"
            % (type(order).__name__, " and ".join(given)), "DSC_EINVAL")
    given = [n for n, v in (("shuffle", shuffle), ("shuffle_window", shuffle_window))
             if v is not None]
    if given:
        raise InvalidOption(
            -22, "order=%s decides the order: the loader's own %s cannot be used with it (shuffle "
            "in the sampler, e.g. DistributedSampler(shuffle=True))"
            % (type(order).__name__, " and ".join(given)), "DSC_EINVAL")
    if epochs:
        raise InvalidOption(
            -22, "order=%s says where each epoch ends: epochs cannot be given with it (stop "
            "iterating after the last one)" % type(order).__name__, "DSC_EINVAL")


class Image:
    """Decode of a u8[] field holding JPEG, PNG or WebP bytes, in the loader's decode threads
    (Loader(decode={"image": Image(...)})): batch[field] becomes uint8 [B, 3, H, W] (layout
    "chw") or [B, H, W, 3] ("hwc"), the pixels torchvision makes with PIL images
    (docs/loader.md#image-decode). crop: "center" (torchvision's Resize(S) + CenterCrop(S)),
    "random_resized" (RandomResizedCrop with scale and ratio), "none" (resize to size); flip:
    horizontal flip with probability 1/2. background: None (default) drops a PNG's or WebP's
    alpha as torchvision's loader (PIL's convert("RGB")) does; (r, g, b) composites the image
    over that colour instead. The crop and flip of a sample are a pure function of (seed, epoch,
    sample index): identical across a resume or a world-size change, different across epochs
    (docs/order.md#image-augmentation)."""

    _CROPS = {"center": 0, "random_resized": 1, "none": 2}
    _LAYOUTS = {"chw": 0, "hwc": 1}

    def __init__(self, size: Union[int, Tuple[int, int]] = (224, 224), crop: str = "center",
                 scale: Tuple[float, float] = (0.08, 1.0),
                 ratio: Tuple[float, float] = (3 / 4, 4 / 3), flip: bool = False,
                 layout: str = "chw", background: Optional[Sequence[int]] = None) -> None:
        if isinstance(size, int):
            size = (size, size)
        self.size = (int(size[0]), int(size[1]))
        if crop not in self._CROPS:
            raise ValueError("crop must be 'center', 'random_resized' or 'none'")
        if layout not in self._LAYOUTS:
            raise ValueError("layout must be 'chw' or 'hwc'")
        self.crop, self.layout, self.flip = crop, layout, bool(flip)
        self.scale = (float(scale[0]), float(scale[1]))
        self.ratio = (float(ratio[0]), float(ratio[1]))
        if background is not None:
            try:
                bg = tuple(int(c) for c in background)
            except (TypeError, ValueError):
                bg = ()
            if len(bg) != 3 or not all(0 <= c <= 255 for c in bg):
                raise ValueError("background must be None or (r, g, b) with each in 0..255, "
                                 "not %r" % (background,))
            background = bg
        self.background = background

    def __repr__(self) -> str:
        return ("Image(size=%r, crop=%r, scale=%r, ratio=%r, flip=%r, layout=%r, background=%r)"
                % (self.size, self.crop, self.scale, self.ratio, self.flip, self.layout,
                   self.background))


def _field_options(lib: Any, pad: Optional[Dict[str, float]], max_len: Optional[Dict[str, int]],
                   max_bytes: Optional[Dict[str, int]],
                   decode: Optional[Dict[str, Image]] = None,
                   on_decode_error: str = "raise") -> Optional[Any]:
    """The dsc_field_options_t array for pad / max_len / max_bytes / decode (dicts keyed by field
    name), or None when none is given. The library checks that each names a variable-length
    field."""
    pad, max_len, max_bytes, decode = pad or {}, max_len or {}, max_bytes or {}, decode or {}
    for arg, d in (("pad", pad), ("max_len", max_len), ("max_bytes", max_bytes),
                   ("decode", decode)):
        if not isinstance(d, dict):
            raise TypeError("%s must be a dict {field name: value}" % arg)
    if on_decode_error not in ("raise", "fill"):
        raise ValueError("on_decode_error must be 'raise' or 'fill'")
    for name, spec in decode.items():
        if not isinstance(spec, Image):
            raise TypeError("decode[%r] must be a dscache.Image" % name)
        if name in pad or name in max_bytes:
            raise ValueError("decode[%r]: a decoded field takes no pad or max_bytes" % name)
    for name, length in max_len.items():
        if name not in pad:
            raise ValueError("max_len[%r]: max_len applies to padded fields; give pad={%r: "
                             "value} too" % (name, name))
        if int(length) < 1:
            raise ValueError("max_len[%r] must be >= 1" % name)
    for name, n in max_bytes.items():
        if int(n) < 1:
            raise ValueError("max_bytes[%r] must be >= 1" % name)
    names = list(dict.fromkeys(list(pad) + list(max_bytes) + list(decode)))
    if not names:
        return None
    arr = (_FieldOptions * len(names))()
    for i, name in enumerate(names):
        _check(lib.dsc_field_options_init(ctypes.byref(arr[i]), ctypes.sizeof(_FieldOptions)))
        arr[i].name = str(name).encode()
        if name in pad:
            arr[i].pad = 1
            arr[i].pad_value = float(pad[name])
            arr[i].max_len = int(max_len.get(name, 0))
        arr[i].max_bytes = int(max_bytes.get(name, 0))
        if name in decode:
            im = decode[name]
            arr[i].image = 1
            arr[i].image_height, arr[i].image_width = im.size
            arr[i].image_crop = Image._CROPS[im.crop]
            arr[i].image_scale[0], arr[i].image_scale[1] = im.scale
            arr[i].image_ratio[0], arr[i].image_ratio[1] = im.ratio
            arr[i].image_flip = 1 if im.flip else 0
            arr[i].image_layout = Image._LAYOUTS[im.layout]
            if im.background is not None:
                arr[i].image_background = 1
                arr[i].image_background_rgb[:] = im.background
            arr[i].on_decode_error = 1 if on_decode_error == "fill" else 0
    return arr
