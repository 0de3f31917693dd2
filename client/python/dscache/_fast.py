"""The compiled next() (dscache/_fastpath<EXT_SUFFIX>, built from client/python/ext/fastpath.c):
found in this package (a wheel, cmake --install) or beside the libdscache that was loaded (the
build tree). Optional: without it, or with DSCACHE_FASTPATH=0, the ctypes path serves every
batch, the same arrays byte for byte, at a higher cost per batch (docs/python.md). `dscache.
fastpath` says which: the module's path, or None with `dscache.fastpath_reason` saying why."""

import importlib.machinery
import importlib.util
import logging
import os
from typing import Any, Iterator, Optional

from . import _capi

_NAME = "_fastpath"
module: Any = None
path: Optional[str] = None
reason: Optional[str] = "not loaded yet"


def _candidates() -> Iterator[str]:
    dirs = [os.path.dirname(os.path.abspath(__file__))]
    lib = _capi.library_path
    if lib and os.sep in lib:
        dirs.append(os.path.dirname(os.path.realpath(lib)))
        dirs.append(os.path.dirname(os.path.abspath(lib)))
    seen = set()
    for d in dirs:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            p = os.path.join(d, _NAME + suffix)
            if p not in seen:
                seen.add(p)
                yield p


def load() -> Any:
    """The module, or None (reason says why). Once, at import."""
    global module, path, reason
    if os.environ.get("DSCACHE_FASTPATH", "") == "0":
        reason = "DSCACHE_FASTPATH=0"
        return None
    tried = []
    for p in _candidates():
        if not os.path.exists(p):
            continue
        try:
            spec = importlib.util.spec_from_file_location("dscache." + _NAME, p)
            if spec is None or spec.loader is None:
                raise ImportError("not a module Python can load")
            m = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(m)
        except ImportError as e:  # built for another Python: say so, use ctypes
            tried.append("%s: %s" % (p, e))
            continue
        module, path, reason = m, p, None
        return m
    reason = ("not found (CMake builds it where Python's headers are: python3-dev)" if not tried
              else "; ".join(tried))
    if tried:  # present but unusable: worth a line, the batches come slower
        logging.getLogger("dscache").warning("dscache: compiled next() not used: %s", reason)
    return None
