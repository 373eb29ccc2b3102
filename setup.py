"""Package discovery for the top-level folders.

The folders common/, qformat/, daemon/ and viewer/ install as
qtools.common, qtools.qformat, qtools.daemon and qtools.viewer (names that
cannot collide with other distributions' `daemon` or `viewer`). setuptools' automatic discovery does
not know such a prefix, so the package list is computed here from the tree:
a new subpackage is found without a hand-kept list that can fall behind.
Everything else is in pyproject.toml.
"""

from setuptools import find_packages, setup

TOP = ("common", "qformat", "daemon", "viewer")

setup(
    package_dir={f"qtools.{top}": top for top in TOP},
    packages=[f"qtools.{name}" for name in find_packages(include=[f"{t}*" for t in TOP])
              if name.split(".")[0] in TOP],
)
