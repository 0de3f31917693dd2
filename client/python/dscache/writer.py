"""dscache.Writer: writes a dataset directory from Python records (ctypes over dsc_writer_*).

    with dscache.Writer("data/mine", name="mine", compress="lz4",
                        fields={"input_ids": "i32[]", "label": "i64",
                                "image": "u8[3,32,32]"}) as w:
        for rec in records:      # dicts (or tuples in field order) of arrays, lists, scalars
            w.write(rec)
        # or whole batches: w.write_batch({"label": labels, "input_ids": [ids0, ids1, ...]})

Compression runs on the library's threads; the directory appears only when the `with` block
ends normally (atomic finish, docs/ingest.md); an exception inside it removes everything.
"""

import ctypes
import errno
import json
import os
import sys
import time
from types import TracebackType
from typing import Any, Dict, List, Literal, Mapping, Optional, Sequence, Tuple, Type, Union, cast

from . import _capi
from ._errors import Error, InvalidOption

_EINVAL = -22
_PENDING_BYTES = 1 << 20  # write() hands records to the library in batches of about this much
_CHUNK_MAX = 256 << 20  # DSC_CHUNK_MAX_RAW: one sample's bytes must fit one chunk

# dtype names the library takes, with their numpy spelling (bf16: raw bits as uint16).
_DTYPES = {"u8": "uint8", "i8": "int8", "u16": "uint16", "i16": "int16", "u32": "uint32",
           "i32": "int32", "i64": "int64", "f16": "float16", "bf16": "bfloat16",
           "f32": "float32", "f64": "float64"}


def _invalid(message: str) -> InvalidOption:
    return InvalidOption(_EINVAL, message, "DSC_EINVAL")


# A field's spec: "DTYPE[DIMS]" ("i32[]", "u8[3,32,32]") or (dtype, shape), None in the shape
# for the variable leading dimension.
FieldSpec = Union[str, Tuple[Any, Sequence[Optional[int]]], List[Any]]

# DSC_DTYPE_* in order: the dtype codes dsc_field_spec_parse returns.
_CODES: Tuple[Optional[str], ...] = (None, "u8", "i8", "u16", "i16", "u32", "i32", "i64", "f16",
                                     "bf16", "f32", "f64")


def _parse_spec(name: str, spec: "FieldSpec") -> Tuple[str, List[Optional[int]]]:
    """(code, dims) of one field's spec, parsed by the library (dsc_field_spec_parse: the grammar
    the CLI and the C writer take too): a string "DTYPE[DIMS]" or (dtype, shape), None in dims
    for the variable leading dimension; InvalidOption naming the field, the text and where."""
    import numpy as np

    if isinstance(spec, (tuple, list)) and len(spec) == 2:
        dtype, shape = spec
        if not (isinstance(dtype, str) and dtype in _DTYPES):
            try:
                dtype = np.dtype(dtype).name  # np.int32, "<i4", ...
            except TypeError:
                dtype = str(dtype)
        try:
            shape = tuple(shape)
        except TypeError:
            raise _invalid("field %r: spec %r: the shape is not a sequence" % (name, spec)) \
                from None

        def dim(d: Any) -> str:
            if d is None:
                return "?"
            try:
                return str(int(d)) if int(d) == d else repr(d)
            except (TypeError, ValueError):
                return repr(d)
        text = dtype + ("[%s]" % ",".join(dim(d) for d in shape) if shape else "")
    elif isinstance(spec, str):
        text = spec
    else:
        raise _invalid("field %r: spec %r: a string like 'i32[]' or (dtype, shape)"
                       % (name, spec))
    if "\x00" in text:  # the library reads a C string: it would stop there
        raise _invalid("field %r: spec %r holds a NUL character" % (name, spec))
    lib = _capi._load()
    info = _capi._FieldInfo()
    err = ctypes.create_string_buffer(512)
    try:
        encoded = text.encode()
    except UnicodeEncodeError:
        encoded = text.encode(errors="backslashreplace")
    if lib.dsc_field_spec_parse(encoded, ctypes.byref(info), err, len(err)) < 0:
        raise _invalid("field %r: %s" % (name, err.value.decode(errors="replace")))
    if info.name:
        raise _invalid("field %r: spec %r: give the type alone, e.g. 'u8[3,32,32]' (the name is "
                       "the key)" % (name, spec))
    dims = [None if d < 0 else int(d) for d in info.shape[:info.ndim]]
    code = _CODES[info.dtype]
    assert code is not None  # the library parsed a dtype
    return code, dims


class _Field:
    """One field: name, dtype code ("i32"), numpy dtype, shape with None for a variable dim."""

    def __init__(self, name: str, spec: "FieldSpec") -> None:
        import numpy as np

        code, dims = _parse_spec(name, spec)
        self.name = name
        self.code = code
        self.np_dtype = np.dtype("uint16" if code == "bf16" else _DTYPES[code])
        self.shape: Tuple[Any, ...] = tuple(dims)
        self.variable = bool(dims) and dims[0] is None
        self.row_shape: Tuple[Any, ...] = tuple(dims[1:]) if self.variable else ()
        self.spec = "%s:%s%s" % (name, code, "" if not dims else "[%s]" % ",".join(
            "?" if d is None else str(d) for d in dims))
        self.kind = self.np_dtype.kind if code != "bf16" else "x"
        if self.kind in "iu":
            info = np.iinfo(self.np_dtype)
            self.lo, self.hi = int(info.min), int(info.max)
        self.row_elems = int(np.prod(self.row_shape)) if self.variable else 0
        self.sample_bytes = 0 if self.variable else int(np.prod(self.shape)) * \
            self.np_dtype.itemsize

    def convert(self, value: Any, position: int) -> Any:
        """value as a C-contiguous little-endian array of this field's dtype and shape, or
        InvalidOption naming the field and the record."""
        import numpy as np

        # The common cases first, checked cheaply: a Python number for a scalar field, an array
        # that is already what the field holds.
        if not self.shape:
            t = type(value)
            if t is int or t is bool:
                if self.kind == "f":
                    return value
                if self.kind in "iu":
                    if self.lo <= value <= self.hi:
                        return value
                    raise _invalid("field %r of record %d: %d does not fit %s (%s)"
                                   % (self.name, position, value, self.np_dtype.name, self.spec))
            elif t is float and self.kind == "f":
                return value
            elif isinstance(value, np.generic) and value.dtype == self.np_dtype:
                return value
        if isinstance(value, np.ndarray) and value.dtype == self.np_dtype and \
                value.flags.c_contiguous and (value.shape == self.shape if not self.variable else (
                    value.ndim == len(self.shape) and value.shape[1:] == self.row_shape)) and \
                value.dtype.byteorder != ">":
            return value
        where = "field %r of record %d" % (self.name, position)
        if value is None:
            raise _invalid("%s: None (%s)" % (where, self.spec))
        if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor
            t = value.detach().cpu()
            if str(t.dtype) == "torch.bfloat16":
                if self.code != "bf16":
                    raise _invalid("%s: bfloat16 values for %s" % (where, self.spec))
                import torch

                value = t.view(torch.int16).numpy().view(np.uint16)
            else:
                value = t.numpy()
        if isinstance(value, str):
            if self.code not in ("u8", "i8"):
                raise _invalid("%s: a str for %s (str goes into u8 fields, as UTF-8)"
                               % (where, self.spec))
            value = value.encode("utf-8")
        if isinstance(value, (bytes, bytearray, memoryview)):
            if self.code not in ("u8", "i8"):
                raise _invalid("%s: bytes for %s (bytes go into u8/i8 fields)" % (where, self.spec))
            arr = np.frombuffer(value, dtype=self.np_dtype)
        else:
            try:
                arr = np.asarray(value)
            except (ValueError, TypeError) as e:  # ragged lists and the like
                raise _invalid("%s: cannot be read as an array: %s" % (where, e)) from None
            arr = self._cast(arr, where)
        if self.variable:
            ok = arr.ndim == len(self.shape) and arr.shape[1:] == self.row_shape
        else:
            ok = arr.shape == self.shape
        if not ok:
            if self.variable:
                expected = "(N, %s)" % ", ".join(map(str, self.row_shape)) if self.row_shape \
                    else "(N,)"
            else:
                expected = str(tuple(self.shape))
            raise _invalid("%s: shape %s, expected %s (%s)" % (where, tuple(arr.shape), expected,
                                                               self.spec))
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        return np.ascontiguousarray(arr)

    def _cast(self, arr: Any, where: str) -> Any:
        import numpy as np

        want = self.np_dtype
        if arr.dtype == want:
            return arr
        kind, want_kind = arr.dtype.kind, want.kind
        if arr.size == 0 and kind == "f" and arr.dtype == np.float64:
            return arr.astype(want)  # np.asarray([]) is float64: an empty list fits any field
        if self.code == "bf16":
            raise _invalid("%s: %s values for %s (bf16 takes torch.bfloat16 tensors or their "
                           "raw bits as uint16)" % (where, arr.dtype, self.spec))
        if kind in "iub" and want_kind in "iu":
            if arr.size:
                info = np.iinfo(want)
                lo, hi = arr.min(), arr.max()
                if lo < info.min or hi > info.max:
                    raise _invalid("%s: values %d..%d do not fit %s (%s)"
                                   % (where, lo, hi, want.name, self.spec))
            return arr.astype(want)
        if kind in "iub" and want_kind == "f":
            return arr.astype(want)
        if kind == "f" and want_kind == "f":
            return arr.astype(want)
        raise _invalid("%s: %s values for %s" % (where, arr.dtype, self.spec))


class Writer:
    """Writes a dataset directory (shards + manifest.json) at path from records.

    fields: {name: spec}, spec "i64" (scalar), "u8[3,32,32]" (fixed), "i32[]" (a variable number
    of elements), "f32[?,80]" (a variable number of rows of 80), or (dtype, shape) with None for
    the variable dimension; numpy dtype names work too ("int32[]"). name: the dataset name
    (default: path's last component). compress: "lz4" (default), "lz4hc" (level 1..12, default
    9) or "none". shard_bytes / chunk_bytes: target decoded bytes per shard file (64 MiB) and per
    chunk (1 MiB). threads: compression threads (default: the cores). meta: a dict stored as the
    manifest's "meta". progress: a progress line on stderr (default: when stderr is a terminal).
    replace: path may hold a dataset (manifest.json and shard files only; anything else there:
    OSError ENOTEMPTY), which the new one replaces when the writer is closed: it is written
    beside it and swapped in by one rename (renameat2 RENAME_EXCHANGE), so path holds the whole
    old or the whole new dataset at every instant. By default path must not exist
    (FileExistsError, saying replace=True).

    write(rec): rec a dict (keys not in fields are ignored; a missing field is an error) or a
    tuple/list in field order; values numpy arrays, torch tensors, lists, bytes/str (u8 fields),
    ints, floats. Values are cast to the field's dtype when that loses nothing but float
    precision (ints that do not fit, floats into an int field: an error). A dtype or shape
    mismatch raises dscache.InvalidOption (a ValueError) naming the field and the record.

    The directory appears when the writer is closed (the end of the `with` block, or close()):
    everything is written under a hidden temporary directory beside path and renamed. An
    exception inside the `with` block, or abort(), removes everything.
    """

    def __init__(self, path: Union[str, "os.PathLike[str]"], fields: Mapping[str, "FieldSpec"],
                 name: Optional[str] = None, compress: str = "lz4", level: Optional[int] = None,
                 shard_bytes: Optional[int] = None, chunk_bytes: Optional[int] = None,
                 threads: Optional[int] = None, meta: Optional[Dict[str, Any]] = None,
                 progress: Optional[bool] = None, replace: bool = False) -> None:
        import numpy as np  # noqa: F401 (needed by every write; fail early without it)

        if not isinstance(fields, dict) or not fields:
            raise _invalid("fields: a non-empty dict {name: spec}, e.g. {'input_ids': 'i32[]'}")
        self._fields = [_Field(n, s) for n, s in fields.items()]
        self._lib = _capi._load()
        self._handle: Optional[ctypes.c_void_p] = None
        self.path: str = os.fspath(path)
        self.records = 0
        self.bytes = 0
        self.stats: Optional[Dict[str, Any]] = None
        opts = _capi._WriterOptions()
        _capi._check(self._lib.dsc_writer_options_init(ctypes.byref(opts), ctypes.sizeof(opts)))
        keep: List[bytes] = []  # the bytes objects opts points into, alive through create

        def c_str(text: str) -> bytes:
            b = text.encode()
            keep.append(b)
            return b

        opts.path = c_str(self.path)
        opts.name = c_str(name) if name is not None else None
        opts.fields = c_str(",".join(f.spec for f in self._fields))
        opts.compress = c_str(compress)
        opts.level = int(level or 0)
        opts.shard_bytes = int(shard_bytes or 0)
        opts.chunk_bytes = int(chunk_bytes or 0)
        opts.threads = int(threads or 0)
        opts.meta_json = c_str(json.dumps(meta)) if meta is not None else None
        opts.replace = 1 if replace else 0
        handle = ctypes.c_void_p()
        rc = self._lib.dsc_writer_create(ctypes.byref(opts), ctypes.byref(handle))
        if rc < 0:
            raise self._error(rc, None)
        self._handle = handle
        self._progress = sys.stderr.isatty() if progress is None else bool(progress)
        self._start = time.monotonic()
        self._last_draw = 0.0
        self._reset_pending()

    # ---- errors and progress ------------------------------------------------------------------

    def _error(self, rc: int, handle: Optional[ctypes.c_void_p]) -> Exception:
        buf = ctypes.create_string_buffer(1024)
        self._lib.dsc_writer_last_error(handle, buf, len(buf))
        detail = buf.value.decode(errors="replace")
        msg = detail or self._lib.dsc_strerror(rc).decode()
        if rc == -errno.EEXIST:
            return FileExistsError(errno.EEXIST, msg, self.path)
        if rc in (-errno.ENOTEMPTY, -errno.ENOTDIR):
            return OSError(-rc, msg, self.path)
        return _capi._error(rc, msg, self._lib.dsc_err_name(rc).decode())

    def _draw(self, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self._last_draw < 0.2:
            return
        self._last_draw = now
        dt = max(now - self._start, 1e-9)
        sys.stderr.write("\rwriting %s: %d records, %.1f MB, %.1f MB/s%s" % (
            self.path, self.records, self.bytes / 1e6, self.bytes / dt / 1e6,
            "\n" if final else ""))
        sys.stderr.flush()

    def _h(self) -> ctypes.c_void_p:
        if self._handle is None:
            raise _invalid("the writer is closed")
        return self._handle

    # ---- writing ------------------------------------------------------------------------------

    def write(self, rec: Union[Mapping[str, Any], Sequence[Any]]) -> None:
        """Adds one record (see the class docstring)."""
        h = self._h()
        position = self.records
        if isinstance(rec, dict) or hasattr(rec, "keys"):
            arrays = []
            for f in self._fields:
                try:
                    value = cast(Mapping[str, Any], rec)[f.name]
                except KeyError:
                    raise _invalid("record %d has no field %r (it has: %s)" % (
                        position, f.name, ", ".join(repr(k) for k in rec.keys()))) from None
                arrays.append(f.convert(value, position))
        elif isinstance(rec, (tuple, list)):
            if len(rec) != len(self._fields):
                raise _invalid("record %d: %d values, the fields are %s" % (
                    position, len(rec), ", ".join(f.name for f in self._fields)))
            arrays = [f.convert(v, position) for f, v in zip(self._fields, rec)]
        else:
            raise _invalid("record %d: a dict {field: value} or a tuple in field order, not %s"
                           % (position, type(rec).__name__))
        self._stage(arrays, position)
        self.records += 1
        if self._pending_count >= self._pending_cap or self._pending_bytes >= _PENDING_BYTES:
            self._flush()

    # Records from write() are gathered per field (one copy, into reused buffers) and handed to
    # the library in batches of about 1 MiB: one call per batch instead of one per record.

    def _reset_pending(self) -> None:
        import numpy as np

        fixed = self._fixed_bytes = sum(f.sample_bytes for f in self._fields)
        self._var_count = sum(f.variable for f in self._fields)
        self._pending_cap = max(1, min(4096, _PENDING_BYTES // max(fixed, 1)))
        self._pending: List[Any] = []  # per field: an array, or [values, offsets]
        for f in self._fields:
            if f.variable:
                self._pending.append([np.empty(1024 * max(f.row_elems, 1), dtype=f.np_dtype),
                                      np.zeros(self._pending_cap + 1, dtype=np.int64)])
            else:
                self._pending.append(np.empty((self._pending_cap,) + f.shape, dtype=f.np_dtype))
        self._pending_count = 0
        self._pending_bytes = 0

    def _stage(self, arrays: List[Any], position: int) -> None:
        import numpy as np

        extra = 0
        if self._var_count:
            for f, a in zip(self._fields, arrays):
                if f.variable:
                    extra += a.nbytes
        fixed = self._fixed_bytes
        if fixed + extra + 16 * self._var_count > _CHUNK_MAX:
            raise Error(-4014, "record %d: %d bytes of variable fields, over what one chunk can "
                        "hold (%d bytes with the rest of its sample)" % (position, extra,
                                                                        _CHUNK_MAX),
                        "DSC_ETOOLARGE")
        k = self._pending_count
        for i, (f, a) in enumerate(zip(self._fields, arrays)):
            if f.variable:
                vals, offs = self._pending[i]
                start = int(offs[k])
                flat = a.reshape(-1)
                end = start + flat.shape[0]
                if end > vals.shape[0]:
                    grown = np.empty(max(end, 2 * vals.shape[0]), dtype=vals.dtype)
                    grown[:start] = vals[:start]
                    self._pending[i][0] = vals = grown
                vals[start:end] = flat
                offs[k + 1] = end
            else:
                self._pending[i][k] = a
        self._pending_count = k + 1
        self._pending_bytes += fixed + extra
        self.bytes += fixed + extra

    def _flush(self) -> None:
        n = self._pending_count
        if n == 0:
            return
        columns = (_capi._WriterColumn * len(self._fields))()
        keep = []
        for i, f in enumerate(self._fields):
            if f.variable:
                vals, offs = self._pending[i]
                rows_offs = offs[:n + 1] // max(f.row_elems, 1) if f.row_elems > 1 else offs[:n + 1]
                keep.append(rows_offs)
                used = vals[:int(offs[n])]
                columns[i].data = used.ctypes.data if used.nbytes else None
                columns[i].bytes = used.nbytes
                columns[i].offsets = rows_offs.ctypes.data
            else:
                used = self._pending[i][:n]
                columns[i].data = used.ctypes.data
                columns[i].bytes = used.nbytes
                columns[i].offsets = None
        self._pending_count = 0
        self._pending_bytes = 0
        rc = self._lib.dsc_writer_add_columns(self._h(), columns, len(self._fields), n)
        if rc < 0:
            self.abort()  # the records staged cannot be told apart any more: nothing is kept
            raise self._error(rc, None)
        if self._progress:
            self._draw()

    def write_batch(self, batch: Mapping[str, Any]) -> None:
        """Adds len(batch[field]) records at once: batch {field: values}; a fixed field's values
        an array [B, ...shape] (or anything numpy reads as one), a variable field's a list of B
        arrays, or a pair (values, offsets) with offsets B + 1 int64 row offsets into values."""
        import numpy as np

        h = self._h()
        self._flush()
        position = self.records
        if not isinstance(batch, dict) and not hasattr(batch, "keys"):
            raise _invalid("write_batch takes a dict {field: values}")
        columns = (_capi._WriterColumn * len(self._fields))()
        keep = []
        count = None
        for i, f in enumerate(self._fields):
            try:
                value = batch[f.name]
            except KeyError:
                raise _invalid("batch at record %d has no field %r" % (position, f.name)) from None
            if f.variable:
                if isinstance(value, tuple) and len(value) == 2:
                    data = f.convert(value[0], position)
                    offsets = np.ascontiguousarray(np.asarray(value[1], dtype=np.int64))
                    n = len(offsets) - 1
                else:
                    parts = [f.convert(v, position + k) for k, v in enumerate(value)]
                    n = len(parts)
                    rows = np.fromiter((p.shape[0] for p in parts), dtype=np.int64, count=n)
                    offsets = np.zeros(n + 1, dtype=np.int64)
                    np.cumsum(rows, out=offsets[1:])
                    data = np.concatenate(parts) if parts else np.zeros(
                        (0,) + f.row_shape, dtype=f.np_dtype)
                    data = np.ascontiguousarray(data)
                columns[i].offsets = offsets.ctypes.data
                keep.append(offsets)
            else:
                try:
                    data = np.asarray(value)
                except (ValueError, TypeError) as e:
                    raise _invalid("field %r of records %d...: %s" % (f.name, position, e)) \
                        from None
                data = f._cast(data, "field %r of records %d..." % (f.name, position))
                if data.shape[1:] != f.shape or data.ndim != len(f.shape) + 1:
                    raise _invalid("field %r of records %d...: shape %s, expected (B,%s) (%s)" % (
                        f.name, position, tuple(data.shape), ",".join(map(str, f.shape)), f.spec))
                if data.dtype.byteorder == ">":
                    data = data.astype(data.dtype.newbyteorder("<"))
                data = np.ascontiguousarray(data)
                n = data.shape[0]
                columns[i].offsets = None
            if count is None:
                count = n
            elif n != count:
                raise _invalid("batch at record %d: field %r has %d records, %r has %d" % (
                    position, self._fields[0].name, count, f.name, n))
            columns[i].data = data.ctypes.data if data.nbytes else None
            columns[i].bytes = data.nbytes
            keep.append(data)
        rc = self._lib.dsc_writer_add_columns(h, columns, len(self._fields), count or 0)
        if rc < 0:
            raise self._error(rc, h)
        self.records += count or 0
        self.bytes += sum(int(c.bytes) for c in columns)
        if self._progress:
            self._draw()

    # ---- the end ------------------------------------------------------------------------------

    def close(self) -> Optional[Dict[str, Any]]:
        """Finishes: the last shard, the manifest, and path appears. Returns the statistics
        (dict: samples, shards, chunks, raw_bytes, stored_bytes, file_bytes, seconds). Raises on
        failure (then nothing is left at path)."""
        if self._handle is None:
            return self.stats
        self._flush()
        h, self._handle = self._handle, None
        st = _capi._WriterStats()
        st.struct_size = ctypes.sizeof(st)
        rc = self._lib.dsc_writer_finish(h, ctypes.byref(st))
        if self._progress:
            self._draw(final=True)
        if rc < 0:
            raise self._error(rc, None)
        self.stats = {k: getattr(st, k) for k, _ in _capi._WriterStats._fields_
                      if k != "struct_size"}
        return self.stats

    def abort(self) -> None:
        """Removes everything written; nothing appears at path."""
        if self._handle is not None:
            h, self._handle = self._handle, None
            self._lib.dsc_writer_abort(h)

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> Literal[False]:
        if exc_type is not None:
            self.abort()
            return False
        self.close()
        return False

    def __del__(self) -> None:
        # Never finished: nothing of it may appear.
        try:
            self.abort()
        except Exception:
            pass


__all__ = ["Writer", "Error"]
