"""Where a set's kernel addresses begin, as a reader decides it.

The collector tells kernel from user addresses as perf does, by the
sample's cpumode and the callchain's ``PERF_CONTEXT_*`` markers, and writes
its decision as ``q:kernel-from`` (docs/q-format.md 4.1): the lowest
kernel-mode address the set holds. A machine's user half lies below its
kernel half, so every address of the set at or above it is the kernel's and
every one below is user space. There is no single kernel start to fall back
on: x86-64 with 5-level paging puts the kernel half at
0xff00000000000000, aarch64's VA_BITS moves it. For sets without the key
(older files, or a set with no kernel address) the lowest kernel address
the architecture named by ``q:arch`` can have is used: the start of its
kernel half at the largest user space it allows, so no user address is
ever taken for the kernel's.

The collector's own machine facts (syscall numbers, register layouts, the
ring's memory ordering) are in ``qtools.daemon.kernel.arch``.
"""

from __future__ import annotations

from .info import TaskInfo

#: Lowest address of the kernel half per ``q:arch`` (uname -m), for files
#: without ``q:kernel-from``. x86_64: 4-level paging gives 0xffff800000000000,
#: 5-level 0xff00000000000000; the lower one keeps a 5-level kernel's addresses
#: kernel ones, and user space ends below 2^56 either way. aarch64: the
#: kernel half starts at 2^64 - 2^VA_BITS, VA_BITS at most 52 (user space is
#: at most 52 bits too); the usual 48-bit kernels start at 0xffff000000000000.
KERNEL_FALLBACK: dict[str, int] = {
    "x86_64": 0xFF00_0000_0000_0000,
    "aarch64": 0xFFF0_0000_0000_0000,
    "i386": 0xC000_0000,
    "i686": 0xC000_0000,
}
#: An architecture not in the table: the upper half of a 64-bit space.
DEFAULT_KERNEL_FALLBACK = 0x8000_0000_0000_0000


def kernel_start(task: TaskInfo) -> int:
    """The lowest kernel address of the set ``task`` describes: its
    ``q:kernel-from`` if written, else its architecture's fallback."""
    if task.kernel_from is not None:
        return task.kernel_from
    return KERNEL_FALLBACK.get(task.arch or "", DEFAULT_KERNEL_FALLBACK)
