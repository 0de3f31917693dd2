"""The `dscache` and `dscached` commands of a pip-installed package: each runs the binary bundled
in the wheel (dscache/bin/dscache: ingest, inspect, stat, top, bench, ...; dscache/bin/dscached:
the server), which finds the libraries bundled beside it (dscache/_libs) by its RUNPATH."""

import os
import sys


def _exec(name: str) -> int:
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", name)
    if not os.access(exe, os.X_OK):
        sys.stderr.write("%s: this package carries no %s command (%s is missing): it was built "
                         "without one (DSCACHE_PURE, or DSCACHE_BUNDLE_LIB without "
                         "DSCACHE_BUNDLE_%s); reinstall from a checkout (pip install "
                         "./client/python) or use the one `cmake --install` puts in PREFIX/bin\n"
                         % (name, name, exe, "CLI" if name == "dscache" else "SERVER"))
        return 127
    os.execv(exe, [exe] + sys.argv[1:])


def dscache() -> int:
    return _exec("dscache")


def dscached() -> int:
    return _exec("dscached")


if __name__ == "__main__":
    sys.exit(dscache())
