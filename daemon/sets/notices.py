"""Warnings said once per run, whichever collector meets their cause first."""

from __future__ import annotations

import fcntl
import mmap
import os

from qtools.common.blake import blake2b


class Notices:
    """Which warnings the collectors of a run have given: a bitmap of
    message hashes in memory shared with every process forked after it was
    made. The supervisor makes it (``shared_notices``) before it forks the
    collectors, so a refusal is said once per run, not once per CPU: a bit
    is tested and set under a POSIX record lock on the memfd that holds
    the bitmap, so two collectors never both say it. (A hash collision
    silences one: with a thousand messages said, a new one in about 8000.)"""

    BITS = 1 << 23

    def __init__(self) -> None:
        self._fd: int | None = None
        try:
            self._fd = os.memfd_create("q-syscollect-notices", os.MFD_CLOEXEC)
            os.ftruncate(self._fd, self.BITS // 8)
            self._map = mmap.mmap(self._fd, self.BITS // 8)
        except (AttributeError, OSError):  # no memfd: anonymous and MAP_SHARED, unlocked
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            self._map = mmap.mmap(-1, self.BITS // 8)

    def first(self, text: str) -> bool:
        """Has nobody said ``text`` yet? It counts as said from now on."""
        digest = int.from_bytes(blake2b(text.encode(), digest_size=8).digest(), "little")
        byte, bit = divmod(digest % self.BITS, 8)
        if self._fd is not None:
            fcntl.lockf(self._fd, fcntl.LOCK_EX, 1, byte)
        try:
            old = self._map[byte]
            if old & (1 << bit):
                return False
            self._map[byte] = old | (1 << bit)
            return True
        finally:
            if self._fd is not None:
                fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, byte)


_notices: Notices | None = None


def shared_notices() -> Notices:
    """The run's notices: made at the first call, which the supervisor
    makes before it forks the collectors."""
    global _notices
    if _notices is None:
        _notices = Notices()
    return _notices
