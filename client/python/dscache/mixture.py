"""dscache.Source and the mixture loader (Loader(sources=[...])): a weighted blend of datasets,
one dscache loader per source, composed into batches by a deterministic quota interleave in the
library (client/lib/mixture.c, dsc_mixture_*; docs/mixtures.md)."""

import ctypes
import os

import numpy as np

from ._capi import (BOTTLENECKS, STALL_WAITS, _EOF, _NP_DTYPES, _STAT_FIELDS, _FieldView,
                    _MixtureBatch, _MixtureInfo, _Options, _SourceOptions, _Stats, _check,
                    _error, _field_specs, _load)
from ._errors import BadState, Error, InvalidOption
from ._logbridge import _c_log_level, _on_log, _sink_ids, _sinks, _sinks_lock
from ._ranks import resolve_rank

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

    def __init__(self, dataset, weight=1.0, servers=None, repeat=1.0, auth_file=None,
                 replicas=None, fallback_path=None, shuffle_window=None):
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

    def __repr__(self):
        return "Source(%r, weight=%r, repeat=%r)" % (self.dataset, self.weight, self.repeat)


def quota_picks(counts, weights, total, n):
    """The sources of the next n samples after `total` samples with per-source `counts`, by the
    quota method: sample total + 1 goes to the source whose quota (total + 1) * w / W most
    exceeds what it has (ties: the lower index). Pure; keeps every source within one sample of
    its quota at every sample (Balinski and Young's quota method). Returns (picks, counts,
    total) with counts updated."""
    counts = list(counts)
    wsum = float(sum(weights))
    picks = []
    for _ in range(n):
        total += 1
        best, best_gap = 0, None
        for s, w in enumerate(weights):
            gap = total * w / wsum - counts[s]
            if best_gap is None or gap > best_gap:
                best, best_gap = s, gap
        counts[best] += 1
        picks.append(best)
    return picks, counts, total


class _PyMixture:
    """The packed mixture (Loader(sources=[...], pack={...})): each source's packed rows, blended
    by the quota rule in Python (the unpacked mixture composes in C: Mixture). Iterating yields
    batches of batch_size samples (fewer only where exhausted="stop" ends the epoch),
    each a dict of the needed fields plus batch["source"] (int32 [B], the index of each
    sample's source in `sources`) unless source_field=None. See docs/mixtures.md."""

    def __init__(self, sources, servers=None, batch_size=32, seed=0, exhausted="wrap",
                 fields=None, source_field="source", rank=None, world_size=None, **loader_kw):
        from .loader import Loader
        if not isinstance(sources, (list, tuple)) or not sources:
            raise InvalidOption(-22, "sources must be a non-empty list of dscache.Source",
                                "DSC_EINVAL")
        for s in sources:
            if not isinstance(s, Source):
                raise TypeError("sources must hold dscache.Source objects, not %s"
                                % type(s).__name__)
        if exhausted not in ("wrap", "stop"):
            raise ValueError("exhausted must be 'wrap' or 'stop'")
        pack = loader_kw.get("pack")
        if pack is not None:
            if not isinstance(pack, dict) or len(pack) != 1:
                raise TypeError("pack must be a dict of one field: {name: tokens per row}")
            fields = list(pack)
        self._pack = next(iter(pack)) if pack is not None else None
        for bad in ("order", "device"):
            if bad in loader_kw and loader_kw[bad] not in (None, "local", "cpu"):
                raise InvalidOption(-22, "%s= is not supported with sources= yet" % bad,
                                    "DSC_EINVAL")
        output = loader_kw.pop("output", "numpy")
        if output not in ("numpy", "torch"):
            raise ValueError("output must be 'numpy' or 'torch'")
        self._torch = None
        if output == "torch":  # the batch is gathered in numpy, handed out as torch tensors
            import torch
            self._torch = torch
        self._transform = loader_kw.pop("transform", None)
        names = [s.dataset for s in sources]
        if len(set(names)) != len(names):
            raise InvalidOption(-22, "sources name a dataset twice: %s" % names, "DSC_EINVAL")
        self.sources = list(sources)
        self.weights = [s.weight for s in sources]
        self.batch_size, self.seed, self.exhausted = int(batch_size), int(seed), exhausted
        self._source_field = source_field
        wsum = sum(self.weights)
        self._loaders = []
        self._make = []  # per source: what its loader was made with (world-size changes)
        try:
            for k, s in enumerate(sources):
                kw = dict(loader_kw)
                for opt in ("auth_file", "replicas", "fallback_path", "shuffle_window"):
                    if getattr(s, opt) is not None:
                        kw[opt] = getattr(s, opt)
                # A source batch about its share of a step: few batches in flight per step.
                share = max(1, -(-self.batch_size * int(s.weight * 1e6) // int(wsum * 1e6)))
                try:
                    ld = Loader(servers=s.servers or servers, dataset=s.dataset, batch_size=share,
                                seed=self.seed + k, rank=rank, world_size=world_size,
                                indices=True, **kw)
                except Error as e:
                    raise type(e)(e.code, "source %r: %s" % (s.dataset, e), e.name) from None
                self._loaders.append(ld)
                self._make.append(dict(servers=s.servers or servers, dataset=s.dataset,
                                       batch_size=share, seed=self.seed + k, indices=True, **kw))
                if ld.dataset_samples == 0:
                    raise InvalidOption(-22, "source %r is empty (0 samples)" % s.dataset,
                                        "DSC_EINVAL")
            self.rank, self.world_size = self._loaders[0].rank, self._loaders[0].world_size
            # repeat: whole passes, and the samples of the last, part pass (per rank).
            self._full, self._cut = [], []
            for src, ld in zip(self.sources, self._loaders):
                full = int(src.repeat)
                frac = src.repeat - full
                cut = 0
                if frac > 0:
                    if self._pack is not None:
                        raise InvalidOption(-22, "Source %r: a fractional repeat (%r) is not "
                                            "supported with pack= (a pass's rows are not known "
                                            "ahead)" % (src.dataset, src.repeat), "DSC_EINVAL")
                    share = -(-ld.dataset_samples // self.world_size)
                    cut = max(1, int(round(frac * share)))
                self._full.append(full)
                self._cut.append(cut)
            self._fields = self._agree(fields)
        except BaseException:
            self.close()
            raise
        self._iters = [None] * len(sources)
        self._pending = [None] * len(sources)   # (batch dict, cursor) per source
        self._before = [None] * len(sources)    # the source loader's state before that batch
        self._skip = [0] * len(sources)         # after load_state_dict: samples to skip
        # After a resume on another world size: the samples of the old ranks' part-used source
        # batches this rank delivers first ([batch, cursor] pieces), and what they came from.
        self._extra = [[] for _ in sources]
        self._carry = [None] * len(sources)
        self._source_epoch = [0] * len(sources)
        self._passes = [0] * len(sources)        # whole passes done in the source-epoch
        self._taken = [0] * len(sources)         # samples taken in the pass under way
        self._loader_epoch = [0] * len(sources)  # the source loader's epoch
        self._counts, self._total = [0] * len(sources), 0
        self.epoch, self.step = 0, 0
        self._delivered = [0] * len(sources)
        self._stop_next = False
        self._empty, self._dead = None, False  # a source with no epoch left (epochs=) ends all

    def _agree(self, fields):
        """The needed fields {name: (dtype, shape)}: `fields` or the first source's; every source
        must have each with the same dtype and shape (InvalidOption names source, field and both
        definitions)."""
        first = {n: (d, tuple(s)) for n, d, s in self._loaders[0].fields}
        want = list(fields) if fields is not None else list(first)
        out = {}
        for f in want:
            ref, ref_src = None, None
            for src, ld in zip(self.sources, self._loaders):
                have = {n: (d, tuple(s)) for n, d, s in ld.fields}
                if f not in have:
                    raise InvalidOption(-22, "source %r has no field %r (it has %s)"
                                        % (src.dataset, f, ", ".join(sorted(have))), "DSC_EINVAL")
                if ref is None:
                    ref, ref_src = have[f], src.dataset
                elif have[f] != ref:
                    raise InvalidOption(
                        -22, "field %r differs between sources: %r has %s%s, %r has %s%s"
                        % (f, ref_src, ref[0], list(ref[1]), src.dataset, have[f][0],
                           list(have[f][1])), "DSC_EINVAL")
            out[f] = ref
        return out

    def close(self):
        for ld in getattr(self, "_loaders", []):
            ld.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __iter__(self):
        return self

    def __len__(self):
        raise TypeError("a mixture's batches per epoch are not known ahead (exhausted='wrap' "
                        "has no end; 'stop' ends at the first source to run out)")

    def _take(self, s, n):
        """Up to n samples of source s as a list of (batch dict, start, stop) pieces; fewer when
        its source-epoch ends under exhausted='stop' (then sets _stop_next)."""
        pieces = []
        ld = self._loaders[s]
        while n > 0 and self._extra[s]:
            p = self._extra[s][0]
            b, cur = p
            k = min(n, len(b["__index__"]) - cur)
            pieces.append((b, cur, cur + k))
            p[1] = cur + k
            n -= k
            self._taken[s] += k
            self._carry[s]["used"] += k
            if p[1] >= len(b["__index__"]):
                self._extra[s].pop(0)
        if not self._extra[s]:
            self._carry[s] = None
        while n > 0:
            if self._passes[s] == self._full[s] and self._taken[s] >= self._cut[s]:
                # The source-epoch's passes are done (repeat): a part pass is cut short, its
                # loader goes on to its next epoch.
                if self._taken[s] > 0:
                    self._pending[s] = None
                    self._loader_epoch[s] += 1
                    ld.set_epoch(self._loader_epoch[s])
                    self._iters[s] = None
                self._passes[s], self._taken[s] = 0, 0
                self._source_epoch[s] += 1
                if self.exhausted == "stop":
                    self._stop_next = True
                    return pieces
            p = self._pending[s]
            if p is None:
                if self._iters[s] is None:
                    self._iters[s] = iter(ld)
                self._before[s] = ld.state_dict()
                try:
                    b = self._rows(next(self._iters[s]))
                    b["__source_epoch__"] = self._source_epoch[s]
                except StopIteration:  # a pass ends
                    if self._empty == s:
                        # two ends in a row without a batch: no epoch left (epochs=)
                        self._stop_next = self._dead = True
                        return pieces
                    self._empty = s
                    self._iters[s] = None
                    self._loader_epoch[s] += 1
                    self._passes[s] += 1
                    self._taken[s] = 0
                    continue
                self._empty = None
                p = self._pending[s] = [b, self._skip[s]]
                self._skip[s] = 0
            b, cur = p
            size = len(b["__index__"])
            k = min(n, size - cur)
            if self._passes[s] == self._full[s]:  # the part pass: up to its cut
                k = min(k, self._cut[s] - self._taken[s])
            if k > 0:
                pieces.append((b, cur, cur + k))
            p[1] = cur + k
            n -= k
            self._taken[s] += k
            if p[1] >= size:
                self._pending[s] = None
        return pieces

    def _rows(self, b):
        """A packed source batch as samples of one row each (the rest is per batch)."""
        if self._pack is None:
            return b
        f = self._pack
        rows, length = b[f].shape
        # Each row's segments (the source batch's segment arrays cut at the row ends).
        row_of = b["cu_seqlens"][:-1] // length
        cut = np.searchsorted(row_of, np.arange(rows + 1))
        segs = [(b["segment_index"][cut[r]:cut[r + 1]], b["segment_start"][cut[r]:cut[r + 1]])
                for r in range(rows)]
        return {f: b[f], "position_ids": b["position_ids"], "document_ids": b["document_ids"],
                "__segs__": segs, "__index__": np.arange(rows, dtype=np.uint64)}

    def _compose_packed(self, rows, out):
        """Packed rows of several sources: the rows stacked, document_ids and cu_seqlens over
        the new batch (a segment boundary where a row starts or its source's segment changes;
        padding keeps -1)."""
        f = self._pack
        out[f] = np.stack([b[f][r] for b, r in rows])
        out["position_ids"] = np.stack([b["position_ids"][r] for b, r in rows])
        src = np.stack([b["document_ids"][r] for b, r in rows])
        n, length = src.shape
        start = np.ones_like(src, dtype=bool)
        start[:, 1:] = src[:, 1:] != src[:, :-1]
        seg = np.cumsum(start.reshape(-1)) - 1
        out["document_ids"] = np.where(src.reshape(-1) < 0, -1, seg).reshape(n, length) \
            .astype(np.int32)
        bounds = np.flatnonzero(start.reshape(-1))
        out["cu_seqlens"] = np.append(bounds, n * length).astype(np.int32)
        # The same segments as the sources' rows had: their documents and offsets.
        out["segment_index"] = np.concatenate([b["__segs__"][r][0] for b, r in rows])
        out["segment_start"] = np.concatenate([b["__segs__"][r][1] for b, r in rows])

    def __next__(self):
        if self._dead:
            raise StopIteration
        if self._stop_next:
            self._stop_next = False
            self.epoch, self.step = self.epoch + 1, 0
            raise StopIteration
        picks, counts, total = quota_picks(self._counts, self.weights, self._total,
                                           self.batch_size)
        want = [picks.count(s) for s in range(len(self.sources))]
        got = {}
        for s, n in enumerate(want):
            if n:
                got[s] = self._take(s, n)
        # Sample i of the batch is the next unused sample of source picks[i].
        taken = {s: sum(e - a for _, a, e in got.get(s, ())) for s in range(len(want))}
        order, used = [], [0] * len(want)
        for s in picks:
            if used[s] < taken[s]:
                order.append((s, used[s]))
                used[s] += 1
        for s in range(len(want)):
            self._delivered[s] += taken[s]
        self._counts, self._total = counts, total
        out = self._compose(got, order)
        self.step += 1
        if not order:
            self._stop_next = False
            self.epoch, self.step = self.epoch + 1, 0
            raise StopIteration
        if self._torch is not None:
            torch = self._torch
            out = {k: torch.from_numpy(v.astype(np.int64) if v.dtype == np.uint64 else v)
                   for k, v in out.items()}
        return self._transform(out) if self._transform is not None else out

    def _compose(self, got, order):
        """The batch dict: each needed field gathered in `order` ((source, k-th sample of that
        source's pieces)); variable-length fields as values + offsets."""
        out = {}
        flat = {}  # source -> list of (batch, row) for its samples, in order
        for s, pieces in got.items():
            flat[s] = [(b, r) for b, a, e in pieces for r in range(a, e)]
        rows = [flat[s][k] for s, k in order]
        if self._pack is not None and rows:
            self._compose_packed(rows, out)
        # Where each sample of the batch sits in its source's pieces laid end to end, all
        # sources after each other: one gather per field instead of a copy per sample.
        srcs = sorted(got)
        base, at = {}, 0
        for s in srcs:
            base[s] = at
            at += sum(e - a for _, a, e in got[s])
        perm = np.asarray([base[s] + k for s, k in order], dtype=np.int64)
        for f, (dtype, shape) in self._fields.items():
            if self._pack is not None:
                break
            pieces = [(b, a, e) for s in srcs for b, a, e in got[s]]
            if shape and shape[0] is None:
                vals, lens = [], []
                for b, a, e in pieces:
                    o = b[f + "_offsets"]
                    vals.append(b[f][o[a]:o[e]])
                    lens.append(np.diff(o[a:e + 1]))
                if not pieces:
                    out[f] = np.zeros((0,), dtype=np.uint8)
                    out[f + "_offsets"] = np.zeros(1, dtype=np.int64)
                    continue
                allv = np.concatenate(vals)
                alll = np.concatenate(lens).astype(np.int64)
                starts = np.concatenate(([0], np.cumsum(alll)[:-1]))
                ln = alll[perm]
                offs = np.concatenate(([0], np.cumsum(ln))).astype(np.int64)
                gather = np.repeat(starts[perm] - offs[:-1], ln) + np.arange(offs[-1])
                out[f] = allv[gather]
                out[f + "_offsets"] = offs
            else:
                if not pieces:
                    out[f] = np.zeros((0,) + tuple(shape))
                    continue
                out[f] = np.concatenate([b[f][a:e] for b, a, e in pieces])[perm]
        if self._pack is None:
            parts = [b["__index__"][a:e] for s in srcs for b, a, e in got[s]]
            idx = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)
            out["__index__"] = idx[perm].astype(np.uint64)
        ep = np.concatenate([np.full(e - a, b["__source_epoch__"], dtype=np.int64)
                             for s in srcs for b, a, e in got[s]]) if order else \
            np.zeros(0, dtype=np.int64)
        out["source_epoch"] = ep[perm]
        if self._source_field:
            out[self._source_field] = np.asarray([s for s, _ in order], dtype=np.int32)
        return out

    # -- resume --
    def _identity(self):
        return {"datasets": [s.dataset for s in self.sources], "weights": self.weights,
                "repeat": [s.repeat for s in self.sources],
                "seed": self.seed, "batch_size": self.batch_size, "exhausted": self.exhausted,
                "pack": self._pack}

    def state_dict(self):
        """{"dscache_mixture": {...}}: per source, its loader's state at the start of the source
        batch being read and the samples of it already used; the quota counters, the mixture's
        epoch and step, and what the composition depends on (datasets, weights, seed,
        batch_size, exhausted), checked by load_state_dict."""
        srcs = []
        for s, ld in enumerate(self._loaders):
            if self._carry[s] is not None:  # still delivering an old world size's leftovers
                srcs.append({"state": ld.state_dict(), "skip": 0, "carry": dict(self._carry[s])})
            elif self._pending[s] is not None:
                srcs.append({"state": self._before[s], "skip": self._pending[s][1]})
            else:
                srcs.append({"state": ld.state_dict(), "skip": self._skip[s]})
        return {"dscache_mixture": {"version": _MIX_STATE_VERSION, "identity": self._identity(),
                                    "counts": list(self._counts), "total": self._total,
                                    "epoch": self.epoch, "step": self.step,
                                    "stop_next": self._stop_next,
                                    "source_epochs": list(self._source_epoch),
                                    "passes": list(self._passes), "taken": list(self._taken),
                                    "loader_epochs": list(self._loader_epoch),
                                    "world_size": self.world_size, "rank": self.rank,
                                    "sources": srcs}}

    def load_state_dict(self, state):
        try:
            st = state["dscache_mixture"]
        except (TypeError, KeyError):
            raise BadState(-4024, "not a mixture state (no 'dscache_mixture' key): a "
                           "single-dataset loader's state cannot resume a mixture",
                           "DSC_EBADSTATE") from None
        if st.get("version") != _MIX_STATE_VERSION:
            raise BadState(-4024, "mixture state version %r, this loader reads %d"
                           % (st.get("version"), _MIX_STATE_VERSION), "DSC_EBADSTATE")
        mine = self._identity()
        for key, value in mine.items():
            if st["identity"].get(key) != value:
                raise BadState(-4024, "the state is of another mixture: %s %r, this one %r"
                               % (key, st["identity"].get(key), value), "DSC_EBADSTATE")
        old_world = int(st.get("world_size", self.world_size))
        if old_world != self.world_size and any(c for c in self._cut):
            raise BadState(-4024, "a mixture with a fractional repeat resumes on the world size "
                           "it was saved on (%d), not %d (a pass's cut depends on it)"
                           % (old_world, self.world_size), "DSC_EBADSTATE")
        for s, ld in enumerate(self._loaders):
            src = st["sources"][s]
            self._pending[s] = None
            self._iters[s] = None
            self._extra[s], self._carry[s] = [], None
            carry = src.get("carry")
            if carry is not None:
                if old_world != self.world_size or int(st.get("rank", -1)) != self.rank:
                    raise BadState(-4024, "the state was saved while rank %s of %d still "
                                   "delivered the samples left over by a change of world size: "
                                   "it resumes only that rank of that world size (save again a "
                                   "few steps later)" % (st.get("rank"), old_world),
                                   "DSC_EBADSTATE")
                self._leftovers(s, carry["world"], carry["state"], carry["skip"])
                drop = int(carry["used"])
                self._take(s, drop)
                ld.load_state_dict(src["state"])
                self._skip[s] = 0
            elif old_world != self.world_size and int(src["skip"]) > 0:
                if self._pack is not None:
                    raise BadState(-4024, "a packed mixture resumes on the world size it was "
                                   "saved on (%d), not %d" % (old_world, self.world_size),
                                   "DSC_EBADSTATE")
                after = self._leftovers(s, old_world, src["state"], int(src["skip"]))
                ld.load_state_dict(after)
                self._skip[s] = 0
            else:
                ld.load_state_dict(src["state"])
                self._skip[s] = int(src["skip"])
        self._counts, self._total = list(st["counts"]), int(st["total"])
        self.epoch, self.step = int(st["epoch"]), int(st["step"])
        self._stop_next = bool(st["stop_next"])
        self._source_epoch = list(st["source_epochs"])
        self._passes = list(st["passes"])
        self._taken = list(st["taken"])
        self._loader_epoch = list(st["loader_epochs"])

    def _leftovers(self, s, old_world, before, skip):
        """A resume on another world size, source s: every old rank had used `skip` samples of
        its source batch at `before`. This rank takes the unused rest of the batches of the old
        ranks r with r % world_size == rank (read again by a loader of that old rank), to
        deliver first; returns the source loader's state after that batch, from which the
        loader re-splits the samples not yet delivered over the new ranks (docs/order.md)."""
        from .loader import Loader
        after = None
        for r in range(old_world):
            mine = r % self.world_size == self.rank
            if not mine and after is not None:
                continue
            tmp = Loader(rank=r, world_size=old_world, ignore_rank_env=True, **self._make[s])
            try:
                tmp.load_state_dict(before)
                b = next(iter(tmp))
                after = tmp.state_dict()
            finally:
                tmp.close()
            b["__source_epoch__"] = self._source_epoch[s]
            if mine and skip < len(b["__index__"]):
                self._extra[s].append([b, skip])
        self._carry[s] = {"world": old_world, "state": before, "skip": skip, "used": 0}
        if not self._extra[s]:
            self._carry[s] = None
        return after

    # -- information --
    def stats(self):
        """The first source's loader stats as a whole, and stats()["sources"]: per source name,
        samples handed out, wire_bytes, stall_seconds and its share of the mixture's stall;
        "starving_source" names the source with the most stall (None without stall)."""
        per = {}
        total_stall = 0.0
        for src, ld, n, ep in zip(self.sources, self._loaders, self._delivered,
                                  self._source_epoch):
            st = ld.stats()
            per[src.dataset] = {"samples": n, "wire_bytes": st["wire_bytes"],
                                "epoch_wire_bytes": st["epoch_wire_bytes"],
                                "stall_seconds": st["stall_seconds"], "source_epoch": ep,
                                "bottleneck": st["bottleneck"]}
            total_stall += st["stall_seconds"]
        for v in per.values():
            v["stall_share"] = v["stall_seconds"] / total_stall if total_stall > 0 else 0.0
        starving = max(per, key=lambda k: per[k]["stall_seconds"]) if total_stall > 0 else None
        return {"epoch": self.epoch, "step": self.step, "samples": sum(self._delivered),
                "stall_seconds": total_stall, "sources": per, "starving_source": starving}


# Options a mixture passes to every source's loader (as dscache.Loader takes them).
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
    `sources`) unless source_field=None. See docs/mixtures.md. pack= makes a _PyMixture."""

    def __new__(cls, sources=None, **kw):
        if kw.get("pack") is not None:
            return _PyMixture(sources, **kw)
        return super().__new__(cls)

    def __init__(self, sources, servers=None, batch_size=32, seed=0, exhausted="wrap",
                 fields=None, source_field="source", rank=None, world_size=None, output="numpy",
                 transform=None, pack=None, **kw):
        self._handle = None
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
        self._torch = None
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
        _check(lib.dsc_loader_options_init2(ctypes.byref(o), ctypes.sizeof(o)))
        keep = []  # the bytes the structs point at, alive through create

        def b(text):
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
        if fields is not None:
            fields = list(fields)
            names_arr = (ctypes.c_char_p * max(1, len(fields)))(*[b(f) for f in fields])
        handle = ctypes.c_void_p()
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
        self._fields = _field_specs(lib.dsc_mixture_field_count, lib.dsc_mixture_field, handle)
        self._plan = []
        for name, dtype, shape in self._fields:
            var = bool(shape) and shape[0] is None
            self._plan.append((lib.dsc_mixture_field_view, name, np.dtype(_NP_DTYPES[dtype]),
                               shape, var))
        self._mb = _MixtureBatch()
        self._mb.struct_size = ctypes.sizeof(_MixtureBatch)
        self._view = _FieldView()
        self._view.struct_size = ctypes.sizeof(_FieldView)
        self._mb_ref, self._view_ref = ctypes.byref(self._mb), ctypes.byref(self._view)
        self._next = lib.dsc_mixture_next

    def _why(self, handle):
        buf = ctypes.create_string_buffer(1024)
        self._lib.dsc_mixture_last_error(handle, buf, len(buf))
        text = buf.value.decode(errors="replace")
        if text.startswith("mixture: "):
            text = text[len("mixture: "):]
        return text

    def _check(self, rc):
        if rc < 0:
            lib = self._lib
            raise _error(rc, self._why(self._handle) or lib.dsc_strerror(rc).decode(),
                         lib.dsc_err_name(rc).decode())
        return rc

    def _drop_sink(self):
        with _sinks_lock:
            _sinks.pop(self._sink_id, None)

    def _h(self):
        if not self._handle:
            raise ValueError("mixture is closed")
        return self._handle

    def close(self):
        h, self._handle = getattr(self, "_handle", None), None
        if h:
            self._lib.dsc_mixture_destroy(h)
        if getattr(self, "_sink_id", 0):
            self._drop_sink()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __iter__(self):
        return self

    def __len__(self):
        raise TypeError("a mixture's batches per epoch are not known ahead (exhausted='wrap' "
                        "has no end; 'stop' ends at the first source to run out)")

    @property
    def fields(self):
        return list(self._fields)

    @property
    def source_batch_sizes(self):
        """Each source's loader batch size (its share of batch_size, rounded up)."""
        return [int(self._lib.dsc_mixture_source_batch(self._h(), k))
                for k in range(len(self.sources))]

    def _info(self):
        info = _MixtureInfo()
        info.struct_size = ctypes.sizeof(_MixtureInfo)
        self._check(self._lib.dsc_mixture_info(self._h(), ctypes.byref(info)))
        return info

    @property
    def epoch(self):
        return int(self._info().epoch)

    @property
    def step(self):
        return int(self._info().step)

    def __next__(self):
        h = self._handle
        if not h:
            raise ValueError("mixture is closed")
        mb = self._mb
        rc = self._next(h, self._mb_ref)
        if rc == _EOF:
            raise StopIteration
        if rc < 0:
            self._check(rc)
        n = mb.samples
        out = {}
        v, vref, move, empty = self._view, self._view_ref, ctypes.memmove, np.empty
        for f, (view, name, dt, shape, var) in enumerate(self._plan):
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

    # -- resume --
    def _identity(self):
        return {"datasets": [s.dataset for s in self.sources], "weights": self.weights,
                "repeat": [s.repeat for s in self.sources],
                "seed": self.seed, "batch_size": self.batch_size, "exhausted": self.exhausted,
                "pack": None}

    def _raw_state(self):
        h = self._h()
        need = self._check(self._lib.dsc_mixture_state_save(h, None, 0))
        buf = ctypes.create_string_buffer(need)
        n = self._check(self._lib.dsc_mixture_state_save(h, buf, need))
        return buf.raw[:n]

    @staticmethod
    def _sections(raw, count):
        """Per source: (used, its record's bytes) of a dsc_mixture_state_save blob (layout in
        client/lib/mixture.c)."""
        out, off = [], 72
        u = lambda at: int.from_bytes(raw[at:at + 8], "little")  # noqa: E731
        for _ in range(count):
            clen = u(off + 88)
            slen = u(off + 96 + clen)
            end = off + 96 + clen + 8 + slen
            out.append((u(off + 16), u(off + 8), raw[off:end]))
            off = end
        return out

    def state_dict(self):
        """{"dscache_mixture": {...}}: the library's mixture state (hex, "state": per source its
        loader's state at the start of the source batch being read and the samples of it used,
        the quota counters, the epoch and step) with what the composition depends on
        ("identity": datasets, weights, repeat, seed, batch_size, exhausted, checked by
        load_state_dict) and per source {"skip", "record"}: the same on every rank, resumable
        on any world size."""
        raw = self._raw_state()
        secs = self._sections(raw, len(self.sources))
        return {"dscache_mixture": {"version": _MIX_STATE_VERSION + 1,
                                    "identity": self._identity(),
                                    "world_size": self.world_size, "rank": self.rank,
                                    "state": raw.hex(),
                                    "sources": [{"skip": used, "record": rec.hex()}
                                                for used, _, rec in secs]}}

    def load_state_dict(self, state):
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
            raw = bytes.fromhex(st["state"])
        except (TypeError, ValueError):
            raise BadState(-4024, "dscache_mixture['state'] is not a hex string",
                           "DSC_EBADSTATE") from None
        buf = ctypes.create_string_buffer(raw, len(raw))
        self._check(self._lib.dsc_mixture_state_load(self._h(), buf, len(raw)))

    # -- information --
    def stats(self):
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
            d = {}
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
                d[name] = value
            per[src.dataset] = {"samples": int(n.value), "wire_bytes": d["wire_bytes"],
                                "epoch_wire_bytes": d["epoch_wire_bytes"],
                                "stall_seconds": d["stall_seconds"], "source_epoch": epochs[k],
                                "bottleneck": d["bottleneck"], "loader": d}
            total += d["stall_seconds"]
        for v in per.values():
            v["stall_share"] = v["stall_seconds"] / total if total > 0 else 0.0
        starving = (self.sources[info.starving_source].dataset
                    if info.starving_source >= 0 else None)
        return {"epoch": int(info.epoch), "step": int(info.step),
                "samples": sum(v["samples"] for v in per.values()),
                "stall_seconds": total, "sources": per, "starving_source": starving}
