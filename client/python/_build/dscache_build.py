"""In-tree PEP 517 build backend of the dscache Python package (pyproject.toml, backend-path).

`pip install ./client/python` (from a checkout) builds a wheel that carries the whole product:
libdscache.so, the `dscache` command and the `dscached` server. It runs CMake on the checkout
around this directory (only the targets the wheel carries: no test, no fuzzer) and bundles what
it built: dscache/libdscache.so (found first after $DSCACHE_LIB); dscache/bin/dscache and
dscache/bin/dscached, started by the `dscache` and `dscached` entry points;
dscache/_fastpath<EXT_SUFFIX>, the compiled next(), built for the Python that runs this backend
when its headers are there (python3-dev, CPython 3.9 or newer; the wheel is then tagged for that
Python; without them the package's next() goes through ctypes and the wheel is py3-none). The
compiled next() calls numpy through Python: neither numpy nor its headers are needed to build,
only to run. The package's sources and py.typed go in as they are. Only the standard library is
used and nothing is downloaded, with or without build isolation; the C build needs what the
project's build needs (cmake, a C compiler, the -dev packages, patchelf: deploy/local/setup.sh
installs them).

The wheel runs on a bare image (glibc and Python, none of libuv, lz4, libsodium, libpng, ...):
CMake links each dependency from its static archive (-DDSC_STATIC_DEPS=ON,
cmake/DscStaticDeps.cmake) and this backend bundles what is still needed that glibc does not
provide, as auditwheel does: each such library is copied into dscache/_libs under a name made
unique by its content hash, its soname and every reference to it rewritten with patchelf, and
the RUNPATH of whatever needs it set to that directory ($ORIGIN-relative). libibverbs, CUDA and
nvJPEG are loaded with dlopen at run time (where present) and never linked.

Environment (for packagers and tests):
  DSCACHE_BUNDLE_LIB=PATH   bundle this libdscache.so instead of building (no CMake run);
  DSCACHE_BUNDLE_CLI=PATH   with it: bundle this dscache binary too;
  DSCACHE_BUNDLE_SERVER=PATH  with it: bundle this dscached binary too;
  DSCACHE_BUNDLE_FASTPATH=PATH  with it: bundle this _fastpath<EXT_SUFFIX> too;
  DSCACHE_PURE=1            a pure-Python wheel: no library, no command (the package then uses an
                            installed libdscache, as `cmake --install` sets up);
  DSCACHE_SYSTEM_LIBS=1     link this system's shared libraries and bundle none (no patchelf
                            needed): a wheel for this machine only;
  DSCACHE_SOURCE_DIR=DIR    the dscache checkout to build (default: the one around this package);
  DSCACHE_BUILD_DIR=DIR     the CMake build directory (default: <checkout>/build/python-wheel,
                            kept, so that a second install only rebuilds what changed);
  DSCACHE_CMAKE_ARGS="..."  more arguments for the CMake configure step.
"""

import base64
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # client/python
NAME = "dscache"


def _version():
    with open(os.path.join(HERE, "dscache", "__init__.py")) as f:
        m = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
    if not m:
        raise RuntimeError("dscache/__init__.py has no __version__")
    return m.group(1)


def _metadata():
    return ("Metadata-Version: 2.1\n"
            "Name: %s\n"
            "Version: %s\n"
            "Summary: Python and PyTorch client of dscache, a distributed cache for training "
            "data\n"
            "Requires-Python: >=3.8\n"
            "Requires-Dist: numpy\n"
            "Provides-Extra: torch\n"
            "Requires-Dist: torch>=1.13; extra == \"torch\"\n" % (NAME, _version()))


def _dist_info():
    return "%s-%s.dist-info" % (NAME, _version())


def _say(msg):
    print("dscache build: " + msg, file=sys.stderr, flush=True)


def _source_dir():
    src = os.environ.get("DSCACHE_SOURCE_DIR")
    if src:
        return os.path.abspath(src)
    root = os.path.dirname(os.path.dirname(HERE))
    try:
        with open(os.path.join(root, "CMakeLists.txt")) as f:
            if re.search(r"project\(\s*dscache\b", f.read()):
                return root
    except OSError:
        pass
    return None


def _env_on(name):
    return os.environ.get(name, "") not in ("", "0")


def _cmake_build():
    """{"lib", "cli", "server", "ext"}: the files CMake built from the checkout ("ext": the
    compiled next(), or None)."""
    src = _source_dir()
    if src is None:
        raise RuntimeError(
            "dscache build: no dscache checkout around %s (this directory is not client/python "
            "of a checkout). Install from a checkout (pip install ./client/python), set "
            "DSCACHE_SOURCE_DIR=/path/to/checkout, or DSCACHE_BUNDLE_LIB=/path/to/libdscache.so, "
            "or DSCACHE_PURE=1 for a package that uses an installed libdscache" % HERE)
    cmake = shutil.which("cmake")
    if cmake is None:
        raise RuntimeError("dscache build: cmake not found; it builds libdscache and the dscache "
                           "command (Debian: apt-get install cmake gcc make liblz4-dev "
                           "libxxhash-dev libcjson-dev libsodium-dev ..., or run "
                           "deploy/local/setup.sh)")
    static = not _env_on("DSCACHE_SYSTEM_LIBS")
    if static:
        _need_patchelf()  # before minutes of building, not after
    build = os.path.abspath(os.environ.get("DSCACHE_BUILD_DIR")
                            or os.path.join(src, "build", "python-wheel"))
    args = [cmake, "-S", src, "-B", build,
            "-DDSC_BUILD_TESTS=OFF", "-DDSC_INSTALL_PYTHON=OFF",
            "-DDSC_STATIC_DEPS=" + ("ON" if static else "OFF"),
            "-DPython3_EXECUTABLE=" + sys.executable]
    if shutil.which("ccache"):
        args.append("-DCMAKE_C_COMPILER_LAUNCHER=ccache")
    args += shlex.split(os.environ.get("DSCACHE_CMAKE_ARGS", ""))
    _say("configuring %s in %s" % (src, build))
    _run(args)
    jobs = str(max(1, min(os.cpu_count() or 1, 8)))
    # Only what the wheel carries: the library, the two commands, the compiled next().
    targets = ["dscache", "dscache_cli", "dscached"]
    with open(os.path.join(build, "CMakeCache.txt")) as f:
        fast = "DSC_HAVE_PYTHON_FASTPATH:INTERNAL=ON" in f.read()
    if fast:
        targets.append("dscache_fastpath")
    else:
        _say("no Python headers for %s: the package's next() goes through ctypes (python3-dev "
             "gives the compiled one)" % sys.executable)
    _say("building %s" % " ".join(targets))
    _run([cmake, "--build", build, "--target"] + targets + ["-j", jobs])
    out = {"lib": os.path.join(build, "lib", "libdscache.so"),
           "cli": os.path.join(build, "bin", "dscache"),
           "server": os.path.join(build, "bin", "dscached"),
           "ext": os.path.join(build, "lib", _fastpath_name()) if fast else None}
    for path in out.values():
        if path and not os.path.isfile(path):
            raise RuntimeError("dscache build: CMake built no %s" % path)
    out["plot"] = os.path.join(src, "client", "cli", "dscache_plot.py")
    return out


def _fastpath_name():
    import sysconfig
    return "_fastpath" + sysconfig.get_config_var("EXT_SUFFIX")


def _run(args):
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise RuntimeError("dscache build: %s failed (exit %d):\n%s"
                           % (" ".join(args[:2]), r.returncode, r.stdout[-4000:]))
    return r.stdout


def _native():
    """{"lib", "cli", "server", "ext", "plot"} to bundle (absent or None: not bundled), or None
    for a pure-Python wheel."""
    if _env_on("DSCACHE_PURE"):
        return None
    if not os.environ.get("DSCACHE_BUNDLE_LIB"):
        return _cmake_build()
    out = {}
    for key, var in (("lib", "DSCACHE_BUNDLE_LIB"), ("cli", "DSCACHE_BUNDLE_CLI"),
                     ("server", "DSCACHE_BUNDLE_SERVER"), ("ext", "DSCACHE_BUNDLE_FASTPATH")):
        path = os.environ.get(var)
        if path and not os.path.isfile(path):
            raise RuntimeError("%s=%s: no such file" % (var, path))
        out[key] = path or None
    return out


# -- Carrying the dependencies (what auditwheel's repair does, for this wheel's own files) ------

# glibc's libraries: every Linux system with a Python has them (the manylinux policies' base).
_SYSTEM_LIBS = re.compile(r"^(libc|libm|libdl|libpthread|librt|libutil|libresolv)\.so\.\d+$"
                          r"|^ld-linux[-\w.]*\.so\.\d+$")
LIBS_DIR = "_libs"  # dscache/_libs: the bundled libraries


def _need_patchelf():
    if shutil.which("patchelf") is None:
        raise RuntimeError(
            "dscache build: patchelf not found: it puts the libraries the wheel needs and glibc "
            "does not provide (libcjson, ...) into the wheel, so that it runs on any image "
            "(Debian: apt-get install patchelf, or deploy/local/setup.sh). "
            "DSCACHE_SYSTEM_LIBS=1 builds a wheel that uses this system's libraries instead "
            "(for this machine only)")
    if shutil.which("readelf") is None:
        raise RuntimeError("dscache build: readelf not found (binutils): it lists the libraries "
                           "each file of the wheel needs")


def _needed(path):
    """The sonames an ELF file needs (readelf -d)."""
    out = _run(["readelf", "-d", path])
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def _where(path):
    """{soname: file} as the dynamic linker resolves path's dependencies here (ldd)."""
    r = subprocess.run(["ldd", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    found = {}
    for m in re.finditer(r"^\s*(\S+) => (\S+) \(0x", r.stdout, re.M):
        found[m.group(1)] = m.group(2)
    for m in re.finditer(r"^\s*(\S+) => not found", r.stdout, re.M):
        found[m.group(1)] = None
    return found


def _carry_deps(stage, files):
    """Makes the ELF files under stage (paths relative to it, patched in place) need nothing
    outside glibc: every other library they need, directly or through one another, is copied to
    stage/dscache/_libs as lib<name>-<hash8>.so.<version>, its soname and the references to it
    rewritten, each file's RUNPATH set to that directory. Returns [(soname, bundled name)]."""
    libs_dir = os.path.join(stage, "dscache", LIBS_DIR)
    todo = list(files)
    bundled = {}  # soname -> bundled file name
    while todo:
        rel = todo.pop(0)
        path = os.path.join(stage, rel)
        replace = []
        where = None
        for soname in _needed(path):
            if _SYSTEM_LIBS.match(soname):
                continue
            if soname not in bundled:
                where = where if where is not None else _where(path)
                src = where.get(soname)
                if not src:
                    raise RuntimeError("dscache build: %s needs %s, which the dynamic linker does "
                                       "not find here" % (rel, soname))
                with open(os.path.realpath(src), "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()[:8]
                stem, _, version = soname.partition(".so")
                name = "%s-%s.so%s" % (stem, digest, version)
                os.makedirs(libs_dir, exist_ok=True)
                shutil.copyfile(os.path.realpath(src), os.path.join(libs_dir, name))
                os.chmod(os.path.join(libs_dir, name), 0o755)
                _run(["patchelf", "--set-soname", name, os.path.join(libs_dir, name)])
                bundled[soname] = name
                todo.append(os.path.join("dscache", LIBS_DIR, name))
            replace.append((soname, bundled[soname]))
        if not replace:
            continue
        args = ["patchelf"]
        for old, new in replace:
            args += ["--replace-needed", old, new]
        _run(args + [path])
        # A call of its own: patchelf 0.14 (Debian 12) garbles a RUNPATH set in the same call.
        rpath = os.path.relpath(libs_dir, os.path.dirname(path))
        _run(["patchelf", "--set-rpath", "$ORIGIN" if rpath == "." else "$ORIGIN/" + rpath, path])
    return sorted(bundled.items())


def _stage(native, stage):
    """Copies what the wheel carries into stage/dscache/..., carries their dependencies
    (unless DSCACHE_SYSTEM_LIBS) after stripping their debug information; returns the arc
    names."""
    places = {"lib": "dscache/libdscache.so", "cli": "dscache/bin/dscache",
              "server": "dscache/bin/dscached",
              "plot": "dscache/share/dscache/dscache_plot.py"}
    if native.get("ext"):
        places["ext"] = "dscache/" + os.path.basename(native["ext"])
    elf = []
    for key, arc in places.items():
        if not native.get(key):
            continue
        dst = os.path.join(stage, arc)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(os.path.realpath(native[key]), dst)
        os.chmod(dst, 0o755)
        if key != "plot":
            elf.append(arc)
            # Before patchelf: strip rewrites the file, which may undo patchelf's layout.
            if shutil.which("strip"):
                _run(["strip", "--strip-debug", dst])
    if _env_on("DSCACHE_SYSTEM_LIBS"):
        if shutil.which("readelf"):
            _say("DSCACHE_SYSTEM_LIBS: the wheel uses this system's shared libraries (%s)"
                 % ", ".join(sorted({n for a in elf for n in _needed(os.path.join(stage, a))
                                     if not _SYSTEM_LIBS.match(n)})))
    else:
        _need_patchelf()
        bundled = _carry_deps(stage, elf)
        _say("static: what the archives of this system allow; bundled in dscache/%s: %s"
             % (LIBS_DIR, ", ".join("%s as %s" % b for b in bundled) or "nothing"))
    arcs = []
    for dirpath, _, names in os.walk(stage):
        for n in names:
            arcs.append(os.path.relpath(os.path.join(dirpath, n), stage))
    glibc = None
    if not _env_on("DSCACHE_SYSTEM_LIBS"):
        glibc = max((_glibc_needed(os.path.join(stage, a)) for a in arcs
                     if not a.endswith(".py")), default=(2, 17))
    return sorted(arcs), glibc


def _glibc_needed(path):
    """The newest glibc symbol version path needs, as (major, minor)."""
    out = _run(["readelf", "-V", "--wide", path])
    return max([(int(a), int(b)) for a, b in re.findall(r"Name: GLIBC_(\d+)\.(\d+)", out)]
               or [(2, 17)])


def _tags(native, ext, glibc):
    """The wheel's tags: cpXY-cpXY (the compiled next() is for this Python's ABI) or py3-none;
    platform linux_<arch>, and manylinux_<glibc>_<arch> too for a wheel that carries everything
    it needs besides glibc (glibc: the newest symbol version its files need)."""
    if not native:
        return ["py3-none-any"]
    import sysconfig
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    py = "cp%d%d-cp%d%d" % (sys.version_info[:2] * 2) if ext else "py3-none"
    plats = [plat]
    if glibc and plat.startswith("linux_"):
        plats.insert(0, "manylinux_%d_%d_%s" % (glibc[0], glibc[1], plat[len("linux_"):]))
    return ["%s-%s" % (py, p) for p in plats]


def _record_line(arc, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (arc, digest, len(data))


def _package_files():
    """The package's sources and its py.typed marker (PEP 561: type checkers read its hints)."""
    pkg = os.path.join(HERE, "dscache")
    for name in sorted(os.listdir(pkg)):
        if (name.endswith(".py") and name != "_install.py") or name == "py.typed":
            yield "dscache/" + name, os.path.join(pkg, name)


# -- PEP 517 hooks -----------------------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    d = os.path.join(metadata_directory, _dist_info())
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w") as f:
        f.write(_metadata())
    return _dist_info()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    native = _native()
    info = _dist_info()
    files = []  # (archive name, bytes, executable)
    for arc, path in _package_files():
        with open(path, "rb") as f:
            files.append((arc, f.read(), False))
    scripts = []
    glibc = None
    if native is not None:
        with tempfile.TemporaryDirectory() as stage:
            arcs, glibc = _stage(native, stage)
            for arc in arcs:
                with open(os.path.join(stage, arc), "rb") as f:
                    files.append((arc, f.read(), not arc.endswith(".py")))
        scripts = [n for k, n in (("cli", "dscache"), ("server", "dscached")) if native.get(k)]
    tags = _tags(native is not None, native and native.get("ext"), glibc)
    # One name for the set: cp311-cp311-manylinux_2_34_x86_64.linux_x86_64 (PEP 425).
    py_abi = tags[0].rsplit("-", 1)[0]
    tag = py_abi + "-" + ".".join(t.rsplit("-", 1)[1] for t in tags)
    entry_points = ""
    if scripts:
        entry_points = "[console_scripts]\n" + "".join(
            "%s = dscache._cli:%s\n" % (n, n) for n in scripts)
    files.append((info + "/METADATA", _metadata().encode(), False))
    files.append((info + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: dscache_build\n"
                                    "Root-Is-Purelib: %s\n%s"
                                    % ("false" if native else "true",
                                       "".join("Tag: %s\n" % t for t in tags))).encode(), False))
    if entry_points:
        files.append((info + "/entry_points.txt", entry_points.encode(), False))
    record = [_record_line(a, d) for a, d, _ in files] + [info + "/RECORD,,"]
    files.append((info + "/RECORD", ("\n".join(record) + "\n").encode(), False))
    wheel = "%s-%s-%s.whl" % (NAME, _version(), tag)
    os.makedirs(wheel_directory, exist_ok=True)
    tmp = os.path.join(wheel_directory, wheel + ".part")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data, exe in files:
            zi = zipfile.ZipInfo(arc, date_time=(2026, 1, 1, 0, 0, 0))
            zi.external_attr = (0o100755 if exe else 0o100644) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    os.replace(tmp, os.path.join(wheel_directory, wheel))
    _say("wrote %s (%d bytes: %s)" % (
        wheel, os.path.getsize(os.path.join(wheel_directory, wheel)),
        "pure Python" if native is None else
        ", ".join(w for k, w in (("lib", "libdscache"), ("cli", "dscache"),
                                 ("server", "dscached"), ("ext", "compiled next()"))
                  if native.get(k))))
    return wheel


def build_sdist(sdist_directory, config_settings=None):
    """The Python package alone (a wheel built from it needs DSCACHE_SOURCE_DIR,
    DSCACHE_BUNDLE_LIB or DSCACHE_PURE=1: the C sources are the checkout's)."""
    base = "%s-%s" % (NAME, _version())
    name = base + ".tar.gz"
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, base)
        os.makedirs(os.path.join(root, "dscache"))
        os.makedirs(os.path.join(root, "_build"))
        for arc, path in _package_files():
            shutil.copyfile(path, os.path.join(root, arc))
        shutil.copyfile(os.path.abspath(__file__), os.path.join(root, "_build", "dscache_build.py"))
        shutil.copyfile(os.path.join(HERE, "pyproject.toml"), os.path.join(root, "pyproject.toml"))
        with open(os.path.join(root, "PKG-INFO"), "w") as f:
            f.write(_metadata())
        os.makedirs(sdist_directory, exist_ok=True)
        with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
            t.add(root, arcname=base)
    return name
