"""dscache.Loader(order=sampler): the caller's order, pulled from the sampler on next()'s thread
and pushed into the library ahead of need (dsc_loader_push_order), so that the loader plans
fetches and hints its servers along it (docs/order.md#the-callers-order)."""

import ctypes
import itertools
import operator
from typing import Any, Callable, Optional

from ._capi import _check
from ._errors import InvalidOption

_EINVAL = -22
_PUSH_END = 1


def _is_index(x: Any) -> bool:
    """Whether x is one sample index: an int-like (int, numpy integer, a one-element integer
    tensor), not a bool."""
    if isinstance(x, bool) or type(x).__name__ == "bool_":
        return False
    try:
        operator.index(x)
    except TypeError:
        return False
    return True


def _describe(x: Any) -> str:
    text = repr(x)
    if len(text) > 60:
        text = text[:57] + "..."
    return "%s (%s)" % (text, type(x).__name__)


class OrderFeed:
    """The caller's order of one loader. Each pass over `source` (iter(source) at the first
    next() of an epoch) is one epoch: a flat iterable of indices is cut into batches of
    batch_size (drop_last drops the short last one), an iterable of index batches gives the
    batches as they are (1 .. batch_size indices each). top_up() pulls and pushes while the
    library has room; reset() starts the next pass from the source's start (set_epoch,
    load_state_dict, the end of an epoch)."""

    def __init__(self, source: Any, batch_size: int, drop_last: bool, samples: int,
                 lib: Any) -> None:
        import numpy as np
        self._np = np
        self.source = source
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.samples = samples
        self._lib = lib
        self.reset()

    def reset(self) -> None:
        self._it: Any = None
        self._ended = False
        self._pos = 0       # indices pulled this epoch
        self._batches = 0   # batches pulled this epoch
        self.mode: Optional[str] = None  # "indices" or "batches", from the first item of a pass

    def _start(self) -> None:
        try:
            it = iter(self.source)
        except TypeError:
            raise TypeError("order must be an iterable of sample indices or of index batches "
                            "(a sampler), got %s" % _describe(self.source)) from None
        first = next(it, _NOTHING)
        if first is _NOTHING:
            raise ValueError(
                "order yielded no index for this epoch (a generator or iterator is used up "
                "after one pass: give a sampler, list or array that can be iterated again)")
        if _is_index(first):
            self.mode = "indices"
        elif isinstance(first, (str, bytes)) or not hasattr(first, "__len__"):
            raise TypeError("order: its first item (position 0), %s, is neither a sample index "
                            "(an int) nor a batch of them" % _describe(first))
        else:
            self.mode = "batches"
            if self.drop_last:
                raise InvalidOption(
                    _EINVAL, "order yields index batches, which the loader hands out as they "
                    "are: drop_last does not apply (as with torch's batch_sampler)",
                    "DSC_EINVAL")
        self._it = itertools.chain((first,), it)

    def _indices(self, items: Any, where: Callable[[int], str]) -> Any:
        """items as a contiguous uint64 array, after checking each is an index in range."""
        np = self._np
        try:
            a = np.asarray(items)
        except (ValueError, TypeError):
            a = None
        # numpy takes True as 1 in a list of ints: a bool is refused, not read as an index.
        if a is None or a.ndim != 1 or a.dtype.kind not in "iu" or (
                isinstance(items, (list, tuple)) and any(x.__class__ is bool for x in items)):
            for k, x in enumerate(items):
                if not _is_index(x):
                    raise TypeError("order: %s is not a sample index (an int)%s"
                                    % (_describe(x), where(k)))
            a = np.asarray([operator.index(x) for x in items], dtype=np.int64)
        if a.size and a.dtype.kind == "i" and a.min() < 0:
            k = int(np.argmax(a < 0))
            raise IndexError("order: index %d%s is negative: sample indices are 0 .. %d "
                             "(negative ones are not taken Python-style, from the end)"
                             % (int(a[k]), where(k), self.samples - 1))
        if a.size and a.max() >= self.samples:
            k = int(np.argmax(a >= self.samples))
            raise IndexError("order: index %d%s is out of range: the dataset has %d samples "
                             "(indices 0 .. %d)" % (int(a[k]), where(k), self.samples,
                                                    self.samples - 1))
        return np.ascontiguousarray(a, dtype=np.uint64)

    def _pull(self) -> Any:
        """The next batch of this pass as a uint64 array, or None at its end."""
        pos, b = self._pos, self._batches
        if self.mode == "indices":
            items = list(itertools.islice(self._it, self.batch_size))
            if not items or (self.drop_last and len(items) < self.batch_size):
                return None
            arr = self._indices(items, lambda k: " at position %d of the epoch's order"
                                % (pos + k))
        else:
            items = next(self._it, _NOTHING)
            if items is _NOTHING:
                return None
            if _is_index(items) or isinstance(items, (str, bytes)) or \
                    not hasattr(items, "__len__"):
                raise TypeError("order: batch %d is %s, not a batch of indices (the order's "
                                "first item was a batch)" % (b, _describe(items)))
            n = len(items)
            if n == 0 or n > self.batch_size:
                raise InvalidOption(
                    _EINVAL, "order: batch %d holds %d indices; a batch holds 1 .. batch_size "
                    "(%d)" % (b, n, self.batch_size), "DSC_EINVAL")
            arr = self._indices(items, lambda k: " (batch %d, item %d: position %d of the "
                                "epoch's order)" % (b, k, pos + k))
        self._pos += len(arr)
        self._batches += 1
        return arr

    def top_up(self, handle: Any) -> int:
        """Pulls the order and pushes it while the library has room (then the end mark once the
        pass is over). Returns the room left."""
        lib = self._lib
        room = lib.dsc_loader_order_room(handle)
        if self._it is None and not self._ended and room > 0:
            self._start()
        while room > 0 and not self._ended:
            arr = self._pull()
            if arr is None:
                room = _check(lib.dsc_loader_push_order(handle, None, 0, _PUSH_END), handle)
                self._ended = True
                break
            room = _check(lib.dsc_loader_push_order(
                handle, arr.ctypes.data_as(ctypes.c_void_p), len(arr), 0), handle)
        return room

    def epoch_done(self) -> None:
        """The library handed out this pass's end: the next next() starts a new pass."""
        self.reset()

    def batches_per_epoch(self) -> int:
        """len(): from len(source) (indices, cut into batches, or batches)."""
        try:
            n = len(self.source)
        except TypeError:
            raise TypeError("len(): the order (%s) has no len()" % type(self.source).__name__) \
                from None
        mode = self.mode
        if mode is None:
            first = next(iter(self.source), _NOTHING)
            mode = "indices" if first is _NOTHING or _is_index(first) else "batches"
        if mode == "batches":
            return n
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


_NOTHING: Any = object()
