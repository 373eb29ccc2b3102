"""The object copies of one run, made by one process and known to all.

Each collector remembers the copies it made (``QDir``'s table, by the
source file's identity: device, inode, size, mtime, ctime). Alone, every
collector read and checksummed every object it met, so a library that
processes on all CPUs map was read once per CPU: on a large machine, tens
of times the size of every binary a run meets. The supervisor creates one
anonymous file (a memfd, closed on exec) before it forks the collectors;
each appends a line per finished copy, and reads the lines the others
added when it meets an object it has not copied itself.

The file is this run's processes' alone; its lines are checked all the
same (a malformed one is skipped), and it is bounded (MAX_BYTES: past it
a collector copies for itself, as without sharing).
"""

from __future__ import annotations

import fcntl
import os

from qtools.qformat import QFormatError
from qtools.qformat.copies import Stored
from qtools.qformat.names import parse_copy_name

MAX_BYTES = 8 << 20  # about 50,000 copies
Identity = tuple[int, ...]


class SharedCopies:
    """Copies by source identity, in a file the run's processes share."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._known: dict[Identity, Stored] = {}
        self._read = 0  # bytes of the file parsed

    @classmethod
    def create(cls) -> SharedCopies | None:
        """A new, empty table; None where there can be none (no memfd)."""
        try:
            fd = os.memfd_create("q-syscollect-copies", os.MFD_CLOEXEC)
            # appends from several processes never overwrite each other
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
        except (AttributeError, OSError):
            return None
        return cls(fd)

    def get(self, identity: Identity) -> Stored | None:
        """The copy made of a file in this state, by any process of the run."""
        self._catch_up()
        return self._known.get(identity)

    def add(self, identity: Identity, stored: Stored) -> None:
        """Tell the others about a finished copy."""
        if self._known.get(identity) == stored:
            return
        self._known[identity] = stored
        line = " ".join(map(str, (*identity, int(stored.truncated), stored.name))) + "\n"
        try:
            if os.fstat(self.fd).st_size + len(line) <= MAX_BYTES:
                os.write(self.fd, line.encode())
        except OSError:
            pass  # the others copy for themselves

    def names(self) -> set[str]:
        """The names of the copies the run's processes have told so far."""
        self._catch_up()
        return {stored.name for stored in self._known.values()}

    def _catch_up(self) -> None:
        try:
            size = min(os.fstat(self.fd).st_size, MAX_BYTES)
            if size <= self._read:
                return
            data = os.pread(self.fd, size - self._read, self._read)
        except OSError:
            return
        end = data.rfind(b"\n") + 1  # a line still being written is read next time
        self._read += end
        for line in data[:end].splitlines():
            parsed = _parse(line)
            if parsed is not None:
                self._known[parsed[0]] = parsed[1]


def _parse(line: bytes) -> tuple[Identity, Stored] | None:
    fields = line.split(b" ")
    if len(fields) != 7 or not all(f.isdigit() for f in fields[:6]):
        return None
    try:
        name = fields[6].decode("ascii")
        parse_copy_name(name)
    except (UnicodeDecodeError, QFormatError):
        return None
    return tuple(int(f) for f in fields[:5]), Stored(name, fields[5] == b"1")
