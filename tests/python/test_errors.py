"""dscache.DatasetChangedError: a dataset replaced in place under a running Loader (--data-root,
new manifest) stops it with DSC_ECHANGED raised as DatasetChangedError, a dscache.Error with
that code, never with batches of the new version; and the error families map every code they
list to their class."""
import os
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
import dsc_testenv  # noqa: E402

dsc_testenv.require_tools()
import dscache  # noqa: E402
from dscache import _errors  # noqa: E402

c = dsc_testenv.Checks()

# The mapping: the class, its family, the code the library gives the name.
lib = dscache._capi._load()
code = -4050
c.check(lib.dsc_err_name(code).decode() == "DSC_ECHANGED", "-4050 is DSC_ECHANGED")
err = _errors._error(code, "dataset changed", "DSC_ECHANGED")
c.check(type(err) is dscache.DatasetChangedError, "DSC_ECHANGED -> DatasetChangedError")
c.check(isinstance(err, dscache.Error) and err.code == code, "a dscache.Error with .code")
c.check(dscache.DatasetChangedError.__module__ == "dscache", "public as dscache's")
c.check(type(_errors._error(-1, "x", "DSC_EUNAVAIL")) is dscache.Unavailable, "others unchanged")

# End to end: a loader reading a dataset that is swapped for a new version under it.
env = dsc_testenv.Env()
root = os.path.join(env.dir, "root")
os.makedirs(root)
cli = os.path.join(dsc_testenv.BIN, "dscache")


def ingest(path, seed):
    subprocess.run([cli, "ingest", "synthetic", "-o", path, "--name", "swap", "--samples", "20000",
                    "--field", "x:u8:2048", "--compress", "none", "--shard-size", "1M",
                    "--chunk-size", "64K", "--seed", str(seed)], check=True,
                   stdout=subprocess.DEVNULL)


ingest(os.path.join(root, "swap"), 1)
ingest(os.path.join(env.dir, ".swap.new"), 7)
# Warm and resident whole: the old version is served from RAM until the server sees the new
# manifest. (A shard of the old version loaded from disk after the swap reads the new file: the
# server then answers CORRUPT, not CHANGED; see docs/operations.md.)
port_file, http_file = os.path.join(env.dir, "port"), os.path.join(env.dir, "hport")
proc = subprocess.Popen([os.path.join(dsc_testenv.BIN, "dscached"), "--listen", "127.0.0.1:0",
                         "--http", "127.0.0.1:0", "--port-file", port_file, "--http-port-file",
                         http_file, "--log-level", "error", "--data-root", root, "--memory",
                         "128M", "--warm"])
env.procs.append(proc)
ready = False
for _ in range(400):
    if os.path.exists(http_file) and os.path.getsize(http_file) > 0:
        try:
            url = "http://127.0.0.1:%s/readyz" % open(http_file).read().strip()
            ready = urllib.request.urlopen(url, timeout=2).status == 200
        except (OSError, ValueError):
            pass
    if ready:
        break
    time.sleep(0.05)
c.check(ready, "the server warmed up")
addr = "127.0.0.1:%s" % open(port_file).read().strip()

raised = None
batches = 0
loader = dscache.Loader(addr, "swap", batch_size=64, cache_bytes=8 << 20, shuffle_window=1024,
                        timeout_ms=2000)
try:
    deadline = time.time() + 20
    swapped = False
    while time.time() < deadline and raised is None:
        try:
            for _ in loader:
                batches += 1
                if batches == 20 and not swapped:
                    os.rename(os.path.join(root, "swap"), os.path.join(env.dir, ".swap.old"))
                    os.rename(os.path.join(env.dir, ".swap.new"), os.path.join(root, "swap"))
                    swapped = True
                time.sleep(0.002)
                if time.time() > deadline:
                    break
        except dscache.Error as e:
            raised = e
finally:
    loader.close()
c.check(isinstance(raised, dscache.DatasetChangedError),
        "the loader across the swap raised DatasetChangedError (got %r after %d batches)"
        % (raised, batches))
if raised is not None:
    c.check(raised.code == code and raised.name == "DSC_ECHANGED", "code and name: %s" % raised)
env.close()
sys.exit(c.done())
