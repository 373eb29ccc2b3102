"""Reading jitdump files for the collector: which file to trust, and how much of it.

A jitdump sits in /tmp, which is everybody's, and the collector runs as
root: only a regular file (not through a final symlink, no FIFO) with the
inode the task mapped and owned by the task's user is read, through the
descriptor that was checked. It is read as it grows, each call until the
deadline its caller gives (what is left waits for the next call), and
given up once reading it took MAX_READ_SECONDS; whole records are kept up
to ``limit`` bytes.
"""

from __future__ import annotations

import fcntl
import math
import os
import re
import time
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING

from qtools.common.blake import blake2b

from ..machine.host import Host
from ..machine.tasks import Mapping, Process
from .jitindex import PlacementIndex

if TYPE_CHECKING:  # the decoder is imported when a process has a dump (most runs: never)
    from qtools.qformat.jit.jitdump import JitdumpParser, Placements, Record

DEFAULT_LIMIT = 64 << 20  # bytes of one dump kept (whole records)
CHUNK = 16 << 10  # bytes read and indexed between looks at the clock (about 250 records)
MAX_READ_SECONDS = 10.0  # of one collector's time spent reading one dump; then it is given up
DUMP_NAME = re.compile(r"(?:^|/)jit-(\d+)\.dump$")


class SaidOnce:
    """Problems said once per run, by whichever collector meets them first.

    Every collector reads the dumps of the processes it samples, so each
    would say the same thing. They share this table: a memfd made when the
    module is imported, which the supervisor does before it forks them;
    POSIX record locks (per process) make test-and-set atomic."""

    SLOTS = 4096

    def __init__(self) -> None:
        self.local: set[bytes] = set()
        try:
            self.fd = os.memfd_create("q-said-once", os.MFD_CLOEXEC)
            os.ftruncate(self.fd, self.SLOTS * 8)
        except (OSError, AttributeError):
            self.fd = -1

    def first(self, text: str) -> bool:
        key = blake2b(text.encode(), digest_size=8).digest()
        if key == bytes(8) or key in self.local:
            return key not in self.local
        self.local.add(key)
        if self.fd < 0:
            return True
        try:
            fcntl.lockf(self.fd, fcntl.LOCK_EX)
            try:
                table = os.pread(self.fd, self.SLOTS * 8, 0)
                slots = [table[i:i + 8] for i in range(0, len(table), 8)]
                if key in slots:
                    return False
                if bytes(8) in slots:
                    os.pwrite(self.fd, key, slots.index(bytes(8)) * 8)
                return True
            finally:
                fcntl.lockf(self.fd, fcntl.LOCK_UN)
        except OSError:
            return True


_said = SaidOnce()  # before the supervisor forks: see SaidOnce


def said_once(line: str) -> bool:
    """True the first time any collector of this run asks about ``line``."""
    return _said.first(line)


def is_dump_path(path: str) -> bool:
    return DUMP_NAME.search(path) is not None


def loads(n: int) -> str:
    """``n`` code loads, said as a person would."""
    return f"the {n} code load" + ("" if n == 1 else "s") if n else "no code load"


def task_owner(proc: Process) -> int | None:
    """The task's user as the task table recorded it (first seen, fork,
    exec), kept after the task ended; None where it never saw one, and then
    the dump is not read (the rule for perf maps too)."""
    return proc.uid


def open_dump(proc: Process, m: Mapping, owner: int | None,
              host: Host) -> tuple[int | None, str | None]:
    """(fd, None) for the dump ``m`` maps, or (None, why not). The kernel's
    own link first, then the path as the task sees it (not through a final
    symlink); either must be a regular file with the mapping's device and
    inode, owned by the task's user."""
    if owner is None:  # gone before it was seen, and no owner recorded: nothing to check with
        return None, None
    for opener in (lambda: host.open_mapped_file(proc.pid, m.start, m.end),
                   lambda: host.open_in_root(proc.pid, m.obj.path),
                   lambda: host.open_plain(m.obj.path)):
        fd = opener()
        if fd is None:
            continue
        st = os.fstat(fd)
        if m.obj.ino and (st.st_ino != m.obj.ino
                          or (os.major(st.st_dev), os.minor(st.st_dev)) != m.obj.dev):
            os.close(fd)
            continue
        if st.st_uid != owner:
            os.close(fd)
            return None, f"owned by uid {st.st_uid}, not by the task's uid {owner}: not read"
        return fd, None
    return None, None


def _jitdump() -> ModuleType:
    from qtools.qformat.jit import jitdump
    return jitdump


class DumpReader:
    """One dump, read as it grows; keeps header and whole known records up to ``limit``."""

    def __init__(self, path: str, fd: int, limit: int, mode: int = 0o400) -> None:
        self.path = path
        self.fd = fd
        self.limit = limit
        self.mode = mode
        self.parser: JitdumpParser = _jitdump().JitdumpParser()
        self.kept = bytearray()
        self.placements: Placements = _jitdump().Placements()
        self.index = PlacementIndex()
        self.offset = 0  # bytes of the file read so far
        self.problem: str | None = None  # why reading stopped (said once)
        self.stopped = False
        self.behind = False  # the last read stopped at its deadline, before the file's end
        self.spent = 0.0  # seconds spent reading, by the clock of read_more
        self.max_seconds = MAX_READ_SECONDS
        self.copied: tuple[int, str] | None = None  # (bytes kept, copy name) of the last copy

    def read_more(self, deadline: float = math.inf,
                  clock: Callable[[], float] = time.monotonic) -> int:
        """Read and index what the file gained until ``deadline`` (by
        ``clock``); what is left waits for the next call (``behind``).
        Returns the number of new placements."""
        if self.stopped:
            return 0
        began = clock()
        added = 0
        at_end = False
        while not self.stopped:
            try:
                chunk = os.pread(self.fd, CHUNK, self.offset)
            except OSError as e:
                self.stop(f"cannot read: {e.strerror}")
                break
            if not chunk:
                at_end = True
                break
            self.offset += len(chunk)
            added += self._take(self.parser.feed(chunk))
            self._check_parser()
            if clock() >= deadline:
                break
        self.spent += clock() - began
        if not at_end and not self.stopped and self.spent > self.max_seconds:
            self.stop(f"reading it took more than {self.max_seconds:g} s; code loads after "
                      f"offset {self.parser.offset} are not kept")
        self.behind = not at_end and not self.stopped
        return added

    def _take(self, records: list[tuple[int, int, Record, bytes]]) -> int:
        """Keep and index whole records, within ``limit`` and the index's
        bound; returns the number of new placements."""
        if not self.kept and self.parser.header is not None:
            self.kept += self.parser.header_bytes
        unknown = _jitdump().Unknown
        added = 0
        for _off, size, rec, raw in records:
            if isinstance(rec, unknown):
                continue
            if len(self.kept) + size > self.limit:
                self.stop(f"larger than the {self.limit >> 20} MiB limit; code loads "
                          "after it are not kept")
                break
            self.kept += raw
            p = self.placements.add(rec)
            if p is not None:
                if not self.index.add(p):
                    self.stop(f"more than {self.index.max_entries} index entries (code loads "
                              "over code loads); later ones are not kept")
                    break
                added += 1
        return added

    def _check_parser(self) -> None:
        """Stop, saying why, at bytes the parser could not read."""
        error = self.parser.error
        if error is None or self.stopped:
            return
        if self.parser.header is None:  # e.g. TSC timestamps: nothing is usable
            self.stop(f"{error.message}; not read")
        else:
            self.stop(f"{error}; keeping {loads(len(self.placements.items))} before it")

    def unread(self) -> bool:
        """Does the file hold bytes not read yet?"""
        try:
            return os.fstat(self.fd).st_size > self.offset
        except OSError:
            return False

    def stop(self, why: str) -> None:
        self.problem = why
        self.stopped = True

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
