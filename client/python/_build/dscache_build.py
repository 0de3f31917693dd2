"""In-tree PEP 517 build backend of the dscache Python package (pyproject.toml, backend-path).

`pip install ./client/python` (from a checkout) builds a wheel that carries libdscache.so and the
`dscache` command: it runs CMake on the checkout around this directory and bundles what it built
(dscache/libdscache.so, found first after $DSCACHE_LIB; dscache/bin/dscache, started by the
`dscache` entry point; dscache/_fastpath<EXT_SUFFIX>, the compiled next(), built for the Python
that runs this backend when its headers and numpy's are there: the wheel is then tagged for that
Python). Only the standard library is used and nothing is downloaded, with or
without build isolation; the C build needs what the project's build needs (cmake, a C compiler,
the -dev packages: deploy/local/setup.sh installs them).

Environment (for packagers and tests):
  DSCACHE_BUNDLE_LIB=PATH   bundle this libdscache.so instead of building (no CMake run);
  DSCACHE_BUNDLE_CLI=PATH   with it: bundle this dscache binary too;
  DSCACHE_BUNDLE_FASTPATH=PATH  with it: bundle this _fastpath<EXT_SUFFIX> too;
  DSCACHE_PURE=1            a pure-Python wheel: no library, no command (the package then uses an
                            installed libdscache, as `cmake --install` sets up);
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


def _cmake_build():
    """(libdscache.so, dscache binary, _fastpath module or None) built by CMake from the
    checkout."""
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
    build = os.path.abspath(os.environ.get("DSCACHE_BUILD_DIR")
                            or os.path.join(src, "build", "python-wheel"))
    args = [cmake, "-S", src, "-B", build,
            "-DDSC_BUILD_TESTS=OFF", "-DDSC_INSTALL_PYTHON=OFF",
            "-DPython3_EXECUTABLE=" + sys.executable]
    if shutil.which("ccache"):
        args.append("-DCMAKE_C_COMPILER_LAUNCHER=ccache")
    args += shlex.split(os.environ.get("DSCACHE_CMAKE_ARGS", ""))
    _say("configuring %s in %s" % (src, build))
    _run(args)
    jobs = str(max(1, min(os.cpu_count() or 1, 8)))
    _say("building libdscache and the dscache command")
    targets = ["dscache", "dscache_cli"]
    with open(os.path.join(build, "CMakeCache.txt")) as f:
        fast = "DSC_HAVE_PYTHON_FASTPATH:INTERNAL=ON" in f.read()
    if fast:
        targets.append("dscache_fastpath")
    else:
        _say("no Python headers or numpy headers for %s: the package's next() goes through "
             "ctypes (python3-dev and python3-numpy give the compiled one)" % sys.executable)
    _run([cmake, "--build", build, "--target"] + targets + ["-j", jobs])
    lib = os.path.join(build, "lib", "libdscache.so")
    cli = os.path.join(build, "bin", "dscache")
    for path in (lib, cli):
        if not os.path.isfile(path):
            raise RuntimeError("dscache build: CMake built no %s" % path)
    ext = None
    if fast:
        ext = os.path.join(build, "lib", _fastpath_name())
        if not os.path.isfile(ext):
            raise RuntimeError("dscache build: CMake built no %s" % ext)
    return lib, cli, ext


def _fastpath_name():
    import sysconfig
    return "_fastpath" + sysconfig.get_config_var("EXT_SUFFIX")


def _run(args):
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise RuntimeError("dscache build: %s failed (exit %d):\n%s"
                           % (" ".join(args[:2]), r.returncode, r.stdout[-4000:]))


def _native():
    """(library, command, compiled next()) to bundle, or Nones for a pure-Python wheel."""
    if os.environ.get("DSCACHE_PURE", "") not in ("", "0"):
        return None, None, None
    bundle = os.environ.get("DSCACHE_BUNDLE_LIB")
    if bundle:
        if not os.path.isfile(bundle):
            raise RuntimeError("DSCACHE_BUNDLE_LIB=%s: no such file" % bundle)
        cli = os.environ.get("DSCACHE_BUNDLE_CLI")
        if cli and not os.path.isfile(cli):
            raise RuntimeError("DSCACHE_BUNDLE_CLI=%s: no such file" % cli)
        ext = os.environ.get("DSCACHE_BUNDLE_FASTPATH")
        if ext and not os.path.isfile(ext):
            raise RuntimeError("DSCACHE_BUNDLE_FASTPATH=%s: no such file" % ext)
        return bundle, cli or None, ext or None
    return _cmake_build()


def _tag(native, ext):
    if native:
        import sysconfig
        plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
        if ext:  # the compiled next() is for this Python's ABI
            py = "cp%d%d" % sys.version_info[:2]
            return "%s-%s-%s" % (py, py, plat)
        return "py3-none-" + plat
    return "py3-none-any"


def _record_line(arc, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (arc, digest, len(data))


def _package_files():
    pkg = os.path.join(HERE, "dscache")
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py") and name != "_install.py":
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
    lib, cli, ext = _native()
    tag = _tag(lib is not None, ext)
    info = _dist_info()
    files = []  # (archive name, bytes, executable)
    for arc, path in _package_files():
        with open(path, "rb") as f:
            files.append((arc, f.read(), False))
    if lib is not None:
        with open(os.path.realpath(lib), "rb") as f:
            files.append(("dscache/libdscache.so", f.read(), True))
    if lib is not None and ext is not None:
        with open(os.path.realpath(ext), "rb") as f:
            files.append(("dscache/" + os.path.basename(ext), f.read(), True))
    entry_points = ""
    if cli is not None:
        with open(os.path.realpath(cli), "rb") as f:
            files.append(("dscache/bin/dscache", f.read(), True))
        entry_points = "[console_scripts]\ndscache = dscache._cli:main\n"
    files.append((info + "/METADATA", _metadata().encode(), False))
    files.append((info + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: dscache_build\n"
                                    "Root-Is-Purelib: %s\nTag: %s\n"
                                    % ("false" if lib else "true", tag)).encode(), False))
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
    _say("wrote %s (%s%s)" % (wheel, "libdscache and the dscache command bundled" if cli else
                              "libdscache bundled" if lib else "pure Python",
                              ", compiled next()" if lib and ext else ""))
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
