"""The `dscache` command of a pip-installed package: runs the dscache binary bundled in the wheel
(dscache/bin/dscache: ingest, inspect, stat, top, bench, ...)."""

import os
import sys


def main():
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "dscache")
    if not os.access(exe, os.X_OK):
        sys.stderr.write("dscache: this package carries no dscache command (%s is missing): it "
                         "was built without one (DSCACHE_PURE or DSCACHE_BUNDLE_LIB alone); "
                         "reinstall from a checkout (pip install ./client/python) or use the "
                         "one `cmake --install` puts in PREFIX/bin\n" % exe)
        return 127
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
