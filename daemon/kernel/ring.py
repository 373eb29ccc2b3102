"""The perf mmap ring buffer: the only module of the collector that maps memory.

The reader follows perf's protocol (tools/lib/perf/mmap.c): load
``data_head``, read the records in ``[tail, head)``, and only after they have
been used store ``data_tail``, which hands the space back to the kernel.
Records that wrap the end of the buffer are stitched into a copy; the others
are handed out as zero-copy views that stay valid until ``release``.

Memory ordering (per machine in daemon/kernel/arch.py): the kernel writes the
records, then (after a write barrier) ``data_head``. The loads of the records
must not be performed before the load of ``data_head``, and must be done
before the store of ``data_tail``; include/uapi/linux/perf_event.h asks for
``smp_rmb()`` after the first and ``smp_mb()`` before the second. CPython's
``struct`` reads and writes an aligned 8-byte field in one instruction, in
program order.

- x86_64 is TSO: a load is not reordered with older loads, a store not with
  older loads, so program order is the order the protocol needs: nothing
  is added.
- aarch64 (and any machine ``arch`` does not mark ``ordered``): a full
  barrier runs after the load of data_head and before the store of
  data_tail, once per read and once per release, not per record. It is
  membarrier(2) MEMBARRIER_CMD_PRIVATE_EXPEDITED, documented to make every
  running thread of the process, the caller included, pass "through a
  state where all memory accesses to user-space addresses match program
  order between entry to and return from the system call"
  (include/uapi/linux/membarrier.h; the kernel issues smp_mb() on entry and
  exit). The process registers for it once. Where the kernel lacks it
  (before 4.14, or CONFIG_MEMBARRIER off) the barrier is acquiring and
  releasing a ``threading.Lock``: POSIX (XBD 4.12) lists sem_trywait and
  sem_post among the functions that synchronize memory, and CPython 3.11
  builds its locks on them on Linux (Python/thread_pthread.h,
  USE_SEMAPHORES: an uncontended acquire is sem_trywait). That is the
  weaker promise: glibc gives those calls acquire and release ordering,
  not a two-way fence.
"""

from __future__ import annotations

import errno
import functools
import mmap
import struct
import threading
from typing import Callable

from . import arch, syscalls
from .abi import PAGE_SIZE

_HEAD = 1024
_TAIL = 1032
_U64 = struct.Struct("<Q")
_HEADER = struct.Struct("<IHH")
_FENCE_LOCK = threading.Lock()


def lock_fence() -> None:
    """The fallback barrier: an uncontended lock taken and given back."""
    with _FENCE_LOCK:
        pass


def membarrier_fence() -> None:
    """A full barrier on this thread (membarrier(2))."""
    try:
        syscalls.membarrier(syscalls.MEMBARRIER_CMD_PRIVATE_EXPEDITED)
    except OSError as e:
        if e.errno != errno.EPERM:
            raise
        # Registration belongs to the address space: a forked child has none yet.
        syscalls.membarrier(syscalls.MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED)
        syscalls.membarrier(syscalls.MEMBARRIER_CMD_PRIVATE_EXPEDITED)


def choose_fence(ordered: bool) -> Callable[[], None] | None:
    """The barrier the ring needs on a machine (None: program order does)."""
    if ordered:
        return None
    try:
        membarrier_fence()
    except (OSError, arch.UnsupportedMachine):
        return lock_fence
    return membarrier_fence


@functools.cache
def host_fence() -> Callable[[], None] | None:
    """The barrier of the machine this process runs on."""
    try:
        ordered = arch.host().ordered
    except arch.UnsupportedMachine:
        ordered = False  # cannot collect there anyway; never assume an order
    return choose_fence(ordered)


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
        self.fence = host_fence()

    def pending(self) -> int:
        """Bytes the kernel has written that were not yet read."""
        return int(_U64.unpack_from(self.mm, _HEAD)[0] - self.tail)

    def read(self) -> list[memoryview | bytes]:
        """All complete records now in the buffer, oldest first.

        Views point into the ring: use them before calling ``release``.
        """
        head = _U64.unpack_from(self.mm, _HEAD)[0]
        if self.fence is not None:
            self.fence()  # smp_rmb(): no record is read before data_head
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

    def skip(self) -> None:
        """Hand back everything written so far, unread (a ring kept only
        for its wake-ups: PerfSource's doorbell)."""
        self.tail = _U64.unpack_from(self.mm, _HEAD)[0]
        self.release()

    def release(self) -> None:
        """Give the space of everything read so far back to the kernel."""
        if self.fence is not None:
            self.fence()  # smp_mb(): every record is read before the kernel may reuse it
        _U64.pack_into(self.mm, _TAIL, self.tail)

    def close(self) -> None:
        self.view.release()
        self.mm.close()
