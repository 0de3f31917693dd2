"""The ctypes mirrors of the C structs (client/python/dscache/_capi.py) against
client/include/dscache.h: every `typedef struct ... { ... } NAME;` the header declares has a
mirror in MIRRORS, with the header's fields in the header's order, and each struct's size and
each field's offset and size equal those the C compiler gives (capi_layout, built by CMake from
tests/integration/capi_layout.c, which must list every field the header declares). A field added
to the header alone, or to the header and the program but not to the mirror, fails here, naming
it. DLPack's DLTensor and DLManagedTensor are checked the same way against dlpack.h."""
import ctypes
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

SRC = te.SRC
HEADER = os.path.join(SRC, "client", "include", "dscache.h")
PROGRAM = os.path.join(te.BIN or "", "capi_layout")
if not te.BIN or not os.path.exists(PROGRAM):
    te.skip("DSC_BIN does not hold capi_layout (run through ctest)")

from dscache import _capi  # noqa: E402

# Each C struct and its mirror.
MIRRORS = {
    "dsc_loader_options_t": _capi._Options,
    "dsc_field_options_t": _capi._FieldOptions,
    "dsc_field_info_t": _capi._FieldInfo,
    "dsc_tensor_view_t": _capi._TensorView,
    "dsc_field_view_t": _capi._FieldView,
    "dsc_pack_options_t": _capi._PackOptions,
    "dsc_packed_batch_t": _capi._PackedBatch,
    "dsc_pack_stats_t": _capi._PackStats,
    "dsc_stats_t": _capi._Stats,
    "dsc_source_options_t": _capi._SourceOptions,
    "dsc_mixture_batch_t": _capi._MixtureBatch,
    "dsc_mixture_info_t": _capi._MixtureInfo,
    "dsc_writer_options_t": _capi._WriterOptions,
    "dsc_writer_value_t": _capi._WriterValue,
    "dsc_writer_column_t": _capi._WriterColumn,
    "dsc_writer_stats_t": _capi._WriterStats,
}
DLPACK = {"DLTensor": _capi._DLTensor, "DLManagedTensor": _capi._DLManagedTensor}


def header_structs(text):
    """{typedef name: [field names in order]} of every `typedef struct TAG { ... } NAME;` in a C
    header (the public header's plain declarations: no nested struct bodies, no function pointer
    declarators; several declarators in one declaration, arrays)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    out = {}
    for m in re.finditer(r"typedef\s+struct\s+\w*\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S):
        fields = []
        for decl in m.group(1).split(";"):
            decl = re.sub(r"\[[^\]]*\]", "", decl).strip()
            if not decl:
                continue
            head, *more = decl.split(",")
            fields.append(re.findall(r"\w+", head)[-1])
            fields += [re.findall(r"\w+", d)[-1] for d in more]
        out[m.group(2)] = fields
    return out


def compiled_layout():
    """{struct: {"sizeof": N, "fields": [(name, offset, size)]}} as capi_layout prints it."""
    out = subprocess.run([PROGRAM], check=True, stdout=subprocess.PIPE, text=True).stdout
    layout = {}
    for line in out.splitlines():
        parts = line.split()
        entry = layout.setdefault(parts[0], {"sizeof": None, "fields": []})
        if parts[1] == "sizeof":
            entry["sizeof"] = int(parts[2])
        else:
            entry["fields"].append((parts[1], int(parts[2]), int(parts[3])))
    return layout


def compare(t, struct, mirror, c):
    names = [f[0] for f in mirror._fields_]
    c_names = [f[0] for f in c["fields"]]
    t.check(names == c_names, "%s: the mirror %s differs from the C struct (missing in the "
            "mirror: %s; not in C: %s): mirror %s, C %s"
            % (struct, mirror.__name__, [n for n in c_names if n not in names],
               [n for n in names if n not in c_names], names, c_names))
    t.check(ctypes.sizeof(mirror) == c["sizeof"], "%s: sizeof %d in C, %d in the mirror %s"
            % (struct, c["sizeof"], ctypes.sizeof(mirror), mirror.__name__))
    for name, offset, size in c["fields"]:
        d = getattr(mirror, name, None)
        if d is None:
            continue
        t.check((d.offset, d.size) == (offset, size),
                "%s.%s: offset %d size %d in C, offset %d size %d in the mirror %s"
                % (struct, name, offset, size, d.offset, d.size, mirror.__name__))


t = te.Checks()
with open(HEADER) as f:
    declared = header_structs(f.read())
layout = compiled_layout()
t.check(len(declared) >= len(MIRRORS), "the header parse found %d structs: %s"
        % (len(declared), sorted(declared)))
for struct, fields in declared.items():
    c = layout.get(struct)
    t.check(c is not None, "%s (dscache.h) is not listed in tests/integration/capi_layout.c: add "
            "its SIZE and FIELD lines" % struct)
    if c is None:
        continue
    listed = [f[0] for f in c["fields"]]
    t.check(listed == fields, "%s: tests/integration/capi_layout.c does not list the header's "
            "fields in the header's order (missing there: %s): list each field; dscache.h %s, "
            "capi_layout %s" % (struct, [n for n in fields if n not in listed], fields, listed))
    mirror = MIRRORS.get(struct)
    t.check(mirror is not None, "%s (dscache.h) has no ctypes mirror in MIRRORS: add it to "
            "dscache/_capi.py (if the binding uses it) and here" % struct)
    if mirror is not None:
        compare(t, struct, mirror, c)
for struct in MIRRORS:
    t.check(struct in declared, "%s: MIRRORS names a struct dscache.h does not declare" % struct)
for struct, mirror in DLPACK.items():
    t.check(struct in layout, "capi_layout prints no %s" % struct)
    if struct in layout:
        compare(t, struct, mirror, layout[struct])
print("%d structs of dscache.h and %d of dlpack.h: %d fields compared"
      % (len(declared), len(DLPACK), sum(len(c["fields"]) for c in layout.values())))
sys.exit(t.done())
