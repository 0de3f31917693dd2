"""dscache.torch: the loader as a torch IterableDataset, for torch.utils.data.DataLoader, and
MapDataset, the map-style dataset for the caller's own sampler.

    ds = dscache.torch.Dataset(servers="10.0.0.1:7070", dataset="imagenet", batch_size=256,
                               device=torch.device("cuda", local_rank), transform=normalize)
    dl = dscache.torch.DataLoader(ds)   # = DataLoader(ds, batch_size=None): batches come made
    for epoch in range(epochs):
        ds.set_epoch(epoch)
        for batch in dl: ...

dscache prefetches, decodes and collates in its own C threads, so the DataLoader runs with
num_workers=0 (a worker process raises a RuntimeError saying so) and batch_size=None: a
DataLoader that would batch the batches again (its default batch_size=1 adds a leading
dimension: [1, 256, 3, 32, 32]) raises a ValueError saying so when iterated.
"""

import sys as _sys
from types import FrameType
from typing import Any, Dict, Iterator, Optional, Union

import torch as _torch
import torch.utils.data as _data

from . import Loader, resolve_rank  # noqa: F401  (resolve_rank re-exported)
from . import mapds as _mapds
from ._types import Batch, State, Stats

_WORKERS_MSG = ("dscache.torch.Dataset prefetches and decodes in its own threads and cannot run "
                "in DataLoader worker processes: use DataLoader(ds, batch_size=None, "
                "num_workers=0)")


_COLLATE_MSG = ("dscache.torch.Dataset yields whole batches, but this DataLoader batches them "
                "again (batch_size=%s): every tensor would gain a leading dimension of %s "
                "(e.g. [%s, batch_size, ...] instead of [batch_size, ...]). Use "
                "dscache.torch.DataLoader(ds) or DataLoader(ds, batch_size=None); the batch "
                "size is the dataset's batch_size=")


def _collating_loader() -> Union[int, str, None]:
    """The batch size of the DataLoader iterating this dataset when it collates (auto
    collation: batch_size not None), else None. Looks up the calling frames for torch's
    DataLoader iterator (or its fetcher), which call iter(dataset) while they are built."""
    try:
        frame: Optional[FrameType] = _sys._getframe(2)
    except ValueError:
        return None
    base = getattr(getattr(_data, "dataloader", None), "_BaseDataLoaderIter", None)
    found = None
    for _ in range(12):
        if frame is None:
            break
        obj = frame.f_locals.get("self")
        if base is not None and isinstance(obj, base):
            if getattr(obj, "_auto_collation", False):
                return getattr(getattr(obj, "_index_sampler", None), "batch_size", "?")
            return None
        if obj is not None and type(obj).__name__ == "_IterableDatasetFetcher":
            if frame.f_locals.get("auto_collation", getattr(obj, "auto_collation", False)):
                found = "?"
        frame = frame.f_back
    return found


def DataLoader(dataset: "Dataset", **kwargs: Any) -> Any:
    """torch.utils.data.DataLoader over a dscache.torch.Dataset, set as it needs:
    batch_size=None (the batches come made: no collation, no added dimension) and
    num_workers=0 (dscache decodes in its own threads). Other keyword arguments (pin_memory,
    ...) are passed on; another batch_size or num_workers raises ValueError."""
    if not isinstance(dataset, Dataset):
        raise TypeError("dscache.torch.DataLoader takes a dscache.torch.Dataset, not %s"
                        % type(dataset).__name__)
    for key, want in (("batch_size", None), ("num_workers", 0)):
        if key in kwargs and kwargs[key] != want:
            raise ValueError("dscache.torch.DataLoader: %s must be %r (%s=%r given; the batch "
                             "size is the Dataset's batch_size=%d)"
                             % (key, want, key, kwargs[key], dataset.loader.batch_size))
        kwargs[key] = want
    return _data.DataLoader(dataset, **kwargs)


class Dataset(_data.IterableDataset):
    """An IterableDataset of whole batches (dicts of tensors) from a dscache.Loader.

    Takes the same arguments as dscache.Loader (output defaults to "torch"; device may be a
    torch.device; transform= is applied to each batch dict, on the device when batches are on
    it; rank and world_size default to torch.distributed's when initialised, else RANK /
    WORLD_SIZE). Each iteration yields the rest of the current epoch; the next iteration the
    following epoch, or call set_epoch(epoch) first. len() is the batches per epoch of this rank.
    state_dict() is a plain dict of strings that torch.save / torch.load(weights_only=True) keep.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        kwargs.setdefault("output", "torch")
        self.loader = Loader(*args, **kwargs)

    def __iter__(self) -> Iterator[Batch]:
        if _data.get_worker_info() is not None:
            raise RuntimeError(_WORKERS_MSG)
        bs = _collating_loader()
        if bs is not None:
            raise ValueError(_COLLATE_MSG % (bs, bs, bs) + "%d" % self.loader.batch_size)
        return self.loader

    def __len__(self) -> int:
        return len(self.loader)

    def __getstate__(self) -> Dict[str, Any]:
        # DataLoader pickles the dataset for worker processes started with "spawn".
        raise TypeError(_WORKERS_MSG)

    def set_epoch(self, epoch: int) -> None:
        """Starts `epoch` from its first batch (as DistributedSampler.set_epoch)."""
        self.loader.set_epoch(epoch)

    def state_dict(self) -> State:
        return self.loader.state_dict()

    def load_state_dict(self, state: State) -> None:
        self.loader.load_state_dict(state)

    def stats(self) -> Stats:
        return self.loader.stats()

    def close(self) -> None:
        self.loader.close()

    @property
    def rank(self) -> int:
        return self.loader.rank

    @property
    def world_size(self) -> int:
        return self.loader.world_size

    def __repr__(self) -> str:
        return "dscache.torch.Dataset(dataset=%r, rank=%d/%d)" % (
            self.loader.dataset, self.loader.rank, self.loader.world_size)


class MapDataset(_mapds.MapDataset):
    """dscache.MapDataset with output="torch" by default: ds[i] a dict of tensors, ds[[...]]
    and ds.__getitems__(indices) a batch dict of [B, ...] tensors collated in C (zero-copy over
    the batch). For torch.utils.data.DataLoader unchanged, workers or not:

        ds = dscache.torch.MapDataset(servers=..., dataset="imagenet")
        sampler = DistributedSampler(ds, shuffle=True)      # or any sampler
        dl = DataLoader(ds, batch_size=256, sampler=sampler, num_workers=2)

    Where torch's fetcher calls __getitems__ (torch >= 2.0, and this 1.13 build) a batch is one
    C request, and torch's default collate passes it on as it is (this module registers
    dscache.mapds.Batch with it). Where it does not, the fetcher calls ds[i] per sample and
    collates the list; or give the DataLoader whole batches of indices: DataLoader(ds,
    sampler=BatchSampler(sampler, 256, drop_last=False), batch_size=None), where ds[list] is one
    C request. A custom collate_fn receives the Batch dict, not a list of samples: pass
    getitems=False for collate functions that expect the list. Variable-length fields have no
    per-sample stacking: use __getitems__ (values + offsets) or pad=. Takes
    dscache.MapDataset's arguments."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("output", "torch")
        super().__init__(*args, **kwargs)


def _collated(batch: Batch, *, collate_fn_map: Optional[Dict[Any, Any]] = None) -> Batch:
    """torch's default_collate of a dscache Batch (batch[0] is its marker): the batch itself, its
    numpy arrays as tensors (zero-copy)."""
    out = {}
    for key, value in dict.items(batch):
        out[key] = _from_numpy(value) if type(value).__module__ == "numpy" else value
    return out


_from_numpy = _torch.from_numpy


def _register_collate() -> None:
    fn_map = getattr(getattr(_data, "_utils", None), "collate", None)
    fn_map = getattr(fn_map, "default_collate_fn_map", None)
    if fn_map is not None:
        fn_map[_mapds._CollatedMarker] = _collated


_register_collate()

__all__ = ["Dataset", "DataLoader", "MapDataset", "resolve_rank"]
del _torch
