"""One field-spec grammar (proto/fieldspec.h): `dscache ingest synthetic --field`, the C writer
(dsc_writer_create's fields, called here through ctypes) and dscache.Writer ({name: type}) take
and refuse the same specs. Each accepted spec writes a dataset whose manifest schema is compared
across the three; each refused one is refused by all three with the same complaint."""
import ctypes
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

te.require_tools()
import numpy as np  # noqa: E402
import dscache  # noqa: E402
from dscache import _capi  # noqa: E402

env = te.Env()
t = te.Checks()

# (spec, schema [name, dtype, shape] when valid (None for a refused spec), the words a refusal
# says). Shapes use 0 for the variable leading dimension (null in the manifest).
TABLE = [
    ("label:i64", ["label", "i64", []], None),
    ("image:u8[3,32,32]", ["image", "u8", [3, 32, 32]], None),
    ("image:u8:3x32x32", ["image", "u8", [3, 32, 32]], None),
    ("image: uint8 [3, 32, 32]", ["image", "u8", [3, 32, 32]], None),
    ("x:bfloat16[2,2]", ["x", "bf16", [2, 2]], None),
    ("x:float64:4", ["x", "f64", [4]], None),
    ("label:i64:", ["label", "i64", []], None),
    ("ids:i32[]", ["ids", "i32", [0]], None),
    ("ids:i32[?]", ["ids", "i32", [0]], None),
    ("mel:f32[?,80]", ["mel", "f32", [0, 80]], None),
    ("x:u7", None, "unknown dtype: 'u7'"),
    ("x:int33[2]", None, "unknown dtype: 'int33'"),
    ("x:u8[3,?]", None, "only the leading dimension may be variable"),
    ("x:u8[0]", None, "bad dimension: '0'"),
    ("x:u8:3x0", None, "bad dimension: '0'"),
    ("x:u8:3xx", None, "missing dimension"),
    ("x:u8[3,]", None, "trailing ','"),
    ("x:u8[3", None, "missing ']'"),
    ("x:u8[1,1,1,1,1,1,1,1,1]", None, "at most 8 dimensions"),
    ("x:u8[3]x", None, "unexpected text"),
    ("x:u8 y", None, "unexpected text"),
    ("a b:u8", None, "field name must be"),
    ("x:f64[65536,65536]", None, "2^32"),
]

ESIZE = {"u8": 1, "i8": 1, "u16": 2, "i16": 2, "u32": 4, "i32": 4, "i64": 8, "f16": 2,
         "bf16": 2, "f32": 4, "f64": 8}


def schema_of(path):
    m = json.load(open(os.path.join(path, "manifest.json")))
    return [[f["name"], f["dtype"], [0 if d is None else int(d) for d in f["shape"]]]
            for f in m["schema"]]


def via_cli(spec, out):
    """(schema or None, message)."""
    p = subprocess.run([os.path.join(te.BIN, "dscache"), "ingest", "synthetic", "-o", out,
                        "--samples", "2", "--field", spec], capture_output=True, text=True)
    if p.returncode == 0:
        return schema_of(out), ""
    t.check(p.returncode == 2, "cli %r: exit %d (want 0 or 2): %s" % (spec, p.returncode,
                                                                   p.stderr))
    return None, p.stderr


def via_c_writer(spec, out, expected):
    lib = _capi._load()
    opts = _capi._WriterOptions()
    _capi._check(lib.dsc_writer_options_init(ctypes.byref(opts), ctypes.sizeof(opts)))
    opts.path = out.encode()
    opts.fields = spec.encode()
    h = ctypes.c_void_p()
    if lib.dsc_writer_create(ctypes.byref(opts), ctypes.byref(h)) < 0:
        buf = ctypes.create_string_buffer(1024)
        lib.dsc_writer_last_error(None, buf, len(buf))
        return None, buf.value.decode()
    if expected is None:  # accepted where it should not be: nothing to compare
        lib.dsc_writer_abort(h)
        return ["accepted"], ""
    name, dtype, shape = expected
    nbytes = ESIZE[dtype] * int(np.prod([d or 1 for d in shape]))
    data = ctypes.create_string_buffer(max(nbytes, 1))
    value = (_capi._WriterValue * 1)()
    value[0].data = ctypes.cast(data, ctypes.c_void_p)
    value[0].bytes = nbytes
    t.check(lib.dsc_writer_add(h, value, 1) == 0, "c writer %r: add" % spec)
    st = _capi._WriterStats()
    st.struct_size = ctypes.sizeof(st)
    t.check(lib.dsc_writer_finish(h, ctypes.byref(st)) == 0, "c writer %r: finish" % spec)
    return schema_of(out), ""


def via_python(spec, out, expected):
    name, _, typ = spec.partition(":")
    try:
        with dscache.Writer(out, fields={name.strip(): typ}) as w:
            if expected is None:
                w.abort()
                return ["accepted"], ""
            _, dtype, shape = expected
            np_dtype = np.uint16 if dtype == "bf16" else dscache.writer._DTYPES[dtype]
            w.write({name.strip(): np.zeros([d or 1 for d in shape], dtype=np_dtype)})
    except dscache.InvalidOption as e:
        return None, str(e)
    return schema_of(out), ""


for i, (spec, expected, words) in enumerate(TABLE):
    results = {}
    for who, fn in (("cli", lambda o: via_cli(spec, o)),
                    ("c writer", lambda o: via_c_writer(spec, o, expected)),
                    ("python", lambda o: via_python(spec, o, expected))):
        results[who] = fn(os.path.join(env.dir, "%s-%d" % (who.replace(" ", "_"), i)))
    for who, (schema, message) in results.items():
        if expected is None:
            t.check(schema is None, "%s accepted %r" % (who, spec))
            t.check(words in message and "position" in message,
                    "%s on %r: %r lacks %r and the position" % (who, spec, message, words))
        elif who == "cli" and expected[2][:1] == [0]:
            # ingest synthetic writes fixed fields only: the spec parses, the form refuses it
            t.check(schema is None and "fixed shape" in message and "field spec" not in message,
                    "cli on variable %r: %r" % (spec, message))
        else:
            t.check(schema == [expected], "%s on %r: %r, expected %r (%s)"
                    % (who, spec, schema, [expected], message))

sys.exit(t.done())
