"""dscache.torch: the loader as a torch IterableDataset, for torch.utils.data.DataLoader.

    ds = dscache.torch.Dataset(servers="10.0.0.1:7070", dataset="imagenet", batch_size=256,
                               device=torch.device("cuda", local_rank), transform=normalize)
    dl = torch.utils.data.DataLoader(ds, batch_size=None)   # batches come made: no collation
    for epoch in range(epochs):
        ds.set_epoch(epoch)
        for batch in dl: ...

dscache prefetches, decodes and collates in its own C threads, so the DataLoader runs with
num_workers=0 (a worker process raises a RuntimeError saying so) and batch_size=None.
"""

import torch as _torch
import torch.utils.data as _data

from . import Loader, resolve_rank  # noqa: F401  (resolve_rank re-exported)

_WORKERS_MSG = ("dscache.torch.Dataset prefetches and decodes in its own threads and cannot run "
                "in DataLoader worker processes: use DataLoader(ds, batch_size=None, "
                "num_workers=0)")


class Dataset(_data.IterableDataset):
    """An IterableDataset of whole batches (dicts of tensors) from a dscache.Loader.

    Takes the same arguments as dscache.Loader (output defaults to "torch"; device may be a
    torch.device; transform= is applied to each batch dict, on the device when batches are on
    it; rank and world_size default to torch.distributed's when initialised, else RANK /
    WORLD_SIZE). Each iteration yields the rest of the current epoch; the next iteration the
    following epoch, or call set_epoch(epoch) first. len() is the batches per epoch of this rank.
    state_dict() is a plain dict of strings that torch.save / torch.load(weights_only=True) keep.
    """

    def __init__(self, *args, **kwargs):
        super().__init__()
        kwargs.setdefault("output", "torch")
        self.loader = Loader(*args, **kwargs)

    def __iter__(self):
        if _data.get_worker_info() is not None:
            raise RuntimeError(_WORKERS_MSG)
        return self.loader

    def __len__(self):
        return len(self.loader)

    def __getstate__(self):
        # DataLoader pickles the dataset for worker processes started with "spawn".
        raise TypeError(_WORKERS_MSG)

    def set_epoch(self, epoch):
        """Starts `epoch` from its first batch (as DistributedSampler.set_epoch)."""
        self.loader.set_epoch(epoch)

    def state_dict(self):
        return self.loader.state_dict()

    def load_state_dict(self, state):
        self.loader.load_state_dict(state)

    def stats(self):
        return self.loader.stats()

    def close(self):
        self.loader.close()

    @property
    def rank(self):
        return self.loader.rank

    @property
    def world_size(self):
        return self.loader.world_size

    def __repr__(self):
        return "dscache.torch.Dataset(dataset=%r, rank=%d/%d)" % (
            self.loader.dataset, self.loader.rank, self.loader.world_size)


__all__ = ["Dataset", "resolve_rank"]
del _torch
