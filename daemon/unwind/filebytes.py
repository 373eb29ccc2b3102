"""The bytes of an object file that unwinding reads: read into memory, never mapped.

The collector runs as root and unwinds through files that users own. A
user can truncate such a file at any moment, and a page of a mapping past
a file's new end is SIGBUS to whoever touches it: mapped, their file
would kill the collector. So no object file is mapped. What unwinding
needs (the ELF and program headers, the section headers, `.eh_frame_hdr`,
`.eh_frame` or `.debug_frame`) is read with pread into memory: for each
object at most ``READ_BUDGET`` bytes, within ``READ_SECONDS``. A file cut
while it is read gives fewer bytes, which parse as damaged or missing CFI.

Both kinds of source give ``read(offset, size)``: ``FileBytes`` reads an
open descriptor; ``MemoryBytes`` slices an image already in memory (the
vDSO, a JIT's unwind image, tests).
"""

from __future__ import annotations

import os
import stat
import time
from typing import Callable, Protocol

from qtools.qformat.objects.ehframe import Buffer

READ_BUDGET = 64 << 20
"""Bytes read from one object at most: libLLVM's `.eh_frame` and its
`.eh_frame_hdr` are 6 MiB; a region past what is left is not read."""

READ_SECONDS = 2.0
"""Time spent reading one object at most, checked between reads of CHUNK
bytes (a slow disk or network file system): what was read by then is what
there is."""

CHUNK = 1 << 20


class Source(Protocol):
    """Where an object's bytes come from."""

    size: int

    def read(self, offset: int, size: int) -> Buffer:
        """Up to ``size`` bytes at file offset ``offset`` (fewer, or none)."""


class MemoryBytes:
    """An object already in memory (its whole image)."""

    def __init__(self, data: Buffer) -> None:
        self._view = memoryview(data)
        self.size = len(self._view)

    def read(self, offset: int, size: int) -> Buffer:
        if offset < 0 or size <= 0:
            return b""
        return self._view[offset:offset + size]


class FileBytes:
    """An object read through its open descriptor, within a byte budget and
    a deadline (``read_bytes`` counts what was read). The file may shrink
    under the reader: a read past its end is short, never a fault."""

    def __init__(self, fd: int, budget: int = READ_BUDGET, seconds: float = READ_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        st = os.fstat(fd)
        self.fd = fd
        self.size = st.st_size if stat.S_ISREG(st.st_mode) else 0
        self.left = budget
        self.read_bytes = 0
        self._clock = clock
        self._deadline = clock() + seconds

    def read(self, offset: int, size: int) -> Buffer:
        """Up to ``size`` bytes at ``offset``: fewer where the file ends (it
        may have been cut since it was opened) or the deadline passes, none
        where they do not fit in what is left of the budget."""
        size = min(size, self.size - offset)
        if offset < 0 or size <= 0 or size > self.left:
            return b""
        self.left -= size
        buf = bytearray(size)
        view = memoryview(buf)
        got = 0
        while got < size and self._clock() < self._deadline:
            try:
                n = os.preadv(self.fd, [view[got:got + CHUNK]], offset + got)
            except OSError:
                break
            if not n:
                break
            got += n
        view.release()
        del buf[got:]
        self.read_bytes += got
        return buf


class Cursor:
    """seek and read over a source, for ``qformat.elfhdr``'s file readers."""

    def __init__(self, source: Source) -> None:
        self.source, self.pos = source, 0

    def seek(self, pos: int) -> None:
        self.pos = pos

    def read(self, n: int) -> bytes:
        out = bytes(self.source.read(self.pos, n))
        self.pos += len(out)
        return out
