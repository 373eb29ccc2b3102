"""The installed distribution's version: one place for every command.

The number itself is written once, in pyproject.toml; the commands read it
from the installed metadata, so a wheel, an sdist and an editable install
all report what was built.
"""

from __future__ import annotations

DISTRIBUTION = "q-tools"


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"
