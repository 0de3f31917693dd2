"""dscache arrays: DLPack capsules for torch, numpy views of batch slots, and the holds that
keep a batch's slot (and its loader) alive while an array or tensor of it lives."""

import ctypes
import threading
from typing import Any, Dict, Optional, Tuple

from ._capi import _DELETER, _DLManagedTensor, _check
from ._errors import Error

_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
# The destructor gets the capsule while it is being freed: it must not take a reference, so
# these two are called on the raw pointer.
_PyCapsule_IsValid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))
_PyCapsule_GetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@_CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule_ptr: Optional[int]) -> None:
    # An unconsumed capsule (still named "dltensor") owns its DLManagedTensor: free it.
    if _PyCapsule_IsValid(capsule_ptr, b"dltensor"):
        ptr = _PyCapsule_GetPointer(capsule_ptr, b"dltensor")
        managed = ctypes.cast(ptr, ctypes.POINTER(_DLManagedTensor))
        if managed.contents.deleter:
            managed.contents.deleter(managed)


def _torch_from_dlpack(capsule: Any) -> Any:
    import torch
    if hasattr(torch, "from_dlpack"):
        return torch.from_dlpack(capsule)
    return torch.utils.dlpack.from_dlpack(capsule)


class _Hold:
    """One reference to a batch (dsc_batch_retain when batch is given, or the one
    dsc_loader_next_views took with retained; a DLPack tensor's own otherwise) and to its
    loader: the loader is destroyed only after the last one goes."""

    def __init__(self, loader: Any, batch: Optional[int], retained: bool = False) -> None:
        self._loader = loader
        self._batch = None
        with loader._hold_lock:
            loader._holds += 1
        if retained:  # the reference was taken already (dsc_loader_next_views)
            self._batch = batch
        elif batch is not None:
            try:
                _check(loader._lib.dsc_batch_retain(batch))
            except Error:
                loader._unhold()
                raise
            self._batch = batch

    def __del__(self) -> None:
        loader = self.__dict__.get("_loader")
        if loader is None:
            return
        if self._batch is not None and loader._handle:
            loader._lib.dsc_batch_release(self._batch)
        loader._unhold()


class _HostArray:
    """A batch field's host memory for numpy (the array's base): keeps the batch's _Hold."""

    def __init__(self, hold: _Hold, ptr: int, shape: Tuple[int, ...], dtype: Any) -> None:
        self._hold = hold
        self.__array_interface__ = {"data": (ptr, False), "shape": shape,
                                    "typestr": dtype.str, "version": 3}


# DLPack tensors handed to torch: their deleter is wrapped so that the loader's _Hold goes with
# the library's reference (torch calls it when the tensor's storage is freed, any thread).
_dlpack_holds: Dict[Optional[int], Tuple[Any, Any]] = {}
_dlpack_holds_lock = threading.Lock()


@_DELETER
def _dlpack_deleter(managed: Any) -> None:
    key = ctypes.cast(managed, ctypes.c_void_p).value
    with _dlpack_holds_lock:
        orig, hold = _dlpack_holds.pop(key, (None, None))
    # After the loader was destroyed (only at exit) its batches are gone: nothing to release.
    if orig is not None and hold is not None and hold._loader._handle:
        orig(managed)
    del hold


def _dlpack_track(managed: Any, hold: _Hold) -> None:
    key = ctypes.cast(managed, ctypes.c_void_p).value
    with _dlpack_holds_lock:
        # A copy of the function address: the field object would read the struct's new value.
        deleter = ctypes.cast(managed.contents.deleter, ctypes.c_void_p).value
        assert deleter is not None  # the library's tensors have one
        orig = _DELETER(deleter)
        _dlpack_holds[key] = (orig, hold)
    managed.contents.deleter = _dlpack_deleter
