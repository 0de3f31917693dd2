"""Build hook of the dscache package: with DSCACHE_BUNDLE_LIB=/path/to/libdscache.so the
library is copied into the package (dscache/libdscache.so, found first after $DSCACHE_LIB) and
the wheel is tagged for this platform; without it the package is pure Python and uses an
installed libdscache. Metadata is in pyproject.toml."""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

BUNDLE = os.environ.get("DSCACHE_BUNDLE_LIB")


class BuildPy(build_py):
    def run(self):
        super().run()
        if BUNDLE:
            if not os.path.isfile(BUNDLE):
                raise SystemExit("DSCACHE_BUNDLE_LIB=%s: no such file" % BUNDLE)
            dest = os.path.join(self.build_lib, "dscache", "libdscache.so")
            shutil.copyfile(os.path.realpath(BUNDLE), dest)
            os.chmod(dest, 0o755)


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return bool(BUNDLE)  # a bundled .so makes the wheel platform-specific


setup(cmdclass={"build_py": BuildPy}, distclass=BinaryDistribution)
