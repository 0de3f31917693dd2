"""Shared by tests/python/test_*.py: a temporary dataset ingested from numpy arrays, and a
dscached on 127.0.0.1 port 0 (--port-file) stopped by PID at exit (and killed by the kernel if
the test process dies first)."""
import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

BIN = os.environ.get("DSC_BIN")
SRC = os.environ.get("DSC_SRC", os.path.normpath(os.path.join(os.path.dirname(__file__), "../..")))
sys.path.insert(0, os.path.join(SRC, "client", "python"))


# Servers die with the test process even when it cannot clean up (a crash, an ASan abort, a
# SIGKILL from ctest's time-out): setpriv (util-linux) sets their parent-death signal and execs
# them, so the PID stays the server's. Servers start from the main thread (the signal follows
# the thread that forked).
DIE_WITH_TEST = ["setpriv", "--pdeathsig", "KILL"] if shutil.which("setpriv") else []


def skip(reason):
    print("SKIP: " + reason)
    sys.exit(77)


def require_tools():
    if not BIN or not os.path.exists(os.path.join(BIN, "dscached")):
        skip("DSC_BIN does not hold dscached (run through ctest)")
    try:
        import numpy  # noqa: F401
    except ImportError:
        skip("numpy is missing")


class Env:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="dsc-py-")
        self.procs = []
        atexit.register(self.close)

    def ingest_npy(self, name, arrays, compress="lz4", chunk_size="4K"):
        import numpy as np
        args = [os.path.join(BIN, "dscache"), "ingest", "npy", "-o",
                os.path.join(self.dir, name), "--name", name, "--compress", compress,
                "--chunk-size", chunk_size, "--shard-size", "64K"]
        for field, arr in arrays.items():
            path = os.path.join(self.dir, "%s-%s.npy" % (name, field))
            np.save(path, arr)
            args.append("%s=%s" % (field, path))
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
        return os.path.join(self.dir, name)

    def start_server(self, *dirs):
        port_file = os.path.join(self.dir, "port.%d" % len(self.procs))
        args = [os.path.join(BIN, "dscached"), "--listen", "127.0.0.1:0", "--http", "off",
                "--port-file", port_file, "--log-level", "error", "--threads", "2"]
        for d in dirs:
            args += ["--data", d]
        proc = subprocess.Popen(DIE_WITH_TEST + args)
        self.procs.append(proc)
        for _ in range(200):
            if os.path.exists(port_file) and os.path.getsize(port_file) > 0:
                return proc, "127.0.0.1:%s" % open(port_file).read().strip()
            if proc.poll() is not None:
                raise RuntimeError("dscached exited with %d" % proc.returncode)
            time.sleep(0.05)
        raise RuntimeError("dscached wrote no port file")

    def close(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
        self.procs = []
        shutil.rmtree(self.dir, ignore_errors=True)


class Checks:
    def __init__(self):
        self.failures = 0

    def check(self, cond, what):
        if not cond:
            print("CHECK failed: " + what, file=sys.stderr)
            self.failures += 1

    def done(self):
        if self.failures:
            print("FAILED: %d check(s)" % self.failures, file=sys.stderr)
            return 1
        print("ok")
        return 0
