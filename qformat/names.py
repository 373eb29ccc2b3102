"""File names of a `.q` directory (docs/q-format.md, sections 2 and 6) — pure
string functions.

- task sets: ``PROG-pidPID-cpuCPU.TYPE#V``;
- per-CPU sets: ``kernel-cpuN.TYPE#V`` (pid 0 and, with -k, all kernel
  samples) and ``PROG-cpuN.TYPE#V`` (short-lived tasks of one program);
- object copies: ``.BASENAME.crc32.XXXXXXXX``.
"""

from __future__ import annotations

import functools
import re
from typing import Iterable

from .errors import QFormatError

TYPES = ("info", "hist", "edge", "stack", "threads")
KERNEL = "kernel"

_SET = re.compile(r"(?P<prog>.+?)(?:-pid(?P<pid>\d+))?-cpu(?P<cpu>\d+)\Z")
_FILE = re.compile(r"(?P<set>.+)\.(?P<type>info|hist|edge|stack|threads)(?:#(?P<version>\d+))?\Z")
_COPY = re.compile(r"\.(?P<base>.+)\.crc32\.(?P<crc>[0-9a-f]{8})\Z")
_UNSAFE = re.compile(r"[\x00-\x20\x7f/#\\]")
_AMBIGUOUS_TAIL = re.compile(r"-(pid|cpu)\d+\Z")


def sanitize(text: str) -> str:
    """Make ``text`` usable as one part of a file name.

    ``/``, whitespace, control characters, ``#`` (the version separator) and
    ``\\`` become ``_``; so do a leading ``.`` (names starting with a dot are
    object copies) and ``..`` anywhere.
    """
    s = _UNSAFE.sub("_", text)
    s = s.replace("..", "__")
    if s.startswith("."):
        s = "_" + s[1:]
    return s or "_"


def sanitize_prog(comm: str) -> str:
    """The PROG part for a task's command name.

    ``kernel`` is reserved, and a name ending like ``-pid12`` or ``-cpu1``
    would read back as part of the set name: both get a trailing ``_``.
    """
    s = sanitize(comm)
    return s + "_" if s == KERNEL or _AMBIGUOUS_TAIL.search(s) else s


def _prog_ok(prog: str) -> bool:
    return sanitize(prog) == prog and not _AMBIGUOUS_TAIL.search(prog)


@functools.total_ordering
class _Keyed:
    """Equal, ordered and hashed by ``_key()``: a name is a key, never changed."""

    __slots__ = ()

    def _key(self) -> tuple[object, ...]:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._key() == other._key()  # type: ignore[attr-defined]

    def __lt__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._key() < other._key()  # type: ignore[attr-defined,no-any-return]

    def __hash__(self) -> int:
        return hash(self._key())


class SetName(_Keyed):
    """A task set: the part of a name before ``.TYPE#V``.

    Sorts by program, CPU, then pid, the per-CPU sets (no pid) first.
    """

    __slots__ = ("prog", "cpu", "pid")

    def __init__(self, prog: str, cpu: int, pid: int | None = None) -> None:
        if cpu < 0 or (pid is not None and pid < 0):
            raise ValueError("cpu and pid must not be negative")
        if not _prog_ok(prog):
            raise ValueError(f"program name not sanitized: {prog!r}")
        self.prog = prog
        self.cpu = cpu
        self.pid = pid

    def _key(self) -> tuple[str, int, int]:
        return (self.prog, self.cpu, -1 if self.pid is None else self.pid)

    def __repr__(self) -> str:
        return f"SetName(prog={self.prog!r}, cpu={self.cpu!r}, pid={self.pid!r})"

    @property
    def is_kernel(self) -> bool:
        return self.prog == KERNEL and self.pid is None

    @property
    def is_aggregate(self) -> bool:
        return self.pid is None and not self.is_kernel

    def __str__(self) -> str:
        if self.pid is None:
            return f"{self.prog}-cpu{self.cpu}"
        return f"{self.prog}-pid{self.pid}-cpu{self.cpu}"

    def file(self, type_: str, version: int | None = None) -> str:
        return str(QName(self, type_, version))


class QName(_Keyed):
    """A data or info file name: set, type and optional version."""

    __slots__ = ("set", "type", "version")

    def __init__(self, set: SetName, type: str, version: int | None = None) -> None:
        if type not in TYPES:
            raise ValueError(f"unknown type {type!r}")
        if version is not None and version < 0:
            raise ValueError("version must not be negative")
        self.set = set
        self.type = type
        self.version = version

    def _key(self) -> tuple[SetName, str, int]:
        return (self.set, self.type, -1 if self.version is None else self.version)

    def __repr__(self) -> str:
        return f"QName(set={self.set!r}, type={self.type!r}, version={self.version!r})"

    def __str__(self) -> str:
        v = "" if self.version is None else f"#{self.version}"
        return f"{self.set}.{self.type}{v}"


def parse_set(text: str) -> SetName:
    m = _SET.match(text)
    if not m or not _prog_ok(m["prog"]):
        raise QFormatError(f"not a task-set name: {text!r}")
    pid = int(m["pid"]) if m["pid"] is not None else None
    return SetName(m["prog"], int(m["cpu"]), pid)


def parse_name(text: str) -> QName:
    """Parse ``PROG-pidN-cpuN.TYPE[#V]`` (or the per-CPU forms)."""
    check_plain_name(text)
    m = _FILE.match(text)
    if not m:
        raise QFormatError(f"not a q file name (PROG-pidN-cpuN.TYPE#V): {text!r}")
    version = int(m["version"]) if m["version"] is not None else None
    return QName(parse_set(m["set"]), m["type"], version)


def info_versions(names: Iterable[str]) -> dict[SetName, list[int]]:
    """The versions of every set that has an `.info#N` among ``names``, ascending."""
    found: dict[SetName, list[int]] = {}
    for name in names:
        if name.startswith(".") or ".info#" not in name:
            continue
        try:
            q = parse_name(name)
        except QFormatError:
            continue
        if q.version is not None:
            found.setdefault(q.set, []).append(q.version)
    for versions in found.values():
        versions.sort()
    return found


def check_plain_name(name: str) -> str:
    """Refuse anything but a plain file name inside the directory."""
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name \
            or "\x00" in name or ".." in name:
        raise QFormatError(f"not a plain file name: {name!r}")
    return name


def copy_name(basename: str, crc: int) -> str:
    """``.BASENAME.crc32.XXXXXXXX`` for an object copy."""
    return f".{sanitize(basename)}.crc32.{crc & 0xFFFFFFFF:08x}"


def parse_copy_name(name: str) -> tuple[str, int]:
    """(basename, crc) of an object-copy name."""
    m = _COPY.match(name)
    if not m:
        raise QFormatError(f"not an object copy name (.NAME.crc32.XXXXXXXX): {name!r}")
    return m["base"], int(m["crc"], 16)
