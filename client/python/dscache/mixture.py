"""dscache.Source and the mixture loader (Loader(sources=[...])): a weighted blend of datasets,
one dscache loader per source, composed into batches by a deterministic quota interleave in the
library (client/lib/mixture.c, dsc_mixture_*; docs/mixtures.md)."""

import ctypes
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union, cast

import numpy as np

from ._capi import (_EOF, _NP_DTYPES, _FieldView,
                    _MixtureBatch, _MixtureInfo, _Options, _PackedBatch, _PackOptions,
                    _SourceOptions, _Stats, _check, _error, _field_specs, _load, _stats_dict)
from ._errors import BadState, Error, InvalidOption
from ._logbridge import _c_log_level, _on_log, _sink_ids, _sinks, _sinks_lock
from ._ranks import resolve_rank
from ._types import Batch, Servers, State, Stats

_MIX_STATE_VERSION = 1


class Source:
    """One dataset of a mixture: its name as served (dataset), its weight (> 0: its share of
    every batch is weight / sum of weights, to within one sample per step), and optionally its
    own servers, auth_file, replicas, fallback_path and shuffle_window (default: the mixture's).
    repeat (> 0): passes over the source per source-epoch: 2.0 delivers each sample twice (two
    of its loader's epochs), 0.5 the first half of each rank's share of one loader epoch (the
    rest of that loader epoch is skipped; the next source-epoch starts the next loader epoch, in
    another order), 1.5 one pass and then half of the next; the fraction is
    round(fraction * ceil(samples / world_size)) samples, at least 1, on every rank."""

    def __init__(self, dataset: str, weight: float = 1.0, servers: Servers = None,
                 repeat: float = 1.0, auth_file: Union[str, "os.PathLike[str]", None] = None,
                 replicas: Optional[int] = None, fallback_path: Optional[str] = None,
                 shuffle_window: Optional[int] = None) -> None:
        if not isinstance(dataset, str) or not dataset:
            raise InvalidOption(-22, "Source: dataset must be a non-empty name, not %r"
                                % (dataset,), "DSC_EINVAL")
        try:
            weight = float(weight)
        except (TypeError, ValueError):
            raise InvalidOption(-22, "Source %r: weight must be a number, not %r"
                                % (dataset, weight), "DSC_EINVAL") from None
        if not weight > 0 or weight != weight or weight == float("inf"):
            raise InvalidOption(-22, "Source %r: weight must be > 0 and finite, not %r"
                                % (dataset, weight), "DSC_EINVAL")
        try:
            repeat = float(repeat)
        except (TypeError, ValueError):
            repeat = float("nan")
        if not repeat > 0 or repeat == float("inf"):
            raise InvalidOption(-22, "Source %r: repeat must be > 0 and finite, not %r"
                                % (dataset, repeat), "DSC_EINVAL")
        self.repeat = repeat
        self.dataset, self.weight, self.servers = dataset, weight, servers
        self.auth_file, self.replicas, self.fallback_path = auth_file, replicas, fallback_path
        self.shuffle_window = shuffle_window

    def __repr__(self) -> str:
        return "Source(%r, weight=%r, repeat=%r)" % (self.dataset, self.weight, self.repeat)


# Options a mixture passes to every source's loader (as dscache.Loader takes them).
_COMMON: Dict[str, Any]
_COMMON = {"shuffle": None, "shuffle_window": None, "drop_last": False, "prefetch": 4,
           "decode_threads": 2, "connections": 2, "timeout_ms": 5000, "replicas": None,
           "inflight_bytes": None, "cache_bytes": None, "server_inflight_bytes": None,
           "stats_log_seconds": 0.0, "assist": True, "auth_file": None, "max_held_bytes": None,
           "job": None, "report_seconds": None, "transport": None, "epochs": None,
           "ignore_rank_env": False, "order": "local", "device": "cpu"}


class Mixture:
    """The loader over a blend of sources (made by dscache.Loader(sources=[...])), composed in
    the library (dsc_mixture_*): one loader per source, batches by the quota rule. Iterating
    yields batches of batch_size samples (fewer only where exhausted="stop" ends the epoch or a
    source has no epoch left), each a dict of the needed fields (variable-length ones as values
    + name_offsets), batch["__index__"] (each sample's index in its own dataset),
    batch["source_epoch"] and batch["source"] (int32 [B], the index of each sample's source in
    `sources`) unless source_field=None. pack={field: L}: each source's documents packed into
    rows of L (its own packer in the library), rows blended by the quota rule: batch[field],
    position_ids, document_ids [B, L], cu_seqlens, segment_index, segment_start over the batch,
    source and source_epoch per row; pack_sources="mixed": the blended documents packed into
    rows that mix sources (one packer over the composed stream), with batch["segment_source"]
    per segment instead. See docs/mixtures.md."""

    def __init__(self, sources: Sequence[Source], servers: Servers = None, batch_size: int = 32,
                 seed: int = 0, exhausted: str = "wrap", fields: Optional[Sequence[str]] = None,
                 source_field: Optional[str] = "source", rank: Optional[int] = None,
                 world_size: Optional[int] = None, output: str = "numpy",
                 transform: Optional[Callable[[Batch], Any]] = None,
                 pack: Optional[Dict[str, int]] = None, pack_split: bool = True,
                 pack_ahead: Optional[int] = None, pack_sources: str = "separate",
                 **kw: Any) -> None:
        self._handle: Optional[ctypes.c_void_p] = None
        self._sink_id = 0
        if not isinstance(sources, (list, tuple)) or not sources:
            raise InvalidOption(-22, "sources must be a non-empty list of dscache.Source",
                                "DSC_EINVAL")
        for s in sources:
            if not isinstance(s, Source):
                raise TypeError("sources must hold dscache.Source objects, not %s"
                                % type(s).__name__)
        if exhausted not in ("wrap", "stop"):
            raise ValueError("exhausted must be 'wrap' or 'stop'")
        if pack_sources not in ("separate", "mixed"):
            raise InvalidOption(-22, "pack_sources must be 'separate' (rows stay per source) or "
                                "'mixed' (rows mix sources), not %r" % (pack_sources,),
                                "DSC_EINVAL")
        self._mixed = pack is not None and pack_sources == "mixed"
        for bad in kw:
            if bad not in _COMMON:
                raise InvalidOption(-22, "%s= is not supported with sources= (a mixture takes "
                                    "values + offsets of host batches)" % bad, "DSC_EINVAL")
        opt = dict(_COMMON)
        opt.update(kw)
        if opt["order"] not in (None, "local") or opt["device"] not in (None, "cpu", -1):
            raise InvalidOption(-22, "%s= is not supported with sources= yet"
                                % ("order" if opt["order"] not in (None, "local") else "device"),
                                "DSC_EINVAL")
        if output not in ("numpy", "torch"):
            raise ValueError("output must be 'numpy' or 'torch'")
        if transform is not None and not callable(transform):
            raise TypeError("transform must be callable")
        self._torch: Any = None
        if output == "torch":
            import torch
            self._torch = torch
        self._transform = transform
        names = [s.dataset for s in sources]
        if len(set(names)) != len(names):
            raise InvalidOption(-22, "sources name a dataset twice: %s" % names, "DSC_EINVAL")
        self.sources = list(sources)
        self.weights = [s.weight for s in sources]
        self.batch_size, self.seed, self.exhausted = int(batch_size), int(seed), exhausted
        self._source_field = source_field
        rank, world_size, self.rank_source = resolve_rank(rank, world_size,
                                                          opt["ignore_rank_env"])
        self.rank, self.world_size = rank, world_size
        lib = self._lib = _load()
        self._messages = __import__("collections").deque(maxlen=8)
        with _sinks_lock:
            self._sink_id = next(_sink_ids)
            _sinks[self._sink_id] = self._messages
        if isinstance(servers, (list, tuple)):
            servers = ",".join(servers)
        o = _Options()
        _check(lib.dsc_loader_options_fill(ctypes.byref(o), ctypes.sizeof(o)))
        keep: List[bytes] = []  # the bytes the structs point at, alive through create

        def b(text: Union[str, bytes, "os.PathLike[str]", None]) -> Optional[bytes]:
            if text is None:
                return None
            v = os.fsencode(text) if not isinstance(text, bytes) else text
            keep.append(v)
            return v
        o.servers = b(servers)
        o.batch_size = self.batch_size
        o.seed = self.seed
        o.rank, o.world_size = rank, world_size
        o.shuffle = 0 if opt["shuffle"] is False else 1
        if opt["shuffle_window"]:
            o.shuffle_window = int(opt["shuffle_window"])
        o.drop_last = 1 if opt["drop_last"] else 0
        o.prefetch_batches = int(opt["prefetch"])
        o.decode_threads = int(opt["decode_threads"])
        o.connections = int(opt["connections"])
        o.device = -1
        o.timeout_ms = int(opt["timeout_ms"])
        o.replicas = int(opt["replicas"] or 0)
        o.log_fn = _on_log
        o.log_ctx = self._sink_id
        o.log_level = _c_log_level()
        o.stats_log_seconds = float(opt["stats_log_seconds"])
        for name in ("inflight_bytes", "cache_bytes", "server_inflight_bytes", "max_held_bytes"):
            if opt[name]:
                setattr(o, name, int(opt[name]))
        o.no_assist = 0 if opt["assist"] else 1
        o.auth_file = b(opt["auth_file"])
        if opt["job"]:
            o.job_name = b(str(opt["job"]))
        if opt["report_seconds"] is not None:
            o.report_seconds = float(opt["report_seconds"]) if opt["report_seconds"] > 0 else -1.0
        if opt["transport"] is not None and opt["transport"] not in ("tcp", "rdma", "auto"):
            raise ValueError("transport must be 'tcp', 'rdma' or 'auto'")
        o.transport = b(opt["transport"])
        o.ignore_rank_env = 1  # resolve_rank checked them
        if opt["epochs"] is not None:
            if int(opt["epochs"]) < 0:
                raise ValueError("epochs must be >= 0 (0 or None: no limit)")
            o.epochs = int(opt["epochs"])
        o.exhausted = 1 if exhausted == "stop" else 0
        srcs = (_SourceOptions * len(sources))()
        for k, s in enumerate(sources):
            so = srcs[k]
            _check(lib.dsc_source_options_init(ctypes.byref(so), ctypes.sizeof(so)))
            so.dataset = b(s.dataset)
            so.weight = s.weight
            so.repeat = s.repeat
            so.servers = b(s.servers if not isinstance(s.servers, (list, tuple))
                           else ",".join(s.servers))
            so.auth_file = b(s.auth_file)
            so.replicas = int(s.replicas or 0)
            so.fallback_path = b(s.fallback_path)
            so.shuffle_window = int(s.shuffle_window or 0)
        names_arr = None
        po = None
        self._pack: Optional[str] = None
        if pack is not None:
            if not isinstance(pack, dict) or len(pack) != 1:
                raise TypeError("pack must be a dict of one field: {name: tokens per row}")
            (pfield, length), = pack.items()
            if isinstance(length, bool) or not isinstance(length, int) or length < 1:
                raise InvalidOption(-22, "pack[%r]: the row length must be an int >= 1, not %r"
                                    % (pfield, length), "DSC_EINVAL")
            for src in sources if not self._mixed else ():
                if src.repeat != int(src.repeat):
                    raise InvalidOption(-22, "Source %r: a fractional repeat (%r) is not "
                                        "supported with pack= (a pass's rows are not known "
                                        "ahead)" % (src.dataset, src.repeat), "DSC_EINVAL")
            po = _PackOptions()
            _check(lib.dsc_pack_options_init(ctypes.byref(po), ctypes.sizeof(po)))
            po.field = b(str(pfield))
            po.length = length
            po.cut = 0 if pack_split else 1
            if pack_ahead is not None:
                if isinstance(pack_ahead, bool) or not isinstance(pack_ahead, int) or \
                        pack_ahead < 0:
                    raise InvalidOption(-22, "pack_ahead must be an int >= 0, not %r"
                                        % (pack_ahead,), "DSC_EINVAL")
                po.ahead = pack_ahead
                po.on_caller_thread = 1 if pack_ahead == 0 else 0
            self._pack = str(pfield)
            self._pack_len = length
            fields = None
        if fields is not None:
            fields = list(fields)
            names_arr = (ctypes.c_char_p * max(1, len(fields)))(*[b(f) for f in fields])
        handle = ctypes.c_void_p()
        self._inner = None
        if po is None or self._mixed:
            # A loader over the mixture (dsc_loader_create with sources): batches composed by
            # the library straight into its batch slots, handed out by the loader's own next()
            # (arrays over the slots, no copy here). Rows mixing sources: that loader's packer
            # packs the composed documents (loader.py's pack=).
            from .loader import Loader
            args = {k: opt[k] for k in _COMMON if k not in ("order", "device")}
            if self._mixed:
                assert pack is not None
                args.update(pack=pack, pack_split=pack_split, pack_ahead=pack_ahead)
            args["shuffle"] = opt["shuffle"] if opt["shuffle"] is not None else True
            args["ignore_rank_env"] = True  # resolve_rank checked them
            try:
                self._inner = Loader(servers=servers, batch_size=self.batch_size,
                                     seed=self.seed, rank=rank, world_size=world_size,
                                     indices=True, output=output,
                                     _mixture=(ctypes.cast(srcs, ctypes.c_void_p).value,
                                               len(sources), o.exhausted), **args)
            except Exception:
                self._drop_sink()
                raise
            self._drop_sink()  # the inner loader's sink hears the library
            self._messages = self._inner._messages
            handle = ctypes.c_void_p(lib.dsc_loader_mixture(self._inner._handle))
            rc = 0
            keep_names = None if fields is None else set(fields)
            if keep_names is not None:
                have = {n for n, _, _ in _field_specs(lib.dsc_mixture_field_count,
                                                      lib.dsc_mixture_field, handle)}
                assert fields is not None
                missing = [f for f in fields if f not in have]
                if missing:  # the engine's own check names the source that lacks it
                    self._inner.close()
                    names_arr = (ctypes.c_char_p * len(fields))(*[b(f) for f in fields])
                    probe = ctypes.c_void_p()
                    rc = lib.dsc_mixture_create(ctypes.byref(o),
                                                ctypes.cast(srcs, ctypes.c_void_p), len(sources),
                                                ctypes.cast(names_arr, ctypes.c_void_p),
                                                len(fields), ctypes.byref(probe))
                    if rc == 0:
                        lib.dsc_mixture_destroy(probe)
                    raise InvalidOption(-22, self._why(None) if rc < 0 else
                                        "fields %s: not a field every source has (%s)"
                                        % (missing, sorted(have)), "DSC_EINVAL")
            self._keep = keep_names
        elif po is not None and not self._mixed:
            rc = lib.dsc_mixture_create_packed(ctypes.byref(o), ctypes.cast(srcs, ctypes.c_void_p),
                                               len(sources), ctypes.byref(po),
                                               ctypes.byref(handle))
        else:
            rc = lib.dsc_mixture_create(ctypes.byref(o), ctypes.cast(srcs, ctypes.c_void_p),
                                        len(sources), ctypes.cast(names_arr, ctypes.c_void_p)
                                        if names_arr is not None else None,
                                        len(fields) if fields is not None else 0,
                                        ctypes.byref(handle))
        if rc < 0:
            self._drop_sink()
            raise _error(rc, self._why(None) or lib.dsc_strerror(rc).decode(),
                         lib.dsc_err_name(rc).decode())
        self._handle = handle
        from .loader import _live  # destroyed at exit like loaders: no log call into a dying VM
        _live.add(self)
        self._fields = _field_specs(lib.dsc_mixture_field_count, lib.dsc_mixture_field, handle)
        self._plan: List[Tuple[Any, str, Any, Tuple[Optional[int], ...], bool]] = []
        for name, dtype, shape in self._fields:
            var = bool(shape) and shape[0] is None
            self._plan.append((lib.dsc_mixture_field_view, name, np.dtype(_NP_DTYPES[dtype]),
                               shape, var))
        self._mb = _MixtureBatch()
        self._mb.struct_size = ctypes.sizeof(_MixtureBatch)
        self._view = _FieldView()
        self._view.struct_size = ctypes.sizeof(_FieldView)
        self._mb_ref, self._view_ref = ctypes.byref(self._mb), ctypes.byref(self._view)
        if self._pack is not None and not self._mixed:
            self._pb = _PackedBatch()
            self._pb.struct_size = ctypes.sizeof(_PackedBatch)
            self._pack_dtype = self._plan[0][2]
        self._next = lib.dsc_mixture_next

    def _why(self, handle: Optional[ctypes.c_void_p]) -> str:
        buf = ctypes.create_string_buffer(1024)
        self._lib.dsc_mixture_last_error(handle, buf, len(buf))
        text = buf.value.decode(errors="replace")
        if text.startswith("mixture: "):
            text = text[len("mixture: "):]
        return text

    def _check(self, rc: int) -> int:
        if rc < 0:
            lib = self._lib
            raise _error(rc, self._why(self._handle) or lib.dsc_strerror(rc).decode(),
                         lib.dsc_err_name(rc).decode())
        return rc

    def _drop_sink(self) -> None:
        with _sinks_lock:
            _sinks.pop(self._sink_id, None)

    def _h(self) -> ctypes.c_void_p:
        if not self._handle:
            raise ValueError("mixture is closed")
        return self._handle

    def close(self) -> None:
        h, self._handle = getattr(self, "_handle", None), None
        inner, self._inner = getattr(self, "_inner", None), None
        if inner is not None:
            inner.close()  # the mixture is the loader's
        elif h:
            self._lib.dsc_mixture_destroy(h)
        if getattr(self, "_sink_id", 0):
            self._drop_sink()

    def _destroy(self) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self) -> "Mixture":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __iter__(self) -> "Mixture":
        return self

    def __len__(self) -> int:
        raise TypeError("a mixture's batches per epoch are not known ahead (exhausted='wrap' "
                        "has no end; 'stop' ends at the first source to run out)")

    @property
    def fields(self) -> List[Tuple[str, int, Tuple[Optional[int], ...]]]:
        return list(self._fields)

    @property
    def source_batch_sizes(self) -> List[int]:
        """Each source's loader batch size: its share S of batch_size rounded up, or
        min(4 S, 64) when S < 64 (client/lib/mixture.c)."""
        return [int(self._lib.dsc_mixture_source_batch(self._h(), k))
                for k in range(len(self.sources))]

    def _info(self) -> _MixtureInfo:
        info = _MixtureInfo()
        info.struct_size = ctypes.sizeof(_MixtureInfo)
        self._check(self._lib.dsc_mixture_info(self._h(), ctypes.byref(info)))
        return info

    @property
    def epoch(self) -> int:
        return int(self._info().epoch)

    @property
    def step(self) -> int:
        return int(self._info().step)

    def __next__(self) -> Batch:
        h = self._handle
        if not h:
            raise ValueError("mixture is closed")
        inner = self._inner
        if inner is not None:
            try:
                out = inner.__next__()
            except StopIteration:
                raise
            except Error as e:
                why = self._why(h)
                if why and why not in str(e):
                    raise type(e)(e.code, why, e.name) from None
                raise
            if self._mixed:  # a packed batch of the composed documents
                return self._transform(out) if self._transform is not None else out
            keep = self._keep
            if keep is not None:
                out = {k: v for k, v in out.items()
                       if k in keep or (k.endswith("_offsets") and k[:-8] in keep) or
                       k in ("source", "source_epoch", "__index__")}
            src = out.pop("source")
            if self._source_field:
                out[self._source_field] = src
            return self._transform(out) if self._transform is not None else out
        mb = self._mb
        rc = self._next(h, self._mb_ref)
        if rc == _EOF:
            raise StopIteration
        if rc < 0:
            self._check(rc)
        n = mb.samples
        out = {}
        v, vref, move, empty = self._view, self._view_ref, ctypes.memmove, np.empty
        if self._pack is not None:
            self._packed_rows(h, n, out)
        for f, (view, name, dt, shape, var) in enumerate(self._plan if self._pack is None
                                                         else ()):
            rc = view(h, f, vref)
            if rc < 0:
                self._check(rc)
            if var:
                arr = empty((v.values.shape[0],) + tuple(shape[1:]), dtype=dt)
                offs = empty(n + 1, dtype=np.int64)
                move(offs.ctypes.data, v.offsets, 8 * (n + 1))
                out[name + "_offsets"] = offs
            else:
                arr = empty((n,) + tuple(shape), dtype=dt)
            if v.values.bytes:
                move(arr.ctypes.data, v.values.data, v.values.bytes)
            out[name] = arr
        if self._pack is None:
            idx = empty(n, dtype=np.uint64)
            move(idx.ctypes.data, mb.indices, 8 * n)
            out["__index__"] = idx
        ep = empty(n, dtype=np.int64)
        move(ep.ctypes.data, mb.source_epoch, 8 * n)
        out["source_epoch"] = ep
        if self._source_field:
            src = empty(n, dtype=np.int32)
            move(src.ctypes.data, mb.source, 4 * n)
            out[self._source_field] = src
        if self._torch is not None:
            torch = self._torch
            out = {k: torch.from_numpy(a.astype(np.int64) if a.dtype == np.uint64 else a)
                   for k, a in out.items()}
        return self._transform(out) if self._transform is not None else out

    def _packed_rows(self, h: ctypes.c_void_p, n: int, out: Batch) -> None:
        """The packed rows of the batch (dsc_mixture_packed) into numpy arrays."""
        pb = self._pb
        assert self._pack is not None  # a packed mixture
        self._check(self._lib.dsc_mixture_packed(h, ctypes.byref(pb)))
        move, L, segs = ctypes.memmove, self._pack_len, pb.segments
        for key, ptr, dt, shape in ((self._pack, pb.tokens, self._pack_dtype, (n, L)),
                                    ("position_ids", pb.position_ids, np.int32, (n, L)),
                                    ("document_ids", pb.document_ids, np.int32, (n, L)),
                                    ("cu_seqlens", pb.cu_seqlens, np.int32, (segs + 1,)),
                                    ("segment_index", pb.segment_index, np.int64, (segs,)),
                                    ("segment_start", pb.segment_start, np.int64, (segs,))):
            a = np.empty(shape, dtype=dt)
            if a.nbytes:
                move(a.ctypes.data, ptr, a.nbytes)
            out[key] = a

    # -- resume --
    def _identity(self) -> Dict[str, Any]:
        return {"datasets": [s.dataset for s in self.sources], "weights": self.weights,
                "repeat": [s.repeat for s in self.sources],
                "seed": self.seed, "batch_size": self.batch_size, "exhausted": self.exhausted,
                "pack": self._pack, "pack_sources": "mixed" if self._mixed else "separate"}

    def _raw_state(self) -> bytes:
        h = self._h()
        need = self._check(self._lib.dsc_mixture_state_save(h, None, 0))
        buf = ctypes.create_string_buffer(need)
        n = self._check(self._lib.dsc_mixture_state_save(h, buf, need))
        return buf.raw[:n]

    @staticmethod
    def _sections(raw: bytes, count: int) -> List[Tuple[int, int, bytes]]:
        """Per source: (used, its record's bytes) of a dsc_mixture_state_save blob (layout in
        client/lib/mixture.c)."""
        out, off = [], 72
        u: Callable[[int], int] = lambda at: int.from_bytes(raw[at:at + 8], "little")  # noqa: E731
        for _ in range(count):
            clen = u(off + 88)
            slen = u(off + 96 + clen)
            end = off + 96 + clen + 8 + slen
            out.append((u(off + 16), u(off + 8), raw[off:end]))
            off = end
        return out

    def state_dict(self) -> State:
        """{"dscache_mixture": {...}}: the library's mixture state (hex, "state": per source its
        loader's state at the start of the source batch being read and the samples of it used,
        the quota counters, the epoch and step) with what the composition depends on
        ("identity": datasets, weights, repeat, seed, batch_size, exhausted, checked by
        load_state_dict) and per source {"skip", "record"}: the same on every rank, resumable
        on any world size."""
        if self._mixed:  # the packed stream over the composed one (its state holds the mixture's)
            assert self._inner is not None
            return {"dscache_mixture": {"version": _MIX_STATE_VERSION + 1,
                                        "identity": self._identity(),
                                        "world_size": self.world_size, "rank": self.rank,
                                        "state": self._inner.state_dict()["dscache_pack_state"]}}
        raw = self._raw_state()
        secs = self._sections(raw, len(self.sources))
        return {"dscache_mixture": {"version": _MIX_STATE_VERSION + 1,
                                    "identity": self._identity(),
                                    "world_size": self.world_size, "rank": self.rank,
                                    "state": raw.hex(),
                                    "sources": [{"skip": used, "record": rec.hex()}
                                                for used, _, rec in secs]}}

    def load_state_dict(self, state: Union[State, Sequence[State]]) -> None:
        """Resumes from state_dict()'s dict (rank 0's resumes every rank, also on another world
        size). A list of every old rank's state_dict() (rank order) is taken too, and is what a
        packed mixture needs to resume on another world size: each old rank's packed sources
        stand at documents of their own (dsc_mixture_state_load_world)."""
        if isinstance(state, (list, tuple)):
            if not state:
                raise BadState(-4024, "no old rank's state given", "DSC_EBADSTATE")
            raws = [self._checked_raw(s) for s in state]
            old = len(raws)
            if self._mixed:
                assert self._inner is not None
                self._inner.load_state_dict([{"dscache_pack_state": r.hex()} for r in raws])
                return
            if old == self.world_size or self._pack is None:
                return self._load_raw(raws[self.rank if old == self.world_size else 0])
            bufs = [ctypes.create_string_buffer(r, len(r)) for r in raws]
            ptrs = (ctypes.c_void_p * old)(*[ctypes.addressof(b) for b in bufs])
            lens = (ctypes.c_size_t * old)(*[len(r) for r in raws])
            self._check(self._lib.dsc_mixture_state_load_world(self._h(), ptrs, lens, old))
            return
        raw = self._checked_raw(cast(State, state))
        if self._mixed:
            assert self._inner is not None
            self._inner.load_state_dict({"dscache_pack_state": raw.hex()})
            return
        self._load_raw(raw)

    def _load_raw(self, raw: bytes) -> None:
        """dsc_mixture_state_load of one library state."""
        buf = ctypes.create_string_buffer(raw, len(raw))
        self._check(self._lib.dsc_mixture_state_load(self._h(), buf, len(raw)))

    def _checked_raw(self, state: State) -> bytes:
        """The library state of one state_dict(), its version and identity checked."""
        try:
            st = state["dscache_mixture"]
        except (TypeError, KeyError):
            raise BadState(-4024, "not a mixture state (no 'dscache_mixture' key): a "
                           "single-dataset loader's state cannot resume a mixture",
                           "DSC_EBADSTATE") from None
        if st.get("version") != _MIX_STATE_VERSION + 1 or "state" not in st:
            raise BadState(-4024, "mixture state version %r, this loader reads %d"
                           % (st.get("version"), _MIX_STATE_VERSION + 1), "DSC_EBADSTATE")
        mine = self._identity()
        for key, value in mine.items():
            if st["identity"].get(key) != value:
                raise BadState(-4024, "the state is of another mixture: %s %r, this one %r"
                               % (key, st["identity"].get(key), value), "DSC_EBADSTATE")
        try:
            return bytes.fromhex(st["state"])
        except (TypeError, ValueError):
            raise BadState(-4024, "dscache_mixture['state'] is not a hex string",
                           "DSC_EBADSTATE") from None

    # -- information --
    def stats(self) -> Stats:
        """The mixture's figures and stats()["sources"]: per source name, samples handed out,
        wire_bytes, epoch_wire_bytes, stall_seconds, its share of the mixture's stall, its
        source_epoch and its loader's verdict (bottleneck); "starving_source" names the source
        with the most stall (None without stall): the verdict of the mixture."""
        h = self._h()
        info = self._info()
        epochs = [e for _, e, _ in self._sections(self._raw_state(), len(self.sources))]
        per, total = {}, 0.0
        for k, src in enumerate(self.sources):
            s = _Stats()
            s.struct_size = ctypes.sizeof(_Stats)
            n = ctypes.c_uint64()
            self._check(self._lib.dsc_mixture_source_stats(h, k, ctypes.byref(n),
                                                           ctypes.byref(s)))
            d = _stats_dict(s)
            per[src.dataset] = {"samples": int(n.value), "wire_bytes": d["wire_bytes"],
                                "epoch_wire_bytes": d["epoch_wire_bytes"],
                                "stall_seconds": d["stall_seconds"], "source_epoch": epochs[k],
                                "bottleneck": d["bottleneck"], "loader": d}
            total += d["stall_seconds"]
        for v in per.values():
            v["stall_share"] = v["stall_seconds"] / total if total > 0 else 0.0
        starving = (self.sources[info.starving_source].dataset
                    if info.starving_source >= 0 else None)
        out: Stats = {"epoch": int(info.epoch), "step": int(info.step),
                      "samples": sum(v["samples"] for v in per.values()),
                      "stall_seconds": total, "sources": per, "starving_source": starving}
        if self._mixed and self._inner is not None:  # rows mixing sources: the packer's figures
            out["pack"] = self._inner.stats().get("pack")
        return out
