"""dscache: Python binding of libdscache (ctypes over the C ABI; next() in C where built).

    import dscache
    loader = dscache.Loader(servers="10.0.0.1:7070,10.0.0.2:7070", dataset="imagenet",
                            batch_size=256, seed=0)   # rank/world size: see below
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader:          # dict: field name -> array [B, ...field shape]
            train_step(batch["image"], batch["label"])

    ds = dscache.MapDataset(servers="10.0.0.1:7070", dataset="imagenet")  # map-style
    sample, batch = ds[12], ds[[5, 900, 12]]   # dicts of arrays: one sample, a batch [3, ...]

    with dscache.Writer("data/mine", fields={"input_ids": "i32[]", "label": "i64"}) as w:
        for rec in records:           # dicts of arrays, lists, scalars (see dscache.Writer)
            w.write(rec)

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
family subclasses: Unavailable, NotFound, Corrupt, BadState, InvalidOption, DecodeError (an
image of Loader(decode=...) that does not decode), DatasetChangedError (the dataset was replaced
on the server while the loader read it). The library's log
lines go to the Python logger "dscache"; DSCACHE_LOG=error|warn|info|debug sets its level (and
prints to stderr when the application configured no logging handler).
"""

# The package by concern: _capi (ctypes declarations, library search and load), _errors (the
# error families), _logbridge (C log lines -> logging), _ranks (rank, world size, device),
# _arrays (DLPack and numpy views), _fast (the compiled next(), optional), loader (Loader,
# Image), mapds (MapDataset, over dsc_reader_*), writer (Writer); torch (dscache.torch) on top;
# _types (the names the annotations use; py.typed marks the package as typed).
from ._errors import (BadState, Corrupt, DatasetChangedError, DecodeError, Error, InvalidOption,
                      NotFound, Unavailable)
from . import _capi
from ._capi import BOTTLENECKS, STALL_WAITS, _load, _Options, _Stats  # noqa: F401 (public; private ones for tests)
from ._ranks import _parse_device, resolve_rank  # noqa: F401
from .loader import Image, Loader
from .mapds import MapDataset
from .mixture import Mixture, Source
from .writer import Writer

__version__ = "0.1.0"
__all__ = ["Loader", "Source", "Mixture", "MapDataset", "Writer", "Image", "Error", "Unavailable", "NotFound", "Corrupt",
           "BadState", "InvalidOption", "DecodeError", "DatasetChangedError", "resolve_rank",
           "__version__",
           "library_path", "fastpath", "fastpath_reason"]

# A batch owns its slot until its last array / tensor is freed (see docs/python.md): batches
# may be kept past the next one, zero-copy.
batches_outlive_next = True

_load()  # at import: a missing library is reported here, with every place tried

# The compiled next() (client/python/ext/fastpath.c), optional: its path, or None and why not.
from . import _fast  # noqa: E402
_fast.load()
fastpath = _fast.path
fastpath_reason = _fast.reason
library_path = _capi.library_path

# The public classes say they are dscache's, wherever they are defined.
for _cls in (Loader, Source, Mixture, MapDataset, Writer, Image, Error, Unavailable, NotFound, Corrupt, BadState,
             InvalidOption, DecodeError, DatasetChangedError):
    _cls.__module__ = "dscache"
del _cls
