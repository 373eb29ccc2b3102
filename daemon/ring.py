"""The perf mmap ring buffer: the only module of the collector that maps memory.

The reader follows perf's protocol (tools/lib/perf/mmap.c): load
``data_head``, read the records in ``[tail, head)``, and only after they have
been used store ``data_tail``, which hands the space back to the kernel.
Records that wrap the end of the buffer are stitched into a copy; the others
are handed out as zero-copy views that stay valid until ``release``.

On x86_64 (TSO) plain aligned 8-byte loads and stores in program order are
the acquire/release the protocol needs, and CPython's ``struct`` reads them
in one instruction (perf-event-abi.md 3.5). Other architectures would need a
fence here.
"""

from __future__ import annotations

import mmap
import struct

from .abi import PAGE_SIZE

_HEAD = 1024
_TAIL = 1032
_U64 = struct.Struct("<Q")
_HEADER = struct.Struct("<IHH")


class RingReader:
    """Reader of one event's ring buffer (1 control page + 2^n data pages)."""

    def __init__(self, fd: int, data_pages: int) -> None:
        if data_pages < 1 or data_pages & (data_pages - 1):
            raise ValueError("data_pages must be a power of two")
        self.mm = mmap.mmap(fd, (1 + data_pages) * PAGE_SIZE, mmap.MAP_SHARED,
                            mmap.PROT_READ | mmap.PROT_WRITE)
        self.view = memoryview(self.mm)
        self.data_offset, self.data_size = struct.unpack_from("<QQ", self.mm, 1040)
        self.tail = _U64.unpack_from(self.mm, _TAIL)[0]
        self.corrupt = 0  # times the reader had to skip to head

    def pending(self) -> int:
        """Bytes the kernel has written that were not yet read."""
        return int(_U64.unpack_from(self.mm, _HEAD)[0] - self.tail)

    def read(self) -> list[memoryview | bytes]:
        """All complete records now in the buffer, oldest first.

        Views point into the ring: use them before calling ``release``.
        """
        head = _U64.unpack_from(self.mm, _HEAD)[0]
        tail = self.tail
        start, size_ = self.data_offset, self.data_size
        mask = size_ - 1
        view = self.view
        out: list[memoryview | bytes] = []
        append = out.append
        while tail < head:
            off = start + (tail & mask)
            _type, _misc, size = _HEADER.unpack_from(view, off)
            if size < 8 or size & 7 or tail + size > head:
                # Never seen from a sane kernel; skip rather than loop.
                self.corrupt += 1
                tail = head
                break
            end = off + size
            if end <= start + size_:
                append(view[off:end])
            else:
                first = view[off:start + size_]
                append(bytes(first) + bytes(view[start:start + size - len(first)]))
            tail += size
        self.tail = tail
        return out

    def release(self) -> None:
        """Give the space of everything read so far back to the kernel."""
        _U64.pack_into(self.mm, _TAIL, self.tail)

    def close(self) -> None:
        self.view.release()
        self.mm.close()
