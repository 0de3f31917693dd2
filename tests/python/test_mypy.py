"""The Python package's type hints, checked by mypy (Debian's package; deploy/local/setup.sh
installs it) with the configuration in client/python/pyproject.toml ([tool.mypy]):

1. `mypy -p dscache` passes on the package as it is;
2. a program using the public API as documented passes, and the same program with wrong
   argument types (batch_size="32", a Writer path of 7, Image(size="big"), a list given to
   load_state_dict, set_epoch's None added to an int) fails on exactly those lines: the hints say
   something to users;
3. the checks bite on the package itself: a copy with a type error in a public module, and a
   copy with a function left unannotated there, each fail naming the line.
Skips (77) with the reason when mypy is not installed."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

MYPY = shutil.which("mypy")
if MYPY is None:
    te.skip("mypy is not installed (Debian: apt-get install mypy, or deploy/local/setup.sh): "
            "the package's type hints are not checked")

PKG_DIR = os.path.join(te.SRC, "client", "python")
CONFIG = os.path.join(PKG_DIR, "pyproject.toml")
# The cache beside the build (kept between runs: a second run checks only what changed).
LIB = os.environ.get("DSC_LIB")
CACHE = os.path.join(os.path.dirname(LIB), "mypy-cache") if LIB else None
tmp = tempfile.mkdtemp(prefix="dsc-mypy-")
CACHE = CACHE or os.path.join(tmp, "cache")


def mypy(args, cwd, config=CONFIG):
    """(exit code, output) of mypy with the package's configuration (or config's)."""
    r = subprocess.run([MYPY, "--config-file", config, "--cache-dir", CACHE,
                        "--no-error-summary", "--show-error-codes"] + args,
                       cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode, r.stdout


def error_lines(output, name):
    """{line number} of the errors mypy reported in the file called name."""
    return {int(m.group(1)) for m in re.finditer(r"^(?:.*/)?%s:(\d+): error:" % re.escape(name),
                                                   output, re.M)}


t = te.Checks()
version = subprocess.run([MYPY, "--version"], stdout=subprocess.PIPE, text=True).stdout.strip()
print(version)

# 1. The package as it is.
rc, out = mypy(["-p", "dscache"], PKG_DIR)
t.check(rc == 0, "mypy -p dscache passes (exit %d):\n%s" % (rc, out))

# 2. A user's program: right, then wrong on the lines marked BAD.
USER = '''\
from typing import Any, Dict, List, Optional
import dscache
import dscache.torch

def train(servers: str) -> int:
    loader = dscache.Loader(servers=servers, dataset="d", batch_size=32, seed=0,
                            decode={"image": dscache.Image(size=(224, 224), flip=True)},
                            pad={"ids": 0}, max_len={"ids": 128}, epochs=2)
    n = len(loader)
    loader.set_epoch(1)
    for batch in loader:
        n += batch["label"].shape[0]
    state: Dict[str, Any] = loader.state_dict()
    loader.load_state_dict(state)
    stall: float = loader.stats()["stall_fraction"]
    fields = [name for name, dtype, shape in loader.fields]
    loader.close()
    ds = dscache.MapDataset(servers=[servers], dataset="d", batch_size=64)
    sample = ds[3]
    batch2 = ds[[1, 2, 3]]
    with dscache.Writer("out", fields={"label": "i64", "ids": "i32[]"}, compress="lz4") as w:
        w.write({"label": 1, "ids": [1, 2, 3]})
        w.write_batch({"label": [1, 2], "ids": [[1], [2, 3]]})
    stats: Optional[Dict[str, Any]] = w.close()
    mix = dscache.Mixture([dscache.Source("a", weight=2.0), dscache.Source("b")], servers=servers)
    tds = dscache.torch.Dataset(servers=servers, dataset="d")
    dl = dscache.torch.DataLoader(tds, pin_memory=True)
    r, world, source = dscache.resolve_rank()
    try:
        pass
    except dscache.Error as e:
        code: int = e.code
    return n + r + world + len(fields) + len(sample) + len(batch2)
'''
BAD = {
    'batch_size=32, seed=0,': 'batch_size="32", seed=0,',            # str for int
    'dscache.Writer("out",': 'dscache.Writer(7,',                     # int for a path
    'dscache.Image(size=(224, 224), flip=True)': 'dscache.Image(size="big", flip=True)',
    'loader.load_state_dict(state)': 'loader.load_state_dict(b"state")',  # bytes for a dict
    'n = len(loader)': 'n = len(loader) + loader.set_epoch(0)',     # None in arithmetic
}
user_dir = os.path.join(tmp, "user")
os.makedirs(user_dir)
with open(os.path.join(user_dir, "good.py"), "w") as f:
    f.write(USER)
bad_text, bad_lines = USER, set()
for old, new in BAD.items():
    t.check(bad_text.count(old) == 1, "the bad program's edit %r applies once" % old)
    bad_text = bad_text.replace(old, new)
    bad_lines.add(bad_text[:bad_text.index(new)].count("\n") + 1)
with open(os.path.join(user_dir, "bad.py"), "w") as f:
    f.write(bad_text)
os.environ["MYPYPATH"] = PKG_DIR  # the package from the checkout, as an installed one would be
rc, out = mypy(["good.py"], user_dir)
t.check(rc == 0, "a program using the public API as documented type-checks (exit %d):\n%s"
        % (rc, out))
rc, out = mypy(["bad.py"], user_dir)
found = error_lines(out, "bad.py")
t.check(rc != 0 and found == bad_lines,
        "the wrong arguments are reported on lines %s, and nothing else: mypy reported lines %s "
        "(exit %d):\n%s" % (sorted(bad_lines), sorted(found), rc, out))
del os.environ["MYPYPATH"]

# 3. The configuration bites on the package itself (a copy of it).
for what, module, old, new in (
        ("a type error in a public module", "writer.py",
         "        self.records = 0\n", "        self.records = 0\n        self.path = 0\n"),
        ("an unannotated function in a public module", "loader.py",
         "class Image:\n", "def _probe(x):\n    return x\n\n\nclass Image:\n")):
    copy = os.path.join(tmp, "pkg-" + module)
    shutil.copytree(PKG_DIR, copy, ignore=shutil.ignore_patterns("__pycache__", "*.so*"))
    path = os.path.join(copy, "dscache", module)
    with open(path) as f:
        text = f.read()
    t.check(text.count(old) == 1, "%s: the probe's edit applies once" % what)
    text = text.replace(old, new, 1)
    line = text[:text.index(new)].count("\n") + 1 + (1 if module == "writer.py" else 0)
    with open(path, "w") as f:
        f.write(text)
    rc, out = mypy(["-p", "dscache"], copy, os.path.join(copy, "pyproject.toml"))
    t.check(rc != 0 and line in error_lines(out, module),
            "%s (dscache/%s line %d) fails mypy there (exit %d):\n%s" % (what, module, line, rc,
                                                                       out))
    print("%s: mypy reports %s" % (what, "; ".join(l for l in out.splitlines() if "error" in l)))

shutil.rmtree(tmp, ignore_errors=True)
sys.exit(t.done())
