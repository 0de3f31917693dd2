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

# End to end: a loader reading a dataset that is swapped for a new version under it, twice:
# warm (every shard resident: the old version is served from RAM until the watcher's rescan sees
# the new manifest, then the GETs name a version no longer served), and cold with neither inotify
# nor a periodic rescan (DSC_TEST_NO_INOTIFY=1, --data-root-interval 0): the shards of the old
# version loaded after the swap read the new files, fail the old manifest's checksums, and the
# server must answer CHANGED (and rescan) rather than mark them damaged and answer CORRUPT; and
# cold on a store too small to hold a shard (read-throughs).
cli = os.path.join(dsc_testenv.BIN, "dscache")


def ingest(path, seed):
    subprocess.run([cli, "ingest", "synthetic", "-o", path, "--name", "swap", "--samples", "20000",
                    "--field", "x:u8:2048", "--compress", "none", "--shard-size", "1M",
                    "--chunk-size", "64K", "--seed", str(seed)], check=True,
                   stdout=subprocess.DEVNULL)


def swap_case(warm, memory="128M"):
    env = dsc_testenv.Env()
    what = ("warm" if warm else "cold, no watcher") + ", --memory " + memory
    root = os.path.join(env.dir, "root")
    os.makedirs(root)
    ingest(os.path.join(root, "swap"), 1)
    ingest(os.path.join(env.dir, ".swap.new"), 7)
    port_file, http_file = os.path.join(env.dir, "port"), os.path.join(env.dir, "hport")
    log_path = os.path.join(env.dir, "server.log")
    args = [os.path.join(dsc_testenv.BIN, "dscached"), "--listen", "127.0.0.1:0", "--http",
            "127.0.0.1:0", "--port-file", port_file, "--http-port-file", http_file,
            "--log-level", "info", "--data-root", root, "--memory", memory]
    server_env = dict(os.environ)
    if warm:
        args.append("--warm")
    else:
        args += ["--data-root-interval", "0"]
        server_env["DSC_TEST_NO_INOTIFY"] = "1"
    log = open(log_path, "w")
    proc = subprocess.Popen(args, stderr=log, env=server_env)
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
    c.check(ready, "%s: the server is ready" % what)
    addr = "127.0.0.1:%s" % open(port_file).read().strip()

    raised = None
    batches = 0
    loader = dscache.Loader(addr, "swap", batch_size=64, cache_bytes=8 << 20,
                            shuffle_window=1024, timeout_ms=2000)
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
            "%s: the loader across the swap raised DatasetChangedError (got %r after %d batches)"
            % (what, raised, batches))
    if raised is not None:
        c.check(raised.code == code and raised.name == "DSC_ECHANGED",
                "%s: code and name: %s" % (what, raised))
        # The message names the dataset and the server that changed it under the job.
        c.check("'swap'" in str(raised) and addr in str(raised),
                "%s: the error names the dataset 'swap' and the server %s: %s"
                % (what, addr, raised))
    if not warm:
        # The server found the replacement itself and rescanned: it serves the new version.
        served_new = False
        for _ in range(100):
            text = open(log_path).read()
            if "dataset swap changed" in text:
                served_new = True
                break
            time.sleep(0.05)
        text = open(log_path).read()
        c.check("replaced on disk" in text, "%s: the server logged the replacement" % what)
        c.check(served_new, "%s: the server rescanned without inotify or a periodic rescan"
                % what)
        c.check("marked bad" not in text and "damaged" not in text,
                "%s: no shard of the old version was marked damaged" % what)
    env.close()
    log.close()


swap_case(True)
swap_case(False)
# A store too small for the shards: they are read through (chunk ranges, the index read from
# the file or cached from before the swap), never resident.
swap_case(False, "2M")
sys.exit(c.done())
