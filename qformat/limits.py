"""How much of a `.q` a reader takes in: caps for input that may come from anyone.

A `.q` directory or archive can be crafted: a gzip bomb, a `.hist` of sixty
million lines, millions of distinct stacks, a huge `.info`. Readers count
as they stream and stop at these caps with ``LimitExceeded``, which names
the file, the cap and its key, so a tool can say how to raise it.

The defaults sit well above what q-syscollect writes (a rough measure of a
busy machine: a task set's `.stack` holds at most some hundred thousand
distinct stacks, its `.hist` one line per sampled instruction, its `.info`
about 300 bytes per mapped object), and keep a reader's memory and time
within what a workstation has:

- ``data-size`` 2 GiB: decompressed bytes of one `.hist`/`.stack`/`.edge`.
- ``lines`` 50,000,000: lines of one data file (counted before parsing, so
  a bigger file is refused in seconds, not after minutes of parsing).
- ``stacks`` 2,000,000: distinct stacks, in one `.stack` file and in a
  merged profile: ten times what the collector keeps per set, and about
  1.8 GB of the viewer's memory (2,000,000 stacks of 8 frames in 1,600
  functions).
- ``addresses`` 1,000,000: distinct addresses of one set (each is located
  and named), and distinct frames of a merged profile (each a function,
  or an address that none holds, with its row and arcs in the call
  graph): 155 MB at the cap where the addresses fall in named functions,
  1.1 GB where each is a frame of its own.
- ``info-size`` 16 MiB: one `.info` file (parsing costs about ten times
  its size in memory).
- ``copy-size`` 4 GiB: one object copy whose checksum is verified.
- ``debug-size`` 1 GiB: one DWARF section of a copy or debug file,
  inflated where compressed (held in memory as far as it is read); a
  larger one, or one whose header says so, is read as absent. A hundred
  times libpython 3.11's 9 MB of ``.debug_info``; a zlib bomb of a
  megabyte says a gigabyte.
- ``members`` 50,000: members of one tar archive (a `.q` of a busy day holds
  some thousands of files: a set has an `.info` and three data files per
  version, plus one copy per object).
- ``archive-size`` 8 GiB: one tar archive, as stored, or decompressed for a
  `.tar.gz` (whose content is held in memory while it is read).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from .errors import QFormatError


class Limits(NamedTuple):
    data_size: int = 2 << 30
    lines: int = 50_000_000
    stacks: int = 2_000_000
    info_size: int = 16 << 20
    copy_size: int = 4 << 30
    members: int = 50_000
    archive_size: int = 8 << 30
    addresses: int = 1_000_000
    debug_size: int = 1 << 30


DEFAULT_LIMITS = Limits()

_SIZE_KEYS = frozenset({"data-size", "info-size", "copy-size", "debug-size", "archive-size"})
_KEYS = ("data-size", "lines", "stacks", "addresses", "info-size", "copy-size", "debug-size",
         "members", "archive-size")
_NUMBER = re.compile(r"(\d+(?:\.\d+)?)([kmgt]?)(i?b?)\Z", re.I)
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}


class LimitExceeded(QFormatError):
    """Input larger than a cap of ``Limits``; ``key`` names the cap."""

    def __init__(self, message: str, path: str | None, key: str, limit: int) -> None:
        super().__init__(message, path)
        self.key = key
        self.limit = limit


def show(key: str, value: int) -> str:
    """A cap as a person reads it: ``2 GiB``, ``50000000``."""
    if key in _SIZE_KEYS:
        for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
            if value >= 1 << shift and value % (1 << shift) == 0:
                return f"{value >> shift} {unit}"
        return f"{value} bytes"
    return str(value)


def exceeded(what: str, path: str | None, key: str, limit: int) -> LimitExceeded:
    """The error for input beyond ``limit``: ``what`` says what was found."""
    return LimitExceeded(f"{what}, over the limit of {show(key, limit)} ({key})", path, key,
                         limit)


def parse_limits(text: str, base: Limits = DEFAULT_LIMITS) -> Limits:
    """``KEY=VALUE,...`` over ``base``. Sizes take binary multiples (``64M``
    is 64 MiB), counts decimal ones (``5M`` is 5,000,000); ValueError names
    what is wrong."""
    changes: dict[str, int] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        if not sep or key not in _KEYS:
            raise ValueError(f"{item!r}: want KEY=VALUE with KEY one of {', '.join(_KEYS)}")
        m = _NUMBER.match(value.strip())
        if not m or (m[3] and key not in _SIZE_KEYS):
            raise ValueError(f"{item!r}: not a {'size' if key in _SIZE_KEYS else 'count'} "
                             f"(e.g. {'64M, 2G' if key in _SIZE_KEYS else '1000000, 5M'})")
        base_unit = 1024 if key in _SIZE_KEYS else 1000
        number = int(float(m[1]) * base_unit ** _POWERS[m[2].lower()])
        if number < 1:
            raise ValueError(f"{item!r}: a limit must be at least 1")
        changes[key.replace("-", "_")] = number
    return base._replace(**changes)


def describe_defaults() -> str:
    """The keys and their defaults, for a help text."""
    return ", ".join(f"{k}={show(k, getattr(DEFAULT_LIMITS, k.replace('-', '_')))}"
                     .replace(" ", "") for k in _KEYS)
