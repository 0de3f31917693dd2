"""Installing the Python package, offline, as users do: (1) `cmake --install` to a temporary
prefix installs the package too, and it finds that prefix's libdscache with no variable but
PYTHONPATH (a temporary prefix is not on sys.path); (2) the README's line, `python3 -m venv
--system-site-packages v; v/bin/pip install ./client/python`, run from the checkout (a fresh venv,
build isolation, no index): the in-tree backend builds libdscache, dscache and dscached with
CMake and bundles them, so the package imports and reads a dataset with no variable at all and
`dscache --help`, `dscached --help` and `dscache ingest` run from the venv's bin; (3) a
pure-Python wheel (DSCACHE_PURE=1) finds libdscache.so.0 on the dynamic linker's path and,
without it, fails at import listing every place tried; (4) a wheel built with DSCACHE_BUNDLE_LIB
carries that library and what it needs besides glibc; (5) a DSCACHE_LIB that cannot be
loaded is an ImportError naming it. Each installed copy reads a dataset. Where the build tree has
the compiled next() (dscache._fast), (1), (2) and (4) install it in the package and use it; (3)
has none and says so (dscache.fastpath_reason)."""
import glob
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

te.require_tools()
import numpy as np  # noqa: E402

PY = "/usr/bin/python3"
if not os.path.exists(PY):
    te.skip("/usr/bin/python3 is missing")
for mod in ("pip", "venv", "ensurepip"):
    if subprocess.run([PY, "-c", "import " + mod], capture_output=True).returncode != 0:
        te.skip("python3 module %s is missing (deploy/local/setup.sh installs python3-%s)"
                % (mod, mod))
cmake = shutil.which("cmake")
lib_dir = os.environ.get("DSC_LIB")
build_dir = os.path.dirname(lib_dir) if lib_dir else None
if not cmake or not build_dir or not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
    te.skip("needs cmake and the build tree (run through ctest)")
with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
    if "DSC_INSTALL_PYTHON:BOOL=OFF" in f.read():
        te.skip("the build was configured with -DDSC_INSTALL_PYTHON=OFF")
if os.environ.get("DSC_SANITIZE") == "ON" or os.environ.get("DSC_TSAN") == "ON":
    te.skip("a sanitizer build's libdscache cannot be loaded into a plain python3")

env = te.Env()
t = te.Checks()
tmp = env.dir
N = 321
vals = np.arange(N * 3, dtype=np.int32).reshape(N, 3)
data = env.ingest_npy("ids", {"v": vals})
# Nothing of the source tree or the build tree in the environment of the installed copies, and
# no package index nor local wheel folder for pip: nothing can be downloaded.
clean = {k: v for k, v in os.environ.items()
         if k not in ("DSCACHE_LIB", "PYTHONPATH", "LD_LIBRARY_PATH", "DSCACHE_BUNDLE_LIB",
                      "DSCACHE_PURE", "DSCACHE_SOURCE_DIR", "DSCACHE_BUILD_DIR", "PIP_FIND_LINKS",
                      "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")}
clean.update(PIP_NO_INDEX="1", PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
USE = ("import dscache, numpy as np\n"
       "l = dscache.Loader(dataset='ids', fallback_path=%r, batch_size=50, seed=1, copy=True)\n"
       "v = np.concatenate([b['v'] for b in l])\n"
       "print(dscache.library_path)\n"
       "print(dscache.fastpath, dscache.fastpath_reason)\n"
       "print(len(v), int(v.sum()))\n" % data)
WANT = "%d %d" % (N, int(vals.sum()))


def run(python, code, extra=None):
    e = dict(clean, **(extra or {}))
    return subprocess.run([python, "-c", code], capture_output=True, text=True, env=e, cwd=tmp)


def use(python, what, extra=None):
    """Runs USE with `python`; returns the library path it loaded (None on failure)."""
    r = run(python, USE, extra)
    global last_fast
    lines = r.stdout.strip().splitlines()
    ok = r.returncode == 0 and len(lines) == 3 and lines[2] == WANT
    t.check(ok, "%s: reads the dataset (rc %d): %s %s" % (what, r.returncode, r.stdout[-200:],
                                                           r.stderr[-600:]))
    last_fast = lines[1] if ok else ""
    return lines[0] if ok else None


last_fast = ""  # what the last use() printed: dscache.fastpath and dscache.fastpath_reason
fast_built = glob.glob(os.path.join(lib_dir, "_fastpath*.so"))


def fast_in(where, what):
    """The compiled next() is loaded from the package installed under where."""
    if not fast_built:
        print("%s: the build tree has no compiled next() (%s): not checked" % (what, last_fast))
        return
    path = last_fast.split(" ")[0]
    t.check(path.startswith(where) and os.path.basename(path) == os.path.basename(fast_built[0])
            and os.path.basename(os.path.dirname(path)) == "dscache",
            "%s: the compiled next() of the installed package is used: %s" % (what, last_fast))


def pip(python, *args, extra=None):
    r = subprocess.run([python, "-m", "pip", "--disable-pip-version-check", "-q"] + list(args),
                       capture_output=True, text=True, env=dict(clean, **(extra or {})), cwd=tmp)
    t.check(r.returncode == 0, "pip %s: %s" % (" ".join(args[:2]), r.stderr[-800:]))
    return r.returncode == 0


def source_copy(name):
    dst = os.path.join(tmp, name)
    shutil.copytree(os.path.join(te.SRC, "client", "python"), dst, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__", "libdscache.so*", "_install.py"))
    return dst


def venv(name, with_pip=False):
    """A fresh venv (--system-site-packages: numpy, the dependency, is not downloaded)."""
    path = os.path.join(tmp, name)
    subprocess.run([PY, "-m", "venv", "--system-site-packages"]
                   + ([] if with_pip else ["--without-pip"]) + [path], check=True, env=clean)
    return os.path.join(path, "bin", "python")


# The system must not already provide the library, or the negative checks would be void.
sys_has_lib = run(PY, "import ctypes; ctypes.CDLL('libdscache.so.0')").returncode == 0
sys_has_pkg = run(PY, "import dscache").returncode == 0
if sys_has_lib or sys_has_pkg:
    print("note: this system has libdscache.so.0 (%s) / a dscache package (%s) installed: "
          "checks that need their absence are not made" % (sys_has_lib, sys_has_pkg))

# ---- (1) cmake --install to a temporary prefix -----------------------------------------------
prefix = os.path.join(tmp, "prefix")
r = subprocess.run([cmake, "--install", build_dir, "--prefix", prefix], capture_output=True,
                   text=True)
t.check(r.returncode == 0, "cmake --install: %s" % r.stderr[-500:])
pkgs = glob.glob(os.path.join(prefix, "lib", "python3*", "*-packages", "dscache", "__init__.py"))
t.check(len(pkgs) == 1, "cmake --install put the package under lib/python3.X/*-packages: %s"
        % pkgs)
t.check(all(os.path.exists(os.path.join(os.path.dirname(p), "py.typed")) for p in pkgs),
        "the installed package carries py.typed (its type hints are read by type checkers)")
libs = glob.glob(os.path.join(prefix, "lib*", "**", "libdscache.so.0"), recursive=True)
t.check(len(libs) == 1, "cmake --install put libdscache.so.0 under the prefix: %s" % libs)
if pkgs and libs:
    site = os.path.dirname(os.path.dirname(pkgs[0]))
    got = use(PY, "cmake-installed package", {"PYTHONPATH": site})
    t.check(got == libs[0], "it loads the prefix's library: %s" % got)
    t.check(not glob.glob(os.path.join(os.path.dirname(pkgs[0]), "libdscache.so*")),
            "no library copied into the cmake-installed package")
    fast_in(prefix, "cmake-installed package")

# ---- (2) the README's line: a venv, pip install ./client/python, from the checkout ----------
# The line as the README writes it; run with /usr/bin/python3 for python3 (the one with Debian's
# numpy) and the venv in the test's directory.
with open(os.path.join(te.SRC, "README.md")) as f:
    m = re.search(r"`python3 -m venv ((?:--[a-z-]+ )*)v; v/bin/pip install ./client/python`",
                  f.read())
t.check(m is not None, "README.md has the venv + pip install line")
venv_flags = m.group(1).split() if m else ["--system-site-packages"]
vdir = os.path.join(tmp, "venv-readme")
subprocess.run([PY, "-m", "venv"] + venv_flags + [vdir], check=True, env=clean)
vpy = os.path.join(vdir, "bin", "python")
vbin = os.path.dirname(vpy)
# The CMake build of the backend goes beside the test build tree (kept: a rerun rebuilds only
# what changed) instead of the checkout's build/python-wheel; the command is the README's.
wheel_build = os.path.join(build_dir, "python-wheel-test")
r = subprocess.run([os.path.join(vbin, "pip"), "install", "./client/python"], capture_output=True,
                   text=True, cwd=te.SRC, env=dict(clean, DSCACHE_BUILD_DIR=wheel_build))
t.check(r.returncode == 0, "pip install ./client/python (build isolation, no index): %s %s"
        % (r.stdout[-600:], r.stderr[-1500:]))
if r.returncode == 0:
    for cmd, want in (("dscache", "usage: dscache COMMAND"), ("dscached", "usage: dscached")):
        exe = os.path.join(vbin, cmd)
        t.check(os.path.exists(exe), "the venv has the %s command" % cmd)
        if not os.path.exists(exe):
            continue
        h = subprocess.run([exe, "--help"], capture_output=True, text=True, env=clean, cwd=tmp)
        t.check(h.returncode == 0 and h.stdout.startswith(want),
                "the venv's %s --help runs: rc %d %s %s" % (cmd, h.returncode, h.stdout[:200],
                                                           h.stderr[-300:]))
    got = use(vpy, "pip install ./client/python")
    t.check(got is not None and got.startswith(os.path.join(tmp, "venv-readme"))
            and got.endswith(os.path.join("dscache", "libdscache.so")),
            "it loads the library bundled in the venv's package: %s" % got)
    fast_in(os.path.join(tmp, "venv-readme"), "pip install ./client/python")
    cli = os.path.join(vbin, "dscache")
    np.save(os.path.join(tmp, "pipv.npy"), vals)
    out = os.path.join(tmp, "pip-ingested")
    r = subprocess.run([cli, "ingest", "npy", "-o", out, "--name", "ids",
                        "v=" + os.path.join(tmp, "pipv.npy")],
                       capture_output=True, text=True, env=clean, cwd=tmp)
    t.check(r.returncode == 0 and os.path.exists(os.path.join(out, "manifest.json")),
            "the venv's dscache ingest npy writes a dataset: %s %s" % (r.stdout[-300:],
                                                                     r.stderr[-500:]))
    r = run(vpy, USE.replace(repr(data), repr(out)))
    t.check(r.returncode == 0 and r.stdout.strip().splitlines()[-1:] == [WANT],
            "the package reads what its command ingested: %s %s" % (r.stdout[-200:],
                                                                    r.stderr[-400:]))
    # The venv's dscached serves it; the package reads it from there.
    port_file = os.path.join(tmp, "pip-port")
    server = subprocess.Popen(te.DIE_WITH_TEST + [
        os.path.join(vbin, "dscached"), "--data", out, "--listen", "127.0.0.1:0", "--http", "off",
        "--port-file", port_file, "--memory", "16M", "--threads", "1"],
        stdout=subprocess.DEVNULL, env=clean, cwd=tmp)
    try:
        for _ in range(600):  # the entry point's Python starts first
            if os.path.exists(port_file) or server.poll() is not None:
                break
            time.sleep(0.05)
        t.check(os.path.exists(port_file), "the venv's dscached starts (exit %s)" % server.poll())
        if os.path.exists(port_file):
            with open(port_file) as f:
                addr = "127.0.0.1:" + f.read().strip()
            r = run(vpy, USE.replace("fallback_path=%r" % data, "servers=%r" % addr))
            t.check(r.returncode == 0 and r.stdout.strip().splitlines()[-1:] == [WANT],
                    "the package reads it from the venv's dscached: %s %s"
                    % (r.stdout[-200:], r.stderr[-400:]))
    finally:
        server.kill()
        server.wait()

# ---- (3) a pure-Python wheel: libdscache from the system --------------------------------------
vpy = venv("venv-plain")
if pip(vpy, "install", "--no-deps", source_copy("src1"), extra={"DSCACHE_PURE": "1"}):
    loc = run(vpy, "import importlib.util as u; print(u.find_spec('dscache').origin)")
    t.check(loc.stdout.startswith(os.path.join(tmp, "venv-plain")),
            "pip installed into the venv: %s" % loc.stdout.strip())
    if libs:
        got = use(vpy, "pip-installed package + LD_LIBRARY_PATH",
                  {"LD_LIBRARY_PATH": os.path.dirname(libs[0])})
        t.check(got == "libdscache.so.0", "found through the dynamic linker: %s" % got)
        t.check(last_fast.startswith("None not found"),
                "a pure-Python package has no compiled next() and says so: %s" % last_fast)
    if not sys_has_lib:
        r = run(vpy, "import dscache")
        t.check(r.returncode != 0 and "ImportError" in r.stderr, "no library: ImportError")
        for place in ("DSCACHE_LIB", "bundled", "dynamic linker search path", "libdscache.so.0"):
            t.check(place in r.stderr, "the ImportError lists %r: %s" % (place, r.stderr[-700:]))

# ---- (4) a wheel that bundles a given libdscache.so ---------------------------------------------------
dist = os.path.join(tmp, "dist")
r = subprocess.run([PY, "-m", "pip", "--disable-pip-version-check", "-q", "wheel", "--no-index",
                    "--no-deps", source_copy("src2"), "-w", dist],
                   capture_output=True, text=True, cwd=tmp,
                   env=dict(clean, DSCACHE_BUNDLE_LIB=os.path.join(lib_dir, "libdscache.so"),
                            **({"DSCACHE_BUNDLE_FASTPATH": fast_built[0]} if fast_built else {})))
t.check(r.returncode == 0, "pip wheel with DSCACHE_BUNDLE_LIB: %s" % r.stderr[-800:])
wheels = glob.glob(os.path.join(dist, "dscache-*.whl"))
t.check(len(wheels) == 1, "one wheel: %s" % wheels)
if wheels:
    whl = wheels[0]
    print("wheel: %s (%d bytes)" % (os.path.basename(whl), os.path.getsize(whl)))
    t.check("linux" in os.path.basename(whl), "the wheel is platform-tagged: " + whl)
    names = zipfile.ZipFile(whl).namelist()
    for want in ("dscache/__init__.py", "dscache/torch.py", "dscache/libdscache.so",
                 "dscache/py.typed"):
        t.check(want in names, "wheel holds %s" % want)
    wpy = venv("venv-wheel")
    if pip(wpy, "install", "--no-index", "--no-deps", whl):
        got = use(wpy, "wheel with the bundled library")
        t.check(got is not None and got.endswith(os.path.join("dscache", "libdscache.so"))
                and got.startswith(os.path.join(tmp, "venv-wheel")),
                "the wheel's own copy is loaded: %s" % got)
        fast_in(os.path.join(tmp, "venv-wheel"), "wheel with DSCACHE_BUNDLE_FASTPATH")
        # $DSCACHE_LIB comes first, before the bundled copy.
        got = use(wpy, "wheel + DSCACHE_LIB", {"DSCACHE_LIB": os.path.join(lib_dir,
                                                                              "libdscache.so")})
        t.check(got == os.path.join(lib_dir, "libdscache.so"), "DSCACHE_LIB wins: %s" % got)
        r = run(wpy, "import dscache", {"DSCACHE_LIB": os.path.join(tmp, "nothing.so")})
        t.check(r.returncode != 0 and "DSCACHE_LIB=" + os.path.join(tmp, "nothing.so")
                in r.stderr, "a bad DSCACHE_LIB is an ImportError naming it: %s"
                % r.stderr[-300:])
sys.exit(t.done())
