"""Room left in `.q` under --max-size, known to every process of a run.

Upkeep (retention.py, in the supervisor) removes the oldest closed slices
to bring `.q` under --max-size, but only every few seconds, while every
collector copies objects and perf maps meanwhile: a user's binaries, each
a new copy, passed a 100M bound by hundreds of megabytes between two
rounds. So a copy reserves the bytes it puts on the disk before it writes
them (``qformat.copies.Room``), from a ledger the run's processes share,
and a copy that would take `.q` past the bound is refused.

The ledger is a memfd the supervisor makes before it forks the
collectors, mapped by each and changed under a POSIX record lock (one
process at a time; the kernel drops the lock of a holder that dies). It
holds `.q`'s size as upkeep last measured it, and for each process (a
slot, by pid and start time) the bytes its copies under way reserved and
the bytes its finished copies hold. In use: the measured size, plus the
bytes of copies finished since, plus those reserved. A slot whose
process is gone (a collector killed and restarted) is taken over: its
finished bytes stay counted, its reservations end with it.

It also counts the rounds in which upkeep collected copies no set named,
so that a collector knows when to look whether a copy it remembers is
still there (``collections``).
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
from contextlib import contextmanager
from typing import Iterator

from qtools.qformat.writers import alive, proc_stat

WORD = struct.Struct("<q")
SLOT = struct.Struct("<qqqq")  # pid, start time, bytes reserved, bytes kept
# The header's words, then the slots.
LIMIT, BASE, MARK, WANTED, COLLECTIONS, DEPARTED = range(6)
HEADER_WORDS = 8
PID, START, RESERVED, KEPT = range(4)


class DiskRoom:
    """The ledger (see the module's text); ``limit`` 0: unbounded (only
    ``collections`` is of use then)."""

    def __init__(self, fd: int, slots: int) -> None:
        self.fd = fd
        self.slots = slots
        self._map = mmap.mmap(fd, HEADER_WORDS * WORD.size + slots * SLOT.size)
        self._mine: tuple[int, int] | None = None  # (pid, slot) of this process

    @classmethod
    def create(cls, limit: int | None, writers: int) -> DiskRoom | None:
        """A new ledger for ``writers`` processes at a time (with room for
        as many restarted ones); None where none can be made (no memfd)."""
        slots = 2 * writers + 2
        try:
            fd = os.memfd_create("q-syscollect-room", os.MFD_CLOEXEC)
            os.ftruncate(fd, HEADER_WORDS * WORD.size + slots * SLOT.size)
        except (AttributeError, OSError):
            return None
        room = cls(fd, slots)
        room._put(LIMIT, limit or 0)
        return room

    # ------------------------------------------------------------ words

    def _get(self, word: int) -> int:
        return int(WORD.unpack_from(self._map, word * WORD.size)[0])

    def _put(self, word: int, value: int) -> None:
        WORD.pack_into(self._map, word * WORD.size, value)

    def _slot_at(self, i: int) -> list[int]:
        return list(SLOT.unpack_from(self._map, (HEADER_WORDS * WORD.size) + i * SLOT.size))

    def _set_slot(self, i: int, values: list[int]) -> None:
        SLOT.pack_into(self._map, HEADER_WORDS * WORD.size + i * SLOT.size, *values)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        fcntl.lockf(self.fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.lockf(self.fd, fcntl.LOCK_UN)

    # ------------------------------------------------------------ slots

    def _slot(self) -> int | None:
        """This process's slot, claimed at its first use (under the lock).
        Slots of processes gone are emptied then: their finished bytes stay
        counted, their reservations end."""
        pid = os.getpid()
        if self._mine is not None and self._mine[0] == pid:
            return self._mine[1]
        found = proc_stat(pid)
        start = found[1] if found else 0
        free = None
        for i in range(self.slots):
            s = self._slot_at(i)
            if (s[PID], s[START]) == (pid, start):
                self._mine = (pid, i)
                return i
            if s[PID] and not alive(s[PID], s[START] or None):
                self._put(DEPARTED, self._get(DEPARTED) + s[KEPT])
                s = [0, 0, 0, 0]
                self._set_slot(i, s)
            if free is None and not s[PID]:
                free = i
        if free is None:
            return None
        self._set_slot(free, [pid, start, 0, 0])
        self._mine = (pid, free)
        return free

    def _sums(self) -> tuple[int, int]:
        """Bytes reserved, bytes kept (finished copies, slots taken over too)."""
        reserved, kept = 0, self._get(DEPARTED)
        for i in range(self.slots):
            s = self._slot_at(i)
            reserved += s[RESERVED]
            kept += s[KEPT]
        return reserved, kept

    def _used(self) -> int:
        reserved, kept = self._sums()
        return self._get(BASE) + kept - self._get(MARK) + reserved

    # ------------------------------------------------------------ copies (qformat.copies.Room)

    @property
    def limit(self) -> int:
        return self._get(LIMIT)

    def take(self, nbytes: int) -> bool:
        """Reserve ``nbytes`` for a copy under way; False (and nothing
        reserved, the want noted for upkeep) if `.q` would pass the limit."""
        with self._locked():
            i = self._slot()
            limit = self._get(LIMIT)
            if i is None or (limit and self._used() + nbytes > limit):
                self._put(WANTED, self._get(WANTED) + nbytes)
                return False
            s = self._slot_at(i)
            s[RESERVED] += nbytes
            self._set_slot(i, s)
            return True

    def release(self, nbytes: int, kept: int = 0) -> None:
        """A reservation of ``nbytes`` ends, ``kept`` of them in a finished copy."""
        with self._locked():
            i = self._slot()
            if i is None:
                return
            s = self._slot_at(i)
            s[RESERVED] = max(0, s[RESERVED] - nbytes)
            s[KEPT] += kept
            self._set_slot(i, s)

    # ------------------------------------------------------------ upkeep (the supervisor)

    def used(self) -> int:
        """Bytes of `.q` in use as far as the ledger knows."""
        with self._locked():
            return self._used()

    def mark(self) -> int:
        """Bytes finished copies hold so far: taken before `.q` is measured
        (``measured``), so that those finished meanwhile count twice at
        worst until the next measure, never not at all."""
        with self._locked():
            return self._sums()[1]

    def wanted(self) -> int:
        """Bytes refused for want of room since the last measure: upkeep
        makes that much room besides (within a quarter of the limit)."""
        return self._get(WANTED)

    def measured(self, size: int, mark: int) -> None:
        """`.q` holds ``size`` bytes, measured after ``mark`` was taken."""
        with self._locked():
            self._put(BASE, size)
            self._put(MARK, mark)
            self._put(WANTED, 0)

    def collected(self) -> None:
        """Upkeep removed copies: the collectors look again at those they name."""
        with self._locked():
            self._put(COLLECTIONS, self._get(COLLECTIONS) + 1)

    def collections(self) -> int:
        """How many rounds of upkeep have removed copies so far."""
        return self._get(COLLECTIONS)
